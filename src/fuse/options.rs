//! The `-o` mount options of `nczarrfs mount` and of `mount -t nczarrfs`.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::escaped_bytes;
use crate::{Error, Result};

/// Default staleness window of a read-only mount: metadata is re-read and the chunk cache
/// dropped at most this long after the dataset changed underneath.
pub const DEFAULT_TTL: Duration = Duration::from_secs(5);

/// The longest staleness window `ttl=` sets.
const MAX_TTL_SECS: f64 = 365.0 * 86400.0;

/// Parsed `-o` options.
#[derive(Debug, Clone, PartialEq)]
pub struct MountOptions {
    /// `rw`: allow writes (default `ro`).
    pub read_write: bool,
    /// `allow_other`: let other users see the mount.
    pub allow_other: bool,
    /// `allow_root`: let root see the mount as well as the owner.
    pub allow_root: bool,
    /// `default_permissions`: the kernel checks modes against `uid`/`gid`.
    pub default_permissions: bool,
    /// `cache_size=`: bytes of decoded chunks kept in memory.
    pub cache_bytes: usize,
    /// `uid=`: owner of every file (default: the mounting user).
    pub uid: Option<u32>,
    /// `gid=`: group of every file (default: the mounting user's group).
    pub gid: Option<u32>,
    /// `umask=`: bits removed from the default modes (0555/0444 read-only, 0755/0644 `rw`).
    pub umask: u32,
    /// `ttl=`: staleness window in seconds; `None` (`ttl=0`) for a dataset that never changes.
    pub ttl: Option<Duration>,
    /// `threads=`: threads serving the kernel's requests; `None`: as many as suit the
    /// storage (see [`MountOptions::session_threads`]).
    pub threads: Option<usize>,
    /// `max_read=`: largest read request the kernel may send (a kernel mount option).
    pub max_read: Option<u32>,
    /// `readahead=`: bytes prefetched into the chunk cache after a sequential read (0: off).
    pub readahead: u64,
    /// `direct_io`: `data` files bypass the kernel's page cache. A large read then costs one
    /// copy fewer (the values go straight into the reader's buffer), but every read is a
    /// request (no kernel readahead for small reads) and a read touching a chunk that cannot
    /// be decoded fails as a whole. Shared `mmap` of `data` needs kernel 6.6 or later
    /// (`ENODEV` before; private mappings always work).
    pub direct_io: bool,
    /// `nosplice` turns off (`splice` back on) replies spliced from uncompressed chunk files
    /// of a read-only mount of a directory: the kernel then moves the bytes from the file's
    /// pages into the reply, and the daemon never reads them.
    pub splice: bool,
    /// `fsname=`: the source shown in /proc/mounts (default: the location).
    pub fsname: Option<String>,
    /// `noatime`, `nodev`, `nosuid`, `noexec`, `sync`, …: kernel flags passed through.
    pub kernel_flags: Vec<String>,
    /// `auto_unmount`: a daemon that dies without unmounting (SIGKILL, a crash) is unmounted
    /// by fusermount3, which watches it, instead of leaving a dead mount point ("Transport
    /// endpoint is not connected").
    pub auto_unmount: bool,
    /// `log_file=`: the file log lines are appended to, as `--log-file` (the spelling of
    /// fstab lines and of the systemd unit's `OPTIONS=`).
    pub log_file: Option<PathBuf>,
    /// `nofail`: a dataset that does not exist is not an error, as mount(8) reads `nofail`
    /// for a device that does not exist: nothing is mounted and the command succeeds.
    pub nofail: bool,
}

impl Default for MountOptions {
    fn default() -> Self {
        MountOptions {
            read_write: false,
            allow_other: false,
            allow_root: false,
            default_permissions: false,
            cache_bytes: crate::dataset::DEFAULT_CACHE_BYTES,
            uid: None,
            gid: None,
            umask: 0,
            ttl: Some(DEFAULT_TTL),
            threads: None,
            max_read: None,
            readahead: 32 << 20,
            direct_io: false,
            splice: true,
            fsname: None,
            kernel_flags: Vec::new(),
            auto_unmount: false,
            log_file: None,
            nofail: false,
        }
    }
}

