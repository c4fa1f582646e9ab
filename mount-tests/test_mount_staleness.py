"""The staleness window (`ttl=`) of a read-only mount holds for values as well as metadata:
chunks rewritten or deleted underneath are read fresh at most one TTL later, also through a
file descriptor held open across the change (no chunk cache, no kernel page cache left)."""

from __future__ import annotations

import errno
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import S3_BUCKET, moto_or_skip  # noqa: E402
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


def test_a_dataset_replaced_by_gen_is_never_read_as_fill_or_with_old_metadata(
        binary, mounter, tmp_path):
    """`gen` over a mounted dataset renames the old one aside and deletes it. Within the TTL,
    the chunks the mount has not read are gone: such a read fails with EIO (the old metadata
    describes nothing any more) instead of returning fill values or the new dataset's
    chunks, and the next open sees the new dataset at once."""
    store = tmp_path / "ds.file"
    _url, values = _dataset(store)
    log = tmp_path / "mount.log"
    # Nothing read ahead or kept: the later read must reach the store.
    mnt = mounter.mount(str(store), "ttl=600,cache_size=0,readahead=0,direct_io", log=log)
    with open(mnt / "v" / "data", "rb") as f:
        assert f.read(ROW) == values[0].tobytes()
        cdl = tmp_path / "other.cdl"
        cdl.write_text("netcdf other {\ndimensions:\n x = 1 ;\nvariables:\n int other(x) ;\n"
                       "data:\n other = 5 ;\n}\n")
        r = subprocess.run([str(binary), "gen", "-o", str(store), str(cdl)],
                           capture_output=True)
        assert r.returncode == 0, r.stderr
        with pytest.raises(OSError) as gone:
            os.pread(f.fileno(), ROW, 20 * ROW)
        assert gone.value.errno == errno.EIO
    assert "the dataset was removed or replaced while open" in log.read_text()
    header = (mnt / "@header.cdl").read_text()
    assert "int other(x)" in header and "double v(" not in header
    assert np.fromfile(mnt / "other" / "data", "<i4").tolist() == [5]


_OLD_CDL = """netcdf old {
dimensions:
 x = 8 ;
 y = 8 ;
variables:
 int v(x) ;
  v:_ChunkSizes = 2 ;
 int w(x) ;
  w:_ChunkSizes = 2 ;
 int t(x) ;
  t:_ChunkSizes = 2 ;
 int r(y) ;
  r:_ChunkSizes = 2 ;
data:
 v = 1, 2, 3, 4, 5, 6, 7, 8 ;
 w = 10, 11, 12, 13, 14, 15, 16, 17 ;
 t = 20, 21, 22, 23, 24, 25, 26, 27 ;
 r = 30, 31, 32, 33, 34, 35, 36, 37 ;
}
"""

# What became of each variable: `v` rechunked, `w` gone, `t` of another type, `r` shorter
# (its old chunks' keys still hold values, the new dataset's).
_NEW_CDL = """netcdf new {
dimensions:
 x = 8 ;
 y = 6 ;
variables:
 int v(x) ;
  v:_ChunkSizes = 4 ;
 float t(x) ;
  t:_ChunkSizes = 2 ;
 int r(y) ;
  r:_ChunkSizes = 2 ;
data:
 v = 100, 200, 300, 400, 500, 600, 700, 800 ;
 t = 0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5 ;
 r = 61, 62, 63, 64, 65, 66 ;
}
"""


