//! Storage maps ("zmap", as in netcdf-c): a dataset is a set of content-bearing objects named by
//! `/`-separated keys, like an S3 bucket.
//!
//! Keys are relative to the dataset root, have no leading or trailing `/` (`.zgroup`,
//! `g1/v/.zarray`, `g1/v/0.0`), and no key is a prefix-directory of another content-bearing key.
//! [`ZMap::search`] returns the immediate child names under a prefix, which is all a reader of
//! pure Zarr needs to discover groups and arrays.

pub mod aws_config;
mod beneath;
mod file;
mod mapped;
mod memory;
mod pinned;
mod rename_helper;
mod s3;
mod s3_health;
pub(crate) mod temp_files;
mod writer_lock;
mod zip;

use std::fmt::Debug;
use std::os::unix::ffi::OsStrExt;
use std::sync::Arc;

use crate::location::{Format, Location, Storage};
use crate::{Error, Result};

pub use self::file::FileMap;
pub use self::memory::MemoryMap;
pub use self::pinned::PinnedMap;
pub use self::rename_helper::{
    serve_renames, stop_rename_helper, use_rename_helper, RENAME_HELPER_COMMAND,
};
pub use self::s3::{S3Limits, S3Map};
pub use self::writer_lock::{WriterLock, FUSE_CONNECTIONS};
pub use self::zip::{looks_like_zip, ZipMap};

/// The size of a file system, in bytes (see [`ZMap::local_space`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Space {
    /// Its whole size.
    pub total: u64,
    /// What is free.
    pub free: u64,
    /// What is free for an unprivileged user.
    pub available: u64,
}

