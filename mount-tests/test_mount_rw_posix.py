"""What programs expect of files, on `rw` mounts: `O_TRUNC` empties what is not written again
(`cp`, `cat >`, numpy.memmap "w+"), `O_APPEND` writes at the end, `ftruncate` and
`posix_fallocate` grow, a failed `fsync` is reported again. Expected values come from what a local file does (the same operations on a
file in a temporary directory) or from first principles; after unmount netCDF4-python must
read them."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import wait_until  # noqa: E402
from datasets import netcdf_values  # noqa: E402
from test_mount_rw import umount_and_wait  # noqa: E402

# netCDF's default fill of a float (netcdf.h).
NC_FILL_FLOAT = np.float32(9.9692099683868690e36)
RECORD = 35  # values per record of `rec` and `z`


def records_dataset(path: Path) -> str:
    """`field(256, 128)` doubles (256 KiB, several chunks), and two record variables `rec` and
    `z` of 35 floats per record on one unlimited dimension, 5 records each."""
    import netCDF4

    url = f"file://{path}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as ds:
        ds.title = "posix"
        ds.createDimension("time", None)
        ds.createDimension("k", RECORD)
        ds.createDimension("y", 256)
        ds.createDimension("x", 128)
        f = ds.createVariable("field", "f8", ("y", "x"), chunksizes=(64, 128))
        f[:] = np.arange(256 * 128, dtype="f8").reshape(256, 128) + 1
        f.units = "m"
        for name, base in (("rec", 0), ("z", 1000)):
            v = ds.createVariable(name, "f4", ("time", "k"), chunksizes=(2, RECORD))
            v[0:5] = np.arange(5 * RECORD, dtype="f4").reshape(5, RECORD) + base
    return url


@pytest.fixture
def dataset(tmp_path):
    return records_dataset(tmp_path / "ds.file")


def test_truncating_an_attribute_file_empties_the_attribute(mounter, dataset):
    mnt = mounter.mount(dataset, "rw")
    subprocess.run(f": > {mnt / '@attributes' / 'title'}", shell=True, check=True)
    subprocess.run(["cp", "/dev/null", str(mnt / "field" / "@attributes" / "units")], check=True)
    # A file left empty is set by the kernel's release, which comes after `close` returned
    # (docs/mount.md): the empty text shows once it has come, not necessarily at once.
    assert wait_until(lambda: (mnt / "@attributes" / "title").read_bytes() == b"")
    assert wait_until(lambda: (mnt / "field" / "@attributes" / "units").read_bytes() == b"")
    umount_and_wait(mnt)
    import netCDF4

    with netCDF4.Dataset(dataset) as ds:
        assert ds.title == ""
        assert ds["field"].units == ""


def test_cp_of_a_sparse_file_onto_data_stores_its_holes_as_zeros(mounter, dataset, tmp_path):
    """`cp` truncates its target and skips the holes of a sparse source, expecting zeros
    there: the values must be the source's, bytes for bytes."""
    size = 256 * 128 * 8
    source = tmp_path / "sparse.bin"
    with open(source, "wb") as f:
        f.truncate(size)
        f.seek(100_000)
        f.write(np.array([4.5, 5.5], dtype="=f8").tobytes())
    mnt = mounter.mount(dataset, "rw")
    for sparse in ("auto", "always"):
        subprocess.run(["cp", f"--sparse={sparse}", str(source), str(mnt / "field" / "data")],
                       check=True)
        assert (mnt / "field" / "data").read_bytes() == source.read_bytes(), sparse
    umount_and_wait(mnt)
    expected = np.fromfile(source, dtype="=f8").reshape(256, 128)
    assert np.array_equal(netcdf_values(dataset)["/field"], expected)


