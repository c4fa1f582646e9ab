//! The chunk engine: hyperslab reads (and writes) of variables, assembled from Zarr chunks that
//! are fetched through a zmap, decoded by the codec pipeline, converted to the native in-memory
//! representation and kept in a byte-bounded LRU cache.
//!
//! Reads of many chunks fetch and decode them in parallel (rayon) and scatter them into
//! disjoint parts of the caller's buffer. Writes are read-modify-write of whole chunks in the
//! cache; dirty chunks reach storage on [`ChunkEngine::flush`], on eviction, on invalidation,
//! when the engine is dropped, and together (encoded in parallel) once they fill half the
//! cache. A write makes room for its chunks in the cache before changing any, so that one
//! failing for room (storage refusing the chunks it would evict) changes nothing. A large
//! write stores the chunks it covers whole at once, in parallel, bypassing the cache. A
//! write-back that storage refused is not tried again by the writes that follow until a
//! window has passed (see [`pacing`]).

mod beyond;
mod budget;
mod cache;
mod convert;
mod pacing;
mod shard;
mod slab;
mod view;

use std::cell::{OnceCell, RefCell};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use rayon::prelude::*;

pub use cache::CacheStats;
pub(crate) use shard::vlen_max_len;
pub use view::{ChunkView, StoredRun, MAX_STORED_RUNS};

use crate::codec::{netcdf_element_size, Pipeline};
use crate::error::quoted;
use crate::model::{ChunkKeyEncoding, ChunkOrder, CodecSpec, Dataset, NcType, VarId, VarStorage};
use crate::zmap::{Feed, ZMap};
use crate::{Error, Result};
use budget::{ByteBudget, Grant};
use cache::ChunkCache;
use convert::Conversion;
use pacing::WriteBackPacing;
use slab::{Mapping, Span};

/// A hyperslab: per dimension, the first index, the number of indices and the step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hyperslab {
    /// First index per dimension.
    pub start: Vec<u64>,
    /// Number of indices per dimension.
    pub count: Vec<u64>,
    /// Step per dimension (1 for contiguous).
    pub stride: Vec<u64>,
}

impl Hyperslab {
    /// The whole of an array of shape `shape`.
    pub fn whole(shape: &[u64]) -> Self {
        Hyperslab {
            start: vec![0; shape.len()],
            count: shape.to_vec(),
            stride: vec![1; shape.len()],
        }
    }

    /// Number of elements selected (saturating).
    pub fn len(&self) -> u64 {
        self.count.iter().fold(1u64, |a, &c| a.saturating_mul(c))
    }

    /// Whether no element is selected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks the slab against an array of `shape` (ranks, zero strides, the last index of
    /// each dimension) and returns the number of elements it selects. A reader that splits a
    /// request checks the whole of it first, so that an error reports the numbers given.
    pub fn validate(&self, shape: &[u64]) -> Result<u64> {
        slab::validate(shape, self)
    }
}

/// Parses a byte size such as `0`, `4096`, `64K`, `256M`, `2G`, `1T` (binary multiples; an
/// optional trailing `B` or `iB` is accepted: `64MiB`, `64MB`). A size of that form after a
/// `-` is out of range ([`Error::Invalid`]), not of the wrong form ([`Error::Usage`]), unless
/// it is 0.
pub fn parse_size(text: &str) -> Result<usize> {
    let bad = || {
        Error::Usage(format!(
            "invalid size {} (examples: 0, 4096, 64K, 256M, 2G)",
            quoted(text)
        ))
    };
    let t = text.trim();
    let (negative, t) = match t.strip_prefix('-') {
        Some(magnitude) => (true, magnitude),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix("ib"))
        .or_else(|| t.strip_suffix(['B', 'b']))
        .unwrap_or(t);
    let (digits, shift) = match t.chars().last() {
        Some('k' | 'K') => (&t[..t.len() - 1], 10),
        Some('m' | 'M') => (&t[..t.len() - 1], 20),
        Some('g' | 'G') => (&t[..t.len() - 1], 30),
        Some('t' | 'T') => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad());
    }
    let too_large = || {
        Error::Invalid(format!(
            "size {} is too large (at most {} bytes)",
            quoted(text),
            usize::MAX
        ))
    };
    if negative && digits.bytes().any(|b| b != b'0') {
        return Err(Error::Invalid(format!(
            "size {} is negative (a size is 0 or more bytes)",
            quoted(text)
        )));
    }
    let n: u64 = digits.parse().map_err(|_| too_large())?;
    let bytes = n.checked_mul(1u64 << shift).ok_or_else(too_large)?;
    usize::try_from(bytes).map_err(|_| too_large())
}

/// Everything needed to turn a variable's stored chunks into native ones and back, built once
/// per variable (the codec pipeline in particular).
#[derive(Debug)]
struct VarPlan {
    /// The storage description the plan was built from, to notice a changed model.
    storage: VarStorage,
    nctype: NcType,
    string_width: usize,
    fqn: String,
    pipeline: Pipeline,
    conv: Conversion,
    /// Native element size.
    esize: usize,
    /// Stored element size.
    stored_esize: usize,
    /// The chunk grid's array shape (the stored shape).
    grid: Vec<u64>,
    chunk_shape: Vec<u64>,
    chunk_shape_usize: Vec<usize>,
    chunk_elems: usize,
    /// One native fill element.
    fill: Vec<u8>,
    /// The Zarr v3 codec chain, which decodes chunks in place of `pipeline` and `conv`.
    v3: Option<shard::V3Chain>,
}

impl VarPlan {
    fn build(ds: &Dataset, var: VarId) -> Result<VarPlan> {
        let v = ds.var(var);
        let fqn = ds.var_fqn(var);
        let unreadable = |reason: String| Error::Unreadable {
            var: fqn.clone(),
            reason,
        };
        let st = &v.storage;
        if let Some(reason) = &st.unreadable {
            return Err(unreadable(reason.clone()));
        }
        let dtype = st
            .dtype
            .as_ref()
            .ok_or_else(|| unreadable("unsupported stored dtype".into()))?;
        let esize = v.element_size();
        // Zarr v2 object strings are variable-length values, which the v3 chain decodes.
        let v3_codecs = match &st.codecs {
            CodecSpec::V3(codecs) => Some(codecs.clone()),
            CodecSpec::V2 {
                filters,
                compressor,
            } => crate::codec::object_string_chain(
                filters,
                compressor.as_ref(),
                st.order == ChunkOrder::F,
                st.shape.len(),
            ),
        };
        let v3 = match v3_codecs {
            Some(codecs) => Some(
                shard::V3Chain::new(&codecs, &st.chunks, dtype, v.nctype, esize)
                    .map_err(|e| unreadable(e.to_string()))?,
            ),
            None => None,
        };
        // A v3 chain converts elements itself (half floats, variable-length strings).
        let conv = match &v3 {
            Some(_) => Conversion::Identity,
            None => Conversion::new(dtype, v.nctype, esize).map_err(unreadable)?,
        };
        let stored_esize = conv.stored_size(esize);
        // A sharded array is read by inner chunk.
        let chunks = v3
            .as_ref()
            .map_or_else(|| st.chunks.clone(), |c| c.grid_chunks());
        let scalar_in_1 = v.dims.is_empty() && st.shape == [1];
        if st.shape.len() != v.dims.len() && !scalar_in_1 {
            return Err(unreadable(format!(
                "stored shape {:?} does not match {} dimension(s)",
                st.shape,
                v.dims.len()
            )));
        }
        if chunks.len() != st.shape.len() || chunks.contains(&0) {
            return Err(unreadable(format!(
                "invalid chunks {:?} for shape {:?}",
                chunks, st.shape
            )));
        }
        let chunk_bytes = chunks
            .iter()
            .try_fold(esize as u64, |a, &c| a.checked_mul(c))
            .filter(|n| *n <= crate::model::MAX_CHUNK_BYTES);
        if chunk_bytes.is_none() {
            return Err(unreadable(format!(
                "chunks {chunks:?} of {esize}-byte elements are larger than the {} bytes \
                 nczarrfs decodes",
                crate::model::MAX_CHUNK_BYTES
            )));
        }
        let chunk_shape_usize = chunks
            .iter()
            .map(|&c| usize::try_from(c).ok())
            .collect::<Option<Vec<usize>>>();
        let chunk_elems = chunk_shape_usize
            .as_ref()
            .and_then(|s| s.iter().try_fold(1usize, |a, &c| a.checked_mul(c)))
            .filter(|n| n.checked_mul(esize.max(stored_esize)).is_some());
        let (Some(chunk_shape_usize), Some(chunk_elems)) = (chunk_shape_usize, chunk_elems) else {
            return Err(unreadable(format!("chunks {chunks:?} are too large")));
        };
        let pipeline = match &st.codecs {
            _ if v3.is_some() => Ok(Pipeline::default()),
            CodecSpec::V2 {
                filters,
                compressor,
            } => Pipeline::from_v2(
                filters,
                compressor.as_ref(),
                netcdf_element_size(v.nctype, dtype.size),
            ),
            CodecSpec::V3(_) => Ok(Pipeline::default()),
        }
        .map_err(|e| unreadable(e.to_string()))?;
        // No fill value: on Zarr v2 (`fill_value: null`) unwritten elements are zeros, as
        // netcdf-c and zarr-python read them. Zarr v3 requires a fill value, so a variable
        // without one (NCZarr's `no_fill`) declares netCDF's default, which other readers
        // give for chunks not stored: so do reads here, and a shard leaves out only inner
        // chunks of that value (not chunks of zeros, which would then read as the default).
        let zarr3 = v3.is_some()
            || matches!(st.codecs, CodecSpec::V3(_))
            || matches!(st.key_encoding, ChunkKeyEncoding::Default { .. });
        let mut fill = match &st.fill_value {
            Some(f) => f.clone(),
            None if zarr3 => v.nctype.default_fill(),
            None => Vec::new(),
        };
        fill.resize(esize, 0);
        Ok(VarPlan {
            storage: st.clone(),
            nctype: v.nctype,
            string_width: v.string_width,
            fqn,
            pipeline,
            conv,
            esize,
            stored_esize,
            grid: st.shape.clone(),
            chunk_shape: chunks,
            chunk_shape_usize,
            chunk_elems,
            fill,
            v3,
        })
    }

    /// How native elements become stored ones: the v3 chain's array-to-bytes conversion, or
    /// the v2 one.
    fn element_conversion(&self) -> Conversion {
        self.v3
            .as_ref()
            .map_or(self.conv, shard::V3Chain::element_conversion)
    }

    /// Shares the shard indices of `earlier`, the plan this one replaces, when the shard
    /// layout is the same: chunks dirtied through `earlier` are still written back through
    /// it, and a shard it rewrites must not leave this plan an index of the old shard.
    /// (Writes never change an array's codecs or chunks; only its shape grows.)
    fn share_shard_state(&mut self, earlier: &VarPlan) {
        let same_layout = self.storage.codecs == earlier.storage.codecs
            && self.storage.chunks == earlier.storage.chunks;
        if let (true, Some(chain), Some(old)) = (same_layout, &mut self.v3, &earlier.v3) {
            chain.share_shard_state(old);
        }
    }

    /// Whether the plan still describes variable `v`.
    fn matches(&self, v: &crate::model::Variable) -> bool {
        self.storage == v.storage && self.nctype == v.nctype && self.string_width == v.string_width
    }

    /// The engine's key of the chunk at grid coordinates `coords`: its zmap key, or
    /// `shard_key#inner` for an inner chunk of a sharded array.
    fn chunk_key(&self, coords: &[u64]) -> String {
        let inner = self
            .v3
            .as_ref()
            .and_then(|c| c.inner_key(coords, |s| self.grid_key(s)));
        inner.unwrap_or_else(|| self.grid_key(coords))
    }

