//! The `fill_value` of a Zarr v2 array as one native element (see
//! [`crate::model::VarStorage::fill_value`]).

use super::json::Json;
use crate::model::{AttrValue, DtypeKind, NcType, ZarrDtype};
use crate::{Error, Result};

/// Converts a `.zarray` `fill_value` for a variable of type `t` stored as `dtype`, whose native
/// string width is `string_width`. `null` gives `None`. A byte-string fill is base64, as the
/// Zarr v2 spec says (and zarr-python writes).
pub fn fill_value(
    key: &str,
    value: &Json,
    t: NcType,
    dtype: &ZarrDtype,
    string_width: usize,
) -> Result<Option<Vec<u8>>> {
    convert(key, value, t, dtype, string_width, true)
}

/// [`fill_value`] for an array NCZarr describes: netcdf-c writes a byte-string fill as its
/// plain text (`"dj"` is the two letters, not base64 of `v`), and a char fill that reads as
/// JSON as that JSON (the char `6` as the number 6).
pub fn nczarr_fill_value(
    key: &str,
    value: &Json,
    t: NcType,
    dtype: &ZarrDtype,
    string_width: usize,
) -> Result<Option<Vec<u8>>> {
    convert(key, value, t, dtype, string_width, false)
}

fn convert(
    key: &str,
    value: &Json,
    t: NcType,
    dtype: &ZarrDtype,
    string_width: usize,
    base64: bool,
) -> Result<Option<Vec<u8>>> {
    if *value == Json::Null {
        return Ok(None);
    }
    let bad = || {
        Error::meta(
            key,
            format!(
                "fill_value {} does not fit dtype {}",
                value.unparse(),
                dtype.to_numpy()
            ),
        )
    };
    // One element, whatever the type: a list (zarr-python refuses one for these dtypes)
    // would otherwise give its first value.
    if matches!(value, Json::Arr(_) | Json::Obj(_)) {
        return Err(bad());
    }
    match t {
        NcType::Char => Ok(Some(vec![match value {
            Json::Str(s) => {
                let bytes = string_bytes(s, dtype, base64);
                bytes.first().copied().unwrap_or(0)
            }
            // netcdf-c stores char text that parses as JSON as that JSON (its "JSON
            // convention"): the char `6` is written as the number 6.
            Json::Num(_) | Json::Bool(_) if !base64 => value.unparse().bytes().next().unwrap_or(0),
            Json::Bytes(b) => b.first().copied().unwrap_or(0),
            other => match super::attrs::to_type(key, "fill_value", other, NcType::UByte) {
                Ok(AttrValue::UByte(v)) => v.first().copied().ok_or_else(bad)?,
                _ => return Err(bad()),
            },
        }])),
        NcType::String => {
            let mut bytes = match value {
                Json::Str(s) => string_bytes(s, dtype, base64),
                Json::Bytes(b) => b.clone(),
                Json::Num(_) | Json::Bool(_) => Vec::new(),
                _ => return Err(bad()),
            };
            bytes.resize(string_width, 0);
            Ok(Some(bytes))
        }
        _ => {
            let v = super::attrs::to_type(key, "fill_value", value, t).map_err(|_| bad())?;
            native_bytes(&v).ok_or_else(bad).map(Some)
        }
    }
}

/// An untyped `_FillValue` attribute (pure Zarr) in the variable's type `t`, as netCDF
/// requires. A float variable's may be a string of base64: xarray writes it so in Zarr v3 (a
/// little-endian double, whatever the variable's width), and decodes it so on read.
pub fn fill_attribute(key: &str, value: &Json, t: NcType) -> Result<AttrValue> {
    let decoded = xarray_float_fill(value, t);
    super::attrs::to_type(key, "_FillValue", decoded.as_ref().unwrap_or(value), t)
}

