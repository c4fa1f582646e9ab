//! Engine tests over an in-memory map, with chunks written by hand from first principles (the
//! Zarr v2 layout: full-size chunks, C or F element order, keys `i.j.k`).

use std::collections::BTreeMap;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::model::{ChunkOrder, Variable, ZarrDtype};

/// A size after a `-` is out of range (exit status 1), not of the wrong form (2).
#[test]
fn negative_sizes_are_out_of_range() {
    assert_eq!(parse_size("+64K").unwrap(), 64 << 10);
    assert_eq!(parse_size("-0").unwrap(), 0);
    for negative in ["-1", "-64K", "-2MiB", "-99999999999999999999G"] {
        match parse_size(negative) {
            Err(Error::Invalid(m)) => assert!(m.contains("is negative"), "{negative}: {m}"),
            other => panic!("{negative}: {other:?}"),
        }
    }
    for wrong in ["-", "--1", "+-1", "-x", "-1X"] {
        assert!(matches!(parse_size(wrong), Err(Error::Usage(_))), "{wrong}");
    }
}

#[derive(Debug, Default)]
struct TestMap {
    objects: Mutex<BTreeMap<String, Vec<u8>>>,
    gets: AtomicUsize,
    /// Puts fail with ENOSPC, as on a full disk.
    full: AtomicBool,
    /// Puts asked for, stored or not.
    puts: AtomicUsize,
    /// What [`ZMap::write_back_backoff`] says (a remote server's pacing).
    backoff: Option<Duration>,
}

impl TestMap {
    fn insert(&self, key: &str, value: Vec<u8>) {
        self.objects.lock().unwrap().insert(key.to_string(), value);
    }
    fn object(&self, key: &str) -> Option<Vec<u8>> {
        self.objects.lock().unwrap().get(key).cloned()
    }
}

impl ZMap for TestMap {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.gets.fetch_add(1, Ordering::Relaxed);
        Ok(self.object(key))
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.puts.fetch_add(1, Ordering::Relaxed);
        if self.full.load(Ordering::Relaxed) {
            return Err(Error::io(
                key,
                std::io::Error::from_raw_os_error(libc::ENOSPC),
            ));
        }
        self.insert(key, value.to_vec());
        Ok(())
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.objects.lock().unwrap().remove(key);
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
    fn write_back_backoff(&self) -> Option<Duration> {
        self.backoff
    }
}

/// Adds variable `name` with dimensions `dims` (name, length) to `ds`.
fn add_var(
    ds: &mut Dataset,
    name: &str,
    nctype: NcType,
    dims: &[(&str, u64)],
    storage: VarStorage,
) -> VarId {
    let dims = dims
        .iter()
        .map(|(d, len)| match ds.find_dim_in(Dataset::ROOT, d) {
            Some(id) => id,
            None => ds.add_dim(Dataset::ROOT, d, *len, false),
        })
        .collect();
    ds.add_var(Variable {
        name: name.into(),
        group: Dataset::ROOT,
        nctype,
        dims,
        string_width: 0,
        attrs: Vec::new(),
        storage,
    })
}

fn storage(key: &str, dtype: &str, shape: &[u64], chunks: &[u64]) -> VarStorage {
    VarStorage {
        key: key.into(),
        dtype: ZarrDtype::parse(dtype),
        shape: shape.to_vec(),
        chunks: chunks.to_vec(),
        ..VarStorage::default()
    }
}

/// Writes every chunk of an array by hand: element bytes from `elem(global index)`, padding
/// past the shape as 0xEE bytes, in `order`; chunks for which `skip` holds are not written.
#[allow(clippy::too_many_arguments)]
fn put_chunks(
    map: &TestMap,
    key: &str,
    shape: &[u64],
    chunks: &[u64],
    order: ChunkOrder,
    esize: usize,
    elem: &dyn Fn(&[u64]) -> Vec<u8>,
    skip: &dyn Fn(&[u64]) -> bool,
) {
    let grid: Vec<u64> = shape
        .iter()
        .zip(chunks)
        .map(|(s, c)| s.div_ceil(*c))
        .collect();
    let nchunks: u64 = grid.iter().product();
    let per_chunk: u64 = chunks.iter().product();
    for ci in 0..nchunks {
        let coords = unravel(ci, &grid, ChunkOrder::C);
        if skip(&coords) {
            continue;
        }
        let mut bytes = Vec::new();
        for e in 0..per_chunk {
            let local = unravel(e, chunks, order);
            let global: Vec<u64> = (0..shape.len())
                .map(|d| coords[d] * chunks[d] + local[d])
                .collect();
            if global.iter().zip(shape).all(|(g, s)| g < s) {
                let b = elem(&global);
                assert_eq!(b.len(), esize);
                bytes.extend(b);
            } else {
                bytes.extend(vec![0xEE; esize]);
            }
        }
        let name: Vec<String> = coords.iter().map(|c| c.to_string()).collect();
        let name = if name.is_empty() {
            "0".to_string()
        } else {
            name.join(".")
        };
        map.insert(&format!("{key}/{name}"), bytes);
    }
}

