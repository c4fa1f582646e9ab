//! Writing a [`Dataset`]'s metadata as Zarr v3 `zarr.json` objects, in either dialect, and
//! translating codec chains between Zarr v2 (numcodecs objects) and Zarr v3 (named codecs).
//!
//! - **Groups**: `{"zarr_format": 3, "node_type": "group", "attributes": {...}}`.
//! - **Arrays**: `shape` (the variable's current shape; a scalar is `[]`), `data_type`
//!   (`int8`…`float64`, `bool`; `char` as `uint8` with NCZarr's `type_alias` `"char"`;
//!   strings as `fixed_length_utf32`), a `regular` chunk grid, the `default` chunk key
//!   encoding with separator `/`, `fill_value` (`"NaN"`, `"Infinity"`, `"-Infinity"` for the
//!   special floats, hex bits for a NaN with a payload), `codecs` (`bytes` with the byte
//!   order, then the bytes-to-bytes codecs) and `dimension_names`.
//! - **NCZarr** adds, as the netcdf-c draft (PR #3068) does: in the root's attributes
//!   `_nczarr_superblock`; in every group's `_nczarr_group` (`dimensions` as
//!   `{"name": {"size": N, "unlimited": 0|1}}`, `arrays`, `groups`); in every array's
//!   `_nczarr_array` (`dimension_references`, `storage`, `type_alias` for `char` and
//!   `string`); and everywhere `_nczarr_attrs` `{"attribute_types": {name: type}}` with the
//!   v3 type names plus `char`, `string` and `json`. docs/zarr-v3.md lists where this differs
//!   from the draft.
//!
//! The chunk bytes of a chain are the same whether it is spelled as Zarr v2 or v3, so a
//! variable's [`CodecSpec::V2`] is what the chunk engine encodes with, and this writer spells
//! it the v3 way ([`codecs_v3`]).

use serde_json::{json, Map, Value};

use super::attrs;
use super::json::Json;
use super::stored::{json_fingerprint, Rewrite, StoredMetadata, STORAGE_TRANSFORMERS};
use super::writer::WriteOptions;
use super::writer::{
    attr_json, bare_floats, base64, check_text_is_utf8, default_dtype, f32_as_f64, float_json,
    Dialect, Utf8Text,
};
use crate::error::quoted;
use crate::model::{
    AttrValue, Attribute, ByteOrder, ChunkKeyEncoding, CodecSpec, Dataset, DtypeKind, GroupId,
    NcType, VarId, ZarrDtype,
};
use crate::zmap::{join_key, ZMap, METADATA_LIMIT};
use crate::{Error, Result};

/// The version written in `_nczarr_superblock` on Zarr v3.
pub const NCZARR_V3_VERSION: &str = "3.0.0";

/// The metadata object of every node.
const NODE: &str = "zarr.json";

/// Writes every `zarr.json` of `ds` to `map` (chunks are the chunk engine's business).
pub fn write_metadata(map: &dyn ZMap, ds: &Dataset, opts: &WriteOptions) -> Result<()> {
    write_changed_metadata(map, ds, opts, &mut StoredMetadata::nothing())
}

/// Writes the `zarr.json` objects of `ds` that differ from what `stored` says `map` holds
/// (see [`super::writer::write_changed_metadata`]).
pub fn write_changed_metadata(
    map: &dyn ZMap,
    ds: &Dataset,
    opts: &WriteOptions,
    stored: &mut StoredMetadata,
) -> Result<()> {
    let mut objects = metadata_objects(ds, opts)?;
    let rewrite = match opts.dialect {
        Dialect::Zarr => keep_stored_json(map, &mut objects, opts.consolidated, stored)?,
        Dialect::NcZarr => Rewrite::default(),
    };
    super::writer::put_objects(map, objects, stored, rewrite)
}

/// Pure Zarr attributes are untyped JSON that a netCDF value cannot always spell back (`true`
/// reads as the ubyte 1; an object, `null` or a list of mixed values as its text), and an
/// array without `dimension_names`, or with `null` among them, reads with anonymous
/// dimensions that the model names: when the metadata is rewritten, an attribute, and
/// `dimension_names`, whose stored JSON still reads as what is about to be written keeps that
/// JSON, as on Zarr v2. The root of a `consolidated` dataset then copies every other node.
///
/// As on Zarr v2, only the nodes `stored` does not tell enough about are read (every rewrite
/// used to read every node). The root of a consolidated dataset is read with any other node
/// read: that node may change, and with it the root's copy.
fn keep_stored_json(
    map: &dyn ZMap,
    objects: &mut [(String, Value)],
    consolidated: bool,
    stored: &StoredMetadata,
) -> Result<Rewrite> {
    let mut rewrite = Rewrite::default();
    // Once consolidated again, the root's JSON is known only after the other nodes are kept.
    let summarized = if consolidated { 1 } else { 0 };
    let mut unread: Vec<String> = Vec::new();
    for (key, node) in &objects[summarized..] {
        let accepts = json_fingerprint(node);
        if stored.must_read_to_keep(key, accepts, consolidated) {
            unread.push(key.clone());
        }
        rewrite.accepts.insert(key.clone(), accepts);
    }
    if let Some((root, node)) = objects.first().filter(|_| consolidated) {
        if !unread.is_empty() || stored.must_read_to_keep(root, json_fingerprint(node), false) {
            unread.push(root.clone());
        }
    }
    for (key, found) in unread
        .iter()
        .zip(map.get_many_metadata(&unread, METADATA_LIMIT))
    {
        rewrite.read.insert(key.clone(), found?);
    }
    for (key, node) in objects[summarized..].iter_mut() {
        keep_node(key, node, &rewrite);
    }
    if consolidated {
        consolidate(objects);
        if let Some((root, node)) = objects.first_mut() {
            rewrite.accepts.insert(root.clone(), json_fingerprint(node));
            keep_node(root, node, &rewrite);
        }
    }
    Ok(rewrite)
}

/// Keeps the stored JSON of `node`'s attributes and dimension names (see
/// [`keep_stored_json`]), when the stored node was read.
fn keep_node(key: &str, node: &mut Value, rewrite: &Rewrite) {
    let Some(Some(bytes)) = rewrite.read.get(key) else {
        return;
    };
    // An unreadable old object has nothing worth keeping: the new one replaces it.
    let (Ok(old @ Json::Obj(_)), Value::Object(node)) = (Json::parse(key, bytes), node) else {
        return;
    };
    if let (Some(old_attrs), Some(Value::Object(new_attrs))) =
        (old.get("attributes"), node.get_mut("attributes"))
    {
        for (name, v) in new_attrs.iter_mut() {
            let Some(old_v) = old_attrs.get(name) else {
                continue;
            };
            let reads_as = attrs::infer(key, name, old_v)
                .ok()
                .map(|value| attr_value_json(&value, Dialect::Zarr));
            if reads_as.as_ref() == Some(v) {
                *v = old_v.to_serde_keeping_bare_tokens();
            }
        }
    }
    keep_dimension_names(node, &old);
    // An empty `storage_transformers` means the same as none (see `leave_out_implied`): a
    // node written again keeps zarr-python's spelling of it.
    if let Some(Json::Arr(t)) = old.get(STORAGE_TRANSFORMERS) {
        if t.is_empty() && node.get("node_type") == Some(&json!("array")) {
            node.insert(STORAGE_TRANSFORMERS.into(), json!([]));
        }
    }
}

