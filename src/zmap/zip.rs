//! A zip archive holding one dataset.
//!
//! Two layouts exist: zarr-python's `ZipStore` puts keys at the archive root, netcdf-c puts
//! every key under one top-level folder (`ref_oldformat/.zgroup`) and takes the dataset folder
//! from the archive's first entry. Both are read; a rewritten archive keeps its layout. A new
//! archive has netcdf-c's layout when it holds NCZarr (see [`ZipMap::in_folder_if_new`]), and
//! the root layout otherwise (the one zarr-python can open).
//!
//! The archive is indexed at open. Reads decompress on demand. Writes are kept in memory
//! until [`ZMap::flush`], which writes a whole new archive beside the old one and renames it
//! into place, so the archive on disk is always complete.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};

use zip::result::ZipError;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

use super::temp_files::{keep_mode_and_owner, Ownership};
use super::{search_keys, validate_key, validate_prefix, ZMap};
use crate::{Error, Result};

/// Objects whose presence at a level marks it as the root of a Zarr or NCZarr hierarchy.
const ROOT_MARKERS: [&str; 6] = [
    ".zgroup",
    ".zarray",
    ".zattrs",
    "zarr.json",
    ".nczarr",
    ".zmetadata",
];

/// The longest a zip archive's end record can be: 22 bytes and a comment of up to 65,535.
const END_RECORD_MAX: u64 = 22 + 65_535;

/// Whether the file at `path` is a zip archive as zip readers find one: it begins with a
/// local file header (or the end record of an empty archive), or its last 64 KiB hold an end
/// record, as in an archive that follows other data (a self-extracting stub, `cat stub
/// a.zip`), which zarr-python's `ZipStore`, Python's `zipfile` and `unzip` all read.
pub fn looks_like_zip(path: &Path) -> bool {
    let Ok(mut file) = File::open(path) else {
        return false;
    };
    let mut magic = [0u8; 4];
    if file.read_exact(&mut magic).is_ok() && (magic == *b"PK\x03\x04" || magic == *b"PK\x05\x06") {
        return true;
    }
    let Ok(len) = file.metadata().map(|m| m.len()) else {
        return false;
    };
    let from = len.saturating_sub(END_RECORD_MAX);
    let mut tail = Vec::new();
    if file.seek(SeekFrom::Start(from)).is_err() || file.read_to_end(&mut tail).is_err() {
        return false;
    }
    // An end record, whose comment length reaches exactly to the end of the file.
    tail.windows(22).enumerate().any(|(at, record)| {
        record.starts_with(b"PK\x05\x06")
            && at + 22 + usize::from(u16::from_le_bytes([record[20], record[21]])) == tail.len()
    })
}

/// A dataset stored in a zip archive.
#[derive(Debug)]
pub struct ZipMap {
    path: PathBuf,
    read_only: bool,
    /// The top-level folder holding the dataset including its trailing `/`, or `""`.
    folder: String,
    state: Mutex<State>,
    /// The archive, locked while a writer holds its claim. A flush locks the new archive
    /// before renaming it into place, so the claim never lapses.
    writer_claim: Mutex<Option<File>>,
    /// [`ZMap::storage_generation`]: bumped when a refresh finds another archive (or none) at
    /// the path.
    generation: AtomicU64,
}

#[derive(Debug)]
struct State {
    /// `None` while the archive does not exist yet (a new writable map).
    archive: Option<ZipArchive<File>>,
    /// The archive's file, for the bytes before its first entry (see [`prefix_len`]).
    file: Option<File>,
    /// Every content-bearing key (relative to `folder`) and where its bytes are.
    objects: BTreeMap<String, Source>,
    /// The directory entries under `folder` (`zip -r` and Python's `zipfile` write them), by
    /// their names relative to it with the trailing `/`: their entry numbers, and whether
    /// objects were below them. A rewrite keeps them, less those of deleted keys and those
    /// whose objects are all gone (a group or variable deleted one object at a time).
    dirs: BTreeMap<String, (usize, bool)>,
    /// Entries beside the dataset's folder (a README next to it), with their names: kept as
    /// they are.
    outside: Vec<(usize, String)>,
    /// The name of an entry that a rewrite would not keep as it is (see [`entry_name`]).
    inexact_name: Option<String>,
    /// Whether `objects` differs from the archive on disk.
    dirty: bool,
    /// The archive file indexed (see [`file_identity`]), to notice its replacement.
    identity: Option<FileIdentity>,
    /// Bytes of [`Source::Local`] objects.
    held: usize,
    spill: Option<Spill>,
}

/// The bytes of a changed object (`None` for one in the archive).
fn changed_bytes(spill: &Option<Spill>, source: &Source) -> io::Result<Option<Vec<u8>>> {
    Ok(match source {
        Source::Archived(_) => None,
        Source::Local(bytes) => Some(bytes.clone()),
        Source::Spilled { offset, len } => {
            let mut bytes = vec![0u8; *len];
            spill
                .as_ref()
                .ok_or_else(|| io::Error::other("spill file missing"))?
                .read(*offset, &mut bytes)?;
            Some(bytes)
        }
    })
}

impl State {
    /// Forgets the objects held since the last flush (now in the archive, or given up).
    fn drop_changes(&mut self) {
        self.held = 0;
        self.spill = None;
    }
}

/// Device, inode, size and modification time of a file: a new archive written beside it
/// and renamed over it (as every writer does) differs in at least one.
type FileIdentity = (u64, u64, u64, i64, i64);

fn file_identity(path: &Path) -> Option<FileIdentity> {
    fs::metadata(path).ok().map(|m| identity_of(&m))
}

fn identity_of(m: &fs::Metadata) -> FileIdentity {
    use std::os::unix::fs::MetadataExt;
    (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec())
}

#[derive(Debug)]
enum Source {
    /// Entry number in the archive.
    Archived(usize),
    /// Written since the last flush.
    Local(Vec<u8>),
    /// Written since the last flush, to the spill file at this offset.
    Spilled { offset: u64, len: usize },
}

/// How many bytes of changed objects a map holds in memory; the rest wait in a spill file
/// beside the archive until the flush writes the new archive. The chunk cache bounds what a
/// writer holds back, and a zip map would otherwise keep everything the cache hands it
/// between two flushes.
const HELD_IN_MEMORY: usize = 32 << 20;

/// An unlinked file beside the archive holding changed objects until the next flush.
#[derive(Debug)]
struct Spill {
    file: File,
    len: u64,
}

impl Spill {
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.read_exact_at(out, offset)
    }
}

