//! What an interrupted `gen` or `copy` leaves behind: nothing.
//!
//! A new dataset is built in a hidden staging sibling of its destination
//! ([`crate::create::Staging`]). A Ctrl-C (SIGINT), a SIGTERM or a hang-up (SIGHUP) would end
//! the process with that directory left in place, so a command that stages calls
//! [`remove_staging_on_signals`] first: the signals are then taken by one thread, which waits
//! for any publication in progress ([`while_publishing`]), hands the registered staging paths
//! to a cleaner process and ends this process by the same signal, so that a shell sees what
//! it expects (`$?` is 130 for SIGINT, 143 for SIGTERM).
//!
//! The cleaner (`nczarrfs remove-staging PATH...`, this binary) removes the paths once this
//! process has gone: it waits for the end of a pipe that only this process holds, as the
//! threads still writing into the staging directory would otherwise re-create it behind a
//! removal. A SIGKILL cannot be caught; its staging directory is removed by the next
//! [`crate::create::Staging`] of the same destination, once its process is gone.
//!
//! A dataset written to an object store has no staging copy: it is written in place, and
//! what it wrote is deleted by a clean-up registered with [`on_signal`], which the signal
//! thread runs itself before it ends the process (the objects' keys are known only here).

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// The command line argument that makes the binary serve as the cleaner.
pub const REMOVE_STAGING_COMMAND: &str = "remove-staging";

/// The signals that remove the staging directories before they end the process.
const SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The staging paths of this process that are not published or abandoned yet. The lock is
/// also held while a staging directory moves into place, so that a signal never removes a
/// dataset halfway through its replacement.
static PENDING: Mutex<Vec<PathBuf>> = Mutex::new(Vec::new());

fn pending() -> MutexGuard<'static, Vec<PathBuf>> {
    PENDING.lock().unwrap_or_else(|e| e.into_inner())
}

/// A clean-up to run before a signal ends the process.
type Cleanup = Arc<dyn Fn() + Send + Sync>;

/// The clean-ups registered with [`on_signal`], each with its registration number.
static CLEANUPS: Mutex<Vec<(u64, Cleanup)>> = Mutex::new(Vec::new());

/// Set once a signal is being handled: the process is about to end by it.
static ENDING: AtomicBool = AtomicBool::new(false);

fn cleanups() -> MutexGuard<'static, Vec<(u64, Cleanup)>> {
    CLEANUPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Makes SIGINT, SIGTERM and SIGHUP remove the staging paths registered with
/// [`register`] before they end the process. Call it before any other thread is started:
/// the signals are blocked in the calling thread, and every thread started after inherits
/// that. A signal that this process inherited as ignored stays ignored.
pub fn remove_staging_on_signals() {
    // SAFETY: sigset_t is plain data, initialised by sigemptyset before any other use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t owned by this frame.
    unsafe { libc::sigemptyset(&mut set) };
    for signal in SIGNALS {
        if inherited_as_ignored(signal) {
            continue;
        }
        // SAFETY: `set` is a valid, initialised sigset_t.
        unsafe { libc::sigaddset(&mut set, signal) };
    }
    // SAFETY: `set` is initialised; the old mask is not asked for.
    if unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) } != 0 {
        log::warn!("signals not handled: a Ctrl-C will leave the staging directory behind");
        return;
    }
    let spawned = std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            let mut signal: libc::c_int = 0;
            // SAFETY: `set` and `signal` are valid for the call.
            while unsafe { libc::sigwait(&set, &mut signal) } != 0 {}
            end_by(signal);
        });
    if spawned.is_err() {
        // Without the thread the blocked signals would never end the process.
        // SAFETY: `set` is initialised.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
    }
}

fn inherited_as_ignored(signal: libc::c_int) -> bool {
    // SAFETY: sigaction with a null new action only reads the current one into `old`.
    unsafe {
        let mut old: libc::sigaction = std::mem::zeroed();
        libc::sigaction(signal, std::ptr::null(), &mut old) == 0
            && old.sa_sigaction == libc::SIG_IGN
    }
}