/// Threads serving a mount of local storage by default: its requests only need CPU, and on
/// two cores a second thread already costs a sequential `cat` about 5% (measured: 0.131 s
/// with one thread, 0.136 s with two, 400 MiB) while it gains a third for many readers of
/// compressed data at once (2,018 random 4 KiB reads per second with one, 3,334 with two).
const LOCAL_THREADS: usize = 2;
/// Threads serving a mount of remote storage by default: there a request mostly waits for
/// the network, and several readers' requests should wait at the same time.
const REMOTE_THREADS: usize = 8;

/// Most `threads=` accepted: what a mistyped value can cost, each thread holding a 16 MiB
/// request buffer.
const MAX_THREADS: usize = 256;

impl MountOptions {
    /// The threads that serve the kernel's requests: `threads=` if given, otherwise a
    /// default for local or `remote` storage.
    pub fn session_threads(&self, remote: bool) -> usize {
        let default = if remote {
            REMOTE_THREADS
        } else {
            LOCAL_THREADS
        };
        self.threads.unwrap_or(default)
    }

    /// Parses every `-o` argument (each a comma-separated list, see [`split_option_list`]),
    /// later keywords winning. The value of `log_file=` is a path, of any bytes; every other
    /// option is text.
    pub fn parse<S: AsRef<OsStr>>(lists: &[S]) -> Result<MountOptions> {
        let mut opts = MountOptions::default();
        for list in lists {
            for item in split_option_list(list.as_ref().as_bytes())? {
                opts.apply_bytes(&item)?;
            }
        }
        Ok(opts)
    }

    /// Applies one option: a `log_file=` path of any bytes, the others as text.
    fn apply_bytes(&mut self, item: &[u8]) -> Result<()> {
        if let Ok(item) = std::str::from_utf8(item) {
            return self.apply(item);
        }
        if let Some(path) = item.strip_prefix(b"log_file=") {
            self.log_file = Some(PathBuf::from(OsStr::from_bytes(path)));
            return Ok(());
        }
        Err(Error::Invalid(format!(
            "mount option \"{}\" is not UTF-8 (`{}`; only the path of log_file= may hold \
             any bytes)",
            escaped_bytes(option_key(item)),
            escaped_bytes(item)
        )))
    }

