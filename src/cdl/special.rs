//! The special virtual attributes of `ncdump -s`: how a variable is stored (`_Storage`,
//! `_ChunkSizes`, its filters, `_Codecs`, `_Endianness`, `_NoFill`) and, after the root
//! group's attributes, `_NCProperties`, `_SuperblockVersion`, `_IsNetcdf4` and `_Format`.
//!
//! The values are what netcdf-c 4.10.1 reports for the same store (its inquiry functions,
//! which `ncdump -s` prints), and the lines come in the order and spelling of `ncdump -s`:
//! - every variable with dimensions is chunked (Zarr has no other layout); a scalar is shown
//!   as `contiguous`, as netCDF-4 shows scalars, since netcdf-c's chunk list for a scalar
//!   has no entries to print;
//! - codecs netcdf-c maps to HDF5 filters are shown by those: `_Fletcher32`, `_Shuffle` and
//!   `_DeflateLevel` for the three standard ones, and `_Filter = "id,params|..."` for the
//!   others (bzip2 307, blosc 32001, zstd 32015), in chain order; with `-F` (`all_filters`)
//!   every one goes into `_Filter`, with the parameters netcdf-c's NCZarr codec mapping
//!   gives (not those HDF5 keeps for the same filter in a netCDF-4 file);
//! - `_Codecs` is the codec chain as JSON, formatted as netcdf-c formats it (`", "` inside
//!   a codec, `","` between codecs); the array-to-bytes codecs of Zarr v3 are left out;
//! - `_SuperblockVersion` is the NCZarr format's major version (0 for pure Zarr), as
//!   netcdf-c reports it.

use std::num::IntErrorKind;

use serde_json::Value;

use super::fmt::escape_text;
use crate::codec::netcdf_element_size;
use crate::model::{ByteOrder, CodecSpec, Dataset, NcType, VarId, Variable};

/// One HDF5 filter: its id and parameters as `ncdump -s` prints them.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Hdf5Filter {
    id: u32,
    params: Vec<u64>,
}

const DEFLATE: u32 = 1;
const SHUFFLE: u32 = 2;
const FLETCHER32: u32 = 3;

/// The virtual attributes of one variable, as `(name, CDL value)` pairs in `ncdump -s` order.
pub fn var_specials(ds: &Dataset, v: VarId, all_filters: bool) -> Vec<(&'static str, String)> {
    let var = ds.var(v);
    let mut out = Vec::new();
    if var.dims.is_empty() {
        out.push(("_Storage", quoted("contiguous")));
    } else {
        out.push(("_Storage", quoted("chunked")));
        let chunks = chunk_shape(var);
        let list: Vec<String> = chunks.iter().map(u64::to_string).collect();
        out.push(("_ChunkSizes", list.join(", ")));
    }
    let chain = byte_codecs(&var.storage.codecs);
    let element_size = netcdf_element_size(var.nctype, var.element_size());
    let filters: Vec<Hdf5Filter> = chain
        .iter()
        .filter_map(|c| hdf5_filter(c, element_size))
        .collect();
    let has = |id: u32| filters.iter().any(|f| f.id == id);
    let mut rest = filters.clone();
    if !all_filters {
        if has(FLETCHER32) {
            out.push(("_Fletcher32", quoted("true")));
        }
        if has(SHUFFLE) {
            out.push(("_Shuffle", quoted("true")));
        }
        if let Some(f) = filters.iter().find(|f| f.id == DEFLATE) {
            let level = f.params.first().copied().unwrap_or(0);
            let shown = match u32::try_from(level) {
                Ok(l) => i64::from(l as i32).to_string(),
                Err(_) => level.to_string(),
            };
            out.push(("_DeflateLevel", shown));
        }
        rest.retain(|f| ![DEFLATE, SHUFFLE, FLETCHER32].contains(&f.id));
    }
    if !rest.is_empty() {
        let specs: Vec<String> = rest
            .iter()
            .map(|f| {
                let mut s = f.id.to_string();
                for p in &f.params {
                    s.push_str(&format!(",{p}"));
                }
                s
            })
            .collect();
        out.push(("_Filter", quoted(&specs.join("|"))));
    }
    if !chain.is_empty() {
        let codecs: Vec<String> = chain.iter().map(|c| netcdf_json(c)).collect();
        out.push(("_Codecs", quoted(&format!("[{}]", codecs.join(",")))));
    }
    if multi_byte_number(var.nctype) {
        match var.storage.dtype.as_ref().map(|d| d.order) {
            Some(ByteOrder::Little) => out.push(("_Endianness", quoted("little"))),
            Some(ByteOrder::Big) => out.push(("_Endianness", quoted("big"))),
            _ => {}
        }
    }
    if var.storage.fill_value.is_none() {
        out.push(("_NoFill", quoted("true")));
    }
    out
}

