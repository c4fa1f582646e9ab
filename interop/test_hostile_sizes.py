"""Objects whose size a hostile or damaged dataset chooses, read in bounded memory.

Each command runs with its address space capped (RLIMIT_AS), so that a regression ends in a
failed allocation of that one process (SIGABRT), never in the machine running out of memory.

* A metadata object is read whole and parsed in memory: one longer than the 512 MiB that
  nczarrfs reads of a metadata object is refused, naming its key, before it is read (a sparse
  file of gigabytes, or a zip entry declaring more, allocated that much).
* A sharded Zarr v3 array's index holds 16 bytes per inner chunk (plus 4 per `crc32c`); a
  layout of a billion one-byte inner chunks made every read allocate that index (16 GiB)
  before the shard was looked at.
"""

from __future__ import annotations

import json
import resource
import subprocess
import zipfile
from pathlib import Path

import numpy as np

from conftest import nczarrfs_binary

METADATA_LIMIT = 512 << 20
CAP = 1 << 30


def capped(*args: str, cap: int = CAP) -> subprocess.CompletedProcess:
    """Runs nczarrfs with at most `cap` bytes of address space."""

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (cap, cap))

    return subprocess.run([str(nczarrfs_binary()), *args], capture_output=True, timeout=120,
                          check=False, preexec_fn=limit)


def small_dataset(path: Path) -> str:
    """An NCZarr dataset written by netCDF4-python: `v(x)` of 4 ints with an attribute."""
    import netCDF4

    url = f"file://{path}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as nc:
        nc.createDimension("x", 4)
        v = nc.createVariable("v", "i4", ("x",))
        v.units = "m"
        v[:] = np.arange(1, 5, dtype="i4")
    return url


def assert_refused(r: subprocess.CompletedProcess, key: str, size: int) -> None:
    err = r.stderr.decode()
    assert r.returncode == 1, f"exit {r.returncode}: {err}"
    assert f'metadata object "{key}" is {size} bytes long' in err, err
    assert f"more than the {METADATA_LIMIT} bytes" in err, err


def test_a_sparse_metadata_file_of_gigabytes_is_refused_unread(tmp_path):
    path = tmp_path / "ds.file"
    small_dataset(path)
    r = capped("dump", str(path))
    assert r.returncode == 0, r.stderr.decode()
    assert b'v:units = "m"' in r.stdout
    size = 2 << 30
    with open(path / "v" / ".zattrs", "r+b") as f:
        f.truncate(size)
    for command in (["dump", "-h"], ["get", "--count", "1"]):
        args = [*command, str(path)] + (["v"] if command[0] == "get" else [])
        assert_refused(capped(*args), "v/.zattrs", size)


def test_an_oversized_consolidated_summary_is_ignored_as_a_damaged_one_is(tmp_path):
    """A `.zmetadata` too long to read is ignored with a warning, as one that is not JSON is:
    the dataset is read from the objects it summarises."""
    import zarr

    path = tmp_path / "c.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    root.create_array("a", shape=(3,), chunks=(3,), dtype="<i2")[:] = [1, 2, 3]
    zarr.consolidate_metadata(str(path))
    size = 3 << 30
    with open(path / ".zmetadata", "r+b") as f:
        f.truncate(size)
    r = capped("get", str(path), "a")
    err = r.stderr.decode()
    assert r.returncode == 0, err
    assert np.frombuffer(r.stdout, "<i2").tolist() == zarr.open_array(str(path / "a"))[:].tolist()
    assert "ignoring .zmetadata" in err, err
    assert f'metadata object ".zmetadata" is {size} bytes long' in err, err


def test_an_oversized_zarr_json_is_refused(tmp_path):
    import zarr

    path = tmp_path / "v3.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    root.create_array("a", shape=(3,), chunks=(3,), dtype="<i2")[:] = [1, 2, 3]
    size = 3 << 30
    with open(path / "a" / "zarr.json", "r+b") as f:
        f.truncate(size)
    assert_refused(capped("dump", "-h", str(path)), "a/zarr.json", size)


def test_a_zip_entry_declaring_more_than_the_limit_is_not_inflated(tmp_path):
    """600 MiB of spaces deflate to well under a megabyte: the entry is refused by the size
    its header declares, under a cap it could not be inflated in."""
    path = tmp_path / "ds.zip"
    size = 600 << 20
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(".zgroup", '{"zarr_format": 2}')
        with z.open(".zattrs", "w", force_zip64=True) as f:
            block = b" " * (1 << 20)
            for _ in range(size // len(block)):
                f.write(block)
    with zipfile.ZipFile(path) as z:
        assert z.getinfo(".zattrs").file_size == size
    assert_refused(capped("dump", "-h", str(path), cap=512 << 20), ".zattrs", size)


def sharded_with_inner_chunks(path: Path, shard: int) -> None:
    """A sharded array written by zarr-python, then made to declare shards of `shard` one-byte
    inner chunks; its stored shards stay those of 16 bytes (64 values)."""
    import zarr

    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    a = root.create_array("a", shape=(64,), chunks=(4,), shards=(16,), dtype="u1")
    a[:] = np.arange(64, dtype="u1")
    meta_path = path / "a" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["shape"] = [shard]
    meta["chunk_grid"]["configuration"]["chunk_shape"] = [shard]
    meta["codecs"][0]["configuration"]["chunk_shape"] = [1]
    meta_path.write_text(json.dumps(meta))


def test_a_shard_index_larger_than_a_chunk_is_refused(tmp_path):
    """2^30 inner chunks make an index of 16 GiB + 4 bytes, over the 4 GiB nczarrfs holds of
    any chunk."""
    path = tmp_path / "s.zarr"
    sharded_with_inner_chunks(path, 2**30)
    r = capped("get", str(path), "a", "--count", "4", cap=3 << 30)
    err = r.stderr.decode()
    assert r.returncode == 1, f"exit {r.returncode}: {err}"
    assert "variable /a" in err and "1073741824 inner chunks per shard" in err, err


def test_a_shard_too_short_for_its_index_is_refused_unread(tmp_path):
    """2^27 inner chunks make an index of 2^31 + 4 bytes (16 per chunk, 4 of crc32c), which
    a stored shard of a few dozen bytes cannot hold: the read says so without allocating it."""
    path = tmp_path / "s.zarr"
    sharded_with_inner_chunks(path, 2**27)
    shard_size = (path / "a" / "c" / "0").stat().st_size
    assert shard_size < 1024
    r = capped("get", str(path), "a", "--count", "4")
    err = r.stderr.decode()
    assert r.returncode == 1, f"exit {r.returncode}: {err}"
    assert f"shard of {shard_size} bytes cannot hold an index of {2**31 + 4}" in err, err
