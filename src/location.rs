//! Dataset locations: plain paths and netcdf-c style URLs with `#mode=...` fragments.
//!
//! A plain path is any bytes, as Linux file names are; a URL is text (UTF-8), whose
//! `file://` path may spell other bytes with `%XX`.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use percent_encoding::percent_decode_str;

use crate::{Error, Result};

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
    /// The text the user gave: a path's bytes, as given.
    pub original: OsString,
    /// The storage.
    pub storage: Storage,
    /// The mode flags.
    pub mode: Mode,
}

impl Location {
    /// Parses a plain path or a URL (`file://`, `s3://`, `http(s)://`) with an optional
    /// `#mode=...` fragment.
    ///
    /// A plain path or `file://` URL without a `file`/`zip` mode word is probed: an existing
    /// regular file that starts like a zip archive is [`Storage::Zip`], anything else that
    /// exists is [`Storage::File`], and a missing path is a zip only if it ends in `.zip`.
    /// A plain path that does not exist but contains `#key=value` is split there, so that the
    /// fragment syntax of URLs also works on paths.
    ///
    /// A location that is not UTF-8 can only be a plain path, whose fragment, if any, must
    /// still be text: a URL is text, as netcdf-c reads it.
    pub fn parse(text: impl AsRef<OsStr>) -> Result<Location> {
        let given = text.as_ref();
        let invalid = |reason: String| Error::InvalidLocation {
            location: given.to_string_lossy().into_owned(),
            reason,
        };
        if given.is_empty() {
            return Err(invalid("empty location".into()));
        }
        let Some(text) = given.to_str() else {
            if let Some((scheme, _)) = split_scheme(&given.to_string_lossy()) {
                return Err(invalid(format!(
                    "a {scheme}:// URL must be UTF-8 text: give the path itself, or spell its \
                     other bytes as %XX in a file:// URL"
                )));
            }
            return parse_plain_path(given);
        };
        let Some((scheme, rest)) = split_scheme(text) else {
            return parse_plain_path(given);
        };
        let (rest, fragment) = match rest.split_once('#') {
            Some((rest, fragment)) => (rest, fragment),
            None => (rest, ""),
        };
        // Queries carry nothing NCZarr uses (netcdf-c ignores them too).
        let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
        let frag = Fragment::parse(fragment).map_err(invalid)?;
        let storage = match scheme.as_str() {
            "file" => {
                if frag.storage == Some(StorageWord::S3) {
                    return Err(invalid(
                        "mode s3 needs an s3:// or http(s):// URL, not file://".into(),
                    ));
                }
                let path = file_url_path(rest).map_err(invalid)?;
                local_storage(path, frag.storage)
            }
            "s3" | "http" | "https" => {
                if matches!(frag.storage, Some(StorageWord::File | StorageWord::Zip)) {
                    return Err(invalid(format!(
                        "modes file and zip need a local path or file:// URL, not {scheme}://"
                    )));
                }
                Storage::S3(parse_s3(&scheme, rest, &frag).map_err(invalid)?)
            }
            other => {
                return Err(invalid(format!(
                    "unsupported URL scheme {other:?} (use file, s3, http or https)"
                )))
            }
        };
        Ok(Location {
            original: given.to_os_string(),
            storage,
            mode: frag.mode,
        })
    }

    /// Applies mode words given apart from the location (`gen -k`, `copy -k`), each as the
    /// mode word it stands for and as given, which a refusal quotes. They override what the
    /// location's fragment says; `file` and `zip` make a local location a directory tree or a
    /// zip archive, and `s3` takes an S3 one. The error is the reason of a refusal.
    pub fn apply_mode_words<'a>(
        &mut self,
        words: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> std::result::Result<(), String> {
        let mut frag = Fragment::default();
        let mut unknown = Vec::new();
        for (word, shown) in words {
            if !frag.apply_mode_word(&word.to_ascii_lowercase(), shown)? {
                unknown.push(format!("{shown:?}"));
            }
        }
        if !unknown.is_empty() {
            return Err(format!("unknown mode word(s) {}", unknown.join(", ")));
        }
        let m = frag.mode;
        self.mode.format = m.format.or(self.mode.format);
        self.mode.xarray = m.xarray.or(self.mode.xarray);
        self.mode.zarr_version = m.zarr_version.or(self.mode.zarr_version);
        self.mode.consolidated |= m.consolidated;
        let storage_word = frag.given.get("storage").map_or("", String::as_str);
        match (frag.storage, &self.storage) {
            (None, _) | (Some(StorageWord::S3), Storage::S3(_)) => Ok(()),
            (Some(StorageWord::S3), _) => Err(format!(
                "mode {storage_word} needs an s3:// or http(s):// URL, not {}",
                self.shown()
            )),
            (Some(w), Storage::File(p) | Storage::Zip(p)) => {
                let p = p.clone();
                self.storage = match w {
                    StorageWord::Zip => Storage::Zip(p),
                    _ => Storage::File(p),
                };
                Ok(())
            }
            (Some(_), _) => Err(format!(
                "mode {storage_word} needs a local destination, not {}",
                self.shown()
            )),
        }
    }

