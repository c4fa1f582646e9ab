//! Zarr and NCZarr metadata dialects: reading them into the [`crate::model`] (and, later,
//! writing the model back out).
//!
//! Dialects read (see the spec's NCZarr documents and the fixtures' history):
//! - NCZarr 1.0.0 (netcdf 4.8.0): `.nczarr` superblock object and `.nczgroup`, `.nczarray`,
//!   `.nczattrs` objects beside the Zarr ones ([`Dialect::V1`]);
//! - netcdf 4.8.1–4.9.2: `_NCZARR_*` (later `_nczarr_*`) keys inside `.zgroup` / `.zarray`, the
//!   attribute types inside `.zattrs` ([`Dialect::InObjects`]);
//! - netcdf 4.9.3+: everything as `_nczarr_*` attributes in `.zattrs` ([`Dialect::InAttrs`]);
//! - pure Zarr v2, with or without xarray's `_ARRAY_DIMENSIONS`, optionally consolidated.
//!
//! Each dialect's key spellings (`dims`/`dimensions`, `vars`/`arrays`, `dimrefs`/
//! `dimension_references`, `groups`/`subgroups`) are accepted in all of them.

mod attrs;
mod fill;
pub mod json;
/// A `_FillValue` attribute as one native element of a variable, if it fits its type.
pub(crate) use fill::from_attr as fill_from_attr;

/// The fill value quantization leaves alone in `var` of `ds` (one native element; `None` for
/// netCDF's default): its `_FillValue` attribute, or else, in pure Zarr, the array's own fill
/// value, which netcdf-c takes as the variable's fill where no attribute gives one
/// (`nc_inq_var_fill` of an array xarray or zarr-python wrote with `fill_value: -999` and no
/// `_FillValue` gives -999), so that the elements missing there stay missing. An NCZarr
/// array's `fill_value` without the attribute is netcdf-c's default fill, which it writes
/// rounded (`9.96921e+36`): the exact default is the one left alone, as netcdf-c leaves it
/// in HDF5 files and in the session that created the variable.
pub fn quantize_fill(ds: &Dataset, var: VarId) -> Option<Vec<u8>> {
    let v = ds.var(var);
    match v.attr("_FillValue") {
        Some(a) => fill::from_attr(&a.value, v.nctype, v.element_size()),
        None if ds.provenance.nczarr_major == 0 => v.storage.fill_value.clone(),
        None => None,
    }
}
pub mod stored;
pub(crate) mod v3;
pub mod writer;
pub mod writer_v3;

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};

use crate::error::{capped, quoted};
use crate::location::{Format, Mode};
use crate::model::{
    element_count, Attribute, ByteOrder, ChunkKeyEncoding, ChunkOrder, CodecSpec, Dataset, DimId,
    DtypeKind, GroupId, NcType, NczarrLayout, Provenance, VarId, VarStorage, Variable, ZarrDtype,
};
use crate::zmap::{join_key, ZMap, METADATA_LIMIT};
use crate::{Error, Result};
use json::Json;

/// Below this many objects to read, threads cost more than they save.
const PARALLEL_OPEN_MIN: usize = 64;

/// Reads the dataset's metadata from `map`, detecting the dialect unless `mode` fixes it.
///
/// On an object store every request costs a round trip, so the root objects that can describe
/// the whole dataset are read first and together: `zarr.json` (Zarr v3, maybe with consolidated
/// metadata) and `.zmetadata` (consolidated Zarr v2). A consolidated dataset is then open
/// after that one round trip (one GET when the mode names the Zarr version). When both exist,
/// Zarr v3 wins, as in zarr-python 3.
pub fn read_dataset(map: &dyn ZMap, mode: &Mode) -> Result<Dataset> {
    read(map, mode, true)
}

/// Reads the dataset's metadata from its objects, never from a consolidated summary
/// (`.zmetadata`, a v3 root's `consolidated_metadata`): a writer that changed the objects
/// without consolidating again leaves the summary stale, and a writer of the dataset, which
/// rewrites its metadata from what it read, must start from the objects or it would undo
/// those changes.
pub fn read_stored_objects(map: &dyn ZMap, mode: &Mode) -> Result<Dataset> {
    read(map, mode, false)
}

/// The metadata object at `key`, refused when longer than [`METADATA_LIMIT`].
pub(crate) fn get_metadata(map: &dyn ZMap, key: &str) -> Result<Option<Vec<u8>>> {
    map.get_metadata(key, METADATA_LIMIT)
}

fn read(map: &dyn ZMap, mode: &Mode, summaries: bool) -> Result<Dataset> {
    // Every group's objects are read once, each group's below its parent's.
    let pass = map.for_one_pass();
    let map = pass.as_deref().unwrap_or(map);
    let mut ds = read_model(map, mode, summaries)?;
    mark_unknown_codecs(&mut ds);
    Ok(ds)
}

/// Marks every variable with a codec nczarrfs does not implement as unreadable, naming the
/// codec: none of its chunks can be read or written, and a mount says so in its metadata.
fn mark_unknown_codecs(ds: &mut Dataset) {
    for v in &mut ds.vars {
        let st = &mut v.storage;
        if st.unreadable.is_none() {
            st.unreadable = crate::codec::unknown_codec(&st.codecs)
                .map(|name| Error::UnknownCodec { name }.to_string());
        }
    }
}

fn read_model(map: &dyn ZMap, mode: &Mode, summaries: bool) -> Result<Dataset> {
    let (zarr_json, zmetadata) = match mode.zarr_version {
        Some(3) => (get_metadata(map, "zarr.json")?, None),
        Some(_) if !summaries => (None, None),
        Some(_) => (None, summary(map, get_metadata(map, ".zmetadata"))?),
        None if !summaries => (get_metadata(map, "zarr.json")?, None),
        None => {
            let mut both = map
                .get_many_metadata(
                    &["zarr.json".to_string(), ".zmetadata".to_string()],
                    METADATA_LIMIT,
                )
                .into_iter();
            let mut next = || both.next().unwrap_or(Ok(None));
            let zarr_json = next()?;
            (zarr_json, summary(map, next())?)
        }
    };
    if let Some(bytes) = zarr_json {
        return v3::read_dataset(map, mode, Json::parse("zarr.json", &bytes)?, summaries);
    }
    if mode.zarr_version == Some(3) && map.exists(".zgroup")? {
        return Err(Error::Invalid(format!(
            "{}: the location asks for Zarr v3 (`v3` in #mode=), but this is a Zarr v2 \
             dataset (.zgroup, no zarr.json): leave `v3` out to read it",
            map.describe()
        )));
    }
    let consolidated = match zmetadata {
        Some(bytes) => parse_consolidated(map, &bytes),
        None => None,
    };
    let mut r = Reader {
        map,
        consolidated,
        dialect: Dialect::Pure,
        ds: Dataset::new(),
        pending: Vec::new(),
        fetched: RefCell::new(HashMap::new()),
        parsed: RefCell::new(HashMap::new()),
        from_summary: RefCell::new(HashSet::new()),
    };
    let result = read_v2(map, mode, &mut r);
    let from_summary = r.from_summary.borrow();
    result.map_err(|e| {
        blame_summary(e, &quoted(".zmetadata"), |key| {
            from_summary.contains(key).then(|| key.to_string())
        })
    })
}

/// The metadata objects of Zarr v2 and NCZarr, which a listing of a group shows beside its
/// children.
const METADATA_OBJECTS: [&str; 8] = [
    ".zgroup",
    ".zarray",
    ".zattrs",
    ".zmetadata",
    ".nczarr",
    ".nczgroup",
    ".nczattrs",
    ".nczarray",
];

/// Says that the array or group at `key` is left out: its name begins with `.`, which
/// netcdf-c takes for a hidden object and skips, while zarr-python lists it. Without the
/// message a `copy` would drop it unnoticed.
pub(crate) fn warn_hidden(what: &str, key: &str) {
    log::warn!(
        "ignoring {what} {}: names beginning with \".\" are skipped, as netcdf-c skips them",
        quoted(key)
    );
}

/// `e` about an object whose metadata came from a consolidated summary (`summary` as messages
/// name it; `entry_of` gives the summary's entry for such a key) as an error about that entry: the object itself was not
/// read, and a user who opens it would find nothing wrong.
pub(crate) fn blame_summary(
    e: Error,
    summary: &str,
    entry_of: impl Fn(&str) -> Option<String>,
) -> Error {
    match e {
        Error::InvalidMetadata { key, reason } => match entry_of(&key) {
            Some(entry) => Error::InvalidSummaryEntry {
                summary: summary.to_string(),
                entry,
                reason,
            },
            None => Error::InvalidMetadata { key, reason },
        },
        e => e,
    }
}

/// How a message names the object at `key`: by its key, or as the consolidated summary's
/// entry for it when its metadata came from there.
fn described(key: &str, from_summary: &HashSet<String>) -> String {
    if from_summary.contains(key) {
        format!(".zmetadata (its entry for {})", quoted(key))
    } else {
        key.to_string()
    }
}

/// [`read_model`] of a Zarr v2 or NCZarr dataset, with `r` set up.
fn read_v2(map: &dyn ZMap, mode: &Mode, r: &mut Reader<'_>) -> Result<Dataset> {
    let zgroup = r.load(".zgroup")?;
    let Some(zgroup) = zgroup else {
        return Err(not_a_dataset(map, mode, r)?);
    };
    match zgroup.get("zarr_format") {
        None => {}
        Some(f) if f.as_u64() == Some(2) => {}
        Some(f) if f.as_u64().is_some() => {
            return Err(Error::Unsupported(format!(
                "Zarr format {} in .zgroup (only Zarr v2 is read)",
                f.unparse()
            )));
        }
        Some(f) => return Err(Error::meta(".zgroup", not_format_2(f))),
    }
    let zattrs = r.load(".zattrs")?;
    r.dialect = detect(
        map,
        mode,
        &zgroup,
        zattrs.as_ref(),
        r.consolidated.is_some(),
    )?;
    log::debug!("{}: dialect {:?}", map.describe(), r.dialect);
    r.walk(Dataset::ROOT, "")?;
    let (pending, objects): (Vec<PendingVar>, Vec<VarObjects>) =
        std::mem::take(&mut r.pending).into_iter().unzip();
    let dialect = r.dialect;
    let xarray = mode.xarray != Some(false);
    let from_summary = r.from_summary.borrow().clone();
    let parts_of =
        |(p, o): (&PendingVar, VarObjects)| var_parts(map, dialect, xarray, p, o, &from_summary);
    // Each variable's objects are consumed (and freed) where they are decoded.
    let parts: Vec<Result<VarParts>> = if pending.len() >= PARALLEL_OPEN_MIN {
        use rayon::prelude::*;
        pending.par_iter().zip(objects).map(parts_of).collect()
    } else {
        pending.iter().zip(objects).map(parts_of).collect()
    };
    // In declaration order, so that the first bad variable is the one reported.
    for (p, parts) in pending.into_iter().zip(parts) {
        r.add_var(p, parts?)?;
    }
    bound_unlimited_dims(map, &mut r.ds)?;
    r.ds.provenance = provenance(dialect, [zattrs.as_ref(), Some(&zgroup)]);
    r.ds.provenance.layout = match dialect {
        Dialect::Pure => None,
        Dialect::V1 => Some(NczarrLayout::Objects1),
        // `detect` found either spelling in the root's `.zgroup`.
        Dialect::InObjects
            if ["_nczarr_group", "_nczarr_superblock"]
                .iter()
                .any(|k| zgroup.get(k).is_some()) =>
        {
            Some(NczarrLayout::LowerCaseKeys)
        }
        Dialect::InObjects => Some(NczarrLayout::UpperCaseKeys),
        Dialect::InAttrs => Some(NczarrLayout::Attributes),
    };
    Ok(std::mem::take(&mut r.ds))
}

/// Bounds each unlimited dimension whose recorded length runs past every array on it by what
/// is stored there. A writer stopped between storing a group's dimension lengths and its arrays'
/// shapes leaves the dimension longer than its arrays, with the chunks of the new records
/// already stored, and those records are read. Beyond the last stored chunk there is nothing
/// to read but fill: a damaged length (netcdf-c refuses any disagreement) would otherwise make
/// billions of records of it, which `dump` prints and `copy` writes out.
fn bound_unlimited_dims(map: &dyn ZMap, ds: &mut Dataset) -> Result<()> {
    for d in 0..ds.dims.len() {
        let dim = &ds.dims[d];
        if !dim.unlimited {
            continue;
        }
        let on_it: Vec<(VarId, usize)> = (0..ds.vars.len())
            .filter_map(|v| {
                let pos = ds.vars[v].dims.iter().position(|x| x.0 == d)?;
                Some((VarId(v), pos))
            })
            .collect();
        let Some(arrays_reach) = on_it
            .iter()
            .filter_map(|&(v, pos)| ds.var(v).storage.shape.get(pos).copied())
            .max()
        else {
            continue;
        };
        let recorded = dim.len;
        if recorded <= arrays_reach {
            continue;
        }
        let mut reach = arrays_reach;
        for &(v, pos) in &on_it {
            reach = reach.max(stored_reach(map, ds, v, pos)?.unwrap_or(recorded));
            if reach >= recorded {
                break;
            }
        }
        if reach < recorded {
            log::warn!(
                "{}: dimension {} records {recorded} but its arrays and their chunks reach only \
                 {reach}: reading {reach}",
                map.describe(),
                ds.dim_fqn(DimId(d))
            );
            ds.dims[d].len = reach;
        }
    }
    Ok(())
}

