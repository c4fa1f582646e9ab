//! A directory tree: each key is a file path relative to the dataset root, as netcdf-c's
//! `file` storage and zarr-python's `DirectoryStore`/`LocalStore` lay them out.

use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::{validate_key, validate_prefix, ZMap};
use crate::{Error, Result};

/// Names of in-progress `put` files start with this; `search` never reports them.
/// Objects up to this size (metadata) are read without asking for their length first.
const SMALL_OBJECT: usize = 4 << 10;

/// Objects from this size on are mapped rather than read by [`ZMap::read_with`]: below it,
/// setting up and tearing down a mapping costs more than the copy it saves.
const MAP_FROM: u64 = 64 << 10;

/// The whole file at `path`. Unlike `fs::read`, a small file costs one `read` and neither an
/// `fstat` to size the buffer nor a second `read` to find its end (a read of a regular file
/// returns less than asked for only at its end): opening a dataset of a thousand variables
/// is mostly these calls.
///
/// Something other than a regular file (a FIFO, a device) that fills the first read is
/// refused rather than read on without end; one that does not reads as what it gave.
fn read_object(path: &Path) -> io::Result<Vec<u8>> {
    let mut file = open_object(path)?;
    let mut head = [0u8; SMALL_OBJECT];
    let n = loop {
        match file.read(&mut head) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    if n < head.len() {
        return Ok(head[..n].to_vec());
    }
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    let len = usize::try_from(meta.len()).unwrap_or(0);
    let mut bytes = Vec::with_capacity(len.max(n));
    bytes.extend_from_slice(&head);
    file.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// Opens an object's file for reading. A FIFO in a store would block the open until some
/// writer came (a mount thread, then the whole daemon); non-blocking, it opens at once, and
/// the callers' file type checks refuse it.
pub(super) fn open_object(path: &Path) -> io::Result<fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

/// The complaint about an object that is no regular file.
fn not_regular() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        "not a regular file (a FIFO, device or socket in the store): refused",
    )
}

/// How the names of this module's temporary files begin (`.nczarrfs-tmp.NAME.PID.N`).
pub(super) const TEMP_PREFIX: &str = ".nczarrfs-tmp.";

/// Distinguishes temporary files of concurrent `put`s within this process.
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A dataset stored as a directory tree.
#[derive(Debug)]
pub struct FileMap {
    root: PathBuf,
    read_only: bool,
    /// The root directory, locked while a writer holds its claim.
    writer_claim: std::sync::Mutex<Option<fs::File>>,
}

/// Why a plain file is not a dataset: a netCDF file (HDF5 or classic) is named as such, since
/// netCDF users will try one, with the way to read or convert it.
fn not_a_store_reason(path: &Path) -> String {
    let mut head = [0u8; 8];
    let n = fs::File::open(path)
        .and_then(|mut f| io::Read::read(&mut f, &mut head))
        .unwrap_or(0);
    let kind = match &head[..n] {
        [0x89, b'H', b'D', b'F', b'\r', b'\n', 0x1a, b'\n'] => "a netCDF-4 (HDF5) file",
        [b'C', b'D', b'F', 1 | 2 | 5, ..] => "a classic netCDF file",
        _ => return "neither a directory nor a zip archive".into(),
    };
    format!(
        "{kind}, not a Zarr store: read it with ncdump, or convert it with \
         nccopy FILE 'file://DIR#mode=nczarr,file'"
    )
}

