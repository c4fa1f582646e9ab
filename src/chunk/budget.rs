//! A budget of bytes that chunks may hold outside the chunk cache while they are fetched and
//! decoded (their stored bytes and their decoded values), shared by every read of a mount.
//!
//! Without it each concurrent request and prefetch holds its chunks' buffers at once: eight
//! readers of 4 MiB chunks on S3 held about 64 MiB beside the cache, and two prefetches of a
//! 16 MiB window as much again. A read takes its share before it fetches anything and waits,
//! holding nothing, while the budget is taken, in the order the reads came; a prefetch takes
//! what is free at once and loads that part, and waits like a read only when nothing is free
//! (see `ChunkEngine::prefetch_share`); its share goes back chunk by chunk, as each is cached,
//! and on S3 each chunk cached lets it request the next (see `PreloadFeed`).
//! One read needing more than the whole budget goes alone once nothing else is in flight.

use std::collections::VecDeque;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

#[derive(Debug, Default)]
struct State {
    /// Bytes granted and not yet given back.
    used: usize,
    /// Tickets of the reads waiting, first come first.
    waiting: VecDeque<u64>,
    next_ticket: u64,
}

/// Bytes in flight outside the cache, at most `limit` (see the module documentation).
#[derive(Debug)]
pub(crate) struct ByteBudget {
    limit: usize,
    state: Mutex<State>,
    changed: Condvar,
}

/// A share of a [`ByteBudget`], given back when dropped.
#[derive(Debug)]
pub(crate) struct Grant {
    budget: Arc<ByteBudget>,
    bytes: usize,
}

impl Grant {
    /// Bytes this grant holds.
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Moves `bytes` of this grant (all it has, if less) into a grant of their own, to be
    /// given back on their own: a batch's share, split by chunk.
    pub(crate) fn split_off(&mut self, bytes: usize) -> Grant {
        let moved = bytes.min(self.bytes);
        self.bytes -= moved;
        Grant {
            budget: Arc::clone(&self.budget),
            bytes: moved,
        }
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        if self.bytes == 0 {
            return;
        }
        self.budget.lock().used -= self.bytes;
        self.budget.changed.notify_all();
    }
}

impl ByteBudget {
    /// A budget of `limit` bytes.
    pub(crate) fn new(limit: usize) -> Arc<ByteBudget> {
        Arc::new(ByteBudget {
            limit,
            state: Mutex::new(State::default()),
            changed: Condvar::new(),
        })
    }

