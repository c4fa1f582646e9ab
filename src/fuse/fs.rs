//! The [`fuser::Filesystem`] implementation. Several session threads each read requests from
//! the kernel and answer them themselves, reads of `data` included; only the prefetching of
//! chunks ahead of sequential readers runs on threads of its own.
//!
//! A `rw` mount serves one [`DatasetWriter`] behind a reader-writer lock: metadata changes,
//! flushes and writes that grow a variable take it exclusively, data reads share it. So do
//! the other writes of values, one at a time: the chunk cache keeps each chunk whole for the
//! readers, and a write need not wait for reads that wait on storage (S3). After
//! every change of the model a new [`Snapshot`] of it is published for lookups and generated
//! files, and the kernel is told to cache nothing (zero TTLs), because one write can change the
//! size of other files (every variable on a grown dimension) and every metadata file.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant, SystemTime};

use fuser::{
    AccessFlags, BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags,
    Generation, INodeNo, InitFlags, IoctlFlags, KernelConfig, LockOwner, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyIoctl, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow, WriteFlags,
};

use crate::chunk::{ChunkEngine, Hyperslab};
use crate::create::{AttrTarget, DatasetWriter};
use crate::dataset::OpenDataset;
use crate::error::quoted;
use crate::location::Mode;
use crate::model::{AttrValue, Dataset, VarId};
use crate::zmap::{PinnedMap, Space, ZMap};
use crate::{meta, Error, Result};

use super::content;
use super::daemon::OpenDataFile;
use super::extents::{AppendTail, OpenTruncations, Truncation};
use super::inodes::{parent, InodeTable};
use super::layout::{self, FileKind, Node, Owner, Resolved};
use super::options::MountOptions;
use super::sizes::ReportedSizes;
use super::slab::{element_range_slabs, slab_len};
use super::splice::{self, Spliced};
use super::stream::{Geometry, ReadStream};
use super::workers::Workers;
use super::write::{
    grow_data, parse_attr_text, quantize_attr_value, why_fixed_size, write_data, write_data_within,
    PartialElements,
};

/// How long the kernel may cache names and attributes when the dataset is declared static.
const STATIC_TTL: Duration = Duration::from_secs(3600);
/// Most distinct failure messages remembered so that each is logged once.
const MAX_LOGGED: usize = 10_000;

/// Where a snapshot's values come from.
#[derive(Debug)]
pub enum Source {
    /// A read-only mount's chunk engine (and its cache), serving exactly the snapshot's model.
    Engine(Box<ChunkEngine>),
    /// A `rw` mount's writer: reads see every write so far, through the writer's own model
    /// (which only ever grows relative to the snapshot's, so the snapshot's slabs stay valid).
    Writer(Arc<RwLock<DatasetWriter>>),
}

/// One consistent view of the dataset: a model and the source of its values.
#[derive(Debug)]
pub struct Snapshot {
    /// The metadata model.
    pub model: Dataset,
    /// The values behind this model.
    pub source: Source,
    /// Bumped whenever the model changes; generated file contents are cached per generation.
    pub generation: u64,
    /// When the model last changed (the mtime of every node).
    pub changed: SystemTime,
    /// The storage the model was read from, which a read-only mount's engine reads through:
    /// once a dataset put in its place has been taken up, reads through this snapshot fail
    /// (see [`PinnedMap`]). `None` for a `rw` mount, whose writer keeps to the storage it
    /// claimed.
    pub pin: Option<Arc<PinnedMap>>,
}

impl Snapshot {
    /// A read-only mount's snapshot of `model`, read from what `map` reads now, whose values
    /// are read through a new engine with a cache of `cache_bytes`.
    fn over_storage(
        map: &Arc<dyn ZMap>,
        cache_bytes: usize,
        model: Dataset,
        generation: u64,
    ) -> Snapshot {
        let pin = Arc::new(PinnedMap::new(Arc::clone(map)));
        let engine = ChunkEngine::new(Arc::clone(&pin) as Arc<dyn ZMap>, cache_bytes);
        Snapshot {
            model,
            source: Source::Engine(Box::new(engine)),
            generation,
            changed: SystemTime::now(),
            pin: Some(pin),
        }
    }

    /// Whether the storage this snapshot's model was read from is still the one read (see
    /// [`Snapshot::pin`]).
    fn reads_its_storage(&self) -> bool {
        self.pin.as_ref().is_none_or(|pin| pin.is_current())
    }

    /// Reads `slab` of `var` (see [`ChunkEngine::read`]).
    pub fn read(&self, var: VarId, slab: &Hyperslab, out: &mut [u8]) -> Result<()> {
        match &self.source {
            Source::Engine(engine) => engine.read(&self.model, var, slab, out),
            Source::Writer(w) => read_lock(w).read(var, slab, out),
        }
    }

    /// Runs `f` with the chunk engine behind this snapshot.
    fn with_engine<R>(&self, f: impl FnOnce(&ChunkEngine) -> R) -> R {
        match &self.source {
            Source::Engine(engine) => f(engine),
            Source::Writer(w) => f(read_lock(w).engine()),
        }
    }
}

fn read_lock<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|e| e.into_inner())
}

fn write_lock<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|e| e.into_inner())
}

/// Generated content of one inode and the model generation it was made from.
type Generated = (u64, Arc<Vec<u8>>);

/// Prefetches that run at once; each decodes its window on every core (the chunk engine's
/// parallel loops), so more would only queue there.
const PREFETCH_THREADS: usize = 2;

/// What a `data` file open on a read-only mount reads through (see [`Handle::follow`]).
#[derive(Debug)]
struct View {
    /// The snapshot whose model the reads decode the chunks with.
    snap: Arc<Snapshot>,
    /// Whether the file still follows the newest model, which it does for as long as every
    /// change of the model only appended records to its variable. Once a change did not, the
    /// file is the old one for good: its number was retired with the size it had then, and a
    /// later growth must not make it read on into another variable's records.
    follows: bool,
    /// What the chunks of the variable held, by the first model since the file stopped
    /// following that did not hold the view's values (see [`chunks_alike`]); `Alike` until
    /// then. It never goes back: a variable made again later under the name, however much
    /// alike, is another variable, as a file made again under the name of a deleted one is
    /// never read through the deleted one's descriptors.
    lost: ChunksNow,
}

/// Which call asks [`Shared::commit`] for what a file owes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Commit {
    /// A `close` of one descriptor (FUSE's flush), which may not be the file's last.
    Flush,
    /// An `fsync`: it syncs the dataset even when nothing was written.
    Fsync,
    /// The last close of the file (FUSE's release).
    Release,
}

/// An open file.
#[derive(Debug)]
struct Handle {
    node: Node,
    /// The inode the file was opened through: `fstat` asks by it, without the handle.
    ino: u64,
    /// A `data` file on a read-only mount: the view of its variable a reader keeps (see
    /// [`Shared::read_snapshot`]). `None` on a `rw` mount, whose files always read the
    /// newest: each metadata change (creating an attribute file is one) makes a snapshot
    /// with a copy of the whole model, and a handle holding it would keep that copy alive
    /// for as long as the file stays open, one per file.
    view: Option<Mutex<View>>,
    /// Generated content, for everything but `data`.
    content: Option<Arc<Vec<u8>>>,
    /// Where a reader of `data` is heading (what to prefetch and release).
    stream: Mutex<ReadStream>,
    /// Set once something was written through this handle (a flush then syncs the dataset),
    /// or from the open when the handle owes a flush anyway (a file created, or truncated).
    wrote: AtomicBool,
    /// A `data` file opened with `O_TRUNC`: its variable, and what was written since (see
    /// [`OpenTruncations`]).
    truncation: Option<(VarId, Arc<Mutex<Truncation>>)>,
    /// Where this file's appends continue.
    append_tail: Mutex<AppendTail>,
    /// An attribute file opened for writing: the text it will hold, applied on flush.
    text: Option<Mutex<Vec<u8>>>,
    /// An attribute file opened for writing: the attribute as it was at the open, whose type
    /// types the text (`None` when the open created it: its placeholder has no type to keep).
    /// Not the attribute's value at a later flush: a text already stored by one flush of the
    /// file (`dup`, write, close the duplicate, write again) would type the rest.
    opened_value: Option<AttrValue>,
    /// What became of an attribute file opened for writing while it was open: renamed
    /// (`Some(new name)`) or removed (`None`), as a file that is open follows a rename and
    /// writes into nothing once unlinked. Unset while it keeps its name.
    moved: Mutex<Option<Option<String>>>,
    /// An attribute file that its open created: until something stores the attribute, it is
    /// the empty placeholder the create put in the model, which a failed store of the text
    /// takes out again (storage holds no such attribute; a later flush that stores the text
    /// makes the attribute anew).
    placeholder: AtomicBool,
    /// The error of the last failed flush of this file that was logged: the kernel's release
    /// after a failed close, and a close after a failed `fsync`, try again, and the same
    /// failure again is not logged again.
    logged_failure: Mutex<Option<String>>,
    /// On a `rw` mount, the group or variable the file was opened on. Handles find their
    /// object by name, and a rename may give that name to another object
    /// (`mv a old; mv b a`): this keeps the file from following the name there.
    opened: Option<Resolved>,
    /// Counts a `data` file among those open, for as long as it is (how the allocator
    /// treats freed memory depends on it).
    _data_file: Option<OpenDataFile>,
}

impl Handle {
    fn new(ino: u64, node: Node, snap: Arc<Snapshot>, writable_mount: bool) -> Self {
        let opened = match &node {
            Node::Dir(o) | Node::AttrDir(o) | Node::File(o, _) if writable_mount => {
                o.resolve(&snap.model)
            }
            _ => None,
        };
        let is_data = matches!(node, Node::File(_, FileKind::Data));
        Handle {
            opened,
            node,
            ino,
            view: (is_data && !writable_mount).then(|| {
                Mutex::new(View {
                    snap,
                    follows: true,
                    lost: ChunksNow::Alike,
                })
            }),
            content: None,
            stream: Mutex::new(ReadStream::default()),
            wrote: AtomicBool::new(false),
            truncation: None,
            append_tail: Mutex::new(AppendTail::default()),
            text: None,
            opened_value: None,
            moved: Mutex::new(None),
            placeholder: AtomicBool::new(false),
            logged_failure: Mutex::new(None),
            _data_file: is_data.then(OpenDataFile::new),
        }
    }

    /// Brings the view of a `data` file that follows the newest model up to `newest`, or
    /// ends its following when its variable changed otherwise than by appended records
    /// (see [`data_view_kept`]), and notes for good when `newest` no longer holds the
    /// view's values (see [`View::lost`]). Each published model must be offered in turn:
    /// judged against the model the file was opened with instead, a variable that grew,
    /// shrank and grew again would look grown, and the file would read the new variable's
    /// bytes beyond what it showed before; judged only against the newest, a variable
    /// deleted and made again alike would look as if it never went away.
    fn follow(&self, newest: &Arc<Snapshot>) {
        let (Some(view), Node::File(owner, FileKind::Data)) = (&self.view, &self.node) else {
            return;
        };
        let mut view = lock(view);
        if view.lost != ChunksNow::Alike || Arc::ptr_eq(&view.snap, newest) {
            return;
        }
        if view.follows && data_view_kept(owner, &view.snap.model, &newest.model) {
            view.snap = Arc::clone(newest);
            return;
        }
        view.follows = false;
        view.lost = chunks_alike(owner, &view.snap.model, &newest.model);
    }

    /// What the chunks held when they last changed meaning for this file's view (see
    /// [`View::lost`]); `Alike` for a file without a view or one whose chunks never did.
    fn lost(&self) -> ChunksNow {
        self.view
            .as_ref()
            .map_or(ChunksNow::Alike, |v| lock(v).lost)
    }

    /// The variable of a `data` file opened on a `rw` mount.
    fn data_var(&self) -> Option<VarId> {
        match (&self.node, self.opened) {
            (Node::File(_, FileKind::Data), Some(Resolved::Var(var))) => Some(var),
            _ => None,
        }
    }

    /// The object `owner` (this handle's) names in `ds`, unless a rename has since given that
    /// name to another object than the one the file was opened on: then the file, like one
    /// whose name was removed, reaches nothing.
    fn owner_in(&self, owner: &Owner, ds: &Dataset) -> Result<Resolved> {
        match (owner.resolve(ds), self.opened) {
            (Some(now), Some(opened)) if now != opened => Err(Error::NotFound(format!(
                "{} (another object took this name after a rename; the file was opened on \
                 the object that had it then)",
                owner.display()
            ))),
            (Some(now), _) => Ok(now),
            (None, _) => Err(Error::NotFound(owner.display())),
        }
    }
}

/// The errno of a failed write-side operation: what netCDF refuses (a taken or illegal name,
/// a fill value that can no longer change) is `EPERM`, groups nested too deeply for the
/// directory store (refused before any change) `ENAMETOOLONG`, the rest the storage's.
fn refusal_errno(e: &Error) -> Errno {
    match e {
        Error::Invalid(_) | Error::NotPermitted(_) => Errno::EPERM,
        Error::PathTooLong { .. } => Errno::ENAMETOOLONG,
        _ => Errno::from_i32(e.errno()),
    }
}

/// The value of attribute `name` of `owner` in `ds`, if both exist.
fn attr_value(ds: &Dataset, owner: &Owner, name: &str) -> Option<AttrValue> {
    let r = owner.resolve(ds)?;
    layout::attrs_of(ds, r)
        .iter()
        .find(|a| a.name == name)
        .map(|a| a.value.clone())
}

