//! Byte extents a `rw` mount remembers between writes to `data` files: what was written since
//! a handle opened with `O_TRUNC` (the rest reads zeros once it is flushed, as in a truncated
//! file), and where appends through an open file continue when the last one ended inside a
//! record.

use std::collections::{BTreeMap, HashMap};
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::model::VarId;

/// Disjoint, non-adjacent byte ranges.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct RangeSet {
    /// Start → end of each range.
    ranges: BTreeMap<u64, u64>,
}

impl RangeSet {
    /// Adds `range`, merging it with the ranges it touches.
    pub fn insert(&mut self, range: Range<u64>) {
        if range.is_empty() {
            return;
        }
        let (mut start, mut end) = (range.start, range.end);
        // The range before may reach into (or up to) this one.
        if let Some((&s, &e)) = self.ranges.range(..=start).next_back() {
            if e >= start {
                start = s;
                end = end.max(e);
            }
        }
        let touched: Vec<u64> = self.ranges.range(start..=end).map(|(&s, _)| s).collect();
        for s in touched {
            if let Some(e) = self.ranges.remove(&s) {
                end = end.max(e);
            }
        }
        self.ranges.insert(start, end);
    }

    /// The parts of `0..end` that no range covers, in order.
    pub fn gaps(&self, end: u64) -> Vec<Range<u64>> {
        let mut gaps = Vec::new();
        let mut at = 0;
        for (&s, &e) in &self.ranges {
            if s >= end {
                break;
            }
            if s > at {
                gaps.push(at..s);
            }
            at = at.max(e);
        }
        if at < end {
            gaps.push(at..end);
        }
        gaps
    }
}

/// What was written since a `data` handle opened with `O_TRUNC`, through it or any other.
/// netCDF cannot shrink a variable, so the file keeps its size; what is left unwritten becomes
/// zeros when the handle is flushed, as a truncated file reads zeros past what was written
/// again. `cp` relies on that:
/// it skips the holes of a sparse source, expecting the target to read zeros there.
#[derive(Debug)]
pub struct Truncation {
    covered: RangeSet,
    /// The end of the file as this handle made it: its size at the open, or further where the
    /// handle wrote or truncated past that.
    end: u64,
}

impl Truncation {
    /// A handle opened on a file of `size` bytes.
    pub fn new(size: u64) -> Self {
        Truncation {
            covered: RangeSet::default(),
            end: size,
        }
    }

    /// The handle wrote `range`.
    pub fn wrote(&mut self, range: Range<u64>) {
        self.end = self.end.max(range.end);
        self.covered.insert(range);
    }

    /// Another handle wrote `range` after this one's open: on a local file the truncation
    /// came first, so those bytes keep what was written. (The file's end is not this
    /// handle's doing, so it stays.)
    pub fn overwritten(&mut self, range: Range<u64>) {
        self.covered.insert(range);
    }

    /// The handle grew the file to `size` (a truncate): the new bytes are a hole.
    pub fn grew_to(&mut self, size: u64) {
        self.end = self.end.max(size);
    }

    /// The ranges to zero, in a file of `size` bytes. Each range zeroed is then recorded with
    /// [`Truncation::wrote`], so that a later flush does not zero what another writer put
    /// there since.
    pub fn unwritten(&self, size: u64) -> Vec<Range<u64>> {
        self.covered.gaps(self.end.min(size))
    }
}

/// The [`Truncation`]s of the `data` files open now, by variable, so that a write through
/// any handle counts as written for every truncating open of its variable before it.
#[derive(Debug, Default)]
pub struct OpenTruncations {
    /// How many are open: a write looks no further while none is.
    count: AtomicUsize,
    by_var: Mutex<HashMap<VarId, Vec<Arc<Mutex<Truncation>>>>>,
}

impl OpenTruncations {
    /// A handle opened `var`'s file of `size` bytes with `O_TRUNC`: its truncation, open
    /// until [`OpenTruncations::close`].
    pub fn open(&self, var: VarId, size: u64) -> Arc<Mutex<Truncation>> {
        let truncation = Arc::new(Mutex::new(Truncation::new(size)));
        lock(&self.by_var)
            .entry(var)
            .or_default()
            .push(Arc::clone(&truncation));
        self.count.fetch_add(1, Ordering::SeqCst);
        truncation
    }

    /// The handle of `truncation` (opened on `var`) is closed.
    pub fn close(&self, var: VarId, truncation: &Arc<Mutex<Truncation>>) {
        let mut by_var = lock(&self.by_var);
        let Some(open) = by_var.get_mut(&var) else {
            return;
        };
        let before = open.len();
        open.retain(|t| !Arc::ptr_eq(t, truncation));
        if open.len() < before {
            self.count.fetch_sub(1, Ordering::SeqCst);
        }
        if open.is_empty() {
            by_var.remove(&var);
        }
    }