    /// The location as messages show it: as given, with bytes that are not UTF-8 shown as
    /// U+FFFD.
    pub fn shown(&self) -> Cow<'_, str> {
        self.original.to_string_lossy()
    }

    /// The dataset name as ncdump derives it: the last path component, cut at its last `.`
    /// (`a.b.nc` → `a.b`, `x.zarr.zip` → `x.zarr`, `.hidden` → ``). A trailing `/` is ignored.
    /// An S3 location without a key prefix is named after its bucket. The bytes of a path
    /// are kept as they are, UTF-8 or not, as ncdump keeps them.
    pub fn dataset_name(&self) -> OsString {
        let path: &[u8] = match &self.storage {
            Storage::File(p) | Storage::Zip(p) => p.as_os_str().as_bytes(),
            Storage::S3(s3) if s3.prefix.is_empty() => s3.bucket.as_bytes(),
            Storage::S3(s3) => s3.prefix.as_bytes(),
            Storage::Memory => b"",
        };
        let end = path.iter().rposition(|&b| b != b'/').map_or(0, |i| i + 1);
        let path = &path[..end];
        let last = match path.iter().rposition(|&b| b == b'/') {
            Some(i) => &path[i + 1..],
            None => path,
        };
        let stem = match last.iter().rposition(|&b| b == b'.') {
            Some(i) => &last[..i],
            None => last,
        };
        OsString::from_vec(stem.to_vec())
    }
}

/// A storage medium named in the `mode=` list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StorageWord {
    File,
    Zip,
    S3,
}

/// What a URL fragment says.
#[derive(Debug, Default)]
struct Fragment {
    mode: Mode,
    storage: Option<StorageWord>,
    profile: Option<String>,
    region: Option<String>,
    /// For each choice a word made (`formats`, `storage`, ...), the word as given, which a
    /// conflicting one is refused with.
    given: HashMap<&'static str, String>,
}

impl Fragment {
    /// Parses `key=value&key=value`; keys are case-insensitive, `mode` is a comma list.
    fn parse(fragment: &str) -> std::result::Result<Fragment, String> {
        let mut frag = Fragment::default();
        let mut unknown = Vec::new();
        for pair in fragment.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = decode(value)?;
            match key.to_ascii_lowercase().as_str() {
                "mode" => {
                    for word in value.split(',').map(str::trim).filter(|w| !w.is_empty()) {
                        if !frag.apply_mode_word(&word.to_ascii_lowercase(), word)? {
                            unknown.push(format!("{word:?}"));
                        }
                    }
                }
                "aws.profile" | "awsprofile" => frag.profile = Some(value),
                "aws.region" => frag.region = Some(value),
                other => log::warn!("ignoring unknown URL fragment key {other:?}"),
            }
        }
        if !unknown.is_empty() {
            return Err(format!("unknown mode word(s) {}", unknown.join(", ")));
        }
        Ok(frag)
    }

    /// Applies one lower-case mode word, given as `shown` (which a refusal quotes);
    /// `Ok(false)` if the word is unknown.
    fn apply_mode_word(&mut self, word: &str, shown: &str) -> std::result::Result<bool, String> {
        /// Sets `slot` to the value `choices` pair with `word` (each value with its word),
        /// unless another word already set it; `given` keeps the word as shown.
        fn set<T: PartialEq + Copy>(
            slot: &mut Option<T>,
            given: &mut HashMap<&'static str, String>,
            (word, shown): (&str, &str),
            choices: &[(T, &str)],
            what: &'static str,
        ) -> std::result::Result<(), String> {
            let value_of = |w: &str| choices.iter().find(|(_, c)| *c == w).map(|(v, _)| *v);
            match (*slot, value_of(word)) {
                (Some(old), Some(new)) if old != new => Err(format!(
                    "conflicting {what} in mode: {} and {shown} (give one)",
                    given.get(what).map_or("?", String::as_str)
                )),
                (Some(_), _) => Ok(()),
                (None, new) => {
                    *slot = new;
                    given.insert(what, shown.to_string());
                    Ok(())
                }
            }
        }
        const FORMATS: [(Format, &str); 2] = [(Format::NcZarr, "nczarr"), (Format::Zarr, "zarr")];
        const XARRAY: [(bool, &str); 2] = [(true, "xarray"), (false, "noxarray")];
        const STORAGE: [(StorageWord, &str); 3] = [
            (StorageWord::File, "file"),
            (StorageWord::Zip, "zip"),
            (StorageWord::S3, "s3"),
        ];
        const VERSIONS: [(u8, &str); 2] = [(2, "v2"), (3, "v3")];
        let given = &mut self.given;
        let w = (word, shown);
        match word {
            "nczarr" | "zarr" => set(&mut self.mode.format, given, w, &FORMATS, "formats")?,
            "xarray" | "noxarray" => {
                set(&mut self.mode.xarray, given, w, &XARRAY, "xarray choices")?
            }
            "file" | "zip" | "s3" => set(&mut self.storage, given, w, &STORAGE, "storage")?,
            "v2" | "v3" => set(
                &mut self.mode.zarr_version,
                given,
                w,
                &VERSIONS,
                "Zarr versions",
            )?,
            "consolidated" => self.mode.consolidated = true,
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// Percent-decodes one URL component.
fn decode(text: &str) -> std::result::Result<String, String> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| format!("{text:?} does not percent-decode to UTF-8"))
}

