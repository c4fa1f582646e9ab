"""Reference values for tests/cdl_parse_values.rs, produced by ncgen (Debian netcdf-bin
4.9.0: `ncgen -k nc4 -o X.nc X.cdl`) and read back with netCDF4-python 1.7.5:

    python make_refs.py FIXTURES_DIR > ncgen_values.json

For every file: each variable's dimension lengths, netCDF type, and raw values (numbers as
JSON, NaN as the string "NaN"; char data as hex of the bytes ncgen stored; strings as a list),
and the global attributes with their type (numpy dtype name) and values.
"""
import json, math, os, subprocess, sys, tempfile
import netCDF4, numpy as np

here = os.path.dirname(os.path.abspath(__file__))
fx = sys.argv[1]
files = {
    "tricky": os.path.join(here, "tricky.cdl"),
    "ref_tst_mud4": os.path.join(fx, "ncdump_refs/ref_tst_mud4.cdl"),
    "ref_tst_mud4-bc": os.path.join(fx, "ncdump_refs/ref_tst_mud4-bc.cdl"),
    "ref_tst_mud4_chars": os.path.join(fx, "ncdump_refs/ref_tst_mud4_chars.cdl"),
    "ref_tst_nans": os.path.join(fx, "ncdump_refs/cdl/ref_tst_nans.cdl"),
    "ref_dimscope": os.path.join(fx, "ncdump_refs/cdl/ref_dimscope.cdl"),
    "ref_tst_group_data": os.path.join(fx, "ncdump_refs/cdl/ref_tst_group_data.cdl"),
    "ref_string": os.path.join(fx, "nczarr_test/ref_string.cdl"),
}

def num(x):
    x = x.item() if hasattr(x, "item") else x
    if isinstance(x, float) and math.isnan(x):
        return "NaN"
    if isinstance(x, float) and math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x

def walk(g, out):
    for v in g.variables.values():
        v.set_auto_maskandscale(False)
        v.set_auto_chartostring(False)
        a = v[...]
        if v.dtype == str:
            vals = [str(s) for s in np.asarray(a, dtype=object).ravel()]
        elif v.dtype.kind == "S":
            vals = np.asarray(a).tobytes().hex()
        else:
            vals = [num(x) for x in np.asarray(a).ravel()]
        out[v.group().path.rstrip("/") + "/" + v.name] = {
            "shape": list(v.shape),
            "type": "string" if v.dtype == str else str(v.dtype),
            "values": vals,
        }
    for c in g.groups.values():
        walk(c, out)

refs = {}
with tempfile.TemporaryDirectory() as tmp:
    for name, path in files.items():
        nc = os.path.join(tmp, name + ".nc")
        subprocess.run(["ncgen", "-k", "nc4", "-o", nc, path], check=True)
        ds = netCDF4.Dataset(nc)
        vars_ = {}
        walk(ds, vars_)
        atts = {}
        for k in ds.ncattrs():
            a = ds.getncattr(k)
            if isinstance(a, str):
                atts[k] = {"type": "char", "values": a}
            elif isinstance(a, list):
                atts[k] = {"type": "string", "values": a}
            else:
                arr = np.atleast_1d(a)
                atts[k] = {"type": str(arr.dtype), "values": [num(x) for x in arr]}
        refs[name] = {"vars": vars_, "global_attrs": atts}
        ds.close()
json.dump(refs, sys.stdout, indent=1, sort_keys=True)
