//! The write side: creating a dataset, defining its groups, dimensions, variables and
//! attributes, writing hyperslabs, renaming and deleting, and making it all durable.
//!
//! [`DatasetWriter`] owns a model and a chunk engine over a writable storage map. Values go
//! through [`ChunkEngine::write`] (write-back: chunks stay in the cache until a flush or an
//! eviction); [`DatasetWriter::sync`] stores dirty chunks first and metadata last, then
//! flushes the map. Each object put is atomic, so a writer killed at any moment leaves a
//! dataset whose metadata describes an older, complete state: chunks written since then are
//! either invisible (beyond the recorded shape) or replace chunks of the same shape.
//!
//! Default chunk sizes follow netcdf-c's NCZarr rule (`ncz_find_default_chunksizes2`): about
//! 16 MiB per chunk, spread evenly over the fixed dimensions, 1 along unlimited dimensions
//! (4096 bytes' worth for a 1-D unlimited variable), then trimmed so the last chunk along
//! each dimension does not overhang much.

use crate::location::{Format, Mode};
use crate::meta::writer::{Dialect, WriteOptions};
use crate::model::{CodecSpec, Dataset, GroupId, NczarrLayout, VarId, Variable};
use crate::{Error, Result};

mod claim;
mod codecs;
mod target;
mod writer;

pub use codecs::Codecs;
pub use target::Staging;
pub use writer::{attr_to_native, DatasetWriter, Growth};

/// netcdf-c's default chunk size in bytes (`DEFAULT_CHUNK_SIZE`; 16 MiB in 4.10.1 as built
/// in the netCDF4 wheels, measured with `Variable.chunking()`).
const DEFAULT_CHUNK_BYTES: f64 = 16_777_216.0;
/// netcdf-c's chunk length budget for 1-D unlimited variables (`DEFAULT_1D_UNLIM_SIZE`).
const DEFAULT_1D_UNLIM_BYTES: u64 = 4096;
/// Decoded-chunk cache of a writer: dirty chunks wait here until a flush.
pub const WRITER_CACHE_BYTES: usize = 64 << 20;

/// How a new dataset is written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOptions {
    /// NCZarr or pure Zarr v2.
    pub dialect: Dialect,
    /// Write `_ARRAY_DIMENSIONS` (false for `noxarray`).
    pub xarray: bool,
    /// Write a consolidated `.zmetadata`.
    pub consolidated: bool,
    /// Chunk key separator, `.` or `/`; `None` for the format's default: `.` on Zarr v2 (as
    /// netcdf-c and zarr-python write), `/` on Zarr v3 (the `default` chunk key encoding's).
    pub separator: Option<char>,
    /// The Zarr format written: 2 (default) or 3.
    pub zarr_version: u8,
    /// Where NCZarr v2 keeps its own keys: the layout of the netcdf-c releases that must read
    /// the dataset.
    pub layout: NczarrLayout,
    /// The root's `_NCProperties` (NCZarr only): who wrote the dataset. A dataset opened for
    /// writing keeps its own, as netcdf-c keeps it.
    pub nc_properties: Option<String>,
}

/// The `_NCProperties` of a dataset made for the netcdf-c release `netcdf_c`.
pub fn nc_properties_for(netcdf_c: &str) -> String {
    format!(
        "version=2,nczarrfs={},netcdf={netcdf_c}",
        env!("CARGO_PKG_VERSION")
    )
}

/// Makes `opts` write a dataset for the netcdf-c release `version` (`--for-netcdf-c`): the
/// NCZarr layout it reads, and its number in `_NCProperties`.
pub fn write_for_netcdf_c(opts: &mut CreateOptions, version: &str) -> Result<()> {
    if opts.dialect != Dialect::NcZarr || opts.zarr_version != 2 {
        return Err(Error::Invalid(
            "--for-netcdf-c chooses where NCZarr keeps its metadata on Zarr v2: pure Zarr is \
             the same for every netcdf-c release, and netcdf-c reads no Zarr v3"
                .into(),
        ));
    }
    // A release that is no version at all cannot be parsed; one that is (three numbers, of
    // any size), may have no layout.
    let is_version = version.split('.').count() == 3
        && version
            .split('.')
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    opts.layout = NczarrLayout::for_netcdf_c(version).map_err(match is_version {
        true => Error::Invalid,
        false => Error::Usage,
    })?;
    opts.nc_properties = Some(nc_properties_for(version));
    Ok(())
}

/// The netcdf-c release whose layout new datasets have by default.
const DEFAULT_NETCDF_C: &str = "4.10.1";

impl Default for CreateOptions {
    fn default() -> Self {
        CreateOptions {
            dialect: Dialect::NcZarr,
            xarray: true,
            consolidated: false,
            separator: None,
            zarr_version: 2,
            layout: NczarrLayout::Attributes,
            nc_properties: Some(nc_properties_for(DEFAULT_NETCDF_C)),
        }
    }
}

