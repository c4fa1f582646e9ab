//! numcodecs `zstd`: one or more Zstandard frames, with or without a content size.

use std::cell::RefCell;

use super::{compressed_bound, read_bounded, too_large, Codec, Config};
use crate::{Error, Result};

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

/// numcodecs `Zstd(level, checksum)`.
#[derive(Debug, Clone)]
pub struct Zstd {
    level: i32,
    checksum: bool,
}

impl Zstd {
    /// From `{"id": "zstd", "level": N, "checksum": false}`.
    pub fn from_config(cfg: &Config<'_>) -> Result<Self> {
        let level = cfg.int_in("level", 0, -131072..=22)?;
        let checksum = cfg.int_in("checksum", 0, 0..=1)? == 1;
        Ok(Zstd {
            level: i32::try_from(level).map_err(|_| cfg.error("level out of range"))?,
            checksum,
        })
    }
}

impl Codec for Zstd {
    fn id(&self) -> &str {
        "zstd"
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
        let mut c = zstd::bulk::Compressor::new(self.level).map_err(codec_error)?;
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
    fn checksum_flag_is_written_and_checked() {
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
