//! `nczarrfs get`: the raw values of a hyperslab, in native byte order or as a `.npy` file.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::mpsc;

use crate::chunk::{parse_size, Hyperslab};
use crate::dataset::OpenDataset;
use crate::error::quoted;
use crate::model::{Dataset, NcType, VarId};
use crate::{Error, Result};

/// Arguments of `get`.
#[derive(Debug, clap::Args)]
pub struct GetArgs {
    /// The dataset: a path (any bytes) or a URL.
    pub location: std::ffi::OsString,
    /// The variable's name or full name (`/g1/v`).
    pub var: String,
    /// First index per dimension, comma separated (default: all 0).
    #[arg(long, value_name = "I,J,..", allow_hyphen_values = true)]
    pub start: Option<String>,
    /// Number of indices per dimension (default: to the end of each dimension).
    #[arg(long, value_name = "I,J,..", allow_hyphen_values = true)]
    pub count: Option<String>,
    /// Step per dimension (default: all 1).
    #[arg(long, value_name = "I,J,..", allow_hyphen_values = true)]
    pub stride: Option<String>,
    /// Write a NumPy `.npy` (v1.0) file instead of raw bytes.
    #[arg(long)]
    pub npy: bool,
    /// Output file (default, and `-`: standard output; `./-` names a file `-`).
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Size of the decoded-chunk cache, with an optional K/M/G suffix (default 0: `get` reads
    /// every chunk once, in blocks aligned to the chunk grid, so a cache would only cost; but
    /// a row of chunks over 64 MiB is read in parts, each reading its chunks again unless the
    /// cache holds them: a warning gives the size).
    #[arg(long, value_name = "SIZE", allow_hyphen_values = true)]
    pub cache_size: Option<String>,
}

/// About how much of the hyperslab is read at once, so a huge `get` streams in bounded memory.
const BLOCK_BYTES: u64 = 16 << 20;

/// How many times larger a block is on a map with request latency (S3).
const REMOTE_BLOCKS: u64 = 8;

/// How many blocks' worth a block may grow to so that it ends on a chunk boundary.
const ALIGNED_BLOCKS: u64 = 4;

/// Runs `get`.
pub fn run(args: GetArgs) -> Result<i32> {
    let to_file = args.output.as_ref().filter(|path| path.as_os_str() != "-");
    if to_file.is_none_or(|path| names_standard_output(path)) {
        super::check_standard_output()?;
    }
    let cache = match &args.cache_size {
        Some(s) => parse_size(s)?,
        None => 0,
    };
    let open = OpenDataset::open(&args.location, cache)?;
    let ds = &open.model;
    let var = ds
        .find_typed_var(&args.var)
        .map_err(Error::NotFound)?
        .ok_or_else(|| super::no_variable(ds, &args.var, &args.location.to_string_lossy()))?;
    let slab = hyperslab(ds, var, &args)?;
    let output = to_file.map(|path| OutputFile::create(path)).transpose()?;
    let mut out: Box<dyn Write + Send> = match &output {
        Some(f) => Box::new(BufWriter::new(f.file.try_clone().map_err(|e| f.error(e))?)),
        None => Box::new(BufWriter::new(std::io::stdout())),
    };
    let io_err = |e: std::io::Error| match &output {
        Some(f) => f.error(e),
        None => Error::io("standard output", e),
    };
    let mut written = || -> Result<()> {
        if args.npy {
            out.write_all(&npy_header(ds, var, &slab.count)?)
                .map_err(io_err)?;
        }
        write_values(&open, var, &slab, cache as u64, &mut out).map_err(|e| match e {
            Error::Io { path, source } if path.as_os_str() == OUTPUT => io_err(source),
            other => other,
        })?;
        out.flush().map_err(io_err)
    };
    let result = written();
    drop(out);
    match (output, result) {
        (Some(f), Ok(())) => f.commit()?,
        (Some(f), Err(e)) => {
            f.discard();
            return Err(e);
        }
        // A closed pipe (`get ... | head -c 10`) ends the output quietly, as in `dump`.
        (None, Err(Error::Io { source, .. }))
            if source.kind() == std::io::ErrorKind::BrokenPipe => {}
        (None, result) => result?,
    }
    Ok(0)
}

/// Whether `-o path` is one of the names of descriptor 1: when standard output was closed at
/// start, the runtime's `/dev/null` there would take the values and the command exit 0. Only
/// these spellings are known; the descriptor itself cannot tell, being `/dev/null` by then.
fn names_standard_output(path: &Path) -> bool {
    const NAMES: [&str; 4] = [
        "/dev/stdout",
        "/dev/fd/1",
        "/proc/self/fd/1",
        "/proc/thread-self/fd/1",
    ];
    NAMES.iter().any(|name| path.as_os_str() == *name)
}

/// How [`write_values`] names the output in its errors, for [`run`] to name it properly.
const OUTPUT: &str = "<output>";

/// The `-o` file. A new file, or a regular file of ours with one link, is written beside its
/// place and renamed over it only once every value is written, so that a failed read leaves
/// whatever was there before; anything else (a symbolic link such as `/dev/stdout`, a device,
/// a FIFO, a file of another owner or with hard links, a directory we cannot write to) is
/// written in place, as before.
struct OutputFile {
    file: File,
    path: PathBuf,
    /// The temporary file to rename to `path`, when there is one.
    staged: Option<PathBuf>,
    /// Removes the temporary file if a signal (Ctrl-C, SIGTERM, SIGHUP) ends the process.
    _removed_on_signal: Option<crate::interrupt::RegisteredCleanup>,
}

impl OutputFile {
    fn create(path: &std::path::Path) -> Result<OutputFile> {
        use std::os::unix::fs::MetadataExt;
        let in_place = || -> Result<OutputFile> {
            Ok(OutputFile {
                file: File::create(path).map_err(|e| Error::io(path, e))?,
                path: path.to_path_buf(),
                staged: None,
                _removed_on_signal: None,
            })
        };
        let existing = match std::fs::symlink_metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(Error::io(path, e)),
            Ok(m) => {
                // SAFETY: geteuid has no preconditions.
                let ours = m.uid() == unsafe { libc::geteuid() };
                if !(m.file_type().is_file() && m.nlink() == 1 && ours) {
                    return in_place();
                }
                // Refused as before when it may not be written (a read-only file).
                std::fs::OpenOptions::new()
                    .write(true)
                    .open(path)
                    .map_err(|e| Error::io(path, e))?;
                Some(m)
            }
        };
        let Some(name) = path.file_name() else {
            return in_place();
        };
        let dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => std::path::Path::new("."),
        };
        let prefix = temp_prefix(name);
        let pid = std::process::id();
        remove_ended_gets_files(dir, &prefix);
        // A signal that comes before its removal is registered is handled after it.
        let created = crate::interrupt::while_publishing(|| {
            let (file, temp) = crate::zmap::temp_files::create_in(dir, |token| {
                let mut temp = prefix.clone();
                temp.push(format!("{pid}.{token}"));
                temp
            })?;
            // Held until this process ends: what tells the next `get -o` that the file is in
            // use, where the process number cannot (a get in another PID namespace, on
            // another NFS client).
            // SAFETY: flock only reads the descriptor, which `file` owns.
            unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            let removed_on_signal = crate::interrupt::on_signal(std::sync::Arc::new({
                let temp = temp.clone();
                // The writes still in progress then go to a file without a name.
                move || {
                    let _ = std::fs::remove_file(&temp);
                }
            }));
            Ok::<_, std::io::Error>((file, temp, removed_on_signal))
        });
        let (file, temp, removed_on_signal) = match created {
            Ok(created) => created,
            // A directory we may not create in: the file itself is still writable.
            Err(_) => return in_place(),
        };
        if let Some(m) = existing {
            // The replaced file's permissions stay.
            let _ = file.set_permissions(m.permissions());
        }
        Ok(OutputFile {
            file,
            path: path.to_path_buf(),
            staged: Some(temp),
            _removed_on_signal: Some(removed_on_signal),
        })
    }

    fn error(&self, e: std::io::Error) -> Error {
        Error::io(&self.path, e)
    }

    fn commit(self) -> Result<()> {
        let Some(temp) = &self.staged else {
            return Ok(());
        };
        let renamed = crate::interrupt::while_publishing(|| std::fs::rename(temp, &self.path))
            .map_err(|e| self.error(e));
        if renamed.is_err() {
            self.discard();
        }
        renamed
    }

    /// Best effort: the read already failed, a leftover temporary file is the lesser problem.
    fn discard(self) {
        if let Some(temp) = &self.staged {
            let _ = std::fs::remove_file(temp);
        }
    }
}