/// How far along its dimension `pos` the stored chunks of `v` (a Zarr v2 array) reach: the end
/// of the last chunk, or `None` when the chunk keys cannot be listed by that index alone (a
/// nested key encoding with the dimension past the first).
fn stored_reach(map: &dyn ZMap, ds: &Dataset, v: VarId, pos: usize) -> Result<Option<u64>> {
    let st = &ds.var(v).storage;
    let Some(&chunk) = st.chunks.get(pos) else {
        return Ok(None);
    };
    let ChunkKeyEncoding::V2 { separator } = st.key_encoding else {
        return Ok(None);
    };
    if separator == '/' && pos > 0 {
        return Ok(None);
    }
    let last = map
        .search(&st.key)?
        .iter()
        .filter_map(|name| name.split(separator).nth(pos)?.parse::<u64>().ok())
        .max();
    Ok(Some(last.map_or(0, |i| (i + 1).saturating_mul(chunk))))
}

/// The root's `_NCProperties` and NCZarr superblock version, looked for in each object
/// given (NCZarr keeps them in `.zattrs` since netcdf 4.9.3, in `.zgroup` before).
fn provenance(dialect: Dialect, objects: [Option<&Json>; 2]) -> Provenance {
    let find = |key: &str| objects.iter().flatten().find_map(|j| ncz_key(j, key));
    let props = objects
        .iter()
        .flatten()
        .find_map(|j| j.get("_NCProperties"))
        .and_then(Json::as_str)
        .map(str::to_string);
    let superblock = find("_nczarr_superblock")
        .and_then(|s| s.get("version"))
        .and_then(Json::as_str);
    let version = match dialect {
        Dialect::V1 => Some("1.0.0"),
        _ => superblock,
    };
    Provenance::new(props, version, dialect != Dialect::Pure)
}

/// The error for a root without a Zarr v2 group: refused as not a dataset, as a Zarr v3
/// dataset that the location said was v2, or as a bare root array.
fn not_a_dataset(map: &dyn ZMap, mode: &Mode, r: &Reader) -> Result<Error> {
    // Only a location that asks for Zarr v2 gets here with a zarr.json at the root.
    if mode.zarr_version == Some(2) && map.exists("zarr.json")? {
        return Ok(Error::Invalid(format!(
            "{}: the location asks for Zarr v2 (`v2` in #mode=), but this is a Zarr v3 \
             dataset (zarr.json at the root, no .zgroup): leave `v2` out to read it",
            map.describe()
        )));
    }
    if r.load(".zarray")?.is_some() {
        return Ok(Error::Unsupported(
            "a Zarr array at the dataset root (not a group)".into(),
        ));
    }
    // Opening an object store makes no request of its own, so an empty prefix (a mistyped
    // URL) is told apart here.
    let reason = if map.search("")?.is_empty() {
        "no objects under this prefix"
    } else {
        "no .zgroup, .zarray, .nczarr, .zmetadata or zarr.json at the root"
    };
    Ok(Error::NotZarr {
        location: map.describe(),
        reason: reason.into(),
    })
}

/// `e` with, when it refuses a group of a local NCZarr dataset opened as a dataset
/// ([`Error::GroupInsideNczarr`]), the dataset it belongs to: the nearest directory above
/// whose metadata holds the superblock, and the group's full name there.
pub fn with_dataset_of_group(e: Error, location: &crate::location::Location) -> Error {
    let (
        Error::GroupInsideNczarr {
            location: shown, ..
        },
        crate::location::Storage::File(path),
    ) = (&e, &location.storage)
    else {
        return e;
    };
    let has_superblock = |dir: &std::path::Path| {
        [".zattrs", ".zgroup", "zarr.json"].iter().any(|name| {
            let Ok(text) = std::fs::read(dir.join(name)) else {
                return false;
            };
            let Ok(j) = serde_json::from_slice::<serde_json::Value>(&text) else {
                return false;
            };
            let holds = |j: &serde_json::Value| {
                j.get("_nczarr_superblock").is_some() || j.get("_NCZARR_SUPERBLOCK").is_some()
            };
            holds(&j) || j.get("attributes").is_some_and(holds)
        })
    };
    let here = std::path::Path::new(".");
    let Some(root) = path
        .ancestors()
        .skip(1)
        .map(|dir| {
            if dir.as_os_str().is_empty() {
                here
            } else {
                dir
            }
        })
        .find(|dir| has_superblock(dir))
    else {
        return e;
    };
    let Ok(inside) = path.strip_prefix(root).or_else(|_| path.strip_prefix("")) else {
        return e;
    };
    Error::GroupInsideNczarr {
        location: shown.clone(),
        dataset: Some((root.display().to_string(), format!("/{}", inside.display()))),
    }
}

/// Which metadata convention the dataset uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    /// NCZarr 1.0.0: separate `.ncz*` objects.
    V1,
    /// netcdf 4.8.1–4.9.2: NCZarr keys inside `.zgroup` and `.zarray`.
    InObjects,
    /// netcdf 4.9.3+: NCZarr keys as attributes in `.zattrs`.
    InAttrs,
    /// Pure Zarr: no NCZarr metadata (or told to ignore it).
    Pure,
}

/// `consolidated`: whether `.zmetadata` was read; NCZarr 1.0.0 never wrote one, so such a
/// dataset is not probed for its `.nczarr` object.
fn detect(
    map: &dyn ZMap,
    mode: &Mode,
    zgroup: &Json,
    zattrs: Option<&Json>,
    consolidated: bool,
) -> Result<Dialect> {
    if mode.format == Some(Format::Zarr) {
        return Ok(Dialect::Pure);
    }
    // The keys inside objects already read are checked first, which spares a request for
    // `.nczarr` on every dataset written since netcdf 4.8.1.
    let has = |j: Option<&Json>, names: &[&str]| {
        j.is_some_and(|j| names.iter().any(|n| ncz_key(j, n).is_some()))
    };
    // Every NCZarr root holds a superblock; a group's metadata without one is a group
    // opened apart from its dataset, whose dimension references lead outside of it.
    let superblock =
        has(zattrs, &["_nczarr_superblock"]) || has(Some(zgroup), &["_nczarr_superblock"]);
    let group = has(zattrs, &["_nczarr_group"]) || has(Some(zgroup), &["_nczarr_group"]);
    if group && !superblock {
        return Err(Error::GroupInsideNczarr {
            location: map.describe(),
            dataset: None,
        });
    }
    if has(zattrs, &["_nczarr_superblock", "_nczarr_group"]) {
        return Ok(Dialect::InAttrs);
    }
    if has(Some(zgroup), &["_nczarr_superblock", "_nczarr_group"]) {
        return Ok(Dialect::InObjects);
    }
    if !consolidated && map.exists(".nczarr")? {
        return Ok(Dialect::V1);
    }
    Ok(Dialect::Pure)
}

/// An NCZarr key in either spelling (`_nczarr_group` or `_NCZARR_GROUP`).
fn ncz_key<'a>(j: &'a Json, lower: &str) -> Option<&'a Json> {
    j.get(lower).or_else(|| j.get(&lower.to_ascii_uppercase()))
}

/// Member `a` or, failing that, member `b`.
fn either<'a>(j: &'a Json, a: &str, b: &str) -> Option<&'a Json> {
    j.get(a).or_else(|| j.get(b))
}

/// Parses `.zmetadata`; an unusable one is ignored (the objects themselves are read instead).
/// The `.zmetadata` that `read` found, or `None` for one too long to be read, which is
/// ignored as an unreadable one is ([`parse_consolidated`]): the objects it would summarise
/// are read instead.
fn summary(map: &dyn ZMap, read: Result<Option<Vec<u8>>>) -> Result<Option<Vec<u8>>> {
    match read {
        Err(e @ Error::MetadataTooLarge { .. }) => {
            log::warn!("{}: ignoring .zmetadata: {e}", map.describe());
            Ok(None)
        }
        read => read,
    }
}

fn parse_consolidated(map: &dyn ZMap, bytes: &[u8]) -> Option<HashMap<String, Json>> {
    let parsed = match Json::parse(".zmetadata", bytes) {
        Ok(j) => j,
        Err(e) => {
            log::warn!("{}: ignoring .zmetadata: {e}", map.describe());
            return None;
        }
    };
    match parsed.get("metadata") {
        Some(Json::Obj(members)) => Some(members.iter().cloned().collect()),
        _ => {
            log::warn!(
                "{}: ignoring .zmetadata without a metadata object",
                map.describe()
            );
            None
        }
    }
}

/// NCZarr's description of a group.
struct NczGroup {
    dims: Vec<(String, u64, bool)>,
    vars: Vec<String>,
    groups: Vec<String>,
}

/// NCZarr's description of an array.
struct NczArray {
    dimrefs: Vec<String>,
    scalar: bool,
}

/// A variable found while walking the groups, built once every dimension exists.
struct PendingVar {
    group: GroupId,
    name: String,
    key: String,
    fqn: String,
}

/// The objects that describe one variable, as the walk found them.
struct VarObjects {
    zarray: Json,
    zattrs: Option<Json>,
    /// NCZarr 1.0.0's `.nczarray` and `.nczattrs` (other dialects keep these in the above).
    v1_array: Option<Json>,
    v1_attrs: Option<Json>,
}

/// A variable as its own objects describe it (see [`var_parts`]).
struct VarParts {
    /// NCZarr's dimension references, if the dialect has them.
    ncz: Option<NczArray>,
    /// xarray's `_ARRAY_DIMENSIONS`, when there is no `ncz` and the mode allows them.
    xarray_names: Option<Vec<String>>,
    shape: Vec<u64>,
    chunks: Vec<u64>,
    order: ChunkOrder,
    separator: char,
    filters: Vec<serde_json::Value>,
    compressor: Option<serde_json::Value>,
    nctype: NcType,
    dtype: Option<ZarrDtype>,
    string_width: usize,
    unreadable: Option<String>,
    attrs: Vec<Attribute>,
    fill_value: Option<Vec<u8>>,
}

struct Reader<'a> {
    map: &'a dyn ZMap,
    consolidated: Option<HashMap<String, Json>>,
    dialect: Dialect,
    ds: Dataset,
    pending: Vec<(PendingVar, VarObjects)>,
    /// Every object already fetched during this open (`None`: it does not exist), so that no
    /// object costs a second round trip: the root's `.zgroup` and `.zattrs` are read both to
    /// detect the dialect and by the walk, and pure Zarr children are probed before they
    /// are read.
    fetched: RefCell<HashMap<String, Option<Vec<u8>>>>,
    /// Objects a local prefetch read and parsed on several threads, each taken by the one
    /// [`Reader::load`] that wants it.
    parsed: RefCell<HashMap<String, Option<Json>>>,
    /// The keys whose metadata came from `.zmetadata`, so that messages blame its entry.
    from_summary: RefCell<HashSet<String>>,
}