/// Largest run of zeros written at once where a truncated `data` file was not rewritten.
const ZERO_PIECE: usize = 16 << 20;

/// Writes zeros over what no handle has written since a `data` handle's open with `O_TRUNC`;
/// whether there was any such byte.
fn zero_unwritten(
    w: &mut DatasetWriter,
    var: VarId,
    truncation: &Mutex<Truncation>,
    partial: &PartialElements,
) -> Result<bool> {
    let size = content::data_size(w.model(), var);
    let gaps = lock(truncation).unwritten(size);
    let any = !gaps.is_empty();
    let mut zeros = Vec::new();
    for gap in gaps {
        let mut at = gap.start;
        while at < gap.end {
            let n = usize::try_from(gap.end - at).map_or(ZERO_PIECE, |n| n.min(ZERO_PIECE));
            zeros.resize(n, 0);
            let written = write_data(w, var, at, &zeros, partial)? as u64;
            if written == 0 {
                break;
            }
            lock(truncation).wrote(at..at + written);
            at += written;
        }
    }
    Ok(any)
}

/// The attribute that an attribute file opened for writing as `opened_as` stands for now,
/// given what became of it (see `Handle::moved`); `None` once it was removed.
fn current_attr_name<'a>(opened_as: &'a str, moved: &'a Option<Option<String>>) -> Option<&'a str> {
    match moved {
        None => Some(opened_as),
        Some(to) => to.as_deref(),
    }
}

/// Takes out the empty placeholder that the create of attribute file `node` put in the model,
/// after storing its text failed with `failure`. Another store of the same owner (a sibling
/// attribute set meanwhile) writes the placeholder with it, so its removal is stored now:
/// left to a later sync, storage would hold an attribute the mount no longer lists until then,
/// or for good if the daemon is killed. A store that failed for storage (a full disk, a
/// server down), not a refusal of the text, is not repeated here, where a silent server would
/// cost the close a second timeout: the removal stays pending for the next sync.
fn drop_placeholder(
    w: &mut DatasetWriter,
    target: AttrTarget,
    name: &str,
    failure: &Error,
    node: &Node,
) {
    if let Err(e) = w.del_attr(target, name) {
        log::warn!(
            "{}: the attribute this file created stays shown empty: {e}",
            node_display(node)
        );
        return;
    }
    if matches!(failure, Error::Storage { .. } | Error::Io { .. }) {
        return;
    }
    if let Err(e) = w.sync() {
        log::warn!(
            "{}: the removal of the empty attribute this file created is not stored yet (the \
             next store of the dataset stores it): {e}",
            node_display(node)
        );
    }
}

/// The entries of a directory as one snapshot shows them (`.` and `..` first), with their
/// inodes: the offset of an entry is its index plus one.
#[derive(Debug)]
struct Listing {
    snap: Arc<Snapshot>,
    entries: Arc<Vec<(u64, Node, String)>>,
}

/// How many directories' listings are kept for the requests that continue them.
const KEPT_LISTINGS: usize = 64;

/// State shared by the session threads and the prefetching threads.
#[derive(Debug)]
struct Shared {
    map: Arc<dyn ZMap>,
    mode: Mode,
    dataset_name: std::ffi::OsString,
    /// The writer of a `rw` mount.
    writer: Option<Arc<RwLock<DatasetWriter>>>,
    /// When each variable's values were last written through a `rw` mount: the mtime of its
    /// `data` file from then on (unless the metadata changed later), so that `rsync` and
    /// `make` see the change. Only the metadata has times in storage.
    values_written: Mutex<HashMap<VarId, SystemTime>>,
    /// The `data` files open with `O_TRUNC`, which every write of their variables reaches.
    truncations: OpenTruncations,
    /// Taken by writes of values that share the writer's lock with reads
    /// ([`write_data_within`]), so that they run one at a time.
    shared_writes: Mutex<()>,
    /// The bytes written so far to elements of quantized variables written in part.
    partial: PartialElements,
    opts: MountOptions,
    uid: u32,
    gid: u32,
    snap: RwLock<Arc<Snapshot>>,
    last_check: Mutex<Instant>,
    refresh_requested: AtomicBool,
    /// Set while a reload finds no dataset at the location any more (deleted underneath a
    /// read-only mount): its chunks are gone too, and values would read as fill.
    dataset_gone: AtomicBool,
    /// Set when the flush at unmount failed.
    final_flush_failed: AtomicBool,
    /// See [`MountHandle::end_process_when_destroyed`].
    exit_when_destroyed: Mutex<Option<String>>,
    inodes: Mutex<InodeTable>,
    /// Directories listed lately, by inode: the requests that continue a listing read it
    /// from here instead of making it again (a directory of 100,000 entries takes thousands
    /// of requests, and a listing made for each cost time quadratic in its size).
    listings: Mutex<HashMap<u64, Listing>>,
    contents: Mutex<HashMap<u64, Generated>>,
    /// The sizes of generated files told to the kernel (see [`Shared::generated_file_open_flags`]).
    reported_sizes: ReportedSizes,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    next_fh: AtomicU64,
    logged: Mutex<HashSet<String>>,
    /// Threads that load chunks ahead of sequential readers.
    prefetcher: Workers,
    /// The FUSE device every session thread reads its requests from, once the daemon has
    /// handed it over: reads of uncompressed chunk files are then answered by splicing.
    device: OnceLock<OwnedFd>,
    /// Set once the kernel refused a spliced reply: reads are copied from then on.
    splice_refused: AtomicBool,
}

/// The filesystem served by a mount.
#[derive(Debug)]
pub struct NczarrFs {
    shared: Arc<Shared>,
    /// The kernel opens directories without asking (see `opendir`).
    no_opendir: bool,
    /// `data` files are opened for direct I/O (`-o direct_io`, and `rw` mounts; see `init`).
    direct_data: bool,
}

/// A mounted filesystem as other threads of the daemon see it: they ask it to re-read its
/// metadata (SIGHUP), end the staleness window of values (every `ttl`), and learn after the
/// session whether the final flush stored everything.
#[derive(Debug, Clone)]
pub struct MountHandle(Arc<Shared>);

impl MountHandle {
    /// Makes the process end as soon as the kernel has let go of the mount and `destroy` has
    /// flushed (exit status 1, after `lost_message`, if that flush failed). A daemon needs
    /// this: once the session ends, fuser 0.18 unmounts the mount point *by path* even though
    /// the kernel has let go of this mount already (its check of the device reads
    /// "disconnected" as "mounted"), which takes down whatever was mounted there since, such
    /// as the next mount of the same dataset after a lazy unmount, or during a slow final
    /// flush. A session that ends otherwise (an error, a panic) is left to fuser and the
    /// caller as before.
    pub fn end_process_when_destroyed(&self, lost_message: String) {
        *lock(&self.0.exit_when_destroyed) = Some(lost_message);
    }

    /// Lets read replies be spliced from chunk files into `device` (see `super::splice`), if
    /// the mount's options allow it (`splice`, read-only). `device` must be the one that every
    /// session thread reads its requests from, since a reply goes back through the device that
    /// took its request.
    pub fn splice_replies_to(&self, device: OwnedFd) {
        if self.0.opts.splice && self.0.writer.is_none() {
            let _ = self.0.device.set(device);
        }
    }

    /// Whether the flush at unmount failed: changes were lost, and the daemon must not exit
    /// as if they had been stored.
    pub fn final_flush_failed(&self) -> bool {
        self.0.final_flush_failed.load(Ordering::SeqCst)
    }

    /// SIGHUP: re-reads the metadata now, whatever the TTL, and makes the kernel forget what it
    /// holds of every path looked up so far (sizes and other attributes, cached pages, names
    /// that no longer exist). The kernel keeps those for the TTL (an hour with `ttl=0`), so a
    /// reload alone left the files already read at their old sizes and contents: a `data`
    /// file shorter than its new shape in `@metadata.json`. A `rw` mount is the dataset's only
    /// writer: there is nothing to re-read.
    ///
    /// Fails only when the kernel no longer takes notifications (the mount is gone).
    pub fn reload_now(&self, notifier: &fuser::Notifier) -> std::io::Result<()> {
        let sh = &self.0;
        if sh.writer.is_some() {
            return Ok(());
        }
        sh.refresh_requested.store(true, Ordering::SeqCst);
        let snap = sh.snapshot();
        let known = lock(&sh.inodes).known();
        for (ino, node) in known {
            // A retired number (a `data` file whose layout changed) must not stay the name's.
            let retired = lock(&sh.inodes).retired_size(ino).is_some();
            if retired || !layout::exists(&snap.model, &node) {
                let parent_ino = lock(&sh.inodes).ino_of(&parent(&node));
                if let (Some(parent_ino), Some(name)) = (parent_ino, layout::entry_of(&node)) {
                    notifier.inval_entry(INodeNo(parent_ino), OsStr::new(&name))?;
                }
            }
            // Offset 0 and length 0: the whole file.
            notifier.inval_inode(INodeNo(ino), 0, 0)?;
        }
        Ok(())
    }

    /// Ends the staleness window of values on a read-only mount (called every `ttl`): drops
    /// the decoded chunks of every snapshot still in use, then the kernel's page cache of
    /// every `data` file. Without this, a file held open would go on reading chunks decoded
    /// (or pages cached) before they were rewritten or deleted underneath, for as long as it
    /// stays open. Metadata is re-read lazily, by the next operation that needs it.
    ///
    /// Fails only when the kernel no longer takes notifications (the mount is gone).
    pub fn expire_values(&self, notifier: &fuser::Notifier) -> std::io::Result<()> {
        let sh = &self.0;
        if sh.writer.is_some() {
            return Ok(());
        }
        let mut snaps = vec![Arc::clone(&read_lock(&sh.snap))];
        for view in lock(&sh.handles).values().filter_map(|h| h.view.as_ref()) {
            let snap = &lock(view).snap;
            if !snaps.iter().any(|s| Arc::ptr_eq(s, snap)) {
                snaps.push(Arc::clone(snap));
            }
        }
        for snap in &snaps {
            if let Err(e) = snap.with_engine(ChunkEngine::clear) {
                sh.log_once(format!("cannot drop the chunk cache: {e}"));
            }
        }
        // Pages first dropped here are re-read through the emptied chunk cache, so they are
        // at most one `ttl` old. Offset 0 and length 0 mean the whole file.
        let inodes = lock(&sh.inodes).data_inodes();
        for ino in inodes {
            notifier.inval_inode(INodeNo(ino), 0, 0)?;
        }
        Ok(())
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panicking reader thread must not take the whole mount down with it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl NczarrFs {
    /// A read-only filesystem over an open dataset.
    pub fn new(ds: OpenDataset, opts: MountOptions) -> Result<NczarrFs> {
        if opts.read_write {
            return Err(Error::Invalid(
                "a read-write mount is served by NczarrFs::new_rw".into(),
            ));
        }
        let name = ds.location.dataset_name();
        // Its own engine, over the storage pinned: the one opened with it reads through the
        // map, whichever dataset that reads after a reload. Nothing was cached in it yet.
        let snap = Snapshot::over_storage(&ds.map, opts.cache_bytes, ds.model, 0);
        Self::build(ds.map, ds.location.mode, name, snap, None, opts)
    }

    /// A read-write filesystem over a dataset open for writing (Zarr v2 or v3).
    pub fn new_rw(writer: DatasetWriter, mut opts: MountOptions) -> Result<NczarrFs> {
        opts.read_write = true;
        let map = Arc::clone(writer.map());
        let location = writer.location().clone();
        let model = writer.model().clone();
        let writer = Arc::new(RwLock::new(writer));
        let snap = Snapshot {
            model,
            source: Source::Writer(Arc::clone(&writer)),
            generation: 0,
            changed: SystemTime::now(),
            pin: None,
        };
        let name = location.dataset_name();
        Self::build(map, location.mode, name, snap, Some(writer), opts)
    }

    fn build(
        map: Arc<dyn ZMap>,
        mode: Mode,
        dataset_name: std::ffi::OsString,
        snap: Snapshot,
        writer: Option<Arc<RwLock<DatasetWriter>>>,
        opts: MountOptions,
    ) -> Result<NczarrFs> {
        let start = |name: &str, threads: usize| {
            Workers::new(name, threads)
                .map_err(|e| Error::Invalid(format!("cannot start {name} threads: {e}")))
        };
        let prefetcher = start("nczarrfs-prefetch", PREFETCH_THREADS)?;
        // SAFETY: getuid/getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let shared = Shared {
            map,
            mode,
            dataset_name,
            writer,
            values_written: Mutex::new(HashMap::new()),
            truncations: OpenTruncations::default(),
            shared_writes: Mutex::new(()),
            partial: PartialElements::default(),
            uid: opts.uid.unwrap_or(uid),
            gid: opts.gid.unwrap_or(gid),
            snap: RwLock::new(Arc::new(snap)),
            opts,
            last_check: Mutex::new(Instant::now()),
            refresh_requested: AtomicBool::new(false),
            dataset_gone: AtomicBool::new(false),
            final_flush_failed: AtomicBool::new(false),
            exit_when_destroyed: Mutex::new(None),
            inodes: Mutex::new(InodeTable::new()),
            listings: Mutex::new(HashMap::new()),
            contents: Mutex::new(HashMap::new()),
            reported_sizes: ReportedSizes::default(),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            logged: Mutex::new(HashSet::new()),
            prefetcher,
            device: OnceLock::new(),
            splice_refused: AtomicBool::new(false),
        };
        Ok(NczarrFs {
            shared: Arc::new(shared),
            no_opendir: false,
            direct_data: false,
        })
    }

    /// A handle on this filesystem for the daemon's other threads.
    pub fn handle(&self) -> MountHandle {
        MountHandle(Arc::clone(&self.shared))
    }
}

impl Shared {
    /// The listing of directory `dir` (inode `ino`) in `snap`: made at the first request of
    /// a listing (offset 0), taken from [`Shared::listings`] by the requests that continue it
    /// while the snapshot is the same. `None` if the directory is not in `snap`.
    fn listing(
        &self,
        ino: u64,
        dir: &Node,
        snap: &Arc<Snapshot>,
        offset: u64,
    ) -> Option<Arc<Vec<(u64, Node, String)>>> {
        if offset > 0 {
            if let Some(kept) = lock(&self.listings).get(&ino) {
                if Arc::ptr_eq(&kept.snap, snap) {
                    return Some(Arc::clone(&kept.entries));
                }
            }
        }
        let (entries, too_long): (Vec<_>, Vec<_>) = layout::list(&snap.model, dir)?
            .into_iter()
            .partition(|(name, _)| name.len() <= layout::NAME_MAX);
        if let Some((name, _)) = too_long.first() {
            self.warn_once(format!(
                "{}: {} entr{} left out of the listing, named with more than the {} bytes a \
                 file name may have, such as {} ({} bytes)",
                node_display(dir),
                too_long.len(),
                if too_long.len() == 1 { "y" } else { "ies" },
                layout::NAME_MAX,
                quoted(name),
                name.len()
            ));
        }
        let mut inodes = lock(&self.inodes);
        let up = parent(dir);
        let mut all = Vec::with_capacity(entries.len() + 2);
        all.push((ino, dir.clone(), ".".to_string()));
        all.push((inodes.intern(&up), up, "..".to_string()));
        for (name, node) in entries {
            all.push((inodes.intern(&node), node, name));
        }
        drop(inodes);
        let all = Arc::new(all);
        let mut kept = lock(&self.listings);
        // Listings of older snapshots would keep their models alive.
        kept.retain(|_, listing| Arc::ptr_eq(&listing.snap, snap));
        if kept.len() >= KEPT_LISTINGS && !kept.contains_key(&ino) {
            kept.clear();
        }
        kept.insert(
            ino,
            Listing {
                snap: Arc::clone(snap),
                entries: Arc::clone(&all),
            },
        );
        Some(all)
    }

