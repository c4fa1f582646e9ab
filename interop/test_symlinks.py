"""Root's `put`, `gen`, `copy` and `dump` on datasets and directories that an ordinary user
(`nobody`) owns and may write to: no symbolic link the user plants there makes root write
into, give away or show a file outside the dataset.

Expectations come from first principles: a planted link's target keeps its bytes, owner and
mode; the bytes of a file only root may read never reach the output; a file that root
rewrites keeps its owner and mode, as `cp` over it would; the values stored are those
netCDF4-python reads back. The links are planted at the names earlier versions gave their
temporary files (a fixed prefix and the writer's process id, which `sh -c '…; exec …'` knows
before the writer runs): those versions wrote through them.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path

import netCDF4
import numpy as np
import pytest

from conftest import nczarrfs_binary

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="needs root, which plays the privileged writer")

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
VICTIM = b"root-only file\n"
#: As long as a chunk of v (four int32), so that a reader that follows the link decodes it.
SECRET = b"TOPSECRET-ROOT!!"


@pytest.fixture
def shared():
    """A directory both root and `nobody` can reach (pytest's tmp_path is private to root)."""
    path = Path(tempfile.mkdtemp(prefix="nczarrfs-symlinks-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path)


def victim(dir: Path) -> Path:
    """A file only root may read and write."""
    path = dir / "victim"
    path.write_bytes(VICTIM)
    path.chmod(0o600)
    return path


def assert_untouched(path: Path) -> None:
    st = path.stat()
    assert path.read_bytes() == VICTIM
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (0, 0, 0o600)


def give_to_nobody(path: Path) -> None:
    for p in [path, *path.rglob("*")]:
        os.lchown(p, NOBODY, NOBODY)


def plant(link: Path, target: Path) -> None:
    subprocess.run([*AS_NOBODY, "ln", "-s", str(target), str(link)], check=True)


def make(path: Path, n: int = 4, chunk: int = 4) -> None:
    """NCZarr dataset `path` with int v(x = n), chunks of `chunk`, values 1..n."""
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file", "w") as nc:
        nc.createDimension("x", n)
        v = nc.createVariable("v", "i4", ("x",), chunksizes=(chunk,))
        v[:] = np.arange(1, n + 1, dtype="i4")


def read(path: Path) -> np.ndarray:
    """v of the dataset `path`, a directory or a zip archive (this netcdf-c reads no zip:
    extracted, netcdf-c's layout keeps the dataset in a folder named after the archive)."""
    if path.suffix == ".zip":
        extracted = path.parent.parent / f"{path.name}.extracted"
        with zipfile.ZipFile(path) as z:
            z.extractall(extracted)
        path = extracted / path.stem
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file") as nc:
        return nc["v"][:].data


def zip_of(store: Path, archive: Path) -> None:
    """`store` zipped as netcdf-c lays an archive out (its files under a folder named after
    the archive)."""
    with zipfile.ZipFile(archive, "w") as z:
        folder = archive.stem
        z.write(store, folder + "/")
        for p in sorted(store.rglob("*")):
            z.write(p, f"{folder}/{p.relative_to(store)}")


def run_after_planting(plants: list[str], *args: str) -> subprocess.CompletedProcess:
    """Runs nczarrfs as root with `args`, once `nobody` has planted links (shell commands in
    which `$$` is the process id nczarrfs will have)."""
    script = "; ".join(plants) + f'; exec "{nczarrfs_binary()}" "$@"'
    return subprocess.run(["sh", "-c", script, "sh", *args], capture_output=True, timeout=120)


def ln_as_nobody(target: Path, link: str) -> str:
    return f'{" ".join(AS_NOBODY)} ln -s "{target}" "{link}"'


def test_root_put_into_a_users_dataset_writes_through_no_planted_link(shared):
    ds = shared / "ds.file"
    make(ds)
    give_to_nobody(ds)
    target = victim(shared)
    plants = [ln_as_nobody(target, f"{ds}/v/.nczarrfs-tmp.{name}.$$.{n}")
              for name in ["0", ".zarray", ".zattrs"] for n in range(4)]
    values = shared / "in.bin"
    values.write_bytes(np.array([9, 8], "<i4").tobytes())
    r = run_after_planting(plants, "put", str(ds), "v", "--start", "0", "--count", "2",
                           "-i", str(values))
    assert r.returncode == 0, r.stderr
    assert_untouched(target)
    np.testing.assert_array_equal(read(ds), [9, 8, 3, 4])


def test_root_put_keeps_the_owner_and_mode_of_the_files_it_rewrites(shared):
    ds = shared / "ds.file"
    make(ds)
    give_to_nobody(ds)
    chunk = ds / "v" / "0"
    chunk.chmod(0o600)
    values = shared / "in.bin"
    values.write_bytes(np.array([9], "<i4").tobytes())
    r = subprocess.run([str(nczarrfs_binary()), "put", str(ds), "v", "--count", "1", "-i",
                        str(values)], capture_output=True)
    assert r.returncode == 0, r.stderr
    st = chunk.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (NOBODY, NOBODY, 0o600)
    np.testing.assert_array_equal(read(ds), [9, 2, 3, 4])


def test_root_put_into_a_users_archive_writes_through_and_gives_away_no_planted_link(shared):
    userdir = shared / "userdir"
    userdir.mkdir()
    make(shared / "src")
    archive = userdir / "ds.zip"
    zip_of(shared / "src", archive)
    archive.chmod(0o640)
    give_to_nobody(userdir)
    target = victim(shared)
    plants = [ln_as_nobody(target, f"{userdir}/.ds.zip.nczarrfs-tmp.$$"),
              ln_as_nobody(target, f"{userdir}/.ds.zip.nczarrfs-tmp.spill.$$")]
    values = shared / "in.bin"
    values.write_bytes(np.array([9], "<i4").tobytes())
    r = run_after_planting(plants, "put", str(archive), "v", "--count", "1", "-i", str(values))
    assert r.returncode == 0, r.stderr
    assert_untouched(target)
    st = archive.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (NOBODY, NOBODY, 0o640)
    np.testing.assert_array_equal(read(archive), [9, 2, 3, 4])


@pytest.mark.parametrize("kind", ["file", "zip"])
def test_root_gen_and_copy_into_a_users_directory_follow_no_planted_link(shared, kind):
    """The destination is built beside its place under a new name and moved there: a link at
    the staging name earlier versions used (and at the new archive's temporary name below
    it) leads nowhere."""
    userdir = shared / "userdir"
    userdir.mkdir()
    give_to_nobody(userdir)
    target = victim(shared)
    rootdir = shared / "rootdir"
    rootdir.mkdir(mode=0o700)
    cdl = shared / "s.cdl"
    cdl.write_text("netcdf s {\ndimensions:\n  x = 4 ;\nvariables:\n  int v(x) ;\n"
                   "data:\n  v = 1, 2, 3, 4 ;\n}\n")
    src = shared / "src.file"
    make(src)
    for command, inputs in [("gen", [str(cdl)]), ("copy", [str(src)])]:
        out = userdir / f"{command}.{kind}"
        staging = f"{userdir}/.{out.name}.nczarrfs-$$"
        plants = [ln_as_nobody(target if kind == "zip" else rootdir, staging),
                  ln_as_nobody(target, f"{userdir}/..{out.name}.nczarrfs-$$.nczarrfs-tmp.$$")]
        dest = f"file://{out}#mode=nczarr,{kind}"
        args = [command, "-o", dest, *inputs] if command == "gen" else [command, *inputs, dest]
        r = run_after_planting(plants, *args)
        assert r.returncode == 0, r.stderr
        assert_untouched(target)
        assert list(rootdir.iterdir()) == []
        np.testing.assert_array_equal(read(out), [1, 2, 3, 4])


def test_root_dump_and_copy_show_no_file_a_link_leads_out_to(shared, nczarrfs):
    """A chunk that is a link to a file only root may read is an error naming its key, for
    `dump` and `copy` alike; a link that stays inside the dataset is read as its target."""
    secret = shared / "secret"
    secret.write_bytes(SECRET)
    secret.chmod(0o600)
    ds = shared / "ds.file"
    make(ds, n=8, chunk=4)
    (ds / "v" / "1").unlink()
    give_to_nobody(ds)
    plant(ds / "v" / "1", Path("0"))
    r = nczarrfs("dump", str(ds))
    assert r.returncode == 0, r.stderr
    assert b"v = 1, 2, 3, 4, 1, 2, 3, 4 ;" in r.stdout, r.stdout
    (ds / "v" / "1").unlink()
    plant(ds / "v" / "1", secret)
    r = nczarrfs("dump", str(ds))
    assert r.returncode != 0
    assert SECRET not in r.stdout + r.stderr
    for value in np.frombuffer(SECRET, "<i4"):
        assert str(value).encode() not in r.stdout
    assert b'key "v/1"' in r.stderr and b"leads out of the dataset" in r.stderr, r.stderr
    copy = shared / "copy.file"
    r = nczarrfs("copy", str(ds), str(copy))
    assert r.returncode != 0
    assert b'key "v/1"' in r.stderr, r.stderr
    assert not copy.exists()
    found = subprocess.run(["grep", "-r", "-l", SECRET.decode(), str(shared)],
                           capture_output=True, text=True).stdout.split()
    assert found == [str(secret)]
