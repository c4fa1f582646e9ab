//! The crate-wide error type. Each layer adds context (which object, which variable) so that a
//! message on stderr or in the mount's log names what went wrong and where.

use std::path::PathBuf;

use crate::meta::json::quote_into;

/// Result with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong between a location string and a hyperslab.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The location string cannot be understood.
    #[error("invalid location {}: {reason}", quoted(location))]
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
    /// A group of an NCZarr dataset opened as a dataset of its own: its NCZarr metadata names
    /// dimensions from the dataset's root, which is not there (netcdf-c reads such a group
    /// as pure Zarr instead, which loses its NCZarr dimensions).
    #[error("{}", group_inside_nczarr(location, dataset.as_ref()))]
    GroupInsideNczarr {
        /// The location as given by the user.
        location: String,
        /// The dataset's root and the group's full name in it, where they were found.
        dataset: Option<(String, String)>,
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
    #[error("storage error on key {}: {reason}", quoted(key))]
    Storage {
        /// The zmap key concerned.
        key: String,
        /// What failed.
        reason: String,
    },
    /// A group, variable or key whose file a directory store cannot name: its path would
    /// reach the system's `PATH_MAX`, or one of its names pass `NAME_MAX` (groups nested
    /// too deeply, as a rule). Refused before anything is written (`ENAMETOOLONG`).
    #[error("{what} {}: {reason}", quoted(name))]
    PathTooLong {
        /// `group`, `variable` or `key`.
        what: &'static str,
        /// The group's or variable's full name, or the key.
        name: String,
        /// How long the path would be, and the limit.
        reason: String,
    },
    /// A key that must exist does not.
    #[error("missing object {}", quoted(key))]
    MissingObject {
        /// The zmap key concerned.
        key: String,
    },
    /// A metadata object is not valid JSON.
    #[error(
        "corrupt JSON in {} at line {line}, column {column}: {reason}",
        quoted(key)
    )]
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
    #[error("invalid metadata in {}: {reason}", quoted(key))]
    InvalidMetadata {
        /// The zmap key of the object.
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// An entry of a consolidated summary (`.zmetadata`, a Zarr v3 root's
    /// `consolidated_metadata`) is valid JSON but does not describe a valid object. The object
    /// itself, which may well be intact, is not read while the summary has an entry for it.
    #[error(
        "invalid metadata in {summary} (its entry for {}): {reason}",
        quoted(entry)
    )]
    InvalidSummaryEntry {
        /// The summary as messages name it (`".zmetadata"`, `the consolidated_metadata of
        /// "zarr.json"`).
        summary: String,
        /// The key of the object (v2) or the node path (v3) the entry stands for.
        entry: String,
        /// What is wrong.
        reason: String,
    },
    /// A metadata object (`.zarray`, `.zattrs`, `.zmetadata`, `zarr.json`, …) longer than
    /// metadata is read ([`crate::zmap::METADATA_LIMIT`]): damaged, or not metadata at all.
    /// It is refused before it is read.
    #[error(
        "metadata object {} is {} the {limit} bytes that nczarrfs reads of a metadata \
         object: it is damaged, or not metadata",
        quoted(key),
        size.map_or_else(|| "longer than".to_string(), |n| format!("{n} bytes long, more than"))
    )]
    MetadataTooLarge {
        /// The zmap key of the object.
        key: String,
        /// Its length when known (a server may not say; a file may grow while it is read).
        size: Option<u64>,
        /// The most bytes a metadata object may have.
        limit: u64,
    },
    /// A dtype this implementation cannot represent as a netCDF type.
    #[error("unsupported dtype {}", quoted(dtype))]
    UnsupportedDtype {
        /// The dtype string as stored.
        dtype: String,
    },
    /// A codec that is not implemented.
    #[error("unknown codec {}", quoted(name))]
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
    /// A codec parameter that is an integer, outside the values the codec takes (a zlib
    /// level of 15); as [`Error::Codec`] in every other way, but told apart where a command
    /// line option gave the codec (`--codec`: exit status 1, where a parameter of the wrong
    /// type exits 2).
    #[error("codec {codec} failed: {reason}")]
    CodecOutOfRange {
        /// The codec id.
        codec: String,
        /// Which parameter, its value and the values the codec accepts.
        reason: String,
    },
    /// A chunk decoded to the wrong number of bytes, or failed to decode.
    #[error("chunk {}: {reason}", quoted(key))]
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
    /// A write to a variable whose chunks its codecs cannot encode: a parameter only
    /// encoding uses is out of the codec's range (a zlib level of 15). The variable reads as
    /// usual; the write is refused before anything is written.
    #[error(
        "variable {var}: codec {codec} cannot encode: {reason}; the variable reads as usual, \
         but cannot be written"
    )]
    Unencodable {
        /// The variable's full name.
        var: String,
        /// The codec id.
        codec: String,
        /// Which parameter, its value and the values the codec accepts.
        reason: String,
    },
    /// A variable's Zarr v2 codec whose parameters have no Zarr v3 form that zarr-python 3
    /// opens (numcodecs itself could not compress with them): nothing is written.
    #[error(
        "variable {var}: codec {codec} has no Zarr v3 form: {reason}; choose another with \
         -d N (zlib) or --codec CHAIN"
    )]
    NoZarrV3Form {
        /// The variable's full name.
        var: String,
        /// The codec id.
        codec: String,
        /// Which parameter and why.
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
    /// A command line option whose value has the wrong form (`--cache-size xyz`): exit status
    /// 2, as for the options the command line parser itself refuses.
    #[error("{0}")]
    Usage(String),
    /// A dataset that another process is writing (see [`crate::zmap::ZMap::claim_writer`]).
    #[error("{0}")]
    Busy(String),
    /// The directory of an open directory store was removed (the dataset deleted, or
    /// replaced by a rename and the old one deleted): what the metadata read from it
    /// describes is gone, and objects found at its path now belong to another dataset, which
    /// only a fresh open may read (`EIO`).
    #[error(
        "{}: the dataset was removed or replaced while open; open it again to read what is there now",
        path.display()
    )]
    RemovedUnderneath {
        /// The dataset's root directory, as the location named it.
        path: PathBuf,
    },
    /// An object of an open dataset read after its storage was replaced as a whole (a
    /// directory store's root directory or a zip archive put in its place, found when the
    /// metadata was read again): it belongs to another dataset than the metadata read before,
    /// which only that dataset's own metadata may read (`EIO`).
    #[error(
        "{dataset}: the dataset was replaced while open; open it again to read what is there now"
    )]
    ReplacedUnderneath {
        /// The dataset's location, as the map describes it.
        dataset: String,
    },
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