/// Removes the pending staging paths (through the cleaner) and ends the process by `signal`.
fn end_by(signal: libc::c_int) -> ! {
    ENDING.store(true, Ordering::SeqCst);
    // Held until the process ends: no publication starts after this point.
    let paths = pending();
    let to_run: Vec<Cleanup> = cleanups().iter().map(|(_, c)| Arc::clone(c)).collect();
    to_run.iter().for_each(|cleanup| cleanup());
    // The cleaner's stdin stays open as long as this process lives.
    let _cleaner = match paths.is_empty() {
        true => None,
        false => {
            // This very binary even after an upgrade has replaced its file.
            let spawned = Command::new("/proc/self/exe")
                .arg0("nczarrfs")
                .arg(REMOVE_STAGING_COMMAND)
                .args(paths.iter())
                .stdin(Stdio::piped())
                .spawn();
            match spawned {
                Ok(child) => Some(child),
                Err(e) => {
                    log::warn!("no cleaner process ({e}): removing the staging here");
                    paths.iter().for_each(|p| remove(p));
                    None
                }
            }
        }
    };
    // SAFETY: restoring the default action and raising the signal in this thread, where it
    // is unblocked, ends the process as the signal would have.
    unsafe {
        libc::signal(signal, libc::SIG_DFL);
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, signal);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        libc::raise(signal);
    }
    std::process::exit(128 + signal)
}

/// A staging path to remove if a signal ends the process; dropping it forgets the path.
#[derive(Debug)]
pub struct Registered(PathBuf);

/// Registers `path` (a staging directory or archive) for removal by a signal.
pub fn register(path: &Path) -> Registered {
    pending().push(path.to_path_buf());
    Registered(path.to_path_buf())
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut paths = pending();
        if let Some(i) = paths.iter().position(|p| *p == self.0) {
            paths.swap_remove(i);
        }
    }
}

/// A clean-up to run if a signal ends the process; dropping it forgets the clean-up.
#[derive(Debug)]
pub struct RegisteredCleanup(u64);

/// Registers `cleanup` to run in the signal thread before a signal ends the process. It
/// runs while no publication is in progress ([`while_publishing`]), and must itself make
/// sure that nothing is written after it (the other threads keep running until the end).
pub fn on_signal(cleanup: Arc<dyn Fn() + Send + Sync>) -> RegisteredCleanup {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    cleanups().push((id, cleanup));
    RegisteredCleanup(id)
}

impl Drop for RegisteredCleanup {
    fn drop(&mut self) {
        cleanups().retain(|(id, _)| *id != self.0);
    }
}

/// Blocks for good if a signal is ending the process: a thread whose work a signal's
/// clean-up cut short must not end the process first, with an error and status 1 instead
/// of the signal.
pub fn wait_if_ending() {
    while ENDING.load(Ordering::SeqCst) {
        std::thread::park();
    }
}

/// Runs `publish` (the moves of a staging directory into place) with no signal handled
/// meanwhile: a signal that comes then ends the process after it.
pub fn while_publishing<T>(publish: impl FnOnce() -> T) -> T {
    let _held = pending();
    publish()
}

/// Serves as the cleaner: waits for the end of standard input (its parent has exited), then
/// removes every path given. It ignores the terminal's signals, which reach it with its
/// parent's. Only staging paths of its parent, or of a process that has ended, are removed:
/// anything else refuses the whole call before it waits, so that the command cannot delete a
/// dataset (or a running command's staging) that it is pointed at.
pub fn serve_remove_staging(paths: &[PathBuf]) -> crate::Result<()> {
    let parent = std::os::unix::process::parent_id();
    let removable =
        |p: &&PathBuf| staging_owner(p).is_some_and(|owner| owner == parent || has_ended(owner));
    if let Some(other) = paths.iter().find(|p| !removable(p)) {
        return Err(crate::Error::Invalid(format!(
            "{REMOVE_STAGING_COMMAND} is internal: it removes only the staging paths \
             (`.NAME.nczarrfs-PID.TOKEN`) of the `gen` or `copy` that started it, and {} is not \
             one; nothing removed",
            other.display()
        )));
    }
    for signal in SIGNALS {
        // SAFETY: ignoring a signal installs no handler code.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
    let mut rest = Vec::new();
    std::io::stdin()
        .lock()
        .read_to_end(&mut rest)
        .map_err(|e| crate::Error::io("standard input", e))?;
    paths.iter().for_each(|p| remove(p));
    Ok(())
}

/// The process whose staging sibling `path` is named as.
fn staging_owner(path: &Path) -> Option<u32> {
    staging_sibling(path.file_name()?).map(|(_, pid)| pid)
}

/// The destination's name and the process of a staging sibling named `file_name`:
/// `.NAME.nczarrfs-PID.TOKEN` (TOKEN random, see [`crate::create::Staging`]), or
/// `.NAME.nczarrfs-PID` as earlier versions named them. NAME is any bytes, as the
/// destination's name is; a long one is shortened
/// ([`crate::zmap::temp_files::name_stem`]), and what is returned is then that stem.
pub(crate) fn staging_sibling(file_name: &OsStr) -> Option<(&OsStr, u32)> {
    const INFIX: &[u8] = b".nczarrfs-";
    let rest = file_name.as_bytes().strip_prefix(b".")?;
    let at = rest.windows(INFIX.len()).rposition(|w| w == INFIX)?;
    let (name, rest) = (&rest[..at], &rest[at + INFIX.len()..]);
    let pid = match rest.iter().position(|&b| b == b'.') {
        Some(dot) if crate::zmap::temp_files::is_token(&rest[dot + 1..]) => &rest[..dot],
        Some(_) => return None,
        None => rest,
    };
    let digits = !pid.is_empty() && pid.iter().all(u8::is_ascii_digit);
    let pid = std::str::from_utf8(pid).ok()?.parse().ok()?;
    (!name.is_empty() && digits).then_some((OsStr::from_bytes(name), pid))
}

/// Whether process `pid` has ended (gone, or a zombie not yet reaped). A process that
/// starts a helper and then dies at once leaves the helper with another parent, so "not my
/// parent" does not tell a dead starter from a stranger.
pub(crate) fn has_ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses and may hold any.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| matches!(rest.trim_start().chars().next(), Some('Z' | 'X'))),
        Err(e) => e.kind() == std::io::ErrorKind::NotFound,
    }
}

