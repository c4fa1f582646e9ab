"""Root's mounts (`-o allow_other`, as the fstab example has them) of a dataset that an
ordinary user (`nobody`) owns: no symbolic link the user plants makes the daemon write into,
or serve, a file outside the dataset.

Expectations come from first principles: a planted link's target keeps its bytes, owner and
mode; the bytes of a file only root may read never reach the user; a chunk the mount rewrites
keeps its owner and mode, as `cp` over it would; the values stored are those netCDF4-python
reads back after the unmount.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import netCDF4
import numpy as np
import pytest

from conftest import Mounter, daemon_pids, unmount

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root, which runs the daemon")

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
VICTIM = b"root-only file\n"
#: Chunks of a page, so that the pages of one can be read without the other's.
CHUNK = 4096
#: As long as a chunk, so that a reader that follows a link to it decodes it.
SECRET = b"TOPSECRET-ROOT!!" * (CHUNK // 16)


@pytest.fixture
def shared(binary):
    """A directory both root and `nobody` can reach (pytest's tmp_path is private to root),
    and a mounter that puts its mount points there."""
    path = Path(tempfile.mkdtemp(prefix="nczarrfs-symlinks-"))
    path.chmod(0o755)
    mounter = Mounter(binary, path)
    try:
        yield path, mounter
    finally:
        mounter.cleanup()
        shutil.rmtree(path)


def make(path: Path, values: dict[str, bytes]) -> None:
    """NCZarr dataset `path`: a ubyte variable per entry of `values`, in chunks of CHUNK."""
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file", "w") as nc:
        for name, data in values.items():
            nc.createDimension(f"n_{name}", len(data))
            v = nc.createVariable(name, "u1", (f"n_{name}",), chunksizes=(min(CHUNK, len(data)),))
            v[:] = np.frombuffer(data, "u1")


def read(path: Path, name: str) -> bytes:
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file") as nc:
        return nc[name][:].data.tobytes()


def give_to_nobody(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        os.lchown(p, NOBODY, NOBODY)


def as_nobody(*cmd: str, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([*AS_NOBODY, *cmd], capture_output=True, timeout=60, **kw)


def test_a_root_rw_mount_writes_through_no_link_a_user_planted(shared):
    """The user reads the daemon's process id from ps and plants links at the temporary
    names earlier versions used (`.nczarrfs-tmp.NAME.PID.N`, N counting from 0), then writes
    through the mount: the bytes land in the chunk, which keeps its owner and mode, and the
    links' target stays as it was."""
    dir, mounter = shared
    ds = dir / "ds.file"
    make(ds, {"v": b"." * 16})
    give_to_nobody(ds)
    chunk = ds / "v" / "0"
    chunk.chmod(0o600)
    victim = dir / "victim"
    victim.write_bytes(VICTIM)
    victim.chmod(0o600)
    mnt = mounter.mount(str(ds), "rw,allow_other")
    (pid,) = daemon_pids(mnt)
    for name in ["0", ".zarray"]:
        for n in range(8):
            as_nobody("ln", "-s", str(victim), str(ds / "v" / f".nczarrfs-tmp.{name}.{pid}.{n}"),
                      check=True)
    written = b"* * * * * root x"
    r = as_nobody("dd", f"of={mnt}/v/data", "conv=notrunc", "status=none", input=written)
    assert r.returncode == 0, r.stderr
    unmount(mnt)
    st = victim.stat()
    assert victim.read_bytes() == VICTIM
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, 0o600)
    st = chunk.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (NOBODY, NOBODY, 0o600)
    assert read(ds, "v") == written


def test_a_root_ro_mount_serves_no_file_a_link_leads_out_to(shared):
    """A chunk that is a link to a file only root may read fails its reads with EIO and one
    log line naming its key; the chunk before it still reads, and so does a chunk linked to
    another one inside the dataset. The dataset's root may itself be a link."""
    dir, mounter = shared
    secret = dir / "secret"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    assert as_nobody("cat", str(secret)).returncode != 0
    ds = dir / "ds.file"
    make(ds, {"v": b"A" * CHUNK + b"B" * CHUNK, "w": b"C" * CHUNK + b"D" * CHUNK})
    give_to_nobody(ds)
    for name, target in [("v", str(secret)), ("w", "0")]:
        (ds / name / "1").unlink()
        as_nobody("ln", "-s", target, str(ds / name / "1"), check=True)
    root_link = dir / "link.file"
    root_link.symlink_to(ds)
    log = dir / "mount.log"
    mnt = mounter.mount(str(root_link), "ro,allow_other", log=log)
    r = as_nobody("cat", f"{mnt}/v/data")
    assert r.returncode != 0 and b"Input/output error" in r.stderr, r
    assert b"TOPSECRET" not in r.stdout
    r = as_nobody("dd", f"if={mnt}/v/data", f"bs={CHUNK}", "count=1", "status=none")
    assert r.returncode == 0 and r.stdout == b"A" * CHUNK, r
    r = as_nobody("cat", f"{mnt}/w/data")
    assert r.returncode == 0 and r.stdout == b"C" * 2 * CHUNK, r
    unmount(mnt)
    text = log.read_text()
    assert 'key "v/1"' in text and "leads out of the dataset" in text, text
    assert "TOPSECRET" not in text
