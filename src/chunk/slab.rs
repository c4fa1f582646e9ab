//! Hyperslab geometry: validation, which chunks a slab touches, and copying between a chunk
//! and the slab's C-order buffer.

use super::Hyperslab;
use crate::{Error, Result};

/// Checks `slab` against an array of `shape` and returns the number of elements it selects.
pub(crate) fn validate(shape: &[u64], slab: &Hyperslab) -> Result<u64> {
    let rank = shape.len();
    if slab.start.len() != rank || slab.count.len() != rank || slab.stride.len() != rank {
        return Err(Error::InvalidHyperslab(format!(
            "rank {} expected, got start/count/stride of lengths {}/{}/{}",
            rank,
            slab.start.len(),
            slab.count.len(),
            slab.stride.len()
        )));
    }
    let mut n: u64 = 1;
    for (d, &len) in shape.iter().enumerate() {
        let (start, count, stride) = (slab.start[d], slab.count[d], slab.stride[d]);
        if stride == 0 {
            return Err(Error::InvalidHyperslab(format!(
                "stride 0 in dimension {d}"
            )));
        }
        if count == 0 {
            if start > len {
                return Err(Error::InvalidHyperslab(format!(
                    "start {start} beyond length {len} in dimension {d}"
                )));
            }
        } else {
            let last = (count - 1)
                .checked_mul(stride)
                .and_then(|x| x.checked_add(start));
            if !matches!(last, Some(l) if l < len) {
                let reach = match (last, len) {
                    (_, 0) => "but it is empty".to_string(),
                    (Some(l), _) => format!("reaches index {l}, past the last, {}", len - 1),
                    (None, _) => "reaches beyond any index".to_string(),
                };
                return Err(Error::InvalidHyperslab(format!(
                    "start {start}, count {count}, stride {stride} in dimension {d} (length \
                     {len}) {reach}"
                )));
            }
        }
        n = n.saturating_mul(count);
    }
    Ok(n)
}

/// The part of a slab that one chunk serves along one dimension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    /// The chunk's index along the dimension.
    pub chunk: u64,
    /// First slab index (`k`, counted in strides) inside the chunk.
    pub k_lo: u64,
    /// One past the last.
    pub k_hi: u64,
}

/// Along one dimension: the chunks of size `chunk` holding `start + k*stride` for
/// `k < count`, in increasing order, each with its `k` range.
pub(crate) fn spans(start: u64, count: u64, stride: u64, chunk: u64) -> Vec<Span> {
    let mut out = Vec::new();
    let mut k = 0;
    while k < count {
        let pos = start + k * stride;
        let c = pos / chunk;
        let end = (c + 1) * chunk;
        let k_hi = count.min((end - start).div_ceil(stride));
        out.push(Span {
            chunk: c,
            k_lo: k,
            k_hi,
        });
        k = k_hi;
    }
    out
}

/// Number of slab indices `k < count` with `start + k*stride < len`.
pub(crate) fn clipped_count(start: u64, count: u64, stride: u64, len: u64) -> u64 {
    if start >= len {
        0
    } else {
        count.min((len - start).div_ceil(stride))
    }
}

/// How one chunk maps onto the slab buffer (all sizes in elements except `esize`).
#[derive(Debug)]
pub(crate) struct Mapping<'a> {
    /// Slab start per dimension (in array coordinates).
    pub start: &'a [u64],
    /// Slab stride per dimension.
    pub stride: &'a [u64],
    /// Chunk shape.
    pub chunk_shape: &'a [u64],
    /// Element strides of the slab buffer (C order over the slab's full count).
    pub out_strides: &'a [u64],
    /// Element size in bytes.
    pub esize: usize,
}

