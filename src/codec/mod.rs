//! Chunk codecs: the compressors and filters of Zarr v2 (`compressor`, `filters`) and the
//! codec chain of Zarr v3, each behind the [`Codec`] trait.

use std::fmt::Debug;

use crate::{Error, Result};

/// One bytes-to-bytes transformation of a chunk.
pub trait Codec: Send + Sync + Debug {
    /// The codec id as stored (`zlib`, `shuffle`, `blosc`, …).
    fn id(&self) -> &str;
    /// Reverses [`Codec::encode`].
    fn decode(&self, input: Vec<u8>) -> Result<Vec<u8>>;
    /// Transforms stored-order bytes towards the stored chunk.
    fn encode(&self, input: Vec<u8>) -> Result<Vec<u8>>;
}

/// A chain of codecs in encoding order (Zarr v2: filters, then the compressor).
#[derive(Debug, Default)]
pub struct Pipeline {
    codecs: Vec<Box<dyn Codec>>,
}

impl Pipeline {
    /// Builds the chain of a Zarr v2 array. `element_size` is the stored dtype's size (used by
    /// shuffle when its `elementsize` is 0 or missing, and as blosc's typesize).
    pub fn from_v2(
        filters: &[serde_json::Value],
        compressor: Option<&serde_json::Value>,
        element_size: usize,
    ) -> Result<Pipeline> {
        let _ = element_size;
        if let Some(c) = filters.iter().chain(compressor).next() {
            return Err(Error::UnknownCodec {
                name: c.get("id").and_then(|v| v.as_str()).unwrap_or("?").to_string(),
            });
        }
        Ok(Pipeline::default())
    }

    /// Decodes a stored chunk.
    pub fn decode(&self, mut bytes: Vec<u8>) -> Result<Vec<u8>> {
        for c in self.codecs.iter().rev() {
            bytes = c.decode(bytes)?;
        }
        Ok(bytes)
    }

    /// Encodes a chunk for storage.
    pub fn encode(&self, mut bytes: Vec<u8>) -> Result<Vec<u8>> {
        for c in &self.codecs {
            bytes = c.encode(bytes)?;
        }
        Ok(bytes)
    }
}
