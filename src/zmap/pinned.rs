//! A map held to the storage that one reading of the metadata came from (see [`PinnedMap`]).

use std::fs::File;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{Feed, Space, ZMap};
use crate::{Error, Result};

/// Reads through another map only while that map still reads the storage it read when the
/// pin was set ([`ZMap::storage_generation`]): once a refresh has taken up a dataset put in
/// the old one's place, every read fails with [`Error::ReplacedUnderneath`] instead of
/// handing a reader holding the old dataset's metadata the new dataset's objects (its
/// chunks decoded with the wrong type or chunking, or a variable it lacks read as missing
/// chunks, that is as fill values).
///
/// Each read is checked after its object was fetched: a map publishes a new generation
/// before it reads from the new storage, so an object fetched from there is always seen as
/// such. Writes go through unchecked (a writer keeps to the storage it claimed).
#[derive(Debug)]
pub struct PinnedMap {
    inner: Arc<dyn ZMap>,
    generation: AtomicU64,
}

impl PinnedMap {
    /// `inner`, pinned to the storage it reads now.
    pub fn new(inner: Arc<dyn ZMap>) -> Self {
        let generation = AtomicU64::new(inner.storage_generation());
        PinnedMap { inner, generation }
    }

    /// Whether the map still reads the storage it is pinned to.
    pub fn is_current(&self) -> bool {
        self.inner.storage_generation() == self.generation.load(Ordering::SeqCst)
    }

    /// Pins the map to the storage it reads now: for a reader that found the new storage's
    /// metadata to be the same as the old (its objects then mean what the old ones meant).
    pub fn repin(&self) {
        self.generation
            .store(self.inner.storage_generation(), Ordering::SeqCst);
    }

    /// `got`, or the error saying the storage was replaced since the pin was set.
    fn checked<T>(&self, got: Result<T>) -> Result<T> {
        match self.is_current() {
            true => got,
            false => Err(Error::ReplacedUnderneath {
                dataset: self.inner.describe(),
            }),
        }
    }
}

/// Checks each object of a [`ZMap::get_fed`] as it arrives (see [`PinnedMap`]).
struct CheckedFeed<'a> {
    map: &'a PinnedMap,
    feed: &'a mut dyn Feed,
}

impl Feed for CheckedFeed<'_> {
    fn next_keys(&mut self, in_flight: usize) -> Vec<String> {
        self.feed.next_keys(in_flight)
    }

    fn arrived(&mut self, index: usize, object: Result<Option<Vec<u8>>>) {
        self.feed.arrived(index, self.map.checked(object));
    }
}

