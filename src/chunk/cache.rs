//! A least-recently-used cache of decoded chunks, bounded in bytes.
//!
//! Entries are `Arc<Vec<u8>>` so a reader clones the handle under the lock and copies the
//! values out after releasing it. A dirty entry (written but not yet stored) carries a token `T`
//! that knows how to encode it; such an entry is never dropped without being written back.
//! Dirty entries never hold more than the bound, whatever storage does: a change makes room
//! for itself, writing dirty entries back, before it applies ([`ChunkCache::reserve`],
//! [`ChunkCache::apply`]), and fails unapplied when they cannot be stored; a reader's clean
//! chunk takes only room that clean entries leave.
//!
//! Buffers of evicted entries that nobody else holds are kept aside, a few, for the next
//! chunk decoded for the cache (see [`ChunkCache::take_spare`]): a fresh buffer costs a page
//! fault per page, more than decoding into it, and freeing and allocating chunk-sized buffers
//! leaves the allocator's arenas holding memory the cache no longer counts.
//!
//! Readers and writers may use the cache at once. A reader that missed a chunk and read it
//! from storage offers it with the epoch taken before the read ([`ChunkCache::insert_read`]);
//! it is not kept when a changed copy of that chunk has left the cache since (stored, and
//! then evicted or dropped), or a write stored it whole: the reader may hold the bytes from
//! before that store, and keeping them would bring back old values.
//!
//! One clean chunk larger than the whole cache may be kept beside it (see
//! [`ChunkCache::keep_oversized`]): a reader going through such a chunk in small requests (the
//! kernel's reads of a mount are at most 1 MiB) would otherwise decode it whole for each one.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use lru::LruCache;

use crate::{Error, Result};

/// Counters of a cache, for tests and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CacheStats {
    /// Lookups that found the chunk.
    pub hits: u64,
    /// Lookups that did not.
    pub misses: u64,
    /// Entries dropped to respect the bound.
    pub evictions: u64,
    /// Bytes currently held.
    pub bytes: u64,
    /// Entries currently held.
    pub entries: u64,
}

struct Entry<T> {
    data: Arc<Vec<u8>>,
    dirty: Option<T>,
    /// Whether it was ever changed while cached (then its leaving is recorded, see
    /// [`Inner::left`]).
    changed: bool,
}

struct Inner<T> {
    lru: LruCache<String, Entry<T>>,
    bytes: usize,
    /// Buffers of evicted entries, oldest first, waiting to be reused.
    spare: VecDeque<Vec<u8>>,
    spare_bytes: usize,
    /// The one chunk kept that is larger than the whole cache (always clean).
    oversized: Option<(String, Arc<Vec<u8>>)>,
    /// Counts the stores and drops that may make a chunk read from storage before them stale;
    /// such a chunk is not kept as the oversized one.
    epoch: u64,
    /// The latest chunks that left the cache changed or were stored whole, with the epoch of
    /// that moment, oldest first (at most [`LEFT_MAX`]).
    left: VecDeque<(u64, String)>,
    /// Records up to this epoch have been dropped from `left`.
    left_floor: u64,
}

/// Most records kept of changed chunks that left the cache; a reader's chunk read from storage
/// before the oldest of them is not kept.
const LEFT_MAX: usize = 1024;

/// Most bytes of spare buffers kept, whatever the cache size (beyond it they are freed).
const SPARE_MAX: usize = 16 << 20;

/// The byte-bounded LRU.
pub(crate) struct ChunkCache<T> {
    capacity: usize,
    inner: Mutex<Inner<T>>,
    hits: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
}

impl<T> std::fmt::Debug for ChunkCache<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChunkCache")
            .field("capacity", &self.capacity)
            .field("stats", &self.stats())
            .finish()
    }
}

/// Writes one dirty entry back to storage: `(key, native data, token)`.
pub(crate) type WriteBack<'a, T> = dyn FnMut(&str, &[u8], &T) -> Result<()> + 'a;

/// [`WriteBack`] for dirty entries written back in parallel.
#[cfg(test)]
pub(crate) type ParallelWriteBack<'a, T> = dyn Fn(&str, &[u8], &T) -> Result<()> + Sync + 'a;

/// Writes a batch of dirty entries back together (the inner chunks of one shard, stored as
/// one object), with one result per entry, in order.
pub(crate) type BatchWriteBack<'a, T> = dyn Fn(&[(&str, &[u8], &T)]) -> Vec<Result<()>> + Sync + 'a;

