use std::io::Write;

use clap::Parser;

fn main() {
    // No transparent huge pages (mimalloc is built without them too, for what it allocates
    // before this line): every thread's first allocation cost a zeroed 2 MiB page, which
    // made opening a dataset of many variables 2 ms slower and a mount's peak RSS 14-20 MB
    // larger, while large reads run as fast without them (bench/RESULTS.md, thirteenth
    // round). This covers systems whose THP mode is "always"; the flag passes to children.
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and changes only this process's flag.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    let cli = match nczarrfs::cli::Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => match nczarrfs::cli::parse_refusal(&err) {
            Some((message, status)) => {
                let _ = writeln!(std::io::stderr(), "nczarrfs: {message}");
                std::process::exit(status);
            }
            None => err.exit(),
        },
    };
    nczarrfs::fuse::logging::init();
    match nczarrfs::cli::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            // Not eprintln!, which panics when stderr is a closed pipe: the exit status
            // still tells.
            let _ = writeln!(std::io::stderr(), "nczarrfs: {err}");
            let usage = matches!(err, nczarrfs::Error::Usage(_));
            std::process::exit(if usage { 2 } else { 1 });
        }
    }
}

/// mimalloc rather than glibc's allocator: threads that parse metadata or decode chunks grow
/// glibc's per-thread arenas a few pages at a time (one `mprotect` each), and large buffers
/// freed by one block of work come back as fresh pages for the next.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
