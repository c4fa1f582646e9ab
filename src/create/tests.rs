use super::*;
use std::path::Path;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::chunk::{ChunkEngine, Hyperslab};
use crate::location::{Location, Storage};
use crate::meta::writer_v3;
use crate::model::{AttrValue, CodecSpec, Dataset, NcType, NczarrLayout, VarId};
use crate::zmap::ZMap;
use crate::{meta, zmap, Error};

#[test]
fn default_chunks_match_netcdf_c() {
    // netCDF4-python 1.7.5 (netcdf-c 4.10.1) `Variable.chunking()` of NCZarr variables
    // over t, u unlimited, y = 1000, x = 3000, s = 7.
    assert_eq!(
        default_chunks(&[(0, true), (1000, false), (3000, false)], 4),
        [1, 1000, 3000]
    );
    assert_eq!(
        default_chunks(&[(1000, false), (3000, false)], 8),
        [500, 1500]
    );
    assert_eq!(default_chunks(&[(0, true)], 4), [1024]);
    assert_eq!(default_chunks(&[(0, true), (0, true)], 2), [2896, 2896]);
    assert_eq!(default_chunks(&[(7, false)], 1), [7]);
    assert_eq!(default_chunks(&[(0, true), (7, false)], 8), [1, 7]);
}

#[test]
fn zero_chunk_lengths_complete_as_netcdf_c() {
    // netCDF4-python 1.7.5 (netcdf-c 4.10.1) `createVariable(…, chunksizes=…)` with a 0, then
    // `Variable.chunking()`, in NCZarr; t, r unlimited, x = 7, y = 3000.
    let (t, r, x, y) = ((0, true), (0, true), (7, false), (3000, false));
    assert_eq!(complete_chunks(&[t, x], 4, &[5, 0]), [1, 7]);
    assert_eq!(complete_chunks(&[t, x], 4, &[0, 5]), [1, 4]);
    assert_eq!(complete_chunks(&[x, y], 4, &[3, 0]), [3, 3000]);
    assert_eq!(complete_chunks(&[y, x], 4, &[0, 5]), [3000, 4]);
    assert_eq!(complete_chunks(&[t, x, y], 4, &[2, 0, 0]), [1, 7, 3000]);
    assert_eq!(complete_chunks(&[x, t], 4, &[3, 0]), [3, 1]);
    assert_eq!(complete_chunks(&[t, r], 2, &[5, 0]), [2896, 2896]);
    assert_eq!(complete_chunks(&[t], 8, &[0]), [512]);
    assert_eq!(complete_chunks(&[y, x], 8, &[0, 2]), [3000, 2]);
}

fn writer(dir: &Path, mode: &str) -> (Location, DatasetWriter) {
    let loc = Location::parse(format!(
        "file://{}#mode={mode}",
        dir.join("d.file").display()
    ))
    .unwrap();
    let w = DatasetWriter::create(&loc, CreateOptions::from_mode(&loc.mode)).unwrap();
    (loc, w)
}

fn ints(b: &[u8]) -> Vec<i32> {
    b.chunks(4)
        .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// A destination whose directory cannot be written to is refused before anything is
/// done, named as given (not as its hidden staging sibling), for zip storage too, whose
/// archive is otherwise only written at the end.
#[test]
fn a_destination_in_a_missing_directory_is_refused_at_once() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["x.file", "x.zip"] {
        let target = tmp.path().join("missing").join(name);
        let location = Location::parse(target.to_str().unwrap()).unwrap();
        let e = Staging::new(&location).unwrap_err();
        assert_eq!(e.errno(), libc::ENOENT, "{e}");
        let message = e.to_string();
        assert!(message.starts_with(target.to_str().unwrap()), "{message}");
        assert!(!message.contains("nczarrfs-"), "{message}");
    }
}

/// A destination under a regular file (a zip archive taken for a folder) is refused as the
/// kernel refuses any entry there, "Not a directory" (ENOTDIR), not as a permission problem
/// (which access(2) answers for a file that is not executable), whatever the file's mode.
#[test]
fn a_destination_under_a_regular_file_is_not_a_directory() {
    use std::os::unix::fs::PermissionsExt;
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("archive.zip");
    std::fs::write(&file, "not a folder").unwrap();
    for mode in [0o644, 0o755] {
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(mode)).unwrap();
        for name in ["x.file", "x.zip"] {
            let target = file.join(name);
            let location = Location::parse(target.to_str().unwrap()).unwrap();
            let e = Staging::new(&location).unwrap_err();
            assert_eq!(e.errno(), libc::ENOTDIR, "{mode:o} {name}: {e}");
            assert!(e.to_string().starts_with(target.to_str().unwrap()), "{e}");
        }
    }
}

/// Like `get` and `dump`, a writer of an existing dataset says that a missing one does
/// not exist, not that it is an empty store.
#[test]
fn a_missing_dataset_opened_for_writing_is_not_found() {
    let tmp = tempfile::tempdir().unwrap();
    for name in ["nosuch.file", "nosuch.zip"] {
        let path = tmp.path().join(name);
        let location = Location::parse(path.to_str().unwrap()).unwrap();
        let e = DatasetWriter::open(&location).unwrap_err();
        assert_eq!(e.errno(), libc::ENOENT, "{e}");
        assert!(!path.exists());
    }
}

/// A mount point is refused before any work is done (its rename would fail at the end).
#[test]
fn a_mount_point_is_not_replaced() {
    let proc = Location::parse("/proc").unwrap();
    match Staging::new(&proc) {
        Err(Error::Invalid(m)) => assert!(m.contains("is a mount point"), "{m}"),
        other => panic!("{other:?}"),
    }
}

/// A bad codec word says what is wrong with it and lists the forms.
#[test]
fn bad_codec_words_say_why() {
    for (spec, why) in [
        ("zstd:99", "level \"99\" is not from -131072 to 22"),
        ("bz2:0", "level \"0\" is not from 1 to 9"),
        ("zlib:x", "level \"x\" is not a number from 0 to 9"),
        ("blosc:lz4:10:3", "level \"10\" is not from 0 to 9"),
        ("blosc:lz4:5:3", "shuffle \"3\" is not from 0 to 2"),
        ("blosc:lzma", "blosc has no compressor \"lzma\""),
        ("zlib:1:2", "zlib takes at most 1"),
        ("nope", "no such codec"),
        ("nope:1", "no such codec"),
        ("shuffle:x", "shuffle takes no `:` argument"),
        ("fletcher32:4", "fletcher32 takes no `:` argument"),
        ("lz4:9", "lz4 takes no `:` argument"),
        ("lz4:-1", "lz4 takes no `:` argument"),
        ("none:1", "none takes no `:` argument"),
    ] {
        // Numbers out of range are refused values; the rest cannot be parsed at all.
        let out_of_range = ["zstd:99", "bz2:0", "blosc:lz4:10:3", "blosc:lz4:5:3"];
        match (Codecs::parse(spec), out_of_range.contains(&spec)) {
            (Err(Error::Invalid(m)), true) | (Err(Error::Usage(m)), false) => {
                assert!(m.contains(why), "{spec}: {m}");
                assert!(m.contains("forms: none, shuffle"), "{spec}: {m}");
            }
            other => panic!("{spec}: {other:?}"),
        }
    }
}