/// The [`Space`] of the file system holding `path`, or its nearest existing ancestor (a
/// dataset being created may not exist yet).
pub(crate) fn space_of(path: &std::path::Path) -> Option<Space> {
    use std::os::unix::ffi::OsStrExt;
    let existing = path.ancestors().find(|p| p.exists())?;
    let existing = if existing.as_os_str().is_empty() {
        std::path::Path::new(".")
    } else {
        existing
    };
    let c_path = std::ffi::CString::new(existing.as_os_str().as_bytes()).ok()?;
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: a valid C string and a buffer statvfs fills when it returns 0.
    if unsafe { libc::statvfs(c_path.as_ptr(), st.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: statvfs returned 0, so it filled the buffer.
    let st = unsafe { st.assume_init() };
    let unit = st.f_frsize;
    Some(Space {
        total: st.f_blocks.saturating_mul(unit),
        free: st.f_bfree.saturating_mul(unit),
        available: st.f_bavail.saturating_mul(unit),
    })
}

/// The most bytes a metadata object (`.zarray`, `.zattrs`, `.zmetadata`, `zarr.json`, …) may
/// have: 512 MiB. Metadata is read whole and parsed in memory, so a damaged or hostile object
/// (a sparse file of gigabytes, a zip entry or S3 object that says it holds them) is refused
/// before it is read rather than allocated. Real metadata is far smaller: the consolidated
/// metadata of 100,000 variables with three attributes each weighs 33 to 71 MB (Zarr v2 to
/// NCZarr on Zarr v3).
pub const METADATA_LIMIT: u64 = 512 << 20;

/// The refusal of the metadata object at `key`, `size` bytes long when known, which is longer
/// than `limit`.
pub(crate) fn metadata_too_large(key: &str, size: Option<u64>, limit: u64) -> Error {
    Error::MetadataTooLarge {
        key: key.to_string(),
        size,
        limit,
    }
}

/// `got`, the object at `key` as read whole, or its refusal when longer than `limit` bytes.
fn within_limit(key: &str, got: Result<Option<Vec<u8>>>, limit: u64) -> Result<Option<Vec<u8>>> {
    match got? {
        Some(bytes) if bytes.len() as u64 > limit => {
            Err(metadata_too_large(key, Some(bytes.len() as u64), limit))
        }
        bytes => Ok(bytes),
    }
}

/// The reader's side of [`ZMap::get_fed`]: it names the objects to read as it has room for
/// them, and takes each one as it arrives.
pub trait Feed {
    /// The keys of the objects to request next, `in_flight` of those named before being still
    /// to come. Asked before the first request and again after each object handed over;
    /// naming nothing while nothing is in flight ends the reads. It may wait for room when
    /// nothing is in flight, and should not otherwise: the objects in flight would wait too.
    fn next_keys(&mut self, in_flight: usize) -> Vec<String>;

    /// The object named `index`-th (from 0, over all the keys named), or `Ok(None)` if it
    /// does not exist: every key named gets exactly one call.
    fn arrived(&mut self, index: usize, object: Result<Option<Vec<u8>>>);
}

/// A key/value store holding one dataset.
pub trait ZMap: Send + Sync + Debug {
    /// Reads the whole object at `key`; `Ok(None)` if it does not exist.
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>>;

    /// Reads the whole metadata object at `key` as [`ZMap::get`] does, refusing one longer
    /// than `limit` bytes ([`Error::MetadataTooLarge`]; readers pass [`METADATA_LIMIT`]) with
    /// no more than `limit` bytes read or allocated. The default reads the object and then
    /// looks at its length, which suits only maps that hold their objects in memory: a map
    /// over storage checks the length the storage gives before it reads.
    fn get_metadata(&self, key: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        within_limit(key, self.get(key), limit)
    }

    /// [`ZMap::get_metadata`] of each of `keys`, one result per key in the same order, as
    /// [`ZMap::get_many`] reads them. The default reads them with `get_many` and then looks
    /// at their lengths, like the default `get_metadata`: a map over storage overrides both.
    fn get_many_metadata(&self, keys: &[String], limit: u64) -> Vec<Result<Option<Vec<u8>>>> {
        keys.iter()
            .zip(self.get_many(keys))
            .map(|(key, got)| within_limit(key, got, limit))
            .collect()
    }

    /// Reads `len` bytes at `offset` of the object at `key` (for sharded arrays);
    /// `Ok(None)` if it does not exist. Ranges past the end are truncated.
    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Option<Vec<u8>>> {
        Ok(self.get(key)?.map(|v| {
            let start = (offset as usize).min(v.len());
            let end = start.saturating_add(len as usize).min(v.len());
            v[start..end].to_vec()
        }))
    }

    /// Reads the last `len` bytes of the object at `key` (all of it when shorter; a sharded
    /// array's index at the end of a shard); `Ok(None)` if it does not exist.
    fn get_suffix(&self, key: &str, len: u64) -> Result<Option<Vec<u8>>> {
        Ok(self.get(key)?.map(|v| {
            let start = v
                .len()
                .saturating_sub(usize::try_from(len).unwrap_or(usize::MAX));
            v[start..].to_vec()
        }))
    }

    /// Reads the whole objects at `keys`, one result per key in the same order (`Ok(None)`
    /// for a missing object). Maps with request latency (S3) fetch them concurrently, up to
    /// [`ZMap::concurrent_gets`] at a time; the default reads them one after the other.
    fn get_many(&self, keys: &[String]) -> Vec<Result<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get(k)).collect()
    }

    /// [`ZMap::get_many`] that hands each object to `each` (with its index in `keys`) as soon
    /// as it has arrived, in any order, instead of when the last one has: a reader waiting for
    /// one of them need not wait for the slowest of the batch. Every key gets exactly one call.
    fn get_each(&self, keys: &[String], each: &mut dyn FnMut(usize, Result<Option<Vec<u8>>>)) {
        for (i, key) in keys.iter().enumerate() {
            each(i, self.get(key));
        }
    }

    /// Reads the objects that `feed` names, asking it for more after each one it is handed:
    /// it can keep as many requests going as it has room for, and name the next one as soon
    /// as an earlier one leaves room (a prefetch, whose share of memory frees chunk by chunk).
    /// Maps with request latency (S3) run up to [`ZMap::concurrent_gets`] of them at once and
    /// hand the objects over as they arrive, in any order; the default reads them one after
    /// the other, in the order named.
    fn get_fed(&self, feed: &mut dyn Feed) {
        let mut named = std::collections::VecDeque::new();
        let mut count = 0;
        loop {
            for key in feed.next_keys(named.len()) {
                named.push_back((count, key));
                count += 1;
            }
            let Some((index, key)) = named.pop_front() else {
                return;
            };
            let object = self.get(&key);
            feed.arrived(index, object);
        }
    }

    /// How many requests [`ZMap::get_many`] keeps in flight. Readers batch their fetches
    /// through `get_many` only when this is more than 1 (for local maps, parallel `get`s from
    /// several threads are as fast and need no batching).
    fn concurrent_gets(&self) -> usize {
        1
    }

    /// Reads the object at `key` into `buf`, replacing its contents but reusing its
    /// allocation, so a reader's hot path allocates nothing per chunk; `Ok(false)` if it does
    /// not exist.
    fn get_into(&self, key: &str, buf: &mut Vec<u8>) -> Result<bool> {
        match self.get(key)? {
            Some(v) => {
                *buf = v;
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Runs `f` on the bytes of the object at `key`; `Ok(false)` if it does not exist. Maps
    /// that keep large objects in local files hand `f` a mapping of the file (no copy);
    /// the others read the object into `scratch`, reusing its allocation.
    fn read_with(
        &self,
        key: &str,
        scratch: &mut Vec<u8>,
        f: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<bool> {
        if !self.get_into(key, scratch)? {
            return Ok(false);
        }
        f(scratch)?;
        Ok(true)
    }

    /// Reads the object at `key` straight into `out` when it is exactly `out.len()` bytes
    /// long (an uncompressed chunk into its place in a caller's buffer). Returns the object's
    /// length, `Ok(None)` if it does not exist; `out` holds the object only when that length
    /// equals `out.len()`, and is otherwise unspecified.
    fn get_exact(&self, key: &str, out: &mut [u8]) -> Result<Option<u64>> {
        Ok(self.get(key)?.map(|v| {
            if v.len() == out.len() {
                out.copy_from_slice(&v);
            }
            v.len() as u64
        }))
    }

    /// Reads bytes `offset..offset + out.len()` of the object at `key` into `out` and returns
    /// the object's whole length (`Ok(None)` if it does not exist); `out` holds the range only
    /// as far as the object reaches.
    fn get_range_into(&self, key: &str, offset: u64, out: &mut [u8]) -> Result<Option<u64>> {
        Ok(self.get(key)?.map(|v| {
            let start = usize::try_from(offset).unwrap_or(usize::MAX).min(v.len());
            let n = out.len().min(v.len() - start);
            out[..n].copy_from_slice(&v[start..start + n]);
            v.len() as u64
        }))
    }

    /// Whether reading part of an object costs about what that part costs (a local file), so
    /// that a reader should fetch only the bytes it needs rather than whole chunks.
    fn partial_reads_are_cheap(&self) -> bool {
        false
    }

    /// The object at `key` as an open local file and its length, for maps that keep each
    /// object in a file of its own, byte for byte (`Ok(None)` otherwise, or if there is no
    /// object), so that a reader can hand its bytes on without reading them.
    fn object_file(&self, _key: &str) -> Result<Option<(std::fs::File, u64)>> {
        Ok(None)
    }

    /// Whether a content-bearing object exists at `key`.
    fn exists(&self, key: &str) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }

    /// Stores `value` at `key`, replacing any previous object atomically: a reader sees
    /// either the old or the new content, never a mix.
    fn put(&self, key: &str, value: &[u8]) -> Result<()>;

    /// Refuses ([`Error::PathTooLong`]) a `key` that [`ZMap::put`] could not store for its
    /// length alone: a directory store's files are bound by the system's limits on the
    /// length of a path and of a name, zip archives and object stores take any key. Writers
    /// ask before they store anything, so that a dataset nested too deeply is refused whole
    /// rather than part way through.
    fn check_key_storable(&self, _key: &str) -> Result<()> {
        Ok(())
    }

    /// Stores every `(key, value)` of `objects` as [`ZMap::put`] does, in no particular order;
    /// fails with the first error, after the requests in flight have ended (some objects may
    /// then be stored, some not). Maps with request latency (S3) send the requests
    /// concurrently, up to [`ZMap::concurrent_gets`] at a time; the default stores them one
    /// after the other.
    fn put_many(&self, objects: &[(String, Vec<u8>)]) -> Result<()> {
        objects.iter().try_for_each(|(k, v)| self.put(k, v))
    }

    /// Removes the object at `key` (and, if `key` is a prefix, everything under it).
    /// Removing something that does not exist is not an error.
    fn delete(&self, key: &str) -> Result<()>;

    /// The immediate child names under `prefix` (`""` for the root): every `name` such that
    /// `prefix/name` is a content-bearing key or a prefix of one. Sorted, without duplicates.
    fn search(&self, prefix: &str) -> Result<Vec<String>>;

    /// Every content-bearing key under `prefix` (`""` for the whole map), sorted: the keys
    /// that begin with `prefix/`, or `prefix` itself when it is an object with nothing under
    /// it. The default walks [`ZMap::search`] down the tree, one listing per prefix; maps
    /// that list a whole prefix at once (S3, a thousand keys per request) do that instead.
    fn keys_under(&self, prefix: &str) -> Result<Vec<String>> {
        walk_keys_under(self, prefix, |p| self.search(p))
    }

    /// Every key under `prefix`, as [`ZMap::keys_under`], for a move of all of them: fails
    /// with [`Error::NotPermitted`] naming the first object stored under `prefix` that no key
    /// names (a file name that is not UTF-8, an S3 key with an empty, `.` or `..` segment),
    /// which the move would leave behind, or delete with the rest. The default is
    /// [`ZMap::keys_under`], for maps whose every object has a key.
    fn keys_to_move(&self, prefix: &str) -> Result<Vec<String>> {
        self.keys_under(prefix)
    }

    /// Copies the object at each `(from, to)` pair's `from` to its `to`, each copy stored as
    /// [`ZMap::put`] stores, in no particular order; a `from` that holds nothing is skipped.
    /// Fails with the first error, after the copies in flight have ended. The default reads
    /// and stores one object after the other; S3 has the server copy them, up to
    /// [`ZMap::concurrent_gets`] at a time, without their bytes passing through here.
    fn copy_many(&self, pairs: &[(String, String)]) -> Result<()> {
        for (from, to) in pairs {
            if let Some(value) = self.get(from)? {
                self.put(to, &value)?;
            }
        }
        Ok(())
    }

    /// Removes the objects at `keys`, each of them an object and not a prefix of others, as
    /// [`ZMap::delete`] removes one. The default deletes one after the other; S3 sends up to
    /// a thousand in one request.
    fn delete_objects(&self, keys: &[String]) -> Result<()> {
        keys.iter().try_for_each(|key| self.delete(key))
    }

    /// Makes every completed `put`/`delete` durable (a zip map rewrites its archive here).
    fn flush(&self) -> Result<()> {
        Ok(())
    }

    /// Whether the map refuses writes.
    fn read_only(&self) -> bool;

    /// This map for one pass of reads over many keys, such as reading a dataset's
    /// metadata, which may keep what it opened on the way to a key for the keys after it: a
    /// directory store then opens an object from its parent group's directory, not from the
    /// root through every level above it (with groups nested thousands deep, that made
    /// reading the metadata cost the square of the depth). What it keeps is as it was when
    /// first opened, so a pass is for one read, not to be kept. `None`: the map itself
    /// serves as well.
    fn for_one_pass(&self) -> Option<Box<dyn ZMap + '_>> {
        None
    }

    /// Forgets what the map remembers of its storage when that was replaced underneath (a zip
    /// archive's index); a reader that re-reads the metadata after a while calls it first.
    fn refresh(&self) -> Result<()> {
        Ok(())
    }

    /// How many times the map has gone over to other storage than the one it read before: a
    /// directory store's root directory or a zip archive that another program put at the
    /// dataset's path, taken up after a [`ZMap::refresh`]. Objects read at one count belong
    /// to another dataset than those read at another, so a reader holding metadata read at
    /// one count must not read values at the next (see [`PinnedMap`]). Maps whose storage is
    /// not replaced as a whole (objects on S3 are rewritten one by one, in place) stay at 0.
    fn storage_generation(&self) -> u64 {
        0
    }

    /// Asks a remote server that the map holds as down (it stopped answering, and requests
    /// fail at once until a probe is answered: see the S3 map) at once, with one request
    /// bounded by the request timeout, rather than when the next probe is due: for an
    /// `fsync`, a `close` (once the window of a failed store has passed: see
    /// [`crate::chunk::ChunkEngine::storage_may_wait`]) or the final flush at unmount, which
    /// must not give up on a server that is back. Maps without such a state do nothing.
    fn probe_if_down(&self) {}

    /// The longest a writer leaves changed chunks that storage refused alone before it tries
    /// to store them again, for a write that needs room (the wait starts at a 32nd of this
    /// and doubles with each failure in a row; an `fsync` or `close` tries at once): each attempt
    /// costs a remote server a request per chunk, and the writer the requests' retries.
    /// `None`: writers try again at once (local storage fails at once and costs nothing to
    /// ask again).
    fn write_back_backoff(&self) -> Option<std::time::Duration> {
        None
    }

    /// The local file system that holds the map, if there is one (not for object stores).
    fn local_space(&self) -> Option<Space> {
        None
    }

    /// A short description for messages and logs (a path or URL, never credentials).
    fn describe(&self) -> String;

    /// Claims the dataset for this process's writer until the map is dropped, refusing
    /// ([`Error::Busy`]) while another process holds the claim: two writers would each store
    /// the metadata from their own view and lose the other's records. The claim is an
    /// advisory lock that nczarrfs takes (netcdf-c and zarr-python take none); maps with
    /// nothing to lock (object stores, memory) claim nothing.
    fn claim_writer(&self) -> Result<()> {
        Ok(())
    }
}

/// An exclusive advisory lock (`flock`) on the file or directory at `path`, held while the
/// returned file stays open (a fork keeps it; an `exec` does not, the file being close-on-exec).
fn lock_exclusively(path: &std::path::Path) -> Result<std::fs::File> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    lock_file(file, path)
}

/// Locks the open `file` (at `path`, which messages name) as [`lock_exclusively`] does.
fn lock_file(file: std::fs::File, path: &std::path::Path) -> Result<std::fs::File> {
    writer_lock::lock(&file, path, writer_lock::Mode::Exclusive)?;
    Ok(file)
}

/// Where `path` leads when it is a symbolic link (followed as far as links go, relative ones
/// from their own directory), or `path` itself.
pub(crate) fn through_links(path: &std::path::Path) -> Result<std::path::PathBuf> {
    let mut path = path.to_path_buf();
    // Linux's own limit on the links one path resolution follows.
    for _ in 0..40 {
        match std::fs::symlink_metadata(&path) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let to = std::fs::read_link(&path).map_err(|e| Error::io(&path, e))?;
                path = match path.parent() {
                    Some(dir) if to.is_relative() => dir.join(to),
                    _ => to,
                };
            }
            _ => return Ok(path),
        }
    }
    Err(Error::io(
        &path,
        std::io::Error::from_raw_os_error(libc::ELOOP),
    ))
}

