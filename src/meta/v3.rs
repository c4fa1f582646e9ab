//! Zarr v3 metadata: `zarr.json` nodes (explicit and implicit groups, arrays), consolidated
//! metadata inside the root `zarr.json`, `dimension_names` as shared dimensions, and the
//! NCZarr-on-v3 attributes of the netcdf-c draft (`_nczarr_superblock`, `_nczarr_group`,
//! `_nczarr_array` with `type_alias`, `_nczarr_attrs` with `attribute_types`).
//!
//! The codec list is handed to the chunk engine unchanged ([`CodecSpec::V3`]); the stored
//! dtype's byte order is the `bytes` codec's `endian` (found inside `sharding_indexed` too).

use std::collections::{HashMap, HashSet};

use super::json::{self, Json};
use super::{attrs, either, ncz_key};
use crate::error::{capped, quoted};
use crate::location::{Format, Mode};
use crate::model::Provenance;
use crate::model::{
    element_count, AttrValue, Attribute, ByteOrder, ChunkKeyEncoding, ChunkOrder, CodecSpec,
    Dataset, DimId, DtypeKind, GroupId, NcType, VarStorage, Variable, ZarrDtype,
};
use crate::zmap::{join_key, ZMap};
use crate::{Error, Result};

/// Width of a variable-length string variable's native slots when the store does not say
/// (`_nczarr_maxstrlen`): netcdf-c's default maximum string length.
pub(super) const DEFAULT_VLEN_WIDTH: usize = 128;

/// Reads a Zarr v3 dataset whose root `zarr.json` is `root`, from its consolidated metadata
/// when it has some and `summaries` allows.
pub(super) fn read_dataset(
    map: &dyn ZMap,
    mode: &Mode,
    root: Json,
    summaries: bool,
) -> Result<Dataset> {
    check_node(ROOT_KEY, &root)?;
    match root.get("node_type").and_then(Json::as_str) {
        Some("group") => {}
        Some("array") => {
            return Err(Error::Unsupported(
                "a Zarr v3 array at the dataset root (not a group)".into(),
            ))
        }
        _ => {
            return Err(Error::meta(
                ROOT_KEY,
                json::not_expected("node_type", root.get("node_type"), r#""group" or "array""#),
            ))
        }
    }
    let consolidated = consolidated(&root).filter(|_| summaries);
    let summarized: HashSet<String> = consolidated
        .iter()
        .flat_map(|c| c.keys().cloned())
        .collect();
    read_nodes(map, mode, root, consolidated).map_err(|e| {
        super::blame_summary(e, SUMMARY, |key| {
            key.strip_suffix(&format!("/{ROOT_KEY}"))
                .filter(|path| summarized.contains(*path))
                .map(str::to_string)
        })
    })
}

/// How messages name the consolidated metadata of a Zarr v3 root.
const SUMMARY: &str = r#"the consolidated_metadata of "zarr.json""#;

/// [`read_dataset`] once `consolidated` holds the root's consolidated metadata, if used.
fn read_nodes(
    map: &dyn ZMap,
    mode: &Mode,
    root: Json,
    consolidated: Option<HashMap<String, Json>>,
) -> Result<Dataset> {
    let root_attrs = root.get("attributes");
    let nczarr = mode.format != Some(Format::Zarr)
        && root_attrs.is_some_and(|a| {
            ncz_key(a, "_nczarr_superblock").is_some() || ncz_key(a, "_nczarr_group").is_some()
        });
    // Every NCZarr root holds a superblock; a group's metadata without one is a group
    // opened apart from its dataset, whose dimension references lead outside of it.
    if nczarr
        && root_attrs
            .and_then(|a| ncz_key(a, "_nczarr_superblock"))
            .is_none()
    {
        return Err(Error::GroupInsideNczarr {
            location: map.describe(),
            dataset: None,
        });
    }
    let mut r = Reader {
        map,
        consolidated,
        nczarr,
        ds: Dataset::new(),
        pending: Vec::new(),
    };
    r.walk(Dataset::ROOT, "", &root)?;
    for p in std::mem::take(&mut r.pending) {
        r.build_var(p)?;
    }
    r.ds.provenance = Provenance::new(
        root_attrs
            .and_then(|a| a.get("_NCProperties"))
            .and_then(Json::as_str)
            .map(str::to_string),
        root_attrs
            .and_then(|a| ncz_key(a, "_nczarr_superblock"))
            .and_then(|s| s.get("version"))
            .and_then(Json::as_str),
        nczarr,
    );
    Ok(r.ds)
}

const ROOT_KEY: &str = "zarr.json";

/// Checks `zarr_format: 3`.
fn check_node(key: &str, node: &Json) -> Result<()> {
    let format = node.get("zarr_format");
    if format.and_then(Json::as_u64) != Some(3) {
        return Err(Error::meta(
            key,
            json::not_expected("zarr_format", format, "3"),
        ));
    }
    match unknown_field(node) {
        Some(field) if node.get("node_type").and_then(Json::as_str) == Some("group") => Err(
            Error::Unsupported(format!("{key}: {}", must_understand(field))),
        ),
        _ => Ok(()),
    }
}

/// The first field of a node's metadata that the Zarr v3 specification does not define and
/// that does not say `"must_understand": false`: the specification (and zarr-python) then
/// refuse the node.
fn unknown_field(node: &Json) -> Option<&str> {
    const KNOWN: [&str; 12] = [
        "zarr_format",
        "node_type",
        "attributes",
        "consolidated_metadata",
        "shape",
        "data_type",
        "chunk_grid",
        "chunk_key_encoding",
        "fill_value",
        "codecs",
        "storage_transformers",
        "dimension_names",
    ];
    let Json::Obj(members) = node else {
        return None;
    };
    members.iter().map(|(k, _)| k.as_str()).find(|k| {
        !KNOWN.contains(k)
            && !matches!(
                node.get(k).and_then(|v| v.get("must_understand")),
                Some(Json::Bool(false))
            )
    })
}

fn must_understand(field: &str) -> String {
    format!(
        "unknown metadata field {} that must be understood (no \"must_understand\": false)",
        quoted(field)
    )
}

/// The inline consolidated metadata of the root node: node path → node.
fn consolidated(root: &Json) -> Option<HashMap<String, Json>> {
    let c = root.get("consolidated_metadata")?;
    if !matches!(c.get("kind").and_then(Json::as_str), None | Some("inline")) {
        return None;
    }
    match c.get("metadata") {
        Some(Json::Obj(members)) => Some(
            members
                .iter()
                .map(|(k, v)| (k.trim_matches('/').to_string(), v.clone()))
                .collect(),
        ),
        _ => None,
    }
}

/// An array found while walking, built once every group (and its dimensions) exists.
struct Pending {
    group: GroupId,
    name: String,
    key: String,
    node: Json,
}

struct Reader<'a> {
    map: &'a dyn ZMap,
    consolidated: Option<HashMap<String, Json>>,
    nczarr: bool,
    ds: Dataset,
    pending: Vec<Pending>,
}

/// What a child name under a group is.
enum Child {
    Array(Json),
    Group(Option<Json>),
}

