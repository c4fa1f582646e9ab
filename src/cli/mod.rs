//! The command line: one binary, one subcommand per job.

use std::io::Write;

use clap::{Parser, Subcommand};

use crate::error::{quoted, OptionValueError};
use crate::Result;

mod copy;
mod dump;
mod gen;
mod get;
mod mount;
mod put;

pub use gen::generate;

/// nczarrfs: NCZarr datasets as a filesystem and on the command line.
#[derive(Debug, Parser)]
#[command(name = "nczarrfs", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print a dataset as CDL, like ncdump.
    Dump(dump::DumpArgs),
    /// Write the raw values of a hyperslab, in native byte order or as .npy.
    Get(get::GetArgs),
    /// Store raw values (or a .npy file) into a hyperslab of a variable: the inverse of get.
    Put(put::PutArgs),
    /// Serve a dataset as a FUSE filesystem.
    Mount(mount::MountArgs),
    /// Detach MOUNTPOINT (or the directory a symbolic link there leads to) if it is the dead
    /// mount of an nczarrfs daemon that died without unmounting ("Transport endpoint is not
    /// connected"); leave any other mount alone, and fail if it leads to a dead mount that it
    /// leaves. For a service manager's cleanup after the daemon stopped.
    DetachDead(mount::DetachDeadArgs),
    /// Create a dataset from a CDL file, like ncgen.
    Gen(gen::GenArgs),
    /// Copy a dataset to any storage and dialect, re-chunking and re-compressing, like nccopy.
    Copy(copy::CopyArgs),
    /// Internal, started by the commands that write: renames the writer's temporary
    /// metadata files into place in sets that a kill of the writer cannot cut.
    #[command(name = crate::zmap::RENAME_HELPER_COMMAND, hide = true)]
    RenameHelper {
        /// The process id of the writer it serves (its parent), which its command line
        /// shows so that other writers can tell whose temporary files it may still rename.
        writer: Option<u32>,
    },
    /// Internal, started by an interrupted `gen` or `copy`: removes its staging paths
    /// (`.NAME.nczarrfs-PID.TOKEN`, PID being that process) once it has exited; refuses any other.
    #[command(name = crate::interrupt::REMOVE_STAGING_COMMAND, hide = true)]
    RemoveStaging {
        /// The staging directories or archives.
        paths: Vec<std::path::PathBuf>,
    },
}

/// The ids of [`KindArgs`]'s options: of them, the last given counts, as in ncgen and nccopy.
const KIND_OPTIONS: [&str; 6] = [
    "mode",
    "netcdf4",
    "netcdf4_classic",
    "classic",
    "offset64",
    "cdf5",
];

/// The kind of dataset `gen` and `copy` write: `-k` mode words, and ncgen's and nccopy's
/// format flags (`-4`, `-7`, `-3`, `-6`, `-5`), of which the last given counts.
#[derive(Debug, clap::Args)]
pub struct KindArgs {
    /// Mode words, comma-separated: `nczarr` (default) or `zarr`, `v2` (default) or `v3`,
    /// `xarray` or `noxarray`, `consolidated`, and the storage: `file` or `zip` (a local
    /// destination), `s3` (an s3:// or http(s):// one). ncgen's and nccopy's netCDF-4 names
    /// (`nc4`, `netCDF-4`, `3`, `enhanced`, `hdf5`) mean `nczarr`; their classic model (`nc7`,
    /// `4`) and netCDF-3 kinds are refused.
    #[arg(short = 'k', long = "mode", value_name = "WORDS", overrides_with_all = KIND_OPTIONS)]
    pub mode: Option<String>,
    /// netCDF-4, that is NCZarr: ncgen's and nccopy's `-4`, the same as `-k nc4`.
    #[arg(short = '4', overrides_with_all = KIND_OPTIONS)]
    pub netcdf4: bool,
    /// ncgen's and nccopy's netCDF-4 classic model (`-k nc7`): refused.
    #[arg(short = '7', hide = true, overrides_with_all = KIND_OPTIONS)]
    pub netcdf4_classic: bool,
    /// ncgen's and nccopy's netCDF-3 classic format (`-k nc3`): refused.
    #[arg(short = '3', hide = true, overrides_with_all = KIND_OPTIONS)]
    pub classic: bool,
    /// ncgen's and nccopy's 64-bit offset format (`-k nc6`): refused.
    #[arg(short = '6', hide = true, overrides_with_all = KIND_OPTIONS)]
    pub offset64: bool,
    /// ncgen's CDF-5 format (`-k nc5`): refused.
    #[arg(short = '5', hide = true, overrides_with_all = KIND_OPTIONS)]
    pub cdf5: bool,
}

