//! The zip map on real archives: both layouts (keys at the root as zarr-python's ZipStore
//! writes them, keys under one folder as netcdf-c writes them), hostile entry names, and
//! rewrites on flush. Expected listings come from `unzip -l` of the fixtures.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use nczarrfs::location::Location;
use nczarrfs::zmap::{self, FileMap, ZMap, ZipMap};
use nczarrfs::Error;
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipWriter};

fn fixture(rel: &str) -> PathBuf {
    let shared = std::env::var("NCZARRFS_SHARED")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../shared").to_string());
    PathBuf::from(shared).join("fixtures").join(rel)
}

/// Writes a zip at `path` with `(name, content, deflated)` entries; names ending in `/` are
/// directory entries.
fn make_zip(path: &Path, entries: &[(&str, &[u8], bool)]) {
    let mut w = ZipWriter::new(std::fs::File::create(path).unwrap());
    for (name, content, deflated) in entries {
        let method = if *deflated {
            CompressionMethod::Deflated
        } else {
            CompressionMethod::Stored
        };
        let opts = SimpleFileOptions::default().compression_method(method);
        if let Some(dir) = name.strip_suffix('/') {
            w.add_directory(dir, opts).unwrap();
        } else {
            w.start_file(*name, opts).unwrap();
            w.write_all(content).unwrap();
        }
    }
    w.finish().unwrap();
}

#[test]
fn netcdf_c_layout_strips_the_folder() {
    let map = ZipMap::open(&fixture("nczarr_test/ref_oldformat.zip"), false).unwrap();
    assert_eq!(map.root_folder(), Some("ref_oldformat"));
    assert_eq!(
        map.search("").unwrap(),
        vec![".zattrs", ".zgroup", "g1", "lat"]
    );
    assert_eq!(map.search("g1").unwrap(), vec![".zattrs", ".zgroup", "pos"]);
    assert_eq!(
        map.search("g1/pos").unwrap(),
        vec![".zarray", ".zattrs", "0.0"]
    );
    assert_eq!(map.get("lat/0").unwrap().unwrap().len(), 32);
    assert_eq!(map.get("g1/pos/0.0").unwrap().unwrap().len(), 320);
    let zgroup = String::from_utf8(map.get(".zgroup").unwrap().unwrap()).unwrap();
    assert!(zgroup.contains("\"zarr_format\""), "{zgroup}");
    assert_eq!(map.get("ref_oldformat/.zgroup").unwrap(), None);
    assert_eq!(map.get("g1").unwrap(), None, "a folder is not content");
    assert!(map.read_only());
    assert!(matches!(map.put("x", b""), Err(Error::NotPermitted(_))));
}

#[test]
fn ref_byte_layout() {
    // ref_byte.zarr.zip also keeps its keys under one folder ("ref_byte.zarr/").
    let map = ZipMap::open(&fixture("nczarr_test/ref_byte.zarr.zip"), false).unwrap();
    assert_eq!(map.root_folder(), Some("ref_byte.zarr"));
    assert_eq!(map.search("").unwrap(), vec![".zgroup", "byte"]);
    assert_eq!(map.search("byte").unwrap(), vec![".zarray", ".zattrs"]);
    assert_eq!(map.get("byte/.zarray").unwrap().unwrap().len(), 176);
    assert_eq!(map.get_range("byte/.zarray", 0, 1).unwrap().unwrap(), b"{");
}

#[test]
fn folder_first_with_stray_root_zgroup() {
    // netcdf-c takes the dataset folder from the first entry; this archive also has a root
    // `.zgroup` appended later, and its expected CDL has the variables at the root.
    let map = ZipMap::open(
        &fixture("nczarr_test/ref_power_901_constants_orig.zip"),
        false,
    )
    .unwrap();
    assert_eq!(map.root_folder(), Some("ref_power_901_constants"));
    assert_eq!(
        map.search("").unwrap(),
        vec![".zgroup", "FRLAKE", "FRLAND", "FRLANDICE", "FROCEAN"]
    );
}

#[test]
fn root_layout_when_an_array_was_written_before_the_root_group() {
    // zarr-python writes no directory entries and may store an array's objects before the
    // root `.zgroup` it creates implicitly: the keys are still at the root.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("array_first.zip");
    make_zip(
        &path,
        &[
            ("v/.zarray", b"{}", false),
            ("v/0", &[7u8; 10], false),
            (".zgroup", b"{\"zarr_format\": 2}", false),
        ],
    );
    let map = ZipMap::open(&path, false).unwrap();
    assert_eq!(map.root_folder(), None);
    assert_eq!(map.search("").unwrap(), vec![".zgroup", "v"]);
    assert_eq!(map.get("v/0").unwrap().unwrap(), vec![7u8; 10]);
}

#[test]
fn netcdf_c_layout_beside_other_folders() {
    // macOS's Archive Utility adds `__MACOSX/`; an archive may carry documentation. netcdf-c
    // takes the dataset's folder from the first entry whatever lies beside it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds.zip");
    make_zip(
        &path,
        &[
            ("ds/", b"", false),
            ("ds/.zgroup", b"{\"zarr_format\": 2}", false),
            ("ds/v/.zarray", b"{}", false),
            ("__MACOSX/ds/._.zgroup", b"\0\x05\x16\x07", false),
            ("docs/README.txt", b"about ds", false),
        ],
    );
    let map = ZipMap::open(&path, false).unwrap();
    assert_eq!(map.root_folder(), Some("ds"));
    assert_eq!(map.search("").unwrap(), vec![".zgroup", "v"]);
    // Beside other folders, the first entry decides: here it is not in a folder.
    let path = dir.path().join("loose.zip");
    make_zip(
        &path,
        &[
            ("notes.txt", b"x", false),
            ("ds/.zgroup", b"{\"zarr_format\": 2}", false),
            ("docs/README.txt", b"about ds", false),
        ],
    );
    assert_eq!(ZipMap::open(&path, false).unwrap().root_folder(), None);
}

