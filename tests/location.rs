//! Location parsing: every URL form netcdf-c accepts for NCZarr, plain paths, and ncdump's
//! dataset naming rule (checked against Debian ncdump 4.9.0: `a.b.nc` → `a.b`,
//! `.hidden.nc` → `.hidden`, `file:///dir/dd.x.file#mode=nczarr,file` → `dd.x`).

use std::path::PathBuf;

use nczarrfs::location::{Format, Location, Mode, S3Location, Storage};
use nczarrfs::Error;

fn parse(text: &str) -> Location {
    Location::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn s3(text: &str) -> S3Location {
    match parse(text).storage {
        Storage::S3(s3) => s3,
        other => panic!("{text}: not S3 but {other:?}"),
    }
}

fn refused(text: &str) -> String {
    match Location::parse(text) {
        Err(e @ Error::InvalidLocation { .. }) => e.to_string(),
        other => panic!("{text}: expected InvalidLocation, got {other:?}"),
    }
}

#[test]
fn file_urls() {
    let loc = parse("file:///abs/path/data.file#mode=nczarr,file");
    assert_eq!(
        loc.storage,
        Storage::File(PathBuf::from("/abs/path/data.file"))
    );
    assert_eq!(loc.mode.format, Some(Format::NcZarr));
    assert_eq!(loc.original, "file:///abs/path/data.file#mode=nczarr,file");

    let loc = parse("file:///x.zip#mode=zarr,zip");
    assert_eq!(loc.storage, Storage::Zip(PathBuf::from("/x.zip")));
    assert_eq!(loc.mode.format, Some(Format::Zarr));

    // netcdf-c reads `file://name` as a path relative to the working directory.
    let loc = parse("file://rel/dd.x.file#mode=nczarr,file");
    assert_eq!(loc.storage, Storage::File(PathBuf::from("rel/dd.x.file")));

    let loc = parse("FILE://localhost/abs/x.file#mode=zarr,file");
    assert_eq!(loc.storage, Storage::File(PathBuf::from("/abs/x.file")));

    // Percent-decoding of the path, query ignored.
    let loc = parse("file:///a%20dir/d%2ex.file?x=1#mode=nczarr,file");
    assert_eq!(loc.storage, Storage::File(PathBuf::from("/a dir/d.x.file")));
}

#[test]
fn mode_words() {
    let loc = parse("file:///d#MODE=Zarr,NoXarray,V2,consolidated,FILE");
    assert_eq!(
        loc.mode,
        Mode {
            format: Some(Format::Zarr),
            xarray: Some(false),
            zarr_version: Some(2),
            consolidated: true,
        }
    );
    let loc = parse("file:///d#mode=nczarr,xarray,v3,file");
    assert_eq!(loc.mode.xarray, Some(true));
    assert_eq!(loc.mode.zarr_version, Some(3));
    let loc = parse("file:///d#mode=zarr&mode=file");
    assert_eq!(loc.mode.format, Some(Format::Zarr));
    assert_eq!(loc.storage, Storage::File(PathBuf::from("/d")));
    // No mode at all: everything left to probing.
    assert_eq!(parse("file:///d").mode, Mode::default());
}

#[test]
fn bad_mode_words_are_named() {
    let msg = refused("file:///d#mode=nczarr,bogus,file,dap4");
    assert!(
        msg.contains("\"bogus\"") && msg.contains("\"dap4\""),
        "{msg}"
    );
    assert!(refused("file:///d#mode=nczarr,zarr").contains("conflicting"));
    // Conflicting words are quoted as given.
    let formats = refused("file:///d#mode=NCZarr,zarr");
    assert!(formats.contains("NCZarr and zarr"), "{formats}");
    // The words given are named, not every word of their kind.
    let storage = refused("file:///d#mode=file,zip");
    assert!(
        storage.contains("file and zip") && !storage.contains("s3"),
        "{storage}"
    );
    assert!(refused("file:///d#mode=v2,v3").contains("conflicting"));
    assert!(refused("file:///d#mode=xarray,noxarray").contains("conflicting"));
    refused("file:///d#mode=nczarr,s3");
    refused("s3://bucket/key#mode=nczarr,zip");
    refused("ftp://host/x#mode=nczarr");
    refused("");
}

#[test]
fn s3_scheme() {
    let loc = parse("s3://datasetbucket/rootkey/x.zarr#mode=nczarr&awsprofile=unidata");
    assert_eq!(loc.mode.format, Some(Format::NcZarr));
    assert_eq!(
        loc.storage,
        Storage::S3(S3Location {
            endpoint: None,
            bucket: "datasetbucket".into(),
            prefix: "rootkey/x.zarr".into(),
            region: None,
            profile: Some("unidata".into()),
        })
    );
    assert_eq!(loc.dataset_name(), "x");

    let b = s3("s3://bucket#mode=zarr&aws.profile=p&aws.region=eu-west-2");
    assert_eq!(b.prefix, "");
    assert_eq!(b.profile.as_deref(), Some("p"));
    assert_eq!(b.region.as_deref(), Some("eu-west-2"));
    // Keys of the fragment are case-insensitive.
    assert_eq!(
        s3("s3://b/k#AWS.Region=us-east-2").region.as_deref(),
        Some("us-east-2")
    );

    // The spec's example: an s3 URL naming an AWS host is path style.
    let b = s3("s3://s3.us-west-1.amazonaws.com/datasetbucket");
    assert_eq!(b.bucket, "datasetbucket");
    assert_eq!(
        b.endpoint.as_deref(),
        Some("https://s3.us-west-1.amazonaws.com")
    );
    assert_eq!(b.region.as_deref(), Some("us-west-1"));
}

#[test]
fn aws_https_path_and_virtual_style() {
    let b = s3("https://s3.us-east-2.amazonaws.com/my-bucket/a/b%20c/d.zarr");
    assert_eq!(
        b.endpoint.as_deref(),
        Some("https://s3.us-east-2.amazonaws.com")
    );
    assert_eq!(b.bucket, "my-bucket");
    assert_eq!(b.prefix, "a/b c/d.zarr");
    assert_eq!(b.region.as_deref(), Some("us-east-2"));

    let b = s3("https://my.bucket.s3.us-east-2.amazonaws.com/a/d.zarr#mode=zarr");
    assert_eq!(b.bucket, "my.bucket");
    assert_eq!(b.prefix, "a/d.zarr");
    assert_eq!(b.region.as_deref(), Some("us-east-2"));
    assert_eq!(
        b.endpoint.as_deref(),
        Some("https://s3.us-east-2.amazonaws.com")
    );

    let b = s3("https://bucket.s3.amazonaws.com/key");
    assert_eq!((b.bucket.as_str(), b.region), ("bucket", None));
    let b = s3("https://s3-eu-west-1.amazonaws.com/bucket/key");
    assert_eq!(b.region.as_deref(), Some("eu-west-1"));
    let b = s3("https://bucket.s3-eu-west-1.amazonaws.com/key");
    assert_eq!(b.bucket, "bucket");
    // An explicit region wins over the host's.
    let b = s3("https://s3.us-east-2.amazonaws.com/b/k#aws.region=eu-central-1");
    assert_eq!(b.region.as_deref(), Some("eu-central-1"));
    refused("https://s3.us-east-2.amazonaws.com/");
}

#[test]
fn s3_compatible_servers() {
    let b = s3("http://localhost:9000/bucket/some/key#mode=nczarr,s3");
    assert_eq!(b.endpoint.as_deref(), Some("http://localhost:9000"));
    assert_eq!(b.bucket, "bucket");
    assert_eq!(b.prefix, "some/key");
    assert_eq!(b.region, None);
    let msg = refused("https://example.com/bucket/key#mode=nczarr");
    assert!(msg.contains("s3"), "{msg}");
    refused("https://user:secret@example.com/bucket/key#mode=nczarr,s3");
    refused("http://localhost:9000/#mode=s3");
}

#[test]
fn plain_paths_are_probed() {
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("tree.file");
    std::fs::create_dir(&tree).unwrap();
    let zip = dir.path().join("archive.anyext");
    std::fs::copy(fixture("nczarr_test/ref_byte.zarr.zip"), &zip).unwrap();
    let text_file = dir.path().join("notes.zip");
    std::fs::write(&text_file, "not a zip").unwrap();

    let s = |p: &std::path::Path| Location::parse(p.to_str().unwrap()).unwrap().storage;
    assert_eq!(s(&tree), Storage::File(tree.clone()));
    assert_eq!(
        s(&zip),
        Storage::Zip(zip.clone()),
        "zip detected by content"
    );
    assert_eq!(
        s(&text_file),
        Storage::File(text_file.clone()),
        "not a zip inside"
    );
    let missing_zip = dir.path().join("new.ZIP");
    assert_eq!(s(&missing_zip), Storage::Zip(missing_zip.clone()));
    let missing = dir.path().join("new.file");
    assert_eq!(s(&missing), Storage::File(missing.clone()));

    // A file URL is probed the same way when its mode names no storage.
    let url = format!("file://{}#mode=zarr", zip.display());
    assert_eq!(
        Location::parse(&url).unwrap().storage,
        Storage::Zip(zip.clone())
    );
    // A mode word overrides probing.
    let url = format!("file://{}#mode=zarr,file", zip.display());
    assert_eq!(Location::parse(&url).unwrap().storage, Storage::File(zip));

    // A fragment on a path that does not exist as written.
    let text = format!("{}#mode=zarr,zip", missing.display());
    let loc = Location::parse(&text).unwrap();
    assert_eq!(loc.storage, Storage::Zip(missing));
    assert_eq!(loc.mode.format, Some(Format::Zarr));
}

#[test]
fn dataset_names_follow_ncdump() {
    for (text, name) in [
        ("a.b.nc", "a.b"),
        ("dir/c.nc", "c"),
        ("noext", "noext"),
        (".hidden.nc", ".hidden"),
        (".hid", ""),
        ("x.", "x"),
        ("x.zarr.zip", "x.zarr"),
        ("file:///tmp/dd.x.file#mode=nczarr,file", "dd.x"),
        ("file:///tmp/ref_byte.zarr#mode=zarr,file", "ref_byte"),
        ("file:///tmp/ds.file/#mode=nczarr,file", "ds"),
        ("s3://b/k/x.zarr#mode=zarr", "x"),
        ("s3://bucket#mode=zarr", "bucket"),
        ("https://s3.us-east-1.amazonaws.com/b/k/ds.file", "ds"),
    ] {
        assert_eq!(parse(text).dataset_name(), name, "{text}");
    }
}

/// Linux file names are bytes: a path that is not UTF-8 is a location like any other, and
/// names its dataset with its own bytes (Debian ncdump 4.9.0 prints `netcdf d\xff {` for
/// `d\xff.nc`). A URL is text, whose `%XX` may stand for any byte of the path.
#[test]
fn paths_that_are_not_utf8() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let bytes = |b: &[u8]| OsStr::from_bytes(b).to_os_string();
    let loc = Location::parse(bytes(b"dir\xfe/d\xff.file")).unwrap();
    assert_eq!(
        loc.storage,
        Storage::File(PathBuf::from(bytes(b"dir\xfe/d\xff.file")))
    );
    assert_eq!(loc.original, bytes(b"dir\xfe/d\xff.file"));
    assert_eq!(loc.dataset_name(), bytes(b"d\xff"));
    assert_eq!(loc.shown(), "dir\u{fffd}/d\u{fffd}.file");

    // The fragment of a path that does not exist is split off as for any other.
    let loc = Location::parse(bytes(b"/nowhere/a\xff.zip#mode=zarr")).unwrap();
    assert_eq!(
        loc.storage,
        Storage::Zip(PathBuf::from(bytes(b"/nowhere/a\xff.zip")))
    );
    assert_eq!(loc.mode.format, Some(Format::Zarr));
    assert_eq!(loc.dataset_name(), bytes(b"a\xff"));
    let e = Location::parse(bytes(b"/nowhere/a.file#mode=zarr\xff")).unwrap_err();
    assert!(
        e.to_string().contains("fragment after `#` is not UTF-8"),
        "{e}"
    );

    // %XX in a file:// URL is the byte, UTF-8 or not.
    let loc = parse("file:///d%FE/x%ff.file#mode=nczarr,file");
    assert_eq!(
        loc.storage,
        Storage::File(PathBuf::from(bytes(b"/d\xfe/x\xff.file")))
    );
    assert_eq!(loc.dataset_name(), bytes(b"x\xff"));
    // A URL itself is text (netcdf-c 4.9.0 silently drops such bytes from one).
    for url in [
        &b"file:///d/x\xff.file#mode=nczarr,file"[..],
        b"s3://bucket/k\xff#mode=zarr,s3",
    ] {
        let e = Location::parse(bytes(url)).unwrap_err().to_string();
        assert!(e.contains("URL must be UTF-8 text"), "{e}");
    }
}

fn fixture(rel: &str) -> PathBuf {
    let shared = std::env::var("NCZARRFS_SHARED")
        .unwrap_or_else(|_| concat!(env!("CARGO_MANIFEST_DIR"), "/../shared").to_string());
    PathBuf::from(shared).join("fixtures").join(rel)
}

#[test]
fn s3_endpoints_and_buckets_must_be_well_formed() {
    // object_store panicked on these when signing the first request.
    for (url, complaint) in [
        ("http://[::1/b/k#mode=nczarr,s3", "is not a host[:port]"),
        ("http://h:99999/b/k#mode=nczarr,s3", "is not a host[:port]"),
        (
            "http://127.0.0.1:9/b k/x#mode=nczarr,s3",
            "is not a bucket name",
        ),
        ("s3://b%20k/x", "is not a bucket name"),
    ] {
        let e = refused(url);
        assert!(e.contains(complaint), "{url}: {e}");
    }
    let ok = s3("http://[::1]:5000/my_Bucket-1.x/k#mode=nczarr,s3");
    assert_eq!(ok.bucket, "my_Bucket-1.x");
    assert_eq!(ok.endpoint.as_deref(), Some("http://[::1]:5000"));
}
