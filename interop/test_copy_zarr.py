"""`copy` to pure Zarr (v2 in a directory, v2 in a zip, v3), checked by zarr-python.

Randomized twin datasets (netCDF4-python writes an NCZarr store and an HDF5 twin) are copied
with `-k zarr`, `-k zarr,zip` and `-k zarr,v3`. The copy must succeed (its own read-back
verification included: a pure Zarr store lists its arrays by name, not in creation order,
and Zarr v3 stores strings in another width), and zarr-python must read every array with the
HDF5 twin's values as netCDF4-python reads them.
"""

from __future__ import annotations

import json
import os
import warnings

import netCDF4
import numpy as np
import pytest
import zarr

import twins
from conftest import SEED

COUNT = 8
MODES = ["zarr", "zarr,zip", "zarr,v3"]
PLUGINS = os.path.join(os.path.dirname(netCDF4.__file__), "plugins")


@pytest.fixture(autouse=True)
def _quiet_and_plugins(monkeypatch):
    monkeypatch.setenv("HDF5_PLUGIN_PATH", PLUGINS)
    warnings.filterwarnings("ignore", module="zarr")
    warnings.filterwarnings("ignore", module="numcodecs")


def _as_netcdf_values(array: np.ndarray, like: np.ndarray) -> np.ndarray:
    """zarr-python's view of a stored netCDF type as netCDF4-python shows it: char may be
    uint8 (Zarr v3) or `S1`, strings fixed-width bytes (v2) or UCS-4 (v3)."""
    if like.dtype.kind == "S":
        if array.dtype.kind == "S":
            return array.reshape(like.shape)
        return array.astype(np.uint8).view("S1").reshape(like.shape)
    if like.dtype.kind == "O":
        text = [x.decode() if isinstance(x, bytes) else str(x) for x in array.flat]
        return np.asarray(text, dtype=object).reshape(like.shape)
    return array.reshape(like.shape)


def _open(path: str, mode: str) -> zarr.Group:
    if "zip" in mode:
        return zarr.open_group(zarr.storage.ZipStore(path, mode="r"), mode="r")
    return zarr.open_group(path, mode="r")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("index", range(COUNT))
def test_twins_copied_to_pure_zarr_read_in_zarr_python(nczarrfs, tmp_path, index, mode):
    seed = SEED + 104729 * (index + 1)
    print(f"seed {seed}")
    zpath, hpath, _ = twins.write_twins(str(tmp_path), f"tw{index}", seed)
    target = str(tmp_path / ("copy.zip" if "zip" in mode else "copy.zarr"))
    res = nczarrfs("copy", "-k", mode, zpath, target)
    assert res.returncode == 0, f"seed {seed}: {res.stderr.decode(errors='replace')}"

    root = _open(target, mode)
    seen = set()
    with netCDF4.Dataset(hpath) as nc:
        expected = dict(twins.walk_variables(nc))
        for path, node in root.members(max_depth=None):
            if not isinstance(node, zarr.Array):
                continue
            name = "/" + path
            want = twins.read_values(expected[name])
            got = _as_netcdf_values(np.asarray(node[...]), want)
            assert twins.same_values(got, want), f"seed {seed}: {name}"
            seen.add(name)
    assert seen == set(expected), f"seed {seed}: arrays {seen} != {set(expected)}"


