"""`nczarrfs copy -c` against Debian's nccopy (netcdf-c 4.9.0): the same content is written by
netCDF4-python as HDF5 and as NCZarr, nccopy copies the one and nczarrfs the other with the
same `-c` options, and the `_ChunkSizes` that `ncdump -hs` shows of nccopy's copy must be those
`nczarrfs dump -hs` shows of ours; where nccopy refuses the options, so must nczarrfs, leaving
no target.

The content has dimensions of the same name in the root group and in a group, because nccopy
reads a plain name in `-c` as the root group's dimension. Every variable is along an unlimited
dimension, as nccopy stores fixed-size uncompressed ones contiguous, which NCZarr has no
equivalent of. Under `-u` it does so too where a variable's chunk would hold less than 8192
bytes (and so ignores `-c` there): only the variables it chunks are compared then.
"""

from __future__ import annotations

import re
import subprocess

import netCDF4
import numpy as np
import pytest

import twins


def _build(nc: netCDF4.Dataset, empty_record_dim: bool) -> None:
    """Root `t` (unlimited, 30 records) and `x` (40); group `g` with its own `t` (unlimited,
    20), `x` (3) and `y` (4); group `g2` whose `k` uses the root's `t` and `x`. Variable names
    are unique, so a `_ChunkSizes` line names its variable. `empty_record_dim` adds `ee` along
    an unlimited `e` with no records (nccopy's `-u` fails on such a dimension)."""
    nc.createDimension("t", None)
    nc.createDimension("x", 40)
    r = nc.createVariable("r", "f8", ("t", "x"), chunksizes=(3, 7))
    r[0:30] = np.arange(1200.0).reshape(30, 40)
    if empty_record_dim:
        nc.createDimension("e", None)
        nc.createVariable("ee", "f8", ("e", "x"), chunksizes=(3, 7))
    g = nc.createGroup("g")
    g.createDimension("t", None)
    g.createDimension("x", 3)
    g.createDimension("y", 4)
    b = g.createVariable("b", "f8", ("t", "x"), chunksizes=(2, 3))
    b[0:20] = np.arange(60.0).reshape(20, 3)
    c = g.createVariable("c", "f8", ("t", "y"), chunksizes=(2, 4))
    c[0:20] = np.arange(80.0).reshape(20, 4)
    g2 = nc.createGroup("g2")
    k = g2.createVariable("k", "f8", ("t", "x"), chunksizes=(2, 5))
    k[0:30] = np.arange(1200.0).reshape(30, 40)


def _twins(tmp_path, empty_record_dim: bool) -> tuple[str, str]:
    name = "e" if empty_record_dim else "f"
    hpath = str(tmp_path / f"{name}.nc")
    zpath = str(tmp_path / f"{name}.file")
    for target in (hpath, twins.nczarr_url(zpath)):
        with netCDF4.Dataset(target, "w", format="NETCDF4") as nc:
            _build(nc, empty_record_dim)
    return hpath, zpath


def _chunk_sizes(dump: bytes) -> dict[str, str]:
    """Variable name -> its `_ChunkSizes` value, from `ncdump -hs` text."""
    return dict(re.findall(r"^\s*(\w+):_ChunkSizes = ([\d, ]+) ;", dump.decode(), re.M))


# (options, dataset with the empty record dimension?)
AGREED = [
    ("-c t/5", True),  # the root's t: r and g2's k, not g's b and c
    ("-c x/10", True),  # the root's x (40), though g's x is 3
    ("-c /g/t/5", True),
    ("-c /g/y/2", True),
    ("-c t/", True),  # the whole length, 30
    ("-c e/", True),  # an empty dimension: chunks stay
    ("-c t/,x/", True),
    ("-c /g/t/", True),
    ("-c r:10,10 -c t/2", True),  # a variable's chunks win over a dimension's
    ("-c t/2 -c r:10,10", True),
    ("-c /g/b:4,3 -c /g/t/7", True),
    ("-c /g/t/7 -c /g/b:4,3", True),
    # Of dimension lists the last counts; variables' add up, and win in any order.
    ("-c t/2 -c x/5", True),
    ("-c x/5 -c t/2", True),
    ("-c t/2,x/5 -c /g/t/7", True),
    ("-c r:10,10 -c t/2 -c x/5", True),
    ("-c t/2 -c r:10,10 -c x/5", True),
    ("-c t/2 -c x/5 -c r:10,10", True),
    ("-c t/2 -c t/4", True),
    ("-c r:10,10 -c /g/b:4,3 -c x/5", True),
    ("-V r -c /g/b:4,3", True),  # a variable -V leaves out
    ("-V r -c t/5", True),
    # nccopy reads a dimension's length as C does (octal after 0, hexadecimal after 0x), a
    # variable's in decimal.
    ("-c x/010", True),
    ("-c t/0x10,/g/t/0X3", True),
    ("-c r:010,010", True),
    ("-u -c t/30,x/40", False),  # r and k: 9600-byte chunks
    ("-u -c t/,x/", False),
]

