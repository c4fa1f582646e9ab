"""`nczarrfs mount -o rw` against the kernel: writes at random offsets, appends along the
unlimited dimension, attribute files, groups, renames, refusals, concurrency and crashes.
Expected values are numpy models of what was written; after unmount netCDF4-python must read
exactly them."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import (S3_BUCKET, daemon_pids, is_mounted, moto_or_skip, unmount,  # noqa: E402
                      wait_until)
from datasets import netcdf_values, nczarr_dataset  # noqa: E402

# netCDF's default fill values (netcdf.h) and the one the dataset declares for `temp`.
NC_FILL_DOUBLE = 9.9692099683868690e36
TEMP_FILL = -999.0


@pytest.fixture
def nczarr(tmp_path):
    return nczarr_dataset(tmp_path / "ds.file")


def dtype_of(mnt: Path, var: str) -> tuple[np.dtype, list[int]]:
    meta = json.loads((mnt / var / "@metadata.json").read_text())
    return np.dtype(meta["dtype"]), meta["shape"]


def read_var(mnt: Path, var: str) -> np.ndarray:
    dt, shape = dtype_of(mnt, var)
    arr = np.fromfile(mnt / var / "data", dtype=dt)
    assert arr.nbytes == (mnt / var / "data").stat().st_size
    return arr.reshape(shape)


def netcdf_attrs(url: str, var: str | None = None) -> dict:
    import netCDF4

    with netCDF4.Dataset(url) as ds:
        obj = ds.variables[var] if var else ds
        return {k: obj.getncattr(k) for k in obj.ncattrs()}


def umount_and_wait(mnt: Path) -> None:
    """Unmounts and waits for the daemon to finish its final flush."""
    pids = daemon_pids(mnt)
    unmount(mnt)
    assert not is_mounted(mnt)
    assert wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), 30)


def test_random_writes_match_a_numpy_model(mounter, nczarr):
    expected = {k.strip("/"): v.copy() for k, v in netcdf_values(nczarr).items()}
    mnt = mounter.mount(nczarr, "rw")
    rng = random.Random(7)
    for var in ("temp", "counts", "big", "flags", "scalar", "sub/vals"):
        model = expected[var].reshape(-1).view(np.uint8)
        path = mnt / var / "data"
        size = path.stat().st_size
        assert size == model.nbytes
        with open(path, "r+b", buffering=0) as f:
            for _ in range(40):
                off = rng.randrange(size)
                n = rng.randint(1, min(64, size - off))
                payload = bytes(rng.randrange(256) for _ in range(n))
                assert os.pwrite(f.fileno(), payload, off) == n
                model[off:off + n] = np.frombuffer(payload, np.uint8)
        assert path.read_bytes() == model.tobytes(), var
    # dd into the middle without truncating, in blocks that straddle chunks.
    model = expected["temp"].reshape(-1).view(np.uint8)
    block = np.arange(100, dtype="<f4").tobytes()
    subprocess.run(["dd", f"of={mnt / 'temp' / 'data'}", "bs=100", "seek=2", "conv=notrunc",
                    "status=none"], input=block[:300], check=True)
    model[200:500] = np.frombuffer(block[:300], np.uint8)
    assert (mnt / "temp" / "data").read_bytes() == model.tobytes()
    umount_and_wait(mnt)
    got = {k.strip("/"): v for k, v in netcdf_values(nczarr).items()}
    for var, arr in expected.items():
        assert got[var].tobytes() == arr.tobytes(), var


def test_o_trunc_rewrites_in_place(mounter, nczarr):
    mnt = mounter.mount(nczarr, "rw")
    new = (np.arange(35, dtype=np.int16) * 7).reshape(5, 7)
    src = mnt.parent / "counts.bin"
    new.astype(np.dtype("=i2")).tofile(src)
    subprocess.run(f"cat {src} > {mnt / 'counts' / 'data'}", shell=True, check=True)
    assert (mnt / "counts" / "data").stat().st_size == 70
    assert np.array_equal(read_var(mnt, "counts"), new)
    umount_and_wait(mnt)
    assert np.array_equal(netcdf_values(nczarr)["/counts"], new)


def test_appends_grow_the_unlimited_dimension(mounter, nczarr):
    mnt = mounter.mount(nczarr, "rw")
    before = read_var(mnt, "temp").copy()
    new_times = np.array([2.0, 2.5, 3.0], dtype="=f8")
    src = mnt.parent / "times.bin"
    new_times.tofile(src)
    subprocess.run(f"cat {src} >> {mnt / 'time' / 'data'}", shell=True, check=True)
    assert (mnt / "time" / "data").stat().st_size == 7 * 8
    root = json.loads((mnt / "@metadata.json").read_text())
    assert {d["name"]: d["size"] for d in root["dimensions"]}["time"] == 7
    # Every variable on `time` grows; its new records read as fill.
    temp = read_var(mnt, "temp")
    assert temp.shape == (7, 5, 7)
    assert np.array_equal(temp[:4], before)
    assert np.all(temp[4:] == np.float32(TEMP_FILL))
    # A partial record: 10 values start record 7, the other 25 read as fill.
    part = np.arange(10, dtype="=f4") + 0.25
    part.tofile(src)
    subprocess.run(f"cat {src} >> {mnt / 'temp' / 'data'}", shell=True, check=True)
    temp = read_var(mnt, "temp")
    assert temp.shape == (8, 5, 7)
    flat = temp[7].reshape(-1)
    assert np.array_equal(flat[:10], part)
    assert np.all(flat[10:] == np.float32(TEMP_FILL))
    times = read_var(mnt, "time")
    assert times.shape == (8,)
    assert times[7] == NC_FILL_DOUBLE
    # Python appends through O_APPEND.
    with open(mnt / "time" / "data", "ab") as f:
        f.write(np.array([9.5], dtype="=f8").tobytes())
    assert read_var(mnt, "time").shape == (9,)
    umount_and_wait(mnt)
    vals = netcdf_values(nczarr)
    expected_time = np.concatenate([np.arange(4) * 0.5, new_times, [NC_FILL_DOUBLE, 9.5]])
    assert np.array_equal(vals["/time"], expected_time)
    t = vals["/temp"]
    assert t.shape == (9, 5, 7)
    assert np.array_equal(t[:4], before)
    assert np.array_equal(t[7].reshape(-1)[:10], part)
    assert np.all(t[4:7] == np.float32(TEMP_FILL)) and np.all(t[8] == np.float32(TEMP_FILL))


def test_fixed_variables_refuse_growth_with_efbig(mounter, nczarr):
    mnt = mounter.mount(nczarr, "rw")
    path = mnt / "counts" / "data"
    fd = os.open(path, os.O_WRONLY)
    try:
        with pytest.raises(OSError) as e:
            os.pwrite(fd, b"\x01\x00", 70)
        assert e.value.errno == errno.EFBIG
        # A write that straddles the end is cut short at the end.
        assert os.pwrite(fd, b"\x05\x00\x06\x00", 68) == 2
    finally:
        os.close(fd)
    assert path.stat().st_size == 70
    assert read_var(mnt, "counts").reshape(-1)[-1] == 5


def test_a_variable_using_its_unlimited_dimension_again_cannot_grow_through_data(
    mounter, tmp_path
):
    """Growing `r` of `w(r, r)` changes its row length, so appended bytes would land on
    values already stored (element (1, 1) of the 3 x 3 layout): appends and growing
    truncates are EFBIG with a log line saying why. Growth through `a(r)` keeps every value
    of `w` at its index, as netCDF4-python reads it after the unmount."""
    import netCDF4

    url = f"file://{tmp_path / 'ds.file'}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w", format="NETCDF4") as ds:
        ds.createDimension("r", None)
        ds.createDimension("x", 2)
        w = ds.createVariable("w", "f4", ("r", "r"))
        w[0:2, 0:2] = np.array([[1, 2], [3, 4]], dtype="f4")
        q = ds.createVariable("q", "i4", ("r", "x", "r"))
        q[0:2, :, 0:2] = np.arange(8, dtype="i4").reshape(2, 2, 2)
        ds.createVariable("a", "i4", ("r",))
    log = tmp_path / "mount.log"
    mnt = mounter.mount(url, "rw", log=log)
    for var, size in (("w", 16), ("q", 32)):
        path = mnt / var / "data"
        with pytest.raises(OSError) as e, open(path, "ab") as f:
            f.write(b"\0" * 8)
        assert e.value.errno == errno.EFBIG, var
        with pytest.raises(OSError) as e:
            os.truncate(path, size + 4)
        assert e.value.errno == errno.EFBIG, var
        assert path.stat().st_size == size
    text = log.read_text()
    assert "w/data: write at 16 past the end of a variable that uses its unlimited dimension r again" in text
    assert "truncate /q/data to 36 bytes: past the end of a variable that uses its unlimited dimension r again" in text
    with open(mnt / "a" / "data", "ab") as f:
        f.write(np.array([7, 8, 9], dtype="i4").tobytes())
    assert (mnt / "w" / "data").stat().st_size == 5 * 5 * 4
    umount_and_wait(mnt)
    with netCDF4.Dataset(url) as ds:
        w = ds["w"][:]
        assert w.shape == (5, 5)
        assert np.array_equal(w[:2, :2], [[1, 2], [3, 4]])
        assert w.mask[:, 2:].all() and w.mask[2:].all()
        q = ds["q"][:]
        assert np.array_equal(q[:2, :, :2], np.arange(8).reshape(2, 2, 2))
        assert q.mask[2:].all() and q.mask[:, :, 2:].all()
        assert np.array_equal(ds["a"][2:], [7, 8, 9])


def test_attribute_files(mounter, nczarr):
    mnt = mounter.mount(nczarr, "rw")
    attrs = mnt / "temp" / "@attributes"
    (attrs / "missing_value").write_text("-999.f\n")
    (attrs / "ids").write_text("1LL, 2LL")
    (attrs / "counts").write_text("1, 2\n")
    (attrs / "long_name").write_text("air temperature\n")
    (attrs / "valid_range").write_text("-10, 10\n")  # existing float attribute stays float
    (mnt / "@attributes" / "history").write_text("made by a test")
    os.unlink(mnt / "@attributes" / "version")
    meta = json.loads((mnt / "temp" / "@metadata.json").read_text())["attributes"]
    assert meta["missing_value"] == {"type": "float", "value": [-999.0]}
    assert meta["ids"] == {"type": "int64", "value": [1, 2]}
    assert meta["counts"] == {"type": "int", "value": [1, 2]}
    assert meta["valid_range"] == {"type": "float", "value": [-10.0, 10.0]}
    assert (attrs / "ids").read_text() == "1LL, 2LL\n"
    assert (attrs / "long_name").read_bytes() == b"air temperature"
    assert sorted(os.listdir(mnt / "@attributes")) == ["factors", "history", "title"]
    assert "version" not in (mnt / "@header.cdl").read_text()
    assert ':history = "made by a test" ;' in (mnt / "@header.cdl").read_text()
    umount_and_wait(mnt)
    a = netcdf_attrs(nczarr, "temp")
    assert a["missing_value"].dtype == np.float32 and a["missing_value"] == -999.0
    assert a["ids"].dtype == np.int64 and list(a["ids"]) == [1, 2]
    assert a["counts"].dtype == np.int32 and list(a["counts"]) == [1, 2]
    assert a["valid_range"].dtype == np.float32 and list(a["valid_range"]) == [-10, 10]
    assert a["long_name"] == "air temperature"
    g = netcdf_attrs(nczarr)
    assert "version" not in g
    assert g["history"] == "made by a test"


def test_attribute_text_ends_at_a_nul_byte_in_nczarr(mounter, nczarr, tmp_path):
    """netcdf-c cannot open an NCZarr dataset with a NUL byte in its JSON, and ends text at
    a NUL when it writes: an attribute file written with one stores the text before it
    (shown so at once), and the log says what was dropped."""
    log = tmp_path / "mount.log"
    mnt = mounter.mount(nczarr, "rw", log=log)
    (mnt / "temp" / "@attributes" / "note").write_bytes(b"a\0b")
    (mnt / "@attributes" / "ended").write_bytes(b"c\0")
    assert (mnt / "temp" / "@attributes" / "note").read_bytes() == b"a"
    assert (mnt / "@attributes" / "ended").read_bytes() == b"c"
    umount_and_wait(mnt)
    assert netcdf_attrs(nczarr, "temp")["note"] == "a"
    assert netcdf_attrs(nczarr)["ended"] == "c"
    warned = [line for line in log.read_text().splitlines() if "NUL" in line]
    assert len(warned) == 1 and '/temp: attribute "note"' in warned[0], warned


def test_shell_redirections_keep_the_type_of_an_existing_attribute(mounter, tmp_path):
    # `echo VALUE > FILE` closes a duplicate of the file before anything is written, then
    # writes the text: it must be typed by the attribute as it was when the file was opened.
    import netCDF4

    url = f"file://{tmp_path / 's.file'}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w", format="NETCDF4") as ds:
        ds.version = np.int32(3)
        ds.factors = np.array([1.5, 2.5], dtype="f4")
        ds.setncattr_string("names", ["a", "b"])
        ds.createDimension("x", 2)
        v = ds.createVariable("temp", "f4", ("x",))
        v.valid_range = np.array([-50, 50], dtype="f4")
    mnt = mounter.mount(url, "rw")

    def echo(text: str, path: Path) -> None:
        subprocess.run(["bash", "-c", 'echo "$0" > "$1"', text, str(path)], check=True)

    echo("-10, 10", mnt / "temp" / "@attributes" / "valid_range")
    echo("3", mnt / "@attributes" / "factors")
    echo("2.5", mnt / "@attributes" / "version")
    echo('"p", "q"', mnt / "@attributes" / "names")
    umount_and_wait(mnt)
    a = netcdf_attrs(url, "temp")
    assert a["valid_range"].dtype == np.float32 and list(a["valid_range"]) == [-10, 10]
    g = netcdf_attrs(url)
    assert isinstance(g["factors"], np.float32) and g["factors"] == 3
    assert isinstance(g["version"], np.float64) and g["version"] == 2.5
    assert g["names"] == ["p", "q"]


def test_special_values_written_back_as_shown_keep_their_type(mounter, tmp_path):
    """An attribute file shows NaN and infinities as ncdump prints them; `cat FILE > tmp; cat
    tmp > FILE` (an editor's save) must keep the float/double, as ncgen reads that text. A
    character constant is a byte, as in ncgen (`'a'` is 97b), and its code among floats
    (ncgen and ncdump: `1.5f, 'a'` is `1.5f, 97.f`)."""
    import netCDF4

    url = f"file://{tmp_path / 's.file'}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w", format="NETCDF4") as ds:
        ds.dnan = np.float64("nan")
        ds.dinf = np.float64("inf")
        ds.createDimension("x", 2)
        v = ds.createVariable("temp", "f4", ("x",))
        v.missing_value = np.float32("nan")
        v.valid_max = np.float32("inf")
    mnt = mounter.mount(url, "rw")
    files = {
        "dnan": mnt / "@attributes" / "dnan",
        "dinf": mnt / "@attributes" / "dinf",
        "missing_value": mnt / "temp" / "@attributes" / "missing_value",
        "valid_max": mnt / "temp" / "@attributes" / "valid_max",
    }
    shown = {name: path.read_bytes() for name, path in files.items()}
    assert shown == {"dnan": b"NaN\n", "dinf": b"Infinity\n",
                     "missing_value": b"NaNf\n", "valid_max": b"Infinityf\n"}, shown
    for name, path in files.items():
        path.write_bytes(shown[name])
    (mnt / "@attributes" / "minus").write_text("1.5, -Infinity\n")
    (mnt / "@attributes" / "letters").write_text("'a', 'b'\n")
    (mnt / "@attributes" / "mixed").write_text("1.5f, 'a'\n")
    umount_and_wait(mnt)
    g = netcdf_attrs(url)
    assert isinstance(g["dnan"], np.float64) and np.isnan(g["dnan"])
    assert isinstance(g["dinf"], np.float64) and g["dinf"] == np.inf
    assert g["minus"].dtype == np.float64 and list(g["minus"]) == [1.5, -np.inf]
    assert g["letters"].dtype == np.int8 and list(g["letters"]) == [97, 98]
    assert g["mixed"].dtype == np.float32 and list(g["mixed"]) == [1.5, 97]
    a = netcdf_attrs(url, "temp")
    assert isinstance(a["missing_value"], np.float32) and np.isnan(a["missing_value"])
    assert isinstance(a["valid_max"], np.float32) and a["valid_max"] == np.inf


def test_mkdir_and_renames(mounter, nczarr):
    import netCDF4

    mnt = mounter.mount(nczarr, "rw")
    (mnt / "newgroup").mkdir()
    (mnt / "sub" / "deeper").mkdir()
    (mnt / "flags").rename(mnt / "flags2")
    (mnt / "sub" / "inner").rename(mnt / "sub" / "inner2")
    (mnt / "temp" / "@attributes" / "long_name").rename(mnt / "temp" / "@attributes" / "title")
    assert sorted(os.listdir(mnt / "sub")) == sorted(
        ["@header.cdl", "@metadata.json", "@attributes", "vals", "inner2", "deeper"])
    assert (mnt / "flags2" / "data").read_bytes() == bytes(range(0, 210, 30))
    assert not (mnt / "flags").exists()
    assert json.loads((mnt / "@metadata.json").read_text())["groups"] == ["sub", "newgroup"]
    umount_and_wait(mnt)
    with netCDF4.Dataset(nczarr) as ds:
        assert set(ds.groups) == {"sub", "newgroup"}
        assert set(ds["sub"].groups) == {"inner2", "deeper"}
        assert "flags" not in ds.variables
        assert list(ds["flags2"][:]) == list(range(0, 210, 30))
        assert ds["temp"].title == "temperature"
        assert "long_name" not in ds["temp"].ncattrs()


@pytest.mark.parametrize("action", [
    "rmdir-var", "rmdir-group", "rm-data", "rm-header", "mkdir-in-var", "mkdir-in-attrs",
    "mkdir-bad-name", "create-file", "shrink", "write-header", "mv-across", "mv-data",
    "mkfifo", "mknod-file", "reserved-global-attr", "reserved-var-attr", "mv-to-reserved-attr",
])
def test_refused_operations_are_eperm(mounter, nczarr, tmp_path, action):
    def attrs():
        return [{k: np.asarray(v).tolist() for k, v in netcdf_attrs(nczarr, var).items()}
                for var in (None, "temp")]

    before = attrs()
    log = tmp_path / "mount.log"
    mnt = mounter.mount(nczarr, "rw", log=log)
    ops = {
        "rmdir-var": lambda: os.rmdir(mnt / "counts"),
        "rmdir-group": lambda: os.rmdir(mnt / "sub" / "inner"),
        "rm-data": lambda: os.unlink(mnt / "counts" / "data"),
        "rm-header": lambda: os.unlink(mnt / "@header.cdl"),
        "mkdir-in-var": lambda: os.mkdir(mnt / "counts" / "g"),
        "mkdir-in-attrs": lambda: os.mkdir(mnt / "@attributes" / "g"),
        "mkdir-bad-name": lambda: os.mkdir(mnt / " bad"),
        "create-file": lambda: open(mnt / "notes.txt", "w").close(),
        "shrink": lambda: os.truncate(mnt / "temp" / "data", 10),
        "write-header": lambda: open(mnt / "@header.cdl", "w").close(),
        "mv-across": lambda: os.rename(mnt / "counts", mnt / "sub" / "counts"),
        "mv-data": lambda: os.rename(mnt / "counts" / "data", mnt / "counts" / "values"),
        "mkfifo": lambda: os.mkfifo(mnt / "@attributes" / "fifo"),
        "mknod-file": lambda: os.mknod(mnt / "@attributes" / "made", stat.S_IFREG | 0o644),
        # netcdf-c answers "String match to name in use" for these.
        "reserved-global-attr": lambda: (mnt / "@attributes" / "_NCProperties").write_text("x"),
        "reserved-var-attr": lambda: (mnt / "temp" / "@attributes" / "NAME").write_text("x"),
        "mv-to-reserved-attr": lambda: os.rename(mnt / "temp" / "@attributes" / "long_name",
                                                 mnt / "temp" / "@attributes" / "_nczarr_attr"),
    }
    with pytest.raises(OSError) as e:
        ops[action]()
    assert e.value.errno == errno.EPERM, action
    assert "EPERM" in log.read_text()
    umount_and_wait(mnt)
    assert attrs() == before
    import netCDF4

    with netCDF4.Dataset(nczarr) as ds:
        assert ds.getncattr("_NCProperties") != "x"


def test_an_unchanged_fill_value_may_be_written_back(mounter, nczarr):
    """`cp -r` of a mounted dataset onto itself writes every attribute file back as it was:
    `_FillValue` unchanged is no change, a new one is EPERM (the variable is already stored)."""
    mnt = mounter.mount(nczarr, "rw")
    fill = mnt / "temp" / "@attributes" / "_FillValue"
    text = fill.read_text()
    fill.write_text(text)
    with pytest.raises(OSError) as e:
        fill.write_text("-1.f")
    assert e.value.errno == errno.EPERM
    assert fill.read_text() == text


@pytest.mark.parametrize("kind", ["nczarr", "zarr"])
def test_a_new_fill_value_is_refused_when_its_file_is_created(mounter, tmp_path, kind):
    """netCDF-4 takes no `_FillValue` for a variable already defined (NC_ELATEFILL), which
    every variable of a mounted dataset is, whether chunks of it are stored (`w`) or not
    (`v`): creating the file fails with EPERM and a log line saying why, by a shell
    redirection as by `O_CREAT | O_EXCL`, and nothing is stored."""
    import netCDF4
    import zarr

    if kind == "nczarr":
        url = f"file://{tmp_path / 'ds.file'}#mode=nczarr,file"
        with netCDF4.Dataset(url, "w") as ds:
            ds.createDimension("d", 4)
            ds.createVariable("v", "i4", ("d",), fill_value=False)
            ds.createVariable("w", "i4", ("d",), fill_value=False)[:] = [1, 2, 3, 4]
    else:
        url = str(tmp_path / "ds.zarr")
        root = zarr.open_group(url, mode="w", zarr_format=2)
        root.create_array("v", shape=(4,), dtype="i4", fill_value=None)
        root.create_array("w", shape=(4,), dtype="i4", chunks=(2,))[:] = [1, 2, 3, 4]
    log = tmp_path / "mount.log"
    mnt = mounter.mount(url, "rw", log=log)
    for var in ("v", "w"):
        fill = mnt / var / "@attributes" / "_FillValue"
        r = subprocess.run(["sh", "-c", f'echo -999 > "{fill}"'], capture_output=True,
                           text=True)
        assert r.returncode != 0 and "Operation not permitted" in r.stderr, r.stderr
        with pytest.raises(OSError) as e:
            os.open(fill, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        assert e.value.errno == errno.EPERM
        assert os.listdir(fill.parent) == [], var
    umount_and_wait(mnt)
    if kind == "nczarr":
        with netCDF4.Dataset(url) as ds:
            assert ds["v"].ncattrs() == [] and ds["w"].ncattrs() == []
            assert list(ds["w"][:]) == [1, 2, 3, 4]
    else:
        root = zarr.open_group(url, mode="r")
        assert dict(root["v"].attrs) == {} and dict(root["w"].attrs) == {}
        assert root["v"].metadata.fill_value is None
        assert root["w"].metadata.fill_value == 0
        assert list(root["w"][:]) == [1, 2, 3, 4]
    lines = [line for line in log.read_text().splitlines() if "_FillValue" in line]
    assert len(lines) == 4, lines
    for line in lines:
        assert "the fill value of a variable already in storage cannot change" in line, line
        assert line.endswith("(EPERM)"), line


def test_attributes_named_as_netcdf_does_not_allow_are_rewritten_but_not_made(mounter, tmp_path):
    """A pure Zarr attribute whose name netCDF refuses (not in NFC, a trailing space, a `/`)
    takes a new value like any other: by a shell redirection, an open with `O_CREAT` and
    Python's `write_text`. A new attribute so named is refused when its file is opened for
    writing (EPERM), since the shell's `echo v > file` does not check the close. zarr-python
    reads what is stored."""
    import unicodedata

    import zarr

    nfd = unicodedata.normalize("NFD", "attribüt")
    store = tmp_path / "names.zarr"
    root = zarr.open_group(str(store), mode="w", zarr_format=2)
    root.attrs.update({nfd: 1, "trail ": 2, "a/b": "s"})
    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(store), "rw", log=log)
    attrs = mnt / "@attributes"
    r = subprocess.run(["sh", "-c", f'echo 42 > "{attrs / nfd}"'], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    fd = os.open(attrs / "trail ", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        assert os.write(fd, b"43\n") == 3
    finally:
        os.close(fd)
    (attrs / "a%2Fb").write_text("u\n")
    assert (attrs / nfd).read_text() == "42\n"
    assert (attrs / "trail ").read_text() == "43\n"
    for entry in [unicodedata.normalize("NFD", "neü"), "new ", "c%2Fd"]:
        r = subprocess.run(["sh", "-c", f'echo 12 > "{attrs / entry}"'], capture_output=True,
                           text=True)
        assert r.returncode != 0, entry
        assert "Operation not permitted" in r.stderr, r.stderr
        assert not (attrs / entry).exists(), entry
    umount_and_wait(mnt)
    assert dict(zarr.open_group(str(store), mode="r").attrs) == {nfd: 42, "trail ": 43,
                                                                 "a/b": "u"}
    text = log.read_text()
    assert text.count("(EPERM)") == 3, text
    assert "normalization form C" in text and "end with a space" in text, text


def test_an_open_attribute_file_follows_its_rename_and_its_removal(mounter, nczarr):
    """Text written to an attribute file lands where the file is at its close, as with any
    file: under its new name after a rename (replacing the attribute there), nowhere after an
    unlink (the attribute does not come back)."""
    mnt = mounter.mount(nczarr, "rw")
    attrs = mnt / "temp" / "@attributes"
    (attrs / "other").write_text("kept until replaced")
    before = {p.name for p in attrs.iterdir()}
    fd = os.open(attrs / "long_name", os.O_WRONLY | os.O_TRUNC)
    os.write(fd, b"renamed while open")
    os.rename(attrs / "long_name", attrs / "other")
    os.close(fd)
    fd = os.open(attrs / "gone", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"written, then removed")
    os.unlink(attrs / "gone")
    os.close(fd)
    assert {p.name for p in attrs.iterdir()} == before - {"long_name"}
    assert (attrs / "other").read_text() == "renamed while open"
    umount_and_wait(mnt)
    import netCDF4

    with netCDF4.Dataset(nczarr) as ds:
        temp = ds["temp"]
        assert temp.getncattr("other") == "renamed while open"
        assert "long_name" not in temp.ncattrs() and "gone" not in temp.ncattrs()


def test_files_open_on_a_renamed_variable_never_reach_the_one_that_takes_its_name(
    mounter, tmp_path
):
    """`mv a old; mv b a` is the usual way to replace a variable. Files opened on `a` before
    it stop working, as documented (a write fails, a close that owes a flush reports it); the
    variable that now has the name keeps its values and attributes."""
    import netCDF4

    url = f"file://{tmp_path / 'ds.file'}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as ds:
        ds.createDimension("x", 4)
        for name, value in (("a", 1), ("b", 2)):
            v = ds.createVariable(name, "i4", ("x",))
            v[:] = [value] * 4
            v.units = f"units of {name}"
    mnt = mounter.mount(url, "rw")
    data = os.open(mnt / "a" / "data", os.O_RDWR)
    truncating = os.open(mnt / "a" / "data", os.O_WRONLY | os.O_TRUNC)
    os.pwrite(truncating, np.array([7], "=i4").tobytes(), 0)
    attr = os.open(mnt / "a" / "@attributes" / "units", os.O_WRONLY | os.O_TRUNC)
    os.write(attr, b"meant for a")
    os.rename(mnt / "a", mnt / "old")
    os.rename(mnt / "b", mnt / "a")
    with pytest.raises(OSError) as write:
        os.pwrite(data, np.array([99, 99], "=i4").tobytes(), 0)
    assert write.value.errno == errno.ENOENT
    with pytest.raises(OSError) as read:
        os.pread(data, 16, 0)
    assert read.value.errno == errno.ENOENT
    os.close(data)
    for fd in (truncating, attr):
        with pytest.raises(OSError) as close:
            os.close(fd)
        assert close.value.errno == errno.ENOENT
    umount_and_wait(mnt)
    with netCDF4.Dataset(url) as ds:
        assert ds["a"][:].tolist() == [2, 2, 2, 2]
        assert ds["a"].units == "units of b"
        # What reached the old variable before the renames is kept; nothing after them.
        assert ds["old"][:].tolist() == [7, 1, 1, 1]
        assert ds["old"].units == "units of a"


def test_a_dataset_has_one_writer_at_a_time(mounter, nczarr):
    """Two writers would each store the metadata as they see it, losing the other's records:
    while a rw mount is up, even one detached by `umount -l` that still serves an open file, a
    second rw mount and a put are refused. A read-only mount is not a writer."""
    mnt = mounter.mount(nczarr, "rw")
    fd = os.open(mnt / "temp" / "data", os.O_RDWR)
    subprocess.run(["umount", "-l", str(mnt)], check=True)
    second = mounter.run("mount", "-o", "rw", nczarr, str(mounter.mountpoint()))
    assert second.returncode == 1
    assert "another process is writing this dataset" in second.stderr, second.stderr

    def put() -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(mounter.binary), "put", nczarr, "temp", "--count", "1,1,1"],
            input=np.float32(42).tobytes(), capture_output=True, timeout=60, check=False)

    refused = put()
    assert refused.returncode == 1, refused
    assert b"another process is writing" in refused.stderr, refused.stderr
    mounter.mount(nczarr, "ro")
    os.pwrite(fd, np.float32(7).tobytes(), 4)
    os.close(fd)
    # The detached daemon exits once its last file is closed, and gives up its claim.
    assert wait_until(lambda: put().returncode == 0)
    import netCDF4

    with netCDF4.Dataset(nczarr) as ds:
        assert ds["temp"][0, 0, :2].tolist() == [42, 7]


def test_the_mv_command_renames(mounter, nczarr):
    """GNU mv renames with renameat2(RENAME_NOREPLACE)."""
    mnt = mounter.mount(nczarr, "rw")
    for src, dst in [("counts", "counts2"), ("sub", "sub2"),
                     ("temp/@attributes/long_name", "temp/@attributes/title")]:
        r = subprocess.run(["mv", str(mnt / src), str(mnt / dst)], capture_output=True,
                           text=True)
        assert r.returncode == 0, r.stderr
        assert (mnt / dst).exists() and not (mnt / src).exists()
    assert (mnt / "temp" / "@attributes" / "title").read_text() == "temperature"
    # A taken name: mv -n keeps both, a plain mv replaces an attribute.
    (mnt / "@attributes" / "other").write_text("x")
    r = subprocess.run(["mv", "-n", str(mnt / "@attributes" / "other"),
                        str(mnt / "@attributes" / "title")], capture_output=True, text=True)
    assert (mnt / "@attributes" / "title").read_text() == "mount test"
    assert (mnt / "@attributes" / "other").read_text() == "x"
    umount_and_wait(mnt)
    import netCDF4

    with netCDF4.Dataset(nczarr) as ds:
        assert set(ds.variables) >= {"counts2", "temp"} and "counts" not in ds.variables
        assert set(ds.groups) == {"sub2"}
        assert ds["temp"].title == "temperature"


def test_growth_that_no_file_offset_can_address_is_efbig(mounter, nczarr):
    """One byte far past the end of `time` would grow the unlimited dimension until `temp`
    (35 floats a record) is larger than 2^63 bytes: refused, and nothing changes."""
    mnt = mounter.mount(nczarr, "rw")
    sizes = {v: os.stat(mnt / v / "data").st_size for v in ("time", "temp")}
    fd = os.open(mnt / "time" / "data", os.O_WRONLY)
    try:
        with pytest.raises(OSError) as e:
            os.pwrite(fd, b"\0", 8 * 2**58)
        assert e.value.errno == errno.EFBIG
    finally:
        os.close(fd)
    assert {v: os.stat(mnt / v / "data").st_size for v in sizes} == sizes
    umount_and_wait(mnt)
    import netCDF4

    with netCDF4.Dataset(nczarr) as ds:
        assert len(ds.dimensions["time"]) == 4


def test_readers_of_a_growing_variable_see_only_written_values(mounter, tmp_path):
    """One thread appends records, another reopens and reads the whole file again and
    again: every record read is one that was written, or the fill value, never zeros (a
    page-cached file shows zeros when the kernel drops a page that an extending write is
    still carrying to the daemon)."""
    import threading

    import netCDF4

    url = f"file://{tmp_path / 'grow.file'}#mode=nczarr,file"
    fill = -2147483647
    with netCDF4.Dataset(url, "w") as ds:
        ds.createDimension("t", None)
        ds.createDimension("x", 3)
        ds.createVariable("a", "i4", ("t", "x"), chunksizes=(4, 3))
    mnt = mounter.mount(url, "rw")
    data = mnt / "a" / "data"
    stop = time.monotonic() + 5
    bad, reads = [], [0]

    def reader():
        while time.monotonic() < stop:
            with open(data, "rb") as f:
                b = f.read()
            rows = np.frombuffer(b[: len(b) // 12 * 12], "<i4").reshape(-1, 3)
            ok = ((rows == np.arange(len(rows))[:, None]) | (rows == fill)).all(axis=1)
            if not ok.all():
                i = int(np.nonzero(~ok)[0][0])
                bad.append((i, rows[i].tolist(), len(rows)))
            reads[0] += 1

    def writer():
        fd = os.open(data, os.O_WRONLY)
        k = 0
        while time.monotonic() < stop:
            os.pwrite(fd, np.full(3, k, "<i4").tobytes(), k * 12)
            k += 1
        os.close(fd)

    threads = [threading.Thread(target=reader), threading.Thread(target=writer)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert reads[0] > 100
    assert not bad, f"{len(bad)} of {reads[0]} reads saw unwritten values: {bad[:3]}"


def test_shared_mappings_write_through_to_the_dataset(mounter, nczarr):
    """numpy.memmap in r+ mode (a shared writable mapping) on a rw mount."""
    import netCDF4

    mnt = mounter.mount(nczarr, "rw")
    dtype, shape = dtype_of(mnt, "counts")
    m = np.memmap(mnt / "counts" / "data", dtype=dtype, mode="r+", shape=tuple(shape))
    expected = np.array(m)
    m[1, :] = 7
    m[4, 2] = -9
    m.flush()
    del m
    expected[1, :] = 7
    expected[4, 2] = -9
    assert np.array_equal(read_var(mnt, "counts"), expected)
    umount_and_wait(mnt)
    with netCDF4.Dataset(nczarr) as ds:
        assert np.array_equal(ds["counts"][:], expected)


def test_free_space_on_rw_mounts_only(mounter, nczarr):
    """A read-only mount is full, as any read-only image; a rw one shows the space of the file
    system that holds the dataset (df would otherwise call it full, and some tools refuse)."""
    ro = os.statvfs(mounter.mount(nczarr))
    assert ro.f_bavail == 0 and ro.f_blocks > 0
    rw = os.statvfs(mounter.mount(nczarr, "rw"))
    host = os.statvfs(Path(nczarr.split("#")[0].removeprefix("file://")).parent)
    assert rw.f_blocks * rw.f_frsize == host.f_blocks * host.f_frsize
    assert rw.f_bavail > 0


def test_no_log_lines_for_what_programs_routinely_ask(mounter, nczarr, tmp_path):
    """Python's `open` asks for an ioctl (TCGETS), `ls -l`, `cp -a` for extended attributes;
    none of that is worth a warning, nor is an unmount from outside."""
    log = tmp_path / "mount.log"
    mnt = mounter.mount(nczarr, "rw", log=log)
    for _ in range(20):
        with open(mnt / "temp" / "data", "rb") as f:
            f.read(16)
        with open(mnt / "@attributes" / "title") as f:
            f.read()
    subprocess.run(["ls", "-lR", str(mnt)], check=True, capture_output=True)
    for ask in (lambda p: os.getxattr(p, "user.comment"),
                lambda p: os.getxattr(p, "security.selinux"), os.listxattr):
        with pytest.raises(OSError) as e:
            ask(mnt / "temp" / "data")
        assert e.value.errno == errno.EOPNOTSUPP
    umount_and_wait(mnt)
    text = log.read_text()
    assert "WARN" not in text and "ERROR" not in text, text


def test_fsync_makes_data_durable_before_close(mounter, nczarr):
    mnt = mounter.mount(nczarr, "rw")
    fd = os.open(mnt / "counts" / "data", os.O_WRONLY)
    try:
        os.pwrite(fd, np.array([1234], dtype="=i2").tobytes(), 0)
        os.fsync(fd)
        # Read straight from storage while the file is still open.
        assert netcdf_values(nczarr)["/counts"][0, 0] == 1234
    finally:
        os.close(fd)


READER = r"""
import sys, numpy as np
path, allowed_path, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
allowed = np.load(allowed_path)
import time
end = time.monotonic() + seconds
n = 0
while time.monotonic() < end:
    with open(path, "rb") as f:
        a = np.frombuffer(f.read(), dtype="=i2")
    if a.size != allowed.shape[1]:
        print("bad size", a.size); sys.exit(1)
    ok = (allowed == a).any(axis=0)
    if not ok.all():
        print("unexpected values at", np.nonzero(~ok)[0][:5], a[~ok][:5]); sys.exit(1)
    n += 1
print(n)
"""


def test_eight_readers_and_one_writer(mounter, nczarr, tmp_path):
    mnt = mounter.mount(nczarr, "rw")
    path = mnt / "counts" / "data"
    original = np.fromfile(path, dtype="=i2")
    rounds = 40
    # Element i may hold its original value or any value a round wrote there.
    allowed = np.stack([original] + [np.full_like(original, 1000 + r) + np.arange(35, dtype="i2")
                                     for r in range(rounds)])
    np.save(tmp_path / "allowed.npy", allowed)
    script = tmp_path / "reader.py"
    script.write_text(READER)
    readers = [subprocess.Popen([sys.executable, str(script), str(path),
                                 str(tmp_path / "allowed.npy"), "4"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(8)]
    with open(path, "r+b", buffering=0) as f:
        for r in range(rounds):
            f.seek(0)
            f.write(allowed[r + 1].tobytes())
            time.sleep(0.05)
    for p in readers:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, out + err
        assert int(out.strip()) > 0
    assert np.array_equal(np.fromfile(path, dtype="=i2"), allowed[rounds])
    umount_and_wait(mnt)
    assert np.array_equal(netcdf_values(nczarr)["/counts"].reshape(-1), allowed[rounds])


WRITER = r"""
import sys, numpy as np
mnt = sys.argv[1]
k = 0
while True:
    with open(mnt + "/temp/data", "ab") as f:
        f.write(np.full(35, k, dtype="=f4").tobytes())
    with open(mnt + "/counts/data", "r+b") as f:
        f.write(np.full(35, k, dtype="=i2").tobytes())
    k += 1
"""


def test_a_rw_mount_completes_a_flush_cut_between_dimensions_and_shapes(mounter, nczarr, tmp_path):
    """A flush cut between storing a grown dimension and its arrays' shapes (separate
    objects: on S3 a daemon killed between two PUTs, anywhere a machine crash) leaves them
    disagreeing, which netcdf-c refuses. The next rw mount stores them consistently."""
    import netCDF4

    path = Path(nczarr.split("#")[0][len("file://"):])
    root = json.loads((path / ".zattrs").read_text())
    root["_nczarr_group"]["dimensions"]["time"]["size"] = 5
    (path / ".zattrs").write_text(json.dumps(root))
    with pytest.raises(OSError, match="dimension size"):
        netCDF4.Dataset(nczarr).close()
    mnt = mounter.mount(nczarr, "rw")
    umount_and_wait(mnt)
    with netCDF4.Dataset(nczarr) as ds:
        assert len(ds.dimensions["time"]) == 5
        temp = ds["temp"]
        temp.set_auto_maskandscale(False)
        values = temp[:]
        assert values.shape == (5, 5, 7)
        assert np.array_equal(values[:4], (np.arange(140, dtype="f4").reshape(4, 5, 7) - 60) / 3)
        assert (values[4] == -999.0).all()
        assert ds["time"].shape == (5,)


def test_sigkill_during_writes_leaves_a_readable_dataset(mounter, nczarr, tmp_path):
    import netCDF4

    mnt = mounter.mount(nczarr, "rw")
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    writer = subprocess.Popen([sys.executable, str(script), str(mnt)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        # The kill must land while records are being appended: wait until the writer has
        # appended a few to the fixture's 4 (35 floats each), however slow its start.
        record = 35 * 4
        data = mnt / "temp" / "data"
        assert wait_until(lambda: writer.poll() is not None
                          or data.stat().st_size >= (4 + 3) * record, 120), "no records appended"
        assert writer.poll() is None, "the writer stopped before the kill"
        pids = daemon_pids(mnt)
        assert pids
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    finally:
        writer.kill()
        writer.wait(timeout=30)
    unmount(mnt)
    with netCDF4.Dataset(nczarr) as ds:
        n = len(ds.dimensions["time"])
        assert n >= 4
        temp = ds["temp"]
        temp.set_auto_maskandscale(False)
        values = temp[:]
        assert values.shape == (n, 5, 7)
        assert np.array_equal(values[:4], (np.arange(140, dtype="f4").reshape(4, 5, 7) - 60) / 3)
        ds["counts"][:]
        ds["time"][:]


def test_sigterm_with_a_file_open_flushes_on_the_way_out(mounter, nczarr):
    mnt = mounter.mount(nczarr, "rw")
    pids = daemon_pids(mnt)
    fd = os.open(mnt / "time" / "data", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, np.array([7.5, 8.0], dtype="=f8").tobytes())
        for pid in pids:
            os.kill(pid, signal.SIGTERM)
        # The mount is busy: it is detached, and the daemon serves this descriptor until it
        # is closed.
        assert wait_until(lambda: not is_mounted(mnt), 10)
        os.write(fd, np.array([8.5], dtype="=f8").tobytes())
    finally:
        os.close(fd)
    assert wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), 30)
    assert np.array_equal(netcdf_values(nczarr)["/time"],
                          np.concatenate([np.arange(4) * 0.5, [7.5, 8.0, 8.5]]))


@pytest.mark.parametrize("cache, evicts", [("128K", True), ("64M", False)])
def test_cache_size_bounds_the_write_back_cache(mounter, tmp_path, cache, evicts):
    import netCDF4

    # 1 MiB of values in 32 KiB chunks, none stored yet (netCDF writes no chunk of a variable
    # that was never written).
    url = f"file://{tmp_path / 'big.file'}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w", format="NETCDF4") as ds:
        ds.createDimension("y", 256)
        ds.createDimension("x", 512)
        ds.createVariable("v", "f8", ("y", "x"), chunksizes=(8, 512))
    store = tmp_path / "big.file" / "v"
    chunks = lambda: sorted(p.name for p in store.iterdir() if not p.name.startswith("."))  # noqa: E731
    assert chunks() == []
    want = np.arange(256 * 512, dtype="f8").reshape(256, 512) / 3
    mnt = mounter.mount(url, f"rw,cache_size={cache}")
    with open(mnt / "v" / "data", "r+b", buffering=0) as f:
        for row in range(0, 256, 8):
            assert os.pwrite(f.fileno(), want[row:row + 8].tobytes(), row * 512 * 8) == 8 * 512 * 8
        # Still open, never flushed: only chunks evicted to make room are in storage.
        stored = chunks()
        if evicts:
            assert len(stored) >= 32 - 4, stored
        else:
            assert stored == []
        assert (mnt / "v" / "data").read_bytes() == want.tobytes()
    umount_and_wait(mnt)
    assert len(chunks()) == 32
    np.testing.assert_array_equal(netcdf_values(url)["/v"], want)


def test_zarr_python_attributes_without_a_netcdf_type_survive_a_rewrite(mounter, tmp_path):
    """Attributes that netCDF has no type for (an object, a list of mixed values, booleans,
    null) are shown as the nearest netCDF value; a change elsewhere rewrites the metadata, and
    they go back as they were."""
    import zarr

    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    nested = {"a": [1, 2.5], "b": {"c": "d"}}
    mixed = [1, "a", 2.5]
    # netCDF reads these as the ubyte 1, the text "null" and empty text.
    plain_json = {"flag": True, "flags": [True, False], "none": None, "empty": []}
    root.attrs.update({"nested": nested, "mixed": mixed, "title": "t", **plain_json})
    arr = root.create_array("v", shape=(3,), dtype="<i4",
                            attributes={"_ARRAY_DIMENSIONS": ["x"], "spec": {"k": [1, "x"]}})
    arr[:] = [1, 2, 3]
    mnt = mounter.mount(str(path), "rw")
    (mnt / "@attributes" / "added").write_text("new")
    (mnt / "newgroup").mkdir()
    # A changed one is written as its new value.
    (mnt / "@attributes" / "flags").write_text("7, 0")
    plain_json["flags"] = [7, 0]
    umount_and_wait(mnt)
    back = zarr.open_group(str(path), mode="r")
    assert back.attrs["nested"] == nested
    assert back.attrs["mixed"] == mixed
    assert back.attrs["added"] == "new"
    for name, value in plain_json.items():
        assert back.attrs[name] == value and type(back.attrs[name]) is type(value), name
    assert back["v"].attrs["spec"] == {"k": [1, "x"]}


def test_xarray_string_variables_stay_object_arrays(mounter, tmp_path):
    """xarray writes `str` variables as Zarr v2 object arrays (`|O`, `vlen-utf8`). A rw mount
    shows them as fixed-width strings; a value written into `data` and a metadata change
    elsewhere leave an object array that xarray reads with the new value."""
    import xarray as xr
    import zarr

    path = tmp_path / "xr.zarr"
    names = np.array(["alpha", "b", "", "ключ"], dtype=object)
    xr.Dataset({"names": ("x", names), "n": ("x", np.arange(4))}).to_zarr(
        str(path), zarr_format=2, consolidated=False)
    mnt = mounter.mount(str(path), "rw")
    dt, shape = dtype_of(mnt, "names")
    # As wide as the longest value in bytes ("ключ" is eight).
    assert (dt, shape) == (np.dtype("S8"), [4])
    assert [x.decode() for x in read_var(mnt, "names")] == list(names)
    with open(mnt / "names" / "data", "r+b") as f:
        f.seek(dt.itemsize)
        f.write(b"hello\0\0\0")
    (mnt / "names" / "@attributes" / "comment").write_text("edited")
    umount_and_wait(mnt)
    zarray = json.loads((path / "names" / ".zarray").read_text())
    assert (zarray["dtype"], zarray["filters"]) == ("|O", [{"id": "vlen-utf8"}])
    assert zarr.open_array(str(path / "names"), mode="r").metadata.dtype.to_json(2)["name"] == "|O"
    back = xr.open_zarr(str(path), consolidated=False)
    assert list(back["names"].values) == ["alpha", "hello", "", "ключ"]
    assert back["names"].attrs["comment"] == "edited"


def test_a_full_disk_under_a_zip_dataset_is_enospc_and_keeps_the_archive(mounter, tmp_path, binary):
    """A zip store is rewritten whole at each flush: on a full disk the close reports ENOSPC
    (what a program can act on), and the archive stays what it was."""
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(disk)], check=True)
    try:
        cdl = tmp_path / "b.cdl"
        cdl.write_text("netcdf b {\ndimensions:\n\td = 100000 ;\nvariables:\n\tdouble v(d) ;\n}\n")
        archive = disk / "b.zip"
        subprocess.run([str(binary), "gen", "-o", f"file://{archive}#mode=nczarr,zip", str(cdl)],
                       check=True)
        before = archive.read_bytes()
        mnt = mounter.mount(str(archive), "rw")
        fd = os.open(mnt / "v" / "data", os.O_WRONLY)
        os.write(fd, np.arange(100000, dtype="<f8").tobytes())
        with pytest.raises(OSError) as err:
            os.close(fd)
        assert err.value.errno == errno.ENOSPC
        umount_and_wait(mnt)
        assert archive.read_bytes() == before
        assert sorted(p.name for p in disk.iterdir()) == ["b.zip"]
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def test_a_daemon_ending_after_a_lazy_unmount_leaves_the_next_mount_alone(mounter, nczarr, binary):
    """After `fusermount3 -uz`, the old daemon serves its open files until they are closed,
    then flushes and exits; a dataset mounted at the same place meanwhile stays mounted."""
    mnt = mounter.mount(nczarr, "rw")
    fd = os.open(mnt / "temp" / "data", os.O_WRONLY)
    try:
        os.write(fd, b"\0" * 4096)
        old = daemon_pids(mnt)
        subprocess.run(["fusermount3", "-uz", str(mnt)], check=True)
        subprocess.run([str(binary), "mount", nczarr, str(mnt)], check=True)
        assert is_mounted(mnt)
    finally:
        os.close(fd)
    assert wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in old), 30)
    assert is_mounted(mnt) and (mnt / "@header.cdl").read_bytes()


def test_text_that_is_not_utf8_is_refused_and_does_not_block_the_chunk(mounter, tmp_path):
    """An object array of `vlen-utf8` strings cannot store bytes that are not UTF-8: the write
    of them fails with ERANGE (with a log line naming the value), the chunk reads as stored,
    and later valid writes to it are stored."""
    import zarr

    path = tmp_path / "s.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    arr = root.create_array("s", shape=(4,), chunks=(4,), dtype=str,
                            attributes={"_ARRAY_DIMENSIONS": ["x"]})
    arr[:] = ["aaaa", "bbbb", "cccc", "dddd"]
    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(path), "rw", log=log)
    data = mnt / "s" / "data"
    fd = os.open(data, os.O_WRONLY)
    with pytest.raises(OSError) as err:
        os.pwrite(fd, b"\xff\xfe", 8)
    os.close(fd)
    assert err.value.errno == errno.ERANGE
    assert "/s[2]: a value is not UTF-8" in log.read_text()
    assert data.read_bytes() == b"aaaabbbbccccdddd"
    fd = os.open(data, os.O_WRONLY)
    os.pwrite(fd, "ключ".encode()[:4], 0)
    os.close(fd)
    umount_and_wait(mnt)
    assert zarr.open_array(str(path / "s"), mode="r")[...].tolist() == ["кл", "bbbb", "cccc", "dddd"]


def test_a_level_zlib_cannot_write_with_reads_but_refuses_writes(mounter, tmp_path):
    """A zlib level outside -1..=9 (edited into zarr-python's metadata) plays no part in
    decoding: zarr-python reads the array, and so does the mount. Writing needs the level,
    and zarr-python fails there ("Bad compression level"): a write to the variable fails with
    EPERM and one log line naming it, its codec and the range, the stored chunks stay as they
    were, and the other variable takes writes."""
    import numcodecs
    import zarr

    path = tmp_path / "s.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    for name in ("zl", "ok"):
        arr = root.create_array(name, shape=(8,), chunks=(4,), dtype="<i4",
                                compressors=numcodecs.Zlib(level=1),
                                attributes={"_ARRAY_DIMENSIONS": ["x"]})
        arr[:] = np.arange(8, dtype="<i4") * 3
    meta = json.loads((path / "zl" / ".zarray").read_text())
    meta["compressor"] = {"id": "zlib", "level": 15}
    (path / "zl" / ".zarray").write_text(json.dumps(meta))
    want = zarr.open_array(str(path / "zl"), mode="r")[...]
    stored = {p.name: p.read_bytes() for p in (path / "zl").iterdir()}

    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(path), "rw", log=log)
    assert np.array_equal(read_var(mnt, "zl"), want)
    assert json.loads((mnt / "zl" / "@metadata.json").read_text())["codecs"]["compressor"] == {
        "id": "zlib", "level": 15}
    fd = os.open(mnt / "zl" / "data", os.O_WRONLY)
    try:
        with pytest.raises(OSError) as err:
            os.pwrite(fd, np.int32(99).tobytes(), 4)
    finally:
        os.close(fd)
    assert err.value.errno == errno.EPERM
    lines = [line for line in log.read_text().splitlines() if "/zl" in line]
    assert len(lines) == 1, lines
    assert "codec zlib" in lines[0] and '"level" = 15 is outside -1..=9' in lines[0], lines
    fd = os.open(mnt / "ok" / "data", os.O_WRONLY)
    os.pwrite(fd, np.int32(99).tobytes(), 4)
    os.close(fd)
    assert np.array_equal(read_var(mnt, "zl"), want)
    umount_and_wait(mnt)

    assert {p.name: p.read_bytes() for p in (path / "zl").iterdir()} == stored
    assert np.array_equal(zarr.open_array(str(path / "zl"), mode="r")[...], want)
    assert zarr.open_array(str(path / "ok"), mode="r")[...].tolist() == [0, 99, 6, 9, 12, 15, 18, 21]


def test_truncate_grows_a_variable_whose_level_cannot_write_storing_no_chunk(mounter, tmp_path):
    """Growing `data` with truncate writes no value (docs/mount.md): the unlimited dimension
    grows, the new records read as fill, and the stored chunks stay."""
    import netCDF4

    path = tmp_path / "s.file"
    url = f"file://{path}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as nc:
        nc.createDimension("t", None)
        nc.createDimension("x", 4)
        v = nc.createVariable("bad", "i4", ("t", "x"), zlib=True, complevel=5,
                              chunksizes=(2, 4), fill_value=-1)
        v[0:3, :] = np.arange(12).reshape(3, 4)
    meta = json.loads((path / "bad" / ".zarray").read_text())
    meta["compressor"]["level"] = 15
    (path / "bad" / ".zarray").write_text(json.dumps(meta))
    chunks = {p.name: p.read_bytes() for p in (path / "bad").iterdir() if p.name[0].isdigit()}

    mnt = mounter.mount(url, "rw")
    os.truncate(mnt / "bad" / "data", 6 * 4 * 4)
    assert os.path.getsize(mnt / "bad" / "data") == 6 * 4 * 4
    umount_and_wait(mnt)

    assert {p.name: p.read_bytes() for p in (path / "bad").iterdir()
            if p.name[0].isdigit()} == chunks
    with netCDF4.Dataset(url) as nc:
        assert len(nc.dimensions["t"]) == 6
    # netcdf-c reads no zlib level of 15; zarr-python does.
    import zarr

    got = zarr.open_array(str(path / "bad"), mode="r")[...]
    assert got[:3].tolist() == np.arange(12).reshape(3, 4).tolist()
    assert (got[3:] == -1).all()


def test_records_a_killed_daemon_stored_past_the_length_stay_fill_when_it_grows(mounter, nczarr):
    """Chunks reach storage before the metadata that records their records: a daemon killed
    in between leaves values past the recorded length. A later mount that grows the dimension
    over them, leaving a gap, shows fill there, as netCDF4-python does after it."""
    import netCDF4

    # A cache of 64 bytes stores each chunk as soon as it is written.
    mnt = mounter.mount(nczarr, "rw", "cache_size=64")
    temp_fd = os.open(mnt / "temp" / "data", os.O_RDWR)
    time_fd = os.open(mnt / "time" / "data", os.O_RDWR)
    os.pwrite(temp_fd, np.full((4, 5, 7), 99, "=f4").tobytes(), 4 * 35 * 4)
    os.pwrite(time_fd, np.full(4, 77, "=f8").tobytes(), 4 * 8)
    for pid in daemon_pids(mnt):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(OSError):
        os.close(temp_fd)
    with contextlib.suppress(OSError):
        os.close(time_fd)
    unmount(mnt)
    with netCDF4.Dataset(nczarr) as ds:
        assert len(ds.dimensions["time"]) == 4

    mnt = mounter.mount(nczarr, "rw")
    with open(mnt / "temp" / "data", "r+b") as f:
        f.seek(7 * 35 * 4)
        f.write(np.full(35, 7, "=f4").tobytes())
    first = (np.arange(140, dtype="f4").reshape(4, 5, 7) - 60) / 3
    temp = read_var(mnt, "temp")
    assert np.array_equal(temp[:4], first)
    assert (temp[4:7] == TEMP_FILL).all(), temp[4:7, 0, 0]
    assert (temp[7] == 7).all()
    time_values = read_var(mnt, "time")
    assert np.array_equal(time_values[:4], np.arange(4) * 0.5)
    # netcdf-c declares its default fill as 9.96921e+36 in `.zarray`.
    assert np.allclose(time_values[4:], NC_FILL_DOUBLE, rtol=1e-6, atol=0), time_values
    umount_and_wait(mnt)
    with netCDF4.Dataset(nczarr) as ds:
        assert len(ds.dimensions["time"]) == 8
        for v in ds.variables.values():
            v.set_auto_maskandscale(False)
        temp = ds["temp"][:]
        assert np.array_equal(temp[:4], first)
        assert (temp[4:7] == TEMP_FILL).all(), temp[4:7, 0, 0]
        assert (temp[7] == 7).all()
        time_values = ds["time"][:]
        assert np.array_equal(time_values[:4], np.arange(4) * 0.5)
        assert np.allclose(time_values[4:], NC_FILL_DOUBLE, rtol=1e-6, atol=0), time_values


def test_a_shard_flushed_after_its_variable_grew_is_read_where_its_chunks_went(mounter, tmp_path):
    """An unflushed inner chunk of a sharded NCZarr v3 variable, then a write that grows the
    unlimited dimension: the flush rewrites the shard and moves its other inner chunks, and
    later reads and read-modify-writes must find them where they went. zarr-python reads
    what a numpy model of the writes says."""
    import zarr

    cdl = tmp_path / "g.cdl"
    cdl.write_text("netcdf g {\ndimensions: t = UNLIMITED ; y = 65536 ;\nvariables:\n"
                   "  int v(t) ; v:_FillValue = -1 ; v:_ChunkSizes = 2 ;\n"
                   "  int big(y) ; big:_ChunkSizes = 1024 ;\n}\n")
    made, store = tmp_path / "g0.zarr", tmp_path / "g.zarr"
    for args in (["gen", "-k", "nczarr,v3", "-o", str(made), str(cdl)],
                 # Shards of four inner chunks of `v`; `big` fills the cache when read.
                 ["copy", "-k", "nczarr,v3", "--shards", "v:8", "--shards", "big:8192",
                  str(made), str(store)]):
        r = mounter.run(*args)
        assert r.returncode == 0, r.stderr
    model = np.full(8, -1, "<i4")
    model[2:4] = [20, 21]  # inner chunk 1 stored, 0, 2 and 3 left out (fill)
    big = np.arange(65536, dtype="<i4")
    for var, values in (("v", model), ("big", big)):
        np.save(tmp_path / "in.npy", values)
        r = mounter.run("put", str(store), var, "--npy", "-i", str(tmp_path / "in.npy"))
        assert r.returncode == 0, r.stderr

    mnt = mounter.mount(str(store), "rw", "cache_size=64K")
    fd = os.open(mnt / "v" / "data", os.O_RDWR)
    try:
        # Inner chunk 0 is written and stays in the cache; then t grows 8 -> 9.
        os.pwrite(fd, np.array([1234], "<i4").tobytes(), 0)
        model[0] = 1234
        os.pwrite(fd, np.array([5], "<i4").tobytes(), 8 * 4)
        model = np.append(model, np.int32(5))
        assert np.frombuffer(os.pread(fd, 8, 2 * 4), "<i4").tolist() == [20, 21]
        # Stores inner chunk 0 in the shard, ahead of inner chunk 1.
        os.fsync(fd)
        assert np.array_equal(np.fromfile(mnt / "big" / "data", dtype="<i4"), big)
        assert np.frombuffer(os.pread(fd, 8, 2 * 4), "<i4").tolist() == [20, 21]
        # A read-modify-write of inner chunk 1.
        os.pwrite(fd, np.array([99], "<i4").tobytes(), 3 * 4)
        model[3] = 99
        assert np.array_equal(np.frombuffer(os.pread(fd, 9 * 4, 0), "<i4"), model)
    finally:
        os.close(fd)
    umount_and_wait(mnt)
    back = zarr.open_group(str(store), mode="r")
    assert back["v"][...].tolist() == model.tolist()
    assert np.array_equal(back["big"][...], big)


def test_a_change_rewrites_only_the_metadata_objects_it_changes(mounter, tmp_path):
    """Setting one attribute stores that variable's `.zattrs`, and appending a record the
    dimension's length (the root's `.zattrs`) and the shape of the variable on it: the
    objects of the other variables stay as netcdf-c wrote them (each change stored them all,
    which cost time in proportion to the number of variables)."""
    import netCDF4

    store = tmp_path / "many.file"
    url = f"file://{store}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w", format="NETCDF4") as ds:
        ds.createDimension("x", 3)
        ds.createDimension("t", None)
        for i in range(30):
            v = ds.createVariable(f"v{i}", "f4", ("x",))
            v.units = "m"
            v[:] = np.arange(3, dtype="f4") + i
        ds.createVariable("r", "i4", ("t",))[:] = np.arange(2, dtype="i4")

    def objects() -> dict[str, tuple[int, int]]:
        return {str(p.relative_to(store)): (p.stat().st_ino, p.stat().st_mtime_ns)
                for p in store.rglob(".z*")}

    before = objects()
    mnt = mounter.mount(url, "rw")
    subprocess.run(["bash", "-c", 'echo noted > "$0"', str(mnt / "v0" / "@attributes" / "note")],
                   check=True)
    with open(mnt / "r" / "data", "ab") as f:
        f.write(np.array([7], dtype="=i4").tobytes())
    umount_and_wait(mnt)
    after = objects()
    assert after.keys() == before.keys()
    changed = sorted(k for k in before if before[k] != after[k])
    assert changed == [".zattrs", "r/.zarray", "v0/.zattrs"]
    assert netcdf_attrs(url, "v0")["note"] == "noted"
    with netCDF4.Dataset(url) as ds:
        assert list(ds["r"][:]) == [0, 1, 7]
        assert all(list(ds[f"v{i}"][:]) == [i, i + 1, i + 2] for i in range(30))


@pytest.mark.parametrize("consolidated", [False, True])
def test_zarr_python_v3_arrays_a_change_leaves_alone_are_not_rewritten(
        mounter, tmp_path, consolidated):
    """zarr-python 3 writes `"storage_transformers": []` in every array's `zarr.json`, which
    means the same as leaving it out, as nczarrfs does: setting one array's attribute stores
    that array's `zarr.json` (and a consolidated root) only, so an attribute zarr-python
    (which takes no lock) added meanwhile to another array stays. (Of a consolidated
    dataset, the mount knows the other arrays as the root's summary has them, which such an
    addition leaves behind: it adds none there.)"""
    import zarr

    store = tmp_path / "v3.zarr"
    root = zarr.open_group(str(store), mode="w", zarr_format=3)
    sub = root.create_group("sub")
    for parent, name in [(root, "a"), (root, "b"), (sub, "c")]:
        parent.create_array(name, shape=(4,), dtype="f4", chunks=(2,),
                            dimension_names=["x"])[:] = 1
    if consolidated:
        zarr.consolidate_metadata(str(store))
    assert json.loads((store / "b" / "zarr.json").read_text())["storage_transformers"] == []

    def objects() -> dict[str, bytes]:
        return {str(p.relative_to(store)): p.read_bytes() for p in store.rglob("zarr.json")}

    mnt = mounter.mount(str(store), "rw")
    assert {"a", "b", "sub"} <= set(os.listdir(mnt))
    if not consolidated:
        zarr.open_array(str(store / "b"), mode="r+").attrs["added_by_zarr_python"] = 1
    before = objects()
    (mnt / "a" / "@attributes" / "mine").write_text("hello")
    umount_and_wait(mnt)
    after = objects()
    changed = sorted(k for k in before if before[k] != after[k])
    assert changed == (["a/zarr.json", "zarr.json"] if consolidated else ["a/zarr.json"])
    back = zarr.open_group(str(store), mode="r", use_consolidated=False)
    if not consolidated:
        assert back["b"].attrs["added_by_zarr_python"] == 1
    assert back["a"].attrs["mine"] == "hello"
    assert zarr.open_group(str(store), mode="r")["a"].attrs["mine"] == "hello"
    assert back["sub/c"][:].tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize("zarr_format", [3, 2])
def test_a_store_naming_a_shadowed_dimension_stays_writable(mounter, tmp_path, zarr_format):
    """zarr-python's store: `/a` names `x` of length 2, `/sub/e` `x` of length 2 and `/sub/f`
    `x` of length 5, which read as the root's `x` and `/sub`'s own (xarray opens each array
    with the name as stored). A `rw` mount must store changes, keeping every array's names as
    they were, and a `mv` must leave one array, not two."""
    import zarr

    store = tmp_path / "s.zarr"
    root = zarr.open_group(str(store), mode="w", zarr_format=zarr_format)
    sub = root.create_group("sub")

    def array(parent, name, n, value):
        if zarr_format == 3:
            a = parent.create_array(name, shape=(n,), dtype="i4", dimension_names=["x"])
        else:
            a = parent.create_array(name, shape=(n,), dtype="i4")
            a.attrs["_ARRAY_DIMENSIONS"] = ["x"]
        a[:] = value

    array(root, "a", 2, 1)
    # `b` (length 5) is read before `e` (length 2): which comes first must not matter.
    array(sub, "e", 2, 5)
    array(sub, "f", 5, 6)
    array(sub, "b", 5, 7)
    mnt = mounter.mount(str(store), "rw")
    os.rename(mnt / "sub" / "e", mnt / "sub" / "e2")
    (mnt / "a" / "@attributes" / "k").write_text("hello")
    umount_and_wait(mnt)
    back = zarr.open_group(str(store), mode="r")
    assert sorted(back["sub"].array_keys()) == ["b", "e2", "f"]
    assert back["a"].attrs["k"] == "hello"
    assert back["sub/e2"][:].tolist() == [5, 5]
    for name in ["a", "sub/e2", "sub/f", "sub/b"]:
        if zarr_format == 3:
            assert back[name].metadata.dimension_names == ("x",), name
        else:
            assert back[name].attrs["_ARRAY_DIMENSIONS"] == ["x"], name


def test_quantize_attributes_gen_refuses_are_refused_and_writes_are_quantized(mounter, tmp_path):
    """A quantization attribute `gen` and `put` refuse (a precision out of range, a non-integer,
    a second mode, an integer variable) is refused at the close (EPERM, logged), so `put`
    still takes the variable; a valid one is kept, and the values written through the mount
    are then quantized as netcdf-c quantizes them: bit for bit what netCDF4-python's write of
    the whole variable stores, also when the `data` file is written in pieces, one starting
    at an odd element (BitGroom alternates along the positions)."""
    import netCDF4

    values = (np.random.default_rng(7).standard_normal(10) * 100).astype("f4")
    values[4] = 0
    oracle = tmp_path / "oracle.file"
    with netCDF4.Dataset(f"file://{oracle}#mode=nczarr,file", "w") as ds:
        ds.createDimension("x", 10)
        v = ds.createVariable("v", "f4", ("x",), significant_digits=3, quantize_mode="BitGroom")
        v[:] = values
    with netCDF4.Dataset(f"file://{oracle}#mode=nczarr,file") as ds:
        want = ds["v"][:].data
    assert not np.array_equal(want, values)

    url = f"file://{tmp_path / 'q.file'}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as ds:
        ds.createDimension("x", 10)
        ds.createVariable("v", "f4", ("x",))
        ds.createVariable("i", "i4", ("x",))
    log = tmp_path / "mount.log"
    mnt = mounter.mount(url, "rw", log=log)

    def echo(text: str, path: Path) -> None:
        subprocess.run(["bash", "-c", 'echo "$0" > "$1"', text, str(path)], check=True)

    refused = [
        ("20", mnt / "v" / "@attributes" / "_QuantizeBitGroomNumberOfSignificantDigits"),
        ("2.5", mnt / "v" / "@attributes" / "_QuantizeGranularBitRoundNumberOfSignificantDigits"),
        ("3", mnt / "i" / "@attributes" / "_QuantizeBitRoundNumberOfSignificantBits"),
    ]
    for text, path in refused:
        echo(text, path)
        assert not path.exists(), path
    attr = mnt / "v" / "@attributes" / "_QuantizeBitGroomNumberOfSignificantDigits"
    fd = os.open(attr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    os.write(fd, b"7")
    with pytest.raises(OSError) as e:
        os.fsync(fd)
    assert e.value.errno == errno.EPERM
    with contextlib.suppress(OSError):
        os.close(fd)
    echo("3", attr)
    # A second mode beside the valid one, made by a rename, is refused too.
    other = mnt / "v" / "@attributes" / "note"
    echo("4", other)
    with pytest.raises(OSError) as e:
        os.rename(other, mnt / "v" / "@attributes" / "_QuantizeBitRoundNumberOfSignificantBits")
    assert e.value.errno == errno.EPERM
    os.unlink(other)
    fd = os.open(mnt / "v" / "data", os.O_WRONLY)
    try:
        os.pwrite(fd, values[:3].tobytes(), 0)
        os.pwrite(fd, values[3:].tobytes(), 12)
    finally:
        os.close(fd)
    umount_and_wait(mnt)
    text = log.read_text()
    assert text.count("(EPERM)") >= 4, text
    assert "a float variable keeps 1 to 6 significant decimal digits" in text
    assert "applies only to float and double variables, not int" in text
    with netCDF4.Dataset(url) as ds:
        assert ds["v"].quantization() == (3, "BitGroom")
        assert "_QuantizeBitRoundNumberOfSignificantBits" not in ds["i"].ncattrs()
        got = ds["v"][:].data
    assert got.tobytes() == want.tobytes()
    r = subprocess.run([str(mounter.binary), "put", url, "i"], capture_output=True,
                       input=np.arange(10, dtype="<i4").tobytes(), timeout=60, check=False)
    assert r.returncode == 0, r.stderr


@pytest.mark.parametrize("t", ["f4", "f8"])
@pytest.mark.parametrize("mode", ["BitGroom", "GranularBitRound", "BitRound"])
def test_quantized_values_written_in_pieces_cut_at_any_byte_are_netcdf_c_s(
        mounter, tmp_path, mode, t):
    """Values written to a quantized variable's `data` file in pieces cut at random bytes
    (elements split across writes), in order and in random order, are stored bit for bit as
    netCDF4-python's one write of the whole array stores them: a value is quantized from its
    own bytes, never from an earlier piece's quantized value completed (which turned a zero
    into a tiny number and 915.9025 into 912 with 9 bits)."""
    import netCDF4

    precision = 9 if mode == "BitRound" else 3
    n = 60
    rng = np.random.default_rng([11, ["BitGroom", "GranularBitRound", "BitRound"].index(mode),
                                 4 if t == "f4" else 8])
    values = (rng.standard_normal(n) * 1000).astype(t)
    values[[3, 10, 17]] = 0
    values[11] = -0.0
    values[0] = 915.9025
    oracle = tmp_path / "oracle.file"
    with netCDF4.Dataset(f"file://{oracle}#mode=nczarr,file", "w") as ds:
        ds.createDimension("x", n)
        v = ds.createVariable("v", t, ("x",), significant_digits=precision, quantize_mode=mode)
        v[:] = values
    with netCDF4.Dataset(f"file://{oracle}#mode=nczarr,file") as ds:
        want = ds["v"][:].data.tobytes()
    assert want != values.tobytes()

    url = f"file://{tmp_path / 'q.file'}#mode=nczarr,file"
    names = ["in_order", "shuffled"]
    with netCDF4.Dataset(url, "w") as ds:
        ds.createDimension("x", n)
        for name in names:
            ds.createVariable(name, t, ("x",), significant_digits=precision, quantize_mode=mode)
    raw = values.tobytes()
    mnt = mounter.mount(url, "rw")
    for name in names:
        cuts = sorted({0, len(raw), *rng.choice(np.arange(1, len(raw)), 40, replace=False)})
        pieces = list(zip(cuts[:-1], cuts[1:]))
        if name == "shuffled":
            rng.shuffle(pieces)
        fd = os.open(mnt / name / "data", os.O_WRONLY)
        try:
            for a, b in pieces:
                assert os.pwrite(fd, raw[a:b], int(a)) == b - a
        finally:
            os.close(fd)
    umount_and_wait(mnt)
    with netCDF4.Dataset(url) as ds:
        for name in names:
            assert ds[name][:].data.tobytes() == want, name


def _bitround9(tmp_path, name, build):
    """The values of float variables BitRound-quantized to 9 bits as netCDF4-python stores
    them: `build(ds)` makes and writes them in a fresh dataset `name`."""
    import netCDF4

    url = f"file://{tmp_path / name}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as ds:
        build(ds)
    with netCDF4.Dataset(url) as ds:
        ds.set_auto_mask(False)
        return {k: v[:].tobytes() for k, v in ds.variables.items()}


def test_quantized_pieces_kept_follow_their_element_when_another_variable_grows_it(
        mounter, tmp_path):
    """The bytes kept for a value of a quantized variable written in part stay with that
    value when another variable grows a dimension it uses after its first (which moves it to
    another byte offset of the flat file), and never complete the value that takes its old
    place: the file holds what netCDF4-python's one write of the final byte image stores
    (q[0, 2] was -7.0078125, completed from q[1, 0]'s kept bytes)."""
    import netCDF4

    def dataset(ds, q):
        ds.createDimension("x", 2)
        ds.createDimension("t", None)
        v = ds.createVariable("q", "f4", ("x", "t"), significant_digits=9,
                              quantize_mode="BitRound")
        v.set_auto_mask(False)
        v[:] = q
        ds.createVariable("a", "f4", ("t",))[:] = [10, 20]

    url = f"file://{tmp_path / 'q.file'}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as ds:
        dataset(ds, np.array([[1, 2], [3, 4]], "f4"))
    mnt = mounter.mount(url, "rw")
    fd = os.open(mnt / "q" / "data", os.O_WRONLY)
    try:
        os.pwrite(fd, b"\x00\xe0", 8)  # low half of q[1, 0]
        fa = os.open(mnt / "a" / "data", os.O_WRONLY)
        try:
            assert os.pwrite(fa, np.float32(30).tobytes(), 8) == 4  # t grows to 3
        finally:
            os.close(fa)
        os.pwrite(fd, b"\xe0\xc0", 10)  # high half of element 2, now q[0, 2]
        os.pwrite(fd, b"\x10\x41", 14)  # high half of q[1, 0], now element 3
    finally:
        os.close(fd)
    umount_and_wait(mnt)

    fill = netCDF4.default_fillvals["f4"]
    low_fill = np.float32(fill).tobytes()[:2]
    image = np.frombuffer(
        np.array([1, 2], "f4").tobytes() + low_fill + b"\xe0\xc0"
        + b"\x00\xe0\x10\x41" + np.array([4, fill], "f4").tobytes(), "f4").reshape(2, 3)
    want = _bitround9(tmp_path, "oracle.file", lambda ds: dataset(ds, image))["q"]
    assert np.frombuffer(want, "f4")[2:4].tolist() == [-7, 9.0625]
    with netCDF4.Dataset(url) as ds:
        ds.set_auto_mask(False)
        assert ds["q"][:].tobytes() == want


def test_quantized_pieces_are_forgotten_at_an_o_trunc_open_and_the_last_close(
        mounter, tmp_path):
    """Bytes kept for a value of a quantized variable written in part are forgotten when the
    `data` file is opened with `O_TRUNC` (what was not written since becomes zeros: `b` ends
    as the one write of 1, 0 stores it, where the bytes written before the open made
    1.0078125) and when its last descriptor is closed: a piece written through a new open
    then completes the stored quantized value, as netcdf-c's write of an element read back
    and patched does (`c`), while pieces through one open are one value (`d`)."""
    import netCDF4

    def dataset(ds, values):
        ds.createDimension("x", 2)
        for name, v in values.items():
            ds.createVariable(name, "f4", ("x",), significant_digits=9,
                              quantize_mode="BitRound")[:] = v

    def f4(raw):
        return np.frombuffer(raw, "f4")

    url = f"file://{tmp_path / 'q.file'}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as ds:
        dataset(ds, {"b": [5, 6], "c": [5, 6], "d": [5, 6]})
    mnt = mounter.mount(url, "rw")
    kept = os.open(mnt / "b" / "data", os.O_WRONLY)
    try:
        os.pwrite(kept, b"\xff\xff", 0)
        fd = os.open(mnt / "b" / "data", os.O_WRONLY | os.O_TRUNC)
        try:
            os.pwrite(fd, b"\x80\x3f", 2)
        finally:
            os.close(fd)
    finally:
        os.close(kept)
    for piece, at in [(b"\x00\xe0", 0), (b"\x10\x41", 2)]:
        fd = os.open(mnt / "c" / "data", os.O_WRONLY)
        try:
            os.pwrite(fd, piece, at)
        finally:
            os.close(fd)
    fd = os.open(mnt / "d" / "data", os.O_WRONLY)
    try:
        os.pwrite(fd, b"\x00\xe0", 0)
        os.pwrite(fd, b"\x10\x41", 2)
    finally:
        os.close(fd)
    umount_and_wait(mnt)

    # netcdf-c's writes: 5 with the low half e000, read back, its high half made 4110.
    first = _bitround9(tmp_path, "first.file", lambda ds: dataset(ds, {
        "c": f4(b"\x00\xe0\xa0\x40" + np.float32(6).tobytes())}))["c"]
    want_c = _bitround9(tmp_path, "second.file", lambda ds: dataset(ds, {
        "c": f4(first[:2] + b"\x10\x41" + first[4:])}))["c"]
    want = _bitround9(tmp_path, "once.file", lambda ds: dataset(ds, {
        "b": f4(b"\x00\x00\x80\x3f" + bytes(4)),
        "d": f4(b"\x00\xe0\x10\x41" + np.float32(6).tobytes())}))
    assert f4(want["b"]).tolist() == [1, 0]
    assert f4(want_c).tolist() == [9, 6] and f4(want["d"]).tolist() == [9.0625, 6]
    with netCDF4.Dataset(url) as ds:
        assert ds["b"][:].data.tobytes() == want["b"]
        assert ds["c"][:].data.tobytes() == want_c
        assert ds["d"][:].data.tobytes() == want["d"]


def test_quantization_leaves_a_pure_zarr_arrays_fill_value_alone(mounter, tmp_path):
    """A pure Zarr array with `fill_value: -999` and no `_FillValue` attribute (as xarray and
    zarr-python write them): netcdf-c takes -999 as the variable's fill (netCDF4-python's
    `get_fill_value()`), and quantization leaves its fill alone, so values written through the
    mount that are -999 stay -999 (missing) instead of becoming -1024; the others are
    quantized as netCDF4-python quantizes them in a variable whose fill is -999."""
    import netCDF4

    values = np.array([-999, 1.3, -999, 3.3, 1000.7, -999], "f4")
    oracle = tmp_path / "oracle.zarr"
    with netCDF4.Dataset(f"file://{oracle}#mode=zarr,file", "w") as ds:
        ds.createDimension("x", len(values))
        v = ds.createVariable("v", "f4", ("x",), fill_value=-999.0, significant_digits=3,
                              quantize_mode="BitRound")
        v.set_auto_mask(False)
        v[:] = values
    with netCDF4.Dataset(f"file://{oracle}#mode=zarr,file") as ds:
        ds["v"].set_auto_mask(False)
        want = ds["v"][:]
    assert list(want[[0, 2, 5]]) == [-999, -999, -999]
    assert want.tobytes() != values.tobytes()

    store = tmp_path / "x.zarr"
    (store / "v").mkdir(parents=True)
    (store / ".zgroup").write_text('{"zarr_format": 2}')
    (store / "v" / ".zarray").write_text(json.dumps({
        "zarr_format": 2, "shape": [len(values)], "chunks": [len(values)], "dtype": "<f4",
        "fill_value": -999.0, "order": "C", "compressor": None, "filters": None}))
    (store / "v" / ".zattrs").write_text(json.dumps({
        "_ARRAY_DIMENSIONS": ["x"], "_QuantizeBitRoundNumberOfSignificantBits": 3}))
    url = f"file://{store}#mode=zarr,file"
    with netCDF4.Dataset(url) as ds:
        assert "_FillValue" not in ds["v"].ncattrs()
        assert ds["v"].get_fill_value() == -999
    mnt = mounter.mount(url, "rw")
    (mnt / "v" / "data").write_bytes(values.tobytes())
    umount_and_wait(mnt)
    with netCDF4.Dataset(url) as ds:
        ds["v"].set_auto_mask(False)
        assert ds["v"][:].tobytes() == want.tobytes()


def test_a_quantization_attribute_written_as_short_is_stored_and_shown_as_int(mounter, tmp_path):
    """`echo 3s > …/_QuantizeBitGroomNumberOfSignificantDigits`: netcdf-c's
    nc_def_var_quantize and `gen` store the setting as one int (ncgen 4.10 of
    `v:_Quantize… = 3s ;` calls it), so the mount stores and shows `3`, an int after
    remounting too, not a short shown until the remount."""
    import netCDF4

    url = f"file://{tmp_path / 'q.file'}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as ds:
        ds.createDimension("x", 2)
        ds.createVariable("v", "f4", ("x",))
    attr = "_QuantizeBitGroomNumberOfSignificantDigits"
    for round_ in range(2):
        mnt = mounter.mount(url, "rw")
        path = mnt / "v" / "@attributes" / attr
        if round_ == 0:
            subprocess.run(["bash", "-c", 'echo 3s > "$0"', str(path)], check=True)
        assert path.read_text().strip() == "3"
        umount_and_wait(mnt)
    with netCDF4.Dataset(url) as ds:
        assert ds["v"].quantization() == (3, "BitGroom")
        assert ds["v"].getncattr(attr).dtype == np.int32


def test_char_text_that_is_not_utf8_is_refused_in_nczarr_v3(mounter, tmp_path):
    """A char attribute written through `@attributes` whose bytes are not UTF-8 cannot go into
    NCZarr on Zarr v3's `zarr.json` (zarr-python 3 cannot open such a file, and netcdf-c reads
    no Zarr v3): its close fails with ENOTSUP, the log names it, and the store is left as it
    was, which zarr-python reads."""
    import zarr

    cdl = tmp_path / "c.cdl"
    cdl.write_text('netcdf c {\ndimensions:\n  x = 2 ;\nvariables:\n  char c(x) ;\n'
                   '    c:u = "caf\\303\\251" ;\ndata:\n  c = "a" ;\n}\n')
    store = tmp_path / "c.zarr"
    r = mounter.run("gen", "-k", "nczarr,v3", "-o", str(store), str(cdl))
    assert r.returncode == 0, r.stderr
    before = (store / "c" / "zarr.json").read_bytes()
    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(store), "rw", log=log)
    fd = os.open(mnt / "c" / "@attributes" / "w", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, b"a\xffb")
    with pytest.raises(OSError) as err:
        os.close(fd)
    assert err.value.errno == errno.ENOTSUP
    assert ('attribute "w" of variable /c in NCZarr on Zarr v3: its text is not UTF-8 '
            "(byte 0xFF at offset 1)") in log.read_text()
    umount_and_wait(mnt)
    assert (store / "c" / "zarr.json").read_bytes() == before
    assert dict(zarr.open_group(str(store), mode="r")["c"].attrs)["u"] == "café"


