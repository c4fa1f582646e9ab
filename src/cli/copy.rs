//! `nczarrfs copy`: nccopy for NCZarr and Zarr. Any storage to any storage, any dialect to
//! any dialect; re-chunking (`--chunks`, nccopy's `-c` forms) and re-compression.
//!
//! Values move in slabs of at most [`SLAB_BYTES`] aligned to the target's chunks, so memory
//! stays bounded whatever the dataset's size. A CRC-32C of every variable's values is taken
//! while copying; when the copy is complete it is read back from the target and compared,
//! and a mismatch fails the command. A variable whose chunks the target stores exactly as the
//! source does (same shapes, type, codecs and fill) is copied chunk object by chunk object
//! instead, each checked to decode first, and verified by a digest of the stored objects. The target is built in a hidden sibling (synced every
//! [`SYNC_BYTES`], so even that is always a readable dataset) and renamed into place only
//! after the verification.

use std::collections::{BTreeSet, HashMap};
use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::chunk::{ChunkEngine, Hyperslab};
use crate::create::{
    default_chunks, write_for_netcdf_c, Codecs, CreateOptions, DatasetWriter, Staging,
};
use crate::dataset::{OpenDataset, DEFAULT_CACHE_BYTES};
use crate::error::{quoted, OptionValueError};
use crate::location::{Location, Storage};
use crate::meta::writer_v3::ShardIndex;
use crate::model::{
    AttrValue, ByteOrder, CodecSpec, Dataset, DimId, Dimension, DtypeKind, GroupId, NcType,
    NczarrLayout, VarId, Variable, NC_MAX_NAME,
};
use crate::{meta, zmap, Error, Result};

/// Largest slab moved at once.
pub const SLAB_BYTES: u64 = 32 << 20;
/// The target is synced after this many bytes.
pub const SYNC_BYTES: u64 = 256 << 20;

/// Arguments of `copy`. As in nccopy, an option given again replaces what it gave before
/// (`-d 1 -d 0` is `-d 0`), and so does `-V` for `-v` and `-G` for `-g`, and the reverse; only
/// `-c` (see there) and `--shards` add up.
#[derive(Debug, clap::Args)]
#[command(disable_help_flag = true, args_override_self = true)]
pub struct CopyArgs {
    /// Print help (`-h` is nccopy's chunk cache size).
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
    /// Source dataset (a path, of any bytes, or a URL).
    pub src: std::ffi::OsString,
    /// Target dataset (a path, of any bytes, or a URL). A local dataset there is replaced; anything else local is
    /// refused (a Zarr array too, and any place inside a Zarr dataset, the source's own
    /// included), and so is an S3 prefix that holds any object.
    pub dst: std::ffi::OsString,
    /// The kind of the target: `-k` and nccopy's format flags.
    #[command(flatten)]
    pub kind: super::KindArgs,
    /// Chunking, in nccopy's -c forms: `dim/n,dim2/m` per dimension (a plain name is the
    /// root group's dimension, `/g/d` group g's), `dim/` for the dimension's whole length, or
    /// `var:n,m` per variable (which wins over a dimension's). As nccopy reads them, the n
    /// of `dim/n` may be octal (`010` is 8) or hexadecimal (`0x10`), `var:` lengths are
    /// decimal. Repeated, as in nccopy,
    /// variables' add up and of dimension lists the last counts. nccopy's
    /// forms for unchunked storage (`/`, `var:`, `var:contiguous`) are refused: NCZarr
    /// stores every variable in chunks.
    #[arg(short = 'c', long = "chunks", value_name = "SPEC")]
    pub chunks: Vec<String>,
    /// zlib level 0-9 for every variable (0 removes compression).
    #[arg(
        short = 'd',
        long = "deflate",
        value_name = "N",
        value_parser = parse_deflate_level,
        allow_hyphen_values = true
    )]
    pub deflate: Option<u32>,
    /// Add the shuffle filter where a variable is deflated: with `-d N` (N > 0) to every
    /// variable, else to each that is compressed with zlib or gzip, keeping its level.
    #[arg(short = 's', long = "shuffle")]
    pub shuffle: bool,
    /// Codec chain for every variable, in encoding order: e.g. `shuffle,zstd:5`, `bz2:9`,
    /// `blosc:lz4:5:1` (compressors blosclz, lz4, lz4hc, zlib, zstd), `fletcher32`, `none`, or
    /// a JSON list of numcodecs objects or Zarr v3 codecs (as `dump -s` prints `_Codecs`).
    #[arg(long = "codec", value_name = "CHAIN")]
    pub codec: Option<String>,
    /// Chunk key separator of the target: `.` or `/` (default: `.` on Zarr v2, as netcdf-c and
    /// zarr-python write; `/` on Zarr v3, whose `default` chunk key encoding takes either).
    #[arg(long, value_name = "SEP")]
    pub dimension_separator: Option<char>,
    /// Shards of a Zarr v3 target (`-k v3`), in the forms of `--chunks`: `dim/n` (rounded up
    /// to whole chunks of each variable) or `var:n,m` (multiples of its chunk lengths). One
    /// object per shard holds its chunks and an index, as zarr-python's `shards=`. Along
    /// other dimensions a shard is one chunk. May be repeated.
    #[arg(long = "shards", value_name = "SPEC")]
    pub shards: Vec<String>,
    /// Only these variables, definitions and data (nccopy -V): names (in every group), `g/v`
    /// or full names `/g/v`, comma-separated. Groups, dimensions and attributes all stay. Of
    /// `-V` and `-v`, the last given counts, with its list alone.
    #[arg(
        short = 'V',
        long = "only-vars",
        value_name = "VARS",
        value_delimiter = ',',
        overrides_with_all = VARIABLE_LISTS
    )]
    pub only_vars: Option<Vec<String>>,
    /// Data only for these variables (nccopy -v); the others are defined and hold their fill
    /// value.
    #[arg(
        short = 'v',
        long = "data-vars",
        value_name = "VARS",
        value_delimiter = ',',
        overrides_with_all = VARIABLE_LISTS
    )]
    pub data_vars: Option<Vec<String>>,
    /// Data only for the variables of these groups (nccopy -g): full names (`/g/h`, `/` for
    /// the root group) or plain names (every group of that name), comma-separated. Every
    /// group, variable and attribute is defined; the other variables hold their fill value.
    #[arg(
        short = 'g',
        long = "data-groups",
        value_name = "GROUPS",
        value_delimiter = ',',
        overrides_with_all = GROUP_LISTS
    )]
    pub data_groups: Option<Vec<String>>,
    /// Only these groups (nccopy -G), named as for `-g`: other groups go with all they hold,
    /// the root group's definitions always stay, and only the variables of the listed groups
    /// get data (those of the root only if `/` is listed). Of `-G` and `-g`, the last given
    /// counts, with its list alone.
    #[arg(
        short = 'G',
        long = "only-groups",
        value_name = "GROUPS",
        value_delimiter = ',',
        overrides_with_all = GROUP_LISTS
    )]
    pub only_groups: Option<Vec<String>>,
    /// Unlimited dimensions become fixed ones of their current length (nccopy -u), also those
    /// that `-V`, `-v`, `-g` or `-G` copy nothing along; one of length 0 stays unlimited, as
    /// netCDF has no fixed dimension of length 0.
    #[arg(short = 'u', long = "fix-unlimited")]
    pub fix_unlimited: bool,
    /// Write for the netcdf-c release VERSION (such as 4.9.2), in the NCZarr layout it reads:
    /// releases before 4.9.3 read only their own (4.8.1 to 4.9.0 upper-case `_NCZARR_*` keys,
    /// 4.9.1 and 4.9.2 lower-case ones, in `.zgroup` and `.zarray`). They have no unlimited
    /// dimensions, nor 4.9.0 and before strings or scalars: such a dataset is refused.
    /// Default: the layout of 4.9.3 and later.
    #[arg(long = "for-netcdf-c", value_name = "VERSION")]
    pub for_netcdf_c: Option<String>,
    /// Size in bytes of the cache of decoded source chunks, which a copy that changes the
    /// chunking reads through (nccopy -h: a number with an optional K, M, G, T or P for
    /// 10^3 to 10^15, such as 64M; default 256 MiB).
    #[arg(
        short = 'h',
        long = "cache-size",
        value_name = "SIZE",
        value_parser = parse_nccopy_size,
        allow_hyphen_values = true
    )]
    pub cache_size: Option<usize>,
}

/// `-V` and `-v`, which share one list in nccopy: the last given counts.
const VARIABLE_LISTS: [&str; 2] = ["only_vars", "data_vars"];
/// `-G` and `-g`, likewise.
const GROUP_LISTS: [&str; 2] = ["only_groups", "data_groups"];

/// `-d N`: a zlib level.
fn parse_deflate_level(text: &str) -> std::result::Result<u32, OptionValueError> {
    super::integer_in(text, "deflate level", 0..=9)
}

/// A size as nccopy reads `-h`: a decimal number (`strtod`'s) followed by nothing or by a
/// multiplier whose first letter counts (`K` 10^3, `M` 10^6, `G` 10^9, `T` 10^12, `P` 10^15,
/// either case, so `64MB` is 64 000 000 bytes). A negative size, or one past the address
/// space, is out of range.
fn parse_nccopy_size(text: &str) -> std::result::Result<usize, OptionValueError> {
    let bad = || {
        OptionValueError::WrongForm(format!(
            "{}: a size is a number with an optional K, M, G, T or P (such as 4194304 or 64M)",
            quoted(text)
        ))
    };
    let number_end = text
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-')))
        .unwrap_or(text.len());
    // The longest prefix that is a number: in `4e` or `2E`, the `e` is not an exponent.
    let (number, rest) = (1..=number_end)
        .rev()
        .find_map(|end| {
            let value = text[..end].parse::<f64>().ok()?;
            Some((value, &text[end..]))
        })
        .ok_or_else(bad)?;
    let scale = match rest.chars().next().map(|c| c.to_ascii_uppercase()) {
        None => 1.0,
        Some('K') => 1e3,
        Some('M') => 1e6,
        Some('G') => 1e9,
        Some('T') => 1e12,
        Some('P') => 1e15,
        Some(_) => return Err(bad()),
    };
    let bytes = number * scale;
    if bytes < 0.0 {
        return Err(OptionValueError::OutOfRange(format!(
            "size {} is negative",
            quoted(text)
        )));
    }
    if bytes > usize::MAX as f64 {
        return Err(OptionValueError::OutOfRange(format!(
            "size {} is too large (at most {} bytes)",
            quoted(text),
            usize::MAX
        )));
    }
    // As nccopy converts it: the fraction of a byte goes.
    Ok(bytes as usize)
}

/// Refuses a target that is the source itself (through a link, another spelling or a URL),
/// as nccopy does: the copy would replace the dataset it reads, and whatever else is in it.
fn refuse_copy_onto_itself(src: &Location, dst: &Location) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let node = |path: &std::path::Path| std::fs::metadata(path).map(|m| (m.dev(), m.ino())).ok();
    let (same, holds) = match (&src.storage, &dst.storage) {
        (Storage::File(a) | Storage::Zip(a), Storage::File(b) | Storage::Zip(b)) => {
            // Compared by device and inode, so that links and bind mounts are seen through.
            let target = node(b);
            let holds = target.is_some()
                && a.canonicalize()
                    .is_ok_and(|a| a.ancestors().any(|p| node(p) == target));
            (target.is_some() && node(a) == target, holds)
        }
        (Storage::S3(a), Storage::S3(b)) => (
            a == b,
            (&a.endpoint, &a.bucket) == (&b.endpoint, &b.bucket) && is_below(&a.prefix, &b.prefix),
        ),
        _ => (false, false),
    };
    let why = match (same, holds) {
        (true, _) => "the same dataset",
        (false, true) => "which holds it: the copy would replace the input with part of itself",
        (false, false) => return Ok(()),
    };
    Err(Error::Invalid(format!(
        "{}: the output would overwrite the input {} ({why})",
        dst.shown(),
        src.shown()
    )))
}

