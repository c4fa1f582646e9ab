//! Zarr v3 codec chains in the chunk engine: array-to-array `transpose`, the array-to-bytes
//! codecs `bytes`, `vlen-utf8`, `vlen-bytes` and `sharding_indexed`, then bytes-to-bytes
//! codecs (through [`Pipeline::from_v3`]).
//!
//! A sharded array is read by *inner* chunk: the engine's chunk grid is the inner chunk grid,
//! and fetching one inner chunk reads the shard's index (once per shard, with a ranged read at
//! the start or end of the shard) and then only that chunk's bytes. So a hyperslab touches
//! only the inner chunks it needs.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};

use serde_json::Value;

use super::convert::Conversion;
use super::{ChunkEngine, VarPlan};
use crate::codec::Pipeline;
use crate::error::quoted;
use crate::model::{ByteOrder, DtypeKind, NcType, ZarrDtype, MAX_CHUNK_BYTES};
use crate::zmap::ZMap;
use crate::{Error, Result};

/// How a decoded chunk's bytes become native elements.
#[derive(Debug, Clone, Copy)]
enum Elements {
    /// Fixed-size elements: the v2 engine's conversions (byte order, bool, strings, halves).
    Fixed(Conversion),
    /// `vlen-utf8` / `vlen-bytes`: a count, then length-prefixed values; each value lands
    /// NUL-padded in a slot of `width` bytes (a longer value is an error).
    Vlen {
        /// Native slot width.
        width: usize,
        /// Whether values are UTF-8 text (else raw bytes).
        utf8: bool,
    },
}

/// The codecs of one chunk (the inner chunk of a sharded array).
#[derive(Debug)]
struct ChunkCodecs {
    /// `transpose` permutation: stored dimension `k` is array dimension `perm[k]`.
    perm: Option<Vec<usize>>,
    elements: Elements,
    bytes: Pipeline,
    /// Chunk shape in array order.
    shape: Vec<usize>,
    elems: usize,
    /// Native element size.
    esize: usize,
}

/// `sharding_indexed`: where the inner chunks of a shard are.
#[derive(Debug)]
struct Sharding {
    /// Inner chunks per shard, per dimension.
    per_shard: Vec<u64>,
    n_inner: usize,
    index_at_end: bool,
    index_codecs: Pipeline,
    /// Encoded index size in bytes.
    index_len: u64,
    index_big: bool,
    /// The array's shard indices and rewrite lock, shared with every other plan of the array
    /// (see [`V3Chain::share_shard_state`]).
    state: Arc<ShardState>,
}

/// What every plan of one sharded array shares: a plan is rebuilt when the array grows, and
/// the cache still writes back chunks dirtied before through the plan they were written with,
/// so a rewrite through either plan must update the index the other one reads, and exclude
/// its readers.
#[derive(Debug, Default)]
struct ShardState {
    /// Decoded indices by shard key (`None`: the shard does not exist).
    indices: Mutex<HashMap<String, Option<Arc<Vec<u64>>>>>,
    /// Held for writing while a shard is rewritten (its inner chunks move), for reading while
    /// an inner chunk is located and read, so that no reader pairs an old index with a new
    /// shard and no two rewrites of one shard lose each other's inner chunk.
    rewrite: RwLock<()>,
}

/// A variable's Zarr v3 codec chain, built once per variable plan.
#[derive(Debug)]
pub(crate) struct V3Chain {
    chunk: ChunkCodecs,
    shard: Option<Sharding>,
    /// `transpose` around `sharding_indexed` (zarr-python's `filters=`): the shard is
    /// transposed as a whole, so inner chunks are in the permuted coordinates.
    outer_perm: Option<Vec<usize>>,
    /// The inner chunk shape in array order (the chunk shape when not sharded).
    grid: Vec<u64>,
}

/// Name and configuration of a codec entry.
fn codec_parts(entry: &Value) -> Result<(&str, Option<&Value>)> {
    match entry {
        Value::String(name) => Ok((name, None)),
        Value::Object(o) => match o.get("name").and_then(Value::as_str) {
            Some(name) => Ok((name, o.get("configuration"))),
            None => Err(Error::Codec {
                codec: "?".into(),
                reason: format!("codec without a string \"name\": {entry}"),
            }),
        },
        _ => Err(Error::Codec {
            codec: "?".into(),
            reason: format!("codec entry is not an object: {entry}"),
        }),
    }
}

/// A list of non-negative integers in a codec configuration.
fn u64s(codec: &str, v: Option<&Value>, what: &str) -> Result<Vec<u64>> {
    v.and_then(Value::as_array)
        .and_then(|a| a.iter().map(Value::as_u64).collect::<Option<Vec<u64>>>())
        .ok_or_else(|| Error::Codec {
            codec: codec.into(),
            reason: format!("{what} is not a list of non-negative integers"),
        })
}

fn codec_err(codec: &str, reason: impl Into<String>) -> Error {
    Error::Codec {
        codec: codec.into(),
        reason: reason.into(),
    }
}

impl V3Chain {
    /// Builds the chain of an array whose (outer) chunks have `chunk_shape`, stored as
    /// `dtype`, read as `nctype` with native elements of `esize` bytes.
    pub(crate) fn new(
        codecs: &[Value],
        chunk_shape: &[u64],
        dtype: &ZarrDtype,
        nctype: NcType,
        esize: usize,
    ) -> Result<V3Chain> {
        let sharding = codecs
            .iter()
            .position(|c| codec_parts(c).is_ok_and(|(n, _)| n == "sharding_indexed"));
        let Some(at) = sharding else {
            let chunk = ChunkCodecs::new(codecs, chunk_shape, dtype, nctype, esize)?;
            let grid = chunk.shape.iter().map(|&n| n as u64).collect();
            return Ok(V3Chain {
                chunk,
                shard: None,
                outer_perm: None,
                grid,
            });
        };
        let (outer_perm, n_transposes) = leading_transposes(codecs, chunk_shape.len())?;
        if at != n_transposes || codecs.len() != at + 1 {
            return Err(Error::Unsupported(
                "codecs after sharding_indexed, or array-to-array codecs other than transpose \
                 before it"
                    .into(),
            ));
        }
        // The shard as the sharding codec sees it: transposed.
        let shard_shape: Vec<u64> = match &outer_perm {
            Some(p) => p.iter().map(|&d| chunk_shape[d]).collect(),
            None => chunk_shape.to_vec(),
        };
        let chunk_shape = &shard_shape[..];
        let (_, config) = codec_parts(&codecs[at])?;
        let name = "sharding_indexed";
        let config = config.ok_or_else(|| codec_err(name, "missing configuration"))?;
        let inner_shape = u64s(name, config.get("chunk_shape"), "chunk_shape")?;
        if inner_shape.len() != chunk_shape.len()
            || inner_shape
                .iter()
                .zip(chunk_shape)
                .any(|(&i, &s)| i == 0 || s % i != 0)
        {
            return Err(codec_err(
                name,
                format!(
                    "inner chunk_shape {inner_shape:?} does not divide the shard {chunk_shape:?}"
                ),
            ));
        }
        // zarr-python 3.1.6 takes missing inner codecs for `bytes` alone.
        let bytes_only = [serde_json::json!({"name": "bytes"})];
        let inner_codecs = match config.get("codecs") {
            None => &bytes_only[..],
            Some(Value::Array(list)) => list.as_slice(),
            Some(_) => return Err(codec_err(name, "codecs is not a list")),
        };
        if inner_codecs
            .iter()
            .any(|c| codec_parts(c).is_ok_and(|(n, _)| n == "sharding_indexed"))
        {
            return Err(Error::Unsupported("nested sharding_indexed".into()));
        }
        let chunk = ChunkCodecs::new(inner_codecs, &inner_shape, dtype, nctype, esize)?;
        let per_shard: Vec<u64> = chunk_shape
            .iter()
            .zip(&inner_shape)
            .map(|(s, i)| s / i)
            .collect();
        let n_inner = per_shard
            .iter()
            .try_fold(1usize, |a, &n| a.checked_mul(usize::try_from(n).ok()?))
            .filter(|n| n.checked_mul(16).is_some())
            .ok_or_else(|| codec_err(name, "too many inner chunks per shard"))?;
        let index_at_end = match config.get("index_location").and_then(Value::as_str) {
            None | Some("end") => true,
            Some("start") => false,
            Some(other) => {
                return Err(codec_err(name, format!("index_location {}", quoted(other))))
            }
        };
        let default_index = [
            serde_json::json!({"name": "bytes", "configuration": {"endian": "little"}}),
            serde_json::json!({"name": "crc32c"}),
        ];
        let index_list = match config.get("index_codecs") {
            Some(Value::Array(a)) => a.as_slice(),
            _ => &default_index[..],
        };
        let mut index_big = false;
        let mut checksums = 0u64;
        for c in index_list {
            let (n, cfg) = codec_parts(c)?;
            match n {
                "bytes" => {
                    index_big =
                        cfg.and_then(|c| c.get("endian")).and_then(Value::as_str) == Some("big");
                }
                "crc32c" => checksums += 1,
                // A compressed index has no fixed size, so it cannot be located.
                other => {
                    return Err(Error::Unsupported(format!(
                        "sharding index codec {}",
                        quoted(other)
                    )))
                }
            }
        }
        let index_codecs = Pipeline::from_v3(index_list, 8)?;
        // Counted, not encoded: a layout of a billion inner chunks would make an encoded
        // index of 16 GiB before any shard were looked at. `bytes` keeps the index's 16 bytes
        // per inner chunk, each `crc32c` appends 4.
        let index_len = (n_inner as u64)
            .checked_mul(16)
            .and_then(|n| n.checked_add(4 * checksums))
            .filter(|&n| n <= MAX_CHUNK_BYTES)
            .ok_or_else(|| {
                codec_err(
                    name,
                    format!(
                        "{n_inner} inner chunks per shard make an index larger than the \
                         {MAX_CHUNK_BYTES} bytes nczarrfs reads"
                    ),
                )
            })?;
        // Inner chunk shape in array order: stored dimension k is array dimension perm[k].
        let mut grid = inner_shape.clone();
        if let Some(p) = &outer_perm {
            for (k, &d) in p.iter().enumerate() {
                grid[d] = inner_shape[k];
            }
        }
        Ok(V3Chain {
            chunk,
            outer_perm,
            grid,
            shard: Some(Sharding {
                per_shard,
                n_inner,
                index_at_end,
                index_codecs,
                index_len,
                index_big,
                state: Arc::default(),
            }),
        })
    }