/// What the temporary file of a `get -o NAME` is named: `.NAME` this `PID.TOKEN`.
const GET_TEMP_INFIX: &str = ".nczarrfs-get.";

/// The start of the temporary files' names of a `get -o NAME`, `NAME` byte for byte (or its
/// start and a hash when it is long, see [`crate::zmap::temp_files::name_stem`]): `.NAME` and
/// [`GET_TEMP_INFIX`].
fn temp_prefix(name: &std::ffi::OsStr) -> std::ffi::OsString {
    let mut prefix = std::ffi::OsString::from(".");
    prefix.push(crate::zmap::temp_files::name_stem(name));
    prefix.push(GET_TEMP_INFIX);
    prefix
}

/// How long a temporary file of a `get -o` stays untouched before a later get may take it
/// for a killed one's: a get in another PID namespace, which holds its file locked, may not
/// have taken the lock yet in the moment after creating it.
const UNTOUCHED_BEFORE_REMOVAL: std::time::Duration = std::time::Duration::from_secs(5);

/// Removes the temporary files in `dir` (named `prefix` then `PID.TOKEN`) that earlier
/// `get -o NAME`s left when they were killed (SIGKILL, a crash: the other signals remove
/// their own): those of processes that have ended, that no process holds locked (a get
/// whose process this one cannot see holds its file's lock) and that nothing has written for
/// [`UNTOUCHED_BEFORE_REMOVAL`]. Best effort: one left is only hidden clutter.
fn remove_ended_gets_files(dir: &std::path::Path, prefix: &std::ffi::OsStr) {
    use std::os::unix::ffi::OsStrExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let file_name = entry.file_name();
        let Some(rest) = file_name.as_bytes().strip_prefix(prefix.as_bytes()) else {
            continue;
        };
        let Some(dot) = rest.iter().position(|&b| b == b'.') else {
            continue;
        };
        let (pid, token) = (&rest[..dot], &rest[dot + 1..]);
        let ended = std::str::from_utf8(pid)
            .ok()
            .and_then(|pid| pid.parse().ok())
            .is_some_and(crate::interrupt::has_ended);
        let untouched = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|t| t.elapsed().is_ok_and(|age| age >= UNTOUCHED_BEFORE_REMOVAL));
        if ended
            && untouched
            && crate::zmap::temp_files::is_token(token)
            && is_unlocked(&entry.path())
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Whether no process holds a lock on the file at `path` (one that cannot be opened is
/// taken as held: it is left alone).
fn is_unlocked(path: &std::path::Path) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    // SAFETY: flock only reads the descriptor, which `file` owns; the lock taken goes with it.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

/// Builds the hyperslab of `var` from the options: missing `start` is 0, `stride` 1, and
/// `count` reaches the end of each dimension. It is checked whole here, with errors that name
/// the options, the variable and the dimension: the reads that follow take it in blocks, whose
/// numbers are not the ones given.
fn hyperslab(ds: &Dataset, var: VarId, args: &GetArgs) -> Result<Hyperslab> {
    let shape = ds.var_shape(var);
    let rank = shape.len();
    let start = parse_indices(&args.start, "start", &shape)?.unwrap_or_else(|| vec![0; rank]);
    let stride = parse_indices(&args.stride, "stride", &shape)?.unwrap_or_else(|| vec![1; rank]);
    check_strides(ds, var, &stride)?;
    let count = match parse_indices(&args.count, "count", &shape)? {
        Some(c) => c,
        None => (0..rank)
            .map(|d| to_end(shape[d], start[d], stride[d]))
            .collect(),
    };
    let slab = Hyperslab {
        start,
        count,
        stride,
    };
    check_within(ds, var, &slab, |_| false)?;
    slab.validate(&shape)?;
    Ok(slab)
}

/// Refuses a `--stride` with a step of 0, naming the dimension and the variable.
pub(super) fn check_strides(ds: &Dataset, var: VarId, stride: &[u64]) -> Result<()> {
    match stride.iter().position(|&s| s == 0) {
        Some(d) => Err(Error::InvalidHyperslab(format!(
            "--stride {} steps by 0 along dimension {} of {}: steps must be at least 1",
            join(stride),
            ds.dim_fqn(ds.var(var).dims[d]),
            ds.var_fqn(var)
        ))),
        None => Ok(()),
    }
}

/// Refuses a hyperslab of `var` that reaches past the end of one of its dimensions (a start
/// past the end, or a last index at or past it), naming the options as given, the dimension,
/// the variable and the dimension's length. `grows(d)`: dimension `d` may be written past its
/// end (an unlimited one, for `put`), so it is not checked.
pub(super) fn check_within(
    ds: &Dataset,
    var: VarId,
    slab: &Hyperslab,
    grows: impl Fn(usize) -> bool,
) -> Result<()> {
    let shape = ds.var_shape(var);
    for (d, &len) in shape.iter().enumerate() {
        let (start, count, stride) = (slab.start[d], slab.count[d], slab.stride[d]);
        let past = match count {
            0 => start > len,
            _ => (count - 1)
                .checked_mul(stride)
                .and_then(|x| x.checked_add(start))
                .is_none_or(|last| last >= len),
        };
        if past && !grows(d) {
            let dim = ds.var(var).dims[d];
            let kind = match ds.dim(dim).unlimited {
                true => "current",
                false => "fixed",
            };
            let what = match count {
                0 => format!("--start {} is", join(&slab.start)),
                _ => format!("{} reaches", slab_options(slab)),
            };
            return Err(Error::InvalidHyperslab(format!(
                "{what} past the end of dimension {} of {}, which has the {kind} length {len}",
                ds.dim_fqn(dim),
                ds.var_fqn(var)
            )));
        }
    }
    Ok(())
}

/// The options that give `slab`, as a message quotes them: `--start 0,1 --count 2,2 --stride
/// 1,1`.
fn slab_options(slab: &Hyperslab) -> String {
    format!(
        "--start {} --count {} --stride {}",
        join(&slab.start),
        join(&slab.count),
        join(&slab.stride)
    )
}

/// Indices as the options take them: `1,0,2`.
pub(super) fn join(indices: &[u64]) -> String {
    indices
        .iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Parses one `--start`/`--count`/`--stride` option: a comma-separated list of one
/// non-negative integer per dimension of `shape` (`None` when the option is absent).
pub(super) fn parse_indices(
    text: &Option<String>,
    what: &str,
    shape: &[u64],
) -> Result<Option<Vec<u64>>> {
    let rank = shape.len();
    let Some(text) = text else {
        return Ok(None);
    };
    let values = if text.trim().is_empty() {
        Vec::new()
    } else {
        text.split(',')
            .map(|p| {
                let n = p.trim();
                if !super::is_integer(n) {
                    return Err(Error::Usage(format!(
                        "--{what}: {} is not a non-negative integer",
                        quoted(p)
                    )));
                }
                // A negative number is of the option's form, out of its range.
                match n.strip_prefix('-') {
                    Some(digits) if digits.bytes().any(|b| b != b'0') => {
                        Err(Error::Invalid(format!(
                            "--{what}: {} is negative (must be from 0 to {})",
                            quoted(p),
                            u64::MAX
                        )))
                    }
                    Some(_) => Ok(0),
                    None => n.parse::<u64>().map_err(|_| {
                        Error::Invalid(format!(
                            "--{what}: {} is too large (at most {})",
                            quoted(p),
                            u64::MAX
                        ))
                    }),
                }
            })
            .collect::<Result<Vec<u64>>>()?
    };
    if values.len() != rank {
        return Err(Error::Invalid(format!(
            "--{what} needs {rank} value(s) (the variable's shape is {shape:?}), got {}",
            values.len()
        )));
    }
    Ok(Some(values))
}

/// How many indices from `start` in steps of `stride` lie inside a dimension of length `len`.
pub(super) fn to_end(len: u64, start: u64, stride: u64) -> u64 {
    if stride == 0 || start >= len {
        0
    } else {
        (len - start).div_ceil(stride)
    }
}

/// Reads the slab in blocks along its first dimension and writes each block out. A second
/// thread writes one block while the next is read, so the output's cost (a file's page cache,
/// a pipe's reader) overlaps the reading instead of adding to it.
fn write_values(
    open: &OpenDataset,
    var: VarId,
    slab: &Hyperslab,
    cache: u64,
    out: &mut (dyn Write + Send),
) -> Result<()> {
    let ds = &open.model;
    let esize = ds.var(var).element_size() as u64;
    if slab.count.is_empty() || slab.is_empty() {
        // A scalar, or nothing selected (still validated).
        let mut buf = vec![0u8; (slab.len() * esize) as usize];
        open.engine.read(ds, var, slab, &mut buf)?;
        return out.write_all(&buf).map_err(|e| Error::io(OUTPUT, e));
    }
    let blocks = blocks(open, var, slab, cache);
    std::thread::scope(|scope| {
        let (full_tx, full_rx) = mpsc::sync_channel::<Vec<u8>>(0);
        let (empty_tx, empty_rx) = mpsc::channel::<Vec<u8>>();
        let writer = scope.spawn(move || -> std::io::Result<()> {
            for buf in full_rx {
                out.write_all(&buf)?;
                // The reader may be gone (it failed); the buffer is then simply dropped.
                let _ = empty_tx.send(buf);
            }
            Ok(())
        });
        // Two buffers, reused: fresh pages cost more than the copy into them.
        let mut fresh = 2;
        let mut read = Ok(());
        for block in blocks {
            let bytes = match usize::try_from(block.len().saturating_mul(esize)) {
                Ok(n) => n,
                Err(_) => {
                    read = Err(Error::InvalidHyperslab(
                        "selection too large for this machine".into(),
                    ));
                    break;
                }
            };
            let mut buf = if fresh > 0 {
                fresh -= 1;
                // Zeroed by the allocator's request to the kernel, not written over once more.
                vec![0u8; bytes]
            } else {
                match empty_rx.recv() {
                    Ok(buf) => buf,
                    Err(_) => break, // the writer failed: its error is reported below
                }
            };
            buf.resize(bytes, 0);
            if let Err(e) = open.engine.read(ds, var, &block, &mut buf) {
                read = Err(e);
                break;
            }
            if full_tx.send(buf).is_err() {
                break;
            }
        }
        drop(full_tx);
        let written = writer
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the output thread panicked")));
        // A write error explains a stopped read better than the read's own state.
        written.map_err(|e| Error::io(OUTPUT, e))?;
        read
    })
}

/// The slab cut into blocks in C order, each about `BLOCK_BYTES` (more on a map with request
/// latency): runs of indices along the first dimension whose index holds no more than that
/// (one index of each dimension before it per block), so the blocks follow each other in the
/// output. Along the first dimension a block ends on a chunk boundary, so that no chunk is
/// read twice, unless that makes it over `ALIGNED_BLOCKS` blocks' worth: chunks that span
/// much of a dimension (a time series chunked `(ntime, 1)`) are then read again for each
/// block, as the engine's cache of `cache` bytes allows, rather than the whole variable held
/// at once; a warning says how much cache would read each once.
fn blocks<'a>(
    open: &'a OpenDataset,
    var: VarId,
    slab: &'a Hyperslab,
    cache: u64,
) -> impl Iterator<Item = Hyperslab> + 'a {
    let ds = &open.model;
    let esize = ds.var(var).element_size() as u64;
    // On S3 a block spans several of the engine's batches of concurrent GETs, which it
    // overlaps; each block still ends waiting for its slowest request.
    let block_bytes = match open.map.concurrent_gets() {
        1 => BLOCK_BYTES,
        _ => BLOCK_BYTES * REMOTE_BLOCKS,
    };
    // The bytes of one index of each dimension: the product of the counts after it.
    let mut index_bytes = vec![esize.max(1); slab.count.len()];
    for d in (0..slab.count.len().saturating_sub(1)).rev() {
        index_bytes[d] = index_bytes[d + 1].saturating_mul(slab.count[d + 1]);
    }
    // The dimension the blocks run along: the first whose index fits a block.
    let split = index_bytes
        .iter()
        .position(|&b| b <= block_bytes)
        .unwrap_or(slab.count.len() - 1);
    let target = (block_bytes / index_bytes[split]).max(1);
    let chunks = &ds.var(var).storage.chunks;
    let chunk = match chunks.get(split) {
        Some(&c) if c > 0 && chunks.len() == slab.count.len() => c,
        _ => 1,
    };
    let (start, stride, count) = (slab.start[split], slab.stride[split], slab.count[split]);
    let chunk_run = chunk.div_ceil(stride).min(count);
    let run_bytes = chunk_run.saturating_mul(index_bytes[split]);
    if run_bytes > block_bytes * ALIGNED_BLOCKS && chunk_run > target && run_bytes > cache {
        log::warn!(
            "a row of the chunks of {} holds {} MiB: each of them is read again for every \
             {} MiB written, unless --cache-size holds a row ({}M)",
            ds.fqn_in(ds.var(var).group, &ds.var(var).name),
            run_bytes >> 20,
            (target * index_bytes[split]) >> 20,
            (run_bytes + run_bytes / 4).div_ceil(1 << 20),
        );
    }
    let outer: u64 = slab.count[..split].iter().product();
    let (mut outer_done, mut done) = (0u64, 0u64);
    std::iter::from_fn(move || {
        if outer_done >= outer {
            return None;
        }
        let aligned = (start + (done + target) * stride).next_multiple_of(chunk);
        let mut end = (aligned - start).div_ceil(stride).clamp(done + 1, count);
        if (end - done).saturating_mul(index_bytes[split]) > block_bytes * ALIGNED_BLOCKS {
            end = (done + target).min(count);
        }
        let mut block = slab.clone();
        // This block's index along each dimension before `split`, from `outer_done`.
        let mut rest = outer_done;
        for d in (0..split).rev() {
            block.start[d] = slab.start[d] + (rest % slab.count[d]) * slab.stride[d];
            block.count[d] = 1;
            rest /= slab.count[d];
        }
        block.start[split] = start + done * stride;
        block.count[split] = end - done;
        done = end;
        if done >= count {
            done = 0;
            outer_done += 1;
        }
        Some(block)
    })
}