/// The batch a dirty entry's key belongs to (`None`: written back alone).
pub(crate) type BatchOf<'a> = dyn for<'k> Fn(&'k str) -> Option<&'k str> + Sync + 'a;

impl<T> Inner<T> {
    /// The oversized chunk, if it is the one of `key`.
    fn oversized(&self, key: &str) -> Option<Arc<Vec<u8>>> {
        let (k, data) = self.oversized.as_ref()?;
        (k == key).then(|| Arc::clone(data))
    }

    /// Forgets the oversized chunk if `keep` rejects its key, and makes chunks read from
    /// storage until now too old to be kept as the oversized one.
    fn forget_oversized(&mut self, keep: impl Fn(&str) -> bool) {
        self.epoch += 1;
        if self.oversized.as_ref().is_some_and(|(k, _)| !keep(k)) {
            self.oversized = None;
        }
    }

    /// Records that the chunk of `key`, changed, left the cache (stored first) or was stored
    /// whole: a copy a reader read from storage before then may be stale.
    fn left(&mut self, key: &str) {
        self.epoch += 1;
        self.left.push_back((self.epoch, key.to_string()));
        if self.left.len() > LEFT_MAX {
            if let Some((epoch, _)) = self.left.pop_front() {
                self.left_floor = epoch;
            }
        }
    }

    /// Whether a copy of the chunk of `key` read from storage after `epoch` may be stale.
    fn left_since(&self, key: &str, epoch: u64) -> bool {
        epoch < self.left_floor || self.left.iter().any(|(e, k)| *e > epoch && k == key)
    }

    /// Removes the entry of `key`, recording its leaving if it was changed.
    fn pop(&mut self, key: &str) -> Option<Entry<T>> {
        let e = self.lru.pop(key)?;
        self.bytes -= e.data.len();
        if e.changed {
            self.left(key);
        }
        Some(e)
    }

    /// Adds `buf` to the spare buffers, dropping the oldest ones beyond `limit` bytes.
    fn keep_spare(&mut self, buf: Vec<u8>, limit: usize) {
        if buf.len() > limit {
            return;
        }
        self.spare_bytes += buf.len();
        self.spare.push_back(buf);
        while self.spare_bytes > limit {
            match self.spare.pop_front() {
                Some(old) => self.spare_bytes -= old.len(),
                None => break,
            }
        }
    }
}

impl<T> ChunkCache<T> {
    /// A cache holding at most `capacity` bytes of chunk data (0: nothing is kept).
    pub(crate) fn new(capacity: usize) -> Self {
        ChunkCache {
            capacity,
            inner: Mutex::new(Inner {
                lru: LruCache::unbounded(),
                bytes: 0,
                spare: VecDeque::new(),
                spare_bytes: 0,
                oversized: None,
                epoch: 0,
                left: VecDeque::new(),
                left_floor: 0,
            }),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// The bound in bytes.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    fn lock(&self) -> MutexGuard<'_, Inner<T>> {
        // A panic while holding the lock leaves consistent data (every update is a single
        // insert/remove plus a counter), so a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Looks a chunk up, marking it most recently used.
    pub(crate) fn get(&self, key: &str) -> Option<Arc<Vec<u8>>> {
        let found = self.find(key);
        let counter = if found.is_some() {
            &self.hits
        } else {
            &self.misses
        };
        counter.fetch_add(1, Ordering::Relaxed);
        found
    }

    /// Like [`ChunkCache::get`], but a miss is not counted: a second look after waiting for
    /// another thread's load of the same chunk.
    pub(crate) fn get_again(&self, key: &str) -> Option<Arc<Vec<u8>>> {
        let found = self.find(key);
        if found.is_some() {
            self.hits.fetch_add(1, Ordering::Relaxed);
        }
        found
    }

    fn find(&self, key: &str) -> Option<Arc<Vec<u8>>> {
        let mut inner = self.lock();
        match inner.lru.get(key) {
            Some(e) => Some(Arc::clone(&e.data)),
            None => inner.oversized(key),
        }
    }

    /// The current epoch, to be taken before a chunk is read from storage and handed to
    /// [`ChunkCache::keep_oversized`] with it.
    pub(crate) fn epoch(&self) -> u64 {
        self.lock().epoch
    }

    /// Keeps `data`, the clean chunk of `key` read from storage since `epoch`, as the one
    /// chunk larger than the whole cache, in place of the previous one. Nothing is kept when
    /// the chunk fits in the cache (it goes there), when the cache holds nothing (capacity 0),
    /// or when a store or drop since `epoch` may have made `data` stale.
    pub(crate) fn keep_oversized(&self, key: &str, data: &Arc<Vec<u8>>, epoch: u64) {
        if self.capacity == 0 || self.fits(data.len()) {
            return;
        }
        let mut inner = self.lock();
        if inner.epoch == epoch {
            inner.oversized = Some((key.to_string(), Arc::clone(data)));
        }
    }

    /// Whether the chunk of `key` is cached (not counted as a lookup).
    pub(crate) fn contains(&self, key: &str) -> bool {
        self.lock().lru.contains(key)
    }

    /// A buffer of exactly `len` bytes (of unspecified contents) from an evicted entry, if one
    /// is spare: for the next chunk to be decoded for the cache.
    pub(crate) fn take_spare(&self, len: usize) -> Option<Vec<u8>> {
        let mut inner = self.lock();
        let i = inner.spare.iter().position(|b| b.len() == len)?;
        let buf = inner.spare.remove(i)?;
        inner.spare_bytes -= len;
        Some(buf)
    }

    /// Keeps `buf` for [`ChunkCache::take_spare`] (a buffer taken but not used).
    pub(crate) fn give_spare(&self, buf: Vec<u8>) {
        let limit = self.spare_limit();
        self.lock().keep_spare(buf, limit);
    }

    /// Bytes of spare buffers kept at most: an eighth of the cache, at most [`SPARE_MAX`].
    fn spare_limit(&self) -> usize {
        (self.capacity / 8).min(SPARE_MAX)
    }

    /// Whether the cache could hold an entry of `len` bytes at all.
    pub(crate) fn fits(&self, len: usize) -> bool {
        len <= self.capacity
    }

    /// Inserts a chunk, then evicts least recently used entries until the bound holds. A dirty
    /// chunk replaces any cached one; a clean chunk never replaces a cached one (which may hold
    /// unflushed writes made since the clean copy was fetched). An entry larger than the whole
    /// cache is not kept in it: a dirty one is written back at once and then kept as the
    /// oversized chunk (see [`ChunkCache::keep_oversized`]).
    ///
    /// Room for a clean chunk is made from clean entries only: a reader never waits for
    /// storage nor fails because of it, and when dirty entries leave no room its chunk is just
    /// not kept. Room for a dirty chunk is also made by writing dirty entries back with
    /// `write_back`; when one of them cannot be stored and no room is left, the cache stays as
    /// it was (the new chunk is not kept) and the error is returned.
    pub(crate) fn insert(
        &self,
        key: &str,
        data: Arc<Vec<u8>>,
        dirty: Option<T>,
        write_back: &mut WriteBack<'_, T>,
    ) -> Result<()> {
        self.insert_since(key, data, dirty, None, write_back)
    }

    /// Inserts `data`, the clean chunk of `key` a reader read from storage after `epoch`
    /// ([`ChunkCache::epoch`], taken before the read), like [`ChunkCache::insert`], unless
    /// it may be stale: a changed copy of the chunk left the cache since, or a write stored the
    /// chunk whole. Then it is not kept (the reader still uses it: its read overlapped that
    /// write, so it may see the values from before).
    pub(crate) fn insert_read(&self, key: &str, data: Arc<Vec<u8>>, epoch: u64) {
        let result = self.insert_since(key, data, None, Some(epoch), &mut |_, _, _| Ok(()));
        debug_assert!(result.is_ok(), "a clean insert writes nothing back");
    }

    fn insert_since(
        &self,
        key: &str,
        data: Arc<Vec<u8>>,
        dirty: Option<T>,
        read_since: Option<u64>,
        write_back: &mut WriteBack<'_, T>,
    ) -> Result<()> {
        let mut inner = self.lock();
        if dirty.is_none() && inner.lru.contains(key) {
            return Ok(());
        }
        if read_since.is_some_and(|epoch| inner.left_since(key, epoch)) {
            return Ok(());
        }
        let replaced = inner.lru.pop(key);
        if let Some(old) = &replaced {
            inner.bytes -= old.data.len();
        }
        if !self.fits(data.len()) {
            let Some(token) = &dirty else {
                return Ok(());
            };
            // Readers that fetch the chunk while it is being stored must not keep what they
            // read: the epoch moves before the store and after it.
            inner.forget_oversized(|k| k != key);
            drop(inner);
            let stored = write_back(key, &data, token);
            let mut inner = self.lock();
            inner.forget_oversized(|k| k != key);
            if replaced.as_ref().is_some_and(|e| e.changed) || stored.is_ok() {
                inner.left(key);
            }
            stored?;
            if self.capacity > 0 {
                inner.oversized = Some((key.to_string(), data));
            }
            return Ok(());
        }
        let is_dirty = dirty.is_some();
        let changed = is_dirty || replaced.as_ref().is_some_and(|e| e.changed);
        inner.bytes += data.len();
        inner.lru.put(
            key.to_string(),
            Entry {
                data,
                dirty,
                changed,
            },
        );
        let failure = self.evict_to(
            &mut inner,
            self.capacity,
            &|k| k == key,
            is_dirty.then_some(write_back),
        );
        if inner.bytes <= self.capacity {
            return Ok(());
        }
        if let Some(new) = inner.lru.pop(key) {
            inner.bytes -= new.data.len();
        }
        if let Some(old) = replaced {
            inner.bytes += old.data.len();
            inner.lru.put(key.to_string(), old);
        }
        // A dirty chunk finds room unless a write-back failed (all else could be evicted).
        match failure {
            Some(e) if is_dirty => Err(e),
            _ => Ok(()),
        }
    }

    /// Evicts least recently used entries until at most `limit` bytes are held, passing over
    /// those whose keys `keep` accepts. A dirty entry is written back first with `write_back`
    /// and passed over without it; once a write-back fails no other is tried (storage refuses
    /// them alike), and that entry stays. Entries passed over become the most recently used.
    /// Returns the failure of a write-back.
    fn evict_to(
        &self,
        inner: &mut Inner<T>,
        limit: usize,
        keep: &dyn Fn(&str) -> bool,
        mut write_back: Option<&mut WriteBack<'_, T>>,
    ) -> Option<Error> {
        let mut passed = Vec::new();
        let mut failure = None;
        while inner.bytes > limit {
            let Some((k, e)) = inner.lru.pop_lru() else {
                break;
            };
            if keep(&k) {
                passed.push((k, e));
                continue;
            }
            if let Some(token) = &e.dirty {
                let Some(write_back) = write_back.as_mut().filter(|_| failure.is_none()) else {
                    passed.push((k, e));
                    continue;
                };
                // Written back under the lock so no reader can miss the cache and fetch the
                // stale stored chunk in between.
                if let Err(err) = write_back(&k, &e.data, token) {
                    failure = Some(err);
                    passed.push((k, e));
                    continue;
                }
            }
            inner.bytes -= e.data.len();
            if e.changed {
                inner.left(&k);
            }
            self.evictions.fetch_add(1, Ordering::Relaxed);
            // A reader may still hold it; then it is freed when that reader lets go.
            if let Ok(buf) = Arc::try_unwrap(e.data) {
                let limit = self.spare_limit();
                inner.keep_spare(buf, limit);
            }
        }
        for (k, e) in passed {
            inner.lru.put(k, e);
        }
        failure
    }

    /// Makes room for a change of the chunks `keys`, cached or not, each `len` bytes decoded:
    /// evicts other entries, least recently used first, writing dirty ones back with
    /// `write_back`, until the changed chunks fit beside the rest. [`ChunkCache::apply`] can
    /// then put them in without writing anything back, so a change either fails here, having
    /// changed no value, or takes effect whole. When dirty entries that cannot be stored leave
    /// no room, the error of their write-back is returned. The changed chunks together must
    /// fit in the cache.
    pub(crate) fn reserve(
        &self,
        keys: &HashSet<String>,
        len: usize,
        write_back: &mut WriteBack<'_, T>,
    ) -> Result<()> {
        let mut inner = self.lock();
        let held: usize = keys
            .iter()
            .filter_map(|k| inner.lru.peek(k))
            .map(|e| e.data.len())
            .sum();
        let limit = (self.capacity + held).saturating_sub(keys.len() * len);
        let failure = self.evict_to(&mut inner, limit, &|k| keys.contains(k), Some(write_back));
        match failure {
            Some(e) if inner.bytes > limit => Err(e),
            _ => Ok(()),
        }
    }

    /// Applies a change made room for by [`ChunkCache::reserve`], whole or not at all: `change`
    /// modifies each chunk of `cached` in place (copying it first only if a reader holds it),
    /// the chunks of `fresh` (key, changed chunk; taken) are put in, and all become dirty with
    /// `token`; clean entries are evicted to keep the bound. When one of `cached` is no longer
    /// held (a reader's chunk evicted it since), nothing changes and those keys are returned:
    /// the caller fetches and changes them, and applies again with them in `fresh`. The lock is
    /// held meanwhile, so readers see the chunks before or after the change, never half of it.
    pub(crate) fn apply(
        &self,
        cached: &[&str],
        change: &dyn Fn(&str, &mut [u8]),
        fresh: &mut Vec<(String, Vec<u8>)>,
        token: &T,
    ) -> std::result::Result<(), Vec<String>>
    where
        T: Clone,
    {
        let mut inner = self.lock();
        let gone: Vec<String> = cached
            .iter()
            .filter(|k| !inner.lru.contains(**k))
            .map(|k| k.to_string())
            .collect();
        if !gone.is_empty() {
            return Err(gone);
        }
        for key in cached {
            if let Some(entry) = inner.lru.get_mut(*key) {
                change(key, Arc::make_mut(&mut entry.data).as_mut_slice());
                entry.dirty = Some(token.clone());
                entry.changed = true;
            }
        }
        for (key, data) in fresh.drain(..) {
            if let Some(old) = inner.lru.pop(&key) {
                inner.bytes -= old.data.len();
            }
            inner.bytes += data.len();
            let entry = Entry {
                data: Arc::new(data),
                dirty: Some(token.clone()),
                changed: true,
            };
            inner.lru.put(key, entry);
        }
        self.evict_to(&mut inner, self.capacity, &|_| false, None);
        Ok(())
    }

    /// Writes back every dirty entry: [`ChunkCache::flush_batched`] of all, one by one.
    #[cfg(test)]
    pub(crate) fn flush(&self, write_back: &ParallelWriteBack<'_, T>) -> Result<()>
    where
        T: Send + Sync + Clone,
    {
        self.flush_where(&|_| true, write_back)
    }

    /// [`ChunkCache::flush_batched`] of the dirty entries whose keys `pick` accepts, one by
    /// one.
    #[cfg(test)]
    pub(crate) fn flush_where(
        &self,
        pick: &(dyn Fn(&str) -> bool + Sync),
        write_back: &ParallelWriteBack<'_, T>,
    ) -> Result<()>
    where
        T: Send + Sync + Clone,
    {
        self.flush_batched(pick, &|_| None, &|batch| {
            batch.iter().map(|(k, d, t)| write_back(k, d, t)).collect()
        })
    }

    /// Writes back the dirty entries whose keys `pick` accepts, in parallel (rayon), and marks
    /// the stored ones clean; the entries of one batch (`batch_of`, the inner chunks of one
    /// shard) are handed to `write_batch` together. Returns the first failure; entries that
    /// failed stay dirty.
    ///
    /// The lock is not held while storing: a parallel loop must not hold a lock that other
    /// jobs of its thread pool may wait for (a worker waiting for the loop to finish runs
    /// them, and would never return to it), and readers need not wait for the stores. The
    /// entries stay cached and dirty meanwhile, so readers still find their values, and one
    /// evicted meanwhile is stored by the eviction. Callers serialize flushes and writes (the
    /// chunk engine's write lock), so an entry changes meanwhile only by being evicted and
    /// loaded again, which leaves it clean.
    pub(crate) fn flush_batched(
        &self,
        pick: &(dyn Fn(&str) -> bool + Sync),
        batch_of: &BatchOf<'_>,
        write_batch: &BatchWriteBack<'_, T>,
    ) -> Result<()>
    where
        T: Send + Sync + Clone,
    {
        use rayon::prelude::*;
        let dirty: Vec<(String, Arc<Vec<u8>>, T)> = self
            .lock()
            .lru
            .iter()
            .filter_map(|(k, e)| {
                let token = e.dirty.as_ref().filter(|_| pick(k))?;
                Some((k.clone(), Arc::clone(&e.data), token.clone()))
            })
            .collect();
        let mut batches: Vec<Vec<usize>> = Vec::new();
        let mut batch_at: HashMap<&str, usize> = HashMap::new();
        for (i, (key, _, _)) in dirty.iter().enumerate() {
            match batch_of(key) {
                Some(b) => {
                    let at = *batch_at.entry(b).or_insert_with(|| {
                        batches.push(Vec::new());
                        batches.len() - 1
                    });
                    batches[at].push(i);
                }
                None => batches.push(vec![i]),
            }
        }
        let results: Vec<Vec<Result<()>>> = batches
            .par_iter()
            .map(|batch| {
                let entries: Vec<(&str, &[u8], &T)> = batch
                    .iter()
                    .map(|&i| (dirty[i].0.as_str(), &dirty[i].1[..], &dirty[i].2))
                    .collect();
                write_batch(&entries)
            })
            .collect();
        let mut stored: Vec<Option<Result<()>>> = dirty.iter().map(|_| None).collect();
        for (batch, results) in batches.iter().zip(results) {
            for (&i, result) in batch.iter().zip(results) {
                stored[i] = Some(result);
            }
        }
        let stored = stored.into_iter().map(|r| {
            r.unwrap_or_else(|| Err(Error::Invalid("a batch write-back left a chunk out".into())))
        });
        let mut inner = self.lock();
        let mut first_error = None;
        for ((key, data, _), result) in dirty.iter().zip(stored) {
            match result {
                Ok(()) => {
                    if let Some(e) = inner.lru.peek_mut(key) {
                        if Arc::ptr_eq(&e.data, data) {
                            e.dirty = None;
                        }
                    }
                }
                // Values no codec can store (text that is not UTF-8 for `vlen-utf8`) would
                // fail every later flush and hold back the chunk's other changes forever:
                // they are dropped, and the chunk reads as stored again. Storage errors
                // (a full disk, a server away) keep the chunk dirty for the next flush.
                Err(e @ (Error::Codec { .. } | Error::CodecOutOfRange { .. })) => {
                    if inner
                        .lru
                        .peek(key)
                        .is_some_and(|c| Arc::ptr_eq(&c.data, data))
                    {
                        log::error!("{key}: changes dropped, they cannot be stored: {e}");
                        inner.pop(key);
                    }
                    first_error.get_or_insert(e);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Bytes held in dirty entries.
    pub(crate) fn dirty_bytes(&self) -> usize {
        let inner = self.lock();
        inner
            .lru
            .iter()
            .filter(|(_, e)| e.dirty.is_some())
            .map(|(_, e)| e.data.len())
            .sum()
    }

    /// Drops the entry of `key` unless it is dirty, keeping its buffer as a spare when nobody
    /// else holds it (a chunk a sequential reader has gone past).
    pub(crate) fn release(&self, key: &str) {
        let mut inner = self.lock();
        if inner.oversized.as_ref().is_some_and(|(k, _)| k == key) {
            inner.oversized = None;
        }
        if inner.lru.peek(key).is_none_or(|e| e.dirty.is_some()) {
            return;
        }
        if let Some(e) = inner.pop(key) {
            if let Ok(buf) = Arc::try_unwrap(e.data) {
                let limit = self.spare_limit();
                inner.keep_spare(buf, limit);
            }
        }
    }

    /// Forgets the entry of `key`, dirty or not, once its chunk has been stored whole.
    pub(crate) fn discard(&self, key: &str) {
        let mut inner = self.lock();
        inner.forget_oversized(|k| k != key);
        if let Some(e) = inner.lru.pop(key) {
            inner.bytes -= e.data.len();
        }
        inner.left(key);
    }

    /// Drops every entry whose key starts with `prefix` (all of them for `""`), writing dirty
    /// ones back first.
    pub(crate) fn invalidate(&self, prefix: &str, write_back: &mut WriteBack<'_, T>) -> Result<()> {
        let mut inner = self.lock();
        inner.forget_oversized(|k| !k.starts_with(prefix));
        let keys: Vec<String> = inner
            .lru
            .iter()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, _)| k.clone())
            .collect();
        for k in keys {
            if let Some(e) = inner.lru.peek(&k) {
                if let Some(token) = &e.dirty {
                    write_back(&k, &e.data, token)?;
                }
            }
            inner.pop(&k);
        }
        Ok(())
    }

    /// The counters.
    pub(crate) fn stats(&self) -> CacheStats {
        let inner = self.lock();
        CacheStats {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            bytes: inner.bytes as u64,
            entries: inner.lru.len() as u64,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn clean(_: &str, _: &[u8], _: &u32) -> Result<()> {
        panic!("no dirty entry expected")
    }

    #[test]
    fn a_read_that_overlapped_a_change_leaving_the_cache_is_not_kept() {
        // Room for two 4-byte chunks.
        let c: ChunkCache<u32> = ChunkCache::new(8);
        let mut stored = Vec::new();
        let mut store = |k: &str, d: &[u8], _: &u32| -> Result<()> {
            stored.push((k.to_string(), d.to_vec()));
            Ok(())
        };
        // A reader misses `a` and reads it from storage; meanwhile a write changes `a` in the
        // cache, and later writes push it out (stored).
        let before_read = c.epoch();
        c.insert("a", Arc::new(vec![2; 4]), Some(1), &mut store)
            .unwrap();
        c.insert("b", Arc::new(vec![0; 4]), Some(1), &mut store)
            .unwrap();
        c.insert("c", Arc::new(vec![0; 4]), Some(1), &mut store)
            .unwrap();
        assert!(c.get("a").is_none());
        assert_eq!(stored[0], ("a".to_string(), vec![2; 4]));
        // The reader's copy may be from before the store: not kept.
        c.insert_read("a", Arc::new(vec![1; 4]), before_read);
        assert!(c.get("a").is_none());
        // A copy read after the store is kept (once there is room beside the changed chunks);
        // so is one of a chunk nobody changed.
        let after_store = c.epoch();
        c.discard("b");
        c.insert_read("a", Arc::new(vec![2; 4]), after_store);
        assert_eq!(*c.get("a").unwrap(), vec![2; 4]);
        let c: ChunkCache<u32> = ChunkCache::new(8);
        let before_read = c.epoch();
        c.discard("x");
        c.insert_read("y", Arc::new(vec![3; 4]), before_read);
        assert!(c.get("y").is_some());
        // A chunk stored whole while it was being read.
        c.insert_read("x", Arc::new(vec![3; 4]), before_read);
        assert!(c.get("x").is_none());
    }

    #[test]
    fn a_read_older_than_the_records_kept_is_not_kept() {
        let c: ChunkCache<u32> = ChunkCache::new(8);
        let before_read = c.epoch();
        for i in 0..=LEFT_MAX {
            c.discard(&format!("k{i}"));
        }
        c.insert_read("other", Arc::new(vec![0; 4]), before_read);
        assert!(c.get("other").is_none());
        c.insert_read("other", Arc::new(vec![0; 4]), c.epoch());
        assert!(c.get("other").is_some());
    }

    #[test]
    fn batched_flush_hands_each_batch_over_together() {
        let c: ChunkCache<u32> = ChunkCache::new(1 << 10);
        let mut refuse = |_: &str, _: &[u8], _: &u32| -> Result<()> { panic!("no eviction") };
        for key in ["s#0", "s#1", "s#3", "t#0", "lone", "bad#1", "bad#2"] {
            c.insert(key, Arc::new(key.as_bytes().to_vec()), Some(7), &mut refuse)
                .unwrap();
        }
        let batches = Mutex::new(Vec::new());
        fn batch_of(k: &str) -> Option<&str> {
            k.split_once('#').map(|(b, _)| b)
        }
        let result = c.flush_batched(&|k| k != "t#0", &batch_of, &|batch| {
            let mut keys: Vec<String> = batch.iter().map(|(k, _, _)| k.to_string()).collect();
            keys.sort();
            batches.lock().unwrap().push(keys);
            batch
                .iter()
                .map(|(k, d, t)| {
                    assert_eq!((*d, **t), (k.as_bytes(), 7));
                    match *k {
                        "bad#2" => Err(Error::Codec {
                            codec: "test".into(),
                            reason: "cannot encode".into(),
                        }),
                        _ => Ok(()),
                    }
                })
                .collect()
        });
        assert!(matches!(result, Err(Error::Codec { .. })), "{result:?}");
        let mut batches = batches.into_inner().unwrap();
        batches.sort();
        assert_eq!(
            batches,
            [
                vec!["bad#1", "bad#2"],
                vec!["lone"],
                vec!["s#0", "s#1", "s#3"]
            ]
        );
        // Stored entries are clean, the unencodable one is dropped, the one not picked is
        // still dirty: only it is written back by the next flush.
        assert!(c.get("bad#2").is_none());
        let left = Mutex::new(Vec::new());
        c.flush(&|k, _, _| {
            left.lock().unwrap().push(k.to_string());
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(left.into_inner().unwrap(), ["t#0"]);
    }

    #[test]
    fn bound_in_bytes_and_lru_order() {
        let c: ChunkCache<u32> = ChunkCache::new(10);
        c.insert("a", Arc::new(vec![0; 4]), None, &mut clean)
            .unwrap();
        c.insert("b", Arc::new(vec![0; 4]), None, &mut clean)
            .unwrap();
        assert!(c.get("a").is_some()); // a is now most recent
        c.insert("c", Arc::new(vec![0; 4]), None, &mut clean)
            .unwrap();
        assert!(c.get("b").is_none(), "b was least recently used");
        assert!(c.get("a").is_some() && c.get("c").is_some());
        let s = c.stats();
        assert_eq!((s.bytes, s.entries, s.evictions), (8, 2, 1));
        assert_eq!((s.hits, s.misses), (3, 1));
        // Too big for the whole cache: not kept.
        c.insert("big", Arc::new(vec![0; 11]), None, &mut clean)
            .unwrap();
        assert!(c.get("big").is_none());
        // A clean copy does not replace a cached entry; a dirty one does, without double
        // counting.
        c.insert("a", Arc::new(vec![1; 4]), None, &mut clean)
            .unwrap();
        assert_eq!(*c.get("a").unwrap(), vec![0; 4]);
        c.insert("a", Arc::new(vec![2; 2]), Some(1), &mut clean)
            .unwrap();
        assert_eq!(*c.get("a").unwrap(), vec![2; 2]);
        assert_eq!(c.stats().bytes, 6);
    }

    #[test]
    fn one_oversized_chunk_kept_beside_the_cache() {
        let c: ChunkCache<u32> = ChunkCache::new(4);
        let big = |x: u8| Arc::new(vec![x; 5]);
        let e = c.epoch();
        c.keep_oversized("a", &big(1), e);
        assert_eq!(*c.get("a").unwrap(), vec![1; 5]);
        c.keep_oversized("b", &big(2), e);
        assert!(c.get("a").is_none(), "only one is kept");
        assert_eq!(*c.get("b").unwrap(), vec![2; 5]);
        // What fits goes to the cache, not beside it.
        c.keep_oversized("small", &Arc::new(vec![0; 4]), e);
        assert!(c.get("small").is_none() && c.get("b").is_some());
        c.release("b");
        assert!(c.get("b").is_none());
        // A chunk read before a store or a drop may be stale: not kept.
        for forget in [
            &(|c: &ChunkCache<u32>| c.discard("x")) as &dyn Fn(&ChunkCache<u32>),
            &|c| c.invalidate("y", &mut clean).unwrap(),
            &|c| {
                c.insert("z", big(9), Some(1), &mut |_: &str, _: &[u8], _: &u32| {
                    Ok(())
                })
                .unwrap()
            },
        ] {
            let e = c.epoch();
            forget(&c);
            c.keep_oversized("a", &big(1), e);
            assert!(c.get("a").is_none());
        }
        // A dirty oversized chunk is stored at once, then kept; a failed store keeps nothing.
        let mut stored = Vec::new();
        c.insert("d", big(3), Some(1), &mut |k: &str, d: &[u8], _: &u32| {
            stored.push((k.to_string(), d.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(stored, [("d".to_string(), vec![3; 5])]);
        assert_eq!(*c.get("d").unwrap(), vec![3; 5]);
        let failed = c.insert("d", big(4), Some(1), &mut |_: &str, _: &[u8], _: &u32| {
            Err(Error::Codec {
                codec: "test".into(),
                reason: "cannot encode".into(),
            })
        });
        assert!(failed.is_err());
        assert!(c.get("d").is_none());
        assert_eq!(c.stats().bytes, 0);
    }

    #[test]
    fn zero_capacity_keeps_nothing() {
        let c: ChunkCache<u32> = ChunkCache::new(0);
        c.insert("a", Arc::new(vec![1]), None, &mut clean).unwrap();
        assert!(c.get("a").is_none());
        c.keep_oversized("o", &Arc::new(vec![1]), c.epoch());
        assert!(c.get("o").is_none());
        let mut written = Vec::new();
        c.insert(
            "d",
            Arc::new(vec![9]),
            Some(7),
            &mut |k: &str, d: &[u8], t: &u32| {
                written.push((k.to_string(), d.to_vec(), *t));
                Ok(())
            },
        )
        .unwrap();
        assert_eq!(written, vec![("d".to_string(), vec![9], 7)]);
    }

    #[test]
    fn dirty_entries_written_back_on_eviction_flush_and_invalidate() {
        let c: ChunkCache<u32> = ChunkCache::new(4);
        let written = Mutex::new(Vec::<String>::new());
        let mut wb = |k: &str, _: &[u8], _: &u32| {
            written.lock().unwrap().push(k.to_string());
            Ok(())
        };
        c.insert("v/0", Arc::new(vec![0; 2]), Some(1), &mut wb)
            .unwrap();
        c.insert("v/1", Arc::new(vec![0; 2]), Some(1), &mut wb)
            .unwrap();
        // A clean chunk finds no room beside dirty ones (it stores nothing); a dirty one does.
        c.insert("w/0", Arc::new(vec![0; 2]), None, &mut wb)
            .unwrap();
        assert!(c.get("w/0").is_none());
        assert!(written.lock().unwrap().is_empty());
        c.insert("w/0", Arc::new(vec![0; 2]), Some(1), &mut wb)
            .unwrap();
        assert_eq!(*written.lock().unwrap(), vec!["v/0"]);
        c.flush(&wb).unwrap();
        written.lock().unwrap().sort();
        assert_eq!(*written.lock().unwrap(), vec!["v/0", "v/1", "w/0"]);
        c.flush(&wb).unwrap();
        assert_eq!(
            written.lock().unwrap().len(),
            3,
            "flushed entries are clean"
        );
        c.insert("v/1", Arc::new(vec![1; 2]), Some(1), &mut wb)
            .unwrap();
        c.invalidate("v/", &mut wb).unwrap();
        assert_eq!(*written.lock().unwrap(), vec!["v/0", "v/1", "w/0", "v/1"]);
        assert!(c.get("v/1").is_none());
        assert!(c.get("w/0").is_some());
    }

    /// Readers are served while a flush stores (they would otherwise wait for every store,
    /// and a pool worker that picked up a reader's job while waiting inside the flush's loop
    /// would never return to it); a failed store leaves its entry dirty.
    #[test]
    fn flush_stores_without_holding_the_cache() {
        let c: Arc<ChunkCache<u32>> = Arc::new(ChunkCache::new(100));
        let mut never = |_: &str, _: &[u8], _: &u32| -> Result<()> { panic!("no eviction") };
        for i in 0..4u32 {
            c.insert(
                &format!("k{i}"),
                Arc::new(vec![i as u8; 4]),
                Some(i),
                &mut never,
            )
            .unwrap();
        }
        let wb = |k: &str, _: &[u8], t: &u32| {
            let (tx, rx) = std::sync::mpsc::channel();
            let reader = Arc::clone(&c);
            // Not scoped: a reader left waiting must not keep the test from failing.
            std::thread::spawn(move || tx.send(reader.get("k0").map(|d| d[0])));
            let got = rx.recv_timeout(std::time::Duration::from_secs(10));
            assert_eq!(got, Ok(Some(0)), "a reader waited for the store of {k}");
            if *t == 3 {
                return Err(crate::Error::Invalid("refused".into()));
            }
            Ok(())
        };
        assert!(c.flush(&wb).is_err());
        assert_eq!(c.dirty_bytes(), 4, "only the failed entry stays dirty");
    }

    #[test]
    fn changes_no_codec_can_store_are_dropped() {
        let c: ChunkCache<u32> = ChunkCache::new(100);
        let mut never = |_: &str, _: &[u8], _: &u32| -> Result<()> { panic!("no eviction") };
        for (k, dirty) in [("bad", Some(1)), ("down", Some(2)), ("clean", None)] {
            c.insert(k, Arc::new(vec![0; 4]), dirty, &mut never)
                .unwrap();
        }
        let wb = |_: &str, _: &[u8], t: &u32| match t {
            1 => Err(Error::Codec {
                codec: "vlen-utf8".into(),
                reason: "a value is not valid UTF-8".into(),
            }),
            _ => Err(Error::Storage {
                key: "down".into(),
                reason: "server away".into(),
            }),
        };
        assert!(c.flush(&wb).is_err());
        // The unencodable chunk is forgotten (it reads as stored again); the one the storage
        // refused stays dirty for the next flush.
        assert!(c.get("bad").is_none());
        assert_eq!((c.dirty_bytes(), c.stats().bytes), (4, 8));
    }

    #[test]
    fn flush_stores_every_dirty_entry_once_and_discard_forgets() {
        let c: ChunkCache<u32> = ChunkCache::new(100);
        let written = Mutex::new(Vec::<(String, u32)>::new());
        let wb = |k: &str, _: &[u8], t: &u32| {
            written.lock().unwrap().push((k.to_string(), *t));
            Ok(())
        };
        let mut never = |_: &str, _: &[u8], _: &u32| -> Result<()> { panic!("no eviction") };
        for i in 0..10u32 {
            let dirty = (i % 2 == 0).then_some(i);
            c.insert(&format!("k{i}"), Arc::new(vec![0; 4]), dirty, &mut never)
                .unwrap();
        }
        c.flush(&wb).unwrap();
        let mut got = written.lock().unwrap().clone();
        got.sort();
        let want: Vec<(String, u32)> = (0..10).step_by(2).map(|i| (format!("k{i}"), i)).collect();
        assert_eq!(got, want);
        c.flush(&wb).unwrap();
        assert_eq!(
            written.lock().unwrap().len(),
            5,
            "flushed entries are clean"
        );
        c.insert("k5", Arc::new(vec![0; 4]), Some(5), &mut never)
            .unwrap();
        c.insert("k7", Arc::new(vec![0; 4]), Some(7), &mut never)
            .unwrap();
        c.flush_where(&|k| k != "k7", &wb).unwrap();
        assert_eq!(written.lock().unwrap().last().unwrap().0, "k5");
        assert_eq!(c.dirty_bytes(), 4, "k7 still dirty");
        c.flush(&wb).unwrap();
        assert_eq!(c.dirty_bytes(), 0);
        c.insert("k1", Arc::new(vec![0; 4]), Some(1), &mut never)
            .unwrap();
        assert_eq!(c.dirty_bytes(), 4);
        c.discard("k3");
        c.discard("absent");
        assert!(c.get("k3").is_none());
        assert_eq!(c.stats().bytes, 36);
    }

    fn keys(ks: &[&str]) -> HashSet<String> {
        ks.iter().map(|k| k.to_string()).collect()
    }

    fn full(k: &str, _: &[u8], _: &u32) -> Result<()> {
        Err(Error::Storage {
            key: k.to_string(),
            reason: "No space left on device".into(),
        })
    }

    #[test]
    fn apply_changes_in_place_copying_only_what_a_reader_holds() {
        let c: ChunkCache<u32> = ChunkCache::new(100);
        c.insert("a", Arc::new(vec![0; 4]), None, &mut clean)
            .unwrap();
        let held = c.get("a").unwrap();
        c.reserve(&keys(&["a", "b"]), 4, &mut clean).unwrap();
        let mut fresh = vec![("b".to_string(), vec![7; 4])];
        c.apply(
            &["a"],
            &|k, d| d[0] = if k == "a" { 5 } else { 0 },
            &mut fresh,
            &1,
        )
        .unwrap();
        assert!(fresh.is_empty());
        assert_eq!(*held, vec![0; 4], "a reader's copy does not change");
        assert_eq!(*c.get("a").unwrap(), vec![5, 0, 0, 0]);
        assert_eq!(*c.get("b").unwrap(), vec![7; 4]);
        assert_eq!((c.dirty_bytes(), c.stats().bytes), (8, 8));
        let stored = Mutex::new(Vec::new());
        c.flush(&|k: &str, d: &[u8], t: &u32| {
            stored.lock().unwrap().push((k.to_string(), d.to_vec(), *t));
            Ok(())
        })
        .unwrap();
        let mut stored = stored.into_inner().unwrap();
        stored.sort();
        assert_eq!(
            stored,
            vec![
                ("a".to_string(), vec![5, 0, 0, 0], 1),
                ("b".to_string(), vec![7; 4], 1)
            ]
        );
        // A chunk to change in place that is gone since: nothing changes, it is named.
        let mut fresh = vec![("c".to_string(), vec![1; 4])];
        let gone = c.apply(&["a", "x"], &|_, d| d[0] = 9, &mut fresh, &2);
        assert_eq!(gone, Err(vec!["x".to_string()]));
        assert_eq!(fresh.len(), 1);
        assert!(c.get("c").is_none());
        assert_eq!((*c.get("a").unwrap())[0], 5);
        assert_eq!(c.dirty_bytes(), 0);
    }

    /// A change needing room that dirty entries which cannot be stored hold fails before
    /// changing anything, and the cache never holds more than its bound: the unstored entries
    /// (written, acknowledged) stay until storage takes them.
    #[test]
    fn no_room_behind_unstorable_entries_fails_a_change_before_it_applies() {
        let c: ChunkCache<u32> = ChunkCache::new(8);
        let mut ok = |_: &str, _: &[u8], _: &u32| Ok(());
        for k in ["a", "b", "c"] {
            c.insert(k, Arc::new(vec![1; 2]), Some(1), &mut ok).unwrap();
        }
        c.insert("clean", Arc::new(vec![0; 2]), None, &mut ok)
            .unwrap();
        // Room for two chunks: the clean entry goes, then a dirty one would have to be
        // stored, which fails: nothing of the change is there.
        let failed = c.reserve(&keys(&["n1", "n2"]), 2, &mut full);
        assert!(matches!(failed, Err(Error::Storage { .. })), "{failed:?}");
        assert_eq!((c.dirty_bytes(), c.stats().bytes), (6, 6));
        assert!(c.get("n1").is_none() && c.get("n2").is_none());
        // Room for one is there without storing anything; a change of cached chunks needs
        // none.
        c.reserve(&keys(&["n1"]), 2, &mut full).unwrap();
        c.reserve(&keys(&["a", "b", "c"]), 2, &mut full).unwrap();
        // Thousands of further dirty chunks: each fails, none is kept, the bound holds.
        c.insert("n1", Arc::new(vec![2; 2]), Some(2), &mut full)
            .unwrap();
        for i in 0..5000 {
            let key = format!("k{i}");
            let failed = c.insert(&key, Arc::new(vec![3; 2]), Some(3), &mut full);
            assert!(failed.is_err());
            assert!(c.get(&key).is_none());
            assert!(c.stats().bytes <= 8);
        }
        // Reads still work: a clean chunk finds no room and is not kept, without an error
        // and without a write-back.
        c.insert(
            "r",
            Arc::new(vec![0; 2]),
            None,
            &mut |_: &str, _: &[u8], _: &u32| panic!("a reader's chunk stores nothing"),
        )
        .unwrap();
        assert!(c.get("r").is_none());
        // A dirty chunk replacing its own entry needs no room.
        c.insert("a", Arc::new(vec![4; 2]), Some(4), &mut full)
            .unwrap();
        // Once storage takes them, everything acknowledged is stored.
        let stored = Mutex::new(Vec::new());
        c.flush(&|k: &str, d: &[u8], _: &u32| {
            stored.lock().unwrap().push((k.to_string(), d.to_vec()));
            Ok(())
        })
        .unwrap();
        let mut stored = stored.into_inner().unwrap();
        stored.sort();
        assert_eq!(
            stored,
            vec![
                ("a".to_string(), vec![4; 2]),
                ("b".to_string(), vec![1; 2]),
                ("c".to_string(), vec![1; 2]),
                ("n1".to_string(), vec![2; 2]),
            ]
        );
        // Room again: the next change gets it by storing the least recently used.
        c.insert("a", Arc::new(vec![5; 2]), Some(5), &mut ok)
            .unwrap();
        c.reserve(&keys(&["m1", "m2"]), 2, &mut ok).unwrap();
        assert_eq!(c.stats().bytes, 4);
    }

    #[test]
    fn failed_flush_keeps_failed_entries_dirty() {
        let c: ChunkCache<u32> = ChunkCache::new(100);
        let mut never = |_: &str, _: &[u8], _: &u32| -> Result<()> { panic!("no eviction") };
        c.insert("bad", Arc::new(vec![0; 4]), Some(0), &mut never)
            .unwrap();
        c.insert("good", Arc::new(vec![0; 4]), Some(1), &mut never)
            .unwrap();
        let fail_bad = |k: &str, _: &[u8], _: &u32| {
            if k == "bad" {
                return Err(crate::Error::Storage {
                    key: k.to_string(),
                    reason: "full".into(),
                });
            }
            Ok(())
        };
        assert!(c.flush(&fail_bad).is_err());
        let retried = Mutex::new(Vec::new());
        c.flush(&|k: &str, _: &[u8], _: &u32| {
            retried.lock().unwrap().push(k.to_string());
            Ok(())
        })
        .unwrap();
        assert_eq!(*retried.lock().unwrap(), vec!["bad".to_string()]);
    }

    #[test]
    fn evicted_buffers_nobody_holds_are_reused() {
        // 64 bytes of cache: spare buffers up to 8 bytes.
        let c: ChunkCache<u32> = ChunkCache::new(64);
        for k in ["a", "b"] {
            c.insert(k, Arc::new(vec![1; 32]), None, &mut clean)
                .unwrap();
        }
        // Over the spare limit: freed, not kept.
        c.insert("c", Arc::new(vec![2; 32]), None, &mut clean)
            .unwrap();
        assert!(c.take_spare(32).is_none());
        let c: ChunkCache<u32> = ChunkCache::new(64);
        let held = Arc::new(vec![7; 8]);
        c.insert("a", Arc::clone(&held), None, &mut clean).unwrap();
        for k in ["b", "c", "d", "e", "f", "g", "h"] {
            c.insert(k, Arc::new(vec![7; 8]), None, &mut clean).unwrap();
        }
        c.insert("i", Arc::new(vec![0; 8]), None, &mut clean)
            .unwrap();
        assert!(
            c.take_spare(8).is_none(),
            "a reader still holds the evicted one"
        );
        drop(held);
        c.insert("j", Arc::new(vec![0; 8]), None, &mut clean)
            .unwrap();
        assert_eq!(c.take_spare(4), None, "only buffers of the asked length");
        assert_eq!(c.take_spare(8), Some(vec![7; 8]), "b, evicted unheld");
        assert_eq!(c.take_spare(8), None);
        // Given back, kept up to the limit (the oldest go first).
        c.give_spare(vec![3; 8]);
        c.give_spare(vec![4; 8]);
        assert_eq!(c.take_spare(8), Some(vec![4; 8]));
        assert_eq!(c.take_spare(8), None);
        assert_eq!(c.stats().bytes, 64, "spares are not counted as cached");
        // Released: gone, its buffer spare; a dirty entry stays.
        c.release("c");
        assert!(c.get("c").is_none());
        assert_eq!(c.take_spare(8), Some(vec![7; 8]));
        c.insert("w", Arc::new(vec![5; 8]), Some(1), &mut clean)
            .unwrap();
        c.release("w");
        c.release("absent");
        assert_eq!(*c.get("w").unwrap(), vec![5; 8]);
        assert_eq!(c.take_spare(8), None);
    }

    #[test]
    fn failed_write_back_keeps_the_data() {
        let c: ChunkCache<u32> = ChunkCache::new(2);
        c.insert("a", Arc::new(vec![0; 2]), Some(1), &mut full)
            .unwrap();
        assert!(c
            .insert("b", Arc::new(vec![0; 2]), Some(1), &mut full)
            .is_err());
        assert!(c.get("a").is_some());
        assert!(c.get("b").is_none());
        assert_eq!(c.dirty_bytes(), 2);
    }
}
