//! `nczarrfs gen`: ncgen for NCZarr. Parses a CDL file, creates the dataset and writes its
//! data.
//!
//! Without `-o`, the dataset is written where ncgen writes: in the working directory, named
//! after the CDL file (`x.cdl` → `x.file`, a directory store; `x.zip` with `--mode zip`).
//! The dataset is built in a hidden sibling and renamed into place when complete, so a
//! failure (or a kill) never leaves a partial dataset at the target.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::cdl::parser::{
    cdl_text, parse_cdl_file, parse_cdl_owned, Endianness, ParsedCdl, StorageLayout,
};
use crate::chunk::Hyperslab;
use crate::create::{
    write_for_netcdf_c, Codecs, CreateOptions, DatasetWriter, Staging, NETCDF_MAXSTRLEN,
};
use crate::error::quoted;
use crate::location::Location;
use crate::meta::writer::default_dtype;
use crate::model::quantize::{Quantize, QuantizeMode};
use crate::model::{AttrValue, Attribute, ByteOrder, Dataset, NcType, VarId};
use crate::{Error, Result};

/// Arguments of `gen`.
#[derive(Debug, clap::Args)]
pub struct GenArgs {
    /// Output location (path or URL); default: `NAME.file` in the working directory (`NAME.zip`
    /// with `-k zip`, `NAME.zarr` with `-k zarr`), NAME being the CDL file's name without its
    /// last extension (`x.cdl`, `x.txt`: `x`), or for standard input the name on its
    /// `netcdf NAME` line, as ncgen names its `.nc` file. Given more than once, the last
    /// counts, as in ncgen.
    #[arg(
        short = 'o',
        long = "output",
        value_name = "LOCATION",
        overrides_with = "output"
    )]
    pub output: Option<std::ffi::OsString>,
    /// The kind of dataset: `-k` and ncgen's format flags.
    #[command(flatten)]
    pub kind: super::KindArgs,
    /// Chunk key separator: `.` or `/` (default: `.` on Zarr v2, as netcdf-c and zarr-python
    /// write; `/` on Zarr v3, whose `default` chunk key encoding takes either).
    #[arg(long, value_name = "SEP")]
    pub dimension_separator: Option<char>,
    /// No fill for every variable (`ncgen -x`): `fill_value` is `null`, a `_FillValue` stays an
    /// attribute only, and cells never written read as zeros; as ncgen does, the fill is
    /// written where a data section stops short. A variable's own `_NoFill = "false"` keeps
    /// its fill. It may be repeated, as ncgen's.
    #[arg(short = 'x', long = "no-fill", overrides_with = "no_fill")]
    pub no_fill: bool,
    /// Write for the netcdf-c release VERSION (such as 4.9.2), in the NCZarr layout it reads:
    /// releases before 4.9.3 read only their own (4.8.1 to 4.9.0 upper-case `_NCZARR_*` keys,
    /// 4.9.1 and 4.9.2 lower-case ones, in `.zgroup` and `.zarray`). They have no unlimited
    /// dimensions, nor 4.9.0 and before strings or scalars: such a dataset is refused.
    /// Default: the layout of 4.9.3 and later.
    #[arg(long = "for-netcdf-c", value_name = "VERSION")]
    pub for_netcdf_c: Option<String>,
    /// Binary output, that is the dataset, which is what `gen` writes (`ncgen -b`).
    #[arg(short = 'b', conflicts_with = "language")]
    pub binary: bool,
    /// Output language: `b` (binary: the dataset), the only one `gen` writes (`ncgen -l b`;
    /// ncgen's `c`, `f77` and `java` programs are not written).
    #[arg(short = 'l', value_name = "b", value_parser = parse_language)]
    pub language: Option<String>,
    /// The CDL file (`-`, or none, for standard input, as ncgen reads it).
    pub cdl: Option<PathBuf>,
}

/// ncgen's `-l` languages: only `b`, the dataset itself, is written; its program
/// languages are refused by name.
fn parse_language(text: &str) -> std::result::Result<String, String> {
    match text {
        "b" => Ok(text.to_string()),
        "c" | "C" | "f77" | "fortran77" | "j" | "java" => Err(format!(
            "ncgen's -l {text} writes a program that would make the dataset; gen makes the \
             dataset itself, as with -l b"
        )),
        _ => Err(format!(
            "output language {} is not b, the only one gen writes (ncgen also has c, f77 \
             and java, for programs)",
            quoted(text)
        )),
    }
}