impl ZMap for PinnedMap {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.checked(self.inner.get(key))
    }

    fn get_metadata(&self, key: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        self.checked(self.inner.get_metadata(key, limit))
    }

    fn get_many_metadata(&self, keys: &[String], limit: u64) -> Vec<Result<Option<Vec<u8>>>> {
        let got = self.inner.get_many_metadata(keys, limit);
        got.into_iter().map(|r| self.checked(r)).collect()
    }

    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Option<Vec<u8>>> {
        self.checked(self.inner.get_range(key, offset, len))
    }

    fn get_suffix(&self, key: &str, len: u64) -> Result<Option<Vec<u8>>> {
        self.checked(self.inner.get_suffix(key, len))
    }

    fn get_many(&self, keys: &[String]) -> Vec<Result<Option<Vec<u8>>>> {
        let got = self.inner.get_many(keys);
        got.into_iter().map(|r| self.checked(r)).collect()
    }

    fn get_each(&self, keys: &[String], each: &mut dyn FnMut(usize, Result<Option<Vec<u8>>>)) {
        self.inner
            .get_each(keys, &mut |i, got| each(i, self.checked(got)));
    }

    fn get_fed(&self, feed: &mut dyn Feed) {
        self.inner.get_fed(&mut CheckedFeed { map: self, feed });
    }

    fn concurrent_gets(&self) -> usize {
        self.inner.concurrent_gets()
    }

    fn get_into(&self, key: &str, buf: &mut Vec<u8>) -> Result<bool> {
        self.checked(self.inner.get_into(key, buf))
    }

    fn read_with(
        &self,
        key: &str,
        scratch: &mut Vec<u8>,
        f: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<bool> {
        // Checked before `f` sees the bytes (it may keep what it decodes), and after, for a
        // missing object, which never reaches `f`.
        let found = self.inner.read_with(key, scratch, &mut |bytes| {
            self.checked(Ok(()))?;
            f(bytes)
        });
        self.checked(found)
    }

    fn get_exact(&self, key: &str, out: &mut [u8]) -> Result<Option<u64>> {
        self.checked(self.inner.get_exact(key, out))
    }

    fn get_range_into(&self, key: &str, offset: u64, out: &mut [u8]) -> Result<Option<u64>> {
        self.checked(self.inner.get_range_into(key, offset, out))
    }

    fn partial_reads_are_cheap(&self) -> bool {
        self.inner.partial_reads_are_cheap()
    }

    fn object_file(&self, key: &str) -> Result<Option<(File, u64)>> {
        self.checked(self.inner.object_file(key))
    }

    fn exists(&self, key: &str) -> Result<bool> {
        self.checked(self.inner.exists(key))
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.put(key, value)
    }

    fn check_key_storable(&self, key: &str) -> Result<()> {
        self.inner.check_key_storable(key)
    }

    fn put_many(&self, objects: &[(String, Vec<u8>)]) -> Result<()> {
        self.inner.put_many(objects)
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.inner.delete(key)
    }

    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        self.checked(self.inner.search(prefix))
    }

    fn keys_under(&self, prefix: &str) -> Result<Vec<String>> {
        self.checked(self.inner.keys_under(prefix))
    }

    fn keys_to_move(&self, prefix: &str) -> Result<Vec<String>> {
        self.checked(self.inner.keys_to_move(prefix))
    }

    fn copy_many(&self, pairs: &[(String, String)]) -> Result<()> {
        self.inner.copy_many(pairs)
    }

    fn delete_objects(&self, keys: &[String]) -> Result<()> {
        self.inner.delete_objects(keys)
    }

    fn flush(&self) -> Result<()> {
        self.inner.flush()
    }

    fn read_only(&self) -> bool {
        self.inner.read_only()
    }

    fn refresh(&self) -> Result<()> {
        self.inner.refresh()
    }

    fn storage_generation(&self) -> u64 {
        self.inner.storage_generation()
    }

    fn probe_if_down(&self) {
        self.inner.probe_if_down()
    }

    fn write_back_backoff(&self) -> Option<std::time::Duration> {
        self.inner.write_back_backoff()
    }

    fn local_space(&self) -> Option<Space> {
        self.inner.local_space()
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn claim_writer(&self) -> Result<()> {
        self.inner.claim_writer()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zmap::{FileMap, ZipMap};
    use std::fs;
    use std::path::Path;

    fn replaced(e: Error) -> bool {
        matches!(e, Error::ReplacedUnderneath { .. })
    }

    /// Puts a directory store holding `v/0` = `value` at `root`, as `gen` does: made aside,
    /// renamed into place, the old one deleted.
    fn put_dir_store(root: &Path, value: &[u8]) {
        let aside = root.with_extension("new");
        fs::create_dir_all(aside.join("v")).unwrap();
        fs::write(aside.join(".zgroup"), b"{}").unwrap();
        fs::write(aside.join("v").join("0"), value).unwrap();
        let old = root.with_extension("old");
        let had = root.exists();
        if had {
            fs::rename(root, &old).unwrap();
        }
        fs::rename(&aside, root).unwrap();
        if had {
            fs::remove_dir_all(&old).unwrap();
        }
    }

    /// A directory store replaced by another (its old directory deleted, whose inode number
    /// the new one may well get) is never read through a pin set before the refresh, also
    /// for keys only the old one had; a map pinned after it reads the new one.
    #[test]
    fn a_replaced_directory_store_is_not_read_through_an_old_pin() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ds");
        put_dir_store(&root, b"old");
        let map: Arc<dyn ZMap> = Arc::new(FileMap::open(&root, false).unwrap());
        let pinned = PinnedMap::new(Arc::clone(&map));
        assert_eq!(pinned.get("v/0").unwrap().as_deref(), Some(&b"old"[..]));
        for round in 0..3 {
            put_dir_store(&root, b"new");
            map.refresh().unwrap();
            assert!(replaced(pinned.get("v/0").unwrap_err()), "round {round}");
            assert!(replaced(pinned.get("w/0").unwrap_err()), "round {round}");
            assert!(replaced(pinned.exists("v/0").unwrap_err()), "round {round}");
            assert!(!pinned.is_current());
            let fresh = PinnedMap::new(Arc::clone(&map));
            assert_eq!(fresh.get("v/0").unwrap().as_deref(), Some(&b"new"[..]));
            pinned.repin();
            assert_eq!(pinned.get("v/0").unwrap().as_deref(), Some(&b"new"[..]));
        }
    }

    /// A refresh that finds the same directory at the path changes nothing.
    #[test]
    fn a_refresh_of_the_same_directory_keeps_the_pin() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ds");
        put_dir_store(&root, b"old");
        let map: Arc<dyn ZMap> = Arc::new(FileMap::open(&root, false).unwrap());
        let pinned = PinnedMap::new(Arc::clone(&map));
        map.refresh().unwrap();
        fs::write(root.join("v").join("0"), b"rewritten").unwrap();
        assert_eq!(
            pinned.get("v/0").unwrap().as_deref(),
            Some(&b"rewritten"[..])
        );
        assert!(pinned.is_current());
    }

    /// A zip archive replaced at its path is not read through a pin set before the refresh.
    #[test]
    fn a_replaced_zip_archive_is_not_read_through_an_old_pin() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ds.zip");
        let write = |value: &[u8]| {
            let new = ZipMap::create_new(&dir.path().join("new.zip"));
            new.put(".zgroup", b"{}").unwrap();
            new.put("v/0", value).unwrap();
            new.flush().unwrap();
            fs::rename(dir.path().join("new.zip"), &path).unwrap();
        };
        write(b"old");
        let map: Arc<dyn ZMap> = Arc::new(ZipMap::open(&path, false).unwrap());
        let pinned = PinnedMap::new(Arc::clone(&map));
        assert_eq!(pinned.get("v/0").unwrap().as_deref(), Some(&b"old"[..]));
        map.refresh().unwrap();
        assert!(pinned.is_current(), "nothing changed");
        write(b"new");
        map.refresh().unwrap();
        assert!(replaced(pinned.get("v/0").unwrap_err()));
        assert!(replaced(pinned.get("w/0").unwrap_err()));
        let fresh = PinnedMap::new(Arc::clone(&map));
        assert_eq!(fresh.get("v/0").unwrap().as_deref(), Some(&b"new"[..]));
    }
}