def test_o_trunc_zeroes_what_is_not_written_again(mounter, dataset, tmp_path):
    """A local file truncated and written again holds the new bytes, then ends; netCDF cannot
    shrink a variable, so what follows reads zeros, as a hole of a local file does. Records of
    `rec` past the rewritten ones become zeros, and its sibling `z` keeps its values."""
    mnt = mounter.mount(dataset, "rw")
    before_z = np.fromfile(mnt / "z" / "data", dtype="=f4")
    rec_size = (mnt / "rec" / "data").stat().st_size
    head = np.arange(50, dtype="=f4") - 7  # one record and a half
    src = tmp_path / "head.bin"
    head.tofile(src)
    subprocess.run(f"cat {src} > {mnt / 'rec' / 'data'}", shell=True, check=True)
    expected = head.tobytes().ljust(rec_size, b"\0")
    assert (mnt / "rec" / "data").read_bytes() == expected
    subprocess.run(f": > {mnt / 'field' / 'data'}", shell=True, check=True)
    assert not any((mnt / "field" / "data").read_bytes())
    # Opened without O_TRUNC, the rest stays: dd conv=notrunc.
    subprocess.run(["dd", f"of={mnt / 'z' / 'data'}", "conv=notrunc", "status=none"],
                   input=np.array([1.5], dtype="=f4").tobytes(), check=True)
    umount_and_wait(mnt)
    values = netcdf_values(dataset)
    assert values["/rec"].tobytes() == expected
    assert not values["/field"].any()
    z = before_z.copy()
    z[0] = 1.5
    assert np.array_equal(values["/z"].reshape(-1), z)


def test_o_trunc_keeps_what_other_files_wrote_after_the_truncating_open(
    mounter, dataset, tmp_path
):
    """Writer A opens `field/data` with O_TRUNC and writes; B (another descriptor, no
    O_TRUNC) and `dd conv=notrunc` write further on and close; A writes again and closes
    last. A local file was truncated at A's open, before the other writes, so it keeps them;
    what nobody wrote reads zeros (the mount keeps the variable's size)."""
    size = 256 * 128 * 8

    def run(path: Path) -> None:
        a = os.open(path, os.O_WRONLY | os.O_TRUNC)
        try:
            os.write(a, np.array([100.5, 101.5], "=f8").tobytes())
            b = os.open(path, os.O_WRONLY)
            os.pwrite(b, np.array([888.25], "=f8").tobytes(), 1000 * 8)
            os.close(b)
            subprocess.run(["dd", f"of={path}", "bs=8", "seek=2000", "conv=notrunc",
                            "status=none"], input=np.array([7.0], "=f8").tobytes(), check=True)
            os.pwrite(a, np.array([-3.0], "=f8").tobytes(), 100 * 8)
        finally:
            os.close(a)

    local = tmp_path / "local.bin"
    local.write_bytes(b"\x01" * size)
    run(local)
    expected = local.read_bytes().ljust(size, b"\0")
    mnt = mounter.mount(dataset, "rw")
    run(mnt / "field" / "data")
    assert (mnt / "field" / "data").read_bytes() == expected
    umount_and_wait(mnt)
    field = netcdf_values(dataset)["/field"]
    assert field.tobytes() == expected
    assert field.reshape(-1)[[0, 1, 100, 1000, 2000]].tolist() == [100.5, 101.5, -3.0, 888.25,
                                                                   7.0]


def test_numpy_memmap_w_plus_starts_from_zeros_and_r_plus_keeps_the_rest(mounter, dataset):
    """numpy.memmap mode "w+" opens with O_TRUNC (a local file would read zeros, then the
    values written through the mapping); mode "r+" changes only what it writes."""
    mnt = mounter.mount(dataset, "rw")
    path = mnt / "field" / "data"
    new = np.memmap(path, dtype="=f8", mode="w+", shape=(256, 128))
    assert not new.any()
    new[10, :] = 7.0
    new.flush()
    del new
    old = np.memmap(path, dtype="=f8", mode="r+", shape=(256, 128))
    old[20, 0] = 9.0
    old.flush()
    del old
    umount_and_wait(mnt)
    expected = np.zeros((256, 128))
    expected[10, :] = 7.0
    expected[20, 0] = 9.0
    assert np.array_equal(netcdf_values(dataset)["/field"], expected)


