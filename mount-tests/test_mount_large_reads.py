"""Large reads of `data` through real mounts, against netCDF4-python's values: sequential
scans of variables larger than the chunk cache (chunks served in place, chunks passed released),
reads across chunk boundaries, and `-o direct_io`."""

from __future__ import annotations

import errno
import mmap
import os
import random

import numpy as np
import pytest

from conftest import daemon_pids, is_mounted
from datasets import netcdf_values

SHAPE = (24, 128, 256)  # 128 KiB per time step of float32: 3 MiB per variable


@pytest.fixture(scope="module")
def large(tmp_path_factory) -> str:
    """Two 3 MiB float32 variables chunked one time step per chunk, written by netCDF4-python:
    `plain` (no codec) and `packed` (zlib + shuffle)."""
    import netCDF4

    path = tmp_path_factory.mktemp("large") / "large.file"
    url = f"file://{path}#mode=nczarr,file"
    values = np.random.default_rng(7).standard_normal(SHAPE).astype("f4")
    with netCDF4.Dataset(url, "w", format="NETCDF4") as ds:
        for name in ("time", "y", "x"):
            ds.createDimension(name, SHAPE[("time", "y", "x").index(name)])
        plain = ds.createVariable("plain", "f4", ("time", "y", "x"), chunksizes=(1, 128, 256))
        plain[:] = values
        packed = ds.createVariable("packed", "f4", ("time", "y", "x"), chunksizes=(1, 128, 256),
                                   zlib=True, complevel=1, shuffle=True)
        packed[:] = values[::-1]
    return url


def check_reads(mnt, want: dict[str, np.ndarray], mapped: bool = True) -> None:
    """Whole-file reads, 1 MiB reads, reads across chunk boundaries, random small preads and
    (if `mapped`) numpy.memmap of every variable give netCDF4-python's bytes."""
    rng = random.Random(3)
    for name in ("plain", "packed"):
        raw = want[f"/{name}"].tobytes()
        path = mnt / name / "data"
        assert path.stat().st_size == len(raw)
        assert path.read_bytes() == raw, name
        with open(path, "rb", buffering=0) as f:
            got = b"".join(iter(lambda: f.read(1 << 20), b""))
        assert got == raw, name
        step = 128 * 256 * 4
        fd = os.open(path, os.O_RDONLY)
        try:
            for off, n in [(step - 10, 20), (5 * step - 4096, 3 * step), (0, 7), (len(raw) - 3, 3)]:
                assert os.pread(fd, n, off) == raw[off:off + n], (name, off, n)
            for _ in range(200):
                off = rng.randrange(len(raw))
                n = rng.choice([1, 4, 4096, 70000])
                assert os.pread(fd, n, off) == raw[off:off + n], (name, off, n)
        finally:
            os.close(fd)
        if mapped:
            values = want[f"/{name}"]
            m = np.memmap(path, dtype=values.dtype, mode="r", shape=values.shape)
            for _ in range(200):
                idx = tuple(rng.randrange(n) for n in values.shape)
                assert m[idx] == values[idx], (name, idx)
            np.testing.assert_array_equal(m, values)
            del m


@pytest.mark.parametrize("options", [[], ["cache_size=1M"], ["cache_size=1M", "readahead=256K"],
                                     ["nosplice"]])
def test_large_reads_match_netcdf(mounter, large, options):
    # With a 1 MiB cache every variable is larger than the cache: chunks a sequential reader
    # has passed are released and their buffers reused.
    want = netcdf_values(large)
    mnt = mounter.mount(large, *options)
    check_reads(mnt, want)
    # Again: the second scans decode into recycled buffers, which must not show old values.
    check_reads(mnt, want)