impl Reader<'_> {
    /// The node at `path` (`""` is the root), from the consolidated metadata when present.
    fn node(&self, path: &str) -> Result<Option<Json>> {
        if let Some(c) = &self.consolidated {
            if let Some(j) = c.get(path) {
                return Ok(Some(j.clone()));
            }
        }
        let key = join_key(&[path, ROOT_KEY]);
        match super::get_metadata(self.map, &key)? {
            Some(bytes) => Json::parse(&key, &bytes).map(Some),
            None => Ok(None),
        }
    }

    /// The arrays and groups directly under the group at `prefix`, each list sorted by name.
    fn children(&self, prefix: &str) -> Result<Vec<(String, Child)>> {
        let names: Vec<String> = match &self.consolidated {
            Some(c) => {
                let mut names: Vec<String> = c
                    .keys()
                    .filter_map(|k| {
                        let rest = if prefix.is_empty() {
                            k.as_str()
                        } else {
                            k.strip_prefix(prefix)?.strip_prefix('/')?
                        };
                        rest.split('/').next().map(str::to_string)
                    })
                    .filter(|n| !n.is_empty())
                    .collect();
                names.sort();
                names.dedup();
                names
            }
            None => self.map.search(prefix)?,
        };
        let mut out = Vec::new();
        for name in names {
            if name == ROOT_KEY {
                continue;
            }
            let path = join_key(&[prefix, &name]);
            if name.starts_with('.') {
                // Unreadable metadata of an object that is skipped anyway fails nothing.
                let node_type = self.node(&path).ok().flatten().and_then(|n| {
                    n.get("node_type")
                        .and_then(Json::as_str)
                        .map(str::to_string)
                });
                if let Some(what @ ("array" | "group")) = node_type.as_deref() {
                    super::warn_hidden(what, &path);
                }
                continue;
            }
            let key = join_key(&[&path, ROOT_KEY]);
            match self.node(&path)? {
                Some(node) => {
                    check_node(&key, &node)?;
                    match node.get("node_type").and_then(Json::as_str) {
                        Some("array") => out.push((name, Child::Array(node))),
                        Some("group") => out.push((name, Child::Group(Some(node)))),
                        _ => log::warn!(
                            "{key}: {}; ignored",
                            json::not_expected(
                                "node_type",
                                node.get("node_type"),
                                r#""group" or "array""#
                            )
                        ),
                    }
                }
                None if self.has_node(&path)? => out.push((name, Child::Group(None))),
                None => {}
            }
        }
        Ok(out)
    }

    /// Whether some node lies below `prefix` (which makes it an implicit group). The levels
    /// are searched depth first from an explicit stack, as deep as the keys go.
    fn has_node(&self, prefix: &str) -> Result<bool> {
        if let Some(c) = &self.consolidated {
            let start = format!("{prefix}/");
            return Ok(c.keys().any(|k| k.starts_with(&start)));
        }
        let mut todo = vec![prefix.to_string()];
        while let Some(prefix) = todo.pop() {
            let names = self.map.search(&prefix)?;
            if names.iter().any(|n| n == ROOT_KEY) {
                return Ok(true);
            }
            todo.extend(names.iter().rev().map(|n| join_key(&[&prefix, n])));
        }
        Ok(false)
    }

    /// The typed, visible attributes of a node.
    fn attributes(&self, key: &str, node: Option<&Json>) -> Result<Vec<Attribute>> {
        let Some(a) = node.and_then(|n| n.get("attributes")) else {
            return Ok(Vec::new());
        };
        let Json::Obj(members) = a else {
            return Err(Error::meta(key, "attributes is not a JSON object"));
        };
        let types = if self.nczarr {
            attribute_types(a)
        } else {
            HashMap::new()
        };
        let mut out = Vec::new();
        for (name, value) in members {
            if attrs::is_hidden(name) {
                continue;
            }
            let value = match types.get(name.as_str()).map(String::as_str) {
                Some("json") => attrs::convert(key, name, value, Some("|J0"))?,
                Some(t) => match nctype_of_v3(t) {
                    Some(t) => attrs::to_type(key, name, value, t)?,
                    None => attrs::infer(key, name, value)?,
                },
                None => attrs::infer(key, name, value)?,
            };
            out.push(Attribute {
                name: name.clone(),
                value,
            });
        }
        Ok(out)
    }

    /// Reads the group at `prefix` (node `node`) into `gid` and every group below it, depth
    /// first. Iterative, not recursive: groups nested thousands deep (a zip archive can hold
    /// them) would overflow a thread's stack, a mount thread's first.
    fn walk(&mut self, gid: GroupId, prefix: &str, node: &Json) -> Result<()> {
        /// (parent, path, name, node) of a group still to read.
        type Todo = (GroupId, String, String, Option<Json>);
        let queue = |todo: &mut Vec<Todo>, parent: GroupId, prefix: &str, subgroups| {
            let subgroups: Vec<(String, Option<Json>)> = subgroups;
            todo.extend(
                subgroups
                    .into_iter()
                    .rev()
                    .map(|(name, node)| (parent, join_key(&[prefix, &name]), name, node)),
            );
        };
        // The next group to read last.
        let mut todo = Vec::new();
        queue(&mut todo, gid, prefix, self.read_group(gid, prefix, node)?);
        while let Some((parent, path, name, node)) = todo.pop() {
            let sub = self.ds.add_group(parent, &name);
            // An implicit group (no zarr.json) has no attributes.
            let node = node.unwrap_or(Json::Obj(Vec::new()));
            queue(&mut todo, sub, &path, self.read_group(sub, &path, &node)?);
        }
        Ok(())
    }

    /// Reads the group at `prefix` (node `node`) into `gid`: attributes, dimensions and its
    /// arrays (queued); its subgroups with their nodes (`None` for an implicit group), in
    /// order.
    fn read_group(
        &mut self,
        gid: GroupId,
        prefix: &str,
        node: &Json,
    ) -> Result<Vec<(String, Option<Json>)>> {
        let key = join_key(&[prefix, ROOT_KEY]);
        self.ds.groups[gid.0].attrs = self.attributes(&key, Some(node))?;
        let ncz = node
            .get("attributes")
            .filter(|_| self.nczarr)
            .and_then(|a| ncz_key(a, "_nczarr_group"));
        if let Some(g) = ncz {
            for (name, len, unlimited) in ncz_dims(&key, g)? {
                if self.ds.find_dim_in(gid, &name).is_some() {
                    return Err(Error::meta(
                        &key,
                        format!("dimension {name} declared twice"),
                    ));
                }
                self.ds.add_dim(gid, &name, len, unlimited);
            }
        }
        let mut arrays = Vec::new();
        let mut groups = Vec::new();
        for (name, child) in self.children(prefix)? {
            match child {
                Child::Array(n) => arrays.push((name, n)),
                Child::Group(n) => groups.push((name, n)),
            }
        }
        // NCZarr lists the objects in creation order; anything it does not list follows.
        if let Some(g) = ncz {
            let order = |field: &str, alt: &str| -> Vec<String> {
                match either(g, field, alt) {
                    Some(Json::Arr(items)) => items
                        .iter()
                        .filter_map(Json::as_str)
                        .map(str::to_string)
                        .collect(),
                    _ => Vec::new(),
                }
            };
            reorder(&mut arrays, &order("arrays", "vars"));
            let sub = if g.get("subgroups").is_some() {
                order("subgroups", "groups")
            } else {
                order("groups", "subgroups")
            };
            reorder(&mut groups, &sub);
        }
        for (name, node) in arrays {
            let key = join_key(&[prefix, &name]);
            self.pending.push(Pending {
                group: gid,
                name,
                key,
                node,
            });
        }
        Ok(groups)
    }

    /// Builds one variable from its `zarr.json`.
    fn build_var(&mut self, p: Pending) -> Result<()> {
        let zkey = join_key(&[&p.key, ROOT_KEY]);
        let fqn = self.ds.fqn_in(p.group, &p.name);
        let z = &p.node;
        let shape = super::u64_list(&zkey, z, "shape")?;
        if element_count(&shape).is_none() {
            return Err(Error::meta(&zkey, format!("shape {shape:?} overflows")));
        }
        let grid = z
            .get("chunk_grid")
            .ok_or_else(|| Error::meta(&zkey, "missing chunk_grid"))?;
        if grid.get("name").and_then(Json::as_str) != Some("regular") {
            return Err(Error::Unsupported(format!(
                "{zkey}: chunk_grid {} (only regular grids are read)",
                grid.unparse()
            )));
        }
        let chunks = match grid.get("configuration") {
            Some(c) => super::u64_list(&zkey, c, "chunk_shape")?,
            None => return Err(Error::meta(&zkey, "chunk_grid without configuration")),
        };
        if chunks.len() != shape.len() || chunks.contains(&0) {
            return Err(Error::meta(
                &zkey,
                format!("chunk_shape {chunks:?} does not fit shape {shape:?}"),
            ));
        }
        let key_encoding = key_encoding(&zkey, z.get("chunk_key_encoding"))?;
        let codecs: Vec<serde_json::Value> = match z.get("codecs") {
            Some(Json::Arr(items)) => items.iter().map(Json::to_serde).collect(),
            _ => return Err(Error::meta(&zkey, "codecs is not a list")),
        };
        if let Some(Json::Arr(t)) = z.get("storage_transformers") {
            if !t.is_empty() {
                return Err(Error::Unsupported(format!(
                    "{zkey}: storage_transformers {}",
                    Json::Arr(t.clone()).unparse()
                )));
            }
        }
        let attributes = z.get("attributes");
        let ncz_array = attributes
            .filter(|_| self.nczarr)
            .and_then(|a| ncz_key(a, "_nczarr_array"));
        let alias = ncz_array
            .and_then(|a| a.get("type_alias"))
            .and_then(Json::as_str);
        let maxstrlen = attributes
            .and_then(|a| a.get("_nczarr_maxstrlen"))
            .and_then(Json::as_u64)
            .and_then(|n| usize::try_from(n).ok())
            .filter(|&n| n > 0);
        // Without a declared maximum, variable-length strings get slots as wide as the
        // longest stored value (found by scanning the chunks), so nothing is cut short.
        let maxstrlen = match maxstrlen {
            None if is_vlen(z.get("data_type")) => {
                let fill_len = match z.get("fill_value") {
                    Some(Json::Str(s)) => s.len(),
                    _ => 0,
                };
                match crate::chunk::vlen_max_len(self.map, &p.key, &codecs, &chunks) {
                    Ok(n) => Some(n.max(fill_len).max(1)),
                    Err(e) => {
                        log::warn!("{zkey}: cannot measure its strings ({e})");
                        None
                    }
                }
            }
            m => m,
        };
        let big = big_endian(&codecs);
        let mut vt = var_type(z.get("data_type"), alias, big, maxstrlen);
        // NCZarrfs stores strings of at most n UTF-8 bytes as n UCS-4 characters and records
        // n, so that the variable keeps its width (4n would hold any n characters).
        if let (Some(n), Some(d)) = (
            ncz_array
                .and_then(|a| a.get("maxstrlen"))
                .and_then(Json::as_u64)
                .and_then(|n| usize::try_from(n).ok())
                .filter(|&n| n > 0),
            &vt.dtype,
        ) {
            if vt.nctype == NcType::String && d.kind == DtypeKind::Unicode && d.size >= n * 4 {
                vt.width = n;
            }
        }
        if vt.unreadable.is_none() {
            vt.unreadable = unknown_field(z).map(must_understand);
        }
        // Zarr v3 always stores a fill value; NCZarr marks netCDF's "no fill" apart.
        let no_fill = ncz_array
            .and_then(|a| a.get("no_fill"))
            .is_some_and(|u| matches!(u, Json::Bool(true)) || u.as_u64().is_some_and(|n| n != 0));
        if vt.unreadable.is_none() && vt.dtype.is_some() {
            let multi_byte = vt
                .dtype
                .as_ref()
                .is_some_and(|d| d.order != ByteOrder::NotApplicable);
            // A codec nczarrfs does not know may be the array-to-bytes one: that variable is
            // named unreadable for its codec instead.
            if crate::codec::unknown_v3_codec_in(&codecs).is_none() {
                vt.unreadable = codec_list_problem(&codecs, multi_byte);
            }
        }
        if vt.unreadable.is_none() && vt.dtype.is_some() && !no_fill {
            vt.unreadable = missing_fill_value(z.get("fill_value"), &vt.name);
        }
        let fill = match (&vt.dtype, z.get("fill_value")) {
            (Some(_), Some(fv)) if !no_fill => fill_value(&zkey, fv, &vt),
            _ => Ok(None),
        };
        // A fill value that does not fit makes its variable unreadable, as zarr-python
        // refuses that array alone.
        let fill_value = fill.unwrap_or_else(|e| {
            if vt.unreadable.is_none() {
                vt.unreadable = Some(super::unfit_fill_reason(e));
            }
            None
        });
        if let Some(why) = &vt.unreadable {
            match self
                .consolidated
                .as_ref()
                .filter(|c| c.contains_key(&p.key))
            {
                Some(_) => log::warn!("{SUMMARY} (its entry for {}): {why}", quoted(&p.key)),
                None => log::warn!("{zkey}: {why}"),
            }
        }

        let mut attrs = self.attributes(&zkey, Some(z))?;
        // An untyped _FillValue takes the variable's type, as netCDF requires.
        let typed = self.nczarr
            && attributes.is_some_and(|a| attribute_types(a).contains_key("_FillValue"));
        if !typed && vt.unreadable.is_none() && vt.nctype != NcType::Char {
            if let (Some(a), Some(raw)) = (
                attrs.iter_mut().find(|a| a.name == "_FillValue"),
                attributes.and_then(|z| z.get("_FillValue")),
            ) {
                if let Ok(v) = super::fill::fill_attribute(&zkey, raw, vt.nctype) {
                    a.value = v;
                }
            }
        }

        // NCZarrfs keeps `_FillValue` out of the attributes (see writer_v3) and records where
        // it stood among them.
        if let (Some(at), Some(fill)) = (
            ncz_array
                .and_then(|a| a.get("fill_value_attribute"))
                .and_then(Json::as_u64),
            &fill_value,
        ) {
            if !attrs.iter().any(|a| a.name == "_FillValue") {
                let at = usize::try_from(at).unwrap_or(usize::MAX).min(attrs.len());
                let value = crate::model::AttrValue::from_native(vt.nctype, fill);
                attrs.insert(
                    at,
                    Attribute {
                        name: "_FillValue".into(),
                        value,
                    },
                );
            }
        }
        let dims = self.var_dims(&p, &fqn, &shape, ncz_array)?;
        let var = Variable {
            name: p.name.clone(),
            group: p.group,
            nctype: vt.nctype,
            dims,
            string_width: vt.width,
            attrs,
            storage: VarStorage {
                key: p.key.clone(),
                dtype: vt.dtype,
                shape,
                chunks,
                order: ChunkOrder::C,
                key_encoding,
                fill_value,
                codecs: CodecSpec::V3(codecs),
                unreadable: vt.unreadable,
            },
        };
        self.ds.add_var(var);
        Ok(())
    }

    /// The dimensions of a variable: NCZarr references, `dimension_names` (or xarray's
    /// `_ARRAY_DIMENSIONS`), anonymous root dimensions for the unnamed ones.
    fn var_dims(
        &mut self,
        p: &Pending,
        fqn: &str,
        shape: &[u64],
        ncz: Option<&Json>,
    ) -> Result<Vec<DimId>> {
        let zkey = join_key(&[&p.key, ROOT_KEY]);
        if let Some(ncz) = ncz {
            let scalar = ncz.get("storage").and_then(Json::as_str) == Some("scalar")
                || ncz.get("scalar").is_some_and(|s| {
                    matches!(s, Json::Bool(true)) || s.as_u64().is_some_and(|n| n != 0)
                });
            if scalar {
                if shape.iter().product::<u64>() != 1 {
                    return Err(Error::meta(
                        &zkey,
                        format!("scalar variable {fqn} has shape {shape:?}"),
                    ));
                }
                return Ok(Vec::new());
            }
            if let Some(Json::Arr(refs)) = either(ncz, "dimension_references", "dimrefs") {
                if refs.len() != shape.len() {
                    return Err(Error::meta(
                        &zkey,
                        format!(
                            "variable {fqn}: {} dimension references for shape {shape:?}",
                            refs.len()
                        ),
                    ));
                }
                let mut dims = Vec::new();
                for (r, &len) in refs.iter().zip(shape) {
                    let r = r
                        .as_str()
                        .ok_or_else(|| Error::meta(&zkey, "dimension_references: not a name"))?;
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
        }
        let names = dimension_names(&p.node, shape.len(), fqn);
        let mut dims = Vec::with_capacity(shape.len());
        for (i, &len) in shape.iter().enumerate() {
            let d = match names.get(i).cloned().flatten() {
                Some(name) => super::named_dim(&mut self.ds, p.group, &name, len, fqn, &zkey)?,
                None => {
                    let name = anonymous_dim_name(len);
                    match self.ds.find_dim_in(Dataset::ROOT, &name) {
                        Some(d) => d,
                        // Unlimited at length 0, as in `named_dim`.
                        None => self.ds.add_dim(Dataset::ROOT, &name, len, len == 0),
                    }
                }
            };
            dims.push(d);
        }
        Ok(dims)
    }
}

/// Moves the entries named in `order` to the front, in that order.
fn reorder<T>(items: &mut Vec<(String, T)>, order: &[String]) {
    let mut rest = std::mem::take(items);
    for name in order {
        if let Some(i) = rest.iter().position(|(n, _)| n == name) {
            items.push(rest.remove(i));
        }
    }
    items.append(&mut rest);
}

/// The name of the root dimension that an unnamed dimension of length `len` reads as.
pub(super) fn anonymous_dim_name(len: u64) -> String {
    format!("_Anonymous_Dim_{len}")
}

/// `dimension_names` (else `_ARRAY_DIMENSIONS`) of array `fqn` when it matches the rank,
/// warning of what is ignored or odd in it.
fn dimension_names(node: &Json, rank: usize, fqn: &str) -> Vec<Option<String>> {
    let (field, list) = match node.get("dimension_names") {
        Some(list) => ("dimension_names", Some(list)),
        None => (
            "_ARRAY_DIMENSIONS",
            node.get("attributes")
                .and_then(|a| a.get("_ARRAY_DIMENSIONS")),
        ),
    };
    match list {
        None | Some(Json::Null) => {}
        Some(Json::Arr(items)) if items.len() == rank => {
            for item in items {
                if !matches!(item, Json::Str(_) | Json::Null) {
                    log::warn!(
                        "{fqn}: {field} item {} is not a name (a string) or null; that \
                         dimension is unnamed",
                        capped(&item.unparse())
                    );
                }
            }
        }
        Some(Json::Arr(items)) => log::warn!(
            "{fqn}: {field} lists {} name(s) for the {rank} dimension(s) of the array; ignored",
            items.len()
        ),
        Some(other) => log::warn!(
            "{fqn}: {field} {} is not a list of names; ignored",
            capped(&other.unparse())
        ),
    }
    listed_dimension_names(list, rank)
}

/// The names of a list of dimension names when it matches the rank (none else): every
/// string is a name, as zarr-python and xarray take it; `null` (or anything else) is none.
pub(super) fn listed_dimension_names(list: Option<&Json>, rank: usize) -> Vec<Option<String>> {
    let Some(Json::Arr(items)) = list else {
        return Vec::new();
    };
    if items.len() != rank {
        return Vec::new();
    }
    items
        .iter()
        .map(|i| i.as_str().map(str::to_string))
        .collect()
}

/// NCZarr's dimensions of a group: `{"d": size | {"size":..,"unlimited":..}}` or the draft's
/// list of `{name, size, unlimited}`.
fn ncz_dims(key: &str, g: &Json) -> Result<Vec<(String, u64, bool)>> {
    let truthy = |u: &Json| matches!(u, Json::Bool(true)) || u.as_u64().is_some_and(|n| n != 0);
    let mut dims = Vec::new();
    match either(g, "dimensions", "dims") {
        None | Some(Json::Null) => {}
        Some(Json::Obj(members)) => {
            for (name, v) in members {
                let bad = || Error::meta(key, format!("dimension {name}: bad size"));
                let (len, unl) = match v {
                    Json::Obj(_) => (
                        v.get("size").and_then(Json::as_u64).ok_or_else(bad)?,
                        v.get("unlimited").is_some_and(truthy),
                    ),
                    v => (v.as_u64().ok_or_else(bad)?, false),
                };
                dims.push((name.clone(), len, unl));
            }
        }
        Some(Json::Arr(items)) => {
            for d in items {
                let name = d.get("name").and_then(Json::as_str);
                let size = d.get("size").and_then(Json::as_u64);
                let (Some(name), Some(len)) = (name, size) else {
                    return Err(Error::meta(key, "dimensions: bad entry"));
                };
                dims.push((
                    name.to_string(),
                    len,
                    d.get("unlimited").is_some_and(truthy),
                ));
            }
        }
        Some(_) => return Err(Error::meta(key, "dimensions: not an object or list")),
    }
    Ok(dims)
}

/// `_nczarr_attrs`' attribute types: `{"attribute_types": {name: type}}` or the spec's list of
/// `{"name":.., "configuration": {"type":..}}`.
fn attribute_types(attributes: &Json) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let Some(a) =
        ncz_key(attributes, "_nczarr_attrs").or_else(|| ncz_key(attributes, "_nczarr_attr"))
    else {
        return out;
    };
    let types = a
        .get("attribute_types")
        .or_else(|| a.get("types"))
        .unwrap_or(a);
    match types {
        Json::Obj(members) => {
            for (name, t) in members {
                if let Some(t) = t.as_str() {
                    out.insert(name.clone(), t.to_string());
                }
            }
        }
        Json::Arr(items) => {
            for i in items {
                let name = i.get("name").and_then(Json::as_str);
                let t = i
                    .get("configuration")
                    .and_then(|c| c.get("type"))
                    .and_then(Json::as_str);
                if let (Some(name), Some(t)) = (name, t) {
                    out.insert(name.to_string(), t.to_string());
                }
            }
        }
        _ => {}
    }
    out
}

