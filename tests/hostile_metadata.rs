//! Hostile metadata, as a property: a dataset whose metadata objects were damaged (a JSON
//! token replaced by a number that overflows, a value of the wrong type, an empty list, a text
//! cut short, a byte flipped) either opens or is refused with an error, and whatever opens can
//! be dumped and read without a panic. A panic here is what would stop a mount's request
//! thread or a CLI run with a backtrace instead of a message.
//!
//! The pristine stores are netcdf-c's fixtures and datasets that `nczarrfs gen` writes from
//! its CDL fixtures in each dialect (NCZarr, pure Zarr with and without `_ARRAY_DIMENSIONS`,
//! consolidated, Zarr v3), loaded into memory once; each case damages one metadata object of
//! one store.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, OnceLock};

use proptest::prelude::*;

use nczarrfs::cdl::writer::{dump, DumpOptions};
use nczarrfs::chunk::{ChunkEngine, Hyperslab};
use nczarrfs::location::Mode;
use nczarrfs::meta::read_dataset;
use nczarrfs::model::VarId;
use nczarrfs::zmap::{MemoryMap, ZMap, ZipMap};

fn fixture(rel: &str) -> PathBuf {
    std::env::var("NCZARRFS_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared")))
        .join("fixtures")
        .join(rel)
}

/// One pristine store: its objects by key.
type Store = BTreeMap<String, Vec<u8>>;

fn load_map(map: &dyn ZMap) -> Store {
    map.keys_under("")
        .expect("list the store")
        .into_iter()
        .map(|k| {
            let v = map.get(&k).expect("read").expect("listed object exists");
            (k, v)
        })
        .collect()
}

fn generated(cdl: &str, mode: &str, dir: &Path) -> Store {
    let out = dir.join(format!(
        "{}-{}.file",
        Path::new(cdl).file_stem().unwrap().to_string_lossy(),
        mode.replace(',', "-")
    ));
    let status = Command::new(env!("CARGO_BIN_EXE_nczarrfs"))
        .args(["gen", "-k", mode, "-o"])
        .arg(&out)
        .arg(fixture(cdl))
        .status()
        .expect("run nczarrfs gen");
    assert!(status.success(), "gen {cdl} -k {mode}");
    load_map(&MemoryMap::from_dir(&out).expect("load the generated store"))
}

/// Every pristine store, made once for all cases.
fn stores() -> &'static [Store] {
    static STORES: OnceLock<Vec<Store>> = OnceLock::new();
    STORES.get_or_init(|| {
        let dir = tempfile::tempdir().expect("temporary directory");
        let mut stores = Vec::new();
        for (cdl, modes) in [
            (
                "ncdump_refs/cdl/ref_tst_group_data.cdl",
                &[
                    "nczarr",
                    "zarr",
                    "zarr,noxarray",
                    "nczarr,consolidated",
                    "nczarr,v3",
                ][..],
            ),
            (
                "nczarr_test/ref_string.cdl",
                &["nczarr", "zarr", "nczarr,v3"][..],
            ),
            ("nczarr_test/ref_whole.cdl", &["nczarr", "zarr,v3"][..]),
            ("nczarr_test/ref_scalar.cdl", &["nczarr", "zarr"][..]),
            ("nczarr_test/ref_bzip2.cdl", &["nczarr"][..]),
            ("ncdump_refs/cdl/ref_dimscope.cdl", &["nczarr"][..]),
            (
                "ncdump_refs/ref_tst_mud4.cdl",
                &["nczarr", "zarr", "nczarr,v3"][..],
            ),
        ] {
            for mode in modes {
                stores.push(generated(cdl, mode, dir.path()));
            }
        }
        stores.push(load_map(
            &MemoryMap::from_dir(&fixture("nczarr_test/ref_data.zarr")).expect("ref_data.zarr"),
        ));
        for zip in [
            "nczarr_test/ref_oldkeys.file.zip",
            "nczarr_test/ref_oldformat.zip",
            "nczarr_test/ref_power_901_constants_orig.zip",
            "history/ref_oldformat_v1_nczarr1.0.0.zip",
        ] {
            stores.push(load_map(&ZipMap::open(&fixture(zip), false).expect(zip)));
        }
        stores
    })
}

/// Whether `key` names a metadata object (the JSON that the reader parses).
fn is_metadata(key: &str) -> bool {
    let leaf = key.rsplit('/').next().unwrap_or(key);
    leaf.starts_with(".z") || leaf.starts_with(".ncz") || leaf == "zarr.json" || leaf == ".nczarr"
}

