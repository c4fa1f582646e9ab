//! New files made beside the files they replace, in directories that other users may write
//! to (a dataset of theirs that root writes, a directory of theirs that receives a copy).
//!
//! Such a file is created exclusively (`O_CREAT | O_EXCL | O_NOFOLLOW`): a name that exists,
//! a symbolic link included, is never opened, so nothing planted at the name can make the
//! writer write into another file. Its name ends in a random token, so that no one can plant
//! anything at it beforehand; a name taken all the same is tried again with another token.
//! Owner and mode are then set on the descriptor of the file made, never by name.

use std::borrow::Cow;
use std::ffi::{CStr, CString, OsStr};
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// How many random names are tried before giving up on a directory where each one exists
/// (which does not happen by chance: 2^64 tokens).
const ATTEMPTS: usize = 8;

/// Length of [`random_token`]'s tokens.
pub(crate) const TOKEN_LEN: usize = 16;

/// A random token for a file name: [`TOKEN_LEN`] lowercase hexadecimal digits.
pub(crate) fn random_token() -> String {
    let mut bytes = [0u8; TOKEN_LEN / 2];
    fill_random(&mut bytes);
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether `s` (text, or the bytes of a file name) is a token as [`random_token`] makes them.
pub(crate) fn is_token(s: impl AsRef<[u8]>) -> bool {
    let s = s.as_ref();
    s.len() == TOKEN_LEN && s.iter().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The longest file name Linux file systems take, in bytes (`NAME_MAX`).
pub(crate) const NAME_MAX: usize = 255;

/// The most bytes a hidden sibling's name adds to the part it copies from the name it serves
/// (see [`name_stem`]): a fixed part of at most 15 bytes (`.` and `.nczarrfs-get.` for
/// `get -o`, `.` and `.nczarrfs-tmp.` for a zip archive's rewrite, `.nczarrfs-tmp.` and `.`
/// for an object file of a directory store), a process number of at most 10 digits, a dot
/// and a token. A staging directory (`.NAME.nczarrfs-PID.TOKEN`) has 4 bytes fewer, room for
/// the `.old` it is named with while it replaces an old dataset.
const SIBLING_OVERHEAD: usize = 15 + 10 + 1 + TOKEN_LEN;

/// The most bytes of a hidden sibling's name that come from the name it serves.
const STEM_MAX: usize = NAME_MAX - SIBLING_OVERHEAD;

/// How many hexadecimal digits of the whole name's hash end a shortened stem.
const STEM_HASH_LEN: usize = 16;

/// The part of the file name `name` that the names of its hidden siblings (a staging
/// directory, a temporary file, see [`create_in`]) copy, so that they stay within
/// [`NAME_MAX`] whatever the name's length: `name` itself when it is short enough, else its
/// first bytes (whole characters where they are UTF-8), `~` and a hash of the whole name.
///
/// The sweeps that remove what a killed writer left recognise its siblings by this stem, so
/// two long names that begin alike are still told apart by their hashes: a sweep for one of
/// them never takes the other's siblings. Only names made to collide (the hash is not
/// cryptographic) would meet; the sweeps remove nothing of a process that is still running
/// all the same, so at worst a sweep removes the leftovers of a killed writer of another
/// destination, which its own sweep would have removed too.
pub(crate) fn name_stem(name: &OsStr) -> Cow<'_, OsStr> {
    use std::os::unix::ffi::OsStringExt;
    match shortened(name.as_bytes()) {
        None => Cow::Borrowed(name),
        Some(stem) => Cow::Owned(std::ffi::OsString::from_vec(stem)),
    }
}

/// [`name_stem`] of a name that is UTF-8 (an object's in a store): the stem is UTF-8 too.
pub(crate) fn key_name_stem(name: &str) -> Cow<'_, str> {
    match shortened(name.as_bytes()) {
        None => Cow::Borrowed(name),
        Some(stem) => Cow::Owned(String::from_utf8_lossy(&stem).into_owned()),
    }
}

