//! `nczarrfs dump`: ncdump's output for an NCZarr or Zarr dataset.

use std::io::Write;
use std::path::Path;

use crate::cdl::writer::{dump, Annotate, DumpOptions};
use crate::dataset::{OpenDataset, DEFAULT_CACHE_BYTES};
use crate::error::{quoted, OptionValueError};
use crate::{Error, Result};

/// Arguments of `dump`. As in ncdump, an option given again replaces what it gave before
/// (`-p 3 -p 5` is `-p 5`), but for `-v` and `-g`, whose lists add up.
#[derive(Debug, clap::Args)]
#[command(disable_help_flag = true, args_override_self = true)]
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
    /// Name for the `netcdf NAME {` line (default: derived from the location). As in
    /// ncdump, the next word is the name, even one starting with `-`.
    #[arg(short = 'n', long = "name", allow_hyphen_values = true)]
    pub name: Option<String>,
    /// Special virtual attributes too: `_Storage`, `_ChunkSizes`, filters, `_Codecs`,
    /// `_Endianness`, `_NoFill`, `_Format` (`ncdump -s`).
    #[arg(short = 's', long = "special")]
    pub special: bool,
    /// With `-s`: every filter in `_Filter`, not `_Fletcher32`, `_Shuffle` and
    /// `_DeflateLevel` for the standard ones (`ncdump -F`).
    #[arg(short = 'F', long = "filters")]
    pub all_filters: bool,
    /// `-p` and `-d`: significant digits of floating-point values.
    #[command(flatten)]
    pub digits: Digits,
    /// Maximum line length of the data section (at least 10; default 80; `ncdump -l`).
    // Checked in `run`, so that a bad length gets ncdump's message rather than clap's.
    #[arg(
        short = 'l',
        long = "line-length",
        value_name = "LEN",
        allow_hyphen_values = true
    )]
    pub line_len: Option<String>,
    /// `-b` and `-f`: comments with the indices of the data.
    #[command(flatten)]
    pub comments: Comments,
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
    /// ncdump's extended format (`ncdump -K`), which Debian's ncdump 4.9.0 has no name for
    /// in the case of NCZarr (it fails with "unrecognized extended format: 10"): refused
    /// likewise, but with `-k`, which prints the kind, as in ncdump.
    #[arg(short = 'K', hide = true)]
    pub extended_kind: bool,
    /// ncdump's NcML output, which it permits for the netCDF classic model only: refused
    /// (NCZarr is netCDF-4), but with `-k`, which prints the kind, as in ncdump.
    #[arg(short = 'x', hide = true)]
    pub ncml: bool,
    /// Accepted for ncdump's command lines; no effect: client-side caching of DAP URLs
    /// (`ncdump -w`).
    #[arg(short = 'w', hide = true)]
    pub dap_cache: bool,
    /// Accepted for ncdump's command lines; no effect: netcdf-c's internal log level
    /// (`ncdump -L n`, which ncdump too ignores unless netcdf-c was built with logging, and
    /// then reads with `atoi`: any text is taken, `-1` and `x` included).
    #[arg(short = 'L', value_name = "N", hide = true, allow_hyphen_values = true)]
    pub netcdf_log_level: Option<String>,
    /// Accepted for ncdump's command lines; no effect: `-Xm` (read into memory) and `-Xp`
    /// (which netcdf-c's ncdump accepts and ignores too).
    #[arg(short = 'X', value_name = "m|p", hide = true, value_parser = parse_x_option)]
    pub x_option: Option<char>,
    /// The dataset: a path (any bytes) or a URL.
    pub location: std::ffi::OsString,
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
    super::check_standard_output()?;
    super::refuse_empty_list("-v", "variable", &args.vars)?;
    super::refuse_empty_list("-g", "group", &args.groups)?;
    let line_len = args
        .line_len
        .as_deref()
        .map(parse_line_len)
        .transpose()
        .map_err(Error::from)?;
    let open = OpenDataset::open(&args.location, DEFAULT_CACHE_BYTES)?;
    if args.kind {
        let mut out = std::io::stdout().lock();
        return match writeln!(out, "netCDF-4").and_then(|()| out.flush()) {
            // A closed pipe ends the output quietly, as below.
            Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => {
                Err(Error::io("standard output", e))
            }
            _ => Ok(0),
        };
    }
    if args.extended_kind {
        return Err(Error::Unsupported(
            "the extended format (-K) of NCZarr has no name in ncdump 4.9.0, which fails \
             with \"unrecognized extended format: 10\"; -k prints the kind"
                .into(),
        ));
    }
    if args.ncml {
        return Err(Error::Unsupported(
            "NcML output (-x) is permitted for the netCDF classic model only, as in ncdump, \
             and NCZarr is netCDF-4"
                .into(),
        ));
    }
    let annotate = args.comments.lang.map(|lang| Annotate {
        brief: args.comments.brief,
        full: args.comments.full,
        fortran: lang == Lang::Fortran,
    });
    let opts = DumpOptions {
        header_only: args.header_only,
        coords_only: args.coords_only,
        vars: args
            .vars
            .map(|v| v.into_iter().filter(|s| !s.is_empty()).collect()),
        name: args.name,
        special: args.special,
        all_filters: args.all_filters,
        float_digits: args.digits.float,
        double_digits: args.digits.double,
        float_digits_override_c_format: args.digits.float_overrides_c_format,
        double_digits_override_c_format: args.digits.double_overrides_c_format,
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
    match dump(
        &open.model,
        &open.engine,
        &name,
        &opts,
        &mut lock,
        Path::new("standard output"),
    ) {
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

/// The digits one `-p` or `-d` gives: of floats, and of doubles (only with floats).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Precision {
    /// Significant digits of floats, if given.
    pub float: Option<usize>,
    /// Significant digits of doubles, if given.
    pub double: Option<usize>,
}

/// `-p F[,D]` and its old spelling `-d F[,D]`, taken in command-line order as ncdump takes
/// them: each sets the digits of both types, those it does not give back to the defaults
/// (`-p 3,5 -p 4` prints doubles with the default digits), and `-p` also makes the digits of
/// each type it gives a number for override `C_format` attributes from then on, which `-d`
/// never does (nor undoes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Digits {
    /// Significant digits of floats, where not the default.
    pub float: Option<usize>,
    /// Significant digits of doubles, where not the default.
    pub double: Option<usize>,
    /// Whether a `-p` gave the digits of floats: `C_format` is then ignored for floats.
    pub float_overrides_c_format: bool,
    /// Whether a `-p` gave the digits of doubles: `C_format` is then ignored for doubles.
    pub double_overrides_c_format: bool,
}

