//! An S3 bucket (AWS or an S3-compatible server) as a zmap: each key is an object under the
//! dataset's key prefix, exactly as netcdf-c's `s3` storage and zarr-python over s3fs write
//! them.
//!
//! Requests go through `object_store`'s S3 client on a small process-wide tokio runtime; the
//! [`ZMap`] methods block the calling thread (a rayon or FUSE worker) until the request is done.
//!
//! Timeouts and retries (5xx, throttling and connection errors are retried with exponential
//! backoff) can be tuned with environment variables, all in whole seconds or counts:
//!
//! | variable | default | meaning |
//! | --- | --- | --- |
//! | `NCZARRFS_S3_TIMEOUT` | 30 | limit on one request, and on the retries of one operation |
//! | `NCZARRFS_S3_CONNECT_TIMEOUT` | 5 | limit on establishing a connection |
//! | `NCZARRFS_S3_RETRIES` | 5 | retries of a failed request (0 disables them) |
//! | `NCZARRFS_S3_CONCURRENCY` | 32 | requests in flight when many objects are read or written at once |
//!
//! A failed request is retried after 100 ms, then after delays drawn at random that double
//! on average (at most 15 s apart; five retries take about 3 s), until the retries or
//! `NCZARRFS_S3_TIMEOUT` are used up: a server that went away fails a read after that long,
//! and at most a second and the connect timeout more (one check request names the cause). A server that refuses connections is asked again by the next read, however long the
//! retries of one request took: a refused connection is not a stall. A request that stalls
//! until its time runs out, with nothing answered since it was sent, has the server checked
//! with a HEAD request that must be answered within the connect timeout (requests wait for
//! it); when the check is neither answered nor refused, the server is taken as down (see
//! [`super::s3_health`]): requests fail at once, except one probe per `NCZARRFS_S3_TIMEOUT`,
//! until a probe gets an answer.
//!
//! Credentials, region and endpoint are found as described in [`super::aws_config`].

use std::future::Future;
use std::ops::Range;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use futures_util::stream::{StreamExt, TryStreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientOptions, GetOptions, GetRange, GetResult, ObjectStore, ObjectStoreExt,
    PutMode, PutOptions, PutPayload, RetryConfig,
};

use super::aws_config::{self, AwsSettings, EnvLookup};
use super::s3_health::{Admission, Admit, Health, Outcome};
use super::{validate_key, validate_prefix, Feed, ZMap};
use crate::error::quoted;
use crate::location::S3Location;
use crate::{Error, Result};

/// object_store draws each retry's delay at random between the first delay and `base` times
/// the previous one ("decorrelated jitter"). With a base of 2 the delays hardly grow (five
/// retries were over in about 1 s, which a server throttling for a second or two outlasts);
/// with 4 they double on average: 0.1, 0.2, 0.4, 0.8, 1.6 s.
const BACKOFF_BASE: f64 = 4.0;

/// Worker threads of the shared runtime: requests mostly wait on the network.
const RUNTIME_WORKERS: usize = 2;

/// Timeouts and retry limits of the S3 client.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct S3Limits {
    /// Limit on one request, and on the retries of one operation.
    pub timeout: Duration,
    /// Limit on establishing a connection.
    pub connect_timeout: Duration,
    /// How often a failed request is retried.
    pub max_retries: usize,
    /// How many GETs [`ZMap::get_many`] keeps in flight.
    pub concurrency: usize,
}

impl Default for S3Limits {
    fn default() -> Self {
        S3Limits {
            timeout: Duration::from_secs(30),
            connect_timeout: Duration::from_secs(5),
            max_retries: 5,
            concurrency: 32,
        }
    }
}

impl S3Limits {
    /// The defaults, overridden by `NCZARRFS_S3_TIMEOUT`, `NCZARRFS_S3_CONNECT_TIMEOUT` and
    /// `NCZARRFS_S3_RETRIES` and `NCZARRFS_S3_CONCURRENCY` (a value that is not a whole
    /// number is an error).
    pub fn from_env(env: EnvLookup<'_>) -> Result<S3Limits> {
        let number = |name: &str| -> Result<Option<u64>> {
            env(name)
                .map(|v| {
                    v.trim().parse::<u64>().map_err(|_| {
                        Error::Invalid(format!("{name}={} is not a whole number", quoted(&v)))
                    })
                })
                .transpose()
        };
        let mut limits = S3Limits::default();
        if let Some(secs) = number("NCZARRFS_S3_TIMEOUT")? {
            limits.timeout = Duration::from_secs(secs.max(1));
        }
        if let Some(secs) = number("NCZARRFS_S3_CONNECT_TIMEOUT")? {
            limits.connect_timeout = Duration::from_secs(secs.max(1));
        }
        if let Some(n) = number("NCZARRFS_S3_RETRIES")? {
            limits.max_retries = usize::try_from(n).unwrap_or(usize::MAX);
        }
        if let Some(n) = number("NCZARRFS_S3_CONCURRENCY")? {
            limits.concurrency = usize::try_from(n).unwrap_or(usize::MAX).max(1);
        }
        Ok(limits)
    }
}

/// A dataset stored under a key prefix of an S3 bucket.
pub struct S3Map {
    store: Arc<dyn ObjectStore>,
    /// The dataset root inside the bucket, without leading or trailing `/`.
    prefix: String,
    /// `s3://bucket/prefix` or `http(s)://host/bucket/prefix`, never credentials.
    description: String,
    /// Strings removed from every error message (the secret key and session token).
    secrets: Vec<String>,
    /// Whether requests are signed (credentials were found), for messages about refusals.
    signed: bool,
    read_only: bool,
    /// GETs in flight in [`ZMap::get_many`].
    concurrency: usize,
    /// Whether the server is taken as down after a stalled request.
    health: Arc<Health>,
    /// The same store without retries and with a short time limit, for the check of a server
    /// that may have gone silent.
    check_store: Arc<dyn ObjectStore>,
    /// Time limit of a check request.
    check_limit: Duration,
    /// Woken when a check has settled.
    checked: Arc<tokio::sync::Notify>,
    /// A request that fails without an answer after this long stalled (the connect timeout:
    /// a refused connection fails sooner, retries included).
    stall_after: Duration,
    /// The limit on one operation, its retries included (`NCZARRFS_S3_TIMEOUT`).
    operation_limit: Duration,
}

