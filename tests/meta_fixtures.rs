//! The metadata reader against the stores of `fixtures/INDEX.md` ("Stores written by other
//! implementations or older NCZarr"). Expected values are read off the expected `.cdl` files
//! named in each test (netcdf-c's ncdump output); the stores are loaded into an in-test map so
//! that only `meta` is exercised.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};

use nczarrfs::location::{Format, Mode};
use nczarrfs::meta::read_dataset;
use nczarrfs::model::{AttrValue, ChunkOrder, CodecSpec, Dataset, NcType, NczarrLayout};
use nczarrfs::zmap::ZMap;
use nczarrfs::{Error, Result};

fn shared() -> PathBuf {
    std::env::var("NCZARRFS_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared")))
}

fn fixture(rel: &str) -> PathBuf {
    shared().join("fixtures").join(rel)
}

/// A read-only map over a sorted table; enough for the reader.
#[derive(Debug, Default)]
struct TableMap(BTreeMap<String, Vec<u8>>);

impl ZMap for TableMap {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        Ok(self.0.get(key).cloned())
    }
    fn put(&self, _: &str, _: &[u8]) -> Result<()> {
        Err(Error::NotPermitted("read-only".into()))
    }
    fn delete(&self, _: &str) -> Result<()> {
        Err(Error::NotPermitted("read-only".into()))
    }
    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        let mut out: Vec<String> = self
            .0
            .keys()
            .filter_map(|k| {
                let rest = if prefix.is_empty() {
                    k.as_str()
                } else {
                    k.strip_prefix(prefix)?.strip_prefix('/')?
                };
                Some(rest.split('/').next()?.to_string())
            })
            .collect();
        out.dedup();
        Ok(out)
    }
    fn read_only(&self) -> bool {
        true
    }
    fn describe(&self) -> String {
        "table".into()
    }
}

/// The objects of a zip whose names start with `root` (a folder inside the archive, or "").
fn from_zip(path: &Path, root: &str) -> TableMap {
    let file = std::fs::File::open(path).unwrap();
    let mut zip = zip::ZipArchive::new(file).unwrap();
    let mut map = TableMap::default();
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).unwrap();
        if f.is_dir() {
            continue;
        }
        let name = f.name().to_string();
        let Some(rel) = name.strip_prefix(root) else {
            continue;
        };
        let mut buf = Vec::new();
        f.read_to_end(&mut buf).unwrap();
        map.0.insert(rel.trim_start_matches('/').to_string(), buf);
    }
    map
}

fn load_dir(map: &mut TableMap, dir: &Path, prefix: &str) {
    for e in std::fs::read_dir(dir).unwrap() {
        let e = e.unwrap();
        let name = e.file_name().to_string_lossy().into_owned();
        let key = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        if e.file_type().unwrap().is_dir() {
            load_dir(map, &e.path(), &key);
        } else {
            map.0.insert(key, std::fs::read(e.path()).unwrap());
        }
    }
}

fn from_dir(dir: &Path) -> TableMap {
    let mut map = TableMap::default();
    load_dir(&mut map, dir, "");
    map
}

/// The regular files of a .tar.gz whose paths start with `root/`, keyed relative to it.
fn from_tgz(path: &Path, root: &str) -> TableMap {
    let mut data = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(path).unwrap())
        .read_to_end(&mut data)
        .unwrap();
    let mut map = TableMap::default();
    let mut pos = 0;
    let mut long_name: Option<String> = None;
    while pos + 512 <= data.len() {
        let h = &data[pos..pos + 512];
        if h.iter().all(|b| *b == 0) {
            break;
        }
        let field = |a: usize, b: usize| {
            let f = &h[a..b];
            let end = f.iter().position(|c| *c == 0).unwrap_or(f.len());
            String::from_utf8_lossy(&f[..end]).into_owned()
        };
        let size = usize::from_str_radix(field(124, 136).trim(), 8).unwrap_or(0);
        let kind = h[156];
        let prefix = field(345, 500);
        let mut name = match long_name.take() {
            Some(n) => n,
            None if prefix.is_empty() => field(0, 100),
            None => format!("{prefix}/{}", field(0, 100)),
        };
        let body = &data[pos + 512..pos + 512 + size];
        if kind == b'L' {
            let end = body.iter().position(|c| *c == 0).unwrap_or(body.len());
            long_name = Some(String::from_utf8_lossy(&body[..end]).into_owned());
        } else if kind == b'0' || kind == 0 {
            name = name.trim_start_matches("./").to_string();
            if let Some(rel) = name.strip_prefix(root) {
                map.0
                    .insert(rel.trim_start_matches('/').to_string(), body.to_vec());
            }
        }
        pos += 512 + size.div_ceil(512) * 512;
    }
    map
}