@pytest.mark.parametrize("kind,when", [
    ("directory", "read at once"),
    ("directory", "after a reload"),
    ("zip", "after a reload"),
])
def test_descriptors_opened_before_a_replacement_never_read_through_the_new_dataset(
        binary, mounter, tmp_path, kind, when):
    """`gen` replaces a mounted dataset with one that lacks a variable, has another with
    other chunks, one of another type and one shorter. A `data` file opened before never
    reads the new dataset's chunks through the old metadata, nor a variable it lacks as fill
    values: each read fails with EIO (one log line per file) or, where the bytes mean the
    same in both (`v`: the same type and shape), gives the new dataset's values as
    netCDF4-python reads them. Read at once, before any reload, the old directory is already
    deleted (the kernel's first read fails, which makes the mount reload, and its retry goes
    through the reloaded mount); after a reload, the mount reads the new dataset."""
    def gen(cdl_text: str, out: Path) -> None:
        cdl = tmp_path / "in.cdl"
        cdl.write_text(cdl_text)
        r = subprocess.run([str(binary), "gen", "-o", str(out), str(cdl)], capture_output=True)
        assert r.returncode == 0, r.stderr

    store = tmp_path / ("ds.zip" if kind == "zip" else "ds.file")
    gen(_OLD_CDL, store)
    # netcdf-c reads no zip here: the new values from a directory store of the same CDL.
    twin = tmp_path / "twin.file"
    gen(_NEW_CDL, twin)
    want = netcdf_values(f"file://{twin}#mode=nczarr,file")
    assert "/w" not in want and want["/t"].dtype == np.float32 and len(want["/r"]) == 6
    # As `data` holds them.
    little = {k[1:]: a.astype(a.dtype.newbyteorder("<")).tobytes() for k, a in want.items()}
    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(store), "ttl=600" if when == "read at once" else "ttl=1", log=log)
    names = ["w", "v", "t", "r"]
    fds = {name: os.open(mnt / name / "data", os.O_RDONLY) for name in names}
    try:
        gen(_NEW_CDL, store)
        if when == "after a reload":
            time.sleep(2.0)
            assert sorted(os.listdir(mnt))[-3:] == ["r", "t", "v"]
        for attempt in range(2):
            for name in names:
                try:
                    got = os.pread(fds[name], 4096, 0)
                except OSError as e:
                    assert e.errno == errno.EIO, (name, e)
                    continue
                assert name in little and got == little[name], (name, attempt, got)
        if when == "read at once":
            # Through a name the kernel still holds from before (`ls mnt/w; od mnt/w/data`).
            try:
                late = os.open(mnt / "w" / "data", os.O_RDONLY)
            except FileNotFoundError:
                pass
            else:
                try:
                    with pytest.raises(OSError) as failed:
                        os.pread(late, 4096, 0)
                    assert failed.value.errno == errno.EIO
                finally:
                    os.close(late)
    finally:
        for fd in fds.values():
            os.close(fd)
    lines = [line for line in log.read_text().splitlines()
             if "the dataset was removed or replaced while open" in line]
    assert any("/w/data" in line for line in lines), log.read_text()
    for name in names:
        assert sum(f"/{name}/data:" in line for line in lines) <= 1, log.read_text()
    # A fresh open reads the new dataset.
    for name in ["v", "t", "r"]:
        assert (mnt / name / "data").read_bytes() == little[name], name
    # The kernel may hold the name `w` for its TTL; the header is made at each open.
    header = (mnt / "@header.cdl").read_text()
    assert "float t(x)" in header and "w(" not in header


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


def test_records_appended_underneath_reach_an_open_descriptor(binary, mounter, tmp_path):
    """An unlimited variable grows underneath (`nczarrfs put` appends records): after the
    TTL, a descriptor opened before reads on into the new records, and `stat` and new opens
    see the new size (a short read at the old end would make the kernel shrink the file)."""
    import netCDF4

    store = tmp_path / "rec.file"
    url = f"file://{store}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as nc:
        nc.createDimension("t", None)
        nc.createDimension("x", 3)
        v = nc.createVariable("a", "i4", ("t", "x"), chunksizes=(1, 3))
        v[0:2] = np.arange(6, dtype="i4").reshape(2, 3)
    mnt = mounter.mount(str(store), "ttl=1")
    data = mnt / "a" / "data"
    fd = os.open(data, os.O_RDONLY)
    try:
        assert os.pread(fd, 1000, 0) == np.arange(6, dtype="<i4").tobytes()
        more = np.arange(6, 12, dtype="<i4")
        r = subprocess.run([str(binary), "put", url, "a", "--start", "2,0"], input=more.tobytes(),
                           capture_output=True)
        assert r.returncode == 0, r.stderr
        time.sleep(2.0)
        assert os.stat(data).st_size == 48
        assert os.pread(fd, 1000, 0) == np.arange(12, dtype="<i4").tobytes()
        assert os.stat(data).st_size == 48
        assert data.read_bytes() == np.arange(12, dtype="<i4").tobytes()
    finally:
        os.close(fd)


