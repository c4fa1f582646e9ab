//! [`DatasetWriter`]: a dataset open for writing, its definitions, values and durability.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use crate::chunk::{ChunkEngine, FailedWrite, Hyperslab};
use crate::codec::netcdf_element_size;
use crate::location::{Format, Location, Storage};
use crate::meta::writer::{
    default_dtype, metadata_objects, text_after_nul, text_cut_at_nul, write_changed_metadata,
    Dialect, StoredMetadata,
};
use crate::meta::writer_v3;
use crate::model::{
    AttrValue, Attribute, ByteOrder, ChunkKeyEncoding, ChunkOrder, CodecSpec, Dataset, DimId,
    DtypeKind, GroupId, NcType, NczarrLayout, VarId, VarStorage, Variable,
};
use crate::zmap::{join_key, ZMap};
use crate::{meta, zmap, Error, Result};

use super::codecs::{check_numcodecs_chain, for_netcdf_c, string_shuffle, without_shuffle};
use super::{
    check_attr_name, check_attr_not_reserved, check_key_name, check_key_names, check_name,
    check_storable, complete_chunks, default_chunks, AttrTarget, Codecs, CreateOptions, Fill,
    VarOptions, NETCDF_MAXSTRLEN, WRITER_CACHE_BYTES,
};

/// What [`DatasetWriter::grow_dim_for_write`] changed: a dimension's length before, and the
/// stored shapes of the variables on it.
#[derive(Debug)]
pub struct Growth {
    dim: DimId,
    len: u64,
    shapes: Vec<(VarId, Vec<u64>)>,
    meta_dirty: bool,
}

/// A dataset open for writing.
#[derive(Debug)]
pub struct DatasetWriter {
    location: Location,
    pub(super) map: Arc<dyn ZMap>,
    pub(super) model: Dataset,
    pub(super) engine: ChunkEngine,
    opts: CreateOptions,
    /// Variables that are stored, or hold values (their fill value and dtype are fixed); a
    /// lock of its own, since writes within the shape need only shared access.
    has_data: Mutex<HashSet<VarId>>,
    meta_dirty: bool,
    /// What the metadata objects stored are, so that a sync stores only those that changed.
    stored_meta: StoredMetadata,
    /// The unlimited dimensions as the writer found them stored, with their lengths, until it
    /// first grows them: the variables then on them may hold values past that length that
    /// another writer stored but never recorded (see [`DatasetWriter::grow_dim`]).
    stored_lengths: HashMap<DimId, u64>,
    /// How many variables the writer found stored (the first ones of the model).
    stored_vars: usize,
}

impl DatasetWriter {
    /// Creates an empty dataset at `location`; refuses a location that already holds one.
    /// The root group's metadata is written at once, so the new dataset opens right away.
    pub fn create(location: &Location, opts: CreateOptions) -> Result<DatasetWriter> {
        Self::create_with(location, opts, Dataset::new())
    }

    /// Creates a dataset at `location` holding `model`'s groups, dimensions, variables and
    /// attributes. Each variable's storage is completed: its key from its group path, its
    /// dtype from its type and the dialect (keeping a big-endian order), its shape from its
    /// dimensions, netcdf-c's default chunks unless valid ones are given (those of a
    /// variable defined before any record is written, as ncgen and nccopy define theirs).
    /// Codecs and fill values are kept as given.
    pub fn create_with(
        location: &Location,
        opts: CreateOptions,
        model: Dataset,
    ) -> Result<DatasetWriter> {
        Self::create_in(location, zmap::open(location, true)?, opts, model)
    }

    /// Like [`DatasetWriter::create_with`], writing through `map`, the storage of `location`.
    pub fn create_in(
        location: &Location,
        map: Arc<dyn ZMap>,
        opts: CreateOptions,
        model: Dataset,
    ) -> Result<DatasetWriter> {
        check_key_names(&model, opts.zarr_version)?;
        if map.exists(".zgroup")?
            || map.exists(".zarray")?
            || map.exists(".nczarr")?
            || map.exists("zarr.json")?
        {
            return Err(Error::NotPermitted(format!(
                "{} already holds a dataset",
                location.shown()
            )));
        }
        let mut w = DatasetWriter {
            location: location.clone(),
            engine: ChunkEngine::new(Arc::clone(&map), WRITER_CACHE_BYTES),
            map,
            model,
            opts,
            has_data: Mutex::new(HashSet::new()),
            meta_dirty: true,
            stored_meta: StoredMetadata::nothing(),
            stored_lengths: HashMap::new(),
            stored_vars: 0,
        };
        for i in 0..w.model.vars.len() {
            w.complete_storage(VarId(i), true)?;
        }
        w.check_paths_storable(Dataset::ROOT)?;
        w.warn_every_text_after_nul();
        w.write_meta()?;
        w.map.flush()?;
        Ok(w)
    }

    /// Opens an existing dataset for writing (a `rw` mount, appending records).
    pub fn open(location: &Location) -> Result<DatasetWriter> {
        Self::open_with_cache(location, WRITER_CACHE_BYTES)
    }

    /// Like [`DatasetWriter::open`], with a chunk cache of `cache_bytes` (changed chunks wait
    /// there until a flush or until the cache needs room).
    pub fn open_with_cache(location: &Location, cache_bytes: usize) -> Result<DatasetWriter> {
        // A missing dataset is told as `get` and `dump` tell it, not as an empty store (a
        // writable map may be missing until its first object).
        if let Storage::File(p) | Storage::Zip(p) = &location.storage {
            std::fs::metadata(p).map_err(|e| Error::io(p, e))?;
        }
        Self::open_in(location, zmap::open(location, true)?, cache_bytes)
    }

