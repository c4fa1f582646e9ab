//! numcodecs `blosc`, through c-blosc 1.x (the library numcodecs bundles) and its thread-safe
//! `_ctx` entry points.

use std::ffi::CString;
use std::os::raw::{c_int, c_void};

use super::{too_large, Codec, Config, EncodingParam};
use serde_json::Value;

use crate::error::{capped, quoted};
use crate::{Error, Result};

/// The compressors numcodecs' blosc compresses with. c-blosc here is built with `snappy`
/// too, which decompresses chunks other tools wrote (a buffer's header names its
/// compressor), but numcodecs, and so zarr-python, neither writes nor reads it.
const CNAMES: [&str; 5] = ["blosclz", "lz4", "lz4hc", "zlib", "zstd"];

/// numcodecs' `AUTOSHUFFLE`: bit-shuffle for 1-byte items, byte-shuffle otherwise.
const AUTOSHUFFLE: i64 = -1;

fn codec_error(reason: impl Into<String>) -> Error {
    Error::Codec {
        codec: "blosc".to_string(),
        reason: reason.into(),
    }
}

/// The decoded size a blosc buffer's header declares, checked against the input's length and
/// refused beyond `max_len`.
fn decoded_size(input: &[u8], max_len: usize) -> Result<usize> {
    let mut nbytes: usize = 0;
    // SAFETY: validate reads at most `input.len()` bytes (it refuses fewer than the 16-byte
    // header before reading) and writes one usize.
    let rc = unsafe {
        blosc_src::blosc_cbuffer_validate(input.as_ptr().cast::<c_void>(), input.len(), &mut nbytes)
    };
    if rc != 0 {
        return Err(codec_error(format!(
            "invalid blosc header ({} bytes of input)",
            input.len()
        )));
    }
    if nbytes > max_len {
        return Err(too_large("blosc", max_len));
    }
    Ok(nbytes)
}

/// Decompresses `input`, whose header [`decoded_size`] validated as `nbytes`, to `dest`.
///
/// # Safety
/// `dest` must be valid for writes of `nbytes` bytes.
unsafe fn decompress(input: &[u8], dest: *mut u8, nbytes: usize) -> Result<()> {
    if nbytes == 0 {
        return Ok(());
    }
    // SAFETY: the header was validated against the input length, which c-blosc documents as
    // making decompression safe to attempt; it writes at most `nbytes` bytes to `dest`, which
    // the caller guarantees are writable.
    let n = unsafe {
        blosc_src::blosc_decompress_ctx(
            input.as_ptr().cast::<c_void>(),
            dest.cast::<c_void>(),
            nbytes,
            1,
        )
    };
    if usize::try_from(n).ok() != Some(nbytes) {
        return Err(codec_error(format!(
            "decompression failed (code {n}) for {nbytes} bytes"
        )));
    }
    Ok(())
}

/// numcodecs `Blosc(cname, clevel, shuffle, blocksize, typesize)`. Every parameter only
/// serves compressing: a blosc buffer's header records the compressor, shuffle, type size
/// and block size it was made with, which is all decompressing reads.
#[derive(Debug, Clone)]
pub struct Blosc {
    settings: EncodingParam<Settings>,
}

/// The arguments of `blosc_compress_ctx`.
#[derive(Debug, Clone)]
struct Settings {
    cname: CString,
    clevel: c_int,
    /// c-blosc's `doshuffle` (0, 1 or 2), `AUTOSHUFFLE` already resolved.
    shuffle: c_int,
    blocksize: usize,
    typesize: usize,
}

impl Blosc {
    /// From `{"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}`,
    /// optionally with `"typesize"`; otherwise the typesize is the array's `element_size`, as
    /// numcodecs takes it from the chunk's dtype. A parameter c-blosc cannot compress with
    /// (`clevel` 12, `shuffle` 7, compressor `lzma`) fails encoding, not building: numcodecs
    /// reads such a store, and fails only when it compresses.
    pub fn from_config(cfg: &Config<'_>, element_size: usize) -> Result<Self> {
        Ok(Blosc {
            settings: EncodingParam::from(Settings::from_config(cfg, element_size)),
        })
    }
}