/// Whether the object-store prefix `inner` lies below `outer` (the whole bucket when empty).
fn is_below(inner: &str, outer: &str) -> bool {
    let (inner, outer) = (inner.trim_matches('/'), outer.trim_matches('/'));
    outer.is_empty() && !inner.is_empty()
        || inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// Runs `copy`.
pub fn run(args: CopyArgs) -> Result<i32> {
    super::refuse_empty_list("-V", "variable", &args.only_vars)?;
    super::refuse_empty_list("-v", "variable", &args.data_vars)?;
    super::refuse_empty_list("-g", "group", &args.data_groups)?;
    super::refuse_empty_list("-G", "group", &args.only_groups)?;
    let cache_bytes = args.cache_size.unwrap_or(DEFAULT_CACHE_BYTES);
    let mut src = OpenDataset::open(&args.src, cache_bytes)?;
    let names = |list: &Option<Vec<String>>| -> Option<Vec<String>> {
        list.as_ref()
            .map(|l| l.iter().filter(|s| !s.is_empty()).cloned().collect())
    };
    // Names are checked against the whole source first, as nccopy does.
    let group_list = names(&args.only_groups).or_else(|| names(&args.data_groups));
    let wanted_groups: Option<Vec<String>> = match &group_list {
        Some(list) => {
            let ids = src.model.select_groups(list).map_err(Error::NotFound)?;
            Some(ids.iter().map(|&g| src.model.group_fqn(g)).collect())
        }
        None => None,
    };
    let only_vars = selected_fqns(&src.model, names(&args.only_vars))?;
    let data_vars = selected_fqns(&src.model, names(&args.data_vars))?;
    let chunking = chunk_plan(&src.model, &args.chunks)?;
    // The copy reads through a model of what it keeps alone, with a fresh engine (whose plans
    // follow variable ids).
    let mut narrowed = false;
    if let (Some(wanted), true) = (&wanted_groups, args.only_groups.is_some()) {
        let model = &src.model;
        for name in wanted {
            let parent = name.rsplit_once('/').map_or("", |(p, _)| p);
            if !parent.is_empty() && !wanted.iter().any(|w| w == parent) {
                return Err(Error::Invalid(format!(
                    "{name}: a group cannot be copied without its parent group {parent} \
                     (list {parent} too)"
                )));
            }
        }
        src.model = model
            .with_groups(|g| wanted.contains(&model.group_fqn(g)))
            .map_err(Error::Invalid)?;
        narrowed = true;
    }
    if let Some(only) = &only_vars {
        let keep = vars_named(&src.model, only);
        src.model = src.model.with_vars(&keep);
        narrowed = true;
    }
    if narrowed {
        src.engine = ChunkEngine::new(Arc::clone(&src.map), cache_bytes);
    }
    let in_wanted_group = |v: VarId| {
        wanted_groups
            .as_ref()
            .is_none_or(|w| w.contains(&src.model.group_fqn(src.model.var(v).group)))
    };
    let data_vars = match (data_vars, &wanted_groups) {
        (None, None) => None,
        (list, _) => {
            let listed = match list {
                Some(l) => vars_named(&src.model, &l),
                None => (0..src.model.vars.len()).map(VarId).collect(),
            };
            Some(
                listed
                    .into_iter()
                    .filter(|&v| in_wanted_group(v))
                    .collect::<Vec<_>>(),
            )
        }
    };
    super::refuse_standard_output(&args.dst)?;
    let mut dst = Location::parse(&args.dst)?;
    refuse_copy_onto_itself(&src.location, &dst)?;
    if let Some(w) = args.kind.mode_words()? {
        w.apply_to(&mut dst)?;
    }
    if let Some(separator) = args.dimension_separator.filter(|s| !matches!(s, '.' | '/')) {
        return Err(Error::Usage(format!(
            "dimension separator must be '.' or '/', not {}",
            quoted(&separator.to_string())
        )));
    }
    let mut opts = CreateOptions::from_mode(&dst.mode);
    opts.separator = args.dimension_separator;
    if let Some(version) = &args.for_netcdf_c {
        write_for_netcdf_c(&mut opts, version)?;
    }
    let codecs = match (&args.codec, args.deflate, args.shuffle) {
        (Some(c), _, _) => {
            let mut chain = Codecs::netcdf(None, args.shuffle, false).chain();
            let chosen = Codecs::parse(c)?;
            // A JSON list may give any parameter: one no codec can write with (a zlib level
            // of 15) is refused here, as `zlib:15` is, not at the first chunk.
            // A parameter out of its range is a value refused, as `zlib:15` is; an unknown
            // codec or a parameter of the wrong type is of the wrong form, as `nope` and
            // `zlib:x` are.
            crate::codec::Pipeline::from_v2(&chosen.filters, chosen.compressor.as_ref(), 1)
                .and_then(|p| p.check_encodable())
                .map_err(|e| {
                    let said = format!("invalid codec {}: {e}", quoted(c));
                    match e {
                        Error::CodecOutOfRange { .. } => OptionValueError::OutOfRange(said),
                        _ => OptionValueError::WrongForm(said),
                    }
                })?;
            chain.extend(chosen.chain());
            chain.extend(Codecs::netcdf(args.deflate.filter(|d| *d > 0), false, false).chain());
            Some(Codecs::from_chain(chain))
        }
        // As nccopy: shuffle goes with deflate, so `-d 0` leaves nothing to shuffle for.
        (None, Some(d), s) => Some(Codecs::netcdf((d > 0).then_some(d), s && d > 0, false)),
        (None, None, _) => None,
    };
    let dims = target_dims(
        &src.model,
        data_vars.as_deref(),
        args.only_vars.is_some() || args.only_groups.is_some(),
        args.fix_unlimited,
    );
    let mut model = target_model(
        &src.model,
        &dims,
        codecs.as_ref(),
        &chunking,
        opts.zarr_version == 3,
    )?;
    if args.shuffle && codecs.is_none() {
        shuffle_where_deflated(&mut model);
    }
    let to_pure = opts.dialect != meta::writer::Dialect::NcZarr;
    carry_missing_values(&src.model, &mut model, opts.zarr_version == 3, to_pure);
    keep_zarr_types(&src.model, &mut model, to_pure);
    if to_pure && opts.zarr_version == 2 && src.model.provenance.nczarr_major != 0 {
        // Only variables whose data is copied: the others are left unwritten, all fill.
        for (i, v) in model.vars.iter_mut().enumerate() {
            if data_vars
                .as_ref()
                .is_none_or(|list| list.contains(&VarId(i)))
            {
                super::without_default_fill_in_zarr_v2(v);
            }
        }
    }
    if opts.dialect == meta::writer::Dialect::NcZarr {
        check_netcdf_names(&model)?;
        if codecs.is_none() {
            for v in &mut model.vars {
                v.storage.codecs = netcdf_readable(std::mem::take(&mut v.storage.codecs));
            }
        }
    }
    if !args.shards.is_empty() {
        if opts.zarr_version != 3 {
            return Err(Error::Invalid(
                "--shards needs a Zarr v3 target (-k v3): Zarr v2 has no shards".to_string(),
            ));
        }
        shard_model(&mut model, &args.shards)?;
    }
    let unlimited = model.dims.iter().position(|d| d.unlimited).map(DimId);
    if let (Some(version), Some(dim)) = (&args.for_netcdf_c, unlimited) {
        if opts.layout != NczarrLayout::Attributes {
            let name = model.dim_fqn(dim);
            let remedy = if args.fix_unlimited {
                "it is empty, and stays unlimited under -u (netCDF has no fixed dimension of \
                 length 0)"
            } else {
                "add -u to make every unlimited dimension fixed"
            };
            return Err(Error::Unsupported(format!(
                "dimension {name} is unlimited, which netcdf-c {version} cannot store in \
                 NCZarr: {remedy}"
            )));
        }
    }
    check_encodable(&model)?;
    copy_dataset(&src, model, &dst, opts, data_vars.as_deref())?;
    Ok(0)
}

/// Refuses a copy that keeps a source variable's codec with a parameter its chunks can be
/// read with but not written with (a zlib level of 15, which zarr-python reads too, and
/// refuses to write with), before anything is created: the message says how to choose
/// other codecs.
fn check_encodable(model: &Dataset) -> Result<()> {
    for (i, v) in model.vars.iter().enumerate() {
        let element_size = crate::codec::netcdf_element_size(v.nctype, v.element_size());
        // A chain that cannot be built is the reading side's error, reported there.
        let Ok(pipeline) = crate::codec::Pipeline::from_spec(&v.storage.codecs, element_size)
        else {
            continue;
        };
        if let Err(Error::Codec { codec, reason } | Error::CodecOutOfRange { codec, reason }) =
            pipeline.check_encodable()
        {
            return Err(Error::Invalid(format!(
                "variable {}: codec {codec} cannot encode: {reason}, so the copy cannot keep \
                 the source's codec: choose another with -d N (zlib) or --codec CHAIN",
                model.var_fqn(VarId(i))
            )));
        }
    }
    Ok(())
}

/// The dimensions of the copy of `src` (already narrowed by `-V`/`-G`, `subset`), which
/// writes data for `data_vars` (every variable when `None`): an unlimited dimension is as
/// long as the data written along it, so one that no written variable uses is empty when
/// anything is left out (nccopy's copy shows it empty too). `fix_unlimited` (`-u`) makes
/// every unlimited dimension fixed at its source length instead, data or none along it, as
/// nccopy -u does; one of length 0 stays unlimited, as netCDF has no fixed dimension of
/// length 0 (defining one makes it unlimited).
fn target_dims(
    src: &Dataset,
    data_vars: Option<&[VarId]>,
    subset: bool,
    fix_unlimited: bool,
) -> Vec<Dimension> {
    let mut dims = src.dims.clone();
    if !fix_unlimited && (subset || data_vars.is_some()) {
        for (i, d) in dims.iter_mut().enumerate() {
            let used = |v: &VarId| src.var(*v).dims.contains(&DimId(i));
            let written = match data_vars {
                Some(list) => list.iter().any(used),
                None => (0..src.vars.len()).map(VarId).any(|v| used(&v)),
            };
            if d.unlimited && !written {
                d.len = 0;
            }
        }
    }
    if fix_unlimited {
        for d in dims.iter_mut().filter(|d| d.len > 0) {
            d.unlimited = false;
        }
    }
    dims
}

/// `-s` alone: shuffle is added before the deflate of each variable compressed with zlib or
/// gzip, whose chain is otherwise kept (Debian's nccopy 4.9.0 ignores `-s` without `-d`).
/// A variable that stays sharded keeps its chain as it is.
fn shuffle_where_deflated(ds: &mut Dataset) {
    let id = |c: &serde_json::Value| {
        c.get("id")
            .and_then(serde_json::Value::as_str)
            .map(str::to_owned)
    };
    for v in &mut ds.vars {
        let CodecSpec::V2 {
            filters,
            compressor: Some(compressor),
        } = &mut v.storage.codecs
        else {
            continue;
        };
        let deflated = matches!(id(compressor).as_deref(), Some("zlib" | "gzip"));
        if deflated && !filters.iter().any(|f| id(f).as_deref() == Some("shuffle")) {
            filters.insert(0, Codecs::netcdf(None, true, false).chain().remove(0));
        }
    }
}

/// The full names of the variables that `names` (`-V` or `-v`) select in the whole source
/// `ds`, if given.
fn selected_fqns(ds: &Dataset, names: Option<Vec<String>>) -> Result<Option<Vec<String>>> {
    let Some(names) = names else { return Ok(None) };
    let ids = ds.select_vars(&names).map_err(Error::NotFound)?;
    Ok(Some(ids.into_iter().map(|v| ds.var_fqn(v)).collect()))
}

/// The variables of `ds`, a dataset narrowed down after the names were selected, whose full
/// names are in `fqns`: a selected variable that was left out selects nothing.
fn vars_named(ds: &Dataset, fqns: &[String]) -> Vec<VarId> {
    let fqns: std::collections::HashSet<&String> = fqns.iter().collect();
    (0..ds.vars.len())
        .map(VarId)
        .filter(|&v| fqns.contains(&ds.var_fqn(v)))
        .collect()
}

/// Groups the chunks of the variables that `specs` (`--shards`) name into shards: their
/// chunk grid becomes the shard grid and their chain one `sharding_indexed` codec around the
/// chain their chunks had.
fn shard_model(ds: &mut Dataset, specs: &[String]) -> Result<()> {
    let sharding = parse_chunk_specs("--shards", specs, DimensionLists::AddUp)?;
    check_spec_names("--shards", ds, &sharding)?;
    for i in 0..ds.vars.len() {
        let id = VarId(i);
        let v = ds.var(id);
        // A 0-d variable too: it has no chunks to group, and lengths for it are a mistake.
        for spec in &sharding {
            match spec {
                ChunkSpec::Var(name, s)
                    if ds.find_var(name) == Some(id) && s.len() != v.dims.len() =>
                {
                    return Err(Error::Invalid(format!(
                        "--shards {name}: {s:?} does not fit {} dimension(s)",
                        v.dims.len()
                    )));
                }
                _ => {}
            }
        }
        if v.dims.is_empty() {
            continue;
        }
        // A variable that keeps its source's shards: its chunks are the inner ones, and
        // shards made anew keep the source's index layout.
        let (chunks, chain, index) = match &v.storage.codecs {
            CodecSpec::V3(list) => match meta::writer_v3::shard_chunk_shape(list) {
                Some(inner) => (
                    inner,
                    flat_chain(list, &ds.var_fqn(id))?,
                    ShardIndex::of(list).unwrap_or_default(),
                ),
                None => (
                    v.storage.chunks.clone(),
                    v.storage.codecs.clone(),
                    ShardIndex::default(),
                ),
            },
            CodecSpec::V2 { .. } => (
                v.storage.chunks.clone(),
                v.storage.codecs.clone(),
                ShardIndex::default(),
            ),
        };
        let mut shards = v.storage.chunks.clone();
        for spec in &sharding {
            match spec {
                ChunkSpec::Var(name, s) if ds.find_var(name) == Some(id) => {
                    shards = s.clone();
                }
                ChunkSpec::Var(..) => {}
                ChunkSpec::Dim(name, n) => {
                    for (k, d) in v.dims.iter().enumerate() {
                        let dim = ds.dim(*d);
                        if spec_dim(ds, name) == Some(*d) {
                            // A whole number of chunks (one dimension's length serves
                            // variables chunked differently), and beyond a fixed
                            // dimension, as few as cover it.
                            let n = n.unwrap_or(dim.len).max(1);
                            let mut n = n.div_ceil(chunks[k]) * chunks[k];
                            if !dim.unlimited {
                                n = n.min(dim.len.max(1).div_ceil(chunks[k]) * chunks[k]);
                            }
                            shards[k] = n;
                        }
                    }
                }
            }
        }
        if shards == chunks {
            let st = &mut ds.vars[i].storage;
            st.codecs = chain;
            st.chunks = chunks;
            continue;
        }
        let fqn = ds.var_fqn(id);
        for (k, (&s, &c)) in shards.iter().zip(&chunks).enumerate() {
            if s % c != 0 {
                let dim = ds.dim_fqn(v.dims[k]);
                return Err(Error::Invalid(format!(
                    "--shards: {fqn} would have shards of {s} along {dim}, not a multiple of \
                     its chunk length {c}"
                )));
            }
        }
        // The writer spells the inner chain again for the stored type (its byte order).
        let dtype = meta::writer_v3::v3_dtype(v.nctype, v.string_width, false);
        let codecs = meta::writer_v3::sharded(&chain, &dtype, &chunks, &index, &fqn)?;
        let st = &mut ds.vars[i].storage;
        st.codecs = codecs;
        st.chunks = shards;
    }
    Ok(())
}

/// A copied chain as netcdf-c can read it: gzip becomes zlib (the same deflate stream in
/// another wrapper, at the same level) and lz4 moves inside blosc, as `nccopy` would need.
/// The writer warns of other codecs netcdf-c lacks.
fn netcdf_readable(spec: CodecSpec) -> CodecSpec {
    let CodecSpec::V2 {
        filters,
        compressor,
    } = spec
    else {
        return spec;
    };
    let readable = |c: serde_json::Value| -> serde_json::Value {
        match c.get("id").and_then(serde_json::Value::as_str) {
            Some("gzip") => {
                let level = c.get("level").cloned().unwrap_or(serde_json::json!(1));
                serde_json::json!({"id": "zlib", "level": level})
            }
            Some("lz4") => serde_json::json!(
                {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 0, "blocksize": 0}
            ),
            _ => c,
        }
    };
    CodecSpec::V2 {
        filters: filters.into_iter().map(readable).collect(),
        compressor: compressor.map(readable),
    }
}

/// Refuses a group, dimension or variable name that is not a netCDF name (pure Zarr allows
/// `@x` or a trailing space): netcdf-c refuses to open an NCZarr dataset holding one. Of
/// attribute names only the length is checked: netcdf-c reads an NCZarr attribute named
/// `a/b`, `@x` or `""`, but crashes on names much longer than [`NC_MAX_NAME`].
fn check_netcdf_names(ds: &Dataset) -> Result<()> {
    let groups = (1..ds.groups.len()).map(|g| {
        let g = GroupId(g);
        (&ds.group(g).name, "group", ds.group_fqn(g))
    });
    let dims =
        (0..ds.dims.len()).map(|d| (&ds.dim(DimId(d)).name, "dimension", ds.dim_fqn(DimId(d))));
    let vars =
        (0..ds.vars.len()).map(|v| (&ds.var(VarId(v)).name, "variable", ds.var_fqn(VarId(v))));
    for (name, what, fqn) in groups.chain(dims).chain(vars) {
        if let Err(why) = crate::model::check_name(name) {
            return Err(Error::Invalid(format!(
                "{what} {}: {why}, and netcdf-c refuses to open an NCZarr dataset holding \
                 such a name (a copy to pure Zarr, mode=zarr, keeps it)",
                quoted(&fqn)
            )));
        }
    }
    let group_attrs =
        (0..ds.groups.len()).map(|g| (&ds.group(GroupId(g)).attrs, ds.group_fqn(GroupId(g))));
    let var_attrs = (0..ds.vars.len()).map(|v| (&ds.var(VarId(v)).attrs, ds.var_fqn(VarId(v))));
    for (attrs, owner) in group_attrs.chain(var_attrs) {
        if let Some(a) = attrs.iter().find(|a| a.name.len() > NC_MAX_NAME) {
            return Err(Error::Invalid(format!(
                "attribute {} of {}: the name is {} bytes long, and netCDF allows at most \
                 {NC_MAX_NAME} (NC_MAX_NAME; netcdf-c crashes on an NCZarr dataset holding \
                 such a name; a copy to pure Zarr, mode=zarr, keeps it)",
                quoted(&a.name),
                quoted(&owner),
                a.name.len()
            )));
        }
    }
    Ok(())
}

/// The target's model: the source's, with storage reset to what the target asks for.
/// The numcodecs chain equivalent to a Zarr v3 chain (a sharded one's inner chain).
fn flat_chain(list: &[serde_json::Value], fqn: &str) -> Result<CodecSpec> {
    let chain = meta::writer_v3::codecs_v2(list)
        .map_err(|e| Error::Unsupported(format!("{fqn}: {e}; choose a chain with --codec")))?;
    Ok(Codecs::from_chain(chain).spec())
}

/// The dataset `copy` makes of `src`, with the target's dimensions `dims` (`-u` fixes
/// unlimited ones): its chunks as `chunking` (`--chunks`, checked by [`chunk_plan`]) says,
/// its chains `codecs` (or its own); a sharded source variable stays sharded on a Zarr v3
/// target (`keep_shards`) when its chunks do not change, `codecs` then being the chain of
/// its inner chunks.
fn target_model(
    src: &Dataset,
    dims: &[Dimension],
    codecs: Option<&Codecs>,
    chunking: &[ChunkSpec],
    keep_shards: bool,
) -> Result<Dataset> {
    let mut ds = src.clone();
    ds.dims = dims.to_vec();
    for i in 0..ds.vars.len() {
        let id = VarId(i);
        let fqn = src.var_fqn(id);
        let v = src.var(id);
        if let Some(reason) = &v.storage.unreadable {
            return Err(Error::Unreadable {
                var: fqn,
                reason: reason.clone(),
            });
        }
        let src_dims: Vec<(u64, bool)> = v
            .dims
            .iter()
            .map(|d| (src.dim(*d).len, src.dim(*d).unlimited))
            .collect();
        let mut chunks = if v.storage.chunks.len() == v.dims.len() && !v.dims.is_empty() {
            v.storage.chunks.clone()
        } else {
            default_chunks(&src_dims, v.element_size())
        };
        // Per-dimension items first: a per-variable one wins whatever the order, as in nccopy.
        for spec in chunking {
            let ChunkSpec::Dim(name, n) = spec else {
                continue;
            };
            for (k, d) in v.dims.iter().enumerate() {
                if spec_dim(src, name) != Some(*d) {
                    continue;
                }
                // `dim/`: the source's length; nccopy leaves an empty dimension's chunks be.
                let n = n.unwrap_or(src.dim(*d).len);
                if n > 0 {
                    check_chunk_fits(&ds, *d, n, &format!("{name}/{n}"))?;
                    chunks[k] = n;
                }
            }
        }
        for spec in chunking {
            match spec {
                ChunkSpec::Var(name, c) if src.find_var(name) == Some(id) => {
                    for (k, d) in v.dims.iter().enumerate() {
                        check_chunk_fits(&ds, *d, c[k], &format!("{name}:{}", join(c)))?;
                    }
                    chunks = c.clone();
                }
                _ => {}
            }
        }
        let chain = match (codecs, &v.storage.codecs) {
            (Some(c), _) => c.spec(),
            // Object strings are copied as fixed-width strings, as netcdf-c stores them.
            (
                None,
                CodecSpec::V2 {
                    filters,
                    compressor,
                },
            ) if crate::codec::is_object_string_filter(filters) => CodecSpec::V2 {
                filters: filters[1..].to_vec(),
                compressor: compressor.clone(),
            },
            (None, CodecSpec::V2 { .. }) => v.storage.codecs.clone(),
            // Written with the equivalent numcodecs chain (as Zarr v2, or spelled as v3).
            (None, CodecSpec::V3(list)) => flat_chain(list, &fqn)?,
        };
        // A sharded source keeps its shards around the chain of its inner chunks, its own
        // or the one `--codec` or `-d` chose.
        let codecs = match &v.storage.codecs {
            CodecSpec::V3(list) => {
                let inner = meta::writer_v3::shard_chunk_shape(list)
                    .filter(|_| keep_shards && chunks == v.storage.chunks);
                match inner {
                    Some(inner) => {
                        let dtype = meta::writer_v3::v3_dtype(v.nctype, v.string_width, false);
                        let index = ShardIndex::of(list).unwrap_or_default();
                        meta::writer_v3::sharded(&chain, &dtype, &inner, &index, &fqn)?
                    }
                    None => chain,
                }
            }
            CodecSpec::V2 { .. } => chain,
        };
        let big = v
            .storage
            .dtype
            .as_ref()
            .is_some_and(|d| d.order == ByteOrder::Big);
        let st = &mut ds.vars[i].storage;
        st.chunks = chunks;
        st.codecs = codecs;
        st.key = String::new();
        if !big {
            st.dtype = None;
        }
    }
    Ok(ds)
}

/// Carries each variable of a pure Zarr source's missing-value marker into the target, where
/// readers look for it: xarray takes it from a Zarr v2 array's `fill_value` (netcdf-c and
/// NCZarr from `fill_value` and `_FillValue` together), but from a Zarr v3 array's
/// `_FillValue` attribute alone, whose `fill_value`, which Zarr v3 requires (zarr-python's
/// default is 0), is only what unwritten chunks hold. So from pure Zarr v3 to Zarr v2 or
/// NCZarr the `fill_value` becomes the `_FillValue` (none without one, so that no value is
/// taken for missing), and from pure Zarr v2 to pure Zarr v3 the `fill_value` becomes a
/// `_FillValue` too. Not from pure Zarr v2 to NCZarr: netcdf-c reads such an array with that
/// fill but no `_FillValue` and masks nothing, and zarr-python's default `fill_value` 0 would
/// make netCDF readers of the copy take every 0 for missing. The values stored stay the same: every chunk is written, and one whose
/// values are the new fill may be left out only because it reads as them. An NCZarr source
/// keeps netCDF's reading, in which `fill_value` and `_FillValue` agree.
fn carry_missing_values(src: &Dataset, model: &mut Dataset, to_v3: bool, to_pure: bool) {
    if src.provenance.nczarr_major != 0 {
        return;
    }
    for (v, target) in src.vars.iter().zip(model.vars.iter_mut()) {
        let from_v3 = matches!(v.storage.codecs, CodecSpec::V3(_));
        let fill_attr = v.attrs.iter().position(|a| a.name == "_FillValue");
        match (from_v3, to_v3, to_pure) {
            (true, false, _) | (true, true, false) => {
                target.storage.fill_value = fill_attr.and_then(|i| {
                    meta::fill_from_attr(&v.attrs[i].value, v.nctype, v.string_width)
                });
                if to_pure {
                    target.attrs.retain(|a| a.name != "_FillValue");
                }
            }
            (false, true, true) => {
                if let (None, Some(fill)) = (fill_attr, &v.storage.fill_value) {
                    target.attrs.push(crate::model::Attribute {
                        name: "_FillValue".into(),
                        value: crate::model::AttrValue::from_native(v.nctype, fill),
                    });
                }
            }
            _ => {}
        }
    }
}

/// Keeps the Zarr types netCDF has none for, which are read as the netCDF type that holds
/// their values (`bool` as `ubyte`, `float16` as `float`): a pure Zarr target stores them as
/// they were. NCZarr is for netCDF readers: a `bool` stays `ubyte` with the attribute
/// `dtype = "bool"`, by which xarray marks the booleans it writes to netCDF and reads them
/// back as booleans; a `float16` is stored as `float`, with a warning.
fn keep_zarr_types(src: &Dataset, model: &mut Dataset, to_pure: bool) {
    for (i, (v, target)) in src.vars.iter().zip(model.vars.iter_mut()).enumerate() {
        let Some(dtype) = &v.storage.dtype else {
            continue;
        };
        let boolean = dtype.kind == DtypeKind::Bool;
        let half = dtype.netcdf_lacks() && !boolean;
        if to_pure && dtype.netcdf_lacks() {
            target.storage.dtype = Some(dtype.clone());
        } else if boolean && target.attr("dtype").is_none() {
            target.attrs.push(crate::model::Attribute {
                name: "dtype".into(),
                value: AttrValue::Char(b"bool".to_vec()),
            });
        } else if half {
            log::warn!(
                "{}: float16 is stored as float (netCDF has no half-precision type; the values \
                 are the same)",
                src.var_fqn(VarId(i))
            );
        }
    }
}

/// Refuses a chunk of `n` along the fixed dimension `dim` that is longer than the dimension,
/// as nccopy refuses it ("Bad chunk sizes") and netcdf-c refuses to create it. A fixed
/// dimension of length 0 (pure Zarr only) takes chunks of 1.
fn check_chunk_fits(ds: &Dataset, dim: DimId, n: u64, item: &str) -> Result<()> {
    let d = ds.dim(dim);
    let most = d.len.max(1);
    if d.unlimited || n <= most {
        return Ok(());
    }
    Err(Error::Invalid(format!(
        "--chunks {item}: a chunk of {n} along {} is longer than that fixed dimension ({}); \
         give at most {most}, as nccopy and netcdf-c refuse it",
        ds.dim_fqn(dim),
        d.len
    )))
}

fn join(v: &[u64]) -> String {
    v.iter().map(u64::to_string).collect::<Vec<_>>().join(",")
}

/// One `--chunks` item.
#[derive(Debug, Clone, PartialEq)]
enum ChunkSpec {
    /// `var:n,m`
    Var(String, Vec<u64>),
    /// `dim/n`, or `dim/` (`None`): the dimension's whole length
    Dim(String, Option<u64>),
}

/// The dimension `name` names in a `dim/n` item, as nccopy reads it: a plain name is the
/// root group's dimension (a group's dimension of that name is another dimension), a full
/// name `/g/d` that of group `/g`.
fn spec_dim(ds: &Dataset, name: &str) -> Option<DimId> {
    if name.starts_with('/') {
        ds.find_dim(name)
    } else if name.contains('/') {
        None
    } else {
        ds.find_dim_in(Dataset::ROOT, name)
    }
}

/// As nccopy: a name in `option`'s specs that matches nothing is an error, not a silent
/// no-op.
fn check_spec_names(option: &str, ds: &Dataset, specs: &[ChunkSpec]) -> Result<()> {
    for spec in specs {
        match spec {
            ChunkSpec::Var(name, _) if ds.find_var(name).is_none() => {
                return Err(Error::NotFound(format!(
                    "{option}: no variable named {name}"
                )));
            }
            ChunkSpec::Dim(name, _) if spec_dim(ds, name).is_none() => {
                let elsewhere = (0..ds.dims.len())
                    .map(DimId)
                    .find(|&d| ds.dim(d).name == *name)
                    .map(|d| ds.dim_fqn(d));
                let hint = match elsewhere {
                    Some(fqn) => format!(
                        " in the root group (a plain name is the root group's dimension, as in \
                         nccopy: give a group's by its full name, such as {fqn})"
                    ),
                    None if !name.starts_with('/') && name.contains('/') => {
                        " (a group's dimension takes its full name, from the root: /g/d)"
                            .to_string()
                    }
                    None => String::new(),
                };
                return Err(Error::NotFound(format!(
                    "{option}: no dimension named {name}{hint}"
                )));
            }
            _ => {}
        }
    }
    Ok(())
}

/// The `--chunks` items of `specs`, checked against the whole source `src` before `-V` or
/// `-G` leave anything out, as nccopy checks them: every name must name something, and a
/// variable's lengths must fit it (one per dimension, none longer than a fixed dimension),
/// even where the variable is left out.
fn chunk_plan(src: &Dataset, specs: &[String]) -> Result<Vec<ChunkSpec>> {
    let plan = parse_chunk_specs("--chunks", specs, DimensionLists::LastCounts)?;
    check_spec_names("--chunks", src, &plan)?;
    for spec in &plan {
        if let ChunkSpec::Var(name, lengths) = spec {
            let v = src.var(src.find_var(name).expect("names were checked"));
            if lengths.len() != v.dims.len() {
                return Err(Error::Invalid(format!(
                    "--chunks {name}:{}: {} length(s) for {} dimension(s)",
                    join(lengths),
                    lengths.len(),
                    v.dims.len()
                )));
            }
            for (d, &n) in v.dims.iter().zip(lengths) {
                check_chunk_fits(src, *d, n, &format!("{name}:{}", join(lengths)))?;
            }
        }
    }
    Ok(plan)
}

/// The digits of a `dim/n` length and their radix, as nccopy reads it (`strtoll(n, .., 0)`):
/// hexadecimal after `0x` or `0X`, octal after a leading `0` (`010` is 8), else decimal.
fn c_integer_digits(n: &str) -> (&str, u32) {
    match n.strip_prefix("0x").or_else(|| n.strip_prefix("0X")) {
        Some(hex) => (hex, 16),
        None if n.len() > 1 && n.starts_with('0') => (&n[1..], 8),
        None => (n, 10),
    }
}

/// How arguments of dimension items (`dim/n,dim2/m`) given one after another combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DimensionLists {
    /// The last replaces those before it, as in nccopy's `-c` (Debian's 4.9.0 keeps only the
    /// last argument of dimensions, while arguments of a variable add up).
    LastCounts,
    /// They add up (`--shards`, which nccopy does not have).
    AddUp,
}

