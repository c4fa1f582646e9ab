//! numcodecs `zstd`: one or more Zstandard frames, with or without a content size.

use std::cell::RefCell;

use super::{compressed_bound, read_bounded, too_large, Codec, Config, EncodingParam};
use crate::{Error, Result};
use serde_json::Value;

thread_local! {
    // A decompression context holds ~100 KiB of tables; reusing one per thread saves an
    // allocation and initialisation per chunk.
    static DCTX: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

fn codec_error(e: impl std::fmt::Display) -> Error {
    Error::Codec {
        codec: "zstd".to_string(),
        reason: e.to_string(),
    }
}

/// Runs `f` with this thread's decompression context on `input`, whose output may not
/// exceed `max_len` bytes.
fn decompress<R>(
    input: &[u8],
    max_len: usize,
    f: impl FnOnce(&mut zstd::bulk::Decompressor<'static>) -> std::io::Result<R>,
) -> Result<R> {
    DCTX.with(|cell| {
        let mut slot = cell.borrow_mut();
        let dctx = match slot.as_mut() {
            Some(d) => d,
            None => slot.insert(zstd::bulk::Decompressor::new().map_err(codec_error)?),
        };
        f(dctx).map_err(|e| {
            // zstd cannot tell "too small a buffer" from other errors through io::Error kinds,
            // so look at the frame header for a clearer message.
            match zstd::zstd_safe::get_frame_content_size(input) {
                Ok(Some(n)) if n > max_len as u64 => too_large("zstd", max_len),
                _ => codec_error(e),
            }
        })
    })
}

/// numcodecs `Zstd(level, checksum)`. Both only serve compressing: a frame's header says
/// whether it carries a checksum, which decompressing then checks.
#[derive(Debug, Clone)]
pub struct Zstd {
    level: EncodingParam<i32>,
    checksum: bool,
}

/// The level a stored zstd `level` means. netcdf-c stores a negative level as its unsigned
/// 32-bit two's complement (-5 as 4294967291) and reads it back so; numcodecs stores it as
/// it is. Any other level is the level itself.
pub fn zstd_level_meant(stored: i64) -> i64 {
    match u32::try_from(stored) {
        Ok(n) if stored > i64::from(i32::MAX) => i64::from(n as i32),
        _ => stored,
    }
}

/// The `level` netcdf-c stores for zstd level `level` (see [`zstd_level_meant`]): a negative one
/// as its unsigned 32-bit two's complement, the only form netcdf-c opens.
pub fn netcdf_c_zstd_level(level: i64) -> i64 {
    let level = level.clamp(i64::from(i32::MIN), i64::from(i32::MAX)) as i32;
    i64::from(level as u32)
}

/// The `level` of a Zarr v3 `zstd` codec for stored zstd level `stored`: the level it means
/// ([`zstd_level_meant`], so netcdf-c's unsigned form is the negative level again), within
/// libzstd's range as compressing clamps it. zarr-python 3 refuses a v3 level above 22, and
/// no netcdf-c writes Zarr v3, so its unsigned form has no reader to serve there.
pub fn zarr_v3_zstd_level(stored: i64) -> i64 {
    zstd_level_meant(stored).clamp(
        i64::from(zstd::zstd_safe::min_c_level()),
        i64::from(zstd::zstd_safe::max_c_level()),
    )
}

/// The level a numcodecs `zstd` configuration compresses with, before libzstd clamps it:
/// its `level` made a C `int` as numcodecs makes it ([`Config::c_int`]), or the negative
/// level netcdf-c's unsigned form means ([`zstd_level_meant`]).
pub fn compressing_level(cfg: &Config<'_>) -> Result<i64> {
    let netcdf_c_form = cfg
        .params
        .get("level")
        .and_then(Value::as_u64)
        .filter(|&u| u > i32::MAX as u64 && u <= u64::from(u32::MAX));
    match netcdf_c_form {
        Some(u) => Ok(zstd_level_meant(u as i64)),
        None => cfg.c_int("level", 0),
    }
}

impl Zstd {
    /// From `{"id": "zstd", "level": N, "checksum": false}`. Decompressing ignores the
    /// level, so any value is read, as numcodecs reads it. Compressing takes it as numcodecs
    /// makes a C `int` of it ([`Config::c_int`]: `5.5` is 5; a string, `null` or a value
    /// beyond one cannot be compressed with), except netcdf-c's unsigned form of a negative
    /// level, which means that level ([`zstd_level_meant`]); libzstd clamps a level beyond
    /// its range when compressing, as [`Codec::encode`] does here. `checksum` is the Python
    /// truth value of whatever it holds, as numcodecs takes it.
    pub fn from_config(cfg: &Config<'_>) -> Result<Self> {
        let level = EncodingParam::from(compressing_level(cfg))
            .map(|level| i32::try_from(level).map_err(|_| cfg.error("bad level")));
        // numcodecs takes the flag's Python truth value, whatever its type.
        let checksum = cfg.truth("checksum", false);
        Ok(Zstd { level, checksum })
    }
}

impl Codec for Zstd {
    fn id(&self) -> &str {
        "zstd"
    }

    fn check_encodable(&self) -> Result<()> {
        self.level.get().map(|_| ())
    }

    fn decode(&self, input: Vec<u8>) -> Result<Vec<u8>> {
        // Without a bound the size is unknown (frames need not record it): stream.
        let reader = zstd::stream::read::Decoder::with_buffer(&input[..]).map_err(codec_error)?;
        read_bounded(reader, "zstd", usize::MAX, input.len())
    }

    fn decode_bounded(&self, input: Vec<u8>, max_len: usize) -> Result<Vec<u8>> {
        if max_len == usize::MAX {
            return self.decode(input);
        }
        // One-shot decompression into a buffer of the bound works for frames with or without a
        // content size, and for concatenated frames.
        let mut out = Vec::with_capacity(max_len);
        decompress(&input, max_len, |d| {
            d.decompress_to_buffer(&input[..], &mut out)
        })?;
        Ok(out)
    }

    fn decode_into(&self, input: &[u8], out: &mut [u8]) -> Result<usize> {
        let max_len = out.len();
        decompress(input, max_len, |d| d.decompress_to_buffer(input, out))
    }

    fn encode(&self, input: Vec<u8>) -> Result<Vec<u8>> {
        let level = (*self.level.get()?).clamp(
            zstd::zstd_safe::min_c_level(),
            zstd::zstd_safe::max_c_level(),
        );
        let mut c = zstd::bulk::Compressor::new(level).map_err(codec_error)?;
        if self.checksum {
            c.set_parameter(zstd::zstd_safe::CParameter::ChecksumFlag(true))
                .map_err(codec_error)?;
        }
        c.compress(&input).map_err(codec_error)
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        compressed_bound(decoded_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn zstd(v: serde_json::Value) -> Zstd {
        Zstd::from_config(&Config {
            id: "zstd",
            params: v.as_object().unwrap(),
        })
        .unwrap()
    }

    #[test]
    fn frames_without_content_size_decode_bounded_and_unbounded() {
        let data: Vec<u8> = (0..5000u32).map(|i| (i % 251) as u8).collect();
        // The streaming encoder does not know the size up front, so records none.
        let mut streamed = zstd::stream::encode_all(&data[..], 3).unwrap();
        assert_eq!(
            zstd::zstd_safe::get_frame_content_size(&streamed).unwrap(),
            None
        );
        let z = zstd(json!({"id": "zstd", "level": 1}));
        assert_eq!(z.decode(streamed.clone()).unwrap(), data);
        assert_eq!(z.decode_bounded(streamed.clone(), 5000).unwrap(), data);
        assert!(z.decode_bounded(streamed.clone(), 4999).is_err());
        // Concatenated frames, as numcodecs' streaming decoder accepts.
        streamed.extend(z.encode(b"tail".to_vec()).unwrap());
        assert_eq!(z.decode(streamed.clone()).unwrap().len(), 5004);
        assert_eq!(
            z.decode_bounded(streamed.clone(), 5004).unwrap().len(),
            5004
        );
        // Straight into a caller's buffer: its start, and an error when it is too small.
        let mut out = vec![0u8; 6000];
        assert_eq!(z.decode_into(&streamed, &mut out).unwrap(), 5004);
        assert_eq!(&out[..5000], &data[..]);
        assert!(z.decode_into(&streamed, &mut out[..5003]).is_err());
        let sized = z.encode(data.clone()).unwrap();
        match z.decode_into(&sized, &mut out[..10]) {
            Err(Error::Codec { reason, .. }) => assert!(reason.contains("10"), "{reason}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn levels_beyond_the_range_are_read_and_clamped_when_writing() {
        // numcodecs.Zstd(level=23).encode(bytes(range(5))), written by numcodecs 0.16.6.
        let numcodecs_23 = [
            0x28, 0xb5, 0x2f, 0xfd, 0x20, 0x05, 0x29, 0x00, 0x00, 0x00, 0x01, 0x02, 0x03, 0x04,
        ];
        let z = zstd(json!({"id": "zstd", "level": 23}));
        assert_eq!(z.decode(numcodecs_23.to_vec()).unwrap(), [0, 1, 2, 3, 4]);
        let data: Vec<u8> = (0..4000u32).map(|i| (i % 13) as u8).collect();
        let at_max = zstd(json!({"id": "zstd", "level": 22}));
        assert_eq!(
            z.encode(data.clone()).unwrap(),
            at_max.encode(data.clone()).unwrap()
        );
        let below = zstd(json!({"id": "zstd", "level": -200000}));
        let enc = below.encode(data.clone()).unwrap();
        assert_eq!(below.decode(enc).unwrap(), data);
    }

    #[test]
    fn netcdf_c_unsigned_negative_levels_are_read_as_the_negative_level() {
        // netcdf-c 4.10.1 (netCDF4-python complevel=-5) stores {"id": "zstd", "level":
        // 4294967291}; its chunks decode whatever the level.
        let stored = zstd(json!({"id": "zstd", "level": 4294967291u64}));
        assert_eq!(stored.level.get().copied().unwrap(), -5);
        let data: Vec<u8> = (0..4000u32).map(|i| (i % 13) as u8).collect();
        let minus_5 = zstd::bulk::compress(&data, -5).unwrap();
        assert_eq!(stored.encode(data.clone()).unwrap(), minus_5);
        assert_eq!(stored.decode(minus_5).unwrap(), data);
        assert_eq!(
            zstd(json!({"id": "zstd", "level": 4294967295u64}))
                .level
                .get()
                .copied()
                .unwrap(),
            -1
        );
        // 2^31 - 1 is a level above the range (clamped when writing), not a negative one.
        assert_eq!(
            zstd(json!({"id": "zstd", "level": 2147483647}))
                .level
                .get()
                .copied()
                .unwrap(),
            i32::MAX
        );
        assert_eq!(netcdf_c_zstd_level(-5), 4294967291);
        assert_eq!(netcdf_c_zstd_level(-1), 4294967295);
        assert_eq!(zstd_level_meant(netcdf_c_zstd_level(-131072)), -131072);
    }

    #[test]
    fn levels_are_made_c_ints_as_numcodecs_makes_them() {
        // numcodecs 0.16.6: Zstd(level=5.5).encode(..) compresses at level 5 (Cython's int
        // truncates), -3.7 at -3; 1e10, 2**40, -2**31 - 1 and 2**32 (beyond netcdf-c's
        // unsigned form) raise OverflowError, "5" and None TypeError.
        let data: Vec<u8> = (0..4000u32).map(|i| (i % 13) as u8).collect();
        for (level, meant) in [
            (json!(5.5), 5),
            (json!(-3.7), -3),
            (json!(0.9), 0),
            (json!(true), 1),
            (json!(-2147483648i64), i32::MIN),
        ] {
            let z = zstd(json!({"id": "zstd", "level": level}));
            assert_eq!(z.level.get().copied().unwrap(), meant, "{level}");
            let clamped = meant.clamp(
                zstd::zstd_safe::min_c_level(),
                zstd::zstd_safe::max_c_level(),
            );
            let want = zstd::bulk::compress(&data, clamped).unwrap();
            assert_eq!(z.encode(data.clone()).unwrap(), want, "{level}");
        }
        let stored = zstd::bulk::compress(&data, 3).unwrap();
        for level in [
            json!(1e10),
            json!(1u64 << 40),
            json!(-2147483649i64),
            json!(4294967296u64),
            json!("5"),
            json!(null),
            json!([5]),
        ] {
            let z = zstd(json!({"id": "zstd", "level": level}));
            assert!(z.check_encodable().is_err(), "{level}");
            assert!(z.encode(data.clone()).is_err(), "{level}");
            assert_eq!(z.decode(stored.clone()).unwrap(), data, "{level}");
        }
    }

    #[test]
    fn zarr_v3_levels_are_signed_and_within_libzstd_range() {
        // zarr-python 3's ZstdCodec takes any integer up to 22; libzstd's levels run from
        // -131072 (ZSTD_minCLevel) to 22 (ZSTD_maxCLevel), and it clamps others to them.
        assert_eq!(zarr_v3_zstd_level(4294967291), -5);
        assert_eq!(zarr_v3_zstd_level(4294967295), -1);
        assert_eq!(zarr_v3_zstd_level(-5), -5);
        assert_eq!(zarr_v3_zstd_level(3), 3);
        assert_eq!(zarr_v3_zstd_level(22), 22);
        assert_eq!(zarr_v3_zstd_level(23), 22);
        assert_eq!(zarr_v3_zstd_level(-200000), -131072);
    }

    #[test]
    fn checksum_flag_is_written_and_checked() {
        // numcodecs 0.16.6's Zstd(checksum=5) writes checksums, Zstd(checksum=0) none: it
        // takes the flag's Python truth value, of any type.
        for (flag, written) in [
            (json!(5), true),
            (json!(-1), true),
            (json!(0), false),
            (json!("yes"), true),
            (json!("0"), true),
            (json!(""), false),
            (json!([]), false),
            (json!([0]), true),
            (json!({}), false),
            (json!({"a": 1}), true),
            (json!(null), false),
            (json!(0.0), false),
            (json!(0.5), true),
        ] {
            let z = zstd(json!({"id": "zstd", "level": 3, "checksum": flag}));
            let enc = z.encode(vec![7u8; 100]).unwrap();
            assert_eq!(enc[4] & 0x04 != 0, written, "{flag}");
        }
        let z = zstd(json!({"id": "zstd", "level": 3, "checksum": true}));
        let mut enc = z.encode(vec![7u8; 100]).unwrap();
        // Frame header descriptor bit 2 is the checksum flag.
        assert_ne!(enc[4] & 0x04, 0);
        let last = enc.len() - 1;
        enc[last] ^= 0xff;
        assert!(z.decode(enc.clone()).is_err());
        assert!(z.decode_bounded(enc, 100).is_err());
    }
}
