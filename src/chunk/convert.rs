//! Element conversions between a chunk's stored representation (the Zarr dtype, in the chunk's
//! element order) and the native in-memory one (little-endian numbers, 0/1 booleans, UTF-8
//! strings NUL-padded to the variable's width, C order).

use crate::meta::v3::half_to_f32;
use crate::model::{ByteOrder, ChunkOrder, DtypeKind, NcType, ZarrDtype};

/// How one stored element becomes one native element (and back).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Conversion {
    /// The bytes are already native.
    Identity,
    /// Reverse the bytes of each element of this size (big-endian storage).
    Swap(usize),
    /// `|b1`: any non-zero byte is true (1).
    Bool,
    /// `|S<stored>` held in `native`-byte slots: truncate or NUL-pad.
    Bytes {
        /// Stored width in bytes.
        stored: usize,
        /// Native width in bytes.
        native: usize,
    },
    /// IEEE binary16 (`<f2`, Zarr v3 `float16`) widened to a native `float`.
    Half {
        /// Whether the stored halves are big-endian.
        big: bool,
    },
    /// `<U<chars>` / `>U<chars>` UCS-4 held as UTF-8 in `native`-byte slots.
    Ucs4 {
        /// Stored width in characters.
        chars: usize,
        /// Whether the code units are big-endian.
        big: bool,
        /// Native width in bytes.
        native: usize,
    },
}

impl Conversion {
    /// Chooses the conversion for a variable of type `nctype` whose native elements are
    /// `native` bytes wide, stored as `dtype`; `Err` says why the pair is not readable.
    pub(crate) fn new(dtype: &ZarrDtype, nctype: NcType, native: usize) -> Result<Self, String> {
        let mismatch = || {
            format!(
                "stored dtype {} cannot hold netCDF type {}",
                dtype.to_numpy(),
                nctype.cdl_name()
            )
        };
        match dtype.kind {
            DtypeKind::Bool => match nctype {
                NcType::Byte | NcType::UByte | NcType::Char => Ok(Conversion::Bool),
                _ => Err(mismatch()),
            },
            DtypeKind::Float if dtype.size == 2 => match nctype {
                NcType::Float => Ok(Conversion::Half {
                    big: dtype.order == ByteOrder::Big,
                }),
                _ => Err(mismatch()),
            },
            DtypeKind::Int | DtypeKind::UInt | DtypeKind::Float => {
                if matches!(nctype, NcType::String | NcType::Char) || nctype.size() != dtype.size {
                    return Err(mismatch());
                }
                if dtype.order == ByteOrder::Big && dtype.size > 1 {
                    Ok(Conversion::Swap(dtype.size))
                } else {
                    Ok(Conversion::Identity)
                }
            }
            DtypeKind::Bytes => match nctype {
                NcType::Char | NcType::String | NcType::Byte | NcType::UByte => {
                    if dtype.size == native {
                        Ok(Conversion::Identity)
                    } else {
                        Ok(Conversion::Bytes {
                            stored: dtype.size,
                            native,
                        })
                    }
                }
                _ => Err(mismatch()),
            },
            DtypeKind::Unicode => match nctype {
                NcType::Char | NcType::String => Ok(Conversion::Ucs4 {
                    chars: dtype.size / 4,
                    big: dtype.order == ByteOrder::Big,
                    native,
                }),
                _ => Err(mismatch()),
            },
        }
    }

    /// Whether storing changes values the stored type can hold: a float between two float16
    /// values is rounded to the nearer one. (Values it cannot hold at all are refused first,
    /// see [`Conversion::first_unstorable`].)
    pub(crate) fn rounds(&self) -> bool {
        matches!(self, Conversion::Half { .. })
    }