def test_a_zip_replaced_underneath_is_seen_after_ttl(binary, mounter, tmp_path):
    """Writers replace a zip archive whole (a new file renamed over it): a read-only mount
    re-opens it within one TTL."""
    cdl = tmp_path / "z.cdl"
    cdl.write_text("netcdf z {\ndimensions:\n t = UNLIMITED ;\nvariables:\n int v(t) ;\n"
                   "data:\n v = 1, 2 ;\n}\n")
    zpath = tmp_path / "z.zip"
    r = subprocess.run([str(binary), "gen", "-o", str(zpath), str(cdl)], capture_output=True)
    assert r.returncode == 0, r.stderr
    mnt = mounter.mount(str(zpath), "ttl=1")
    assert (mnt / "v" / "data").read_bytes() == np.array([1, 2], "<i4").tobytes()
    r = subprocess.run([str(binary), "put", str(zpath), "v", "--start", "2"],
                       input=np.array([3], "<i4").tobytes(), capture_output=True)
    assert r.returncode == 0, r.stderr
    time.sleep(2.0)
    assert (mnt / "v" / "data").read_bytes() == np.array([1, 2, 3], "<i4").tobytes()


def test_metadata_changed_underneath_is_seen_after_ttl(mounter, tmp_path):
    """Listings, headers and attribute files follow a metadata change within one TTL, even
    after every directory was listed (the kernel may keep listings only as long as the
    directory's attributes are valid)."""
    import netCDF4

    store = tmp_path / "ds.file"
    _url, _values = _dataset(store)
    mnt = mounter.mount(str(store), "ttl=1")
    assert sorted(os.listdir(mnt)) == ["@attributes", "@header.cdl", "@metadata.json", "v"]
    assert os.listdir(mnt / "@attributes") == []
    assert os.listdir(mnt / "v" / "@attributes") == []
    header = (mnt / "@header.cdl").read_text()
    # netcdf-c 4.10.1 opens NCZarr in append mode without its variables, so the changed
    # dataset is written anew beside it and swapped in.
    changed = tmp_path / "changed.file"
    with netCDF4.Dataset(f"file://{changed}#mode=nczarr,file", "w") as nc:
        nc.history = "appended"
        nc.createDimension("y", ROWS)
        nc.createDimension("x", COLS)
        v = nc.createVariable("v", "f8", ("y", "x"), chunksizes=(4, COLS))
        v.units = "m"
        v[:] = _values
        w = nc.createVariable("w", "i4", ("x",))
        w[:] = np.arange(COLS, dtype="i4")
    os.rename(store, tmp_path / "old.file")
    os.rename(changed, store)
    time.sleep(2.0)
    assert sorted(os.listdir(mnt)) == [
        "@attributes", "@header.cdl", "@metadata.json", "v", "w"]
    assert os.listdir(mnt / "@attributes") == ["history"]
    assert os.listdir(mnt / "v" / "@attributes") == ["units"]
    assert (mnt / "@attributes" / "history").read_text() == "appended"
    assert (mnt / "w" / "data").read_bytes() == np.arange(COLS, dtype="<i4").tobytes()
    new_header = (mnt / "@header.cdl").read_text()
    assert new_header != header
    assert "int w(x) ;" in new_header
    assert ':history = "appended" ;' in new_header


