//! Chunk codecs: the compressors and filters of Zarr v2 (`compressor`, `filters`) and the
//! codec chain of Zarr v3, each behind the [`Codec`] trait.
//!
//! Zarr v2 codec entries are numcodecs configurations (`{"id": "zlib", "level": 1}`); every
//! codec here reads streams numcodecs 0.16 writes and writes streams numcodecs reads. netcdf-c
//! spells some parameters its own way (`"elementsize": 0` for shuffle, quoted numbers), which
//! [`Config`] accepts too.

use std::fmt::Debug;

use serde_json::{Map, Value};

use crate::error::{capped, quoted};
use crate::model::CodecSpec;
use crate::{Error, Result};

mod blosc;
mod bz2;
mod checksum;
mod deflate;
mod lz4;
mod shuffle;
mod zstd_codec;

pub use blosc::{zarr_v3_configuration as blosc_zarr_v3_configuration, Blosc};
pub use bz2::Bz2;
pub use checksum::{Checksum, ChecksumKind};
pub use deflate::{Gzip, Zlib};
pub use lz4::Lz4;
pub use shuffle::{netcdf_element_size, Shuffle, NETCDF_STRING_ELEMENT, NUMCODECS_ELEMENTSIZE};
pub use zstd_codec::{
    compressing_level as zstd_compressing_level, netcdf_c_zstd_level, zarr_v3_zstd_level,
    zstd_level_meant, Zstd,
};

/// One bytes-to-bytes transformation of a chunk.
pub trait Codec: Send + Sync + Debug {
    /// The codec id as stored (`zlib`, `shuffle`, `blosc`, …).
    fn id(&self) -> &str;
    /// Reverses [`Codec::encode`].
    fn decode(&self, input: Vec<u8>) -> Result<Vec<u8>>;
    /// Transforms stored-order bytes towards the stored chunk.
    fn encode(&self, input: Vec<u8>) -> Result<Vec<u8>>;

    /// Like [`Codec::decode`], but fails instead of producing more than `max_len` bytes.
    /// Decompressors override this so that a hostile stream cannot make them allocate more
    /// than the caller expects (a decompression bomb); the default suits codecs whose output
    /// is never larger than their input.
    fn decode_bounded(&self, input: Vec<u8>, max_len: usize) -> Result<Vec<u8>> {
        let out = self.decode(input)?;
        if out.len() > max_len {
            return Err(too_large(self.id(), max_len));
        }
        Ok(out)
    }

    /// An upper bound of the encoded size of `decoded_len` bytes; used to bound the
    /// intermediate stages of a chain when decoding.
    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        decoded_len
    }

    /// Whether chunks can be encoded: fails with [`Error::Codec`] naming the parameter and
    /// the values the codec accepts when one that only encoding uses is out of range (see
    /// [`EncodingParam`]). Decoding never depends on it.
    fn check_encodable(&self) -> Result<()> {
        Ok(())
    }

    /// Encodes `input` into `out`, replacing its contents but reusing its allocation. Codecs
    /// on a writer's hot path override this (no copy of the input, no fresh output buffer);
    /// the default encodes a copy and moves the result in.
    fn encode_into(&self, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
        *out = self.encode(input.to_vec())?;
        Ok(())
    }

    /// Decodes `input` into the start of `out` and returns the decoded length; fails instead
    /// of producing more than `out.len()` bytes. Codecs on a reader's hot path override this
    /// to write straight into the caller's buffer (no allocation, no copy); the default
    /// decodes into a new buffer and copies.
    fn decode_into(&self, input: &[u8], out: &mut [u8]) -> Result<usize> {
        let decoded = self.decode_bounded(input.to_vec(), out.len())?;
        let (n, max) = (decoded.len(), out.len());
        // decode_bounded keeps to the bound; the check guards an overriding codec's mistake.
        out.get_mut(..n)
            .ok_or_else(|| too_large(self.id(), max))?
            .copy_from_slice(&decoded);
        Ok(n)
    }
}

/// A chain of codecs in encoding order (Zarr v2: filters, then the compressor).
#[derive(Debug, Default)]
pub struct Pipeline {
    codecs: Vec<Box<dyn Codec>>,
}

impl Pipeline {
    /// Builds the chain of a Zarr v2 array. `element_size` is the element size netcdf-c would
    /// shuffle with ([`netcdf_element_size`]), used by a shuffle whose `elementsize` is 0 (a
    /// missing one is numcodecs' default), and as blosc's typesize.
    ///
    /// An id that is not implemented fails with [`Error::UnknownCodec`]; a known id with an
    /// invalid parameter fails with [`Error::Codec`].
    pub fn from_v2(
        filters: &[Value],
        compressor: Option<&Value>,
        element_size: usize,
    ) -> Result<Pipeline> {
        let codecs = filters
            .iter()
            .chain(compressor)
            .filter(|v| !v.is_null())
            .map(|v| codec_from_v2(v, element_size))
            .collect::<Result<Vec<_>>>()?;
        Ok(Pipeline { codecs })
    }

