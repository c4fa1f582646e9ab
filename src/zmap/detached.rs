//! Renames that a SIGKILL of the process asking for them cannot cut short.
//!
//! A flush replaces several metadata objects whose contents must agree (a grown dimension in
//! its group's object and the shapes in its arrays' objects), and netcdf-c refuses a dataset
//! where they disagree. Separate files cannot be replaced in one step, so the renames run in
//! a child process that shares this one's memory (`clone(CLONE_VM | CLONE_VFORK)`): a SIGKILL
//! of the daemon stops every one of its threads wherever they are, but not the child, which
//! finishes the sequence and exits. Only the calling thread waits for the child; the others
//! go on serving. The child makes nothing but `rename` system calls: it runs on the caller's
//! thread state (no allocation, no locks, no unwinding).

use std::ffi::{c_int, c_void, CString};
use std::io;
use std::sync::Once;

/// The child's stack: its frame is small and it calls nothing but `rename`.
const CHILD_STACK_BYTES: usize = 64 * 1024;

/// What the child works through; the parent reads `renamed` and `errno` once it has exited.
struct Job<'a> {
    pairs: &'a [(CString, CString)],
    renamed: usize,
    errno: c_int,
}

/// Runs in the child: renames each pair in order and stops at the first failure.
extern "C" fn rename_in_child(job: *mut c_void) -> c_int {
    // SAFETY: `job` is the parent's `Job`, alive until this child has exited (CLONE_VFORK
    // suspends the parent's thread until then, and the parent's death keeps the memory mapped
    // for as long as the child uses it).
    let job = unsafe { &mut *job.cast::<Job>() };
    for (from, to) in job.pairs {
        // SAFETY: both are NUL-terminated C strings owned by the job.
        if unsafe { libc::rename(from.as_ptr(), to.as_ptr()) } != 0 {
            // SAFETY: errno of the parent's thread, which is suspended and reads it later.
            job.errno = unsafe { *libc::__errno_location() };
            return 1;
        }
        job.renamed += 1;
    }
    0
}

/// Renames every `(from, to)` pair in order, stopping at the first failure, in a child
/// process that outlives a SIGKILL of this one. Returns how many were renamed and, if one
/// failed, its error (the pair at that index was not renamed).
///
/// Where the child cannot be started (a seccomp policy, no memory) the renames run in this
/// process, as plain renames.
pub(super) fn rename_in_order_detached(pairs: &[(CString, CString)]) -> (usize, Option<io::Error>) {
    let mut job = Job {
        pairs,
        renamed: 0,
        errno: 0,
    };
    match run_in_child(&mut job) {
        Ok(()) => {
            let error =
                (job.renamed < pairs.len()).then(|| io::Error::from_raw_os_error(job.errno));
            (job.renamed, error)
        }
        Err(e) => {
            static WARNED: Once = Once::new();
            WARNED.call_once(|| {
                log::warn!("multi-object writes rename in this process (no child process: {e}): a SIGKILL can leave them half done")
            });
            rename_in_this_process(pairs)
        }
    }
}

fn rename_in_this_process(pairs: &[(CString, CString)]) -> (usize, Option<io::Error>) {
    for (renamed, (from, to)) in pairs.iter().enumerate() {
        // SAFETY: both are NUL-terminated C strings.
        if unsafe { libc::rename(from.as_ptr(), to.as_ptr()) } != 0 {
            return (renamed, Some(io::Error::last_os_error()));
        }
    }
    (pairs.len(), None)
}

/// Starts the child on `job` and waits until it has exited.
fn run_in_child(job: &mut Job) -> io::Result<()> {
    let mut stack = vec![0u8; CHILD_STACK_BYTES];
    // The stack grows down from its end, which must be 16-byte aligned.
    let top = (stack.as_mut_ptr() as usize + CHILD_STACK_BYTES) & !15;
    // The child starts with this thread's signal mask: all blocked, so that no handler of the
    // daemon's runs on the child (SIGKILL and SIGSTOP cannot be blocked, and need not be).
    let old_mask = block_all_signals()?;
    // SAFETY: the child runs `rename_in_child` on its own stack and touches only `job`;
    // CLONE_VFORK returns here only once it has exited, so `job` and `stack` outlive it.
    let pid = unsafe {
        libc::clone(
            rename_in_child,
            top as *mut c_void,
            libc::CLONE_VM | libc::CLONE_VFORK | libc::CLONE_FS | libc::CLONE_FILES | libc::SIGCHLD,
            (job as *mut Job).cast::<c_void>(),
        )
    };
    let cloned = if pid < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    };
    restore_signal_mask(&old_mask);
    cloned?;
    reap(pid);
    Ok(())
}