def test_generated_files_read_whole_while_the_metadata_changes(mounter, tmp_path):
    """Generated files are read through the page cache when the size the kernel holds for
    them is right, which saves a request per open. While the metadata changes underneath,
    back and forth between a version with short headers and one with long ones, and readers
    keep the kernel's sizes fresh with `stat`, every read must give one version's content
    whole: never cut at the other version's size, never padded."""
    import random
    import threading

    import netCDF4

    store = tmp_path / "ds.file"
    other = tmp_path / "other.file"
    _url, values = _dataset(store)
    with netCDF4.Dataset(f"file://{other}#mode=nczarr,file", "w") as nc:
        nc.history = "a long history " * 40
        nc.createDimension("y", ROWS)
        nc.createDimension("x", COLS)
        v = nc.createVariable("v", "f8", ("y", "x"), chunksizes=(4, COLS))
        v.long_name = "a long name " * 30
        v[:] = values
    ttl = 0.3
    mnt = mounter.mount(str(store), f"ttl={ttl}")
    files = ["@header.cdl", "@metadata.json", "v/@header.cdl", "v/@metadata.json"]

    def swap() -> None:
        spare = tmp_path / "spare.file"
        os.rename(store, spare)
        os.rename(other, store)
        os.rename(spare, other)

    def read_all() -> dict[str, bytes]:
        return {f: (mnt / f).read_bytes() for f in files}

    versions = {f: set() for f in files}
    for _ in range(2):
        for f, content in read_all().items():
            versions[f].add(content)
        swap()
        time.sleep(ttl + 1.5)
    assert all(len(v) == 2 for v in versions.values()), "the two versions differ in every file"

    stop = threading.Event()
    seen: list[tuple[str, bytes]] = []
    opens = [0]

    def reader(seed: int) -> None:
        rng = random.Random(seed)
        while not stop.is_set():
            f = rng.choice(files)
            os.stat(mnt / f)
            seen.append((f, (mnt / f).read_bytes()))
            opens[0] += 1

    readers = [threading.Thread(target=reader, args=(i,)) for i in range(2)]
    for t in readers:
        t.start()
    rng = random.Random(1)
    try:
        # Quick changes (within one TTL of the last) and slow ones (after the kernel's sizes
        # have expired and the page cache is used again).
        for _ in range(12):
            time.sleep(rng.choice([0.05, 0.2, ttl + 1.2, ttl + 1.6]))
            swap()
    finally:
        stop.set()
        for t in readers:
            t.join()
    assert opens[0] > 100
    wrong = [(f, len(c)) for f, c in seen if c not in versions[f]]
    assert not wrong, f"{len(wrong)} of {len(seen)} reads were neither version: {wrong[:5]}"


def test_a_dataset_deleted_underneath_fails_reads_instead_of_reading_fill(mounter, tmp_path):
    """A chunk deleted underneath reads as fill, as in Zarr; a whole dataset gone is not a
    dataset of fill values: after the TTL its values fail with EIO (one log line), its listing
    stays, and it reads again once it is back."""
    store = tmp_path / "ds.file"
    _url, values = _dataset(store)
    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(store), "ttl=1", log=log)
    data = mnt / "v" / "data"
    assert data.read_bytes() == values.tobytes()
    away = tmp_path / "moved.file"
    store.rename(away)
    time.sleep(2.0)
    with pytest.raises(OSError) as gone:
        data.read_bytes()
    assert gone.value.errno == errno.EIO
    assert "the dataset is gone" in log.read_text()
    assert sorted(p.name for p in (mnt / "v").iterdir()) == [
        "@attributes", "@header.cdl", "@metadata.json", "data"]
    away.rename(store)
    time.sleep(2.0)
    assert data.read_bytes() == values.tobytes()


