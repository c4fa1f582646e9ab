//! How soon writes may try again to store changed chunks that storage refused.
//!
//! Writes store changed chunks when the cache needs room or fills up (see the engine's
//! module). When storage refuses them (a server away, expired credentials), trying again at
//! every following write costs the server a request per changed chunk each time, thousands a
//! second for a stream of small writes, and makes each write wait for the requests' retries.
//! So a failed write-back is remembered with its error: until its window ends, writes leave
//! the changed chunks alone, and those that need room only changed chunks could make fail at
//! once with that error. Each failure in a row doubles the window, from a 32nd of the map's
//! limit ([`crate::zmap::ZMap::write_back_backoff`]) up to that limit; a store that succeeds
//! ends it.
//! A flush asked for (`fsync`, `close`, the unmount) always tries. A `close` respects the
//! window in one way: it asks a server held as down (see the S3 map) for an
//! answer at once only after the window, as an `fsync` always does. A close is not insisted
//! on as an fsync is, programs close many files in a row, and the kernel's release after a
//! failed close flushes again: each of them waiting a whole timeout on a silent server would
//! stall every closer, while one bounded wait per window still lets a close store the
//! changes soon after the server came back.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::{Error, Result};

/// The first window of a row of failures is the limit divided by this: five doublings reach
/// the limit (about 1 s, then 2, 4, 8, 15 and 30 s with the default S3 timeout).
const FIRST_WINDOW_DIVISOR: u32 = 32;

/// The memory of failed write-backs of one engine.
#[derive(Debug)]
pub(super) struct WriteBackPacing {
    /// The longest window; `None`: writes always try (local storage fails at once and costs
    /// nothing to ask again).
    limit: Option<Duration>,
    failed: Mutex<Option<Failure>>,
}

#[derive(Debug)]
struct Failure {
    /// The key whose store failed, and why.
    key: String,
    reason: String,
    /// When it failed.
    at: Instant,
    /// How long writes leave the changed chunks alone after `at`.
    window: Duration,
}

impl WriteBackPacing {
    /// Pacing with windows of at most `limit` (none: writes always try).
    pub(super) fn new(limit: Option<Duration>) -> Self {
        WriteBackPacing {
            limit,
            failed: Mutex::new(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<Failure>> {
        self.failed.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether a write may try to store changed chunks at `now`: `Err` with the failure
    /// remembered while its window lasts.
    pub(super) fn may_try(&self, now: Instant) -> Result<()> {
        match &*self.lock() {
            Some(f) if now < f.at + f.window => Err(Error::Storage {
                key: f.key.clone(),
                reason: format!(
                    "{} (a store failed {} s ago; until {} s after that failure, writes that \
                     need changed chunks stored fail at once, and a close does not wait for a \
                     server held as down; an fsync asks it at once)",
                    f.reason,
                    now.saturating_duration_since(f.at).as_secs(),
                    f.window.as_secs()
                ),
            }),
            _ => Ok(()),
        }
    }

    /// Records that storing changed chunks failed with `error` at `now`: the window that
    /// starts, doubled from the one before, or `None` without pacing.
    pub(super) fn failed(&self, error: &Error, now: Instant) -> Option<Duration> {
        let limit = self.limit?;
        let mut failed = self.lock();
        let window = failed
            .as_ref()
            .map_or(limit / FIRST_WINDOW_DIVISOR, |f| f.window.saturating_mul(2))
            .min(limit);
        let (key, reason) = match error {
            Error::Storage { key, reason } => (key.clone(), reason.clone()),
            other => (String::new(), other.to_string()),
        };
        *failed = Some(Failure {
            key,
            reason,
            at: now,
            window,
        });
        Some(window)
    }

    /// Records that changed chunks were stored: writes try again at once.
    pub(super) fn stored(&self) {
        *self.lock() = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refusal() -> Error {
        Error::Storage {
            key: "v/0.0".into(),
            reason: "ExpiredToken (HTTP 403)".into(),
        }
    }

    #[test]
    fn windows_double_up_to_the_limit_and_a_store_ends_them() {
        let secs = |s| Some(Duration::from_secs(s));
        let pacing = WriteBackPacing::new(secs(160));
        let t0 = Instant::now();
        assert!(pacing.may_try(t0).is_ok());
        assert_eq!(pacing.failed(&refusal(), t0), secs(5));
        let err = pacing
            .may_try(t0 + Duration::from_millis(4999))
            .unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("v/0.0") && text.contains("ExpiredToken"),
            "{text}"
        );
        assert!(pacing.may_try(t0 + Duration::from_secs(5)).is_ok());
        let windows: Vec<Option<Duration>> =
            (0..6).map(|_| pacing.failed(&refusal(), t0)).collect();
        assert_eq!(
            windows,
            [secs(10), secs(20), secs(40), secs(80), secs(160), secs(160)]
        );
        assert!(pacing.may_try(t0 + Duration::from_secs(159)).is_err());
        pacing.stored();
        assert!(pacing.may_try(t0).is_ok());
        assert_eq!(pacing.failed(&refusal(), t0), secs(5));
    }

    #[test]
    fn without_a_limit_writes_always_try() {
        let pacing = WriteBackPacing::new(None);
        let t0 = Instant::now();
        assert_eq!(pacing.failed(&refusal(), t0), None);
        assert!(pacing.may_try(t0).is_ok());
    }
}