impl Reader<'_> {
    /// The JSON object at `key`, from `.zmetadata` when it has it.
    fn load(&self, key: &str) -> Result<Option<Json>> {
        if let Some(c) = &self.consolidated {
            if let Some(j) = c.get(key) {
                self.from_summary.borrow_mut().insert(key.to_string());
                return Ok(Some(j.clone()));
            }
            // Consolidation records every .zattrs that exists, so a missing one beside a
            // recorded .zarray/.zgroup is absent, not stale.
            if let Some(dir) = key.strip_suffix(".zattrs") {
                if c.contains_key(&format!("{dir}.zarray"))
                    || c.contains_key(&format!("{dir}.zgroup"))
                {
                    return Ok(None);
                }
            }
        }
        if let Some(json) = self.parsed.borrow_mut().remove(key) {
            return Ok(json);
        }
        self.fetch(key)?.map(|b| Json::parse(key, &b)).transpose()
    }

    /// The object at `key`, from the map only the first time it is asked for.
    fn fetch(&self, key: &str) -> Result<Option<Vec<u8>>> {
        if let Some(bytes) = self.fetched.borrow().get(key) {
            return Ok(bytes.clone());
        }
        let bytes = get_metadata(self.map, key)?;
        self.fetched
            .borrow_mut()
            .insert(key.to_string(), bytes.clone());
        Ok(bytes)
    }

    /// Fetches those of `keys` that neither `.zmetadata` nor an earlier request gave, in
    /// one batch of concurrent GETs on maps with request latency; [`Reader::load`] then finds
    /// them. A failed GET is left for `load` to repeat and report.
    fn prefetch(&self, keys: Vec<String>) {
        if self.map.concurrent_gets() <= 1 {
            return self.prefetch_local(keys);
        }
        let keys: Vec<String> = keys
            .into_iter()
            .filter(|k| {
                !self.fetched.borrow().contains_key(k)
                    && !self
                        .consolidated
                        .as_ref()
                        .is_some_and(|c| c.contains_key(k))
            })
            .collect();
        if keys.len() < 2 {
            return;
        }
        let results = self.map.get_many_metadata(&keys, METADATA_LIMIT);
        let mut fetched = self.fetched.borrow_mut();
        for (key, result) in keys.into_iter().zip(results) {
            if let Ok(bytes) = result {
                fetched.insert(key, bytes);
            }
        }
    }

    /// [`Reader::prefetch`] on a local map: the objects are read and parsed on every core
    /// (opening a dataset of many variables is mostly that). What fails to be read or
    /// parsed is left for `load` to repeat and report.
    fn prefetch_local(&self, keys: Vec<String>) {
        use rayon::prelude::*;
        let consolidated = |k: &String| {
            self.consolidated
                .as_ref()
                .is_some_and(|c| c.contains_key(k))
        };
        let keys: Vec<String> = keys
            .into_iter()
            .filter(|k| !self.fetched.borrow().contains_key(k) && !consolidated(k))
            .collect();
        if keys.len() < PARALLEL_OPEN_MIN {
            return;
        }
        let map = self.map;
        let parsed: Vec<(String, Option<Json>)> = keys
            .into_par_iter()
            .filter_map(|key| {
                let json = match get_metadata(map, &key).ok()? {
                    Some(bytes) => Some(Json::parse(&key, &bytes).ok()?),
                    None => None,
                };
                Some((key, json))
            })
            .collect();
        self.parsed.borrow_mut().extend(parsed);
    }

    /// Child names under `prefix` that hold a `.zarray` or `.zgroup`, sorted.
    fn children(&self, prefix: &str) -> Result<Vec<String>> {
        let names = match &self.consolidated {
            Some(c) => {
                let mut names: Vec<String> = c
                    .keys()
                    .filter_map(|k| {
                        let rest = if prefix.is_empty() {
                            k.as_str()
                        } else {
                            k.strip_prefix(prefix)?.strip_prefix('/')?
                        };
                        let (name, leaf) = rest.split_once('/')?;
                        matches!(leaf, ".zarray" | ".zgroup").then(|| name.to_string())
                    })
                    .collect();
                names.sort();
                names.dedup();
                names
            }
            None => self.map.search(prefix)?,
        };
        Ok(names)
    }

    /// NCZarr 1.0.0's object `leaf` (`.nczarray`, `.nczattrs`) at `prefix`; other dialects
    /// have none.
    fn load_v1(&self, prefix: &str, leaf: &str) -> Result<Option<Json>> {
        match self.dialect {
            Dialect::V1 => self.load(&join_key(&[prefix, leaf])),
            _ => Ok(None),
        }
    }

    /// The visible attributes of `.zattrs` at `prefix`, typed.
    fn attributes(&self, prefix: &str, zattrs: Option<&Json>) -> Result<Vec<Attribute>> {
        let v1_attrs = self.load_v1(prefix, ".nczattrs")?;
        let types = attr_types(self.dialect, zattrs, v1_attrs.as_ref());
        typed_attributes(prefix, zattrs, types, self.dialect)
    }

    /// NCZarr's group description at `prefix` in this dialect, if present.
    fn ncz_group(
        &self,
        prefix: &str,
        zgroup: Option<&Json>,
        zattrs: Option<&Json>,
    ) -> Result<Option<(String, NczGroup)>> {
        let (key, j) = match self.dialect {
            Dialect::Pure => return Ok(None),
            Dialect::V1 => {
                let key = join_key(&[prefix, ".nczgroup"]);
                (key.clone(), self.load(&key)?)
            }
            Dialect::InObjects => (
                join_key(&[prefix, ".zgroup"]),
                zgroup.and_then(|z| ncz_key(z, "_nczarr_group")).cloned(),
            ),
            Dialect::InAttrs => (
                join_key(&[prefix, ".zattrs"]),
                zattrs.and_then(|z| ncz_key(z, "_nczarr_group")).cloned(),
            ),
        };
        let Some(j) = j else { return Ok(None) };
        if !matches!(j, Json::Obj(_)) {
            return Err(Error::meta(&key, "_nczarr_group is not an object"));
        }
        let names = |field: &str, alt: &str| -> Result<Vec<String>> {
            let Some(value) = either(&j, field, alt) else {
                return Ok(Vec::new());
            };
            let items = match value {
                Json::Null => return Ok(Vec::new()),
                Json::Arr(items) => items,
                _ => return Err(Error::meta(&key, format!("{field}: not a list of names"))),
            };
            let mut out: Vec<String> = Vec::with_capacity(items.len());
            // A set, not a scan of `out`: a group of 10,000 arrays would take 50 million
            // comparisons.
            let mut seen = std::collections::HashSet::with_capacity(items.len());
            for item in items {
                let name = item
                    .as_str()
                    .ok_or_else(|| Error::meta(&key, format!("{field}: not a name")))?;
                check_listed_name(&key, field, name)?;
                if !seen.insert(name) {
                    return Err(Error::meta(
                        &key,
                        format!("{field}: {} is listed twice", quoted(name)),
                    ));
                }
                out.push(name.to_string());
            }
            Ok(out)
        };
        let mut dims = Vec::new();
        match either(&j, "dimensions", "dims") {
            None | Some(Json::Null) => {}
            Some(Json::Obj(members)) => {
                for (name, v) in members {
                    let bad = || Error::meta(&key, format!("dimension {name}: bad size"));
                    let (len, unlimited) = match v {
                        Json::Obj(_) => (
                            v.get("size").and_then(Json::as_u64).ok_or_else(bad)?,
                            v.get("unlimited").is_some_and(|u| {
                                matches!(u, Json::Bool(true)) || u.as_u64().is_some_and(|n| n != 0)
                            }),
                        ),
                        v => (v.as_u64().ok_or_else(bad)?, false),
                    };
                    check_listed_name(&key, "dimensions", name)?;
                    dims.push((name.clone(), len, unlimited));
                }
            }
            // The Zarr v3 draft spells dimensions as a list of {name, size, unlimited}.
            Some(Json::Arr(items)) => {
                for d in items {
                    let name = d.get("name").and_then(Json::as_str);
                    let size = d.get("size").and_then(Json::as_u64);
                    let (Some(name), Some(len)) = (name, size) else {
                        return Err(Error::meta(&key, "dimensions: bad entry"));
                    };
                    let unl = d
                        .get("unlimited")
                        .and_then(Json::as_u64)
                        .is_some_and(|n| n != 0);
                    check_listed_name(&key, "dimensions", name)?;
                    dims.push((name.to_string(), len, unl));
                }
            }
            Some(_) => return Err(Error::meta(&key, "dimensions: not an object")),
        }
        let groups = if j.get("subgroups").is_some() {
            names("subgroups", "groups")?
        } else {
            names("groups", "subgroups")?
        };
        Ok(Some((
            key.clone(),
            NczGroup {
                dims,
                vars: names("arrays", "vars")?,
                groups,
            },
        )))
    }

    /// Reads the group at `prefix` into `gid` and every group below it, depth first in
    /// creation order. Iterative, not recursive: groups nested thousands deep (a zip archive
    /// can hold them) would overflow a thread's stack, a mount thread's first.
    fn walk(&mut self, gid: GroupId, prefix: &str) -> Result<()> {
        // (parent, key, name) of the groups still to read, the next one last.
        let mut todo: Vec<(GroupId, String, String)> = Vec::new();
        let mut next = Some((gid, prefix.to_string()));
        while let Some((gid, prefix)) = next.take() {
            let subgroups = self.read_group(gid, &prefix)?;
            todo.extend(
                subgroups
                    .into_iter()
                    .rev()
                    .map(|name| (gid, join_key(&[&prefix, &name]), name)),
            );
            next = todo
                .pop()
                .map(|(parent, key, name)| (self.ds.add_group(parent, &name), key));
        }
        Ok(())
    }

    /// Reads the group at `prefix` into `gid`: attributes, dimensions and its variables
    /// (queued), in creation order; the names of its subgroups, in creation order.
    fn read_group(&mut self, gid: GroupId, prefix: &str) -> Result<Vec<String>> {
        let zgroup = self.load(&join_key(&[prefix, ".zgroup"]))?;
        let zattrs = self.load(&join_key(&[prefix, ".zattrs"]))?;
        self.ds.groups[gid.0].attrs = self.attributes(prefix, zattrs.as_ref())?;
        let (var_names, group_names) =
            match self.ncz_group(prefix, zgroup.as_ref(), zattrs.as_ref())? {
                Some((key, g)) => {
                    for (name, len, unlimited) in g.dims {
                        if self.ds.find_dim_in(gid, &name).is_some() {
                            return Err(Error::meta(
                                &key,
                                format!("dimension {name} declared twice"),
                            ));
                        }
                        self.ds.add_dim(gid, &name, len, unlimited);
                    }
                    (g.vars, g.groups)
                }
                None => self.discover(prefix)?,
            };
        let objects = |names: &[String], leaf: &str| -> Vec<String> {
            names
                .iter()
                .flat_map(|n| {
                    [
                        join_key(&[prefix, n, leaf]),
                        join_key(&[prefix, n, ".zattrs"]),
                    ]
                })
                .collect()
        };
        let mut wanted = objects(&var_names, ".zarray");
        wanted.extend(objects(&group_names, ".zgroup"));
        if self.dialect == Dialect::V1 {
            wanted.extend(objects(&var_names, ".nczarray"));
            wanted.extend(objects(&var_names, ".nczattrs"));
            wanted.extend(objects(&group_names, ".nczgroup"));
        }
        self.prefetch(wanted);
        for name in var_names {
            let key = join_key(&[prefix, &name]);
            let Some(zarray) = self.load(&join_key(&[&key, ".zarray"]))? else {
                log::warn!(
                    "{}: variable {key} is listed but has no .zarray",
                    self.map.describe()
                );
                continue;
            };
            let objects = VarObjects {
                zarray,
                zattrs: self.load(&join_key(&[&key, ".zattrs"]))?,
                v1_array: self.load_v1(&key, ".nczarray")?,
                v1_attrs: self.load_v1(&key, ".nczattrs")?,
            };
            let fqn = self.ds.fqn_in(gid, &name);
            let var = PendingVar {
                group: gid,
                name,
                key,
                fqn,
            };
            self.pending.push((var, objects));
        }
        Ok(group_names)
    }

    /// Finds the arrays and groups under `prefix` by listing (pure Zarr), each sorted by name.
    fn discover(&self, prefix: &str) -> Result<(Vec<String>, Vec<String>)> {
        let mut vars = Vec::new();
        let mut groups = Vec::new();
        let (hidden, children): (Vec<String>, Vec<String>) = self
            .children(prefix)?
            .into_iter()
            .partition(|name| name.starts_with('.'));
        for name in hidden
            .iter()
            .filter(|n| !METADATA_OBJECTS.contains(&n.as_str()))
        {
            let key = join_key(&[prefix, name]);
            let what = if self.exists(&join_key(&[&key, ".zarray"]))? {
                "array"
            } else if self.exists(&join_key(&[&key, ".zgroup"]))? {
                "group"
            } else {
                continue;
            };
            warn_hidden(what, &key);
        }
        // Most children are arrays: their .zarray and .zattrs are read next anyway.
        self.prefetch(
            children
                .iter()
                .flat_map(|n| {
                    [
                        join_key(&[prefix, n, ".zarray"]),
                        join_key(&[prefix, n, ".zattrs"]),
                    ]
                })
                .collect(),
        );
        for name in children {
            let key = join_key(&[prefix, &name]);
            if self.exists(&join_key(&[&key, ".zarray"]))? {
                vars.push(name);
            } else if self.exists(&join_key(&[&key, ".zgroup"]))? {
                groups.push(name);
            }
        }
        Ok((vars, groups))
    }

    fn exists(&self, key: &str) -> Result<bool> {
        if let Some(c) = &self.consolidated {
            if c.contains_key(key) {
                return Ok(true);
            }
            // A name that `.zmetadata` records as a group is no array, and the other way
            // round: no request to find that out.
            let other = match key.rsplit_once('/').unwrap_or(("", key)) {
                (dir, ".zarray") => Some(join_key(&[dir, ".zgroup"])),
                (dir, ".zgroup") => Some(join_key(&[dir, ".zarray"])),
                _ => None,
            };
            if other.is_some_and(|o| c.contains_key(&o)) {
                return Ok(false);
            }
        }
        if let Some(json) = self.parsed.borrow().get(key) {
            return Ok(json.is_some());
        }
        // A GET costs the same round trip as a HEAD, and the object found is read next.
        Ok(self.fetch(key)?.is_some())
    }

    /// Adds one variable to the dataset: its dimensions, then the variable itself.
    fn add_var(&mut self, p: PendingVar, parts: VarParts) -> Result<()> {
        let dims = self.var_dims(&p, &parts)?;
        let var = Variable {
            name: p.name,
            group: p.group,
            nctype: parts.nctype,
            dims,
            string_width: parts.string_width,
            attrs: parts.attrs,
            storage: VarStorage {
                key: p.key,
                dtype: parts.dtype,
                shape: parts.shape,
                chunks: parts.chunks,
                order: parts.order,
                key_encoding: ChunkKeyEncoding::V2 {
                    separator: parts.separator,
                },
                fill_value: parts.fill_value,
                codecs: CodecSpec::V2 {
                    filters: parts.filters,
                    compressor: parts.compressor,
                },
                unreadable: parts.unreadable,
            },
        };
        self.ds.add_var(var);
        Ok(())
    }

    /// The dimensions of a variable: NCZarr references, xarray names, or anonymous ones.
    fn var_dims(&mut self, p: &PendingVar, parts: &VarParts) -> Result<Vec<DimId>> {
        let (fqn, shape) = (&p.fqn, &parts.shape[..]);
        let zkey = join_key(&[&p.key, ".zarray"]);
        if let Some(ncz) = &parts.ncz {
            if ncz.scalar {
                if shape.iter().product::<u64>() != 1 {
                    return Err(Error::meta(
                        &zkey,
                        format!("scalar variable {fqn} has shape {shape:?}"),
                    ));
                }
                return Ok(Vec::new());
            }
            if ncz.dimrefs.len() != shape.len() {
                return Err(Error::meta(
                    &zkey,
                    format!(
                        "variable {fqn}: {} dimension references for shape {shape:?}",
                        ncz.dimrefs.len()
                    ),
                ));
            }
            let mut dims = Vec::new();
            for (r, &len) in ncz.dimrefs.iter().zip(shape) {
                let d = self.ds.find_dim(r).ok_or_else(|| {
                    Error::meta(
                        &zkey,
                        format!("variable {fqn}: dimension {} does not exist", quoted(r)),
                    )
                })?;
                let dim = &mut self.ds.dims[d.0];
                if dim.unlimited {
                    dim.len = dim.len.max(len);
                } else if dim.len != len {
                    return Err(Error::meta(
                        &zkey,
                        format!(
                            "variable {fqn}: length {len} differs from dimension {r} = {}",
                            dim.len
                        ),
                    ));
                }
                dims.push(d);
            }
            return Ok(dims);
        }
        if shape.is_empty() {
            return Ok(Vec::new());
        }
        let names = parts.xarray_names.as_deref();
        if names == Some(&["_scalar_".to_string()][..]) && shape == [1] {
            return Ok(Vec::new());
        }
        let mut dims = Vec::new();
        match names {
            Some(names) => {
                for (name, &len) in names.iter().zip(shape) {
                    dims.push(named_dim(&mut self.ds, p.group, name, len, fqn, &zkey)?);
                }
            }
            None => {
                for &len in shape {
                    let name = format!("_Anonymous_Dim_{len}");
                    let d = match self.ds.find_dim_in(Dataset::ROOT, &name) {
                        Some(d) => d,
                        // Unlimited at length 0, as in `named_dim`.
                        None => self.ds.add_dim(Dataset::ROOT, &name, len, len == 0),
                    };
                    dims.push(d);
                }
            }
        }
        Ok(dims)
    }
}

