"""The commands of systemd/nczarrfs@.service, run as systemd runs them (systemd itself need not
be running): what the unit's cleanup after a stop may and may not unmount."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import REPO, daemon_pids, is_mounted, wait_until  # noqa: E402
from datasets import nczarr_dataset  # noqa: E402

UNIT = REPO / "systemd" / "nczarrfs@.service"


def unit_command(key: str, binary: Path, env: dict[str, str]) -> list[str]:
    """The unit's `key=` command line with its variables replaced, as systemd splits it (the
    prefixes `-`, `@`, `:`, `+`, `!` only change how systemd treats the command)."""
    lines = [ln.split("=", 1)[1] for ln in UNIT.read_text().splitlines()
             if ln.startswith(f"{key}=")]
    assert len(lines) == 1, f"{key}: {lines}"
    line = lines[0].lstrip("-@:+!")
    for name, value in env.items():
        line = line.replace("${" + name + "}", value)
    assert "$" not in line, line
    return shlex.split(line.replace("/usr/local/bin/nczarrfs", str(binary)))


def mounts_at(path: Path) -> list[str]:
    """The filesystem types mounted at `path`, bottom first."""
    target = str(path.resolve())
    with open("/proc/self/mounts") as f:
        return [ln.split()[2] for ln in f if ln.split()[1] == target]


@pytest.fixture
def service(binary, tmp_path):
    """A MOUNTPOINT that is a tmpfs holding a file (a mount of its own, as /srv or /data
    often are), the unit's environment, and everything unmounted at the end."""
    if os.geteuid() != 0:
        pytest.fail("mounting the tmpfs needs root")
    location = nczarr_dataset(tmp_path / "ds.file")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(mnt)], check=True)
    (mnt / "file").write_text("precious")
    env = {"LOCATION": location, "MOUNTPOINT": str(mnt), "OPTIONS": "ro"}
    try:
        yield env
    finally:
        for pid in daemon_pids(mnt):
            os.kill(pid, signal.SIGKILL)
        while mounts_at(mnt):
            subprocess.run(["umount", "-l", str(mnt)], check=True)


