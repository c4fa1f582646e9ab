"""Unusual names through `gen`, `copy`, `dump`, `get` and `put`, with Debian's ncgen, ncdump and
nccopy, netCDF4-python (netcdf-c), zarr-python and xarray as oracles.

* netCDF names are at most 256 bytes (NC_MAX_NAME): ncgen refuses longer ones, netcdf-c
  refuses an NCZarr dataset holding a longer dimension name and crashes on a much longer
  attribute name. `gen` and a `copy` to NCZarr refuse them; a copy to pure Zarr keeps them.
* `zarr.json` is a netCDF name, but in Zarr v3 the key of its group's own metadata.
* A name typed on the command line matches exactly first, then in Unicode normalization form
  C, as netcdf-c normalizes the names ncdump and nccopy are given.
* xarray takes any string as a dimension name (`x/y`, `""`); pure Zarr copies keep them.
* A JSON `\\ud800` escape in a name (zarr-python writes one) reads as U+FFFD with a warning, and
  such a dataset is not opened for writing, where a rewrite would rename the attribute.
"""

from __future__ import annotations

import json
import subprocess
import unicodedata
import warnings
from pathlib import Path

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr


@pytest.fixture(autouse=True)
def _quiet():
    warnings.filterwarnings("ignore", module="zarr")
    warnings.filterwarnings("ignore", module="xarray")


def _nczarr(path: Path) -> str:
    return f"file://{path}#mode=nczarr,file"


def _ncgen_accepts(cdl: Path, tmp_path: Path) -> bool:
    out = tmp_path / "ncgen.nc"
    r = subprocess.run(["ncgen", "-k", "nc4", "-o", str(out), str(cdl)], capture_output=True)
    return r.returncode == 0


def _cdl(kind: str, name: str) -> str:
    """A dataset whose `kind` of object is named `name`, and only that one is unusual."""
    if kind == "dimension":
        return f"netcdf x {{\ndimensions:\n {name} = 2 ;\nvariables:\n int v({name}) ;\ndata:\n v = 1, 2 ;\n}}\n"
    if kind == "variable":
        return f"netcdf x {{\ndimensions:\n d = 2 ;\nvariables:\n int {name}(d) ;\ndata:\n {name} = 1, 2 ;\n}}\n"
    if kind == "group":
        return f"netcdf x {{\ngroup: {name} {{\nvariables:\n int v ;\n}}\n}}\n"
    return f"netcdf x {{\nvariables:\n int v ;\n v:{name} = 1 ;\n}}\n"


@pytest.mark.parametrize("kind", ["dimension", "variable", "group", "attribute"])
@pytest.mark.parametrize("mode", ["nczarr,file", "zarr", "nczarr,zip"])
def test_gen_refuses_names_ncgen_refuses_as_longer_than_nc_max_name(nczarrfs, tmp_path, kind, mode):
    cdl = tmp_path / "long.cdl"
    cdl.write_text(_cdl(kind, "n" * 257))
    assert not _ncgen_accepts(cdl, tmp_path), "Debian's ncgen takes a 257-byte name"
    out = tmp_path / "long.out"
    r = nczarrfs("gen", "-k", mode, "-o", str(out), str(cdl))
    assert r.returncode != 0
    assert b"at most 256 bytes" in r.stderr, r.stderr
    assert not out.exists()


@pytest.mark.parametrize("kind", ["dimension", "attribute"])
def test_names_of_nc_max_name_bytes_are_written_and_read_by_netcdf_c(nczarrfs, tmp_path, kind):
    name = "n" * 256
    cdl = tmp_path / "max.cdl"
    cdl.write_text(_cdl(kind, name))
    assert _ncgen_accepts(cdl, tmp_path)
    out = tmp_path / "max.file"
    r = nczarrfs("gen", "-o", str(out), str(cdl))
    assert r.returncode == 0, r.stderr
    with netCDF4.Dataset(_nczarr(out)) as ds:
        names = list(ds.dimensions) if kind == "dimension" else ds["v"].ncattrs()
        assert names == [name]