/// The stem of `name` as [`name_stem`] makes it, `None` when it is `name` itself.
fn shortened(name: &[u8]) -> Option<Vec<u8>> {
    if name.len() <= STEM_MAX {
        return None;
    }
    let room = STEM_MAX - 1 - STEM_HASH_LEN;
    // A character is kept whole or left out; bytes that are no UTF-8 count one by one.
    let mut kept = 0;
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            if kept + c.len_utf8() > room {
                return Some(with_hash(&name[..kept], name));
            }
            kept += c.len_utf8();
        }
        kept = (kept + chunk.invalid().len()).min(room);
    }
    Some(with_hash(&name[..kept], name))
}

/// `start`, `~` and the hash of `whole`.
fn with_hash(start: &[u8], whole: &[u8]) -> Vec<u8> {
    // FNV-1a: the same in every version, as the names of leftovers must be recognised by
    // the next writer.
    let hash = whole.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut stem = start.to_vec();
    stem.extend_from_slice(format!("~{hash:0width$x}", width = STEM_HASH_LEN).as_bytes());
    stem
}

/// Fills `bytes` from the kernel's random source, and only if that is unavailable (a kernel
/// older than 3.17 and no /dev/urandom) from the clock and a counter, which still makes
/// names that differ.
fn fill_random(bytes: &mut [u8]) {
    // SAFETY: getrandom writes at most `bytes.len()` bytes into `bytes`.
    let n = unsafe { libc::getrandom(bytes.as_mut_ptr().cast(), bytes.len(), 0) };
    if usize::try_from(n).is_ok_and(|n| n == bytes.len()) {
        return;
    }
    if File::open("/dev/urandom")
        .and_then(|mut f| io::Read::read_exact(&mut f, bytes))
        .is_ok()
    {
        return;
    }
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    for (byte, from) in bytes
        .iter_mut()
        .zip(hasher.finish().to_le_bytes().iter().cycle())
    {
        *byte = *from;
    }
}

/// Creates a new file, readable and writable, in `dir`, named `name(token)` for a fresh
/// random token; returns it and its path.
pub(crate) fn create_in<N: AsRef<Path>>(
    dir: &Path,
    name: impl Fn(&str) -> N,
) -> io::Result<(File, PathBuf)> {
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let path = dir.join(name(&random_token()));
        match std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .mode(0o666)
            .open(&path)
        {
            Ok(file) => return Ok((file, path)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
            Err(e) => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::ErrorKind::AlreadyExists.into()))
}

/// Like [`create_in`], in the directory open as `dir` (so that no name on the way to it is
/// looked up again); returns the file and its name.
pub(crate) fn create_at(
    dir: BorrowedFd<'_>,
    name: impl Fn(&str) -> String,
) -> io::Result<(File, String)> {
    let mut last = None;
    for _ in 0..ATTEMPTS {
        let file_name = name(&random_token());
        let c_name = CString::new(file_name.as_bytes()).map_err(io::Error::other)?;
        let flags =
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: an open directory descriptor and a NUL-terminated name.
        let fd = unsafe { libc::openat(dir.as_raw_fd(), c_name.as_ptr(), flags, 0o666) };
        if fd >= 0 {
            // SAFETY: `fd` was just opened and nothing else owns it.
            return Ok((unsafe { File::from_raw_fd(fd) }, file_name));
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::AlreadyExists => last = Some(e),
            _ => return Err(e),
        }
    }
    Err(last.unwrap_or_else(|| io::ErrorKind::AlreadyExists.into()))
}

/// The mode, owner and group of a file that a new one replaces.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ownership {
    /// Its permission bits.
    pub mode: u32,
    /// Its owner.
    pub uid: u32,
    /// Its group.
    pub gid: u32,
}

impl From<&std::fs::Metadata> for Ownership {
    fn from(m: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        Ownership {
            mode: m.mode(),
            uid: m.uid(),
            gid: m.gid(),
        }
    }
}

