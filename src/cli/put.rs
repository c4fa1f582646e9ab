//! `nczarrfs put`: the inverse of `get`. Stores raw values (native byte order, C order, the
//! layout `get` writes and a mount's `data` file holds) or a `.npy` file into a hyperslab of a
//! variable of an existing dataset.
//!
//! A regular input file (given with `-i`, or redirected to standard input, from the offset
//! its reader had reached, as `cat` reads it) is mapped into memory, so the values go from the
//! page cache straight into chunk encoding and stores; chunks the hyperslab covers whole are
//! stored in parallel without being read first. Other input (a pipe) is read before anything
//! is stored: as far as the hyperslab needs and one byte more, which tells input that is too
//! long, or whole where its length gives the count (records appended along an unlimited
//! first dimension). Either way the input's length is checked against the hyperslab first: a
//! mismatch stores nothing.

use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};

use super::get::{check_strides, check_within, join, npy_descr, parse_indices, to_end};
use crate::chunk::{parse_size, Hyperslab};
use crate::create::{DatasetWriter, WRITER_CACHE_BYTES};
use crate::location::Location;
use crate::model::quantize::Quantize;
use crate::model::{Dataset, NcType, VarId};
use crate::{Error, Result};

/// Arguments of `put`.
#[derive(Debug, clap::Args)]
pub struct PutArgs {
    /// The dataset: a path (any bytes) or a URL. It must exist (`nczarrfs gen` creates one
    /// from CDL).
    pub location: std::ffi::OsString,
    /// The variable's name or full name (`/g1/v`).
    pub var: String,
    /// First index per dimension, comma separated (default: all 0).
    #[arg(long, value_name = "I,J,..", allow_hyphen_values = true)]
    pub start: Option<String>,
    /// Number of indices per dimension (default: a `.npy` input's shape; else to the end of
    /// each dimension, except an unlimited first dimension, whose count is what the input's
    /// length makes it, so that records past its end are appended).
    #[arg(long, value_name = "I,J,..", allow_hyphen_values = true)]
    pub count: Option<String>,
    /// Step per dimension (default: all 1).
    #[arg(long, value_name = "I,J,..", allow_hyphen_values = true)]
    pub stride: Option<String>,
    /// Read a NumPy `.npy` file (its dtype must be the one `get --npy` writes for the
    /// variable) instead of raw bytes.
    #[arg(long)]
    pub npy: bool,
    /// Input file (default, or `-`: standard input).
    #[arg(short, long, value_name = "FILE")]
    pub input: Option<PathBuf>,
    /// Size of the chunk cache that holds partly written chunks until they are stored, with
    /// an optional K/M/G suffix (default 64M; chunks written whole never go through it).
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub cache_size: Option<String>,
}

/// Runs `put`.
pub fn run(args: PutArgs) -> Result<i32> {
    let cache = match &args.cache_size {
        Some(s) => parse_size(s)?,
        None => WRITER_CACHE_BYTES,
    };
    let location = Location::parse(&args.location)?;
    let mut w = DatasetWriter::open_with_cache(&location, cache)?;
    let var = w
        .model()
        .find_typed_var(&args.var)
        .map_err(Error::NotFound)?
        .ok_or_else(|| {
            super::no_variable(w.model(), &args.var, &args.location.to_string_lossy())
        })?;
    let (source, name) = open_input(args.input.as_deref())?;
    let input = match source {
        Source::File(file) => map_from_offset(&file).map_err(|e| Error::io(&name, e))?,
        Source::Stream(file) => read_stream(file, &name, args.npy, |head| {
            stream_needs(w.model(), var, &args, head, &name)
        })?,
    };
    let widened;
    let (values, npy_shape) = if args.npy {
        let (shape, at, narrower) = parse_npy(w.model(), var, input.bytes(), &name)?;
        let values = &input.bytes()[at..];
        match narrower {
            Some(k) => {
                widened = super::gen::rewidth(values, k, w.model().var(var).string_width);
                (&widened[..], Some(shape))
            }
            None => (values, Some(shape)),
        }
    } else {
        (input.bytes(), None)
    };
    let slab = hyperslab(w.model(), var, &args, values.len() as u64, npy_shape)?;
    let esize = w.model().var(var).element_size() as u64;
    let want = slab.len().checked_mul(esize);
    if input.cut || want != Some(values.len() as u64) {
        let held = match input.cut {
            // One byte more than needed was read.
            true => format!("more than {}", values.len().saturating_sub(1)),
            false => values.len().to_string(),
        };
        let selection = match slab.start.is_empty() {
            true => format!("the scalar {}", w.model().var_fqn(var)),
            false => format!(
                "the hyperslab --start {} --count {} of {}",
                join(&slab.start),
                join(&slab.count),
                w.model().var_fqn(var)
            ),
        };
        return Err(Error::Invalid(format!(
            "{name} holds {held} bytes of values; {selection} ({} values of {esize} bytes) \
             needs {}; nothing was written",
            w.model().var(var).nctype.cdl_name(),
            want.map_or_else(|| "more".to_string(), |n| n.to_string()),
        )));
    }
    // netcdf-c quantizes every write to a variable that has a quantization attribute,
    // after the dataset is reopened as well, over the values of one call.
    let quantized;
    let values = match Quantize::of_variable(w.model().var(var))
        .map_err(|e| Error::Invalid(format!("{}: {e}", w.model().var_fqn(var))))?
    {
        Some(quantize) => {
            let v = w.model().var(var);
            let fill = crate::meta::quantize_fill(w.model(), var);
            let mut copy = values.to_vec();
            quantize.apply(v.nctype, &mut copy, fill.as_deref());
            quantized = copy;
            &quantized[..]
        }
        None => values,
    };
    w.write(var, &slab, values)?;
    w.close()?;
    Ok(0)
}

