"""Quantization (`_QuantizeBitGroomNumberOfSignificantDigits`,
`_QuantizeGranularBitRoundNumberOfSignificantDigits`, `_QuantizeBitRoundNumberOfSignificantBits`)
against netcdf-c.

* `nczarrfs gen` of CDL with random float and double data (negatives, ±0, subnormals, NaN,
  ±infinity, huge values, `_` and explicit fill values) must store what netcdf-c 4.10 stores
  when netCDF4-python writes the same values in one call to a variable created with
  `significant_digits=`/`quantize_mode=`: the same bits, the same attributes, and the same
  `.zattrs` (the quantization attribute untyped, after `_ARRAY_DIMENSIONS`).
* Debian's `ncgen -k nc4` (netcdf-c 4.9.0) of the same CDL: the attributes are the same. Its
  values are the same only for GranularBitRound, the one mode that ncgen 4.9.0 passes to
  `nc_def_var_quantize` (for BitGroom and BitRound it writes the attribute alone and stores
  the values unquantized), and only where the value is not NaN (netcdf-c before 4.9.3 turns NaN
  into -0 with GranularBitRound; later releases leave NaN alone).
* A dataset written by netCDF4-python with each mode goes through `nczarrfs dump -s -p 9,17 |
  nczarrfs gen` with its values bit for bit (`-p 9,17` prints every value exactly; gen
  quantizes them again, which changes no value that BitGroom or BitRound quantized in one
  write), but for the sign of zeros, which CDL does not carry. GranularBitRound quantized
  again can move a value whose rounding reached a new decimal digit: there the oracle is
  netcdf-c quantizing the dumped values again.
* Values are refused where netcdf-c refuses them: other types, precision out of range.
* `put` into a quantized variable quantizes, as netcdf-c does after the dataset is reopened.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import netCDF4
import numpy as np
import pytest

from conftest import SEED

PLUGINS = os.path.join(os.path.dirname(netCDF4.__file__), "plugins")

MODES = {"BitGroom": "_QuantizeBitGroomNumberOfSignificantDigits",
         "GranularBitRound": "_QuantizeGranularBitRoundNumberOfSignificantDigits",
         "BitRound": "_QuantizeBitRoundNumberOfSignificantBits"}
#: Precisions tried per mode and type: the least, one between, and netcdf-c 4.10's largest.
PRECISIONS = {("BitGroom", "f4"): [1, 3, 6], ("GranularBitRound", "f4"): [1, 3, 6],
              ("BitRound", "f4"): [1, 9, 23], ("BitGroom", "f8"): [1, 7, 15],
              ("GranularBitRound", "f8"): [1, 7, 15], ("BitRound", "f8"): [1, 30, 52]}
CASES = [(m, t, p) for (m, t), ps in PRECISIONS.items() for p in ps]
SHAPE = (7, 9)  # odd rows, so BitGroom's alternation runs across rows
CDL_TYPE = {"f4": "float", "f8": "double"}
UINT = {"f4": np.uint32, "f8": np.uint64}


@pytest.fixture(autouse=True)
def _plugins(monkeypatch):
    monkeypatch.setenv("HDF5_PLUGIN_PATH", PLUGINS)


def url(path: Path) -> str:
    return f"file://{path}#mode=nczarr,file"


def random_values(rng: np.random.Generator, t: str, fill: float, extremes: bool) -> np.ndarray:
    """Random values of every magnitude, with special values in random places."""
    dtype = np.dtype(t)
    info = np.finfo(dtype)
    n = SHAPE[0] * SHAPE[1]
    exponent = rng.uniform(np.log10(float(info.tiny)) - 5, np.log10(float(info.max)) - 1, n)
    values = (rng.choice([-1.0, 1.0], n) * 10.0 ** exponent * rng.uniform(1, 9.99, n))
    values = values.astype(dtype)
    specials = [0.0, -0.0, np.nan, fill, float(info.tiny) / 3, -float(info.smallest_subnormal),
                1.0, -2.5]
    if extremes:
        specials += [np.inf, -np.inf, float(info.max), -float(info.max) * 0.999]
    for s in specials:
        values[rng.integers(n)] = s
    return values.reshape(SHAPE)


def cdl_number(x: float) -> str:
    """The exact value as CDL: a float's double repr parses back to it exactly."""
    x = float(x)
    if np.isnan(x):
        return "NaN"
    if np.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return repr(x)


