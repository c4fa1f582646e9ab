//! AWS settings the way the AWS CLI finds them: environment variables and the shared
//! `config`/`credentials` INI files, with the CLI's precedence.
//!
//! Credentials: a profile named in the URL (`aws.profile=`) > `AWS_ACCESS_KEY_ID` /
//! `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN` > the profile named by `AWS_PROFILE` > the
//! `default` profile > none (anonymous, unsigned requests).
//!
//! Region: the location's (`aws.region=` or the host name) > `AWS_REGION` >
//! `AWS_DEFAULT_REGION` > the profile's `region` > `us-east-1`.
//!
//! Endpoint (for `s3://` locations only; an `http(s)://` location names its server):
//! `AWS_ENDPOINT_URL_S3` > `AWS_ENDPOINT_URL` > the profile's `endpoint_url` > AWS.
//!
//! Files: `AWS_CONFIG_FILE` (default `~/.aws/config`, sections `[default]` and
//! `[profile NAME]`) and `AWS_SHARED_CREDENTIALS_FILE` (default `~/.aws/credentials`, sections
//! `[NAME]`); for a key present in both, the credentials file wins. Nested settings (indented
//! lines under `s3 =`) and other section kinds (`[services ...]`, `[sso-session ...]`) are
//! ignored.

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use crate::{Error, Result};

/// The region requests are signed for when nothing names one.
pub const DEFAULT_REGION: &str = "us-east-1";

/// Reads an environment variable; tests substitute a map for the process environment.
pub type EnvLookup<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The process environment as an [`EnvLookup`] (empty values count as unset, as in the CLI).
pub fn process_env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A set of AWS credentials. `Debug` shows only the access key id.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    /// The access key id (not secret: it appears in every signed request).
    pub access_key_id: String,
    /// The secret access key.
    pub secret_access_key: String,
    /// The session token of temporary credentials.
    pub session_token: Option<String>,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

impl Credentials {
    /// The strings that must never appear in a message.
    pub fn secrets(&self) -> Vec<&str> {
        let mut secrets = vec![self.secret_access_key.as_str()];
        secrets.extend(self.session_token.as_deref());
        secrets
    }
}

/// What the environment and the shared files say for one S3 location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AwsSettings {
    /// Credentials, or `None` for anonymous access.
    pub credentials: Option<Credentials>,
    /// The signing region.
    pub region: String,
    /// An endpoint URL from the environment or the profile (used for `s3://` locations).
    pub endpoint_url: Option<String>,
    /// Where the credentials came from, for messages (`environment`, `profile "x"`).
    pub source: String,
}

/// The `key = value` settings of one profile.
type Section = BTreeMap<String, String>;

