"""Writes to existing Zarr v3 stores through a read-write kernel mount, checked by zarr-python 3.

- zarr-python makes stores (plain, gzip, blosc, sharded with a partial shard rewrite, a
  variable-length string array); we pwrite into `data` files and write an attribute file;
  after unmount zarr-python reads exactly what a numpy model of those writes says.
- An NCZarr-on-v3 store made by `nczarrfs gen -k nczarr,v3` grows along its unlimited
  dimension by appending to a record variable's `data`.
- `copy` v2 -> v3, edits through a rw mount, `copy` v3 -> v2: the dump shows the edits.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import warnings
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import zarr
from zarr.codecs import BloscCodec, GzipCodec


@pytest.fixture(autouse=True)
def _quiet():
    warnings.filterwarnings("ignore", module="zarr")
    warnings.filterwarnings("ignore", module="numcodecs")


def _ok(res, what: str) -> bytes:
    assert res.returncode == 0, f"{what}: {res.stderr.decode(errors='replace')}"
    return res.stdout


class Mounted:
    """A read-write kernel mount of `store` on `mnt` (logging to `log` if given), unmounted
    on exit even on failure."""

    def __init__(self, nczarrfs, store: Path, mnt: Path, log: Path | None = None):
        self.nczarrfs, self.store, self.mnt, self.log = nczarrfs, store, mnt, log

    def __enter__(self) -> Path:
        self.mnt.mkdir(exist_ok=True)
        logging = ["--log-file", str(self.log)] if self.log else []
        _ok(self.nczarrfs("mount", "-o", "rw", *logging, str(self.store), str(self.mnt)),
            "mount")
        return self.mnt

    def __exit__(self, *exc):
        res = subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True)
        if res.returncode != 0:
            subprocess.run(["umount", "-l", str(self.mnt)], capture_output=True)
        # The daemon stores everything before the unmount returns; allow it to exit.
        time.sleep(0.2)


def _pwrite(path: Path, offset: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        assert os.pwrite(fd, data, offset) == len(data)
    finally:
        os.close(fd)


@pytest.mark.parametrize("kind", ["plain", "gzip", "blosc", "sharded", "sharded_start"])
def test_numeric_writes(nczarrfs, tmp_path, kind):
    store = tmp_path / "s.zarr"
    model = np.arange(10 * 12, dtype="<f8").reshape(10, 12) * 1.5
    kw: dict = {"chunks": (4, 5), "dimension_names": ["y", "x"], "fill_value": -1.0}
    if kind == "gzip":
        kw["compressors"] = [GzipCodec(level=3)]
    elif kind == "blosc":
        kw["compressors"] = [BloscCodec(cname="zstd", clevel=3, shuffle="shuffle")]
    elif kind.startswith("sharded"):
        kw = {"chunks": (2, 3), "shards": (4, 6), "dimension_names": ["y", "x"],
              "fill_value": -1.0, "compressors": [GzipCodec(level=1)]}
    arr = zarr.create_array(str(store), name="v", shape=model.shape, dtype="f8", **kw)
    if kind == "sharded_start":
        # zarr-python 3.1 has no argument for it: rewrite the index location by hand.
        import json
        meta = json.loads((store / "v" / "zarr.json").read_text())
        meta["codecs"][0]["configuration"]["index_location"] = "start"
        (store / "v" / "zarr.json").write_text(json.dumps(meta))
        arr = zarr.open_array(str(store / "v"), mode="r+")
    arr[...] = model
    arr[8:, :6] = -1.0  # Shard (2, 0) holds only fill: zarr-python does not store it.
    model[8:, :6] = -1.0

    with Mounted(nczarrfs, store, tmp_path / "mnt") as mnt:
        data = mnt / "v" / "data"
        assert data.stat().st_size == model.nbytes
        # One element, a run across a chunk boundary, a whole row, a missing shard.
        for (i, j), vals in [((1, 1), [7.25]), ((3, 3), [1, 2, 3, 4]), ((5, 0), list(range(12))),
                             ((9, 2), [42.0])]:
            vals = np.asarray(vals, dtype="<f8")
            _pwrite(data, (i * 12 + j) * 8, vals.tobytes())
            model.flat[i * 12 + j : i * 12 + j + len(vals)] = vals
        (mnt / "v" / "@attributes" / "units").write_text("m s-1")
        assert np.frombuffer(data.read_bytes(), "<f8").tolist() == model.ravel().tolist()

    got = zarr.open_array(str(store / "v"), mode="r")
    np.testing.assert_array_equal(got[...], model)
    assert got.attrs["units"] == "m s-1"
    assert tuple(got.metadata.dimension_names) == ("y", "x")


def test_vlen_strings(nczarrfs, tmp_path):
    store = tmp_path / "s.zarr"
    values = np.array(["ab", "cde", "f", "héllo"])
    arr = zarr.create_array(str(store), name="s", shape=(4,), chunks=(3,), dtype=str,
                            dimension_names=["n"])
    arr[...] = values
    with Mounted(nczarrfs, store, tmp_path / "mnt") as mnt:
        data = mnt / "s" / "data"
        width = data.stat().st_size // 4
        assert width == len("héllo".encode())
        _pwrite(data, width, b"xy".ljust(width, b"\0"))
        _pwrite(data, 3 * width, "ünï".encode().ljust(width, b"\0"))
    got = zarr.open_array(str(store / "s"), mode="r")
    assert got[...].tolist() == ["ab", "xy", "f", "ünï"]


CDL = """netcdf rec {
dimensions:
    time = UNLIMITED ;
    x = 3 ;
variables:
    int t(time, x) ;
        t:_ChunkSizes = 2, 3 ;
        t:_Storage = "chunked" ;
data:
    t = 1, 2, 3, 4, 5, 6 ;
}
"""


def test_append_along_unlimited_dimension(nczarrfs, tmp_path):
    cdl = tmp_path / "rec.cdl"
    cdl.write_text(CDL)
    store = tmp_path / "rec.zarr"
    _ok(nczarrfs("gen", "-k", "nczarr,v3", "-o", str(store), str(cdl)), "gen")
    assert (store / "zarr.json").exists()
    with Mounted(nczarrfs, store, tmp_path / "mnt") as mnt:
        data = mnt / "t" / "data"
        assert data.stat().st_size == 6 * 4
        with open(data, "ab") as f:
            f.write(np.arange(7, 13, dtype="<i4").tobytes())
    got = zarr.open_array(str(store / "t"), mode="r")
    assert got.shape == (4, 3)
    np.testing.assert_array_equal(got[...], np.arange(1, 13).reshape(4, 3))
    dump = _ok(nczarrfs("dump", str(store)), "dump").decode()
    assert "time = UNLIMITED ; // (4 currently)" in dump
    assert "7, 8, 9" in dump and "10, 11, 12" in dump


def test_copy_v2_to_v3_edit_and_back(nczarrfs, tmp_path):
    cdl = tmp_path / "rec.cdl"
    cdl.write_text(CDL)
    v2 = tmp_path / "v2.zarr"
    v3 = tmp_path / "v3.zarr"
    back = tmp_path / "back.zarr"
    _ok(nczarrfs("gen", "-k", "nczarr,v2", "-o", str(v2), str(cdl)), "gen")
    _ok(nczarrfs("copy", str(v2), str(v3), "-k", "nczarr,v3"), "copy to v3")
    with Mounted(nczarrfs, v3, tmp_path / "mnt") as mnt:
        _pwrite(mnt / "t" / "data", 4 * 4, np.array([-50], "<i4").tobytes())
        (mnt / "t" / "@attributes" / "note").write_text("edited")
    _ok(nczarrfs("copy", str(v3), str(back), "-k", "nczarr,v2"), "copy back")
    dump = _ok(nczarrfs("dump", str(back)), "dump").decode().split("\n", 1)[1]
    want = _ok(nczarrfs("dump", str(v2)), "dump").decode().split("\n", 1)[1]
    want = want.replace("int t(time, x) ;\n", 'int t(time, x) ;\n\t\tt:note = "edited" ;\n', 1)
    want = want.replace("4, 5, 6", "4, -50, 6", 1)
    assert dump == want
    # The same from reference tools: ncgen's netCDF-4 file of the CDL, edited alike by
    # netCDF4-python and dumped by Debian's ncdump.
    ref = tmp_path / "rec.nc"
    subprocess.run(["ncgen", "-k", "nc4", "-o", str(ref), str(cdl)], check=True,
                   capture_output=True)
    with netCDF4.Dataset(ref, "a") as nc:
        nc["t"][1, 1] = -50
        nc["t"].note = "edited"
    reference = subprocess.run(["ncdump", str(ref)], capture_output=True, check=True).stdout
    assert dump == reference.decode().split("\n", 1)[1]


@pytest.mark.parametrize("made_by", ["zarr-python", "copy"])
def test_consolidated_metadata_is_kept_up_to_date(nczarrfs, tmp_path, made_by):
    """A consolidated Zarr v3 store (zarr-python's `consolidate_metadata`, or `copy -k
    zarr,v3,consolidated`) keeps its root's `consolidated_metadata` through `put` and a rw
    mount, and zarr-python opening it with `use_consolidated=True` sees every change."""
    store = tmp_path / "s.zarr"
    source = tmp_path / "src.zarr" if made_by == "copy" else store
    root = zarr.open_group(str(source), mode="w", zarr_format=3)
    root.create_array("a", shape=(4,), chunks=(2,), dtype="i4",
                      dimension_names=["x"])[...] = [1, 2, 3, 4]
    root.create_group("g").create_array("b", shape=(2,), chunks=(2,), dtype="f8",
                                         dimension_names=["y"])[...] = [0.5, 1.5]
    if made_by == "copy":
        _ok(nczarrfs("copy", str(source), str(store), "-k", "zarr,v3,consolidated"), "copy")
    else:
        zarr.consolidate_metadata(str(store))

    npy = tmp_path / "in.npy"
    np.save(npy, np.array([7, 8], dtype="<i4"))
    _ok(nczarrfs("put", str(store), "a", "--npy", "--start", "2", "-i", str(npy)), "put")
    with Mounted(nczarrfs, store, tmp_path / "mnt") as mnt:
        (mnt / "@attributes" / "title").write_text("edited")
        (mnt / "g" / "b" / "@attributes" / "units").write_text("m")
        (mnt / "h").mkdir()
        (mnt / "a").rename(mnt / "c")

    opened = zarr.open_group(str(store), mode="r", use_consolidated=True)
    assert opened.metadata.consolidated_metadata is not None
    assert opened.attrs["title"] == "edited"
    assert sorted(opened.metadata.consolidated_metadata.flattened_metadata) == [
        "c", "g", "g/b", "h"]
    assert opened["c"][...].tolist() == [1, 2, 7, 8]
    assert opened["g/b"].attrs["units"] == "m"
    assert opened["g/b"][...].tolist() == [0.5, 1.5]


@pytest.mark.parametrize("consolidated", [False, True])
def test_untyped_attributes_and_unnamed_dimensions_survive_a_rewrite(
        nczarrfs, tmp_path, consolidated):
    """zarr-python attributes that netCDF has no type for (an object, a boolean, null, a list
    of mixed values) and arrays without `dimension_names`, or with `null` among them, come
    back as zarr-python wrote them after a rw mount rewrote every `zarr.json` for a change
    elsewhere."""
    store = tmp_path / "s.zarr"
    untyped = {"obj": {"a": [1, 2]}, "flag": True, "flags": [True, False], "none": None,
               "mixed": [1, "x"], "empty": [], "ints": [1, 2], "title": "t"}
    root = zarr.open_group(str(store), mode="w", zarr_format=3)
    root.attrs.update(untyped)
    v = root.create_array("v", shape=(4,), chunks=(2,), shards=(4,), dtype="i4", fill_value=0)
    v.attrs.update(untyped)
    w = root.create_array("w", shape=(4, 3), chunks=(2, 3), dtype="i4", fill_value=0,
                          dimension_names=[None, "x"])
    s = root.create_array("s", shape=(), dtype="f8", fill_value=0.0)
    v[...], w[...], s[...] = [1, 2, 3, 4], np.arange(12).reshape(4, 3), 2.5
    if consolidated:
        zarr.consolidate_metadata(str(store))
    with Mounted(nczarrfs, store, tmp_path / "mnt") as mnt:
        (mnt / "@attributes" / "added").write_text("new")
        (mnt / "w" / "@attributes" / "units").write_text("m")

    back = zarr.open_group(str(store), mode="r", use_consolidated=consolidated)
    # As JSON text, where true is not 1.
    as_json = lambda attrs: json.dumps(attrs.asdict(), sort_keys=True)  # noqa: E731
    assert as_json(back.attrs) == json.dumps({**untyped, "added": "new"}, sort_keys=True)
    assert as_json(back["v"].attrs) == json.dumps(untyped, sort_keys=True)
    assert back["w"].attrs.asdict() == {"units": "m"}
    assert back["v"].metadata.dimension_names is None
    assert back["w"].metadata.dimension_names == (None, "x")
    assert back["s"].metadata.dimension_names is None
    assert back["v"][...].tolist() == [1, 2, 3, 4]
    assert back["w"][...].tolist() == np.arange(12).reshape(4, 3).tolist()
    assert back["s"][...] == 2.5
    if consolidated:
        assert back.metadata.consolidated_metadata is not None


@pytest.mark.parametrize("how", ["put", "rw mount"])
def test_nan_and_infinity_root_attributes_do_not_stop_writes(nczarrfs, tmp_path, how):
    """zarr-python writes a NaN or infinite attribute as the bare tokens `NaN`, `Infinity`:
    a root group holding them is written to like any other, and keeps them."""
    store = tmp_path / "s.zarr"
    root = zarr.open_group(str(store), mode="w", zarr_format=3)
    root.attrs.update({"missing": float("nan"), "top": float("inf"), "bottom": float("-inf")})
    root.create_array("v", shape=(4,), chunks=(2,), dtype="i4", fill_value=0,
                      dimension_names=["x"])
    values = np.array([5, 6, 7, 8], dtype="<i4")
    if how == "put":
        np.save(tmp_path / "in.npy", values)
        _ok(nczarrfs("put", str(store), "v", "--npy", "-i", str(tmp_path / "in.npy")), "put")
    else:
        with Mounted(nczarrfs, store, tmp_path / "mnt") as mnt:
            _pwrite(mnt / "v" / "data", 0, values.tobytes())
            (mnt / "@attributes" / "title").write_text("edited")

    back = zarr.open_group(str(store), mode="r")
    assert back["v"][...].tolist() == values.tolist()
    assert np.isnan(back.attrs["missing"])
    assert back.attrs["top"] == float("inf") and back.attrs["bottom"] == float("-inf")
    if how == "rw mount":
        assert back.attrs["title"] == "edited"