def write_cdl(path: Path, mode: str, t: str, precision: int, values: np.ndarray,
              fill: float | None, holes: np.ndarray) -> None:
    text = [f"netcdf q {{\ndimensions:\n  y = {SHAPE[0]} ;\n  x = {SHAPE[1]} ;\nvariables:\n",
            f"  {CDL_TYPE[t]} v(y, x) ;\n"]
    if fill is not None:
        text.append(f"    v:_FillValue = {cdl_number(fill)}{'f' if t == 'f4' else ''} ;\n")
    text.append(f"    v:units = \"m\" ;\n    v:{MODES[mode]} = {precision} ;\n")
    data = ["_" if hole else cdl_number(x) for x, hole in zip(values.ravel(), holes.ravel())]
    text.append("data:\n  v = " + ", ".join(data) + " ;\n}\n")
    path.write_text("".join(text))


def netcdf_c_reference(path: Path, mode: str, t: str, precision: int, values: np.ndarray,
                       fill: float | None) -> None:
    """What netcdf-c stores for these values written in one call (netCDF4-python)."""
    with netCDF4.Dataset(url(path), "w") as ds:
        ds.createDimension("y", SHAPE[0])
        ds.createDimension("x", SHAPE[1])
        v = ds.createVariable("v", t, ("y", "x"), significant_digits=precision,
                              quantize_mode=mode, fill_value=fill)
        v.units = "m"
        v.set_auto_maskandscale(False)
        v[:] = values


def stored(location: str, t: str) -> tuple[np.ndarray, dict, tuple]:
    with netCDF4.Dataset(location) as ds:
        v = ds["v"]
        v.set_auto_maskandscale(False)
        bits = np.ascontiguousarray(v[:]).view(UINT[t])
        attrs = {k: (v.getncattr(k).tolist() if hasattr(v.getncattr(k), "tolist")
                     else v.getncattr(k), np.asarray(v.getncattr(k)).dtype.str)
                 for k in v.ncattrs()}
        return bits, attrs, v.quantization()


def hexes(bits: np.ndarray) -> list[str]:
    return [f"{int(b):x}" for b in bits.ravel()]


@pytest.mark.parametrize("mode,t,precision", CASES)
def test_gen_quantizes_as_netcdf_c(tmp_path, nczarrfs, mode, t, precision):
    rng = np.random.default_rng([SEED, CASES.index((mode, t, precision))])
    explicit_fill = bool(rng.integers(2))
    fill = (np.dtype(t).type(-777.5) if explicit_fill else None)
    default_fill = np.dtype(t).type(netCDF4.default_fillvals[t])
    values = random_values(rng, t, fill if explicit_fill else default_fill, extremes=True)
    holes = rng.random(SHAPE) < 0.1
    values[holes] = fill if explicit_fill else default_fill
    cdl = tmp_path / "q.cdl"
    write_cdl(cdl, mode, t, precision, values, fill, holes)
    r = nczarrfs("gen", "-o", str(tmp_path / "gen.file"), str(cdl))
    assert r.returncode == 0, r.stderr.decode()
    netcdf_c_reference(tmp_path / "ref.file", mode, t, precision, values, fill)

    got, got_attrs, got_q = stored(url(tmp_path / "gen.file"), t)
    want, want_attrs, want_q = stored(url(tmp_path / "ref.file"), t)
    assert got_q == want_q == (precision, mode)
    assert got_attrs == want_attrs
    differ = np.flatnonzero(got.ravel() != want.ravel())
    assert differ.size == 0, (
        f"{differ.size} values differ, first at {differ[:5]}: input "
        f"{hexes(values.view(UINT[t]).ravel()[differ[:5]])}, gen {hexes(got.ravel()[differ[:5]])}, "
        f"netcdf-c {hexes(want.ravel()[differ[:5]])}")
    zattrs = [json.loads((tmp_path / d / "v" / ".zattrs").read_text()) for d in ("gen.file",
                                                                                 "ref.file")]
    assert list(zattrs[0].items()) == list(zattrs[1].items())

    # Debian's ncgen (netcdf-c 4.9.0): see the module's docstring for what it quantizes.
    r = subprocess.run(["ncgen", "-k", "nc4", "-o", str(tmp_path / "debian.nc"), str(cdl)],
                       capture_output=True, check=False)
    assert r.returncode == 0, r.stderr.decode()
    debian, debian_attrs, _ = stored(str(tmp_path / "debian.nc"), t)
    assert debian_attrs == got_attrs
    if mode == "GranularBitRound":
        compared = ~np.isnan(values.ravel())
        assert hexes(debian.ravel()[compared]) == hexes(got.ravel()[compared])


