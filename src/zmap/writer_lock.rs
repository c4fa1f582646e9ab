//! The advisory locks (`flock`) that make a process the only writer of a local dataset.
//!
//! A writer (a `rw` mount, `put`, or `gen`/`copy` replacing a dataset) locks the dataset's
//! directory or zip archive exclusively. A pure Zarr group can also be written as a dataset
//! of its own (`pz.zarr/sub`), so a writer of a directory also takes a shared lock on each
//! directory above it that holds Zarr group metadata: a writer of a group then excludes the
//! writers of every group above it (their exclusive lock conflicts with its shared one) and
//! below it (their shared lock on it conflicts with its exclusive one), while writers of
//! disjoint groups share their common ancestors.
//!
//! A lock is on the directory or file itself, which a replacement by rename swaps away: the
//! lock is retaken when the path no longer leads to what was locked, and the writer checks
//! before each metadata store that its path still leads to the locked directory (see
//! [`super::FileMap`]).
//!
//! A `rw` mount's daemon lets go of its lock only after the kernel has unmounted it and the
//! daemon has stored the last changes; `fusermount3 -u` returns before that. A writer that
//! finds the lock held by a daemon whose FUSE connection is gone waits for it (at most
//! [`GONE_MOUNT_WAIT`]), so that `fusermount3 -u M && nczarrfs put …` works every time; a
//! writer that is still live is refused at once. A daemon's connection is told by the
//! connection's control directory it holds open, not by the connection's number, which the
//! kernel gives to the next mount (see [`serves_no_mount`]).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// The longest a writer waits for the lock of a `rw` mount's daemon whose mount is gone and
/// which is still storing its last changes.
pub const GONE_MOUNT_WAIT: Duration = Duration::from_secs(30);

/// How often a waiting writer tries the lock again.
const RETRY_EVERY: Duration = Duration::from_millis(10);

/// How many times in a row a lock whose holder /proc/locks does not show is tried.
const UNSEEN_TRIES: u32 = 10;

/// The files whose presence makes a directory a Zarr group (or a dataset's root).
const GROUP_METADATA: [&str; 4] = [".zgroup", "zarr.json", ".zmetadata", ".nczarr"];

/// The locks of one writer of the dataset at a path, held until dropped.
#[derive(Debug)]
pub struct WriterLock {
    /// The dataset's path, for messages.
    path: PathBuf,
    /// The dataset's directory or archive, locked exclusively.
    node: File,
    /// The Zarr group directories above it, locked shared.
    _ancestors: Vec<File>,
}

/// A device and inode number: what a path leads to.
pub type Identity = (u64, u64);

impl WriterLock {
    /// Locks the dataset at `path` (a directory or a zip archive, reached through symbolic
    /// links) for this process, refusing ([`Error::Busy`]) while another writer of it, or of a
    /// Zarr group above or below it, holds its lock.
    pub fn acquire(path: &Path) -> Result<WriterLock> {
        // A rename may swap the dataset between its open and its lock; the lock then is on
        // what is no longer the dataset: retake it on what is there now.
        let node = loop {
            let file = File::open(path).map_err(|e| Error::io(path, e))?;
            lock(&file, path, Mode::Exclusive)?;
            let locked = identity_of(&file, path)?;
            match std::fs::metadata(path) {
                Ok(now) if (now.dev(), now.ino()) == locked => break file,
                Ok(_) => continue,
                Err(e) => return Err(Error::io(path, e)),
            }
        };
        let mut ancestors = Vec::new();
        if node.metadata().is_ok_and(|m| m.is_dir()) {
            for dir in group_ancestors(path) {
                // A group above that cannot be opened (no read permission) cannot be written
                // by this user either.
                let Ok(file) = File::open(&dir) else {
                    continue;
                };
                lock(&file, &dir, Mode::SharedBelow)?;
                ancestors.push(file);
            }
        }
        Ok(WriterLock {
            path: path.to_path_buf(),
            node,
            _ancestors: ancestors,
        })
    }

    /// What the lock is on: the dataset's path led there when it was locked.
    pub fn identity(&self) -> Result<Identity> {
        identity_of(&self.node, &self.path)
    }

    /// The locked directory or archive, open.
    pub fn file(&self) -> &File {
        &self.node
    }
}

