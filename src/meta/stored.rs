//! [`StoredMetadata`]: what a writer knows of the metadata objects stored, so that a rewrite
//! of the metadata stores only the objects that changed and reads back only those it must.
//!
//! Per object it keeps two fingerprints (no copy of the JSON): of the bytes stored, and of
//! the JSON that, about to be written, would leave the object as it is. A writer opened on a
//! dataset starts from the objects its open read ([`ReadRecorder`]), so its first change reads
//! nothing again; one that stores objects knows what it stored.

use std::collections::{HashMap, HashSet};
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use crate::zmap::ZMap;
use crate::Result;

/// Two 64-bit hashes, differently salted: a changed object taken for unchanged would not be
/// stored, so a single 64-bit hash is not enough of a margin.
pub(crate) type Fingerprint = (u64, u64);

/// The fingerprint of an object's bytes.
pub(crate) fn fingerprint(bytes: &[u8]) -> Fingerprint {
    let salted = |salt: u8| {
        let mut h = DefaultHasher::new();
        salt.hash(&mut h);
        bytes.hash(&mut h);
        h.finish()
    };
    (salted(0), salted(1))
}

/// The fingerprint of a JSON value, equal for values that are equal as `serde_json` compares
/// them: members in any order, `-0.0` as `0.0`, `1` and `1.0` apart.
pub(crate) fn json_fingerprint(value: &Value) -> Fingerprint {
    fn feed(v: &Value, h: &mut DefaultHasher) {
        match v {
            Value::Null => 0u8.hash(h),
            Value::Bool(b) => (1u8, b).hash(h),
            Value::Number(n) => {
                if let Some(u) = n.as_u64() {
                    (2u8, u).hash(h);
                } else if let Some(i) = n.as_i64() {
                    (3u8, i).hash(h);
                } else {
                    let f = n.as_f64().unwrap_or_default();
                    // `+ 0.0` makes -0.0 the 0.0 it equals.
                    (4u8, (f + 0.0).to_bits()).hash(h);
                }
            }
            Value::String(s) => (5u8, s).hash(h),
            Value::Array(items) => {
                (6u8, items.len()).hash(h);
                items.iter().for_each(|item| feed(item, h));
            }
            Value::Object(members) => {
                (7u8, members.len()).hash(h);
                let mut sorted: Vec<(&String, &Value)> = members.iter().collect();
                sorted.sort_unstable_by(|a, b| a.0.cmp(b.0));
                for (name, item) in sorted {
                    name.hash(h);
                    feed(item, h);
                }
            }
        }
    }
    let salted = |salt: u8| {
        let mut h = DefaultHasher::new();
        salt.hash(&mut h);
        feed(value, &mut h);
        h.finish()
    };
    (salted(0), salted(1))
}

/// Leaves out of a stored node what means the same as its absence, which nczarrfs does not
/// write: a Zarr v3 array's empty `storage_transformers` (zarr-python 3 writes `[]` in every
/// array's `zarr.json`). Without this, every such array would count as changed, and the
/// first change of a `rw` mount would store them all. Returns whether anything was left out.
pub(crate) fn leave_out_implied(node: &mut Value) -> bool {
    let Value::Object(members) = node else {
        return false;
    };
    let empty = |v: &Value| v.as_array().is_some_and(Vec::is_empty);
    if members.get(STORAGE_TRANSFORMERS).is_some_and(empty) {
        members.remove(STORAGE_TRANSFORMERS);
        return true;
    }
    false
}

/// A Zarr v3 array's `storage_transformers` member.
pub(crate) const STORAGE_TRANSFORMERS: &str = "storage_transformers";

/// What is known of one stored metadata object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored {
    /// The object is stored.
    Object(StoredObject),
    /// No object is stored at the key.
    Absent,
    /// Nothing is known: the next rewrite reads the object.
    Unread,
}

