//! Running a mount: open the dataset, mount, tell whoever waits that the mount is ready
//! (the parent of a daemon, or systemd), serve until unmounted or signalled, flush, exit.

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, FromRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, OnceLock};

use fuser::{Config, MountOption, Session, SessionACL};

use crate::create::DatasetWriter;
use crate::dataset::OpenDataset;
use crate::location::{Location, Storage};
use crate::zmap::FUSE_CONNECTIONS;
use crate::{Error, Result};

use super::fs::{MountHandle, NczarrFs};
use super::options::MountOptions;

/// Everything `nczarrfs mount` was asked to do.
#[derive(Debug, Clone)]
pub struct MountRequest {
    /// The dataset location (a path, of any bytes, or a URL).
    pub location: OsString,
    /// Where to mount it.
    pub mountpoint: PathBuf,
    /// The parsed options.
    pub options: MountOptions,
    /// Stay in the foreground instead of becoming a daemon.
    pub foreground: bool,
    /// Where log lines go (default: stderr in the foreground, syslog for a daemon).
    pub log_file: Option<PathBuf>,
    /// The mount namespace to mount in (`/proc/PID/ns/mnt` or a descriptor of one under
    /// `/proc/PID/fd/`), as mount(8)'s `-N`; every path is then one of that namespace.
    pub namespace: Option<PathBuf>,
}

/// Mounts as requested and returns the exit code. Without `foreground` this returns in the
/// calling process once a daemon has the mount up (or has failed, with its error).
pub fn mount(req: MountRequest) -> Result<i32> {
    if let Some(namespace) = &req.namespace {
        enter_mount_namespace(namespace)?;
    }
    let o = &req.options;
    if o.auto_unmount && !(o.allow_other || o.allow_root || is_root()) {
        return Err(Error::Invalid(
            "auto_unmount needs allow_other or allow_root for a user other than root \
             (fusermount3 watches only such mounts; both need user_allow_other in /etc/fuse.conf)"
                .into(),
        ));
    }
    // Opened here, before a daemon is forked, so that a log file that cannot be opened is
    // reported to the caller as it is in the foreground.
    let log = req.log_file.as_deref().map(open_log_file).transpose()?;
    // Only the missing dataset is forgiven: every other fault of the request still is one.
    if req.options.nofail && dataset_is_missing(&req.location) {
        checked_mountpoint(&req.mountpoint)?;
        log::info!(
            "{}: no such dataset; nothing mounted (nofail)",
            req.location.to_string_lossy()
        );
        return Ok(0);
    }
    if req.foreground {
        serve(req, log, &mut None)
    } else {
        daemonize(req, log)
    }
}

/// Whether `location` is a path (a directory, a zip archive, a `file://` URL) at which
/// nothing exists: what `nofail` forgives, as mount(8) forgives a device that does not
/// exist. A path that cannot be checked (permissions) is not missing, and an S3 dataset
/// never is, since one that does not answer cannot be told from one that does not exist.
fn dataset_is_missing(location: &OsStr) -> bool {
    match Location::parse(location).map(|l| l.storage) {
        Ok(Storage::File(path) | Storage::Zip(path)) => matches!(path.try_exists(), Ok(false)),
        _ => false,
    }
}