@pytest.mark.parametrize("name", ["@v", "trailing ", "g/@sub"])
def test_pure_zarr_names_netcdf_refuses_stop_a_copy_to_nczarr(nczarrfs, tmp_path, name):
    """zarr-python allows names netCDF does not; netcdf-c then refuses the whole NCZarr
    dataset, so `copy` refuses it, naming it. A copy to pure Zarr keeps the name."""
    src = tmp_path / "src.zarr"
    root = zarr.open_group(str(src), mode="w", zarr_format=2)
    arr = root.create_array(name, shape=(2,), dtype="<i4", attributes={"_ARRAY_DIMENSIONS": ["x"]})
    arr[:] = [1, 2]
    target = tmp_path / "copy.file"
    res = nczarrfs("copy", str(src), f"file://{target}#mode=nczarr,file")
    assert res.returncode == 1
    assert repr(name.split("/")[-1]).strip("'") in res.stderr.decode(), res.stderr.decode()
    assert not target.exists()
    kept = tmp_path / "copy.zarr"
    res = nczarrfs("copy", str(src), f"file://{kept}#mode=zarr,file")
    assert res.returncode == 0, res.stderr.decode()
    assert zarr.open_array(str(kept / name), mode="r")[...].tolist() == [1, 2]

    # Why: the same NCZarr dataset under a legal name, renamed by hand, is refused as a whole.
    legal = tmp_path / "legal.zarr"
    parent, _, leaf = name.rpartition("/")
    placeholder = f"{parent}/placeholder" if parent else "placeholder"
    root = zarr.open_group(str(legal), mode="w", zarr_format=2)
    root.create_array(placeholder, shape=(2,), dtype="<i4",
                      attributes={"_ARRAY_DIMENSIONS": ["x"]})[:] = [1, 2]
    renamed = tmp_path / "renamed.file"
    assert nczarrfs("copy", str(legal), f"file://{renamed}#mode=nczarr,file").returncode == 0
    with netCDF4.Dataset(f"file://{renamed}#mode=nczarr,file") as nc:
        assert nc[placeholder][:].tolist() == [1, 2]
    os.rename(renamed / placeholder, renamed / (parent or ".") / leaf)
    for meta in renamed.rglob(".z*"):
        meta.write_text(meta.read_text().replace('"placeholder"', json.dumps(leaf)))
    with pytest.raises(OSError, match="[Ii]llegal"):
        netCDF4.Dataset(f"file://{renamed}#mode=nczarr,file")


@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("codec", ["gzip", "lz4"])
def test_copy_to_nczarr_uses_codecs_netcdf_has(nczarrfs, tmp_path, codec, zarr_format):
    """netcdf-c has no gzip or lz4 filter: a copy to NCZarr stores such chunks as zlib and as
    blosc-lz4, which it reads."""
    import numcodecs

    if zarr_format == 2:
        compressor = {"gzip": numcodecs.GZip(level=4), "lz4": numcodecs.LZ4()}[codec]
    else:
        from zarr.codecs import GzipCodec
        from zarr.codecs.numcodecs import LZ4
        compressor = {"gzip": GzipCodec(level=4), "lz4": LZ4()}[codec]
    src = tmp_path / "src.zarr"
    values = np.arange(60, dtype="<i4").reshape(6, 10)
    root = zarr.open_group(str(src), mode="w", zarr_format=zarr_format)
    attrs = {"_ARRAY_DIMENSIONS": ["y", "x"]} if zarr_format == 2 else {}
    names = {"dimension_names": ["y", "x"]} if zarr_format == 3 else {}
    root.create_array("v", shape=values.shape, chunks=(3, 5), dtype="<i4",
                      compressors=compressor, attributes=attrs, **names)[...] = values
    mode = "zarr" if zarr_format == 2 else "zarr,v3"
    with pytest.raises((OSError, RuntimeError)):
        with netCDF4.Dataset(f"file://{src}#mode={mode},file") as nc:
            nc["v"][...]
    target = tmp_path / "copy.file"
    res = nczarrfs("copy", str(src), f"file://{target}#mode=nczarr,file")
    assert res.returncode == 0, res.stderr.decode()
    with netCDF4.Dataset(f"file://{target}#mode=nczarr,file") as nc:
        assert np.array_equal(nc["v"][...], values)


@pytest.mark.parametrize("codec", ["BZ2", "Zlib", "Zstd", "LZ4", "Blosc"])
def test_copy_to_nczarr_writes_default_codec_parameters(nczarrfs, tmp_path, codec):
    """zarr-python 3 writes a numcodecs codec built with its defaults with an empty
    configuration; the NCZarr copy must name the parameters (netcdf-c 4.10.1 crashes on
    `{"id": "bz2"}`), so netCDF4-python, in a process of its own, reads the values."""
    import subprocess
    import sys

    import numcodecs.zarr3

    src = tmp_path / "src.zarr"
    values = np.arange(60, dtype="<i4").reshape(6, 10)
    root = zarr.open_group(str(src), mode="w", zarr_format=3)
    root.create_array("v", shape=values.shape, chunks=(3, 5), dtype="<i4",
                      compressors=[getattr(numcodecs.zarr3, codec)()],
                      dimension_names=["y", "x"])[...] = values
    target = tmp_path / "copy.file"
    res = nczarrfs("copy", str(src), f"file://{target}#mode=nczarr,file")
    assert res.returncode == 0, res.stderr.decode()
    read = (f"import netCDF4\nwith netCDF4.Dataset('file://{target}#mode=nczarr,file') as nc:"
            "\n    print(nc['v'][...].ravel().tolist())")
    out = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True,
                         env={**os.environ, "HDF5_PLUGIN_PATH": PLUGINS})
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.strip() == str(values.ravel().tolist())


