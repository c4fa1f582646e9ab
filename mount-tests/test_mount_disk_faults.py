"""`rw` mounts (and `put`) over a local file system that fails underneath: a full disk (a small
tmpfs, filled up), a read-only file system, an immutable object. Expected results come from
first principles: a call that fails changes nothing (a failed `write`, `rm`, `rename` or
`mkdir` leaves the file, the name, the directory as they were), data whose `write` succeeded
is stored once there is room again, and the daemon's memory stays within `cache_size`."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import daemon_pids, is_mounted  # noqa: E402
from datasets import netcdf_values  # noqa: E402
from test_mount_rw import netcdf_attrs, umount_and_wait  # noqa: E402

RECORD = 1024  # doubles per record of `a`: one chunk of 8 KiB per record


@pytest.fixture
def small_disk(tmp_path):
    """Mounts size-limited tmpfs file systems (`disk(size)`), unmounted at teardown."""
    mounted = []

    def disk(size: str = "2m", name: str = "disk") -> Path:
        path = tmp_path / name
        path.mkdir()
        subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       check=True)
        mounted.append(path)
        return path

    try:
        yield disk
    finally:
        for path in reversed(mounted):
            subprocess.run(["umount", "-l", str(path)], check=False)


def fill_up(disk: Path) -> Path:
    """Fills `disk` to the last block; removing the returned file gives the room back."""
    filler = disk / "filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k"], capture_output=True)
    return filler


def records_dataset(path: Path, records: int = 0) -> str:
    """`a(t, x)`: t unlimited, 1024 doubles per record, one record per chunk, `a:units = "m"`,
    `records` records of value record number + 1; NCZarr written by netCDF4-python."""
    import netCDF4

    url = f"file://{path}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as ds:
        ds.createDimension("t", None)
        ds.createDimension("x", RECORD)
        a = ds.createVariable("a", "f8", ("t", "x"), chunksizes=(1, RECORD))
        a.units = "m"
        for i in range(records):
            a[i] = np.full(RECORD, i + 1.0)
    return url


def record(value: float) -> bytes:
    return np.full(RECORD, value).tobytes()


def daemon_rss_kib(mnt: Path) -> int:
    (pid,) = daemon_pids(mnt)
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))


def test_changes_that_cannot_be_stored_stay_within_cache_size(mounter, small_disk):
    """With the disk full and the cache full of changed chunks, each write that needs room
    fails with ENOSPC and is not held: the daemon's memory does not grow with the data a
    writer goes on sending (16 MiB here, against a 64 KiB cache). Reads still work, and the
    acknowledged writes are stored once there is room."""
    disk = small_disk("2m")
    url = records_dataset(disk / "r.file", records=2)
    mnt = mounter.mount(url, "rw", "cache_size=64K")
    filler = fill_up(disk)
    fd = os.open(mnt / "a" / "data", os.O_WRONLY)
    closed = False
    try:
        before = daemon_rss_kib(mnt)
        acknowledged = []
        for i in range(2, 2050):
            try:
                assert os.pwrite(fd, record(i + 1.0), i * RECORD * 8) == RECORD * 8
                acknowledged.append(i)
            except OSError as e:
                assert e.errno == errno.ENOSPC
        grown = daemon_rss_kib(mnt) - before
        # 64 KiB hold 8 records; they go in while the cache has room, then nothing does.
        assert acknowledged == list(range(2, 10))
        assert grown < 8 << 10, f"the daemon grew by {grown} KiB"
        assert (mnt / "a" / "data").stat().st_size == 10 * RECORD * 8
        values = np.fromfile(mnt / "a" / "data", dtype="f8").reshape(-1, RECORD)
        assert np.array_equal(values[:, 0], np.arange(1.0, 11.0))
        with pytest.raises(OSError) as err:
            closed = True
            os.close(fd)
        assert err.value.errno == errno.ENOSPC
    finally:
        if not closed:
            os.close(fd)
    filler.unlink()
    umount_and_wait(mnt)
    stored = netcdf_values(url)["/a"]
    assert np.array_equal(stored, np.repeat(np.arange(1.0, 11.0), RECORD).reshape(10, RECORD))


def test_a_write_that_fails_for_room_changes_nothing(mounter, small_disk):
    """A program appending records stops at its first failed write: the file keeps the size
    the acknowledged writes gave it, the failed record is neither read nor stored later, and
    writes into chunks already held still succeed (they need no room)."""
    disk = small_disk("2m")
    url = records_dataset(disk / "r.file")
    mnt = mounter.mount(url, "rw", "cache_size=64K")
    filler = fill_up(disk)
    data = mnt / "a" / "data"
    fd = os.open(data, os.O_WRONLY | os.O_APPEND)
    closed = False
    try:
        acknowledged = 0
        for i in range(100):
            try:
                assert os.write(fd, record(i + 1.0)) == RECORD * 8
                acknowledged += 1
            except OSError as e:
                assert e.errno == errno.ENOSPC
                break
        assert acknowledged == 8
        assert os.fstat(fd).st_size == data.stat().st_size == 8 * RECORD * 8
        # Into the last record held: no room needed (its close, which stores, cannot).
        other = os.open(data, os.O_WRONLY)
        try:
            assert os.pwrite(other, np.float64(-1).tobytes(), 7 * RECORD * 8 + 8) == 8
        finally:
            with pytest.raises(OSError) as err:
                os.close(other)
            assert err.value.errno == errno.ENOSPC
        with pytest.raises(OSError) as err:
            closed = True
            os.close(fd)
        assert err.value.errno == errno.ENOSPC
    finally:
        if not closed:
            os.close(fd)
    expected = np.repeat(np.arange(1.0, 9.0), RECORD).reshape(8, RECORD)
    expected[7, 1] = -1
    assert np.array_equal(np.fromfile(data, dtype="f8").reshape(-1, RECORD), expected)
    filler.unlink()
    umount_and_wait(mnt)
    assert np.array_equal(netcdf_values(url)["/a"], expected)


def test_a_write_whose_second_part_finds_no_room_is_a_short_write(mounter, small_disk):
    """A write across a record boundary is two pieces here: when the first is stored and the
    second needs room there is none of, `write` returns the bytes of the first (as a local
    file on a disk that fills mid-write), and the file grows by those only."""
    disk = small_disk("2m")
    url = records_dataset(disk / "r.file")
    mnt = mounter.mount(url, "rw", "cache_size=64K")
    filler = fill_up(disk)
    data = mnt / "a" / "data"
    fd = os.open(data, os.O_WRONLY)
    try:
        # Eight records fill the cache.
        for i in range(8):
            assert os.pwrite(fd, record(i + 1.0), i * RECORD * 8) == RECORD * 8
        written = os.pwrite(fd, np.array([-2.0, -3.0]).tobytes(), 8 * RECORD * 8 - 8)
        assert written == 8
        assert os.fstat(fd).st_size == 8 * RECORD * 8
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    filler.unlink()
    umount_and_wait(mnt)
    expected = np.repeat(np.arange(1.0, 9.0), RECORD).reshape(8, RECORD)
    expected[7, -1] = -2.0
    assert np.array_equal(netcdf_values(url)["/a"], expected)


def test_a_failed_rm_or_mv_of_an_attribute_changes_nothing(mounter, small_disk):
    """`rm` and `mv` of an attribute file that cannot be stored fail with ENOSPC and leave the
    attribute as it was, on the mount and, once there is room, in storage."""
    disk = small_disk("1m")
    url = records_dataset(disk / "r.file")
    mnt = mounter.mount(url, "rw")
    filler = fill_up(disk)
    attrs = mnt / "a" / "@attributes"
    with pytest.raises(OSError) as err:
        os.unlink(attrs / "units")
    assert err.value.errno == errno.ENOSPC
    with pytest.raises(OSError) as err:
        os.rename(attrs / "units", attrs / "units2")
    assert err.value.errno == errno.ENOSPC
    assert sorted(os.listdir(attrs)) == ["units"]
    assert (attrs / "units").read_text().strip() == "m"
    filler.unlink()
    umount_and_wait(mnt)
    assert netcdf_attrs(url, "a") == {"units": "m"}


def shown_attrs(mnt: Path, var: str | None = None) -> dict[str, str]:
    """The text attributes a mount shows on `var` (the root group: None), the same in its
    attribute files, its `@metadata.json` and its `@header.cdl` (checked here)."""
    d = mnt / var if var else mnt
    files = {n: (d / "@attributes" / n).read_text() for n in os.listdir(d / "@attributes")}
    meta = json.loads((d / "@metadata.json").read_text())["attributes"]
    assert {n: a["value"] for n, a in meta.items() if a["type"] == "char"} == files
    header = (d / "@header.cdl").read_text()
    prefix = f"\t\t{var or ''}:"
    lines = [line for line in header.splitlines() if line.startswith(prefix)]
    assert lines == [f'{prefix}{n} = "{v}" ;' for n, v in files.items()]
    return files


def write_attr_file(path: Path, text: str, fsync: bool = False) -> None:
    """Writes `text` to an attribute file, created if need be; with `fsync`, the `fsync`
    before the close is checked, and the close is too."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        os.write(fd, text.encode())
        if fsync:
            os.fsync(fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.close(fd)
        raise
    os.close(fd)


def test_a_failed_attribute_write_shows_what_is_stored(mounter, small_disk, tmp_path):
    """An attribute file whose close (or `fsync`) cannot store its text fails with ENOSPC,
    logged once, and the mount shows what storage holds, as netCDF4-python reads it once
    unmounted: the old value, or no attribute where the file was new. So does a truncate of
    an attribute file or of a `data` file by path. Once there is room, the text still held by
    an open file is stored at its close, and new writes work."""
    disk = small_disk("1m")
    url = records_dataset(disk / "r.file")
    log = tmp_path / "mount.log"
    mnt = mounter.mount(url, "rw", log=log)
    filler = fill_up(disk)
    units = mnt / "a" / "@attributes" / "units"
    for path, text in ((units, "km\n"), (mnt / "@attributes" / "title", "new\n")):
        with pytest.raises(OSError) as err:
            write_attr_file(path, text)
        assert err.value.errno == errno.ENOSPC
    with pytest.raises(OSError) as err:
        write_attr_file(units, "cm\n", fsync=True)
    assert err.value.errno == errno.ENOSPC
    for path, size in ((units, 0), (mnt / "a" / "data", 64)):
        with pytest.raises(OSError) as err:
            os.truncate(path, size)
        assert err.value.errno == errno.ENOSPC
    shown = {"": shown_attrs(mnt), "a": shown_attrs(mnt, "a")}
    shape = json.loads((mnt / "a" / "@metadata.json").read_text())["shape"]
    assert (mnt / "a" / "data").stat().st_size == 0
    umount_and_wait(mnt)
    # One line per failed file, however often its flush was tried (fsync, close, release).
    errors = [line.split("] ", 1)[1].split(": ", 1)[0]
              for line in log.read_text().splitlines() if " ERROR " in line]
    assert errors == ["flush /a/@attributes/units", "flush /@attributes/title",
                      "flush /a/@attributes/units", "truncate /a/@attributes/units",
                      "truncate /a/data"]
    assert shown == {"": netcdf_attrs(url), "a": netcdf_attrs(url, "a")}
    assert shape == list(netcdf_values(url)["/a"].shape)

    mnt = mounter.mount(url, "rw")
    fd = os.open(mnt / "a" / "@attributes" / "units", os.O_WRONLY | os.O_TRUNC)
    try:
        os.write(fd, b"km\n")
        with pytest.raises(OSError) as err:
            os.fsync(fd)
        assert err.value.errno == errno.ENOSPC
        assert shown_attrs(mnt, "a") == {"units": "m"}
        filler.unlink()
    finally:
        os.close(fd)
    write_attr_file(mnt / "@attributes" / "title", "new\n")
    shown = {"": shown_attrs(mnt), "a": shown_attrs(mnt, "a")}
    assert shown == {"": {"title": "new"}, "a": {"units": "km"}}
    umount_and_wait(mnt)
    assert shown == {"": netcdf_attrs(url), "a": netcdf_attrs(url, "a")}


def test_a_failed_mkdir_is_enospc_and_logs_no_leftovers(mounter, small_disk, tmp_path):
    """A `mkdir` on a full disk fails with ENOSPC having stored nothing: no warning about
    objects left under the new name, and a retry with room succeeds."""
    disk = small_disk("1m")
    url = records_dataset(disk / "r.file")
    log = tmp_path / "mount.log"
    mnt = mounter.mount(url, "rw", log=log)
    filler = fill_up(disk)
    with pytest.raises(OSError) as err:
        os.mkdir(mnt / "g2")
    assert err.value.errno == errno.ENOSPC
    assert not list((disk / "r.file").glob("g2*"))
    filler.unlink()
    os.mkdir(mnt / "g2")
    umount_and_wait(mnt)
    assert "stay" not in log.read_text()
    import netCDF4

    with netCDF4.Dataset(url) as ds:
        assert list(ds.groups) == ["g2"]


def test_a_failed_rename_on_a_zip_store_keeps_the_old_name(mounter, small_disk, binary,
                                                           tmp_path):
    """On a zip store the rename is stored by rewriting the archive: when that fails (ENOSPC)
    the variable keeps its old name, as on a directory store, and a retry with room works."""
    disk = small_disk("1m")
    cdl = tmp_path / "r.cdl"
    cdl.write_text("netcdf r {\ndimensions:\n\tx = 4 ;\nvariables:\n\tint a(x) ;\n\tint b(x) ;\n"
                   "data:\n a = 1, 2, 3, 4 ;\n}\n")
    archive = disk / "r.zip"
    subprocess.run([str(binary), "gen", "-k", "zip", "-o", f"file://{archive}#mode=nczarr,zip",
                    str(cdl)], check=True)
    before = archive.read_bytes()
    mnt = mounter.mount(str(archive), "rw")
    filler = fill_up(disk)
    with pytest.raises(OSError) as err:
        os.rename(mnt / "a", mnt / "a2")
    assert err.value.errno == errno.ENOSPC
    assert sorted(p for p in os.listdir(mnt) if not p.startswith("@")) == ["a", "b"]
    assert np.array_equal(np.fromfile(mnt / "a" / "data", dtype="i4"), [1, 2, 3, 4])
    assert archive.read_bytes() == before
    filler.unlink()
    os.rename(mnt / "a", mnt / "a2")
    umount_and_wait(mnt)
    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
    assert any(n.endswith("a2/.zarray") for n in names)
    assert not any(n.endswith("/a/.zarray") or n == "a/.zarray" for n in names)


def test_a_metadata_set_whose_rename_fails_is_put_back(small_disk, binary, tmp_path):
    """`put` appending records renames the group's new dimension length and the array's new
    shape into place together. When one rename fails (the array's object is immutable, EPERM)
    the others are undone: netCDF4-python still opens the dataset, as it was, and a retry
    works once the object can be replaced."""
    disk = small_disk("1m")
    cdl = tmp_path / "r.cdl"
    cdl.write_text("netcdf r {\ndimensions:\n\tt = UNLIMITED ;\n\tx = 4 ;\nvariables:\n"
                   "\tint a(t, x) ;\ndata:\n a = 1,2,3,4,5,6,7,8 ;\n}\n")
    store = disk / "r.file"
    subprocess.run([str(binary), "gen", "-o", str(store), str(cdl)], check=True)
    url = f"file://{store}#mode=nczarr,file"
    values = np.arange(8, dtype="=i4").tobytes()
    put = [str(binary), "put", str(store), "a", "--start", "2,0"]
    zarray = store / "a" / ".zarray"
    subprocess.run(["chattr", "+i", str(zarray)], check=True)
    try:
        r = subprocess.run(put, input=values, capture_output=True)
        assert r.returncode == 1
        assert b"Operation not permitted" in r.stderr and b"a/.zarray" in r.stderr
        assert np.array_equal(netcdf_values(url)["/a"], np.arange(1, 9).reshape(2, 4))
    finally:
        subprocess.run(["chattr", "-i", str(zarray)], check=True)
    assert not [p for p in store.rglob("*") if ".nczarrfs-tmp." in p.name]
    subprocess.run(put, input=values, check=True)
    expected = np.concatenate([np.arange(1, 9), np.arange(8)]).reshape(4, 4)
    assert np.array_equal(netcdf_values(url)["/a"], expected)


def test_rw_mounts_of_a_directory_store_that_cannot_be_written_are_refused(
        mounter, small_disk, binary, tmp_path):
    """A directory store on a read-only file system, or one the daemon's user may not write
    in, is refused at `mount -o rw` with the reason and the path, as a zip archive there is:
    otherwise writes succeed and only `fsync` or `close` fail."""
    disk = small_disk("1m")
    url = records_dataset(disk / "r.file")
    readonly = tmp_path / "ro"
    readonly.mkdir()
    subprocess.run(["mount", "--bind", str(disk), str(readonly)], check=True)
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(readonly)], check=True)
        mnt = mounter.mountpoint()
        r = mounter.run("mount", "-o", "rw", str(readonly / "r.file"), str(mnt))
        assert r.returncode != 0 and not is_mounted(mnt)
        assert f"{readonly / 'r.file'}: Read-only file system" in r.stderr
        # Read-only is still fine.
        mounter.mount(str(readonly / "r.file"))
    finally:
        mounter.cleanup()
        subprocess.run(["umount", "-l", str(readonly)], check=False)
    # Another owner's directory, and a daemon without the capability to override permissions.
    os.chown(disk / "r.file", 12345, 12345)
    mnt = mounter.mountpoint()
    r = subprocess.run(["setpriv", "--bounding-set=-dac_override,-dac_read_search",
                        str(binary), "mount", "-o", "rw", str(disk / "r.file"), str(mnt)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and not is_mounted(mnt)
    assert f"{disk / 'r.file'}: Permission denied" in r.stderr
    # With the capability, it is mounted.
    mounter.mount(str(disk / "r.file"), "rw")
