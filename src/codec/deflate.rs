//! numcodecs `zlib` (a zlib stream, RFC 1950) and `gzip` (gzip members, RFC 1952).

use std::io::Write;

use flate2::Compression;

use super::{compressed_bound, read_bounded, Codec, Config, EncodingParam};
use crate::{Error, Result};

/// A numcodecs level (-1 is zlib's default) as a flate2 compression setting: Python's zlib
/// takes an integer from -1 to 9 (not `"5"` nor `5.0`), and fails to compress with another level but decompresses whatever level
/// the metadata gives, as numcodecs (so zarr-python) reads it.
fn level(cfg: &Config<'_>) -> EncodingParam<Compression> {
    // numcodecs' default level is 1 for both codecs.
    cfg.encoding_strict_int_in("level", 1, -1..=9)
        .map(|level| Ok(u32::try_from(level).map_or(Compression::default(), Compression::new)))
}

fn io_error(codec: &str, e: std::io::Error) -> Error {
    Error::Codec {
        codec: codec.to_string(),
        reason: e.to_string(),
    }
}

/// numcodecs `Zlib`: `zlib.compress(data, level)` / `zlib.decompress`.
#[derive(Debug, Clone)]
pub struct Zlib {
    level: EncodingParam<Compression>,
}

impl Zlib {
    /// From `{"id": "zlib", "level": N}` (netcdf-c writes the same form for deflate).
    pub fn from_config(cfg: &Config<'_>) -> Result<Self> {
        Ok(Zlib { level: level(cfg) })
    }
}

impl Codec for Zlib {
    fn id(&self) -> &str {
        "zlib"
    }

    fn check_encodable(&self) -> Result<()> {
        self.level.get().map(|_| ())
    }

    fn decode(&self, input: Vec<u8>) -> Result<Vec<u8>> {
        self.decode_bounded(input, usize::MAX)
    }

    fn decode_bounded(&self, input: Vec<u8>, max_len: usize) -> Result<Vec<u8>> {
        let reader = flate2::bufread::ZlibDecoder::new(&input[..]);
        read_bounded(reader, "zlib", max_len, input.len())
    }

    fn decode_into(&self, input: &[u8], out: &mut [u8]) -> Result<usize> {
        // One call inflates the whole stream into the caller's buffer: no intermediate
        // buffer, no zero-filling, and a stream that would overflow `out` stops at its end.
        let mut z = flate2::Decompress::new(true);
        let status = z
            .decompress(input, out, flate2::FlushDecompress::Finish)
            .map_err(|e| io_error("zlib", e.into()))?;
        let n = usize::try_from(z.total_out()).unwrap_or(usize::MAX);
        match status {
            flate2::Status::StreamEnd => Ok(n),
            _ if n >= out.len() => Err(super::too_large("zlib", out.len())),
            _ => Err(Error::Codec {
                codec: "zlib".to_string(),
                reason: "truncated or incomplete zlib stream".to_string(),
            }),
        }
    }

    fn encode(&self, input: Vec<u8>) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        self.encode_into(&input, &mut out)?;
        Ok(out)
    }

    fn encode_into(&self, input: &[u8], out: &mut Vec<u8>) -> Result<()> {
        // Deflated straight into room for the worst case: no intermediate buffer, no growing
        // copies. zlib-rs's fastest level may still stop short of the end of the stream (it
        // emits a block at a time), so the call is repeated until the stream ends.
        out.clear();
        out.reserve(compressed_bound(input.len()));
        let mut z = flate2::Compress::new(*self.level.get()?, true);
        loop {
            let consumed = usize::try_from(z.total_in()).unwrap_or(input.len());
            let before = (z.total_in(), z.total_out());
            let status = z
                .compress_vec(&input[consumed..], out, flate2::FlushCompress::Finish)
                .map_err(|e| io_error("zlib", e.into()))?;
            if status == flate2::Status::StreamEnd {
                return Ok(());
            }
            if out.len() == out.capacity() {
                out.reserve(out.capacity() / 8 + 64);
            } else if before == (z.total_in(), z.total_out()) {
                return Err(Error::Codec {
                    codec: "zlib".to_string(),
                    reason: "deflate made no progress".to_string(),
                });
            }
        }
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        compressed_bound(decoded_len)
    }
}

/// numcodecs `GZip`: one gzip member on encode; on decode, like Python's `gzip`, any number of
/// concatenated members.
#[derive(Debug, Clone)]
pub struct Gzip {
    level: EncodingParam<Compression>,
}

impl Gzip {
    /// From `{"id": "gzip", "level": N}`.
    pub fn from_config(cfg: &Config<'_>) -> Result<Self> {
        Ok(Gzip { level: level(cfg) })
    }
}