/// Builds the hyperslab from the options, the number of input bytes and, for `.npy` input,
/// the array's shape. Writing past a fixed dimension is refused here with the option that
/// asks for it; growing an unlimited one is the writer's.
fn hyperslab(
    ds: &Dataset,
    var: VarId,
    args: &PutArgs,
    input_bytes: u64,
    npy_shape: Option<Vec<u64>>,
) -> Result<Hyperslab> {
    let v = ds.var(var);
    let shape = ds.var_shape(var);
    let rank = shape.len();
    let unlimited: Vec<bool> = v.dims.iter().map(|d| ds.dim(*d).unlimited).collect();
    let start = parse_indices(&args.start, "start", &shape)?.unwrap_or_else(|| vec![0; rank]);
    let stride = parse_indices(&args.stride, "stride", &shape)?.unwrap_or_else(|| vec![1; rank]);
    check_strides(ds, var, &stride)?;
    let count = match (parse_indices(&args.count, "count", &shape)?, npy_shape) {
        (Some(c), Some(npy)) => {
            let (have, want) = (npy.iter().product::<u64>(), c.iter().product::<u64>());
            if have != want {
                return Err(Error::Invalid(format!(
                    "the .npy array of shape {npy:?} holds {have} values; --count {} selects \
                     {want}",
                    join(&c)
                )));
            }
            c
        }
        (Some(c), None) => c,
        (None, Some(npy)) => {
            if npy.len() != rank {
                return Err(Error::Invalid(format!(
                    "the .npy array has shape {npy:?}, {} has {rank} dimension(s) {shape:?}; \
                     give --count",
                    ds.var_fqn(var)
                )));
            }
            npy
        }
        (None, None) => {
            let mut count: Vec<u64> = (0..rank)
                .map(|d| to_end(shape[d], start[d], stride[d]))
                .collect();
            if input_bytes > 0 {
                // Else the message would be that the input is more than the 0 bytes wanted.
                if let Some(d) = (0..rank).find(|&d| !unlimited[d] && start[d] >= shape[d]) {
                    let place = match start[d] == shape[d] {
                        true => "at",
                        false => "past",
                    };
                    return Err(Error::InvalidHyperslab(format!(
                        "--start {} is {place} the end of dimension {} of {}, which has the \
                         fixed length {}: there is nothing to write there; nothing was written",
                        join(&start),
                        ds.dim_fqn(v.dims[d]),
                        ds.var_fqn(var),
                        shape[d]
                    )));
                }
            }
            if unlimited.first() == Some(&true) {
                let esize = v.element_size() as u64;
                let record: u64 = count[1..].iter().product::<u64>().saturating_mul(esize);
                count[0] = match (record, input_bytes) {
                    (_, 0) => 0,
                    (0, _) => {
                        return Err(Error::Invalid(format!(
                            "cannot tell how many records of {} the input holds: the other \
                             dimensions select nothing; give --count",
                            ds.var_fqn(var)
                        )))
                    }
                    (r, n) if n % r != 0 => {
                        return Err(Error::Invalid(format!(
                            "the input holds {n} bytes, not a whole number of records of {} \
                             ({r} bytes each, along {}); nothing was written",
                            ds.var_fqn(var),
                            ds.dim_fqn(v.dims[0])
                        )))
                    }
                    (r, n) => n / r,
                };
            }
            count
        }
    };
    let slab = Hyperslab {
        start,
        count,
        stride,
    };
    check_within(ds, var, &slab, |d| unlimited[d]).map_err(|e| match e {
        Error::InvalidHyperslab(m) => Error::InvalidHyperslab(format!("{m}; nothing was written")),
        e => e,
    })?;
    Ok(slab)
}