    /// Builds the bytes-to-bytes part of a Zarr v3 `codecs` list. The `bytes` codec is
    /// skipped: its `endian` is the stored byte order, which the dtype conversion applies; a
    /// `transpose` other than the identity and `sharding_indexed` are [`Error::Unsupported`].
    /// Names may carry zarr-python's `numcodecs.` prefix (`numcodecs.zlib`), whose
    /// configuration is the numcodecs one; a `numcodecs.shuffle` without `elementsize`
    /// shuffles by `element_size`, as zarr-python's wrapper fills it in from the data type.
    pub fn from_v3(codecs: &[Value], element_size: usize) -> Result<Pipeline> {
        let mut out: Vec<Box<dyn Codec>> = Vec::with_capacity(codecs.len());
        for entry in codecs {
            let (name, config) = match entry {
                Value::String(name) => (name.as_str(), None),
                Value::Object(o) => match o.get("name").and_then(Value::as_str) {
                    Some(name) => (name, o.get("configuration")),
                    None => {
                        return Err(Error::Codec {
                            codec: "?".to_string(),
                            reason: format!("codec without a string \"name\": {entry}"),
                        })
                    }
                },
                _ => {
                    return Err(Error::Codec {
                        codec: "?".to_string(),
                        reason: format!("codec entry is not an object: {entry}"),
                    })
                }
            };
            let mut params = match config {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(m)) => m.clone(),
                Some(other) => {
                    return Err(Error::Codec {
                        codec: name.to_string(),
                        reason: format!("configuration is not an object: {other}"),
                    })
                }
            };
            let id = name.strip_prefix("numcodecs.").unwrap_or(name);
            match id {
                "bytes" => continue,
                "transpose" => {
                    let identity = params
                        .get("order")
                        .and_then(Value::as_array)
                        .is_some_and(|o| {
                            o.iter()
                                .enumerate()
                                .all(|(i, v)| v.as_u64() == Some(i as u64))
                        });
                    if identity {
                        continue;
                    }
                    return Err(Error::Unsupported(format!(
                        "codec transpose with configuration {}",
                        Value::Object(params)
                    )));
                }
                "sharding_indexed" => {
                    return Err(Error::Unsupported("codec sharding_indexed".to_string()))
                }
                // zarr-python's own blosc, zstd and gzip: their configuration as it takes
                // it, numcodecs.blosc and the others numcodecs' as it is.
                "blosc" | "zstd" | "gzip" if name == id => {
                    let refusal = v3_refusal(id, &params);
                    v3_as_numcodecs(id, &mut params, element_size);
                    params.insert("id".to_string(), Value::from(id));
                    let codec = codec_from_v2(&Value::Object(params), element_size)?;
                    out.push(match refusal {
                        None => codec,
                        Some(refusal) => Box::new(EncodingRefused { codec, refusal }),
                    });
                    continue;
                }
                "shuffle" if params.get("elementsize").is_none_or(Value::is_null) => {
                    params.insert("elementsize".to_string(), Value::from(element_size));
                }
                _ => {}
            }
            params.insert("id".to_string(), Value::from(id));
            out.push(codec_from_v2(&Value::Object(params), element_size)?);
        }
        Ok(Pipeline { codecs: out })
    }

    /// Builds the chain a variable's [`CodecSpec`] describes.
    pub fn from_spec(spec: &CodecSpec, element_size: usize) -> Result<Pipeline> {
        match spec {
            CodecSpec::V2 {
                filters,
                compressor,
            } => Pipeline::from_v2(filters, compressor.as_ref(), element_size),
            CodecSpec::V3(codecs) => Pipeline::from_v3(codecs, element_size),
        }
    }

    /// The ids of the codecs, in encoding order.
    pub fn ids(&self) -> Vec<&str> {
        self.codecs.iter().map(|c| c.id()).collect()
    }

    /// Whether the chain is empty (chunks are stored as raw bytes).
    pub fn is_empty(&self) -> bool {
        self.codecs.is_empty()
    }

    /// Decodes a stored chunk.
    pub fn decode(&self, mut bytes: Vec<u8>) -> Result<Vec<u8>> {
        for c in self.codecs.iter().rev() {
            bytes = c.decode(bytes)?;
        }
        Ok(bytes)
    }

    /// Decodes a stored chunk that must decode to exactly `expected_len` bytes. Every stage is
    /// bounded, so a corrupt or hostile chunk fails without allocating much more than
    /// `expected_len`; a wrong final size is an [`Error::Codec`].
    pub fn decode_expect(&self, mut bytes: Vec<u8>, expected_len: usize) -> Result<Vec<u8>> {
        // bounds[i]: the largest output decoding through codecs[i] may produce, i.e. the
        // largest input codecs[i] can have been given when encoding.
        let mut bounds = Vec::with_capacity(self.codecs.len());
        let mut bound = expected_len;
        for c in &self.codecs {
            bounds.push(bound);
            bound = c.max_encoded_len(bound);
        }
        for (c, max) in self.codecs.iter().zip(bounds).rev() {
            bytes = c.decode_bounded(bytes, max)?;
        }
        if bytes.len() != expected_len {
            let codec = self.codecs.first().map_or("null", |c| c.id());
            return Err(Error::Codec {
                codec: codec.to_string(),
                reason: format!(
                    "chunk decoded to {} bytes, expected {expected_len}",
                    bytes.len()
                ),
            });
        }
        Ok(bytes)
    }

    /// Like [`Pipeline::decode_expect`], but decodes into `out` (whose length is the expected
    /// one) without allocating on the way: intermediate stages go to `scratch`, whose
    /// buffers grow to the largest stage once and are reused by the next call.
    pub fn decode_into(
        &self,
        raw: &[u8],
        out: &mut [u8],
        scratch: &mut [Vec<u8>; 2],
    ) -> Result<()> {
        let expected_len = out.len();
        let mut bounds = Vec::with_capacity(self.codecs.len());
        let mut bound = expected_len;
        for c in &self.codecs {
            bounds.push(bound);
            bound = c.max_encoded_len(bound);
        }
        let wrong_size = |n: usize| {
            let codec = self.codecs.first().map_or("null", |c| c.id());
            Error::Codec {
                codec: codec.to_string(),
                reason: format!("chunk decoded to {n} bytes, expected {expected_len}"),
            }
        };
        let Some((first, rest)) = self.codecs.split_first() else {
            if raw.len() != expected_len {
                return Err(wrong_size(raw.len()));
            }
            out.copy_from_slice(raw);
            return Ok(());
        };
        // Stages alternate between the two scratch buffers: a codec never reads and writes
        // the same one.
        let [a, b] = scratch;
        let (mut input, mut spare): (&mut Vec<u8>, &mut Vec<u8>) = (a, b);
        let mut input_len = None;
        for (i, c) in rest.iter().enumerate().rev() {
            let max = bounds[i + 1];
            if spare.len() < max {
                spare.resize(max, 0);
            }
            let src = match input_len {
                None => raw,
                Some(n) => &input[..n],
            };
            let n = c.decode_into(src, &mut spare[..max])?;
            std::mem::swap(&mut input, &mut spare);
            input_len = Some(n);
        }
        let src = match input_len {
            None => raw,
            Some(n) => &input[..n],
        };
        let n = first.decode_into(src, out)?;
        if n != expected_len {
            return Err(wrong_size(n));
        }
        Ok(())
    }

    /// Whether the chain can encode chunks: the [`Codec::check_encodable`] of the first
    /// codec that cannot. A chain that cannot encode still decodes.
    pub fn check_encodable(&self) -> Result<()> {
        self.codecs.iter().try_for_each(|c| c.check_encodable())
    }

    /// Encodes a chunk for storage.
    pub fn encode(&self, mut bytes: Vec<u8>) -> Result<Vec<u8>> {
        for c in &self.codecs {
            bytes = c.encode(bytes)?;
        }
        Ok(bytes)
    }

    /// Encodes a chunk for storage through the caller's reusable `scratch` buffers (the stages
    /// alternate between them); returns the stored bytes, `input` itself for an empty chain.
    pub fn encode_with<'a>(
        &self,
        input: &'a [u8],
        scratch: &'a mut [Vec<u8>; 2],
    ) -> Result<&'a [u8]> {
        let Some((first, rest)) = self.codecs.split_first() else {
            return Ok(input);
        };
        let [mut cur, mut other] = scratch.each_mut();
        first.encode_into(input, cur)?;
        for c in rest {
            c.encode_into(cur, other)?;
            std::mem::swap(&mut cur, &mut other);
        }
        Ok(cur)
    }
}

