//! Dataset locations: plain paths and netcdf-c style URLs with `#mode=...` fragments.

use std::path::PathBuf;

/// Where a dataset is stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Storage {
    /// A directory tree.
    File(PathBuf),
    /// A zip archive.
    Zip(PathBuf),
    /// An S3 bucket (or S3-compatible server).
    S3(S3Location),
    /// An in-memory map (tests, scratch).
    Memory,
}

/// An S3 dataset location.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct S3Location {
    /// `http(s)://host[:port]` for a non-AWS server or a path-style AWS URL; `None` for `s3://`.
    pub endpoint: Option<String>,
    /// Bucket name.
    pub bucket: String,
    /// Key prefix of the dataset root inside the bucket (no leading/trailing `/`).
    pub prefix: String,
    /// Region, from the URL host or the `aws.region` fragment key.
    pub region: Option<String>,
    /// Profile, from `aws.profile` or `awsprofile`.
    pub profile: Option<String>,
}

/// Which metadata convention to read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// NCZarr (netCDF extensions on Zarr).
    NcZarr,
    /// Pure Zarr (no NCZarr metadata).
    Zarr,
}

/// The `mode=` flags and other fragment keys of a location.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Mode {
    /// `nczarr` or `zarr`; `None` to infer by probing.
    pub format: Option<Format>,
    /// `xarray` (`Some(true)`) or `noxarray` (`Some(false)`).
    pub xarray: Option<bool>,
    /// `v2` or `v3`; `None` to infer by probing.
    pub zarr_version: Option<u8>,
    /// `consolidated`.
    pub consolidated: bool,
}

/// A parsed dataset location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The text the user gave.
    pub original: String,
    /// The storage.
    pub storage: Storage,
    /// The mode flags.
    pub mode: Mode,
}

impl Location {
    /// Parses a plain path or a URL (`file://`, `s3://`, `http(s)://`) with an optional
    /// `#mode=...` fragment.
    pub fn parse(text: &str) -> crate::Result<Location> {
        Ok(Location {
            original: text.to_string(),
            storage: Storage::File(PathBuf::from(text)),
            mode: Mode::default(),
        })
    }

    /// The dataset name as ncdump derives it: the last path component without its extension.
    pub fn dataset_name(&self) -> String {
        let path = match &self.storage {
            Storage::File(p) | Storage::Zip(p) => p.to_string_lossy().into_owned(),
            Storage::S3(s3) => s3.prefix.clone(),
            Storage::Memory => String::new(),
        };
        let last = path.trim_end_matches('/').rsplit('/').next().unwrap_or("");
        match last.find('.') {
            Some(i) if i > 0 => last[..i].to_string(),
            _ => last.to_string(),
        }
    }
}
