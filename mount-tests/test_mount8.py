"""mount(8) integration: `scripts/install` puts the helper at /sbin/mount.nczarrfs, then
`mount -t nczarrfs` and an fstab line (`mount --fstab FILE DIR`) mount datasets. Needs root;
whatever was at /sbin/mount.nczarrfs before is put back afterwards."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import REPO, daemon_pids, is_mounted, unmount, wait_until  # noqa: E402
from datasets import nczarr_dataset  # noqa: E402

HELPER = Path("/sbin/mount.nczarrfs")


@pytest.fixture
def installed(binary, tmp_path):
    """Runs scripts/install (no build, no systemd units) with the binary under test installed
    in a temporary prefix and the helper in /sbin; yields the prefix."""
    if os.geteuid() != 0:
        pytest.skip("installing into /sbin needs root")
    if shutil.which("mount") is None:
        pytest.fail("mount(8) is missing: install the Debian package mount")
    backup = None
    if HELPER.exists():
        backup = tmp_path / "mount.nczarrfs.before"
        shutil.copy2(HELPER, backup)
    prefix = tmp_path / "prefix"
    env = dict(os.environ, PREFIX=str(prefix), NCZARRFS_BIN=str(Path(binary).resolve()))
    try:
        r = subprocess.run([str(REPO / "scripts" / "install"), "--no-build", "--no-systemd"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert os.access(HELPER, os.X_OK)
        assert os.access(prefix / "bin" / "nczarrfs", os.X_OK)
        yield prefix
    finally:
        if backup is not None:
            shutil.copy2(backup, HELPER)
        else:
            HELPER.unlink(missing_ok=True)


def mount8(*args: str) -> subprocess.CompletedProcess:
    # mount(8) runs helpers with the environment it was given; none of ours must leak in.
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    return subprocess.run(["mount", *args], env=env, capture_output=True, text=True, timeout=60)


def check_and_umount(mnt: Path, location: Path, log: Path) -> None:
    assert is_mounted(mnt)
    assert (mnt / "@attributes" / "title").read_text() == "mount test"
    with open("/proc/self/mounts") as f:
        entries = [ln.split()[:3] for ln in f if ln.split()[1] == str(mnt.resolve())]
    assert len(entries) == 1 and entries[0][0] == str(location), entries
    assert entries[0][2] == "fuse.nczarrfs", entries
    pids = daemon_pids(mnt)
    assert len(pids) == 1
    r = subprocess.run(["umount", str(mnt)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert not is_mounted(mnt)
    assert wait_until(lambda: not Path(f"/proc/{pids[0]}").exists()), "daemon still running"
    assert log.exists() and "ERROR" not in log.read_text()


def test_mount_t_nczarrfs(installed, tmp_path):
    nczarr_dataset(tmp_path / "ds.file")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "mount.log"
    try:
        r = mount8("-t", "nczarrfs", str(tmp_path / "ds.file"), str(mnt),
                   "-o", f"ro,nofail,log_file={log}")
        assert r.returncode == 0, r.stderr
        check_and_umount(mnt, tmp_path / "ds.file", log)
    finally:
        unmount(mnt)


def test_fstab_line(installed, tmp_path):
    nczarr_dataset(tmp_path / "ds.file")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "mount.log"
    fstab = tmp_path / "fstab"
    fstab.write_text(f"# a test fstab\n{tmp_path / 'ds.file'}  {mnt}  nczarrfs  "
                     f"ro,noatime,nofail,_netdev,cache_size=16M,ttl=2,log_file={log}  0 0\n")
    try:
        r = mount8("--fstab", str(fstab), str(mnt))
        assert r.returncode == 0, r.stderr
        with open("/proc/self/mounts") as f:
            opts = [ln.split()[3] for ln in f if ln.split()[1] == str(mnt.resolve())]
        assert opts and "ro" in opts[0].split(",") and "noatime" in opts[0].split(","), opts
        check_and_umount(mnt, tmp_path / "ds.file", log)
    finally:
        unmount(mnt)