#[test]
fn only_datasets_are_replaced() {
    let tmp = tempfile::tempdir().unwrap();
    let at = |name: &str| tmp.path().join(name);
    let loc = |p: &Path| Location::parse(p.to_str().unwrap()).unwrap();
    let refused = |p: &Path| match Staging::new(&loc(p)) {
        Err(Error::Invalid(m)) => assert!(m.contains("not replaced"), "{m}"),
        other => panic!("{}: {other:?}", p.display()),
    };

    std::fs::create_dir(at("docs")).unwrap();
    std::fs::write(at("docs/notes.txt"), "kept").unwrap();
    refused(&at("docs"));
    std::fs::write(at("plain.file"), "kept").unwrap();
    refused(&at("plain.file"));
    std::fs::write(at("text.zip"), "kept").unwrap();
    refused(&at("text.zip"));
    // A `.zip` name asks for an archive: that is what the file is not.
    match Staging::new(&loc(&at("text.zip"))) {
        Err(Error::Invalid(m)) => assert!(
            m.contains("text.zip exists and is not a zip archive"),
            "{m}"
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read_to_string(at("docs/notes.txt")).unwrap(),
        "kept"
    );
    assert_eq!(std::fs::read_to_string(at("plain.file")).unwrap(), "kept");
    assert!(matches!(
        Staging::new(&loc(Path::new("."))),
        Err(Error::Invalid(_))
    ));

    // A dataset (and an empty directory) is replaced by the staged one.
    for name in ["old.file", "empty.file"] {
        std::fs::create_dir(at(name)).unwrap();
        if name == "old.file" {
            std::fs::write(at("old.file/.zgroup"), "old").unwrap();
        }
        let staging = Staging::new(&loc(&at(name))).unwrap();
        let Storage::File(temp) = &staging.temp.storage else {
            panic!("{:?}", staging.temp)
        };
        std::fs::create_dir(temp).unwrap();
        std::fs::write(temp.join(".zgroup"), "new").unwrap();
        staging.publish().unwrap();
        assert_eq!(
            std::fs::read_to_string(at(name).join(".zgroup")).unwrap(),
            "new"
        );
    }
    // Named through itself: the dataset is still replaced, not lost on the way.
    let staging = Staging::new(&loc(&at("old.file/../old.file"))).unwrap();
    let Storage::File(temp) = &staging.temp.storage else {
        panic!("{:?}", staging.temp)
    };
    std::fs::create_dir(temp).unwrap();
    std::fs::write(temp.join(".zgroup"), "newer").unwrap();
    staging.publish().unwrap();
    assert_eq!(
        std::fs::read_to_string(at("old.file/.zgroup")).unwrap(),
        "newer"
    );
    let left: Vec<_> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with('.'))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A destination whose name is as long as a file name may be (ncgen writes such names) is
/// staged beside it and replaces an old dataset there (through `….old`). A killed writer's
/// staging of it is removed by the next staging; one of another destination whose name
/// begins with the same 200 bytes is not, nor one of a process that still runs.
#[test]
fn long_destination_names_are_staged_and_their_leftovers_told_apart() {
    let tmp = tempfile::tempdir().unwrap();
    let shared = "n".repeat(200);
    let target = tmp.path().join(format!("{shared}{}.file", "a".repeat(50)));
    let other = tmp.path().join(format!("{shared}{}.file", "b".repeat(50)));
    assert_eq!(target.file_name().unwrap().len(), 255);
    let loc = |p: &Path| Location::parse(p.to_str().unwrap()).unwrap();
    let mut ended = std::process::Command::new("true").spawn().unwrap();
    let ended_pid = ended.id();
    ended.wait().unwrap();
    let sibling = |of: &Path, pid: u32| {
        let stem = zmap::temp_files::name_stem(of.file_name().unwrap());
        let mut name = std::ffi::OsString::from(".");
        name.push(&*stem);
        name.push(format!(".nczarrfs-{pid}.0123456789abcdef"));
        tmp.path().join(name)
    };
    let killed = sibling(&target, ended_pid);
    let others = sibling(&other, ended_pid);
    let running = sibling(&target, std::process::id());
    for leftover in [&killed, &others, &running] {
        std::fs::create_dir(leftover).unwrap();
    }

    std::fs::create_dir(&target).unwrap();
    std::fs::write(target.join(".zgroup"), "old").unwrap();
    let staging = Staging::new(&loc(&target)).unwrap();
    let Storage::File(temp) = &staging.temp.storage else {
        panic!("{:?}", staging.temp)
    };
    assert!(temp.file_name().unwrap().len() + ".old".len() <= 255);
    std::fs::create_dir(temp).unwrap();
    std::fs::write(temp.join(".zgroup"), "new").unwrap();
    staging.publish().unwrap();
    assert_eq!(
        std::fs::read_to_string(target.join(".zgroup")).unwrap(),
        "new"
    );
    assert!(!killed.exists(), "the killed writer's staging is removed");
    assert!(others.exists() && running.exists());
}

/// A variable's or group's directory of a dataset is no dataset to replace, and a new
/// dataset inside one would become part of it: both are refused and nothing is touched.
#[test]
fn arrays_and_places_inside_datasets_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let at = |name: &str| tmp.path().join(name);
    let loc = |p: &Path| Location::parse(p.to_str().unwrap()).unwrap();
    let refused = |p: &Path, why: &str| match Staging::new(&loc(p)) {
        Err(Error::Invalid(m)) => assert!(m.contains(why), "{m}"),
        other => panic!("{}: {other:?}", p.display()),
    };
    for dir in ["ds.file/lat", "ds.file/g/h", "arr2", "arr3", "ds3/v"] {
        std::fs::create_dir_all(at(dir)).unwrap();
    }
    std::fs::write(at("ds.file/.zgroup"), "{}").unwrap();
    std::fs::write(at("ds.file/lat/.zarray"), "{}").unwrap();
    std::fs::write(at("ds.file/g/.zgroup"), "{}").unwrap();
    std::fs::write(at("ds.file/g/h/.zgroup"), "{}").unwrap();
    std::fs::write(at("arr2/.zarray"), "{}").unwrap();
    let array3 = r#"{"zarr_format": 3, "node_type": "array"}"#;
    std::fs::write(at("arr3/zarr.json"), array3).unwrap();
    std::fs::write(
        at("ds3/zarr.json"),
        r#"{"zarr_format": 3, "node_type": "group"}"#,
    )
    .unwrap();
    std::fs::write(at("ds3/v/zarr.json"), array3).unwrap();

    refused(&at("arr2"), "is a Zarr array");
    refused(&at("arr3"), "is a Zarr array");
    refused(&at("ds.file/lat"), "inside the Zarr dataset");
    refused(&at("ds.file/g"), "inside the Zarr dataset");
    refused(&at("ds.file/g/h"), "inside the Zarr dataset");
    refused(&at("ds.file/new.file"), "inside the Zarr dataset");
    refused(&at("ds.file/new.zip"), "inside the Zarr dataset");
    refused(&at("ds.file/g/../new.file"), "inside the Zarr dataset");
    refused(&at("ds3/v"), "inside the Zarr dataset");
    refused(&at("ds3/w.file"), "inside the Zarr dataset");
    let kept = |dir: &str, object: &str| assert!(at(dir).join(object).exists(), "{dir}");
    kept("ds.file/lat", ".zarray");
    kept("ds.file/g/h", ".zgroup");
    kept("arr2", ".zarray");
    kept("ds3/v", "zarr.json");
    let mut left: Vec<String> = std::fs::read_dir(at("ds.file"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, [".zgroup", "g", "lat"]);
}

/// A map whose puts under `refused` fail, as a server that goes away mid-rename; with
/// `reads_too`, its gets there fail as well.
#[derive(Debug)]
struct FailingPuts {
    inner: Arc<dyn ZMap>,
    refused: &'static str,
    reads_too: bool,
}

impl FailingPuts {
    fn refuse(&self, key: &str) -> Result<()> {
        if key.starts_with(self.refused) {
            return Err(Error::Storage {
                key: key.into(),
                reason: "refused by the test".into(),
            });
        }
        Ok(())
    }
}

impl ZMap for FailingPuts {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        if self.reads_too {
            self.refuse(key)?;
        }
        self.inner.get(key)
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.refuse(key)?;
        self.inner.put(key, value)
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.inner.delete(key)
    }
    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        self.inner.search(prefix)
    }
    fn read_only(&self) -> bool {
        false
    }
    fn describe(&self) -> String {
        "failing puts".into()
    }
}

#[test]
fn a_failed_rename_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (loc, mut w) = writer(tmp.path(), "nczarr");
    let g = w.add_group(Dataset::ROOT, "g").unwrap();
    let x = w.add_dim(g, "x", 3, false).unwrap();
    let v = w
        .add_var(g, "v", NcType::Int, &[x], VarOptions::default())
        .unwrap();
    w.write(v, &Hyperslab::whole(&[3]), &bytes(&[1, 2, 3]))
        .unwrap();
    w.close().unwrap();

    let mut w = DatasetWriter::open(&loc).unwrap();
    let map: Arc<dyn ZMap> = Arc::new(FailingPuts {
        inner: Arc::clone(&w.map),
        refused: "h/",
        reads_too: false,
    });
    w.engine = ChunkEngine::new(Arc::clone(&map), WRITER_CACHE_BYTES);
    w.map = map;
    let before = w.model().clone();
    let g = w.model().find_group("g").unwrap();
    assert!(w.rename_group(g, "h").is_err());
    let v = w.model().find_var("g/v").unwrap();
    assert!(w.rename_var(v, "w").is_ok(), "other renames still work");
    assert!(w.rename_var(v, "v").is_ok());
    assert_eq!(*w.model(), before);
    w.close().unwrap();

    let ds = meta::read_dataset(zmap::open(&loc, false).unwrap().as_ref(), &loc.mode).unwrap();
    let v = ds.find_var("/g/v").expect("g/v is still there");
    assert!(ds.find_group("h").is_none());
    let mut out = vec![0u8; 12];
    ChunkEngine::new(zmap::open(&loc, false).unwrap(), 0)
        .read(&ds, v, &Hyperslab::whole(&[3]), &mut out)
        .unwrap();
    assert_eq!(ints(&out), [1, 2, 3]);
}

#[test]
fn a_rename_whose_metadata_cannot_be_stored_leaves_no_second_array() {
    // The consolidated summary is the one object the rewrite must store and the copy does
    // not touch: refusing it (reads too, as a server gone for that key) fails the rename
    // after the copy, and the undo's rewrite too, which must read it to compare.
    for (mode, summary) in [
        ("zarr,v3,consolidated", "zarr.json"),
        ("zarr,consolidated", ".zmetadata"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let (loc, mut w) = writer(tmp.path(), mode);
        let g = w.add_group(Dataset::ROOT, "g").unwrap();
        let x = w.add_dim(g, "x", 2, false).unwrap();
        let v = w
            .add_var(g, "v", NcType::Int, &[x], VarOptions::default())
            .unwrap();
        w.write(v, &Hyperslab::whole(&[2]), &bytes(&[1, 2]))
            .unwrap();
        w.close().unwrap();

        let mut w = DatasetWriter::open(&loc).unwrap();
        let map: Arc<dyn ZMap> = Arc::new(FailingPuts {
            inner: Arc::clone(&w.map),
            refused: summary,
            reads_too: true,
        });
        w.engine = ChunkEngine::new(Arc::clone(&map), WRITER_CACHE_BYTES);
        w.map = map;
        let before = w.model().clone();
        let v = w.model().find_var("g/v").unwrap();
        assert!(w.rename_var(v, "w").is_err(), "{mode}");
        assert_eq!(*w.model(), before, "{mode}");
        let under = tmp.path().join("d.file/g/w");
        assert!(!under.exists(), "{mode}: {} stays", under.display());
        drop(w);

        let ds = meta::read_dataset(zmap::open(&loc, false).unwrap().as_ref(), &loc.mode).unwrap();
        assert!(ds.find_var("/g/v").is_some(), "{mode}");
        assert!(ds.find_var("/g/w").is_none(), "{mode}");
    }
}

/// A map that records its puts and deletes, in order.
#[derive(Debug)]
struct RecordingMap {
    inner: Arc<dyn ZMap>,
    log: std::sync::Mutex<Vec<(&'static str, String)>>,
}

impl ZMap for RecordingMap {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.get(key)
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.log.lock().unwrap().push(("put", key.into()));
        self.inner.put(key, value)
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.log.lock().unwrap().push(("delete", key.into()));
        self.inner.delete(key)
    }
    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        self.inner.search(prefix)
    }
    fn read_only(&self) -> bool {
        false
    }
    fn describe(&self) -> String {
        "recording".into()
    }
}