    /// Open flags of generated files and directories: the kernel may keep their contents
    /// (page cache, directory cache) only on a read-only mount of a dataset declared static
    /// (`ttl=0`), where they never change.
    fn generated_open_flags(&self) -> FopenFlags {
        if self.opts.ttl.is_none() && self.writer.is_none() {
            FopenFlags::FOPEN_KEEP_CACHE | FopenFlags::FOPEN_CACHE_DIR
        } else {
            FopenFlags::FOPEN_DIRECT_IO
        }
    }

    /// Open flags of a generated file whose content at this open is `len` bytes long. On a
    /// read-only mount with a staleness window, the page cache (emptied at each open, as
    /// `FOPEN_KEEP_CACHE` is not set) when the kernel cannot hold another size for it: a
    /// reader then finds the end of the file from its size, without a second `READ`.
    fn generated_file_open_flags(&self, ino: u64, len: usize) -> FopenFlags {
        match self.opts.ttl {
            Some(ttl)
                if self.writer.is_none()
                    && self
                        .reported_sizes
                        .settled(ino, len as u64, ttl, Instant::now()) =>
            {
                FopenFlags::empty()
            }
            _ => self.generated_open_flags(),
        }
    }

    /// Notes the size of a generated file about to be reported, where
    /// [`Shared::generated_file_open_flags`] depends on it.
    fn report_size(&self, ino: u64, size: u64) {
        if self.opts.ttl.is_some() && self.writer.is_none() {
            self.reported_sizes.record(ino, size, Instant::now());
        }
    }

    fn kernel_ttl(&self) -> Duration {
        if self.writer.is_some() {
            return Duration::ZERO;
        }
        self.opts.ttl.unwrap_or(STATIC_TTL)
    }

