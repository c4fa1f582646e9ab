//! The chunk engine against an NCZarr store written by netcdf-c (tests/data/chunk/gen.py):
//! whole-variable reads must equal netCDF4-python's reads of the same store, and hyperslabs
//! must equal the same elements picked out of those reads one by one.

use std::path::PathBuf;

use nczarrfs::chunk::{parse_size, Hyperslab};
use nczarrfs::dataset::OpenDataset;
use nczarrfs::model::VarId;

fn data_dir() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/chunk"))
}

fn open(cache: usize) -> OpenDataset {
    let store = data_dir().join("nczarr.file");
    let loc = format!("file://{}#mode=nczarr,file", store.display());
    OpenDataset::open(&loc, cache).expect("open fixture")
}

fn expected(name: &str) -> Vec<u8> {
    std::fs::read(data_dir().join("expected").join(format!("{name}.bin"))).expect("expected")
}

fn var(ds: &OpenDataset, name: &str) -> VarId {
    ds.model.find_var(name).expect(name)
}

fn read(ds: &OpenDataset, v: VarId, slab: &Hyperslab) -> Vec<u8> {
    let esize = ds.model.var(v).element_size();
    let mut out = vec![0u8; slab.count.iter().product::<u64>() as usize * esize];
    ds.engine.read(&ds.model, v, slab, &mut out).expect("read");
    out
}

/// The slab's elements picked one at a time from a whole C-order array of `shape`.
fn pick(whole: &[u8], shape: &[u64], slab: &Hyperslab, esize: usize) -> Vec<u8> {
    let n: u64 = slab.count.iter().product();
    let mut out = Vec::new();
    for i in 0..n {
        let mut rem = i;
        let mut lin = 0u64;
        let mut scale = 1u64;
        for d in (0..shape.len()).rev() {
            let k = rem % slab.count[d];
            rem /= slab.count[d];
            lin += (slab.start[d] + k * slab.stride[d]) * scale;
            scale *= shape[d];
        }
        let off = lin as usize * esize;
        out.extend_from_slice(&whole[off..off + esize]);
    }
    out
}

fn slab(start: &[u64], count: &[u64], stride: &[u64]) -> Hyperslab {
    Hyperslab {
        start: start.to_vec(),
        count: count.to_vec(),
        stride: stride.to_vec(),
    }
}

#[test]
fn whole_variables_match_netcdf4_python() {
    for cache in [0, 1 << 20] {
        let ds = open(cache);
        // t: zlib + shuffle (elementsize 0 as netcdf-c writes it), chunks 2×3×4 over 5×7×9.
        // b: big-endian shorts; g: fill past the written records; f: missing chunks; c: char;
        // d: a scalar.
        for name in ["t", "b", "g", "f", "c", "d"] {
            let v = var(&ds, name);
            let shape = ds.model.var_shape(v);
            assert_eq!(
                read(&ds, v, &Hyperslab::whole(&shape)),
                expected(name),
                "{name}"
            );
        }
    }
}

#[test]
fn strings_match_netcdf4_python() {
    let ds = open(1 << 20);
    let v = var(&ds, "s");
    let width = ds.model.var(v).element_size();
    let got = read(&ds, v, &Hyperslab::whole(&[4]));
    let want = expected("s");
    let trim = |b: &[u8]| {
        let end = b.iter().rposition(|&c| c != 0).map_or(0, |i| i + 1);
        String::from_utf8(b[..end].to_vec()).unwrap()
    };
    let got: Vec<String> = got.chunks(width).map(trim).collect();
    let want: Vec<String> = want.chunks(8).map(trim).collect();
    assert_eq!(got, want);
    assert_eq!(got, ["alpha", "", "héé", "z"]);
}

#[test]
fn hyperslabs_match_element_by_element_picks() {
    let ds = open(64 << 10);
    let cases: &[(&str, Hyperslab)] = &[
        ("t", slab(&[1, 2, 3], &[3, 4, 5], &[1, 1, 1])),
        ("t", slab(&[0, 0, 0], &[3, 3, 3], &[2, 3, 4])),
        ("t", slab(&[4, 6, 8], &[1, 1, 1], &[1, 1, 1])),
        ("t", slab(&[0, 1, 0], &[5, 2, 9], &[1, 5, 1])),
        ("b", slab(&[1, 1], &[3, 4], &[2, 2])),
        ("b", slab(&[0, 3], &[7, 1], &[1, 1])),
        ("f", slab(&[2, 2], &[5, 7], &[1, 1])),
        ("g", slab(&[1, 0], &[3, 9], &[1, 1])),
        ("c", slab(&[1, 1], &[2, 3], &[2, 1])),
    ];
    for (name, s) in cases {
        let v = var(&ds, name);
        let shape = ds.model.var_shape(v);
        let esize = ds.model.var(v).element_size();
        let want = pick(&expected(name), &shape, s, esize);
        assert_eq!(read(&ds, v, s), want, "{name} {s:?}");
    }
}

#[test]
fn concurrent_readers_share_a_small_cache() {
    let ds = open(parse_size("2K").unwrap());
    let v = var(&ds, "t");
    let want = expected("t");
    std::thread::scope(|scope| {
        for i in 0..4u64 {
            let ds = &ds;
            let want = &want;
            scope.spawn(move || {
                for j in 0..10u64 {
                    let s = slab(&[(i + j) % 5, 0, j % 9], &[1, 7, 1], &[1, 1, 1]);
                    assert_eq!(read(ds, v, &s), pick(want, &[5, 7, 9], &s, 4));
                }
            });
        }
    });
    let stats = ds.engine.stats();
    assert!(stats.bytes <= 2048, "{stats:?}");
    assert!(stats.hits > 0, "{stats:?}");
}