/// Keeps the stored `dimension_names` of an array node (absent, `null`, or a list with `null`
/// or unusable names) when it reads as the names about to be written.
fn keep_dimension_names(node: &mut Map<String, Value>, old: &Json) {
    let (Some(Value::Array(names)), Some(Value::Array(shape))) =
        (node.get("dimension_names"), node.get("shape"))
    else {
        return;
    };
    let stored = old.get("dimension_names");
    let listed = super::v3::listed_dimension_names(stored, names.len());
    let same = names.iter().zip(shape).enumerate().all(|(i, (name, len))| {
        let reads_as = match (listed.get(i).cloned().flatten(), len.as_u64()) {
            (Some(listed), _) => listed,
            (None, Some(len)) => super::v3::anonymous_dim_name(len),
            (None, None) => return false,
        };
        name.as_str() == Some(reads_as.as_str())
    });
    if !same {
        return;
    }
    match stored {
        None => {
            node.remove("dimension_names");
        }
        Some(j) => {
            node.insert("dimension_names".into(), j.to_serde());
        }
    }
}

/// The `zarr.json` objects of `ds` as `(key, JSON)` pairs, groups in pre-order, each group
/// followed by its arrays. When consolidated, the root's object (first) carries everything
/// else inline, as zarr-python 3 writes it.
pub fn metadata_objects(ds: &Dataset, opts: &WriteOptions) -> Result<Vec<(String, Value)>> {
    if opts.dialect == Dialect::Zarr {
        super::writer::check_dimension_names_hold(ds, "dimension_names")?;
        check_text_is_utf8(ds, Utf8Text::PureZarr)?;
    } else {
        check_text_is_utf8(ds, Utf8Text::NcZarrV3)?;
    }
    let mut out = Vec::new();
    for g in ds.groups_preorder() {
        let prefix = ds.group_path(g).join("/");
        let node = json!({
            "zarr_format": 3,
            "node_type": "group",
            "attributes": Value::Object(group_attributes(ds, g, opts)),
        });
        out.push((join_key(&[&prefix, NODE]), node));
        for v in &ds.group(g).vars {
            out.push((
                join_key(&[&array_key(ds, *v), NODE]),
                array_node(ds, *v, opts)?,
            ));
        }
    }
    if opts.consolidated {
        consolidate(&mut out);
    }
    Ok(out)
}

/// Puts a copy of every other object into the root's (first) `consolidated_metadata`.
fn consolidate(objects: &mut [(String, Value)]) {
    let members: Map<String, Value> = objects
        .iter()
        .skip(1)
        .map(|(k, v)| {
            let path = k.strip_suffix(NODE).unwrap_or(k).trim_end_matches('/');
            (path.to_string(), v.clone())
        })
        .collect();
    if let Some((_, Value::Object(root))) = objects.first_mut() {
        root.insert(
            "consolidated_metadata".into(),
            json!({"kind": "inline", "must_understand": false, "metadata": members}),
        );
    }
}

/// The key prefix of a variable's array: its storage key, or its group path and name.
fn array_key(ds: &Dataset, v: VarId) -> String {
    let var = ds.var(v);
    if var.storage.key.is_empty() {
        join_key(&[&ds.group_path(var.group).join("/"), &var.name])
    } else {
        var.storage.key.clone()
    }
}

/// The stored dtype of a variable on Zarr v3: `char` as one byte, `string` as UCS-4 wide
/// enough for `string_width` bytes of UTF-8 (every character takes at least one of them;
/// NCZarr records the width as `_nczarr_array.maxstrlen`),
/// numbers as in Zarr v2; `big` stores multi-byte numbers big-endian.
pub fn v3_dtype(nctype: NcType, string_width: usize, big: bool) -> ZarrDtype {
    let mut d = match nctype {
        NcType::Char => ZarrDtype {
            order: ByteOrder::NotApplicable,
            kind: DtypeKind::Bytes,
            size: 1,
        },
        NcType::String => ZarrDtype {
            order: ByteOrder::Little,
            kind: DtypeKind::Unicode,
            size: string_width.max(1).saturating_mul(4),
        },
        t => default_dtype(t, 0, Dialect::Zarr),
    };
    if big && d.order == ByteOrder::Little {
        d.order = ByteOrder::Big;
    }
    d
}

/// The v3 `data_type` of a stored dtype, and NCZarr's `type_alias` when the netCDF type is
/// not the data type's own.
fn data_type(
    nctype: NcType,
    dtype: &ZarrDtype,
    dialect: Dialect,
    key: &str,
) -> Result<(Value, Option<&'static str>)> {
    let nczarr = dialect == Dialect::NcZarr;
    let name = match (dtype.kind, dtype.size) {
        (DtypeKind::Bool, 1) => "bool",
        (DtypeKind::Int, 1) => "int8",
        (DtypeKind::Int, 2) => "int16",
        (DtypeKind::Int, 4) => "int32",
        (DtypeKind::Int, 8) => "int64",
        (DtypeKind::UInt, 1) => "uint8",
        (DtypeKind::UInt, 2) => "uint16",
        (DtypeKind::UInt, 4) => "uint32",
        (DtypeKind::UInt, 8) => "uint64",
        (DtypeKind::Float, 2) => "float16",
        (DtypeKind::Float, 4) => "float32",
        (DtypeKind::Float, 8) => "float64",
        (DtypeKind::Bytes, 1) if nctype == NcType::Char && nczarr => {
            return Ok((json!("uint8"), Some("char")))
        }
        (DtypeKind::Bytes, n) => {
            let alias = (nczarr && nctype == NcType::String).then_some("string");
            let t = json!({"name": "null_terminated_bytes", "configuration": {"length_bytes": n}});
            return Ok((t, alias));
        }
        (DtypeKind::Unicode, n) => {
            let alias = (nczarr && nctype == NcType::String).then_some("string");
            let t = json!({"name": "fixed_length_utf32", "configuration": {"length_bytes": n}});
            return Ok((t, alias));
        }
        _ => {
            return Err(Error::meta(
                key,
                format!("dtype {} has no Zarr v3 data type", dtype.to_numpy()),
            ))
        }
    };
    Ok((json!(name), None))
}

/// The variable-length `data_type` (`string` or `bytes`) of an array whose v3 chain (or its
/// shards' inner chain) encodes with `vlen-utf8` or `vlen-bytes`: kept when such an array,
/// read from an existing store, has its metadata rewritten.
fn vlen_data_type(spec: &CodecSpec) -> Option<&'static str> {
    fn scan(list: &[Value]) -> Option<&'static str> {
        list.iter()
            .find_map(|c| match c.get("name").and_then(Value::as_str) {
                Some("vlen-utf8") => Some("string"),
                Some("vlen-bytes") => Some("bytes"),
                Some("sharding_indexed") => c
                    .pointer("/configuration/codecs")
                    .and_then(Value::as_array)
                    .and_then(|inner| scan(inner)),
                _ => None,
            })
    }
    match spec {
        CodecSpec::V3(list) => scan(list),
        CodecSpec::V2 { .. } => None,
    }
}

