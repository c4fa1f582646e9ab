//! Values the CDL parser produces, compared with what ncgen stores for the same CDL (see
//! tests/data/cdl_parse/make_refs.py for how `ncgen_values.json` was produced).

use std::path::PathBuf;

use nczarrfs::cdl::parser::{parse_cdl, parse_cdl_file, ParsedCdl};
use nczarrfs::model::{AttrValue, NcType};
use serde_json::{json, Value};

fn shared() -> PathBuf {
    std::env::var("NCZARRFS_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared")))
}

fn data_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/cdl_parse"))
}

fn source(name: &str) -> PathBuf {
    let fx = shared().join("fixtures");
    match name {
        "tricky" => data_dir().join("tricky.cdl"),
        "ref_tst_mud4" | "ref_tst_mud4-bc" | "ref_tst_mud4_chars" => {
            fx.join(format!("ncdump_refs/{name}.cdl"))
        }
        "ref_string" => fx.join("nczarr_test/ref_string.cdl"),
        _ => fx.join(format!("ncdump_refs/cdl/{name}.cdl")),
    }
}

fn num_json(x: f64) -> Value {
    if x.is_nan() {
        json!("NaN")
    } else if x.is_infinite() {
        json!(if x > 0.0 { "Infinity" } else { "-Infinity" })
    } else {
        json!(x)
    }
}

/// Native bytes of a variable decoded into the JSON form of the reference file.
fn values_json(t: NcType, width: usize, b: &[u8]) -> Value {
    let arr = |n: usize| b.chunks_exact(n);
    match t {
        NcType::Char => json!(b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
        NcType::String => json!(b
            .chunks_exact(width)
            .map(|c| {
                let end = c.iter().position(|x| *x == 0).unwrap_or(c.len());
                String::from_utf8(c[..end].to_vec()).unwrap()
            })
            .collect::<Vec<_>>()),
        NcType::Byte => json!(b.iter().map(|x| *x as i8).collect::<Vec<_>>()),
        NcType::UByte => json!(b),
        NcType::Short => json!(arr(2)
            .map(|c| i16::from_le_bytes([c[0], c[1]]))
            .collect::<Vec<_>>()),
        NcType::UShort => json!(arr(2)
            .map(|c| u16::from_le_bytes([c[0], c[1]]))
            .collect::<Vec<_>>()),
        NcType::Int => json!(arr(4)
            .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
            .collect::<Vec<_>>()),
        NcType::UInt => json!(arr(4)
            .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
            .collect::<Vec<_>>()),
        NcType::Int64 => json!(arr(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap()))
            .collect::<Vec<_>>()),
        NcType::UInt64 => json!(arr(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect::<Vec<_>>()),
        // Compare floats through f32's shortest decimal, as numpy's .item() does via f64.
        NcType::Float => Value::Array(
            arr(4)
                .map(|c| num_json(f32::from_le_bytes(c.try_into().unwrap()) as f64))
                .collect(),
        ),
        NcType::Double => Value::Array(
            arr(8)
                .map(|c| num_json(f64::from_le_bytes(c.try_into().unwrap())))
                .collect(),
        ),
    }
}

fn numpy_type(t: NcType) -> &'static str {
    match t {
        NcType::Byte => "int8",
        NcType::UByte => "uint8",
        NcType::Short => "int16",
        NcType::UShort => "uint16",
        NcType::Int => "int32",
        NcType::UInt => "uint32",
        NcType::Int64 => "int64",
        NcType::UInt64 => "uint64",
        NcType::Float => "float32",
        NcType::Double => "float64",
        NcType::Char => "|S1",
        NcType::String => "string",
    }
}

fn attr_json(a: &AttrValue) -> (String, Value) {
    let t = numpy_type(a.nctype()).to_string();
    match a {
        AttrValue::Char(b) => ("char".into(), json!(String::from_utf8(b.clone()).unwrap())),
        AttrValue::Str(s) => ("string".into(), json!(s)),
        AttrValue::Float(v) => (
            t,
            Value::Array(v.iter().map(|x| num_json(*x as f64)).collect()),
        ),
        AttrValue::Double(v) => (t, Value::Array(v.iter().map(|x| num_json(*x)).collect())),
        AttrValue::Byte(v) => (t, json!(v)),
        AttrValue::UByte(v) => (t, json!(v)),
        AttrValue::Short(v) => (t, json!(v)),
        AttrValue::UShort(v) => (t, json!(v)),
        AttrValue::Int(v) => (t, json!(v)),
        AttrValue::UInt(v) => (t, json!(v)),
        AttrValue::Int64(v) => (t, json!(v)),
        AttrValue::UInt64(v) => (t, json!(v)),
    }
}