/// The refusal of a command line option's value, of one of the two kinds README's exit
/// statuses tell apart, whichever option gives it and whether the command line parser or the
/// command refuses it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OptionValueError {
    /// A value of the wrong form (`--start a`, `--codec nope`, `dump -p x`): the command line
    /// cannot be parsed, exit status 2.
    #[error("{0}")]
    WrongForm(String),
    /// A value of the option's form outside its range (`copy -d 10`, `dump -p 21`, a number
    /// past 2^64): exit status 1.
    #[error("{0}")]
    OutOfRange(String),
}

impl From<OptionValueError> for Error {
    fn from(refusal: OptionValueError) -> Error {
        match refusal {
            OptionValueError::WrongForm(m) => Error::Usage(m),
            OptionValueError::OutOfRange(m) => Error::Invalid(m),
        }
    }
}

impl Error {
    /// This error, as the refusal of a command line option's value ([`Error::Usage`]).
    pub fn into_usage(self) -> Error {
        match self {
            Error::Usage(_) => self,
            other => Error::Usage(other.to_string()),
        }
    }

    /// This error of a codec chain's [`crate::codec::Pipeline::check_encodable`] as the
    /// [`Error::Unencodable`] of variable `var`.
    pub fn unencodable(self, var: &str) -> Error {
        match self {
            Error::Codec { codec, reason } | Error::CodecOutOfRange { codec, reason } => {
                Error::Unencodable {
                    var: var.to_string(),
                    codec,
                    reason,
                }
            }
            other => other,
        }
    }

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
            Error::NotPermitted(_) | Error::Unencodable { .. } => libc::EPERM,
            Error::TooLarge(_) => libc::EFBIG,
            Error::Unrepresentable(_) => libc::ERANGE,
            Error::InvalidHyperslab(_) | Error::Invalid(_) => libc::EINVAL,
            Error::Unsupported(_) => libc::ENOTSUP,
            Error::Busy(_) => libc::EBUSY,
            Error::PathTooLong { .. } => libc::ENAMETOOLONG,
            Error::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
            _ => libc::EIO,
        }
    }
}

/// How many characters of a name or value taken from stored data a message repeats: a
/// damaged or hostile object can hold a string of megabytes, which would flood a terminal or
/// the mount's log.
pub const QUOTE_LIMIT: usize = 100;

/// Characters kept from the start of a text cut to [`QUOTE_LIMIT`]; the rest come from its
/// end, which is where a long key names its object (`g/g/…/g/v/.zarray`).
const QUOTE_HEAD: usize = 40;

