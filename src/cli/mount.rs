//! `nczarrfs mount`: serve a dataset as a FUSE filesystem.

use std::path::PathBuf;

use crate::fuse::{self, MountOptions, MountRequest};
use crate::Result;

/// Arguments of `mount`.
#[derive(Debug, clap::Args)]
pub struct MountArgs {
    /// The dataset: a path or a URL.
    pub location: String,
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
    pub options: Vec<String>,
    /// Stay in the foreground (default: become a daemon once the mount is ready).
    #[arg(short = 'f', long)]
    pub foreground: bool,
    /// Append log lines to this file (level from RUST_LOG, default warn; without it a daemon
    /// logs to syslog, `-f` to stderr).
    #[arg(long, value_name = "PATH")]
    pub log_file: Option<PathBuf>,
    /// Mount in this mount namespace (a file such as /proc/PID/ns/mnt), as mount(8)'s -N
    /// does; LOCATION, MOUNTPOINT and the log file are then paths in that namespace, relative
    /// ones taken from its root.
    #[arg(short = 'N', long, value_name = "NS")]
    pub namespace: Option<PathBuf>,
}

/// Runs `mount`.
pub fn run(args: MountArgs) -> Result<i32> {
    let options = MountOptions::parse(&args.options)?;
    let log_file = match (args.log_file, options.log_file.clone()) {
        (Some(flag), Some(option)) if flag != option => {
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
        namespace: args.namespace,
    })
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
