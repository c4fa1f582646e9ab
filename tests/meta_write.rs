//! The metadata writer against what netcdf-c 4.10.1 writes for the same dataset (see
//! tests/data/meta_write/make_ref.py), and the shape of its pure Zarr output.

use std::collections::BTreeMap;
use std::sync::Mutex;

use nczarrfs::meta::writer::{metadata_objects, write_metadata, Dialect, WriteOptions};
use nczarrfs::model::{
    AttrValue, Attribute, CodecSpec, Dataset, NcType, NczarrLayout, VarStorage, Variable, ZarrDtype,
};
use nczarrfs::zmap::ZMap;
use nczarrfs::Result;
use serde_json::{json, Value};

/// A minimal in-memory map for the test.
#[derive(Debug, Default)]
struct TestMap(Mutex<BTreeMap<String, Vec<u8>>>);

impl ZMap for TestMap {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.0.lock().unwrap().get(key).cloned())
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.0
            .lock()
            .unwrap()
            .insert(key.to_string(), value.to_vec());
        Ok(())
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.0.lock().unwrap().remove(key);
        Ok(())
    }
    fn search(&self, _prefix: &str) -> Result<Vec<String>> {
        Ok(Vec::new())
    }
    fn read_only(&self) -> bool {
        false
    }
    fn describe(&self) -> String {
        "test map".into()
    }
}

fn attr(name: &str, value: AttrValue) -> Attribute {
    Attribute {
        name: name.into(),
        value,
    }
}

fn var(
    name: &str,
    group: nczarrfs::model::GroupId,
    t: NcType,
    dims: Vec<nczarrfs::model::DimId>,
) -> Variable {
    Variable {
        name: name.into(),
        group,
        nctype: t,
        dims,
        string_width: 0,
        attrs: Vec::new(),
        storage: VarStorage {
            fill_value: Some(t.default_fill()),
            ..VarStorage::default()
        },
    }
}

/// The dataset of make_ref.py.
fn sample() -> Dataset {
    sample_for(NczarrLayout::Attributes)
}

/// The dataset of make_ref.py as the netcdf-c releases writing `layout` hold it (its `--old`):
/// before 4.9.3 without an unlimited dimension or compression, before 4.9.1 also without
/// strings and scalars.
fn sample_for(layout: NczarrLayout) -> Dataset {
    let old = layout != NczarrLayout::Attributes;
    let before_4_9_1 = layout == NczarrLayout::UpperCaseKeys;
    let mut ds = Dataset::new();
    let root = Dataset::ROOT;
    let x = ds.add_dim(root, "x", 3, false);
    let t = ds.add_dim(root, "t", 2, !old);
    let mut v = var("v", root, NcType::Double, vec![t, x]);
    v.storage.chunks = vec![2, 3];
    if !old {
        v.storage.codecs = CodecSpec::V2 {
            filters: vec![json!({"id": "shuffle", "elementsize": 0})],
            compressor: Some(json!({"id": "zlib", "level": 3})),
        };
    }
    v.attrs = vec![
        attr("units", AttrValue::Char(b"m".to_vec())),
        attr("sf", AttrValue::Float(vec![1.5])),
        attr("iv", AttrValue::Short(vec![1, 2])),
        attr("js", AttrValue::Char(b"[1, 2]".to_vec())),
    ];
    ds.add_var(v);
    let c = var("c", root, NcType::Char, vec![x]);
    ds.add_var(c);
    let mut b = var("b", root, NcType::Byte, vec![x]);
    b.attrs = vec![attr("_FillValue", AttrValue::Byte(vec![3]))];
    b.storage.fill_value = Some(vec![3]);
    ds.add_var(b);
    if !before_4_9_1 {
        let mut s = var("s", root, NcType::String, vec![x]);
        s.string_width = 128;
        ds.add_var(s);
        let ss = attr("ss", AttrValue::Str(vec!["a".into(), "b".into()]));
        ds.groups[0].attrs.push(ss);
    }
    ds.groups[0].attrs.extend([
        attr("title", AttrValue::Char(b"hi".to_vec())),
        attr("pi", AttrValue::Double(vec![std::f64::consts::PI])),
    ]);
    let g = ds.add_group(root, "g");
    let y = ds.add_dim(g, "y", 2, false);
    let w = var("w", g, NcType::UShort, vec![y, x]);
    ds.add_var(w);
    if !before_4_9_1 {
        let sc = var("sc", root, NcType::Int, vec![]);
        ds.add_var(sc);
    }
    ds
}

