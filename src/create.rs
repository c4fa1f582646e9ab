//! The write side: creating a dataset, defining its groups, dimensions, variables and
//! attributes, writing hyperslabs, renaming and deleting, and making it all durable.
//!
//! [`DatasetWriter`] owns a model and a chunk engine over a writable storage map. Values go
//! through [`ChunkEngine::write`] (write-back: chunks stay in the cache until a flush or an
//! eviction); [`DatasetWriter::sync`] stores dirty chunks first and metadata last, then
//! flushes the map. Each object put is atomic, so a writer killed at any moment leaves a
//! dataset whose metadata describes an older, complete state: chunks written since then are
//! either invisible (beyond the recorded shape) or replace chunks of the same shape.
//!
//! Default chunk sizes follow netcdf-c's NCZarr rule (`ncz_find_default_chunksizes2`): about
//! 16 MiB per chunk, spread evenly over the fixed dimensions, 1 along unlimited dimensions
//! (4096 bytes' worth for a 1-D unlimited variable), then trimmed so the last chunk along
//! each dimension does not overhang much.

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{json, Value};

use crate::chunk::{ChunkEngine, Hyperslab};
use crate::codec::{netcdf_element_size, NETCDF_STRING_ELEMENT, NUMCODECS_ELEMENTSIZE};
use crate::interrupt;
use crate::location::{Format, Location, Mode, Storage};
use crate::meta::writer::{default_dtype, write_metadata, Dialect, WriteOptions};
use crate::meta::writer_v3;
use crate::model::{
    AttrValue, Attribute, ByteOrder, ChunkKeyEncoding, ChunkOrder, CodecSpec, Dataset, DimId,
    DtypeKind, GroupId, NcType, NczarrLayout, VarId, VarStorage, Variable,
};
use crate::zmap::{join_key, ZMap};
use crate::{meta, zmap, Error, Result};

/// netcdf-c's default chunk size in bytes (`DEFAULT_CHUNK_SIZE`; 16 MiB in 4.10.1 as built
/// in the netCDF4 wheels, measured with `Variable.chunking()`).
const DEFAULT_CHUNK_BYTES: f64 = 16_777_216.0;
/// netcdf-c's chunk length budget for 1-D unlimited variables (`DEFAULT_1D_UNLIM_SIZE`).
const DEFAULT_1D_UNLIM_BYTES: u64 = 4096;
/// Decoded-chunk cache of a writer: dirty chunks wait here until a flush.
pub const WRITER_CACHE_BYTES: usize = 64 << 20;

/// How a new dataset is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOptions {
    /// NCZarr or pure Zarr v2.
    pub dialect: Dialect,
    /// Write `_ARRAY_DIMENSIONS` (false for `noxarray`).
    pub xarray: bool,
    /// Write a consolidated `.zmetadata`.
    pub consolidated: bool,
    /// Chunk key separator, `.` (default) or `/` (Zarr v2 only; Zarr v3 always uses `/`).
    pub separator: char,
    /// The Zarr format written: 2 (default) or 3.
    pub zarr_version: u8,
    /// Where NCZarr v2 keeps its own keys: the layout of the netcdf-c releases that must read
    /// the dataset.
    pub layout: NczarrLayout,
    /// The root's `_NCProperties` (NCZarr only): who wrote the dataset. A dataset opened for
    /// writing keeps its own, as netcdf-c keeps it.
    pub nc_properties: Option<String>,
}

/// The `_NCProperties` of a dataset made for the netcdf-c release `netcdf_c`.
pub fn nc_properties_for(netcdf_c: &str) -> String {
    format!(
        "version=2,nczarrfs={},netcdf={netcdf_c}",
        env!("CARGO_PKG_VERSION")
    )
}

/// Makes `opts` write a dataset for the netcdf-c release `version` (`--for-netcdf-c`): the
/// NCZarr layout it reads, and its number in `_NCProperties`.
pub fn write_for_netcdf_c(opts: &mut CreateOptions, version: &str) -> Result<()> {
    if opts.dialect != Dialect::NcZarr || opts.zarr_version != 2 {
        return Err(Error::Invalid(
            "--for-netcdf-c chooses where NCZarr keeps its metadata on Zarr v2: pure Zarr is \
             the same for every netcdf-c release, and netcdf-c reads no Zarr v3"
                .into(),
        ));
    }
    opts.layout = NczarrLayout::for_netcdf_c(version).map_err(Error::Invalid)?;
    opts.nc_properties = Some(nc_properties_for(version));
    Ok(())
}

/// The netcdf-c release whose layout new datasets have by default.
const DEFAULT_NETCDF_C: &str = "4.10.1";

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            dialect: Dialect::NcZarr,
            xarray: true,
            consolidated: false,
            separator: '.',
            zarr_version: 2,
            layout: NczarrLayout::Attributes,
            nc_properties: Some(nc_properties_for(DEFAULT_NETCDF_C)),
        }
    }
}

impl CreateOptions {
    /// The options a location's `#mode=` asks for (`nczarr` when it says nothing).
    pub fn from_mode(mode: &Mode) -> Self {
        CreateOptions {
            dialect: match mode.format {
                Some(Format::Zarr) => Dialect::Zarr,
                _ => Dialect::NcZarr,
            },
            xarray: mode.xarray.unwrap_or(true),
            consolidated: mode.consolidated,
            separator: '.',
            zarr_version: mode.zarr_version.unwrap_or(2),
            ..CreateOptions::default()
        }
    }

    /// The metadata writer's options.
    pub fn write_options(&self) -> WriteOptions {
        WriteOptions {
            dialect: self.dialect,
            xarray: self.xarray,
            consolidated: self.consolidated,
            nc_properties: self
                .nc_properties
                .clone()
                .filter(|_| self.dialect == Dialect::NcZarr),
            layout: self.layout,
        }
    }
}

/// An ordered codec chain in Zarr v2 form: filters, then an optional compressor.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Codecs {
    /// Codecs applied first when encoding, in order.
    pub filters: Vec<Value>,
    /// The last codec, when it is a compressor.
    pub compressor: Option<Value>,
}

fn is_compressor(c: &Value) -> bool {
    matches!(
        c.get("id").and_then(Value::as_str),
        Some("zlib" | "gzip" | "zstd" | "bz2" | "lz4" | "blosc")
    )
}

/// The codec words of [`Codecs::parse`], for its messages.
const CODEC_FORMS: &str = "none, shuffle, fletcher32, zlib[:0..9], gzip[:0..9], \
     zstd[:-131072..22], bz2[:1..9], lz4, blosc[:CNAME[:0..9[:SHUFFLE 0..2]]], or a JSON list \
     of numcodecs objects";

impl Codecs {
    /// A chain from codec objects in encoding order: a trailing compressor becomes the
    /// `compressor`, everything before it a filter.
    pub fn from_chain(mut chain: Vec<Value>) -> Codecs {
        let compressor = match chain.last() {
            Some(c) if is_compressor(c) => chain.pop(),
            _ => None,
        };
        Codecs {
            filters: chain,
            compressor,
        }
    }

    /// The chain in encoding order.
    pub fn chain(&self) -> Vec<Value> {
        let mut out = self.filters.clone();
        out.extend(self.compressor.clone());
        out
    }

    /// netCDF's classic settings: shuffle, then a fletcher32 checksum, then zlib.
    pub fn netcdf(deflate: Option<u32>, shuffle: bool, fletcher32: bool) -> Codecs {
        let mut chain = Vec::new();
        if shuffle {
            chain.push(json!({"id": "shuffle", "elementsize": 0}));
        }
        if fletcher32 {
            chain.push(json!({"id": "fletcher32"}));
        }
        if let Some(level) = deflate {
            chain.push(json!({"id": "zlib", "level": level}));
        }
        Codecs::from_chain(chain)
    }

    /// Parses a comma-separated list of codec words in encoding order: `none`, `shuffle`,
    /// `fletcher32`, `zlib[:L]`, `gzip[:L]`, `zstd[:L]`, `bz2[:L]`, `lz4`,
    /// `blosc[:CNAME[:L[:SHUFFLE]]]` (SHUFFLE 0, 1 or 2), or a JSON list of codec objects.
    pub fn parse(spec: &str) -> Result<Codecs> {
        let spec = spec.trim();
        if spec.starts_with('[') {
            return Codecs::from_json(spec);
        }
        let mut chain = Vec::new();
        for word in spec.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let mut parts = word.split(':');
            let name = parts.next().unwrap_or("").to_ascii_lowercase();
            let args: Vec<&str> = parts.collect();
            let bad = |why: &str| {
                Error::Invalid(format!(
                    "invalid codec {word:?}: {why} (forms: {CODEC_FORMS})"
                ))
            };
            let num = |i: usize, what: &str, default: i64, lo: i64, hi: i64| -> Result<i64> {
                match args.get(i) {
                    None => Ok(default),
                    Some(a) => a
                        .parse::<i64>()
                        .ok()
                        .filter(|n| (lo..=hi).contains(n))
                        .ok_or_else(|| bad(&format!("{what} {a:?} is not from {lo} to {hi}"))),
                }
            };
            let codec = match name.as_str() {
                "none" => continue,
                "shuffle" => json!({"id": "shuffle", "elementsize": 0}),
                "fletcher32" => json!({"id": "fletcher32"}),
                "zlib" | "deflate" => json!({"id": "zlib", "level": num(0, "level", 6, 0, 9)?}),
                "gzip" => json!({"id": "gzip", "level": num(0, "level", 6, 0, 9)?}),
                "zstd" => json!({"id": "zstd", "level": num(0, "level", 3, -131072, 22)?}),
                "bz2" | "bzip2" => json!({"id": "bz2", "level": num(0, "level", 9, 1, 9)?}),
                "lz4" => json!({"id": "lz4", "acceleration": 1}),
                "blosc" => {
                    let cname = args.first().copied().unwrap_or("lz4");
                    if !BLOSC_CNAMES.contains(&cname) {
                        return Err(bad(&format!(
                            "blosc has no compressor {cname:?} in numcodecs, which zarr-python \
                             uses (it has {})",
                            BLOSC_CNAMES.join(", ")
                        )));
                    }
                    json!({"id": "blosc", "cname": cname, "clevel": num(1, "level", 5, 0, 9)?,
                           "shuffle": num(2, "shuffle", 1, 0, 2)?, "blocksize": 0})
                }
                _ => return Err(bad("no such codec")),
            };
            let most = if name == "blosc" { 3 } else { 1 };
            if args.len() > most {
                return Err(bad(&format!("{name} takes at most {most} `:` argument(s)")));
            }
            chain.push(codec);
        }
        Ok(Codecs::from_chain(chain))
    }

    /// A `_Codecs` text: a JSON list of numcodecs objects (`{"id": "zlib", "level": 1}`) or
    /// of Zarr v3 codecs (`{"name": "numcodecs.zlib", "configuration": {"level": 1}}`, as
    /// `dump -s` shows a Zarr v3 variable's chain), or of both. Zarr v3's `bytes`,
    /// `transpose` and string codecs say how values become bytes, which the target's type
    /// decides, so they are left out.
    pub fn from_json(text: &str) -> Result<Codecs> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| Error::Invalid(format!("_Codecs is not JSON ({e}): {text}")))?;
        let Value::Array(list) = v else {
            return Err(Error::Invalid(format!(
                "_Codecs is not a JSON list: {text}"
            )));
        };
        let mut chain = Vec::with_capacity(list.len());
        for c in list {
            if c.get("id").and_then(Value::as_str).is_some() {
                chain.push(c);
            } else if c.get("name").and_then(Value::as_str).is_some() {
                let v2 = writer_v3::codecs_v2(std::slice::from_ref(&c))
                    .map_err(|e| Error::Invalid(format!("codec {c}: {e}")))?;
                chain.extend(v2);
            } else {
                return Err(Error::Invalid(format!(
                    "codec without an \"id\" (numcodecs) or a \"name\" (Zarr v3): {c}"
                )));
            }
        }
        Ok(Codecs::from_chain(chain))
    }

    /// An HDF5 `_Filter` text (`id,param,...|id,...`) for the filters netcdf-c maps to
    /// numcodecs: 1 deflate, 2 shuffle, 3 fletcher32, 307 bzip2, 32001 blosc, 32015 zstd.
    pub fn from_hdf5_filter(text: &str) -> Result<Codecs> {
        let mut chain = Vec::new();
        for spec in text.split('|').map(str::trim).filter(|s| !s.is_empty()) {
            let nums: Vec<i64> = spec
                .split(',')
                .map(|n| n.trim().parse::<i64>())
                .collect::<std::result::Result<_, _>>()
                .map_err(|_| Error::Invalid(format!("invalid _Filter entry {spec:?}")))?;
            let param = |i: usize, default: i64| nums.get(i).copied().unwrap_or(default);
            chain.push(match nums.first().copied().unwrap_or(0) {
                1 => json!({"id": "zlib", "level": param(1, 6)}),
                2 => json!({"id": "shuffle", "elementsize": 0}),
                3 => json!({"id": "fletcher32"}),
                307 => json!({"id": "bz2", "level": param(1, 9)}),
                32015 => json!({"id": "zstd", "level": param(1, 3)}),
                // HDF5's blosc parameters (as ncdump -s prints them after the id): two
                // reserved, type size, chunk bytes, then level, shuffle and compressor.
                32001 => {
                    let cname = ["blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd"]
                        .get(usize::try_from(param(7, 1)).unwrap_or(1))
                        .copied()
                        .unwrap_or("lz4");
                    json!({"id": "blosc", "cname": cname, "clevel": param(5, 5),
                           "shuffle": param(6, 1), "blocksize": 0})
                }
                id => {
                    return Err(Error::Unsupported(format!(
                    "HDF5 filter {id} has no Zarr codec here (known: 1, 2, 3, 307, 32001, 32015)"
                )))
                }
            });
        }
        Ok(Codecs::from_chain(chain))
    }

    /// The model's codec description.
    pub fn spec(&self) -> CodecSpec {
        CodecSpec::V2 {
            filters: self.filters.clone(),
            compressor: self.compressor.clone(),
        }
    }
}

