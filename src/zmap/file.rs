//! A directory tree: each key is a file path relative to the dataset root, as netcdf-c's
//! `file` storage and zarr-python's `DirectoryStore`/`LocalStore` lay them out.
//!
//! Every object is opened relative to a descriptor of the root directory, so that symbolic
//! links inside the dataset cannot take a reader or a writer out of it (see [`FileMap`]).

use std::ffi::CString;
use std::fs;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::beneath::{self, Miss, NearDirs};
use super::temp_files::{self, NAME_MAX};
use super::{validate_key, validate_prefix, ZMap};
use crate::{Error, Result};

mod one_pass;

/// Objects up to this size (metadata) are read without asking for their length first.
const SMALL_OBJECT: usize = 4 << 10;

/// Objects from this size on are mapped rather than read by [`ZMap::read_with`]: below it,
/// setting up and tearing down a mapping costs more than the copy it saves.
const MAP_FROM: u64 = 64 << 10;

/// The whole of the open object `file`. Unlike `fs::read`, a small file costs one `read` and
/// neither an `fstat` to size the buffer nor a second `read` to find its end (a read of a
/// regular file returns less than asked for only at its end): opening a dataset of a thousand
/// variables is mostly these calls.
///
/// Something other than a regular file (a FIFO, a device) that fills the first read is
/// refused rather than read on without end; one that does not reads as what it gave.
///
/// A file longer than `limit` bytes is neither read further nor allocated: `Ok(Err(length))`
/// (its length as its metadata says, or as far as it was read when it grew meanwhile).
fn read_object(mut file: fs::File, limit: u64) -> io::Result<Result<Vec<u8>, u64>> {
    let mut head = [0u8; SMALL_OBJECT];
    let n = loop {
        match file.read(&mut head) {
            Ok(n) => break n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    };
    if n < head.len() {
        return Ok(match n as u64 > limit {
            true => Err(n as u64),
            false => Ok(head[..n].to_vec()),
        });
    }
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    if meta.len() > limit {
        return Ok(Err(meta.len()));
    }
    let len = usize::try_from(meta.len()).unwrap_or(0);
    let mut bytes = Vec::with_capacity(len.max(n));
    bytes.extend_from_slice(&head);
    // One byte past the limit tells a file that grew past it since the `fstat`.
    let rest = limit.saturating_sub(n as u64).saturating_add(1);
    (&mut file).take(rest).read_to_end(&mut bytes)?;
    Ok(match bytes.len() as u64 > limit {
        true => Err(bytes.len() as u64),
        false => Ok(bytes),
    })
}

/// How objects are opened for reading. A FIFO in a store would block the open until some
/// writer came (a mount thread, then the whole daemon); non-blocking, it opens at once, and
/// the callers' file type checks refuse it.
const READ_FLAGS: libc::c_int = libc::O_RDONLY | libc::O_NONBLOCK;

/// Opens a file (a zip archive) for reading, as objects are opened (see [`READ_FLAGS`]).
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

/// How the names of this module's temporary files begin (`.nczarrfs-tmp.NAME.PID.TOKEN`,
/// TOKEN random); `search` never reports them.
pub(super) const TEMP_PREFIX: &str = ".nczarrfs-tmp.";

/// The name of a temporary file of this process for the object file `name` (shortened when it
/// is long, see [`temp_files::name_stem`]).
fn temp_name(name: &str, token: &str) -> String {
    format!(
        "{TEMP_PREFIX}{}.{}.{token}",
        temp_files::key_name_stem(name),
        std::process::id()
    )
}

/// The process that made the temporary file `file_name` (named as [`temp_name`] names them),
/// or `None` when it is not named so.
fn temp_writer(file_name: &str) -> Option<u32> {
    let (rest, token) = file_name.strip_prefix(TEMP_PREFIX)?.rsplit_once('.')?;
    let (_, pid) = rest.rsplit_once('.')?;
    let digits = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit());
    (digits && super::temp_files::is_token(token)).then(|| pid.parse().ok())?
}

/// The root directory a [`FileMap`] works in.
#[derive(Debug, Default)]
struct RootSlot {
    /// The root directory kept open; `None` until the next operation opens it by its path.
    open: Option<Arc<OwnedFd>>,
    /// The root directory let go of, kept open until the next one is opened and compared with
    /// it (see [`ZMap::storage_generation`]): while it is open, its inode number is no other
    /// directory's, whereas a deleted directory's number may be given to the next one made.
    released: Option<Arc<OwnedFd>>,
}

impl RootSlot {
    /// Lets go of the root kept open: the next operation opens what is at the path then.
    fn release(&mut self) {
        if let Some(open) = self.open.take() {
            self.released = Some(open);
        }
    }
}

/// A dataset stored as a directory tree.
///
/// Symbolic links inside the dataset are followed by reads only as far as they stay inside
/// its root directory: a key whose path leads out of it through a link (or through an
/// absolute link to nothing) is an error, never the file outside, so that a reader with more
/// privilege than the dataset's owner (root's mount or copy of a user's dataset) shows no file
/// that owner could not read. Writes and deletes follow no link inside the dataset at all: one
/// in place of a directory is refused, one in place of an object is replaced, never written
/// through. The root itself may be a symbolic link: the root directory is opened by its path
/// at the first operation and kept open, and opened again after [`ZMap::refresh`] (which a
/// mount calls before it re-reads the metadata) or once it has been removed, so that a
/// dataset replaced by a rename or a retargeted link is seen.
#[derive(Debug)]
pub struct FileMap {
    root: PathBuf,
    /// `root` as the system calls take it.
    c_root: CString,
    read_only: bool,
    /// The root directory, open (`O_PATH`) for the operations below it (see [`FileMap`]).
    root_dir: std::sync::Mutex<RootSlot>,
    /// [`ZMap::storage_generation`]: bumped when a root directory opened after a refresh is
    /// another directory than the one let go of.
    generation: AtomicU64,
    /// Whether [`FileMap::create_new`] made the root directory: the map then keeps working in
    /// that directory, whatever is put at its name afterwards.
    made_root: bool,
    /// The root directory, locked while a writer holds its claim (see [`super::WriterLock`]).
    writer_claim: std::sync::Mutex<Option<super::WriterLock>>,
    /// The device and inode of the directory the claim locked: a writer works there only,
    /// never in a directory that replaced it at the root's path, which another writer may
    /// hold (see [`FileMap::open_root`]).
    claimed_root: std::sync::OnceLock<(u64, u64)>,
    /// The sweep for earlier writers' temporary files started by the claim, waited for when
    /// the map is dropped.
    sweep: std::sync::Mutex<Option<std::thread::JoinHandle<()>>>,
}

impl Drop for FileMap {
    fn drop(&mut self) {
        let sweep = self
            .sweep
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(sweep) = sweep {
            let _ = sweep.join();
        }
    }
}