impl FileMap {
    /// Opens the directory `root`.
    ///
    /// A missing `root` is an error unless `writable`, in which case it is created by the first
    /// `put`. An existing `root` that is not a directory is refused as not a dataset.
    pub fn open(root: &Path, writable: bool) -> Result<Self> {
        match fs::metadata(root) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                return Err(Error::NotZarr {
                    location: root.display().to_string(),
                    reason: not_a_store_reason(root),
                })
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && writable => {}
            Err(e) => return Err(Error::io(root, e)),
        }
        Ok(FileMap {
            root: root.to_path_buf(),
            read_only: !writable,
            writer_claim: std::sync::Mutex::new(None),
        })
    }

    /// The dataset's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn path_of(&self, key: &str) -> PathBuf {
        let mut path = self.root.clone();
        path.extend(key.split('/'));
        path
    }

    /// Writes `value` to a temporary file beside `key`'s, to be renamed into place.
    /// `start_writeback`: hand its bytes to the disk now (see `put_many`).
    fn stage(&self, key: &str, value: &[u8], start_writeback: bool) -> Result<Staged> {
        self.check_writable(key)?;
        validate_key(key)?;
        let path = self.path_of(key);
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(Error::Storage {
                key: key.to_string(),
                reason: "no file name".into(),
            });
        };
        // Same directory as the target so that the rename cannot cross filesystems.
        let temp = dir.join(format!(
            "{TEMP_PREFIX}{}.{}.{}",
            name.to_string_lossy(),
            std::process::id(),
            TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        check_path_length(key, &temp)?;
        self.check_no_symlinked_dirs(key)?;
        fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let staged = Staged { temp, path };
        let written = fs::File::create(&staged.temp).and_then(|mut f| {
            f.write_all(value)?;
            if start_writeback {
                start_writeback_of(&f);
            }
            Ok(())
        });
        match written {
            Ok(()) => Ok(staged),
            Err(e) => {
                // The object, not its hidden temporary, which the user never named.
                let err = Error::io(&staged.path, e);
                staged.discard();
                Err(err)
            }
        }
    }

    /// Refuses a write or delete under a directory of the dataset that is a symbolic link:
    /// it would land outside the dataset, wherever the link points (whoever could plant the
    /// link chooses where). Links to objects are replaced by the rename, not written through.
    ///
    /// The directories are opened one from the other (`openat`), so that each step looks up
    /// one name: a check by whole paths costs time in the square of the nesting depth per
    /// object, which made writing deeply nested groups take minutes.
    fn check_no_symlinked_dirs(&self, key: &str) -> Result<()> {
        use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
        use std::os::unix::ffi::OsStrExt;
        let segments: Vec<&str> = key.split('/').collect();
        let root = std::ffi::CString::new(self.root.as_os_str().as_bytes())
            .map_err(|_| Error::io(&self.root, io::ErrorKind::InvalidInput.into()))?;
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
        // SAFETY: a NUL-terminated path; the descriptor is owned below.
        let fd = unsafe { libc::open(root.as_ptr(), flags) };
        if fd < 0 {
            let e = io::Error::last_os_error();
            // A dataset not written yet has no directories to check.
            return match is_absent(&e) {
                true => Ok(()),
                false => Err(Error::io(&self.root, e)),
            };
        }
        // SAFETY: `fd` was just opened and nothing else owns it.
        let mut dir = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut path = self.root.clone();
        for segment in &segments[..segments.len() - 1] {
            path.push(segment);
            let name = std::ffi::CString::new(*segment)
                .map_err(|_| Error::io(&path, io::ErrorKind::InvalidInput.into()))?;
            // SAFETY: `dir` is an open descriptor and `name` is NUL-terminated.
            let fd =
                unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_NOFOLLOW) };
            if fd >= 0 {
                // SAFETY: as above.
                dir = unsafe { OwnedFd::from_raw_fd(fd) };
                continue;
            }
            let e = io::Error::last_os_error();
            // O_DIRECTORY refuses a symbolic link (not followed) like any other non-directory.
            let is_link = e.raw_os_error() == Some(libc::ENOTDIR)
                && fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink());
            if is_link {
                return Err(Error::Storage {
                    key: key.to_string(),
                    reason: format!(
                        "{} is a symbolic link: writing through it would leave the dataset",
                        path.display()
                    ),
                });
            }
            if is_absent(&e) {
                return Ok(());
            }
            return Err(Error::io(&path, e));
        }
        Ok(())
    }

    fn check_writable(&self, key: &str) -> Result<()> {
        if self.read_only {
            return Err(Error::NotPermitted(format!(
                "cannot modify {key:?}: {} is open read-only",
                self.root.display()
            )));
        }
        Ok(())
    }

    /// Removes directories left empty by a delete, from `dir` up to (not including) the root,
    /// so that `search` does not report prefixes that lead to no content.
    fn prune_empty_dirs(&self, mut dir: &Path) {
        while dir != self.root && dir.starts_with(&self.root) {
            // Fails (harmlessly) as soon as a directory still has entries.
            if fs::remove_dir(dir).is_err() {
                break;
            }
            match dir.parent() {
                Some(parent) => dir = parent,
                None => break,
            }
        }
    }
}

impl FileMap {
    /// Opens the regular file of `key` for reading, with its path and size; `Ok(None)` when
    /// there is no such object (missing, or a directory).
    fn open_file(&self, key: &str) -> Result<Option<(fs::File, PathBuf, u64)>> {
        validate_key(key)?;
        let path = self.path_of(key);
        let file = match open_object(&path) {
            Ok(file) => file,
            Err(e) if is_absent(&e) => return Ok(None),
            Err(e) => return Err(Error::io(path, e)),
        };
        let meta = file.metadata().map_err(|e| Error::io(&path, e))?;
        match meta.file_type() {
            t if t.is_file() => Ok(Some((file, path, meta.len()))),
            // A prefix of other keys is no object.
            t if t.is_dir() => Ok(None),
            _ => Err(Error::io(path, not_regular())),
        }
    }
}