/// Zarr v2 keys sort `.zarray` before the chunks: copied in that order, a renamed array
/// killed halfway showed under its new name with most of its chunks missing (read as fill),
/// beside the old one. The objects that make a node are copied last and deleted first.
#[test]
fn a_rename_makes_the_new_node_last_and_unmakes_the_old_one_first() {
    let tmp = tempfile::tempdir().unwrap();
    let (loc, mut w) = writer(tmp.path(), "zarr");
    let g = w.add_group(Dataset::ROOT, "g").unwrap();
    let x = w.add_dim(g, "x", 6, false).unwrap();
    let options = VarOptions {
        chunks: Some(vec![2]),
        ..VarOptions::default()
    };
    let v = w.add_var(g, "r", NcType::Int, &[x], options).unwrap();
    w.put_attr(AttrTarget::Var(v), "a", AttrValue::Int(vec![1]))
        .unwrap();
    w.write(v, &Hyperslab::whole(&[6]), &bytes(&[1, 2, 3, 4, 5, 6]))
        .unwrap();
    w.close().unwrap();

    for (old, new, rename_group) in [("g/r", "g/r2", false), ("g", "h", true)] {
        let mut w = DatasetWriter::open(&loc).unwrap();
        let recording = Arc::new(RecordingMap {
            inner: Arc::clone(&w.map),
            log: Default::default(),
        });
        let map: Arc<dyn ZMap> = recording.clone();
        w.engine = ChunkEngine::new(Arc::clone(&map), WRITER_CACHE_BYTES);
        w.map = map;
        if rename_group {
            let g = w.model().find_group(old).unwrap();
            w.rename_group(g, new).unwrap();
        } else {
            let v = w.model().find_var(old).unwrap();
            w.rename_var(v, "r2").unwrap();
        }
        let log = recording.log.lock().unwrap().clone();
        let puts: Vec<&str> = log
            .iter()
            .filter(|(op, key)| *op == "put" && key.starts_with(&format!("{new}/")))
            .map(|(_, key)| key.as_str())
            .collect();
        let first_node_object = puts
            .iter()
            .position(|k| k.ends_with("/.zarray") || k.ends_with("/.zgroup"))
            .unwrap();
        assert!(
            puts[..first_node_object]
                .iter()
                .filter(|k| !k.ends_with("/.zattrs"))
                .count()
                == 3,
            "the three chunks come before any .zarray or .zgroup: {puts:?}"
        );
        if rename_group {
            let array = puts.iter().position(|k| *k == "h/r2/.zarray").unwrap();
            let group = puts.iter().position(|k| *k == "h/.zgroup").unwrap();
            assert!(array < group, "the deepest node first: {puts:?}");
        }
        let deletes: Vec<&str> = log
            .iter()
            .filter(|(op, _)| *op == "delete")
            .map(|(_, key)| key.as_str())
            .collect();
        // `old` goes with everything under it, after the node objects in it, the shallowest
        // first (an array in a renamed group must not outlive its chunks either).
        let first: &[&str] = if rename_group {
            &["g/.zgroup", "g/r2/.zarray"]
        } else {
            &["g/r/.zarray"]
        };
        assert_eq!(deletes.last(), Some(&old), "{deletes:?}");
        assert_eq!(&deletes[..deletes.len() - 1], first, "{deletes:?}");
        w.close().unwrap();
    }
    let ds = meta::read_dataset(zmap::open(&loc, false).unwrap().as_ref(), &loc.mode).unwrap();
    let v = ds.find_var("/h/r2").expect("renamed twice");
    let mut out = vec![0u8; 24];
    ChunkEngine::new(zmap::open(&loc, false).unwrap(), 0)
        .read(&ds, v, &Hyperslab::whole(&[6]), &mut out)
        .unwrap();
    assert_eq!(ints(&out), [1, 2, 3, 4, 5, 6]);
}

/// A map whose puts fail with `ENOSPC` while `full` is set, as a full disk.
#[derive(Debug)]
struct FullDisk {
    inner: Arc<dyn ZMap>,
    full: std::sync::atomic::AtomicBool,
}

impl ZMap for FullDisk {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.get(key)
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        if self.full.load(std::sync::atomic::Ordering::Relaxed) {
            return Err(Error::io(
                key,
                std::io::Error::from_raw_os_error(libc::ENOSPC),
            ));
        }
        self.inner.put(key, value)
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.inner.delete(key)
    }
    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        self.inner.search(prefix)
    }
    fn read_only(&self) -> bool {
        false
    }
    fn describe(&self) -> String {
        "full disk".into()
    }
}

/// A write that fails for room, its chunk cache full of chunks storage refuses, changes
/// nothing: not the values, and not the unlimited dimension it would have grown. Once
/// storage takes them, everything acknowledged is stored, with the length it gave.
#[test]
fn a_failed_append_leaves_the_dimension_as_it_was() {
    let tmp = tempfile::tempdir().unwrap();
    let (loc, mut w) = writer(tmp.path(), "nczarr");
    let t = w.add_dim(Dataset::ROOT, "t", 0, true).unwrap();
    let x = w.add_dim(Dataset::ROOT, "x", 4, false).unwrap();
    let opts = VarOptions {
        chunks: Some(vec![1, 4]),
        ..VarOptions::default()
    };
    let v = w
        .add_var(Dataset::ROOT, "v", NcType::Int, &[t, x], opts)
        .unwrap();
    w.sync().unwrap();
    // A cache of two records, and writes of half a record (a whole chunk would be stored
    // at once).
    let disk = Arc::new(FullDisk {
        inner: Arc::clone(&w.map),
        full: true.into(),
    });
    let map: Arc<dyn ZMap> = disk.clone();
    w.engine = ChunkEngine::new(Arc::clone(&map), 32);
    w.map = map;
    let row = |r: u64| Hyperslab {
        start: vec![r, 0],
        count: vec![1, 2],
        stride: vec![1, 1],
    };
    w.write(v, &row(0), &bytes(&[1; 2])).unwrap();
    w.write(v, &row(1), &bytes(&[2; 2])).unwrap();
    let failed = w.try_write(v, &row(2), &bytes(&[3; 2])).unwrap_err();
    assert_eq!(failed.error.errno(), libc::ENOSPC);
    assert!(!failed.in_part);
    assert_eq!(w.model().dim(t).len, 2);
    assert_eq!(w.model().var(v).storage.shape, vec![2, 4]);
    let mut out = vec![0u8; 32];
    w.read(v, &Hyperslab::whole(&[2, 4]), &mut out).unwrap();
    let fill = -2147483647;
    assert_eq!(ints(&out), [1, 1, fill, fill, 2, 2, fill, fill]);
    assert_eq!(w.sync().unwrap_err().errno(), libc::ENOSPC);
    disk.full.store(false, std::sync::atomic::Ordering::Relaxed);
    w.close().unwrap();
    let ds = meta::read_dataset(zmap::open(&loc, false).unwrap().as_ref(), &loc.mode).unwrap();
    assert_eq!(ds.dim(t).len, 2);
    let mut out = vec![0u8; 32];
    ChunkEngine::new(zmap::open(&loc, false).unwrap(), 0)
        .read(&ds, v, &Hyperslab::whole(&[2, 4]), &mut out)
        .unwrap();
    assert_eq!(ints(&out), [1, 1, fill, fill, 2, 2, fill, fill]);
}

#[test]
fn datasets_with_unsupported_variables_are_not_opened_for_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("ds.zarr");
    let map = zmap::FileMap::open(&root, true).unwrap();
    map.put(".zgroup", br#"{"zarr_format": 2}"#).unwrap();
    for (name, dtype) in [("c", "<c8"), ("i", "<i4")] {
        let zarray = format!(
            r#"{{"zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "{dtype}", "fill_value": null, "order": "C", "compressor": null, "filters": null}}"#
        );
        map.put(&format!("{name}/.zarray"), zarray.as_bytes())
            .unwrap();
    }
    let loc = Location::parse(format!("file://{}#mode=zarr,file", root.display())).unwrap();
    let e = DatasetWriter::open(&loc).unwrap_err().to_string();
    assert!(e.contains("variable /c is not supported"), "{e}");
    assert!(map
        .get("c/.zarray")
        .unwrap()
        .unwrap()
        .windows(3)
        .any(|w| w == b"<c8"));
}

#[test]
fn a_group_that_cannot_be_stored_is_taken_out_again() {
    let tmp = tempfile::tempdir().unwrap();
    let (_loc, mut w) = writer(tmp.path(), "nczarr");
    w.write_meta().unwrap();
    // A stray file where the group's directory would go.
    std::fs::write(tmp.path().join("d.file").join("g"), b"x").unwrap();
    assert!(w.add_group_stored(Dataset::ROOT, "g").is_err());
    assert!(w.model().find_group_in(Dataset::ROOT, "g").is_none());
    // Later changes are stored.
    w.add_group_stored(Dataset::ROOT, "h").unwrap();
    w.sync().unwrap();
}

#[test]
fn a_writer_starts_from_the_objects_not_a_stale_consolidated_summary() {
    for mode in [
        "zarr,consolidated",
        "nczarr,consolidated",
        "zarr,v3,consolidated",
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let (loc, mut w) = writer(tmp.path(), mode);
        let x = w.add_dim(Dataset::ROOT, "x", 3, false).unwrap();
        let v = w
            .add_var(Dataset::ROOT, "v", NcType::Int, &[x], VarOptions::default())
            .unwrap();
        w.put_attr(AttrTarget::Var(v), "a", AttrValue::Char(b"old".to_vec()))
            .unwrap();
        w.close().unwrap();
        // Another writer changes an object and does not consolidate again.
        let map = zmap::open(&loc, true).unwrap();
        let (key, v3) = match mode.contains("v3") {
            true => ("v/zarr.json", true),
            false => ("v/.zattrs", false),
        };
        let mut changed: Value = serde_json::from_slice(&map.get(key).unwrap().unwrap()).unwrap();
        if v3 {
            changed["attributes"]["a"] = json!("new");
        } else {
            changed["a"] = json!("new");
        }
        map.put(key, &serde_json::to_vec(&changed).unwrap())
            .unwrap();
        map.flush().unwrap();

        let mut w = DatasetWriter::open(&loc).unwrap();
        w.put_attr(
            AttrTarget::Group(Dataset::ROOT),
            "g",
            AttrValue::Int(vec![1]),
        )
        .unwrap();
        w.close().unwrap();
        for summaries in [true, false] {
            let map = zmap::open(&loc, false).unwrap();
            let ds = if summaries {
                meta::read_dataset(map.as_ref(), &loc.mode).unwrap()
            } else {
                meta::read_stored_objects(map.as_ref(), &loc.mode).unwrap()
            };
            let v = ds.var(ds.find_var("v").unwrap());
            assert_eq!(
                v.attr("a").unwrap().value,
                AttrValue::Char(b"new".to_vec()),
                "{mode}, summaries {summaries}"
            );
        }
    }
}

