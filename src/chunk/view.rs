//! Lending out the values of one chunk in place, for a reader that only passes them on (a
//! mount's reply to the kernel): a cached decoded chunk is shared instead of copied, and an
//! uncompressed chunk file of a local directory is mapped instead of read into a buffer.

use std::fs::File;
use std::ops::{Deref, Range};
use std::sync::Arc;

use super::convert::Conversion;
use super::{ChunkEngine, VarPlan};
use crate::model::{Dataset, VarId};
use crate::{Error, Result};

/// Values of one chunk, lent without a copy (see [`ChunkEngine::view`]). Dereferences to the
/// bytes asked for.
///
/// A view of a mapped chunk file shows the file as it is: were the file truncated underneath
/// while the view lives, reading the missing pages from this process would raise SIGBUS. Hand
/// such bytes to the kernel (a `write` or a FUSE reply fails with `EFAULT` instead), and do not
/// keep views: they are meant to live for one reply.
#[derive(Debug)]
pub struct ChunkView {
    bytes: Lent,
    range: Range<usize>,
}

#[derive(Debug)]
enum Lent {
    /// A decoded chunk shared with the cache.
    Cached(Arc<Vec<u8>>),
    /// Part of an uncompressed chunk file, mapped.
    Mapped(FileMapping),
}

impl Deref for ChunkView {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match &self.bytes {
            Lent::Cached(chunk) => &chunk[self.range.clone()],
            Lent::Mapped(m) => &m.bytes()[self.range.clone()],
        }
    }
}

impl ChunkView {
    /// Whether the bytes are a mapped file rather than a cached chunk.
    pub fn is_mapped(&self) -> bool {
        matches!(self.bytes, Lent::Mapped(_))
    }
}

/// A read-only shared mapping of part of a file.
#[derive(Debug)]
struct FileMapping(memmap2::Mmap);

impl FileMapping {
    /// Maps `len` (> 0) bytes of `file` at `offset`, with the page tables filled at once: the
    /// kernel then copies from the file's cached pages without a fault per page.
    fn new(file: &File, offset: u64, len: usize) -> std::io::Result<FileMapping> {
        // SAFETY: the map is read-only; a file truncated underneath is the hazard
        // `ChunkView` documents (the kernel, not this process, reads the pages).
        let map = unsafe {
            memmap2::MmapOptions::new()
                .offset(offset)
                .len(len)
                .populate()
                .map(file)?
        };
        Ok(FileMapping(map))
    }

    fn bytes(&self) -> &[u8] {
        &self.0
    }
}

/// The multi-index of C-order position `i` in `shape`.
fn unravel(mut i: u64, shape: &[u64]) -> Vec<u64> {
    let mut idx = vec![0; shape.len()];
    for d in (0..shape.len()).rev() {
        idx[d] = i % shape[d];
        i /= shape[d];
    }
    idx
}

/// The C-order position of `idx` in `shape`.
fn ravel(idx: &[u64], shape: &[u64]) -> u64 {
    idx.iter().zip(shape).fold(0, |a, (i, n)| a * n + i)
}

/// Where the C-order element range `[lo, hi)` of an array of `shape` (non-empty, within it)
/// lies when it is one contiguous run of one chunk of shape `chunk`: that chunk's grid
/// coordinates and the run's element range in the chunk (C order); `None` otherwise.
fn chunk_run(shape: &[u64], chunk: &[u64], lo: u64, hi: u64) -> Option<(Vec<u64>, Range<u64>)> {
    let (first, last) = (unravel(lo, shape), unravel(hi - 1, shape));
    let coords: Vec<u64> = first.iter().zip(chunk).map(|(i, c)| i / c).collect();
    if last
        .iter()
        .zip(chunk)
        .map(|(i, c)| i / c)
        .ne(coords.iter().copied())
    {
        return None;
    }
    let local = |idx: &[u64]| -> Vec<u64> { idx.iter().zip(chunk).map(|(i, c)| i % c).collect() };
    let (a, b) = (ravel(&local(&first), chunk), ravel(&local(&last), chunk));
    // Both orders list the chunk's elements in the same sequence, so the run is contiguous in
    // the chunk exactly when no element of another chunk (or none past the array's edge)
    // lies between its ends: when both distances agree.
    (b - a == hi - 1 - lo).then_some((coords, a..b + 1))
}

