"""Where a mount's log lines go: `--log-file` wins; otherwise a daemon logs to syslog and `-f`
to stderr. The lines that matter (a corrupt chunk's key, an EPERM refusal) arrive; the error
fuser logs when it finds the mount already gone after `umount` does not."""

from __future__ import annotations

import errno
import os
import signal
import socket
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import daemon_pids, is_mounted, unmount, wait_until  # noqa: E402
from datasets import nczarr_dataset  # noqa: E402

DEV_LOG = Path("/dev/log")
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


@pytest.fixture
def syslog_socket():
    """A datagram socket at /dev/log standing in for the syslog daemon, removed afterwards."""
    if DEV_LOG.exists() or DEV_LOG.is_symlink():
        pytest.skip("/dev/log exists: a syslog daemon runs here; not replacing it")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        sock.bind(str(DEV_LOG))
    except OSError as e:
        sock.close()
        pytest.skip(f"cannot create /dev/log: {e}")
    sock.settimeout(0.2)
    try:
        yield sock
    finally:
        sock.close()
        if DEV_LOG.exists() and stat.S_ISSOCK(DEV_LOG.stat().st_mode):
            DEV_LOG.unlink()


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


def test_a_daemon_logs_to_syslog_without_log_file(mounter, tmp_path, syslog_socket):
    corrupt_store(tmp_path / "bad.zarr")
    mnt = mounter.mount(str(tmp_path / "bad.zarr"))
    read_corrupt(mnt)
    lines = [ln for ln in received(syslog_socket, "a/2.0") if "a/2.0" in ln]
    assert lines, "no syslog line names the corrupt chunk"
    pid = daemon_pids(mnt)[0]
    assert lines[0].startswith(f"{DAEMON_ERR}"), lines[0]
    assert f"nczarrfs[{pid}]:" in lines[0], lines[0]

    rw = mounter.mount(nczarr_dataset(tmp_path / "ds.file"), "rw")
    with pytest.raises(OSError) as err:
        os.rmdir(rw / "temp")
    assert err.value.errno == errno.EPERM
    lines = [ln for ln in received(syslog_socket, "EPERM") if "EPERM" in ln]
    assert lines and lines[0].startswith(DAEMON_WARNING) and "temp" in lines[0], lines


def test_log_file_wins_over_syslog(mounter, tmp_path, syslog_socket):
    corrupt_store(tmp_path / "bad.zarr")
    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(tmp_path / "bad.zarr"), log=log)
    read_corrupt(mnt)
    assert wait_until(lambda: "a/2.0" in log.read_text())
    assert not [ln for ln in received(syslog_socket, "a/2.0", 1.0) if "a/2.0" in ln]


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