fn xarray_float_fill(value: &Json, t: NcType) -> Option<Json> {
    let Json::Str(s) = value else {
        return None;
    };
    if !matches!(t, NcType::Float | NcType::Double) {
        return None;
    }
    let bytes: [u8; 8] = base64_decode(s)?.try_into().ok()?;
    Some(Json::Num(format!("{:?}", f64::from_le_bytes(bytes))))
}

/// The bytes a string `fill_value` stands for: zarr-python stores a `|S` fill as base64 (when
/// `base64`); anything that is not valid base64 is taken as the text itself.
fn string_bytes(s: &str, dtype: &ZarrDtype, base64: bool) -> Vec<u8> {
    if base64 && dtype.kind == DtypeKind::Bytes {
        if let Some(b) = base64_decode(s) {
            return b;
        }
    }
    s.as_bytes().to_vec()
}

/// The value a Zarr v2 object array of strings (`|O`) gets where nothing was written, as
/// zarr-python reads it: a `vlen-bytes` fill is base64 (when valid), a `vlen-utf8` one the text
/// itself; a number or boolean is its text (`0`, `True`); `null` is none (the empty string).
pub fn object_fill(key: &str, value: &Json, bytes_codec: bool) -> Result<Option<Vec<u8>>> {
    Ok(match value {
        Json::Null => None,
        Json::Str(s) if bytes_codec => {
            Some(base64_decode(s).unwrap_or_else(|| s.as_bytes().to_vec()))
        }
        Json::Str(s) => Some(s.as_bytes().to_vec()),
        Json::Bytes(b) => Some(b.clone()),
        Json::Num(n) => Some(n.as_bytes().to_vec()),
        Json::Bool(true) => Some(b"True".to_vec()),
        Json::Bool(false) => Some(b"False".to_vec()),
        other => {
            return Err(Error::meta(
                key,
                format!(
                    "fill_value {} of an object array is not a value",
                    other.unparse()
                ),
            ))
        }
    })
}

/// The first element of a single-valued numeric attribute in little-endian bytes.
fn native_bytes(v: &AttrValue) -> Option<Vec<u8>> {
    Some(match v {
        AttrValue::Byte(x) => x.first()?.to_le_bytes().to_vec(),
        AttrValue::UByte(x) => x.first()?.to_le_bytes().to_vec(),
        AttrValue::Short(x) => x.first()?.to_le_bytes().to_vec(),
        AttrValue::UShort(x) => x.first()?.to_le_bytes().to_vec(),
        AttrValue::Int(x) => x.first()?.to_le_bytes().to_vec(),
        AttrValue::UInt(x) => x.first()?.to_le_bytes().to_vec(),
        AttrValue::Int64(x) => x.first()?.to_le_bytes().to_vec(),
        AttrValue::UInt64(x) => x.first()?.to_le_bytes().to_vec(),
        AttrValue::Float(x) => x.first()?.to_le_bytes().to_vec(),
        AttrValue::Double(x) => x.first()?.to_le_bytes().to_vec(),
        AttrValue::Char(x) => vec![*x.first()?],
        AttrValue::Str(_) => return None,
    })
}

/// A `_FillValue` attribute as one native element of a variable of type `t`.
pub fn from_attr(v: &AttrValue, t: NcType, string_width: usize) -> Option<Vec<u8>> {
    match (v, t) {
        (AttrValue::Str(s), NcType::String) => {
            let mut b = s.first()?.as_bytes().to_vec();
            b.resize(string_width, 0);
            Some(b)
        }
        (AttrValue::Char(c), NcType::String) => {
            let mut b = c.clone();
            b.resize(string_width, 0);
            Some(b)
        }
        (v, t) if v.nctype() == t => native_bytes(v),
        _ => None,
    }
}