#[test]
fn a_rewrite_keeps_the_layout_and_the_properties_of_the_dataset() {
    for (version, layout, group_key) in [
        ("4.9.0", NczarrLayout::UpperCaseKeys, "_NCZARR_GROUP"),
        ("4.9.2", NczarrLayout::LowerCaseKeys, "_nczarr_group"),
    ] {
        let tmp = tempfile::tempdir().unwrap();
        let loc = Location::parse(tmp.path().join("d.file").to_str().unwrap()).unwrap();
        let mut opts = CreateOptions::default();
        write_for_netcdf_c(&mut opts, version).unwrap();
        let mut w = DatasetWriter::create(&loc, opts).unwrap();
        let x = w.add_dim(Dataset::ROOT, "x", 2, false).unwrap();
        w.add_var(Dataset::ROOT, "v", NcType::Int, &[x], VarOptions::default())
            .unwrap();
        w.close().unwrap();
        let made_by = nc_properties_for(version);

        let mut w = DatasetWriter::open(&loc).unwrap();
        assert_eq!(w.options().layout, layout, "{version}");
        w.put_attr(
            AttrTarget::Group(Dataset::ROOT),
            "new",
            AttrValue::Int(vec![1]),
        )
        .unwrap();
        let strings = AttrValue::Str(vec!["a".into()]);
        let refused = w.put_attr(AttrTarget::Group(Dataset::ROOT), "s", strings);
        assert_eq!(
            refused.is_err(),
            layout == NczarrLayout::UpperCaseKeys,
            "{version}"
        );
        w.add_group(Dataset::ROOT, "g").unwrap();
        w.close().unwrap();
        let map = zmap::open(&loc, false).unwrap();
        let zgroup: Value = serde_json::from_slice(&map.get(".zgroup").unwrap().unwrap()).unwrap();
        assert_eq!(
            zgroup[group_key]["groups"],
            json!(["g"]),
            "{version}: {zgroup}"
        );
        let ds = meta::read_dataset(map.as_ref(), &loc.mode).unwrap();
        assert_eq!(ds.provenance.layout, Some(layout));
        assert_eq!(
            ds.provenance.ncproperties.as_deref(),
            Some(made_by.as_str())
        );
        let attrs = &ds.group(Dataset::ROOT).attrs;
        assert_eq!(attrs[0].value, AttrValue::Int(vec![1]));
        assert_eq!(attrs.len(), if refused.is_err() { 1 } else { 2 });
    }
}

#[test]
fn a_fill_value_attribute_leaves_a_variable_without_fill_so() {
    let tmp = tempfile::tempdir().unwrap();
    let (loc, mut w) = writer(tmp.path(), "nczarr");
    let x = w.add_dim(Dataset::ROOT, "x", 2, false).unwrap();
    let no_fill = VarOptions {
        fill: Fill::NoFill,
        ..Default::default()
    };
    let v = w
        .add_var(Dataset::ROOT, "v", NcType::Int, &[x], no_fill)
        .unwrap();
    let u = w
        .add_var(Dataset::ROOT, "u", NcType::Int, &[x], VarOptions::default())
        .unwrap();
    for var in [v, u] {
        w.put_attr(AttrTarget::Var(var), "_FillValue", AttrValue::Int(vec![5]))
            .unwrap();
    }
    w.del_attr(AttrTarget::Var(v), "_FillValue").unwrap();
    w.put_attr(AttrTarget::Var(v), "_FillValue", AttrValue::Int(vec![6]))
        .unwrap();
    w.close().unwrap();
    let map = zmap::open(&loc, false).unwrap();
    let ds = meta::read_dataset(map.as_ref(), &loc.mode).unwrap();
    let fill = |name: &str| {
        ds.var(ds.find_var(name).unwrap())
            .storage
            .fill_value
            .clone()
    };
    assert_eq!(fill("v"), None);
    assert_eq!(fill("u"), Some(bytes(&[5])));
    let attr = ds
        .var(ds.find_var("v").unwrap())
        .attr("_FillValue")
        .unwrap();
    assert_eq!(attr.value, AttrValue::Int(vec![6]));
}

#[test]
fn renames_onto_stray_objects_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let (_loc, mut w) = writer(tmp.path(), "nczarr");
    let x = w.add_dim(Dataset::ROOT, "x", 2, false).unwrap();
    let v = w
        .add_var(Dataset::ROOT, "v", NcType::Int, &[x], VarOptions::default())
        .unwrap();
    w.write_meta().unwrap();
    // Another program left a chunk under the name.
    w.map.put("baz/0", &[7u8; 8]).unwrap();
    let e = w.rename_var(v, "baz").unwrap_err().to_string();
    assert!(e.contains("already holds objects"), "{e}");
    assert_eq!(w.model().var(v).name, "v");
    assert_eq!(w.model().var(v).storage.key, "v");
    // `mkdir` of a group there too.
    let e = w
        .add_group_stored(Dataset::ROOT, "baz")
        .unwrap_err()
        .to_string();
    assert!(e.contains("already holds objects"), "{e}");
    assert!(w.model().group(Dataset::ROOT).groups.is_empty());
    assert_eq!(w.map.get("baz/.zgroup").unwrap(), None);
}

#[test]
fn a_dataset_has_one_writer_at_a_time() {
    let tmp = tempfile::tempdir().unwrap();
    for mode in ["nczarr", "nczarr,zip"] {
        let dir = tmp.path().join(mode);
        std::fs::create_dir(&dir).unwrap();
        let (loc, mut w) = writer(&dir, mode);
        w.add_dim(Dataset::ROOT, "x", 2, false).unwrap();
        w.sync().unwrap();
        drop(w);
        let first = DatasetWriter::open(&loc).unwrap();
        let Err(e) = DatasetWriter::open(&loc) else {
            panic!("{mode}: a second writer was let in");
        };
        assert!(matches!(e, Error::Busy(_)), "{mode}: {e}");
        assert!(e.to_string().contains("another process is writing"), "{e}");
        drop(first);
        let mut again = DatasetWriter::open(&loc).unwrap();
        // A zip writer's claim moves to each archive it writes in place of the last.
        again
            .put_attr(
                AttrTarget::Group(Dataset::ROOT),
                "a",
                AttrValue::Int(vec![1]),
            )
            .unwrap();
        again.sync().unwrap();
        assert!(
            matches!(DatasetWriter::open(&loc), Err(Error::Busy(_))),
            "{mode}: the claim lapsed at a flush"
        );
    }
}

#[test]
fn write_grow_rename_and_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let (loc, mut w) = writer(tmp.path(), "nczarr");
    let g = w.add_group(Dataset::ROOT, "g").unwrap();
    let t = w.add_dim(Dataset::ROOT, "t", 0, true).unwrap();
    let u = w.add_dim(Dataset::ROOT, "u", 0, true).unwrap();
    let x = w.add_dim(g, "x", 3, false).unwrap();
    let opts = VarOptions {
        chunks: Some(vec![2, 2, 2]),
        codecs: Codecs::parse("shuffle,zlib:4").unwrap(),
        ..Default::default()
    };
    let v = w.add_var(g, "v", NcType::Int, &[t, u, x], opts).unwrap();
    w.put_attr(AttrTarget::Var(v), "_FillValue", AttrValue::Int(vec![-1]))
        .unwrap();
    w.put_attr(
        AttrTarget::Group(Dataset::ROOT),
        "title",
        AttrValue::Char(b"hi".to_vec()),
    )
    .unwrap();
    // Writing index (1, 2, 0..3) grows both unlimited dimensions.
    let slab = Hyperslab {
        start: vec![1, 2, 0],
        count: vec![1, 1, 3],
        stride: vec![1; 3],
    };
    w.write(v, &slab, &bytes(&[7, 8, 9])).unwrap();
    assert_eq!((w.model().dim(t).len, w.model().dim(u).len), (2, 3));
    // A fixed dimension does not grow.
    let past = Hyperslab {
        start: vec![0, 0, 2],
        count: vec![1, 1, 2],
        stride: vec![1; 3],
    };
    let err = w.write(v, &past, &bytes(&[1, 2])).unwrap_err().to_string();
    assert!(err.contains("/g/x") && err.contains("length 3"), "{err}");
    // The fill value is fixed once values are stored.
    assert!(w
        .put_attr(AttrTarget::Var(v), "_FillValue", AttrValue::Int(vec![5]))
        .is_err());
    w.sync().unwrap();
    w.rename_var(v, "w").unwrap();
    w.rename_group(g, "h").unwrap();
    w.rename_dim(x, "xx").unwrap();
    w.rename_attr(AttrTarget::Group(Dataset::ROOT), "title", "name")
        .unwrap();
    w.close().unwrap();
    assert!(!tmp.path().join("d.file/g").exists());

    let map = zmap::open(&loc, false).unwrap();
    let ds = meta::read_dataset(map.as_ref(), &loc.mode).unwrap();
    let v = ds.find_var("/h/w").expect("renamed variable");
    assert_eq!(ds.var_shape(v), [2, 3, 3]);
    assert_eq!(ds.dim(ds.var(v).dims[2]).name, "xx");
    assert_eq!(ds.group(Dataset::ROOT).attrs[0].name, "name");
    let engine = ChunkEngine::new(map, 1 << 20);
    let mut out = vec![0u8; 18 * 4];
    engine
        .read(&ds, v, &Hyperslab::whole(&[2, 3, 3]), &mut out)
        .unwrap();
    let mut want = vec![-1; 18];
    want[15..18].copy_from_slice(&[7, 8, 9]);
    assert_eq!(ints(&out), want);
}

