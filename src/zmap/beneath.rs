//! Opening names below an open directory without leaving it: the file operations of a
//! directory store ([`super::FileMap`]), made relative to a descriptor of the dataset's root
//! so that a symbolic link inside the dataset cannot lead a privileged reader or writer to a
//! file elsewhere.
//!
//! Reads use `openat2(RESOLVE_BENEATH)` (Linux 5.6 and later): the kernel follows symbolic
//! links that stay below the root and fails the open of one that leads out. Where openat2 is
//! missing, the names are opened one at a time without following links, and a path that meets
//! a link is resolved as a whole and checked to lie below the root (then opened by its
//! resolved names, again without following links, so that a link put in meanwhile fails the
//! open rather than leading elsewhere).

use std::ffi::{CStr, CString, OsString};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Component, Path};
use std::sync::OnceLock;

/// Why a name could not be opened below the root.
#[derive(Debug)]
pub(super) enum Miss {
    /// Nothing is there (a name on the way is missing, or is a file).
    Absent,
    /// The way passes through a symbolic link that the open did not follow (one leading out
    /// of the root, an absolute one, or any one where links are not followed).
    Link,
    /// Another failure.
    Io(io::Error),
}

impl From<io::Error> for Miss {
    fn from(e: io::Error) -> Self {
        Miss::Io(e)
    }
}

/// A name as the system calls take it.
pub(super) fn c_name(name: &[u8]) -> io::Result<CString> {
    CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))
}

/// How many opens ([`open_at`], [`open_path`], openat2) this thread has made: tests count
/// them to see that the work of a walk does not grow with the depth of what it walks.
#[cfg(test)]
pub(super) fn opens_so_far() -> u64 {
    OPENS.with(std::cell::Cell::get)
}

/// How many names the opens of this thread have handed the kernel to walk (`a/b/c`: three):
/// tests count them to see that reading a tree does not walk it again from its root for
/// every object.
#[cfg(test)]
pub(crate) fn names_walked_so_far() -> u64 {
    NAMES_WALKED.with(std::cell::Cell::get)
}

