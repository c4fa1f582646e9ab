//! Request patterns that matter on object stores, counted through a wrapper map: opening a
//! consolidated dataset takes one round trip, and the chunk engine gets the chunks of a read
//! in concurrent batches (`ZMap::get_many`, `ZMap::get_each`) when the map asks for it.
//!
//! Expected values come from first principles: the stores are written here by hand following
//! the Zarr v2 / v3 specifications (raw little-endian chunks, no compressor), or are upstream
//! fixtures.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use nczarrfs::chunk::{ChunkEngine, Hyperslab};
use nczarrfs::location::Mode;
use nczarrfs::meta;
use nczarrfs::zmap::{FileMap, MemoryMap, ZMap};
use nczarrfs::{Error, Result};

/// One storage request as the wrapper saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Call {
    Get(String),
    /// The keys of one batch of concurrent requests (`get_many` or `get_each`).
    Many(Vec<String>),
    Exists(String),
    Search(String),
}

/// Records every request and pretends to fetch `concurrency` objects at once.
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn ZMap>,
    concurrency: usize,
    calls: Mutex<Vec<Call>>,
    /// Keys whose reads fail, as a server error would.
    failing: Vec<String>,
}

impl Counting {
    fn new(inner: Arc<dyn ZMap>, concurrency: usize) -> Self {
        Counting {
            inner,
            concurrency,
            calls: Mutex::new(Vec::new()),
            failing: Vec::new(),
        }
    }

    fn calls(&self) -> Vec<Call> {
        self.calls.lock().unwrap().clone()
    }

    fn record(&self, call: Call) {
        self.calls.lock().unwrap().push(call);
    }

    fn read(&self, key: &str) -> Result<Option<Vec<u8>>> {
        if self.failing.iter().any(|k| k == key) {
            return Err(Error::Storage {
                key: key.into(),
                reason: "503 Slow Down (injected)".into(),
            });
        }
        self.inner.get(key)
    }
}

impl ZMap for Counting {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.record(Call::Get(key.into()));
        self.read(key)
    }

    fn get_many(&self, keys: &[String]) -> Vec<Result<Option<Vec<u8>>>> {
        self.record(Call::Many(keys.to_vec()));
        keys.iter().map(|k| self.read(k)).collect()
    }

    // Like the S3 map, metadata is fetched in one batch, its lengths checked as it arrives.
    fn get_many_metadata(&self, keys: &[String], limit: u64) -> Vec<Result<Option<Vec<u8>>>> {
        self.record(Call::Many(keys.to_vec()));
        keys.iter()
            .map(|k| {
                let bytes = self.read(k)?;
                assert!(bytes.as_ref().is_none_or(|b| b.len() as u64 <= limit));
                Ok(bytes)
            })
            .collect()
    }

    fn get_each(&self, keys: &[String], each: &mut dyn FnMut(usize, Result<Option<Vec<u8>>>)) {
        self.record(Call::Many(keys.to_vec()));
        // Last first: the objects of a batch may arrive in any order.
        for (i, key) in keys.iter().enumerate().rev() {
            each(i, self.read(key));
        }
    }

    fn concurrent_gets(&self) -> usize {
        self.concurrency
    }

    fn exists(&self, key: &str) -> Result<bool> {
        self.record(Call::Exists(key.into()));
        self.inner.exists(key)
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.put(key, value)
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.inner.delete(key)
    }

    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        self.record(Call::Search(prefix.into()));
        self.inner.search(prefix)
    }

    fn read_only(&self) -> bool {
        true
    }

    fn describe(&self) -> String {
        format!("counting({})", self.inner.describe())
    }
}

fn fixtures() -> PathBuf {
    let shared = std::env::var("NCZARRFS_SHARED")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../shared").to_string());
    PathBuf::from(shared).join("fixtures")
}