    /// Makes this chain use the shard indices and rewrite lock of `earlier`, a chain of the
    /// same array with the same shard layout (the same codecs and chunks), so that the two
    /// never see different indices of one shard.
    pub(crate) fn share_shard_state(&mut self, earlier: &V3Chain) {
        if let (Some(sh), Some(old)) = (&mut self.shard, &earlier.shard) {
            sh.state = Arc::clone(&old.state);
        }
    }

    /// The engine's chunk shape: the inner chunks of a sharded array, else the chunks.
    pub(crate) fn grid_chunks(&self) -> Vec<u64> {
        self.grid.clone()
    }

    /// The conversion of fixed-size elements to their stored form (`Identity` for
    /// variable-length strings, which are stored as they are).
    pub(crate) fn element_conversion(&self) -> Conversion {
        match self.chunk.elements {
            Elements::Fixed(conv) => conv,
            Elements::Vlen { .. } => Conversion::Identity,
        }
    }

    /// The first of the native elements (`esize` bytes each) in `data` that the chain cannot
    /// store, with the reason: text that is not UTF-8 for `vlen-utf8`, which holds UTF-8
    /// only (Zarr v3's `string`), or what [`Conversion::first_unstorable`] refuses.
    pub(crate) fn first_unstorable(&self, data: &[u8], esize: usize) -> Option<(usize, String)> {
        match self.chunk.elements {
            Elements::Fixed(conv) => conv.first_unstorable(data, esize),
            Elements::Vlen { utf8: false, .. } => None,
            Elements::Vlen { utf8: true, .. } => {
                data.chunks_exact(esize.max(1)).position(|slot| {
                    let len = slot.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
                    std::str::from_utf8(&slot[..len]).is_err()
                })
            }
            .map(|i| {
                (
                    i,
                    "a value is not UTF-8 text, which strings stored with vlen-utf8 (Zarr \
                     v3's string) must be"
                        .to_string(),
                )
            }),
        }
    }

    /// Whether the chain can encode chunks (and shard indices): see
    /// [`Pipeline::check_encodable`].
    pub(crate) fn check_encodable(&self) -> Result<()> {
        self.chunk.bytes.check_encodable()?;
        self.shard
            .as_ref()
            .map_or(Ok(()), |s| s.index_codecs.check_encodable())
    }

    /// Whether the array is sharded.
    pub(crate) fn is_sharded(&self) -> bool {
        self.shard.is_some()
    }

    /// Decodes one stored (inner) chunk into native C-order elements.
    pub(crate) fn decode(&self, raw: Vec<u8>) -> Result<Vec<u8>> {
        let native = self.chunk.decode(raw)?;
        Ok(match &self.outer_perm {
            None => native,
            Some(p) => {
                let shape: Vec<usize> = self.grid.iter().map(|&n| n as usize).collect();
                untranspose(&native, &shape, p, self.chunk.esize)
            }
        })
    }

    /// The longest variable-length value (in bytes) in one stored chunk or shard; 0 for
    /// fixed-size elements.
    fn max_vlen(&self, key: &str, raw: Vec<u8>) -> Result<usize> {
        let Some(sh) = &self.shard else {
            return self.chunk.max_vlen(raw);
        };
        let bad = |reason: String| Error::BadChunk {
            key: key.to_string(),
            reason,
        };
        let n = usize::try_from(sh.index_len).map_err(|_| bad("index too large".into()))?;
        if raw.len() < n {
            return Err(bad(format!("shard of {} bytes has no index", raw.len())));
        }
        let index = if sh.index_at_end {
            &raw[raw.len() - n..]
        } else {
            &raw[..n]
        };
        let words = sh
            .decode_index(index.to_vec())
            .map_err(|e| bad(e.to_string()))?;
        let mut longest = 0;
        for pair in words.chunks_exact(2) {
            let (offset, nbytes) = (pair[0], pair[1]);
            if offset == u64::MAX && nbytes == u64::MAX {
                continue;
            }
            let part = usize::try_from(offset)
                .ok()
                .zip(usize::try_from(nbytes).ok())
                .and_then(|(o, len)| raw.get(o..o.checked_add(len)?))
                .ok_or_else(|| bad(format!("inner chunk at {offset}+{nbytes} is outside")))?;
            longest = longest.max(self.chunk.max_vlen(part.to_vec())?);
        }
        Ok(longest)
    }
}

/// The composed permutation of the `transpose` codecs at the start of `codecs` (stored
/// dimension `k` is array dimension `perm[k]`; `None` for the identity) and how many they are.
fn leading_transposes(codecs: &[Value], rank: usize) -> Result<(Option<Vec<usize>>, usize)> {
    let mut perm: Option<Vec<usize>> = None;
    let mut i = 0;
    while let Some(entry) = codecs.get(i) {
        let (name, config) = codec_parts(entry)?;
        if name != "transpose" {
            break;
        }
        let order = config.and_then(|c| c.get("order"));
        // zarr-python 3 betas wrote "C" / "F".
        let p: Vec<usize> = match order {
            Some(Value::String(s)) if s == "C" => (0..rank).collect(),
            Some(Value::String(s)) if s == "F" => (0..rank).rev().collect(),
            _ => u64s(name, order, "order")?
                .into_iter()
                .map(|n| usize::try_from(n).unwrap_or(usize::MAX))
                .collect(),
        };
        let mut seen = vec![false; rank];
        if p.len() != rank
            || !p
                .iter()
                .all(|&d| d < rank && !std::mem::replace(&mut seen[d], true))
        {
            return Err(codec_err(
                name,
                format!("order {p:?} is not a permutation of {rank} dimensions"),
            ));
        }
        // Transposes compose: the stored dimension k of the second is dimension p[k] of
        // the first's output.
        perm = Some(match perm {
            None => p,
            Some(prev) => p.iter().map(|&k| prev[k]).collect(),
        });
        i += 1;
    }
    let perm = perm.filter(|p| p.iter().enumerate().any(|(k, &d)| k != d));
    Ok((perm, i))
}

/// The longest value (in bytes) among the stored chunks of a variable-length string array
/// (Zarr v3, or a v2 object array in its v3 spelling) with `codecs` and chunks of `chunk_shape` at key prefix `key`, scanning every chunk (and
/// every inner chunk of every shard). Slots of that width hold every value whole.
pub(crate) fn vlen_max_len(
    map: &dyn ZMap,
    key: &str,
    codecs: &[Value],
    chunk_shape: &[u64],
) -> Result<usize> {
    let dtype = ZarrDtype {
        order: ByteOrder::NotApplicable,
        kind: DtypeKind::Bytes,
        size: 1,
    };
    let chain = V3Chain::new(codecs, chunk_shape, &dtype, NcType::String, 1)?;
    let mut longest = 0;
    let mut pending = vec![key.to_string()];
    while let Some(prefix) = pending.pop() {
        for name in map.search(&prefix)? {
            let child = format!("{prefix}/{name}");
            // The array's own metadata (v3 `zarr.json`, v2 `.zarray` and `.zattrs`).
            if prefix == key && (name == "zarr.json" || name.starts_with('.')) {
                continue;
            }
            match map.get(&child)? {
                // A chunk that cannot be decoded fails its own reads later; the others are
                // still measured, so that they read whole.
                Some(raw) => match chain.max_vlen(&child, raw) {
                    Ok(n) => longest = longest.max(n),
                    Err(e) => log::warn!("{child}: its strings cannot be measured: {e}"),
                },
                None => pending.push(child),
            }
        }
    }
    Ok(longest)
}

impl ChunkCodecs {
    fn new(
        codecs: &[Value],
        shape: &[u64],
        dtype: &ZarrDtype,
        nctype: NcType,
        esize: usize,
    ) -> Result<ChunkCodecs> {
        let (perm, mut i) = leading_transposes(codecs, shape.len())?;
        let a2b = codecs.get(i).map(codec_parts).transpose()?;
        let elements = match a2b.map(|(n, _)| n) {
            Some("vlen-utf8" | "vlen-bytes") => {
                if nctype != NcType::String {
                    return Err(codec_err(
                        a2b.map_or("", |(n, _)| n),
                        format!("on a variable of type {}", nctype.cdl_name()),
                    ));
                }
                i += 1;
                Elements::Vlen {
                    width: esize,
                    utf8: a2b.is_some_and(|(n, _)| n == "vlen-utf8"),
                }
            }
            Some("bytes") | None | Some(_) => {
                if a2b.is_some_and(|(n, _)| n == "bytes") {
                    i += 1;
                }
                Elements::Fixed(Conversion::new(dtype, nctype, esize).map_err(Error::Unsupported)?)
            }
        };
        let bytes = Pipeline::from_v3(&codecs[i..], dtype.size)?;
        let shape_usize = shape
            .iter()
            .map(|&n| usize::try_from(n).ok())
            .collect::<Option<Vec<usize>>>();
        let elems = shape_usize
            .as_ref()
            .and_then(|s| s.iter().try_fold(1usize, |a, &n| a.checked_mul(n)))
            .filter(|n| n.checked_mul(esize.max(dtype.size)).is_some());
        let (Some(shape), Some(elems)) = (shape_usize, elems) else {
            return Err(Error::Unsupported(format!(
                "chunks {shape:?} are too large"
            )));
        };
        Ok(ChunkCodecs {
            perm,
            elements,
            bytes,
            shape,
            elems,
            esize,
        })
    }