/// A variable's fill setting.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Fill {
    /// netCDF's default fill value for the type (stored in `fill_value`, no attribute).
    #[default]
    Default,
    /// No fill value (`_NoFill`): `fill_value` is `null`.
    NoFill,
    /// This native element; also shown as the `_FillValue` attribute.
    Value(Vec<u8>),
}

/// How a new variable is stored.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VarOptions {
    /// Chunk lengths (one per dimension); `None` for netcdf-c's defaults.
    pub chunks: Option<Vec<u64>>,
    /// The codec chain.
    pub codecs: Codecs,
    /// The fill setting.
    pub fill: Fill,
    /// Store multi-byte numbers big-endian.
    pub big_endian: bool,
    /// Width in bytes of `string` elements (0: netcdf-c's default 128).
    pub string_width: usize,
}

/// netcdf-c's width of a string variable's elements in Zarr (`|S128`) unless
/// `_nczarr_maxstrlen` says otherwise.
pub const NETCDF_MAXSTRLEN: usize = 128;

/// Where an attribute lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrTarget {
    /// A group's attribute (the root's are the global attributes).
    Group(GroupId),
    /// A variable's attribute.
    Var(VarId),
}

/// The shuffle of a string variable's chunks of `chunk_bytes` bytes as every reader decodes
/// it: netcdf-c shuffles strings in 8-byte elements whatever its metadata says, numcodecs
/// in the recorded element size and only buffers that are a multiple of it. So the shuffle
/// is recorded as 8, or dropped when the chunks are not a multiple of 8 bytes.
fn string_shuffle(codecs: CodecSpec, chunk_bytes: u64) -> CodecSpec {
    let CodecSpec::V2 {
        filters,
        compressor,
    } = codecs
    else {
        return codecs;
    };
    let is_shuffle = |f: &Value| f.get("id").and_then(Value::as_str) == Some("shuffle");
    let filters = if chunk_bytes % NETCDF_STRING_ELEMENT as u64 == 0 {
        filters
            .into_iter()
            .map(|f| match is_shuffle(&f) {
                true => json!({"id": "shuffle", "elementsize": NETCDF_STRING_ELEMENT}),
                false => f,
            })
            .collect()
    } else {
        filters.into_iter().filter(|f| !is_shuffle(f)).collect()
    };
    CodecSpec::V2 {
        filters,
        compressor,
    }
}

/// The chain without its shuffle filters.
fn without_shuffle(codecs: CodecSpec) -> CodecSpec {
    let CodecSpec::V2 {
        filters,
        compressor,
    } = codecs
    else {
        return codecs;
    };
    CodecSpec::V2 {
        filters: filters
            .into_iter()
            .filter(|f| codec_id(f) != "shuffle")
            .collect(),
        compressor,
    }
}

/// A codec object's `id` (`""` without one).
fn codec_id(codec: &Value) -> &str {
    codec.get("id").and_then(Value::as_str).unwrap_or("")
}

/// The codecs netcdf-c's NCZarr has filters for (its own plugins and those it bundles).
pub const NETCDF_CODECS: [&str; 7] = [
    "zlib",
    "shuffle",
    "fletcher32",
    "szip",
    "bz2",
    "zstd",
    "blosc",
];

/// The compressors of numcodecs' blosc (c-blosc also has `snappy`, which numcodecs is built
/// without, and netcdf-c refuses a dataset using it).
pub const BLOSC_CNAMES: [&str; 5] = ["blosclz", "lz4", "lz4hc", "zlib", "zstd"];

/// A chain of an NCZarr variable as netcdf-c reads it, the values unchanged: a shuffle by
/// another element size than the type's becomes netcdf-c's `elementsize: 0` (netcdf-c
/// shuffles by the type size whatever the metadata says, so it would decode other values),
/// a negative zstd level becomes 1 (netcdf-c refuses to open a dataset holding one). Other
/// codecs netcdf-c lacks are kept, with a warning naming the variable it will not read.
/// `element_size` is what netcdf-c shuffles the variable by ([`netcdf_element_size`]).
fn for_netcdf_c(fqn: &str, codecs: CodecSpec, element_size: usize) -> CodecSpec {
    let CodecSpec::V2 {
        filters,
        compressor,
    } = codecs
    else {
        return codecs;
    };
    let readable = |c: Value| -> Value {
        let int = |key: &str| c.get(key).and_then(Value::as_i64);
        match codec_id(&c) {
            "shuffle" => {
                let n = c
                    .get("elementsize")
                    .map_or(Some(NUMCODECS_ELEMENTSIZE as i64), |n| n.as_i64());
                if n.is_some_and(|n| n != 0 && n != element_size as i64) {
                    log::warn!(
                        "{fqn}: shuffled by its type size {element_size}, not {} (netcdf-c \
                         shuffles by the type size, whatever the metadata says); the values \
                         are the same",
                        n.unwrap_or_default()
                    );
                    return json!({"id": "shuffle", "elementsize": 0});
                }
                c
            }
            "zstd" if int("level").is_some_and(|l| l < 0) => {
                log::warn!(
                    "{fqn}: zstd level {} stored as 1 (netcdf-c cannot open a dataset holding \
                     a negative zstd level); the values are the same",
                    int("level").unwrap_or_default()
                );
                let mut c = c.clone();
                c["level"] = json!(1);
                c
            }
            id if !NETCDF_CODECS.contains(&id) => {
                log::warn!("{fqn}: netcdf-c has no codec {id}, so it will not read this variable");
                c
            }
            _ => c,
        }
    };
    CodecSpec::V2 {
        filters: filters.into_iter().map(readable).collect(),
        compressor: compressor.map(readable),
    }
}

/// Refuses a chain whose chunks of `chunk_bytes` bytes (elements of `dtype_size` bytes)
/// numcodecs, and so zarr-python, could not decode: a blosc compressor it lacks (`snappy`),
/// and a shuffle over a stream that is not a whole number of its elements (numcodecs refuses
/// to unshuffle one): after a compressor, whose output has any length, or with an element
/// size that does not divide the chunk's bytes.
fn check_numcodecs_chain(
    fqn: &str,
    codecs: &CodecSpec,
    chunk_bytes: u64,
    dtype_size: usize,
) -> Result<()> {
    let CodecSpec::V2 {
        filters,
        compressor,
    } = codecs
    else {
        return Ok(());
    };
    let refuse = |why: String| Err(Error::Invalid(format!("variable {fqn}: {why}")));
    // The length of the stream the next codec encodes, while it is known; the compressor
    // that made it unknown.
    let mut stream = Ok(chunk_bytes);
    for c in filters.iter().chain(compressor) {
        match codec_id(c) {
            "blosc" => {
                let cname = c.get("cname").and_then(Value::as_str).unwrap_or("lz4");
                if !BLOSC_CNAMES.contains(&cname) {
                    return refuse(format!(
                        "blosc compressor {cname:?}, which numcodecs' blosc (zarr-python's) \
                         does not have and netcdf-c refuses; choose one of {}",
                        BLOSC_CNAMES.join(", ")
                    ));
                }
                stream = Err("blosc");
            }
            "shuffle" => {
                let es = match c.get("elementsize").map(Value::as_u64) {
                    None => NUMCODECS_ELEMENTSIZE as u64,
                    Some(Some(0)) | Some(None) => dtype_size as u64,
                    Some(Some(n)) => n,
                };
                match stream {
                    _ if es <= 1 => {}
                    Err(compressor) => {
                        return refuse(format!(
                            "a shuffle after the compressor {compressor}, whose output numcodecs \
                             (zarr-python) cannot unshuffle unless it happens to be a multiple \
                             of {es} bytes; put the shuffle before the compressor"
                        ))
                    }
                    Ok(n) if n % es != 0 => {
                        return refuse(format!(
                            "a shuffle of {es}-byte elements over chunks of {n} bytes, which \
                             numcodecs (zarr-python) cannot unshuffle (not a whole number of \
                             elements); choose an element size that divides {n}"
                        ))
                    }
                    Ok(_) => {}
                }
            }
            // numcodecs' checksums add 4 bytes.
            "fletcher32" | "crc32" | "crc32c" | "adler32" => stream = stream.map(|n| n + 4),
            id @ ("zlib" | "gzip" | "zstd" | "bz2" | "lz4") => stream = Err(id),
            _ => {}
        }
    }
    Ok(())
}

/// netcdf-c's default chunk lengths for a variable of element size `esize` with dimensions
/// `(len, unlimited)`.
pub fn default_chunks(dims: &[(u64, bool)], esize: usize) -> Vec<u64> {
    let esize = esize.max(1) as f64;
    let n = dims.len();
    let num_unlim = dims.iter().filter(|d| d.1).count();
    let num_values: f64 = dims.iter().filter(|d| !d.1).map(|d| d.0 as f64).product();
    let mut chunks: Vec<u64> = dims.iter().map(|d| u64::from(d.1)).collect();
    if n == 1 && num_unlim == 1 {
        // netcdf-c divides by the type size twice here; so do we, for identical layouts.
        let suggested = (DEFAULT_CHUNK_BYTES / esize).min(DEFAULT_1D_UNLIM_BYTES as f64) as u64;
        chunks[0] = (suggested / esize as u64).max(1);
    }
    if n > 1 && num_unlim == n {
        let s = (DEFAULT_CHUNK_BYTES / esize).powf(1.0 / n as f64) as u64;
        chunks = vec![s.max(1); n];
    }
    for (d, (len, unlim)) in dims.iter().enumerate() {
        if !unlim {
            let s = ((DEFAULT_CHUNK_BYTES / (num_values * esize))
                .powf(1.0 / (n - num_unlim) as f64)
                * *len as f64
                - 0.5) as u64;
            chunks[d] = s.min(*len).max(1);
        }
    }
    // Chunks must stay below 4 GiB (netcdf-c's check_chunksizes).
    while chunks.iter().map(|&c| c as f64).product::<f64>() * esize > u32::MAX as f64 {
        for c in chunks.iter_mut() {
            *c = (*c / 2).max(1);
        }
    }
    for (d, (len, _)) in dims.iter().enumerate() {
        let num_chunks = len.div_ceil(chunks[d]);
        if num_chunks > 0 {
            let overhang = num_chunks * chunks[d] - len;
            chunks[d] -= overhang / num_chunks;
        }
    }
    chunks
}

/// Refuses a variable that could not be read back: more bytes than its `data` file can
/// address (netCDF-4 refuses such a variable too), or a codec parameter the reader refuses
/// (ncgen's `_Filter = "1,99"`).
fn check_storable(v: &Variable, dims: &[(u64, bool)]) -> Result<()> {
    let element_size = v.element_size();
    let addressable = dims
        .iter()
        .try_fold(element_size as u64, |a, (len, _)| a.checked_mul(*len))
        .is_some_and(|n| n <= i64::MAX as u64);
    if !addressable {
        return Err(Error::Invalid(format!(
            "variable {}: more bytes than a file can address (2^63)",
            v.name
        )));
    }
    if let CodecSpec::V2 {
        filters,
        compressor,
    } = &v.storage.codecs
    {
        let shuffle = crate::codec::netcdf_element_size(v.nctype, element_size);
        crate::codec::Pipeline::from_v2(filters, compressor.as_ref(), shuffle)
            .map_err(|e| Error::Invalid(format!("variable {}: {e}", v.name)))?;
    }
    Ok(())
}

/// Checks a netCDF name (the rules ncgen and netcdf-c apply).
pub fn check_name(name: &str) -> Result<()> {
    crate::model::check_name(name)
        .map_err(|why| Error::Invalid(format!("invalid name {name:?}: {why}")))
}

/// Checks a new attribute name: a valid netCDF name, and none that netcdf-c reserves (it
/// answers "String match to name in use"): HDF5's dimension-scale attributes and netCDF-4's
/// own anywhere, the format's on the root group. NCZarr's own keys, in either case, would
/// be taken for the dataset's metadata.
pub fn check_attr_name(target: AttrTarget, name: &str) -> Result<()> {
    const EVERYWHERE: [&str; 10] = [
        "CLASS",
        "DIMENSION_LIST",
        "NAME",
        "REFERENCE_LIST",
        "_ARRAY_DIMENSIONS",
        "_IsNetcdf4",
        "_NCProperties",
        "_Netcdf4Coordinates",
        "_Netcdf4Dimid",
        "_SuperblockVersion",
    ];
    const ROOT: [&str; 3] = ["_Codecs", "_Format", "_nc3_strict"];
    check_name(name)?;
    let root = matches!(target, AttrTarget::Group(g) if g == Dataset::ROOT);
    if EVERYWHERE.contains(&name)
        || (root && ROOT.contains(&name))
        || name.to_ascii_lowercase().starts_with("_nczarr_")
    {
        return Err(Error::NotPermitted(format!(
            "attribute name {name} is reserved by netCDF"
        )));
    }
    Ok(())
}

/// Every content-bearing key at or under `prefix`.
pub fn keys_under(map: &dyn ZMap, prefix: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack = vec![prefix.to_string()];
    while let Some(p) = stack.pop() {
        let children = map.search(&p)?;
        if children.is_empty() {
            if !p.is_empty() && map.exists(&p)? {
                out.push(p);
            }
            continue;
        }
        for c in children {
            stack.push(join_key(&[&p, &c]));
        }
    }
    out.sort();
    Ok(out)
}

/// A dataset open for writing.
#[derive(Debug)]
pub struct DatasetWriter {
    location: Location,
    map: Arc<dyn ZMap>,
    model: Dataset,
    engine: ChunkEngine,
    opts: CreateOptions,
    /// Variables that are stored, or hold values (their fill value and dtype are fixed).
    has_data: HashSet<VarId>,
    meta_dirty: bool,
    /// The unlimited dimensions as the writer found them stored, with their lengths, until it
    /// first grows them: the variables then on them may hold values past that length that
    /// another writer stored but never recorded (see [`DatasetWriter::grow_dim`]).
    stored_lengths: HashMap<DimId, u64>,
    /// How many variables the writer found stored (the first ones of the model).
    stored_vars: usize,
}