/// The `bytes` codec for `dtype`: its byte order when that matters.
fn bytes_codec(dtype: &ZarrDtype) -> Value {
    match dtype.order {
        ByteOrder::Big => json!({"name": "bytes", "configuration": {"endian": "big"}}),
        ByteOrder::Little => json!({"name": "bytes", "configuration": {"endian": "little"}}),
        ByteOrder::NotApplicable => json!({"name": "bytes"}),
    }
}

/// A codec chain spelled the Zarr v3 way for variable `var`, stored as `dtype`: a v3 chain
/// as it is; a v2 chain as `bytes` then each codec (`gzip`, `zstd`, `blosc`, `crc32c` by
/// their v3 names, every other numcodecs codec as `numcodecs.<id>`, which zarr-python 3
/// reads through numcodecs), each parameter in the form zarr-python 3 opens the array with
/// and meaning what numcodecs compresses with. A parameter numcodecs could not compress with
/// is [`Error::NoZarrV3Form`].
pub fn codecs_v3(spec: &CodecSpec, dtype: &ZarrDtype, var: &str) -> Result<Vec<Value>> {
    let (filters, compressor) = match spec {
        CodecSpec::V3(list) => return Ok(list.clone()),
        CodecSpec::V2 {
            filters,
            compressor,
        } => (filters, compressor),
    };
    let mut out = vec![bytes_codec(dtype)];
    for c in filters.iter().chain(compressor).filter(|c| !c.is_null()) {
        out.push(codec_to_v3(c, dtype.size).map_err(|e| match e {
            Error::Codec { codec, reason } | Error::CodecOutOfRange { codec, reason } => {
                Error::NoZarrV3Form {
                    var: var.to_string(),
                    codec,
                    reason,
                }
            }
            other => other,
        })?);
    }
    Ok(out)
}

/// One numcodecs object as a v3 codec. Every parameter is read as the numcodecs codec reads
/// it where it compresses (`crate::codec`), so the v3 codec compresses the same way:
/// zarr-python 3 takes only integers (a boolean or a float numcodecs makes a C `int` of is
/// written as that integer), and a `numcodecs.` codec's `configuration`, even an empty one.
fn codec_to_v3(c: &Value, esize: usize) -> Result<Value> {
    let bad = |reason: &str| Error::Codec {
        codec: c
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("?")
            .to_string(),
        reason: reason.to_string(),
    };
    let obj = c
        .as_object()
        .ok_or_else(|| bad("codec configuration is not an object"))?;
    let id = obj
        .get("id")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("codec configuration without a string \"id\""))?;
    // The parameters as stored: a `null` numcodecs cannot compress with is refused, not
    // taken for the default that the written configuration spells out.
    let cfg = crate::codec::Config { id, params: obj };
    let complete = crate::codec::with_numcodecs_defaults(c);
    let mut params: Map<String, Value> = complete
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != "id")
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    // Python's zlib and bz2 take an integer (a boolean being one) and nothing else.
    let level = |range| cfg.encoding_strict_int_in("level", 1, range).get().copied();
    Ok(match id {
        "gzip" => {
            // zarr-python 3's gzip takes levels 0 to 9. numcodecs hands -1 to Python's gzip
            // module, whose zlib compresses with its default, level 6: the same stream.
            let level = match level(-1..=9)? {
                -1 => 6,
                n => n,
            };
            json!({"name": "gzip", "configuration": {"level": level}})
        }
        "zstd" => {
            // The signed level, not netcdf-c's unsigned form of a negative one (a netcdf-c
            // NCZarr source's 4294967291), and within libzstd's range, as zarr-python 3
            // refuses a level above 22 that libzstd would clamp.
            let level =
                crate::codec::zarr_v3_zstd_level(crate::codec::zstd_compressing_level(&cfg)?);
            let checksum = cfg.truth("checksum", false);
            json!({"name": "zstd", "configuration": {"level": level, "checksum": checksum}})
        }
        "blosc" => json!({"name": "blosc",
            "configuration": crate::codec::blosc_zarr_v3_configuration(&cfg, esize)?}),
        "crc32c"
            if matches!(
                params.get("location").and_then(Value::as_str),
                None | Some("end")
            ) =>
        {
            json!({"name": "crc32c"})
        }
        _ => {
            let integer = match id {
                "zlib" => Some(("level", level(-1..=9)?)),
                "bz2" => Some(("level", level(1..=9)?)),
                "lz4" => Some(("acceleration", cfg.c_int("acceleration", 1)?)),
                // numcodecs treats 0 as a no-op; netcdf-c writes 0 for "the type's size".
                "shuffle" => match cfg.int_in(
                    "elementsize",
                    crate::codec::NUMCODECS_ELEMENTSIZE as i64,
                    0..=i64::from(u32::MAX),
                )? {
                    0 => Some(("elementsize", esize as i64)),
                    n => Some(("elementsize", n)),
                },
                _ => None,
            };
            if let Some((key, n)) = integer {
                params.insert(key.into(), json!(n));
            }
            json!({"name": format!("numcodecs.{id}"), "configuration": params})
        }
    })
}

/// Where a shard's index lies and how it is encoded: a sharded chain's `index_location` and
/// `index_codecs`. The chunk engine reads and writes every layout Zarr v3 allows for an index
/// of fixed size (`bytes` in either byte order, then any number of `crc32c`), so a copy of a
/// sharded array keeps its source's.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardIndex {
    /// `index_codecs`, as the source spelled them.
    pub codecs: Vec<Value>,
    /// Whether the index precedes the inner chunks (`"index_location": "start"`).
    pub at_start: bool,
}

impl Default for ShardIndex {
    /// At the end of each shard, little-endian with `crc32c`, as zarr-python 3 writes by
    /// default.
    fn default() -> Self {
        ShardIndex {
            codecs: vec![
                json!({"name": "bytes", "configuration": {"endian": "little"}}),
                json!({"name": "crc32c"}),
            ],
            at_start: false,
        }
    }
}

impl ShardIndex {
    /// The index layout of a chain that is one `sharding_indexed` codec (as
    /// [`shard_chunk_shape`] takes it); `None` for any other chain. A missing
    /// `index_location` is the specification's default, the end; missing `index_codecs`
    /// are [`ShardIndex::default`]'s, as the chunk engine reads them.
    pub fn of(list: &[Value]) -> Option<ShardIndex> {
        shard_chunk_shape(list)?;
        let config = list[0].get("configuration");
        let default = ShardIndex::default();
        let codecs = match config.and_then(|c| c.get("index_codecs")) {
            Some(Value::Array(codecs)) => codecs.clone(),
            _ => default.codecs,
        };
        let location = config.and_then(|c| c.get("index_location"));
        Some(ShardIndex {
            codecs,
            at_start: location.and_then(Value::as_str) == Some("start"),
        })
    }
}