fn read(map: &TableMap) -> Dataset {
    read_dataset(map, &Mode::default()).unwrap()
}

fn dims_of(ds: &Dataset, g: &str) -> Vec<(String, u64)> {
    let g = ds.find_group(g).unwrap();
    ds.group(g)
        .dims
        .iter()
        .map(|d| (ds.dim(*d).name.clone(), ds.dim(*d).len))
        .collect()
}

fn var_sig(ds: &Dataset, path: &str) -> (NcType, Vec<String>) {
    let v = ds
        .find_var(path)
        .unwrap_or_else(|| panic!("no variable {path}"));
    let var = ds.var(v);
    (
        var.nctype,
        var.dims.iter().map(|d| ds.dim(*d).name.clone()).collect(),
    )
}

fn var_attrs(ds: &Dataset, path: &str) -> Vec<(String, AttrValue)> {
    let v = ds.find_var(path).unwrap();
    ds.var(v)
        .attrs
        .iter()
        .map(|a| (a.name.clone(), a.value.clone()))
        .collect()
}

fn group_attrs(ds: &Dataset, path: &str) -> Vec<(String, AttrValue)> {
    let g = ds.find_group(path).unwrap();
    ds.group(g)
        .attrs
        .iter()
        .map(|a| (a.name.clone(), a.value.clone()))
        .collect()
}

fn s(x: &str) -> String {
    x.to_string()
}

fn chars(x: &str) -> AttrValue {
    AttrValue::Char(x.as_bytes().to_vec())
}

fn names(v: &[&str]) -> Vec<String> {
    v.iter().map(|x| x.to_string()).collect()
}

/// history/ref_oldformat_v1.cdl
#[test]
fn nczarr_1_0_0() {
    let map = from_zip(
        &fixture("history/ref_oldformat_v1_nczarr1.0.0.zip"),
        "oldformat.file",
    );
    let ds = read(&map);
    assert_eq!(ds.provenance.layout, Some(NczarrLayout::Objects1));
    assert_eq!(dims_of(&ds, "/"), vec![(s("lat"), 8)]);
    assert_eq!(dims_of(&ds, "/g1"), vec![(s("lon"), 10)]);
    assert_eq!(var_sig(&ds, "lat"), (NcType::Int, names(&["lat"])));
    assert_eq!(
        var_attrs(&ds, "lat"),
        vec![
            (s("_FillValue"), AttrValue::Int(vec![-1])),
            (s("lat_attr"), chars("latitude"))
        ]
    );
    assert_eq!(
        var_sig(&ds, "/g1/pos"),
        (NcType::Int, names(&["lat", "lon"]))
    );
    assert_eq!(
        var_attrs(&ds, "/g1/pos"),
        vec![
            (s("_FillValue"), AttrValue::Int(vec![-1])),
            (s("pos_attr"), chars("latXlon"))
        ]
    );
    assert_eq!(
        group_attrs(&ds, "/g1"),
        vec![(s("g1_attr"), AttrValue::Int(vec![17]))]
    );
    // _NCProperties is hidden; no global attributes remain.
    assert!(group_attrs(&ds, "/").is_empty());
    let pos = ds.var(ds.find_var("/g1/pos").unwrap());
    assert_eq!(pos.storage.key, "g1/pos");
    assert_eq!(pos.storage.shape, vec![8, 10]);
    assert_eq!(pos.storage.fill_value, Some((-1i32).to_le_bytes().to_vec()));
}

/// nczarr_test/ref_oldformat.cdl (current layout, anonymous dims recorded by NCZarr).
#[test]
fn current_layout() {
    let map = from_zip(&fixture("nczarr_test/ref_oldformat.zip"), "ref_oldformat");
    let ds = read(&map);
    assert_eq!(ds.provenance.layout, Some(NczarrLayout::Attributes));
    assert_eq!(
        dims_of(&ds, "/"),
        vec![(s("_Anonymous_Dim_8"), 8), (s("_Anonymous_Dim_10"), 10)]
    );
    assert!(dims_of(&ds, "/g1").is_empty());
    assert_eq!(
        var_sig(&ds, "lat"),
        (NcType::Int, names(&["_Anonymous_Dim_8"]))
    );
    assert_eq!(
        var_sig(&ds, "g1/pos"),
        (
            NcType::Int,
            names(&["_Anonymous_Dim_8", "_Anonymous_Dim_10"])
        )
    );
    assert_eq!(
        var_attrs(&ds, "lat"),
        vec![
            (s("_FillValue"), AttrValue::Int(vec![-1])),
            (s("lat_attr"), chars("latitude"))
        ]
    );
    assert_eq!(
        group_attrs(&ds, "/g1"),
        vec![(s("g1_attr"), AttrValue::Int(vec![17]))]
    );
    assert!(group_attrs(&ds, "/").is_empty());
}