impl std::fmt::Debug for S3Map {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Map")
            .field("location", &self.description)
            .field("read_only", &self.read_only)
            .finish_non_exhaustive()
    }
}

/// The process-wide runtime that drives every S3 request.
fn runtime() -> Result<&'static tokio::runtime::Runtime> {
    static RUNTIME: OnceLock<std::result::Result<tokio::runtime::Runtime, String>> =
        OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            tokio::runtime::Builder::new_multi_thread()
                .worker_threads(RUNTIME_WORKERS)
                .thread_name("nczarrfs-s3")
                .enable_all()
                .build()
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| Error::Storage {
            key: String::new(),
            reason: format!("cannot start the S3 client runtime: {e}"),
        })
}

/// Runs `fut` to completion on the S3 runtime, blocking the calling thread.
fn block_on<F>(fut: F) -> Result<F::Output>
where
    F: Future + Send,
    F::Output: Send,
{
    let rt = runtime()?;
    if tokio::runtime::Handle::try_current().is_err() {
        return Ok(rt.block_on(fut));
    }
    // Tokio refuses to block inside a runtime thread, so a caller that is one (an async
    // embedding of the library) waits on a plain helper thread instead.
    std::thread::scope(|scope| {
        scope
            .spawn(|| rt.block_on(fut))
            .join()
            .map_err(|_| Error::Storage {
                key: String::new(),
                reason: "the S3 request thread panicked".into(),
            })
    })
}

impl S3Map {
    /// Opens the dataset at `location`, with credentials, region and endpoint from the process
    /// environment and the AWS shared files.
    ///
    /// Opening makes no request: the metadata reader's first GET is the first round trip, and
    /// an unreachable server, refused credentials or an empty prefix are reported by it, naming
    /// the location.
    pub fn open(location: &S3Location, writable: bool) -> Result<S3Map> {
        Self::open_with_env(location, writable, &aws_config::process_env)
    }

    /// Like [`S3Map::open`], with environment variables looked up through `env`.
    pub fn open_with_env(
        location: &S3Location,
        writable: bool,
        env: EnvLookup<'_>,
    ) -> Result<S3Map> {
        let settings =
            aws_config::resolve(location.profile.as_deref(), location.region.as_deref(), env)?;
        let limits = S3Limits::from_env(env)?;
        Self::with_settings(location, &settings, limits, writable)
    }

