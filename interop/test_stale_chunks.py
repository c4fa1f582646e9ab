"""Records that no successful write stored read as fill, even where an interrupted writer
stored chunks.

Writers store chunks first and the metadata last, so a `put` interrupted with Ctrl-C halfway
through an append leaves the dataset at its old length with chunk objects past it. They stay
invisible until a later write grows the dimension over them, leaving a gap: the gap must then
read as the fill value (netCDF's default for doubles, 9.969209968386869e+36), as it reads in
netCDF4-python and zarr-python once the records were never written. Expected values come from
the values written and netCDF's default fill; netCDF4-python and zarr-python read the result.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import zarr

from conftest import SEED, nczarrfs_binary

PLUGINS = os.path.join(os.path.dirname(netCDF4.__file__), "plugins")
NC_FILL_DOUBLE = 9.969209968386869e36
X = 1000
#: Records the interrupted `put` appends: enough that compressing them takes seconds.
APPENDED = 6000


@pytest.fixture(autouse=True)
def _plugins(monkeypatch):
    monkeypatch.setenv("HDF5_PLUGIN_PATH", PLUGINS)


def _url(path: Path) -> str:
    return f"file://{path}#mode=nczarr,file"


def _chunks_past(var_dir: Path, record_chunk: int) -> list[str]:
    """Chunk objects of `var_dir` (keys `i.0`) whose first index is `record_chunk` or more."""
    names = []
    for p in var_dir.iterdir():
        head, _, tail = p.name.partition(".")
        if head.isdigit() and tail == "0" and int(head) >= record_chunk:
            names.append(p.name)
    return names


def test_an_interrupted_append_leaves_nothing_a_later_gap_shows(tmp_path):
    rng = np.random.default_rng(SEED)
    ds_path = tmp_path / "ds.file"
    kept = rng.standard_normal((3, X))
    with netCDF4.Dataset(_url(ds_path), "w", format="NETCDF4") as nc:
        nc.createDimension("t", None)
        nc.createDimension("x", X)
        a = nc.createVariable("a", "f8", ("t", "x"), chunksizes=(8, X), zlib=True,
                              complevel=9)
        a[0:3] = kept
    # Random doubles compress slowly at level 9: the append runs for seconds.
    appended = tmp_path / "appended.bin"
    rng.standard_normal((APPENDED, X)).tofile(appended)
    put = subprocess.Popen(
        [str(nczarrfs_binary()), "put", _url(ds_path), "a", "-i", str(appended),
         "--start", "3,0", "--count", f"{APPENDED},{X}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    # Ctrl-C once chunks past the first are stored.
    deadline = time.monotonic() + 60
    while not _chunks_past(ds_path / "a", 1) and put.poll() is None:
        assert time.monotonic() < deadline, "the append stored no chunk in 60 s"
        time.sleep(0.005)
    put.send_signal(signal.SIGINT)
    put.wait(timeout=60)
    assert put.returncode != 0, "the append ended before it could be interrupted"
    with netCDF4.Dataset(_url(ds_path)) as nc:
        assert len(nc.dimensions["t"]) == 3
    left = _chunks_past(ds_path / "a", 1)
    assert left, "the interrupted append stored no chunk past the first"

    # One record far past the end: records 3 .. last - 1 are a gap of fill.
    last = APPENDED + 10
    one = rng.standard_normal(X)
    r = subprocess.run(
        [str(nczarrfs_binary()), "put", _url(ds_path), "a", "--start", f"{last},0",
         "--count", f"1,{X}"],
        input=one.tobytes(), capture_output=True, timeout=120, check=False)
    assert r.returncode == 0, r.stderr.decode()

    with netCDF4.Dataset(_url(ds_path)) as nc:
        a = nc["a"]
        a.set_auto_maskandscale(False)
        got = a[:]
    _check(got, kept, one, last, f"netCDF4-python ({len(left)} chunks were left)")
    # zarr-python reads the array itself.
    z = zarr.open_array(str(ds_path / "a"), mode="r", zarr_format=2)
    _check(z[:], kept, one, last, "zarr-python")


def _check(got: np.ndarray, kept: np.ndarray, one: np.ndarray, last: int, reader: str) -> None:
    """Records 0..3 are `kept`, `last` is `one`, those between are fill. netcdf-c spells the
    default fill 9.96921e+36 in `.zarray` and reads unstored chunks so, but fills the rest
    of a chunk it writes with 9.969209968386869e+36: either is the fill here."""
    assert got.shape == (last + 1, X)
    np.testing.assert_array_equal(got[0:3], kept, err_msg=reader)
    np.testing.assert_array_equal(got[last], one, err_msg=reader)
    gap = got[3:last]
    bad = np.flatnonzero(~np.isclose(gap, NC_FILL_DOUBLE, rtol=1e-6, atol=0).all(axis=1)) + 3
    assert bad.size == 0, f"{reader}: records {bad[:10].tolist()} (of {bad.size}) are no fill"
