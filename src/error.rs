//! The crate-wide error type. Each layer adds context (which object, which variable) so that a
//! message on stderr or in the mount's log names what went wrong and where.

use std::path::PathBuf;

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong between a location string and a hyperslab.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The location string cannot be understood.
    #[error("invalid location {location:?}: {reason}")]
    InvalidLocation {
        /// The location as given by the user.
        location: String,
        /// Why it was refused.
        reason: String,
    },
    /// The location exists but holds no Zarr or NCZarr dataset.
    #[error("{location}: not a netCDF/Zarr dataset ({reason})")]
    NotZarr {
        /// The location as given by the user.
        location: String,
        /// What was found instead.
        reason: String,
    },
    /// An operating-system error on a local path.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file or directory concerned.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// A storage-level failure (zip archive, object store) on one key.
    #[error("storage error on key {key:?}: {reason}")]
    Storage {
        /// The zmap key concerned.
        key: String,
        /// What failed.
        reason: String,
    },
    /// A key that must exist does not.
    #[error("missing object {key:?}")]
    MissingObject {
        /// The zmap key concerned.
        key: String,
    },
    /// A metadata object is not valid JSON.
    #[error("corrupt JSON in {key:?} at line {line}, column {column}: {reason}")]
    CorruptJson {
        /// The zmap key of the object.
        key: String,
        /// 1-based line of the error.
        line: usize,
        /// 1-based column of the error.
        column: usize,
        /// serde_json's description.
        reason: String,
    },
    /// Metadata is valid JSON but does not describe a valid dataset.
    #[error("invalid metadata in {key:?}: {reason}")]
    InvalidMetadata {
        /// The zmap key of the object.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A dtype this implementation cannot represent as a netCDF type.
    #[error("unsupported dtype {dtype:?}")]
    UnsupportedDtype {
        /// The dtype string as stored.
        dtype: String,
    },
    /// A codec that is not implemented.
    #[error("unknown codec {name:?}")]
    UnknownCodec {
        /// The codec id (v2) or name (v3).
        name: String,
    },
    /// A codec failed to decode or encode a chunk.
    #[error("codec {codec} failed: {reason}")]
    Codec {
        /// The codec id.
        codec: String,
        /// What failed.
        reason: String,
    },
    /// A chunk decoded to the wrong number of bytes, or failed to decode.
    #[error("chunk {key:?}: {reason}")]
    BadChunk {
        /// The zmap key of the chunk.
        key: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A variable was opened that exists but cannot be read (unsupported dtype, unknown codec).
    #[error("variable {var}: {reason}")]
    Unreadable {
        /// The variable's full name.
        var: String,
        /// Why it cannot be read.
        reason: String,
    },
    /// A name (variable, group, dimension, attribute) was not found.
    #[error("not found: {0}")]
    NotFound(String),
    /// A hyperslab that does not fit the variable.
    #[error("invalid hyperslab: {0}")]
    InvalidHyperslab(String),
    /// An operation that the netCDF data model forbids.
    #[error("not permitted: {0}")]
    NotPermitted(String),
    /// A change that would make a variable larger than a file offset can address.
    #[error("too large: {0}")]
    TooLarge(String),
    /// A value that the variable's stored type cannot hold (netCDF's `NC_ERANGE`); the
    /// message names the variable, the value's index and why.
    #[error("value not representable: {0}")]
    Unrepresentable(String),
    /// A request that is malformed (bad option, bad value).
    #[error("{0}")]
    Invalid(String),
    /// A dataset that another process is writing (see [`crate::zmap::ZMap::claim_writer`]).
    #[error("{0}")]
    Busy(String),
    /// A feature that is not implemented yet.
    #[error("not supported: {0}")]
    Unsupported(String),
    /// A CDL text that cannot be parsed or does not describe a valid dataset; the message
    /// reads like a compiler's (`x.cdl:12:7: type mismatch: ...`).
    #[error("{file}:{line}:{column}: {reason}")]
    Cdl {
        /// The file name (or `-`) the text came from.
        file: String,
        /// 1-based line.
        line: usize,
        /// 1-based column (in characters).
        column: usize,
        /// What is wrong.
        reason: String,
    },
}

impl Error {
    /// Builds [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Builds [`Error::CorruptJson`] from a serde_json error on `key`.
    pub fn json(key: &str, err: &serde_json::Error) -> Self {
        Error::CorruptJson {
            key: key.to_string(),
            line: err.line(),
            column: err.column(),
            reason: err.to_string(),
        }
    }

    /// Builds [`Error::InvalidMetadata`].
    pub fn meta(key: &str, reason: impl Into<String>) -> Self {
        Error::InvalidMetadata {
            key: key.to_string(),
            reason: reason.into(),
        }
    }

    /// The errno a filesystem operation that failed with this error should return.
    pub fn errno(&self) -> i32 {
        match self {
            Error::NotFound(_) | Error::MissingObject { .. } => libc::ENOENT,
            Error::NotPermitted(_) => libc::EPERM,
            Error::TooLarge(_) => libc::EFBIG,
            Error::Unrepresentable(_) => libc::ERANGE,
            Error::InvalidHyperslab(_) | Error::Invalid(_) => libc::EINVAL,
            Error::Unsupported(_) => libc::ENOTSUP,
            Error::Busy(_) => libc::EBUSY,
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            _ => libc::EIO,
        }
    }
}