    /// The first of the native elements (`native` bytes each) in `data` that the stored type
    /// cannot hold, with the reason: text longer than a fixed-width slot, or not UTF-8 where
    /// UCS-4 characters are stored; a finite float beyond float16's range (it would be stored
    /// as infinity; NaN and infinities are stored as they are); a bool other than 0 or 1.
    /// Storing such a value would silently change it, so writers refuse it, as netCDF refuses
    /// a value its type cannot represent (`NC_ERANGE`).
    pub(crate) fn first_unstorable(&self, data: &[u8], native: usize) -> Option<(usize, String)> {
        let slots = || data.chunks_exact(native.max(1)).enumerate();
        match *self {
            Conversion::Identity | Conversion::Swap(_) => None,
            Conversion::Bytes { stored, .. } => slots().find_map(|(i, slot)| {
                let len = text_len(slot);
                (len > stored).then(|| {
                    (
                        i,
                        format!("a value of {len} bytes does not fit in {stored}"),
                    )
                })
            }),
            Conversion::Ucs4 { chars, .. } => slots().find_map(|(i, slot)| {
                let Ok(text) = std::str::from_utf8(&slot[..text_len(slot)]) else {
                    return Some((
                        i,
                        "a value is not UTF-8 text, as stored unicode characters must be"
                            .to_string(),
                    ));
                };
                let n = text.chars().count();
                (n > chars).then(|| {
                    (
                        i,
                        format!("a value of {n} characters does not fit in {chars}"),
                    )
                })
            }),
            Conversion::Bool => data
                .iter()
                .position(|&b| b > 1)
                .map(|i| (i, format!("{} is neither 0 nor 1 (false or true)", data[i]))),
            Conversion::Half { .. } => data.chunks_exact(4).enumerate().find_map(|(i, f)| {
                let x = f32::from_le_bytes([f[0], f[1], f[2], f[3]]);
                let overflows = x.is_finite() && half_to_f32(f32_to_half(x)).is_infinite();
                overflows.then(|| {
                    (
                        i,
                        format!("{x} is beyond 65504, the largest finite float16"),
                    )
                })
            }),
        }
    }

    /// Stored element size in bytes.
    pub(crate) fn stored_size(&self, native: usize) -> usize {
        match *self {
            Conversion::Identity | Conversion::Bool => native,
            Conversion::Swap(n) => n,
            Conversion::Half { .. } => 2,
            Conversion::Bytes { stored, .. } => stored,
            Conversion::Ucs4 { chars, .. } => chars * 4,
        }
    }

    /// Converts stored elements to native ones where they lie, when the conversion keeps
    /// their size (identity, byte swaps, booleans); `false` (nothing done) otherwise.
    pub(crate) fn to_native_in_place(self, data: &mut [u8]) -> bool {
        match self {
            Conversion::Identity => true,
            Conversion::Swap(n) => {
                swap_in_place(data, n);
                true
            }
            Conversion::Bool => {
                for b in data {
                    *b = u8::from(*b != 0);
                }
                true
            }
            Conversion::Half { .. } | Conversion::Bytes { .. } | Conversion::Ucs4 { .. } => false,
        }
    }

    /// Converts a whole buffer of stored elements to native ones, reusing it when possible.
    pub(crate) fn to_native(self, mut data: Vec<u8>) -> Vec<u8> {
        match self {
            Conversion::Identity => data,
            Conversion::Swap(n) => {
                swap_in_place(&mut data, n);
                data
            }
            Conversion::Bool => {
                for b in &mut data {
                    *b = u8::from(*b != 0);
                }
                data
            }
            Conversion::Half { big } => data
                .chunks_exact(2)
                .flat_map(|h| {
                    let bits = match big {
                        true => u16::from_be_bytes([h[0], h[1]]),
                        false => u16::from_le_bytes([h[0], h[1]]),
                    };
                    half_to_f32(bits).to_le_bytes()
                })
                .collect(),
            Conversion::Bytes { stored, native } => resize_elements(&data, stored, native),
            Conversion::Ucs4 { chars, big, native } => {
                let n = if chars == 0 {
                    0
                } else {
                    data.len() / (chars * 4)
                };
                let mut out = vec![0u8; n * native];
                if chars == 0 {
                    return out;
                }
                for (src, dst) in data
                    .chunks_exact(chars * 4)
                    .zip(out.chunks_exact_mut(native.max(1)))
                {
                    ucs4_to_utf8(src, big, &mut dst[..native]);
                }
                out
            }
        }
    }

    /// Converts a whole buffer of native elements to stored ones.
    pub(crate) fn to_stored(self, mut data: Vec<u8>) -> Vec<u8> {
        match self {
            Conversion::Identity => data,
            Conversion::Swap(n) => {
                swap_in_place(&mut data, n);
                data
            }
            Conversion::Bool => {
                for b in &mut data {
                    *b = u8::from(*b != 0);
                }
                data
            }
            Conversion::Half { big } => data
                .chunks_exact(4)
                .flat_map(|f| {
                    let h = f32_to_half(f32::from_le_bytes([f[0], f[1], f[2], f[3]]));
                    match big {
                        true => h.to_be_bytes(),
                        false => h.to_le_bytes(),
                    }
                })
                .collect(),
            Conversion::Bytes { stored, native } => resize_elements(&data, native, stored),
            Conversion::Ucs4 { chars, big, native } => {
                let n = data.len().checked_div(native).unwrap_or(0);
                let mut out = vec![0u8; n * chars * 4];
                if native == 0 || chars == 0 {
                    return out;
                }
                for (src, dst) in data
                    .chunks_exact(native)
                    .zip(out.chunks_exact_mut(chars * 4))
                {
                    utf8_to_ucs4(src, big, dst);
                }
                out
            }
        }
    }
}

