//! Writing a [`Dataset`]'s metadata as Zarr v2 objects, in either dialect:
//!
//! - **NCZarr** as netcdf-c 4.10.1 writes it: every group's `.zgroup` and a `.zattrs` holding
//!   the user attributes, `_nczarr_group` (`dimensions` as `{"name": N}` or
//!   `{"name": {"size": N, "unlimited": 1}}`, `arrays`, `groups`), on the root
//!   `_nczarr_superblock` `{"version": "2.0.0"}`, and `_nczarr_attr` `{"types": {...}}`; every
//!   array's `.zarray` and a `.zattrs` with the user attributes, `_ARRAY_DIMENSIONS` (unless
//!   `noxarray`), `_nczarr_array` (`dimension_references`, `storage`, `scalar`) and
//!   `_nczarr_attr`. Scalars are stored with shape `[1]`.
//! - **pure Zarr**: `.zgroup`/`.zarray`, user attributes in `.zattrs` and `_ARRAY_DIMENSIONS`
//!   (unless `noxarray`); scalars have shape `[]`.
//!
//! Differences from netcdf-c, on purpose (see the fixtures' list of its defects):
//! - floats keep full precision (`3.141592653589793`, not `3.14159`);
//! - NaN and infinities are the strings `"NaN"`, `"Infinity"`, `"-Infinity"`;
//! - a `shuffle` filter gets the real element size instead of 0;
//! - byte types are `|i1`/`|u1` (netcdf-c reads them; zarr-python 3 refuses `<i1`).
//!
//! NCZarr's own keys go where [`WriteOptions::layout`] says: the layout of netcdf-c 4.9.3 and
//! later above by default, or, for the netcdf-c releases before it that read nothing else,
//! the keys of 4.9.1–4.9.2 (`_nczarr_superblock` and `_nczarr_group` with `dims`, `vars`,
//! `groups` in `.zgroup`, `_nczarr_array` with `dimrefs` and `storage` in `.zarray`, only
//! `_nczarr_attr` in `.zattrs`) or of 4.8.1–4.9.0 (the same in upper case, char as `<U1`).
//! Those layouts cannot hold an unlimited dimension, nor 4.8.1–4.9.0 a string or a scalar
//! (4.9.0 fails reading its own back): such a dataset is refused, not written for a reader
//! that would fail on it. For 4.8.1–4.9.0, NaN and infinities are the bare tokens `NaN`,
//! `Infinity` and `-Infinity`, the only spelling those releases read.
//!
//! Char variables are `>S1` in NCZarr (netcdf-c reads `|S1` as a string of length 1, so the
//! `>` is what tells it "char"; zarr-python 3 cannot open such an array) and `|S1` in pure
//! Zarr (zarr-python opens it; netcdf-c then sees strings of length 1, and pure Zarr has no
//! char type anyway). Fixed-width byte-string fill values are base64 in pure Zarr (as the
//! Zarr v2 spec says) and plain text in NCZarr (as netcdf-c writes them).
//!
//! In NCZarr, a char attribute whose text is a JSON object or array is stored as that JSON
//! value with type `>S1` (netcdf-c's "JSON convention"), so that other Zarr readers see
//! structured values; netcdf-c (and our reader) print such a value back in their own spelling
//! (`{"k": v, "k2": [1,2]}`), so the convention is applied only to text already spelled that
//! way, and other text stays a string: the attribute always reads back byte for byte.
//!
//! `.zarray` carries `dimension_separator` only when it is `/` (netcdf-c omits the default).
//! Its `shape` is the variable's current shape (its dimensions' lengths), `chunks` the
//! storage's chunk shape when it has the right rank (else one chunk), and `dtype` the
//! storage's dtype when set (else [`default_dtype`]).

use std::collections::HashMap;

use serde_json::{json, Map, Value};

use super::attrs;
use super::json::Json;
pub use super::stored::StoredMetadata;
use super::stored::{json_fingerprint, Rewrite, Stored};

use crate::location::{Format, Mode};
use crate::model::quantize::QuantizeMode;
use crate::model::{
    AttrValue, Attribute, ByteOrder, ChunkKeyEncoding, ChunkOrder, CodecSpec, Dataset, DimId,
    DtypeKind, GroupId, NcType, NczarrLayout, VarId, ZarrDtype,
};
use crate::zmap::{join_key, ZMap, METADATA_LIMIT};
use crate::{Error, Result};

/// Which metadata convention to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Dialect {
    /// NCZarr as netcdf-c 4.10.1 writes it.
    #[default]
    NcZarr,
    /// Pure Zarr v2.
    Zarr,
}

/// How to write the metadata.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteOptions {
    /// The convention.
    pub dialect: Dialect,
    /// Write `_ARRAY_DIMENSIONS` (xarray's dimension names); `false` for `noxarray`.
    pub xarray: bool,
    /// Also write a consolidated `.zmetadata` at the root.
    pub consolidated: bool,
    /// The root's `_NCProperties` text (NCZarr only); `None` writes none.
    pub nc_properties: Option<String>,
    /// Where NCZarr's own keys go (NCZarr only).
    pub layout: NczarrLayout,
}

impl Default for WriteOptions {
    fn default() -> Self {
        WriteOptions {
            dialect: Dialect::NcZarr,
            xarray: true,
            consolidated: false,
            nc_properties: None,
            layout: NczarrLayout::Attributes,
        }
    }
}

impl WriteOptions {
    /// The options a location's `#mode=` asks for: `zarr` → pure Zarr (otherwise NCZarr),
    /// `noxarray` → no `_ARRAY_DIMENSIONS`, `consolidated` → `.zmetadata`.
    pub fn from_mode(mode: &Mode) -> WriteOptions {
        WriteOptions {
            dialect: match mode.format {
                Some(Format::Zarr) => Dialect::Zarr,
                _ => Dialect::NcZarr,
            },
            xarray: mode.xarray != Some(false),
            consolidated: mode.consolidated,
            nc_properties: None,
            layout: NczarrLayout::Attributes,
        }
    }
}

/// The NCZarr version netcdf-c 4.10.1 writes in `_nczarr_superblock`.
pub const NCZARR_VERSION: &str = "2.0.0";

