//! netCDF quantization (netcdf-c's `nc_def_var_quantize`): lossy rounding of `float` and
//! `double` values to a number of significant decimal digits or bits, applied when values are
//! written, so that the compressor that follows finds long runs of equal bits. Readers need
//! nothing: quantized values are ordinary floating-point numbers. The variable records the
//! setting in one integer attribute, [`QuantizeMode::attribute`].
//!
//! The three algorithms are netcdf-c's (since 4.9.0; its `nc4_convert_type`), which come from
//! NCO and the Community Codec Repository. Each keeps some of the explicit significand bits of
//! a value and zeroes or sets the others:
//!
//! - BitGroom keeps enough bits for N decimal digits, and alternates along the values of one
//!   write: even positions have the other bits zeroed ("shaved"), odd ones set, so that the
//!   mean error is near zero.
//! - BitRound keeps N bits and rounds to nearest (ties away from zero in magnitude) by adding
//!   half of the last kept bit before zeroing the others.
//! - GranularBitRound works out from each value's decimal magnitude how many bits N decimal
//!   digits need for that value, then rounds as BitRound does.
//!
//! As netcdf-c 4.10 does, the fill value and NaN are never changed, nor is ±0 by the
//! algorithms that would set bits of it (BitGroom's odd positions, GranularBitRound).
//! Infinities are not spared: netcdf-c quantizes them as any other value, which makes
//! BitGroom's odd positions NaN and GranularBitRound's ∓0. The results are bit for bit
//! netcdf-c's, including those.

use super::{AttrValue, NcType, Variable};

/// log2(10): bits per decimal digit, computed as netcdf-c does (`M_LN10 / M_LN2`) so that
/// GranularBitRound's floors fall where netcdf-c's do.
const BITS_PER_DIGIT: f64 = std::f64::consts::LN_10 / std::f64::consts::LN_2;
/// log10(2): decimal digits per bit (`M_LN2 / M_LN10`).
const DIGITS_PER_BIT: f64 = std::f64::consts::LN_2 / std::f64::consts::LN_10;

/// A quantization algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuantizeMode {
    /// BitGroom: N significant decimal digits, alternately shaved and set.
    BitGroom,
    /// Granular BitRound: N significant decimal digits, rounded value by value.
    GranularBitRound,
    /// BitRound: N significant bits, rounded.
    BitRound,
}

impl QuantizeMode {
    /// Every mode.
    pub const ALL: [QuantizeMode; 3] = [
        QuantizeMode::BitGroom,
        QuantizeMode::GranularBitRound,
        QuantizeMode::BitRound,
    ];

    /// The attribute netcdf-c records the mode and its precision in.
    pub fn attribute(self) -> &'static str {
        match self {
            QuantizeMode::BitGroom => "_QuantizeBitGroomNumberOfSignificantDigits",
            QuantizeMode::GranularBitRound => "_QuantizeGranularBitRoundNumberOfSignificantDigits",
            QuantizeMode::BitRound => "_QuantizeBitRoundNumberOfSignificantBits",
        }
    }

    /// The mode whose attribute is `name`.
    pub fn from_attribute(name: &str) -> Option<QuantizeMode> {
        QuantizeMode::ALL
            .into_iter()
            .find(|m| m.attribute() == name)
    }

    /// What the precision counts.
    fn unit(self) -> &'static str {
        match self {
            QuantizeMode::BitRound => "bits",
            _ => "decimal digits",
        }
    }

    /// The largest precision netcdf-c 4.10 takes for type `t` (`NC_QUANTIZE_MAX_*`), `None`
    /// for a type it does not quantize. A float holds a little under 7 decimal digits, so
    /// BitGroom with 7 would keep more bits than there are (netcdf-c lowered that limit to
    /// 6 after such data came out corrupt).
    fn max_precision(self, t: NcType) -> Option<u32> {
        match (t, self) {
            (NcType::Float, QuantizeMode::BitRound) => Some(23),
            (NcType::Float, _) => Some(6),
            (NcType::Double, QuantizeMode::BitRound) => Some(52),
            (NcType::Double, _) => Some(15),
            _ => None,
        }
    }
}

/// A variable's quantization: the algorithm and its number of significant digits (bits for
/// BitRound).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quantize {
    /// The algorithm.
    pub mode: QuantizeMode,
    /// Significant decimal digits (BitGroom, GranularBitRound) or bits (BitRound).
    pub precision: u32,
}