impl KindArgs {
    /// The mode words to apply, `None` when no kind was given. ncgen's and nccopy's other
    /// kinds are refused, since nothing written here is one of them.
    pub fn mode_words(&self) -> Result<Option<KindWords>> {
        let flag = [
            (self.netcdf4, "-4"),
            (self.netcdf4_classic, "-7"),
            (self.classic, "-3"),
            (self.offset64, "-6"),
            (self.cdf5, "-5"),
        ]
        .into_iter()
        .find_map(|(given, flag)| given.then_some(flag));
        let (option, words) = match (&self.mode, flag) {
            (Some(words), _) => (format!("-k {words}"), words.as_str()),
            (None, Some(flag)) => (flag.to_string(), flag),
            (None, None) => return Ok(None),
        };
        Ok(Some(KindWords {
            option,
            words: ncgen_mode_words(words)?,
        }))
    }
}

/// The kind asked for by `-k` or a format flag: its mode words, each with the text given for
/// it, so that a refusal quotes what the user typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindWords {
    /// The option as given: `-k nc4,zarr`, `-4`.
    option: String,
    /// Each word given: the mode word it stands for, and the word as given.
    words: Vec<(String, String)>,
}

impl KindWords {
    /// Whether mode word `word` is among them, in any case: `-k nc4` has `nczarr`.
    pub fn has(&self, word: &str) -> bool {
        self.words.iter().any(|(w, _)| w.eq_ignore_ascii_case(word))
    }

    /// Applies them to `location` ([`Location::apply_mode_words`]); a refusal names the
    /// option as given and is a value of the wrong form ([`crate::Error::Usage`]).
    pub fn apply_to(&self, location: &mut crate::location::Location) -> Result<()> {
        location
            .apply_mode_words(
                self.words
                    .iter()
                    .map(|(w, given)| (w.as_str(), given.as_str())),
            )
            .map_err(|reason| crate::Error::Usage(format!("{}: {reason}", self.option)))
    }
}

/// `-k` words, each as the mode word it stands for and as given: ncgen's and nccopy's
/// netCDF-4 names (`nc4`, `3`, `netCDF-4`, ...) stand for `nczarr`, every other word for
/// itself (empty words, as in a fragment, for nothing); their names of the
/// classic model and of the netCDF-3 formats are refused, with what to give instead. (ncgen
/// and nccopy match the names case-sensitively; these are matched in any case, as mode words
/// are.)
fn ncgen_mode_words(words: &str) -> Result<Vec<(String, String)>> {
    words
        .split(',')
        .map(str::trim)
        .filter(|w| !w.is_empty())
        .map(|w| match w.to_ascii_lowercase().as_str() {
            "nc4" | "netcdf-4" | "netcdf4" | "3" | "hdf5" | "enhanced" | "-4" => {
                Ok(("nczarr".to_string(), w.to_string()))
            }
            "nc7"
            | "4"
            | "netcdf-4 classic model"
            | "netcdf-4-classic"
            | "netcdf-4_classic"
            | "netcdf4_classic"
            | "hdf5-nc3"
            | "enhanced-nc3"
            | "-7" => Err(crate::Error::Unsupported(format!(
                "{} is ncgen's and nccopy's netCDF-4 classic model, which NCZarr does not \
                     record (netcdf-c ignores it there and reads such a dataset back as \
                     netCDF-4): for netCDF-4 give -k nc4 (ncgen's and nccopy's -k 3, -4)",
                crate::error::quoted(w)
            ))),
            "classic" | "nc3" | "1" | "64-bit offset" | "64-bit-offset" | "nc6" | "2" | "5"
            | "cdf5" | "cdf-5" | "nc5" | "64-bit-data" | "64-bit data" | "-3" | "-6" | "-5" => {
                Err(crate::Error::Unsupported(format!(
                    "{} is a netCDF-3 format, which nczarrfs does not write: it writes NCZarr \
                     and Zarr, of netCDF-4's data model (-k nc4, the default)",
                    crate::error::quoted(w)
                )))
            }
            _ => Ok((w.to_string(), w.to_string())),
        })
        .collect()
}