def stop_post(binary, env) -> subprocess.CompletedProcess:
    r = subprocess.run(unit_command("ExecStopPost", binary, env), capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r


def start(binary, env) -> subprocess.Popen:
    """ExecStart (`-f`): the daemon stays in the foreground, as systemd's main process."""
    mnt = Path(env["MOUNTPOINT"])
    p = subprocess.Popen(unit_command("ExecStart", binary, env), stderr=subprocess.PIPE,
                         text=True)
    assert wait_until(lambda: mounts_at(mnt)[-1:] == ["fuse.nczarrfs"] or p.poll() is not None)
    return p


def test_after_a_clean_stop_the_filesystem_under_the_mount_point_stays(binary, service):
    mnt = Path(service["MOUNTPOINT"])
    daemon = start(binary, service)
    assert mounts_at(mnt) == ["tmpfs", "fuse.nczarrfs"]
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.stderr.read()
    stop_post(binary, service)
    assert mounts_at(mnt) == ["tmpfs"]
    assert (mnt / "file").read_text() == "precious"


def test_after_a_failed_start_the_filesystem_at_the_mount_point_stays(binary, service):
    mnt = Path(service["MOUNTPOINT"])
    daemon = start(binary, dict(service, LOCATION=str(mnt.parent / "missing.zarr")))
    assert daemon.wait(30) == 1
    stop_post(binary, service)
    assert mounts_at(mnt) == ["tmpfs"]
    assert (mnt / "file").read_text() == "precious"


def test_a_start_refused_for_a_mount_there_already_leaves_that_mount(binary, service, mounter):
    mnt = Path(service["MOUNTPOINT"])
    r = mounter.run("mount", "-o", "ro", service["LOCATION"], str(mnt))
    assert r.returncode == 0, r.stderr
    daemon = start(binary, service)
    assert daemon.wait(30) == 1
    assert "already" in daemon.stderr.read()
    stop_post(binary, service)
    assert mounts_at(mnt) == ["tmpfs", "fuse.nczarrfs"]
    assert (mnt / "@attributes" / "title").read_text() == "mount test"


def test_the_dead_mount_of_a_killed_daemon_is_detached_and_only_it(binary, service):
    mnt = Path(service["MOUNTPOINT"])
    daemon = start(binary, service)
    daemon.kill()
    daemon.wait(30)
    with pytest.raises(OSError):
        os.listdir(mnt)
    r = stop_post(binary, service)
    assert "detached the dead mount" in r.stderr
    assert mounts_at(mnt) == ["tmpfs"]
    assert (mnt / "file").read_text() == "precious"
    # Run again (systemd does after every stop), there is nothing dead left to detach.
    assert stop_post(binary, service).stderr == ""
    assert mounts_at(mnt) == ["tmpfs"]


def test_a_dead_mount_reached_through_a_symbolic_link_is_detached_and_restart_mounts(
        binary, service):
    """MOUNTPOINT a symbolic link to the directory, as `mount` accepts it: the cleanup must
    find the dead mount where the link leads, or every restart is refused there."""
    mnt = Path(service["MOUNTPOINT"])
    link = mnt.parent / "link"
    link.symlink_to(mnt)
    env = dict(service, MOUNTPOINT=str(link))
    daemon = start(binary, env)
    assert mounts_at(mnt) == ["tmpfs", "fuse.nczarrfs"]
    daemon.kill()
    daemon.wait(30)
    r = stop_post(binary, env)
    assert "detached the dead mount" in r.stderr
    assert mounts_at(mnt) == ["tmpfs"]
    assert (mnt / "file").read_text() == "precious"
    restarted = start(binary, env)
    assert mounts_at(mnt) == ["tmpfs", "fuse.nczarrfs"], restarted.stderr.read()
    restarted.send_signal(signal.SIGTERM)
    assert restarted.wait(30) == 0, restarted.stderr.read()


def test_a_dead_mount_point_without_anything_under_it_is_detached(binary, service):
    mnt = Path(service["MOUNTPOINT"])
    subprocess.run(["umount", str(mnt)], check=True)
    daemon = start(binary, service)
    daemon.kill()
    daemon.wait(30)
    stop_post(binary, service)
    assert not is_mounted(mnt)
    assert list(mnt.iterdir()) == []


def test_the_unit_logs_to_the_file_its_options_name(binary, service, tmp_path):
    """The unit's only settings are LOCATION, MOUNTPOINT and OPTIONS: a log file is
    `log_file=PATH` among the options, reopened by its path on `systemctl reload` (SIGHUP)."""
    log = tmp_path / "obs.log"
    env = dict(service, OPTIONS=f"ro,log_file={log}")
    mnt = Path(env["MOUNTPOINT"])
    daemon = start(binary, env)
    try:
        assert daemon.poll() is None, daemon.stderr.read()
        daemon.send_signal(signal.SIGUSR2)
        assert wait_until(lambda: log.exists() and "SIGUSR2" in log.read_text())
        log.rename(tmp_path / "obs.log.1")
        daemon.send_signal(signal.SIGHUP)
        assert wait_until(log.exists)
        daemon.send_signal(signal.SIGUSR2)
        assert wait_until(lambda: "SIGUSR2" in log.read_text())
    finally:
        daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.stderr.read()
    assert mounts_at(mnt) == ["tmpfs"]


def unit_setting(key: str) -> str:
    values = [ln.split("=", 1)[1] for ln in UNIT.read_text().splitlines()
              if ln.startswith(f"{key}=")]
    assert len(values) == 1, f"{key}: {values}"
    return values[0]


def hardened(command: list[str]) -> list[str]:
    """`command` under the unit's CapabilityBoundingSet= and NoNewPrivileges=, which setpriv
    applies as systemd does; the unit's system call filters need systemd itself."""
    caps = unit_setting("CapabilityBoundingSet").split()
    assert unit_setting("NoNewPrivileges") == "yes"
    bounding = ",".join(["-all"] + ["+" + c.removeprefix("CAP_").lower() for c in caps])
    return ["setpriv", "--no-new-privs", "--inh-caps=-all", f"--bounding-set={bounding}",
            *command]


def test_the_hardened_unit_mounts_and_writes_a_dataset_owned_by_another_user(binary, service):
    """Root cut down to the unit's capabilities still mounts (CAP_SYS_ADMIN), writes into a
    dataset that belongs to someone else (mode 0755/0644: CAP_DAC_OVERRIDE lets root in) and
    gives every rewritten object back its owner (CAP_CHOWN) and mode (CAP_FOWNER, the object
    being someone else's by then)."""
    import netCDF4
    import numpy as np

    location = service["LOCATION"]
    store = Path(location.removeprefix("file://").split("#")[0])
    nobody = 65534
    for path in [store, *store.rglob("*")]:
        os.chown(path, nobody, nobody)
        os.chmod(path, 0o755 if path.is_dir() else 0o644)
    env = dict(service, OPTIONS="rw")
    mnt = Path(env["MOUNTPOINT"])
    daemon = subprocess.Popen(hardened(unit_command("ExecStart", binary, env)),
                              stderr=subprocess.PIPE, text=True)
    assert wait_until(lambda: mounts_at(mnt)[-1:] == ["fuse.nczarrfs"] or
                      daemon.poll() is not None)
    assert daemon.poll() is None, daemon.stderr.read()
    status = Path(f"/proc/{daemon.pid}/status").read_text()
    assert "NoNewPrivs:\t1" in status, status
    # Only the unit's capabilities remain (numbers from linux/capability.h).
    numbers = {"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_FOWNER": 3, "CAP_SYS_ADMIN": 21}
    expected = sum(1 << numbers[c] for c in unit_setting("CapabilityBoundingSet").split())
    bounding = next(ln for ln in status.splitlines() if ln.startswith("CapBnd:"))
    assert int(bounding.split()[1], 16) == expected, bounding
    with open(mnt / "counts" / "data", "r+b") as f:
        f.write(np.arange(35, dtype="i2").tobytes())
    (mnt / "@attributes" / "history").write_text("written by a hardened unit")
    daemon.send_signal(signal.SIGTERM)
    assert daemon.wait(30) == 0, daemon.stderr.read()
    assert mounts_at(mnt) == ["tmpfs"]
    with netCDF4.Dataset(location) as ds:
        assert ds.history == "written by a hardened unit"
        assert (ds["counts"][:] == np.arange(35).reshape(5, 7)).all()
    owners = {(p.relative_to(store), p.stat().st_uid, p.stat().st_gid)
              for p in [store, *store.rglob("*")]}
    assert {o for o in owners if o[1:] != (nobody, nobody)} == set()
