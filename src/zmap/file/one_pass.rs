//! [`OnePass`]: a [`FileMap`] for one pass of reads, opening each object from the nearest
//! directory it opened before rather than from the root.
//!
//! The kernel walks every name of a path it opens: an object `g/g/…/g/.zgroup` thousands
//! deep costs thousands of lookups from the root, and a reader that opens every group's
//! objects so did work growing with the square of the depth. From the parent group's
//! directory, kept open, each open walks one name.
//!
//! Opening below a kept directory is as safe as opening below the root: it was itself
//! reached below the root, and `openat2(RESOLVE_BENEATH)` keeps the rest below it. A link
//! that leaves the kept directory (but perhaps not the root) is opened from the root, whose
//! rules decide. A directory renamed or replaced during the pass is read as it was when it
//! was opened, as a read racing the rename may read it anyway; the pass lasts one read.

use std::fmt;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::sync::{Arc, Mutex};

use super::{beneath, validate_key, validate_prefix, FileMap, Miss, NearDirs, READ_FLAGS};
use crate::zmap::ZMap;
use crate::{Error, Result};

/// A [`FileMap`] for one pass of reads (see [`ZMap::for_one_pass`]): the directories it
/// opens on the way to objects stay open (the [`NearDirs::KEPT`] most recent) for the
/// objects after them. Writes go to the map itself and forget what was kept.
pub(super) struct OnePass<'a> {
    map: &'a FileMap,
    near: Mutex<NearDirs>,
}

impl fmt::Debug for OnePass<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OnePass").field("map", &self.map).finish()
    }
}

impl<'a> OnePass<'a> {
    pub(super) fn new(map: &'a FileMap) -> Self {
        OnePass {
            map,
            near: Mutex::new(NearDirs::default()),
        }
    }

    fn near(&self) -> std::sync::MutexGuard<'_, NearDirs> {
        self.near.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The directory `rel` (a key prefix), opened from the nearest kept directory above it
    /// and kept; `Ok(None)` when it is missing. `Err(Miss::Link)`: the way passes a link
    /// that leaves the directory it was opened from.
    fn dir(&self, rel: &str) -> std::result::Result<Option<Arc<OwnedFd>>, Miss> {
        let rel_path = Path::new(rel);
        // Not held while opening: the reads of a pass may run on several threads.
        let nearest = self.near().nearest(rel_path);
        let opened = match nearest {
            Some((dir, rest)) if rest.as_os_str().is_empty() => return Ok(Some(dir)),
            Some((dir, rest)) => match beneath::open_below(dir.as_fd(), rest, DIR_FLAGS) {
                Ok(fd) => fd,
                Err(Miss::Absent) => return Ok(None),
                Err(e) => return Err(e),
            },
            // From the root as the map opens it (again, if it was removed).
            None => match self.map.open_below(rel, DIR_FLAGS) {
                Ok(Some(fd)) => fd,
                Ok(None) => return Ok(None),
                Err(Error::Io { source, .. }) => return Err(Miss::Io(source)),
                // Through a link: the map's careful way, every time.
                Err(_) => return Err(Miss::Link),
            },
        };
        let opened = Arc::new(opened);
        self.near().keep(rel_path, &opened);
        Ok(Some(opened))
    }

    /// Opens `key` with `flags` from the directory of its parent prefix (see
    /// [`OnePass::dir`]); from the root, as the map itself opens it, where that directory
    /// cannot tell (a link on the way). `Ok(None)` when nothing is there.
    fn open(&self, key: &str, flags: libc::c_int) -> Result<Option<OwnedFd>> {
        let Some((parent, name)) = key.rsplit_once('/') else {
            return self.map.open_below(key, flags);
        };
        if parent.matches('/').count() + 1 < KEPT_FROM_DEPTH {
            return self.map.open_below(key, flags);
        }
        let dir = match self.dir(parent) {
            Ok(Some(dir)) => dir,
            Ok(None) => return Ok(None),
            Err(Miss::Io(e)) => return Err(Error::io(self.map.path_of(parent), e)),
            Err(_) => return self.map.open_below(key, flags),
        };
        match beneath::open_below(dir.as_fd(), Path::new(name), flags) {
            Ok(fd) => Ok(Some(fd)),
            Err(Miss::Absent) => Ok(None),
            Err(Miss::Link) => self.map.open_below(key, flags),
            Err(Miss::Io(e)) => Err(Error::io(self.map.path_of(key), e)),
        }
    }

    fn get_up_to(&self, key: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        validate_key(key)?;
        let opened = self.open(key, READ_FLAGS)?;
        self.map.read_opened(key, opened, limit)
    }

    /// Forgets the kept directories (a write may have replaced them).
    fn forget(&self) {
        *self.near() = NearDirs::default();
    }
}

/// How many names deep an object's directory must be before it is opened from a kept
/// directory. A walk of a few names from the root costs the kernel less than opening and
/// keeping their directory (and than the threads of a read sharing the kept ones): a flat
/// dataset of 1,000 variables made 3,000 opens instead of 2,000 that way, and its `dump -h`
/// took 18% longer.
const KEPT_FROM_DEPTH: usize = 8;

/// How the directories on the way are opened: only to open names below them.
const DIR_FLAGS: libc::c_int = libc::O_PATH | libc::O_DIRECTORY;

impl ZMap for OnePass<'_> {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.get_up_to(key, u64::MAX)
    }

    fn get_metadata(&self, key: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        self.get_up_to(key, limit)
    }

    fn get_many_metadata(&self, keys: &[String], limit: u64) -> Vec<Result<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get_up_to(k, limit)).collect()
    }

    fn exists(&self, key: &str) -> Result<bool> {
        validate_key(key)?;
        let opened = self.open(key, libc::O_PATH)?;
        self.map.is_file_opened(key, opened)
    }

    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        validate_prefix(prefix)?;
        if prefix.is_empty() {
            return self.map.search(prefix);
        }
        let opened = self.open(prefix, libc::O_RDONLY | libc::O_DIRECTORY)?;
        self.map.names_in(prefix, opened, false)
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.forget();
        self.map.put(key, value)
    }

    fn put_many(&self, objects: &[(String, Vec<u8>)]) -> Result<()> {
        self.forget();
        self.map.put_many(objects)
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.forget();
        self.map.delete(key)
    }

    fn check_key_storable(&self, key: &str) -> Result<()> {
        self.map.check_key_storable(key)
    }

    fn flush(&self) -> Result<()> {
        self.map.flush()
    }

    fn read_only(&self) -> bool {
        self.map.read_only()
    }

    fn refresh(&self) -> Result<()> {
        self.forget();
        self.map.refresh()
    }

    fn local_space(&self) -> Option<crate::zmap::Space> {
        self.map.local_space()
    }

    fn describe(&self) -> String {
        self.map.describe()
    }
}