/// A location that cannot be understood (an unknown or conflicting mode word, a scheme not
/// taken) as a command line value of the wrong form, exit status 2, as a `-k` word of the
/// wrong form is.
fn location_of_the_wrong_form(err: crate::Error) -> crate::Error {
    match err {
        crate::Error::InvalidLocation { .. } => err.into_usage(),
        other => other,
    }
}

/// The message and exit status 1 of a command line the parser refused for a value that a
/// value parser here found out of range ([`OptionValueError::OutOfRange`]), to be printed as
/// the commands print theirs; `None` for every other refusal, which keeps clap's message and
/// status (2 for a command line that cannot be parsed, 0 for `--help` and `--version`).
pub fn parse_refusal(err: &clap::Error) -> Option<(String, i32)> {
    use std::error::Error as _;
    let out_of_range = err
        .source()
        .and_then(|s| s.downcast_ref::<OptionValueError>())
        .filter(|v| matches!(v, OptionValueError::OutOfRange(_)))?;
    let option = match err.get(clap::error::ContextKind::InvalidArg) {
        Some(clap::error::ContextValue::String(arg)) => arg.clone(),
        _ => "an option".to_string(),
    };
    Some((format!("invalid value for {option}: {out_of_range}"), 1))
}

/// An integer option value within `range`: text that is no integer (an optional sign, then
/// decimal digits) is of the wrong form, an integer outside `range` (of however many digits)
/// out of range; `what` names the value in the messages.
pub fn integer_in<T>(
    text: &str,
    what: &str,
    range: std::ops::RangeInclusive<T>,
) -> std::result::Result<T, OptionValueError>
where
    T: TryFrom<i128> + PartialOrd + std::fmt::Display + Copy,
{
    let trimmed = text.trim();
    if !is_integer(trimmed) {
        return Err(OptionValueError::WrongForm(format!(
            "{what} {} is not an integer",
            quoted(text)
        )));
    }
    // Too many digits for an i128 is out of every range here too.
    trimmed
        .parse::<i128>()
        .ok()
        .and_then(|n| T::try_from(n).ok())
        .filter(|n| range.contains(n))
        .ok_or_else(|| {
            OptionValueError::OutOfRange(format!(
                "{what} {} is not from {} to {}",
                quoted(text),
                range.start(),
                range.end()
            ))
        })
}

/// Whether `text` is spelled as an integer: an optional sign, then decimal digits. Such a
/// text is a number of an option's form, so that one out of the option's range (a negative
/// length, say) is refused as out of range rather than as of the wrong form.
pub fn is_integer(text: &str) -> bool {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())
}

/// Refuses a list option (`-v`, `-g`, ...) given only empty names: `-v "$VARS"` with `VARS`
/// unset would otherwise select nothing, silently (ncdump and nccopy crash on it).
fn refuse_empty_list(flag: &str, what: &str, list: &Option<Vec<String>>) -> crate::Result<()> {
    match list {
        Some(names) if names.iter().all(|n| n.is_empty()) => Err(crate::Error::Invalid(format!(
            "{flag} names no {what}: give at least one, or leave {flag} out"
        ))),
        _ => Ok(()),
    }
}

/// The complaint about a variable `name` that `ds` (at `location`) does not have: names the
/// variables of that plain name in groups, since `get` and `put` take a path (`g/v`) where
/// `dump -v` matches a plain name at any depth.
fn no_variable(ds: &crate::model::Dataset, name: &str, location: &str) -> crate::Error {
    let in_groups: Vec<String> = (0..ds.vars.len())
        .map(crate::model::VarId)
        .filter(|v| !name.contains('/') && ds.var(*v).name == name)
        .map(|v| ds.var_fqn(v))
        .collect();
    let hint = match in_groups.is_empty() {
        true => "`nczarrfs dump -h` lists them".to_string(),
        false => format!("in a group: {}", in_groups.join(", ")),
    };
    crate::Error::NotFound(format!(
        "no variable {} in {location} ({} variables; {hint})",
        crate::error::quoted(name),
        ds.vars.len()
    ))
}

