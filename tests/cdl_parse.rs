//! The CDL parser against the shared fixtures and against values ncgen stores.

use std::path::PathBuf;

use nczarrfs::cdl::parser::parse_cdl_file;

fn shared() -> PathBuf {
    std::env::var("NCZARRFS_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared")))
}

fn cdl_files(dir: &std::path::Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            cdl_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "cdl") {
            out.push(p);
        }
    }
}

fn uses_user_types(text: &str) -> bool {
    text.lines().any(|l| {
        let t = l.trim_start();
        t.starts_with("types:")
            || t.starts_with("enum ")
            || t.starts_with("compound ")
            || t.starts_with("opaque")
    })
}

#[test]
fn every_fixture_parses() {
    let mut files = Vec::new();
    cdl_files(&shared().join("fixtures"), &mut files);
    assert!(
        files.len() > 50,
        "fixtures not found under {}",
        shared().display()
    );
    let mut failures = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        // Upstream's `ref_ut_*` are storage listings, and `ref_any` is a template with
        // `@...@` placeholders that its test script substitutes: neither is CDL.
        if !text.trim_start().starts_with("netcdf") || text.contains("= @") {
            continue;
        }
        match parse_cdl_file(f) {
            Ok(_) if uses_user_types(&text) => {
                failures.push(format!("{}: accepted user types", f.display()))
            }
            Ok(_) => {}
            Err(e)
                if uses_user_types(&text)
                    && e.to_string()
                        .contains("user-defined types are not supported") => {}
            Err(e) => failures.push(e.to_string()),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