def _xarray_store(path: str, zarr_format: int) -> None:
    """An xarray store holding an int without a `_FillValue` whose values include 0, an int
    with a `_FillValue` and a masked value, a float with NaN, a packed int16 with a
    `_FillValue` and a masked value, and a time coordinate starting at its epoch (0)."""
    import pandas as pd
    import xarray as xr

    ds = xr.Dataset(
        {
            "count": (("x",), np.array([0, 1, 2, 3], dtype="i4")),
            "masked": (("x",), np.array([0, -999, 2, 3], dtype="i2")),
            "real": (("x",), np.array([0.0, np.nan, 2.5, 0.0])),
            "packed": (("x",), np.array([np.nan, 0.5, 0.25, 1.0], dtype="f4")),
        },
        coords={"x": [0, 1, 2, 3], "time": ("x", pd.date_range("2000-01-01", periods=4))},
    )
    ds["masked"].attrs["_FillValue"] = -999
    ds["packed"].encoding = {"dtype": "i2", "scale_factor": 0.01, "add_offset": 1.0,
                             "_FillValue": -999}
    ds.to_zarr(path, zarr_format=zarr_format, mode="w", consolidated=False)


@pytest.mark.parametrize("mode", ["zarr", "zarr,v3", "nczarr"])
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_xarray_reads_a_copy_as_it_reads_its_source(nczarrfs, tmp_path, zarr_format, mode):
    """xarray takes the missing-value marker from a Zarr v2 `fill_value` but from a Zarr v3
    `_FillValue` attribute: a copy between the versions must keep what xarray masks (and
    nothing else), and zarr-python must read the same stored values."""
    import xarray as xr

    src, dst = str(tmp_path / "src.zarr"), str(tmp_path / "dst.zarr")
    _xarray_store(src, zarr_format)
    res = nczarrfs("copy", f"file://{src}#mode=zarr,file", dst, "-k", mode)
    assert res.returncode == 0, res.stderr.decode()
    want = xr.open_zarr(src, consolidated=False).load()
    got = xr.open_zarr(dst, consolidated=False).load()
    for name in want.variables:
        assert got[name].dtype == want[name].dtype, name
        np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)
    stored = dict(zarr.open_group(src, mode="r").arrays())
    for name, array in zarr.open_group(dst, mode="r").arrays():
        np.testing.assert_array_equal(array[...], stored[name][...], err_msg=name)


def _text_or_values(values: np.ndarray) -> np.ndarray:
    """Strings as text, whether xarray shows them as `str` or as fixed-width bytes."""
    if values.dtype.kind in "SOUT":
        return np.array([v.decode() if isinstance(v, bytes) else v for v in values.flat],
                        dtype=object).reshape(values.shape)
    return values


def test_xarray_reads_a_zarr_v2_copy_of_variables_without_fill_value_unmasked(
    nczarrfs, tmp_path
):
    """A netCDF variable without `_FillValue` masks nothing in netCDF readers (xarray's
    netcdf4 engine shows netCDF's default fills, and an empty string, as data). xarray takes a
    Zarr v2 `fill_value` as `_FillValue`, so a copy to pure Zarr v2 must not write the
    default fill there, and must still store it where the source reads it (an unwritten
    chunk): xarray's zarr engine reads the copy as the netcdf4 engine reads the source, and
    zarr-python reads netCDF4-python's values."""
    import xarray as xr

    src, dst = str(tmp_path / "src.file"), str(tmp_path / "dst.zarr")
    url = f"file://{src}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as nc:
        nc.createDimension("x", 6)
        s = nc.createVariable("s", str, ("x",), chunksizes=(2,))
        s[:4] = np.array(["", "a", "bc", ""], dtype=object)
        for name, dtype, value in [("i", "i4", -2147483647), ("f", "f4", 9.96921e36),
                                   ("u", "u1", 255), ("b", "i1", -127), ("z", "f8", 0.0)]:
            v = nc.createVariable(name, dtype, ("x",), chunksizes=(2,))
            v[:4] = np.array([1, value, 0, 3], dtype=dtype)
        masked = nc.createVariable("m", "i2", ("x",), chunksizes=(2,), fill_value=-5)
        masked[:4] = [1, -5, 0, 3]
    res = nczarrfs("copy", "-k", "zarr", src, dst)
    assert res.returncode == 0, res.stderr.decode()
    with xr.open_dataset(url, engine="netcdf4") as want:
        want = want.load()
    got = xr.open_zarr(dst, consolidated=False).load()
    for name in want.variables:
        np.testing.assert_array_equal(_text_or_values(got[name].values),
                                      _text_or_values(want[name].values), err_msg=name)
    stored = zarr.open_group(dst, mode="r")
    with netCDF4.Dataset(url) as nc:
        nc.set_auto_mask(False)
        for name, v in nc.variables.items():
            np.testing.assert_array_equal(_text_or_values(stored[name][...]),
                                          _text_or_values(v[...]), err_msg=name)
    assert stored["m"].fill_value == -5


