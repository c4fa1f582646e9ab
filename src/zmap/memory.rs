//! An in-memory map: scratch datasets and tests of every layer above storage.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use super::{search_keys, validate_key, validate_prefix, ZMap};
use crate::{Error, Result};

/// A map whose objects live in a sorted in-memory table.
#[derive(Debug, Default)]
pub struct MemoryMap {
    objects: RwLock<BTreeMap<String, Vec<u8>>>,
    read_only: bool,
}

impl MemoryMap {
    /// An empty, writable map.
    pub fn new() -> Self {
        Self::default()
    }

    /// A map holding a copy of every file under the directory `root`, keyed by relative path.
    pub fn from_dir(root: &Path) -> Result<Self> {
        let map = Self::new();
        load_dir(&map, root, "")?;
        Ok(map)
    }

    /// The same map, refusing writes from now on (to test read-only handling).
    pub fn into_read_only(mut self) -> Self {
        self.read_only = true;
        self
    }

    /// Stores `value` at `key`, ignoring the read-only flag (to build fixtures).
    pub fn insert(&self, key: &str, value: impl Into<Vec<u8>>) -> Result<()> {
        validate_key(key)?;
        self.write().insert(key.to_string(), value.into());
        Ok(())
    }

    /// Every key, sorted.
    pub fn keys(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    // A panic while holding the lock cannot leave the table half-updated (every update is a
    // single BTreeMap call), so a poisoned lock is still safe to use.
    fn read(&self) -> RwLockReadGuard<'_, BTreeMap<String, Vec<u8>>> {
        self.objects.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, BTreeMap<String, Vec<u8>>> {
        self.objects.write().unwrap_or_else(|e| e.into_inner())
    }

    fn check_writable(&self, key: &str) -> Result<()> {
        if self.read_only {
            return Err(Error::NotPermitted(format!(
                "cannot modify {key:?}: the in-memory map is read-only"
            )));
        }
        Ok(())
    }
}

fn load_dir(map: &MemoryMap, dir: &Path, prefix: &str) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))?;
    for entry in entries {
        let entry = entry.map_err(|e| Error::io(dir, e))?;
        let path = entry.path();
        let name = entry.file_name();
        let Some(name) = name.to_str() else {
            return Err(Error::Storage {
                key: path.to_string_lossy().into_owned(),
                reason: "file name is not UTF-8".into(),
            });
        };
        let key = super::join_key(&[prefix, name]);
        let kind = entry.file_type().map_err(|e| Error::io(&path, e))?;
        if kind.is_dir() {
            load_dir(map, &path, &key)?;
        } else {
            let bytes = std::fs::read(&path).map_err(|e| Error::io(&path, e))?;
            map.insert(&key, bytes)?;
        }
    }
    Ok(())
}

impl ZMap for MemoryMap {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        validate_key(key)?;
        Ok(self.read().get(key).cloned())
    }

    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Option<Vec<u8>>> {
        validate_key(key)?;
        Ok(self.read().get(key).map(|v| {
            let start = usize::try_from(offset).unwrap_or(usize::MAX).min(v.len());
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            let end = start.saturating_add(len).min(v.len());
            v[start..end].to_vec()
        }))
    }

    fn exists(&self, key: &str) -> Result<bool> {
        validate_key(key)?;
        Ok(self.read().contains_key(key))
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.check_writable(key)?;
        self.insert(key, value)
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.check_writable(key)?;
        validate_key(key)?;
        let below = format!("{key}/");
        self.write()
            .retain(|k, _| k != key && !k.starts_with(below.as_str()));
        Ok(())
    }

    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        validate_prefix(prefix)?;
        Ok(search_keys(self.read().keys().map(String::as_str), prefix))
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn describe(&self) -> String {
        "<memory>".to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_longer_than_the_limit_is_refused() {
        let map = MemoryMap::new();
        map.put("v/.zattrs", b"{\"a\": 1}").unwrap();
        let e = map.get_metadata("v/.zattrs", 7).unwrap_err();
        assert!(
            matches!(&e, Error::MetadataTooLarge { key, size: Some(8), limit: 7 } if key == "v/.zattrs"),
            "{e}"
        );
        let keys = ["v/.zattrs".to_string(), "v/.zarray".to_string()];
        let got: Vec<_> = map.get_many_metadata(&keys, 8).into_iter().collect();
        assert_eq!(
            got[0].as_ref().unwrap().as_deref(),
            Some(&b"{\"a\": 1}"[..])
        );
        assert_eq!(got[1].as_ref().unwrap(), &None);
    }

    #[test]
    fn get_put_delete() {
        let map = MemoryMap::new();
        assert_eq!(map.get(".zgroup").unwrap(), None);
        map.put(".zgroup", b"{}").unwrap();
        map.put("g/v/0.0", b"abc").unwrap();
        map.put("g/v/.zarray", b"{}").unwrap();
        map.put("g/w/0", b"x").unwrap();
        assert_eq!(map.get(".zgroup").unwrap().as_deref(), Some(&b"{}"[..]));
        assert!(map.exists("g/v/0.0").unwrap());
        assert!(!map.exists("g/v").unwrap(), "a prefix is not content");
        assert_eq!(map.get_range("g/v/0.0", 1, 10).unwrap().unwrap(), b"bc");
        assert_eq!(map.get_range("g/v/0.0", 7, 1).unwrap().unwrap(), b"");
        map.put("g/v/0.0", b"new").unwrap();
        assert_eq!(map.get("g/v/0.0").unwrap().unwrap(), b"new");
        map.delete("g/v").unwrap();
        assert_eq!(map.keys(), vec![".zgroup", "g/w/0"]);
        map.delete("nothing/here").unwrap();
    }

    #[test]
    fn search_immediate_children() {
        let map = MemoryMap::new();
        for key in [
            "g/b/0",
            "g/a/.zarray",
            "g/a/0",
            ".zgroup",
            "g/.zgroup",
            "g!x/y",
        ] {
            map.insert(key, *b"").unwrap();
        }
        assert_eq!(map.search("").unwrap(), vec![".zgroup", "g", "g!x"]);
        assert_eq!(map.search("g").unwrap(), vec![".zgroup", "a", "b"]);
        assert_eq!(map.search("g/a").unwrap(), vec![".zarray", "0"]);
        assert!(map.search("g/a/0").unwrap().is_empty());
        assert!(map.search("missing").unwrap().is_empty());
        assert!(map.search("/g").is_err());
    }

    #[test]
    fn read_only_refuses_writes() {
        let map = MemoryMap::new();
        map.insert("a", *b"1").unwrap();
        let map = map.into_read_only();
        assert!(matches!(map.put("a", b"2"), Err(Error::NotPermitted(_))));
        assert!(matches!(map.delete("a"), Err(Error::NotPermitted(_))));
        assert_eq!(map.get("a").unwrap().unwrap(), b"1");
    }

    #[test]
    fn bad_keys() {
        let map = MemoryMap::new();
        for key in ["", "/a", "a/", "a//b", "../a", "a/./b", "a\0b"] {
            assert!(map.put(key, b"").is_err(), "{key:?} accepted");
        }
    }
}