    /// Builds the map from resolved settings; makes no request.
    pub fn with_settings(
        location: &S3Location,
        settings: &AwsSettings,
        limits: S3Limits,
        writable: bool,
    ) -> Result<S3Map> {
        let prefix = location.prefix.trim_matches('/').to_string();
        validate_prefix(&prefix)?;
        // An AWS host in the URL only says which region; object_store derives the endpoint.
        let endpoint = match location.endpoint.as_deref() {
            Some(e) if !is_aws_endpoint(e) => {
                Some(aws_config::normalize_endpoint(e, "the location")?)
            }
            _ => settings.endpoint_url.clone(),
        };
        let description = match &location.endpoint {
            Some(endpoint) => format!(
                "{}/{}",
                endpoint.trim_end_matches('/'),
                super::join_key(&[&location.bucket, &prefix])
            ),
            None => format!("s3://{}", super::join_key(&[&location.bucket, &prefix])),
        };

        let mut client = ClientOptions::new()
            .with_timeout(limits.timeout)
            .with_connect_timeout(limits.connect_timeout);
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&location.bucket)
            .with_region(&settings.region)
            .with_retry(RetryConfig {
                backoff: BackoffConfig {
                    init_backoff: Duration::from_millis(100),
                    max_backoff: Duration::from_secs(15),
                    base: BACKOFF_BASE,
                },
                max_retries: limits.max_retries,
                retry_timeout: limits.timeout,
            });
        if let Some(endpoint) = &endpoint {
            // S3-compatible servers are addressed path-style (`host/bucket/key`).
            client = client.with_allow_http(endpoint.starts_with("http://"));
            builder = builder
                .with_endpoint(endpoint)
                .with_virtual_hosted_style_request(false);
        }
        let mut secrets = Vec::new();
        match &settings.credentials {
            Some(c) => {
                builder = builder
                    .with_access_key_id(&c.access_key_id)
                    .with_secret_access_key(&c.secret_access_key);
                if let Some(token) = &c.session_token {
                    builder = builder.with_token(token);
                }
                secrets = c.secrets().into_iter().map(str::to_string).collect();
            }
            // Without credentials object_store would ask the EC2 metadata service; public
            // buckets are read with unsigned requests instead.
            None => builder = builder.with_skip_signature(true),
        }
        let invalid = |e: object_store::Error| Error::InvalidLocation {
            location: description.clone(),
            reason: redact(&e.to_string(), &secrets),
        };
        let check_limit = limits.connect_timeout.min(limits.timeout);
        let check_store = builder
            .clone()
            .with_retry(RetryConfig {
                max_retries: 0,
                ..RetryConfig::default()
            })
            .with_client_options(
                client
                    .clone()
                    .with_timeout(check_limit)
                    .with_connect_timeout(check_limit),
            )
            .build()
            .map_err(invalid)?;
        let store = builder
            .with_client_options(client)
            .build()
            .map_err(invalid)?;
        log::debug!(
            "S3 map {description}: region {}, credentials from {}",
            settings.region,
            settings.source
        );
        Ok(S3Map {
            store: Arc::new(store),
            prefix,
            description,
            secrets,
            signed: settings.credentials.is_some(),
            read_only: !writable,
            concurrency: limits.concurrency.max(1),
            health: Arc::new(Health::new(limits.timeout)),
            check_store: Arc::new(check_store),
            check_limit,
            checked: Arc::new(tokio::sync::Notify::new()),
            stall_after: limits.connect_timeout,
            operation_limit: limits.timeout,
        })
    }

    /// The object path of `key`, taken verbatim (no percent-encoding of `[`, `%`, `#`, ...),
    /// so that keys written by other S3 clients are the keys read here.
    fn path_of(&self, key: &str) -> Result<Path> {
        validate_key(key)?;
        Path::parse(super::join_key(&[&self.prefix, key])).map_err(|e| Error::Storage {
            key: key.to_string(),
            reason: format!("not a valid S3 object key: {e}"),
        })
    }

    /// The listing prefix of `prefix` (`None` for the bucket root).
    fn path_of_prefix(&self, prefix: &str) -> Result<Option<Path>> {
        validate_prefix(prefix)?;
        let full = super::join_key(&[&self.prefix, prefix]);
        if full.is_empty() {
            return Ok(None);
        }
        Path::parse(&full).map(Some).map_err(|e| Error::Storage {
            key: prefix.to_string(),
            reason: format!("not a valid S3 object key: {e}"),
        })
    }

    /// The key of a listed object path: the path under the dataset's key prefix.
    fn key_of(&self, location: &Path) -> Option<String> {
        let location = location.as_ref();
        if self.prefix.is_empty() {
            return Some(location.to_string());
        }
        let key = location
            .strip_prefix(self.prefix.as_str())?
            .strip_prefix('/')?;
        Some(key.to_string())
    }

    /// [`ZMap::keys_under`], or with `strict` [`ZMap::keys_to_move`]'s listing: an object
    /// whose key has an empty, `.` or `..` segment (`g/a//x`, which S3 allows) fails either
    /// listing, as a storage error or, with `strict`, refused by name.
    fn list_keys(&self, prefix: &str, strict: bool) -> Result<Vec<String>> {
        let path = self.path_of_prefix(prefix)?;
        let listing = self
            .store
            .list(path.as_ref())
            .map_ok(|meta| (meta.location, meta.size))
            .try_collect::<Vec<(Path, u64)>>();
        let listed = block_on(self.request(prefix, listing))??.map_err(|e| match e {
            object_store::Error::InvalidPath { source } if strict => Error::NotPermitted(format!(
                "{}: an object under {prefix:?} has a key no dataset key names, which \
                     would be left behind: {source}",
                self.description
            )),
            e => self.error(prefix, &e),
        })?;
        // As the default walk does, for the same reason (s3s-fs).
        let is_object = |key: &str| {
            self.exists(key)
                .unwrap_or_else(|e| super::absent(self, key, &e))
        };
        let mut keys = Vec::with_capacity(listed.len());
        for (location, size) in &listed {
            let Some(key) = self.key_of(location) else {
                continue;
            };
            // A "folder" (an empty object named `g/`, which consoles and s3fs-fuse make) is
            // listed without its `/`, as if it were an object `g`: only an empty object that
            // is there by its name is one.
            if *size == 0 && !is_object(&key) {
                continue;
            }
            keys.push(key);
        }
        if keys.is_empty() && !prefix.is_empty() && is_object(prefix) {
            keys.push(prefix.to_string());
        }
        keys.sort();
        Ok(keys)
    }

    fn check_writable(&self, key: &str) -> Result<()> {
        if self.read_only {
            return Err(Error::NotPermitted(format!(
                "cannot modify {key:?}: {} is open read-only",
                self.description
            )));
        }
        Ok(())
    }

    /// Maps an object_store error on `key` to [`Error::Storage`] with a message that says
    /// what the server meant and contains no secret.
    fn error(&self, key: &str, err: &object_store::Error) -> Error {
        Error::Storage {
            key: key.to_string(),
            reason: format!(
                "{}: {}",
                self.description,
                redact(&describe_error(err, self.signed), &self.secrets)
            ),
        }
    }

    /// Sends one request (with its retries) unless the server is taken as down, which fails
    /// at once with an error on `key`; records how the request ended. While the server is
    /// being checked (see [`super::s3_health`]) the request waits for the verdict.
    async fn request<T>(
        &self,
        key: &str,
        request: impl Future<Output = object_store::Result<T>>,
    ) -> Result<object_store::Result<T>> {
        let admission = loop {
            // Registered before the state is read, so that a verdict in between is not missed.
            let mut checked = std::pin::pin!(self.checked.notified());
            checked.as_mut().enable();
            match self.health.admit(Instant::now()) {
                Admit::Go(admission) => break admission,
                Admit::Refuse(silent) => {
                    return Err(Error::Storage {
                        key: key.to_string(),
                        reason: format!(
                            "{}: the server is taken as down, no request answered for {} s (one \
                             ran out of time, and a check got no answer within {} s either); \
                             requests fail at once until a probe, sent at most every {} s, is \
                             answered",
                            self.description,
                            silent.as_secs(),
                            self.check_limit.as_secs(),
                            self.health.probe_interval().as_secs()
                        ),
                    })
                }
                // The check ends within its limit. One that has not settled long after (its
                // task gone) got no answer; requests must not wait for it forever.
                Admit::Wait => {
                    if tokio::time::timeout(self.check_limit * 2, checked)
                        .await
                        .is_err()
                    {
                        self.health.settle(Outcome::Stalled, Instant::now());
                        self.checked.notify_waiters();
                    }
                }
            }
        };
        let started = Instant::now();
        // object_store stops retrying once its retry timeout has passed, but the backoff it
        // sleeps before a retry, and the retry itself, may run past it: the operation as a
        // whole is held to the documented limit here. A second later, so that a request that
        // stalls from the start is ended by its own timeout, and told a stall, as before.
        let deadline = self.operation_limit + Duration::from_secs(1);
        let Ok(result) = tokio::time::timeout(deadline, request).await else {
            return Err(self.ran_out_of_retries(key, admission).await);
        };
        let outcome = match &result {
            Ok(_) => Outcome::Answered,
            Err(e) => outcome_of(e, started.elapsed() >= self.stall_after),
        };
        if self.health.record(admission, outcome, Instant::now()) {
            self.check_server();
        }
        Ok(result)
    }

    /// The error of an operation on `key` whose retries were cut at `NCZARRFS_S3_TIMEOUT`,
    /// while a request stalled or between retries of requests that failed. One check
    /// request, without retries and limited to the connect timeout, says which: its answer
    /// (a refused connection, an error status) is named in the error and recorded as the
    /// request's outcome, and no answer counts as a stall.
    async fn ran_out_of_retries(&self, key: &str, admission: Admission<'_>) -> Error {
        let path = Path::from(self.prefix.as_str());
        let answer = tokio::time::timeout(self.check_limit, self.check_store.head(&path)).await;
        let (outcome, now) = match &answer {
            Ok(Ok(_)) => (
                Outcome::Answered,
                "the server answers a check now".to_string(),
            ),
            Ok(Err(e)) => (
                outcome_of(e, false),
                redact(&describe_error(e, self.signed), &self.secrets),
            ),
            Err(_) => (
                Outcome::Stalled,
                format!("nor a check within {} s", self.check_limit.as_secs().max(1)),
            ),
        };
        if self.health.record(admission, outcome, Instant::now()) {
            self.check_server();
        }
        Error::Storage {
            key: key.to_string(),
            reason: format!(
                "{}: not done within {} s, retries included (NCZARRFS_S3_TIMEOUT); {now}",
                self.description,
                self.operation_limit.as_secs()
            ),
        }
    }

    /// Sends the check request [`Health::record`] asked for, in the background: a HEAD of the
    /// dataset's prefix (any answer will do, a 404 included), without retries, limited to the
    /// connect timeout. Its verdict wakes the requests that wait for it.
    fn check_server(&self) {
        let health = Arc::clone(&self.health);
        let store = Arc::clone(&self.check_store);
        let checked = Arc::clone(&self.checked);
        let limit = self.check_limit;
        let path = Path::from(self.prefix.as_str());
        tokio::spawn(async move {
            let answer = tokio::time::timeout(limit, store.head(&path)).await;
            let verdict = match &answer {
                Ok(Ok(_)) => Outcome::Answered,
                Ok(Err(e)) => outcome_of(e, false),
                Err(_) => Outcome::Stalled,
            };
            health.settle(verdict, Instant::now());
            checked.notify_waiters();
        });
    }

    /// Stores `value` at `key` only if no object is there (a PUT with `If-None-Match: *`,
    /// which the server decides atomically); `Ok(false)` if one is. AWS S3, MinIO, moto and
    /// s3s-fs honour the condition; a server that ignores it stores the object anyway.
    pub fn put_new(&self, key: &str, value: &[u8]) -> Result<bool> {
        self.check_writable(key)?;
        let path = self.path_of(key)?;
        let payload = PutPayload::from(value.to_vec());
        let options = PutOptions {
            mode: PutMode::Create,
            ..PutOptions::default()
        };
        match block_on(self.request(key, self.store.put_opts(&path, payload, options)))?? {
            Ok(_) => Ok(true),
            Err(object_store::Error::AlreadyExists { .. }) => Ok(false),
            Err(e) => Err(self.error(key, &e)),
        }
    }

    /// A whole-object GET; `Ok(None)` if the object does not exist. An object longer than
    /// `limit` bytes is refused ([`Error::MetadataTooLarge`]) by the length the response
    /// declares, before its body is read, or once the body has run past it.
    async fn fetch(&self, key: &str, path: &Path, limit: u64) -> Result<Option<Vec<u8>>> {
        let result = async {
            let got = self.store.get(path).await?;
            if got.meta.size > limit {
                // Dropping the response abandons its body unread.
                return Ok(Err(Some(got.meta.size)));
            }
            body_vec_up_to(got, limit).await
        };
        match self.request(key, result).await? {
            Ok(Ok(bytes)) => Ok(Some(bytes)),
            Ok(Err(size)) => Err(super::metadata_too_large(key, size, limit)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.error(key, &e)),
        }
    }

    /// Whole-object GETs of `keys`, up to [`S3Limits::concurrency`] at a time, each refused
    /// when longer than `limit` bytes (see [`S3Map::fetch`]).
    fn fetch_many(&self, keys: &[String], limit: u64) -> Vec<Result<Option<Vec<u8>>>> {
        let requests = keys.iter().map(|key| async move {
            let path = self.path_of(key)?;
            self.fetch(key, &path, limit).await
        });
        let all = futures_util::stream::iter(requests)
            .buffered(self.concurrency)
            .collect::<Vec<_>>();
        match block_on(all) {
            Ok(results) => results,
            Err(e) => {
                let reason = e.to_string();
                keys.iter()
                    .map(|key| {
                        Err(Error::Storage {
                            key: key.clone(),
                            reason: reason.clone(),
                        })
                    })
                    .collect()
            }
        }
    }

    /// A ranged GET of the object at `key`.
    async fn fetch_range(
        &self,
        key: &str,
        path: &Path,
        range: Range<u64>,
    ) -> Result<object_store::Result<Vec<u8>>> {
        let options = GetOptions::default().with_range(Some(GetRange::Bounded(range)));
        let fetch = async {
            let result = self.store.get_opts(path, options).await?;
            body_vec(result).await
        };
        self.request(key, fetch).await
    }
}

