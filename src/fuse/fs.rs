//! The [`fuser::Filesystem`] implementation. fuser's session loop is single-threaded, so data
//! reads are handed to a thread pool and answered from there.

use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, ReplyAttr, ReplyData, ReplyDirectory, ReplyEntry,
    ReplyOpen, ReplyStatfs, Request,
};

use crate::chunk::ChunkEngine;
use crate::dataset::OpenDataset;
use crate::location::Mode;
use crate::model::{Dataset, VarId};
use crate::zmap::ZMap;
use crate::{meta, Error, Result};

use super::content;
use super::inodes::{parent, InodeTable};
use super::layout::{self, FileKind, Node, Resolved};
use super::options::MountOptions;
use super::slab::{element_range_slabs, slab_len};

/// How long the kernel may cache names and attributes when the dataset is declared static.
const STATIC_TTL: Duration = Duration::from_secs(3600);
/// Most distinct failure messages remembered so that each is logged once.
const MAX_LOGGED: usize = 10_000;

/// One consistent view of the dataset: a model and the chunk engine that reads it.
#[derive(Debug)]
pub struct Snapshot {
    /// The metadata model.
    pub model: Dataset,
    /// The chunk engine (and its cache) serving this model.
    pub engine: ChunkEngine,
    /// Bumped whenever the model changes; generated file contents are cached per generation.
    pub generation: u64,
    /// When the model last changed (the mtime of every node).
    pub changed: SystemTime,
}

/// Generated content of one inode and the model generation it was made from.
type Generated = (u64, Arc<Vec<u8>>);

/// An open file.
#[derive(Debug)]
struct Handle {
    node: Node,
    snap: Arc<Snapshot>,
    /// Generated content, for everything but `data`.
    content: Option<Arc<Vec<u8>>>,
    /// Byte offset where the previous read ended, and the element index up to which the
    /// chunk cache has been asked to prefetch.
    seq: Mutex<(u64, u64)>,
}

/// State shared by the session thread and the reader threads.
#[derive(Debug)]
struct Shared {
    map: Arc<dyn ZMap>,
    mode: Mode,
    dataset_name: String,
    opts: MountOptions,
    uid: u32,
    gid: u32,
    snap: RwLock<Arc<Snapshot>>,
    last_check: Mutex<Instant>,
    refresh_requested: AtomicBool,
    inodes: Mutex<InodeTable>,
    contents: Mutex<HashMap<u64, Generated>>,
    handles: Mutex<HashMap<u64, Arc<Handle>>>,
    next_fh: AtomicU64,
    logged: Mutex<HashSet<String>>,
}

/// The filesystem served by a mount.
#[derive(Debug)]
pub struct NczarrFs {
    shared: Arc<Shared>,
    pool: rayon::ThreadPool,
}

/// A handle that asks a mounted filesystem to re-read its metadata (used on SIGHUP).
#[derive(Debug, Clone)]
pub struct RefreshHandle(Arc<Shared>);

