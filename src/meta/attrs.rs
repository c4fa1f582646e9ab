//! Attribute values: JSON (plus an optional NCZarr dtype) to typed netCDF values.
//!
//! With a dtype from NCZarr's `types` map the values are converted to that type. Without one
//! (pure Zarr) the type is inferred from *all* elements, the way netcdf-c does it but without
//! its first-element-only defect: integers pick the first of int, uint, int64, uint64 that holds
//! every value; any float makes it double, and so do `"NaN"`, `"Infinity"` and `"-Infinity"`
//! beside numbers; booleans are ubyte; a string is char text; anything else (objects, arrays
//! of strings, other mixed arrays, null) becomes the char text of the JSON.

use super::json::Json;
use crate::error::quoted;
use crate::model::{AttrValue, NcType};
use crate::{Error, Result};

/// Names of attributes that carry metadata and are never shown as attributes.
pub fn is_hidden(name: &str) -> bool {
    matches!(name, "_ARRAY_DIMENSIONS" | "_NCProperties")
        || matches!(
            name.to_ascii_lowercase().as_str(),
            "_nczarr_superblock"
                | "_nczarr_group"
                | "_nczarr_array"
                | "_nczarr_attr"
                | "_nczarr_attrs"
        )
}

/// The netCDF type an NCZarr attribute dtype stands for; `None` for `|J0` (JSON as char
/// text) and for dtypes that mean nothing to netCDF. `single_string` says whether the value
/// is one JSON string, which decides the ambiguous `|S1` (char in NCZarr 1.0.0, a one-byte
/// string later).
pub fn nctype_of_attr_dtype(dtype: &str, single_string: bool) -> Option<NcType> {
    let (order, rest) = dtype.split_at(dtype.char_indices().nth(1).map_or(0, |(i, _)| i));
    let (kind, size) = rest.split_at(rest.char_indices().nth(1).map_or(0, |(i, _)| i));
    let size: usize = size.parse().ok()?;
    Some(match (kind, size) {
        ("b", 1) => NcType::UByte,
        ("i", 1) => NcType::Byte,
        ("i", 2) => NcType::Short,
        ("i", 4) => NcType::Int,
        ("i", 8) => NcType::Int64,
        ("u", 1) => NcType::UByte,
        ("u", 2) => NcType::UShort,
        ("u", 4) => NcType::UInt,
        ("u", 8) => NcType::UInt64,
        ("f", 4) => NcType::Float,
        ("f", 8) => NcType::Double,
        ("S", 1) if order != "|" || single_string => NcType::Char,
        ("U", 1) => NcType::Char,
        ("S" | "U", n) if n > 0 => NcType::String,
        _ => return None,
    })
}

/// Converts one attribute. `dtype` is the NCZarr-recorded type, if any; `key` and `name` are
/// for error messages.
pub fn convert(key: &str, name: &str, value: &Json, dtype: Option<&str>) -> Result<AttrValue> {
    match dtype {
        Some(d) => {
            let single = matches!(value, Json::Str(_));
            match nctype_of_attr_dtype(d, single) {
                Some(t) => to_type(key, name, value, t),
                None if d == "|J0" => Ok(char_text(value)),
                None => {
                    log::warn!(
                        "{key}: attribute {name}: unknown dtype {}, inferring a type",
                        quoted(d)
                    );
                    infer(key, name, value)
                }
            }
        }
        None => infer(key, name, value),
    }
}

/// Converts one attribute of a dataset read as pure Zarr, whose NCZarr-recorded type `dtype`
/// is applied as netcdf-c 4.10.1 applies it in `mode=zarr`: the same as [`convert`], except
/// that a one-byte string type (`>S1`, NCZarr's char) on a JSON string or a list of strings
/// is a string there, as it is for arrays. Any other JSON under `>S1` is char text that
/// netcdf-c stored as JSON (`{"a": 1}`, `[[1,2]]`): netcdf-c reads it back as that char text
/// in both modes. It refuses to open a dataset holding numbers or booleans under `>S1`;
/// their char text is what NCZarr makes of them, and loses nothing.
pub fn convert_pure(key: &str, name: &str, value: &Json, dtype: Option<&str>) -> Result<AttrValue> {
    let strings = match value {
        Json::Str(_) | Json::Bytes(_) => true,
        Json::Arr(items) => items
            .iter()
            .all(|e| matches!(e, Json::Str(_) | Json::Bytes(_))),
        _ => false,
    };
    match dtype {
        Some(d) if d.get(1..) == Some("S1") && strings => to_type(key, name, value, NcType::String),
        _ => convert(key, name, value, dtype),
    }
}