/// Moves this process into the mount namespace `path` names. The kernel allows that only
/// while the process has one thread, which the command line has until it serves; it also
/// makes the namespace's root the root and working directory.
fn enter_mount_namespace(path: &Path) -> Result<()> {
    let namespace = File::open(path).map_err(|e| Error::io(path, e))?;
    // SAFETY: setns with a descriptor owned here.
    if unsafe { libc::setns(namespace.as_raw_fd(), libc::CLONE_NEWNS) } != 0 {
        return Err(Error::Invalid(format!(
            "cannot enter the mount namespace {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// Mounts and serves until unmounted, in this process, logging to `log` if given; `ready` is
/// the pipe on which a daemon tells its parent that the mount is up ("OK"). It is taken when
/// used: a daemon whose `ready` is still there when this fails writes the error to it.
fn serve(req: MountRequest, log: Option<File>, ready: &mut Option<File>) -> Result<i32> {
    // In the foreground the caller's stderr (a terminal, a service's journal) is where a
    // failure to mount is told; the log file takes the lines once the mount is up.
    let caller_stderr = match (&log, ready.is_none()) {
        (Some(_), true) => std::io::stderr().as_fd().try_clone_to_owned().ok(),
        _ => None,
    };
    match log {
        // Only fd 2 keeps it open, so that a reopen after a rotation lets the old file go.
        Some(file) => redirect_stderr(&file)?,
        // A daemon's stderr is /dev/null.
        _ if ready.is_some() => super::logging::to_syslog(),
        _ => {}
    }
    // Before any thread exists, so that every thread inherits the mask and only the signal
    // thread ever sees these signals.
    let signals = block_signals();
    let (session, mountpoint, handle) = match setup(&req) {
        Ok(setup) => setup,
        Err(e) => {
            if caller_stderr.is_some() {
                log::error!("{e}");
            }
            restore_stderr(caller_stderr);
            return Err(e);
        }
    };
    drop(caller_stderr);
    if let Some(mut pipe) = ready.take() {
        let _ = pipe.write_all(b"OK");
    }
    sd_notify("READY=1");
    log::info!(
        "serving {} at {}",
        req.location.to_string_lossy(),
        mountpoint.display()
    );
    std::thread::Builder::new()
        .name("nczarrfs-signals".into())
        .spawn({
            let handle = handle.clone();
            let notifier = session.notifier();
            let log_file = req.log_file.clone();
            move || {
                signal_loop(
                    signals,
                    &mountpoint,
                    log_file.as_deref(),
                    &handle,
                    &notifier,
                )
            }
        })
        .map_err(|e| Error::Invalid(format!("cannot start the signal thread: {e}")))?;
    if let (false, Some(ttl)) = (req.options.read_write, req.options.ttl) {
        let notifier = session.notifier();
        let handle = handle.clone();
        std::thread::Builder::new()
            .name("nczarrfs-ttl".into())
            .spawn(move || expire_loop(ttl, &handle, &notifier))
            .map_err(|e| Error::Invalid(format!("cannot start the TTL thread: {e}")))?;
    }
    let freed_handshake_buffer = hold_freed_request_buffer();
    // Ends once the kernel has let go of the mount; destroy(), which flushes, runs last.
    let result = session.run();
    drop(freed_handshake_buffer);
    sd_notify("STOPPING=1");
    if handle.final_flush_failed() {
        return Err(Error::Invalid(lost_at_unmount(&req, &req.mountpoint)));
    }
    match result {
        Ok(()) => Ok(0),
        Err(e) => {
            log::error!("session ended: {e}");
            Err(Error::io(&req.mountpoint, e))
        }
    }
}

/// What the daemon says when the flush at unmount failed.
fn lost_at_unmount(req: &MountRequest, mountpoint: &Path) -> String {
    format!(
        "{}: changes to {} could not be stored at unmount",
        mountpoint.display(),
        req.location.to_string_lossy()
    )
}

/// The sysfs file of the kernel readahead of the filesystem mounted at `mountpoint` (the
/// last mount there), found in /proc/self/mountinfo: no request to the filesystem itself,
/// which is not serving yet.
fn readahead_file(mountpoint: &Path) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let info = std::fs::read("/proc/self/mountinfo").ok()?;
    let want = mountpoint.as_os_str().as_bytes();
    let dev = info.split(|&b| b == b'\n').rev().find_map(|line| {
        let fields: Vec<&[u8]> = line.split(|&b| b == b' ').collect();
        (fields.len() > 4 && unescape_mountinfo(fields[4]) == want).then(|| fields[2])
    })?;
    let dev = std::str::from_utf8(dev).ok()?;
    Some(PathBuf::from(format!("/sys/class/bdi/{dev}/read_ahead_kb")))
}

/// A mountinfo path field with its octal escapes (`\040` for a space) decoded.
fn unescape_mountinfo(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        // Three octal digits of one byte (at most \377).
        let octal = field.get(i + 1..i + 4).filter(|d| {
            (b'0'..=b'3').contains(&d[0]) && d[1..].iter().all(|c| (b'0'..=b'7').contains(c))
        });
        match (field[i], octal) {
            (b'\\', Some(d)) => {
                out.push(((d[0] - b'0') << 6) | ((d[1] - b'0') << 3) | (d[2] - b'0'));
                i += 4;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    out
}

/// The smallest largest read request worth splicing replies for (see `super::splice`).
const SMALLEST_SPLICED_REQUEST: usize = 128 << 10;

/// Raises the kernel's readahead of a mount to `kib` KiB through its sysfs file `path`, where
/// permitted (root): the kernel's default of 128 KiB cuts sequential reads into 128 KiB
/// requests, while one FUSE request may carry 1 MiB (measured: a cached 256 MiB variable
/// reads in 0.13 s instead of 0.21 s). Best effort: otherwise reads just stay smaller.
fn write_readahead(path: &Path, kib: u32) {
    match std::fs::write(path, kib.to_string()) {
        Ok(()) => log::debug!("{}: {kib}", path.display()),
        Err(e) => log::debug!("readahead left as is ({}: {e})", path.display()),
    }
}

/// Bytes that chunks being fetched and decoded may hold outside the chunk cache, all readers
/// and prefetches together (see [`crate::chunk::limit_bytes_in_flight`]): with the cache,
/// what bounds a mount's memory however many processes read it at once.
pub const BYTES_IN_FLIGHT: usize = 32 << 20;

/// mimalloc's `mi_option_purge_delay` (its index in `mi_option_t` of mimalloc 3, which the
/// mimalloc crate builds; its Rust bindings do not name it, and a test checks the index
/// against the option's default).
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

// Linked for the functions below (the binary's allocator is mimalloc; see main.rs).
extern crate mimalloc as _;

extern "C" {
    fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}

/// `data` files open now, and the allocator's purge delay from before any was (its default,
/// or `MIMALLOC_PURGE_DELAY`).
static OPEN_DATA_FILES: Mutex<(usize, Option<std::ffi::c_long>)> = Mutex::new((0, None));

/// A `data` file open on the mount. While two or more are, the allocator gives freed memory
/// back to the system at once; otherwise it keeps it for its default delay (a second in
/// mimalloc 3). With several readers decoding chunks on as many threads, the chunk buffers
/// freed within that second stayed resident: eight readers of an S3 mount with an 8 MiB
/// cache peaked at 120 to 150 MiB instead of 65 to 70 MiB. A single reader gains nothing
/// from it and loses throughput: its freed buffers would be reused, not faulted in afresh
/// (S3 `cat` of 400 MB about 10% slower with no delay).
#[derive(Debug)]
pub(super) struct OpenDataFile(());

impl OpenDataFile {
    /// Counts one more open `data` file.
    pub(super) fn new() -> OpenDataFile {
        let mut open = OPEN_DATA_FILES.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: reading an option takes and returns plain integers.
        let default = *open
            .1
            .get_or_insert_with(|| unsafe { mi_option_get(MI_OPTION_PURGE_DELAY) });
        open.0 += 1;
        if open.0 == 2 && default != 0 {
            // SAFETY: setting an option takes plain integers; mimalloc reads options
            // atomically.
            unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
        }
        OpenDataFile(())
    }
}

impl Drop for OpenDataFile {
    fn drop(&mut self) {
        let mut open = OPEN_DATA_FILES.lock().unwrap_or_else(|e| e.into_inner());
        open.0 -= 1;
        if let (1, Some(default)) = *open {
            // SAFETY: as in `new`.
            unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, default) };
        }
    }
}

fn setup(req: &MountRequest) -> Result<(Session<NczarrFs>, PathBuf, MountHandle)> {
    crate::chunk::limit_bytes_in_flight(BYTES_IN_FLIGHT);
    let mountpoint = checked_mountpoint(&req.mountpoint)?;
    if let Ok(Storage::File(dataset) | Storage::Zip(dataset)) =
        Location::parse(&req.location).map(|l| l.storage)
    {
        check_apart_from_dataset(&mountpoint, &dataset)?;
    }
    let fs = if req.options.read_write {
        let location = Location::parse(&req.location)?;
        NczarrFs::new_rw(
            DatasetWriter::open_with_cache(&location, req.options.cache_bytes)?,
            req.options.clone(),
        )?
    } else {
        let ds = OpenDataset::open(&req.location, req.options.cache_bytes)?;
        NczarrFs::new(ds, req.options.clone())?
    };
    let handle = fs.handle();
    let storage = Location::parse(&req.location).map(|l| l.storage);
    let remote = matches!(storage, Ok(Storage::S3(_)));
    let local = matches!(storage, Ok(Storage::File(_)));
    let mut options = req.options.clone();
    let mut splices = local && options.splice && !options.read_write;
    if splices && options.max_read.is_none() {
        match super::splice::reply_limit() {
            // Smaller requests would cost more round trips than splicing saves.
            Some(limit) if limit < SMALLEST_SPLICED_REQUEST => splices = false,
            Some(limit) => options.max_read = u32::try_from(limit).ok(),
            None => {}
        }
    }
    // The source in /proc/mounts is text: bytes of a path that are not UTF-8 show as U+FFFD.
    let config = fuser_config(&req.location.to_string_lossy(), &options, remote, splices);
    let session =
        Session::new(fs, &mountpoint, &config).map_err(|e| mount_failed(&mountpoint, e))?;
    if splices {
        match session.as_fd().try_clone_to_owned() {
            Ok(device) => handle.splice_replies_to(device),
            Err(e) => log::warn!("read replies are copied, not spliced: {e}"),
        }
    }
    handle.end_process_when_destroyed(lost_at_unmount(req, &mountpoint));
    hold_connection_control(&mountpoint);
    // After INIT (done by `Session::new`), whose reply would reset it.
    if let Some(path) = readahead_file(&mountpoint) {
        write_readahead(&path, options.max_read.map_or(1024, |n| (n / 1024).max(4)));
    }
    Ok((session, mountpoint, handle))
}

/// The FUSE device, which the mounting process opens (unless fusermount3 mounts for it).
const DEV_FUSE: &str = "/dev/fuse";

/// The error of a mount that failed with `e`. fuser opens /dev/fuse itself and returns the
/// error of that open as is, which would read as the mount point's ("Permission denied");
/// so when /dev/fuse cannot be opened, that is what the error names.
fn mount_failed(mountpoint: &Path, e: std::io::Error) -> Error {
    if e.raw_os_error().is_some() {
        let device = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(DEV_FUSE);
        if let Err(dev) = device {
            let hint = match dev.kind() {
                std::io::ErrorKind::NotFound => {
                    " (FUSE is missing: load the fuse module, `modprobe fuse`)"
                }
                std::io::ErrorKind::PermissionDenied => {
                    " (mounting needs read and write access to it: see its mode and group, \
                     `ls -l /dev/fuse`; on many systems it is the group `fuse`, or the mode \
                     should be 0666)"
                }
                _ => "",
            };
            return Error::Invalid(format!("cannot open {DEV_FUSE}: {dev}{hint}"));
        }
    }
    if is_root() && !may_mount() {
        return Error::Invalid(format!(
            "{}: {} (this process runs as root without CAP_SYS_ADMIN, which mounting needs: \
             see the capability bounding set of its service or container)",
            mountpoint.display(),
            // fusermount3's message ends with a newline.
            e.to_string().trim_end()
        ));
    }
    Error::io(mountpoint, e)
}

/// The size of the request buffer fuser allocates, zeroed, for its handshake and then for each
/// session thread (its largest write, 16 MiB, and a page).
const FUSER_REQUEST_BUFFER: usize = (16 << 20) + 4096;

/// Takes (without touching) the block of memory that fuser's handshake buffer has just given
/// back. Left free, the allocator hands it to the first session thread's buffer and must zero
/// it again, which makes 16 MiB resident for nothing (an idle mount served by one thread: 30
/// MiB instead of 16). Held, every thread's buffer is fresh memory that is zero already and
/// stays untouched until a request fills it.
fn hold_freed_request_buffer() -> Vec<u8> {
    // black_box: an allocation never used would be optimised away.
    std::hint::black_box(Vec::with_capacity(FUSER_REQUEST_BUFFER))
}

/// The canonical mount point, refused with the reason when nothing can be mounted on it: not
/// a directory, the dead mount of a daemon that died without unmounting, or a mount of
/// nczarrfs already (a second one would hide the first, which would go on running).
fn checked_mountpoint(path: &Path) -> Result<PathBuf> {
    let shown = path.display();
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(Error::Invalid(format!(
                "mount point {shown} is not a directory"
            )))
        }
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
            return Err(Error::Invalid(format!(
                "mount point {shown} is the mount of a FUSE daemon that has died (transport \
                 endpoint is not connected): unmount it first (fusermount3 -u {shown}, or \
                 umount -l {shown})"
            )))
        }
        Err(e) => return Err(Error::Invalid(format!("mount point {shown}: {e}"))),
    }
    let mountpoint = path.canonicalize().map_err(|e| Error::io(path, e))?;
    // Unreadable mountinfo (no /proc) is no reason to refuse: the kernel still mounts.
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    if let Some(MountedAt { source, fstype, .. }) = topmost_mount_at(&mounts, &mountpoint) {
        if fstype == "fuse.nczarrfs" {
            return Err(Error::Invalid(format!(
                "{source} is mounted on {} already: unmount it first",
                mountpoint.display()
            )));
        }
    }
    Ok(mountpoint)
}

/// Refuses a mount point (canonical) that is the local dataset's directory, lies inside it or
/// holds it, compared by real paths and by device and inode (a bind mount of one seen at
/// another path). The daemon reaches the dataset by its path, which the mount would then lead
/// into the mount itself: reads found the mount's own files there instead of the chunks and
/// silently gave fill values, a `rw` mount stored a write reported as failed, and its
/// metadata renames waited on the mount forever (an unkillable hang).
fn check_apart_from_dataset(mountpoint: &Path, dataset: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    // A missing dataset is reported by its open, with the error `dump` gives.
    let Ok(real) = std::fs::canonicalize(dataset) else {
        return Ok(());
    };
    let identity = |p: &Path| std::fs::metadata(p).ok().map(|m| (m.dev(), m.ino()));
    let among_ancestors = |of: &Path, who: &Path| {
        identity(who).is_some_and(|id| of.ancestors().skip(1).any(|a| identity(a) == Some(id)))
    };
    let relation = if real == mountpoint || identity(&real) == identity(mountpoint) {
        "is the dataset's own directory"
    } else if mountpoint.starts_with(&real) || among_ancestors(mountpoint, &real) {
        "is inside the dataset"
    } else if real.starts_with(mountpoint) || among_ancestors(&real, mountpoint) {
        "holds the dataset"
    } else {
        return Ok(());
    };
    Err(Error::Invalid(format!(
        "mount point {} {relation} {}: the mount would hide the dataset from this daemon, \
         which reads and writes it by its path; choose a mount point outside the dataset",
        mountpoint.display(),
        real.display()
    )))
}

/// Detaches the mount at `path` if it is the dead mount of an nczarrfs daemon (the kernel
/// answers every access to it with `ENOTCONN`) and leaves every other mount alone: a live
/// mount, whether of nczarrfs or of another filesystem, and whatever lies under the dead one.
/// This is the cleanup a service manager runs after a daemon stopped, which must not undo a
/// mount the daemon did not make. Returns the mount point detached, `None` when `path` leads
/// to no dead mount; an error when it does but that mount cannot be detached here (not of
/// nczarrfs, or not found), since a service that counted on it would not mount again.
pub fn detach_dead(path: &Path) -> Result<Option<PathBuf>> {
    use std::os::unix::ffi::OsStrExt;
    let c_path = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid(format!("{}: NUL in the path", path.display())))?;
    // statfs, not stat: the kernel answers stat from the attributes it caches for the TTL
    // even after the daemon died, while every statfs is a request to the daemon.
    // SAFETY: statvfs with a valid C string and a zeroed struct to fill.
    let alive = unsafe {
        let mut st: libc::statvfs = std::mem::zeroed();
        libc::statvfs(c_path.as_ptr(), &mut st) == 0
    };
    if alive || std::io::Error::last_os_error().raw_os_error() != Some(libc::ENOTCONN) {
        return Ok(None);
    }
    let mountpoint = dead_mount_point(path)?;
    let mounts = std::fs::read_to_string("/proc/self/mountinfo")
        .map_err(|e| Error::io("/proc/self/mountinfo", e))?;
    match topmost_mount_at(&mounts, &mountpoint) {
        Some(mounted) if mounted.fstype == "fuse.nczarrfs" => {}
        Some(MountedAt { source, fstype, .. }) => {
            return Err(Error::Invalid(format!(
                "{} leads to the dead mount of {source} ({fstype}) at {}, which is not \
                 nczarrfs's: left alone (fusermount3 -u or umount -l detaches it)",
                path.display(),
                mountpoint.display()
            )))
        }
        None => {
            return Err(Error::Invalid(format!(
                "{} leads to a dead mount (transport endpoint is not connected), but no mount \
                 is recorded at {}: nothing detached",
                path.display(),
                mountpoint.display()
            )))
        }
    }
    let c = std::ffi::CString::new(mountpoint.as_os_str().as_bytes())
        .map_err(|_| Error::Invalid(format!("{}: NUL in the path", mountpoint.display())))?;
    // SAFETY: umount2 with a valid C string.
    if unsafe { libc::umount2(c.as_ptr(), libc::MNT_DETACH) } != 0 {
        return Err(Error::io(&mountpoint, std::io::Error::last_os_error()));
    }
    Ok(Some(mountpoint))
}