    fn apply<'a>(&mut self, item: &'a str) -> Result<()> {
        let (key, value) = match item.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (item, None),
        };
        let need = |v: Option<&'a str>| -> Result<&'a str> {
            v.ok_or_else(|| Error::Invalid(format!("mount option {key} needs a value ({key}=...)")))
        };
        // `allow_other=0` must not allow others, nor `rw=0` write: a flag takes no value.
        let flag = || -> Result<()> {
            match value {
                None => Ok(()),
                Some(_) => Err(Error::Invalid(format!(
                    "mount option {key} takes no value (given {item:?})"
                ))),
            }
        };
        let bad = |v: &str| Error::Invalid(format!("bad value for mount option {key}: {v:?}"));
        let out_of = |v: &str, range: &str| {
            Error::Invalid(format!(
                "bad value for mount option {key}: {v:?} (allowed: {range})"
            ))
        };
        match key {
            "ro" => {
                flag()?;
                self.read_write = false
            }
            "rw" => {
                flag()?;
                self.read_write = true
            }
            "allow_other" => {
                flag()?;
                self.allow_other = true
            }
            "allow_root" => {
                flag()?;
                self.allow_root = true
            }
            "default_permissions" => {
                flag()?;
                self.default_permissions = true
            }
            "cache_size" => {
                let v = need(value)?;
                self.cache_bytes = parse_size(v)
                    .and_then(|n| usize::try_from(n).ok())
                    .ok_or_else(|| bad(v))?;
            }
            // (uid_t)-1 is no owner: chown(2) reads it as "leave unchanged".
            "uid" => {
                let v = need(value)?;
                self.uid = Some(
                    v.parse()
                        .ok()
                        .filter(|&n| n != u32::MAX)
                        .ok_or_else(|| bad(v))?,
                );
            }
            "gid" => {
                let v = need(value)?;
                self.gid = Some(
                    v.parse()
                        .ok()
                        .filter(|&n| n != u32::MAX)
                        .ok_or_else(|| bad(v))?,
                );
            }
            "umask" => {
                let v = need(value)?;
                self.umask = u32::from_str_radix(v, 8)
                    .ok()
                    .filter(|&m| m <= 0o777)
                    .ok_or_else(|| bad(v))?;
            }
            "ttl" => {
                let v = need(value)?;
                let secs: f64 = v.parse().map_err(|_| bad(v))?;
                if !secs.is_finite() || secs < 0.0 {
                    return Err(bad(v));
                }
                self.ttl = match secs {
                    0.0 => None,
                    // Held to a year, so that deadlines reckoned from it cannot overflow.
                    s => Some(Duration::from_secs_f64(s.min(MAX_TTL_SECS))),
                };
            }
            "threads" => {
                let v = need(value)?;
                self.threads = Some(
                    v.parse()
                        .ok()
                        .filter(|n| (1..=MAX_THREADS).contains(n))
                        .ok_or_else(|| out_of(v, &format!("1 to {MAX_THREADS}")))?,
                );
            }
            "max_read" => {
                let v = need(value)?;
                self.max_read = Some(
                    parse_size(v)
                        .and_then(|n| u32::try_from(n).ok())
                        .filter(|n| *n > 0)
                        .ok_or_else(|| out_of(v, "1 byte to 4G - 1, with K, M, G suffixes"))?,
                );
            }
            "readahead" => {
                let v = need(value)?;
                self.readahead = parse_size(v).ok_or_else(|| bad(v))?;
            }
            "direct_io" => {
                flag()?;
                self.direct_io = true
            }
            "splice" => {
                flag()?;
                self.splice = true
            }
            "nosplice" => {
                flag()?;
                self.splice = false
            }
            // The kernel refuses an empty source name with a bare EINVAL.
            "fsname" => match need(value)? {
                "" => return Err(bad("")),
                v => self.fsname = Some(v.to_string()),
            },
            "auto_unmount" => {
                flag()?;
                self.auto_unmount = true
            }
            "log_file" => match need(value)? {
                "" => return Err(bad("")),
                v => self.log_file = Some(PathBuf::from(v)),
            },
            "noatime" | "atime" | "nodev" | "nosuid" | "noexec" | "sync" | "async" | "dirsync" => {
                flag()?;
                // As mount(8), the later of two opposite flags wins (the FUSE library would
                // refuse the pair).
                let opposite = match key {
                    "atime" => Some("noatime"),
                    "noatime" => Some("atime"),
                    "sync" => Some("async"),
                    "async" => Some("sync"),
                    _ => None,
                };
                self.kernel_flags
                    .retain(|f| f != key && Some(f.as_str()) != opposite);
                self.kernel_flags.push(key.to_string())
            }
            "remount" => {
                return Err(Error::Invalid(
                    "mount option remount: a mount of nczarrfs cannot be changed; unmount it \
                     and mount again"
                        .into(),
                ))
            }
            // The rest of mount(8)'s filesystem-independent options, which it may pass to a
            // helper. None means anything here: atime is never updated (times are those of
            // the dataset's last change), the layout has no symbolic links, the kernel no
            // longer has mandatory locks, and nothing reads i_version of a FUSE file.
            "nofail" => {
                flag()?;
                self.nofail = true
            }
            "dev" | "suid" | "exec" | "auto" | "noauto" | "_netdev" | "nouser" | "users"
            | "owner" | "group" | "defaults" | "relatime" | "norelatime" | "strictatime"
            | "nostrictatime" | "lazytime" | "nolazytime" | "diratime" | "nodiratime"
            | "iversion" | "noiversion" | "mand" | "nomand" | "symfollow" | "nosymfollow"
            | "loud" | "silent" => flag()?,
            // mount(8) passes `user=NAME` for an fstab line with `user` mounted by NAME.
            "user" => {}
            // Comments and SELinux labels (which FUSE mounts do not take).
            "comment" | "context" | "fscontext" | "defcontext" | "rootcontext" => {}
            k if k.starts_with("x-") || k.starts_with("X-") => {}
            _ => {
                return Err(Error::Invalid(format!("unknown mount option {item:?}")));
            }
        }
        Ok(())
    }
}