/// The id of the `-p` argument.
const PRECISION: &str = "precision";
/// The id of the `-d` argument.
const SIGNIFICANT_DIGITS: &str = "significant-digits";

impl clap::FromArgMatches for Digits {
    fn from_arg_matches(matches: &clap::ArgMatches) -> std::result::Result<Self, clap::Error> {
        // Every -p and -d given, with its position on the command line.
        let given = |id: &str| -> Vec<(usize, bool, Precision)> {
            let (Some(indices), Some(values)) =
                (matches.indices_of(id), matches.get_many::<Precision>(id))
            else {
                return Vec::new();
            };
            indices
                .zip(values)
                .map(|(i, &p)| (i, id == PRECISION, p))
                .collect()
        };
        let mut all = given(PRECISION);
        all.extend(given(SIGNIFICANT_DIGITS));
        all.sort_by_key(|&(i, _, _)| i);
        let mut digits = Digits::default();
        for (_, overrides, p) in all {
            digits.float = p.float;
            digits.double = p.double;
            if overrides {
                digits.float_overrides_c_format |= p.float.is_some();
                digits.double_overrides_c_format |= p.double.is_some();
            }
        }
        Ok(digits)
    }

    fn update_from_arg_matches(
        &mut self,
        matches: &clap::ArgMatches,
    ) -> std::result::Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for Digits {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        // Appended rather than replaced when given again, to follow their order.
        let digits_arg = |id: &'static str, short: char| {
            clap::Arg::new(id)
                .short(short)
                .value_name("F[,D]")
                .value_parser(parse_precision)
                .allow_hyphen_values(true)
                .action(clap::ArgAction::Append)
        };
        cmd.arg(digits_arg(PRECISION, 'p').long(PRECISION).help(
            "Significant digits of floating-point values: `F` for floats, `F,D` for floats \
             and doubles (1 to 20; `ncdump -p`). A type given digits ignores `C_format` \
             attributes",
        ))
        .arg(digits_arg(SIGNIFICANT_DIGITS, 'd').hide(true).help(
            "ncdump's old spelling of -p, which leaves `C_format` attributes in force \
             (`ncdump -d`)",
        ))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
    }
}