    /// The current snapshot, re-reading the metadata first when the TTL has run out (never on
    /// a `rw` mount, which is the dataset's only writer).
    fn snapshot(&self) -> Arc<Snapshot> {
        if self.writer.is_some() {
            return Arc::clone(&read_lock(&self.snap));
        }
        let forced = self.refresh_requested.swap(false, Ordering::SeqCst);
        let due = {
            let mut last = lock(&self.last_check);
            let due = forced || self.opts.ttl.is_some_and(|ttl| last.elapsed() >= ttl);
            if due {
                *last = Instant::now();
            }
            due
        };
        if due {
            self.reload();
            // The next check is a TTL after this one ended: a reload that waits out a stalled
            // server's timeout must not make the very next request wait it out again.
            *lock(&self.last_check) = Instant::now();
        }
        Arc::clone(&self.snap.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Re-reads the metadata and drops cached chunks, which may have changed underneath; on
    /// failure the old view stays.
    fn reload(&self) {
        if let Err(e) = self.map.refresh() {
            self.log_once(format!("cannot re-open the storage, keeping the old: {e}"));
        }
        let current = Arc::clone(&self.snap.read().unwrap_or_else(|e| e.into_inner()));
        let read = meta::read_dataset(self.map.as_ref(), &self.mode);
        self.dataset_gone
            .store(matches!(read, Err(Error::NotZarr { .. })), Ordering::SeqCst);
        match read {
            Ok(model) if model == current.model => {
                // Same metadata: chunks may still have been rewritten underneath.
                if let Err(e) = current.with_engine(ChunkEngine::clear) {
                    self.log_once(format!("cannot drop the chunk cache: {e}"));
                }
                // A dataset put in the old one's place with the same metadata: its chunks mean
                // what the old ones meant, as chunks rewritten in place do.
                if let Some(pin) = &current.pin {
                    pin.repin();
                }
            }
            Ok(model) => {
                log::info!("{}: metadata changed, reloaded", self.map.describe());
                // Before the new model is published: a lookup that sees it must get the new
                // numbers.
                self.retire_changed_data_files(&current.model, &model);
                // Files opened before keep the old view; its chunks must not outlive the TTL.
                if let Err(e) = current.with_engine(ChunkEngine::clear) {
                    self.log_once(format!("cannot drop the chunk cache: {e}"));
                }
                let snap = Arc::new(Snapshot::over_storage(
                    &self.map,
                    self.opts.cache_bytes,
                    model,
                    current.generation + 1,
                ));
                *self.snap.write().unwrap_or_else(|e| e.into_inner()) = Arc::clone(&snap);
                for handle in lock(&self.handles).values() {
                    handle.follow(&snap);
                }
            }
            Err(e @ Error::NotZarr { .. }) => self.log_once(format!(
                "the dataset is gone ({e}): reads of values fail with EIO until it is back"
            )),
            Err(e) => self.log_once(format!("cannot re-read metadata, keeping the old: {e}")),
        }
    }

    /// Gives a new inode number to every `data` file looked up so far whose bytes change
    /// meaning from `old` to `new` (see [`data_view_kept`]). The kernel keeps one page cache
    /// and one size per number: with a single number, the pages and size that a new open
    /// brings in would be read through descriptors opened before, as values of the old type
    /// and shape.
    fn retire_changed_data_files(&self, old: &Dataset, new: &Dataset) {
        let mut inodes = lock(&self.inodes);
        for (_, node) in inodes.current_data_files() {
            let Node::File(owner, _) = &node else {
                continue;
            };
            let Some(Resolved::Var(var)) = owner.resolve(old) else {
                // Retired when it went away, or never reported.
                continue;
            };
            if !data_view_kept(owner, old, new) {
                let size = self.data_file_size(&node, old, var);
                inodes.retire(&node, size);
            }
        }
    }

    fn log_once(&self, msg: String) {
        if self.first_time(&msg) {
            log::error!("{msg}");
        }
    }

    /// Logs a warning the first time it comes (see [`Shared::log_once`]).
    fn warn_once(&self, msg: String) {
        if self.first_time(&msg) {
            log::warn!("{msg}");
        }
    }

    /// Whether `msg` was not logged yet (then it now counts as logged).
    fn first_time(&self, msg: &str) -> bool {
        let mut logged = lock(&self.logged);
        logged.len() < MAX_LOGGED && logged.insert(msg.to_string())
    }

    /// Makes the inode numbers of `owners` and of what lies in them stop resolving (see
    /// [`InodeTable::forget_within`]), and drops what is kept by those numbers.
    fn forget_numbers_within(&self, owners: &[Owner]) {
        let forgotten: Vec<u64> = {
            let mut inodes = lock(&self.inodes);
            owners
                .iter()
                .flat_map(|owner| inodes.forget_within(owner))
                .collect()
        };
        let mut contents = lock(&self.contents);
        let mut listings = lock(&self.listings);
        for ino in forgotten {
            contents.remove(&ino);
            listings.remove(&ino);
        }
    }

    /// Notes that `var`'s values were just written (see [`Shared::values_written`]).
    fn wrote_values(&self, var: VarId) {
        lock(&self.values_written).insert(var, SystemTime::now());
    }

    fn node(&self, ino: u64) -> Option<Node> {
        lock(&self.inodes).node(ino).cloned()
    }

    /// Registers an open file; its number for the kernel.
    fn add_handle(&self, handle: Handle) -> u64 {
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        let handle = Arc::new(handle);
        lock(&self.handles).insert(fh, Arc::clone(&handle));
        // A reload may have published a model between the open's snapshot and the insertion,
        // and offered it to the files registered then.
        handle.follow(&read_lock(&self.snap));
        fh
    }

    /// An open `data` file opened through inode `ino`, if any.
    fn open_data_file(&self, ino: u64) -> Option<Arc<Handle>> {
        lock(&self.handles)
            .values()
            .find(|h| h.ino == ino && h.view.is_some())
            .cloned()
    }

    /// Tells the attribute files of `owner` open for writing as `from` that their attribute is
    /// now `to` (`None`: removed).
    fn attr_moved(&self, owner: &Owner, from: &str, to: Option<&str>) {
        for handle in lock(&self.handles).values() {
            let Node::File(o, FileKind::Attr(opened_as)) = &handle.node else {
                continue;
            };
            if o != owner || handle.text.is_none() {
                continue;
            }
            let mut moved = lock(&handle.moved);
            if current_attr_name(opened_as, &moved) == Some(from) {
                *moved = Some(to.map(str::to_string));
                // The `mv` stored the attribute under its new name, placeholder or not.
                handle.placeholder.store(false, Ordering::SeqCst);
            }
        }
    }

    /// Runs `f` on the writer with the lock held exclusively, then publishes the model if it
    /// changed (a new generation: generated files are remade, sizes re-read).
    fn change<R>(&self, f: impl FnOnce(&mut DatasetWriter) -> Result<R>) -> Result<R> {
        let Some(writer) = &self.writer else {
            return Err(Error::NotPermitted("read-only mount".into()));
        };
        let mut w = write_lock(writer);
        let result = f(&mut w);
        let mut slot = write_lock(&self.snap);
        if slot.model != *w.model() {
            *slot = Arc::new(Snapshot {
                model: w.model().clone(),
                source: Source::Writer(Arc::clone(writer)),
                generation: slot.generation + 1,
                changed: SystemTime::now(),
                pin: None,
            });
        }
        result
    }

    /// Writes `data` at `offset` of the `data` file of `handle` (of variable `owner`) with the
    /// writer's lock shared with reads ([`write_data_within`]), one such write at a time:
    /// the bytes written, or `None` when the write needs the lock exclusively ([`Shared::change`]).
    fn write_within(
        &self,
        handle: &Handle,
        owner: &Owner,
        offset: u64,
        data: &[u8],
    ) -> Option<Result<std::result::Result<usize, String>>> {
        let writer = self.writer.as_ref()?;
        let _turn = lock(&self.shared_writes);
        let w = read_lock(writer);
        let Ok(Resolved::Var(var)) = handle.owner_in(owner, w.model()) else {
            return None;
        };
        let n = match write_data_within(&w, var, offset, data, &self.partial)? {
            Ok(n) => n,
            Err(e) => return Some(Err(e)),
        };
        let written = offset..offset + n as u64;
        if let Some((_, truncation)) = &handle.truncation {
            lock(truncation).wrote(written.clone());
        }
        self.truncations.wrote(var, written);
        self.wrote_values(var);
        Some(Ok(Ok(n)))
    }

    /// Whether an attribute `name` may be written on `owner` at all (see
    /// [`DatasetWriter::check_attr_writable`]), checked when its file is opened for writing
    /// so that `echo v > file` fails at once rather than at a close the shell does not check.
    /// Its value can still be refused at the close (a new `_FillValue` of a stored variable,
    /// unless unchanged, as `cp -r` of a dataset onto itself writes it).
    fn check_attr_writable(&self, owner: &Owner, name: &str) -> Result<()> {
        let Some(writer) = &self.writer else {
            return Err(Error::NotPermitted("read-only mount".into()));
        };
        let w = read_lock(writer);
        w.check_attr_writable(attr_target(w.model(), owner)?, name)
    }

    /// Logs a failed write-side operation and gives its errno.
    fn failed(&self, node: &Node, op: &str, e: &Error) -> Errno {
        log::error!("{op} {}: {e}", node_display(node));
        Errno::from_i32(e.errno())
    }

    /// Like [`Shared::failed`], with the errno of [`refusal_errno`] (what netCDF refuses is
    /// `EPERM`).
    fn refused(&self, node: &Node, op: &str, e: &Error) -> Errno {
        match e {
            Error::Invalid(_) | Error::NotPermitted(_) => {
                log::warn!("{op} {}: {e} (EPERM)", node_display(node));
            }
            Error::PathTooLong { .. } => {
                log::warn!("{op} {}: {e} (ENAMETOOLONG)", node_display(node));
            }
            _ => return self.failed(node, op, e),
        }
        refusal_errno(e)
    }

    /// What a flush, fsync or close of `handle` owes: an attribute file's text becomes the
    /// attribute; a written `data` file (or any, for `fsync`) syncs the dataset.
    fn commit(&self, handle: &Handle, when: Commit) -> std::result::Result<(), Errno> {
        let always = when == Commit::Fsync;
        let wrote = handle.wrote.swap(false, Ordering::SeqCst);
        if self.writer.is_none() || !(wrote || always) {
            return Ok(());
        }
        if when == Commit::Flush && handle.text.as_ref().is_some_and(|t| lock(t).is_empty()) {
            // `echo 3 > FILE` closes a duplicate of the file it created or truncated before
            // writing to it: that empty text is no value yet (a quantization attribute would
            // be refused for it, any other attribute stored empty for a moment). The last
            // close, or an fsync, stores what the file holds then, empty or not.
            handle.wrote.store(true, Ordering::SeqCst);
            return Ok(());
        }
        // An fsync asks a server held as down at once rather than fail from memory; so does a
        // close, but only once the pacing window of the last failed store has passed (see
        // `ChunkEngine::storage_may_wait`): closes come in bursts, the kernel's release after
        // a failed flush flushes again, and a silent server would cost each a whole timeout.
        let not_asked = if always {
            self.map.probe_if_down();
            None
        } else {
            let paced = self
                .writer
                .as_ref()
                .map_or(Ok(()), |w| read_lock(w).engine().storage_may_wait());
            match paced {
                Ok(()) => {
                    self.map.probe_if_down();
                    None
                }
                Err(why) => Some(why),
            }
        };
        let result = match (&handle.node, &handle.text) {
            (Node::File(owner, FileKind::Attr(opened_as)), Some(text)) if wrote => {
                let moved = lock(&handle.moved).clone();
                let Some(name) = current_attr_name(opened_as, &moved) else {
                    // Removed while open: the text goes nowhere.
                    return Ok(());
                };
                let text = lock(text).clone();
                let stored = self.change(|w| {
                    let r = handle.owner_in(owner, w.model())?;
                    let target = match r {
                        Resolved::Group(g) => AttrTarget::Group(g),
                        Resolved::Var(v) => AttrTarget::Var(v),
                    };
                    let value = parse_attr_text(&text, handle.opened_value.as_ref());
                    // A value that is not stored must not be shown either: the mount would
                    // show it until remounted, and store it at some later sync.
                    let stored = quantize_attr_value(w.model(), target, name, value, None)
                        .and_then(|value| w.change_and_sync(|w| w.put_attr(target, name, value)));
                    if let Err(failure) = &stored {
                        if handle.placeholder.swap(false, Ordering::SeqCst) {
                            drop_placeholder(w, target, name, failure, &handle.node);
                        }
                    }
                    stored
                });
                if stored.is_ok() {
                    handle.placeholder.store(false, Ordering::SeqCst);
                }
                stored
            }
            (Node::File(owner, FileKind::Data), _) if handle.truncation.is_some() => {
                self.change(|w| {
                    let Resolved::Var(var) = handle.owner_in(owner, w.model())? else {
                        return Err(Error::NotFound(owner.display()));
                    };
                    if let Some((_, truncation)) = &handle.truncation {
                        if zero_unwritten(w, var, truncation, &self.partial)? {
                            self.wrote_values(var);
                        }
                    }
                    w.sync()
                })
            }
            _ => self
                .store_chunks_beside_reads()
                .and_then(|()| self.change(DatasetWriter::sync)),
        };
        let Err(e) = result else {
            *lock(&handle.logged_failure) = None;
            return Ok(());
        };
        if !matches!(e, Error::Invalid(_) | Error::NotPermitted(_)) {
            // Not stored: the next flush, fsync or close must try again, and report.
            handle.wrote.store(true, Ordering::SeqCst);
        }
        let message = e.to_string();
        let mut logged = lock(&handle.logged_failure);
        if logged.as_deref() == Some(message.as_str()) {
            return Err(refusal_errno(&e));
        }
        *logged = Some(message);
        if let (Some(why), false) = (
            &not_asked,
            matches!(e, Error::Invalid(_) | Error::NotPermitted(_)),
        ) {
            log::warn!(
                "flush {}: the close sent no probe to a server held as down: {why}",
                node_display(&handle.node)
            );
        }
        Err(self.refused(&handle.node, "flush", &e))
    }

    /// Stores the changed chunks with the writer's lock shared, as reads take it, so that they
    /// need not wait for a server that does not answer: the store works on a snapshot of the
    /// changed chunks and marks clean only those not changed meanwhile. The exclusive sync
    /// that follows stores what changed meanwhile, then the metadata. Sharded arrays too: a
    /// shard's read-modify-write holds its array's rewrite lock from reading the stored shard
    /// to updating the index kept for readers, so a reader never pairs an old index with a
    /// new shard, and stores of inner chunks of one shard take turns, each keeping the
    /// others' chunks. No write of values runs beside this store on such a dataset (they hold
    /// the writer's lock exclusively: see [`DatasetWriter::writes_beside_reads`]), and a
    /// changed inner chunk stays in the cache, for readers, until it is stored.
    fn store_chunks_beside_reads(&self) -> Result<()> {
        let Some(writer) = &self.writer else {
            return Ok(());
        };
        read_lock(writer).engine().flush()
    }

    /// `truncate` of a file to `size`: a data file may keep its size or grow (as a write
    /// would), never shrink; an attribute file's text is cut or padded.
    fn resize(
        &self,
        node: &Node,
        handle: Option<&Handle>,
        size: u64,
    ) -> std::result::Result<(), Errno> {
        match node {
            Node::File(owner, FileKind::Data) => {
                let result = self.change(|w| {
                    let resolved = match handle {
                        Some(handle) => handle.owner_in(owner, w.model())?,
                        None => owner
                            .resolve(w.model())
                            .ok_or_else(|| Error::NotFound(owner.display()))?,
                    };
                    let Resolved::Var(var) = resolved else {
                        return Err(Error::NotFound(owner.display()));
                    };
                    let current = content::data_size(w.model(), var);
                    if size < current {
                        return Err(Error::NotPermitted(format!(
                            "netCDF variables cannot shrink ({current} to {size} bytes)"
                        )));
                    }
                    if size == current {
                        return Ok(None);
                    }
                    let grown = match handle {
                        // Stored when the file is flushed or closed, as a write would be.
                        Some(_) => grow_data(w, var, size)?,
                        // `truncate(2)` of a path: no close follows, so the size is stored
                        // now, or the call fails and the size stays as stored.
                        None => w.change_and_sync(|w| grow_data(w, var, size))?,
                    };
                    if !grown {
                        return Ok(Some(why_fixed_size(w.model(), var)));
                    }
                    if let Some(handle) = handle {
                        handle.wrote.store(true, Ordering::SeqCst);
                        if let Some((_, truncation)) = &handle.truncation {
                            lock(truncation).grew_to(size);
                        }
                    }
                    Ok(None)
                });
                match result {
                    Ok(None) => Ok(()),
                    Ok(Some(why)) => {
                        log::warn!(
                            "truncate {} to {size} bytes: past the end of {why} (EFBIG)",
                            node_display(node)
                        );
                        Err(Errno::EFBIG)
                    }
                    Err(e) => Err(self.refused(node, "truncate", &e)),
                }
            }
            Node::File(owner, FileKind::Attr(name)) => {
                let size = usize::try_from(size).unwrap_or(usize::MAX);
                if size > MAX_ATTR_TEXT {
                    return Err(Errno::EFBIG);
                }
                if let Some(text) = handle.and_then(|h| h.text.as_ref().map(|t| (h, t))) {
                    lock(text.1).resize(size, 0);
                    text.0.wrote.store(true, Ordering::SeqCst);
                    return Ok(());
                }
                self.change(|w| {
                    let r = owner
                        .resolve(w.model())
                        .ok_or_else(|| Error::NotFound(owner.display()))?;
                    let attr = layout::attrs_of(w.model(), r)
                        .iter()
                        .find(|a| &a.name == name)
                        .ok_or_else(|| Error::NotFound(format!("attribute {name}")))?;
                    let mut text = content::attr_file(attr)?;
                    text.resize(size, 0);
                    let value = parse_attr_text(&text, Some(&attr.value));
                    let target = attr_target(w.model(), owner)?;
                    let value = quantize_attr_value(w.model(), target, name, value, None)?;
                    w.change_and_sync(|w| w.put_attr(target, name, value))
                })
                .map_err(|e| self.refused(node, "truncate", &e))
            }
            _ => {
                log::warn!(
                    "truncate {}: not a writable file (EPERM)",
                    node_display(node)
                );
                Err(Errno::EPERM)
            }
        }
    }

    /// The model a read of `data` through `handle` sees. A rw mount reads through the newest
    /// (the variable may have grown since the open). On a read-only mount the handle keeps
    /// the view it was opened with, unless the variable has since only grown along its first
    /// dimension (records appended underneath): then it reads on as a local file's reader
    /// does (see [`Handle::follow`]). A short read at the old end would also make the kernel
    /// take the old size for the file's size, for every reader, until its attribute timeout.
    fn read_snapshot(&self, handle: &Handle) -> Arc<Snapshot> {
        let newest = self.snapshot();
        match &handle.view {
            Some(view) => {
                handle.follow(&newest);
                Arc::clone(&lock(view).snap)
            }
            None => newest,
        }
    }

    /// Logs, once for each file, that a read of `node` through `snap` failed because the
    /// storage its model was read from was removed or replaced underneath (the kernel retries
    /// a failed readahead page by page: one line, not one per request). When `snap` is the
    /// current snapshot (the old directory deleted before a reload, or a reload that took up
    /// the new storage but could not read its metadata), the next lookup reads the metadata
    /// again, whatever the TTL; an older one, a descriptor's, stays as it is.
    fn storage_replaced_under(&self, snap: &Arc<Snapshot>, node: &Node) {
        self.log_once(format!(
            "{}: {}: the dataset was removed or replaced while open: reads through what was \
             read before fail with EIO; open the file again to read what is there now",
            node_display(node),
            self.map.describe()
        ));
        if Arc::ptr_eq(snap, &read_lock(&self.snap)) {
            self.refresh_requested.store(true, Ordering::SeqCst);
        }
    }

    /// What the chunks stored now hold for the `data` file of `owner` that `handle` reads as
    /// `view` (a read's model, see [`Shared::read_snapshot`]) decodes them. An older view
    /// over chunks written for another type or chunking would read the new variable's bytes
    /// as values of the old; once they did not hold its values, they never do again (see
    /// [`View::lost`]).
    fn chunks_now(&self, handle: &Handle, owner: &Owner, view: &Arc<Snapshot>) -> ChunksNow {
        let lost = handle.lost();
        if lost != ChunksNow::Alike {
            return lost;
        }
        let newest = Arc::clone(&read_lock(&self.snap));
        if Arc::ptr_eq(&newest, view) {
            return ChunksNow::Alike;
        }
        chunks_alike(owner, &view.model, &newest.model)
    }

    /// The size of the `data` file of `owner` as read through `handle`.
    fn data_size_through(&self, handle: &Handle, owner: &Owner) -> Option<u64> {
        let view = self.read_snapshot(handle);
        match handle.owner_in(owner, &view.model) {
            Ok(Resolved::Var(var)) => Some(self.data_file_size(&handle.node, &view.model, var)),
            _ => None,
        }
    }

    fn content(&self, ino: u64, node: &Node, snap: &Snapshot) -> Result<Arc<Vec<u8>>> {
        if let Some((gen, c)) = lock(&self.contents).get(&ino) {
            if *gen == snap.generation {
                return Ok(Arc::clone(c));
            }
        }
        let Node::File(owner, kind) = node else {
            return Err(Error::Invalid("not a file".into()));
        };
        let ds = &snap.model;
        let r = owner
            .resolve(ds)
            .ok_or_else(|| Error::NotFound(owner.display()))?;
        let bytes = match kind {
            FileKind::Data => return Err(Error::Invalid("data is not generated".into())),
            FileKind::Header => {
                snap.with_engine(|engine| content::header(ds, engine, &self.dataset_name, r))?
            }
            FileKind::Metadata => content::metadata(ds, r),
            FileKind::Attr(name) => {
                let attr = layout::attrs_of(ds, r)
                    .iter()
                    .find(|a| &a.name == name)
                    .ok_or_else(|| Error::NotFound(format!("attribute {name}")))?;
                content::attr_file(attr)?
            }
        };
        let c = Arc::new(bytes);
        lock(&self.contents).insert(ino, (snap.generation, Arc::clone(&c)));
        Ok(c)
    }

    /// The size of a `data` file: its variable's bytes, but no more than a file offset can
    /// address (the kernel refuses larger sizes as I/O errors): a variable of more than 2^63
    /// bytes (pure Zarr allows one) shows that many, with a log line.
    fn data_file_size(&self, node: &Node, ds: &Dataset, v: VarId) -> u64 {
        let size = content::data_size(ds, v);
        let esize = ds.var(v).element_size().max(1) as u64;
        let max = i64::MAX as u64 - i64::MAX as u64 % esize;
        if size > max {
            self.log_once(format!(
                "{}: the variable holds more bytes than a file can address; the file shows \
                 the first {max} (`nczarrfs get` reads any hyperslab)",
                node_display(node)
            ));
        }
        size.min(max)
    }

    /// Whether `node` takes writes, which it shows by its owner's write bit: only on a `rw`
    /// mount, and there only where a write means something: data, attribute files, and
    /// directories that take new entries (groups: subgroups; @attributes: attributes).
    fn writable(&self, node: &Node) -> bool {
        self.writer.is_some()
            && match node {
                Node::Dir(Owner::Var(..)) => false,
                Node::Dir(_) | Node::AttrDir(_) => true,
                Node::File(_, kind) => matches!(kind, FileKind::Data | FileKind::Attr(_)),
            }
    }

    fn attr(&self, ino: u64, node: &Node, snap: &Snapshot) -> Option<FileAttr> {
        if !layout::exists(&snap.model, node) {
            return None;
        }
        let w = if self.writable(node) { 0o200 } else { 0 };
        let mut modified = snap.changed;
        let (kind, size, perm) = match node {
            Node::Dir(_) | Node::AttrDir(_) => (FileType::Directory, 0, 0o555 | w),
            Node::File(owner, FileKind::Data) => match owner.resolve(&snap.model) {
                Some(Resolved::Var(v)) => {
                    if let Some(written) = lock(&self.values_written).get(&v) {
                        modified = modified.max(*written);
                    }
                    (
                        FileType::RegularFile,
                        // A retired number keeps its size: the kernel's size of the file that
                        // descriptors opened before read through.
                        lock(&self.inodes)
                            .retired_size(ino)
                            .unwrap_or_else(|| self.data_file_size(node, &snap.model, v)),
                        0o444 | w,
                    )
                }
                _ => return None,
            },
            Node::File(..) => {
                let size = match self.content(ino, node, snap) {
                    Ok(c) => c.len() as u64,
                    Err(e) => {
                        // Reported when the file is opened; the size stays honest (empty).
                        log::debug!("{}: {e}", node_display(node));
                        0
                    }
                };
                self.report_size(ino, size);
                (FileType::RegularFile, size, 0o444 | w)
            }
        };
        Some(FileAttr {
            ino: INodeNo(ino),
            size,
            blocks: size.div_ceil(512),
            atime: snap.changed,
            mtime: modified,
            ctime: modified,
            crtime: snap.changed,
            kind,
            perm: perm & !(self.opts.umask as u16),
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            // Programs size their buffers by it: big reads for values, but a small one for
            // directories and generated files (glibc's readdir would ask for 1 MiB per call).
            blksize: if matches!(node, Node::File(_, FileKind::Data)) {
                1 << 20
            } else {
                4096
            },
            flags: 0,
        })
    }
}

/// What the chunks stored now hold for a `data` file read through an older view (see
/// [`Shared::chunks_now`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunksNow {
    /// The view's values, decoded as the view decodes them (rewritten in place, maybe).
    Alike,
    /// Another variable's: another type, shape or chunking.
    Changed,
    /// Nothing: the variable was deleted.
    Deleted,
}

/// What the chunks stored for `owner` by `new` hold for a reader that decodes them as `old`
/// does: its values when the variable has the same type, trailing shape, chunks, codecs and
/// fill value (more or fewer records, or chunks rewritten in place, keep them), else another
/// variable's, or nothing once it is gone.
fn chunks_alike(owner: &Owner, old: &Dataset, new: &Dataset) -> ChunksNow {
    match (owner.resolve(old), owner.resolve(new)) {
        (Some(Resolved::Var(a)), Some(Resolved::Var(b))) => {
            let (va, vb) = (old.var(a), new.var(b));
            let (sa, sb) = (&va.storage, &vb.storage);
            let alike = va.nctype == vb.nctype
                && va.element_size() == vb.element_size()
                && old.var_shape(a).get(1..) == new.var_shape(b).get(1..)
                && sa.shape.get(1..) == sb.shape.get(1..)
                && (
                    &sa.dtype,
                    &sa.chunks,
                    &sa.order,
                    &sa.key_encoding,
                    &sa.codecs,
                ) == (
                    &sb.dtype,
                    &sb.chunks,
                    &sb.order,
                    &sb.key_encoding,
                    &sb.codecs,
                )
                && sa.fill_value == sb.fill_value;
            match alike {
                true => ChunksNow::Alike,
                false => ChunksNow::Changed,
            }
        }
        // Its chunks are gone with it: read through the view, every one would be missing,
        // and fill values would pass for values that were stored.
        _ => ChunksNow::Deleted,
    }
}

/// Whether the bytes of the `data` file of `owner` keep their meaning from `old` to `new`: the
/// same element type and trailing dimensions, and a first dimension at least as long (records
/// appended). The chunking is not part of it: the file holds the values in C order whatever
/// the chunks.
fn data_view_kept(owner: &Owner, old: &Dataset, new: &Dataset) -> bool {
    match (owner.resolve(old), owner.resolve(new)) {
        (Some(Resolved::Var(a)), Some(Resolved::Var(b))) => {
            let (va, vb) = (old.var(a), new.var(b));
            let (sa, sb) = (old.var_shape(a), new.var_shape(b));
            va.nctype == vb.nctype
                && va.element_size() == vb.element_size()
                && va.storage.dtype == vb.storage.dtype
                && sa.len() == sb.len()
                && sa.first() <= sb.first()
                && sa.get(1..) == sb.get(1..)
        }
        _ => false,
    }
}

/// Whether the kernel has ended this process's FUSE connection (the mount is gone): its
/// `/dev/fuse` descriptor then polls as an error, as libfuse tests it before unmounting.
fn fuse_connection_ended() -> bool {
    let Ok(fds) = std::fs::read_dir("/proc/self/fd") else {
        return false;
    };
    fds.flatten().any(|entry| {
        let is_fuse = std::fs::read_link(entry.path()).is_ok_and(|t| t.as_os_str() == "/dev/fuse");
        let fd = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok());
        let Some(fd) = fd.filter(|_| is_fuse) else {
            return false;
        };
        let mut p = libc::pollfd {
            fd,
            events: 0,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        let ready = unsafe { libc::poll(&mut p, 1, 0) };
        ready == 1 && p.revents & libc::POLLERR != 0
    })
}

/// The name `name` for a new entry of `dir` (`op` names the operation in the log line, if
/// known), or the errno that refuses it, logged: a name longer than [`layout::NAME_MAX`]
/// bytes (`ENAMETOOLONG`, as on a local file system), or one that is not UTF-8 (`EPERM`: no
/// name of a dataset is, and a lossy reading would make another name of it).
fn new_entry_name<'a>(
    dir: &Node,
    name: &'a OsStr,
    op: Option<&str>,
) -> std::result::Result<&'a str, Errno> {
    let at = match op {
        Some(op) => format!("{op} {}", node_display(dir)),
        None => node_display(dir),
    };
    if name.len() > layout::NAME_MAX {
        log::warn!(
            "{at}: a name of {} bytes ({}) is longer than the {} a file name may have \
             (ENAMETOOLONG)",
            name.len(),
            quoted(&name.to_string_lossy()),
            layout::NAME_MAX
        );
        return Err(Errno::ENAMETOOLONG);
    }
    name.to_str().ok_or_else(|| {
        log::warn!(
            "{at}: the name {} is not UTF-8, which the names of a dataset are (EPERM)",
            quoted(&name.to_string_lossy())
        );
        Errno::EPERM
    })
}

