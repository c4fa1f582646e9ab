"""Mounts whose dataset, mount point and log file have names that are not UTF-8 (Linux names
are bytes), given to `nczarrfs mount` and to the mount(8) helper.

Expected contents come from netCDF4-python, which wrote the dataset (at a UTF-8 name, since it
cannot open any other, before it was renamed), and from Debian's ncdump on the netCDF-4/HDF5
twin of the same name, whose `netcdf NAME {` line `@header.cdl` repeats.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import netCDF4
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import REPO, is_mounted, unmount  # noqa: E402

VALUES = np.arange(12, dtype=np.int32).reshape(3, 4)


def _write(target: str) -> None:
    with netCDF4.Dataset(target, "w", format="NETCDF4") as ds:
        ds.title = "bytes"
        ds.createDimension("y", 3)
        ds.createDimension("x", 4)
        v = ds.createVariable("v", "i4", ("y", "x"))
        v[:] = VALUES


@pytest.fixture
def place(tmp_path):
    """The dataset at `dir\\xfe/d\\xff.file` (and its HDF5 twin `d\\xff.nc`), and an empty
    mount point `mnt\\xfd`, as paths (bytes that are not UTF-8 held as surrogates)."""
    _write(f"file://{tmp_path / 'made.file'}#mode=nczarr,file")
    _write(str(tmp_path / "made.nc"))
    directory = tmp_path / os.fsdecode(b"dir\xfe")
    directory.mkdir()
    dataset = directory / os.fsdecode(b"d\xff.file")
    twin = directory / os.fsdecode(b"d\xff.nc")
    (tmp_path / "made.file").rename(dataset)
    (tmp_path / "made.nc").rename(twin)
    mountpoint = tmp_path / os.fsdecode(b"mnt\xfd")
    mountpoint.mkdir()
    try:
        yield dataset, twin, mountpoint
    finally:
        unmount(mountpoint)


def _check_contents(mountpoint: Path, twin: Path) -> None:
    title = subprocess.run(["cat", mountpoint / "@attributes" / "title"], capture_output=True,
                           check=True).stdout
    assert title == b"bytes"
    data = subprocess.run(["cat", mountpoint / "v" / "data"], capture_output=True,
                          check=True).stdout
    assert data == VALUES.astype("=i4").tobytes()
    header = (mountpoint / "@header.cdl").read_bytes()
    expected = subprocess.run(["ncdump", "-h", twin], capture_output=True, check=True).stdout
    assert header == expected
    assert header.startswith(b"netcdf d\xff {\n")


def test_mount_with_such_names(binary, place, tmp_path):
    dataset, twin, mountpoint = place
    log = tmp_path / os.fsdecode(b"log\xfc.txt")
    r = subprocess.run([binary, "mount", "--log-file", log, dataset, mountpoint],
                       capture_output=True, env=dict(os.environ, RUST_LOG="info"), timeout=60)
    assert r.returncode == 0, r.stderr
    assert is_mounted(mountpoint)
    _check_contents(mountpoint, twin)
    unmount(mountpoint)
    assert not is_mounted(mountpoint)
    # The daemon's log lines went to the file of that name, the paths in them shown readably.
    lines = log.read_bytes().decode("utf-8")
    assert "serving" in lines and "d\ufffd.file" in lines, lines


def test_mount_helper_with_such_names(binary, place, tmp_path):
    """As mount(8) runs it for `mount -t nczarrfs`, with `-o log_file=` of such a name too,
    given as it is and as libfuse's octal escape."""
    dataset, twin, mountpoint = place
    env = dict(os.environ, NCZARRFS=str(binary), RUST_LOG="info")
    helper = REPO / "scripts" / "mount.nczarrfs"
    for n, spelt in enumerate([b"log\xfc", b"log\\374"]):
        given = os.fsencode(tmp_path) + b"/" + spelt + str(n).encode()
        r = subprocess.run([helper, dataset, mountpoint, "-o", b"ro,log_file=" + given],
                           env=env, capture_output=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert is_mounted(mountpoint)
        _check_contents(mountpoint, twin)
        unmount(mountpoint)
        log = tmp_path / os.fsdecode(b"log\xfc" + str(n).encode())
        assert b"serving" in log.read_bytes()