/// Writes every metadata object of `ds` to `map` (chunks are the chunk engine's business).
pub fn write_metadata(map: &dyn ZMap, ds: &Dataset, opts: &WriteOptions) -> Result<()> {
    write_changed_metadata(map, ds, opts, &mut StoredMetadata::nothing())
}

/// Writes the metadata objects of `ds` that differ from what `stored` says `map` holds, and
/// records what it then holds in `stored`.
pub fn write_changed_metadata(
    map: &dyn ZMap,
    ds: &Dataset,
    opts: &WriteOptions,
    stored: &mut StoredMetadata,
) -> Result<()> {
    let mut objects = metadata_objects(ds, opts)?;
    let rewrite = match opts.dialect {
        Dialect::Zarr => keep_stored_attribute_json(map, &mut objects, opts, stored)?,
        Dialect::NcZarr => Rewrite::default(),
    };
    put_objects(map, objects, stored, rewrite)
}

/// Pure Zarr attributes are untyped JSON that a netCDF value cannot always spell back (`true`
/// reads as the ubyte 1, `null` and `[]` as text): when the metadata is rewritten, an
/// attribute whose stored JSON still reads as the value about to be written keeps that JSON.
///
/// Pure Zarr writes no `.zattrs` for a group or an array without attributes; one stored
/// before their last attribute was deleted is emptied (`{}`), or the deleted attributes would
/// come back at the next open.
///
/// Only the objects `stored` does not tell enough about are read: one known to be what its
/// new JSON leaves as it is stays unread, and so does one known to be absent or empty. A
/// consolidated summary copies every `.zattrs` as stored, so one stored in a spelling of its
/// own is read for it. Every rewrite used to read every `.zattrs`: each change on a pure Zarr
/// `rw` mount cost as many reads as the dataset has groups and arrays.
fn keep_stored_attribute_json(
    map: &dyn ZMap,
    objects: &mut Vec<(String, Value)>,
    opts: &WriteOptions,
    stored: &StoredMetadata,
) -> Result<Rewrite> {
    let is_zattrs = |k: &str| k == ".zattrs" || k.ends_with("/.zattrs");
    let mut rewrite = Rewrite::default();
    for (key, value) in objects.iter().filter(|(k, _)| is_zattrs(k)) {
        rewrite.accepts.insert(key.clone(), json_fingerprint(value));
    }
    // Every group's and array's `.zattrs`, written now or not.
    let keys: Vec<String> = objects
        .iter()
        .filter_map(|(k, _)| {
            let prefix = k
                .strip_suffix(".zgroup")
                .or_else(|| k.strip_suffix(".zarray"))?;
            Some(format!("{prefix}.zattrs"))
        })
        .collect();
    let mut emptied = Vec::new();
    let mut unread = Vec::new();
    for key in keys {
        match rewrite.accepts.get(&key) {
            Some(accepts) if stored.must_read_to_keep(&key, *accepts, opts.consolidated) => {
                unread.push(key)
            }
            Some(_) => {}
            None => match stored.holds_more_than_empty(&key) {
                Some(true) => emptied.push((key, json!({}))),
                Some(false) => rewrite.unwritten.push((key.clone(), stored.of(&key))),
                None => unread.push(key),
            },
        }
    }
    let mut old_json = HashMap::new();
    for (key, found) in unread
        .iter()
        .zip(map.get_many_metadata(&unread, METADATA_LIMIT))
    {
        let found = found?;
        if !rewrite.accepts.contains_key(key) {
            match &found {
                Some(bytes) if bytes.iter().any(|b| !b" \t\r\n{}".contains(b)) => {
                    emptied.push((key.clone(), json!({})));
                    rewrite.read.insert(key.clone(), found);
                }
                _ => rewrite
                    .unwritten
                    .push((key.clone(), Stored::found(found.as_deref()))),
            }
            continue;
        }
        // An unreadable old object has nothing worth keeping: the new one replaces it.
        if let Some(Ok(j @ Json::Obj(_))) = found.as_deref().map(|b| Json::parse(key, b)) {
            old_json.insert(key.clone(), j);
        }
        rewrite.read.insert(key.clone(), found);
    }
    let summary_at = objects
        .iter()
        .position(|(k, _)| k == ".zmetadata")
        .unwrap_or(objects.len());
    objects.splice(summary_at..summary_at, emptied);
    // The JSON this writer would give the value the stored JSON reads as.
    let rewritten = |key: &str, name: &str, j: &Json| {
        attrs::infer(key, name, j)
            .ok()
            .map(|value| attr_value_json(&value, opts))
    };
    let mut kept = Vec::new();
    for (key, value) in objects.iter_mut() {
        let (Some(old), Value::Object(new)) = (old_json.get(key.as_str()), value) else {
            continue;
        };
        for (name, v) in new.iter_mut() {
            let Some(old_v) = old.get(name) else { continue };
            if rewritten(key, name, old_v).as_ref() == Some(v) {
                *v = old_v.to_serde_keeping_bare_tokens();
            }
        }
        kept.push((key.clone(), Value::Object(new.clone())));
    }
    if let Some((k, summary)) = objects.last_mut() {
        if k == ".zmetadata" {
            if let Some(Value::Object(meta)) = summary.get_mut("metadata") {
                for (key, value) in kept {
                    meta.insert(key, value);
                }
            }
        }
    }
    Ok(rewrite)
}

/// Stores JSON metadata objects, in order: those that differ from what `stored` and
/// `rewrite` say is stored.
pub(crate) fn put_objects(
    map: &dyn ZMap,
    objects: Vec<(String, Value)>,
    stored: &mut StoredMetadata,
    mut rewrite: Rewrite,
) -> Result<()> {
    let (keys, values): (Vec<String>, Vec<Value>) = objects.into_iter().unzip();
    let encoded = keys
        .into_iter()
        .zip(&values)
        .map(|(key, value)| match serde_json::to_vec(value) {
            Ok(bytes) => Ok((key, super::json::restore_raw_bytes(bytes))),
            Err(e) => Err(Error::json(&key, &e)),
        })
        .collect::<Result<Vec<_>>>()?;
    let compared = stored.compare(map, &encoded, &values, &mut rewrite);
    let mut known = Vec::with_capacity(encoded.len());
    let mut to_store = Vec::new();
    for ((key, bytes), (changed, object)) in encoded.into_iter().zip(compared) {
        known.push((key.clone(), object));
        if changed {
            to_store.push((key, bytes));
        }
    }
    stored.forget_all();
    // `.zmetadata` (last when there is one) vouches for everything else, so it is stored
    // only once all the rest is.
    let summary = match to_store.last() {
        Some((key, _)) if key.rsplit('/').next() == Some(".zmetadata") => to_store.pop(),
        _ => None,
    };
    if !to_store.is_empty() {
        map.put_many(&to_store)?;
    }
    if let Some((key, bytes)) = summary {
        map.put(&key, &bytes)?;
    }
    stored.stored(known, rewrite.unwritten);
    Ok(())
}

