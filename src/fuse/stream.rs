//! Where the reader of an open `data` file is heading: from the offsets of its reads, what to
//! load into the chunk cache ahead of it and what to release behind it.

/// The variable and prefetch window a [`ReadStream`] is judged against.
#[derive(Debug, Clone, Copy)]
pub(super) struct Geometry {
    /// Bytes per element of `data`.
    pub element_size: u64,
    /// Elements prefetched ahead of a sequential reader.
    pub window: u64,
    /// Elements in the variable.
    pub total: u64,
    /// Whether the variable is larger than the chunk cache, so that chunks the reader has
    /// passed are released rather than left to cycle everything else out of the cache.
    pub scan: bool,
}

/// What one read asks of the prefetcher, as element ranges `[lo, hi)`.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Step {
    /// Chunks the reader has gone past, to release from the cache.
    pub release: Option<(u64, u64)>,
    /// Chunks to load into the cache ahead of the reader.
    pub prefetch: Option<(u64, u64)>,
}

/// Reads that must continue a stream before anything is prefetched for it.
const CONFIRMING_READS: u32 = 2;

/// The reads of one open `data` file seen as a sequential stream.
#[derive(Debug, Default)]
pub(super) struct ReadStream {
    /// The furthest byte offset a read of the current stream has ended at.
    furthest_end: u64,
    /// How many reads have continued the current stream.
    continuing_reads: u32,
    /// The element up to which the cache has been asked to prefetch.
    prefetched_to: u64,
    /// The element below which chunks were released.
    released_below: u64,
}