@pytest.mark.parametrize("mode", ["zarr", "zarr,v3", "nczarr"])
@pytest.mark.parametrize("zarr_format", [2, 3])
def test_xarray_reads_bool_and_float16_back_from_a_copy(nczarrfs, tmp_path, zarr_format, mode):
    """xarray `bool` and `float16` variables: a pure Zarr copy keeps both types; NCZarr, for
    netCDF readers, which have neither, marks the `ubyte` values `dtype = "bool"` as xarray
    marks its booleans in netCDF (so xarray's netcdf4 engine reads `bool` back, as from
    xarray's own `to_netcdf`), and stores float16 as float with a warning."""
    import xarray as xr

    src, dst = str(tmp_path / "src.zarr"), str(tmp_path / "dst")
    source = xr.Dataset({"flag": ("x", np.array([True, False, True])),
                         "half": ("x", np.array([0.5, 1.5, -2.0], dtype="f2"))})
    source.to_zarr(src, zarr_format=zarr_format, mode="w", consolidated=False)
    res = nczarrfs("copy", f"file://{src}#mode=zarr,file", dst, "-k", mode)
    assert res.returncode == 0, res.stderr.decode()
    want = xr.open_zarr(src, consolidated=False).load()
    if mode == "nczarr":
        nc_path = str(tmp_path / "xarray.nc")
        source[["flag"]].to_netcdf(nc_path, engine="netcdf4")
        with xr.open_dataset(nc_path, engine="netcdf4") as own:
            assert own["flag"].dtype == bool
        with xr.open_dataset(f"file://{dst}#mode=nczarr,file", engine="netcdf4") as got:
            got = got.load()
        assert got["half"].dtype == np.float32
        assert b"half: float16 is stored as float" in res.stderr
    else:
        got = xr.open_zarr(dst, consolidated=False).load()
        assert got["half"].dtype == np.float16
    assert got["flag"].dtype == bool
    for name in want.variables:
        np.testing.assert_array_equal(got[name].values, want[name].values, err_msg=name)


@pytest.mark.parametrize("command", ["copy", "gen"])
@pytest.mark.parametrize("mode", ["zarr", "zarr,v3"])
def test_a_shadowed_dimension_pure_zarr_cannot_name_is_refused_as_such(
    nczarrfs, tmp_path, command, mode
):
    """`/g/v` uses the root's `d` (3) while `/g/w` uses `/g`'s own `d` (2): a valid netCDF-4
    dataset (netCDF4-python opens it), which pure Zarr, naming dimensions by plain name,
    cannot hold. The refusal must say so, naming both dimensions, and write nothing (not
    read as damage of the source, nor a store made that no reader opens)."""
    cdl = tmp_path / "s.cdl"
    cdl.write_text("netcdf s {\ndimensions:\n  d = 3 ;\ngroup: g {\n  dimensions:\n    d = 2 ;\n"
                   "  variables:\n    int v(/d) ;\n    int w(d) ;\n  data:\n    v = 1, 2, 3 ;\n"
                   "    w = 4, 5 ;\n  }\n}\n")
    src = tmp_path / "s.file"
    made = nczarrfs("gen", "-o", str(src), str(cdl))
    assert made.returncode == 0, made.stderr.decode()
    refs = json.loads((src / "g" / "v" / ".zattrs").read_text())["_nczarr_array"]
    assert refs["dimension_references"] == ["/d"]
    # (netCDF4-python looks `v`'s dimension up by its plain name, and finds `/g/d`.)
    with netCDF4.Dataset(f"file://{src}#mode=nczarr,file") as nc:
        assert nc["g/w"][:].tolist() == [4, 5]
        assert len(nc.dimensions["d"]) == 3 and len(nc["g"].dimensions["d"]) == 2
    dst = tmp_path / "t.zarr"
    if command == "copy":
        res = nczarrfs("copy", "-k", mode, str(src), str(dst))
    else:
        res = nczarrfs("gen", "-k", mode, "-o", str(dst), str(cdl))
    err = res.stderr.decode()
    assert res.returncode == 1, err
    assert "pure Zarr cannot represent two dimensions of the same name" in err, err
    assert "/d (3, used by /g/v)" in err and "/g/d (2, used by /g/w)" in err, err
    assert "invalid metadata" not in err, err
    assert not dst.exists()