def test_o_append_writes_at_the_end_after_a_sibling_added_records(mounter, dataset):
    """`z/data` open for appending while records are added through `rec`: POSIX appends at
    the end of the file, which has grown (its new records read as fill)."""
    mnt = mounter.mount(dataset, "rw")
    z = mnt / "z" / "data"
    record = RECORD * 4
    with open(z, "ab", buffering=0) as appender:
        subprocess.run(f"head -c {2 * record} /dev/zero >> {mnt / 'rec' / 'data'}", shell=True,
                       check=True)
        # No stat here: the kernel's size for `z` is still the one it had at the open.
        appender.write(np.full(RECORD, 7.0, dtype="=f4").tobytes())
    assert z.stat().st_size == 8 * record
    umount_and_wait(mnt)
    values = netcdf_values(dataset)
    z = values["/z"]
    assert z.shape == (8, RECORD)
    assert np.all(z[5:7] == NC_FILL_FLOAT)
    assert np.array_equal(z[7], np.full(RECORD, 7.0, dtype="f4"))


def test_appended_pieces_that_end_inside_a_record_stay_contiguous(mounter, dataset):
    """Appends of 100 bytes to 140-byte records: each piece continues where the last ended,
    also when a `stat` between them tells the kernel the size rounded up to the record."""
    mnt = mounter.mount(dataset, "rw")
    rec = mnt / "rec" / "data"
    pieces = np.arange(75, dtype="=f4") + 0.5  # three pieces of 25 values
    with open(rec, "ab", buffering=0) as appender:
        for i in range(3):
            appender.write(pieces[25 * i:25 * (i + 1)].tobytes())
            os.stat(rec)
    umount_and_wait(mnt)
    flat = netcdf_values(dataset)["/rec"].reshape(-1)
    assert flat.size == 8 * RECORD  # 5 records and 75 values, rounded up to whole records
    assert np.array_equal(flat[5 * RECORD:5 * RECORD + 75], pieces)


def test_growth_by_ftruncate_and_posix_fallocate_is_stored(mounter, dataset):
    """Growing `rec` by 2 records with `ftruncate`, then 1 more with `posix_fallocate`: stored
    at the close (read from storage while still mounted), the new records are fill."""
    mnt = mounter.mount(dataset, "rw")
    rec = mnt / "rec" / "data"
    record = RECORD * 4
    fd = os.open(rec, os.O_WRONLY)
    try:
        os.ftruncate(fd, 7 * record)
        os.posix_fallocate(fd, 0, 8 * record)
        os.posix_fallocate(fd, 0, 4 * record)  # inside the file: nothing changes
    finally:
        os.close(fd)
    assert rec.stat().st_size == 8 * record
    stored = netcdf_values(dataset)["/rec"]
    assert stored.shape == (8, RECORD)
    assert np.all(stored[5:] == NC_FILL_FLOAT)
    # `truncate` of a path has no close to wait for.
    subprocess.run(["truncate", "-s", str(9 * record), str(rec)], check=True)
    assert netcdf_values(dataset)["/rec"].shape == (9, RECORD)
    umount_and_wait(mnt)


def test_growth_that_ends_inside_an_element_makes_it_one_whole_fill_value(mounter, tmp_path):
    """netCDF4-python writes `double r(t)`, 5 records in chunks of 3: netcdf-c declares its
    default fill rounded (`9.96921e+36`) and fills the rest of the chunks it writes with the
    exact NC_FILL_DOUBLE. `truncate -s 44` (and `ftruncate` to 81, inside record 10) grow
    `r` by whole records of fill: each new element must be one whole fill value, which
    netCDF4-python masks, not a mix of the two spellings."""
    import netCDF4

    url = f"file://{tmp_path / 'ds.file'}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as ds:
        ds.createDimension("t", None)
        ds.createVariable("r", "f8", ("t",), chunksizes=(3,))[0:5] = np.arange(5.0)
    fills = {9.969209968386869e36, float(np.float64(9.96921e36))}
    mnt = mounter.mount(url, "rw")
    data = mnt / "r" / "data"
    subprocess.run(["truncate", "-s", "44", str(data)], check=True)
    assert data.stat().st_size == 48
    assert np.frombuffer(data.read_bytes()[40:], "=f8")[0] in fills
    fd = os.open(data, os.O_WRONLY)
    try:
        os.ftruncate(fd, 81)
    finally:
        os.close(fd)
    assert data.stat().st_size == 88
    assert all(x in fills for x in np.frombuffer(data.read_bytes()[40:], "=f8"))
    umount_and_wait(mnt)
    with netCDF4.Dataset(url) as ds:
        r = ds["r"]
        values = r[:]
        assert values[:5].tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
        # Record 5 shares chunk 1 with netcdf-c's records: its exact fill, masked.
        assert np.ma.is_masked(values[5])
        r.set_auto_mask(False)
        assert all(x in fills for x in r[5:].tolist()), r[5:].tolist()