def test_copy_to_nczarr_refuses_attribute_names_netcdf_c_cannot_hold(nczarrfs, tmp_path):
    """netcdf-c reads a 256-byte attribute name, and crashes on an NCZarr dataset with a
    400-byte one (a subprocess here, as it takes the process down): a copy to NCZarr refuses
    that name, a copy to pure Zarr keeps it, as zarr-python reads it."""
    src = tmp_path / "src.zarr"
    group = zarr.open_group(str(src), mode="w", zarr_format=2)
    arr = group.create_array("v", shape=(2,), dtype="i4")
    arr[:] = [1, 2]
    arr.attrs.update({"_ARRAY_DIMENSIONS": ["d"], "m" * 256: 1})

    fits = tmp_path / "fits.file"
    r = nczarrfs("copy", str(src), str(fits))
    assert r.returncode == 0, r.stderr
    with netCDF4.Dataset(_nczarr(fits)) as ds:
        assert ds["v"].ncattrs() == ["m" * 256]

    arr.attrs["b" * 400] = 2
    refused = tmp_path / "refused.file"
    r = nczarrfs("copy", str(src), str(refused))
    assert r.returncode != 0
    assert b"400 bytes long" in r.stderr and b'of "/v"' in r.stderr, r.stderr
    assert not refused.exists()

    pure = tmp_path / "pure.zarr"
    r = nczarrfs("copy", "-k", "zarr", str(src), str(pure))
    assert r.returncode == 0, r.stderr
    attrs = dict(zarr.open_group(str(pure), mode="r")["v"].attrs)
    assert attrs["b" * 400] == 2 and attrs["m" * 256] == 1


ZARR_JSON_CDL = """netcdf zj {
dimensions:
 d = 2 ;
variables:
 int zarr.json(d) ;
 int ok(d) ;
data:
 zarr.json = 1, 2 ;
 ok = 3, 4 ;
group: g {
  group: zarr.json {
  variables:
   int w ;
  }
}
}
"""


@pytest.mark.parametrize("mode", ["zarr,v3", "zarr,v3,zip", "nczarr,v3"])
def test_zarr_json_is_refused_as_a_zarr_v3_name_before_anything_is_written(nczarrfs, tmp_path, mode):
    cdl = tmp_path / "zj.cdl"
    cdl.write_text(ZARR_JSON_CDL)
    assert _ncgen_accepts(cdl, tmp_path), "zarr.json is a netCDF name"
    out = tmp_path / "zj.out"
    r = nczarrfs("gen", "-k", mode, "-o", str(out), str(cdl))
    assert r.returncode != 0
    assert b'"/g/zarr.json"' in r.stderr and b"Zarr v3" in r.stderr, r.stderr
    assert set(tmp_path.iterdir()) == {cdl, tmp_path / "ncgen.nc"}

    # A copy of a Zarr v2 dataset holding it, the same.
    v2 = tmp_path / "zj.zarr"
    assert nczarrfs("gen", "-k", "zarr", "-o", str(v2), str(cdl)).returncode == 0
    r = nczarrfs("copy", "-k", mode, str(v2), str(out))
    assert r.returncode != 0
    assert b'"/g/zarr.json"' in r.stderr and b"Zarr v3" in r.stderr, r.stderr
    assert not out.exists()

    # With the group renamed, the variable is refused.
    cdl.write_text(ZARR_JSON_CDL.replace("group: zarr.json", "group: h"))
    r = nczarrfs("gen", "-k", mode, "-o", str(out), str(cdl))
    assert r.returncode != 0
    assert b'variable "/zarr.json"' in r.stderr, r.stderr
    assert not out.exists()


