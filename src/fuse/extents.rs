//! Byte extents a `rw` mount remembers between writes to `data` files: what a handle opened
//! with `O_TRUNC` has written (the rest reads zeros once it is flushed, as in a truncated file),
//! and where appends through an open file continue when the last one ended inside a record.

use std::collections::BTreeMap;
use std::ops::Range;

/// Disjoint, non-adjacent byte ranges.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RangeSet {
    /// Start → end of each range.
    ranges: BTreeMap<u64, u64>,
}

impl RangeSet {
    /// Adds `range`, merging it with the ranges it touches.
    pub fn insert(&mut self, range: Range<u64>) {
        if range.is_empty() {
            return;
        }
        let (mut start, mut end) = (range.start, range.end);
        // The range before may reach into (or up to) this one.
        if let Some((&s, &e)) = self.ranges.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
            }
        }
        let touched: Vec<u64> = self.ranges.range(start..=end).map(|(&s, _)| s).collect();
        for s in touched {
            if let Some(e) = self.ranges.remove(&s) {
                end = end.max(e);
            }
        }
        self.ranges.insert(start, end);
    }

    /// The parts of `0..end` that no range covers, in order.
    pub fn gaps(&self, end: u64) -> Vec<Range<u64>> {
        let mut gaps = Vec::new();
        let mut at = 0;
        for (&s, &e) in &self.ranges {
            if s >= end {
                break;
            }
            if s > at {
                gaps.push(at..s);
            }
            at = at.max(e);
        }
        if at < end {
            gaps.push(at..end);
        }
        gaps
    }
}

/// What a `data` handle opened with `O_TRUNC` has covered. netCDF cannot shrink a variable,
/// so the file keeps its size; what the handle leaves unwritten becomes zeros when it is
/// flushed, as a truncated file reads zeros past what was written again. `cp` relies on that:
/// it skips the holes of a sparse source, expecting the target to read zeros there.
#[derive(Debug)]
pub struct Truncation {
    covered: RangeSet,
    /// The end of the file as this handle made it: its size at the open, or further where the
    /// handle wrote or truncated past that.
    end: u64,
}

impl Truncation {
    /// A handle opened on a file of `size` bytes.
    pub fn new(size: u64) -> Self {
        Truncation {
            covered: RangeSet::default(),
            end: size,
        }
    }

    /// The handle wrote `range`.
    pub fn wrote(&mut self, range: Range<u64>) {
        self.end = self.end.max(range.end);
        self.covered.insert(range);
    }

    /// The handle grew the file to `size` (a truncate): the new bytes are a hole.
    pub fn grew_to(&mut self, size: u64) {
        self.end = self.end.max(size);
    }

    /// The ranges to zero, in a file of `size` bytes. Each range zeroed is then recorded with
    /// [`Truncation::wrote`], so that a later flush does not zero what another writer put
    /// there since.
    pub fn unwritten(&self, size: u64) -> Vec<Range<u64>> {
        self.covered.gaps(self.end.min(size))
    }
}

/// Where the next append through one open file continues when its last one ended inside a
/// record. The file's size is then the record's end (the rest of the record reads as fill),
/// but a writer appending a stream in pieces that do not fall on records (`cat >> data`)
/// must continue where its last piece ended, not after the fill. Another open file appends
/// after the fill, at the end of the file, as POSIX says.
#[derive(Debug, Default)]
pub struct AppendTail {
    /// The `data` size right after the last append, and where that append ended.
    last: Option<(u64, u64)>,
}

impl AppendTail {
    /// Where an append writes to a `data` file of `size` bytes.
    pub fn offset(&self, size: u64) -> u64 {
        match self.last {
            Some((at_size, end)) if at_size == size => end,
            _ => size,
        }
    }

    /// Records an append of `written`, after which the file is `size` bytes.
    pub fn appended(&mut self, written: Range<u64>, size: u64) {
        self.last = (written.end < size).then_some((size, written.end));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The set covers exactly the bytes inserted, as a bitmap of them says.
        #[test]
        fn range_set_gaps_are_the_bytes_never_inserted(
            inserts in proptest::collection::vec((0u64..200, 0u64..40), 0..30),
            end in 0u64..260,
        ) {
            let mut set = RangeSet::default();
            let mut covered = [false; 260];
            for (start, len) in inserts {
                set.insert(start..start + len);
                for b in &mut covered[start as usize..(start + len) as usize] {
                    *b = true;
                }
            }
            let mut gap_bytes = [false; 260];
            let gaps = set.gaps(end);
            for pair in gaps.windows(2) {
                prop_assert!(pair[0].end < pair[1].start, "gaps not disjoint and apart: {gaps:?}");
            }
            for g in &gaps {
                prop_assert!(!g.is_empty() && g.end <= end);
                for b in &mut gap_bytes[g.start as usize..g.end as usize] {
                    *b = true;
                }
            }
            for i in 0..end as usize {
                prop_assert_eq!(gap_bytes[i], !covered[i], "byte {}", i);
            }
        }
    }

    #[test]
    fn truncation_zeroes_holes_once_and_up_to_its_end() {
        let mut t = Truncation::new(100);
        t.wrote(0..10);
        t.wrote(30..40);
        assert_eq!(t.unwritten(100), vec![10..30, 40..100]);
        assert_eq!(t.unwritten(35), vec![10..30]);
        t.wrote(10..30);
        t.wrote(40..100);
        assert_eq!(t.unwritten(100), vec![]);
        // Grown by a truncate, then by a sibling variable's records: only the former is its.
        t.grew_to(150);
        assert_eq!(t.unwritten(200), vec![100..150]);
    }

    #[test]
    fn appends_continue_a_partial_record_until_the_size_changes() {
        let mut tail = AppendTail::default();
        assert_eq!(tail.offset(16), 16);
        // Records of 8 bytes: a 5-byte append to 16 bytes makes 24.
        tail.appended(16..21, 24);
        assert_eq!(tail.offset(24), 21);
        // The next piece continues there and ends inside the following record.
        tail.appended(21..28, 32);
        assert_eq!(tail.offset(32), 28);
        // The size changed elsewhere (a sibling grew the dimension): append at the end.
        assert_eq!(tail.offset(40), 40);
        // An append that ends on a record leaves nothing to continue.
        tail.appended(28..32, 32);
        assert_eq!(tail.offset(32), 32);
    }
}