/// The items of `option` (`--chunks` or `--shards`), in nccopy's `-c` forms. An item is the
/// variable form `var:n,m` when a list of lengths follows its last `:`; otherwise it is a list
/// of `dim/n` or `dim/`, so that names holding `:` (which netCDF allows) work in either form.
/// nccopy's forms for contiguous storage (`/`, `var:`, `var:contiguous`, `var:compact`) are
/// refused: every NCZarr variable is stored in chunks. `repeats` says how arguments of
/// dimension items combine.
fn parse_chunk_specs(
    option: &str,
    specs: &[String],
    repeats: DimensionLists,
) -> Result<Vec<ChunkSpec>> {
    // A chunk length: of the wrong form unless an integer (with an optional sign; the digits
    // of the radix that `c_radix` says, nccopy's reading of `dim/n`, else decimal as in
    // `var:n,m`), out of range when below 1 (a negative one included) or past 2^64.
    let length =
        |spec: &str, n: &str, c_radix: bool| -> std::result::Result<u64, OptionValueError> {
            let n = n.trim();
            let (negative, magnitude) = match n.strip_prefix('-') {
                Some(magnitude) => (true, magnitude),
                None => (false, n.strip_prefix('+').unwrap_or(n)),
            };
            let (digits, radix) = match c_radix {
                true => c_integer_digits(magnitude),
                false => (magnitude, 10),
            };
            if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
                return Err(OptionValueError::WrongForm(format!(
                    "invalid {option} {}: length {} is not a number (forms: dim/n,dim2/m, dim/ \
                     for the whole dimension, or var:n,m)",
                    quoted(spec),
                    quoted(n)
                )));
            }
            u64::from_str_radix(digits, radix)
                .ok()
                .filter(|n| *n > 0 && !negative)
                .ok_or_else(|| {
                    OptionValueError::OutOfRange(format!(
                        "invalid {option} {}: length {} is not from 1 to {}",
                        quoted(spec),
                        quoted(n),
                        u64::MAX
                    ))
                })
        };
    // The lengths of the variable form, `None` when `list` is not one of numbers.
    let lengths = |spec: &str, list: &str| -> Option<Result<Vec<u64>>> {
        let numbers = list.split(',').all(|n| super::is_integer(n.trim()));
        numbers.then(|| {
            list.split(',')
                .map(|n| length(spec, n, false).map_err(Error::from))
                .collect()
        })
    };
    let mut out = Vec::new();
    for spec in specs {
        let bad = || {
            Error::Usage(format!(
                "invalid {option} {} (forms: dim/n,dim2/m, dim/ for the whole dimension, or \
                 var:n,m)",
                quoted(spec)
            ))
        };
        let unchunked = || {
            Error::Unsupported(format!(
                "{option} {}: nccopy's form for unchunked (contiguous or compact) storage, \
                 which NCZarr does not have: every variable is stored in chunks (for one \
                 chunk of a whole variable, give its lengths: var:n,m)",
                quoted(spec)
            ))
        };
        if spec.trim() == "/" {
            return Err(unchunked());
        }
        let var_form = spec
            .rsplit_once(':')
            .and_then(|(var, list)| Some((var, lengths(spec, list)?)));
        if let Some((var, sizes)) = var_form {
            out.push(ChunkSpec::Var(var.trim().to_string(), sizes?));
            continue;
        }
        if let Some((_, list)) = spec.rsplit_once(':') {
            if matches!(list.trim(), "" | "contiguous" | "compact") {
                return Err(unchunked());
            }
            if !list.contains('/') {
                // A list that is not lengths: a bad variable form, not a dimension.
                return Err(bad());
            }
        }
        if repeats == DimensionLists::LastCounts {
            out.retain(|s| matches!(s, ChunkSpec::Var(..)));
        }
        for item in spec.split(',').filter(|s| !s.trim().is_empty()) {
            let (dim, n) = item.rsplit_once('/').ok_or_else(bad)?;
            let dim = dim.trim();
            if dim.is_empty() {
                return Err(bad());
            }
            let n = match n.trim() {
                "" => None,
                n => Some(length(spec, n, true)?),
            };
            out.push(ChunkSpec::Dim(dim.to_string(), n));
        }
    }
    // Which of two lengths for one name would count is a guess (nccopy takes the first).
    for (i, spec) in out.iter().enumerate() {
        let (name, what) = match spec {
            ChunkSpec::Var(name, _) => (name, "variable"),
            ChunkSpec::Dim(name, _) => (name, "dimension"),
        };
        let again = out[i + 1..].iter().any(|other| {
            matches!((spec, other), (ChunkSpec::Var(..), ChunkSpec::Var(n, _))
                | (ChunkSpec::Dim(..), ChunkSpec::Dim(n, _)) if n == name)
        });
        if again {
            return Err(Error::Invalid(format!(
                "{option}: {what} {name} is given more than once; give it once"
            )));
        }
    }
    Ok(out)
}