@pytest.mark.parametrize("ttl", ["ttl=0", "ttl=600"])
def test_sighup_refreshes_what_the_kernel_cached_whatever_the_ttl(mounter, tmp_path, ttl):
    """SIGHUP re-reads the metadata at once, whatever the TTL: the sizes, pages and names the
    kernel holds of files already read (for the TTL, an hour with `ttl=0`) follow it, so that
    `data` agrees with the shape in `@metadata.json` right after the signal."""
    import json
    import signal

    import netCDF4

    from conftest import daemon_pids, wait_until

    def write(path: Path, records: int, units: str | None) -> str:
        url = f"file://{path}#mode=nczarr,file"
        with netCDF4.Dataset(url, "w") as nc:
            nc.createDimension("t", None)
            nc.createDimension("x", 3)
            v = nc.createVariable("a", "i4", ("t", "x"), chunksizes=(1, 3))
            if units is not None:
                v.units = units
            v[0:records] = np.arange(records * 3, dtype="i4").reshape(records, 3)
            if units is None:
                nc.createVariable("gone", "i4", ("x",))[:] = np.arange(3, dtype="i4")
        return url

    store = tmp_path / "rec.file"
    write(store, 2, None)
    mnt = mounter.mount(str(store), ttl)
    data = mnt / "a" / "data"
    assert data.read_bytes() == np.arange(6, dtype="<i4").tobytes()
    assert "units" not in (mnt / "a" / "@header.cdl").read_text()
    assert json.loads((mnt / "a" / "@metadata.json").read_text())["shape"] == [2, 3]
    assert os.listdir(mnt / "a" / "@attributes") == []
    assert (mnt / "gone" / "data").stat().st_size == 12
    # netcdf-c 4.10.1 opens NCZarr in append mode without its variables, so the changed
    # dataset is written anew beside it and swapped in.
    changed = tmp_path / "changed.file"
    want = netcdf_values(write(changed, 4, "m"))["/a"]
    os.rename(store, tmp_path / "old.file")
    os.rename(changed, store)
    for pid in daemon_pids(mnt):
        os.kill(pid, signal.SIGHUP)
    assert wait_until(lambda: os.stat(data).st_size == want.nbytes, 5), os.stat(data).st_size
    assert np.fromfile(data, dtype="<i4").reshape(4, 3).tolist() == want.tolist()
    assert json.loads((mnt / "a" / "@metadata.json").read_text())["shape"] == [4, 3]
    assert 'a:units = "m" ;' in (mnt / "a" / "@header.cdl").read_text()
    assert os.listdir(mnt / "a" / "@attributes") == ["units"]
    assert (mnt / "a" / "@attributes" / "units").read_text() == "m"
    assert not (mnt / "gone").exists() and not (mnt / "gone" / "data").exists()


def test_a_zip_deleted_underneath_fails_reads_as_a_deleted_directory_does(mounter, tmp_path):
    """A zip archive deleted underneath is a dataset gone as a whole, as a directory store
    that is deleted: after the TTL its values fail with EIO (one log line) instead of being
    served from the unlinked archive, and it reads again once it is back."""
    import zipfile

    store = tmp_path / "ds.file"
    _url, values = _dataset(store)
    archive = tmp_path / "ds.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for f in sorted(store.rglob("*")):
            if f.is_file():
                z.write(f, f.relative_to(store).as_posix())
    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(archive), "ttl=1", log=log)
    data = mnt / "v" / "data"
    assert data.read_bytes() == values.tobytes()
    away = tmp_path / "moved.zip"
    archive.rename(away)
    time.sleep(2.0)
    with pytest.raises(OSError) as gone:
        data.read_bytes()
    assert gone.value.errno == errno.EIO
    assert "the dataset is gone" in log.read_text()
    away.rename(archive)
    time.sleep(2.0)
    assert data.read_bytes() == values.tobytes()


def _records(path: Path, dtype: str, records: int, chunks: tuple[int, int, int],
             seed: int) -> np.ndarray:
    """`t`: `dtype` on (time, y, x), time unlimited, zlib, written by netCDF4-python."""
    import netCDF4

    values = (np.random.default_rng(seed).standard_normal((records, 30, 40)) * 100).astype(dtype)
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file", "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("y", 30)
        nc.createDimension("x", 40)
        t = nc.createVariable("t", dtype, ("time", "y", "x"), chunksizes=chunks, zlib=True)
        t[0:records] = values
    return values


@pytest.mark.parametrize("name,dtype,records,chunks", [
    ("looked_up_again", "<f8", 6, (2, 30, 40)),
    ("still_cached", "<f8", 6, (2, 30, 40)),
    # Same size and chunks: the new chunks decode through the old metadata.
    ("looked_up_again", "<i4", 8, (2, 10, 20)),
])
def test_a_descriptor_opened_before_a_new_layout_never_reads_the_new_one(
        mounter, tmp_path, name, dtype, records, chunks):
    """The dataset is replaced underneath by one where `t` has another type (and shape and
    chunking). A descriptor opened before keeps the view it opened: its reads fail or give
    the old values, and its size stays the old one, also after another open read the new
    variable (the kernel must not share the pages and the size of one layout with the
    other). `still_cached`: the kernel still holds the name `data` from before the reload
    when the new open comes; that depends on sleeps, so an attempt where a loaded machine let
    the name expire first is made again."""
    for attempt in range(3):
        if _replace_under_a_held_descriptor(mounter, tmp_path / f"try{attempt}", name, dtype,
                                            records, chunks):
            return
    pytest.fail("the kernel never kept the name `data` cached until the new open")