impl ChunkEngine {
    /// The values of elements `[lo, hi)` of `var` (C order over its whole shape) without
    /// copying them, when they are one contiguous run of one chunk that is cached or can be
    /// (it is then loaded), or that is an uncompressed file of a local directory stored as is
    /// (it is then mapped). `Ok(None)` when [`ChunkEngine::read`] must do it instead: other
    /// ranges, chunks never written (fill), variables grown past their stored shape, sharded
    /// arrays. Fails as `read` would for a chunk that cannot be read or decoded.
    pub fn view(&self, ds: &Dataset, var: VarId, lo: u64, hi: u64) -> Result<Option<ChunkView>> {
        let v = ds.var(var);
        let shape = ds.var_shape(var);
        let total: u64 = shape.iter().product();
        if v.dims.is_empty() || lo >= hi || hi > total {
            return Ok(None);
        }
        let plan = self.plan(ds, var)?;
        if plan.grid != shape || plan.v3.as_ref().is_some_and(|c| c.is_sharded()) {
            return Ok(None);
        }
        let Some((coords, run)) = chunk_run(&shape, &plan.chunk_shape, lo, hi) else {
            return Ok(None);
        };
        let esize = plan.esize as u64;
        let bytes = (run.start * esize) as usize..(run.end * esize) as usize;
        let key = plan.chunk_key(&coords);
        if let Some(hit) = self.cache.get(&key) {
            return Ok(Some(ChunkView {
                bytes: Lent::Cached(hit),
                range: bytes,
            }));
        }
        if self.ranged(&plan) {
            if !matches!(plan.conv, Conversion::Identity) {
                return Ok(None);
            }
            return self.map_run(&plan, &key, bytes);
        }
        if !self.cache.fits(plan.chunk_elems * plan.esize) {
            return Ok(None);
        }
        Ok(self.load_once(&plan, &key)?.map(|chunk| ChunkView {
            bytes: Lent::Cached(chunk),
            range: bytes,
        }))
    }

