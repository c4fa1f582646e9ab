//! `nczarrfs gen` of every CDL round-trip fixture (fixtures/INDEX.md, "CDL round trips"),
//! then `dump`, against the CDL that upstream's ncdump produced.
//!
//! Comparison is upstream's `diff -b` made a little looser: runs of blanks become one and
//! leading/trailing blanks and blanks before `;` are ignored (ref_misc2.cdl is hand-written
//! CDL, and ref_tst_nul4.dmp differs from ncdump's output in indentation). Expected files made with `ncdump -s` lose their special
//! virtual attributes, which our `dump` does not print (their effect is checked in the
//! stored metadata instead), and `ncdump -b c` comment lines (`// v(0, 0-2)`) are dropped.

use std::path::{Path, PathBuf};
use std::process::Command;

use nczarrfs::cdl::writer::{dump, DumpOptions};
use nczarrfs::dataset::{OpenDataset, DEFAULT_CACHE_BYTES};

fn shared() -> PathBuf {
    std::env::var("NCZARRFS_SHARED")
        .map(PathBuf::from)
        .unwrap_or_else(|_| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../shared")))
}

fn fixture(rel: &str) -> PathBuf {
    shared().join("fixtures").join(rel)
}

fn nczarrfs(args: &[&str]) -> std::process::Output {
    let out = Command::new(env!("CARGO_BIN_EXE_nczarrfs"))
        .args(args)
        .output()
        .expect("run nczarrfs");
    out
}

fn run_ok(args: &[&str]) {
    let out = nczarrfs(args);
    assert!(
        out.status.success(),
        "nczarrfs {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

const SPECIAL: [&str; 13] = [
    "_Storage",
    "_ChunkSizes",
    "_NoFill",
    "_Format",
    "_Filter",
    "_Codecs",
    "_DeflateLevel",
    "_Shuffle",
    "_Fletcher32",
    "_Endianness",
    "_NCProperties",
    "_IsNetcdf4",
    "_SuperblockVersion",
];

/// Whether a CDL line is one of the `ncdump -s` special attributes.
fn is_special(line: &str) -> bool {
    let t = line.trim_start();
    SPECIAL.iter().any(|s| {
        t.split_once(" = ")
            .is_some_and(|(lhs, _)| lhs.rsplit_once(':').is_some_and(|(_, name)| name == *s))
    })
}

/// Whether a CDL line is an `ncdump -b c` comment naming the indices of the values below.
fn is_comment(line: &str) -> bool {
    let t = line.trim_start();
    t.starts_with("// ") && t.ends_with(')') && t.contains('(')
}

/// The expected text without `ncdump -s` attributes (and attribute headers left empty),
/// without `ncdump -b c` comments, blanks normalised.
fn normalise(cdl: &str) -> String {
    // `ncdump -b c` puts `// v(0, 0-2)` after an opening brace: drop it and join the brace
    // to the values that follow, as plain ncdump prints them.
    let mut joined: Vec<String> = Vec::new();
    let mut pending = String::new();
    for line in cdl.lines().filter(|l| !is_special(l) && !is_comment(l)) {
        let mut line = line.to_string();
        if let Some(i) = line.find("// ") {
            let c = &line[i + 3..];
            if c.starts_with(|ch: char| ch.is_alphabetic()) && c.ends_with(')') && c.contains('(') {
                line.truncate(i);
            }
        }
        if !line.trim().is_empty() && line.trim().chars().all(|c| c == '{') {
            pending.push_str(line.trim());
            continue;
        }
        joined.push(format!(
            "{pending}{}",
            if pending.is_empty() {
                line.as_str()
            } else {
                line.trim_start()
            }
        ));
        pending.clear();
    }
    let lines: Vec<&str> = joined.iter().map(String::as_str).collect();
    let mut out: Vec<String> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let t = line.trim();
        let header =
            t.starts_with("// global attributes:") || t.starts_with("// group attributes:");
        let next_is_attr = lines
            .get(i + 1)
            .is_some_and(|n| n.trim_start().starts_with(':'));
        if header && !next_is_attr {
            if out.last().is_some_and(|l| l.is_empty()) {
                out.pop();
            }
            continue;
        }
        out.push(
            t.split_whitespace()
                .collect::<Vec<_>>()
                .join(" ")
                .replace(" ;", ";"),
        );
    }
    out.join("\n")
}

fn dump_text(location: &str, name: &str) -> String {
    dump_text_with(location, name, false)
}

fn dump_text_with(location: &str, name: &str, special: bool) -> String {
    let open = OpenDataset::open(location, DEFAULT_CACHE_BYTES)
        .unwrap_or_else(|e| panic!("open {location}: {e}"));
    let mut out = Vec::new();
    let opts = DumpOptions {
        name: Some(name.to_string()),
        special,
        ..Default::default()
    };
    dump(
        &open.model,
        &open.engine,
        name,
        &opts,
        &mut out,
        Path::new("test output"),
    )
    .unwrap_or_else(|e| panic!("dump {location}: {e}"));
    let text = String::from_utf8(out).expect("utf-8");
    // `normalise` drops these lines from both sides of a comparison: a dump without `-s`
    // must not print them in the first place.
    if !special {
        let stray: Vec<&str> = text
            .lines()
            .filter(|l| is_special(l) || is_comment(l))
            .collect();
        assert!(
            stray.is_empty(),
            "dump of {location} without -s prints {stray:?}"
        );
    }
    text
}

/// The `ncdump -s` virtual attributes of a CDL text, `(owner:name, value)` in order, without
/// the ones upstream's tests delete as platform-dependent. `_Codecs` values are parsed, since
/// netcdf-c's spacing inside them changed between the upstream files (`"bz2","level"`) and
/// netcdf-c 4.10.1 (`"bz2", "level"`).
fn specials(cdl: &str) -> Vec<(String, serde_json::Value)> {
    const PLATFORM: [&str; 4] = [
        "_Endianness",
        "_NCProperties",
        "_SuperblockVersion",
        "_IsNetcdf4",
    ];
    cdl.lines()
        .filter_map(|line| {
            let (lhs, value) = line.trim().split_once(" = ")?;
            let (_, name) = lhs.rsplit_once(':')?;
            if !SPECIAL.contains(&name) || PLATFORM.contains(&name) {
                return None;
            }
            let value = value.trim_end_matches(" ;").trim_end_matches(';').trim();
            let parsed = if name == "_Codecs" {
                let inner = &value[1..value.len() - 1];
                serde_json::from_str(&inner.replace("\\\"", "\""))
                    .unwrap_or_else(|e| panic!("_Codecs {value}: {e}"))
            } else {
                serde_json::Value::String(value.to_string())
            };
            Some((lhs.to_string(), parsed))
        })
        .collect()
}

/// gen `cdl` with mode words `mode` into a temporary directory, then dump it (read with
/// `read_mode` when given) and compare with `expected`, named `name`.
fn round_trip(
    cdl: &str,
    mode: &str,
    read_mode: Option<&str>,
    expected: &str,
    name: &str,
) -> tempfile::TempDir {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("out.file");
    let out_s = out.to_string_lossy().into_owned();
    run_ok(&[
        "gen",
        "-k",
        mode,
        "-o",
        &out_s,
        &fixture(cdl).to_string_lossy(),
    ]);
    let loc = match read_mode {
        Some(m) => format!("file://{out_s}#mode={m}"),
        None => out_s,
    };
    let got = dump_text(&loc, name);
    let want = std::fs::read_to_string(fixture(expected)).expect("expected CDL");
    assert_eq!(
        normalise(&got),
        normalise(&want),
        "{cdl} ({mode}) vs {expected}"
    );
    tmp
}

fn read_json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).expect("read json")).expect("parse json")
}