impl Quantize {
    /// `mode` with `precision` for a variable of type `t`, refused where netcdf-c's
    /// `nc_def_var_quantize` refuses it (`NC_EINVAL`): a type other than float and double,
    /// or a precision outside 1 to the type's maximum. The error says why.
    pub fn new(mode: QuantizeMode, precision: i64, t: NcType) -> Result<Quantize, String> {
        let Some(max) = mode.max_precision(t) else {
            return Err(format!(
                "{} asks for quantization, which netCDF applies only to float and double \
                 variables, not {}",
                mode.attribute(),
                t.cdl_name()
            ));
        };
        match u32::try_from(precision) {
            Ok(p) if (1..=max).contains(&p) => Ok(Quantize { mode, precision: p }),
            _ => Err(format!(
                "{} = {precision}: a {} variable keeps 1 to {max} significant {}",
                mode.attribute(),
                t.cdl_name(),
                mode.unit()
            )),
        }
    }

    /// The quantization `var`'s attributes ask for (`None` without one), checked as
    /// [`Quantize::new`] checks it; more than one such attribute is refused.
    pub fn of_variable(var: &Variable) -> Result<Option<Quantize>, String> {
        let mut found = None;
        for a in &var.attrs {
            let Some(mode) = QuantizeMode::from_attribute(&a.name) else {
                continue;
            };
            if let Some(Quantize { mode: first, .. }) = found {
                return Err(format!(
                    "{} and {} both ask for quantization; a variable has one",
                    QuantizeMode::attribute(first),
                    a.name
                ));
            }
            let precision =
                single_integer(&a.value).ok_or_else(|| format!("{} is not one integer", a.name))?;
            found = Some(Quantize::new(mode, precision, var.nctype)?);
        }
        Ok(found)
    }

    /// The attribute that records this quantization, as netcdf-c writes it: one `int`.
    pub fn attribute_value(&self) -> AttrValue {
        AttrValue::Int(vec![self.precision as i32])
    }

    /// Quantizes `values` in place: elements of type `t` (float or double, native byte
    /// order) written in one call, the first at an even position. `fill` is the variable's
    /// fill value (one native element), which is left alone; without one, netCDF's default
    /// fill is. Other types are left unchanged.
    pub fn apply(&self, t: NcType, values: &mut [u8], fill: Option<&[u8]>) {
        self.apply_at(t, values, fill, 0);
    }

    /// [`Quantize::apply`] to values whose first is at position `first` of the write
    /// BitGroom alternates along (even positions shaved, odd ones set).
    pub fn apply_at(&self, t: NcType, values: &mut [u8], fill: Option<&[u8]>, first: u64) {
        let fill = fill.map(<[u8]>::to_vec).unwrap_or_else(|| t.default_fill());
        match t {
            NcType::Float => {
                let fill = f32::from_le_bytes(fill[..4].try_into().expect("4 bytes"));
                self.apply_to::<f32>(values, fill, first)
            }
            NcType::Double => {
                let fill = f64::from_le_bytes(fill[..8].try_into().expect("8 bytes"));
                self.apply_to::<f64>(values, fill, first)
            }
            _ => {}
        }
    }

    fn apply_to<F: Ieee>(&self, values: &mut [u8], fill: F, first: u64) {
        // BitGroom and BitRound keep the same bits of every value.
        let uniform = match self.mode {
            QuantizeMode::BitGroom => Some(Masks::new::<F>(
                F::EXPLICIT_BITS - bitgroom_bits(self.precision),
            )),
            QuantizeMode::BitRound => {
                Some(Masks::new::<F>(F::EXPLICIT_BITS - self.precision as i32))
            }
            QuantizeMode::GranularBitRound => None,
        };
        for (index, element) in values.chunks_exact_mut(F::SIZE).enumerate() {
            let value = F::from_ne(element);
            if value == fill || value.is_nan() {
                continue;
            }
            let bits = value.bits();
            let quantized = match (self.mode, &uniform) {
                (QuantizeMode::BitGroom, Some(m)) if (first + index as u64) % 2 == 0 => {
                    bits & m.keep
                }
                // Setting bits of a zero would make it a tiny non-zero number.
                (QuantizeMode::BitGroom, Some(_)) if value.is_zero() => continue,
                (QuantizeMode::BitGroom, Some(m)) => bits | m.set,
                (QuantizeMode::BitRound, Some(m)) => m.round::<F>(bits),
                _ if value.is_zero() => continue,
                _ => {
                    let keep = granular_bits(value.widen(), self.precision);
                    // The kept bits may exceed the significand's, as they do for infinities,
                    // where netcdf-c's mask arithmetic wraps; the same wrapping gives its
                    // results.
                    Masks::new::<F>(F::EXPLICIT_BITS.wrapping_sub(i32::from(keep))).round::<F>(bits)
                }
            };
            element.copy_from_slice(&F::from_bits(quantized).ne_bytes());
        }
    }
}