/// A numcodecs configuration (`{"id": ..}` and parameters) with every parameter it leaves
/// out given numcodecs' default (numcodecs 0.16: `Zlib(level=1)`, `GZip(level=1)`,
/// `BZ2(level=1)`, `Zstd(level=0)`, `LZ4(acceleration=1)`,
/// `Blosc(cname='lz4', clevel=5, shuffle=SHUFFLE, blocksize=AUTOBLOCKS)`). zarr-python 3
/// writes a codec built with its defaults as `{}`, and netcdf-c reads the parameters it
/// needs without checking that they are there (4.10.1 crashes on `{"id": "bz2"}`), so every
/// configuration is written whole. Zstd's `checksum` (default false) stays out, as netcdf-c
/// writes zstd, so that a chain read from its stores is written back as it was. A shuffle
/// without an element size gets numcodecs' 4 (netcdf-c's explicit 0 stays).
pub fn with_numcodecs_defaults(codec: &Value) -> Value {
    let defaults: &[(&str, Value)] = match codec.get("id").and_then(Value::as_str) {
        Some("zlib" | "gzip" | "bz2") => &[("level", Value::from(1))],
        Some("zstd") => &[("level", Value::from(0))],
        Some("lz4") => &[("acceleration", Value::from(1))],
        Some("shuffle") => &[("elementsize", Value::from(NUMCODECS_ELEMENTSIZE))],
        Some("blosc") => &[
            ("cname", Value::from("lz4")),
            ("clevel", Value::from(5)),
            ("shuffle", Value::from(1)),
            ("blocksize", Value::from(0)),
        ],
        _ => &[],
    };
    let mut codec = codec.clone();
    if let Some(obj) = codec.as_object_mut() {
        for (key, value) in defaults {
            if obj.get(*key).is_none_or(Value::is_null) {
                obj.insert((*key).to_string(), value.clone());
            }
        }
    }
    codec
}

/// Whether a Zarr v2 `filters` list starts with one of numcodecs' object codecs for strings
/// (`vlen-utf8`, `vlen-bytes`): the codec of an object (`|O`) array, which zarr-python and
/// xarray write for Python strings.
pub fn is_object_string_filter(filters: &[Value]) -> bool {
    let id = filters
        .first()
        .and_then(|f| f.get("id"))
        .and_then(Value::as_str);
    matches!(id, Some("vlen-utf8" | "vlen-bytes"))
}

/// Whether an object array's strings are UTF-8 text (`vlen-utf8`), not bytes (`vlen-bytes`).
pub fn is_object_utf8_filter(filters: &[Value]) -> bool {
    filters
        .first()
        .and_then(|f| f.get("id"))
        .and_then(Value::as_str)
        == Some("vlen-utf8")
}

/// The Zarr v3 spelling of an object (`|O`) string array's v2 chain, which the chunk engine's
/// variable-length decoder reads: the object codec, then the other filters and the compressor
/// as `numcodecs.` codecs (numcodecs' configurations), after a transpose for `order: "F"`.
/// `None` unless the filters start with `vlen-utf8` or `vlen-bytes`.
pub fn object_string_chain(
    filters: &[Value],
    compressor: Option<&Value>,
    fortran_order: bool,
    rank: usize,
) -> Option<Vec<Value>> {
    if !is_object_string_filter(filters) {
        return None;
    }
    let mut chain = Vec::with_capacity(filters.len() + 2);
    if fortran_order && rank > 1 {
        let reversed: Vec<usize> = (0..rank).rev().collect();
        chain.push(serde_json::json!({"name": "transpose", "configuration": {"order": reversed}}));
    }
    let numcodec = |f: &Value| {
        let mut config = f.as_object().cloned().unwrap_or_default();
        let id = config.remove("id");
        let id = id.as_ref().and_then(Value::as_str).unwrap_or("?");
        serde_json::json!({"name": format!("numcodecs.{id}"), "configuration": config})
    };
    chain.push(serde_json::json!({"name": filters[0]["id"]}));
    chain.extend(filters[1..].iter().map(numcodec));
    chain.extend(compressor.filter(|c| !c.is_null()).map(numcodec));
    Some(chain)
}

/// The first codec of `spec` that is not implemented here (numcodecs' `delta`, HDF5's
/// `szip`), whose variable can therefore not be read or written at all; `None` when every
/// codec is known (a known codec may still have a bad parameter, which a read reports).
pub fn unknown_codec(spec: &CodecSpec) -> Option<String> {
    match spec {
        CodecSpec::V2 {
            filters,
            compressor,
        } => {
            // An object array's string codec is decoded by the chunk engine, not a Codec.
            let filters = match is_object_string_filter(filters) {
                true => &filters[1..],
                false => &filters[..],
            };
            match Pipeline::from_v2(filters, compressor.as_ref(), 1) {
                Err(Error::UnknownCodec { name }) => Some(name),
                _ => None,
            }
        }
        CodecSpec::V3(list) => unknown_v3_codec_in(list),
    }
}

/// [`unknown_codec`] of a Zarr v3 codec list.
pub fn unknown_v3_codec_in(list: &[Value]) -> Option<String> {
    list.iter().find_map(unknown_v3_codec)
}

/// [`unknown_codec`] of one Zarr v3 codec entry, looking inside `sharding_indexed`.
fn unknown_v3_codec(entry: &Value) -> Option<String> {
    let name = match entry {
        Value::String(name) => name.as_str(),
        _ => entry.get("name").and_then(Value::as_str)?,
    };
    match name {
        "sharding_indexed" => ["codecs", "index_codecs"]
            .iter()
            .filter_map(|k| entry.get("configuration")?.get(*k)?.as_array())
            .flatten()
            .find_map(unknown_v3_codec),
        // The array-to-array and array-to-bytes codecs the chunk engine applies itself.
        "bytes" | "transpose" | "vlen-utf8" | "vlen-bytes" => None,
        _ => match Pipeline::from_v3(std::slice::from_ref(entry), 1) {
            Err(Error::UnknownCodec { name }) => Some(name),
            _ => None,
        },
    }
}

/// The names zarr-python 3.1.6 gives blosc's shuffles in a Zarr v3 configuration, in the
/// order of numcodecs' integers for them.
const V3_SHUFFLES: [&str; 3] = ["noshuffle", "shuffle", "bitshuffle"];

