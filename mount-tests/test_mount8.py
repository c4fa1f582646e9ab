"""mount(8) integration: `scripts/install` puts the helper at /sbin/mount.nczarrfs (and
/sbin/mount.fuse.nczarrfs), then `mount -t nczarrfs` and an fstab line (`mount --fstab FILE
DIR`) mount datasets. Needs root; whatever was at those paths before is put back afterwards."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import REPO, daemon_pids, is_mounted, unmount, wait_until  # noqa: E402
from datasets import nczarr_dataset  # noqa: E402

HELPER = Path("/sbin/mount.nczarrfs")
# What mount(8) runs for the type fuse.nczarrfs, the type the kernel records.
FUSE_HELPER = Path("/sbin/mount.fuse.nczarrfs")


@pytest.fixture
def installed(binary, tmp_path):
    """Runs scripts/install (no build, no systemd units) with the binary under test installed
    in a temporary prefix and the helpers in /sbin; yields the prefix."""
    if os.geteuid() != 0:
        pytest.skip("installing into /sbin needs root")
    if shutil.which("mount") is None:
        pytest.fail("mount(8) is missing: install the Debian package mount")
    backups = {}
    for helper in (HELPER, FUSE_HELPER):
        if helper.exists() or helper.is_symlink():
            backups[helper] = tmp_path / f"{helper.name}.before"
            shutil.copy2(helper, backups[helper], follow_symlinks=False)
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
        for helper in (HELPER, FUSE_HELPER):
            helper.unlink(missing_ok=True)
            if helper in backups:
                shutil.copy2(backups[helper], helper, follow_symlinks=False)


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


def test_mount_t_fuse_nczarrfs_the_type_the_kernel_shows(installed, tmp_path):
    """The type /proc/mounts and findmnt show, so the one in an fstab line copied from there:
    mount(8) looks for /sbin/mount.fuse.nczarrfs, and without it runs mount.fuse3, which
    runs `nczarrfs SOURCE DIR -o OPTIONS`."""
    nczarr_dataset(tmp_path / "ds.file")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "mount.log"
    try:
        r = mount8("-t", "fuse.nczarrfs", str(tmp_path / "ds.file"), str(mnt),
                   "-o", f"ro,nofail,log_file={log}")
        assert r.returncode == 0, r.stderr
        check_and_umount(mnt, tmp_path / "ds.file", log)
    finally:
        unmount(mnt)


def test_remount_is_refused_with_the_reason(installed, tmp_path):
    """`mount -o remount` takes the type from mountinfo (fuse.nczarrfs), as `systemctl reload`
    of a mount unit does: the helper must answer it, with the documented refusal."""
    nczarr_dataset(tmp_path / "ds.file")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        r = mount8("-t", "nczarrfs", str(tmp_path / "ds.file"), str(mnt), "-o", "ro")
        assert r.returncode == 0, r.stderr
        r = mount8("-o", "remount,ro", str(mnt))
        assert r.returncode != 0
        assert "cannot be changed; unmount it and mount again" in r.stderr, r.stderr
        assert (mnt / "@attributes" / "title").read_text() == "mount test"
    finally:
        unmount(mnt)


def test_mount_N_mounts_in_the_namespace_given(installed, tmp_path):
    """mount(8)'s -N NS: it passes `-N /proc/PID/fd/N` to the helper and leaves switching
    to it (mount(8), EXTERNAL HELPERS). The mount must appear there, and only there."""
    nczarr_dataset(tmp_path / "ds.file")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    holder = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "600"])
    try:
        ns = Path(f"/proc/{holder.pid}/ns/mnt")
        assert wait_until(lambda: ns.exists() and os.readlink(ns) != os.readlink(
            "/proc/self/ns/mnt")), "no namespace of its own"
        r = mount8("-N", str(ns), "-t", "nczarrfs", str(tmp_path / "ds.file"), str(mnt),
                   "-o", "ro")
        assert r.returncode == 0, r.stderr
        assert not is_mounted(mnt)
        inside = ["nsenter", "-t", str(holder.pid), "-m", "--"]
        r = subprocess.run([*inside, "findmnt", "-n", "-o", "FSTYPE", str(mnt)],
                           capture_output=True, text=True)
        assert r.stdout.strip() == "fuse.nczarrfs", r
        r = subprocess.run([*inside, "cat", str(mnt / "@attributes" / "title")],
                           capture_output=True, text=True)
        assert r.stdout == "mount test", r
        r = subprocess.run([*inside, "umount", str(mnt)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("form", ["pid", "file"])
def test_nczarrfs_mount_N_takes_a_pid_or_a_file_as_mount8_does(binary, tmp_path, form):
    """mount(8): -N takes "either PID of process running in that namespace or special file
    representing that namespace"; `nczarrfs mount -N` says it takes it as mount(8) does."""
    nczarr_dataset(tmp_path / "ds.file")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    holder = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sleep", "600"])
    try:
        ns = Path(f"/proc/{holder.pid}/ns/mnt")
        assert wait_until(lambda: ns.exists() and os.readlink(ns) != os.readlink(
            "/proc/self/ns/mnt")), "no namespace of its own"
        given = {"pid": str(holder.pid), "file": str(ns)}[form]
        r = subprocess.run([str(binary), "mount", "-N", given, str(tmp_path / "ds.file"),
                            str(mnt)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert not is_mounted(mnt)
        inside = ["nsenter", "-t", str(holder.pid), "-m", "--"]
        r = subprocess.run([*inside, "cat", str(mnt / "@attributes" / "title")],
                           capture_output=True, text=True)
        assert r.stdout == "mount test", r
        r = subprocess.run([*inside, "umount", str(mnt)], capture_output=True, text=True)
        assert r.returncode == 0, r.stderr
    finally:
        holder.kill()
        holder.wait()


def test_fstab_values_with_commas_quoted_as_mount8_quotes_them(installed, tmp_path):
    """fstab and mount(8) quote a value that holds a comma (mount(8): context="...:c1,c2");
    libmount passes it on quoted, and the comma must not split the option."""
    nczarr_dataset(tmp_path / "ds.file")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "obs,2024.log"
    fstab = tmp_path / "fstab"
    fstab.write_text(f'{tmp_path / "ds.file"}  {mnt}  nczarrfs  '
                     f'ro,fsname="obs,2024",log_file="{log}"  0 0\n')
    try:
        r = mount8("--fstab", str(fstab), str(mnt))
        assert r.returncode == 0, r.stderr
        r = subprocess.run(["findmnt", "-n", "-o", "SOURCE", str(mnt)], capture_output=True,
                           text=True)
        assert r.stdout.strip() == "obs,2024", r
        assert (mnt / "@attributes" / "title").read_text() == "mount test"
        os.kill(daemon_pids(mnt)[0], signal.SIGUSR2)
        assert wait_until(lambda: log.exists() and "SIGUSR2" in log.read_text())
    finally:
        unmount(mnt)


def test_nofail_skips_a_dataset_that_does_not_exist_as_mount8_skips_a_device(installed,
                                                                              tmp_path):
    """mount(8): nofail, "Do not report errors for this device if it does not exist". The
    reference is mount(8) itself with the same fstab line for ext4: `mount -a` says nothing
    and succeeds. Without nofail the missing dataset is an error."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    missing = tmp_path / "missing.file"
    outcomes = {}
    for fstype, options in [("ext4", "ro,nofail"), ("nczarrfs", "ro,nofail"),
                            ("nczarrfs", "ro")]:
        fstab = tmp_path / "fstab"
        fstab.write_text(f"{missing}  {mnt}  {fstype}  {options}  0 0\n")
        r = mount8("-a", "--fstab", str(fstab))
        outcomes[fstype, options] = (r.returncode, r.stderr)
        assert not is_mounted(mnt)
    assert outcomes["ext4", "ro,nofail"] == (0, "")
    assert outcomes["nczarrfs", "ro,nofail"] == outcomes["ext4", "ro,nofail"]
    code, stderr = outcomes["nczarrfs", "ro"]
    assert code != 0 and str(missing) in stderr, outcomes