/// The multi-index of linear position `i` in `shape` (C: last index fastest; F: first).
fn unravel(mut i: u64, shape: &[u64], order: ChunkOrder) -> Vec<u64> {
    let mut idx = vec![0; shape.len()];
    let dims: Vec<usize> = match order {
        ChunkOrder::C => (0..shape.len()).rev().collect(),
        ChunkOrder::F => (0..shape.len()).collect(),
    };
    for d in dims {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

/// Every multi-index of a slab, C order, as array coordinates.
fn slab_points(slab: &Hyperslab) -> Vec<Vec<u64>> {
    let n = slab.len();
    (0..n)
        .map(|i| {
            let k = unravel(i, &slab.count, ChunkOrder::C);
            (0..k.len())
                .map(|d| slab.start[d] + k[d] * slab.stride[d])
                .collect()
        })
        .collect()
}

fn i32s(bytes: &[u8]) -> Vec<i32> {
    bytes
        .chunks_exact(4)
        .map(|c| i32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn engine(map: &Arc<TestMap>, cache: usize) -> ChunkEngine {
    ChunkEngine::new(Arc::clone(map) as Arc<dyn ZMap>, cache)
}

fn read_i32(e: &ChunkEngine, ds: &Dataset, v: VarId, slab: &Hyperslab) -> Result<Vec<i32>> {
    let mut out = vec![0u8; slab.len() as usize * 4];
    e.read(ds, v, slab, &mut out)?;
    Ok(i32s(&out))
}

fn value(g: &[u64]) -> i32 {
    g.iter().fold(0i64, |a, &x| a * 100 + x as i64) as i32
}

/// A 2-d int variable of shape 5×7 in chunks 2×3: `value(i,j) = 100 i + j`.
fn grid_fixture(dtype: &str, order: ChunkOrder) -> (Arc<TestMap>, Dataset, VarId) {
    let map = Arc::new(TestMap::default());
    let mut ds = Dataset::new();
    let mut st = storage("v", dtype, &[5, 7], &[2, 3]);
    st.order = order;
    // netCDF's default for int, as netcdf-c writes it.
    st.fill_value = Some((-2147483647i32).to_le_bytes().to_vec());
    let v = add_var(&mut ds, "v", NcType::Int, &[("y", 5), ("x", 7)], st);
    let big = dtype.starts_with('>');
    put_chunks(
        &map,
        "v",
        &[5, 7],
        &[2, 3],
        order,
        4,
        &|g| {
            let x = value(g);
            if big {
                x.to_be_bytes().to_vec()
            } else {
                x.to_le_bytes().to_vec()
            }
        },
        &|_| false,
    );
    (map, ds, v)
}

fn slab(start: &[u64], count: &[u64], stride: &[u64]) -> Hyperslab {
    Hyperslab {
        start: start.to_vec(),
        count: count.to_vec(),
        stride: stride.to_vec(),
    }
}

fn expected(s: &Hyperslab) -> Vec<i32> {
    slab_points(s).iter().map(|g| value(g)).collect()
}

#[test]
fn whole_and_partial_reads_across_chunk_boundaries() {
    for (dtype, order) in [
        ("<i4", ChunkOrder::C),
        (">i4", ChunkOrder::C),
        ("<i4", ChunkOrder::F),
        (">i4", ChunkOrder::F),
    ] {
        let (map, ds, v) = grid_fixture(dtype, order);
        let e = engine(&map, 1 << 20);
        let whole = Hyperslab::whole(&[5, 7]);
        let got = read_i32(&e, &ds, v, &whole).unwrap();
        assert_eq!(got[..8], [0, 1, 2, 3, 4, 5, 6, 100]);
        assert_eq!(got, expected(&whole), "{dtype} {order:?}");
        for s in [
            slab(&[1, 2], &[3, 4], &[1, 1]),
            slab(&[0, 0], &[3, 3], &[2, 3]),
            slab(&[4, 6], &[1, 1], &[1, 1]),
            slab(&[1, 1], &[2, 2], &[3, 5]),
            slab(&[0, 5], &[5, 2], &[1, 1]),
        ] {
            assert_eq!(read_i32(&e, &ds, v, &s).unwrap(), expected(&s), "{s:?}");
        }
    }
}

#[test]
fn invalid_slabs_and_buffers_are_refused() {
    let (map, ds, v) = grid_fixture("<i4", ChunkOrder::C);
    let e = engine(&map, 0);
    assert!(matches!(
        read_i32(&e, &ds, v, &slab(&[4, 0], &[2, 1], &[1, 1])),
        Err(Error::InvalidHyperslab(_))
    ));
    assert!(matches!(
        read_i32(&e, &ds, v, &slab(&[0], &[1], &[1])),
        Err(Error::InvalidHyperslab(_))
    ));
    let mut short = vec![0u8; 7];
    assert!(e
        .read(&ds, v, &slab(&[0, 0], &[1, 2], &[1, 1]), &mut short)
        .is_err());
    // count 0 reads nothing and touches no storage.
    let before = map.gets.load(Ordering::Relaxed);
    assert_eq!(
        read_i32(&e, &ds, v, &slab(&[5, 0], &[0, 3], &[1, 1])).unwrap(),
        Vec::<i32>::new()
    );
    assert_eq!(map.gets.load(Ordering::Relaxed), before);
}

#[test]
fn only_needed_chunks_are_fetched() {
    let (map, ds, v) = grid_fixture("<i4", ChunkOrder::C);
    let e = engine(&map, 0);
    // Rows 0-1, columns 3-5: exactly chunk 0.1.
    read_i32(&e, &ds, v, &slab(&[0, 3], &[2, 3], &[1, 1])).unwrap();
    assert_eq!(map.gets.load(Ordering::Relaxed), 1);
    // Columns 0 and 6 with stride 6 skip the middle chunk column: 3 rows × 2 chunks.
    read_i32(&e, &ds, v, &slab(&[0, 0], &[5, 2], &[1, 6])).unwrap();
    assert_eq!(map.gets.load(Ordering::Relaxed), 1 + 6);
}

#[test]
fn missing_chunks_read_as_fill() {
    let map = Arc::new(TestMap::default());
    let mut ds = Dataset::new();
    let mut st = storage("a", "<i4", &[4, 4], &[2, 2]);
    st.fill_value = Some(42i32.to_le_bytes().to_vec());
    let a = add_var(&mut ds, "a", NcType::Int, &[("y", 4), ("x", 4)], st);
    let b = add_var(
        &mut ds,
        "b",
        NcType::Int,
        &[("y", 4), ("x", 4)],
        storage("b", "<i4", &[4, 4], &[2, 2]),
    );
    for key in ["a", "b"] {
        put_chunks(
            &map,
            key,
            &[4, 4],
            &[2, 2],
            ChunkOrder::C,
            4,
            &|g| value(g).to_le_bytes().to_vec(),
            &|c| c == [1, 0],
        );
    }
    let e = engine(&map, 1 << 20);
    let whole = Hyperslab::whole(&[4, 4]);
    let got = read_i32(&e, &ds, a, &whole).unwrap();
    assert_eq!(got[8..12], [42, 42, 202, 203]);
    assert_eq!(got[..4], [0, 1, 2, 3]);
    // No fill value (`fill_value: null`): zeros, as netcdf-c and zarr-python read them.
    let got = read_i32(&e, &ds, b, &whole).unwrap();
    assert_eq!(got[12..16], [0, 0, 302, 303]);
}

#[test]
fn indices_beyond_the_stored_shape_read_as_fill() {
    // An unlimited dimension grown to 5 by another variable; this one is stored with 3 rows.
    let map = Arc::new(TestMap::default());
    let mut ds = Dataset::new();
    let t = ds.add_dim(Dataset::ROOT, "t", 5, true);
    let mut st = storage("v", "<i4", &[3, 2], &[2, 2]);
    st.fill_value = Some((-1i32).to_le_bytes().to_vec());
    let v = add_var(&mut ds, "v", NcType::Int, &[("x", 2)], st);
    ds.vars[v.0].dims.insert(0, t);
    put_chunks(
        &map,
        "v",
        &[3, 2],
        &[2, 2],
        ChunkOrder::C,
        4,
        &|g| value(g).to_le_bytes().to_vec(),
        &|_| false,
    );
    let e = engine(&map, 1 << 20);
    assert_eq!(
        read_i32(&e, &ds, v, &Hyperslab::whole(&[5, 2])).unwrap(),
        vec![0, 1, 100, 101, 200, 201, -1, -1, -1, -1]
    );
    // Row 2's chunk has padding (0xEE) for row 3: it must not leak.
    assert_eq!(
        read_i32(&e, &ds, v, &slab(&[2, 0], &[2, 2], &[1, 1])).unwrap(),
        vec![200, 201, -1, -1]
    );
    assert_eq!(
        read_i32(&e, &ds, v, &slab(&[3, 1], &[2, 1], &[1, 1])).unwrap(),
        vec![-1, -1]
    );
}

#[test]
fn wrong_chunk_size_is_a_bad_chunk() {
    let (map, ds, v) = grid_fixture("<i4", ChunkOrder::C);
    // A short last chunk (allowed by some writers, not by Zarr v2).
    map.insert("v/2.2", vec![0; 4 * 3]);
    let e = engine(&map, 1 << 20);
    match read_i32(&e, &ds, v, &Hyperslab::whole(&[5, 7])) {
        Err(Error::BadChunk { key, reason }) => {
            assert_eq!(key, "v/2.2");
            assert!(reason.contains("expected 24"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // Chunks that are not involved still read.
    assert_eq!(
        read_i32(&e, &ds, v, &slab(&[0, 0], &[2, 2], &[1, 1])).unwrap(),
        vec![0, 1, 100, 101]
    );
}

#[test]
fn unknown_codec_fails_only_that_variable() {
    let (map, mut ds, good) = grid_fixture("<i4", ChunkOrder::C);
    let mut st = storage("w", "<i4", &[5, 7], &[2, 3]);
    st.codecs = CodecSpec::V2 {
        filters: Vec::new(),
        compressor: Some(serde_json::json!({"id": "no-such-codec", "level": 1})),
    };
    let bad = add_var(&mut ds, "w", NcType::Int, &[("y", 5), ("x", 7)], st);
    let e = engine(&map, 1 << 20);
    match read_i32(&e, &ds, bad, &Hyperslab::whole(&[5, 7])) {
        Err(Error::Unreadable { var, reason }) => {
            assert_eq!(var, "/w");
            assert!(reason.contains("no-such-codec"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    let s = Hyperslab::whole(&[5, 7]);
    assert_eq!(read_i32(&e, &ds, good, &s).unwrap(), expected(&s));
}

#[test]
fn unreadable_storage_is_reported() {
    let map = Arc::new(TestMap::default());
    let mut ds = Dataset::new();
    let mut st = storage("v", "<i4", &[2], &[2]);
    st.unreadable = Some("dtype <c8 is not supported".into());
    let v = add_var(&mut ds, "v", NcType::Int, &[("x", 2)], st);
    let e = engine(&map, 0);
    match read_i32(&e, &ds, v, &Hyperslab::whole(&[2])) {
        Err(Error::Unreadable { var, reason }) => {
            assert_eq!(
                (var.as_str(), reason.as_str()),
                ("/v", "dtype <c8 is not supported")
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn scalars_in_both_layouts() {
    let map = Arc::new(TestMap::default());
    let mut ds = Dataset::new();
    // NCZarr: shape [1], key v/0; pure Zarr: shape [], key s/0.
    let v = add_var(
        &mut ds,
        "v",
        NcType::Double,
        &[],
        storage("v", ">f8", &[1], &[1]),
    );
    let s = add_var(
        &mut ds,
        "s",
        NcType::Double,
        &[],
        storage("s", "<f8", &[], &[]),
    );
    let m = add_var(
        &mut ds,
        "m",
        NcType::Double,
        &[],
        storage("m", "<f8", &[], &[]),
    );
    map.insert("v/0", 2.5f64.to_be_bytes().to_vec());
    map.insert("s/0", (-1.25f64).to_le_bytes().to_vec());
    let e = engine(&map, 1 << 20);
    let mut out = [0u8; 8];
    e.read(&ds, v, &Hyperslab::whole(&[]), &mut out).unwrap();
    assert_eq!(f64::from_le_bytes(out), 2.5);
    e.read(&ds, s, &Hyperslab::whole(&[]), &mut out).unwrap();
    assert_eq!(f64::from_le_bytes(out), -1.25);
    out = [1; 8];
    e.read(&ds, m, &Hyperslab::whole(&[]), &mut out).unwrap();
    assert_eq!(f64::from_le_bytes(out), 0.0);
}

#[test]
fn chunk_key_spellings() {
    let mut ds = Dataset::new();
    let mut st = storage("g/v", "<i4", &[4, 4, 4], &[2, 2, 2]);
    let v = add_var(
        &mut ds,
        "v",
        NcType::Int,
        &[("a", 4), ("b", 4), ("c", 4)],
        st.clone(),
    );
    let key = |ds: &Dataset| VarPlan::build(ds, v).unwrap().chunk_key(&[1, 0, 1]);
    assert_eq!(key(&ds), "g/v/1.0.1");
    for (enc, want) in [
        (ChunkKeyEncoding::V2 { separator: '/' }, "g/v/1/0/1"),
        (ChunkKeyEncoding::Default { separator: '/' }, "g/v/c/1/0/1"),
        (ChunkKeyEncoding::Default { separator: '.' }, "g/v/c.1.0.1"),
    ] {
        st.key_encoding = enc;
        ds.vars[v.0].storage = st.clone();
        assert_eq!(key(&ds), want);
    }
    let s = add_var(
        &mut ds,
        "s",
        NcType::Int,
        &[],
        storage("s", "<i4", &[], &[]),
    );
    assert_eq!(VarPlan::build(&ds, s).unwrap().chunk_key(&[]), "s/0");
    ds.vars[s.0].storage.key_encoding = ChunkKeyEncoding::Default { separator: '/' };
    assert_eq!(VarPlan::build(&ds, s).unwrap().chunk_key(&[]), "s/c");
}

#[test]
fn strings_and_chars() {
    let map = Arc::new(TestMap::default());
    let mut ds = Dataset::new();
    // np.array(["ab", "héé"], dtype="<U3").tobytes() and np.array([b"xyz", b"q"], "|S3").
    let u = add_var(
        &mut ds,
        "u",
        NcType::String,
        &[("n", 2)],
        storage("u", "<U3", &[2], &[2]),
    );
    ds.vars[u.0].string_width = 6;
    let b = add_var(
        &mut ds,
        "b",
        NcType::String,
        &[("n", 2)],
        storage("b", "|S3", &[2], &[2]),
    );
    ds.vars[b.0].string_width = 4;
    let c = add_var(
        &mut ds,
        "c",
        NcType::Char,
        &[("n", 2)],
        storage("c", ">S1", &[2], &[1]),
    );
    let mut ucs = Vec::new();
    for ch in ['a', 'b', '\0', 'h', 'é', 'é'] {
        ucs.extend((ch as u32).to_le_bytes());
    }
    map.insert("u/0", ucs);
    map.insert("b/0", b"xyzq\0\0".to_vec());
    map.insert("c/0", b"Z".to_vec());
    let e = engine(&map, 1 << 20);
    let mut out = vec![0u8; 12];
    e.read(&ds, u, &Hyperslab::whole(&[2]), &mut out).unwrap();
    assert_eq!(out, b"ab\0\0\0\0h\xc3\xa9\xc3\xa9\0");
    let mut out = vec![0u8; 8];
    e.read(&ds, b, &Hyperslab::whole(&[2]), &mut out).unwrap();
    assert_eq!(out, b"xyz\0q\0\0\0");
    // Missing string chunk: the default fill is the empty string.
    let mut out = vec![1u8; 2];
    e.read(&ds, c, &Hyperslab::whole(&[2]), &mut out).unwrap();
    assert_eq!(out, b"Z\0");
}

#[test]
fn cache_hits_and_bound() {
    let (map, ds, v) = grid_fixture("<i4", ChunkOrder::C);
    // Room for exactly two 24-byte chunks.
    let e = engine(&map, 48);
    let s = slab(&[0, 0], &[2, 6], &[1, 1]); // chunks 0.0 and 0.1
    read_i32(&e, &ds, v, &s).unwrap();
    read_i32(&e, &ds, v, &s).unwrap();
    let st = e.stats();
    assert_eq!((st.misses, st.hits, st.bytes, st.entries), (2, 2, 48, 2));
    assert_eq!(map.gets.load(Ordering::Relaxed), 2);
    let whole = Hyperslab::whole(&[5, 7]);
    assert_eq!(read_i32(&e, &ds, v, &whole).unwrap(), expected(&whole));
    // A scan larger than the cache bypasses it: the two cached chunks are still there.
    let before = e.stats();
    assert_eq!((before.bytes, before.entries), (48, 2));
    read_i32(&e, &ds, v, &s).unwrap();
    assert_eq!(e.stats().hits, before.hits + 2);
    e.clear().unwrap();
    assert_eq!(e.stats().bytes, 0);
    // Capacity 0 still reads, caching nothing.
    let e = engine(&map, 0);
    assert_eq!(read_i32(&e, &ds, v, &whole).unwrap(), expected(&whole));
    assert_eq!(e.stats().entries, 0);
}

/// Reads within a chunk larger than the whole cache (a mount's kernel reads of at most 1 MiB
/// in a chunk of hundreds) fetch and decode it once, not once each.
#[test]
fn a_chunk_larger_than_the_cache_is_kept_for_the_reads_within_it() {
    let (map, ds, v) = grid_fixture("<i4", ChunkOrder::C);
    // Chunks are 2 x 3 ints, 24 bytes: none fits.
    let e = engine(&map, 20);
    let gets = || map.gets.load(Ordering::Relaxed);
    for (y, x) in [(0, 0), (0, 1), (1, 2), (1, 0)] {
        let one = slab(&[y, x], &[1, 1], &[1, 1]);
        assert_eq!(read_i32(&e, &ds, v, &one).unwrap(), expected(&one));
    }
    assert_eq!(gets(), 1, "chunk 0.0 fetched once");
    assert_eq!(e.stats().bytes, 0, "not counted in the cache's bound");
    // Another chunk takes its place.
    let other = slab(&[0, 3], &[1, 1], &[1, 1]);
    assert_eq!(read_i32(&e, &ds, v, &other).unwrap(), expected(&other));
    let first = slab(&[0, 0], &[1, 1], &[1, 1]);
    read_i32(&e, &ds, v, &first).unwrap();
    assert_eq!(gets(), 3);
    // A write is stored at once and read back from the kept chunk.
    let data = (-5i32).to_le_bytes();
    e.write(&ds, v, &first, &data).unwrap();
    let stored = map.object("v/0.0").unwrap();
    assert_eq!(stored[..4], data);
    let before = gets();
    assert_eq!(read_i32(&e, &ds, v, &first).unwrap(), vec![-5]);
    assert_eq!(gets(), before);
    // Changed storage is seen after an invalidation.
    let mut chunk = stored;
    chunk[..4].copy_from_slice(&77i32.to_le_bytes());
    map.insert("v/0.0", chunk);
    e.invalidate("v/").unwrap();
    assert_eq!(read_i32(&e, &ds, v, &first).unwrap(), vec![77]);
    // Capacity 0 keeps nothing at all.
    let e = engine(&map, 0);
    let before = gets();
    read_i32(&e, &ds, v, &first).unwrap();
    read_i32(&e, &ds, v, &first).unwrap();
    assert_eq!(gets(), before + 2);
}

#[test]
fn invalidate_sees_changed_storage() {
    let (map, ds, v) = grid_fixture("<i4", ChunkOrder::C);
    let e = engine(&map, 1 << 20);
    let s = slab(&[0, 0], &[1, 1], &[1, 1]);
    assert_eq!(read_i32(&e, &ds, v, &s).unwrap(), vec![0]);
    let mut chunk = map.object("v/0.0").unwrap();
    chunk[..4].copy_from_slice(&77i32.to_le_bytes());
    map.insert("v/0.0", chunk);
    assert_eq!(read_i32(&e, &ds, v, &s).unwrap(), vec![0], "cached");
    e.invalidate("w").unwrap();
    assert_eq!(read_i32(&e, &ds, v, &s).unwrap(), vec![0], "other prefix");
    e.invalidate("v/").unwrap();
    assert_eq!(read_i32(&e, &ds, v, &s).unwrap(), vec![77]);
}

#[test]
fn writes_flush_and_read_back() {
    for (dtype, order) in [("<i4", ChunkOrder::C), (">i4", ChunkOrder::F)] {
        let (map, ds, v) = grid_fixture(dtype, order);
        let e = engine(&map, 1 << 20);
        let s = slab(&[1, 1], &[2, 3], &[2, 2]);
        let data: Vec<u8> = (0..6i32).flat_map(|x| (-x - 1).to_le_bytes()).collect();
        e.write(&ds, v, &s, &data).unwrap();
        assert_eq!(
            read_i32(&e, &ds, v, &s).unwrap(),
            vec![-1, -2, -3, -4, -5, -6]
        );
        let before = map.object("v/0.0").unwrap();
        e.flush().unwrap();
        assert_ne!(map.object("v/0.0").unwrap(), before);
        // A fresh engine sees the stored result; untouched elements kept.
        let fresh = engine(&map, 0);
        let mut want = expected(&Hyperslab::whole(&[5, 7]));
        for (i, p) in slab_points(&s).iter().enumerate() {
            want[(p[0] * 7 + p[1]) as usize] = -(i as i32) - 1;
        }
        assert_eq!(
            read_i32(&fresh, &ds, v, &Hyperslab::whole(&[5, 7])).unwrap(),
            want,
            "{dtype} {order:?}"
        );
    }
}

/// A float16 value between two float16 values reads back, from the cache as from storage, as
/// the nearer one that is stored (1e-8 is below the smallest subnormal, 65519 rounds down to
/// the largest finite float16); infinities and NaN are stored as they are.
#[test]
fn float16_writes_read_back_rounded_as_stored() {
    let f32s = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|f| f.to_le_bytes()).collect() };
    let written = f32s(&[0.1, 1e-8, 65519.0, f32::NEG_INFINITY, f32::NAN]);
    // numpy: np.float16([0.1, 1e-8, 65519, -np.inf, np.nan]).astype(np.float32)
    let want = f32s(&[0.099975586, 0.0, 65504.0, f32::NEG_INFINITY, f32::NAN]);
    let map = Arc::new(TestMap::default());
    let mut ds = Dataset::new();
    let v = add_var(
        &mut ds,
        "v",
        NcType::Float,
        &[("x", 5)],
        storage("v", "<f2", &[5], &[5]),
    );
    let e = engine(&map, 1 << 20);
    let all = Hyperslab::whole(&[5]);
    e.write(&ds, v, &all, &written).unwrap();
    let mut cached = vec![0u8; written.len()];
    e.read(&ds, v, &all, &mut cached).unwrap();
    e.flush().unwrap();
    let mut stored = vec![0u8; written.len()];
    engine(&map, 0).read(&ds, v, &all, &mut stored).unwrap();
    assert_eq!((&cached, &stored), (&want, &want));
}

/// A finite float beyond float16's range (it would be stored as infinity) and a bool byte
/// other than 0 or 1 are refused with the variable and the value's index; nothing is stored.
#[test]
fn values_beyond_float16_or_bool_are_refused() {
    let f32s = |v: &[f32]| -> Vec<u8> { v.iter().flat_map(|f| f.to_le_bytes()).collect() };
    let cases: [(&str, NcType, Vec<u8>, &str); 4] = [
        ("<f2", NcType::Float, f32s(&[0.5, 1e10, 1.0]), "/v[1]"),
        ("<f2", NcType::Float, f32s(&[0.5, 1.0, -65520.0]), "/v[2]"),
        (">f2", NcType::Float, f32s(&[70000.0, 1.0, 1.0]), "/v[0]"),
        ("|b1", NcType::UByte, vec![0, 1, 2], "/v[2]"),
    ];
    for (dtype, nctype, written, index) in cases {
        let map = Arc::new(TestMap::default());
        let mut ds = Dataset::new();
        let v = add_var(
            &mut ds,
            "v",
            nctype,
            &[("x", 3)],
            storage("v", dtype, &[3], &[3]),
        );
        let e = engine(&map, 1 << 20);
        let err = e
            .write(&ds, v, &Hyperslab::whole(&[3]), &written)
            .unwrap_err();
        assert!(matches!(err, Error::Unrepresentable(_)), "{dtype}: {err}");
        assert!(err.to_string().contains(index), "{dtype}: {err}");
        e.flush().unwrap();
        assert!(map.object("v/0").is_none(), "{dtype}");
    }
}

/// Text wider than its fixed-width stored slot is refused, naming the variable and the value's
/// index, and nothing of the write is stored or cached.
#[test]
fn text_too_wide_for_its_stored_slot_is_refused() {
    let map = Arc::new(TestMap::default());
    let mut ds = Dataset::new();
    // A `<U2` string variable 8 bytes wide: its slots hold 2 characters of UTF-8.
    let v = add_var(
        &mut ds,
        "s",
        NcType::String,
        &[("y", 3)],
        storage("s", "<U2", &[3], &[3]),
    );
    ds.vars[v.0].string_width = 8;
    let e = engine(&map, 1 << 20);
    let written = b"ab\0\0\0\0\0\0abc\0\0\0\0\0".to_vec();
    let err = e
        .write(&ds, v, &slab(&[0], &[2], &[2]), &written)
        .unwrap_err();
    assert!(matches!(err, Error::Unrepresentable(_)), "{err}");
    let message = err.to_string();
    assert!(
        message.contains("/s[2]") && message.contains("3 characters"),
        "{message}"
    );
    let mut cached = vec![1u8; 24];
    e.read(&ds, v, &Hyperslab::whole(&[3]), &mut cached)
        .unwrap();
    assert_eq!(cached, vec![0u8; 24]);
    e.flush().unwrap();
    assert!(map.object("s/0").is_none());
}

#[test]
fn writes_to_missing_chunks_and_without_cache() {
    let map = Arc::new(TestMap::default());
    let mut ds = Dataset::new();
    let mut st = storage("v", "<i4", &[4], &[3]);
    st.fill_value = Some(9i32.to_le_bytes().to_vec());
    let v = add_var(&mut ds, "v", NcType::Int, &[("x", 4)], st);
    let e = engine(&map, 0);
    e.write(
        &ds,
        v,
        &slab(&[2], &[2], &[1]),
        &[5i32.to_le_bytes(), 6i32.to_le_bytes()].concat(),
    )
    .unwrap();
    // No cache: written through at once, full chunks with fill.
    let want: Vec<u8> = [9i32, 9, 5].iter().flat_map(|x| x.to_le_bytes()).collect();
    assert_eq!(map.object("v/0").unwrap(), want);
    assert_eq!(
        read_i32(&e, &ds, v, &Hyperslab::whole(&[4])).unwrap(),
        vec![9, 9, 5, 6]
    );
    // Beyond the stored shape is refused.
    ds.dims[0].len = 6;
    assert!(e.write(&ds, v, &slab(&[4], &[1], &[1]), &[0; 4]).is_err());
}

/// `v(x)` of 64 ints in chunks of 4 (16 bytes), fill 9, nothing stored.
fn ints_by_four() -> (Arc<TestMap>, Dataset, VarId) {
    let map = Arc::new(TestMap::default());
    let mut ds = Dataset::new();
    let mut st = storage("v", "<i4", &[64], &[4]);
    st.fill_value = Some(9i32.to_le_bytes().to_vec());
    let v = add_var(&mut ds, "v", NcType::Int, &[("x", 64)], st);
    (map, ds, v)
}

fn ints(values: &[i32]) -> Vec<u8> {
    values.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// On a full disk, writes that need room in a cache full of changed chunks fail with the
/// store's error before changing anything, however many there are, while the cache holds no
/// more than its bound; writes to cached chunks and reads still work, and once storage takes
/// them again every acknowledged write is stored.
#[test]
fn a_write_without_room_on_a_full_disk_fails_and_changes_nothing() {
    let (map, ds, v) = ints_by_four();
    let e = engine(&map, 32); // two chunks
    let one = |x: u64, value: i32| e.try_write(&ds, v, &slab(&[x], &[1], &[1]), &ints(&[value]));
    map.full.store(true, Ordering::Relaxed);
    one(0, 100).unwrap();
    // Past half the cache: storing the other changed chunk early fails, and is not this
    // write's failure.
    one(4, 104).unwrap();
    for i in 0..1000u64 {
        let x = 8 + (i % 14) * 4;
        let failed = one(x, 1).unwrap_err();
        assert_eq!(failed.error.errno(), libc::ENOSPC);
        assert!(!failed.in_part);
        assert!(e.stats().bytes <= 32);
    }
    assert_eq!(
        read_i32(&e, &ds, v, &slab(&[8], &[56], &[1])).unwrap(),
        vec![9; 56]
    );
    one(1, 101).unwrap();
    assert_eq!(
        read_i32(&e, &ds, v, &slab(&[0], &[8], &[1])).unwrap(),
        vec![100, 101, 9, 9, 104, 9, 9, 9]
    );
    assert!(e.flush().is_err());
    assert!(map.object("v/0").is_none() && map.object("v/1").is_none());
    map.full.store(false, Ordering::Relaxed);
    e.flush().unwrap();
    assert_eq!(i32s(&map.object("v/0").unwrap()), vec![100, 101, 9, 9]);
    assert_eq!(i32s(&map.object("v/1").unwrap()), vec![104, 9, 9, 9]);
    assert_eq!(map.objects.lock().unwrap().len(), 2);
}

/// On storage that paces failed write-backs (a remote server), writes that need room after a
/// write-back failed fail at once with its error instead of sending the changed chunks again,
/// until the window ends; a flush asked for tries at once, and a stored one ends the pacing.
#[test]
fn a_refused_write_back_is_not_restarted_by_every_write() {
    let (plain, ds, v) = ints_by_four();
    let map = Arc::new(TestMap {
        objects: Mutex::new(plain.objects.lock().unwrap().clone()),
        backoff: Some(Duration::from_secs(3600)),
        ..TestMap::default()
    });
    let e = engine(&map, 32); // two chunks
    let one = |x: u64, value: i32| e.try_write(&ds, v, &slab(&[x], &[1], &[1]), &ints(&[value]));
    map.full.store(true, Ordering::Relaxed);
    one(0, 100).unwrap();
    // Past half the cache: the early store of chunk 0 is tried, once.
    one(4, 104).unwrap();
    let tried = map.puts.load(Ordering::Relaxed);
    assert_eq!(tried, 1);
    for i in 0..1000u64 {
        let failed = one(8 + (i % 14) * 4, 1).unwrap_err();
        assert!(!failed.in_part);
        assert!(
            failed.error.to_string().contains("No space left"),
            "{}",
            failed.error
        );
    }
    assert_eq!(
        map.puts.load(Ordering::Relaxed),
        tried,
        "writes sent the chunks again"
    );
    // Writes to cached chunks need no room and still work.
    one(1, 101).unwrap();
    assert!(e.flush().is_err());
    assert!(
        map.puts.load(Ordering::Relaxed) > tried,
        "the flush was not tried"
    );
    map.full.store(false, Ordering::Relaxed);
    e.flush().unwrap();
    assert_eq!(i32s(&map.object("v/0").unwrap()), vec![100, 101, 9, 9]);
    assert_eq!(i32s(&map.object("v/1").unwrap()), vec![104, 9, 9, 9]);
    // Stored: writes that need room store chunks at once again.
    one(8, 108).unwrap();
    one(12, 112).unwrap();
    one(16, 116).unwrap();
    assert_eq!(i32s(&map.object("v/2").unwrap()), vec![108, 9, 9, 9]);
}

/// A close may wait for storage held as down only outside the window of a failed store; a
/// flush with nothing to store learns nothing of the storage and keeps the window, while a
/// failed store of the metadata starts one as a failed chunk store does, and a stored flush
/// ends it.
#[test]
fn a_close_waits_for_storage_only_outside_the_window_of_a_failed_store() {
    let (plain, ds, v) = ints_by_four();
    let map = Arc::new(TestMap {
        objects: Mutex::new(plain.objects.lock().unwrap().clone()),
        backoff: Some(Duration::from_secs(3600)),
        ..TestMap::default()
    });
    let e = engine(&map, 64);
    assert!(e.storage_may_wait().is_ok());
    e.try_write(&ds, v, &slab(&[0], &[1], &[1]), &ints(&[100]))
        .unwrap();
    map.full.store(true, Ordering::Relaxed);
    assert!(e.flush().is_err());
    let why = e.storage_may_wait().unwrap_err().to_string();
    assert!(
        why.contains("No space left") && why.contains("close"),
        "{why}"
    );
    map.full.store(false, Ordering::Relaxed);
    e.flush().unwrap();
    assert!(e.storage_may_wait().is_ok());
    // The metadata refused after every chunk was stored: an empty flush forgets nothing.
    e.store_failed(&Error::Storage {
        key: ".zattrs".into(),
        reason: "the server is taken as down".into(),
    });
    e.flush().unwrap();
    assert!(e.storage_may_wait().is_err());
}

/// A write larger than the cache goes through it group by group: one that fails after a
/// group took effect says so; a failed store of whole chunks keeps the changes cached for
/// them.
#[test]
fn writes_that_cannot_be_held_whole_say_whether_they_took_effect() {
    let (map, ds, v) = ints_by_four();
    let e = engine(&map, 32);
    map.full.store(true, Ordering::Relaxed);
    // One element in each of three chunks: two fit in the cache, the third needs them
    // stored.
    let failed = e
        .try_write(&ds, v, &slab(&[1], &[3], &[4]), &ints(&[1, 2, 3]))
        .unwrap_err();
    assert!(failed.in_part);
    assert_eq!(
        read_i32(&e, &ds, v, &slab(&[1], &[3], &[4])).unwrap(),
        vec![1, 2, 9]
    );
    // Whole chunks 0..3, stored at once (more than a quarter of the cache): none is stored,
    // and the changes cached for chunks 0 and 1 stay.
    let whole: Vec<i32> = (200..216).collect();
    let failed = e
        .try_write(&ds, v, &slab(&[0], &[16], &[1]), &ints(&whole))
        .unwrap_err();
    assert!(!failed.in_part);
    assert_eq!(
        read_i32(&e, &ds, v, &slab(&[0], &[8], &[1])).unwrap(),
        vec![9, 1, 9, 9, 9, 2, 9, 9]
    );
    map.full.store(false, Ordering::Relaxed);
    e.try_write(&ds, v, &slab(&[0], &[16], &[1]), &ints(&whole))
        .unwrap();
    e.flush().unwrap();
    let fresh = engine(&map, 0);
    assert_eq!(
        read_i32(&fresh, &ds, v, &slab(&[0], &[16], &[1])).unwrap(),
        whole
    );
}

#[test]
fn dirty_chunks_survive_eviction_and_drop() {
    let (map, ds, v) = grid_fixture("<i4", ChunkOrder::C);
    {
        let e = engine(&map, 24); // one chunk
        e.write(
            &ds,
            v,
            &slab(&[0, 0], &[1, 1], &[1, 1]),
            &7i32.to_le_bytes(),
        )
        .unwrap();
        // Part of chunk 1.2 (a whole chunk would be stored at once, bypassing the cache).
        e.write(
            &ds,
            v,
            &slab(&[3, 6], &[1, 1], &[1, 1]),
            &8i32.to_le_bytes(),
        )
        .unwrap(); // evicts (writes back) chunk 0.0
        assert_eq!(i32s(&map.object("v/0.0").unwrap())[0], 7);
    } // drop flushes chunk 1.2
    assert_eq!(i32s(&map.object("v/1.2").unwrap())[3], 8);
}

#[test]
fn dirty_chunks_stored_together_past_half_the_cache() {
    let (map, ds, v) = grid_fixture("<i4", ChunkOrder::C);
    let e = engine(&map, 96); // four chunks
    let one = |x: u64, value: i32| {
        e.write(
            &ds,
            v,
            &slab(&[0, x], &[1, 1], &[1, 1]),
            &value.to_le_bytes(),
        )
        .unwrap()
    };
    one(0, -1);
    one(3, -2); // chunks 0.0 and 0.1 dirty: half the cache, kept
    assert_eq!(i32s(&map.object("v/0.0").unwrap())[0], 0);
    one(6, -3); // a third: the two left behind are stored, none evicted
    assert_eq!(i32s(&map.object("v/0.0").unwrap())[0], -1);
    assert_eq!(i32s(&map.object("v/0.1").unwrap())[0], -2);
    assert_eq!(
        i32s(&map.object("v/0.2").unwrap())[0],
        6,
        "still being written"
    );
    assert_eq!(e.stats().evictions, 0);
    assert_eq!(e.stats().entries, 3);
    e.flush().unwrap();
    assert_eq!(i32s(&map.object("v/0.2").unwrap())[0], -3);
}

#[test]
fn streaming_writes_store_whole_chunks_at_once_over_stale_cached_ones() {
    for (dtype, order) in [("<i4", ChunkOrder::C), (">i4", ChunkOrder::F)] {
        let (map, ds, v) = grid_fixture(dtype, order);
        let e = engine(&map, 48); // two chunks
                                  // An unflushed write in chunk 0.0, which the next write then covers whole.
        e.write(
            &ds,
            v,
            &slab(&[0, 0], &[1, 1], &[1, 1]),
            &(-1i32).to_le_bytes(),
        )
        .unwrap();
        // Rows 0-3: six whole chunks (three of them at the edge of x), more than the cache.
        let s = slab(&[0, 0], &[4, 7], &[1, 1]);
        let values: Vec<i32> = (100..128).collect();
        let data: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
        e.write(&ds, v, &s, &data).unwrap();
        // Stored before any flush: a fresh engine without cache reads them.
        let fresh = engine(&map, 0);
        assert_eq!(read_i32(&fresh, &ds, v, &s).unwrap(), values, "{dtype}");
        // The stale unflushed copy of chunk 0.0 is neither read nor flushed over the new one.
        assert_eq!(read_i32(&e, &ds, v, &s).unwrap(), values, "{dtype}");
        e.flush().unwrap();
        assert_eq!(read_i32(&fresh, &ds, v, &s).unwrap(), values, "{dtype}");
        // Row 4 untouched.
        let row4 = slab(&[4, 0], &[1, 7], &[1, 1]);
        assert_eq!(
            read_i32(&fresh, &ds, v, &row4).unwrap(),
            expected(&row4),
            "{dtype}"
        );
    }
    // Beyond the array, a whole edge chunk holds the fill value (netCDF's default for int).
    let (map, ds, v) = grid_fixture("<i4", ChunkOrder::C);
    let e = engine(&map, 0);
    e.write(
        &ds,
        v,
        &slab(&[0, 6], &[2, 1], &[1, 1]),
        &[[1u8; 4], [2; 4]].concat(),
    )
    .unwrap();
    let fill = -2147483647;
    assert_eq!(
        i32s(&map.object("v/0.2").unwrap()),
        vec![0x01010101, fill, fill, 0x02020202, fill, fill]
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Any slab of any chunked array, against a naive element-by-element reader.
    #[test]
    fn matches_naive_reader(
        shape in prop::collection::vec(1u64..8, 0..4),
        chunk_seed in prop::collection::vec(1u64..10, 3),
        slab_seed in prop::collection::vec(
            (0u64..100, 0u64..100, prop::sample::select(vec![1u64, 1, 1, 2, 3])),
            3,
        ),
        grow in prop::collection::vec(0u64..3, 3),
        missing_mask in 0u64..64,
        fortran in any::<bool>(),
        big in any::<bool>(),
        cache in prop::sample::select(vec![0usize, 64, 1 << 20]),
    ) {
        let rank = shape.len();
        let chunks: Vec<u64> = (0..rank).map(|d| chunk_seed[d].min(shape[d] + 2)).collect();
        // The netCDF dims may exceed the stored shape.
        let dims: Vec<u64> = (0..rank).map(|d| shape[d] + grow[d]).collect();
        // Biased towards large slabs (start 0, count to the end), which cross many chunks.
        let starts: Vec<u64> = (0..rank)
            .map(|d| if slab_seed[d].0 % 2 == 0 { 0 } else { slab_seed[d].0 % dims[d] })
            .collect();
        let s = Hyperslab {
            start: starts.clone(),
            stride: (0..rank).map(|d| slab_seed[d].2).collect(),
            count: (0..rank).map(|d| {
                let max = (dims[d] - 1 - starts[d]) / slab_seed[d].2 + 1;
                if slab_seed[d].1 % 2 == 0 { max } else { slab_seed[d].1 % (max + 1) }
            }).collect(),
        };
        let order = if fortran { ChunkOrder::F } else { ChunkOrder::C };
        let map = Arc::new(TestMap::default());
        let mut ds = Dataset::new();
        let mut st = storage("v", if big { ">i4" } else { "<i4" }, &shape, &chunks);
        st.order = order;
        st.fill_value = Some((-5i32).to_le_bytes().to_vec());
        let names = ["a", "b", "c"];
        let dim_list: Vec<(&str, u64)> = (0..rank).map(|d| (names[d], dims[d])).collect();
        let v = add_var(&mut ds, "v", NcType::Int, &dim_list, st);
        let missing = |c: &[u64]| {
            let lin = c.iter().fold(0u64, |a, &x| a * 7 + x);
            missing_mask >> (lin % 6) & 1 == 1 && lin % 6 < 3
        };
        put_chunks(&map, "v", &shape, &chunks, order, 4, &|g| {
            let x = value(g);
            if big { x.to_be_bytes().to_vec() } else { x.to_le_bytes().to_vec() }
        }, &missing);
        // Naive reader: one element at a time from first principles.
        let naive: Vec<i32> = slab_points(&s).iter().map(|g| {
            let stored = g.iter().zip(&shape).all(|(i, n)| i < n);
            let chunk: Vec<u64> = g.iter().zip(&chunks).map(|(i, c)| i / c).collect();
            if stored && !missing(&chunk) { value(g) } else { -5 }
        }).collect();
        let e = engine(&map, cache);
        prop_assert_eq!(read_i32(&e, &ds, v, &s).unwrap(), naive.clone());
        // Twice, to exercise cache hits.
        prop_assert_eq!(read_i32(&e, &ds, v, &s).unwrap(), naive);
        prop_assert!(e.stats().bytes <= cache as u64);
    }
}

/// The chain of an int32 array stored in shards of `inner` chunks, as zarr-python 3 writes it.
fn sharding(inner: &[u64]) -> CodecSpec {
    CodecSpec::V3(vec![serde_json::json!({
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": inner,
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "index_codecs": [
                {"name": "bytes", "configuration": {"endian": "little"}},
                {"name": "crc32c"},
            ],
            "index_location": "end",
        },
    })])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Any sequence of writes (whole and partial chunks and shards, strided, some of nothing
    /// but fill), with or without a flush after each, through any cache size, to a plain or a
    /// sharded array, against a reference model of the array: the writing engine reads the
    /// model after every write, and a fresh engine reads it from storage at the end.
    #[test]
    fn writes_match_a_reference_model(
        shape in prop::collection::vec(1u64..9, 1..4),
        inner_seed in prop::collection::vec(1u64..4, 3),
        per_shard in prop::collection::vec(1u64..4, 3),
        sharded in any::<bool>(),
        cache in prop::sample::select(vec![0usize, 48, 256, 1 << 20]),
        writes in prop::collection::vec(
            (
                prop::collection::vec(
                    (0u64..100, 0u64..100, prop::sample::select(vec![1u64, 1, 1, 2, 3])),
                    3,
                ),
                -3i32..4,
                any::<bool>(),
            ),
            1..6,
        ),
    ) {
        let rank = shape.len();
        let inner: Vec<u64> = inner_seed[..rank].to_vec();
        let fill = -5i32;
        let mut st = if sharded {
            let outer: Vec<u64> = (0..rank).map(|d| inner[d] * per_shard[d]).collect();
            let mut st = storage("v", "<i4", &shape, &outer);
            st.key_encoding = ChunkKeyEncoding::Default { separator: '/' };
            st.codecs = sharding(&inner);
            st
        } else {
            storage("v", "<i4", &shape, &inner)
        };
        st.fill_value = Some(fill.to_le_bytes().to_vec());
        let map = Arc::new(TestMap::default());
        let mut ds = Dataset::new();
        let names = ["a", "b", "c"];
        let dim_list: Vec<(&str, u64)> = (0..rank).map(|d| (names[d], shape[d])).collect();
        let v = add_var(&mut ds, "v", NcType::Int, &dim_list, st);
        let whole = Hyperslab::whole(&shape);
        let linear = |g: &[u64]| g.iter().zip(&shape).fold(0u64, |a, (&i, &n)| a * n + i);
        let mut model = vec![fill; whole.len() as usize];
        let e = engine(&map, cache);
        for (slab_seed, base, flush) in &writes {
            // Biased towards large slabs (start 0, count to the end), which cover whole chunks.
            let starts: Vec<u64> = (0..rank)
                .map(|d| if slab_seed[d].0 % 2 == 0 { 0 } else { slab_seed[d].0 % shape[d] })
                .collect();
            let s = Hyperslab {
                start: starts.clone(),
                stride: (0..rank).map(|d| slab_seed[d].2).collect(),
                count: (0..rank).map(|d| {
                    let max = (shape[d] - 1 - starts[d]) / slab_seed[d].2 + 1;
                    if slab_seed[d].1 % 2 == 0 { max } else { 1 + slab_seed[d].1 % max }
                }).collect(),
            };
            // A base of 0 writes nothing but the fill value: whole chunks of it are left out.
            let values: Vec<i32> = (0..s.len() as i32)
                .map(|k| if *base == 0 { fill } else { base * 1000 + k })
                .collect();
            let bytes: Vec<u8> = values.iter().flat_map(|x| x.to_le_bytes()).collect();
            e.write(&ds, v, &s, &bytes).unwrap();
            for (g, x) in slab_points(&s).iter().zip(&values) {
                model[linear(g) as usize] = *x;
            }
            if *flush {
                e.flush().unwrap();
            }
            prop_assert_eq!(read_i32(&e, &ds, v, &whole).unwrap(), model.clone());
        }
        e.flush().unwrap();
        prop_assert_eq!(read_i32(&engine(&map, 0), &ds, v, &whole).unwrap(), model);
    }
}

/// Chunks decoded in place (no cache, whole chunks landing as contiguous blocks) through a
/// codec chain, with a missing chunk, a corrupt one and one of the wrong size.
#[test]
fn in_place_decoding_through_codecs() {
    let map = Arc::new(TestMap::default());
    let mut ds = Dataset::new();
    let (shape, chunks) = ([6u64, 4], [2u64, 4]);
    let mut st = storage("v", ">i4", &shape, &chunks);
    st.codecs = CodecSpec::V2 {
        filters: vec![serde_json::json!({"id": "shuffle", "elementsize": 4})],
        compressor: Some(serde_json::json!({"id": "zlib", "level": 1})),
    };
    st.fill_value = Some(9i32.to_le_bytes().to_vec());
    let codecs = st.codecs.clone();
    let v = add_var(&mut ds, "v", NcType::Int, &[("y", 6), ("x", 4)], st);
    put_chunks(
        &map,
        "v",
        &shape,
        &chunks,
        ChunkOrder::C,
        4,
        &|g| value(g).to_be_bytes().to_vec(),
        &|c| c == [1, 0],
    );
    let pipeline = Pipeline::from_spec(&codecs, 4).unwrap();
    for key in ["v/0.0", "v/2.0"] {
        let raw = map.object(key).unwrap();
        map.insert(key, pipeline.encode(raw).unwrap());
    }
    let whole = Hyperslab::whole(&shape);
    let want: Vec<i32> = slab_points(&whole)
        .iter()
        .map(|g| if g[0] / 2 == 1 { 9 } else { value(g) })
        .collect();
    for cache in [0, 1 << 20] {
        let e = engine(&map, cache);
        assert_eq!(read_i32(&e, &ds, v, &whole).unwrap(), want, "cache {cache}");
    }
    // A corrupt stream and a stream of the wrong decoded size are errors naming the chunk.
    let good = map.object("v/2.0").unwrap();
    let mut corrupt = good.clone();
    let n = corrupt.len();
    corrupt[n - 2] ^= 0x55;
    let short = pipeline.encode(vec![1u8; 4 * 4]).unwrap();
    for bad in [corrupt, short] {
        map.insert("v/2.0", bad);
        for cache in [0, 1 << 20] {
            match read_i32(&engine(&map, cache), &ds, v, &whole) {
                Err(Error::BadChunk { key, .. }) => assert_eq!(key, "v/2.0"),
                other => panic!("{other:?}"),
            }
        }
    }
    // Rows of other chunks still read.
    let top = slab(&[0, 0], &[2, 4], &[1, 1]);
    assert_eq!(read_i32(&engine(&map, 0), &ds, v, &top).unwrap(), want[..8]);
}

#[test]
fn preload_fills_the_cache_for_later_reads() {
    let (map, ds, v) = grid_fixture("<i4", ChunkOrder::C);
    let e = engine(&map, 1 << 20);
    // Rows 1..3 touch chunk rows 0 and 1: 2 x 3 chunks.
    let rows = slab(&[1, 0], &[2, 7], &[1, 1]);
    e.preload(&ds, v, &rows).unwrap();
    assert_eq!(e.stats().entries, 6);
    assert_eq!(map.gets.load(Ordering::Relaxed), 6);
    assert_eq!(read_i32(&e, &ds, v, &rows).unwrap(), expected(&rows));
    assert_eq!(map.gets.load(Ordering::Relaxed), 6, "served from the cache");
    // Chunks that would not all fit are not loaded; a bad slab is refused.
    let small = engine(&map, 48);
    small.preload(&ds, v, &rows).unwrap();
    assert_eq!(small.stats().entries, 0);
    assert!(e.preload(&ds, v, &slab(&[5, 0], &[1, 1], &[1, 1])).is_err());
    // A failing chunk stops the preload with its error.
    map.insert("v/2.0", vec![1, 2, 3]);
    let whole = Hyperslab::whole(&[5, 7]);
    assert!(matches!(
        engine(&map, 1 << 20).preload(&ds, v, &whole),
        Err(Error::BadChunk { .. })
    ));
}

/// A map that says it serves requests concurrently (as S3 does), so that prefetches come in
/// batches of requests.
#[derive(Debug)]
struct BatchingMap(Arc<TestMap>);

impl ZMap for BatchingMap {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.0.get(key)
    }
    fn concurrent_gets(&self) -> usize {
        4
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.0.put(key, value)
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.0.delete(key)
    }
    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        self.0.search(prefix)
    }
    fn read_only(&self) -> bool {
        false
    }
    fn describe(&self) -> String {
        "batching test map".into()
    }
}

/// A prefetch larger than the in-flight budget loads its chunks a budget's worth at a time,
/// all of them, rather than the part that fitted: the rest would be left to its reader, one
/// request at a time. Each chunk of the fixture is 24 bytes (2 x 3 int32), stored as is.
#[test]
fn a_prefetch_larger_than_the_in_flight_budget_loads_all_its_chunks() {
    let (map, ds, v) = grid_fixture("<i4", ChunkOrder::C);
    // Rows 1..3 touch chunk rows 0 and 1: 2 x 3 chunks.
    let rows = slab(&[1, 0], &[2, 7], &[1, 1]);
    // A batching map counts a chunk's stored bytes (24), a plain one stored and decoded (48):
    // room for two chunks at a time either way.
    let batching: Arc<dyn ZMap> = Arc::new(BatchingMap(Arc::clone(&map)));
    let plain: Arc<dyn ZMap> = Arc::clone(&map) as Arc<dyn ZMap>;
    // A budget smaller than one chunk: each chunk goes alone.
    let alone: Arc<dyn ZMap> = Arc::new(BatchingMap(Arc::clone(&map)));
    for (zmap, limit) in [(batching, 48), (plain, 96), (alone, 10)] {
        let budget = ByteBudget::new(limit);
        let mut e = ChunkEngine::new(zmap, 1 << 20);
        e.in_flight = Some(Arc::clone(&budget));
        e.preload(&ds, v, &rows).unwrap();
        assert_eq!(e.stats().entries, 6);
        assert_eq!(budget.used(), 0, "every share given back");
        let gets = map.gets.load(Ordering::Relaxed);
        assert_eq!(read_i32(&e, &ds, v, &rows).unwrap(), expected(&rows));
        assert_eq!(
            map.gets.load(Ordering::Relaxed),
            gets,
            "served from the cache"
        );
    }
}

/// A map that serves requests concurrently, each on a thread of its own (as S3 does with its
/// connections), records the keys requested, and holds the request for one key until
/// released.
#[derive(Debug)]
struct HoldingMap {
    inner: Arc<TestMap>,
    held: String,
    /// The keys requested so far, and whether the held one is released.
    state: Mutex<(Vec<String>, bool)>,
    changed: Condvar,
}

impl HoldingMap {
    fn new(inner: Arc<TestMap>, held: &str) -> Self {
        HoldingMap {
            inner,
            held: held.to_string(),
            state: Mutex::new((Vec::new(), false)),
            changed: Condvar::new(),
        }
    }

    /// Waits until every one of `keys` is requested (or a minute passed, so that a failure
    /// does not hang); whether they were.
    fn wait_requested(&self, keys: &[&str]) -> bool {
        let missing =
            |state: &mut (Vec<String>, bool)| !keys.iter().all(|k| state.0.iter().any(|r| r == k));
        let state = self.state.lock().unwrap();
        let (state, _) = self
            .changed
            .wait_timeout_while(state, Duration::from_secs(60), missing)
            .unwrap();
        keys.iter().all(|k| state.0.iter().any(|r| r == k))
    }

    fn release(&self) {
        self.state.lock().unwrap().1 = true;
        self.changed.notify_all();
    }
}

impl ZMap for HoldingMap {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let mut state = self.state.lock().unwrap();
        state.0.push(key.to_string());
        self.changed.notify_all();
        while key == self.held && !state.1 {
            state = self.changed.wait(state).unwrap();
        }
        drop(state);
        self.inner.get(key)
    }
    fn get_fed(&self, feed: &mut dyn Feed) {
        let (sender, arrived) = std::sync::mpsc::channel();
        std::thread::scope(|scope| {
            let (mut in_flight, mut named) = (0, 0);
            loop {
                for key in feed.next_keys(in_flight) {
                    let (sender, index) = (sender.clone(), named);
                    scope.spawn(move || sender.send((index, self.get(&key))));
                    named += 1;
                    in_flight += 1;
                }
                if in_flight == 0 {
                    break;
                }
                let (index, object) = arrived.recv().unwrap();
                in_flight -= 1;
                feed.arrived(index, object);
            }
        });
    }
    fn concurrent_gets(&self) -> usize {
        8
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.put(key, value)
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.inner.delete(key)
    }
    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        self.inner.search(prefix)
    }
    fn read_only(&self) -> bool {
        true
    }
    fn describe(&self) -> String {
        "holding test map".into()
    }
}

/// A prefetch that gets part of its chunks' budget at first requests the rest as the chunks
/// it loaded give their shares back, one by one: with one request of the first part held,
/// the later chunks are still requested (not after the slowest chunk of the part). Each chunk
/// of the fixture stores 24 bytes: the budget has room for two.
#[test]
fn a_prefetch_requests_more_chunks_as_each_one_arrives() {
    let (map, ds, v) = grid_fixture("<i4", ChunkOrder::C);
    // Rows 1..3 touch chunk rows 0 and 1: 2 x 3 chunks, the first two in the first part.
    let rows = slab(&[1, 0], &[2, 7], &[1, 1]);
    let holding = Arc::new(HoldingMap::new(Arc::clone(&map), "v/0.0"));
    let budget = ByteBudget::new(48);
    let mut e = ChunkEngine::new(Arc::clone(&holding) as Arc<dyn ZMap>, 1 << 20);
    e.in_flight = Some(Arc::clone(&budget));
    let later = ["v/0.1", "v/0.2", "v/1.0", "v/1.1", "v/1.2"];
    let requested_while_held = std::thread::scope(|scope| {
        let preload = scope.spawn(|| e.preload(&ds, v, &rows));
        let requested = holding.wait_requested(&later);
        holding.release();
        preload.join().unwrap().unwrap();
        requested
    });
    assert!(
        requested_while_held,
        "requested while v/0.0 was held: {:?}",
        holding.state.lock().unwrap().0
    );
    assert_eq!(e.stats().entries, 6);
    assert_eq!(budget.used(), 0, "every share given back");
    assert!(e.loading.lock().unwrap().is_empty(), "every gate taken out");
    assert_eq!(read_i32(&e, &ds, v, &rows).unwrap(), expected(&rows));
    assert_eq!(holding.state.lock().unwrap().0.len(), 6, "each chunk once");
}

#[test]
fn concurrent_readers_of_a_chunk_load_it_once() {
    let (map, ds, v) = grid_fixture("<i4", ChunkOrder::C);
    let e = engine(&map, 1 << 20);
    let one = slab(&[0, 0], &[1, 1], &[1, 1]);
    std::thread::scope(|scope| {
        for _ in 0..8 {
            scope.spawn(|| assert_eq!(read_i32(&e, &ds, v, &one).unwrap(), vec![0]));
        }
    });
    assert_eq!(map.gets.load(Ordering::Relaxed), 1);
    assert!(e.loading.lock().unwrap().is_empty());
}

/// A map whose partial reads are cheap (like a local directory), counting them.
#[derive(Debug)]
struct RangedMap {
    inner: Arc<TestMap>,
    ranges: AtomicUsize,
}

impl ZMap for RangedMap {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.get(key)
    }
    fn get_range_into(&self, key: &str, offset: u64, out: &mut [u8]) -> Result<Option<u64>> {
        self.ranges.fetch_add(1, Ordering::Relaxed);
        Ok(self.inner.object(key).map(|v| {
            let start = (offset as usize).min(v.len());
            let n = out.len().min(v.len() - start);
            out[..n].copy_from_slice(&v[start..start + n]);
            v.len() as u64
        }))
    }
    fn partial_reads_are_cheap(&self) -> bool {
        true
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.put(key, value)
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.inner.delete(key)
    }
    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        self.inner.search(prefix)
    }
    fn read_only(&self) -> bool {
        false
    }
    fn describe(&self) -> String {
        "ranged test map".into()
    }
}

#[test]
fn uncompressed_runs_are_read_in_place_from_cheap_maps() {
    for dtype in ["<i4", ">i4"] {
        let (map, ds, v) = grid_fixture(dtype, ChunkOrder::C);
        map.objects.lock().unwrap().remove("v/1.1");
        let ranged = Arc::new(RangedMap {
            inner: Arc::clone(&map),
            ranges: AtomicUsize::new(0),
        });
        let missing_as_fill = |s: &Hyperslab| -> Vec<i32> {
            slab_points(s)
                .iter()
                .map(|g| {
                    if g[0] / 2 == 1 && g[1] / 3 == 1 {
                        -2147483647
                    } else {
                        value(g)
                    }
                })
                .collect()
        };
        for cache in [0, 1 << 20] {
            let e = ChunkEngine::new(Arc::clone(&ranged) as Arc<dyn ZMap>, cache);
            // Each chunk's share of these is one run (a part of a row, or one element).
            for s in [
                slab(&[1, 0], &[1, 7], &[1, 1]),
                slab(&[2, 1], &[1, 5], &[1, 1]),
                slab(&[0, 0], &[3, 3], &[2, 3]),
            ] {
                let got = read_i32(&e, &ds, v, &s).unwrap();
                assert_eq!(got, missing_as_fill(&s), "{dtype} cache {cache} {s:?}");
            }
            assert_eq!(e.stats().entries, 0, "the OS caches the files, not us");
            assert_eq!(map.gets.load(Ordering::Relaxed), 0, "no whole-chunk reads");
            // Chunks whose share is several runs are read whole.
            let whole = Hyperslab::whole(&[5, 7]);
            assert_eq!(
                read_i32(&e, &ds, v, &whole).unwrap(),
                missing_as_fill(&whole)
            );
            map.gets.store(0, Ordering::Relaxed);
        }
        assert!(ranged.ranges.load(Ordering::Relaxed) > 0);
        // A chunk of the wrong size is still a bad chunk.
        map.insert("v/0.1", vec![0; 8]);
        let e = ChunkEngine::new(Arc::clone(&ranged) as Arc<dyn ZMap>, 0);
        match read_i32(&e, &ds, v, &slab(&[1, 3], &[1, 2], &[1, 1])) {
            Err(Error::BadChunk { key, .. }) => assert_eq!(key, "v/0.1"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn chunks_larger_than_the_limit_are_unreadable_not_allocated() {
    let map = Arc::new(TestMap::default());
    let mut ds = Dataset::new();
    // Zarr allows chunks larger than the array; this one would be 8 TiB.
    let st = storage("v", "<i8", &[4], &[1 << 40]);
    let v = add_var(&mut ds, "v", NcType::Int64, &[("x", 4)], st);
    let e = engine(&map, 1 << 20);
    let mut out = [0u8; 32];
    let err = e
        .read(&ds, v, &Hyperslab::whole(&[4]), &mut out)
        .unwrap_err();
    assert!(matches!(err, Error::Unreadable { .. }), "{err}");
    assert!(err.to_string().contains("larger than"), "{err}");
}

/// A read of many rows of chunks on a map with request latency is cut into windows of rows;
/// each window must own only its rows. Total capacity is the first-principles measure: the
/// windows hold every part once, so their capacities add up to the number of parts.
#[test]
fn windows_of_rows_hold_only_their_own_rows() {
    for (parts, size) in [
        (20_000usize, 32usize),
        (1, 32),
        (64, 32),
        (65, 32),
        (7, 0),
        (0, 4),
    ] {
        let windows = windows_of((0..parts).collect::<Vec<_>>(), size);
        let size = size.max(1);
        assert_eq!(windows.len(), parts.div_ceil(size));
        assert!(windows.iter().all(|w| !w.is_empty() && w.len() <= size));
        assert_eq!(windows.concat(), (0..parts).collect::<Vec<_>>());
        let capacity: usize = windows.iter().map(Vec::capacity).sum();
        assert_eq!(capacity, parts, "{parts} parts in windows of {size}");
    }
}
