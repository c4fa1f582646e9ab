//! Where a new dataset goes: staging it beside its final place, and the
//! checks that refuse to replace anything but a dataset.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::claim::ClaimedPrefix;
use super::{CreateOptions, DatasetWriter};
use crate::interrupt;
use crate::location::{Location, Storage};
use crate::model::Dataset;
use crate::zmap::{WriterLock, ZMap};
use crate::{Error, Result};

/// A dataset being built beside its final place, published by a rename when complete, so
/// that nobody ever sees a half-written dataset at the final location.
#[derive(Debug)]
pub struct Staging {
    /// Where the dataset is written first (the final location itself for S3 and memory).
    pub temp: Location,
    /// Where it goes.
    pub target: Location,
    /// The object-store prefix claimed for the dataset, through which it is written: a
    /// failure or a signal deletes what was written there.
    claimed: Option<Arc<ClaimedPrefix>>,
    /// The deletion of the claimed prefix's objects by a signal.
    _withdraw_on_signal: Option<interrupt::RegisteredCleanup>,
    /// A local staging path, removed if a signal ends the process before it is published.
    _on_signal: Option<interrupt::Registered>,
    /// The writer lock of the local dataset to be replaced, held from before the new one is
    /// made until it is in place: a `rw` mount or a `put` of it would otherwise go on
    /// writing the new dataset from its view of the old one.
    _replaced: Option<WriterLock>,
}

impl Staging {
    /// Plans the staging of `target`: a hidden sibling `.NAME.nczarrfs-PID.TOKEN` for local
    /// storage (NAME shortened when it is long, see
    /// [`crate::zmap::temp_files::name_stem`]), TOKEN random so that no one can put anything
    /// at its name beforehand; it is
    /// made by [`Staging::create_writer`], which refuses anything found there. A local target that exists must be
    /// a dataset (or an empty directory, or a zip archive): nothing else is ever replaced.
    pub fn new(target: &Location) -> Result<Staging> {
        // `ds.file/../ds.file` names the dataset through itself: moving it aside would take
        // the way to its own place along. A symbolic link is written through, as ncgen writes
        // through one: the new dataset replaces what it points to, and the link stays.
        let mut target = target.clone();
        target.storage = match target.storage {
            Storage::File(p) => {
                Storage::File(through_real_parent(&crate::zmap::through_links(&p)?))
            }
            Storage::Zip(p) => Storage::Zip(through_real_parent(&crate::zmap::through_links(&p)?)),
            other => other,
        };
        let target = &target;
        check_replaceable(target)?;
        let mut replaced = None;
        if let Storage::File(p) | Storage::Zip(p) = &target.storage {
            check_can_create(p)?;
            if p.exists() {
                replaced = Some(WriterLock::acquire(p)?);
            }
        }
        let claimed = match &target.storage {
            Storage::S3(s3) => Some(ClaimedPrefix::claim(target, s3)?),
            _ => None,
        };
        let sibling = |p: &Path| -> PathBuf {
            let mut name = std::ffi::OsString::from(".");
            name.push(crate::zmap::temp_files::name_stem(
                p.file_name().unwrap_or("dataset".as_ref()),
            ));
            name.push(format!(
                ".nczarrfs-{}.{}",
                std::process::id(),
                crate::zmap::temp_files::random_token()
            ));
            p.with_file_name(name)
        };
        let storage = match &target.storage {
            Storage::File(p) => Storage::File(sibling(p)),
            Storage::Zip(p) => Storage::Zip(sibling(p)),
            other => other.clone(),
        };
        let temp = Location {
            original: target.original.clone(),
            storage,
            mode: target.mode.clone(),
        };
        if temp != *target {
            remove_stale_staging(target);
        }
        let on_signal = match &temp.storage {
            Storage::File(p) | Storage::Zip(p) if temp != *target => Some(interrupt::register(p)),
            _ => None,
        };
        Ok(Staging {
            temp,
            target: target.clone(),
            _withdraw_on_signal: claimed.as_ref().map(ClaimedPrefix::withdraw_on_signals),
            claimed,
            _on_signal: on_signal,
            _replaced: replaced,
        })
    }

    /// Creates the new dataset, holding `model`, where it is staged.
    pub fn create_writer(&self, opts: CreateOptions, model: Dataset) -> Result<DatasetWriter> {
        match &self.claimed {
            Some(claimed) => {
                let map: Arc<dyn ZMap> = Arc::clone(claimed) as Arc<dyn ZMap>;
                DatasetWriter::create_in(&self.temp, map, opts, model)
            }
            // The staging path is new, made by this process: nothing another user put at
            // its name (they may write to its directory) is followed or written into.
            None if self.temp != self.target => {
                let map = crate::zmap::open_new(&self.temp)?;
                DatasetWriter::create_in(&self.temp, map, opts, model)
            }
            None => DatasetWriter::create_with(&self.temp, opts, model),
        }
    }

    /// Moves the finished dataset into place, replacing what was there. If that fails, the
    /// old dataset stays and the new one is removed.
    pub fn publish(self) -> Result<()> {
        let result = interrupt::while_publishing(|| self.move_into_place());
        if result.is_err() {
            self.abandon();
        }
        result
    }