/// The input's bytes: a read-only map of a regular file from the offset its reader had
/// reached, or what was read of a stream.
struct Input {
    bytes: Bytes,
    /// The stream went on past what was read, which was all the hyperslab needed and one
    /// byte more: the input is too long.
    cut: bool,
}

enum Bytes {
    Mapped { map: memmap2::Mmap, skip: usize },
    Read(Vec<u8>),
}

impl Input {
    fn bytes(&self) -> &[u8] {
        match &self.bytes {
            Bytes::Mapped { map, skip } => &map[*skip..],
            Bytes::Read(v) => v,
        }
    }
}

/// Where the input comes from.
enum Source {
    /// A regular file: `-i FILE`, or the one standard input is redirected from.
    File(File),
    /// Anything else: a pipe, a terminal, a socket.
    Stream(File),
}

/// Opens the input (`None` or `-`: standard input) and returns it with a name for messages.
fn open_input(path: Option<&Path>) -> Result<(Source, String)> {
    let (file, name) = match path.filter(|p| p.as_os_str() != "-") {
        Some(p) => (
            File::open(p).map_err(|e| Error::io(p, e))?,
            p.display().to_string(),
        ),
        None => {
            // A duplicate shares the open file's offset with standard input.
            let fd = std::io::stdin()
                .as_fd()
                .try_clone_to_owned()
                .map_err(|e| Error::io("<stdin>", e))?;
            (File::from(fd), "standard input".to_string())
        }
    };
    let meta = file.metadata().map_err(|e| Error::io(&name, e))?;
    Ok(match meta.is_file() {
        true => (Source::File(file), name),
        false => (Source::Stream(file), name),
    })
}

/// Largest input whose pages are all mapped before the values are stored.
const POPULATE_MAX: usize = 2 << 30;

/// A read-only, private memory map of a regular input file from its current offset to its
/// end (a script may have read a header from standard input first: `put` reads on from
/// there, as `cat` would), leaving the offset at the end, as reading it would.
///
/// Like any map of a file, it assumes nobody truncates the file while it is mapped (reading a
/// page that no longer exists raises SIGBUS); `put` maps a file only to store its contents once.
fn map_from_offset(mut file: &File) -> std::io::Result<Input> {
    let offset = file.stream_position()?;
    let end = file.metadata()?.len();
    if end <= offset {
        return Ok(Input {
            bytes: Bytes::Read(Vec::new()),
            cut: false,
        });
    }
    file.seek(SeekFrom::Start(end))?;
    let len = usize::try_from(end.saturating_sub(offset))
        .map_err(|_| std::io::Error::other("too large for this machine"))?;
    // The map starts at the page holding the offset.
    let page = page_size();
    let skip = usize::try_from(offset % page).unwrap_or(0);
    let mut options = memmap2::MmapOptions::new();
    options.offset(offset - offset % page).len(skip + len);
    // The page tables are filled at once: a store's `write` that meets an unmapped page of its
    // source copies short, zeroes the rest and retries after the fault, which cost a third of
    // an uncompressed put. Past POPULATE_MAX that would read the whole file up front and may
    // not fit in memory; pages are then mapped as they are touched.
    if len <= POPULATE_MAX {
        options.populate();
    }
    // SAFETY: a read-only private map of an open file, dropped before `put` returns.
    let map = unsafe { options.map(file)? };
    // Reading ahead of a file not yet cached is welcome; failure only loses the hint.
    let _ = map.advise(memmap2::Advice::WillNeed);
    Ok(Input {
        bytes: Bytes::Mapped { map, skip },
        cut: false,
    })
}