/// Copies the values of every variable (of `data_vars` only, when given; the others keep
/// their fill) from `src` into a new dataset with `model` at `dst`, verifies them, and
/// publishes the result.
pub fn copy_dataset(
    src: &OpenDataset,
    model: Dataset,
    dst: &Location,
    opts: CreateOptions,
    data_vars: Option<&[VarId]>,
) -> Result<()> {
    crate::create::check_key_names(&model, opts.zarr_version)?;
    let staging = Staging::new(dst)?;
    let result = copy_into(src, model, &staging, opts, data_vars);
    match result {
        Ok(()) => staging.publish(),
        Err(e) => {
            staging.abandon();
            Err(e)
        }
    }
}

fn copy_into(
    src: &OpenDataset,
    model: Dataset,
    staging: &Staging,
    opts: CreateOptions,
    data_vars: Option<&[VarId]>,
) -> Result<()> {
    let mut w = staging.create_writer(opts, model)?;
    let vars: Vec<VarId> = match data_vars {
        Some(list) => list.to_vec(),
        None => (0..src.model.vars.len()).map(VarId).collect(),
    };
    let total: u64 = vars.iter().map(|v| var_bytes(&src.model, *v)).sum();
    let mut progress = Progress::new(total);
    let mut sums: Vec<(String, Check)> = Vec::with_capacity(vars.len());
    let mut since_sync = 0u64;
    // One buffer for every slab: a fresh one each time would be faulted in page by page.
    let mut buf = Vec::new();
    // Slabs follow the target's chunks: a source chunked alike is read once, chunk by chunk,
    // decoded straight into the slab, and a cache would only add a copy of everything.
    let uncached = ChunkEngine::new(Arc::clone(&src.map), 0);
    let mut as_stored = Vec::new();
    for &var in &vars {
        if uncached.same_encoding(&src.model, var, w.engine(), w.model(), var)? {
            as_stored.push(var);
        }
    }
    // Variables whose chunks are copied as they are go first, all together.
    let digests = uncached.copy_vars_to(&src.model, &as_stored, w.engine(), w.model())?;
    let mut copied: HashMap<VarId, u32> = as_stored.iter().copied().zip(digests).collect();
    progress.add(as_stored.iter().map(|v| var_bytes(&src.model, *v)).sum());
    for &var in &vars {
        let fqn = src.model.var_fqn(var);
        if let Some(digest) = copied.remove(&var) {
            sums.push((fqn, Check::Stored(digest)));
            continue;
        }
        let engine = if src.model.var(var).storage.chunks == w.model().var(var).storage.chunks {
            &uncached
        } else {
            &src.engine
        };
        let strings = src.model.var(var).nctype == NcType::String;
        let grid = SlabGrid::new(
            &w.model().var_shape(var),
            &w.model().var(var).storage.chunks,
            esize(&src.model, var),
        );
        let fill = unstored_fill(src, var, &w, var)?;
        // A source region that stores nothing reads as the fill the target leaves unstored:
        // only slabs over stored source chunks are read, however large the grid.
        let keys: Box<dyn Iterator<Item = Vec<u64>>> = match &fill {
            Some(f) if f.source_alike => {
                Box::new(touched_keys(&grid, &src.model, var, &uncached)?.into_iter())
            }
            _ => Box::new(grid.keys()),
        };
        let fill = fill.map(|f| f.element);
        let mut crc = 0u32;
        let mut moved = 0u64;
        for key in keys {
            let slab = grid.slab(&key);
            buf.resize(slab_bytes(&slab, esize(&src.model, var))?, 0);
            engine.read(&src.model, var, &slab, &mut buf)?;
            crc = slab_crc(
                crc,
                &slab,
                &buf,
                src.model.var(var),
                strings,
                fill.as_deref(),
            );
            write_stored(&mut w, var, &slab, &buf, fill.as_deref())?;
            progress.add(buf.len() as u64);
            moved += buf.len() as u64;
            since_sync += buf.len() as u64;
            if since_sync >= SYNC_BYTES {
                w.sync()?;
                since_sync = 0;
            }
        }
        progress.add(var_bytes(&src.model, var).saturating_sub(moved));
        sums.push((
            fqn,
            Check::Values {
                crc,
                strings,
                esize: esize(&src.model, var),
                fill,
            },
        ));
    }
    w.close()?;
    progress.finish();
    verify(&staging.temp, &sums)
}

