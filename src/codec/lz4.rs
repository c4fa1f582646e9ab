//! numcodecs `lz4`: the uncompressed size as a 4-byte little-endian integer, then one LZ4 block.

use super::{too_large, Codec, Config, EncodingParam};
use crate::{Error, Result};

fn codec_error(reason: impl Into<String>) -> Error {
    Error::Codec {
        codec: "lz4".to_string(),
        reason: reason.into(),
    }
}

/// The uncompressed size a numcodecs lz4 buffer declares (refused beyond `max_len`), and its
/// block.
fn split(input: &[u8], max_len: usize) -> Result<(usize, &[u8])> {
    let (header, block) = input
        .split_first_chunk::<4>()
        .ok_or_else(|| codec_error("input shorter than the 4-byte size header"))?;
    // numcodecs writes the size as a signed 32-bit integer.
    let size = i32::from_le_bytes(*header);
    let size = usize::try_from(size)
        .map_err(|_| codec_error(format!("negative uncompressed size {size}")))?;
    if size > max_len {
        return Err(too_large("lz4", max_len));
    }
    Ok((size, block))
}

/// numcodecs `LZ4(acceleration)`. The acceleration only trades ratio for speed when encoding;
/// lz4_flex has a single speed, and any stream it writes decodes the same.
#[derive(Debug, Clone)]
pub struct Lz4 {
    /// Unused by lz4_flex, but one numcodecs could not compress with (no C `int`, see
    /// [`Config::c_int`]) fails encoding here too.
    acceleration: EncodingParam<i64>,
}

impl Lz4 {
    /// From `{"id": "lz4", "acceleration": N}`.
    pub fn from_config(cfg: &Config<'_>) -> Result<Self> {
        Ok(Lz4 {
            acceleration: EncodingParam::from(cfg.c_int("acceleration", 1)),
        })
    }
}

impl Codec for Lz4 {
    fn id(&self) -> &str {
        "lz4"
    }

    fn check_encodable(&self) -> Result<()> {
        self.acceleration.get().map(|_| ())
    }

    fn decode(&self, input: Vec<u8>) -> Result<Vec<u8>> {
        self.decode_bounded(input, usize::MAX)
    }

    fn decode_bounded(&self, input: Vec<u8>, max_len: usize) -> Result<Vec<u8>> {
        let (size, _) = split(&input, max_len)?;
        let mut out = vec![0u8; size];
        self.decode_into(&input, &mut out)?;
        Ok(out)
    }

    fn decode_into(&self, input: &[u8], out: &mut [u8]) -> Result<usize> {
        let (size, block) = split(input, out.len())?;
        let n = lz4_flex::block::decompress_into(block, &mut out[..size])
            .map_err(|e| codec_error(e.to_string()))?;
        if n != size {
            return Err(codec_error(format!(
                "block decoded to {n} bytes, header says {size}"
            )));
        }
        Ok(n)
    }

    fn encode(&self, input: Vec<u8>) -> Result<Vec<u8>> {
        self.check_encodable()?;
        let size = i32::try_from(input.len())
            .map_err(|_| codec_error("input larger than 2 GiB cannot be encoded"))?;
        let mut out = vec![0u8; 4 + lz4_flex::block::get_maximum_output_size(input.len())];
        out[..4].copy_from_slice(&size.to_le_bytes());
        let n = lz4_flex::block::compress_into(&input, &mut out[4..])
            .map_err(|e| codec_error(e.to_string()))?;
        out.truncate(4 + n);
        Ok(out)
    }

    fn max_encoded_len(&self, decoded_len: usize) -> usize {
        // lz4_flex's own bound overflows near usize::MAX; numcodecs' header caps sizes anyway.
        if decoded_len > i32::MAX as usize {
            return usize::MAX;
        }
        4 + lz4_flex::block::get_maximum_output_size(decoded_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn header_is_little_endian_size() {
        let config = serde_json::json!({"id": "lz4"});
        let lz4 = Lz4::from_config(&Config {
            id: "lz4",
            params: config.as_object().unwrap(),
        })
        .unwrap();
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 13) as u8).collect();
        let enc = lz4.encode(data.clone()).unwrap();
        assert_eq!(&enc[..4], &3000i32.to_le_bytes());
        assert_eq!(lz4.decode(enc.clone()).unwrap(), data);
        assert!(lz4.decode_bounded(enc.clone(), 2999).is_err());
        let mut lying = enc.clone();
        lying[..4].copy_from_slice(&3001i32.to_le_bytes());
        assert!(lz4.decode(lying).is_err());
        lying = enc;
        lying[..4].copy_from_slice(&(-1i32).to_le_bytes());
        assert!(lz4.decode(lying).is_err());
        assert!(lz4.decode(vec![1, 2]).is_err());
    }

    #[test]
    fn acceleration_is_made_a_c_int_as_numcodecs_makes_it() {
        // numcodecs 0.16.6: LZ4(acceleration=5.5), 0.5, True, -1 and 2**31 - 1 compress;
        // "1" and None raise TypeError, 2**31, -2**31 - 1 and 1e10 OverflowError.
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 13) as u8).collect();
        let stored = lz4_flex::block::compress_prepend_size(&data);
        for (acceleration, writes) in [
            (json!(5.5), true),
            (json!(0.5), true),
            (json!(true), true),
            (json!(-1), true),
            (json!(2147483647), true),
            (json!("1"), false),
            (json!(null), false),
            (json!(2147483648u64), false),
            (json!(-2147483649i64), false),
            (json!(1e10), false),
        ] {
            let config = json!({"id": "lz4", "acceleration": acceleration});
            let lz4 = Lz4::from_config(&Config {
                id: "lz4",
                params: config.as_object().unwrap(),
            })
            .unwrap();
            assert_eq!(lz4.check_encodable().is_ok(), writes, "{acceleration}");
            assert_eq!(lz4.encode(data.clone()).is_ok(), writes, "{acceleration}");
            assert_eq!(lz4.decode(stored.clone()).unwrap(), data, "{acceleration}");
        }
    }
}