/// The metadata objects of `ds` as `(key, JSON)` pairs, groups in pre-order, each group
/// followed by its arrays' `.zarray` objects and then their `.zattrs`; `.zmetadata` last when
/// consolidated. A group's dimension sizes and its arrays' shapes are thus stored one right
/// after the other: netcdf-c refuses a dataset where they disagree, which a writer killed
/// between them leaves.
pub fn metadata_objects(ds: &Dataset, opts: &WriteOptions) -> Result<Vec<(String, Value)>> {
    if opts.dialect == Dialect::NcZarr {
        check_layout_holds(ds, opts.layout)?;
    } else {
        if opts.xarray {
            check_dimension_names_hold(ds, "_ARRAY_DIMENSIONS")?;
        }
        check_text_is_utf8(ds, Utf8Text::PureZarr)?;
    }
    let mut out = Vec::new();
    for g in ds.groups_preorder() {
        let prefix = ds.group_path(g).join("/");
        out.push((join_key(&[&prefix, ".zgroup"]), zgroup(ds, g, opts)));
        let attrs = group_attrs(ds, g, opts)?;
        if !attrs.is_empty() || opts.dialect == Dialect::NcZarr {
            out.push((join_key(&[&prefix, ".zattrs"]), Value::Object(attrs)));
        }
        let vars = &ds.group(g).vars;
        for v in vars {
            let key = array_key(ds, *v);
            out.push((join_key(&[&key, ".zarray"]), zarray(ds, *v, opts)?));
        }
        for v in vars {
            let attrs = var_attrs(ds, *v, opts)?;
            if !attrs.is_empty() {
                out.push((
                    join_key(&[&array_key(ds, *v), ".zattrs"]),
                    Value::Object(attrs),
                ));
            }
        }
    }
    if opts.consolidated {
        let mut meta = Map::new();
        for (k, v) in &out {
            meta.insert(k.clone(), v.clone());
        }
        out.push((
            ".zmetadata".to_string(),
            json!({"metadata": Value::Object(meta), "zarr_consolidated_format": 1}),
        ));
    }
    Ok(out)
}

/// Refuses, for pure Zarr, a dataset whose dimension names (in `field`) would not read back:
/// pure Zarr names an array's dimensions by their plain names only, and a reader
/// ([`super::named_dim`]) takes a name of an array in group `g` for the dimension of that
/// name and length declared nearest above it, or else makes one in `g`; `g` cannot have two
/// of one name. So `/g/v(/d)` with `/d = 3`, beside `/g/w(d)` with `/g`'s own `d = 2`, is
/// refused when no root array uses `/d` (it would read as `/g`'s, beside the other `/g/d`),
/// and written when one does (each array then reads back as it was): a store zarr-python
/// or xarray wrote that way opens, so it must stay writable, names as they were.
///
/// Groups are taken from the root down, as the reader takes them. A dimension no array
/// uses is not written at all, and one that only arrays below its group use reads back in
/// their group: pure Zarr has no place for either, so neither is refused.
pub(crate) fn check_dimension_names_hold(ds: &Dataset, field: &str) -> Result<()> {
    // The dimensions a reader makes, by group and name: their length and the dimension and
    // array of the dataset that made them.
    let mut read: HashMap<(GroupId, &str), (u64, DimId, VarId)> = HashMap::new();
    for g in ds.groups_preorder() {
        for &v in &ds.group(g).vars {
            for &d in &ds.var(v).dims {
                let dim = ds.dim(d);
                let mut cur = Some(g);
                let found = std::iter::from_fn(|| {
                    let at = cur?;
                    cur = ds.group(at).parent;
                    Some(at)
                })
                .any(|at| {
                    read.get(&(at, dim.name.as_str()))
                        .is_some_and(|(len, _, _)| *len == dim.len)
                });
                if found {
                    continue;
                }
                let Some(&(len, first, first_var)) = read.get(&(g, dim.name.as_str())) else {
                    read.insert((g, &dim.name), (dim.len, d, v));
                    continue;
                };
                return Err(Error::Unsupported(format!(
                    "pure Zarr cannot represent two dimensions of the same name with \
                     different lengths in one group: {} ({len}, used by {}) and {} ({}, used \
                     by {}); {field} names an array's dimensions by their plain names only, \
                     and a reader takes both for dimensions of {} (NCZarr keeps them apart)",
                    ds.dim_fqn(first),
                    ds.var_fqn(first_var),
                    ds.dim_fqn(d),
                    dim.len,
                    ds.var_fqn(v),
                    ds.group_fqn(g),
                )));
            }
        }
    }
    Ok(())
}

/// Metadata whose JSON must hold char text as UTF-8, for [`check_text_is_utf8`].
///
/// JSON holds text, which zarr-python and xarray decode as UTF-8: they cannot open a store
/// holding other bytes (as netcdf-c's `mode=zarr` writes them, raw), and no valid spelling of
/// them reads back as the same bytes (`\u00ff` is the character ÿ, two bytes in UTF-8). NCZarr
/// on Zarr v2, whose reader is netcdf-c, keeps the bytes as netcdf-c writes them.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Utf8Text {
    /// Pure Zarr, v2 or v3.
    PureZarr,
    /// NCZarr on Zarr v3, which netcdf-c 4.10.1 neither reads nor writes (its `mode=nczarr,v3`
    /// writes Zarr v2), so zarr-python 3 is the other reader of `zarr.json`.
    NcZarrV3,
}

