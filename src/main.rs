use std::io::Write;

use clap::Parser;

fn main() {
    let cli = nczarrfs::cli::Cli::parse();
    nczarrfs::fuse::logging::init();
    match nczarrfs::cli::run(cli) {
        Ok(code) => std::process::exit(code),
        Err(err) => {
            // Not eprintln!, which panics when stderr is a closed pipe: the exit status
            // still tells.
            let _ = writeln!(std::io::stderr(), "nczarrfs: {err}");
            std::process::exit(1);
        }
    }
}

/// mimalloc rather than glibc's allocator: threads that parse metadata or decode chunks grow
/// glibc's per-thread arenas a few pages at a time (one `mprotect` each), and large buffers
/// freed by one block of work come back as fresh pages for the next.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;