/// The virtual attributes printed after the root group's own, as `(name, CDL value)` pairs.
pub fn global_specials(ds: &Dataset) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    if let Some(text) = &ds.provenance.ncproperties {
        out.push(("_NCProperties", quoted(text)));
    }
    out.push(("_SuperblockVersion", ds.provenance.nczarr_major.to_string()));
    out.push(("_IsNetcdf4", "1".to_string()));
    out.push(("_Format", quoted("netCDF-4")));
    out
}

/// A CDL string constant, escaped as ncdump escapes text.
fn quoted(text: &str) -> String {
    let mut out = vec![b'"'];
    escape_text(text.as_bytes(), &mut out);
    out.push(b'"');
    String::from_utf8_lossy(&out).into_owned()
}

/// Types whose values have a byte order (`ncdump -s` prints none for one-byte types, char
/// and strings).
fn multi_byte_number(t: NcType) -> bool {
    !matches!(
        t,
        NcType::Byte | NcType::UByte | NcType::Char | NcType::String
    )
}

/// The unit of storage and compression: the chunk, or the inner chunk of a sharded v3 array.
fn chunk_shape(var: &Variable) -> Vec<u64> {
    if let CodecSpec::V3(codecs) = &var.storage.codecs {
        if let Some(inner) = sharding_config(codecs).and_then(|c| c.get("chunk_shape")) {
            if let Some(list) = inner.as_array() {
                let shape: Option<Vec<u64>> = list.iter().map(Value::as_u64).collect();
                if let Some(shape) = shape {
                    return shape;
                }
            }
        }
    }
    var.storage.chunks.clone()
}

fn sharding_config(codecs: &[Value]) -> Option<&Value> {
    codecs
        .iter()
        .find(|c| codec_name(c) == "sharding_indexed")
        .and_then(|c| c.get("configuration"))
}

/// The codecs that turn bytes into bytes, in encoding order: Zarr v2's `filters` then its
/// `compressor`; for Zarr v3 the chain (the inner one of a sharded array) without its
/// array-to-array and array-to-bytes codecs.
fn byte_codecs(spec: &CodecSpec) -> Vec<&Value> {
    match spec {
        CodecSpec::V2 {
            filters,
            compressor,
        } => filters.iter().chain(compressor.iter()).collect(),
        CodecSpec::V3(codecs) => {
            // A sharded array without inner codecs has `bytes` alone (zarr-python 3.1.6).
            let chain = match sharding_config(codecs) {
                Some(c) => c
                    .get("codecs")
                    .and_then(Value::as_array)
                    .map_or(&[][..], Vec::as_slice),
                None => &codecs[..],
            };
            chain
                .iter()
                .filter(|c| !matches!(codec_name(c), "bytes" | "transpose" | "vlen-utf8"))
                .collect()
        }
    }
}

/// A codec's name: `id` in Zarr v2, `name` in v3, without numcodecs' `numcodecs.` prefix.
fn codec_name(codec: &Value) -> &str {
    let name = codec
        .get("id")
        .or_else(|| codec.get("name"))
        .and_then(Value::as_str)
        .unwrap_or("");
    name.strip_prefix("numcodecs.").unwrap_or(name)
}