/// The ownership of the regular file `name` in the directory open as `dir`, if there is one
/// (a symbolic link there is not followed: it is replaced, not written through).
pub(crate) fn ownership_at(dir: BorrowedFd<'_>, name: &CStr) -> io::Result<Option<Ownership>> {
    let mut st = std::mem::MaybeUninit::<libc::stat64>::uninit();
    // SAFETY: an open directory descriptor, a NUL-terminated name and a buffer fstatat fills
    // when it returns 0.
    let rc = unsafe {
        libc::fstatat64(
            dir.as_raw_fd(),
            name.as_ptr(),
            st.as_mut_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
        )
    };
    if rc != 0 {
        let e = io::Error::last_os_error();
        return match e.kind() {
            io::ErrorKind::NotFound => Ok(None),
            _ => Err(e),
        };
    }
    // SAFETY: fstatat returned 0, so it filled the buffer.
    let st = unsafe { st.assume_init() };
    Ok(
        (st.st_mode & libc::S_IFMT == libc::S_IFREG).then_some(Ownership {
            mode: st.st_mode,
            uid: st.st_uid,
            gid: st.st_gid,
        }),
    )
}

/// Gives `file` (one this process has just made) the permission bits of the `old` file it
/// replaces, and its owner and group as far as this user may (root may; others keep the group
/// if they belong to it), as `cp` and Info-ZIP do when they rewrite a file. Set-user-ID,
/// set-group-ID and sticky bits are not carried over: the new content is the writer's, and a
/// file another user linked in from elsewhere must not lend it a set-user-ID bit.
pub(crate) fn keep_mode_and_owner(file: &File, old: Ownership) -> io::Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let new = file.metadata()?;
    if (new.uid(), new.gid()) != (old.uid, old.gid) {
        // An ordinary user cannot give the file away; the file is then theirs, as any file
        // they rewrite by a rename.
        match std::os::unix::fs::fchown(file, Some(old.uid), Some(old.gid)) {
            Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                let _ = std::os::unix::fs::fchown(file, None, Some(old.gid));
            }
            other => other?,
        }
    }
    file.set_permissions(std::fs::Permissions::from_mode(old.mode & 0o777))
}