/// The netCDF type of a v3 type name (`int32`, `float64`, `char`, `string`), or of an
/// NCZarr v2-style NumPy dtype.
fn nctype_of_v3(t: &str) -> Option<NcType> {
    Some(match t {
        "bool" | "uint8" => NcType::UByte,
        "int8" => NcType::Byte,
        "int16" => NcType::Short,
        "uint16" => NcType::UShort,
        "int32" => NcType::Int,
        "uint32" => NcType::UInt,
        "int64" => NcType::Int64,
        "uint64" => NcType::UInt64,
        "float32" => NcType::Float,
        "float64" => NcType::Double,
        "char" => NcType::Char,
        "string" => NcType::String,
        other => return attrs::nctype_of_attr_dtype(other, false),
    })
}

fn key_encoding(key: &str, j: Option<&Json>) -> Result<ChunkKeyEncoding> {
    let Some(j) = j else {
        return Ok(ChunkKeyEncoding::Default { separator: '/' });
    };
    let (name, sep) = match j {
        Json::Str(name) => (name.as_str(), None),
        _ => (
            j.get("name").and_then(Json::as_str).unwrap_or(""),
            j.get("configuration").and_then(|c| c.get("separator")),
        ),
    };
    let separator = |default: char| match sep {
        None | Some(Json::Null) => Ok(default),
        Some(Json::Str(s)) if s == "/" => Ok('/'),
        Some(Json::Str(s)) if s == "." => Ok('.'),
        Some(other) => Err(Error::meta(
            key,
            format!(
                "chunk key separator {} is not \".\" or \"/\"",
                other.unparse()
            ),
        )),
    };
    match name {
        "default" => Ok(ChunkKeyEncoding::Default {
            separator: separator('/')?,
        }),
        "v2" => Ok(ChunkKeyEncoding::V2 {
            separator: separator('.')?,
        }),
        other => Err(Error::Unsupported(format!(
            "{key}: chunk_key_encoding {}",
            quoted(other)
        ))),
    }
}