#[test]
fn root_layout_kept_when_root_has_metadata() {
    let dir = tempfile::tempdir().unwrap();
    // zarr-python ZipStore: a root group whose only child is group g.
    let path = dir.path().join("root.zip");
    make_zip(
        &path,
        &[
            (".zgroup", b"{\"zarr_format\": 2}", false),
            ("g/.zgroup", b"{\"zarr_format\": 2}", true),
            ("g/v/.zarray", b"{}", true),
            ("g/v/0", &[7u8; 1000], true),
        ],
    );
    let map = ZipMap::open(&path, false).unwrap();
    assert_eq!(map.root_folder(), None);
    assert_eq!(map.search("").unwrap(), vec![".zgroup", "g"]);
    assert_eq!(
        map.get("g/v/0").unwrap().unwrap(),
        vec![7u8; 1000],
        "deflated entry"
    );
    assert_eq!(map.search("g/v").unwrap(), vec![".zarray", "0"]);
}

#[test]
fn a_truncated_central_directory_is_a_damaged_archive_not_a_bad_name() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.zip");
    make_zip(
        &good,
        &[
            ("ds/", b"", false),
            ("ds/.zgroup", b"{}", false),
            ("ds/v/0", b"123", false),
            ("ds/v/.zarray", b"{}", false),
        ],
    );
    // Drop 8 bytes just before the end-of-central-directory record (22 bytes, no comment);
    // `unzip` and Python's zipfile refuse the result.
    let bytes = std::fs::read(&good).unwrap();
    let eocd = bytes.len() - 22;
    assert_eq!(&bytes[eocd..eocd + 4], b"PK\x05\x06");
    let bad = dir.path().join("bad.zip");
    std::fs::write(&bad, [&bytes[..eocd - 8], &bytes[eocd..]].concat()).unwrap();
    match ZipMap::open(&bad, false) {
        Err(e @ Error::NotZarr { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("central directory is cut short or damaged")
                    && text.contains("bad.zip"),
                "{text}"
            );
        }
        other => panic!("expected a damaged archive, got {other:?}"),
    }
}

#[test]
fn hostile_entries_fail_the_open() {
    let dir = tempfile::tempdir().unwrap();
    for bad in ["../evil", "/abs/.zgroup", "a/../../evil", "C:/x", "a//b"] {
        let path = dir.path().join("bad.zip");
        make_zip(&path, &[(".zgroup", b"{}", false), (bad, b"x", false)]);
        match ZipMap::open(&path, false) {
            Err(Error::Storage { key, reason }) => {
                assert_eq!(key, bad, "{reason}");
            }
            other => panic!("{bad}: expected a storage error, got {other:?}"),
        }
    }
    // A netCDF name may hold a colon where a drive letter would be.
    let path = dir.path().join("colon.zip");
    make_zip(
        &path,
        &[(".zgroup", b"{}", false), ("v:depth/.zarray", b"x", false)],
    );
    let map = ZipMap::open(&path, false).unwrap();
    assert_eq!(
        map.get("v:depth/.zarray").unwrap().as_deref(),
        Some(&b"x"[..])
    );
    // And a backslash (netcdf-c writes the name `a\b` into its keys as it is).
    make_zip(
        &path,
        &[(".zgroup", b"{}", false), ("a\\b/.zarray", b"y", false)],
    );
    let map = ZipMap::open(&path, false).unwrap();
    assert_eq!(map.search("").unwrap(), vec![".zgroup", "a\\b"]);
}

#[test]
fn not_zarr_archives_and_files() {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("tar")
        .arg("xzf")
        .arg(fixture("nczarr_test/ref_notzarr.tar.gz"))
        .arg("-C")
        .arg(dir.path())
        .status()
        .unwrap();
    assert!(status.success());
    // Zips without Zarr content open, but hold no metadata object at the root.
    for name in ["empty.zip", "notzarr.zip"] {
        let map = zmap::open(&loc(&dir.path().join(name)), false).unwrap();
        assert!(!map.exists(".zgroup").unwrap(), "{name}");
        assert!(!map.exists(".zarray").unwrap(), "{name}");
    }
    let map = zmap::open(&loc(&dir.path().join("notzarr.zip")), false).unwrap();
    assert_eq!(map.search("").unwrap(), vec!["notzarr"]);
    assert_eq!(map.search("notzarr").unwrap(), vec!["notzarr.txt"]);
    // An empty directory and a directory of unrelated files.
    let map = zmap::open(&loc(&dir.path().join("empty.file")), false).unwrap();
    assert!(map.search("").unwrap().is_empty());
    let map = zmap::open(&loc(&dir.path().join("notzarr.file")), false).unwrap();
    assert_eq!(map.search("").unwrap(), vec!["notzarr.txt"]);
    // A plain text file is neither a directory nor a zip.
    let err = zmap::open(&loc(&dir.path().join("empty.txt")), false).unwrap_err();
    assert!(matches!(err, Error::NotZarr { .. }), "{err}");
    // netCDF files are named as such, by their signatures (HDF5's, and classic's `CDF` and
    // version byte, as the netCDF format specification gives them).
    for (name, head, kind) in [
        ("h5.nc", &b"\x89HDF\r\n\x1a\n\0\0"[..], "netCDF-4 (HDF5)"),
        ("classic.nc", &b"CDF\x01\0\0\0\0"[..], "classic netCDF"),
        ("cdf5.nc", &b"CDF\x05\0\0\0\0"[..], "classic netCDF"),
    ] {
        let path = dir.path().join(name);
        std::fs::write(&path, head).unwrap();
        let err = zmap::open(&loc(&path), false).unwrap_err().to_string();
        assert!(
            err.contains(kind) && err.contains("nccopy"),
            "{name}: {err}"
        );
    }
    // A missing path.
    let err = zmap::open(&loc(&dir.path().join("missing.zip")), false).unwrap_err();
    assert!(
        err.to_string().contains("No such file or directory"),
        "{err}"
    );
    let err = zmap::open(&loc(&dir.path().join("missing.file")), false).unwrap_err();
    assert!(
        err.to_string().contains("No such file or directory"),
        "{err}"
    );
}