/// The value of an integer attribute of one element.
fn single_integer(value: &AttrValue) -> Option<i64> {
    let n: i128 = match value {
        AttrValue::Byte(v) => (*v.as_slice().first()?).into(),
        AttrValue::UByte(v) => (*v.as_slice().first()?).into(),
        AttrValue::Short(v) => (*v.as_slice().first()?).into(),
        AttrValue::UShort(v) => (*v.as_slice().first()?).into(),
        AttrValue::Int(v) => (*v.as_slice().first()?).into(),
        AttrValue::UInt(v) => (*v.as_slice().first()?).into(),
        AttrValue::Int64(v) => (*v.as_slice().first()?).into(),
        AttrValue::UInt64(v) => (*v.as_slice().first()?).into(),
        _ => return None,
    };
    (value.len() == 1).then(|| i64::try_from(n).ok()).flatten()
}

/// The explicit significand bits BitGroom keeps for `digits` decimal digits: rounded up, and
/// one more, as netcdf-c does (the implicit leading bit is not counted on, for the corner
/// cases of values near a power of two).
fn bitgroom_bits(digits: u32) -> i32 {
    (f64::from(digits) * BITS_PER_DIGIT).ceil() as i32 + 1
}

/// The explicit significand bits GranularBitRound keeps of `value` for `digits` decimal
/// digits, by netcdf-c's arithmetic step for step: netcdf-c truncates doubles to C `int`,
/// computes in `int` and stores the result in an `unsigned short`, and its results on x86-64
/// for values where those steps overflow (infinities) are what the x86 instructions give;
/// they are reproduced with [`c_int`] and wrapping arithmetic.
fn granular_bits(value: f64, digits: u32) -> u16 {
    let (mantissa, exponent) = frexp(value);
    let mantissa = mantissa.abs();
    let mantissa_log10 = mantissa.log10();
    // Decimal digits before the point: the value's decimal exponent plus one.
    let decimal_digits =
        c_int((f64::from(exponent) * DIGITS_PER_BIT + mantissa_log10).floor()).wrapping_add(1);
    // The power of two of the last place N digits reach.
    let quantum_power =
        c_int((BITS_PER_DIGIT * f64::from(decimal_digits.wrapping_sub(digits as i32))).floor());
    let kept = match mantissa == 0.0 {
        true => 0,
        false => c_int((f64::from(exponent) - BITS_PER_DIGIT * mantissa_log10).floor())
            .wrapping_sub(quantum_power)
            .wrapping_abs() as u16,
    };
    // netcdf-c keeps one bit fewer than the formula gives: it found that all its tests still
    // pass and the data compress better.
    kept.wrapping_sub(1)
}

/// C's conversion of a double to `int` as x86-64 does it (`cvttsd2si`): truncation, and
/// `INT_MIN` for NaN and for values out of range.
fn c_int(x: f64) -> i32 {
    // NaN is in no range.
    if !(-2_147_483_648.0..2_147_483_648.0).contains(&x) {
        i32::MIN
    } else {
        x as i32
    }
}

/// C's `frexp` as glibc does it: `x = mantissa * 2^exponent` with `0.5 <= |mantissa| < 1`;
/// zero, infinities and NaN come back as they are, with exponent 0.
fn frexp(x: f64) -> (f64, i32) {
    if x == 0.0 || !x.is_finite() {
        return (x, 0);
    }
    // A subnormal is scaled into the normal range first (2^54), so that its exponent field
    // tells its magnitude.
    let (x, offset) = match x.abs() < f64::MIN_POSITIVE {
        true => (x * f64::from_bits(0x4350_0000_0000_0000), -54),
        false => (x, 0),
    };
    let bits = x.to_bits();
    let biased = ((bits >> 52) & 0x7ff) as i32;
    // Set the exponent field to that of 0.5 (1022), keeping sign and significand.
    let mantissa = f64::from_bits((bits & !(0x7ff << 52)) | (1022 << 52));
    (mantissa, biased - 1022 + offset)
}

