//! Renames that a SIGKILL of the process asking for them cannot cut short.
//!
//! A flush replaces several metadata objects whose contents must agree (a grown dimension in
//! its group's object and the shapes in its arrays' objects), and netcdf-c refuses a dataset
//! where they disagree. Separate files cannot be replaced in one step, so a writer that
//! enables it ([`use_rename_helper`]) hands each such set of renames to a helper process of
//! its own (`nczarrfs rename-helper`, started at the first set): the helper receives the
//! whole set before it renames anything, and then renames all of it even if the writer is
//! killed meanwhile. The helper's command line names no mount point, so killing a mount's
//! processes by their command line does not kill it; it ignores the terminal's signals and
//! exits when the writer closes the pipe (or dies). A writer without the helper, or whose
//! helper has gone, renames in its own process.
//!
//! The wire format on the helper's stdin: a set is a `u32` count, then for each rename the
//! source and the target as a `u32` length and that many bytes (integers little-endian).
//! The helper answers each set with the number renamed (`u32`) and, if one failed, its errno
//! (`i32`, else 0).

use std::ffi::{CString, OsStr, OsString};
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};

use std::os::fd::{AsFd, AsRawFd};

use super::beneath::{self, NearDirs};

/// The command line argument that makes the binary serve as the helper.
pub const RENAME_HELPER_COMMAND: &str = "rename-helper";

/// The program started as the helper (`PROGRAM rename-helper`); unset: no helper.
static PROGRAM: OnceLock<PathBuf> = OnceLock::new();
static HELPER: Mutex<Option<Helper>> = Mutex::new(None);

/// Makes this process's multi-object writes to directory stores go through a helper process
/// running `program rename-helper` (normally this binary), started when first needed; `ps`
/// shows it as `nczarrfs rename-helper`.
pub fn use_rename_helper(program: PathBuf) {
    let _ = PROGRAM.set(program);
}

/// Stops the helper, if one runs: closes its pipe and waits for it to exit.
pub fn stop_rename_helper() {
    let helper = HELPER.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(helper) = helper {
        helper.stop();
    }
}

/// Serves as the helper: renames each set read from stdin and answers on stdout, until
/// stdin ends. A set cut short by the end of stdin (its writer died while sending it) is
/// not applied. `named_writer`, the writer its command line names, must be its parent.
pub fn serve_renames(named_writer: Option<u32>) -> crate::Result<()> {
    for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: ignoring a signal installs no handler code.
        unsafe { libc::signal(signal, libc::SIG_IGN) };
    }
    let writer = std::os::unix::process::parent_id();
    if named_writer.is_some_and(|named| named != writer) {
        return Err(crate::Error::Invalid(format!(
            "nczarrfs {RENAME_HELPER_COMMAND} is internal: it serves only the process that \
             started it ({writer}), which its command line names"
        )));
    }
    let mut input = BufReader::new(io::stdin().lock());
    let mut output = io::stdout().lock();
    let reading = |e| crate::Error::io("rename helper: standard input", e);
    while let Some(pairs) = read_set(&mut input).map_err(reading)? {
        let foreign = pairs.iter().find(|(from, to)| {
            !temporary_owner(from, to)
                .is_some_and(|owner| owner == writer || crate::interrupt::has_ended(owner))
        });
        let (renamed, error) = match foreign {
            Some((from, to)) => {
                eprintln!(
                    "nczarrfs {RENAME_HELPER_COMMAND} is internal: it renames only the \
                     temporary files of the process that started it; {} -> {} is not one, \
                     nothing renamed",
                    from.display(),
                    to.display()
                );
                (0, Some(io::Error::from_raw_os_error(libc::EPERM)))
            }
            None => rename_in_this_process(&pairs),
        };
        let errno = error.and_then(|e| e.raw_os_error()).unwrap_or(0);
        let mut answer = (renamed as u32).to_le_bytes().to_vec();
        answer.extend_from_slice(&errno.to_le_bytes());
        match output.write_all(&answer).and_then(|()| output.flush()) {
            Ok(()) => {}
            // The daemon died (killed) while this set was renamed: the set is complete, and
            // nobody is left to tell.
            Err(e) if e.kind() == io::ErrorKind::BrokenPipe => return Ok(()),
            Err(e) => return Err(crate::Error::io("rename helper: standard output", e)),
        }
    }
    Ok(())
}

