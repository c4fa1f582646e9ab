"""Datasets written by the reference tools, with the values they hold."""

from __future__ import annotations

from pathlib import Path

import numpy as np


def nczarr_dataset(path: Path, no_fill: bool = False) -> str:
    """An NCZarr directory store written by netCDF4-python; returns its location URL.
    `no_fill`: also a record variable without fill (`obs`, with a `_FillValue` attribute
    all the same, which netcdf-c then keeps as an attribute only)."""
    import netCDF4

    url = f"file://{path}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w", format="NETCDF4") as ds:
        ds.title = "mount test"
        ds.version = np.int32(3)
        ds.factors = np.array([1.5, 2.5], dtype="f4")
        ds.createDimension("time", None)
        ds.createDimension("y", 5)
        ds.createDimension("x", 7)
        t = ds.createVariable("time", "f8", ("time",))
        t.units = "days since 2000-01-01"
        t[:] = np.arange(4) * 0.5
        v = ds.createVariable("temp", "f4", ("time", "y", "x"), chunksizes=(2, 3, 4),
                              zlib=True, complevel=3, fill_value=-999.0)
        v.long_name = "temperature"
        v.valid_range = np.array([-50, 50], dtype="f4")
        v[:] = (np.arange(4 * 5 * 7, dtype="f4").reshape(4, 5, 7) - 60) / 3
        s = ds.createVariable("counts", "i2", ("y", "x"), chunksizes=(5, 2))
        s[:] = np.arange(35, dtype="i2").reshape(5, 7) * -3
        u = ds.createVariable("flags", "u1", ("x",))
        u[:] = np.arange(7, dtype="u1") * 30
        big = ds.createVariable("big", "i8", ("y",))
        big[:] = np.array([2**40, -(2**40), 0, 1, -1], dtype="i8")
        sc = ds.createVariable("scalar", "f8", ())
        sc.assignValue(3.25)
        if no_fill:
            # The fill mode applies to the variables defined while it is set.
            ds.set_fill_off()
            obs = ds.createVariable("obs", "i4", ("time",), chunksizes=(3,), fill_value=5)
            ds.set_fill_on()
            obs[:] = np.arange(1, 5, dtype="i4")
        g = ds.createGroup("sub")
        g.createDimension("n", 3)
        gv = g.createVariable("vals", "u4", ("n",))
        gv[:] = np.array([1, 2, 4000000000], dtype="u4")
        gv.note = "in a group"
        g.createGroup("inner")
    return url


def zarr_python_dataset(path: Path) -> str:
    """A Zarr v2 store written by zarr-python: two arrays, one with several chunks, with
    `_ARRAY_DIMENSIONS`."""
    import zarr

    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    a = root.create_array("a", shape=(6, 10), chunks=(2, 5), dtype="<i4", fill_value=0)
    a[:] = np.arange(60, dtype="<i4").reshape(6, 10)
    a.attrs["_ARRAY_DIMENSIONS"] = ["r", "c"]
    b = root.create_array("b", shape=(10,), chunks=(10,), dtype="<f8", fill_value=0.0)
    b[:] = np.linspace(0, 1, 10)
    b.attrs["_ARRAY_DIMENSIONS"] = ["c"]
    b.attrs["units"] = "m"
    return str(path)


def netcdf_values(url: str) -> dict[str, np.ndarray]:
    """Every variable's values as netCDF4-python reads them, keyed by full name."""
    import netCDF4

    out = {}
    with netCDF4.Dataset(url) as ds:
        def walk(g, prefix):
            for name, v in g.variables.items():
                v.set_auto_maskandscale(False)
                out[f"{prefix}/{name}"] = np.asarray(v[...])
            for name, sub in g.groups.items():
                walk(sub, f"{prefix}/{name}")
        walk(ds, "")
    return out