/// The Zarr group directories above `path` (which may be relative or lead through links),
/// nearest first, up to the first directory that is not a group.
fn group_ancestors(path: &Path) -> Vec<PathBuf> {
    let Ok(real) = std::fs::canonicalize(path) else {
        return Vec::new();
    };
    real.ancestors()
        .skip(1)
        .take_while(|dir| GROUP_METADATA.iter().any(|m| dir.join(m).exists()))
        .map(Path::to_path_buf)
        .collect()
}

fn identity_of(file: &File, path: &Path) -> Result<Identity> {
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    Ok((meta.dev(), meta.ino()))
}

/// Which lock, and what a conflict means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// The dataset's own lock.
    Exclusive,
    /// The lock on a group above the dataset.
    SharedBelow,
}

/// Locks `file` (at `path`, which messages name) as `mode` says, waiting while the only
/// holders are daemons whose mount is gone (see the module documentation).
pub(super) fn lock(file: &File, path: &Path, mode: Mode) -> Result<()> {
    let operation = match mode {
        Mode::Exclusive => libc::LOCK_EX,
        Mode::SharedBelow => libc::LOCK_SH,
    } | libc::LOCK_NB;
    let mut deadline = None;
    let mut unseen = 0;
    loop {
        // SAFETY: flock only reads the descriptor, which `file` owns and keeps open.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        if e.raw_os_error() != Some(libc::EWOULDBLOCK) {
            return Err(Error::io(path, e));
        }
        let holders = identity_of(file, path).map_or_else(|_| Vec::new(), lock_holders);
        // No holder seen: it let go just now (try again), or it is out of sight (another PID
        // namespace, no /proc), which a few tries tell.
        unseen = if holders.is_empty() { unseen + 1 } else { 0 };
        let unmounted = unseen <= UNSEEN_TRIES && holders.iter().all(|&pid| mount_is_gone(pid));
        let deadline = *deadline.get_or_insert_with(|| Instant::now() + GONE_MOUNT_WAIT);
        if !unmounted || Instant::now() >= deadline {
            return Err(busy(path, mode, unmounted));
        }
        std::thread::sleep(RETRY_EVERY);
    }
}

/// The refusal of a lock held by another writer.
fn busy(path: &Path, mode: Mode, unmounted: bool) -> Error {
    let what = match mode {
        Mode::Exclusive => "another process is writing this dataset",
        Mode::SharedBelow => {
            "another process is writing this Zarr group, which holds the dataset (or group) \
             to be written"
        }
    };
    let who = match unmounted {
        true => format!(
            "the daemon of a rw mount that is unmounted, still storing its last changes after \
             {} s",
            GONE_MOUNT_WAIT.as_secs()
        ),
        false => "a rw mount, also one detached by `umount -l` that still serves an open \
                  file, a put, or a gen or copy replacing it"
            .into(),
    };
    Error::Busy(format!(
        "{}: {what} ({who}); two writers would each store the metadata as they see it and \
         lose the other's records",
        path.display()
    ))
}

/// The processes holding a `flock` on the file `identity`, from /proc/locks (empty when it
/// cannot be read, or the holder is in another PID namespace).
fn lock_holders(identity: Identity) -> Vec<libc::pid_t> {
    let Ok(locks) = std::fs::read_to_string("/proc/locks") else {
        return Vec::new();
    };
    parse_lock_holders(&locks, identity)
}

/// [`lock_holders`] from the text of /proc/locks: lines such as
/// `1: FLOCK  ADVISORY  WRITE 18706 fe:00:10357476 0 EOF`, the device's major and minor in
/// hexadecimal, the inode in decimal.
fn parse_lock_holders(locks: &str, (dev, ino): Identity) -> Vec<libc::pid_t> {
    let want = format!("{:02x}:{:02x}:{ino}", libc::major(dev), libc::minor(dev));
    locks
        .lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // A blocked request (`1: -> FLOCK …`) holds nothing.
            let at = fields.iter().position(|f| *f == "FLOCK")?;
            (fields.get(at - 1) != Some(&"->") && fields.get(at + 4) == Some(&want.as_str()))
                .then(|| fields.get(at + 3)?.parse().ok())
                .flatten()
        })
        .filter(|pid| *pid > 0)
        .collect()
}

/// Where the kernel's FUSE control filesystem (fusectl) shows each FUSE connection as a
/// directory named by its number, from its first mount until its last one is gone.
pub const FUSE_CONNECTIONS: &str = "/sys/fs/fuse/connections";

