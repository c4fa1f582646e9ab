//! Groups nested thousands deep: a zip archive or an object store holds any depth, and a CDL
//! text of a hundred thousand nested groups is a few megabytes. Parsing, writing, reading and
//! printing them must not recurse once per level on the thread's stack: 6000 levels
//! overflowed the 2 MiB of a mount thread printing `@header.cdl`. Each test here runs on a
//! thread whose stack (256 KiB) such recursion overflows at the depth used, while the work
//! itself needs far less.

use std::path::Path;
use std::sync::Arc;

use nczarrfs::cdl::parser::parse_cdl;
use nczarrfs::cdl::writer::{dump, DumpOptions};
use nczarrfs::chunk::{ChunkEngine, Hyperslab};
use nczarrfs::cli::generate;
use nczarrfs::create::CreateOptions;
use nczarrfs::dataset::OpenDataset;
use nczarrfs::location::{Location, Mode};
use nczarrfs::meta::read_dataset;
use nczarrfs::model::Dataset;
use nczarrfs::zmap::{MemoryMap, ZMap};

const DEPTH: usize = 2000;
const IMPLICIT_DEPTH: usize = 600;
const STACK: usize = 256 << 10;

fn on_small_stack<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .stack_size(STACK)
            .spawn_scoped(scope, f)
            .expect("start a thread")
            .join()
            .expect("the thread ran to its end")
    })
}

/// A CDL text of `depth` groups `g` each inside the last, the innermost holding `v(x)`.
fn nested_cdl(depth: usize) -> String {
    let mut cdl = String::from("netcdf deep {\n");
    cdl.push_str(&"group: g {\n".repeat(depth));
    cdl.push_str("dimensions:\n x = 3 ;\nvariables:\n short v(x) ;\n  v:units = \"m\" ;\n");
    cdl.push_str("data:\n v = 7, -8, 9 ;\n");
    cdl.push_str(&"}\n".repeat(depth));
    cdl.push_str("}\n");
    cdl
}

/// The innermost group's full name: `/g/g/…/g`.
fn innermost(depth: usize) -> String {
    "/g".repeat(depth)
}

/// Checks the model and the `dump` of a dataset of [`nested_cdl`]: every group once, in
/// order, the variable and its values in the innermost one, each group's lines indented two
/// spaces more than its parent's, as ncdump indents them (the data section's lines, which
/// ncdump wraps at 80 columns, are not looked at).
fn check_deep(ds: &Dataset, engine: &ChunkEngine, depth: usize) {
    assert_eq!(ds.groups.len(), depth + 1);
    let order = ds.groups_preorder();
    let last = *order.last().unwrap();
    assert_eq!(ds.group_fqn(last), innermost(depth));
    let v = ds.find_var(&format!("{}/v", innermost(depth))).expect("v");
    let whole = Hyperslab {
        start: vec![0],
        count: vec![3],
        stride: vec![1],
    };
    let mut values = [0u8; 6];
    engine.read(ds, v, &whole, &mut values).unwrap();
    assert_eq!(values, [7i16, -8, 9].map(i16::to_ne_bytes).concat()[..]);
    let mut text = Vec::new();
    dump(
        ds,
        engine,
        "deep",
        &DumpOptions::default(),
        &mut text,
        Path::new("test output"),
    )
    .unwrap();
    let text = String::from_utf8(text).unwrap();
    let opened: Vec<usize> = text
        .lines()
        .filter(|l| l.trim_start() == "group: g {")
        .map(|l| l.len() - l.trim_start().len())
        .collect();
    let closed: Vec<usize> = text
        .lines()
        .filter(|l| l.trim_start() == "} // group g")
        .map(|l| l.len() - l.trim_start().len())
        .collect();
    assert_eq!(opened, (0..depth).map(|d| 2 * d).collect::<Vec<_>>());
    assert_eq!(closed, (1..=depth).rev().map(|d| 2 * d).collect::<Vec<_>>());
    let inner = " ".repeat(2 * depth);
    assert!(
        text.contains(&format!("{inner}\tshort v(x) ;\n")),
        "declaration"
    );
    assert!(text.ends_with(&format!("{}}} // group g\n}}\n", " ".repeat(2))));
}

#[test]
fn deeply_nested_groups_are_parsed_written_read_and_dumped() {
    let cdl = nested_cdl(DEPTH);
    let dir = tempfile::tempdir().unwrap();
    for mode in ["nczarr,zip", "zarr,zip", "nczarr,v3,zip", "zarr,v3,zip"] {
        let path = dir.path().join(format!("{}.zip", mode.replace(',', "-")));
        let url = format!("file://{}#mode={mode}", path.display());
        on_small_stack(|| {
            let parsed = parse_cdl(&cdl, "deep.cdl").unwrap();
            let location = Location::parse(&url).unwrap();
            let opts = CreateOptions::from_mode(&location.mode);
            generate(parsed, &location, opts, false).unwrap();
            let open = OpenDataset::open(&url, 1 << 20).unwrap();
            check_deep(&open.model, &open.engine, DEPTH);
        });
    }
}