/// Why zarr-python 3.1.6 refuses the configuration of its Zarr v3 `blosc`, `zstd` or `gzip`
/// codec (it opens no array with it), or `None`. Every parameter there only serves
/// compressing, so such an array is read here, and not written: a parameter of another
/// JSON type than zarr-python's (`"clevel": 5.5`, `"shuffle": 1`, `"checksum": "yes"`;
/// Python's `bool` is an `int`), a zstd level above 22, a gzip level outside 0..9, a
/// shuffle or compressor it does not name, or one it does not know of.
fn v3_refusal(id: &str, params: &Map<String, Value>) -> Option<EncodingRefusal> {
    let int = |v: &Value| match v {
        Value::Bool(b) => Some(i64::from(*b)),
        _ => v.as_i64(),
    };
    let is_int = |v: &Value| v.is_boolean() || v.is_i64() || v.is_u64();
    // Of the right type, then within the values taken.
    let int_in = |v: &Value, ok: &dyn Fn(i64) -> bool| match is_int(v) {
        false => Some(false),
        true => (!int(v).is_some_and(ok)).then_some(true),
    };
    let named = |v: &Value, names: &[&str]| {
        (!v.as_str().is_some_and(|s| names.contains(&s))).then_some(false)
    };
    for (key, v) in params {
        // Some(out_of_range) when refused.
        let refused = match (id, key.as_str()) {
            // null is zarr-python's "from the data type" for these two.
            ("blosc", "typesize") if v.is_null() => None,
            ("blosc", "typesize") => match v.as_u64() {
                Some(t) if t > i64::MAX as u64 => None,
                _ => int_in(v, &|t| t > 0),
            },
            ("blosc", "shuffle") if v.is_null() => None,
            ("blosc", "shuffle") => named(v, &V3_SHUFFLES),
            ("blosc", "cname") => named(v, &["lz4", "lz4hc", "blosclz", "snappy", "zlib", "zstd"]),
            ("blosc", "clevel" | "blocksize") => (!is_int(v)).then_some(false),
            ("zstd", "level") => int_in(v, &|l| l < 23),
            ("zstd", "checksum") => (!v.is_boolean()).then_some(false),
            ("gzip", "level") => int_in(v, &|l| (0..=9).contains(&l)),
            _ => {
                return Some(EncodingRefusal {
                    reason: format!(
                        "Zarr v3 {id} has no parameter {} (zarr-python opens no array with it)",
                        quoted(key)
                    ),
                    out_of_range: false,
                })
            }
        };
        if let Some(out_of_range) = refused {
            return Some(EncodingRefusal {
                reason: format!(
                    "parameter {} = {} is not one zarr-python's Zarr v3 {id} takes (it opens \
                     no array with it)",
                    quoted(key),
                    capped(&v.to_string())
                ),
                out_of_range,
            });
        }
    }
    None
}

/// Why a codec cannot encode: [`Error::CodecOutOfRange`] when `out_of_range`, otherwise
/// [`Error::Codec`].
#[derive(Debug)]
struct EncodingRefusal {
    reason: String,
    out_of_range: bool,
}

/// Turns the configuration of zarr-python's Zarr v3 `blosc`, `zstd` or `gzip` into the
/// numcodecs one it compresses with: a shuffle's name is numcodecs' integer, and what it
/// leaves out is zarr-python's default, not numcodecs' (gzip level 5, blosc's compressor
/// zstd; a shuffle or type size left out or `null` follows the data type, whose items are
/// `element_size` bytes: bit-shuffle for 1-byte items, byte-shuffle otherwise, whatever
/// type size the configuration gives).
fn v3_as_numcodecs(id: &str, params: &mut Map<String, Value>, element_size: usize) {
    match id {
        "gzip" if !params.contains_key("level") => {
            params.insert("level".to_string(), Value::from(5));
        }
        "blosc" => {
            if !params.contains_key("cname") {
                params.insert("cname".to_string(), Value::from("zstd"));
            }
            let shuffle = match params.get("shuffle") {
                None | Some(Value::Null) => Some(if element_size == 1 { 2 } else { 1 }),
                Some(Value::String(s)) => V3_SHUFFLES
                    .iter()
                    .position(|n| n == s)
                    .map(|code| code as i64),
                Some(_) => None,
            };
            match shuffle {
                Some(code) => {
                    params.insert("shuffle".to_string(), Value::from(code));
                }
                // Refused for encoding by v3_refusal; numcodecs' default builds the codec.
                None => {
                    params.remove("shuffle");
                }
            }
            if params.get("typesize").is_some_and(Value::is_null) {
                params.remove("typesize");
            }
        }
        _ => {}
    }
}

/// A codec whose configuration zarr-python refuses for what only compressing uses (see
/// [`v3_refusal`]): it decodes as the codec does and refuses to encode.
#[derive(Debug)]
struct EncodingRefused {
    codec: Box<dyn Codec>,
    refusal: EncodingRefusal,
}

impl EncodingRefused {
    /// The codec's own refusal when it has one (naming the range it takes), else this one.
    fn refusal(&self) -> Error {
        if let Err(e) = self.codec.check_encodable() {
            return e;
        }
        let (codec, reason) = (self.codec.id().to_string(), self.refusal.reason.clone());
        match self.refusal.out_of_range {
            true => Error::CodecOutOfRange { codec, reason },
            false => Error::Codec { codec, reason },
        }
    }
}

impl Codec for EncodingRefused {
    fn id(&self) -> &str {
        self.codec.id()
    }

    fn decode(&self, input: Vec<u8>) -> Result<Vec<u8>> {
        self.codec.decode(input)
    }

    fn encode(&self, _input: Vec<u8>) -> Result<Vec<u8>> {
        Err(self.refusal())
    }

    fn decode_bounded(&self, input: Vec<u8>, max_len: usize) -> Result<Vec<u8>> {
        self.codec.decode_bounded(input, max_len)
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        self.codec.max_encoded_len(decoded_len)
    }

    fn check_encodable(&self) -> Result<()> {
        Err(self.refusal())
    }

    fn decode_into(&self, input: &[u8], out: &mut [u8]) -> Result<usize> {
        self.codec.decode_into(input, out)
    }
}

/// Builds one codec from a numcodecs configuration object.
fn codec_from_v2(value: &Value, element_size: usize) -> Result<Box<dyn Codec>> {
    let obj = value.as_object().ok_or_else(|| Error::Codec {
        codec: "?".to_string(),
        reason: format!("codec configuration is not an object: {value}"),
    })?;
    let id = obj
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| Error::Codec {
            codec: "?".to_string(),
            reason: format!("codec configuration without a string \"id\": {value}"),
        })?;
    let cfg = Config { id, params: obj };
    Ok(match id {
        "zlib" => Box::new(Zlib::from_config(&cfg)?),
        "gzip" => Box::new(Gzip::from_config(&cfg)?),
        "zstd" => Box::new(Zstd::from_config(&cfg)?),
        "bz2" => Box::new(Bz2::from_config(&cfg)?),
        "lz4" => Box::new(Lz4::from_config(&cfg)?),
        "blosc" => Box::new(Blosc::from_config(&cfg, element_size)?),
        "shuffle" => Box::new(Shuffle::from_config(&cfg, element_size)?),
        "fletcher32" | "crc32c" | "crc32" | "adler32" => Box::new(Checksum::from_config(&cfg)?),
        _ => {
            return Err(Error::UnknownCodec {
                name: id.to_string(),
            })
        }
    })
}

/// The parameters of one codec configuration, with lenient number parsing: netcdf-c and
/// hand-written metadata sometimes quote numbers (`"elementsize": "4"`).
#[derive(Debug, Clone, Copy)]
pub struct Config<'a> {
    /// The codec id (v2) or name (v3), for error messages.
    pub id: &'a str,
    /// The parameters (for v2, the whole object including `id`).
    pub params: &'a Map<String, Value>,
}