/// Refuses `-` as the place of a new dataset: a dataset is a directory or an archive written
/// in several steps, not a stream for standard output.
fn refuse_standard_output(location: &std::ffi::OsStr) -> Result<()> {
    match location.as_encoded_bytes() {
        b"-" => Err(crate::Error::Invalid(
            "a dataset cannot be written to standard output (`-`): give a path (`./-` for \
             one named `-`)"
                .to_string(),
        )),
        _ => Ok(()),
    }
}

/// Set when descriptor 1 was closed as the process started, which the Rust runtime hides by
/// opening `/dev/null` there before `main`.
static STANDARD_OUTPUT_CLOSED: std::sync::atomic::AtomicBool =
    std::sync::atomic::AtomicBool::new(false);

/// Records that descriptor 1 was closed at start (`nczarrfs dump X >&-`): the binary calls
/// this from a constructor that runs before the runtime opens `/dev/null` there, so that the
/// commands that write to standard output fail, as `cat` does, rather than write nowhere
/// and exit 0.
pub fn note_standard_output_closed() {
    STANDARD_OUTPUT_CLOSED.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// Fails with EBADF, before any work, when standard output was closed at start: checked up
/// front as `cat` checks it, so that even a command that would write nothing tells.
fn check_standard_output() -> Result<()> {
    if STANDARD_OUTPUT_CLOSED.load(std::sync::atomic::Ordering::Relaxed) {
        return Err(crate::Error::io(
            "standard output",
            std::io::Error::from_raw_os_error(libc::EBADF),
        ));
    }
    Ok(())
}

/// Leaves netCDF's default fill out of a variable written to pure Zarr v2 when the variable
/// has no `_FillValue`: xarray takes a Zarr v2 `fill_value` as `_FillValue` and would take
/// ordinary values (an empty string, a byte 255) for missing, where netCDF readers take them
/// as data. Its `fill_value` becomes `null`, which reads as zeros where nothing is stored, so
/// its writer must store every value that is not zero: the caller writes the whole variable.
fn without_default_fill_in_zarr_v2(var: &mut crate::model::Variable) {
    if var.attr("_FillValue").is_none() {
        var.storage.fill_value = None;
    }
}

/// The command line of this process, parsed. Where clap refuses an argument that is not
/// UTF-8 it does not say which one: this names every such argument, so that a name or
/// option value is told apart from the paths that may be any bytes. A value out of range
/// exits 1 (see [`parse_refusal`]); other parse errors (and `--help`) print and exit as clap
/// prints them.
pub fn parse() -> Cli {
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if e.kind() == clap::error::ErrorKind::InvalidUtf8 => {
            let _ = writeln!(
                std::io::stderr(),
                "nczarrfs: {}",
                not_utf8_message(std::env::args_os())
            );
            std::process::exit(2)
        }
        Err(e) => match parse_refusal(&e) {
            Some((message, status)) => {
                let _ = writeln!(std::io::stderr(), "nczarrfs: {message}");
                std::process::exit(status)
            }
            None => e.exit(),
        },
    }
}

/// The message for a command line (`args`, the program first) with an argument that is not
/// UTF-8 where text is needed, naming each argument that is not UTF-8 by its position and its
/// bytes (those beyond UTF-8 as `\xNN`).
fn not_utf8_message(args: impl IntoIterator<Item = std::ffi::OsString>) -> String {
    use std::os::unix::ffi::OsStrExt;
    let suspects: Vec<String> = args
        .into_iter()
        .enumerate()
        .skip(1)
        .filter(|(_, arg)| arg.to_str().is_none())
        .map(|(i, arg)| {
            format!(
                "argument {i}, `{}`",
                crate::error::escaped_bytes(arg.as_bytes())
            )
        })
        .collect();
    format!(
        "a name or option value is not UTF-8 ({}): names of variables, groups and attributes \
         and the values of options are text; only paths (a LOCATION, an output file, a mount \
         point, a log file) may be any bytes",
        suspects.join(", or ")
    )
}