#[cfg(test)]
thread_local! {
    static OPENS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    static NAMES_WALKED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Counts an open of `path` (see [`opens_so_far`] and [`names_walked_so_far`]).
fn count_open(path: &CStr) {
    #[cfg(test)]
    {
        let names = path.to_bytes().split(|&b| b == b'/').count() as u64;
        OPENS.with(|n| n.set(n.get() + 1));
        NAMES_WALKED.with(|n| n.set(n.get() + names));
    }
    #[cfg(not(test))]
    let _ = path;
}

/// `openat(dir, name, flags)`, close-on-exec.
pub(super) fn open_at(dir: BorrowedFd<'_>, name: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    count_open(name);
    // SAFETY: an open descriptor and a NUL-terminated name.
    let fd = unsafe { libc::openat(dir.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `open(path, flags)`, close-on-exec.
pub(super) fn open_path(path: &CStr, flags: libc::c_int) -> io::Result<OwnedFd> {
    count_open(path);
    // SAFETY: a NUL-terminated path.
    let fd = unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just opened and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Device and inode of the file open as `fd` (any descriptor, `O_PATH` ones included).
pub(super) fn identity(fd: BorrowedFd<'_>) -> io::Result<(u64, u64)> {
    let st = fstat(fd)?;
    Ok((st.st_dev, st.st_ino))
}

fn fstat(fd: BorrowedFd<'_>) -> io::Result<libc::stat64> {
    let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: an open descriptor and a buffer fstat fills when it returns 0.
    if unsafe { libc::fstat64(fd.as_raw_fd(), st.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: fstat returned 0.
    Ok(unsafe { st.assume_init() })
}

/// How many names the file open as `fd` has (0 once removed).
pub(super) fn link_count(fd: BorrowedFd<'_>) -> io::Result<u64> {
    Ok(fstat(fd)?.st_nlink)
}

/// Whether `name` in `dir` is a symbolic link.
pub(super) fn is_link_at(dir: BorrowedFd<'_>, name: &CStr) -> bool {
    let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: an open descriptor, a NUL-terminated name and a buffer fstatat fills when it
    // returns 0.
    let rc = unsafe {
        libc::fstatat64(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    // SAFETY: fstatat returned 0.
    rc == 0 && unsafe { st.assume_init() }.st_mode & libc::S_IFMT == libc::S_IFLNK
}

/// Whether this kernel has openat2 (Linux 5.6) and lets this process use it (an old seccomp
/// profile of a container runtime answers `EPERM` to system calls it does not know).
fn has_openat2() -> bool {
    static HAS: OnceLock<bool> = OnceLock::new();
    *HAS.get_or_init(|| match openat2(None, c"/", libc::O_PATH, 0) {
        Ok(_) => true,
        Err(e) => !matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM)),
    })
}

fn openat2(
    dir: Option<BorrowedFd<'_>>,
    name: &CStr,
    flags: libc::c_int,
    resolve: u64,
) -> io::Result<OwnedFd> {
    count_open(name);
    // SAFETY: open_how is plain data; all-zero is a valid value, its fields are set below.
    let mut how: libc::open_how = unsafe { std::mem::zeroed() };
    how.flags = (flags | libc::O_CLOEXEC) as u64;
    how.resolve = resolve;
    let dir = dir.map_or(libc::AT_FDCWD, |d| d.as_raw_fd());
    // SAFETY: a directory descriptor (or AT_FDCWD), a NUL-terminated name, and `how` with
    // its size, all of which outlive the call.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_openat2,
            dir,
            name.as_ptr(),
            &how as *const libc::open_how,
            std::mem::size_of::<libc::open_how>(),
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new descriptor (it fits an int) that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) })
}

/// Opens `rel` (relative, with plain names only) below the directory `root` with `flags`,
/// following symbolic links only as far as they stay below `root` where the kernel can
/// enforce that; see [`Miss`] for what else can happen.
pub(super) fn open_below(
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: libc::c_int,
) -> Result<OwnedFd, Miss> {
    if !has_openat2() {
        return open_without_links(root, rel, flags);
    }
    let name = c_name(rel.as_os_str().as_bytes())?;
    match openat2(Some(root), &name, flags, libc::RESOLVE_BENEATH) {
        Ok(fd) => Ok(fd),
        Err(e) => Err(match e.raw_os_error() {
            Some(libc::ENOENT | libc::ENOTDIR) => Miss::Absent,
            // EXDEV: the way leaves `root` (an absolute link or one that climbs out). EAGAIN:
            // a rename meanwhile kept the kernel from telling; the careful way decides.
            Some(libc::EXDEV | libc::EAGAIN) => Miss::Link,
            _ => Miss::Io(e),
        }),
    }
}

/// Opens the directory `rel` (relative, with plain names only) below `root` (`O_PATH`),
/// following no symbolic link, in one system call: `openat2(RESOLVE_BENEATH |
/// RESOLVE_NO_SYMLINKS)`, the kernel walking the names. `None` where openat2 is missing, or
/// where a rename meanwhile kept the kernel from telling (`EAGAIN`): the caller walks the
/// names one at a time instead. A link on the way (the last name included) is
/// [`Miss::Link`]; a missing name, or a file on the way, [`Miss::Absent`].
///
/// One call rather than one per name: a directory store reaches an object's directory for
/// every write, and with groups nested thousands deep, opening each name on the way made
/// writing a dataset cost the square of its depth in system calls.
pub(super) fn open_dir_without_links(
    root: BorrowedFd<'_>,
    rel: &Path,
) -> Option<Result<OwnedFd, Miss>> {
    if !has_openat2() {
        return None;
    }
    let name = match c_name(rel.as_os_str().as_bytes()) {
        Ok(name) => name,
        Err(e) => return Some(Err(Miss::Io(e))),
    };
    let flags = libc::O_PATH | libc::O_DIRECTORY;
    let resolve = libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS;
    Some(match openat2(Some(root), &name, flags, resolve) {
        Ok(fd) => Ok(fd),
        Err(e) => match e.raw_os_error() {
            Some(libc::ENOENT | libc::ENOTDIR) => Err(Miss::Absent),
            // ELOOP: a link, not followed. EXDEV: plain names cannot leave `root`; a link
            // made that so.
            Some(libc::ELOOP | libc::EXDEV) => Err(Miss::Link),
            Some(libc::EAGAIN) => return None,
            _ => Err(Miss::Io(e)),
        },
    })
}

/// Opens `rel` below `root` one name at a time, following no symbolic link: a link on the
/// way (the last name included) is [`Miss::Link`].
pub(super) fn open_without_links(
    root: BorrowedFd<'_>,
    rel: &Path,
    flags: libc::c_int,
) -> Result<OwnedFd, Miss> {
    let names: Vec<&[u8]> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.as_bytes()),
            _ => None,
        })
        .collect();
    let Some((last, dirs)) = names.split_last() else {
        return Ok(open_at(root, c".", flags)?);
    };
    let mut dir: Option<OwnedFd> = None;
    for name in dirs {
        let c = c_name(name)?;
        let at = dir.as_ref().map_or(root, |d| d.as_fd());
        let flags = libc::O_PATH | libc::O_DIRECTORY | libc::O_NOFOLLOW;
        match open_at(at, &c, flags) {
            Ok(fd) => dir = Some(fd),
            Err(e) => return Err(missed(at, &c, e)),
        }
    }
    let at = dir.as_ref().map_or(root, |d| d.as_fd());
    let c = c_name(last)?;
    match open_at(at, &c, flags | libc::O_NOFOLLOW) {
        // With O_PATH, O_NOFOLLOW opens the link itself.
        Ok(fd) if fstat(fd.as_fd())?.st_mode & libc::S_IFMT == libc::S_IFLNK => Err(Miss::Link),
        Ok(fd) => Ok(fd),
        Err(e) => Err(missed(at, &c, e)),
    }
}

/// What the failure `e` to open `name` in `dir` without following links means.
fn missed(dir: BorrowedFd<'_>, name: &CStr, e: io::Error) -> Miss {
    match e.raw_os_error() {
        // A link not followed fails as ELOOP, or as ENOTDIR where a directory is asked for;
        // ENOTDIR is also a plain file on the way, which is no object.
        Some(libc::ELOOP | libc::ENOTDIR) if is_link_at(dir, name) => Miss::Link,
        Some(libc::ENOENT | libc::ENOTDIR) => Miss::Absent,
        _ => Miss::Io(e),
    }
}

/// The names in the directory open as `dir` (`.` and `..` left out).
pub(super) fn entry_names(dir: OwnedFd) -> io::Result<Vec<OsString>> {
    Ok(typed_entries(dir)?
        .into_iter()
        .map(|(name, _)| name)
        .collect())
}

/// The entries of the directory open as `dir` (`.` and `..` left out), each with its type as
/// `readdir` gives it (`libc::DT_DIR`, `libc::DT_REG`, ..., or `libc::DT_UNKNOWN` on a file
/// system that does not tell).
pub(super) fn typed_entries(dir: OwnedFd) -> io::Result<Vec<(OsString, u8)>> {
    use std::os::fd::IntoRawFd;
    let fd = dir.into_raw_fd();
    // SAFETY: fdopendir takes over the descriptor (closedir closes it) when it succeeds.
    let stream = unsafe { libc::fdopendir(fd) };
    if stream.is_null() {
        let e = io::Error::last_os_error();
        // SAFETY: the descriptor is still ours, and not used after this.
        unsafe { libc::close(fd) };
        return Err(e);
    }
    let mut entries = Vec::new();
    let result = loop {
        // SAFETY: errno is this thread's; readdir sets it only on failure.
        unsafe { *libc::__errno_location() = 0 };
        // SAFETY: `stream` is an open directory stream.
        let entry = unsafe { libc::readdir64(stream) };
        if entry.is_null() {
            let e = io::Error::last_os_error();
            break match e.raw_os_error() {
                Some(0) => Ok(()),
                _ => Err(e),
            };
        }
        // SAFETY: readdir returned an entry whose name is NUL-terminated, valid until the
        // next readdir on `stream`; it is copied at once.
        let (name, kind) = unsafe {
            (
                CStr::from_ptr((*entry).d_name.as_ptr()).to_bytes(),
                (*entry).d_type,
            )
        };
        if name != b"." && name != b".." {
            entries.push((OsString::from_vec(name.to_vec()), kind));
        }
    };
    // SAFETY: `stream` is open and not used after this.
    unsafe { libc::closedir(stream) };
    result.map(|()| entries)
}

/// Removes `name` in the directory open as `dir`: a file or symbolic link (never followed),
/// or a directory with everything in it.
pub(super) fn remove_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<()> {
    // SAFETY: an open descriptor and a NUL-terminated name.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) } == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() != Some(libc::EISDIR) {
        return Err(e);
    }
    let sub = open_at(
        dir,
        name,
        libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW,
    )?;
    let names = entry_names(sub.try_clone()?)?;
    for entry in names {
        let c = c_name(entry.as_bytes())?;
        match remove_at(sub.as_fd(), &c) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
    }
    drop(sub);
    // SAFETY: as above.
    if unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Removes the directory open as `dir`, reached from `root` by `names`, and each of its
/// parents in turn while it is empty, up to (not including) `root`. The parent is found
/// through `..` of the directory itself, and a name is removed only while it still names the
/// directory it was reached as: a directory moved meanwhile stops the walk.
pub(super) fn remove_empty_dirs(root: BorrowedFd<'_>, dir: BorrowedFd<'_>, names: &[&str]) {
    let Ok(root_id) = identity(root) else {
        return;
    };
    let mut up: Option<OwnedFd> = None;
    for name in names.iter().rev() {
        let dir = up.as_ref().map_or(dir, |d| d.as_fd());
        let Ok(id) = identity(dir) else {
            return;
        };
        if id == root_id {
            return;
        }
        let Ok(parent) = open_at(dir, c"..", libc::O_PATH | libc::O_DIRECTORY) else {
            return;
        };
        let Ok(c) = c_name(name.as_bytes()) else {
            return;
        };
        let same = open_at(parent.as_fd(), &c, libc::O_PATH | libc::O_NOFOLLOW)
            .and_then(|fd| identity(fd.as_fd()))
            .is_ok_and(|named| named == id);
        // Fails (harmlessly) as soon as a directory still has entries.
        // SAFETY: an open descriptor and a NUL-terminated name.
        if !same
            || unsafe { libc::unlinkat(parent.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) } != 0
        {
            return;
        }
        up = Some(parent);
    }
}

/// Directories opened lately, by their paths, for opening the next directory from the
/// nearest of them rather than from the top: a set of writes in key order then walks each
/// directory's name about once, where walking every path from the top costs the square of
/// the nesting depth (groups nested thousands deep made writing a dataset take minutes).
/// Only the [`NearDirs::KEPT`] most recent stay open: in key order these are the parents a
/// next key shares, and a path thousands deep would otherwise hold thousands of
/// descriptors.
///
/// A directory is reached as it was when it was opened: callers keep one only for one set
/// of operations, as long as a path opened at the start of the set would be used anyway.
#[derive(Default)]
pub(super) struct NearDirs {
    /// The paths (as bytes: comparing `Path`s name by name costs more than the system calls
    /// saved) and their directories, least recent first.
    kept: Vec<(Vec<u8>, std::sync::Arc<OwnedFd>)>,
}

impl NearDirs {
    /// How many directories stay open.
    const KEPT: usize = 16;

    /// The kept directory deepest above `path` (or at it), and the rest of `path` below it
    /// (empty at it).
    pub(super) fn nearest<'p>(
        &self,
        path: &'p Path,
    ) -> Option<(std::sync::Arc<OwnedFd>, &'p Path)> {
        let bytes = path.as_os_str().as_bytes();
        self.kept
            .iter()
            .filter_map(|(at, dir)| Some((dir, below(bytes, at)?)))
            .min_by_key(|(_, rest)| rest.len())
            .map(|(dir, rest)| {
                (
                    std::sync::Arc::clone(dir),
                    Path::new(std::ffi::OsStr::from_bytes(rest)),
                )
            })
    }

    /// Keeps `dir`, open as `path`, in place of the least recent one.
    pub(super) fn keep(&mut self, path: &Path, dir: &std::sync::Arc<OwnedFd>) {
        let bytes = path.as_os_str().as_bytes();
        self.kept.retain(|(at, _)| at != bytes);
        if self.kept.len() == Self::KEPT {
            self.kept.remove(0);
        }
        self.kept.push((bytes.to_vec(), std::sync::Arc::clone(dir)));
    }
}

/// The rest of the path `path` below `at` (empty: `at` itself), when `at` is it or one of
/// the directories on its way; both as written, without `.` or doubled slashes.
fn below<'p>(path: &'p [u8], at: &[u8]) -> Option<&'p [u8]> {
    let rest = path.strip_prefix(at)?;
    match rest {
        [] => Some(rest),
        [b'/', rest @ ..] if !at.is_empty() => Some(rest),
        _ if at.is_empty() && !path.starts_with(b"/") => Some(rest),
        _ => None,
    }
}