def _replace_under_a_held_descriptor(mounter, root: Path, name, dtype, records, chunks) -> bool:
    """One attempt of the test above; False when `still_cached` lost its precondition."""
    root.mkdir()
    store = root / "ds.file"
    old = _records(store, "<f4", 8, (2, 10, 20), 1)
    replacement = root / "new.file"
    new = _records(replacement, dtype, records, chunks, 2)
    ttl = 2
    mnt = mounter.mount(str(store), f"ttl={ttl}")
    data = mnt / "t" / "data"
    held = os.open(data, os.O_RDONLY)
    first_lookup_done = time.monotonic()
    try:
        assert os.pread(held, 2 * old.nbytes, 0) == old.tobytes()
        if name == "still_cached":
            # A reload (nothing changed yet), then a lookup of `data` well after it: the name
            # stays cached past the next reload. The kernel keeps a name `ttl` seconds from
            # its lookup's answer, which comes after `lookup_sent`.
            time.sleep(ttl + 0.2)
            os.listdir(mnt)
            time.sleep(ttl / 2)
            lookup_sent = time.monotonic()
            assert os.stat(data).st_size == old.nbytes
            if lookup_sent < first_lookup_done + ttl:
                return False  # `data` may not have been looked up again here.
        os.rename(store, root / "old.file")
        os.rename(replacement, store)
        time.sleep(ttl * 0.65 if name == "still_cached" else ttl + 0.5)
        if name == "still_cached" and time.monotonic() + 0.05 > lookup_sent + ttl:
            return False
        fresh = os.open(data, os.O_RDONLY)
        try:
            assert os.pread(fresh, 2 * new.nbytes, 0) == new.tobytes()
            assert os.fstat(fresh).st_size == new.nbytes
        finally:
            os.close(fresh)
        assert os.fstat(held).st_size == old.nbytes
        try:
            got = os.pread(held, 2 * old.nbytes, 0)
        except OSError as e:
            assert e.errno == errno.EIO
        else:
            assert got == old.tobytes()
        assert os.fstat(held).st_size == old.nbytes
    finally:
        os.close(held)
    assert data.read_bytes() == new.tobytes()
    assert os.stat(data).st_size == new.nbytes
    return True


def _stored_records(array_dir: Path, chunks: int, chunk_len: int) -> np.ndarray:
    """What `chunks` uncompressed little-endian int32 chunks of a 1-d Zarr v2 array hold in
    storage now, a deleted chunk as the fill value 0: the values a reader that keeps the old
    metadata of a variable of `chunks * chunk_len` elements decodes."""
    parts = []
    for i in range(chunks):
        chunk = array_dir / str(i)
        parts.append(np.frombuffer(chunk.read_bytes(), "<i4") if chunk.exists()
                     else np.zeros(chunk_len, "<i4"))
    return np.concatenate(parts)