/// As many symbolic links as the kernel follows in one path (MAXSYMLINKS).
const MAX_SYMLINK_HOPS: usize = 40;

/// The absolute path of the directory `path` names, as mount(8) and the kernel resolve it,
/// following symbolic links in every component, the last included, for a `path` whose
/// target is a dead mount. `canonicalize` cannot resolve that target itself (every lookup in
/// it fails), so each parent is resolved instead, and a last component that is a link is
/// followed by hand.
fn dead_mount_point(path: &Path) -> Result<PathBuf> {
    let mut path = path.to_path_buf();
    for _ in 0..MAX_SYMLINK_HOPS {
        let name = path.file_name().ok_or_else(|| {
            Error::Invalid(format!(
                "{}: name the mount point by a path that ends in its name",
                path.display()
            ))
        })?;
        let parent = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let parent = parent.canonicalize().map_err(|e| Error::io(parent, e))?;
        let resolved = parent.join(name);
        // A relative target is relative to the link's directory; an absolute one replaces it.
        match std::fs::read_link(&resolved) {
            Ok(target) => path = parent.join(target),
            Err(_) => return Ok(resolved),
        }
    }
    Err(Error::io(
        &path,
        std::io::Error::from_raw_os_error(libc::ELOOP),
    ))
}

/// A mount as a line of /proc/self/mountinfo shows it.
#[derive(Debug, PartialEq, Eq)]
struct MountedAt {
    /// The device of its filesystem, `MAJOR:MINOR`.
    device: String,
    /// Its source (`fsname=` of a FUSE mount).
    source: String,
    /// Its filesystem type (`fuse.nczarrfs`).
    fstype: String,
}