/// Why a plain file is not a dataset: a netCDF file (HDF5 or classic) is named as such, since
/// netCDF users will try one, with the way to read or convert it, and a zip archive (a
/// location whose fragment names `file` storage) with the way to name it.
fn not_a_store_reason(path: &Path) -> String {
    if super::zip::looks_like_zip(path) {
        return "a zip archive, but the location's `file` asks for a directory: write `zip` \
                for `file` in its fragment, or give the archive's path alone"
            .into();
    }
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

/// What [`FileMap::open_root`] finds at the root's path of a writer's map when it is not the
/// directory the writer's claim locked (see [`FileMap::root_error`]).
#[derive(Debug, thiserror::Error)]
#[error("the dataset's path leads to another directory than the one this writer locked")]
struct ReplacedRoot;

/// The complaint about a root directory path with a NUL byte.
fn nul_in(path: &Path) -> Error {
    Error::io(path, io::ErrorKind::InvalidInput.into())
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
            c_root: CString::new(root.as_os_str().as_bytes()).map_err(|_| nul_in(root))?,
            read_only: !writable,
            root_dir: std::sync::Mutex::new(RootSlot::default()),
            generation: AtomicU64::new(0),
            made_root: false,
            writer_claim: std::sync::Mutex::new(None),
            claimed_root: std::sync::OnceLock::new(),
            sweep: std::sync::Mutex::new(None),
        })
    }

    /// Makes the directory `root` and opens it as a new, writable dataset bound to that
    /// directory: the map keeps working in it even if something else is put at its name (a
    /// symbolic link put there by a user who may write to its parent is never followed).
    /// Anything at `root` already, a symbolic link included, is an `AlreadyExists` error.
    pub fn create_new(root: &Path) -> Result<Self> {
        let c_root = CString::new(root.as_os_str().as_bytes()).map_err(|_| nul_in(root))?;
        fs::DirBuilder::new()
            .create(root)
            .map_err(|e| Error::io(root, e))?;
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        // Replaced by a link between the two calls, the open fails: nothing is followed.
        let made = beneath::open_path(&c_root, flags).map_err(|e| Error::io(root, e))?;
        Ok(FileMap {
            root: root.to_path_buf(),
            c_root,
            read_only: false,
            root_dir: std::sync::Mutex::new(RootSlot {
                open: Some(Arc::new(made)),
                released: None,
            }),
            generation: AtomicU64::new(0),
            made_root: true,
            writer_claim: std::sync::Mutex::new(None),
            claimed_root: std::sync::OnceLock::new(),
            sweep: std::sync::Mutex::new(None),
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

    /// [`ZMap::get`] of an object that may have at most `limit` bytes
    /// ([`Error::MetadataTooLarge`] otherwise, with nothing read past the limit).
    fn get_up_to(&self, key: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        validate_key(key)?;
        let opened = self.open_below(key, READ_FLAGS)?;
        self.read_opened(key, opened, limit)
    }

    /// [`FileMap::get_up_to`] of `key` once opened (`opened`, `None` when missing).
    fn read_opened(
        &self,
        key: &str,
        opened: Option<OwnedFd>,
        limit: u64,
    ) -> Result<Option<Vec<u8>>> {
        let Some(fd) = opened else {
            return Ok(None);
        };
        match read_object(fs::File::from(fd), limit) {
            Ok(Ok(bytes)) => Ok(Some(bytes)),
            Ok(Err(size)) => Err(super::metadata_too_large(key, Some(size), limit)),
            Err(e) if e.kind() == io::ErrorKind::IsADirectory => Ok(None),
            Err(e) => Err(Error::io(self.path_of(key), e)),
        }
    }

    fn root_slot(&self) -> std::sync::MutexGuard<'_, RootSlot> {
        self.root_dir.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The root directory, open (`O_PATH`) for the operations below it: the one kept open,
    /// or opened by its path now. A writer's map refuses ([`ReplacedRoot`]) a directory at
    /// the path that is not the one its claim locked: the dataset was replaced (by `gen`,
    /// `copy` or another program), and writing the new one from this writer's view of the
    /// old one would corrupt it.
    fn open_root(&self) -> io::Result<Arc<OwnedFd>> {
        let mut slot = self.root_slot();
        if let Some(root) = &slot.open {
            return Ok(Arc::clone(root));
        }
        let root = Arc::new(beneath::open_path(
            &self.c_root,
            libc::O_PATH | libc::O_DIRECTORY,
        )?);
        if let Some(&claimed) = self.claimed_root.get() {
            if beneath::identity(root.as_fd())? != claimed {
                return Err(io::Error::new(io::ErrorKind::ResourceBusy, ReplacedRoot));
            }
        }
        if let Some(released) = slot.released.take() {
            let same = match (
                beneath::identity(root.as_fd()),
                beneath::identity(released.as_fd()),
            ) {
                (Ok(now), Ok(before)) => now == before,
                // Not known to be the same directory: taken for another.
                _ => false,
            };
            if !same {
                // Before the root is published under the lock: whoever reads through the new
                // root finds the new count once it has read.
                self.generation.fetch_add(1, Ordering::SeqCst);
            }
        }
        slot.open = Some(Arc::clone(&root));
        Ok(root)
    }

    /// `e`, an error of [`FileMap::open_root`], as the map's error (see
    /// [`FileMap::replaced`]).
    fn root_error(&self, e: io::Error) -> Error {
        match e.get_ref().is_some_and(|inner| inner.is::<ReplacedRoot>()) {
            true => self.replaced(),
            false => Error::io(&self.root, e),
        }
    }

    /// The error of a writer whose dataset was replaced: [`Error::Busy`] (`EBUSY`), saying
    /// why, so that the one line a caller logs for each failed store explains it; it names
    /// the error as the writing program sees it, as an I/O error would.
    fn replaced(&self) -> Error {
        Error::Busy(format!(
            "{}: Device or resource busy: the dataset was replaced or removed by another \
             program while this process was writing it; nothing more is written there",
            self.root.display()
        ))
    }

    /// Refuses, as [`FileMap::open_root`] does, a writer's store by path when the root's
    /// path no longer leads to the directory its claim locked. The map works in that
    /// directory, kept open, even once another program has moved it aside (`mv ds ds.old;
    /// cp -a ds.old ds`); renames by path would then look for its temporary files in the
    /// replacement.
    fn check_root_path(&self) -> Result<()> {
        let Some(&claimed) = self.claimed_root.get() else {
            return Ok(());
        };
        let at_path = beneath::open_path(&self.c_root, libc::O_PATH | libc::O_DIRECTORY)
            .and_then(|root| beneath::identity(root.as_fd()));
        match at_path {
            Ok(found) if found == claimed => Ok(()),
            Ok(_) => Err(self.replaced()),
            Err(e) if is_absent(&e) => Err(self.replaced()),
            Err(e) => Err(Error::io(&self.root, e)),
        }
    }

    /// Whether the root directory kept open as `root` has been removed (a dataset deleted, or
    /// replaced by a rename and the old one deleted). Checked where something is missing,
    /// which is what a removed directory looks like: found objects cost nothing.
    fn is_removed(&self, root: &Arc<OwnedFd>) -> bool {
        !self.made_root && beneath::link_count(root.as_fd()).is_ok_and(|n| n == 0)
    }

    /// [`FileMap::is_removed`], and if so the root is forgotten: the next
    /// [`FileMap::open_root`] opens what is at the path now. For making objects only: a
    /// reader's objects go on being looked up in the removed directory until a
    /// [`ZMap::refresh`], since the path may now hold another dataset than the one whose
    /// metadata it read.
    fn root_was_removed(&self, root: &Arc<OwnedFd>) -> bool {
        let removed = self.is_removed(root);
        if removed {
            let mut slot = self.root_slot();
            if slot
                .open
                .as_ref()
                .is_some_and(|kept| Arc::ptr_eq(kept, root))
            {
                slot.release();
            }
        }
        removed
    }

    /// [`FileMap::open_root`], opened again if the one kept open has been removed.
    fn open_current_root(&self) -> io::Result<Arc<OwnedFd>> {
        let root = self.open_root()?;
        match self.root_was_removed(&root) {
            true => self.open_root(),
            false => Ok(root),
        }
    }

    /// Opens `key`'s file (or directory) with `flags`, below the root (see [`FileMap`]);
    /// `Ok(None)` when nothing is there, [`Error::RemovedUnderneath`] when the root directory
    /// itself is gone: a missing chunk would read as fill values, and one found at the path
    /// would be another dataset's, read with this one's metadata.
    fn open_below(&self, key: &str, flags: libc::c_int) -> Result<Option<OwnedFd>> {
        let root = match self.open_root() {
            Ok(fd) => fd,
            Err(e) if is_absent(&e) => return Ok(None),
            Err(e) => return Err(self.root_error(e)),
        };
        match beneath::open_below(root.as_fd(), Path::new(key), flags) {
            Ok(fd) => Ok(Some(fd)),
            Err(Miss::Absent) if self.is_removed(&root) => Err(Error::RemovedUnderneath {
                path: self.root.clone(),
            }),
            Err(Miss::Absent) => Ok(None),
            Err(Miss::Link) => self.open_through_links(&root, key, flags),
            Err(Miss::Io(e)) => Err(Error::io(self.path_of(key), e)),
        }
    }

    /// Opens `key`, whose path passes through a symbolic link that [`beneath::open_below`]
    /// did not follow, if the path leads to a file inside the root: resolved as a whole and
    /// checked, then opened from the root by its resolved names, none of them followed (a
    /// link put in meanwhile fails the open instead of leading elsewhere).
    fn open_through_links(
        &self,
        root: &OwnedFd,
        key: &str,
        flags: libc::c_int,
    ) -> Result<Option<OwnedFd>> {
        let path = self.path_of(key);
        let outside = || Error::Storage {
            key: key.to_string(),
            reason: format!(
                "{} leads out of the dataset's directory (or to nothing) through a symbolic \
                 link: refused, links are followed only as far as they stay inside the dataset",
                path.display()
            ),
        };
        let root_real = fs::canonicalize(&self.root).map_err(|e| Error::io(&self.root, e))?;
        let Ok(real) = fs::canonicalize(&path) else {
            return Err(outside());
        };
        let Ok(rel) = real.strip_prefix(&root_real) else {
            return Err(outside());
        };
        match beneath::open_without_links(root.as_fd(), rel, flags) {
            Ok(fd) => Ok(Some(fd)),
            Err(Miss::Absent) => Ok(None),
            Err(Miss::Link) => Err(Error::Storage {
                key: key.to_string(),
                reason: format!(
                    "{} changed while it was opened (a symbolic link appeared on its way): \
                     not read",
                    path.display()
                ),
            }),
            Err(Miss::Io(e)) => Err(Error::io(path, e)),
        }
    }

    /// The directory that holds `key`'s file, open (`O_PATH`), reached from the root without
    /// following a symbolic link; `create`: missing directories are made (and a missing
    /// root). `Ok(None)`: a directory is missing (when not creating).
    ///
    /// A directory of the dataset that is a symbolic link is refused: writing or deleting
    /// through it would land outside the dataset, wherever the link points (whoever could
    /// plant the link chooses where). The way is opened in one system call where the kernel
    /// can refuse every link on it ([`known_way`]); from where that stops (a directory to
    /// make, a link to name in the error, no openat2), one name at a time from the
    /// directory before (`openat`). Never by checking whole paths and then using them: a
    /// directory replaced between the check and the write would still be followed.
    fn object_dir(&self, key: &str, create: bool) -> Result<Option<Arc<OwnedFd>>> {
        self.object_dir_near(&mut NearDirs::default(), key, create)
    }

    /// [`FileMap::object_dir`], starting from the nearest of the directories `near` has
    /// kept, and keeping the one reached there.
    fn object_dir_near(
        &self,
        near: &mut NearDirs,
        key: &str,
        create: bool,
    ) -> Result<Option<Arc<OwnedFd>>> {
        let root = match self.open_current_root() {
            Ok(fd) => fd,
            Err(e) if is_absent(&e) && create && self.claimed_root.get().is_none() => {
                fs::create_dir_all(&self.root).map_err(|e| Error::io(&self.root, e))?;
                self.open_root().map_err(|e| self.root_error(e))?
            }
            // The directory a writer locked was removed: nothing is made in its place.
            Err(e) if is_absent(&e) && create => return Err(self.replaced()),
            // A dataset not written yet has nothing to delete.
            Err(e) if is_absent(&e) => return Ok(None),
            Err(e) => return Err(self.root_error(e)),
        };
        let segments: Vec<&str> = key.split('/').collect();
        let dirs = &segments[..segments.len() - 1];
        let rel = dirs.join("/");
        let rel = Path::new(&rel);
        let (start, behind) = match near.nearest(rel) {
            Some((dir, rest)) if rest.as_os_str().is_empty() => (dir, dirs.len()),
            Some((dir, rest)) => {
                let names_below = rest.as_os_str().as_bytes().split(|&b| b == b'/').count();
                (dir, dirs.len() - names_below)
            }
            None => (root, 0),
        };
        let Some((reached, mut dir)) = known_way(start, &dirs[behind..], create) else {
            return Ok(None);
        };
        let reached = behind + reached;
        if reached == dirs.len() {
            near.keep(rel, &dir);
            return Ok(Some(dir));
        }
        let mut path = self.root.clone();
        path.extend(&dirs[..reached]);
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        for segment in &dirs[reached..] {
            path.push(segment);
            let name = beneath::c_name(segment.as_bytes()).map_err(|e| Error::io(&path, e))?;
            let mut opened = beneath::open_at(dir.as_fd(), &name, flags);
            if create
                && opened
                    .as_ref()
                    .is_err_and(|e| e.kind() == io::ErrorKind::NotFound)
            {
                // SAFETY: an open descriptor and a NUL-terminated name.
                let made = unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o777) };
                let e = io::Error::last_os_error();
                if made != 0 && e.kind() != io::ErrorKind::AlreadyExists {
                    return Err(Error::io(&path, e));
                }
                opened = beneath::open_at(dir.as_fd(), &name, flags);
            }
            match opened {
                Ok(fd) => dir = Arc::new(fd),
                // O_DIRECTORY refuses a symbolic link (not followed) like any other
                // non-directory.
                Err(e)
                    if e.raw_os_error() == Some(libc::ENOTDIR)
                        && beneath::is_link_at(dir.as_fd(), &name) =>
                {
                    return Err(Error::Storage {
                        key: key.to_string(),
                        reason: format!(
                            "{} is a symbolic link: writing through it would leave the dataset",
                            path.display()
                        ),
                    });
                }
                Err(e) if is_absent(&e) && !create => return Ok(None),
                Err(e) => return Err(Error::io(&path, e)),
            }
        }
        near.keep(rel, &dir);
        Ok(Some(dir))
    }

    /// Writes `value` to a new temporary file beside `key`'s, to be renamed into place. The
    /// file is created exclusively under a random name (nothing planted at its name is
    /// opened), in the directory reached by [`FileMap::object_dir`], and takes the mode and
    /// owner of the object file it replaces, as `cp` keeps them. `start_writeback`: hand its
    /// bytes to the disk now (see `put_many`). `near`: the directories kept by the writes
    /// before it in the same set.
    fn stage(
        &self,
        near: &mut NearDirs,
        key: &str,
        value: &[u8],
        start_writeback: bool,
    ) -> Result<Staged> {
        self.check_writable(key)?;
        validate_key(key)?;
        let path = self.path_of(key);
        let (Some(parent), Some(name)) = (path.parent(), key.rsplit('/').next()) else {
            return Err(Error::Storage {
                key: key.to_string(),
                reason: "no file name".into(),
            });
        };
        check_path_length(key, &longest_path(parent, name))?;
        let dir = self
            .object_dir_near(near, key, true)?
            .expect("directories are made when missing");
        let c_name = beneath::c_name(name.as_bytes()).map_err(|e| Error::io(&path, e))?;
        let old =
            temp_files::ownership_at(dir.as_fd(), &c_name).map_err(|e| Error::io(&path, e))?;
        let (mut file, temp) = temp_files::create_at(dir.as_fd(), |token| temp_name(name, token))
            .map_err(|e| Error::io(&path, e))?;
        let staged = Staged {
            temp: parent.join(&temp),
            c_temp: beneath::c_name(temp.as_bytes()).map_err(|e| Error::io(&path, e))?,
            c_name,
            path,
            dir: Some(dir),
        };
        let written = old
            .map_or(Ok(()), |old| temp_files::keep_mode_and_owner(&file, old))
            .and_then(|()| file.write_all(value))
            .map(|()| {
                if start_writeback {
                    start_writeback_of(&file);
                }
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

    /// Keeps what `key`'s file (at `path`, in the directory `dir` that
    /// [`FileMap::object_dir`] reached) holds aside, under a new temporary name beside it,
    /// for putting it back: a hard link to it, or a copy where it cannot be linked; `None`
    /// when there is nothing there. The copy is made exclusively (see `temp_files`), and
    /// neither follows a symbolic link at the object's name (the link itself is linked, or
    /// refused).
    fn keep_aside(&self, dir: &OwnedFd, key: &str, path: &Path) -> Result<Option<PathBuf>> {
        let (Some(parent), Some(name)) = (path.parent(), key.rsplit('/').next()) else {
            return Ok(None);
        };
        let c_name = beneath::c_name(name.as_bytes()).map_err(|e| Error::io(path, e))?;
        let aside = temp_name(name, &temp_files::random_token());
        let c_aside = beneath::c_name(aside.as_bytes()).map_err(|e| Error::io(path, e))?;
        // SAFETY: an open directory descriptor and NUL-terminated names; no flags, so a
        // symbolic link is linked, not followed.
        let linked = match unsafe {
            libc::linkat(
                dir.as_raw_fd(),
                c_name.as_ptr(),
                dir.as_raw_fd(),
                c_aside.as_ptr(),
                0,
            )
        } {
            0 => return Ok(Some(parent.join(aside))),
            _ => io::Error::last_os_error(),
        };
        if is_absent(&linked) {
            return Ok(None);
        }
        // No hard links here (or not to this file: an immutable one, or another user's under
        // `protected_hardlinks`): a copy.
        let copied = beneath::open_at(dir.as_fd(), &c_name, READ_FLAGS | libc::O_NOFOLLOW)
            .and_then(|fd| read_object(fs::File::from(fd), u64::MAX))
            .and_then(|bytes| {
                let bytes = bytes.unwrap_or_default();
                let (mut file, temp) =
                    temp_files::create_at(dir.as_fd(), |token| temp_name(name, token))?;
                let kept = parent.join(temp);
                match file.write_all(&bytes) {
                    Ok(()) => Ok(kept),
                    Err(e) => {
                        remove_quietly(kept);
                        Err(e)
                    }
                }
            });
        match copied {
            Ok(kept) => Ok(Some(kept)),
            Err(e) if is_absent(&e) => Ok(None),
            Err(e) => Err(Error::io(
                path,
                io::Error::new(
                    e.kind(),
                    format!("cannot keep it aside while it is replaced: {linked}; {e}"),
                ),
            )),
        }
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
}

impl FileMap {
    /// Whether `opened`, what `key` opened as (`None`: nothing), is a regular file.
    fn is_file_opened(&self, key: &str, opened: Option<OwnedFd>) -> Result<bool> {
        let Some(fd) = opened else {
            return Ok(false);
        };
        let meta = fs::File::from(fd)
            .metadata()
            .map_err(|e| Error::io(self.path_of(key), e))?;
        Ok(meta.is_file())
    }

    /// [`ZMap::search`], or with `strict` [`ZMap::keys_to_move`]'s listing, which fails on
    /// a name that is not UTF-8 rather than leave it out.
    fn search_names(&self, prefix: &str, strict: bool) -> Result<Vec<String>> {
        validate_prefix(prefix)?;
        let dir = match prefix.is_empty() {
            true => match self.open_current_root().and_then(|root| {
                beneath::open_at(root.as_fd(), c".", libc::O_RDONLY | libc::O_DIRECTORY)
            }) {
                Ok(fd) => Some(fd),
                Err(e) if is_absent(&e) => None,
                Err(e) => return Err(self.root_error(e)),
            },
            false => self.open_below(prefix, libc::O_RDONLY | libc::O_DIRECTORY)?,
        };
        self.names_in(prefix, dir, strict)
    }

    /// The names in the directory `dir` of `prefix` (`None`: there is none) as
    /// [`ZMap::search`] tells them: sorted, without temporary files; one that is not UTF-8
    /// is left out with a warning, or with `strict` refused.
    fn names_in(&self, prefix: &str, dir: Option<OwnedFd>, strict: bool) -> Result<Vec<String>> {
        let Some(dir) = dir else {
            return Ok(Vec::new());
        };
        let dir_path = match prefix.is_empty() {
            true => self.root.clone(),
            false => self.path_of(prefix),
        };
        let entries = beneath::entry_names(dir).map_err(|e| Error::io(&dir_path, e))?;
        let mut names = Vec::new();
        for name in entries {
            match name.to_str() {
                Some(name) if name.starts_with(TEMP_PREFIX) => {}
                Some(name) => names.push(name.to_string()),
                None if strict => {
                    return Err(Error::NotPermitted(format!(
                        "{} has a name that is not UTF-8, which no key names: it would be \
                         left behind",
                        dir_path.join(&name).display()
                    )))
                }
                None => log::warn!(
                    "ignoring {}: file name is not UTF-8",
                    dir_path.join(&name).display()
                ),
            }
        }
        names.sort();
        Ok(names)
    }

    /// Opens the regular file of `key` for reading, with its path and size; `Ok(None)` when
    /// there is no such object (missing, or a directory).
    fn open_file(&self, key: &str) -> Result<Option<(fs::File, PathBuf, u64)>> {
        validate_key(key)?;
        let Some(fd) = self.open_below(key, READ_FLAGS)? else {
            return Ok(None);
        };
        let file = fs::File::from(fd);
        let path = self.path_of(key);
        let meta = file.metadata().map_err(|e| Error::io(&path, e))?;
        match meta.file_type() {
            t if t.is_file() => Ok(Some((file, path, meta.len()))),
            // A prefix of other keys is no object.
            t if t.is_dir() => Ok(None),
            _ => Err(Error::io(path, not_regular())),
        }
    }
}

/// Where [`FileMap::object_dir`]'s walk down `dirs` from `start` (the root or a directory
/// below it) goes on name by name: how many of the names are behind it, and the directory
/// it has reached. The whole way when it opens in
/// one call without following a link ([`beneath::open_dir_without_links`]). When it does
/// not and `create`, the longest part of it that does, tried from the end: a writer makes a
/// group's directory below its parent's, so that is as a rule one call more, and each
/// directory made is tried once before it exists. `None`: a directory is missing and not
/// to be made. From the root whenever a link, an error or a missing openat2 needs the walk
/// name by name, which names what it meets.
fn known_way(start: Arc<OwnedFd>, dirs: &[&str], create: bool) -> Option<(usize, Arc<OwnedFd>)> {
    let open =
        |n: usize| beneath::open_dir_without_links(start.as_fd(), Path::new(&dirs[..n].join("/")));
    if dirs.is_empty() {
        return Some((0, start));
    }
    match open(dirs.len()) {
        Some(Ok(fd)) => return Some((dirs.len(), Arc::new(fd))),
        Some(Err(Miss::Absent)) if !create => return None,
        Some(Err(Miss::Absent)) => {}
        _ => return Some((0, start)),
    }
    for reached in (1..dirs.len()).rev() {
        match open(reached) {
            Some(Ok(fd)) => return Some((reached, Arc::new(fd))),
            Some(Err(Miss::Absent)) => {}
            _ => break,
        }
    }
    Some((0, start))
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
    // SAFETY: sync_file_range on an open descriptor touches no memory of ours.
    unsafe {
        libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
}

/// The longest path a write of the object file `name` in the directory `parent` uses: the
/// temporary file it is written to before it is renamed into place (whose token is as long
/// as any).
fn longest_path(parent: &Path, name: &str) -> PathBuf {
    parent.join(temp_name(name, &"0".repeat(temp_files::TOKEN_LEN)))
}

/// Refuses an object whose file (`temp`, the longest path its write uses) the operating
/// system cannot name: a path of `PATH_MAX` bytes or more (the whole path, the store's own
/// directory included: a set of objects is renamed into place by path), or a name longer
/// than `NAME_MAX`. The message names the key (deeply nested groups, as a rule) rather than
/// failing with a path of kilobytes.
fn check_path_length(key: &str, temp: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let path_max = libc::PATH_MAX as usize;
    let bytes = temp.as_os_str().as_bytes().len();
    let reason = if bytes >= path_max {
        format!(
            "its file's path would be {bytes} bytes long (as the temporary file it is written \
             to), and this system takes paths shorter than {path_max} bytes (PATH_MAX): the \
             key has {} levels, nest the groups less deeply or write a zip archive",
            key.split('/').count()
        )
    } else if let Some(long) = key.split('/').find(|s| s.len() > NAME_MAX) {
        format!(
            "the name {} is {} bytes long, more than the {NAME_MAX} a file name may have",
            crate::error::quoted(long),
            long.len()
        )
    } else {
        return Ok(());
    };
    Err(Error::PathTooLong {
        what: "key",
        name: key.to_string(),
        reason,
    })
}

/// Whether an I/O error means "no object here": missing, or a path component is a file.
fn is_absent(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
    )
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

impl FileMap {
    /// Removes the temporary files (`.nczarrfs-tmp.NAME.PID.TOKEN`) that earlier writers left
    /// in the dataset: a writer killed (SIGKILL, a crash) between writing its temporary files
    /// and renaming them, or one whose storing failed and whose temporary files could not be
    /// removed then. Readers ignore them, but zarr-python warns about each one at every
    /// listing, and they would pile up.
    ///
    /// Called only with the writer lock held ([`ZMap::claim_writer`]): every other writer
    /// that takes the lock is then shut out, so a temporary file here is either this
    /// process's own or one that no writer will ever rename. That holds only under the lock:
    /// without it, a file could belong to a live writer that is about to rename it. As a
    /// second safeguard a file is removed only when the process named in it has ended, and
    /// is not being served by a rename helper (which completes a set of renames after its
    /// writer was killed: removing its files then would cut the set short). Symbolic links
    /// to directories are not followed: what they lead to is not this dataset.
    ///
    /// The sweep reads every directory of the dataset (about half a second per million
    /// object files), so it runs on a thread of its own: a writer's open does not wait for
    /// it. The map waits for it when dropped, so that a short-lived writer (`put`) still
    /// finishes it.
    fn remove_leftover_temporaries(&self) {
        let dir_flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        let root = match self
            .open_current_root()
            .and_then(|root| beneath::open_at(root.as_fd(), c".", dir_flags))
        {
            Ok(root) => root,
            Err(e) => {
                log::debug!(
                    "{}: not swept for temporary files: {e}",
                    self.root.display()
                );
                return;
            }
        };
        let path = self.root.clone();
        let sweep = std::thread::Builder::new()
            .name("nczarrfs-sweep".into())
            .spawn(move || sweep_temporaries(root, path));
        match sweep {
            Ok(sweep) => *self.sweep.lock().unwrap_or_else(|e| e.into_inner()) = Some(sweep),
            Err(e) => log::warn!(
                "{}: not swept for temporary files: no thread: {e}",
                self.root.display()
            ),
        }
    }
    /// Removes the temporary files `temps` (each beside the object file of its key) through
    /// the dataset's root directory kept open, not by their paths: a store that failed
    /// because the dataset was renamed meanwhile left them where the paths no longer lead.
    fn remove_temporaries<'k>(&self, temps: impl IntoIterator<Item = (&'k str, PathBuf)>) {
        let mut near = NearDirs::default();
        for (key, temp) in temps {
            let dir = self.object_dir_near(&mut near, key, false);
            let name = temp.file_name().map(|n| beneath::c_name(n.as_bytes()));
            match (dir, name) {
                (Ok(Some(dir)), Some(Ok(name))) => {
                    // SAFETY: an open directory descriptor and a NUL-terminated name.
                    unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) };
                }
                _ => remove_quietly(temp),
            }
        }
    }
}

/// The sweep of [`FileMap::remove_leftover_temporaries`], from the dataset's root directory
/// `root` (open) at `root_path` (for messages).
fn sweep_temporaries(root: OwnedFd, root_path: PathBuf) {
    let dir_flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW;
    let mut helpers = None;
    let mut removed = 0usize;
    // Depth first: one open directory per level.
    let mut pending = vec![(root, root_path.clone())];
    while let Some((dir, path)) = pending.pop() {
        let entries = match dir.try_clone().and_then(beneath::typed_entries) {
            Ok(entries) => entries,
            Err(e) => {
                log::warn!("{}: not swept for temporary files: {e}", path.display());
                continue;
            }
        };
        for (name, kind) in entries {
            let Ok(c_name) = beneath::c_name(name.as_bytes()) else {
                continue;
            };
            if let Some(writer) = name.to_str().and_then(temp_writer) {
                let mut served = || {
                    helpers
                        .get_or_insert_with(super::rename_helper::writers_served)
                        .contains(&writer)
                };
                let leftover = writer != std::process::id()
                    && crate::interrupt::has_ended(writer)
                    && !served();
                // SAFETY: an open directory descriptor and a NUL-terminated name; a
                // temporary file is a file (or a link kept aside), never a directory.
                if leftover && unsafe { libc::unlinkat(dir.as_raw_fd(), c_name.as_ptr(), 0) } == 0 {
                    removed += 1;
                }
                continue;
            }
            if !matches!(kind, libc::DT_DIR | libc::DT_UNKNOWN) {
                continue;
            }
            match beneath::open_at(dir.as_fd(), &c_name, dir_flags) {
                Ok(sub) => pending.push((sub, path.join(&name))),
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOTDIR | libc::ELOOP)) => {}
                Err(e) => log::warn!(
                    "{}: not swept for temporary files: {e}",
                    path.join(&name).display()
                ),
            }
        }
    }
    if removed > 0 {
        log::info!(
            "{}: removed {removed} temporary files left by earlier writers",
            root_path.display()
        );
    }
}