/// Refuses a char attribute whose text is not UTF-8 where `target` holds UTF-8 only, naming
/// it, before anything is stored. NCZarr on Zarr v3 keeps a variable's `_FillValue` in the
/// array's `fill_value`, a number, so that attribute is not JSON text there.
pub(crate) fn check_text_is_utf8(ds: &Dataset, target: Utf8Text) -> Result<()> {
    let owners = ds
        .groups_preorder()
        .into_iter()
        .map(|g| {
            (
                format!("group {}", ds.group_fqn(g)),
                &ds.group(g).attrs,
                false,
            )
        })
        .chain((0..ds.vars.len()).map(|v| {
            let var = ds.var(VarId(v));
            let fill_in_array = target == Utf8Text::NcZarrV3 && var.storage.fill_value.is_some();
            (
                format!("variable {}", ds.var_fqn(VarId(v))),
                &var.attrs,
                fill_in_array,
            )
        }));
    for (owner, attrs, fill_in_array) in owners {
        for a in attrs {
            let AttrValue::Char(bytes) = &a.value else {
                continue;
            };
            if fill_in_array && a.name == "_FillValue" {
                continue;
            }
            if let Err(e) = std::str::from_utf8(bytes) {
                let at = e.valid_up_to();
                let (in_what, readers) = match target {
                    Utf8Text::PureZarr => (
                        "pure Zarr",
                        "Zarr's JSON metadata holds UTF-8 text only (zarr-python and xarray \
                         cannot open a store holding other bytes)",
                    ),
                    Utf8Text::NcZarrV3 => (
                        "NCZarr on Zarr v3",
                        "zarr.json holds UTF-8 text only (zarr-python cannot open a store \
                         holding other bytes, and netcdf-c writes no Zarr v3)",
                    ),
                };
                return Err(Error::Unsupported(format!(
                    "attribute {} of {owner} in {in_what}: its text is not UTF-8 (byte \
                     0x{:02X} at offset {at}), and {readers}; NCZarr on Zarr v2 keeps such \
                     text, as netcdf-c writes it",
                    crate::error::quoted(&a.name),
                    bytes[at],
                )));
            }
        }
    }
    Ok(())
}

/// Refuses what the netcdf-c releases reading `layout` cannot hold, naming it.
fn check_layout_holds(ds: &Dataset, layout: NczarrLayout) -> Result<()> {
    let refuse = |what: String, releases: &str| {
        Err(Error::Unsupported(format!(
            "{what}, which netcdf-c {releases} cannot store in NCZarr"
        )))
    };
    match layout {
        NczarrLayout::Attributes => return Ok(()),
        NczarrLayout::Objects1 => {
            return Err(Error::Unsupported(
                "writing NCZarr 1.0.0 (netcdf-c 4.8.0): copy the dataset to a newer layout".into(),
            ))
        }
        NczarrLayout::UpperCaseKeys | NczarrLayout::LowerCaseKeys => {}
    }
    if let Some(d) = ds.dims.iter().position(|d| d.unlimited) {
        let name = ds.dim_fqn(crate::model::DimId(d));
        return refuse(format!("dimension {name} is unlimited"), "before 4.9.3");
    }
    if layout != NczarrLayout::UpperCaseKeys {
        return Ok(());
    }
    let is_string = |a: &&Attribute| a.value.nctype() == NcType::String;
    for g in ds.groups_preorder() {
        let group = ds.group(g);
        if let Some(a) = group.attrs.iter().find(is_string) {
            let owner = match ds.group_path(g).join("/") {
                root if root.is_empty() => String::new(),
                path => format!("/{path}"),
            };
            let what = format!("attribute {owner}:{} is a string", a.name);
            return refuse(what, "before 4.9.1");
        }
        for v in &group.vars {
            let var = ds.var(*v);
            let fqn = ds.var_fqn(*v);
            if var.nctype == NcType::String {
                return refuse(format!("variable {fqn} is a string"), "before 4.9.1");
            }
            if var.dims.is_empty() {
                // 4.9.0 fails an assertion reading its own scalars back.
                return refuse(format!("variable {fqn} is a scalar"), "before 4.9.1");
            }
            if let Some(a) = var.attrs.iter().find(is_string) {
                let what = format!("attribute {fqn}:{} is a string", a.name);
                return refuse(what, "before 4.9.1");
            }
        }
    }
    Ok(())
}

/// An NCZarr key as `layout` spells it (`_nczarr_group` or `_NCZARR_GROUP`).
fn ncz_key(layout: NczarrLayout, lower: &str) -> String {
    match layout {
        NczarrLayout::UpperCaseKeys => lower.to_ascii_uppercase(),
        _ => lower.to_string(),
    }
}

/// Whether NCZarr's keys go into the Zarr objects (`.zgroup`, `.zarray`) rather than into
/// `.zattrs`.
fn keys_in_objects(opts: &WriteOptions) -> bool {
    opts.dialect == Dialect::NcZarr
        && matches!(
            opts.layout,
            NczarrLayout::UpperCaseKeys | NczarrLayout::LowerCaseKeys
        )
}

/// A group's `.zgroup`, holding its NCZarr description in the layouts before netcdf 4.9.3.
fn zgroup(ds: &Dataset, g: GroupId, opts: &WriteOptions) -> Value {
    let mut z = Map::new();
    z.insert("zarr_format".into(), json!(2));
    if keys_in_objects(opts) {
        let group = ds.group(g);
        if g == Dataset::ROOT {
            z.insert(
                ncz_key(opts.layout, "_nczarr_superblock"),
                json!({"version": NCZARR_VERSION}),
            );
        }
        let dims: Map<String, Value> = group
            .dims
            .iter()
            .map(|d| (ds.dim(*d).name.clone(), json!(ds.dim(*d).len)))
            .collect();
        z.insert(
            ncz_key(opts.layout, "_nczarr_group"),
            json!({"dims": dims, "vars": var_names(ds, g), "groups": group_names(ds, g)}),
        );
    }
    Value::Object(z)
}

/// The names of a group's variables, in order.
fn var_names(ds: &Dataset, g: GroupId) -> Vec<&str> {
    let vars = &ds.group(g).vars;
    vars.iter().map(|v| ds.var(*v).name.as_str()).collect()
}

/// The names of a group's subgroups, in order.
fn group_names(ds: &Dataset, g: GroupId) -> Vec<&str> {
    let groups = &ds.group(g).groups;
    groups.iter().map(|c| ds.group(*c).name.as_str()).collect()
}