/// [`ZMap::keys_under`] of `map` by walking a listing of child names (`search`, as
/// [`ZMap::search`]) from `prefix` down.
fn walk_keys_under<M: ZMap + ?Sized>(
    map: &M,
    prefix: &str,
    search: impl Fn(&str) -> Result<Vec<String>>,
) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut stack = vec![prefix.to_string()];
    while let Some(p) = stack.pop() {
        let children = search(&p)?;
        if children.is_empty() {
            // A listing just answered, so an error here is about this one key: s3s-fs, for
            // one, fails a HEAD of a key that is an empty folder on its disk. Nothing is
            // stored under it, and an object of exactly that name is no node's.
            if !p.is_empty() && map.exists(&p).unwrap_or_else(|e| absent(map, &p, &e)) {
                out.push(p);
            }
            continue;
        }
        for c in children {
            stack.push(join_key(&[&p, &c]));
        }
    }
    out.sort();
    Ok(out)
}

/// Logs why `key`, whose existence could not be checked, is taken for absent.
fn absent<M: ZMap + ?Sized>(map: &M, key: &str, error: &Error) -> bool {
    log::debug!("{}: {key:?} taken for absent: {error}", map.describe());
    false
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

/// Opens the storage of `location`; `writable` asks for a read-write map.
///
/// Opening creates nothing: a read-only open of a missing path fails with "no such file or
/// directory", while a writable open of a missing path yields an empty map whose directory or
/// archive appears with the first `put` (directory tree) or `flush` (zip).
pub fn open(location: &Location, writable: bool) -> Result<Arc<dyn ZMap>> {
    match &location.storage {
        Storage::File(path) => Ok(Arc::new(FileMap::open(path, writable)?)),
        Storage::Zip(path) => {
            let map = ZipMap::open(path, writable)?;
            Ok(Arc::new(match writable {
                true => in_netcdf_c_folder(map, location),
                false => map,
            }))
        }
        Storage::Memory => Ok(Arc::new(MemoryMap::new())),
        Storage::S3(s3) => Ok(Arc::new(S3Map::open(s3, writable)?)),
    }
}

/// Opens a writable map for a new dataset at `location` that this process makes itself: a
/// directory is made at once (anything at its path, a symbolic link included, is an error),
/// and the map keeps working in that directory whatever is put at its name afterwards; an
/// archive is made by the first flush, at its path itself and replacing nothing (see
/// [`FileMap::create_new`] and [`ZipMap::create_new`]). Datasets built beside their final
/// place (`gen`, `copy`), in directories other users may write to, are opened so.
pub fn open_new(location: &Location) -> Result<Arc<dyn ZMap>> {
    match &location.storage {
        Storage::File(path) => Ok(Arc::new(FileMap::create_new(path)?)),
        Storage::Zip(path) => Ok(Arc::new(in_netcdf_c_folder(
            ZipMap::create_new(path),
            location,
        ))),
        _ => open(location, true),
    }
}

/// NCZarr is for netcdf-c, which opens only its own layout of an archive: the dataset under
/// a folder named after the archive (the target's name, which a staged write's temporary
/// path is not). `map` is put so if it is new and holds NCZarr.
fn in_netcdf_c_folder(map: ZipMap, location: &Location) -> ZipMap {
    let for_netcdf_c =
        location.mode.format != Some(Format::Zarr) && location.mode.zarr_version != Some(3);
    match (for_netcdf_c, zip_folder_name(location)) {
        (true, Some(folder)) => map.in_folder_if_new(&folder),
        _ => map,
    }
}

/// The folder netcdf-c puts a new archive's dataset in: the archive's file name without its
/// extension (`ds.file.zip` holds `ds.file/`), as its `nczm_basename` makes it. Entry names
/// are text: bytes of the name that are not UTF-8 become U+FFFD there (netcdf-c cannot name
/// such an archive at all: it drops the bytes beyond ASCII of a URL).
fn zip_folder_name(location: &Location) -> Option<String> {
    let original = location.original.as_bytes();
    let target = original.split(|&b| b == b'#').next()?;
    let name = target.rsplit(|&b| b == b'/').next()?;
    let base = match name.iter().rposition(|&b| b == b'.') {
        Some(dot) => &name[..dot],
        None => name,
    };
    (!base.is_empty()).then(|| String::from_utf8_lossy(base).into_owned())
}

/// Checks that `key` is a well-formed object key: non-empty `/`-separated segments, none of
/// them `.` or `..`, no leading or trailing `/`, no NUL.
///
/// Keys become file paths and zip entry names, so anything that could name a location outside
/// the dataset root is refused. A backslash is an ordinary character of a netCDF name (`a\b`),
/// which netcdf-c writes into keys as it is.
pub fn validate_key(key: &str) -> Result<()> {
    let bad = |reason: &str| {
        Err(Error::Storage {
            key: key.to_string(),
            reason: reason.to_string(),
        })
    };
    if key.is_empty() {
        return bad("empty key");
    }
    if key.contains('\0') {
        return bad("key contains a NUL character");
    }
    if key.starts_with('/') {
        return bad("key starts with '/'");
    }
    for segment in key.split('/') {
        match segment {
            "" => return bad("key has an empty segment"),
            "." | ".." => return bad("key has a '.' or '..' segment"),
            _ => {}
        }
    }
    Ok(())
}

/// Like [`validate_key`], but also accepts `""`, the dataset root (for [`ZMap::search`]).
pub fn validate_prefix(prefix: &str) -> Result<()> {
    if prefix.is_empty() {
        Ok(())
    } else {
        validate_key(prefix)
    }
}

/// The immediate child names under `prefix` among `keys` (content-bearing keys, in any order):
/// the [`ZMap::search`] semantics for maps that keep every key in memory. The result is sorted
/// and free of duplicates.
pub fn search_keys<'a, I>(keys: I, prefix: &str) -> Vec<String>
where
    I: IntoIterator<Item = &'a str>,
{
    let start = if prefix.is_empty() {
        String::new()
    } else {
        format!("{prefix}/")
    };
    // Even sorted keys do not give sorted first segments ("a!b" < "a/x"), hence the set.
    let mut names = std::collections::BTreeSet::new();
    for key in keys {
        if let Some(rest) = key.strip_prefix(start.as_str()) {
            let name = rest.split('/').next().unwrap_or(rest);
            if !name.is_empty() {
                names.insert(name.to_string());
            }
        }
    }
    names.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zip_folders_are_named_as_netcdf_c_names_them() {
        let name = |original: &str| zip_folder_name(&Location::parse(original).unwrap());
        assert_eq!(name("/data/ds.zip").as_deref(), Some("ds"));
        assert_eq!(name("ds.file.zip").as_deref(), Some("ds.file"));
        let url = "file:///data/ref.zip#mode=nczarr,zip";
        assert_eq!(name(url).as_deref(), Some("ref"));
    }
}