/// The last mount (the one on top) at `mountpoint` in the text of /proc/self/mountinfo,
/// whose fields escape space, tab, newline and backslash in octal.
fn topmost_mount_at(mountinfo: &str, mountpoint: &Path) -> Option<MountedAt> {
    use std::os::unix::ffi::OsStrExt;
    let unescape = |field: &str| -> Vec<u8> {
        let bytes = field.as_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let octal = bytes.get(i + 1..i + 4).and_then(|d| {
                let d = std::str::from_utf8(d).ok()?;
                u8::from_str_radix(d, 8).ok()
            });
            match (bytes[i], octal) {
                (b'\\', Some(byte)) => {
                    out.push(byte);
                    i += 4;
                }
                (b, _) => {
                    out.push(b);
                    i += 1;
                }
            }
        }
        out
    };
    let target = mountpoint.as_os_str().as_bytes();
    mountinfo.lines().rev().find_map(|line| {
        let (mount, fs) = line.split_once(" - ")?;
        let mut mount = mount.split(' ');
        let device = mount.nth(2)?;
        let point = mount.nth(1)?;
        let mut fs = fs.split(' ');
        let fstype = fs.next()?;
        let source = fs.next()?;
        (unescape(point) == target).then(|| MountedAt {
            device: device.to_string(),
            source: String::from_utf8_lossy(&unescape(source)).into_owned(),
            fstype: fstype.to_string(),
        })
    })
}

/// This daemon's FUSE connection's directory under [`FUSE_CONNECTIONS`], held open for the
/// daemon's life (see [`hold_connection_control`]).
static CONNECTION_CONTROL: OnceLock<File> = OnceLock::new();

/// Opens the directory of the FUSE connection just mounted at `mountpoint` (canonical) under
/// [`FUSE_CONNECTIONS`], and holds it open. The kernel removes that directory once the
/// connection's last mount is gone (a lazily detached one once its last file is closed), and
/// the descriptor this daemon holds then reads as `… (deleted)` in /proc/PID/fd, whatever
/// mount takes the connection's number next: a writer that finds this daemon holding the
/// dataset's lock tells by it that the daemon serves no mount any more and is only storing
/// its last changes (see `zmap::writer_lock`). Without that control filesystem mounted,
/// nothing is held.
fn hold_connection_control(mountpoint: &Path) {
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    // An anonymous device `0:N`: N is the connection's number.
    let number = topmost_mount_at(&mounts, mountpoint)
        .and_then(|m| m.device.strip_prefix("0:")?.parse::<u32>().ok());
    let Some(number) = number else {
        log::debug!("{}: no FUSE connection found", mountpoint.display());
        return;
    };
    match File::open(Path::new(FUSE_CONNECTIONS).join(number.to_string())) {
        Ok(dir) => {
            let _ = CONNECTION_CONTROL.set(dir);
        }
        Err(e) => log::debug!("{FUSE_CONNECTIONS}/{number}: not held open: {e}"),
    }
}