/// A pure Zarr v2 group holding `<i4` arrays `name` of `shape` and `chunks` with values
/// 0, 1, 2, ... in C order; chunks listed in `skip` are not written (they read as fill 0).
fn zarr_v2(arrays: &[(&str, &[u64], &[u64])], skip: &[&str]) -> Arc<MemoryMap> {
    let map = Arc::new(MemoryMap::new());
    map.put(".zgroup", br#"{"zarr_format": 2}"#).unwrap();
    for &(name, shape, chunks) in arrays {
        let zarray = serde_json::json!({
            "zarr_format": 2, "shape": shape, "chunks": chunks, "dtype": "<i4",
            "compressor": null, "filters": null, "fill_value": 0, "order": "C",
        });
        map.put(&format!("{name}/.zarray"), zarray.to_string().as_bytes())
            .unwrap();
        let dims: Vec<String> = (0..shape.len()).map(|d| format!("{name}_d{d}")).collect();
        let zattrs = serde_json::json!({ "_ARRAY_DIMENSIONS": dims });
        map.put(&format!("{name}/.zattrs"), zattrs.to_string().as_bytes())
            .unwrap();
        // Every chunk is full size (Zarr v2), cells past the edge hold anything: zeros.
        let grid: Vec<u64> = shape
            .iter()
            .zip(chunks)
            .map(|(s, c)| s.div_ceil(*c))
            .collect();
        let nchunks: u64 = grid.iter().product();
        for flat in 0..nchunks {
            let mut coords = vec![0u64; grid.len()];
            let mut rest = flat;
            for d in (0..grid.len()).rev() {
                coords[d] = rest % grid[d];
                rest /= grid[d];
            }
            let key = format!(
                "{name}/{}",
                coords
                    .iter()
                    .map(u64::to_string)
                    .collect::<Vec<_>>()
                    .join(".")
            );
            if skip.contains(&key.as_str()) {
                continue;
            }
            let cells: u64 = chunks.iter().product();
            let mut bytes = Vec::new();
            for cell in 0..cells {
                let mut within = vec![0u64; chunks.len()];
                let mut rest = cell;
                for d in (0..chunks.len()).rev() {
                    within[d] = rest % chunks[d];
                    rest /= chunks[d];
                }
                let mut index = 0u64;
                let mut inside = true;
                for d in 0..shape.len() {
                    let i = coords[d] * chunks[d] + within[d];
                    inside &= i < shape[d];
                    index = index * shape[d] + i.min(shape[d] - 1);
                }
                let value = if inside { index as i32 } else { 0 };
                bytes.extend_from_slice(&value.to_le_bytes());
            }
            map.put(&key, &bytes).unwrap();
        }
    }
    map
}

/// Reads the whole of variable `name` as i32 values.
fn read_all(engine: &ChunkEngine, ds: &nczarrfs::model::Dataset, name: &str) -> Result<Vec<i32>> {
    let var = (0..ds.vars.len())
        .map(nczarrfs::model::VarId)
        .find(|&v| ds.var(v).name == name)
        .expect("variable exists");
    let shape = ds.var_shape(var);
    let slab = Hyperslab::whole(&shape);
    let mut out = vec![0u8; slab.len() as usize * 4];
    engine.read(ds, var, &slab, &mut out)?;
    Ok(out
        .chunks_exact(4)
        .map(|b| i32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect())
}

fn batches(calls: &[Call]) -> Vec<Vec<String>> {
    calls
        .iter()
        .filter_map(|c| match c {
            Call::Many(keys) => Some(keys.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn consolidated_v2_opens_with_one_round_trip() {
    let root = fixtures().join("nczarr_test/ref_data.zarr");
    let file: Arc<dyn ZMap> = Arc::new(FileMap::open(&root, false).unwrap());
    let counting = Counting::new(file, 8);
    let ds = meta::read_dataset(&counting, &Mode::default()).unwrap();
    assert_eq!(ds.vars.len(), 1);
    assert_eq!(
        counting.calls(),
        vec![Call::Many(vec!["zarr.json".into(), ".zmetadata".into()])]
    );
}

#[test]
fn consolidated_v3_opens_with_one_round_trip() {
    let map = Arc::new(MemoryMap::new());
    let array = serde_json::json!({
        "zarr_format": 3, "node_type": "array", "shape": [4], "data_type": "int32",
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": ["x"], "attributes": {},
    });
    let root = serde_json::json!({
        "zarr_format": 3, "node_type": "group", "attributes": {},
        "consolidated_metadata": {"kind": "inline", "must_understand": false,
                                  "metadata": {"a": array}},
    });
    map.put("zarr.json", root.to_string().as_bytes()).unwrap();
    map.put("a/zarr.json", array.to_string().as_bytes())
        .unwrap();
    map.put("a/c/1", &[5, 0, 0, 0, 6, 0, 0, 0]).unwrap();
    let counting = Counting::new(map, 8);
    let ds = meta::read_dataset(&counting, &Mode::default()).unwrap();
    assert_eq!(ds.vars.len(), 1);
    assert_eq!(
        counting.calls(),
        vec![Call::Many(vec!["zarr.json".into(), ".zmetadata".into()])]
    );
    // With the version in the mode, one GET.
    let counting = Counting::new(Arc::clone(&counting.inner), 8);
    let mode = Mode {
        zarr_version: Some(3),
        ..Mode::default()
    };
    meta::read_dataset(&counting, &mode).unwrap();
    assert_eq!(counting.calls(), vec![Call::Get("zarr.json".into())]);
}

#[test]
fn empty_store_is_refused_as_empty() {
    let counting = Counting::new(Arc::new(MemoryMap::new()), 8);
    let err = meta::read_dataset(&counting, &Mode::default()).unwrap_err();
    assert!(
        err.to_string().contains("no objects under this prefix"),
        "{err}"
    );
}

#[test]
fn wide_rows_are_fetched_in_batches_of_the_map_concurrency() {
    // 3 rows of 10 chunks: each row is fetched in batches of at most 4.
    let map = zarr_v2(&[("w", &[3, 40], &[1, 4])], &["w/1.3"]);
    let counting = Arc::new(Counting::new(map, 4));
    let ds = meta::read_dataset(counting.as_ref(), &Mode::default()).unwrap();
    let engine = ChunkEngine::new(counting.clone(), 0);
    let before = counting.calls().len();
    let values = read_all(&engine, &ds, "w").unwrap();
    let mut expected: Vec<i32> = (0..120).collect();
    expected[40 + 12..40 + 16].fill(0); // chunk w/1.3 is missing: fill
    assert_eq!(values, expected);
    let calls = &counting.calls()[before..];
    assert!(
        calls.iter().all(|c| matches!(c, Call::Many(_))),
        "every chunk goes through get_many: {calls:?}"
    );
    let got = batches(calls);
    assert!(got.iter().all(|b| !b.is_empty() && b.len() <= 4), "{got:?}");
    let mut keys: Vec<String> = got.concat();
    keys.sort();
    assert_eq!(keys.len(), 30, "each chunk requested once: {keys:?}");
    keys.dedup();
    assert_eq!(keys.len(), 30);
}

#[test]
fn narrow_rows_are_fetched_as_one_stream() {
    // 1-D: 25 chunks of 2, each its own row: the map gets all of them at once and keeps 8 in
    // flight.
    let map = zarr_v2(&[("v", &[50], &[2])], &[]);
    let counting = Arc::new(Counting::new(map, 8));
    let ds = meta::read_dataset(counting.as_ref(), &Mode::default()).unwrap();
    let engine = ChunkEngine::new(counting.clone(), 64 << 20);
    let before = counting.calls().len();
    assert_eq!(
        read_all(&engine, &ds, "v").unwrap(),
        (0..50).collect::<Vec<i32>>()
    );
    let got = batches(&counting.calls()[before..]);
    let want: Vec<String> = (0..25).map(|i| format!("v/{i}")).collect();
    assert_eq!(got, vec![want]);
    // A second read is served by the cache: no storage request at all.
    let before = counting.calls().len();
    assert_eq!(read_all(&engine, &ds, "v").unwrap().len(), 50);
    let again = batches(&counting.calls()[before..]);
    assert!(again.iter().all(Vec::is_empty), "{again:?}");
}

#[test]
fn a_failed_chunk_in_a_batch_fails_the_read_with_its_key() {
    let map = zarr_v2(&[("v", &[20], &[2])], &[]);
    let mut counting = Counting::new(map, 8);
    counting.failing = vec!["v/7".into()];
    let counting = Arc::new(counting);
    let ds = meta::read_dataset(counting.as_ref(), &Mode::default()).unwrap();
    let engine = ChunkEngine::new(counting.clone(), 64 << 20);
    match read_all(&engine, &ds, "v") {
        Err(Error::Storage { key, reason }) => {
            assert_eq!(key, "v/7");
            assert!(reason.contains("503"), "{reason}");
        }
        other => panic!("expected a storage error, got {other:?}"),
    }
}

#[test]
fn local_maps_are_not_batched() {
    let map = zarr_v2(&[("v", &[20], &[2])], &[]);
    let counting = Arc::new(Counting::new(map, 1));
    let ds = meta::read_dataset(counting.as_ref(), &Mode::default()).unwrap();
    let engine = ChunkEngine::new(counting.clone(), 64 << 20);
    let before = counting.calls().len();
    assert_eq!(
        read_all(&engine, &ds, "v").unwrap(),
        (0..20).collect::<Vec<i32>>()
    );
    let calls = &counting.calls()[before..];
    assert_eq!(calls.len(), 10, "{calls:?}");
    assert!(calls.iter().all(|c| matches!(c, Call::Get(_))), "{calls:?}");
}