/// The configuration of a Zarr v3 `blosc` codec that compresses as numcodecs' `Blosc` of
/// `cfg` does on items of `element_size` bytes: the same arguments to c-blosc, each in the
/// type zarr-python 3 requires (integers, the shuffle by name), `AUTOSHUFFLE` resolved as
/// numcodecs resolves it, and the `typesize` numcodecs passes on. A parameter numcodecs
/// cannot compress with is its [`Error::Codec`] or [`Error::CodecOutOfRange`].
pub fn zarr_v3_configuration(cfg: &Config<'_>, element_size: usize) -> Result<Value> {
    let settings = Settings::from_config(cfg, element_size)?;
    let shuffle = match settings.shuffle {
        0 => "noshuffle",
        2 => "bitshuffle",
        _ => "shuffle",
    };
    Ok(serde_json::json!({
        "cname": settings.cname.to_string_lossy(),
        "clevel": settings.clevel,
        "shuffle": shuffle,
        "typesize": settings.typesize,
        // The C int numcodecs passes, not the size_t c-blosc makes of a negative one.
        "blocksize": cfg.c_int("blocksize", 0)?,
    }))
}

impl Settings {
    /// The arguments numcodecs 0.16 compresses with: `clevel`, `shuffle` and `blocksize` are
    /// made C `int`s ([`Config::c_int`]: `5.7` is 5; a string, `null` or a value beyond
    /// one fails); `cname` must be a string (numcodecs encodes it to bytes); a `typesize`
    /// that is a Python `int` (an integer or a boolean) must be at least 1 and is passed on,
    /// any other value leaves the chunk's item size in its place.
    fn from_config(cfg: &Config<'_>, element_size: usize) -> Result<Self> {
        let cname = match cfg.params.get("cname") {
            None => "lz4",
            Some(Value::String(s)) => s.as_str(),
            Some(v) => {
                return Err(cfg.error(format!(
                    "parameter \"cname\" is not a string: {}",
                    capped(&v.to_string())
                )))
            }
        };
        if !CNAMES.contains(&cname) {
            return Err(cfg.error(format!(
                "unknown blosc compressor {} (numcodecs' blosc has {})",
                quoted(cname),
                CNAMES.join(", ")
            )));
        }
        let cname = CString::new(cname).map_err(|_| cfg.error("NUL in cname"))?;
        // SAFETY: cname is a NUL-terminated string; the function only compares it.
        if unsafe { blosc_src::blosc_compname_to_compcode(cname.as_ptr()) } < 0 {
            return Err(cfg.error(format!(
                "blosc compressor {} not built in",
                quoted(&cname.to_string_lossy())
            )));
        }
        let clevel = cfg.within("clevel", cfg.c_int("clevel", 5)?, 0..=9)?;
        let typesize = match cfg.params.get("typesize") {
            Some(Value::Bool(b)) => Some(i64::from(*b)),
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => {
                Some(n.as_i64().unwrap_or(i64::MAX))
            }
            _ => None,
        };
        let typesize = match typesize {
            // c-blosc keeps the type size as a 32-bit int: numcodecs' 2^31 arrives
            // negative and is refused there.
            Some(t) => usize::try_from(cfg.within("typesize", t, 1..=i64::from(c_int::MAX))?)
                .map_err(|_| cfg.error("bad typesize"))?,
            None => element_size.max(1),
        };
        let shuffle = match cfg.within("shuffle", cfg.c_int("shuffle", 1)?, -1..=2)? {
            AUTOSHUFFLE if typesize == 1 => 2,
            AUTOSHUFFLE => 1,
            s => s,
        };
        // numcodecs passes a C int on to the same c-blosc, which takes a size_t and bounds a
        // forced block size itself: a negative one is converted as C converts it.
        let blocksize = cfg.c_int("blocksize", 0)? as usize;
        Ok(Settings {
            cname,
            clevel: c_int::try_from(clevel).map_err(|_| cfg.error("bad clevel"))?,
            shuffle: c_int::try_from(shuffle).map_err(|_| cfg.error("bad shuffle"))?,
            blocksize,
            typesize,
        })
    }
}

impl Codec for Blosc {
    fn id(&self) -> &str {
        "blosc"
    }

    fn check_encodable(&self) -> Result<()> {
        self.settings.get().map(|_| ())
    }

    fn decode(&self, input: Vec<u8>) -> Result<Vec<u8>> {
        self.decode_bounded(input, usize::MAX)
    }

    fn decode_bounded(&self, input: Vec<u8>, max_len: usize) -> Result<Vec<u8>> {
        let nbytes = decoded_size(&input, max_len)?;
        let mut out: Vec<u8> = Vec::with_capacity(nbytes);
        // SAFETY: `out`'s allocation holds `nbytes` bytes.
        unsafe { decompress(&input, out.as_mut_ptr(), nbytes)? };
        // SAFETY: c-blosc wrote exactly `nbytes` bytes.
        unsafe { out.set_len(nbytes) };
        Ok(out)
    }