/// Best effort: a temporary file left behind is hidden from listings, the lesser problem.
fn remove_quietly(path: PathBuf) {
    let _ = fs::remove_file(path);
}

/// An object written to its temporary file and not yet renamed into place.
struct Staged {
    /// The object's directory, kept open to rename in it; `None` once let go (`put_many`
    /// does, as it may stage thousands of objects), the paths are used then.
    dir: Option<Arc<OwnedFd>>,
    /// The temporary file's name and path.
    c_temp: CString,
    temp: PathBuf,
    /// The object file's name and path.
    c_name: CString,
    path: PathBuf,
}

impl Staged {
    fn commit(self) -> Result<()> {
        let renamed = match &self.dir {
            Some(dir) => {
                let dir = dir.as_raw_fd();
                // SAFETY: an open directory descriptor and NUL-terminated names.
                match unsafe {
                    libc::renameat(dir, self.c_temp.as_ptr(), dir, self.c_name.as_ptr())
                } {
                    0 => Ok(()),
                    _ => Err(io::Error::last_os_error()),
                }
            }
            None => fs::rename(&self.temp, &self.path),
        }
        .map_err(|e| Error::io(&self.path, e));
        if renamed.is_err() {
            self.discard();
        }
        renamed
    }

    /// Best effort: the write already failed, a leftover temp file is the lesser problem.
    fn discard(self) {
        match &self.dir {
            // SAFETY: an open directory descriptor and a NUL-terminated name.
            Some(dir) => unsafe {
                libc::unlinkat(dir.as_raw_fd(), self.c_temp.as_ptr(), 0);
            },
            None => {
                let _ = fs::remove_file(&self.temp);
            }
        }
    }
}

