//! `nczarrfs dump`: ncdump's output for an NCZarr or Zarr dataset.

use std::io::Write;

use crate::cdl::writer::{dump, Annotate, DumpOptions};
use crate::dataset::{OpenDataset, DEFAULT_CACHE_BYTES};
use crate::error::quoted;
use crate::{Error, Result};

/// Arguments of `dump`.
#[derive(Debug, clap::Args)]
#[command(disable_help_flag = true)]
pub struct DumpArgs {
    /// Print help (`-h` means header only, as in ncdump).
    #[arg(long, action = clap::ArgAction::Help)]
    pub help: Option<bool>,
    /// Header information only, no data (`ncdump -h`).
    #[arg(short = 'h', long = "header")]
    pub header_only: bool,
    /// Data only for coordinate variables (`ncdump -c`).
    #[arg(short = 'c', long = "coords")]
    pub coords_only: bool,
    /// Data only for these variables: names, `g/v` or full names `/g/v`, comma-separated.
    /// Repeated, the lists add up (ncdump keeps only the last).
    #[arg(short = 'v', long = "vars", value_delimiter = ',')]
    pub vars: Option<Vec<String>>,
    /// Data only for the variables of these groups: names (every group so named) or full
    /// names `/g/h`, comma-separated; the header is still printed in full (`ncdump -g`).
    /// Repeated, the lists add up (ncdump keeps only the last).
    #[arg(short = 'g', long = "groups", value_delimiter = ',')]
    pub groups: Option<Vec<String>>,
    /// Name for the `netcdf NAME {` line (default: derived from the location).
    #[arg(short = 'n', long = "name")]
    pub name: Option<String>,
    /// Special virtual attributes too: `_Storage`, `_ChunkSizes`, filters, `_Codecs`,
    /// `_Endianness`, `_NoFill`, `_Format` (`ncdump -s`).
    #[arg(short = 's', long = "special")]
    pub special: bool,
    /// With `-s`: every filter in `_Filter`, not `_Fletcher32`, `_Shuffle` and
    /// `_DeflateLevel` for the standard ones (`ncdump -F`).
    #[arg(short = 'F', long = "filters")]
    pub all_filters: bool,
    /// Significant digits of floating-point values: `F` for floats, `F,D` for floats and
    /// doubles (1 to 20; `ncdump -p`). A type given digits ignores `C_format` attributes.
    #[arg(short = 'p', long = "precision", value_name = "F[,D]", value_parser = parse_precision)]
    pub precision: Option<(usize, Option<usize>)>,
    /// Maximum line length of the data section (at least 10; default 80; `ncdump -l`).
    // Checked in `run`, so that a bad length gets ncdump's message rather than clap's.
    #[arg(
        short = 'l',
        long = "line-length",
        value_name = "LEN",
        allow_hyphen_values = true
    )]
    pub line_len: Option<String>,
    /// Brief comments in the data: the indices of each row, `c` (C: from 0, slowest first) or
    /// `f` (Fortran: from 1, fastest first) (`ncdump -b`).
    #[arg(short = 'b', long = "brief", value_name = "LANG", value_parser = parse_lang)]
    pub brief: Option<Lang>,
    /// Full comments in the data: the indices of every value, `c` or `f` (`ncdump -f`).
    #[arg(short = 'f', long = "full", value_name = "LANG", value_parser = parse_lang)]
    pub full: Option<Lang>,
    /// Values of time variables (CF `units` such as `days since 2000-01-01`, with their
    /// `calendar`) as dates (`ncdump -t`). Of `-t` and `-i`, the last given chooses the
    /// separator, as in ncdump.
    #[arg(short = 't', long = "times", overrides_with = "iso_times")]
    pub times: bool,
    /// The same with ISO 8601's `T` between date and time (`ncdump -i`).
    #[arg(short = 'i', long = "iso-times", overrides_with = "times")]
    pub iso_times: bool,
    /// Print only the kind of the dataset, as `ncdump -k` does (`netCDF-4`, which is what
    /// netcdf-c reports for NCZarr and Zarr).
    #[arg(short = 'k', long = "kind")]
    pub kind: bool,
    /// Accepted for ncdump's command lines; no effect: client-side caching of DAP URLs
    /// (`ncdump -w`).
    #[arg(short = 'w', hide = true)]
    pub dap_cache: bool,
    /// Accepted for ncdump's command lines; no effect: netcdf-c's internal log level
    /// (`ncdump -L n`, which ncdump too ignores unless netcdf-c was built with logging).
    #[arg(short = 'L', value_name = "N", hide = true)]
    pub netcdf_log_level: Option<u32>,
    /// Accepted for ncdump's command lines; no effect: `-Xm` (read into memory) and `-Xp`
    /// (which netcdf-c's ncdump accepts and ignores too).
    #[arg(short = 'X', value_name = "m|p", hide = true, value_parser = parse_x_option)]
    pub x_option: Option<char>,
    /// The dataset: a path or a URL.
    pub location: String,
}