/// The writers (process ids) whose rename helpers are running, found by their command lines
/// (`nczarrfs rename-helper PID`). A helper goes on renaming a set after its writer has
/// died, so the writer's temporary files are not left over while it runs.
pub(super) fn writers_served() -> Vec<u32> {
    let Ok(processes) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    processes
        .flatten()
        .filter_map(|process| std::fs::read(process.path().join("cmdline")).ok())
        .filter_map(|cmdline| {
            let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
            match args.as_slice() {
                [_, command, writer, ..] if *command == RENAME_HELPER_COMMAND.as_bytes() => {
                    std::str::from_utf8(writer).ok()?.parse().ok()
                }
                _ => None,
            }
        })
        .collect()
}

/// Renames every `(from, to)` pair in order, stopping at the first failure: through the
/// helper when this process uses one. Returns how many were renamed and, if one failed, its
/// error (the pair at that index was not renamed).
pub(super) fn rename_in_order(pairs: &[(PathBuf, PathBuf)]) -> (usize, Option<io::Error>) {
    let Some(program) = PROGRAM.get() else {
        return rename_in_this_process(pairs);
    };
    let mut slot = HELPER.lock().unwrap_or_else(|e| e.into_inner());
    if slot.is_none() {
        match Helper::start(program) {
            Ok(helper) => *slot = Some(helper),
            Err(e) => {
                // Tried again at every set (the cause may pass), but said once.
                static WARNED: std::sync::Once = std::sync::Once::new();
                WARNED.call_once(|| {
                    log::warn!(
                        "cannot start {} {RENAME_HELPER_COMMAND} ({e}): renaming in this \
                         process, where a SIGKILL can leave a set of metadata objects half \
                         replaced",
                        program.display()
                    )
                });
                return rename_in_this_process(pairs);
            }
        }
    }
    let helper = slot.as_mut().expect("started above");
    match helper.rename(pairs) {
        Ok(answer) => answer,
        Err(e) => {
            log::warn!("the rename helper failed ({e}): finishing its renames in this process");
            if let Some(gone) = slot.take() {
                gone.stop();
            }
            finish_in_this_process(pairs)
        }
    }
}

/// The writer whose temporary file for `to` `from` is named as
/// (`DIR/.nczarrfs-tmp.NAME.PID.TOKEN` for `DIR/NAME`, NAME shortened when it is long, as
/// [`super::FileMap`] names them): the helper renames nothing else, so that it cannot be used
/// to move arbitrary files.
fn temporary_owner(from: &Path, to: &Path) -> Option<u32> {
    let temp = from.file_name()?.to_str()?;
    let name = to.file_name()?.to_str()?;
    let (pid, token) = temp
        .strip_prefix(super::file::TEMP_PREFIX)?
        .strip_prefix(&*super::temp_files::key_name_stem(name))?
        .strip_prefix('.')?
        .split_once('.')?;
    let number = !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit());
    (from.parent() == to.parent() && number && super::temp_files::is_token(token))
        .then(|| pid.parse().ok())?
}

fn rename_in_this_process(pairs: &[(PathBuf, PathBuf)]) -> (usize, Option<io::Error>) {
    let mut near = NearDirs::default();
    for (renamed, (from, to)) in pairs.iter().enumerate() {
        if let Err(e) = rename_near(&mut near, from, to) {
            return (renamed, Some(e));
        }
    }
    (pairs.len(), None)
}

/// `rename(from, to)`, for two names in one directory: the directory is opened from the
/// nearest of those `near` has kept (and then kept), following symbolic links as `rename`
/// does, and the names renamed in it. A set of renames of objects nested thousands deep
/// would otherwise have the kernel walk each whole path, which costs the square of the
/// depth for the set.
fn rename_near(near: &mut NearDirs, from: &Path, to: &Path) -> io::Result<()> {
    let (Some(dir), Some(from_name), Some(to_name)) =
        (from.parent(), from.file_name(), to.file_name())
    else {
        return std::fs::rename(from, to);
    };
    if to.parent() != Some(dir) || dir.as_os_str().is_empty() {
        return std::fs::rename(from, to);
    }
    let flags = libc::O_PATH | libc::O_DIRECTORY;
    let fd = match near.nearest(dir) {
        Some((fd, rest)) if rest.as_os_str().is_empty() => fd,
        Some((fd, rest)) => Arc::new(beneath::open_at(
            fd.as_fd(),
            &beneath::c_name(rest.as_os_str().as_bytes())?,
            flags,
        )?),
        None => Arc::new(beneath::open_path(
            &beneath::c_name(dir.as_os_str().as_bytes())?,
            flags,
        )?),
    };
    near.keep(dir, &fd);
    let from_name = beneath::c_name(from_name.as_bytes())?;
    let to_name = beneath::c_name(to_name.as_bytes())?;
    // SAFETY: an open directory descriptor and NUL-terminated names.
    match unsafe {
        libc::renameat(
            fd.as_raw_fd(),
            from_name.as_ptr(),
            fd.as_raw_fd(),
            to_name.as_ptr(),
        )
    } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Completes a set the helper may have partly renamed before it went: a source that is gone
/// was renamed (sources are temporary files no one else touches).
fn finish_in_this_process(pairs: &[(PathBuf, PathBuf)]) -> (usize, Option<io::Error>) {
    for (renamed, (from, to)) in pairs.iter().enumerate() {
        match std::fs::rename(from, to) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound && to.exists() => {}
            Err(e) => return (renamed, Some(e)),
        }
    }
    (pairs.len(), None)
}