fn page_size() -> u64 {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).unwrap_or(4096).max(1)
}

/// The longest `.npy` header read from a stream (numpy's own are a few hundred bytes): a
/// header that says it is longer is cut there and refused.
const NPY_HEADER_MAX: u64 = 1 << 20;

/// Reads a stream as far as `put` needs it: `needs`, given the start of the input (a `.npy`
/// input's header, when `npy`), says how many bytes the input must hold in all, or `None`
/// when its length decides (records appended along an unlimited first dimension), which
/// reads it whole. One byte past what is needed is read to tell input that is too long
/// (`cut`): an endless input (`< /dev/zero`) is refused rather than read until memory runs
/// out.
fn read_stream(
    file: File,
    name: &str,
    npy: bool,
    needs: impl FnOnce(&[u8]) -> Result<Option<u64>>,
) -> Result<Input> {
    let mut bytes = Vec::new();
    let read_to = |bytes: &mut Vec<u8>, total: Option<u64>| -> Result<()> {
        let more = match total {
            Some(t) => t.saturating_sub(bytes.len() as u64),
            None => u64::MAX,
        };
        (&file)
            .take(more)
            .read_to_end(bytes)
            .map(drop)
            .map_err(|e| Error::io(name, e))
    };
    if npy {
        // The magic, the version and the header's length, then the header.
        read_to(&mut bytes, Some(12))?;
        let header_end = match bytes.get(6) {
            Some(1) if bytes.len() >= 10 => {
                10 + u64::from(u16::from_le_bytes([bytes[8], bytes[9]]))
            }
            Some(2 | 3) if bytes.len() >= 12 => {
                12 + u64::from(u32::from_le_bytes([
                    bytes[8], bytes[9], bytes[10], bytes[11],
                ]))
            }
            _ => 0,
        };
        read_to(&mut bytes, Some(header_end.min(12 + NPY_HEADER_MAX)))?;
    }
    let total = needs(&bytes)?;
    read_to(&mut bytes, total.map(|t| t.saturating_add(1)))?;
    let cut = total.is_some_and(|t| bytes.len() as u64 > t);
    Ok(Input {
        bytes: Bytes::Read(bytes),
        cut,
    })
}

/// How many bytes a streamed input must hold in all for the hyperslab `args` select of
/// `var`, given its start `head` (a `.npy` header), or `None` when the input's length gives
/// the count (records appended along an unlimited first dimension without `--count`).
/// What cannot match whatever follows (a count whose size overflows) needs nothing more.
fn stream_needs(
    ds: &Dataset,
    var: VarId,
    args: &PutArgs,
    head: &[u8],
    name: &str,
) -> Result<Option<u64>> {
    let v = ds.var(var);
    let shape = ds.var_shape(var);
    let values = |count: &[u64], width: u64| {
        count
            .iter()
            .try_fold(width, |n, &c| n.checked_mul(c))
            .unwrap_or(0)
    };
    if args.npy {
        let (npy_shape, at, narrower) = parse_npy(ds, var, head, name)?;
        let width = narrower.unwrap_or(v.element_size()) as u64;
        return Ok(Some((at as u64).saturating_add(values(&npy_shape, width))));
    }
    let count = match parse_indices(&args.count, "count", &shape)? {
        Some(count) => count,
        None if v.dims.first().is_some_and(|d| ds.dim(*d).unlimited) => return Ok(None),
        None => {
            let rank = shape.len();
            let start =
                parse_indices(&args.start, "start", &shape)?.unwrap_or_else(|| vec![0; rank]);
            let stride =
                parse_indices(&args.stride, "stride", &shape)?.unwrap_or_else(|| vec![1; rank]);
            (0..rank)
                .map(|d| to_end(shape[d], start[d], stride[d]))
                .collect()
        }
    };
    Ok(Some(values(&count, v.element_size() as u64)))
}