/// `-p F[,D]` (and `-d F[,D]`), read as ncdump 4.9 reads it: F is the integer `strtol` reads
/// at the start (what follows it is ignored unless it is `,`), D the one after that comma
/// (what follows D, such as `,7`, is ignored); a text that starts with `,` gives neither
/// (`-p ,5` changes nothing), and F without D leaves doubles alone. Where ncdump reads no
/// digits (`x`, `3,`, `3,x`), the value is of the wrong form; digits outside 1 to 20 are out
/// of range.
fn parse_precision(text: &str) -> std::result::Result<Precision, OptionValueError> {
    let digits = |n: Option<i64>, what: &str| match n {
        Some(n) if (1..=MAX_DIGITS as i64).contains(&n) => Ok(n as usize),
        Some(_) => Err(OptionValueError::OutOfRange(format!(
            "{}: {what} significant digits must be 1 to {MAX_DIGITS}",
            quoted(text)
        ))),
        None => Err(OptionValueError::WrongForm(format!(
            "{}: {what} significant digits must be a number from 1 to {MAX_DIGITS}",
            quoted(text)
        ))),
    };
    if text.is_empty() || text.starts_with(',') {
        return Ok(Precision {
            float: None,
            double: None,
        });
    }
    let float = digits(strtol_digits(text), "float")?;
    let (_, rest) = strtol(text);
    let double = match rest.strip_prefix(',') {
        // ncdump refuses a D without digits (`3,`, `3,x`) as 0.
        Some(d) => Some(digits(strtol_digits(d), "double")?),
        None => None,
    };
    Ok(Precision {
        float: Some(float),
        double,
    })
}

/// C's `strtol(text, &end, 10)`: the integer at the start of `text` (after blanks, with a
/// sign), 0 when there is none, and the rest; saturated rather than wrapped.
fn strtol(text: &str) -> (i64, &str) {
    let trimmed = text.trim_start();
    let sign_len = usize::from(trimmed.starts_with(['-', '+']));
    let digits_end = trimmed[sign_len..]
        .find(|c: char| !c.is_ascii_digit())
        .map_or(trimmed.len(), |i| i + sign_len);
    if digits_end == sign_len {
        return (0, text);
    }
    let number = &trimmed[..digits_end];
    let value = number.parse().unwrap_or(match number.starts_with('-') {
        true => i64::MIN,
        false => i64::MAX,
    });
    (value, &trimmed[digits_end..])
}

/// [`strtol`]'s integer, or `None` where it reads no digits.
fn strtol_digits(text: &str) -> Option<i64> {
    let (value, rest) = strtol(text);
    (rest.len() < text.len()).then_some(value)
}

/// C's `strtol(text, &end, 0)`: after blanks and a sign, `0x` or `0X` and hex digits are
/// hexadecimal, a leading `0` is octal (`012` is 10, `08` is 0 and `8` left over), other
/// digits decimal; `None` where no digit is read; saturated rather than wrapped.
fn strtol_base_0(text: &str) -> Option<i64> {
    let trimmed = text.trim_start();
    let (negative, unsigned) = match trimmed.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, trimmed.strip_prefix('+').unwrap_or(trimmed)),
    };
    let hex = unsigned
        .strip_prefix("0x")
        .or_else(|| unsigned.strip_prefix("0X"))
        .filter(|rest| rest.starts_with(|c: char| c.is_ascii_hexdigit()));
    let (radix, digits) = match hex {
        Some(rest) => (16, rest),
        None if unsigned.starts_with('0') => (8, unsigned),
        None => (10, unsigned),
    };
    let end = digits
        .find(|c: char| !c.is_digit(radix))
        .unwrap_or(digits.len());
    if end == 0 {
        return None;
    }
    let magnitude = i64::from_str_radix(&digits[..end], radix).unwrap_or(i64::MAX);
    Some(if negative { -magnitude } else { magnitude })
}

/// `-b LANG` and `-f LANG`, as ncdump reads them: each turns its comments on, and the
/// language of the last one given counts (`-b c -f f` gives both comments, in Fortran's
/// conventions).
#[derive(Debug, Clone, Copy, Default)]
pub struct Comments {
    /// `-b`: a comment with the indices of each row.
    pub brief: bool,
    /// `-f`: a comment with the indices of every value.
    pub full: bool,
    /// The language of the last of them.
    pub lang: Option<Lang>,
}

/// The id of the `-b` argument.
const BRIEF: &str = "brief";
/// The id of the `-f` argument.
const FULL: &str = "full";

impl clap::FromArgMatches for Comments {
    fn from_arg_matches(matches: &clap::ArgMatches) -> std::result::Result<Self, clap::Error> {
        // The value given last on the command line, with its position there.
        let last = |id: &str| -> Option<(usize, Lang)> {
            let index = matches.indices_of(id)?.max()?;
            let lang = matches.get_many::<Lang>(id)?.next_back().copied()?;
            Some((index, lang))
        };
        let (brief, full) = (last(BRIEF), last(FULL));
        Ok(Comments {
            brief: brief.is_some(),
            full: full.is_some(),
            lang: brief
                .into_iter()
                .chain(full)
                .max_by_key(|(i, _)| *i)
                .map(|(_, l)| l),
        })
    }