/// The array-to-bytes codecs of Zarr v3, of which a codec list holds exactly one.
const ARRAY_TO_BYTES: [&str; 4] = ["bytes", "vlen-utf8", "vlen-bytes", "sharding_indexed"];

/// The array-to-array codecs nczarrfs applies, which come before the array-to-bytes codec;
/// every other codec it knows works on bytes and comes after it.
const ARRAY_TO_ARRAY: [&str; 1] = ["transpose"];

/// The name of a v3 codec entry (`{"name": ..}` or the bare name).
fn codec_name(entry: &serde_json::Value) -> Option<&str> {
    match entry {
        serde_json::Value::String(name) => Some(name),
        _ => entry.get("name")?.as_str(),
    }
}

/// Why a v3 codec list of known codecs (an array's, or the inner list of `sharding_indexed`)
/// cannot be read as Zarr v3 defines it, if it cannot: not exactly one array-to-bytes codec,
/// or a `bytes` codec whose `endian` is neither `"little"` nor `"big"` (`null` only where
/// elements are single bytes, `multi_byte` false). zarr-python refuses each of these; reading
/// one anyway would have to guess the byte order or the element encoding.
fn codec_list_problem(codecs: &[serde_json::Value], multi_byte: bool) -> Option<String> {
    let a2b: Vec<&str> = codecs
        .iter()
        .filter_map(codec_name)
        .filter(|n| ARRAY_TO_BYTES.contains(n))
        .collect();
    if a2b.len() != 1 {
        let listed = |names: &[&str]| {
            names
                .iter()
                .map(|n| quoted(n))
                .collect::<Vec<_>>()
                .join(", ")
        };
        return Some(match a2b.len() {
            0 => format!(
                "codecs {} hold no array-to-bytes codec ({}), where Zarr v3 needs one",
                capped(&serde_json::Value::Array(codecs.to_vec()).to_string()),
                listed(&ARRAY_TO_BYTES)
            ),
            n => format!(
                "codecs hold {n} array-to-bytes codecs ({}), where Zarr v3 takes one",
                listed(&a2b)
            ),
        });
    }
    if let Some(why) = codec_order_problem(codecs) {
        return Some(why);
    }
    for c in codecs {
        match codec_name(c) {
            Some("bytes") => {
                if let Some(why) = endian_problem(c, multi_byte) {
                    return Some(why);
                }
            }
            Some("sharding_indexed") => {
                let config = c.get("configuration");
                let list = |field: &str| match config.and_then(|c| c.get(field)) {
                    Some(serde_json::Value::Array(items)) => items.as_slice(),
                    _ => &[],
                };
                // zarr-python 3.1.6 takes missing inner codecs for `bytes` alone.
                let inner = config
                    .and_then(|c| c.get("codecs"))
                    .and_then(|_| codec_list_problem(list("codecs"), multi_byte));
                // The index is of 8-byte integers.
                let index = || {
                    list("index_codecs")
                        .iter()
                        .filter(|c| codec_name(c) == Some("bytes"))
                        .find_map(|c| endian_problem(c, true))
                        .map(|why| format!("index_codecs: {why}"))
                };
                if let Some(why) = inner.or_else(index) {
                    return Some(format!("sharding_indexed: {why}"));
                }
            }
            _ => {}
        }
    }
    None
}

/// Why a v3 codec list holding one array-to-bytes codec is out of Zarr v3's order, if it is:
/// array-to-array codecs, then the array-to-bytes one, then bytes-to-bytes codecs. Read in
/// another order, a `transpose` after `bytes` or a compressor before it would be applied to
/// what it was not written for; zarr-python refuses such lists.
fn codec_order_problem(codecs: &[serde_json::Value]) -> Option<String> {
    let names: Vec<&str> = codecs.iter().filter_map(codec_name).collect();
    let a2b = names.iter().position(|n| ARRAY_TO_BYTES.contains(n))?;
    names.iter().enumerate().find_map(|(i, name)| {
        let array_to_array = ARRAY_TO_ARRAY.contains(name);
        if i > a2b && array_to_array {
            Some(format!(
                "codec {} works on arrays but follows the array-to-bytes codec {}, \
                 where Zarr v3 puts it before",
                quoted(name),
                quoted(names[a2b])
            ))
        } else if i < a2b && !array_to_array {
            Some(format!(
                "codec {} works on bytes but comes before the array-to-bytes codec {}, \
                 where Zarr v3 puts it after",
                quoted(name),
                quoted(names[a2b])
            ))
        } else {
            None
        }
    })
}

/// Why a `bytes` codec's `endian` does not say the byte order of elements that need one.
/// An absent `endian` is little-endian, as zarr-python 3.1.6 reads it (the machine's order,
/// little on every machine nczarrfs runs on); an explicit `null` it refuses on wider elements.
fn endian_problem(bytes: &serde_json::Value, multi_byte: bool) -> Option<String> {
    match bytes.get("configuration").and_then(|c| c.get("endian")) {
        None => None,
        Some(serde_json::Value::String(e)) if e == "little" || e == "big" => None,
        Some(serde_json::Value::Null) if !multi_byte => None,
        Some(serde_json::Value::Null) => Some(
            "codec \"bytes\": endian null, where elements of more than one byte need \
             \"little\" or \"big\""
                .into(),
        ),
        Some(other) => Some(format!(
            "codec \"bytes\": endian {} is not \"little\" or \"big\"",
            capped(&other.to_string())
        )),
    }
}

/// Why an array of data type `type_name` whose `fill_value` is `fill` has no fill value Zarr v3
/// reads, if it has none: the field is required, and `null` is no value but of `bool`, where
/// zarr-python reads it as false. Elements never written would otherwise take a guessed value.
fn missing_fill_value(fill: Option<&Json>, type_name: &str) -> Option<String> {
    match fill {
        None => Some("no fill_value, which Zarr v3 requires".into()),
        Some(Json::Null) if type_name != "bool" => Some(format!(
            "fill_value null is no value of data_type {}",
            quoted(type_name)
        )),
        Some(_) => None,
    }
}

/// Whether the array-to-bytes `bytes` codec (possibly inside `sharding_indexed`) is
/// big-endian.
fn big_endian(codecs: &[serde_json::Value]) -> bool {
    for c in codecs {
        match c.get("name").and_then(serde_json::Value::as_str) {
            Some("bytes") => {
                return c
                    .get("configuration")
                    .and_then(|c| c.get("endian"))
                    .and_then(serde_json::Value::as_str)
                    == Some("big")
            }
            Some("sharding_indexed") => {
                if let Some(serde_json::Value::Array(inner)) =
                    c.get("configuration").and_then(|c| c.get("codecs"))
                {
                    return big_endian(inner);
                }
            }
            _ => {}
        }
    }
    false
}

/// Whether a `data_type` is a variable-length string or byte string.
fn is_vlen(data_type: Option<&Json>) -> bool {
    let name = match data_type {
        Some(Json::Str(s)) => s.as_str(),
        Some(j) => j.get("name").and_then(Json::as_str).unwrap_or(""),
        None => "",
    };
    matches!(
        name,
        "string" | "variable_length_bytes" | "bytes" | "vlen-utf8" | "vlen-bytes"
    )
}

/// How an array's `data_type` maps onto netCDF.
#[derive(Debug, Clone, PartialEq)]
struct VarType {
    nctype: NcType,
    dtype: Option<ZarrDtype>,
    /// Native string width (`string` only).
    width: usize,
    unreadable: Option<String>,
    /// The v3 type name, for fill values.
    name: String,
}