    /// The grid coordinates of the (outer) chunk whose zmap key is `key`, spelt as
    /// [`VarPlan::grid_key`] spells it (a read finds no other spelling); `None` for any other
    /// key under the variable's (its metadata, a stray file, a chunk beyond the shape).
    fn grid_coords(&self, key: &str) -> Option<Vec<u64>> {
        let rest = key
            .strip_prefix(self.storage.key.as_str())?
            .strip_prefix('/')?;
        let rank = self.grid.len();
        let (sep, parts) = match self.storage.key_encoding {
            ChunkKeyEncoding::V2 { .. } if rank == 0 => return (rest == "0").then(Vec::new),
            ChunkKeyEncoding::V2 { separator } => (separator, rest),
            ChunkKeyEncoding::Default { separator } => {
                let after = rest.strip_prefix('c')?;
                if rank == 0 {
                    return after.is_empty().then(Vec::new);
                }
                (separator, after.strip_prefix(separator)?)
            }
        };
        let coords: Vec<u64> = parts
            .split(sep)
            .map(|p| p.parse::<u64>().ok().filter(|n| n.to_string() == p))
            .collect::<Option<_>>()?;
        let inside = coords.len() == rank
            && coords
                .iter()
                .zip(&self.grid)
                .zip(&self.storage.chunks)
                .all(|((&c, &n), &size)| c < n.div_ceil(size.max(1)));
        inside.then_some(coords)
    }

    /// The zmap key of the (outer) chunk at chunk grid coordinates `coords`.
    fn grid_key(&self, coords: &[u64]) -> String {
        let mut key = self.storage.key.clone();
        key.push('/');
        let (sep, mut first) = match self.storage.key_encoding {
            ChunkKeyEncoding::V2 { separator } => {
                if coords.is_empty() {
                    key.push('0');
                }
                (separator, true)
            }
            ChunkKeyEncoding::Default { separator } => {
                key.push('c');
                (separator, false)
            }
        };
        for c in coords {
            if !first {
                key.push(sep);
            }
            first = false;
            key.push_str(&c.to_string());
        }
        key
    }

    /// A whole chunk of fill values.
    fn fill_chunk(&self) -> Vec<u8> {
        if self.fill.iter().all(|&b| b == 0) {
            return vec![0; self.chunk_elems * self.esize];
        }
        self.fill.repeat(self.chunk_elems)
    }

    /// A chunk that does not decode: its key, and the variable in the reason.
    fn bad(&self, key: &str, e: Error) -> Error {
        Error::BadChunk {
            key: key.to_string(),
            reason: format!("{}: {e}", self.fqn),
        }
    }

    /// Stored chunk → native C-order chunk.
    fn decode(&self, key: &str, raw: Vec<u8>) -> Result<Vec<u8>> {
        if let Some(chain) = &self.v3 {
            return chain.decode(raw).map_err(|e| self.bad(key, e));
        }
        let expected = self.chunk_elems * self.stored_esize;
        let stored = if self.pipeline.is_empty() && raw.len() == expected {
            raw
        } else {
            // The bounded decode refuses a chunk of the wrong size (Zarr v2 chunks are always
            // full, even at the array's edge) without inflating a hostile one.
            let mut stored = vec![0u8; expected];
            with_scratch(|s| self.pipeline.decode_into(&raw, &mut stored, &mut s.stages))
                .map_err(|e| self.bad(key, e))?;
            stored
        };
        let native = self.conv.to_native(stored);
        Ok(convert::to_c_order(
            native,
            &self.chunk_shape_usize,
            self.esize,
            self.storage.order,
        ))
    }

    /// Whether a chunk can be decoded where it lands in a caller's buffer: Zarr v2 codecs,
    /// an element conversion that keeps sizes, and elements already in C order.
    fn direct(&self) -> bool {
        self.v3.is_none()
            && matches!(
                self.conv,
                Conversion::Identity | Conversion::Swap(_) | Conversion::Bool
            )
            && (self.storage.order == ChunkOrder::C
                || self.chunk_shape_usize.iter().filter(|&&n| n > 1).count() <= 1)
    }

    /// Reads and decodes the chunk at `key` into `out` (one whole native chunk), for a plan
    /// where [`VarPlan::direct`] holds; `Ok(false)` if the chunk was never written.
    ///
    /// Uncompressed chunks are read straight into `out`; compressed ones are decoded from a
    /// mapping of their file (local maps) or through this thread's scratch buffers, so
    /// nothing is allocated per chunk.
    fn read_direct(&self, map: &dyn ZMap, key: &str, out: &mut [u8]) -> Result<bool> {
        if self.pipeline.is_empty() {
            match map.get_exact(key, out)? {
                None => return Ok(false),
                Some(n) if n == out.len() as u64 => {}
                Some(n) => {
                    // The same complaint as the pipeline's for a raw chunk of the wrong size.
                    let e = Error::Codec {
                        codec: "null".to_string(),
                        reason: format!("chunk decoded to {n} bytes, expected {}", out.len()),
                    };
                    return Err(self.bad(key, e));
                }
            }
        } else {
            let found = with_scratch(|s| {
                map.read_with(key, &mut s.raw, &mut |raw| {
                    self.pipeline
                        .decode_into(raw, out, &mut s.stages)
                        .map_err(|e| self.bad(key, e))
                })
            })?;
            if !found {
                return Ok(false);
            }
        }
        self.conv.to_native_in_place(out);
        Ok(true)
    }

    /// Encodes a native C-order chunk and hands the stored bytes to `store`: the native bytes
    /// themselves when they are stored as they are (no codec, no conversion, C order), else
    /// encoded through this thread's scratch buffers, so that a chunk whose elements need no
    /// conversion is neither copied nor given fresh buffers.
    fn encode_then(&self, native: &[u8], store: impl FnOnce(&[u8]) -> Result<()>) -> Result<()> {
        if let Some(chain) = &self.v3 {
            if chain.is_sharded() {
                return Err(Error::Invalid(format!(
                    "inner chunks of {} are stored by rewriting their shard",
                    self.fqn
                )));
            }
            return store(&chain.encode(native)?);
        }
        let reorders = self.storage.order != ChunkOrder::C
            && self.chunk_shape_usize.iter().filter(|&&n| n > 1).count() > 1;
        let converted;
        let elements = if matches!(self.conv, Conversion::Identity) && !reorders {
            native
        } else {
            let data = convert::from_c_order(
                native.to_vec(),
                &self.chunk_shape_usize,
                self.esize,
                self.storage.order,
            );
            converted = self.conv.to_stored(data);
            &converted[..]
        };
        if self.pipeline.is_empty() {
            return store(elements);
        }
        with_scratch(|s| store(self.pipeline.encode_with(elements, &mut s.stages)?))
    }

    /// Whether a write at `spans` (of a slab starting at `start` with `stride`) sets every
    /// element of that chunk that lies inside the array.
    fn covers(&self, start: &[u64], stride: &[u64], spans: &[Span]) -> bool {
        spans.iter().enumerate().all(|(d, s)| {
            let cs = self.chunk_shape[d];
            let lo = s.chunk.saturating_mul(cs);
            let hi = lo.saturating_add(cs).min(self.grid[d]);
            stride[d] == 1 && start[d] + s.k_lo == lo && start[d] + s.k_hi == hi
        })
    }
}

/// A slab in the coordinates of the chunk grid, with what the read/write loops need.
struct GridSlab<'a> {
    plan: &'a Arc<VarPlan>,
    start: Vec<u64>,
    stride: Vec<u64>,
    /// Per dimension, the chunks touched and their slab index ranges.
    spans: Vec<Vec<Span>>,
    /// C-order element strides of the caller's buffer.
    out_strides: Vec<u64>,
}

impl GridSlab<'_> {
    fn mapping(&self) -> Mapping<'_> {
        Mapping {
            start: &self.start,
            stride: &self.stride,
            chunk_shape: &self.plan.chunk_shape,
            out_strides: &self.out_strides,
            esize: self.plan.esize,
        }
    }
}

/// `parts` cut into runs of `size` (the last may be shorter), each allocated to its length.
/// (Cutting with `Vec::split_off` left every run with the capacity of all the parts after it:
/// memory quadratic in the number of rows of chunks, gigabytes for a read of 80,000 chunks.)
fn windows_of<T>(parts: Vec<T>, size: usize) -> Vec<Vec<T>> {
    let size = size.max(1);
    let mut windows = Vec::with_capacity(parts.len().div_ceil(size));
    let mut parts = parts.into_iter();
    loop {
        let window: Vec<T> = parts.by_ref().take(size).collect();
        if window.is_empty() {
            return windows;
        }
        windows.push(window);
    }
}

/// All combinations of one span per dimension, first dimension slowest.
fn combinations(spans: &[Vec<Span>]) -> Vec<Vec<Span>> {
    let mut out: Vec<Vec<Span>> = vec![Vec::new()];
    for dim in spans {
        out = out
            .into_iter()
            .flat_map(|prefix| {
                dim.iter().map(move |s| {
                    let mut p = prefix.clone();
                    p.push(*s);
                    p
                })
            })
            .collect();
    }
    out
}

/// Copies one chunk (or fill, for a missing chunk) into its part of the buffer.
fn place(
    mapping: &Mapping<'_>,
    spans: &[Span],
    chunk: Option<&Vec<u8>>,
    out: &mut [u8],
    base: u64,
    fill: &[u8],
) {
    match chunk {
        Some(data) => mapping.scatter(spans, data, out, base),
        None => mapping.scatter_fill(spans, fill, out, base),
    }
}

/// Per-thread buffers of the read path: a chunk's stored bytes and the intermediate stages
/// of its codec chain, reused from chunk to chunk so that reading allocates (and
/// page-faults) nothing per chunk.
#[derive(Default)]
struct Scratch {
    raw: Vec<u8>,
    stages: [Vec<u8>; 2],
    /// Bytes of these buffers counted in [`SCRATCH_KEPT`].
    kept: usize,
}

impl Drop for Scratch {
    fn drop(&mut self) {
        SCRATCH_KEPT.fetch_sub(self.kept, Ordering::Relaxed);
    }
}

/// Scratch buffers that grew beyond this are released after use: a thread that once read a
/// huge chunk must not keep its memory.
const SCRATCH_KEEP: usize = 32 << 20;

/// Most bytes of scratch buffers that all threads together keep between chunks; a thread
/// whose buffers would take the total beyond it frees them after use. Each of a mount's
/// session threads kept buffers the size of the chunks it decoded (two stages of a
/// shuffle + zlib chain), which eight threads held beside the cache for good.
const SCRATCH_KEPT_MAX: usize = 16 << 20;

/// Bytes of scratch buffers kept now, over all threads.
static SCRATCH_KEPT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

/// Runs `f` so that its parallel loops keep up to `concurrency` requests in flight: on a map
/// with request latency (S3) in a pool of that many threads, which mostly wait on the network
/// (the global pool has one thread per core, so it would keep only that many puts going).
fn io_parallel<R: Send>(concurrency: usize, f: impl FnOnce() -> R + Send) -> R {
    static POOL: OnceLock<Option<rayon::ThreadPool>> = OnceLock::new();
    if concurrency <= 1 {
        return f();
    }
    let pool = POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(concurrency)
            .thread_name(|i| format!("nczarrfs-io-{i}"))
            .build()
            .ok()
    });
    match pool {
        Some(pool) => pool.install(f),
        None => f(),
    }
}