impl ZipMap {
    /// Opens the archive at `path`.
    ///
    /// A missing archive is an error unless `writable`, in which case the map starts empty and
    /// the archive is created by the first `flush`. An entry whose name could escape the
    /// archive (absolute, `..`, a drive letter) makes the open fail.
    pub fn open(path: &Path, writable: bool) -> Result<Self> {
        let file = match super::file::open_object(path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound && writable => {
                return Ok(ZipMap::create_new(path))
            }
            Err(e) => return Err(Error::io(path, e)),
        };
        let meta = file.metadata().map_err(|e| Error::io(path, e))?;
        if !meta.is_file() {
            let what = if meta.is_dir() {
                "a directory"
            } else {
                "not a regular file"
            };
            return Err(Error::NotZarr {
                location: path.display().to_string(),
                reason: format!("{what}, not a zip archive"),
            });
        }
        let raw = file.try_clone().map_err(|e| Error::io(path, e))?;
        let mut archive = ZipArchive::new(file).map_err(|e| Error::NotZarr {
            location: path.display().to_string(),
            reason: format!("not a readable zip archive: {}", unreadable_archive(&e)),
        })?;
        let entries = list_entries(&mut archive, path)?;
        let mut map = ZipMap::create_new(path);
        map.read_only = !writable;
        map.folder = dataset_folder(&entries);
        map.install(&mut map.lock(), archive, raw, &entries, &meta);
        Ok(map)
    }

    /// A writable map for a new archive at `path`, which the first flush creates there; the
    /// path is not looked at before (anything at it then, a symbolic link included, makes
    /// that flush fail rather than be followed or replaced).
    pub fn create_new(path: &Path) -> Self {
        ZipMap {
            path: path.to_path_buf(),
            read_only: false,
            folder: String::new(),
            state: Mutex::new(State {
                archive: None,
                file: None,
                objects: BTreeMap::new(),
                dirs: BTreeMap::new(),
                outside: Vec::new(),
                inexact_name: None,
                dirty: false,
                identity: None,
                held: 0,
                spill: None,
            }),
            writer_claim: Mutex::new(None),
            generation: AtomicU64::new(0),
        }
    }

    /// Where the archive's file is: through a symbolic link, the archive it points to is
    /// replaced and the link stays. A new archive (none read) is made at the map's path
    /// itself, through no link.
    fn target_of(&self, state: &State) -> Result<PathBuf> {
        match state.identity {
            Some(_) => super::through_links(&self.path),
            None => Ok(self.path.clone()),
        }
    }

    /// Puts the dataset under the top-level `folder` if the archive does not exist yet:
    /// netcdf-c's layout, the only one its zip map opens (it takes the dataset's folder from
    /// the archive's first entry; `libnczarr/zmap_zip.c`).
    pub fn in_folder_if_new(mut self, folder: &str) -> Self {
        let new = self.lock().archive.is_none() && !folder.is_empty();
        if new {
            self.folder = format!("{}/", folder.trim_end_matches('/'));
        }
        self
    }

    /// The top-level folder of the archive that holds the dataset (netcdf-c's layout), or
    /// `None` when keys are at the archive root.
    pub fn root_folder(&self) -> Option<&str> {
        self.folder.strip_suffix('/')
    }

