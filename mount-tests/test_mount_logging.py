"""Where a mount's log lines go: `--log-file` wins; otherwise a daemon logs to syslog and `-f`
to stderr. The lines that matter (a corrupt chunk's key, an EPERM refusal) arrive; the error
fuser logs when it finds the mount already gone after `umount` does not."""

from __future__ import annotations

import errno
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import daemon_pids, is_mounted, unmount, wait_until  # noqa: E402
from datasets import nczarr_dataset  # noqa: E402

# <facility * 8 + severity> of syslog(3) lines: LOG_DAEMON is 3, LOG_ERR 3, LOG_WARNING 4.
DAEMON_ERR = "<27>"
DAEMON_WARNING = "<28>"


def corrupt_store(path: Path) -> None:
    """A zarr-python store whose chunk a/2.0 is not a chunk."""
    import zarr

    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    a = root.create_array("a", shape=(64, 1024), chunks=(8, 1024), dtype="<i4", fill_value=0)
    a[:] = np.arange(64 * 1024, dtype="<i4").reshape(64, 1024)
    a.attrs["_ARRAY_DIMENSIONS"] = ["r", "c"]
    (path / "a" / "2.0").write_bytes(b"this is not a compressed chunk")


def read_corrupt(mnt: Path) -> None:
    fd = os.open(mnt / "a" / "data", os.O_RDONLY)
    try:
        with pytest.raises(OSError) as err:
            os.pread(fd, 100, 2 * 32 * 1024)
        assert err.value.errno == errno.EIO
    finally:
        os.close(fd)


# Sets up a private mount namespace whose /dev is a tmpfs holding the usual device nodes (bound
# from the real /dev) and, at /dev/log, the test's socket; then keeps the namespace alive until
# its stdin closes. The host's /dev and any syslog daemon listening there are left alone.
NAMESPACE_SETUP = r"""
set -e
dev="$1"
sock="$2"
mount -t tmpfs -o mode=0755 nczarrfs-test-dev "$dev"
for node in null zero full random urandom tty fuse; do
    if [ -e "/dev/$node" ]; then
        touch "$dev/$node"
        mount --bind "/dev/$node" "$dev/$node"
    fi
done
ln -s /proc/self/fd "$dev/fd"
ln -s /proc/self/fd/0 "$dev/stdin"
ln -s /proc/self/fd/1 "$dev/stdout"
ln -s /proc/self/fd/2 "$dev/stderr"
touch "$dev/log"
mount --bind "$sock" "$dev/log"
mount --move "$dev" /dev
echo ready
exec cat
"""

# Run inside the namespace: one file operation on a mount, printing the errno name it failed
# with (or "ok").
OPERATION = """
import errno, os, sys
op, path = sys.argv[1:]
try:
    if op == "read":
        fd = os.open(path, os.O_RDONLY)
        os.pread(fd, 100, 2 * 32 * 1024)
    elif op == "rmdir":
        os.rmdir(path)
except OSError as e:
    print(errno.errorcode[e.errno])
else:
    print("ok")
"""


class SyslogNamespace:
    """A private mount namespace (unshare -m) whose /dev/log is the datagram socket `sock`:
    daemons mounted in it log there, whatever syslog daemon the host runs. Its mounts are seen
    only inside, so mounting, file operations and unmounting all go through nsenter."""

    def __init__(self, binary: Path, tmp: Path):
        self.binary = binary
        self.tmp = tmp
        self.mounts: list[Path] = []
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(tmp / "log.sock"))
        self.sock.settimeout(0.2)
        (tmp / "dev").mkdir()
        self.holder = subprocess.Popen(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", NAMESPACE_SETUP,
             "sh", str(tmp / "dev"), str(tmp / "log.sock")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        ready = self.holder.stdout.readline()
        if ready != "ready\n":
            self.holder.stdin.close()
            err = self.holder.stderr.read()
            self.holder.wait(timeout=10)
            self.sock.close()
            pytest.fail(f"cannot set up a mount namespace with a private /dev/log: {err}")

    def run(self, *cmd: str) -> subprocess.CompletedProcess:
        return subprocess.run(["nsenter", f"--mount=/proc/{self.holder.pid}/ns/mnt", "--", *cmd],
                              capture_output=True, text=True, timeout=60, check=False)

    def is_mounted(self, path: Path) -> bool:
        target = str(path.resolve())
        mounts = Path(f"/proc/{self.holder.pid}/mounts").read_text()
        return any(line.split()[1] == target for line in mounts.splitlines())

    def mount(self, location: str, *options: str, log: Path | None = None) -> Path:
        mnt = self.tmp / f"mnt{len(self.mounts) + 1}"
        mnt.mkdir()
        self.mounts.append(mnt)
        args = [str(self.binary), "mount"]
        for o in options:
            args += ["-o", o]
        if log is not None:
            args += ["--log-file", str(log)]
        r = self.run(*args, location, str(mnt))
        assert r.returncode == 0, f"mount failed ({r.returncode}): {r.stderr}"
        assert self.is_mounted(mnt), "nczarrfs mount exited 0 but nothing is mounted"
        return mnt

    def errno_of(self, op: str, path: Path) -> str:
        """The errno name `op` ("read" or "rmdir") on `path` fails with inside, or "ok"."""
        r = self.run(sys.executable, "-c", OPERATION, op, str(path))
        assert r.returncode == 0, r.stderr
        return r.stdout.strip()

    def close(self) -> None:
        for mnt in self.mounts:
            pids = daemon_pids(mnt)
            for cmd in (["fusermount3", "-u"], ["umount"], ["umount", "-l"]):
                if not self.is_mounted(mnt):
                    break
                self.run(*cmd, str(mnt))
            if not wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), 20):
                for p in pids:
                    os.kill(p, signal.SIGKILL)
        self.holder.stdin.close()
        try:
            self.holder.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.holder.kill()
            self.holder.wait()
        self.sock.close()