/// Rows `start..start + count` of a variable on (t) or (t, x).
fn rows(start: u64, count: u64, rank: usize) -> Hyperslab {
    let mut slab = Hyperslab::whole(&vec![2; rank]);
    (slab.start[0], slab.count[0]) = (start, count);
    slab
}

#[test]
fn records_a_failed_writer_stored_past_the_length_read_as_fill_when_it_grows() {
    const NC_FILL_INT: i32 = -2147483647;
    let tmp = tempfile::tempdir().unwrap();
    // The last: `a` in shards of 12 records, inner chunks of 4.
    for (mode, separator, sharded) in [
        ("nczarr", '.', false),
        ("nczarr", '/', false),
        ("nczarr,v3", '/', false),
        ("nczarr,zip", '.', false),
        ("nczarr,v3", '/', true),
    ] {
        let dir = tmp
            .path()
            .join(format!("{mode}{}{sharded}", separator == '/'));
        std::fs::create_dir(&dir).unwrap();
        let loc = Location::parse(format!(
            "file://{}#mode={mode}",
            dir.join("d.file").display()
        ))
        .unwrap();
        let mut opts = CreateOptions::from_mode(&loc.mode);
        opts.separator = Some(separator);
        let mut w = DatasetWriter::create(&loc, opts).unwrap();
        let t = w.add_dim(Dataset::ROOT, "t", 0, true).unwrap();
        let x = w.add_dim(Dataset::ROOT, "x", 2, false).unwrap();
        let chunked = |chunks: Vec<u64>, fill: Fill| VarOptions {
            chunks: Some(chunks),
            fill,
            ..Default::default()
        };
        let a = w
            .add_var(
                Dataset::ROOT,
                "a",
                NcType::Int,
                &[t, x],
                chunked(vec![4, 2], Fill::Value(bytes(&[-1]))),
            )
            .unwrap();
        let b = w
            .add_var(
                Dataset::ROOT,
                "b",
                NcType::Int,
                &[t],
                chunked(vec![4], Fill::Default),
            )
            .unwrap();
        if sharded {
            let st = &mut w.model.vars[a.0].storage;
            let dtype = st.dtype.clone().unwrap();
            st.codecs = writer_v3::sharded(
                &CodecSpec::default(),
                &dtype,
                &[4, 2],
                &writer_v3::ShardIndex::default(),
                "/a",
            )
            .unwrap();
            st.chunks = vec![12, 2];
        }
        w.write(a, &rows(0, 6, 2), &bytes(&[1; 12])).unwrap();
        w.write(b, &rows(0, 6, 1), &bytes(&[1; 6])).unwrap();
        w.close().unwrap();

        // A writer without a cache stores each chunk as it writes it, and fails before
        // its metadata: records 6..16 are stored, the dataset still has 6.
        let mut failed = DatasetWriter::open_with_cache(&loc, 0).unwrap();
        failed.write(a, &rows(6, 10, 2), &bytes(&[99; 20])).unwrap();
        failed.write(b, &rows(6, 10, 1), &bytes(&[99; 10])).unwrap();
        failed.map().flush().unwrap();
        drop(failed);
        let map = zmap::open(&loc, false).unwrap();
        let ds = meta::read_dataset(map.as_ref(), &loc.mode).unwrap();
        assert_eq!(ds.dim(t).len, 6, "{mode}");

        let mut w = DatasetWriter::open(&loc).unwrap();
        // Read first: the chunk of records 4..8 is cached as stored.
        let mut out = vec![0u8; 6 * 2 * 4];
        w.read(a, &rows(0, 6, 2), &mut out).unwrap();
        assert_eq!(ints(&out), [1; 12], "{mode}");
        // Record 12 leaves a gap of 6..12.
        w.write(a, &rows(12, 1, 2), &bytes(&[7, 7])).unwrap();
        let mut want_a = vec![1; 12];
        want_a.extend([-1; 12]);
        want_a.extend([7, 7]);
        let mut want_b = vec![1; 6];
        want_b.extend([NC_FILL_INT; 7]);
        let check = |what: &str, read: &dyn Fn(VarId, &Hyperslab, &mut [u8])| {
            let mut out = vec![0u8; 13 * 2 * 4];
            read(a, &rows(0, 13, 2), &mut out);
            assert_eq!(ints(&out), want_a, "{mode}, {what}: a");
            let mut out = vec![0u8; 13 * 4];
            read(b, &rows(0, 13, 1), &mut out);
            assert_eq!(ints(&out), want_b, "{mode}, {what}: b");
        };
        check("writer", &|v, slab, out| w.read(v, slab, out).unwrap());
        w.close().unwrap();
        let map = zmap::open(&loc, false).unwrap();
        let ds = meta::read_dataset(map.as_ref(), &loc.mode).unwrap();
        let engine = ChunkEngine::new(map, 1 << 20);
        check("stored", &|v, slab, out| {
            engine.read(&ds, v, slab, out).unwrap()
        });
    }
}

#[test]
fn create_refuses_an_existing_dataset_and_bad_names() {
    let tmp = tempfile::tempdir().unwrap();
    let (loc, mut w) = writer(tmp.path(), "zarr");
    assert!(w.add_dim(Dataset::ROOT, "a/b", 1, false).is_err());
    w.add_dim(Dataset::ROOT, "a", 1, false).unwrap();
    assert!(w.add_dim(Dataset::ROOT, "a", 2, false).is_err());
    w.close().unwrap();
    assert!(DatasetWriter::create(&loc, CreateOptions::default()).is_err());
}

/// `zarr.json` is a netCDF name, but in Zarr v3 the key of its group's own metadata: a
/// variable or group of that name is refused there, before anything is stored, and kept by
/// Zarr v2.
#[test]
fn zarr_json_is_no_name_for_a_zarr_v3_variable_or_group() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, mut w) = writer(tmp.path(), "zarr,v3");
    for refused in [
        w.add_var(
            Dataset::ROOT,
            "zarr.json",
            NcType::Int,
            &[],
            VarOptions::default(),
        ),
        w.add_group(Dataset::ROOT, "zarr.json").map(|_| VarId(0)),
    ] {
        let e = refused.unwrap_err().to_string();
        assert!(e.contains("\"/zarr.json\"") && e.contains("Zarr v3"), "{e}");
    }
    let g = w.add_group(Dataset::ROOT, "g").unwrap();
    assert!(w.rename_group(g, "zarr.json").is_err());
    w.close().unwrap();

    let mut model = Dataset::new();
    let g = model.add_group(Dataset::ROOT, "g");
    model.add_group(g, "zarr.json");
    for version in ["v3", "v2"] {
        let dir = tmp.path().join(version);
        std::fs::create_dir(&dir).unwrap();
        let loc = Location::parse(format!(
            "file://{}#mode=zarr,{version}",
            dir.join("m.zarr").display()
        ))
        .unwrap();
        let made =
            DatasetWriter::create_with(&loc, CreateOptions::from_mode(&loc.mode), model.clone());
        match version {
            "v3" => {
                let e = made.unwrap_err().to_string();
                assert!(e.contains("group \"/g/zarr.json\""), "{e}");
                assert!(!dir.join("m.zarr").join("zarr.json").exists());
            }
            _ => made.unwrap().close().unwrap(),
        }
    }
    let (_, mut w) = writer(&tmp.path().join("v2"), "zarr");
    w.add_var(
        Dataset::ROOT,
        "zarr.json",
        NcType::Int,
        &[],
        VarOptions::default(),
    )
    .unwrap();
    assert!(w
        .add_var(
            Dataset::ROOT,
            ".zattrs",
            NcType::Int,
            &[],
            VarOptions::default()
        )
        .is_err());
    assert!(check_key_name(".zattrs", "/.zattrs", "variable", 2).is_err());
    assert!(check_key_name(".zattrs", "/.zattrs", "variable", 3).is_ok());
}