#[test]
fn zip_and_directory_of_the_same_dataset_agree() {
    let dir = tempfile::tempdir().unwrap();
    let status = std::process::Command::new("unzip")
        .arg("-q")
        .arg(fixture("nczarr_test/ref_oldformat.zip"))
        .arg("-d")
        .arg(dir.path())
        .status();
    // scripts/test installs unzip: a missing one fails here rather than passing as a skip.
    let status = status.expect("unzip (Debian package unzip) must be installed");
    assert!(status.success());
    let tree = FileMap::open(&dir.path().join("ref_oldformat"), false).unwrap();
    let zip = ZipMap::open(&fixture("nczarr_test/ref_oldformat.zip"), false).unwrap();
    for prefix in ["", "g1", "g1/pos", "lat"] {
        assert_eq!(tree.search(prefix).unwrap(), zip.search(prefix).unwrap());
    }
    for key in [
        ".zgroup",
        "lat/.zarray",
        "lat/0",
        "g1/pos/0.0",
        "g1/pos/.zattrs",
    ] {
        assert_eq!(tree.get(key).unwrap(), zip.get(key).unwrap(), "{key}");
    }
}

#[test]
fn writes_are_flushed_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("copy.zip");
    std::fs::copy(fixture("nczarr_test/ref_oldformat.zip"), &path).unwrap();
    let before = std::fs::read(&path).unwrap();
    {
        let map = ZipMap::open(&path, true).unwrap();
        map.put("g1/pos/0.0", b"replaced").unwrap();
        map.put("g2/.zgroup", b"{\"zarr_format\": 2}").unwrap();
        map.delete("lat").unwrap();
        assert_eq!(map.get("g1/pos/0.0").unwrap().unwrap(), b"replaced");
        assert_eq!(
            map.search("").unwrap(),
            vec![".zattrs", ".zgroup", "g1", "g2"]
        );
        assert_eq!(
            std::fs::read(&path).unwrap(),
            before,
            "nothing written before flush"
        );
        map.flush().unwrap();
        assert_eq!(map.get("g1/pos/0.0").unwrap().unwrap(), b"replaced");
        assert_eq!(map.get("g1/pos/.zattrs").unwrap().unwrap().len(), 260);
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(leftovers, vec!["copy.zip"]);
    // Reopened: same layout, same content; the untouched entries were copied verbatim.
    let map = ZipMap::open(&path, false).unwrap();
    assert_eq!(map.root_folder(), Some("ref_oldformat"));
    assert_eq!(
        map.search("").unwrap(),
        vec![".zattrs", ".zgroup", "g1", "g2"]
    );
    assert_eq!(map.get("g1/pos/0.0").unwrap().unwrap(), b"replaced");
    let orig = ZipMap::open(&fixture("nczarr_test/ref_oldformat.zip"), false).unwrap();
    assert_eq!(
        map.get("g1/pos/.zarray").unwrap(),
        orig.get("g1/pos/.zarray").unwrap()
    );
    assert_eq!(map.get("lat/0").unwrap(), None);
    // Other zip readers see the folder layout too.
    let mut archive = zip::ZipArchive::new(std::fs::File::open(&path).unwrap()).unwrap();
    assert_eq!(archive.by_index(0).unwrap().name(), "ref_oldformat/");
}

/// A new archive of pure Zarr has zarr-python's layout (keys at the root); one of NCZarr,
/// which is for netcdf-c, has netcdf-c's (every key under a folder named after the archive,
/// first), the only one netcdf-c's zip map opens.
#[test]
fn new_archives_take_the_layout_of_their_readers() {
    for (url_mode, folder) in [("#mode=zarr,zip", None), ("", Some("new.ds"))] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("new.ds.zip");
        let location = Location::parse(format!("file://{}{url_mode}", path.display())).unwrap();
        let map = zmap::open(&location, true).unwrap();
        assert!(!path.exists(), "opening creates nothing");
        map.put(".zgroup", b"{\"zarr_format\": 2}").unwrap();
        map.put("v/.zarray", b"{}").unwrap();
        map.put("v/0", &[1, 2, 3]).unwrap();
        map.flush().unwrap();
        let mut archive = zip::ZipArchive::new(std::fs::File::open(&path).unwrap()).unwrap();
        let names: Vec<_> = archive.file_names().map(str::to_string).collect();
        let prefix = folder.map(|f| format!("{f}/")).unwrap_or_default();
        let mut want = vec![".zgroup", "v/.zarray", "v/0"]
            .into_iter()
            .map(|k| format!("{prefix}{k}"))
            .collect::<Vec<_>>();
        if let Some(f) = folder {
            // netcdf-c takes the dataset's folder from the first entry.
            assert_eq!(names[0], format!("{f}/"));
            want.insert(0, format!("{f}/"));
        }
        let mut sorted = names.clone();
        sorted.sort();
        want.sort();
        assert_eq!(sorted, want, "{url_mode}");
        let mut entry = archive.by_name(&format!("{prefix}v/0")).unwrap();
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut entry, &mut bytes).unwrap();
        assert_eq!(bytes, [1, 2, 3]);
        drop(entry);
        let reread = ZipMap::open(&path, false).unwrap();
        assert_eq!(reread.root_folder(), folder);
        assert_eq!(reread.search("v").unwrap(), vec![".zarray", "0"]);
    }
}

fn loc(path: &Path) -> Location {
    Location::parse(path.to_str().unwrap()).unwrap()
}

#[test]
fn entries_beside_the_dataset_folder_survive_a_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds.zip");
    make_zip(
        &path,
        &[
            ("ds/", b"", false),
            ("ds/.zgroup", b"{\"zarr_format\": 2}", false),
            ("README.txt", b"read me first", true),
            ("LICENSE", b"kept", false),
        ],
    );
    let map = ZipMap::open(&path, true).unwrap();
    map.put("v/.zattrs", b"{}").unwrap();
    map.flush().unwrap();
    drop(map);
    let mut archive = zip::ZipArchive::new(std::fs::File::open(&path).unwrap()).unwrap();
    let mut read = |name: &str| {
        let mut s = String::new();
        archive
            .by_name(name)
            .unwrap()
            .read_to_string(&mut s)
            .unwrap();
        s
    };
    assert_eq!(read("README.txt"), "read me first");
    assert_eq!(read("LICENSE"), "kept");
    assert_eq!(read("ds/v/.zattrs"), "{}");
    let names: Vec<String> = archive.file_names().map(str::to_string).collect();
    assert_eq!(archive.name_for_index(0), Some("ds/"), "{names:?}");
}

