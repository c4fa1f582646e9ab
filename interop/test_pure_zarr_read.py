"""Oracle: netcdf-c 4.10.1 (netCDF4-python's wheel) reading stores as pure Zarr (`mode=zarr`).

What nczarrfs reads is observed through a `copy` of the store read as pure Zarr to NCZarr,
which netCDF4-python then reads: its attribute types (char and string told apart with
nc_inq_atttype through ctypes), values, and which dimensions are unlimited must be what
netCDF4-python reads from the source store with `mode=zarr`.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import subprocess

import netCDF4
import numpy as np
import pytest

import netcdf_content
from conftest import nczarrfs_binary

zarr = pytest.importorskip("zarr")


def _libnetcdf():
    libs = os.path.join(os.path.dirname(netCDF4.__file__), "..", "netcdf4.libs")
    found = glob.glob(os.path.join(libs, "libnetcdf*"))
    assert found, f"no libnetcdf in {libs}"
    # The library netCDF4-python already loaded: the same ids are valid in both.
    return ctypes.CDLL(found[0])


LIB = _libnetcdf()
NC_GLOBAL = -1


def _url(path, mode: str) -> str:
    return f"file://{path}#mode={mode},file"


def _att_types(obj, varid: int) -> dict:
    out = {}
    for name in obj.ncattrs():
        t = ctypes.c_int(0)
        status = LIB.nc_inq_atttype(obj._grpid, varid, name.encode(), ctypes.byref(t))
        assert status == 0, f"nc_inq_atttype {name}: {status}"
        out[name] = t.value
    return out


def _view(url: str) -> dict:
    """netCDF4-python's content of the root group, with netCDF attribute types."""
    out = netcdf_content.show(url)
    with netCDF4.Dataset(url) as d:
        out["atttypes"] = _att_types(d, NC_GLOBAL)
        out["varatttypes"] = {n: _att_types(v, v._varid) for n, v in d.variables.items()}
    return out


def _ours(nczarrfs, url: str, tmp_path) -> dict:
    """What nczarrfs reads at `url`, through a copy to NCZarr."""
    out = tmp_path / "copy.file"
    r = nczarrfs("copy", url, str(out))
    assert r.returncode == 0, r.stderr.decode()
    return _view(_url(out, "nczarr"))


def test_nczarr_read_as_pure_zarr_keeps_attribute_types(nczarrfs, tmp_path):
    src = tmp_path / "typed.file"
    with netCDF4.Dataset(_url(src, "nczarr"), "w") as d:
        d.us = np.array([1, 2], "u2")
        d.b = np.int8(5)
        d.ub = np.uint8(200)
        d.f = np.float32(0.5)
        d.i64 = np.array([1, 2], "i8")
        d.setncattr_string("s", ["a", "b"])
        d.c = "ghi"
        d.createDimension("x", 2)
        v = d.createVariable("v", "i2", ("x",), fill_value=np.int16(-3))
        v.vs = np.uint8(7)
        v.vf = np.array([1.5, -2.5], "f4")
        c = d.createVariable("c", "S1", ("x",), fill_value=b"z")
        c.units = "m"
    want = _view(_url(src, "zarr"))
    # The types are what they were written as, but for char (>S1), which is a string in
    # pure Zarr, attributes as arrays.
    assert want["atttypes"] == {"us": 8, "b": 1, "ub": 7, "f": 5, "i64": 10, "s": 12, "c": 12}
    assert _ours(nczarrfs, _url(src, "zarr"), tmp_path) == want
    r = nczarrfs("dump", "-h", _url(src, "zarr"))
    assert r.returncode == 0, r.stderr.decode()
    # The NCZarr metadata stays hidden.
    assert b"_nczarr" not in r.stdout and b"_NCProperties" not in r.stdout


# Char text netCDF4-python writes to NCZarr, which netcdf-c stores as the JSON it parses as
# (typed `>S1`): in `mode=zarr` netcdf-c reads a JSON string or a list of strings as a string
# attribute, and any other JSON as the char text it was (lists unparsed without spaces).
JSON_LOOKING_TEXT = ['{"a": 1}', '[{"a": 1}]', '{"a": 1, "b": [1, 2], "c": "x"}', "null",
                     "[[1, 2], [3]]", '[1, {"a": 1}]', "[null, 1]", '["a", null]',
                     '[["a"], ["b"]]', '["a", "b"]', '"a"', "plain", "{}"]


def test_json_looking_char_attributes_read_as_pure_zarr(nczarrfs, tmp_path):
    src = tmp_path / "json.file"
    with netCDF4.Dataset(_url(src, "nczarr"), "w") as d:
        for i, text in enumerate(JSON_LOOKING_TEXT):
            d.setncattr(f"a{i}", text)
    stored = json.loads((src / ".zattrs").read_text())
    assert stored["a0"] == {"a": 1} and stored["_nczarr_attr"]["types"]["a0"] == ">S1"
    want = _view(_url(src, "zarr"))
    types = want["atttypes"]
    assert types["a0"] == types["a1"] == 2 and types["a9"] == types["a10"] == 12, types
    assert want["attrs"]["a1"] == ["text", '[{"a": 1}]']
    assert _ours(nczarrfs, _url(src, "zarr"), tmp_path) == want