    fn decode(&self, raw: Vec<u8>) -> Result<Vec<u8>> {
        let native = match self.elements {
            Elements::Fixed(conv) => {
                let stored = conv.stored_size(self.esize);
                conv.to_native(self.bytes.decode_expect(raw, self.elems * stored)?)
            }
            Elements::Vlen { width, utf8 } => {
                let b = self.bytes.decode(raw)?;
                vlen_to_slots(&b, self.elems, width, utf8)?
            }
        };
        Ok(match &self.perm {
            None => native,
            Some(p) => untranspose(&native, &self.shape, p, self.esize),
        })
    }
}

impl ChunkCodecs {
    /// The longest value (in bytes) of a stored variable-length chunk; 0 for fixed-size
    /// elements.
    fn max_vlen(&self, raw: Vec<u8>) -> Result<usize> {
        let Elements::Vlen { utf8, .. } = self.elements else {
            return Ok(0);
        };
        let b = self.bytes.decode(raw)?;
        let bad = |why: &str| codec_err(if utf8 { "vlen-utf8" } else { "vlen-bytes" }, why);
        let u32_at = |pos: usize| -> Option<usize> {
            let s = b.get(pos..pos.checked_add(4)?)?;
            usize::try_from(u32::from_le_bytes([s[0], s[1], s[2], s[3]])).ok()
        };
        let count = u32_at(0).ok_or_else(|| bad(&vlen_truncated(None, b.len())))?;
        let mut pos = 4usize;
        let mut longest = 0;
        for i in 0..count {
            let (value, next) =
                vlen_value(&b, pos).ok_or_else(|| bad(&vlen_truncated(Some(i), b.len())))?;
            pos = next;
            longest = longest.max(value.len());
        }
        Ok(longest)
    }
}

impl ChunkCodecs {
    /// Encodes one native C-order chunk: transposed, elements to their stored form, then the
    /// bytes-to-bytes codecs.
    fn encode(&self, native: &[u8]) -> Result<Vec<u8>> {
        if native.len() != self.elems * self.esize {
            return Err(Error::Invalid(format!(
                "a chunk of {} bytes, expected {} elements of {}",
                native.len(),
                self.elems,
                self.esize
            )));
        }
        let ordered = match &self.perm {
            None => native.to_vec(),
            Some(p) => transpose(native, &self.shape, p, self.esize),
        };
        let stored = match self.elements {
            Elements::Fixed(conv) => conv.to_stored(ordered),
            Elements::Vlen { width, utf8 } => slots_to_vlen(&ordered, width, utf8)?,
        };
        self.bytes.encode(stored)
    }
}

/// Encodes NUL-padded slots of `width` bytes in numcodecs' VLenUTF8 / VLenBytes layout
/// (`u32` count, then `u32` length and bytes per value, little-endian), each value without
/// its padding.
fn slots_to_vlen(native: &[u8], width: usize, utf8: bool) -> Result<Vec<u8>> {
    let codec = if utf8 { "vlen-utf8" } else { "vlen-bytes" };
    let n = native.len().checked_div(width).unwrap_or(0);
    let mut out = Vec::with_capacity(4 + native.len() + 4 * n);
    let count = u32::try_from(n).map_err(|_| codec_err(codec, "too many values"))?;
    out.extend(count.to_le_bytes());
    for slot in native.chunks_exact(width.max(1)).take(n) {
        let len = slot.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
        let value = &slot[..len];
        if utf8 && std::str::from_utf8(value).is_err() {
            return Err(codec_err(codec, "a value is not valid UTF-8"));
        }
        out.extend((len as u32).to_le_bytes());
        out.extend_from_slice(value);
    }
    Ok(out)
}

/// Reorders a C-order chunk of `shape` into the order stored by `perm` (stored dimension `k`
/// is array dimension `perm[k]`): the inverse of [`untranspose`].
fn transpose(data: &[u8], shape: &[usize], perm: &[usize], esize: usize) -> Vec<u8> {
    let rank = shape.len();
    let mut cstrides = vec![1usize; rank];
    for d in (0..rank.saturating_sub(1)).rev() {
        cstrides[d] = cstrides[d + 1] * shape[d + 1];
    }
    let tshape: Vec<usize> = perm.iter().map(|&d| shape[d]).collect();
    let tstrides: Vec<usize> = perm.iter().map(|&d| cstrides[d] * esize).collect();
    let mut out = Vec::with_capacity(data.len());
    let mut idx = vec![0usize; rank];
    let mut src = 0usize;
    for _ in 0..data.len() / esize.max(1) {
        out.extend_from_slice(&data[src..src + esize]);
        for k in (0..rank).rev() {
            idx[k] += 1;
            src += tstrides[k];
            if idx[k] < tshape[k] {
                break;
            }
            src -= tstrides[k] * tshape[k];
            idx[k] = 0;
        }
    }
    out
}

/// Decodes numcodecs' VLenUTF8 / VLenBytes layout (`u32` count, then `u32` length and bytes
/// per value, little-endian) into `n` slots of `width` bytes.
fn vlen_to_slots(b: &[u8], n: usize, width: usize, utf8: bool) -> Result<Vec<u8>> {
    let bad = |why: &str| codec_err(if utf8 { "vlen-utf8" } else { "vlen-bytes" }, why);
    let u32_at = |pos: usize| -> Option<usize> {
        let s = b.get(pos..pos.checked_add(4)?)?;
        usize::try_from(u32::from_le_bytes([s[0], s[1], s[2], s[3]])).ok()
    };
    let count = u32_at(0).ok_or_else(|| bad(&vlen_truncated(None, b.len())))?;
    if count != n {
        return Err(bad(&format!("{count} values in a chunk of {n} elements")));
    }
    let mut out = vec![0u8; n * width];
    let mut pos = 4;
    for (i, slot) in out.chunks_exact_mut(width.max(1)).take(n).enumerate() {
        let (value, next) =
            vlen_value(b, pos).ok_or_else(|| bad(&vlen_truncated(Some(i), b.len())))?;
        pos = next;
        // The reader sizes slots to the longest stored value; a longer one (written since)
        // must not come back cut short.
        if value.len() > width {
            // A truncated chunk could not be measured when the slots were sized: say that,
            // not that the value has grown.
            let mut rest = pos;
            for j in i + 1..n {
                rest = vlen_value(b, rest)
                    .ok_or_else(|| bad(&vlen_truncated(Some(j), b.len())))?
                    .1;
            }
            return Err(bad(&format!(
                "a value of {} bytes does not fit the variable's {width}-byte strings (the \
                 dataset changed since it was opened?)",
                value.len()
            )));
        }
        slot[..value.len()].copy_from_slice(value);
    }
    Ok(out)
}

/// The value at `pos` of a numcodecs VLen chunk `b` (a `u32` length, then the bytes) and the
/// position after it; `None` when the chunk ends before it does.
fn vlen_value(b: &[u8], pos: usize) -> Option<(&[u8], usize)> {
    let s = b.get(pos..pos.checked_add(4)?)?;
    let len = usize::try_from(u32::from_le_bytes([s[0], s[1], s[2], s[3]])).ok()?;
    let start = pos + 4;
    let end = start.checked_add(len)?;
    Some((b.get(start..end)?, end))
}

/// The error text of a VLen chunk of `len` bytes that ends before its value count (`None`)
/// or its value `index` (from 0) does.
fn vlen_truncated(index: Option<usize>, len: usize) -> String {
    match index {
        None => format!("the chunk is truncated or corrupt: {len} bytes hold no value count"),
        Some(i) => format!(
            "the chunk is truncated or corrupt: its {len} bytes end inside value {}",
            i + 1
        ),
    }
}

/// Reorders a chunk stored transposed by `perm` (stored dimension `k` is array dimension
/// `perm[k]`) into C order of `shape`.
fn untranspose(data: &[u8], shape: &[usize], perm: &[usize], esize: usize) -> Vec<u8> {
    let rank = shape.len();
    let mut cstrides = vec![1usize; rank];
    for d in (0..rank.saturating_sub(1)).rev() {
        cstrides[d] = cstrides[d + 1] * shape[d + 1];
    }
    let tshape: Vec<usize> = perm.iter().map(|&d| shape[d]).collect();
    let tstrides: Vec<usize> = perm.iter().map(|&d| cstrides[d] * esize).collect();
    let mut out = vec![0u8; data.len()];
    let mut idx = vec![0usize; rank];
    let mut dst = 0usize;
    for src in data.chunks_exact(esize.max(1)) {
        out[dst..dst + esize].copy_from_slice(src);
        for k in (0..rank).rev() {
            idx[k] += 1;
            dst += tstrides[k];
            if idx[k] < tshape[k] {
                break;
            }
            dst -= tstrides[k] * tshape[k];
            idx[k] = 0;
        }
    }
    out
}

impl Sharding {
    /// Decodes a stored shard index into (offset, length) words.
    fn decode_index(&self, raw: Vec<u8>) -> Result<Vec<u64>> {
        let b = self.index_codecs.decode_expect(raw, self.n_inner * 16)?;
        Ok(b.chunks_exact(8)
            .map(|w| {
                let a = [w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]];
                if self.index_big {
                    u64::from_be_bytes(a)
                } else {
                    u64::from_le_bytes(a)
                }
            })
            .collect())
    }

    /// The decoded index of the shard at `key` (offset, length pairs), read once.
    fn index(&self, map: &dyn ZMap, key: &str) -> Result<Option<Arc<Vec<u64>>>> {
        let mut cache = self.state.indices.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(hit) = cache.get(key) {
            return Ok(hit.clone());
        }
        let raw = if self.index_at_end {
            map.get_suffix(key, self.index_len)?
        } else {
            map.get_range(key, 0, self.index_len)?
        };
        let index = match raw {
            None => None,
            Some(raw) => {
                let bad = |reason: String| Error::BadChunk {
                    key: key.to_string(),
                    reason,
                };
                if raw.len() as u64 != self.index_len {
                    return Err(bad(format!(
                        "shard of {} bytes cannot hold an index of {}",
                        raw.len(),
                        self.index_len
                    )));
                }
                let words = self
                    .decode_index(raw)
                    .map_err(|e| bad(format!("shard index: {e}")))?;
                Some(Arc::new(words))
            }
        };
        cache.insert(key.to_string(), index.clone());
        Ok(index)
    }
}