/// The session's mount options and threads. Each thread reads requests from the FUSE device
/// and answers them itself: handing each request to another thread cost a wake-up per
/// request, about a sixth of a plain `cat`'s time. The threads share one descriptor of the
/// device when `splices` (a spliced reply must go back through the descriptor that took its
/// request, and fuser tells the filesystem only of the first), else each has its own clone.
fn fuser_config(location: &str, o: &MountOptions, remote: bool, splices: bool) -> Config {
    let mut config = Config::default();
    config.mount_options = fuser_options(location, o);
    config.acl = if o.allow_other {
        SessionACL::All
    } else if o.allow_root || (o.auto_unmount && is_root()) {
        // fusermount3 watches a mount for auto_unmount only if it admits root or others
        // (fuser enforces it); for root, who owns the mount, admitting root changes nothing.
        SessionACL::RootAndOwner
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(o.session_threads(remote));
    config.clone_fd = !splices;
    config
}

/// The source shown in /proc/mounts. fusermount3 (the mount path of `auto_unmount` and of a
/// process that mount(2) refuses) splits its options at commas, so there a comma of the name
/// (as in `#mode=nczarr,file`) and the backslash are escaped with a backslash, which it undoes.
fn fsname(location: &str, o: &MountOptions) -> String {
    let name = o.fsname.as_deref().unwrap_or(location);
    if o.auto_unmount || !may_mount() {
        name.replace('\\', "\\\\").replace(',', "\\,")
    } else {
        name.to_string()
    }
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Whether mount(2) admits this process: it needs CAP_SYS_ADMIN, which root can lack (a
/// hardened service, a container), and then fuser mounts through fusermount3 instead.
fn may_mount() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|line| line.strip_prefix("CapEff:"))
        .and_then(|caps| u64::from_str_radix(caps.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

fn fuser_options(location: &str, o: &MountOptions) -> Vec<MountOption> {
    let mut v = vec![
        MountOption::FSName(fsname(location, o)),
        // As a kernel option, so the mount's type is `fuse.nczarrfs` (what mount(8), fstab and
        // systemd expect) also on the direct mount(2) path fuser takes as root, which drops
        // `Subtype`; fusermount3, the path for other users, reads it from the options too.
        MountOption::CUSTOM("subtype=nczarrfs".into()),
        if o.read_write {
            MountOption::RW
        } else {
            MountOption::RO
        },
    ];
    if o.default_permissions {
        v.push(MountOption::DefaultPermissions);
    }
    if o.auto_unmount {
        v.push(MountOption::AutoUnmount);
    }
    for flag in &o.kernel_flags {
        v.push(match flag.as_str() {
            "noatime" => MountOption::NoAtime,
            "atime" => MountOption::Atime,
            "nodev" => MountOption::NoDev,
            "nosuid" => MountOption::NoSuid,
            "noexec" => MountOption::NoExec,
            "sync" => MountOption::Sync,
            "async" => MountOption::Async,
            _ => MountOption::DirSync,
        });
    }
    if let Some(n) = o.max_read {
        v.push(MountOption::CUSTOM(format!("max_read={n}")));
    }
    v
}

/// Forks a daemon in its own session that mounts and serves, and waits until it reports the
/// mount ready (exit 0) or failed (its error message). A fork without exec, as daemon(3)
/// does, saves starting the binary a second time (`nczarrfs --version` takes 3.6 ms here;
/// mounting a dataset of 1000 variables got 1.5 to 2 ms faster); it is safe only while this
/// process has one thread, which is checked.
fn daemonize(mut req: MountRequest, log: Option<File>) -> Result<i32> {
    // The command line starts no thread before this point; the check guards against one that
    // would, so a /proc that cannot be read is no reason to refuse.
    let threads = std::fs::read_dir("/proc/self/task").map_or(1, |d| d.count());
    if threads > 1 {
        return Err(Error::Invalid(format!(
            "cannot become a daemon: {threads} threads run already (use -f)"
        )));
    }
    // The daemon runs in `/`, so that it keeps no directory busy.
    let cwd = std::env::current_dir().map_err(|e| Error::io(".", e))?;
    req.location = absolute_location(&req.location, &cwd);
    req.mountpoint = cwd.join(&req.mountpoint);
    // Reopened by path on SIGUSR1 and SIGHUP.
    req.log_file = req.log_file.map(|path| cwd.join(path));
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two fds into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(Error::io("pipe", std::io::Error::last_os_error()));
    }
    // SAFETY: both fds were just created and are owned here.
    let (mut reader, writer) = unsafe { (File::from_raw_fd(fds[0]), File::from_raw_fd(fds[1])) };
    // SAFETY: this process has a single thread (checked above), so the child is a complete
    // copy of it.
    match unsafe { libc::fork() } {
        -1 => Err(Error::io("fork", std::io::Error::last_os_error())),
        0 => {
            drop(reader);
            let own = [
                Some(writer.as_raw_fd()),
                log.as_ref().map(|f| f.as_raw_fd()),
                req.log_file.as_deref().and_then(descriptor_named),
            ];
            close_inherited_descriptors(&own.into_iter().flatten().collect::<Vec<_>>());
            let mut ready = Some(writer);
            let served = detach().and_then(|()| serve(req, log, &mut ready));
            let code = served.unwrap_or_else(|e| {
                // Before the mount was ready, the parent is waiting to say why it failed.
                if let Some(mut pipe) = ready.take() {
                    let _ = write!(pipe, "{e}");
                }
                log::error!("{e}");
                1
            });
            crate::zmap::stop_rename_helper();
            std::process::exit(code)
        }
        child => {
            drop(writer);
            let mut msg = String::new();
            let _ = reader.read_to_string(&mut msg);
            if msg == "OK" {
                return Ok(0);
            }
            let mut status = 0;
            // SAFETY: waitpid on our own child, status written to a local.
            unsafe { libc::waitpid(child, &mut status, 0) };
            if msg.is_empty() {
                msg = format!(
                    "the mount daemon {} before the mount was ready",
                    wait_status_text(status)
                );
            }
            Err(Error::Invalid(msg))
        }
    }
}

/// What a `waitpid` status says about how the process ended.
fn wait_status_text(status: i32) -> String {
    if libc::WIFEXITED(status) {
        format!("exited with status {}", libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        format!("was killed by signal {}", libc::WTERMSIG(status))
    } else {
        format!("ended (wait status {status})")
    }
}

/// Makes a forked child a daemon: its own session, `/` as working directory, standard streams
/// on /dev/null.
fn detach() -> Result<()> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| Error::io("/dev/null", e))?;
    // SAFETY: setsid, chdir and dup2 with valid arguments.
    unsafe {
        libc::setsid();
        if libc::chdir(c"/".as_ptr()) != 0 {
            return Err(Error::io("/", std::io::Error::last_os_error()));
        }
        for fd in 0..3 {
            if libc::dup2(null.as_raw_fd(), fd) < 0 {
                return Err(Error::io("/dev/null", std::io::Error::last_os_error()));
            }
        }
    }
    Ok(())
}

/// Closes every descriptor above the standard streams but `own` (those this process opened
/// for the daemon), as daemon(7) asks: one inherited from the caller (a pipe it reads to its
/// end, as `$(...)` or `| cat` do when it is open beside stdout, a lock file, a socket) would
/// otherwise stay open, and its reader waiting, as long as the mount.
fn close_inherited_descriptors(own: &[std::os::fd::RawFd]) {
    let mut own: Vec<u32> = own
        .iter()
        .filter_map(|&fd| u32::try_from(fd).ok())
        .collect();
    own.sort_unstable();
    let mut first = 3;
    for fd in own {
        if fd >= first {
            close_descriptors(first, fd - 1);
            first = fd + 1;
        }
    }
    close_descriptors(first, u32::MAX);
}

/// The descriptor of this process that `path` names (`/dev/fd/N`, `/proc/self/fd/N`): a
/// log file given so is one the caller handed over, which the daemon keeps open, as the
/// reopen after a rotation opens it by that path again.
fn descriptor_named(path: &Path) -> Option<std::os::fd::RawFd> {
    let number = path
        .strip_prefix("/dev/fd")
        .or_else(|_| path.strip_prefix("/proc/self/fd"))
        .ok()?
        .to_str()?;
    number
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| number.parse().ok())?
}

/// Closes descriptors `first` to `last` (an empty range when `last < first`).
fn close_descriptors(first: u32, last: u32) {
    if last < first {
        return;
    }
    // SAFETY: closes only descriptors no object of this process owns: the caller keeps out
    // every one it uses.
    if unsafe { libc::close_range(first, last, 0) } == 0 {
        return;
    }
    // Kernels before 5.9 have no close_range: close those open, one by one (listed first,
    // since the listing has a descriptor of its own).
    let open: Vec<u32> = std::fs::read_dir("/proc/self/fd")
        .into_iter()
        .flatten()
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|fd| (first..=last).contains(fd))
        .collect();
    for fd in open {
        // SAFETY: as above.
        unsafe { libc::close(fd as libc::c_int) };
    }
}