    /// Like [`DatasetWriter::open_with_cache`], writing through `map`, the storage of
    /// `location`.
    pub fn open_in(
        location: &Location,
        map: Arc<dyn ZMap>,
        cache_bytes: usize,
    ) -> Result<DatasetWriter> {
        map.claim_writer()?;
        // What the open reads is what the first rewrite compares the metadata with.
        let recorder = meta::stored::ReadRecorder::new(map.as_ref());
        let reading: &dyn ZMap = &recorder;
        let model = meta::read_stored_objects(reading, &location.mode)?;
        // The model holds no metadata of a variable it cannot read (a complex or datetime
        // array), so rewriting the metadata would replace that variable's with a byte array's.
        // One unreadable only for an unknown codec keeps its chain as stored.
        let lost = |v: &Variable| {
            v.storage.unreadable.is_some()
                && crate::codec::unknown_codec(&v.storage.codecs).is_none()
        };
        if let Some(v) = (0..model.vars.len())
            .map(VarId)
            .find(|v| lost(model.var(*v)))
        {
            return Err(Error::Unsupported(format!(
                "{} cannot be opened for writing: variable {} is not supported ({}), and \
                 rewriting the metadata would lose its description; open it read-only",
                map.describe(),
                model.var_fqn(v),
                model
                    .var(v)
                    .storage
                    .unreadable
                    .as_deref()
                    .unwrap_or_default()
            )));
        }
        let probe = |key: &str| -> Result<bool> {
            Ok(reading
                .get(key)?
                .is_some_and(|b| String::from_utf8_lossy(&b).contains("_nczarr")))
        };
        let v3 = location.mode.zarr_version == Some(3)
            || (location.mode.zarr_version.is_none()
                && !reading.exists(".zgroup")?
                && reading.exists("zarr.json")?);
        let nczarr = match location.mode.format {
            Some(Format::NcZarr) => true,
            Some(Format::Zarr) => false,
            None if v3 => probe("zarr.json")?,
            None => model.provenance.layout.is_some(),
        };
        if let Some((key, surrogate)) = stored_lone_surrogate(reading, &model, v3)? {
            return Err(Error::Unsupported(format!(
                "{} cannot be opened for writing: {} holds \\u{surrogate:04x}, a lone UTF-16 \
                 surrogate (Python's json writes one), which is not Unicode: it reads as \
                 U+FFFD, and rewriting the metadata would store that instead, renaming the \
                 attribute or changing the text that holds it; open it read-only",
                map.describe(),
                crate::error::quoted(&key)
            )));
        }
        let mut opts = CreateOptions::from_mode(&location.mode);
        opts.zarr_version = if v3 { 3 } else { 2 };
        opts.dialect = if nczarr {
            Dialect::NcZarr
        } else {
            Dialect::Zarr
        };
        // The Zarr v3 writer names dimensions in `dimension_names`, never in xarray's
        // `_ARRAY_DIMENSIONS`, so only Zarr v2 asks whether the dataset has them.
        if location.mode.xarray.is_none() {
            opts.xarray = !nczarr || (!v3 && probe_xarray(&recorder, &model)?);
        }
        if nczarr && !v3 {
            opts.layout = model.provenance.layout.unwrap_or_default();
            if opts.layout == NczarrLayout::Objects1 {
                return Err(Error::Unsupported(format!(
                    "{}: writing to an NCZarr 1.0.0 dataset (the layout of netcdf-c 4.8.0), \
                     which nczarrfs does not write: copy it first, and write to the copy",
                    map.describe()
                )));
            }
        }
        opts.nc_properties = model.provenance.ncproperties.clone();
        // A consolidated summary stays, kept up to date with every change of the metadata.
        opts.consolidated = opts.consolidated
            || match v3 {
                true => v3_root_is_consolidated(reading)?,
                false => reading.exists(".zmetadata")?,
            };
        let has_data = (0..model.vars.len()).map(VarId).collect();
        // A writer killed while a flush replaced a group's dimension sizes and its arrays'
        // shapes one after the other leaves them disagreeing, which netcdf-c refuses: the next
        // flush of this writer completes it.
        let meta_dirty = nczarr
            && (0..model.vars.len()).map(VarId).any(|v| {
                let stored = &model.var(v).storage.shape;
                !model.var(v).dims.is_empty() && *stored != model.var_shape(v)
            });
        let stored_lengths = (0..model.dims.len())
            .map(DimId)
            .filter(|d| model.dim(*d).unlimited)
            .map(|d| (d, model.dim(d).len))
            .collect();
        // The open reads the objects, never a consolidated summary (see
        // `meta::read_stored_objects`): a Zarr v2 `.zmetadata` is read by the first rewrite,
        // which replaces it when it differs from what the objects say. Nothing read from a
        // summary is taken for what the objects hold, so a summary left stale by a writer that
        // did not consolidate again (zarr-python editing a `.zattrs`) is made to agree with the
        // objects, as when the first rewrite read every object back. What the open read is
        // trusted until the first rewrite as what was read is trusted after every rewrite:
        // `claim_writer` keeps other writers out meanwhile.
        let unread: &[&str] = if v3 { &[] } else { &[".zmetadata"] };
        let stored_meta = StoredMetadata::read_at_open(recorder.into_stored(), unread);
        let mut w = DatasetWriter {
            location: location.clone(),
            engine: ChunkEngine::new(Arc::clone(&map), cache_bytes),
            map,
            stored_vars: model.vars.len(),
            model,
            opts,
            has_data: Mutex::new(has_data),
            meta_dirty,
            stored_meta,
            stored_lengths,
        };
        w.check_metadata_writable()?;
        w.fill_past_stored_shapes()?;
        // A raw NUL, as nczarrfs wrote it before, or an escaped one from another writer.
        w.warn_every_text_after_nul();
        Ok(w)
    }

    /// Refuses, at the open, a dataset whose metadata this writer would refuse to store (pure
    /// Zarr dimension names that would not read back): every change of the metadata would
    /// fail, and a mount would take changes it then cannot store.
    fn check_metadata_writable(&self) -> Result<()> {
        let wo = self.opts.write_options();
        let objects = match self.opts.zarr_version {
            3 => writer_v3::metadata_objects(&self.model, &wo).map(drop),
            _ => metadata_objects(&self.model, &wo).map(drop),
        };
        objects.map_err(|e| {
            Error::Unsupported(format!(
                "{} cannot be opened for writing: its metadata could not be stored again ({e}); \
                 open it read-only",
                self.map.describe()
            ))
        })
    }

    /// Makes each array that is shorter than an unlimited dimension it lies on (its shape was
    /// not stored, after its chunks and its group's new length were: a writer killed, or a
    /// failed flush) hold fill past its stored shape, and gives it the dimension's length.
    /// Its values end at its stored shape; the next metadata written gives it the dimension's
    /// length, which would otherwise show the chunks of that unfinished write.
    fn fill_past_stored_shapes(&mut self) -> Result<()> {
        for var in (0..self.stored_vars).map(VarId) {
            let v = self.model.var(var);
            let short: Vec<(usize, u64)> = v
                .dims
                .iter()
                .enumerate()
                .filter(|(_, d)| self.model.dim(**d).unlimited)
                .filter_map(|(axis, d)| {
                    let stored = *v.storage.shape.get(axis)?;
                    (stored < self.model.dim(*d).len).then_some((axis, stored))
                })
                .collect();
            if short.is_empty() {
                continue;
            }
            for (axis, stored) in short {
                self.engine.fill_beyond(&self.model, var, axis, stored)?;
            }
            self.model.vars[var.0].storage.shape = self.stored_shape(var);
            self.meta_dirty = true;
        }
        Ok(())
    }

    /// The model as defined so far.
    pub fn model(&self) -> &Dataset {
        &self.model
    }

    /// The chunk engine (reads see unflushed writes).
    pub fn engine(&self) -> &ChunkEngine {
        &self.engine
    }

    /// The storage map.
    pub fn map(&self) -> &Arc<dyn ZMap> {
        &self.map
    }

    /// Where the dataset is.
    pub fn location(&self) -> &Location {
        &self.location
    }

    /// The options the dataset is written with.
    pub fn options(&self) -> &CreateOptions {
        &self.opts
    }

    fn check_free_name(&self, group: GroupId, name: &str, what: &str) -> Result<()> {
        check_name(name)?;
        if what != "dimension" {
            let fqn = self.model.fqn_in(group, name);
            check_key_name(name, &fqn, what, self.opts.zarr_version)?;
        }
        let clash = match what {
            "dimension" => self.model.find_dim_in(group, name).is_some(),
            _ => {
                self.model.find_var_in(group, name).is_some()
                    || self.model.find_group_in(group, name).is_some()
            }
        };
        if clash {
            return Err(Error::NotPermitted(format!(
                "{} already exists",
                self.model.fqn_in(group, name)
            )));
        }
        Ok(())
    }

    /// Adds a subgroup.
    pub fn add_group(&mut self, parent: GroupId, name: &str) -> Result<GroupId> {
        self.check_free_name(parent, name, "group")?;
        self.meta_dirty = true;
        Ok(self.model.add_group(parent, name))
    }

    /// Adds a subgroup and stores the metadata at once; when storing fails, the group is
    /// taken out again, so that the failure does not come back at every later sync (a `rw`
    /// mount's `mkdir`). A group whose objects the storage could not name (nested too
    /// deeply for a directory store) is refused before anything is stored.
    pub fn add_group_stored(&mut self, parent: GroupId, name: &str) -> Result<GroupId> {
        let before = self.model.clone();
        let g = self.add_group(parent, name)?;
        if let Err(e) = self.check_paths_storable(g) {
            self.model = before;
            return Err(e);
        }
        // Objects already there (strays of another program) would be taken for the group's.
        let prefix = self.model.group_path(g).join("/");
        let stray = self
            .map
            .keys_under(&prefix)
            .map(|keys| keys.into_iter().next());
        if !matches!(stray, Ok(None)) {
            self.model = before;
            let stray = stray?.unwrap_or_default();
            return Err(Error::NotPermitted(format!(
                "cannot make group {prefix:?}: storage already holds objects there ({stray:?}) \
                 that are not part of the dataset"
            )));
        }
        if let Err(e) = self.engine.flush() {
            self.model = before;
            self.meta_dirty = true;
            return Err(e);
        }
        if let Err(e) = self.write_meta().and_then(|()| self.map.flush()) {
            self.undo_new_prefix(&prefix, before);
            return Err(e);
        }
        Ok(g)
    }