#[test]
fn purezarr_noxarray_gets_anonymous_dims() {
    round_trip(
        "nczarr_test/ref_purezarr_base.cdl",
        "zarr,noxarray",
        None,
        "nczarr_test/ref_purezarr.cdl",
        "tmp_purezarr",
    );
}

#[test]
fn purezarr_xarray_keeps_dim_names() {
    let t = round_trip(
        "nczarr_test/ref_purezarr_base.cdl",
        "zarr",
        None,
        "nczarr_test/ref_purezarr_xarray.cdl",
        "tmp_purezarr_xarray",
    );
    // Pure Zarr: no NCZarr attributes anywhere.
    let text = std::fs::read_to_string(t.path().join("out.file/.zattrs")).unwrap_or_default();
    assert!(!text.contains("_nczarr"), "{text}");
}

#[test]
fn nczarr_read_as_pure_zarr() {
    round_trip(
        "nczarr_test/ref_whole.cdl",
        "nczarr,noxarray",
        Some("zarr"),
        "nczarr_test/ref_nczarr2zarr.cdl",
        "nczarr2zarr",
    );
}

#[test]
fn scalars_in_both_dialects() {
    let t = round_trip(
        "nczarr_test/ref_scalar.cdl",
        "zarr",
        None,
        "nczarr_test/ref_scalar.cdl",
        "ref_scalar",
    );
    assert_eq!(
        read_json(&t.path().join("out.file/v/.zarray"))["shape"],
        serde_json::json!([])
    );
    let t = round_trip(
        "nczarr_test/ref_scalar.cdl",
        "nczarr",
        None,
        "nczarr_test/ref_scalar_nczarr.cdl",
        "ref_scalar",
    );
    assert_eq!(
        read_json(&t.path().join("out.file/v/.zarray"))["shape"],
        serde_json::json!([1])
    );
}