impl ReadStream {
    /// Takes a read of bytes `[offset, end)` into account.
    ///
    /// Kernel readahead sends several requests at once, so they may arrive out of order: a
    /// read continues the stream when it starts within half a window of the furthest end
    /// seen. A read elsewhere starts a new stream there, without prefetching yet: readers
    /// often look at the last page before reading from the start (the kernel does it for
    /// `numpy.fromfile`), and a stream stuck at the end of the file would never prefetch
    /// again. Nothing is prefetched until [`CONFIRMING_READS`] reads in a row have continued
    /// the stream: one random read in twenty-five lands within half a window of the one
    /// before it (with a 16 MiB window over 400 MiB), and each such pair would otherwise load
    /// a whole window into the cache, and hold it in memory while it is decoded.
    pub fn advance(&mut self, offset: u64, end: u64, g: &Geometry) -> Step {
        let esz = g.element_size.max(1);
        let next = end.div_ceil(esz);
        let near = g.window.saturating_mul(esz) / 2;
        let continues = offset <= self.furthest_end.saturating_add(near)
            && offset.saturating_add(near) >= self.furthest_end;
        if !continues {
            *self = ReadStream {
                furthest_end: end,
                continuing_reads: 0,
                prefetched_to: next,
                released_below: offset / esz,
            };
            return Step::default();
        }
        self.furthest_end = self.furthest_end.max(end);
        self.continuing_reads = self.continuing_reads.saturating_add(1);
        if self.continuing_reads < CONFIRMING_READS {
            self.prefetched_to = self.prefetched_to.max(next);
            return Step::default();
        }
        // Half a window behind, for requests still in flight.
        let behind = offset.saturating_sub(near) / esz;
        let release = (g.scan && behind > self.released_below)
            .then(|| (std::mem::replace(&mut self.released_below, behind), behind));
        let prefetch = (next.saturating_add(g.window / 2) >= self.prefetched_to)
            .then(|| {
                let lo = next.max(self.prefetched_to);
                let hi = next.saturating_add(g.window).min(g.total);
                self.prefetched_to = self.prefetched_to.max(hi);
                (lo, hi)
            })
            .filter(|(lo, hi)| lo < hi);
        Step { release, prefetch }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;

    /// A float64 variable of 400 MiB with a 32 MiB window, larger than the cache.
    fn geometry() -> Geometry {
        Geometry {
            element_size: 8,
            window: 32 * MIB / 8,
            total: 400 * MIB / 8,
            scan: true,
        }
    }

    /// Reads the whole file in `request`-byte reads from `start`, collecting what was
    /// prefetched, as byte ranges.
    fn read_through(stream: &mut ReadStream, start: u64, request: u64) -> Vec<(u64, u64)> {
        let g = geometry();
        (start..g.total * 8)
            .step_by(request as usize)
            .filter_map(|at| stream.advance(at, at + request, &g).prefetch)
            .map(|(lo, hi)| (lo * 8, hi * 8))
            .collect()
    }

    /// Whether `ranges` cover `[from, to)` without gaps or overlaps.
    fn tiles(ranges: &[(u64, u64)], from: u64, to: u64) -> bool {
        let mut at = from;
        for &(lo, hi) in ranges {
            if lo != at || hi <= lo {
                return false;
            }
            at = hi;
        }
        at == to
    }

    #[test]
    fn a_sequential_reader_gets_everything_after_its_second_read_prefetched_once() {
        let mut stream = ReadStream::default();
        let got = read_through(&mut stream, 0, MIB);
        assert!(tiles(&got, 2 * MIB, 400 * MIB), "{got:?}");
    }

    #[test]
    fn a_read_of_the_last_page_first_does_not_stop_the_prefetch_of_a_reader_from_the_start() {
        let g = geometry();
        let mut stream = ReadStream::default();
        let last = 400 * MIB - 4096;
        assert_eq!(stream.advance(last, 400 * MIB, &g), Step::default());
        // The read at 0 starts the stream; prefetching starts with the second read after it.
        assert_eq!(stream.advance(0, MIB, &g), Step::default());
        let got = read_through(&mut stream, MIB, MIB);
        assert!(tiles(&got, 3 * MIB, 400 * MIB), "{got:?}");
    }

    #[test]
    fn requests_arriving_slightly_out_of_order_continue_the_stream() {
        let g = geometry();
        let mut stream = ReadStream::default();
        let mut fetched = Vec::new();
        for at in [0, 1, 3, 2, 4, 6, 5, 7] {
            if let Some(range) = stream.advance(at * MIB, (at + 1) * MIB, &g).prefetch {
                fetched.push(range);
            }
        }
        assert_eq!(fetched, vec![(2 * MIB / 8, 34 * MIB / 8)]);
    }

    #[test]
    fn reads_far_from_each_other_prefetch_nothing() {
        let g = geometry();
        let mut stream = ReadStream::default();
        for at in [300, 10, 200, 100, 390, 50, 0, 250].map(|m| m * MIB) {
            assert_eq!(
                stream.advance(at, at + 4096, &g),
                Step::default(),
                "at {at}"
            );
        }
    }

    #[test]
    fn random_reads_that_land_in_pairs_prefetch_nothing_until_a_third_continues() {
        let g = geometry();
        let mut stream = ReadStream::default();
        // Each pair is within half a window: with one confirming read, every pair would
        // have loaded a window.
        for at in [300, 301, 10, 12, 200, 199, 100, 104].map(|m| m * MIB) {
            assert_eq!(
                stream.advance(at, at + 4096, &g),
                Step::default(),
                "at {at}"
            );
        }
        let third = stream.advance(105 * MIB, 105 * MIB + 4096, &g);
        assert_eq!(
            third.prefetch,
            Some(((105 * MIB + 4096) / 8, (105 * MIB + 4096) / 8 + g.window))
        );
    }

    #[test]
    fn chunks_behind_a_scanning_reader_are_released_once() {
        let g = geometry();
        let mut stream = ReadStream::default();
        let mut released = Vec::new();
        for at in (0..400).map(|m| m * MIB) {
            if let Some(range) = stream.advance(at, at + MIB, &g).release {
                released.push(range);
            }
        }
        // Everything up to half a window behind the last read, without overlaps.
        assert!(tiles(&released, 0, (399 - 16) * MIB / 8), "{released:?}");
        let small = Geometry { scan: false, ..g };
        let mut stream = ReadStream::default();
        assert!((0..400)
            .map(|m| stream.advance(m * MIB, (m + 1) * MIB, &small))
            .all(|step| step.release.is_none()));
    }
}
