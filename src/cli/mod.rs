//! The command line: one binary, one subcommand per job.

use clap::{Parser, Subcommand};

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
    /// Detach MOUNTPOINT if it is the dead mount of an nczarrfs daemon that died without
    /// unmounting ("Transport endpoint is not connected"); leave any other mount alone. For
    /// a service manager's cleanup after the daemon stopped.
    DetachDead(mount::DetachDeadArgs),
    /// Create a dataset from a CDL file, like ncgen.
    Gen(gen::GenArgs),
    /// Copy a dataset to any storage and dialect, re-chunking and re-compressing, like nccopy.
    Copy(copy::CopyArgs),
    /// Internal, started by the commands that write: renames the writer's temporary
    /// metadata files into place in sets that a kill of the writer cannot cut.
    #[command(name = crate::zmap::RENAME_HELPER_COMMAND, hide = true)]
    RenameHelper,
    /// Internal, started by an interrupted `gen` or `copy`: removes its staging paths
    /// (`.NAME.nczarrfs-PID.TOKEN`, PID being that process) once it has exited; refuses any other.
    #[command(name = crate::interrupt::REMOVE_STAGING_COMMAND, hide = true)]
    RemoveStaging {
        /// The staging directories or archives.
        paths: Vec<std::path::PathBuf>,
    },
}

/// `-k` words with ncgen's and nccopy's format names (`nc4`, `4`, `netCDF-4`, ...) read as
/// `nczarr`; every other word as typed, so that a message quotes it as the user wrote it.
fn ncgen_mode_words(words: &str) -> String {
    words
        .split(',')
        .map(|w| match w.trim().to_ascii_lowercase().as_str() {
            "nc4" | "netcdf-4" | "netcdf4" | "4" | "hdf5" => "nczarr",
            _ => w,
        })
        .collect::<Vec<_>>()
        .join(",")
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
fn refuse_standard_output(location: &str) -> Result<()> {
    match location {
        "-" => Err(crate::Error::Invalid(
            "a dataset cannot be written to standard output (`-`): give a path (`./-` for \
             one named `-`)"
                .to_string(),
        )),
        _ => Ok(()),
    }
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

/// Runs the parsed command line; returns the process exit code.
pub fn run(cli: Cli) -> Result<i32> {
    if matches!(cli.command, Command::Gen(_) | Command::Copy(_)) {
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
        Command::Dump(args) => dump::run(args),
        Command::Get(args) => get::run(args),
        Command::Put(args) => put::run(args),
        Command::Mount(args) => mount::run(args),
        Command::DetachDead(args) => mount::detach_dead(args),
        Command::Gen(args) => gen::run(args),
        Command::Copy(args) => copy::run(args),
        Command::RenameHelper => crate::zmap::serve_renames().map(|()| 0),
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

    #[test]
    fn ncgen_format_names_are_nczarr_and_other_words_stay_as_typed() {
        assert_eq!(ncgen_mode_words("nc4,zip"), "nczarr,zip");
        assert_eq!(ncgen_mode_words("netCDF-4,V3"), "nczarr,V3");
        let mut loc = crate::location::Location::parse("/tmp/x.file").unwrap();
        let err = crate::create::apply_mode_words(&mut loc, &ncgen_mode_words("netCDF-4-classic"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"netCDF-4-classic\""), "{err}");
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