/// Resolves the settings for a location that names `profile` (from the URL) and `region`
/// (from the URL or host name), looking up variables with `env`.
///
/// A profile named in the URL or by `AWS_PROFILE` must exist in one of the files; a profile
/// with an access key but no secret (or the reverse) is refused rather than silently used
/// anonymously.
pub fn resolve(
    profile: Option<&str>,
    region: Option<&str>,
    env: EnvLookup<'_>,
) -> Result<AwsSettings> {
    let files = SharedFiles::load(env)?;
    let env_profile = env("AWS_PROFILE");
    let env_credentials = credentials_from(
        env("AWS_ACCESS_KEY_ID"),
        env("AWS_SECRET_ACCESS_KEY"),
        env("AWS_SESSION_TOKEN"),
        "the environment (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)",
    )?;

    // The profile that supplies the settings the credentials source does not.
    let (profile_name, explicit) = match (profile, &env_profile) {
        (Some(p), _) => (p.to_string(), true),
        (None, Some(p)) => (p.clone(), true),
        (None, None) => ("default".to_string(), false),
    };
    let section = files.profile(&profile_name);
    if explicit && section.is_none() {
        return Err(Error::Invalid(format!(
            "AWS profile {profile_name:?} not found in {} or {}",
            files.config_path.display(),
            files.credentials_path.display()
        )));
    }
    let section = section.unwrap_or_default();
    let profile_credentials = credentials_from(
        section.get("aws_access_key_id").cloned(),
        section.get("aws_secret_access_key").cloned(),
        section.get("aws_session_token").cloned(),
        &format!("AWS profile {profile_name:?}"),
    )?;

    // Credentials a profile would get another way are refused rather than replaced by
    // anonymous requests (which a public bucket would even answer).
    let from_profile = profile.is_some() || env_credentials.is_none();
    let other_way = [
        "credential_process",
        "role_arn",
        "sso_session",
        "sso_start_url",
        "web_identity_token_file",
    ]
    .into_iter()
    .find(|k| section.contains_key(*k));
    if let (true, None, Some(how)) = (from_profile, &profile_credentials, other_way) {
        return Err(Error::Unsupported(format!(
            "AWS profile {profile_name:?} gets its credentials through `{how}`, which nczarrfs \
             does not support; export them instead (`aws configure export-credentials \
             --profile {profile_name} --format env` prints them)"
        )));
    }
    let (credentials, source) = match (profile, env_credentials, profile_credentials) {
        (Some(_), _, Some(c)) => (Some(c), format!("profile {profile_name:?}")),
        (Some(_), _, None) => (None, format!("profile {profile_name:?} (no keys)")),
        (None, Some(c), _) => (Some(c), "environment".to_string()),
        (None, None, Some(c)) => (Some(c), format!("profile {profile_name:?}")),
        (None, None, None) => (None, "none".to_string()),
    };
    let region = region
        .map(str::to_string)
        .or_else(|| env("AWS_REGION"))
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .or_else(|| section.get("region").cloned())
        .unwrap_or_else(|| DEFAULT_REGION.to_string());
    let endpoint_url = match (
        env("AWS_ENDPOINT_URL_S3"),
        env("AWS_ENDPOINT_URL"),
        section.get("endpoint_url"),
    ) {
        (Some(url), _, _) => Some(normalize_endpoint(&url, "AWS_ENDPOINT_URL_S3")?),
        (None, Some(url), _) => Some(normalize_endpoint(&url, "AWS_ENDPOINT_URL")?),
        (None, None, Some(url)) => Some(normalize_endpoint(
            url,
            &format!("endpoint_url of AWS profile {profile_name:?}"),
        )?),
        (None, None, None) => None,
    };
    Ok(AwsSettings {
        credentials,
        region,
        endpoint_url,
        source,
    })
}

/// An endpoint URL as the HTTP client takes it, with its scheme in lower case: `http://` or
/// `https://` (in any case), a host, an optional port and path, and nothing a URL cannot hold.
/// `from` names where it came from, for the message.
pub fn normalize_endpoint(url: &str, from: &str) -> Result<String> {
    let invalid = |why: String| {
        Error::Invalid(format!(
            "invalid S3 endpoint URL {url:?} (from {from}): {why}"
        ))
    };
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(invalid(
            "it has no scheme: write http://HOST:PORT or https://HOST".into(),
        ));
    };
    let scheme = scheme.to_ascii_lowercase();
    if scheme != "http" && scheme != "https" {
        return Err(invalid(format!(
            "the scheme is {scheme:?}, not http or https"
        )));
    }
    if let Some(c) = url.chars().find(|c| c.is_whitespace() || c.is_control()) {
        return Err(invalid(format!("it holds {c:?}")));
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let (host, port) = match host_port.rsplit_once(':') {
        // An IPv6 address in brackets holds colons of its own.
        Some((host, port)) if !port.contains(']') => (host, Some(port)),
        _ => (host_port, None),
    };
    if host.is_empty() {
        return Err(invalid("it names no host".into()));
    }
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return Err(invalid("the port is not a number up to 65535".into()));
    }
    Ok(format!("{scheme}://{rest}"))
}

/// Refuses a credential that cannot go into an HTTP request (the key id and the token are
/// sent in headers, which cannot hold control characters; the secret signs them): usually
/// the carriage return a file with Windows line endings leaves. The value is not shown.
fn check_credential_text(what: &str, field: &str, value: &str) -> Result<()> {
    let Some(c) = value.chars().find(|c| c.is_control()) else {
        return Ok(());
    };
    let which = match c {
        '\r' => "a carriage return (a file with Windows line endings?)".to_string(),
        '\n' => "a line feed".to_string(),
        c => format!("the control character U+{:04X}", u32::from(c)),
    };
    Err(Error::Invalid(format!("{what}: the {field} holds {which}")))
}

