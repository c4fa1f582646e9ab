//! Storage maps ("zmap", as in netcdf-c): a dataset is a set of content-bearing objects named by
//! `/`-separated keys, like an S3 bucket.
//!
//! Keys are relative to the dataset root, have no leading or trailing `/` (`.zgroup`,
//! `g1/v/.zarray`, `g1/v/0.0`), and no key is a prefix-directory of another content-bearing key.
//! [`ZMap::search`] returns the immediate child names under a prefix, which is all a reader of
//! pure Zarr needs to discover groups and arrays.

use std::fmt::Debug;

use crate::Result;

/// A key/value store holding one dataset.
pub trait ZMap: Send + Sync + Debug {
    /// Reads the whole object at `key`; `Ok(None)` if it does not exist.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>>;

    /// Reads `len` bytes at `offset` of the object at `key` (for sharded arrays);
    /// `Ok(None)` if it does not exist. Ranges past the end are truncated.
    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Option<Vec<u8>>> {
        Ok(self.get(key)?.map(|v| {
            let start = (offset as usize).min(v.len());
            let end = start.saturating_add(len as usize).min(v.len());
            v[start..end].to_vec()
        }))
    }

    /// Whether a content-bearing object exists at `key`.
    fn exists(&self, key: &str) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// Stores `value` at `key`, replacing any previous object atomically: a reader sees
    /// either the old or the new content, never a mix.
    fn put(&self, key: &str, value: &[u8]) -> Result<()>;

    /// Removes the object at `key` (and, if `key` is a prefix, everything under it).
    /// Removing something that does not exist is not an error.
    fn delete(&self, key: &str) -> Result<()>;

    /// The immediate child names under `prefix` (`""` for the root): every `name` such that
    /// `prefix/name` is a content-bearing key or a prefix of one. Sorted, without duplicates.
    fn search(&self, prefix: &str) -> Result<Vec<String>>;

    /// Makes every completed `put`/`delete` durable (a zip map rewrites its archive here).
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// Whether the map refuses writes.
    fn read_only(&self) -> bool;

    /// A short description for messages and logs (a path or URL, never credentials).
    fn describe(&self) -> String;
}

/// Joins key segments with `/`, skipping empty ones.
pub fn join_key(parts: &[&str]) -> String {
    parts
        .iter()
        .filter(|p| !p.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join("/")
}

/// Opens the storage of `location` (creating nothing); `writable` asks for a read-write map.
pub fn open(location: &crate::location::Location, writable: bool) -> Result<std::sync::Arc<dyn ZMap>> {
    let _ = writable;
    Err(crate::Error::Unsupported(format!("storage of {}", location.original)))
}
