//! `nczarrfs copy` between storages and dialects: the copy dumps exactly like the source
//! (whose dump is itself checked against upstream ncdump in dump_fixtures.rs), and the
//! requested chunking and codecs are in the target's metadata.

use std::path::{Path, PathBuf};
use std::process::Command;

use nczarrfs::cdl::writer::{dump, DumpOptions};
use nczarrfs::dataset::{OpenDataset, DEFAULT_CACHE_BYTES};

fn shared() -> PathBuf {
    std::env::var("NCZARRFS_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared")))
}

fn fixture(rel: &str) -> String {
    shared()
        .join("fixtures")
        .join(rel)
        .to_string_lossy()
        .into_owned()
}

fn run(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_nczarrfs"))
        .args(args)
        .output()
        .expect("run nczarrfs")
}

fn run_ok(args: &[&str]) {
    let out = run(args);
    assert!(
        out.status.success(),
        "nczarrfs {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn dump_text(location: &str) -> String {
    let open = OpenDataset::open(location, DEFAULT_CACHE_BYTES)
        .unwrap_or_else(|e| panic!("open {location}: {e}"));
    let mut out = Vec::new();
    dump(
        &open.model,
        &open.engine,
        "x",
        &DumpOptions::default(),
        &mut out,
        Path::new("test output"),
    )
    .unwrap_or_else(|e| panic!("dump {location}: {e}"));
    String::from_utf8(out).expect("utf-8")
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("read")).expect("json")
}

/// NCZarr from CDL (groups, several unlimited dims, strings, NaN) to every storage/dialect
/// and back: values and structure survive.
#[test]
fn any_storage_any_dialect() {
    let tmp = tempfile::tempdir().unwrap();
    let t = |n: &str| tmp.path().join(n).to_string_lossy().into_owned();
    for cdl in [
        "ncdump_refs/cdl/ref_tst_group_data.cdl",
        "ncdump_refs/ref_tst_mud4.cdl",
        "ncdump_refs/cdl/ref_tst_nans.cdl",
        "nczarr_test/ref_string.cdl",
    ] {
        let src = t("src.file");
        let _ = std::fs::remove_dir_all(&src);
        run_ok(&["gen", "-o", &src, &fixture(cdl)]);
        let want = dump_text(&src);
        // NCZarr → zip → directory: identical.
        run_ok(&["copy", &src, &t("a.zip")]);
        assert_eq!(dump_text(&t("a.zip")), want, "{cdl} zip");
        run_ok(&[
            "copy",
            "--codec",
            "shuffle,zstd:3",
            &t("a.zip"),
            &t("b.file"),
        ]);
        assert_eq!(dump_text(&t("b.file")), want, "{cdl} back to a directory");
        // Replacing an existing target works.
        run_ok(&["copy", "-d", "5", &t("b.file"), &t("b.file2")]);
        run_ok(&["copy", &t("b.file2"), &t("b.file")]);
        assert_eq!(dump_text(&t("b.file")), want, "{cdl} replaced");
        for p in ["a.zip", "b.file", "b.file2"] {
            let p = tmp.path().join(p);
            if p.is_dir() {
                std::fs::remove_dir_all(p).unwrap();
            } else {
                std::fs::remove_file(p).unwrap();
            }
        }
    }
}

/// zarr-python's store (blosc, consolidated) copied into NCZarr, and NCZarr into pure Zarr.
#[test]
fn zarr_python_store_to_nczarr_and_back_to_zarr() {
    let tmp = tempfile::tempdir().unwrap();
    let src = fixture("nczarr_test/ref_data.zarr");
    let want = dump_text(&src);
    let a = tmp.path().join("a.file").to_string_lossy().into_owned();
    run_ok(&["copy", "-k", "nczarr", &src, &a]);
    assert!(tmp.path().join("a.file/.zattrs").exists());
    let b = tmp.path().join("b.zarr").to_string_lossy().into_owned();
    run_ok(&["copy", "-k", "zarr,consolidated", &a, &b]);
    assert!(tmp.path().join("b.zarr/.zmetadata").exists());
    assert_eq!(dump_text(&b), want);
}

#[test]
fn rechunk_in_nccopy_forms() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("s.file").to_string_lossy().into_owned();
    run_ok(&["gen", "-o", &src, &fixture("nc_test4_refs/bzip2.cdl")]);
    let want = dump_text(&src);
    let a = tmp.path().join("a.file").to_string_lossy().into_owned();
    run_ok(&["copy", "-c", "dim0/1,dim3/2", &src, &a]);
    assert_eq!(
        json(&tmp.path().join("a.file/var/.zarray"))["chunks"],
        serde_json::json!([1, 4, 4, 2])
    );
    assert_eq!(dump_text(&a), want);
    let b = tmp.path().join("b.file").to_string_lossy().into_owned();
    // The source is bz2-compressed: -s alone would keep that (shuffle goes with deflate).
    run_ok(&["copy", "-c", "var:2,2,3,4", "-d6", "-s", &src, &b]);
    let z = json(&tmp.path().join("b.file/var/.zarray"));
    assert_eq!(z["chunks"], serde_json::json!([2, 2, 3, 4]));
    assert_eq!(z["compressor"]["id"], serde_json::json!("zlib"));
    assert_eq!(
        z["filters"][0],
        serde_json::json!({"id": "shuffle", "elementsize": 4})
    );
    assert_eq!(dump_text(&b), want);
}

#[test]
fn bad_requests_fail_and_leave_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let src = tmp.path().join("s.file").to_string_lossy().into_owned();
    run_ok(&["gen", "-o", &src, &fixture("nc_test4_refs/bzip2.cdl")]);
    let dst = tmp.path().join("d.file").to_string_lossy().into_owned();
    for args in [
        vec!["copy", "-c", "var:2,2", &src, &dst],
        vec!["copy", "--codec", "nope", &src, &dst],
        vec!["copy", "-d", "11", &src, &dst],
    ] {
        let out = run(&args);
        assert!(!out.status.success(), "{args:?} succeeded");
    }
    let names: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

/// gen's semantic errors name the place and leave no dataset behind.
#[test]
fn gen_errors_leave_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let cdl = tmp.path().join("bad.cdl");
    std::fs::write(&cdl, "netcdf bad {\ndimensions:\n  d = 2 ;\nvariables:\n  byte v(d) ;\ndata:\n  v = 1, 300 ;\n}\n").unwrap();
    let out_path = tmp.path().join("bad.file");
    let out = run(&[
        "gen",
        "-o",
        &out_path.to_string_lossy(),
        &cdl.to_string_lossy(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.cdl:7:"), "{err}");
    assert!(!out_path.exists());
    std::fs::write(&cdl, "netcdf bad {\ndimensions:\n  d = 2 ;\n  d = 3 ;\n}\n").unwrap();
    let out = run(&[
        "gen",
        "-o",
        &out_path.to_string_lossy(),
        &cdl.to_string_lossy(),
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("bad.cdl:4:"));
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
}
