//! Reading a local file through a memory mapping without dying when it shrinks underneath.
//!
//! Decoding a compressed chunk straight from the file's page-cache pages saves copying it into
//! a buffer first (a fifth of the CPU a mount spends on zlib data). The danger of a mapping is
//! a file truncated by another process while it is read: touching a page past the new end
//! raises `SIGBUS`, which would kill the daemon. While [`read_mapped`] runs, a `SIGBUS` at an
//! address inside its mapping puts a zero page in place of the vanished one, and the read then
//! fails with an error instead; any other `SIGBUS` goes to the handler that was there before
//! (the Rust runtime's stack-overflow report) or to the default action.

use std::cell::Cell;
use std::fs::File;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

thread_local! {
    /// The mapping this thread is reading (start address, length; length 0: none).
    static GUARDED: Cell<(usize, usize)> = const { Cell::new((0, 0)) };
    /// Set by the handler when a page of that mapping vanished.
    static VANISHED: Cell<bool> = const { Cell::new(false) };
}

static PAGE_SIZE: AtomicUsize = AtomicUsize::new(4096);

/// The `SIGBUS` disposition replaced by ours, to which faults outside a guarded mapping go.
static PREVIOUS: OnceLock<Result<libc::sigaction, i32>> = OnceLock::new();

/// Runs `f` on the first `len` bytes of `file`, mapped. If the file shrinks while `f` reads
/// it, the bytes past the new end read as zeros and the result is an `UnexpectedEof` error
/// (whatever `f` returned is dropped).
pub fn read_mapped<R>(file: &File, len: u64, f: impl FnOnce(&[u8]) -> R) -> io::Result<R> {
    install_handler()?;
    let len = usize::try_from(len).map_err(|_| io::Error::other("file too large to map"))?;
    // SAFETY: the mapping is only read; a file truncated meanwhile is handled by the SIGBUS
    // handler (zero pages, then an error), and bytes changed meanwhile by another writer are
    // only ever data to decode, which the codecs check.
    let map = unsafe { memmap2::MmapOptions::new().len(len).populate().map(file)? };
    let guard = Guard(GUARDED.with(|g| g.replace((map.as_ptr() as usize, map.len()))));
    let result = f(&map);
    drop(guard);
    drop(map);
    if VANISHED.with(|v| v.replace(false)) {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "the file shrank while it was being read",
        ));
    }
    Ok(result)
}

/// Restores the thread's previously guarded mapping, even when the reader panics, so that the
/// handler never takes a later fault for one in a mapping that is gone.
struct Guard((usize, usize));

impl Drop for Guard {
    fn drop(&mut self) {
        GUARDED.with(|g| g.set(self.0));
    }
}

fn install_handler() -> io::Result<()> {
    let previous = PREVIOUS.get_or_init(|| {
        // SAFETY: sysconf, sigemptyset and sigaction are called with valid arguments; the
        // handler only touches const-initialised thread-locals, atomics and mmap, all usable
        // in a signal handler.
        unsafe {
            let page = libc::sysconf(libc::_SC_PAGESIZE);
            if page > 0 {
                PAGE_SIZE.store(page as usize, Ordering::Relaxed);
            }
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_sigbus as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
            libc::sigemptyset(&mut action.sa_mask);
            let mut previous: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(libc::SIGBUS, &action, &mut previous) == 0 {
                Ok(previous)
            } else {
                Err(io::Error::last_os_error().raw_os_error().unwrap_or(0))
            }
        }
    });
    match previous {
        Ok(_) => Ok(()),
        Err(errno) => Err(io::Error::from_raw_os_error(*errno)),
    }
}

extern "C" fn on_sigbus(
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid siginfo_t for a SA_SIGINFO handler.
    let address = unsafe { (*info).si_addr() } as usize;
    let (start, len) = GUARDED.with(Cell::get);
    if len > 0 && address >= start && address - start < len {
        let page = address & !(PAGE_SIZE.load(Ordering::Relaxed) - 1);
        // SAFETY: the page lies inside this thread's own read-only mapping, which nothing else
        // uses; replacing it with a zero page lets the faulting read go on.
        let zero = unsafe {
            libc::mmap(
                page as *mut libc::c_void,
                PAGE_SIZE.load(Ordering::Relaxed),
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            )
        };
        if zero != libc::MAP_FAILED {
            VANISHED.with(|v| v.set(true));
            return;
        }
    }
    match PREVIOUS.get() {
        Some(Ok(previous))
            if previous.sa_sigaction != libc::SIG_DFL && previous.sa_sigaction != libc::SIG_IGN =>
        {
            // SAFETY: the previous handler was installed for SIGBUS with these flags, so it
            // takes these arguments.
            unsafe {
                if previous.sa_flags & libc::SA_SIGINFO != 0 {
                    let handler: extern "C" fn(
                        libc::c_int,
                        *mut libc::siginfo_t,
                        *mut libc::c_void,
                    ) = std::mem::transmute(previous.sa_sigaction);
                    handler(signal, info, context);
                } else {
                    let handler: extern "C" fn(libc::c_int) =
                        std::mem::transmute(previous.sa_sigaction);
                    handler(signal);
                }
            }
        }
        // Not ours and nobody else's: the default action, taken when the access faults again
        // on return.
        // SAFETY: resetting a signal's disposition.
        _ => unsafe {
            libc::signal(signal, libc::SIG_DFL);
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file_of(len: usize) -> (tempfile::NamedTempFile, Vec<u8>) {
        let bytes: Vec<u8> = (0..len).map(|i| (i % 251) as u8 + 1).collect();
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(&bytes).unwrap();
        f.flush().unwrap();
        (f, bytes)
    }

    #[test]
    fn reads_the_whole_file() {
        let (f, bytes) = file_of(300_000);
        let got = read_mapped(f.as_file(), bytes.len() as u64, |m| m.to_vec()).unwrap();
        assert_eq!(got, bytes);
    }

    #[test]
    fn a_file_truncated_while_read_is_an_error_not_a_crash() {
        let (f, bytes) = file_of(1 << 20);
        let other = std::fs::OpenOptions::new()
            .write(true)
            .open(f.path())
            .unwrap();
        let result = read_mapped(f.as_file(), bytes.len() as u64, |m| {
            other.set_len(4096).unwrap();
            // Every page is touched; those past the new end are gone.
            let sum: u64 = m.iter().step_by(4096).map(|&b| u64::from(b)).sum();
            (sum, m[0])
        });
        let err = result.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
        // The thread reads the next file normally.
        let (g, bytes) = file_of(70_000);
        let got = read_mapped(g.as_file(), bytes.len() as u64, |m| m.to_vec()).unwrap();
        assert_eq!(got, bytes);
    }
}