/// A plain relative path (of any bytes) made absolute (the daemon runs in `/`); URLs are
/// left alone.
fn absolute_location(location: &OsStr, cwd: &Path) -> OsString {
    let bytes = location.as_bytes();
    if bytes.windows(3).any(|w| w == b"://") || bytes.starts_with(b"/") {
        return location.to_os_string();
    }
    let (path, fragment) = match bytes.iter().position(|&b| b == b'#') {
        Some(hash) => (&bytes[..hash], Some(&bytes[hash..])),
        None => (bytes, None),
    };
    let mut abs = cwd.join(OsStr::from_bytes(path)).into_os_string();
    if let Some(fragment) = fragment {
        abs.push(OsStr::from_bytes(fragment));
    }
    abs
}

/// The log file `path`, opened for appending (created if missing).
fn open_log_file(path: &Path) -> Result<File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| Error::io(path, e))
}

/// Makes `saved` (the caller's stderr, kept aside) stderr again, after logging the error
/// that ends a foreground mount into the log file, so that the caller is told too.
fn restore_stderr(saved: Option<std::os::fd::OwnedFd>) {
    if let Some(saved) = saved {
        // SAFETY: dup2 of a descriptor owned here onto stderr.
        unsafe { libc::dup2(saved.as_raw_fd(), 2) };
    }
}

/// Makes stderr, where log lines go, the log file `file`.
fn redirect_stderr(file: &File) -> Result<()> {
    // SAFETY: dup2 of a valid fd onto stderr; env_logger writes to fd 2.
    if unsafe { libc::dup2(file.as_raw_fd(), 2) } < 0 {
        return Err(Error::io("the log file", std::io::Error::last_os_error()));
    }
    Ok(())
}

/// The signals that stop a mount as SIGTERM does: it unmounts (lazily if busy), stores every
/// change and exits. They are all the signals whose default action ends the process, but for
/// SIGKILL, which cannot be caught, those of a fault in the process itself (SIGSEGV, SIGBUS,
/// SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT), and those handled otherwise below (SIGHUP,
/// SIGUSR1, SIGUSR2; SIGPIPE is ignored, as in every Rust program). Without this, a SIGQUIT
/// (`Ctrl-\` in the terminal of a `-f` mount), a SIGXCPU from a CPU time limit or a stray
/// SIGALRM killed the daemon at once, with the changes in its cache lost and the mount point
/// left dead. The real-time signals, which end a process too, are added by [`block_signals`].
const STOP_SIGNALS: [libc::c_int; 11] = [
    libc::SIGTERM,
    libc::SIGINT,
    libc::SIGQUIT,
    libc::SIGALRM,
    libc::SIGVTALRM,
    libc::SIGPROF,
    libc::SIGXCPU,
    libc::SIGXFSZ,
    libc::SIGIO,
    libc::SIGPWR,
    libc::SIGSTKFLT,
];

/// The signals that reopen the log file (`--log-file`), so that a log rotation tool can move
/// it away and have the daemon write to a new one: SIGUSR1, and SIGHUP, which also re-reads
/// the metadata of a read-only mount.
const REOPEN_SIGNALS: [libc::c_int; 2] = [libc::SIGUSR1, libc::SIGHUP];