/// The chain of variable `var` stored in shards whose inner chunks have `inner_chunks` and
/// are encoded with `spec` ([`codecs_v3`]): one `sharding_indexed` codec, its index laid out
/// as `index` says.
pub fn sharded(
    spec: &CodecSpec,
    dtype: &ZarrDtype,
    inner_chunks: &[u64],
    index: &ShardIndex,
    var: &str,
) -> Result<CodecSpec> {
    Ok(CodecSpec::V3(vec![json!({
        "name": "sharding_indexed",
        "configuration": {
            "chunk_shape": inner_chunks,
            "codecs": codecs_v3(spec, dtype, var)?,
            "index_codecs": index.codecs,
            "index_location": if index.at_start { "start" } else { "end" },
        },
    })]))
}

/// The chain of a `string` variable on Zarr v3: zarr-python's variable-length `string` data
/// type, whose array-to-bytes codec is `vlen-utf8`, then the bytes-to-bytes codecs of
/// `spec` (inside the shards of a sharded chain). `dtype` is the fixed-width slot in which
/// the chunk engine holds each value; `var` names the variable ([`codecs_v3`]).
pub fn vlen_strings(spec: &CodecSpec, dtype: &ZarrDtype, var: &str) -> Result<CodecSpec> {
    let vlen = |chain: Vec<Value>| -> Vec<Value> {
        std::iter::once(json!({"name": "vlen-utf8"}))
            .chain(chain.into_iter().filter(|c| {
                let name = c.get("name").and_then(Value::as_str);
                !matches!(name, Some("bytes" | "vlen-utf8" | "vlen-bytes"))
            }))
            .collect()
    };
    match spec {
        CodecSpec::V3(list) if shard_chunk_shape(list).is_some() => {
            let mut sharded = list.clone();
            if let Some(inner) = sharded[0].pointer_mut("/configuration/codecs") {
                let chain = inner.as_array().cloned().unwrap_or_default();
                *inner = Value::Array(vlen(chain));
            }
            Ok(CodecSpec::V3(sharded))
        }
        CodecSpec::V3(list) => Ok(CodecSpec::V3(vlen(list.clone()))),
        flat => Ok(CodecSpec::V3(vlen(codecs_v3(flat, dtype, var)?))),
    }
}

/// The inner chunk shape of a chain that is one `sharding_indexed` codec, as [`sharded`]
/// makes it; `None` for any other chain.
pub fn shard_chunk_shape(list: &[Value]) -> Option<Vec<u64>> {
    let [codec] = list else {
        return None;
    };
    if codec.get("name").and_then(Value::as_str) != Some("sharding_indexed") {
        return None;
    }
    codec
        .pointer("/configuration/chunk_shape")?
        .as_array()?
        .iter()
        .map(Value::as_u64)
        .collect()
}

/// A Zarr v3 codec list as an equivalent Zarr v2 chain of numcodecs objects, in encoding
/// order. `bytes`, `transpose` and the variable-length codecs describe the element layout
/// (which a writer chooses anew), so they are dropped; `sharding_indexed` contributes its
/// inner chain (zarr-python 3.1.6 takes a missing one for `bytes` alone). A codec with no
/// numcodecs equivalent is [`Error::Unsupported`].
///
/// A parameter zarr-python's own `gzip`, `zstd` or `blosc` configuration leaves out is the
/// default zarr-python 3.1.6 compresses with, spelled out, since numcodecs' defaults differ:
/// gzip level 5 (numcodecs 1); zstd level 0 and no checksum; blosc compressor zstd
/// (numcodecs lz4), clevel 5, blocksize 0, and a missing or `null` shuffle numcodecs'
/// `AUTOSHUFFLE` (-1), which resolves as zarr-python does: bit-shuffle for 1-byte items,
/// byte-shuffle otherwise. blosc's type size is left to numcodecs, which takes the item
/// size, as zarr-python does for a missing one.
pub fn codecs_v2(list: &[Value]) -> Result<Vec<Value>> {
    let mut out = Vec::new();
    for entry in list {
        let (name, config) = match entry {
            Value::String(n) => (n.as_str(), None),
            Value::Object(o) => (
                o.get("name").and_then(Value::as_str).unwrap_or(""),
                o.get("configuration").and_then(Value::as_object),
            ),
            _ => ("", None),
        };
        let mut params = config.cloned().unwrap_or_default();
        let id = match name {
            "bytes" | "transpose" | "vlen-utf8" | "vlen-bytes" => continue,
            "sharding_indexed" => {
                match params.get("codecs") {
                    None => {}
                    Some(Value::Array(inner)) => out.extend(codecs_v2(inner)?),
                    Some(_) => {
                        return Err(Error::Codec {
                            codec: name.to_string(),
                            reason: "codecs is not a list".to_string(),
                        })
                    }
                }
                continue;
            }
            // A zstd checksum is kept when it is on: numcodecs and netcdf-c take it in the v2
            // form too. Off, it stays out, as netcdf-c writes zstd.
            "zstd" => {
                if params.get("checksum") != Some(&Value::Bool(true)) {
                    params.remove("checksum");
                }
                fill_missing(&mut params, &[("level", json!(0))]);
                name
            }
            "gzip" => {
                params.remove("checksum");
                fill_missing(&mut params, &[("level", json!(5))]);
                name
            }
            "crc32c" => {
                params.remove("checksum");
                name
            }
            "bz2" => name,
            "blosc" => {
                let code = match params.get("shuffle") {
                    None | Some(Value::Null) => Some(-1),
                    Some(Value::String(s)) => match s.as_str() {
                        "noshuffle" => Some(0),
                        "shuffle" => Some(1),
                        "bitshuffle" => Some(2),
                        // zarr-python opens no array with another name: no numcodecs
                        // shuffle means it, so the copy is refused, not guessed at.
                        other => {
                            return Err(Error::Codec {
                                codec: name.to_string(),
                                reason: format!(
                                    "shuffle {} is not one zarr-python's Zarr v3 blosc takes \
                                     (noshuffle, shuffle, bitshuffle)",
                                    quoted(other)
                                ),
                            })
                        }
                    },
                    Some(_) => None,
                };
                if let Some(code) = code {
                    params.insert("shuffle".into(), json!(code));
                }
                // numcodecs takes the element size from the data it is given.
                params.remove("typesize");
                fill_missing(
                    &mut params,
                    &[
                        ("cname", json!("zstd")),
                        ("clevel", json!(5)),
                        ("blocksize", json!(0)),
                    ],
                );
                name
            }
            n => match n.strip_prefix("numcodecs.") {
                Some(id) => id,
                None => {
                    return Err(Error::Unsupported(format!(
                        "Zarr v3 codec {} has no Zarr v2 equivalent",
                        quoted(n)
                    )))
                }
            },
        };
        params.insert("id".into(), json!(id));
        out.push(Value::Object(params));
    }
    Ok(out)
}

/// Inserts each `(key, value)` whose key `params` lacks.
fn fill_missing(params: &mut Map<String, Value>, defaults: &[(&str, Value)]) {
    for (key, value) in defaults {
        if !params.contains_key(*key) {
            params.insert((*key).to_string(), value.clone());
        }
    }
}