    // Every update of the state is completed before anything can panic or the state is
    // replaced as a whole, so a poisoned lock still guards a consistent state.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn read_error(&self, key: &str, e: &dyn std::fmt::Display) -> Error {
        Error::Storage {
            key: key.to_string(),
            reason: format!("reading {}: {e}", self.path.display()),
        }
    }

    /// The error of a failed read of archived entry `key` (`e`), where `identity` is the
    /// archive indexed: [`ZipMap::unchanged_since_read`]'s when another program has since
    /// replaced, removed or rewritten the archive in place (the index's offsets then point at
    /// other bytes, which is why the read failed), so that the cause is told rather than a
    /// bad local header. Checked only once a read failed: a read that succeeds costs no stat.
    fn archived_read_error(
        &self,
        identity: Option<FileIdentity>,
        key: &str,
        e: &dyn std::fmt::Display,
    ) -> Error {
        let changed = identity.and_then(|read| {
            super::through_links(&self.path)
                .and_then(|target| self.unchanged_since_read(&target, read))
                .err()
        });
        match changed {
            Some(busy @ Error::Busy(_)) => busy,
            _ => self.read_error(key, e),
        }
    }

    /// [`ZMap::get`] of an object that may have at most `limit` bytes
    /// ([`Error::MetadataTooLarge`] otherwise): an archived entry is refused by its declared
    /// size, before anything is inflated.
    fn get_up_to(&self, key: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        validate_key(key)?;
        let mut state = self.lock();
        let State {
            archive,
            objects,
            spill,
            identity,
            ..
        } = &mut *state;
        let identity = *identity;
        let too_large = |size: u64| super::metadata_too_large(key, Some(size), limit);
        let index = match objects.get(key) {
            None => return Ok(None),
            Some(Source::Archived(index)) => *index,
            Some(Source::Local(bytes)) if bytes.len() as u64 > limit => {
                return Err(too_large(bytes.len() as u64))
            }
            Some(Source::Spilled { len, .. }) if *len as u64 > limit => {
                return Err(too_large(*len as u64))
            }
            Some(changed) => {
                return changed_bytes(spill, changed).map_err(|e| self.read_error(key, &e))
            }
        };
        let storage_err = |e: &dyn std::fmt::Display| self.archived_read_error(identity, key, e);
        let why = match open_entry(archive, index) {
            Ok((_, declared)) if declared > limit => return Err(too_large(declared)),
            Ok((mut entry, declared)) => {
                // The declared size only sizes the buffer; a lying header cannot force a huge
                // allocation.
                let hint = usize::try_from(declared).unwrap_or(0).min(64 << 20);
                let mut bytes = Vec::with_capacity(hint);
                (&mut entry)
                    .take(declared.saturating_add(1))
                    .read_to_end(&mut bytes)
                    .map_err(|e| storage_err(&e))?;
                if bytes.len() as u64 > declared {
                    return Err(storage_err(&beyond_declared(declared)));
                }
                return Ok(Some(bytes));
            }
            Err(why) => why,
        };
        Err(storage_err(&unreadable_entry(archive, index, why)))
    }

    /// Refuses to rewrite an archive holding an entry whose name is not UTF-8: the new
    /// archive would hold that name re-encoded, other bytes than the ones its maker wrote.
    fn check_names_kept(&self, state: &State) -> Result<()> {
        match &state.inexact_name {
            None => Ok(()),
            Some(name) => Err(Error::Unsupported(format!(
                "{} cannot be rewritten: the name of its entry {} is not UTF-8 (it is read as \
                 code page 437), and the new archive could not keep its bytes; open it \
                 read-only",
                self.path.display(),
                crate::error::quoted(name)
            ))),
        }
    }

    /// The metadata of the archive file at `target`, if it is still the one indexed (`read`):
    /// neither removed, nor replaced by another file, nor rewritten in place (`cp other.zip
    /// ds.zip`, zarr-python's `ZipStore(mode="a")`), which changes its size or modification
    /// time. A rewrite from the old index would copy the entries from offsets that now hold
    /// other bytes.
    fn unchanged_since_read(&self, target: &Path, read: FileIdentity) -> Result<fs::Metadata> {
        let changed = |what: &str| {
            Error::Busy(format!(
                "{}: the archive was {what} by another program since it was read; it is not \
                 overwritten, and the changes since are not written",
                self.path.display()
            ))
        };
        let meta = match fs::metadata(target) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Err(changed("removed")),
            Err(e) => return Err(Error::io(target, e)),
        };
        let now = identity_of(&meta);
        if (now.0, now.1) != (read.0, read.1) {
            return Err(changed("replaced"));
        }
        if now != read {
            return Err(changed("rewritten in place"));
        }
        Ok(meta)
    }

    fn check_writable(&self, key: &str) -> Result<()> {
        if self.read_only {
            return Err(Error::NotPermitted(format!(
                "cannot modify {key:?}: {} is open read-only",
                self.path.display()
            )));
        }
        Ok(())
    }

    /// Indexes the archive open as `file` (the one at the map's path) in place of `state`'s,
    /// forgetting the changes held (flushed into it, or given up).
    fn reindex(&self, state: &mut State, file: File) -> Result<()> {
        let meta = file.metadata().map_err(|e| Error::io(&self.path, e))?;
        let raw = file.try_clone().map_err(|e| Error::io(&self.path, e))?;
        let mut archive = ZipArchive::new(file).map_err(|e| Error::Storage {
            key: String::new(),
            reason: format!(
                "reopening {}: {}",
                self.path.display(),
                unreadable_archive(&e)
            ),
        })?;
        let entries = list_entries(&mut archive, &self.path)?;
        self.install(state, archive, raw, &entries, &meta);
        Ok(())
    }

    /// Makes `archive`, of `entries`, open as `file` (whose metadata is `meta`), the one
    /// `state` holds, forgetting the changes held.
    fn install(
        &self,
        state: &mut State,
        archive: ZipArchive<File>,
        file: File,
        entries: &[Entry],
        meta: &fs::Metadata,
    ) {
        state.objects = index_objects(entries, &self.folder);
        state.dirs = index_dirs(entries, &self.folder, &state.objects);
        state.outside = outside_entries(entries, &self.folder);
        state.inexact_name = inexact_name(entries);
        state.archive = Some(archive);
        state.file = Some(file);
        state.identity = Some(identity_of(meta));
        state.drop_changes();
    }

    /// Appends `value` to the spill file (made, and unlinked at once, on first use).
    fn spill(&self, state: &mut State, value: &[u8]) -> Result<Source> {
        use std::os::unix::fs::FileExt;
        if state.spill.is_none() {
            let (dir, temp_prefix) = temp_place(&self.target_of(state)?);
            let (file, path) =
                super::temp_files::create_in(&dir, |token| temp_name(&temp_prefix, token))
                    .map_err(|e| Error::io(&self.path, e))?;
            // Nothing to clean up afterwards: the space is freed when the file is closed.
            fs::remove_file(&path).map_err(|e| Error::io(&path, e))?;
            state.spill = Some(Spill { file, len: 0 });
        }
        let Some(spill) = state.spill.as_mut() else {
            unreachable!("made above");
        };
        spill
            .file
            .write_all_at(value, spill.len)
            .map_err(|e| Error::io(self.path.as_path(), e))?;
        let source = Source::Spilled {
            offset: spill.len,
            len: value.len(),
        };
        spill.len += value.len() as u64;
        Ok(source)
    }

    /// Writes the whole archive to `file`, new at `temp`: the dataset folder's entry first
    /// (netcdf-c names the dataset after the first entry), then every object in key order,
    /// each directory entry kept just before the objects below it (where `zip -r` puts it),
    /// then the entries beside the folder as they were, and the archive's comment. The new
    /// archive takes the mode and owner of the `old` one's file. Returns `file`, synced.
    fn write_archive(
        &self,
        state: &mut State,
        file: File,
        temp: &Path,
        old: Option<Ownership>,
    ) -> Result<File> {
        // An I/O error (a full disk) keeps its errno for the mount's caller.
        let storage_err = |key: &str, e: ZipError| match e {
            ZipError::Io(io) => Error::io(temp, io),
            other => Error::Storage {
                key: key.to_string(),
                reason: format!("writing {}: {other}", temp.display()),
            },
        };
        self.check_names_kept(state)?;
        if let Some(old) = old {
            keep_mode_and_owner(&file, old).map_err(|e| Error::io(temp, e))?;
        }
        let mut out = TempArchive::new(file);
        // What precedes the archive (a self-extracting stub, `cat stub a.zip`) stays before
        // it; the new archive's offsets count from the file's start, as `zip -A` makes them.
        if let (Some(archive), Some(old)) = (&mut state.archive, &state.file) {
            let len = prefix_len(archive).map_err(|e| storage_err("", e))?;
            copy_prefix(old, len, &mut out).map_err(|e| Error::io(temp, e))?;
        }
        let mut writer = ZipWriter::new(out);
        if let Some(archive) = &state.archive {
            writer.set_raw_comment(archive.comment().into());
        }
        let options = SimpleFileOptions::default()
            .compression_method(CompressionMethod::Stored)
            .last_modified_time(local_time_now());
        if !self.folder.is_empty() {
            writer
                .add_directory(self.folder.as_str(), options)
                .map_err(|e| storage_err(&self.folder, e))?;
        }
        let State {
            archive,
            objects,
            dirs,
            outside,
            spill,
            ..
        } = state;
        let mut dirs = dirs.iter().peekable();
        let copy_dir = |archive: &mut Option<ZipArchive<File>>,
                        writer: &mut ZipWriter<TempArchive>,
                        dir: &String,
                        index: usize| {
            let name = format!("{}{dir}", self.folder);
            copy_raw(archive, writer, index, name).map_err(|e| storage_err(dir, e))
        };
        for (key, source) in objects.iter() {
            // A directory's name with its `/` sorts before every key below it, and those keys
            // come right after it.
            while let Some((dir, (index, had_objects))) =
                dirs.next_if(|(dir, _)| dir.as_str() < key.as_str())
            {
                if key.starts_with(dir.as_str()) || !had_objects {
                    copy_dir(archive, &mut writer, dir, *index)?;
                }
            }
            let name = format!("{}{key}", self.folder);
            match source {
                Source::Archived(index) => {
                    copy_raw(archive, &mut writer, *index, name).map_err(|e| storage_err(key, e))?
                }
                Source::Local(bytes) => {
                    let large = u32::try_from(bytes.len()).is_err();
                    writer
                        .start_file(name, options.large_file(large))
                        .map_err(|e| storage_err(key, e))?;
                    writer.write_all(bytes).map_err(|e| Error::io(temp, e))?;
                }
                Source::Spilled { offset, len } => {
                    let spill = spill.as_ref().ok_or_else(|| Error::Storage {
                        key: key.clone(),
                        reason: "its spill file is gone".into(),
                    })?;
                    let large = u32::try_from(*len).is_err();
                    writer
                        .start_file(name, options.large_file(large))
                        .map_err(|e| storage_err(key, e))?;
                    let mut piece = vec![0u8; (*len).min(1 << 20)];
                    let mut done = 0;
                    while done < *len {
                        let n = piece.len().min(len - done);
                        spill
                            .read(offset + done as u64, &mut piece[..n])
                            .map_err(|e| Error::io(self.path.as_path(), e))?;
                        writer
                            .write_all(&piece[..n])
                            .map_err(|e| Error::io(temp, e))?;
                        done += n;
                    }
                }
            }
        }
        for (dir, (index, had_objects)) in dirs {
            if !had_objects {
                copy_dir(archive, &mut writer, dir, *index)?;
            }
        }
        for (index, name) in outside.iter() {
            copy_raw(archive, &mut writer, *index, name.clone()).map_err(|e| storage_err("", e))?;
        }
        let archive = writer.finish().map_err(|e| storage_err("", e))?;
        archive.file.sync_all().map_err(|e| Error::io(temp, e))?;
        Ok(archive.file)
    }
}