/// The three masks of one precision, on the bits of one float type (held in a `u64`).
struct Masks {
    /// Ones on the kept bits (sign, exponent and kept significand bits): AND shaves.
    keep: u64,
    /// Ones on the other bits: OR sets them.
    set: u64,
    /// The highest of the other bits: adding it rounds to the nearest kept value.
    half: u64,
}

impl Masks {
    /// The masks with the `zeroed` lowest bits not kept. netcdf-c shifts by `zeroed`
    /// whatever it is; x86-64's shift takes the count modulo the width, and so does this, for
    /// the counts of [`granular_bits`]'s wrapped results.
    fn new<F: Ieee>(zeroed: i32) -> Masks {
        let all = F::ALL_ONES;
        let keep = (all << ((zeroed as u32) & (F::BITS - 1))) & all;
        let set = !keep & all;
        Masks {
            keep,
            set,
            half: set & (keep >> 1),
        }
    }

    /// BitRound: add half of the last kept bit (the carry may reach the exponent), then
    /// shave; the sum wraps at the type's width as netcdf-c's unsigned arithmetic does.
    fn round<F: Ieee>(&self, bits: u64) -> u64 {
        (bits.wrapping_add(self.half) & F::ALL_ONES) & self.keep
    }
}

/// What the quantizers need of `f32` and `f64`.
trait Ieee: Copy + PartialEq {
    /// Bytes of one value.
    const SIZE: usize;
    /// Bits of one value.
    const BITS: u32;
    /// The value's bits all set, in a `u64`.
    const ALL_ONES: u64;
    /// Explicit significand bits (23, 52).
    const EXPLICIT_BITS: i32;
    fn from_ne(bytes: &[u8]) -> Self;
    fn ne_bytes(self) -> Vec<u8>;
    fn bits(self) -> u64;
    fn from_bits(bits: u64) -> Self;
    fn widen(self) -> f64;
    fn is_nan(self) -> bool;
    fn is_zero(self) -> bool;
}

impl Ieee for f32 {
    const SIZE: usize = 4;
    const BITS: u32 = 32;
    const ALL_ONES: u64 = u32::MAX as u64;
    const EXPLICIT_BITS: i32 = 23;
    fn from_ne(bytes: &[u8]) -> Self {
        f32::from_ne_bytes(bytes.try_into().expect("4 bytes"))
    }
    fn ne_bytes(self) -> Vec<u8> {
        self.to_ne_bytes().to_vec()
    }
    fn bits(self) -> u64 {
        self.to_bits().into()
    }
    fn from_bits(bits: u64) -> Self {
        f32::from_bits(bits as u32)
    }
    fn widen(self) -> f64 {
        self.into()
    }
    fn is_nan(self) -> bool {
        f32::is_nan(self)
    }
    fn is_zero(self) -> bool {
        self == 0.0
    }
}

