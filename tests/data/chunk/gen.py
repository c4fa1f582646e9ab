"""Regenerates the chunk-engine fixture: an NCZarr store written by netcdf-c (through
netCDF4-python) and each variable's values as netCDF4-python reads them back.

Run from this directory with a Python that has netCDF4 and numpy:
    HDF5_PLUGIN_PATH=<netCDF4>/plugins python gen.py
Outputs: nczarr.file/ (the store) and expected/<var>.bin (C order, little-endian; strings as
UTF-8 padded with NULs to 8 bytes, chars as bytes).
"""
import os
import shutil

import netCDF4
import numpy as np

here = os.path.dirname(os.path.abspath(__file__))
store = os.path.join(here, "nczarr.file")
shutil.rmtree(store, ignore_errors=True)
shutil.rmtree(os.path.join(here, "expected"), ignore_errors=True)
os.makedirs(os.path.join(here, "expected"))

ds = netCDF4.Dataset(f"file://{store}#mode=nczarr,file", "w")
ds.createDimension("t", None)
ds.createDimension("y", 7)
ds.createDimension("x", 9)
ds.createDimension("n", 4)
ds.createDimension("len", 5)
t = ds.createVariable("t", "i4", ("t", "y", "x"), chunksizes=(2, 3, 4), zlib=True, shuffle=True)
t[0:5] = np.arange(5 * 7 * 9, dtype="i4").reshape(5, 7, 9) * 7 - 1000
# Big-endian storage, chunked across every dimension.
b = ds.createVariable("b", "i2", ("y", "x"), chunksizes=(4, 2), endian="big")
b[:] = (np.arange(63, dtype="i2").reshape(7, 9) - 30) * 3
# Only two records written while the record dimension has five: the rest reads as fill.
g = ds.createVariable("g", "f8", ("t", "x"), chunksizes=(1, 5), fill_value=-9.5)
g[0:2] = np.linspace(0.25, 4.5, 18).reshape(2, 9)
# Partly written: chunks never written read as the fill value.
f = ds.createVariable("f", "f4", ("y", "x"), chunksizes=(3, 3), fill_value=np.float32(1.5))
f[0:3, 0:3] = np.arange(9, dtype="f4").reshape(3, 3) / 4
f[6, 8] = -2.0
s = ds.createVariable("s", str, ("n",))
s[:] = np.array(["alpha", "", "héé", "z"], dtype=object)
c = ds.createVariable("c", "S1", ("n", "len"))
c[:] = netCDF4.stringtochar(np.array(["abcde", "xy", "", "12345"], dtype="S5"))
d = ds.createVariable("d", "f8", ())
d.assignValue(3.25)
ds.close()

ds = netCDF4.Dataset(f"file://{store}#mode=nczarr,file", "r")
ds.set_auto_mask(False)
for name, var in ds.variables.items():
    values = var[...]
    if var.dtype == str:
        raw = b"".join(v.encode().ljust(8, b"\0") for v in np.asarray(values).ravel())
    else:
        raw = np.ascontiguousarray(values).astype(values.dtype.newbyteorder("<")).tobytes()
    with open(os.path.join(here, "expected", name + ".bin"), "wb") as out:
        out.write(raw)
    print(name, var.dtype, var.shape)
ds.close()