/// netCDF's name of an attribute type on Zarr v3 (`_nczarr_attrs`).
fn attr_type(value: &AttrValue) -> &'static str {
    match value.nctype() {
        NcType::Byte => "int8",
        NcType::UByte => "uint8",
        NcType::Short => "int16",
        NcType::UShort => "uint16",
        NcType::Int => "int32",
        NcType::UInt => "uint32",
        NcType::Int64 => "int64",
        NcType::UInt64 => "uint64",
        NcType::Float => "float32",
        NcType::Double => "float64",
        NcType::Char => "char",
        NcType::String => "string",
    }
}

/// User attributes into `obj`, their types into `types`. In NCZarr, char text is always a
/// JSON string (its attribute type says `char`, so the text reads back byte for byte whatever
/// its spelling). In pure Zarr, which has no types, the JSON convention applies as on Zarr v2
/// ([`attr_json`]): the text of an object or a list that has no netCDF type (which the reader
/// makes of it) goes back as that JSON value, not as a string, and still reads back byte for
/// byte. Float NaN and infinities are the bare tokens `NaN`, `Infinity` and `-Infinity` in
/// pure Zarr, as Python's `json` (zarr-python) writes and reads them, and strings in NCZarr,
/// whose attribute types say they are numbers, as netcdf-c writes them.
fn put_attrs(
    obj: &mut Map<String, Value>,
    types: &mut Map<String, Value>,
    attrs: &[Attribute],
    dialect: Dialect,
) {
    for a in attrs {
        obj.insert(a.name.clone(), attr_value_json(&a.value, dialect));
        types.insert(a.name.clone(), json!(attr_type(&a.value)));
    }
}

/// An attribute's value as [`put_attrs`] writes it.
fn attr_value_json(value: &AttrValue, dialect: Dialect) -> Value {
    match value {
        AttrValue::Float(v) if dialect == Dialect::Zarr => {
            bare_floats(v.iter().map(|x| f32_as_f64(*x)))
        }
        AttrValue::Double(v) if dialect == Dialect::Zarr => bare_floats(v.iter().copied()),
        other => attr_json(other, dialect == Dialect::Zarr),
    }
}

/// Closes an NCZarr attribute map: the hidden objects get type `json`, and `_nczarr_attrs`
/// records every type.
fn finish_types(obj: &mut Map<String, Value>, mut types: Map<String, Value>, hidden: &[&str]) {
    for h in hidden {
        types.insert((*h).to_string(), json!("json"));
    }
    types.insert("_nczarr_attrs".into(), json!("json"));
    obj.insert(
        "_nczarr_attrs".into(),
        json!({ "attribute_types": Value::Object(types) }),
    );
}

fn group_attributes(ds: &Dataset, g: GroupId, opts: &WriteOptions) -> Map<String, Value> {
    let group = ds.group(g);
    let mut obj = Map::new();
    let mut types = Map::new();
    if opts.dialect != Dialect::NcZarr {
        put_attrs(&mut obj, &mut types, &group.attrs, opts.dialect);
        return obj;
    }
    if g == Dataset::ROOT {
        if let Some(p) = &opts.nc_properties {
            obj.insert("_NCProperties".into(), json!(p));
            types.insert("_NCProperties".into(), json!("char"));
        }
    }
    put_attrs(&mut obj, &mut types, &group.attrs, opts.dialect);
    let mut dims = Map::new();
    for d in &group.dims {
        let dim = ds.dim(*d);
        dims.insert(
            dim.name.clone(),
            json!({"size": dim.len, "unlimited": u8::from(dim.unlimited)}),
        );
    }
    let arrays: Vec<&str> = group
        .vars
        .iter()
        .map(|v| ds.var(*v).name.as_str())
        .collect();
    let groups: Vec<&str> = group
        .groups
        .iter()
        .map(|c| ds.group(*c).name.as_str())
        .collect();
    obj.insert(
        "_nczarr_group".into(),
        json!({"dimensions": dims, "arrays": arrays, "groups": groups}),
    );
    let mut hidden = vec!["_nczarr_group"];
    if g == Dataset::ROOT {
        obj.insert(
            "_nczarr_superblock".into(),
            json!({"version": NCZARR_V3_VERSION, "format": 3}),
        );
        hidden.push("_nczarr_superblock");
    }
    finish_types(&mut obj, types, &hidden);
    obj
}

fn array_node(ds: &Dataset, v: VarId, opts: &WriteOptions) -> Result<Value> {
    let var = ds.var(v);
    let key = join_key(&[&array_key(ds, v), NODE]);
    let dtype = var
        .storage
        .dtype
        .clone()
        .unwrap_or_else(|| v3_dtype(var.nctype, var.string_width, false));
    let shape = ds.var_shape(v);
    let chunks: Vec<u64> =
        if var.storage.chunks.len() == shape.len() && var.storage.chunks.iter().all(|c| *c > 0) {
            var.storage.chunks.clone()
        } else {
            shape.iter().map(|s| (*s).max(1)).collect()
        };
    let (data_type, alias) = match vlen_data_type(&var.storage.codecs) {
        Some(t) => (json!(t), None),
        None => data_type(var.nctype, &dtype, opts.dialect, &key)?,
    };
    let nczarr = opts.dialect == Dialect::NcZarr;
    // A char is a number only where its data type is uint8 (NCZarr); elsewhere it is bytes,
    // whose fill value is text, as a string's.
    let fill_type = match var.nctype {
        NcType::Char if data_type != json!("uint8") => NcType::String,
        t => t,
    };
    let (fill, no_fill) = match &var.storage.fill_value {
        // zarr-python's `string` takes its fill value as text (base64 is for `bytes`).
        Some(bytes) if data_type == json!("string") => {
            let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
            (json!(String::from_utf8_lossy(&bytes[..end])), false)
        }
        Some(bytes) => (fill_v3(fill_type, bytes, &dtype, &key)?, false),
        // Zarr v3 has no "no fill value": store netCDF's default, and say so in NCZarr.
        None => {
            let mut d = var.nctype.default_fill();
            d.resize(var.element_size(), 0);
            (fill_v3(fill_type, &d, &dtype, &key)?, true)
        }
    };
    let separator = match var.storage.key_encoding {
        ChunkKeyEncoding::Default { separator } | ChunkKeyEncoding::V2 { separator } => separator,
    };
    let key_encoding = match var.storage.key_encoding {
        ChunkKeyEncoding::Default { .. } => "default",
        ChunkKeyEncoding::V2 { .. } => "v2",
    };
    let mut attrs = Map::new();
    let mut types = Map::new();
    // NCZarr keeps `_FillValue` in the array's `fill_value` and records only its position:
    // xarray decodes an attribute of that name on Zarr v3 in its own encoding (a float as
    // base64), which a netCDF-typed attribute does not follow. Pure Zarr v3 is for xarray,
    // which takes its missing-value marker from that attribute alone (`fill_value` is only
    // what unwritten chunks hold), so there it is written in xarray's encoding, or not at
    // all where xarray cannot decode it (text): xarray fails to open the whole store then.
    let fill_attr = var
        .attrs
        .iter()
        .position(|a| a.name == "_FillValue")
        .filter(|_| var.storage.fill_value.is_some());
    let xarray_fill = match nczarr {
        true => None,
        false => var
            .attr("_FillValue")
            .and_then(|a| xarray_fill_attr(&a.value)),
    };
    let user: Vec<Attribute> = var
        .attrs
        .iter()
        .filter(|a| a.name != "_FillValue" || (nczarr && fill_attr.is_none()))
        .cloned()
        .collect();
    if let Some(fill) = xarray_fill {
        attrs.insert("_FillValue".into(), fill);
    }
    put_attrs(&mut attrs, &mut types, &user, opts.dialect);
    if nczarr {
        let refs: Vec<String> = var.dims.iter().map(|d| ds.dim_fqn(*d)).collect();
        let mut arr = Map::new();
        arr.insert("dimension_references".into(), json!(refs));
        arr.insert("storage".into(), json!("chunked"));
        if let Some(a) = alias {
            arr.insert("type_alias".into(), json!(a));
        }
        if var.nctype == NcType::String {
            arr.insert("maxstrlen".into(), json!(var.string_width));
        }
        if no_fill {
            arr.insert("no_fill".into(), json!(1));
        }
        if let Some(i) = fill_attr {
            arr.insert("fill_value_attribute".into(), json!(i));
        }
        attrs.insert("_nczarr_array".into(), Value::Object(arr));
        finish_types(&mut attrs, types, &["_nczarr_array"]);
    }
    let names: Vec<&str> = var.dims.iter().map(|d| ds.dim(*d).name.as_str()).collect();
    Ok(json!({
        "zarr_format": 3,
        "node_type": "array",
        "shape": shape,
        "data_type": data_type,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": chunks}},
        "chunk_key_encoding": {"name": key_encoding,
            "configuration": {"separator": separator.to_string()}},
        "fill_value": fill,
        "codecs": codecs_v3(&var.storage.codecs, &dtype, &ds.var_fqn(v))?,
        "attributes": Value::Object(attrs),
        "dimension_names": names,
    }))
}