    fn move_into_place(&self) -> Result<()> {
        if let Some(claimed) = &self.claimed {
            claimed.keep();
            return Ok(());
        }
        let (from, to) = match (&self.temp.storage, &self.target.storage) {
            (Storage::File(a), Storage::File(b)) | (Storage::Zip(a), Storage::Zip(b)) => (a, b),
            _ => return Ok(()),
        };
        if from == to {
            return Ok(());
        }
        if !to.is_dir() {
            return std::fs::rename(from, to).map_err(|e| Error::io(to, e));
        }
        // A directory cannot be replaced by rename: move the old one aside first.
        let mut old = from.clone().into_os_string();
        old.push(".old");
        let old = PathBuf::from(old);
        std::fs::rename(to, &old).map_err(|e| Error::io(to, e))?;
        if let Err(e) = std::fs::rename(from, to) {
            if let Err(back) = std::fs::rename(&old, to) {
                log::error!(
                    "could not move {} back to {}: {back}",
                    old.display(),
                    to.display()
                );
            }
            return Err(Error::io(to, e));
        }
        std::fs::remove_dir_all(&old).map_err(|e| Error::io(&old, e))
    }

    /// Removes the temporary dataset (after a failure), or on an object store the objects
    /// this process wrote under the prefix.
    pub fn abandon(self) {
        // A signal's clean-up may have cut the writing short: the signal ends the process.
        interrupt::wait_if_ending();
        if let Some(claimed) = &self.claimed {
            claimed.withdraw();
            return;
        }
        if self.temp != self.target {
            if let Err(e) = remove_storage(&self.temp) {
                log::warn!("could not remove {}: {e}", describe(&self.temp));
            }
        }
    }
}

/// Removes the staging siblings of `target` (`.NAME.nczarrfs-PID.TOKEN`, NAME as
/// [`crate::zmap::temp_files::name_stem`] shortens it) left by processes that no longer run
/// (killed by SIGKILL, or by a crash), which nothing else would remove. A
/// sibling `….old` is kept: it may be the only copy of a dataset whose replacement was cut
/// short.
fn remove_stale_staging(target: &Location) {
    let (Storage::File(path) | Storage::Zip(path)) = &target.storage else {
        return;
    };
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return;
    };
    let stem = crate::zmap::temp_files::name_stem(name);
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(pid) = interrupt::staging_sibling(&file_name)
            .filter(|(of, _)| *of == stem)
            .and_then(|(_, pid)| libc::pid_t::try_from(pid).ok())
            .filter(|pid| *pid > 0)
        else {
            continue;
        };
        // SAFETY: signal 0 only asks whether the process exists.
        let gone = unsafe { libc::kill(pid, 0) } != 0
            && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
        if !gone {
            continue;
        }
        let stale = entry.path();
        log::info!("removing {}, left by process {pid}", stale.display());
        let removed = match entry.file_type().is_ok_and(|t| t.is_dir()) {
            true => std::fs::remove_dir_all(&stale),
            false => std::fs::remove_file(&stale),
        };
        if let Err(e) = removed {
            log::warn!("could not remove {}: {e}", stale.display());
        }
    }
}

fn describe(location: &Location) -> String {
    match &location.storage {
        Storage::File(p) | Storage::Zip(p) => p.display().to_string(),
        _ => location.shown().into_owned(),
    }
}

/// Refuses, before any work is done, a local destination whose directory cannot take new
/// entries (missing, not a directory, not writable, a read-only filesystem): the dataset is
/// staged there, and the failure would otherwise come at the end of a copy, naming the
/// staging path.
fn check_can_create(path: &Path) -> Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // access(2) on a regular file answers for the file (EACCES for X_OK on one not
    // executable), where creating an entry under it fails with ENOTDIR.
    if std::fs::metadata(dir).is_ok_and(|m| !m.is_dir()) {
        return Err(Error::io(
            path,
            std::io::Error::from_raw_os_error(libc::ENOTDIR),
        ));
    }
    let Ok(c_dir) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else {
        return Err(Error::Invalid(format!(
            "{}: a NUL byte in the path",
            path.display()
        )));
    };
    // SAFETY: access reads the NUL-terminated path and touches no other memory.
    if unsafe { libc::access(c_dir.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(Error::io(path, std::io::Error::last_os_error()));
    }
    Ok(())
}

/// `path` with its parent directory resolved (no `..`, no symbolic link on the way), if it
/// exists.
fn through_real_parent(path: &Path) -> PathBuf {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        return path.to_path_buf();
    };
    let parent = match parent.as_os_str().is_empty() {
        true => Path::new("."),
        false => parent,
    };
    std::fs::canonicalize(parent).map_or_else(|_| path.to_path_buf(), |dir| dir.join(name))
}

