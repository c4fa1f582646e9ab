//! The content of the layout's generated files: `@metadata.json`, `@header.cdl` and attribute
//! files. Every call into the CDL writer is in this file.

use std::path::Path;

use serde_json::{json, Map, Number, Value};

use crate::cdl::writer;
use crate::chunk::ChunkEngine;
use crate::model::{AttrValue, Attribute, CodecSpec, Dataset, GroupId, NcType, VarId};
use crate::Result;

use super::layout::Resolved;

/// `@header.cdl`: for the root group `ncdump -h` of the whole dataset (what `nczarrfs dump -h`
/// prints), for a subgroup its own dimensions, variables and attributes, for a variable its
/// declaration and attributes.
pub fn header(
    ds: &Dataset,
    engine: &ChunkEngine,
    dataset_name: &std::ffi::OsStr,
    r: Resolved,
) -> Result<Vec<u8>> {
    match r {
        Resolved::Group(g) if g == Dataset::ROOT => {
            let opts = writer::DumpOptions {
                header_only: true,
                ..Default::default()
            };
            let mut out = Vec::new();
            writer::dump(
                ds,
                engine,
                dataset_name,
                &opts,
                &mut out,
                Path::new("@header.cdl"),
            )?;
            Ok(out)
        }
        Resolved::Group(g) => Ok(writer::group_header(ds, g).into_bytes()),
        Resolved::Var(v) => Ok(writer::var_header(ds, v).into_bytes()),
    }
}

/// An attribute file: the raw bytes of a `char` attribute, otherwise the CDL value list
/// followed by a newline.
pub fn attr_file(attr: &Attribute) -> Result<Vec<u8>> {
    Ok(match &attr.value {
        AttrValue::Char(bytes) => bytes.clone(),
        other => {
            let mut text = writer::attr_values(other).into_bytes();
            text.push(b'\n');
            text
        }
    })
}

/// The NumPy dtype of a variable's `data` file: native byte order, strings as `|S<width>`.
pub fn native_dtype(nctype: NcType, element_size: usize) -> String {
    let order = if cfg!(target_endian = "little") {
        '<'
    } else {
        '>'
    };
    match nctype {
        NcType::Byte => "|i1".into(),
        NcType::UByte => "|u1".into(),
        NcType::Char => "|S1".into(),
        NcType::String => format!("|S{element_size}"),
        NcType::Short => format!("{order}i2"),
        NcType::UShort => format!("{order}u2"),
        NcType::Int => format!("{order}i4"),
        NcType::UInt => format!("{order}u4"),
        NcType::Int64 => format!("{order}i8"),
        NcType::UInt64 => format!("{order}u8"),
        NcType::Float => format!("{order}f4"),
        NcType::Double => format!("{order}f8"),
    }
}

/// Size in bytes of a variable's `data` file.
pub fn data_size(ds: &Dataset, v: VarId) -> u64 {
    ds.var_shape(v)
        .iter()
        .fold(ds.var(v).element_size() as u64, |a, &n| a.saturating_mul(n))
}

/// `@metadata.json` of a group or variable, pretty-printed with a final newline.
pub fn metadata(ds: &Dataset, r: Resolved) -> Vec<u8> {
    let value = match r {
        Resolved::Group(g) => group_json(ds, g),
        Resolved::Var(v) => var_json(ds, v),
    };
    let mut text = serde_json::to_vec_pretty(&value).unwrap_or_default();
    text.push(b'\n');
    text
}

fn group_json(ds: &Dataset, g: GroupId) -> Value {
    let group = ds.group(g);
    let dims: Vec<Value> = group
        .dims
        .iter()
        .map(|d| {
            let dim = ds.dim(*d);
            json!({"name": dim.name, "size": dim.len, "unlimited": dim.unlimited})
        })
        .collect();
    json!({
        "name": group.name,
        "fqn": ds.group_fqn(g),
        "dimensions": dims,
        "attributes": attrs_json(&group.attrs),
        "variables": group.vars.iter().map(|v| ds.var(*v).name.clone()).collect::<Vec<_>>(),
        "groups": group.groups.iter().map(|s| ds.group(*s).name.clone()).collect::<Vec<_>>(),
    })
}