/// The local time now, as zip entries record their modification time (whole seconds, from
/// 1980 on); 1980-01-01 if the clock is outside what zip can record.
fn local_time_now() -> zip::DateTime {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let seconds = libc::time_t::try_from(now).unwrap_or(0);
    // SAFETY: `tm` is plain data written by localtime_r, which only reads `seconds`.
    let mut tm: libc::tm = unsafe { std::mem::zeroed() };
    if unsafe { libc::localtime_r(&seconds, &mut tm) }.is_null() {
        return zip::DateTime::default();
    }
    let field = |v: libc::c_int| u8::try_from(v).unwrap_or(0);
    u16::try_from(tm.tm_year + 1900)
        .ok()
        .and_then(|year| {
            zip::DateTime::from_date_and_time(
                year,
                field(tm.tm_mon + 1),
                field(tm.tm_mday),
                field(tm.tm_hour),
                field(tm.tm_min),
                // A leap second (60) is past what zip records.
                field(tm.tm_sec.min(59)),
            )
            .ok()
        })
        .unwrap_or_default()
}

/// The file a new archive is written to. After its first failed operation it lets the rest
/// pass without doing anything, at the positions they would have had: the zip writer, dropped
/// on the way out of a failed [`ZipMap::write_archive`], finishes the archive then, and
/// prints on stderr (into the mount's log, without a line end) any failure of that, such as
/// one from sizes computed with positions that make no sense. The file is removed anyway.
struct TempArchive<F = File> {
    file: F,
    failed: bool,
    /// Where the next write goes.
    position: u64,
    /// How long the file is (would be, after a failure).
    len: u64,
}

impl<F> TempArchive<F> {
    fn new(file: F) -> Self {
        TempArchive {
            file,
            failed: false,
            position: 0,
            len: 0,
        }
    }

    fn track<T>(&mut self, result: io::Result<T>) -> io::Result<T> {
        self.failed |= result.is_err();
        result
    }
}

impl<F: Write> Write for TempArchive<F> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let written = match self.failed {
            true => buf.len(),
            false => {
                let result = self.file.write(buf);
                self.track(result)?
            }
        };
        self.position += written as u64;
        self.len = self.len.max(self.position);
        Ok(written)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.failed {
            return Ok(());
        }
        let result = self.file.flush();
        self.track(result)
    }
}

impl<F: Seek> Seek for TempArchive<F> {
    fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
        if !self.failed {
            let result = self.file.seek(pos);
            self.position = self.track(result)?;
            return Ok(self.position);
        }
        let (base, offset) = match pos {
            SeekFrom::Start(to) => (to, 0),
            SeekFrom::Current(by) => (self.position, by),
            SeekFrom::End(by) => (self.len, by),
        };
        self.position = base
            .checked_add_signed(offset)
            .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
        Ok(self.position)
    }
}

/// The directory that holds the archive `target` (a path through no symbolic link), and the
/// name prefix of the temporary files a writer puts there (left by a writer that died, they
/// are removed by the next writer's claim and at each flush), the archive's name in it byte
/// for byte (or its start and a
/// hash when it is long, see [`super::temp_files::name_stem`]).
fn temp_place(target: &Path) -> (PathBuf, OsString) {
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let mut prefix = OsString::from(".");
    prefix.push(super::temp_files::name_stem(
        target.file_name().unwrap_or_default(),
    ));
    prefix.push(".nczarrfs-tmp.");
    (dir, prefix)
}

/// The temporary file `{prefix}PID.TOKEN` of this process.
fn temp_name(prefix: &OsStr, token: &str) -> OsString {
    let mut name = prefix.to_os_string();
    name.push(format!("{}.{token}", std::process::id()));
    name
}

/// Refuses to rewrite an archive that this user may not write, as a shell refuses to write
/// such a file: the rewrite replaces it by a rename, which only the directory's mode allows.
fn check_may_rewrite(archive: &Path) -> Result<()> {
    let c_path = std::ffi::CString::new(archive.as_os_str().as_bytes())
        .map_err(|e| Error::io(archive, io::Error::new(io::ErrorKind::InvalidInput, e)))?;
    // SAFETY: `c_path` is a NUL-terminated string that outlives the call.
    if unsafe { libc::access(c_path.as_ptr(), libc::W_OK) } == 0 {
        return Ok(());
    }
    Err(Error::io(archive, io::Error::last_os_error()))
}