impl DatasetWriter {
    /// Creates an empty dataset at `location`; refuses a location that already holds one.
    /// The root group's metadata is written at once, so the new dataset opens right away.
    pub fn create(location: &Location, opts: CreateOptions) -> Result<DatasetWriter> {
        Self::create_with(location, opts, Dataset::new())
    }

    /// Creates a dataset at `location` holding `model`'s groups, dimensions, variables and
    /// attributes. Each variable's storage is completed: its key from its group path, its
    /// dtype from its type and the dialect (keeping a big-endian order), its shape from its
    /// dimensions, netcdf-c's default chunks unless valid ones are given. Codecs and fill
    /// values are kept as given.
    pub fn create_with(
        location: &Location,
        opts: CreateOptions,
        model: Dataset,
    ) -> Result<DatasetWriter> {
        let map = zmap::open(location, true)?;
        if map.exists(".zgroup")?
            || map.exists(".zarray")?
            || map.exists(".nczarr")?
            || map.exists("zarr.json")?
        {
            return Err(Error::NotPermitted(format!(
                "{} already holds a dataset",
                location.original
            )));
        }
        let mut w = DatasetWriter {
            location: location.clone(),
            engine: ChunkEngine::new(Arc::clone(&map), WRITER_CACHE_BYTES),
            map,
            model,
            opts,
            has_data: HashSet::new(),
            meta_dirty: true,
            stored_lengths: HashMap::new(),
            stored_vars: 0,
        };
        for i in 0..w.model.vars.len() {
            w.complete_storage(VarId(i))?;
        }
        w.write_meta()?;
        w.map.flush()?;
        Ok(w)
    }

    /// Opens an existing dataset for writing (a `rw` mount, appending records).
    pub fn open(location: &Location) -> Result<DatasetWriter> {
        Self::open_with_cache(location, WRITER_CACHE_BYTES)
    }

    /// Like [`DatasetWriter::open`], with a chunk cache of `cache_bytes` (changed chunks wait
    /// there until a flush or until the cache needs room).
    pub fn open_with_cache(location: &Location, cache_bytes: usize) -> Result<DatasetWriter> {
        // A missing dataset is told as `get` and `dump` tell it, not as an empty store (a
        // writable map may be missing until its first object).
        if let Storage::File(p) | Storage::Zip(p) = &location.storage {
            std::fs::metadata(p).map_err(|e| Error::io(p, e))?;
        }
        let map = zmap::open(location, true)?;
        map.claim_writer()?;
        let model = meta::read_stored_objects(map.as_ref(), &location.mode)?;
        // The model holds no metadata of a variable it cannot read (a complex or datetime
        // array), so rewriting the metadata would replace that variable's with a byte array's.
        // One unreadable only for an unknown codec keeps its chain as stored.
        let lost = |v: &Variable| {
            v.storage.unreadable.is_some()
                && crate::codec::unknown_codec(&v.storage.codecs).is_none()
        };
        if let Some(v) = (0..model.vars.len())
            .map(VarId)
            .find(|v| lost(model.var(*v)))
        {
            return Err(Error::Unsupported(format!(
                "{} cannot be opened for writing: variable {} is not supported ({}), and \
                 rewriting the metadata would lose its description; open it read-only",
                map.describe(),
                model.var_fqn(v),
                model
                    .var(v)
                    .storage
                    .unreadable
                    .as_deref()
                    .unwrap_or_default()
            )));
        }
        let probe = |key: &str| -> Result<bool> {
            Ok(map
                .get(key)?
                .is_some_and(|b| String::from_utf8_lossy(&b).contains("_nczarr")))
        };
        let v3 = location.mode.zarr_version == Some(3)
            || (location.mode.zarr_version.is_none()
                && !map.exists(".zgroup")?
                && map.exists("zarr.json")?);
        let nczarr = match location.mode.format {
            Some(Format::NcZarr) => true,
            Some(Format::Zarr) => false,
            None if v3 => probe("zarr.json")?,
            None => model.provenance.layout.is_some(),
        };
        let mut opts = CreateOptions::from_mode(&location.mode);
        opts.zarr_version = if v3 { 3 } else { 2 };
        opts.dialect = if nczarr {
            Dialect::NcZarr
        } else {
            Dialect::Zarr
        };
        if location.mode.xarray.is_none() {
            opts.xarray = !nczarr || probe_xarray(map.as_ref(), &model)?;
        }
        if nczarr && !v3 {
            opts.layout = model.provenance.layout.unwrap_or_default();
            if opts.layout == NczarrLayout::Objects1 {
                return Err(Error::Unsupported(format!(
                    "{}: writing to an NCZarr 1.0.0 dataset (the layout of netcdf-c 4.8.0), \
                     which nczarrfs does not write: copy it first, and write to the copy",
                    map.describe()
                )));
            }
        }
        opts.nc_properties = model.provenance.ncproperties.clone();
        // A consolidated summary stays, kept up to date with every change of the metadata.
        opts.consolidated = opts.consolidated
            || match v3 {
                true => v3_root_is_consolidated(map.as_ref())?,
                false => map.exists(".zmetadata")?,
            };
        let has_data = (0..model.vars.len()).map(VarId).collect();
        // A writer killed while a flush replaced a group's dimension sizes and its arrays'
        // shapes one after the other leaves them disagreeing, which netcdf-c refuses: the next
        // flush of this writer completes it.
        let meta_dirty = nczarr
            && (0..model.vars.len()).map(VarId).any(|v| {
                let stored = &model.var(v).storage.shape;
                !model.var(v).dims.is_empty() && *stored != model.var_shape(v)
            });
        let stored_lengths = (0..model.dims.len())
            .map(DimId)
            .filter(|d| model.dim(*d).unlimited)
            .map(|d| (d, model.dim(d).len))
            .collect();
        Ok(DatasetWriter {
            location: location.clone(),
            engine: ChunkEngine::new(Arc::clone(&map), cache_bytes),
            map,
            stored_vars: model.vars.len(),
            model,
            opts,
            has_data,
            meta_dirty,
            stored_lengths,
        })
    }

    /// The model as defined so far.
    pub fn model(&self) -> &Dataset {
        &self.model
    }

    /// The chunk engine (reads see unflushed writes).
    pub fn engine(&self) -> &ChunkEngine {
        &self.engine
    }

    /// The storage map.
    pub fn map(&self) -> &Arc<dyn ZMap> {
        &self.map
    }

    /// Where the dataset is.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// The options the dataset is written with.
    pub fn options(&self) -> &CreateOptions {
        &self.opts
    }

    fn check_free_name(&self, group: GroupId, name: &str, what: &str) -> Result<()> {
        check_name(name)?;
        let clash = match what {
            "dimension" => self.model.find_dim_in(group, name).is_some(),
            _ => {
                self.model.find_var_in(group, name).is_some()
                    || self.model.find_group_in(group, name).is_some()
            }
        };
        if clash {
            return Err(Error::NotPermitted(format!(
                "{} already exists",
                self.model.fqn_in(group, name)
            )));
        }
        Ok(())
    }

    /// Adds a subgroup.
    pub fn add_group(&mut self, parent: GroupId, name: &str) -> Result<GroupId> {
        self.check_free_name(parent, name, "group")?;
        self.meta_dirty = true;
        Ok(self.model.add_group(parent, name))
    }

    /// Adds a subgroup and stores the metadata at once; when storing fails, the group is
    /// taken out again, so that the failure does not come back at every later sync (a `rw`
    /// mount's `mkdir`).
    pub fn add_group_stored(&mut self, parent: GroupId, name: &str) -> Result<GroupId> {
        let before = self.model.clone();
        let g = self.add_group(parent, name)?;
        // Objects already there (strays of another program) would be taken for the group's.
        let prefix = self.model.group_path(g).join("/");
        let stray = keys_under(self.map.as_ref(), &prefix).map(|keys| keys.into_iter().next());
        if !matches!(stray, Ok(None)) {
            self.model = before;
            let stray = stray?.unwrap_or_default();
            return Err(Error::NotPermitted(format!(
                "cannot make group {prefix:?}: storage already holds objects there ({stray:?}) \
                 that are not part of the dataset"
            )));
        }
        if let Err(e) = self.sync() {
            self.model = before;
            self.meta_dirty = true;
            return Err(e);
        }
        Ok(g)
    }

    /// Adds a dimension (an unlimited one starts at `len`, usually 0).
    pub fn add_dim(
        &mut self,
        group: GroupId,
        name: &str,
        len: u64,
        unlimited: bool,
    ) -> Result<DimId> {
        self.check_free_name(group, name, "dimension")?;
        self.meta_dirty = true;
        Ok(self.model.add_dim(group, name, len, unlimited))
    }

    /// Adds a variable over dimensions visible from `group`.
    pub fn add_var(
        &mut self,
        group: GroupId,
        name: &str,
        nctype: NcType,
        dims: &[DimId],
        opts: VarOptions,
    ) -> Result<VarId> {
        self.check_free_name(group, name, "variable")?;
        for d in dims {
            let dim = self.model.dims.get(d.0).ok_or_else(|| {
                Error::NotFound(format!("dimension #{} for variable {name}", d.0))
            })?;
            if self.model.find_dim_visible(group, &dim.name) != Some(*d) {
                return Err(Error::NotPermitted(format!(
                    "dimension {} is not visible from {}",
                    self.model.dim_fqn(*d),
                    self.model.group_fqn(group)
                )));
            }
        }
        let string_width = match (nctype, opts.string_width) {
            (NcType::String, 0) => NETCDF_MAXSTRLEN,
            (NcType::String, w) => w,
            _ => 0,
        };
        let mut var = Variable {
            name: name.to_string(),
            group,
            nctype,
            dims: dims.to_vec(),
            string_width,
            attrs: Vec::new(),
            storage: VarStorage {
                chunks: opts.chunks.clone().unwrap_or_default(),
                codecs: opts.codecs.spec(),
                ..VarStorage::default()
            },
        };
        if opts.big_endian {
            let mut dtype = default_dtype(nctype, string_width, self.opts.dialect);
            dtype.order = ByteOrder::Big;
            var.storage.dtype = Some(dtype);
        }
        var.storage.fill_value = match &opts.fill {
            Fill::Default => Some(padded(nctype.default_fill(), var.element_size())),
            Fill::NoFill => None,
            Fill::Value(bytes) => {
                if bytes.len() != var.element_size() {
                    return Err(Error::Invalid(format!(
                        "fill value of {} bytes for {name} (elements of {} bytes)",
                        bytes.len(),
                        var.element_size()
                    )));
                }
                var.attrs.push(Attribute {
                    name: "_FillValue".into(),
                    value: AttrValue::from_native(nctype, bytes),
                });
                Some(bytes.clone())
            }
        };
        if let Some(chunks) = &opts.chunks {
            if chunks.len() != dims.len() || chunks.contains(&0) {
                return Err(Error::Invalid(format!(
                    "chunk sizes {chunks:?} for {name} with {} dimension(s)",
                    dims.len()
                )));
            }
        }
        let id = self.model.add_var(var);
        self.complete_storage(id)?;
        self.meta_dirty = true;
        Ok(id)
    }

    /// Fills in a variable's storage description (see [`DatasetWriter::create_with`]).
    fn complete_storage(&mut self, id: VarId) -> Result<()> {
        let dialect = self.opts.dialect;
        let shape = self.stored_shape(id);
        let dims: Vec<(u64, bool)> = self
            .model
            .var(id)
            .dims
            .iter()
            .map(|d| (self.model.dim(*d).len, self.model.dim(*d).unlimited))
            .collect();
        let key = {
            let v = self.model.var(id);
            join_key(&[&self.model.group_path(v.group).join("/"), &v.name])
        };
        let fqn = self.model.var_fqn(id);
        let v = &mut self.model.vars[id.0];
        if v.nctype == NcType::String && v.string_width == 0 {
            v.string_width = NETCDF_MAXSTRLEN;
        }
        check_storable(v, &dims)?;
        let mut big =
            v.storage.dtype.as_ref().is_some_and(|d| {
                d.order == ByteOrder::Big && d.size > 1 && d.kind != DtypeKind::Bytes
            });
        let old_layout = matches!(
            self.opts.layout,
            NczarrLayout::UpperCaseKeys | NczarrLayout::LowerCaseKeys
        );
        if big && old_layout && dialect == Dialect::NcZarr {
            // netcdf-c 4.9.0 and 4.9.1 read every chunk as little-endian, whatever the dtype
            // says (4.9.0 writes big-endian variables so), and would read these values swapped.
            log::warn!(
                "{key}: stored little-endian (the values are the same): netcdf-c before 4.9.3 \
                 reads every chunk as little-endian, whatever its dtype says"
            );
            big = false;
        }
        let v3 = self.opts.zarr_version == 3;
        let mut dtype = if v3 {
            writer_v3::v3_dtype(v.nctype, v.string_width, big)
        } else {
            default_dtype(v.nctype, v.string_width, dialect)
        };
        if big && dtype.order == ByteOrder::Little {
            dtype.order = ByteOrder::Big;
        }
        let chunks_ok = if v.dims.is_empty() {
            false
        } else {
            v.storage.chunks.len() == v.dims.len() && !v.storage.chunks.contains(&0)
        };
        let chunks = if chunks_ok {
            v.storage.chunks.clone()
        } else if v.dims.is_empty() {
            shape.iter().map(|_| 1).collect()
        } else {
            default_chunks(&dims, dtype.size)
        };
        // The engine encodes with the Zarr v2 spelling of a chain (the same bytes); the v3
        // metadata writer spells it the v3 way. A sharded chain stays sharded on Zarr v3,
        // around the inner chain spelled again for this variable's stored type.
        let (mut flat, mut inner) = match &v.storage.codecs {
            CodecSpec::V3(list) => (
                Codecs::from_chain(writer_v3::codecs_v2(list)?).spec(),
                writer_v3::shard_chunk_shape(list).filter(|_| v3),
            ),
            spec => (spec.clone(), None),
        };
        if v.dims.is_empty() && flat != CodecSpec::default() {
            // As netcdf-c, which stores scalars uncompressed (and cannot open some
            // compressed ones, blosc's).
            log::info!("{key}: a scalar is stored without codecs");
            (flat, inner) = (CodecSpec::default(), None);
        }
        let chunk_elems = inner.as_ref().unwrap_or(&chunks).iter().product::<u64>();
        if v.nctype == NcType::String && !v3 {
            flat = string_shuffle(flat, chunk_elems * dtype.size as u64);
        }
        if v.nctype == NcType::String && v3 {
            // The variable-length values make a stream of any length, which numcodecs
            // refuses to shuffle unless it is a multiple of the element size.
            flat = without_shuffle(flat);
        }
        if dialect == Dialect::NcZarr {
            flat = for_netcdf_c(&fqn, flat, netcdf_element_size(v.nctype, dtype.size));
        }
        if !(v.nctype == NcType::String && v3) {
            check_numcodecs_chain(&fqn, &flat, chunk_elems * dtype.size as u64, dtype.size)?;
        }
        v.storage.codecs = match inner {
            Some(inner) => writer_v3::sharded(&flat, &dtype, &inner)?,
            None => flat,
        };
        if v.nctype == NcType::String && v3 {
            // zarr-python's variable-length `string` (`vlen-utf8`): each value stored as its
            // own UTF-8 bytes, where `fixed_length_utf32` took four bytes per character of
            // the longest. The engine holds values in NUL-padded slots of the string width.
            dtype = crate::model::ZarrDtype {
                order: ByteOrder::NotApplicable,
                kind: DtypeKind::Bytes,
                size: v.string_width,
            };
            v.storage.codecs = writer_v3::vlen_strings(&v.storage.codecs, &dtype)?;
        }
        let esize = v.element_size();
        if let Some(f) = &mut v.storage.fill_value {
            f.resize(esize, 0);
        }
        v.storage = VarStorage {
            key,
            dtype: Some(dtype),
            shape,
            chunks,
            order: ChunkOrder::C,
            key_encoding: if v3 {
                ChunkKeyEncoding::Default { separator: '/' }
            } else {
                ChunkKeyEncoding::V2 {
                    separator: self.opts.separator,
                }
            },
            fill_value: v.storage.fill_value.take(),
            codecs: std::mem::take(&mut v.storage.codecs),
            unreadable: None,
        };
        Ok(())
    }