@pytest.mark.parametrize("mode,t,precision", CASES)
def test_dump_gen_keeps_values_netcdf_c_quantized(tmp_path, nczarrfs, mode, t, precision):
    rng = np.random.default_rng([SEED, 1000 + CASES.index((mode, t, precision))])
    default_fill = np.dtype(t).type(netCDF4.default_fillvals[t])
    # No value next to the largest, which GranularBitRound would round to infinity and then,
    # quantized again, to -0 (as netcdf-c would quantize it again).
    values = random_values(rng, t, default_fill, extremes=False)
    netcdf_c_reference(tmp_path / "py.file", mode, t, precision, values, None)
    dump = nczarrfs("dump", "-s", "-p", "9,17", str(tmp_path / "py.file"))
    assert dump.returncode == 0, dump.stderr.decode()
    (tmp_path / "py.cdl").write_bytes(dump.stdout)
    r = nczarrfs("gen", "-o", str(tmp_path / "again.file"), str(tmp_path / "py.cdl"))
    assert r.returncode == 0, r.stderr.decode()
    got, got_attrs, got_q = stored(url(tmp_path / "again.file"), t)
    original, want_attrs, want_q = stored(url(tmp_path / "py.file"), t)
    assert got_q == want_q
    assert got_attrs == want_attrs
    # CDL has no negative zero: dump prints `-0`, which gen (as ncgen) reads as the integer 0.
    negative_zero = UINT[t](1) << UINT[t](8 * np.dtype(t).itemsize - 1)
    original = np.where(original == negative_zero, 0, original)
    # What netcdf-c makes of those values quantized again in one write: the originals, but
    # GranularBitRound can move a value that its rounding carried to a new decimal digit.
    netcdf_c_reference(tmp_path / "requantized.file", mode, t, precision,
                       original.view(np.dtype(t)), None)
    want, _, _ = stored(url(tmp_path / "requantized.file"), t)
    assert hexes(got) == hexes(want)
    if mode != "GranularBitRound":
        assert hexes(got) == hexes(original)


@pytest.mark.parametrize("decl,attr,why", [
    ("int v(x)", "_QuantizeBitRoundNumberOfSignificantBits = 3", "not int"),
    ("double v(x)", "_QuantizeBitGroomNumberOfSignificantDigits = 0", "1 to 15"),
    ("float v(x)", "_QuantizeBitGroomNumberOfSignificantDigits = 7", "1 to 6"),
    ("float v(x)", "_QuantizeGranularBitRoundNumberOfSignificantDigits = 7", "1 to 6"),
    ("float v(x)", "_QuantizeBitRoundNumberOfSignificantBits = 24", "1 to 23"),
    ("double v(x)", "_QuantizeBitRoundNumberOfSignificantBits = 53", "1 to 52"),
    ("double v(x)", "_QuantizeGranularBitRoundNumberOfSignificantDigits = 16", "1 to 15"),
])
def test_refused_where_netcdf_c_refuses(tmp_path, nczarrfs, decl, attr, why):
    """netCDF4-python (netcdf-c 4.10) refuses the same with NC_EINVAL."""
    t = {"int": "i4", "float": "f4", "double": "f8"}[decl.split()[0]]
    name = attr.split(" = ")[0]
    mode = next(m for m, a in MODES.items() if a == name)
    with pytest.raises(RuntimeError, match="Invalid argument"):
        with netCDF4.Dataset(str(tmp_path / "ref.nc"), "w") as ds:
            ds.createDimension("x", 2)
            ds.createVariable("v", t, ("x",), significant_digits=int(attr.split(" = ")[1]),
                              quantize_mode=mode)
    cdl = tmp_path / "bad.cdl"
    cdl.write_text(f"netcdf bad {{\ndimensions:\n  x = 2 ;\nvariables:\n  {decl} ;\n"
                   f"    v:{attr} ;\ndata:\n  v = 1, 2 ;\n}}\n")
    r = nczarrfs("gen", "-o", str(tmp_path / "bad.file"), str(cdl))
    assert r.returncode != 0
    assert why in r.stderr.decode() and name in r.stderr.decode()
    assert not (tmp_path / "bad.file").exists()