/// Reads an open object of `size` bytes (as last seen) into `buf`, replacing its contents.
fn read_whole(file: &mut fs::File, path: &Path, size: u64, buf: &mut Vec<u8>) -> Result<()> {
    buf.clear();
    buf.reserve(usize::try_from(size).unwrap_or(0));
    file.read_to_end(buf).map_err(|e| Error::io(path, e))?;
    Ok(())
}

/// Starts writing `file`'s dirty pages to the disk without waiting for them. Best effort:
/// the rename that follows is correct either way.
fn start_writeback_of(file: &fs::File) {
    use std::os::fd::AsRawFd;
    // SAFETY: sync_file_range on an open descriptor touches no memory of ours.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// Refuses an object whose file (`temp`, the longest path its write uses) the operating
/// system cannot name: a path of `PATH_MAX` bytes or more, or a segment longer than
/// `NAME_MAX`. The message names the key (deeply nested groups, as a rule) rather than
/// failing with a path of kilobytes.
fn check_path_length(key: &str, temp: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path_max = libc::PATH_MAX as usize;
    let bytes = temp.as_os_str().as_bytes().len();
    let reason = if bytes >= path_max {
        format!(
            "its file's path would be {bytes} bytes long, and this system takes paths shorter \
             than {path_max} bytes: the key has {} levels, nest its groups less deeply",
            key.split('/').count()
        )
    } else if let Some(long) = key.split('/').find(|s| s.len() > NAME_MAX) {
        format!(
            "the name {} is {} bytes long, more than the {NAME_MAX} a file name may have",
            crate::error::quoted(long),
            long.len()
        )
    } else if temp.file_name().map_or(0, |n| n.len()) > NAME_MAX {
        format!(
            "the object's name is too long for its temporary file beside it (at most {} \
             bytes fit)",
            NAME_MAX
                - (temp.file_name().map_or(0, |n| n.len())
                    - key.rsplit('/').next().map_or(0, str::len))
        )
    } else {
        return Ok(());
    };
    Err(Error::Storage {
        key: key.to_string(),
        reason,
    })
}

/// The longest file name Linux file systems take, in bytes.
const NAME_MAX: usize = 255;

/// Whether an I/O error means "no object here": missing, or a path component is a file.
fn is_absent(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
}

/// Keeps what `path` holds aside, under a temporary name beside it, for putting it back: a
/// hard link to it, or a copy where it cannot be linked; `None` when there is nothing there.
fn keep_aside(path: &Path) -> Result<Option<PathBuf>> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(None);
    };
    let aside = dir.join(format!(
        "{TEMP_PREFIX}{}.{}.{}",
        name.to_string_lossy(),
        std::process::id(),
        TEMP_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let linked = match fs::hard_link(path, &aside) {
        Ok(()) => return Ok(Some(aside)),
        Err(e) if is_absent(&e) => return Ok(None),
        Err(e) => e,
    };
    // No hard links here (or not to this file: an immutable one, or another user's under
    // `protected_hardlinks`): a copy.
    let copied = read_object(path).and_then(|bytes| fs::write(&aside, bytes));
    match copied {
        Ok(()) => Ok(Some(aside)),
        Err(e) if is_absent(&e) => Ok(None),
        Err(e) => {
            remove_quietly(aside);
            Err(Error::io(
                path,
                io::Error::new(
                    e.kind(),
                    format!("cannot keep it aside while it is replaced: {linked}; {e}"),
                ),
            ))
        }
    }
}

/// Fails with `EROFS` or `EACCES` (naming `dir`) when this process cannot make files in the
/// directory `dir`: its file system is mounted read-only, or its permissions (for the
/// effective user, with its capabilities) do not allow it.
fn check_can_write_in(dir: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| Error::io(dir, io::ErrorKind::InvalidInput.into()))?;
    // SAFETY: a NUL-terminated path; nothing is written through it.
    let denied = unsafe {
        libc::faccessat(
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::W_OK | libc::X_OK,
            libc::AT_EACCESS,
        )
    } != 0;
    match denied {
        true => Err(Error::io(dir, io::Error::last_os_error())),
        false => Ok(()),
    }
}

/// Best effort: a temporary file left behind is hidden from listings, the lesser problem.
fn remove_quietly(path: PathBuf) {
    let _ = fs::remove_file(path);
}