fn node_display(node: &Node) -> String {
    match node {
        Node::Dir(o) => o.display(),
        Node::AttrDir(o) => format!(
            "{}/{}",
            o.display().trim_end_matches('/'),
            layout::ATTRIBUTES
        ),
        Node::File(o, k) => {
            let name = match k {
                FileKind::Data => layout::DATA.to_string(),
                FileKind::Header => layout::HEADER.to_string(),
                FileKind::Metadata => layout::METADATA.to_string(),
                FileKind::Attr(n) => format!("{}/{}", layout::ATTRIBUTES, layout::attr_entry(n)),
            };
            format!("{}/{name}", o.display().trim_end_matches('/'))
        }
    }
}

/// Why a name is no attribute file's (see [`layout::attr_name`]), for log lines.
const NOT_AN_ATTR_ENTRY: &str = "attribute file names are the attribute names with `/`, `%` \
     and control characters written %XX (two upper-case hexadecimal digits of a byte of \
     UTF-8), and nothing else so written";

/// Largest attribute file text accepted (attributes live in JSON metadata objects).
const MAX_ATTR_TEXT: usize = 16 << 20;

/// Where the attributes of `owner` live in `ds`.
fn attr_target(ds: &Dataset, owner: &Owner) -> Result<AttrTarget> {
    match owner.resolve(ds) {
        Some(Resolved::Group(g)) => Ok(AttrTarget::Group(g)),
        Some(Resolved::Var(v)) => Ok(AttrTarget::Var(v)),
        None => Err(Error::NotFound(owner.display())),
    }
}

fn owner_name(owner: &Owner) -> &str {
    match owner {
        Owner::Group(path) => path.last().unwrap_or(""),
        Owner::Var(_, name) => name,
    }
}

/// The group or variable `owner` names once renamed `to` in its directory.
fn renamed(owner: &Owner, to: &str) -> Owner {
    match owner {
        Owner::Group(path) => Owner::Group(path.parent().child(to)),
        Owner::Var(path, _) => Owner::Var(path.clone(), to.to_string()),
    }
}

/// Reads bytes `[offset, offset + len)` of a variable's `data` (clipped to its size).
pub fn read_data(snap: &Snapshot, var: VarId, offset: u64, len: u64) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    let range = read_data_into(snap, var, offset, len, &mut buf)?;
    buf.truncate(range.end);
    buf.drain(..range.start);
    Ok(buf)
}

/// Like [`read_data`], into `buf` (whose allocation is reused; it is overwritten, never
/// zeroed first when already large enough): returns where in `buf` the bytes asked for are.
fn read_data_into(
    snap: &Snapshot,
    var: VarId,
    offset: u64,
    len: u64,
    buf: &mut Vec<u8>,
) -> Result<std::ops::Range<usize>> {
    let ds = &snap.model;
    let size = content::data_size(ds, var);
    let esz = ds.var(var).element_size() as u64;
    if offset >= size || len == 0 || esz == 0 {
        return Ok(0..0);
    }
    let end = offset.saturating_add(len).min(size);
    let (e0, e1) = (offset / esz, end.div_ceil(esz));
    let need = ((e1 - e0) * esz) as usize;
    if buf.len() < need {
        buf.resize(need, 0);
    }
    let shape = ds.var_shape(var);
    let mut pos = 0usize;
    for slab in element_range_slabs(&shape, e0, e1) {
        let n = (slab_len(&slab) * esz) as usize;
        snap.read(var, &slab, &mut buf[pos..pos + n])?;
        pos += n;
    }
    let skip = (offset - e0 * esz) as usize;
    Ok(skip..skip + (end - offset) as usize)
}

/// Like [`read_data_into`], but the bytes lent in place by the chunk engine of a read-only
/// mount ([`ChunkEngine::view`]: a cached chunk) when the range lies in one chunk, and where
/// in the view they are; `Ok(None)` when they must be copied.
fn read_in_place(
    snap: &Snapshot,
    var: VarId,
    offset: u64,
    len: u64,
) -> Result<Option<(crate::chunk::ChunkView, std::ops::Range<usize>)>> {
    let Source::Engine(engine) = &snap.source else {
        return Ok(None);
    };
    let ds = &snap.model;
    let size = content::data_size(ds, var);
    let esz = ds.var(var).element_size() as u64;
    if offset >= size || len == 0 || esz == 0 {
        return Ok(None);
    }
    let end = offset.saturating_add(len).min(size);
    let Some(view) = engine.view(ds, var, offset / esz, end.div_ceil(esz))? else {
        return Ok(None);
    };
    let skip = (offset % esz) as usize;
    Ok(Some((view, skip..skip + (end - offset) as usize)))
}

/// Answers a read of bytes `[offset, offset + len)` of a variable's `data` (clipped to its
/// size) by splicing them from storage, when they lie in uncompressed chunk files
/// ([`ChunkEngine::stored_runs`]): the number of bytes sent (0 if the kernel no longer wanted
/// them), or `None` when the request must still be answered. Errors are left to the copying
/// read, which reports them.
fn splice_reply(
    sh: &Shared,
    snap: &Snapshot,
    var: VarId,
    offset: u64,
    len: u64,
    device: BorrowedFd<'_>,
    req: &Request,
) -> Option<u64> {
    let Source::Engine(engine) = &snap.source else {
        return None;
    };
    let ds = &snap.model;
    let size = content::data_size(ds, var);
    let esz = ds.var(var).element_size() as u64;
    if offset >= size || len == 0 || esz == 0 {
        return None;
    }
    let end = offset.saturating_add(len).min(size);
    let (e0, e1) = (offset / esz, end.div_ceil(esz));
    let runs = engine.stored_runs(ds, var, e0, e1).ok()??;
    // The elements' bytes, less the parts of the first and last elements not asked for.
    let mut skip = offset - e0 * esz;
    let mut left = end - offset;
    let mut pieces = Vec::with_capacity(runs.len());
    for run in &runs {
        let n = (run.len - skip).min(left);
        pieces.push(splice::Piece {
            file: &run.file,
            offset: run.offset + skip,
            len: n as usize,
        });
        left -= n;
        skip = 0;
    }
    match splice::reply_from_files(device, req.unique().0, &pieces) {
        Spliced::Sent => Some(end - offset),
        Spliced::Gone => Some(0),
        Spliced::NotSent => None,
        Spliced::Refused(kind) => {
            if !sh.splice_refused.swap(true, Ordering::Relaxed) {
                log::warn!("the kernel refused a spliced read reply ({kind}): reads are copied");
            }
            None
        }
    }
}