/// Fingerprints of one stored object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StoredObject {
    /// Of the bytes stored.
    bytes: Fingerprint,
    /// Of the JSON that, about to be written, leaves the object as it is: the stored JSON;
    /// for a pure Zarr object whose attributes keep their stored spelling, the JSON it would
    /// have without that. `None` when the stored bytes are not JSON that `serde_json` reads.
    accepts: Option<Fingerprint>,
    /// Whether the stored object holds that JSON itself, not another spelling of it: a
    /// consolidated summary, which copies the objects, can then copy it without reading it.
    holds_accepted: bool,
}

impl Stored {
    /// The object as read from storage (`None`: it does not exist).
    pub(crate) fn found(bytes: Option<&[u8]>) -> Stored {
        match bytes {
            None => Stored::Absent,
            Some(bytes) => {
                let mut json = serde_json::from_slice::<Value>(bytes).ok();
                let left_out = json.as_mut().is_some_and(leave_out_implied);
                Stored::Object(StoredObject {
                    bytes: fingerprint(bytes),
                    accepts: json.as_ref().map(json_fingerprint),
                    holds_accepted: !left_out,
                })
            }
        }
    }
}

/// What a writer knows of the metadata objects stored, so that a rewrite stores only those
/// that changed: one attribute set on a `rw` mount, or one record appended, stored the
/// objects of every variable, which made each such change cost time in proportion to the
/// number of variables (17 s with 1,000).
#[derive(Debug, Default)]
pub struct StoredMetadata {
    /// What is known of each object. A key left out is stored by the next rewrite without
    /// being read: it was not stored (a new node's), or was stored by other means (a renamed
    /// node's, copied). `None`: nothing is known, the next rewrite reads every object.
    known: Option<HashMap<String, Stored>>,
}

/// What one rewrite learned, beyond the objects it writes, for [`StoredMetadata::compare`].
#[derive(Debug, Default)]
pub(crate) struct Rewrite {
    /// Objects read back during the rewrite (`None`: not stored, or unreadable).
    pub(crate) read: HashMap<String, Option<Vec<u8>>>,
    /// For the objects whose attributes may keep their stored spelling, the fingerprint of
    /// the JSON they have before that ([`StoredObject::accepts`]).
    pub(crate) accepts: HashMap<String, Fingerprint>,
    /// What is known of objects looked at but not written (a pure Zarr `.zattrs` that is
    /// absent or empty), kept for the next rewrite.
    pub(crate) unwritten: Vec<(String, Stored)>,
}

impl StoredMetadata {
    /// Nothing is stored (a new dataset): the next rewrite stores every object.
    pub fn nothing() -> StoredMetadata {
        StoredMetadata {
            known: Some(HashMap::new()),
        }
    }

    /// What is stored is not known (objects copied or deleted by other means than a
    /// rewrite, and not tracked): the next rewrite reads the stored objects and stores those
    /// that differ.
    pub fn unknown() -> StoredMetadata {
        StoredMetadata { known: None }
    }

    /// What an open read ([`ReadRecorder::into_stored`]); `unread` names the objects the open
    /// did not read that may be stored, which the next rewrite reads.
    pub(crate) fn read_at_open(mut objects: HashMap<String, Stored>, unread: &[&str]) -> Self {
        for key in unread {
            objects.entry(key.to_string()).or_insert(Stored::Unread);
        }
        StoredMetadata {
            known: Some(objects),
        }
    }

    /// Objects under the node key `prefix` were stored by other means than a rewrite (a
    /// renamed node's, copied to its new key): what was known of them is forgotten, so the
    /// next rewrite stores them. What is known of the other objects stays: a rename then
    /// rewrites the moved node's objects and those it changes (its parent's), without reading
    /// back those of every other node.
    pub fn forget_under(&mut self, prefix: &str) {
        if let Some(known) = &mut self.known {
            let under = format!("{prefix}/");
            known.retain(|key, _| key != prefix && !key.starts_with(&under));
        }
    }

    /// What is known of the object at `key`; `Unread` when nothing is.
    pub(crate) fn of(&self, key: &str) -> Stored {
        match &self.known {
            Some(known) => known.get(key).copied().unwrap_or(Stored::Unread),
            None => Stored::Unread,
        }
    }