/// Runs the parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> Result<i32> {
    if matches!(
        cli.command,
        Command::Gen(_) | Command::Copy(_) | Command::Get(_)
    ) {
        // Before any thread starts, so that all of them leave the signals to one.
        crate::interrupt::remove_staging_on_signals();
    }
    if matches!(
        cli.command,
        Command::Put(_) | Command::Mount(_) | Command::Gen(_) | Command::Copy(_)
    ) {
        // They write datasets, in place or in a staging copy that a kill leaves behind for
        // inspection, so a kill must not cut a set of metadata objects in half (a root
        // group whose arrays are not stored yet opens as a dataset without variables).
        // /proc/self/exe is this very binary even after an upgrade has replaced or removed
        // its file under a long-running mount.
        crate::zmap::use_rename_helper(std::path::PathBuf::from("/proc/self/exe"));
    }
    let code = match cli.command {
        Command::Dump(args) => dump::run(args).map_err(location_of_the_wrong_form),
        Command::Get(args) => get::run(args).map_err(location_of_the_wrong_form),
        Command::Put(args) => put::run(args).map_err(location_of_the_wrong_form),
        // mount exits 1 for every refusal, mount(8)'s code for a helper's incorrect
        // invocation.
        Command::Mount(args) => mount::run(args),
        Command::DetachDead(args) => mount::detach_dead(args),
        Command::Gen(args) => gen::run(args).map_err(location_of_the_wrong_form),
        Command::Copy(args) => copy::run(args).map_err(location_of_the_wrong_form),
        Command::RenameHelper { writer } => crate::zmap::serve_renames(writer).map(|()| 0),
        Command::RemoveStaging { paths } => {
            crate::interrupt::serve_remove_staging(&paths).map(|()| 0)
        }
    };
    crate::zmap::stop_rename_helper();
    code
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use std::ffi::OsString;
    use std::os::unix::ffi::OsStringExt;

    #[test]
    fn arguments_that_are_not_utf8_are_named_by_position_and_bytes() {
        let args = ["nczarrfs", "get", "a.zarr"]
            .map(OsString::from)
            .into_iter()
            .chain([OsString::from_vec(b"v\xff\xfe".to_vec())]);
        let message = not_utf8_message(args);
        assert!(
            message.starts_with("a name or option value is not UTF-8 (argument 3, `v\\xff\\xfe`):"),
            "{message}"
        );
        let two = [
            b"nczarrfs".to_vec(),
            b"d\xff".to_vec(),
            b"ok".to_vec(),
            b"\xc3".to_vec(),
        ]
        .map(OsString::from_vec);
        assert!(not_utf8_message(two).contains("(argument 1, `d\\xff`, or argument 3, `\\xc3`)"),);
    }

    fn words(given: &str) -> Vec<(String, String)> {
        ncgen_mode_words(given).unwrap()
    }

    fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(w, g)| (w.to_string(), g.to_string()))
            .collect()
    }

    #[test]
    fn ncgen_netcdf4_names_are_nczarr_and_other_words_stay_as_typed() {
        // Debian's ncgen and nccopy 4.9.0: `-k 3`, `enhanced`, `hdf5` make netCDF-4.
        assert_eq!(
            words("nc4,zip"),
            pairs(&[("nczarr", "nc4"), ("zip", "zip")])
        );
        assert_eq!(
            words("netCDF-4, V3"),
            pairs(&[("nczarr", "netCDF-4"), ("V3", "V3")])
        );
        for word in ["3", "enhanced", "hdf5", "netCDF4", "-4"] {
            assert_eq!(words(word), pairs(&[("nczarr", word)]), "{word}");
        }
    }

    /// A refusal quotes the option and its words as typed, and the destination as given.
    #[test]
    fn kind_refusals_quote_what_was_given() {
        let refusal = |args: &[&str], location: &str| {
            let mut loc = crate::location::Location::parse(location).unwrap();
            let err = kind(args).unwrap().unwrap().apply_to(&mut loc).unwrap_err();
            assert!(matches!(err, crate::Error::Usage(_)), "{err:?}");
            err.to_string()
        };
        assert_eq!(
            refusal(&["-k", "nc4,zarr", "x.cdl"], "/tmp/x.file"),
            "-k nc4,zarr: conflicting formats in mode: nc4 and zarr (give one)"
        );
        assert_eq!(
            refusal(&["-k", "Zarr,netCDF-4", "x.cdl"], "/tmp/x.file"),
            "-k Zarr,netCDF-4: conflicting formats in mode: Zarr and netCDF-4 (give one)"
        );
        assert_eq!(
            refusal(&["-k", "nczarr,bogus", "x.cdl"], "/tmp/x.file"),
            "-k nczarr,bogus: unknown mode word(s) \"bogus\""
        );
        assert_eq!(
            refusal(&["-k", "s3", "x.cdl"], "plain/path"),
            "-k s3: mode s3 needs an s3:// or http(s):// URL, not plain/path"
        );
        assert_eq!(
            refusal(&["-k", "zip", "x.cdl"], "s3://bucket/x"),
            "-k zip: mode zip needs a local destination, not s3://bucket/x"
        );
    }

    #[test]
    fn kind_help_names_every_mode_word() {
        use clap::CommandFactory;
        // netcdf-c's mode words that name a format, Zarr version, xarray choice or storage,
        // which `-k` takes (each is accepted, for a location of its kind).
        let words = [
            "nczarr",
            "zarr",
            "v2",
            "v3",
            "xarray",
            "noxarray",
            "consolidated",
            "file",
            "zip",
            "s3",
        ];
        for command in ["gen", "copy"] {
            let cli = Cli::command();
            let help = cli
                .find_subcommand(command)
                .and_then(|c| c.get_arguments().find(|a| a.get_id() == "mode"))
                .and_then(|a| a.get_help())
                .map(ToString::to_string)
                .expect("-k has help");
            for word in words {
                let location = if word == "s3" { "s3://b/x" } else { "/tmp/x" };
                let mut loc = crate::location::Location::parse(location).unwrap();
                assert_eq!(loc.apply_mode_words([(word, word)]), Ok(()), "{word}");
                assert!(
                    help.contains(&format!("`{word}`")),
                    "{command}: {word}: {help}"
                );
            }
        }
    }

    #[test]
    fn kind_words_set_the_mode_and_storage() {
        use crate::location::{Format, Location, Storage};
        let mut loc = Location::parse("s3://bucket/x").unwrap();
        kind(&["-k", "s3,NC4", "x.cdl"])
            .unwrap()
            .unwrap()
            .apply_to(&mut loc)
            .unwrap();
        assert_eq!(loc.mode.format, Some(Format::NcZarr));
        let mut loc = Location::parse("/tmp/x.file#mode=nczarr").unwrap();
        let zarr = kind(&["-k", "zarr,zip", "x.cdl"]).unwrap().unwrap();
        assert!(zarr.has("zarr") && zarr.has("zip") && !zarr.has("nczarr"));
        zarr.apply_to(&mut loc).unwrap();
        assert_eq!(loc.mode.format, Some(Format::Zarr));
        assert_eq!(loc.storage, Storage::Zip("/tmp/x.file".into()));
        assert!(kind(&["-4", "x.cdl"]).unwrap().unwrap().has("nczarr"));
    }

    #[test]
    fn classic_model_and_netcdf3_kinds_are_refused() {
        // ncgen's and nccopy's `-k 4` is the classic model, not netCDF-4.
        for word in [
            "4",
            "nc7",
            "netCDF-4 classic model",
            "netCDF-4-classic",
            "-7",
        ] {
            let err = ncgen_mode_words(&format!("{word},zip"))
                .unwrap_err()
                .to_string();
            assert!(
                err.contains("classic model") && err.contains("-k nc4"),
                "{err}"
            );
        }
        for word in [
            "1",
            "2",
            "5",
            "classic",
            "64-bit offset",
            "cdf5",
            "-3",
            "-6",
        ] {
            let err = ncgen_mode_words(word).unwrap_err().to_string();
            assert!(err.contains("netCDF-3 format"), "{err}");
        }
    }

    fn kind(args: &[&str]) -> Result<Option<KindWords>> {
        let cli =
            Cli::try_parse_from(["nczarrfs", "gen"].iter().chain(args).copied()).expect("parsed");
        match cli.command {
            Command::Gen(g) => g.kind.mode_words(),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn the_last_kind_option_counts_as_in_ncgen_and_nccopy() {
        let mode_words = |args: &[&str]| {
            kind(args)
                .unwrap()
                .map(|k| k.words.into_iter().map(|(w, _)| w).collect::<Vec<_>>())
        };
        assert_eq!(mode_words(&["x.cdl"]), None);
        assert_eq!(mode_words(&["-4", "x.cdl"]), Some(vec!["nczarr".into()]));
        assert_eq!(
            mode_words(&["-7", "-k", "nc4", "x.cdl"]),
            Some(vec!["nczarr".into()])
        );
        assert_eq!(
            mode_words(&["-k", "nc7", "-4", "x.cdl"]),
            Some(vec!["nczarr".into()])
        );
        assert_eq!(
            mode_words(&["-k", "zip", "-k", "zarr", "x.cdl"]),
            Some(vec!["zarr".into()])
        );
        assert!(kind(&["-4", "-k", "nc7", "x.cdl"]).is_err());
        assert!(kind(&["-k", "nc4", "-7", "x.cdl"]).is_err());
        assert!(kind(&["-4", "-3", "x.cdl"]).is_err());
    }

    #[test]
    fn integers_of_the_wrong_form_and_out_of_range_are_told_apart() {
        assert_eq!(integer_in("7", "n", 0..=9u32), Ok(7));
        assert_eq!(integer_in("+7", "n", 0..=9u32), Ok(7));
        for wrong in ["", "x", "7x", "-", "1.5", "0x10"] {
            assert!(
                matches!(
                    integer_in(wrong, "n", 0..=9u32),
                    Err(OptionValueError::WrongForm(_))
                ),
                "{wrong}"
            );
        }
        let past_i128 = "9".repeat(50);
        for out in ["10", "-1", "99999999999999999999", &past_i128] {
            assert!(
                matches!(
                    integer_in(out, "n", 0..=9u32),
                    Err(OptionValueError::OutOfRange(_))
                ),
                "{out}"
            );
        }
    }

    /// The exit status of a command line the parser refuses, as `main` takes it.
    fn parse_status(args: &[&str]) -> i32 {
        let err = Cli::try_parse_from(["nczarrfs"].iter().chain(args).copied()).unwrap_err();
        parse_refusal(&err).map_or(err.exit_code(), |(_, status)| status)
    }

    #[test]
    fn parser_refusals_exit_1_out_of_range_and_2_of_the_wrong_form() {
        assert_eq!(parse_status(&["copy", "-d", "10", "a", "b"]), 1);
        assert_eq!(
            parse_status(&["copy", "-d", "99999999999999999999", "a", "b"]),
            1
        );
        assert_eq!(parse_status(&["copy", "-d", "x", "a", "b"]), 2);
        assert_eq!(
            parse_status(&["copy", "-h", "99999999999999999999", "a", "b"]),
            1
        );
        assert_eq!(parse_status(&["copy", "-h", "4X", "a", "b"]), 2);
        assert_eq!(parse_status(&["dump", "-p", "21", "a"]), 1);
        assert_eq!(parse_status(&["dump", "-p", "x", "a"]), 2);
        assert_eq!(parse_status(&["dump", "--bogus", "a"]), 2);
        // A negative number is a number, out of range, after a space as after `=`: the
        // parser takes it as the option's value, not as an option.
        for negative in [
            &["copy", "-d", "-1", "a", "b"][..],
            &["copy", "-d=-1", "a", "b"],
            &["copy", "-h", "-1", "a", "b"],
            &["copy", "--cache-size", "-1K", "a", "b"],
            &["dump", "-p", "-1", "a"],
        ] {
            assert_eq!(parse_status(negative), 1, "{negative:?}");
        }
    }

    #[test]
    fn a_variable_missing_at_the_root_is_shown_in_its_groups() {
        use crate::model::{Dataset, NcType, Variable};
        let mut ds = Dataset::new();
        let g = ds.add_group(Dataset::ROOT, "station");
        ds.add_var(Variable {
            name: "observed".into(),
            group: g,
            nctype: NcType::Int,
            dims: Vec::new(),
            string_width: 0,
            attrs: Vec::new(),
            storage: Default::default(),
        });
        let e = no_variable(&ds, "observed", "ds.file").to_string();
        assert!(e.contains("in a group: /station/observed"), "{e}");
        let e = no_variable(&ds, "missing", "ds.file").to_string();
        assert!(e.contains("`nczarrfs dump -h` lists them"), "{e}");
    }
}