/// Zarr v3 groups need no `zarr.json` of their own: an array deep down makes every level
/// above it an implicit group, which is found by searching the levels below (each level
/// searches all those below it, so the depth is smaller here).
#[test]
fn implicit_groups_deep_down_are_found() {
    let map = MemoryMap::new();
    map.put("zarr.json", br#"{"zarr_format": 3, "node_type": "group"}"#)
        .unwrap();
    let array = r#"{"zarr_format": 3, "node_type": "array", "shape": [3],
        "data_type": "int16", "chunk_grid": {"name": "regular",
        "configuration": {"chunk_shape": [3]}}, "chunk_key_encoding": {"name": "default"},
        "fill_value": 0, "codecs": [{"name": "bytes", "configuration": {"endian": "little"}}],
        "dimension_names": ["x"]}"#;
    let prefix = innermost(IMPLICIT_DEPTH)[1..].to_string();
    map.put(&format!("{prefix}/v/zarr.json"), array.as_bytes())
        .unwrap();
    let values: Vec<u8> = [7i16, -8, 9].iter().flat_map(|x| x.to_le_bytes()).collect();
    map.put(&format!("{prefix}/v/c/0"), &values).unwrap();
    let map: Arc<dyn ZMap> = Arc::new(map);
    on_small_stack(|| {
        let ds = read_dataset(map.as_ref(), &Mode::default()).unwrap();
        let engine = ChunkEngine::new(Arc::clone(&map), 1 << 20);
        check_deep(&ds, &engine, IMPLICIT_DEPTH);
    });
}

#[test]
fn data_braces_deeper_than_a_variable_has_dimensions_are_refused() {
    let braces = |n: usize| {
        format!(
            "netcdf b {{\ndimensions:\n t = UNLIMITED ;\nvariables:\n int v(t) ;\ndata:\n v = \
             {}1{} ;\n}}\n",
            "{".repeat(n),
            "}".repeat(n)
        )
    };
    // As deep as a variable can have dimensions, braces are read (and then refused for
    // what they enclose, which is no unlimited dimension past the first).
    let e = parse_cdl(&braces(1024), "b.cdl").unwrap_err().to_string();
    assert!(
        e.contains("braces enclose the values of an unlimited dimension"),
        "{e}"
    );
    for n in [1025, 1_000_000] {
        let e = parse_cdl(&braces(n), "b.cdl").unwrap_err().to_string();
        assert!(
            e.starts_with("b.cdl:7:1030: data braces nested more than 1024 deep"),
            "{n}: {e}"
        );
    }
}

/// A directory store's files are bound by `PATH_MAX` (4096 bytes with its NUL, the whole
/// path: the store's own directory, the key, and the temporary name a write goes through):
/// groups nested 2000 deep pass it. The dataset is refused before anything is stored,
/// naming the shallowest group too deep, not after every group above it was written.
#[test]
fn groups_too_deep_for_a_directory_store_are_refused_before_anything_is_written() {
    let dir = tempfile::tempdir().unwrap();
    // Some 250 bytes of the path are the store's own: groups pass the limit before the
    // variable in the innermost one does.
    let parent = dir.path().join("d".repeat(200));
    std::fs::create_dir(&parent).unwrap();
    let root = parent.join("deep.file");
    let url = format!("file://{}#mode=nczarr,file", root.display());
    let location = Location::parse(&url).unwrap();
    let parsed = parse_cdl(&nested_cdl(DEPTH), "deep.cdl").unwrap();
    let map: Arc<dyn ZMap> = Arc::new(nczarrfs::zmap::FileMap::open(&root, true).unwrap());
    let opts = CreateOptions::from_mode(&location.mode);
    let err = on_small_stack(|| {
        nczarrfs::create::DatasetWriter::create_in(&location, map, opts, parsed.dataset)
            .unwrap_err()
    });
    assert!(!root.exists(), "something was written: {err}");
    let nczarrfs::Error::PathTooLong { what, name, .. } = &err else {
        panic!("{err}");
    };
    assert_eq!(*what, "group");
    // The group at level k has its `.zgroup` at ROOT/g/…/g/.zgroup, 2k + 8 bytes past the
    // root's path, and is written through a temporary file named after it with at most
    // 100 bytes more: the first group refused is where that passes 4095 bytes.
    let levels = name.len() / 2;
    assert_eq!(*name, innermost(levels));
    let past_root = 4096 - root.as_os_str().len();
    assert!(
        (past_root.saturating_sub(100 + 8) / 2..=past_root / 2).contains(&levels),
        "{levels} levels, {past_root} bytes past the root"
    );
    assert_eq!(err.errno(), libc::ENAMETOOLONG);
    let message = err.to_string();
    assert!(message.starts_with("group \"/g/g/"), "{message}");
    assert!(message.contains("4096"), "{message}");
}