    /// Whether a rewrite must read the object at `key` to keep its attributes' stored
    /// spelling, `accepts` being the fingerprint of the JSON it would have without that: not
    /// when the stored object is known to be what that JSON leaves as it is, unless a
    /// consolidated summary (`summarized`) must copy a stored spelling it does not know.
    pub(crate) fn must_read_to_keep(
        &self,
        key: &str,
        accepts: Fingerprint,
        summarized: bool,
    ) -> bool {
        match self.of(key) {
            Stored::Object(o) if o.accepts == Some(accepts) => summarized && !o.holds_accepted,
            Stored::Absent => false,
            _ => true,
        }
    }

    /// Whether the object at `key` holds anything but `{}`; `None` when that is not known.
    pub(crate) fn holds_more_than_empty(&self, key: &str) -> Option<bool> {
        match self.of(key) {
            Stored::Absent => Some(false),
            Stored::Object(StoredObject {
                accepts: Some(accepts),
                ..
            }) => Some(accepts != json_fingerprint(&Value::Object(Default::default()))),
            _ => None,
        }
    }

    /// Which of `encoded` (key, bytes; `values` their JSON) differ from what is stored, and
    /// what is known of each once the changed ones are stored. Objects not known are read
    /// (in one batch) and compared. Stored by another writer, an object that holds the same
    /// JSON in other spelling (spacing, key order) is left as it is; anything unreadable is
    /// replaced.
    pub(crate) fn compare(
        &self,
        map: &dyn ZMap,
        encoded: &[(String, Vec<u8>)],
        values: &[Value],
        rewrite: &mut Rewrite,
    ) -> Vec<(bool, StoredObject)> {
        let unread: Vec<String> = encoded
            .iter()
            .map(|(key, _)| key)
            .filter(|key| !rewrite.read.contains_key(*key))
            .filter(|key| match &self.known {
                Some(known) => known.get(*key) == Some(&Stored::Unread),
                None => true,
            })
            .cloned()
            .collect();
        if !unread.is_empty() {
            let found = map.get_many_metadata(&unread, crate::zmap::METADATA_LIMIT);
            for (key, found) in unread.into_iter().zip(found) {
                rewrite.read.insert(key, found.ok().flatten());
            }
        }
        let known = self.known.as_ref();
        encoded
            .iter()
            .zip(values)
            .map(|((key, bytes), value)| {
                let value_fp = json_fingerprint(value);
                let accepts = rewrite.accepts.get(key).copied().unwrap_or(value_fp);
                let unchanged = |bytes: Fingerprint, holds_accepted: bool| {
                    let known = StoredObject {
                        bytes,
                        accepts: Some(accepts),
                        holds_accepted,
                    };
                    (false, known)
                };
                if let Some(found) = rewrite.read.get(key) {
                    if let Some(old) = found {
                        let old_json = serde_json::from_slice::<Value>(old).ok();
                        if old == bytes || old_json.as_ref() == Some(value) {
                            return unchanged(fingerprint(old), value_fp == accepts);
                        }
                        if let Some(mut old_json) = old_json {
                            if leave_out_implied(&mut old_json) && old_json == *value {
                                return unchanged(fingerprint(old), false);
                            }
                        }
                    }
                } else if let Some(Stored::Object(o)) = known.and_then(|k| k.get(key)) {
                    if o.bytes == fingerprint(bytes) {
                        return unchanged(o.bytes, value_fp == accepts);
                    }
                    if o.accepts == Some(accepts) {
                        return unchanged(o.bytes, o.holds_accepted);
                    }
                }
                let stored = StoredObject {
                    bytes: fingerprint(bytes),
                    accepts: Some(accepts),
                    holds_accepted: value_fp == accepts,
                };
                (true, stored)
            })
            .collect()
    }

    /// Until the objects of a rewrite are stored, what storage holds is not known.
    pub(crate) fn forget_all(&mut self) {
        self.known = None;
    }