/// `_ARRAY_DIMENSIONS` if it is a list of names (strings) matching the rank. Every string is
/// a name, as xarray takes it, `x/y` and `""` too (see [`named_dim`]).
fn xarray_names(zattrs: Option<&Json>, fqn: &str, shape: &[u64]) -> Option<Vec<String>> {
    let list = zattrs?.get("_ARRAY_DIMENSIONS")?;
    let Json::Arr(items) = list else {
        log::warn!(
            "{fqn}: _ARRAY_DIMENSIONS {} is not a list of names; ignored",
            capped(&list.unparse())
        );
        return None;
    };
    if items.len() != shape.len() {
        log::warn!(
            "{fqn}: _ARRAY_DIMENSIONS lists {} name(s) for the {} dimension(s) of shape \
             {shape:?}; ignored",
            items.len(),
            shape.len()
        );
        return None;
    }
    let mut names = Vec::with_capacity(items.len());
    for item in items {
        let Some(name) = item.as_str() else {
            log::warn!(
                "{fqn}: _ARRAY_DIMENSIONS item {} is not a name (a string); the list is ignored",
                capped(&item.unparse())
            );
            return None;
        };
        names.push(name.to_string());
    }
    Some(names)
}

/// NCZarr's array description of the variable at `prefix` in `dialect`, if present.
fn ncz_array(dialect: Dialect, prefix: &str, objects: &VarObjects) -> Result<Option<NczArray>> {
    let (zarray, zattrs) = (&objects.zarray, objects.zattrs.as_ref());
    let (key, j) = match dialect {
        Dialect::Pure => return Ok(None),
        Dialect::V1 => (join_key(&[prefix, ".nczarray"]), objects.v1_array.as_ref()),
        // 4.9.x wrote the array keys into .zarray; accept them from .zattrs as well.
        Dialect::InObjects | Dialect::InAttrs => {
            let in_zarray = ncz_key(zarray, "_nczarr_array");
            let in_zattrs = zattrs.and_then(|z| ncz_key(z, "_nczarr_array"));
            match (in_zarray, in_zattrs) {
                (Some(j), _) => (join_key(&[prefix, ".zarray"]), Some(j)),
                (None, j) => (join_key(&[prefix, ".zattrs"]), j),
            }
        }
    };
    let Some(j) = j else { return Ok(None) };
    let dimrefs = match either(j, "dimension_references", "dimrefs") {
        None | Some(Json::Null) => Vec::new(),
        Some(Json::Arr(items)) => items
            .iter()
            .map(|i| {
                i.as_str()
                    .map(str::to_string)
                    .ok_or_else(|| Error::meta(&key, "dimension_references: not a name"))
            })
            .collect::<Result<_>>()?,
        Some(_) => return Err(Error::meta(&key, "dimension_references: not a list")),
    };
    let scalar = j.get("storage").and_then(Json::as_str) == Some("scalar")
        || j.get("scalar")
            .is_some_and(|s| matches!(s, Json::Bool(true)) || s.as_u64().is_some_and(|n| n != 0));
    Ok(Some(NczArray { dimrefs, scalar }))
}

/// The NCZarr attribute types of an object, if recorded: in its `.zattrs` (read as pure Zarr
/// too), or in NCZarr 1.0.0's `.nczattrs` (`v1_attrs`).
fn attr_types<'a>(
    dialect: Dialect,
    zattrs: Option<&'a Json>,
    v1_attrs: Option<&'a Json>,
) -> Option<&'a Json> {
    match dialect {
        Dialect::V1 => v1_attrs?.get("types"),
        // netcdf-c 4.10.1 applies NCZarr's types in `mode=zarr` too.
        Dialect::Pure | Dialect::InObjects | Dialect::InAttrs => zattrs
            .and_then(|z| ncz_key(z, "_nczarr_attr").or_else(|| z.get("_nczarr_attrs")))
            .and_then(|a| a.get("types")),
    }
}

fn typed_attributes(
    prefix: &str,
    zattrs: Option<&Json>,
    types: Option<&Json>,
    dialect: Dialect,
) -> Result<Vec<Attribute>> {
    let Some(z) = zattrs else {
        return Ok(Vec::new());
    };
    let key = join_key(&[prefix, ".zattrs"]);
    let Json::Obj(members) = z else {
        return Err(Error::meta(&key, "not a JSON object"));
    };
    let mut out = Vec::new();
    for (name, value) in members {
        if attrs::is_hidden(name) {
            continue;
        }
        let dtype = types.and_then(|t| t.get(name)).and_then(Json::as_str);
        out.push(Attribute {
            name: name.clone(),
            value: if dialect == Dialect::Pure {
                attrs::convert_pure(&key, name, value, dtype)?
            } else {
                attrs::convert(&key, name, value, dtype)?
            },
        });
    }
    Ok(out)
}

/// The complaint about a `zarr_format` that is not the number 2 (a string `"2"` is not: the
/// specification and zarr-python want the number).
fn not_format_2(f: &Json) -> String {
    format!("zarr_format {} is not 2", f.unparse())
}

/// What one variable's objects say, checked: everything but its dimensions, which need the
/// dataset. `xarray`: whether `_ARRAY_DIMENSIONS` may name them.
fn var_parts(
    map: &dyn ZMap,
    dialect: Dialect,
    xarray: bool,
    p: &PendingVar,
    objects: VarObjects,
    from_summary: &HashSet<String>,
) -> Result<VarParts> {
    let zkey = join_key(&[&p.key, ".zarray"]);
    let z = &objects.zarray;
    let zattrs = objects.zattrs.as_ref();
    let types = attr_types(dialect, zattrs, objects.v1_attrs.as_ref());
    let ncz = ncz_array(dialect, &p.key, &objects)?;
    match z.get("zarr_format") {
        Some(f) if f.as_u64() != Some(2) => return Err(Error::meta(&zkey, not_format_2(f))),
        _ => {}
    }
    let shape = u64_list(&zkey, z, "shape")?;
    let chunks = match z.get("chunks") {
        None | Some(Json::Null) if shape.is_empty() => Vec::new(),
        _ => u64_list(&zkey, z, "chunks")?,
    };
    if chunks.len() != shape.len() {
        return Err(Error::meta(
            &zkey,
            format!("chunks {chunks:?} and shape {shape:?} differ in rank"),
        ));
    }
    if chunks.contains(&0) {
        return Err(Error::meta(&zkey, format!("chunk size 0 in {chunks:?}")));
    }
    if element_count(&shape).is_none() {
        return Err(Error::meta(&zkey, format!("shape {shape:?} overflows")));
    }
    // `null` (or any other non-string) is no order: zarr-python refuses it, netcdf-c (4.9.0
    // to 4.10.1) crashes on it.
    let order = match z.get("order") {
        None => ChunkOrder::C,
        Some(Json::Str(o)) if o == "C" => ChunkOrder::C,
        Some(Json::Str(o)) if o == "F" => ChunkOrder::F,
        Some(Json::Str(o)) => {
            return Err(Error::meta(
                &zkey,
                format!("order {} is not C or F", quoted(o)),
            ))
        }
        Some(other) => {
            return Err(Error::meta(
                &zkey,
                format!("order {} is not C or F", capped(&other.unparse())),
            ))
        }
    };
    // netcdf-c (4.9.0 to 4.10.1) reads a null separator as the default, zarr-python refuses it.
    let separator = match z.get("dimension_separator") {
        None | Some(Json::Null) => '.',
        Some(Json::Str(s)) if s == "." => '.',
        Some(Json::Str(s)) if s == "/" => '/',
        Some(other) => {
            return Err(Error::meta(
                &zkey,
                format!(
                    "dimension_separator {} is not \".\" or \"/\"",
                    other.unparse()
                ),
            ))
        }
    };
    let filters = match z.get("filters") {
        None | Some(Json::Null) => Vec::new(),
        Some(Json::Arr(items)) => items.iter().map(Json::to_serde).collect(),
        Some(_) => return Err(Error::meta(&zkey, "filters is not a list")),
    };
    let compressor = match z.get("compressor") {
        None | Some(Json::Null) => None,
        Some(c @ Json::Obj(_)) => Some(c.to_serde()),
        Some(_) => return Err(Error::meta(&zkey, "compressor is not an object")),
    };

    let object_chain = (z.get("dtype").and_then(Json::as_str) == Some("|O"))
        .then(|| {
            crate::codec::object_string_chain(
                &filters,
                compressor.as_ref(),
                order == ChunkOrder::F,
                shape.len(),
            )
        })
        .flatten();
    let mut object_fill = match (&object_chain, z.get("fill_value")) {
        (Some(_), Some(fv)) => {
            fill::object_fill(&zkey, fv, !crate::codec::is_object_utf8_filter(&filters))
        }
        _ => Ok(None),
    };
    let fill_len = object_fill
        .as_ref()
        .map_or(0, |f| f.as_ref().map_or(0, Vec::len));
    let (nctype, mut dtype, string_width, mut unreadable) = match &object_chain {
        Some(chain) => object_string_type(map, &zkey, &p.key, chain, &chunks, fill_len),
        None => var_type(dialect, &described(&zkey, from_summary), z),
    };
    if let Some(d) = &dtype {
        let chunk_elems = element_count(&chunks);
        let chunk_bytes = chunk_elems
            .and_then(|n| n.checked_mul(d.size as u64))
            .and_then(|n| usize::try_from(n).ok());
        if chunk_bytes.is_none() {
            return Err(Error::meta(
                &zkey,
                format!("chunks {chunks:?} are too large"),
            ));
        }
    }

    let mut attrs = typed_attributes(&p.key, zattrs, types, dialect)?;
    // Without an NCZarr type, _FillValue takes the variable's type, as netCDF requires.
    let fill_typed = types.is_some_and(|t| t.get("_FillValue").is_some());
    if !fill_typed && unreadable.is_none() {
        if let (Some(a), Some(raw)) = (
            attrs.iter_mut().find(|a| a.name == "_FillValue"),
            zattrs.and_then(|z| z.get("_FillValue")),
        ) {
            if let Ok(v) = fill::fill_attribute(&zkey, raw, nctype) {
                a.value = v;
            }
        }
    }

    let mut fill_value = None;
    if let Some(d) = &dtype {
        if let Some(fv) = z.get("fill_value") {
            let fill = if object_chain.is_some() {
                std::mem::replace(&mut object_fill, Ok(None)).map(|f| {
                    f.map(|mut b| {
                        b.resize(d.size, 0);
                        b
                    })
                })
            } else if dialect == Dialect::Pure && !netcdf_c_text_fill(fv, zattrs, nctype) {
                fill::fill_value(&zkey, fv, nctype, d, string_width)
            } else {
                fill::nczarr_fill_value(&zkey, fv, nctype, d, string_width)
            };
            match fill {
                Ok(f) => fill_value = f,
                Err(e) => {
                    unreadable = Some(unfit_fill(&described(&zkey, from_summary), e));
                }
            }
        }
        // An explicit `null` means no fill (zeros), even beside a `_FillValue` attribute:
        // zarr-python reads pure Zarr so, and netcdf-c (4.9.0 and 4.10.1 alike) writes `null`
        // for exactly its no-fill variables, keeping their `_FillValue` as an attribute.
        if fill_value.is_none() && z.get("fill_value").is_none() {
            fill_value = attrs
                .iter()
                .find(|a| a.name == "_FillValue")
                .and_then(|a| fill::from_attr(&a.value, nctype, string_width));
        }
    }
    // Old NCZarr wrote char as `<U1` but stored one byte per element.
    if nctype == NcType::Char {
        dtype = dtype.map(|_| ZarrDtype {
            order: ByteOrder::NotApplicable,
            kind: DtypeKind::Bytes,
            size: 1,
        });
    }

    let xarray_names = match ncz {
        None if xarray && !shape.is_empty() => xarray_names(zattrs, &p.fqn, &shape),
        _ => None,
    };
    Ok(VarParts {
        ncz,
        xarray_names,
        shape,
        chunks,
        order,
        separator,
        filters,
        compressor,
        nctype,
        dtype,
        string_width,
        unreadable,
        attrs,
        fill_value,
    })
}

/// Why a variable whose `fill_value` does not fit its type is unreadable, warned of as
/// coming from `source`: zarr-python refuses such an array and reads the others, and so does
/// nczarrfs, rather than refuse the whole dataset or guess the values of unwritten chunks.
fn unfit_fill(source: &str, e: Error) -> String {
    let why = unfit_fill_reason(e);
    log::warn!("{source}: {why}");
    why
}