fn var_json(ds: &Dataset, v: VarId) -> Value {
    let var = ds.var(v);
    let st = &var.storage;
    let (codecs, object_strings) = match &st.codecs {
        CodecSpec::V2 {
            filters,
            compressor,
        } => (
            json!({"filters": filters, "compressor": compressor}),
            crate::codec::is_object_string_filter(filters),
        ),
        CodecSpec::V3(list) => (Value::Array(list.clone()), false),
    };
    // What the store holds: an object array's values are variable-length.
    let stored_dtype = match &st.dtype {
        Some(_) if object_strings => Some("|O".to_string()),
        d => d.as_ref().map(|d| d.to_numpy()),
    };
    let fill = match &st.fill_value {
        Some(bytes) => element_json(var.nctype, bytes),
        None => Value::Null,
    };
    json!({
        "name": var.name,
        "fqn": ds.var_fqn(v),
        "type": var.nctype.cdl_name(),
        "dtype": native_dtype(var.nctype, var.element_size()),
        "element_size": var.element_size(),
        "shape": ds.var_shape(v),
        "dimensions": var.dims.iter().map(|d| ds.dim_fqn(*d)).collect::<Vec<_>>(),
        "data_size": data_size(ds, v),
        "chunks": st.chunks,
        "storage": {
            "key": st.key,
            "dtype": stored_dtype,
            "shape": st.shape,
            "order": match st.order { crate::model::ChunkOrder::C => "C", crate::model::ChunkOrder::F => "F" },
        },
        "codecs": codecs,
        "fill_value": fill,
        "unreadable": crate::chunk::unreadable_reason(ds, v),
        "attributes": attrs_json(&var.attrs),
    })
}

fn attrs_json(attrs: &[Attribute]) -> Value {
    let mut map = Map::new();
    for a in attrs {
        map.insert(
            a.name.clone(),
            json!({"type": a.value.nctype().cdl_name(), "value": attr_value_json(&a.value)}),
        );
    }
    Value::Object(map)
}