/// The options of a comma-separated list, split as mount(8) and libfuse split them: a comma
/// between double quotes (`fsname="obs,2024"`, as fstab and mount(8) quote a value, which
/// libmount passes on quoted) or after a backslash (`fsname=obs\,2024`, libfuse's escape) is
/// part of the option. The quotes and escaping backslashes are taken out; `\NNN` is the byte
/// of octal value NNN, as in libfuse. Empty options are dropped.
fn split_option_list(list: &[u8]) -> Result<Vec<Vec<u8>>> {
    let list_shown = escaped_bytes(list);
    let mut options = Vec::new();
    let mut option = Vec::new();
    let mut quoted = false;
    let mut bytes = list.iter().copied().peekable();
    while let Some(byte) = bytes.next() {
        match byte {
            b'\\' => {
                let Some(escaped) = bytes.next() else {
                    return Err(Error::Invalid(format!(
                        "mount options `{list_shown}` end in a lone backslash"
                    )));
                };
                let mut octal = [escaped, 0, 0];
                let is_octal = matches!(escaped, b'0'..=b'3')
                    && (1..3).all(|i| match bytes.peek() {
                        Some(&d @ b'0'..=b'7') => {
                            octal[i] = d;
                            bytes.next();
                            true
                        }
                        _ => false,
                    });
                match is_octal {
                    true => option.push(octal.iter().fold(0, |n, d| n * 8 + (d - b'0'))),
                    // Digits taken as far as they went are ordinary characters.
                    false => option.extend(octal.iter().take_while(|&&d| d != 0)),
                }
            }
            b'"' => quoted = !quoted,
            b',' if !quoted => options.push(std::mem::take(&mut option)),
            _ => option.push(byte),
        }
    }
    if quoted {
        return Err(Error::Invalid(format!(
            "mount options `{list_shown}` open a double quote that they do not close"
        )));
    }
    options.push(option);
    options.retain(|o| !o.is_empty());
    // No path, name or number holds one, and the kernel's option string ends at it.
    if let Some(with_nul) = options.iter().find(|o| o.contains(&0)) {
        return Err(Error::Invalid(format!(
            "mount option \"{}\" holds a NUL byte (\\000), which no value may",
            escaped_bytes(option_key(with_nul))
        )));
    }
    Ok(options)
}

/// The name of the option `item` (`NAME` or `NAME=VALUE`), as its bytes.
fn option_key(item: &[u8]) -> &[u8] {
    item.split(|&b| b == b'=').next().unwrap_or_default()
}