/// `text` (a key, name or value from stored data) as a message shows it: in double quotes
/// with JSON's escapes for quotes, backslashes and control characters, and cut to
/// [`QUOTE_LIMIT`] characters with an ellipsis in the middle.
pub fn quoted(text: &str) -> String {
    let mut out = String::new();
    match cut(text) {
        Some((head, tail)) => {
            quote_into(head, &mut out);
            out.pop();
            let mut rest = String::new();
            quote_into(tail, &mut rest);
            out.push('…');
            out.push_str(&rest[1..]);
        }
        None => quote_into(text, &mut out),
    }
    out
}

/// `bytes` (a command line argument, say) as a message shows bytes that need not be UTF-8:
/// UTF-8 as it is, every other byte as `\xNN`.
pub fn escaped_bytes(bytes: &[u8]) -> String {
    let mut shown = String::new();
    for chunk in bytes.utf8_chunks() {
        shown.push_str(chunk.valid());
        for b in chunk.invalid() {
            shown.push_str(&format!("\\x{b:02x}"));
        }
    }
    shown
}

/// `text` (an already formatted value from stored data, such as a JSON value) cut to
/// [`QUOTE_LIMIT`] characters with an ellipsis in the middle.
pub fn capped(text: &str) -> String {
    match cut(text) {
        Some((head, tail)) => format!("{head}…{tail}"),
        None => text.to_string(),
    }
}

/// The head and tail that [`quoted`] and [`capped`] keep of a text longer than
/// [`QUOTE_LIMIT`] characters.
fn cut(text: &str) -> Option<(&str, &str)> {
    let chars = text.chars().count();
    if chars <= QUOTE_LIMIT {
        return None;
    }
    let at = |n: usize| text.char_indices().nth(n).map_or(text.len(), |(i, _)| i);
    Some((
        &text[..at(QUOTE_HEAD)],
        &text[at(chars - (QUOTE_LIMIT - QUOTE_HEAD))..],
    ))
}

/// The message of [`Error::GroupInsideNczarr`], naming the options that select the group
/// from its dataset where the dataset was found.
fn group_inside_nczarr(location: &str, dataset: Option<&(String, String)>) -> String {
    let (what, remedy) = match dataset {
        Some((root, group)) => {
            // `copy -G` takes a group with its parents only.
            let with_parents: Vec<String> = group
                .match_indices('/')
                .skip(1)
                .map(|(i, _)| group[..i].to_string())
                .chain([group.clone()])
                .collect();
            (
                format!("the group {group} of the NCZarr dataset {root}"),
                format!(
                    "open the dataset and select the group (copy -G {} {root} OUT, dump -g \
                     {group} {root})",
                    with_parents.join(",")
                ),
            )
        }
        None => (
            "a group inside an NCZarr dataset (its metadata has no _nczarr_superblock, which \
             a dataset's root holds)"
                .to_string(),
            "open the dataset and select the group (copy -G, dump -g)".to_string(),
        ),
    };
    format!(
        "{location} is {what}, not a dataset: NCZarr names the group's dimensions from the \
         dataset's root; {remedy}, or read the group alone as pure Zarr with #mode=zarr (as \
         netcdf-c reads it: dimensions from _ARRAY_DIMENSIONS, none unlimited)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quoted_escapes_like_json_and_caps_the_length() {
        assert_eq!(quoted("t/.zarray"), r#""t/.zarray""#);
        assert_eq!(quoted("a\"b\u{5}\0"), r#""a\"b\u0005\u0000""#);
        let long = format!("{}{}.zarray", "a".repeat(100_000), "\n");
        assert_eq!(
            quoted(&long),
            format!("\"{}…{}\\n.zarray\"", "a".repeat(40), "a".repeat(52))
        );
        assert_eq!(
            quoted(&"é".repeat(QUOTE_LIMIT)),
            format!("\"{}\"", "é".repeat(QUOTE_LIMIT))
        );
    }

    #[test]
    fn escaped_bytes_keep_utf8_and_show_other_bytes_in_hex() {
        assert_eq!(escaped_bytes(b"caf\xc3\xa9"), "café");
        assert_eq!(escaped_bytes(b"a\xff\xc3=1"), "a\\xff\\xc3=1");
    }

    #[test]
    fn capped_cuts_long_text_only() {
        assert_eq!(capped("[1,2]"), "[1,2]");
        assert_eq!(
            capped(&"7".repeat(500)),
            format!("{}…{}", "7".repeat(40), "7".repeat(60))
        );
    }

    #[test]
    fn messages_quote_keys_without_rust_escapes() {
        let e = Error::Storage {
            key: "ds/vPK\u{5}\u{6}\0".into(),
            reason: "x".into(),
        };
        assert_eq!(
            e.to_string(),
            r#"storage error on key "ds/vPK\u0005\u0006\u0000": x"#
        );
    }
}