/// The same store read with mode=zarr (compare nczarr_test/ref_newformatpure.cdl): NCZarr
/// metadata is ignored, `lat` gets its dimension from `_ARRAY_DIMENSIONS`, `pos` anonymous ones.
#[test]
fn current_layout_as_pure_zarr() {
    let map = from_zip(&fixture("nczarr_test/ref_oldformat.zip"), "ref_oldformat");
    let mode = Mode {
        format: Some(Format::Zarr),
        ..Mode::default()
    };
    let ds = read_dataset(&map, &mode).unwrap();
    assert_eq!(ds.provenance.layout, None);
    assert_eq!(
        var_sig(&ds, "lat"),
        (NcType::Int, names(&["_Anonymous_Dim_8"]))
    );
    assert_eq!(
        var_sig(&ds, "g1/pos"),
        (
            NcType::Int,
            names(&["_Anonymous_Dim_8", "_Anonymous_Dim_10"])
        )
    );
    assert_eq!(
        group_attrs(&ds, "/g1"),
        vec![(s("g1_attr"), AttrValue::Int(vec![17]))]
    );
    let lat = var_attrs(&ds, "lat");
    assert_eq!(lat[0], (s("_FillValue"), AttrValue::Int(vec![-1])));
    assert_eq!(lat[1].0, "lat_attr");
}

/// nczarr_test/ref_oldkeys.cdl (netcdf 4.9.1–4.9.2 layout).
#[test]
fn old_keys() {
    let map = from_zip(
        &fixture("nczarr_test/ref_oldkeys.file.zip"),
        "ref_oldkeys.file",
    );
    let ds = read(&map);
    assert_eq!(ds.provenance.layout, Some(NczarrLayout::LowerCaseKeys));
    assert_eq!(
        dims_of(&ds, "/"),
        vec![(s("d0"), 2), (s("d1"), 4), (s("d2"), 6)]
    );
    assert_eq!(var_sig(&ds, "v"), (NcType::Int, names(&["d0", "d1", "d2"])));
    assert_eq!(
        var_attrs(&ds, "v"),
        vec![(s("_FillValue"), AttrValue::Int(vec![-1]))]
    );
    assert!(group_attrs(&ds, "/").is_empty());
    // fill_value is null in .zarray: netcdf-c writes that for a variable without fill, and
    // reads it so (Debian's ncdump 4.9.0 prints `_NoFill = "true"` beside the _FillValue
    // attribute of such an array that its ncgen wrote).
    let v = ds.var(ds.find_var("v").unwrap());
    assert_eq!(v.storage.fill_value, None);
}

/// nczarr_test/ref_byte.cdl: `ubyte byte(_Anonymous_Dim_20, _Anonymous_Dim_20)`, no attributes.
#[test]
fn pure_byte() {
    let map = from_zip(&fixture("nczarr_test/ref_byte.zarr.zip"), "ref_byte.zarr");
    let ds = read(&map);
    assert_eq!(dims_of(&ds, "/"), vec![(s("_Anonymous_Dim_20"), 20)]);
    assert_eq!(
        var_sig(&ds, "byte"),
        (
            NcType::UByte,
            names(&["_Anonymous_Dim_20", "_Anonymous_Dim_20"])
        )
    );
    assert!(var_attrs(&ds, "byte").is_empty());
    let v = ds.var(ds.find_var("byte").unwrap());
    assert_eq!(v.storage.fill_value, Some(vec![0]));
    assert_eq!(v.storage.chunks, vec![20, 20]);
    assert_eq!(v.storage.order, ChunkOrder::C);
}

/// nczarr_test/ref_byte_fill_value_null.cdl: no fill value (its one chunk holds 255s), a stray
/// `.zattrs.~1~` is ignored.
#[test]
fn pure_byte_fill_null() {
    let map = from_zip(
        &fixture("nczarr_test/ref_byte_fill_value_null.zarr.zip"),
        "ref_byte_fill_value_null.zarr",
    );
    let ds = read(&map);
    assert_eq!(dims_of(&ds, "/"), vec![(s("_Anonymous_Dim_20"), 20)]);
    assert_eq!(
        var_sig(&ds, "byt"),
        (
            NcType::UByte,
            names(&["_Anonymous_Dim_20", "_Anonymous_Dim_20"])
        )
    );
    assert!(var_attrs(&ds, "byt").is_empty());
    assert_eq!(ds.var(ds.find_var("byt").unwrap()).storage.fill_value, None);
}