/// A name or text that holds an escaped lone surrogate (zarr-python writes `"x\ud800y"`)
/// reads as U+FFFD, which a rewrite of the metadata would store in its place: such a
/// dataset is not opened for writing, and the stored JSON stays as it was.
#[test]
fn datasets_with_lone_surrogates_are_not_opened_for_writing() {
    let tmp = tempfile::tempdir().unwrap();
    let zattrs: [&[u8]; 3] = [
        br#"{"_ARRAY_DIMENSIONS": ["d"], "x\ud800y": 1}"#,
        br#"{"_ARRAY_DIMENSIONS": ["d"], "a": ["p", "q\udc00"]}"#,
        br#"{"_ARRAY_DIMENSIONS": ["d\ud800"]}"#,
    ];
    for (i, zattrs) in zattrs.into_iter().enumerate() {
        let root = tmp.path().join(format!("ds{i}.zarr"));
        let map = zmap::FileMap::open(&root, true).unwrap();
        map.put(".zgroup", br#"{"zarr_format": 2}"#).unwrap();
        map.put(
            "v/.zarray",
            br#"{"zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "<i4", "fill_value": null, "order": "C", "compressor": null, "filters": null}"#,
        )
        .unwrap();
        map.put("v/.zattrs", zattrs).unwrap();
        let loc = Location::parse(format!("file://{}#mode=zarr,file", root.display())).unwrap();
        let e = DatasetWriter::open(&loc).unwrap_err().to_string();
        assert!(
            e.contains("lone UTF-16 surrogate") && e.contains("v/.zattrs"),
            "{e}"
        );
        assert_eq!(map.get("v/.zattrs").unwrap().unwrap(), zattrs);
    }
    // U+FFFD itself, stored as such, is only text.
    let root = tmp.path().join("plain.zarr");
    let map = zmap::FileMap::open(&root, true).unwrap();
    map.put(".zgroup", br#"{"zarr_format": 2}"#).unwrap();
    map.put(".zattrs", "{\"x\u{FFFD}y\": \"\\ufffd\"}".as_bytes())
        .unwrap();
    let loc = Location::parse(format!("file://{}#mode=zarr,file", root.display())).unwrap();
    DatasetWriter::open(&loc).unwrap().close().unwrap();
}

/// The chain a new variable of `nctype` over a dimension of 6 (one chunk) is stored
/// with in a dataset of `mode`, or the error refusing it.
fn stored_chain(mode: &str, nctype: NcType, codecs: &str) -> Result<CodecSpec> {
    let tmp = tempfile::tempdir().unwrap();
    let (_loc, mut w) = writer(tmp.path(), mode);
    let x = w.add_dim(Dataset::ROOT, "x", 6, false).unwrap();
    let opts = VarOptions {
        codecs: Codecs::parse(codecs).unwrap(),
        ..Default::default()
    };
    let v = w.add_var(Dataset::ROOT, "v", nctype, &[x], opts)?;
    Ok(w.model().var(v).storage.codecs.clone())
}

#[test]
fn nczarr_shuffles_by_the_type_size_as_netcdf_c_does() {
    let chain = r#"[{"id": "shuffle", "elementsize": 2}, {"id": "zlib", "level": 1}]"#;
    let CodecSpec::V2 { filters, .. } = stored_chain("nczarr", NcType::Double, chain).unwrap()
    else {
        panic!("not a v2 chain")
    };
    assert_eq!(filters, [json!({"id": "shuffle", "elementsize": 0})]);
    // Pure Zarr keeps it: numcodecs reads it as written.
    let CodecSpec::V2 { filters, .. } = stored_chain("zarr", NcType::Double, chain).unwrap() else {
        panic!("not a v2 chain")
    };
    assert_eq!(filters, [json!({"id": "shuffle", "elementsize": 2})]);
}

#[test]
fn nczarr_stores_a_negative_zstd_level_as_netcdf_c_does() {
    let compressor = |mode, codecs| match stored_chain(mode, NcType::Int, codecs).unwrap() {
        CodecSpec::V2 { compressor, .. } => compressor,
        CodecSpec::V3(_) => panic!("not a v2 chain"),
    };
    // netCDF4-python's complevel=-5 (netcdf-c 4.10.1) stores 2^32 - 5.
    let netcdf_c_minus_5 = Some(json!({"id": "zstd", "level": 4294967291u64}));
    assert_eq!(compressor("nczarr", "zstd:-5"), netcdf_c_minus_5);
    let stored_by_netcdf_c = r#"[{"id": "zstd", "level": 4294967291}]"#;
    assert_eq!(compressor("nczarr", stored_by_netcdf_c), netcdf_c_minus_5);
    // numcodecs writes the level as it is.
    assert_eq!(
        compressor("zarr", "zstd:-5"),
        Some(json!({"id": "zstd", "level": -5}))
    );
}

#[test]
fn nczarr_leaves_out_a_shuffle_of_1_byte_elements() {
    // zarr-python's [Shuffle(4), Zlib(1), Shuffle(1)]: the last shuffle changes nothing, and
    // netcdf-c would shuffle by the type size there, after the compressor.
    let chain = r#"[{"id": "shuffle", "elementsize": 4}, {"id": "zlib", "level": 1},
                    {"id": "shuffle", "elementsize": 1}]"#;
    assert_eq!(
        stored_chain("nczarr", NcType::Int, chain).unwrap(),
        CodecSpec::V2 {
            filters: vec![json!({"id": "shuffle", "elementsize": 4})],
            compressor: Some(json!({"id": "zlib", "level": 1})),
        }
    );
    // Pure Zarr keeps it, as numcodecs reads it; so does a byte variable, which netcdf-c
    // shuffles by 1 byte too.
    let CodecSpec::V2 { filters, .. } = stored_chain("zarr", NcType::Int, chain).unwrap() else {
        panic!("not a v2 chain")
    };
    assert_eq!(filters.len(), 3);
    let one = r#"[{"id": "shuffle", "elementsize": 1}]"#;
    let CodecSpec::V2 { filters, .. } = stored_chain("nczarr", NcType::Byte, one).unwrap() else {
        panic!("not a v2 chain")
    };
    assert_eq!(filters, [json!({"id": "shuffle", "elementsize": 1})]);
}

#[test]
fn chains_numcodecs_cannot_unshuffle_are_refused() {
    let e = stored_chain("zarr", NcType::Int, "zlib,shuffle").unwrap_err();
    assert!(e.to_string().contains("after the compressor zlib"), "{e}");
    // 6 bytes are not a whole number of 4-byte elements.
    let e = stored_chain(
        "zarr",
        NcType::Byte,
        r#"[{"id": "shuffle", "elementsize": 4}]"#,
    );
    let e = e.unwrap_err().to_string();
    assert!(e.contains("4-byte elements over chunks of 6 bytes"), "{e}");
    // A checksum's 4 bytes count: 24 + 4 is not a multiple of 8.
    let e = stored_chain(
        "zarr",
        NcType::Int,
        r#"[{"id": "fletcher32"}, {"id": "shuffle", "elementsize": 8}]"#,
    );
    assert!(e.unwrap_err().to_string().contains("chunks of 28 bytes"));
    for ok in ["shuffle,zlib", "fletcher32,shuffle", "zlib"] {
        stored_chain("zarr", NcType::Int, ok).unwrap();
    }
    let e = stored_chain(
        "zarr",
        NcType::Int,
        r#"[{"id": "blosc", "cname": "snappy", "clevel": 5, "shuffle": 1}]"#,
    );
    assert!(e
        .unwrap_err()
        .to_string()
        .contains("blosclz, lz4, lz4hc, zlib, zstd"));
}

#[test]
fn v3_strings_are_not_shuffled() {
    let CodecSpec::V3(list) = stored_chain("zarr,v3", NcType::String, "shuffle,zlib:1").unwrap()
    else {
        panic!("not a v3 chain")
    };
    let names: Vec<&str> = list.iter().filter_map(|c| c["name"].as_str()).collect();
    assert_eq!(names, ["vlen-utf8", "numcodecs.zlib"]);
}

#[test]
fn codec_lists_in_zarr_v3_form_are_read() {
    // What `dump -s` shows of a Zarr v3 variable.
    let c = Codecs::from_json(
        r#"[{"name": "numcodecs.shuffle", "configuration": {"elementsize": 4}},
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd", "configuration": {"level": 3, "checksum": false}}]"#,
    )
    .unwrap();
    assert_eq!(c.filters, [json!({"id": "shuffle", "elementsize": 4})]);
    assert_eq!(c.compressor, Some(json!({"id": "zstd", "level": 3})));
    let e = Codecs::from_json(r#"[{"level": 3}]"#).unwrap_err();
    assert!(e.to_string().contains("\"name\""), "{e}");
}

#[test]
fn an_object_string_encoding_starting_a_codec_list_is_left_to_the_type() {
    // What `dump -s` shows of xarray's `str` in Zarr v2.
    let c = Codecs::from_json(r#"[{"id": "vlen-utf8"},{"id": "zstd", "level": 4}]"#).unwrap();
    assert_eq!(c.filters, Vec::<serde_json::Value>::new());
    assert_eq!(c.compressor, Some(json!({"id": "zstd", "level": 4})));
    let c = Codecs::from_json(r#"[{"id": "vlen-bytes"}]"#).unwrap();
    assert_eq!(c, Codecs::default());
    // Only as the first codec, where readers take it as the string encoding.
    let c = Codecs::from_json(r#"[{"id": "zlib", "level": 1},{"id": "vlen-utf8"}]"#).unwrap();
    assert_eq!(c.filters.len(), 2);
}

#[test]
fn blosc_snappy_is_refused_naming_the_compressors() {
    let e = Codecs::parse("blosc:snappy").unwrap_err().to_string();
    assert!(e.contains("blosclz, lz4, lz4hc, zlib, zstd"), "{e}");
}

#[test]
fn codec_words_and_hdf5_filters() {
    let c = Codecs::parse("shuffle,fletcher32,zstd:5").unwrap();
    assert_eq!(c.filters.len(), 2);
    assert_eq!(c.compressor, Some(json!({"id": "zstd", "level": 5})));
    // A checksum after the compressor keeps the order: everything is a filter.
    let c = Codecs::parse("zlib:1,fletcher32").unwrap();
    assert_eq!(c.compressor, None);
    assert_eq!(c.filters.len(), 2);
    assert!(Codecs::parse("zlib:12").is_err());
    assert!(Codecs::parse("nope").is_err());
    let f = Codecs::from_hdf5_filter("2|307,9").unwrap();
    assert_eq!(f.compressor, Some(json!({"id": "bz2", "level": 9})));
    assert!(Codecs::from_hdf5_filter("40000").is_err());
}

#[test]
fn blosc_filters_become_the_codec_netcdf_c_stores() {
    // netcdf-c 4.10.1, given these parameters by nc_def_var_filter on an NCZarr variable,
    // writes these compressors into .zarray (the fourth parameter is the blocksize; the
    // three before it are ignored).
    let compressor = |spec: &str| {
        Codecs::from_hdf5_filter(spec)
            .unwrap()
            .compressor
            .unwrap()
            .to_string()
    };
    assert_eq!(
        compressor("32001,0,0,0,1024,5,1,1"),
        r#"{"id":"blosc","clevel":5,"blocksize":1024,"cname":"lz4","shuffle":1}"#
    );
    assert_eq!(
        compressor("32001,9,9,9,4096,9,0,0"),
        r#"{"id":"blosc","clevel":9,"blocksize":4096,"cname":"blosclz","shuffle":0}"#
    );
    assert_eq!(
        compressor("32001,0,0,0,0,3,2,5"),
        r#"{"id":"blosc","clevel":3,"blocksize":0,"cname":"zstd","shuffle":2}"#
    );
    // It refuses fewer than seven parameters, and a compressor blosc does not number.
    for spec in ["32001", "32001,0,0,0,2048,5", "32001,0,0,0,0,5,1,9"] {
        let e = Codecs::from_hdf5_filter(spec).unwrap_err();
        assert!(matches!(e, Error::Invalid(_)), "{spec}: {e}");
    }
}

/// A map that records the keys of the metadata objects stored through it.
#[derive(Debug)]
struct RecordingPuts {
    inner: Arc<dyn ZMap>,
    stored: std::sync::Mutex<Vec<String>>,
}

impl RecordingPuts {
    /// The metadata keys stored since the last call, sorted.
    fn take_metadata_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = std::mem::take(&mut *self.stored.lock().unwrap())
            .into_iter()
            .filter(|k| {
                let name = k.rsplit('/').next().unwrap_or(k);
                name.starts_with(".z") || name == "zarr.json"
            })
            .collect();
        keys.sort();
        keys
    }
}

impl ZMap for RecordingPuts {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.get(key)
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.stored.lock().unwrap().push(key.to_string());
        self.inner.put(key, value)
    }
    fn put_many(&self, objects: &[(String, Vec<u8>)]) -> Result<()> {
        let mut stored = self.stored.lock().unwrap();
        stored.extend(objects.iter().map(|(k, _)| k.clone()));
        self.inner.put_many(objects)
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.inner.delete(key)
    }
    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        self.inner.search(prefix)
    }
    fn read_only(&self) -> bool {
        false
    }
    fn describe(&self) -> String {
        "recording puts".into()
    }
}

/// One attribute set, or one record appended, stores the metadata objects that hold it (the
/// variable's `.zattrs`; the root's dimension sizes and the shapes of the variables on the
/// dimension), not those of every variable: that made each such change on a `rw` mount
/// cost time in proportion to the number of variables. The first sync of a writer opened
/// on a dataset finds what is stored by reading it; the later ones know it.
#[test]
fn a_change_stores_only_the_metadata_objects_it_changes() {
    for mode in ["nczarr", "zarr", "nczarr,v3", "zarr,v3"] {
        let tmp = tempfile::tempdir().unwrap();
        let (loc, mut w) = writer(tmp.path(), mode);
        let x = w.add_dim(Dataset::ROOT, "x", 2, false).unwrap();
        let t = w.add_dim(Dataset::ROOT, "t", 0, true).unwrap();
        for i in 0..20 {
            w.add_var(
                Dataset::ROOT,
                &format!("v{i}"),
                NcType::Int,
                &[x],
                VarOptions::default(),
            )
            .unwrap();
        }
        for i in 0..2 {
            w.add_var(
                Dataset::ROOT,
                &format!("r{i}"),
                NcType::Int,
                &[t],
                VarOptions::default(),
            )
            .unwrap();
        }
        w.close().unwrap();
        let v3 = mode.ends_with("v3");
        let object = |node: &str, v2: &str| match (v3, node) {
            (true, "") => "zarr.json".to_string(),
            (true, _) => format!("{node}/zarr.json"),
            (false, "") => v2.to_string(),
            (false, _) => format!("{node}/{v2}"),
        };

        let mut w = DatasetWriter::open(&loc).unwrap();
        let map = Arc::new(RecordingPuts {
            inner: Arc::clone(&w.map),
            stored: Default::default(),
        });
        w.engine = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, WRITER_CACHE_BYTES);
        w.map = Arc::clone(&map) as Arc<dyn ZMap>;
        for round in 0..2 {
            let v = w.model().find_var(&format!("v{}", 3 + round)).unwrap();
            w.put_attr(AttrTarget::Var(v), "note", AttrValue::Char(b"set".to_vec()))
                .unwrap();
            w.sync().unwrap();
            let name = format!("v{}", 3 + round);
            assert_eq!(
                map.take_metadata_keys(),
                [object(&name, ".zattrs")],
                "{mode}, round {round}: an attribute of {name}"
            );
        }
        // Pure Zarr has no unlimited dimension: `t` is read back as fixed.
        let appends = if mode.starts_with("nczarr") {
            1..3u64
        } else {
            1..1
        };
        let records = ["r0", "r1"].map(|name| w.model().find_var(name).unwrap());
        for n in appends.clone() {
            for r in &records {
                let slab = Hyperslab {
                    start: vec![n - 1],
                    count: vec![1],
                    stride: vec![1],
                };
                w.write(*r, &slab, &bytes(&[n as i32])).unwrap();
            }
            w.sync().unwrap();
            // The root holds the dimension's length, in `_nczarr_group` (in `.zattrs` on
            // Zarr v2).
            let mut expected = vec![
                object("r0", ".zarray"),
                object("r1", ".zarray"),
                object("", ".zattrs"),
            ];
            expected.sort();
            expected.dedup();
            assert_eq!(map.take_metadata_keys(), expected, "{mode}: record {n}");
        }
        w.close().unwrap();

        let ds = meta::read_dataset(zmap::open(&loc, false).unwrap().as_ref(), &loc.mode).unwrap();
        for i in [3, 4] {
            let v = ds.find_var(&format!("v{i}")).unwrap();
            assert_eq!(
                ds.var(v).attr("note").map(|a| a.value.clone()),
                Some(AttrValue::Char(b"set".to_vec())),
                "{mode}"
            );
        }
        if !appends.is_empty() {
            let r1 = ds.find_var("r1").unwrap();
            let mut out = vec![0u8; 8];
            ChunkEngine::new(zmap::open(&loc, false).unwrap(), 0)
                .read(&ds, r1, &Hyperslab::whole(&[2]), &mut out)
                .unwrap();
            assert_eq!(ints(&out), [1, 2], "{mode}");
        }
    }
}

/// A map that records the key of every object read through it.
#[derive(Debug)]
struct RecordingReads {
    inner: Arc<dyn ZMap>,
    read: std::sync::Mutex<Vec<String>>,
}

impl RecordingReads {
    /// The keys read since the last call, sorted.
    fn take_keys(&self) -> Vec<String> {
        let mut keys = std::mem::take(&mut *self.read.lock().unwrap());
        keys.sort();
        keys
    }
}

impl ZMap for RecordingReads {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.read.lock().unwrap().push(key.to_string());
        self.inner.get(key)
    }
    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.put(key, value)
    }
    fn delete(&self, key: &str) -> Result<()> {
        self.inner.delete(key)
    }
    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        self.inner.search(prefix)
    }
    fn read_only(&self) -> bool {
        false
    }
    fn describe(&self) -> String {
        "recording reads".into()
    }
}