/// Runs `f` with this thread's scratch buffers, or fresh ones when they are in use (a rayon
/// worker may start another read while one waits).
fn with_scratch<R>(f: impl FnOnce(&mut Scratch) -> R) -> R {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut s) => {
            let r = f(&mut s);
            let Scratch { raw, stages, kept } = &mut *s;
            let mut held = 0;
            for b in std::iter::once(&mut *raw).chain(stages.iter_mut()) {
                if b.capacity() > SCRATCH_KEEP {
                    *b = Vec::new();
                }
                held += b.capacity();
            }
            let others = SCRATCH_KEPT.fetch_add(held, Ordering::Relaxed) - *kept;
            SCRATCH_KEPT.fetch_sub(*kept, Ordering::Relaxed);
            *kept = held;
            if others + held > SCRATCH_KEPT_MAX {
                for b in std::iter::once(raw).chain(stages.iter_mut()) {
                    *b = Vec::new();
                }
                SCRATCH_KEPT.fetch_sub(held, Ordering::Relaxed);
                *kept = 0;
            }
            r
        }
        Err(_) => f(&mut Scratch::default()),
    })
}

/// The grid coordinates of the chunk objects (shards, in a sharded array) stored for `plan`'s
/// variable, in C order: one listing of its keys, not a probe of each place in the grid,
/// which an array of a huge shape written in few places has far too many of to visit.
fn stored_grid(map: &dyn ZMap, plan: &VarPlan) -> Result<Vec<Vec<u64>>> {
    let mut coords: Vec<Vec<u64>> = map
        .keys_under(&plan.storage.key)?
        .iter()
        .filter_map(|key| plan.grid_coords(key))
        .collect();
    coords.sort_unstable();
    Ok(coords)
}

/// Folds per-chunk `(grid coordinates, length, CRC-32C)` records (`None`: no object) into
/// one CRC-32C over each present chunk's coordinates, length and CRC.
fn digest(records: &[Option<(&[u64], u64, u32)>]) -> u32 {
    records
        .iter()
        .flatten()
        .fold(0, |acc, &(coords, len, crc)| {
            let acc = coords
                .iter()
                .fold(acc, |acc, c| crc32c::crc32c_append(acc, &c.to_le_bytes()));
            let mut rec = [0u8; 12];
            rec[..8].copy_from_slice(&len.to_le_bytes());
            rec[8..].copy_from_slice(&crc.to_le_bytes());
            crc32c::crc32c_append(acc, &rec)
        })
}

/// A write that failed ([`ChunkEngine::try_write`]).
#[derive(Debug)]
pub struct FailedWrite {
    /// Why it failed.
    pub error: Error,
    /// Whether some of its chunks took the new values before it failed (only a write that
    /// cannot be held whole in the cache); if not, it changed nothing.
    pub in_part: bool,
}

/// A chunk's spans and its native data (`None`: never written, reads as fill).
type Fetched = (Vec<Span>, Option<Arc<Vec<u8>>>);

/// How many chunks one worker fetches before scattering them, to bound memory on huge reads.
const BATCH: usize = 16;

/// [`ChunkEngine::release`] leaves alone arrays with more chunks than this in one row of
/// chunks (along the first dimension): looking them all up would cost more than it saves.
const RELEASE_ROW_MAX: u64 = 4096;

/// A chunk looked up ahead of decoding by [`ChunkEngine::prefetch`].
enum Ahead {
    /// It was in the cache.
    Cached(Arc<Vec<u8>>),
    /// Its stored bytes, or why they could not be read.
    Raw(Result<Option<Vec<u8>>>),
}

/// Chunks of one read fetched ahead of decoding, taken by `fetch`: the ones that have arrived,
/// and the ones still on their way, which `fetch` waits for rather than requesting again.
struct Prefetched {
    chunks: Mutex<AheadChunks>,
    arrived: Condvar,
    /// The cache's epoch before any chunk was read, for caching them
    /// ([`ChunkCache::insert_read`]).
    epoch: u64,
}

#[derive(Default)]
struct AheadChunks {
    ready: HashMap<String, Ahead>,
    pending: HashSet<String>,
}

impl Prefetched {
    /// Nothing fetched yet; `epoch` is the cache's now.
    fn new(epoch: u64) -> Self {
        Prefetched {
            chunks: Mutex::default(),
            arrived: Condvar::new(),
            epoch,
        }
    }

    fn chunks(&self) -> MutexGuard<'_, AheadChunks> {
        self.chunks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records that `key` is on its way.
    fn expect(&self, key: &str) {
        self.chunks().pending.insert(key.to_string());
    }

    /// Hands over `key`'s chunk to its reader.
    fn arrive(&self, key: String, chunk: Ahead) {
        let mut chunks = self.chunks();
        chunks.pending.remove(&key);
        chunks.ready.insert(key, chunk);
        drop(chunks);
        self.arrived.notify_all();
    }

    /// The chunk at `key` once it has arrived, if it was fetched ahead at all.
    fn take(&self, key: &str) -> Option<Ahead> {
        let mut chunks = self.chunks();
        loop {
            if let Some(chunk) = chunks.ready.remove(key) {
                return Some(chunk);
            }
            if !chunks.pending.contains(key) {
                return None;
            }
            chunks = self.arrived.wait(chunks).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// A prefetch's requests on a map with request latency (S3), named as the in-flight budget
/// has room for them: as many as it has free at first, then, as each chunk is cached and its
/// share goes back, the next ones, so that the requests in flight stay as many as the budget
/// allows until the last chunk rather than draining after each part. When nothing is in flight
/// and the budget is all taken, it waits, holding nothing, for one chunk's share (one chunk
/// larger than the whole budget goes alone). It holds each chunk's loading gate until that
/// chunk is cached, so a reader that wants it waits for it instead of requesting it again;
/// chunks someone else is loading already are left to them. The chunks are decoded one after
/// the other, as they arrive, on the thread of the prefetch: on rayon, it could run, while it
/// waits, a reader's task that waits for one of the gates it holds.
struct PreloadFeed<'a> {
    engine: &'a ChunkEngine,
    plan: &'a Arc<VarPlan>,
    /// The budget a chunk takes while it is fetched and decoded.
    unit: usize,
    /// The chunks to load, in order.
    keys: &'a [String],
    /// The loading gate of each of `keys`, once it is named or left to someone else.
    gates: &'a [OnceCell<Arc<Mutex<()>>>],
    /// The first of `keys` not named yet.
    next: usize,
    /// How many more chunks `share` has room for.
    room: usize,
    /// The part of the budget taken and not yet given to a chunk.
    share: Option<Grant>,
    /// The chunks named, in order, until each arrives.
    loads: Vec<Option<Load<'a>>>,
    /// The first failure: nothing more is named after it.
    result: Result<()>,
}

/// A chunk of a [`PreloadFeed`] in flight.
struct Load<'a> {
    /// Its place in the feed's `keys`.
    slot: usize,
    /// Its loading gate, locked.
    _turn: MutexGuard<'a, ()>,
    /// Its share of the budget.
    _in_flight: Option<Grant>,
    /// The cache's epoch from before it was requested.
    epoch: u64,
}

impl Feed for PreloadFeed<'_> {
    fn next_keys(&mut self, in_flight: usize) -> Vec<String> {
        let mut named = Vec::new();
        if self.result.is_err() {
            (self.room, self.share) = (0, None);
            return named;
        }
        let (engine, gates) = (self.engine, self.gates);
        while self.next < self.keys.len() {
            if self.room == 0 {
                let wanted = self.keys.len() - self.next;
                let share = if in_flight == 0 && named.is_empty() {
                    Some(engine.prefetch_share(self.unit, wanted))
                } else {
                    engine.prefetch_share_now(self.unit, wanted)
                };
                // No room now: the next object to arrive makes some.
                let Some((room, share)) = share else {
                    break;
                };
                (self.room, self.share) = (room, share);
            }
            let slot = self.next;
            self.next += 1;
            let key = &self.keys[slot];
            if engine.cache.contains(key) {
                continue;
            }
            let gate = gates[slot].get_or_init(|| {
                let mut loading = engine.loading.lock().unwrap_or_else(|e| e.into_inner());
                Arc::clone(loading.entry(key.clone()).or_default())
            });
            let turn = match gate.try_lock() {
                Ok(turn) => turn,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => continue,
            };
            if engine.cache.get(key).is_some() {
                continue;
            }
            self.room -= 1;
            self.loads.push(Some(Load {
                slot,
                _turn: turn,
                _in_flight: self.share.as_mut().map(|g| g.split_off(self.unit)),
                epoch: engine.cache.epoch(),
            }));
            named.push(key.clone());
        }
        if self.next == self.keys.len() {
            // What the chunks left to others or found cached would have taken goes back.
            (self.room, self.share) = (0, None);
        }
        named
    }

    fn arrived(&mut self, index: usize, object: Result<Option<Vec<u8>>>) {
        let Some(load) = self.loads.get_mut(index).and_then(Option::take) else {
            return;
        };
        let key = &self.keys[load.slot];
        if self.result.is_ok() {
            self.result = object.and_then(|raw| {
                self.engine
                    .decode_keep(self.plan, key, raw, Some(load.epoch))
                    .map(drop)
            });
        }
        // Its gate opens, and its share goes back, as soon as it is cached: a reader waiting
        // for it does not wait for the slowest request in flight, nor the next request.
        let slot = load.slot;
        drop(load);
        if let Some(gate) = self.gates[slot].get() {
            self.engine.done_loading(key, gate);
        }
    }
}

/// The budget of [`limit_bytes_in_flight`], shared by every engine made after it was set.
static IN_FLIGHT: OnceLock<Arc<ByteBudget>> = OnceLock::new();

/// Why every read of `var`'s values fails, or `None` when they can be read: what the
/// engine refuses the variable for before fetching a chunk (an unsupported dtype or codec, a
/// codec parameter it cannot take, an invalid chunk grid), as a mount's metadata reports it.
pub fn unreadable_reason(ds: &Dataset, var: VarId) -> Option<String> {
    match VarPlan::build(ds, var) {
        Ok(_) => None,
        Err(Error::Unreadable { reason, .. }) => Some(reason),
        Err(e) => Some(e.to_string()),
    }
}

/// Limits the bytes that chunks hold outside the caches of this process's engines while they
/// are fetched and decoded (their stored bytes and their decoded values) to about `bytes`, for
/// the engines made from now on: reads wait for their share, prefetches load what fits and go on as room frees.
/// A mount sets it, so that its memory stays bounded however many readers it serves; the
/// command line, whose reads come one at a time, does not. The first call wins.
pub fn limit_bytes_in_flight(bytes: usize) {
    let _ = IN_FLIGHT.set(ByteBudget::new(bytes));
}

/// Reads and writes variables' values through a chunk cache.
#[derive(Debug)]
pub struct ChunkEngine {
    map: Arc<dyn ZMap>,
    cache: ChunkCache<Arc<VarPlan>>,
    plans: Mutex<HashMap<String, Arc<VarPlan>>>,
    /// Serialises read-modify-write of chunks.
    write_lock: Mutex<()>,
    /// Chunks being loaded into the cache, each with the lock its loader holds.
    loading: Mutex<HashMap<String, Arc<Mutex<()>>>>,
    /// Bytes chunks may hold outside the cache while they are loaded (see
    /// [`limit_bytes_in_flight`]); `None`: unbounded. A share is taken once, by the public
    /// entry point (`read`, `view`, `preload`), never by a thread that already holds one.
    in_flight: Option<Arc<ByteBudget>>,
    /// Failed write-backs, which writes do not restart at once.
    pacing: WriteBackPacing,
}