/// A `_FillValue` attribute as xarray's `FillValueCoder` writes it for a Zarr v3 array: a
/// float as base64 of the little-endian double, an integer as a number. `None` for what xarray
/// cannot decode, where the array's `fill_value` alone holds the fill: text (char, fixed-width
/// bytes, and zarr-python's `string`, for which xarray 2026.9 fails to open the whole store,
/// and which it refuses to write itself), and more than one value.
fn xarray_fill_attr(value: &AttrValue) -> Option<Value> {
    let float = |x: f64| Some(json!(base64(&x.to_le_bytes())));
    match value {
        AttrValue::Float(v) if v.len() == 1 => float(f64::from(v[0])),
        AttrValue::Double(v) if v.len() == 1 => float(v[0]),
        AttrValue::Char(_) | AttrValue::Str(_) | AttrValue::Float(_) | AttrValue::Double(_) => None,
        // One integer is written as a number, several as a list.
        integers => Some(attr_json(integers, false)).filter(Value::is_number),
    }
}

/// A float fill value: a number, `"NaN"`/`"Infinity"`/`"-Infinity"`, or the hex bits of a
/// NaN whose bits are not the canonical quiet NaN (so that they survive).
fn float_fill(bits: u64, wide: bool) -> Value {
    let (x, canonical) = if wide {
        (f64::from_bits(bits), 0x7ff8_0000_0000_0000)
    } else {
        (f64::from(f32::from_bits(bits as u32)), 0x7fc0_0000)
    };
    if x.is_nan() && bits != canonical {
        let digits = if wide { 16 } else { 8 };
        return json!(format!("0x{bits:0digits$x}"));
    }
    if wide {
        float_json(x)
    } else {
        float_json(f32_as_f64(f32::from_bits(bits as u32)))
    }
}

