"""String variables with shuffle and compression, both ways.

netcdf-c writes a string variable's shuffle as `{"id": "shuffle", "elementsize": 0}` and
shuffles its `|S<n>` chunks in 8-byte elements (its in-memory string, a pointer), whatever
the width. numcodecs shuffles in the recorded element size and refuses buffers that are not a
multiple of it. So nczarrfs reads netcdf-c's 0 as 8 for strings, and writes a string shuffle
as 8, or drops it when a chunk's bytes are not a multiple of 8.

netcdf-c refuses filters on HDF5 string variables, so there is no HDF5 twin here: the
expected values are the ones written, as netCDF4-python (and zarr-python) read them back.

Scalars are stored without codecs, as netcdf-c stores them (it cannot open a blosc scalar).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import zarr

PLUGINS = os.path.join(os.path.dirname(netCDF4.__file__), "plugins")

WORDS = ["one", "fill", "abc", "a longer string", "", "x", "seven77", "quotes\"and\\"]


@pytest.fixture(autouse=True)
def _plugins(monkeypatch):
    monkeypatch.setenv("HDF5_PLUGIN_PATH", PLUGINS)


def url(path: Path) -> str:
    return f"file://{path}#mode=nczarr,file"


@pytest.mark.parametrize("shape,chunks", [((3,), (3,)), ((4, 5), (3, 2))])
def test_strings_netcdf_c_shuffled_read_as_written(nczarrfs, tmp_path, shape, chunks):
    rng = np.random.default_rng(7)
    values = np.array(rng.choice(WORDS, size=shape), dtype=object)
    path = tmp_path / "s.file"
    with netCDF4.Dataset(url(path), "w") as nc:
        dims = []
        for i, n in enumerate(shape):
            nc.createDimension(f"d{i}", n)
            dims.append(f"d{i}")
        v = nc.createVariable("v", str, dims, zlib=True, shuffle=True, chunksizes=chunks)
        v[:] = values
    zarray = json.loads((path / "v" / ".zarray").read_text())
    assert {"id": "shuffle", "elementsize": 0} in zarray["filters"], zarray
    with netCDF4.Dataset(url(path)) as nc:
        expected = nc["v"][:]
    assert expected.tolist() == values.tolist()

    out = tmp_path / "v.npy"
    r = nczarrfs("get", str(path), "v", "--npy", "-o", str(out))
    assert r.returncode == 0, r.stderr.decode()
    got = np.load(out)
    assert [s.decode() for s in got.ravel()] == values.ravel().tolist()


def _cdl(n: int) -> str:
    words = ", ".join(json.dumps(w) for w in WORDS[:n])
    return f"""netcdf s {{
dimensions:
	x = {n} ;
variables:
	string v(x) ;
		v:_DeflateLevel = 1 ;
		v:_Shuffle = "true" ;
	string scalar ;
		scalar:_Codecs = "[{{\\"id\\": \\"blosc\\", \\"cname\\": \\"lz4\\"}}]" ;
	int i(x) ;
		i:_Shuffle = "true" ;
		i:_DeflateLevel = 1 ;
data:
 v = {words} ;
 scalar = "only" ;
 i = {", ".join(str(k) for k in range(n))} ;
}}
"""


@pytest.mark.parametrize("n", [2, 3, 4])
def test_shuffled_strings_written_are_read_by_netcdf_c_and_zarr(nczarrfs, tmp_path, n):
    """Widths and counts whose chunk is, and is not, a multiple of 8 bytes."""
    cdl = tmp_path / "s.cdl"
    cdl.write_text(_cdl(n))
    path = tmp_path / "s.file"
    r = nczarrfs("gen", "-o", str(path), str(cdl))
    assert r.returncode == 0, r.stderr.decode()
    expected = WORDS[:n]

    zarray = json.loads((path / "v" / ".zarray").read_text())
    width = int(zarray["dtype"][2:])
    shuffles = [f for f in zarray["filters"] or [] if f["id"] == "shuffle"]
    if (width * n) % 8 == 0:
        assert shuffles == [{"id": "shuffle", "elementsize": 8}], zarray
    else:
        assert shuffles == [], zarray
    # The numeric variable keeps its shuffle, in its own element size.
    ints = json.loads((path / "i" / ".zarray").read_text())
    assert {"id": "shuffle", "elementsize": 4} in ints["filters"], ints
    scalar = json.loads((path / "scalar" / ".zarray").read_text())
    assert scalar["compressor"] is None and not scalar["filters"], scalar

    with netCDF4.Dataset(url(path)) as nc:
        assert nc["v"][:].tolist() == expected
        assert nc["scalar"][...] == "only"
        assert nc["i"][:].tolist() == list(range(n))
    array = zarr.open_array(str(path / "v"), mode="r")
    assert [s.decode() for s in array[:]] == expected