/// Runs `gen`.
pub fn run(args: GenArgs) -> Result<i32> {
    let cdl = args.cdl.unwrap_or_else(|| PathBuf::from("-"));
    let parsed = if cdl.as_os_str() == "-" {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut std::io::stdin(), &mut bytes)
            .map_err(|e| Error::io("-", e))?;
        parse_cdl_owned(cdl_text(bytes), "-")?
    } else {
        parse_cdl_file(&cdl)?
    };
    for warning in &parsed.warnings {
        log::warn!("{warning}");
    }
    let words = args.kind.mode_words()?;
    let has = |word: &str| words.as_ref().is_some_and(|w| w.has(word));
    let (zarr, zip) = (has("zarr"), has("zip"));
    let output = match &args.output {
        Some(o) => o.clone(),
        None => default_output(&cdl, &parsed.name, zarr, zip),
    };
    super::refuse_standard_output(&output)?;
    let mut location = Location::parse(&output)?;
    if let Some(w) = &words {
        w.apply_to(&mut location)?;
    }
    if let Some(separator) = args.dimension_separator.filter(|s| !matches!(s, '.' | '/')) {
        return Err(Error::Usage(format!(
            "dimension separator must be '.' or '/', not {}",
            quoted(&separator.to_string())
        )));
    }
    let mut opts = CreateOptions::from_mode(&location.mode);
    opts.separator = args.dimension_separator;
    if let Some(version) = &args.for_netcdf_c {
        write_for_netcdf_c(&mut opts, version)?;
    }
    generate(parsed, &location, opts, args.no_fill)?;
    Ok(0)
}

/// ncgen's output name: the CDL file's name without its last extension (the `netcdf NAME`
/// for standard input). The file's name is kept byte for byte, UTF-8 or not, as ncgen keeps it.
fn default_output(cdl: &Path, name: &str, zarr: bool, zip: bool) -> OsString {
    let mut output = match cdl.as_os_str() == "-" {
        true => OsString::from(name),
        false => cdl.file_stem().map(OsStr::to_os_string).unwrap_or_default(),
    };
    output.push(match (zip, zarr) {
        (true, _) => ".zip",
        (false, true) => ".zarr",
        (false, false) => ".file",
    });
    output
}

/// Creates the dataset described by `parsed` at `location`: built in a staging place and
/// published when complete; on any error nothing is left behind. `no_fill`: every variable
/// without its own `_NoFill` has no fill.
pub fn generate(
    parsed: ParsedCdl,
    location: &Location,
    opts: CreateOptions,
    no_fill: bool,
) -> Result<()> {
    let (mut model, data) = prepare(parsed, no_fill)?;
    if opts.dialect != crate::meta::writer::Dialect::NcZarr && opts.zarr_version == 2 {
        // A variable without data keeps netCDF's fill, as netcdf-c writes it: all of it is
        // fill, and writing that out (however large it is declared) would mean nothing more.
        for (v, values) in model.vars.iter_mut().zip(&data) {
            if values.is_some() {
                super::without_default_fill_in_zarr_v2(v);
            }
        }
    }
    crate::create::check_key_names(&model, opts.zarr_version)?;
    let staging = Staging::new(location)?;
    match write_all(&staging, opts, model, data) {
        Ok(()) => staging.publish(),
        Err(e) => {
            staging.abandon();
            Err(e)
        }
    }
}

fn write_all(
    staging: &Staging,
    opts: CreateOptions,
    model: Dataset,
    data: Vec<Option<Vec<u8>>>,
) -> Result<()> {
    let mut w = staging.create_writer(opts, model)?;
    for (i, values) in data.into_iter().enumerate() {
        // A data section (even one of `_` only, which leaves no values) was given.
        let Some(values) = values else { continue };
        let var = VarId(i);
        let shape = w.model().var_shape(var);
        if shape.contains(&0) {
            continue;
        }
        // The values cover the first rows; the rest of the variable reads as fill.
        let mut slab = Hyperslab::whole(&shape);
        let row_bytes = crate::model::element_count(shape.get(1..).unwrap_or_default())
            .unwrap_or(u64::MAX)
            .saturating_mul(w.model().var(var).element_size() as u64)
            .max(1);
        if let Some(rows) = slab.count.first_mut() {
            *rows = values.len() as u64 / row_bytes;
        }
        if !values.is_empty() {
            w.write(var, &slab, &values)?;
        }
        if let Some(given) = slab.count.first().copied() {
            pad_without_fill(&mut w, var, &shape, given)?;
        }
    }
    w.close()
}