def test_zarr_json_stays_a_name_in_zarr_v2_and_nczarr(nczarrfs, tmp_path):
    cdl = tmp_path / "zj.cdl"
    cdl.write_text(ZARR_JSON_CDL)
    nc, v2 = tmp_path / "zj.file", tmp_path / "zj.zarr"
    assert nczarrfs("gen", "-o", str(nc), str(cdl)).returncode == 0
    assert nczarrfs("gen", "-k", "zarr", "-o", str(v2), str(cdl)).returncode == 0
    with netCDF4.Dataset(_nczarr(nc)) as ds:
        assert list(ds["zarr.json"][:]) == [1, 2]
        assert "w" in ds["g"].groups["zarr.json"].variables
    group = zarr.open_group(str(v2), mode="r")
    assert list(group["zarr.json"][:]) == [1, 2]
    assert "zarr.json" in dict(group["g"].groups())


def _unicode_twins(tmp_path: Path) -> Path:
    """`température` and the group `gé` in NFC, as netCDF-4 (HDF5) and NCZarr."""
    for path in [str(tmp_path / "t.nc"), _nczarr(tmp_path / "t.file")]:
        with netCDF4.Dataset(path, "w") as ds:
            ds.createDimension("d", 2)
            ds.createVariable("température", "i4", ("d",))[:] = [1, 2]
            ds.createVariable("other", "i4", ("d",))[:] = [5, 6]
            grp = ds.createGroup("gé")
            grp.createVariable("w", "i4", ("d",))[:] = [3, 4]
    return tmp_path


def _nfd(s: str) -> str:
    return unicodedata.normalize("NFD", s)


@pytest.mark.parametrize("option,name", [("-v", "température"), ("-g", "gé"), ("-g", "/gé")])
def test_dump_selections_typed_in_nfd_match_as_in_ncdump(nczarrfs, tmp_path, option, name):
    _unicode_twins(tmp_path)
    typed = _nfd(name)
    assert typed != name
    ref = subprocess.run(["ncdump", option, typed, str(tmp_path / "t.nc")], capture_output=True)
    assert ref.returncode == 0, ref.stderr
    ours = nczarrfs("dump", option, typed, str(tmp_path / "t.file"))
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout == ref.stdout


@pytest.mark.parametrize("path", ["/gé/w", "gé/w"])
def test_dump_paths_typed_in_nfd_select_what_the_nfc_path_selects(nczarrfs, tmp_path, path):
    """ncdump normalizes a plain name, not the groups of a path (it answers "No such
    variable"); the path names the same variable all the same, and is taken as its NFC
    spelling, as every name here."""
    _unicode_twins(tmp_path)
    ref = subprocess.run(["ncdump", "-v", path, str(tmp_path / "t.nc")], capture_output=True)
    assert ref.returncode == 0, ref.stderr
    ours = nczarrfs("dump", "-v", _nfd(path), str(tmp_path / "t.file"))
    assert ours.returncode == 0, ours.stderr
    assert ours.stdout == ref.stdout


@pytest.mark.parametrize("option,name,compared", [
    ("-V", "température", ["température"]),
    ("-v", "température", ["température"]),
    ("-G", "/gé", ["gé/w"]),
])
def test_copy_selections_typed_in_nfd_match_as_in_nccopy(nczarrfs, tmp_path, option, name, compared):
    """Only the selected data is compared: Debian's nccopy leaves the others' values
    uninitialized (not fill)."""
    _unicode_twins(tmp_path)
    typed = _nfd(name)
    ref = subprocess.run(["nccopy", option, typed, str(tmp_path / "t.nc"), str(tmp_path / "c.nc")],
                         capture_output=True)
    assert ref.returncode == 0, ref.stderr
    ours = nczarrfs("copy", option, typed, str(tmp_path / "t.file"), str(tmp_path / "c.file"))
    assert ours.returncode == 0, ours.stderr
    with netCDF4.Dataset(str(tmp_path / "c.nc")) as a, \
            netCDF4.Dataset(_nczarr(tmp_path / "c.file")) as b:
        assert list(a.variables) == list(b.variables)
        assert list(a.groups) == list(b.groups)
        for v in compared:
            assert a[v][:].tolist() == b[v][:].tolist(), v