    /// The objects of a rewrite are stored: `objects` is what is known of each, `unwritten`
    /// of objects looked at but not written. Other keys are no longer known.
    pub(crate) fn stored(
        &mut self,
        objects: impl IntoIterator<Item = (String, StoredObject)>,
        unwritten: Vec<(String, Stored)>,
    ) {
        let mut known: HashMap<String, Stored> = unwritten
            .into_iter()
            .filter(|(_, s)| *s != Stored::Unread)
            .collect();
        known.extend(objects.into_iter().map(|(k, o)| (k, Stored::Object(o))));
        self.known = Some(known);
    }
}

/// A map that records what is read through it of the metadata objects a writer stores, so
/// that a writer opened on a dataset starts from what its open read instead of reading every
/// object again at its first change. What it learnt also answers the questions a writer's open
/// asks once the model is read (which format and dialect to keep writing, whether the dataset
/// is consolidated, whether it names xarray's dimensions) without asking storage again: an
/// object asked for a second time, or asked whether it exists, costs no request.
#[derive(Debug)]
pub struct ReadRecorder<'a> {
    inner: Box<dyn ZMap + 'a>,
    record: Arc<Mutex<Record>>,
}

/// What a [`ReadRecorder`] learnt, shared with the recorder of each one-pass map it hands out.
#[derive(Debug, Default)]
struct Record {
    /// Every metadata object read, by its fingerprints, or as absent.
    stored: HashMap<String, Stored>,
    /// The root's metadata objects as read (`None`: absent). They are the few that a writer's
    /// open looks at again; the others are kept only as fingerprints.
    root: HashMap<String, Option<Vec<u8>>>,
    /// The `.zattrs` objects read that name xarray's `_ARRAY_DIMENSIONS`.
    xarray_dims: HashSet<String>,
}

/// A borrowed map as an owned one, for [`ReadRecorder`].
#[derive(Debug)]
struct Borrowed<'a>(&'a dyn ZMap);

/// Whether the bytes of a `.zattrs` object name xarray's `_ARRAY_DIMENSIONS`.
pub(crate) fn names_xarray_dims(bytes: &[u8]) -> bool {
    const NAME: &[u8] = b"_ARRAY_DIMENSIONS";
    bytes.windows(NAME.len()).any(|w| w == NAME)
}

/// Whether `key` is that of a metadata object a writer stores.
fn is_metadata(key: &str) -> bool {
    let leaf = key.rsplit('/').next().unwrap_or(key);
    matches!(
        leaf,
        ".zgroup" | ".zattrs" | ".zarray" | ".zmetadata" | "zarr.json"
    )
}

impl<'a> ReadRecorder<'a> {
    /// Records the reads of `map`.
    pub fn new(map: &'a dyn ZMap) -> Self {
        ReadRecorder {
            inner: Box::new(Borrowed(map)),
            record: Arc::default(),
        }
    }

    /// What was read: every metadata object by its fingerprints, or as absent.
    pub(crate) fn into_stored(self) -> HashMap<String, Stored> {
        std::mem::take(&mut self.lock().stored)
    }