fn check(name: &str, parsed: &ParsedCdl, reference: &Value) {
    let ds = &parsed.dataset;
    let vars = reference["vars"].as_object().unwrap();
    assert_eq!(vars.len(), ds.vars.len(), "{name}: number of variables");
    for (path, r) in vars {
        let id = ds
            .find_var(path)
            .unwrap_or_else(|| panic!("{name}: no variable {path}"));
        let var = ds.var(id);
        let shape = ds.var_shape(id);
        assert_eq!(json!(shape), r["shape"], "{name}{path}: shape");
        assert_eq!(numpy_type(var.nctype), r["type"], "{name}{path}: type");
        let total: u64 = shape.iter().product();
        // The rows the data section gives, then fill.
        let fill = var.storage.fill_value.clone().unwrap();
        let mut bytes = parsed.vars[id.0].data.clone().unwrap_or_default();
        while (bytes.len() as u64) < total * fill.len() as u64 {
            bytes.extend_from_slice(&fill);
        }
        assert_eq!(
            bytes.len(),
            total as usize * var.element_size(),
            "{name}{path}: size"
        );
        let got = values_json(var.nctype, var.element_size(), &bytes);
        // f32 values: the reference holds f32 → f64 conversions, as does `got`.
        assert_eq!(got, r["values"], "{name}{path}: values");
    }
    let root_attrs = &ds.group(nczarrfs::model::Dataset::ROOT).attrs;
    let ref_attrs = reference["global_attrs"].as_object().unwrap();
    assert_eq!(
        root_attrs.len(),
        ref_attrs.len(),
        "{name}: global attributes"
    );
    for a in root_attrs {
        let (t, v) = attr_json(&a.value);
        let r = &ref_attrs[&a.name];
        assert_eq!(json!(t), r["type"], "{name}: attribute {} type", a.name);
        assert_eq!(v, r["values"], "{name}: attribute {} values", a.name);
    }
}

#[test]
fn values_match_ncgen() {
    let refs: Value = serde_json::from_str(
        &std::fs::read_to_string(data_dir().join("ncgen_values.json")).unwrap(),
    )
    .unwrap();
    for (name, reference) in refs.as_object().unwrap() {
        let parsed = parse_cdl_file(&source(name)).unwrap();
        check(name, &parsed, reference);
    }
}

#[test]
fn unlimited_lengths_are_the_largest_record_count() {
    let p = parse_cdl_file(&source("ref_tst_mud4")).unwrap();
    let ds = &p.dataset;
    for (d, n) in [("U0", 1), ("U1", 2), ("U2", 3), ("U3", 5)] {
        let id = ds.find_dim(&format!("/{d}")).unwrap();
        assert!(ds.dim(id).unlimited);
        assert_eq!(ds.dim(id).len, n, "{d}");
    }
}

fn err(text: &str) -> String {
    parse_cdl(text, "x.cdl").unwrap_err().to_string()
}

#[test]
fn errors_name_line_and_column() {
    assert_eq!(
        err("netcdf x {\ndimensions:\n d = 2 ;\n d = 3 ;\n}"),
        "x.cdl:4:2: dimension \"d\" is defined twice"
    );
    assert_eq!(
        err("netcdf x {\nvariables:\n int v(q) ;\n}"),
        "x.cdl:3:8: unknown dimension \"q\""
    );
    assert_eq!(
        err("netcdf x {\nvariables:\n byte v ;\ndata:\n v = 300 ;\n}"),
        "x.cdl:5:6: value 300 out of range for type byte"
    );
    assert_eq!(
        err("netcdf x {\nvariables:\n int v ;\ndata:\n v = \"a\" ;\n}"),
        "x.cdl:5:6: type mismatch: a string for type int"
    );
    assert_eq!(
        err("netcdf x {\nvariables:\n int v ; int v ;\n}"),
        "x.cdl:3:14: variable \"v\" is defined twice"
    );
    // `/` cannot be escaped in a name (ncgen.l's `idescaped` leaves it out).
    assert!(err("netcdf x {\nvariables:\n int a\\/b ;\n}")
        .starts_with("x.cdl:3:7: \"\\/\" is not an escape ncgen takes in a name"));
    assert_eq!(
        err("netcdf x {\nvariables:\n int v ;\n v:_FillValue = \"a\" ;\n}"),
        "x.cdl:4:17: type mismatch: a string for type int"
    );
}