/// nczarr_test/ref_power_901_constants.cdl (`-h`).
#[test]
fn xarray_power() {
    let map = from_zip(
        &fixture("nczarr_test/ref_power_901_constants_orig.zip"),
        "ref_power_901_constants",
    );
    let ds = read(&map);
    assert_eq!(dims_of(&ds, "/"), vec![(s("lat"), 361), (s("lon"), 576)]);
    let vars: Vec<&str> = ds
        .group(Dataset::ROOT)
        .vars
        .iter()
        .map(|v| ds.var(*v).name.as_str())
        .collect();
    assert_eq!(vars, ["FRLAKE", "FRLAND", "FRLANDICE", "FROCEAN"]);
    assert_eq!(
        var_sig(&ds, "FRLAKE"),
        (NcType::Float, names(&["lat", "lon"]))
    );
    let big = 999999986991104.0;
    assert_eq!(
        var_attrs(&ds, "FRLAKE"),
        vec![
            (s("fmissing_value"), AttrValue::Double(vec![big])),
            (s("long_name"), chars("fraction_of_lake")),
            (s("standard_name"), chars("fraction_of_lake")),
            (s("units"), chars("1")),
            (s("valid_range"), AttrValue::Double(vec![-big, big])),
            (s("vmax"), AttrValue::Double(vec![big])),
            (s("vmin"), AttrValue::Double(vec![-big])),
        ]
    );
    let v = ds.var(ds.find_var("FRLAKE").unwrap());
    assert_eq!(v.storage.fill_value, Some(f32::NAN.to_le_bytes().to_vec()));
    let CodecSpec::V2 {
        filters,
        compressor,
    } = &v.storage.codecs
    else {
        panic!("not v2")
    };
    assert!(filters.is_empty());
    assert_eq!(compressor.as_ref().unwrap()["cname"], "lz4");
}

/// nczarr_test/ref_quotes.cdl (`-h`): bare NaN literal, quotes in strings.
#[test]
fn xarray_quotes() {
    let map = from_zip(&fixture("nczarr_test/ref_quotes_orig.zip"), "ref_quotes");
    let ds = read(&map);
    assert_eq!(
        dims_of(&ds, "/"),
        vec![(s("time"), 10), (s("lat"), 20), (s("lon"), 30)]
    );
    let v = "fractional_snow_cover";
    assert_eq!(
        var_sig(&ds, v),
        (NcType::Float, names(&["time", "lat", "lon"]))
    );
    let attrs = var_attrs(&ds, v);
    let got: Vec<&str> = attrs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        got,
        [
            "ID",
            "esa_cci_path",
            "long_name",
            "orig_attrs",
            "orig_version",
            "project_name",
            "time_coverage_end",
            "time_coverage_resolution",
            "time_coverage_start",
            "units",
            "url"
        ]
    );
    assert_eq!(attrs[0].1, AttrValue::Int(vec![68]));
    match &attrs[1].1 {
        AttrValue::Double(x) => assert!(x.len() == 1 && x[0].is_nan()),
        other => panic!("{other:?}"),
    }
    assert_eq!(attrs[2].1, chars("Surface Fraction Covered by Snow"));
    let AttrValue::Char(orig) = &attrs[3].1 else {
        panic!()
    };
    let orig = String::from_utf8(orig.clone()).unwrap();
    assert!(orig.starts_with("{'comment': 'Grid cell"));
    assert!(orig.contains("et al. \"ESA DUE Globsnow"));
    assert!(orig.ends_with("'url': 'http://www.globsnow.info/'}"));
    assert_eq!(attrs[10].1, chars("http://www.globsnow.info/"));
}

/// nczarr_test/ref_noshape.file.zip must not crash: `shape: []` with `_ARRAY_DIMENSIONS`.
#[test]
fn noshape() {
    let map = from_zip(
        &fixture("nczarr_test/ref_noshape.file.zip"),
        "ref_noshape.file",
    );
    let ds = read(&map);
    assert_eq!(var_sig(&ds, "v"), (NcType::Int, vec![]));
    assert!(ds.dims.is_empty());
}