def test_an_attribute_file_empty_at_a_close_before_its_text_is_no_value_yet(mounter, tmp_path,
                                                                           monkeypatch):
    """`echo 3 > FILE` closes a duplicate of the file it created or truncated before writing:
    that empty text is neither refused (a quantization attribute) nor stored (any other), so
    the log has no EPERM line and storage keeps the old value until the text comes. A file
    still empty at its last close is the empty text, as documented: refused for a
    quantization attribute (logged), a `char` attribute "" otherwise."""
    import netCDF4

    url = f"file://{tmp_path / 'q.file'}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as ds:
        ds.createDimension("x", 4)
        v = ds.createVariable("v", "f4", ("x",))
        v.note = "old"
    log = tmp_path / "mount.log"
    monkeypatch.setenv("RUST_LOG", "warn")
    mnt = mounter.mount(url, "rw", log=log)
    attrs = mnt / "v" / "@attributes"
    stored = tmp_path / "q.file" / "v" / ".zattrs"

    def echo(text: str, path: Path) -> None:
        subprocess.run(["bash", "-c", 'echo "$0" > "$1"', text, str(path)], check=True)

    echo("3", attrs / "_QuantizeBitGroomNumberOfSignificantDigits")
    echo("4", attrs / "_QuantizeBitGroomNumberOfSignificantDigits")
    # The close of a duplicate while empty stores nothing: not the new attribute, not an
    # empty value over the old one.
    for name, flags, before in [("note", os.O_TRUNC, "old"), ("fresh", os.O_CREAT, None)]:
        fd = os.open(attrs / name, os.O_WRONLY | flags)
        os.close(os.dup(fd))
        assert json.loads(stored.read_text()).get(name) == before
        os.write(fd, b"new\n")
        os.close(fd)
    (attrs / "touched").touch()
    (attrs / "_QuantizeBitRoundNumberOfSignificantBits").touch()
    umount_and_wait(mnt)
    lines = [line for line in log.read_text().splitlines() if "(EPERM)" in line]
    assert len(lines) == 1, lines
    assert "_QuantizeBitRoundNumberOfSignificantBits" in lines[0]
    with netCDF4.Dataset(url) as ds:
        assert ds["v"].quantization() == (4, "BitGroom")
        a = {k: ds["v"].getncattr(k) for k in ds["v"].ncattrs()}
    assert (a["note"], a["fresh"], a["touched"]) == ("new", "new", "")
    assert "_QuantizeBitRoundNumberOfSignificantBits" not in a