def test_get_and_put_take_a_name_typed_in_nfd(nczarrfs, tmp_path):
    _unicode_twins(tmp_path)
    typed = _nfd("température")
    r = nczarrfs("get", str(tmp_path / "t.file"), typed)
    assert r.returncode == 0, r.stderr
    assert np.frombuffer(r.stdout, "<i4").tolist() == [1, 2]
    values = tmp_path / "v.bin"
    values.write_bytes(np.array([7, 8], "<i4").tobytes())
    r = nczarrfs("put", str(tmp_path / "t.file"), _nfd("/gé/w"), "-i", str(values))
    assert r.returncode == 0, r.stderr
    with netCDF4.Dataset(_nczarr(tmp_path / "t.file")) as ds:
        assert ds["gé"]["w"][:].tolist() == [7, 8]


def test_pure_zarr_twins_are_picked_exactly_and_a_third_spelling_is_ambiguous(nczarrfs, tmp_path):
    """A pure Zarr store may hold a name in NFC and in NFD: each spelling picks its own array;
    a spelling that is neither (the marks of ṩ in another order) matches both in NFC, and is
    refused as ambiguous."""
    nfc, nfd = "\u1e69", "s\u0323\u0307"
    other = "s\u0307\u0323"
    assert len({nfc, nfd, other}) == 3
    assert {unicodedata.normalize("NFC", s) for s in (nfd, other)} == {nfc}
    store = tmp_path / "twins.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=2)
    for name, value in [(nfc, 1), (nfd, 2)]:
        arr = group.create_array(name, shape=(1,), dtype="i4")
        arr[:] = [value]
    for name, value in [(nfc, 1), (nfd, 2)]:
        r = nczarrfs("get", str(store), name)
        assert r.returncode == 0, r.stderr
        assert np.frombuffer(r.stdout, "<i4").tolist() == [value]
    for args in [("get", str(store), other), ("dump", "-v", other, str(store))]:
        r = nczarrfs(*args)
        assert r.returncode != 0
        assert b"ambiguous" in r.stderr, r.stderr


def test_xarray_dimension_names_with_a_slash_or_empty_stay_distinct(nczarrfs, tmp_path):
    src = tmp_path / "s.zarr"
    xr.Dataset({
        "a": (("x/y",), np.arange(2)),
        "b": (("p/q",), np.arange(2)),
        "c": (("",), np.arange(3)),
    }).to_zarr(str(src), zarr_format=2, consolidated=False)
    dims = {k: v.dims for k, v in xr.open_zarr(str(src), consolidated=False).data_vars.items()}
    r = nczarrfs("dump", "-h", str(src))
    assert r.returncode == 0, r.stderr
    assert b"does not match shape" not in r.stderr
    assert b'"x/y" holds a \'/\'' in r.stderr and b'"" is empty' in r.stderr, r.stderr
    for mode in ["zarr", "zarr,v3"]:
        copy = tmp_path / f"c-{mode.replace(',', '-')}.zarr"
        r = nczarrfs("copy", "-k", mode, str(src), str(copy))
        assert r.returncode == 0, r.stderr
        copied = xr.open_zarr(str(copy), consolidated=False)
        assert {k: v.dims for k, v in copied.data_vars.items()} == dims
    r = nczarrfs("copy", str(src), str(tmp_path / "c.file"))
    assert r.returncode != 0
    assert b"may not contain '/'" in r.stderr or b"empty name" in r.stderr, r.stderr


def _lone_surrogate_store(path: Path) -> None:
    group = zarr.open_group(str(path), mode="w", zarr_format=2)
    arr = group.create_array("v", shape=(2,), dtype="i4")
    arr[:] = [1, 2]
    arr.attrs.update({"_ARRAY_DIMENSIONS": ["d"], "x\ud800y": 1, "units": "m"})