@pytest.mark.parametrize("text, netcdf_c_nczarr", [
    ("1", "1"), ("[1, 2]", "[1,2]"), ("[true, false]", "[true,false]"), ('[1, "a"]', '[1,"a"]'),
    ("1.5", "1"), ("true", "1")])
def test_char_attributes_netcdf_c_cannot_read_as_pure_zarr(nczarrfs, tmp_path, text,
                                                            netcdf_c_nczarr):
    """Numbers and booleans netcdf-c stored for char text: netcdf-c refuses the whole dataset
    in `mode=zarr` ("Invalid argument"). nczarrfs reads them as the char text netcdf-c reads
    from the same store as NCZarr (lists unparsed without spaces), but for a lone float or
    boolean, which netcdf-c cuts to "1" there: that keeps the text written."""
    src = tmp_path / "num.file"
    with netCDF4.Dataset(_url(src, "nczarr"), "w") as d:
        d.a = text
    with pytest.raises(OSError):
        netCDF4.Dataset(_url(src, "zarr"))
    with netCDF4.Dataset(_url(src, "nczarr")) as d:
        assert d.a == netcdf_c_nczarr
    want = json.dumps(json.loads(text), separators=(",", ":"))
    ours = _ours(nczarrfs, _url(src, "zarr"), tmp_path)
    assert ours["atttypes"] == {"a": 2}
    assert ours["attrs"]["a"] == ["text", want]
    if netcdf_c_nczarr != "1" or text == "1":
        assert want == netcdf_c_nczarr


def test_non_finite_double_attributes(nczarrfs, tmp_path):
    src = tmp_path / "inf.file"
    with netCDF4.Dataset(_url(src, "zarr"), "w") as d:
        d.a = np.array([1.5, np.inf])
        d.f = np.array([2.5, -np.inf, np.nan])
        d.b = "Infinity"
    attrs = json.loads((src / ".zattrs").read_text())
    # netcdf-c's spelling of the non-finite values, which nczarrfs must read back.
    assert attrs["a"] == [1.5, "Infinity"] and attrs["f"] == [2.5, "-Infinity", "NaN"]
    # Strings alone stay text, in both.
    attrs["c"] = ["NaN", "-Infinity"]
    (src / ".zattrs").write_text(json.dumps(attrs))
    want = _view(_url(src, "zarr"))
    assert want["atttypes"]["a"] == 6 and want["atttypes"]["c"] == 2
    assert _ours(nczarrfs, _url(src, "zarr"), tmp_path) == want


def test_non_finite_first_is_double(nczarrfs, tmp_path):
    # netcdf-c guesses the type from the first element and reads this as its JSON text (the
    # documented defect); a list of numbers is doubles from first principles.
    src = tmp_path / "nan_first.zarr"
    g = zarr.open_group(str(src), mode="w", zarr_format=2)
    g.attrs["a"] = ["NaN", 1.5, "-Infinity"]
    r = nczarrfs("dump", "-h", str(src))
    assert r.returncode == 0, r.stderr.decode()
    assert b"\t\t:a = NaN, 1.5, -Infinity ;\n" in r.stdout


@pytest.mark.parametrize("named", [True, False])
def test_zero_length_dimension_is_unlimited(nczarrfs, tmp_path, named):
    src = tmp_path / "e0.zarr"
    g = zarr.open_group(str(src), mode="w", zarr_format=2)
    a = g.create_array("v", shape=(0, 3), dtype="i4", chunks=(1, 3), fill_value=0)
    if named:
        a.attrs["_ARRAY_DIMENSIONS"] = ["x", "y"]
    want = _view(_url(src, "zarr"))
    first = "x" if named else "_Anonymous_Dim_0"
    assert want["dims"][first] == [0, True]
    assert _ours(nczarrfs, _url(src, "zarr"), tmp_path) == want


def test_zero_length_dimension_v3_and_append(nczarrfs, tmp_path):
    # netcdf-c reads no Zarr v3: from first principles, netCDF has no fixed dimension of
    # length 0, so it is unlimited as in v2, and appending grows the array's shape.
    src = tmp_path / "e3.zarr"
    g = zarr.open_group(str(src), mode="w", zarr_format=3)
    g.create_array("v", shape=(0,), dtype="i4", chunks=(2,), fill_value=0,
                   dimension_names=["x"])
    g.create_array("w", shape=(0,), dtype="i4", chunks=(2,), fill_value=0)
    r = nczarrfs("dump", "-h", str(src))
    assert r.returncode == 0, r.stderr.decode()
    assert b"\tx = UNLIMITED ; // (0 currently)\n" in r.stdout
    assert b"\t_Anonymous_Dim_0 = UNLIMITED ; // (0 currently)\n" in r.stdout
    r = subprocess.run(
        [str(nczarrfs_binary()), "put", str(src), "v"],
        input=np.array([7, 8, 9], "<i4").tobytes(), capture_output=True, check=False,
    )
    assert r.returncode == 0, r.stderr.decode()
    v = zarr.open_array(str(src / "v"))
    assert v.shape == (3,)
    assert v[:].tolist() == [7, 8, 9]