/// Removes the partial archives and spill files `{prefix}PID.TOKEN` in `dir` (or
/// `{prefix}PID`, as earlier versions named them) left by writers killed while they wrote
/// them (their process is gone).
fn remove_orphans(dir: &Path, prefix: &OsStr) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name
            .as_bytes()
            .strip_prefix(prefix.as_bytes())
            .and_then(|rest| match rest.iter().position(|&b| b == b'.') {
                Some(dot) if super::temp_files::is_token(&rest[dot + 1..]) => Some(&rest[..dot]),
                Some(_) => None,
                None => Some(rest),
            })
            .and_then(|pid| std::str::from_utf8(pid).ok()?.parse::<libc::pid_t>().ok())
            .filter(|pid| *pid > 0)
        else {
            continue;
        };
        // SAFETY: signal 0 only checks that the process exists.
        let gone = unsafe { libc::kill(pid, 0) } == -1
            && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if gone {
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// How many bytes precede the archive's first entry (or its central directory, when it has
/// no entries) in its file.
fn prefix_len(archive: &mut ZipArchive<File>) -> zip::result::ZipResult<u64> {
    let mut first = archive.central_directory_start();
    for index in 0..archive.len() {
        first = first.min(archive.by_index_raw(index)?.header_start());
    }
    Ok(first)
}

/// Copies the first `len` bytes of `file` to `out`.
fn copy_prefix(file: &File, len: u64, out: &mut impl Write) -> io::Result<()> {
    use std::os::unix::fs::FileExt;
    let mut piece = vec![0u8; usize::try_from(len.min(1 << 20)).unwrap_or(1 << 20)];
    let mut done = 0u64;
    while done < len {
        let n = piece
            .len()
            .min(usize::try_from(len - done).unwrap_or(usize::MAX));
        file.read_exact_at(&mut piece[..n], done)?;
        out.write_all(&piece[..n])?;
        done += n as u64;
    }
    Ok(())
}

/// Copies entry `index` of `archive` into `writer` as it is stored (no recompression), under
/// `name`, the one it was read under (the zip crate's own copy would write the name as it
/// decoded it, code page 437 for an unflagged name, changing a UTF-8 one's bytes).
fn copy_raw(
    archive: &mut Option<ZipArchive<File>>,
    writer: &mut ZipWriter<TempArchive>,
    index: usize,
    name: String,
) -> zip::result::ZipResult<()> {
    let archive = archive.as_mut().ok_or(ZipError::FileNotFound)?;
    let entry = archive.by_index_raw(index)?;
    writer.raw_copy_file_rename(entry, name)
}

/// Why the zip crate could not read an archive: its I/O error says only "i/o error", and the
/// one behind it, an end of file in the middle of a record, means the file is cut short.
fn unreadable_archive(e: &ZipError) -> String {
    match e {
        ZipError::Io(io) if io.kind() == io::ErrorKind::UnexpectedEof => {
            "the file ends in the middle of a zip record: it is truncated, its \
             end-of-central-directory record or central directory cut short"
                .to_string()
        }
        ZipError::Io(io) => format!("i/o error: {io}"),
        other => other.to_string(),
    }
}

/// The most a deflate stream can expand: 258 bytes per 2-bit symbol at best, 1032 to 1.
const DEFLATE_MAX_RATIO: u64 = 1032;

/// Opens entry `index` for reading with its declared (uncompressed) size, refusing a
/// deflated entry that declares more than deflate can produce from its compressed bytes.
/// Readers must still stop at the declared size: [`beyond_declared`].
fn open_entry(
    archive: &mut Option<ZipArchive<File>>,
    index: usize,
) -> std::result::Result<(zip::read::ZipFile<'_, File>, u64), String> {
    let archive = archive.as_mut().ok_or("archive entry without an archive")?;
    let entry = archive.by_index(index).map_err(|e| e.to_string())?;
    let declared = entry.size();
    let compressed = entry.compressed_size();
    let limit = compressed
        .saturating_mul(DEFLATE_MAX_RATIO)
        .saturating_add(1024);
    if entry.compression() == CompressionMethod::Deflated && declared > limit {
        return Err(format!(
            "zip entry declares {declared} bytes from {compressed} compressed bytes, more than \
             deflate can produce: the archive is corrupt or hostile"
        ));
    }
    Ok((entry, declared))
}

/// Names the compression method of entry `index` when that is why it cannot be read (the zip
/// crate says only "Compression method not supported"); otherwise `why` as it is.
fn unreadable_entry(archive: &mut Option<ZipArchive<File>>, index: usize, why: String) -> String {
    let Some(entry) = archive.as_mut().and_then(|a| a.by_index_raw(index).ok()) else {
        return why;
    };
    #[allow(deprecated)] // The number is what zip tools and the zip specification show.
    let number = entry.compression().to_u16();
    let method = match number {
        0 | 8 => return why,
        1 => "shrink",
        6 => "implode",
        9 => "deflate64",
        12 => "bzip2",
        14 => "LZMA",
        93 => "Zstandard",
        95 => "xz",
        98 => "PPMd",
        99 => "AES encryption",
        _ => "an unknown method",
    };
    format!(
        "zip entry {} is compressed with {method} (method {number}); only stored (0) and \
         deflated (8) entries are read (Info-ZIP's zip and zarr-python write these)",
        crate::error::quoted(entry.name())
    )
}

/// The complaint about an entry that inflates past its declared size (a zip bomb whose
/// header lies), which is never inflated further.
fn beyond_declared(declared: u64) -> String {
    format!(
        "zip entry inflates beyond its declared {declared} bytes: the archive is corrupt or \
         hostile"
    )
}

/// One archive entry: its number, its name without a trailing `/`, and whether it is a
/// directory entry.
struct Entry {
    index: usize,
    name: String,
    is_dir: bool,
    /// Whether `name` (with its `/`) is, in UTF-8, the bytes the archive holds: a rewrite
    /// then writes the name the archive had.
    exact: bool,
}

/// The signatures of the records that follow the central directory's entries (end of
/// central directory, its Zip64 form and locator) and begin each entry.
const RECORD_SIGNATURES: [&str; 4] = [
    "PK\u{5}\u{6}",
    "PK\u{6}\u{6}",
    "PK\u{6}\u{7}",
    "PK\u{1}\u{2}",
];

/// Lists and checks the archive's entries: a name that could escape a directory it is
/// extracted to is an error naming it, and a name holding a record signature is an archive
/// whose central directory was cut short (`path` is the archive).
fn list_entries(archive: &mut ZipArchive<File>, path: &Path) -> Result<Vec<Entry>> {
    let mut entries = Vec::with_capacity(archive.len());
    for index in 0..archive.len() {
        let Some((raw, exact)) = entry_name(archive, index) else {
            continue;
        };
        let raw = raw.as_str();
        // The zip crate takes the entries' sizes on trust, so an entry that lost bytes
        // reads on into the next record; unzip and Python's zipfile refuse such an archive.
        if RECORD_SIGNATURES.iter().any(|sig| raw.contains(sig)) {
            return Err(Error::NotZarr {
                location: path.display().to_string(),
                reason: format!(
                    "not a readable zip archive: its central directory is cut short or damaged \
                     (the name of entry {} runs into the next zip record)",
                    index + 1
                ),
            });
        }
        let (name, is_dir) = match raw.strip_suffix('/') {
            Some(dir) => (dir, true),
            None => (raw, false),
        };
        if let Err(reason) = check_entry_name(name) {
            return Err(Error::Storage {
                key: raw.to_string(),
                reason: format!("zip entry refused: {reason}"),
            });
        }
        entries.push(Entry {
            index,
            name: name.to_string(),
            is_dir,
            exact,
        });
    }
    Ok(entries)
}

/// The name of entry `index`, and whether it is the archive's bytes as they are.
///
/// A name is read as UTF-8 whenever its bytes are UTF-8, flagged as such (bit 11) or not, as
/// libzip (netcdf-c's zip library) guesses it: Info-ZIP's `zip` 3.0 stores names in the
/// locale's encoding and never sets the flag. Only a name that is not UTF-8 is read as the
/// zip crate reads it, as code page 437 (Python's `zipfile`, whose `ZipStore` zarr-python
/// uses, reads every unflagged name so); a rewrite could not keep such a name as it is.
fn entry_name(archive: &mut ZipArchive<File>, index: usize) -> Option<(String, bool)> {
    let decoded = archive.name_for_index(index)?.to_string();
    // ASCII names read alike in every encoding; only the others need their raw bytes, which
    // the zip crate gives only with the entry (reading its local header).
    if decoded.is_ascii() {
        return Some((decoded, true));
    }
    let raw = match archive.by_index_raw(index) {
        Ok(entry) => entry.name_raw().to_vec(),
        // Its read and any copy fail with that error; the name only serves the index.
        Err(_) => return Some((decoded, true)),
    };
    Some(match String::from_utf8(raw) {
        Ok(name) => (name, true),
        Err(_) => (decoded, false),
    })
}

fn check_entry_name(name: &str) -> std::result::Result<(), &'static str> {
    if name.starts_with('/') {
        return Err("absolute path");
    }
    if name.contains('\0') {
        return Err("NUL in name");
    }
    // `C:/x` is absolute on Windows; `v:depth/x` is a netCDF name with a colon.
    let bytes = name.as_bytes();
    if bytes.len() >= 3 && bytes[0].is_ascii_alphabetic() && bytes[1..3] == *b":/" {
        return Err("drive-letter path");
    }
    for segment in name.split('/') {
        match segment {
            ".." => return Err("'..' in path"),
            "" | "." => return Err("empty or '.' path segment"),
            _ => {}
        }
    }
    Ok(())
}