def _odd_group_store(store: Path) -> dict[str, bytes]:
    """A pure Zarr v2 store with the group `g` holding the array `a`, as zarr-python writes
    it: its objects by key."""
    import zarr

    group = zarr.open_group(str(store), mode="w", zarr_format=2)
    group.create_group("g").create_array("a", shape=(3,), dtype="i4", chunks=(3,))[:] = [1, 2, 3]
    return {p.relative_to(store).as_posix(): p.read_bytes() for p in store.rglob("*")
            if p.is_file()}


def _mv_is_refused_naming(mnt: Path, log: Path, names: str) -> None:
    for source, target in [(mnt / "g", mnt / "g2"), (mnt / "g" / "a", mnt / "g" / "a2")]:
        with pytest.raises(OSError) as e:
            os.rename(source, target)
        assert e.value.errno == errno.EPERM
    assert sorted(p.name for p in (mnt / "g").iterdir() if not p.name.startswith("@")) == ["a"]
    umount_and_wait(mnt)
    lines = [line for line in log.read_text().splitlines() if "(EPERM)" in line]
    assert len(lines) == 2, lines
    assert all(names in line for line in lines), lines


def test_a_group_holding_a_file_no_key_names_is_not_moved(mounter, tmp_path):
    """A file of a directory store whose name is not UTF-8 has no key: a `mv` of the group or
    array holding it would neither copy it nor keep it when the old directory goes, so it is
    refused (EPERM, a log line naming the file), storage untouched."""
    store = tmp_path / "odd.zarr"
    before = _odd_group_store(store)
    odd = os.fsencode(store / "g" / "a") + b"/\xffodd"
    with open(odd, "wb") as f:
        f.write(b"kept")
    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(store), "rw", log=log)
    _mv_is_refused_naming(mnt, log, "not UTF-8")
    after = {p.relative_to(store).as_posix(): p.read_bytes() for p in store.rglob("*")
             if p.is_file() and p.name.isprintable()}
    assert after == before
    assert open(odd, "rb").read() == b"kept"