/// What the verification compares for one variable.
#[derive(Debug, Clone)]
enum Check {
    /// The [`slab_crc`]s of the values, taken `strings` or not, in the slabs of a
    /// [`SlabGrid`] for elements of `esize` bytes; with `fill`, slabs entirely of that
    /// element left out.
    Values {
        crc: u32,
        strings: bool,
        esize: usize,
        fill: Option<Vec<u8>>,
    },
    /// The [`ChunkEngine::stored_digests`] of its chunk objects, copied as they were.
    Stored(u32),
}

/// Reads the finished copy back and compares each variable's checksum, found by full name
/// (a pure Zarr copy lists its variables in another order).
fn verify(location: &Location, sums: &[(String, Check)]) -> Result<()> {
    let map = zmap::open(location, false)?;
    let model = meta::read_dataset(map.as_ref(), &location.mode)?;
    // Slabs follow the copy's chunks, so each is read once: no cache.
    let engine = ChunkEngine::new(Arc::clone(&map), 0);
    let mut buf = Vec::new();
    let vars = sums
        .iter()
        .map(|(fqn, _)| {
            model.find_var(fqn).ok_or_else(|| Error::Storage {
                key: location.shown().into_owned(),
                reason: format!("verification failed: {fqn} is missing from the copy"),
            })
        })
        .collect::<Result<Vec<VarId>>>()?;
    let as_stored: Vec<VarId> = vars
        .iter()
        .zip(sums)
        .filter(|(_, (_, check))| matches!(check, Check::Stored(_)))
        .map(|(v, _)| *v)
        .collect();
    let digests = engine.stored_digests(&model, &as_stored)?;
    let stored: HashMap<VarId, u32> = as_stored.into_iter().zip(digests).collect();
    for (&var, (fqn, want)) in vars.iter().zip(sums) {
        let v = model.var(var);
        let (crc, want, what) = match want {
            Check::Stored(want) => (stored[&var], *want, "chunk objects"),
            Check::Values {
                crc: want,
                strings,
                esize,
                fill,
            } => {
                let grid = SlabGrid::new(&model.var_shape(var), &v.storage.chunks, *esize);
                // Where the copy reads as the fill without a stored chunk, the slabs that
                // stored chunks overlap are all the check takes; elsewhere every slab.
                let unstored_is_fill = match fill {
                    Some(f) if v.storage.fill_value.is_some() => {
                        same_value(&engine.fill_element(&model, var)?, f, *strings)
                    }
                    _ => false,
                };
                let keys: Box<dyn Iterator<Item = Vec<u64>>> = if unstored_is_fill {
                    Box::new(touched_keys(&grid, &model, var, &engine)?.into_iter())
                } else {
                    Box::new(grid.keys())
                };
                let mut crc = 0u32;
                for key in keys {
                    let slab = grid.slab(&key);
                    buf.resize(slab_bytes(&slab, v.element_size())?, 0);
                    engine.read(&model, var, &slab, &mut buf)?;
                    crc = slab_crc(crc, &slab, &buf, v, *strings, fill.as_deref());
                }
                (crc, *want, "values")
            }
        };
        if crc != want {
            return Err(Error::Storage {
                key: v.storage.key.clone(),
                reason: format!(
                    "verification failed: {fqn} reads back different {what} (crc32c {crc:08x}, copied {want:08x})"
                ),
            });
        }
    }
    Ok(())
}

/// The fill value a copy may leave target chunks of unstored ([`unstored_fill`]).
struct UnstoredFill {
    /// One element of it, in native bytes.
    element: Vec<u8>,
    /// Whether the source's chunks never stored read as it too, so need not be read.
    source_alike: bool,
}

/// The fill value of `dst_var` in the copy `w`, when chunks of it may be left unstored: it
/// declares one (which every reader, netcdf-c, zarr-python and this one, gives for a chunk
/// not stored) of the type and width of `var` of the source, which the slabs read. A variable
/// without one is written whole: a chunk missing from a Zarr v2 array of `fill_value: null`
/// has no defined values (netcdf-c reads zeros, zarr-python what it likes).
fn unstored_fill(
    src: &OpenDataset,
    var: VarId,
    w: &DatasetWriter,
    dst_var: VarId,
) -> Result<Option<UnstoredFill>> {
    let (sv, dv) = (src.model.var(var), w.model().var(dst_var));
    if dv.storage.fill_value.is_none()
        || dv.nctype != sv.nctype
        || dv.element_size() != sv.element_size()
    {
        return Ok(None);
    }
    let element = w.engine().fill_element(w.model(), dst_var)?;
    let source_alike =
        sv.storage.fill_value.is_some() && src.engine.fill_element(&src.model, var)? == element;
    Ok(Some(UnstoredFill {
        element,
        source_alike,
    }))
}

/// The keys of the slabs of `grid` that overlap a chunk object `var` of `ds` stores, in C
/// order: the only ones that can hold anything but the fill. Their number follows what is
/// stored, not the size of the array.
fn touched_keys(
    grid: &SlabGrid,
    ds: &Dataset,
    var: VarId,
    engine: &ChunkEngine,
) -> Result<BTreeSet<Vec<u64>>> {
    let chunks = &ds.var(var).storage.chunks;
    let mut keys = BTreeSet::new();
    for coords in engine.stored_chunks(ds, var)? {
        let lo: Vec<u64> = coords
            .iter()
            .zip(chunks)
            .map(|(&c, &n)| c.saturating_mul(n))
            .collect();
        let hi: Vec<u64> = lo
            .iter()
            .zip(chunks)
            .map(|(&l, &n)| l.saturating_add(n))
            .collect();
        keys.extend(grid.keys_over(&lo, &hi));
    }
    Ok(keys)
}

/// Writes `values`, the source's values of `slab`, to `var` of the copy `w`, less the
/// target chunks that hold nothing but `fill`: a new dataset reads those as fill without
/// them, as zarr-python leaves them out (`write_empty_chunks=False`) and netcdf-c never
/// stores a chunk nothing was written to. Without `fill`, the whole slab.
fn write_stored(
    w: &mut DatasetWriter,
    var: VarId,
    slab: &Hyperslab,
    values: &[u8],
    fill: Option<&[u8]>,
) -> Result<()> {
    let Some(fill) = fill else {
        return w.write(var, slab, values);
    };
    let chunks = w.model().var(var).storage.chunks.clone();
    let boxes = || chunk_boxes(slab, &chunks);
    let (mut all, mut filled) = (0u64, 0u64);
    for b in boxes() {
        all += 1;
        filled += u64::from(box_is_fill(slab, values, &b, fill));
    }
    if filled == 0 {
        return w.write(var, slab, values);
    }
    if filled < all {
        let mut part = Vec::new();
        for b in boxes().filter(|b| !box_is_fill(slab, values, b, fill)) {
            part.clear();
            for_runs(slab, &b, fill.len(), |run| {
                part.extend_from_slice(&values[run]);
                true
            });
            w.write(var, &b, &part)?;
        }
    }
    Ok(())
}

/// The parts of `slab` that each lie in one chunk of `chunks`, in C order, made one at a
/// time (a slab may span millions of small chunks).
fn chunk_boxes<'a>(slab: &'a Hyperslab, chunks: &'a [u64]) -> impl Iterator<Item = Hyperslab> + 'a {
    let size = |d: usize| chunks.get(d).copied().unwrap_or(1).max(1);
    let end = |d: usize| slab.start[d] + slab.count[d];
    let lo: Vec<u64> = (0..slab.start.len())
        .map(|d| slab.start[d] / size(d))
        .collect();
    let hi: Vec<u64> = (0..slab.start.len())
        .map(|d| end(d).div_ceil(size(d)))
        .collect();
    Keys::new(lo, hi).map(move |key| {
        let start: Vec<u64> = key
            .iter()
            .enumerate()
            .map(|(d, &k)| (k * size(d)).max(slab.start[d]))
            .collect();
        let count = key
            .iter()
            .enumerate()
            .map(|(d, &k)| ((k + 1) * size(d)).min(end(d)) - start[d])
            .collect();
        Hyperslab {
            stride: vec![1; start.len()],
            start,
            count,
        }
    })
}

/// Calls `each` with the byte range in `values` (the C-order values of `slab`, elements of
/// `esize` bytes) of each row of `part`, a part of `slab`, in C order, until it returns false.
fn for_runs(
    slab: &Hyperslab,
    part: &Hyperslab,
    esize: usize,
    mut each: impl FnMut(std::ops::Range<usize>) -> bool,
) {
    let n = slab.count.len();
    if n == 0 {
        each(0..esize);
        return;
    }
    // Elements one index step along each dimension spans in `values`.
    let mut strides = vec![1u64; n];
    for d in (0..n - 1).rev() {
        strides[d] = strides[d + 1] * slab.count[d + 1];
    }
    let row = part.count[n - 1] as usize * esize;
    let rel = |d: usize, i: u64| (i - slab.start[d]) * strides[d];
    let lo: Vec<u64> = part.start[..n - 1].to_vec();
    let hi: Vec<u64> = (0..n - 1).map(|d| part.start[d] + part.count[d]).collect();
    for idx in Keys::new(lo, hi) {
        let first = idx.iter().enumerate().map(|(d, &i)| rel(d, i)).sum::<u64>()
            + rel(n - 1, part.start[n - 1]);
        let at = first as usize * esize;
        if !each(at..at + row) {
            return;
        }
    }
}

/// Whether the values of `part` of `slab` are all `fill`.
fn box_is_fill(slab: &Hyperslab, values: &[u8], part: &Hyperslab, fill: &[u8]) -> bool {
    let mut all = true;
    for_runs(slab, part, fill.len(), |run| {
        all = all_fill(&values[run], fill.len(), fill, false);
        all
    });
    all
}

/// Whether `values`, elements of `width` bytes, are all `fill`, compared as bytes (a NaN fill
/// is its own bit pattern, and a NaN of another one is a value); with `strings`, by their
/// text up to the padding, as [`values_crc`] takes them, since a copy may store strings in
/// another width.
fn all_fill(values: &[u8], width: usize, fill: &[u8], strings: bool) -> bool {
    if width == 0 || values.len() % width != 0 {
        return false;
    }
    match fill {
        _ if strings => values
            .chunks_exact(width)
            .all(|v| same_value(v, fill, true)),
        [b] if width == 1 => values.iter().all(|v| v == b),
        _ => values.chunks_exact(width).all(|v| v == fill),
    }
}

