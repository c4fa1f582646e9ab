"""`nczarrfs copy` of arrays of a huge shape written in few places, zarr-python as the oracle.

A chunk that holds nothing but the fill value reads as the fill in every reader when it is not
stored at all (zarr-python leaves such chunks out by default, netcdf-c never stores a chunk
nothing was written to), so a copy must not read or write the 10^12 chunks such an array may
have: it must finish at once, within a small memory limit, storing only chunks that hold
something, and read back as zarr-python reads the source, fill regions included. A variable
without a fill value (Zarr v2's `fill_value: null`, whose missing chunks zarr-python reads as
it likes) is written whole.
"""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path

import numpy as np
import pytest
import zarr

from conftest import nczarrfs_binary

CAP = 1 << 30
H, W = 10**12, 10**6
METADATA = {".zarray", ".zattrs", ".zgroup", "zarr.json"}


def capped_copy(*args: str) -> subprocess.CompletedProcess:
    """`nczarrfs copy ARGS` with at most CAP bytes of address space and a minute."""

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (CAP, CAP))

    return subprocess.run([str(nczarrfs_binary()), "copy", *args], capture_output=True,
                          timeout=60, check=False, preexec_fn=limit)


def stored_chunks(array_dir: Path) -> set[tuple[int, ...]]:
    """Grid coordinates of the chunk objects under an array's directory, in any key
    encoding (`i.j`, `i/j`, `c/i/j`)."""
    out = set()
    for f in array_dir.rglob("*"):
        if f.is_file() and f.name not in METADATA:
            rel = str(f.relative_to(array_dir)).replace("/", ".")
            parts = rel.split(".")
            if parts[0] == "c":
                parts = parts[1:]
            out.add(tuple(int(p) for p in parts))
    return out


# (index, values) written by zarr-python: near the origin, and the very last element.
WRITES = [((slice(5, 7), slice(0, 2)), np.array([[1, 2], [3, 4]])),
          ((slice(H - 1, H), slice(W - 1, W)), np.array([[7]]))]

