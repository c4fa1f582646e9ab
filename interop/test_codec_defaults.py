"""Codec parameters a configuration leaves out or spells unusually, against the tool whose
reading decides what they mean: zarr-python 3 for a Zarr v3 `zarr.json` that `copy` turns
into a Zarr v2 chain, netcdf-c 4.10.1 (netCDF4-python and its libnetcdf through ctypes) for
the blosc `_Filter` `gen` turns into a codec and for the parameters `dump -s` reports.
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import subprocess
import sys
import warnings

import netCDF4
import numcodecs
import numpy as np
import pytest
import zarr

PLUGINS = os.path.join(os.path.dirname(netCDF4.__file__), "plugins")
SHUFFLES = {"noshuffle": 0, "shuffle": 1, "bitshuffle": 2}


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("HDF5_PLUGIN_PATH", PLUGINS)
    warnings.filterwarnings("ignore", module="zarr")
    warnings.filterwarnings("ignore", module="numcodecs")


def _zarr_python_numcodecs(codec) -> dict:
    """The numcodecs configuration zarr-python 3 compresses with for one of its opened v3
    codecs (its `_gzip_codec`, `_zstd_codec`, `_blosc_codec` are built from these)."""
    d = codec.to_dict()
    cfg = d["configuration"]
    if d["name"] == "gzip":
        return {"id": "gzip", "level": cfg["level"]}
    if d["name"] == "zstd":
        return {"id": "zstd", "level": cfg["level"], "checksum": cfg["checksum"]}
    assert d["name"] == "blosc", d
    return {"id": "blosc", "cname": cfg["cname"], "clevel": cfg["clevel"],
            "shuffle": SHUFFLES[cfg["shuffle"]], "blocksize": cfg["blocksize"],
            "typesize": cfg["typesize"]}


# (dtype, the v3 codec as zarr.json holds it: members left out, or null where zarr-python
# takes null for "from the data type")
V3_CODECS = [
    ("<i4", {"name": "gzip", "configuration": {}}),
    ("<f8", {"name": "zstd", "configuration": {}}),
    ("<i4", {"name": "blosc", "configuration": {}}),
    ("|u1", {"name": "blosc", "configuration": {}}),
    ("|u1", {"name": "blosc", "configuration": {"cname": "lz4", "shuffle": None}}),
    ("<i2", {"name": "blosc", "configuration": {"clevel": 2, "typesize": 2}}),
]


@pytest.mark.parametrize("mode", ["nczarr", "zarr"])
@pytest.mark.parametrize("dtype, codec", V3_CODECS, ids=[f"{d}-{json.dumps(c)}"
                                                          for d, c in V3_CODECS])
def test_copy_from_zarr_v3_compresses_as_zarr_python(nczarrfs, tmp_path, mode, dtype, codec):
    """zarr-python 3.1.6 fills what a v3 gzip, zstd or blosc configuration leaves out with
    its own defaults (gzip 5, blosc zstd, a shuffle by the item size), not numcodecs'. A copy
    to Zarr v2 must compress each chunk to the bytes zarr-python's codec makes of it."""
    src = tmp_path / "s.zarr"
    values = (np.arange(300) % 11).astype(dtype)
    root = zarr.open_group(str(src), mode="w", zarr_format=3)
    # Written with the codec (decoding needs none of its parameters), then edited.
    compressor = {"gzip": zarr.codecs.GzipCodec, "zstd": zarr.codecs.ZstdCodec,
                  "blosc": zarr.codecs.BloscCodec}[codec["name"]]()
    root.create_array("v", shape=values.shape, chunks=(300,), dtype=dtype,
                      compressors=compressor, dimension_names=["x"])[:] = values
    meta_path = src / "v" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    meta["codecs"] = [c for c in meta["codecs"] if c["name"] == "bytes"] + [codec]
    meta_path.write_text(json.dumps(meta))
    # The oracle: what zarr-python opens the edited array with, and reads from it.
    opened = zarr.open_array(str(src / "v"), mode="r")
    want = _zarr_python_numcodecs(opened.compressors[0])
    assert opened[:].tolist() == values.tolist()
    target = tmp_path / "t"
    res = nczarrfs("copy", "-k", mode, str(src), str(target))
    assert res.returncode == 0, res.stderr.decode()
    zarray = json.loads((target / "v" / ".zarray").read_text())
    ours = zarray["compressor"]
    for key in ("level", "cname", "clevel", "blocksize"):
        if key in want:
            assert ours[key] == want[key], (key, ours, want)
    if mode == "nczarr" and want["id"] == "gzip":
        # netcdf-c has no gzip: NCZarr gets zlib, at the same level.
        assert ours["id"] == "zlib"
    else:
        # numcodecs, as zarr-python 2 and 3 run it on a v2 chunk, compresses the chunk's
        # values to the bytes zarr-python's v3 codec makes.
        chunk = np.frombuffer(values.tobytes(), dtype=zarray["dtype"])
        assert numcodecs.get_codec(dict(ours)).encode(chunk) == \
            numcodecs.get_codec(dict(want)).encode(chunk)
    read = zarr.open_array(str(target / "v"), mode="r")[:]
    assert read.tolist() == values.tolist()
    if mode == "nczarr":
        assert ours.get("shuffle", 0) in (0, 1, 2), "netcdf-c compresses with 0, 1 or 2 only"
        script = (f"import netCDF4\nwith netCDF4.Dataset('file://{target}#mode=nczarr,file') "
                  f"as nc:\n    print(nc['v'][...].tolist())")
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=60)
        assert out.returncode == 0, out.stderr[-500:]
        assert json.loads(out.stdout) == values.tolist()