@pytest.mark.parametrize("fill", ["dj", "abcd"])
def test_netcdf_c_pure_zarr_string_fill_is_its_text_and_copies_consistently(
    nczarrfs, tmp_path, fill
):
    """netcdf-c's `mode=zarr` writes a string variable's fill as its plain text, as
    `fill_value` and as the `_FillValue` attribute alike, and reads unwritten chunks as that
    text; zarr-python would take `fill_value` for base64 ("abcd" is valid base64). Read as
    netCDF4-python reads it, and copied to pure Zarr so that zarr-python reads the same."""
    src = tmp_path / "s.file"
    with netCDF4.Dataset(f"file://{src}#mode=zarr,file", "w") as nc:
        nc.createDimension("x", 4)
        v = nc.createVariable("s", str, ("x",), chunksizes=(2,), fill_value=fill)
        v[0] = "a"
    stored = json.loads((src / "s" / ".zarray").read_text())["fill_value"]
    assert stored == fill
    with netCDF4.Dataset(f"file://{src}#mode=zarr,file") as nc:
        expected = [str(x) for x in nc["s"][:]]
    assert expected == ["a", fill, fill, fill]

    def values(path):
        out = tmp_path / "s.npy"
        res = nczarrfs("get", str(path), "s", "--npy", "-o", str(out))
        assert res.returncode == 0, res.stderr.decode(errors="replace")
        return [x.decode() for x in np.load(out)]

    assert values(src) == expected
    dump = nczarrfs("dump", str(src))
    assert dump.returncode == 0, dump.stderr
    assert b's = "a", _, _, _ ;' in dump.stdout, dump.stdout

    for mode in ["zarr", "nczarr"]:
        dst = tmp_path / f"{mode}.file"
        res = nczarrfs("copy", "-k", mode, str(src), str(dst))
        assert res.returncode == 0, res.stderr.decode(errors="replace")
        assert values(dst) == expected, mode
        attr = json.loads((dst / "s" / ".zattrs").read_text())["_FillValue"]
        assert attr == fill, mode
    # Pure Zarr holds the fill in base64, as zarr-python reads it.
    copy = zarr.open_group(str(tmp_path / "zarr.file"), mode="r")["s"]
    assert copy.fill_value == fill.encode()
    assert [x.decode() for x in copy[...]] == expected
    # NCZarr holds it as text, as netcdf-c reads it.
    with netCDF4.Dataset(f"file://{tmp_path / 'nczarr.file'}#mode=nczarr,file") as nc:
        assert [str(x) for x in nc["s"][:]] == expected
        assert nc["s"]._FillValue == fill


def test_netcdf_c_writes_char_bytes_raw_which_zarr_python_cannot_open(tmp_path):
    """The oracle behind refusing char text that is not UTF-8 in pure Zarr: netcdf-c's own
    `mode=zarr` writes such a `_FillValue` as the raw byte, and zarr-python fails on it."""
    src = tmp_path / "c.file"
    with netCDF4.Dataset(f"file://{src}#mode=zarr,file", "w") as nc:
        nc.createDimension("x", 2)
        nc.createVariable("c", "S1", ("x",), fill_value=b"\xff")
    assert b'"_FillValue": "\xff"' in (src / "c" / ".zattrs").read_bytes()
    with pytest.raises(UnicodeDecodeError):
        zarr.open_group(str(src), mode="r")["c"]