/// One native element as a v3 `fill_value` for `dtype`.
fn fill_v3(nctype: NcType, bytes: &[u8], dtype: &ZarrDtype, key: &str) -> Result<Value> {
    let short = || Error::meta(key, format!("fill value of {} bytes", bytes.len()));
    let le = |n: usize| -> Result<u64> {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(bytes.get(..n).ok_or_else(short)?);
        Ok(u64::from_le_bytes(a))
    };
    let text = || {
        let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
        &bytes[..end]
    };
    if dtype.kind == DtypeKind::Bool {
        return Ok(json!(le(1)? != 0));
    }
    Ok(match nctype {
        NcType::Byte => json!(le(1)? as u8 as i8),
        NcType::UByte => json!(le(1)? as u8),
        NcType::Short => json!(le(2)? as u16 as i16),
        NcType::UShort => json!(le(2)? as u16),
        NcType::Int => json!(le(4)? as u32 as i32),
        NcType::UInt => json!(le(4)? as u32),
        NcType::Int64 => json!(le(8)? as i64),
        NcType::UInt64 => json!(le(8)?),
        NcType::Float => float_fill(le(4)?, false),
        NcType::Double => float_fill(le(8)?, true),
        NcType::Char | NcType::String => match dtype.kind {
            DtypeKind::Unicode => json!(String::from_utf8_lossy(text())),
            DtypeKind::Bytes if nctype == NcType::Char && dtype.size == 1 => {
                // uint8 (NCZarr) takes the byte as a number; bytes take base64.
                json!(le(1)? as u8)
            }
            _ => json!(base64(text())),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{VarStorage, Variable};

    #[test]
    fn v2_chains_become_v3_and_back() {
        let spec = CodecSpec::V2 {
            filters: vec![json!({"id": "shuffle", "elementsize": 0})],
            compressor: Some(json!({"id": "zlib", "level": 4})),
        };
        let d = v3_dtype(NcType::Int, 0, true);
        let v3 = codecs_v3(&spec, &d, "/v").unwrap();
        assert_eq!(
            v3,
            vec![
                json!({"name": "bytes", "configuration": {"endian": "big"}}),
                json!({"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}}),
                json!({"name": "numcodecs.zlib", "configuration": {"level": 4}}),
            ]
        );
        let back = codecs_v2(&v3).unwrap();
        assert_eq!(
            back,
            vec![
                json!({"elementsize": 4, "id": "shuffle"}),
                json!({"level": 4, "id": "zlib"})
            ]
        );
        let blosc = json!({"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2,
                           "blocksize": 0});
        let v3 = codec_to_v3(&blosc, 8).unwrap();
        assert_eq!(
            v3,
            json!({"name": "blosc", "configuration": {"cname": "zstd", "clevel": 3,
                   "shuffle": "bitshuffle", "typesize": 8, "blocksize": 0}})
        );
        // The spelled chain decodes what the v2 chain encodes: same bytes either way.
        let p2 = crate::codec::Pipeline::from_v2(&[], Some(&blosc), 8).unwrap();
        let p3 = crate::codec::Pipeline::from_v3(&[v3], 8).unwrap();
        let data: Vec<u8> = (0u64..300).flat_map(|i| (i * i).to_le_bytes()).collect();
        let enc = p2.encode(data.clone()).unwrap();
        assert_eq!(p3.decode_expect(enc, data.len()).unwrap(), data);
        // Sharding contributes its inner chain; codecs without a v2 twin are refused.
        let sharded = [json!({"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2], "codecs": [{"name": "bytes"}, {"name": "gzip",
            "configuration": {"level": 5}}], "index_codecs": []}})];
        assert_eq!(
            codecs_v2(&sharded).unwrap(),
            vec![json!({"level": 5, "id": "gzip"})]
        );
        assert!(matches!(
            codecs_v2(&[json!({"name": "fancy"})]),
            Err(Error::Unsupported(_))
        ));
    }

    #[test]
    fn v3_parameters_left_out_become_zarr_python_s_defaults() {
        // zarr-python 3.1.6 opens these configurations as GzipCodec(level=5),
        // ZstdCodec(level=0, checksum=False) and BloscCodec(cname="zstd", clevel=5,
        // blocksize=0, shuffle by the item size); numcodecs' own defaults differ (GZip
        // level 1, Blosc lz4).
        let v2 = |c: Value| codecs_v2(&[c]).unwrap();
        assert_eq!(
            v2(json!({"name": "gzip", "configuration": {}})),
            [json!({"level": 5, "id": "gzip"})]
        );
        assert_eq!(
            v2(json!({"name": "zstd", "configuration": {}})),
            [json!({"level": 0, "id": "zstd"})]
        );
        assert_eq!(
            v2(json!({"name": "zstd", "configuration": {"checksum": true}})),
            [json!({"checksum": true, "level": 0, "id": "zstd"})]
        );
        let blosc = v2(json!({"name": "blosc", "configuration": {}}));
        assert_eq!(
            blosc,
            [
                json!({"shuffle": -1, "cname": "zstd", "clevel": 5, "blocksize": 0,
                    "id": "blosc"})
            ]
        );
        assert_eq!(
            v2(json!({"name": "blosc", "configuration": {"shuffle": null, "typesize": 4}})),
            blosc
        );
        // Given members stay as they are.
        assert_eq!(
            v2(
                json!({"name": "blosc", "configuration": {"cname": "lz4", "clevel": 2,
                      "shuffle": "bitshuffle", "typesize": 8, "blocksize": 64}})
            ),
            [
                json!({"cname": "lz4", "clevel": 2, "shuffle": 2, "blocksize": 64,
                    "id": "blosc"})
            ]
        );
        // numcodecs' AUTOSHUFFLE is zarr-python's choice: bit-shuffle for 1-byte items
        // (c-blosc's flag 0x4), byte-shuffle otherwise (0x1).
        let data: Vec<u8> = (0u32..500).flat_map(|i| (i % 7).to_le_bytes()).collect();
        for (esize, flag) in [(1, 0x4), (4, 0x1)] {
            let p = crate::codec::Pipeline::from_v2(&[], Some(&blosc[0]), esize).unwrap();
            let enc = p.encode(data.clone()).unwrap();
            assert_eq!(
                (enc[2] >> 5, enc[2] & 0x5),
                (4, flag),
                "zstd, {esize}-byte items"
            );
        }
        // A sharded array without inner codecs has `bytes` alone; one with a shuffle
        // zarr-python does not name is refused, not guessed at.
        let sharded = json!({"name": "sharding_indexed", "configuration": {"chunk_shape": [2]}});
        assert_eq!(v2(sharded), Vec::<Value>::new());
        let odd = json!({"name": "blosc", "configuration": {"shuffle": "byteshuffle"}});
        assert!(matches!(codecs_v2(&[odd]), Err(Error::Codec { .. })));
    }

    #[test]
    fn numcodecs_parameters_take_the_form_zarr_python_3_opens() {
        let v3 = |c: Value| codec_to_v3(&c, 4).unwrap();
        let config = |c: Value| v3(c)["configuration"].clone();
        // zlib.h: Z_DEFAULT_COMPRESSION (-1) "currently equivalent to level 6"; zarr-python
        // 3's gzip takes 0..9.
        assert_eq!(
            config(json!({"id": "gzip", "level": -1})),
            json!({"level": 6})
        );
        // Python's bool is an int, and a Cython int truncates a float: the v3 codecs get the
        // integer numcodecs compresses with.
        assert_eq!(
            config(json!({"id": "gzip", "level": true})),
            json!({"level": 1})
        );
        assert_eq!(
            config(json!({"id": "zlib", "level": false})),
            json!({"level": 0})
        );
        assert_eq!(
            config(json!({"id": "bz2", "level": true})),
            json!({"level": 1})
        );
        assert_eq!(
            config(json!({"id": "lz4", "acceleration": 5.5})),
            json!({"acceleration": 5})
        );
        assert_eq!(
            config(json!({"id": "lz4", "acceleration": true})),
            json!({"acceleration": 1})
        );
        assert_eq!(
            config(json!({"id": "shuffle", "elementsize": true})),
            json!({"elementsize": 1})
        );
        assert_eq!(
            config(json!({"id": "zstd", "level": true})),
            json!({"level": 1, "checksum": false})
        );
        assert_eq!(
            config(json!({"id": "zstd", "level": -3.7, "checksum": "0"})),
            json!({"level": -3, "checksum": true})
        );
        assert_eq!(
            config(json!({"id": "zstd", "level": 4294967291u64, "checksum": []})),
            json!({"level": -5, "checksum": false})
        );
        assert_eq!(
            config(
                json!({"id": "blosc", "cname": "zstd", "clevel": true, "shuffle": 2.9,
                          "blocksize": true, "typesize": 2})
            ),
            json!({"cname": "zstd", "clevel": 1, "shuffle": "bitshuffle", "typesize": 2,
                   "blocksize": 1})
        );
        // numcodecs compresses with no `null` level; a missing one is its default.
        assert!(codec_to_v3(&json!({"id": "zstd", "level": null}), 4).is_err());
        assert!(codec_to_v3(&json!({"id": "blosc", "clevel": null}), 4).is_err());
        // numcodecs' `Shuffle(elementsize=4)`.
        assert_eq!(config(json!({"id": "shuffle"})), json!({"elementsize": 4}));
        // zarr-python 3 requires a `configuration` of a numcodecs codec, empty or not.
        assert_eq!(
            v3(json!({"id": "fletcher32"})),
            json!({"name": "numcodecs.fletcher32", "configuration": {}})
        );
    }

    #[test]
    fn a_codec_numcodecs_cannot_compress_with_is_refused_naming_the_variable() {
        let spec = CodecSpec::V2 {
            filters: vec![],
            compressor: Some(json!({"id": "zlib", "level": 15})),
        };
        let err = codecs_v3(&spec, &v3_dtype(NcType::Int, 0, false), "/g/v").unwrap_err();
        assert!(
            matches!(&err, Error::NoZarrV3Form { var, codec, .. } if var == "/g/v" && codec == "zlib"),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(
            message.contains("-d N") && message.contains("--codec"),
            "{message}"
        );
    }

    #[test]
    fn shards_keep_their_index_layout() {
        let dtype = v3_dtype(NcType::Int, 0, false);
        let inner = vec![json!({"name": "bytes", "configuration": {"endian": "little"}})];
        // zarr-python's `ShardingCodec(index_location="start", index_codecs=[BytesCodec()])`.
        let source = [json!({"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2], "codecs": inner,
            "index_codecs": [{"name": "bytes", "configuration": {"endian": "big"}}],
            "index_location": "start"}})];
        let index = ShardIndex::of(&source).unwrap();
        let again = sharded(&CodecSpec::default(), &dtype, &[2], &index, "/v").unwrap();
        assert_eq!(again, CodecSpec::V3(source.to_vec()));
        // The specification's defaults where the source says nothing.
        let bare = [json!({"name": "sharding_indexed", "configuration": {
            "chunk_shape": [2], "codecs": inner}})];
        assert_eq!(ShardIndex::of(&bare), Some(ShardIndex::default()));
        let CodecSpec::V3(made) = sharded(
            &CodecSpec::default(),
            &dtype,
            &[2],
            &ShardIndex::default(),
            "/v",
        )
        .unwrap() else {
            panic!("not a v3 chain")
        };
        assert_eq!(made[0]["configuration"]["index_location"], json!("end"));
        assert_eq!(
            made[0]["configuration"]["index_codecs"],
            json!([{"name": "bytes", "configuration": {"endian": "little"}}, {"name": "crc32c"}])
        );
        assert_eq!(ShardIndex::of(&inner), None);
    }

    #[test]
    fn fill_values_and_data_types() {
        let f32d = v3_dtype(NcType::Float, 0, false);
        let nan = f32::NAN.to_le_bytes();
        assert_eq!(
            fill_v3(NcType::Float, &nan, &f32d, "k").unwrap(),
            json!("NaN")
        );
        let payload = 0x7fc0_0001u32.to_le_bytes();
        assert_eq!(
            fill_v3(NcType::Float, &payload, &f32d, "k").unwrap(),
            json!("0x7fc00001")
        );
        assert_eq!(
            fill_v3(NcType::Float, &0.1f32.to_le_bytes(), &f32d, "k").unwrap(),
            json!(0.1)
        );
        let inf = f64::NEG_INFINITY.to_le_bytes();
        let f64d = v3_dtype(NcType::Double, 0, false);
        assert_eq!(
            fill_v3(NcType::Double, &inf, &f64d, "k").unwrap(),
            json!("-Infinity")
        );
        let s = v3_dtype(NcType::String, 3, false);
        assert_eq!(s.to_numpy(), "<U3");
        assert_eq!(
            fill_v3(NcType::String, b"ab\0", &s, "k").unwrap(),
            json!("ab")
        );
        let c = v3_dtype(NcType::Char, 0, false);
        assert_eq!(fill_v3(NcType::Char, b"a", &c, "k").unwrap(), json!(97));
        assert_eq!(
            data_type(NcType::Char, &c, Dialect::NcZarr, "k").unwrap(),
            (json!("uint8"), Some("char"))
        );
        assert_eq!(
            data_type(NcType::Char, &c, Dialect::Zarr, "k").unwrap().0,
            json!({"name": "null_terminated_bytes", "configuration": {"length_bytes": 1}})
        );
        assert_eq!(
            data_type(NcType::String, &s, Dialect::NcZarr, "k").unwrap(),
            (
                json!({"name": "fixed_length_utf32", "configuration": {"length_bytes": 12}}),
                Some("string")
            )
        );
        assert_eq!(
            fill_v3(
                NcType::Int64,
                &(-5i64).to_le_bytes(),
                &v3_dtype(NcType::Int64, 0, false),
                "k"
            )
            .unwrap(),
            json!(-5)
        );
    }

    #[test]
    fn pure_fill_value_attributes_in_xarrays_encoding() {
        // Python: base64.b64encode(struct.pack('<d', -999.5)).
        let float = AttrValue::Float(vec![-999.5]);
        assert_eq!(xarray_fill_attr(&float), Some(json!("AAAAAAA8j8A=")));
        let int = AttrValue::Short(vec![-999]);
        assert_eq!(xarray_fill_attr(&int), Some(json!(-999)));
        let text = AttrValue::Str(vec!["none".into()]);
        assert_eq!(xarray_fill_attr(&text), None);
        let char = AttrValue::Char(b"x".to_vec());
        assert_eq!(xarray_fill_attr(&char), None);
        assert_eq!(xarray_fill_attr(&AttrValue::Int(vec![1, 2])), None);
    }

    #[test]
    fn nczarr_objects_read_back() {
        let mut ds = Dataset::new();
        let t = ds.add_dim(Dataset::ROOT, "t", 3, true);
        let g = ds.add_group(Dataset::ROOT, "g");
        let x = ds.add_dim(g, "x", 2, false);
        ds.groups[0].attrs.push(Attribute {
            name: "title".into(),
            value: AttrValue::Char(b"[1, 2]".to_vec()),
        });
        let var = |name: &str, group, nctype, dims: Vec<_>, attrs| Variable {
            name: name.into(),
            group,
            nctype,
            dims,
            string_width: if nctype == NcType::String { 5 } else { 0 },
            attrs,
            storage: VarStorage {
                fill_value: None,
                ..VarStorage::default()
            },
        };
        ds.add_var(var(
            "v",
            g,
            NcType::UShort,
            vec![t, x],
            vec![Attribute {
                name: "scale".into(),
                value: AttrValue::Float(vec![0.5, 2.0]),
            }],
        ));
        ds.add_var(var("c", Dataset::ROOT, NcType::Char, vec![t], Vec::new()));
        ds.add_var(var("s", Dataset::ROOT, NcType::String, vec![], Vec::new()));
        let map = crate::zmap::MemoryMap::new();
        let opts = WriteOptions {
            consolidated: true,
            ..WriteOptions::default()
        };
        write_metadata(&map, &ds, &opts).unwrap();
        let back = crate::meta::read_dataset(&map, &crate::location::Mode::default()).unwrap();
        assert_eq!(back.groups.len(), 2);
        assert_eq!(
            back.group(Dataset::ROOT).attrs,
            ds.group(Dataset::ROOT).attrs
        );
        let t2 = back.find_dim("/t").unwrap();
        assert_eq!((back.dim(t2).len, back.dim(t2).unlimited), (3, true));
        let v = back.var(back.find_var("/g/v").unwrap());
        assert_eq!(v.nctype, NcType::UShort);
        assert_eq!(v.dims, vec![t2, back.find_dim("/g/x").unwrap()]);
        assert_eq!(v.attrs[0].value, AttrValue::Float(vec![0.5, 2.0]));
        // No fill value survives as "no fill", though v3 must store one.
        assert_eq!(v.storage.fill_value, None);
        assert_eq!(back.var(back.find_var("c").unwrap()).nctype, NcType::Char);
        let s = back.var(back.find_var("s").unwrap());
        assert_eq!((s.nctype, s.dims.len()), (NcType::String, 0));
        assert_eq!(s.string_width, 5);
        // Consolidated: the root object alone describes the dataset.
        let only_root = crate::zmap::MemoryMap::new();
        let root = map.get("zarr.json").unwrap().unwrap();
        only_root.put("zarr.json", &root).unwrap();
        let c = crate::meta::read_dataset(&only_root, &crate::location::Mode::default()).unwrap();
        assert_eq!(c.vars.len(), 3);
    }
}