/// The most fill bytes written at once.
const FILL_BATCH_BYTES: u64 = 16 << 20;

/// Writes the fill into the rows after the `given` ones of a variable without fill (`-x`, or
/// a pure Zarr v2 variable without `_FillValue`), as ncgen does: there they would read as
/// zeros, while the CDL's data section, short of them, means the fill. Debian's ncgen -x writes every chunk of such a variable to NCZarr, and
/// every record up to the dataset's last to a classic file; a variable without data gets
/// nothing, and reads as zeros. The fill goes out in slabs of at most [`FILL_BATCH_BYTES`]
/// (one element at least), however long a row is.
fn pad_without_fill(w: &mut DatasetWriter, var: VarId, shape: &[u64], given: u64) -> Result<()> {
    let model = w.model();
    let v = model.var(var);
    if v.storage.fill_value.is_some() || shape.is_empty() || given >= shape[0] {
        return Ok(());
    }
    let size = v.element_size() as u64;
    let mut cell = v
        .attr("_FillValue")
        .and_then(|a| crate::meta::fill_from_attr(&a.value, v.nctype, size as usize))
        .unwrap_or_else(|| v.nctype.default_fill());
    cell.resize(size as usize, 0);
    // Dimensions `whole..` are whole in every slab, dimension `whole - 1` gets a run of
    // indices, the ones before it one index each.
    let mut whole = shape.len();
    let mut inner = size;
    while whole > 1 && inner.saturating_mul(shape[whole - 1]) <= FILL_BATCH_BYTES {
        whole -= 1;
        inner *= shape[whole];
    }
    let run = (FILL_BATCH_BYTES / inner).max(1);
    let last = whole - 1;
    let mut index = vec![0u64; whole];
    index[0] = given;
    loop {
        let mut slab = Hyperslab::whole(shape);
        slab.start[..whole].copy_from_slice(&index);
        slab.count[..whole].fill(1);
        slab.count[last] = run.min(shape[last] - index[last]);
        let cells = slab.count[last] * (inner / size);
        w.write(var, &slab, &cell.repeat(cells as usize))?;
        index[last] += slab.count[last];
        let mut d = last;
        while index[d] >= shape[d] {
            if d == 0 {
                return Ok(());
            }
            index[d] = 0;
            d -= 1;
            index[d] += 1;
        }
    }
}