#[test]
fn partial_archives_of_killed_writers_are_removed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds.zip");
    make_zip(&path, &[(".zgroup", b"{\"zarr_format\": 2}", false)]);
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let alive = std::os::unix::process::parent_id();
    let orphan = dir.path().join(format!(".ds.zip.nczarrfs-tmp.{dead}"));
    let in_use = dir.path().join(format!(".ds.zip.nczarrfs-tmp.{alive}"));
    let other = dir.path().join(".ds.zip.nczarrfs-tmp.notapid");
    for p in [&orphan, &in_use, &other] {
        std::fs::write(p, b"partial").unwrap();
    }
    let map = ZipMap::open(&path, true).unwrap();
    map.put("v/.zattrs", b"{}").unwrap();
    map.flush().unwrap();
    assert!(
        !orphan.exists(),
        "the killed writer's partial archive is removed"
    );
    assert!(
        in_use.exists() && other.exists(),
        "a running writer's file and others stay"
    );
}

/// Rewrites the uncompressed size that the local and central headers of entry `name` declare.
fn patch_declared_size(path: &Path, name: &str, size: u32) {
    let mut bytes = std::fs::read(path).unwrap();
    let mut patched = 0;
    for at in 0..bytes.len().saturating_sub(46) {
        // (signature, offset of the size field, offset of the name length, offset of the name)
        let fields = match &bytes[at..at + 4] {
            b"PK\x03\x04" => (22, 26, 30),
            b"PK\x01\x02" => (24, 28, 46),
            _ => continue,
        };
        let (size_at, len_at, name_at) = fields;
        let len = u16::from_le_bytes([bytes[at + len_at], bytes[at + len_at + 1]]) as usize;
        if bytes.get(at + name_at..at + name_at + len) == Some(name.as_bytes()) {
            bytes[at + size_at..at + size_at + 4].copy_from_slice(&size.to_le_bytes());
            patched += 1;
        }
    }
    assert_eq!(patched, 2, "both headers of {name}");
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn entries_inflate_no_further_than_deflate_or_their_header_allows() {
    let dir = tempfile::tempdir().unwrap();
    let zeros = vec![0u8; 8 << 20];
    let path = dir.path().join("bomb.zip");
    let archive = |declared: u32| {
        make_zip(
            &path,
            &[(".zgroup", b"{}", false), ("v/0", zeros.as_slice(), true)],
        );
        patch_declared_size(&path, "v/0", declared);
        ZipMap::open(&path, false).unwrap()
    };
    let storage_reason = |result: nczarrfs::Result<Option<Vec<u8>>>| match result {
        Err(Error::Storage { key, reason }) => {
            assert_eq!(key, "v/0");
            reason
        }
        other => panic!(
            "expected a storage error, got {:?}",
            other.map(|v| v.map(|v| v.len()))
        ),
    };

    // A header that understates the size: inflating stops one byte past it.
    let map = archive(4096);
    let reason = storage_reason(map.get("v/0"));
    assert!(
        reason.contains("inflates beyond its declared 4096 bytes"),
        "{reason}"
    );
    let mut out = vec![0u8; 4096];
    match map.get_exact("v/0", &mut out) {
        Err(Error::Storage { reason, .. }) => assert!(reason.contains("beyond"), "{reason}"),
        other => panic!("expected a storage error, got {other:?}"),
    }
    // A chunk of another size is not inflated at all.
    let mut other_size = vec![0u8; 100];
    assert_eq!(map.get_exact("v/0", &mut other_size).unwrap(), Some(4096));

    // A header that claims more than deflate can make of the compressed bytes (8 MiB of
    // zeros deflate to about 8 KiB; 4 GB is far beyond 1032 times that).
    let map = archive(0xFFFF_FFF0);
    let reason = storage_reason(map.get("v/0"));
    assert!(reason.contains("more than deflate can produce"), "{reason}");

    // The honest archive still reads.
    make_zip(&path, &[(".zgroup", b"{}", false), ("v/0", &zeros, true)]);
    let map = ZipMap::open(&path, false).unwrap();
    assert_eq!(map.get("v/0").unwrap().unwrap(), zeros);
    let mut out = vec![1u8; 8 << 20];
    assert_eq!(map.get_exact("v/0", &mut out).unwrap(), Some(8 << 20));
    assert_eq!(out, zeros);
}

/// A metadata object is refused by the size its entry declares, before anything is inflated,
/// and so is a changed one not yet flushed that is too long.
#[test]
fn metadata_entries_longer_than_the_limit_are_refused_by_their_declared_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds.zip");
    let spaces = vec![b' '; 8 << 20];
    make_zip(
        &path,
        &[(".zgroup", b"{}", false), ("v/.zattrs", &spaces, true)],
    );
    let too_large = |got: nczarrfs::Result<Option<Vec<u8>>>, limit: u64| match got {
        Err(Error::MetadataTooLarge {
            key,
            size,
            limit: l,
        }) => {
            assert_eq!((key.as_str(), l), ("v/.zattrs", limit));
            size
        }
        other => panic!(
            "expected a refusal, got {:?}",
            other.map(|v| v.map(|v| v.len()))
        ),
    };
    let map = ZipMap::open(&path, true).unwrap();
    let limit = (8 << 20) - 1;
    let size = too_large(map.get_metadata("v/.zattrs", limit), limit);
    assert_eq!(size, Some(8 << 20));
    let whole = map.get_metadata("v/.zattrs", 8 << 20).unwrap();
    assert_eq!(whole.as_deref(), Some(&spaces[..]));
    assert_eq!(
        map.get_metadata(".zgroup", 2).unwrap().as_deref(),
        Some(&b"{}"[..])
    );
    assert_eq!(map.get_metadata("v/.zarray", 0).unwrap(), None);
    let keys = [".zgroup".to_string(), "v/.zattrs".to_string()];
    let mut got = map.get_many_metadata(&keys, limit).into_iter();
    assert_eq!(got.next().unwrap().unwrap().as_deref(), Some(&b"{}"[..]));
    assert_eq!(too_large(got.next().unwrap(), limit), Some(8 << 20));

    map.put("v/.zattrs", &spaces[..100]).unwrap();
    assert_eq!(too_large(map.get_metadata("v/.zattrs", 99), 99), Some(100));
    assert_eq!(
        map.get_metadata("v/.zattrs", 100).unwrap().unwrap().len(),
        100
    );
}

#[test]
fn a_fifo_is_no_archive() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("x.zip");
    let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    match ZipMap::open(&fifo, false) {
        Err(Error::NotZarr { reason, .. }) => assert!(reason.contains("not a regular file")),
        other => panic!("expected NotZarr, got {other:?}"),
    }
}