impl Mapping<'_> {
    /// Calls `f(chunk_byte_offset, buffer_byte_offset, run)` for each piece of the chunk at
    /// `spans` (one per dimension); `run` is the number of elements (consecutive in both when
    /// the last stride is 1, otherwise exactly 1). `base` (in elements) is subtracted from
    /// buffer offsets, for callers working on a sub-slice.
    fn for_each_run(&self, spans: &[Span], base: u64, mut f: impl FnMut(usize, usize, usize)) {
        let rank = spans.len();
        if rank == 0 {
            f(0, 0, 1);
            return;
        }
        let mut cstrides = vec![1u64; rank];
        for d in (0..rank - 1).rev() {
            cstrides[d] = cstrides[d + 1] * self.chunk_shape[d + 1];
        }
        let last = rank - 1;
        let es = self.esize as u64;
        // Offsets of slab index k along dimension d, inside the chunk and in the buffer.
        let src_of = |d: usize, k: u64| {
            (self.start[d] + k * self.stride[d] - spans[d].chunk * self.chunk_shape[d])
                * cstrides[d]
        };
        let dst_of = |d: usize, k: u64| k * self.out_strides[d];
        let contiguous = self.stride[last] == 1;
        // Fold trailing dimensions that the slab covers whole in this chunk and in the buffer
        // into one run, so a chunk that maps onto a contiguous block is a single copy.
        let full = |d: usize| {
            let s = spans[d];
            self.stride[d] == 1
                && s.k_hi - s.k_lo == self.chunk_shape[d]
                && src_of(d, s.k_lo) == 0
                && self.out_strides[d - 1] == self.out_strides[d] * self.chunk_shape[d]
        };
        let mut j = last;
        if contiguous {
            while j > 0 && full(j) && self.stride[j - 1] == 1 {
                j -= 1;
            }
        }
        let run_len: u64 = spans[j..].iter().map(|s| s.k_hi - s.k_lo).product();
        let mut ks: Vec<u64> = spans.iter().map(|s| s.k_lo).collect();
        loop {
            let mut src = 0;
            let mut dst = 0;
            for (d, &k) in ks[..j].iter().enumerate() {
                src += src_of(d, k);
                dst += dst_of(d, k);
            }
            if contiguous {
                // Folded dimensions start at offset 0, so only dimension j contributes.
                let s = src + src_of(j, ks[j]);
                let o = dst + dst_of(j, ks[j]) - base;
                f((s * es) as usize, (o * es) as usize, run_len as usize);
            } else {
                for k in spans[last].k_lo..spans[last].k_hi {
                    let s = src + src_of(last, k);
                    let o = dst + dst_of(last, k) - base;
                    f((s * es) as usize, (o * es) as usize, 1);
                }
            }
            // Next index over the outer dimensions.
            let mut d = j;
            loop {
                if d == 0 {
                    return;
                }
                d -= 1;
                ks[d] += 1;
                if ks[d] < spans[d].k_hi {
                    break;
                }
                ks[d] = spans[d].k_lo;
            }
        }
    }

    /// When the chunk at `spans` is selected whole and lands as one contiguous block of the
    /// buffer (which starts at element `base` of the slab buffer), that block's byte offset.
    pub(crate) fn whole_block(&self, spans: &[Span], base: u64) -> Option<usize> {
        let whole = spans.iter().enumerate().all(|(d, s)| {
            self.stride[d] == 1
                && s.k_hi - s.k_lo == self.chunk_shape[d]
                && self.start[d] + s.k_lo == s.chunk * self.chunk_shape[d]
        });
        if !whole {
            return None;
        }
        let (mut runs, mut at) = (0usize, None);
        self.for_each_run(spans, base, |s, o, _| {
            runs += 1;
            at = (s == 0).then_some(o);
        });
        at.filter(|_| runs == 1)
    }

    /// When the chunk's selected elements are one contiguous run in the chunk and in the
    /// buffer (which starts at element `base` of the slab buffer): the run's byte offset in
    /// the chunk, its byte offset in the buffer and its length in bytes.
    pub(crate) fn single_run(&self, spans: &[Span], base: u64) -> Option<(usize, usize, usize)> {
        let (mut runs, mut first) = (0usize, None);
        self.for_each_run(spans, base, |s, o, n| {
            runs += 1;
            first = Some((s, o, n * self.esize));
        });
        first.filter(|_| runs == 1)
    }

    /// Copies the chunk's selected elements into `out` (which starts at element `base` of the
    /// slab buffer).
    pub(crate) fn scatter(&self, spans: &[Span], chunk: &[u8], out: &mut [u8], base: u64) {
        self.for_each_run(spans, base, |s, o, n| {
            let len = n * self.esize;
            out[o..o + len].copy_from_slice(&chunk[s..s + len]);
        });
    }

    /// Fills the chunk's selected elements of `out` with `fill` (one element).
    pub(crate) fn scatter_fill(&self, spans: &[Span], fill: &[u8], out: &mut [u8], base: u64) {
        self.for_each_run(spans, base, |_, o, n| {
            for slot in out[o..o + n * self.esize].chunks_exact_mut(self.esize) {
                slot.copy_from_slice(fill);
            }
        });
    }

    /// Copies the slab buffer's elements that fall in this chunk into `chunk`.
    pub(crate) fn gather(&self, spans: &[Span], data: &[u8], chunk: &mut [u8]) {
        self.for_each_run(spans, 0, |s, o, n| {
            let len = n * self.esize;
            chunk[s..s + len].copy_from_slice(&data[o..o + len]);
        });
    }
}

