"""Temporary files (`.nczarrfs-tmp.NAME.PID.TOKEN`) that writers leave in a directory dataset:
a writer killed between writing them and renaming them into place leaves them, and a store
that fails must remove its own. The next writer holding the dataset's lock (a `rw` mount,
`put`) removes those of writers that have ended; readers ignore them and leave them alone.
zarr-python, which warns about every such file at each listing, is the oracle for "none left"."""

from __future__ import annotations

import errno
import os
import secrets
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import daemon_pids, is_mounted, unmount, wait_until  # noqa: E402
from datasets import netcdf_values  # noqa: E402

TEMP_PREFIX = ".nczarrfs-tmp."


def nczarr_dataset(path: Path) -> str:
    """An NCZarr directory store written by netCDF4-python, of types zarr-python reads too;
    returns its location URL."""
    import netCDF4

    url = f"file://{path}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w", format="NETCDF4") as ds:
        ds.title = "leftovers"
        ds.createDimension("time", None)
        ds.createDimension("x", 4)
        ds.createVariable("temp", "f4", ("time", "x"))[:] = np.arange(8, dtype="f4").reshape(2, 4)
        ds.createVariable("counts", "i2", ("x",))[:] = np.arange(4, dtype="i2")
        ds.createGroup("sub").createVariable("vals", "i4", ("x",))[:] = [1, 2, 3, 4]
    return url


def ended_pid() -> int:
    """The process id of a process that has ended."""
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def temp_name(name: str, pid: int) -> str:
    return f"{TEMP_PREFIX}{name}.{pid}.{secrets.token_hex(8)}"


def leftovers(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob(f"{TEMP_PREFIX}*"))


def plant_killed_writers_files(root: Path) -> list[Path]:
    """What a writer killed in the middle of a flush leaves: a metadata object kept aside (a
    hard link to the live one) and a new one not renamed yet, at the root and in a variable."""
    pid = ended_pid()
    kept_aside = root / temp_name(".zattrs", pid)
    os.link(root / ".zattrs", kept_aside)
    staged = root / "temp" / temp_name(".zarray", pid)
    staged.write_text('{"zarr_format": 2, "shape": [')
    return [kept_aside, staged]


def zarr_warnings(root: Path) -> list[str]:
    import zarr

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        group = zarr.open_group(str(root), mode="r")
        sorted(group.keys())
        sorted(group["sub"].keys())
        dict(group["temp"].attrs)
    return [str(w.message) for w in caught if TEMP_PREFIX in str(w.message)]


def test_a_rw_mount_removes_what_killed_writers_left_and_readers_leave_it(mounter, tmp_path):
    root = tmp_path / "ds.file"
    location = nczarr_dataset(root)
    planted = plant_killed_writers_files(root)
    assert zarr_warnings(root), "zarr-python no longer warns: this test proves nothing"
    # A reader holds no lock: it must neither show nor remove them.
    ro = mounter.mount(location)
    assert not [n for n in os.listdir(ro) if n.startswith(TEMP_PREFIX)]
    unmount(ro)
    assert leftovers(root) == sorted(planted)
    rw = mounter.mount(location, "rw")
    # The sweep runs beside the mount's serving, which does not wait for it.
    assert wait_until(lambda: leftovers(root) == [], 30)
    (rw / "@attributes" / "after").write_text("1\n")
    pids = daemon_pids(rw)
    unmount(rw)
    assert wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), 30)
    assert leftovers(root) == []
    assert zarr_warnings(root) == []
    import netCDF4
    with netCDF4.Dataset(location) as ds:
        assert ds.title == "leftovers" and ds.after == 1
        assert ds["temp"].shape == (2, 4)


def test_put_removes_what_ended_writers_left_and_spares_a_live_ones(binary, tmp_path):
    root = tmp_path / "ds.file"
    location = nczarr_dataset(root)
    planted = plant_killed_writers_files(root)
    # A process that is still running: not a writer left over (the lock says no writer is
    # running, but the name is all there is to go by, and it is the cautious reading).
    live = root / "counts" / temp_name(".zarray", os.getpid())
    live.write_text("{")
    values = np.array([7, -7, 70, -70], dtype="=i2")
    r = subprocess.run([str(binary), "put", location, "counts"], input=values.tobytes(),
                       capture_output=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert leftovers(root) == [live]
    assert not any(p.exists() for p in planted)
    assert np.array_equal(netcdf_values(location)["/counts"], values)


def test_failed_flushes_leave_no_temporary_files(mounter, tmp_path):
    """The dataset renamed under a rw mount: every metadata flush fails (EBUSY at close: the
    dataset's path no longer leads to the directory the mount locked), and must take its
    temporary files with it."""
    root = tmp_path / "ds.file"
    location = nczarr_dataset(root)
    rw = mounter.mount(location, "rw")
    pids = daemon_pids(rw)
    moved = tmp_path / "moved.file"
    root.rename(moved)
    for i in range(3):
        with pytest.raises(OSError) as refused:
            with open(rw / "@attributes" / f"att{i}", "w") as f:
                f.write(f"{i}\n")
        assert refused.value.errno == errno.EBUSY
    unmount(rw)
    assert wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), 30)
    assert not is_mounted(rw)
    assert leftovers(moved) == []
    assert zarr_warnings(moved) == []


def test_a_rw_mount_of_a_zip_archive_removes_what_killed_writers_left_at_once(mounter, tmp_path):
    """A writer killed while it wrote a new archive leaves it beside the old one
    (`.NAME.zip.nczarrfs-tmp.PID.TOKEN`); a rw mount removes it when it takes the archive, as
    it does in a directory store, not at its first flush (which may never come). A reader
    leaves it alone, as does the writer the files of a process still running."""
    archive = tmp_path / "ds.zip"
    made = subprocess.run([str(mounter.binary), "gen", "-k", "zarr,zip", "-o", str(archive), "-"],
                          input="netcdf ds {\nvariables:\n int v ;\ndata:\n v = 1 ;\n}\n",
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    killed = tmp_path / f".ds.zip.nczarrfs-tmp.{ended_pid()}.{secrets.token_hex(8)}"
    killed.write_bytes(archive.read_bytes()[:40])
    live = tmp_path / f".ds.zip.nczarrfs-tmp.{os.getpid()}.{secrets.token_hex(8)}"
    live.write_bytes(b"PK")
    ro = mounter.mount(str(archive))
    unmount(ro)
    assert killed.exists()
    rw = mounter.mount(str(archive), "rw")
    assert not killed.exists() and live.exists()
    assert (rw / "v" / "data").read_bytes() == np.int32(1).tobytes()
    pids = daemon_pids(rw)
    unmount(rw)
    assert wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), 30)
    assert live.exists()
