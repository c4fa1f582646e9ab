use std::io::Write;

fn main() {
    // No transparent huge pages (mimalloc is built without them too, for what it allocates
    // before this line): every thread's first allocation cost a zeroed 2 MiB page, which
    // made opening a dataset of many variables 2 ms slower and a mount's peak RSS 14-20 MB
    // larger, while large reads run as fast without them (bench/RESULTS.md, thirteenth
    // round). This covers systems whose THP mode is "always"; the flag passes to children.
    // SAFETY: PR_SET_THP_DISABLE takes plain integers and changes only this process's flag.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    let cli = nczarrfs::cli::parse();
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

/// Runs [`note_closed_standard_output`] as the process starts, before the Rust runtime puts
/// `/dev/null` on a closed descriptor 1, which would make every write to it succeed.
#[used]
#[link_section = ".init_array"]
static NOTE_CLOSED_STANDARD_OUTPUT: extern "C" fn() = note_closed_standard_output;

/// Tells the command line whether descriptor 1 is closed.
extern "C" fn note_closed_standard_output() {
    // SAFETY: F_GETFD only reads the descriptor's flags.
    if unsafe { libc::fcntl(1, libc::F_GETFD) } == -1 {
        nczarrfs::cli::note_standard_output_closed();
    }
}