impl Codec for Gzip {
    fn id(&self) -> &str {
        "gzip"
    }

    fn check_encodable(&self) -> Result<()> {
        self.level.get().map(|_| ())
    }

    fn decode(&self, input: Vec<u8>) -> Result<Vec<u8>> {
        self.decode_bounded(input, usize::MAX)
    }

    fn decode_bounded(&self, input: Vec<u8>, max_len: usize) -> Result<Vec<u8>> {
        let reader = flate2::bufread::MultiGzDecoder::new(&input[..]);
        read_bounded(reader, "gzip", max_len, input.len())
    }

    fn encode(&self, input: Vec<u8>) -> Result<Vec<u8>> {
        let out = Vec::with_capacity(input.len() / 2 + 64);
        let mut enc = flate2::write::GzEncoder::new(out, *self.level.get()?);
        enc.write_all(&input).map_err(|e| io_error("gzip", e))?;
        enc.finish().map_err(|e| io_error("gzip", e))
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        compressed_bound(decoded_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cfg(v: &serde_json::Value) -> Config<'_> {
        Config {
            id: v["id"].as_str().unwrap(),
            params: v.as_object().unwrap(),
        }
    }

    #[test]
    fn zlib_matches_first_principles() {
        // zlib.compress(b"", 1) in Python: header 78 01, an empty final stored block, adler32 1.
        let z = Zlib::from_config(&cfg(&json!({"id": "zlib", "level": 1}))).unwrap();
        let empty = [0x78, 0x01, 0x03, 0x00, 0x00, 0x00, 0x00, 0x01];
        assert_eq!(z.decode(empty.to_vec()).unwrap(), b"");
        let data = b"hello hello hello hello".to_vec();
        let enc = z.encode(data.clone()).unwrap();
        assert_eq!(enc[0], 0x78);
        assert_eq!(z.decode(enc.clone()).unwrap(), data);
        assert!(
            z.decode(enc[..enc.len() - 1].to_vec()).is_err(),
            "truncated"
        );
    }

    #[test]
    fn incompressible_chunks_encode_at_every_level() {
        // Bytes of a xorshift generator: deflate cannot shrink them, and level 1 then ends
        // its stream only after several calls.
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let data: Vec<u8> = (0..100_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        for level in [-1, 0, 1, 2, 6, 9] {
            let z = Zlib::from_config(&cfg(&json!({"id": "zlib", "level": level}))).unwrap();
            let mut enc = Vec::new();
            z.encode_into(&data, &mut enc)
                .unwrap_or_else(|e| panic!("level {level}: {e}"));
            assert_eq!(z.decode(enc).unwrap(), data, "level {level}");
        }
    }

    #[test]
    fn bounded_decode_refuses_a_bomb() {
        let z = Zlib::from_config(&cfg(&json!({"id": "zlib", "level": 9}))).unwrap();
        let bomb = z.encode(vec![0u8; 1 << 20]).unwrap();
        assert!(bomb.len() < 2048);
        assert!(z.decode_bounded(bomb.clone(), 1000).is_err());
        assert_eq!(z.decode_bounded(bomb, 1 << 20).unwrap().len(), 1 << 20);
    }

    #[test]
    fn decode_into_fills_the_buffer_or_fails() {
        // zlib.compress(b"hello hello hello hello", 1) in Python 3.11.
        let stream = [
            0x78, 0x01, 0xcb, 0x48, 0xcd, 0xc9, 0xc9, 0x57, 0xc8, 0x40, 0x27, 0x01, 0x68, 0x03,
            0x08, 0xb1,
        ];
        let z = Zlib::from_config(&cfg(&json!({"id": "zlib", "level": 1}))).unwrap();
        let mut out = [0u8; 23];
        assert_eq!(z.decode_into(&stream, &mut out).unwrap(), 23);
        assert_eq!(&out, b"hello hello hello hello");
        let mut big = [0u8; 40];
        assert_eq!(z.decode_into(&stream, &mut big).unwrap(), 23);
        assert!(z.decode_into(&stream, &mut [0u8; 22]).is_err(), "too small");
        let truncated = &stream[..stream.len() - 1];
        assert!(z.decode_into(truncated, &mut big).is_err(), "truncated");
        let mut corrupt = stream;
        corrupt[14] ^= 0xff;
        assert!(z.decode_into(&corrupt, &mut big).is_err(), "bad checksum");
    }

    #[test]
    fn gzip_reads_concatenated_members() {
        let g = Gzip::from_config(&cfg(&json!({"id": "gzip", "level": 5}))).unwrap();
        let mut both = g.encode(b"abc".to_vec()).unwrap();
        both.extend(g.encode(b"def".to_vec()).unwrap());
        assert_eq!(g.decode(both).unwrap(), b"abcdef");
    }
}
