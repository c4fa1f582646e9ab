//! numcodecs `shuffle` (HDF5's shuffle filter): byte `j` of every element goes to plane `j`.
//!
//! Trailing bytes that do not fill an element are kept unchanged at the end, as HDF5 and
//! netcdf-c do (numcodecs refuses such buffers, so no numcodecs stream depends on it).

use super::{Codec, Config};
use crate::model::NcType;
use crate::Result;

/// The element size netcdf-c shuffles string variables with, whatever their metadata
/// records: the size of its in-memory string, a pointer.
pub const NETCDF_STRING_ELEMENT: usize = 8;

/// numcodecs' `Shuffle` element size when its configuration has none (zarr-python reads a
/// Zarr v2 `{"id": "shuffle"}` so, whatever the array's type).
pub const NUMCODECS_ELEMENTSIZE: usize = 4;

/// The element size that a shuffle recorded with element size 0 (netcdf-c's spelling) stands
/// for, in a variable of `nctype` stored in elements of `stored_size` bytes.
pub fn netcdf_element_size(nctype: NcType, stored_size: usize) -> usize {
    match nctype {
        NcType::String => NETCDF_STRING_ELEMENT,
        _ => stored_size,
    }
}

/// Elements per block: both sides of a block stay in L1/L2 cache while the planes are
/// gathered or scattered.
const BLOCK: usize = 4096;

/// numcodecs `Shuffle(elementsize)`.
#[derive(Debug, Clone)]
pub struct Shuffle {
    elementsize: usize,
}

impl Shuffle {
    /// A shuffle of `elementsize`-byte elements (0 or 1 leave data unchanged).
    pub fn new(elementsize: usize) -> Self {
        Shuffle { elementsize }
    }

    /// From `{"id": "shuffle", "elementsize": N}`. netcdf-c writes `"elementsize": 0`
    /// meaning the variable's type size (`element_size`), and sometimes quotes the number; a
    /// missing `elementsize` is numcodecs' default, [`NUMCODECS_ELEMENTSIZE`].
    pub fn from_config(cfg: &Config<'_>, element_size: usize) -> Result<Self> {
        let n = cfg.int_in(
            "elementsize",
            NUMCODECS_ELEMENTSIZE as i64,
            0..=i64::from(u32::MAX),
        )?;
        let n = usize::try_from(n).map_err(|_| cfg.error("elementsize too large"))?;
        Ok(Shuffle::new(if n == 0 { element_size } else { n }))
    }
}

impl Codec for Shuffle {
    fn id(&self) -> &str {
        "shuffle"
    }

    fn decode(&self, input: Vec<u8>) -> Result<Vec<u8>> {
        if self.elementsize <= 1 || input.len() < 2 * self.elementsize {
            return Ok(input);
        }
        let mut out = vec![0u8; input.len()];
        unshuffle(&input, &mut out, self.elementsize);
        Ok(out)
    }

    fn encode(&self, input: Vec<u8>) -> Result<Vec<u8>> {
        if self.elementsize <= 1 || input.len() < 2 * self.elementsize {
            return Ok(input);
        }
        let mut out = vec![0u8; input.len()];
        shuffle(&input, &mut out, self.elementsize);
        Ok(out)
    }

    fn encode_into(&self, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
        out.clear();
        if self.elementsize <= 1 || input.len() < 2 * self.elementsize {
            out.extend_from_slice(input);
        } else {
            out.resize(input.len(), 0);
            shuffle(input, out, self.elementsize);
        }
        Ok(())
    }

    fn decode_into(&self, input: &[u8], out: &mut [u8]) -> Result<usize> {
        let n = input.len();
        let dst = out
            .get_mut(..n)
            .ok_or_else(|| super::too_large("shuffle", n))?;
        if self.elementsize <= 1 || n < 2 * self.elementsize {
            dst.copy_from_slice(input);
        } else {
            unshuffle(input, dst, self.elementsize);
        }
        Ok(n)
    }
}

/// Shuffles `src` into `dst` (same length) for elements of `es` bytes.
fn shuffle(src: &[u8], dst: &mut [u8], es: usize) {
    // Constant sizes let the compiler unroll the per-element loops.
    match es {
        2 => shuffle_impl(src, dst, 2),
        4 => shuffle_impl(src, dst, 4),
        8 => shuffle_impl(src, dst, 8),
        _ => shuffle_impl(src, dst, es),
    }
}

/// Reverses [`shuffle`].
fn unshuffle(src: &[u8], dst: &mut [u8], es: usize) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU supports AVX2, checked just above.
        return unsafe { unshuffle_avx2(src, dst, es) };
    }
    unshuffle_any(src, dst, es)
}

/// [`unshuffle_any`] compiled for AVX2: the gathers become wide byte shuffles, about 6x
/// faster than the baseline x86-64 (SSE2) code (measured on 2 MiB of 4-byte elements).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn unshuffle_avx2(src: &[u8], dst: &mut [u8], es: usize) {
    unshuffle_any(src, dst, es)
}