@pytest.fixture
def syslog_ns(binary, tmp_path):
    ns = SyslogNamespace(binary, tmp_path)
    try:
        yield ns
    finally:
        ns.close()


def received(sock: socket.socket, want: str, timeout: float = 10.0) -> list[str]:
    """Syslog lines received until one contains `want` (or the timeout)."""
    lines: list[str] = []

    def got() -> bool:
        try:
            lines.append(sock.recv(65536).decode(errors="replace"))
        except socket.timeout:
            pass
        return any(want in line for line in lines)

    wait_until(got, timeout)
    return lines


def test_a_daemon_logs_to_syslog_without_log_file(syslog_ns, tmp_path):
    corrupt_store(tmp_path / "bad.zarr")
    mnt = syslog_ns.mount(str(tmp_path / "bad.zarr"))
    assert syslog_ns.errno_of("read", mnt / "a" / "data") == "EIO"
    lines = [ln for ln in received(syslog_ns.sock, "a/2.0") if "a/2.0" in ln]
    assert lines, "no syslog line names the corrupt chunk"
    pid = daemon_pids(mnt)[0]
    assert lines[0].startswith(f"{DAEMON_ERR}"), lines[0]
    assert f"nczarrfs[{pid}]:" in lines[0], lines[0]

    rw = syslog_ns.mount(nczarr_dataset(tmp_path / "ds.file"), "rw")
    assert syslog_ns.errno_of("rmdir", rw / "temp") == "EPERM"
    lines = [ln for ln in received(syslog_ns.sock, "EPERM") if "EPERM" in ln]
    assert lines and lines[0].startswith(DAEMON_WARNING) and "temp" in lines[0], lines


def test_log_file_wins_over_syslog(syslog_ns, tmp_path):
    corrupt_store(tmp_path / "bad.zarr")
    log = tmp_path / "mount.log"
    mnt = syslog_ns.mount(str(tmp_path / "bad.zarr"), log=log)
    assert syslog_ns.errno_of("read", mnt / "a" / "data") == "EIO"
    assert wait_until(lambda: "a/2.0" in log.read_text())
    assert not [ln for ln in received(syslog_ns.sock, "a/2.0", 1.0) if "a/2.0" in ln]


def test_foreground_logs_to_stderr(binary, tmp_path):
    corrupt_store(tmp_path / "bad.zarr")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    proc = subprocess.Popen([str(binary), "mount", "-f", str(tmp_path / "bad.zarr"), str(mnt)],
                            stderr=subprocess.PIPE, text=True)
    try:
        assert wait_until(lambda: is_mounted(mnt)), "not mounted"
        read_corrupt(mnt)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err
        assert "a/2.0" in err and "ERROR" in err, err
        assert "Unmount failed" not in err, err
    finally:
        if proc.poll() is None:
            proc.kill()
        unmount(mnt)


def test_external_umount_logs_no_error(mounter, tmp_path):
    log = tmp_path / "mount.log"
    mnt = mounter.mount(nczarr_dataset(tmp_path / "ds.file"), log=log)
    assert (mnt / "@attributes" / "title").read_text() == "mount test"
    pids = daemon_pids(mnt)
    subprocess.run(["umount", str(mnt)], check=True)
    assert wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), 20)
    text = log.read_text()
    assert "Unmount failed" not in text and "ERROR" not in text, text


@pytest.mark.parametrize("foreground", [False, True])
def test_a_log_file_that_cannot_be_opened_is_named_with_its_error(binary, tmp_path, foreground):
    """The daemon's stderr is /dev/null: the log file is opened before it is forked, so its
    error reaches the caller as it does with -f (and through the helper's `log_file=`)."""
    location = nczarr_dataset(tmp_path / "ds.file")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    (tmp_path / "adir").mkdir()
    cases = [(tmp_path / "missing" / "x.log", os.strerror(errno.ENOENT)),
             (tmp_path / "adir", os.strerror(errno.EISDIR))]
    try:
        for log, reason in cases:
            args = [str(binary), "mount", *(["-f"] if foreground else []), "--log-file",
                    str(log), location, str(mnt)]
            r = subprocess.run(args, capture_output=True, text=True, timeout=60)
            assert r.returncode == 1
            assert r.stderr.startswith(f"nczarrfs: {log}: {reason}"), r.stderr
            assert not is_mounted(mnt)
            assert not daemon_pids(mnt)
    finally:
        unmount(mnt)


def test_a_foreground_mount_that_fails_says_why_on_stderr_and_in_its_log(binary, tmp_path):
    """`-f` with a log file (the systemd unit with `log_file=` in its options): the reason a
    mount fails reaches the caller's stderr (the journal), not only the log file."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "obs.log"
    missing = tmp_path / "missing.file"
    r = subprocess.run([str(binary), "mount", "-f", "-o", f"ro,log_file={log}", str(missing),
                        str(mnt)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert r.stderr.startswith(f"nczarrfs: {missing}: {os.strerror(errno.ENOENT)}"), r.stderr
    assert str(missing) in log.read_text()
    assert not is_mounted(mnt)
