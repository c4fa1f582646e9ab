"""The staleness window (`ttl=`) of a read-only mount holds for values as well as metadata:
chunks rewritten or deleted underneath are read fresh at most one TTL later, also through a
file descriptor held open across the change (no chunk cache, no kernel page cache left)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from datasets import netcdf_values  # noqa: E402

ROWS, COLS = 40, 50
ROW = COLS * 8


def _dataset(path: Path) -> tuple[str, np.ndarray]:
    """`v`: float64 ROWS x COLS in uncompressed chunks of 4 rows, written by netCDF4-python."""
    import netCDF4

    url = f"file://{path}#mode=nczarr,file"
    values = np.arange(ROWS * COLS, dtype="f8").reshape(ROWS, COLS) / 7
    with netCDF4.Dataset(url, "w", format="NETCDF4") as nc:
        nc.createDimension("y", ROWS)
        nc.createDimension("x", COLS)
        v = nc.createVariable("v", "f8", ("y", "x"), chunksizes=(4, COLS))
        v[:] = values
    return url, values


def _replace(path: Path, data: bytes) -> None:
    """Replaces a file atomically, as an object store replaces an object."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    os.replace(tmp, path)


@pytest.mark.parametrize("options", ["ttl=1", "ttl=1,cache_size=0,readahead=0"])
def test_rewritten_and_deleted_chunks_are_fresh_after_ttl(mounter, tmp_path, options):
    store = tmp_path / "ds.file"
    url, values = _dataset(store)
    mnt = mounter.mount(str(store), options)
    data = mnt / "v" / "data"
    held = os.open(data, os.O_RDONLY)
    try:
        # Every chunk decoded and every page cached.
        assert os.pread(held, ROWS * ROW, 0) == values.tobytes()
        # An uncompressed Zarr v2 chunk is its C-order little-endian elements.
        _replace(store / "v" / "2.0", np.full((4, COLS), 42.0, dtype="<f8").tobytes())
        (store / "v" / "5.0").unlink()
        want = netcdf_values(url)["/v"]
        assert (want[8:12] == 42.0).all()
        assert not np.array_equal(want[20:24], values[20:24])
        time.sleep(2.0)
        # Through the descriptor opened before the change, touching nothing else first.
        assert os.pread(held, 4 * ROW, 8 * ROW) == want[8:12].tobytes()
        assert os.pread(held, 4 * ROW, 20 * ROW) == want[20:24].tobytes()
        assert os.pread(held, ROWS * ROW, 0) == want.tobytes()
    finally:
        os.close(held)
    assert data.read_bytes() == want.tobytes()


def test_ttl_zero_declares_the_dataset_static(mounter, tmp_path):
    store = tmp_path / "ds.file"
    _url, values = _dataset(store)
    mnt = mounter.mount(str(store), "ttl=0")
    data = mnt / "v" / "data"
    assert data.read_bytes() == values.tobytes()
    _replace(store / "v" / "2.0", np.full((4, COLS), 42.0, dtype="<f8").tobytes())
    time.sleep(1.5)
    # Nothing is re-read: the chunks (cached at the first read) keep their values.
    assert data.read_bytes() == values.tobytes()