    /// Maps `bytes` of the uncompressed chunk file at `key`, after checking its size as a
    /// read would.
    fn map_run(&self, plan: &VarPlan, key: &str, bytes: Range<usize>) -> Result<Option<ChunkView>> {
        let Some((file, size)) = self.map.open_local(key)? else {
            return Ok(None);
        };
        let expected = (plan.chunk_elems * plan.stored_esize) as u64;
        if size != expected {
            let e = Error::Codec {
                codec: "null".to_string(),
                reason: format!("chunk decoded to {size} bytes, expected {expected}"),
            };
            return Err(plan.bad(key, e));
        }
        let mapping = FileMapping::new(&file, bytes.start as u64, bytes.len())
            .map_err(|e| Error::io(format!("{} ({key})", self.map.describe()), e))?;
        let len = mapping.bytes().len();
        Ok(Some(ChunkView {
            bytes: Lent::Mapped(mapping),
            range: 0..len,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NcType, VarStorage, Variable, ZarrDtype};
    use crate::zmap::{FileMap, MemoryMap, ZMap};

    const SHAPE: [u64; 3] = [5, 4, 8];
    const CHUNKS: [u64; 3] = [2, 4, 4];

    /// An int variable of shape 5×4×8 in chunks 2×4×4 whose element at C-order position `i`
    /// holds `i`; the chunks (Zarr v2: full size, C order, padding past the edge) are made
    /// here element by element and handed to `put`.
    fn fixture(put: &dyn Fn(&str, Vec<u8>)) -> (Dataset, VarId) {
        let mut ds = Dataset::new();
        let dims = ["t", "y", "x"]
            .iter()
            .zip(SHAPE)
            .map(|(name, len)| ds.add_dim(Dataset::ROOT, name, len, false))
            .collect();
        let var = ds.add_var(Variable {
            name: "v".into(),
            group: Dataset::ROOT,
            nctype: NcType::Int,
            dims,
            string_width: 0,
            attrs: Vec::new(),
            storage: VarStorage {
                key: "v".into(),
                dtype: ZarrDtype::parse("<i4"),
                shape: SHAPE.to_vec(),
                chunks: CHUNKS.to_vec(),
                ..VarStorage::default()
            },
        });
        for c0 in 0..3 {
            for c2 in 0..2 {
                let mut bytes = Vec::new();
                for local in 0..CHUNKS.iter().product::<u64>() {
                    let l = unravel(local, &CHUNKS);
                    let g = [c0 * 2 + l[0], l[1], c2 * 4 + l[2]];
                    let value = if g[0] < SHAPE[0] {
                        ravel(&g, &SHAPE) as i32
                    } else {
                        -1
                    };
                    bytes.extend(value.to_le_bytes());
                }
                put(&format!("v/{c0}.0.{c2}"), bytes);
            }
        }
        (ds, var)
    }

    fn ints(range: Range<u64>) -> Vec<u8> {
        range.flat_map(|i| (i as i32).to_le_bytes()).collect()
    }

    #[test]
    fn views_of_cached_chunks_hold_the_values_and_release_frees_them() {
        let map = MemoryMap::new();
        let (ds, var) = fixture(&|k, v| map.insert(k, v).unwrap());
        let engine = ChunkEngine::new(Arc::new(map), 1 << 20);
        // A run in chunk (1,0,1): t=2, y=1, x=5..8; one across two chunks; one across rows.
        let v = engine.view(&ds, var, 77, 80).unwrap().unwrap();
        assert!(!v.is_mapped());
        assert_eq!(&v[..], &ints(77..80)[..]);
        assert!(engine.view(&ds, var, 70, 80).unwrap().is_none());
        assert!(engine.view(&ds, var, 76, 82).unwrap().is_none());
        assert_eq!(
            engine.stats().entries,
            1,
            "the chunk was loaded into the cache"
        );
        drop(v);
        for c in [0, 4, 64, 68, 128, 132] {
            engine.view(&ds, var, c, c + 1).unwrap().unwrap();
        }
        assert_eq!(engine.stats().entries, 6);
        // Chunk (0,0,0) spans elements 0..=59, (0,0,1) 4..=63, (1,0,0) 64..=123, (1,0,1)
        // 68..=127; the last row's are cut by the edge and end at 155 and 159.
        engine.release(&ds, var, 0, 127).unwrap();
        assert_eq!(engine.stats().entries, 3, "only chunks wholly passed go");
        // The row where `lo` falls is looked at again: (1,0,1) goes now.
        engine.release(&ds, var, 127, 128).unwrap();
        assert_eq!(engine.stats().entries, 2);
        engine.release(&ds, var, 128, 160).unwrap();
        assert_eq!(engine.stats().entries, 0);
        // Reloaded into recycled buffers, the values are right again.
        for (lo, hi) in [(0, 4), (132, 136), (156, 160)] {
            assert_eq!(
                &engine.view(&ds, var, lo, hi).unwrap().unwrap()[..],
                &ints(lo..hi)[..]
            );
        }
    }

    #[test]
    fn uncompressed_chunk_files_are_mapped_and_checked() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ds");
        let files = FileMap::open(&root, true).unwrap();
        let (ds, var) = fixture(&|k, v| files.put(k, &v).unwrap());
        let engine = ChunkEngine::new(Arc::new(FileMap::open(&root, false).unwrap()), 1 << 20);
        for (lo, hi) in [(0, 4), (77, 80), (156, 160), (4, 5)] {
            let v = engine.view(&ds, var, lo, hi).unwrap().unwrap();
            assert!(v.is_mapped());
            assert_eq!(&v[..], &ints(lo..hi)[..]);
        }
        assert_eq!(engine.stats().entries, 0, "mapped chunks are not cached");
        // A chunk never written reads as fill through `read`; a truncated one is an error
        // naming its key.
        std::fs::remove_file(root.join("v/0.0.0")).unwrap();
        assert!(engine.view(&ds, var, 0, 4).unwrap().is_none());
        std::fs::write(root.join("v/1.0.1"), [0u8; 12]).unwrap();
        match engine.view(&ds, var, 77, 80) {
            Err(Error::BadChunk { key, .. }) => assert_eq!(key, "v/1.0.1"),
            other => panic!("expected a bad chunk, got {other:?}"),
        }
    }

    /// Every element range of small arrays, against a brute-force walk of the elements.
    #[test]
    fn runs_are_found_exactly_when_contiguous_in_one_chunk() {
        for (shape, chunk) in [
            (vec![10], vec![4]),
            (vec![4, 6], vec![2, 6]),
            (vec![4, 6], vec![2, 4]),
            (vec![3, 5], vec![2, 2]),
            (vec![3, 2, 5], vec![1, 2, 5]),
            (vec![3, 4, 3], vec![2, 1, 3]),
        ] {
            let total: u64 = shape.iter().product();
            let place = |i: u64| {
                let idx = unravel(i, &shape);
                let coords: Vec<u64> = idx.iter().zip(&chunk).map(|(i, c)| i / c).collect();
                let local: Vec<u64> = idx.iter().zip(&chunk).map(|(i, c)| i % c).collect();
                (coords, ravel(&local, &chunk))
            };
            for lo in 0..total {
                for hi in lo + 1..=total {
                    let places: Vec<_> = (lo..hi).map(place).collect();
                    let one = places.iter().all(|(c, _)| *c == places[0].0)
                        && places.windows(2).all(|w| w[1].1 == w[0].1 + 1);
                    let want =
                        one.then(|| (places[0].0.clone(), places[0].1..places[0].1 + hi - lo));
                    assert_eq!(
                        chunk_run(&shape, &chunk, lo, hi),
                        want,
                        "{shape:?} {chunk:?} {lo}..{hi}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_truncated_mapping_fails_a_write_instead_of_raising_sigbus() {
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        file.write_all(&[7u8; 3 * 4096]).unwrap();
        let m = FileMapping::new(&file, 4096, 4096).unwrap();
        file.set_len(0).unwrap();
        let mut fds = [0; 2];
        // SAFETY: pipe writes two fds into the array.
        assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
        // The kernel copies from the mapping, as it does for a FUSE reply: the missing page
        // is an EFAULT for the call, not a signal for the process.
        // SAFETY: a write of the mapping's bytes to our own pipe.
        let n = unsafe { libc::write(fds[1], m.bytes().as_ptr().cast(), 4096) };
        let err = std::io::Error::last_os_error();
        // SAFETY: closing the two fds made above.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1]);
        }
        assert_eq!(n, -1);
        assert_eq!(err.raw_os_error(), Some(libc::EFAULT));
    }

    #[test]
    fn a_mapping_shows_the_file_from_any_offset() {
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..3 * 4096 + 100).map(|i| (i * 7 % 251) as u8).collect();
        file.write_all(&data).unwrap();
        for (offset, len) in [
            (0, 1),
            (0, data.len()),
            (4095, 2),
            (4096, 4096),
            (5000, 7388),
        ] {
            let m = FileMapping::new(&file, offset as u64, len).unwrap();
            assert_eq!(m.bytes(), &data[offset..offset + len]);
        }
    }
}
