//! A directory store's multi-object write, handed to the rename helper (the real binary's
//! `rename-helper`), survives a SIGKILL of the writer: every object ends up renamed into
//! place. Without the helper the same kill leaves the set cut (checked too, so the test
//! shows the kill lands inside the renames).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nczarrfs::zmap::{use_rename_helper, FileMap, ZMap};

/// Objects in the set: enough that the renames take a while, so that the kill lands among
/// them.
const OBJECTS: usize = 5_000;

fn objects() -> Vec<(String, Vec<u8>)> {
    (0..OBJECTS)
        .map(|i| {
            (
                format!("g{}/v{i}/.zarray", i % 100),
                i.to_string().into_bytes(),
            )
        })
        .collect()
}

fn wait_until(deadline: Duration, mut done: impl FnMut() -> bool) -> bool {
    let start = Instant::now();
    while !done() {
        if start.elapsed() > deadline {
            return false;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
    true
}

/// Forks a writer that stores `objects()` under `root` (through the helper if `helper`),
/// kills it with SIGKILL as soon as the first object is in place, and returns whether the
/// last one was in place at that moment and whether it is within `grace` after.
fn kill_during_put_many(root: &Path, helper: bool, grace: Duration) -> (bool, bool) {
    let map = FileMap::open(root, true).unwrap();
    let objects = objects();
    let first = root.join(&objects[0].0);
    let last = root.join(&objects[OBJECTS - 1].0);
    // SAFETY: the child only writes files and exits; glibc's fork leaves malloc usable.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        if helper {
            use_rename_helper(PathBuf::from(env!("CARGO_BIN_EXE_nczarrfs")));
        }
        let stored = map.put_many(&objects).is_ok();
        // SAFETY: leaves the forked test process without running the harness's code.
        unsafe { libc::_exit(if stored { 0 } else { 1 }) };
    }
    assert!(wait_until(Duration::from_secs(120), || first.exists()));
    // SAFETY: kills and reaps our own child.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
    let complete_at_kill = last.exists();
    let complete_after = wait_until(grace, || last.exists());
    (complete_at_kill, complete_after)
}

#[test]
fn a_sigkill_of_the_writer_does_not_cut_a_set_of_renames() {
    let dir = tempfile::tempdir().unwrap();
    let (at_kill, after) =
        kill_during_put_many(&dir.path().join("helped"), true, Duration::from_secs(30));
    assert!(
        !at_kill,
        "the kill landed after the renames; the test shows nothing"
    );
    assert!(
        after,
        "the helper stopped renaming when the writer was killed"
    );
    let map = FileMap::open(&dir.path().join("helped"), false).unwrap();
    for (key, value) in objects() {
        assert_eq!(map.get(&key).unwrap().as_deref(), Some(&value[..]), "{key}");
    }

    let (at_kill, after) =
        kill_during_put_many(&dir.path().join("alone"), false, Duration::from_secs(2));
    assert!(
        !at_kill && !after,
        "without the helper the kill cuts the set"
    );
}

/// The helper started by hand, as a user might after reading its name in `ps`, is sent a set
/// that renames a file which is no temporary file of its parent: it renames nothing.
#[test]
fn the_helper_refuses_to_rename_what_is_no_temporary_file_of_its_writer() {
    use std::io::{Read, Write};
    use std::os::unix::ffi::OsStrExt;

    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("ds.file");
    std::fs::write(&victim, b"a dataset").unwrap();
    let elsewhere = dir.path().join("elsewhere");
    let mut set = 1u32.to_le_bytes().to_vec();
    for path in [&victim, &elsewhere] {
        let bytes = path.as_os_str().as_bytes();
        set.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
        set.extend_from_slice(bytes);
    }
    let mut helper = std::process::Command::new(env!("CARGO_BIN_EXE_nczarrfs"))
        .arg("rename-helper")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = helper.stdin.take().unwrap();
    input.write_all(&set).unwrap();
    let mut answer = [0u8; 8];
    helper
        .stdout
        .take()
        .unwrap()
        .read_exact(&mut answer)
        .unwrap();
    drop(input);
    let out = helper.wait_with_output().unwrap();
    assert_eq!(u32::from_le_bytes(answer[..4].try_into().unwrap()), 0);
    assert_eq!(
        i32::from_le_bytes(answer[4..].try_into().unwrap()),
        libc::EPERM
    );
    assert_eq!(std::fs::read(&victim).unwrap(), b"a dataset");
    assert!(!elsewhere.exists());
    let message = String::from_utf8_lossy(&out.stderr);
    assert!(
        message.contains("ds.file") && message.contains("nothing renamed"),
        "{message}"
    );
}

/// The helper's command line names its writer (so that other writers can tell whose
/// temporary files it may still rename); a helper naming another process than the one that
/// started it serves nothing.
#[test]
fn the_helper_serves_only_the_writer_its_command_line_names() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nczarrfs"))
        .args(["rename-helper", "1"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let message = String::from_utf8_lossy(&out.stderr);
    assert!(
        message.contains("serves only the process that started it"),
        "{message}"
    );
    let own = std::process::Command::new(env!("CARGO_BIN_EXE_nczarrfs"))
        .args(["rename-helper", &std::process::id().to_string()])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(
        own.status.success(),
        "{}",
        String::from_utf8_lossy(&own.stderr)
    );
}