impl Config<'_> {
    /// An error naming this codec.
    pub fn error(&self, reason: impl Into<String>) -> Error {
        Error::Codec {
            codec: self.id.to_string(),
            reason: reason.into(),
        }
    }

    /// An error naming this codec, for an integer parameter outside the values it takes.
    pub fn out_of_range(&self, reason: impl Into<String>) -> Error {
        Error::CodecOutOfRange {
            codec: self.id.to_string(),
            reason: reason.into(),
        }
    }

    /// An integer parameter; `None` when absent or `null`.
    pub fn opt_int(&self, key: &str) -> Result<Option<i64>> {
        let v = match self.params.get(key) {
            None | Some(Value::Null) => return Ok(None),
            Some(v) => v,
        };
        let n = match v {
            Value::Number(n) => n.as_i64().or_else(|| {
                // 4.0 is an integer written by a float formatter; 4.5 is not.
                n.as_f64()
                    .filter(|f| f.fract() == 0.0 && f.abs() < 9.0e15)
                    .map(|f| f as i64)
            }),
            Value::String(s) => s.trim().parse::<i64>().ok(),
            Value::Bool(b) => Some(i64::from(*b)),
            _ => None,
        };
        n.map(Some).ok_or_else(|| {
            self.error(format!(
                "parameter {} is not an integer: {}",
                quoted(key),
                capped(&v.to_string())
            ))
        })
    }

    /// An integer parameter within `range`, `default` when absent.
    pub fn int_in(
        &self,
        key: &str,
        default: i64,
        range: std::ops::RangeInclusive<i64>,
    ) -> Result<i64> {
        let n = self.opt_int(key)?.unwrap_or(default);
        self.within(key, n, range)
    }

    /// `n`, the value of parameter `key`, or the error naming `range` when outside it.
    fn within(&self, key: &str, n: i64, range: std::ops::RangeInclusive<i64>) -> Result<i64> {
        if !range.contains(&n) {
            return Err(self.out_of_range(format!(
                "parameter {} = {n} is outside {}..={}",
                quoted(key),
                range.start(),
                range.end()
            )));
        }
        Ok(n)
    }

    /// A parameter numcodecs hands to a Cython `int` (a zstd level, lz4's acceleration,
    /// blosc's `clevel`, `shuffle` and `blocksize`), made one as Python makes it: an integer
    /// or a boolean as it is, a float truncated towards zero (`5.7` is 5, `-3.7` is -3, as
    /// `int()` truncates), `default` when absent. A string, `null`, a list or an object is
    /// a TypeError there ("an integer is required") and a value beyond a C `int` an
    /// OverflowError: both are errors here.
    pub fn c_int(&self, key: &str, default: i64) -> Result<i64> {
        let c_int_range = i64::from(std::os::raw::c_int::MIN)..=i64::from(std::os::raw::c_int::MAX);
        let n = match self.params.get(key) {
            None => return Ok(default),
            Some(Value::Bool(b)) => i64::from(*b),
            Some(Value::Number(n)) => match n.as_i64() {
                Some(n) => n,
                None => {
                    let truncated = n.as_f64().unwrap_or(f64::NAN).trunc();
                    // A u64 beyond i64 or a float beyond a C int fails here, as it does the
                    // range check below.
                    if !(truncated >= *c_int_range.start() as f64
                        && truncated <= *c_int_range.end() as f64)
                    {
                        return Err(self.out_of_range(format!(
                            "parameter {} = {n} is outside {}..={}",
                            quoted(key),
                            c_int_range.start(),
                            c_int_range.end()
                        )));
                    }
                    truncated as i64
                }
            },
            Some(v) => {
                return Err(self.error(format!(
                    "parameter {} is not an integer: {}",
                    quoted(key),
                    capped(&v.to_string())
                )))
            }
        };
        self.within(key, n, c_int_range)
    }

    /// An integer parameter within `range` that only encoding uses, which numcodecs passes
    /// to a Python function that takes only an integer (`zlib.compress`'s level): a value
    /// that is not one is kept as the reason encoding fails. A JSON integer or
    /// boolean, `default` when absent; `null`, a string or a float (`5.0`) is refused for
    /// encoding, as Python refuses it there ("'float' object cannot be interpreted as an
    /// integer").
    pub fn encoding_strict_int_in(
        &self,
        key: &str,
        default: i64,
        range: std::ops::RangeInclusive<i64>,
    ) -> EncodingParam<i64> {
        let strict = match self.params.get(key) {
            None => Ok(()),
            Some(Value::Bool(_)) => Ok(()),
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => Ok(()),
            Some(v) => Err(self.error(format!(
                "parameter {} is not an integer: {}",
                quoted(key),
                capped(&v.to_string())
            ))),
        };
        EncodingParam::from(strict.and_then(|()| self.int_in(key, default, range)))
    }

    /// A parameter's truth value as Python takes it (numcodecs' `bool(checksum)`): `null`,
    /// `false`, 0, `""`, `[]` and `{}` are false, any other value true; `default` when absent.
    pub fn truth(&self, key: &str, default: bool) -> bool {
        match self.params.get(key) {
            None => default,
            Some(Value::Null) => false,
            Some(Value::Bool(b)) => *b,
            Some(Value::Number(n)) => n.as_f64().is_some_and(|f| f != 0.0),
            Some(Value::String(s)) => !s.is_empty(),
            Some(Value::Array(a)) => !a.is_empty(),
            Some(Value::Object(o)) => !o.is_empty(),
        }
    }

    /// A string parameter, `default` when absent.
    pub fn string<'s>(&'s self, key: &str, default: &'s str) -> Result<&'s str> {
        match self.params.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(Value::String(s)) => Ok(s),
            Some(v) => Err(self.error(format!(
                "parameter {} is not a string: {}",
                quoted(key),
                capped(&v.to_string())
            ))),
        }
    }
}

/// A parameter that only encoding uses: a compression level, blosc's compressor and block
/// size, zstd's checksum flag. Chunks decode the same whatever it says (a compressed stream
/// or blosc's header records what decoding needs), so a value the codec cannot compress
/// with does not stop reading: numcodecs builds such a codec and fails only when it
/// compresses, and so does a codec here, with [`EncodingParam::get`].
#[derive(Debug, Clone)]
pub struct EncodingParam<T>(std::result::Result<T, EncodingParamError>);

/// Why an [`EncodingParam`] cannot be used: the codec and the reason of its
/// [`Error::Codec`], or [`Error::CodecOutOfRange`] when `out_of_range`.
#[derive(Debug, Clone)]
struct EncodingParamError {
    codec: String,
    reason: String,
    out_of_range: bool,
}

impl<T> EncodingParam<T> {
    /// The value, or the [`Error::Codec`] naming the codec, the parameter and the values it
    /// may take.
    pub fn get(&self) -> Result<&T> {
        self.0.as_ref().map_err(|e| e.clone().into_error())
    }

    /// The value made into another, or this parameter's error.
    pub fn map<U>(self, f: impl FnOnce(T) -> Result<U>) -> EncodingParam<U> {
        EncodingParam::from(self.0.map_err(EncodingParamError::into_error).and_then(f))
    }
}