def test_a_descriptor_that_followed_appended_records_keeps_its_size_when_they_go(
        mounter, tmp_path):
    """`b` grows from 8 to 12 records underneath, then shrinks to 6, then grows to 10
    (zarr-python's `resize`). Descriptors opened at 8 follow the growth to 12 (whether they
    read in between or not); from the shrinking on, they are the file of 12 records that a
    descriptor opened at 12 is: its size, whatever later growth, and what the old metadata
    reads in storage. Never a size that reads short, nor the new variable's 10 records."""
    import zarr

    store = tmp_path / "grow.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=2)
    b = group.create_array("b", shape=(8,), chunks=(4,), dtype="<i4", compressors=None,
                           fill_value=0, attributes={"_ARRAY_DIMENSIONS": ["x"]})
    b[:] = np.arange(8) * 10
    ttl = 1
    mnt = mounter.mount(str(store), f"ttl={ttl}")
    data = mnt / "b" / "data"
    reader = os.open(data, os.O_RDONLY)
    idle = os.open(data, os.O_RDONLY)
    fds = [reader, idle]
    try:
        assert os.pread(reader, 1024, 0) == (np.arange(8) * 10).astype("<i4").tobytes()
        b.resize((12,))
        b[8:] = [80, 90, 100, 110]
        time.sleep(ttl + 1.5)
        grown = (np.arange(12) * 10).astype("<i4").tobytes()
        assert os.pread(reader, 1024, 0) == grown
        assert os.fstat(reader).st_size == 48
        at12 = os.open(data, os.O_RDONLY)
        fds.append(at12)
        assert os.pread(at12, 1024, 0) == grown
        b.resize((6,))
        time.sleep(ttl + 1.5)
        # zarr-python deletes the chunk wholly past the new end and keeps the one across it.
        assert not (store / "b" / "2").exists() and (store / "b" / "1").exists()
        old_view = _stored_records(store / "b", 3, 4).tobytes()
        for fd in fds:
            assert os.fstat(fd).st_size == 48
            assert os.pread(fd, 1024, 0) == old_view
            assert os.fstat(fd).st_size == 48
        b.resize((10,))
        time.sleep(ttl + 1.5)
        old_view = _stored_records(store / "b", 3, 4).tobytes()
        for fd in fds:
            assert os.fstat(fd).st_size == 48
            assert os.pread(fd, 1024, 0) == old_view
            assert os.fstat(fd).st_size == 48
    finally:
        for fd in fds:
            os.close(fd)
    now = zarr.open_array(str(store / "b"), mode="r")[:]
    assert now.shape == (10,)
    assert data.read_bytes() == now.astype("<i4").tobytes()
    assert os.stat(data).st_size == 40


def _two_variables(path: Path) -> dict[str, np.ndarray]:
    """`a` and `b`: float64 (8,) in uncompressed chunks of 4, written by zarr-python."""
    import zarr

    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    values = {"a": np.arange(8) + 0.5, "b": np.arange(8) * -2.0}
    for name, v in values.items():
        arr = group.create_array(name, shape=(8,), chunks=(4,), dtype="<f8", compressors=None,
                                 fill_value=0, attributes={"_ARRAY_DIMENSIONS": ["x"]})
        arr[:] = v
    return values


def _deleted_variable_fails_reads(mnt: Path, log: Path, values: dict[str, np.ndarray],
                                  delete) -> None:
    """Holds `a/data` open, runs `delete` (which deletes `a` from storage) and checks what
    the descriptor and the mount give after the TTL (1 s)."""
    data = mnt / "a" / "data"
    fd = os.open(data, os.O_RDONLY)
    try:
        assert os.pread(fd, 1024, 0) == values["a"].tobytes()
        delete()
        time.sleep(2.5)
        assert sorted(os.listdir(mnt)) == ["@attributes", "@header.cdl", "@metadata.json", "b"]
        assert not data.exists()
        # As for a deleted local file: the descriptor still has the file it read.
        assert os.fstat(fd).st_size == values["a"].nbytes
        for offset in (0, 32, 0):
            with pytest.raises(OSError) as failed:
                os.pread(fd, 1024, offset)
            assert failed.value.errno == errno.EIO
        assert os.fstat(fd).st_size == values["a"].nbytes
    finally:
        os.close(fd)
    assert (mnt / "b" / "data").read_bytes() == values["b"].tobytes()
    lines = [line for line in log.read_text().splitlines()
             if "the variable was deleted underneath" in line]
    assert len(lines) == 1 and "/a/data" in lines[0], lines


def test_a_variable_deleted_in_a_directory_fails_reads_instead_of_reading_fill(
        mounter, tmp_path):
    """zarr-python's `del group['a']` on the directory store: a descriptor of `a/data` opened
    before does not read fill values that no one stored; `b` reads on."""
    import zarr

    store = tmp_path / "two.zarr"
    values = _two_variables(store)
    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(store), "ttl=1", log=log)

    def delete() -> None:
        del zarr.open_group(str(store), mode="r+")["a"]
        assert not (store / "a").exists()

    _deleted_variable_fails_reads(mnt, log, values, delete)