/// The key prefix of a variable's array: its storage key, or its group path and name.
fn array_key(ds: &Dataset, v: VarId) -> String {
    let var = ds.var(v);
    if var.storage.key.is_empty() {
        let prefix = ds.group_path(var.group).join("/");
        join_key(&[&prefix, &var.name])
    } else {
        var.storage.key.clone()
    }
}

/// The dtype a variable is stored with: its storage's, or the default for its type.
pub fn default_dtype(nctype: NcType, string_width: usize, dialect: Dialect) -> ZarrDtype {
    let (order, kind) = match nctype {
        NcType::Byte => (ByteOrder::NotApplicable, DtypeKind::Int),
        NcType::UByte => (ByteOrder::NotApplicable, DtypeKind::UInt),
        NcType::Short | NcType::Int | NcType::Int64 => (ByteOrder::Little, DtypeKind::Int),
        NcType::UShort | NcType::UInt | NcType::UInt64 => (ByteOrder::Little, DtypeKind::UInt),
        NcType::Float | NcType::Double => (ByteOrder::Little, DtypeKind::Float),
        NcType::Char if dialect == Dialect::NcZarr => (ByteOrder::Big, DtypeKind::Bytes),
        NcType::Char | NcType::String => (ByteOrder::NotApplicable, DtypeKind::Bytes),
    };
    let size = match nctype {
        NcType::String => string_width.max(1),
        t => t.size(),
    };
    ZarrDtype { order, kind, size }
}

fn zarray(ds: &Dataset, v: VarId, opts: &WriteOptions) -> Result<Value> {
    let var = ds.var(v);
    let key = join_key(&[&array_key(ds, v), ".zarray"]);
    // A char is always written in the dialect's spelling (`>S1` in NCZarr, which is how
    // netcdf-c tells it from a one-byte string), whatever it was read from (4.8's `<U1`).
    let dtype = match (&var.storage.dtype, var.nctype) {
        (Some(d), t) if t != NcType::Char => d.clone(),
        _ => default_dtype(var.nctype, var.string_width, opts.dialect),
    };
    let mut shape = ds.var_shape(v);
    if shape.is_empty() && opts.dialect == Dialect::NcZarr {
        shape = vec![1];
    }
    let chunks: Vec<u64> =
        if var.storage.chunks.len() == shape.len() && var.storage.chunks.iter().all(|c| *c > 0) {
            var.storage.chunks.clone()
        } else {
            shape.iter().map(|s| (*s).max(1)).collect()
        };
    let (filters, compressor) = match &var.storage.codecs {
        CodecSpec::V2 {
            filters,
            compressor,
        } => (filters, compressor),
        CodecSpec::V3(_) => {
            return Err(Error::Unsupported(format!(
                "writing Zarr v3 codecs for {}",
                ds.var_fqn(v)
            )))
        }
    };
    // An object array of strings (zarr-python's, read through its `vlen-utf8` filter) stays
    // one, with its fill as plain text.
    let object_strings = crate::codec::is_object_string_filter(filters);
    let fill = match &var.storage.fill_value {
        // As zarr-python writes it: text for vlen-utf8, base64 for vlen-bytes.
        Some(bytes) if object_strings => {
            let utf8 = crate::codec::is_object_utf8_filter(filters);
            let dialect = if utf8 { Dialect::NcZarr } else { Dialect::Zarr };
            fill_json(var.nctype, bytes, &dtype, dialect, &key)?
        }
        Some(bytes) => fill_json(var.nctype, bytes, &dtype, opts.dialect, &key)?,
        None => Value::Null,
    };
    let fill = match fill {
        Value::String(text)
            if opts.dialect == Dialect::NcZarr
                && !object_strings
                && matches!(var.nctype, NcType::Char | NcType::String) =>
        {
            Value::String(super::json::carry_controls_raw(text))
        }
        // netcdf-c 4.9.0 and before read only the bare tokens.
        Value::String(text)
            if keys_in_objects(opts)
                && opts.layout == NczarrLayout::UpperCaseKeys
                && matches!(var.nctype, NcType::Float | NcType::Double) =>
        {
            text.parse()
                .map_or(Value::String(text), super::json::bare_non_finite)
        }
        other => other,
    };
    let shuffle = crate::codec::netcdf_element_size(var.nctype, dtype.size);
    let filters: Vec<Value> = filters
        .iter()
        .map(|f| fix_shuffle(&crate::codec::with_numcodecs_defaults(f), shuffle))
        .collect();
    let mut z = Map::new();
    z.insert("zarr_format".into(), json!(2));
    z.insert("shape".into(), json!(shape));
    let dtype_text = if object_strings {
        "|O".to_string()
    } else if var.nctype == NcType::Char
        && keys_in_objects(opts)
        && opts.layout == NczarrLayout::UpperCaseKeys
    {
        // netcdf-c 4.9.0 and before spell char `<U1`, and store one byte each all the same.
        "<U1".to_string()
    } else {
        dtype.to_numpy()
    };
    z.insert("dtype".into(), json!(dtype_text));
    z.insert("chunks".into(), json!(chunks));
    z.insert("fill_value".into(), fill);
    let order = match var.storage.order {
        ChunkOrder::C => "C",
        ChunkOrder::F => "F",
    };
    z.insert("order".into(), json!(order));
    z.insert(
        "compressor".into(),
        compressor
            .as_ref()
            .map_or(Value::Null, crate::codec::with_numcodecs_defaults),
    );
    z.insert(
        "filters".into(),
        if filters.is_empty() {
            Value::Null
        } else {
            Value::Array(filters)
        },
    );
    match var.storage.key_encoding {
        ChunkKeyEncoding::V2 { separator: '/' } => {
            z.insert("dimension_separator".into(), json!("/"));
        }
        ChunkKeyEncoding::V2 { .. } => {}
        ChunkKeyEncoding::Default { .. } => {
            return Err(Error::Unsupported(format!(
                "Zarr v3 chunk keys in a Zarr v2 array ({})",
                ds.var_fqn(v)
            )))
        }
    }
    if keys_in_objects(opts) {
        let refs: Vec<String> = var.dims.iter().map(|d| ds.dim_fqn(*d)).collect();
        let storage = if var.dims.is_empty() {
            "scalar"
        } else {
            "chunked"
        };
        z.insert(
            ncz_key(opts.layout, "_nczarr_array"),
            json!({"dimrefs": refs, "storage": storage}),
        );
    }
    Ok(Value::Object(z))
}