impl V3Chain {
    /// The shard grid coordinates and the inner chunk number (C order in the sharding
    /// codec's, possibly transposed, view) of the inner chunk at array-order `coords`.
    fn locate(&self, sh: &Sharding, coords: &[u64]) -> (Vec<u64>, u64) {
        let rank = coords.len();
        let arr_dim = |k: usize| self.outer_perm.as_ref().map_or(k, |p| p[k]);
        let mut per_arr = vec![1u64; rank];
        for (k, &n) in sh.per_shard.iter().enumerate().take(rank) {
            per_arr[arr_dim(k)] = n;
        }
        let shard_coords: Vec<u64> = coords.iter().zip(&per_arr).map(|(c, n)| c / n).collect();
        let mut inner = 0u64;
        for (k, &n) in sh.per_shard.iter().enumerate().take(rank) {
            let d = arr_dim(k);
            inner = inner * n + coords[d] % per_arr[d];
        }
        (shard_coords, inner)
    }

    /// The engine's key of the (inner) chunk at `coords`: `shard_key#inner` for a sharded
    /// array, whose chunks are cached and written back by inner chunk; `None` when unsharded.
    pub(crate) fn inner_key(
        &self,
        coords: &[u64],
        shard_key: impl FnOnce(&[u64]) -> String,
    ) -> Option<String> {
        let sh = self.shard.as_ref()?;
        let (shard_coords, inner) = self.locate(sh, coords);
        Some(format!("{}#{inner}", shard_key(&shard_coords)))
    }

    /// Encodes one native C-order (inner) chunk into its stored bytes.
    pub(crate) fn encode(&self, native: &[u8]) -> Result<Vec<u8>> {
        match &self.outer_perm {
            None => self.chunk.encode(native),
            Some(p) => {
                let shape: Vec<usize> = self.grid.iter().map(|&n| n as usize).collect();
                self.chunk
                    .encode(&transpose(native, &shape, p, self.chunk.esize))
            }
        }
    }

    /// Stores the native chunk `native` at engine key `key`: the chunk itself when unsharded,
    /// else a rewrite of its shard (`shard_key#inner`) holding the new inner chunk and the
    /// other inner chunks as they were (see [`V3Chain::write_shard`]).
    pub(crate) fn write_back(
        &self,
        map: &dyn ZMap,
        key: &str,
        native: &[u8],
        fill: &[u8],
    ) -> Result<()> {
        if self.shard.is_none() {
            return map.put(key, &self.encode(native)?);
        }
        let (shard_key, inner) = split_inner_key(key)?;
        self.write_shard(map, shard_key, &[(inner, native)], fill)
    }

    /// Rewrites the shard at `shard_key` once with the native inner chunks `chunks` (inner
    /// chunk number, values) in place of the ones stored: see [`V3Chain::store_shard`].
    pub(crate) fn write_shard(
        &self,
        map: &dyn ZMap,
        shard_key: &str,
        chunks: &[(usize, &[u8])],
        fill: &[u8],
    ) -> Result<()> {
        let encoded = chunks
            .iter()
            .map(|&(inner, native)| Ok((inner, self.encode_inner(native, fill)?)))
            .collect::<Result<Vec<_>>>()?;
        self.store_shard(map, shard_key, &encoded)
    }

    /// One native inner chunk encoded for its shard; `None` when it holds nothing but `fill`,
    /// which a shard leaves out.
    pub(crate) fn encode_inner(&self, native: &[u8], fill: &[u8]) -> Result<Option<Vec<u8>>> {
        let empty = !fill.is_empty() && native.chunks(fill.len()).all(|e| e == fill);
        (!empty).then(|| self.encode(native)).transpose()
    }

    /// Rewrites the shard at `shard_key` once with the encoded inner chunks `encoded` (inner
    /// chunk number, bytes or `None` for fill) in place of the ones stored, keeping the others
    /// as they were: a write that covers many inner chunks of a shard stores it once, not once
    /// per inner chunk. Fill is left out of the shard (index entry all ones) and a shard left
    /// empty is deleted, as zarr-python does by default (`write_empty_chunks=False`).
    pub(crate) fn store_shard(
        &self,
        map: &dyn ZMap,
        shard_key: &str,
        encoded: &[(usize, Option<Vec<u8>>)],
    ) -> Result<()> {
        let Some(sh) = &self.shard else {
            return Err(Error::Invalid(format!("{shard_key} is not a shard")));
        };
        if let Some((inner, _)) = encoded.iter().find(|(i, _)| *i >= sh.n_inner) {
            return Err(Error::Invalid(format!(
                "inner chunk {inner} of {shard_key}: a shard holds {}",
                sh.n_inner
            )));
        }
        // A shard rewritten whole keeps nothing of the old one, which need not be read.
        let mut given = vec![false; sh.n_inner];
        for (inner, _) in encoded {
            given[*inner] = true;
        }
        let whole = given.iter().all(|g| *g);
        let _turn = sh.state.rewrite.write().unwrap_or_else(|e| e.into_inner());
        let old = if whole { None } else { map.get(shard_key)? };
        let mut parts: Vec<Option<&[u8]>> = vec![None; sh.n_inner];
        if let Some(raw) = &old {
            sh.split(shard_key, raw, &mut parts)?;
        }
        for (inner, bytes) in encoded {
            parts[*inner] = bytes.as_deref();
        }
        let stored = if parts.iter().all(Option::is_none) {
            // A whole rewrite did not look whether there was a shard; deleting an absent
            // object is no error in any map.
            if old.is_some() || whole {
                map.delete(shard_key)
            } else {
                Ok(())
            }
            .map(|()| None)
        } else {
            let (shard, words) = sh.assemble(&parts)?;
            map.put(shard_key, &shard).map(|()| Some(Arc::new(words)))
        };
        let mut indices = sh.state.indices.lock().unwrap_or_else(|e| e.into_inner());
        match stored {
            Ok(index) => {
                indices.insert(shard_key.to_string(), index);
                Ok(())
            }
            Err(e) => {
                // A failed store may still have been kept (an answer lost on the way back),
                // so which shard the map holds is unknown: the index is read again with it.
                indices.remove(shard_key);
                Err(e)
            }
        }
    }
}

/// The shard key and inner chunk number of an engine key `shard_key#inner`.
pub(crate) fn split_inner_key(key: &str) -> Result<(&str, usize)> {
    let bad_key = || Error::Invalid(format!("not an inner chunk key: {key}"));
    let (shard_key, inner) = key.rsplit_once('#').ok_or_else(bad_key)?;
    Ok((shard_key, inner.parse().map_err(|_| bad_key())?))
}

impl Sharding {
    /// Fills `parts` with the inner chunks of the stored shard `raw` (left `None` where the
    /// index says missing).
    fn split<'a>(
        &self,
        shard_key: &str,
        raw: &'a [u8],
        parts: &mut [Option<&'a [u8]>],
    ) -> Result<()> {
        let bad = |reason: String| Error::BadChunk {
            key: shard_key.to_string(),
            reason,
        };
        let n = usize::try_from(self.index_len).map_err(|_| bad("index too large".into()))?;
        if raw.len() < n {
            return Err(bad(format!("shard of {} bytes has no index", raw.len())));
        }
        let index = if self.index_at_end {
            &raw[raw.len() - n..]
        } else {
            &raw[..n]
        };
        let words = self
            .decode_index(index.to_vec())
            .map_err(|e| bad(format!("shard index: {e}")))?;
        for (slot, pair) in parts.iter_mut().zip(words.chunks_exact(2)) {
            let (offset, nbytes) = (pair[0], pair[1]);
            if offset == u64::MAX && nbytes == u64::MAX {
                continue;
            }
            let part = usize::try_from(offset)
                .ok()
                .zip(usize::try_from(nbytes).ok())
                .and_then(|(o, len)| raw.get(o..o.checked_add(len)?))
                .ok_or_else(|| bad(format!("inner chunk at {offset}+{nbytes} is outside")))?;
            *slot = Some(part);
        }
        Ok(())
    }

    /// A shard of the inner chunks `parts` (C order; `None`: missing), with its index at the
    /// configured end, and the index's (offset, length) words.
    fn assemble(&self, parts: &[Option<&[u8]>]) -> Result<(Vec<u8>, Vec<u64>)> {
        let body: usize = parts.iter().flatten().map(|p| p.len()).sum();
        let index_len = usize::try_from(self.index_len)
            .map_err(|_| codec_err("sharding_indexed", "index too large"))?;
        let mut words = Vec::with_capacity(parts.len() * 2);
        let mut offset = if self.index_at_end { 0 } else { index_len } as u64;
        for part in parts {
            match part {
                Some(p) => {
                    words.extend([offset, p.len() as u64]);
                    offset += p.len() as u64;
                }
                None => words.extend([u64::MAX, u64::MAX]),
            }
        }
        let mut index = Vec::with_capacity(words.len() * 8);
        for w in &words {
            index.extend(if self.index_big {
                w.to_be_bytes()
            } else {
                w.to_le_bytes()
            });
        }
        let index = self.index_codecs.encode(index)?;
        if index.len() != index_len {
            return Err(codec_err(
                "sharding_indexed",
                format!("index encoded to {} bytes, not {index_len}", index.len()),
            ));
        }
        let mut shard = Vec::with_capacity(body + index_len);
        if !self.index_at_end {
            shard.extend_from_slice(&index);
        }
        for p in parts.iter().flatten() {
            shard.extend_from_slice(p);
        }
        if self.index_at_end {
            shard.extend_from_slice(&index);
        }
        Ok((shard, words))
    }
}