/// Decides the layout: the folder (with trailing `/`) under which the dataset's keys live, or
/// `""` for keys at the root.
///
/// The dataset is in a top-level folder when that folder is the only one (or, beside others
/// such as the `__MACOSX/` that macOS adds, the folder of the archive's first entry, which is
/// the one netcdf-c takes), holds Zarr metadata at its top, and either the root holds no
/// metadata at all, or the root holds nothing but a `.zgroup` and the archive's first entry is
/// the folder's directory entry (netcdf-c's rule; such archives exist with a `.zgroup` added
/// at the root by hand).
fn dataset_folder(entries: &[Entry]) -> String {
    let mut root_files = BTreeSet::new();
    let mut folders = BTreeSet::new();
    for entry in entries {
        match entry.name.split_once('/') {
            Some((top, _)) => {
                folders.insert(top);
            }
            None if entry.is_dir => {
                folders.insert(entry.name.as_str());
            }
            None => {
                root_files.insert(entry.name.as_str());
            }
        }
    }
    let first_folder = entries.first().and_then(|e| match e.name.split_once('/') {
        Some((top, _)) => Some(top),
        None => e.is_dir.then_some(e.name.as_str()),
    });
    let folder = match (folders.len(), first_folder) {
        (1, _) => folders.first().copied().unwrap_or_default(),
        (_, Some(first)) => first,
        _ => return String::new(),
    };
    let has_marker = |prefix: &str| {
        entries.iter().any(|e| {
            !e.is_dir
                && ROOT_MARKERS
                    .iter()
                    .any(|m| e.name == format!("{prefix}{m}"))
        })
    };
    let folder_prefix = format!("{folder}/");
    if !has_marker(&folder_prefix) {
        return String::new();
    }
    let root_has_marker = root_files.iter().any(|f| ROOT_MARKERS.contains(f));
    // netcdf-c's archives begin with the folder's directory entry; zarr-python writes no
    // directory entries, and may write an array's objects before the root `.zgroup`.
    let first_is_folder = entries
        .first()
        .is_some_and(|e| e.is_dir && e.name == folder);
    let root_only_zgroup = root_files.iter().all(|f| *f == ".zgroup");
    if !root_has_marker || (root_only_zgroup && first_is_folder) {
        folder_prefix
    } else {
        String::new()
    }
}

/// The entries beside the dataset's `folder` (none when the dataset is at the root), with
/// their names as the archive has them.
fn outside_entries(entries: &[Entry], folder: &str) -> Vec<(usize, String)> {
    if folder.is_empty() {
        return Vec::new();
    }
    let folder_entry = folder.trim_end_matches('/');
    entries
        .iter()
        .filter(|e| e.name != folder_entry && !e.name.starts_with(folder))
        .map(|e| match e.is_dir {
            true => (e.index, format!("{}/", e.name)),
            false => (e.index, e.name.clone()),
        })
        .collect()
}

/// The name of the first entry whose name a rewrite would change (see [`entry_name`]).
fn inexact_name(entries: &[Entry]) -> Option<String> {
    entries.iter().find(|e| !e.exact).map(|e| e.name.clone())
}

/// The directory entries under `folder` (not its own), by their names relative to it with
/// the trailing `/`, with their entry numbers and whether any of `objects` is below them.
fn index_dirs(
    entries: &[Entry],
    folder: &str,
    objects: &BTreeMap<String, Source>,
) -> BTreeMap<String, (usize, bool)> {
    entries
        .iter()
        .filter(|e| e.is_dir)
        .filter_map(|e| {
            let dir = format!("{}/", e.name.strip_prefix(folder)?);
            let had_objects = objects
                .range(dir.clone()..)
                .next()
                .is_some_and(|(k, _)| k.starts_with(dir.as_str()));
            Some((dir, (e.index, had_objects)))
        })
        .collect()
}

/// The content-bearing objects under `folder`, keyed relative to it.
fn index_objects(entries: &[Entry], folder: &str) -> BTreeMap<String, Source> {
    entries
        .iter()
        .filter(|e| !e.is_dir)
        .filter_map(|e| {
            let key = e.name.strip_prefix(folder)?;
            Some((key.to_string(), Source::Archived(e.index)))
        })
        .collect()
}