fn swap_in_place(data: &mut [u8], n: usize) {
    match n {
        2 => data.chunks_exact_mut(2).for_each(|c| c.swap(0, 1)),
        4 => data.chunks_exact_mut(4).for_each(|c| {
            let v = u32::from_ne_bytes([c[0], c[1], c[2], c[3]]).swap_bytes();
            c.copy_from_slice(&v.to_ne_bytes());
        }),
        8 => data.chunks_exact_mut(8).for_each(|c| {
            let mut a = [0u8; 8];
            a.copy_from_slice(c);
            c.copy_from_slice(&u64::from_ne_bytes(a).swap_bytes().to_ne_bytes());
        }),
        _ => data.chunks_exact_mut(n.max(1)).for_each(|c| c.reverse()),
    }
}

/// Copies fixed-width byte strings into slots of another width (truncating or NUL-padding).
fn resize_elements(data: &[u8], from: usize, to: usize) -> Vec<u8> {
    let n = data.len().checked_div(from).unwrap_or(0);
    let mut out = vec![0u8; n * to];
    if from == 0 || to == 0 {
        return out;
    }
    let keep = from.min(to);
    for (src, dst) in data.chunks_exact(from).zip(out.chunks_exact_mut(to)) {
        dst[..keep].copy_from_slice(&src[..keep]);
    }
    out
}

/// Decodes one NUL-padded UCS-4 element into a NUL-padded UTF-8 slot, truncating at a
/// character boundary when the slot is too narrow.
fn ucs4_to_utf8(src: &[u8], big: bool, dst: &mut [u8]) {
    let mut units: Vec<u32> = src
        .chunks_exact(4)
        .map(|c| {
            let a = [c[0], c[1], c[2], c[3]];
            if big {
                u32::from_be_bytes(a)
            } else {
                u32::from_le_bytes(a)
            }
        })
        .collect();
    // NumPy strips only trailing NULs; embedded ones are content.
    while units.last() == Some(&0) {
        units.pop();
    }
    let mut pos = 0;
    let mut buf = [0u8; 4];
    for u in units {
        let ch = char::from_u32(u).unwrap_or(char::REPLACEMENT_CHARACTER);
        let enc = ch.encode_utf8(&mut buf);
        if pos + enc.len() > dst.len() {
            break;
        }
        dst[pos..pos + enc.len()].copy_from_slice(enc.as_bytes());
        pos += enc.len();
    }
}

/// The length of a NUL-padded slot's value: trailing NULs are padding, embedded ones content.
fn text_len(slot: &[u8]) -> usize {
    slot.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)
}

/// Encodes one NUL-padded UTF-8 slot as NUL-padded UCS-4. Writers have refused values that
/// are not UTF-8 or do not fit (see [`Conversion::first_unstorable`]).
fn utf8_to_ucs4(src: &[u8], big: bool, dst: &mut [u8]) {
    let text = String::from_utf8_lossy(&src[..text_len(src)]);
    for (ch, slot) in text.chars().zip(dst.chunks_exact_mut(4)) {
        let v = ch as u32;
        slot.copy_from_slice(&if big {
            v.to_be_bytes()
        } else {
            v.to_le_bytes()
        });
    }
}

/// Reorders a chunk of `shape` whose elements of `esize` bytes are in `order` into C order.
pub(crate) fn to_c_order(
    data: Vec<u8>,
    shape: &[usize],
    esize: usize,
    order: ChunkOrder,
) -> Vec<u8> {
    if order == ChunkOrder::C || shape.iter().filter(|&&n| n > 1).count() <= 1 {
        return data;
    }
    transpose(&data, shape, esize, true)
}

/// Reorders a C-order chunk of `shape` into `order` for storage.
pub(crate) fn from_c_order(
    data: Vec<u8>,
    shape: &[usize],
    esize: usize,
    order: ChunkOrder,
) -> Vec<u8> {
    if order == ChunkOrder::C || shape.iter().filter(|&&n| n > 1).count() <= 1 {
        return data;
    }
    transpose(&data, shape, esize, false)
}