    /// Some handle wrote `range` of `var`'s file: every truncation of it open now keeps
    /// those bytes.
    pub fn wrote(&self, var: VarId, range: Range<u64>) {
        if self.count.load(Ordering::SeqCst) == 0 {
            return;
        }
        if let Some(open) = lock(&self.by_var).get(&var) {
            for truncation in open {
                lock(truncation).overwritten(range.clone());
            }
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Where the next append through one open file continues when its last one ended inside a
/// record. The file's size is then the record's end (the rest of the record reads as fill),
/// but a writer appending a stream in pieces that do not fall on records (`cat >> data`)
/// must continue where its last piece ended, not after the fill. Another open file appends
/// after the fill, at the end of the file, as POSIX says.
#[derive(Debug, Default)]
pub struct AppendTail {
    /// The `data` size right after the last append, and where that append ended.
    last: Option<(u64, u64)>,
}

impl AppendTail {
    /// Where an append writes to a `data` file of `size` bytes.
    pub fn offset(&self, size: u64) -> u64 {
        match self.last {
            Some((at_size, end)) if at_size == size => end,
            _ => size,
        }
    }

    /// Records an append of `written`, after which the file is `size` bytes.
    pub fn appended(&mut self, written: Range<u64>, size: u64) {
        self.last = (written.end < size).then_some((size, written.end));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The set covers exactly the bytes inserted, as a bitmap of them says.
        #[test]
        fn range_set_gaps_are_the_bytes_never_inserted(
            inserts in proptest::collection::vec((0u64..200, 0u64..40), 0..30),
            end in 0u64..260,
        ) {
            let mut set = RangeSet::default();
            let mut covered = [false; 260];
            for (start, len) in inserts {
                set.insert(start..start + len);
                for b in &mut covered[start as usize..(start + len) as usize] {
                    *b = true;
                }
            }
            let mut gap_bytes = [false; 260];
            let gaps = set.gaps(end);
            for pair in gaps.windows(2) {
                prop_assert!(pair[0].end < pair[1].start, "gaps not disjoint and apart: {gaps:?}");
            }
            for g in &gaps {
                prop_assert!(!g.is_empty() && g.end <= end);
                for b in &mut gap_bytes[g.start as usize..g.end as usize] {
                    *b = true;
                }
            }
            for i in 0..end as usize {
                prop_assert_eq!(gap_bytes[i], !covered[i], "byte {}", i);
            }
        }
    }

    #[test]
    fn truncation_zeroes_holes_once_and_up_to_its_end() {
        let mut t = Truncation::new(100);
        t.wrote(0..10);
        t.wrote(30..40);
        assert_eq!(t.unwritten(100), vec![10..30, 40..100]);
        assert_eq!(t.unwritten(35), vec![10..30]);
        t.wrote(10..30);
        t.wrote(40..100);
        assert_eq!(t.unwritten(100), vec![]);
        // Grown by a truncate, then by a sibling variable's records: only the former is its.
        t.grew_to(150);
        assert_eq!(t.unwritten(200), vec![100..150]);
    }

    #[test]
    fn writes_through_any_handle_count_for_every_open_truncation_of_their_variable() {
        let open = OpenTruncations::default();
        let (v, w) = (VarId(0), VarId(1));
        // Nothing open: a write is no one's.
        open.wrote(v, 0..4);
        let a = open.open(v, 40);
        let other = open.open(w, 40);
        lock(&a).wrote(0..8);
        open.wrote(v, 0..8);
        // Another handle writes bytes 32..36 after the truncating open, and past the end.
        open.wrote(v, 32..36);
        open.wrote(v, 40..44);
        assert_eq!(lock(&a).unwritten(48), vec![8..32, 36..40]);
        assert_eq!(lock(&other).unwritten(48), vec![0..40]);
        // A second truncating open of `v` is truncated after those writes.
        let b = open.open(v, 44);
        open.wrote(v, 16..20);
        assert_eq!(lock(&a).unwritten(48), vec![8..16, 20..32, 36..40]);
        assert_eq!(lock(&b).unwritten(48), vec![0..16, 20..44]);
        open.close(v, &a);
        open.close(v, &a);
        open.wrote(v, 0..48);
        assert_eq!(lock(&a).unwritten(48), vec![8..16, 20..32, 36..40]);
        assert_eq!(lock(&b).unwritten(48), vec![]);
        open.close(v, &b);
        open.close(w, &other);
        assert_eq!(open.count.load(Ordering::SeqCst), 0);
        assert!(lock(&open.by_var).is_empty());
    }

    #[test]
    fn appends_continue_a_partial_record_until_the_size_changes() {
        let mut tail = AppendTail::default();
        assert_eq!(tail.offset(16), 16);
        // Records of 8 bytes: a 5-byte append to 16 bytes makes 24.
        tail.appended(16..21, 24);
        assert_eq!(tail.offset(24), 21);
        // The next piece continues there and ends inside the following record.
        tail.appended(21..28, 32);
        assert_eq!(tail.offset(32), 28);
        // The size changed elsewhere (a sibling grew the dimension): append at the end.
        assert_eq!(tail.offset(40), 40);
        // An append that ends on a record leaves nothing to continue.
        tail.appended(28..32, 32);
        assert_eq!(tail.offset(32), 32);
    }
}
