//! Turning a byte range of a variable's flat `data` file into hyperslab reads.

use crate::chunk::Hyperslab;

/// Splits the C-order element range `[lo, hi)` of an array of `shape` into rectangular
/// hyperslabs, in order, whose concatenation is exactly that range: at most
/// `2 * (rank - 1) + 1` of them (a partial leading row, whole rows, a partial trailing row,
/// recursively). A scalar (`shape` empty) is one slab of one element.
pub fn element_range_slabs(shape: &[u64], lo: u64, hi: u64) -> Vec<Hyperslab> {
    let mut out = Vec::new();
    if lo >= hi {
        return out;
    }
    if shape.is_empty() {
        out.push(Hyperslab::whole(&[]));
        return out;
    }
    let mut prefix = Vec::with_capacity(shape.len());
    split(shape, lo, hi, &mut prefix, &mut out);
    out
}

fn split(shape: &[u64], lo: u64, hi: u64, prefix: &mut Vec<u64>, out: &mut Vec<Hyperslab>) {
    let rank = prefix.len() + shape.len();
    let slab = |prefix: &[u64], first: u64, n: u64, rest: &[u64]| {
        let mut start = prefix.to_vec();
        start.push(first);
        start.extend(std::iter::repeat_n(0, rest.len()));
        let mut count = vec![1; prefix.len()];
        count.push(n);
        count.extend_from_slice(rest);
        Hyperslab {
            start,
            count,
            stride: vec![1; rank],
        }
    };
    let inner_shape = &shape[1..];
    let inner: u64 = inner_shape.iter().product();
    if inner == 0 {
        return;
    }
    let (mut i0, r0) = (lo / inner, lo % inner);
    let (i1, r1) = (hi / inner, hi % inner);
    if i0 == i1 {
        prefix.push(i0);
        split(inner_shape, r0, r1, prefix, out);
        prefix.pop();
        return;
    }
    if r0 != 0 {
        prefix.push(i0);
        split(inner_shape, r0, inner, prefix, out);
        prefix.pop();
        i0 += 1;
    }
    if i1 > i0 {
        out.push(slab(prefix, i0, i1 - i0, inner_shape));
    }
    if r1 != 0 {
        prefix.push(i1);
        split(inner_shape, 0, r1, prefix, out);
        prefix.pop();
    }
}

/// Number of elements in a slab.
pub fn slab_len(slab: &Hyperslab) -> u64 {
    slab.count.iter().product()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C-order linear indices a slab covers, computed by brute force.
    fn covered(shape: &[u64], slab: &Hyperslab) -> Vec<u64> {
        let mut out = Vec::new();
        let n = slab_len(slab);
        for k in 0..n {
            // unravel k within count, then ravel start+idx within shape
            let mut rem = k;
            let mut idx = vec![0; shape.len()];
            for d in (0..shape.len()).rev() {
                idx[d] = slab.start[d] + rem % slab.count[d];
                rem /= slab.count[d];
            }
            let mut lin = 0;
            for d in 0..shape.len() {
                lin = lin * shape[d] + idx[d];
            }
            out.push(lin);
        }
        out
    }

    #[test]
    fn every_range_of_small_shapes_is_covered_exactly() {
        for shape in [vec![7], vec![3, 4], vec![2, 3, 5], vec![2, 1, 3, 2]] {
            let total: u64 = shape.iter().product();
            for lo in 0..total {
                for hi in lo + 1..=total {
                    let slabs = element_range_slabs(&shape, lo, hi);
                    assert!(slabs.len() <= 2 * (shape.len() - 1) + 1);
                    let all: Vec<u64> = slabs.iter().flat_map(|s| covered(&shape, s)).collect();
                    assert_eq!(all, (lo..hi).collect::<Vec<_>>(), "{shape:?} {lo}..{hi}");
                    for s in &slabs {
                        for (d, len) in shape.iter().enumerate() {
                            assert!(s.start[d] + s.count[d] <= *len);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn whole_array_is_one_slab_and_scalars_work() {
        assert_eq!(
            element_range_slabs(&[4, 5], 0, 20),
            vec![Hyperslab::whole(&[4, 5])]
        );
        assert_eq!(element_range_slabs(&[], 0, 1), vec![Hyperslab::whole(&[])]);
        assert!(element_range_slabs(&[4], 2, 2).is_empty());
        assert!(element_range_slabs(&[0, 4], 0, 0).is_empty());
    }
}