impl CreateOptions {
    /// The options a location's `#mode=` asks for (`nczarr` when it says nothing).
    pub fn from_mode(mode: &Mode) -> Self {
        CreateOptions {
            dialect: match mode.format {
                Some(Format::Zarr) => Dialect::Zarr,
                _ => Dialect::NcZarr,
            },
            xarray: mode.xarray.unwrap_or(true),
            consolidated: mode.consolidated,
            separator: None,
            zarr_version: mode.zarr_version.unwrap_or(2),
            ..CreateOptions::default()
        }
    }

    /// The metadata writer's options.
    pub fn write_options(&self) -> WriteOptions {
        WriteOptions {
            dialect: self.dialect,
            xarray: self.xarray,
            consolidated: self.consolidated,
            nc_properties: self
                .nc_properties
                .clone()
                .filter(|_| self.dialect == Dialect::NcZarr),
            layout: self.layout,
        }
    }
}

/// A variable's fill setting.
#[derive(Debug, Clone, PartialEq, Default)]
pub enum Fill {
    /// netCDF's default fill value for the type (stored in `fill_value`, no attribute).
    #[default]
    Default,
    /// No fill value (`_NoFill`): `fill_value` is `null`.
    NoFill,
    /// This native element; also shown as the `_FillValue` attribute.
    Value(Vec<u8>),
}

/// How a new variable is stored.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct VarOptions {
    /// Chunk lengths (one per dimension); `None` for netcdf-c's defaults.
    pub chunks: Option<Vec<u64>>,
    /// The codec chain.
    pub codecs: Codecs,
    /// The fill setting.
    pub fill: Fill,
    /// Store multi-byte numbers big-endian.
    pub big_endian: bool,
    /// Width in bytes of `string` elements (0: netcdf-c's default 128).
    pub string_width: usize,
}

/// netcdf-c's width of a string variable's elements in Zarr (`|S128`) unless
/// `_nczarr_maxstrlen` says otherwise.
pub const NETCDF_MAXSTRLEN: usize = 128;

/// Where an attribute lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttrTarget {
    /// A group's attribute (the root's are the global attributes).
    Group(GroupId),
    /// A variable's attribute.
    Var(VarId),
}

/// netcdf-c's default chunk lengths for a variable of element size `esize` with dimensions
/// `(len, unlimited)`.
pub fn default_chunks(dims: &[(u64, bool)], esize: usize) -> Vec<u64> {
    complete_chunks(dims, esize, &vec![0; dims.len()])
}

/// The chunk lengths netcdf-c (NCZarr's `ncz_find_default_chunksizes2`) makes of the lengths
/// `given` (one per dimension, 0 for none) when one of them is 0: its default for each 0,
/// but also 1 along an unlimited dimension whatever was given, its defaults for the 1-D
/// unlimited and all-unlimited cases over any given length, and the halving and the trimming
/// of overhangs over every length. HDF5's netCDF-4 picks otherwise (`5, 0` over `t, x` keeps
/// the 5 there), but this is what netcdf-c and ncgen write to NCZarr.
pub(crate) fn complete_chunks(dims: &[(u64, bool)], esize: usize, given: &[u64]) -> Vec<u64> {
    let esize = esize.max(1) as f64;
    let n = dims.len();
    let num_unlim = dims.iter().filter(|d| d.1).count();
    let num_values: f64 = dims.iter().filter(|d| !d.1).map(|d| d.0 as f64).product();
    let mut chunks: Vec<u64> = dims
        .iter()
        .zip(given)
        .map(|(d, &g)| if d.1 { 1 } else { g })
        .collect();
    if n == 1 && num_unlim == 1 {
        // netcdf-c divides by the type size twice here; so do we, for identical layouts.
        let suggested = (DEFAULT_CHUNK_BYTES / esize).min(DEFAULT_1D_UNLIM_BYTES as f64) as u64;
        chunks[0] = (suggested / esize as u64).max(1);
    }
    if n > 1 && num_unlim == n {
        let s = (DEFAULT_CHUNK_BYTES / esize).powf(1.0 / n as f64) as u64;
        chunks = vec![s.max(1); n];
    }
    for (d, (len, unlim)) in dims.iter().enumerate() {
        if !unlim && chunks[d] == 0 {
            let s = ((DEFAULT_CHUNK_BYTES / (num_values * esize))
                .powf(1.0 / (n - num_unlim) as f64)
                * *len as f64
                - 0.5) as u64;
            chunks[d] = s.min(*len).max(1);
        }
    }
    // Chunks must stay below 4 GiB (netcdf-c's check_chunksizes).
    while chunks.iter().map(|&c| c as f64).product::<f64>() * esize > u32::MAX as f64 {
        for c in chunks.iter_mut() {
            *c = (*c / 2).max(1);
        }
    }
    for (d, (len, _)) in dims.iter().enumerate() {
        let num_chunks = len.div_ceil(chunks[d]);
        if num_chunks > 0 {
            let overhang = num_chunks * chunks[d] - len;
            chunks[d] -= overhang / num_chunks;
        }
    }
    chunks
}