    /// Whether the `.zattrs` object at `key` names xarray's `_ARRAY_DIMENSIONS`; `None` when
    /// it was not read.
    pub(crate) fn names_xarray_dims(&self, key: &str) -> Option<bool> {
        let record = self.lock();
        record
            .stored
            .contains_key(key)
            .then(|| record.xarray_dims.contains(key))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Record> {
        self.record.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, key: &str, got: &Result<Option<Vec<u8>>>) {
        if !is_metadata(key) {
            return;
        }
        // A failed read tells nothing.
        let Ok(found) = got else { return };
        let stored = Stored::found(found.as_deref());
        let mut record = self.lock();
        if !key.contains('/') {
            record.root.insert(key.to_string(), found.clone());
        }
        if key.ends_with(".zattrs") && found.as_deref().is_some_and(names_xarray_dims) {
            record.xarray_dims.insert(key.to_string());
        }
        record.stored.insert(key.to_string(), stored);
    }

    /// The root object at `key` as read before, refused as a metadata read is when longer
    /// than `limit`; `None` when it was not read.
    fn read_before(&self, key: &str, limit: Option<u64>) -> Option<Result<Option<Vec<u8>>>> {
        let bytes = self.lock().root.get(key)?.clone();
        Some(match (bytes, limit) {
            (Some(b), Some(limit)) if b.len() as u64 > limit => Err(
                crate::zmap::metadata_too_large(key, Some(b.len() as u64), limit),
            ),
            (bytes, _) => Ok(bytes),
        })
    }

    /// `keys` read as `fetch` reads those not read before, in one call.
    fn read_many(
        &self,
        keys: &[String],
        limit: Option<u64>,
        fetch: impl FnOnce(&[String]) -> Vec<Result<Option<Vec<u8>>>>,
    ) -> Vec<Result<Option<Vec<u8>>>> {
        let before: Vec<Option<Result<Option<Vec<u8>>>>> =
            keys.iter().map(|k| self.read_before(k, limit)).collect();
        let unread: Vec<String> = keys
            .iter()
            .zip(&before)
            .filter(|(_, b)| b.is_none())
            .map(|(k, _)| k.clone())
            .collect();
        let mut fetched = if unread.is_empty() {
            Vec::new()
        } else {
            fetch(&unread)
        }
        .into_iter();
        keys.iter()
            .zip(before)
            .map(|(key, before)| {
                before.unwrap_or_else(|| {
                    let got = fetched.next().unwrap_or(Ok(None));
                    self.record(key, &got);
                    got
                })
            })
            .collect()
    }
}

/// The other methods of a map, handed to `$inner` as they are: reads of chunks, writes.
macro_rules! pass_through {
    ($inner:tt) => {
        fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Option<Vec<u8>>> {
            self.$inner.get_range(key, offset, len)
        }
        fn get_suffix(&self, key: &str, len: u64) -> Result<Option<Vec<u8>>> {
            self.$inner.get_suffix(key, len)
        }
        fn get_each(&self, keys: &[String], each: &mut dyn FnMut(usize, Result<Option<Vec<u8>>>)) {
            self.$inner.get_each(keys, each)
        }
        fn concurrent_gets(&self) -> usize {
            self.$inner.concurrent_gets()
        }
        fn partial_reads_are_cheap(&self) -> bool {
            self.$inner.partial_reads_are_cheap()
        }
        fn put(&self, key: &str, value: &[u8]) -> Result<()> {
            self.$inner.put(key, value)
        }
        fn delete(&self, key: &str) -> Result<()> {
            self.$inner.delete(key)
        }
        fn search(&self, prefix: &str) -> Result<Vec<String>> {
            self.$inner.search(prefix)
        }
        fn read_only(&self) -> bool {
            self.$inner.read_only()
        }
        fn local_space(&self) -> Option<crate::zmap::Space> {
            self.$inner.local_space()
        }
        fn describe(&self) -> String {
            self.$inner.describe()
        }
    };
}

impl ZMap for Borrowed<'_> {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.0.get(key)
    }
    fn get_metadata(&self, key: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        self.0.get_metadata(key, limit)
    }
    fn get_many(&self, keys: &[String]) -> Vec<Result<Option<Vec<u8>>>> {
        self.0.get_many(keys)
    }
    fn get_many_metadata(&self, keys: &[String], limit: u64) -> Vec<Result<Option<Vec<u8>>>> {
        self.0.get_many_metadata(keys, limit)
    }
    fn exists(&self, key: &str) -> Result<bool> {
        self.0.exists(key)
    }
    fn for_one_pass(&self) -> Option<Box<dyn ZMap + '_>> {
        self.0.for_one_pass()
    }
    pass_through!(0);
}