/// A codec's parameter: a member of a v2 codec, or of a v3 codec's `configuration`.
fn codec_param<'a>(codec: &'a Value, key: &str) -> Option<&'a Value> {
    codec
        .get(key)
        .or_else(|| codec.get("configuration").and_then(|c| c.get(key)))
}

/// The HDF5 filter netcdf-c maps a codec to, with the parameters netcdf-c reports for it
/// (its NCZarr codec mapping's, not those HDF5 stores in a netCDF-4 file); `None`
/// for codecs netcdf-c has no HDF5 filter for (gzip, lz4, crc32c, ...). A Zarr v3 codec is
/// first taken as the numcodecs object `copy` writes for it to Zarr v2 ([`as_numcodecs`];
/// items of `element_size` bytes).
fn hdf5_filter(codec: &Value, element_size: usize) -> Option<Hdf5Filter> {
    let numcodecs = as_numcodecs(codec, element_size)?;
    let codec = &numcodecs;
    // netcdf-c reads a level through an integer it leaves unset, so a string it cannot read
    // as a number is the 0 that netcdf-c 4.10.1 reports. An HDF5 filter's parameters are
    // unsigned ints: a negative level (numcodecs' -1, the library's default) is kept in that
    // form, and `_DeflateLevel` shows it signed.
    let level = |default: u64| match codec_param(codec, "level") {
        None => default,
        Some(v) => u64::from(netcdf_c_int(v).unwrap_or(0) as u32),
    };
    let (id, params) = match codec_name(codec) {
        "zlib" => (DEFLATE, vec![level(1)]),
        // netcdf-c gives shuffle no parameters: the element size is the type's, found when
        // the filter runs.
        "shuffle" => (SHUFFLE, vec![]),
        "fletcher32" => (FLETCHER32, vec![]),
        "bz2" => (307, vec![level(9)]),
        // A negative level (numcodecs' -5) as netcdf-c stores and ncdump prints it.
        "zstd" => match codec_param(codec, "level").and_then(netcdf_c_int) {
            Some(n) if n < 0 => {
                let n = crate::codec::netcdf_c_zstd_level(n);
                (32015, vec![n.unsigned_abs()])
            }
            _ => (32015, vec![level(3)]),
        },
        // netcdf-c's codec-to-HDF5 mapping leaves the three reserved parameters and the type
        // size at 0 (the filter fills them in only for its own use when it runs) and passes the
        // codec's blocksize where HDF5 keeps the chunk's bytes; a member the codec lacks gets
        // netcdf-c's default: blocksize 1, level 9, no shuffle, lz4.
        "blosc" => {
            let compressor = match codec_param(codec, "cname") {
                None => 1,
                Some(cname) => ["blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd"]
                    .iter()
                    .position(|n| Some(*n) == cname.as_str())?
                    as u64,
            };
            // netcdf-c converts clevel, blocksize and shuffle, in that order, into one
            // integer, which a string it cannot read as a number leaves as it was: such a
            // member repeats the one before it (0 for clevel).
            let mut last = 0;
            let mut next = |key: &str, default: i64| {
                last = match codec_param(codec, key) {
                    None => default,
                    Some(v) => netcdf_c_int(v).unwrap_or(last),
                };
                u64::from(last as u32)
            };
            let clevel = next("clevel", 9);
            let blocksize = next("blocksize", 1);
            let shuffle = next("shuffle", 0);
            (32001, vec![0, 0, 0, blocksize, clevel, shuffle, compressor])
        }
        _ => return None,
    };
    Some(Hdf5Filter { id, params })
}