/// Refuses a local `target` that exists but is not something a new dataset may replace: a
/// Zarr dataset's directory (or an empty one) for directory storage, a zip archive for zip
/// storage. A user's other files are never deleted by `gen` or `copy`.
fn check_replaceable(target: &Location) -> Result<()> {
    let (path, zip) = match &target.storage {
        Storage::File(p) => (p, false),
        Storage::Zip(p) => (p, true),
        _ => return Ok(()),
    };
    let refuse = |why: &str| {
        Err(Error::Invalid(format!(
            "{} {why}; it is not replaced (remove it or choose another name)",
            path.display()
        )))
    };
    if path.file_name().is_none() {
        return Err(Error::Invalid(format!(
            "{}: a dataset's path must end in its name",
            path.display()
        )));
    }
    check_outside_datasets(path)?;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    let meta = match meta.file_type().is_symlink() {
        true => std::fs::metadata(path).map_err(|e| Error::io(path, e))?,
        false => meta,
    };
    if meta.is_dir() && is_mount_point(path, &meta) {
        return refuse(
            "is a mount point, which a new dataset cannot replace (it is moved into place by \
             a rename); write it inside",
        );
    }
    match (zip, meta.is_dir()) {
        (true, true) => refuse("is a directory, not a zip archive"),
        (true, false) => match crate::zmap::looks_like_zip(path) || meta.len() == 0 {
            true => Ok(()),
            false => refuse("exists and is not a zip archive"),
        },
        // A user who names a `.zip` asks for an archive, not a directory store.
        (false, false)
            if path
                .extension()
                .is_some_and(|e| e.eq_ignore_ascii_case("zip")) =>
        {
            refuse("exists and is not a zip archive")
        }
        (false, false) => refuse("exists and is not a directory"),
        (false, true) => match zarr_node(path) {
            Some(ZarrNode::Group) => Ok(()),
            // `dump` does not open an array as a dataset, and it is a variable of one.
            Some(ZarrNode::Array) => {
                refuse("is a Zarr array (a variable's directory), not a dataset")
            }
            None => {
                let mut entries = std::fs::read_dir(path).map_err(|e| Error::io(path, e))?;
                match entries.next().is_none() {
                    true => Ok(()),
                    false => refuse("exists and is not a Zarr dataset"),
                }
            }
        },
    }
}

/// Whether the directory `path` (with metadata `meta`) is where a filesystem is mounted: on
/// another device than its parent, or the root. A bind mount of the same filesystem is not
/// seen; its rename fails with "Device or resource busy", after the copy is made.
fn is_mount_point(path: &Path, meta: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    match std::fs::metadata(path.join("..")) {
        Ok(parent) => parent.dev() != meta.dev() || parent.ino() == meta.ino(),
        Err(_) => false,
    }
}

/// What a directory holds as a Zarr node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ZarrNode {
    /// A group, the root of a dataset or one of its groups.
    Group,
    /// An array: a variable of a dataset.
    Array,
}

/// The Zarr node whose metadata `dir` holds, if any (`.zarray` wins over `.zgroup`, as an
/// array's directory is never a dataset to replace).
fn zarr_node(dir: &Path) -> Option<ZarrNode> {
    if dir.join(".zarray").exists() {
        return Some(ZarrNode::Array);
    }
    if let Ok(text) = std::fs::read(dir.join("zarr.json")) {
        let node_type = serde_json::from_slice::<Value>(&text).ok().and_then(|v| {
            v.get("node_type")
                .and_then(Value::as_str)
                .map(str::to_owned)
        });
        return Some(match node_type.as_deref() {
            Some("array") => ZarrNode::Array,
            _ => ZarrNode::Group,
        });
    }
    [".zgroup", ".zmetadata", ".nczarr"]
        .iter()
        .any(|m| dir.join(m).exists())
        .then_some(ZarrNode::Group)
}

/// Refuses a local destination inside a Zarr dataset (one of its directories holds Zarr
/// metadata): the new dataset would become a group of that one, or, replacing one of its
/// arrays or groups, destroy part of it. This covers a destination inside a copy's own
/// source.
fn check_outside_datasets(path: &Path) -> Result<()> {
    let parent = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // A missing parent is reported where the destination is created.
    let Ok(parent) = std::fs::canonicalize(parent) else {
        return Ok(());
    };
    for dir in parent.ancestors() {
        if let Some(node) = zarr_node(dir) {
            let what = match node {
                ZarrNode::Group => "dataset (or group)",
                ZarrNode::Array => "array",
            };
            return Err(Error::Invalid(format!(
                "{} is inside the Zarr {what} {}, which writing there would change; nothing \
                 is written (choose a destination outside it)",
                path.display(),
                dir.display()
            )));
        }
    }
    Ok(())
}

/// Removes a local dataset's directory or archive, if present.
fn remove_storage(location: &Location) -> Result<()> {
    let p = match &location.storage {
        Storage::File(p) | Storage::Zip(p) => p,
        _ => return Ok(()),
    };
    let r = if p.is_dir() {
        std::fs::remove_dir_all(p)
    } else {
        std::fs::remove_file(p)
    };
    match r {
        Err(e)
            if !matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            Err(Error::io(p, e))
        }
        _ => Ok(()),
    }
}