/// A shuffle filter with element size 0 gets the dtype's size (numcodecs treats 0 as a no-op,
/// so netcdf-c's 0 makes other readers decode garbage); a missing one is numcodecs' default,
/// which [`crate::codec::with_numcodecs_defaults`] has filled in.
fn fix_shuffle(f: &Value, size: usize) -> Value {
    let mut f = f.clone();
    if let Some(obj) = f.as_object_mut() {
        let is_shuffle = obj.get("id").and_then(Value::as_str) == Some("shuffle");
        let zero = obj
            .get("elementsize")
            .and_then(Value::as_u64)
            .is_none_or(|n| n == 0);
        if is_shuffle && zero {
            obj.insert("elementsize".into(), json!(size));
        }
    }
    f
}

/// A float as JSON: a number, or `"NaN"`, `"Infinity"`, `"-Infinity"`.
pub(crate) fn float_json(x: f64) -> Value {
    if x.is_nan() {
        json!("NaN")
    } else if x == f64::INFINITY {
        json!("Infinity")
    } else if x == f64::NEG_INFINITY {
        json!("-Infinity")
    } else {
        json!(x)
    }
}

/// The f32 value as the shortest decimal that reads back as the same f32, in an f64.
pub(crate) fn f32_as_f64(x: f32) -> f64 {
    if !x.is_finite() {
        return x as f64;
    }
    format!("{x}").parse().unwrap_or(x as f64)
}

/// One native element as a `fill_value`.
fn fill_json(
    nctype: NcType,
    bytes: &[u8],
    dtype: &ZarrDtype,
    dialect: Dialect,
    key: &str,
) -> Result<Value> {
    let short = || Error::meta(key, format!("fill value of {} bytes", bytes.len()));
    // The first `N` bytes as an array, zero-extended to 8 for the 64-bit readers.
    let le = |n: usize| -> Result<[u8; 8]> {
        let mut a = [0u8; 8];
        a[..n].copy_from_slice(bytes.get(..n).ok_or_else(short)?);
        Ok(a)
    };
    let four = |a: [u8; 8]| [a[0], a[1], a[2], a[3]];
    if dtype.kind == DtypeKind::Bool {
        // As zarr-python writes a `|b1` fill.
        return Ok(json!(le(1)?[0] != 0));
    }
    Ok(match nctype {
        NcType::Byte => json!(le(1)?[0] as i8),
        NcType::UByte => json!(le(1)?[0]),
        NcType::Short => json!(i16::from_le_bytes([le(2)?[0], le(2)?[1]])),
        NcType::UShort => json!(u16::from_le_bytes([le(2)?[0], le(2)?[1]])),
        NcType::Int => json!(i32::from_le_bytes(four(le(4)?))),
        NcType::UInt => json!(u32::from_le_bytes(four(le(4)?))),
        NcType::Int64 => json!(i64::from_le_bytes(le(8)?)),
        NcType::UInt64 => json!(u64::from_le_bytes(le(8)?)),
        NcType::Float => float_json(f32_as_f64(f32::from_le_bytes(four(le(4)?)))),
        NcType::Double => float_json(f64::from_le_bytes(le(8)?)),
        NcType::Char | NcType::String => {
            let end = bytes.iter().position(|b| *b == 0).unwrap_or(bytes.len());
            let text = &bytes[..end];
            if dialect == Dialect::Zarr && dtype.kind == DtypeKind::Bytes {
                json!(base64(text))
            } else {
                json!(super::json::carry_raw_bytes(text))
            }
        }
    })
}

