//! The S3 zmap against real local servers started by `scripts/s3-servers start`: moto (no
//! authentication) at `NCZARRFS_S3_ENDPOINT` and s3s-fs (checks signatures) at
//! `NCZARRFS_S3S_ENDPOINT` with `NCZARRFS_S3S_ACCESS_KEY`/`NCZARRFS_S3S_SECRET_KEY`. Both have
//! the bucket `nczarrfs-test`. Without `NCZARRFS_S3_ENDPOINT` every test is skipped with a
//! printed reason (scripts/test sets it).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};

use nczarrfs::location::{Location, S3Location, Storage};
use nczarrfs::zmap::{S3Map, ZMap};
use nczarrfs::Error;

const BUCKET: &str = "nczarrfs-test";

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A prefix no other test (or earlier run) uses.
fn fresh_prefix(tag: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!(
        "rust-{tag}-{}-{nanos}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

fn s3_location(url: &str) -> S3Location {
    match Location::parse(url).expect("valid URL").storage {
        Storage::S3(s3) => s3,
        other => panic!("{url} parsed as {other:?}"),
    }
}

/// An environment with only `vars` (no HOME, so no shared AWS files are read).
fn env_of(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
    let map: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    move |name| map.get(name).cloned()
}

/// moto checks no signature but refuses unsigned reads of a private bucket: any keys do.
fn moto_env() -> impl Fn(&str) -> Option<String> {
    env_of(&[
        ("AWS_ACCESS_KEY_ID", "testing"),
        ("AWS_SECRET_ACCESS_KEY", "testing"),
    ])
}

macro_rules! endpoint_or_skip {
    ($name:literal) => {
        match var($name) {
            Some(e) => e,
            None => {
                // The test command sets NCZARRFS_REQUIRE_S3 after starting the servers, so a
                // missing server fails there instead of passing as a skip.
                assert!(
                    var("NCZARRFS_REQUIRE_S3").is_none(),
                    "{} is not set but NCZARRFS_REQUIRE_S3 is",
                    $name
                );
                eprintln!(
                    "skipped: {} is not set (run scripts/s3-servers start and export the \
                     output of scripts/s3-servers env)",
                    $name
                );
                return;
            }
        }
    };
}

#[test]
fn moto_put_get_search_delete_with_awkward_keys() {
    let endpoint = endpoint_or_skip!("NCZARRFS_S3_ENDPOINT");
    let prefix = fresh_prefix("moto");
    let url = format!("{endpoint}/{BUCKET}/{prefix}/data.zarr#mode=zarr,s3");
    let env = moto_env();
    let map = S3Map::open_with_env(&s3_location(&url), true, &env).unwrap();
    assert!(!map.read_only());

    let keys = [
        ".zgroup",
        "v a/.zarray",
        "v a/0.0",
        "w[1]/%41%/x#y",
        "w[1]/~z",
    ];
    for (i, key) in keys.iter().enumerate() {
        map.put(key, format!("value {i}").as_bytes()).unwrap();
    }
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(
            map.get(key).unwrap().as_deref(),
            Some(format!("value {i}").as_bytes()),
            "{key}"
        );
        assert!(map.exists(key).unwrap(), "{key}");
    }
    assert_eq!(map.get("missing").unwrap(), None);
    assert!(!map.exists("v a/missing").unwrap());
    assert_eq!(map.search("").unwrap(), [".zgroup", "v a", "w[1]"]);
    assert_eq!(map.search("v a").unwrap(), [".zarray", "0.0"]);
    assert_eq!(map.search("w[1]").unwrap(), ["%41%", "~z"]);
    assert_eq!(map.search("w[1]/%41%").unwrap(), ["x#y"]);
    assert!(map.search("nothing").unwrap().is_empty());

    // Ranges, including ones that run past the end, start past it, or are suffixes.
    map.put("r", b"0123456789").unwrap();
    assert_eq!(map.get_range("r", 2, 3).unwrap().unwrap(), b"234");
    assert_eq!(map.get_range("r", 8, 100).unwrap().unwrap(), b"89");
    assert_eq!(map.get_range("r", 10, 5).unwrap().unwrap(), b"");
    assert_eq!(map.get_range("r", 50, 5).unwrap().unwrap(), b"");
    assert_eq!(map.get_range("missing", 0, 5).unwrap(), None);
    assert_eq!(map.get_suffix("r", 4).unwrap().unwrap(), b"6789");
    assert_eq!(map.get_suffix("r", 40).unwrap().unwrap(), b"0123456789");
    assert_eq!(map.get_suffix("missing", 4).unwrap(), None);

    // A put replaces; a delete of a prefix removes everything under it but not its siblings.
    map.put("v a/0.0", b"new").unwrap();
    assert_eq!(map.get("v a/0.0").unwrap().unwrap(), b"new");
    map.put("v ab", b"sibling").unwrap();
    map.delete("v a").unwrap();
    assert_eq!(map.get("v a/.zarray").unwrap(), None);
    assert_eq!(map.get("v ab").unwrap().unwrap(), b"sibling");
    map.delete("w[1]/%41%/x#y").unwrap();
    assert_eq!(map.search("w[1]").unwrap(), ["~z"]);
    map.delete("never-there").unwrap();

    // The same objects through a read-only map.
    let ro = S3Map::open_with_env(&s3_location(&url), false, &env).unwrap();
    assert!(ro.read_only());
    assert_eq!(ro.get(".zgroup").unwrap().unwrap(), b"value 0");
    assert_eq!(
        ro.describe(),
        format!("{endpoint}/{BUCKET}/{prefix}/data.zarr")
    );
}

/// `put_many` stores every object (more than the requests it keeps in flight), awkward keys
/// included; through a read-only map it stores nothing and says why.
#[test]
fn moto_put_many_stores_every_object() {
    let endpoint = endpoint_or_skip!("NCZARRFS_S3_ENDPOINT");
    let prefix = fresh_prefix("moto-many");
    let url = format!("{endpoint}/{BUCKET}/{prefix}/data.zarr#mode=zarr,s3");
    let env = moto_env();
    let map = S3Map::open_with_env(&s3_location(&url), true, &env).unwrap();
    let objects: Vec<(String, Vec<u8>)> = (0..3 * map.concurrent_gets())
        .map(|i| (format!("v[{i}]/0 {i}"), format!("value {i}").into_bytes()))
        .collect();
    map.put_many(&objects).unwrap();
    let keys: Vec<String> = objects.iter().map(|(k, _)| k.clone()).collect();
    for ((key, value), got) in objects.iter().zip(map.get_many(&keys)) {
        assert_eq!(got.unwrap().as_ref(), Some(value), "{key}");
    }

    let ro = S3Map::open_with_env(&s3_location(&url), false, &env).unwrap();
    let err = ro
        .put_many(&[("new".to_string(), b"x".to_vec())])
        .unwrap_err();
    assert!(err.to_string().contains("read-only"), "{err}");
    assert_eq!(map.get("new").unwrap(), None);
}

/// A metadata object longer than the limit is refused by the length the server declares,
/// alone or among others fetched together; shorter ones read whole.
#[test]
fn moto_metadata_longer_than_the_limit_is_refused() {
    let endpoint = endpoint_or_skip!("NCZARRFS_S3_ENDPOINT");
    let prefix = fresh_prefix("moto-limit");
    let url = format!("{endpoint}/{BUCKET}/{prefix}/data.zarr#mode=zarr,s3");
    let map = S3Map::open_with_env(&s3_location(&url), true, &moto_env()).unwrap();
    let attrs = vec![b' '; 1000];
    map.put("v/.zattrs", &attrs).unwrap();
    map.put(".zgroup", b"{}").unwrap();
    let refused = |got: nczarrfs::Result<Option<Vec<u8>>>| match got {
        Err(Error::MetadataTooLarge { key, size, limit }) => (key, size, limit),
        other => panic!("expected a refusal, got {other:?}"),
    };
    assert_eq!(
        refused(map.get_metadata("v/.zattrs", 999)),
        ("v/.zattrs".to_string(), Some(1000), 999)
    );
    assert_eq!(map.get_metadata("v/.zattrs", 1000).unwrap(), Some(attrs));
    let keys = [".zgroup", "v/.zattrs", "v/.zarray"].map(String::from);
    let mut got = map.get_many_metadata(&keys, 999).into_iter();
    assert_eq!(got.next().unwrap().unwrap().as_deref(), Some(&b"{}"[..]));
    assert_eq!(refused(got.next().unwrap()).1, Some(1000));
    assert_eq!(got.next().unwrap().unwrap(), None);
}

/// `get_each` hands over every key exactly once, with its own object: more keys than requests
/// in flight, a missing object (`None`) and a key no request can be made for (an error).
#[test]
fn moto_get_each_delivers_every_key_once() {
    let endpoint = endpoint_or_skip!("NCZARRFS_S3_ENDPOINT");
    let prefix = fresh_prefix("moto-each");
    let url = format!("{endpoint}/{BUCKET}/{prefix}/data.zarr#mode=zarr,s3");
    let map = S3Map::open_with_env(&s3_location(&url), true, &moto_env()).unwrap();
    let objects: Vec<(String, Vec<u8>)> = (0..3 * map.concurrent_gets())
        .map(|i| (format!("v/{i}.0"), format!("value {i}").into_bytes()))
        .collect();
    map.put_many(&objects).unwrap();
    let mut keys: Vec<String> = objects.iter().map(|(k, _)| k.clone()).collect();
    keys.insert(5, "v/missing".to_string());
    keys.insert(9, "v/../escape".to_string());
    let mut got: Vec<Vec<nczarrfs::Result<Option<Vec<u8>>>>> =
        keys.iter().map(|_| Vec::new()).collect();
    map.get_each(&keys, &mut |i, result| got[i].push(result));
    for (key, results) in keys.iter().zip(got) {
        assert_eq!(results.len(), 1, "{key}: {} results", results.len());
        let result = results.into_iter().next().unwrap();
        match key.as_str() {
            "v/missing" => assert_eq!(result.unwrap(), None),
            "v/../escape" => {
                let err = result.unwrap_err().to_string();
                assert!(err.contains("'..'"), "{err}");
            }
            _ => {
                let want = &objects.iter().find(|(k, _)| k == key).unwrap().1;
                assert_eq!(result.unwrap().as_ref(), Some(want), "{key}");
            }
        }
    }
}

/// Opening makes no request; reading the metadata of an empty prefix says it is empty.
#[test]
fn read_only_open_of_an_empty_prefix_is_not_a_dataset() {
    let endpoint = endpoint_or_skip!("NCZARRFS_S3_ENDPOINT");
    let url = format!(
        "{endpoint}/{BUCKET}/{}#mode=nczarr,s3",
        fresh_prefix("empty")
    );
    let env = moto_env();
    let map = S3Map::open_with_env(&s3_location(&url), false, &env).unwrap();
    let err = nczarrfs::meta::read_dataset(&map, &Default::default()).unwrap_err();
    assert!(matches!(err, Error::NotZarr { .. }), "{err}");
    assert!(
        err.to_string().contains("no objects under this prefix"),
        "{err}"
    );
}

#[test]
fn signed_requests_with_environment_credentials() {
    let endpoint = endpoint_or_skip!("NCZARRFS_S3S_ENDPOINT");
    let (Some(key), Some(secret)) = (
        var("NCZARRFS_S3S_ACCESS_KEY"),
        var("NCZARRFS_S3S_SECRET_KEY"),
    ) else {
        panic!("NCZARRFS_S3S_ENDPOINT is set but its access key or secret key is not");
    };
    let url = format!("{endpoint}/{BUCKET}/{}#mode=zarr,s3", fresh_prefix("s3s"));
    let env = env_of(&[
        ("AWS_ACCESS_KEY_ID", &key),
        ("AWS_SECRET_ACCESS_KEY", &secret),
    ]);
    let map = S3Map::open_with_env(&s3_location(&url), true, &env).unwrap();
    map.put("g/.zattrs", b"{}").unwrap();
    map.put("g/x [0]", b"abc").unwrap();
    assert_eq!(map.get("g/x [0]").unwrap().unwrap(), b"abc");
    assert_eq!(map.search("g").unwrap(), [".zattrs", "x [0]"]);
    assert_eq!(map.get_range("g/x [0]", 1, 1).unwrap().unwrap(), b"b");
    map.delete("g").unwrap();
    assert!(map.search("").unwrap().is_empty());
}

#[test]
fn wrong_secret_is_refused_without_revealing_it() {
    let endpoint = endpoint_or_skip!("NCZARRFS_S3S_ENDPOINT");
    let key = var("NCZARRFS_S3S_ACCESS_KEY").expect("NCZARRFS_S3S_ACCESS_KEY");
    let wrong = "WrongSecretValue-do-not-print-42";
    let url = format!("{endpoint}/{BUCKET}/{}#mode=zarr,s3", fresh_prefix("bad"));
    let env = env_of(&[
        ("AWS_ACCESS_KEY_ID", &key),
        ("AWS_SECRET_ACCESS_KEY", wrong),
        ("NCZARRFS_S3_RETRIES", "0"),
    ]);
    let map = S3Map::open_with_env(&s3_location(&url), false, &env).unwrap();
    let err = map.get(".zgroup").unwrap_err();
    let text = err.to_string();
    assert!(matches!(err, Error::Storage { .. }), "{text}");
    assert!(text.contains("refused"), "{text}");
    assert!(text.contains("SignatureDoesNotMatch"), "{text}");
    assert!(!text.contains(wrong), "{text}");
    assert!(!format!("{err:?}").contains(wrong));

    // Unsigned requests to a server that wants signatures are refused too.
    let anon = S3Map::open_with_env(&s3_location(&url), true, &env_of(&[])).unwrap();
    let err = anon.put("k", b"v").unwrap_err();
    assert!(err.to_string().contains("refused"), "{err}");
}

#[test]
fn named_profile_with_endpoint_from_shared_files() {
    let endpoint = endpoint_or_skip!("NCZARRFS_S3S_ENDPOINT");
    let key = var("NCZARRFS_S3S_ACCESS_KEY").expect("NCZARRFS_S3S_ACCESS_KEY");
    let secret = var("NCZARRFS_S3S_SECRET_KEY").expect("NCZARRFS_S3S_SECRET_KEY");
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let credentials = dir.path().join("credentials");
    std::fs::write(
        &config,
        format!("[profile local]\nregion = eu-central-1\nendpoint_url = {endpoint}\n"),
    )
    .unwrap();
    std::fs::write(
        &credentials,
        format!("[local]\naws_access_key_id = {key}\naws_secret_access_key = {secret}\n"),
    )
    .unwrap();
    // Environment keys that are wrong: the URL's profile must win over them.
    let env = env_of(&[
        ("AWS_CONFIG_FILE", config.to_str().unwrap()),
        ("AWS_SHARED_CREDENTIALS_FILE", credentials.to_str().unwrap()),
        ("AWS_ACCESS_KEY_ID", "nobody"),
        ("AWS_SECRET_ACCESS_KEY", "nothing"),
    ]);
    let prefix = fresh_prefix("profile");
    let url = format!("s3://{BUCKET}/{prefix}#mode=zarr,s3&aws.profile=local");
    let map = S3Map::open_with_env(&s3_location(&url), true, &env).unwrap();
    map.put(".zgroup", b"{\"zarr_format\": 2}").unwrap();
    assert_eq!(map.describe(), format!("s3://{BUCKET}/{prefix}"));
    let ro = S3Map::open_with_env(&s3_location(&url), false, &env).unwrap();
    assert_eq!(ro.get(".zgroup").unwrap().unwrap(), b"{\"zarr_format\": 2}");
    map.delete(".zgroup").unwrap();
}
