//! `nczarrfs dump`: ncdump's output for an NCZarr or Zarr dataset.

use std::io::Write;

use crate::cdl::writer::{dump, DumpOptions};
use crate::dataset::{OpenDataset, DEFAULT_CACHE_BYTES};
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
    #[arg(short = 'v', long = "vars", value_delimiter = ',')]
    pub vars: Option<Vec<String>>,
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
    /// Print only the kind of the dataset, as `ncdump -k` does (`netCDF-4`, which is what
    /// netcdf-c reports for NCZarr and Zarr).
    #[arg(short = 'k', long = "kind")]
    pub kind: bool,
    /// The dataset: a path or a URL.
    pub location: String,
}

/// Runs `dump`.
pub fn run(args: DumpArgs) -> Result<i32> {
    let open = OpenDataset::open(&args.location, DEFAULT_CACHE_BYTES)?;
    if args.kind {
        println!("netCDF-4");
        return Ok(0);
    }
    let opts = DumpOptions {
        header_only: args.header_only,
        coords_only: args.coords_only,
        vars: args
            .vars
            .map(|v| v.into_iter().filter(|s| !s.is_empty()).collect()),
        name: args.name,
        special: args.special,
        all_filters: args.all_filters,
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