impl ChunkEngine {
    /// An engine over `map` whose cache holds at most `cache_bytes` of decoded chunks.
    pub fn new(map: Arc<dyn ZMap>, cache_bytes: usize) -> Self {
        ChunkEngine {
            cache: ChunkCache::new(cache_bytes),
            plans: Mutex::new(HashMap::new()),
            write_lock: Mutex::new(()),
            loading: Mutex::new(HashMap::new()),
            in_flight: IN_FLIGHT.get().cloned(),
            pacing: WriteBackPacing::new(map.write_back_backoff()),
            map,
        }
    }

    /// Bytes a chunk of `plan` holds outside the cache while it is loaded: its stored bytes
    /// (at most about its stored size, compressed or not) and its decoded values.
    fn bytes_in_flight(plan: &VarPlan) -> usize {
        plan.chunk_elems
            .saturating_mul(plan.esize.saturating_add(plan.stored_esize))
    }

    /// Waits for the share of the in-flight budget that loading the chunks at `keys` needs:
    /// those neither cached nor being loaded by someone else, who holds their share (nothing
    /// when there are none, or without a budget).
    fn reserve_in_flight(
        &self,
        plan: &VarPlan,
        keys: impl Iterator<Item = String>,
    ) -> Option<Grant> {
        let budget = self.in_flight.as_ref()?;
        let unit = Self::bytes_in_flight(plan);
        let mut bytes = 0usize;
        for key in keys {
            if !self.cache.contains(&key) && !self.is_loading(&key) {
                bytes = bytes.saturating_add(unit);
                // More than the whole budget goes alone anyway: no need to count on.
                if bytes >= budget.limit() {
                    break;
                }
            }
        }
        (bytes > 0).then(|| budget.acquire(bytes))
    }

    /// The cache bound in bytes.
    pub fn cache_capacity(&self) -> usize {
        self.cache.capacity()
    }

    /// Cache counters (hits, misses, evictions, bytes and entries held).
    pub fn stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// The zmap key of `var`'s last chunk as its stored shape is now (of its shard, in a
    /// sharded array): the longest of its chunk keys, which a directory store checks against
    /// the system's limit on path lengths before a writer stores anything.
    pub fn last_chunk_key(&self, ds: &Dataset, var: VarId) -> Result<String> {
        let plan = self.plan(ds, var)?;
        let last: Vec<u64> = plan
            .grid
            .iter()
            .zip(&plan.chunk_shape)
            .map(|(&len, &chunk)| len.max(1).div_ceil(chunk.max(1)) - 1)
            .collect();
        Ok(plan.grid_key(&last))
    }

    /// The plan of `var`, built on first use and rebuilt when its storage description changed.
    fn plan(&self, ds: &Dataset, var: VarId) -> Result<Arc<VarPlan>> {
        let v = ds.var(var);
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = plans.get(&v.storage.key) {
            if p.matches(v) {
                return Ok(Arc::clone(p));
            }
        }
        let mut plan = VarPlan::build(ds, var)?;
        if let Some(earlier) = plans.get(&v.storage.key) {
            plan.share_shard_state(earlier);
        }
        let plan = Arc::new(plan);
        plans.insert(v.storage.key.clone(), Arc::clone(&plan));
        Ok(plan)
    }

    /// Encodes and stores dirty chunks the cache batched ([`inner_chunk_batch`]): the inner
    /// chunks of one shard with one rewrite of it, any other chunk alone. One result per
    /// chunk: one that cannot be encoded fails alone, and the shard is stored without it.
    fn write_back_batch(&self, batch: &[(&str, &[u8], &Arc<VarPlan>)]) -> Vec<Result<()>> {
        let sharded = batch
            .first()
            .and_then(|(_, _, plan)| plan.v3.as_ref().filter(|c| c.is_sharded()));
        let (Some(chain), [(first, _, plan), _, ..]) = (sharded, batch) else {
            return batch
                .iter()
                .map(|(k, d, p)| self.write_back(k, d, p))
                .collect();
        };
        let shard_key = match shard::split_inner_key(first) {
            Ok((shard_key, _)) => shard_key,
            Err(e) => return vec![Err(e)],
        };
        let mut results = Vec::with_capacity(batch.len());
        let mut encoded = Vec::with_capacity(batch.len());
        for (key, native, _) in batch {
            let inner = shard::split_inner_key(key)
                .and_then(|(_, inner)| Ok((inner, chain.encode_inner(native, &plan.fill)?)));
            results.push(inner.map(|e| encoded.push(e)));
        }
        if let Err(e) = chain.store_shard(self.map.as_ref(), shard_key, &encoded) {
            let mut failure = Some(e);
            for r in results.iter_mut().filter(|r| r.is_ok()) {
                *r = Err(failure.take().unwrap_or_else(|| {
                    Error::Invalid(format!("shard {shard_key} was not stored"))
                }));
            }
        }
        results
    }

    /// [`ChunkEngine::write_back`] for a write that needs room: refused at once while a
    /// failed write-back's window lasts, and a failure starts the next window.
    fn write_back_paced(&self, key: &str, data: &[u8], plan: &Arc<VarPlan>) -> Result<()> {
        self.pacing.may_try(std::time::Instant::now())?;
        let stored = self.write_back(key, data, plan);
        self.paced(stored.as_ref().err());
        stored
    }

    /// Records how a write's attempt to store changed chunks ended, logging a failure: at
    /// most one per window, as writes try at most once per window.
    fn paced(&self, failure: Option<&Error>) {
        match failure {
            None => self.pacing.stored(),
            Some(e) => {
                if let Some(window) = self.pacing.failed(e, std::time::Instant::now()) {
                    log::warn!(
                        "changed chunks of {} not stored: {e}; writes leave them alone for \
                         {} s (an fsync or close tries at once)",
                        self.map.describe(),
                        window.as_secs_f64()
                    );
                } else {
                    log::debug!("changed chunks not stored yet: {e}");
                }
            }
        }
    }

    /// Encodes and stores one dirty chunk.
    fn write_back(&self, key: &str, data: &[u8], plan: &Arc<VarPlan>) -> Result<()> {
        if let Some(chain) = plan.v3.as_ref().filter(|c| c.is_sharded()) {
            return chain.write_back(self.map.as_ref(), key, data, &plan.fill);
        }
        plan.encode_then(data, |stored| self.map.put(key, stored))
    }

    /// Reads `slab` of variable `var` into `out` (C order, native byte order, strings
    /// NUL-padded to the variable's width). `out` must be exactly
    /// `product(count) * element_size` bytes.
    pub fn read(&self, ds: &Dataset, var: VarId, slab: &Hyperslab, out: &mut [u8]) -> Result<()> {
        let v = ds.var(var);
        let n = slab::validate(&ds.var_shape(var), slab)?;
        let esize = v.element_size();
        let want = n.checked_mul(esize as u64);
        if want != Some(out.len() as u64) {
            return Err(Error::InvalidHyperslab(format!(
                "buffer of {} bytes for {n} elements of {esize} bytes",
                out.len()
            )));
        }
        if out.is_empty() {
            return Ok(());
        }
        let plan = self.plan(ds, var)?;
        let (start, count, stride) = if v.dims.is_empty() && plan.grid.len() == 1 {
            (vec![0], vec![1], vec![1])
        } else {
            (slab.start.clone(), slab.count.clone(), slab.stride.clone())
        };
        // Indices past the stored shape (a dimension grown by another variable) read as fill.
        let clipped: Vec<u64> = (0..count.len())
            .map(|d| slab::clipped_count(start[d], count[d], stride[d], plan.grid[d]))
            .collect();
        if clipped != count {
            for slot in out.chunks_exact_mut(esize) {
                slot.copy_from_slice(&plan.fill);
            }
            if clipped.contains(&0) {
                return Ok(());
            }
        }
        let spans: Vec<Vec<Span>> = (0..count.len())
            .map(|d| slab::spans(start[d], clipped[d], stride[d], plan.chunk_shape[d]))
            .collect();
        let gs = GridSlab {
            plan: &plan,
            start,
            stride,
            spans,
            out_strides: slab::c_strides(&count),
        };
        self.read_grid(&gs, out)
    }

    fn read_grid(&self, gs: &GridSlab<'_>, out: &mut [u8]) -> Result<()> {
        let plan = gs.plan;
        let mapping = gs.mapping();
        if gs.spans.is_empty() {
            let _in_flight = self.reserve_in_flight(plan, std::iter::once(plan.chunk_key(&[])));
            let chunk = self.fetch(plan, &[], true, None)?;
            place(&mapping, &[], chunk.as_deref(), out, 0, &plan.fill);
            return Ok(());
        }
        let rows = &gs.spans[0];
        let inner = combinations(&gs.spans[1..]);
        let row_elems = gs.out_strides[0];
        // A read touching more chunks than the cache holds would only cycle them through it
        // (evicting everything else), so such a scan bypasses the cache. A read within one
        // chunk larger than the cache keeps it beside the cache, for the reads that follow.
        let touched = (rows.len() as u128) * (inner.len() as u128);
        let keep = touched == 1
            || touched * (plan.chunk_elems * plan.esize) as u128 <= self.cache.capacity() as u128;
        let row_bytes = row_elems as usize * plan.esize;
        // A map with request latency (S3) gets the chunks of a read in batches of concurrent
        // requests, then they are decoded in parallel: rayon alone would keep only as many
        // requests in flight as there are cores. A batch is a group of chunks within a row
        // when rows are wide, else a window of whole rows.
        let conc = self.map.concurrent_gets();
        let batched = conc > 1 && !plan.v3.as_ref().is_some_and(|c| c.is_sharded());
        let per_row = batched && inner.len() >= conc;
        let rows_per_window = if batched && !per_row {
            (conc / inner.len().max(1)).max(1)
        } else {
            rows.len().max(1)
        };
        // Chunks that are not kept and land whole as contiguous blocks are decoded in place.
        let direct = !keep && !batched && plan.direct();
        let ranged = !batched && self.ranged(plan);
        let ahead = Prefetched::new(self.cache.epoch());
        let chunk_coords = |row: &Span, rest: &[Span]| -> Vec<u64> {
            std::iter::once(row.chunk)
                .chain(rest.iter().map(|s| s.chunk))
                .collect()
        };
        // Held until the chunks are placed: what they hold outside the cache is bounded.
        let _in_flight = if ranged {
            None
        } else {
            let keys = rows.iter().flat_map(|row| {
                inner
                    .iter()
                    .map(move |rest| plan.chunk_key(&chunk_coords(row, rest)))
            });
            self.reserve_in_flight(plan, keys)
        };
        let one_row = |row: &Span, part: &mut [u8]| -> Result<()> {
            let base = row.k_lo * row_elems;
            let batch = if per_row {
                conc
            } else if rows.len() * inner.len() > 1 {
                BATCH
            } else {
                1
            };
            for group in inner.chunks(batch) {
                let group = if direct {
                    self.read_direct_blocks(plan, &mapping, row, group, base, part)?
                } else {
                    group.iter().collect()
                };
                let group = if ranged {
                    self.read_ranges(plan, &mapping, row, group, base, part)?
                } else {
                    group
                };
                if group.is_empty() {
                    continue;
                }
                if per_row {
                    let keys = group.iter().map(|rest| chunk_coords(row, rest));
                    self.prefetch(plan, keys, &ahead);
                }
                let fetched: Vec<Fetched> = group
                    .par_iter()
                    .map(|rest| {
                        let mut spans = Vec::with_capacity(rest.len() + 1);
                        spans.push(*row);
                        spans.extend_from_slice(rest);
                        let coords: Vec<u64> = spans.iter().map(|s| s.chunk).collect();
                        Ok((spans, self.fetch(plan, &coords, keep, Some(&ahead))?))
                    })
                    .collect::<Result<_>>()?;
                for (spans, chunk) in &fetched {
                    place(&mapping, spans, chunk.as_deref(), part, base, &plan.fill);
                }
            }
            Ok(())
        };
        // Each row of chunks along the first dimension owns a disjoint part of `out`.
        let mut parts: Vec<(&Span, &mut [u8])> = Vec::with_capacity(rows.len());
        let mut rest = out;
        let mut consumed = 0usize;
        for row in rows {
            let lo = row.k_lo as usize * row_bytes;
            let hi = row.k_hi as usize * row_bytes;
            let (_, tail) = rest.split_at_mut(lo - consumed);
            let (mine, tail) = tail.split_at_mut(hi - lo);
            parts.push((row, mine));
            rest = tail;
            consumed = hi;
        }
        let windows = windows_of(parts, rows_per_window);
        // Windows of whole rows are fetched as one stream: every chunk of the read is
        // requested up front, `conc` at a time, and each window is decoded as its chunks
        // arrive. (A batch per window would wait for its slowest request, and the server
        // would idle meanwhile.)
        // A read within one chunk that is kept loads it once (`load_once`), however many
        // requests want it at the same time (the kernel's readahead sends several).
        let pipelined = batched && !per_row && !(keep && touched == 1);
        let coords: Vec<Vec<u64>> = windows
            .iter()
            .filter(|_| pipelined)
            .flat_map(|window| {
                window
                    .iter()
                    .flat_map(|(row, _)| inner.iter().map(|rest| chunk_coords(row, rest)))
            })
            .collect();
        // Expected before any `fetch` may look for them, so that none requests them again.
        let missing = self.look_ahead(plan, coords.into_iter(), &ahead);
        if windows.len() == 1 {
            // Nothing to overlap the requests with.
            self.fetch_ahead(&missing, &ahead);
        }
        std::thread::scope(|scope| {
            if windows.len() > 1 && !missing.is_empty() {
                let ahead = &ahead;
                let missing = &missing;
                scope.spawn(move || self.fetch_ahead(missing, ahead));
            }
            for mut window in windows {
                if window.len() == 1 {
                    let (row, part) = window.pop().expect("one part");
                    one_row(row, part)?;
                } else {
                    window
                        .into_par_iter()
                        .try_for_each(|(row, part)| one_row(row, part))?;
                }
            }
            Ok(())
        })
    }