/// Standard base64 (with or without padding); `None` if `s` is not base64.
fn base64_decode(s: &str) -> Option<Vec<u8>> {
    let s = s.trim_end_matches('=');
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let mut acc = 0u32;
    let mut nbits = 0;
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'+' => 62,
            b'/' => 63,
            _ => return None,
        };
        acc = (acc << 6) | u32::from(v);
        nbits += 6;
        if nbits >= 8 {
            nbits -= 8;
            out.push((acc >> nbits) as u8);
            acc &= (1 << nbits) - 1;
        }
    }
    // A single leftover sextet cannot come from an encoder.
    (nbits < 6).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fv(v: &str, t: NcType, d: &str, w: usize) -> Option<Vec<u8>> {
        let j = Json::parse("k", v.as_bytes()).unwrap();
        fill_value("k", &j, t, &ZarrDtype::parse(d).unwrap(), w).unwrap()
    }

    #[test]
    fn numbers() {
        assert_eq!(fv("null", NcType::Int, "<i4", 0), None);
        assert_eq!(
            fv("-1", NcType::Int, "<i4", 0),
            Some((-1i32).to_le_bytes().to_vec())
        );
        assert_eq!(fv("0", NcType::UByte, "|u1", 0), Some(vec![0]));
        assert_eq!(
            fv("9.96921e+36", NcType::Float, "<f4", 0),
            Some(9.96921e36f32.to_le_bytes().to_vec())
        );
        assert_eq!(
            fv("\"NaN\"", NcType::Float, "<f4", 0),
            Some(f32::NAN.to_le_bytes().to_vec())
        );
        assert_eq!(
            fv("\"-Infinity\"", NcType::Double, ">f8", 0),
            Some(f64::NEG_INFINITY.to_le_bytes().to_vec())
        );
        assert_eq!(fv("true", NcType::UByte, "|b1", 0), Some(vec![1]));
        assert_eq!(
            fv("18446744073709551614", NcType::UInt64, "<u8", 0),
            Some(18446744073709551614u64.to_le_bytes().to_vec())
        );
    }

    #[test]
    fn strings_and_chars() {
        // netcdf-c writes "" for char and string variables.
        assert_eq!(fv("\"\"", NcType::Char, ">S1", 0), Some(vec![0]));
        assert_eq!(fv("\"\"", NcType::String, "|S4", 4), Some(vec![0; 4]));
        // zarr-python: base64 of b"ab" is "YWI=".
        assert_eq!(
            fv("\"YWI=\"", NcType::String, "|S4", 4),
            Some(b"ab\0\0".to_vec())
        );
        assert_eq!(
            fv("\"xy\"", NcType::String, "<U2", 8),
            Some(b"xy\0\0\0\0\0\0".to_vec())
        );
    }

    #[test]
    fn nczarr_byte_string_fills_are_plain_text() {
        // netcdf-c 4.10.1 writes `string v:_FillValue = "dj"` as `"fill_value": "dj"`.
        let j = Json::parse("k", b"\"dj\"").unwrap();
        let d = ZarrDtype::parse("|S4").unwrap();
        let got = nczarr_fill_value("k", &j, NcType::String, &d, 4).unwrap();
        assert_eq!(got, Some(b"dj\0\0".to_vec()));
        let d = ZarrDtype::parse(">S1").unwrap();
        let j = Json::parse("k", b"\"QQ==\"").unwrap();
        let got = nczarr_fill_value("k", &j, NcType::Char, &d, 0).unwrap();
        assert_eq!(got, Some(b"Q".to_vec()));
        // netcdf-c 4.10.1 writes the char fill '6' as `"fill_value": 6`.
        let j = Json::parse("k", b"6").unwrap();
        let got = nczarr_fill_value("k", &j, NcType::Char, &d, 0).unwrap();
        assert_eq!(got, Some(b"6".to_vec()));
    }

    #[test]
    fn out_of_range_is_an_error() {
        let j = Json::parse("k", b"300").unwrap();
        let d = ZarrDtype::parse("|u1").unwrap();
        assert!(fill_value("v/.zarray", &j, NcType::UByte, &d, 0).is_err());
    }

    #[test]
    fn base64() {
        assert_eq!(base64_decode("aGVsbG8="), Some(b"hello".to_vec()));
        assert_eq!(base64_decode(""), Some(vec![]));
        assert_eq!(base64_decode("a b"), None);
    }
}