def test_an_s3_group_holding_a_key_no_dataset_key_names_is_not_moved(mounter, tmp_path,
                                                                     monkeypatch):
    """S3 takes keys with an empty segment (`g/a//x`), which no dataset key is: a `mv` of the
    group or array over it is refused (EPERM, a log line naming the key), every object kept."""
    endpoint = moto_or_skip()
    import boto3
    from botocore.config import Config

    objects = _odd_group_store(tmp_path / "odd.zarr")
    objects["g/a//junk"] = b"kept"
    client = boto3.client("s3", endpoint_url=endpoint, aws_access_key_id="testing",
                          aws_secret_access_key="testing", region_name="us-east-1",
                          config=Config(s3={"addressing_style": "path"}))
    client.create_bucket(Bucket=S3_BUCKET)
    prefix = f"oddkeys-{random.randrange(1 << 32):08x}"
    for key, body in objects.items():
        client.put_object(Bucket=S3_BUCKET, Key=f"{prefix}/{key}", Body=body)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    log = tmp_path / "mount.log"
    try:
        mnt = mounter.mount(f"{endpoint}/{S3_BUCKET}/{prefix}#mode=zarr,s3", "rw", log=log)
        _mv_is_refused_naming(mnt, log, f'"{prefix}/g/a//junk"')
        listed = client.list_objects_v2(Bucket=S3_BUCKET, Prefix=f"{prefix}/")["Contents"]
        after = {o["Key"][len(prefix) + 1:]: client.get_object(
            Bucket=S3_BUCKET, Key=o["Key"])["Body"].read() for o in listed}
        assert after == objects
    finally:
        mounter.cleanup()
        client.delete_objects(Bucket=S3_BUCKET, Delete={"Objects": [
            {"Key": f"{prefix}/{k}"} for k in objects]})