/// Values that break assumptions: overflowing and negative sizes, non-finite numbers, other
/// types, empty containers, unknown codecs and dtypes, names that are paths.
const HOSTILE: &[&str] = &[
    "-1",
    "0",
    "1e400",
    "-1e400",
    "18446744073709551616",
    "18446744073709551615",
    "9223372036854775807",
    "4294967296",
    "2.5",
    "NaN",
    "-0",
    "null",
    "true",
    "[]",
    "{}",
    "[[]]",
    "[null]",
    "\"\"",
    "\"x\"",
    "\"<f8\"",
    "\">S1\"",
    "\"|S0\"",
    "\"|O\"",
    "\"<M8[ns]\"",
    "\"/\"",
    "\"..\"",
    "\"/nonexistent/dim\"",
    "[18446744073709551615]",
    "[0]",
    "[-1]",
    "[4294967296, 4294967296, 4294967296]",
    "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33]",
    "{\"id\": \"zlib\"}",
    "{\"id\": \"zlib\", \"level\": 99}",
    "{\"id\": \"no-such-codec\"}",
    "{\"id\": \"blosc\", \"cname\": \"nope\", \"clevel\": -3, \"shuffle\": 7, \"blocksize\": -1}",
    "[{\"id\": \"shuffle\", \"elementsize\": 0}]",
    "{\"name\": \"bytes\", \"configuration\": {\"endian\": \"middle\"}}",
    "\"\\u0000\"",
    "\"\\ud800\"",
    "\"caf\\u00e9\"",
];