/// A codec as numcodecs object: a Zarr v2 one as it is, a Zarr v3 one as `copy` writes it
/// to Zarr v2, with blosc's shuffle resolved as on an NCZarr target, so that `dump -s` shows
/// what netcdf-c reports for an NCZarr copy (gzip, which that copy makes zlib, stays gzip,
/// for which netcdf-c has no filter, as on Zarr v2). What
/// zarr-python's own `blosc`, `zstd` and `gzip` leave out is zarr-python 3.1.6's default
/// (blosc zstd, clevel 5, blocksize 0; zstd level 0; gzip level 5), not netcdf-c's, and a
/// blosc shuffle left out or `null` is the one zarr-python compresses with: bit-shuffle for
/// 1-byte items, byte-shuffle otherwise. `None` for a v3 codec numcodecs has no object for,
/// or a blosc shuffle name zarr-python does not know.
fn as_numcodecs(codec: &Value, element_size: usize) -> Option<Value> {
    if codec.get("id").is_some() {
        return Some(codec.clone());
    }
    let mut v2 = crate::meta::writer_v3::codecs_v2(std::slice::from_ref(codec))
        .ok()?
        .pop()?;
    let auto_shuffle = matches!(codec_param(codec, "shuffle"), None | Some(Value::Null));
    if codec.get("name").and_then(Value::as_str) == Some("blosc") && auto_shuffle {
        v2["shuffle"] = Value::from(if element_size == 1 { 2 } else { 1 });
    }
    Some(v2)
}

/// A codec parameter as netcdf-c's JSON conversion to an integer reads it (`NCJcvt` to
/// `NCJ_INT`): an integer as it is, a number with a fraction or exponent (netcdf-c can write
/// `5.0`) truncated towards zero, a boolean as 1 or 0, a string by its leading integer
/// (`sscanf("%lld")`). `None` where that conversion sets nothing: a string without a leading
/// integer, and `null`, a list or an object (with which netcdf-c opens no dataset).
fn netcdf_c_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n
            .as_i64()
            .or_else(|| n.as_u64().map(|_| i64::MAX))
            .or_else(|| n.as_f64().map(|f| f.trunc() as i64)),
        Value::Bool(b) => Some(i64::from(*b)),
        Value::String(s) => {
            let t = s.trim_start();
            let digits = t
                .char_indices()
                .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && (c == '-' || c == '+'))))
                .map_or(t.len(), |(i, _)| i);
            match t[..digits].parse() {
                Ok(n) => Some(n),
                // sscanf stores the nearest integer it has for one out of range.
                Err(e) => match e.kind() {
                    IntErrorKind::PosOverflow => Some(i64::MAX),
                    IntErrorKind::NegOverflow => Some(i64::MIN),
                    _ => None,
                },
            }
        }
        _ => None,
    }
}