/// Renames `from` to `to` unless something (a symbolic link included) is at `to`, which is
/// an `AlreadyExists` error. On a filesystem that cannot rename so, a hard link and an
/// unlink do the same; on one without hard links either, `to` is checked first and renamed
/// over, which a name appearing in between defeats.
pub(crate) fn rename_no_replace(from: &Path, to: &Path) -> io::Result<()> {
    let c_from = CString::new(from.as_os_str().as_bytes()).map_err(io::Error::other)?;
    let c_to = CString::new(to.as_os_str().as_bytes()).map_err(io::Error::other)?;
    // SAFETY: NUL-terminated paths relative to the working directory.
    let rc = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            c_from.as_ptr(),
            libc::AT_FDCWD,
            c_to.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if rc == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if !matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
    ) {
        return Err(e);
    }
    match std::fs::hard_link(from, to) {
        Ok(()) => return std::fs::remove_file(from),
        Err(e) if !matches!(e.raw_os_error(), Some(libc::EPERM | libc::EOPNOTSUPP)) => {
            return Err(e)
        }
        Err(_) => {}
    }
    match std::fs::symlink_metadata(to) {
        Ok(_) => Err(io::ErrorKind::AlreadyExists.into()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => std::fs::rename(from, to),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn tokens_are_random_hex() {
        let (a, b) = (random_token(), random_token());
        assert!(is_token(&a) && is_token(&b), "{a} {b}");
        assert_ne!(a, b);
        assert!(!is_token("old") && !is_token(a.to_uppercase()) && !is_token(&a[1..]));
    }

    /// The longest sibling names: `.NAME.nczarrfs-tmp.PID.TOKEN` (and so the shorter
    /// staging names with `.old`) with the longest process number.
    fn longest_sibling(stem: &[u8]) -> usize {
        b".".len()
            + stem.len()
            + b".nczarrfs-tmp.".len()
            + u32::MAX.to_string().len()
            + 1
            + TOKEN_LEN
    }

    #[test]
    fn stems_of_names_up_to_name_max_fit_beside_them() {
        for len in [1, STEM_MAX, STEM_MAX + 1, 250, NAME_MAX] {
            let name = vec![b'a'; len];
            let stem = name_stem(OsStr::from_bytes(&name));
            assert!(longest_sibling(stem.as_bytes()) <= NAME_MAX, "{len}");
            match len <= STEM_MAX {
                true => assert_eq!(stem.as_bytes(), &name[..]),
                false => {
                    let (start, hash) = stem.as_bytes().split_at(stem.len() - STEM_HASH_LEN - 1);
                    assert!(name.starts_with(start) && start.len() > 150, "{len}");
                    assert!(hash[0] == b'~' && hash[1..].iter().all(u8::is_ascii_hexdigit));
                }
            }
        }
    }

    /// Two long names that share their first 200 bytes get different stems; the same name
    /// always gets the same one.
    #[test]
    fn long_names_that_begin_alike_have_different_stems() {
        let shared = "s".repeat(200);
        let (a, b) = (
            format!("{shared}{}", "a".repeat(50)),
            format!("{shared}{}", "b".repeat(50)),
        );
        assert_ne!(key_name_stem(&a), key_name_stem(&b));
        assert_eq!(key_name_stem(&a), key_name_stem(&a.clone()));
        assert_eq!(
            name_stem(OsStr::new(&a)).as_bytes(),
            key_name_stem(&a).as_bytes()
        );
    }

    /// A long name is cut between characters (a 2-byte é never split), and bytes that are no
    /// UTF-8 are cut anywhere.
    #[test]
    fn stems_keep_whole_characters() {
        for pad in 0..2 {
            let name = format!("{}{}", "x".repeat(pad), "é".repeat(125));
            let stem = key_name_stem(&name);
            let (start, _hash) = stem.rsplit_once('~').unwrap();
            assert!(name.starts_with(start) && start.ends_with('é'), "{stem}");
            assert!(longest_sibling(stem.as_bytes()) <= NAME_MAX);
        }
        let raw = [b'\xff'; 250];
        let stem = name_stem(OsStr::from_bytes(&raw));
        assert_eq!(stem.len(), STEM_MAX);
        assert!(stem
            .as_bytes()
            .starts_with(&raw[..STEM_MAX - STEM_HASH_LEN - 1]));
    }

    /// A planted symbolic link, whatever its name, is never opened: its target stays as it
    /// was, and the new file is another one.
    #[test]
    fn names_taken_are_never_opened() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let e = create_in(dir.path(), |_| "victim".to_string()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        let (mut file, path) = create_in(dir.path(), |t| format!("new.{t}")).unwrap();
        io::Write::write_all(&mut file, b"new").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(&path).unwrap(), b"new");

        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&victim, &link).unwrap();
        let d = File::open(dir.path()).unwrap();
        let e = create_at(d.as_fd(), |_| "link".to_string()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
    }

    #[test]
    fn rename_no_replace_keeps_what_is_there() {
        let dir = tempfile::tempdir().unwrap();
        let (from, to) = (dir.path().join("from"), dir.path().join("to"));
        std::fs::write(&from, b"new").unwrap();
        std::os::unix::fs::symlink("/nonexistent", &to).unwrap();
        let e = rename_no_replace(&from, &to).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists, "{e}");
        std::fs::remove_file(&to).unwrap();
        rename_no_replace(&from, &to).unwrap();
        assert_eq!(std::fs::read(&to).unwrap(), b"new");
        assert!(!from.exists());
    }

    #[test]
    fn set_id_bits_are_not_carried_over() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let (file, path) = create_in(dir.path(), |t| t.to_string()).unwrap();
        let old = Ownership {
            mode: 0o4750,
            uid: file
                .metadata()
                .map(|m| std::os::unix::fs::MetadataExt::uid(&m))
                .unwrap(),
            gid: file
                .metadata()
                .map(|m| std::os::unix::fs::MetadataExt::gid(&m))
                .unwrap(),
        };
        keep_mode_and_owner(&file, old).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o7777, 0o750);
    }
}