/// A writer that indexed the archive before another writer replaced it (and let go of it)
/// writes on top of the replacement: the other writer's change stays.
#[test]
fn a_writer_keeps_the_change_of_one_that_replaced_the_archive_before_its_claim() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds.zip");
    make_zip(&path, &[(".zgroup", b"{\"zarr_format\": 2}", false)]);
    let late = ZipMap::open(&path, true).unwrap();
    {
        let early = ZipMap::open(&path, true).unwrap();
        early.claim_writer().unwrap();
        early.put("first", b"from the first writer").unwrap();
        early.flush().unwrap();
    }
    late.claim_writer().unwrap();
    late.put("second", b"from the second writer").unwrap();
    late.flush().unwrap();
    drop(late);
    let map = ZipMap::open(&path, false).unwrap();
    assert_eq!(
        map.get("first").unwrap().as_deref(),
        Some(&b"from the first writer"[..])
    );
    assert_eq!(
        map.get("second").unwrap().as_deref(),
        Some(&b"from the second writer"[..])
    );
}

/// Through a symbolic link, a flush replaces the archive the link points to, as a shell's
/// `>` writes through a link; the link stays a link.
#[test]
fn a_flush_through_a_symbolic_link_rewrites_its_target() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("real")).unwrap();
    let target = dir.path().join("real/t.zip");
    make_zip(&target, &[(".zgroup", b"{\"zarr_format\": 2}", false)]);
    let link = dir.path().join("link.zip");
    std::os::unix::fs::symlink("real/t.zip", &link).unwrap();
    let map = ZipMap::open(&link, true).unwrap();
    map.claim_writer().unwrap();
    map.put("v/0", b"new").unwrap();
    map.flush().unwrap();
    drop(map);
    assert!(std::fs::symlink_metadata(&link)
        .unwrap()
        .file_type()
        .is_symlink());
    let real = ZipMap::open(&target, false).unwrap();
    assert_eq!(real.get("v/0").unwrap().as_deref(), Some(&b"new"[..]));
    let names: Vec<_> = std::fs::read_dir(dir.path().join("real"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["t.zip"], "nothing left beside the target");
}

/// A rewritten archive keeps the mode of the old one (a private archive stays private) and,
/// where this user may give files away (root), its owner and group.
#[test]
fn a_rewrite_keeps_the_archives_mode_and_owner() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds.zip");
    make_zip(&path, &[(".zgroup", b"{\"zarr_format\": 2}", false)]);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    // SAFETY: geteuid only reads the process's credentials.
    let root = unsafe { libc::geteuid() } == 0;
    let nobody = 65534;
    if root {
        std::os::unix::fs::chown(&path, Some(nobody), Some(nobody)).unwrap();
    }
    let map = ZipMap::open(&path, true).unwrap();
    map.put("v/0", b"new").unwrap();
    map.flush().unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(meta.mode() & 0o7777, 0o640);
    if root {
        assert_eq!((meta.uid(), meta.gid()), (nobody, nobody));
    }
    assert_eq!(
        ZipMap::open(&path, false).unwrap().get("v/0").unwrap(),
        Some(b"new".to_vec())
    );
}

/// A rewrite keeps the archive's comment (Info-ZIP's `zip -z`), and the entries it writes
/// carry the time they were written, not the zip format's earliest date (1980-01-01).
#[test]
fn a_rewrite_keeps_the_archive_comment_and_dates_new_entries() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds.zip");
    let mut w = ZipWriter::new(std::fs::File::create(&path).unwrap());
    w.set_comment("provenance: run 42");
    w.start_file(".zgroup", SimpleFileOptions::default())
        .unwrap();
    w.write_all(b"{\"zarr_format\": 2}").unwrap();
    w.finish().unwrap();
    let map = ZipMap::open(&path, true).unwrap();
    map.put("v/0", b"new").unwrap();
    map.flush().unwrap();
    let mut archive = zip::ZipArchive::new(std::fs::File::open(&path).unwrap()).unwrap();
    assert_eq!(archive.comment(), b"provenance: run 42");
    let written = archive.by_name("v/0").unwrap().last_modified().unwrap();
    let now_year = 1970
        + std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs()
            / 31_556_952;
    // The local time zone may put the entry a year either side of UTC's year.
    assert!(
        (now_year - 1..=now_year + 1).contains(&u64::from(written.year())),
        "written in {}",
        written.year()
    );
}

/// Sets the compression method field of both headers of entry `name`.
fn patch_method(path: &Path, name: &str, method: u16) {
    let mut bytes = std::fs::read(path).unwrap();
    let mut patched = 0;
    for at in 0..bytes.len().saturating_sub(46) {
        // (offset of the method field, offset of the name length, offset of the name)
        let (method_at, len_at, name_at) = match &bytes[at..at + 4] {
            b"PK\x03\x04" => (8, 26, 30),
            b"PK\x01\x02" => (10, 28, 46),
            _ => continue,
        };
        let len = u16::from_le_bytes([bytes[at + len_at], bytes[at + len_at + 1]]) as usize;
        if bytes.get(at + name_at..at + name_at + len) == Some(name.as_bytes()) {
            bytes[at + method_at..at + method_at + 2].copy_from_slice(&method.to_le_bytes());
            patched += 1;
        }
    }
    assert_eq!(patched, 2, "both headers of {name}");
    std::fs::write(path, bytes).unwrap();
}

/// An entry compressed with a method that is not read names the entry and the method (the
/// numbers are the zip specification's, APPNOTE 4.4.5), and says which methods are read.
#[test]
fn an_entry_of_an_unread_compression_method_is_named_with_its_method() {
    let dir = tempfile::tempdir().unwrap();
    for (method, named) in [(12, "bzip2 (method 12)"), (14, "LZMA (method 14)")] {
        let path = dir.path().join(format!("m{method}.zip"));
        make_zip(
            &path,
            &[
                ("ds/", b"", false),
                ("ds/.zgroup", b"{\"zarr_format\": 2}", false),
            ],
        );
        patch_method(&path, "ds/.zgroup", method);
        let map = ZipMap::open(&path, false).unwrap();
        let mut out = [0u8; 18];
        for e in [
            map.get(".zgroup").unwrap_err(),
            map.get_exact(".zgroup", &mut out).unwrap_err(),
        ] {
            let m = e.to_string();
            assert!(
                m.contains(&format!("\"ds/.zgroup\" is compressed with {named}")),
                "{m}"
            );
            assert!(
                m.contains("only stored (0) and deflated (8) entries are read"),
                "{m}"
            );
        }
    }
}