    fn decode_into(&self, input: &[u8], out: &mut [u8]) -> Result<usize> {
        let nbytes = decoded_size(input, out.len())?;
        // SAFETY: `out` holds at least `nbytes` bytes.
        unsafe { decompress(input, out.as_mut_ptr(), nbytes)? };
        Ok(nbytes)
    }

    fn encode(&self, input: Vec<u8>) -> Result<Vec<u8>> {
        let settings = self.settings.get()?;
        let max_buffer = blosc_src::BLOSC_MAX_BUFFERSIZE as usize;
        if input.len() > max_buffer {
            return Err(codec_error(format!(
                "chunk of {} bytes exceeds blosc's limit of {max_buffer}",
                input.len()
            )));
        }
        let capacity = input.len() + blosc_src::BLOSC_MAX_OVERHEAD as usize;
        let mut out: Vec<u8> = Vec::with_capacity(capacity);
        // SAFETY: source and destination are valid for the lengths passed and do not overlap;
        // cname is NUL-terminated; c-blosc writes at most `capacity` bytes.
        let n = unsafe {
            blosc_src::blosc_compress_ctx(
                settings.clevel,
                settings.shuffle,
                settings.typesize,
                input.len(),
                input.as_ptr().cast::<c_void>(),
                out.as_mut_ptr().cast::<c_void>(),
                capacity,
                settings.cname.as_ptr(),
                settings.blocksize,
                1,
            )
        };
        let n = usize::try_from(n)
            .ok()
            .filter(|n| (1..=capacity).contains(n))
            .ok_or_else(|| codec_error(format!("compression failed (code {n})")))?;
        // SAFETY: c-blosc reported writing `n` bytes, within the capacity.
        unsafe { out.set_len(n) };
        Ok(out)
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        decoded_len.saturating_add(blosc_src::BLOSC_MAX_OVERHEAD as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn blosc(v: serde_json::Value, es: usize) -> Result<Blosc> {
        Blosc::from_config(
            &Config {
                id: "blosc",
                params: v.as_object().unwrap(),
            },
            es,
        )
    }

    #[test]
    fn any_blocksize_numcodecs_writes_with_is_written_with() {
        let data: Vec<u8> = (0..4000u32).flat_map(|i| (i % 13).to_le_bytes()).collect();
        for blocksize in [-1i64, -5, 0, 256, i32::MAX.into(), i32::MIN.into()] {
            let b = blosc(json!({"id": "blosc", "blocksize": blocksize}), 4).unwrap();
            b.check_encodable().unwrap();
            let stored = b.encode(data.clone()).unwrap();
            assert_eq!(b.decode(stored).unwrap(), data, "blocksize {blocksize}");
        }
        // numcodecs 0.16.6 cannot make a C int of these ("OverflowError"): read, not written.
        let stored = blosc(json!({"id": "blosc"}), 4)
            .unwrap()
            .encode(data.clone())
            .unwrap();
        for blocksize in [i64::from(i32::MAX) + 1, i64::from(i32::MIN) - 1, 1 << 40] {
            let b = blosc(json!({"id": "blosc", "blocksize": blocksize}), 4).unwrap();
            assert!(
                matches!(b.check_encodable(), Err(Error::CodecOutOfRange { .. })),
                "{blocksize}"
            );
            assert_eq!(b.decode(stored.clone()).unwrap(), data, "{blocksize}");
        }
        // A float is truncated as Python's int() truncates it ("5.5" writes as 5); a string
        // and null are a TypeError there, and 1e12 an OverflowError.
        for (blocksize, writes) in [
            (json!(5.5), true),
            (json!(-1.0), true),
            (json!(1e12), false),
            (json!("5"), false),
            (json!(null), false),
        ] {
            let b = blosc(json!({"id": "blosc", "blocksize": blocksize}), 4).unwrap();
            assert_eq!(b.check_encodable().is_ok(), writes, "{blocksize}");
            if writes {
                let stored = b.encode(data.clone()).unwrap();
                assert_eq!(b.decode(stored).unwrap(), data, "{blocksize}");
            }
            assert_eq!(b.decode(stored.clone()).unwrap(), data, "{blocksize}");
        }
    }

    #[test]
    fn clevel_shuffle_and_typesize_are_taken_as_numcodecs_takes_them() {
        // numcodecs 0.16.6 compressing 500 doubles (item size 8): clevel and shuffle are
        // truncated to C ints (5.7 compresses at 5, shuffle 2.9 bit-shuffles, 0.5 does not
        // shuffle, -1.5 is AUTOSHUFFLE); a typesize that is no Python int ("4", 4.5, null)
        // leaves the item size in the header, True is 1.
        let data: Vec<u8> = (0..500u32)
            .flat_map(|i| f64::from(i % 17).to_le_bytes())
            .collect();
        const SHUFFLED: u8 = 0x1;
        const BITSHUFFLED: u8 = 0x4;
        for (config, typesize, shuffled) in [
            (json!({"clevel": 5.7}), 8, SHUFFLED),
            (json!({"clevel": 9.9}), 8, SHUFFLED),
            (json!({"clevel": -0.5}), 8, 0),
            (json!({"clevel": true}), 8, SHUFFLED),
            (json!({"shuffle": 1.5}), 8, SHUFFLED),
            (json!({"shuffle": 2.9}), 8, BITSHUFFLED),
            (json!({"shuffle": 0.5}), 8, 0),
            (json!({"shuffle": -1.5}), 8, SHUFFLED),
            (json!({"shuffle": true}), 8, SHUFFLED),
            (json!({"typesize": "4"}), 8, SHUFFLED),
            (json!({"typesize": 4.5}), 8, SHUFFLED),
            (json!({"typesize": null}), 8, SHUFFLED),
            (json!({"typesize": 4}), 4, SHUFFLED),
            (json!({"typesize": true}), 1, SHUFFLED),
        ] {
            let mut full = json!({"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1});
            for (k, v) in config.as_object().unwrap() {
                full[k] = v.clone();
            }
            let b = blosc(full, 8).unwrap();
            b.check_encodable().unwrap();
            let enc = b.encode(data.clone()).unwrap();
            assert_eq!(enc[3], typesize, "{config}");
            // clevel 0 stores the data as is, unshuffled.
            let clevel0 = config["clevel"].as_f64().is_some_and(|c| c < 1.0);
            if !clevel0 {
                assert_eq!(enc[2] & (SHUFFLED | BITSHUFFLED), shuffled, "{config}");
            }
            assert_eq!(b.decode(enc).unwrap(), data, "{config}");
        }
    }

    #[test]
    fn snappy_chunks_are_read_but_not_written() {
        // numcodecs 0.16.6's blosc refuses "snappy" ("bad compressor or compressor not
        // supported"); chunks c-blosc made with it still decompress.
        let data: Vec<u8> = (0..4000u32).flat_map(|i| (i % 13).to_le_bytes()).collect();
        let snappy_writer = Blosc {
            settings: EncodingParam::from(Ok(Settings {
                cname: CString::new("snappy").unwrap(),
                clevel: 5,
                shuffle: 1,
                blocksize: 0,
                typesize: 4,
            })),
        };
        let stored = snappy_writer.encode(data.clone()).unwrap();
        let b = blosc(json!({"id": "blosc", "cname": "snappy"}), 4).unwrap();
        assert_eq!(b.decode(stored).unwrap(), data);
        match b.check_encodable() {
            Err(Error::Codec { reason, .. }) => {
                assert!(
                    reason.contains("unknown blosc compressor \"snappy\""),
                    "{reason}"
                )
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn all_compressors_and_shuffles_round_trip() {
        let data: Vec<u8> = (0..20_000u32)
            .flat_map(|i| ((i as f64).sin() * 1000.0).to_le_bytes())
            .collect();
        for cname in CNAMES {
            for shuffle in [-1, 0, 1, 2] {
                let b = blosc(
                    json!({"id": "blosc", "cname": cname, "clevel": 5, "shuffle": shuffle,
                           "blocksize": 0}),
                    8,
                )
                .unwrap();
                let enc = b.encode(data.clone()).unwrap();
                // Header: format version 2, typesize 8, nbytes little-endian.
                assert_eq!(enc[0], 2);
                assert_eq!(enc[3], 8);
                assert_eq!(&enc[4..8], &(data.len() as u32).to_le_bytes());
                assert_eq!(b.decode(enc.clone()).unwrap(), data, "{cname} {shuffle}");
                assert!(b.decode_bounded(enc, data.len() - 1).is_err());
            }
        }
    }

    #[test]
    fn bad_configs_and_inputs_are_errors() {
        let b = blosc(json!({"id": "blosc"}), 4).unwrap();
        assert!(b.decode(vec![]).is_err());
        assert!(b.decode(vec![0; 15]).is_err());
        let mut enc = b.encode(vec![5u8; 1000]).unwrap();
        enc.push(0);
        assert!(
            b.decode(enc.clone()).is_err(),
            "length disagrees with header"
        );
        enc.pop();
        enc.pop();
        assert!(b.decode(enc).is_err(), "truncated");
        // c-blosc treats typesizes above 255 (long fixed strings) as a byte stream.
        let wide = blosc(json!({"id": "blosc"}), 300).unwrap();
        let enc = wide.encode(vec![9u8; 3000]).unwrap();
        assert_eq!(wide.decode(enc).unwrap(), vec![9u8; 3000]);
        // An empty chunk encodes to a bare header and decodes back.
        let empty = b.encode(vec![]).unwrap();
        assert_eq!(b.decode(empty).unwrap(), b"");
    }

    #[test]
    fn parameters_only_compressing_uses_stop_encoding_not_decoding() {
        // c-blosc records compressor, shuffle, type size and block size in the header:
        // numcodecs 0.16.6 decodes a buffer whatever its configuration says, and fails to
        // encode with clevel 12 ("error during blosc compression: -10"), shuffle 7, or a
        // compressor it lacks.
        let data: Vec<u8> = (0..2000u32).flat_map(|i| (i % 9).to_le_bytes()).collect();
        let stored = blosc(json!({"id": "blosc"}), 4)
            .unwrap()
            .encode(data.clone())
            .unwrap();
        for (config, says) in [
            (
                json!({"id": "blosc", "clevel": 12}),
                "\"clevel\" = 12 is outside 0..=9",
            ),
            (
                json!({"id": "blosc", "clevel": -1}),
                "\"clevel\" = -1 is outside 0..=9",
            ),
            (
                json!({"id": "blosc", "shuffle": 7}),
                "\"shuffle\" = 7 is outside -1..=2",
            ),
            (
                json!({"id": "blosc", "cname": "lzma"}),
                "unknown blosc compressor \"lzma\"",
            ),
            (
                json!({"id": "blosc", "typesize": -4}),
                "\"typesize\" = -4 is outside 1..=2147483647",
            ),
            (
                json!({"id": "blosc", "typesize": 0}),
                "\"typesize\" = 0 is outside 1..=2147483647",
            ),
            (
                json!({"id": "blosc", "typesize": 2147483648u64}),
                "\"typesize\" = 2147483648 is outside 1..=2147483647",
            ),
            (
                json!({"id": "blosc", "clevel": null}),
                "\"clevel\" is not an integer: null",
            ),
            (
                json!({"id": "blosc", "clevel": "5"}),
                "\"clevel\" is not an integer: \"5\"",
            ),
            (
                json!({"id": "blosc", "clevel": 2147483648u64}),
                "\"clevel\" = 2147483648 is outside",
            ),
            (
                json!({"id": "blosc", "shuffle": "1"}),
                "\"shuffle\" is not an integer: \"1\"",
            ),
            (
                json!({"id": "blosc", "shuffle": null}),
                "\"shuffle\" is not an integer: null",
            ),
            (
                json!({"id": "blosc", "shuffle": 3.5}),
                "\"shuffle\" = 3 is outside -1..=2",
            ),
            (
                json!({"id": "blosc", "cname": null}),
                "\"cname\" is not a string: null",
            ),
            (
                json!({"id": "blosc", "cname": 5}),
                "\"cname\" is not a string: 5",
            ),
        ] {
            let b = blosc(config.clone(), 4).unwrap();
            assert_eq!(b.decode(stored.clone()).unwrap(), data, "{config}");
            let mut out = vec![0u8; data.len()];
            assert_eq!(b.decode_into(&stored, &mut out).unwrap(), data.len());
            for err in [b.check_encodable(), b.encode(data.clone()).map(|_| ())] {
                match err {
                    Err(
                        Error::Codec { codec, reason } | Error::CodecOutOfRange { codec, reason },
                    ) => {
                        assert_eq!(codec, "blosc");
                        assert!(reason.contains(says), "{config}: {reason}");
                    }
                    other => panic!("{config}: {other:?}"),
                }
            }
        }
        assert!(blosc(json!({"id": "blosc", "clevel": 9}), 4)
            .unwrap()
            .check_encodable()
            .is_ok());
    }
}
