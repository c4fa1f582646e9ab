//! The netCDF-4 data model that NCZarr can hold: groups, shared dimensions, variables and
//! attributes of the atomic types (no user-defined types).
//!
//! The model is an arena: groups, dimensions and variables live in flat vectors of the
//! [`Dataset`] and refer to each other by index ([`GroupId`], [`DimId`], [`VarId`]). Creation
//! order is the vector order within each group's lists, which is the order ncdump shows.

mod index;
pub mod quantize;
mod types;

use std::borrow::Cow;
use std::collections::HashMap;

pub use types::{AttrValue, ByteOrder, DtypeKind, NcType, ZarrDtype};

/// The widest fixed-width string element nczarrfs reads or writes (256 MiB): wider ones are
/// refused rather than allocated (a dtype `|S4000000000` would take 4 GB per element).
pub const MAX_STRING_WIDTH: usize = 256 << 20;

/// The largest chunk nczarrfs decodes or encodes (4 GiB, HDF5's limit too): Zarr allows a
/// chunk shape larger than the array, and a chunk is held whole in memory.
pub const MAX_CHUNK_BYTES: u64 = 4 << 30;

/// The number of elements of an array of `shape`, or `None` when it does not fit in 64 bits
/// (a shape that damaged or hostile metadata can declare).
pub fn element_count(shape: &[u64]) -> Option<u64> {
    shape.iter().try_fold(1u64, |n, &len| n.checked_mul(len))
}

/// The longest netCDF name in bytes (netcdf-c's `NC_MAX_NAME`): ncgen refuses a longer
/// one, and netcdf-c refuses, or crashes on, an NCZarr dataset holding one.
pub const NC_MAX_NAME: usize = 256;

/// Whether `name` is a legal netCDF name (the rules of ncgen and netcdf-c), or why not.
pub fn check_name(name: &str) -> std::result::Result<(), &'static str> {
    let Some(first) = name.chars().next() else {
        return Err("empty name");
    };
    if name.len() > NC_MAX_NAME {
        return Err("names may be at most 256 bytes long (netCDF's NC_MAX_NAME)");
    }
    if name.contains('/') {
        return Err("names may not contain '/'");
    }
    if name.chars().any(|c| (c as u32) < 0x20 || c as u32 == 0x7f) {
        return Err("names may not contain control characters");
    }
    if !(first.is_ascii_alphanumeric() || first == '_' || !first.is_ascii()) {
        return Err("names must start with a letter, a digit, '_' or a UTF-8 character");
    }
    if name.ends_with(' ') {
        return Err("names may not end with a space");
    }
    if !unicode_normalization::is_nfc(name) {
        // netcdf-c normalizes names to NFC and fails on a dataset whose names are not.
        return Err("names must be in Unicode normalization form C (NFC), as netcdf-c keeps them");
    }
    Ok(())
}

/// A way of writing names for comparison: [`as_is`] or [`nfc`].
type Form = dyn for<'a> Fn(&'a str) -> Cow<'a, str>;

/// `text` as it is.
fn as_is(text: &str) -> Cow<'_, str> {
    Cow::Borrowed(text)
}

/// `text` in Unicode normalization form C.
fn nfc(text: &str) -> Cow<'_, str> {
    if unicode_normalization::is_nfc(text) {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(unicode_normalization::UnicodeNormalization::nfc(text).collect())
    }
}

/// Index of a group in [`Dataset::groups`]; the root group is `GroupId(0)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupId(pub usize);

/// Index of a dimension in [`Dataset::dims`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DimId(pub usize);

/// Index of a variable in [`Dataset::vars`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VarId(pub usize);

/// A named, typed attribute of a group or variable.
#[derive(Debug, Clone, PartialEq)]
pub struct Attribute {
    /// The attribute name.
    pub name: String,
    /// The typed values.
    pub value: AttrValue,
}

/// A shared dimension, declared in one group and visible in its descendants.
#[derive(Debug, Clone, PartialEq)]
pub struct Dimension {
    /// The dimension name (unique within its group).
    pub name: String,
    /// The group that declares it.
    pub group: GroupId,
    /// Current length (for an unlimited dimension: the largest extent written so far).
    pub len: u64,
    /// Whether the dimension is unlimited (record dimension).
    pub unlimited: bool,
}

/// A group: a namespace of dimensions, variables, attributes and subgroups.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Group {
    /// The group name; empty for the root group.
    pub name: String,
    /// The parent group; `None` for the root.
    pub parent: Option<GroupId>,
    /// Dimensions declared here, in creation order.
    pub dims: Vec<DimId>,
    /// Variables declared here, in creation order.
    pub vars: Vec<VarId>,
    /// Subgroups, in creation order.
    pub groups: Vec<GroupId>,
    /// Group attributes, in creation order (hidden `_nczarr_*` attributes excluded).
    pub attrs: Vec<Attribute>,
}

/// Memory order of the elements within a stored chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChunkOrder {
    /// Row-major (last index varies fastest).
    #[default]
    C,
    /// Column-major (first index varies fastest).
    F,
}