/// [`unfit_fill`] without the warning: the reason alone, without the object, which the
/// warning names and a read names the variable instead of.
fn unfit_fill_reason(e: Error) -> String {
    match e {
        Error::InvalidMetadata { reason, .. } => reason,
        other => other.to_string(),
    }
}

/// Whether the `fill_value` `fv` of a pure Zarr string array is netcdf-c's plain text rather
/// than zarr-python's base64: netcdf-c's `mode=zarr` writes a string variable's fill as its
/// text, both as `fill_value` and as a `_FillValue` attribute of the same spelling, where
/// zarr-python and xarray write base64 and no such attribute (xarray keeps a Zarr v2
/// `_FillValue` in `fill_value` alone). Base64 text is also plain text, so only the attribute
/// tells the two apart.
fn netcdf_c_text_fill(fv: &Json, zattrs: Option<&Json>, nctype: NcType) -> bool {
    nctype == NcType::String
        && matches!(fv, Json::Str(_) | Json::Bytes(_))
        && zattrs.and_then(|z| z.get("_FillValue")) == Some(fv)
}

/// A group, variable or dimension name listed in NCZarr metadata names one child: it is not
/// empty (the group itself, without end), `.`, `..`, nor holds a `/` or a NUL.
fn check_listed_name(key: &str, field: &str, name: &str) -> Result<()> {
    if name.is_empty() || name == "." || name == ".." || name.contains(['/', '\0']) {
        return Err(Error::meta(
            key,
            format!("{field}: {} is not a name", quoted(name)),
        ));
    }
    Ok(())
}

/// The netCDF type, stored dtype, string width and unreadable reason of an array.
/// An unsupported dtype leaves the variable visible as `ubyte` with no dtype.
fn var_type(
    dialect: Dialect,
    source: &str,
    z: &Json,
) -> (NcType, Option<ZarrDtype>, usize, Option<String>) {
    let text = match z.get("dtype") {
        Some(Json::Str(s)) => s.clone(),
        Some(other) => other.unparse(),
        None => String::new(),
    };
    let unreadable = |why: String| {
        log::warn!("{source}: {why}");
        (NcType::UByte, None, 0, Some(why))
    };
    let Some(d) = ZarrDtype::parse(&text) else {
        return unreadable(format!("unsupported dtype {}", quoted(&text)));
    };
    // `=` is the byte order of the machine that wrote the array, which the store does not
    // say: zarr-python and netcdf-c (4.9.1, 4.10.1) refuse it; 4.9.0 aborts.
    if text.starts_with('=') && d.size > 1 && d.kind != DtypeKind::Bytes {
        return unreadable(format!(
            "dtype {}: byte order \"=\" (the writer's machine) is not \"<\" or \">\"",
            quoted(&text)
        ));
    }
    // `|` says elements are single bytes. netcdf-c 4.9.0 and 4.9.1 and NumPy read wider ones
    // so marked in the machine's order, little-endian here; netcdf-c 4.10.1 reads them
    // big-endian and zarr-python refuses them.
    if d.order == ByteOrder::NotApplicable
        && d.size > 1
        && matches!(d.kind, DtypeKind::Int | DtypeKind::UInt | DtypeKind::Float)
    {
        log::warn!(
            "{source}: dtype {} gives no byte order (\"<\" or \">\") for {}-byte elements; \
             read as little-endian, as netcdf-c 4.9 does",
            quoted(&text),
            d.size
        );
    }
    let nczarr = dialect != Dialect::Pure;
    let t = match (d.kind, d.size) {
        (DtypeKind::Bool, _) => NcType::UByte,
        (DtypeKind::Int, 1) => NcType::Byte,
        (DtypeKind::Int, 2) => NcType::Short,
        (DtypeKind::Int, 4) => NcType::Int,
        (DtypeKind::Int, _) => NcType::Int64,
        (DtypeKind::UInt, 1) => NcType::UByte,
        (DtypeKind::UInt, 2) => NcType::UShort,
        (DtypeKind::UInt, 4) => NcType::UInt,
        (DtypeKind::UInt, _) => NcType::UInt64,
        // Half floats are widened to float by the chunk engine.
        (DtypeKind::Float, 2 | 4) => NcType::Float,
        (DtypeKind::Float, 8) => NcType::Double,
        (DtypeKind::Float, _) => return unreadable(format!("unsupported dtype {}", quoted(&text))),
        // NCZarr marks char as `>S1` (`<U1` before 4.9.1); `|S1` is a one-byte string.
        (DtypeKind::Bytes, 1) if nczarr && d.order != ByteOrder::NotApplicable => NcType::Char,
        (DtypeKind::Unicode, 4) if nczarr => NcType::Char,
        (DtypeKind::Bytes | DtypeKind::Unicode, _) => NcType::String,
    };
    let width = if t == NcType::String { d.size } else { 0 };
    if width > crate::model::MAX_STRING_WIDTH {
        return unreadable(format!(
            "string width {width} of dtype {} is more than the {} bytes nczarrfs handles",
            quoted(&text),
            crate::model::MAX_STRING_WIDTH
        ));
    }
    (t, Some(d), width, None)
}

/// [`var_type`] for a Zarr v2 object array of strings (`|O` with `vlen-utf8` or
/// `vlen-bytes`, whose v3 spelling is `chain`): a `string` variable whose slots are as wide as
/// the longest stored value or the fill (`fill_len` bytes), found by scanning the chunks, so
/// that nothing is cut.
fn object_string_type(
    map: &dyn ZMap,
    zkey: &str,
    key: &str,
    chain: &[serde_json::Value],
    chunks: &[u64],
    fill_len: usize,
) -> (NcType, Option<ZarrDtype>, usize, Option<String>) {
    // As for Zarr v3 strings: a chunk that cannot be read leaves the default width, and
    // only the reads that touch it fail.
    let width = match crate::chunk::vlen_max_len(map, key, chain, chunks) {
        Ok(n) => n.max(fill_len).max(1),
        Err(e) => {
            log::warn!("{zkey}: cannot measure its strings ({e})");
            v3::DEFAULT_VLEN_WIDTH.max(fill_len)
        }
    };
    if width > crate::model::MAX_STRING_WIDTH {
        let why = format!(
            "a stored string of {width} bytes is more than the {} bytes nczarrfs handles",
            crate::model::MAX_STRING_WIDTH
        );
        log::warn!("{zkey}: {why}");
        return (NcType::UByte, None, 0, Some(why));
    }
    let dtype = ZarrDtype {
        order: ByteOrder::NotApplicable,
        kind: DtypeKind::Bytes,
        size: width,
    };
    (NcType::String, Some(dtype), width, None)
}

/// The dimension `name` of length `len` for a variable of `group`, when the name comes from the
/// array itself (xarray's `_ARRAY_DIMENSIONS`, Zarr v3's `dimension_names`): the visible one of
/// that name and length declared nearest (the group's own, else its parent's, ...), else a
/// new one in the variable's own group. Any name is kept, as xarray keeps it; a new one that
/// netCDF could not hold in any way (`x/y`, `""`) is warned of once.
///
/// The length picks among the visible dimensions of the name, not only the nearest one: a
/// group's arrays may name `x` of the root's length beside `x` of another length (made the
/// group's own), and which of them is read first must not decide whether the store opens.
/// Groups are read from the root down, so every ancestor's dimensions are known here.
/// [`writer::check_dimension_names_hold`] asks this of a dataset about to be written.
fn named_dim(
    ds: &mut Dataset,
    group: GroupId,
    name: &str,
    len: u64,
    fqn: &str,
    zkey: &str,
) -> Result<DimId> {
    let mut cur = Some(group);
    while let Some(g) = cur {
        if let Some(d) = ds.find_dim_in(g, name).filter(|d| ds.dim(*d).len == len) {
            return Ok(d);
        }
        cur = ds.group(g).parent;
    }
    if let Some(d) = ds.find_dim_in(group, name) {
        return Err(Error::meta(
            zkey,
            format!(
                "variable {fqn}: dimension {name} has length {len} here but {} elsewhere \
                 in the same group",
                ds.dim(d).len
            ),
        ));
    }
    let why = match name {
        "" => Some("is empty"),
        n if n.contains('/') => Some("holds a '/'"),
        _ => None,
    };
    if let Some(why) = why {
        // xarray writes and reads such a name; netCDF has none, and CDL and full names show
        // it as something else (a path, no name at all).
        log::warn!(
            "{fqn}: its dimension name {} {why}, which no netCDF name does: kept as it is, as \
             xarray reads it (a copy to NCZarr refuses it), though CDL and full names show it \
             ambiguously",
            quoted(name)
        );
    }
    // netCDF has no fixed dimension of length 0: netcdf-c reads one as unlimited.
    Ok(ds.add_dim(group, name, len, len == 0))
}

