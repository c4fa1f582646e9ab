//! A new dataset on an object store: an object store has no rename, so `gen` and `copy`
//! write straight under the destination prefix. That prefix is claimed first with a marker
//! object created only if absent, so that two runs never write into one prefix; every key
//! the run puts is recorded, so that a failure or a catchable signal deletes what this run
//! wrote and nothing else.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, RwLock};

use crate::interrupt;
use crate::location::{Location, S3Location};
use crate::zmap::{join_key, Feed, S3Map, ZMap};
use crate::{Error, Result};

/// The marker object of a prefix being written by `gen` or `copy`: who writes it and since
/// when. It is created with `If-None-Match: *` and deleted last, once the dataset is complete;
/// one left behind tells of a writer killed by SIGKILL or a crash.
pub const WRITING_MARKER: &str = ".nczarrfs-writing";

/// The Zarr metadata objects whose presence makes a prefix a group or an array.
const ZARR_MARKERS: [&str; 6] = [
    ".zgroup",
    ".zarray",
    ".zattrs",
    ".zmetadata",
    "zarr.json",
    ".nczarr",
];

/// Where the run stands with the objects it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Writing: puts go through and are recorded.
    Writing,
    /// The dataset is complete and stays.
    Kept,
    /// What was written is deleted (a failure, a signal); later puts are refused.
    Withdrawn,
}

/// The map a run writes its new dataset through: a claimed prefix that records every key
/// put, so that [`ClaimedPrefix::withdraw`] deletes exactly those.
#[derive(Debug)]
pub struct ClaimedPrefix {
    s3: Arc<S3Map>,
    /// Held shared by each put, exclusively to end the writing: a withdrawal waits for the
    /// puts in flight, so that none lands after the deletion.
    state: RwLock<State>,
    /// Every key put, recorded before its request: a put that the server stored but did not
    /// answer is deleted too.
    written: Mutex<BTreeSet<String>>,
}

impl ClaimedPrefix {
    /// Claims the prefix of `target` for a new dataset: refuses a prefix inside another
    /// dataset, one that holds anything, and one that another run has claimed.
    pub fn claim(target: &Location, s3: &S3Location) -> Result<Arc<ClaimedPrefix>> {
        check_outside_datasets(target, s3)?;
        let map = Arc::new(S3Map::open(s3, true)?);
        check_empty_prefix(target, map.as_ref(), &[])?;
        let marker = marker_contents();
        let ours = |map: &S3Map| -> Result<bool> {
            Ok(map.get(WRITING_MARKER)?.as_deref() == Some(marker.as_bytes()))
        };
        match map.put_new(WRITING_MARKER, marker.as_bytes()) {
            Ok(true) => {}
            // A retry of a PUT whose answer was lost finds this run's own marker.
            Ok(false) if ours(&map)? => {}
            Ok(false) => return Err(claimed_by_another(target, map.as_ref())),
            // The server may have stored the marker and the answer been lost (a connection
            // reset, a timeout): the marker read back tells. Another run's is left alone.
            Err(put_failed) => match ours(&map) {
                Ok(true) => log::info!(
                    "{}: the answer to the claim was lost, but the marker stored is this                      run's: {put_failed}",
                    map.describe()
                ),
                Ok(false) => return Err(put_failed),
                Err(e) => {
                    return Err(Error::Storage {
                        key: WRITING_MARKER.to_string(),
                        reason: format!(
                            "{put_failed}; whether the marker was stored is unknown (reading                              it back failed: {e}): if {WRITING_MARKER} names this process                              ({}), delete it",
                            std::process::id()
                        ),
                    })
                }
            },
        }
        let claimed = Arc::new(ClaimedPrefix {
            s3: map,
            state: RwLock::new(State::Writing),
            written: Mutex::new(BTreeSet::new()),
        });
        // A writer that is not nczarrfs may have put objects between the check and the claim.
        if let Err(e) = check_empty_prefix(target, claimed.s3.as_ref(), &[WRITING_MARKER]) {
            claimed.withdraw();
            return Err(e);
        }
        Ok(claimed)
    }