def _libnetcdf():
    found = glob.glob(os.path.join(os.path.dirname(netCDF4.__file__), "..", "netcdf4.libs",
                                   "libnetcdf*"))
    assert found
    return ctypes.CDLL(found[0])


def _netcdf_c_blosc(path, params: list[int]) -> dict:
    """The compressor netcdf-c writes into .zarray for an NCZarr variable given these blosc
    filter parameters (as ncgen gives a `_Filter`'s), in a process of its own."""
    script = f"""
import ctypes, glob, os, netCDF4, numpy as np
lib = ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(netCDF4.__file__), "..",
                                         "netcdf4.libs", "libnetcdf*"))[0])
with netCDF4.Dataset("file://{path}#mode=nczarr,file", "w") as nc:
    nc.createDimension("x", 64)
    v = nc.createVariable("v", "i4", ("x",), chunksizes=(64,))
    p = (ctypes.c_uint * {len(params)})(*{params!r})
    assert lib.nc_def_var_filter(nc._grpid, v._varid, 32001, {len(params)}, p) == 0
    v[:] = np.arange(64) % 5
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr[-500:]
    return json.loads((path / "v" / ".zarray").read_text())["compressor"]


@pytest.mark.parametrize("params", [[0, 0, 0, 1024, 5, 1, 1], [0, 0, 0, 0, 3, 2, 5],
                                    [2, 2, 4, 256, 7, 1, 4]])
def test_gen_blosc_filter_gives_netcdf_c_s_codec(nczarrfs, tmp_path, params):
    """The fourth blosc parameter is the codec's blocksize, kept as netcdf-c keeps it."""
    want = _netcdf_c_blosc(tmp_path / "theirs.file", params)
    cdl = tmp_path / "b.cdl"
    cdl.write_text("netcdf b {\ndimensions: x = 64;\nvariables: int v(x);\n"
                   f'v:_ChunkSizes = 64; v:_Filter = "32001,{",".join(map(str, params))}";\n'
                   "data: v = " + ", ".join(str(i % 5) for i in range(64)) + ";\n}\n")
    target = tmp_path / "ours.file"
    res = nczarrfs("gen", "-o", f"file://{target}#mode=nczarr,file", str(cdl))
    assert res.returncode == 0, res.stderr.decode()
    ours = json.loads((target / "v" / ".zarray").read_text())["compressor"]
    assert list(ours.items()) == list(want.items())