/// The body of a GET as one vector sized from the response: one copy out of the HTTP client's
/// buffers (collecting into `Bytes` and then copying into a `Vec` made two).
async fn body_vec(result: GetResult) -> object_store::Result<Vec<u8>> {
    let len = result.range.end.saturating_sub(result.range.start);
    let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    let mut body = result.into_stream();
    while let Some(part) = body.next().await {
        out.extend_from_slice(&part?);
    }
    Ok(out)
}

/// [`body_vec`] of a body that may have at most `limit` bytes: `Ok(Err(None))` as soon as
/// more have arrived (a server whose body outruns the length it declared).
async fn body_vec_up_to(
    result: GetResult,
    limit: u64,
) -> object_store::Result<std::result::Result<Vec<u8>, Option<u64>>> {
    let len = result
        .range
        .end
        .saturating_sub(result.range.start)
        .min(limit);
    let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    let mut body = result.into_stream();
    while let Some(part) = body.next().await {
        let part = part?;
        if (out.len() as u64).saturating_add(part.len() as u64) > limit {
            return Ok(Err(None));
        }
        out.extend_from_slice(&part);
    }
    Ok(Ok(out))
}

/// The HTTP client's own error behind `err`, if it is one: no connection, or no response in
/// time.
fn http_error(err: &object_store::Error) -> Option<&object_store::client::HttpError> {
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        if let Some(http) = cause.downcast_ref::<object_store::client::HttpError>() {
            return Some(http);
        }
        source = cause.source();
    }
    None
}