#[test]
fn user_defined_types_are_refused() {
    for text in [
        "netcdf x {\ntypes:\n  ubyte enum e {a = 1} ;\n}",
        "netcdf x {\nvariables:\n  mytype v ;\n}",
        "netcdf x {\nvariables:\n  compound c { int a ; } ;\n}",
    ] {
        let e = err(text);
        assert!(e.contains("user-defined types are not supported"), "{e}");
        assert!(e.starts_with("x.cdl:"), "{e}");
    }
    // An empty types section declares nothing, as ncgen has it.
    for text in [
        "netcdf x {\ntypes:\ndimensions:\n d = 2 ;\nvariables:\n int v(d) ;\n}",
        "netcdf x {\ntypes:\n}",
    ] {
        assert!(parse_cdl(text, "x.cdl").is_ok(), "{text}");
    }
}

/// ncgen hands netcdf-c one length per dimension: a missing one reads as 0 (netcdf-c's
/// default), extra ones are not read; a negative one, or any on a scalar, netcdf-c refuses
/// ("Bad chunk sizes", "Invalid argument" from Debian's ncgen).
#[test]
fn chunk_sizes_are_one_per_dimension() {
    let cdl = |chunks: &str, var: &str| {
        format!(
            "netcdf x {{\ndimensions:\n x = 7 ; y = 30 ;\nvariables:\n int {var} ;\n  \
             v:_ChunkSizes = {chunks} ;\n}}"
        )
    };
    let parsed = |chunks: &str| parse_cdl(&cdl(chunks, "v(x, y)"), "x.cdl").unwrap();
    assert_eq!(parsed("3").vars[0].special.chunk_sizes, Some(vec![3, 0]));
    assert_eq!(parsed("0, 5").vars[0].special.chunk_sizes, Some(vec![0, 5]));
    let p = parsed("3, 4, 5");
    assert_eq!(p.vars[0].special.chunk_sizes, Some(vec![3, 4]));
    assert_eq!(p.warnings.len(), 1, "{:?}", p.warnings);
    assert!(p.warnings[0].starts_with("x.cdl:6:"), "{}", p.warnings[0]);
    assert!(parsed("3, 4").warnings.is_empty());
    for bad in ["-1, 4", "3, -4"] {
        let e = parse_cdl(&cdl(bad, "v(x, y)"), "x.cdl").unwrap_err();
        assert!(e.to_string().contains("_ChunkSizes"), "{e}");
    }
    let e = parse_cdl(&cdl("0", "v"), "x.cdl").unwrap_err();
    assert!(e.to_string().contains("scalar"), "{e}");
}

#[test]
fn special_attributes_are_not_attributes() {
    let p = parse_cdl(
        "netcdf x {\ndimensions:\n d = 4 ;\nvariables:\n float v(d) ;\n  v:_ChunkSizes = 2 ;\n  v:_DeflateLevel = 5 ;\n  v:_Shuffle = \"true\" ;\n  v:_Fletcher32 = \"false\" ;\n  v:_Endianness = \"big\" ;\n  v:_NoFill = \"true\" ;\n  v:_Storage = \"chunked\" ;\n  v:_Filter = \"307,9\" ;\n  v:_Codecs = \"[{\\\"id\\\": \\\"bz2\\\"}]\" ;\n  v:units = \"m\" ;\n:_Format = \"netCDF-4\" ;\n:_SuperblockVersion = 2 ;\n}",
        "x.cdl",
    )
    .unwrap();
    let s = &p.vars[0].special;
    assert_eq!(s.chunk_sizes, Some(vec![2]));
    assert_eq!(s.deflate_level, Some(5));
    assert_eq!(s.shuffle, Some(true));
    assert_eq!(s.fletcher32, Some(false));
    assert_eq!(s.endianness, Some(nczarrfs::cdl::parser::Endianness::Big));
    assert_eq!(s.no_fill, Some(true));
    assert_eq!(
        s.storage,
        Some(nczarrfs::cdl::parser::StorageLayout::Chunked)
    );
    assert_eq!(s.filter.as_deref(), Some("307,9"));
    assert_eq!(s.codecs.as_deref(), Some("[{\"id\": \"bz2\"}]"));
    let names: Vec<&str> = p.dataset.vars[0]
        .attrs
        .iter()
        .map(|a| a.name.as_str())
        .collect();
    assert_eq!(names, ["units"]);
    assert!(p
        .dataset
        .group(nczarrfs::model::Dataset::ROOT)
        .attrs
        .is_empty());
    assert_eq!(p.globals.format.as_deref(), Some("netCDF-4"));
    assert_eq!(p.globals.superblock_version, Some(2));
}