/// ncdump's `-X` value: it looks at the first letter only.
fn parse_x_option(text: &str) -> std::result::Result<char, String> {
    match text.chars().next() {
        Some(c @ ('m' | 'p')) => Ok(c),
        _ => Err(format!("invalid value for -X option: {text} (m or p)")),
    }
}

/// Runs `dump`.
pub fn run(args: DumpArgs) -> Result<i32> {
    super::refuse_empty_list("-v", "variable", &args.vars)?;
    super::refuse_empty_list("-g", "group", &args.groups)?;
    let line_len = args.line_len.as_deref().map(parse_line_len).transpose()?;
    let open = OpenDataset::open(&args.location, DEFAULT_CACHE_BYTES)?;
    if args.kind {
        println!("netCDF-4");
        return Ok(0);
    }
    let annotate = match (args.brief, args.full) {
        (None, None) => None,
        (Some(b), Some(f)) if b != f => {
            return Err(Error::Invalid(
                "-b and -f must name the same language (c or f)".into(),
            ))
        }
        (b, f) => Some(Annotate {
            brief: b.is_some(),
            full: f.is_some(),
            fortran: b.or(f) == Some(Lang::Fortran),
        }),
    };
    let opts = DumpOptions {
        header_only: args.header_only,
        coords_only: args.coords_only,
        vars: args
            .vars
            .map(|v| v.into_iter().filter(|s| !s.is_empty()).collect()),
        name: args.name,
        special: args.special,
        all_filters: args.all_filters,
        float_digits: args.precision.map(|p| p.0),
        double_digits: args.precision.and_then(|p| p.1),
        line_len,
        annotate,
        times: if args.iso_times {
            Some('T')
        } else {
            args.times.then_some(' ')
        },
        groups: args
            .groups
            .map(|g| g.into_iter().filter(|s| !s.is_empty()).collect()),
    };
    let stdout = std::io::stdout();
    let mut lock = stdout.lock();
    let name = open.location.dataset_name();
    match dump(&open.model, &open.engine, &name, &opts, &mut lock) {
        Ok(()) => {}
        // A closed pipe (`dump ... | head`) ends the output quietly, as ncdump does.
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {}
        Err(e) => {
            let _ = lock.flush();
            return Err(e);
        }
    }
    Ok(0)
}

/// Most significant digits `-p` accepts, as ncdump.
const MAX_DIGITS: usize = 20;
/// Shortest line length `-l` accepts, as ncdump.
const MIN_LINE_LEN: usize = 10;

/// `-p F[,D]`: digits of floats and, if given, doubles.
fn parse_precision(text: &str) -> std::result::Result<(usize, Option<usize>), String> {
    let digits = |part: &str, what: &str| match part.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_DIGITS).contains(&n) => Ok(n),
        _ => Err(format!(
            "{}: {what} significant digits must be 1 to {MAX_DIGITS}",
            quoted(part)
        )),
    };
    match text.split_once(',') {
        Some((f, d)) => Ok((digits(f, "float")?, Some(digits(d, "double")?))),
        None => Ok((digits(text, "float")?, None)),
    }
}

/// The index conventions of `-b` and `-f`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// From 0, slowest-varying dimension first.
    C,
    /// From 1, fastest-varying dimension first.
    Fortran,
}

/// `c` or `f` (ncdump looks at the first letter only, of either case).
fn parse_lang(text: &str) -> std::result::Result<Lang, String> {
    match text.chars().next().map(|c| c.to_ascii_lowercase()) {
        Some('c') => Ok(Lang::C),
        Some('f') => Ok(Lang::Fortran),
        _ => Err(format!("{}: the language must be c or f", quoted(text))),
    }
}

/// `-l LEN`, read as ncdump reads it (`strtol`: the leading integer, 0 when there is none)
/// and refused in its words below the shortest length.
fn parse_line_len(text: &str) -> Result<usize> {
    let text = text.trim_start();
    let sign_len = usize::from(text.starts_with(['-', '+']));
    let digits_end = text[sign_len..]
        .find(|c: char| !c.is_ascii_digit())
        .map_or(text.len(), |i| i + sign_len);
    let n: i64 = text[..digits_end].parse().unwrap_or(0);
    match usize::try_from(n) {
        Ok(n) if n >= MIN_LINE_LEN => Ok(n),
        _ => Err(Error::Invalid(format!(
            "unreasonably small line length specified: {n}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precision_and_line_length_bounds_are_ncdumps() {
        assert_eq!(parse_precision("3"), Ok((3, None)));
        assert_eq!(parse_precision("3,20"), Ok((3, Some(20))));
        for bad in ["0", "21", "3,0", "3,", "a", ""] {
            assert!(parse_precision(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_line_len("10").ok(), Some(10));
        assert_eq!(parse_line_len("12x").ok(), Some(12));
        // ncdump's words, with the number strtol reads.
        for (bad, n) in [("9", "9"), ("0", "0"), ("x", "0"), ("-5", "-5"), ("1", "1")] {
            assert_eq!(
                parse_line_len(bad).unwrap_err().to_string(),
                format!("unreasonably small line length specified: {n}")
            );
        }
    }
}