/// Whether a failed request got an answer from the server: any error but the HTTP client's
/// own carries one.
fn answered(err: &object_store::Error) -> bool {
    http_error(err).is_none()
}

/// Whether a failed request ran out of time waiting for the server.
fn timed_out(err: &object_store::Error) -> bool {
    http_error(err).is_some_and(|h| h.kind() == object_store::client::HttpErrorKind::Timeout)
}

/// Whether a failed request found no server to connect to (connection refused, no route):
/// an answer of sorts, at once, which a timeout is not.
fn refused(err: &object_store::Error) -> bool {
    http_error(err).is_some_and(|h| h.kind() == object_store::client::HttpErrorKind::Connect)
}

/// How a request that failed with `err` ended for the server's health; `slow` says whether
/// it failed only after the time a connection takes at most. A refused connection is never a
/// stall, however long the retries of the request took: the server, or its host, said no at
/// once each time, and asking again costs as little.
fn outcome_of(err: &object_store::Error, slow: bool) -> Outcome {
    if answered(err) {
        Outcome::Answered
    } else if refused(err) {
        Outcome::Unreachable
    } else if timed_out(err) || slow {
        Outcome::Stalled
    } else {
        Outcome::Unreachable
    }
}

/// Whether `endpoint` is an AWS S3 endpoint (whose region object_store works out itself).
fn is_aws_endpoint(endpoint: &str) -> bool {
    let host = endpoint
        .split_once("://")
        .map_or(endpoint, |(_, rest)| rest)
        .split(['/', ':'])
        .next()
        .unwrap_or("");
    host.ends_with(".amazonaws.com")
}

/// Replaces every occurrence of a secret in `text` that stands alone: one inside a longer run
/// of letters and digits is a coincidence, not the secret (a short test secret such as `s`
/// must not eat letters out of words).
fn redact(text: &str, secrets: &[String]) -> String {
    secrets
        .iter()
        .filter(|s| !s.is_empty())
        .fold(text.to_string(), |t, s| redact_one(&t, s))
}

fn redact_one(text: &str, secret: &str) -> String {
    let alnum = |c: Option<char>| c.is_some_and(char::is_alphanumeric);
    let mut out = String::with_capacity(text.len());
    let mut from = 0;
    for (pos, _) in text.match_indices(secret) {
        let end = pos + secret.len();
        if alnum(text[..pos].chars().next_back()) || alnum(text[end..].chars().next()) {
            continue;
        }
        out.push_str(&text[from..pos]);
        out.push_str("<redacted>");
        from = end;
    }
    out.push_str(&text[from..]);
    out
}

/// The text between `<tag>` and `</tag>` in an S3 XML error body.
fn xml_field<'a>(text: &'a str, tag: &str) -> Option<&'a str> {
    let start = text.find(&format!("<{tag}>"))? + tag.len() + 2;
    let len = text[start..].find(&format!("</{tag}>"))?;
    Some(&text[start..start + len])
}

/// What an object_store error means, led by the S3 error code when the server sent one;
/// `signed` says whether the request carried credentials.
fn describe_error(err: &object_store::Error, signed: bool) -> String {
    let mut text = err.to_string();
    // Transport errors keep the useful part ("Connection refused") deep in the source chain.
    let mut source = std::error::Error::source(err);
    while let Some(cause) = source {
        let line = cause.to_string();
        if !text.contains(&line) {
            text = format!("{text}: {line}");
        }
        source = cause.source();
    }
    let code = xml_field(&text, "Code");
    // "... status code: 403 Forbidden: <body>"
    let status = text
        .split_once("status code: ")
        .map(|(_, rest)| rest.split_once(": ").map_or(rest, |(status, _)| status));
    let detail = match (code, xml_field(&text, "Message"), status) {
        (Some(code), Some(message), Some(status)) => format!("{code}: {message} (HTTP {status})"),
        (Some(code), Some(message), None) => format!("{code}: {message}"),
        (Some(code), None, Some(status)) => format!("{code} (HTTP {status})"),
        (Some(code), None, None) => code.to_string(),
        (None, _, _) => text.clone(),
    };
    let refused = matches!(
        err,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    ) || matches!(
        code,
        Some("SignatureDoesNotMatch" | "InvalidAccessKeyId" | "AccessDenied" | "InvalidToken")
    );
    if refused && !signed {
        format!(
            "the server refused an unsigned request: no credentials were found (set \
             AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or name a profile with AWS_PROFILE or \
             #aws.profile=): {detail}"
        )
    } else if refused {
        format!(
            "the server refused the request's credentials or signature (check the access key, \
             secret key and profile): {detail}"
        )
    } else {
        detail
    }
}