/// A file only its owner may write, and a link at `at` to it, as a user who may write to the
/// archive's directory would plant one for a privileged writer.
fn victim_linked_from(dir: &Path, at: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let victim = dir.join("victim");
    std::fs::write(&victim, b"not an archive").unwrap();
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&victim, at).unwrap();
    victim
}

fn assert_untouched(victim: &Path) {
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(std::fs::read(victim).unwrap(), b"not an archive");
    let mode = std::fs::metadata(victim).unwrap().permissions().mode();
    assert_eq!(mode & 0o7777, 0o600);
}

/// The temporary files of a rewrite (the new archive, and the spill file of changes held
/// beyond 32 MiB) are new files: links at the names earlier versions gave them (the
/// writer's process id after a fixed prefix) are not written through.
#[test]
fn a_rewrite_writes_through_no_link_at_its_temporary_names() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds.zip");
    make_zip(&path, &[(".zgroup", b"{\"zarr_format\": 2}", false)]);
    let pid = std::process::id();
    let victim = victim_linked_from(
        dir.path(),
        &dir.path().join(format!(".ds.zip.nczarrfs-tmp.{pid}")),
    );
    let spill = dir.path().join(format!(".ds.zip.nczarrfs-tmp.spill.{pid}"));
    std::os::unix::fs::symlink(&victim, &spill).unwrap();
    let map = ZipMap::open(&path, true).unwrap();
    map.put("v/0", &vec![7u8; 33 << 20]).unwrap();
    map.put("v/1", b"small").unwrap();
    map.flush().unwrap();
    assert_untouched(&victim);
    let reread = ZipMap::open(&path, false).unwrap();
    assert_eq!(reread.get("v/0").unwrap().map(|v| v.len()), Some(33 << 20));
    assert_eq!(reread.get("v/1").unwrap().as_deref(), Some(&b"small"[..]));
}

/// A flush replaces only the archive the map read: one put in its place since (here a link
/// to another file) is left alone, and the flush fails.
#[test]
fn a_flush_replaces_only_the_archive_it_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds.zip");
    make_zip(&path, &[(".zgroup", b"{\"zarr_format\": 2}", false)]);
    let map = ZipMap::open(&path, true).unwrap();
    map.claim_writer().unwrap();
    map.put("v/0", b"new").unwrap();
    std::fs::rename(&path, dir.path().join("moved.zip")).unwrap();
    let victim = victim_linked_from(dir.path(), &path);
    match map.flush() {
        Err(Error::Busy(m)) => assert!(m.contains("replaced by another program"), "{m}"),
        other => panic!("expected Busy, got {other:?}"),
    }
    assert_untouched(&victim);
    std::fs::remove_file(&path).unwrap();
    match map.flush() {
        Err(Error::Busy(m)) => assert!(m.contains("removed by another program"), "{m}"),
        other => panic!("expected Busy, got {other:?}"),
    }
}

/// A new archive is made at its path, through no link and over nothing: a link put there
/// before its first flush is neither followed nor replaced.
#[test]
fn a_new_archive_follows_no_link() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.zip");
    let map = ZipMap::open(&path, true).unwrap();
    map.put(".zgroup", b"{\"zarr_format\": 2}").unwrap();
    let victim = victim_linked_from(dir.path(), &path);
    match map.flush() {
        Err(Error::Busy(m)) => assert!(m.contains("another program made a file there"), "{m}"),
        other => panic!("expected Busy, got {other:?}"),
    }
    assert_untouched(&victim);
    std::fs::remove_file(&path).unwrap();
    let missing = dir.path().join("missing");
    std::os::unix::fs::symlink(&missing, &path).unwrap();
    assert!(map.flush().is_err());
    assert!(!missing.exists(), "a dangling link is not followed either");
    std::fs::remove_file(&path).unwrap();
    map.flush().unwrap();
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(names.len(), 2, "nothing left beside it: {names:?}");
    assert_eq!(
        ZipMap::open(&path, false)
            .unwrap()
            .get(".zgroup")
            .unwrap()
            .as_deref(),
        Some(&b"{\"zarr_format\": 2}"[..])
    );
}

/// Runs Info-ZIP's `zip -qr ARCHIVE NAMES…` in `dir`, in a UTF-8 locale: `zip` 3.0 stores the
/// names' bytes as the file system has them and never sets the UTF-8 flag (bit 11).
fn info_zip(dir: &Path, archive: &Path, names: &[&std::ffi::OsStr]) {
    let status = std::process::Command::new("zip")
        .current_dir(dir)
        .env("LC_ALL", "C.UTF-8")
        .arg("-qr")
        .arg(archive)
        .args(names)
        .status();
    // scripts/test installs zip: a missing one fails here rather than passing as a skip.
    let status = status.expect("zip (Debian package zip) must be installed");
    assert!(status.success());
}

/// The raw bytes of every entry name of the archive at `path`, in the archive's order.
fn raw_names(path: &Path) -> Vec<Vec<u8>> {
    let mut archive = zip::ZipArchive::new(std::fs::File::open(path).unwrap()).unwrap();
    (0..archive.len())
        .map(|i| archive.by_index_raw(i).unwrap().name_raw().to_vec())
        .collect()
}