/// A byte count through the engine's parser (`64K`, `256M`, `1G`).
fn parse_size(text: &str) -> Option<u64> {
    crate::chunk::parse_size(text).ok().map(|n| n as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_read_only_with_ttl() {
        let o = MountOptions::parse::<&str>(&[]).unwrap();
        assert!(!o.read_write);
        assert_eq!(o.ttl, Some(DEFAULT_TTL));
        assert_eq!(o.cache_bytes, crate::dataset::DEFAULT_CACHE_BYTES);
    }

    #[test]
    fn keywords_and_values() {
        let o = MountOptions::parse(&[
            "rw,allow_other,cache_size=64M",
            "uid=1000,gid=100,ttl=0.5,default_permissions,umask=022",
        ])
        .unwrap();
        assert!(o.read_write && o.allow_other && o.default_permissions);
        assert_eq!(o.cache_bytes, 64 << 20);
        assert_eq!((o.uid, o.gid), (Some(1000), Some(100)));
        assert_eq!(o.ttl, Some(Duration::from_millis(500)));
        assert_eq!(o.umask, 0o022);
        assert_eq!(MountOptions::parse(&["ttl=0"]).unwrap().ttl, None);
        assert_eq!(
            MountOptions::parse(&["ttl=1e20"]).unwrap().ttl,
            Some(Duration::from_secs(365 * 86400))
        );
        assert!(!MountOptions::parse(&["rw,ro"]).unwrap().read_write);
        assert!(MountOptions::parse(&["ro,direct_io"]).unwrap().direct_io);
        assert!(!MountOptions::parse::<&str>(&[]).unwrap().direct_io);
        assert!(MountOptions::parse::<&str>(&[]).unwrap().splice);
        assert!(!MountOptions::parse(&["nosplice"]).unwrap().splice);
        assert!(MountOptions::parse(&["nosplice,splice"]).unwrap().splice);
    }

    #[test]
    fn threads_default_by_storage_unless_given() {
        let o = MountOptions::default();
        assert_eq!(o.session_threads(false), LOCAL_THREADS);
        assert_eq!(o.session_threads(true), REMOTE_THREADS);
        let o = MountOptions::parse(&["threads=3"]).unwrap();
        assert_eq!((o.session_threads(false), o.session_threads(true)), (3, 3));
    }

    #[test]
    fn generic_mount8_options_are_ignored() {
        let o =
            MountOptions::parse(&["ro,dev,suid,exec,auto,_netdev,x-systemd.automount,defaults"])
                .unwrap();
        assert_eq!(o, MountOptions::default());
        assert!(MountOptions::parse(&["ro,nofail"]).unwrap().nofail);
        let o = MountOptions::parse(&["noatime,nodev"]).unwrap();
        assert_eq!(o.kernel_flags, vec!["noatime", "nodev"]);
        let o = MountOptions::parse(&["noatime,sync,nodev", "atime,async,nodev"]).unwrap();
        assert_eq!(o.kernel_flags, vec!["atime", "async", "nodev"]);
    }

    #[test]
    fn every_filesystem_independent_option_of_mount8_is_accepted() {
        // The list of mount(8)'s FILESYSTEM-INDEPENDENT MOUNT OPTIONS (util-linux 2.38),
        // less remount, with the X-mount.* options and `user=` as mount(8) passes them.
        let mount8 = "async,atime,noatime,auto,noauto,context=system_u:object_r:tmp_t:s0,\
            fscontext=a,defcontext=b,rootcontext=c,defaults,dev,nodev,diratime,nodiratime,\
            dirsync,exec,noexec,group,iversion,noiversion,mand,nomand,_netdev,nofail,relatime,\
            norelatime,strictatime,nostrictatime,lazytime,nolazytime,suid,nosuid,silent,loud,\
            owner,ro,rw,sync,user,user=alice,nouser,users,X-mount.mkdir=0755,\
            X-mount.subdir=d,x-systemd.automount,nosymfollow,symfollow,comment=backup";
        for option in mount8.split(',') {
            assert!(
                MountOptions::parse(&[option]).is_ok(),
                "{option}: {:?}",
                MountOptions::parse(&[option])
            );
        }
        assert_eq!(
            MountOptions::parse(&["ro,comment=backup,nodiratime,nosymfollow,mand,iversion"])
                .unwrap(),
            MountOptions::default()
        );
        let e = MountOptions::parse(&["remount,ro"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("remount") && e.contains("unmount it"), "{e}");
    }

    #[test]
    fn a_flag_given_a_value_is_an_error() {
        for flag in [
            "allow_other=0",
            "allow_other=no",
            "allow_other=false",
            "allow_other=",
            "allow_root=0",
            "default_permissions=false",
            "rw=0",
            "ro=1",
            "direct_io=no",
            "splice=0",
            "nosplice=0",
            "auto_unmount=0",
            "noatime=0",
            "nodev=no",
            "nosuid=0",
            "noexec=0",
            "sync=0",
            "defaults=1",
            "nofail=0",
            "nodiratime=0",
        ] {
            let key = flag.split('=').next().unwrap();
            let e = MountOptions::parse(&[flag]).unwrap_err().to_string();
            assert!(
                e.contains(&format!("mount option {key} takes no value")),
                "{flag}: {e}"
            );
        }
    }

    #[test]
    fn out_of_range_umask_uid_gid_and_empty_fsname_are_errors() {
        assert_eq!(MountOptions::parse(&["umask=0777"]).unwrap().umask, 0o777);
        assert_eq!(
            MountOptions::parse(&["uid=4294967294"]).unwrap().uid,
            Some(4294967294)
        );
        for (bad, shown) in [
            ("umask=1000", "umask: \"1000\""),
            ("umask=0777777", "umask: \"0777777\""),
            ("uid=4294967295", "uid: \"4294967295\""),
            ("gid=4294967295", "gid: \"4294967295\""),
            ("fsname=", "fsname: \"\""),
        ] {
            let e = MountOptions::parse(&[bad]).unwrap_err().to_string();
            assert!(
                e.contains(&format!("bad value for mount option {shown}")),
                "{bad}: {e}"
            );
        }
    }

    #[test]
    fn limited_options_say_their_range() {
        for (bad, range) in [
            ("threads=300", "(allowed: 1 to 256)"),
            ("threads=0", "(allowed: 1 to 256)"),
            ("max_read=5G", "(allowed: 1 byte to 4G - 1"),
        ] {
            let e = MountOptions::parse(&[bad]).unwrap_err().to_string();
            assert!(e.contains(range), "{bad}: {e}");
        }
    }

    #[test]
    fn unknown_or_bad_options_are_errors() {
        for bad in [
            "bogus",
            "cache_size=lots",
            "uid=-1",
            "ttl=-1",
            "cache_size",
            "threads=0",
            "umask=9",
        ] {
            assert!(MountOptions::parse(&[bad]).is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn commas_quoted_as_in_mount8_or_escaped_as_in_libfuse_stay_in_the_value() {
        for list in [
            r#"ro,fsname="obs,2024""#,
            r#"ro,"fsname=obs,2024""#,
            r"ro,fsname=obs\,2024",
            r"ro,fsname=obs\0542024",
        ] {
            let o = MountOptions::parse(&[list]).unwrap();
            assert_eq!(o.fsname.as_deref(), Some("obs,2024"), "{list}");
            assert!(!o.read_write, "{list}");
        }
        // mount(8)'s own example of a quoted value.
        let o = MountOptions::parse(&[
            r#"context="system_u:object_r:removable_t:s0:c1,c2",rw,log_file="/var/log/a,b.log""#,
        ])
        .unwrap();
        assert!(o.read_write);
        assert_eq!(o.log_file, Some(PathBuf::from("/var/log/a,b.log")));
        let o = MountOptions::parse(&[r#"fsname=back\\slash\"quote"#]).unwrap();
        assert_eq!(o.fsname.as_deref(), Some(r#"back\slash"quote"#));
        // libfuse: a backslash before anything else keeps that character; \4 is no octal.
        let o = MountOptions::parse(&[r"fsname=a\b\4x\17"]).unwrap();
        assert_eq!(o.fsname.as_deref(), Some("ab4x17"));
        for (bad, says) in [
            (r#"ro,fsname="obs,2024"#, "do not close"),
            (r"ro,fsname=obs\", "lone backslash"),
            (r"fsname=\377", "mount option \"fsname\" is not UTF-8"),
            (r"ro,fsname=obs\0002024", "\"fsname\" holds a NUL byte"),
        ] {
            let e = MountOptions::parse(&[bad]).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(MountOptions::parse(&[r#"ro,,"",rw"#]).unwrap().read_write);
    }

    #[test]
    fn log_file_names_a_path() {
        let o = MountOptions::parse(&["ro,log_file=/var/log/obs.log"]).unwrap();
        assert_eq!(o.log_file, Some(PathBuf::from("/var/log/obs.log")));
        // A file name is any bytes, given as they are or in libfuse's octal escape.
        let raw = OsStr::from_bytes(b"log_file=/var/log/obs\xff.log,ro");
        for given in [raw, OsStr::new(r"log_file=/var/log/obs\377.log,ro")] {
            let o = MountOptions::parse(&[given]).unwrap();
            let path = OsStr::from_bytes(b"/var/log/obs\xff.log");
            assert_eq!(o.log_file.as_deref(), Some(std::path::Path::new(path)));
        }
        let e = MountOptions::parse(&[OsStr::from_bytes(b"ro,fsname=obs\xff")])
            .unwrap_err()
            .to_string();
        assert!(e.contains("mount option \"fsname\" is not UTF-8"), "{e}");
        for bad in ["log_file", "log_file="] {
            assert!(MountOptions::parse(&[bad]).is_err(), "{bad} accepted");
        }
    }

    /// Bytes that are not UTF-8 are shown as `\xNN`, as in the refusal of other arguments
    /// that are not UTF-8, never replaced by U+FFFD.
    #[test]
    fn options_that_are_not_utf8_are_shown_with_their_bytes() {
        for (given, says) in [
            (
                &b"ro,cache_size=1\xff"[..],
                "option \"cache_size\" is not UTF-8 (`cache_size=1\\xff`;",
            ),
            (
                b"\xfe\xffbad=2",
                "option \"\\xfe\\xffbad\" is not UTF-8 (`\\xfe\\xffbad=2`;",
            ),
            (
                b"ro,fsname=\"a\xff",
                "options `ro,fsname=\"a\\xff` open a double quote",
            ),
            (
                b"fsname=\xc3\\",
                "options `fsname=\\xc3\\` end in a lone backslash",
            ),
            (b"a\xff=\\000", "option \"a\\xff\" holds a NUL byte"),
        ] {
            let e = MountOptions::parse(&[OsStr::from_bytes(given)])
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{given:?}: {e}");
            assert!(!e.contains('\u{fffd}'), "{given:?}: {e}");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("64K"), Some(65536));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("2MiB"), Some(2 << 20));
        assert_eq!(parse_size("1X"), None);
    }
}