    /// The stored shape of a variable: its dimension lengths (`[1]` for an NCZarr scalar,
    /// `[]` for a pure Zarr one).
    fn stored_shape(&self, id: VarId) -> Vec<u64> {
        let shape = self.model.var_shape(id);
        if shape.is_empty() && self.opts.dialect == Dialect::NcZarr && self.opts.zarr_version != 3 {
            vec![1]
        } else {
            shape
        }
    }

    /// Sets or replaces an attribute. `_FillValue` on a variable also sets its fill value
    /// (a variable without fill keeps none), which is only possible before values are written.
    pub fn put_attr(&mut self, target: AttrTarget, name: &str, value: AttrValue) -> Result<()> {
        check_attr_name(target, name)?;
        let for_4_9_0 = self.opts.dialect == Dialect::NcZarr
            && self.opts.zarr_version == 2
            && self.opts.layout == NczarrLayout::UpperCaseKeys;
        if for_4_9_0 && value.nctype() == NcType::String {
            return Err(Error::NotPermitted(format!(
                "{name}: a string attribute, which this dataset's layout (netcdf-c 4.8.1 to 4.9.0) \
                 cannot hold"
            )));
        }
        if self
            .attrs_mut(target)?
            .iter()
            .any(|a| a.name == name && a.value == value)
        {
            // Unchanged (`cp -r` of a mounted dataset onto itself): nothing to refuse.
            return Ok(());
        }
        if let AttrTarget::Var(v) = target {
            if name == "_FillValue" {
                self.set_fill(v, Some(&value))?;
            }
        }
        let attrs = self.attrs_mut(target)?;
        match attrs.iter_mut().find(|a| a.name == name) {
            Some(a) => a.value = value,
            None => attrs.push(Attribute {
                name: name.to_string(),
                value,
            }),
        }
        self.meta_dirty = true;
        Ok(())
    }

    /// Deletes an attribute; deleting a variable's `_FillValue` restores the default fill (a
    /// variable without fill keeps none).
    pub fn del_attr(&mut self, target: AttrTarget, name: &str) -> Result<()> {
        let pos = self
            .attrs_mut(target)?
            .iter()
            .position(|a| a.name == name)
            .ok_or_else(|| Error::NotFound(format!("attribute {name}")))?;
        if let AttrTarget::Var(v) = target {
            if name == "_FillValue" {
                self.set_fill(v, None)?;
            }
        }
        self.attrs_mut(target)?.remove(pos);
        self.meta_dirty = true;
        Ok(())
    }

    /// Renames an attribute (`_FillValue` cannot be renamed: it would change the fill value).
    pub fn rename_attr(&mut self, target: AttrTarget, from: &str, to: &str) -> Result<()> {
        check_attr_name(target, to)?;
        if from == "_FillValue" || to == "_FillValue" {
            return Err(Error::NotPermitted("renaming to or from _FillValue".into()));
        }
        let attrs = self.attrs_mut(target)?;
        if attrs.iter().any(|a| a.name == to) {
            return Err(Error::NotPermitted(format!(
                "attribute {to} already exists"
            )));
        }
        let a = attrs
            .iter_mut()
            .find(|a| a.name == from)
            .ok_or_else(|| Error::NotFound(format!("attribute {from}")))?;
        a.name = to.to_string();
        self.meta_dirty = true;
        Ok(())
    }

    fn attrs_mut(&mut self, target: AttrTarget) -> Result<&mut Vec<Attribute>> {
        match target {
            AttrTarget::Group(g) => self
                .model
                .groups
                .get_mut(g.0)
                .map(|g| &mut g.attrs)
                .ok_or_else(|| Error::NotFound(format!("group #{}", g.0))),
            AttrTarget::Var(v) => self
                .model
                .vars
                .get_mut(v.0)
                .map(|v| &mut v.attrs)
                .ok_or_else(|| Error::NotFound(format!("variable #{}", v.0))),
        }
    }

    fn set_fill(&mut self, v: VarId, value: Option<&AttrValue>) -> Result<()> {
        let fqn = self.model.var_fqn(v);
        if self.has_data.contains(&v) {
            return Err(Error::NotPermitted(format!(
                "{fqn}: the fill value of a variable already in storage cannot change (what \
                 its chunks leave unwritten reads as the old one); copy the dataset to change it"
            )));
        }
        let var = &self.model.vars[v.0];
        let bytes = match value {
            None => padded(var.nctype.default_fill(), var.element_size()),
            Some(value) => {
                if value.nctype() != var.nctype || value.len() != 1 {
                    return Err(Error::Invalid(format!(
                        "{fqn}: _FillValue must be one {} value",
                        var.nctype.cdl_name()
                    )));
                }
                let bytes = attr_to_native(value);
                if var.nctype == NcType::String && bytes.len() > var.string_width {
                    return Err(Error::Invalid(format!(
                        "{fqn}: _FillValue longer than the string width {}",
                        var.string_width
                    )));
                }
                padded(bytes, var.element_size())
            }
        };
        // A variable without fill keeps none: netcdf-c stores its `_FillValue` as an
        // attribute only, and so does a reader of what is written here.
        let storage = &mut self.model.vars[v.0].storage;
        if storage.fill_value.is_some() {
            storage.fill_value = Some(bytes);
        }
        Ok(())
    }

    /// Renames a dimension.
    pub fn rename_dim(&mut self, dim: DimId, to: &str) -> Result<()> {
        let g = self.model.dims.get(dim.0).map(|d| d.group);
        let g = g.ok_or_else(|| Error::NotFound(format!("dimension #{}", dim.0)))?;
        self.check_free_name(g, to, "dimension")?;
        self.model.dims[dim.0].name = to.to_string();
        self.meta_dirty = true;
        Ok(())
    }

    /// Renames a variable: its objects move to the new key.
    pub fn rename_var(&mut self, var: VarId, to: &str) -> Result<()> {
        let g = self.model.vars.get(var.0).map(|v| v.group);
        let g = g.ok_or_else(|| Error::NotFound(format!("variable #{}", var.0)))?;
        self.check_free_name(g, to, "variable")?;
        let old = self.model.var(var).storage.key.clone();
        let new = join_key(&[&self.model.group_path(g).join("/"), to]);
        let before = self.model.clone();
        self.model.vars[var.0].name = to.to_string();
        self.model.vars[var.0].storage.key = new.clone();
        self.move_prefix(&old, &new, before)
    }

    /// Renames a group (not the root): everything under it moves to the new key.
    pub fn rename_group(&mut self, group: GroupId, to: &str) -> Result<()> {
        let parent = self
            .model
            .groups
            .get(group.0)
            .ok_or_else(|| Error::NotFound(format!("group #{}", group.0)))?
            .parent
            .ok_or_else(|| Error::NotPermitted("renaming the root group".into()))?;
        self.check_free_name(parent, to, "group")?;
        let old = self.model.group_path(group).join("/");
        let before = self.model.clone();
        self.model.groups[group.0].name = to.to_string();
        let new = self.model.group_path(group).join("/");
        let old_slash = format!("{old}/");
        for v in &mut self.model.vars {
            if let Some(rest) = v.storage.key.strip_prefix(&old_slash) {
                v.storage.key = format!("{new}/{rest}");
            }
        }
        self.move_prefix(&old, &new, before)
    }

    /// Copies every object under `old` to `new`, writes the new metadata, then deletes the
    /// old objects: a crash in between leaves stray copies, never a dangling reference. Until
    /// the new metadata is written, a failure puts the model `before` the rename back (its
    /// metadata is then written again: the old objects are all still there).
    ///
    /// Objects already under `new` (strays of another program, or of a crash) would be taken
    /// for the renamed node's: the rename is then refused.
    fn move_prefix(&mut self, old: &str, new: &str, before: Dataset) -> Result<()> {
        let stray = match keys_under(self.map.as_ref(), new) {
            Ok(keys) => keys.into_iter().next(),
            Err(e) => {
                self.model = before;
                return Err(e);
            }
        };
        if let Some(stray) = stray {
            self.model = before;
            return Err(Error::NotPermitted(format!(
                "cannot rename to {new:?}: storage already holds objects there ({stray:?}) that \
                 are not part of the dataset"
            )));
        }
        let copied = self.engine.flush().and_then(|()| {
            self.engine.invalidate(old)?;
            for key in keys_under(self.map.as_ref(), old)? {
                let rest = &key[old.len()..];
                if let Some(value) = self.map.get(&key)? {
                    self.map.put(&format!("{new}{rest}"), &value)?;
                }
            }
            self.meta_dirty = true;
            self.write_meta()
        });
        if let Err(e) = copied {
            self.model = before;
            self.meta_dirty = true;
            return Err(e);
        }
        self.map.delete(old)?;
        self.map.flush()
    }

    /// Sets the length of an unlimited dimension (growing only), updating the stored shape
    /// of every variable that uses it.
    ///
    /// The first growth of a dimension the writer found stored makes the variables on it hold
    /// fill past the length it found (deleting their chunks there, setting that part of a
    /// chunk that straddles it to fill): chunks are stored before the metadata, so a writer
    /// killed or failing in between leaves values past the recorded length, which the new
    /// records would otherwise show where they read as fill.
    pub fn grow_dim(&mut self, dim: DimId, len: u64) -> Result<()> {
        let d = self
            .model
            .dims
            .get(dim.0)
            .ok_or_else(|| Error::NotFound(format!("dimension #{}", dim.0)))?;
        if len <= d.len {
            return Ok(());
        }
        if !d.unlimited {
            return Err(Error::InvalidHyperslab(format!(
                "dimension {} has fixed length {}; cannot grow to {len}",
                self.model.dim_fqn(dim),
                d.len
            )));
        }
        let size_at = |v: &Variable| {
            v.dims.iter().try_fold(v.element_size() as u64, |acc, d| {
                acc.checked_mul(if *d == dim {
                    len
                } else {
                    self.model.dim(*d).len
                })
            })
        };
        if let Some(v) = self
            .model
            .vars
            .iter()
            .filter(|v| v.dims.contains(&dim))
            .find(|v| size_at(v).is_none_or(|bytes| bytes > i64::MAX as u64))
        {
            return Err(Error::TooLarge(format!(
                "{} records of {} would make {} larger than 2^63 bytes",
                len,
                self.model.dim_fqn(dim),
                self.model.fqn_in(v.group, &v.name)
            )));
        }
        if let Some(&stored) = self.stored_lengths.get(&dim) {
            for var in (0..self.stored_vars).map(VarId) {
                let axes = self.model.var(var).dims.iter().enumerate();
                for axis in axes.filter(|(_, d)| **d == dim).map(|(axis, _)| axis) {
                    self.engine.fill_beyond(&self.model, var, axis, stored)?;
                }
            }
            self.stored_lengths.remove(&dim);
        }
        self.model.dims[dim.0].len = len;
        for i in 0..self.model.vars.len() {
            if self.model.vars[i].dims.contains(&dim) {
                self.model.vars[i].storage.shape = self.stored_shape(VarId(i));
            }
        }
        self.meta_dirty = true;
        Ok(())
    }

    /// Refuses `data`, values for `slab` of `var`, when the variable's stored type cannot
    /// hold one of them ([`Error::Unrepresentable`]), so that a caller writing several slabs
    /// can check them all before writing any.
    pub fn check_storable(&self, var: VarId, slab: &Hyperslab, data: &[u8]) -> Result<()> {
        self.engine.check_storable(&self.model, var, slab, data)
    }

