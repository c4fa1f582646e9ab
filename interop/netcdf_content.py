"""What a netCDF4-python sees in a dataset, as JSON; and a plain copy between two datasets.

Run by test_old_netcdf_c.py under the interpreters of several netCDF4-python releases (each
bundling another netcdf-c), so it uses only what all of them have, and spells every value the
same way whatever the numpy version (lists of Python numbers, NaN and infinities as strings,
bytes as Latin-1 text).

    python netcdf_content.py show PATH_OR_URL      # prints the content as JSON
    python netcdf_content.py copy SRC DST_URL       # writes SRC's content to DST (no codecs)
"""

from __future__ import annotations

import json
import math
import sys

import netCDF4
import numpy as np


def _plain(x):
    """A value as JSON-able Python, the same under numpy 1 and 2."""
    if isinstance(x, np.ndarray):
        return [_plain(v) for v in x.tolist()] if x.ndim else _plain(x.item())
    if isinstance(x, np.generic):
        return _plain(x.item())
    if isinstance(x, list):
        return [_plain(v) for v in x]
    if isinstance(x, bytes):
        return x.decode("latin-1")
    if isinstance(x, float) and not math.isfinite(x):
        return repr(x)
    return x


def _attr(obj, name: str):
    value = obj.getncattr(name)
    kind = "text" if isinstance(value, str) else np.asarray(value).dtype.str[1:]
    return [kind, _plain(np.asarray(value) if kind != "text" else value)]


def _group(grp) -> dict:
    out = {
        "attrs": {n: _attr(grp, n) for n in grp.ncattrs()},
        "dims": {n: [len(d), d.isunlimited()] for n, d in grp.dimensions.items()},
        "vars": {},
        "groups": {n: _group(g) for n, g in grp.groups.items()},
    }
    for name, var in grp.variables.items():
        var.set_auto_maskandscale(False)
        kind = "string" if var.dtype is str else np.dtype(var.dtype).str[1:]
        out["vars"][name] = {
            "type": kind,
            "dims": list(var.dimensions),
            "attrs": {n: _attr(var, n) for n in var.ncattrs()},
            "values": _plain(np.asarray(var[...])),
        }
    return out


def show(location: str) -> dict:
    with netCDF4.Dataset(location) as nc:
        return _group(nc)


def _copy_group(src, dst) -> None:
    for name in src.ncattrs():
        value = src.getncattr(name)
        if isinstance(value, list):
            dst.setncattr_string(name, value)
        else:
            dst.setncattr(name, value)
    for name, dim in src.dimensions.items():
        dst.createDimension(name, None if dim.isunlimited() else len(dim))
    for name, var in src.variables.items():
        var.set_auto_maskandscale(False)
        fill = var.getncattr("_FillValue") if "_FillValue" in var.ncattrs() else None
        kind = str if var.dtype is str else var.dtype
        new = dst.createVariable(name, kind, var.dimensions, fill_value=fill)
        new.set_auto_maskandscale(False)
        for attr in var.ncattrs():
            if attr != "_FillValue":
                value = var.getncattr(attr)
                if isinstance(value, list):
                    new.setncattr_string(attr, value)
                else:
                    new.setncattr(attr, value)
        if var.size:
            new[...] = var[...]
    for name, sub in src.groups.items():
        _copy_group(sub, dst.createGroup(name))


def copy(src: str, dst: str) -> None:
    with netCDF4.Dataset(src) as s, netCDF4.Dataset(dst, "w", format="NETCDF4") as d:
        _copy_group(s, d)


if __name__ == "__main__":
    if sys.argv[1] == "show":
        json.dump(show(sys.argv[2]), sys.stdout, sort_keys=True)
    elif sys.argv[1] == "copy":
        copy(sys.argv[2], sys.argv[3])
    else:
        sys.exit(f"unknown command {sys.argv[1]}")