impl ChunkEngine {
    /// The native inner chunk at inner-grid `coords` of a sharded variable; `None` when its
    /// shard or the chunk itself was never written.
    pub(super) fn fetch_inner(
        &self,
        plan: &Arc<VarPlan>,
        chain: &V3Chain,
        coords: &[u64],
    ) -> Result<Option<Arc<Vec<u8>>>> {
        let Some(sh) = &chain.shard else {
            return Err(Error::Invalid(
                "fetch_inner on an unsharded variable".into(),
            ));
        };
        let (shard_coords, inner) = chain.locate(sh, coords);
        let shard_key = plan.grid_key(&shard_coords);
        let cache_key = format!("{shard_key}#{inner}");
        if let Some(hit) = self.cache.get(&cache_key) {
            return Ok(Some(hit));
        }
        let raw = {
            let _turn = sh.state.rewrite.read().unwrap_or_else(|e| e.into_inner());
            let Some(index) = sh.index(self.map.as_ref(), &shard_key)? else {
                return Ok(None);
            };
            let at = inner as usize * 2;
            let (Some(&offset), Some(&nbytes)) = (index.get(at), index.get(at + 1)) else {
                return Err(Error::BadChunk {
                    key: shard_key,
                    reason: format!("no index entry for inner chunk {inner}"),
                });
            };
            if offset == u64::MAX && nbytes == u64::MAX {
                return Ok(None);
            }
            let bad = |reason: String| Error::BadChunk {
                key: cache_key.clone(),
                reason,
            };
            let raw = self
                .map
                .get_range(&shard_key, offset, nbytes)?
                .ok_or_else(|| bad("shard disappeared".into()))?;
            if raw.len() as u64 != nbytes {
                return Err(bad(format!(
                    "inner chunk at {offset}+{nbytes} runs past the end of the shard"
                )));
            }
            raw
        };
        let native = Arc::new(plan.decode(&cache_key, raw)?);
        if self.cache.fits(native.len()) {
            self.cache
                .insert(&cache_key, Arc::clone(&native), None, &mut |k, d, p| {
                    self.write_back(k, d, p)
                })?;
        }
        Ok(Some(native))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunk::Hyperslab;
    use crate::location::Mode;
    use crate::meta::read_dataset;
    use crate::zmap::MemoryMap;

    /// A map that records every read (ranged or not) and every store, to check that sharded
    /// reads are partial and sharded writes store each shard once; read-only unless
    /// `writable`. While `answers_lost`, a store is kept but reported failed, as when the
    /// server's answer never arrives.
    #[derive(Debug)]
    struct Counting {
        inner: MemoryMap,
        log: Mutex<Vec<String>>,
        writable: bool,
        answers_lost: std::sync::atomic::AtomicBool,
    }

    impl Counting {
        fn answer(&self, key: &str, stored: Result<()>) -> Result<()> {
            stored?;
            if self.answers_lost.load(std::sync::atomic::Ordering::SeqCst) {
                return Err(Error::Storage {
                    key: key.to_string(),
                    reason: "answer lost".into(),
                });
            }
            Ok(())
        }
    }

    impl ZMap for Counting {
        fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
            self.log.lock().unwrap().push(format!("get {key}"));
            self.inner.get(key)
        }
        fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Option<Vec<u8>>> {
            self.log
                .lock()
                .unwrap()
                .push(format!("range {key} {offset} {len}"));
            self.inner.get_range(key, offset, len)
        }
        fn get_suffix(&self, key: &str, len: u64) -> Result<Option<Vec<u8>>> {
            self.log.lock().unwrap().push(format!("suffix {key} {len}"));
            self.inner.get_suffix(key, len)
        }
        fn put(&self, key: &str, value: &[u8]) -> Result<()> {
            self.log.lock().unwrap().push(format!("put {key}"));
            self.answer(key, self.inner.put(key, value))
        }
        fn delete(&self, key: &str) -> Result<()> {
            self.log.lock().unwrap().push(format!("delete {key}"));
            self.answer(key, self.inner.delete(key))
        }
        fn search(&self, prefix: &str) -> Result<Vec<String>> {
            self.inner.search(prefix)
        }
        fn read_only(&self) -> bool {
            !self.writable
        }
        fn describe(&self) -> String {
            "counting".into()
        }
    }