def test_a_write_of_values_moves_the_mtime_of_data_so_rsync_copies_it(mounter, dataset,
                                                                      tmp_path):
    """POSIX: a write updates the file's mtime and ctime. rsync's quick check (size and mtime,
    to the second) skips a file whose mtime did not move, so a mirror of the mount would
    keep the old values. Other files keep their times."""
    mnt = mounter.mount(dataset, "rw")
    backup = tmp_path / "backup"
    subprocess.run(["rsync", "-a", f"{mnt}/", f"{backup}/"], check=True)
    before = {name: (mnt / name / "data").stat() for name in ("field", "z")}
    header = (mnt / "field" / "@header.cdl").stat()
    # rsync compares whole seconds: the write must come in a later second than the mtime.
    while int(time.time()) <= before["field"].st_mtime:
        time.sleep(0.05)
    subprocess.run(["dd", f"of={mnt / 'field' / 'data'}", "bs=8", "seek=3", "conv=notrunc",
                    "status=none"], input=np.array([7.5], "=f8").tobytes(), check=True)
    after = (mnt / "field" / "data").stat()
    assert after.st_mtime_ns > before["field"].st_mtime_ns
    assert after.st_ctime_ns > before["field"].st_ctime_ns
    assert after.st_size == before["field"].st_size
    assert (mnt / "z" / "data").stat().st_mtime_ns == before["z"].st_mtime_ns
    assert (mnt / "field" / "@header.cdl").stat().st_mtime_ns == header.st_mtime_ns
    subprocess.run(["rsync", "-a", f"{mnt}/", f"{backup}/"], check=True)
    copied = np.frombuffer((backup / "field" / "data").read_bytes(), "=f8")
    assert copied[3] == 7.5
    umount_and_wait(mnt)
    assert netcdf_values(dataset)["/field"].reshape(-1)[3] == 7.5