/// An object written to its temporary file and not yet renamed into place.
struct Staged {
    temp: PathBuf,
    path: PathBuf,
}

impl Staged {
    fn commit(self) -> Result<()> {
        let renamed = fs::rename(&self.temp, &self.path).map_err(|e| Error::io(&self.path, e));
        if renamed.is_err() {
            self.discard();
        }
        renamed
    }

    /// Best effort: the write already failed, a leftover temp file is the lesser problem.
    fn discard(self) {
        let _ = fs::remove_file(&self.temp);
    }
}

impl ZMap for FileMap {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        validate_key(key)?;
        let path = self.path_of(key);
        match read_object(&path) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if is_absent(&e) || e.kind() == io::ErrorKind::IsADirectory => Ok(None),
            Err(e) => Err(Error::io(path, e)),
        }
    }

    fn get_into(&self, key: &str, buf: &mut Vec<u8>) -> Result<bool> {
        buf.clear();
        let Some((mut file, path, size)) = self.open_file(key)? else {
            return Ok(false);
        };
        read_whole(&mut file, &path, size, buf)?;
        Ok(true)
    }

    fn read_with(
        &self,
        key: &str,
        scratch: &mut Vec<u8>,
        f: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<bool> {
        let Some((mut file, path, size)) = self.open_file(key)? else {
            return Ok(false);
        };
        if size < MAP_FROM {
            read_whole(&mut file, &path, size, scratch)?;
            f(scratch)?;
        } else {
            super::mapped::read_mapped(&file, size, |bytes| f(bytes))
                .map_err(|e| Error::io(&path, e))??;
        }
        Ok(true)
    }

    fn get_exact(&self, key: &str, out: &mut [u8]) -> Result<Option<u64>> {
        let Some((mut file, path, size)) = self.open_file(key)? else {
            return Ok(None);
        };
        if size != out.len() as u64 {
            return Ok(Some(size));
        }
        // The file may change size between the stat and the reads: count what is there.
        let mut done = 0;
        while done < out.len() {
            match file.read(&mut out[done..]) {
                Ok(0) => return Ok(Some(done as u64)),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(path, e)),
            }
        }
        let mut probe = [0u8; 1];
        match file.read(&mut probe) {
            Ok(0) => Ok(Some(size)),
            Ok(_) => Ok(Some(size + 1)),
            Err(e) => Err(Error::io(path, e)),
        }
    }

    fn get_range_into(&self, key: &str, offset: u64, out: &mut [u8]) -> Result<Option<u64>> {
        use std::os::unix::fs::FileExt;
        let Some((file, path, size)) = self.open_file(key)? else {
            return Ok(None);
        };
        let mut done = 0;
        while done < out.len() {
            match file.read_at(&mut out[done..], offset + done as u64) {
                Ok(0) => break,
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(path, e)),
            }
        }
        Ok(Some(size))
    }

    fn partial_reads_are_cheap(&self) -> bool {
        true
    }

    fn object_file(&self, key: &str) -> Result<Option<(fs::File, u64)>> {
        Ok(self.open_file(key)?.map(|(file, _, size)| (file, size)))
    }

    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Option<Vec<u8>>> {
        validate_key(key)?;
        let path = self.path_of(key);
        let mut file = match open_object(&path) {
            Ok(file) => file,
            Err(e) if is_absent(&e) => return Ok(None),
            Err(e) => return Err(Error::io(path, e)),
        };
        let meta = file.metadata().map_err(|e| Error::io(&path, e))?;
        if meta.is_dir() {
            return Ok(None);
        }
        if !meta.is_file() {
            return Err(Error::io(path, not_regular()));
        }
        let start = offset.min(meta.len());
        let want = len.min(meta.len() - start);
        file.seek(SeekFrom::Start(start))
            .map_err(|e| Error::io(&path, e))?;
        let mut buf = Vec::with_capacity(usize::try_from(want).unwrap_or(0));
        file.take(want)
            .read_to_end(&mut buf)
            .map_err(|e| Error::io(&path, e))?;
        Ok(Some(buf))
    }

    fn get_suffix(&self, key: &str, len: u64) -> Result<Option<Vec<u8>>> {
        validate_key(key)?;
        let path = self.path_of(key);
        let size = match fs::metadata(&path) {
            Ok(meta) if meta.is_file() => meta.len(),
            Ok(meta) if meta.is_dir() => return Ok(None),
            Ok(_) => return Err(Error::io(path, not_regular())),
            Err(e) if is_absent(&e) => return Ok(None),
            Err(e) => return Err(Error::io(path, e)),
        };
        self.get_range(key, size.saturating_sub(len), len)
    }

    fn exists(&self, key: &str) -> Result<bool> {
        validate_key(key)?;
        let path = self.path_of(key);
        match fs::metadata(&path) {
            Ok(meta) => Ok(meta.is_file()),
            Err(e) if is_absent(&e) => Ok(false),
            Err(e) => Err(Error::io(path, e)),
        }
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        let staged = self.stage(key, value, false)?;
        staged.commit()
    }

    /// Writes every object to its temporary file first and only then renames them into
    /// place one after the other, through the rename helper when this process uses one (see
    /// `rename_helper`): metadata objects that must agree (a group's dimension sizes and its
    /// arrays' shapes) are then never left half replaced by a killed daemon.
    ///
    /// Nor by a rename that fails (an immutable or foreign target: `EPERM`): what each target
    /// holds is kept aside first (a hard link, else a copy), and the renames done before the
    /// failure are undone with it, so that the set is stored whole or not at all. A target
    /// that cannot be kept aside fails the set before anything is renamed.
    ///
    /// The temporary files' writeback starts before the renames: ext4 flushes a file renamed
    /// over another one at the rename otherwise (`auto_da_alloc`), which made each rename of
    /// a metadata object take 0.3 ms instead of 0.01 ms.
    fn put_many(&self, objects: &[(String, Vec<u8>)]) -> Result<()> {
        let mut staged = Vec::with_capacity(objects.len());
        let mut aside = Vec::with_capacity(objects.len());
        let give_up = |staged: Vec<Staged>, aside: Vec<Option<PathBuf>>| {
            staged.into_iter().for_each(Staged::discard);
            aside.into_iter().flatten().for_each(remove_quietly);
        };
        for (key, value) in objects {
            let kept = self
                .stage(key, value, true)
                .and_then(|s| Ok((keep_aside(&s.path)?, s)));
            match kept {
                Ok((kept, s)) => {
                    staged.push(s);
                    aside.push(kept);
                }
                Err(e) => {
                    give_up(staged, aside);
                    return Err(e);
                }
            }
        }
        let pairs: Vec<(PathBuf, PathBuf)> = staged
            .iter()
            .map(|s| (s.temp.clone(), s.path.clone()))
            .collect();
        let (renamed, error) = super::rename_helper::rename_in_order(&pairs);
        let Some(e) = error.filter(|_| renamed < staged.len()) else {
            give_up(Vec::new(), aside);
            return Ok(());
        };
        let err = Error::io(&staged[renamed].path, e);
        for (s, kept) in staged[..renamed].iter().zip(&aside).rev() {
            let undone = match kept {
                Some(old) => fs::rename(old, &s.path),
                None => fs::remove_file(&s.path),
            };
            if let Err(undo) = undone {
                log::error!(
                    "{}: cannot put back what it held before a set of metadata objects that \
                     failed ({err}): {undo}; the metadata objects may disagree until the next \
                     flush",
                    s.path.display()
                );
            }
        }
        give_up(staged.split_off(renamed), aside);
        Err(err)
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.check_writable(key)?;
        validate_key(key)?;
        self.check_no_symlinked_dirs(key)?;
        let path = self.path_of(key);
        let meta = match fs::symlink_metadata(&path) {
            Ok(meta) => meta,
            Err(e) if is_absent(&e) => return Ok(()),
            Err(e) => return Err(Error::io(path, e)),
        };
        let removed = if meta.is_dir() {
            fs::remove_dir_all(&path)
        } else {
            fs::remove_file(&path)
        };
        match removed {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(path, e)),
        }
        if let Some(parent) = path.parent() {
            self.prune_empty_dirs(parent);
        }
        Ok(())
    }

    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        validate_prefix(prefix)?;
        let dir = if prefix.is_empty() {
            self.root.clone()
        } else {
            self.path_of(prefix)
        };
        let entries = match fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if is_absent(&e) => return Ok(Vec::new()),
            Err(e) => return Err(Error::io(dir, e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            let name = entry.file_name();
            match name.to_str() {
                Some(name) if name.starts_with(TEMP_PREFIX) => {}
                Some(name) => names.push(name.to_string()),
                None => log::warn!(
                    "ignoring {}: file name is not UTF-8",
                    entry.path().display()
                ),
            }
        }
        names.sort();
        Ok(names)
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn describe(&self) -> String {
        self.root.display().to_string()
    }

    /// Refuses a dataset directory this process cannot write in (a read-only file system,
    /// no write permission), as a zip archive there is refused: changes would otherwise only
    /// fail when they are stored, long after the writes that made them succeeded.
    fn claim_writer(&self) -> Result<()> {
        let mut claim = self.writer_claim.lock().unwrap_or_else(|e| e.into_inner());
        if claim.is_none() {
            check_can_write_in(&self.root)?;
            *claim = Some(super::lock_exclusively(&self.root)?);
        }
        Ok(())
    }

    fn local_space(&self) -> Option<super::Space> {
        super::space_of(&self.root)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn writable() -> (tempfile::TempDir, FileMap) {
        let dir = tempfile::tempdir().unwrap();
        let map = FileMap::open(&dir.path().join("ds.file"), true).unwrap();
        (dir, map)
    }

    #[test]
    fn no_write_or_delete_through_a_symlinked_directory() {
        let (dir, map) = writable();
        let outside = dir.path().join("outside");
        fs::create_dir(&outside).unwrap();
        fs::write(outside.join("keep"), b"x").unwrap();
        map.put("v/.zarray", b"{}").unwrap();
        std::os::unix::fs::symlink(&outside, map.root().join("v").join("1")).unwrap();
        for e in [
            map.put("v/1/0", b"chunk").unwrap_err(),
            map.delete("v/1/keep").unwrap_err(),
        ] {
            assert!(e.to_string().contains("symbolic link"), "{e}");
        }
        assert_eq!(fs::read_dir(&outside).unwrap().count(), 1);
        // Reads may follow it (a store assembled from links is common).
        assert_eq!(map.get("v/1/keep").unwrap().as_deref(), Some(&b"x"[..]));
    }

    #[test]
    fn a_key_too_long_for_the_file_system_is_refused_by_its_key() {
        let (_dir, map) = writable();
        let key = format!("{}.zgroup", "g/".repeat(2100));
        let e = map.put(&key, b"{}").unwrap_err().to_string();
        assert!(
            e.contains("this system takes paths shorter than 4096 bytes: the key has 2101 levels"),
            "{e}"
        );
        assert!(e.len() < 400, "{} bytes: {e}", e.len());
        assert!(!map.root().exists(), "nothing is written");
        let e = map
            .put(&format!("{}/.zarray", "v".repeat(300)), b"{}")
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("is 300 bytes long, more than the 255"),
            "{e}"
        );
    }

    #[test]
    fn a_symlinked_directory_deep_down_is_found() {
        let (dir, map) = writable();
        let key = format!("{}v/.zarray", "g/".repeat(50));
        map.put(&key, b"{}").unwrap();
        let parent = map.root().join("g/".repeat(50));
        fs::rename(parent.join("v"), dir.path().join("moved")).unwrap();
        std::os::unix::fs::symlink(dir.path().join("moved"), parent.join("v")).unwrap();
        let e = map
            .put(&format!("{}v/0", "g/".repeat(50)), b"x")
            .unwrap_err();
        assert!(e.to_string().contains("is a symbolic link"), "{e}");
        assert_eq!(fs::read_dir(dir.path().join("moved")).unwrap().count(), 1);
    }

    #[test]
    fn fifos_and_devices_in_the_store_are_refused_not_waited_on() {
        let (_dir, map) = writable();
        map.put("v/.zarray", b"{}").unwrap();
        let fifo = map.root().join("v").join("0");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        std::os::unix::fs::symlink("/dev/zero", map.root().join("v").join("1")).unwrap();
        for key in ["v/0", "v/1"] {
            let refused = |r: Result<bool>| match r {
                Err(e) => assert!(e.to_string().contains("not a regular file"), "{key}: {e}"),
                Ok(found) => panic!("{key}: read as found={found}"),
            };
            refused(map.get_into(key, &mut Vec::new()));
            refused(map.read_with(key, &mut Vec::new(), &mut |_| Ok(())));
            refused(map.get_exact(key, &mut [0u8; 8]).map(|n| n.is_some()));
            refused(map.get_range(key, 0, 8).map(|v| v.is_some()));
            refused(map.get_suffix(key, 8).map(|v| v.is_some()));
        }
        // Small reads of a FIFO without a writer end at once; a device fills them and is
        // refused.
        assert_eq!(map.get("v/0").unwrap(), Some(Vec::new()));
        let e = map.get("v/1").unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }

    #[test]
    fn whole_objects_of_every_size_around_the_small_object_limit() {
        let (_dir, map) = writable();
        for len in [
            0,
            1,
            SMALL_OBJECT - 1,
            SMALL_OBJECT,
            SMALL_OBJECT + 1,
            300_001,
        ] {
            let value: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            map.put("v/0", &value).unwrap();
            assert_eq!(
                map.get("v/0").unwrap().as_deref(),
                Some(&value[..]),
                "{len}"
            );
        }
        assert_eq!(map.get("v/9").unwrap(), None);
        assert_eq!(map.get("v").unwrap(), None, "a directory is not content");
    }

    #[test]
    fn reads_into_caller_buffers() {
        let (_dir, map) = writable();
        map.put("v/0", b"abcdef").unwrap();
        map.put("v/1/x", b"z").unwrap();
        let mut buf = b"old content, longer".to_vec();
        assert!(map.get_into("v/0", &mut buf).unwrap());
        assert_eq!(buf, b"abcdef");
        assert!(!map.get_into("v/9", &mut buf).unwrap());
        assert!(
            !map.get_into("v/1", &mut buf).unwrap(),
            "a directory is not content"
        );
        let mut out = [0u8; 6];
        assert_eq!(map.get_exact("v/0", &mut out).unwrap(), Some(6));
        assert_eq!(&out, b"abcdef");
        assert_eq!(map.get_exact("v/0", &mut [0u8; 4]).unwrap(), Some(6));
        assert_eq!(map.get_exact("v/0", &mut [0u8; 8]).unwrap(), Some(6));
        assert_eq!(map.get_exact("v/9", &mut out).unwrap(), None);
        assert_eq!(map.get_exact("v/1", &mut out).unwrap(), None);
        assert!(map.get_exact("../x", &mut out).is_err());
        let mut part = [0u8; 3];
        assert_eq!(map.get_range_into("v/0", 2, &mut part).unwrap(), Some(6));
        assert_eq!(&part, b"cde");
        assert_eq!(map.get_range_into("v/0", 4, &mut part).unwrap(), Some(6));
        assert_eq!(&part[..2], b"ef");
        assert_eq!(map.get_range_into("v/9", 0, &mut part).unwrap(), None);
        assert!(map.partial_reads_are_cheap());
    }

    #[test]
    fn get_put_delete() {
        let (_dir, map) = writable();
        assert_eq!(map.get(".zgroup").unwrap(), None);
        map.put(".zgroup", b"{}").unwrap();
        map.put("g/v/0.0", b"abcdef").unwrap();
        assert_eq!(
            fs::read(map.root().join("g").join("v").join("0.0")).unwrap(),
            b"abcdef"
        );
        assert_eq!(map.get(".zgroup").unwrap().unwrap(), b"{}");
        assert_eq!(map.get("g/v").unwrap(), None, "a directory is not content");
        assert_eq!(map.get(".zgroup/x").unwrap(), None, "below a file");
        assert!(map.exists("g/v/0.0").unwrap());
        assert!(!map.exists("g/v").unwrap());
        assert_eq!(map.get_range("g/v/0.0", 2, 3).unwrap().unwrap(), b"cde");
        assert_eq!(map.get_range("g/v/0.0", 4, 100).unwrap().unwrap(), b"ef");
        assert_eq!(map.get_range("g/v/0.0", 100, 1).unwrap().unwrap(), b"");
        assert_eq!(map.get_range("g/v/9", 0, 1).unwrap(), None);
        map.put("g/v/0.0", b"xyz").unwrap();
        assert_eq!(map.get("g/v/0.0").unwrap().unwrap(), b"xyz");
        map.delete("g/v/0.0").unwrap();
        assert_eq!(map.get("g/v/0.0").unwrap(), None);
        assert!(
            !map.root().join("g").exists(),
            "emptied directories are pruned"
        );
        map.delete("g/v/0.0").unwrap();
    }

    #[test]
    fn delete_subtree() {
        let (_dir, map) = writable();
        map.put(".zgroup", b"{}").unwrap();
        map.put("g/v/0.0", b"1").unwrap();
        map.put("g/v/.zarray", b"{}").unwrap();
        map.put("g/.zgroup", b"{}").unwrap();
        map.delete("g/v").unwrap();
        assert_eq!(map.search("g").unwrap(), vec![".zgroup"]);
        map.delete("g").unwrap();
        assert_eq!(map.search("").unwrap(), vec![".zgroup"]);
    }

    #[test]
    fn search_children_sorted() {
        let (_dir, map) = writable();
        for key in [
            "g/b/0",
            "g/a/.zarray",
            "g/a/0",
            ".zgroup",
            "g/.zgroup",
            "g!x/y",
        ] {
            map.put(key, b"").unwrap();
        }
        assert_eq!(map.search("").unwrap(), vec![".zgroup", "g", "g!x"]);
        assert_eq!(map.search("g").unwrap(), vec![".zgroup", "a", "b"]);
        assert_eq!(map.search("g/a").unwrap(), vec![".zarray", "0"]);
        assert!(map.search("g/a/0").unwrap().is_empty());
        assert!(map.search("nothing").unwrap().is_empty());
    }

    #[test]
    fn put_leaves_no_temp_files() {
        let (_dir, map) = writable();
        for i in 0..20 {
            map.put(&format!("v/{i}"), &vec![i as u8; 1000]).unwrap();
        }
        map.put("v/3", b"again").unwrap();
        let names: Vec<_> = fs::read_dir(map.root().join("v"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        assert_eq!(names.len(), 20);
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    }

    /// A failed write names the object, not the temporary file it goes through (here too
    /// long a name once the temporary's prefix is added).
    #[test]
    fn a_failed_put_names_the_object() {
        let (_dir, map) = writable();
        let key = format!("v/{}", "x".repeat(250));
        let err = map.put(&key, b"1").unwrap_err().to_string();
        assert!(
            err.contains("key \"v/xxx") && err.contains("too long"),
            "{err}"
        );
        assert!(!err.contains(TEMP_PREFIX), "{err}");
        // Nothing is left: refused before its directory was even made.
        assert!(fs::read_dir(map.root().join("v")).map_or(true, |mut d| d.next().is_none()));
    }

    #[test]
    fn put_many_stores_all_or_nothing_when_a_write_fails() {
        let (_dir, map) = writable();
        map.put("g/.zattrs", b"old").unwrap();
        // `f` is a file, so nothing can be written below it.
        map.put("f", b"x").unwrap();
        let objects = vec![
            ("g/.zattrs".to_string(), b"new".to_vec()),
            ("f/.zarray".to_string(), b"{}".to_vec()),
        ];
        assert!(map.put_many(&objects).is_err());
        assert_eq!(map.get("g/.zattrs").unwrap().unwrap(), b"old");
        assert_eq!(map.search("g").unwrap(), vec![".zattrs"]);
        let temps = fs::read_dir(map.root().join("g")).unwrap().count();
        assert_eq!(temps, 1);

        let objects = vec![
            ("g/.zattrs".to_string(), b"new".to_vec()),
            ("g/v/.zarray".to_string(), b"{}".to_vec()),
        ];
        map.put_many(&objects).unwrap();
        assert_eq!(map.get("g/.zattrs").unwrap().unwrap(), b"new");
        assert_eq!(map.get("g/v/.zarray").unwrap().unwrap(), b"{}");
    }

    #[test]
    fn search_skips_temp_files() {
        let (_dir, map) = writable();
        map.put("a", b"1").unwrap();
        fs::write(map.root().join(format!("{TEMP_PREFIX}a.1.2")), b"partial").unwrap();
        assert_eq!(map.search("").unwrap(), vec!["a"]);
    }

    #[test]
    fn read_only_refuses_writes() {
        let (_dir, map) = writable();
        map.put("a", b"1").unwrap();
        let ro = FileMap::open(map.root(), false).unwrap();
        assert!(ro.read_only());
        assert!(matches!(ro.put("a", b"2"), Err(Error::NotPermitted(_))));
        assert!(matches!(ro.delete("a"), Err(Error::NotPermitted(_))));
        assert_eq!(ro.get("a").unwrap().unwrap(), b"1");
    }

    #[test]
    fn bad_keys_refused() {
        let (_dir, map) = writable();
        for key in [
            "",
            "/etc/passwd",
            "a/",
            "a//b",
            "../evil",
            "a/../../b",
            "a\0b",
        ] {
            assert!(map.put(key, b"").is_err(), "{key:?} accepted");
            assert!(map.get(key).is_err(), "{key:?} accepted");
        }
        assert!(map.search("..").is_err());
    }

    #[test]
    fn open_errors() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let err = FileMap::open(&missing, false).unwrap_err();
        assert!(
            matches!(&err, Error::Io { source, .. } if source.kind() == io::ErrorKind::NotFound),
            "{err}"
        );
        let file = dir.path().join("plain.txt");
        fs::write(&file, b"hello").unwrap();
        assert!(matches!(
            FileMap::open(&file, false),
            Err(Error::NotZarr { .. })
        ));
        let map = FileMap::open(&missing, true).unwrap();
        assert!(!missing.exists(), "opening creates nothing");
        map.put(".zgroup", b"{}").unwrap();
        assert!(missing.join(".zgroup").is_file());
    }
}