/// A list of non-negative integers at member `field`.
fn u64_list(key: &str, j: &Json, field: &str) -> Result<Vec<u64>> {
    match j.get(field) {
        Some(Json::Arr(items)) => items
            .iter()
            .map(|i| {
                i.as_u64().ok_or_else(|| {
                    Error::meta(
                        key,
                        format!("{field}: {} is not a non-negative integer", i.unparse()),
                    )
                })
            })
            .collect(),
        Some(other) => Err(Error::meta(
            key,
            format!("{field}: {} is not a list", other.unparse()),
        )),
        None => Err(Error::meta(key, format!("missing {field}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::AttrValue;
    use std::collections::BTreeMap;

    /// A read-only map over a sorted table.
    #[derive(Debug, Default)]
    struct Table(BTreeMap<String, Vec<u8>>);

    impl ZMap for Table {
        fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
            Ok(self.0.get(key).cloned())
        }
        fn put(&self, _: &str, _: &[u8]) -> Result<()> {
            Err(Error::NotPermitted("read-only".into()))
        }
        fn delete(&self, _: &str) -> Result<()> {
            Err(Error::NotPermitted("read-only".into()))
        }
        fn search(&self, prefix: &str) -> Result<Vec<String>> {
            let mut out: Vec<String> = self
                .0
                .keys()
                .filter_map(|k| {
                    let rest = if prefix.is_empty() {
                        k.as_str()
                    } else {
                        k.strip_prefix(prefix)?.strip_prefix('/')?
                    };
                    rest.split('/').next().map(str::to_string)
                })
                .collect();
            out.dedup();
            Ok(out)
        }
        fn read_only(&self) -> bool {
            true
        }
        fn describe(&self) -> String {
            "table".into()
        }
    }

    fn table(objs: &[(&str, &str)]) -> Table {
        Table(
            objs.iter()
                .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
                .collect(),
        )
    }

    fn open(objs: &[(&str, &str)]) -> Result<Dataset> {
        read_dataset(&table(objs), &Mode::default())
    }

    fn dim_names(ds: &Dataset, v: &str) -> Vec<String> {
        let v = ds.var(ds.find_var(v).unwrap());
        v.dims.iter().map(|d| ds.dim_fqn(*d)).collect()
    }

    // Written by Debian's ncgen 4.9.0 (`mode=nczarr,file`) from a small CDL file.
    const V490: &[(&str, &str)] = &[
        (
            ".zgroup",
            r#"{"zarr_format": 2, "_NCZARR_SUPERBLOCK": {"version": "2.0.0"}, "_NCZARR_GROUP": {"dims": {"d2": 2, "u": 3}, "vars": ["c","r","s"], "groups": []}}"#,
        ),
        (
            "c/.zattrs",
            r#"{"_ARRAY_DIMENSIONS": ["d2"], "_NCZARR_ATTR": {}}"#,
        ),
        (
            "c/.zarray",
            r#"{"zarr_format": 2, "shape": [2], "dtype": "<U1", "chunks": [2], "fill_value": "", "order": "C", "compressor": null, "filters": null, "_NCZARR_ARRAY": {"dimrefs": ["/d2"], "storage": "chunked"}}"#,
        ),
        (
            ".zattrs",
            r#"{"charattr": "ghi", "ia": [1,2], "da": 1.5, "ua": 7, "_NCProperties": "version=2,netcdf=4.9.0,nczarr=2.0.0", "_NCZARR_ATTR": {"types": {"charattr": "<U1", "ia": "<i4", "da": "<f8", "ua": "<u1", "_NCProperties": "<U1"}}}"#,
        ),
        (
            "s/.zattrs",
            r#"{"_ARRAY_DIMENSIONS": [], "_NCZARR_ATTR": {}}"#,
        ),
        (
            "s/.zarray",
            r#"{"zarr_format": 2, "shape": [1], "dtype": "<f4", "chunks": [1], "fill_value": 9.96921e+36, "order": "C", "compressor": null, "filters": null, "_NCZARR_ARRAY": {"dimrefs": [], "storage": "scalar"}}"#,
        ),
        (
            "r/.zattrs",
            r#"{"_ARRAY_DIMENSIONS": ["u"], "_NCZARR_ATTR": {}}"#,
        ),
        (
            "r/.zarray",
            r#"{"zarr_format": 2, "shape": [3], "dtype": "<i4", "chunks": [3], "fill_value": -2147483647, "order": "C", "compressor": null, "filters": null, "_NCZARR_ARRAY": {"dimrefs": ["/u"], "storage": "chunked"}}"#,
        ),
    ];

    /// Enough variables for the objects to be read on several threads: all come back, in
    /// order, both from an NCZarr group list and from a pure Zarr listing; a corrupt one
    /// fails the open as it would one object at a time.
    #[test]
    fn many_variables_read_in_parallel() {
        let names: Vec<String> = (0..PARALLEL_OPEN_MIN * 2)
            .map(|i| format!("v{i:03}"))
            .collect();
        let zarray = r#"{"zarr_format": 2, "shape": [4], "dtype": "<i2", "chunks": [4], "fill_value": 0, "order": "C", "compressor": null, "filters": null}"#;
        let mut objs: Vec<(String, String)> = vec![(
            ".zgroup".into(),
            format!(
                r#"{{"zarr_format": 2, "_NCZARR_SUPERBLOCK": {{"version": "2.0.0"}}, "_NCZARR_GROUP": {{"dims": {{"x": 4}}, "vars": {:?}, "groups": []}}}}"#,
                names
            ),
        )];
        for (i, n) in names.iter().enumerate() {
            objs.push((format!("{n}/.zarray"), zarray.into()));
            objs.push((
                format!("{n}/.zattrs"),
                format!(r#"{{"_ARRAY_DIMENSIONS": ["x"], "i": {i}}}"#),
            ));
        }
        let open_owned = |objs: &[(String, String)]| {
            let refs: Vec<(&str, &str)> =
                objs.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            open(&refs)
        };
        let ds = open_owned(&objs).unwrap();
        let got: Vec<&str> = ds
            .group(Dataset::ROOT)
            .vars
            .iter()
            .map(|v| ds.var(*v).name.as_str())
            .collect();
        assert_eq!(got, names);
        for (i, v) in ds.group(Dataset::ROOT).vars.iter().enumerate() {
            let attr = ds.var(*v).attrs.iter().find(|a| a.name == "i").unwrap();
            // An untyped JSON integer that fits is a netCDF int, as netcdf-c reads it.
            assert_eq!(
                attr.value,
                AttrValue::Int(vec![i as i32]),
                "{}",
                ds.var(*v).name
            );
        }
        // NCZarr 1.0.0: the group list, dimension references and attribute types are
        // objects of their own, read with the rest.
        let mut v1: Vec<(String, String)> = vec![
            (".zgroup".into(), r#"{"zarr_format": 2}"#.into()),
            (".nczarr".into(), r#"{"nczarr_version": "1.0.0"}"#.into()),
            (
                ".nczgroup".into(),
                format!(r#"{{"dims": {{"x": 4}}, "vars": {names:?}, "groups": []}}"#),
            ),
        ];
        for (i, n) in names.iter().enumerate() {
            v1.push((format!("{n}/.zarray"), zarray.into()));
            v1.push((format!("{n}/.zattrs"), format!(r#"{{"i": {i}}}"#)));
            v1.push((format!("{n}/.nczarray"), r#"{"dimrefs": ["/x"]}"#.into()));
            v1.push((
                format!("{n}/.nczattrs"),
                r#"{"types": {"i": "<i8"}}"#.into(),
            ));
        }
        let ds = open_owned(&v1).unwrap();
        assert_eq!(ds.group(Dataset::ROOT).vars.len(), names.len());
        for (i, v) in ds.group(Dataset::ROOT).vars.iter().enumerate() {
            let var = ds.var(*v);
            assert_eq!(ds.dim_fqn(var.dims[0]), "/x", "{}", var.name);
            let attr = var.attrs.iter().find(|a| a.name == "i").unwrap();
            assert_eq!(attr.value, AttrValue::Int64(vec![i as i64]), "{}", var.name);
        }

        // Pure Zarr: no group list, the children are found by listing.
        let mut pure = objs.clone();
        pure[0].1 = r#"{"zarr_format": 2}"#.into();
        let ds = open_owned(&pure).unwrap();
        assert_eq!(ds.group(Dataset::ROOT).vars.len(), names.len());

        let mut corrupt = objs.clone();
        corrupt[101].1 = "{not json".into();
        let bad = corrupt[101].0.clone();
        match open_owned(&corrupt) {
            Err(Error::CorruptJson { key, .. }) => assert_eq!(key, bad),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn upper_case_keys_of_4_9_0() {
        let ds = open(V490).unwrap();
        assert_eq!(ds.provenance.layout, Some(NczarrLayout::UpperCaseKeys));
        let root = ds.group(Dataset::ROOT);
        let dims: Vec<_> = root
            .dims
            .iter()
            .map(|d| (ds.dim(*d).name.as_str(), ds.dim(*d).len))
            .collect();
        assert_eq!(dims, [("d2", 2), ("u", 3)]);
        let vars: Vec<_> = root.vars.iter().map(|v| ds.var(*v).name.as_str()).collect();
        assert_eq!(vars, ["c", "r", "s"]);
        let c = ds.var(ds.find_var("c").unwrap());
        assert_eq!(c.nctype, NcType::Char);
        // Stored one byte per character despite `<U1`.
        assert_eq!(c.storage.dtype.as_ref().unwrap().size, 1);
        assert_eq!(c.storage.fill_value, Some(vec![0]));
        let s = ds.var(ds.find_var("s").unwrap());
        assert!(s.dims.is_empty());
        assert_eq!(s.storage.shape, vec![1]);
        let attrs: Vec<_> = root
            .attrs
            .iter()
            .map(|a| (a.name.as_str(), a.value.clone()))
            .collect();
        assert_eq!(
            attrs,
            [
                ("charattr", AttrValue::Char(b"ghi".to_vec())),
                ("ia", AttrValue::Int(vec![1, 2])),
                ("da", AttrValue::Double(vec![1.5])),
                ("ua", AttrValue::UByte(vec![7])),
            ]
        );
    }

    // Written by netcdf-c 4.10.1 (netCDF4-python 1.7.5, mode=nczarr,file).
    const V4101: &[(&str, &str)] = &[
        (".zgroup", r#"{"zarr_format": 2}"#),
        (
            "t/.zattrs",
            r#"{"_ARRAY_DIMENSIONS": ["d2"], "_nczarr_array": {"dimension_references": ["/d2"], "storage": "chunked"}, "_nczarr_attr": {"types": {"_nczarr_array": "|J0", "_nczarr_attr": "|J0"}}}"#,
        ),
        (
            "t/.zarray",
            r#"{"zarr_format": 2, "shape": [2], "dtype": "|S128", "chunks": [2], "fill_value": "", "order": "C", "compressor": null, "filters": null}"#,
        ),
        (
            "c/.zattrs",
            r#"{"_ARRAY_DIMENSIONS": ["d2"], "_nczarr_array": {"dimension_references": ["/d2"], "storage": "chunked"}, "_nczarr_attr": {"types": {"_nczarr_array": "|J0", "_nczarr_attr": "|J0"}}}"#,
        ),
        (
            "c/.zarray",
            r#"{"zarr_format": 2, "shape": [2], "dtype": ">S1", "chunks": [2], "fill_value": "", "order": "C", "compressor": null, "filters": null}"#,
        ),
        ("g/.zgroup", r#"{"zarr_format": 2}"#),
        (
            "g/v/.zattrs",
            r#"{"_FillValue": 7, "_ARRAY_DIMENSIONS": ["e","d2"], "_nczarr_array": {"dimension_references": ["/g/e","/d2"], "storage": "chunked"}, "_nczarr_attr": {"types": {"_FillValue": "<u2", "_nczarr_array": "|J0", "_nczarr_attr": "|J0"}}}"#,
        ),
        (
            "g/v/.zarray",
            r#"{"zarr_format": 2, "shape": [4,2], "dtype": "<u2", "chunks": [4,2], "fill_value": 7, "order": "C", "compressor": null, "filters": null}"#,
        ),
        (
            "g/.zattrs",
            r#"{"_nczarr_group": {"dimensions": {"e": 4}, "arrays": ["v"], "groups": []}, "_nczarr_attr": {"types": {"_nczarr_group": "|J0", "_nczarr_attr": "|J0"}}}"#,
        ),
        (
            ".zattrs",
            r#"{"_NCProperties": "version=2,netcdf=4.10.1,nczarr=2.0.0", "charattr": "ghi", "ia": [1,2], "sa": ["a","b"], "_nczarr_group": {"dimensions": {"d2": 2, "u": {"size": 3, "unlimited": 1}}, "arrays": ["c","r","s","t"], "groups": ["g"]}, "_nczarr_superblock": {"version": "2.0.0"}, "_nczarr_attr": {"types": {"_NCProperties": ">S1", "charattr": ">S1", "ia": "<i8", "sa": "|S128", "_nczarr_group": "|J0", "_nczarr_superblock": "|J0", "_nczarr_attr": "|J0"}}}"#,
        ),
        (
            "s/.zattrs",
            r#"{"_ARRAY_DIMENSIONS": ["_scalar_"], "_nczarr_array": {"dimension_references": [], "scalar": 1, "storage": "chunked"}, "_nczarr_attr": {"types": {"_nczarr_array": "|J0", "_nczarr_attr": "|J0"}}}"#,
        ),
        (
            "s/.zarray",
            r#"{"zarr_format": 2, "shape": [1], "dtype": "<f4", "chunks": [1], "fill_value": 9.96921e+36, "order": "C", "compressor": null, "filters": null}"#,
        ),
        (
            "r/.zattrs",
            r#"{"_ARRAY_DIMENSIONS": ["u"], "_nczarr_array": {"dimension_references": ["/u"], "storage": "chunked"}, "_nczarr_attr": {"types": {"_nczarr_array": "|J0", "_nczarr_attr": "|J0"}}}"#,
        ),
        (
            "r/.zarray",
            r#"{"zarr_format": 2, "shape": [3], "dtype": "<i4", "chunks": [1024], "fill_value": -2147483647, "order": "C", "compressor": null, "filters": null}"#,
        ),
    ];

    #[test]
    fn current_layout_of_4_10_1() {
        let ds = open(V4101).unwrap();
        let u = ds.find_dim("/u").unwrap();
        assert!(ds.dim(u).unlimited);
        assert_eq!(ds.dim(u).len, 3);
        assert_eq!(ds.var(ds.find_var("c").unwrap()).nctype, NcType::Char);
        let t = ds.var(ds.find_var("t").unwrap());
        assert_eq!((t.nctype, t.string_width), (NcType::String, 128));
        assert_eq!(t.storage.fill_value, Some(vec![0; 128]));
        let s = ds.var(ds.find_var("s").unwrap());
        assert!(s.dims.is_empty());
        assert_eq!(
            s.storage.fill_value,
            Some(9.96921e36f32.to_le_bytes().to_vec())
        );
        assert_eq!(dim_names(&ds, "g/v"), ["/g/e", "/d2"]);
        let v = ds.var(ds.find_var("g/v").unwrap());
        assert_eq!(v.nctype, NcType::UShort);
        assert_eq!(v.attrs[0].value, AttrValue::UShort(vec![7]));
        assert_eq!(v.storage.fill_value, Some(7u16.to_le_bytes().to_vec()));
        let root = ds.group(Dataset::ROOT);
        let names: Vec<_> = root.attrs.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["charattr", "ia", "sa"]);
        assert_eq!(root.attrs[1].value, AttrValue::Int64(vec![1, 2]));
        assert_eq!(
            root.attrs[2].value,
            AttrValue::Str(vec!["a".into(), "b".into()])
        );
    }

    /// netcdf-c writes `"fill_value": null` for exactly its no-fill variables, keeping any
    /// `_FillValue` as an attribute; only a missing `fill_value` leaves the attribute to say
    /// the fill.
    #[test]
    fn a_null_fill_value_means_no_fill_beside_a_fill_attribute() {
        let fill_of = |fill_member: &str| {
            let mut objs = V4101.to_vec();
            let i = objs.iter().position(|(k, _)| *k == "g/v/.zarray").unwrap();
            let zarray = objs[i].1.replace(r#""fill_value": 7, "#, fill_member);
            objs[i].1 = Box::leak(zarray.into_boxed_str());
            let ds = open(&objs).unwrap();
            let v = ds.var(ds.find_var("g/v").unwrap());
            assert_eq!(
                v.attr("_FillValue").unwrap().value,
                AttrValue::UShort(vec![7])
            );
            v.storage.fill_value.clone()
        };
        assert_eq!(fill_of(r#""fill_value": null, "#), None);
        assert_eq!(
            fill_of(r#""fill_value": 9, "#),
            Some(9u16.to_le_bytes().to_vec())
        );
        assert_eq!(fill_of(""), Some(7u16.to_le_bytes().to_vec()));
    }

    #[test]
    fn unlimited_takes_the_largest_extent() {
        let mut objs = V4101.to_vec();
        let i = objs.iter().position(|(k, _)| *k == "r/.zarray").unwrap();
        objs[i].1 = r#"{"zarr_format": 2, "shape": [5], "dtype": "<i4", "chunks": [4], "fill_value": null, "order": "C", "compressor": null, "filters": null}"#;
        let ds = open(&objs).unwrap();
        assert_eq!(ds.dim(ds.find_dim("/u").unwrap()).len, 5);
    }

    #[test]
    fn nczarr_read_as_pure_zarr() {
        let mode = Mode {
            format: Some(Format::Zarr),
            ..Mode::default()
        };
        let ds = read_dataset(&table(V4101), &mode).unwrap();
        // Pure Zarr: `>S1` is a one-byte string, `["_scalar_"]` with shape [1] a scalar,
        // the types map applies, with `>S1` a string too (netcdf-c 4.10.1's nc_inq_att in
        // mode=zarr: charattr NC_STRING, ia NC_INT64, sa NC_STRING).
        let c = ds.var(ds.find_var("c").unwrap());
        assert_eq!((c.nctype, c.string_width), (NcType::String, 1));
        assert_eq!(dim_names(&ds, "c"), ["/d2"]);
        assert!(ds.var(ds.find_var("s").unwrap()).dims.is_empty());
        assert_eq!(dim_names(&ds, "g/v"), ["/g/e", "/d2"]);
        let root = ds.group(Dataset::ROOT);
        let names: Vec<&str> = root.attrs.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["charattr", "ia", "sa"]);
        assert_eq!(root.attrs[0].value, AttrValue::Str(vec!["ghi".into()]));
        assert_eq!(root.attrs[1].value, AttrValue::Int64(vec![1, 2]));
        assert_eq!(
            root.attrs[2].value,
            AttrValue::Str(vec!["a".into(), "b".into()])
        );
    }

    /// netcdf-c 4.10.1's `mode=zarr` (netCDF4-python 1.7.5) writes `fill_value="dj"` as
    /// `"fill_value": "dj"` beside `"_FillValue": "dj"`, and reads unwritten chunks as `dj`;
    /// zarr-python writes base64 and no attribute (base64 of `ab` is `YWI=`).
    #[test]
    fn pure_string_fill_is_text_where_the_fill_attribute_spells_it_so() {
        let fill_of = |fill: &str, attr: Option<&str>| {
            let zarray = format!(
                r#"{{"zarr_format": 2, "shape": [4], "dtype": "|S4", "chunks": [2], "fill_value": {fill}}}"#
            );
            let zattrs = match attr {
                Some(a) => format!(r#"{{"_FillValue": {a}, "_ARRAY_DIMENSIONS": ["x"]}}"#),
                None => r#"{"_ARRAY_DIMENSIONS": ["x"]}"#.to_string(),
            };
            let objs = [
                (".zgroup", r#"{"zarr_format": 2}"#),
                ("s/.zarray", zarray.as_str()),
                ("s/.zattrs", zattrs.as_str()),
            ];
            let ds = read_dataset(&table(&objs), &Mode::default()).unwrap();
            let v = ds.var(ds.find_var("s").unwrap());
            v.storage.fill_value.clone().unwrap()
        };
        assert_eq!(fill_of(r#""dj""#, Some(r#""dj""#)), b"dj\0\0");
        assert_eq!(fill_of(r#""abcd""#, Some(r#""abcd""#)), b"abcd");
        assert_eq!(fill_of(r#""YWI=""#, None), b"ab\0\0");
        // An attribute of another spelling leaves the fill to zarr-python's reading.
        assert_eq!(fill_of(r#""YWI=""#, Some(r#""ab""#)), b"ab\0\0");
    }

    const XARRAY_GROUP: &[(&str, &str)] = &[
        (".zgroup", r#"{"zarr_format": 2}"#),
        (
            "foo/.zarray",
            r#"{"zarr_format": 2, "shape": [2,3], "dtype": "<f8", "chunks": [2,3], "fill_value": "NaN", "order": "C", "compressor": null, "filters": null}"#,
        ),
        ("foo/.zattrs", r#"{"_ARRAY_DIMENSIONS": ["x","y"]}"#),
        (
            "x/.zarray",
            r#"{"zarr_format": 2, "shape": [2], "dtype": "<i8", "chunks": [2], "fill_value": null, "order": "C", "compressor": null, "filters": null}"#,
        ),
        ("x/.zattrs", r#"{"_ARRAY_DIMENSIONS": ["x"]}"#),
        (
            "y/.zarray",
            r#"{"zarr_format": 2, "shape": [3], "dtype": "<i8", "chunks": [3], "fill_value": null, "order": "C", "compressor": null, "filters": null}"#,
        ),
        ("y/.zattrs", r#"{"_ARRAY_DIMENSIONS": ["y"]}"#),
        ("g/.zgroup", r#"{"zarr_format": 2}"#),
        (
            "g/z/.zarray",
            r#"{"zarr_format": 2, "shape": [4], "dtype": "|b1", "chunks": [4], "fill_value": false, "order": "C", "compressor": null, "filters": null}"#,
        ),
        ("g/z/.zattrs", r#"{"_ARRAY_DIMENSIONS": ["y"]}"#),
        (
            "g/w/.zarray",
            r#"{"zarr_format": 2, "shape": [2], "dtype": "<i2", "chunks": [2], "fill_value": 0, "order": "F", "compressor": {"id": "zlib", "level": 1}, "filters": [{"id": "shuffle", "elementsize": 2}], "dimension_separator": "/"}"#,
        ),
        (
            "g/w/.zattrs",
            r#"{"_ARRAY_DIMENSIONS": ["x"], "_FillValue": 0}"#,
        ),
    ];

    /// The layout of nczarr_test/ref_xarraygroup.cdl: x, y in the root, y = 4 in g.
    #[test]
    fn xarray_dims_in_the_variables_group() {
        let ds = open(XARRAY_GROUP).unwrap();
        assert_eq!(dim_names(&ds, "foo"), ["/x", "/y"]);
        assert_eq!(dim_names(&ds, "g/z"), ["/g/y"]);
        assert_eq!(dim_names(&ds, "g/w"), ["/x"]);
        assert_eq!(ds.dim(ds.find_dim("/g/y").unwrap()).len, 4);
        let z = ds.var(ds.find_var("g/z").unwrap());
        assert_eq!(z.nctype, NcType::UByte);
        assert_eq!(z.storage.fill_value, Some(vec![0]));
        let w = ds.var(ds.find_var("g/w").unwrap());
        assert_eq!(w.storage.order, ChunkOrder::F);
        assert_eq!(
            w.storage.key_encoding,
            ChunkKeyEncoding::V2 { separator: '/' }
        );
        assert_eq!(w.attrs[0].value, AttrValue::Short(vec![0]));
        assert_eq!(
            w.storage.codecs,
            CodecSpec::V2 {
                filters: vec![serde_json::json!({"id": "shuffle", "elementsize": 2})],
                compressor: Some(serde_json::json!({"id": "zlib", "level": 1})),
            }
        );
        // Pure Zarr lists variables, then groups, each by name.
        let names: Vec<_> = ds
            .group(Dataset::ROOT)
            .vars
            .iter()
            .map(|v| ds.var(*v).name.as_str())
            .collect();
        assert_eq!(names, ["foo", "x", "y"]);
    }

    #[test]
    fn noxarray_gives_anonymous_root_dims() {
        let mode = Mode {
            xarray: Some(false),
            ..Mode::default()
        };
        let ds = read_dataset(&table(XARRAY_GROUP), &mode).unwrap();
        assert_eq!(
            dim_names(&ds, "foo"),
            ["/_Anonymous_Dim_2", "/_Anonymous_Dim_3"]
        );
        assert_eq!(dim_names(&ds, "g/z"), ["/_Anonymous_Dim_4"]);
    }

    #[test]
    fn conflicting_xarray_lengths_are_an_error() {
        let objs = [
            (".zgroup", r#"{"zarr_format": 2}"#),
            (
                "a/.zarray",
                r#"{"zarr_format": 2, "shape": [2], "dtype": "<i4", "chunks": [2], "fill_value": 0}"#,
            ),
            ("a/.zattrs", r#"{"_ARRAY_DIMENSIONS": ["x"]}"#),
            (
                "b/.zarray",
                r#"{"zarr_format": 2, "shape": [3], "dtype": "<i4", "chunks": [3], "fill_value": 0}"#,
            ),
            ("b/.zattrs", r#"{"_ARRAY_DIMENSIONS": ["x"]}"#),
        ];
        let e = open(&objs).unwrap_err().to_string();
        assert!(e.contains("/b") && e.contains("dimension x"), "{e}");
    }

    /// xarray writes and reads any string as a dimension name: `x/y` and `p/q` are two
    /// dimensions, `""` a third, each kept under its own name.
    #[test]
    fn xarray_dimension_names_are_kept_as_written() {
        let array = |len: u32| {
            format!(
                r#"{{"zarr_format": 2, "shape": [{len}], "dtype": "<i4", "chunks": [2], "fill_value": 0}}"#
            )
        };
        let objs = [
            (".zgroup", r#"{"zarr_format": 2}"#.to_string()),
            ("a/.zarray", array(2)),
            ("a/.zattrs", r#"{"_ARRAY_DIMENSIONS": ["x/y"]}"#.to_string()),
            ("b/.zarray", array(2)),
            ("b/.zattrs", r#"{"_ARRAY_DIMENSIONS": ["p/q"]}"#.to_string()),
            ("c/.zarray", array(3)),
            ("c/.zattrs", r#"{"_ARRAY_DIMENSIONS": [""]}"#.to_string()),
            ("d/.zarray", array(3)),
            ("d/.zattrs", r#"{"_ARRAY_DIMENSIONS": [1]}"#.to_string()),
        ];
        let objs: Vec<(&str, &str)> = objs.iter().map(|(k, v)| (*k, v.as_str())).collect();
        let ds = open(&objs).unwrap();
        let names = |v: &str| -> Vec<String> {
            let var = ds.var(ds.find_var(v).unwrap());
            var.dims.iter().map(|d| ds.dim(*d).name.clone()).collect()
        };
        assert_eq!(names("a"), ["x/y"]);
        assert_eq!(names("b"), ["p/q"]);
        assert_eq!(names("c"), [""]);
        // Not a name: the dimension is anonymous.
        assert_eq!(names("d"), ["_Anonymous_Dim_3"]);
    }

    #[test]
    fn unsupported_dtype_stays_visible() {
        let objs = [
            (".zgroup", r#"{"zarr_format": 2}"#),
            (
                "c/.zarray",
                r#"{"zarr_format": 2, "shape": [2], "dtype": "<c8", "chunks": [2], "fill_value": null}"#,
            ),
            (
                "o/.zarray",
                r#"{"zarr_format": 2, "shape": [2], "dtype": "|O", "chunks": [2], "fill_value": 0, "filters": [{"id": "json2"}]}"#,
            ),
            (
                "t/.zarray",
                r#"{"zarr_format": 2, "shape": [2], "dtype": "<M8[ns]", "chunks": [2], "fill_value": 0}"#,
            ),
            (
                "h/.zarray",
                r#"{"zarr_format": 2, "shape": [2], "dtype": "<f2", "chunks": [2], "fill_value": 0}"#,
            ),
        ];
        let ds = open(&objs).unwrap();
        // Half floats are read, widened to float.
        let half = ds.var(ds.find_var("h").unwrap());
        assert_eq!(
            (half.nctype, half.storage.unreadable.as_ref()),
            (NcType::Float, None)
        );
        for v in ["c", "o", "t"] {
            let var = ds.var(ds.find_var(v).unwrap());
            assert_eq!(var.storage.dtype, None, "{v}");
            assert!(var.storage.unreadable.is_some(), "{v}");
            assert_eq!(dim_names(&ds, v), ["/_Anonymous_Dim_2"]);
        }
    }

    /// Checked against zarr-python 3.1.6 and netCDF4-python on netcdf-c 4.9.0, 4.9.1 and
    /// 4.10.1 (interop/test_zarr_python.py has the oracle test).
    #[test]
    fn v2_forms_the_references_refuse_or_read() {
        let zarray = |edit: &str| {
            format!(
                r#"{{"zarr_format": 2, "shape": [2], "chunks": [2], "fill_value": 0,
                "compressor": null, "filters": null, "dtype": "<i4", "order": "C"{edit}}}"#
            )
        };
        let var = |edit: &str| {
            let a = zarray(edit);
            open(&[(".zgroup", r#"{"zarr_format": 2}"#), ("a/.zarray", &a)])
                .map(|ds| ds.var(ds.find_var("a").unwrap()).storage.clone())
        };
        // No order: zarr-python refuses, netcdf-c crashes.
        for order in ["null", "1"] {
            let e = var(&format!(r#", "order": {order}"#))
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("order {order} is not C or F")), "{e}");
            assert!(e.contains("a/.zarray"), "{e}");
        }
        // The writer's byte order: refused by all.
        let st = var(r#", "dtype": "=i4""#).unwrap();
        let why = st.unreadable.unwrap();
        assert!(why.contains(r#"dtype "=i4": byte order "=""#), "{why}");
        // Single bytes have no byte order.
        assert_eq!(var(r#", "dtype": "=u1""#).unwrap().unreadable, None);
        // netcdf-c reads these as <i4 (the null separator as "."), so they are read.
        for edit in [
            r#", "dimension_separator": null"#,
            r#", "dtype": "<i04""#,
            r#", "dtype": "<i+4""#,
            r#", "dtype": "|i4""#,
        ] {
            let st = var(edit).unwrap();
            assert_eq!(st.unreadable, None, "{edit}");
            assert_eq!(st.dtype.unwrap().size, 4, "{edit}");
        }
    }

    #[test]
    fn object_strings_are_as_wide_as_the_longest_value() {
        // numcodecs' vlen-utf8: a count, then each value's length and bytes.
        fn vlen(values: &[&str]) -> Vec<u8> {
            let mut out = (values.len() as u32).to_le_bytes().to_vec();
            for v in values {
                out.extend((v.len() as u32).to_le_bytes());
                out.extend(v.as_bytes());
            }
            out
        }
        let mut t = table(&[
            (".zgroup", r#"{"zarr_format": 2}"#),
            (
                "o/.zarray",
                r#"{"zarr_format": 2, "shape": [3], "dtype": "|O", "chunks": [2], "fill_value": "fill", "compressor": null, "filters": [{"id": "vlen-utf8"}]}"#,
            ),
            (
                "f/.zarray",
                r#"{"zarr_format": 2, "shape": [1], "dtype": "|O", "chunks": [1], "fill_value": "a long fill", "compressor": null, "filters": [{"id": "vlen-bytes"}]}"#,
            ),
        ]);
        t.0.insert("o/0".into(), vlen(&["ab", "cdefg"]));
        t.0.insert("o/1".into(), vlen(&["x", ""]));
        let ds = read_dataset(&t, &Mode::default()).unwrap();
        let o = ds.var(ds.find_var("o").unwrap());
        assert_eq!((o.nctype, o.string_width), (NcType::String, 5));
        assert_eq!(o.storage.fill_value.as_deref(), Some(&b"fill\0"[..]));
        // An unwritten array is as wide as its fill.
        let f = ds.var(ds.find_var("f").unwrap());
        assert_eq!((f.nctype, f.string_width), (NcType::String, 11));
    }

    #[test]
    fn unicode_strings_are_four_bytes_a_character() {
        let objs = [
            (".zgroup", r#"{"zarr_format": 2}"#),
            (
                "u/.zarray",
                r#"{"zarr_format": 2, "shape": [], "dtype": "<U5", "chunks": [], "fill_value": "ab"}"#,
            ),
        ];
        let ds = open(&objs).unwrap();
        let u = ds.var(ds.find_var("u").unwrap());
        assert_eq!((u.nctype, u.string_width), (NcType::String, 20));
        let mut fill = b"ab".to_vec();
        fill.resize(20, 0);
        assert_eq!(u.storage.fill_value, Some(fill));
    }

    /// zarr-python 3.1.6 refuses an array whose `fill_value` does not fit its dtype ("Python
    /// integer 300 out of bounds for uint8", "Invalid type: NaN. Expected an integer.",
    /// "Invalid type: [1, 2]. Expected an integer.") and reads the other arrays: so does
    /// nczarrfs, whose read of that variable says why.
    #[test]
    fn a_fill_value_that_does_not_fit_makes_its_variable_unreadable() {
        for (dtype, fill, why) in [
            ("|u1", "300", "fill_value 300 does not fit dtype |u1"),
            (
                "<i4",
                r#""NaN""#,
                r#"fill_value "NaN" does not fit dtype <i4"#,
            ),
            ("<i2", "2.5", "fill_value 2.5 does not fit dtype <i2"),
            (
                "<f8",
                r#""abc""#,
                r#"fill_value "abc" does not fit dtype <f8"#,
            ),
            // One element: a list is not its first value.
            ("<i4", "[1, 2]", "fill_value [1,2] does not fit dtype <i4"),
            (
                "|O",
                "{}",
                "fill_value {} of an object array is not a value",
            ),
        ] {
            let v = format!(
                r#"{{"zarr_format": 2, "shape": [2], "dtype": "{dtype}", "chunks": [2],
                "fill_value": {fill}, "filters": [{{"id": "vlen-utf8"}}]}}"#
            );
            let w = r#"{"zarr_format": 2, "shape": [2], "dtype": "<i4", "chunks": [2], "fill_value": 0}"#;
            let objs = [
                (".zgroup", r#"{"zarr_format": 2}"#),
                ("v/.zarray", v.as_str()),
                ("w/.zarray", w),
            ];
            let ds = open(&objs).unwrap();
            let st = &ds.var(ds.find_var("v").unwrap()).storage;
            assert_eq!(st.unreadable.as_deref(), Some(why), "{dtype} {fill}");
            let w = ds.find_var("w").unwrap();
            assert_eq!(ds.var(w).storage.unreadable, None);
        }
    }

    fn bad(zarray: &str) -> String {
        let objs = [(".zgroup", r#"{"zarr_format": 2}"#), ("v/.zarray", zarray)];
        open(&objs).unwrap_err().to_string()
    }

    #[test]
    fn invalid_arrays_are_refused() {
        let e = bad(
            r#"{"zarr_format": 2, "shape": [2, 3], "dtype": "<i4", "chunks": [2], "fill_value": 0}"#,
        );
        assert!(e.contains("v/.zarray") && e.contains("rank"), "{e}");
        let e = bad(
            r#"{"zarr_format": 2, "shape": [2], "dtype": "<i4", "chunks": [0], "fill_value": 0}"#,
        );
        assert!(e.contains("chunk size 0"), "{e}");
        let e = bad(
            r#"{"zarr_format": 2, "shape": [-1], "dtype": "<i4", "chunks": [1], "fill_value": 0}"#,
        );
        assert!(e.contains("non-negative"), "{e}");
        let e = bad(
            r#"{"zarr_format": 2, "shape": [4294967296, 4294967296], "dtype": "<i4", "chunks": [1, 1], "fill_value": 0}"#,
        );
        assert!(e.contains("overflows"), "{e}");
        let e = bad(r#"{"zarr_format": 2, "shape": [4294967296, 4294967296], "dtype": "<i8", "chunks": [4294967296, 4294967296], "fill_value": 0}"#.replace("4294967296, 4294967296], \"dtype", "4294967295, 2], \"dtype").as_str());
        assert!(e.contains("too large"), "{e}");
        let e = bad(
            r#"{"zarr_format": 2, "shape": [2], "dtype": "<i4", "chunks": [2], "fill_value": 0, "order": "X"}"#,
        );
        assert!(e.contains("order"), "{e}");
        let e = bad(r#"{"zarr_format": 2, "shape": [2], "#);
        assert!(e.contains("corrupt JSON in \"v/.zarray\""), "{e}");
        // The number 2, not the string.
        let e = bad(
            r#"{"zarr_format": "2", "shape": [2], "dtype": "<i4", "chunks": [2], "fill_value": 0}"#,
        );
        assert!(
            e.contains("v/.zarray") && e.contains("zarr_format \"2\""),
            "{e}"
        );
        let objs = [(".zgroup", r#"{"zarr_format": "2"}"#)];
        let e = open(&objs).unwrap_err().to_string();
        assert!(
            e.contains(".zgroup") && e.contains("zarr_format \"2\""),
            "{e}"
        );
    }

    #[test]
    fn dangling_dimension_reference() {
        let mut objs = V4101.to_vec();
        let i = objs.iter().position(|(k, _)| *k == "g/v/.zattrs").unwrap();
        objs[i].1 = r#"{"_nczarr_array": {"dimension_references": ["/g/nope","/d2"]}}"#;
        let e = open(&objs).unwrap_err().to_string();
        assert!(e.contains("/g/v") && e.contains("/g/nope"), "{e}");
    }

    #[test]
    fn not_a_dataset() {
        let e = open(&[("x.txt", "hello")]).unwrap_err();
        assert!(matches!(e, Error::NotZarr { .. }));
        assert!(e.to_string().contains("not a netCDF/Zarr dataset"));
        // A Zarr v3 root group is a dataset (read by the v3 reader), an empty one here.
        let ds = open(&[("zarr.json", r#"{"zarr_format": 3, "node_type": "group"}"#)]).unwrap();
        assert_eq!(ds, Dataset::new());
        let e = open(&[(
            ".zarray",
            r#"{"zarr_format": 2, "shape": [1], "dtype": "<i4", "chunks": [1]}"#,
        )])
        .unwrap_err();
        assert!(matches!(e, Error::Unsupported(_)));
    }

    /// A Zarr version in the location that the store does not have is refused, naming both
    /// (netcdf-c 4.10.1 reads no Zarr v3 at all, and zarr-python refuses a store of the other
    /// format); without it, either is read.
    #[test]
    fn a_zarr_version_the_store_does_not_have_is_refused() {
        let v2 = [(".zgroup", r#"{"zarr_format": 2}"#)];
        let v3 = [("zarr.json", r#"{"zarr_format": 3, "node_type": "group"}"#)];
        let with = |version: u8| Mode {
            zarr_version: Some(version),
            ..Mode::default()
        };
        for (objs, asked, is) in [(&v2, 3, "Zarr v2"), (&v3, 2, "Zarr v3")] {
            let e = read_dataset(&table(objs), &with(asked))
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("asks for Zarr v{asked}")), "{e}");
            assert!(e.contains(&format!("this is a {is} dataset")), "{e}");
            assert!(!e.contains("only Zarr v2 is read"), "{e}");
        }
        for (objs, version) in [(&v2, 2), (&v3, 3)] {
            read_dataset(&table(objs), &with(version)).unwrap();
            open(objs).unwrap();
        }
    }

    /// A group of an NCZarr dataset (netcdf-c 4.10.1's `g/` of a dataset whose `g` holds `w`
    /// along its `lon`), in each NCZarr layout that keeps group metadata in Zarr objects:
    /// its arrays name `/g/lon` from the dataset's root. It is refused as the group it is,
    /// not as invalid metadata, and read as pure Zarr when the location says `zarr`.
    #[test]
    fn a_group_of_an_nczarr_dataset_is_told_apart_from_a_dataset() {
        let array = (
            "w/.zarray",
            r#"{"zarr_format": 2, "shape": [2], "dtype": "<i4", "chunks": [2], "fill_value": 0}"#,
        );
        let in_attrs = [
            (".zgroup", r#"{"zarr_format": 2}"#),
            (
                ".zattrs",
                r#"{"_nczarr_group": {"dimensions": {"lon": 2}, "arrays": ["w"], "groups": []}}"#,
            ),
            array,
            (
                "w/.zattrs",
                r#"{"_ARRAY_DIMENSIONS": ["lon"], "_nczarr_array": {"dimension_references": ["/g/lon"]}}"#,
            ),
        ];
        let in_objects = [
            (
                ".zgroup",
                r#"{"zarr_format": 2, "_nczarr_group": {"dims": {"lon": 2}, "vars": ["w"], "groups": []}}"#,
            ),
            array,
            (
                "w/.zattrs",
                r#"{"_ARRAY_DIMENSIONS": ["lon"], "_nczarr_array": {"dimrefs": ["/g/lon"]}}"#,
            ),
        ];
        for objs in [&in_attrs[..], &in_objects[..]] {
            match open(objs) {
                Err(e @ Error::GroupInsideNczarr { .. }) => {
                    assert!(e.to_string().contains("#mode=zarr"), "{e}")
                }
                other => panic!("{other:?}"),
            }
            let pure = Mode {
                format: Some(Format::Zarr),
                ..Mode::default()
            };
            let ds = read_dataset(&table(objs), &pure).unwrap();
            assert_eq!(dim_names(&ds, "w"), ["/lon"]);
        }
    }

    #[test]
    fn consolidated_with_missing_entries_falls_back_to_objects() {
        // `.zmetadata` knows the group but not the array `b` that NCZarr lists.
        let objs = [
            (
                ".zmetadata",
                r#"{"zarr_consolidated_format": 1, "metadata": {
                ".zgroup": {"zarr_format": 2},
                ".zattrs": {"_nczarr_group": {"dimensions": {"d": 2}, "arrays": ["a", "b"], "groups": []}, "_nczarr_superblock": {"version": "2.0.0"}},
                "a/.zarray": {"zarr_format": 2, "shape": [2], "dtype": "<i4", "chunks": [2], "fill_value": 0},
                "a/.zattrs": {"_nczarr_array": {"dimension_references": ["/d"]}}
            }}"#,
            ),
            (
                "b/.zarray",
                r#"{"zarr_format": 2, "shape": [2], "dtype": "<i2", "chunks": [2], "fill_value": 0}"#,
            ),
            (
                "b/.zattrs",
                r#"{"_nczarr_array": {"dimension_references": ["/d"]}}"#,
            ),
        ];
        let ds = open(&objs).unwrap();
        assert_eq!(dim_names(&ds, "a"), ["/d"]);
        assert_eq!(dim_names(&ds, "b"), ["/d"]);
        assert_eq!(ds.var(ds.find_var("b").unwrap()).nctype, NcType::Short);
    }

    #[test]
    fn damage_in_zmetadata_is_blamed_on_its_entry_not_the_intact_object() {
        let zarray = |shape: &str| {
            format!(
                r#"{{"zarr_format": 2, "shape": {shape}, "dtype": "<f4", "chunks": [3, 4], "fill_value": 0}}"#
            )
        };
        let zmetadata = format!(
            r#"{{"zarr_consolidated_format": 1, "metadata": {{
            ".zgroup": {{"zarr_format": 2}}, "t/.zarray": {}}}}}"#,
            zarray("[3]")
        );
        let objs = [
            (".zmetadata", zmetadata.as_str()),
            (".zgroup", r#"{"zarr_format": 2}"#),
            ("t/.zarray", &zarray("[3, 4]")),
        ];
        assert_eq!(
            open(&objs).unwrap_err().to_string(),
            r#"invalid metadata in ".zmetadata" (its entry for "t/.zarray"): chunks [3, 4] and shape [3] differ in rank"#
        );
        // The same damage in the object itself is blamed on the object.
        let objs = [
            (".zgroup", r#"{"zarr_format": 2}"#),
            ("t/.zarray", &zarray("[3]")),
        ];
        assert_eq!(
            open(&objs).unwrap_err().to_string(),
            r#"invalid metadata in "t/.zarray": chunks [3, 4] and shape [3] differ in rank"#
        );
    }

    #[test]
    fn listed_names_name_one_child_each() {
        let root = |group: &str| {
            format!(r#"{{"_nczarr_group": {group}, "_nczarr_superblock": {{"version": "2.0.0"}}}}"#)
        };
        for (group, complaint) in [
            // An empty name is the group itself: a group that is its own child.
            (r#"{"groups": ["g", ""]}"#, "is not a name"),
            (r#"{"groups": ["station/name"]}"#, "is not a name"),
            (r#"{"arrays": ["a", "a"]}"#, "listed twice"),
            (r#"{"dimensions": {"": 2}}"#, "is not a name"),
            (r#""x""#, "not an object"),
            ("null", "not an object"),
        ] {
            let zattrs = root(group);
            let e = open(&[(".zgroup", r#"{"zarr_format": 2}"#), (".zattrs", &zattrs)])
                .unwrap_err()
                .to_string();
            assert!(e.contains(complaint), "{group}: {e}");
        }
    }
}