/// A running helper and the two ends of its pipes.
struct Helper {
    child: Child,
    input: BufWriter<ChildStdin>,
    output: ChildStdout,
}

impl Helper {
    fn start(program: &Path) -> io::Result<Helper> {
        let mut child = Command::new(program)
            .arg0("nczarrfs")
            .arg(RENAME_HELPER_COMMAND)
            // Names the writer served, for `writers_served`.
            .arg(std::process::id().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()?;
        let (Some(input), Some(output)) = (child.stdin.take(), child.stdout.take()) else {
            unreachable!("both pipes were asked for");
        };
        Ok(Helper {
            child,
            input: BufWriter::new(input),
            output,
        })
    }

    fn rename(&mut self, pairs: &[(PathBuf, PathBuf)]) -> io::Result<(usize, Option<io::Error>)> {
        let count = u32::try_from(pairs.len()).map_err(io::Error::other)?;
        self.input.write_all(&count.to_le_bytes())?;
        for (from, to) in pairs {
            write_bytes(&mut self.input, from.as_os_str())?;
            write_bytes(&mut self.input, to.as_os_str())?;
        }
        self.input.flush()?;
        let mut answer = [0u8; 8];
        self.output.read_exact(&mut answer)?;
        let renamed = u32::from_le_bytes(answer[..4].try_into().expect("4 bytes")) as usize;
        let errno = i32::from_le_bytes(answer[4..].try_into().expect("4 bytes"));
        if renamed > pairs.len() {
            return Err(io::Error::other(
                "the helper answered for more renames than it was sent",
            ));
        }
        let error = (renamed < pairs.len()).then(|| io::Error::from_raw_os_error(errno));
        Ok((renamed, error))
    }

    /// Closes the helper's input, which ends it, and collects its exit.
    fn stop(self) {
        let Helper {
            mut child, input, ..
        } = self;
        drop(input);
        let _ = child.wait();
    }
}

fn write_bytes(out: &mut impl Write, s: &OsStr) -> io::Result<()> {
    let len = u32::try_from(s.len()).map_err(io::Error::other)?;
    out.write_all(&len.to_le_bytes())?;
    out.write_all(s.as_bytes())
}

/// Reads one set; `None` at the end of the input, including a set cut short by it.
fn read_set(input: &mut impl Read) -> io::Result<Option<Vec<(PathBuf, PathBuf)>>> {
    let Some(count) = read_u32(input)? else {
        return Ok(None);
    };
    let mut pairs = Vec::new();
    for _ in 0..count {
        let (Some(from), Some(to)) = (read_path(input)?, read_path(input)?) else {
            return Ok(None);
        };
        pairs.push((from, to));
    }
    Ok(Some(pairs))
}

fn read_u32(input: &mut impl Read) -> io::Result<Option<u32>> {
    let mut bytes = [0u8; 4];
    match input.read_exact(&mut bytes) {
        Ok(()) => Ok(Some(u32::from_le_bytes(bytes))),
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => Ok(None),
        Err(e) => Err(e),
    }
}

fn read_path(input: &mut impl Read) -> io::Result<Option<PathBuf>> {
    let Some(len) = read_u32(input)? else {
        return Ok(None);
    };
    let mut bytes = vec![0u8; len as usize];
    match input.read_exact(&mut bytes) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    // A path with a NUL could not be renamed anyway; refusing it here names the problem.
    CString::new(bytes.clone()).map_err(io::Error::other)?;
    Ok(Some(PathBuf::from(OsString::from_vec(bytes))))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn staged(dir: &Path, count: usize) -> (Vec<PathBuf>, Vec<(PathBuf, PathBuf)>) {
        let mut targets = Vec::new();
        let mut pairs = Vec::new();
        for i in 0..count {
            let temp = dir.join(format!("temp{i}"));
            let target = dir.join(format!("object{i}"));
            std::fs::write(&temp, i.to_string()).unwrap();
            pairs.push((temp, target.clone()));
            targets.push(target);
        }
        (targets, pairs)
    }

    fn encoded(pairs: &[(PathBuf, PathBuf)]) -> Vec<u8> {
        let mut out = (pairs.len() as u32).to_le_bytes().to_vec();
        for (from, to) in pairs {
            write_bytes(&mut out, from.as_os_str()).unwrap();
            write_bytes(&mut out, to.as_os_str()).unwrap();
        }
        out
    }

    #[test]
    fn only_a_writers_temporary_files_are_renamed_by_the_helper() {
        let owner = |from: &str, to: &str| temporary_owner(Path::new(from), Path::new(to));
        const T: &str = "0123456789abcdef";
        assert_eq!(
            owner(
                &format!("/d/g/.nczarrfs-tmp..zarray.42.{T}"),
                "/d/g/.zarray"
            ),
            Some(42)
        );
        assert_eq!(
            owner(
                &format!("/d/.nczarrfs-tmp.zarr.json.42.{T}"),
                "/d/zarr.json"
            ),
            Some(42)
        );
        assert_eq!(
            owner(&format!("/d/.nczarrfs-tmp..zarray.42.{T}"), "/e/.zarray"),
            None
        );
        assert_eq!(
            owner(&format!("/d/.nczarrfs-tmp..zattrs.42.{T}"), "/d/.zarray"),
            None
        );
        assert_eq!(owner("/d/.nczarrfs-tmp..zarray.42.", "/d/.zarray"), None);
        assert_eq!(owner("/d/.nczarrfs-tmp..zarray.42.0", "/d/.zarray"), None);
        assert_eq!(
            owner(&format!("/d/.nczarrfs-tmp..zarray.x.{T}"), "/d/.zarray"),
            None
        );
        assert_eq!(owner("/d/ds.file", "/d/other"), None);
        // A long name is shortened in its temporary's name, and told from another long name
        // that begins alike.
        let long = |last: &str| format!("{}{}", "0.".repeat(110), last);
        let temp = format!(
            "/d/.nczarrfs-tmp.{}.42.{T}",
            crate::zmap::temp_files::key_name_stem(&long("0"))
        );
        assert!(Path::new(&temp).file_name().unwrap().len() <= 255, "{temp}");
        assert_eq!(owner(&temp, &format!("/d/{}", long("0"))), Some(42));
        assert_eq!(owner(&temp, &format!("/d/{}", long("1"))), None);
    }

    #[test]
    fn renames_in_order_and_stops_at_the_first_failure() {
        let dir = tempfile::tempdir().unwrap();
        let (targets, mut pairs) = staged(dir.path(), 3);
        pairs[1].0 = dir.path().join("missing");
        let (renamed, error) = rename_in_this_process(&pairs);
        assert_eq!(renamed, 1);
        assert_eq!(error.unwrap().kind(), io::ErrorKind::NotFound);
        assert_eq!(std::fs::read_to_string(&targets[0]).unwrap(), "0");
        assert!(!targets[1].exists() && !targets[2].exists());
        assert!(dir.path().join("temp2").exists());
    }

    #[test]
    fn finishing_a_set_skips_what_was_already_renamed() {
        let dir = tempfile::tempdir().unwrap();
        let (targets, pairs) = staged(dir.path(), 3);
        std::fs::rename(&pairs[0].0, &pairs[0].1).unwrap();
        assert!(matches!(finish_in_this_process(&pairs), (3, None)));
        for (i, target) in targets.iter().enumerate() {
            assert_eq!(std::fs::read_to_string(target).unwrap(), i.to_string());
        }
    }

    #[test]
    fn sets_round_trip_and_a_cut_set_reads_as_the_end() {
        let dir = tempfile::tempdir().unwrap();
        let (_, pairs) = staged(dir.path(), 2);
        let bytes = encoded(&pairs);
        assert_eq!(read_set(&mut &bytes[..]).unwrap(), Some(pairs));
        for cut in 0..bytes.len() {
            assert_eq!(read_set(&mut &bytes[..cut]).unwrap(), None, "cut at {cut}");
        }
    }
}
