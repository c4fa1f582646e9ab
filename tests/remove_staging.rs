//! `nczarrfs remove-staging` (started by an interrupted `gen` or `copy` to remove its staging
//! sibling once it has exited) removes nothing but the staging paths of the process that
//! started it (or of one that has ended), whatever it is given.

use std::path::Path;
use std::process::{Command, Stdio};

fn remove_staging(paths: &[&Path]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nczarrfs"))
        .arg("remove-staging")
        .args(paths)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn dataset(path: &Path) {
    std::fs::create_dir_all(path.join("v")).unwrap();
    std::fs::write(path.join(".zgroup"), b"{\"zarr_format\": 2}").unwrap();
}

#[test]
fn a_dataset_or_a_running_process_staging_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("mydata.file");
    let others = dir.path().join(".mydata.file.nczarrfs-1");
    let own = dir
        .path()
        .join(format!(".mydata.file.nczarrfs-{}", std::process::id()));
    for path in [&data, &others, &own] {
        dataset(path);
    }
    for refused in [&data, &others] {
        let out = remove_staging(&[&own, refused]);
        assert_eq!(out.status.code(), Some(1), "{refused:?}");
        let message = String::from_utf8_lossy(&out.stderr);
        assert!(
            message.contains(&refused.display().to_string()) && message.contains("nothing removed"),
            "{message}"
        );
        assert!(data.join(".zgroup").exists() && others.join(".zgroup").exists());
        assert!(
            own.join(".zgroup").exists(),
            "a refused call removes nothing"
        );
    }
    // The staging sibling of the process that started the cleaner (here, this test) goes, and
    // so does one of a process that has ended (its starter, killed at once, is no longer
    // the cleaner's parent).
    let mut ended = Command::new("true").spawn().unwrap();
    ended.wait().unwrap();
    let dead = dir
        .path()
        .join(format!(".mydata.file.nczarrfs-{}", ended.id()));
    dataset(&dead);
    let out = remove_staging(&[&own, &dead]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!own.exists() && !dead.exists());
    assert!(data.join(".zgroup").exists() && others.join(".zgroup").exists());
}