/// How a stored codec chain is described; the chunk engine builds a pipeline from it.
#[derive(Debug, Clone, PartialEq)]
pub enum CodecSpec {
    /// Zarr v2: `filters` (applied first when encoding) then `compressor`.
    V2 {
        /// The `filters` list, possibly empty.
        filters: Vec<serde_json::Value>,
        /// The `compressor` object, or `None` for `null`.
        compressor: Option<serde_json::Value>,
    },
    /// Zarr v3: the `codecs` list of `{"name":..,"configuration":..}` objects.
    V3(Vec<serde_json::Value>),
}

impl Default for CodecSpec {
    fn default() -> Self {
        CodecSpec::V2 {
            filters: Vec::new(),
            compressor: None,
        }
    }
}

/// How chunk keys are spelled under the array's key prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChunkKeyEncoding {
    /// Zarr v2 style `i.j.k` (or `i/j/k` with separator `/`); scalars use `0`.
    V2 {
        /// `.` or `/`.
        separator: char,
    },
    /// Zarr v3 default `c/i/j/k` (or `c.i.j.k`); scalars use `c`.
    Default {
        /// `/` or `.`.
        separator: char,
    },
}

impl Default for ChunkKeyEncoding {
    fn default() -> Self {
        ChunkKeyEncoding::V2 { separator: '.' }
    }
}

/// Where and how a variable's values are stored.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VarStorage {
    /// zmap key prefix of the array (no leading or trailing `/`; `""` is never an array).
    pub key: String,
    /// The stored element type; `None` when it is not supported (see `unreadable`).
    pub dtype: Option<ZarrDtype>,
    /// The array's stored shape (`[1]` for a netCDF scalar in Zarr v2, `[]` in pure Zarr).
    pub shape: Vec<u64>,
    /// Chunk shape, same rank as `shape`.
    pub chunks: Vec<u64>,
    /// Element order inside chunks.
    pub order: ChunkOrder,
    /// Chunk key spelling.
    pub key_encoding: ChunkKeyEncoding,
    /// The fill value as one element in the variable's native in-memory representation
    /// (see [`Variable::element_size`]); `None` means no fill value (`fill_value: null`).
    pub fill_value: Option<Vec<u8>>,
    /// The codec chain.
    pub codecs: CodecSpec,
    /// Why this variable cannot be read (unsupported dtype, …); it stays visible in the model.
    pub unreadable: Option<String>,
}

/// A variable: a typed, dimensioned array (or scalar) with attributes.
#[derive(Debug, Clone, PartialEq)]
pub struct Variable {
    /// The variable name (unique within its group).
    pub name: String,
    /// The group that holds it.
    pub group: GroupId,
    /// The netCDF type.
    pub nctype: NcType,
    /// The dimensions, outermost first; empty for a scalar.
    pub dims: Vec<DimId>,
    /// Width in bytes of one string element in native buffers (`string` variables only):
    /// values are UTF-8, NUL-padded to this width.
    pub string_width: usize,
    /// Attributes in creation order (hidden attributes excluded; `_FillValue` included when the
    /// dataset declares one).
    pub attrs: Vec<Attribute>,
    /// Storage description.
    pub storage: VarStorage,
}

impl Variable {
    /// Size in bytes of one element in native buffers: the type size, or
    /// [`Variable::string_width`] for strings.
    pub fn element_size(&self) -> usize {
        match self.nctype {
            NcType::String => self.string_width,
            t => t.size(),
        }
    }

    /// Looks up an attribute by name.
    pub fn attr(&self, name: &str) -> Option<&Attribute> {
        self.attrs.iter().find(|a| a.name == name)
    }
}

/// A whole dataset: the arena of groups, dimensions and variables.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// All groups; `groups[0]` is the root.
    pub groups: Vec<Group>,
    /// All dimensions.
    pub dims: Vec<Dimension>,
    /// All variables.
    pub vars: Vec<Variable>,
    /// What the store says of its writer and format (`ncdump -s` shows it).
    pub provenance: Provenance,
    /// Finds variables by name quickly.
    var_index: index::NameIndex,
}

/// What a store records of the software and NCZarr format that wrote it.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Provenance {
    /// The root's `_NCProperties` text (`version=2,netcdf=4.10.1,nczarr=2.0.0`), if any.
    pub ncproperties: Option<String>,
    /// The NCZarr format's major version (netcdf-c's `_SuperblockVersion`): from the
    /// superblock, else from `_NCProperties`; 0 for pure Zarr.
    pub nczarr_major: u32,
    /// Where the NCZarr metadata of a Zarr v2 store was found; `None` for pure Zarr and v3.
    pub layout: Option<NczarrLayout>,
}