/// Splits `scheme://rest`, with the scheme lower-cased; `None` for a plain path.
fn split_scheme(text: &str) -> Option<(String, &str)> {
    let (scheme, rest) = text.split_once("://")?;
    let mut chars = scheme.chars();
    let first_ok = chars.next().is_some_and(|c| c.is_ascii_alphabetic());
    let rest_ok = chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'));
    (first_ok && rest_ok).then(|| (scheme.to_ascii_lowercase(), rest))
}

/// A plain path, of any bytes, with a `#key=value` fragment if nothing exists at the whole
/// text.
fn parse_plain_path(text: &OsStr) -> Result<Location> {
    let invalid = |reason: String| Error::InvalidLocation {
        location: text.to_string_lossy().into_owned(),
        reason,
    };
    let bytes = text.as_bytes();
    let mut path = bytes;
    let mut fragment = "";
    if !Path::new(text).exists() {
        if let Some(hash) = bytes.iter().position(|&b| b == b'#') {
            let after = &bytes[hash + 1..];
            if after.contains(&b'=') {
                path = &bytes[..hash];
                fragment = std::str::from_utf8(after).map_err(|_| {
                    invalid("the fragment after `#` is not UTF-8 (mode words are)".into())
                })?;
            }
        }
    }
    let frag = Fragment::parse(fragment).map_err(invalid)?;
    if frag.storage == Some(StorageWord::S3) {
        return Err(invalid(
            "mode s3 needs an s3:// or http(s):// URL, not a path".into(),
        ));
    }
    Ok(Location {
        original: text.to_os_string(),
        storage: local_storage(PathBuf::from(OsStr::from_bytes(path)), frag.storage),
        mode: frag.mode,
    })
}

/// The local path of a `file://` URL: `file:///abs`, `file://localhost/abs`, or
/// `file://relative` (netcdf-c reads the latter as a path relative to the working directory).
/// `%XX` stands for its byte, UTF-8 or not, as in any file name.
fn file_url_path(rest: &str) -> std::result::Result<PathBuf, String> {
    let raw = if rest.starts_with('/') {
        rest
    } else if let Some(abs) = rest.strip_prefix("localhost/") {
        // Keep the leading '/' that follows the host.
        &rest[rest.len() - abs.len() - 1..]
    } else {
        rest
    };
    if raw.is_empty() {
        return Err("file URL without a path".into());
    }
    Ok(PathBuf::from(OsString::from_vec(
        percent_decode_str(raw).collect(),
    )))
}

/// Picks file-tree or zip storage for a local path: the mode word if any, else by probing.
fn local_storage(path: PathBuf, word: Option<StorageWord>) -> Storage {
    match word {
        Some(StorageWord::Zip) => Storage::Zip(path),
        Some(StorageWord::File) => Storage::File(path),
        _ => match std::fs::metadata(&path) {
            Ok(meta) if meta.is_file() && crate::zmap::looks_like_zip(&path) => Storage::Zip(path),
            Ok(_) => Storage::File(path),
            Err(_) => {
                let is_zip = path
                    .extension()
                    .is_some_and(|e| e.eq_ignore_ascii_case("zip"));
                if is_zip {
                    Storage::Zip(path)
                } else {
                    Storage::File(path)
                }
            }
        },
    }
}