/// A [`Feed`] of keys all known at once: [`ZMap::get_each`] through [`ZMap::get_fed`].
struct AllAtOnce<'a> {
    /// The keys, until they are named.
    keys: Option<&'a [String]>,
    each: &'a mut dyn FnMut(usize, Result<Option<Vec<u8>>>),
}

impl Feed for AllAtOnce<'_> {
    fn next_keys(&mut self, _in_flight: usize) -> Vec<String> {
        self.keys.take().map(<[String]>::to_vec).unwrap_or_default()
    }

    fn arrived(&mut self, index: usize, object: Result<Option<Vec<u8>>>) {
        (self.each)(index, object);
    }
}

impl ZMap for S3Map {
    fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        let path = self.path_of(key)?;
        block_on(self.fetch(key, &path, u64::MAX))?
    }

    fn get_metadata(&self, key: &str, limit: u64) -> Result<Option<Vec<u8>>> {
        let path = self.path_of(key)?;
        block_on(self.fetch(key, &path, limit))?
    }

    fn get_many(&self, keys: &[String]) -> Vec<Result<Option<Vec<u8>>>> {
        self.fetch_many(keys, u64::MAX)
    }

    fn get_many_metadata(&self, keys: &[String], limit: u64) -> Vec<Result<Option<Vec<u8>>>> {
        self.fetch_many(keys, limit)
    }

    fn get_each(&self, keys: &[String], each: &mut dyn FnMut(usize, Result<Option<Vec<u8>>>)) {
        if let [key] = keys {
            return each(0, self.get(key));
        }
        self.get_fed(&mut AllAtOnce {
            keys: Some(keys),
            each,
        });
    }

    fn get_fed(&self, feed: &mut dyn Feed) {
        // The requests run on a helper thread, which takes their keys from a channel as the
        // feed names them, and their objects come back through another, so that the feed
        // (a decode, which may hold locks) runs on the caller's thread while the next objects
        // arrive. The second channel's bound holds the fetching back when the feed is slower
        // than the network.
        let (name, names) = tokio::sync::mpsc::unbounded_channel::<(usize, String)>();
        let (sender, arrived) = std::sync::mpsc::sync_channel(self.concurrency);
        let mut named: Vec<(String, bool)> = Vec::new();
        let failure = std::thread::scope(|scope| {
            let fetcher = scope.spawn(move || {
                let requests = futures_util::stream::unfold(names, |mut names| async move {
                    let next = names.recv().await?;
                    Some((next, names))
                })
                .map(|(i, key)| async move {
                    let got = match self.path_of(&key) {
                        Ok(path) => self.fetch(&key, &path, u64::MAX).await,
                        Err(e) => Err(e),
                    };
                    (i, got)
                });
                block_on(async move {
                    let mut results = std::pin::pin!(requests.buffer_unordered(self.concurrency));
                    while let Some(result) = results.next().await {
                        if sender.send(result).is_err() {
                            break;
                        }
                    }
                })
            });
            let mut in_flight = 0;
            loop {
                for key in feed.next_keys(in_flight) {
                    // A send fails only once the fetcher has stopped: the key is then
                    // answered with its failure below.
                    let _ = name.send((named.len(), key.clone()));
                    named.push((key, false));
                    in_flight += 1;
                }
                if in_flight == 0 {
                    break;
                }
                let Ok((i, got)) = arrived.recv() else {
                    break;
                };
                in_flight -= 1;
                named[i].1 = true;
                feed.arrived(i, got);
            }
            drop(name);
            match fetcher.join() {
                Ok(Ok(())) => None,
                Ok(Err(e)) => Some(e.to_string()),
                Err(_) => Some("the S3 request thread panicked".to_string()),
            }
        });
        let reason = failure.unwrap_or_else(|| "the request was abandoned".to_string());
        for (i, (key, _)) in named.into_iter().enumerate().filter(|(_, (_, got))| !got) {
            feed.arrived(
                i,
                Err(Error::Storage {
                    key,
                    reason: reason.clone(),
                }),
            );
        }
    }

    fn concurrent_gets(&self) -> usize {
        self.concurrency
    }

    /// Hands `f` the object as it arrived, in a buffer of its own, and frees it after: the
    /// body is never read into `scratch`, so keeping it there as the next scratch buffer
    /// would only hold a chunk's memory on every thread that once read one.
    fn read_with(
        &self,
        key: &str,
        _scratch: &mut Vec<u8>,
        f: &mut dyn FnMut(&[u8]) -> Result<()>,
    ) -> Result<bool> {
        match self.get(key)? {
            Some(object) => f(&object).map(|()| true),
            None => Ok(false),
        }
    }

    fn get_range(&self, key: &str, offset: u64, len: u64) -> Result<Option<Vec<u8>>> {
        let path = self.path_of(key)?;
        if len == 0 {
            return Ok(self.exists(key)?.then(Vec::new));
        }
        let range = offset..offset.saturating_add(len);
        match block_on(self.fetch_range(key, &path, range))?? {
            Ok(bytes) => Ok(Some(bytes)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => {
                // A range that starts at or past the end is refused by S3 (416); the trait
                // truncates it to nothing instead.
                match block_on(self.request(key, self.store.head(&path)))? {
                    Ok(Ok(meta)) if offset >= meta.size => Ok(Some(Vec::new())),
                    Ok(Err(object_store::Error::NotFound { .. })) => Ok(None),
                    _ => Err(self.error(key, &e)),
                }
            }
        }
    }

    fn get_suffix(&self, key: &str, len: u64) -> Result<Option<Vec<u8>>> {
        let path = self.path_of(key)?;
        if len == 0 {
            return Ok(self.exists(key)?.then(Vec::new));
        }
        let fetch = async {
            let options = GetOptions::default().with_range(Some(GetRange::Suffix(len)));
            let result = self.store.get_opts(&path, options).await?;
            body_vec(result).await
        };
        match block_on(self.request(key, fetch))?? {
            Ok(bytes) => Ok(Some(bytes)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => {
                // An empty object has no suffix range to satisfy (416).
                match block_on(self.request(key, self.store.head(&path)))? {
                    Ok(Ok(meta)) if meta.size == 0 => Ok(Some(Vec::new())),
                    Ok(Err(object_store::Error::NotFound { .. })) => Ok(None),
                    _ => Err(self.error(key, &e)),
                }
            }
        }
    }

    fn exists(&self, key: &str) -> Result<bool> {
        let path = self.path_of(key)?;
        match block_on(self.request(key, self.store.head(&path)))?? {
            Ok(_) => Ok(true),
            Err(object_store::Error::NotFound { .. }) => Ok(false),
            Err(e) => Err(self.error(key, &e)),
        }
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.check_writable(key)?;
        let path = self.path_of(key)?;
        let payload = PutPayload::from(value.to_vec());
        block_on(self.request(key, self.store.put(&path, payload)))??
            .map(|_| ())
            .map_err(|e| self.error(key, &e))
    }

    fn put_many(&self, objects: &[(String, Vec<u8>)]) -> Result<()> {
        let requests = objects.iter().map(|(key, value)| async move {
            self.check_writable(key)?;
            let path = self.path_of(key)?;
            let payload = PutPayload::from(value.clone());
            self.request(key, self.store.put(&path, payload))
                .await?
                .map(|_| ())
                .map_err(|e| self.error(key, &e))
        });
        let all = futures_util::stream::iter(requests)
            .buffer_unordered(self.concurrency)
            .collect::<Vec<Result<()>>>();
        block_on(all)?.into_iter().collect()
    }

    fn delete(&self, key: &str) -> Result<()> {
        self.check_writable(key)?;
        let path = self.path_of(key)?;
        let deletion = async {
            // `list` matches whole segments: `key/...`, never `key2`.
            let under: Vec<Path> = self
                .store
                .list(Some(&path))
                .map_ok(|meta| meta.location)
                .try_collect()
                .await?;
            if under.is_empty() {
                return match self.store.delete(&path).await {
                    Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                    Err(e) => Err(e),
                };
            }
            // A prefix of other keys is no object itself (see the trait), and some servers
            // (s3s-fs) fail on a request for such a key, so only what is under it is deleted.
            let locations = futures_util::stream::iter(under.into_iter().map(Ok)).boxed();
            self.store
                .delete_stream(locations)
                .try_for_each(|_| async { Ok(()) })
                .await
        };
        block_on(self.request(key, deletion))??.map_err(|e| self.error(key, &e))
    }

    fn keys_under(&self, prefix: &str) -> Result<Vec<String>> {
        self.list_keys(prefix, false)
    }

    fn keys_to_move(&self, prefix: &str) -> Result<Vec<String>> {
        self.list_keys(prefix, true)
    }

    fn copy_many(&self, pairs: &[(String, String)]) -> Result<()> {
        let copies = pairs.iter().map(|(from, to)| async move {
            self.check_writable(to)?;
            let (source, target) = (self.path_of(from)?, self.path_of(to)?);
            match self.request(to, self.store.copy(&source, &target)).await? {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(self.error(to, &e)),
            }
        });
        let all = futures_util::stream::iter(copies)
            .buffer_unordered(self.concurrency)
            .collect::<Vec<Result<()>>>();
        block_on(all)?.into_iter().collect()
    }

    fn delete_objects(&self, keys: &[String]) -> Result<()> {
        self.check_writable(keys.first().map_or("", String::as_str))?;
        let paths = keys
            .iter()
            .map(|key| self.path_of(key))
            .collect::<Result<Vec<Path>>>()?;
        let Some(first) = keys.first() else {
            return Ok(());
        };
        let deletion = self
            .store
            .delete_stream(futures_util::stream::iter(paths.into_iter().map(Ok)).boxed())
            .try_for_each(|_| async { Ok(()) });
        block_on(self.request(first, deletion))??.map_err(|e| self.error(first, &e))
    }

    fn search(&self, prefix: &str) -> Result<Vec<String>> {
        let path = self.path_of_prefix(prefix)?;
        let listing =
            block_on(self.request(prefix, self.store.list_with_delimiter(path.as_ref())))??
                .map_err(|e| self.error(prefix, &e))?;
        let names = listing
            .common_prefixes
            .iter()
            .chain(listing.objects.iter().map(|o| &o.location))
            .filter_map(|p| p.filename().map(str::to_string));
        let mut names: Vec<String> = names.collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    fn read_only(&self) -> bool {
        self.read_only
    }

    /// The request timeout, which also bounds one write-back's retries.
    fn write_back_backoff(&self) -> Option<Duration> {
        Some(self.health.probe_interval())
    }

    fn probe_if_down(&self) {
        if !self.health.probe_now(Instant::now()) {
            return;
        }
        // A HEAD of the prefix: any answer, a 404 included, takes the server as up again
        // (`request` records it), and so does a connection refused at once.
        let path = Path::from(self.prefix.as_str());
        match block_on(self.request(&self.prefix, self.store.head(&path))) {
            Ok(Ok(Ok(_))) => log::info!("{}: the server answers again", self.description),
            Ok(Ok(Err(e))) if answered(&e) => {
                log::info!("{}: the server answers again", self.description)
            }
            Ok(Ok(Err(e))) => log::info!(
                "{}: the server is still down: {}",
                self.description,
                redact(&describe_error(&e, self.signed), &self.secrets)
            ),
            Ok(Err(e)) | Err(e) => log::info!("{e}"),
        }
    }

    fn describe(&self) -> String {
        self.description.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::zmap::aws_config::Credentials;

    fn settings(credentials: Option<Credentials>) -> AwsSettings {
        AwsSettings {
            credentials,
            region: "us-east-1".into(),
            endpoint_url: None,
            source: "test".into(),
        }
    }

    fn location(endpoint: Option<&str>, bucket: &str, prefix: &str) -> S3Location {
        S3Location {
            endpoint: endpoint.map(str::to_string),
            bucket: bucket.into(),
            prefix: prefix.into(),
            ..S3Location::default()
        }
    }

    #[test]
    fn describe_names_the_location_without_credentials() {
        let creds = Credentials {
            access_key_id: "AKID".into(),
            secret_access_key: "TOPSECRET".into(),
            session_token: Some("TOKEN".into()),
        };
        let map = S3Map::with_settings(
            &location(Some("http://127.0.0.1:1"), "bkt", "a/b.zarr"),
            &settings(Some(creds)),
            S3Limits::default(),
            false,
        )
        .unwrap();
        assert_eq!(map.describe(), "http://127.0.0.1:1/bkt/a/b.zarr");
        let debug = format!("{map:?}");
        assert!(
            !debug.contains("TOPSECRET") && !debug.contains("TOKEN"),
            "{debug}"
        );
        let aws = S3Map::with_settings(
            &location(None, "bkt", ""),
            &settings(None),
            S3Limits::default(),
            true,
        )
        .unwrap();
        assert_eq!(aws.describe(), "s3://bkt");
    }

    #[test]
    fn keys_are_not_percent_encoded() {
        let map = S3Map::with_settings(
            &location(Some("http://127.0.0.1:1"), "bkt", "root"),
            &settings(None),
            S3Limits::default(),
            true,
        )
        .unwrap();
        let path = map.path_of("v [1]/a%41#b c").unwrap();
        assert_eq!(path.as_ref(), "root/v [1]/a%41#b c");
        assert!(map.path_of("../x").is_err());
        assert!(map.path_of("a\u{1}b").is_err());
        assert_eq!(
            map.path_of_prefix("").unwrap(),
            Some(Path::parse("root").unwrap())
        );
    }

    #[test]
    fn read_only_refuses_writes_before_any_request() {
        let map = S3Map::with_settings(
            &location(Some("http://127.0.0.1:1"), "bkt", ""),
            &settings(None),
            S3Limits::default(),
            false,
        )
        .unwrap();
        assert!(matches!(map.put("k", b"v"), Err(Error::NotPermitted(_))));
        assert!(matches!(map.delete("k"), Err(Error::NotPermitted(_))));
    }

    #[test]
    fn limits_from_environment() {
        let env = |name: &str| match name {
            "NCZARRFS_S3_TIMEOUT" => Some("7".to_string()),
            "NCZARRFS_S3_RETRIES" => Some("0".to_string()),
            _ => None,
        };
        let limits = S3Limits::from_env(&env).unwrap();
        assert_eq!(limits.timeout, Duration::from_secs(7));
        assert_eq!(limits.connect_timeout, Duration::from_secs(5));
        assert_eq!(limits.max_retries, 0);
        let bad = |_: &str| Some("soon".to_string());
        assert!(S3Limits::from_env(&bad).is_err());
    }

    #[test]
    fn error_messages_name_the_refusal_and_hide_secrets() {
        let body = "<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we \
                    calculated does not match</Message><Key>SECRETKEY</Key></Error>";
        let err = object_store::Error::PermissionDenied {
            path: "x".into(),
            source: body.into(),
        };
        let text = describe_error(&err, true);
        assert!(text.contains("refused"), "{text}");
        assert!(text.contains("SignatureDoesNotMatch"), "{text}");
        let text = describe_error(&err, false);
        assert!(text.contains("unsigned request: no credentials"), "{text}");
        let redacted = redact("a SECRETKEY b", &["SECRETKEY".to_string()]);
        assert_eq!(redacted, "a <redacted> b");
        let secrets = ["s".to_string(), "k/+1".to_string()];
        assert_eq!(
            redact(
                "zarr.json after 1.5µs (os error 111): s, key=k/+1.",
                &secrets
            ),
            "zarr.json after 1.5µs (os error 111): <redacted>, key=<redacted>."
        );
    }

    #[test]
    fn unreachable_server_fails_with_storage_error() {
        // Port 1 on loopback refuses connections at once; no retries keep the test short.
        let limits = S3Limits {
            max_retries: 0,
            ..S3Limits::default()
        };
        let map = S3Map::with_settings(
            &location(Some("http://127.0.0.1:1"), "bkt", "ds"),
            &settings(None),
            limits,
            false,
        )
        .unwrap();
        let err = map.get(".zgroup").unwrap_err();
        match err {
            Error::Storage { key, reason } => {
                assert_eq!(key, ".zgroup");
                assert!(reason.contains("http://127.0.0.1:1/bkt/ds"), "{reason}");
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    /// Refused at once, again and again: object_store's backoff between retries alone would
    /// run past the timeout (30 retries sleep at least 3 s in all). Whether its own retry
    /// limit or the deadline ends the operation (the backoff is random), the error names the
    /// refusal, never a stall.
    #[test]
    fn retries_of_one_operation_end_naming_the_refusal() {
        let limits = S3Limits {
            timeout: Duration::from_secs(1),
            max_retries: 30,
            ..S3Limits::default()
        };
        let map = S3Map::with_settings(
            &location(Some("http://127.0.0.1:1"), "bkt", "ds"),
            &settings(None),
            limits,
            false,
        )
        .unwrap();
        let err = map.get(".zgroup").unwrap_err().to_string();
        assert!(err.contains("Connection refused"), "{err}");
        assert!(!err.contains("taken as down"), "{err}");
    }

    #[test]
    fn aws_endpoints_are_recognised() {
        assert!(is_aws_endpoint("https://s3.us-west-2.amazonaws.com"));
        assert!(is_aws_endpoint("https://s3.amazonaws.com/"));
        assert!(!is_aws_endpoint("http://127.0.0.1:5000"));
        assert!(!is_aws_endpoint("https://amazonaws.com.evil.example"));
    }
}