def test_a_failed_fsync_is_reported_again_at_close(mounter, tmp_path):
    """On a full disk `fsync` fails with ENOSPC; nothing was stored, so the `close` that
    follows must fail too, and the value must be stored once there is room."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(disk)], check=True)
    try:
        url = records_dataset(disk / "ds.file")
        mnt = mounter.mount(url, "rw")
        filler = disk / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=4k"], capture_output=True)
        fd = os.open(mnt / "z" / "data", os.O_WRONLY)
        closed = False
        try:
            os.pwrite(fd, np.full(RECORD, 42.0, dtype="=f4").tobytes(), 0)
            with pytest.raises(OSError) as err:
                os.fsync(fd)
            assert err.value.errno == errno.ENOSPC
            with pytest.raises(OSError) as err:
                closed = True
                os.close(fd)
            assert err.value.errno == errno.ENOSPC
        finally:
            if not closed:
                os.close(fd)
        filler.unlink()
        umount_and_wait(mnt)
        assert np.all(netcdf_values(url)["/z"][0] == 42.0)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def renames_dataset(path: Path) -> str:
    """`int a(x)` = 1, 2, 3, 4; `double b(x)` = 0.5, 1.5, 2.5, 3.5; group `g` holding
    `short w(x)` = 10, 20, 30, 40."""
    import netCDF4

    url = f"file://{path}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as ds:
        ds.createDimension("x", 4)
        ds.createVariable("a", "i4", ("x",))[:] = [1, 2, 3, 4]
        ds.createVariable("b", "f8", ("x",))[:] = [0.5, 1.5, 2.5, 3.5]
        ds.createGroup("g").createVariable("w", "i2", ("x",))[:] = [10, 20, 30, 40]
    return url


def test_a_directory_held_in_a_renamed_object_never_reaches_what_takes_its_name(
    mounter, tmp_path
):
    """A directory descriptor (or a shell's working directory) in `a`, then `mv a old;
    mv b a`. A local file system would give `old/data` through it; the mount answers
    ENOENT, as for files open under the old name (docs/mount.md). Either way nothing may
    reach the `a` that is now `b`. The same for a group replaced by `mv g g2; mkdir g`."""
    url = renames_dataset(tmp_path / "ds.file")
    mnt = mounter.mount(url, "rw")
    held = os.open(mnt / "a", os.O_RDONLY | os.O_DIRECTORY)
    held_group = os.open(mnt / "g", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.rename(mnt / "a", mnt / "old")
        os.rename(mnt / "b", mnt / "a")
        with pytest.raises(OSError) as opened:
            os.open("data", os.O_WRONLY, dir_fd=held)
        assert opened.value.errno == errno.ENOENT
        with pytest.raises(OSError) as listed:
            os.listdir(held)
        assert listed.value.errno == errno.ENOENT
        # A shell in `g`: the group is renamed and another made under its name.
        shell = subprocess.run(
            "mv ../g ../g2 && mkdir ../g && { echo hi > @attributes/note; } 2>/dev/null;"
            " echo $?; ls w",
            shell=True, cwd=mnt / "g", capture_output=True, text=True, check=False)
        assert shell.stdout.splitlines()[0] != "0", shell
        assert shell.returncode != 0, shell
        with pytest.raises(OSError) as in_group:
            os.open("@attributes/other", os.O_WRONLY | os.O_CREAT, dir_fd=held_group)
        assert in_group.value.errno == errno.ENOENT
        # The new names work, and reach the objects that have them.
        assert np.frombuffer((mnt / "a" / "data").read_bytes(), "=f8").tolist() == [
            0.5, 1.5, 2.5, 3.5]
        assert np.frombuffer((mnt / "old" / "data").read_bytes(), "=i4").tolist() == [
            1, 2, 3, 4]
        assert sorted(os.listdir(mnt / "g")) == ["@attributes", "@header.cdl",
                                                 "@metadata.json"]
        assert "w" in os.listdir(mnt / "g2")
    finally:
        os.close(held)
        os.close(held_group)
    umount_and_wait(mnt)
    import netCDF4

    with netCDF4.Dataset(url) as ds:
        assert ds["a"][:].tolist() == [0.5, 1.5, 2.5, 3.5]
        assert ds["old"][:].tolist() == [1, 2, 3, 4]
        assert ds["g2"]["w"][:].tolist() == [10, 20, 30, 40]
        assert ds["g"].ncattrs() == [] and not ds["g"].variables


def test_a_mapping_of_a_renamed_variable_never_shares_pages_with_what_takes_its_name(
    mounter, tmp_path
):
    """Process X maps `a/data`; then `mv a old; mv b a`, and Y maps the new `a/data`. Y must
    see and write `b`'s values; X's write through its old map may reach `old` (as on a
    local file system) or be refused (as the mount does, like any file open under the old
    name), never `b`."""
    url = renames_dataset(tmp_path / "ds.file")
    mnt = mounter.mount(url, "rw")
    x = np.memmap(mnt / "a" / "data", dtype="=i4", mode="r+", shape=(4,))
    assert x.tolist() == [1, 2, 3, 4]
    os.rename(mnt / "a", mnt / "old")
    os.rename(mnt / "b", mnt / "a")
    y = np.memmap(mnt / "a" / "data", dtype="=f8", mode="r+", shape=(4,))
    assert y.tolist() == [0.5, 1.5, 2.5, 3.5]
    assert x.tolist() == [1, 2, 3, 4]
    y[1] = 42.25
    y.flush()
    x[0] = -5
    try:
        x.flush()
        x_stored = True
    except OSError as e:
        assert e.errno in (errno.ENOENT, errno.EIO), e
        x_stored = False
    assert y.tolist() == [0.5, 42.25, 2.5, 3.5]
    del x, y
    umount_and_wait(mnt)
    import netCDF4

    with netCDF4.Dataset(url) as ds:
        assert ds["a"][:].tolist() == [0.5, 42.25, 2.5, 3.5]
        old = ds["old"][:].tolist()
        assert old == ([-5, 2, 3, 4] if x_stored else [1, 2, 3, 4])