/// Builds credentials from an id/secret/token triple; both halves or neither.
fn credentials_from(
    id: Option<String>,
    secret: Option<String>,
    token: Option<String>,
    what: &str,
) -> Result<Option<Credentials>> {
    for (field, value) in [
        ("access key id", &id),
        ("secret access key", &secret),
        ("session token", &token),
    ] {
        if let Some(value) = value {
            check_credential_text(what, field, value)?;
        }
    }
    match (id, secret) {
        (Some(access_key_id), Some(secret_access_key)) => Ok(Some(Credentials {
            access_key_id,
            secret_access_key,
            session_token: token,
        })),
        (None, None) => Ok(None),
        (Some(_), None) => Err(Error::Invalid(format!(
            "{what} has an access key id but no secret access key"
        ))),
        (None, Some(_)) => Err(Error::Invalid(format!(
            "{what} has a secret access key but no access key id"
        ))),
    }
}

/// The parsed shared config and credentials files (missing files are empty).
struct SharedFiles {
    config_path: PathBuf,
    credentials_path: PathBuf,
    config: BTreeMap<String, Section>,
    credentials: BTreeMap<String, Section>,
}

impl SharedFiles {
    fn load(env: EnvLookup<'_>) -> Result<SharedFiles> {
        let home = env("HOME").map(PathBuf::from);
        let path_of = |var: &str, name: &str| -> PathBuf {
            env(var)
                .map(PathBuf::from)
                .unwrap_or_else(|| home.clone().unwrap_or_default().join(".aws").join(name))
        };
        let config_path = path_of("AWS_CONFIG_FILE", "config");
        let credentials_path = path_of("AWS_SHARED_CREDENTIALS_FILE", "credentials");
        let read = |path: &PathBuf| -> Result<String> {
            match std::fs::read_to_string(path) {
                Ok(text) => Ok(text),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
                Err(e) => Err(Error::io(path, e)),
            }
        };
        // In the config file a profile is `[profile NAME]`, except `[default]`.
        let config = parse_ini(&read(&config_path)?)
            .into_iter()
            .filter_map(|(name, section)| {
                let name = match name.strip_prefix("profile") {
                    Some(rest) if rest.starts_with(char::is_whitespace) => rest.trim().to_string(),
                    _ if name == "default" => name,
                    _ => return None,
                };
                Some((name, section))
            })
            .collect();
        let credentials = parse_ini(&read(&credentials_path)?);
        Ok(SharedFiles {
            config_path,
            credentials_path,
            config,
            credentials,
        })
    }

    /// The merged settings of profile `name`, `None` if neither file has it.
    fn profile(&self, name: &str) -> Option<Section> {
        let config = self.config.get(name);
        let credentials = self.credentials.get(name);
        if config.is_none() && credentials.is_none() {
            return None;
        }
        let mut merged = config.cloned().unwrap_or_default();
        merged.extend(credentials.cloned().unwrap_or_default());
        Some(merged)
    }
}