/// The netCDF type of a v3 `data_type` (a name or `{name, configuration}`), with NCZarr's
/// `type_alias`, the `bytes` codec's endianness and a declared maximum string length.
fn var_type(
    data_type: Option<&Json>,
    alias: Option<&str>,
    big: bool,
    maxstrlen: Option<usize>,
) -> VarType {
    let (name, length_bytes) = match data_type {
        Some(Json::Str(s)) => (s.clone(), None),
        Some(j @ Json::Obj(_)) => (
            j.get("name")
                .and_then(Json::as_str)
                .unwrap_or("")
                .to_string(),
            j.get("configuration")
                .and_then(|c| c.get("length_bytes"))
                .and_then(Json::as_u64)
                .and_then(|n| usize::try_from(n).ok()),
        ),
        other => (other.map_or_else(String::new, Json::unparse), None),
    };
    let order = if big {
        ByteOrder::Big
    } else {
        ByteOrder::Little
    };
    let num = |kind, size: usize, t| {
        let order = if size == 1 {
            ByteOrder::NotApplicable
        } else {
            order
        };
        (t, Some(ZarrDtype { order, kind, size }), 0)
    };
    let string = |kind, size: usize| {
        (
            NcType::String,
            Some(ZarrDtype {
                order: if kind == DtypeKind::Unicode {
                    order
                } else {
                    ByteOrder::NotApplicable
                },
                kind,
                size,
            }),
            // UTF-8 needs at most 4 bytes per UCS-4 character: `size` bytes for all.
            size,
        )
    };
    let (nctype, dtype, width) = match (name.as_str(), alias) {
        ("uint8" | "int8", Some("char")) => (
            NcType::Char,
            Some(ZarrDtype {
                order: ByteOrder::NotApplicable,
                kind: DtypeKind::Bytes,
                size: 1,
            }),
            0,
        ),
        ("bool", _) => num(DtypeKind::Bool, 1, NcType::UByte),
        ("int8", _) => num(DtypeKind::Int, 1, NcType::Byte),
        ("uint8", _) => num(DtypeKind::UInt, 1, NcType::UByte),
        ("int16", _) => num(DtypeKind::Int, 2, NcType::Short),
        ("uint16", _) => num(DtypeKind::UInt, 2, NcType::UShort),
        ("int32", _) => num(DtypeKind::Int, 4, NcType::Int),
        ("uint32", _) => num(DtypeKind::UInt, 4, NcType::UInt),
        ("int64", _) => num(DtypeKind::Int, 8, NcType::Int64),
        ("uint64", _) => num(DtypeKind::UInt, 8, NcType::UInt64),
        // Half floats are widened to float by the chunk engine.
        ("float16", _) => num(DtypeKind::Float, 2, NcType::Float),
        ("float32", _) => num(DtypeKind::Float, 4, NcType::Float),
        ("float64", _) => num(DtypeKind::Float, 8, NcType::Double),
        ("null_terminated_bytes" | "fixed_length_ascii" | "fixed_length_bytes", _)
            if length_bytes.is_some_and(|n| n > 0) =>
        {
            string(DtypeKind::Bytes, length_bytes.unwrap_or(1))
        }
        ("fixed_length_utf32", _) if length_bytes.is_some_and(|n| n > 0 && n % 4 == 0) => {
            string(DtypeKind::Unicode, length_bytes.unwrap_or(4))
        }
        // Variable-length values are held NUL-padded in slots of a fixed width.
        ("string" | "variable_length_bytes" | "bytes" | "vlen-utf8" | "vlen-bytes", _) => {
            let w = maxstrlen.unwrap_or(DEFAULT_VLEN_WIDTH);
            (
                NcType::String,
                Some(ZarrDtype {
                    order: ByteOrder::NotApplicable,
                    kind: DtypeKind::Bytes,
                    size: w,
                }),
                w,
            )
        }
        // The NCZarr draft stores `string` of at most n bytes as raw bits `r<8n>`.
        (r, Some(a)) if r.starts_with('r') && matches!(a, "string" | "char") => {
            match r[1..].parse::<usize>() {
                Ok(bits) if bits > 0 && bits % 8 == 0 => {
                    if a == "char" && bits == 8 {
                        (
                            NcType::Char,
                            Some(ZarrDtype {
                                order: ByteOrder::NotApplicable,
                                kind: DtypeKind::Bytes,
                                size: 1,
                            }),
                            0,
                        )
                    } else {
                        string(DtypeKind::Bytes, bits / 8)
                    }
                }
                _ => return unreadable(name, alias),
            }
        }
        _ => return unreadable(name, alias),
    };
    if width > crate::model::MAX_STRING_WIDTH {
        return VarType {
            unreadable: Some(format!(
                "string width {width} of data_type {} is more than the {} bytes \
                 nczarrfs handles",
                quoted(&name),
                crate::model::MAX_STRING_WIDTH
            )),
            ..unreadable(name, alias)
        };
    }
    VarType {
        nctype,
        dtype,
        width,
        unreadable: None,
        name,
    }
}

/// An unsupported `data_type`: the variable stays visible as `ubyte` without data.
fn unreadable(name: String, alias: Option<&str>) -> VarType {
    let why = match alias {
        Some(a) => format!(
            "unsupported data_type {} (type_alias {})",
            quoted(&name),
            quoted(a)
        ),
        None => format!("unsupported data_type {}", quoted(&name)),
    };
    VarType {
        nctype: NcType::UByte,
        dtype: None,
        width: 0,
        unreadable: Some(why),
        name,
    }
}

/// A v3 `fill_value` as one native element: numbers, `"NaN"`, `"Infinity"`, `"-Infinity"`,
/// hex-encoded float bits (`"0x7fc00000"`), booleans, strings (base64 for byte strings).
fn fill_value(key: &str, value: &Json, vt: &VarType) -> Result<Option<Vec<u8>>> {
    // zarr-python reads a null fill value of `bool` as false; of any other type it leaves
    // the variable unreadable (see `missing_fill_value`).
    if *value == Json::Null {
        return Ok((vt.name == "bool").then(|| vec![0]));
    }
    let bad = || {
        Error::meta(
            key,
            format!(
                "fill_value {} does not fit data_type {}",
                value.unparse(),
                vt.name
            ),
        )
    };
    // One element: a list (or object) of any other type is refused, as zarr-python refuses
    // it, where its first value would otherwise be taken. Raw bits `r<N>` (the NCZarr draft's
    // char and string) take one, a number per byte, as the Zarr v3 specification has it.
    match value {
        Json::Arr(items) if vt.name.starts_with('r') => {
            // As many bytes as an element has: a char's one, a string's width.
            return items
                .iter()
                .map(|b| b.as_u64().and_then(|b| u8::try_from(b).ok()))
                .collect::<Option<Vec<u8>>>()
                .filter(|b| vt.dtype.as_ref().is_some_and(|d| d.size == b.len()))
                .map(Some)
                .ok_or_else(bad);
        }
        Json::Arr(_) | Json::Obj(_) => return Err(bad()),
        _ => {}
    }
    let hex = value
        .as_str()
        .and_then(|s| s.strip_prefix("0x"))
        .map(|h| u64::from_str_radix(h, 16).map_err(|_| bad()))
        .transpose()?;
    let out = match vt.nctype {
        NcType::Char => match value {
            Json::Str(s) => vec![s.bytes().next().unwrap_or(0)],
            other => match attrs::to_type(key, "fill_value", other, NcType::UByte) {
                Ok(AttrValue::UByte(v)) => vec![*v.first().ok_or_else(bad)?],
                _ => return Err(bad()),
            },
        },
        NcType::String => {
            let mut b = match (value, &vt.dtype) {
                // Text is text; byte strings are base64 (handled as in v2).
                (Json::Str(s), _) if vt.name == "string" => s.as_bytes().to_vec(),
                (_, Some(d)) => super::fill::fill_value(key, value, NcType::String, d, vt.width)?
                    .unwrap_or_default(),
                _ => return Err(bad()),
            };
            b.resize(vt.width, 0);
            b
        }
        NcType::Float | NcType::Double => {
            let f = match (hex, vt.name.as_str()) {
                (Some(bits), "float16") => {
                    f64::from(half_to_f32(u16::try_from(bits).map_err(|_| bad())?))
                }
                (Some(bits), "float32") => {
                    f64::from(f32::from_bits(u32::try_from(bits).map_err(|_| bad())?))
                }
                (Some(bits), _) => f64::from_bits(bits),
                (None, _) => match attrs::to_type(key, "fill_value", value, NcType::Double) {
                    Ok(AttrValue::Double(v)) if v.len() == 1 => v[0],
                    _ => return Err(bad()),
                },
            };
            if vt.nctype == NcType::Float {
                // Going through f64 keeps a NaN's payload only approximately; a hex f32 NaN
                // keeps its exact bits.
                match (hex, vt.name.as_str()) {
                    (Some(bits), "float32") => (bits as u32).to_le_bytes().to_vec(),
                    _ => (f as f32).to_le_bytes().to_vec(),
                }
            } else {
                f.to_le_bytes().to_vec()
            }
        }
        t => {
            let v = match value {
                Json::Bool(b) => Json::Num(u8::from(*b).to_string()),
                v => v.clone(),
            };
            let v = attrs::to_type(key, "fill_value", &v, t).map_err(|_| bad())?;
            match v {
                AttrValue::Byte(x) => x.first().ok_or_else(bad)?.to_le_bytes().to_vec(),
                AttrValue::UByte(x) => x.first().ok_or_else(bad)?.to_le_bytes().to_vec(),
                AttrValue::Short(x) => x.first().ok_or_else(bad)?.to_le_bytes().to_vec(),
                AttrValue::UShort(x) => x.first().ok_or_else(bad)?.to_le_bytes().to_vec(),
                AttrValue::Int(x) => x.first().ok_or_else(bad)?.to_le_bytes().to_vec(),
                AttrValue::UInt(x) => x.first().ok_or_else(bad)?.to_le_bytes().to_vec(),
                AttrValue::Int64(x) => x.first().ok_or_else(bad)?.to_le_bytes().to_vec(),
                AttrValue::UInt64(x) => x.first().ok_or_else(bad)?.to_le_bytes().to_vec(),
                _ => return Err(bad()),
            }
        }
    };
    Ok(Some(out))
}