/// Parses a `.npy` header (format 1.0, 2.0 or 3.0): checks that its dtype is the variable's
/// native one and that the array is in C order; returns the array's shape and where the
/// values start.
/// A `.npy` input's shape, where its data start, and, for a string variable given narrower
/// strings (`|S5` into a width of 128), their width.
fn parse_npy(
    ds: &Dataset,
    var: VarId,
    bytes: &[u8],
    name: &str,
) -> Result<(Vec<u64>, usize, Option<usize>)> {
    let bad = |why: &str| Error::Invalid(format!("{name} is not a .npy file: {why}"));
    if bytes.len() < 10 || &bytes[..6] != b"\x93NUMPY" {
        return Err(bad("no \\x93NUMPY magic"));
    }
    let (len, at): (usize, usize) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        2 | 3 if bytes.len() >= 12 => (
            u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize,
            12,
        ),
        v => return Err(bad(&format!("unknown format version {v}"))),
    };
    let header = bytes
        .get(at..at.saturating_add(len))
        .ok_or_else(|| bad("header cut short"))?;
    let header = std::str::from_utf8(header).map_err(|_| bad("header is not text"))?;
    let value = |key: &str| -> Result<&str> {
        let i = header
            .find(&format!("'{key}'"))
            .ok_or_else(|| bad(&format!("no '{key}' in the header")))?;
        let rest = header[i + key.len() + 2..].trim_start();
        rest.strip_prefix(':')
            .map(str::trim_start)
            .ok_or_else(|| bad("malformed header"))
    };
    let descr = value("descr")?;
    let quote = descr.chars().next().filter(|c| *c == '\'' || *c == '"');
    let descr = quote
        .and_then(|q| descr[1..].split(q).next())
        .ok_or_else(|| bad("'descr' is not a simple dtype"))?;
    if value("fortran_order")?.starts_with("True") {
        return Err(Error::Invalid(format!(
            "{name} holds a Fortran-order array; `put` needs C order \
             (numpy.ascontiguousarray)"
        )));
    }
    let shape = value("shape")?;
    let shape = shape
        .strip_prefix('(')
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| bad("'shape' is not a tuple"))?;
    let shape = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u64>().map_err(|_| bad("'shape' is not a tuple")))
        .collect::<Result<Vec<u64>>>()?;
    let want = npy_descr(ds, var);
    let v = ds.var(var);
    let narrower = descr
        .strip_prefix("|S")
        .and_then(|k| k.parse::<usize>().ok())
        .filter(|k| v.nctype == NcType::String && *k < v.string_width);
    if descr != want && narrower.is_none() {
        let width = match v.nctype {
            NcType::String => format!(
                " or narrower (its strings are {} bytes wide: {})",
                v.string_width,
                width_origin(v)
            ),
            _ => String::new(),
        };
        return Err(Error::Invalid(format!(
            "{name} holds {descr} values; {} ({}) needs {want}{width}",
            ds.var_fqn(var),
            v.nctype.cdl_name()
        )));
    }
    Ok((shape, at + len, narrower))
}