/// Refuses a variable that could not be read back or written: more bytes than its `data`
/// file can address (netCDF-4 refuses such a variable too), or a codec parameter the reader
/// refuses or the writer could not encode with (ncgen's `_Filter = "1,99"`).
fn check_storable(v: &Variable, dims: &[(u64, bool)]) -> Result<()> {
    let element_size = v.element_size();
    let addressable = dims
        .iter()
        .try_fold(element_size as u64, |a, (len, _)| a.checked_mul(*len))
        .is_some_and(|n| n <= i64::MAX as u64);
    if !addressable {
        return Err(Error::Invalid(format!(
            "variable {}: more bytes than a file can address (2^63)",
            v.name
        )));
    }
    if let CodecSpec::V2 {
        filters,
        compressor,
    } = &v.storage.codecs
    {
        let shuffle = crate::codec::netcdf_element_size(v.nctype, element_size);
        crate::codec::Pipeline::from_v2(filters, compressor.as_ref(), shuffle)
            .and_then(|p| p.check_encodable())
            .map_err(|e| Error::Invalid(format!("variable {}: {e}", v.name)))?;
    }
    Ok(())
}

/// Checks a netCDF name (the rules ncgen and netcdf-c apply).
pub fn check_name(name: &str) -> Result<()> {
    crate::model::check_name(name)
        .map_err(|why| Error::Invalid(format!("invalid name {name:?}: {why}")))
}

/// The keys a group or an array of Zarr `zarr_version` keeps its own metadata under, beside
/// its children's names: a child of one of these names would be stored over them (in a zip
/// archive the metadata and the child both go in, and every reader then sees one of them).
fn metadata_keys(zarr_version: u8) -> &'static [&'static str] {
    match zarr_version {
        3 => &["zarr.json"],
        _ => &[".zarray", ".zattrs", ".zgroup", ".zmetadata"],
    }
}

/// Refuses a variable or group `name` (`fqn` its full name, `what` "variable" or "group")
/// that Zarr `zarr_version` keeps its metadata under: `zarr.json` in Zarr v3 is a legal
/// netCDF name, and NCZarr v2 and Zarr v2 hold it, but in v3 it is the parent group's own
/// metadata object.
pub fn check_key_name(name: &str, fqn: &str, what: &str, zarr_version: u8) -> Result<()> {
    if !metadata_keys(zarr_version).contains(&name) {
        return Ok(());
    }
    Err(Error::NotPermitted(format!(
        "{what} {}: in Zarr v{zarr_version} {} is the key of a group's own metadata, so no \
         variable or group can be stored under that name (rename it{})",
        crate::error::quoted(fqn),
        crate::error::quoted(name),
        match zarr_version {
            3 => ", or write Zarr v2, which holds it",
            _ => "",
        }
    )))
}

/// [`check_key_name`] of every group and variable of `model`: what a new dataset of Zarr
/// `zarr_version` could not hold is refused before anything is written.
pub fn check_key_names(model: &Dataset, zarr_version: u8) -> Result<()> {
    for g in 1..model.groups.len() {
        let g = GroupId(g);
        check_key_name(
            &model.group(g).name,
            &model.group_fqn(g),
            "group",
            zarr_version,
        )?;
    }
    for v in 0..model.vars.len() {
        let v = VarId(v);
        check_key_name(
            &model.var(v).name,
            &model.var_fqn(v),
            "variable",
            zarr_version,
        )?;
    }
    Ok(())
}

/// Checks a new attribute name: a valid netCDF name, and none that netcdf-c reserves (it
/// answers "String match to name in use"): HDF5's dimension-scale attributes and netCDF-4's
/// own anywhere, the format's on the root group. NCZarr's own keys, in either case, would
/// be taken for the dataset's metadata.
pub fn check_attr_name(target: AttrTarget, name: &str) -> Result<()> {
    check_name(name)?;
    check_attr_not_reserved(target, name)
}

/// Refuses an attribute name that netcdf-c reserves (see [`check_attr_name`]), new or not:
/// such an attribute means something to netCDF, whatever value is written.
pub fn check_attr_not_reserved(target: AttrTarget, name: &str) -> Result<()> {
    const EVERYWHERE: [&str; 10] = [
        "CLASS",
        "DIMENSION_LIST",
        "NAME",
        "REFERENCE_LIST",
        "_ARRAY_DIMENSIONS",
        "_IsNetcdf4",
        "_NCProperties",
        "_Netcdf4Coordinates",
        "_Netcdf4Dimid",
        "_SuperblockVersion",
    ];
    const ROOT: [&str; 3] = ["_Codecs", "_Format", "_nc3_strict"];
    let root = matches!(target, AttrTarget::Group(g) if g == Dataset::ROOT);
    if EVERYWHERE.contains(&name)
        || (root && ROOT.contains(&name))
        || name.to_ascii_lowercase().starts_with("_nczarr_")
    {
        return Err(Error::NotPermitted(format!(
            "attribute name {name} is reserved by netCDF"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