/// Walks the C-order index space of `shape`; `f_to_c` reads F-order and writes C-order,
/// otherwise the reverse.
fn transpose(data: &[u8], shape: &[usize], esize: usize, f_to_c: bool) -> Vec<u8> {
    let rank = shape.len();
    let mut fstrides = vec![esize; rank];
    for d in 1..rank {
        fstrides[d] = fstrides[d - 1] * shape[d - 1];
    }
    let mut out = vec![0u8; data.len()];
    let total: usize = shape.iter().product();
    let mut idx = vec![0usize; rank];
    let mut foff = 0usize;
    for c in 0..total {
        let coff = c * esize;
        if f_to_c {
            out[coff..coff + esize].copy_from_slice(&data[foff..foff + esize]);
        } else {
            out[foff..foff + esize].copy_from_slice(&data[coff..coff + esize]);
        }
        // Advance the C-order multi-index (last dimension fastest) and its F-order offset.
        for d in (0..rank).rev() {
            idx[d] += 1;
            foff += fstrides[d];
            if idx[d] < shape[d] {
                break;
            }
            foff -= fstrides[d] * shape[d];
            idx[d] = 0;
        }
    }
    out
}

/// IEEE binary16 nearest to `f` (ties to even; overflow to infinity; NaN stays NaN).
pub(crate) fn f32_to_half(f: f32) -> u16 {
    let x = f.to_bits();
    let sign = ((x >> 16) & 0x8000) as u16;
    let exp = ((x >> 23) & 0xff) as i32;
    let man = x & 0x7f_ffff;
    if exp == 0xff {
        let nan = if man != 0 {
            0x200 | (man >> 13) as u16
        } else {
            0
        };
        return sign | 0x7c00 | nan;
    }
    let e = exp - 127 + 15;
    if e >= 0x1f {
        return sign | 0x7c00;
    }
    let round = |kept: u32, rem: u32, half: u32| -> u32 {
        if rem > half || (rem == half && kept & 1 == 1) {
            kept + 1
        } else {
            kept
        }
    };
    if e <= 0 {
        // Subnormal half: the value is m * 2^-24 with m the full f32 significand shifted.
        if e < -10 {
            return sign;
        }
        let m = man | 0x80_0000;
        let shift = (14 - e) as u32;
        let r = round(m >> shift, m & ((1 << shift) - 1), 1 << (shift - 1));
        return sign | r as u16;
    }
    // A carry out of the significand rounds up into the exponent (to infinity at the top).
    let r = round(((e as u32) << 10) | (man >> 13), man & 0x1fff, 0x1000);
    sign | r as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dt(s: &str) -> ZarrDtype {
        ZarrDtype::parse(s).unwrap()
    }

    #[test]
    fn big_endian_swaps() {
        let c = Conversion::new(&dt(">i4"), NcType::Int, 4).unwrap();
        let stored: Vec<u8> = [1i32, -2].iter().flat_map(|v| v.to_be_bytes()).collect();
        let native = c.to_native(stored.clone());
        let want: Vec<u8> = [1i32, -2].iter().flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(native, want);
        assert_eq!(c.to_stored(native), stored);
        let c = Conversion::new(&dt(">f8"), NcType::Double, 8).unwrap();
        assert_eq!(
            c.to_native(1.5f64.to_be_bytes().to_vec()),
            1.5f64.to_le_bytes()
        );
        let c = Conversion::new(&dt(">u2"), NcType::UShort, 2).unwrap();
        assert_eq!(c.to_native(vec![1, 2]), vec![2, 1]);
        assert_eq!(
            Conversion::new(&dt("<i4"), NcType::Int, 4),
            Ok(Conversion::Identity)
        );
    }

    #[test]
    fn in_place_conversions_agree_with_whole_buffer_ones() {
        let data: Vec<u8> = (0..24u8).map(|b| b.wrapping_mul(37)).collect();
        for (dtype, nctype, native) in [
            (">i4", NcType::Int, 4),
            ("<i4", NcType::Int, 4),
            (">f8", NcType::Double, 8),
            ("|b1", NcType::UByte, 1),
        ] {
            let conv = Conversion::new(&dt(dtype), nctype, native).unwrap();
            let mut in_place = data.clone();
            assert!(conv.to_native_in_place(&mut in_place), "{dtype}");
            assert_eq!(in_place, conv.to_native(data.clone()), "{dtype}");
        }
        let conv = Conversion::new(&dt("|S3"), NcType::Char, 1).unwrap();
        assert!(!conv.to_native_in_place(&mut data.clone()));
    }

    #[test]
    fn mismatched_sizes_refused() {
        assert!(Conversion::new(&dt("<i8"), NcType::Int, 4).is_err());
        assert!(Conversion::new(&dt("<f4"), NcType::String, 8).is_err());
        assert!(Conversion::new(&dt("<U4"), NcType::Int, 4).is_err());
    }

    #[test]
    fn bools_become_zero_or_one() {
        let c = Conversion::new(&dt("|b1"), NcType::UByte, 1).unwrap();
        assert_eq!(c.to_native(vec![0, 1, 7, 255]), vec![0, 1, 1, 1]);
    }

    #[test]
    fn unicode_to_utf8_and_back() {
        // numpy: np.array(["héllo", "a"], dtype="<U5").tobytes()
        let mut stored = Vec::new();
        for s in ["héllo", "a"] {
            let mut n = 0;
            for ch in s.chars() {
                stored.extend((ch as u32).to_le_bytes());
                n += 1;
            }
            stored.extend(std::iter::repeat_n(0u8, (5 - n) * 4));
        }
        let c = Conversion::new(&dt("<U5"), NcType::String, 8).unwrap();
        let native = c.to_native(stored.clone());
        assert_eq!(&native[..8], b"h\xc3\xa9llo\0\0");
        assert_eq!(&native[8..], b"a\0\0\0\0\0\0\0");
        assert_eq!(c.to_stored(native), stored);
        // A too-narrow slot truncates at a character boundary: "h", "é" would need 3 bytes.
        let c = Conversion::new(&dt("<U5"), NcType::String, 2).unwrap();
        assert_eq!(&c.to_native(stored)[..2], b"h\0");
    }

    #[test]
    fn big_endian_unicode() {
        let c = Conversion::new(&dt(">U1"), NcType::Char, 1).unwrap();
        assert_eq!(c.to_native(vec![0, 0, 0, b'x']), b"x");
    }

    #[test]
    fn byte_strings_pad_or_truncate() {
        let c = Conversion::new(&dt("|S2"), NcType::String, 4).unwrap();
        assert_eq!(c.to_native(b"abcd".to_vec()), b"ab\0\0cd\0\0");
        assert_eq!(c.to_stored(b"ab\0\0cd\0\0".to_vec()), b"abcd");
        let c = Conversion::new(&dt("|S1"), NcType::Char, 1).unwrap();
        assert_eq!(c, Conversion::Identity);
    }

    #[test]
    fn text_wider_than_its_stored_slot_is_unstorable() {
        // `|S2` held in 4-byte slots: "ab" fits, "abc" does not.
        let c = Conversion::new(&dt("|S2"), NcType::String, 4).unwrap();
        assert_eq!(c.first_unstorable(b"ab\0\0a\0\0\0", 4), None);
        let (i, why) = c.first_unstorable(b"ab\0\0abc\0", 4).unwrap();
        assert_eq!(i, 1);
        assert!(why.contains("3 bytes") && why.contains('2'), "{why}");
        // `<U2` in 8-byte slots counts characters: "éé" (4 bytes) fits, "abc" does not,
        // and bytes that are not UTF-8 have no characters to store.
        let c = Conversion::new(&dt("<U2"), NcType::String, 8).unwrap();
        assert_eq!(c.first_unstorable("éé\0\0\0\0".as_bytes(), 8), None);
        assert_eq!(c.first_unstorable(b"abc\0\0\0\0\0", 8).unwrap().0, 0);
        let (i, why) = c
            .first_unstorable(b"a\0\0\0\0\0\0\0\xff\0\0\0\0\0\0\0", 8)
            .unwrap();
        assert_eq!(i, 1);
        assert!(why.contains("UTF-8"), "{why}");
    }

    #[test]
    fn fortran_order_transposes() {
        // np.arange(6).reshape(2,3) stored with order="F" is [0,3,1,4,2,5].
        let f: Vec<u8> = vec![0, 3, 1, 4, 2, 5];
        let c = to_c_order(f.clone(), &[2, 3], 1, ChunkOrder::F);
        assert_eq!(c, vec![0, 1, 2, 3, 4, 5]);
        assert_eq!(from_c_order(c, &[2, 3], 1, ChunkOrder::F), f);
        // 3-d, 2-byte elements: F offset of (i,j,k) in shape (2,2,3) is i + 2j + 4k.
        let shape = [2usize, 2, 3];
        let mut fdata = vec![0u8; 24];
        for i in 0..2 {
            for j in 0..2 {
                for k in 0..3 {
                    let v = (i * 6 + j * 3 + k) as u16;
                    let off = (i + 2 * j + 4 * k) * 2;
                    fdata[off..off + 2].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
        let c = to_c_order(fdata, &shape, 2, ChunkOrder::F);
        let want: Vec<u8> = (0u16..12).flat_map(|v| v.to_le_bytes()).collect();
        assert_eq!(c, want);
    }
}