/// Whether `pid` is the daemon of an nczarrfs mount that no longer serves a mount, or a process
/// that is exiting: what holds the lock then is its last flush and exit (see
/// [`serves_no_mount`]).
fn mount_is_gone(pid: libc::pid_t) -> bool {
    let argv = match std::fs::read(format!("/proc/{pid}/cmdline")) {
        Ok(argv) => argv,
        // Gone already: its lock goes with its last file, a moment later.
        Err(e) => return e.kind() == std::io::ErrorKind::NotFound,
    };
    // A process that is exiting has no command line left (nor has a kernel thread, which
    // holds no lock); its files, and the lock, go next.
    if argv.is_empty() {
        return true;
    }
    if !is_mount_daemon(&argv) {
        return false;
    }
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return false;
    };
    let held: Vec<DaemonFd> = fds
        .flatten()
        .filter_map(|fd| {
            let link = std::fs::read_link(fd.path()).ok()?;
            DaemonFd::of(&link, || {
                let info = format!("/proc/{pid}/fdinfo/{}", fd.file_name().to_string_lossy());
                std::fs::read_to_string(info).unwrap_or_default()
            })
        })
        .collect();
    serves_no_mount(&held, connection_is_live)
}

/// A descriptor of a mount daemon that tells whether it still serves a mount.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DaemonFd {
    /// `/dev/fuse`, of the connection numbered as its fdinfo says (`fuse_connection:`, on
    /// recent kernels), if it does.
    Device(Option<u32>),
    /// The directory of its connection under [`FUSE_CONNECTIONS`], which the daemon holds
    /// open; `removed` once the kernel has removed it (`… (deleted)`).
    Control {
        /// Whether the link reads `… (deleted)`.
        removed: bool,
    },
}

impl DaemonFd {
    /// The descriptor whose /proc/PID/fd link is `link`, `fdinfo` reading its fdinfo; `None`
    /// for one that tells nothing of the mount.
    fn of(link: &Path, fdinfo: impl FnOnce() -> String) -> Option<DaemonFd> {
        if link == Path::new("/dev/fuse") {
            return Some(DaemonFd::Device(fuse_connection(&fdinfo())));
        }
        let rest = link
            .as_os_str()
            .as_bytes()
            .strip_prefix(FUSE_CONNECTIONS.as_bytes())?
            .strip_prefix(b"/")?;
        let removed = rest.ends_with(b" (deleted)");
        let name = rest.strip_suffix(b" (deleted)").unwrap_or(rest);
        // Its connection's directory, not a file in it.
        let is_connection = !name.is_empty() && name.iter().all(u8::is_ascii_digit);
        is_connection.then_some(DaemonFd::Control { removed })
    }
}

/// Whether a mount daemon holding the descriptors `held` serves no mount any more, so that
/// what it does now is store its last changes and exit. It does not once it has closed its
/// FUSE device. While it holds the device open, the connection must have ended: its mounts
/// unmounted, a lazily detached one included once its last open file closed.
///
/// The connection's number cannot tell that alone: the kernel gives it to the next mount
/// once the connection has ended, and a writer waiting for the daemon was refused at once
/// as if by a live one when any FUSE mount came up meanwhile. So a daemon holds its
/// connection's directory under [`FUSE_CONNECTIONS`] open, which the kernel removes when
/// the connection ends: that descriptor, never reused, tells. A daemon without it (the
/// control filesystem is not mounted) is judged by the number (`connection_is_live`), which
/// a mount reusing it still fools into a refusal; a number that cannot be read counts as
/// live.
fn serves_no_mount(held: &[DaemonFd], connection_is_live: impl Fn(u32) -> bool) -> bool {
    let devices: Vec<Option<u32>> = held
        .iter()
        .filter_map(|fd| match fd {
            DaemonFd::Device(number) => Some(*number),
            DaemonFd::Control { .. } => None,
        })
        .collect();
    let controls: Vec<bool> = held
        .iter()
        .filter_map(|fd| match fd {
            DaemonFd::Control { removed } => Some(*removed),
            DaemonFd::Device(_) => None,
        })
        .collect();
    if devices.is_empty() {
        return true;
    }
    if !controls.is_empty() {
        return controls.iter().all(|removed| *removed);
    }
    devices
        .iter()
        .all(|number| number.is_some_and(|n| !connection_is_live(n)))
}

