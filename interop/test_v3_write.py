"""What nczarrfs writes as Zarr v3 (`gen` and `copy` with `mode=...,v3`), checked by others.

- Randomized twin datasets (netCDF4-python writes an NCZarr store and an HDF5 twin) are copied
  to NCZarr on Zarr v3 and back to v2: the dumps of the original, the v3 copy and the v2 copy
  are identical (types, attributes, groups, unlimited dimensions) and equal to Debian's ncdump
  of the HDF5 twin, netCDF4-python reads the v2 copy as the twin, and zarr-python 3 and
  xarray read the v3 copy with the HDF5 twin's values (as read by netCDF4-python) and its
  dimension names.
- Every CDL fixture generated as v3 dumps as the v2 generation does, and zarr-python reads it
  with the values and dimension names netCDF4-python reads from the v2 generation.
- Variable-length strings longer than netcdf-c's 128-byte default, written by zarr-python 3
  (plain and sharded), come back whole.
- `copy --shards` writes shards that zarr-python 3 reads with the shard and chunk shapes asked
  for and the HDF5 twin's values; the copy dumps as the original and goes back to v2 unchanged.
- A copy of zarr-python's sharded arrays keeps their shard layout (index at the start or the
  end, with or without `crc32c`, inner chunks and codecs), also when `--codec` or `-d` chooses
  the inner chain; zarr-python reads the source's values from it.
"""

from __future__ import annotations

import glob
import io
import json
import os
import subprocess
import warnings
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr

import twins
from conftest import REPO, SEED

COUNT = 24
FIXTURES = Path(os.environ.get("NCZARRFS_SHARED") or REPO.parent / "shared") / "fixtures"
PLUGINS = os.path.join(os.path.dirname(netCDF4.__file__), "plugins")


@pytest.fixture(autouse=True)
def _quiet_and_plugins(monkeypatch):
    monkeypatch.setenv("HDF5_PLUGIN_PATH", PLUGINS)
    # zarr-python warns about numcodecs codecs and string dtypes outside the v3 core spec.
    warnings.filterwarnings("ignore", module="zarr")
    warnings.filterwarnings("ignore", module="numcodecs")


def _ok(res, what: str) -> bytes:
    assert res.returncode == 0, f"{what}: {res.stderr.decode(errors='replace')}"
    return res.stdout


def _dump(nczarrfs, path, *extra: str) -> str:
    """The dump without its first line (which names the dataset after its path)."""
    out = _ok(nczarrfs("dump", *extra, str(path)), f"dump {path}").decode()
    return out.split("\n", 1)[1]


def _zarr_arrays(root: zarr.Group):
    for path, node in root.members(max_depth=None):
        if isinstance(node, zarr.Array):
            yield path, node


def _as_netcdf_values(array: np.ndarray, like: np.ndarray) -> np.ndarray:
    """zarr-python's view of a stored netCDF type as netCDF4-python shows it: char is uint8
    in Zarr v3 (`S1` in netCDF), strings are variable-length (objects in netCDF)."""
    if like.dtype.kind == "S":
        return array.astype(np.uint8).view("S1").reshape(array.shape)
    if like.dtype.kind == "O":
        return np.asarray([str(x) for x in array.flat], dtype=object).reshape(array.shape)
    return array


def _check_zarr_values(root: zarr.Group, hpath: str, what: str) -> list[zarr.Array]:
    """zarr-python reads every array of `root` with the values and dimension names of the
    HDF5 twin at `hpath`, as netCDF4-python reads them; returns the arrays."""
    arrays = []
    with netCDF4.Dataset(hpath) as nc:
        expected = dict(twins.walk_variables(nc))
        seen = set()
        for path, arr in _zarr_arrays(root):
            name = "/" + path
            var = expected[name]
            want = twins.read_values(var)
            got = _as_netcdf_values(np.asarray(arr[...]), want)
            assert twins.same_values(got.reshape(want.shape), want), f"{what}: {name}"
            assert tuple(arr.metadata.dimension_names or ()) == var.dimensions, name
            seen.add(name)
            arrays.append(arr)
        assert seen == set(expected), f"{what}: arrays {seen} != {set(expected)}"
    return arrays