impl Ieee for f64 {
    const SIZE: usize = 8;
    const BITS: u32 = 64;
    const ALL_ONES: u64 = u64::MAX;
    const EXPLICIT_BITS: i32 = 52;
    fn from_ne(bytes: &[u8]) -> Self {
        f64::from_ne_bytes(bytes.try_into().expect("8 bytes"))
    }
    fn ne_bytes(self) -> Vec<u8> {
        self.to_ne_bytes().to_vec()
    }
    fn bits(self) -> u64 {
        self.to_bits()
    }
    fn from_bits(bits: u64) -> Self {
        f64::from_bits(bits)
    }
    fn widen(self) -> f64 {
        self
    }
    fn is_nan(self) -> bool {
        f64::is_nan(self)
    }
    fn is_zero(self) -> bool {
        self == 0.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn floats(mode: QuantizeMode, precision: i64, values: &[u32]) -> Vec<u32> {
        let q = Quantize::new(mode, precision, NcType::Float).unwrap();
        let mut bytes: Vec<u8> = values.iter().flat_map(|b| b.to_ne_bytes()).collect();
        q.apply(NcType::Float, &mut bytes, None);
        bytes
            .chunks(4)
            .map(|c| u32::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    fn doubles(mode: QuantizeMode, precision: i64, values: &[u64]) -> Vec<u64> {
        let q = Quantize::new(mode, precision, NcType::Double).unwrap();
        let mut bytes: Vec<u8> = values.iter().flat_map(|b| b.to_ne_bytes()).collect();
        q.apply(NcType::Double, &mut bytes, None);
        bytes
            .chunks(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    /// 3 digits need ceil(3 log2 10) + 1 = 11 explicit bits, so BitGroom zeroes the low 12 of a
    /// float's 23 at even positions (mask 0xffff_f000) and sets them at odd ones (0xfff).
    #[test]
    fn bitgroom_shaves_even_positions_and_sets_odd_ones() {
        // 1.23456f = 0x3f9e0610, 2.34567f = 0x40161f75.
        assert_eq!(
            floats(
                QuantizeMode::BitGroom,
                3,
                &[0x3f9e_0610, 0x4016_1f75, 0xbf9e_0610, 0x4016_1f75]
            ),
            [0x3f9e_0000, 0x4016_1fff, 0xbf9e_0000, 0x4016_1fff]
        );
        // Doubles: 52 - 11 = 41 bits.
        assert_eq!(
            doubles(
                QuantizeMode::BitGroom,
                3,
                &[0x3ff3_c0c1_fc8f_3238, 0x4002_c3ee_a209_aaa4]
            ),
            [0x3ff3_c000_0000_0000, 0x4002_c3ff_ffff_ffff]
        );
        // 6 digits: ceil(19.93) + 1 = 21 bits kept, 2 zeroed.
        assert_eq!(
            floats(QuantizeMode::BitGroom, 6, &[0x3f9e_0613, 0x4016_1f74]),
            [0x3f9e_0610, 0x4016_1f77]
        );
    }

    /// BitRound with 5 bits adds bit 17 (half of bit 18, the last kept) and clears bits 0-17.
    #[test]
    fn bitround_rounds_to_the_kept_bits() {
        // 0x3f9e0610: significand bits 22-18 are 00111, the rest 10000000110_00010000 > half:
        // rounds up to 01000 → 0x3fa00000 (1.25).
        assert_eq!(
            floats(
                QuantizeMode::BitRound,
                5,
                &[0x3f9e_0610, 0x3f9d_ffff, 0x3f8a_0000]
            ),
            [0x3fa0_0000, 0x3f9c_0000, 0x3f8c_0000]
        );
        // The carry can reach the exponent: the largest float rounds to infinity.
        assert_eq!(
            floats(QuantizeMode::BitRound, 5, &[0x7f7f_ffff]),
            [0x7f80_0000]
        );
        // 23 bits keep everything.
        assert_eq!(
            floats(QuantizeMode::BitRound, 23, &[0x4016_1f75]),
            [0x4016_1f75]
        );
        // 52 - 5 = 47 bits zeroed on a double: 1.23456 → 1.25.
        assert_eq!(
            doubles(QuantizeMode::BitRound, 5, &[0x3ff3_c0c1_fc8f_3238]),
            [0x3ff4_0000_0000_0000]
        );
    }

    /// GranularBitRound on 1.23456 with 3 digits: frexp gives 0.61728 * 2^1, one digit before
    /// the point, so the last place of 3 digits is 2^floor(log2(10) * (1 - 3)) = 2^-7; with
    /// floor(1 - log2(0.61728)) = 1 that is 1 + 7 = 8 bits, less one: 7 explicit bits kept,
    /// so 0x3f9e0610 is rounded at bit 15 → 0x3f9e0000 (1.234375).
    #[test]
    fn granular_bitround_keeps_the_bits_each_value_needs() {
        assert_eq!(granular_bits(1.234_56, 3), 7);
        assert_eq!(
            floats(QuantizeMode::GranularBitRound, 3, &[0x3f9e_0610]),
            [0x3f9e_0000]
        );
        // 1234.56 = 0.6028 * 2^11: 4 digits before the point, last place 2^floor(3.32) =
        // 2^3; floor(11 - log2(0.6028)) = 11, so 11 - 3 = 8 bits, less one: 7. Its
        // significand 1.0011010|0… rounds down to 1.0011010b * 2^10 = 1232.
        assert_eq!(granular_bits(1234.56, 3), 7);
        assert_eq!(
            doubles(QuantizeMode::GranularBitRound, 3, &[1234.56f64.to_bits()]),
            [1232.0f64.to_bits()]
        );
    }

    /// NaN, the fill value and zeros stay; infinities are quantized as netcdf-c quantizes
    /// them (worked out from its masks: see `granular_bits` for the wrapped count 24).
    #[test]
    fn fill_nan_zero_and_infinities() {
        let nan = [0x7fc0_0001, 0x7fc0_0001, 0x7f80_0001, 0xffc0_0003];
        for mode in QuantizeMode::ALL {
            assert_eq!(floats(mode, 3, &nan), nan, "{mode:?}");
            let fill = 9.969_21e36_f32.to_bits();
            assert_eq!(floats(mode, 3, &[fill, fill]), [fill, fill], "{mode:?}");
            let zeros = [0, 0, 0x8000_0000, 0x8000_0000];
            assert_eq!(floats(mode, 3, &zeros), zeros, "{mode:?}");
        }
        let inf = [0x7f80_0000, 0x7f80_0000, 0xff80_0000, 0xff80_0000];
        assert_eq!(
            floats(QuantizeMode::BitGroom, 3, &inf),
            [0x7f80_0000, 0x7f80_0fff, 0xff80_0000, 0xff80_0fff]
        );
        // Kept-bit count 65535 → shift 23 - 65535 ≡ 24 (mod 32): keep 0xff000000, half
        // 0x00800000; 0x7f800000 + half = 0x80000000 (-0), 0xff800000 + half wraps to 0.
        assert_eq!(
            floats(QuantizeMode::GranularBitRound, 3, &inf),
            [0x8000_0000, 0x8000_0000, 0, 0]
        );
        assert_eq!(floats(QuantizeMode::BitRound, 5, &inf), inf);
        // A given fill (1.1f, 0x3f8ccccd) is spared and other values are not: 2.2f,
        // 0x400ccccd + 0x20000, shaved to 0x400c0000.
        let q = Quantize::new(QuantizeMode::BitRound, 5, NcType::Float).unwrap();
        let mut bytes = [1.1f32.to_ne_bytes(), 2.2f32.to_ne_bytes()].concat();
        q.apply(NcType::Float, &mut bytes, Some(&1.1f32.to_le_bytes()));
        assert_eq!(&bytes[..4], 1.1f32.to_ne_bytes());
        assert_eq!(&bytes[4..], 0x400c_0000u32.to_ne_bytes());
    }

    #[test]
    fn bitgroom_alternates_from_the_first_values_position() {
        // Values from position 1 of a write are quantized as the tail of that write.
        let q = Quantize::new(QuantizeMode::BitGroom, 3, NcType::Float).unwrap();
        let values: Vec<f32> = vec![1.2345, 31.4567, 2.5432, 14.0123, -1.7654];
        let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
        let mut whole = bytes(&values);
        q.apply(NcType::Float, &mut whole, None);
        let mut tail = bytes(&values[1..]);
        q.apply_at(NcType::Float, &mut tail, None, 1);
        assert_eq!(tail, whole[4..]);
        let mut from_zero = bytes(&values[1..]);
        q.apply(NcType::Float, &mut from_zero, None);
        assert_ne!(from_zero, whole[4..]);
    }

    #[test]
    fn frexp_matches_c() {
        assert_eq!(frexp(1.0), (0.5, 1));
        assert_eq!(frexp(-12.0), (-0.75, 4));
        assert_eq!(frexp(f64::from_bits(1)), (0.5, -1073));
        assert_eq!(frexp(f64::MAX).1, 1024);
        assert_eq!(frexp(f64::INFINITY), (f64::INFINITY, 0));
    }

    /// netcdf-c 4.10's limits (netCDF4-python's `significant_digits` refused with
    /// `NC_EINVAL` beyond them).
    #[test]
    fn precision_limits_are_netcdf_cs() {
        use QuantizeMode::*;
        for (mode, t, max) in [
            (BitGroom, NcType::Float, 6),
            (GranularBitRound, NcType::Float, 6),
            (BitRound, NcType::Float, 23),
            (BitGroom, NcType::Double, 15),
            (GranularBitRound, NcType::Double, 15),
            (BitRound, NcType::Double, 52),
        ] {
            assert!(Quantize::new(mode, 1, t).is_ok());
            assert!(Quantize::new(mode, max, t).is_ok());
            assert!(Quantize::new(mode, max + 1, t).is_err());
            assert!(Quantize::new(mode, 0, t).is_err());
            assert!(Quantize::new(mode, -1, t).is_err());
        }
        for t in [
            NcType::Int,
            NcType::Short,
            NcType::Char,
            NcType::String,
            NcType::UInt64,
        ] {
            assert!(Quantize::new(BitRound, 3, t).is_err());
        }
    }
}