    /// Keeps the complete dataset: later withdrawals delete nothing, and the marker goes.
    pub fn keep(&self) {
        *self.state.write().unwrap_or_else(|e| e.into_inner()) = State::Kept;
        if let Err(e) = self.s3.delete(WRITING_MARKER) {
            log::warn!(
                "{} is complete, but its marker {WRITING_MARKER} stays: {e}",
                self.s3.describe()
            );
        }
    }

    /// Deletes every object this run wrote, and its marker, unless the dataset was kept or
    /// already withdrawn; refuses every later put. Failures are logged.
    pub fn withdraw(&self) {
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        if *state != State::Writing {
            return;
        }
        *state = State::Withdrawn;
        let mut written: Vec<String> =
            std::mem::take(&mut *self.written.lock().unwrap_or_else(|e| e.into_inner()))
                .into_iter()
                .collect();
        written.push(WRITING_MARKER.to_string());
        if let Err(e) = self.s3.delete_objects(&written) {
            log::warn!(
                "objects of the unfinished dataset may stay under {}; delete them: {e}",
                self.s3.describe()
            );
        }
    }

    /// Makes a catchable signal withdraw the dataset before it ends the process.
    pub fn withdraw_on_signals(self: &Arc<Self>) -> interrupt::RegisteredCleanup {
        let claimed = Arc::clone(self);
        interrupt::on_signal(Arc::new(move || claimed.withdraw()))
    }

    /// Runs a put of `keys` while writing, after recording them.
    fn putting<'k>(
        &self,
        keys: impl IntoIterator<Item = &'k str>,
        put: impl FnOnce() -> Result<()>,
    ) -> Result<()> {
        let state = self.state.read().unwrap_or_else(|e| e.into_inner());
        if *state != State::Writing {
            return Err(Error::Storage {
                key: self.s3.describe(),
                reason: "the writing was stopped and what it wrote deleted".into(),
            });
        }
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend(keys.into_iter().map(str::to_string));
        put()
    }
}

/// Who claims the prefix: enough to tell a live writer from one killed long ago.
fn marker_contents() -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    serde_json::json!({
        "writer": format!("nczarrfs {}", env!("CARGO_PKG_VERSION")),
        "host": hostname(),
        "pid": std::process::id(),
        "since_unix_ns": since.as_nanos().to_string(),
    })
    .to_string()
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_default()
}

fn claimed_by_another(target: &Location, map: &S3Map) -> Error {
    let who = map
        .get(WRITING_MARKER)
        .ok()
        .flatten()
        .map(|m| String::from_utf8_lossy(&m).into_owned())
        .unwrap_or_default();
    Error::Busy(format!(
        "{} is being written by another gen or copy ({WRITING_MARKER}: {who}); nothing is \
         written. If no such process runs (it was killed), delete the objects under the \
         prefix first",
        target.shown()
    ))
}

/// Refuses an object-store destination that holds anything but `own` keys: a dataset there
/// is not replaced (an object store has no atomic rename, so a failed replacement would
/// leave neither), and other objects would mix with the new dataset's (a stray `v/0` would
/// become `v`'s values).
fn check_empty_prefix(target: &Location, map: &S3Map, own: &[&str]) -> Result<()> {
    let children: Vec<String> = map
        .search("")?
        .into_iter()
        .filter(|c| !own.contains(&c.as_str()))
        .collect();
    if children.is_empty() {
        return Ok(());
    }
    if children.iter().any(|c| c == WRITING_MARKER) {
        return Err(claimed_by_another(target, map));
    }
    let why = if children.iter().any(|c| ZARR_MARKERS.contains(&c.as_str())) {
        "already holds a dataset, which is not replaced on an object store"
    } else {
        "holds other objects, which a new dataset would mix with"
    };
    Err(Error::NotPermitted(format!(
        "{} {why} (found {}); delete them first or choose an empty prefix",
        target.shown(),
        children
            .iter()
            .take(3)
            .cloned()
            .collect::<Vec<_>>()
            .join(", ")
    )))
}