thread_local! {
    /// A session thread's reply buffer, reused from request to request (fresh pages for every
    /// request cost more than the copy into them).
    static REPLY_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Asks the chunk engine to load elements `[lo, hi)` of `var` into its cache.
fn prefetch(snap: &Snapshot, var: VarId, lo: u64, hi: u64) {
    let ds = &snap.model;
    let shape = ds.var_shape(var);
    for slab in element_range_slabs(&shape, lo, hi) {
        let loaded = match &snap.source {
            // Straight into the cache: no buffer, no copy.
            Source::Engine(engine) => engine.preload(ds, var, &slab),
            Source::Writer(_) => {
                let esz = ds.var(var).element_size();
                let mut scratch = vec![0u8; slab_len(&slab) as usize * esz];
                snap.read(var, &slab, &mut scratch)
            }
        };
        if let Err(e) = loaded {
            log::debug!("prefetch of {} stopped: {e}", ds.var_fqn(var));
            return;
        }
    }
}

impl Filesystem for NczarrFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // READDIRPLUS answers `ls -l` with one request per directory instead of one lookup
        // per entry (the kernel picks it when a stat of the entries is likely to follow).
        // Directories need no open handle (see `opendir`), which saves two round trips per
        // listing.
        for cap in [
            InitFlags::FUSE_ASYNC_READ,
            InitFlags::FUSE_BIG_WRITES,
            InitFlags::FUSE_PARALLEL_DIROPS,
            InitFlags::FUSE_DO_READDIRPLUS,
            InitFlags::FUSE_READDIRPLUS_AUTO,
        ] {
            // Optional: an old kernel without them is still served correctly.
            let _ = config.add_capabilities(cap);
        }
        self.no_opendir = config
            .add_capabilities(InitFlags::FUSE_NO_OPENDIR_SUPPORT)
            .is_ok();
        if self.shared.opts.direct_io || self.shared.writer.is_some() {
            // An asynchronous reader's (io_submit, io_uring) large read of a `data` file is
            // then sent as parallel requests; a plain read(2) stays one request after another.
            let _ = config.add_capabilities(InitFlags::FUSE_ASYNC_DIO);
            // Shared mappings of `data` then stay possible (kernel 6.6 and later): the kernel
            // fills their pages with ordinary read requests, and writes them back.
            let mmap = config.add_capabilities(InitFlags::FUSE_DIRECT_IO_ALLOW_MMAP);
            // On a rw mount, a page-cached `data` file can show zeros that were never written:
            // a page the kernel drops (at an open, or under memory pressure) while an
            // extending write to it is on its way to us is read back short and zero-filled,
            // then the write's new size makes those zeros part of the file. Direct I/O reads
            // what the dataset holds. Without shared mappings (kernels before 6.6) the page
            // cache stays, for numpy.memmap's sake.
            self.direct_data = self.shared.opts.direct_io || mmap.is_ok();
        }
        if self.shared.writer.is_some() {
            // O_TRUNC then arrives as an open flag instead of a truncate to 0, so that
            // `cat x > data` can be told apart from truncate(2) (see `open`).
            let _ = config.add_capabilities(InitFlags::FUSE_ATOMIC_O_TRUNC);
        }
        // Kernel readahead stays on (as much as the kernel offers): without it every page is
        // a request of its own. A readahead request that touches a corrupt chunk fails as a
        // whole, never short (a short read would tell the kernel the file ends there); the
        // kernel then leaves its pages not uptodate and reads each one the reader wants
        // again, alone, so EIO stays confined to the corrupt chunk's pages.
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        log::info!("mounted {}", self.shared.map.describe());
        Ok(())
    }

    fn destroy(&mut self) {
        // The last chance to store the changes: a server held as down is asked at once.
        self.shared.map.probe_if_down();
        let flushed = match &self.shared.writer {
            Some(w) => write_lock(w).sync(),
            None => self.shared.map.flush(),
        };
        if let Err(e) = &flushed {
            log::error!("flush at unmount failed: {e}");
            self.shared.final_flush_failed.store(true, Ordering::SeqCst);
        }
        log::info!("unmounted {}", self.shared.map.describe());
        let exit = lock(&self.shared.exit_when_destroyed).take();
        if let Some(lost) = exit.filter(|_| fuse_connection_ended()) {
            super::daemon::sd_notify("STOPPING=1");
            if flushed.is_err() {
                use std::io::Write;
                let _ = writeln!(std::io::stderr(), "nczarrfs: {lost}");
                std::process::exit(1);
            }
            std::process::exit(0);
        }
    }

    fn lookup(&self, _req: &Request, parent_ino: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let parent_ino = parent_ino.0;
        let sh = &self.shared;
        let Some(dir) = sh.node(parent_ino) else {
            return reply.error(Errno::ENOENT);
        };
        if name.len() > layout::NAME_MAX {
            // What follows on a `rw` mount is likely a create, mkdir or rename to that name,
            // which the kernel then fails with this errno without asking.
            if sh.writer.is_some() {
                let _ = new_entry_name(&dir, name, None);
            }
            return reply.error(Errno::ENAMETOOLONG);
        }
        let Some(name) = name.to_str() else {
            return reply.error(Errno::ENOENT);
        };
        let snap = sh.snapshot();
        let Some(node) = layout::child(&snap.model, &dir, name) else {
            return reply.error(Errno::ENOENT);
        };
        let ino = lock(&sh.inodes).intern(&node);
        match sh.attr(ino, &node, &snap) {
            Some(attr) => reply.entry(&sh.kernel_ttl(), &attr, Generation(0)),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, fh: Option<FileHandle>, reply: ReplyAttr) {
        let ino = ino.0;
        let sh = &self.shared;
        let Some(node) = sh.node(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let snap = sh.snapshot();
        let opened = fh.and_then(|fh| lock(&sh.handles).get(&fh.0).cloned());
        let attr = sh.attr(ino, &node, &snap).or_else(|| {
            // A `data` file whose variable is gone, still open: the file a descriptor still
            // reads, as `fstat` of a deleted file answers. The kernel asks through the
            // descriptor before reading through the page cache (an ENOENT here would be the
            // read's error instead of the read's own EIO); `fstat` asks by the inode alone.
            let handle = opened.clone().or_else(|| sh.open_data_file(ino))?;
            if !matches!(handle.node, Node::File(_, FileKind::Data)) {
                return None;
            }
            sh.attr(ino, &node, &sh.read_snapshot(&handle))
        });
        let Some(mut attr) = attr else {
            return reply.error(Errno::ENOENT);
        };
        // Asked through an open file, the size is that of what the open serves, which may
        // be older than the model's: a reader through the page cache stops where the
        // kernel's size says.
        if let Some(handle) = opened {
            if let Some(content) = &handle.content {
                attr.size = content.len() as u64;
                sh.report_size(ino, attr.size);
            } else if let Node::File(owner, FileKind::Data) = &handle.node {
                attr.size = sh.data_size_through(&handle, owner).unwrap_or(attr.size);
            }
            attr.blocks = attr.size.div_ceil(512);
        }
        reply.attr(&sh.kernel_ttl(), &attr)
    }

    /// access(2), as the operations themselves answer, whoever asks (without
    /// `default_permissions` no owner or mode is checked, and with it the kernel answers
    /// itself): everything can be read and every directory searched, no file executed (none
    /// has an execute bit), and only what a `rw` mount lets be written written (a read-only
    /// mount answers `EROFS`, as the kernel does for any read-only filesystem). Without this
    /// answer the kernel would grant every access(2), `X_OK` on `0444` files included.
    fn access(&self, _req: &Request, ino: INodeNo, mask: AccessFlags, reply: ReplyEmpty) {
        let sh = &self.shared;
        let Some(node) = sh.node(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        if !layout::exists(&sh.snapshot().model, &node) {
            return reply.error(Errno::ENOENT);
        }
        let dir = matches!(node, Node::Dir(_) | Node::AttrDir(_));
        if mask.contains(AccessFlags::X_OK) && !dir {
            return reply.error(Errno::EACCES);
        }
        if mask.contains(AccessFlags::W_OK) {
            if sh.writer.is_none() {
                return reply.error(Errno::EROFS);
            }
            if !sh.writable(&node) {
                return reply.error(Errno::EACCES);
            }
        }
        reply.ok()
    }

    fn open(&self, _req: &Request, ino: INodeNo, flags: OpenFlags, reply: ReplyOpen) {
        let (ino, flags) = (ino.0, flags.0);
        let sh = &self.shared;
        let writing = flags & libc::O_ACCMODE != libc::O_RDONLY;
        if writing && sh.writer.is_none() {
            return reply.error(Errno::EROFS);
        }
        let Some(node) = sh.node(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let snap = sh.snapshot();
        if !layout::exists(&snap.model, &node) {
            return reply.error(Errno::ENOENT);
        }
        if lock(&sh.inodes).retired_size(ino).is_some() {
            // A `data` file whose layout changed, reached through a name the kernel still
            // holds: the VFS retries an open that fails so once, looking the name up again,
            // which gives the file's new number.
            return reply.error(Errno::ESTALE);
        }
        let truncating = writing && flags & libc::O_TRUNC != 0;
        let mut text = None;
        let mut opened_value = None;
        let mut truncation = None;
        let (content, open_flags) = match &node {
            // A static dataset's values may stay in the page cache from one open to the next
            // (uncompressed chunks are not kept in the chunk cache, so this is what keeps them
            // from being re-read).
            Node::File(owner, FileKind::Data) => {
                if truncating {
                    if let Some(Resolved::Var(var)) = owner.resolve(&snap.model) {
                        let size = content::data_size(&snap.model, var);
                        truncation = Some((var, sh.truncations.open(var, size)));
                        // The pieces written before are no longer the file's: the bytes not
                        // written again become zeros, not what those pieces held.
                        sh.partial.forget(var);
                    }
                }
                let flags = if self.direct_data {
                    FopenFlags::FOPEN_DIRECT_IO
                } else {
                    sh.generated_open_flags() & FopenFlags::FOPEN_KEEP_CACHE
                };
                (None, flags)
            }
            Node::File(owner, FileKind::Attr(name)) if writing => {
                if let Err(e) = sh.check_attr_writable(owner, name) {
                    return reply.error(sh.refused(&node, "open", &e));
                }
                let initial = if truncating {
                    Vec::new()
                } else {
                    match sh.content(ino, &node, &snap) {
                        Ok(c) => c.to_vec(),
                        Err(e) => return reply.error(Errno::from_i32(e.errno())),
                    }
                };
                text = Some(Mutex::new(initial));
                opened_value = attr_value(&snap.model, owner, name);
                (None, FopenFlags::FOPEN_DIRECT_IO)
            }
            Node::File(..) if writing => {
                log::warn!(
                    "{}: generated file, not writable (EPERM)",
                    node_display(&node)
                );
                return reply.error(Errno::EPERM);
            }
            Node::File(..) => match sh.content(ino, &node, &snap) {
                // Generated files change with the model: the page cache keeps them only when
                // the dataset is declared never to change, and serves them only when the
                // kernel's size for them is right.
                Ok(c) => {
                    let flags = sh.generated_file_open_flags(ino, c.len());
                    (Some(c), flags)
                }
                Err(e) => {
                    sh.log_once(format!("{}: {e}", node_display(&node)));
                    return reply.error(Errno::from_i32(e.errno()));
                }
            },
            _ => return reply.error(Errno::EISDIR),
        };
        let mut handle = Handle::new(ino, node, snap, sh.writer.is_some());
        handle.content = content;
        handle.text = text;
        handle.opened_value = opened_value;
        handle.truncation = truncation;
        // A truncated file owes its flush even if nothing is written: it is empty (an
        // attribute) or zeros (`data`).
        handle.wrote = AtomicBool::new(truncating);
        if let Some(var) = handle.data_var() {
            sh.partial.opened(var);
        }
        let fh = sh.add_handle(handle);
        reply.opened(FileHandle(fh), open_flags);
    }

    fn read(
        &self,
        req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let fh = fh.0;
        let Some(handle) = lock(&self.shared.handles).get(&fh).cloned() else {
            return reply.error(Errno::EBADF);
        };
        log::trace!("read fh {fh}: {size} bytes at {offset}");
        let slice = |c: &[u8]| {
            let start = (offset as usize).min(c.len());
            let end = start.saturating_add(size as usize).min(c.len());
            c[start..end].to_vec()
        };
        if let Some(text) = &handle.text {
            return reply.data(&slice(&lock(text)));
        }
        if let Some(c) = &handle.content {
            return reply.data(&slice(c));
        }
        let sh = &self.shared;
        let Node::File(owner, _) = &handle.node else {
            return reply.error(Errno::EBADF);
        };
        let snap = sh.read_snapshot(&handle);
        let Ok(Resolved::Var(var)) = handle.owner_in(owner, &snap.model) else {
            return reply.error(Errno::ENOENT);
        };
        if sh.dataset_gone.load(Ordering::SeqCst) {
            // Not the fill values a missing chunk stands for: nothing is there at all.
            sh.log_once(format!(
                "{}: read while the dataset is gone (EIO)",
                node_display(&handle.node)
            ));
            return reply.error(Errno::EIO);
        }
        if !snap.reads_its_storage() {
            // Not the new dataset's chunks through the old one's metadata, nor its missing
            // ones (a variable it lacks) as fill values.
            sh.storage_replaced_under(&snap, &handle.node);
            return reply.error(Errno::EIO);
        }
        match sh.chunks_now(&handle, owner, &snap) {
            ChunksNow::Alike => {}
            ChunksNow::Changed => {
                sh.log_once(format!(
                    "{}: the variable changed underneath (type, shape or chunks): reads \
                     through a descriptor opened before fail with EIO; reopen the file",
                    node_display(&handle.node)
                ));
                return reply.error(Errno::EIO);
            }
            ChunksNow::Deleted => {
                sh.log_once(format!(
                    "{}: the variable was deleted underneath: reads through a descriptor \
                     opened before fail with EIO instead of reading fill values",
                    node_display(&handle.node)
                ));
                return reply.error(Errno::EIO);
            }
        }
        let failed = |e: Error| {
            match e {
                Error::RemovedUnderneath { .. } => {
                    // The map's own directory is gone, whichever snapshot read it: what is at
                    // the path now is read at the next lookup, whatever the TTL.
                    sh.refresh_requested.store(true, Ordering::SeqCst);
                    sh.storage_replaced_under(&snap, &handle.node)
                }
                Error::ReplacedUnderneath { .. } => sh.storage_replaced_under(&snap, &handle.node),
                _ => sh.log_once(format!(
                    "{}: read of {size} bytes at {offset}: {e}",
                    node_display(&handle.node)
                )),
            }
            Errno::from_i32(e.errno())
        };
        let reply = match read_in_place(&snap, var, offset, size.into()) {
            Ok(Some((view, range))) => {
                reply.data(&view[range.clone()]);
                let end = offset + range.len() as u64;
                return maybe_prefetch(sh, &handle, &snap, var, offset, end);
            }
            Ok(None) => reply,
            Err(e) => return reply.error(failed(e)),
        };
        if let Some(device) = sh
            .device
            .get()
            .filter(|_| !sh.splice_refused.load(Ordering::Relaxed))
        {
            if let Some(n) = splice_reply(sh, &snap, var, offset, size.into(), device.as_fd(), req)
            {
                // The kernel has its answer: fuser must not send one (its reply would send an
                // error when dropped). Forgetting it leaks nothing but a count on the device.
                std::mem::forget(reply);
                return maybe_prefetch(sh, &handle, &snap, var, offset, offset + n);
            }
        }
        // A session thread serves one request at a time, so its buffer is free here.
        let read = REPLY_BUF.with(|cell| {
            let buf = &mut cell.borrow_mut();
            match read_data_into(&snap, var, offset, size.into(), buf) {
                Ok(range) => {
                    reply.data(&buf[range.clone()]);
                    Some(range.len() as u64)
                }
                Err(e) => {
                    reply.error(failed(e));
                    None
                }
            }
        });
        if let Some(n) = read {
            maybe_prefetch(sh, &handle, &snap, var, offset, offset + n);
        }
    }

    fn write(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let fh = fh.0;
        let sh = &self.shared;
        let Some(handle) = lock(&sh.handles).get(&fh).cloned() else {
            return reply.error(Errno::EBADF);
        };
        if let Some(text) = &handle.text {
            let mut text = lock(text);
            let (start, end) = (offset as usize, offset as usize + data.len());
            if end > MAX_ATTR_TEXT {
                return reply.error(Errno::EFBIG);
            }
            if text.len() < end {
                text.resize(end, 0);
            }
            text[start..end].copy_from_slice(data);
            handle.wrote.store(true, Ordering::SeqCst);
            return reply.written(data.len() as u32);
        }
        let Node::File(owner, FileKind::Data) = &handle.node else {
            return reply.error(Errno::EBADF);
        };
        // With direct I/O the kernel puts an `O_APPEND` write at the size it last saw, which
        // misses records another variable added to the dimension since: the daemon knows the
        // end. (Through the page cache the kernel has already placed the bytes.)
        let appending = self.direct_data && flags.0 & libc::O_APPEND != 0;
        let within = match appending {
            false => sh.write_within(&handle, owner, offset, data),
            true => None,
        };
        let result = within.unwrap_or_else(|| {
            sh.change(|w| {
                let Resolved::Var(var) = handle.owner_in(owner, w.model())? else {
                    return Err(Error::NotFound(owner.display()));
                };
                let mut tail = lock(&handle.append_tail);
                let at = if appending {
                    tail.offset(content::data_size(w.model(), var))
                } else {
                    offset
                };
                let n = write_data(w, var, at, data, &sh.partial)?;
                if n == 0 && !data.is_empty() {
                    return Ok(Err(why_fixed_size(w.model(), var)));
                }
                let written = at..at + n as u64;
                if appending {
                    tail.appended(written.clone(), content::data_size(w.model(), var));
                }
                if let Some((_, truncation)) = &handle.truncation {
                    lock(truncation).wrote(written.clone());
                }
                sh.truncations.wrote(var, written);
                sh.wrote_values(var);
                Ok(Ok(n))
            })
        });
        match result {
            Ok(Err(why)) => {
                log::warn!(
                    "{}: write at {offset} past the end of {why} (EFBIG)",
                    node_display(&handle.node)
                );
                reply.error(Errno::EFBIG)
            }
            Ok(Ok(n)) => {
                handle.wrote.store(true, Ordering::SeqCst);
                reply.written(n as u32)
            }
            Err(e) => reply.error(sh.failed(&handle.node, "write", &e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        let fh = fh.0;
        if self.shared.writer.is_none() {
            // Nothing to write back on a read-only mount: ENOSYS makes the kernel stop
            // sending a FLUSH at every close.
            return reply.error(Errno::ENOSYS);
        }
        let handle = lock(&self.shared.handles).get(&fh).cloned();
        match handle.map(|h| self.shared.commit(&h, Commit::Flush)) {
            Some(Err(errno)) => reply.error(errno),
            _ => reply.ok(),
        }
    }

    fn fsync(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let fh = fh.0;
        let handle = lock(&self.shared.handles).get(&fh).cloned();
        match handle.map(|h| self.shared.commit(&h, Commit::Fsync)) {
            Some(Err(errno)) => reply.error(errno),
            _ => reply.ok(),
        }
    }

    fn release(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let fh = fh.0;
        let Some(handle) = lock(&self.shared.handles).remove(&fh) else {
            return reply.ok();
        };
        let committed = self.shared.commit(&handle, Commit::Release);
        if let Some((var, truncation)) = &handle.truncation {
            self.shared.truncations.close(*var, truncation);
        }
        // After the commit, which may complete kept elements with the zeros of an `O_TRUNC`.
        if let Some(var) = handle.data_var() {
            self.shared.partial.released(var);
        }
        match committed {
            Err(errno) => reply.error(errno),
            Ok(()) => reply.ok(),
        }
    }

    /// `posix_fallocate` grows the file as `ftruncate` would (glibc would otherwise emulate
    /// it by writing a zero byte into every block, zeros that would land in values); space is
    /// not reserved ahead in object storage, so keeping the size is a no-op. Punching or
    /// zeroing ranges is not offered.
    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        let sh = &self.shared;
        if mode & !libc::FALLOC_FL_KEEP_SIZE != 0 {
            return reply.error(Errno::EOPNOTSUPP);
        }
        if sh.writer.is_none() {
            return reply.error(Errno::EROFS);
        }
        let Some(node) = sh.node(ino.0) else {
            return reply.error(Errno::ENOENT);
        };
        let Some(handle) = lock(&sh.handles).get(&fh.0).cloned() else {
            return reply.error(Errno::EBADF);
        };
        let Some(end) = offset.checked_add(length) else {
            return reply.error(Errno::EFBIG);
        };
        let size = match (&node, &handle.text) {
            (_, Some(text)) => lock(text).len() as u64,
            (Node::File(owner, FileKind::Data), None) => {
                let snap = sh.snapshot();
                match owner.resolve(&snap.model) {
                    Some(Resolved::Var(var)) => content::data_size(&snap.model, var),
                    _ => return reply.error(Errno::ENOENT),
                }
            }
            _ => return reply.error(Errno::EOPNOTSUPP),
        };
        if mode & libc::FALLOC_FL_KEEP_SIZE != 0 || end <= size {
            return reply.ok();
        }
        match sh.resize(&node, Some(&handle), end) {
            Ok(()) => reply.ok(),
            Err(errno) => reply.error(errno),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        _mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let (ino, fh) = (ino.0, fh.map(|fh| fh.0));
        let sh = &self.shared;
        let Some(node) = sh.node(ino) else {
            return reply.error(Errno::ENOENT);
        };
        if let Some(size) = size {
            if sh.writer.is_none() {
                return reply.error(Errno::EROFS);
            }
            let handle = fh.and_then(|fh| lock(&sh.handles).get(&fh).cloned());
            if let Err(errno) = sh.resize(&node, handle.as_deref(), size) {
                return reply.error(errno);
            }
        }
        // Modes, owners and times are not stored: they are accepted and stay as they were.
        let snap = sh.snapshot();
        match sh.attr(ino, &node, &snap) {
            Some(attr) => reply.attr(&sh.kernel_ttl(), &attr),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn create(
        &self,
        _req: &Request,
        parent_ino: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        flags: i32,
        reply: ReplyCreate,
    ) {
        let parent_ino = parent_ino.0;
        let sh = &self.shared;
        if sh.writer.is_none() {
            return reply.error(Errno::EROFS);
        }
        let Some(dir) = sh.node(parent_ino) else {
            return reply.error(Errno::ENOENT);
        };
        let entry = match new_entry_name(&dir, name, Some("create")) {
            Ok(entry) => entry,
            Err(errno) => return reply.error(errno),
        };
        let Node::AttrDir(owner) = &dir else {
            log::warn!(
                "{}/{entry}: only attribute files can be created (EPERM)",
                node_display(&dir).trim_end_matches('/')
            );
            return reply.error(Errno::EPERM);
        };
        let Some(attr_name) = layout::attr_name(entry) else {
            log::warn!(
                "create {}/{entry}: not an attribute file name: {NOT_AN_ATTR_ENTRY} (EPERM)",
                node_display(&dir),
            );
            return reply.error(Errno::EPERM);
        };
        let node = Node::File(owner.clone(), FileKind::Attr(attr_name.clone()));
        let existed = layout::exists(&sh.snapshot().model, &node);
        if existed && flags & libc::O_EXCL != 0 {
            return reply.error(Errno::EEXIST);
        }
        if let Err(e) = sh.check_attr_writable(owner, &attr_name) {
            return reply.error(sh.refused(&node, "create", &e));
        }
        if !existed {
            // An empty text attribute until the file is closed with its real value.
            let made = sh.change(|w| {
                let target = attr_target(w.model(), owner)?;
                w.put_attr(target, &attr_name, AttrValue::Char(Vec::new()))
            });
            if let Err(e) = made {
                return reply.error(sh.refused(&node, "create", &e));
            }
        }
        let snap = sh.snapshot();
        let opened_value = match existed {
            true => attr_value(&snap.model, owner, &attr_name),
            false => None,
        };
        let ino = lock(&sh.inodes).intern(&node);
        let initial = match (
            existed && flags & libc::O_TRUNC == 0,
            sh.content(ino, &node, &snap),
        ) {
            (true, Ok(c)) => c.to_vec(),
            _ => Vec::new(),
        };
        let Some(attr) = sh.attr(ino, &node, &snap) else {
            return reply.error(Errno::ENOENT);
        };
        // A new or truncated attribute is applied on close even when nothing is written to it.
        let mut handle = Handle::new(ino, node, snap, sh.writer.is_some());
        handle.text = Some(Mutex::new(initial));
        handle.opened_value = opened_value;
        handle.wrote = AtomicBool::new(!existed || flags & libc::O_TRUNC != 0);
        handle.placeholder = AtomicBool::new(!existed);
        let fh = sh.add_handle(handle);
        reply.created(
            &sh.kernel_ttl(),
            &attr,
            Generation(0),
            FileHandle(fh),
            FopenFlags::FOPEN_DIRECT_IO,
        );
    }

    fn mkdir(
        &self,
        _req: &Request,
        parent_ino: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        let parent_ino = parent_ino.0;
        let sh = &self.shared;
        if sh.writer.is_none() {
            return reply.error(Errno::EROFS);
        }
        let Some(dir) = sh.node(parent_ino) else {
            return reply.error(Errno::ENOENT);
        };
        let entry = match new_entry_name(&dir, name, Some("mkdir")) {
            Ok(entry) => entry,
            Err(errno) => return reply.error(errno),
        };
        if layout::child(&sh.snapshot().model, &dir, entry).is_some() {
            return reply.error(Errno::EEXIST);
        }
        let (Node::Dir(owner @ Owner::Group(path)), Some(group_name)) =
            (&dir, layout::object_name(entry))
        else {
            log::warn!(
                "mkdir {}/{entry}: only groups can be made, in groups (EPERM)",
                node_display(&dir).trim_end_matches('/')
            );
            return reply.error(Errno::EPERM);
        };
        let node = Node::Dir(Owner::Group(path.child(group_name)));
        let made = sh.change(|w| {
            let Some(Resolved::Group(g)) = owner.resolve(w.model()) else {
                return Err(Error::NotFound(owner.display()));
            };
            w.add_group_stored(g, group_name).map(|_| ())
        });
        if let Err(e) = made {
            return reply.error(sh.refused(&node, "mkdir", &e));
        }
        let snap = sh.snapshot();
        let ino = lock(&sh.inodes).intern(&node);
        match sh.attr(ino, &node, &snap) {
            Some(attr) => reply.entry(&sh.kernel_ttl(), &attr, Generation(0)),
            None => reply.error(Errno::EIO),
        }
    }

    fn unlink(&self, _req: &Request, parent_ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let parent_ino = parent_ino.0;
        let sh = &self.shared;
        if sh.writer.is_none() {
            return reply.error(Errno::EROFS);
        }
        let Some(dir) = sh.node(parent_ino) else {
            return reply.error(Errno::ENOENT);
        };
        // A name that is not UTF-8 names nothing (a lossy reading could name another entry).
        let found = name
            .to_str()
            .and_then(|name| layout::child(&sh.snapshot().model, &dir, name));
        let Some(node) = found else {
            return reply.error(Errno::ENOENT);
        };
        let Node::File(owner, FileKind::Attr(attr)) = &node else {
            log::warn!(
                "rm {}: only attributes can be removed (EPERM)",
                node_display(&node)
            );
            return reply.error(Errno::EPERM);
        };
        let done = sh.change(|w| {
            let target = attr_target(w.model(), owner)?;
            w.change_and_sync(|w| w.del_attr(target, attr))
        });
        match done {
            Ok(()) => {
                sh.attr_moved(owner, attr, None);
                reply.ok()
            }
            Err(e) => reply.error(sh.refused(&node, "rm", &e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent_ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        let parent_ino = parent_ino.0;
        let sh = &self.shared;
        if sh.writer.is_none() {
            return reply.error(Errno::EROFS);
        }
        let Some(dir) = sh.node(parent_ino) else {
            return reply.error(Errno::ENOENT);
        };
        let found = name
            .to_str()
            .and_then(|name| layout::child(&sh.snapshot().model, &dir, name));
        match found {
            None => reply.error(Errno::ENOENT),
            Some(node) => {
                log::warn!(
                    "rmdir {}: netCDF cannot delete variables or groups (EPERM)",
                    node_display(&node)
                );
                reply.error(Errno::EPERM)
            }
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent_ino: INodeNo,
        name: &OsStr,
        newparent_ino: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let (parent_ino, newparent_ino) = (parent_ino.0, newparent_ino.0);
        let sh = &self.shared;
        if sh.writer.is_none() {
            return reply.error(Errno::EROFS);
        }
        let (Some(dir), Some(newdir)) = (sh.node(parent_ino), sh.node(newparent_ino)) else {
            return reply.error(Errno::ENOENT);
        };
        let snap = sh.snapshot();
        let found = name
            .to_str()
            .and_then(|name| layout::child(&snap.model, &dir, name));
        let Some(node) = found else {
            return reply.error(Errno::ENOENT);
        };
        let newname = match new_entry_name(&newdir, newname, Some("mv")) {
            Ok(newname) => newname,
            Err(errno) => return reply.error(errno),
        };
        let refuse = |why: &str| {
            log::warn!("mv {} to {newname}: {why} (EPERM)", node_display(&node));
            Errno::EPERM
        };
        if dir != newdir {
            return reply.error(refuse("objects cannot move to another directory"));
        }
        // GNU mv renames with RENAME_NOREPLACE: a taken name is then EEXIST, as anywhere.
        if !(flags - RenameFlags::RENAME_NOREPLACE).is_empty() {
            return reply.error(refuse("rename flags other than RENAME_NOREPLACE"));
        }
        if flags.contains(RenameFlags::RENAME_NOREPLACE)
            && layout::child(&snap.model, &newdir, newname).is_some()
        {
            return reply.error(Errno::EEXIST);
        }
        let done = match &node {
            Node::Dir(owner @ (Owner::Var(..) | Owner::Group(_))) => {
                let Some(to) = layout::object_name(newname) else {
                    return reply.error(refuse("names beginning with @ belong to the layout"));
                };
                if to == owner_name(owner) {
                    return reply.ok();
                }
                sh.change(|w| {
                    match owner.resolve(w.model()) {
                        Some(Resolved::Var(v)) => w.rename_var(v, to)?,
                        Some(Resolved::Group(g)) => w.rename_group(g, to)?,
                        None => return Err(Error::NotFound(owner.display())),
                    }
                    // Before the renamed model is published: a lookup that sees it must get
                    // new numbers for both names.
                    sh.forget_numbers_within(&[owner.clone(), renamed(owner, to)]);
                    w.sync()
                })
            }
            Node::File(owner, FileKind::Attr(from)) => {
                let Some(to) = layout::attr_name(newname) else {
                    return reply.error(refuse(&format!(
                        "not an attribute file name: {NOT_AN_ATTR_ENTRY}"
                    )));
                };
                if &to == from {
                    return reply.ok();
                }
                sh.change(|w| {
                    let target = attr_target(w.model(), owner)?;
                    let attrs = owner
                        .resolve(w.model())
                        .map_or(&[][..], |r| layout::attrs_of(w.model(), r));
                    let exists = attrs.iter().any(|a| a.name == to);
                    let stored = match attrs.iter().find(|a| &a.name == from) {
                        Some(moved) => Some(quantize_attr_value(
                            w.model(),
                            target,
                            &to,
                            moved.value.clone(),
                            Some(from),
                        )?)
                        .filter(|stored| *stored != moved.value),
                        None => None,
                    };
                    w.change_and_sync(|w| {
                        if exists {
                            // rename(2) replaces its target.
                            w.del_attr(target, &to)?;
                        }
                        w.rename_attr(target, from, &to)?;
                        match stored {
                            // Renamed into a quantization attribute, a value of another
                            // type is stored as one int, as it is when written.
                            Some(value) => w.put_attr(target, &to, value),
                            None => Ok(()),
                        }
                    })
                })
                .map(|()| {
                    sh.attr_moved(owner, &to, None);
                    sh.attr_moved(owner, from, Some(&to));
                })
            }
            _ => return reply.error(refuse("layout files cannot be renamed")),
        };
        match done {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(sh.refused(&node, "mv", &e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let ino = ino.0;
        match self.shared.node(ino) {
            // Listings are made from the current snapshot at each readdir, so a directory
            // needs no handle: ENOSYS tells a kernel that supports it to stop sending
            // OPENDIR and RELEASEDIR altogether. (Its directory cache, offered to static
            // datasets, would need a handle; skipping two requests per listing gains more.)
            Some(Node::Dir(_) | Node::AttrDir(_)) if self.no_opendir => reply.error(Errno::ENOSYS),
            Some(Node::Dir(_) | Node::AttrDir(_)) => reply.opened(
                FileHandle(0),
                self.shared.generated_open_flags() - FopenFlags::FOPEN_DIRECT_IO,
            ),
            Some(_) => reply.error(Errno::ENOTDIR),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let ino = ino.0;
        let sh = &self.shared;
        let Some(dir) = sh.node(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let snap = sh.snapshot();
        let Some(all) = sh.listing(ino, &dir, &snap, offset) else {
            return reply.error(Errno::ENOENT);
        };
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (ino, node, name)) in all.iter().enumerate().skip(skip) {
            let kind = match node {
                Node::File(..) => FileType::RegularFile,
                _ => FileType::Directory,
            };
            if reply.add(INodeNo(*ino), (i + 1) as u64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let ino = ino.0;
        let sh = &self.shared;
        let Some(dir) = sh.node(ino) else {
            return reply.error(Errno::ENOENT);
        };
        let snap = sh.snapshot();
        let Some(all) = sh.listing(ino, &dir, &snap, offset) else {
            return reply.error(Errno::ENOENT);
        };
        let ttl = sh.kernel_ttl();
        let skip = usize::try_from(offset).unwrap_or(usize::MAX);
        for (i, (ino, node, name)) in all.iter().enumerate().skip(skip) {
            // An entry that vanished since the listing is left out, as a lookup would fail.
            let Some(attr) = sh.attr(*ino, node, &snap) else {
                continue;
            };
            if reply.add(
                INodeNo(*ino),
                (i + 1) as u64,
                name,
                &ttl,
                &attr,
                Generation(0),
            ) {
                break;
            }
        }
        reply.ok();
    }

    /// A read-only mount is full, as any read-only image; a `rw` one has the space of the file
    /// system that holds the dataset, or plenty on an object store, so that tools which check
    /// for free space before writing do not refuse.
    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        const BLOCK: u64 = 4096;
        const OBJECT_STORE_FREE: u64 = 1 << 50;
        let snap = self.shared.snapshot();
        let used: u64 = (0..snap.model.vars.len())
            .map(|v| content::data_size(&snap.model, VarId(v)))
            .fold(0, u64::saturating_add);
        let files = lock(&self.shared.inodes).count();
        let space = match (&self.shared.writer, self.shared.map.local_space()) {
            (None, _) => Space {
                total: used,
                free: 0,
                available: 0,
            },
            (Some(_), Some(space)) => space,
            (Some(_), None) => Space {
                total: used.saturating_add(OBJECT_STORE_FREE),
                free: OBJECT_STORE_FREE,
                available: OBJECT_STORE_FREE,
            },
        };
        reply.statfs(
            space.total.div_ceil(BLOCK),
            space.free / BLOCK,
            space.available / BLOCK,
            files,
            0,
            BLOCK as u32,
            255,
            BLOCK as u32,
        );
    }

    /// No ioctl is offered: `ENOTTY` is the answer for a file that takes none (Python asks
    /// for TCGETS on every `open`).
    fn ioctl(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _flags: IoctlFlags,
        _cmd: u32,
        _in_data: &[u8],
        _out_size: u32,
        reply: ReplyIoctl,
    ) {
        reply.error(Errno::ENOTTY);
    }

    /// Special files (and regular ones made by mknod(2) rather than open(2)) have no place in
    /// a dataset.
    fn mknod(
        &self,
        _req: &Request,
        parent_ino: INodeNo,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let sh = &self.shared;
        if sh.writer.is_none() {
            return reply.error(Errno::EROFS);
        }
        let dir = sh
            .node(parent_ino.0)
            .map_or_else(String::new, |d| node_display(&d));
        log::warn!(
            "{}/{}: mknod is not permitted, only attribute files can be created (EPERM)",
            dir.trim_end_matches('/'),
            name.to_string_lossy()
        );
        reply.error(Errno::EPERM);
    }
}

/// After a read that continued the previous one, loads the chunks that come next into the
/// cache in the background, a window of `readahead` bytes ahead of the reader. When the
/// variable is larger than the cache, the chunks the reader has left behind are released,
/// their buffers reused for the next ones: under LRU such a scan would only cycle the whole
/// variable through the cache, evicting everything else, and be evicted itself before being
/// read again.
fn maybe_prefetch(
    sh: &Arc<Shared>,
    handle: &Arc<Handle>,
    snap: &Arc<Snapshot>,
    var: VarId,
    offset: u64,
    end: u64,
) {
    let ds = &snap.model;
    let esz = ds.var(var).element_size() as u64;
    let window = sh.opts.readahead.min(sh.opts.cache_bytes as u64 / 4) / esz.max(1);
    if window == 0 || esz == 0 {
        return;
    }
    let total: u64 = ds.var_shape(var).iter().product();
    let scan = match &snap.source {
        Source::Engine(engine) => total * esz > engine.cache_capacity() as u64,
        Source::Writer(_) => false,
    };
    let geometry = Geometry {
        element_size: esz,
        window,
        total,
        scan,
    };
    let step = lock(&handle.stream).advance(offset, end, &geometry);
    if let (Some((lo, hi)), Source::Engine(engine)) = (step.release, &snap.source) {
        if let Err(e) = engine.release(ds, var, lo, hi) {
            log::debug!("release of {} stopped: {e}", ds.var_fqn(var));
        }
    }
    if let Some((lo, hi)) = step.prefetch {
        let snap = Arc::clone(snap);
        sh.prefetcher.spawn(move || prefetch(&snap, var, lo, hi));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fuse::layout::GroupPath;

    #[test]
    fn node_display_names_each_node_by_its_path_in_the_mount() {
        let root = Owner::Group(GroupPath::root());
        let g = Owner::Group(GroupPath::root().child("g"));
        let v = Owner::Var(GroupPath::root(), "v".into());
        let attr = |o: &Owner| Node::File(o.clone(), FileKind::Attr("a/b".into()));
        let cases = [
            (Node::Dir(root.clone()), "/"),
            (Node::AttrDir(root.clone()), "/@attributes"),
            (attr(&root), "/@attributes/a%2Fb"),
            (Node::File(root.clone(), FileKind::Header), "/@header.cdl"),
            (Node::File(root, FileKind::Metadata), "/@metadata.json"),
            (Node::Dir(g.clone()), "/g"),
            (Node::AttrDir(g.clone()), "/g/@attributes"),
            (attr(&g), "/g/@attributes/a%2Fb"),
            (Node::AttrDir(v.clone()), "/v/@attributes"),
            (Node::File(v, FileKind::Data), "/v/data"),
        ];
        for (node, want) in cases {
            assert_eq!(node_display(&node), want, "{node:?}");
        }
    }
}