const NCPROPS: &str = "version=2,netcdf=4.10.1,nczarr=2.0.0";

fn reference() -> BTreeMap<String, Value> {
    reference_of("4.10.1")
}

/// What netcdf-c `version` wrote for make_ref.py's dataset.
fn reference_of(version: &str) -> BTreeMap<String, Value> {
    let path = format!(
        "{}/tests/data/meta_write/ref_nczarr_{version}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn nczarr_matches_netcdf_c_except_its_known_defects() {
    let mut expected = reference();
    // The deliberate differences, each a defect of netcdf-c 4.10.1 listed in the fixtures'
    // INDEX.md: 6-digit floats, shuffle with element size 0, `<i1` for bytes.
    expected.get_mut(".zattrs").unwrap()["pi"] = json!(std::f64::consts::PI);
    let v = expected.get_mut("v/.zarray").unwrap();
    v["fill_value"] = json!(9.969209968386869e36);
    v["filters"] = json!([{"id": "shuffle", "elementsize": 8}]);
    expected.get_mut("b/.zarray").unwrap()["dtype"] = json!("|i1");
    // netcdf-c stores "[1, 2]" as the JSON [1,2] and reads back "[1,2]"; we keep text that
    // would not read back as written a string (see meta::writer's JSON convention).
    expected.get_mut("v/.zattrs").unwrap()["js"] = json!("[1, 2]");

    let map = TestMap::default();
    let opts = WriteOptions {
        nc_properties: Some(NCPROPS.into()),
        ..WriteOptions::default()
    };
    write_metadata(&map, &sample(), &opts).unwrap();
    let stored = map.0.lock().unwrap();
    let got: BTreeMap<String, Value> = stored
        .iter()
        .map(|(k, v)| (k.clone(), serde_json::from_slice(v).unwrap()))
        .collect();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (k, e) in &expected {
        assert_eq!(&got[k], e, "{k}");
    }
    // Attribute order is creation order, as netcdf-c writes it.
    let root = &got[".zattrs"];
    let names: Vec<&String> = root.as_object().unwrap().keys().collect();
    assert_eq!(
        names,
        [
            "_NCProperties",
            "ss",
            "title",
            "pi",
            "_nczarr_group",
            "_nczarr_superblock",
            "_nczarr_attr"
        ]
    );
}

#[test]
fn pure_zarr_has_no_nczarr_keys_and_zarr_python_dtypes() {
    let mut ds = sample();
    // A non-NUL char fill, to see the base64 spelling Zarr v2 asks for byte strings.
    let c = ds.find_var("c").unwrap();
    ds.vars[c.0].storage.fill_value = Some(b"x".to_vec());
    let opts = WriteOptions {
        dialect: Dialect::Zarr,
        consolidated: true,
        ..WriteOptions::default()
    };
    let objs: BTreeMap<String, Value> = metadata_objects(&ds, &opts).unwrap().into_iter().collect();
    for (k, v) in &objs {
        assert!(!v.to_string().contains("_nczarr"), "{k}: {v}");
    }
    assert_eq!(objs["c/.zarray"]["dtype"], json!("|S1"));
    assert_eq!(objs["c/.zarray"]["fill_value"], json!("eA=="));
    assert_eq!(objs["b/.zarray"]["dtype"], json!("|i1"));
    assert_eq!(objs["s/.zarray"]["dtype"], json!("|S128"));
    assert_eq!(objs["sc/.zarray"]["shape"], json!([]));
    assert_eq!(objs["sc/.zarray"]["chunks"], json!([]));
    assert_eq!(objs["sc/.zattrs"]["_ARRAY_DIMENSIONS"], json!([]));
    assert_eq!(objs["g/w/.zattrs"]["_ARRAY_DIMENSIONS"], json!(["y", "x"]));
    // Pure Zarr keeps char attributes as text even when they look like JSON.
    assert_eq!(objs["v/.zattrs"]["js"], json!("[1, 2]"));
    assert!(!objs.contains_key("g/.zattrs"), "no attributes, no object");
    let meta = &objs[".zmetadata"];
    assert_eq!(meta["zarr_consolidated_format"], json!(1));
    for (k, v) in &objs {
        if k != ".zmetadata" {
            assert_eq!(&meta["metadata"][k], v, "{k}");
        }
    }

    let noxarray = WriteOptions {
        xarray: false,
        ..opts
    };
    let objs = metadata_objects(&ds, &noxarray).unwrap();
    assert!(objs
        .iter()
        .all(|(_, v)| !v.to_string().contains("_ARRAY_DIMENSIONS")));
}

#[test]
fn special_fill_values_and_separator() {
    let mut ds = Dataset::new();
    let d = ds.add_dim(Dataset::ROOT, "d", 4, false);
    let mut v = var("f", Dataset::ROOT, NcType::Float, vec![d]);
    v.storage.fill_value = Some(f32::NAN.to_le_bytes().to_vec());
    v.storage.key_encoding = nczarrfs::model::ChunkKeyEncoding::V2 { separator: '/' };
    v.storage.dtype = ZarrDtype::parse(">f4");
    ds.add_var(v);
    let mut w = var("g", Dataset::ROOT, NcType::Double, vec![d]);
    w.storage.fill_value = Some(f64::NEG_INFINITY.to_le_bytes().to_vec());
    w.attrs = vec![attr("x", AttrValue::Float(vec![0.1, f32::INFINITY]))];
    ds.add_var(w);
    let objs: BTreeMap<String, Value> = metadata_objects(&ds, &WriteOptions::default())
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(objs["f/.zarray"]["fill_value"], json!("NaN"));
    assert_eq!(objs["f/.zarray"]["dtype"], json!(">f4"));
    assert_eq!(objs["f/.zarray"]["dimension_separator"], json!("/"));
    assert_eq!(objs["g/.zarray"]["fill_value"], json!("-Infinity"));
    assert!(objs["g/.zarray"].get("dimension_separator").is_none());
    // f32 attributes are written as their shortest decimal, not the f64 widening.
    assert_eq!(objs["g/.zattrs"]["x"], json!([0.1, "Infinity"]));
    assert_eq!(
        objs["g/.zattrs"]["_nczarr_attr"]["types"]["x"],
        json!("<f4")
    );
}

/// Each group's object (which holds its dimension sizes) is followed at once by its arrays'
/// `.zarray` objects (their shapes), so that a writer killed while replacing them leaves
/// them disagreeing, which netcdf-c refuses, for the shortest time.
#[test]
fn group_dimensions_and_array_shapes_are_stored_together() {
    let objects = metadata_objects(&sample(), &WriteOptions::default()).unwrap();
    let keys: Vec<&str> = objects.iter().map(|(k, _)| k.as_str()).collect();
    let root = keys.iter().position(|k| *k == ".zattrs").unwrap();
    let arrays = ["v", "c", "b", "s", "sc"].map(|v| format!("{v}/.zarray"));
    assert_eq!(
        &keys[root + 1..root + 1 + arrays.len()],
        &arrays[..],
        "{keys:?}"
    );
    let sub = keys.iter().position(|k| *k == "g/.zattrs").unwrap();
    assert_eq!(keys[sub + 1], "g/w/.zarray", "{keys:?}");
}

/// The layouts of netcdf-c 4.9.1 (lower-case keys) and 4.9.0 (upper-case keys, char as
/// `<U1`) against what those releases wrote for the same dataset (make_ref.py --old).
#[test]
fn older_layouts_match_the_netcdf_c_releases_that_read_them() {
    for (version, layout) in [
        ("4.9.1", NczarrLayout::LowerCaseKeys),
        ("4.9.0", NczarrLayout::UpperCaseKeys),
    ] {
        let mut expected = reference_of(version);
        // The deliberate differences of `nczarr_matches_netcdf_c_except_its_known_defects`.
        expected.get_mut(".zattrs").unwrap()["pi"] = json!(std::f64::consts::PI);
        let v = expected.get_mut("v/.zarray").unwrap();
        v["fill_value"] = json!(9.969209968386869e36);
        expected.get_mut("b/.zarray").unwrap()["dtype"] = json!("|i1");
        expected.get_mut("v/.zattrs").unwrap()["js"] = json!("[1, 2]");
        let props = format!("version=2,netcdf={version},nczarr=2.0.0");
        let opts = WriteOptions {
            nc_properties: Some(props),
            layout,
            ..WriteOptions::default()
        };
        let got: BTreeMap<String, Value> = metadata_objects(&sample_for(layout), &opts)
            .unwrap()
            .into_iter()
            .collect();
        for (k, e) in &expected {
            assert_eq!(got.get(k), Some(e), "{version}: {k}");
        }
        // netcdf-c leaves out the `.zattrs` of a group or an array with no attribute; we write
        // one everywhere, which also gives xarray the dimension names of `w`.
        let key = |lower: &str| match layout {
            NczarrLayout::UpperCaseKeys => lower.to_ascii_uppercase(),
            _ => lower.to_string(),
        };
        let extra: Vec<&String> = got.keys().filter(|k| !expected.contains_key(*k)).collect();
        assert_eq!(extra, ["g/.zattrs", "g/w/.zattrs"], "{version}");
        assert_eq!(got["g/.zattrs"], json!({key("_nczarr_attr"): {}}));
        assert_eq!(
            got["g/w/.zattrs"],
            json!({"_ARRAY_DIMENSIONS": ["y", "x"], key("_nczarr_attr"): {}})
        );
    }
}

/// What the releases before 4.9.3 cannot hold is refused with its name, not written for a
/// reader that fails on it.
#[test]
fn older_layouts_refuse_what_their_readers_cannot_hold() {
    let refusal = |ds: &Dataset, layout| {
        let opts = WriteOptions {
            layout,
            ..WriteOptions::default()
        };
        metadata_objects(ds, &opts).unwrap_err().to_string()
    };
    let full = sample();
    for layout in [NczarrLayout::LowerCaseKeys, NczarrLayout::UpperCaseKeys] {
        assert!(
            refusal(&full, layout).contains("dimension /t is unlimited"),
            "{}",
            refusal(&full, layout)
        );
    }
    let mut for_4_9_1 = sample_for(NczarrLayout::LowerCaseKeys);
    let e = refusal(&for_4_9_1, NczarrLayout::UpperCaseKeys);
    assert!(
        e.contains("attribute :ss is a string") && e.contains("before 4.9.1"),
        "{e}"
    );
    for_4_9_1.groups[0].attrs.retain(|a| a.name != "ss");
    let e = refusal(&for_4_9_1, NczarrLayout::UpperCaseKeys);
    assert!(e.contains("variable /s is a string"), "{e}");
    let mut scalar_only = sample_for(NczarrLayout::UpperCaseKeys);
    scalar_only.add_var(var("sc", Dataset::ROOT, NcType::Int, vec![]));
    let e = refusal(&scalar_only, NczarrLayout::UpperCaseKeys);
    assert!(e.contains("variable /sc is a scalar"), "{e}");
    let e = refusal(
        &sample_for(NczarrLayout::UpperCaseKeys),
        NczarrLayout::Objects1,
    );
    assert!(e.contains("NCZarr 1.0.0"), "{e}");
    // Pure Zarr has no layout.
    let opts = WriteOptions {
        dialect: Dialect::Zarr,
        layout: NczarrLayout::UpperCaseKeys,
        ..WriteOptions::default()
    };
    assert!(metadata_objects(&full, &opts).is_ok());
}

/// Pure Zarr has no `.zattrs` for a group or an array without attributes: a rewrite after the
/// last one was deleted empties the stored object, or the attributes would come back.
#[test]
fn pure_zarr_attributes_deleted_to_the_last_stay_deleted() {
    let mut ds = sample();
    let opts = WriteOptions {
        dialect: Dialect::Zarr,
        xarray: false,
        ..WriteOptions::default()
    };
    let map = TestMap::default();
    write_metadata(&map, &ds, &opts).unwrap();
    let stored = |key: &str| -> Option<Value> {
        map.get(key)
            .unwrap()
            .map(|b| serde_json::from_slice(&b).unwrap())
    };
    assert_eq!(stored(".zattrs").unwrap()["title"], json!("hi"));
    assert_eq!(stored("v/.zattrs").unwrap()["units"], json!("m"));
    assert_eq!(stored("c/.zattrs"), None, "no attributes, no object");
    ds.groups[0].attrs.clear();
    let v = ds.find_var("v").unwrap();
    ds.vars[v.0].attrs.clear();
    write_metadata(&map, &ds, &opts).unwrap();
    assert_eq!(stored(".zattrs"), Some(json!({})));
    assert_eq!(stored("v/.zattrs"), Some(json!({})));
    assert_eq!(stored("c/.zattrs"), None);
}

/// NaN and infinities in attributes: bare tokens in pure Zarr (as Python's `json` writes them
/// for zarr-python and xarray, which read strings back as text) and for netcdf-c 4.9.0;
/// strings in NCZarr otherwise, as netcdf-c 4.9.1 and later write them.
#[test]
fn non_finite_attributes_are_spelled_for_their_readers() {
    let mut ds = Dataset::new();
    ds.groups[0].attrs = vec![
        attr("d", AttrValue::Double(vec![f64::NAN, 1.5, f64::INFINITY])),
        attr("f", AttrValue::Float(vec![f32::NEG_INFINITY])),
    ];
    let root_zattrs = |opts: WriteOptions| {
        let map = TestMap::default();
        write_metadata(&map, &ds, &opts).unwrap();
        // Written twice: a rewrite keeps the spelling.
        write_metadata(&map, &ds, &opts).unwrap();
        let text = String::from_utf8(map.get(".zattrs").unwrap().unwrap()).unwrap();
        text[..text.find(",\"_").unwrap_or(text.len())].to_string()
    };
    let cases = [
        (
            WriteOptions {
                dialect: Dialect::Zarr,
                ..WriteOptions::default()
            },
            r#"{"d":[NaN,1.5,Infinity],"f":-Infinity}"#,
        ),
        (
            WriteOptions {
                layout: NczarrLayout::UpperCaseKeys,
                ..WriteOptions::default()
            },
            r#"{"d":[NaN,1.5,Infinity],"f":-Infinity"#,
        ),
        (
            WriteOptions::default(),
            r#"{"d":["NaN",1.5,"Infinity"],"f":"-Infinity""#,
        ),
    ];
    for (opts, want) in cases {
        assert_eq!(root_zattrs(opts), want);
    }
}

/// Control characters in text: the bytes themselves in NCZarr, as netcdf-c writes them and
/// the only way it reads them (it does not decode `\u00XX`); the escapes JSON asks for in pure
/// Zarr, whose readers refuse the bytes. `\b`, `\f`, `\n`, `\r` and `\t` keep their escapes.
#[test]
fn control_characters_are_spelled_for_their_readers() {
    let mut ds = Dataset::new();
    let x = ds.add_dim(Dataset::ROOT, "x", 2, false);
    let mut c = var("c", Dataset::ROOT, NcType::Char, vec![x]);
    c.storage.fill_value = Some(vec![1]);
    ds.add_var(c);
    ds.groups[0].attrs = vec![
        attr("t", AttrValue::Char(b"a\x01b\x1fc\td\x7f".to_vec())),
        attr("s", AttrValue::Str(vec!["p\x02q".into()])),
    ];
    let stored = |dialect, key: &str| {
        let map = TestMap::default();
        let opts = WriteOptions {
            dialect,
            ..WriteOptions::default()
        };
        write_metadata(&map, &ds, &opts).unwrap();
        map.get(key).unwrap().unwrap()
    };
    let nczarr = stored(Dialect::NcZarr, ".zattrs");
    let has = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    assert!(has(&nczarr, b"\"a\x01b\x1fc\\td\x7f\""), "{nczarr:?}");
    assert!(has(&nczarr, b"\"p\x02q\""), "{nczarr:?}");
    assert!(has(
        &stored(Dialect::NcZarr, "c/.zarray"),
        b"\"fill_value\":\"\x01\""
    ));
    let pure = stored(Dialect::Zarr, ".zattrs");
    assert!(has(&pure, b"\"a\\u0001b\\u001fc\\td\x7f\""), "{pure:?}");
    assert!(serde_json::from_slice::<Value>(&pure).is_ok());
}

/// A NUL byte ends NCZarr text, as netcdf-c writes it: netcdf-c fails to open a dataset with a
/// NUL byte in its JSON and reads `\u0000` as `u0000`. Pure Zarr keeps the escape, which its
/// readers decode. The reader takes every spelling: a raw NUL (as nczarrfs wrote it before)
/// and the escape.
#[test]
fn a_nul_byte_ends_nczarr_text_and_every_spelling_reads_back() {
    let mut ds = Dataset::new();
    let x = ds.add_dim(Dataset::ROOT, "x", 2, false);
    let mut c = var("c", Dataset::ROOT, NcType::Char, vec![x]);
    c.storage.fill_value = Some(vec![0]);
    c.attrs = vec![attr("_FillValue", AttrValue::Char(vec![0]))];
    ds.add_var(c);
    ds.groups[0].attrs = vec![
        attr("t", AttrValue::Char(b"x\0y".to_vec())),
        attr("e", AttrValue::Char(b"abc\0".to_vec())),
        attr("s", AttrValue::Str(vec!["p\0q".into(), "r".into()])),
    ];
    let stored = |dialect| {
        let map = nczarrfs::zmap::MemoryMap::new();
        let opts = WriteOptions {
            dialect,
            ..WriteOptions::default()
        };
        write_metadata(&map, &ds, &opts).unwrap();
        map
    };
    let nczarr = stored(Dialect::NcZarr);
    let zattrs = nczarr.get(".zattrs").unwrap().unwrap();
    let has = |hay: &[u8], needle: &[u8]| hay.windows(needle.len()).any(|w| w == needle);
    assert!(!zattrs.contains(&0), "{zattrs:?}");
    assert!(
        has(&zattrs, br#""t":"x","e":"abc","s":["p","r"]"#),
        "{zattrs:?}"
    );
    let c_attrs = nczarr.get("c/.zattrs").unwrap().unwrap();
    assert!(has(&c_attrs, br#""_FillValue":"""#), "{c_attrs:?}");
    let pure = stored(Dialect::Zarr).get(".zattrs").unwrap().unwrap();
    assert!(has(&pure, br#""t":"x\u0000y""#), "{pure:?}");

    let mode = nczarrfs::location::Mode {
        format: Some(nczarrfs::location::Format::NcZarr),
        ..Default::default()
    };
    for spelling in [&b"x\0y"[..], br"x\u0000y"] {
        let at = zattrs.windows(7).position(|w| w == br#""t":"x""#).unwrap();
        let text = [
            &zattrs[..at],
            br#""t":""#,
            spelling,
            b"\"",
            &zattrs[at + 7..],
        ]
        .concat();
        nczarr.put(".zattrs", &text).unwrap();
        let back = nczarrfs::meta::read_dataset(&nczarr, &mode).unwrap();
        let t = back.groups[0].attrs.iter().find(|a| a.name == "t").unwrap();
        assert_eq!(t.value, AttrValue::Char(b"x\0y".to_vec()), "{spelling:?}");
    }
}

/// Char text that is not UTF-8 (ncgen's `c:_FillValue = "\377"`): netcdf-c 4.10.1 writes the
/// byte raw into NCZarr and pure Zarr alike (`"_FillValue": "\xff"`), which zarr-python
/// cannot decode ("'utf-8' codec can't decode byte 0xff"), and reads it back. NCZarr keeps it
/// so; pure Zarr, whose JSON must be UTF-8, refuses it, naming the attribute, before anything
/// is stored.
#[test]
fn char_text_that_is_not_utf8_is_refused_in_pure_zarr_only() {
    let mut ds = Dataset::new();
    let x = ds.add_dim(Dataset::ROOT, "x", 2, false);
    let mut c = var("c", Dataset::ROOT, NcType::Char, vec![x]);
    c.storage.fill_value = Some(vec![0xff]);
    c.attrs = vec![
        attr("ok", AttrValue::Char("café".as_bytes().to_vec())),
        attr("_FillValue", AttrValue::Char(vec![0xff])),
    ];
    ds.add_var(c);
    let opts = |dialect| WriteOptions {
        dialect,
        ..WriteOptions::default()
    };
    let map = TestMap::default();
    write_metadata(&map, &ds, &opts(Dialect::NcZarr)).unwrap();
    let zattrs = map.get("c/.zattrs").unwrap().unwrap();
    assert!(
        zattrs.windows(16).any(|w| w == b"\"_FillValue\":\"\xff\""),
        "{zattrs:?}"
    );
    for v3 in [false, true] {
        let map = TestMap::default();
        let e = if v3 {
            nczarrfs::meta::writer_v3::write_metadata(&map, &ds, &opts(Dialect::Zarr))
        } else {
            write_metadata(&map, &ds, &opts(Dialect::Zarr))
        }
        .unwrap_err()
        .to_string();
        assert!(
            e.contains(r#"attribute "_FillValue" of variable /c in pure Zarr: its text is not UTF-8 (byte 0xFF at offset 0)"#),
            "{e}"
        );
        assert!(map.0.lock().unwrap().is_empty());
    }
    // A global attribute is named as the root group's.
    ds.vars[0].attrs.pop();
    ds.groups[0].attrs = vec![attr("g", AttrValue::Char(b"ab\xe9".to_vec()))];
    let e = write_metadata(&TestMap::default(), &ds, &opts(Dialect::Zarr))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(r#"attribute "g" of group / in pure Zarr: its text is not UTF-8 (byte 0xE9 at offset 2)"#),
        "{e}"
    );
}

/// NCZarr on Zarr v3 has no netcdf-c to write or read it (4.10.1's `mode=nczarr,v3` writes Zarr
/// v2, and opens no `zarr.json`), and zarr-python 3 fails on a `zarr.json` that is not UTF-8
/// ("'utf-8' codec can't decode byte 0xff"). So char text that is not UTF-8 is refused there
/// as in pure Zarr, naming the attribute, before anything is stored; a char `_FillValue` is the
/// array's `fill_value`, the number 255 for the byte 0xFF, and needs no JSON text.
#[test]
fn char_text_that_is_not_utf8_is_refused_in_nczarr_v3() {
    use nczarrfs::meta::writer_v3;
    let mut ds = Dataset::new();
    let x = ds.add_dim(Dataset::ROOT, "x", 2, false);
    let mut c = var("c", Dataset::ROOT, NcType::Char, vec![x]);
    c.storage.fill_value = Some(vec![0xff]);
    c.attrs = vec![
        attr("_FillValue", AttrValue::Char(vec![0xff])),
        attr("ok", AttrValue::Char("café".as_bytes().to_vec())),
    ];
    ds.add_var(c);
    let opts = WriteOptions {
        dialect: Dialect::NcZarr,
        ..WriteOptions::default()
    };
    let map = TestMap::default();
    writer_v3::write_metadata(&map, &ds, &opts).unwrap();
    let node = map.get("c/zarr.json").unwrap().unwrap();
    let node: Value = serde_json::from_slice(&node).unwrap();
    assert_eq!(node["fill_value"], json!(255));
    assert_eq!(node["attributes"]["ok"], json!("café"));

    ds.vars[0]
        .attrs
        .push(attr("w", AttrValue::Char(b"a\xffb".to_vec())));
    let map = TestMap::default();
    let e = writer_v3::write_metadata(&map, &ds, &opts)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(r#"attribute "w" of variable /c in NCZarr on Zarr v3: its text is not UTF-8 (byte 0xFF at offset 1)"#),
        "{e}"
    );
    assert!(map.0.lock().unwrap().is_empty());

    ds.vars[0].attrs.pop();
    ds.groups[0].attrs = vec![attr("g", AttrValue::Char(b"\xfe".to_vec()))];
    let e = writer_v3::write_metadata(&TestMap::default(), &ds, &opts)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains(r#"attribute "g" of group / in NCZarr on Zarr v3: its text is not UTF-8 (byte 0xFE at offset 0)"#),
        "{e}"
    );
}