/// Where a Zarr v2 store keeps NCZarr's own metadata. netcdf-c moved it twice, and each
/// version reads only its own layout (netcdf-c 4.9.0, 4.9.1 and 4.10.1 checked): a dataset is
/// rewritten in the layout it was found in, so that the netcdf-c that wrote it still reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NczarrLayout {
    /// NCZarr 1.0.0 (netcdf-c 4.8.0): `.nczarr`, `.nczgroup`, `.nczarray`, `.nczattrs`
    /// objects beside the Zarr ones. Read only.
    Objects1,
    /// netcdf-c 4.8.1–4.9.0: `_NCZARR_SUPERBLOCK` and `_NCZARR_GROUP` in `.zgroup`,
    /// `_NCZARR_ARRAY` in `.zarray`, `_NCZARR_ATTR` in `.zattrs`; char is `<U1`.
    UpperCaseKeys,
    /// netcdf-c 4.9.1–4.9.2: the same keys in lower case (`_nczarr_group`); char is `>S1`.
    LowerCaseKeys,
    /// netcdf-c 4.9.3 and later: every key an attribute in `.zattrs` (`_nczarr_group`
    /// with `dimensions` and `arrays`, `_nczarr_array` with `dimension_references`).
    #[default]
    Attributes,
}

impl NczarrLayout {
    /// The oldest netcdf-c release that writes this layout.
    pub fn first_netcdf_c(self) -> &'static str {
        match self {
            NczarrLayout::Objects1 => "4.8.0",
            NczarrLayout::UpperCaseKeys => "4.8.1",
            NczarrLayout::LowerCaseKeys => "4.9.1",
            NczarrLayout::Attributes => "4.9.3",
        }
    }

    /// The layout netcdf-c `version` (`4.9.2`) writes and reads, or why there is none.
    pub fn for_netcdf_c(version: &str) -> std::result::Result<NczarrLayout, String> {
        let parts: Option<Vec<u32>> = version.split('.').map(|p| p.parse().ok()).collect();
        let refused = || {
            format!(
                "netcdf-c version {version:?}: give a release such as 4.9.2 \
                 (NCZarr is read by netcdf-c 4.8.1 and later)"
            )
        };
        let Some([major, minor, patch]) =
            parts.as_deref().and_then(|p| <[u32; 3]>::try_from(p).ok())
        else {
            return Err(refused());
        };
        Ok(match (major, minor, patch) {
            (4, 8, 0) => {
                return Err(
                    "netcdf-c 4.8.0 reads only NCZarr 1.0.0, which is not written \
                            (give 4.8.1 or later)"
                        .into(),
                )
            }
            (4, 8, 1..) | (4, 9, 0) => NczarrLayout::UpperCaseKeys,
            (4, 9, 1 | 2) => NczarrLayout::LowerCaseKeys,
            (4, 9, _) | (4, 10.., _) | (5.., _, _) => NczarrLayout::Attributes,
            _ => return Err(refused()),
        })
    }
}

impl Provenance {
    /// From the root's `_NCProperties` text and NCZarr superblock version, either absent;
    /// `nczarr` says whether the store is NCZarr at all.
    pub fn new(ncproperties: Option<String>, superblock: Option<&str>, nczarr: bool) -> Self {
        let from_props = ncproperties.as_deref().and_then(|p| {
            p.split(',')
                .find_map(|kv| kv.trim().strip_prefix("nczarr="))
                .map(str::to_string)
        });
        let major = |v: &str| v.split('.').next().and_then(|m| m.trim().parse().ok());
        let nczarr_major = match superblock.map(str::to_string).or(from_props) {
            Some(v) if nczarr => major(&v).unwrap_or(0),
            _ => 0,
        };
        Provenance {
            ncproperties,
            nczarr_major,
            layout: None,
        }
    }
}

impl Default for Dataset {
    fn default() -> Self {
        Self::new()
    }
}

impl Dataset {
    /// The root group's id.
    pub const ROOT: GroupId = GroupId(0);

    /// An empty dataset with only a root group.
    pub fn new() -> Self {
        Dataset {
            groups: vec![Group::default()],
            dims: Vec::new(),
            vars: Vec::new(),
            provenance: Provenance::default(),
            var_index: index::NameIndex::default(),
        }
    }

    /// The group with id `id`.
    pub fn group(&self, id: GroupId) -> &Group {
        &self.groups[id.0]
    }

    /// The dimension with id `id`.
    pub fn dim(&self, id: DimId) -> &Dimension {
        &self.dims[id.0]
    }

    /// The variable with id `id`.
    pub fn var(&self, id: VarId) -> &Variable {
        &self.vars[id.0]
    }

    /// Adds a subgroup `name` under `parent` and returns its id.
    pub fn add_group(&mut self, parent: GroupId, name: &str) -> GroupId {
        let id = GroupId(self.groups.len());
        self.groups.push(Group {
            name: name.to_string(),
            parent: Some(parent),
            ..Group::default()
        });
        self.groups[parent.0].groups.push(id);
        id
    }