impl RefreshHandle {
    /// Makes the next filesystem operation re-read the metadata, whatever the TTL says.
    pub fn request(&self) {
        self.0.refresh_requested.store(true, Ordering::SeqCst);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panicking reader thread must not take the whole mount down with it.
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl NczarrFs {
    /// A filesystem over an open dataset.
    pub fn new(ds: OpenDataset, opts: MountOptions) -> Result<NczarrFs> {
        if opts.read_write {
            return Err(Error::Unsupported(
                "read-write mounts (-o rw): the chunk engine cannot write yet".into(),
            ));
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(opts.threads)
            .thread_name(|i| format!("nczarrfs-read-{i}"))
            .build()
            .map_err(|e| Error::Invalid(format!("cannot start reader threads: {e}")))?;
        // SAFETY: getuid/getgid cannot fail and touch no memory.
        let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
        let shared = Shared {
            map: ds.map,
            mode: ds.location.mode.clone(),
            dataset_name: ds.location.dataset_name(),
            uid: opts.uid.unwrap_or(uid),
            gid: opts.gid.unwrap_or(gid),
            snap: RwLock::new(Arc::new(Snapshot {
                model: ds.model,
                engine: ds.engine,
                generation: 0,
                changed: SystemTime::now(),
            })),
            opts,
            last_check: Mutex::new(Instant::now()),
            refresh_requested: AtomicBool::new(false),
            inodes: Mutex::new(InodeTable::new()),
            contents: Mutex::new(HashMap::new()),
            handles: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            logged: Mutex::new(HashSet::new()),
        };
        Ok(NczarrFs {
            shared: Arc::new(shared),
            pool,
        })
    }

    /// A handle to request a metadata reload from another thread.
    pub fn refresh_handle(&self) -> RefreshHandle {
        RefreshHandle(Arc::clone(&self.shared))
    }
}

impl Shared {
    fn kernel_ttl(&self) -> Duration {
        self.opts.ttl.unwrap_or(STATIC_TTL)
    }

    /// The current snapshot, re-reading the metadata first when the TTL has run out.
    fn snapshot(&self) -> Arc<Snapshot> {
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
        }
        Arc::clone(&self.snap.read().unwrap_or_else(|e| e.into_inner()))
    }

    /// Re-reads the metadata and drops cached chunks, which may have changed underneath; on
    /// failure the old view stays.
    fn reload(&self) {
        let current = Arc::clone(&self.snap.read().unwrap_or_else(|e| e.into_inner()));
        match meta::read_dataset(self.map.as_ref(), &self.mode) {
            Ok(model) if model == current.model => {
                // Same metadata: chunks may still have been rewritten underneath.
                if let Err(e) = current.engine.clear() {
                    self.log_once(format!("cannot drop the chunk cache: {e}"));
                }
            }
            Ok(model) => {
                log::info!("{}: metadata changed, reloaded", self.map.describe());
                let snap = Snapshot {
                    engine: ChunkEngine::new(Arc::clone(&self.map), self.opts.cache_bytes),
                    generation: current.generation + 1,
                    changed: SystemTime::now(),
                    model,
                };
                *self.snap.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(snap);
            }
            Err(e) => self.log_once(format!("cannot re-read metadata, keeping the old: {e}")),
        }
    }

    fn log_once(&self, msg: String) {
        let mut logged = lock(&self.logged);
        if logged.len() < MAX_LOGGED && logged.insert(msg.clone()) {
            log::error!("{msg}");
        }
    }

    fn node(&self, ino: u64) -> Option<Node> {
        lock(&self.inodes).node(ino).cloned()
    }

    /// The generated content of a non-`data` file, cached per inode and model generation.
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
            FileKind::Header => content::header(ds, &snap.engine, &self.dataset_name, r)?,
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

    fn attr(&self, ino: u64, node: &Node, snap: &Snapshot) -> Option<FileAttr> {
        if !layout::exists(&snap.model, node) {
            return None;
        }
        let (kind, size, perm) = match node {
            Node::Dir(_) | Node::AttrDir(_) => (FileType::Directory, 0, 0o555),
            Node::File(owner, FileKind::Data) => match owner.resolve(&snap.model) {
                Some(Resolved::Var(v)) => (
                    FileType::RegularFile,
                    content::data_size(&snap.model, v),
                    0o444,
                ),
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
                (FileType::RegularFile, size, 0o444)
            }
        };
        Some(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: snap.changed,
            mtime: snap.changed,
            ctime: snap.changed,
            crtime: snap.changed,
            kind,
            perm: perm & !(self.opts.umask as u16),
            nlink: if kind == FileType::Directory { 2 } else { 1 },
            uid: self.uid,
            gid: self.gid,
            rdev: 0,
            blksize: 1 << 20,
            flags: 0,
        })
    }
}

fn node_display(node: &Node) -> String {
    match node {
        Node::Dir(o) => o.display(),
        Node::AttrDir(o) => format!("{}/{}", o.display(), layout::ATTRIBUTES),
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

/// Reads bytes `[offset, offset + len)` of a variable's `data` (clipped to its size).
pub fn read_data(snap: &Snapshot, var: VarId, offset: u64, len: u64) -> Result<Vec<u8>> {
    let ds = &snap.model;
    let size = content::data_size(ds, var);
    let esz = ds.var(var).element_size() as u64;
    if offset >= size || len == 0 || esz == 0 {
        return Ok(Vec::new());
    }
    let end = offset.saturating_add(len).min(size);
    let (e0, e1) = (offset / esz, end.div_ceil(esz));
    let mut buf = vec![0u8; ((e1 - e0) * esz) as usize];
    let shape = ds.var_shape(var);
    let mut pos = 0usize;
    for slab in element_range_slabs(&shape, e0, e1) {
        let n = (slab_len(&slab) * esz) as usize;
        snap.engine.read(ds, var, &slab, &mut buf[pos..pos + n])?;
        pos += n;
    }
    let skip = (offset - e0 * esz) as usize;
    buf.truncate(skip + (end - offset) as usize);
    buf.drain(..skip);
    Ok(buf)
}

/// Asks the chunk engine to load elements `[lo, hi)` of `var` into its cache.
fn prefetch(snap: &Snapshot, var: VarId, lo: u64, hi: u64) {
    let ds = &snap.model;
    let esz = ds.var(var).element_size();
    let shape = ds.var_shape(var);
    for slab in element_range_slabs(&shape, lo, hi) {
        let mut scratch = vec![0u8; slab_len(&slab) as usize * esz];
        if let Err(e) = snap.engine.read(ds, var, &slab, &mut scratch) {
            log::debug!("prefetch of {} stopped: {e}", ds.var_fqn(var));
            return;
        }
    }
}

impl Filesystem for NczarrFs {
    fn init(
        &mut self,
        _req: &Request<'_>,
        config: &mut KernelConfig,
    ) -> std::result::Result<(), libc::c_int> {
        use fuser::consts::{FUSE_ASYNC_READ, FUSE_BIG_WRITES, FUSE_PARALLEL_DIROPS};
        for cap in [FUSE_ASYNC_READ, FUSE_BIG_WRITES, FUSE_PARALLEL_DIROPS] {
            // Optional: an old kernel without them is still served correctly.
            let _ = config.add_capabilities(cap);
        }
        // No kernel readahead: a readahead request that reaches a corrupt chunk would fail the
        // pages the reader asked for too. Large reads stay large (the kernel sends the reader's
        // size), and sequential small reads are served by our own chunk prefetch.
        let _ = config.set_max_readahead(1);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        log::info!("mounted {}", self.shared.map.describe());
        Ok(())
    }

    fn destroy(&mut self) {
        // Read-only: nothing is dirty. A read-write mount flushes the engine and the map here.
        if let Err(e) = self.shared.map.flush() {
            log::error!("flush at unmount failed: {e}");
        }
        log::info!("unmounted {}", self.shared.map.describe());
    }

    fn lookup(&mut self, _req: &Request<'_>, parent_ino: u64, name: &OsStr, reply: ReplyEntry) {
        let sh = &self.shared;
        let Some(dir) = sh.node(parent_ino) else {
            return reply.error(libc::ENOENT);
        };
        let Some(name) = name.to_str() else {
            return reply.error(libc::ENOENT);
        };
        let snap = sh.snapshot();
        let Some(node) = layout::child(&snap.model, &dir, name) else {
            return reply.error(libc::ENOENT);
        };
        let ino = lock(&sh.inodes).intern(&node);
        match sh.attr(ino, &node, &snap) {
            Some(attr) => reply.entry(&sh.kernel_ttl(), &attr, 0),
            None => reply.error(libc::ENOENT),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        let sh = &self.shared;
        let Some(node) = sh.node(ino) else {
            return reply.error(libc::ENOENT);
        };
        let snap = sh.snapshot();
        match sh.attr(ino, &node, &snap) {
            Some(attr) => reply.attr(&sh.kernel_ttl(), &attr),
            None => reply.error(libc::ENOENT),
        }
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        let sh = &self.shared;
        if flags & libc::O_ACCMODE != libc::O_RDONLY {
            return reply.error(libc::EROFS);
        }
        let Some(node) = sh.node(ino) else {
            return reply.error(libc::ENOENT);
        };
        let snap = sh.snapshot();
        if !layout::exists(&snap.model, &node) {
            return reply.error(libc::ENOENT);
        }
        let (content, open_flags) = match &node {
            Node::File(_, FileKind::Data) => (None, 0),
            Node::File(..) => match sh.content(ino, &node, &snap) {
                // Generated files change with the model: no page cache for them.
                Ok(c) => (Some(c), fuser::consts::FOPEN_DIRECT_IO),
                Err(e) => {
                    sh.log_once(format!("{}: {e}", node_display(&node)));
                    return reply.error(e.errno());
                }
            },
            _ => return reply.error(libc::EISDIR),
        };
        let fh = sh.next_fh.fetch_add(1, Ordering::Relaxed);
        let handle = Handle {
            node,
            snap,
            content,
            seq: Mutex::new((0, 0)),
        };
        lock(&sh.handles).insert(fh, Arc::new(handle));
        reply.opened(fh, open_flags);
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let Some(handle) = lock(&self.shared.handles).get(&fh).cloned() else {
            return reply.error(libc::EBADF);
        };
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(libc::EINVAL);
        };
        if let Some(c) = &handle.content {
            let start = (offset as usize).min(c.len());
            let end = start.saturating_add(size as usize).min(c.len());
            return reply.data(&c[start..end]);
        }
        let sh = Arc::clone(&self.shared);
        self.pool.spawn(move || {
            let Node::File(owner, _) = &handle.node else {
                return reply.error(libc::EBADF);
            };
            let Some(Resolved::Var(var)) = owner.resolve(&handle.snap.model) else {
                return reply.error(libc::ENOENT);
            };
            match read_data(&handle.snap, var, offset, size.into()) {
                Ok(bytes) => {
                    let end = offset + bytes.len() as u64;
                    reply.data(&bytes);
                    maybe_prefetch(&sh, &handle, var, offset, end);
                }
                Err(e) => {
                    sh.log_once(format!(
                        "{}: read of {size} bytes at {offset}: {e}",
                        node_display(&handle.node)
                    ));
                    reply.error(e.errno());
                }
            }
        });
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: fuser::ReplyEmpty,
    ) {
        lock(&self.shared.handles).remove(&fh);
        reply.ok();
    }

    fn opendir(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        match self.shared.node(ino) {
            Some(Node::Dir(_) | Node::AttrDir(_)) => reply.opened(0, 0),
            Some(_) => reply.error(libc::ENOTDIR),
            None => reply.error(libc::ENOENT),
        }
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let sh = &self.shared;
        let Some(dir) = sh.node(ino) else {
            return reply.error(libc::ENOENT);
        };
        let snap = sh.snapshot();
        let Some(entries) = layout::list(&snap.model, &dir) else {
            return reply.error(libc::ENOENT);
        };
        let mut inodes = lock(&sh.inodes);
        let parent_ino = inodes.intern(&parent(&dir));
        let mut all = vec![
            (ino, FileType::Directory, ".".to_string()),
            (parent_ino, FileType::Directory, "..".to_string()),
        ];
        for (name, node) in entries {
            let kind = match node {
                Node::File(..) => FileType::RegularFile,
                _ => FileType::Directory,
            };
            all.push((inodes.intern(&node), kind, name));
        }
        drop(inodes);
        let skip = usize::try_from(offset).unwrap_or(0);
        for (i, (ino, kind, name)) in all.into_iter().enumerate().skip(skip) {
            if reply.add(ino, (i + 1) as i64, kind, name) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let snap = self.shared.snapshot();
        let used: u64 = (0..snap.model.vars.len())
            .map(|v| content::data_size(&snap.model, VarId(v)))
            .sum();
        let files = lock(&self.shared.inodes).count();
        reply.statfs(used.div_ceil(4096), 0, 0, files, 0, 4096, 255, 4096);
    }
}

/// After a read that continued the previous one, loads the chunks that come next into the
/// cache in the background, a window of `readahead` bytes ahead of the reader.
fn maybe_prefetch(sh: &Arc<Shared>, handle: &Arc<Handle>, var: VarId, offset: u64, end: u64) {
    let ds = &handle.snap.model;
    let esz = ds.var(var).element_size() as u64;
    let window = sh.opts.readahead.min(sh.opts.cache_bytes as u64 / 4) / esz.max(1);
    if window == 0 || esz == 0 {
        return;
    }
    let total: u64 = ds.var_shape(var).iter().product();
    let next = end.div_ceil(esz);
    let range = {
        let mut seq = lock(&handle.seq);
        let sequential = seq.0 == offset;
        seq.0 = end;
        if !sequential || next + window / 2 < seq.1 {
            return;
        }
        let lo = next.max(seq.1);
        let hi = next.saturating_add(window).min(total);
        seq.1 = hi;
        (lo, hi)
    };
    if range.0 < range.1 {
        let snap_handle = Arc::clone(handle);
        rayon::spawn(move || prefetch(&snap_handle.snap, var, range.0, range.1));
    }
}