impl ZMap for ZipMap {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.get_up_to(key, u64::MAX)
    }

    fn get_metadata(&self, key: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        self.get_up_to(key, limit)
    }

    fn get_many_metadata(&self, keys: &[String], limit: u64) -> Vec<Result<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get_up_to(k, limit)).collect()
    }

    /// Inflates nothing when the declared size already says the entry is not `out.len()`
    /// bytes long, so a chunk entry claiming gigabytes costs no memory.
    fn get_exact(&self, key: &str, out: &mut [u8]) -> Result<Option<u64>> {
        validate_key(key)?;
        let mut state = self.lock();
        let State {
            archive,
            objects,
            spill,
            identity,
            ..
        } = &mut *state;
        let identity = *identity;
        let index = match objects.get(key) {
            None => return Ok(None),
            Some(Source::Local(bytes)) => {
                if bytes.len() == out.len() {
                    out.copy_from_slice(bytes);
                }
                return Ok(Some(bytes.len() as u64));
            }
            Some(Source::Spilled { offset, len }) => {
                if *len == out.len() {
                    if let Some(spill) = spill {
                        spill
                            .read(*offset, out)
                            .map_err(|e| self.read_error(key, &e))?;
                    }
                }
                return Ok(Some(*len as u64));
            }
            Some(Source::Archived(index)) => *index,
        };
        let storage_err = |e: &dyn std::fmt::Display| self.archived_read_error(identity, key, e);
        let why = match open_entry(archive, index) {
            Ok((mut entry, declared)) => {
                if declared != out.len() as u64 {
                    return Ok(Some(declared));
                }
                entry.read_exact(out).map_err(|e| storage_err(&e))?;
                let mut probe = [0u8; 1];
                return match entry.read(&mut probe).map_err(|e| storage_err(&e))? {
                    0 => Ok(Some(declared)),
                    _ => Err(storage_err(&beyond_declared(declared))),
                };
            }
            Err(why) => why,
        };
        Err(storage_err(&unreadable_entry(archive, index, why)))
    }

    fn exists(&self, key: &str) -> Result<bool> {
        validate_key(key)?;
        Ok(self.lock().objects.contains_key(key))
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.check_writable(key)?;
        validate_key(key)?;
        let mut state = self.lock();
        if let Some(Source::Local(old)) = state.objects.get(key) {
            state.held -= old.len();
        }
        let source = match state.held + value.len() > HELD_IN_MEMORY {
            true => self.spill(&mut state, value)?,
            false => {
                state.held += value.len();
                Source::Local(value.to_vec())
            }
        };
        state.objects.insert(key.to_string(), source);
        state.dirty = true;
        Ok(())
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.check_writable(key)?;
        validate_key(key)?;
        let below = format!("{key}/");
        let mut state = self.lock();
        let before = state.objects.len();
        let mut freed = 0;
        state.objects.retain(|k, source| {
            let keep = k != key && !k.starts_with(below.as_str());
            if let (false, Source::Local(bytes)) = (keep, &source) {
                freed += bytes.len();
            }
            keep
        });
        state.held -= freed;
        // The directory of a deleted group or variable goes with it.
        let dirs_before = state.dirs.len();
        state
            .dirs
            .retain(|dir, _| dir.strip_suffix('/') != Some(key) && !dir.starts_with(&below));
        if state.objects.len() != before || state.dirs.len() != dirs_before {
            state.dirty = true;
        }
        Ok(())
    }

    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        validate_prefix(prefix)?;
        let state = self.lock();
        Ok(search_keys(
            state.objects.keys().map(String::as_str),
            prefix,
        ))
    }

    /// Writes a new archive beside the old one and renames it into place. The new archive is
    /// created exclusively under a random name (nothing planted at its name is opened), and
    /// replaces only the archive this map read: if another file is at the archive's place
    /// (put there since, a symbolic link to another file included), nothing is replaced. A
    /// new archive does not follow a symbolic link and replaces nothing.
    fn flush(&self) -> Result<()> {
        let mut state = self.lock();
        if !state.dirty {
            return Ok(());
        }
        let target = self.target_of(&state)?;
        let old = match state.identity {
            None => None,
            Some(read) => {
                let meta = self.unchanged_since_read(&target, read)?;
                check_may_rewrite(&target)?;
                Some(Ownership::from(&meta))
            }
        };
        let (dir, temp_prefix) = temp_place(&target);
        remove_orphans(&dir, &temp_prefix);
        let (file, temp) =
            super::temp_files::create_in(&dir, |token| temp_name(&temp_prefix, token))
                .map_err(|e| Error::io(&target, e))?;
        let mut claim = self.writer_claim.lock().unwrap_or_else(|e| e.into_inner());
        let written = self
            .write_archive(&mut state, file, &temp, old)
            .and_then(|file| {
                // Rewritten in place while the copy was made, the archive may have fed it
                // bytes of its new content from the old one's offsets.
                if let Some(read) = state.identity {
                    self.unchanged_since_read(&target, read)?;
                }
                let new_claim = match *claim {
                    Some(_) => Some(super::lock_file(
                        file.try_clone().map_err(|e| Error::io(&temp, e))?,
                        &temp,
                    )?),
                    None => None,
                };
                match old {
                    Some(_) => fs::rename(&temp, &target),
                    None => super::temp_files::rename_no_replace(&temp, &target),
                }
                .map_err(|e| match e.kind() {
                    io::ErrorKind::AlreadyExists => Error::Busy(format!(
                        "{}: another program made a file there while the new archive was \
                         written; it is not replaced",
                        target.display()
                    )),
                    _ => Error::io(&target, e),
                })?;
                if new_claim.is_some() {
                    *claim = new_claim;
                }
                Ok(file)
            });
        let file = match written {
            Ok(file) => file,
            Err(e) => {
                // Best effort: the archive on disk is untouched, only the partial copy is left.
                let _ = fs::remove_file(&temp);
                return Err(e);
            }
        };
        // Re-index the new archive (the file written, not whatever the name leads to now) so
        // that flushed objects are no longer held in memory.
        self.reindex(&mut state, file)?;
        state.dirty = false;
        Ok(())
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    /// Locks the archive, and re-indexes it when the locked file is not the one indexed at
    /// open: another writer may have replaced it in between, and a flush from the old index
    /// would undo that writer's changes. Then removes the temporary files beside it that
    /// killed writers left (see [`remove_orphans`]).
    fn claim_writer(&self) -> Result<()> {
        let mut claim = self.writer_claim.lock().unwrap_or_else(|e| e.into_inner());
        while claim.is_none() && self.path.exists() {
            check_may_rewrite(&self.path)?;
            let locked = super::lock_exclusively(&self.path)?;
            let locked_identity =
                identity_of(&locked.metadata().map_err(|e| Error::io(&self.path, e))?);
            // Replaced between the lock's open and the lock itself: the writer that replaced
            // it held no lock on the new file then; lock that one instead.
            if file_identity(&self.path) != Some(locked_identity) {
                continue;
            }
            let mut state = self.lock();
            if state.identity != Some(locked_identity) {
                if state.dirty {
                    return Err(Error::Busy(format!(
                        "{}: another process replaced the archive while this one held \
                         unwritten changes",
                        self.path.display()
                    )));
                }
                let file = locked.try_clone().map_err(|e| Error::io(&self.path, e))?;
                self.reindex(&mut state, file)?;
            }
            self.check_names_kept(&state)?;
            *claim = Some(locked);
            // A killed writer's partial archive or spill file can be as large as the archive:
            // gone now rather than at this writer's first flush, which may never come.
            if let Ok(target) = super::through_links(&self.path) {
                let (dir, temp_prefix) = temp_place(&target);
                remove_orphans(&dir, &temp_prefix);
            }
        }
        Ok(())
    }

    fn local_space(&self) -> Option<super::Space> {
        super::space_of(&self.path)
    }

    /// Re-indexes the archive when another program replaced it, unless changes of ours wait
    /// to be flushed (they would be lost; the next flush replaces the archive anyway). An
    /// archive that is gone holds nothing, as a directory store that is gone.
    fn refresh(&self) -> Result<()> {
        let mut state = self.lock();
        let now = file_identity(&self.path);
        if state.dirty || now == state.identity {
            return Ok(());
        }
        // Under the state's lock, before the index changes: whoever reads from the new index
        // finds the new count once it has read.
        self.generation.fetch_add(1, Ordering::SeqCst);
        let file = match File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                state.objects.clear();
                state.dirs.clear();
                state.outside.clear();
                state.inexact_name = None;
                state.archive = None;
                state.file = None;
                state.identity = None;
                state.drop_changes();
                return Ok(());
            }
            Err(e) => return Err(Error::io(&self.path, e)),
        };
        self.reindex(&mut state, file)
    }

    fn storage_generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }
}