@pytest.mark.parametrize("command", ["copy", "gen"])
@pytest.mark.parametrize("mode", ["zarr", "zarr,v3"])
def test_char_text_that_is_not_utf8_is_refused_in_pure_zarr(nczarrfs, tmp_path, command, mode):
    """`c:_FillValue = "\\377"` (ncgen takes it; netcdf-c stores the byte): NCZarr keeps it, as
    netCDF4-python reads back; pure Zarr cannot hold it as JSON text zarr-python reads, so
    the copy or gen is refused, naming the attribute, and writes nothing."""
    cdl = tmp_path / "r.cdl"
    cdl.write_text('netcdf r {\ndimensions:\n  x = 2 ;\nvariables:\n  char c(x) ;\n'
                   '    c:_FillValue = "\\377" ;\n    c:u = "caf\\303\\251" ;\ndata:\n'
                   '  c = "a" ;\n}\n')
    src = tmp_path / "r.file"
    made = nczarrfs("gen", "-o", str(src), str(cdl))
    assert made.returncode == 0, made.stderr.decode()
    with netCDF4.Dataset(f"file://{src}#mode=nczarr,file") as nc:
        nc.set_auto_chartostring(False)
        nc.set_auto_mask(False)
        assert nc["c"][:].tolist() == [b"a", b"\xff"]
    dst = tmp_path / "t.zarr"
    if command == "copy":
        res = nczarrfs("copy", "-k", mode, str(src), str(dst))
    else:
        res = nczarrfs("gen", "-k", mode, "-o", str(dst), str(cdl))
    err = res.stderr.decode()
    assert res.returncode == 1, err
    assert ('attribute "_FillValue" of variable /c in pure Zarr: its text is not UTF-8 '
            "(byte 0xFF at offset 0)") in err, err
    assert not dst.exists()


def test_netcdf_c_writes_no_zarr_v3(tmp_path):
    """netcdf-c 4.10.1's `mode=nczarr,v3` writes Zarr v2 (`.zgroup`, no `zarr.json`): there is
    no netcdf-c spelling of char bytes in NCZarr on Zarr v3 to follow."""
    src = tmp_path / "c.file"
    with netCDF4.Dataset(f"file://{src}#mode=nczarr,v3,file", "w") as nc:
        nc.createDimension("x", 2)
        nc.createVariable("c", "S1", ("x",)).setncattr("w", b"a\xffb")
    assert (src / ".zgroup").exists()
    assert not (src / "zarr.json").exists()
    assert b'"w": "a\xffb"' in (src / "c" / ".zattrs").read_bytes()


@pytest.mark.parametrize("command", ["copy", "gen"])
def test_char_text_that_is_not_utf8_is_refused_in_nczarr_v3(nczarrfs, tmp_path, command):
    """NCZarr on Zarr v3 is read by zarr-python 3 (netcdf-c reads no Zarr v3), which fails on a
    `zarr.json` that is not UTF-8: char text that is not is refused, naming the attribute, and
    nothing is written. A char `_FillValue` of such a byte is the array's number `fill_value`,
    which zarr-python reads."""
    cdl = tmp_path / "r.cdl"
    cdl.write_text('netcdf r {\ndimensions:\n  x = 2 ;\nvariables:\n  char c(x) ;\n'
                   '    c:_FillValue = "\\377" ;\n    c:u = "caf\\303\\251" ;\n'
                   '    c:w = "a\\377b" ;\ndata:\n  c = "a" ;\n}\n')
    src = tmp_path / "r.file"
    made = nczarrfs("gen", "-o", str(src), str(cdl))
    assert made.returncode == 0, made.stderr.decode()
    dst = tmp_path / "t.zarr"
    if command == "copy":
        res = nczarrfs("copy", "-k", "nczarr,v3", str(src), str(dst))
    else:
        res = nczarrfs("gen", "-k", "nczarr,v3", "-o", str(dst), str(cdl))
    err = res.stderr.decode()
    assert res.returncode == 1, err
    assert ('attribute "w" of variable /c in NCZarr on Zarr v3: its text is not UTF-8 '
            "(byte 0xFF at offset 1)") in err, err
    assert not dst.exists()

    cdl.write_text(cdl.read_text().replace('    c:w = "a\\377b" ;\n', ""))
    made = nczarrfs("gen", "-k", "nczarr,v3", "-o", str(dst), str(cdl))
    assert made.returncode == 0, made.stderr.decode()
    c = zarr.open_group(str(dst), mode="r")["c"]
    assert c.fill_value == 255
    assert c.attrs["u"] == "café"
    assert c[:].tolist() == [ord("a"), 255]
