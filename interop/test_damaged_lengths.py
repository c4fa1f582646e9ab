"""An unlimited dimension whose recorded length runs past its arrays' shapes. netCDF4-python
(netcdf-c 4.10.1) refuses such a store. nczarrfs reads the records that are stored (a
writer stopped between the two objects leaves this), and no further: beyond the last stored
chunk there is only fill, and a damaged length would make billions of records of it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

FILL = -9.0


def record_store(path: Path, records: int) -> str:
    """`t(time, x)` floats, chunks of 2 records by 3, `records` records of 0, 1, 2, ..."""
    import netCDF4

    url = f"file://{path}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as ds:
        ds.createDimension("time", None)
        ds.createDimension("x", 6)
        v = ds.createVariable("t", "f4", ("time", "x"), chunksizes=(2, 3), fill_value=FILL)
        v[0:records, :] = np.arange(records * 6, dtype="f4").reshape(records, 6)
    return url


def set_recorded_length(path: Path, n: int) -> None:
    zattrs = path / ".zattrs"
    attrs = json.loads(zattrs.read_text())
    attrs["_nczarr_group"]["dimensions"]["time"]["size"] = n
    zattrs.write_text(json.dumps(attrs))


def set_array_length(path: Path, n: int) -> None:
    zarray = path / "t" / ".zarray"
    meta = json.loads(zarray.read_text())
    meta["shape"][0] = n
    zarray.write_text(json.dumps(meta))


def netcdf_refuses(url: str) -> bool:
    import netCDF4

    try:
        netCDF4.Dataset(url).close()
    except OSError as e:
        return "Invalid dimension size" in str(e)
    return False


def get_records(nczarrfs, path: Path, count: int) -> np.ndarray:
    r = nczarrfs("get", str(path), "t")
    assert r.returncode == 0, r.stderr.decode()
    return np.frombuffer(r.stdout, dtype="=f4").reshape(count, 6)


def test_a_damaged_length_is_bounded_by_the_stored_chunks(nczarrfs, tmp_path):
    path = tmp_path / "ds.file"
    url = record_store(path, 5)
    set_recorded_length(path, 2**32)
    assert netcdf_refuses(url)
    r = nczarrfs("dump", "-h", str(path))
    assert r.returncode == 0, r.stderr.decode()
    # Chunks of 2 records: the last stored one ends at record 6.
    assert b"time = UNLIMITED ; // (6 currently)" in r.stdout, r.stdout.decode()
    assert b"records 4294967296" in r.stderr, r.stderr.decode()
    values = get_records(nczarrfs, path, 6)
    np.testing.assert_array_equal(values[:5].ravel(), np.arange(30, dtype="f4"))
    np.testing.assert_array_equal(values[5], np.full(6, FILL, dtype="f4"))


def test_a_length_the_stored_chunks_reach_is_kept(nczarrfs, tmp_path):
    """The dimension says 9 and the chunks hold 9 records, but the array's shape still says 5
    (a writer stopped between the two objects): the dimension keeps its 9 records, those past
    the array's shape reading as fill (docs/mount.md), and the next writer stores the shapes
    consistently."""
    path = tmp_path / "ds.file"
    url = record_store(path, 9)
    set_array_length(path, 5)
    assert netcdf_refuses(url)
    r = nczarrfs("dump", "-h", str(path))
    assert b"time = UNLIMITED ; // (9 currently)" in r.stdout, r.stdout.decode()
    assert b"reach only" not in r.stderr, r.stderr.decode()
    values = get_records(nczarrfs, path, 9)
    np.testing.assert_array_equal(values[:5].ravel(), np.arange(30, dtype="f4"))
    np.testing.assert_array_equal(values[5:], np.full((4, 6), FILL, dtype="f4"))