impl ZMap for FileMap {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.get_up_to(key, u64::MAX)
    }

    fn get_metadata(&self, key: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        self.get_up_to(key, limit)
    }

    fn get_many_metadata(&self, keys: &[String], limit: u64) -> Vec<Result<Option<Vec<u8>>>> {
        keys.iter().map(|k| self.get_up_to(k, limit)).collect()
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
        let Some((file, path, size)) = self.open_file(key)? else {
            return Ok(None);
        };
        read_range(file, &path, size, offset, len).map(Some)
    }

    fn get_suffix(&self, key: &str, len: u64) -> Result<Option<Vec<u8>>> {
        let Some((file, path, size)) = self.open_file(key)? else {
            return Ok(None);
        };
        read_range(file, &path, size, size.saturating_sub(len), len).map(Some)
    }

    fn exists(&self, key: &str) -> Result<bool> {
        validate_key(key)?;
        let opened = self.open_below(key, libc::O_PATH)?;
        self.is_file_opened(key, opened)
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        let staged = self.stage(&mut NearDirs::default(), key, value, false)?;
        staged.commit()
    }

    fn check_key_storable(&self, key: &str) -> Result<()> {
        validate_key(key)?;
        let path = self.path_of(key);
        match (path.parent(), key.rsplit('/').next()) {
            (Some(parent), Some(name)) => check_path_length(key, &longest_path(parent, name)),
            _ => Ok(()),
        }
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
    ///
    /// The renames go by path (the helper is another process). A directory of the dataset
    /// replaced by a symbolic link after the staging can only make one fail: the temporary
    /// file it names is not where the link leads.
    fn put_many(&self, objects: &[(String, Vec<u8>)]) -> Result<()> {
        let mut staged = Vec::with_capacity(objects.len());
        let mut aside = Vec::with_capacity(objects.len());
        // After a failure: removes the temporary files not renamed into place (`staged`, of
        // the objects from the `first`), and the objects kept aside (`aside`, of the objects
        // from the first).
        let give_up = |first: usize, staged: Vec<Staged>, aside: Vec<Option<PathBuf>>| {
            let keys = objects.iter().map(|(key, _)| key.as_str());
            self.remove_temporaries(
                keys.clone()
                    .skip(first)
                    .zip(staged.into_iter().map(|s| s.temp))
                    .chain(keys.zip(aside).filter_map(|(k, a)| Some((k, a?)))),
            );
        };
        // The directories of one set of keys, most of which share their parents.
        let mut near = NearDirs::default();
        for (key, value) in objects {
            let kept = self.stage(&mut near, key, value, true).and_then(|mut s| {
                let dir = s.dir.take().expect("a staged object's directory is kept");
                Ok((self.keep_aside(&dir, key, &s.path)?, s))
            });
            match kept {
                Ok((kept, s)) => {
                    staged.push(s);
                    aside.push(kept);
                }
                Err(e) => {
                    give_up(0, staged, aside);
                    return Err(e);
                }
            }
        }
        if let Err(e) = self.check_root_path() {
            give_up(0, staged, aside);
            return Err(e);
        }
        let pairs: Vec<(PathBuf, PathBuf)> = staged
            .iter()
            .map(|s| (s.temp.clone(), s.path.clone()))
            .collect();
        let (renamed, error) = super::rename_helper::rename_in_order(&pairs);
        let Some(e) = error.filter(|_| renamed < staged.len()) else {
            // Just renamed by these paths: they lead to the dataset.
            aside.into_iter().flatten().for_each(remove_quietly);
            return Ok(());
        };
        // Replaced between the check and the renames, the dataset is named as the cause, not
        // a temporary file missing from the replacement.
        let err = self
            .check_root_path()
            .err()
            .unwrap_or_else(|| Error::io(&staged[renamed].path, e));
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
        give_up(renamed, staged.split_off(renamed), aside);
        Err(err)
    }

    /// Removes `key`'s file, or the directory of that name with everything in it, without
    /// following any symbolic link (one in its place is removed itself), then the
    /// directories left empty, so that `search` does not report prefixes that lead to no
    /// content.
    fn delete(&self, key: &str) -> Result<()> {
        self.check_writable(key)?;
        validate_key(key)?;
        let Some(dir) = self.object_dir(key, false)? else {
            return Ok(());
        };
        let path = self.path_of(key);
        let name = key.rsplit('/').next().unwrap_or(key);
        let c_name = beneath::c_name(name.as_bytes()).map_err(|e| Error::io(&path, e))?;
        match beneath::remove_at(dir.as_fd(), &c_name) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(path, e)),
        }
        if let Ok(root) = self.open_root() {
            let segments: Vec<&str> = key.split('/').collect();
            beneath::remove_empty_dirs(root.as_fd(), dir.as_fd(), &segments[..segments.len() - 1]);
        }
        Ok(())
    }

    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        self.search_names(prefix, false)
    }

    fn keys_to_move(&self, prefix: &str) -> Result<Vec<String>> {
        super::walk_keys_under(self, prefix, |p| self.search_names(p, true))
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    fn for_one_pass(&self) -> Option<Box<dyn ZMap + '_>> {
        Some(Box::new(one_pass::OnePass::new(self)))
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
            let lock = super::WriterLock::acquire(&self.root)?;
            let locked = lock.identity()?;
            // From now on the map works in the locked directory, whatever is put at its path.
            let root =
                beneath::open_at(lock.file().as_fd(), c".", libc::O_PATH | libc::O_DIRECTORY)
                    .map_err(|e| Error::io(&self.root, e))?;
            self.root_slot().open = Some(Arc::new(root));
            let _ = self.claimed_root.set(locked);
            *claim = Some(lock);
            self.remove_leftover_temporaries();
        }
        Ok(())
    }

    fn local_space(&self) -> Option<super::Space> {
        super::space_of(&self.root)
    }

    /// Lets go of the root directory kept open, so that the next operation opens what is at
    /// the root's path then (a dataset replaced by a rename, a retargeted link). A dataset
    /// this process made keeps its directory.
    fn refresh(&self) -> Result<()> {
        if !self.made_root {
            self.root_slot().release();
        }
        Ok(())
    }

    fn storage_generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }
}