/// The model with ncgen's special attributes turned into storage settings, and the data.
fn prepare(parsed: ParsedCdl, no_fill: bool) -> Result<(Dataset, Vec<Option<Vec<u8>>>)> {
    let ParsedCdl {
        mut dataset,
        vars,
        name: _,
        globals: _,
        warnings: _,
    } = parsed;
    let default_maxstrlen = attr_int(
        &dataset.group(Dataset::ROOT).attrs,
        "_nczarr_default_maxstrlen",
    );
    let mut data = Vec::with_capacity(vars.len());
    for (i, extras) in vars.into_iter().enumerate() {
        let fqn = dataset.var_fqn(VarId(i));
        let shape = dataset.var_shape(VarId(i));
        let sp = extras.special;
        let mut values = extras.data;
        let var = &mut dataset.vars[i];
        if let Some((name, precision)) = &sp.quantize {
            // As ncgen: nc_def_var_quantize, which records the setting in the attribute
            // (after the others, where netcdf-c writes it) and quantizes the values written.
            let mode = QuantizeMode::from_attribute(name)
                .expect("the parser takes only the quantization attributes");
            let quantize = Quantize::new(mode, *precision, var.nctype)
                .map_err(|e| Error::Invalid(format!("{fqn}: {e}")))?;
            var.attrs.push(Attribute {
                name: name.clone(),
                value: quantize.attribute_value(),
            });
            if let Some(values) = values.as_mut() {
                let fill = var.attr("_FillValue").and_then(|a| {
                    crate::meta::fill_from_attr(&a.value, var.nctype, var.element_size())
                });
                quantize.apply(var.nctype, values, fill.as_deref());
            }
        }
        if let Some(chunks) = &sp.chunk_sizes {
            // One length per dimension (the parser's doing); a 0 is netcdf-c's default.
            var.storage.chunks = chunks.clone();
        }
        if matches!(
            sp.storage,
            Some(StorageLayout::Contiguous | StorageLayout::Compact)
        ) && sp.chunk_sizes.is_none()
        {
            // Zarr has no contiguous layout: one chunk holds the whole variable.
            var.storage.chunks = shape.iter().map(|n| (*n).max(1)).collect();
        }
        // `_Codecs` is the exact chain; `ncdump -s` prints it beside `_Shuffle`,
        // `_DeflateLevel`, `_Fletcher32` and `_Filter`, which then describe the same codecs.
        let chain = match &sp.codecs {
            Some(text) => Codecs::from_json(text)?.chain(),
            None => {
                let mut chain = Vec::new();
                if sp.shuffle == Some(true) {
                    chain.extend(Codecs::netcdf(None, true, false).chain());
                }
                if sp.fletcher32 == Some(true) {
                    chain.extend(Codecs::netcdf(None, false, true).chain());
                }
                if let Some(text) = &sp.filter {
                    chain.extend(
                        Codecs::from_hdf5_filter(text)
                            .map_err(|e| Error::Invalid(format!("{fqn}: _Filter: {e}")))?
                            .chain(),
                    );
                }
                if let Some(level) = sp.deflate_level.filter(|l| *l > 0) {
                    if level > 9 {
                        return Err(Error::Invalid(format!(
                            "{fqn}: _DeflateLevel {level} is not between 0 and 9"
                        )));
                    }
                    chain.extend(Codecs::netcdf(Some(level), false, false).chain());
                }
                chain
            }
        };
        var.storage.codecs = Codecs::from_chain(chain).spec();
        if sp.endianness == Some(Endianness::Big) {
            let mut dtype = default_dtype(var.nctype, var.string_width, Default::default());
            dtype.order = ByteOrder::Big;
            var.storage.dtype = Some(dtype);
        }
        // As netcdf-c stores a variable without fill: `fill_value: null`, beside whatever
        // `_FillValue` attribute it has.
        if sp.no_fill.unwrap_or(no_fill) {
            var.storage.fill_value = None;
        }
        if var.nctype == NcType::String {
            // A variable without data gets netcdf-c's default width, which `put` can fill.
            let width = attr_int(&var.attrs, "_nczarr_maxstrlen")
                .or(default_maxstrlen)
                .or(values.is_none().then_some(NETCDF_MAXSTRLEN));
            if let Some(w) = width.filter(|w| *w > 0) {
                if w > crate::model::MAX_STRING_WIDTH {
                    return Err(Error::Invalid(format!(
                        "{}: string width {w} is more than the {} bytes nczarrfs handles",
                        var.name,
                        crate::model::MAX_STRING_WIDTH
                    )));
                }
                let old = var.string_width;
                values = values.map(|v| rewidth(&v, old, w));
                if let Some(f) = &var.storage.fill_value {
                    var.storage.fill_value = Some(rewidth(f, old, w));
                }
                var.string_width = w;
            }
        }
        data.push(values);
    }
    Ok((dataset, data))
}

/// An integer attribute's first value.
fn attr_int(attrs: &[crate::model::Attribute], name: &str) -> Option<usize> {
    let a = attrs.iter().find(|a| a.name == name)?;
    let n: i128 = match &a.value {
        AttrValue::Byte(v) => (*v.first()?).into(),
        AttrValue::UByte(v) => (*v.first()?).into(),
        AttrValue::Short(v) => (*v.first()?).into(),
        AttrValue::UShort(v) => (*v.first()?).into(),
        AttrValue::Int(v) => (*v.first()?).into(),
        AttrValue::UInt(v) => (*v.first()?).into(),
        AttrValue::Int64(v) => (*v.first()?).into(),
        AttrValue::UInt64(v) => (*v.first()?).into(),
        _ => return None,
    };
    usize::try_from(n).ok()
}