/// C-order element strides of an array of `shape`.
pub(crate) fn c_strides(shape: &[u64]) -> Vec<u64> {
    let mut strides = vec![1u64; shape.len()];
    for d in (0..shape.len().saturating_sub(1)).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    strides
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slab(start: &[u64], count: &[u64], stride: &[u64]) -> Hyperslab {
        Hyperslab {
            start: start.to_vec(),
            count: count.to_vec(),
            stride: stride.to_vec(),
        }
    }

    #[test]
    fn validation() {
        assert_eq!(validate(&[4, 5], &Hyperslab::whole(&[4, 5])).unwrap(), 20);
        assert_eq!(
            validate(&[4, 5], &slab(&[1, 0], &[2, 3], &[2, 2])).unwrap(),
            6
        );
        assert!(validate(&[4, 5], &slab(&[1, 0], &[2, 3], &[3, 2])).is_err());
        assert!(validate(&[4], &slab(&[0], &[1], &[0])).is_err());
        assert!(validate(&[4], &slab(&[0, 0], &[1, 1], &[1, 1])).is_err());
        assert_eq!(validate(&[4], &slab(&[4], &[0], &[1])).unwrap(), 0);
        assert!(validate(&[4], &slab(&[5], &[0], &[1])).is_err());
        assert!(validate(&[4], &slab(&[1], &[2], &[u64::MAX])).is_err());
        assert_eq!(validate(&[], &slab(&[], &[], &[])).unwrap(), 1);
    }

    /// The message names the index the hyperslab reaches and the last one there is, not a
    /// sum that "exceeds" a length it equals.
    #[test]
    fn a_hyperslab_past_the_end_names_the_index_it_reaches() {
        let message = |shape: &[u64], s: Hyperslab| validate(shape, &s).unwrap_err().to_string();
        let m = message(&[3], slab(&[0], &[4], &[1]));
        assert!(m.contains("reaches index 3, past the last, 2"), "{m}");
        assert!(!m.contains("exceeds"), "{m}");
        let m = message(&[0], slab(&[0], &[1], &[1]));
        assert!(m.contains("(length 0) but it is empty"), "{m}");
        let m = message(&[4], slab(&[1], &[2], &[u64::MAX]));
        assert!(m.contains("beyond any index"), "{m}");
    }

    #[test]
    fn whole_blocks_are_found() {
        // A 4x6 array in chunks of 2x6: each chunk is 12 contiguous elements of the whole.
        let (start, stride, chunk) = ([0u64, 0], [1u64, 1], [2u64, 6]);
        let out_strides = c_strides(&[4, 6]);
        let m = Mapping {
            start: &start,
            stride: &stride,
            chunk_shape: &chunk,
            out_strides: &out_strides,
            esize: 4,
        };
        let row1 = [spans(0, 4, 1, 2)[1], spans(0, 6, 1, 6)[0]];
        assert_eq!(m.whole_block(&row1, 0), Some(12 * 4));
        assert_eq!(m.whole_block(&row1, 12), Some(0));
        // Chunks of 2x3: two runs of 3 per chunk, not one block.
        let chunk = [2u64, 3];
        let m = Mapping {
            chunk_shape: &chunk,
            ..m
        };
        let first = [spans(0, 4, 1, 2)[0], spans(0, 6, 1, 3)[0]];
        assert_eq!(m.whole_block(&first, 0), None);
        // Part of a chunk only.
        let (start, out_strides) = ([1u64, 0], c_strides(&[3, 6]));
        let chunk = [2u64, 6];
        let m = Mapping {
            start: &start,
            chunk_shape: &chunk,
            out_strides: &out_strides,
            ..m
        };
        let part = [spans(1, 3, 1, 2)[0], spans(0, 6, 1, 6)[0]];
        assert_eq!(m.whole_block(&part, 0), None);
        // Row 1 of the chunk of rows 0-1, whole: 6 elements at element 6 of the chunk.
        assert_eq!(m.single_run(&part, 0), Some((6 * 4, 0, 6 * 4)));
        // Columns 1-2 of rows 1 and 2: two runs.
        let (start, out_strides) = ([1u64, 1], c_strides(&[2, 2]));
        let m = Mapping {
            start: &start,
            out_strides: &out_strides,
            ..m
        };
        let cols = [spans(1, 2, 1, 2)[0], spans(1, 2, 1, 6)[0]];
        assert_eq!(m.single_run(&cols, 0), Some((7 * 4, 0, 2 * 4)));
        let both = [spans(1, 2, 1, 2)[1], spans(1, 2, 1, 6)[0]];
        assert_eq!(m.single_run(&both, 0), Some((4, 2 * 4, 2 * 4)));
    }

    #[test]
    fn spans_skip_untouched_chunks() {
        // positions 1, 11, 21 with chunks of 3: chunks 0, 3, 7.
        let s = spans(1, 3, 10, 3);
        let chunks: Vec<u64> = s.iter().map(|s| s.chunk).collect();
        assert_eq!(chunks, vec![0, 3, 7]);
        // positions 2..=7 with chunks of 4: chunk 0 holds k 0..2, chunk 1 holds k 2..6.
        assert_eq!(
            spans(2, 6, 1, 4),
            vec![
                Span {
                    chunk: 0,
                    k_lo: 0,
                    k_hi: 2
                },
                Span {
                    chunk: 1,
                    k_lo: 2,
                    k_hi: 6
                }
            ]
        );
        assert_eq!(clipped_count(2, 6, 1, 5), 3);
        assert_eq!(clipped_count(6, 6, 1, 5), 0);
        assert_eq!(clipped_count(0, 4, 3, 7), 3);
    }
}