    /// Adds a dimension to `group` and returns its id.
    pub fn add_dim(&mut self, group: GroupId, name: &str, len: u64, unlimited: bool) -> DimId {
        let id = DimId(self.dims.len());
        self.dims.push(Dimension {
            name: name.to_string(),
            group,
            len,
            unlimited,
        });
        self.groups[group.0].dims.push(id);
        id
    }

    /// Adds a variable (its `group` field says where) and returns its id.
    pub fn add_var(&mut self, var: Variable) -> VarId {
        let id = VarId(self.vars.len());
        let group = var.group;
        self.var_index.learn(group, &var.name, id);
        self.vars.push(var);
        self.groups[group.0].vars.push(id);
        id
    }

    /// The same dataset with only the variables `keep` (in their order within each group):
    /// every group, dimension and attribute stays; variables get new ids.
    pub fn with_vars(&self, keep: &[VarId]) -> Dataset {
        let mut out = Dataset {
            groups: self.groups.clone(),
            dims: self.dims.clone(),
            vars: Vec::new(),
            provenance: self.provenance.clone(),
            var_index: index::NameIndex::default(),
        };
        for g in &mut out.groups {
            g.vars.clear();
        }
        for (i, v) in self.vars.iter().enumerate() {
            if keep.contains(&VarId(i)) {
                out.add_var(v.clone());
            }
        }
        out
    }

    /// The same dataset with only the groups `keep` accepts (the root always stays, and a
    /// group whose parent goes goes too), each with its attributes, dimensions, variables in
    /// their order; ids are renumbered. Fails when a kept variable uses a dimension of a group
    /// that goes, which netCDF's scoping rules out.
    pub fn with_groups(&self, keep: impl Fn(GroupId) -> bool) -> Result<Dataset, String> {
        let mut out = Dataset::new();
        out.provenance = self.provenance.clone();
        // Groups and dimensions first, so that any variable finds its dimensions mapped.
        let mut kept = vec![(Self::ROOT, Self::ROOT)];
        let mut dim_map: HashMap<DimId, DimId> = HashMap::new();
        let mut pending = vec![(Self::ROOT, Self::ROOT)];
        while let Some((old, new)) = pending.pop() {
            let group = self.group(old);
            out.groups[new.0].attrs = group.attrs.clone();
            for &d in &group.dims {
                let dim = self.dim(d);
                dim_map.insert(d, out.add_dim(new, &dim.name, dim.len, dim.unlimited));
            }
            // Depth first in stored order: the stack takes the subgroups last to first.
            let children: Vec<(GroupId, GroupId)> = group
                .groups
                .iter()
                .filter(|&&g| keep(g))
                .map(|&g| (g, out.add_group(new, &self.group(g).name)))
                .collect();
            kept.extend(&children);
            pending.extend(children.into_iter().rev());
        }
        for (old, new) in kept {
            for &v in &self.group(old).vars {
                let mut var = self.var(v).clone();
                var.group = new;
                var.dims = var
                    .dims
                    .iter()
                    .map(|d| {
                        dim_map.get(d).copied().ok_or_else(|| {
                            format!(
                                "{}: its dimension {} is in a group left out",
                                self.var_fqn(v),
                                self.dim_fqn(*d)
                            )
                        })
                    })
                    .collect::<Result<_, _>>()?;
                out.add_var(var);
            }
        }
        Ok(out)
    }