def test_a_variable_deleted_from_s3_fails_reads_instead_of_reading_fill(
        mounter, tmp_path, monkeypatch):
    """The objects of `a` deleted from the bucket, as another S3 client deletes them."""
    endpoint = moto_or_skip()
    import boto3
    from botocore.config import Config

    store = tmp_path / "two.zarr"
    values = _two_variables(store)
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1",
                          config=Config(s3={"addressing_style": "path"}))
    client.create_bucket(Bucket=S3_BUCKET)
    prefix = f"deleted-{random.randrange(1 << 32):08x}"
    keys = {f"{prefix}/{p.relative_to(store).as_posix()}": p
            for p in store.rglob("*") if p.is_file()}
    for key, p in keys.items():
        client.put_object(Bucket=S3_BUCKET, Key=key, Body=p.read_bytes())
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    log = tmp_path / "mount.log"
    try:
        mnt = mounter.mount(f"{endpoint}/{S3_BUCKET}/{prefix}#mode=zarr,s3", "ttl=1", log=log)

        def delete() -> None:
            gone = [{"Key": k} for k in keys if k.startswith(f"{prefix}/a/")]
            assert len(gone) == 4  # .zarray, .zattrs, two chunks
            client.delete_objects(Bucket=S3_BUCKET, Delete={"Objects": gone})

        _deleted_variable_fails_reads(mnt, log, values, delete)
    finally:
        mounter.cleanup()
        client.delete_objects(Bucket=S3_BUCKET,
                              Delete={"Objects": [{"Key": k} for k in keys]})


@pytest.mark.parametrize("gone_by", ["deleted", "retyped"])
def test_a_variable_made_again_is_never_read_through_a_descriptor_of_the_old(
        mounter, tmp_path, gone_by):
    """`v` is deleted (or retyped from int32 to int64) underneath, and a reload sees it;
    then a `v` like the old one (int32, same trailing shape, chunks and fill value, more
    records) is made in its place. Descriptors opened before, one that read at each step
    and one that did not read in between, keep failing with `EIO`, as a deleted local
    file's descriptor never reads a new file made under its name; new opens read the new
    variable, on another inode."""
    import zarr

    store = tmp_path / "again.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=2)

    def make(dtype, rows, first):
        v = group.create_array("v", shape=(rows, 4), chunks=(2, 4), dtype=dtype,
                               fill_value=-1, compressors=None, overwrite=True,
                               attributes={"_ARRAY_DIMENSIONS": ["t", "x"]})
        values = (first + np.arange(rows * 4)).reshape(rows, 4).astype(dtype)
        v[:] = values
        return values

    old = make("<i4", 4, 0)
    ttl = 1
    mnt = mounter.mount(str(store), f"ttl={ttl}")
    data = mnt / "v" / "data"
    reader = os.open(data, os.O_RDONLY)
    idle = os.open(data, os.O_RDONLY)
    old_ino = os.fstat(reader).st_ino

    def fails(fd):
        with pytest.raises(OSError) as failed:
            os.pread(fd, 1024, 0)
        assert failed.value.errno == errno.EIO

    try:
        for fd in (reader, idle):
            assert os.pread(fd, 1024, 0) == old.tobytes()
        if gone_by == "deleted":
            del group["v"]
        else:
            make("<i8", 4, 500)
        time.sleep(ttl + 1.5)
        os.listdir(mnt)
        fails(reader)
        new = make("<i4", 9, 1000)
        time.sleep(ttl + 1.5)
        os.listdir(mnt)
        assert data.read_bytes() == new.tobytes()
        assert os.stat(data).st_ino != old_ino
        for fd in (reader, idle, reader):
            fails(fd)
            assert os.fstat(fd).st_size == old.nbytes
            assert os.fstat(fd).st_ino == old_ino
    finally:
        os.close(reader)
        os.close(idle)
