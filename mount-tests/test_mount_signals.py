"""Signals to a real `rw` mount daemon: every signal that would end it stores what was written
and unmounts as SIGTERM does; SIGUSR1 and SIGHUP reopen the log file (log rotation); SIGUSR2
is ignored. Stored values are checked with netCDF4-python after the daemon has exited."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import daemon_pids, is_mounted, unmount, wait_until  # noqa: E402
from datasets import netcdf_values, nczarr_dataset  # noqa: E402

# Every catchable signal whose default action ends a process, but for the faults (SIGSEGV,
# SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS, SIGABRT) and those handled otherwise (SIGHUP,
# SIGUSR1, SIGUSR2, SIGPIPE): signal(7).
STOP_SIGNALS = ["SIGTERM", "SIGINT", "SIGQUIT", "SIGALRM", "SIGVTALRM", "SIGPROF", "SIGXCPU",
                "SIGXFSZ", "SIGIO", "SIGPWR", "SIGSTKFLT", "SIGRTMIN", "SIGRTMAX"]


def signal_number(name: str) -> int:
    return int(getattr(signal, name))


def foreground_rw_mount(binary: Path, tmp_path: Path) -> tuple[subprocess.Popen, Path, str, Path]:
    location = nczarr_dataset(tmp_path / "ds.file")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "mount.log"
    daemon = subprocess.Popen([str(binary), "mount", "-f", "-o", "rw", "--log-file", str(log),
                               location, str(mnt)], env={**os.environ, "RUST_LOG": "info"})
    if not wait_until(lambda: is_mounted(mnt), 30):
        daemon.kill()
        pytest.fail("not mounted")
    return daemon, mnt, location, log


@pytest.mark.parametrize("name", STOP_SIGNALS)
def test_a_stop_signal_stores_what_an_open_file_wrote_and_unmounts(binary, tmp_path, name):
    daemon, mnt, location, log = foreground_rw_mount(binary, tmp_path)
    try:
        fd = os.open(mnt / "time" / "data", os.O_WRONLY)
        try:
            os.pwrite(fd, np.array([42.25], dtype="=f8").tobytes(), 8)
            daemon.send_signal(signal_number(name))
            # The mount is busy: it is detached, and the daemon serves this descriptor until
            # it is closed.
            assert wait_until(lambda: not is_mounted(mnt), 20), f"{name}: still mounted"
            assert daemon.poll() is None, f"{name} ended the daemon at once ({daemon.returncode})"
            os.pwrite(fd, np.array([43.5], dtype="=f8").tobytes(), 16)
        finally:
            os.close(fd)
        assert daemon.wait(timeout=60) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        unmount(mnt)
    assert np.array_equal(netcdf_values(location)["/time"], [0.0, 42.25, 43.5, 1.5])
    assert f"{name}: unmounting" in log.read_text()


def refuse_something(mnt: Path) -> None:
    """An operation the mount refuses with one warning line naming `temp`."""
    with pytest.raises(PermissionError):
        os.rmdir(mnt / "temp")


@pytest.mark.parametrize("name", ["SIGUSR1", "SIGHUP"])
def test_log_rotation_signals_reopen_the_log_file(mounter, tmp_path, monkeypatch, name):
    monkeypatch.setenv("RUST_LOG", "info")
    location = nczarr_dataset(tmp_path / "ds.file")
    log = tmp_path / "mount.log"
    mnt = mounter.mount(location, "rw", log=log)
    pids = daemon_pids(mnt)
    refuse_something(mnt)
    assert wait_until(lambda: "EPERM" in log.read_text())
    # What logrotate does without copytruncate: rename, then signal.
    rotated = tmp_path / "mount.log.1"
    log.rename(rotated)
    before = rotated.read_text()
    for pid in pids:
        os.kill(pid, signal_number(name))
    assert wait_until(lambda: log.exists() and "reopened" in log.read_text(), 20)
    (mnt / "@attributes" / "after_rotation").write_text("yes")
    refuse_something(mnt)
    assert wait_until(lambda: "EPERM" in log.read_text(), 20), log.read_text()
    assert rotated.read_text() == before
    # The rotated file is let go, so that logrotate's removal of it frees its space.
    held = [fd for p in pids for fd in Path(f"/proc/{p}/fd").iterdir()
            if os.readlink(fd) == str(rotated)]
    assert held == [], f"the daemon still holds the rotated log open: {held}"
    assert all(Path(f"/proc/{p}").exists() for p in pids), f"{name} ended the daemon"
    assert is_mounted(mnt)
    unmount(mnt)
    assert wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), 30)
    import netCDF4
    with netCDF4.Dataset(location) as ds:
        assert ds.getncattr("after_rotation") == "yes"


@pytest.mark.parametrize("fd", [3, 4])
def test_a_log_file_handed_over_as_a_descriptor_survives_a_reopen(binary, tmp_path, monkeypatch,
                                                                 fd):
    """`--log-file /dev/fd/N` with N the caller's descriptor (a pipe or file handed to the
    daemon): the reopen at SIGHUP opens that path again, so N must still be the caller's
    file then, not one the daemon opened since (its dataset directory, /dev/fuse)."""
    monkeypatch.setenv("RUST_LOG", "info")
    location = nczarr_dataset(tmp_path / "ds.file")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "caller.log"
    # The shell opens the log at descriptor `fd` for the command, as a caller hands it over.
    r = subprocess.run(["sh", "-c", f'exec "$0" mount --log-file /dev/fd/{fd} "$1" "$2" '
                        f'{fd}>>"$3"', str(binary), location, str(mnt), str(log)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    try:
        pids = daemon_pids(mnt)
        for pid in pids:
            os.kill(pid, signal.SIGHUP)
        assert wait_until(lambda: "reopened" in log.read_text(), 20), log.read_text()
        assert (mnt / "@attributes" / "title").read_text() == "mount test"
    finally:
        unmount(mnt)
    assert wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), 30)
    text = log.read_text()
    assert "unmounted" in text and "cannot reopen" not in text, text


def test_sigusr1_without_a_log_file_changes_nothing(mounter, tmp_path):
    location = nczarr_dataset(tmp_path / "ds.file")
    mnt = mounter.mount(location, "rw")
    pids = daemon_pids(mnt)
    for pid in pids:
        os.kill(pid, signal.SIGUSR1)
    (mnt / "@attributes" / "later").write_text("1\n")
    assert all(Path(f"/proc/{p}").exists() for p in pids)
    assert is_mounted(mnt)


def test_sigusr2_is_ignored_with_a_log_line(binary, tmp_path):
    daemon, mnt, location, log = foreground_rw_mount(binary, tmp_path)
    try:
        daemon.send_signal(signal.SIGUSR2)
        assert wait_until(lambda: "SIGUSR2: ignored" in log.read_text(), 20)
        with open(mnt / "time" / "data", "r+b") as f:
            f.write(np.array([9.75], dtype="=f8").tobytes())
        assert daemon.poll() is None and is_mounted(mnt)
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=60) == 0
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()
        unmount(mnt)
    assert np.array_equal(netcdf_values(location)["/time"], [9.75, 0.5, 1.0, 1.5])