/// Parses the AWS INI dialect: `[section]` headers, `key = value` lines, `#`/`;` comment lines.
/// Indented lines (nested settings such as `s3 =\n  addressing_style = path`) are skipped, and
/// so are lines before the first section. Keys are lower-cased; values are trimmed. A section
/// that appears twice is merged, later values winning, as in the CLI.
pub fn parse_ini(text: &str) -> BTreeMap<String, Section> {
    let mut sections: BTreeMap<String, Section> = BTreeMap::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if line.starts_with([' ', '\t']) {
            continue;
        }
        let line = line.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some(header) = line.strip_prefix('[') {
            current = header.strip_suffix(']').map(|name| name.trim().to_string());
            if let Some(name) = &current {
                sections.entry(name.clone()).or_default();
            }
            continue;
        }
        let (Some(section), Some((key, value))) = (&current, line.split_once('=')) else {
            continue;
        };
        let value = value.trim();
        // The CLI allows inline comments only after whitespace.
        let value = value
            .find(" #")
            .or_else(|| value.find(" ;"))
            .map_or(value, |i| value[..i].trim_end());
        if let Some(entries) = sections.get_mut(section) {
            entries.insert(key.trim().to_ascii_lowercase(), value.to_string());
        }
    }
    sections
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// An environment made of `vars`, with HOME pointing into `dir`.
    struct FakeEnv {
        vars: HashMap<String, String>,
    }

    impl FakeEnv {
        fn new(dir: &std::path::Path, vars: &[(&str, &str)]) -> FakeEnv {
            let mut map: HashMap<String, String> = vars
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
            map.insert("HOME".into(), dir.display().to_string());
            FakeEnv { vars: map }
        }

        fn lookup(&self) -> impl Fn(&str) -> Option<String> + '_ {
            move |name| self.vars.get(name).cloned()
        }
    }

    fn write_files(dir: &std::path::Path, config: &str, credentials: &str) {
        std::fs::create_dir_all(dir.join(".aws")).unwrap();
        std::fs::write(dir.join(".aws/config"), config).unwrap();
        std::fs::write(dir.join(".aws/credentials"), credentials).unwrap();
    }

    const CONFIG: &str = "\
# comment
[default]
region = eu-west-1

[profile minio]
region=us-west-2
endpoint_url = http://127.0.0.1:9000  # local server
s3 =
  addressing_style = path

[services local]
s3 =
  endpoint_url = http://elsewhere

[profile keysonly]
aws_access_key_id = CONFIGID
aws_secret_access_key = CONFIGSECRET

[profile process]
credential_process = /usr/local/bin/get-credentials

[profile assumed]
role_arn = arn:aws:iam::123456789012:role/reader
source_profile = default
";

    const CREDENTIALS: &str = "\
[default]
aws_access_key_id = DEFAULTID
aws_secret_access_key = DEFAULTSECRET

[minio]
aws_access_key_id = MINIOID
aws_secret_access_key = MINIOSECRET
aws_session_token = MINIOTOKEN