/// The NumPy dtype of a variable's native values.
pub(super) fn npy_descr(ds: &Dataset, var: VarId) -> String {
    let v = ds.var(var);
    match v.nctype {
        NcType::Byte => "|i1".into(),
        NcType::UByte => "|u1".into(),
        NcType::Short => "<i2".into(),
        NcType::UShort => "<u2".into(),
        NcType::Int => "<i4".into(),
        NcType::UInt => "<u4".into(),
        NcType::Int64 => "<i8".into(),
        NcType::UInt64 => "<u8".into(),
        NcType::Float => "<f4".into(),
        NcType::Double => "<f8".into(),
        NcType::Char => "|S1".into(),
        NcType::String => format!("|S{}", v.string_width),
    }
}

/// A `.npy` format 1.0 header for an array of `shape`: magic, version, little-endian header
/// length, then the dict padded with spaces and a newline so the data starts at a multiple of
/// 64 bytes (as NumPy writes it).
fn npy_header(ds: &Dataset, var: VarId, shape: &[u64]) -> Result<Vec<u8>> {
    let dims = match shape {
        [] => "()".to_string(),
        [n] => format!("({n},)"),
        _ => format!(
            "({})",
            shape
                .iter()
                .map(|n| n.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {dims}, }}",
        npy_descr(ds, var)
    );
    let unpadded = 10 + dict.len() + 1;
    dict.push_str(&" ".repeat(unpadded.next_multiple_of(64) - unpadded));
    dict.push('\n');
    let len = u16::try_from(dict.len())
        .map_err(|_| Error::Invalid("array shape too long for a .npy v1.0 header".into()))?;
    let mut header = b"\x93NUMPY\x01\x00".to_vec();
    header.extend(len.to_le_bytes());
    header.extend(dict.as_bytes());
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{VarStorage, Variable};

    fn args(start: Option<&str>, count: Option<&str>, stride: Option<&str>) -> GetArgs {
        GetArgs {
            location: "x".into(),
            var: "v".into(),
            start: start.map(Into::into),
            count: count.map(Into::into),
            stride: stride.map(Into::into),
            npy: false,
            output: None,
            cache_size: None,
        }
    }

    /// A variable `/v` of `shape` with dimensions `/y`, `/x`, … (the first unlimited when
    /// `records`).
    fn grid(shape: &[u64], records: bool) -> (Dataset, VarId) {
        let mut ds = Dataset::new();
        let dims = shape
            .iter()
            .enumerate()
            .map(|(d, &len)| {
                let name = ["y", "x", "w"][d];
                ds.add_dim(Dataset::ROOT, name, len, records && d == 0)
            })
            .collect();
        let v = ds.add_var(Variable {
            name: "v".into(),
            group: Dataset::ROOT,
            nctype: NcType::Int,
            dims,
            string_width: 0,
            attrs: Vec::new(),
            storage: VarStorage::default(),
        });
        (ds, v)
    }

    /// A negative index is a number out of range (exit status 1), text that is no integer
    /// one of the wrong form (2); a sign before 0 or a positive number changes nothing.
    #[test]
    fn negative_indices_are_out_of_range() {
        let parse = |text: &str| parse_indices(&Some(text.into()), "start", &[5, 7]);
        assert_eq!(parse("+1, -0").unwrap(), Some(vec![1, 0]));
        for negative in ["-1,0", "0,-3", "-99999999999999999999,0"] {
            match parse(negative) {
                Err(Error::Invalid(m)) => assert!(m.contains("is negative"), "{negative}: {m}"),
                other => panic!("{negative}: {other:?}"),
            }
        }
        for wrong in ["x,0", "0,--1", "-,0", "1.5,0"] {
            assert!(matches!(parse(wrong), Err(Error::Usage(_))), "{wrong}");
        }
    }

    /// The temporary file of a `get -o` to a name as long as a file name may be fits beside
    /// it (else the output would be written in place, and a failed read would leave it cut
    /// short), and another long name that begins alike gets other temporary files.
    #[test]
    fn temporary_files_of_long_output_names_fit() {
        use std::ffi::OsStr;
        let shared = "o".repeat(200);
        let (name, other) = (
            format!("{shared}{}", "a".repeat(55)),
            format!("{shared}{}", "b".repeat(55)),
        );
        let prefix = temp_prefix(OsStr::new(&name));
        let longest = prefix.len() + u32::MAX.to_string().len() + 1 + 16;
        assert!(longest <= 255, "{longest}");
        assert!(!temp_prefix(OsStr::new(&other))
            .as_encoded_bytes()
            .starts_with(prefix.as_encoded_bytes()));
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join(&name);
        let mut output = OutputFile::create(&out).unwrap();
        assert!(output.staged.is_some(), "written in place");
        std::io::Write::write_all(&mut output.file, b"values").unwrap();
        output.commit().unwrap();
        assert_eq!(std::fs::read(&out).unwrap(), b"values");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn errors_name_the_options_the_variable_and_the_dimension() {
        let (ds, v) = grid(&[37, 41], false);
        let err = |start, count, stride| {
            hyperslab(&ds, v, &args(start, count, stride))
                .unwrap_err()
                .to_string()
        };
        assert_eq!(
            err(None, Some("9000000,1"), None),
            "invalid hyperslab: --start 0,0 --count 9000000,1 --stride 1,1 reaches past the \
             end of dimension /y of /v, which has the fixed length 37"
        );
        let e = err(None, Some("2,1"), Some("18446744073709551615,1"));
        assert!(
            e.contains("--stride 18446744073709551615,1 reaches past the end of dimension /y"),
            "{e}"
        );
        let e = err(Some("5,0"), Some("3,1"), Some("4611686018427387904,1"));
        assert!(
            e.contains("--start 5,0 --count 3,1 --stride 4611686018427387904,1"),
            "{e}"
        );
        assert_eq!(
            err(Some("0,42"), None, None),
            "invalid hyperslab: --start 0,42 is past the end of dimension /x of /v, which has \
             the fixed length 41"
        );
        assert_eq!(
            err(None, None, Some("1,0")),
            "invalid hyperslab: --stride 1,0 steps by 0 along dimension /x of /v: steps must \
             be at least 1"
        );
        let (ds, v) = grid(&[3, 2], true);
        let e = hyperslab(&ds, v, &args(Some("3,0"), Some("1,2"), None))
            .unwrap_err()
            .to_string();
        assert!(
            e.ends_with(
                "reaches past the end of dimension /y of /v, which has the current \
                 length 3"
            ),
            "{e}"
        );
    }

    #[test]
    fn slab_defaults_reach_the_end() {
        let (ds, v) = grid(&[10, 4], false);
        let s = hyperslab(&ds, v, &args(Some("1,2"), None, Some("3,1"))).unwrap();
        assert_eq!(
            (s.start, s.count, s.stride),
            (vec![1, 2], vec![3, 2], vec![3, 1])
        );
        let s = hyperslab(&ds, v, &args(None, None, None)).unwrap();
        assert_eq!(s, Hyperslab::whole(&[10, 4]));
        // A start at the end selects nothing there, which is no error.
        let s = hyperslab(&ds, v, &args(Some("10,0"), None, None)).unwrap();
        assert_eq!(s.count, vec![0, 4]);
        assert!(hyperslab(&ds, v, &args(Some("1"), None, None)).is_err());
        assert!(hyperslab(&ds, v, &args(Some("1,x"), None, None)).is_err());
        let (ds, v) = grid(&[], false);
        let s = hyperslab(&ds, v, &args(None, None, None)).unwrap();
        assert_eq!(s, Hyperslab::whole(&[]));
    }

    #[test]
    fn npy_header_like_numpy() {
        let mut ds = Dataset::new();
        let v = ds.add_var(Variable {
            name: "v".into(),
            group: Dataset::ROOT,
            nctype: NcType::Int,
            dims: Vec::new(),
            string_width: 0,
            attrs: Vec::new(),
            storage: VarStorage::default(),
        });
        // numpy.lib.format.header_data_from_array_1_0 + write_array_header_1_0 for
        // np.zeros((3, 4), "<i4"): a 128-byte header.
        let h = npy_header(&ds, v, &[3, 4]).unwrap();
        let want_dict = "{'descr': '<i4', 'fortran_order': False, 'shape': (3, 4), }";
        assert_eq!(&h[..8], b"\x93NUMPY\x01\x00");
        assert_eq!(h.len(), 128);
        assert_eq!(u16::from_le_bytes([h[8], h[9]]), 118);
        assert!(h[10..].starts_with(want_dict.as_bytes()));
        assert_eq!(*h.last().unwrap(), b'\n');
        let h = npy_header(&ds, v, &[7]).unwrap();
        assert!(String::from_utf8_lossy(&h).contains("'shape': (7,), }"));
        let h = npy_header(&ds, v, &[]).unwrap();
        assert!(String::from_utf8_lossy(&h).contains("'shape': (), }"));
    }

    #[test]
    fn npy_string_dtypes() {
        let mut ds = Dataset::new();
        let mut var = Variable {
            name: "s".into(),
            group: Dataset::ROOT,
            nctype: NcType::String,
            dims: Vec::new(),
            string_width: 12,
            attrs: Vec::new(),
            storage: VarStorage::default(),
        };
        let s = ds.add_var(var.clone());
        var.name = "c".into();
        var.nctype = NcType::Char;
        let c = ds.add_var(var);
        assert_eq!(npy_descr(&ds, s), "|S12");
        assert_eq!(npy_descr(&ds, c), "|S1");
    }
}