# (options, dataset with the empty record dimension?, what our message names)
REFUSED = [
    ("-c y/2", True, "no dimension named y in the root group"),  # y is g's alone
    ("-c g/t/5", True, "no dimension named g/t"),
    ("-c x/41", True, "along /x is longer"),
    ("-c x/00", True, "length \"00\" is not from 1 to"),
    # The lengths of a variable that -V leaves out are checked all the same.
    ("-V r -c /g/b:4", True, "/g/b:4: 1 length(s) for 2 dimension(s)"),
    ("-V r -c /g/b:4,30", True, "along /g/x is longer"),
    # t is fixed at 30 in the target.
    ("-u -c t/31,x/40", False, "along /t is longer than that fixed dimension (30)"),
    ("-u -c r:31,40", False, "along /t is longer than that fixed dimension (30)"),
]


@pytest.mark.parametrize("options,empty_record_dim", AGREED)
def test_chunks_match_nccopy(nczarrfs, tmp_path, options, empty_record_dim):
    hpath, zpath = _twins(tmp_path, empty_record_dim)
    theirs, ours = str(tmp_path / "nccopy.nc"), str(tmp_path / "copy.file")
    r = subprocess.run(["nccopy", *options.split(), hpath, theirs], capture_output=True)
    assert r.returncode == 0, r.stderr
    want = subprocess.run(["ncdump", "-hs", theirs], capture_output=True, check=True)
    res = nczarrfs("copy", *options.split(), zpath, ours)
    assert res.returncode == 0, res.stderr
    got = nczarrfs("dump", "-hs", ours)
    assert got.returncode == 0, got.stderr
    want, got = _chunk_sizes(want.stdout), _chunk_sizes(got.stdout)
    assert want
    if "-u" in options:
        got = {name: got.get(name) for name in want}
    assert got == want


@pytest.mark.parametrize("options,empty_record_dim,why", REFUSED)
def test_chunks_nccopy_refuses_are_refused(nczarrfs, tmp_path, options, empty_record_dim, why):
    hpath, zpath = _twins(tmp_path, empty_record_dim)
    theirs, ours = tmp_path / "nccopy.nc", tmp_path / "copy.file"
    r = subprocess.run(["nccopy", *options.split(), hpath, str(theirs)], capture_output=True)
    assert r.returncode != 0, "nccopy took it"
    res = nczarrfs("copy", *options.split(), zpath, str(ours))
    assert res.returncode == 1, res.stderr
    assert why.encode() in res.stderr, res.stderr
    assert not ours.exists()


@pytest.mark.parametrize("spec", ["/", "r:", "r:contiguous", "r:compact"])
def test_unchunked_forms_are_refused_as_ncz_has_no_such_storage(nczarrfs, tmp_path, spec):
    """nccopy's forms for contiguous or compact storage: every NCZarr variable is chunked."""
    _, zpath = _twins(tmp_path, True)
    ours = tmp_path / "copy.file"
    res = nczarrfs("copy", "-c", spec, zpath, str(ours))
    assert res.returncode == 1
    assert b"NCZarr does not have" in res.stderr, res.stderr
    assert not ours.exists()


@pytest.mark.parametrize("spec", ["r:31,40", "r:100,7", "ee:5,40"])
def test_variable_chunks_beyond_an_unlimited_dimension_are_taken(nczarrfs, tmp_path, spec):
    """A variable's chunk longer than its unlimited dimension's current length (30 records of
    `r`), or along an empty one (`ee`): nccopy refuses it ("Bad chunk sizes"), copy takes it,
    as it takes `t/100`, and netcdf-c reads the copy (the dimension will grow)."""
    hpath, zpath = _twins(tmp_path, True)
    r = subprocess.run(["nccopy", "-c", spec, hpath, str(tmp_path / "nccopy.nc")],
                       capture_output=True)
    assert r.returncode != 0 and b"Bad chunk sizes" in r.stderr, r.stderr
    ours = str(tmp_path / "copy.file")
    res = nczarrfs("copy", "-c", spec, zpath, ours)
    assert res.returncode == 0, res.stderr
    name, lengths = spec.split(":")
    with netCDF4.Dataset(hpath) as h, netCDF4.Dataset(twins.nczarr_url(ours)) as z:
        assert z[name].chunking() == [int(n) for n in lengths.split(",")]
        assert z[name].shape == h[name].shape
        np.testing.assert_array_equal(z[name][:], h[name][:])
        np.testing.assert_array_equal(z["/g2/k"][:], h["/g2/k"][:])