/// Blocks, in this thread and so in every thread started after, every signal that
/// [`signal_loop`] handles, and returns them as a set for it to wait on.
fn block_signals() -> libc::sigset_t {
    let realtime = libc::SIGRTMIN()..=libc::SIGRTMAX();
    // SAFETY: sigset manipulation on a local, then a mask change for this thread.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        let handled = STOP_SIGNALS
            .into_iter()
            .chain(REOPEN_SIGNALS)
            .chain(realtime);
        for s in handled.chain([libc::SIGUSR2]) {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// The name of signal `sig` (`SIGQUIT`, `SIGRTMIN+3`), for log lines, as signal(7) names it.
fn signal_name(sig: libc::c_int) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGSTKFLT => "SIGSTKFLT",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGVTALRM => "SIGVTALRM",
        libc::SIGPROF => "SIGPROF",
        libc::SIGIO => "SIGIO",
        libc::SIGPWR => "SIGPWR",
        _ if sig == libc::SIGRTMIN() => "SIGRTMIN",
        _ if sig == libc::SIGRTMAX() => "SIGRTMAX",
        _ if sig > libc::SIGRTMIN() => return format!("SIGRTMIN+{}", sig - libc::SIGRTMIN()),
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// Waits for signals: SIGHUP re-reads the metadata (and drops what the kernel cached) and
/// reopens the log file, SIGUSR1 reopens the log file, SIGUSR2 is ignored, and every other
/// signal that would end the process ([`STOP_SIGNALS`], the real-time ones) unmounts, which
/// ends the session loop, which stores every change.
fn signal_loop(
    set: libc::sigset_t,
    mountpoint: &Path,
    log_file: Option<&Path>,
    refresh: &MountHandle,
    notifier: &fuser::Notifier,
) {
    loop {
        let mut sig = 0;
        // SAFETY: sigwait on a valid set, result written to a local.
        if unsafe { libc::sigwait(&set, &mut sig) } != 0 {
            continue;
        }
        let name = signal_name(sig);
        if REOPEN_SIGNALS.contains(&sig) {
            reopen_log_file(&name, log_file);
        }
        if sig == libc::SIGHUP {
            reload_on_sighup(refresh, notifier);
        }
        if sig == libc::SIGUSR2 {
            log::warn!("{name}: ignored (SIGUSR1 or SIGHUP reopen the log file)");
        }
        if REOPEN_SIGNALS.contains(&sig) || sig == libc::SIGUSR2 {
            continue;
        }
        match sig {
            // What a service manager or a terminal sends to stop a program: no warning.
            libc::SIGTERM | libc::SIGINT => {
                log::info!("{name}: unmounting {}", mountpoint.display())
            }
            _ => log::warn!(
                "{name}: unmounting {} and storing every change, as for SIGTERM",
                mountpoint.display()
            ),
        }
        unmount(mountpoint);
        return;
    }
}

/// Re-reads the metadata of a read-only mount (a `rw` mount is the dataset's only writer, and
/// has nothing to re-read), on a thread of its own: a reload may wait out a stalled server,
/// and a SIGTERM meanwhile must still unmount at once.
fn reload_on_sighup(refresh: &MountHandle, notifier: &fuser::Notifier) {
    log::info!("SIGHUP: re-reading metadata");
    let (refresh, notifier) = (refresh.clone(), notifier.clone());
    let reload = move || {
        if let Err(e) = refresh.reload_now(&notifier) {
            log::debug!("SIGHUP: the kernel takes no notifications ({e})");
        }
    };
    if let Err(e) = std::thread::Builder::new()
        .name("nczarrfs-reload".into())
        .spawn(reload)
    {
        log::error!("SIGHUP: cannot start a thread to re-read the metadata: {e}");
    }
}

/// Opens the log file `path` again and makes it where log lines go, for `signal`: after a log
/// rotation tool has renamed the file, lines go on into a new one at the same path instead of
/// the renamed one. When it cannot be opened, lines go on into the old file, which says why.
fn reopen_log_file(signal: &str, path: Option<&Path>) {
    let Some(path) = path else {
        log::info!("{signal}: no log file to reopen (logs go to syslog or stderr)");
        return;
    };
    match open_log_file(path).and_then(|file| redirect_stderr(&file)) {
        Ok(()) => log::info!("{signal}: log file {} reopened", path.display()),
        Err(e) => {
            log::error!("{signal}: cannot reopen the log file, logging on into the old one: {e}")
        }
    }
}

/// Every `ttl`, drops what a read-only mount remembers of the values (decoded chunks, the
/// kernel's pages of `data` files), so that the staleness window holds for data as it does for
/// metadata. Runs on its own thread: an invalidation waits for reads in flight, which the
/// session threads must stay free to serve. Ends when the mount is gone.
fn expire_loop(ttl: std::time::Duration, refresh: &MountHandle, notifier: &fuser::Notifier) {
    loop {
        std::thread::sleep(ttl);
        if let Err(e) = refresh.expire_values(notifier) {
            log::debug!("TTL thread ends: {e}");
            return;
        }
    }
}

fn unmount(mountpoint: &Path) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(mountpoint.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: umount2 with a valid C string.
    unsafe {
        if libc::umount2(c.as_ptr(), 0) == 0 {
            return;
        }
        // Busy: detach now; the session ends when the last user lets go.
        if libc::umount2(c.as_ptr(), libc::MNT_DETACH) == 0 {
            return;
        }
    }
    let status = Command::new("fusermount3")
        .args(["-u", "-z", "--"])
        .arg(mountpoint)
        .status();
    if !matches!(status, Ok(s) if s.success()) {
        log::error!("cannot unmount {}", mountpoint.display());
    }
}

/// Sends `state` to systemd's notification socket when running under `Type=notify`.
pub(super) fn sd_notify(state: &str) {
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    let Some(path) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    let bytes = std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str());
    let addr = match bytes.strip_prefix(b"@") {
        Some(name) => SocketAddr::from_abstract_name(name),
        None => SocketAddr::from_pathname(Path::new(&path)),
    };
    let sent = addr.and_then(|a| UnixDatagram::unbound()?.send_to_addr(state.as_bytes(), &a));
    if let Err(e) = sent {
        log::warn!("sd_notify {state}: {e}");
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn mount_points_at_in_or_around_the_dataset_are_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let ds = root.join("x/ds.file");
        std::fs::create_dir_all(ds.join("a")).unwrap();
        std::fs::create_dir_all(root.join("elsewhere")).unwrap();
        std::os::unix::fs::symlink(&ds, root.join("link")).unwrap();
        for (mountpoint, why) in [
            (ds.clone(), "own directory"),
            (ds.join("a"), "inside"),
            (root.join("x"), "holds"),
            (root.clone(), "holds"),
        ] {
            let err = super::check_apart_from_dataset(&mountpoint, &root.join("link"))
                .unwrap_err()
                .to_string();
            assert!(err.contains(why), "{}: {err}", mountpoint.display());
        }
        super::check_apart_from_dataset(&root.join("elsewhere"), &ds).unwrap();
        let zip = root.join("elsewhere/ds.zip");
        std::fs::write(&zip, b"").unwrap();
        assert!(super::check_apart_from_dataset(&root.join("elsewhere"), &zip).is_err());
        super::check_apart_from_dataset(&root.join("x"), &zip).unwrap();
    }

    /// The index taken for `mi_option_purge_delay` is that option (its default is 1000 ms,
    /// which no neighbouring option has), and it is 0 while two or more `data` files are open.
    #[test]
    fn freed_memory_goes_back_at_once_while_two_data_files_are_open() {
        // SAFETY: reading an option takes and returns plain integers.
        let delay = || unsafe { super::mi_option_get(super::MI_OPTION_PURGE_DELAY) };
        let default = delay();
        if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
            assert_eq!(default, 1000);
        }
        let first = super::OpenDataFile::new();
        assert_eq!(delay(), default);
        let second = super::OpenDataFile::new();
        let third = super::OpenDataFile::new();
        assert_eq!(delay(), 0);
        drop(second);
        assert_eq!(delay(), 0);
        drop(third);
        assert_eq!(delay(), default);
        drop(first);
        assert_eq!(delay(), default);
    }

    use super::*;

    #[test]
    fn signals_are_named_as_signal_7_names_them() {
        assert_eq!(signal_name(libc::SIGQUIT), "SIGQUIT");
        assert_eq!(signal_name(libc::SIGRTMIN()), "SIGRTMIN");
        assert_eq!(signal_name(libc::SIGRTMIN() + 3), "SIGRTMIN+3");
        assert_eq!(signal_name(libc::SIGRTMAX()), "SIGRTMAX");
        assert_eq!(signal_name(libc::SIGKILL), "signal 9");
    }

    #[test]
    fn relative_locations_become_absolute() {
        let cwd = Path::new("/data");
        assert_eq!(absolute_location(OsStr::new("x.zarr"), cwd), "/data/x.zarr");
        assert_eq!(
            absolute_location(OsStr::new("x.file#mode=nczarr,file"), cwd),
            "/data/x.file#mode=nczarr,file"
        );
        assert_eq!(absolute_location(OsStr::new("/abs/y"), cwd), "/abs/y");
        assert_eq!(absolute_location(OsStr::new("s3://b/k"), cwd), "s3://b/k");
        assert_eq!(
            absolute_location(OsStr::from_bytes(b"d\xff.file#mode=zarr"), cwd),
            OsStr::from_bytes(b"/data/d\xff.file#mode=zarr")
        );
    }

    #[test]
    fn log_files_named_by_descriptor_are_told() {
        assert_eq!(descriptor_named(Path::new("/dev/fd/3")), Some(3));
        assert_eq!(descriptor_named(Path::new("/proc/self/fd/17")), Some(17));
        assert_eq!(descriptor_named(Path::new("/dev/fd/3/x")), None);
        assert_eq!(descriptor_named(Path::new("/dev/fd/+3")), None);
        assert_eq!(descriptor_named(Path::new("/var/log/fd/3")), None);
        assert_eq!(descriptor_named(Path::new("/dev/fd")), None);
    }

    #[test]
    fn wait_statuses_are_told_in_words() {
        use std::os::unix::process::ExitStatusExt;
        let status = |script: &str| {
            Command::new("sh")
                .args(["-c", script])
                .status()
                .unwrap()
                .into_raw()
        };
        assert_eq!(wait_status_text(status("exit 1")), "exited with status 1");
        assert_eq!(
            wait_status_text(status("kill -KILL $$")),
            "was killed by signal 9"
        );
    }

    #[test]
    fn sd_notify_reaches_the_socket() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("notify");
        let sock = std::os::unix::net::UnixDatagram::bind(&path).unwrap();
        // The variable is process-wide; this test is the only one that sets it.
        std::env::set_var("NOTIFY_SOCKET", &path);
        sd_notify("READY=1");
        std::env::remove_var("NOTIFY_SOCKET");
        let mut buf = [0u8; 64];
        let n = sock.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }

    #[test]
    fn mountinfo_paths_are_unescaped() {
        assert_eq!(
            unescape_mountinfo(br"/mnt/a\040b\011c\134d"),
            b"/mnt/a b\tc\\d"
        );
        assert_eq!(unescape_mountinfo(br"/x\04"), br"/x\04");
        assert_eq!(unescape_mountinfo(br"/x\999\400"), br"/x\999\400");
    }

    #[test]
    fn the_readahead_file_of_a_mount_is_found() {
        // The root filesystem is always mounted; its device is the one stat reports.
        use std::os::unix::fs::MetadataExt;
        let dev = std::fs::metadata("/").unwrap().dev();
        let want = format!(
            "/sys/class/bdi/{}:{}/read_ahead_kb",
            libc::major(dev),
            libc::minor(dev)
        );
        assert_eq!(readahead_file(Path::new("/")), Some(PathBuf::from(want)));
        assert_eq!(readahead_file(Path::new("/no/such/mount")), None);
    }

    #[test]
    fn options_map_to_fuser() {
        let o = MountOptions::parse(&["allow_other,noatime,max_read=1M"]).unwrap();
        let c = fuser_config("loc", &o, false, false);
        assert_eq!(c.acl, SessionACL::All);
        let v = c.mount_options;
        assert!(v.contains(&MountOption::RO));
        assert!(v.contains(&MountOption::NoAtime));
        assert!(v.contains(&MountOption::FSName("loc".into())));
        assert!(v.contains(&MountOption::CUSTOM("max_read=1048576".into())));
    }

    #[test]
    fn a_mount_point_named_through_symbolic_links_is_resolved_to_their_target() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().canonicalize().unwrap().join("real");
        std::fs::create_dir_all(real.join("obs")).unwrap();
        // A link to the mount point, a relative link to that link, a link to its parent.
        std::os::unix::fs::symlink(real.join("obs"), dir.path().join("obs")).unwrap();
        std::os::unix::fs::symlink("obs", dir.path().join("again")).unwrap();
        std::os::unix::fs::symlink("real", dir.path().join("up")).unwrap();
        for named in ["obs", "again", "up/obs", "real/obs", "real/../obs/"] {
            assert_eq!(
                dead_mount_point(&dir.path().join(named)).unwrap(),
                real.join("obs"),
                "{named}"
            );
        }
        std::os::unix::fs::symlink("loop", dir.path().join("loop")).unwrap();
        let e = dead_mount_point(&dir.path().join("loop")).unwrap_err();
        assert!(e.to_string().contains("symbolic links"), "{e}");
    }

    #[test]
    fn only_a_path_with_nothing_at_it_is_a_missing_dataset() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing.file");
        assert!(dataset_is_missing(missing.as_os_str()));
        assert!(dataset_is_missing(OsStr::new(&format!(
            "file://{}#mode=nczarr,zip",
            missing.display()
        ))));
        std::os::unix::fs::symlink(&missing, dir.path().join("dangling")).unwrap();
        assert!(dataset_is_missing(dir.path().join("dangling").as_os_str()));
        // Something that is there, dataset or not, is not missing: opening it tells.
        assert!(!dataset_is_missing(dir.path().as_os_str()));
        assert!(!dataset_is_missing(OsStr::new(
            "s3://bucket/missing#mode=nczarr,s3"
        )));
    }

    #[test]
    fn the_topmost_mount_at_a_path_is_found_in_mountinfo() {
        let mountinfo = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
41 22 0:40 / /mnt/a\\040b rw,nosuid shared:20 - tmpfs tmpfs rw
42 41 0:41 / /mnt/a\\040b ro,nosuid,nodev shared:21 - fuse.nczarrfs /srv/x\\134y.zarr ro
43 22 0:42 / /mnt/c rw shared:22 - fuse.nczarrfs /srv/c rw
";
        let mounted = |device: &str, source: &str, fstype: &str| MountedAt {
            device: device.to_string(),
            source: source.to_string(),
            fstype: fstype.to_string(),
        };
        assert_eq!(
            topmost_mount_at(mountinfo, Path::new("/mnt/a b")),
            Some(mounted("0:41", r"/srv/x\y.zarr", "fuse.nczarrfs"))
        );
        assert_eq!(
            topmost_mount_at(mountinfo, Path::new("/")),
            Some(mounted("8:1", "/dev/sda1", "ext4"))
        );
        assert_eq!(topmost_mount_at(mountinfo, Path::new("/mnt")), None);
    }

    #[test]
    fn auto_unmount_escapes_the_name_for_fusermount3() {
        let o = MountOptions::parse(&["auto_unmount"]).unwrap();
        let c = fuser_config(r"file:///d\x#mode=nczarr,file", &o, false, false);
        let v = c.mount_options;
        assert!(v.contains(&MountOption::AutoUnmount));
        let escaped = r"file:///d\\x#mode=nczarr\,file";
        assert!(v.contains(&MountOption::FSName(escaped.into())), "{v:?}");
        // fusermount3 watches only mounts that admit root or others.
        assert_eq!(c.acl == SessionACL::Owner, !is_root());
    }
}