/// Standard base64 with padding (the Zarr v2 encoding of byte-string fill values).
pub(crate) fn base64(data: &[u8]) -> String {
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (c[0] as u32) << 16
            | (c.get(1).copied().unwrap_or(0) as u32) << 8
            | c.get(2).copied().unwrap_or(0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(A[(n >> (18 - 6 * i)) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// An attribute's values as JSON: a scalar for one value, a list otherwise; char text as a
/// string, or, under the JSON convention (`json_text`), as the object or list it spells.
///
/// Zarr v2 uses the convention in both dialects, and Zarr v3 in pure Zarr: netcdf-c reads an
/// NCZarr attribute holding JSON as its text, and nczarrfs reads so a pure Zarr attribute
/// that has no netCDF type (an object, a list of mixed values), which must then be written
/// back as it was.
pub(crate) fn attr_json(value: &AttrValue, json_text: bool) -> Value {
    fn many<T: Copy>(v: &[T], f: impl Fn(T) -> Value) -> Value {
        match v {
            [one] => f(*one),
            _ => Value::Array(v.iter().map(|x| f(*x)).collect()),
        }
    }
    match value {
        AttrValue::Byte(v) => many(v, |x| json!(x)),
        AttrValue::UByte(v) => many(v, |x| json!(x)),
        AttrValue::Short(v) => many(v, |x| json!(x)),
        AttrValue::UShort(v) => many(v, |x| json!(x)),
        AttrValue::Int(v) => many(v, |x| json!(x)),
        AttrValue::UInt(v) => many(v, |x| json!(x)),
        AttrValue::Int64(v) => many(v, |x| json!(x)),
        AttrValue::UInt64(v) => many(v, |x| json!(x)),
        AttrValue::Float(v) => many(v, |x| float_json(f32_as_f64(x))),
        AttrValue::Double(v) => many(v, float_json),
        AttrValue::Char(bytes) => {
            let text = super::json::carry_raw_bytes(bytes);
            if json_text {
                if let Ok(j @ (Value::Object(_) | Value::Array(_))) =
                    serde_json::from_str::<Value>(&text)
                {
                    // Readers give the text back in netcdf-c's spelling of the value; only
                    // when that is the original text is the convention lossless.
                    if netcdf_c_spelling(&j) == text {
                        return j;
                    }
                }
            }
            json!(text)
        }
        AttrValue::Str(v) => match v.as_slice() {
            [one] => json!(one),
            _ => json!(v),
        },
    }
}

/// A JSON value as netcdf-c prints it when reading a JSON-convention attribute back:
/// `{"k": v, "k2": v2}` and `[a,b]`.
fn netcdf_c_spelling(v: &Value) -> String {
    match v {
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(netcdf_c_spelling).collect();
            format!("[{}]", items.join(","))
        }
        Value::Object(o) => {
            let items: Vec<String> = o
                .iter()
                .map(|(k, v)| format!("{}: {}", Value::String(k.clone()), netcdf_c_spelling(v)))
                .collect();
            format!("{{{}}}", items.join(", "))
        }
        other => other.to_string(),
    }
}

/// The `_nczarr_attr` type of an attribute, spelled as netcdf-c spells it in `layout`.
fn attr_type(value: &AttrValue, layout: NczarrLayout) -> &'static str {
    match value.nctype() {
        NcType::Char if layout == NczarrLayout::UpperCaseKeys => "<U1",
        NcType::Byte => "<i1",
        NcType::UByte => "<u1",
        NcType::Short => "<i2",
        NcType::UShort => "<u2",
        NcType::Int => "<i4",
        NcType::UInt => "<u4",
        NcType::Int64 => "<i8",
        NcType::UInt64 => "<u8",
        NcType::Float => "<f4",
        NcType::Double => "<f8",
        NcType::Char => ">S1",
        // netcdf-c only looks at the `|S` prefix; 128 is its default maximum string length.
        NcType::String => "|S128",
    }
}

/// User attributes into `obj`, recording their types in `types`.
fn put_attrs(
    obj: &mut Map<String, Value>,
    types: &mut Map<String, Value>,
    attrs: &[Attribute],
    opts: &WriteOptions,
) {
    for a in attrs {
        obj.insert(a.name.clone(), attr_value_json(&a.value, opts));
        types.insert(a.name.clone(), json!(attr_type(&a.value, opts.layout)));
    }
}

/// `value` with each text cut at its first NUL byte, as NCZarr holds it for netcdf-c: netcdf-c
/// writes char and string attributes only up to a NUL (they are C strings to it), and reads
/// neither a raw NUL in the JSON (the whole dataset then fails to open) nor the escape
/// `\u0000` (it decodes no `\u` escape, and reads `u0000`). `None` when no text holds a NUL.
pub fn text_cut_at_nul(value: &AttrValue) -> Option<AttrValue> {
    let cut = |b: &[u8]| b.iter().position(|c| *c == 0).map(|end| b[..end].to_vec());
    match value {
        AttrValue::Char(bytes) => cut(bytes).map(AttrValue::Char),
        AttrValue::Str(texts) if texts.iter().any(|t| t.contains('\0')) => Some(AttrValue::Str(
            texts
                .iter()
                .map(|t| t.split('\0').next().unwrap_or_default().to_string())
                .collect(),
        )),
        _ => None,
    }
}

/// Whether [`text_cut_at_nul`] drops more than NUL bytes from `value`: text after a NUL, which
/// a writer warns about. NUL bytes at the end only terminate the text (ncdump and
/// netCDF4-python do not show them; netcdf-c's reader takes the char `_FillValue` `""` for
/// the NUL).
pub fn text_after_nul(value: &AttrValue) -> bool {
    let after = |b: &[u8]| b.iter().skip_while(|c| **c != 0).any(|c| *c != 0);
    match value {
        AttrValue::Char(bytes) => after(bytes),
        AttrValue::Str(texts) => texts.iter().any(|t| after(t.as_bytes())),
        _ => false,
    }
}

/// [`attr_json`] (under the JSON convention) as `opts`' readers read it: NaN and infinities
/// as bare tokens where [`bare_tokens`] says, strings otherwise (as netcdf-c 4.9.1 and later
/// write them); in NCZarr, text cut at a NUL byte ([`text_cut_at_nul`]) and control
/// characters as the bytes themselves (see [`super::json::carry_controls_raw`]).
fn attr_value_json(value: &AttrValue, opts: &WriteOptions) -> Value {
    if opts.dialect == Dialect::NcZarr {
        if let Some(cut) = text_cut_at_nul(value) {
            return attr_value_json(&cut, opts);
        }
    }
    let raw_controls = |v: Value| match v {
        Value::String(text) if opts.dialect == Dialect::NcZarr => {
            Value::String(super::json::carry_controls_raw(text))
        }
        Value::Array(items) if opts.dialect == Dialect::NcZarr => Value::Array(
            items
                .into_iter()
                .map(|item| match item {
                    Value::String(text) => Value::String(super::json::carry_controls_raw(text)),
                    other => other,
                })
                .collect(),
        ),
        other => other,
    };
    match value {
        AttrValue::Float(v) if bare_tokens(opts) => bare_floats(v.iter().map(|x| f32_as_f64(*x))),
        AttrValue::Double(v) if bare_tokens(opts) => bare_floats(v.iter().copied()),
        AttrValue::Char(_) | AttrValue::Str(_) => raw_controls(attr_json(value, true)),
        value => attr_json(value, true),
    }
}

/// Whether `opts` writes NaN and infinities in attributes as bare tokens: pure Zarr, and the
/// NCZarr layout of netcdf-c 4.8.1–4.9.0.
fn bare_tokens(opts: &WriteOptions) -> bool {
    opts.dialect == Dialect::Zarr
        || keys_in_objects(opts) && opts.layout == NczarrLayout::UpperCaseKeys
}

/// Float attribute values with NaN and infinities as bare tokens, as Python's `json` and
/// netcdf-c 4.9.0 write them.
pub(crate) fn bare_floats(values: impl ExactSizeIterator<Item = f64>) -> Value {
    let one = values.len() == 1;
    let mut all: Vec<Value> = values.map(super::json::bare_non_finite).collect();
    match all.pop() {
        Some(v) if one => v,
        last => {
            all.extend(last);
            Value::Array(all)
        }
    }
}

/// The attribute types of a `.zattrs` in `obj`: in the layouts before netcdf 4.9.3, the only
/// NCZarr key there.
fn put_types(obj: &mut Map<String, Value>, mut types: Map<String, Value>, layout: NczarrLayout) {
    let value = match layout {
        NczarrLayout::Attributes => {
            types.insert("_nczarr_attr".into(), json!("|J0"));
            json!({ "types": types })
        }
        // As netcdf-c 4.9 writes it for no attribute.
        _ if types.is_empty() => json!({}),
        _ => json!({ "types": types }),
    };
    obj.insert(ncz_key(layout, "_nczarr_attr"), value);
}

fn group_attrs(ds: &Dataset, g: GroupId, opts: &WriteOptions) -> Result<Map<String, Value>> {
    let group = ds.group(g);
    let mut obj = Map::new();
    let mut types = Map::new();
    let nczarr = opts.dialect == Dialect::NcZarr;
    let properties = opts
        .nc_properties
        .as_ref()
        .filter(|_| nczarr && g == Dataset::ROOT);
    if let Some(p) = properties {
        let value = AttrValue::Char(p.as_bytes().to_vec());
        obj.insert("_NCProperties".into(), json!(p));
        types.insert(
            "_NCProperties".into(),
            json!(attr_type(&value, opts.layout)),
        );
    }
    put_attrs(&mut obj, &mut types, &group.attrs, opts);
    if !nczarr {
        return Ok(obj);
    }
    if keys_in_objects(opts) {
        put_types(&mut obj, types, opts.layout);
        return Ok(obj);
    }
    let mut dims = Map::new();
    for d in &group.dims {
        let dim = ds.dim(*d);
        let v = if dim.unlimited {
            json!({"size": dim.len, "unlimited": 1})
        } else {
            json!(dim.len)
        };
        dims.insert(dim.name.clone(), v);
    }
    obj.insert(
        "_nczarr_group".into(),
        json!({"dimensions": dims, "arrays": var_names(ds, g), "groups": group_names(ds, g)}),
    );
    types.insert("_nczarr_group".into(), json!("|J0"));
    if g == Dataset::ROOT {
        obj.insert(
            "_nczarr_superblock".into(),
            json!({"version": NCZARR_VERSION}),
        );
        types.insert("_nczarr_superblock".into(), json!("|J0"));
    }
    put_types(&mut obj, types, opts.layout);
    Ok(obj)
}

fn var_attrs(ds: &Dataset, v: VarId, opts: &WriteOptions) -> Result<Map<String, Value>> {
    let var = ds.var(v);
    let mut obj = Map::new();
    let mut types = Map::new();
    let nczarr = opts.dialect == Dialect::NcZarr;
    // netcdf-c writes the attribute of a quantized variable after `_ARRAY_DIMENSIONS`, and
    // without a type: it is its own, read back by name.
    let (quantize, user): (Vec<Attribute>, Vec<Attribute>) = var
        .attrs
        .iter()
        .cloned()
        .partition(|a| QuantizeMode::from_attribute(&a.name).is_some());
    put_attrs(&mut obj, &mut types, &user, opts);
    if opts.xarray {
        let names: Vec<&str> = if var.dims.is_empty() && nczarr {
            // netcdf-c names the `[1]` shape of a scalar `_scalar_` (since 4.9.1).
            match opts.layout {
                NczarrLayout::UpperCaseKeys => vec![],
                _ => vec!["_scalar_"],
            }
        } else {
            var.dims.iter().map(|d| ds.dim(*d).name.as_str()).collect()
        };
        obj.insert("_ARRAY_DIMENSIONS".into(), json!(names));
    }
    for a in &quantize {
        obj.insert(a.name.clone(), attr_value_json(&a.value, opts));
    }
    if !nczarr {
        return Ok(obj);
    }
    if keys_in_objects(opts) {
        put_types(&mut obj, types, opts.layout);
        return Ok(obj);
    }
    let refs: Vec<String> = var.dims.iter().map(|d| ds.dim_fqn(*d)).collect();
    let mut arr = Map::new();
    arr.insert("dimension_references".into(), json!(refs));
    if var.dims.is_empty() {
        arr.insert("scalar".into(), json!(1));
    }
    arr.insert("storage".into(), json!("chunked"));
    obj.insert("_nczarr_array".into(), Value::Object(arr));
    types.insert("_nczarr_array".into(), json!("|J0"));
    put_types(&mut obj, types, opts.layout);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc4648_vectors() {
        for (i, o) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(i.as_bytes()), o);
        }
    }

    #[test]
    fn floats_keep_precision_and_specials() {
        assert_eq!(
            float_json(std::f64::consts::PI).to_string(),
            "3.141592653589793"
        );
        assert_eq!(float_json(f64::NAN), json!("NaN"));
        assert_eq!(float_json(f64::NEG_INFINITY), json!("-Infinity"));
        assert_eq!(f32_as_f64(0.1f32), 0.1);
        assert_eq!(
            fill_json(
                NcType::Double,
                &NcType::Double.default_fill(),
                &default_dtype(NcType::Double, 0, Dialect::NcZarr),
                Dialect::NcZarr,
                "k"
            )
            .unwrap()
            .to_string(),
            "9.969209968386869e+36"
        );
    }

    #[test]
    fn options_from_mode() {
        let mode = Mode {
            format: Some(Format::Zarr),
            xarray: Some(false),
            consolidated: true,
            ..Mode::default()
        };
        let o = WriteOptions::from_mode(&mode);
        assert_eq!(
            (o.dialect, o.xarray, o.consolidated),
            (Dialect::Zarr, false, true)
        );
        assert_eq!(
            WriteOptions::from_mode(&Mode::default()),
            WriteOptions::default()
        );
    }

    #[test]
    fn shuffle_gets_element_size() {
        let f = fix_shuffle(&json!({"id": "shuffle", "elementsize": 0}), 8);
        assert_eq!(f, json!({"id": "shuffle", "elementsize": 8}));
        let f = fix_shuffle(&json!({"id": "shuffle", "elementsize": 2}), 8);
        assert_eq!(f, json!({"id": "shuffle", "elementsize": 2}));
    }

    #[test]
    fn json_convention_only_for_objects_and_lists() {
        let j = |s: &str| attr_json(&AttrValue::Char(s.as_bytes().to_vec()), true);
        assert_eq!(j("[1,2]"), json!([1, 2]));
        assert_eq!(
            j("{\"a\": [1,2.5], \"b\": {\"c\": \"d\"}}"),
            json!({"a": [1, 2.5], "b": {"c": "d"}})
        );
        // Spelled otherwise, the text would not come back as written: keep it a string.
        assert_eq!(j("[1, 2]"), json!("[1, 2]"));
        assert_eq!(j("{\"a\":1}"), json!("{\"a\":1}"));
        assert_eq!(j("1.0, 0.0"), json!("1.0, 0.0"));
        assert_eq!(j("17"), json!("17"));
        assert_eq!(
            attr_json(&AttrValue::Char(b"[1,2]".to_vec()), false),
            json!("[1,2]")
        );
    }
}