/// Whether the command line `argv` (NUL-separated, as /proc/PID/cmdline has it) runs
/// `nczarrfs mount`.
fn is_mount_daemon(argv: &[u8]) -> bool {
    let mut args = argv.split(|&b| b == 0).map(std::ffi::OsStr::from_bytes);
    let program_is_ours = args
        .next()
        .and_then(|a| Path::new(a).file_name())
        .is_some_and(|name| name.as_bytes().starts_with(b"nczarrfs"));
    program_is_ours && args.find(|a| !a.as_bytes().starts_with(b"-")) == Some("mount".as_ref())
}

/// The `fuse_connection:` number of a `/dev/fuse` descriptor's fdinfo text.
fn fuse_connection(fdinfo: &str) -> Option<u32> {
    fdinfo
        .lines()
        .find_map(|line| line.strip_prefix("fuse_connection:"))
        .and_then(|n| n.trim().parse().ok())
}

/// Whether a FUSE connection numbered `number` (the minor device number of its mount) has a
/// mount, which may be a later connection's that took the number: its directory under /sys/fs/fuse/connections, which lives until the last mount of
/// the connection is gone (lazily detached ones included), or, where that control filesystem
/// is not mounted, its device in /proc/self/mountinfo.
fn connection_is_live(number: u32) -> bool {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let fields = |line: &'_ str| -> Option<(String, String, String)> {
        let (mount, fs) = line.split_once(" - ")?;
        let mut mount = mount.split(' ');
        let device = mount.nth(2)?.to_string();
        let point = mount.nth(1)?.to_string();
        Some((device, point, fs.split(' ').next()?.to_string()))
    };
    let control_mounted = mounts
        .lines()
        .filter_map(fields)
        .any(|(_, point, fstype)| point == FUSE_CONNECTIONS && fstype == "fusectl");
    if control_mounted {
        return Path::new(FUSE_CONNECTIONS)
            .join(number.to_string())
            .exists();
    }
    let device = format!("0:{number}");
    mounts
        .lines()
        .filter_map(fields)
        .any(|(dev, ..)| dev == device)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zarr_group(dir: &Path) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join(".zgroup"), br#"{"zarr_format":2}"#).unwrap();
    }

    #[test]
    fn a_second_writer_of_the_same_dataset_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = tmp.path().join("ds");
        zarr_group(&ds);
        let held = WriterLock::acquire(&ds).unwrap();
        let err = WriterLock::acquire(&ds).unwrap_err();
        assert!(matches!(err, Error::Busy(_)), "{err}");
        drop(held);
        WriterLock::acquire(&ds).unwrap();
    }

    #[test]
    fn writers_of_a_group_and_of_a_group_inside_it_exclude_each_other() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("pz.zarr");
        zarr_group(&root.join("sub/deeper"));
        zarr_group(&root.join("sub"));
        zarr_group(&root.join("other"));
        zarr_group(&root);
        let sub = WriterLock::acquire(&root.join("sub")).unwrap();
        for path in [root.clone(), root.join("sub/deeper")] {
            let err = WriterLock::acquire(&path).unwrap_err();
            assert!(matches!(err, Error::Busy(_)), "{}: {err}", path.display());
        }
        // A disjoint group shares only the ancestors' shared locks.
        let other = WriterLock::acquire(&root.join("other")).unwrap();
        drop((sub, other));
        let whole = WriterLock::acquire(&root).unwrap();
        let err = WriterLock::acquire(&root.join("sub/deeper")).unwrap_err();
        assert!(matches!(err, Error::Busy(_)), "{err}");
        drop(whole);
        WriterLock::acquire(&root.join("sub/deeper")).unwrap();
    }

    #[test]
    fn the_lock_follows_a_dataset_replaced_by_rename() {
        let tmp = tempfile::tempdir().unwrap();
        let ds = tmp.path().join("ds");
        zarr_group(&ds);
        let old = WriterLock::acquire(&ds).unwrap();
        std::fs::rename(&ds, tmp.path().join("old")).unwrap();
        zarr_group(&ds);
        // The new directory at the path is not the one locked.
        let new = WriterLock::acquire(&ds).unwrap();
        assert_ne!(old.identity().unwrap(), new.identity().unwrap());
        let meta = std::fs::metadata(&ds).unwrap();
        assert_eq!(new.identity().unwrap(), (meta.dev(), meta.ino()));
    }

    #[test]
    fn holders_are_read_from_proc_locks() {
        let text = "1: FLOCK  ADVISORY  WRITE 18706 fe:00:10357476 0 EOF\n\
                    2: FLOCK  ADVISORY  READ 99 fe:00:10357476 0 EOF\n\
                    2: -> FLOCK  ADVISORY  WRITE 7 fe:00:10357476 0 EOF\n\
                    3: FLOCK  ADVISORY  WRITE 5 fe:00:1035747 0 EOF\n\
                    4: POSIX  ADVISORY  WRITE 6 fe:00:10357476 0 EOF\n";
        let dev = libc::makedev(0xfe, 0);
        assert_eq!(parse_lock_holders(text, (dev, 10357476)), vec![18706, 99]);
    }

    #[test]
    fn mount_daemons_are_told_from_other_writers_by_their_command_line() {
        assert!(is_mount_daemon(
            b"/usr/bin/nczarrfs\0mount\0-o\0rw\0ds\0m\0"
        ));
        assert!(is_mount_daemon(b"nczarrfs\0-v\0mount\0ds\0m\0"));
        assert!(!is_mount_daemon(b"nczarrfs\0put\0ds\0mount\0-i\0-\0"));
        assert!(!is_mount_daemon(b"python3\0mount\0"));
        assert!(!is_mount_daemon(b""));
    }

    #[test]
    fn a_daemon_whose_connection_number_another_mount_took_serves_no_mount() {
        // /proc/PID/fd and fdinfo of an unmounted daemon (kernel 6.18), after a new FUSE mount
        // took its connection's number, 39: /sys/fs/fuse/connections/39 exists again.
        let fdinfo = "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t90\nfuse_connection:\t39\n";
        let fd = |link: &str| DaemonFd::of(Path::new(link), || fdinfo.to_string());
        let device = fd("/dev/fuse");
        assert_eq!(device, Some(DaemonFd::Device(Some(39))));
        let removed = fd("/sys/fs/fuse/connections/39 (deleted)");
        assert_eq!(removed, Some(DaemonFd::Control { removed: true }));
        let kept = fd("/sys/fs/fuse/connections/39");
        assert_eq!(kept, Some(DaemonFd::Control { removed: false }));
        assert_eq!(fd("/sys/fs/fuse/connections/39/waiting"), None);
        assert_eq!(fd("/tmp/ds"), None);
        let number_is_live = |n: u32| n == 39;
        let held = |fds: &[Option<DaemonFd>]| fds.iter().flatten().copied().collect::<Vec<_>>();
        // Its own connection's directory is gone: the live number is another mount's.
        assert!(serves_no_mount(
            &held(&[device, device, removed]),
            number_is_live
        ));
        // Mounted, or lazily detached and still serving an open file.
        assert!(!serves_no_mount(
            &held(&[device, device, kept]),
            number_is_live
        ));
        // Its device closed.
        assert!(serves_no_mount(&held(&[kept]), number_is_live));
        // Without the directory (no control filesystem), the number decides.
        assert!(!serves_no_mount(&held(&[device]), number_is_live));
        assert!(serves_no_mount(&held(&[device]), |_| false));
        assert!(!serves_no_mount(&[DaemonFd::Device(None)], |_| false));
    }

    #[test]
    fn the_connection_of_a_fuse_descriptor_is_read_from_fdinfo() {
        let info = "pos:\t0\nflags:\t02100002\nmnt_id:\t24\nino:\t90\nfuse_connection:\t39\n";
        assert_eq!(fuse_connection(info), Some(39));
        assert_eq!(fuse_connection("pos:\t0\n"), None);
    }

    #[test]
    fn a_live_writer_is_refused_at_once() {
        // This process holds the lock and has no FUSE connection: a live writer.
        let tmp = tempfile::tempdir().unwrap();
        let ds = tmp.path().join("ds");
        zarr_group(&ds);
        let _held = WriterLock::acquire(&ds).unwrap();
        let other = File::open(&ds).unwrap();
        let err = lock(&other, &ds, Mode::Exclusive).unwrap_err();
        assert!(err.to_string().contains("a put"), "{err}");
    }
}