/// Refuses a destination prefix inside a Zarr dataset (a parent prefix, up to the bucket,
/// holds Zarr metadata): the new dataset would become a group of that one, or sit among an
/// array's chunks, where a later write of that array deletes it. This covers a destination
/// inside a copy's own source. A parent that the credentials may not list is not checked.
fn check_outside_datasets(target: &Location, s3: &S3Location) -> Result<()> {
    let prefix = s3.prefix.trim_matches('/');
    if prefix.is_empty() {
        return Ok(());
    }
    let bucket = S3Map::open(
        &S3Location {
            prefix: String::new(),
            ..s3.clone()
        },
        false,
    )?;
    let segments: Vec<&str> = prefix.split('/').collect();
    for depth in (0..segments.len()).rev() {
        let parent = segments[..depth].join("/");
        // One request per marker, not a listing: a parent such as the bucket's root may
        // hold many keys.
        let mut found = Vec::new();
        for marker in &ZARR_MARKERS {
            match bucket.exists(&join_key(&[&parent, marker])) {
                Ok(true) => found.push(*marker),
                Ok(false) => {}
                Err(e) => log::info!("not checked whether {parent:?} is a Zarr dataset: {e}"),
            }
        }
        if !found.is_empty() {
            let what = match found.contains(&".zarray") {
                true => "array",
                false => "dataset (or group)",
            };
            let shown = match parent.is_empty() {
                true => format!("at the root of bucket {}", s3.bucket),
                false => format!("{}/{parent}", s3.bucket),
            };
            return Err(Error::Invalid(format!(
                "{} is inside the Zarr {what} {shown}, which writing there would change; \
                 nothing is written (choose a destination outside it)",
                target.shown()
            )));
        }
    }
    Ok(())
}

impl ZMap for ClaimedPrefix {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.s3.get(key)
    }

    fn get_metadata(&self, key: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        self.s3.get_metadata(key, limit)
    }

    fn get_many_metadata(&self, keys: &[String], limit: u64) -> Vec<Result<Option<Vec<u8>>>> {
        self.s3.get_many_metadata(keys, limit)
    }

    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Option<Vec<u8>>> {
        self.s3.get_range(key, offset, len)
    }

    fn get_suffix(&self, key: &str, len: u64) -> Result<Option<Vec<u8>>> {
        self.s3.get_suffix(key, len)
    }

    fn get_many(&self, keys: &[String]) -> Vec<Result<Option<Vec<u8>>>> {
        self.s3.get_many(keys)
    }

    fn get_each(&self, keys: &[String], each: &mut dyn FnMut(usize, Result<Option<Vec<u8>>>)) {
        self.s3.get_each(keys, each)
    }

    fn get_fed(&self, feed: &mut dyn Feed) {
        self.s3.get_fed(feed)
    }

    fn concurrent_gets(&self) -> usize {
        self.s3.concurrent_gets()
    }

    fn exists(&self, key: &str) -> Result<bool> {
        self.s3.exists(key)
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.putting([key], || self.s3.put(key, value))
    }

    fn put_many(&self, objects: &[(String, Vec<u8>)]) -> Result<()> {
        self.putting(objects.iter().map(|(k, _)| k.as_str()), || {
            self.s3.put_many(objects)
        })
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.s3.delete(key)
    }

    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        self.s3.search(prefix)
    }

    fn flush(&self) -> Result<()> {
        self.s3.flush()
    }

    fn read_only(&self) -> bool {
        false
    }

    fn write_back_backoff(&self) -> Option<std::time::Duration> {
        self.s3.write_back_backoff()
    }

    fn describe(&self) -> String {
        self.s3.describe()
    }
}