    /// The bytes that may be in flight at once.
    pub(crate) fn limit(&self) -> usize {
        self.limit
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether `bytes` more may be granted now: they fit, or nothing is in flight.
    fn admits(&self, state: &State, bytes: usize) -> bool {
        state.used == 0 || state.used.saturating_add(bytes) <= self.limit
    }

    /// `bytes` of the budget, waiting for them behind the reads that asked first. The caller
    /// must hold no other grant (it would wait for itself).
    pub(crate) fn acquire(self: &Arc<Self>, bytes: usize) -> Grant {
        let mut state = self.lock();
        if state.waiting.is_empty() && self.admits(&state, bytes) {
            state.used += bytes;
            return self.grant(bytes);
        }
        let ticket = state.next_ticket;
        state.next_ticket += 1;
        state.waiting.push_back(ticket);
        while state.waiting.front() != Some(&ticket) || !self.admits(&state, bytes) {
            state = self.changed.wait(state).unwrap_or_else(|e| e.into_inner());
        }
        state.waiting.pop_front();
        state.used += bytes;
        drop(state);
        // The next in line may fit too.
        self.changed.notify_all();
        self.grant(bytes)
    }

    /// As many whole `unit`s of the budget as are free now, at most `bytes` (at least one
    /// unit, which goes alone when nothing is in flight); `None` when not even one unit is
    /// free or a read is waiting. For a prefetch, which may load less than it was asked.
    pub(crate) fn try_acquire_part(self: &Arc<Self>, bytes: usize, unit: usize) -> Option<Grant> {
        let mut state = self.lock();
        if !state.waiting.is_empty() || bytes == 0 || unit == 0 {
            return None;
        }
        let free_units = if state.used == 0 {
            (self.limit / unit).max(1)
        } else {
            self.limit.saturating_sub(state.used) / unit
        };
        let take = bytes.div_ceil(unit).min(free_units) * unit;
        if take == 0 {
            return None;
        }
        state.used += take;
        Some(self.grant(take))
    }

    fn grant(self: &Arc<Self>, bytes: usize) -> Grant {
        Grant {
            budget: Arc::clone(self),
            bytes,
        }
    }

    /// Bytes granted now (for tests).
    #[cfg(test)]
    pub(super) fn used(&self) -> usize {
        self.lock().used
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn grants_never_exceed_the_limit_and_come_back_when_dropped() {
        let budget = ByteBudget::new(10);
        let a = budget.acquire(6);
        assert!(budget.try_acquire_part(5, 5).is_none());
        let b = budget.try_acquire_part(4, 4).expect("fits");
        assert_eq!(budget.used(), 10);
        drop(a);
        drop(b);
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_prefetch_takes_the_whole_units_that_are_free() {
        let budget = ByteBudget::new(10);
        let part = budget.try_acquire_part(12, 3).expect("three units fit");
        assert_eq!(part.bytes(), 9);
        assert!(budget.try_acquire_part(12, 3).is_none());
        drop(part);
        // A unit larger than the whole budget goes alone.
        let alone = budget.try_acquire_part(40, 20).expect("alone");
        assert_eq!(alone.bytes(), 20);
        assert!(budget.try_acquire_part(1, 1).is_none());
    }

    #[test]
    fn a_split_grant_gives_its_parts_back_one_by_one() {
        let budget = ByteBudget::new(10);
        let mut batch = budget.acquire(9);
        let first = batch.split_off(3);
        let second = batch.split_off(3);
        // No more than the grant holds.
        let rest = batch.split_off(5);
        assert_eq!((first.bytes(), second.bytes(), rest.bytes()), (3, 3, 3));
        drop(batch);
        assert_eq!(budget.used(), 9);
        drop(first);
        assert_eq!(budget.used(), 6);
        drop((second, rest));
        assert_eq!(budget.used(), 0);
    }

    #[test]
    fn a_share_larger_than_the_budget_goes_alone() {
        let budget = ByteBudget::new(10);
        let big = budget.acquire(25);
        assert!(budget.try_acquire_part(1, 1).is_none());
        drop(big);
        let small = budget.acquire(1);
        assert!(budget.try_acquire_part(25, 25).is_none());
        drop(small);
        assert!(budget.try_acquire_part(25, 25).is_some());
    }

    /// Many threads asking at once: the bytes granted at any moment stay within the limit
    /// (a single share may exceed it only alone), and every one is served.
    #[test]
    fn concurrent_readers_wait_for_their_turn() {
        let budget = ByteBudget::new(16);
        let peak = Arc::new(AtomicUsize::new(0));
        let held = Arc::new(AtomicUsize::new(0));
        std::thread::scope(|scope| {
            for i in 0..8 {
                let (budget, peak, held) = (Arc::clone(&budget), &peak, &held);
                scope.spawn(move || {
                    for j in 0..50 {
                        let bytes = [4, 8, 12, 20][(i + j) % 4];
                        let _grant = budget.acquire(bytes);
                        let now = held.fetch_add(bytes, Ordering::SeqCst) + bytes;
                        assert!(now <= 16 || now == bytes, "{now} bytes held");
                        peak.fetch_max(now, Ordering::SeqCst);
                        std::thread::sleep(Duration::from_micros(50));
                        held.fetch_sub(bytes, Ordering::SeqCst);
                    }
                });
            }
        });
        assert_eq!(budget.used(), 0);
        assert!(peak.load(Ordering::SeqCst) <= 20);
    }

    #[test]
    fn a_waiting_read_keeps_later_prefetches_out() {
        let budget = ByteBudget::new(10);
        let first = budget.acquire(8);
        std::thread::scope(|scope| {
            let waiter = scope.spawn(|| drop(budget.acquire(8)));
            while budget.lock().waiting.is_empty() {
                std::thread::yield_now();
            }
            // 2 bytes are free, but a read is waiting for more: a prefetch must not take them.
            assert!(budget.try_acquire_part(2, 1).is_none());
            drop(first);
            waiter.join().unwrap();
        });
        assert_eq!(budget.used(), 0);
    }
}