@pytest.mark.parametrize("mode,t,precision", CASES)
def test_put_quantizes_as_netcdf_c_after_reopening(tmp_path, nczarrfs, mode, t, precision):
    """The oracle is netCDF4-python reopening an HDF5 file `r+` and writing the same slab.
    netcdf-c's NCZarr is no oracle here: reopened, it quantizes only once the variable's
    attributes have been asked about (it reads them lazily), and then it sets bits of the
    default fill value, which it leaves alone in the session that created the variable and in
    HDF5 files."""
    rng = np.random.default_rng([SEED, 2000 + CASES.index((mode, t, precision))])
    values = random_values(rng, t, np.dtype(t).type(netCDF4.default_fillvals[t]), True)
    for location in (url(tmp_path / "put.file"), str(tmp_path / "ref.nc")):
        with netCDF4.Dataset(location, "w") as ds:
            ds.createDimension("y", SHAPE[0])
            ds.createDimension("x", SHAPE[1])
            ds.createVariable("v", t, ("y", "x"), significant_digits=precision,
                              quantize_mode=mode)
    # Rows 2..5, so the write's first value is not the variable's first.
    part = np.ascontiguousarray(values[2:5])
    (tmp_path / "in.bin").write_bytes(part.tobytes())
    r = nczarrfs("put", str(tmp_path / "put.file"), "v", "--start", "2,0", "--count",
                 f"3,{SHAPE[1]}", "-i", str(tmp_path / "in.bin"))
    assert r.returncode == 0, r.stderr.decode()
    with netCDF4.Dataset(str(tmp_path / "ref.nc"), "r+") as ds:
        ds["v"].set_auto_maskandscale(False)
        ds["v"][2:5] = part
    got, _, _ = stored(url(tmp_path / "put.file"), t)
    want, _, _ = stored(str(tmp_path / "ref.nc"), t)
    # Only the rows written: netcdf-c writes NCZarr's default double fill as 9.96921e+36.
    assert hexes(got[2:5]) == hexes(want[2:5])
    assert hexes(got[2:5]) != hexes(part.view(UINT[t])) or precision == PRECISIONS[(mode, t)][-1]


def test_put_leaves_a_pure_zarr_arrays_fill_value_alone(tmp_path, nczarrfs):
    """`put` into a pure Zarr array with `fill_value: -999` and no `_FillValue` attribute (as
    xarray writes missing values) leaves the -999s alone, as netcdf-c does with its variable's
    fill: netCDF4-python's `get_fill_value()` of such an array is -999, and its write to a
    variable whose fill is -999 stores the -999s unquantized (not -1024)."""
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
    (tmp_path / "in.bin").write_bytes(values.tobytes())
    r = nczarrfs("put", str(store), "v", "-i", str(tmp_path / "in.bin"))
    assert r.returncode == 0, r.stderr.decode()
    with netCDF4.Dataset(url) as ds:
        ds["v"].set_auto_mask(False)
        assert ds["v"][:].tobytes() == want.tobytes()
