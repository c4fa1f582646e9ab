//! Opening a dataset: location → storage map → metadata → model, with a chunk engine on top.

use std::ffi::OsStr;
use std::sync::Arc;

use crate::chunk::ChunkEngine;
use crate::location::Location;
use crate::model::Dataset;
use crate::zmap::ZMap;
use crate::{meta, zmap, Result};

/// Default size of the decoded-chunk cache: 256 MiB.
pub const DEFAULT_CACHE_BYTES: usize = 256 << 20;

/// An open dataset: where it is, its storage, its model and its chunk engine.
#[derive(Debug)]
pub struct OpenDataset {
    /// The parsed location.
    pub location: Location,
    /// The storage map.
    pub map: Arc<dyn ZMap>,
    /// The metadata model.
    pub model: Dataset,
    /// The chunk engine over `map`.
    pub engine: ChunkEngine,
}

impl OpenDataset {
    /// Opens an existing dataset read-only with a cache of `cache_bytes`.
    pub fn open(location: impl AsRef<OsStr>, cache_bytes: usize) -> Result<OpenDataset> {
        let location = Location::parse(location)?;
        let map = zmap::open(&location, false)?;
        let model = meta::read_dataset(map.as_ref(), &location.mode)
            .map_err(|e| meta::with_dataset_of_group(e, &location))?;
        let engine = ChunkEngine::new(Arc::clone(&map), cache_bytes);
        Ok(OpenDataset {
            location,
            map,
            model,
            engine,
        })
    }
}