/// The char text of a value: a string's content, anything else as JSON text. netcdf-c stores
/// a char attribute whose text parses as JSON as that JSON (`["lat","lon"]`), and reads it
/// back as the text.
fn char_text(value: &Json) -> AttrValue {
    match value {
        Json::Str(s) => AttrValue::Char(s.as_bytes().to_vec()),
        Json::Bytes(b) => AttrValue::Char(b.clone()),
        other => AttrValue::Char(other.unparse().into_bytes()),
    }
}

fn elements(value: &Json) -> Vec<&Json> {
    match value {
        Json::Arr(items) => items.iter().collect(),
        v => vec![v],
    }
}

/// Infers the type of an untyped (pure Zarr) attribute.
pub fn infer(key: &str, name: &str, value: &Json) -> Result<AttrValue> {
    let elems = elements(value);
    match value {
        Json::Str(_) | Json::Bytes(_) | Json::Null | Json::Obj(_) => return Ok(char_text(value)),
        Json::Arr(items) if items.is_empty() => return Ok(AttrValue::Char(Vec::new())),
        _ => {}
    }
    // netcdf-c writes the non-finite elements of a double attribute as these strings (JSON
    // has no such numbers) and reads such a list back as doubles. Only beside a number: a
    // list of these strings alone is text to netcdf-c and zarr-python alike.
    let non_finite = |e: &Json| matches!(e, Json::Str(s) if is_non_finite(s));
    if elems.iter().any(|e| matches!(e, Json::Num(_)))
        && elems.iter().any(|e| non_finite(e))
        && elems
            .iter()
            .all(|e| matches!(e, Json::Num(_)) || non_finite(e))
    {
        return to_type(key, name, value, NcType::Double);
    }
    if !elems
        .iter()
        .all(|e| matches!(e, Json::Num(_) | Json::Bool(_)))
    {
        return Ok(AttrValue::Char(value.unparse().into_bytes()));
    }
    if elems.iter().all(|e| matches!(e, Json::Bool(_))) {
        return to_type(key, name, value, NcType::UByte);
    }
    let ints: Option<Vec<i128>> = elems.iter().map(|e| int_of(e)).collect();
    let t = match ints {
        None => NcType::Double,
        Some(v) => {
            let fits = |lo: i128, hi: i128| v.iter().all(|x| (lo..=hi).contains(x));
            if fits(i32::MIN.into(), i32::MAX.into()) {
                NcType::Int
            } else if fits(0, u32::MAX.into()) {
                NcType::UInt
            } else if fits(i64::MIN.into(), i64::MAX.into()) {
                NcType::Int64
            } else if fits(0, u64::MAX.into()) {
                NcType::UInt64
            } else {
                NcType::Double
            }
        }
    };
    to_type(key, name, value, t)
}

/// Whether `s` is how JSON writers (Python's, netcdf-c's) spell a non-finite double.
fn is_non_finite(s: &str) -> bool {
    matches!(s, "NaN" | "Infinity" | "-Infinity")
}

/// An integer-spelled number (or boolean) as an integer.
fn int_of(e: &Json) -> Option<i128> {
    match e {
        Json::Bool(b) => Some(i128::from(*b)),
        Json::Num(n) => n.parse().ok(),
        _ => None,
    }
}

/// A number (or boolean, or a string spelling a number or `NaN`/`Infinity`) as a double.
fn float_of(e: &Json) -> Option<f64> {
    match e {
        Json::Bool(b) => Some(f64::from(u8::from(*b))),
        Json::Num(n) | Json::Str(n) => match n.trim() {
            "NaN" | "nan" => Some(f64::NAN),
            "Infinity" | "inf" | "+Infinity" => Some(f64::INFINITY),
            "-Infinity" | "-inf" => Some(f64::NEG_INFINITY),
            t => t.parse().ok(),
        },
        _ => None,
    }
}