    /// Refuses ([`Error::PathTooLong`], naming the group or variable) the group `top` or a
    /// group or variable below it whose objects the storage could not store for the length
    /// of their keys: a directory store's file paths are bound by the system's `PATH_MAX`,
    /// and groups nested some two thousand deep pass it. Asked before anything is stored, so
    /// that such a dataset, or a `mkdir` or `mv` on a mount, fails whole and at once rather
    /// than after everything above the deepest group was written. Groups are checked from
    /// the top down, so the one named is the shallowest too deep. The keys checked are each
    /// group's and variable's metadata objects and each variable's last chunk (the longest
    /// chunk key as the variable is now; chunks of records added later are checked as they
    /// are stored).
    fn check_paths_storable(&self, top: GroupId) -> Result<()> {
        let leaf = self.metadata_leaf();
        // Each group's key prefix, made from its parent's: one path walk per group, not
        // one per level above it.
        let mut prefixes = HashMap::from([(top, self.model.group_path(top).join("/"))]);
        for g in self.model.groups_preorder_from(top) {
            let prefix = prefixes.remove(&g).unwrap_or_default();
            self.map
                .check_key_storable(&join_key(&[&prefix, leaf]))
                .map_err(|e| path_too_long_of(e, "group", || self.model.group_fqn(g)))?;
            for &v in &self.model.group(g).vars {
                self.check_var_paths_storable(v)?;
            }
            for &sub in &self.model.group(g).groups {
                let name = &self.model.group(sub).name;
                prefixes.insert(sub, join_key(&[&prefix, name]));
            }
        }
        Ok(())
    }

    /// [`DatasetWriter::check_paths_storable`] of variable `v`: its metadata objects and
    /// its last chunk.
    fn check_var_paths_storable(&self, v: VarId) -> Result<()> {
        let key = &self.model.var(v).storage.key;
        // A variable this program cannot read has no chunk key to tell.
        let chunk = self.engine.last_chunk_key(&self.model, v).ok();
        std::iter::once(join_key(&[key, self.metadata_leaf()]))
            .chain(chunk)
            .try_for_each(|key| self.map.check_key_storable(&key))
            .map_err(|e| path_too_long_of(e, "variable", || self.model.var_fqn(v)))
    }