    /// Reads the chunks of `group` (in the row of chunks `row`, whose part of the buffer is
    /// `part`, starting at slab element `base`) that land whole as contiguous blocks of `part`
    /// straight into place, in parallel; returns the other chunks of the group.
    fn read_direct_blocks<'g>(
        &self,
        plan: &VarPlan,
        mapping: &Mapping<'_>,
        row: &Span,
        group: &'g [Vec<Span>],
        base: u64,
        part: &mut [u8],
    ) -> Result<Vec<&'g Vec<Span>>> {
        let chunk_bytes = plan.chunk_elems * plan.esize;
        let mut blocks = Vec::new();
        let mut others = Vec::new();
        for rest in group {
            let spans: Vec<Span> = std::iter::once(*row).chain(rest.iter().copied()).collect();
            match mapping.whole_block(&spans, base) {
                Some(at) => blocks.push((at, spans)),
                None => others.push(rest),
            }
        }
        blocks.sort_by_key(|b| b.0);
        // Distinct chunks land on disjoint blocks: carve `part` into them.
        let mut slices = Vec::with_capacity(blocks.len());
        let mut tail = part;
        let mut consumed = 0;
        for (at, spans) in blocks {
            let (_, t) = tail.split_at_mut(at - consumed);
            let (mine, t) = t.split_at_mut(chunk_bytes);
            slices.push((spans, mine));
            tail = t;
            consumed = at + chunk_bytes;
        }
        slices.into_par_iter().try_for_each(|(spans, dst)| {
            let coords: Vec<u64> = spans.iter().map(|s| s.chunk).collect();
            let key = plan.chunk_key(&coords);
            if let Some(hit) = self.cache.get(&key) {
                dst.copy_from_slice(&hit);
            } else if !plan.read_direct(self.map.as_ref(), &key, dst)? {
                for slot in dst.chunks_exact_mut(plan.esize) {
                    slot.copy_from_slice(&plan.fill);
                }
            }
            Ok::<(), Error>(())
        })?;
        Ok(others)
    }

    /// Whether the chunks of `plan` are read in place, only the bytes needed: uncompressed
    /// chunks of a local map, which the operating system's page cache already keeps (a chunk
    /// cache would only copy them).
    fn ranged(&self, plan: &VarPlan) -> bool {
        plan.pipeline.is_empty() && plan.direct() && self.map.partial_reads_are_cheap()
    }

    /// Reads the chunks of `group` (uncompressed, in a map where partial reads are cheap)
    /// whose selected elements land as one contiguous run of `part` straight from storage,
    /// only the bytes needed, unless the chunk is cached (it may hold unflushed writes);
    /// returns the other chunks.
    fn read_ranges<'g>(
        &self,
        plan: &VarPlan,
        mapping: &Mapping<'_>,
        row: &Span,
        group: Vec<&'g Vec<Span>>,
        base: u64,
        part: &mut [u8],
    ) -> Result<Vec<&'g Vec<Span>>> {
        let chunk_bytes = (plan.chunk_elems * plan.stored_esize) as u64;
        let mut others = Vec::new();
        for rest in group {
            let spans: Vec<Span> = std::iter::once(*row).chain(rest.iter().copied()).collect();
            let Some((src, at, len)) = mapping.single_run(&spans, base) else {
                others.push(rest);
                continue;
            };
            let coords: Vec<u64> = spans.iter().map(|s| s.chunk).collect();
            let key = plan.chunk_key(&coords);
            let out = &mut part[at..at + len];
            if let Some(hit) = self.cache.get(&key) {
                out.copy_from_slice(&hit[src..src + len]);
                continue;
            }
            match self.map.get_range_into(&key, src as u64, out)? {
                None => {
                    for slot in out.chunks_exact_mut(plan.esize) {
                        slot.copy_from_slice(&plan.fill);
                    }
                }
                Some(n) if n == chunk_bytes => {
                    plan.conv.to_native_in_place(out);
                }
                Some(n) => {
                    // What the whole-chunk decode says about a raw chunk of the wrong size.
                    let e = Error::Codec {
                        codec: "null".to_string(),
                        reason: format!("chunk decoded to {n} bytes, expected {chunk_bytes}"),
                    };
                    return Err(plan.bad(&key, e));
                }
            }
        }
        Ok(others)
    }

    /// Looks up the chunks at `coords` in the cache and gets the others from storage in one
    /// batch of concurrent requests, leaving each in `ahead` for `fetch` as soon as it has
    /// arrived.
    fn prefetch(&self, plan: &VarPlan, coords: impl Iterator<Item = Vec<u64>>, ahead: &Prefetched) {
        let missing = self.look_ahead(plan, coords, ahead);
        self.fetch_ahead(&missing, ahead);
    }

    /// The first half of [`ChunkEngine::prefetch`]: hands the cached chunks at `coords` to
    /// `ahead` and marks the others expected; returns the keys to fetch.
    fn look_ahead(
        &self,
        plan: &VarPlan,
        coords: impl Iterator<Item = Vec<u64>>,
        ahead: &Prefetched,
    ) -> Vec<String> {
        let mut missing = Vec::new();
        for c in coords {
            let key = plan.chunk_key(&c);
            match self.cache.get(&key) {
                Some(hit) => ahead.arrive(key, Ahead::Cached(hit)),
                // Being loaded (a mount's prefetch): `fetch` waits for it rather than asking
                // the storage a second time.
                None if self.is_loading(&key) => {}
                None => {
                    ahead.expect(&key);
                    missing.push(key);
                }
            }
        }
        missing
    }

    /// The second half of [`ChunkEngine::prefetch`]: gets the chunks at `keys` from storage
    /// and hands each to `ahead` as it arrives.
    fn fetch_ahead(&self, keys: &[String], ahead: &Prefetched) {
        if keys.is_empty() {
            return;
        }
        self.map.get_each(keys, &mut |i, raw| {
            ahead.arrive(keys[i].clone(), Ahead::Raw(raw));
        });
    }

    /// The native chunk at `coords`, from `ahead`, the cache or storage (then cached if
    /// `keep`); `None` if it was never written.
    fn fetch(
        &self,
        plan: &Arc<VarPlan>,
        coords: &[u64],
        keep: bool,
        ahead: Option<&Prefetched>,
    ) -> Result<Option<Arc<Vec<u8>>>> {
        if let Some(chain) = plan.v3.as_ref().filter(|c| c.is_sharded()) {
            return self.fetch_inner(plan, chain, coords);
        }
        let key = plan.chunk_key(coords);
        let early = ahead.and_then(|a| a.take(&key).map(|chunk| (chunk, a.epoch)));
        let (raw, epoch) = match early {
            Some((Ahead::Cached(hit), _)) => return Ok(Some(hit)),
            Some((Ahead::Raw(raw), epoch)) => (raw?, epoch),
            None => match self.cache.get(&key) {
                Some(hit) => return Ok(Some(hit)),
                None if keep => return self.load_once(plan, &key),
                None => return self.decode_keep(plan, &key, self.map.get(&key)?, None),
            },
        };
        self.decode_keep(plan, &key, raw, keep.then_some(epoch))
    }

    /// Loads the chunk at `key` into the cache, once: concurrent readers of the same chunk (a
    /// mount's parallel readahead requests) wait for the first one instead of decoding it
    /// again.
    fn load_once(&self, plan: &Arc<VarPlan>, key: &str) -> Result<Option<Arc<Vec<u8>>>> {
        let gate = {
            let mut loading = self.loading.lock().unwrap_or_else(|e| e.into_inner());
            Arc::clone(loading.entry(key.to_string()).or_default())
        };
        let result = {
            let _turn = gate.lock().unwrap_or_else(|e| e.into_inner());
            match self.cache.get_again(key) {
                Some(hit) => Ok(Some(hit)),
                None => self.load(plan, key),
            }
        };
        let mut loading = self.loading.lock().unwrap_or_else(|e| e.into_inner());
        // Clones are taken under `loading`: the map's and ours left means nobody waits.
        if Arc::strong_count(&gate) == 2 {
            loading.remove(key);
        }
        result
    }

    /// Reads and decodes the chunk at `key` and caches it (one larger than the whole cache is
    /// kept beside it); `None` if it was never written. A chunk that decodes in place does so
    /// into a spare buffer of the cache when there is one, through this thread's scratch
    /// buffers: nothing is allocated per chunk.
    fn load(&self, plan: &Arc<VarPlan>, key: &str) -> Result<Option<Arc<Vec<u8>>>> {
        let epoch = self.cache.epoch();
        let native = if plan.direct() {
            self.load_direct(plan, key, epoch)?
        } else {
            let raw = self.map.get(key)?;
            self.decode_keep(plan, key, raw, Some(epoch))?
        };
        if let Some(chunk) = &native {
            self.cache.keep_oversized(key, chunk, epoch);
        }
        Ok(native)
    }

    /// [`ChunkEngine::load`] of a chunk that decodes in place, read from storage after the
    /// cache's `epoch`.
    fn load_direct(
        &self,
        plan: &Arc<VarPlan>,
        key: &str,
        epoch: u64,
    ) -> Result<Option<Arc<Vec<u8>>>> {
        let len = plan.chunk_elems * plan.esize;
        let mut buf = self.cache.take_spare(len).unwrap_or_else(|| vec![0; len]);
        if !plan.read_direct(self.map.as_ref(), key, &mut buf)? {
            self.cache.give_spare(buf);
            return Ok(None);
        }
        let native = Arc::new(buf);
        if self.cache.fits(len) {
            self.cache.insert_read(key, Arc::clone(&native), epoch);
        }
        Ok(Some(native))
    }

    /// Decodes a stored chunk (`None`: never written) and caches it when `kept_since` is the
    /// cache's epoch from before it was read from storage (see [`ChunkCache::insert_read`]).
    fn decode_keep(
        &self,
        plan: &Arc<VarPlan>,
        key: &str,
        raw: Option<Vec<u8>>,
        kept_since: Option<u64>,
    ) -> Result<Option<Arc<Vec<u8>>>> {
        let Some(raw) = raw else {
            return Ok(None);
        };
        let native = Arc::new(plan.decode(key, raw)?);
        if let Some(epoch) = kept_since.filter(|_| self.cache.fits(native.len())) {
            self.cache.insert_read(key, Arc::clone(&native), epoch);
        }
        Ok(Some(native))
    }

    /// Loads the chunks that `slab` of `var` touches into the cache without copying values
    /// anywhere (a mount's prefetch ahead of a sequential reader); stops at the first chunk
    /// that fails. Does nothing when those chunks would not all fit in the cache, for sharded
    /// arrays (whose inner chunks are cached as they are read) and for chunks read in place.
    pub fn preload(&self, ds: &Dataset, var: VarId, slab: &Hyperslab) -> Result<()> {
        if slab::validate(&ds.var_shape(var), slab)? == 0 {
            return Ok(());
        }
        let plan = self.plan(ds, var)?;
        if plan.v3.as_ref().is_some_and(|c| c.is_sharded()) || self.ranged(&plan) {
            return Ok(());
        }
        if ds.var(var).dims.is_empty() {
            let coords = vec![0; plan.grid.len()];
            let (_, _in_flight) = self.prefetch_share(Self::bytes_in_flight(&plan), 1);
            return self.fetch(&plan, &coords, true, None).map(drop);
        }
        let spans: Vec<Vec<Span>> = (0..slab.count.len())
            .map(|d| {
                let (start, stride) = (slab.start[d], slab.stride[d]);
                let count = slab::clipped_count(start, slab.count[d], stride, plan.grid[d]);
                slab::spans(start, count, stride, plan.chunk_shape[d])
            })
            .collect();
        let touched = spans.iter().fold(1u128, |a, s| a * s.len() as u128);
        if touched * (plan.chunk_elems * plan.esize) as u128 > self.cache.capacity() as u128 {
            return Ok(());
        }
        let all: Vec<Vec<u64>> = combinations(&spans)
            .iter()
            .map(|spans| spans.iter().map(|s| s.chunk).collect())
            .collect();
        if self.map.concurrent_gets() > 1 {
            return self.preload_batch(&plan, &all);
        }
        let mut missing: Vec<Vec<u64>> = all
            .into_iter()
            .filter(|c| !self.cache.contains(&plan.chunk_key(c)))
            .collect();
        let unit = Self::bytes_in_flight(&plan);
        while !missing.is_empty() {
            let (fits, mut share) = self.prefetch_share(unit, missing.len());
            let part: Vec<(Vec<u64>, Option<Grant>)> = missing
                .drain(..fits)
                .map(|coords| (coords, share.as_mut().map(|g| g.split_off(unit))))
                .collect();
            drop(share);
            // In parallel: a prefetch must decode faster than the reader it runs ahead of.
            // Each chunk gives its share back once it is in the cache.
            part.into_par_iter().try_for_each(|(coords, _in_flight)| {
                self.fetch(&plan, &coords, true, None).map(drop)
            })?;
        }
        Ok(())
    }

    /// The next part of a prefetch of `wanted` chunks of `unit` bytes each: how many of them
    /// to load now, and their share of the in-flight budget (none without a budget). That is
    /// as many as the budget has free at once or, when not even one is free, one as soon as
    /// it is. A prefetch waits rather than giving up what does not fit: the chunks it dropped
    /// would be left to its reader, who loads them one request at a time. It waits holding
    /// nothing (no gate a reader could be waiting for), and the caller comes back for the
    /// rest once this part is loaded.
    fn prefetch_share(&self, unit: usize, wanted: usize) -> (usize, Option<Grant>) {
        self.prefetch_share_now(unit, wanted)
            .unwrap_or_else(|| (1, self.in_flight.as_ref().map(|b| b.acquire(unit))))
    }

    /// [`ChunkEngine::prefetch_share`] without waiting: `None` when not even one chunk's
    /// share is free (or a read is waiting for its own).
    fn prefetch_share_now(&self, unit: usize, wanted: usize) -> Option<(usize, Option<Grant>)> {
        let Some(budget) = self.in_flight.as_ref().filter(|_| unit > 0) else {
            return Some((wanted, None));
        };
        let share = budget.try_acquire_part(unit.saturating_mul(wanted), unit)?;
        let fits = (share.bytes() / unit).clamp(1, wanted.max(1));
        Some((fits, Some(share)))
    }

    /// Whether someone is loading the chunk at `key` into the cache.
    fn is_loading(&self, key: &str) -> bool {
        self.loading
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(key)
    }

    /// [`ChunkEngine::preload`] on a map with request latency (S3): the chunks are requested
    /// concurrently (rayon alone would keep only as many in flight as there are cores), as
    /// many at a time as the in-flight budget has room for (see [`PreloadFeed`]).
    fn preload_batch(&self, plan: &Arc<VarPlan>, all: &[Vec<u64>]) -> Result<()> {
        // Their stored bytes: they are decoded one at a time, straight into the cache.
        let unit = plan.chunk_elems.saturating_mul(plan.stored_esize);
        let keys: Vec<String> = all
            .iter()
            .map(|c| plan.chunk_key(c))
            .filter(|key| !self.cache.contains(key))
            .collect();
        let gates: Vec<OnceCell<Arc<Mutex<()>>>> = keys.iter().map(|_| OnceCell::new()).collect();
        let mut feed = PreloadFeed {
            engine: self,
            plan,
            unit,
            keys: &keys,
            gates: &gates,
            next: 0,
            room: 0,
            share: None,
            loads: Vec::new(),
            result: Ok(()),
        };
        self.map.get_fed(&mut feed);
        let result = std::mem::replace(&mut feed.result, Ok(()));
        drop(feed);
        for (key, gate) in keys.iter().zip(&gates) {
            if let Some(gate) = gate.get() {
                self.done_loading(key, gate);
            }
        }
        result
    }

    /// Takes the chunk at `key` out of the chunks being loaded, unless someone else waits
    /// for its `gate` or took it out already. The caller holds a clone of the gate and not
    /// its lock.
    fn done_loading(&self, key: &str, gate: &Arc<Mutex<()>>) {
        let mut loading = self.loading.lock().unwrap_or_else(|e| e.into_inner());
        // As in `load_once`: the map's clone and the caller's left means nobody waits.
        if Arc::strong_count(gate) == 2 && loading.get(key).is_some_and(|g| Arc::ptr_eq(g, gate)) {
            loading.remove(key);
        }
    }

    /// Drops from the cache the chunks of `var` whose elements all lie in `[lo, hi)` (C order
    /// over its shape) or in the row of chunks (along the first dimension) where `lo` falls,
    /// unless they hold unflushed writes, keeping their buffers for the next chunks decoded:
    /// a sequential reader of a variable larger than the cache has gone past them, and would
    /// only push everything else out of the cache before coming back to them. (Widening to
    /// the row catches a chunk that straddled the previous call's `hi`.)
    pub fn release(&self, ds: &Dataset, var: VarId, lo: u64, hi: u64) -> Result<()> {
        let shape = ds.var_shape(var);
        if lo >= hi || ds.var(var).dims.is_empty() {
            return Ok(());
        }
        let plan = self.plan(ds, var)?;
        if plan.grid != shape
            || plan.v3.as_ref().is_some_and(|c| c.is_sharded())
            || self.ranged(&plan)
        {
            return Ok(());
        }
        let inner: u64 = shape[1..].iter().product();
        let grid: Vec<u64> = shape
            .iter()
            .zip(&plan.chunk_shape)
            .map(|(n, c)| n.div_ceil(*c))
            .collect();
        let per_row: u64 = grid[1..].iter().product();
        if inner == 0 || per_row > RELEASE_ROW_MAX {
            return Ok(());
        }
        let cs0 = plan.chunk_shape[0];
        let (row_lo, row_hi) = (lo / inner / cs0, (hi - 1) / inner / cs0);
        let lo = row_lo * cs0 * inner;
        let flat = |idx: &[u64]| idx.iter().zip(&shape).fold(0, |a, (i, n)| a * n + i);
        for row in row_lo..=row_hi {
            for i in 0..per_row {
                let mut coords = vec![row];
                let mut rest = i;
                let mut tail = vec![0; grid.len() - 1];
                for d in (1..grid.len()).rev() {
                    tail[d - 1] = rest % grid[d];
                    rest /= grid[d];
                }
                coords.extend(tail);
                let first: Vec<u64> = coords
                    .iter()
                    .zip(&plan.chunk_shape)
                    .map(|(c, n)| c * n)
                    .collect();
                let last: Vec<u64> = first
                    .iter()
                    .zip(&plan.chunk_shape)
                    .zip(&shape)
                    .map(|((f, n), s)| (f + n).min(*s) - 1)
                    .collect();
                if flat(&first) >= lo && flat(&last) < hi {
                    self.cache.release(&plan.chunk_key(&coords));
                }
            }
        }
        Ok(())
    }

    /// Whether `var` is a Zarr v3 array with sharding (inner chunks stored together in
    /// shards).
    pub fn sharded(&self, ds: &Dataset, var: VarId) -> Result<bool> {
        Ok(self
            .plan(ds, var)?
            .v3
            .as_ref()
            .is_some_and(|c| c.is_sharded()))
    }

    /// Refuses `data`, the values of a write of `slab` to `var`, when the variable's codecs
    /// cannot encode or its stored type cannot hold one of them (see
    /// [`ChunkEngine::write`]); checks nothing else.
    pub fn check_storable(
        &self,
        ds: &Dataset,
        var: VarId,
        slab: &Hyperslab,
        data: &[u8],
    ) -> Result<()> {
        check_storable(ds, var, &*self.plan(ds, var)?, slab, data)
    }

    /// One element of `var` as its unwritten places read: the fill value in native bytes
    /// (zeros for a Zarr v2 variable without fill).
    pub fn fill_element(&self, ds: &Dataset, var: VarId) -> Result<Vec<u8>> {
        Ok(self.plan(ds, var)?.fill.clone())
    }

    /// Writes `data` (native representation, C order, `product(count) * element_size` bytes)
    /// into `slab` of variable `var`. Chunks are modified in the cache and reach storage on
    /// [`ChunkEngine::flush`] (or eviction); with no room in the cache they are stored at once.
    /// Values the stored type cannot hold are refused before anything is written
    /// ([`Error::Unrepresentable`]), and so is any write to a variable whose codecs cannot
    /// encode ([`Error::Unencodable`]); values the stored type rounds (float16) are rounded.
    /// A streaming write, whose wholly covered chunks would fill more than a quarter of the
    /// cache, stores those chunks at once instead, encoding them in parallel without reading
    /// them.
    /// The slab must lie within the stored shape: growing an array is the metadata writer's job.
    ///
    /// A write whose chunks fit in the cache together and that stores none at once takes
    /// effect whole or not at all (see [`ChunkEngine::try_write`]).
    pub fn write(&self, ds: &Dataset, var: VarId, slab: &Hyperslab, data: &[u8]) -> Result<()> {
        self.try_write(ds, var, slab, data).map_err(|f| f.error)
    }

    /// [`ChunkEngine::write`], telling on failure whether the write took effect in part.
    ///
    /// Room in the cache for the chunks a write changes there is made before any of them
    /// changes, storing other changed chunks if needed: when that fails (a full disk), the
    /// write fails having changed nothing, and the changed chunks that could not be stored
    /// stay cached for a later flush. Changed chunks therefore never hold more than the cache
    /// bound. Only a write that cannot be held whole in the cache (its chunks together larger
    /// than the cache, or whole chunks it stores at once) can fail with some of its chunks
    /// already changed: those keep their new values.
    pub fn try_write(
        &self,
        ds: &Dataset,
        var: VarId,
        slab: &Hyperslab,
        data: &[u8],
    ) -> std::result::Result<(), FailedWrite> {
        // Taken here, not in the pool: a pool worker waiting inside one write's parallel loop
        // may pick up another write, which must not then wait for the lock it holds.
        let _guard = self.write_lock.lock().unwrap_or_else(|e| e.into_inner());
        io_parallel(self.map.concurrent_gets(), || {
            let mut changed = false;
            self.write_here(ds, var, slab, data, &mut changed)
                .map_err(|error| FailedWrite {
                    error,
                    in_part: changed,
                })
        })
    }

    fn write_here(
        &self,
        ds: &Dataset,
        var: VarId,
        slab: &Hyperslab,
        data: &[u8],
        changed: &mut bool,
    ) -> Result<()> {
        let v = ds.var(var);
        let n = slab::validate(&ds.var_shape(var), slab)?;
        let esize = v.element_size();
        if n.checked_mul(esize as u64) != Some(data.len() as u64) {
            return Err(Error::InvalidHyperslab(format!(
                "{} bytes of data for {n} elements of {esize} bytes",
                data.len()
            )));
        }
        if data.is_empty() {
            return Ok(());
        }
        let plan = self.plan(ds, var)?;
        if self.map.read_only() {
            return Err(Error::NotPermitted(format!(
                "{} is read-only",
                self.map.describe()
            )));
        }
        check_storable(ds, var, &plan, slab, data)?;
        // Values the stored type rounds become what it holds now, not only when their chunk
        // is encoded: a cached chunk would show them as written until evicted.
        let conv = plan.element_conversion();
        let held;
        let data = if conv.rounds() {
            held = conv.to_native(conv.to_stored(data.to_vec()));
            &held[..]
        } else {
            data
        };
        let (start, count, stride) = if v.dims.is_empty() && plan.grid.len() == 1 {
            (vec![0], vec![1], vec![1])
        } else {
            (slab.start.clone(), slab.count.clone(), slab.stride.clone())
        };
        for d in 0..count.len() {
            if slab::clipped_count(start[d], count[d], stride[d], plan.grid[d]) != count[d] {
                return Err(Error::InvalidHyperslab(format!(
                    "write to {} beyond its stored shape {:?} in dimension {d}",
                    plan.fqn, plan.grid
                )));
            }
        }
        let spans: Vec<Vec<Span>> = (0..count.len())
            .map(|d| slab::spans(start[d], count[d], stride[d], plan.chunk_shape[d]))
            .collect();
        let gs = GridSlab {
            plan: &plan,
            start,
            stride,
            spans,
            out_strides: slab::c_strides(&count),
        };
        let mapping = gs.mapping();
        let all = combinations(&gs.spans);
        let whole = |spans: &Vec<Span>| plan.covers(&gs.start, &gs.stride, spans);
        let whole_bytes = all.iter().filter(|s| whole(s)).count() as u128
            * (plan.chunk_elems * plan.esize) as u128;
        // Cycling a streaming write's chunks through the cache would evict everything else
        // and encode them one at a time under its lock.
        let (direct, cached): (Vec<_>, Vec<_>) = if whole_bytes * 4 > self.cache.capacity() as u128
        {
            all.into_iter().partition(whole)
        } else {
            (Vec::new(), all)
        };
        let chunk_len = plan.chunk_elems * plan.esize;
        let mut write_back = |k: &str, d: &[u8], p: &Arc<VarPlan>| self.write_back_paced(k, d, p);
        // The chunks changed in the cache, in groups that each fit in it: one group, unless
        // the write is larger than the cache. Room for the first is made before anything is
        // stored, so that a full cache of chunks that cannot be stored fails the write first.
        let per_group = (self.cache.capacity() / chunk_len.max(1)).max(1);
        let keyed: Vec<(String, &Vec<Span>)> = cached
            .iter()
            .map(|spans| {
                let coords: Vec<u64> = spans.iter().map(|s| s.chunk).collect();
                (plan.chunk_key(&coords), spans)
            })
            .collect();
        let groups: Vec<&[(String, &Vec<Span>)]> = keyed.chunks(per_group).collect();
        let oversized = !self.cache.fits(chunk_len);
        if let (Some(first), false) = (groups.first(), oversized) {
            let keys = first.iter().map(|(k, _)| k.clone()).collect();
            self.cache.reserve(&keys, chunk_len, &mut write_back)?;
        }
        let stored = AtomicBool::new(false);
        let direct_result = match plan.v3.as_ref().filter(|c| c.is_sharded()) {
            Some(chain) => self.store_whole_shards(&plan, chain, &mapping, &direct, data, &stored),
            None => direct.par_iter().try_for_each(|spans| {
                self.store_whole(&plan, &mapping, spans, data)?;
                stored.store(true, Ordering::Relaxed);
                Ok(())
            }),
        };
        *changed = stored.into_inner();
        direct_result?;
        let mut touched = HashSet::with_capacity(keyed.len());
        for (i, group) in groups.iter().enumerate() {
            if oversized {
                // Each chunk alone is larger than the cache: stored at once, one at a time.
                for (key, spans) in group.iter() {
                    let coords: Vec<u64> = spans.iter().map(|s| s.chunk).collect();
                    let mut chunk = match self.fetch(&plan, &coords, false, None)? {
                        Some(c) => Arc::unwrap_or_clone(c),
                        None => plan.fill_chunk(),
                    };
                    mapping.gather(spans, data, &mut chunk);
                    self.cache.insert(
                        key,
                        Arc::new(chunk),
                        Some(Arc::clone(&plan)),
                        &mut write_back,
                    )?;
                    *changed = true;
                }
                continue;
            }
            let keys: HashSet<String> = group.iter().map(|(k, _)| k.clone()).collect();
            if i > 0 {
                self.cache.reserve(&keys, chunk_len, &mut write_back)?;
            }
            self.change_cached(&plan, &mapping, group, data)?;
            *changed = true;
            touched.extend(keys);
        }
        // Small writes streaming through (a mount's, record by record) would otherwise reach
        // storage one evicted chunk at a time. The dirty chunks this write did not touch, which
        // such a stream is done with, are stored together instead, encoded in parallel. The
        // write has taken effect: chunks that cannot be stored now stay cached, and the next
        // flush reports them.
        if self.cache.dirty_bytes() * 2 > self.cache.capacity()
            && self.pacing.may_try(std::time::Instant::now()).is_ok()
        {
            let early =
                self.cache
                    .flush_batched(&|k| !touched.contains(k), &inner_chunk_batch, &|batch| {
                        self.write_back_batch(batch)
                    });
            self.paced(early.as_ref().err());
        }
        Ok(())
    }

    /// Changes the chunks of `group`, which the cache has made room for, as the write of `data`
    /// does: those cached where they are (a mount's small writes land in the same chunk many
    /// times over), the others fetched, decoded and changed in parallel first. Nothing changes
    /// unless every chunk can be changed.
    fn change_cached(
        &self,
        plan: &Arc<VarPlan>,
        mapping: &Mapping<'_>,
        group: &[(String, &Vec<Span>)],
        data: &[u8],
    ) -> Result<()> {
        let spans_of: HashMap<&str, &Vec<Span>> =
            group.iter().map(|(k, s)| (k.as_str(), *s)).collect();
        let (mut cached, mut missing): (Vec<&str>, Vec<&str>) = group
            .iter()
            .map(|(k, _)| k.as_str())
            .partition(|k| self.cache.contains(k));
        let change = |key: &str, chunk: &mut [u8]| mapping.gather(spans_of[key], data, chunk);
        let mut fresh = Vec::with_capacity(missing.len());
        loop {
            let fetched: Vec<(String, Vec<u8>)> = missing
                .par_iter()
                .map(|key| {
                    let spans = spans_of[key];
                    let coords: Vec<u64> = spans.iter().map(|s| s.chunk).collect();
                    // Not kept by the fetch: the changed chunk replaces it in the cache.
                    let mut chunk = match self.fetch(plan, &coords, false, None)? {
                        Some(c) => Arc::unwrap_or_clone(c),
                        None => plan.fill_chunk(),
                    };
                    mapping.gather(spans, data, &mut chunk);
                    Ok((key.to_string(), chunk))
                })
                .collect::<Result<_>>()?;
            fresh.extend(fetched);
            match self.cache.apply(&cached, &change, &mut fresh, plan) {
                Ok(()) => return Ok(()),
                Err(gone) => {
                    cached.retain(|k| !gone.iter().any(|g| g == k));
                    missing = gone
                        .iter()
                        .filter_map(|g| spans_of.get_key_value(g.as_str()).map(|(k, _)| *k))
                        .collect();
                }
            }
        }
    }

    /// Stores the chunk at `spans`, which the write of `data` covers whole, without reading
    /// it.
    fn store_whole(
        &self,
        plan: &Arc<VarPlan>,
        mapping: &Mapping<'_>,
        spans: &[Span],
        data: &[u8],
    ) -> Result<()> {
        let coords: Vec<u64> = spans.iter().map(|s| s.chunk).collect();
        let key = plan.chunk_key(&coords);
        let native = whole_chunk(plan, mapping, spans, data);
        // A cached copy, which may hold changes not stored yet, stays while the chunk is
        // stored, so that a failed store leaves it; nothing stores it meanwhile (only writes
        // and flushes store cached chunks, and they wait for this write). It is stale once the
        // store succeeds: dropped, with any copy a reader cached meanwhile.
        self.write_back(&key, &native, plan)?;
        self.cache.discard(&key);
        Ok(())
    }

    /// [`ChunkEngine::store_whole`] of the inner chunks `whole` of a sharded array: each shard
    /// they fall in is rewritten once with all of its own, in parallel across shards.
    fn store_whole_shards(
        &self,
        plan: &Arc<VarPlan>,
        chain: &shard::V3Chain,
        mapping: &Mapping<'_>,
        whole: &[Vec<Span>],
        data: &[u8],
        stored: &AtomicBool,
    ) -> Result<()> {
        let mut shards: HashMap<String, Vec<(String, &[Span])>> = HashMap::new();
        for spans in whole {
            let coords: Vec<u64> = spans.iter().map(|s| s.chunk).collect();
            let key = plan.chunk_key(&coords);
            let (shard_key, _) = shard::split_inner_key(&key)?;
            shards
                .entry(shard_key.to_string())
                .or_default()
                .push((key, spans));
        }
        shards.par_iter().try_for_each(|(shard_key, inner)| {
            let natives: Vec<(usize, std::borrow::Cow<'_, [u8]>)> = inner
                .iter()
                .map(|(key, spans)| {
                    let (_, at) = shard::split_inner_key(key)?;
                    Ok((at, whole_chunk(plan, mapping, spans, data)))
                })
                .collect::<Result<_>>()?;
            let parts: Vec<(usize, &[u8])> = natives.iter().map(|(i, n)| (*i, &n[..])).collect();
            // As in `store_whole`: cached copies stay unless the store succeeds.
            chain.write_shard(self.map.as_ref(), shard_key, &parts, &plan.fill)?;
            stored.store(true, Ordering::Relaxed);
            inner.iter().for_each(|(key, _)| self.cache.discard(key));
            Ok(())
        })
    }

    /// Whether `var` of `ds`, read through this engine, and `dst_var` of `dst_ds`, written
    /// through `dst`, store the same bytes for the same values: the same array and chunk
    /// shapes, stored type, element order, Zarr v2 codecs and fill value. Their chunk objects
    /// can then be copied as they are ([`ChunkEngine::copy_vars_to`]).
    pub fn same_encoding(
        &self,
        ds: &Dataset,
        var: VarId,
        dst: &ChunkEngine,
        dst_ds: &Dataset,
        dst_var: VarId,
    ) -> Result<bool> {
        let (a, b) = (self.plan(ds, var)?, dst.plan(dst_ds, dst_var)?);
        Ok(a.v3.is_none()
            && b.v3.is_none()
            && a.nctype == b.nctype
            && a.string_width == b.string_width
            && a.storage.dtype == b.storage.dtype
            && a.storage.order == b.storage.order
            && a.storage.codecs == b.storage.codecs
            && a.grid == b.grid
            && a.chunk_shape == b.chunk_shape
            && a.fill == b.fill)
    }

    /// The grid coordinates of `var`'s stored chunk objects (of its shards, in a sharded
    /// array, whose grid is of the shards' shape), in C order; places never written are left
    /// out. Found by listing the variable's keys, so its cost follows what is stored, not
    /// the size of the grid.
    pub fn stored_chunks(&self, ds: &Dataset, var: VarId) -> Result<Vec<Vec<u64>>> {
        stored_grid(&*self.map, &*self.plan(ds, var)?)
    }

    /// [`ChunkEngine::copy_vars_to`] of one variable, its chunks in parallel.
    fn copy_chunks(
        &self,
        ds: &Dataset,
        var: VarId,
        dst: &ChunkEngine,
        dst_ds: &Dataset,
        dst_var: VarId,
    ) -> Result<u32> {
        let (src, out) = (self.plan(ds, var)?, dst.plan(dst_ds, dst_var)?);
        if dst.map.read_only() {
            return Err(Error::NotPermitted(format!(
                "{} is read-only",
                dst.map.describe()
            )));
        }
        thread_local! {
            // Where a compressed chunk is decoded to check it, reused from chunk to chunk.
            static CHECK: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
        }
        let expected = src.chunk_elems * src.stored_esize;
        let stored = stored_grid(&*self.map, &src)?;
        let records = stored
            .par_iter()
            .map(|coords| -> Result<Option<(&[u64], u64, u32)>> {
                let key = src.chunk_key(coords);
                with_scratch(|s| {
                    if !self.map.get_into(&key, &mut s.raw)? {
                        return Ok(None);
                    }
                    if src.pipeline.is_empty() {
                        if s.raw.len() != expected {
                            let e = Error::Codec {
                                codec: "null".to_string(),
                                reason: format!(
                                    "chunk decoded to {} bytes, expected {expected}",
                                    s.raw.len()
                                ),
                            };
                            return Err(src.bad(&key, e));
                        }
                    } else {
                        CHECK.with(|c| -> Result<()> {
                            let mut check = c.borrow_mut();
                            check.resize(expected, 0);
                            src.pipeline
                                .decode_into(&s.raw, &mut check, &mut s.stages)
                                .map_err(|e| src.bad(&key, e))?;
                            if check.capacity() > SCRATCH_KEEP {
                                *check = Vec::new();
                            }
                            Ok(())
                        })?;
                    }
                    dst.map.put(&out.chunk_key(coords), &s.raw)?;
                    Ok(Some((
                        coords.as_slice(),
                        s.raw.len() as u64,
                        crc32c::crc32c(&s.raw),
                    )))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(digest(&records))
    }

    /// Copies the stored chunks of each of `vars` byte for byte to the variable of the same id
    /// in `dst`, several variables at once (a dataset of many small variables is otherwise a
    /// sequence of round trips on S3), without decoding or encoding values; only valid when
    /// [`ChunkEngine::same_encoding`] holds for each. Each chunk is checked first as a read
    /// would check it (an uncompressed one for its size, a compressed one by decoding it), so
    /// a damaged source fails the copy instead of being passed on. Returns the digests (see
    /// [`ChunkEngine::stored_digests`]) of what was copied, in the order of `vars`.
    pub fn copy_vars_to(
        &self,
        ds: &Dataset,
        vars: &[VarId],
        dst: &ChunkEngine,
        dst_ds: &Dataset,
    ) -> Result<Vec<u32>> {
        let concurrency = self.map.concurrent_gets().max(dst.map.concurrent_gets());
        io_parallel(concurrency, || {
            vars.par_iter()
                .map(|&var| self.copy_chunks(ds, var, dst, dst_ds, var))
                .collect()
        })
    }

    /// For each of `vars`, a CRC-32C digest of its stored chunk objects: each stored chunk's
    /// position in the grid (C order), length and CRC-32C; chunks never written are left out.
    /// Two variables with equal digests hold the same objects. Taken in parallel.
    pub fn stored_digests(&self, ds: &Dataset, vars: &[VarId]) -> Result<Vec<u32>> {
        io_parallel(self.map.concurrent_gets(), || {
            vars.par_iter()
                .map(|&var| self.stored_digest(ds, var))
                .collect()
        })
    }

    /// [`ChunkEngine::stored_digests`] of one variable, its chunks in parallel.
    fn stored_digest(&self, ds: &Dataset, var: VarId) -> Result<u32> {
        let plan = self.plan(ds, var)?;
        let stored = stored_grid(&*self.map, &plan)?;
        let records = stored
            .par_iter()
            .map(|coords| {
                with_scratch(|s| -> Result<Option<(&[u64], u64, u32)>> {
                    if !self.map.get_into(&plan.chunk_key(coords), &mut s.raw)? {
                        return Ok(None);
                    }
                    Ok(Some((
                        coords.as_slice(),
                        s.raw.len() as u64,
                        crc32c::crc32c(&s.raw),
                    )))
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(digest(&records))
    }

    /// Encodes (in parallel) and stores every chunk written since the last flush. (The
    /// storage map's own `flush`, which makes puts durable, is the caller's to call.)
    pub fn flush(&self) -> Result<()> {
        // Taken outside the pool, as in `write`.
        let _guard = self.write_lock.lock().unwrap_or_else(|e| e.into_inner());
        if self.cache.dirty_bytes() == 0 {
            // Nothing was asked of storage, so nothing learnt of it: a failure remembered by
            // the pacing stays remembered (the metadata that a sync stores next may fail too).
            return Ok(());
        }
        let flushed = io_parallel(self.map.concurrent_gets(), || {
            self.cache
                .flush_batched(&|_| true, &inner_chunk_batch, &|batch| {
                    self.write_back_batch(batch)
                })
        });
        // Asked for, so tried whatever the pacing says; its caller reports a failure.
        match &flushed {
            Ok(()) => self.pacing.stored(),
            Err(e) => {
                self.pacing.failed(e, std::time::Instant::now());
            }
        }
        flushed
    }

    /// Whether a flush that is not insisted on (a `close`, unlike an `fsync` or the unmount)
    /// may wait for storage held as unreachable to answer a probe: `Err` with the last failed
    /// store while its window lasts (see [`pacing`]). So a burst of closes while a server stays
    /// silent costs at most one bounded wait per window, not a timeout each.
    pub fn storage_may_wait(&self) -> Result<()> {
        self.pacing.may_try(std::time::Instant::now())
    }

    /// Records that storing what a sync owes besides the changed chunks (the metadata)
    /// failed: as a failed write-back, it starts or lengthens the pacing window.
    pub fn store_failed(&self, error: &Error) {
        self.pacing.failed(error, std::time::Instant::now());
    }

    /// Forgets cached chunks (and variable plans) whose keys start with `prefix`, after
    /// storing any unflushed writes among them. A mount calls this when it notices that the
    /// dataset changed underneath.
    pub fn invalidate(&self, prefix: &str) -> Result<()> {
        let _guard = self.write_lock.lock().unwrap_or_else(|e| e.into_inner());
        self.cache
            .invalidate(prefix, &mut |k, d, p| self.write_back(k, d, p))?;
        self.plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| !k.starts_with(prefix));
        Ok(())
    }

    /// Forgets every cached chunk and plan (storing unflushed writes first).
    pub fn clear(&self) -> Result<()> {
        self.invalidate("")
    }
}

impl Drop for ChunkEngine {
    fn drop(&mut self) {
        if let Err(err) = self.flush() {
            log::error!(
                "unflushed chunks lost when closing {}: {err}",
                self.map.describe()
            );
        }
    }
}

/// The shard of an engine key `shard_key#inner` (an inner chunk of a sharded array), which
/// a flush stores together with the shard's other dirty inner chunks.
fn inner_chunk_batch(key: &str) -> Option<&str> {
    let (shard_key, inner) = key.rsplit_once('#')?;
    (!inner.is_empty() && inner.bytes().all(|b| b.is_ascii_digit())).then_some(shard_key)
}

/// The native values of the chunk at `spans`, which the write of `data` covers whole:
/// borrowed from `data` when they are one block there, else gathered into a new chunk.
fn whole_chunk<'a>(
    plan: &VarPlan,
    mapping: &Mapping<'_>,
    spans: &[Span],
    data: &'a [u8],
) -> std::borrow::Cow<'a, [u8]> {
    let chunk_bytes = plan.chunk_elems * plan.esize;
    if let Some(at) = mapping.whole_block(spans, 0) {
        return std::borrow::Cow::Borrowed(&data[at..at + chunk_bytes]);
    }
    // Only an edge chunk has elements outside the array, which hold the fill value.
    let inside = spans
        .iter()
        .zip(&plan.chunk_shape)
        .all(|(s, &c)| s.k_hi - s.k_lo == c);
    let mut chunk = if inside {
        vec![0; chunk_bytes]
    } else {
        plan.fill_chunk()
    };
    mapping.gather(spans, data, &mut chunk);
    std::borrow::Cow::Owned(chunk)
}

/// Refuses a write to a variable whose codecs cannot encode chunks ([`Error::Unencodable`]),
/// or whose values include one the stored type of `var` cannot hold, with an
/// [`Error::Unrepresentable`] naming the variable, the value's index in it and why.
fn check_storable(
    ds: &Dataset,
    var: VarId,
    plan: &VarPlan,
    slab: &Hyperslab,
    data: &[u8],
) -> Result<()> {
    match &plan.v3 {
        Some(chain) => chain.check_encodable(),
        None => plan.pipeline.check_encodable(),
    }
    .map_err(|e| e.unencodable(&plan.fqn))?;
    let refused = match &plan.v3 {
        Some(chain) => chain.first_unstorable(data, plan.esize),
        None => plan.conv.first_unstorable(data, plan.esize),
    };
    let Some((element, why)) = refused else {
        return Ok(());
    };
    // The element's index in the variable, from its place in the C-order slab.
    let mut rest = element as u64;
    let mut index = vec![0u64; slab.count.len()];
    for d in (0..index.len()).rev() {
        let n = slab.count[d].max(1);
        index[d] = slab.start[d] + (rest % n) * slab.stride[d];
        rest /= n;
    }
    let index = match index.is_empty() {
        true => String::new(),
        false => format!(
            "[{}]",
            index
                .iter()
                .map(u64::to_string)
                .collect::<Vec<_>>()
                .join(",")
        ),
    };
    // A fixed-size stored type explains a refusal; variable-length strings have none.
    let stored = ds
        .var(var)
        .storage
        .dtype
        .as_ref()
        .filter(|_| plan.element_conversion() != Conversion::Identity)
        .map_or_else(String::new, |t| format!(" (stored as {})", t.to_numpy()));
    Err(Error::Unrepresentable(format!(
        "{}{index}: {why}{stored}; nothing was written",
        plan.fqn
    )))
}

#[cfg(test)]
mod tests;
