"""Values a variable's stored type cannot hold are refused, never changed, checked by
zarr-python 3.

zarr-python makes v2 and v3 arrays whose stored type is narrower than what their `data` slots
(and `get`/`put`) carry: `<U5` text, held as 20 bytes of UTF-8; `float16`, held as `float`;
`bool`, held as `ubyte`. A value that does not fit (six characters; a finite float that
float16 would store as infinity; a byte other than 0 or 1) must fail `put` with a message
naming the variable, the value's index and the width, and a write through a `rw` mount with
`ERANGE` (netCDF's `NC_ERANGE`) and a log line; zarr-python must then read exactly the values
it wrote, and the mount must not show the refused value. Values float16 holds only
approximately are rounded as numpy rounds them.
"""

from __future__ import annotations

import errno
import os
import warnings
from pathlib import Path

import numpy as np
import pytest
import zarr

from test_v3_rw import Mounted, _ok


@pytest.fixture(autouse=True)
def _quiet():
    warnings.filterwarnings("ignore", module="zarr")
    warnings.filterwarnings("ignore", module="numcodecs")


def _pwrite_errno(path: Path, offset: int, data: bytes) -> int:
    """The errno of a `pwrite` that must fail."""
    fd = os.open(path, os.O_WRONLY)
    try:
        with pytest.raises(OSError) as failure:
            os.pwrite(fd, data, offset)
        return failure.value.errno
    finally:
        os.close(fd)


def _store(tmp_path: Path, zarr_format: int, dtype: str, values: list) -> Path:
    store = tmp_path / f"s{zarr_format}.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=zarr_format)
    arr = group.create_array("v", shape=(len(values),), chunks=(2,), dtype=dtype)
    arr[...] = np.array(values, dtype=dtype)
    return store


def _stored(store: Path) -> list:
    return zarr.open_array(str(store), path="v", mode="r")[...].tolist()


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_put_refuses_text_longer_than_a_fixed_width(nczarrfs, tmp_path, zarr_format):
    values = ["a", "bb", "ccc", "dddd"]
    store = _store(tmp_path, zarr_format, "<U5", values)
    # Five characters fit whatever their UTF-8 length; six do not.
    npy = tmp_path / "ok.npy"
    np.save(npy, np.array(["€€€€€".encode(), "🙂🙂🙂🙂🙂".encode()]))
    _ok(nczarrfs("put", str(store), "v", "--npy", "--start", "1", "-i", str(npy)), "put")
    values[1:3] = ["€€€€€", "🙂🙂🙂🙂🙂"]
    assert _stored(store) == values
    np.save(npy, np.array([b"x", b"abcdef"]))
    res = nczarrfs("put", str(store), "v", "--npy", "--start", "1", "-i", str(npy))
    assert res.returncode != 0
    message = res.stderr.decode()
    assert "/v[2]" in message and "6 characters" in message and "5" in message, message
    assert "nothing was written" in message
    assert _stored(store) == values
    # Raw input in the `data` layout: 20-byte slots of UTF-8.
    raw = np.array([b"abcdefgh", b"xyz", b"", b""], dtype="S20").tobytes()
    raw_file = tmp_path / "raw.bin"
    raw_file.write_bytes(raw)
    res = nczarrfs("put", str(store), "v", "-i", str(raw_file))
    assert res.returncode != 0 and "/v[0]" in res.stderr.decode()
    assert _stored(store) == values


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_rw_mount_refuses_text_longer_than_a_fixed_width(nczarrfs, tmp_path, zarr_format):
    values = ["a", "bb", "ccc", "dddd"]
    store = _store(tmp_path, zarr_format, "<U5", values)
    log = tmp_path / "mount.log"
    with Mounted(nczarrfs, store, tmp_path / "mnt", log) as mnt:
        data = mnt / "v" / "data"
        width = data.stat().st_size // 4
        assert width == 20
        assert _pwrite_errno(data, width, b"abcdefghij".ljust(width, b"\0")) == errno.ERANGE
        # A write spanning slots refuses them all, the storable first one included.
        both = b"zz".ljust(width, b"\0") + b"abcdefghij".ljust(width, b"\0")
        assert _pwrite_errno(data, 2 * width, both) == errno.ERANGE
        shown = np.frombuffer(data.read_bytes(), dtype=f"S{width}")
        assert [s.decode() for s in shown] == values
    assert _stored(store) == values
    text = log.read_text()
    assert "/v[1]" in text and "10 characters" in text, text


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_float16_and_bool_refuse_what_they_cannot_hold(nczarrfs, tmp_path, zarr_format):
    halves = np.array([0.5, -2.0, 1.0, 3.0], dtype="<f2")
    bools = np.array([True, False, True, False])
    store = tmp_path / f"s{zarr_format}.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=zarr_format)
    group.create_array("h", shape=(4,), chunks=(2,), dtype="<f2")[...] = halves
    group.create_array("b", shape=(4,), chunks=(2,), dtype="bool")[...] = bools

    def stored(name):
        return zarr.open_array(str(store), path=name, mode="r")[...]

    npy = tmp_path / "in.npy"
    for bad, index in [([0.1, 1e10], "/h[2]"), ([65520.0, 1.0], "/h[1]")]:
        np.save(npy, np.array(bad, dtype="<f4"))
        res = nczarrfs("put", str(store), "h", "--npy", "--start", "1", "-i", str(npy))
        assert res.returncode != 0, bad
        message = res.stderr.decode()
        assert index in message and "float16" in message, message
        np.testing.assert_array_equal(stored("h"), halves)
    # Infinities and NaN are float16 values.
    special = np.array([-np.inf, np.nan], dtype="<f4")
    np.save(npy, special)
    _ok(nczarrfs("put", str(store), "h", "--npy", "--start", "1", "-i", str(npy)), "put")
    halves[1:3] = special.astype("<f2")
    np.testing.assert_array_equal(stored("h"), halves)
    # In range: rounded to the nearest float16, as numpy rounds.
    rounded = np.array([0.1, 65519.0, np.nan, 1e-8], dtype="<f4")
    np.save(npy, rounded)
    _ok(nczarrfs("put", str(store), "h", "--npy", "-i", str(npy)), "put")
    halves[:] = rounded.astype("<f2")
    np.testing.assert_array_equal(stored("h"), halves)

    np.save(npy, np.array([1, 2], dtype="u1"))
    res = nczarrfs("put", str(store), "b", "--npy", "--start", "2", "-i", str(npy))
    assert res.returncode != 0 and "/b[3]" in res.stderr.decode(), res.stderr.decode()
    np.testing.assert_array_equal(stored("b"), bools)

    log = tmp_path / "mount.log"
    with Mounted(nczarrfs, store, tmp_path / "mnt", log) as mnt:
        h, b = mnt / "h" / "data", mnt / "b" / "data"
        assert _pwrite_errno(h, 4, np.array([1e6], "<f4").tobytes()) == errno.ERANGE
        assert _pwrite_errno(b, 0, bytes([1, 255])) == errno.ERANGE
        np.testing.assert_array_equal(np.frombuffer(h.read_bytes(), "<f4"),
                                      halves.astype("<f4"))
        assert np.frombuffer(b.read_bytes(), "u1").tolist() == bools.astype("u1").tolist()
    np.testing.assert_array_equal(stored("h"), halves)
    np.testing.assert_array_equal(stored("b"), bools)
    text = log.read_text()
    assert "/h[1]" in text and "/b[1]" in text, text