/// Converts the elements of `value` to netCDF type `t`.
pub fn to_type(key: &str, name: &str, value: &Json, t: NcType) -> Result<AttrValue> {
    if t == NcType::Char {
        return Ok(char_text(value));
    }
    let elems = elements(value);
    if t == NcType::String {
        return Ok(AttrValue::Str(
            elems
                .iter()
                .map(|e| match e {
                    Json::Str(s) => s.clone(),
                    // netCDF strings are text: bytes that are not UTF-8 cannot all be kept.
                    Json::Bytes(b) => String::from_utf8_lossy(b).into_owned(),
                    other => other.unparse(),
                })
                .collect(),
        ));
    }
    let bad = |e: &Json, why: &str| {
        Error::meta(
            key,
            format!(
                "attribute {name}: value {} {why} {}",
                e.unparse(),
                t.cdl_name()
            ),
        )
    };
    macro_rules! ints {
        ($variant:ident, $ty:ty) => {{
            let mut out = Vec::with_capacity(elems.len());
            for e in &elems {
                let v = match int_of(e) {
                    Some(i) => i,
                    // Integral values written as floats (`1.0`, `1e3`) are accepted.
                    None => match float_of(e) {
                        Some(f) if f.fract() == 0.0 && f.abs() < 1e38 => f as i128,
                        _ => return Err(bad(e, "is not an integer of type")),
                    },
                };
                out.push(<$ty>::try_from(v).map_err(|_| bad(e, "does not fit in"))?);
            }
            Ok(AttrValue::$variant(out))
        }};
    }
    match t {
        NcType::Byte => ints!(Byte, i8),
        NcType::UByte => ints!(UByte, u8),
        NcType::Short => ints!(Short, i16),
        NcType::UShort => ints!(UShort, u16),
        NcType::Int => ints!(Int, i32),
        NcType::UInt => ints!(UInt, u32),
        NcType::Int64 => ints!(Int64, i64),
        NcType::UInt64 => ints!(UInt64, u64),
        NcType::Float | NcType::Double => {
            let mut out = Vec::with_capacity(elems.len());
            for e in &elems {
                out.push(float_of(e).ok_or_else(|| bad(e, "is not a number of type"))?);
            }
            Ok(if t == NcType::Float {
                AttrValue::Float(out.into_iter().map(|f| f as f32).collect())
            } else {
                AttrValue::Double(out)
            })
        }
        NcType::Char | NcType::String => unreachable!("handled above"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn j(s: &str) -> Json {
        Json::parse("k", s.as_bytes()).unwrap()
    }

    fn inf(s: &str) -> AttrValue {
        infer("k", "a", &j(s)).unwrap()
    }

    // Expected types from netcdf-c 4.10.1 (netCDF4-python) reading a pure Zarr store with
    // these attributes, except for the mixed [1, 2.5] (netcdf-c guesses from the first
    // element and truncates; the documented defect).
    #[test]
    fn inference() {
        assert_eq!(inf("1"), AttrValue::Int(vec![1]));
        assert_eq!(inf("[-1, 2]"), AttrValue::Int(vec![-1, 2]));
        assert_eq!(inf("4294967295"), AttrValue::UInt(vec![4294967295]));
        assert_eq!(inf("1099511627776"), AttrValue::Int64(vec![1099511627776]));
        assert_eq!(
            inf("[-1, 3000000000]"),
            AttrValue::Int64(vec![-1, 3000000000])
        );
        assert_eq!(
            inf("18446744073709551615"),
            AttrValue::UInt64(vec![u64::MAX])
        );
        assert_eq!(inf("1.5"), AttrValue::Double(vec![1.5]));
        assert_eq!(inf("[1, 2.5]"), AttrValue::Double(vec![1.0, 2.5]));
        assert_eq!(inf("1e300"), AttrValue::Double(vec![1e300]));
        assert_eq!(inf("true"), AttrValue::UByte(vec![1]));
        assert_eq!(inf("[true, false]"), AttrValue::UByte(vec![1, 0]));
        assert_eq!(inf("\"x\""), AttrValue::Char(b"x".to_vec()));
        assert_eq!(inf("\"NaN\""), AttrValue::Char(b"NaN".to_vec()));
        assert_eq!(
            inf(r#"["a","b"]"#),
            AttrValue::Char(br#"["a","b"]"#.to_vec())
        );
        assert_eq!(inf(r#"{"a":1}"#), AttrValue::Char(br#"{"a": 1}"#.to_vec()));
        assert_eq!(inf(r#"["a",1]"#), AttrValue::Char(br#"["a",1]"#.to_vec()));
        assert_eq!(inf("null"), AttrValue::Char(b"null".to_vec()));
        let AttrValue::Double(v) = inf("NaN") else {
            panic!()
        };
        assert!(v[0].is_nan());
        // Fixture ref_power_901_constants: valid_range = -999999986991104., 999999986991104.
        assert_eq!(
            inf("[-999999986991104.0, 999999986991104.0]"),
            AttrValue::Double(vec![-999999986991104.0, 999999986991104.0])
        );
        // netcdf-c 4.10.1 writes a double attribute's non-finite elements so, and reads them
        // back as doubles; the strings alone stay text (as for netcdf-c).
        let AttrValue::Double(v) = inf(r#"[1.5, "Infinity", "-Infinity", "NaN"]"#) else {
            panic!()
        };
        assert_eq!(v[..3], [1.5, f64::INFINITY, f64::NEG_INFINITY]);
        assert!(v[3].is_nan());
        let AttrValue::Double(v) = inf(r#"[1, "NaN"]"#) else {
            panic!()
        };
        assert_eq!(v[0], 1.0);
        assert!(v[1].is_nan());
        assert_eq!(
            inf(r#"["NaN","-Infinity"]"#),
            AttrValue::Char(br#"["NaN","-Infinity"]"#.to_vec())
        );
        assert_eq!(
            inf(r#"[1.5, "inf"]"#),
            AttrValue::Char(br#"[1.5,"inf"]"#.to_vec())
        );
        assert_eq!(
            inf(r#"[true, "NaN"]"#),
            AttrValue::Char(br#"[true,"NaN"]"#.to_vec())
        );
        // Full double precision is kept.
        assert_eq!(
            inf("3.141592653589793"),
            AttrValue::Double(vec![std::f64::consts::PI])
        );
    }

    #[test]
    fn typed() {
        let c = |v: &str, d: &str| convert("k", "a", &j(v), Some(d)).unwrap();
        assert_eq!(c("17", "<i4"), AttrValue::Int(vec![17]));
        assert_eq!(c("17", ">i4"), AttrValue::Int(vec![17]));
        assert_eq!(c("[1,2]", "<i8"), AttrValue::Int64(vec![1, 2]));
        assert_eq!(c("7", "<u1"), AttrValue::UByte(vec![7]));
        assert_eq!(c("-1", "|i1"), AttrValue::Byte(vec![-1]));
        assert_eq!(c("1", "<f8"), AttrValue::Double(vec![1.0]));
        assert_eq!(c("[1,2]", "<f4"), AttrValue::Float(vec![1.0, 2.0]));
        assert_eq!(
            c("\"latitude\"", ">S1"),
            AttrValue::Char(b"latitude".to_vec())
        );
        assert_eq!(c("\"ghi\"", "<U1"), AttrValue::Char(b"ghi".to_vec()));
        assert_eq!(c("\"ghi\"", "|S1"), AttrValue::Char(b"ghi".to_vec()));
        assert_eq!(
            c(r#"["a","b"]"#, "|S128"),
            AttrValue::Str(vec!["a".into(), "b".into()])
        );
        // netcdf-c 4.10.1 (netCDF4-python) reads a stored array of strings typed >S1 as its
        // JSON text: it is how it stores a char attribute whose text is that JSON.
        assert_eq!(
            c(r#"["ghi", "jkl"]"#, ">S1"),
            AttrValue::Char(br#"["ghi","jkl"]"#.to_vec())
        );
        // ref_jsonconvention: a JSON structure typed >S1 shows as its JSON text.
        assert_eq!(
            c(r#"{"key1": [1,2,3], "key2": {"key3": "abc"}}"#, ">S1"),
            AttrValue::Char(br#"{"key1": [1,2,3], "key2": {"key3": "abc"}}"#.to_vec())
        );
        assert_eq!(
            c("[0.,0.,1.]", ">S1"),
            AttrValue::Char(b"[0.,0.,1.]".to_vec())
        );
        assert_eq!(
            c(r#"{"a": 1}"#, "|J0"),
            AttrValue::Char(br#"{"a": 1}"#.to_vec())
        );
        let AttrValue::Float(v) = c("\"NaN\"", "<f4") else {
            panic!()
        };
        assert!(v[0].is_nan());
        assert_eq!(
            c("\"-Infinity\"", "<f8"),
            AttrValue::Double(vec![f64::NEG_INFINITY])
        );
    }

    #[test]
    fn typed_read_as_pure_zarr() {
        let c = |v: &str, d: &str| convert_pure("k", "a", &j(v), Some(d)).unwrap();
        // netcdf-c 4.10.1 in mode=zarr: a `>S1` attribute is a string, the rest as in NCZarr.
        assert_eq!(c("\"ghi\"", ">S1"), AttrValue::Str(vec!["ghi".into()]));
        assert_eq!(c("[]", ">S1"), AttrValue::Str(vec![]));
        // Char text netcdf-c stored as JSON stays char text, as netcdf-c reads it back
        // (`nc_inq_atttype` NC_CHAR, `nc_get_att_text`), lists of strings aside.
        for (json, text) in [
            (r#"{"a": 1}"#, r#"{"a": 1}"#),
            (r#"[{"a": 1}]"#, r#"[{"a": 1}]"#),
            ("[[1, 2], [3]]", "[[1,2],[3]]"),
            (r#"["a", null]"#, r#"["a",null]"#),
            ("null", "null"),
            // netcdf-c refuses these; NCZarr's reading of them.
            ("1", "1"),
            ("[true, false]", "[true,false]"),
            (r#"[1, "a"]"#, r#"[1,"a"]"#),
        ] {
            assert_eq!(c(json, ">S1"), AttrValue::Char(text.into()), "{json}");
        }
        assert_eq!(c("[1,2]", "<u2"), AttrValue::UShort(vec![1, 2]));
        assert_eq!(
            c(r#"["a","b"]"#, "|S128"),
            AttrValue::Str(vec!["a".into(), "b".into()])
        );
    }

    #[test]
    fn typed_errors() {
        assert!(convert("k", "a", &j("300"), Some("<u1")).is_err());
        assert!(convert("k", "a", &j("\"x\""), Some("<i4")).is_err());
        assert!(convert("k", "a", &j("1.5"), Some("<i4")).is_err());
    }

    /// netcdf-c 4.10.1 (`mode=zarr` and NCZarr alike) writes a char attribute's bytes into the
    /// JSON as they are (`"_FillValue": "\xff"`): they read back as those bytes, not as JSON
    /// text, and as a string attribute (netCDF4-python's `'\ufffd'`) with the replacement
    /// character.
    #[test]
    fn bytes_that_are_not_utf8_are_char_text() {
        let raw = Json::parse("k", b"\"a\xff\"").unwrap();
        assert_eq!(
            infer("k", "a", &raw).unwrap(),
            AttrValue::Char(b"a\xff".to_vec())
        );
        assert_eq!(
            to_type("k", "a", &raw, NcType::String).unwrap(),
            AttrValue::Str(vec!["a\u{fffd}".into()])
        );
    }

    #[test]
    fn hidden() {
        for h in [
            "_ARRAY_DIMENSIONS",
            "_NCProperties",
            "_nczarr_group",
            "_NCZARR_ATTR",
            "_nczarr_array",
            "_nczarr_superblock",
        ] {
            assert!(is_hidden(h), "{h}");
        }
        // ref_string_nczarr.baseline shows these.
        assert!(!is_hidden("_nczarr_maxstrlen"));
        assert!(!is_hidden("_nczarr_default_maxstrlen"));
        assert!(!is_hidden("_FillValue"));
    }
}