    /// The groups a list of names selects, as nccopy's `-g` and `-G` and ncdump's `-g` read
    /// it: `/a/b` the group of that full name (`/` the root; empty parts are skipped, as
    /// netcdf-c's `strtok` skips them, so `//a/b/` is `/a/b` and `//` the root), a plain name
    /// every group of that name at any depth. A name that selects nothing is an error (`g: No
    /// such group`), and so is a relative path, which nccopy finds nowhere either. Names are
    /// typed names (see [`Dataset::typed_matches`]).
    pub fn select_groups(&self, names: &[String]) -> Result<Vec<GroupId>, String> {
        let mut out = Vec::new();
        for name in names {
            let found = self.typed_matches(
                name,
                (0..self.groups.len()).map(GroupId),
                |g, name, form| {
                    if name.starts_with('/') {
                        let parts: String = name
                            .split('/')
                            .filter(|part| !part.is_empty())
                            .map(|part| format!("/{part}"))
                            .collect();
                        let full_name = if parts.is_empty() { "/" } else { &parts };
                        form(&self.group_fqn(g)) == full_name
                    } else {
                        g != Self::ROOT && form(&self.group(g).name) == name
                    }
                },
                |g| self.group_fqn(g),
            )?;
            if found.is_empty() {
                return Err(format!("{name}: No such group"));
            }
            for g in found {
                if !out.contains(&g) {
                    out.push(g);
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// The variables a list of names selects, as ncdump's `-v` and nccopy's `-V` read it: a
    /// plain name selects the variables of that name in every group, `a/b/v` those in groups
    /// whose full name ends with `a/b`, `/a/b/v` the one in `/a/b`. A name that selects
    /// nothing is an error (`v: No such variable`). Names are typed names (see
    /// [`Dataset::typed_matches`]).
    pub fn select_vars(&self, names: &[String]) -> Result<Vec<VarId>, String> {
        let mut out = Vec::new();
        for name in names {
            let found = self.typed_matches(
                name,
                (0..self.vars.len()).map(VarId),
                |v, name, form| self.var_matches(v, name, form),
                |v| self.var_fqn(v),
            )?;
            if found.is_empty() {
                return Err(format!("{name}: No such variable"));
            }
            for v in found {
                if !out.contains(&v) {
                    out.push(v);
                }
            }
        }
        out.sort();
        Ok(out)
    }

    /// Resolves a variable by a name a user typed, as [`Dataset::find_var`] does (a full name
    /// `/g1/v`, or one relative to the root), then as [`Dataset::typed_matches`] does.
    pub fn find_typed_var(&self, path: &str) -> Result<Option<VarId>, String> {
        if let Some(v) = self.find_var(path) {
            return Ok(Some(v));
        }
        // find_var's reading of the path: empty components are skipped.
        let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
        let fqn = format!("/{}", parts.join("/"));
        let found = self.typed_matches(
            &fqn,
            (0..self.vars.len()).map(VarId),
            |v, fqn, form| form(&self.var_fqn(v)) == fqn,
            |v| self.var_fqn(v),
        )?;
        Ok(found.first().copied())
    }

    /// The objects among `all` that `name`, typed by a user, selects. The names are compared
    /// as they are first; when none matches, in Unicode normalization form C on both sides:
    /// netcdf-c normalizes every name it is given, so ncdump and nccopy find `é` typed as `e`
    /// and U+0301, while a pure Zarr store may hold names in any form (both `é` and its NFD
    /// twin, which the exact comparison tells apart). `selects(object, name, form)` says
    /// whether `name` selects `object` once the object's names are put in `form`; two objects
    /// selected only by normalization whose full names (`fqn`) are then the same are an error,
    /// since nothing says which one was meant.
    fn typed_matches<T: Copy>(
        &self,
        name: &str,
        all: impl Iterator<Item = T> + Clone,
        selects: impl Fn(T, &str, &Form) -> bool,
        fqn: impl Fn(T) -> String,
    ) -> Result<Vec<T>, String> {
        let exact: Vec<T> = all.clone().filter(|&o| selects(o, name, &as_is)).collect();
        if !exact.is_empty() {
            return Ok(exact);
        }
        let wanted = nfc(name);
        let found: Vec<T> = all.filter(|&o| selects(o, &wanted, &nfc)).collect();
        let mut seen: HashMap<String, String> = HashMap::new();
        for &o in &found {
            let full = fqn(o);
            if let Some(other) = seen.insert(nfc(&full).into_owned(), full.clone()) {
                return Err(format!(
                    "{name}: ambiguous: {other} and {full} differ only in their Unicode \
                     normalization, and neither is spelled as given; give the name exactly \
                     as stored"
                ));
            }
        }
        Ok(found)
    }

    /// Whether `name` (in a form [`Dataset::select_vars`] takes) names variable `v` once the
    /// names of `v` and its groups are put in `form`.
    fn var_matches(&self, v: VarId, name: &str, form: &Form) -> bool {
        let var = self.var(v);
        let var_name = form(&var.name);
        match name.rfind('/') {
            None => var_name == name,
            Some(i) => {
                let (groups, relname) = (&name[..i], &name[i + 1..]);
                let group_fqn = self.group_fqn(var.group);
                let fqn = form(&group_fqn);
                var_name == relname
                    && if name.starts_with('/') {
                        fqn == groups || (groups.is_empty() && fqn == "/")
                    } else {
                        fqn.ends_with(groups)
                    }
            }
        }
    }

    /// The current shape of a variable: the lengths of its dimensions (the netCDF view; for an
    /// unlimited dimension this may exceed the stored shape, and the excess reads as fill).
    pub fn var_shape(&self, id: VarId) -> Vec<u64> {
        self.var(id).dims.iter().map(|d| self.dim(*d).len).collect()
    }

    /// Names of the groups from the root down to `id` (empty for the root).
    pub fn group_path(&self, id: GroupId) -> Vec<&str> {
        let mut names = Vec::new();
        let mut cur = Some(id);
        while let Some(g) = cur {
            let group = self.group(g);
            if group.parent.is_some() {
                names.push(group.name.as_str());
            }
            cur = group.parent;
        }
        names.reverse();
        names
    }

    /// The fully qualified name of a group: `/` for the root, `/g1/g2` otherwise.
    pub fn group_fqn(&self, id: GroupId) -> String {
        let path = self.group_path(id);
        if path.is_empty() {
            "/".to_string()
        } else {
            path.iter().map(|n| format!("/{n}")).collect()
        }
    }

    /// The fully qualified name of an object named `name` in group `group`: `/g1/name`.
    pub fn fqn_in(&self, group: GroupId, name: &str) -> String {
        let g = self.group_fqn(group);
        if g == "/" {
            format!("/{name}")
        } else {
            format!("{g}/{name}")
        }
    }

    /// The fully qualified name of a dimension.
    pub fn dim_fqn(&self, id: DimId) -> String {
        let d = self.dim(id);
        self.fqn_in(d.group, &d.name)
    }

    /// The fully qualified name of a variable.
    pub fn var_fqn(&self, id: VarId) -> String {
        let v = self.var(id);
        self.fqn_in(v.group, &v.name)
    }

    /// Finds a subgroup of `parent` by name.
    pub fn find_group_in(&self, parent: GroupId, name: &str) -> Option<GroupId> {
        self.group(parent)
            .groups
            .iter()
            .copied()
            .find(|g| self.group(*g).name == name)
    }

    /// Finds a variable of `group` by name.
    pub fn find_var_in(&self, group: GroupId, name: &str) -> Option<VarId> {
        let hint = self.var_index.hint(&self.vars, group, name);
        if let index::Hint::At(v) = hint {
            if self
                .vars
                .get(v.0)
                .is_some_and(|var| var.group == group && var.name == name)
            {
                return Some(v);
            }
        }
        let found = self
            .group(group)
            .vars
            .iter()
            .copied()
            .find(|v| self.var(*v).name == name);
        match (hint, found) {
            // The index was wrong (a variable renamed or moved behind its back).
            (index::Hint::At(_), _) => self.var_index.invalidate(),
            // It missed one added behind its back.
            (index::Hint::Absent, Some(v)) => self.var_index.learn(group, name, v),
            (index::Hint::Absent, None) => {}
        }
        found
    }

    /// Finds a dimension declared in `group` by name.
    pub fn find_dim_in(&self, group: GroupId, name: &str) -> Option<DimId> {
        self.group(group)
            .dims
            .iter()
            .copied()
            .find(|d| self.dim(*d).name == name)
    }

    /// Finds a dimension visible from `group`: declared there or in an ancestor (innermost wins).
    pub fn find_dim_visible(&self, group: GroupId, name: &str) -> Option<DimId> {
        let mut cur = Some(group);
        while let Some(g) = cur {
            if let Some(d) = self.find_dim_in(g, name) {
                return Some(d);
            }
            cur = self.group(g).parent;
        }
        None
    }

    /// Resolves a group path such as `/g1/g2`, `g1/g2` or `/`.
    pub fn find_group(&self, path: &str) -> Option<GroupId> {
        let mut cur = Self::ROOT;
        for part in path.split('/').filter(|p| !p.is_empty()) {
            cur = self.find_group_in(cur, part)?;
        }
        Some(cur)
    }

    /// Resolves a variable by full name (`/g1/v`) or by a name relative to the root (`g1/v`, `v`).
    pub fn find_var(&self, path: &str) -> Option<VarId> {
        let trimmed = path.trim_start_matches('/');
        let (group, name) = match trimmed.rfind('/') {
            Some(i) => (self.find_group(&trimmed[..i])?, &trimmed[i + 1..]),
            None => (Self::ROOT, trimmed),
        };
        self.find_var_in(group, name)
    }

    /// Resolves a dimension by fully qualified name (`/g1/d`).
    pub fn find_dim(&self, fqn: &str) -> Option<DimId> {
        let trimmed = fqn.trim_start_matches('/');
        let (group, name) = match trimmed.rfind('/') {
            Some(i) => (self.find_group(&trimmed[..i])?, &trimmed[i + 1..]),
            None => (Self::ROOT, trimmed),
        };
        self.find_dim_in(group, name)
    }

    /// All groups in depth-first pre-order (the order ncdump prints them), root first.
    pub fn groups_preorder(&self) -> Vec<GroupId> {
        self.groups_preorder_from(Self::ROOT)
    }

    /// The group `top` and the groups below it in depth-first pre-order, `top` first.
    pub fn groups_preorder_from(&self, top: GroupId) -> Vec<GroupId> {
        let mut out = Vec::new();
        let mut stack = vec![top];
        while let Some(g) = stack.pop() {
            out.push(g);
            stack.extend(self.group(g).groups.iter().rev().copied());
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_at_most_nc_max_name_bytes() {
        // netcdf-c's NC_check_name: strlen(name) > NC_MAX_NAME is NC_EMAXNAME.
        assert!(check_name(&"n".repeat(256)).is_ok());
        let e = check_name(&"n".repeat(257)).unwrap_err();
        assert!(e.contains("256 bytes"), "{e}");
        // Bytes, not characters: 129 two-byte characters are 258 bytes.
        assert!(check_name(&"é".repeat(128)).is_ok());
        assert!(check_name(&"é".repeat(129)).is_err());
    }

    #[test]
    fn names_must_be_nfc() {
        assert!(check_name("caf\u{e9}").is_ok());
        let e = check_name("cafe\u{301}").unwrap_err();
        assert!(e.contains("NFC"), "{e}");
    }

    #[test]
    fn netcdf_c_releases_and_their_layouts() {
        let layout = |v: &str| NczarrLayout::for_netcdf_c(v);
        assert_eq!(layout("4.8.1"), Ok(NczarrLayout::UpperCaseKeys));
        assert_eq!(layout("4.9.0"), Ok(NczarrLayout::UpperCaseKeys));
        assert_eq!(layout("4.9.1"), Ok(NczarrLayout::LowerCaseKeys));
        assert_eq!(layout("4.9.2"), Ok(NczarrLayout::LowerCaseKeys));
        assert_eq!(layout("4.9.3"), Ok(NczarrLayout::Attributes));
        assert_eq!(layout("4.10.1"), Ok(NczarrLayout::Attributes));
        assert_eq!(layout("5.0.0"), Ok(NczarrLayout::Attributes));
        for refused in ["4.8.0", "4.7.4", "4.9", "4.9.x", "", "4.9.2.1", "3.6.3"] {
            assert!(layout(refused).is_err(), "{refused}");
        }
        for l in [NczarrLayout::UpperCaseKeys, NczarrLayout::LowerCaseKeys] {
            assert_eq!(layout(l.first_netcdf_c()), Ok(l));
        }
    }

    #[test]
    fn fqns_and_lookup() {
        let mut ds = Dataset::new();
        let g1 = ds.add_group(Dataset::ROOT, "g1");
        let g2 = ds.add_group(g1, "g2");
        let d = ds.add_dim(Dataset::ROOT, "x", 3, false);
        let d2 = ds.add_dim(g1, "x", 5, true);
        assert_eq!(ds.group_fqn(Dataset::ROOT), "/");
        assert_eq!(ds.group_fqn(g2), "/g1/g2");
        assert_eq!(ds.dim_fqn(d2), "/g1/x");
        assert_eq!(ds.find_dim_visible(g2, "x"), Some(d2));
        assert_eq!(ds.find_dim_visible(Dataset::ROOT, "x"), Some(d));
        assert_eq!(ds.find_dim("/g1/x"), Some(d2));
        assert_eq!(ds.find_group("/g1/g2"), Some(g2));
        assert_eq!(ds.groups_preorder(), vec![Dataset::ROOT, g1, g2]);
    }

    fn add_var(ds: &mut Dataset, group: GroupId, name: &str, dims: Vec<DimId>) -> VarId {
        ds.add_var(Variable {
            name: name.into(),
            group,
            nctype: NcType::Int,
            dims,
            string_width: 0,
            attrs: vec![],
            storage: VarStorage {
                key: name.into(),
                ..VarStorage::default()
            },
        })
    }

    /// `/` with `x` and `r`; `/a` with `y` and `a1(x, y)`; `/a/b` with `b1(y)`; `/c` with
    /// `c1(x)`; `/c/b` empty.
    fn tree() -> Dataset {
        let mut ds = Dataset::new();
        let x = ds.add_dim(Dataset::ROOT, "x", 2, false);
        add_var(&mut ds, Dataset::ROOT, "r", vec![x]);
        let a = ds.add_group(Dataset::ROOT, "a");
        let c = ds.add_group(Dataset::ROOT, "c");
        let y = ds.add_dim(a, "y", 3, true);
        add_var(&mut ds, a, "a1", vec![x, y]);
        let b = ds.add_group(a, "b");
        add_var(&mut ds, b, "b1", vec![y]);
        add_var(&mut ds, c, "c1", vec![x]);
        ds.add_group(c, "b");
        ds
    }

    #[test]
    fn groups_are_selected_by_full_or_plain_name() {
        let ds = tree();
        let fqns = |names: &[&str]| -> Result<Vec<String>, String> {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            let ids = ds.select_groups(&names)?;
            Ok(ids.iter().map(|&g| ds.group_fqn(g)).collect())
        };
        assert_eq!(fqns(&["b"]).unwrap(), ["/a/b", "/c/b"]);
        assert_eq!(fqns(&["/a/b", "/"]).unwrap(), ["/", "/a/b"]);
        assert_eq!(fqns(&["c", "/c"]).unwrap(), ["/c"]);
        assert_eq!(fqns(&["a/b"]).unwrap_err(), "a/b: No such group");
        assert_eq!(fqns(&["/b"]).unwrap_err(), "/b: No such group");
        // Empty parts of a full name are skipped, as ncdump and nccopy skip them.
        assert_eq!(fqns(&["/a/b/"]).unwrap(), ["/a/b"]);
        assert_eq!(fqns(&["//a//b"]).unwrap(), ["/a/b"]);
        assert_eq!(fqns(&["/c/"]).unwrap(), ["/c"]);
        assert_eq!(fqns(&["//"]).unwrap(), ["/"]);
        assert_eq!(fqns(&["a/b/"]).unwrap_err(), "a/b/: No such group");
        assert_eq!(fqns(&["/a/x/"]).unwrap_err(), "/a/x/: No such group");
    }

    /// `/é` (NFC) holding `té` (NFC) and, in pure Zarr style, its NFD twin `te\u{301}`;
    /// `/g` holding `pé` (NFC).
    fn unicode_tree() -> Dataset {
        let mut ds = Dataset::new();
        let e = ds.add_group(Dataset::ROOT, "\u{e9}");
        add_var(&mut ds, e, "t\u{e9}", vec![]);
        add_var(&mut ds, e, "te\u{301}", vec![]);
        let g = ds.add_group(Dataset::ROOT, "g");
        add_var(&mut ds, g, "p\u{e9}", vec![]);
        ds
    }

    #[test]
    fn typed_names_match_exactly_first_then_in_nfc() {
        let ds = unicode_tree();
        let fqns = |names: &[&str]| -> Result<Vec<String>, String> {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            Ok(ds
                .select_vars(&names)?
                .iter()
                .map(|&v| ds.var_fqn(v))
                .collect())
        };
        // As ncdump -v: netcdf-c normalizes the name typed to NFC.
        assert_eq!(fqns(&["pe\u{301}"]).unwrap(), ["/g/p\u{e9}"]);
        assert_eq!(fqns(&["/g/pe\u{301}"]).unwrap(), ["/g/p\u{e9}"]);
        // Each twin, spelled exactly, is itself alone.
        assert_eq!(fqns(&["t\u{e9}"]).unwrap(), ["/\u{e9}/t\u{e9}"]);
        assert_eq!(fqns(&["te\u{301}"]).unwrap(), ["/\u{e9}/te\u{301}"]);
        // A third spelling of the same text matches both: nothing says which.
        let e = fqns(&["/e\u{301}/te\u{301}x"]).unwrap_err();
        assert_eq!(e, "/e\u{301}/te\u{301}x: No such variable");
        for typed in ["/e\u{301}/te\u{301}", "e\u{301}/t\u{e9}"] {
            let e = fqns(&[typed]).unwrap_err();
            assert!(e.contains("ambiguous"), "{e}");
        }
        assert_eq!(
            ds.find_typed_var("/g/pe\u{301}").unwrap(),
            ds.find_var("/g/p\u{e9}")
        );
        assert_eq!(
            ds.find_typed_var("//g//pe\u{301}").unwrap(),
            ds.find_var("/g/p\u{e9}")
        );
        assert_eq!(
            ds.find_typed_var("\u{e9}/te\u{301}").unwrap(),
            ds.find_var("/\u{e9}/te\u{301}")
        );
        assert!(ds
            .find_typed_var("e\u{301}/te\u{301}")
            .unwrap_err()
            .contains("ambiguous"));
        assert_eq!(ds.find_typed_var("/g/q").unwrap(), None);
        let groups = |names: &[&str]| -> Result<Vec<String>, String> {
            let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
            Ok(ds
                .select_groups(&names)?
                .iter()
                .map(|&g| ds.group_fqn(g))
                .collect())
        };
        assert_eq!(groups(&["e\u{301}"]).unwrap(), ["/\u{e9}"]);
        assert_eq!(groups(&["/e\u{301}"]).unwrap(), ["/\u{e9}"]);
        assert_eq!(groups(&["/e"]).unwrap_err(), "/e: No such group");
    }

    #[test]
    fn leaving_groups_out_keeps_the_rest_in_order_with_new_ids() {
        let ds = tree();
        let kept = ds
            .with_groups(|g| ["/a", "/c/b"].contains(&ds.group_fqn(g).as_str()))
            .unwrap();
        // /a/b goes with its unlisted self, /c/b with its parent.
        let groups: Vec<String> = kept
            .groups_preorder()
            .iter()
            .map(|&g| kept.group_fqn(g))
            .collect();
        assert_eq!(groups, ["/", "/a"]);
        let vars: Vec<String> = (0..kept.vars.len())
            .map(|v| kept.var_fqn(VarId(v)))
            .collect();
        assert_eq!(vars, ["/r", "/a/a1"]);
        let a1 = kept.find_var("/a/a1").unwrap();
        let dims: Vec<String> = kept.var(a1).dims.iter().map(|&d| kept.dim_fqn(d)).collect();
        assert_eq!(dims, ["/x", "/a/y"]);
        assert_eq!(kept.var(a1).storage.key, "a1");
        assert!(kept.dim(kept.var(a1).dims[1]).unlimited);
    }

    #[test]
    fn a_variable_cannot_keep_a_dimension_of_a_group_left_out() {
        let mut ds = tree();
        // Pure Zarr can say anything: a root variable on /a's dimension.
        let y = ds.find_dim("/a/y").unwrap();
        add_var(&mut ds, Dataset::ROOT, "odd", vec![y]);
        let err = ds.with_groups(|g| g == Dataset::ROOT).unwrap_err();
        assert_eq!(err, "/odd: its dimension /a/y is in a group left out");
        let all = ds.with_groups(|_| true).unwrap();
        let odd = all.find_var("/odd").unwrap();
        assert_eq!(all.dim_fqn(all.var(odd).dims[0]), "/a/y");
    }
}
