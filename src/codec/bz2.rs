//! numcodecs `bz2` (Python's `bz2.compress`), also netcdf-c's bzip2 filter
//! (`{"id": "bz2", "level": N}`).

use std::io::Write;

use super::{compressed_bound, read_bounded, Codec, Config, EncodingParam};
use crate::{Error, Result};

fn io_error(e: std::io::Error) -> Error {
    Error::Codec {
        codec: "bz2".to_string(),
        reason: e.to_string(),
    }
}

/// numcodecs `BZ2(level)`.
#[derive(Debug, Clone)]
pub struct Bz2 {
    level: EncodingParam<u32>,
}

impl Bz2 {
    /// From `{"id": "bz2", "level": N}` (numcodecs' default is 1). Python's bz2 compresses
    /// with integer levels 1 to 9 only (`5.0`, `"5"` and `null` are a TypeError); the level
    /// plays no part in decompressing, so another one stops only encoding, as numcodecs
    /// reads it.
    pub fn from_config(cfg: &Config<'_>) -> Result<Self> {
        let level = cfg
            .encoding_strict_int_in("level", 1, 1..=9)
            .map(|level| u32::try_from(level).map_err(|_| cfg.error("bad level")));
        Ok(Bz2 { level })
    }
}

impl Codec for Bz2 {
    fn id(&self) -> &str {
        "bz2"
    }

    fn check_encodable(&self) -> Result<()> {
        self.level.get().map(|_| ())
    }

    fn decode(&self, input: Vec<u8>) -> Result<Vec<u8>> {
        self.decode_bounded(input, usize::MAX)
    }

    fn decode_bounded(&self, input: Vec<u8>, max_len: usize) -> Result<Vec<u8>> {
        // Python's bz2.decompress accepts concatenated streams.
        let reader = bzip2::bufread::MultiBzDecoder::new(&input[..]);
        read_bounded(reader, "bz2", max_len, input.len())
    }

    fn encode(&self, input: Vec<u8>) -> Result<Vec<u8>> {
        let out = Vec::with_capacity(input.len() / 2 + 64);
        let mut enc =
            bzip2::write::BzEncoder::new(out, bzip2::Compression::new(*self.level.get()?));
        enc.write_all(&input).map_err(io_error)?;
        enc.finish().map_err(io_error)
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        compressed_bound(decoded_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn round_trip_truncation_and_bound() {
        let v = json!({"id": "bz2", "level": 9});
        let b = Bz2::from_config(&Config {
            id: "bz2",
            params: v.as_object().unwrap(),
        })
        .unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i / 7) as u8).collect();
        let enc = b.encode(data.clone()).unwrap();
        assert_eq!(&enc[..3], b"BZh");
        assert_eq!(enc[3], b'9');
        assert_eq!(b.decode(enc.clone()).unwrap(), data);
        assert_eq!(b.decode_bounded(enc.clone(), 10_000).unwrap(), data);
        assert!(b.decode_bounded(enc.clone(), 9_999).is_err());
        assert!(b.decode(enc[..enc.len() - 3].to_vec()).is_err());
    }
}