def _attr_names(path: Path) -> list[str]:
    return sorted(zarr.open_group(str(path), mode="r")["v"].attrs)


def test_a_lone_surrogate_is_read_with_a_warning_and_never_rewritten(nczarrfs, tmp_path):
    store = tmp_path / "s.zarr"
    _lone_surrogate_store(store)
    before = _attr_names(store)
    assert "x\ud800y" in before
    r = nczarrfs("dump", "-h", str(store))
    assert r.returncode == 0, r.stderr
    assert "v:x\ufffdy = 1 ;".encode() in r.stdout
    assert b"lone UTF-16 surrogate" in r.stderr and b"\\ud800" in r.stderr, r.stderr
    values = tmp_path / "v.bin"
    values.write_bytes(np.array([7, 8], "<i4").tobytes())
    r = nczarrfs("put", str(store), "v", "-i", str(values))
    assert r.returncode != 0
    assert b"cannot be opened for writing" in r.stderr and b"v/.zattrs" in r.stderr, r.stderr
    assert _attr_names(store) == before
    assert zarr.open_group(str(store), mode="r")["v"][:].tolist() == [1, 2]
    json.loads((store / "v" / ".zattrs").read_text())


SPECIAL_VALUE_WORDS = ["nan", "NaN", "Infinity", "nanf", "NaNf", "Infinityf", "Inff",
                       "DoubleInf", "FloatInf"]


def test_names_that_are_special_value_words_go_through_dump_and_gen(nczarrfs, tmp_path):
    """netCDF allows a dimension, variable or attribute named `nan` or `Infinity` (not
    `-Infinity`: a name starts with a letter, digit or `_`), which ncdump prints bare, as
    `dump` does; ncgen refuses that CDL, `gen` reads the words as names there and as values
    where a value is expected."""
    src, back = tmp_path / "src.file", tmp_path / "back.file"
    with netCDF4.Dataset(_nczarr(src), "w") as nc:
        for i, word in enumerate(SPECIAL_VALUE_WORDS):
            nc.createDimension(word, i + 1)
            v = nc.createVariable(word, "f8", (word,), fill_value=False)
            v[:] = [np.nan, np.inf, 1.5, -np.inf, 0, 1, 2, 3, 4][:i + 1]
            v.setncattr(SPECIAL_VALUE_WORDS[-1 - i], np.array([np.inf, -np.inf, np.nan]))
        with pytest.raises(Exception, match="illegal characters"):
            nc.createVariable("-Infinity", "f8", ())
    cdl = tmp_path / "dump.cdl"
    dumped = nczarrfs("dump", str(src))
    assert dumped.returncode == 0, dumped.stderr.decode()
    cdl.write_bytes(dumped.stdout)
    assert b"\tdouble nan(nan) ;\n\t\tnan:FloatInf = Infinity, -Infinity, NaN ;" in dumped.stdout
    assert not _ncgen_accepts(cdl, tmp_path)
    res = nczarrfs("gen", "-o", str(back), str(cdl))
    assert res.returncode == 0, res.stderr.decode()
    with netCDF4.Dataset(_nczarr(src)) as want, netCDF4.Dataset(_nczarr(back)) as got:
        assert list(got.dimensions) == list(want.dimensions) == SPECIAL_VALUE_WORDS
        assert {d.name: len(d) for d in got.dimensions.values()} == \
            {d.name: len(d) for d in want.dimensions.values()}
        assert list(got.variables) == SPECIAL_VALUE_WORDS
        for word in SPECIAL_VALUE_WORDS:
            g, w = got[word], want[word]
            assert g.dimensions == w.dimensions == (word,)
            np.testing.assert_array_equal(g[:].data, w[:].data)
            assert g.ncattrs() == w.ncattrs()
            for a in w.ncattrs():
                np.testing.assert_array_equal(g.getncattr(a), w.getncattr(a))
