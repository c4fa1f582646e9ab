//! `nczarrfs get`: the raw values of a hyperslab.

use crate::{Error, Result};

/// Arguments of `get`.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// The dataset: a path or a URL.
    pub location: String,
    /// The variable's name or full name (`/g1/v`).
    pub var: String,
}

/// Runs `get`.
pub fn run(args: GetArgs) -> Result<i32> {
    Err(Error::Unsupported(format!("get {} {}", args.location, args.var)))
}
