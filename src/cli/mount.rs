//! `nczarrfs mount`: serve a dataset as a FUSE filesystem.

use std::path::{Path, PathBuf};

use crate::fuse::{self, MountOptions, MountRequest};
use crate::Result;

/// Arguments of `mount`.
#[derive(Debug, clap::Args)]
pub struct MountArgs {
    /// The dataset: a path (any bytes) or a URL.
    pub location: std::ffi::OsString,
    /// An existing directory to mount it on.
    pub mountpoint: PathBuf,
    /// Mount options, comma-separated: ro (default), rw, allow_other, allow_root,
    /// default_permissions, cache_size=BYTES[K|M|G|T], uid=N, gid=N, umask=OCTAL,
    /// ttl=SECONDS (0: never re-read), threads=N, readahead=BYTES, max_read=BYTES, direct_io,
    /// nosplice (splice: back on), fsname=NAME, auto_unmount, log_file=PATH (as --log-file),
    /// noatime/atime/nodev/nosuid/noexec/sync/async/dirsync (kernel flags; of two opposite
    /// ones the later wins), nofail (a dataset path with nothing at it: exit 0, nothing
    /// mounted). mount(8)'s other filesystem-independent options (defaults, nodiratime,
    /// user, comment=, x-*, ...) are accepted and ignored, except remount, which is refused.
    /// A flag takes no value: allow_other=0 is an error, not "off". A value holding a comma
    /// is quoted, as in fstab (fsname="obs,2024"), or escaped, as for libfuse (obs\,2024).
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<std::ffi::OsString>,
    /// Stay in the foreground (default: become a daemon once the mount is ready).
    #[arg(short = 'f', long)]
    pub foreground: bool,
    /// Append log lines to this file (level from RUST_LOG, default warn; without it a daemon
    /// logs to syslog, `-f` to stderr).
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<PathBuf>,
    /// Mount in this mount namespace: the PID of a process in it, or a file such as
    /// /proc/PID/ns/mnt, as mount(8)'s -N takes it; LOCATION, MOUNTPOINT and the log file are
    /// then paths in that namespace, relative ones taken from its root.
    #[arg(short = 'N', long, value_name = "NS")]
    pub namespace: Option<PathBuf>,
}

/// Whether the paths `a` and `b` name one file: the same path but for `.` components, or
/// the same existing file (through links, `..` or another spelling).
fn same_file(a: &Path, b: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let plain = |p: &Path| -> PathBuf {
        let p = std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf());
        p.components()
            .filter(|c| *c != std::path::Component::CurDir)
            .collect()
    };
    if plain(a) == plain(b) {
        return true;
    }
    match (std::fs::metadata(a), std::fs::metadata(b)) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

/// Runs `mount`.
pub fn run(args: MountArgs) -> Result<i32> {
    let options = MountOptions::parse(&args.options)?;
    let log_file = match (args.log_file, options.log_file.clone()) {
        (Some(flag), Some(option)) if !same_file(&flag, &option) => {
            return Err(crate::Error::Invalid(format!(
                "two log files given: --log-file {} and -o log_file={}; give one",
                flag.display(),
                option.display()
            )))
        }
        (flag, option) => flag.or(option),
    };
    fuse::mount(MountRequest {
        location: args.location,
        mountpoint: args.mountpoint,
        options,
        foreground: args.foreground,
        log_file,
        namespace: args.namespace.map(namespace_file),
    })
}

/// The file of the mount namespace `-N` names: a number is a process's, as mount(8) reads
/// it (a file named only by digits is given as `./123`).
fn namespace_file(given: PathBuf) -> PathBuf {
    let pid = given
        .to_str()
        .filter(|s| s.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|s| s.parse::<u32>().ok())
        .filter(|&pid| pid > 0);
    match pid {
        Some(pid) => PathBuf::from(format!("/proc/{pid}/ns/mnt")),
        None => given,
    }
}

/// Arguments of `detach-dead`.
#[derive(Debug, clap::Args)]
pub struct DetachDeadArgs {
    /// The mount point to check.
    pub mountpoint: PathBuf,
}

/// Runs `detach-dead`: says on stderr when it detached a mount, and nothing otherwise.
pub fn detach_dead(args: DetachDeadArgs) -> Result<i32> {
    if let Some(mountpoint) = fuse::detach_dead(&args.mountpoint)? {
        eprintln!(
            "nczarrfs: detached the dead mount at {}",
            mountpoint.display()
        );
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_given_by_number_is_that_process_s() {
        let ns = |s: &str| namespace_file(PathBuf::from(s));
        assert_eq!(ns("1499"), PathBuf::from("/proc/1499/ns/mnt"));
        assert_eq!(ns("/proc/7/ns/mnt"), PathBuf::from("/proc/7/ns/mnt"));
        assert_eq!(ns("./12"), PathBuf::from("./12"));
        assert_eq!(ns("0"), PathBuf::from("0"));
        assert_eq!(ns("+3"), PathBuf::from("+3"));
    }

    #[test]
    fn a_log_file_spelt_two_ways_is_one_file() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("obs.log");
        assert!(same_file(Path::new("./obs.log"), Path::new("obs.log")));
        assert!(same_file(&log, &dir.path().join(".").join("obs.log")));
        std::fs::write(&log, b"").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        assert!(same_file(&log, &dir.path().join("sub/../obs.log")));
        assert!(!same_file(&log, &dir.path().join("other.log")));
        assert!(!same_file(Path::new("a.log"), Path::new("b.log")));
    }
}
