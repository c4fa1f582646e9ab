//! The storage requests of opening a dataset, read-only and for writing, counted through a
//! wrapper map: on an object store each is a round trip, so no object is asked for twice.
//!
//! The stores are written here by hand following the Zarr v2 / v3 specifications and the
//! NCZarr layout of netcdf-c 4.9.3+ (`_nczarr_*` attributes in `.zattrs`, in the v3 root's
//! `attributes`), so the objects an open must read follow from them.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use nczarrfs::create::DatasetWriter;
use nczarrfs::location::Location;
use nczarrfs::meta;
use nczarrfs::meta::writer::Dialect;
use nczarrfs::zmap::{FileMap, ZMap};
use nczarrfs::Result;
use serde_json::{json, Value};

/// One storage request as the wrapper saw it: a read or an existence probe of `key`, or a
/// listing under a prefix.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Request {
    Get(String),
    Exists(String),
    Search(String),
}

/// Records every request made of the map it wraps, one per key of a batch.
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn ZMap>,
    requests: Mutex<Vec<Request>>,
}

impl Counting {
    fn new(inner: Arc<dyn ZMap>) -> Self {
        Counting {
            inner,
            requests: Mutex::new(Vec::new()),
        }
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    fn record(&self, request: Request) {
        self.requests.lock().unwrap().push(request);
    }
}

impl ZMap for Counting {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.record(Request::Get(key.into()));
        self.inner.get(key)
    }

    fn get_many(&self, keys: &[String]) -> Vec<Result<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }

    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Option<Vec<u8>>> {
        self.record(Request::Get(key.into()));
        self.inner.get_range(key, offset, len)
    }

    fn exists(&self, key: &str) -> Result<bool> {
        self.record(Request::Exists(key.into()));
        self.inner.exists(key)
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.put(key, value)
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.inner.delete(key)
    }

    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        self.record(Request::Search(prefix.into()));
        self.inner.search(prefix)
    }

    fn read_only(&self) -> bool {
        self.inner.read_only()
    }

    fn claim_writer(&self) -> Result<()> {
        self.inner.claim_writer()
    }

    fn describe(&self) -> String {
        format!("counting({})", self.inner.describe())
    }
}

/// A directory dataset holding `objects` (key → JSON), and its location with `fragment`.
fn store(objects: &[(&str, Value)], fragment: &str) -> (tempfile::TempDir, Location) {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("ds");
    std::fs::create_dir(&root).unwrap();
    for (key, value) in objects {
        let path = root.join(key);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, value.to_string()).unwrap();
    }
    let url = format!("file://{}{fragment}", root.display());
    (dir, Location::parse(&url).unwrap())
}

/// The keys asked for more than once, with how often.
fn repeated(requests: &[Request]) -> BTreeMap<String, usize> {
    let mut times = BTreeMap::new();
    for r in requests {
        if let Request::Get(key) | Request::Exists(key) = r {
            *times.entry(key.clone()).or_insert(0) += 1;
        }
    }
    times.retain(|_, n| *n > 1);
    times
}

/// The requests of a read-only open and of a writer's open of `location`, and the writer's
/// options (see [`check`]).
fn open_both_ways(location: &Location) -> (Vec<Request>, Vec<Request>, (u8, Dialect, bool, bool)) {
    let root = match &location.storage {
        nczarrfs::location::Storage::File(p) => p.clone(),
        other => panic!("a directory store, not {other:?}"),
    };
    let reading = Counting::new(Arc::new(FileMap::open(&root, false).unwrap()));
    meta::read_dataset(&reading, &location.mode).unwrap();
    let writing = Arc::new(Counting::new(Arc::new(FileMap::open(&root, true).unwrap())));
    let map: Arc<dyn ZMap> = Arc::clone(&writing) as Arc<dyn ZMap>;
    let w = DatasetWriter::open_in(location, map, 1 << 20).unwrap();
    assert_eq!(w.model().vars.len(), 1);
    let o = w.options();
    let options = (o.zarr_version, o.dialect, o.xarray, o.consolidated);
    (reading.requests(), writing.requests(), options)
}

fn zarray_v2() -> Value {
    json!({
        "zarr_format": 2, "shape": [4], "chunks": [4], "dtype": "<i4",
        "compressor": null, "filters": null, "fill_value": -1, "order": "C",
        "dimension_separator": ".",
    })
}

/// NCZarr as netcdf-c 4.9.3+ writes it: a root group with dimension `x` of 4 and an `int`
/// variable `v` on it, with attribute `units`.
fn nczarr_v2() -> Vec<(&'static str, Value)> {
    vec![
        (".zgroup", json!({"zarr_format": 2})),
        (
            ".zattrs",
            json!({
                "_nczarr_superblock": {"version": "3.0.0", "format": 2},
                "_nczarr_group": {
                    "dimensions": {"x": {"size": 4, "unlimited": 0}},
                    "arrays": ["v"], "subgroups": [],
                },
                "_nczarr_attrs": {"types": {"_nczarr_superblock": "|J0",
                                            "_nczarr_group": "|J0"}},
            }),
        ),
        ("v/.zarray", zarray_v2()),
        (
            "v/.zattrs",
            json!({
                "_ARRAY_DIMENSIONS": ["x"],
                "units": "m",
                "_nczarr_array": {"dimension_references": ["/x"], "storage": "chunked"},
                "_nczarr_attrs": {"types": {"units": ">S1", "_nczarr_array": "|J0"}},
            }),
        ),
    ]
}

