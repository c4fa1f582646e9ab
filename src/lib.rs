#![warn(missing_docs)]
//! nczarrfs: the netCDF-4 data model stored as Zarr (NCZarr), read and written exactly,
//! served as a FUSE filesystem and through a command line.
//!
//! Data flows one way through the layers:
//!
//! ```text
//! location (URL / path) → zmap (key/value storage) → meta (Zarr / NCZarr dialects)
//!     → model (groups, dims, vars, attrs) → chunk (codecs, cache, hyperslabs)
//!     → cdl (ncdump / ncgen text) and fuse / cli (the user-facing layers)
//! ```
//!
//! Nothing below [`fuse`] knows about inodes; nothing below [`meta`] knows about JSON dialects.

pub mod cdl;
pub mod chunk;
pub mod cli;
pub mod codec;
pub mod create;
pub mod dataset;
pub mod error;
pub mod fuse;
pub mod interrupt;
pub mod location;
pub mod meta;
pub mod model;
pub mod zmap;

pub use error::{Error, Result};
