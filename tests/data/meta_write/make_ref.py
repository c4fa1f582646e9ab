"""Reference metadata for tests/meta_write.rs: the objects netCDF4-python 1.7.5 (bundling
netcdf-c 4.10.1) writes for a small dataset in NCZarr mode.

    HDF5_PLUGIN_PATH=.../netCDF4/plugins python make_ref.py > ref_nczarr_4.10.1.json

With `--old`, the same dataset as the netcdf-c releases before 4.9.3 can hold it, for their
NCZarr layouts: `t` fixed (they have no unlimited dimensions) and `v` uncompressed (their
wheels ship no filter plugins); under 4.9.0 without the string variable, the string
attribute and the scalar (4.9.0 crashes on them). Made with netCDF4-python 1.6.3 (netcdf-c
4.9.1) and 1.6.2 (4.9.0) in their own venvs (with numpy<2):

    python make_ref.py --old > ref_nczarr_4.9.1.json

Only metadata objects (`.zgroup`, `.zarray`, `.zattrs`) are kept (two records of `v` are
written so that `t` has length 2).
"""
import json, os, sys, tempfile
import netCDF4, numpy as np

old = "--old" in sys.argv
before_4_9_1 = old and netCDF4.__netcdf4libversion__.startswith("4.9.0")

with tempfile.TemporaryDirectory() as tmp:
    p = os.path.join(tmp, "x.file")
    ds = netCDF4.Dataset("file://" + p + "#mode=nczarr,file", "w")
    ds.createDimension("x", 3)
    ds.createDimension("t", 2 if old else None)
    v = ds.createVariable("v", "f8", ("t", "x"), zlib=not old, complevel=3, shuffle=not old,
                          chunksizes=(2, 3))
    v.units = "m"
    v.setncattr("sf", np.float32(1.5))
    v.setncattr("iv", np.array([1, 2], "i2"))
    v.setncattr("js", "[1, 2]")
    ds.createVariable("c", "S1", ("x",))
    ds.createVariable("b", "i1", ("x",), fill_value=np.int8(3))
    if not before_4_9_1:
        ds.createVariable("s", str, ("x",))
        ds.setncattr_string("ss", ["a", "b"])
    ds.title = "hi"
    ds.pi = 3.141592653589793
    g = ds.createGroup("g")
    g.createDimension("y", 2)
    g.createVariable("w", "u2", ("y", "x"))
    if not before_4_9_1:
        ds.createVariable("sc", "i4", ())
    # Two records along t, so that the unlimited dimension has a length.
    v[0:2, :] = np.zeros((2, 3))
    ds.close()
    out = {}
    for root, _, files in os.walk(p):
        for f in sorted(files):
            if f.startswith(".z"):
                key = os.path.relpath(os.path.join(root, f), p)
                out[key] = json.load(open(os.path.join(root, f)))
json.dump(out, sys.stdout, indent=1, sort_keys=True)
