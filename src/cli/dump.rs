//! `nczarrfs dump`: ncdump's output for an NCZarr or Zarr dataset.

use crate::{Error, Result};

/// Arguments of `dump`.
#[derive(Debug, clap::Args)]
pub struct DumpArgs {
    /// The dataset: a path or a URL.
    pub location: String,
}

/// Runs `dump`.
pub fn run(args: DumpArgs) -> Result<i32> {
    Err(Error::Unsupported(format!("dump {}", args.location)))
}