impl Drop for ZipMap {
    fn drop(&mut self) {
        if self.lock().dirty {
            log::warn!(
                "{}: changes were not flushed and are lost",
                self.path.display()
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(seed: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    /// Zip readers find an archive by its end record, which ends the file after a comment of
    /// the length it declares; an archive after other data is found, stray signatures are not.
    #[test]
    fn an_archive_is_recognised_by_its_end_record() {
        let dir = tempfile::tempdir().unwrap();
        let mut archive = Vec::new();
        let mut writer = ZipWriter::new(io::Cursor::new(&mut archive));
        writer.set_comment("a comment of some length");
        writer
            .start_file(".zgroup", SimpleFileOptions::default())
            .unwrap();
        writer.write_all(br#"{"zarr_format": 2}"#).unwrap();
        writer.finish().unwrap();
        let write = |name: &str, bytes: &[u8]| {
            let path = dir.path().join(name);
            fs::write(&path, bytes).unwrap();
            path
        };
        assert!(looks_like_zip(&write("plain.zip", &archive)));
        let stubbed = [b"#!/bin/sh\nexit 0\n".as_slice(), &[0; 100], &archive].concat();
        assert!(looks_like_zip(&write("stubbed.zip", &stubbed)));
        // Cut short, the end record's comment no longer reaches the end of the file.
        let cut = &stubbed[..stubbed.len() - 3];
        assert!(!looks_like_zip(&write("cut.zip", cut)));
        let stray = [b"text PK\x05\x06 more text".as_slice(), &[0; 64]].concat();
        assert!(!looks_like_zip(&write("stray", &stray)));
        assert!(!looks_like_zip(&write("empty", b"")));
        assert!(!looks_like_zip(&dir.path().join("missing")));
    }

    /// An archive whose name is as long as a file name may be is rewritten (through a
    /// temporary file beside it, whose name shortens the archive's), and a killed writer's
    /// partial archive of it is removed; one of another archive whose name begins with the
    /// same 200 bytes stays.
    #[test]
    fn archives_with_long_names_are_rewritten() {
        let dir = tempfile::tempdir().unwrap();
        let shared = "z".repeat(200);
        let path = dir.path().join(format!("{shared}{}.zip", "a".repeat(51)));
        let other = dir.path().join(format!("{shared}{}.zip", "b".repeat(51)));
        assert_eq!(path.file_name().unwrap().len(), 255);
        let mut ended = std::process::Command::new("true").spawn().unwrap();
        let ended_pid = ended.id();
        ended.wait().unwrap();
        let partial = |of: &Path| {
            let (dir, mut name) = temp_place(of);
            name.push(format!("{ended_pid}.0123456789abcdef"));
            dir.join(name)
        };
        let (killed, others) = (partial(&path), partial(&other));
        for leftover in [&killed, &others] {
            assert!(leftover.file_name().unwrap().len() <= 255);
            fs::write(leftover, b"partial").unwrap();
        }
        for value in [&b"{}"[..], b"{\"a\": 1}"] {
            let map = ZipMap::open(&path, true).unwrap();
            map.put(".zattrs", value).unwrap();
            map.flush().unwrap();
            let reread = ZipMap::open(&path, false).unwrap();
            assert_eq!(reread.get(".zattrs").unwrap().as_deref(), Some(value));
        }
        assert!(!killed.exists() && others.exists());
    }

    #[test]
    fn changes_beyond_the_memory_bound_wait_in_a_spill_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ds.zip");
        let map = ZipMap::open(&path, true).unwrap();
        let len = 10 << 20;
        for seed in 0..6u8 {
            map.put(&format!("v/{seed}"), &object(seed, len)).unwrap();
            assert!(map.lock().held <= HELD_IN_MEMORY);
        }
        assert!(map.lock().spill.is_some());
        map.put("v/5", b"small now").unwrap();
        map.delete("v/0").unwrap();
        assert_eq!(map.get("v/4").unwrap(), Some(object(4, len)));
        let mut out = vec![0u8; len];
        assert_eq!(map.get_exact("v/3", &mut out).unwrap(), Some(len as u64));
        assert_eq!(out, object(3, len));
        map.flush().unwrap();
        assert!(map.lock().spill.is_none() && map.lock().held == 0);
        let names: Vec<_> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["ds.zip"], "the spill file leaves nothing behind");
        let reread = ZipMap::open(&path, false).unwrap();
        assert_eq!(reread.get("v/0").unwrap(), None);
        for seed in 1..5u8 {
            assert_eq!(
                reread.get(&format!("v/{seed}")).unwrap(),
                Some(object(seed, len))
            );
        }
        assert_eq!(reread.get("v/5").unwrap(), Some(b"small now".to_vec()));
    }

    /// A file system with room for `room` bytes of the file.
    struct Filling {
        file: io::Cursor<Vec<u8>>,
        room: u64,
    }

    impl Write for Filling {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let left = self.room.saturating_sub(self.file.position());
            if left == 0 {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let n = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
            self.file.write(&buf[..n])
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    impl Seek for Filling {
        fn seek(&mut self, pos: SeekFrom) -> io::Result<u64> {
            self.file.seek(pos)
        }
    }

    /// After the disk fills up in the middle of an entry, the zip writer can still finish:
    /// otherwise its `Drop` prints that failure on stderr, a stray line in the mount's log.
    #[test]
    fn a_writer_whose_file_failed_finishes_quietly() {
        let full = Filling {
            file: io::Cursor::new(Vec::new()),
            room: 64 << 10,
        };
        let mut writer = ZipWriter::new(TempArchive::new(full));
        let options = SimpleFileOptions::default().compression_method(CompressionMethod::Stored);
        writer.start_file("v/0", options).unwrap();
        let e = writer.write_all(&object(1, 1 << 20)).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        writer.finish().unwrap();
    }
}