/// Whether two elements are the same value: the same bytes, or with `strings` the same text
/// up to the padding.
fn same_value(a: &[u8], b: &[u8], strings: bool) -> bool {
    if strings {
        string_text(a) == string_text(b)
    } else {
        a == b
    }
}

/// Appends the values of `slab` of `var` (native, C order) to a variable's check: nothing
/// for a slab entirely of `fill`, which a copy may leave unstored, else the slab's first
/// index and the values' [`values_crc`].
fn slab_crc(
    crc: u32,
    slab: &Hyperslab,
    values: &[u8],
    var: &Variable,
    strings: bool,
    fill: Option<&[u8]>,
) -> u32 {
    if fill.is_some_and(|f| all_fill(values, var.element_size(), f, strings)) {
        return crc;
    }
    let crc = slab
        .start
        .iter()
        .fold(crc, |c, i| crc32c::crc32c_append(c, &i.to_le_bytes()));
    values_crc(crc, values, var, strings)
}

/// Appends values (native, C order) of `var` to a CRC-32C. With `strings` (the source's
/// variable holds strings), a value counts as its bytes up to its padding, so that copies
/// that store strings in another width (Zarr v3 stores them as UTF-32) compare equal; the
/// source's type decides, since a copy may read back as another type (pure Zarr has no
/// char: it is a string of one byte there).
fn values_crc(crc: u32, values: &[u8], var: &Variable, strings: bool) -> u32 {
    let width = var.element_size();
    if !strings || width == 0 {
        return crc32c::crc32c_append(crc, values);
    }
    values.chunks(width).fold(crc, |crc, s| {
        let text = string_text(s);
        let crc = crc32c::crc32c_append(crc, &(text.len() as u32).to_le_bytes());
        crc32c::crc32c_append(crc, text)
    })
}

/// A string value's text: its bytes up to the padding.
fn string_text(value: &[u8]) -> &[u8] {
    &value[..value.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1)]
}

fn esize(ds: &Dataset, var: VarId) -> usize {
    ds.var(var).element_size()
}

fn var_bytes(ds: &Dataset, var: VarId) -> u64 {
    ds.var_shape(var)
        .iter()
        .fold(esize(ds, var) as u64, |a, &n| a.saturating_mul(n))
}

fn slab_bytes(slab: &Hyperslab, esize: usize) -> Result<usize> {
    usize::try_from(slab.len().saturating_mul(esize as u64))
        .map_err(|_| Error::Invalid("slab too large for memory".into()))
}

/// The slabs covering an array, each at most [`SLAB_BYTES`] when the chunking allows,
/// aligned to its chunks, in C order. A slab spans whole chunks along the dimensions it does
/// not cover entirely, so each chunk is written by as few slabs as its size allows: a chunk
/// written row by row would be decoded and encoded again for every row (minutes for one
/// chunk of 72 MB). A slab is named by its key, its index along each dimension it does not
/// span whole; slabs are made from keys one at a time, so an array of a huge shape costs no
/// memory for the slabs it has.
struct SlabGrid {
    shape: Vec<u64>,
    /// A slab's length along each dimension keys index (the outer ones); along the others
    /// it spans the array.
    steps: Vec<u64>,
}

impl SlabGrid {
    /// The slabs of an array of `shape` in `chunks` of elements of `esize` bytes.
    fn new(shape: &[u64], chunks: &[u64], esize: usize) -> Self {
        let n = shape.len();
        if n == 0 {
            return SlabGrid {
                shape: Vec::new(),
                steps: Vec::new(),
            };
        }
        let chunk = |d: usize| {
            chunks
                .get(d)
                .copied()
                .unwrap_or(1)
                .clamp(1, shape[d].max(1))
        };
        // inner[d]: bytes of one index step along dimension d.
        let mut inner = vec![esize as u64; n];
        for d in (0..n - 1).rev() {
            inner[d] = inner[d + 1].saturating_mul(shape[d + 1]);
        }
        // The outermost dimension `split` along which a block of one chunk in every dimension
        // before it and one chunk step along it fits the budget (the innermost when not even
        // one chunk does: a slab is then one chunk). `lead`: the elements of such a block's
        // dimensions before `split`.
        let mut lead = 1u64;
        let mut split = n - 1;
        for (d, &step_bytes) in inner.iter().enumerate() {
            if lead.saturating_mul(chunk(d)).saturating_mul(step_bytes) <= SLAB_BYTES || d == n - 1
            {
                split = d;
                break;
            }
            lead = lead.saturating_mul(chunk(d));
        }
        let block = lead.saturating_mul(inner[split]).max(1);
        let step = (SLAB_BYTES / block / chunk(split) * chunk(split)).max(chunk(split));
        SlabGrid {
            shape: shape.to_vec(),
            steps: (0..split).map(chunk).chain([step]).collect(),
        }
    }

    /// The keys of every slab, in C order.
    fn keys(&self) -> Keys {
        let hi = self
            .steps
            .iter()
            .zip(&self.shape)
            .map(|(&s, &n)| n.div_ceil(s))
            .collect();
        self.bounded(vec![0; self.steps.len()], hi)
    }

    /// The keys of the slabs that overlap the elements from `lo` to `hi` (exclusive; any
    /// part beyond the array left out), in C order.
    fn keys_over(&self, lo: &[u64], hi: &[u64]) -> Keys {
        let mut klo = Vec::with_capacity(self.steps.len());
        let mut khi = Vec::with_capacity(self.steps.len());
        for (d, &step) in self.steps.iter().enumerate() {
            let end = hi[d].min(self.shape[d]);
            if lo[d] >= end {
                return Keys::new(Vec::new(), Vec::new()).exhausted();
            }
            klo.push(lo[d] / step);
            khi.push((end - 1) / step + 1);
        }
        self.bounded(klo, khi)
    }

    /// Keys from `lo` to `hi`, none for an array without elements.
    fn bounded(&self, lo: Vec<u64>, hi: Vec<u64>) -> Keys {
        let keys = Keys::new(lo, hi);
        if self.shape.contains(&0) {
            keys.exhausted()
        } else {
            keys
        }
    }

    /// The slab of `key`.
    fn slab(&self, key: &[u64]) -> Hyperslab {
        let start: Vec<u64> = (0..self.shape.len())
            .map(|d| key.get(d).map_or(0, |&k| k * self.steps[d]))
            .collect();
        let count = (0..self.shape.len())
            .map(|d| match self.steps.get(d) {
                Some(&step) => step.min(self.shape[d] - start[d]),
                None => self.shape[d],
            })
            .collect();
        Hyperslab {
            stride: vec![1; start.len()],
            start,
            count,
        }
    }
}

/// Every index from `lo` to `hi` (exclusive) along each dimension, in C order (an
/// odometer, the last dimension fastest); one, the empty index, for no dimension.
struct Keys {
    lo: Vec<u64>,
    hi: Vec<u64>,
    next: Option<Vec<u64>>,
}

impl Keys {
    fn new(lo: Vec<u64>, hi: Vec<u64>) -> Self {
        let next = lo.iter().zip(&hi).all(|(l, h)| l < h).then(|| lo.clone());
        Keys { lo, hi, next }
    }

    /// The same, yielding nothing.
    fn exhausted(mut self) -> Self {
        self.next = None;
        self
    }
}

impl Iterator for Keys {
    type Item = Vec<u64>;

    fn next(&mut self) -> Option<Vec<u64>> {
        let current = self.next.take()?;
        let mut following = current.clone();
        for d in (0..following.len()).rev() {
            following[d] += 1;
            if following[d] < self.hi[d] {
                self.next = Some(following);
                break;
            }
            following[d] = self.lo[d];
        }
        Some(current)
    }
}

/// A `\r` progress line on stderr, only when stderr is a terminal.
struct Progress {
    total: u64,
    done: u64,
    last: Instant,
    on: bool,
}

impl Progress {
    fn new(total: u64) -> Self {
        Progress {
            total,
            done: 0,
            last: Instant::now(),
            on: std::io::stderr().is_terminal() && total > 0,
        }
    }

    fn add(&mut self, n: u64) {
        self.done += n;
        if self.on && self.last.elapsed() >= Duration::from_millis(200) {
            self.last = Instant::now();
            self.draw();
        }
    }

    fn draw(&self) {
        let pct = self.done as f64 * 100.0 / self.total as f64;
        let mut err = std::io::stderr();
        let _ = write!(
            err,
            "\rcopy: {pct:5.1}% ({} / {} MiB)",
            self.done >> 20,
            self.total >> 20
        );
        let _ = err.flush();
    }

