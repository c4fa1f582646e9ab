//! Where the binary's log lines go: env_logger's filter (`RUST_LOG`, default `warn`) and format
//! on stderr (the foreground, or a `--log-file` that stderr was redirected to), or syslog for a
//! mount daemon started without `--log-file`, which has no stderr worth writing to.

use std::ffi::CString;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use log::{Level, Log, Metadata, Record};

/// env_logger behind two adjustments: the syslog switch and the expected-unmount downgrade.
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

/// fuser unmounts once more when its session ends, even after an external `umount` (or our
/// own, on SIGTERM) has done it; the kernel then answers `EINVAL` (not a mount point), which
/// fuser logs as an error. It is expected, so it becomes a debug line.
fn is_expected_unmount_failure(record: &Record) -> bool {
    record.level() == Level::Error
        && record.target().starts_with("fuser::mnt")
        && record
            .args()
            .to_string()
            .starts_with("Unmount failed: Invalid argument")
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
        if !is_expected_unmount_failure(record) {
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
    fn only_fusers_einval_unmount_error_is_expected() {
        let einval = "Unmount failed: Invalid argument (os error 22)";
        let target = "fuser::mnt::fuse_pure";
        assert!(with_record(
            Level::Error,
            target,
            einval,
            is_expected_unmount_failure
        ));
        let busy = "Unmount failed: Device or resource busy (os error 16)";
        assert!(!with_record(
            Level::Error,
            target,
            busy,
            is_expected_unmount_failure
        ));
        assert!(!with_record(
            Level::Error,
            "nczarrfs::fuse",
            einval,
            is_expected_unmount_failure
        ));
    }

    #[test]
    fn levels_map_to_syslog_priorities() {
        assert_eq!(syslog_priority(Level::Error), libc::LOG_ERR);
        assert_eq!(syslog_priority(Level::Warn), libc::LOG_WARNING);
        assert_eq!(syslog_priority(Level::Trace), libc::LOG_DEBUG);
    }
}