    /// A 4x4 int32 array in one shard of 2x2 inner chunks; inner chunk (1,0) is missing.
    /// Layout per the sharding spec: chunks in any order, then the index (offset, nbytes per
    /// inner chunk in C order, little-endian u64) and its CRC-32C.
    fn sharded_store(index_at_end: bool) -> Counting {
        let value = |i: u64, j: u64| (i * 4 + j) as i32;
        let inner = |ci: u64, cj: u64| -> Vec<u8> {
            let mut b = Vec::new();
            for i in 0..2 {
                for j in 0..2 {
                    b.extend(value(ci * 2 + i, cj * 2 + j).to_le_bytes());
                }
            }
            b
        };
        let index_len = 4 * 16 + 4;
        let base = if index_at_end { 0 } else { index_len };
        // Stored out of grid order on purpose: (1,1) then (0,0) then (0,1).
        let mut body = Vec::new();
        let mut entries = [(u64::MAX, u64::MAX); 4];
        for (ci, cj) in [(1u64, 1u64), (0, 0), (0, 1)] {
            entries[(ci * 2 + cj) as usize] = ((base + body.len()) as u64, 16);
            body.extend(inner(ci, cj));
        }
        let mut index: Vec<u8> = entries
            .iter()
            .flat_map(|(o, n)| o.to_le_bytes().into_iter().chain(n.to_le_bytes()))
            .collect();
        index.extend(crc32c::crc32c(&index).to_le_bytes());
        let shard = if index_at_end {
            [body, index].concat()
        } else {
            [index, body].concat()
        };
        let location = if index_at_end { "end" } else { "start" };
        let meta = format!(
            r#"{{"zarr_format": 3, "node_type": "array", "shape": [4, 4],
            "data_type": "int32", "fill_value": -1,
            "chunk_grid": {{"name": "regular", "configuration": {{"chunk_shape": [4, 4]}}}},
            "chunk_key_encoding": {{"name": "default"}},
            "codecs": [{{"name": "sharding_indexed", "configuration": {{
                "chunk_shape": [2, 2],
                "codecs": [{{"name": "bytes", "configuration": {{"endian": "little"}}}}],
                "index_codecs": [{{"name": "bytes", "configuration": {{"endian": "little"}}}},
                                 {{"name": "crc32c"}}],
                "index_location": "{location}"}}}}],
            "dimension_names": ["y", "x"], "attributes": {{}}}}"#
        );
        let map = MemoryMap::new();
        map.insert("zarr.json", r#"{"zarr_format": 3, "node_type": "group"}"#)
            .unwrap();
        map.insert("a/zarr.json", meta).unwrap();
        map.insert("a/c/0/0", shard).unwrap();
        Counting {
            inner: map,
            log: Mutex::new(Vec::new()),
            writable: false,
            answers_lost: Default::default(),
        }
    }

    fn read_i32(engine: &ChunkEngine, ds: &crate::model::Dataset, slab: Hyperslab) -> Vec<i32> {
        let var = ds.find_var("a").unwrap();
        let mut out = vec![0u8; slab.len() as usize * 4];
        engine.read(ds, var, &slab, &mut out).unwrap();
        out.chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    #[test]
    fn shard_index_at_either_end_and_missing_inner_chunk_is_fill() {
        for at_end in [true, false] {
            let map = Arc::new(sharded_store(at_end));
            let ds = read_dataset(map.as_ref(), &Mode::default()).unwrap();
            let engine = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 1 << 20);
            let got = read_i32(&engine, &ds, Hyperslab::whole(&[4, 4]));
            let want: Vec<i32> = (0..16)
                .map(|k| if k / 4 >= 2 && k % 4 < 2 { -1 } else { k })
                .collect();
            assert_eq!(got, want, "index at end: {at_end}");
        }
    }

    #[test]
    fn hyperslab_reads_only_the_inner_chunks_it_needs() {
        let map = Arc::new(sharded_store(true));
        let ds = read_dataset(map.as_ref(), &Mode::default()).unwrap();
        map.log.lock().unwrap().clear();
        let engine = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 1 << 20);
        let slab = Hyperslab {
            start: vec![0, 2],
            count: vec![2, 2],
            stride: vec![1, 1],
        };
        assert_eq!(read_i32(&engine, &ds, slab), vec![2, 3, 6, 7]);
        // Index (68 bytes at the end), then inner chunk (0,1), stored third at offset 32.
        let log = map.log.lock().unwrap().clone();
        assert_eq!(log, ["suffix a/c/0/0 68", "range a/c/0/0 32 16"]);
    }

    #[test]
    fn corrupt_index_checksum_is_an_error() {
        let map = sharded_store(true);
        let mut shard = map.inner.get("a/c/0/0").unwrap().unwrap();
        let n = shard.len();
        shard[n - 1] ^= 1;
        map.inner.insert("a/c/0/0", shard).unwrap();
        let map = Arc::new(map);
        let ds = read_dataset(map.as_ref(), &Mode::default()).unwrap();
        let engine = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 1 << 20);
        let var = ds.find_var("a").unwrap();
        let mut out = vec![0u8; 64];
        let err = engine
            .read(&ds, var, &Hyperslab::whole(&[4, 4]), &mut out)
            .unwrap_err();
        assert!(matches!(err, Error::BadChunk { .. }), "{err}");
    }

    #[test]
    fn transpose_restores_c_order() {
        // np.arange(6).reshape(2, 3).T.tobytes() == [0, 3, 1, 4, 2, 5].
        let stored = [0u8, 3, 1, 4, 2, 5];
        assert_eq!(
            untranspose(&stored, &[2, 3], &[1, 0], 1),
            [0, 1, 2, 3, 4, 5]
        );
        // A 3-d permutation: shape (2,3,4), order [2,0,1]: stored[k][i][j] = a[i][j][k].
        let shape = [2usize, 3, 4];
        let mut stored = Vec::new();
        for k in 0..4 {
            for i in 0..2 {
                for j in 0..3 {
                    stored.push((i * 12 + j * 4 + k) as u8);
                }
            }
        }
        let want: Vec<u8> = (0..24).collect();
        assert_eq!(untranspose(&stored, &shape, &[2, 0, 1], 1), want);
    }

    /// A store of one array from its `zarr.json` and chunks.
    fn store(meta: &str, chunks: &[(&str, Vec<u8>)]) -> Arc<MemoryMap> {
        let map = MemoryMap::new();
        map.insert("zarr.json", r#"{"zarr_format": 3, "node_type": "group"}"#)
            .unwrap();
        map.insert("a/zarr.json", meta).unwrap();
        for (k, v) in chunks {
            map.insert(k, v.clone()).unwrap();
        }
        Arc::new(map)
    }

    /// A shard body of `inner` chunks followed by its index and the index's CRC-32C.
    fn shard(inner: &[Vec<u8>]) -> Vec<u8> {
        let mut body = Vec::new();
        let mut index = Vec::new();
        for c in inner {
            index.extend((body.len() as u64).to_le_bytes());
            index.extend((c.len() as u64).to_le_bytes());
            body.extend(c);
        }
        let crc = crc32c::crc32c(&index).to_le_bytes();
        [body, index, crc.to_vec()].concat()
    }

    #[test]
    fn transpose_outside_the_shard() {
        // zarr-python's filters=[TransposeCodec(order=(1, 0))] with shards: the 2x4 shard is
        // transposed to 4x2 and cut into inner chunks of 2x2 in that order.
        // a[i][j] = 4i + j; T = a.T; inner 0 = T[0:2] = [0, 4, 1, 5], inner 1 = [2, 6, 3, 7].
        let ints = |v: &[i32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
        let meta = r#"{"zarr_format": 3, "node_type": "array", "shape": [2, 4],
            "data_type": "int32", "fill_value": 0,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 4]}},
            "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}},
                {"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 2],
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}]}"#;
        let sh = shard(&[ints(&[0, 4, 1, 5]), ints(&[2, 6, 3, 7])]);
        let map = store(meta, &[("a/c/0/0", sh)]);
        let ds = read_dataset(map.as_ref(), &Mode::default()).unwrap();
        let engine = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 1 << 20);
        let got = read_i32(&engine, &ds, Hyperslab::whole(&[2, 4]));
        assert_eq!(got, (0..8).collect::<Vec<i32>>());
        let slab = Hyperslab {
            start: vec![0, 3],
            count: vec![2, 1],
            stride: vec![1, 1],
        };
        assert_eq!(read_i32(&engine, &ds, slab), vec![3, 7]);
    }

    /// numcodecs' VLenUTF8 encoding of `values`.
    fn vlen(values: &[&str]) -> Vec<u8> {
        let mut b = (values.len() as u32).to_le_bytes().to_vec();
        for s in values {
            b.extend((s.len() as u32).to_le_bytes());
            b.extend(s.as_bytes());
        }
        b
    }

    #[test]
    fn long_vlen_strings_widen_the_variable() {
        let long = "é".repeat(150) + "end";
        let meta = r#"{"zarr_format": 3, "node_type": "array", "shape": [3],
            "data_type": "string", "fill_value": "",
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [3]}},
            "codecs": [{"name": "transpose", "configuration": {"order": [0]}},
                {"name": "sharding_indexed", "configuration": {"chunk_shape": [1],
                "codecs": [{"name": "vlen-utf8"}]}}]}"#;
        let sh = shard(&[vlen(&["a"]), vlen(&[&long]), vlen(&["b"])]);
        let map = store(meta, &[("a/c/0", sh)]);
        let ds = read_dataset(map.as_ref(), &Mode::default()).unwrap();
        let var = ds.find_var("a").unwrap();
        assert_eq!(ds.var(var).string_width, long.len());
        let engine = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 1 << 20);
        let mut out = vec![0u8; 3 * long.len()];
        engine
            .read(&ds, var, &Hyperslab::whole(&[3]), &mut out)
            .unwrap();
        assert_eq!(&out[long.len()..2 * long.len()], long.as_bytes());
        assert_eq!(out[0], b'a');
        // A value longer than the slots (the dataset changed since it was opened) fails.
        let b = vlen(&["abc"]);
        assert!(vlen_to_slots(&b, 1, 2, true).is_err());
    }

    #[test]
    fn vlen_layout() {
        // numcodecs.VLenUTF8().encode(np.array(["a", "héllo"], dtype=object))
        let mut b = 2u32.to_le_bytes().to_vec();
        for s in ["a", "héllo"] {
            b.extend((s.len() as u32).to_le_bytes());
            b.extend(s.as_bytes());
        }
        let slots = vlen_to_slots(&b, 2, 8, true).unwrap();
        assert_eq!(&slots[..8], b"a\0\0\0\0\0\0\0");
        assert_eq!(&slots[8..], "héllo\0\0".as_bytes());
        assert!(vlen_to_slots(&b, 3, 8, true).is_err());
        assert!(vlen_to_slots(&b[..b.len() - 1], 2, 8, true).is_err());
    }

    #[test]
    fn a_truncated_vlen_chunk_is_called_so() {
        // numcodecs.VLenUTF8().encode(["x", "", "hello world", "ab"]) cut 3 bytes short, which
        // zarr-python refuses ("corrupt buffer, data seem truncated"); its measuring failed,
        // so the slots may be as narrow as the values before the cut.
        let b = vlen(&["x", "", "hello world", "ab"]);
        let cut = &b[..b.len() - 3];
        for width in [1, 11] {
            let e = vlen_to_slots(cut, 4, width, true).unwrap_err().to_string();
            assert!(e.contains("truncated or corrupt"), "{e}");
            assert!(e.contains("inside value 4"), "{e}");
        }
        let e = vlen_to_slots(&b[..2], 4, 11, true).unwrap_err().to_string();
        assert!(
            e.contains("truncated or corrupt: 2 bytes hold no value count"),
            "{e}"
        );
        // Whole, a value longer than the slots has been written since they were sized.
        let e = vlen_to_slots(&b, 4, 1, true).unwrap_err().to_string();
        assert!(e.contains("since it was opened"), "{e}");
    }

    /// The stored type of a v3 `data_type` as the reader makes it.
    fn test_dtype(name: &str, big: bool) -> ZarrDtype {
        let (kind, size) = match name {
            "int32" => (DtypeKind::Int, 4),
            "float16" => (DtypeKind::Float, 2),
            _ => (DtypeKind::Bytes, 1),
        };
        let order = match (size, big) {
            (1, _) => ByteOrder::NotApplicable,
            (_, true) => ByteOrder::Big,
            _ => ByteOrder::Little,
        };
        ZarrDtype { order, kind, size }
    }

    /// Encodes `native` through the chain of `codecs` (chunks of `shape`) and decodes it back.
    fn round_trip(codecs: Value, shape: &[u64], dtype: &str, nctype: NcType, native: &[u8]) {
        let dtype = test_dtype(dtype, codecs.to_string().contains("\"big\""));
        let codecs = codecs.as_array().unwrap().clone();
        let esize = native.len() / shape.iter().product::<u64>() as usize;
        let chain = V3Chain::new(&codecs, shape, &dtype, nctype, esize).unwrap();
        assert!(!chain.is_sharded());
        let stored = chain.encode(native).unwrap();
        assert_eq!(chain.decode(stored).unwrap(), native, "{codecs:?}");
    }

    #[test]
    fn every_v3_chain_round_trips() {
        use serde_json::json;
        let ints: Vec<u8> = (0..24i32)
            .flat_map(|v| (v * 1000 - 7).to_le_bytes())
            .collect();
        let bytes_le = json!({"name": "bytes", "configuration": {"endian": "little"}});
        let bytes_be = json!({"name": "bytes", "configuration": {"endian": "big"}});
        let chains = [
            json!([bytes_le]),
            json!([bytes_be]),
            json!([{"name": "transpose", "configuration": {"order": [2, 0, 1]}}, bytes_le,
                   {"name": "gzip", "configuration": {"level": 5}}]),
            json!([bytes_be, {"name": "zstd", "configuration": {"level": 3, "checksum": true}}]),
            json!([bytes_le, {"name": "blosc", "configuration": {"cname": "lz4", "clevel": 5,
                   "shuffle": "shuffle", "typesize": 4, "blocksize": 0}}]),
            json!([bytes_le, {"name": "crc32c"}]),
            json!([bytes_le, {"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
                   {"name": "numcodecs.zlib", "configuration": {"level": 1}}, {"name": "crc32c"}]),
        ];
        for codecs in chains {
            round_trip(codecs, &[2, 3, 4], "int32", NcType::Int, &ints);
        }
        // float16: halves that are exact in binary16 come back as they were.
        let floats: Vec<u8> = [
            0.0f32,
            -1.5,
            65504.0,
            2.0f32.powi(-24),
            f32::INFINITY,
            0.333,
        ]
        .iter()
        .flat_map(|f| f.to_le_bytes())
        .collect();
        let chain = json!([bytes_be]);
        let dtype = test_dtype("float16", true);
        let c = V3Chain::new(chain.as_array().unwrap(), &[6], &dtype, NcType::Float, 4).unwrap();
        let back = c.decode(c.encode(&floats).unwrap()).unwrap();
        assert_eq!(back[..20], floats[..20]);
        // 0.333 is not a half; the nearest one is 0x3554 (numpy.float16(0.333).view('u2')).
        assert_eq!(crate::chunk::convert::f32_to_half(0.333), 0x3554);
        assert_eq!(crate::chunk::convert::f32_to_half(1e-8), 0);
        assert_eq!(crate::chunk::convert::f32_to_half(65520.0), 0x7c00);
        assert!(
            crate::meta::v3::half_to_f32(crate::chunk::convert::f32_to_half(f32::NAN)).is_nan()
        );
        // Variable-length strings, NUL-padded in 6-byte slots.
        let slots = b"a\0\0\0\0\0h\xc3\xa9llo\0\0\0\0\0\0";
        round_trip(
            json!([{"name": "vlen-utf8"}]),
            &[3],
            "string",
            NcType::String,
            slots,
        );
        round_trip(
            json!([{"name": "vlen-bytes"}, {"name": "gzip", "configuration": {"level": 1}}]),
            &[3],
            "bytes",
            NcType::String,
            slots,
        );
        // numcodecs.VLenUTF8().encode(np.array(["a", "héllo", ""], dtype=object)).
        assert_eq!(
            slots_to_vlen(slots, 6, true).unwrap(),
            vlen(&["a", "héllo", ""])
        );
        assert!(slots_to_vlen(b"\xff\0", 2, true).is_err());
    }

    /// The index length counted from the layout is that of the index the index codecs make,
    /// and a layout whose index would be larger than a chunk is refused as it is built.
    #[test]
    fn index_length_is_counted_and_bounded() {
        use serde_json::json;
        let dtype = ZarrDtype {
            order: ByteOrder::NotApplicable,
            kind: DtypeKind::UInt,
            size: 1,
        };
        let sharded = |shard: u64, index_codecs: Value| {
            let codecs = json!([{"name": "sharding_indexed", "configuration": {
                "chunk_shape": [1], "codecs": [{"name": "bytes"}],
                "index_codecs": index_codecs}}]);
            V3Chain::new(
                codecs.as_array().unwrap(),
                &[shard],
                &dtype,
                NcType::UByte,
                1,
            )
        };
        let bytes = json!({"name": "bytes", "configuration": {"endian": "little"}});
        let big = json!({"name": "bytes", "configuration": {"endian": "big"}});
        let crc = json!({"name": "crc32c"});
        for list in [
            json!([bytes]),
            json!([bytes, crc]),
            json!([big, crc]),
            json!([bytes, crc, crc]),
        ] {
            for shard in [1, 7, 64] {
                let chain = sharded(shard, list.clone()).unwrap();
                let sh = chain.shard.unwrap();
                let encoded = sh
                    .index_codecs
                    .encode(vec![0; shard as usize * 16])
                    .unwrap();
                assert_eq!(sh.index_len, encoded.len() as u64, "{list} for {shard}");
            }
        }
        // The largest layout whose index (16 bytes per inner chunk, 4 for crc32c) fits.
        let most = (MAX_CHUNK_BYTES - 4) / 16;
        let chain = sharded(most, json!([bytes, crc])).unwrap();
        assert_eq!(chain.shard.unwrap().index_len, most * 16 + 4);
        let e = sharded(most + 1, json!([bytes, crc]))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains(&format!("{} inner chunks per shard", most + 1)),
            "{e}"
        );
        let e = sharded(1 << 30, json!([bytes, crc]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("1073741824 inner chunks per shard"), "{e}");
    }

    #[test]
    fn transpose_inverts_untranspose() {
        let data: Vec<u8> = (0..48).collect();
        for perm in [[2usize, 0, 1], [1, 2, 0], [0, 2, 1]] {
            let stored = transpose(&data, &[2, 3, 4], &perm, 2);
            assert_eq!(untranspose(&stored, &[2, 3, 4], &perm, 2), data);
        }
        // np.arange(6).reshape(2, 3).T.tobytes() == [0, 3, 1, 4, 2, 5].
        assert_eq!(
            transpose(&[0, 1, 2, 3, 4, 5], &[2, 3], &[1, 0], 1),
            [0, 3, 1, 4, 2, 5]
        );
    }

    fn write_i32(engine: &ChunkEngine, ds: &crate::model::Dataset, slab: Hyperslab, v: &[i32]) {
        let var = ds.find_var("a").unwrap();
        let data: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        engine.write(ds, var, &slab, &data).unwrap();
    }

    #[test]
    fn a_write_stores_each_shard_it_covers_once() {
        let mut store = sharded_store(true);
        store.writable = true;
        let map = Arc::new(store);
        let ds = read_dataset(map.as_ref(), &Mode::default()).unwrap();
        // No room in the cache: whole inner chunks go straight to storage.
        let engine = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 0);
        let shard_ops = || -> Vec<String> {
            let ops = std::mem::take(&mut *map.log.lock().unwrap());
            ops.into_iter()
                .filter(|op| op.ends_with("a/c/0/0"))
                .collect()
        };
        shard_ops();
        // Rows 0-1 cover inner chunks (0,0) and (0,1): the old shard is read once for the
        // other two, and the new one stored once.
        let rows: Vec<i32> = (100..108).collect();
        let slab = Hyperslab {
            start: vec![0, 0],
            count: vec![2, 4],
            stride: vec![1, 1],
        };
        write_i32(&engine, &ds, slab, &rows);
        assert_eq!(shard_ops(), ["get a/c/0/0", "put a/c/0/0"]);
        let mut expect: Vec<i32> = (0..16)
            .map(|k| if k / 4 >= 2 && k % 4 < 2 { -1 } else { k })
            .collect();
        expect[..8].copy_from_slice(&rows);
        let fresh = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 0);
        assert_eq!(read_i32(&fresh, &ds, Hyperslab::whole(&[4, 4])), expect);
        // The whole array: every inner chunk is new, so the old shard is not even read.
        let all: Vec<i32> = (200..216).collect();
        write_i32(&engine, &ds, Hyperslab::whole(&[4, 4]), &all);
        assert_eq!(shard_ops(), ["put a/c/0/0"]);
        let fresh = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 0);
        assert_eq!(read_i32(&fresh, &ds, Hyperslab::whole(&[4, 4])), all);
        // Nothing but fill: the shard goes.
        write_i32(&engine, &ds, Hyperslab::whole(&[4, 4]), &[-1; 16]);
        assert_eq!(shard_ops(), ["delete a/c/0/0"]);
        assert_eq!(map.inner.get("a/c/0/0").unwrap(), None);
    }

    #[test]
    fn a_shard_whose_store_answer_was_lost_is_read_with_its_stored_index() {
        let mut store = sharded_store(true);
        store.writable = true;
        let map = Arc::new(store);
        let ds = read_dataset(map.as_ref(), &Mode::default()).unwrap();
        let engine = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 0);
        // The stored shard's index is read and kept.
        let old: Vec<i32> = (0..16)
            .map(|k| if k / 4 >= 2 && k % 4 < 2 { -1 } else { k })
            .collect();
        assert_eq!(read_i32(&engine, &ds, Hyperslab::whole(&[4, 4])), old);
        // Rows 0-1 rewritten: the server keeps the new shard, whose inner chunks lie elsewhere
        // than in the old one, but the answer is lost.
        map.answers_lost
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let rows: Vec<i32> = (100..108).collect();
        let slab = Hyperslab {
            start: vec![0, 0],
            count: vec![2, 4],
            stride: vec![1, 1],
        };
        let data: Vec<u8> = rows.iter().flat_map(|x| x.to_le_bytes()).collect();
        let var = ds.find_var("a").unwrap();
        assert!(engine.write(&ds, var, &slab, &data).is_err());
        map.answers_lost
            .store(false, std::sync::atomic::Ordering::SeqCst);
        // What the server holds is read whole by the same engine (no room in its cache for
        // inner chunks): the new shard through its own index, not the one kept before.
        let mut stored = old;
        stored[..8].copy_from_slice(&rows);
        assert_eq!(read_i32(&engine, &ds, Hyperslab::whole(&[4, 4])), stored);
    }

    #[test]
    fn a_flush_stores_each_shard_once_however_many_inner_chunks_changed() {
        let mut store = sharded_store(true);
        store.writable = true;
        let map = Arc::new(store);
        let ds = read_dataset(map.as_ref(), &Mode::default()).unwrap();
        // Room in the cache: element writes stay there until the flush.
        let engine = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 1 << 20);
        let shard_ops = || -> Vec<String> {
            let ops = std::mem::take(&mut *map.log.lock().unwrap());
            ops.into_iter()
                .filter(|op| op.starts_with("put") || op.starts_with("get"))
                .collect()
        };
        let element = |i: u64, j: u64| Hyperslab {
            start: vec![i, j],
            count: vec![1, 1],
            stride: vec![1, 1],
        };
        // One element in each of three inner chunks, the missing (1,0) among them.
        for (i, j, v) in [(0, 0, 50), (2, 1, 51), (3, 3, 52)] {
            write_i32(&engine, &ds, element(i, j), &[v]);
        }
        shard_ops();
        engine.flush().unwrap();
        assert_eq!(shard_ops(), ["get a/c/0/0", "put a/c/0/0"]);
        let mut expect: Vec<i32> = (0..16)
            .map(|k| if k / 4 >= 2 && k % 4 < 2 { -1 } else { k })
            .collect();
        (expect[0], expect[9], expect[15]) = (50, 51, 52);
        let fresh = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 0);
        assert_eq!(read_i32(&fresh, &ds, Hyperslab::whole(&[4, 4])), expect);
    }

    #[test]
    fn partial_shard_rewrite_keeps_the_other_inner_chunks() {
        for at_end in [true, false] {
            let map = Arc::new(sharded_store(at_end).inner);
            let ds = read_dataset(map.as_ref(), &Mode::default()).unwrap();
            let engine = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 1 << 20);
            // One element of inner chunk (0,1): 3 → 100.
            let slab = Hyperslab {
                start: vec![0, 3],
                count: vec![1, 1],
                stride: vec![1, 1],
            };
            write_i32(&engine, &ds, slab, &[100]);
            engine.flush().unwrap();
            // The shard from first principles: inner chunks in C order, (1,0) still missing.
            let ints = |v: &[i32]| -> Vec<u8> { v.iter().flat_map(|x| x.to_le_bytes()).collect() };
            let chunks = [
                Some(ints(&[0, 1, 4, 5])),
                Some(ints(&[2, 100, 6, 7])),
                None,
                Some(ints(&[10, 11, 14, 15])),
            ];
            let base = if at_end { 0 } else { 68 };
            let mut body = Vec::new();
            let mut index = Vec::new();
            for c in &chunks {
                let (o, n) = match c {
                    Some(c) => ((base + body.len()) as u64, c.len() as u64),
                    None => (u64::MAX, u64::MAX),
                };
                index.extend(o.to_le_bytes());
                index.extend(n.to_le_bytes());
                body.extend(c.iter().flatten());
            }
            index.extend(crc32c::crc32c(&index).to_le_bytes());
            let want = if at_end {
                [body, index].concat()
            } else {
                [index, body].concat()
            };
            assert_eq!(
                map.get("a/c/0/0").unwrap().unwrap(),
                want,
                "at end {at_end}"
            );
            // A fresh engine reads the new values.
            let fresh = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 1 << 20);
            let got = read_i32(&fresh, &ds, Hyperslab::whole(&[4, 4]));
            let mut expect: Vec<i32> = (0..16)
                .map(|k| if k / 4 >= 2 && k % 4 < 2 { -1 } else { k })
                .collect();
            expect[3] = 100;
            assert_eq!(got, expect);
        }
    }

    #[test]
    fn fill_inner_chunks_are_left_out_and_an_empty_shard_deleted() {
        let map = Arc::new(sharded_store(true).inner);
        let ds = read_dataset(map.as_ref(), &Mode::default()).unwrap();
        let engine = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 1 << 20);
        // Write into the missing inner chunk (1,0) and blank (0,0), (0,1) and (1,1).
        let mut all = vec![-1i32; 16];
        all[8] = 42;
        write_i32(&engine, &ds, Hyperslab::whole(&[4, 4]), &all);
        engine.flush().unwrap();
        let shard = map.get("a/c/0/0").unwrap().unwrap();
        let mut index = Vec::new();
        for (o, n) in [(u64::MAX, u64::MAX); 2]
            .into_iter()
            .chain([(0, 16), (u64::MAX, u64::MAX)])
        {
            index.extend(o.to_le_bytes());
            index.extend(n.to_le_bytes());
        }
        index.extend(crc32c::crc32c(&index).to_le_bytes());
        let body: Vec<u8> = [42i32, -1, -1, -1]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        assert_eq!(shard, [body, index].concat());
        write_i32(&engine, &ds, Hyperslab::whole(&[4, 4]), &[-1; 16]);
        engine.flush().unwrap();
        assert_eq!(map.get("a/c/0/0").unwrap(), None);
        assert_eq!(
            read_i32(&engine, &ds, Hyperslab::whole(&[4, 4])),
            vec![-1; 16]
        );
    }

    #[test]
    fn sharded_transposed_gzip_writes_read_back() {
        // Two shards of 2x4, transposed outside, inner chunks gzip-compressed.
        let meta = r#"{"zarr_format": 3, "node_type": "array", "shape": [4, 4],
            "data_type": "int16", "fill_value": 0,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 4]}},
            "codecs": [{"name": "transpose", "configuration": {"order": [1, 0]}},
                {"name": "sharding_indexed", "configuration": {"chunk_shape": [2, 1],
                "index_location": "start",
                "codecs": [{"name": "bytes", "configuration": {"endian": "big"}},
                           {"name": "gzip", "configuration": {"level": 1}}]}}]}"#;
        let map = store(meta, &[]);
        let ds = read_dataset(map.as_ref(), &Mode::default()).unwrap();
        let var = ds.find_var("a").unwrap();
        let engine = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 1 << 20);
        let data: Vec<u8> = (1..=16i16).flat_map(|v| v.to_le_bytes()).collect();
        engine
            .write(&ds, var, &Hyperslab::whole(&[4, 4]), &data)
            .unwrap();
        let slab = Hyperslab {
            start: vec![1, 1],
            count: vec![2, 2],
            stride: vec![1, 1],
        };
        engine
            .write(&ds, var, &slab, &[9, 0, 9, 0, 9, 0, 9, 0])
            .unwrap();
        engine.flush().unwrap();
        let fresh = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 1 << 20);
        let mut out = vec![0u8; 32];
        fresh
            .read(&ds, var, &Hyperslab::whole(&[4, 4]), &mut out)
            .unwrap();
        let got: Vec<i16> = out
            .chunks_exact(2)
            .map(|c| i16::from_le_bytes([c[0], c[1]]))
            .collect();
        let mut want: Vec<i16> = (1..=16).collect();
        for k in [5, 6, 9, 10] {
            want[k] = 9;
        }
        assert_eq!(got, want);
        assert!(map.get("a/c/0/0").unwrap().is_some() && map.get("a/c/1/0").unwrap().is_some());
    }

    /// One int32 array `v` of 8 in one shard of four inner chunks of 2 (fill -1), inner
    /// chunk 1 = [20, 21] and the others missing; and `b`, 16 int32 values 0..16 in one
    /// unsharded chunk, whose read pushes `v`'s chunks out of a 64-byte cache.
    fn growing_store() -> Arc<MemoryMap> {
        let map = MemoryMap::new();
        map.insert("zarr.json", r#"{"zarr_format": 3, "node_type": "group"}"#)
            .unwrap();
        map.insert(
            "v/zarr.json",
            r#"{"zarr_format": 3, "node_type": "array", "shape": [8],
            "data_type": "int32", "fill_value": -1,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [8]}},
            "chunk_key_encoding": {"name": "default"},
            "codecs": [{"name": "sharding_indexed", "configuration": {"chunk_shape": [2],
                "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}]}}],
            "dimension_names": ["t"], "attributes": {}}"#,
        )
        .unwrap();
        // Sharding spec: inner chunks, then (offset, nbytes) per inner chunk as little-endian
        // u64 (all ones: missing) and the index's CRC-32C.
        let body: Vec<u8> = [20i32, 21].iter().flat_map(|x| x.to_le_bytes()).collect();
        let mut index = Vec::new();
        for (offset, nbytes) in [
            (u64::MAX, u64::MAX),
            (0, 8),
            (u64::MAX, u64::MAX),
            (u64::MAX, u64::MAX),
        ] {
            index.extend(offset.to_le_bytes());
            index.extend(nbytes.to_le_bytes());
        }
        index.extend(crc32c::crc32c(&index).to_le_bytes());
        map.insert("v/c/0", [body, index].concat()).unwrap();
        map.insert(
            "b/zarr.json",
            r#"{"zarr_format": 3, "node_type": "array", "shape": [16],
            "data_type": "int32", "fill_value": 0,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [16]}},
            "chunk_key_encoding": {"name": "default"},
            "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
            "dimension_names": ["n"], "attributes": {}}"#,
        )
        .unwrap();
        let b: Vec<u8> = (0..16i32).flat_map(|x| x.to_le_bytes()).collect();
        map.insert("b/c/0", b).unwrap();
        Arc::new(map)
    }

    #[test]
    fn a_shard_rewritten_through_the_plan_before_growth_is_read_right_after_it() {
        let map = growing_store();
        let mut ds = read_dataset(map.as_ref(), &Mode::default()).unwrap();
        let v = ds.find_var("v").unwrap();
        let engine = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 64);
        let one = |i: u64| Hyperslab {
            start: vec![i],
            count: vec![1],
            stride: vec![1],
        };
        let write = |ds: &crate::model::Dataset, i: u64, x: i32| {
            engine.write(ds, v, &one(i), &x.to_le_bytes()).unwrap();
        };
        let read = |ds: &crate::model::Dataset, start: u64, n: u64| -> Vec<i32> {
            let slab = Hyperslab {
                start: vec![start],
                count: vec![n],
                stride: vec![1],
            };
            let mut out = vec![0u8; n as usize * 4];
            engine.read(ds, v, &slab, &mut out).unwrap();
            out.chunks_exact(4)
                .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect()
        };
        let mut model = vec![-1, -1, 20, 21, -1, -1, -1, -1];
        // Inner chunk 0 is dirtied through the plan of the 8-long array...
        write(&ds, 0, 1234);
        model[0] = 1234;
        // ...and the array grows (as a rw mount grows it), which rebuilds the plan.
        let t = ds.var(v).dims[0];
        ds.dims[t.0].len = 9;
        ds.vars[v.0].storage.shape = vec![9];
        write(&ds, 8, 5);
        model.push(5);
        // The new plan reads the shard's index, in which inner chunk 1 comes first.
        assert_eq!(read(&ds, 2, 2), model[2..4]);
        // Inner chunk 0 goes in through the old plan, and inner chunk 1 moves behind it.
        engine.flush().unwrap();
        let b = ds.find_var("b").unwrap();
        let mut out = vec![0u8; 64];
        engine
            .read(&ds, b, &Hyperslab::whole(&[16]), &mut out)
            .unwrap();
        assert_eq!(read(&ds, 2, 2), model[2..4]);
        // A read-modify-write of inner chunk 1 keeps its other value.
        write(&ds, 3, 99);
        model[3] = 99;
        engine.flush().unwrap();
        assert_eq!(read(&ds, 0, 9), model);
        let fresh = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, 0);
        let mut out = vec![0u8; 36];
        fresh
            .read(&ds, v, &Hyperslab::whole(&[9]), &mut out)
            .unwrap();
        let stored: Vec<i32> = out
            .chunks_exact(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        assert_eq!(stored, model);
    }
}