impl ZMap for ReadRecorder<'_> {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        if let Some(got) = self.read_before(key, None) {
            return got;
        }
        let got = self.inner.get(key);
        self.record(key, &got);
        got
    }
    fn get_metadata(&self, key: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        if let Some(got) = self.read_before(key, Some(limit)) {
            return got;
        }
        let got = self.inner.get_metadata(key, limit);
        self.record(key, &got);
        got
    }
    fn get_many(&self, keys: &[String]) -> Vec<Result<Option<Vec<u8>>>> {
        self.read_many(keys, None, |unread| self.inner.get_many(unread))
    }
    fn get_many_metadata(&self, keys: &[String], limit: u64) -> Vec<Result<Option<Vec<u8>>>> {
        self.read_many(keys, Some(limit), |unread| {
            self.inner.get_many_metadata(unread, limit)
        })
    }
    /// Answered from what was read when the object at `key` was.
    fn exists(&self, key: &str) -> Result<bool> {
        match self.lock().stored.get(key) {
            Some(Stored::Object(_)) => return Ok(true),
            Some(Stored::Absent) => return Ok(false),
            Some(Stored::Unread) | None => {}
        }
        self.inner.exists(key)
    }
    /// The inner map's pass, its reads recorded here too.
    fn for_one_pass(&self) -> Option<Box<dyn ZMap + '_>> {
        let pass = self.inner.for_one_pass()?;
        Some(Box::new(ReadRecorder {
            inner: pass,
            record: Arc::clone(&self.record),
        }))
    }
    pass_through!(inner);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn json_fingerprints_compare_as_serde_json_compares() {
        let parse = |s: &str| serde_json::from_str::<Value>(s).unwrap();
        let same = |a: &str, b: &str| {
            assert_eq!(parse(a), parse(b));
            assert_eq!(
                json_fingerprint(&parse(a)),
                json_fingerprint(&parse(b)),
                "{a} {b}"
            );
        };
        let differ = |a: &str, b: &str| {
            assert_ne!(parse(a), parse(b));
            assert_ne!(
                json_fingerprint(&parse(a)),
                json_fingerprint(&parse(b)),
                "{a} {b}"
            );
        };
        same(r#"{"a": 1, "b": [1.5, "x"]}"#, r#"{ "b":[1.5,"x"],"a":1 }"#);
        same("-0.0", "0.0");
        same("1e2", "100.0");
        differ("1", "1.0");
        differ("-1", "18446744073709551615");
        differ(r#"{"a": [1]}"#, r#"{"a": 1}"#);
        differ(r#"["ab", "c"]"#, r#"["a", "bc"]"#);
        differ(r#"{"ab": "c"}"#, r#"{"a": "bc"}"#);
        differ("{}", "[]");
        assert_ne!(
            json_fingerprint(&json!(null)),
            json_fingerprint(&json!(false))
        );
    }

    #[test]
    fn an_empty_storage_transformers_list_is_the_same_array() {
        // zarr-python 3 writes `"storage_transformers": []`; nczarrfs leaves the member out.
        let written = json!({"zarr_format": 3, "node_type": "array", "shape": [4]});
        let mut zarr_python = written.clone();
        zarr_python["storage_transformers"] = json!([]);
        let stored = serde_json::to_vec_pretty(&zarr_python).unwrap();
        let encoded = [(
            "a/zarr.json".to_string(),
            serde_json::to_vec(&written).unwrap(),
        )];
        let map = crate::zmap::MemoryMap::new();
        map.insert("a/zarr.json", stored.clone()).unwrap();
        // Known from the open's read, and read back when nothing is known.
        let at_open = HashMap::from([(encoded[0].0.clone(), Stored::found(Some(&stored)))]);
        for known in [
            StoredMetadata::read_at_open(at_open, &[]),
            StoredMetadata::unknown(),
        ] {
            let compared = known.compare(
                &map,
                &encoded,
                std::slice::from_ref(&written),
                &mut Rewrite::default(),
            );
            assert!(!compared[0].0, "rewritten");
        }
        // A transformer is another array.
        let mut transformed = zarr_python.clone();
        transformed["storage_transformers"] = json!([{"name": "x"}]);
        let stored = serde_json::to_vec(&transformed).unwrap();
        map.insert("a/zarr.json", stored.clone()).unwrap();
        let at_open = HashMap::from([(encoded[0].0.clone(), Stored::found(Some(&stored)))]);
        for known in [
            StoredMetadata::read_at_open(at_open, &[]),
            StoredMetadata::unknown(),
        ] {
            let compared = known.compare(
                &map,
                &encoded,
                std::slice::from_ref(&written),
                &mut Rewrite::default(),
            );
            assert!(compared[0].0, "not rewritten");
        }
    }
}