#[inline(always)]
fn unshuffle_any(src: &[u8], dst: &mut [u8], es: usize) {
    // Decoding is the hot path; element-major loops over N plane slices vectorise for small
    // constant N (measured 2-4x faster than the blocked loop for 2, 4 and 8 bytes).
    match es {
        2 => unshuffle_const::<2>(src, dst),
        4 => unshuffle_const::<4>(src, dst),
        8 => unshuffle_const::<8>(src, dst),
        _ => unshuffle_impl(src, dst, es),
    }
}

#[inline(always)]
fn unshuffle_const<const N: usize>(src: &[u8], dst: &mut [u8]) {
    let n = src.len() / N;
    let body = n * N;
    dst[body..].copy_from_slice(&src[body..]);
    let planes: [&[u8]; N] = std::array::from_fn(|j| &src[j * n..(j + 1) * n]);
    for (i, el) in dst[..body].chunks_exact_mut(N).enumerate() {
        for j in 0..N {
            el[j] = planes[j][i];
        }
    }
}

#[inline(always)]
fn shuffle_impl(src: &[u8], dst: &mut [u8], es: usize) {
    let n = src.len() / es;
    let body = n * es;
    dst[body..].copy_from_slice(&src[body..]);
    if n == 0 {
        return;
    }
    for (b, block) in src[..body].chunks(BLOCK * es).enumerate() {
        let base = b * BLOCK;
        let len = block.len() / es;
        for (j, plane) in dst[..body].chunks_exact_mut(n).enumerate() {
            for (o, el) in plane[base..base + len]
                .iter_mut()
                .zip(block.chunks_exact(es))
            {
                *o = el[j];
            }
        }
    }
}

#[inline(always)]
fn unshuffle_impl(src: &[u8], dst: &mut [u8], es: usize) {
    let n = src.len() / es;
    let body = n * es;
    dst[body..].copy_from_slice(&src[body..]);
    if n == 0 {
        return;
    }
    for (b, block) in dst[..body].chunks_mut(BLOCK * es).enumerate() {
        let base = b * BLOCK;
        let len = block.len() / es;
        for (j, plane) in src[..body].chunks_exact(n).enumerate() {
            for (el, v) in block.chunks_exact_mut(es).zip(&plane[base..base + len]) {
                el[j] = *v;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, written the obvious way.
    fn reference(src: &[u8], es: usize) -> Vec<u8> {
        let n = src.len() / es;
        let mut out = src.to_vec();
        for i in 0..n {
            for j in 0..es {
                out[j * n + i] = src[i * es + j];
            }
        }
        out
    }

    #[test]
    fn matches_definition_for_all_sizes_and_tails() {
        for es in [2, 3, 4, 5, 8, 16] {
            for len in [
                0,
                1,
                es,
                2 * es + 1,
                1000,
                BLOCK * es + 3 * es + 1,
                3 * BLOCK * es,
            ] {
                let src: Vec<u8> = (0..len).map(|i| (i * 7 + i / 251) as u8).collect();
                let s = Shuffle::new(es);
                let enc = s.encode(src.clone()).unwrap();
                assert_eq!(enc, reference(&src, es), "es={es} len={len}");
                assert_eq!(s.decode(enc).unwrap(), src, "es={es} len={len}");
            }
        }
    }

    #[test]
    fn decode_into_matches_decode() {
        let src: Vec<u8> = (0..1003u32).map(|i| (i * 13) as u8).collect();
        for es in [1, 2, 4, 8, 3] {
            let s = Shuffle::new(es);
            let enc = s.encode(src.clone()).unwrap();
            let mut out = vec![0u8; src.len() + 5];
            assert_eq!(s.decode_into(&enc, &mut out).unwrap(), src.len());
            assert_eq!(&out[..src.len()], &src[..], "es={es}");
            assert!(s.decode_into(&enc, &mut out[..10]).is_err());
        }
    }

    #[test]
    fn dispatched_and_portable_unshuffles_agree() {
        for es in [2, 3, 4, 8] {
            for len in [0, 7, 4096 * es + 5, 100_003] {
                let src: Vec<u8> = (0..len).map(|i| (i * 31 + i / 97) as u8).collect();
                let (mut a, mut b) = (vec![0u8; len], vec![0u8; len]);
                unshuffle(&src, &mut a, es);
                unshuffle_any(&src, &mut b, es);
                assert_eq!(a, b, "es={es} len={len}");
                assert_eq!(shuffle_of(&a, es), src, "es={es} len={len}");
            }
        }
    }

    fn shuffle_of(data: &[u8], es: usize) -> Vec<u8> {
        let mut out = vec![0u8; data.len()];
        shuffle(data, &mut out, es);
        out
    }

    #[test]
    fn known_vector() {
        // numcodecs.Shuffle(4).encode(np.array([1, 2], '<i4')) == b'\x01\x02' + 6 * b'\x00'
        let enc = Shuffle::new(4)
            .encode(vec![1, 0, 0, 0, 2, 0, 0, 0])
            .unwrap();
        assert_eq!(enc, [1, 2, 0, 0, 0, 0, 0, 0]);
    }
}