/// `len` bytes from `offset` of the open object `file` of `size` bytes (fewer past its end).
fn read_range(
    mut file: fs::File,
    path: &Path,
    size: u64,
    offset: u64,
    len: u64,
) -> Result<Vec<u8>> {
    let start = offset.min(size);
    let want = len.min(size - start);
    file.seek(SeekFrom::Start(start))
        .map_err(|e| Error::io(path, e))?;
    let mut buf = Vec::with_capacity(usize::try_from(want).unwrap_or(0));
    file.take(want)
        .read_to_end(&mut buf)
        .map_err(|e| Error::io(path, e))?;
    Ok(buf)
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
        // Reads do not follow it either: it leads out of the dataset.
        let e = map.get("v/1/keep").unwrap_err().to_string();
        assert!(e.contains("leads out of the dataset"), "{e}");
    }

    /// What a symbolic link to `target` at `at` (below the dataset's root) reads as.
    fn link(map: &FileMap, at: &str, target: impl AsRef<Path>) {
        std::os::unix::fs::symlink(target, map.path_of(at)).unwrap();
    }

    /// A secret beside the dataset that a link inside it points to is never read, listed,
    /// nor found to exist, whatever the link's form; links that stay inside keep working.
    #[test]
    fn reads_follow_links_only_inside_the_dataset() {
        let (dir, map) = writable();
        map.put("v/0", b"inside").unwrap();
        map.put("w/.zarray", b"{}").unwrap();
        let secret = dir.path().join("secret");
        fs::write(&secret, b"SECRET").unwrap();
        let elsewhere = dir.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        fs::write(elsewhere.join("0"), b"SECRET").unwrap();
        let root = map.root().to_path_buf();

        link(&map, "v/1", "0");
        link(&map, "v/2", "../v/0");
        link(&map, "v/3", root.join("v/0"));
        link(&map, "u", "v");
        link(&map, "w/0", "../u/0");
        for key in ["v/1", "v/2", "v/3", "u/0", "w/0"] {
            assert_eq!(
                map.get(key).unwrap().as_deref(),
                Some(&b"inside"[..]),
                "{key}"
            );
            assert_eq!(
                map.get_range(key, 2, 3).unwrap().as_deref(),
                Some(&b"sid"[..])
            );
            assert!(map.exists(key).unwrap(), "{key}");
        }
        assert_eq!(map.search("u").unwrap(), vec!["0", "1", "2", "3"]);
        // A link inside to nothing is no object, as a missing file is not.
        link(&map, "v/4", "9");
        assert_eq!(map.get("v/4").unwrap(), None);
        assert!(!map.exists("v/4").unwrap());

        link(&map, "v/5", &secret);
        link(&map, "v/6", "../../secret");
        link(
            &map,
            "v/7",
            "../../../../../../../../..".to_string() + &secret.to_string_lossy(),
        );
        link(&map, "x", &elsewhere);
        link(&map, "v/8", dir.path().join("nothing"));
        for key in ["v/5", "v/6", "v/7", "x/0", "v/8"] {
            let outside = |e: Error| {
                let e = e.to_string();
                assert!(e.contains("leads out of the dataset"), "{key}: {e}");
            };
            outside(map.get(key).unwrap_err());
            outside(map.get_into(key, &mut Vec::new()).unwrap_err());
            outside(
                map.read_with(key, &mut Vec::new(), &mut |_| Ok(()))
                    .unwrap_err(),
            );
            outside(map.get_exact(key, &mut [0u8; 6]).unwrap_err());
            outside(map.get_range(key, 0, 6).unwrap_err());
            outside(map.get_range_into(key, 0, &mut [0u8; 6]).unwrap_err());
            outside(map.get_suffix(key, 6).unwrap_err());
            outside(map.exists(key).unwrap_err());
            outside(map.object_file(key).map(|_| ()).unwrap_err());
        }
        let e = map.search("x").unwrap_err().to_string();
        assert!(e.contains("leads out of the dataset"), "{e}");

        // A dataset whose root is a link (to a directory elsewhere) is read as ever, absolute
        // links through the root's link included.
        let root_link = dir.path().join("link.file");
        std::os::unix::fs::symlink(&root, &root_link).unwrap();
        let through = FileMap::open(&root_link, false).unwrap();
        link(&map, "v/9", root_link.join("v/0"));
        for key in ["v/0", "v/2", "v/9", "u/0"] {
            assert_eq!(
                through.get(key).unwrap().as_deref(),
                Some(&b"inside"[..]),
                "{key}"
            );
        }
        assert!(through.get("v/5").is_err());
    }

    /// Without openat2 (Linux before 5.6), names are opened one at a time without following
    /// links, and a path through a link goes the careful way.
    #[test]
    fn the_walk_without_openat2_stops_at_every_link() {
        let (_dir, map) = writable();
        map.put("v/0", b"inside").unwrap();
        link(&map, "v/1", "0");
        link(&map, "u", "v");
        let root = map.open_root().unwrap();
        let open =
            |key: &str| beneath::open_without_links(root.as_fd(), Path::new(key), READ_FLAGS);
        let mut found = String::new();
        fs::File::from(open("v/0").unwrap())
            .read_to_string(&mut found)
            .unwrap();
        assert_eq!(found, "inside");
        for key in ["v/1", "u/0", "u/1"] {
            assert!(matches!(open(key), Err(Miss::Link)), "{key}");
        }
        for key in ["v/9", "w/0", "v/0/x"] {
            assert!(matches!(open(key), Err(Miss::Absent)), "{key}");
        }
        let through = map.open_through_links(&root, "u/1", READ_FLAGS).unwrap();
        assert!(through.is_some());
    }

    /// A rewritten object keeps the mode its file had, as `cp` over a file keeps it; a new
    /// one gets the umask's.
    #[test]
    fn a_rewritten_object_keeps_its_mode() {
        use std::os::unix::fs::PermissionsExt;
        let (_dir, map) = writable();
        map.put("v/0", b"1").unwrap();
        map.put("v/1", b"1").unwrap();
        let file = map.path_of("v/0");
        fs::set_permissions(&file, fs::Permissions::from_mode(0o4640)).unwrap();
        map.put("v/0", b"2").unwrap();
        map.put_many(&[("v/1".into(), b"2".to_vec())]).unwrap();
        let mode =
            |key: &str| fs::metadata(map.path_of(key)).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode("v/0"), 0o640, "kept, without its set-user-ID bit");
        assert_eq!(fs::read(&file).unwrap(), b"2");
        fs::set_permissions(map.path_of("v/1"), fs::Permissions::from_mode(0o600)).unwrap();
        map.put_many(&[("v/1".into(), b"3".to_vec())]).unwrap();
        assert_eq!(mode("v/1"), 0o600);
    }

    /// Temporary files get random names, made exclusively: two stagings of one object in one
    /// process differ, and a name taken is never written into.
    #[test]
    fn temporary_files_have_random_names() {
        let (_dir, map) = writable();
        let a = map
            .stage(&mut NearDirs::default(), "v/0", b"a", false)
            .unwrap();
        let b = map
            .stage(&mut NearDirs::default(), "v/0", b"b", false)
            .unwrap();
        let name = |s: &Staged| s.temp.file_name().unwrap().to_str().unwrap().to_string();
        let prefix = format!("{TEMP_PREFIX}0.{}.", std::process::id());
        for n in [name(&a), name(&b)] {
            let token = n.strip_prefix(&prefix).unwrap_or_else(|| panic!("{n}"));
            assert!(temp_files::is_token(token), "{n}");
        }
        assert_ne!(name(&a), name(&b));
        b.commit().unwrap();
        a.commit().unwrap();
        assert_eq!(map.get("v/0").unwrap().as_deref(), Some(&b"a"[..]));
    }

    /// A dataset this process made is bound to its directory: nothing at its name before is
    /// used, and a link put in its place afterwards is neither written through nor read.
    #[test]
    fn a_new_dataset_stays_in_the_directory_it_made() {
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        let planted = dir.path().join("planted");
        std::os::unix::fs::symlink(&elsewhere, &planted).unwrap();
        let e = FileMap::create_new(&planted).unwrap_err();
        assert!(
            matches!(&e, Error::Io { source, .. } if source.kind() == io::ErrorKind::AlreadyExists),
            "{e}"
        );

        let root = dir.path().join("new.file");
        let map = FileMap::create_new(&root).unwrap();
        map.put("v/0", b"1").unwrap();
        let moved = dir.path().join("moved");
        fs::rename(&root, &moved).unwrap();
        std::os::unix::fs::symlink(&elsewhere, &root).unwrap();
        fs::create_dir(elsewhere.join("v")).unwrap();
        fs::write(elsewhere.join("v/0"), b"theirs").unwrap();
        map.put("v/1", b"2").unwrap();
        map.put("w/0", b"3").unwrap();
        assert_eq!(map.get("v/0").unwrap().as_deref(), Some(&b"1"[..]));
        assert_eq!(map.search("").unwrap(), vec!["v", "w"]);
        map.delete("v/0").unwrap();
        map.refresh().unwrap();
        assert_eq!(map.search("v").unwrap(), vec!["1"]);
        assert_eq!(fs::read(moved.join("w/0")).unwrap(), b"3");
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 1);
        assert_eq!(fs::read_dir(elsewhere.join("v")).unwrap().count(), 1);
        assert_eq!(fs::read(elsewhere.join("v/0")).unwrap(), b"theirs");
    }

    /// A dataset replaced by another at its path (by a rename, as `gen` and `copy` replace
    /// one) is read once the map is refreshed; until then a deleted old one fails reads of
    /// what it no longer holds, which would otherwise read as fill values.
    #[test]
    fn a_replaced_dataset_is_seen() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("ds.file");
        let (old, new) = (dir.path().join("old"), dir.path().join("new"));
        for (d, v) in [(&old, "old"), (&new, "new")] {
            fs::create_dir_all(d.join("v")).unwrap();
            fs::write(d.join("v/0"), v).unwrap();
        }
        fs::rename(&old, &root).unwrap();
        let map = FileMap::open(&root, false).unwrap();
        assert_eq!(map.get("v/0").unwrap().as_deref(), Some(&b"old"[..]));
        fs::rename(&root, &old).unwrap();
        fs::rename(&new, &root).unwrap();
        assert_eq!(
            map.get("v/0").unwrap().as_deref(),
            Some(&b"old"[..]),
            "until a refresh"
        );
        map.refresh().unwrap();
        assert_eq!(map.get("v/0").unwrap().as_deref(), Some(&b"new"[..]));
        fs::rename(&root, &new).unwrap();
        fs::rename(&old, &root).unwrap();
        fs::remove_dir_all(&new).unwrap();
        let removed = |e: Error| matches!(e, Error::RemovedUnderneath { path } if path == root);
        assert!(removed(map.get("v/0").unwrap_err()), "the new one is gone");
        assert!(removed(map.exists("v/0").unwrap_err()));
        map.refresh().unwrap();
        assert_eq!(map.get("v/0").unwrap().as_deref(), Some(&b"old"[..]));
        fs::remove_dir_all(&root).unwrap();
        assert!(removed(map.get("v/0").unwrap_err()));
        map.refresh().unwrap();
        assert_eq!(map.get("v/0").unwrap(), None);
        assert!(map.search("").unwrap().is_empty());
    }

    /// A delete removes a link in the object's place, never what it points to, also inside
    /// a directory it removes whole.
    #[test]
    fn deletes_remove_links_not_their_targets() {
        let (dir, map) = writable();
        let elsewhere = dir.path().join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        fs::write(elsewhere.join("keep"), b"x").unwrap();
        map.put("g/v/0", b"1").unwrap();
        link(&map, "g/v/1", &elsewhere);
        link(&map, "g/w", elsewhere.join("keep"));
        map.delete("g/w").unwrap();
        map.delete("g").unwrap();
        assert!(!map.root().join("g").exists());
        assert_eq!(fs::read(elsewhere.join("keep")).unwrap(), b"x");
    }

    #[test]
    fn a_key_too_long_for_the_file_system_is_refused_by_its_key() {
        let (_dir, map) = writable();
        let key = format!("{}.zgroup", "g/".repeat(2100));
        let e = map.put(&key, b"{}").unwrap_err().to_string();
        assert!(
            e.contains("takes paths shorter than 4096 bytes (PATH_MAX): the key has 2101 levels"),
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

    /// Writing a set of objects in groups nested hundreds deep opens about as many
    /// directories and files as it writes objects: each directory is reached from its
    /// parent, opened for the object before, rather than from the root name by name.
    #[test]
    fn a_set_of_deep_writes_opens_each_directory_about_once() {
        const DEPTH: usize = 300;
        let (_dir, map) = writable();
        let mut objects = Vec::new();
        let mut group = String::new();
        for _ in 0..DEPTH {
            group.push_str("g/");
            for name in [".zgroup", ".zattrs", "v/.zarray"] {
                objects.push((format!("{group}{name}"), name.as_bytes().to_vec()));
            }
        }
        let before = beneath::opens_so_far();
        map.put_many(&objects).unwrap();
        let opens = beneath::opens_so_far() - before;
        // Name by name from the root, it was one open per level for each object, twice
        // (staging and keeping aside): about DEPTH^2 * 3 in all.
        assert!(
            opens <= 8 * objects.len() as u64,
            "{opens} opens for {} objects",
            objects.len()
        );
        let deepest = map.root().join(&objects.last().unwrap().0);
        assert_eq!(fs::read(deepest).unwrap(), b"v/.zarray");
        // Rewritten in place (each kept aside first), as deep.
        let before = beneath::opens_so_far();
        map.put_many(&objects).unwrap();
        let opens = beneath::opens_so_far() - before;
        assert!(opens <= 8 * objects.len() as u64, "{opens} opens again");
    }

    /// Reading the metadata of groups nested hundreds deep walks about as many names as it
    /// opens objects: each group's objects are opened from its directory, reached from its
    /// parent's, rather than from the root through every level above it.
    #[test]
    fn reading_deep_groups_walks_each_level_about_once() {
        const DEPTH: usize = 300;
        let (_dir, map) = writable();
        let mut objects = vec![(".zgroup".to_string(), br#"{"zarr_format": 2}"#.to_vec())];
        let mut group = String::new();
        for _ in 0..DEPTH {
            group.push_str("g/");
            objects.push((format!("{group}.zgroup"), objects[0].1.clone()));
            let title = format!(r#"{{"title": "{}"}}"#, group.len() / 2);
            objects.push((format!("{group}.zattrs"), title.into_bytes()));
        }
        map.put_many(&objects).unwrap();
        let before = beneath::names_walked_so_far();
        let ds = crate::meta::read_dataset(&map, &crate::location::Mode::default()).unwrap();
        let walked = beneath::names_walked_so_far() - before;
        assert_eq!(ds.groups.len(), DEPTH + 1);
        let deepest = ds.groups_preorder()[DEPTH];
        assert_eq!(ds.group_fqn(deepest), "/g".repeat(DEPTH));
        let title = &ds.group(deepest).attrs[0];
        let text = crate::model::AttrValue::Char(DEPTH.to_string().into_bytes());
        assert_eq!((title.name.as_str(), &title.value), ("title", &text));
        // From the root, each of the two or three objects per group walked every level
        // above it: about DEPTH^2 in all (90,000 here).
        assert!(
            walked <= 10 * objects.len() as u64,
            "{walked} names walked for {} objects",
            objects.len()
        );
    }

    /// A shallow object is opened from the root in one open, as without a pass: opening its
    /// directory to keep it costs more than the few names walked (a flat dataset of 1,000
    /// variables made 3,000 opens instead of 2,000, and `dump -h` took 18% longer).
    #[test]
    fn a_pass_opens_shallow_objects_from_the_root() {
        let (_dir, map) = writable();
        let objects: Vec<(String, Vec<u8>)> = (0..20)
            .flat_map(|i| [format!("v{i}/.zarray"), format!("v{i}/.zattrs")])
            .map(|key| (key, b"{}".to_vec()))
            .collect();
        map.put_many(&objects).unwrap();
        let pass = map.for_one_pass().unwrap();
        let before = beneath::opens_so_far();
        for (key, value) in &objects {
            assert_eq!(pass.get(key).unwrap().as_ref(), Some(value), "{key}");
        }
        assert_eq!(beneath::opens_so_far() - before, objects.len() as u64);
    }

    #[test]
    fn fifos_and_devices_in_the_store_are_refused_not_waited_on() {
        let (_dir, map) = writable();
        map.put("v/.zarray", b"{}").unwrap();
        let fifo = map.root().join("v").join("0");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // A device: /dev as a dataset.
        let dev = FileMap::open(Path::new("/dev"), false).unwrap();
        for (map, key) in [(&map, "v/0"), (&dev, "zero")] {
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
        let e = dev.get("zero").unwrap_err().to_string();
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
    fn metadata_longer_than_the_limit_is_refused_by_its_length() {
        let (dir, map) = writable();
        let too_large = |key: &str, limit: u64| match map.get_metadata(key, limit) {
            Err(Error::MetadataTooLarge {
                key: k,
                size,
                limit: l,
            }) if k == key && l == limit => size,
            other => panic!("{key} with a limit of {limit}: {other:?}"),
        };
        for len in [
            0,
            7,
            SMALL_OBJECT - 1,
            SMALL_OBJECT,
            SMALL_OBJECT + 1,
            300_001,
        ] {
            let value: Vec<u8> = (0..len).map(|i| (i * 7 % 251) as u8).collect();
            map.put("v/.zattrs", &value).unwrap();
            let len = len as u64;
            let whole = map.get_metadata("v/.zattrs", len).unwrap();
            assert_eq!(
                whole.as_deref(),
                Some(&value[..]),
                "{len} bytes, limit {len}"
            );
            if len > 0 {
                assert_eq!(too_large("v/.zattrs", len - 1), Some(len));
            }
        }
        assert_eq!(map.get_metadata("v/.zarray", 0).unwrap(), None);
        // A sparse file of 3 GiB (a few blocks on disk): refused by its length, so nothing
        // of that size is allocated or read.
        let big = 3u64 << 30;
        let file = fs::File::create(dir.path().join("ds.file/v/.zattrs")).unwrap();
        file.set_len(big).unwrap();
        assert_eq!(
            too_large("v/.zattrs", crate::zmap::METADATA_LIMIT),
            Some(big)
        );
        let keys = ["v/.zattrs".to_string(), "v/.zarray".to_string()];
        let got = map.get_many_metadata(&keys, crate::zmap::METADATA_LIMIT);
        assert!(
            matches!(got[0], Err(Error::MetadataTooLarge { size: Some(n), .. }) if n == big),
            "{:?}",
            got[0]
        );
        assert!(matches!(got[1], Ok(None)), "{:?}", got[1]);
        let e = map
            .get_metadata("v/.zattrs", 1 << 20)
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            format!(
                "metadata object \"v/.zattrs\" is {big} bytes long, more than the 1048576 \
                 bytes that nczarrfs reads of a metadata object: it is damaged, or not metadata"
            )
        );
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
    fn keys_to_move_refuses_a_name_that_is_not_utf8() {
        use std::os::unix::ffi::OsStrExt;
        let (_dir, map) = writable();
        map.put("g/a/0", b"x").unwrap();
        assert_eq!(map.keys_to_move("g").unwrap(), vec!["g/a/0"]);
        let odd = map
            .root()
            .join("g/a")
            .join(std::ffi::OsStr::from_bytes(b"\xffodd"));
        fs::write(&odd, b"kept").unwrap();
        // Reads leave it out; a move must not.
        assert_eq!(map.keys_under("g").unwrap(), vec!["g/a/0"]);
        let err = map.keys_to_move("g").unwrap_err();
        assert!(
            matches!(&err, Error::NotPermitted(why) if why.contains("not UTF-8")),
            "{err}"
        );
        assert_eq!(map.keys_to_move("h").unwrap(), Vec::<String>::new());
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
        // One byte more than a file name may have (one of 255 bytes is written).
        let key = format!("v/{}", "x".repeat(256));
        let err = map.put(&key, b"1").unwrap_err().to_string();
        assert!(
            err.contains("key \"v/xxx") && err.contains("256 bytes long, more than the 255"),
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

    /// Every name below `root` that is one of this module's temporary files.
    fn temporaries_below(root: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        let mut pending = vec![root.to_path_buf()];
        while let Some(dir) = pending.pop() {
            for entry in fs::read_dir(&dir).unwrap().flatten() {
                if entry.file_name().to_string_lossy().starts_with(TEMP_PREFIX) {
                    found.push(entry.path());
                } else if entry.file_type().unwrap().is_dir() {
                    pending.push(entry.path());
                }
            }
        }
        found.sort();
        found
    }

    #[test]
    fn a_failed_set_removes_its_temporary_files_from_a_dataset_moved_meanwhile() {
        let (dir, map) = writable();
        map.put("g/.zattrs", b"old").unwrap();
        map.put(".zgroup", b"{}").unwrap();
        let moved = dir.path().join("moved.file");
        fs::rename(map.root(), &moved).unwrap();
        let objects = vec![
            ("g/.zattrs".to_string(), b"new".to_vec()),
            (".zgroup".to_string(), b"{ }".to_vec()),
        ];
        assert!(map.put_many(&objects).is_err());
        assert_eq!(temporaries_below(&moved), Vec::<PathBuf>::new());
        assert_eq!(fs::read(moved.join("g/.zattrs")).unwrap(), b"old");
    }

    /// Copies the directory `from` to `to` (files and directories only), as `cp -a` would.
    fn copy_tree(from: &Path, to: &Path) {
        fs::create_dir(to).unwrap();
        for entry in fs::read_dir(from).unwrap() {
            let entry = entry.unwrap();
            match entry.file_type().unwrap().is_dir() {
                true => copy_tree(&entry.path(), &to.join(entry.file_name())),
                false => drop(fs::copy(entry.path(), to.join(entry.file_name())).unwrap()),
            }
        }
    }

    #[test]
    fn a_writer_refuses_to_store_metadata_once_its_dataset_is_replaced() {
        let objects = vec![
            ("g/.zattrs".to_string(), b"new".to_vec()),
            (".zgroup".to_string(), b"{ }".to_vec()),
        ];
        let replaced_or_removed = |e: Error| {
            assert!(matches!(e, Error::Busy(_)), "{e}");
            assert_eq!(e.errno(), libc::EBUSY);
            assert!(
                e.to_string()
                    .contains("replaced or removed by another program"),
                "{e}"
            );
        };
        // Moved aside and copied back (`mv ds ds.old; cp -a ds.old ds`): the kept directory
        // still exists, and the renames by path would look for the temporary files in the
        // copy.
        let (dir, map) = writable();
        map.put("g/.zattrs", b"old").unwrap();
        map.put(".zgroup", b"{}").unwrap();
        map.claim_writer().unwrap();
        let aside = dir.path().join("ds.old");
        fs::rename(map.root(), &aside).unwrap();
        copy_tree(&aside, map.root());
        replaced_or_removed(map.put_many(&objects).unwrap_err());
        for kept in [&aside, map.root()] {
            assert_eq!(fs::read(kept.join("g/.zattrs")).unwrap(), b"old");
            assert_eq!(fs::read(kept.join(".zgroup")).unwrap(), b"{}");
            assert_eq!(temporaries_below(kept), Vec::<PathBuf>::new());
        }
        // Removed: refused too, the chunks as well, and nothing is made at the path.
        let (_dir, map) = writable();
        map.put(".zgroup", b"{}").unwrap();
        map.claim_writer().unwrap();
        fs::remove_dir_all(map.root()).unwrap();
        replaced_or_removed(map.put_many(&objects).unwrap_err());
        replaced_or_removed(map.put("v/0", b"x").unwrap_err());
        assert!(!map.root().exists());
    }

    #[test]
    fn temporary_files_are_told_by_their_name() {
        let token = "0123456789abcdef";
        assert_eq!(
            temp_writer(&format!("{TEMP_PREFIX}.zattrs.42.{token}")),
            Some(42)
        );
        assert_eq!(temp_writer(&format!("{TEMP_PREFIX}a.b.7.{token}")), Some(7));
        assert_eq!(temp_writer(&format!("{TEMP_PREFIX}.zattrs.42.0123")), None);
        assert_eq!(
            temp_writer(&format!("{TEMP_PREFIX}.zattrs.x2.{token}")),
            None
        );
        assert_eq!(temp_writer(&format!(".zattrs.42.{token}")), None);
        let mine = temp_name(".zarray", token);
        assert_eq!(temp_writer(&mine), Some(std::process::id()));
    }

    #[test]
    fn the_writer_removes_the_temporary_files_of_ended_writers_only() {
        let (dir, map) = writable();
        map.put("g/v/.zarray", b"{}").unwrap();
        map.put(".zattrs", b"{}").unwrap();
        let mut ended = std::process::Command::new("true").spawn().unwrap();
        let ended_pid = ended.id();
        ended.wait().unwrap();
        let token = temp_files::random_token;
        let root = map.root().to_path_buf();
        let left = [
            root.join(format!("{TEMP_PREFIX}.zattrs.{ended_pid}.{}", token())),
            root.join(format!("g/v/{TEMP_PREFIX}.zarray.{ended_pid}.{}", token())),
        ];
        fs::hard_link(root.join(".zattrs"), &left[0]).unwrap();
        fs::write(&left[1], b"{").unwrap();
        // Not left over: this process's own, and a name not made by a writer.
        let kept = [
            root.join(format!("g/{}", temp_name(".zattrs", &token()))),
            root.join(format!("{TEMP_PREFIX}notes")),
        ];
        kept.iter().for_each(|p| fs::write(p, b"x").unwrap());
        // Outside the dataset, behind a link to a directory: not this dataset's.
        let outside = dir.path().join("outside");
        fs::create_dir(&outside).unwrap();
        let beyond = outside.join(format!("{TEMP_PREFIX}.zarray.{ended_pid}.{}", token()));
        fs::write(&beyond, b"x").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("linked")).unwrap();

        map.claim_writer().unwrap();
        // The sweep runs on its own thread; dropping the map waits for it.
        drop(map);
        let mut expected = kept.to_vec();
        expected.sort();
        assert_eq!(temporaries_below(&root), expected);
        assert!(beyond.exists());
        assert_eq!(fs::read(root.join(".zattrs")).unwrap(), b"{}");
    }

    /// An object whose name is as long as a file name may be (a chunk of a variable of
    /// many dimensions) is written through a temporary file beside it whose name shortens
    /// it; a killed writer's temporary of it is recognised and removed.
    #[test]
    fn objects_with_long_names_are_written() {
        let (_dir, map) = writable();
        let key = format!("v/{}0", "0.".repeat(127));
        assert_eq!(key.len() - 2, 255);
        map.put(&key, b"chunk").unwrap();
        assert_eq!(map.get(&key).unwrap().as_deref(), Some(&b"chunk"[..]));
        let name = &key[2..];
        let temp = temp_name(name, "0123456789abcdef");
        assert!(temp.len() <= NAME_MAX, "{temp}");
        assert_eq!(temp_writer(&temp), Some(std::process::id()));
        let mut ended = std::process::Command::new("true").spawn().unwrap();
        let ended_pid = ended.id();
        ended.wait().unwrap();
        let left = map.root().join("v").join(temp.replace(
            &format!(".{}.", std::process::id()),
            &format!(".{ended_pid}."),
        ));
        fs::write(&left, b"partial").unwrap();
        assert_eq!(map.search("v").unwrap(), vec![name.to_string()]);
        let root = map.root().to_path_buf();
        map.claim_writer().unwrap();
        drop(map);
        assert!(temporaries_below(&root).is_empty());
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