#[test]
fn strings_with_maxstrlen() {
    round_trip(
        "nczarr_test/ref_string.cdl",
        "zarr",
        None,
        "nczarr_test/ref_string_zarr.baseline",
        "ref_string",
    );
    let t = round_trip(
        "nczarr_test/ref_string.cdl",
        "nczarr",
        None,
        "nczarr_test/ref_string_nczarr.baseline",
        "ref_string",
    );
    let z = |v: &str| read_json(&t.path().join(format!("out.file/{v}/.zarray")))["dtype"].clone();
    // _nczarr_maxstrlen = 4 on `truncated`, _nczarr_default_maxstrlen = 6 for the others.
    assert_eq!(z("truncated"), serde_json::json!("|S4"));
    assert_eq!(z("v"), serde_json::json!("|S6"));
    assert_eq!(z("c"), serde_json::json!(">S1"));
}

#[test]
fn nulls_nczarr() {
    round_trip(
        "nczarr_test/ref_nulls.cdl",
        "nczarr",
        None,
        "nczarr_test/ref_nulls_nczarr.baseline",
        "ref_nulls",
    );
}

/// ref_nulls_zarr.baseline shows `test:zero_sng = 0`: netcdf-c guesses pure Zarr attribute
/// types from the JSON and turns the char attribute "0" into a number (the INDEX's "types are
/// guessed" defect). The CDL says `"0"`, a char attribute, and that is what must come back.
#[test]
fn nulls_zarr_keep_char_attribute_types() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let out = tmp.path().join("out.file").to_string_lossy().into_owned();
    run_ok(&[
        "gen",
        "-k",
        "zarr",
        "-o",
        &out,
        &fixture("nczarr_test/ref_nulls.cdl").to_string_lossy(),
    ]);
    let got = dump_text(&out, "ref_nulls");
    let want = std::fs::read_to_string(fixture("nczarr_test/ref_nulls_zarr.baseline")).unwrap();
    let want = want.replace("test:zero_sng = 0 ;", "test:zero_sng = \"0\" ;");
    assert_eq!(normalise(&got), normalise(&want));
}

#[test]
fn json_convention_attributes() {
    let t = round_trip(
        "nczarr_test/ref_jsonconvention.cdl",
        "nczarr",
        None,
        "nczarr_test/ref_jsonconvention.cdl",
        "tmp_jsonconvention",
    );
    // As in ref_jsonconvention.zmap: JSON-looking char attributes are stored as JSON.
    let attrs = read_json(&t.path().join("out.file/v/.zattrs"));
    assert_eq!(
        attrs["varjson1"],
        serde_json::json!({"key1": [1,2,3], "key2": {"key3": "abc"}})
    );
    assert_eq!(attrs["varchar1"], serde_json::json!("1.0, 0.0, 0.0"));
}

#[test]
fn xarray_anonymous_and_group_dims() {
    round_trip(
        "nczarr_test/ref_xarrayanon.cdl",
        "zarr,noxarray",
        None,
        "nczarr_test/ref_xarrayanon.cdl",
        "tmp_xarrayanon",
    );
    round_trip(
        "nczarr_test/ref_xarraygroup.cdl",
        "zarr,xarray",
        None,
        "nczarr_test/ref_xarraygroup.cdl",
        "tmp_xarraygroup",
    );
}