/// A float as JSON: shortest text that reads back to the same value; non-finite values as
/// the strings Zarr uses (`"NaN"`, `"Infinity"`, `"-Infinity"`).
fn float_json(x: f64, shortest: String) -> Value {
    if x.is_nan() {
        Value::from("NaN")
    } else if x.is_infinite() {
        Value::from(if x > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        shortest
            .parse::<f64>()
            .ok()
            .and_then(Number::from_f64)
            .map_or(Value::Null, Value::Number)
    }
}

fn attr_value_json(v: &AttrValue) -> Value {
    match v {
        AttrValue::Byte(x) => json!(x),
        AttrValue::UByte(x) => json!(x),
        AttrValue::Short(x) => json!(x),
        AttrValue::UShort(x) => json!(x),
        AttrValue::Int(x) => json!(x),
        AttrValue::UInt(x) => json!(x),
        AttrValue::Int64(x) => json!(x),
        AttrValue::UInt64(x) => json!(x),
        AttrValue::Float(x) => x
            .iter()
            .map(|f| float_json(*f as f64, f.to_string()))
            .collect(),
        AttrValue::Double(x) => x.iter().map(|f| float_json(*f, f.to_string())).collect(),
        AttrValue::Char(x) => Value::from(String::from_utf8_lossy(x).into_owned()),
        AttrValue::Str(x) => json!(x),
    }
}

/// One element in native representation as JSON (for `fill_value`).
fn element_json(t: NcType, b: &[u8]) -> Value {
    fn arr<const N: usize>(b: &[u8]) -> Option<[u8; N]> {
        b.get(..N)?.try_into().ok()
    }
    let v = match t {
        NcType::Byte => arr::<1>(b).map(|a| json!(i8::from_ne_bytes(a))),
        NcType::UByte => arr::<1>(b).map(|a| json!(a[0])),
        NcType::Short => arr(b).map(|a| json!(i16::from_ne_bytes(a))),
        NcType::UShort => arr(b).map(|a| json!(u16::from_ne_bytes(a))),
        NcType::Int => arr(b).map(|a| json!(i32::from_ne_bytes(a))),
        NcType::UInt => arr(b).map(|a| json!(u32::from_ne_bytes(a))),
        NcType::Int64 => arr(b).map(|a| json!(i64::from_ne_bytes(a))),
        NcType::UInt64 => arr(b).map(|a| json!(u64::from_ne_bytes(a))),
        NcType::Float => arr(b).map(|a| {
            let f = f32::from_ne_bytes(a);
            float_json(f as f64, f.to_string())
        }),
        NcType::Double => arr(b).map(|a| {
            let f = f64::from_ne_bytes(a);
            float_json(f, f.to_string())
        }),
        NcType::Char | NcType::String => {
            let end = b.iter().position(|c| *c == 0).unwrap_or(b.len());
            Some(Value::from(String::from_utf8_lossy(&b[..end]).into_owned()))
        }
    };
    v.unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuse::layout::tests::sample;

    #[test]
    fn group_metadata_lists_dims_attrs_vars_groups() {
        let ds = sample();
        let v: Value =
            serde_json::from_slice(&metadata(&ds, Resolved::Group(Dataset::ROOT))).unwrap();
        assert_eq!(v["fqn"], "/");
        assert_eq!(
            v["dimensions"][0],
            json!({"name": "t", "size": 2, "unlimited": true})
        );
        assert_eq!(
            v["dimensions"][1],
            json!({"name": "x", "size": 3, "unlimited": false})
        );
        assert_eq!(
            v["attributes"]["title"],
            json!({"type": "char", "value": "hello"})
        );
        assert_eq!(v["variables"], json!(["v", "@odd"]));
        assert_eq!(v["groups"], json!(["g"]));
    }

    #[test]
    fn var_metadata_describes_data() {
        let mut ds = sample();
        ds.vars[0].storage.fill_value = Some(9.96921e36f32.to_ne_bytes().to_vec());
        ds.vars[0].storage.chunks = vec![1, 3];
        let v: Value = serde_json::from_slice(&metadata(&ds, Resolved::Var(VarId(0)))).unwrap();
        assert_eq!(v["type"], "float");
        let le = cfg!(target_endian = "little");
        assert_eq!(v["dtype"], if le { "<f4" } else { ">f4" });
        assert_eq!(v["shape"], json!([2, 3]));
        assert_eq!(v["dimensions"], json!(["/t", "/x"]));
        assert_eq!(v["data_size"], 24);
        assert_eq!(v["chunks"], json!([1, 3]));
        assert_eq!(v["fill_value"], json!(9.96921e36));
        assert_eq!(
            v["attributes"]["a/b"],
            json!({"type": "int", "value": [1, 2]})
        );
        let s: Value = serde_json::from_slice(&metadata(&ds, Resolved::Var(VarId(2)))).unwrap();
        assert_eq!(s["shape"], json!([]));
        assert_eq!(s["data_size"], 4);
        assert_eq!(s["fill_value"], Value::Null);
    }

    #[test]
    fn var_metadata_names_why_reads_fail() {
        let mut ds = sample();
        ds.vars[0].storage.dtype = crate::model::ZarrDtype::parse("<f4");
        ds.vars[0].storage.chunks = vec![1, 3];
        ds.vars[0].storage.shape = vec![2, 3];
        let unreadable = |ds: &Dataset| {
            let v: Value = serde_json::from_slice(&metadata(ds, Resolved::Var(VarId(0)))).unwrap();
            v["unreadable"].clone()
        };
        assert_eq!(unreadable(&ds), Value::Null);
        // A known codec with a parameter decoding needs, which fails only when the chain is
        // built, not an unknown codec the dataset's reader marks.
        ds.vars[0].storage.codecs = CodecSpec::V2 {
            filters: vec![json!({"id": "shuffle", "elementsize": "high"})],
            compressor: None,
        };
        let why = unreadable(&ds);
        let why = why.as_str().unwrap();
        assert!(why.contains("shuffle") && why.contains("\"high\""), "{why}");
        // A level only encoding uses leaves the variable readable.
        ds.vars[0].storage.codecs = CodecSpec::V2 {
            filters: Vec::new(),
            compressor: Some(json!({"id": "zlib", "level": 15})),
        };
        assert_eq!(unreadable(&ds), Value::Null);
    }

    #[test]
    fn floats_and_specials() {
        let v = attr_value_json(&AttrValue::Float(vec![0.1, f32::NAN, f32::NEG_INFINITY]));
        assert_eq!(v, json!([0.1, "NaN", "-Infinity"]));
        assert_eq!(element_json(NcType::String, b"ab\0\0"), json!("ab"));
        assert_eq!(element_json(NcType::Int, &[1]), Value::Null);
    }

    #[test]
    fn char_attribute_file_is_raw() {
        let a = Attribute {
            name: "t".into(),
            value: AttrValue::Char(b"a\0b".to_vec()),
        };
        assert_eq!(attr_file(&a).unwrap(), b"a\0b");
        let a = Attribute {
            name: "n".into(),
            value: AttrValue::Float(vec![-999.0, 1.5]),
        };
        // ncdump prints float attributes with an `f` suffix.
        assert_eq!(attr_file(&a).unwrap(), b"-999.f, 1.5f\n");
    }

    #[test]
    fn dtypes() {
        assert_eq!(native_dtype(NcType::String, 12), "|S12");
        assert_eq!(native_dtype(NcType::UByte, 1), "|u1");
        assert!(native_dtype(NcType::Double, 8).ends_with("f8"));
    }
}