/// Parses the part after `scheme://` of an S3 location.
fn parse_s3(scheme: &str, rest: &str, frag: &Fragment) -> std::result::Result<S3Location, String> {
    let (authority, path) = rest.split_once('/').unwrap_or((rest, ""));
    if authority.contains('@') {
        return Err("credentials in URLs are not supported; use aws.profile".into());
    }
    if authority.is_empty() {
        return Err("URL without a host or bucket".into());
    }
    let host = authority
        .rsplit_once(':')
        .filter(|(_, port)| port.chars().all(|c| c.is_ascii_digit()))
        .map_or(authority, |(host, _)| host)
        .to_ascii_lowercase();
    let mut segments = Vec::new();
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        segments.push(decode(segment)?);
    }
    let aws = aws_host(&host);
    let mut s3 = match (scheme, aws) {
        // `s3://bucket/key`: the host is the bucket.
        ("s3", None) => S3Location {
            bucket: decode(authority)?,
            prefix: segments.join("/"),
            ..S3Location::default()
        },
        (
            _,
            Some(AwsHost {
                bucket: Some(bucket),
                region,
            }),
        ) => S3Location {
            endpoint: Some(match &region {
                Some(r) => format!("https://s3.{r}.amazonaws.com"),
                None => "https://s3.amazonaws.com".to_string(),
            }),
            bucket,
            prefix: segments.join("/"),
            region,
            profile: None,
        },
        (_, path_style) => {
            if path_style.is_none() && frag.storage != Some(StorageWord::S3) {
                return Err(format!(
                    "{scheme} URLs are only read as S3 storage: add s3 to the mode \
                     (#mode=nczarr,s3) or use an amazonaws.com host"
                ));
            }
            let endpoint_scheme = if scheme == "s3" { "https" } else { scheme };
            let mut segments = segments.into_iter();
            S3Location {
                endpoint: Some(format!(
                    "{endpoint_scheme}://{}",
                    authority.to_ascii_lowercase()
                )),
                bucket: segments.next().unwrap_or_default(),
                prefix: segments.collect::<Vec<_>>().join("/"),
                region: path_style.and_then(|a| a.region),
                profile: None,
            }
        }
    };
    if s3.bucket.is_empty() {
        return Err("S3 URL without a bucket".into());
    }
    check_bucket(&s3.bucket)?;
    if s3.endpoint.is_some() {
        check_authority(authority)?;
    }
    if frag.region.is_some() {
        s3.region = frag.region.clone();
    }
    s3.profile = frag.profile.clone();
    Ok(s3)
}

/// A bucket name holds letters, digits, `.`, `-` and `_` (S3's rules, with the upper case and
/// underscores of old buckets and S3-compatible servers).
fn check_bucket(bucket: &str) -> std::result::Result<(), String> {
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    if bucket.len() > 255 || !bucket.chars().all(ok) {
        return Err(format!("{bucket:?} is not a bucket name"));
    }
    Ok(())
}

/// `host[:port]` of an endpoint: a DNS name or address, or `[IPv6]`, and a port that fits.
fn check_authority(authority: &str) -> std::result::Result<(), String> {
    let bad = || Err(format!("{authority:?} is not a host[:port]"));
    let (host, port) = match authority.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, rest)) if addr.parse::<std::net::Ipv6Addr>().is_ok() => {
                (addr, rest.strip_prefix(':'))
            }
            _ => return bad(),
        },
        None => match authority.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        },
    };
    let host_ok = authority.starts_with('[')
        || (!host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')));
    if !host_ok || port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return bad();
    }
    Ok(())
}

/// What an `*.amazonaws.com` host name says.
#[derive(Debug)]
struct AwsHost {
    /// The bucket of a virtual-hosted-style name.
    bucket: Option<String>,
    region: Option<String>,
}

/// Recognises `s3.amazonaws.com`, `s3.<region>.amazonaws.com`, `s3-<region>.amazonaws.com`
/// (path style) and the same preceded by `<bucket>.` (virtual-hosted style).
fn aws_host(host: &str) -> Option<AwsHost> {
    let labels: Vec<&str> = host.strip_suffix(".amazonaws.com")?.split('.').collect();
    let is_s3 = |l: &str| l == "s3" || l.starts_with("s3-");
    let n = labels.len();
    // Bucket names may contain dots and even an "s3" label, so look from the right.
    let (s3_at, region) = if is_s3(labels[n - 1]) {
        (n - 1, labels[n - 1].strip_prefix("s3-").map(str::to_string))
    } else if n >= 2 && labels[n - 2] == "s3" {
        (n - 2, Some(labels[n - 1].to_string()))
    } else {
        return None;
    };
    let bucket = labels[..s3_at].join(".");
    Some(AwsHost {
        bucket: (!bucket.is_empty()).then_some(bucket),
        region,
    })
}