/// IEEE 754 binary16 to binary32 (exact).
pub(crate) fn half_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        // Subnormal: man * 2^-24, exact in f32.
        (0, m) => {
            let v = m as f32 * f32::powi(2.0, -24);
            return if sign != 0 { -v } else { v };
        }
        (0x1f, m) => sign | 0x7f80_0000 | (m << 13),
        (e, m) => sign | ((e + 127 - 15) << 23) | (m << 13),
    };
    f32::from_bits(bits)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zmap::MemoryMap;

    fn open(objs: &[(&str, &str)], mode: &Mode) -> Result<Dataset> {
        let map = MemoryMap::new();
        for (k, v) in objs {
            map.insert(k, v.as_bytes()).unwrap();
        }
        super::super::read_dataset(&map, mode)
    }

    fn array(dtype: &str, shape: &str, fill: &str, extra: &str) -> String {
        format!(
            r#"{{"zarr_format": 3, "node_type": "array", "shape": {shape}, "data_type": {dtype},
            "chunk_grid": {{"name": "regular", "configuration": {{"chunk_shape": {shape}}}}},
            "chunk_key_encoding": {{"name": "default", "configuration": {{"separator": "/"}}}},
            "fill_value": {fill}, "codecs": [{{"name": "bytes", "configuration": {{"endian": "little"}}}}]{extra}}}"#
        )
    }

    const GROUP: &str = r#"{"zarr_format": 3, "node_type": "group", "attributes": {}}"#;

    /// The message about a root `zarr.json` holding `root`.
    fn root_error(root: &str) -> String {
        open(&[("zarr.json", root)], &Mode::default())
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn format_and_node_type_errors_show_the_value_as_written() {
        for (root, why) in [
            (
                r#"{"zarr_format": 2, "node_type": "group"}"#,
                "zarr_format 2 is not 3",
            ),
            (
                r#"{"zarr_format": "3", "node_type": "group"}"#,
                r#"zarr_format "3" is not 3"#,
            ),
            (
                r#"{"node_type": "group"}"#,
                "zarr_format is missing (it must be 3)",
            ),
            (
                r#"{"zarr_format": 3, "node_type": "grup"}"#,
                r#"node_type "grup" is not "group" or "array""#,
            ),
            (
                r#"{"zarr_format": 3, "node_type": 7}"#,
                r#"node_type 7 is not "group" or "array""#,
            ),
        ] {
            assert_eq!(
                root_error(root),
                format!(r#"invalid metadata in "zarr.json": {why}"#),
                "{root}"
            );
        }
    }

    #[test]
    fn a_huge_hostile_value_is_cut_in_the_message() {
        let root = format!(
            r#"{{"zarr_format": 3, "node_type": "{}"}}"#,
            "a".repeat(100_000)
        );
        let e = root_error(&root);
        assert!(e.len() < 300, "{} characters", e.len());
        assert!(e.contains(r#"node_type "aaaa"#) && e.contains("a…a"), "{e}");
    }

    /// zarr-python and xarray take any string as a dimension name; `null` is none.
    #[test]
    fn dimension_names_are_kept_as_written() {
        let a = array(
            "\"int8\"",
            "[2, 3]",
            "0",
            r#", "dimension_names": ["x/y", ""]"#,
        );
        let b = array(
            "\"int8\"",
            "[2, 2]",
            "0",
            r#", "dimension_names": ["p/q", 5]"#,
        );
        let root = [
            ("zarr.json", GROUP),
            ("a/zarr.json", &a),
            ("b/zarr.json", &b),
        ];
        let ds = open(&root, &Mode::default()).unwrap();
        let names = |v: &str| -> Vec<String> {
            let var = ds.var(ds.find_var(v).unwrap());
            var.dims.iter().map(|d| ds.dim(*d).name.clone()).collect()
        };
        assert_eq!(names("a"), ["x/y", ""]);
        assert_eq!(names("b"), ["p/q", "_Anonymous_Dim_2"]);
    }

    #[test]
    fn implicit_groups_dimension_names_and_anonymous_dims() {
        let a = array(
            "\"int16\"",
            "[2, 3]",
            "0",
            r#", "dimension_names": ["y", null], "attributes": {"units": "m", "v": [1, 2.5]}"#,
        );
        let b = array(
            "\"float32\"",
            "[2]",
            "\"NaN\"",
            r#", "dimension_names": ["y"]"#,
        );
        let c = array("\"float32\"", "[4]", "0", r#", "dimension_names": ["y"]"#);
        let ds = open(
            &[
                ("zarr.json", GROUP),
                // "imp" has no zarr.json: an implicit group holding "imp/g2/a".
                ("imp/g2/zarr.json", GROUP),
                ("imp/g2/a/zarr.json", &a),
                ("imp/g2/b/zarr.json", &b),
                ("imp/g2/sub/c/zarr.json", &c),
                ("nothing/here/c/0", "x"),
            ],
            &Mode::default(),
        )
        .unwrap();
        assert_eq!(ds.groups.len(), 4, "root, imp, g2, sub");
        let g2 = ds.find_group("/imp/g2").unwrap();
        assert!(ds.find_group("/nothing").is_none());
        let av = ds.var(ds.find_var("/imp/g2/a").unwrap());
        assert_eq!(av.nctype, NcType::Short);
        let dims: Vec<String> = av.dims.iter().map(|d| ds.dim_fqn(*d)).collect();
        assert_eq!(dims, ["/imp/g2/y", "/_Anonymous_Dim_3"]);
        // b reuses the visible y of length 2; c's y of length 4 is a new one in its group.
        let bv = ds.var(ds.find_var("/imp/g2/b").unwrap());
        assert_eq!(bv.dims, vec![av.dims[0]]);
        let cv = ds.var(ds.find_var("/imp/g2/sub/c").unwrap());
        assert_eq!(ds.dim_fqn(cv.dims[0]), "/imp/g2/sub/y");
        assert_eq!(
            bv.storage.fill_value.as_deref(),
            Some(&f32::NAN.to_le_bytes()[..])
        );
        assert_eq!(
            av.attrs,
            vec![
                Attribute {
                    name: "units".into(),
                    value: AttrValue::Char(b"m".to_vec())
                },
                Attribute {
                    name: "v".into(),
                    value: AttrValue::Double(vec![1.0, 2.5])
                },
            ]
        );
        assert_eq!(ds.group(g2).vars.len(), 2);
        assert_eq!(
            av.storage.key_encoding,
            ChunkKeyEncoding::Default { separator: '/' }
        );
    }

    #[test]
    fn fill_values_in_every_form() {
        let f = |dtype: &str, fill: &str| -> Option<Vec<u8>> {
            let a = array(dtype, "[1]", fill, "");
            let ds = open(
                &[("zarr.json", GROUP), ("v/zarr.json", &a)],
                &Mode::default(),
            )
            .unwrap();
            ds.var(ds.find_var("v").unwrap()).storage.fill_value.clone()
        };
        let le32 = |x: f32| Some(x.to_le_bytes().to_vec());
        let le64 = |x: f64| Some(x.to_le_bytes().to_vec());
        assert_eq!(f("\"float32\"", "\"Infinity\""), le32(f32::INFINITY));
        assert_eq!(f("\"float64\"", "\"-Infinity\""), le64(f64::NEG_INFINITY));
        assert_eq!(
            f("\"float32\"", "\"0x7fc00000\""),
            Some(vec![0, 0, 0xc0, 0x7f])
        );
        assert_eq!(f("\"float64\"", "\"0x3ff0000000000000\""), le64(1.0));
        // binary16 0x3c00 is 1.0; widened to a native float.
        assert_eq!(f("\"float16\"", "\"0x3c00\""), le32(1.0));
        assert_eq!(f("\"float16\"", "-2.5"), le32(-2.5));
        assert_eq!(f("\"bool\"", "true"), Some(vec![1]));
        assert_eq!(f("\"bool\"", "false"), Some(vec![0]));
        assert_eq!(
            f("\"uint64\"", "18446744073709551614"),
            Some(u64::MAX.wrapping_sub(1).to_le_bytes().to_vec())
        );
        assert_eq!(f("\"int8\"", "-5"), Some(vec![0xfb]));
        assert_eq!(f("\"int32\"", "null"), None);
        // zarr-python 3.1.6: |S3 with fill b"ab" is "YWI="; <U2 "xy"; vlen string "".
        let s = r#"{"name": "null_terminated_bytes", "configuration": {"length_bytes": 3}}"#;
        assert_eq!(f(s, "\"YWI=\""), Some(b"ab\0".to_vec()));
        let u = r#"{"name": "fixed_length_utf32", "configuration": {"length_bytes": 8}}"#;
        assert_eq!(f(u, "\"xy\""), Some(b"xy\0\0\0\0\0\0".to_vec()));
        assert_eq!(
            f("\"string\"", "\"YWI=\""),
            // With no chunks to measure, the slots are as wide as the fill value.
            Some(b"YWI=".to_vec())
        );
        // A value that does not fit leaves the variable unreadable, not a silent wrap.
        let le = r#"[{"name": "bytes", "configuration": {"endian": "little"}}]"#;
        for (dtype, fill) in [
            ("\"uint8\"", "300"),
            ("\"int32\"", "2.5"),
            ("\"int32\"", "\"NaN\""),
            ("\"float64\"", "\"abc\""),
        ] {
            let why = why_unreadable(dtype, le, &format!(r#", "fill_value": {fill}"#));
            assert_eq!(
                why.unwrap(),
                format!(
                    "fill_value {fill} does not fit data_type {}",
                    &dtype[1..dtype.len() - 1]
                )
            );
        }
        // Raw bits take one number per byte (the Zarr v3 specification).
        let root = r#"{"node_type": "group", "zarr_format": 3, "attributes": {"_nczarr_superblock": {"version": "3.0.0"}, "_nczarr_group": {"dimensions": [{"name": "t", "size": 1}], "arrays": ["v"], "subgroups": []}}}"#;
        let alias = r#", "attributes": {"_nczarr_array": {"dimension_references": ["/t"], "type_alias": "string"}}"#;
        let a = array("\"r16\"", "[1]", "[97, 0]", alias);
        let ds = open(
            &[("zarr.json", root), ("v/zarr.json", &a)],
            &Mode::default(),
        )
        .unwrap();
        assert_eq!(
            ds.var(ds.find_var("v").unwrap()).storage.fill_value,
            Some(b"a\0".to_vec())
        );
    }

    /// zarr-python 3.1.6 refuses a list where one value is due ("Invalid type: [1]. Expected
    /// an integer.", "Invalid type: [1.5]. Expected a float or a special string encoding of a
    /// float."), and an object likewise. Of `bool` it takes `[false]` as false and `{"a": 1}`
    /// as true (NumPy's `np.bool_` of the value), which the specification's one boolean does
    /// not allow: refused too.
    #[test]
    fn a_fill_value_is_one_value() {
        for (dtype, fill) in [
            ("\"int32\"", "[1]"),
            ("\"float64\"", "[1.5]"),
            ("\"float32\"", "[]"),
            ("\"int32\"", r#"{"a": 1}"#),
            ("\"bool\"", "[true]"),
        ] {
            let le = r#"[{"name": "bytes", "configuration": {"endian": "little"}}]"#;
            let why = why_unreadable(dtype, le, &format!(r#", "fill_value": {fill}"#)).unwrap();
            assert!(
                why.starts_with(&format!("fill_value {fill} does not fit")),
                "{why}"
            );
        }
    }

    /// The reason `v` (data type `dtype`, codecs `codecs`, fill value `fill`) is unreadable,
    /// beside a readable `w` in the same group; `None` where `v` reads.
    fn why_unreadable(dtype: &str, codecs: &str, fill: &str) -> Option<String> {
        let v = format!(
            r#"{{"zarr_format": 3, "node_type": "array", "shape": [4], "data_type": {dtype},
            "chunk_grid": {{"name": "regular", "configuration": {{"chunk_shape": [4]}}}},
            "chunk_key_encoding": {{"name": "default", "configuration": {{"separator": "/"}}}}
            {fill}, "codecs": {codecs}}}"#
        );
        let w = array("\"int32\"", "[2]", "0", "");
        let ds = open(
            &[
                ("zarr.json", GROUP),
                ("v/zarr.json", &v),
                ("w/zarr.json", &w),
            ],
            &Mode::default(),
        )
        .unwrap();
        assert_eq!(ds.var(ds.find_var("w").unwrap()).storage.unreadable, None);
        ds.var(ds.find_var("v").unwrap()).storage.unreadable.clone()
    }

    /// zarr-python 3.1.6 refuses every `endian` but "little" and "big" ("Value must be one
    /// of ['big', 'little']"), and a missing one where elements have more than one byte.
    #[test]
    fn a_bytes_codec_endian_is_little_or_big() {
        let bytes = |config: &str| format!(r#"[{{"name": "bytes"{config}}}]"#);
        let fill = r#", "fill_value": 0"#;
        for endian in [r#""BIG""#, r#""Big""#, r#""be""#, r#""middle""#, "1"] {
            let codecs = bytes(&format!(r#", "configuration": {{"endian": {endian}}}"#));
            let why = why_unreadable("\"int32\"", &codecs, fill).unwrap();
            assert_eq!(
                why,
                format!(r#"codec "bytes": endian {endian} is not "little" or "big""#)
            );
        }
        let null = bytes(r#", "configuration": {"endian": null}"#);
        let why = why_unreadable("\"float64\"", &null, fill).unwrap();
        assert!(why.contains("endian null, where"), "{why}");
        // Single bytes have no byte order to say.
        assert_eq!(why_unreadable("\"int8\"", &null, fill), None);
        // zarr-python reads an absent endian as its machine's order (little).
        for codecs in [
            bytes(r#", "configuration": {}"#),
            bytes(""),
            r#"["bytes"]"#.to_string(),
        ] {
            assert_eq!(
                why_unreadable("\"float64\"", &codecs, fill),
                None,
                "{codecs}"
            );
        }
        for endian in ["little", "big"] {
            let codecs = bytes(&format!(r#", "configuration": {{"endian": "{endian}"}}"#));
            assert_eq!(why_unreadable("\"uint16\"", &codecs, fill), None);
        }
        // Inside a shard, and in its index (of 8-byte integers).
        let shard = |inner: &str, index: &str| {
            format!(
                r#"[{{"name": "sharding_indexed", "configuration": {{"chunk_shape": [2],
                "codecs": [{{"name": "bytes", "configuration": {{"endian": {inner}}}}}],
                "index_codecs": [{{"name": "bytes", "configuration": {{"endian": {index}}}}}]}}}}]"#
            )
        };
        let why = why_unreadable("\"int32\"", &shard(r#""BIG""#, r#""little""#), fill);
        assert_eq!(
            why.as_deref(),
            Some(r#"sharding_indexed: codec "bytes": endian "BIG" is not "little" or "big""#)
        );
        let why = why_unreadable("\"int8\"", &shard("null", "null"), fill).unwrap();
        assert!(why.starts_with("sharding_indexed: index_codecs: codec \"bytes\": endian null"));
        assert_eq!(
            why_unreadable("\"int32\"", &shard(r#""big""#, r#""little""#), fill),
            None
        );
    }

    /// zarr-python 3.1.6: "Invalid codec order. ArrayArrayCodec ... must be preceded by
    /// another ArrayArrayCodec", and the same for a BytesBytesCodec before the ArrayBytesCodec.
    #[test]
    fn codecs_come_in_zarr_v3_order() {
        let fill = r#", "fill_value": 0"#;
        let le = r#"{"name": "bytes", "configuration": {"endian": "little"}}"#;
        let transpose = r#"{"name": "transpose", "configuration": {"order": [0]}}"#;
        let gzip = r#"{"name": "gzip", "configuration": {"level": 1}}"#;
        let why = why_unreadable("\"int32\"", &format!("[{le}, {transpose}]"), fill);
        assert_eq!(
            why.as_deref(),
            Some(
                "codec \"transpose\" works on arrays but follows the array-to-bytes codec \
                 \"bytes\", where Zarr v3 puts it before"
            )
        );
        let why = why_unreadable("\"int32\"", &format!("[{gzip}, {le}]"), fill);
        assert_eq!(
            why.as_deref(),
            Some(
                "codec \"gzip\" works on bytes but comes before the array-to-bytes codec \
                 \"bytes\", where Zarr v3 puts it after"
            )
        );
        let inner = format!(
            r#"[{{"name": "sharding_indexed", "configuration": {{"chunk_shape": [2],
                "codecs": [{le}, {transpose}], "index_codecs": [{le}]}}}}]"#
        );
        let why = why_unreadable("\"int32\"", &inner, fill).unwrap();
        assert!(
            why.starts_with("sharding_indexed: codec \"transpose\""),
            "{why}"
        );
        for good in [
            format!("[{transpose}, {le}, {gzip}]"),
            format!("[{le}, {gzip}]"),
        ] {
            assert_eq!(why_unreadable("\"int32\"", &good, fill), None, "{good}");
        }
    }

    /// zarr-python 3.1.6: "At least one ArrayBytesCodec is required.", "Only one
    /// ArrayBytesCodec is allowed."
    #[test]
    fn a_codec_list_holds_exactly_one_array_to_bytes_codec() {
        let fill = r#", "fill_value": 0"#;
        let le = r#"{"name": "bytes", "configuration": {"endian": "little"}}"#;
        let zstd = r#"{"name": "zstd", "configuration": {"level": 1}}"#;
        for codecs in ["[]".to_string(), format!("[{zstd}]")] {
            let why = why_unreadable("\"uint16\"", &codecs, fill).unwrap();
            assert!(why.contains("hold no array-to-bytes codec"), "{why}");
        }
        let why = why_unreadable("\"uint16\"", &format!("[{le}, {zstd}, {le}]"), fill);
        assert_eq!(
            why.as_deref(),
            Some(
                r#"codecs hold 2 array-to-bytes codecs ("bytes", "bytes"), where Zarr v3 takes one"#
            )
        );
        let why = why_unreadable(
            "\"string\"",
            &format!(r#"[{{"name": "vlen-utf8"}}, {le}]"#),
            r#", "fill_value": """#,
        );
        assert!(why.is_some_and(|w| w.contains("2 array-to-bytes codecs")));
        let inner_empty = r#"[{"name": "sharding_indexed", "configuration": {"chunk_shape": [2], "codecs": []}}]"#;
        let why = why_unreadable("\"int8\"", inner_empty, fill).unwrap();
        assert!(
            why.starts_with("sharding_indexed: codecs [] hold no"),
            "{why}"
        );
        // A codec nczarrfs does not know is named as that, whatever it does.
        let unknown = r#"[{"name": "packbits"}]"#;
        let why = why_unreadable("\"int8\"", unknown, fill).unwrap();
        assert!(why.contains("unknown codec"), "{why}");
        assert_eq!(
            why_unreadable("\"int8\"", &format!("[{le}, {zstd}]"), fill),
            None
        );
    }

    /// zarr-python 3.1.6 refuses an array without `fill_value` ('fill_value') and a `null`
    /// one ("Invalid type: None. Expected an integer."), but for `bool`, where null is false.
    #[test]
    fn a_fill_value_is_required_and_null_only_for_bool() {
        let le = r#"[{"name": "bytes", "configuration": {"endian": "little"}}]"#;
        for dtype in ["\"int32\"", "\"float64\"", "\"uint8\""] {
            let why = why_unreadable(dtype, le, r#", "fill_value": null"#).unwrap();
            assert_eq!(
                why,
                format!("fill_value null is no value of data_type {dtype}")
            );
            let why = why_unreadable(dtype, le, "").unwrap();
            assert_eq!(why, "no fill_value, which Zarr v3 requires");
        }
        assert_eq!(
            why_unreadable("\"bool\"", le, r#", "fill_value": null"#),
            None
        );
        let a = array("\"bool\"", "[1]", "null", "");
        let ds = open(
            &[("zarr.json", GROUP), ("v/zarr.json", &a)],
            &Mode::default(),
        )
        .unwrap();
        assert_eq!(
            ds.var(ds.find_var("v").unwrap()).storage.fill_value,
            Some(vec![0])
        );
    }

    #[test]
    fn half_floats() {
        assert_eq!(half_to_f32(0x3c00), 1.0);
        assert_eq!(half_to_f32(0xc000), -2.0);
        assert_eq!(half_to_f32(0x7bff), 65504.0);
        assert_eq!(half_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(half_to_f32(0x8001), -(2f32.powi(-24)));
        assert_eq!(half_to_f32(0x7c00), f32::INFINITY);
        assert!(half_to_f32(0x7e00).is_nan());
    }

    #[test]
    fn unsupported_types_stay_visible() {
        let a = array("\"complex64\"", "[2]", "[0.0, 0.0]", "");
        let ds = open(
            &[("zarr.json", GROUP), ("z/zarr.json", &a)],
            &Mode::default(),
        )
        .unwrap();
        let v = ds.var(ds.find_var("z").unwrap());
        assert!(v.storage.unreadable.is_some());
        assert_eq!(v.nctype, NcType::UByte);
    }

    // The draft's expected store for ref_jsonconvention (pr3068_v3/v3only/*.zmap).
    const NCZ_ROOT: &str = r#"{"node_type": "group", "zarr_format": 3, "attributes": {"globalfloat": 1, "globalfloatvec": [1,2], "globalchar": "abc", "globaljson": [0.,0.,1.], "_NCProperties": "version=2,netcdf=0.0.0,nczarr=0.0.0", "_nczarr_group": {"dimensions": {"d1": {"size": 1, "unlimited": 0}}, "arrays": ["v"], "groups": []}, "_nczarr_superblock": {"version": "0.0.0", "format": 2}, "_nczarr_attrs": {"attribute_types": {"globalfloat": "float64", "globalfloatvec": "float64", "globalchar": "char", "globaljson": "json", "_NCProperties": "char", "_nczarr_group": "json", "_nczarr_superblock": "json", "_nczarr_attrs": "json"}}}}"#;
    const NCZ_V: &str = r#"{"node_type": "array", "zarr_format": 3, "data_type": "int32", "fill_value": -2147483647, "shape": [1], "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [1]}}, "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}}, "dimension_names": ["d1"], "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}], "attributes": {"varvec1": "1.0, 0.0, 0.0", "varvec2": [0.,0.,1.], "_FillValue": -2147483647, "_ARRAY_DIMENSIONS": ["d1"], "_nczarr_array": {"dimension_references": ["/d1"], "storage": "chunked"}, "_nczarr_attrs": {"attribute_types": {"varvec1": "char", "varvec2": "json", "_FillValue": "int32", "_ARRAY_DIMENSIONS": "json", "_nczarr_array": "json", "_nczarr_attrs": "json"}}}}"#;

    #[test]
    fn nczarr_on_v3_attributes_are_read_and_hidden() {
        let ds = open(
            &[("zarr.json", NCZ_ROOT), ("v/zarr.json", NCZ_V)],
            &Mode::default(),
        )
        .unwrap();
        let root = ds.group(Dataset::ROOT);
        let names: Vec<&str> = root.attrs.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(
            names,
            ["globalfloat", "globalfloatvec", "globalchar", "globaljson"]
        );
        assert_eq!(root.attrs[0].value, AttrValue::Double(vec![1.0]));
        assert_eq!(root.attrs[3].value, AttrValue::Char(b"[0.,0.,1.]".to_vec()));
        let d1 = ds.find_dim("/d1").unwrap();
        assert_eq!((ds.dim(d1).len, ds.dim(d1).unlimited), (1, false));
        let v = ds.var(ds.find_var("v").unwrap());
        assert_eq!(v.dims, vec![d1]);
        let names: Vec<&str> = v.attrs.iter().map(|a| a.name.as_str()).collect();
        assert_eq!(names, ["varvec1", "varvec2", "_FillValue"]);
        assert_eq!(v.attrs[2].value, AttrValue::Int(vec![-2147483647]));
    }

    /// The group `g` of an NCZarr dataset on Zarr v3 (as `copy -k nczarr,v3` writes it: the
    /// superblock in the root's attributes alone), opened as a dataset: its arrays name
    /// `/g/lon` from the root that is not there. Refused as the group it is; pure Zarr reads it.
    #[test]
    fn a_group_of_an_nczarr_dataset_is_told_apart_from_a_dataset() {
        let group = r#"{"node_type": "group", "zarr_format": 3, "attributes": {"_nczarr_group": {"dimensions": {"lon": {"size": 2, "unlimited": 0}}, "arrays": ["w"], "groups": []}}}"#;
        let w = array(
            "\"int32\"",
            "[2]",
            "0",
            r#", "dimension_names": ["lon"], "attributes": {"_nczarr_array": {"dimension_references": ["/g/lon"]}}"#,
        );
        let objs = [("zarr.json", group), ("w/zarr.json", &w)];
        match open(&objs, &Mode::default()) {
            Err(e @ Error::GroupInsideNczarr { .. }) => {
                assert!(e.to_string().contains("#mode=zarr"), "{e}")
            }
            other => panic!("{other:?}"),
        }
        let pure = Mode {
            format: Some(Format::Zarr),
            ..Mode::default()
        };
        let ds = open(&objs, &pure).unwrap();
        let w = ds.var(ds.find_var("w").unwrap());
        assert_eq!(ds.dim_fqn(w.dims[0]), "/lon");
    }

    #[test]
    fn nczarr_type_alias_and_unlimited() {
        let root = r#"{"node_type": "group", "zarr_format": 3, "attributes": {"_nczarr_superblock": {"version": "3.0.0"}, "_nczarr_group": {"dimensions": [{"name": "t", "size": 2, "unlimited": 1}], "arrays": ["s", "c"], "subgroups": []}}}"#;
        let c = array(
            "\"uint8\"",
            "[3]",
            "0",
            r#", "attributes": {"_nczarr_array": {"dimension_references": ["/t"], "type_alias": "char"}}"#,
        );
        let s = array(
            "\"r64\"",
            "[2]",
            "null",
            r#", "attributes": {"_nczarr_array": {"dimension_references": ["/t"], "type_alias": "string"}}"#,
        );
        let ds = open(
            &[
                ("zarr.json", root),
                ("c/zarr.json", &c),
                ("s/zarr.json", &s),
            ],
            &Mode::default(),
        )
        .unwrap();
        let t = ds.find_dim("/t").unwrap();
        // Unlimited: grown to the longest variable.
        assert_eq!((ds.dim(t).len, ds.dim(t).unlimited), (3, true));
        // Creation order from _nczarr_group, not the listing's.
        let names: Vec<&str> = ds
            .group(Dataset::ROOT)
            .vars
            .iter()
            .map(|v| ds.var(*v).name.as_str())
            .collect();
        assert_eq!(names, ["s", "c"]);
        assert_eq!(ds.var(ds.find_var("c").unwrap()).nctype, NcType::Char);
        let sv = ds.var(ds.find_var("s").unwrap());
        assert_eq!((sv.nctype, sv.string_width), (NcType::String, 8));
        // Read as pure Zarr, the alias is ignored and r64 is not a netCDF type.
        let mode = Mode {
            format: Some(Format::Zarr),
            ..Mode::default()
        };
        let ds = open(
            &[
                ("zarr.json", root),
                ("c/zarr.json", &c),
                ("s/zarr.json", &s),
            ],
            &mode,
        )
        .unwrap();
        assert_eq!(ds.var(ds.find_var("c").unwrap()).nctype, NcType::UByte);
        assert!(ds
            .var(ds.find_var("s").unwrap())
            .storage
            .unreadable
            .is_some());
    }

    #[test]
    fn consolidated_metadata_is_used_without_listing() {
        let a = array("\"int64\"", "[2]", "0", r#", "dimension_names": ["x"]"#);
        let root = format!(
            r#"{{"zarr_format": 3, "node_type": "group", "attributes": {{"title": "t"}},
            "consolidated_metadata": {{"kind": "inline", "must_understand": false,
            "metadata": {{"g": {GROUP}, "g/a": {a}}}}}}}"#
        );
        // Only the root object exists: everything else comes from the consolidated metadata.
        let ds = open(&[("zarr.json", &root)], &Mode::default()).unwrap();
        let v = ds.var(ds.find_var("/g/a").unwrap());
        assert_eq!(v.nctype, NcType::Int64);
        assert_eq!(ds.dim_fqn(v.dims[0]), "/g/x");
        assert_eq!(v.storage.key, "g/a");
    }

    #[test]
    fn damage_in_consolidated_metadata_is_blamed_on_its_entry() {
        let damaged = array("\"int64\"", "[2]", "0", r#", "zarr_format": 2"#).replacen(
            r#""zarr_format": 3, "#,
            "",
            1,
        );
        let root = format!(
            r#"{{"zarr_format": 3, "node_type": "group",
            "consolidated_metadata": {{"kind": "inline", "must_understand": false,
            "metadata": {{"t": {damaged}}}}}}}"#
        );
        let intact = array("\"int64\"", "[2]", "0", "");
        let objs = [("zarr.json", root.as_str()), ("t/zarr.json", &intact)];
        assert_eq!(
            open(&objs, &Mode::default()).unwrap_err().to_string(),
            r#"invalid metadata in the consolidated_metadata of "zarr.json" (its entry for "t"): zarr_format 2 is not 3"#
        );
        let objs = [("zarr.json", GROUP), ("t/zarr.json", &damaged)];
        assert_eq!(
            open(&objs, &Mode::default()).unwrap_err().to_string(),
            r#"invalid metadata in "t/zarr.json": zarr_format 2 is not 3"#
        );
    }

    #[test]
    fn chunk_key_encodings_and_bad_metadata() {
        let ke = |j: &str| key_encoding("k", Some(&Json::parse("k", j.as_bytes()).unwrap()));
        assert_eq!(
            ke(r#"{"name": "default", "configuration": {"separator": "."}}"#).unwrap(),
            ChunkKeyEncoding::Default { separator: '.' }
        );
        assert_eq!(
            ke(r#"{"name": "v2"}"#).unwrap(),
            ChunkKeyEncoding::V2 { separator: '.' }
        );
        assert!(ke(r#"{"name": "v2", "configuration": {"separator": "-"}}"#).is_err());
        assert!(ke(r#"{"name": "fancy"}"#).is_err());
        let bad = r#"{"zarr_format": 3, "node_type": "array", "shape": [2], "data_type": "int8", "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [0]}}, "fill_value": 0, "codecs": []}"#;
        let err = open(
            &[("zarr.json", GROUP), ("v/zarr.json", bad)],
            &Mode::default(),
        );
        assert!(matches!(err, Err(Error::InvalidMetadata { .. })));
        let err = open(
            &[("zarr.json", r#"{"zarr_format": 3, "node_type": "array"}"#)],
            &Mode::default(),
        );
        assert!(matches!(err, Err(Error::Unsupported(_))));
    }
}