/// Re-pads fixed-width strings from `old` to `new` bytes per element, truncating longer ones
/// as netcdf-c does with `_nczarr_maxstrlen`.
pub(super) fn rewidth(values: &[u8], old: usize, new: usize) -> Vec<u8> {
    if old == 0 {
        return values.to_vec();
    }
    let mut out = Vec::with_capacity(values.len() / old * new);
    for s in values.chunks(old) {
        let mut e = s[..s.len().min(new)].to_vec();
        e.resize(new, 0);
        out.extend_from_slice(&e);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_gen(args: &[&str]) -> std::result::Result<GenArgs, clap::Error> {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(["nczarrfs", "gen"].iter().chain(args).copied())?;
        match cli.command {
            crate::cli::Command::Gen(a) => Ok(a),
            other => panic!("parsed as {other:?}"),
        }
    }

    /// Debian's ncgen 4.9.0 takes `-b` and `-l b`, one of them once, and reads standard
    /// input when no file is named.
    #[test]
    fn ncgen_binary_output_options_and_standard_input_are_taken() {
        let a = parse_gen(&["-b", "-o", "R", "x.cdl"]).unwrap();
        assert_eq!(a.cdl.as_deref(), Some(Path::new("x.cdl")));
        assert!(parse_gen(&["-l", "b", "-o", "R", "x.cdl"]).is_ok());
        assert_eq!(parse_gen(&["-o", "R"]).unwrap().cdl, None);
        for refused in [
            &["-l", "c", "x.cdl"][..],
            &["-l", "java", "x.cdl"],
            &["-l", "binary", "x.cdl"],
            &["-b", "-l", "b", "x.cdl"],
            &["-b", "-b", "x.cdl"],
            &["-l", "b", "-l", "b", "x.cdl"],
        ] {
            let e = parse_gen(refused).unwrap_err();
            assert_eq!(e.exit_code(), 2, "{refused:?}");
        }
    }

    /// Debian's ncgen 4.9.0 takes `-x -x`, and of `-o A -o B` writes B only.
    #[test]
    fn no_fill_and_output_may_be_repeated_as_in_ncgen() {
        let a = parse_gen(&["-x", "-x", "-o", "A", "-o", "B", "x.cdl"]).unwrap();
        assert!(a.no_fill);
        assert_eq!(a.output.as_deref(), Some(OsStr::new("B")));
        let a = parse_gen(&["--no-fill", "-x", "--output", "A", "-o", "B", "x.cdl"]).unwrap();
        assert!(a.no_fill);
        assert_eq!(a.output.as_deref(), Some(OsStr::new("B")));
    }

    #[test]
    fn output_named_after_the_cdl_file_like_ncgen() {
        // Debian ncgen 4.9: `ncgen -k nc4 sub/y.cdl` for `netcdf foo {` writes ./y.nc.
        assert_eq!(
            default_output(Path::new("sub/y.cdl"), "foo", false, false),
            "y.file"
        );
        assert_eq!(
            default_output(Path::new("y.cdl"), "foo", true, false),
            "y.zarr"
        );
        assert_eq!(
            default_output(Path::new("-"), "foo", false, true),
            "foo.zip"
        );
        assert_eq!(
            default_output(Path::new("my.data.cdl"), "foo", false, false),
            "my.data.file"
        );
        // Debian ncgen 4.9: `ncgen -k nc4 $'d\xff.cdl'` writes $'d\xff.nc'.
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(
            default_output(
                Path::new(OsStr::from_bytes(b"sub/d\xff.cdl")),
                "foo",
                false,
                false
            ),
            OsStr::from_bytes(b"d\xff.file")
        );
    }

    /// Rows longer than a batch of fill are written in pieces, with every element reached.
    #[test]
    fn long_rows_without_fill_are_padded_in_pieces() {
        let rows = 3_000_000u64;
        let text = format!(
            "netcdf big {{\ndimensions:\n a = 2 ;\n b = 3 ;\n c = {rows} ;\nvariables:\n \
             short v(a, b, c) ;\n  v:_FillValue = 7s ;\n  v:_ChunkSizes = 1, 2, 1000000 ;\n\
             data:\n v = _ ;\n}}\n"
        );
        let tmp = tempfile::tempdir().unwrap();
        let location = Location::parse(tmp.path().join("big.file")).unwrap();
        let parsed = crate::cdl::parser::parse_cdl(&text, "big.cdl").unwrap();
        generate(parsed, &location, CreateOptions::default(), true).unwrap();
        let map = crate::zmap::open(&location, false).unwrap();
        let ds = crate::meta::read_dataset(map.as_ref(), &location.mode).unwrap();
        let v = ds.find_var("v").unwrap();
        assert_eq!(ds.var(v).storage.fill_value, None);
        let engine = crate::chunk::ChunkEngine::new(map, 1 << 20);
        let shape = [2, 3, rows];
        let mut out = vec![0u8; (6 * rows * 2) as usize];
        engine
            .read(&ds, v, &Hyperslab::whole(&shape), &mut out)
            .unwrap();
        assert!(out.chunks(2).all(|e| i16::from_ne_bytes([e[0], e[1]]) == 7));
    }

    #[test]
    fn strings_rewidth_truncates_and_pads() {
        assert_eq!(rewidth(b"0123456789", 10, 4), b"0123");
        assert_eq!(rewidth(b"ab\0cd\0", 3, 4), b"ab\0\0cd\0\0");
    }
}