impl EncodingParamError {
    fn into_error(self) -> Error {
        let (codec, reason) = (self.codec, self.reason);
        match self.out_of_range {
            true => Error::CodecOutOfRange { codec, reason },
            false => Error::Codec { codec, reason },
        }
    }
}

impl<T> From<Result<T>> for EncodingParam<T> {
    fn from(parsed: Result<T>) -> Self {
        EncodingParam(parsed.map_err(|e| match e {
            Error::Codec { codec, reason } => EncodingParamError {
                codec,
                reason,
                out_of_range: false,
            },
            Error::CodecOutOfRange { codec, reason } => EncodingParamError {
                codec,
                reason,
                out_of_range: true,
            },
            other => EncodingParamError {
                codec: "?".to_string(),
                reason: other.to_string(),
                out_of_range: false,
            },
        }))
    }
}

/// The error of a decoder whose output would exceed its bound.
pub(crate) fn too_large(codec: &str, max_len: usize) -> Error {
    Error::Codec {
        codec: codec.to_string(),
        reason: format!("decoded data exceeds the expected {max_len} bytes"),
    }
}

/// A generous worst case of any of the compressors' output for `n` input bytes (zlib, gzip,
/// bzip2, zstd, lz4 and blosc all stay under `n + n/64 + 1024`).
pub(crate) fn compressed_bound(n: usize) -> usize {
    n.saturating_add(n / 64).saturating_add(1024)
}