/// Where a string variable's width comes from, for an error that says the value is wider.
fn width_origin(v: &crate::model::Variable) -> &'static str {
    let variable_length = match &v.storage.codecs {
        crate::model::CodecSpec::V2 { filters, .. } => {
            crate::codec::is_object_string_filter(filters)
        }
        crate::model::CodecSpec::V3(list) => list.iter().any(|c| {
            matches!(
                c.get("name").and_then(serde_json::Value::as_str),
                Some("vlen-utf8" | "vlen-bytes")
            )
        }),
    };
    if variable_length {
        "the longest value stored when the dataset was opened"
    } else {
        "its stored dtype, or NCZarr's `_nczarr_maxstrlen`"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{NcType, VarStorage, Variable};

    fn dataset() -> (Dataset, VarId) {
        let mut ds = Dataset::new();
        let t = ds.add_dim(Dataset::ROOT, "t", 2, true);
        let x = ds.add_dim(Dataset::ROOT, "x", 3, false);
        let v = ds.add_var(Variable {
            name: "v".into(),
            group: Dataset::ROOT,
            nctype: NcType::Short,
            dims: vec![t, x],
            string_width: 0,
            attrs: Vec::new(),
            storage: VarStorage::default(),
        });
        (ds, v)
    }

    fn args(start: Option<&str>, count: Option<&str>) -> PutArgs {
        PutArgs {
            location: "x".into(),
            var: "v".into(),
            start: start.map(Into::into),
            count: count.map(Into::into),
            stride: None,
            npy: false,
            input: None,
            cache_size: None,
        }
    }

    #[test]
    fn records_follow_the_input_length_along_an_unlimited_first_dimension() {
        let (ds, v) = dataset();
        // 5 records of 3 shorts from index 1: past the current length 2.
        let s = hyperslab(&ds, v, &args(Some("1,0"), None), 30, None).unwrap();
        assert_eq!((s.start, s.count), (vec![1, 0], vec![5, 3]));
        let s = hyperslab(&ds, v, &args(Some("0,1"), None), 8, None).unwrap();
        assert_eq!(s.count, vec![2, 2]);
        let s = hyperslab(&ds, v, &args(None, Some("1,3")), 0, None).unwrap();
        assert_eq!(s.count, vec![1, 3]);
        let err = hyperslab(&ds, v, &args(Some("0,2"), Some("1,2")), 4, None).unwrap_err();
        assert!(err.to_string().contains("fixed length 3"), "{err}");
        let npy = hyperslab(&ds, v, &args(None, None), 0, Some(vec![4, 3])).unwrap();
        assert_eq!(npy.count, vec![4, 3]);
        assert!(hyperslab(&ds, v, &args(None, None), 0, Some(vec![12])).is_err());
        assert!(hyperslab(&ds, v, &args(None, Some("2,3")), 0, Some(vec![2, 2])).is_err());
    }

    /// Input that is no whole number of records, or a start at the end of a fixed
    /// dimension, is refused saying so, not with a count computed from it.
    #[test]
    fn a_partial_record_or_a_start_at_a_fixed_end_is_named() {
        let (ds, v) = dataset();
        // Records of 3 shorts: 6 bytes.
        let err = hyperslab(&ds, v, &args(None, None), 13, None).unwrap_err();
        let m = err.to_string();
        assert!(
            m.contains("13 bytes, not a whole number of records of /v (6 bytes each"),
            "{m}"
        );
        let err = hyperslab(&ds, v, &args(Some("0,3"), None), 6, None).unwrap_err();
        let m = err.to_string();
        assert!(
            m.contains("--start 0,3 is at the end of dimension /x"),
            "{m}"
        );
        assert!(m.contains("fixed length 3"), "{m}");
        assert_eq!(
            hyperslab(&ds, v, &args(None, None), 12, None)
                .unwrap()
                .count,
            vec![2, 3]
        );
    }

    /// The read end of a socket pair whose other end a thread fills with `data`, then with
    /// zeros without end when `endless` (until the reader goes away), as a pipe would.
    fn stream(data: Vec<u8>, endless: bool) -> File {
        use std::io::Write;
        let (reader, mut writer) = std::os::unix::net::UnixStream::pair().unwrap();
        std::thread::spawn(move || {
            let _ = writer.write_all(&data);
            while endless && writer.write_all(&[0u8; 4096]).is_ok() {}
        });
        File::from(std::os::fd::OwnedFd::from(reader))
    }

    #[test]
    fn a_stream_is_read_as_far_as_needed_and_one_byte_more() {
        let read = |data: &[u8], endless: bool, total: Option<u64>| {
            let input = read_stream(stream(data.to_vec(), endless), "s", false, |head| {
                assert!(head.is_empty());
                Ok(total)
            })
            .unwrap();
            (input.bytes().to_vec(), input.cut)
        };
        assert_eq!(read(b"abcd", false, Some(4)), (b"abcd".to_vec(), false));
        assert_eq!(read(b"abc", false, Some(4)), (b"abc".to_vec(), false));
        assert_eq!(read(b"abcdef", false, Some(4)), (b"abcde".to_vec(), true));
        assert_eq!(read(b"ab", true, Some(4)), (b"ab\0\0\0".to_vec(), true));
        assert_eq!(read(b"", true, Some(0)), (vec![0], true));
        // The input's length gives the count: all of it is read.
        assert_eq!(read(&[7; 100_000], false, None), (vec![7; 100_000], false));
    }

    #[test]
    fn a_npy_stream_is_read_as_far_as_its_header_says() {
        let (ds, v) = dataset();
        // numpy.save of np.arange(6, dtype="<i2").reshape(2, 3): format 1.0, 128 bytes of
        // header.
        let mut dict = "{'descr': '<i2', 'fortran_order': False, 'shape': (2, 3), }".to_string();
        dict.push_str(&" ".repeat(117 - dict.len()));
        dict.push('\n');
        let mut file = b"\x93NUMPY\x01\x00".to_vec();
        file.extend((dict.len() as u16).to_le_bytes());
        file.extend(dict.as_bytes());
        let values: Vec<u8> = (0..6i16).flat_map(i16::to_le_bytes).collect();
        file.extend(&values);
        let needs = |head: &[u8]| stream_needs(&ds, v, &npy_args(), head, "s");
        let input = read_stream(stream(file.clone(), true), "s", true, needs).unwrap();
        assert!(input.cut);
        assert_eq!(input.bytes().len(), 128 + 12 + 1);
        let input = read_stream(stream(file.clone(), false), "s", true, needs).unwrap();
        assert!(!input.cut);
        assert_eq!(input.bytes(), &file[..]);
        let e = read_stream(stream(b"not a npy".to_vec(), true), "s", true, needs);
        let e = e.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.contains("not a .npy file"), "{e}");
    }

    fn npy_args() -> PutArgs {
        PutArgs {
            npy: true,
            ..args(None, None)
        }
    }

    #[test]
    fn what_a_stream_must_hold_follows_the_options() {
        let (ds, v) = dataset();
        let needs = |start, count| stream_needs(&ds, v, &args(start, count), b"", "s").unwrap();
        // 2 records of 3 shorts, 2 bytes each.
        assert_eq!(needs(None, Some("2,3")), Some(12));
        assert_eq!(needs(Some("5,0"), Some("1,1")), Some(2));
        // Records along the unlimited first dimension: as many as the input holds.
        assert_eq!(needs(None, None), None);
        let mut fixed = ds.clone();
        fixed.dims[0].unlimited = false;
        let needs = |start| stream_needs(&fixed, v, &args(start, None), b"", "s").unwrap();
        assert_eq!(needs(None), Some(12));
        assert_eq!(needs(Some("1,1")), Some(4));
        assert_eq!(needs(Some("2,0")), Some(0));
        // A count whose size overflows: nothing can match, nothing more is needed.
        let e = stream_needs(&ds, v, &args(None, Some("4294967296,4294967296")), b"", "s");
        assert_eq!(e.unwrap(), Some(0));
    }

    #[test]
    fn a_file_is_mapped_from_its_reader_offset_which_ends_at_its_end() {
        use std::io::Write;
        let mut file = tempfile::tempfile().unwrap();
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        file.write_all(&data).unwrap();
        for offset in [0u64, 3, 4096, 5000, 10_000, 12_000] {
            file.seek(SeekFrom::Start(offset)).unwrap();
            let input = map_from_offset(&file).unwrap();
            let from = (offset as usize).min(data.len());
            assert_eq!(input.bytes(), &data[from..], "offset {offset}");
            assert!(!input.cut);
            let end = file.stream_position().unwrap();
            assert_eq!(end, offset.max(data.len() as u64));
        }
    }

    #[test]
    fn npy_headers_as_numpy_writes_them() {
        let (ds, v) = dataset();
        // numpy.save of np.zeros((4, 3), "<i2"): format 1.0, a 118-byte dict.
        let mut dict = "{'descr': '<i2', 'fortran_order': False, 'shape': (4, 3), }".to_string();
        dict.push_str(&" ".repeat(117 - dict.len()));
        dict.push('\n');
        let mut file = b"\x93NUMPY\x01\x00".to_vec();
        file.extend((dict.len() as u16).to_le_bytes());
        file.extend(dict.as_bytes());
        file.extend([0u8; 24]);
        assert_eq!(
            parse_npy(&ds, v, &file, "f").unwrap(),
            (vec![4, 3], 128, None)
        );
        // The same header with another text of the same length in place of `from`.
        let edited = |from: &str, to: &str| {
            let mut f = file.clone();
            let at = f
                .windows(from.len())
                .position(|w| w == from.as_bytes())
                .unwrap();
            f[at..at + to.len()].copy_from_slice(to.as_bytes());
            f
        };
        let err = parse_npy(&ds, v, &edited("<i2", "<f4"), "f").unwrap_err();
        assert!(err.to_string().contains("needs <i2"), "{err}");
        let err = parse_npy(&ds, v, &edited("False", "True "), "f").unwrap_err();
        assert!(err.to_string().contains("Fortran"), "{err}");
        assert!(parse_npy(&ds, v, &edited("(4, 3)", "(4, x)"), "f").is_err());
        assert!(parse_npy(&ds, v, b"not a npy file", "f").is_err());
        assert!(parse_npy(&ds, v, &file[..40], "f").is_err());
    }
}