    fn finish(&self) {
        if self.on {
            self.draw();
            let _ = writeln!(std::io::stderr());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parse_copy(args: &[&str]) -> std::result::Result<CopyArgs, clap::Error> {
        let cli =
            super::super::Cli::try_parse_from(["nczarrfs", "copy"].iter().chain(args).copied())?;
        match cli.command {
            super::super::Command::Copy(a) => Ok(a),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn object_prefixes_below_others_are_told() {
        assert!(is_below("ds/sub", "ds"));
        assert!(is_below("ds/sub/", "/ds/"));
        assert!(is_below("ds", ""));
        assert!(!is_below("ds", "ds"));
        assert!(!is_below("dsx/sub", "ds"));
        assert!(!is_below("", ""));
        assert!(!is_below("other", "ds"));
    }

    #[test]
    fn dash_h_is_nccopys_chunk_cache_size_and_help_stays() {
        let a = parse_copy(&["-h", "4194304", "in", "out"]).unwrap();
        assert_eq!(a.cache_size, Some(4_194_304));
        assert_eq!(
            (a.src.as_os_str(), a.dst.as_os_str()),
            ("in".as_ref(), "out".as_ref())
        );
        let a = parse_copy(&["in", "out", "-h", "64M"]).unwrap();
        assert_eq!(a.cache_size, Some(64_000_000));
        let help = parse_copy(&["--help"]).unwrap_err();
        assert_eq!(help.kind(), clap::error::ErrorKind::DisplayHelp);
        // A value is required: `-h` alone is not help.
        let e = parse_copy(&["-h", "in", "out"]).unwrap_err();
        assert_ne!(e.kind(), clap::error::ErrorKind::DisplayHelp);
    }

    #[test]
    fn options_given_again_replace_what_they_gave_as_in_nccopy() {
        let a = parse_copy(&["-d", "1", "-d", "0", "-s", "-s", "-u", "-u", "a", "b"]).unwrap();
        assert_eq!(
            (a.deflate, a.shuffle, a.fix_unlimited),
            (Some(0), true, true)
        );
        let a = parse_copy(&["-V", "a,b", "-v", "b", "a", "b"]).unwrap();
        assert_eq!(
            (a.only_vars, a.data_vars),
            (None, Some(vec!["b".to_string()]))
        );
        let a = parse_copy(&["-v", "b", "-V", "a,b", "a", "b"]).unwrap();
        assert_eq!(a.only_vars.unwrap(), ["a", "b"]);
        assert_eq!(a.data_vars, None);
        let a = parse_copy(&["-V", "a", "-V", "b", "a", "b"]).unwrap();
        assert_eq!(a.only_vars.unwrap(), ["b"]);
        let a = parse_copy(&["-G", "g", "-g", "/", "a", "b"]).unwrap();
        assert_eq!(
            (a.only_groups, a.data_groups),
            (None, Some(vec!["/".to_string()]))
        );
        let a = parse_copy(&["-g", "/", "-G", "g,h", "a", "b"]).unwrap();
        assert_eq!(a.only_groups.unwrap(), ["g", "h"]);
        assert_eq!(a.data_groups, None);
        // -c and --shards add up.
        let a = parse_copy(&["-c", "t/2", "-c", "v:1", "a", "b"]).unwrap();
        assert_eq!(a.chunks, ["t/2", "v:1"]);
    }

    #[test]
    fn sizes_read_as_nccopy_reads_them() {
        // nccopy's double_with_suffix: decimal multipliers, the first letter counts.
        for (text, bytes) in [
            ("0", 0),
            ("4194304", 4_194_304),
            ("4k", 4_000),
            ("4K", 4_000),
            ("1.5M", 1_500_000),
            ("64MB", 64_000_000),
            ("2g", 2_000_000_000),
            ("1e6", 1_000_000),
            ("2.7", 2),
        ] {
            assert_eq!(parse_nccopy_size(text), Ok(bytes), "{text}");
        }
        for bad in ["", "x", "4X", "4 M", "M"] {
            assert!(
                matches!(parse_nccopy_size(bad), Err(OptionValueError::WrongForm(_))),
                "{bad}"
            );
        }
        // Numbers, but no size: exit status 1, as `get --cache-size` past 2^64.
        for (bad, says) in [
            ("-5", "is negative"),
            ("99999999999999999999", "is too large"),
            ("1e300", "is too large"),
            ("20000000000000P", "is too large"),
        ] {
            match parse_nccopy_size(bad) {
                Err(OptionValueError::OutOfRange(m)) => assert!(m.contains(says), "{bad}: {m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    /// Every slab of a [`SlabGrid`], in order.
    fn slabs(shape: &[u64], chunks: &[u64], esize: usize) -> Vec<Hyperslab> {
        let grid = SlabGrid::new(shape, chunks, esize);
        grid.keys().map(|k| grid.slab(&k)).collect()
    }

    fn covered(shape: &[u64], chunks: &[u64], esize: usize) -> u64 {
        let s = slabs(shape, chunks, esize);
        for slab in &s {
            assert!(
                slab.len() * esize as u64
                    <= SLAB_BYTES.max(esize as u64 * chunks.iter().product::<u64>())
            );
        }
        s.iter().map(Hyperslab::len).sum()
    }

    #[test]
    fn slabs_cover_every_element_once_in_bounded_pieces() {
        assert_eq!(covered(&[10, 20], &[3, 7], 4), 200);
        // 64 Mi elements of 8 bytes: must be split.
        let big = [1024u64, 1024, 64];
        assert_eq!(covered(&big, &[16, 1024, 64], 8), 1024 * 1024 * 64);
        assert!(slabs(&big, &[16, 1024, 64], 8).len() > 1);
        // A single row larger than the budget is split along inner dimensions.
        assert_eq!(
            covered(&[2, 8192, 1024], &[1, 64, 1024], 8),
            2 * 8192 * 1024
        );
        assert_eq!(slabs(&[], &[], 4).len(), 1);
        assert!(slabs(&[0, 5], &[1, 5], 4).is_empty());
        // Chunks of 100 rows, each larger than the budget together: whole chunks at a time
        // along the rows, split along the columns in chunk steps, never a row at a time.
        assert_eq!(covered(&[1000, 100_000], &[100, 1000], 8), 1000 * 100_000);
        assert!(slabs(&[1000, 100_000], &[100, 1000], 8)
            .iter()
            .all(|s| s.count[0] == 100 && s.count[1] % 1000 == 0));
        // One chunk larger than the budget is one slab.
        let one = slabs(&[3000, 3000], &[3000, 3000], 8);
        assert_eq!(one.len(), 1, "{one:?}");
        assert_eq!(covered(&[3000, 3000], &[3000, 3000], 8), 9_000_000);
        // Uneven edges: every element once.
        assert_eq!(covered(&[7, 2049, 5], &[3, 1000, 2], 8), 7 * 2049 * 5);
    }

    /// A zlib+shuffle int variable (5, 3) in chunks (2, 2), values 0..15, with chunk (1, 0)
    /// never written; returns its location.
    fn source(dir: &std::path::Path) -> Location {
        use crate::create::VarOptions;
        use crate::model::NcType;
        let loc = Location::parse(dir.join("src.file").to_str().unwrap()).unwrap();
        let mut w = DatasetWriter::create(&loc, CreateOptions::default()).unwrap();
        let t = w.add_dim(Dataset::ROOT, "t", 0, true).unwrap();
        let x = w.add_dim(Dataset::ROOT, "x", 3, false).unwrap();
        let opts = VarOptions {
            chunks: Some(vec![2, 2]),
            codecs: Codecs::parse("shuffle,zlib:1").unwrap(),
            ..Default::default()
        };
        let v = w
            .add_var(Dataset::ROOT, "v", NcType::Int, &[t, x], opts)
            .unwrap();
        let ints = |r: std::ops::Range<i32>| -> Vec<u8> { r.flat_map(i32::to_le_bytes).collect() };
        let rows = |start, count| Hyperslab {
            start: vec![start, 0],
            count: vec![count, 3],
            stride: vec![1, 1],
        };
        w.write(v, &rows(0, 2), &ints(0..6)).unwrap();
        w.write(v, &rows(4, 1), &ints(12..15)).unwrap();
        w.close().unwrap();
        loc
    }

    #[test]
    fn identical_encodings_copy_chunk_objects_as_they_are() {
        let tmp = tempfile::tempdir().unwrap();
        let src_loc = source(tmp.path());
        let src = OpenDataset::open(&src_loc.original, 0).unwrap();
        // Another dialect, the same chunk encoding.
        let dst = Location::parse(format!(
            "file://{}#mode=zarr,file",
            tmp.path().join("dst.zarr").display()
        ))
        .unwrap();
        let model = target_model(&src.model, &src.model.dims, None, &[], false).unwrap();
        copy_dataset(&src, model, &dst, CreateOptions::from_mode(&dst.mode), None).unwrap();
        let chunks = ["0.0", "0.1", "2.0", "2.1"];
        for key in chunks {
            let path = |ds: &str| tmp.path().join(ds).join("v").join(key);
            assert_eq!(
                std::fs::read(path("dst.zarr")).unwrap(),
                std::fs::read(path("src.file")).unwrap(),
                "chunk {key}"
            );
        }
        assert!(!tmp.path().join("dst.zarr/v/1.0").exists());
        let out = OpenDataset::open(&dst.original, 0).unwrap();
        let v = out.model.find_var("v").unwrap();
        let mut got = vec![0u8; 15 * 4];
        out.engine
            .read(&out.model, v, &Hyperslab::whole(&[5, 3]), &mut got)
            .unwrap();
        let got: Vec<i32> = got
            .chunks(4)
            .map(|b| i32::from_le_bytes(b.try_into().unwrap()))
            .collect();
        // netCDF's default int fill value, NC_FILL_INT.
        let want: Vec<i32> = (0..6).chain([-2147483647; 6]).chain(12..15).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_damaged_source_chunk_fails_the_copy_and_leaves_no_target() {
        let tmp = tempfile::tempdir().unwrap();
        let src_loc = source(tmp.path());
        std::fs::write(tmp.path().join("src.file/v/2.1"), b"not zlib").unwrap();
        let src = OpenDataset::open(&src_loc.original, 0).unwrap();
        let dst = Location::parse(tmp.path().join("dst.file").to_str().unwrap()).unwrap();
        let model = target_model(&src.model, &src.model.dims, None, &[], false).unwrap();
        let err = copy_dataset(&src, model, &dst, CreateOptions::default(), None).unwrap_err();
        assert!(err.to_string().contains("v/2.1"), "{err}");
        let left: Vec<_> = std::fs::read_dir(tmp.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["src.file"]);
    }

    /// The model `copy -c SPECS` makes of `ds` (no `-V`, no `-u`).
    fn chunked(ds: &Dataset, specs: &[&str]) -> Result<Dataset> {
        let specs: Vec<String> = specs.iter().map(|s| s.to_string()).collect();
        target_model(ds, &ds.dims, None, &chunk_plan(ds, &specs)?, false)
    }

    /// A variable of `ds` in `group` over `dims`, with chunks `chunks`.
    fn add_chunked(ds: &mut Dataset, group: GroupId, name: &str, dims: &[DimId], chunks: &[u64]) {
        ds.add_var(Variable {
            name: name.into(),
            group,
            nctype: NcType::Double,
            dims: dims.to_vec(),
            string_width: 0,
            attrs: Vec::new(),
            storage: crate::model::VarStorage {
                chunks: chunks.to_vec(),
                ..Default::default()
            },
        });
    }

    /// The chunks of variable `fqn` of `ds`.
    fn chunks_of(ds: &Dataset, fqn: &str) -> Vec<u64> {
        ds.var(ds.find_var(fqn).unwrap()).storage.chunks.clone()
    }

    #[test]
    fn chunk_specs_in_nccopy_forms() {
        let s = parse_chunk_specs(
            "--chunks",
            &["time/1,lat/10".into(), "v:2,3".into()],
            DimensionLists::LastCounts,
        )
        .unwrap();
        assert_eq!(
            s,
            vec![
                ChunkSpec::Dim("time".into(), Some(1)),
                ChunkSpec::Dim("lat".into(), Some(10)),
                ChunkSpec::Var("v".into(), vec![2, 3]),
            ]
        );
        // `dim/`: the whole dimension.
        let s =
            parse_chunk_specs("--chunks", &["t/,w/5".into()], DimensionLists::LastCounts).unwrap();
        assert_eq!(
            s,
            vec![
                ChunkSpec::Dim("t".into(), None),
                ChunkSpec::Dim("w".into(), Some(5)),
            ]
        );
        for bad in ["lat", "v:2,x", "/5", "t/x", "t/-x", "v:--1"] {
            match parse_chunk_specs("--chunks", &[bad.into()], DimensionLists::LastCounts) {
                Err(Error::Usage(m)) => assert!(m.contains("dim/ for the whole"), "{bad}: {m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        // Lengths of the right form out of range: exit status 1, as `get --stride 0`. A
        // negative number is one.
        for bad in [
            "v:0",
            "t/0",
            "t/-1",
            "v:-1",
            "v:2,-5",
            "t/-0",
            "v:2,99999999999999999999",
            "t/99999999999999999999",
        ] {
            match parse_chunk_specs("--chunks", &[bad.into()], DimensionLists::LastCounts) {
                Err(Error::Invalid(m)) => assert!(m.contains("is not from 1 to"), "{bad}: {m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        // nccopy's unchunked storage: NCZarr has none.
        for unchunked in ["/", "v:", "v:contiguous", "v:compact", "a:b:"] {
            match parse_chunk_specs("--chunks", &[unchunked.into()], DimensionLists::LastCounts) {
                Err(Error::Unsupported(m)) => {
                    assert!(m.contains("NCZarr does not have"), "{unchunked}: {m}")
                }
                other => panic!("{unchunked}: {other:?}"),
            }
        }
        // Names may hold `:`.
        let s = parse_chunk_specs(
            "--shards",
            &["time:count/3,x/2".into(), "a:b:4,5".into()],
            DimensionLists::AddUp,
        )
        .unwrap();
        assert_eq!(
            s,
            vec![
                ChunkSpec::Dim("time:count".into(), Some(3)),
                ChunkSpec::Dim("x".into(), Some(2)),
                ChunkSpec::Var("a:b".into(), vec![4, 5]),
            ]
        );
    }

    /// nccopy reads `dim/n` with `strtoll(n, .., 0)` (Debian's 4.9.0: `x/010` chunks by 8,
    /// `x/0x10` by 16, `x/08` fails) and `var:n,m` with `sscanf("%lu")`, in decimal (`v:010`
    /// is 10).
    #[test]
    fn dimension_lengths_are_read_as_c_integers_and_variable_lengths_in_decimal() {
        let parse =
            |spec: &str| parse_chunk_specs("--chunks", &[spec.into()], DimensionLists::LastCounts);
        for (spec, n) in [("x/010", 8), ("x/0x10", 16), ("x/0X1f", 31), ("x/10", 10)] {
            assert_eq!(parse(spec).unwrap(), [ChunkSpec::Dim("x".into(), Some(n))]);
        }
        assert_eq!(
            parse("v:010,0010").unwrap(),
            [ChunkSpec::Var("v".into(), vec![10, 10])]
        );
        for bad in ["x/08", "x/0x", "x/0xg", "v:0x10"] {
            match parse(bad) {
                Err(Error::Usage(m)) => assert!(m.contains(bad), "{bad}: {m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        for bad in ["x/00", "x/0x0", "x/0x10000000000000000"] {
            match parse(bad) {
                Err(Error::Invalid(m)) => assert!(m.contains("is not from 1 to"), "{bad}: {m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }

    /// `--shards var:n,m` must give one length per dimension, as `-c var:n,m` must (nccopy
    /// refuses `-c z:1` on a scalar): on a 0-d variable any length is refused, not ignored.
    #[test]
    fn shards_of_a_variable_fit_its_rank_scalars_included() {
        let mut ds = Dataset::new();
        let x = ds.add_dim(Dataset::ROOT, "x", 4, false);
        add_chunked(&mut ds, Dataset::ROOT, "a", &[x], &[2]);
        add_chunked(&mut ds, Dataset::ROOT, "z", &[], &[]);
        for (spec, rank) in [("z:1", 0), ("z:1,2", 0), ("/z:1", 0), ("a:4,4", 1)] {
            match shard_model(&mut ds.clone(), &[spec.to_string()]) {
                Err(Error::Invalid(m)) => {
                    assert!(m.contains(&format!("does not fit {rank} dimension")), "{m}")
                }
                other => panic!("{spec}: {other:?}"),
            }
        }
    }

    /// A name given twice is refused rather than one of its lengths guessed (nccopy takes
    /// the first).
    #[test]
    fn chunk_specs_name_each_thing_once() {
        for (specs, repeats) in [
            (vec!["x/1,x/3"], DimensionLists::LastCounts),
            (vec!["v:1", "v:2"], DimensionLists::LastCounts),
            (vec!["x/1", "x/3"], DimensionLists::AddUp),
            (vec!["x/1,y/2", "y/2"], DimensionLists::AddUp),
        ] {
            let specs: Vec<String> = specs.into_iter().map(String::from).collect();
            match parse_chunk_specs("--chunks", &specs, repeats) {
                Err(Error::Invalid(m)) => assert!(m.contains("more than once"), "{m}"),
                other => panic!("{specs:?}: {other:?}"),
            }
        }
        let specs = ["x/1".to_string(), "x:2".to_string()];
        assert_eq!(
            parse_chunk_specs("--chunks", &specs, DimensionLists::LastCounts)
                .unwrap()
                .len(),
            2
        );
    }

    /// Debian's nccopy 4.9.0 keeps the dimensions of the last `-c` that gives any
    /// (`-c t/2 -c x/5` chunks `r(t, x)` as `3, 5` from `3, 7`), while those giving a
    /// variable's add up.
    #[test]
    fn the_last_chunks_argument_of_dimensions_counts() {
        let specs: Vec<String> = ["t/2", "r:4,4", "x/5,y/", "q:1,1"]
            .into_iter()
            .map(String::from)
            .collect();
        let dims = |repeats| {
            parse_chunk_specs("--chunks", &specs, repeats)
                .unwrap()
                .into_iter()
                .map(|s| match s {
                    ChunkSpec::Dim(d, n) => format!("{d}/{n:?}"),
                    ChunkSpec::Var(v, n) => format!("{v}:{n:?}"),
                })
                .collect::<Vec<_>>()
        };
        assert_eq!(
            dims(DimensionLists::LastCounts),
            ["r:[4, 4]", "x/Some(5)", "y/None", "q:[1, 1]"]
        );
        assert_eq!(
            dims(DimensionLists::AddUp),
            ["t/Some(2)", "r:[4, 4]", "x/Some(5)", "y/None", "q:[1, 1]"]
        );
        // A dimension named again in a later argument is no longer twice.
        let specs = ["x/1".to_string(), "x/3".to_string()];
        assert!(parse_chunk_specs("--chunks", &specs, DimensionLists::LastCounts).is_ok());
    }

    /// A chunk longer than a fixed dimension is refused in both forms, as Debian's nccopy
    /// refuses `-c x/1000` and `-c a:1000,1000` for `a(y = 200, x = 100)` ("Bad chunk
    /// sizes"); along an unlimited dimension any length goes.
    #[test]
    fn chunks_longer_than_a_fixed_dimension_are_refused() {
        let mut ds = Dataset::new();
        let t = ds.add_dim(Dataset::ROOT, "t", 3, true);
        let y = ds.add_dim(Dataset::ROOT, "y", 200, false);
        let x = ds.add_dim(Dataset::ROOT, "x", 100, false);
        for (name, dims) in [("a", vec![y, x]), ("r", vec![t, x])] {
            ds.add_var(Variable {
                name: name.into(),
                group: Dataset::ROOT,
                nctype: NcType::Int,
                dims,
                string_width: 0,
                attrs: Vec::new(),
                storage: Default::default(),
            });
        }
        for bad in ["x/1000", "x/101", "a:1000,1000", "a:201,100", "r:5,101"] {
            match chunked(&ds, &[bad]) {
                Err(Error::Invalid(m)) => assert!(m.contains("at most"), "{bad}: {m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        for (ok, var, chunks) in [
            ("x/100", 0, vec![200, 100]),
            ("a:200,100", 0, vec![200, 100]),
            ("t/5", 1, vec![5, 100]),
            ("r:50,100", 1, vec![50, 100]),
        ] {
            let m = chunked(&ds, &[ok]).unwrap();
            assert_eq!(m.vars[var].storage.chunks, chunks, "{ok}");
        }
    }

    #[test]
    fn chunk_specs_must_name_something() {
        let mut ds = Dataset::new();
        let x = ds.add_dim(Dataset::ROOT, "x", 8, false);
        let g = ds.add_group(Dataset::ROOT, "g");
        let y = ds.add_dim(g, "y", 4, false);
        for (group, name, dims) in [(Dataset::ROOT, "v", vec![x]), (g, "w", vec![x, y])] {
            ds.add_var(Variable {
                name: name.into(),
                group,
                nctype: NcType::Int,
                dims,
                string_width: 0,
                attrs: Vec::new(),
                storage: Default::default(),
            });
        }
        for (ok, var, chunks) in [
            ("x/2", 0, vec![2]),
            ("/g/y/2", 1, vec![8, 2]),
            ("v:4", 0, vec![4]),
            ("g/w:2,3", 1, vec![2, 3]),
            ("/g/w:2,3", 1, vec![2, 3]),
        ] {
            let m = chunked(&ds, &[ok]).unwrap();
            assert_eq!(m.vars[var].storage.chunks, chunks, "{ok}");
        }
        for bad in ["X/2", "vv:2", "g/v:2", "/y/2", "g/y/2"] {
            match chunked(&ds, &[bad]) {
                Err(Error::NotFound(m)) => assert!(m.contains("--chunks"), "{m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
        // As nccopy ("Invalid dimension ID or name"): a plain name is a root dimension.
        match chunked(&ds, &["y/2"]) {
            Err(Error::NotFound(m)) => assert!(m.contains("full name, such as /g/y"), "{m}"),
            other => panic!("y/2: {other:?}"),
        }
    }

    /// Root `t` (unlimited, 30) and `x` (40), group `g` with its own `t` (20) and `x` (3), and
    /// group `g2` whose `k` uses the root's `t` and `x`, as nccopy was checked on.
    fn shadowed() -> Dataset {
        let mut ds = Dataset::new();
        let t = ds.add_dim(Dataset::ROOT, "t", 30, true);
        let x = ds.add_dim(Dataset::ROOT, "x", 40, false);
        add_chunked(&mut ds, Dataset::ROOT, "r", &[t, x], &[3, 7]);
        let g = ds.add_group(Dataset::ROOT, "g");
        let gt = ds.add_dim(g, "t", 20, true);
        let gx = ds.add_dim(g, "x", 3, false);
        add_chunked(&mut ds, g, "b", &[gt, gx], &[2, 3]);
        let g2 = ds.add_group(Dataset::ROOT, "g2");
        add_chunked(&mut ds, g2, "k", &[t, x], &[2, 5]);
        ds
    }

    /// Debian's nccopy 4.9.0 on `shadowed`: `-c t/5` gives r 5,7, b 2,3, k 5,5; `-c x/10` r
    /// 3,10, b 2,3; `-c /g/t/5` b 5,3 alone; `-c t/` r 30,7 and k 30,5.
    #[test]
    fn a_plain_dimension_name_is_the_root_groups() {
        let ds = shadowed();
        for (spec, r, b, k) in [
            ("t/5", [5, 7], [2, 3], [5, 5]),
            ("x/10", [3, 10], [2, 3], [2, 10]),
            ("/g/t/5", [3, 7], [5, 3], [2, 5]),
            ("/x/10", [3, 10], [2, 3], [2, 10]),
            ("t/", [30, 7], [2, 3], [30, 5]),
            ("/g/t/", [3, 7], [20, 3], [2, 5]),
        ] {
            let m = chunked(&ds, &[spec]).unwrap();
            assert_eq!(chunks_of(&m, "r"), r, "{spec}");
            assert_eq!(chunks_of(&m, "/g/b"), b, "{spec}");
            assert_eq!(chunks_of(&m, "/g2/k"), k, "{spec}");
        }
    }

    /// nccopy's `-c t/` along an empty dimension leaves its chunks as they were.
    #[test]
    fn whole_length_of_an_empty_dimension_keeps_the_chunks() {
        let mut ds = Dataset::new();
        let e = ds.add_dim(Dataset::ROOT, "e", 0, true);
        let x = ds.add_dim(Dataset::ROOT, "x", 40, false);
        add_chunked(&mut ds, Dataset::ROOT, "ee", &[e, x], &[3, 7]);
        assert_eq!(chunks_of(&chunked(&ds, &["e/"]).unwrap(), "ee"), [3, 7]);
        assert_eq!(chunks_of(&chunked(&ds, &["e/,x/"]).unwrap(), "ee"), [3, 40]);
    }

    /// nccopy(1): per-variable chunking "takes precedence over any per-dimension chunking";
    /// nccopy 4.9.0 gives `u` 10,10 for `-c u:10,10 -c t/2` and `-c t/2 -c u:10,10`.
    #[test]
    fn per_variable_chunks_win_over_a_dimensions_in_any_order() {
        let ds = shadowed();
        for specs in [["r:10,10", "t/2"], ["t/2", "r:10,10"]] {
            let m = chunked(&ds, &specs).unwrap();
            assert_eq!(chunks_of(&m, "r"), [10, 10], "{specs:?}");
            assert_eq!(chunks_of(&m, "/g2/k"), [2, 5], "{specs:?}");
        }
    }

    /// Under `-u` a chunk is checked against the now fixed dimension: nccopy refuses `-u -c
    /// t/31` and `-u -c r:31,5` where `t` has 30 records; without `-u` both go.
    #[test]
    fn fixed_unlimited_dimensions_bound_the_chunks() {
        let ds = shadowed();
        let fixed = target_dims(&ds, None, false, true);
        for spec in ["t/31", "r:31,5"] {
            let plan = chunk_plan(&ds, &[spec.to_string()]).unwrap();
            match target_model(&ds, &fixed, None, &plan, false) {
                Err(Error::Invalid(m)) => assert!(m.contains("at most 30"), "{spec}: {m}"),
                other => panic!("{spec}: {other:?}"),
            }
            assert!(chunked(&ds, &[spec]).is_ok(), "{spec}");
        }
        let plan = chunk_plan(&ds, &["t/30".to_string()]).unwrap();
        let m = target_model(&ds, &fixed, None, &plan, false).unwrap();
        assert_eq!(chunks_of(&m, "r"), [30, 7]);
    }

    /// `-u` with a subset: Debian's nccopy 4.9.0 `-u -V x_only` (and `-v`, `-g`, `-G` that
    /// copy nothing along `t`) makes `t` a fixed dimension of its 30 records, not an empty
    /// unlimited one as without `-u`; an empty unlimited dimension stays unlimited.
    #[test]
    fn fix_unlimited_keeps_the_source_length_of_dimensions_nothing_is_copied_along() {
        let mut ds = shadowed();
        let x = ds.find_dim("/x").unwrap();
        let e = ds.add_dim(Dataset::ROOT, "e", 0, true);
        add_chunked(&mut ds, Dataset::ROOT, "x_only", &[x], &[40]);
        let x_only = ds.find_var("x_only").unwrap();
        let narrowed = ds.with_vars(&[x_only]);
        let t = ds.find_dim("/t").unwrap();
        let gt = ds.find_dim("/g/t").unwrap();
        for (model, data_vars, subset) in
            [(&narrowed, None, true), (&ds, Some(vec![x_only]), false)]
        {
            let fixed = target_dims(model, data_vars.as_deref(), subset, true);
            for (dim, len) in [(t, 30), (gt, 20)] {
                assert_eq!((fixed[dim.0].len, fixed[dim.0].unlimited), (len, false));
            }
            assert_eq!((fixed[e.0].len, fixed[e.0].unlimited), (0, true));
            let kept = target_dims(model, data_vars.as_deref(), subset, false);
            for dim in [t, gt, e] {
                assert_eq!((kept[dim.0].len, kept[dim.0].unlimited), (0, true));
            }
        }
    }

    /// nccopy 4.9.0 takes `-V r -c /g/b:4,3` (and copies `r` alone), but checks the lengths
    /// for `/g/b` even so: `-V r -c /g/b:4` ("Invalid argument") and `-V r -c /g/b:4,30`
    /// ("Bad chunk sizes") fail.
    #[test]
    fn a_variable_left_out_may_be_named_with_lengths_that_fit_it() {
        let ds = shadowed();
        let r = ds.find_var("r").unwrap();
        let only_r = ds.with_vars(&[r]);
        let plan = chunk_plan(&ds, &["/g/b:4,3".to_string()]).unwrap();
        let m = target_model(&only_r, &only_r.dims, None, &plan, false).unwrap();
        assert_eq!(chunks_of(&m, "r"), [3, 7]);
        for bad in ["/g/b:4", "/g/b:4,30"] {
            match chunk_plan(&ds, &[bad.to_string()]) {
                Err(Error::Invalid(m)) => assert!(m.contains("/g/b"), "{bad}: {m}"),
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