@pytest.mark.parametrize("index", range(COUNT))
def test_twins_copied_to_v3_and_back(nczarrfs, tmp_path, index):
    seed = SEED + 7919 * (index + 1)
    print(f"seed {seed}")
    zpath, hpath, _ = twins.write_twins(str(tmp_path), f"tw{index}", seed)
    v3 = tmp_path / "v3.zarr"
    back = tmp_path / "back.file"
    _ok(nczarrfs("copy", zpath, str(v3), "-k", "nczarr,v3"), f"seed {seed}: copy to v3")
    assert (v3 / "zarr.json").exists() and not (v3 / ".zgroup").exists()
    _ok(nczarrfs("copy", str(v3), str(back), "-k", "nczarr,v2"), f"seed {seed}: copy back")
    original = _dump(nczarrfs, zpath)
    assert _dump(nczarrfs, v3) == original, f"seed {seed}: v3 dump differs"
    assert _dump(nczarrfs, back) == original, f"seed {seed}: v2 round trip differs"
    # The dumps are Debian's ncdump of the HDF5 twin (as in test_dump_oracle.py), and netcdf-c
    # reads the copy back as it reads the twin.
    reference = subprocess.run(["ncdump", hpath], capture_output=True, check=True).stdout
    assert original == reference.decode().split("\n", 1)[1], f"seed {seed}: dump is not ncdump's"
    assert twins.verify_twins(str(back), hpath) == [], f"seed {seed}: copy back read by netcdf-c"

    # zarr-python 3 and xarray see the HDF5 twin's values and dimension names.
    root = zarr.open_group(str(v3), mode="r")
    assert root.metadata.zarr_format == 3
    _check_zarr_values(root, hpath, f"seed {seed}")
    with netCDF4.Dataset(hpath) as nc:
        expected = dict(twins.walk_variables(nc))
        groups = [""] + [p for p, n in root.members(max_depth=None) if isinstance(n, zarr.Group)]
        for g in groups:
            ds = xr.open_zarr(
                str(v3), group=g or None, consolidated=False, decode_cf=False, chunks=None
            )
            for vname, xv in ds.variables.items():
                var = expected[f"/{g}/{vname}" if g else f"/{vname}"]
                assert xv.dims == var.dimensions, f"seed {seed}: xarray dims of {vname}"
                want = twins.read_values(var)
                got = _as_netcdf_values(np.asarray(xv.values), want)
                assert twins.same_values(got.reshape(want.shape), want), (
                    f"seed {seed}: xarray {g}/{vname}"
                )


CDLS = sorted(
    glob.glob(str(FIXTURES / "*" / "*.cdl")) + glob.glob(str(FIXTURES / "ncdump_refs/cdl/*.cdl"))
)


@pytest.mark.parametrize("cdl", CDLS, ids=[Path(c).stem for c in CDLS])
def test_gen_v3_dumps_like_v2_and_opens_in_zarr_python(nczarrfs, tmp_path, cdl):
    v2, v3 = tmp_path / "a.file", tmp_path / "a.zarr"
    if nczarrfs("gen", "-o", str(v2), cdl).returncode != 0:
        # A fixture that is not ncgen input (a unit program's listing, a template): ncgen
        # refuses it as well, v3 refuses it too and leaves nothing behind, as v2 did.
        ncgen = subprocess.run(["ncgen", "-k", "nc4", "-o", str(tmp_path / "ncgen.nc"), cdl],
                               capture_output=True, check=False)
        assert ncgen.returncode != 0, f"gen refuses {cdl}, which ncgen takes"
        assert nczarrfs("gen", "-k", "nczarr,v3", "-o", str(v3), cdl).returncode != 0
        assert not v2.exists() and not v3.exists()
        return
    _ok(nczarrfs("gen", "-k", "nczarr,v3", "-o", str(v3), cdl), "gen v3")
    a, b = nczarrfs("dump", str(v2)), nczarrfs("dump", str(v3))
    if a.returncode != 0:
        # A codec we cannot run (the fixtures' "noop"): the same error either way.
        assert b.returncode != 0 and b.stderr == a.stderr
        return
    assert _dump(nczarrfs, v3) == _dump(nczarrfs, v2)
    # zarr-python reads the v3 store with the values and dimension names netcdf-c reads from
    # the v2 one.
    root = zarr.open_group(str(v3), mode="r")
    _check_zarr_values(root, twins.nczarr_url(str(v2)), Path(cdl).name)


def test_pure_zarr_v3_opens_in_xarray_with_named_dims(nczarrfs, tmp_path):
    cdl = FIXTURES / "ncdump_refs/cdl/ref_tst_solar_1.cdl"
    out = tmp_path / "pure.zarr"
    _ok(nczarrfs("gen", "-k", "zarr,v3", "-o", str(out), str(cdl)), "gen")
    meta = (out / "zarr.json").read_text()
    assert "_nczarr" not in meta
    ds = xr.open_zarr(str(out), consolidated=False)
    for name, v in ds.variables.items():
        assert all(not d.startswith("dim_") for d in v.dims), name