# Slices read from source and copy: written places, fill around and between them, the edges.
PROBES = [(slice(0, 10), slice(0, 5)), (slice(999, 1001), slice(998, 1003)),
          (slice(H - 3, H), slice(W - 4, W)), (slice(H // 2, H // 2 + 2), slice(0, 3)),
          (slice(4, 8), slice(W - 2, W))]


def huge(path: Path, fmt: int, dtype: str, fill) -> None:
    g = zarr.open_group(str(path), mode="w", zarr_format=fmt)
    kw = {"dimension_names": ["H", "W"]} if fmt == 3 else {}
    a = g.create_array("h", shape=(H, W), chunks=(1000, 1000), dtype=dtype, fill_value=fill,
                       **kw)
    for index, values in WRITES:
        a[index] = values.astype(dtype)


def assert_reads_alike(src: Path, dst: Path) -> None:
    a = zarr.open_group(str(src), mode="r")["h"]
    b = zarr.open_group(str(dst), mode="r")["h"]
    assert b.shape == a.shape
    for probe in PROBES:
        np.testing.assert_array_equal(b[probe], a[probe], err_msg=str(probe))


# (source's Zarr format, type, fill value, target kind). Not from pure Zarr v3 to Zarr v2 or
# NCZarr: the copy takes no fill value there (the `fill_value` of a Zarr v3 array without
# `_FillValue` marks no missing value) and so writes every chunk.
CASES = [(3, "u1", 4, "zarr,v3"), (3, "i4", -5, "zarr,v3"), (2, "f8", float("nan"), "zarr"),
         (2, "f8", float("nan"), "zarr,v3"), (2, "f8", float("nan"), "nczarr"),
         (2, "i4", -5, "nczarr")]


@pytest.mark.parametrize("fmt,dtype,fill,kind", CASES)
def test_huge_sparse_array_copies_only_what_is_stored(tmp_path, fmt, dtype, fill, kind):
    src, dst = tmp_path / "s.zarr", tmp_path / "out" / "d.zarr"
    dst.parent.mkdir()
    huge(src, fmt, dtype, fill)
    r = capped_copy("-k", kind, str(src), str(dst))
    assert r.returncode == 0, r.stderr.decode()
    assert stored_chunks(dst / "h") == {(0, 0), (H // 1000 - 1, W // 1000 - 1)}
    assert_reads_alike(src, dst)
    assert sorted(p.name for p in dst.parent.iterdir()) == ["d.zarr"]


def test_rechunked_copy_stores_only_chunks_that_hold_values(tmp_path):
    src, dst = tmp_path / "s.zarr", tmp_path / "d.zarr"
    huge(src, 3, "u1", 4)
    r = capped_copy("-k", "zarr,v3", "-c", "H/100,W/250", str(src), str(dst))
    assert r.returncode == 0, r.stderr.decode()
    assert zarr.open_group(str(dst), mode="r")["h"].chunks == (100, 250)
    # Elements (5..7, 0..2) lie in chunk (0, 0), the last element in the last chunk.
    assert stored_chunks(dst / "h") == {(0, 0), (H // 100 - 1, W // 250 - 1)}
    assert_reads_alike(src, dst)


def test_a_stored_chunk_of_fill_only_is_not_copied(tmp_path):
    src, dst = tmp_path / "s.zarr", tmp_path / "d.zarr"
    g = zarr.open_group(str(src), mode="w", zarr_format=3)
    a = g.create_array("h", shape=(40, 30), chunks=(10, 10), dtype="i2", fill_value=9,
                       dimension_names=["y", "x"], config={"write_empty_chunks": True})
    a[0:10, 0:10] = 9  # stored, though all fill
    a[10:20, 10:20] = np.arange(100, dtype="i2").reshape(10, 10)
    a[25, 25] = 9  # stored, all fill again
    a[35, 5] = 1
    assert stored_chunks(src / "h") == {(0, 0), (1, 1), (2, 2), (3, 0)}
    r = capped_copy("-k", "zarr,v3", "-c", "y/5,x/5", str(src), str(dst))
    assert r.returncode == 0, r.stderr.decode()
    want = {(y, x) for y in (2, 3) for x in (2, 3)} | {(7, 1)}
    assert stored_chunks(dst / "h") == want
    np.testing.assert_array_equal(zarr.open_group(str(dst), mode="r")["h"][:], a[:])


# Re-encoded (a copy of the same encoding copies the chunk objects there are as they are).
@pytest.mark.parametrize("options", [["-k", "zarr", "-d", "1"], ["-k", "zarr,v3"]])
def test_without_a_fill_value_every_chunk_is_written(tmp_path, options):
    src, dst = tmp_path / "s.zarr", tmp_path / "d.zarr"
    g = zarr.open_group(str(src), mode="w", zarr_format=2)
    a = g.create_array("h", shape=(20, 20), chunks=(10, 10), dtype="i4", fill_value=None)
    a[0:10, 0:10] = np.arange(100, dtype="i4").reshape(10, 10)
    assert stored_chunks(src / "h") == {(0, 0)}
    r = capped_copy(*options, str(src), str(dst))
    assert r.returncode == 0, r.stderr.decode()
    assert stored_chunks(dst / "h") == {(y, x) for y in (0, 1) for x in (0, 1)}
    got = zarr.open_group(str(dst), mode="r")["h"]
    np.testing.assert_array_equal(got[0:10, 0:10], a[0:10, 0:10])


def test_unwritten_strings_copy_to_another_string_width(tmp_path):
    """NCZarr v2 stores strings as `|S` of a fixed width, Zarr v3 otherwise: the copy's check
    takes a string by its text, fill included, whatever width holds it."""
    import netCDF4

    src, dst = tmp_path / "s.file", tmp_path / "d.zarr"
    with netCDF4.Dataset(f"file://{src}#mode=nczarr,file", "w") as nc:
        nc.createDimension("n", 3)
        nc.createVariable("s", str, ("n",))
        nc.createVariable("t", str, ())
    r = capped_copy("-k", "nczarr,v3", str(src), str(dst))
    assert r.returncode == 0, r.stderr.decode()
    with netCDF4.Dataset(f"file://{src}#mode=nczarr,file") as nc:
        want = {name: np.asarray(nc[name][...]).tolist() for name in ("s", "t")}
    root = zarr.open_group(str(dst), mode="r")
    for name, values in want.items():
        got = np.asarray(root[name][...]).tolist()
        assert got == values, name