def test_gen_refuses_a_blosc_filter_netcdf_c_refuses(nczarrfs, tmp_path):
    """netcdf-c defines the filter, then fails the variable's first write."""
    script = f"""
import ctypes, glob, os, netCDF4, numpy as np
lib = ctypes.CDLL(glob.glob(os.path.join(os.path.dirname(netCDF4.__file__), "..",
                                         "netcdf4.libs", "libnetcdf*"))[0])
with netCDF4.Dataset("file://{tmp_path}/theirs.file#mode=nczarr,file", "w") as nc:
    nc.createDimension("x", 8)
    v = nc.createVariable("v", "i4", ("x",), chunksizes=(8,))
    p = (ctypes.c_uint * 5)(0, 0, 0, 0, 5)
    lib.nc_def_var_filter(nc._grpid, v._varid, 32001, 5, p)
    v[:] = np.arange(8)
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode != 0
    cdl = tmp_path / "b.cdl"
    cdl.write_text('netcdf b {\ndimensions: x = 8;\nvariables: int v(x);\n'
                   'v:_Filter = "32001,0,0,0,0,5";\n}\n')
    target = tmp_path / "ours.file"
    res = nczarrfs("gen", "-o", f"file://{target}#mode=nczarr,file", str(cdl))
    assert res.returncode == 1
    assert "variable v: " in res.stderr.decode() or "/v: " in res.stderr.decode(), \
        res.stderr.decode()
    assert not target.exists()


# Compressors as netcdf-c or a hand may have written them: numbers as floats, strings,
# booleans or negative numbers (numcodecs' blosc AUTOSHUFFLE, zarr-python's default, is -1).
ODD_CODECS = {
    "b1": {"id": "blosc", "clevel": 5.0, "blocksize": 0, "cname": "lz4", "shuffle": 1},
    "b2": {"id": "blosc", "clevel": 5.7, "blocksize": 64.0, "cname": "zstd", "shuffle": 2.0},
    "b3": {"id": "blosc", "clevel": "6", "blocksize": "128", "cname": "lz4", "shuffle": "1"},
    "b4": {"id": "blosc", "clevel": 5, "blocksize": 0, "cname": "lz4", "shuffle": -1},
    "b5": {"id": "blosc", "clevel": 5.7, "blocksize": 0, "cname": "lz4", "shuffle": True},
    "b6": {"id": "blosc", "clevel": 5, "blocksize": 16.5, "cname": "lz4", "shuffle": 1.0},
    "b7": {"id": "blosc", "clevel": False, "blocksize": True, "cname": "lz4", "shuffle": False},
    "b8": {"id": "blosc", "clevel": 5, "blocksize": "abc", "cname": "lz4", "shuffle": "-1"},
    "b9": {"id": "blosc", "clevel": 5, "blocksize": 64, "cname": "lz4", "shuffle": "true"},
    "b10": {"id": "blosc", "cname": "lz4", "shuffle": "bitshuffle", "blocksize": "x"},
    "b11": {"id": "blosc", "clevel": 5, "blocksize": 0, "cname": "lz4",
            "shuffle": -4294967297},
    "z1": {"id": "zstd", "level": 4.0},
    "z2": {"id": "zstd", "level": 4.9},
    "z3": {"id": "zstd", "level": 5.5},
    "z4": {"id": "zstd", "level": True},
    "z5": {"id": "zstd", "level": "abc"},
    "l1": {"id": "zlib", "level": 3.0},
    "l2": {"id": "zlib", "level": 7.0},
    "l3": {"id": "zlib", "level": False},
    "l4": {"id": "zlib", "level": "true"},
    "l5": {"id": "zlib", "level": " +4"},
    "l6": {"id": "zlib", "level": -0.5},
    "bz": {"id": "bz2", "level": 7.0},
    "bz2": {"id": "bz2", "level": 4.9},
    "bz3": {"id": "bz2", "level": True},
}


def _netcdf_c_filters(url, names) -> dict:
    """`id,param,...` of each variable's first filter, as netcdf-c's
    nc_inq_var_filter_info reports it."""
    lib = _libnetcdf()
    want = {}
    with netCDF4.Dataset(url) as nc:
        for name in names:
            v = nc[name]
            nf, ids = ctypes.c_size_t(), (ctypes.c_uint * 8)()
            assert lib.nc_inq_var_filter_ids(nc._grpid, v._varid, ctypes.byref(nf), ids) == 0
            np_, ps = ctypes.c_size_t(), (ctypes.c_uint * 16)()
            assert lib.nc_inq_var_filter_info(nc._grpid, v._varid, ids[0], ctypes.byref(np_),
                                              ps) == 0
            want[name] = ",".join(map(str, [ids[0], *ps[:np_.value]]))
    return want


def _dump_s_filters(nczarrfs, path) -> dict:
    res = nczarrfs("dump", "-s", "-h", "-F", str(path))
    assert res.returncode == 0, res.stderr.decode()
    return {line.strip().split(":")[0]: line.split('"')[1]
            for line in res.stdout.decode().splitlines() if ":_Filter = " in line}


def _nczarr_with_compressors(path, variables: dict) -> str:
    """An NCZarr store netCDF4-python makes, with `variables` (name: (dtype, compressor))
    whose .zarray compressors are then replaced; its URL."""
    url = f"file://{path}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as nc:
        nc.createDimension("x", 8)
        for name, (dtype, _) in variables.items():
            nc.createVariable(name, dtype, ("x",), chunksizes=(8,))
    for name, (_, codec) in variables.items():
        p = path / name / ".zarray"
        meta = json.loads(p.read_text())
        meta["compressor"], meta["filters"] = codec, None
        p.write_text(json.dumps(meta))
    return url


def test_dump_s_reads_odd_parameters_as_netcdf_c(nczarrfs, tmp_path):
    """netcdf-c converts a parameter to an integer with NCJcvt (a float truncated, a boolean
    0 or 1, a string by sscanf, which leaves the integer as it was when it reads nothing)
    and keeps it as an unsigned int: `dump -s` reports what netcdf-c's
    nc_inq_var_filter_info does for it."""
    path = tmp_path / "f.file"
    url = _nczarr_with_compressors(path, {n: ("i4", c) for n, c in ODD_CODECS.items()})
    assert _dump_s_filters(nczarrfs, path) == _netcdf_c_filters(url, ODD_CODECS)


def test_dump_s_shows_zarr_v3_defaults_as_zarr_python_fills_them(nczarrfs, tmp_path):
    """A v3 blosc or zstd leaving members out is shown with zarr-python 3.1.6's defaults:
    the parameters netcdf-c reports for an NCZarr store compressing as zarr-python opens
    the v3 array (netcdf-c, which reads no v3, is the oracle through that store)."""
    src = tmp_path / "s.zarr"
    root = zarr.open_group(str(src), mode="w", zarr_format=3)
    wanted = {}
    for i, (dtype, codec) in enumerate(V3_CODECS):
        if codec["name"] == "gzip":
            continue  # netcdf-c has no filter for gzip
        name = f"v{i}"
        root.create_array(name, shape=(8,), chunks=(8,), dtype=dtype, compressors=None,
                          dimension_names=["x"])
        meta_path = src / name / "zarr.json"
        meta = json.loads(meta_path.read_text())
        meta["codecs"] = [c for c in meta["codecs"] if c["name"] == "bytes"] + [codec]
        meta_path.write_text(json.dumps(meta))
        want = _zarr_python_numcodecs(zarr.open_array(str(src / name), mode="r")
                                      .compressors[0])
        want.pop("typesize", None)
        want.pop("checksum", None)
        wanted[name] = (np.dtype(dtype).str.lstrip("<|"), want)
    url = _nczarr_with_compressors(tmp_path / "t.file", wanted)
    assert _dump_s_filters(nczarrfs, src) == _netcdf_c_filters(url, wanted)
