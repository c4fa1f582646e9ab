//! Codec chains of new variables: the words and JSON lists `--codec` and `_Codecs` accept,
//! and the rewrites that keep a chain readable by every reader of the dialect (netcdf-c's
//! shuffle of strings, numcodecs' element sizes, the codecs netcdf-c lacks).

use serde_json::{json, Value};

use crate::codec::{netcdf_c_zstd_level, NETCDF_STRING_ELEMENT, NUMCODECS_ELEMENTSIZE};
use crate::meta::writer_v3;
use crate::model::CodecSpec;
use crate::{Error, Result};

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
            return Codecs::from_json(spec).map_err(Error::into_usage);
        }
        let mut chain = Vec::new();
        for word in spec.split(',').map(str::trim).filter(|w| !w.is_empty()) {
            let mut parts = word.split(':');
            let name = parts.next().unwrap_or("").to_ascii_lowercase();
            let args: Vec<&str> = parts.collect();
            let said = |why: &str| format!("invalid codec {word:?}: {why} (forms: {CODEC_FORMS})");
            // A word of the wrong form is a command line that cannot be parsed; a number out
            // of its codec's range is a value refused, as `copy -d 10` is.
            let bad = |why: &str| Error::Usage(said(why));
            let num = |i: usize, what: &str, default: i64, lo: i64, hi: i64| -> Result<i64> {
                let Some(a) = args.get(i) else {
                    return Ok(default);
                };
                let range = format!("{what} {a:?} is not from {lo} to {hi}");
                match a.parse::<i64>() {
                    Ok(n) if (lo..=hi).contains(&n) => Ok(n),
                    Ok(_) => Err(Error::Invalid(said(&range))),
                    Err(_) => Err(bad(&format!(
                        "{what} {a:?} is not a number from {lo} to {hi}"
                    ))),
                }
            };
            // A codec that takes no argument must not seem to take one (`lz4:9`, `shuffle:4`).
            let most = match name.as_str() {
                "blosc" => 3,
                "zlib" | "deflate" | "gzip" | "zstd" | "bz2" | "bzip2" => 1,
                "none" | "shuffle" | "fletcher32" | "lz4" => 0,
                _ => usize::MAX,
            };
            if args.len() > most {
                return Err(bad(&match most {
                    0 => format!("{name} takes no `:` argument"),
                    _ => format!("{name} takes at most {most} `:` argument(s)"),
                }));
            }
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
            chain.push(codec);
        }
        Ok(Codecs::from_chain(chain))
    }

    /// A `_Codecs` text: a JSON list of numcodecs objects (`{"id": "zlib", "level": 1}`) or
    /// of Zarr v3 codecs (`{"name": "numcodecs.zlib", "configuration": {"level": 1}}`, as
    /// `dump -s` shows a Zarr v3 variable's chain), or of both. Zarr v3's `bytes`,
    /// `transpose` and string codecs say how values become bytes, which the target's type
    /// decides, so they are left out; so is the `vlen-utf8` or `vlen-bytes` that starts a
    /// Zarr v2 object (`|O`) string array's filters (as `dump -s` shows xarray's strings).
    pub fn from_json(text: &str) -> Result<Codecs> {
        let v: Value = serde_json::from_str(text)
            .map_err(|e| Error::Invalid(format!("_Codecs is not JSON ({e}): {text}")))?;
        let Value::Array(list) = v else {
            return Err(Error::Invalid(format!(
                "_Codecs is not a JSON list: {text}"
            )));
        };
        let mut chain = Vec::with_capacity(list.len());
        let string_encoding = crate::codec::is_object_string_filter(&list);
        for c in list.into_iter().skip(usize::from(string_encoding)) {
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
                // HDF5's blosc parameters (as ncdump -s prints them after the id): three
                // reserved (HDF5 keeps its filter revision, blosc's version and the type
                // size there), a block size (HDF5 keeps the chunk's bytes), then level,
                // shuffle and compressor. netcdf-c 4.10.1 refuses fewer than seven, and
                // stores the fourth as the codec's blocksize, in its own order of members.
                32001 => {
                    if nums.len() < 8 {
                        return Err(Error::Invalid(format!(
                            "blosc filter {spec:?} has {} parameter(s), where netcdf-c takes \
                             7: reserved,reserved,reserved,blocksize,clevel,shuffle,compressor",
                            nums.len() - 1
                        )));
                    }
                    let cname = ["blosclz", "lz4", "lz4hc", "snappy", "zlib", "zstd"]
                        .get(usize::try_from(nums[7]).unwrap_or(usize::MAX))
                        .ok_or_else(|| {
                            Error::Invalid(format!(
                                "blosc filter {spec:?}: compressor {} is none of blosc's \
                                 (0 blosclz, 1 lz4, 2 lz4hc, 3 snappy, 4 zlib, 5 zstd)",
                                nums[7]
                            ))
                        })?;
                    json!({"id": "blosc", "clevel": nums[5], "blocksize": nums[4],
                           "cname": cname, "shuffle": nums[6]})
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

/// The shuffle of a string variable's chunks of `chunk_bytes` bytes as every reader decodes
/// it: netcdf-c shuffles strings in 8-byte elements whatever its metadata says, numcodecs
/// in the recorded element size and only buffers that are a multiple of it. So the shuffle
/// is recorded as 8, or dropped when the chunks are not a multiple of 8 bytes.
pub(super) fn string_shuffle(codecs: CodecSpec, chunk_bytes: u64) -> CodecSpec {
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
pub(super) fn without_shuffle(codecs: CodecSpec) -> CodecSpec {
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

/// numcodecs' blosc `AUTOSHUFFLE`: bit-shuffle for 1-byte items, byte-shuffle otherwise.
const AUTOSHUFFLE: i64 = -1;

/// The compressors of numcodecs' blosc (c-blosc also has `snappy`, which numcodecs is built
/// without, and netcdf-c refuses a dataset using it).
pub const BLOSC_CNAMES: [&str; 5] = ["blosclz", "lz4", "lz4hc", "zlib", "zstd"];

/// A chain of an NCZarr variable as netcdf-c reads it, the values unchanged: a shuffle by
/// 1-byte elements (which changes nothing) is left out and one by another element size than
/// the type's becomes netcdf-c's `elementsize: 0` (netcdf-c shuffles by the type size
/// whatever the metadata says, so it would decode other values), and on Zarr v2 a negative
/// zstd level is stored as netcdf-c stores it ([`netcdf_c_zstd_level`]; netcdf-c refuses to
/// open a dataset holding a negative number), and blosc's `AUTOSHUFFLE` as the shuffle it
/// resolves to (netcdf-c compresses with none other than 0, 1 or 2). On Zarr v3 (`zarr_version` 3), which netcdf-c
/// does not write, the level stays signed, the only form zarr-python 3 opens. Other codecs
/// netcdf-c lacks are kept, with a warning naming the variable it will not read.
/// `element_size` is what netcdf-c shuffles the variable by ([`netcdf_element_size`]).
///
/// [`netcdf_element_size`]: crate::codec::netcdf_element_size
pub(super) fn for_netcdf_c(
    fqn: &str,
    codecs: CodecSpec,
    element_size: usize,
    zarr_version: u8,
) -> CodecSpec {
    let CodecSpec::V2 {
        filters,
        compressor,
    } = codecs
    else {
        return codecs;
    };
    let readable = |c: Value| -> Option<Value> {
        let int = |key: &str| c.get(key).and_then(Value::as_i64);
        match codec_id(&c) {
            "shuffle" => {
                let n = c
                    .get("elementsize")
                    .map_or(Some(NUMCODECS_ELEMENTSIZE as i64), |n| n.as_i64());
                if n == Some(1) && element_size != 1 {
                    log::info!(
                        "{fqn}: its shuffle of 1-byte elements, which changes nothing, is left \
                         out (netcdf-c would shuffle by the type size {element_size})"
                    );
                    return None;
                }
                if n.is_some_and(|n| n != 0 && n != element_size as i64) {
                    log::warn!(
                        "{fqn}: shuffled by its type size {element_size}, not {} (netcdf-c \
                         shuffles by the type size, whatever the metadata says); the values \
                         are the same",
                        n.unwrap_or_default()
                    );
                    return Some(json!({"id": "shuffle", "elementsize": 0}));
                }
                Some(c)
            }
            "zstd" => match int("level") {
                Some(level) if level < 0 && zarr_version == 2 => {
                    let stored = netcdf_c_zstd_level(level);
                    log::info!(
                        "{fqn}: zstd level {level} stored as {stored}, the form netcdf-c \
                         writes and reads (zarr-python reads the values but cannot write \
                         with that level)"
                    );
                    let mut c = c.clone();
                    c["level"] = json!(stored);
                    Some(c)
                }
                _ => Some(c),
            },
            // netcdf-c's blosc hands the shuffle to c-blosc, which compresses with 0, 1 or 2
            // only: numcodecs' AUTOSHUFFLE (a Zarr v3 blosc without a shuffle) is resolved
            // as numcodecs resolves it.
            "blosc" if int("shuffle") == Some(AUTOSHUFFLE) => {
                let mut c = c.clone();
                c["shuffle"] = json!(if element_size == 1 { 2 } else { 1 });
                Some(c)
            }
            id if !NETCDF_CODECS.contains(&id) => {
                log::warn!("{fqn}: netcdf-c has no codec {id}, so it will not read this variable");
                Some(c)
            }
            _ => Some(c),
        }
    };
    let filters: Vec<Value> = filters.into_iter().filter_map(readable).collect();
    match compressor.and_then(readable) {
        Some(compressor) => CodecSpec::V2 {
            filters,
            compressor: Some(compressor),
        },
        // A chain kept whole in the filters (as zarr-python may write it) whose last filter
        // is now a compressor stores it as netcdf-c does, as the compressor.
        None => Codecs::from_chain(filters).spec(),
    }
}

/// Refuses a chain whose chunks of `chunk_bytes` bytes (elements of `dtype_size` bytes)
/// numcodecs, and so zarr-python, could not decode: a blosc compressor it lacks (`snappy`),
/// and a shuffle over a stream that is not a whole number of its elements (numcodecs refuses
/// to unshuffle one): after a compressor, whose output has any length, or with an element
/// size that does not divide the chunk's bytes.
pub(super) fn check_numcodecs_chain(
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