/// pr3068_v3/ref_consolidated_zarr_2.18.2_python.cdl
#[test]
fn consolidated_zarr_python() {
    let map = from_tgz(
        &fixture("pr3068_v3/ref_consolidated_zarr_2.18.2_python.zarr.tgz"),
        "ref_consolidated_zarr_2.18.2_python.zarr",
    );
    let check = |ds: &Dataset| {
        assert_eq!(
            dims_of(ds, "/"),
            vec![
                (s("_Anonymous_Dim_6"), 6),
                (s("_Anonymous_Dim_15"), 15),
                (s("_Anonymous_Dim_3"), 3),
                (s("_Anonymous_Dim_5"), 5)
            ]
        );
        assert_eq!(
            group_attrs(ds, "/"),
            vec![(s("Description"), chars("Consolidated zarr test"))]
        );
        assert_eq!(
            group_attrs(ds, "/G1"),
            vec![(s("Details"), chars("Varibles are chunked"))]
        );
        assert_eq!(
            var_sig(ds, "/G1/subg1/myarray"),
            (
                NcType::Int,
                names(&["_Anonymous_Dim_6", "_Anonymous_Dim_15"])
            )
        );
        assert_eq!(
            var_sig(ds, "/G2/other variable with spaces"),
            (
                NcType::Int64,
                names(&["_Anonymous_Dim_3", "_Anonymous_Dim_5"])
            )
        );
        let groups: Vec<String> = ds
            .groups_preorder()
            .iter()
            .map(|g| ds.group_fqn(*g))
            .collect();
        assert_eq!(groups, ["/", "/G1", "/G1/subg1", "/G2"]);
    };
    check(&read(&map));
    // Only the consolidated metadata (and chunks) left: the same model, so .zmetadata is used.
    let mut only = TableMap::default();
    for (k, v) in &map.0 {
        if k == ".zmetadata" || !k.rsplit('/').next().unwrap().starts_with('.') {
            only.0.insert(k.clone(), v.clone());
        }
    }
    assert!(!only.0.contains_key(".zgroup"));
    check(&read(&only));
}

/// nczarr_test/ref_data.zarr: zarr-python store with `.zmetadata`.
#[test]
fn zarr_python_data() {
    let map = from_dir(&fixture("nczarr_test/ref_data.zarr"));
    let ds = read(&map);
    assert_eq!(
        var_sig(&ds, "data"),
        (NcType::Int64, names(&["_Anonymous_Dim_10"]))
    );
    let v = ds.var(ds.find_var("data").unwrap());
    assert_eq!(v.storage.fill_value, Some(0i64.to_le_bytes().to_vec()));
}

/// nczarr_test/ref_notzarr.tar.gz: empty and non-Zarr directories and zips are refused.
#[test]
fn not_zarr() {
    let tgz = fixture("nczarr_test/ref_notzarr.tar.gz");
    let mut checked = 0;
    for root in ["notzarr.file", "empty.file"] {
        let map = from_tgz(&tgz, root);
        let err = read_dataset(&map, &Mode::default()).unwrap_err();
        assert!(matches!(err, Error::NotZarr { .. }), "{root}: {err:?}");
        assert!(err.to_string().contains("not a netCDF/Zarr dataset"));
        checked += 1;
    }
    // The zips inside the archive: their contents hold no Zarr objects either.
    let all = from_tgz(&tgz, "");
    for z in ["notzarr.zip", "empty.zip"] {
        let Some(bytes) = all.0.get(z) else { continue };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(z);
        std::fs::write(&p, bytes).unwrap();
        let map = match zip::ZipArchive::new(std::fs::File::open(&p).unwrap()) {
            Ok(_) => from_zip(&p, ""),
            Err(_) => TableMap::default(),
        };
        let err = read_dataset(&map, &Mode::default()).unwrap_err();
        assert!(matches!(err, Error::NotZarr { .. }), "{z}: {err:?}");
        checked += 1;
    }
    assert!(checked >= 2);
}

/// A store of NCZarr 1.0.0 (netcdf 4.8.0), which no netcdf-c since reads, is not rewritten in
/// another layout behind its writer's back: opening it for writing fails and changes nothing.
#[test]
fn writing_to_nczarr_1_0_0_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let zip = tmp.path().join("old.zip");
    std::fs::copy(fixture("history/ref_oldformat_v1_nczarr1.0.0.zip"), &zip).unwrap();
    let before = std::fs::read(&zip).unwrap();
    let loc = nczarrfs::location::Location::parse(zip.to_str().unwrap()).unwrap();
    let e = nczarrfs::create::DatasetWriter::open(&loc)
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("NCZarr 1.0.0") && e.contains("copy it first"),
        "{e}"
    );
    assert_eq!(std::fs::read(&zip).unwrap(), before);
}