def daemon_rchar(mnt) -> int:
    """Bytes the daemon serving `mnt` has taken in through read(2) and its kin."""
    (pid,) = daemon_pids(mnt)
    with open(f"/proc/{pid}/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


@pytest.mark.parametrize("options", [[], ["direct_io"]])
def test_uncompressed_values_are_spliced_not_read(mounter, large, options):
    """A read-only mount answers reads of uncompressed chunk files by splicing: the values
    reach the reader without the daemon reading them (read(2) would count them in the
    daemon's rchar); with `nosplice` it reads every byte."""
    want = netcdf_values(large)["/plain"].tobytes()
    moved = {}
    for splice in ("splice", "nosplice"):
        mnt = mounter.mount(large, splice, *options)
        before = daemon_rchar(mnt)
        with open(mnt / "plain" / "data", "rb", buffering=0) as f:
            got = b"".join(iter(lambda: f.read(1 << 20), b""))
        assert got == want
        moved[splice] = daemon_rchar(mnt) - before
    assert moved["nosplice"] >= len(want), moved
    assert moved["splice"] < len(want) // 10, moved


def test_direct_io_reads_match_netcdf(mounter, large):
    want = netcdf_values(large)
    mnt = mounter.mount(large, "direct_io")
    check_reads(mnt, want, mapped=False)
    raw = want["/plain"].tobytes()
    with open(mnt / "plain" / "data", "rb") as f:
        with mmap.mmap(f.fileno(), 0, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ) as m:
            assert m[:4096] == raw[:4096]
            assert m[-4096:] == raw[-4096:]
        # Shared mappings of a direct-I/O file need FUSE_DIRECT_IO_ALLOW_MMAP (Linux 6.6).
        if kernel_version() >= (6, 6):
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                assert m[:] == raw
        else:
            with pytest.raises(OSError) as err:
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            assert err.value.errno == errno.ENODEV
    if kernel_version() >= (6, 6):
        # numpy.memmap maps shared.
        values = np.memmap(mnt / "plain" / "data", dtype=want["/plain"].dtype, mode="r")
        np.testing.assert_array_equal(values, want["/plain"].ravel())
        del values


def kernel_version() -> tuple[int, int]:
    major, minor = os.uname().release.split(".")[:2]
    return int(major), int("".join(c for c in minor if c.isdigit()) or 0)


def test_direct_io_corrupt_chunk_fails_only_reads_that_touch_it(mounter, tmp_path):
    import zarr

    loc = tmp_path / "bad.zarr"
    root = zarr.open_group(str(loc), mode="w", zarr_format=2)
    a = root.create_array("a", shape=(64, 1024), chunks=(8, 1024), dtype="<i4", fill_value=0)
    want = np.arange(64 * 1024, dtype="<i4").reshape(64, 1024)
    a[:] = want
    a.attrs["_ARRAY_DIMENSIONS"] = ["r", "c"]
    (loc / "a" / "2.0").write_bytes(b"this is not a compressed chunk")
    mnt = mounter.mount(str(loc), "direct_io")
    raw = want.tobytes()
    chunk = 32 * 1024
    fd = os.open(mnt / "a" / "data", os.O_RDONLY)
    try:
        assert os.pread(fd, 2 * chunk, 0) == raw[:2 * chunk]
        assert os.pread(fd, 5 * chunk, 3 * chunk) == raw[3 * chunk:]
        for off, n in ((2 * chunk, 100), (chunk, 2 * chunk), (0, len(raw))):
            with pytest.raises(OSError) as err:
                os.pread(fd, n, off)
            assert err.value.errno == errno.EIO
        assert os.pread(fd, 4096, chunk) == raw[chunk:chunk + 4096]
    finally:
        os.close(fd)
    assert is_mounted(mnt) and daemon_pids(mnt), "the daemon must keep serving"


@pytest.mark.parametrize("options", [[], ["direct_io"], ["nosplice"]])
def test_truncated_uncompressed_chunk_fails_only_reads_that_touch_it(mounter, tmp_path, options):
    """An uncompressed chunk file cut short is an error for the reads of its range (its bytes
    are never passed on, spliced or copied); the chunks around it read as stored."""
    import zarr

    loc = tmp_path / "short.zarr"
    root = zarr.open_group(str(loc), mode="w", zarr_format=2)
    a = root.create_array("a", shape=(64, 1024), chunks=(8, 1024), dtype="<i4", fill_value=0,
                          compressors=None)
    want = np.arange(64 * 1024, dtype="<i4").reshape(64, 1024)
    a[:] = want
    a.attrs["_ARRAY_DIMENSIONS"] = ["r", "c"]
    chunk_file = loc / "a" / "2.0"
    chunk_file.write_bytes(chunk_file.read_bytes()[:1000])
    mnt = mounter.mount(str(loc), *options)
    raw = want.tobytes()
    chunk = 32 * 1024
    fd = os.open(mnt / "a" / "data", os.O_RDONLY)
    try:
        assert os.pread(fd, 2 * chunk, 0) == raw[:2 * chunk]
        assert os.pread(fd, chunk, 3 * chunk) == raw[3 * chunk:4 * chunk]
        for off, n in ((2 * chunk, 100), (2 * chunk + 900, 200), (3 * chunk - 4, 4)):
            with pytest.raises(OSError) as err:
                os.pread(fd, n, off)
            assert err.value.errno == errno.EIO
        assert os.pread(fd, 5 * chunk, 3 * chunk) == raw[3 * chunk:]
    finally:
        os.close(fd)
    assert is_mounted(mnt) and daemon_pids(mnt), "the daemon must keep serving"
