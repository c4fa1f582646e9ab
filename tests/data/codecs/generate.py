"""Regenerates the codec reference vectors in this folder with numcodecs.

Run from this folder: python generate.py  (numcodecs 0.16, numpy; netCDF4 for netcdf-c's chunk)
Each entry of manifest.json names a raw input, a numcodecs codec configuration (a Zarr v2
filters/compressor entry), the array element size and the encoded file numcodecs produced.
"""
import json
import os

import numcodecs
import numpy as np

# Inputs: compressible ints, a float wave, and an odd-length byte string (odd Fletcher-32 tail).
inputs = {
    "i4_ramp": (np.arange(128, dtype="<i4") * 3 - 100, 4),
    "f8_wave": (np.sin(np.arange(32, dtype="<f8") / 5.0) * 1000.0, 8),
    "u1_odd": (np.frombuffer(b"The quick brown fox jumps over the lazy dog!", dtype="u1")[:43], 1),
}

configs = [
    ("zlib1", {"id": "zlib", "level": 1}),
    ("zlib9", {"id": "zlib", "level": 9}),
    ("gzip5", {"id": "gzip", "level": 5}),
    ("zstd3", {"id": "zstd", "level": 3, "checksum": False}),
    ("zstd_ck", {"id": "zstd", "level": 1, "checksum": True}),
    ("bz2_9", {"id": "bz2", "level": 9}),
    ("lz4", {"id": "lz4", "acceleration": 1}),
    ("blosc_lz4_sh", {"id": "blosc", "cname": "lz4", "clevel": 5, "shuffle": 1, "blocksize": 0}),
    ("blosc_zstd_bit", {"id": "blosc", "cname": "zstd", "clevel": 3, "shuffle": 2, "blocksize": 0}),
    ("blosc_blosclz_no", {"id": "blosc", "cname": "blosclz", "clevel": 9, "shuffle": 0, "blocksize": 0}),
    ("blosc_lz4hc_auto", {"id": "blosc", "cname": "lz4hc", "clevel": 4, "shuffle": -1, "blocksize": 0}),
    ("blosc_zlib_bs", {"id": "blosc", "cname": "zlib", "clevel": 1, "shuffle": 1, "blocksize": 128}),
    ("shuffle", None),  # elementsize = the input's element size
    ("fletcher32", {"id": "fletcher32"}),
    ("crc32c", {"id": "crc32c"}),
    ("crc32", {"id": "crc32"}),
    ("adler32", {"id": "adler32", "location": "end"}),
]

manifest = []
for iname, (arr, es) in inputs.items():
    raw = arr.tobytes()
    with open(f"{iname}.raw", "wb") as f:
        f.write(raw)
    for cname, cfg in configs:
        if cfg is None:
            cfg = {"id": "shuffle", "elementsize": es}
            if es == 1:
                continue
        if cfg["id"] == "blosc" and iname == "u1_odd" and cname != "blosc_lz4hc_auto":
            continue
        codec = numcodecs.get_codec(dict(cfg))
        enc = bytes(codec.encode(arr))
        assert bytes(codec.decode(enc)) == raw
        fname = f"{iname}.{cname}.bin"
        with open(fname, "wb") as f:
            f.write(enc)
        manifest.append({"input": f"{iname}.raw", "element_size": es, "filters": [],
                         "compressor": cfg, "encoded": fname})

# netcdf-c 4.10.1 (bundled with netCDF4-python) writing shuffle + deflate + fletcher32 and bzip2:
# its own codec spellings ("elementsize": 0, fletcher32 as the compressor) and HDF5's filters.
try:
    import shutil
    import tempfile

    import netCDF4

    tmp = tempfile.mkdtemp()
    arr, es = inputs["i4_ramp"]
    for name, kw in [("ncc_zlib", dict(compression="zlib", complevel=4, shuffle=True, fletcher32=True)),
                     ("ncc_bz2", dict(compression="bzip2", complevel=9, shuffle=False))]:
        url = f"file://{tmp}/{name}.file#mode=nczarr,file"
        ds = netCDF4.Dataset(url, "w")
        ds.createDimension("x", len(arr))
        ds.createVariable("v", "i4", ("x",), **kw)[:] = arr
        ds.close()
        meta = json.load(open(f"{tmp}/{name}.file/v/.zarray"))
        fname = f"i4_ramp.{name}.bin"
        shutil.copy(f"{tmp}/{name}.file/v/0", fname)
        manifest.append({"input": "i4_ramp.raw", "element_size": es, "filters": meta["filters"] or [],
                         "compressor": meta["compressor"], "encoded": fname,
                         "writer": "netcdf-c " + netCDF4.__netcdf4libversion__})
    shutil.rmtree(tmp)
except ImportError:
    print("netCDF4 not available: netcdf-c vectors not regenerated")

with open("manifest.json", "w") as f:
    f.write('{"numcodecs": "%s", "vectors": [\n' % numcodecs.__version__)
    f.write(",\n".join(json.dumps(v) for v in manifest))
    f.write("\n]}\n")
