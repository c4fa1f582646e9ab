//! Where the binary's log lines go: env_logger's filter (`RUST_LOG`, default `warn`) and format
//! on stderr (the foreground, or a `--log-file` that stderr was redirected to), or syslog for a
//! mount daemon started without `--log-file`, which has no stderr worth writing to.

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use log::{Level, Log, Metadata, Record};

/// env_logger behind two adjustments: the syslog switch and the downgrade of fuser's
/// expected warnings.
struct Logger {
    inner: env_logger::Logger,
    syslog: AtomicBool,
}

static LOGGER: OnceLock<Logger> = OnceLock::new();

/// Installs the process-wide logger (once; later calls change nothing). Level from `RUST_LOG`,
/// default `warn`.
pub fn init() {
    let logger = LOGGER.get_or_init(|| Logger {
        inner: env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
            .build(),
        syslog: AtomicBool::new(false),
    });
    if log::set_logger(logger).is_ok() {
        log::set_max_level(logger.inner.filter());
    }
}

/// Sends every further log line to syslog (facility `daemon`, ident `nczarrfs`, with the pid)
/// instead of stderr.
pub fn to_syslog() {
    // SAFETY: openlog keeps the ident pointer, which is a 'static C string.
    unsafe { libc::openlog(c"nczarrfs".as_ptr(), libc::LOG_PID, libc::LOG_DAEMON) };
    if let Some(logger) = LOGGER.get() {
        logger.syslog.store(true, Ordering::SeqCst);
    }
}

/// Warnings of fuser's that are expected, so they become debug lines:
/// - it unmounts once more when its session ends, even after an external `umount` (or our own,
///   on SIGTERM) has done it; the kernel then answers `EINVAL` (not a mount point);
/// - it logs every request for an operation the filesystem does not offer (`getxattr`,
///   `listxattr`, …; a program's every `open` can bring one), answered `ENOSYS` as it should
///   be: at the default level they would flood the log;
/// - a reply the kernel refuses with `ENOENT`: the request was interrupted (its caller was
///   killed, or gave up on a signal) and the kernel dropped it while it was being served.
fn is_expected_fuser_warning(record: &Record) -> bool {
    if record.level() > Level::Warn || !record.target().starts_with("fuser") {
        return false;
    }
    let text = record.args().to_string();
    text.starts_with("[Not Implemented]")
        || text.starts_with("Failed to send FUSE reply: No such file or directory")
        || ["Unmount failed: ", "Failed to umount filesystem: "]
            .iter()
            .any(|p| {
                text.strip_prefix(p)
                    .is_some_and(|e| e.starts_with("Invalid argument"))
            })
}

fn syslog_priority(level: Level) -> libc::c_int {
    match level {
        Level::Error => libc::LOG_ERR,
        Level::Warn => libc::LOG_WARNING,
        Level::Info => libc::LOG_INFO,
        Level::Debug | Level::Trace => libc::LOG_DEBUG,
    }
}

impl Logger {
    fn emit(&self, record: &Record) {
        if !self.inner.matches(record) {
            return;
        }
        if !self.syslog.load(Ordering::Relaxed) {
            return self.inner.log(record);
        }
        let text = format!("{}: {}", record.target(), record.args()).replace('\0', "\\0");
        let Ok(text) = CString::new(text) else {
            return;
        };
        // SAFETY: a constant format taking one C string, and a valid C string.
        unsafe {
            libc::syslog(
                syslog_priority(record.level()),
                c"%s".as_ptr(),
                text.as_ptr(),
            )
        };
    }
}

impl Log for Logger {
    fn enabled(&self, metadata: &Metadata) -> bool {
        self.inner.enabled(metadata)
    }

    fn log(&self, record: &Record) {
        if !is_expected_fuser_warning(record) {
            return self.emit(record);
        }
        self.emit(
            &Record::builder()
                .args(*record.args())
                .level(Level::Debug)
                .target(record.target())
                .module_path(record.module_path())
                .file(record.file())
                .line(record.line())
                .build(),
        );
    }

    fn flush(&self) {
        self.inner.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_record<R>(level: Level, target: &str, text: &str, f: impl FnOnce(&Record) -> R) -> R {
        f(&Record::builder()
            .args(format_args!("{text}"))
            .level(level)
            .target(target)
            .build())
    }

    #[test]
    fn only_fusers_expected_warnings_are_downgraded() {
        let expected = [
            (
                "fuser::mnt",
                "Unmount failed: Invalid argument (os error 22)",
            ),
            (
                "fuser::session",
                "Failed to umount filesystem: Invalid argument (os error 22)",
            ),
            (
                "fuser",
                "[Not Implemented] getxattr(ino: 0x2, name: \"security.selinux\")",
            ),
            (
                "fuser::reply",
                "Failed to send FUSE reply: No such file or directory (os error 2)",
            ),
        ];
        for (target, text) in expected {
            for level in [Level::Warn, Level::Error] {
                assert!(
                    with_record(level, target, text, is_expected_fuser_warning),
                    "{text}"
                );
            }
        }
        let full = "Failed to send FUSE reply: No space left on device (os error 28)";
        assert!(!with_record(
            Level::Error,
            "fuser::reply",
            full,
            is_expected_fuser_warning
        ));
        let busy = "Unmount failed: Device or resource busy (os error 16)";
        assert!(!with_record(
            Level::Warn,
            "fuser::mnt",
            busy,
            is_expected_fuser_warning
        ));
        let ours = "Unmount failed: Invalid argument (os error 22)";
        assert!(!with_record(
            Level::Warn,
            "nczarrfs::fuse",
            ours,
            is_expected_fuser_warning
        ));
        let info = "[Not Implemented] ioctl";
        assert!(!with_record(
            Level::Info,
            "fuser",
            info,
            is_expected_fuser_warning
        ));
    }

    #[test]
    fn levels_map_to_syslog_priorities() {
        assert_eq!(syslog_priority(Level::Error), libc::LOG_ERR);
        assert_eq!(syslog_priority(Level::Warn), libc::LOG_WARNING);
        assert_eq!(syslog_priority(Level::Trace), libc::LOG_DEBUG);
    }
}