    /// The longest name of the metadata objects of a group or variable.
    fn metadata_leaf(&self) -> &'static str {
        match self.opts.zarr_version {
            3 => "zarr.json",
            // `.zattrs` and `.zarray` are as long.
            _ => ".zgroup",
        }
    }

    /// Puts the model `before` a failed change back and removes what the change stored
    /// under the prefix `new`, which held nothing before it: a retry would otherwise find
    /// those objects and refuse them as strays, and a reader takes them for a second copy of
    /// the node (pure Zarr lists no child in its parent). The metadata, which the change may
    /// have stored in part (naming `new`), is stored again from `before` first; the objects
    /// are removed whether or not that succeeds (the next sync stores the metadata), and
    /// only those a failed removal left are logged as staying.
    fn undo_new_prefix(&mut self, new: &str, before: Dataset) {
        self.model = before;
        self.meta_dirty = true;
        // Objects were copied and deleted by other means than a rewrite of the metadata.
        self.stored_meta = StoredMetadata::unknown();
        if let Err(e) = self.write_meta() {
            log::warn!(
                "{}: the metadata could not be stored again after a failed change, the next \
                 sync stores it: {e}",
                self.map.describe()
            );
        }
        let removed = self.map.delete(new).and_then(|()| self.map.flush());
        let Err(e) = removed else {
            return;
        };
        match self.map.keys_under(new) {
            Ok(keys) if keys.is_empty() => {}
            Ok(keys) => log::warn!(
                "{}: objects that the failed change stored under {new:?} stay ({}): {e}",
                self.map.describe(),
                keys[0]
            ),
            Err(listing) => log::warn!(
                "{}: objects that the failed change stored under {new:?} may stay ({e}), \
                 they cannot be listed: {listing}",
                self.map.describe()
            ),
        }
    }

    /// Adds a dimension (an unlimited one starts at `len`, usually 0).
    pub fn add_dim(
        &mut self,
        group: GroupId,
        name: &str,
        len: u64,
        unlimited: bool,
    ) -> Result<DimId> {
        self.check_free_name(group, name, "dimension")?;
        self.meta_dirty = true;
        Ok(self.model.add_dim(group, name, len, unlimited))
    }

    /// Adds a variable over dimensions visible from `group`.
    pub fn add_var(
        &mut self,
        group: GroupId,
        name: &str,
        nctype: NcType,
        dims: &[DimId],
        opts: VarOptions,
    ) -> Result<VarId> {
        self.check_free_name(group, name, "variable")?;
        for d in dims {
            let dim = self.model.dims.get(d.0).ok_or_else(|| {
                Error::NotFound(format!("dimension #{} for variable {name}", d.0))
            })?;
            if self.model.find_dim_visible(group, &dim.name) != Some(*d) {
                return Err(Error::NotPermitted(format!(
                    "dimension {} is not visible from {}",
                    self.model.dim_fqn(*d),
                    self.model.group_fqn(group)
                )));
            }
        }
        let string_width = match (nctype, opts.string_width) {
            (NcType::String, 0) => NETCDF_MAXSTRLEN,
            (NcType::String, w) => w,
            _ => 0,
        };
        let mut var = Variable {
            name: name.to_string(),
            group,
            nctype,
            dims: dims.to_vec(),
            string_width,
            attrs: Vec::new(),
            storage: VarStorage {
                chunks: opts.chunks.clone().unwrap_or_default(),
                codecs: opts.codecs.spec(),
                ..VarStorage::default()
            },
        };
        if opts.big_endian {
            let mut dtype = default_dtype(nctype, string_width, self.opts.dialect);
            dtype.order = ByteOrder::Big;
            var.storage.dtype = Some(dtype);
        }
        var.storage.fill_value = match &opts.fill {
            Fill::Default => Some(padded(nctype.default_fill(), var.element_size())),
            Fill::NoFill => None,
            Fill::Value(bytes) => {
                if bytes.len() != var.element_size() {
                    return Err(Error::Invalid(format!(
                        "fill value of {} bytes for {name} (elements of {} bytes)",
                        bytes.len(),
                        var.element_size()
                    )));
                }
                var.attrs.push(Attribute {
                    name: "_FillValue".into(),
                    value: AttrValue::from_native(nctype, bytes),
                });
                Some(bytes.clone())
            }
        };
        if let Some(chunks) = &opts.chunks {
            if chunks.len() != dims.len() || chunks.contains(&0) {
                return Err(Error::Invalid(format!(
                    "chunk sizes {chunks:?} for {name} with {} dimension(s)",
                    dims.len()
                )));
            }
        }
        let id = self.model.add_var(var);
        self.complete_storage(id, false)?;
        self.meta_dirty = true;
        Ok(id)
    }

    /// Fills in a variable's storage description (see [`DatasetWriter::create_with`]).
    /// `before_records`: the variable belongs to a whole dataset being defined, whose records
    /// come after every definition (as ncgen and nccopy define theirs), so its default chunks
    /// are netcdf-c's for unlimited dimensions of length 0, whatever their lengths will be;
    /// a variable added later gets them for the dimensions' current lengths, as netcdf-c's.
    fn complete_storage(&mut self, id: VarId, before_records: bool) -> Result<()> {
        let dialect = self.opts.dialect;
        let shape = self.stored_shape(id);
        let dims: Vec<(u64, bool)> = self
            .model
            .var(id)
            .dims
            .iter()
            .map(|d| (self.model.dim(*d).len, self.model.dim(*d).unlimited))
            .collect();
        let key = {
            let v = self.model.var(id);
            join_key(&[&self.model.group_path(v.group).join("/"), &v.name])
        };
        let fqn = self.model.var_fqn(id);
        let v = &mut self.model.vars[id.0];
        if v.nctype == NcType::String && v.string_width == 0 {
            v.string_width = NETCDF_MAXSTRLEN;
        }
        check_storable(v, &dims)?;
        let mut big =
            v.storage.dtype.as_ref().is_some_and(|d| {
                d.order == ByteOrder::Big && d.size > 1 && d.kind != DtypeKind::Bytes
            });
        let old_layout = matches!(
            self.opts.layout,
            NczarrLayout::UpperCaseKeys | NczarrLayout::LowerCaseKeys
        );
        if big && old_layout && dialect == Dialect::NcZarr {
            // netcdf-c 4.9.0 and 4.9.1 read every chunk as little-endian, whatever the dtype
            // says (4.9.0 writes big-endian variables so), and would read these values swapped.
            log::warn!(
                "{key}: stored little-endian (the values are the same): netcdf-c before 4.9.3 \
                 reads every chunk as little-endian, whatever its dtype says"
            );
            big = false;
        }
        let v3 = self.opts.zarr_version == 3;
        let mut dtype = match &v.storage.dtype {
            // Zarr types netCDF has none for (`bool`, `float16`), which pure Zarr keeps; the
            // engine converts the netCDF type's values (ubyte, float) to them.
            Some(d) if dialect != Dialect::NcZarr && d.netcdf_lacks() => d.clone(),
            _ if v3 => writer_v3::v3_dtype(v.nctype, v.string_width, big),
            _ => default_dtype(v.nctype, v.string_width, dialect),
        };
        if big && dtype.order == ByteOrder::Little {
            dtype.order = ByteOrder::Big;
        }
        let given = !v.dims.is_empty() && v.storage.chunks.len() == v.dims.len();
        let mut chunks = if given && !v.storage.chunks.contains(&0) {
            v.storage.chunks.clone()
        } else if v.dims.is_empty() {
            shape.iter().map(|_| 1).collect()
        } else {
            let defined: Vec<(u64, bool)> = dims
                .iter()
                .map(|&(len, unlimited)| {
                    (if unlimited && before_records { 0 } else { len }, unlimited)
                })
                .collect();
            // netcdf-c sizes a string by its pointer, whatever width the store gives it.
            let esize = crate::codec::netcdf_element_size(v.nctype, dtype.size);
            match given {
                // Some lengths given, a 0 among them (ncgen's `_ChunkSizes = 5, 0`).
                true => complete_chunks(&defined, esize, &v.storage.chunks),
                false => default_chunks(&defined, esize),
            }
        };
        if old_layout && dialect == Dialect::NcZarr {
            // netcdf-c before 4.9.3 refuses the whole dataset when a chunk is longer than its
            // fixed dimension (a record variable's 512 made fixed by `copy -u`, a
            // `_ChunkSizes` from CDL); the values are the same in a chunk that just fits.
            for (chunk, &(len, unlimited)) in chunks.iter_mut().zip(&dims) {
                if !unlimited && *chunk > len.max(1) {
                    log::info!(
                        "{key}: chunk {chunk} along a dimension of length {len} stored as                          {len}: netcdf-c before 4.9.3 reads no chunk longer than its dimension"
                    );
                    *chunk = len.max(1);
                }
            }
        }
        // The engine encodes with the Zarr v2 spelling of a chain (the same bytes); the v3
        // metadata writer spells it the v3 way. A sharded chain stays sharded on Zarr v3,
        // around the inner chain spelled again for this variable's stored type.
        let (mut flat, mut inner) = match &v.storage.codecs {
            CodecSpec::V3(list) => (
                Codecs::from_chain(writer_v3::codecs_v2(list)?).spec(),
                writer_v3::shard_chunk_shape(list).filter(|_| v3),
            ),
            spec => (spec.clone(), None),
        };
        let shard_index = match &v.storage.codecs {
            CodecSpec::V3(list) => writer_v3::ShardIndex::of(list).unwrap_or_default(),
            CodecSpec::V2 { .. } => writer_v3::ShardIndex::default(),
        };
        if v.dims.is_empty() && flat != CodecSpec::default() {
            // As netcdf-c, which stores scalars uncompressed (and cannot open some
            // compressed ones, blosc's).
            log::info!("{key}: a scalar is stored without codecs");
            (flat, inner) = (CodecSpec::default(), None);
        }
        let chunk_elems = inner.as_ref().unwrap_or(&chunks).iter().product::<u64>();
        if v.nctype == NcType::String && !v3 {
            flat = string_shuffle(flat, chunk_elems * dtype.size as u64);
        }
        if v.nctype == NcType::String && v3 {
            // The variable-length values make a stream of any length, which numcodecs
            // refuses to shuffle unless it is a multiple of the element size.
            flat = without_shuffle(flat);
        }
        if dialect == Dialect::NcZarr {
            let element_size = netcdf_element_size(v.nctype, dtype.size);
            flat = for_netcdf_c(&fqn, flat, element_size, self.opts.zarr_version);
        }
        if !(v.nctype == NcType::String && v3) {
            check_numcodecs_chain(&fqn, &flat, chunk_elems * dtype.size as u64, dtype.size)?;
        }
        v.storage.codecs = match inner {
            Some(inner) => writer_v3::sharded(&flat, &dtype, &inner, &shard_index, &fqn)?,
            None => flat,
        };
        if v.nctype == NcType::String && v3 {
            // zarr-python's variable-length `string` (`vlen-utf8`): each value stored as its
            // own UTF-8 bytes, where `fixed_length_utf32` took four bytes per character of
            // the longest. The engine holds values in NUL-padded slots of the string width.
            dtype = crate::model::ZarrDtype {
                order: ByteOrder::NotApplicable,
                kind: DtypeKind::Bytes,
                size: v.string_width,
            };
            v.storage.codecs = writer_v3::vlen_strings(&v.storage.codecs, &dtype, &fqn)?;
        }
        let esize = v.element_size();
        if let Some(f) = &mut v.storage.fill_value {
            f.resize(esize, 0);
        }
        v.storage = VarStorage {
            key,
            dtype: Some(dtype),
            shape,
            chunks,
            order: ChunkOrder::C,
            key_encoding: match v3 {
                true => ChunkKeyEncoding::Default {
                    separator: self.opts.separator.unwrap_or('/'),
                },
                false => ChunkKeyEncoding::V2 {
                    separator: self.opts.separator.unwrap_or('.'),
                },
            },
            fill_value: v.storage.fill_value.take(),
            codecs: std::mem::take(&mut v.storage.codecs),
            unreadable: None,
        };
        Ok(())
    }

    /// The stored shape of a variable: its dimension lengths (`[1]` for an NCZarr scalar,
    /// `[]` for a pure Zarr one).
    fn stored_shape(&self, id: VarId) -> Vec<u64> {
        let shape = self.model.var_shape(id);
        if shape.is_empty() && self.opts.dialect == Dialect::NcZarr && self.opts.zarr_version != 3 {
            vec![1]
        } else {
            shape
        }
    }

    /// Sets or replaces an attribute. `_FillValue` on a variable also sets its fill value
    /// (a variable without fill keeps none), which is only possible before values are written.
    pub fn put_attr(&mut self, target: AttrTarget, name: &str, value: AttrValue) -> Result<()> {
        self.check_attr_writable(target, name)?;
        let for_4_9_0 = self.opts.dialect == Dialect::NcZarr
            && self.opts.zarr_version == 2
            && self.opts.layout == NczarrLayout::UpperCaseKeys;
        if for_4_9_0 && value.nctype() == NcType::String {
            return Err(Error::NotPermitted(format!(
                "{name}: a string attribute, which this dataset's layout (netcdf-c 4.8.1 to 4.9.0) \
                 cannot hold"
            )));
        }
        if self
            .attrs_mut(target)?
            .iter()
            .any(|a| a.name == name && a.value == value)
        {
            // Unchanged (`cp -r` of a mounted dataset onto itself): nothing to refuse.
            return Ok(());
        }
        if let AttrTarget::Var(v) = target {
            if name == "_FillValue" {
                self.set_fill(v, Some(&value))?;
            }
        }
        self.warn_text_after_nul(target, name, &value);
        // The model holds what storage will: a mount shows the attribute as stored.
        let value = match text_cut_at_nul(&value) {
            Some(cut) if self.nczarr_v2() => cut,
            _ => value,
        };
        let attrs = self.attrs_mut(target)?;
        match attrs.iter_mut().find(|a| a.name == name) {
            Some(a) => a.value = value,
            None => attrs.push(Attribute {
                name: name.to_string(),
                value,
            }),
        }
        self.meta_dirty = true;
        Ok(())
    }

    /// Whether attribute `name` of `target` may be written: a new name must be one netCDF
    /// allows ([`check_attr_name`]), but an attribute already held keeps the name it has (a
    /// pure Zarr attribute named `x ` or not in NFC), as its removal and rename do: refusing
    /// its new value would protect nothing, the name being stored already. A name netCDF
    /// reserves stays refused either way.
    pub fn check_attr_writable(&self, target: AttrTarget, name: &str) -> Result<()> {
        let attrs = match target {
            AttrTarget::Group(g) => self.model.groups.get(g.0).map(|g| &g.attrs),
            AttrTarget::Var(v) => self.model.vars.get(v.0).map(|v| &v.attrs),
        };
        if attrs.is_some_and(|attrs| attrs.iter().any(|a| a.name == name)) {
            return check_attr_not_reserved(target, name);
        }
        check_attr_name(target, name)
    }

    /// Whether the dataset is NCZarr in Zarr v2, the one netcdf-c reads, whose text attributes
    /// end at a NUL byte (see [`text_cut_at_nul`]).
    fn nczarr_v2(&self) -> bool {
        self.opts.dialect == Dialect::NcZarr && self.opts.zarr_version == 2
    }

    /// [`DatasetWriter::warn_text_after_nul`] for every attribute of the model.
    fn warn_every_text_after_nul(&self) {
        for (g, group) in self.model.groups.iter().enumerate() {
            for a in &group.attrs {
                self.warn_text_after_nul(AttrTarget::Group(GroupId(g)), &a.name, &a.value);
            }
        }
        for (v, var) in self.model.vars.iter().enumerate() {
            for a in &var.attrs {
                self.warn_text_after_nul(AttrTarget::Var(VarId(v)), &a.name, &a.value);
            }
        }
    }

    /// Warns that the text of attribute `name` of `target` goes on after a NUL byte, where
    /// NCZarr (Zarr v2) stores it cut.
    fn warn_text_after_nul(&self, target: AttrTarget, name: &str, value: &AttrValue) {
        if !self.nczarr_v2() || !text_after_nul(value) {
            return;
        }
        let owner = match target {
            AttrTarget::Group(g) => self.model.group_fqn(g),
            AttrTarget::Var(v) => self.model.var_fqn(v),
        };
        log::warn!(
            "{owner}: attribute {}: the text after its first NUL byte is not stored (when \
             the metadata is written; netcdf-c reads NCZarr text only up to a NUL, and writes \
             it so)",
            crate::error::quoted(name)
        );
    }

    /// Deletes an attribute; deleting a variable's `_FillValue` restores the default fill (a
    /// variable without fill keeps none).
    pub fn del_attr(&mut self, target: AttrTarget, name: &str) -> Result<()> {
        let pos = self
            .attrs_mut(target)?
            .iter()
            .position(|a| a.name == name)
            .ok_or_else(|| Error::NotFound(format!("attribute {name}")))?;
        if let AttrTarget::Var(v) = target {
            if name == "_FillValue" {
                self.set_fill(v, None)?;
            }
        }
        self.attrs_mut(target)?.remove(pos);
        self.meta_dirty = true;
        Ok(())
    }

    /// Renames an attribute (`_FillValue` cannot be renamed: it would change the fill value).
    pub fn rename_attr(&mut self, target: AttrTarget, from: &str, to: &str) -> Result<()> {
        check_attr_name(target, to)?;
        if from == "_FillValue" || to == "_FillValue" {
            return Err(Error::NotPermitted("renaming to or from _FillValue".into()));
        }
        let attrs = self.attrs_mut(target)?;
        if attrs.iter().any(|a| a.name == to) {
            return Err(Error::NotPermitted(format!(
                "attribute {to} already exists"
            )));
        }
        let a = attrs
            .iter_mut()
            .find(|a| a.name == from)
            .ok_or_else(|| Error::NotFound(format!("attribute {from}")))?;
        a.name = to.to_string();
        self.meta_dirty = true;
        Ok(())
    }

    fn attrs_mut(&mut self, target: AttrTarget) -> Result<&mut Vec<Attribute>> {
        match target {
            AttrTarget::Group(g) => self
                .model
                .groups
                .get_mut(g.0)
                .map(|g| &mut g.attrs)
                .ok_or_else(|| Error::NotFound(format!("group #{}", g.0))),
            AttrTarget::Var(v) => self
                .model
                .vars
                .get_mut(v.0)
                .map(|v| &mut v.attrs)
                .ok_or_else(|| Error::NotFound(format!("variable #{}", v.0))),
        }
    }

    fn set_fill(&mut self, v: VarId, value: Option<&AttrValue>) -> Result<()> {
        let fqn = self.model.var_fqn(v);
        if self.has_data_mut().contains(&v) {
            return Err(Error::NotPermitted(format!(
                "{fqn}: the fill value of a variable already in storage cannot change (what \
                 its chunks leave unwritten reads as the old one); copy the dataset to change it"
            )));
        }
        let var = &self.model.vars[v.0];
        let bytes = match value {
            None => padded(var.nctype.default_fill(), var.element_size()),
            Some(value) => {
                if value.nctype() != var.nctype || value.len() != 1 {
                    return Err(Error::Invalid(format!(
                        "{fqn}: _FillValue must be one {} value",
                        var.nctype.cdl_name()
                    )));
                }
                let bytes = attr_to_native(value);
                if var.nctype == NcType::String && bytes.len() > var.string_width {
                    return Err(Error::Invalid(format!(
                        "{fqn}: _FillValue longer than the string width {}",
                        var.string_width
                    )));
                }
                padded(bytes, var.element_size())
            }
        };
        // A variable without fill keeps none: netcdf-c stores its `_FillValue` as an
        // attribute only, and so does a reader of what is written here.
        let storage = &mut self.model.vars[v.0].storage;
        if storage.fill_value.is_some() {
            storage.fill_value = Some(bytes);
        }
        Ok(())
    }

    /// Renames a dimension.
    pub fn rename_dim(&mut self, dim: DimId, to: &str) -> Result<()> {
        let g = self.model.dims.get(dim.0).map(|d| d.group);
        let g = g.ok_or_else(|| Error::NotFound(format!("dimension #{}", dim.0)))?;
        self.check_free_name(g, to, "dimension")?;
        self.model.dims[dim.0].name = to.to_string();
        self.meta_dirty = true;
        Ok(())
    }

    /// Renames a variable: its objects move to the new key.
    pub fn rename_var(&mut self, var: VarId, to: &str) -> Result<()> {
        let g = self.model.vars.get(var.0).map(|v| v.group);
        let g = g.ok_or_else(|| Error::NotFound(format!("variable #{}", var.0)))?;
        self.check_free_name(g, to, "variable")?;
        let old = self.model.var(var).storage.key.clone();
        let new = join_key(&[&self.model.group_path(g).join("/"), to]);
        let before = self.model.clone();
        self.model.vars[var.0].name = to.to_string();
        self.model.vars[var.0].storage.key = new.clone();
        if let Err(e) = self.check_var_paths_storable(var) {
            self.model = before;
            return Err(e);
        }
        self.move_prefix(&old, &new, before)
    }

    /// Renames a group (not the root): everything under it moves to the new key.
    pub fn rename_group(&mut self, group: GroupId, to: &str) -> Result<()> {
        let parent = self
            .model
            .groups
            .get(group.0)
            .ok_or_else(|| Error::NotFound(format!("group #{}", group.0)))?
            .parent
            .ok_or_else(|| Error::NotPermitted("renaming the root group".into()))?;
        self.check_free_name(parent, to, "group")?;
        let old = self.model.group_path(group).join("/");
        let before = self.model.clone();
        self.model.groups[group.0].name = to.to_string();
        let new = self.model.group_path(group).join("/");
        let old_slash = format!("{old}/");
        for v in &mut self.model.vars {
            if let Some(rest) = v.storage.key.strip_prefix(&old_slash) {
                v.storage.key = format!("{new}/{rest}");
            }
        }
        if let Err(e) = self.check_paths_storable(group) {
            self.model = before;
            return Err(e);
        }
        self.move_prefix(&old, &new, before)
    }

    /// Copies every object under `old` to `new`, writes the new metadata and makes it durable
    /// (the storage's flush: a zip archive is rewritten), then deletes the old objects: a
    /// crash in between leaves stray copies, never a dangling reference. Until the new
    /// metadata is durable, a failure puts the model `before` the rename back (its metadata
    /// is then written again: the old objects are all still there) and deletes the copies.
    /// Once it is durable the rename has happened: old objects that cannot be deleted then
    /// stay behind (logged), and the rename succeeds.
    ///
    /// Objects already under `new` (strays of another program, or of a crash) would be taken
    /// for the renamed node's: the rename is then refused, as it is when an object under `old`
    /// has no key to copy it by ([`ZMap::keys_to_move`]).
    fn move_prefix(&mut self, old: &str, new: &str, before: Dataset) -> Result<()> {
        let stray = match self.map.keys_under(new) {
            Ok(keys) => keys.into_iter().next(),
            Err(e) => {
                self.model = before;
                return Err(e);
            }
        };
        if let Some(stray) = stray {
            self.model = before;
            return Err(Error::NotPermitted(format!(
                "cannot rename to {new:?}: storage already holds objects there ({stray:?}) that \
                 are not part of the dataset"
            )));
        }
        if let Err(e) = self.engine.flush() {
            self.model = before;
            self.meta_dirty = true;
            return Err(e);
        }
        // The objects under `new` are copies made here, not by a rewrite of the metadata;
        // what is known of those under `old` goes at the rewrite, which no longer names them.
        self.stored_meta.forget_under(new);
        // Listed before anything is copied: an object that no key names (a file name that is
        // not UTF-8, an S3 key such as `g/a//x`) could be neither copied nor kept when the
        // old prefix is deleted, so the rename is refused with storage as it was.
        let keys = match self
            .engine
            .invalidate(old)
            .and_then(|()| self.map.keys_to_move(old))
        {
            Ok(keys) => keys,
            Err(e) => {
                self.model = before;
                return Err(match e {
                    Error::NotPermitted(why) => {
                        Error::NotPermitted(format!("cannot rename {old:?} to {new:?}: {why}"))
                    }
                    e => e,
                });
            }
        };
        let mut node_objects: Vec<String> = Vec::new();
        let copied = (|| {
            node_objects = keys.iter().filter(|k| is_node_object(k)).cloned().collect();
            for phase in copy_phases(keys) {
                let pairs: Vec<(String, String)> = phase
                    .into_iter()
                    .map(|key| {
                        let renamed = format!("{new}{}", &key[old.len()..]);
                        (key, renamed)
                    })
                    .collect();
                self.map.copy_many(&pairs)?;
            }
            self.meta_dirty = true;
            self.write_meta()?;
            self.map.flush()
        })();
        if let Err(e) = copied {
            self.undo_new_prefix(new, before);
            return Err(e);
        }
        // The objects that make nodes of `old` and of everything under it go first, the
        // shallowest first: a crash while the rest are deleted leaves objects that no reader
        // takes for an array (by its own path either), not one missing some of its chunks.
        let deleted = copy_phases(node_objects)
            .into_iter()
            .rev()
            .try_for_each(|depth| self.map.delete_objects(&depth))
            .and_then(|()| self.map.delete(old))
            .and_then(|()| self.map.flush());
        if let Err(e) = deleted {
            match self.map.keys_under(old) {
                // Deleted, but not made durable (a zip archive not rewritten): the next flush
                // stores it.
                Ok(keys) if keys.is_empty() => log::warn!(
                    "{}: renamed {old:?} to {new:?}; the deletion of the objects under \
                     {old:?} is stored with the next flush: {e}",
                    self.map.describe()
                ),
                _ => log::warn!(
                    "{}: renamed {old:?} to {new:?}, but objects under {old:?} stay (a later \
                     node of that name is refused until they are deleted): {e}",
                    self.map.describe()
                ),
            }
        }
        Ok(())
    }

    /// Sets the length of an unlimited dimension (growing only), updating the stored shape
    /// of every variable that uses it.
    ///
    /// The first growth of a dimension the writer found stored makes the variables on it hold
    /// fill past the length it found (deleting their chunks there, setting that part of a
    /// chunk that straddles it to fill): chunks are stored before the metadata, so a writer
    /// killed or failing in between leaves values past the recorded length, which the new
    /// records would otherwise show where they read as fill.
    pub fn grow_dim(&mut self, dim: DimId, len: u64) -> Result<()> {
        let d = self
            .model
            .dims
            .get(dim.0)
            .ok_or_else(|| Error::NotFound(format!("dimension #{}", dim.0)))?;
        if len <= d.len {
            return Ok(());
        }
        if !d.unlimited {
            return Err(Error::InvalidHyperslab(format!(
                "dimension {} has fixed length {}; cannot grow to {len}",
                self.model.dim_fqn(dim),
                d.len
            )));
        }
        let size_at = |v: &Variable| {
            v.dims.iter().try_fold(v.element_size() as u64, |acc, d| {
                acc.checked_mul(if *d == dim {
                    len
                } else {
                    self.model.dim(*d).len
                })
            })
        };
        if let Some(v) = self
            .model
            .vars
            .iter()
            .filter(|v| v.dims.contains(&dim))
            .find(|v| size_at(v).is_none_or(|bytes| bytes > i64::MAX as u64))
        {
            return Err(Error::TooLarge(format!(
                "{} records of {} would make {} larger than 2^63 bytes",
                len,
                self.model.dim_fqn(dim),
                self.model.fqn_in(v.group, &v.name)
            )));
        }
        if let Some(&stored) = self.stored_lengths.get(&dim) {
            for var in (0..self.stored_vars).map(VarId) {
                let axes = self.model.var(var).dims.iter().enumerate();
                for axis in axes.filter(|(_, d)| **d == dim).map(|(axis, _)| axis) {
                    self.engine.fill_beyond(&self.model, var, axis, stored)?;
                }
            }
            self.stored_lengths.remove(&dim);
        }
        self.model.dims[dim.0].len = len;
        for i in 0..self.model.vars.len() {
            if self.model.vars[i].dims.contains(&dim) {
                self.model.vars[i].storage.shape = self.stored_shape(VarId(i));
            }
        }
        self.meta_dirty = true;
        Ok(())
    }

    /// [`DatasetWriter::grow_dim`] for a write about to be made, returning what it changed
    /// (`None`: the dimension was long enough), for [`DatasetWriter::ungrow`] should the write
    /// fail.
    pub fn grow_dim_for_write(&mut self, dim: DimId, len: u64) -> Result<Option<Growth>> {
        let Some(old) = self.model.dims.get(dim.0).map(|d| d.len) else {
            return Err(Error::NotFound(format!("dimension #{}", dim.0)));
        };
        if len <= old {
            return Ok(None);
        }
        let shapes = (0..self.model.vars.len())
            .map(VarId)
            .filter(|v| self.model.var(*v).dims.contains(&dim))
            .map(|v| (v, self.model.var(v).storage.shape.clone()))
            .collect();
        let meta_dirty = self.meta_dirty;
        self.grow_dim(dim, len)?;
        Ok(Some(Growth {
            dim,
            len: old,
            shapes,
            meta_dirty,
        }))
    }

    /// Takes `growth` back to `len` (at least the length it grew from) after the write it was
    /// made for failed: all of it when the write took no effect, so that the failure changes
    /// nothing, or down to the records that a write taken in part (a short write) reached.
    /// Values past the length taken back are fill: what the growth made them.
    pub fn ungrow(&mut self, growth: Growth, len: u64) {
        let len = len.max(growth.len);
        self.model.dims[growth.dim.0].len = len;
        if len == growth.len {
            for (v, shape) in growth.shapes {
                self.model.vars[v.0].storage.shape = shape;
            }
            self.meta_dirty = growth.meta_dirty;
        } else {
            for (v, _) in growth.shapes {
                self.model.vars[v.0].storage.shape = self.stored_shape(v);
            }
        }
    }

    /// Refuses `data`, values for `slab` of `var`, when the variable's codecs cannot encode
    /// ([`Error::Unencodable`]) or its stored type cannot hold one of them
    /// ([`Error::Unrepresentable`]), so that a caller writing several slabs can check them
    /// all before writing any.
    pub fn check_storable(&self, var: VarId, slab: &Hyperslab, data: &[u8]) -> Result<()> {
        self.engine.check_storable(&self.model, var, slab, data)
    }

    /// Writes `data` (native representation, C order) into `slab` of `var`, growing
    /// unlimited dimensions as needed; writing past a fixed dimension is an error, and so is
    /// a value the stored type cannot hold (nothing is written then, and no dimension grows).
    pub fn write(&mut self, var: VarId, slab: &Hyperslab, data: &[u8]) -> Result<()> {
        self.try_write(var, slab, data).map_err(|f| f.error)
    }

    /// [`DatasetWriter::write`], telling on failure whether the write took effect in part
    /// (see [`ChunkEngine::try_write`]). A write that took no effect leaves the dimensions it
    /// grew as they were: the failure changes nothing.
    pub fn try_write(
        &mut self,
        var: VarId,
        slab: &Hyperslab,
        data: &[u8],
    ) -> std::result::Result<(), FailedWrite> {
        let nothing = |error| FailedWrite {
            error,
            in_part: false,
        };
        let grows = self.growth_needed(var, slab).map_err(nothing)?;
        self.check_storable(var, slab, data).map_err(nothing)?;
        let mut growths = Vec::new();
        for (d, end) in grows {
            match self.grow_dim_for_write(d, end) {
                Ok(g) => growths.extend(g),
                Err(e) => {
                    growths.into_iter().rev().for_each(|g| self.ungrow(g, 0));
                    return Err(nothing(e));
                }
            }
        }
        match self.try_write_within(var, slab, data) {
            Ok(()) => Ok(()),
            Err(failed) if failed.in_part => Err(failed),
            Err(failed) => {
                growths.into_iter().rev().for_each(|g| self.ungrow(g, 0));
                Err(failed)
            }
        }
    }

    /// [`DatasetWriter::try_write`] of a slab within the current shape, which changes no
    /// definition and so needs only shared access: it may run beside reads (other writes
    /// must wait for it, for the read-modify-write of elements written in part). A slab that
    /// would grow a dimension is refused, having changed nothing.
    pub fn try_write_within(
        &self,
        var: VarId,
        slab: &Hyperslab,
        data: &[u8],
    ) -> std::result::Result<(), FailedWrite> {
        let nothing = |error| FailedWrite {
            error,
            in_part: false,
        };
        if let Some((d, end)) = self.growth_needed(var, slab).map_err(nothing)?.first() {
            return Err(nothing(Error::InvalidHyperslab(format!(
                "write to {} up to index {} beyond dimension {} of length {}",
                self.model.var_fqn(var),
                end - 1,
                self.model.dim_fqn(*d),
                self.model.dim(*d).len
            ))));
        }
        let written = self.engine.try_write(&self.model, var, slab, data);
        if written.as_ref().map_or_else(|f| f.in_part, |()| true) {
            self.has_data
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(var);
        }
        written
    }

    /// Whether writes within the shape ([`DatasetWriter::try_write_within`]) may run beside
    /// reads of the dataset. Not with a sharded array: storing its changed inner chunks
    /// rewrites a whole shard, index included, which a reader could see half old, half new.
    pub fn writes_beside_reads(&self) -> Result<bool> {
        for v in 0..self.model.vars.len() {
            if self.engine.sharded(&self.model, VarId(v))? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    fn has_data_mut(&mut self) -> &mut HashSet<VarId> {
        self.has_data.get_mut().unwrap_or_else(|e| e.into_inner())
    }

    /// The unlimited dimensions a write of `slab` of `var` makes longer, with their new
    /// lengths; a slab past a fixed dimension is refused.
    fn growth_needed(&self, var: VarId, slab: &Hyperslab) -> Result<Vec<(DimId, u64)>> {
        let v = self
            .model
            .vars
            .get(var.0)
            .ok_or_else(|| Error::NotFound(format!("variable #{}", var.0)))?;
        let dims = &v.dims;
        if slab.start.len() != dims.len()
            || slab.count.len() != dims.len()
            || slab.stride.len() != dims.len()
        {
            return Err(Error::InvalidHyperslab(format!(
                "{} dimension(s) in a hyperslab of {}",
                slab.start.len(),
                self.model.var_fqn(var)
            )));
        }
        let mut grows = Vec::new();
        for (i, d) in dims.iter().enumerate() {
            if slab.count[i] == 0 {
                continue;
            }
            let end = slab.stride[i]
                .checked_mul(slab.count[i] - 1)
                .and_then(|x| x.checked_add(slab.start[i]))
                .and_then(|x| x.checked_add(1))
                .ok_or_else(|| Error::InvalidHyperslab("hyperslab overflows".into()))?;
            if end > self.model.dim(*d).len {
                if !self.model.dim(*d).unlimited {
                    return Err(Error::InvalidHyperslab(format!(
                        "write to {} up to index {} beyond dimension {} of length {}",
                        self.model.var_fqn(var),
                        end - 1,
                        self.model.dim_fqn(*d),
                        self.model.dim(*d).len
                    )));
                }
                grows.push((*d, end));
            }
        }
        Ok(grows)
    }

    /// One element of `var` as its unwritten places read (see [`ChunkEngine::fill_element`]).
    pub fn fill_element(&self, var: VarId) -> Result<Vec<u8>> {
        self.engine.fill_element(&self.model, var)
    }

    /// Reads `slab` of `var` (seeing unflushed writes).
    pub fn read(&self, var: VarId, slab: &Hyperslab, out: &mut [u8]) -> Result<()> {
        self.engine.read(&self.model, var, slab, out)
    }

    pub(super) fn write_meta(&mut self) -> Result<()> {
        let wo = self.opts.write_options();
        let stored = &mut self.stored_meta;
        if self.opts.zarr_version == 3 {
            writer_v3::write_changed_metadata(self.map.as_ref(), &self.model, &wo, stored)?;
        } else {
            write_changed_metadata(self.map.as_ref(), &self.model, &wo, stored)?;
        }
        self.meta_dirty = false;
        Ok(())
    }

    /// Makes a change of the definitions with `change` and stores everything at once
    /// ([`DatasetWriter::sync`]); when either fails, the definitions are put back as they were
    /// before the change (and stored so by the next sync), so that a failed `rm` or `mv` of an
    /// attribute changes nothing.
    pub fn change_and_sync<R>(&mut self, change: impl FnOnce(&mut Self) -> Result<R>) -> Result<R> {
        let before = self.model.clone();
        let result = change(self).and_then(|r| self.sync().map(|()| r));
        if result.is_err() && self.model != before {
            self.model = before;
            self.meta_dirty = true;
        }
        result
    }

    /// Makes everything durable: dirty chunks first, then the metadata, then the map's own
    /// flush (a zip archive is rewritten here).
    pub fn sync(&mut self) -> Result<()> {
        self.engine.flush()?;
        let rest = if self.meta_dirty {
            self.write_meta()
        } else {
            Ok(())
        }
        .and_then(|()| self.map.flush());
        if let Err(e) = &rest {
            // Paced as a failed chunk store is, so that a burst of closes of attribute files
            // does not wait on a silent server once each.
            self.engine.store_failed(e);
        }
        rest
    }

    /// Whether the model changed since the metadata was last stored (a mount shows this
    /// as pending work).
    pub fn metadata_dirty(&self) -> bool {
        self.meta_dirty
    }

    /// Syncs and closes.
    pub fn close(mut self) -> Result<()> {
        self.sync()
    }
}

/// A key's [`Error::PathTooLong`] as that of the group or variable (`what`) whose key it
/// is, named by `name`; other errors as they are.
fn path_too_long_of(e: Error, what: &'static str, name: impl FnOnce() -> String) -> Error {
    match e {
        Error::PathTooLong { reason, .. } => Error::PathTooLong {
            what,
            name: name(),
            reason,
        },
        other => other,
    }
}

/// The first stored metadata object of `model` that holds a lone UTF-16 surrogate escape
/// (`\ud800`), with that surrogate: it reads as U+FFFD, which a rewrite would store in its
/// place. Only the objects of groups and variables with a U+FFFD in an attribute (name or
/// text) or a dimension name are read again, and then the consolidated summary.
fn stored_lone_surrogate(
    map: &dyn ZMap,
    model: &Dataset,
    v3: bool,
) -> Result<Option<(String, u32)>> {
    const REPLACEMENT: &[u8] = "\u{FFFD}".as_bytes();
    let replaced = |text: &[u8]| text.windows(REPLACEMENT.len()).any(|w| w == REPLACEMENT);
    let attrs_replaced = |attrs: &[Attribute]| {
        attrs.iter().any(|a| {
            replaced(a.name.as_bytes())
                || match &a.value {
                    AttrValue::Char(text) => replaced(text),
                    AttrValue::Str(texts) => texts.iter().any(|t| replaced(t.as_bytes())),
                    _ => false,
                }
        })
    };
    let own = if v3 { "zarr.json" } else { ".zattrs" };
    let mut keys = Vec::new();
    for g in (0..model.groups.len()).map(GroupId) {
        if attrs_replaced(&model.group(g).attrs) {
            keys.push(join_key(&[&model.group_path(g).join("/"), own]));
        }
    }
    for v in &model.vars {
        let dims_replaced = v
            .dims
            .iter()
            .any(|d| replaced(model.dim(*d).name.as_bytes()));
        if attrs_replaced(&v.attrs) || dims_replaced {
            keys.push(join_key(&[&v.storage.key, own]));
        }
    }
    if keys.is_empty() {
        return Ok(None);
    }
    keys.push(if v3 { "zarr.json" } else { ".zmetadata" }.to_string());
    for (key, found) in keys.iter().zip(map.get_many(&keys)) {
        if let Some(surrogate) = found?.as_deref().and_then(meta::json::lone_surrogate) {
            return Ok(Some((key.clone(), surrogate)));
        }
    }
    Ok(None)
}

/// Whether an opened NCZarr dataset carries `_ARRAY_DIMENSIONS` (so rewrites keep it), as the
/// `.zattrs` of its first variable that the open read says.
fn probe_xarray(opened: &meta::stored::ReadRecorder, model: &Dataset) -> Result<bool> {
    let Some(v) = model.vars.first() else {
        return Ok(true);
    };
    let key = join_key(&[&v.storage.key, ".zattrs"]);
    if let Some(names) = opened.names_xarray_dims(&key) {
        return Ok(names);
    }
    Ok(opened
        .get(&key)?
        .is_some_and(|b| meta::stored::names_xarray_dims(&b)))
}

fn padded(mut bytes: Vec<u8>, size: usize) -> Vec<u8> {
    bytes.resize(size, 0);
    bytes
}

/// One attribute value as a native element (the first value; strings as UTF-8 bytes).
pub fn attr_to_native(value: &AttrValue) -> Vec<u8> {
    fn first<T: Copy, const N: usize>(v: &[T], f: impl Fn(T) -> [u8; N]) -> Vec<u8> {
        v.first().map(|x| f(*x).to_vec()).unwrap_or_default()
    }
    match value {
        AttrValue::Byte(v) => first(v, i8::to_le_bytes),
        AttrValue::UByte(v) => first(v, u8::to_le_bytes),
        AttrValue::Short(v) => first(v, i16::to_le_bytes),
        AttrValue::UShort(v) => first(v, u16::to_le_bytes),
        AttrValue::Int(v) => first(v, i32::to_le_bytes),
        AttrValue::UInt(v) => first(v, u32::to_le_bytes),
        AttrValue::Int64(v) => first(v, i64::to_le_bytes),
        AttrValue::UInt64(v) => first(v, u64::to_le_bytes),
        AttrValue::Float(v) => first(v, f32::to_le_bytes),
        AttrValue::Double(v) => first(v, f64::to_le_bytes),
        AttrValue::Char(v) => v.first().map(|c| vec![*c]).unwrap_or_default(),
        AttrValue::Str(v) => v.first().map(|s| s.as_bytes().to_vec()).unwrap_or_default(),
    }
}

/// Whether a Zarr v3 root `zarr.json` holds consolidated metadata (zarr-python 3's inline
/// `consolidated_metadata`, which `null` declares absent). Parsed as the readers parse it,
/// so that the bare `NaN` and `Infinity` zarr-python writes for such attributes are read.
fn v3_root_is_consolidated(map: &dyn ZMap) -> Result<bool> {
    let Some(bytes) = meta::get_metadata(map, "zarr.json")? else {
        return Ok(false);
    };
    let root = meta::json::Json::parse("zarr.json", &bytes)?;
    Ok(root
        .get("consolidated_metadata")
        .is_some_and(|c| !matches!(c, meta::json::Json::Null)))
}

/// The metadata objects whose presence makes a prefix an array or a group, in Zarr v2, v3 and
/// NCZarr 1.0.
const NODE_OBJECTS: [&str; 5] = [".zarray", ".zgroup", "zarr.json", ".nczarray", ".nczgroup"];

/// Whether `key` names one of the [`NODE_OBJECTS`].
fn is_node_object(key: &str) -> bool {
    NODE_OBJECTS.contains(&key.rsplit('/').next().unwrap_or(key))
}

/// The keys of a node in the groups a rename copies them in, one group after the other:
/// chunks and other objects first, then attributes, then the objects that make a node of a
/// prefix, the deepest first. Until the last of them is stored no reader sees the new node,
/// nor a subgroup or array of it with some of its chunks still missing: a crash while copying
/// leaves objects that no reader takes for a node (and that stop a later node of that name,
/// as any stray objects do). Within a group the order does not matter.
fn copy_phases(keys: Vec<String>) -> Vec<Vec<String>> {
    let mut phases: std::collections::BTreeMap<(u8, std::cmp::Reverse<usize>), Vec<String>> =
        std::collections::BTreeMap::new();
    for key in keys {
        let leaf = key.rsplit('/').next().unwrap_or(&key);
        let phase = match leaf {
            _ if is_node_object(&key) => (2, std::cmp::Reverse(key.matches('/').count())),
            ".zattrs" | ".nczattrs" | ".zmetadata" => (1, std::cmp::Reverse(0)),
            _ => (0, std::cmp::Reverse(0)),
        };
        phases.entry(phase).or_default().push(key);
    }
    phases.into_values().collect()
}