@pytest.mark.parametrize("sharded", [False, True])
def test_long_vlen_strings_read_whole(nczarrfs, tmp_path, sharded):
    values = np.array(
        ["short", "é" * 200 + "|end", "x" * 129, "", "mid" * 50, "ok"], dtype=object
    )
    store = tmp_path / "s.zarr"
    root = zarr.open_group(str(store), mode="w", zarr_format=3)
    kwargs = {"shards": (6,)} if sharded else {}
    a = root.create_array(
        "s", shape=(6,), chunks=(2,), dtype=str, dimension_names=["n"], **kwargs
    )
    a[...] = values
    out = tmp_path / "s.npy"
    _ok(nczarrfs("get", str(store), "s", "--npy", "-o", str(out)), "get")
    got = np.load(io.BytesIO(out.read_bytes()), allow_pickle=False)
    text = [x.decode() if isinstance(x, bytes) else str(x) for x in got.flat]
    assert text == list(values)
    dump = _dump(nczarrfs, store)
    assert "é" * 200 + "|end" in dump


@pytest.mark.parametrize("index", range(COUNT // 3))
def test_twins_copied_to_sharded_v3(nczarrfs, tmp_path, index):
    """Every dimension is chunked in about quarters and sharded in about halves (rounded up
    to whole chunks), so most arrays have several shards, some a partial last one."""
    seed = SEED + 104729 * (index + 1)
    print(f"seed {seed}")
    zpath, hpath, _ = twins.write_twins(str(tmp_path), f"sh{index}", seed)
    with netCDF4.Dataset(hpath) as nc:
        # Full names: a plain name is the root group's dimension alone, as in nccopy.
        dims = {}

        def collect(g, path):
            for d in g.dimensions.values():
                dims[f"{path}/{d.name}"] = len(d)
            for name, sub in g.groups.items():
                collect(sub, f"{path}/{name}")

        collect(nc, "")
    chunks = ",".join(f"{d}/{max(1, n // 4)}" for d, n in sorted(dims.items()))
    spec = ",".join(f"{d}/{max(1, n // 2 + 1)}" for d, n in sorted(dims.items()))
    v3, back = tmp_path / "v3.zarr", tmp_path / "back.file"
    args = ["copy", zpath, str(v3), "-k", "nczarr,v3"]
    if dims:
        args += ["--chunks", chunks, "--shards", spec]
    _ok(nczarrfs(*args), f"seed {seed}: copy {spec}")
    original = _dump(nczarrfs, zpath)
    assert _dump(nczarrfs, v3) == original, f"seed {seed}: sharded dump differs"
    _ok(nczarrfs("copy", str(v3), str(back), "-k", "nczarr,v2"), f"seed {seed}: copy back")
    assert _dump(nczarrfs, back) == original, f"seed {seed}: v2 round trip differs"
    arrays = _check_zarr_values(zarr.open_group(str(v3), mode="r"), hpath, f"seed {seed}")
    sharded = [arr for arr in arrays if arr.shards is not None]
    for arr in sharded:
        assert all(s % c == 0 for s, c in zip(arr.shards, arr.chunks)), arr.path
    print(f"{len(sharded)} of {len(arrays)} arrays sharded")


def test_copy_shards_as_asked(nczarrfs, tmp_path):
    src = tmp_path / "src.file"
    values = np.arange(10 * 12, dtype="f8").reshape(10, 12) / 7
    with netCDF4.Dataset(f"file://{src}#mode=nczarr,file", "w") as nc:
        nc.createDimension("y", 10)
        nc.createDimension("x", 12)
        v = nc.createVariable("v", "f8", ("y", "x"), chunksizes=(2, 3), zlib=True)
        v[:] = values
        w = nc.createVariable("w", "i4", ("x",), chunksizes=(4,))
        w[:] = np.arange(12, dtype="i4")
    out = tmp_path / "out.zarr"
    _ok(nczarrfs("copy", str(src), str(out), "-k", "zarr,v3", "--shards", "v:4,6",
                 "--shards", "x/5"), "copy")
    root = zarr.open_group(str(out), mode="r")
    v, w = root["v"], root["w"]
    assert (v.shards, v.chunks) == ((4, 6), (2, 3))
    # x/5 is rounded up to whole chunks of w (4): 8.
    assert (w.shards, w.chunks) == ((8,), (4,))
    assert np.array_equal(v[...], values)
    assert np.array_equal(w[...], np.arange(12))
    # One object per shard: ceil(10/4) x ceil(12/6) and ceil(12/8).
    assert len([p for p in (out / "v" / "c").rglob("*") if p.is_file()]) == 3 * 2
    assert len([p for p in (out / "w" / "c").rglob("*") if p.is_file()]) == 2
    # A copy to v3 keeps the shards, unless the chunks change or --shards says otherwise.
    for extra, shards, chunks in [
        ([], (4, 6), (2, 3)),
        (["--shards", "v:8,12"], (8, 12), (2, 3)),
        (["--shards", "v:2,3"], None, (2, 3)),
        (["-c", "v:5,4"], None, (5, 4)),
    ]:
        again = tmp_path / f"again{len(extra)}{extra[-1] if extra else ''}.zarr"
        _ok(nczarrfs("copy", str(out), str(again), "-k", "zarr,v3", *extra), f"copy {extra}")
        a = zarr.open_array(str(again / "v"), mode="r")
        assert (a.shards, a.chunks) == (shards, chunks), extra
        assert np.array_equal(a[...], values), extra
    # What cannot be sharded is refused, naming why, and nothing is left behind.
    for args, message in [
        (["-k", "zarr,v2", "--shards", "v:4,6"], "Zarr v3 target"),
        (["-k", "zarr,v3", "--shards", "v:5,6"], "not a multiple of its chunk length 2"),
        (["-k", "zarr,v3", "--shards", "v:4"], "does not fit 2 dimension(s)"),
        (["-k", "zarr,v3", "--shards", "nope/4"], "no dimension named nope"),
    ]:
        bad = tmp_path / "bad.zarr"
        res = nczarrfs("copy", str(src), str(bad), *args)
        assert res.returncode != 0 and message in res.stderr.decode(), (args, res.stderr)
        assert not bad.exists()


@pytest.mark.parametrize("mode", ["nczarr,v3", "zarr,v3"])
@pytest.mark.parametrize("sharded", [False, True], ids=["chunks", "shards"])
def test_strings_are_variable_length(nczarrfs, tmp_path, mode, sharded):
    """netCDF strings become zarr-python's variable-length `string` data type (`vlen-utf8`,
    then the chain's compression), which zarr-python and xarray read as text; and `dump`
    of the copy prints what netCDF4-python's original prints."""
    src = tmp_path / "s.file"
    texts = np.array([["a", "bé", "", "a much longer value than the others"],
                      ["ü" * 40, "x", "tab\there", "z"]], dtype=object)
    with netCDF4.Dataset(f"file://{src}#mode=nczarr,file", "w") as nc:
        nc.createDimension("t", None)
        nc.createDimension("x", 4)
        v = nc.createVariable("s", str, ("t", "x"), chunksizes=(1, 2))
        v[0:2, :] = texts
        v.note = "strings"
    dst = tmp_path / "s.zarr"
    args = ["copy", "-k", mode, "--codec", "zstd:3", str(src), str(dst)]
    if sharded:
        args += ["--shards", "x/4"]
    _ok(nczarrfs(*args), "copy")
    meta = json.loads((dst / "s" / "zarr.json").read_text())
    assert meta["data_type"] == "string"
    assert meta["fill_value"] == ""
    chain = meta["codecs"][0]["configuration"]["codecs"] if sharded else meta["codecs"]
    assert [c["name"] for c in chain] == ["vlen-utf8", "zstd"], chain
    arr = zarr.open_group(str(dst), mode="r")["s"]
    assert [[str(x) for x in row] for row in arr[...]] == texts.tolist()
    with xr.open_zarr(str(dst), zarr_format=3, consolidated=False) as ds:
        assert [[str(x) for x in row] for row in ds["s"].values] == texts.tolist()
    if mode.startswith("nczarr"):
        assert _dump(nczarrfs, dst, "-n", "s") == _dump(nczarrfs, src)


@pytest.mark.parametrize("command", ["gen", "copy"])
def test_a_string_fill_value_leaves_pure_v3_open_in_xarray(nczarrfs, tmp_path, command):
    """xarray (2026.9, with zarr-python 3.1.6) fails to open a whole Zarr v3 store whose
    `string` array has a `_FillValue` attribute, and refuses to write one itself: the fill is
    the array's `fill_value` alone, and the values read as netCDF4-python reads the source
    (the element never written is the fill)."""
    src = tmp_path / "s.file"
    with netCDF4.Dataset(f"file://{src}#mode=nczarr,file", "w") as nc:
        nc.createDimension("x", 3)
        s = nc.createVariable("s", str, ("x",), fill_value="FV")
        s[0] = "a"
        s[2] = "c"
        nc.createVariable("i", "i4", ("x",))[:] = [1, 2, 3]
    with netCDF4.Dataset(f"file://{src}#mode=nczarr,file") as nc:
        nc.set_auto_mask(False)
        want = [str(x) for x in nc["s"][:]]
    assert want == ["a", "FV", "c"]
    dst = tmp_path / "s.zarr"
    if command == "copy":
        _ok(nczarrfs("copy", "-k", "zarr,v3", str(src), str(dst)), "copy")
    else:
        cdl = tmp_path / "s.cdl"
        cdl.write_text(_ok(nczarrfs("dump", str(src)), "dump").decode())
        _ok(nczarrfs("gen", "-k", "zarr,v3", "-o", str(dst), str(cdl)), "gen")
    meta = json.loads((dst / "s" / "zarr.json").read_text())
    assert "_FillValue" not in meta["attributes"], meta
    assert zarr.open_array(str(dst / "s"), mode="r").fill_value == "FV"
    with xr.open_zarr(str(dst), zarr_format=3, consolidated=False) as ds:
        assert [str(x) for x in ds["s"].values] == want
        assert ds["i"].values.tolist() == [1, 2, 3]


def test_sharded_variable_without_fill_keeps_chunks_of_zeros(nczarrfs, tmp_path):
    """A variable without a fill value (`_NoFill`) declares netCDF's default fill on Zarr v3,
    which requires one. An inner chunk of zeros is data, not fill: the shard must hold it,
    or zarr-python reads the default fill there."""
    src = tmp_path / "n.file"
    values = np.arange(24, dtype="u2").reshape(4, 6)
    values[1, :] = 0
    with netCDF4.Dataset(f"file://{src}#mode=nczarr,file", "w") as nc:
        nc.createDimension("y", 4)
        nc.createDimension("x", 6)
        nc.createVariable("v", "u2", ("y", "x"), chunksizes=(1, 6), fill_value=False)[:] = values
    dst = tmp_path / "n.zarr"
    _ok(nczarrfs("copy", "-k", "nczarr,v3", "--shards", "y/2", str(src), str(dst)), "copy")
    meta = json.loads((dst / "v" / "zarr.json").read_text())
    assert meta["fill_value"] == 65535 and meta["codecs"][0]["name"] == "sharding_indexed"
    assert np.array_equal(zarr.open_group(str(dst), mode="r")["v"][...], values)
    got = nczarrfs("get", str(dst), "v").stdout
    assert np.array_equal(np.frombuffer(got, dtype="=u2").reshape(4, 6), values)


@pytest.mark.parametrize("mode", ["zarr,v3", "nczarr,v3"])
def test_non_finite_float_attributes_stay_numbers(nczarrfs, tmp_path, mode):
    """zarr-python writes NaN and infinities in attributes as Python's `json` does (bare
    `NaN`, `Infinity`, `-Infinity`); a copy to pure Zarr v3 must give zarr-python the same
    floats back, and NCZarr on v3 (typed attributes) must dump them as doubles."""
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    attrs = {"nan": float("nan"), "inf": float("inf"), "vals": [1.5, float("-inf")]}
    root = zarr.open_group(str(src), mode="w", zarr_format=3)
    root.attrs.update(attrs)
    root.create_array("v", shape=(2,), dtype="f8", dimension_names=["x"]).attrs.update(attrs)
    _ok(nczarrfs("copy", str(src), str(dst), "-k", mode), "copy")
    assert _dump(nczarrfs, dst, "-h").count(":vals = 1.5, -Infinity ;") == 2
    if mode == "zarr,v3":
        copied = zarr.open_group(str(dst), mode="r")
        for got in (dict(copied.attrs), dict(copied["v"].attrs)):
            assert np.isnan(got["nan"]) and got["inf"] == np.inf
            assert got["vals"] == [1.5, -np.inf]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_bytes_that_are_not_utf8_refuse_a_copy_to_v3_strings(nczarrfs, tmp_path, zarr_format):
    """Zarr v3 strings (`vlen-utf8`) are UTF-8: a copy of zarr-python byte strings that are
    not must fail naming the variable, the value and the reason, and leave nothing."""
    src, dst = tmp_path / "src.zarr", tmp_path / "dst.zarr"
    root = zarr.open_group(str(src), mode="w", zarr_format=zarr_format)
    if zarr_format == 3:
        from zarr.core.dtype import VariableLengthBytes
        array = root.create_array("v", shape=(2,), dtype=VariableLengthBytes())
        array[...] = np.array([b"ok", b"\xff\x00"], dtype=object)
    else:
        root.create_array("v", shape=(2,), dtype="S7")[...] = [b"ok", b"\xff\x00"]
    res = nczarrfs("copy", str(src), str(dst), "-k", "zarr,v3")
    assert res.returncode != 0
    message = res.stderr.decode()
    last = message.strip().splitlines()[-1]
    assert "/v[1]" in last and "UTF-8" in last and "v3" in last, message
    assert not dst.exists()


@pytest.mark.parametrize("command", ["gen", "copy"])
@pytest.mark.parametrize("separator", [None, ".", "/"])
def test_v3_chunk_key_separator_as_asked(nczarrfs, tmp_path, command, separator):
    """Zarr v3's `default` chunk key encoding takes `.` or `/` (`/` when not asked for):
    `--dimension-separator` chooses it, and zarr-python reads the chunks under those keys."""
    values = np.arange(12, dtype="i4").reshape(3, 4)
    cdl = tmp_path / "s.cdl"
    cdl.write_text("netcdf s {\ndimensions:\n y = 3 ;\n x = 4 ;\nvariables:\n int v(y, x) ;\n"
                   "  v:_ChunkSizes = 1, 2 ;\ndata:\n v = "
                   + ", ".join(str(x) for x in values.flat) + " ;\n}\n")
    asked = [] if separator is None else ["--dimension-separator", separator]
    dst = tmp_path / "s.zarr"
    if command == "gen":
        _ok(nczarrfs("gen", "-k", "nczarr,v3", *asked, "-o", str(dst), str(cdl)), "gen")
    else:
        src = tmp_path / "s.file"
        _ok(nczarrfs("gen", "-o", str(src), str(cdl)), "gen")
        _ok(nczarrfs("copy", "-k", "nczarr,v3", *asked, str(src), str(dst)), "copy")
    sep = separator or "/"
    meta = json.loads((dst / "v" / "zarr.json").read_text())
    assert meta["chunk_key_encoding"] == {"name": "default", "configuration": {"separator": sep}}
    assert (dst / "v" / sep.join(["c", "2", "1"])).is_file()
    assert np.array_equal(zarr.open_group(str(dst), mode="r")["v"][...], values)
    got = _ok(nczarrfs("get", str(dst), "v"), "get")
    assert np.array_equal(np.frombuffer(got, dtype="=i4").reshape(3, 4), values)


def _zstd_configuration(codecs: list) -> dict:
    for c in codecs:
        if c["name"] == "zstd":
            return c["configuration"]
        if c["name"] == "sharding_indexed":
            return _zstd_configuration(c["configuration"]["codecs"])
    raise AssertionError(f"no zstd in {codecs}")


def test_a_zstd_checksum_is_kept(nczarrfs, tmp_path):
    """zarr-python's `ZstdCodec(checksum=True)` puts a checksum in every frame, and
    zarr-python refuses a damaged one. A copy to v3 (plain and sharded), a copy to v2, and
    `gen` of `dump -s` keep the flag, and zarr-python then refuses a damaged chunk of each."""
    from zarr.codecs import BytesCodec, ShardingCodec, ZstdCodec

    src = tmp_path / "src.zarr"
    root = zarr.open_group(str(src), mode="w", zarr_format=3)
    zstd = ZstdCodec(level=1, checksum=True)
    plain = root.create_array("plain", shape=(8,), chunks=(4,), dtype="<i4", fill_value=0,
                              dimension_names=["x"], compressors=[zstd])
    plain[...] = np.arange(8)
    sharded = root.create_array("sharded", shape=(8,), chunks=(8,), dtype="<i4", fill_value=0,
                                dimension_names=["x"], compressors=None,
                                serializer=ShardingCodec(chunk_shape=(4,),
                                                         codecs=[BytesCodec(), zstd]))
    sharded[...] = np.arange(8) * 3
    v3, v2, generated = tmp_path / "v3.zarr", tmp_path / "v2.zarr", tmp_path / "gen.zarr"
    _ok(nczarrfs("copy", "-k", "zarr,v3", str(src), str(v3)), "copy to v3")
    _ok(nczarrfs("copy", "-k", "zarr", str(src), str(v2)), "copy to v2")
    cdl = tmp_path / "s.cdl"
    cdl.write_bytes(_ok(nczarrfs("dump", "-s", str(src)), "dump -s"))
    _ok(nczarrfs("gen", "-k", "zarr,v3", "-o", str(generated), str(cdl)), "gen")
    for store in (v3, generated):
        for name in ("plain", "sharded"):
            meta = json.loads((store / name / "zarr.json").read_text())
            assert _zstd_configuration(meta["codecs"])["checksum"] is True, (store, meta)
    for name in ("plain", "sharded"):
        assert json.loads((v2 / name / ".zarray").read_text())["compressor"]["checksum"] is True
    for store, chunk in ((v3, "plain/c/0"), (generated, "plain/c/0"), (v2, "plain/0")):
        opened = zarr.open_group(str(store), mode="r")
        assert (opened["plain"][...] == np.arange(8)).all()
        assert (opened["sharded"][...] == np.arange(8) * 3).all()
        frame = bytearray((store / chunk).read_bytes())
        frame[-1] ^= 0xFF  # the frame's checksum, its last four bytes
        (store / chunk).write_bytes(bytes(frame))
        with pytest.raises(Exception, match="checksum"):
            zarr.open_group(str(store), mode="r")["plain"][0:4]


def _shard_index(shard: bytes, inner_chunks: int, config: dict) -> list[tuple[int, int]]:
    """The (offset, length) pairs of a shard's index, located and decoded as the sharding
    specification lays it out: 16 bytes per inner chunk in the `bytes` codec's byte order,
    then 4 per `crc32c`, at the `index_location` end of the shard."""
    codecs = config["index_codecs"]
    size = 16 * inner_chunks + 4 * sum(c["name"] == "crc32c" for c in codecs)
    raw = shard[:size] if config["index_location"] == "start" else shard[-size:]
    endian = codecs[0].get("configuration", {}).get("endian", "little")
    words = np.frombuffer(raw[: 16 * inner_chunks], dtype=">u8" if endian == "big" else "<u8")
    return [(int(o), int(n)) for o, n in words.reshape(-1, 2)]


@pytest.mark.parametrize("location", ["start", "end"])
@pytest.mark.parametrize("index_codecs", ["crc32c", "bare", "big_crc32c"])
def test_a_copy_keeps_the_shard_layout(nczarrfs, tmp_path, location, index_codecs):
    """zarr-python writes shards with the index at the start or the end, checksummed or not
    (and in either byte order): a copy to Zarr v3, to NCZarr v3, and with the shards made
    anew by `--shards`, keeps the source's index layout, inner chunks and inner codecs, and
    zarr-python reads the source's values from it."""
    from zarr.codecs import (BytesCodec, Crc32cCodec, ShardingCodec, VLenUTF8Codec,
                             ZstdCodec)

    endian = "big" if index_codecs.startswith("big") else "little"
    index = [BytesCodec(endian=endian)] + ([Crc32cCodec()] if "crc32c" in index_codecs else [])
    src = tmp_path / "src.zarr"
    root = zarr.open_group(str(src), mode="w", zarr_format=3)
    inner = [BytesCodec(endian="big"), ZstdCodec(level=2, checksum=True), Crc32cCodec()]
    # Shards of 4 x 6 over 10 x 12: a partial last row of shards, and inner chunks holding
    # only the fill value, which zarr-python leaves out of the index.
    v = root.create_array("v", shape=(10, 12), chunks=(4, 6), dtype="<f8", fill_value=-1.0,
                          dimension_names=["y", "x"], compressors=None,
                          serializer=ShardingCodec(chunk_shape=(2, 3), codecs=inner,
                                                   index_codecs=index,
                                                   index_location=location))
    values = np.arange(120, dtype="<f8").reshape(10, 12) / 7
    values[0:2, 0:3] = -1.0
    v[...] = values
    s = root.create_array("s", shape=(5,), chunks=(4,), dtype=str, fill_value="",
                          dimension_names=["n"], compressors=None,
                          serializer=ShardingCodec(chunk_shape=(2,),
                                                   codecs=[VLenUTF8Codec()],
                                                   index_codecs=index,
                                                   index_location=location))
    texts = ["a", "bé", "", "longer text", "z"]
    s[...] = texts
    source_meta = {name: json.loads((src / name / "zarr.json").read_text())["codecs"][0]
                   for name in ("v", "s")}
    assert source_meta["v"]["configuration"]["index_location"] == location

    copies = []
    for mode, extra in [("zarr,v3", []), ("nczarr,v3", []),
                        ("zarr,v3", ["--shards", "v:8,12", "--shards", "s:6"])]:
        out = tmp_path / f"copy{len(copies)}.zarr"
        _ok(nczarrfs("copy", "-k", mode, *extra, str(src), str(out)), f"copy {mode} {extra}")
        copies.append((out, mode, extra))
    for out, mode, extra in copies:
        opened = zarr.open_group(str(out), mode="r")
        assert np.array_equal(opened["v"][...], values), (out, extra)
        assert opened["s"][...].tolist() == texts, (out, extra)
        for name, shards in (("v", (4, 6)), ("s", (4,))):
            if extra:
                shards = {"v": (8, 12), "s": (6,)}[name]
            assert opened[name].shards == shards, (out, name)
            codec = json.loads((out / name / "zarr.json").read_text())["codecs"]
            assert len(codec) == 1 and codec[0]["name"] == "sharding_indexed", codec
            config, source = codec[0]["configuration"], source_meta[name]["configuration"]
            for field in ("index_location", "index_codecs", "chunk_shape"):
                assert config[field] == source[field], (out, name, field)
        copied_v = json.loads((out / "v" / "zarr.json").read_text())["codecs"][0]
        assert copied_v["configuration"]["codecs"] == source_meta["v"]["configuration"]["codecs"]
        # The first shard's stored bytes are laid out as its metadata says: every inner
        # chunk lies beside the index, not over it. In pure Zarr the one holding only the
        # fill value is left out; NCZarr has no fill value here (the source has no
        # `_FillValue`), so there it is stored.
        config = copied_v["configuration"]
        rows, columns = opened["v"].shards
        per_shard = rows // 2 * (columns // 3)
        shard = (out / "v" / "c" / "0" / "0").read_bytes()
        entries = _shard_index(shard, per_shard, config)
        missing = (2**64 - 1, 2**64 - 1)
        assert (entries[0] == missing) == (mode == "zarr,v3"), (out, entries)
        stored = [entry for entry in entries if entry != missing]
        index_len = len(shard) - sum(n for _, n in stored)
        checksums = sum(c["name"] == "crc32c" for c in config["index_codecs"])
        assert index_len == 16 * per_shard + 4 * checksums, (out, index_len)
        body = (index_len, len(shard)) if location == "start" else (0, len(shard) - index_len)
        for offset, nbytes in stored:
            assert body[0] <= offset and offset + nbytes <= body[1], (out, offset, nbytes)


@pytest.mark.parametrize("choice", [["--codec", "zlib:3"], ["-d", "1"]], ids=["codec", "deflate"])
def test_a_chosen_chain_keeps_the_shards(nczarrfs, tmp_path, choice):
    """`copy --codec` or `-d` of a sharded array to Zarr v3 keeps its shards (and their index
    layout) and compresses its inner chunks with the chain chosen; zarr-python reads the
    source's values from the copy."""
    from zarr.codecs import BytesCodec, ShardingCodec

    src = tmp_path / "src.zarr"
    root = zarr.open_group(str(src), mode="w", zarr_format=3)
    v = root.create_array("v", shape=(10, 12), chunks=(4, 6), dtype="<i4", fill_value=0,
                          dimension_names=["y", "x"], compressors=None,
                          serializer=ShardingCodec(chunk_shape=(2, 3), codecs=[BytesCodec()],
                                                   index_codecs=[BytesCodec()],
                                                   index_location="start"))
    values = np.arange(120, dtype="<i4").reshape(10, 12)
    v[...] = values
    out = tmp_path / "out.zarr"
    _ok(nczarrfs("copy", "-k", "zarr,v3", *choice, str(src), str(out)), f"copy {choice}")
    copied = zarr.open_array(str(out / "v"), mode="r")
    assert (copied.shards, copied.chunks) == ((4, 6), (2, 3))
    assert np.array_equal(copied[...], values)
    config = json.loads((out / "v" / "zarr.json").read_text())["codecs"][0]["configuration"]
    assert config["index_location"] == "start"
    assert config["index_codecs"] == [{"name": "bytes", "configuration": {"endian": "little"}}]
    level = 3 if choice[0] == "--codec" else 1
    zlib = {"name": "numcodecs.zlib", "configuration": {"level": level}}
    assert config["codecs"][1:] == [zlib], config["codecs"]