#[test]
fn misc_with_slash_separator() {
    for (cdl, name) in [("ref_misc1", "tmp_misc1"), ("ref_misc2", "tmp_misc2")] {
        let tmp = tempfile::tempdir().expect("tempdir");
        let out = tmp.path().join("out.file").to_string_lossy().into_owned();
        let path = fixture(&format!("nczarr_test/{cdl}.cdl"));
        run_ok(&[
            "gen",
            "--dimension-separator",
            "/",
            "-o",
            &out,
            &path.to_string_lossy(),
        ]);
        let got = dump_text(&out, name);
        let want = std::fs::read_to_string(&path).unwrap();
        assert_eq!(normalise(&got), normalise(&want), "{cdl}");
        let mut found = false;
        for entry in walk(tmp.path()) {
            if let Some(dir) = entry.parent() {
                if dir.join(".zarray").exists() {
                    let z = read_json(&dir.join(".zarray"));
                    assert_eq!(z["dimension_separator"], serde_json::json!("/"));
                    found = true;
                }
            }
        }
        assert!(found, "{cdl}: no arrays");
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walk(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn ncdump_refs() {
    for f in [
        "ref_dimscope",
        "ref_tst_group_data",
        "ref_tst_nans",
        "ref_tst_nul4",
        "ref_tst_solar_1",
    ] {
        round_trip(
            &format!("ncdump_refs/cdl/{f}.cdl"),
            "nczarr",
            None,
            &format!("ncdump_refs/expected/{f}.dmp"),
            f,
        );
    }
}

#[test]
fn several_unlimited_dims() {
    for (f, name) in [
        ("ref_tst_mud4", "tst_mud4"),
        ("ref_tst_mud4-bc", "tst_mud4"),
        ("ref_tst_mud4_chars", "tst_mud4_chars"),
    ] {
        let p = format!("ncdump_refs/{f}.cdl");
        round_trip(&p, "nczarr", None, &p, name);
    }
}

#[test]
fn bzip2_filter_special_attributes() {
    let t = round_trip(
        "nc_test4_refs/bzip2.cdl",
        "nczarr",
        None,
        "nczarr_test/ref_bzip2.cdl",
        "bzip2",
    );
    let z = read_json(&t.path().join("out.file/var/.zarray"));
    assert_eq!(
        z["compressor"],
        serde_json::json!({"id": "bz2", "level": 9})
    );
    assert_eq!(z["chunks"], serde_json::json!([4, 4, 4, 4]));
    // _NoFill = "true": no fill value.
    assert_eq!(z["fill_value"], serde_json::Value::Null);
    let want = std::fs::read_to_string(fixture("nczarr_test/ref_bzip2.cdl")).unwrap();
    let got = dump_text_with(&t.path().join("out.file").to_string_lossy(), "bzip2", true);
    assert_eq!(specials(&got), specials(&want));
    assert!(!specials(&want).is_empty());
}

/// Upstream makes ref_filtered.cdl with `nccopy -F "/g/var,307,9"` from ref_unfiltered.cdl.
#[test]
fn copy_adds_a_filter() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let a = tmp
        .path()
        .join("unfiltered.file")
        .to_string_lossy()
        .into_owned();
    let b = tmp
        .path()
        .join("filtered.file")
        .to_string_lossy()
        .into_owned();
    run_ok(&[
        "gen",
        "-o",
        &a,
        &fixture("nc_test4_refs/ref_unfiltered.cdl").to_string_lossy(),
    ]);
    run_ok(&["copy", "--codec", "bz2:9", &a, &b]);
    let got = dump_text(&b, "filtered");
    let want = std::fs::read_to_string(fixture("nczarr_test/ref_filtered.cdl")).unwrap();
    assert_eq!(normalise(&got), normalise(&want));
    // nccopy turns fill off in what it writes (`nc_set_fill(NC_NOFILL)`, for speed), hence
    // upstream's `_NoFill`; copy keeps the source's fill, which ref_unfiltered.cdl leaves on.
    let got = dump_text_with(&b, "filtered", true);
    let mut want_specials = specials(&want);
    want_specials.retain(|(name, _)| name != "var:_NoFill");
    assert_eq!(specials(&got), want_specials);
    let z = read_json(&tmp.path().join("filtered.file/g/var/.zarray"));
    assert_eq!(
        z["compressor"],
        serde_json::json!({"id": "bz2", "level": 9})
    );
}

/// ref_groups.h5 through Debian's ncdump, as upstream copies it to Zarr.
#[test]
fn hdf5_groups_through_ncdump() {
    // scripts/test installs netcdf-bin: a missing ncdump fails here rather than passing as
    // a skip.
    let out = Command::new("ncdump")
        .arg(fixture("nczarr_test/ref_groups.h5"))
        .output()
        .expect("ncdump (Debian package netcdf-bin) must be installed");
    assert!(out.status.success());
    let tmp = tempfile::tempdir().expect("tempdir");
    let cdl = tmp.path().join("groups.cdl");
    std::fs::write(&cdl, &out.stdout).unwrap();
    let dst = tmp.path().join("g.file").to_string_lossy().into_owned();
    run_ok(&["gen", "-k", "nczarr", "-o", &dst, &cdl.to_string_lossy()]);
    let got = dump_text(&dst, "tmp_groups_regular");
    let want = std::fs::read_to_string(fixture("nczarr_test/ref_groups_regular.cdl")).unwrap();
    assert_eq!(normalise(&got), normalise(&want));
}
