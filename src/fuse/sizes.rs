//! What the kernel may believe of the sizes of generated files (`@header.cdl`,
//! `@metadata.json`, attribute files) on a read-only mount with a staleness window.
//!
//! Read through the page cache, a file ends where the kernel's size says, so a reader gets
//! its end of file without a second `READ`; opened for direct I/O, every read, the one that
//! finds the end included, is a request. But the page cache is only right when the size the
//! kernel holds is the length of the content the open serves: a size from before the dataset
//! changed would cut the new content short. The kernel keeps a size it was told until the
//! entry's TTL runs out, so an open may use the page cache only when no other size was
//! reported for the file within the last TTL.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Added to the TTL: the kernel starts a reply's TTL when it takes the reply, a little after
/// the size was recorded here, and replies of concurrent threads may reach it out of order.
const MARGIN: Duration = Duration::from_secs(1);

/// The sizes reported to the kernel, per inode.
#[derive(Debug, Default)]
pub(super) struct ReportedSizes {
    sizes: Mutex<HashMap<u64, Reported>>,
}

#[derive(Debug, Clone, Copy)]
struct Reported {
    size: u64,
    /// When a size other than the one before was last reported (`None`: never).
    changed: Option<Instant>,
}

impl ReportedSizes {
    /// Notes that `size` is about to be reported for `ino` (before the reply is sent, so that
    /// a concurrent open never misses it).
    pub(super) fn record(&self, ino: u64, size: u64, now: Instant) {
        let mut sizes = self.sizes.lock().unwrap_or_else(|e| e.into_inner());
        sizes
            .entry(ino)
            .and_modify(|r| {
                if r.size != size {
                    *r = Reported {
                        size,
                        changed: Some(now),
                    };
                }
            })
            .or_insert(Reported {
                size,
                changed: None,
            });
    }

    /// Whether every size the kernel may still hold for `ino` with a valid TTL is `len`:
    /// `len` was the last size reported, and no other was reported within `ttl` (plus a
    /// margin) before `now`.
    pub(super) fn settled(&self, ino: u64, len: u64, ttl: Duration, now: Instant) -> bool {
        let sizes = self.sizes.lock().unwrap_or_else(|e| e.into_inner());
        sizes.get(&ino).is_some_and(|r| {
            r.size == len
                && r.changed
                    .is_none_or(|t| now.saturating_duration_since(t) > ttl + MARGIN)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(5);

    #[test]
    fn a_size_never_reported_is_not_settled() {
        let s = ReportedSizes::default();
        assert!(!s.settled(7, 10, TTL, Instant::now()));
    }

    #[test]
    fn the_only_size_ever_reported_is_settled_at_once() {
        let s = ReportedSizes::default();
        let t = Instant::now();
        s.record(7, 10, t);
        s.record(7, 10, t + Duration::from_millis(1));
        assert!(s.settled(7, 10, TTL, t));
        assert!(
            !s.settled(7, 11, TTL, t),
            "another length than the kernel's"
        );
        assert!(!s.settled(8, 10, TTL, t), "another inode");
    }

    #[test]
    fn after_a_change_the_old_size_may_live_one_ttl_and_a_margin() {
        let s = ReportedSizes::default();
        let t = Instant::now();
        s.record(7, 10, t);
        let changed = t + Duration::from_secs(2);
        s.record(7, 12, changed);
        for late in [Duration::ZERO, TTL, TTL + MARGIN] {
            assert!(!s.settled(7, 12, TTL, changed + late), "{late:?} after");
        }
        assert!(s.settled(
            7,
            12,
            TTL,
            changed + TTL + MARGIN + Duration::from_millis(1)
        ));
        // Repeating the new size does not restart the window; going back does.
        s.record(7, 12, changed + TTL);
        assert!(s.settled(7, 12, TTL, changed + TTL + 2 * MARGIN));
        let back = changed + TTL + 2 * MARGIN;
        s.record(7, 10, back);
        assert!(!s.settled(7, 10, TTL, back + TTL));
        assert!(
            !s.settled(7, 12, TTL, back + 2 * TTL),
            "no longer the last size"
        );
    }
}