    fn update_from_arg_matches(
        &mut self,
        matches: &clap::ArgMatches,
    ) -> std::result::Result<(), clap::Error> {
        *self = Self::from_arg_matches(matches)?;
        Ok(())
    }
}

impl clap::Args for Comments {
    fn augment_args(cmd: clap::Command) -> clap::Command {
        // Appended rather than replaced when given again, to see which came last.
        let lang_arg = |id: &'static str, short: char, help: &'static str| {
            clap::Arg::new(id)
                .short(short)
                .long(id)
                .value_name("LANG")
                .value_parser(parse_lang)
                .action(clap::ArgAction::Append)
                .help(help)
        };
        cmd.arg(lang_arg(
            BRIEF,
            'b',
            "Brief comments in the data: the indices of each row, `c` (C: from 0, slowest \
             first) or `f` (Fortran: from 1, fastest first) (`ncdump -b`). Of -b and -f, the \
             last given sets the language",
        ))
        .arg(lang_arg(
            FULL,
            'f',
            "Full comments in the data: the indices of every value, `c` or `f` (`ncdump -f`)",
        ))
    }

    fn augment_args_for_update(cmd: clap::Command) -> clap::Command {
        Self::augment_args(cmd)
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

/// `-l LEN`, read as ncdump reads it (`strtol` in base 0: the leading integer, in hex after
/// `0x`, in octal after `0`) and refused in its words below the shortest length; a text
/// without a leading integer (ncdump reads 0) is of the wrong form.
fn parse_line_len(text: &str) -> std::result::Result<usize, OptionValueError> {
    let n = strtol_base_0(text).ok_or_else(|| {
        OptionValueError::WrongForm(format!(
            "line length {} is not a number (at least {MIN_LINE_LEN})",
            quoted(text)
        ))
    })?;
    match usize::try_from(n) {
        Ok(n) if n >= MIN_LINE_LEN => Ok(n),
        _ => Err(OptionValueError::OutOfRange(format!(
            "unreasonably small line length specified: {n}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precision_and_line_length_bounds_are_ncdumps() {
        let p = |float, double| Ok(Precision { float, double });
        assert_eq!(parse_precision("3"), p(Some(3), None));
        assert_eq!(parse_precision("3,20"), p(Some(3), Some(20)));
        // Debian's ncdump 4.9.0: `,5` changes nothing; what follows the numbers is ignored.
        assert_eq!(parse_precision(",5"), p(None, None));
        assert_eq!(parse_precision(","), p(None, None));
        assert_eq!(parse_precision(""), p(None, None));
        assert_eq!(parse_precision("3,5,7"), p(Some(3), Some(5)));
        assert_eq!(parse_precision("3x"), p(Some(3), None));
        assert_eq!(parse_precision("3,5x"), p(Some(3), Some(5)));
        assert_eq!(parse_precision(" 4, 6"), p(Some(4), Some(6)));
        // Numbers out of 1..=20 are out of range; no number where one is due, the wrong form.
        for bad in ["0", "21", "3,0", "-5", "3,99999999999999999999"] {
            assert!(
                matches!(parse_precision(bad), Err(OptionValueError::OutOfRange(_))),
                "{bad}"
            );
        }
        for bad in ["3,", "3,x", "3,,5", "a"] {
            assert!(
                matches!(parse_precision(bad), Err(OptionValueError::WrongForm(_))),
                "{bad}"
            );
        }
        assert_eq!(parse_line_len("10").ok(), Some(10));
        assert_eq!(parse_line_len("12x").ok(), Some(12));
        // strtol's base 0, as Debian's ncdump 4.9.0 reads -l: hex and octal.
        assert_eq!(parse_line_len("0x20").ok(), Some(32));
        assert_eq!(parse_line_len("0X1e").ok(), Some(30));
        assert_eq!(parse_line_len("012").ok(), Some(10));
        assert_eq!(parse_line_len("0100").ok(), Some(64));
        assert_eq!(parse_line_len(" +0x10z").ok(), Some(16));
        // ncdump's words, with the number strtol reads.
        for (bad, n) in [
            ("9", "9"),
            ("0", "0"),
            ("-5", "-5"),
            ("1", "1"),
            ("08", "0"),
            ("010x", "8"),
            ("0x", "0"),
            ("-0x20", "-32"),
        ] {
            match parse_line_len(bad) {
                Err(OptionValueError::OutOfRange(m)) => {
                    assert_eq!(m, format!("unreasonably small line length specified: {n}"))
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        for bad in ["x", "-", "+x", ""] {
            assert!(
                matches!(parse_line_len(bad), Err(OptionValueError::WrongForm(_))),
                "{bad}"
            );
        }
    }

    fn parse_dump(args: &[&str]) -> DumpArgs {
        use clap::Parser;
        let cli = crate::cli::Cli::try_parse_from(
            ["nczarrfs", "dump"]
                .iter()
                .chain(args)
                .chain(&["ds.file"])
                .copied(),
        )
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        match cli.command {
            crate::cli::Command::Dump(a) => a,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn options_given_again_replace_what_they_gave_as_in_ncdump() {
        let a = parse_dump(&["-p", "3", "-p", "3,5"]);
        assert_eq!(a.digits.double, Some(5));
        let a = parse_dump(&["-p", "3,5", "-p", "4"]);
        assert_eq!((a.digits.float, a.digits.double), (Some(4), None));
        let a = parse_dump(&["-l", "20", "-l", "30", "-h", "-h", "-n", "a", "-n", "b"]);
        assert_eq!(
            (a.line_len.as_deref(), a.name.as_deref()),
            (Some("30"), Some("b"))
        );
        // -v and -g lists add up (documented: ncdump keeps the last).
        let a = parse_dump(&["-v", "a", "-v", "b,c"]);
        assert_eq!(a.vars.unwrap(), ["a", "b", "c"]);
    }

    #[test]
    fn p_and_d_set_digits_in_order_and_only_p_overrides_c_format() {
        let digits = |args: &[&str]| parse_dump(args).digits;
        let d = |float, double, over_float, over_double| Digits {
            float,
            double,
            float_overrides_c_format: over_float,
            double_overrides_c_format: over_double,
        };
        assert_eq!(digits(&[]), d(None, None, false, false));
        assert_eq!(digits(&["-d", "3,5"]), d(Some(3), Some(5), false, false));
        assert_eq!(digits(&["-p", "3,5"]), d(Some(3), Some(5), true, true));
        // As ncdump's getopt loop: the last sets the digits, a -p before keeps its override.
        assert_eq!(
            digits(&["-p", "3,5", "-d", "4"]),
            d(Some(4), None, true, true)
        );
        assert_eq!(
            digits(&["-d", "3,5", "-p", "4"]),
            d(Some(4), None, true, false)
        );
        assert_eq!(
            digits(&["-p", "3,5", "-p", "4"]),
            d(Some(4), None, true, true)
        );
        assert_eq!(digits(&["-p", "3", "-p", ",5"]), d(None, None, true, false));
        assert_eq!(
            digits(&["-d3,5", "-d", "6"]),
            d(Some(6), None, false, false)
        );
    }

    #[test]
    fn names_and_log_levels_ncdump_takes_are_taken() {
        // getopt takes the next word as the value, whatever its first character.
        assert_eq!(parse_dump(&["-n", "-x"]).name.as_deref(), Some("-x"));
        assert_eq!(parse_dump(&["-n", "--"]).name.as_deref(), Some("--"));
        // ncdump reads -L with atoi and ignores it.
        for level in ["-1", "x", "1.5", "-h"] {
            let a = parse_dump(&["-L", level]);
            assert_eq!(a.netcdf_log_level.as_deref(), Some(level));
            assert!(!a.header_only);
        }
        assert_eq!(
            parse_dump(&["-L-1"]).netcdf_log_level.as_deref(),
            Some("-1")
        );
    }

    #[test]
    fn the_last_of_b_and_f_sets_the_language_and_both_comment() {
        let c = |args: &[&str]| {
            let c = parse_dump(args).comments;
            (c.brief, c.full, c.lang)
        };
        assert_eq!(c(&[]), (false, false, None));
        assert_eq!(
            c(&["-b", "c", "-b", "f"]),
            (true, false, Some(Lang::Fortran))
        );
        assert_eq!(c(&["-f", "f", "-f", "c"]), (false, true, Some(Lang::C)));
        assert_eq!(
            c(&["-b", "c", "-f", "f"]),
            (true, true, Some(Lang::Fortran))
        );
        assert_eq!(c(&["-f", "f", "-b", "c"]), (true, true, Some(Lang::C)));
        assert_eq!(
            c(&["-bc", "-ff", "-bfortran"]),
            (true, true, Some(Lang::Fortran))
        );
    }
}