/// Reads a decompressing reader to its end, failing once it yields more than `limit` bytes.
/// `limit == usize::MAX` means unbounded.
pub(crate) fn read_bounded(
    reader: impl std::io::Read,
    codec: &str,
    limit: usize,
    input_len: usize,
) -> Result<Vec<u8>> {
    use std::io::Read;
    // A known bound is usually the exact size; otherwise guess a typical compression ratio.
    let capacity = if limit == usize::MAX {
        input_len.saturating_mul(4).max(4096)
    } else {
        limit
    };
    let mut out = Vec::with_capacity(capacity);
    let take = u64::try_from(limit).unwrap_or(u64::MAX).saturating_add(1);
    reader
        .take(take)
        .read_to_end(&mut out)
        .map_err(|e| Error::Codec {
            codec: codec.to_string(),
            reason: e.to_string(),
        })?;
    if out.len() > limit {
        return Err(too_large(codec, limit));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn encode_with_scratch_matches_encode() {
        let data: Vec<u8> = (0..50_000u32)
            .flat_map(|i| ((i / 7) as f32).to_le_bytes())
            .collect();
        let chains = [
            (
                vec![json!({"id": "shuffle", "elementsize": 4})],
                Some(json!({"id": "zlib", "level": 1})),
            ),
            (vec![], Some(json!({"id": "zstd", "level": 3}))),
            (vec![json!({"id": "shuffle", "elementsize": 4})], None),
            (vec![], None),
        ];
        let mut scratch = [Vec::new(), vec![7u8; 3]];
        for (filters, compressor) in chains {
            let p = Pipeline::from_v2(&filters, compressor.as_ref(), 4).unwrap();
            let want = p.encode(data.clone()).unwrap();
            // Twice: the second time over buffers holding the first result.
            for _ in 0..2 {
                let got = p.encode_with(&data, &mut scratch).unwrap();
                assert_eq!(got, &want[..], "{filters:?} {compressor:?}");
            }
            assert_eq!(p.decode(want).unwrap(), data);
        }
    }

    #[test]
    fn unknown_codec_is_reported_at_build_time() {
        let err = Pipeline::from_v2(&[json!({"id": "szip", "mask": 32})], None, 4).unwrap_err();
        assert!(matches!(err, Error::UnknownCodec { ref name } if name == "szip"));
    }

    #[test]
    fn malformed_entries_are_codec_errors() {
        for bad in [json!("zlib"), json!({"level": 1}), json!({"id": 3})] {
            let err = Pipeline::from_v2(&[], Some(&bad), 4).unwrap_err();
            assert!(matches!(err, Error::Codec { .. }), "{bad}: {err}");
        }
        // A shuffle's element size is needed to decode: a bad one refuses the chain.
        let err = Pipeline::from_v2(&[json!({"id": "shuffle", "elementsize": -1})], None, 4);
        assert!(matches!(err, Err(Error::CodecOutOfRange { ref codec, .. }) if codec == "shuffle"));
    }

    #[test]
    fn a_level_only_encoding_uses_refuses_encoding_but_not_decoding() {
        // numcodecs 0.16.6 builds Zlib(level=15), BZ2(level=0) and GZip(level=15), decodes
        // with them, and fails to encode ("Bad compression level", "compresslevel must be
        // between 1 and 9"): zarr-python reads such a store and cannot write it.
        let data: Vec<u8> = (0..3000u32).flat_map(|i| (i % 11).to_le_bytes()).collect();
        for (bad, good, says) in [
            (
                json!({"id": "zlib", "level": 15}),
                json!({"id": "zlib"}),
                "= 15 is outside -1..=9",
            ),
            (
                json!({"id": "zlib", "level": -2}),
                json!({"id": "zlib"}),
                "= -2 is outside -1..=9",
            ),
            (
                json!({"id": "zlib", "level": "x"}),
                json!({"id": "zlib"}),
                "is not an integer",
            ),
            (
                json!({"id": "gzip", "level": 15}),
                json!({"id": "gzip"}),
                "= 15 is outside -1..=9",
            ),
            (
                json!({"id": "bz2", "level": 0}),
                json!({"id": "bz2"}),
                "= 0 is outside 1..=9",
            ),
            (
                json!({"id": "bz2", "level": 10}),
                json!({"id": "bz2"}),
                "= 10 is outside 1..=9",
            ),
            (
                json!({"id": "zlib", "level": "5"}),
                json!({"id": "zlib"}),
                "\"level\" is not an integer",
            ),
            (
                json!({"id": "zlib", "level": 5.0}),
                json!({"id": "zlib"}),
                "\"level\" is not an integer",
            ),
            (
                json!({"id": "gzip", "level": null}),
                json!({"id": "gzip"}),
                "\"level\" is not an integer",
            ),
            (
                json!({"id": "zstd", "level": "high"}),
                json!({"id": "zstd"}),
                "\"level\" is not an integer",
            ),
            (
                json!({"id": "lz4", "acceleration": 1u64 << 40}),
                json!({"id": "lz4"}),
                "\"acceleration\" = 1099511627776 is outside",
            ),
        ] {
            let id = bad["id"].as_str().unwrap().to_string();
            let stored = Pipeline::from_v2(&[], Some(&good), 4)
                .unwrap()
                .encode(data.clone())
                .unwrap();
            let p = Pipeline::from_v2(&[], Some(&bad), 4).unwrap();
            assert_eq!(
                p.decode_expect(stored.clone(), data.len()).unwrap(),
                data,
                "{bad}"
            );
            let mut out = vec![0u8; data.len()];
            p.decode_into(&stored, &mut out, &mut Default::default())
                .unwrap();
            assert_eq!(out, data, "{bad}");
            let mut scratch = Default::default();
            let refusals = [
                p.check_encodable(),
                p.encode(data.clone()).map(|_| ()),
                p.encode_with(&data, &mut scratch).map(|_| ()),
            ];
            for err in refusals {
                match err {
                    Err(
                        Error::Codec { codec, reason } | Error::CodecOutOfRange { codec, reason },
                    ) => {
                        assert_eq!(codec, id);
                        assert!(reason.contains(says), "{bad}: {reason}");
                    }
                    other => panic!("{bad}: {other:?}"),
                }
            }
            assert!(Pipeline::from_v2(&[], Some(&good), 4)
                .unwrap()
                .check_encodable()
                .is_ok());
        }
        // Zarr v3 spellings go through the same codecs.
        let v3 = [json!({"name": "gzip", "configuration": {"level": 15}})];
        let p = Pipeline::from_v3(&v3, 4).unwrap();
        assert!(matches!(
            p.check_encodable(),
            Err(Error::CodecOutOfRange { .. })
        ));
    }

    #[test]
    fn null_compressor_and_empty_filters_are_identity() {
        let p = Pipeline::from_v2(&[], Some(&Value::Null), 8).unwrap();
        assert!(p.is_empty());
        let data = vec![1u8, 2, 3];
        assert_eq!(p.encode(data.clone()).unwrap(), data);
        assert_eq!(p.decode_expect(data.clone(), 3).unwrap(), data);
        assert!(matches!(
            p.decode_expect(data, 4),
            Err(Error::Codec { ref codec, .. }) if codec == "null"
        ));
    }

    #[test]
    fn netcdf_c_chain_round_trips() {
        // What netcdf-c 4.10.1 writes for shuffle + deflate + fletcher32 on an int variable.
        let filters = [
            json!({"id": "shuffle", "elementsize": 0}),
            json!({"id": "zlib", "level": 4}),
        ];
        let p = Pipeline::from_v2(&filters, Some(&json!({"id": "fletcher32"})), 4).unwrap();
        assert_eq!(p.ids(), ["shuffle", "zlib", "fletcher32"]);
        let data: Vec<u8> = (0u32..1000).flat_map(|i| i.to_le_bytes()).collect();
        let enc = p.encode(data.clone()).unwrap();
        assert!(enc.len() < data.len() / 4);
        assert_eq!(p.decode_expect(enc.clone(), data.len()).unwrap(), data);
        assert_eq!(p.decode(enc.clone()).unwrap(), data);
        assert!(p.decode_expect(enc, data.len() - 1).is_err());
    }

    #[test]
    fn from_spec_dispatches() {
        let v2 = CodecSpec::V2 {
            filters: vec![json!({"id": "shuffle", "elementsize": 0})],
            compressor: Some(json!({"id": "zstd", "level": 1})),
        };
        assert_eq!(
            Pipeline::from_spec(&v2, 8).unwrap().ids(),
            ["shuffle", "zstd"]
        );
        let v3 = CodecSpec::V3(vec![json!({"name": "bytes"}), json!({"name": "gzip"})]);
        assert_eq!(Pipeline::from_spec(&v3, 8).unwrap().ids(), ["gzip"]);
        assert!(Pipeline::from_spec(&CodecSpec::default(), 8)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn v3_chains() {
        // zarr-python 3 defaults and the netcdf-c draft's spelling of bzip2.
        let codecs = [
            json!({"name": "bytes", "configuration": {"endian": "little"}}),
            json!({"name": "blosc", "configuration": {"cname": "zstd", "clevel": 5,
                   "shuffle": "bitshuffle", "typesize": 4, "blocksize": 0}}),
            json!({"name": "bz2", "configuration": {"level": 9}}),
            json!({"name": "numcodecs.fletcher32"}),
            json!({"name": "crc32c"}),
        ];
        let p = Pipeline::from_v3(&codecs, 4).unwrap();
        assert_eq!(p.ids(), ["blosc", "bz2", "fletcher32", "crc32c"]);
        let data: Vec<u8> = (0u32..500).flat_map(|i| i.to_le_bytes()).collect();
        let enc = p.encode(data.clone()).unwrap();
        assert_eq!(p.decode_expect(enc, data.len()).unwrap(), data);

        let t = [json!({"name": "transpose", "configuration": {"order": [0, 1]}})];
        assert!(Pipeline::from_v3(&t, 4).unwrap().is_empty());
        let t = [json!({"name": "transpose", "configuration": {"order": [1, 0]}})];
        assert!(matches!(
            Pipeline::from_v3(&t, 4),
            Err(Error::Unsupported(_))
        ));
        let u = [json!({"name": "noop", "configuration": {"hdf5raw": "1"}})];
        assert!(matches!(
            Pipeline::from_v3(&u, 4),
            Err(Error::UnknownCodec { ref name }) if name == "noop"
        ));
    }

    #[test]
    fn v3_configurations_zarr_python_refuses_are_read_and_not_written() {
        // zarr-python 3.1.6 opens no array with these (TypeError or ValueError from its
        // BloscCodec, ZstdCodec and GzipCodec); their chunks decode all the same.
        let data: Vec<u8> = (0u32..500).flat_map(|i| (i % 7).to_le_bytes()).collect();
        for config in [
            json!({"name": "blosc", "configuration": {"shuffle": "twice"}}),
            json!({"name": "blosc", "configuration": {"shuffle": 1}}),
            json!({"name": "blosc", "configuration": {"clevel": 5.5}}),
            json!({"name": "blosc", "configuration": {"clevel": null}}),
            json!({"name": "blosc", "configuration": {"blocksize": "0"}}),
            json!({"name": "blosc", "configuration": {"typesize": 0}}),
            json!({"name": "blosc", "configuration": {"typesize": 4.0}}),
            json!({"name": "blosc", "configuration": {"cname": "LZ4"}}),
            json!({"name": "blosc", "configuration": {"cname": null}}),
            json!({"name": "blosc", "configuration": {"level": 5}}),
            json!({"name": "zstd", "configuration": {"level": 5.5}}),
            json!({"name": "zstd", "configuration": {"level": 23}}),
            json!({"name": "zstd", "configuration": {"level": "3"}}),
            json!({"name": "zstd", "configuration": {"checksum": 1}}),
            json!({"name": "gzip", "configuration": {"level": -1}}),
            json!({"name": "gzip", "configuration": {"level": 5.0}}),
        ] {
            let name = config["name"].as_str().unwrap();
            let good = Pipeline::from_v3(&[json!({"name": name})], 4).unwrap();
            let stored = good.encode(data.clone()).unwrap();
            let p = Pipeline::from_v3(std::slice::from_ref(&config), 4).unwrap();
            assert_eq!(p.ids(), [name]);
            assert_eq!(p.decode_expect(stored.clone(), data.len()).unwrap(), data);
            let mut out = vec![0u8; data.len()];
            p.decode_into(&stored, &mut out, &mut Default::default())
                .unwrap();
            assert_eq!(out, data, "{config}");
            assert!(
                matches!(p.check_encodable(), Err(Error::Codec { ref codec, .. }
                    | Error::CodecOutOfRange { ref codec, .. }) if codec == name),
                "{config}"
            );
            assert!(p.encode(data.clone()).is_err(), "{config}");
        }
        // Python's bool is an int: zarr-python takes these.
        for config in [
            json!({"name": "blosc", "configuration": {"clevel": true, "typesize": null,
                                                      "shuffle": null}}),
            json!({"name": "zstd", "configuration": {"level": -5, "checksum": false}}),
            json!({"name": "gzip", "configuration": {"level": true}}),
        ] {
            let p = Pipeline::from_v3(std::slice::from_ref(&config), 4).unwrap();
            p.check_encodable().unwrap();
            let enc = p.encode(data.clone()).unwrap();
            assert_eq!(p.decode(enc).unwrap(), data, "{config}");
        }
    }

    #[test]
    fn v3_blosc_leaves_out_what_zarr_python_fills_in() {
        // zarr-python 3.1.6 opens a v3 blosc without cname, shuffle and typesize as
        // BloscCodec(cname="zstd", shuffle="shuffle", typesize=4) on <i4 data: its chunk
        // header starts 02 01 91 04 (format 2, zstd in the top bits of the flags, byte
        // shuffle, type size 4); on 1-byte data it bit-shuffles.
        let data: Vec<u8> = (0u32..500).flat_map(|i| (i % 7).to_le_bytes()).collect();
        let p = Pipeline::from_v3(&[json!({"name": "blosc", "configuration": {}})], 4).unwrap();
        let enc = p.encode(data.clone()).unwrap();
        assert_eq!(enc[2] >> 5, 4, "zstd");
        assert_eq!(enc[2] & 0x5, 0x1, "byte shuffle");
        assert_eq!(enc[3], 4);
        let p = Pipeline::from_v3(&[json!({"name": "blosc"})], 1).unwrap();
        let enc = p.encode(data.clone()).unwrap();
        assert_eq!(enc[2] & 0x5, 0x4, "bit shuffle");
        assert_eq!(p.decode(enc).unwrap(), data);
        // The shuffle follows the data type, not a type size the configuration gives:
        // zarr-python 3.1.6 opens {"typesize": 1} on int32 data with shuffle "shuffle", and
        // {"typesize": 4} on uint8 data with "bitshuffle".
        let config = |t: u32| [json!({"name": "blosc", "configuration": {"typesize": t}})];
        let enc = Pipeline::from_v3(&config(1), 4)
            .unwrap()
            .encode(data.clone());
        assert_eq!(enc.unwrap()[2] & 0x5, 0x1, "byte shuffle");
        let enc = Pipeline::from_v3(&config(4), 1)
            .unwrap()
            .encode(data.clone());
        assert_eq!(enc.unwrap()[2] & 0x5, 0x4, "bit shuffle");
        // numcodecs.blosc keeps numcodecs' defaults: lz4, byte shuffle.
        let p = Pipeline::from_v3(&[json!({"name": "numcodecs.blosc"})], 1).unwrap();
        let enc = p.encode(data).unwrap();
        assert_eq!((enc[2] >> 5, enc[2] & 0x5), (1, 0x1));
    }

    #[test]
    fn shuffle_without_elementsize_is_numcodecs_default_on_v2_and_the_type_size_on_v3() {
        // [1.5, -2.25, 3.0, 1e10] as <f8, and numcodecs.get_codec({"id": "shuffle"}) (element
        // size 4) applied to it by numcodecs 0.16.6.
        let values: Vec<u8> = [1.5f64, -2.25, 3.0, 1e10]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let numcodecs_default = [
            0, 0, 0, 0, 0, 0, 0, 95, 0, 0, 0, 0, 0, 0, 0, 160, 0, 248, 0, 2, 0, 8, 0, 2, 0, 63, 0,
            192, 0, 64, 32, 66,
        ];
        let v2 = Pipeline::from_v2(&[json!({"id": "shuffle"})], None, 8).unwrap();
        assert_eq!(v2.decode(numcodecs_default.to_vec()).unwrap(), values);
        // netcdf-c's explicit 0 is the type size.
        let zero = Pipeline::from_v2(&[json!({"id": "shuffle", "elementsize": 0})], None, 8);
        let by_type = Shuffle::new(8).encode(values.clone()).unwrap();
        assert_eq!(zero.unwrap().decode(by_type.clone()).unwrap(), values);
        let v3 = Pipeline::from_v3(&[json!({"name": "numcodecs.shuffle"})], 8).unwrap();
        assert_eq!(v3.decode(by_type).unwrap(), values);
    }

    #[test]
    fn unknown_codecs_are_named() {
        let delta = json!({"id": "delta", "dtype": "<f8"});
        let v2 = CodecSpec::V2 {
            filters: vec![delta.clone()],
            compressor: Some(json!({"id": "zlib", "level": 1})),
        };
        assert_eq!(unknown_codec(&v2).as_deref(), Some("delta"));
        let strings = CodecSpec::V2 {
            filters: vec![json!({"id": "vlen-utf8"})],
            compressor: Some(json!({"id": "zlib", "level": 1})),
        };
        assert_eq!(unknown_codec(&strings), None);
        let bad_level = CodecSpec::V2 {
            filters: vec![],
            compressor: Some(json!({"id": "zlib", "level": 99})),
        };
        assert_eq!(unknown_codec(&bad_level), None);
        let sharded = CodecSpec::V3(vec![json!({"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2],
            "codecs": [{"name": "bytes"}, {"name": "numcodecs.delta",
                        "configuration": {"dtype": "<f8"}}],
            "index_codecs": [{"name": "bytes"}, {"name": "crc32c"}]}})]);
        assert_eq!(unknown_codec(&sharded).as_deref(), Some("delta"));
        let known = CodecSpec::V3(vec![
            json!({"name": "transpose", "configuration": {"order": [1, 0]}}),
            json!({"name": "vlen-utf8"}),
            json!({"name": "zstd", "configuration": {"level": 0}}),
        ]);
        assert_eq!(unknown_codec(&known), None);
    }

    #[test]
    fn quoted_and_float_integers_are_accepted() {
        let obj = json!({"id": "x", "a": "4", "b": 4.0, "c": 4.5, "d": [1]});
        let cfg = Config {
            id: "x",
            params: obj.as_object().unwrap(),
        };
        assert_eq!(cfg.opt_int("a").unwrap(), Some(4));
        assert_eq!(cfg.opt_int("b").unwrap(), Some(4));
        assert!(cfg.opt_int("c").is_err());
        assert!(cfg.opt_int("d").is_err());
        assert_eq!(cfg.opt_int("missing").unwrap(), None);
    }
}
