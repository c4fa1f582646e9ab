"""File and directory names that are not UTF-8, which Linux allows (a name is bytes), through
`dump`, `gen`, `copy`, `get` and `put`, with Debian's ncdump and ncgen and netCDF4-python as
oracles.

* ncdump and ncgen take such paths; ncdump names the dataset on its `netcdf NAME {` line with
  the bytes of the file's name (escaped as it escapes any name), and ncgen without `-o` names
  its output after the CDL file's bytes.
* netCDF4-python cannot open such a path (it encodes the name as UTF-8), and netcdf-c drops the
  bytes beyond ASCII from a `file://` URL: their reads here go through a symbolic link of a
  UTF-8 name, and datasets are written at a UTF-8 name and then renamed.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import netCDF4
import numpy as np
import pytest

from conftest import nczarrfs_binary

#: A directory and file names that are not UTF-8 (a lone continuation byte, an invalid lead).
DIR = b"dir\xfe"
NAME = b"d\xff"

VALUES = np.arange(6, dtype=np.int32).reshape(2, 3)


def _nczarr(path: Path | str) -> str:
    return f"file://{path}#mode=nczarr,file"


def _write(url_or_path: str) -> None:
    """A small dataset: a group, attributes, an int variable."""
    with netCDF4.Dataset(url_or_path, "w", format="NETCDF4") as ds:
        ds.title = "not UTF-8 paths"
        ds.createDimension("y", 2)
        ds.createDimension("x", 3)
        v = ds.createVariable("v", "i4", ("y", "x"))
        v.units = "m"
        v[:] = VALUES
        g = ds.createGroup("g")
        w = g.createVariable("w", "f8", ("x",))
        w[:] = [0.5, 1.5, 2.5]


@pytest.fixture
def place(tmp_path):
    """`tmp_path/dir\\xfe`, as bytes, and a function making a UTF-8 link to a path in it."""
    base = os.fsencode(tmp_path)
    directory = os.path.join(base, DIR)
    os.mkdir(directory)
    links = []

    def link(target: bytes) -> Path:
        plain = tmp_path / f"link{len(links)}.file"
        os.symlink(target, plain)
        links.append(plain)
        return plain

    return directory, link


def _twins(tmp_path: Path, directory: bytes, name: bytes) -> tuple[bytes, bytes]:
    """The same dataset as NCZarr (`name.file`) and as netCDF-4/HDF5 (`name.nc`) in
    `directory`, written by netCDF4-python at UTF-8 names and renamed there."""
    _write(_nczarr(tmp_path / "made.file"))
    _write(str(tmp_path / "made.nc"))
    nczarr = os.path.join(directory, name + b".file")
    hdf5 = os.path.join(directory, name + b".nc")
    os.rename(os.fsencode(tmp_path / "made.file"), nczarr)
    os.rename(os.fsencode(tmp_path / "made.nc"), hdf5)
    return nczarr, hdf5


def _ncdump(*args: bytes | str) -> bytes:
    return subprocess.run(["ncdump", *args], capture_output=True, check=True).stdout


@pytest.mark.parametrize("name", [NAME, b"1 a\xff(b)\xc3", b"caf\xc3\xa9\xff"])
def test_dump_names_the_dataset_as_ncdump_does(nczarrfs, tmp_path, place, name):
    directory, _ = place
    nczarr, hdf5 = _twins(tmp_path, directory, name)
    expected = _ncdump(hdf5)
    assert expected.startswith(b"netcdf ")
    r = nczarrfs("dump", nczarr)
    assert r.returncode == 0, r.stderr
    assert r.stdout == expected
    # The same through -h, and with the path's fragment split off as for any path.
    r = nczarrfs("dump", "-h", nczarr + b"#mode=nczarr,file")
    assert r.returncode == 0, r.stderr
    assert r.stdout == _ncdump("-h", hdf5)


def test_gen_writes_where_ncgen_does(nczarrfs, tmp_path, place):
    directory, link = place
    cdl = _ncdump("-h", _twins(tmp_path, directory, b"src")[1])
    # -o names the output.
    out = os.path.join(directory, NAME + b".file")
    cdl_file = os.path.join(directory, b"c\xff.cdl")
    with open(cdl_file, "wb") as f:
        f.write(cdl)
    r = nczarrfs("gen", "-o", out, cdl_file)
    assert r.returncode == 0, r.stderr
    with netCDF4.Dataset(_nczarr(link(out))) as ds:
        assert ds.title == "not UTF-8 paths"
        assert ds["v"].dimensions == ("y", "x")
    # Without -o, in the working directory, named after the CDL file as ncgen names it.
    workdir = os.path.join(directory, b"work\xff")
    os.mkdir(workdir)
    subprocess.run(["ncgen", "-k", "nc4", cdl_file], cwd=workdir, check=True)
    r = subprocess.run([nczarrfs_binary(), b"gen", cdl_file], cwd=workdir,
                       capture_output=True, check=False)
    assert r.returncode == 0, r.stderr
    made = sorted(os.listdir(workdir))
    assert made == [b"c\xff.file", b"c\xff.nc"], made


def test_copy_get_and_put(nczarrfs, tmp_path, place):
    directory, link = place
    nczarr, _ = _twins(tmp_path, directory, NAME)

    copied = os.path.join(directory, b"e\xff.file")
    r = nczarrfs("copy", nczarr, copied)
    assert r.returncode == 0, r.stderr
    with netCDF4.Dataset(_nczarr(link(copied))) as ds:
        np.testing.assert_array_equal(ds["v"][:], VALUES)
        np.testing.assert_array_equal(ds["g/w"][:], [0.5, 1.5, 2.5])

    raw = os.path.join(directory, b"o\xff.bin")
    r = nczarrfs("get", nczarr, "v", "-o", raw)
    assert r.returncode == 0, r.stderr
    with open(raw, "rb") as f:
        assert f.read() == VALUES.astype("=i4").tobytes()

    new = (VALUES * 10).astype("=i4")
    source = os.path.join(directory, b"i\xff.bin")
    with open(source, "wb") as f:
        f.write(new.tobytes())
    r = nczarrfs("put", nczarr, "v", "-i", source)
    assert r.returncode == 0, r.stderr
    with netCDF4.Dataset(_nczarr(link(nczarr))) as ds:
        np.testing.assert_array_equal(ds["v"][:], new)

    # Nothing but what was asked for is left in the directory (no staging, no temporary file).
    assert sorted(os.listdir(directory)) == sorted(
        [NAME + b".file", NAME + b".nc", b"e\xff.file", b"o\xff.bin", b"i\xff.bin"])


def test_zip_archives_of_such_names_round_trip(nczarrfs, tmp_path, place):
    directory, _ = place
    nczarr, hdf5 = _twins(tmp_path, directory, NAME)
    archive = os.path.join(directory, NAME + b".zip")
    r = nczarrfs("copy", nczarr, archive)
    assert r.returncode == 0, r.stderr
    r = nczarrfs("dump", archive)
    assert r.returncode == 0, r.stderr
    assert r.stdout == _ncdump(hdf5)


def test_messages_show_such_paths_readably(nczarrfs, tmp_path, place):
    directory, _ = place
    missing = os.path.join(directory, b"missing\xff.file")
    r = nczarrfs("dump", missing)
    assert r.returncode == 1
    assert "dir\ufffd/missing\ufffd.file" in r.stderr.decode("utf-8"), r.stderr
    # A URL is text: bytes that are not UTF-8 there are refused, with how to spell them, as
    # a location of the wrong form (exit status 2).
    r = nczarrfs("dump", b"file://" + missing + b"#mode=nczarr,file")
    assert r.returncode == 2
    assert b"URL must be UTF-8 text" in r.stderr and b"%XX" in r.stderr, r.stderr


def test_other_arguments_stay_text(nczarrfs, tmp_path, place):
    directory, _ = place
    nczarr, _ = _twins(tmp_path, directory, NAME)
    # A variable's name is not a path: a usage error, exit 2, as for any malformed option,
    # naming each argument that is not UTF-8 (the dataset's path among them, in the second).
    for args, named in (
        (["dump", "-v", b"v\xff", nczarr], b"(argument 3, `v\\xff`, or argument 4, `"),
        (["get", nczarr, b"v\xff"], b", or argument 3, `v\\xff`)"),
    ):
        r = nczarrfs(*args)
        assert r.returncode == 2, r
        assert b"a name or option value is not UTF-8" in r.stderr, r.stderr
        assert named in r.stderr, r.stderr


@pytest.mark.parametrize("options, shown", [
    (b"ro,cache_size=64\xff", b'mount option "cache_size" is not UTF-8 (`cache_size=64\\xff`;'),
    (b"fsname=obs\xfe\xff", b'mount option "fsname" is not UTF-8 (`fsname=obs\\xfe\\xff`;'),
    (b"\xffro", b'mount option "\\xffro" is not UTF-8 (`\\xffro`;'),
    (b'ro,fsname="obs\xff', b'mount options `ro,fsname="obs\\xff` open a double quote'),
])
def test_mount_options_that_are_not_utf8_are_shown_with_their_bytes(nczarrfs, tmp_path,
                                                                       place, options, shown):
    """A `-o` value that is not UTF-8 (only log_file='s path may be) is refused before
    anything is mounted, with the exit status of any other bad `-o` value, and shown as other
    arguments that are not UTF-8 are: its bytes beyond UTF-8 as `\\xNN`, not replaced."""
    directory, _ = place
    nczarr, _ = _twins(tmp_path, directory, NAME)
    mountpoint = tmp_path / "mnt"
    mountpoint.mkdir()
    other_bad = nczarrfs("mount", "-o", "ro,cache_size=64X", nczarr, str(mountpoint))
    assert other_bad.returncode == 1, other_bad.stderr
    r = nczarrfs("mount", "-o", options, nczarr, str(mountpoint))
    assert r.returncode == other_bad.returncode, r.stderr
    assert r.stderr.startswith(b"nczarrfs: ") and shown in r.stderr, r.stderr
    assert "\ufffd".encode() not in r.stderr, r.stderr
    assert not os.path.ismount(mountpoint)