/// Info-ZIP's `zip` stores UTF-8 names without the UTF-8 flag; they are read as UTF-8 (as
/// libzip, netcdf-c's zip library, guesses them), and a rewrite keeps their bytes.
#[test]
fn unflagged_utf8_names_are_read_as_utf8_and_kept_by_a_rewrite() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("u.file");
    std::fs::create_dir_all(ds.join("température")).unwrap();
    std::fs::write(ds.join(".zgroup"), br#"{"zarr_format": 2}"#).unwrap();
    std::fs::write(ds.join("température/.zarray"), b"{}").unwrap();
    std::fs::write(ds.join("température/0"), b"chunk").unwrap();
    let path = dir.path().join("u.zip");
    info_zip(dir.path(), &path, &["u.file".as_ref()]);
    let before = raw_names(&path);
    assert!(
        before.contains(&"u.file/température/0".as_bytes().to_vec()),
        "{before:?}"
    );

    let map = ZipMap::open(&path, true).unwrap();
    assert_eq!(map.root_folder(), Some("u.file"));
    assert_eq!(map.search("").unwrap(), vec![".zgroup", "température"]);
    assert_eq!(
        map.get("température/0").unwrap().as_deref(),
        Some(&b"chunk"[..])
    );
    map.claim_writer().unwrap();
    map.put(".zattrs", b"{}").unwrap();
    map.flush().unwrap();
    drop(map);

    // A rewrite keeps every entry, the directory entries with their names' bytes too.
    let mut kept = before;
    kept.push(b"u.file/.zattrs".to_vec());
    kept.sort();
    let mut after = raw_names(&path);
    after.sort();
    assert_eq!(after, kept, "every name kept byte for byte");
    let reread = ZipMap::open(&path, false).unwrap();
    assert_eq!(
        reread.get("température/0").unwrap().as_deref(),
        Some(&b"chunk"[..])
    );
}

/// A name that is not UTF-8 (Latin-1 bytes, as `zip` stores them from such a file system) is
/// read as code page 437, as Python's zipfile reads it; a rewrite could not keep its bytes,
/// so the archive is not opened for writing, and is left as it is.
#[test]
fn an_archive_with_a_name_beyond_utf8_is_not_rewritten() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("l.file");
    let latin = std::ffi::OsStr::from_bytes(b"temp\xe9rature");
    std::fs::create_dir_all(ds.join(latin)).unwrap();
    std::fs::write(ds.join(".zgroup"), br#"{"zarr_format": 2}"#).unwrap();
    std::fs::write(ds.join(latin).join("0"), b"chunk").unwrap();
    let path = dir.path().join("l.zip");
    info_zip(dir.path(), &path, &["l.file".as_ref()]);
    let bytes = std::fs::read(&path).unwrap();

    // 0xE9 is Θ in code page 437 (Python: b"\xe9".decode("cp437")).
    let map = ZipMap::open(&path, true).unwrap();
    assert_eq!(map.search("").unwrap(), vec![".zgroup", "tempΘrature"]);
    match map.claim_writer() {
        Err(Error::Unsupported(m)) => {
            assert!(
                m.contains(r#""l.file/tempΘrature""#) && m.contains("not UTF-8"),
                "{m}"
            )
        }
        other => panic!("expected Unsupported, got {other:?}"),
    }
    map.put(".zattrs", b"{}").unwrap();
    assert!(matches!(map.flush(), Err(Error::Unsupported(_))));
    drop(map);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the archive is untouched"
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "nothing left beside it: {names:?}");
}

/// An archive rewritten in place (same file, as `cp other.zip ds.zip` or zarr-python's
/// `ZipStore(mode="a")` leave it) holds other bytes at the offsets the map indexed: the flush
/// fails and leaves it as it is, rather than copying entries from those offsets.
#[test]
fn a_flush_refuses_an_archive_rewritten_in_place() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds.zip");
    let other = dir.path().join("other.zip");
    make_zip(
        &path,
        &[
            (".zgroup", b"{\"zarr_format\": 2}", false),
            ("v/0", b"1111", false),
        ],
    );
    make_zip(
        &other,
        &[
            (".zgroup", b"{\"zarr_format\": 2}", false),
            ("v/0", b"2222", false),
        ],
    );
    let map = ZipMap::open(&path, true).unwrap();
    map.claim_writer().unwrap();
    map.put(".zattrs", b"{}").unwrap();
    let inode = std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(&path).unwrap());
    // The same size, so only the modification time tells the new content.
    std::fs::write(&path, std::fs::read(&other).unwrap()).unwrap();
    let meta = std::fs::metadata(&path).unwrap();
    assert_eq!(std::os::unix::fs::MetadataExt::ino(&meta), inode);
    match map.flush() {
        Err(Error::Busy(m)) => assert!(m.contains("rewritten in place by another program"), "{m}"),
        other => panic!("expected Busy, got {other:?}"),
    }
    drop(map);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        std::fs::read(&other).unwrap()
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "nothing left beside it: {names:?}");
}

/// A writer's claim removes what killed writers left beside the archive, before any flush
/// (a directory store's claim does the same); a running process's file stays.
#[test]
fn a_writers_claim_removes_partial_archives_of_killed_writers() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds.zip");
    make_zip(&path, &[(".zgroup", b"{\"zarr_format\": 2}", false)]);
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let dead = child.id();
    child.wait().unwrap();
    let alive = std::os::unix::process::parent_id();
    let orphan = dir
        .path()
        .join(format!(".ds.zip.nczarrfs-tmp.{dead}.0123456789abcdef"));
    let in_use = dir
        .path()
        .join(format!(".ds.zip.nczarrfs-tmp.{alive}.0123456789abcdef"));
    for p in [&orphan, &in_use] {
        std::fs::write(p, b"partial").unwrap();
    }
    let reader = ZipMap::open(&path, false).unwrap();
    assert_eq!(reader.search("").unwrap(), vec![".zgroup"]);
    assert!(orphan.exists(), "a reader removes nothing");
    let map = ZipMap::open(&path, true).unwrap();
    map.claim_writer().unwrap();
    assert!(
        !orphan.exists(),
        "the killed writer's partial archive is removed"
    );
    assert!(in_use.exists(), "a running process's file stays");
}