/// A rename reads the objects it moves (those under the node's old key) and probes its new
/// key for strays, nothing else: it used to forget which metadata objects were stored and
/// read back those of every group to compare them, so renaming the groups of a dataset one
/// by one cost time in the square of their number. The parent's metadata, which names the
/// node, is stored all the same.
#[test]
fn a_rename_reads_only_the_objects_it_moves() {
    for mode in ["nczarr", "nczarr,v3"] {
        let tmp = tempfile::tempdir().unwrap();
        let (loc, mut w) = writer(tmp.path(), mode);
        let x = w.add_dim(Dataset::ROOT, "x", 2, false).unwrap();
        let v = w
            .add_var(Dataset::ROOT, "v", NcType::Int, &[x], VarOptions::default())
            .unwrap();
        w.write(v, &Hyperslab::whole(&[2]), &bytes(&[1, 2]))
            .unwrap();
        let g = w.add_group(Dataset::ROOT, "g").unwrap();
        w.add_var(g, "gv", NcType::Int, &[x], VarOptions::default())
            .unwrap();
        for i in 0..30 {
            w.add_group(Dataset::ROOT, &format!("other{i}")).unwrap();
        }
        w.close().unwrap();

        let mut w = DatasetWriter::open(&loc).unwrap();
        let map = Arc::new(RecordingReads {
            inner: Arc::clone(&w.map),
            read: Default::default(),
        });
        w.engine = ChunkEngine::new(Arc::clone(&map) as Arc<dyn ZMap>, WRITER_CACHE_BYTES);
        w.map = Arc::clone(&map) as Arc<dyn ZMap>;
        // The first change of a writer opened on a dataset finds what is stored by reading it.
        let v = w.model().find_var("v").unwrap();
        w.rename_var(v, "v1").unwrap();
        w.sync().unwrap();
        map.take_keys();
        let renames = [("v1", "v2"), ("v2", "v3"), ("g", "h"), ("h", "k")];
        for (old, new) in renames {
            match w.model().find_var(old) {
                Some(v) => w.rename_var(v, new).unwrap(),
                None => {
                    let g = w.model().find_group(old).unwrap();
                    w.rename_group(g, new).unwrap();
                }
            }
            w.sync().unwrap();
            let read = map.take_keys();
            let moved = format!("{old}/");
            let others: Vec<&String> = read
                .iter()
                .filter(|k| !k.starts_with(&moved) && *k != new)
                .collect();
            assert!(
                others.is_empty(),
                "{mode}: renaming {old} to {new} read {others:?}"
            );
            assert!(!read.is_empty(), "{mode}: {old} was not moved");
        }
        w.close().unwrap();

        let map = zmap::open(&loc, false).unwrap();
        let ds = meta::read_dataset(map.as_ref(), &loc.mode).unwrap();
        let v = ds.find_var("/v3").expect("renamed variable");
        assert!(ds.find_var("/k/gv").is_some(), "{mode}");
        assert_eq!(ds.group(Dataset::ROOT).groups.len(), 31, "{mode}");
        let mut out = vec![0u8; 8];
        ChunkEngine::new(map, 0)
            .read(&ds, v, &Hyperslab::whole(&[2]), &mut out)
            .unwrap();
        assert_eq!(ints(&out), [1, 2], "{mode}");
    }
}

/// The metadata keys among `keys` (chunks left out).
fn metadata_keys(keys: Vec<String>) -> Vec<String> {
    keys.into_iter()
        .filter(|k| {
            let name = k.rsplit('/').next().unwrap_or(k);
            name.starts_with(".z") || name == "zarr.json"
        })
        .collect()
}

/// Replaces every metadata object of the dataset at `dir` by the same JSON spelled as
/// Python's `json.dump(indent=4, sort_keys=True)` spells it (zarr-python's spelling), which
/// differs from nczarrfs' in every byte after the first.
fn respell_metadata(dir: &Path) {
    for entry in walkdir(dir) {
        let name = entry.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if !(name.starts_with(".z") || name == "zarr.json") {
            continue;
        }
        let value: Value = serde_json::from_slice(&std::fs::read(&entry).unwrap()).unwrap();
        let sorted = sort_keys(value);
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(
            &mut out,
            serde_json::ser::PrettyFormatter::with_indent(b"    "),
        );
        serde::Serialize::serialize(&sorted, &mut ser).unwrap();
        std::fs::write(&entry, out).unwrap();
    }
}