    /// Writes `data` (native representation, C order) into `slab` of `var`, growing
    /// unlimited dimensions as needed; writing past a fixed dimension is an error, and so is
    /// a value the stored type cannot hold (nothing is written then, and no dimension grows).
    pub fn write(&mut self, var: VarId, slab: &Hyperslab, data: &[u8]) -> Result<()> {
        let v = self
            .model
            .vars
            .get(var.0)
            .ok_or_else(|| Error::NotFound(format!("variable #{}", var.0)))?;
        let dims = v.dims.clone();
        if slab.start.len() != dims.len()
            || slab.count.len() != dims.len()
            || slab.stride.len() != dims.len()
        {
            return Err(Error::InvalidHyperslab(format!(
                "{} dimension(s) in a hyperslab of {}",
                slab.start.len(),
                self.model.var_fqn(var)
            )));
        }
        let mut grows = Vec::new();
        for (i, d) in dims.iter().enumerate() {
            if slab.count[i] == 0 {
                continue;
            }
            let end = slab.stride[i]
                .checked_mul(slab.count[i] - 1)
                .and_then(|x| x.checked_add(slab.start[i]))
                .and_then(|x| x.checked_add(1))
                .ok_or_else(|| Error::InvalidHyperslab("hyperslab overflows".into()))?;
            if end > self.model.dim(*d).len {
                if !self.model.dim(*d).unlimited {
                    return Err(Error::InvalidHyperslab(format!(
                        "write to {} up to index {} beyond dimension {} of length {}",
                        self.model.var_fqn(var),
                        end - 1,
                        self.model.dim_fqn(*d),
                        self.model.dim(*d).len
                    )));
                }
                grows.push((*d, end));
            }
        }
        self.check_storable(var, slab, data)?;
        for (d, end) in grows {
            self.grow_dim(d, end)?;
        }
        self.engine.write(&self.model, var, slab, data)?;
        self.has_data.insert(var);
        Ok(())
    }

    /// One element of `var` as its unwritten places read (see [`ChunkEngine::fill_element`]).
    pub fn fill_element(&self, var: VarId) -> Result<Vec<u8>> {
        self.engine.fill_element(&self.model, var)
    }

    /// Reads `slab` of `var` (seeing unflushed writes).
    pub fn read(&self, var: VarId, slab: &Hyperslab, out: &mut [u8]) -> Result<()> {
        self.engine.read(&self.model, var, slab, out)
    }

    fn write_meta(&mut self) -> Result<()> {
        let wo = self.opts.write_options();
        if self.opts.zarr_version == 3 {
            writer_v3::write_metadata(self.map.as_ref(), &self.model, &wo)?;
        } else {
            write_metadata(self.map.as_ref(), &self.model, &wo)?;
        }
        self.meta_dirty = false;
        Ok(())
    }

    /// Makes everything durable: dirty chunks first, then the metadata, then the map's own
    /// flush (a zip archive is rewritten here).
    pub fn sync(&mut self) -> Result<()> {
        self.engine.flush()?;
        if self.meta_dirty {
            self.write_meta()?;
        }
        self.map.flush()
    }

    /// Whether the model changed since the metadata was last stored (a mount shows this
    /// as pending work).
    pub fn metadata_dirty(&self) -> bool {
        self.meta_dirty
    }

    /// Syncs and closes.
    pub fn close(mut self) -> Result<()> {
        self.sync()
    }
}

/// Whether an opened NCZarr dataset carries `_ARRAY_DIMENSIONS` (so rewrites keep it).
fn probe_xarray(map: &dyn ZMap, model: &Dataset) -> Result<bool> {
    match model.vars.first() {
        None => Ok(true),
        Some(v) => Ok(map
            .get(&join_key(&[&v.storage.key, ".zattrs"]))?
            .is_some_and(|b| String::from_utf8_lossy(&b).contains("_ARRAY_DIMENSIONS"))),
    }
}

fn padded(mut bytes: Vec<u8>, size: usize) -> Vec<u8> {
    bytes.resize(size, 0);
    bytes
}

/// One attribute value as a native element (the first value; strings as UTF-8 bytes).
pub fn attr_to_native(value: &AttrValue) -> Vec<u8> {
    fn first<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        v.first().map(|x| f(*x).to_vec()).unwrap_or_default()
    }
    match value {
        AttrValue::Byte(v) => first(v, i8::to_le_bytes),
        AttrValue::UByte(v) => first(v, u8::to_le_bytes),
        AttrValue::Short(v) => first(v, i16::to_le_bytes),
        AttrValue::UShort(v) => first(v, u16::to_le_bytes),
        AttrValue::Int(v) => first(v, i32::to_le_bytes),
        AttrValue::UInt(v) => first(v, u32::to_le_bytes),
        AttrValue::Int64(v) => first(v, i64::to_le_bytes),
        AttrValue::UInt64(v) => first(v, u64::to_le_bytes),
        AttrValue::Float(v) => first(v, f32::to_le_bytes),
        AttrValue::Double(v) => first(v, f64::to_le_bytes),
        AttrValue::Char(v) => v.first().map(|c| vec![*c]).unwrap_or_default(),
        AttrValue::Str(v) => v.first().map(|s| s.as_bytes().to_vec()).unwrap_or_default(),
    }
}

/// Whether a Zarr v3 root `zarr.json` holds consolidated metadata (zarr-python 3's inline
/// `consolidated_metadata`, which `null` declares absent).
fn v3_root_is_consolidated(map: &dyn ZMap) -> Result<bool> {
    let Some(bytes) = map.get("zarr.json")? else {
        return Ok(false);
    };
    let root: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| Error::json("zarr.json", &e))?;
    Ok(root
        .get("consolidated_metadata")
        .is_some_and(|c| !c.is_null()))
}

/// Applies `mode=` words (`nczarr`, `zarr`, `xarray`, `noxarray`, `consolidated`, `file`,
/// `zip`, comma-separated) to a parsed location; words override what its fragment said.
pub fn apply_mode_words(location: &mut Location, words: &str) -> Result<()> {
    let probe =
        Location::parse(&format!("file:///mode-probe#mode={words}")).map_err(|e| match e {
            Error::InvalidLocation { reason, .. } => {
                Error::Invalid(format!("-k {words}: {reason}"))
            }
            other => other,
        })?;
    let m = probe.mode;
    if m.format.is_some() {
        location.mode.format = m.format;
    }
    if m.xarray.is_some() {
        location.mode.xarray = m.xarray;
    }
    if m.zarr_version.is_some() {
        location.mode.zarr_version = m.zarr_version;
    }
    location.mode.consolidated |= m.consolidated;
    let has = |w: &str| words.split(',').any(|x| x.trim().eq_ignore_ascii_case(w));
    let path = match &location.storage {
        Storage::File(p) | Storage::Zip(p) => Some(p.clone()),
        _ => None,
    };
    if path.is_none() && (has("zip") || has("file")) {
        return Err(Error::Invalid(format!(
            "-k {words}: `zip` and `file` need a local destination, not {}",
            location.original
        )));
    }
    if let Some(p) = path {
        if has("zip") {
            location.storage = Storage::Zip(p);
        } else if has("file") {
            location.storage = Storage::File(p);
        }
    }
    Ok(())
}

/// A dataset being built beside its final place, published by a rename when complete, so
/// that nobody ever sees a half-written dataset at the final location.
#[derive(Debug)]
pub struct Staging {
    /// Where the dataset is written first (the final location itself for S3 and memory).
    pub temp: Location,
    /// Where it goes.
    pub target: Location,
    /// An object-store prefix that was empty: everything under it is this dataset's, and a
    /// failure deletes it.
    fresh_prefix: bool,
    /// A local staging path, removed if a signal ends the process before it is published.
    _on_signal: Option<interrupt::Registered>,
}

impl Staging {
    /// Plans the staging of `target`: a hidden sibling `.NAME.nczarrfs-PID` for local storage.
    /// An existing temporary of the same name is removed. A local target that exists must be
    /// a dataset (or an empty directory, or a zip archive): nothing else is ever replaced.
    pub fn new(target: &Location) -> Result<Staging> {
        // `ds.file/../ds.file` names the dataset through itself: moving it aside would take
        // the way to its own place along. A symbolic link is written through, as ncgen writes
        // through one: the new dataset replaces what it points to, and the link stays.
        let mut target = target.clone();
        target.storage = match target.storage {
            Storage::File(p) => Storage::File(through_real_parent(&through_links(&p)?)),
            Storage::Zip(p) => Storage::Zip(through_real_parent(&through_links(&p)?)),
            other => other,
        };
        let target = &target;
        check_replaceable(target)?;
        if let Storage::File(p) | Storage::Zip(p) = &target.storage {
            check_can_create(p)?;
        }
        let fresh_prefix = matches!(target.storage, Storage::S3(_));
        if fresh_prefix {
            check_empty_prefix(target)?;
        }
        let sibling = |p: &Path| -> PathBuf {
            let name = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_else(|| "dataset".into());
            p.with_file_name(format!(".{name}.nczarrfs-{}", std::process::id()))
        };
        let storage = match &target.storage {
            Storage::File(p) => Storage::File(sibling(p)),
            Storage::Zip(p) => Storage::Zip(sibling(p)),
            other => other.clone(),
        };
        let temp = Location {
            original: target.original.clone(),
            storage,
            mode: target.mode.clone(),
        };
        if temp != *target {
            remove_storage(&temp)?;
            remove_stale_staging(target);
        }
        let on_signal = match &temp.storage {
            Storage::File(p) | Storage::Zip(p) if temp != *target => Some(interrupt::register(p)),
            _ => None,
        };
        Ok(Staging {
            temp,
            target: target.clone(),
            fresh_prefix,
            _on_signal: on_signal,
        })
    }

    /// Moves the finished dataset into place, replacing what was there. If that fails, the
    /// old dataset stays and the new one is removed.
    pub fn publish(self) -> Result<()> {
        let result = interrupt::while_publishing(|| self.move_into_place());
        if result.is_err() {
            self.abandon();
        }
        result
    }

    fn move_into_place(&self) -> Result<()> {
        let (from, to) = match (&self.temp.storage, &self.target.storage) {
            (Storage::File(a), Storage::File(b)) | (Storage::Zip(a), Storage::Zip(b)) => (a, b),
            _ => return Ok(()),
        };
        if from == to {
            return Ok(());
        }
        if !to.is_dir() {
            return std::fs::rename(from, to).map_err(|e| Error::io(to, e));
        }
        // A directory cannot be replaced by rename: move the old one aside first.
        let mut old = from.clone().into_os_string();
        old.push(".old");
        let old = PathBuf::from(old);
        std::fs::rename(to, &old).map_err(|e| Error::io(to, e))?;
        if let Err(e) = std::fs::rename(from, to) {
            if let Err(back) = std::fs::rename(&old, to) {
                log::error!(
                    "could not move {} back to {}: {back}",
                    old.display(),
                    to.display()
                );
            }
            return Err(Error::io(to, e));
        }
        std::fs::remove_dir_all(&old).map_err(|e| Error::io(&old, e))
    }

    /// Removes the temporary dataset (after a failure), or on an object store what was
    /// written under the prefix, which held nothing before.
    pub fn abandon(self) {
        let removed = if self.temp != self.target {
            remove_storage(&self.temp)
        } else if self.fresh_prefix {
            zmap::open(&self.target, true).and_then(|map| {
                map.search("")?
                    .iter()
                    .try_for_each(|child| map.delete(child))
            })
        } else {
            Ok(())
        };
        if let Err(e) = removed {
            log::warn!("could not remove {}: {e}", describe(&self.temp));
        }
    }
}

/// Removes the staging siblings of `target` (`.NAME.nczarrfs-PID`) left by processes that no
/// longer run (killed by SIGKILL, or by a crash), which nothing else would remove. A sibling
/// `….old` is kept: it may be the only copy of a dataset whose replacement was cut short.
fn remove_stale_staging(target: &Location) {
    let (Storage::File(path) | Storage::Zip(path)) = &target.storage else {
        return;
    };
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let prefix = format!(".{}.nczarrfs-", name.to_string_lossy());
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = file_name
            .to_str()
            .and_then(|n| n.strip_prefix(&prefix))
            .and_then(|pid| pid.parse::<libc::pid_t>().ok())
            .filter(|pid| *pid > 0)
        else {
            continue;
        };
        // SAFETY: signal 0 only asks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if !gone {
            continue;
        }
        let stale = entry.path();
        log::info!("removing {}, left by process {pid}", stale.display());
        let removed = match entry.file_type().is_ok_and(|t| t.is_dir()) {
            true => std::fs::remove_dir_all(&stale),
            false => std::fs::remove_file(&stale),
        };
        if let Err(e) = removed {
            log::warn!("could not remove {}: {e}", stale.display());
        }
    }
}

fn describe(location: &Location) -> String {
    match &location.storage {
        Storage::File(p) | Storage::Zip(p) => p.display().to_string(),
        _ => location.original.clone(),
    }
}