/// Bytes before the archive (a self-extracting stub; `cat stub a.zip`, or that adjusted by
/// `zip -A` so that offsets count from the file's start) stay before it after a rewrite,
/// which `unzip -t` then finds whole.
#[test]
fn a_rewrite_keeps_what_precedes_the_archive() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("s.file");
    std::fs::create_dir_all(ds.join("v")).unwrap();
    std::fs::write(ds.join(".zgroup"), br#"{"zarr_format": 2}"#).unwrap();
    std::fs::write(ds.join("v/0"), b"chunk").unwrap();
    let plain = dir.path().join("plain.zip");
    info_zip(dir.path(), &plain, &["s.file".as_ref()]);
    let stub = b"#!/bin/sh\necho stub\nexit 0\n";
    for adjusted in [false, true] {
        let path = dir.path().join(format!("sfx-{adjusted}.zip"));
        std::fs::write(&path, [&stub[..], &std::fs::read(&plain).unwrap()].concat()).unwrap();
        if adjusted {
            let status = std::process::Command::new("zip")
                .args(["-qA"])
                .arg(&path)
                .status()
                .expect("zip (Debian package zip) must be installed");
            assert!(status.success());
        }
        let map = ZipMap::open(&path, true).unwrap();
        map.claim_writer().unwrap();
        map.put("v/1", b"new chunk").unwrap();
        map.flush().unwrap();
        drop(map);
        let bytes = std::fs::read(&path).unwrap();
        assert!(bytes.starts_with(stub), "adjusted: {adjusted}");
        assert_eq!(&bytes[stub.len()..stub.len() + 4], b"PK\x03\x04");
        let test = std::process::Command::new("unzip")
            .arg("-tq")
            .arg(&path)
            .output()
            .expect("unzip (Debian package unzip) must be installed");
        assert!(test.status.success(), "{test:?}");
        let reread = ZipMap::open(&path, false).unwrap();
        assert_eq!(reread.get("v/0").unwrap().as_deref(), Some(&b"chunk"[..]));
        assert_eq!(
            reread.get("v/1").unwrap().as_deref(),
            Some(&b"new chunk"[..])
        );
    }
}

/// A zip archive named with `file` storage in the fragment is told as a zip archive, with
/// how to name it, not as "neither a directory nor a zip archive".
#[test]
fn a_zip_archive_opened_as_a_directory_store_is_named_as_a_zip_archive() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ds.zip");
    make_zip(&path, &[(".zgroup", b"{\"zarr_format\": 2}", false)]);
    let url = format!("file://{}#mode=nczarr,file", path.display());
    let location = Location::parse(&url).unwrap();
    let err = zmap::open(&location, false).unwrap_err();
    assert!(matches!(err, Error::NotZarr { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("a zip archive") && text.contains("`zip`"),
        "{text}"
    );
    assert!(!text.contains("neither"), "{text}");
}

/// An archive cut inside its end-of-central-directory record (22 bytes, whose signature
/// survives) is told as truncated, not as a bare "i/o error".
#[test]
fn an_archive_cut_in_its_end_record_is_told_as_truncated() {
    let dir = tempfile::tempdir().unwrap();
    let ds = dir.path().join("t.file");
    std::fs::create_dir_all(&ds).unwrap();
    std::fs::write(ds.join(".zgroup"), br#"{"zarr_format": 2}"#).unwrap();
    let whole = dir.path().join("whole.zip");
    info_zip(dir.path(), &whole, &["t.file".as_ref()]);
    let bytes = std::fs::read(&whole).unwrap();
    // Info-ZIP writes no archive comment: the end record is the last 22 bytes.
    assert_eq!(&bytes[bytes.len() - 22..bytes.len() - 18], b"PK\x05\x06");
    let cut = dir.path().join("cut.zip");
    std::fs::write(&cut, &bytes[..bytes.len() - 10]).unwrap();
    match ZipMap::open(&cut, false) {
        Err(e @ Error::NotZarr { .. }) => {
            let text = e.to_string();
            assert!(
                text.contains("truncated") && !text.contains("i/o error"),
                "{text}"
            );
        }
        other => panic!("expected NotZarr, got {other:?}"),
    }
}

/// The entry names `unzip -Z1` lists, in the archive's order.
fn unzip_names(path: &Path) -> Vec<String> {
    let out = std::process::Command::new("unzip")
        .arg("-Z1")
        .arg(path)
        .output()
        .expect("unzip (Debian package unzip) must be installed");
    assert!(out.status.success(), "{out:?}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Info-ZIP's `zip -r` writes a `name/` entry for every directory. A rewrite keeps them, each
/// before the entries below it, an empty one included; those of a deleted key go, and so do
/// those whose every object was deleted one by one (a variable deleted object by object).
#[test]
fn a_rewrite_keeps_directory_entries_less_those_of_deleted_keys() {
    for folder in ["", "ds.file/"] {
        let dir = tempfile::tempdir().unwrap();
        let ds = dir.path().join("ds.file");
        for d in ["a", "b/sub", "c", "empty", "g/empty2"] {
            std::fs::create_dir_all(ds.join(d)).unwrap();
        }
        // A root holding only `.zgroup` behind a directory entry is netcdf-c's folder layout.
        for f in [".zgroup", ".zattrs"] {
            std::fs::write(ds.join(f), br#"{"zarr_format": 2}"#).unwrap();
        }
        for f in [
            "a/.zarray",
            "a/0",
            "b/.zarray",
            "b/sub/x",
            "c/.zarray",
            "c/0",
        ] {
            std::fs::write(ds.join(f), b"{}").unwrap();
        }
        let path = dir.path().join("ds.zip");
        match folder {
            "" => info_zip(&ds, &path, &[".".as_ref()]),
            _ => info_zip(dir.path(), &path, &["ds.file".as_ref()]),
        }
        let before = unzip_names(&path);
        for d in ["a/", "b/", "b/sub/", "c/", "empty/", "g/", "g/empty2/"] {
            assert!(before.contains(&format!("{folder}{d}")), "{before:?}");
        }

        let map = ZipMap::open(&path, true).unwrap();
        map.claim_writer().unwrap();
        map.put("a/1", b"new").unwrap();
        map.delete("b").unwrap();
        map.delete("c/.zarray").unwrap();
        map.delete("c/0").unwrap();
        map.delete("g").unwrap();
        map.flush().unwrap();
        drop(map);

        let expected: Vec<String> = [
            ".zattrs",
            ".zgroup",
            "a/",
            "a/.zarray",
            "a/0",
            "a/1",
            "empty/",
        ]
        .iter()
        .map(|n| format!("{folder}{n}"))
        .collect();
        let after = unzip_names(&path);
        match folder {
            "" => assert_eq!(after, expected),
            _ => assert_eq!(after[1..], expected[..], "{after:?}"),
        }
        let test = std::process::Command::new("unzip")
            .arg("-tq")
            .arg(&path)
            .output()
            .unwrap();
        assert!(test.status.success(), "{test:?}");
        let reread = ZipMap::open(&path, false).unwrap();
        assert_eq!(reread.get("a/1").unwrap().as_deref(), Some(&b"new"[..]));
    }
}