fn block_all_signals() -> io::Result<libc::sigset_t> {
    // SAFETY: sigset_t is plain data, initialised by sigfillset/pthread_sigmask.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        match libc::pthread_sigmask(libc::SIG_SETMASK, &all, &mut old) {
            0 => Ok(old),
            e => Err(io::Error::from_raw_os_error(e)),
        }
    }
}

fn restore_signal_mask(mask: &libc::sigset_t) {
    // SAFETY: restores a mask pthread_sigmask returned.
    unsafe {
        libc::pthread_sigmask(libc::SIG_SETMASK, mask, std::ptr::null_mut());
    }
}

/// Collects the exited child's status so that it leaves no zombie. ECHILD (SIGCHLD ignored,
/// so the kernel reaped it) is fine too.
fn reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a valid out pointer.
    while unsafe { libc::waitpid(pid, &mut status, libc::__WALL) } < 0
        && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
    {}
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::path::{Path, PathBuf};
    use std::time::{Duration, Instant};

    fn c_path(path: &Path) -> CString {
        CString::new(path.as_os_str().as_bytes()).unwrap()
    }

    /// `count` staged files in `dir` and the pairs renaming them to their targets.
    fn staged(dir: &Path, count: usize) -> (Vec<PathBuf>, Vec<(CString, CString)>) {
        let mut targets = Vec::new();
        let mut pairs = Vec::new();
        for i in 0..count {
            let temp = dir.join(format!("temp{i}"));
            let target = dir.join(format!("object{i}"));
            std::fs::write(&temp, i.to_string()).unwrap();
            pairs.push((c_path(&temp), c_path(&target)));
            targets.push(target);
        }
        (targets, pairs)
    }

    #[test]
    fn renames_in_order_and_stops_at_the_first_failure() {
        let dir = tempfile::tempdir().unwrap();
        let (targets, mut pairs) = staged(dir.path(), 3);
        // The second source does not exist, so it and everything after it stay unrenamed.
        pairs[1].0 = c_path(&dir.path().join("missing"));
        let (renamed, error) = rename_in_order_detached(&pairs);
        assert_eq!(renamed, 1);
        assert_eq!(error.unwrap().kind(), io::ErrorKind::NotFound);
        assert_eq!(std::fs::read_to_string(&targets[0]).unwrap(), "0");
        assert!(!targets[1].exists() && !targets[2].exists());
        assert!(dir.path().join("temp2").exists());

        let (targets, pairs) = staged(dir.path(), 3);
        assert!(matches!(rename_in_order_detached(&pairs), (3, None)));
        for (i, target) in targets.iter().enumerate() {
            assert_eq!(std::fs::read_to_string(target).unwrap(), i.to_string());
        }
    }

    fn wait_until(deadline: Duration, mut done: impl FnMut() -> bool) -> bool {
        let start = Instant::now();
        while !done() {
            if start.elapsed() > deadline {
                return false;
            }
        }
        true
    }

    /// A process SIGKILLed while its renames run: the renames still all happen. The
    /// sequence is long enough (thousands of renames) that the kill lands inside it; a run
    /// where it did not is repeated with a longer one.
    #[test]
    fn a_sigkill_of_the_caller_does_not_stop_the_renames() {
        for count in [5_000, 20_000, 80_000] {
            let dir = tempfile::tempdir().unwrap();
            let (targets, pairs) = staged(dir.path(), count);
            // SAFETY: the child only renames (glibc makes malloc usable after fork) and exits.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
            if pid == 0 {
                rename_in_order_detached(&pairs);
                // SAFETY: leaves the forked test process without running the harness's code.
                unsafe { libc::_exit(0) };
            }
            assert!(wait_until(Duration::from_secs(60), || targets[0].exists()));
            // SAFETY: kills and reaps our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, std::ptr::null_mut(), 0);
            }
            let cut = !targets[count - 1].exists();
            let all_renamed = wait_until(Duration::from_secs(20), || targets[count - 1].exists());
            assert!(
                all_renamed,
                "{count} renames stopped when their caller was killed"
            );
            assert!(targets.iter().all(|t| t.exists()));
            if cut {
                return;
            }
        }
        panic!("the kill never landed inside the renames");
    }
}