/// Refuses an object-store destination that holds anything: a dataset there is not replaced
/// (an object store has no atomic rename, so a failed replacement would leave neither), and
/// other objects would mix with the new dataset's (a stray `v/0` would become `v`'s values).
fn check_empty_prefix(target: &Location) -> Result<()> {
    let map = zmap::open(target, true)?;
    let children = map.search("")?;
    if children.is_empty() {
        return Ok(());
    }
    const MARKERS: [&str; 5] = [".zgroup", ".zarray", ".zmetadata", "zarr.json", ".nczarr"];
    let why = match children.iter().any(|c| MARKERS.contains(&c.as_str())) {
        true => "already holds a dataset, which is not replaced on an object store",
        false => "holds other objects, which a new dataset would mix with",
    };
    Err(Error::NotPermitted(format!(
        "{} {why} (found {}); delete them first or choose an empty prefix",
        target.original,
        children
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// Refuses, before any work is done, a local destination whose directory cannot take new
/// entries (missing, not writable, a read-only filesystem): the dataset is staged there, and
/// the failure would otherwise come at the end of a copy, naming the staging path.
fn check_can_create(path: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let Ok(c_dir) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return Err(Error::Invalid(format!(
            "{}: a NUL byte in the path",
            path.display()
        )));
    };
    // SAFETY: access reads the NUL-terminated path and touches no other memory.
    if unsafe { libc::access(c_dir.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(Error::io(path, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// Where `path` leads when it is a symbolic link (followed as far as links go, relative ones
/// from their own directory), or `path` itself.
fn through_links(path: &Path) -> Result<PathBuf> {
    let mut path = path.to_path_buf();
    // Linux's own limit on the links one path resolution follows.
    for _ in 0..40 {
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let to = std::fs::read_link(&path).map_err(|e| Error::io(&path, e))?;
                path = match path.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            _ => return Ok(path),
        }
    }
    Err(Error::io(
        &path,
        std::io::Error::from_raw_os_error(libc::ELOOP),
    ))
}

/// `path` with its parent directory resolved (no `..`, no symbolic link on the way), if it
/// exists.
fn through_real_parent(path: &Path) -> PathBuf {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return path.to_path_buf();
    };
    let parent = match parent.as_os_str().is_empty() {
        true => Path::new("."),
        false => parent,
    };
    std::fs::canonicalize(parent).map_or_else(|_| path.to_path_buf(), |dir| dir.join(name))
}

/// Refuses a local `target` that exists but is not something a new dataset may replace: a
/// Zarr dataset's directory (or an empty one) for directory storage, a zip archive for zip
/// storage. A user's other files are never deleted by `gen` or `copy`.
fn check_replaceable(target: &Location) -> Result<()> {
    let (path, zip) = match &target.storage {
        Storage::File(p) => (p, false),
        Storage::Zip(p) => (p, true),
        _ => return Ok(()),
    };
    let refuse = |why: &str| {
        Err(Error::Invalid(format!(
            "{} {why}; it is not replaced (remove it or choose another name)",
            path.display()
        )))
    };
    if path.file_name().is_none() {
        return Err(Error::Invalid(format!(
            "{}: a dataset's path must end in its name",
            path.display()
        )));
    }
    check_outside_datasets(path)?;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    let meta = match meta.file_type().is_symlink() {
        true => std::fs::metadata(path).map_err(|e| Error::io(path, e))?,
        false => meta,
    };
    if meta.is_dir() && is_mount_point(path, &meta) {
        return refuse(
            "is a mount point, which a new dataset cannot replace (it is moved into place by \
             a rename); write it inside",
        );
    }
    match (zip, meta.is_dir()) {
        (true, true) => refuse("is a directory, not a zip archive"),
        (true, false) => {
            let mut magic = [0u8; 4];
            let is_zip = std::fs::File::open(path)
                .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut magic))
                .is_ok()
                && (magic == *b"PK\x03\x04" || magic == *b"PK\x05\x06");
            match is_zip || meta.len() == 0 {
                true => Ok(()),
                false => refuse("exists and is not a zip archive"),
            }
        }
        (false, false) => refuse("exists and is not a directory"),
        (false, true) => match zarr_node(path) {
            Some(ZarrNode::Group) => Ok(()),
            // `dump` does not open an array as a dataset, and it is a variable of one.
            Some(ZarrNode::Array) => {
                refuse("is a Zarr array (a variable's directory), not a dataset")
            }
            None => {
                let mut entries = std::fs::read_dir(path).map_err(|e| Error::io(path, e))?;
                match entries.next().is_none() {
                    true => Ok(()),
                    false => refuse("exists and is not a Zarr dataset"),
                }
            }
        },
    }
}

/// Whether the directory `path` (with metadata `meta`) is where a filesystem is mounted: on
/// another device than its parent, or the root. A bind mount of the same filesystem is not
/// seen; its rename fails with "Device or resource busy", after the copy is made.
fn is_mount_point(path: &Path, meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path.join("..")) {
        Ok(parent) => parent.dev() != meta.dev() || parent.ino() == meta.ino(),
        Err(_) => false,
    }
}

/// What a directory holds as a Zarr node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ZarrNode {
    /// A group, the root of a dataset or one of its groups.
    Group,
    /// An array: a variable of a dataset.
    Array,
}

/// The Zarr node whose metadata `dir` holds, if any (`.zarray` wins over `.zgroup`, as an
/// array's directory is never a dataset to replace).
fn zarr_node(dir: &Path) -> Option<ZarrNode> {
    if dir.join(".zarray").exists() {
        return Some(ZarrNode::Array);
    }
    if let Ok(text) = std::fs::read(dir.join("zarr.json")) {
        let node_type = serde_json::from_slice::<Value>(&text).ok().and_then(|v| {
            v.get("node_type")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        return Some(match node_type.as_deref() {
            Some("array") => ZarrNode::Array,
            _ => ZarrNode::Group,
        });
    }
    [".zgroup", ".zmetadata", ".nczarr"]
        .iter()
        .any(|m| dir.join(m).exists())
        .then_some(ZarrNode::Group)
}

/// Refuses a local destination inside a Zarr dataset (one of its directories holds Zarr
/// metadata): the new dataset would become a group of that one, or, replacing one of its
/// arrays or groups, destroy part of it. This covers a destination inside a copy's own
/// source.
fn check_outside_datasets(path: &Path) -> Result<()> {
    let parent = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // A missing parent is reported where the destination is created.
    let Ok(parent) = std::fs::canonicalize(parent) else {
        return Ok(());
    };
    for dir in parent.ancestors() {
        if let Some(node) = zarr_node(dir) {
            let what = match node {
                ZarrNode::Group => "dataset (or group)",
                ZarrNode::Array => "array",
            };
            return Err(Error::Invalid(format!(
                "{} is inside the Zarr {what} {}, which writing there would change; nothing \
                 is written (choose a destination outside it)",
                path.display(),
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Removes a local dataset's directory or archive, if present.
fn remove_storage(location: &Location) -> Result<()> {
    let p = match &location.storage {
        Storage::File(p) | Storage::Zip(p) => p,
        _ => return Ok(()),
    };
    let r = if p.is_dir() {
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_file(p)
    };
    match r {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(p, e)),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AttrValue;

    #[test]
    fn default_chunks_match_netcdf_c() {
        // netCDF4-python 1.7.5 (netcdf-c 4.10.1) `Variable.chunking()` of NCZarr variables
        // over t, u unlimited, y = 1000, x = 3000, s = 7.
        assert_eq!(
            default_chunks(&[(0, true), (1000, false), (3000, false)], 4),
            [1, 1000, 3000]
        );
        assert_eq!(
            default_chunks(&[(1000, false), (3000, false)], 8),
            [500, 1500]
        );
        assert_eq!(default_chunks(&[(0, true)], 4), [1024]);
        assert_eq!(default_chunks(&[(0, true), (0, true)], 2), [2896, 2896]);
        assert_eq!(default_chunks(&[(7, false)], 1), [7]);
        assert_eq!(default_chunks(&[(0, true), (7, false)], 8), [1, 7]);
    }

    fn writer(dir: &Path, mode: &str) -> (Location, DatasetWriter) {
        let loc = Location::parse(&format!(
            "file://{}#mode={mode}",
            dir.join("d.file").display()
        ))
        .unwrap();
        let w = DatasetWriter::create(&loc, CreateOptions::from_mode(&loc.mode)).unwrap();
        (loc, w)
    }

    fn ints(b: &[u8]) -> Vec<i32> {
        b.chunks(4)
            .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect()
    }

    fn bytes(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    /// A destination whose directory cannot be written to is refused before anything is
    /// done, named as given (not as its hidden staging sibling), for zip storage too, whose
    /// archive is otherwise only written at the end.
    #[test]
    fn a_destination_in_a_missing_directory_is_refused_at_once() {
        let tmp = tempfile::tempdir().unwrap();
        for name in ["x.file", "x.zip"] {
            let target = tmp.path().join("missing").join(name);
            let location = Location::parse(target.to_str().unwrap()).unwrap();
            let e = Staging::new(&location).unwrap_err();
            assert_eq!(e.errno(), libc::ENOENT, "{e}");
            let message = e.to_string();
            assert!(message.starts_with(target.to_str().unwrap()), "{message}");
            assert!(!message.contains("nczarrfs-"), "{message}");
        }
    }

    /// Like `get` and `dump`, a writer of an existing dataset says that a missing one does
    /// not exist, not that it is an empty store.
    #[test]
    fn a_missing_dataset_opened_for_writing_is_not_found() {
        let tmp = tempfile::tempdir().unwrap();
        for name in ["nosuch.file", "nosuch.zip"] {
            let path = tmp.path().join(name);
            let location = Location::parse(path.to_str().unwrap()).unwrap();
            let e = DatasetWriter::open(&location).unwrap_err();
            assert_eq!(e.errno(), libc::ENOENT, "{e}");
            assert!(!path.exists());
        }
    }

    /// A mount point is refused before any work is done (its rename would fail at the end).
    #[test]
    fn a_mount_point_is_not_replaced() {
        let proc = Location::parse("/proc").unwrap();
        match Staging::new(&proc) {
            Err(Error::Invalid(m)) => assert!(m.contains("is a mount point"), "{m}"),
            other => panic!("{other:?}"),
        }
    }

    /// A bad codec word says what is wrong with it and lists the forms.
    #[test]
    fn bad_codec_words_say_why() {
        for (spec, why) in [
            ("zstd:99", "level \"99\" is not from -131072 to 22"),
            ("bz2:0", "level \"0\" is not from 1 to 9"),
            ("zlib:x", "level \"x\" is not from 0 to 9"),
            ("blosc:lz4:10:3", "level \"10\" is not from 0 to 9"),
            ("blosc:lz4:5:3", "shuffle \"3\" is not from 0 to 2"),
            ("blosc:lzma", "blosc has no compressor \"lzma\""),
            ("zlib:1:2", "zlib takes at most 1"),
            ("nope", "no such codec"),
        ] {
            match Codecs::parse(spec) {
                Err(Error::Invalid(m)) => {
                    assert!(m.contains(why), "{spec}: {m}");
                    assert!(m.contains("forms: none, shuffle"), "{spec}: {m}");
                }
                other => panic!("{spec}: {other:?}"),
            }
        }
    }

    #[test]
    fn only_datasets_are_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let at = |name: &str| tmp.path().join(name);
        let loc = |p: &Path| Location::parse(p.to_str().unwrap()).unwrap();
        let refused = |p: &Path| match Staging::new(&loc(p)) {
            Err(Error::Invalid(m)) => assert!(m.contains("not replaced"), "{m}"),
            other => panic!("{}: {other:?}", p.display()),
        };

        std::fs::create_dir(at("docs")).unwrap();
        std::fs::write(at("docs/notes.txt"), "kept").unwrap();
        refused(&at("docs"));
        std::fs::write(at("plain.file"), "kept").unwrap();
        refused(&at("plain.file"));
        std::fs::write(at("text.zip"), "kept").unwrap();
        refused(&at("text.zip"));
        assert_eq!(
            std::fs::read_to_string(at("docs/notes.txt")).unwrap(),
            "kept"
        );
        assert_eq!(std::fs::read_to_string(at("plain.file")).unwrap(), "kept");
        assert!(matches!(
            Staging::new(&loc(Path::new("."))),
            Err(Error::Invalid(_))
        ));

        // A dataset (and an empty directory) is replaced by the staged one.
        for name in ["old.file", "empty.file"] {
            std::fs::create_dir(at(name)).unwrap();
            if name == "old.file" {
                std::fs::write(at("old.file/.zgroup"), "old").unwrap();
            }
            let staging = Staging::new(&loc(&at(name))).unwrap();
            let Storage::File(temp) = &staging.temp.storage else {
                panic!("{:?}", staging.temp)
            };
            std::fs::create_dir(temp).unwrap();
            std::fs::write(temp.join(".zgroup"), "new").unwrap();
            staging.publish().unwrap();
            assert_eq!(
                std::fs::read_to_string(at(name).join(".zgroup")).unwrap(),
                "new"
            );
        }
        // Named through itself: the dataset is still replaced, not lost on the way.
        let staging = Staging::new(&loc(&at("old.file/../old.file"))).unwrap();
        let Storage::File(temp) = &staging.temp.storage else {
            panic!("{:?}", staging.temp)
        };
        std::fs::create_dir(temp).unwrap();
        std::fs::write(temp.join(".zgroup"), "newer").unwrap();
        staging.publish().unwrap();
        assert_eq!(
            std::fs::read_to_string(at("old.file/.zgroup")).unwrap(),
            "newer"
        );
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    /// A variable's or group's directory of a dataset is no dataset to replace, and a new
    /// dataset inside one would become part of it: both are refused and nothing is touched.
    #[test]
    fn arrays_and_places_inside_datasets_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let at = |name: &str| tmp.path().join(name);
        let loc = |p: &Path| Location::parse(p.to_str().unwrap()).unwrap();
        let refused = |p: &Path, why: &str| match Staging::new(&loc(p)) {
            Err(Error::Invalid(m)) => assert!(m.contains(why), "{m}"),
            other => panic!("{}: {other:?}", p.display()),
        };
        for dir in ["ds.file/lat", "ds.file/g/h", "arr2", "arr3", "ds3/v"] {
            std::fs::create_dir_all(at(dir)).unwrap();
        }
        std::fs::write(at("ds.file/.zgroup"), "{}").unwrap();
        std::fs::write(at("ds.file/lat/.zarray"), "{}").unwrap();
        std::fs::write(at("ds.file/g/.zgroup"), "{}").unwrap();
        std::fs::write(at("ds.file/g/h/.zgroup"), "{}").unwrap();
        std::fs::write(at("arr2/.zarray"), "{}").unwrap();
        let array3 = r#"{"zarr_format": 3, "node_type": "array"}"#;
        std::fs::write(at("arr3/zarr.json"), array3).unwrap();
        std::fs::write(
            at("ds3/zarr.json"),
            r#"{"zarr_format": 3, "node_type": "group"}"#,
        )
        .unwrap();
        std::fs::write(at("ds3/v/zarr.json"), array3).unwrap();

        refused(&at("arr2"), "is a Zarr array");
        refused(&at("arr3"), "is a Zarr array");
        refused(&at("ds.file/lat"), "inside the Zarr dataset");
        refused(&at("ds.file/g"), "inside the Zarr dataset");
        refused(&at("ds.file/g/h"), "inside the Zarr dataset");
        refused(&at("ds.file/new.file"), "inside the Zarr dataset");
        refused(&at("ds.file/new.zip"), "inside the Zarr dataset");
        refused(&at("ds.file/g/../new.file"), "inside the Zarr dataset");
        refused(&at("ds3/v"), "inside the Zarr dataset");
        refused(&at("ds3/w.file"), "inside the Zarr dataset");
        let kept = |dir: &str, object: &str| assert!(at(dir).join(object).exists(), "{dir}");
        kept("ds.file/lat", ".zarray");
        kept("ds.file/g/h", ".zgroup");
        kept("arr2", ".zarray");
        kept("ds3/v", "zarr.json");
        let mut left: Vec<String> = std::fs::read_dir(at("ds.file"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, [".zgroup", "g", "lat"]);
    }

    /// A map whose puts under `refused` fail, as a server that goes away mid-rename.
    #[derive(Debug)]
    struct FailingPuts {
        inner: Arc<dyn ZMap>,
        refused: &'static str,
    }

    impl ZMap for FailingPuts {
        fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
            self.inner.get(key)
        }
        fn put(&self, key: &str, value: &[u8]) -> Result<()> {
            if key.starts_with(self.refused) {
                return Err(Error::Storage {
                    key: key.into(),
                    reason: "refused by the test".into(),
                });
            }
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
            "failing puts".into()
        }
    }

    #[test]
    fn a_failed_rename_changes_nothing() {
        let tmp = tempfile::tempdir().unwrap();
        let (loc, mut w) = writer(tmp.path(), "nczarr");
        let g = w.add_group(Dataset::ROOT, "g").unwrap();
        let x = w.add_dim(g, "x", 3, false).unwrap();
        let v = w
            .add_var(g, "v", NcType::Int, &[x], VarOptions::default())
            .unwrap();
        w.write(v, &Hyperslab::whole(&[3]), &bytes(&[1, 2, 3]))
            .unwrap();
        w.close().unwrap();

        let mut w = DatasetWriter::open(&loc).unwrap();
        let map: Arc<dyn ZMap> = Arc::new(FailingPuts {
            inner: Arc::clone(&w.map),
            refused: "h/",
        });
        w.engine = ChunkEngine::new(Arc::clone(&map), WRITER_CACHE_BYTES);
        w.map = map;
        let before = w.model().clone();
        let g = w.model().find_group("g").unwrap();
        assert!(w.rename_group(g, "h").is_err());
        let v = w.model().find_var("g/v").unwrap();
        assert!(w.rename_var(v, "w").is_ok(), "other renames still work");
        assert!(w.rename_var(v, "v").is_ok());
        assert_eq!(*w.model(), before);
        w.close().unwrap();

        let ds = meta::read_dataset(zmap::open(&loc, false).unwrap().as_ref(), &loc.mode).unwrap();
        let v = ds.find_var("/g/v").expect("g/v is still there");
        assert!(ds.find_group("h").is_none());
        let mut out = vec![0u8; 12];
        ChunkEngine::new(zmap::open(&loc, false).unwrap(), 0)
            .read(&ds, v, &Hyperslab::whole(&[3]), &mut out)
            .unwrap();
        assert_eq!(ints(&out), [1, 2, 3]);
    }

    #[test]
    fn datasets_with_unsupported_variables_are_not_opened_for_writing() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("ds.zarr");
        let map = zmap::FileMap::open(&root, true).unwrap();
        map.put(".zgroup", br#"{"zarr_format": 2}"#).unwrap();
        for (name, dtype) in [("c", "<c8"), ("i", "<i4")] {
            let zarray = format!(
                r#"{{"zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "{dtype}", "fill_value": null, "order": "C", "compressor": null, "filters": null}}"#
            );
            map.put(&format!("{name}/.zarray"), zarray.as_bytes())
                .unwrap();
        }
        let loc = Location::parse(&format!("file://{}#mode=zarr,file", root.display())).unwrap();
        let e = DatasetWriter::open(&loc).unwrap_err().to_string();
        assert!(e.contains("variable /c is not supported"), "{e}");
        assert!(map
            .get("c/.zarray")
            .unwrap()
            .unwrap()
            .windows(3)
            .any(|w| w == b"<c8"));
    }

    #[test]
    fn a_group_that_cannot_be_stored_is_taken_out_again() {
        let tmp = tempfile::tempdir().unwrap();
        let (_loc, mut w) = writer(tmp.path(), "nczarr");
        w.write_meta().unwrap();
        // A stray file where the group's directory would go.
        std::fs::write(tmp.path().join("d.file").join("g"), b"x").unwrap();
        assert!(w.add_group_stored(Dataset::ROOT, "g").is_err());
        assert!(w.model().find_group_in(Dataset::ROOT, "g").is_none());
        // Later changes are stored.
        w.add_group_stored(Dataset::ROOT, "h").unwrap();
        w.sync().unwrap();
    }

    #[test]
    fn a_writer_starts_from_the_objects_not_a_stale_consolidated_summary() {
        for mode in [
            "zarr,consolidated",
            "nczarr,consolidated",
            "zarr,v3,consolidated",
        ] {
            let tmp = tempfile::tempdir().unwrap();
            let (loc, mut w) = writer(tmp.path(), mode);
            let x = w.add_dim(Dataset::ROOT, "x", 3, false).unwrap();
            let v = w
                .add_var(Dataset::ROOT, "v", NcType::Int, &[x], VarOptions::default())
                .unwrap();
            w.put_attr(AttrTarget::Var(v), "a", AttrValue::Char(b"old".to_vec()))
                .unwrap();
            w.close().unwrap();
            // Another writer changes an object and does not consolidate again.
            let map = zmap::open(&loc, true).unwrap();
            let (key, v3) = match mode.contains("v3") {
                true => ("v/zarr.json", true),
                false => ("v/.zattrs", false),
            };
            let mut changed: Value =
                serde_json::from_slice(&map.get(key).unwrap().unwrap()).unwrap();
            if v3 {
                changed["attributes"]["a"] = json!("new");
            } else {
                changed["a"] = json!("new");
            }
            map.put(key, &serde_json::to_vec(&changed).unwrap())
                .unwrap();
            map.flush().unwrap();

            let mut w = DatasetWriter::open(&loc).unwrap();
            w.put_attr(
                AttrTarget::Group(Dataset::ROOT),
                "g",
                AttrValue::Int(vec![1]),
            )
            .unwrap();
            w.close().unwrap();
            for summaries in [true, false] {
                let map = zmap::open(&loc, false).unwrap();
                let ds = if summaries {
                    meta::read_dataset(map.as_ref(), &loc.mode).unwrap()
                } else {
                    meta::read_stored_objects(map.as_ref(), &loc.mode).unwrap()
                };
                let v = ds.var(ds.find_var("v").unwrap());
                assert_eq!(
                    v.attr("a").unwrap().value,
                    AttrValue::Char(b"new".to_vec()),
                    "{mode}, summaries {summaries}"
                );
            }
        }
    }

    #[test]
    fn a_rewrite_keeps_the_layout_and_the_properties_of_the_dataset() {
        for (version, layout, group_key) in [
            ("4.9.0", NczarrLayout::UpperCaseKeys, "_NCZARR_GROUP"),
            ("4.9.2", NczarrLayout::LowerCaseKeys, "_nczarr_group"),
        ] {
            let tmp = tempfile::tempdir().unwrap();
            let loc = Location::parse(tmp.path().join("d.file").to_str().unwrap()).unwrap();
            let mut opts = CreateOptions::default();
            write_for_netcdf_c(&mut opts, version).unwrap();
            let mut w = DatasetWriter::create(&loc, opts).unwrap();
            let x = w.add_dim(Dataset::ROOT, "x", 2, false).unwrap();
            w.add_var(Dataset::ROOT, "v", NcType::Int, &[x], VarOptions::default())
                .unwrap();
            w.close().unwrap();
            let made_by = nc_properties_for(version);

            let mut w = DatasetWriter::open(&loc).unwrap();
            assert_eq!(w.options().layout, layout, "{version}");
            w.put_attr(
                AttrTarget::Group(Dataset::ROOT),
                "new",
                AttrValue::Int(vec![1]),
            )
            .unwrap();
            let strings = AttrValue::Str(vec!["a".into()]);
            let refused = w.put_attr(AttrTarget::Group(Dataset::ROOT), "s", strings);
            assert_eq!(
                refused.is_err(),
                layout == NczarrLayout::UpperCaseKeys,
                "{version}"
            );
            w.add_group(Dataset::ROOT, "g").unwrap();
            w.close().unwrap();
            let map = zmap::open(&loc, false).unwrap();
            let zgroup: Value =
                serde_json::from_slice(&map.get(".zgroup").unwrap().unwrap()).unwrap();
            assert_eq!(
                zgroup[group_key]["groups"],
                json!(["g"]),
                "{version}: {zgroup}"
            );
            let ds = meta::read_dataset(map.as_ref(), &loc.mode).unwrap();
            assert_eq!(ds.provenance.layout, Some(layout));
            assert_eq!(
                ds.provenance.ncproperties.as_deref(),
                Some(made_by.as_str())
            );
            let attrs = &ds.group(Dataset::ROOT).attrs;
            assert_eq!(attrs[0].value, AttrValue::Int(vec![1]));
            assert_eq!(attrs.len(), if refused.is_err() { 1 } else { 2 });
        }
    }

    #[test]
    fn a_fill_value_attribute_leaves_a_variable_without_fill_so() {
        let tmp = tempfile::tempdir().unwrap();
        let (loc, mut w) = writer(tmp.path(), "nczarr");
        let x = w.add_dim(Dataset::ROOT, "x", 2, false).unwrap();
        let no_fill = VarOptions {
            fill: Fill::NoFill,
            ..Default::default()
        };
        let v = w
            .add_var(Dataset::ROOT, "v", NcType::Int, &[x], no_fill)
            .unwrap();
        let u = w
            .add_var(Dataset::ROOT, "u", NcType::Int, &[x], VarOptions::default())
            .unwrap();
        for var in [v, u] {
            w.put_attr(AttrTarget::Var(var), "_FillValue", AttrValue::Int(vec![5]))
                .unwrap();
        }
        w.del_attr(AttrTarget::Var(v), "_FillValue").unwrap();
        w.put_attr(AttrTarget::Var(v), "_FillValue", AttrValue::Int(vec![6]))
            .unwrap();
        w.close().unwrap();
        let map = zmap::open(&loc, false).unwrap();
        let ds = meta::read_dataset(map.as_ref(), &loc.mode).unwrap();
        let fill = |name: &str| {
            ds.var(ds.find_var(name).unwrap())
                .storage
                .fill_value
                .clone()
        };
        assert_eq!(fill("v"), None);
        assert_eq!(fill("u"), Some(bytes(&[5])));
        let attr = ds
            .var(ds.find_var("v").unwrap())
            .attr("_FillValue")
            .unwrap();
        assert_eq!(attr.value, AttrValue::Int(vec![6]));
    }

    #[test]
    fn renames_onto_stray_objects_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let (_loc, mut w) = writer(tmp.path(), "nczarr");
        let x = w.add_dim(Dataset::ROOT, "x", 2, false).unwrap();
        let v = w
            .add_var(Dataset::ROOT, "v", NcType::Int, &[x], VarOptions::default())
            .unwrap();
        w.write_meta().unwrap();
        // Another program left a chunk under the name.
        w.map.put("baz/0", &[7u8; 8]).unwrap();
        let e = w.rename_var(v, "baz").unwrap_err().to_string();
        assert!(e.contains("already holds objects"), "{e}");
        assert_eq!(w.model().var(v).name, "v");
        assert_eq!(w.model().var(v).storage.key, "v");
        // `mkdir` of a group there too.
        let e = w
            .add_group_stored(Dataset::ROOT, "baz")
            .unwrap_err()
            .to_string();
        assert!(e.contains("already holds objects"), "{e}");
        assert!(w.model().group(Dataset::ROOT).groups.is_empty());
        assert_eq!(w.map.get("baz/.zgroup").unwrap(), None);
    }

    #[test]
    fn a_dataset_has_one_writer_at_a_time() {
        let tmp = tempfile::tempdir().unwrap();
        for mode in ["nczarr", "nczarr,zip"] {
            let dir = tmp.path().join(mode);
            std::fs::create_dir(&dir).unwrap();
            let (loc, mut w) = writer(&dir, mode);
            w.add_dim(Dataset::ROOT, "x", 2, false).unwrap();
            w.sync().unwrap();
            drop(w);
            let first = DatasetWriter::open(&loc).unwrap();
            let Err(e) = DatasetWriter::open(&loc) else {
                panic!("{mode}: a second writer was let in");
            };
            assert!(matches!(e, Error::Busy(_)), "{mode}: {e}");
            assert!(e.to_string().contains("another process is writing"), "{e}");
            drop(first);
            let mut again = DatasetWriter::open(&loc).unwrap();
            // A zip writer's claim moves to each archive it writes in place of the last.
            again
                .put_attr(
                    AttrTarget::Group(Dataset::ROOT),
                    "a",
                    AttrValue::Int(vec![1]),
                )
                .unwrap();
            again.sync().unwrap();
            assert!(
                matches!(DatasetWriter::open(&loc), Err(Error::Busy(_))),
                "{mode}: the claim lapsed at a flush"
            );
        }
    }

    #[test]
    fn write_grow_rename_and_reopen() {
        let tmp = tempfile::tempdir().unwrap();
        let (loc, mut w) = writer(tmp.path(), "nczarr");
        let g = w.add_group(Dataset::ROOT, "g").unwrap();
        let t = w.add_dim(Dataset::ROOT, "t", 0, true).unwrap();
        let u = w.add_dim(Dataset::ROOT, "u", 0, true).unwrap();
        let x = w.add_dim(g, "x", 3, false).unwrap();
        let opts = VarOptions {
            chunks: Some(vec![2, 2, 2]),
            codecs: Codecs::parse("shuffle,zlib:4").unwrap(),
            ..Default::default()
        };
        let v = w.add_var(g, "v", NcType::Int, &[t, u, x], opts).unwrap();
        w.put_attr(AttrTarget::Var(v), "_FillValue", AttrValue::Int(vec![-1]))
            .unwrap();
        w.put_attr(
            AttrTarget::Group(Dataset::ROOT),
            "title",
            AttrValue::Char(b"hi".to_vec()),
        )
        .unwrap();
        // Writing index (1, 2, 0..3) grows both unlimited dimensions.
        let slab = Hyperslab {
            start: vec![1, 2, 0],
            count: vec![1, 1, 3],
            stride: vec![1; 3],
        };
        w.write(v, &slab, &bytes(&[7, 8, 9])).unwrap();
        assert_eq!((w.model().dim(t).len, w.model().dim(u).len), (2, 3));
        // A fixed dimension does not grow.
        let past = Hyperslab {
            start: vec![0, 0, 2],
            count: vec![1, 1, 2],
            stride: vec![1; 3],
        };
        let err = w.write(v, &past, &bytes(&[1, 2])).unwrap_err().to_string();
        assert!(err.contains("/g/x") && err.contains("length 3"), "{err}");
        // The fill value is fixed once values are stored.
        assert!(w
            .put_attr(AttrTarget::Var(v), "_FillValue", AttrValue::Int(vec![5]))
            .is_err());
        w.sync().unwrap();
        w.rename_var(v, "w").unwrap();
        w.rename_group(g, "h").unwrap();
        w.rename_dim(x, "xx").unwrap();
        w.rename_attr(AttrTarget::Group(Dataset::ROOT), "title", "name")
            .unwrap();
        w.close().unwrap();
        assert!(!tmp.path().join("d.file/g").exists());

        let map = zmap::open(&loc, false).unwrap();
        let ds = meta::read_dataset(map.as_ref(), &loc.mode).unwrap();
        let v = ds.find_var("/h/w").expect("renamed variable");
        assert_eq!(ds.var_shape(v), [2, 3, 3]);
        assert_eq!(ds.dim(ds.var(v).dims[2]).name, "xx");
        assert_eq!(ds.group(Dataset::ROOT).attrs[0].name, "name");
        let engine = ChunkEngine::new(map, 1 << 20);
        let mut out = vec![0u8; 18 * 4];
        engine
            .read(&ds, v, &Hyperslab::whole(&[2, 3, 3]), &mut out)
            .unwrap();
        let mut want = vec![-1; 18];
        want[15..18].copy_from_slice(&[7, 8, 9]);
        assert_eq!(ints(&out), want);
    }

    /// Rows `start..start + count` of a variable on (t) or (t, x).
    fn rows(start: u64, count: u64, rank: usize) -> Hyperslab {
        let mut slab = Hyperslab::whole(&vec![2; rank]);
        (slab.start[0], slab.count[0]) = (start, count);
        slab
    }

    #[test]
    fn records_a_failed_writer_stored_past_the_length_read_as_fill_when_it_grows() {
        const NC_FILL_INT: i32 = -2147483647;
        let tmp = tempfile::tempdir().unwrap();
        // The last: `a` in shards of 12 records, inner chunks of 4.
        for (mode, separator, sharded) in [
            ("nczarr", '.', false),
            ("nczarr", '/', false),
            ("nczarr,v3", '/', false),
            ("nczarr,zip", '.', false),
            ("nczarr,v3", '/', true),
        ] {
            let dir = tmp
                .path()
                .join(format!("{mode}{}{sharded}", separator == '/'));
            std::fs::create_dir(&dir).unwrap();
            let loc = Location::parse(&format!(
                "file://{}#mode={mode}",
                dir.join("d.file").display()
            ))
            .unwrap();
            let mut opts = CreateOptions::from_mode(&loc.mode);
            opts.separator = separator;
            let mut w = DatasetWriter::create(&loc, opts).unwrap();
            let t = w.add_dim(Dataset::ROOT, "t", 0, true).unwrap();
            let x = w.add_dim(Dataset::ROOT, "x", 2, false).unwrap();
            let chunked = |chunks: Vec<u64>, fill: Fill| VarOptions {
                chunks: Some(chunks),
                fill,
                ..Default::default()
            };
            let a = w
                .add_var(
                    Dataset::ROOT,
                    "a",
                    NcType::Int,
                    &[t, x],
                    chunked(vec![4, 2], Fill::Value(bytes(&[-1]))),
                )
                .unwrap();
            let b = w
                .add_var(
                    Dataset::ROOT,
                    "b",
                    NcType::Int,
                    &[t],
                    chunked(vec![4], Fill::Default),
                )
                .unwrap();
            if sharded {
                let st = &mut w.model.vars[a.0].storage;
                let dtype = st.dtype.clone().unwrap();
                st.codecs = writer_v3::sharded(&CodecSpec::default(), &dtype, &[4, 2]).unwrap();
                st.chunks = vec![12, 2];
            }
            w.write(a, &rows(0, 6, 2), &bytes(&[1; 12])).unwrap();
            w.write(b, &rows(0, 6, 1), &bytes(&[1; 6])).unwrap();
            w.close().unwrap();

            // A writer without a cache stores each chunk as it writes it, and fails before
            // its metadata: records 6..16 are stored, the dataset still has 6.
            let mut failed = DatasetWriter::open_with_cache(&loc, 0).unwrap();
            failed.write(a, &rows(6, 10, 2), &bytes(&[99; 20])).unwrap();
            failed.write(b, &rows(6, 10, 1), &bytes(&[99; 10])).unwrap();
            failed.map().flush().unwrap();
            drop(failed);
            let map = zmap::open(&loc, false).unwrap();
            let ds = meta::read_dataset(map.as_ref(), &loc.mode).unwrap();
            assert_eq!(ds.dim(t).len, 6, "{mode}");

            let mut w = DatasetWriter::open(&loc).unwrap();
            // Read first: the chunk of records 4..8 is cached as stored.
            let mut out = vec![0u8; 6 * 2 * 4];
            w.read(a, &rows(0, 6, 2), &mut out).unwrap();
            assert_eq!(ints(&out), [1; 12], "{mode}");
            // Record 12 leaves a gap of 6..12.
            w.write(a, &rows(12, 1, 2), &bytes(&[7, 7])).unwrap();
            let mut want_a = vec![1; 12];
            want_a.extend([-1; 12]);
            want_a.extend([7, 7]);
            let mut want_b = vec![1; 6];
            want_b.extend([NC_FILL_INT; 7]);
            let check = |what: &str, read: &dyn Fn(VarId, &Hyperslab, &mut [u8])| {
                let mut out = vec![0u8; 13 * 2 * 4];
                read(a, &rows(0, 13, 2), &mut out);
                assert_eq!(ints(&out), want_a, "{mode}, {what}: a");
                let mut out = vec![0u8; 13 * 4];
                read(b, &rows(0, 13, 1), &mut out);
                assert_eq!(ints(&out), want_b, "{mode}, {what}: b");
            };
            check("writer", &|v, slab, out| w.read(v, slab, out).unwrap());
            w.close().unwrap();
            let map = zmap::open(&loc, false).unwrap();
            let ds = meta::read_dataset(map.as_ref(), &loc.mode).unwrap();
            let engine = ChunkEngine::new(map, 1 << 20);
            check("stored", &|v, slab, out| {
                engine.read(&ds, v, slab, out).unwrap()
            });
        }
    }

    #[test]
    fn create_refuses_an_existing_dataset_and_bad_names() {
        let tmp = tempfile::tempdir().unwrap();
        let (loc, mut w) = writer(tmp.path(), "zarr");
        assert!(w.add_dim(Dataset::ROOT, "a/b", 1, false).is_err());
        w.add_dim(Dataset::ROOT, "a", 1, false).unwrap();
        assert!(w.add_dim(Dataset::ROOT, "a", 2, false).is_err());
        w.close().unwrap();
        assert!(DatasetWriter::create(&loc, CreateOptions::default()).is_err());
    }

    /// The chain a new variable of `nctype` over a dimension of 6 (one chunk) is stored
    /// with in a dataset of `mode`, or the error refusing it.
    fn stored_chain(mode: &str, nctype: NcType, codecs: &str) -> Result<CodecSpec> {
        let tmp = tempfile::tempdir().unwrap();
        let (_loc, mut w) = writer(tmp.path(), mode);
        let x = w.add_dim(Dataset::ROOT, "x", 6, false).unwrap();
        let opts = VarOptions {
            codecs: Codecs::parse(codecs).unwrap(),
            ..Default::default()
        };
        let v = w.add_var(Dataset::ROOT, "v", nctype, &[x], opts)?;
        Ok(w.model().var(v).storage.codecs.clone())
    }

    #[test]
    fn nczarr_shuffles_by_the_type_size_as_netcdf_c_does() {
        let chain = r#"[{"id": "shuffle", "elementsize": 2}, {"id": "zlib", "level": 1}]"#;
        let CodecSpec::V2 { filters, .. } = stored_chain("nczarr", NcType::Double, chain).unwrap()
        else {
            panic!("not a v2 chain")
        };
        assert_eq!(filters, [json!({"id": "shuffle", "elementsize": 0})]);
        // Pure Zarr keeps it: numcodecs reads it as written.
        let CodecSpec::V2 { filters, .. } = stored_chain("zarr", NcType::Double, chain).unwrap()
        else {
            panic!("not a v2 chain")
        };
        assert_eq!(filters, [json!({"id": "shuffle", "elementsize": 2})]);
    }

    #[test]
    fn nczarr_stores_a_negative_zstd_level_as_1() {
        let compressor = |mode| match stored_chain(mode, NcType::Int, "zstd:-5").unwrap() {
            CodecSpec::V2 { compressor, .. } => compressor,
            CodecSpec::V3(_) => panic!("not a v2 chain"),
        };
        assert_eq!(
            compressor("nczarr"),
            Some(json!({"id": "zstd", "level": 1}))
        );
        assert_eq!(compressor("zarr"), Some(json!({"id": "zstd", "level": -5})));
    }

    #[test]
    fn chains_numcodecs_cannot_unshuffle_are_refused() {
        let e = stored_chain("zarr", NcType::Int, "zlib,shuffle").unwrap_err();
        assert!(e.to_string().contains("after the compressor zlib"), "{e}");
        // 6 bytes are not a whole number of 4-byte elements.
        let e = stored_chain(
            "zarr",
            NcType::Byte,
            r#"[{"id": "shuffle", "elementsize": 4}]"#,
        );
        let e = e.unwrap_err().to_string();
        assert!(e.contains("4-byte elements over chunks of 6 bytes"), "{e}");
        // A checksum's 4 bytes count: 24 + 4 is not a multiple of 8.
        let e = stored_chain(
            "zarr",
            NcType::Int,
            r#"[{"id": "fletcher32"}, {"id": "shuffle", "elementsize": 8}]"#,
        );
        assert!(e.unwrap_err().to_string().contains("chunks of 28 bytes"));
        for ok in ["shuffle,zlib", "fletcher32,shuffle", "zlib"] {
            stored_chain("zarr", NcType::Int, ok).unwrap();
        }
        let e = stored_chain(
            "zarr",
            NcType::Int,
            r#"[{"id": "blosc", "cname": "snappy", "clevel": 5, "shuffle": 1}]"#,
        );
        assert!(e
            .unwrap_err()
            .to_string()
            .contains("blosclz, lz4, lz4hc, zlib, zstd"));
    }

    #[test]
    fn v3_strings_are_not_shuffled() {
        let CodecSpec::V3(list) =
            stored_chain("zarr,v3", NcType::String, "shuffle,zlib:1").unwrap()
        else {
            panic!("not a v3 chain")
        };
        let names: Vec<&str> = list.iter().filter_map(|c| c["name"].as_str()).collect();
        assert_eq!(names, ["vlen-utf8", "numcodecs.zlib"]);
    }

    #[test]
    fn codec_lists_in_zarr_v3_form_are_read() {
        // What `dump -s` shows of a Zarr v3 variable.
        let c = Codecs::from_json(
            r#"[{"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
                {"name": "bytes", "configuration": {"endian": "little"}},
                {"name": "zstd", "configuration": {"level": 3, "checksum": false}}]"#,
        )
        .unwrap();
        assert_eq!(c.filters, [json!({"id": "shuffle", "elementsize": 4})]);
        assert_eq!(c.compressor, Some(json!({"id": "zstd", "level": 3})));
        let e = Codecs::from_json(r#"[{"level": 3}]"#).unwrap_err();
        assert!(e.to_string().contains("\"name\""), "{e}");
    }

    #[test]
    fn blosc_snappy_is_refused_naming_the_compressors() {
        let e = Codecs::parse("blosc:snappy").unwrap_err().to_string();
        assert!(e.contains("blosclz, lz4, lz4hc, zlib, zstd"), "{e}");
    }

    #[test]
    fn codec_words_and_hdf5_filters() {
        let c = Codecs::parse("shuffle,fletcher32,zstd:5").unwrap();
        assert_eq!(c.filters.len(), 2);
        assert_eq!(c.compressor, Some(json!({"id": "zstd", "level": 5})));
        // A checksum after the compressor keeps the order: everything is a filter.
        let c = Codecs::parse("zlib:1,fletcher32").unwrap();
        assert_eq!(c.compressor, None);
        assert_eq!(c.filters.len(), 2);
        assert!(Codecs::parse("zlib:12").is_err());
        assert!(Codecs::parse("nope").is_err());
        let f = Codecs::from_hdf5_filter("2|307,9").unwrap();
        assert_eq!(f.compressor, Some(json!({"id": "bz2", "level": 9})));
        assert!(Codecs::from_hdf5_filter("40000").is_err());
    }
}