/// The byte ranges of every JSON value in `text`, containers included, in document order
/// (as far as `text` is well-formed JSON).
fn values(text: &[u8]) -> Vec<(usize, usize)> {
    fn skip_blanks(text: &[u8], mut i: usize) -> usize {
        while i < text.len() && text[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    }
    /// Records the value at `i` and those inside it; returns where it ends.
    fn value(text: &[u8], i: usize, spans: &mut Vec<(usize, usize)>) -> Option<usize> {
        let start = skip_blanks(text, i);
        let slot = spans.len();
        spans.push((start, start));
        let mut i = start;
        match *text.get(i)? {
            b'"' => {
                i += 1;
                while *text.get(i)? != b'"' {
                    i += if text[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
            }
            open @ (b'{' | b'[') => {
                let close = if open == b'{' { b'}' } else { b']' };
                i = skip_blanks(text, i + 1);
                if *text.get(i)? != close {
                    loop {
                        if open == b'{' {
                            // The key is no value: drop what `value` records for it.
                            let key_slot = spans.len();
                            i = skip_blanks(text, value(text, i, spans)?);
                            spans.truncate(key_slot);
                            if *text.get(i)? != b':' {
                                return None;
                            }
                            i += 1;
                        }
                        i = skip_blanks(text, value(text, i, spans)?);
                        match *text.get(i)? {
                            b',' => i += 1,
                            c if c == close => break,
                            _ => return None,
                        }
                    }
                }
                i += 1;
            }
            _ => {
                while i < text.len() && !b",:]} \t\r\n".contains(&text[i]) {
                    i += 1;
                }
            }
        }
        spans[slot].1 = i;
        Some(i)
    }
    let mut spans = Vec::new();
    value(text, 0, &mut spans);
    spans.retain(|(a, b)| a < b);
    spans
}

/// One way of damaging an object.
#[derive(Debug, Clone)]
enum Damage {
    /// The value at this index (modulo their number) replaced by `HOSTILE[which]`: still
    /// JSON, but not the metadata the reader expects.
    Replace { value: usize, which: usize },
    /// The value at this index removed (no longer JSON, unless it was the last).
    Remove { value: usize },
    /// The value at this index written twice.
    Repeat { value: usize },
    /// The text cut at this fraction (in thousandths) of its length.
    Truncate { at: u16 },
    /// The byte at this index (modulo the length) replaced.
    Flip { at: usize, byte: u8 },
}

fn damage() -> impl Strategy<Value = Damage> {
    prop_oneof![
        12 => (any::<usize>(), 0..HOSTILE.len())
            .prop_map(|(value, which)| Damage::Replace { value, which }),
        1 => any::<usize>().prop_map(|value| Damage::Remove { value }),
        1 => any::<usize>().prop_map(|value| Damage::Repeat { value }),
        1 => (0u16..1000).prop_map(|at| Damage::Truncate { at }),
        1 => (any::<usize>(), any::<u8>()).prop_map(|(at, byte)| Damage::Flip { at, byte }),
    ]
}

fn apply(damage: &Damage, text: &[u8]) -> Vec<u8> {
    let spans = values(text);
    let splice = |(a, b): (usize, usize), with: &[u8]| {
        let mut out = text[..a].to_vec();
        out.extend_from_slice(with);
        out.extend_from_slice(&text[b..]);
        out
    };
    let pick = |i: usize| spans[i % spans.len()];
    match *damage {
        _ if text.is_empty() => b"{".to_vec(),
        Damage::Truncate { at } => text[..text.len() * at as usize / 1000].to_vec(),
        Damage::Flip { at, byte } => {
            let mut out = text.to_vec();
            out[at % text.len()] = byte;
            out
        }
        _ if spans.is_empty() => Vec::new(),
        Damage::Replace { value, which } => splice(pick(value), HOSTILE[which].as_bytes()),
        Damage::Remove { value } => splice(pick(value), b""),
        Damage::Repeat { value } => {
            let (a, b) = pick(value);
            splice((a, b), &[&text[a..b], b" ", &text[a..b]].concat())
        }
    }
}

/// Opens the damaged store and uses whatever opens: the header, then the first and last
/// element of every variable, and every element of the small ones. Errors are expected;
/// panics are the failure.
fn exercise(store: Store) {
    let map = MemoryMap::new();
    for (k, v) in store {
        map.insert(&k, v).expect("insert");
    }
    let map: Arc<dyn ZMap> = Arc::new(map.into_read_only());
    let Ok(ds) = read_dataset(map.as_ref(), &Mode::default()) else {
        return;
    };
    let engine = ChunkEngine::new(Arc::clone(&map), 1 << 20);
    let header = DumpOptions {
        header_only: true,
        ..Default::default()
    };
    let _ = dump(
        &ds,
        &engine,
        "damaged",
        &header,
        &mut std::io::sink(),
        Path::new("sink"),
    );
    let special = DumpOptions {
        header_only: true,
        special: true,
        all_filters: ds.vars.len() % 2 == 1,
        ..Default::default()
    };
    let _ = dump(
        &ds,
        &engine,
        "damaged",
        &special,
        &mut std::io::sink(),
        Path::new("sink"),
    );
    for v in 0..ds.vars.len() {
        let var = VarId(v);
        let shape = ds.var_shape(var);
        let esize = ds.var(var).element_size();
        if shape.contains(&0) {
            continue;
        }
        let one = |start: Vec<u64>| Hyperslab {
            count: vec![1; start.len()],
            stride: vec![1; start.len()],
            start,
        };
        let mut buf = vec![0u8; esize];
        let _ = engine.read(&ds, var, &one(vec![0; shape.len()]), &mut buf);
        let _ = engine.read(
            &ds,
            var,
            &one(shape.iter().map(|n| n - 1).collect()),
            &mut buf,
        );
        let elements = shape.iter().try_fold(1u64, |acc, &n| acc.checked_mul(n));
        if let Some(n @ 0..=4096) = elements {
            let mut all = vec![0u8; n as usize * esize];
            let _ = engine.read(&ds, var, &Hyperslab::whole(&shape), &mut all);
        }
    }
    // The data section too, unless a damaged shape made it endless.
    let small = (0..ds.vars.len()).all(|v| {
        let shape = ds.var_shape(VarId(v));
        shape.iter().try_fold(1u64, |acc, &n| acc.checked_mul(n)) <= Some(4096)
    });
    if small {
        let _ = dump(
            &ds,
            &engine,
            "damaged",
            &DumpOptions::default(),
            &mut std::io::sink(),
            Path::new("sink"),
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(1500),
        ..ProptestConfig::default()
    })]

    #[test]
    fn damaged_metadata_opens_or_is_refused(
        store in any::<prop::sample::Index>(),
        object in any::<prop::sample::Index>(),
        damage in damage(),
    ) {
        let stores = stores();
        let mut store = stores[store.index(stores.len())].clone();
        let keys: Vec<String> = store.keys().filter(|k| is_metadata(k)).cloned().collect();
        prop_assume!(!keys.is_empty());
        let key = &keys[object.index(keys.len())];
        let damaged = apply(&damage, &store[key]);
        store.insert(key.clone(), damaged);
        exercise(store);
    }
}

#[test]
fn every_store_opens_undamaged() {
    // Otherwise the property above would test only the refusal of broken stores.
    for store in stores() {
        let map = MemoryMap::new();
        for (k, v) in store {
            map.insert(k, v.clone()).unwrap();
        }
        let ds = read_dataset(&map, &Mode::default());
        assert!(
            ds.is_ok(),
            "{:?}: {}",
            store.keys().next(),
            ds.err().unwrap()
        );
        assert!(!ds.unwrap().vars.is_empty());
    }
}