[keysonly]
aws_secret_access_key = OVERRIDDEN
";

    fn resolve_in(
        vars: &[(&str, &str)],
        profile: Option<&str>,
        region: Option<&str>,
    ) -> Result<AwsSettings> {
        let dir = tempfile::tempdir().unwrap();
        write_files(dir.path(), CONFIG, CREDENTIALS);
        let env = FakeEnv::new(dir.path(), vars);
        let lookup = env.lookup();
        resolve(profile, region, &lookup)
    }

    #[test]
    fn ini_sections_keys_comments_and_nesting() {
        let ini = parse_ini(CONFIG);
        assert_eq!(ini["default"]["region"], "eu-west-1");
        let minio = &ini["profile minio"];
        assert_eq!(minio["region"], "us-west-2");
        assert_eq!(minio["endpoint_url"], "http://127.0.0.1:9000");
        // `s3 =` opens a nested block; its indented lines are not top-level keys.
        assert!(!minio.contains_key("addressing_style"));
        assert!(!ini["services local"].contains_key("endpoint_url"));
    }

    #[test]
    fn credentials_obtained_another_way_are_refused_not_dropped() {
        for profile in ["process", "assumed"] {
            match resolve_in(&[], Some(profile), None) {
                Err(Error::Unsupported(m)) => {
                    assert!(
                        m.contains(profile) && m.contains("export-credentials"),
                        "{m}"
                    )
                }
                other => panic!("{profile}: {other:?}"),
            }
            let by_env = resolve_in(&[("AWS_PROFILE", profile)], None, None);
            assert!(matches!(by_env, Err(Error::Unsupported(_))), "{by_env:?}");
        }
        // Keys in the environment are used as they are, whatever the default profile says.
        let vars = [
            ("AWS_PROFILE", "process"),
            ("AWS_ACCESS_KEY_ID", "ENVID"),
            ("AWS_SECRET_ACCESS_KEY", "ENVSECRET"),
        ];
        let s = resolve_in(&vars, None, None).unwrap();
        assert_eq!(s.credentials.unwrap().access_key_id, "ENVID");
    }

    #[test]
    fn default_profile_when_nothing_else() {
        let s = resolve_in(&[], None, None).unwrap();
        let c = s.credentials.unwrap();
        assert_eq!(c.access_key_id, "DEFAULTID");
        assert_eq!(c.secret_access_key, "DEFAULTSECRET");
        assert_eq!(s.region, "eu-west-1");
        assert_eq!(s.endpoint_url, None);
    }

    #[test]
    fn environment_keys_beat_default_profile_but_not_url_profile() {
        let vars = [
            ("AWS_ACCESS_KEY_ID", "ENVID"),
            ("AWS_SECRET_ACCESS_KEY", "ENVSECRET"),
        ];
        let s = resolve_in(&vars, None, None).unwrap();
        assert_eq!(s.credentials.unwrap().access_key_id, "ENVID");
        assert_eq!(s.source, "environment");
        let s = resolve_in(&vars, Some("minio"), None).unwrap();
        let c = s.credentials.unwrap();
        assert_eq!(c.access_key_id, "MINIOID");
        assert_eq!(c.session_token.as_deref(), Some("MINIOTOKEN"));
        assert_eq!(s.endpoint_url.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(s.region, "us-west-2");
    }

    #[test]
    fn aws_profile_variable_after_environment_keys() {
        let s = resolve_in(&[("AWS_PROFILE", "minio")], None, None).unwrap();
        assert_eq!(s.credentials.unwrap().access_key_id, "MINIOID");
        let vars = [
            ("AWS_PROFILE", "minio"),
            ("AWS_ACCESS_KEY_ID", "ENVID"),
            ("AWS_SECRET_ACCESS_KEY", "ENVSECRET"),
        ];
        let s = resolve_in(&vars, None, None).unwrap();
        assert_eq!(s.credentials.unwrap().access_key_id, "ENVID");
        // The profile still supplies region and endpoint.
        assert_eq!(s.region, "us-west-2");
        assert_eq!(s.endpoint_url.as_deref(), Some("http://127.0.0.1:9000"));
    }

    #[test]
    fn credentials_file_overrides_config_file() {
        let s = resolve_in(&[], Some("keysonly"), None).unwrap();
        let c = s.credentials.unwrap();
        assert_eq!(c.access_key_id, "CONFIGID");
        assert_eq!(c.secret_access_key, "OVERRIDDEN");
    }

    #[test]
    fn region_precedence() {
        let vars = [
            ("AWS_REGION", "ap-south-1"),
            ("AWS_DEFAULT_REGION", "sa-east-1"),
        ];
        assert_eq!(
            resolve_in(&vars, Some("minio"), Some("eu-north-1"))
                .unwrap()
                .region,
            "eu-north-1"
        );
        assert_eq!(
            resolve_in(&vars, Some("minio"), None).unwrap().region,
            "ap-south-1"
        );
        assert_eq!(
            resolve_in(&vars[1..], Some("minio"), None).unwrap().region,
            "sa-east-1"
        );
    }

    #[test]
    fn control_characters_in_credentials_are_refused_without_showing_them() {
        let vars = [
            ("AWS_ACCESS_KEY_ID", "ENVID\r"),
            ("AWS_SECRET_ACCESS_KEY", "ENVSECRET"),
        ];
        let err = resolve_in(&vars, None, None).unwrap_err().to_string();
        assert!(
            err.contains("access key id holds a carriage return"),
            "{err}"
        );
        assert!(!err.contains("ENVID"), "{err}");
        let vars = [
            ("AWS_ACCESS_KEY_ID", "ENVID"),
            ("AWS_SECRET_ACCESS_KEY", "ENVSECRET"),
            ("AWS_SESSION_TOKEN", "TOK\u{1}EN"),
        ];
        let err = resolve_in(&vars, None, None).unwrap_err().to_string();
        assert!(
            err.contains("session token holds the control character U+0001"),
            "{err}"
        );
        assert!(!err.contains("TOK"), "{err}");
    }

    #[test]
    fn endpoints_are_checked_and_their_scheme_lowered() {
        let ok = |url: &str| normalize_endpoint(url, "test").unwrap();
        assert_eq!(ok("HTTP://127.0.0.1:5000"), "http://127.0.0.1:5000");
        assert_eq!(
            ok("https://s3.example.com/base"),
            "https://s3.example.com/base"
        );
        assert_eq!(ok("http://[::1]:9000"), "http://[::1]:9000");
        assert_eq!(ok("http://[::1]"), "http://[::1]");
        for (url, why) in [
            ("127.0.0.1:5000", "no scheme"),
            ("ftp://host", "not http or https"),
            ("http://exa mple:5000", "holds ' '"),
            ("http://host:5000\r", "holds '\\r'"),
            ("http://:5000", "no host"),
            ("http://host:99999", "port"),
            ("http://host:x", "port"),
        ] {
            let err = normalize_endpoint(url, "AWS_ENDPOINT_URL")
                .unwrap_err()
                .to_string();
            assert!(
                err.contains(why) && err.contains("AWS_ENDPOINT_URL"),
                "{url}: {err}"
            );
        }
        let vars = [("AWS_ENDPOINT_URL", "localhost:5000")];
        let err = resolve_in(&vars, None, None).unwrap_err().to_string();
        assert!(err.contains("(from AWS_ENDPOINT_URL)"), "{err}");
    }

    #[test]
    fn endpoint_variables_beat_profile() {
        let vars = [("AWS_ENDPOINT_URL", "http://a:1")];
        let s = resolve_in(&vars, Some("minio"), None).unwrap();
        assert_eq!(s.endpoint_url.as_deref(), Some("http://a:1"));
        let vars = [
            ("AWS_ENDPOINT_URL", "http://a:1"),
            ("AWS_ENDPOINT_URL_S3", "http://b:2"),
        ];
        let s = resolve_in(&vars, Some("minio"), None).unwrap();
        assert_eq!(s.endpoint_url.as_deref(), Some("http://b:2"));
    }

    #[test]
    fn anonymous_without_any_credentials() {
        let dir = tempfile::tempdir().unwrap();
        let env = FakeEnv::new(dir.path(), &[]);
        let s = resolve(None, None, &env.lookup()).unwrap();
        assert_eq!(s.credentials, None);
        assert_eq!(s.region, DEFAULT_REGION);
    }

    #[test]
    fn missing_named_profile_is_an_error() {
        let err = resolve_in(&[], Some("nope"), None).unwrap_err();
        assert!(err.to_string().contains("\"nope\" not found"), "{err}");
        let err = resolve_in(&[("AWS_PROFILE", "nope")], None, None).unwrap_err();
        assert!(err.to_string().contains("\"nope\" not found"), "{err}");
    }

    #[test]
    fn half_credentials_are_refused() {
        let err = resolve_in(&[("AWS_ACCESS_KEY_ID", "X")], None, None).unwrap_err();
        assert!(err.to_string().contains("no secret access key"), "{err}");
    }

    #[test]
    fn explicit_files_from_environment() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("cfg");
        let creds = dir.path().join("creds");
        std::fs::write(&config, "[profile t]\nregion = r1\n").unwrap();
        std::fs::write(
            &creds,
            "[t]\naws_access_key_id = I\naws_secret_access_key = S\n",
        )
        .unwrap();
        let env = FakeEnv::new(
            &dir.path().join("nohome"),
            &[
                ("AWS_CONFIG_FILE", config.to_str().unwrap()),
                ("AWS_SHARED_CREDENTIALS_FILE", creds.to_str().unwrap()),
            ],
        );
        let s = resolve(Some("t"), None, &env.lookup()).unwrap();
        assert_eq!(s.region, "r1");
        assert_eq!(s.credentials.unwrap().access_key_id, "I");
    }

    #[test]
    fn debug_hides_secrets() {
        let s = resolve_in(&[], Some("minio"), None).unwrap();
        let text = format!("{s:?}");
        assert!(text.contains("MINIOID"));
        assert!(!text.contains("MINIOSECRET"), "{text}");
        assert!(!text.contains("MINIOTOKEN"), "{text}");
    }
}