/// Removes a staging directory or archive, telling why it could not.
fn remove(path: &Path) {
    let removed = match path.is_dir() {
        true => std::fs::remove_dir_all(path),
        false => std::fs::remove_file(path),
    };
    match removed {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            log::warn!("could not remove {}: {e}", path.display())
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    #[test]
    fn staging_siblings_are_told_by_their_name() {
        let owner = |p: &str| staging_owner(Path::new(p));
        assert_eq!(owner("/d/.ds.file.nczarrfs-42"), Some(42));
        assert_eq!(owner("/d/.ds.file.nczarrfs-42.0123456789abcdef"), Some(42));
        assert_eq!(owner("/d/.ds.file.nczarrfs-42.0123456789abcdef.old"), None);
        assert_eq!(owner("/d/.ds.file.nczarrfs-42.0123456789"), None);
        assert_eq!(owner(".a.zip.nczarrfs-42"), Some(42));
        assert_eq!(owner("/d/.x.nczarrfs-1.nczarrfs-42"), Some(42));
        assert_eq!(owner("/d/ds.file"), None);
        assert_eq!(owner("/d/ds.file.nczarrfs-42"), None);
        assert_eq!(owner("/d/..nczarrfs-42"), None);
        assert_eq!(owner("/d/.ds.file.nczarrfs-42.old"), None);
        assert_eq!(owner("/d/.ds.file.nczarrfs-"), None);
        assert_eq!(owner("/"), None);
        let named = OsStr::from_bytes(b".d\xff.file.nczarrfs-42.0123456789abcdef");
        assert_eq!(
            staging_sibling(named),
            Some((OsStr::from_bytes(b"d\xff.file"), 42))
        );
    }

    /// The staging sibling of a destination whose name is 250 bytes long (ncgen writes such
    /// names) fits in a file name, and is told as that destination's, and only its.
    #[test]
    fn staging_siblings_of_long_names_are_told_by_their_name() {
        let (shared, pid) = ("n".repeat(200), u32::MAX);
        let target = OsString::from(format!("{shared}{}.file", "a".repeat(45)));
        let other = OsString::from(format!("{shared}{}.file", "b".repeat(45)));
        let stem = crate::zmap::temp_files::name_stem(&target);
        let mut sibling = OsString::from(".");
        sibling.push(&stem);
        sibling.push(format!(".nczarrfs-{pid}.0123456789abcdef.old"));
        assert!(sibling.len() <= 255, "{}", sibling.len());
        let sibling = OsStr::from_bytes(sibling.as_bytes().strip_suffix(b".old").unwrap());
        assert_eq!(staging_sibling(sibling), Some((&*stem, pid)));
        assert_ne!(*crate::zmap::temp_files::name_stem(&other), *stem);
        assert_eq!(staging_owner(&Path::new("/d").join(sibling)), Some(pid));
    }

    #[test]
    fn a_running_process_has_not_ended_and_a_reaped_one_has() {
        assert!(!has_ended(std::process::id()));
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        assert!(has_ended(pid));
    }
}