/// JSON as netcdf-c writes a codec in `_Codecs`: `{"id": "zlib", "level": 4}`.
fn netcdf_json(value: &Value) -> String {
    match value {
        Value::Object(members) => {
            let parts: Vec<String> = members
                .iter()
                .map(|(k, v)| format!("{}: {}", Value::String(k.clone()), netcdf_json(v)))
                .collect();
            format!("{{{}}}", parts.join(", "))
        }
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(netcdf_json).collect();
            format!("[{}]", parts.join(", "))
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn codecs_are_written_as_netcdf_c_writes_them() {
        // netcdf-c 4.10.1 reports `_Codecs` of a zlib+shuffle+fletcher32 NCZarr variable as
        // [{"id": "shuffle", "elementsize": 0},{"id": "zlib", "level": 4},{"id": "fletcher32"}].
        let chain = [
            json!({"id": "shuffle", "elementsize": 0}),
            json!({"id": "zlib", "level": 4}),
            json!({"id": "fletcher32"}),
        ];
        let text: Vec<String> = chain.iter().map(netcdf_json).collect();
        assert_eq!(
            format!("[{}]", text.join(",")),
            r#"[{"id": "shuffle", "elementsize": 0},{"id": "zlib", "level": 4},{"id": "fletcher32"}]"#
        );
        assert_eq!(
            netcdf_json(&json!({"name": "bz2", "configuration": {"level": 9}})),
            r#"{"name": "bz2", "configuration": {"level": 9}}"#
        );
    }

    #[test]
    fn filter_parameters_are_netcdf_c_s_for_nczarr() {
        // What netcdf-c 4.10.1's nc_inq_var_filter_info reports for these codecs in an
        // NCZarr store (netCDF4-python's own, and hand-edited .zarray files).
        let cases = [
            (json!({"id": "shuffle", "elementsize": 0}), 2, vec![]),
            (json!({"id": "shuffle", "elementsize": 8}), 2, vec![]),
            (json!({"id": "fletcher32"}), 3, vec![]),
            (json!({"id": "zlib", "level": "3"}), 1, vec![3]),
            (json!({"id": "bz2", "level": 9}), 307, vec![9]),
            (json!({"id": "zstd", "level": 4}), 32015, vec![4]),
            (
                json!({"id": "blosc", "clevel": 5, "blocksize": 0, "cname": "blosclz", "shuffle": 1}),
                32001,
                vec![0, 0, 0, 0, 5, 1, 0],
            ),
            (
                json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 1024}),
                32001,
                vec![0, 0, 0, 1024, 5, 1, 1],
            ),
            (
                json!({"id": "blosc", "cname": "zstd", "clevel": "7", "shuffle": "2", "blocksize": "64"}),
                32001,
                vec![0, 0, 0, 64, 7, 2, 5],
            ),
            (
                json!({"id": "blosc", "cname": "zlib", "clevel": 3}),
                32001,
                vec![0, 0, 0, 1, 3, 0, 4],
            ),
            (json!({"id": "blosc"}), 32001, vec![0, 0, 0, 1, 9, 0, 1]),
            // Numbers netcdf-c wrote as floats, or with a fraction, truncated as netcdf-c
            // 4.10.1's nc_inq_var_filter_info reports them.
            (
                json!({"id": "blosc", "clevel": 5.0, "blocksize": 0, "cname": "lz4", "shuffle": 1}),
                32001,
                vec![0, 0, 0, 0, 5, 1, 1],
            ),
            (
                json!({"id": "blosc", "clevel": 5.7, "blocksize": 64.0, "cname": "zstd", "shuffle": 2.0}),
                32001,
                vec![0, 0, 0, 64, 5, 2, 5],
            ),
            (json!({"id": "zstd", "level": 4.0}), 32015, vec![4]),
            (json!({"id": "zstd", "level": 4.9}), 32015, vec![4]),
            (json!({"id": "zlib", "level": 3.0}), 1, vec![3]),
            (json!({"id": "zlib", "level": 3.6}), 1, vec![3]),
            (json!({"id": "bz2", "level": 7.0}), 307, vec![7]),
            (json!({"id": "bz2", "level": 4.9}), 307, vec![4]),
            // numcodecs' blosc AUTOSHUFFLE, zarr-python's default, as an unsigned int.
            (
                json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": -1, "blocksize": 0}),
                32001,
                vec![0, 0, 0, 0, 5, 4294967295, 1],
            ),
            (
                json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": "-1", "blocksize": 0}),
                32001,
                vec![0, 0, 0, 0, 5, 4294967295, 1],
            ),
            (
                json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1.0, "blocksize": 16.5}),
                32001,
                vec![0, 0, 0, 16, 5, 1, 1],
            ),
            // Booleans are 1 and 0.
            (json!({"id": "zlib", "level": false}), 1, vec![0]),
            (json!({"id": "zlib", "level": true}), 1, vec![1]),
            (json!({"id": "zstd", "level": true}), 32015, vec![1]),
            (json!({"id": "zstd", "level": false}), 32015, vec![0]),
            (json!({"id": "bz2", "level": true}), 307, vec![1]),
            (
                json!({"id": "blosc", "cname": "lz4", "clevel": 5.7, "shuffle": true, "blocksize": 0}),
                32001,
                vec![0, 0, 0, 0, 5, 1, 1],
            ),
            (
                json!({"id": "blosc", "cname": "lz4", "clevel": false, "shuffle": false, "blocksize": true}),
                32001,
                vec![0, 0, 0, 1, 0, 0, 1],
            ),
            // A string without a leading integer: 0 for a level, and for blosc the member
            // converted before it (clevel, blocksize, shuffle), or its default.
            (json!({"id": "zlib", "level": "true"}), 1, vec![0]),
            (json!({"id": "zstd", "level": "abc"}), 32015, vec![0]),
            (json!({"id": "bz2", "level": "abc"}), 307, vec![0]),
            (json!({"id": "zlib", "level": "0x10"}), 1, vec![0]),
            (json!({"id": "zlib", "level": " +4"}), 1, vec![4]),
            (
                json!({"id": "blosc", "cname": "lz4", "clevel": "abc", "shuffle": 1, "blocksize": 64}),
                32001,
                vec![0, 0, 0, 64, 0, 1, 1],
            ),
            (
                json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": "abc"}),
                32001,
                vec![0, 0, 0, 5, 5, 1, 1],
            ),
            (
                json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": "abc", "blocksize": 64}),
                32001,
                vec![0, 0, 0, 64, 5, 64, 1],
            ),
            (
                json!({"id": "blosc", "cname": "lz4", "shuffle": "abc", "blocksize": "x"}),
                32001,
                vec![0, 0, 0, 9, 9, 9, 1],
            ),
            // Zarr v3's shuffle names mean nothing to netcdf-c in Zarr v2.
            (
                json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": "bitshuffle", "blocksize": 0}),
                32001,
                vec![0, 0, 0, 0, 5, 0, 1],
            ),
            // An unsigned int keeps the low 32 bits of a shuffle out of its range.
            (
                json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 4294967296u64, "blocksize": 0}),
                32001,
                vec![0, 0, 0, 0, 5, 0, 1],
            ),
            (
                json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": -0.5, "blocksize": 0}),
                32001,
                vec![0, 0, 0, 0, 5, 0, 1],
            ),
        ];
        for (codec, id, params) in cases {
            assert_eq!(
                hdf5_filter(&codec, 4),
                Some(Hdf5Filter { id, params }),
                "{codec}"
            );
        }
    }

    #[test]
    fn zarr_v3_parameters_left_out_are_zarr_python_s() {
        // zarr-python 3.1.6 opens a v3 blosc without members as BloscCodec(cname="zstd",
        // clevel=5, blocksize=0) with shuffle "shuffle", or "bitshuffle" for 1-byte items
        // (a `null` shuffle the same, whatever the typesize), and a zstd without a level
        // as ZstdCodec(level=0): an NCZarr copy holds those, which netcdf-c reports so.
        let blosc = |config: Value, esize: usize| {
            hdf5_filter(&json!({"name": "blosc", "configuration": config}), esize)
        };
        let filter = |shuffle: u64, compressor: u64| {
            Some(Hdf5Filter {
                id: 32001,
                params: vec![0, 0, 0, 0, 5, shuffle, compressor],
            })
        };
        assert_eq!(blosc(json!({}), 4), filter(1, 5));
        assert_eq!(blosc(json!({}), 1), filter(2, 5));
        assert_eq!(
            blosc(json!({"shuffle": null, "typesize": 1}), 8),
            filter(1, 5)
        );
        assert_eq!(blosc(json!({"cname": "lz4"}), 2), filter(1, 1));
        assert_eq!(blosc(json!({"shuffle": "noshuffle"}), 2), filter(0, 5));
        assert_eq!(blosc(json!({"shuffle": "bitshuffle"}), 2), filter(2, 5));
        // A shuffle zarr-python does not know has no numcodecs form.
        assert_eq!(blosc(json!({"shuffle": "twice"}), 2), None);
        let zstd = json!({"name": "zstd", "configuration": {}});
        assert_eq!(
            hdf5_filter(&zstd, 4),
            Some(Hdf5Filter {
                id: 32015,
                params: vec![0]
            })
        );
        // netcdf-c has no filter for gzip, whatever its level.
        assert_eq!(
            hdf5_filter(&json!({"name": "gzip", "configuration": {}}), 4),
            None
        );
    }

    #[test]
    fn quotes_and_backslashes_are_escaped() {
        assert_eq!(quoted(r#"[{"a": "b\c"}]"#), r#""[{\"a\": \"b\\c\"}]""#);
    }
}