fn sort_keys(v: Value) -> Value {
    match v {
        Value::Object(m) => {
            let mut entries: Vec<(String, Value)> = m.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(
                entries
                    .into_iter()
                    .map(|(k, v)| (k, sort_keys(v)))
                    .collect(),
            )
        }
        Value::Array(a) => Value::Array(a.into_iter().map(sort_keys).collect()),
        other => other,
    }
}

fn walkdir(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out
}

/// The first change of a writer opened on a dataset compares the metadata with what the open
/// read, not with a second read of every object: with 1,000 variables it read 2,000 objects
/// (on S3, 2,000 GETs). Of a consolidated Zarr v2 dataset it reads `.zmetadata`, which the
/// open does not read (it reads the objects, which a stale summary would contradict); of pure
/// Zarr, the node it changes, whose other attributes keep their stored spelling. Objects
/// stored by another writer in another spelling of the same JSON are left as they are. A pure
/// Zarr writer read every node again at every change, the second one too.
#[test]
fn the_first_change_after_open_reads_no_metadata_again() {
    const VARS: usize = 1000;
    for mode in [
        "nczarr",
        "zarr",
        "nczarr,v3",
        "zarr,v3",
        "nczarr,consolidated",
        "zarr,consolidated",
        "zarr,v3,consolidated",
    ] {
        for respelled in [false, true] {
            let tmp = tempfile::tempdir().unwrap();
            let (loc, mut w) = writer(tmp.path(), mode);
            let x = w.add_dim(Dataset::ROOT, "x", 2, false).unwrap();
            for i in 0..VARS {
                let v = w
                    .add_var(
                        Dataset::ROOT,
                        &format!("v{i}"),
                        NcType::Int,
                        &[x],
                        VarOptions::default(),
                    )
                    .unwrap();
                w.put_attr(AttrTarget::Var(v), "units", AttrValue::Char(b"m".to_vec()))
                    .unwrap();
            }
            w.close().unwrap();
            if respelled {
                respell_metadata(&tmp.path().join("d.file"));
            }

            let mut w = DatasetWriter::open(&loc).unwrap();
            let reads = Arc::new(RecordingReads {
                inner: Arc::clone(&w.map),
                read: Default::default(),
            });
            let puts = Arc::new(RecordingPuts {
                inner: Arc::clone(&reads) as Arc<dyn ZMap>,
                stored: Default::default(),
            });
            w.engine = ChunkEngine::new(Arc::clone(&puts) as Arc<dyn ZMap>, WRITER_CACHE_BYTES);
            w.map = Arc::clone(&puts) as Arc<dyn ZMap>;
            let v = w.model().find_var("v7").unwrap();
            w.put_attr(AttrTarget::Var(v), "note", AttrValue::Char(b"set".to_vec()))
                .unwrap();
            w.sync().unwrap();
            let read = metadata_keys(reads.take_keys());
            eprintln!(
                "{mode}{}: the first change read {} metadata objects",
                if respelled { ", respelled" } else { "" },
                read.len()
            );
            let v3 = mode.contains("v3");
            let consolidated = mode.contains("consolidated");
            let node = |name: &str| match v3 {
                true => format!("{name}/zarr.json"),
                false => format!("{name}/.zattrs"),
            };
            // What must be read to write `name`'s new attribute: pure Zarr keeps the stored
            // spelling of the other attributes of the node, which the root of a consolidated
            // Zarr v3 dataset copies.
            let expected_reads = |name: &str, first: bool| {
                let mut keys = Vec::new();
                if first && consolidated && !v3 {
                    keys.push(".zmetadata".to_string());
                }
                if mode.starts_with("zarr") {
                    keys.push(node(name));
                    if consolidated && v3 {
                        keys.push("zarr.json".to_string());
                    }
                }
                keys.sort();
                keys
            };
            assert_eq!(
                read,
                expected_reads("v7", true),
                "{mode}, respelled {respelled}"
            );
            let mut expected_puts = vec![node("v7")];
            match (consolidated, v3) {
                (true, true) => expected_puts.push("zarr.json".into()),
                (true, false) => expected_puts.push(".zmetadata".into()),
                _ => {}
            }
            expected_puts.sort();
            assert_eq!(
                puts.take_metadata_keys(),
                expected_puts,
                "{mode}, respelled {respelled}"
            );
            // The next change knows what the first stored.
            let v = w.model().find_var("v8").unwrap();
            w.put_attr(AttrTarget::Var(v), "note", AttrValue::Char(b"set".to_vec()))
                .unwrap();
            w.sync().unwrap();
            let read = metadata_keys(reads.take_keys());
            eprintln!(
                "{mode}: the second change read {} metadata objects",
                read.len()
            );
            assert_eq!(
                read,
                expected_reads("v8", false),
                "{mode}, respelled {respelled}"
            );
            w.close().unwrap();
            let ds =
                meta::read_dataset(zmap::open(&loc, false).unwrap().as_ref(), &loc.mode).unwrap();
            let v = ds.find_var("v7").unwrap();
            assert_eq!(
                ds.var(v).attr("note").map(|a| a.value.clone()),
                Some(AttrValue::Char(b"set".to_vec())),
                "{mode}"
            );
        }
    }
}

/// A pure Zarr attribute stored as JSON that no netCDF type spells back (`true`, read as the
/// ubyte 1) keeps its JSON through changes of other nodes, in its `.zattrs` and in the
/// consolidated summary that copies it, though the writer no longer reads every node back.
#[test]
fn a_stored_spelling_survives_changes_of_other_nodes_in_the_summary_too() {
    for mode in ["zarr", "zarr,consolidated"] {
        let tmp = tempfile::tempdir().unwrap();
        let (loc, mut w) = writer(tmp.path(), mode);
        let x = w.add_dim(Dataset::ROOT, "x", 2, false).unwrap();
        for name in ["a", "b", "c"] {
            w.add_var(
                Dataset::ROOT,
                name,
                NcType::Int,
                &[x],
                VarOptions::default(),
            )
            .unwrap();
        }
        w.close().unwrap();
        // As zarr-python would store it, consolidated again.
        let root = tmp.path().join("d.file");
        let a_attrs = json!({"_ARRAY_DIMENSIONS": ["x"], "flag": true});
        std::fs::write(root.join("a/.zattrs"), a_attrs.to_string()).unwrap();
        if mode.contains("consolidated") {
            let path = root.join(".zmetadata");
            let mut summary: Value =
                serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
            summary["metadata"]["a/.zattrs"] = a_attrs.clone();
            std::fs::write(&path, summary.to_string()).unwrap();
        }
        let mut w = DatasetWriter::open(&loc).unwrap();
        for name in ["b", "c"] {
            let v = w.model().find_var(name).unwrap();
            w.put_attr(AttrTarget::Var(v), "note", AttrValue::Char(b"set".to_vec()))
                .unwrap();
            w.sync().unwrap();
            let stored: Value =
                serde_json::from_slice(&std::fs::read(root.join("a/.zattrs")).unwrap()).unwrap();
            assert_eq!(stored, a_attrs, "{mode}, after {name}");
            if mode.contains("consolidated") {
                let summary: Value =
                    serde_json::from_slice(&std::fs::read(root.join(".zmetadata")).unwrap())
                        .unwrap();
                assert_eq!(
                    summary["metadata"]["a/.zattrs"], a_attrs,
                    "{mode}, after {name}"
                );
                assert_eq!(
                    summary["metadata"][format!("{name}/.zattrs")]["note"],
                    json!("set"),
                    "{mode}"
                );
            }
        }
        w.close().unwrap();
    }
}

#[test]
fn a_netcdf_c_release_out_of_range_is_a_value_refused_and_no_version_a_usage_error() {
    let refusal = |version: &str| {
        let mut opts = CreateOptions::default();
        write_for_netcdf_c(&mut opts, version).unwrap_err()
    };
    // Three numbers are a version, however large; a release without a layout exits 1.
    for version in ["4.8.0", "4.7.4", "4.9.99999999999", "99999999999.0.0"] {
        assert!(matches!(refusal(version), Error::Invalid(_)), "{version}");
    }
    for version in ["x", "4.9", "4.9.x", "4..2", "4.9.2.1", "4.9.-1"] {
        assert!(matches!(refusal(version), Error::Usage(_)), "{version}");
    }
}

#[test]
fn attributes_held_under_names_netcdf_refuses_are_rewritten_but_not_made() {
    // Names zarr-python writes and netCDF does not allow: not NFC, a trailing space, a `/`,
    // a leading `-`.
    let names = ["attribu\u{308}t", "trail ", "a/b", "-dash"];
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("names.zarr");
    let map = zmap::FileMap::open(&root, true).unwrap();
    map.put(".zgroup", br#"{"zarr_format": 2}"#).unwrap();
    let held: serde_json::Map<String, Value> = names
        .iter()
        .chain(&["CLASS"])
        .map(|n| (n.to_string(), json!(1)))
        .collect();
    map.put(".zattrs", &serde_json::to_vec(&held).unwrap())
        .unwrap();
    let loc = Location::parse(format!("file://{}#mode=zarr,file", root.display())).unwrap();
    let mut w = DatasetWriter::open(&loc).unwrap();
    let global = AttrTarget::Group(Dataset::ROOT);
    for name in names {
        w.check_attr_writable(global, name).unwrap();
        w.put_attr(global, name, AttrValue::Int(vec![42])).unwrap();
    }
    // New names refused for the same reasons.
    for new in ["neu\u{308}", "new ", "c/d", "-new", "NAME"] {
        assert!(w.check_attr_writable(global, new).is_err(), "{new:?}");
        assert!(
            w.put_attr(global, new, AttrValue::Int(vec![1])).is_err(),
            "{new:?}"
        );
    }
    // A name netcdf-c reserves stays refused, held or not: it means something to netCDF.
    assert!(w
        .put_attr(global, "CLASS", AttrValue::Int(vec![42]))
        .is_err());
    w.close().unwrap();
    let stored: Value = serde_json::from_slice(&map.get(".zattrs").unwrap().unwrap()).unwrap();
    let mut want: serde_json::Map<String, Value> =
        names.iter().map(|n| (n.to_string(), json!(42))).collect();
    want.insert("CLASS".into(), json!(1));
    assert_eq!(stored, Value::Object(want));
}
