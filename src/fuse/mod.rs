//! The FUSE filesystem: groups and variables as directories, metadata as files, values as a
//! flat `data` file per variable. The only layer that knows about inodes.
//!
//! The layout (a contract, documented in docs/mount.md):
//!
//! ```text
//! MOUNT/                 the root group
//!   @header.cdl          `ncdump -h` of the dataset
//!   @metadata.json       dimensions, attributes with types, variables and subgroups
//!   @attributes/NAME     one file per group attribute
//!   VAR/                 one directory per variable
//!     data               values: C order, native byte order, strings NUL-padded
//!     @header.cdl        the variable's declaration and attributes in CDL
//!     @metadata.json     type, dtype of `data`, shape, dimensions, chunks, codecs, fill value
//!     @attributes/NAME
//!   GROUP/               a subgroup, laid out like the root
//! ```

mod content;
mod daemon;
mod extents;
mod fs;
mod inodes;
mod layout;
pub mod logging;
mod options;
mod sizes;
mod slab;
mod splice;
mod stream;
mod workers;
mod write;

pub use daemon::{detach_dead, mount, MountRequest};
pub use fs::{read_data, MountHandle, NczarrFs, Snapshot, Source};
pub use options::{MountOptions, DEFAULT_TTL};