/// The same as pure Zarr v2 with xarray's dimension names.
fn pure_v2() -> Vec<(&'static str, Value)> {
    vec![
        (".zgroup", json!({"zarr_format": 2})),
        ("v/.zarray", zarray_v2()),
        (
            "v/.zattrs",
            json!({"_ARRAY_DIMENSIONS": ["x"], "units": "m"}),
        ),
    ]
}

/// The same as Zarr v3, with the NCZarr attributes of netcdf-c's v3 draft when `nczarr`.
fn v3(nczarr: bool) -> Vec<(&'static str, Value)> {
    let mut root_attrs = json!({});
    let mut var_attrs = json!({"units": "m"});
    if nczarr {
        root_attrs = json!({
            "_nczarr_superblock": {"version": "3.0.0", "format": 3},
            "_nczarr_group": {
                "dimensions": {"x": {"size": 4, "unlimited": 0}},
                "arrays": ["v"], "subgroups": [],
            },
        });
        var_attrs["_nczarr_array"] = json!({"dimension_references": ["/x"]});
    }
    vec![
        (
            "zarr.json",
            json!({"zarr_format": 3, "node_type": "group", "attributes": root_attrs}),
        ),
        (
            "v/zarr.json",
            json!({
                "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "int32",
                "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [4]}},
                "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
                "fill_value": -1,
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
                "dimension_names": ["x"], "attributes": var_attrs,
            }),
        ),
    ]
}

/// Prints the requests of both opens, for the record of bench/RESULTS.md.
fn report(what: &str, reading: &[Request], writing: &[Request]) {
    let gets = |rs: &[Request]| rs.iter().filter(|r| matches!(r, Request::Get(_))).count();
    let probes = |rs: &[Request]| rs.iter().filter(|r| !matches!(r, Request::Get(_))).count();
    eprintln!(
        "{what}: read-only open {} gets + {} other requests; writer's open {} gets + {} other \
         requests\n  read-only: {reading:?}\n  writer: {writing:?}",
        gets(reading),
        probes(reading),
        gets(writing),
        probes(writing),
    );
}

/// Opens the store of `objects` both ways, checks that neither asks for an object twice, and
/// gives what the writer found: the Zarr version, the dialect, whether it writes xarray's
/// dimension names, whether it keeps a consolidated summary.
fn check(what: &str, objects: &[(&str, Value)], fragment: &str) -> (u8, Dialect, bool, bool) {
    let (_dir, location) = store(objects, fragment);
    let (reading, writing, options) = open_both_ways(&location);
    report(what, &reading, &writing);
    assert_eq!(repeated(&reading), BTreeMap::new(), "{what}, read-only");
    assert_eq!(repeated(&writing), BTreeMap::new(), "{what}, for writing");
    options
}

#[test]
fn nczarr_v2_objects_are_read_once() {
    let found = (2, Dialect::NcZarr, true, false);
    assert_eq!(check("NCZarr v2", &nczarr_v2(), ""), found);
    assert_eq!(
        check("NCZarr v2, mode=nczarr", &nczarr_v2(), "#mode=nczarr,file"),
        found
    );
    // Without `_ARRAY_DIMENSIONS`, a writer adds none.
    let mut objects = nczarr_v2();
    objects[3]
        .1
        .as_object_mut()
        .unwrap()
        .remove("_ARRAY_DIMENSIONS");
    let found = (2, Dialect::NcZarr, false, false);
    assert_eq!(check("NCZarr v2, noxarray", &objects, ""), found);
}

#[test]
fn pure_zarr_v2_objects_are_read_once() {
    let found = (2, Dialect::Zarr, true, false);
    assert_eq!(check("pure Zarr v2", &pure_v2(), ""), found);
    assert_eq!(
        check("pure Zarr v2, mode=zarr", &pure_v2(), "#mode=zarr,file"),
        found
    );
}

#[test]
fn zarr_v3_objects_are_read_once() {
    // The Zarr v3 writer writes no `_ARRAY_DIMENSIONS`, whatever its options say.
    let v3_found = |(version, dialect, _, consolidated)| (version, dialect, consolidated);
    let found = check("NCZarr v3", &v3(true), "");
    assert_eq!(v3_found(found), (3, Dialect::NcZarr, false));
    let found = check("pure Zarr v3", &v3(false), "");
    assert_eq!(v3_found(found), (3, Dialect::Zarr, false));
    let found = check("pure Zarr v3, mode=v3", &v3(false), "#mode=zarr,v3,file");
    assert_eq!(v3_found(found), (3, Dialect::Zarr, false));
    // zarr-python 3's consolidated metadata, inline in the root's zarr.json.
    let mut objects = v3(false);
    let array = objects[1].1.clone();
    objects[0].1["consolidated_metadata"] = json!({
        "kind": "inline", "must_understand": false, "metadata": {"v": array},
    });
    let found = check("consolidated Zarr v3", &objects, "");
    assert_eq!(v3_found(found), (3, Dialect::Zarr, true));
}

#[test]
fn consolidated_v2_objects_are_read_once() {
    let mut objects = pure_v2();
    let metadata: serde_json::Map<String, Value> = objects
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect();
    objects.push((
        ".zmetadata",
        json!({"zarr_consolidated_format": 1, "metadata": metadata}),
    ));
    let found = (2, Dialect::Zarr, true, true);
    assert_eq!(check("consolidated Zarr v2", &objects, ""), found);
}
