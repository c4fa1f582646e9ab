"""Stores written by zarr-python (zarr_format=2) and xarray, read back by nczarrfs.

The reference values are zarr-python's own reads of each store; `nczarrfs get --npy` must
return the same values (dtype kind and size, shape, NaN positions). xarray stores also check
that `nczarrfs dump -h` names the dimensions from `_ARRAY_DIMENSIONS`.
"""

from __future__ import annotations

import io
import json
import re
import subprocess

import numcodecs
import numpy as np
import pytest
import xarray as xr
import zarr

SHAPE = (9, 11)
CHUNKS = (4, 3)

COMPRESSORS = {
    "none": None,
    "blosc-lz4-shuffle": numcodecs.Blosc(cname="lz4", clevel=5, shuffle=numcodecs.Blosc.SHUFFLE),
    "blosc-lz4-bitshuffle": numcodecs.Blosc(cname="lz4", shuffle=numcodecs.Blosc.BITSHUFFLE),
    "blosc-zstd-noshuffle": numcodecs.Blosc(cname="zstd", clevel=3, shuffle=numcodecs.Blosc.NOSHUFFLE),
    "blosc-zlib-shuffle": numcodecs.Blosc(cname="zlib", shuffle=numcodecs.Blosc.SHUFFLE),
    "blosc-blosclz-bitshuffle": numcodecs.Blosc(cname="blosclz", shuffle=numcodecs.Blosc.BITSHUFFLE),
    "blosc-lz4hc": numcodecs.Blosc(cname="lz4hc", shuffle=numcodecs.Blosc.SHUFFLE),
    "zstd": numcodecs.Zstd(level=5),
    "zlib": numcodecs.Zlib(level=6),
    "gzip": numcodecs.GZip(level=6),
    "lz4": numcodecs.LZ4(),
    "bz2": numcodecs.BZ2(level=9),
}


def _url(path) -> str:
    return f"file://{path}#mode=zarr,file"


def _get(nczarrfs, location: str, var: str, tmp_path, *extra: str) -> np.ndarray:
    out = tmp_path / "get.npy"
    res = nczarrfs("get", location, var, "--npy", "-o", str(out), *extra)
    assert res.returncode == 0, f"get {var}: {res.stderr.decode(errors='replace')}"
    return np.load(io.BytesIO(out.read_bytes()), allow_pickle=False)


def _text(array: np.ndarray) -> list[str]:
    return [x.decode() if isinstance(x, bytes) else str(x) for x in array.flat]


def assert_same(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    kind = expected.dtype.kind
    if kind in "USOT":
        assert _text(got) == _text(expected), f"{what}: text differs"
        return
    if kind == "b":
        # netCDF has no bool: any integer 0/1 reading is right.
        assert np.array_equal(got.astype(int), expected.astype(int)), f"{what}: values differ"
        return
    assert got.dtype.kind == kind and got.dtype.itemsize == expected.dtype.itemsize, (
        f"{what}: dtype {got.dtype} != {expected.dtype}"
    )
    assert np.array_equal(got, expected, equal_nan=kind == "f"), (
        f"{what}: values differ\n ours     {got!r}\n expected {expected!r}"
    )


def _data(dtype: str, shape=SHAPE) -> np.ndarray:
    rng = np.random.default_rng(7)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        out = rng.normal(size=shape).astype(dt)
        out.flat[::7] = np.nan
        return out
    if dt.kind == "b":
        return rng.random(size=shape) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt.newbyteorder("="))
    if dt.kind in "US":
        words = ["a", "bc", "def", "", "xyz"]
        return np.array([words[i % len(words)] for i in range(int(np.prod(shape)))], dtype=dt).reshape(shape)
    raise ValueError(dtype)


def _array(group, name, data, **kwargs):
    kwargs.setdefault("chunks", tuple(min(c, n) for c, n in zip(CHUNKS, data.shape)))
    kwargs.setdefault("attributes", {"_ARRAY_DIMENSIONS": [f"d{i}_{n}" for i, n in enumerate(data.shape)]})
    arr = group.create_array(name, shape=data.shape, dtype=data.dtype, **kwargs)
    arr[...] = data
    return arr


@pytest.mark.parametrize("compressor", list(COMPRESSORS))
@pytest.mark.parametrize("dtype", ["<f4", "<i8", "<u2"])
def test_compressors(nczarrfs, tmp_path, compressor, dtype):
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    _array(root, "v", _data(dtype), compressors=COMPRESSORS[compressor])
    expected = zarr.open_array(str(path / "v"), mode="r")[...]
    assert_same(_get(nczarrfs, _url(path), "v", tmp_path), expected, f"{compressor} {dtype}")


@pytest.mark.parametrize(
    "dtype", ["|b1", "|i1", "|u1", "<i2", ">i2", "<u4", ">i4", ">u8", ">f4", ">f8", "<f8", "|S3", "<U5"]
)
def test_dtypes(nczarrfs, tmp_path, dtype):
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    _array(root, "v", _data(dtype), compressors=numcodecs.Zlib(level=1))
    expected = zarr.open_array(str(path / "v"), mode="r")[...]
    assert_same(_get(nczarrfs, _url(path), "v", tmp_path), expected, dtype)


@pytest.mark.parametrize("dtype", ["<f2", ">f2"])
def test_half_floats_read_as_float(nczarrfs, tmp_path, dtype):
    """netCDF has no half float: as in Zarr v3 stores, `<f2` is read widened to float."""
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    _array(root, "v", _data(dtype), compressors=numcodecs.Zlib(level=1), fill_value=-1.5)
    expected = zarr.open_array(str(path / "v"), mode="r")[...].astype("<f4")
    assert_same(_get(nczarrfs, _url(path), "v", tmp_path), expected, dtype)
    header = nczarrfs("dump", "-h", _url(path))
    assert header.returncode == 0 and b"float v(" in header.stdout, header.stderr.decode()


def test_fortran_order(nczarrfs, tmp_path):
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    _array(root, "v", _data("<i4"), order="F", compressors=numcodecs.Zstd(level=1))
    assert zarr.open_array(str(path / "v")).metadata.order == "F"
    expected = zarr.open_array(str(path / "v"), mode="r")[...]
    assert_same(_get(nczarrfs, _url(path), "v", tmp_path), expected, "order F")


def _object_strings(shape, seed=3) -> np.ndarray:
    words = ["", "a", "bc", "déjà vu", "ключ", "x" * 300, "tab\tand\nnewline"]
    picks = np.random.default_rng(seed).integers(0, len(words), size=int(np.prod(shape)))
    return np.array([words[i] for i in picks], dtype=object).reshape(shape)


@pytest.mark.parametrize("compressor", ["none", "zstd", "blosc-lz4-shuffle"])
@pytest.mark.parametrize("order", ["C", "F"])
def test_object_strings(nczarrfs, tmp_path, compressor, order):
    """Object arrays of strings (`|O` with `vlen-utf8`, xarray's default for `str` in Zarr v2)
    read as netCDF strings as wide as the longest value; unwritten chunks read as the fill."""
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    arr = root.create_array("v", shape=SHAPE, dtype=str, chunks=CHUNKS, order=order,
                            compressors=COMPRESSORS[compressor], fill_value="fill",
                            attributes={"_ARRAY_DIMENSIONS": ["r", "c"]})
    arr[:5, :] = _object_strings((5, SHAPE[1]))
    expected = zarr.open_array(str(path / "v"), mode="r")[...]
    got = _get(nczarrfs, _url(path), "v", tmp_path)
    assert_same(got, expected, f"{compressor} order {order}")
    assert got.dtype.itemsize == max(len(x.encode()) for x in expected.flat)


def test_object_byte_strings(nczarrfs, tmp_path):
    """`vlen-bytes` object arrays read as strings too, their bytes as they are."""
    from zarr.core.dtype import VariableLengthBytes

    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    values = np.array([b"ab", b"\xff\xfe raw", b"", b"q", b"long bytes", b"x"], dtype=object)
    # zarr-python stores a vlen-bytes fill as base64; the last chunk stays unwritten.
    arr = root.create_array("v", shape=(8,), dtype=VariableLengthBytes(), chunks=(2,),
                            compressors=numcodecs.Zlib(level=1), fill_value=b"FILL",
                            attributes={"_ARRAY_DIMENSIONS": ["n"]})
    arr[:6] = values
    expected = list(zarr.open_array(str(path / "v"), mode="r")[...])
    assert [bytes(x) for x in _get(nczarrfs, _url(path), "v", tmp_path)] == expected


@pytest.mark.parametrize("fill", [0, 12345, 1.5, True, "", None])
def test_object_string_fills_of_other_json_types(nczarrfs, tmp_path, fill):
    """An object array's fill of another JSON type reads as zarr-python reads it."""
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    arr = root.create_array("v", shape=(4,), dtype=str, chunks=(2,),
                            attributes={"_ARRAY_DIMENSIONS": ["n"]})
    arr[:2] = ["a", "bc"]
    zarray = path / "v" / ".zarray"
    meta = json.loads(zarray.read_text())
    meta["fill_value"] = fill
    zarray.write_text(json.dumps(meta))
    expected = zarr.open_array(str(path / "v"), mode="r")[...]
    assert_same(_get(nczarrfs, _url(path), "v", tmp_path), expected, f"fill {fill!r}")


def test_object_arrays_of_other_codecs_are_refused_by_name(nczarrfs, tmp_path):
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    _array(root, "v", np.array([1, 2], dtype="<i4"))
    zarray = path / "v" / ".zarray"
    meta = json.loads(zarray.read_text())
    meta.update(dtype="|O", filters=[{"id": "json2"}], compressor=None)
    zarray.write_text(json.dumps(meta))
    res = nczarrfs("get", _url(path), "v", "-o", str(tmp_path / "out"))
    assert res.returncode != 0
    assert "/v" in res.stderr.decode() and '"|O"' in res.stderr.decode(), res.stderr.decode()


def test_slash_separator_and_groups(nczarrfs, tmp_path):
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    sub = root.create_group("g1").create_group("g2")
    sep = {"name": "v2", "separator": "/"}
    _array(root, "top", _data("<f8"), chunk_key_encoding=sep)
    _array(sub, "deep", _data("<i2"), chunk_key_encoding=sep)
    assert (path / "top" / "0" / "0").exists()
    for var, key in (("top", "top"), ("/g1/g2/deep", "g1/g2/deep")):
        expected = zarr.open_array(str(path / key), mode="r")[...]
        assert_same(_get(nczarrfs, _url(path), var, tmp_path), expected, var)


def test_consolidated(nczarrfs, tmp_path):
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    _array(root, "a", _data("<f4"))
    _array(root.create_group("g"), "b", _data("<u1"))
    zarr.consolidate_metadata(str(path))
    assert (path / ".zmetadata").exists()
    for var, key in (("a", "a"), ("/g/b", "g/b")):
        expected = zarr.open_array(str(path / key), mode="r")[...]
        assert_same(_get(nczarrfs, _url(path) + ",consolidated", var, tmp_path), expected, var)


def test_fill_nan_unwritten_chunks(nczarrfs, tmp_path):
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    arr = root.create_array("v", shape=SHAPE, chunks=CHUNKS, dtype="<f8", fill_value=np.nan)
    arr[:4, :3] = 1.25  # one chunk written, the rest never stored
    expected = zarr.open_array(str(path / "v"), mode="r")[...]
    assert np.isnan(expected).sum() == expected.size - 12
    assert_same(_get(nczarrfs, _url(path), "v", tmp_path), expected, "NaN fill")


def test_fill_none_fully_written(nczarrfs, tmp_path):
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    _array(root, "v", _data("<i4"), fill_value=None)
    assert zarr.open_array(str(path / "v")).metadata.fill_value is None
    expected = zarr.open_array(str(path / "v"), mode="r")[...]
    assert_same(_get(nczarrfs, _url(path), "v", tmp_path), expected, "fill None")


@pytest.mark.parametrize("dtype", ["<i4", "|b1"])
def test_fill_none_unwritten_chunks_are_zeros(nczarrfs, tmp_path, dtype):
    """`fill_value: null` (xarray writes it for every non-float v2 variable) means no fill:
    zarr-python and netcdf-c read unwritten chunks as zeros, and so must a partial write."""
    import netCDF4

    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    arr = root.create_array("v", shape=(6,), chunks=(2,), dtype=dtype, fill_value=None,
                            attributes={"_ARRAY_DIMENSIONS": ["x"]})
    arr[:2] = np.ones(2, dtype=dtype)  # one chunk stored, two never written
    expected = zarr.open_array(str(path / "v"), mode="r")[...]
    if dtype != "|b1":  # netcdf-c cannot open a bool array
        with netCDF4.Dataset(_url(path)) as nc:
            nc["v"].set_auto_mask(False)
            assert np.array_equal(np.asarray(nc["v"][:]), expected)
    assert_same(_get(nczarrfs, _url(path), "v", tmp_path), expected, "fill None")

    # A partial write of a chunk never written keeps its other elements zero for zarr-python.
    one = tmp_path / "one.bin"
    np.ones(1, dtype=dtype).tofile(one)
    res = nczarrfs("put", _url(path), "v", "--start", "3", "--count", "1", "-i", str(one))
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    expected[3] = 1
    after = zarr.open_array(str(path / "v"), mode="r")[...]
    assert np.array_equal(after.astype(int), expected.astype(int)), after


def test_without_array_dimensions(nczarrfs, tmp_path):
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    _array(root, "v", _data("<f4"), attributes={"units": "m"})
    expected = zarr.open_array(str(path / "v"), mode="r")[...]
    assert_same(_get(nczarrfs, _url(path), "v", tmp_path), expected, "anonymous dims")
    res = nczarrfs("dump", "-h", _url(path))
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    # netcdf-c names anonymous dims after their length.
    text = res.stdout.decode()
    assert "_Anonymous_Dim_9 = 9 ;" in text and "_Anonymous_Dim_11 = 11 ;" in text, text


def test_xarray_to_zarr(nczarrfs, tmp_path):
    path = tmp_path / "xr.zarr"
    ds = xr.Dataset(
        {
            "temp": (("time", "lat"), _data("<f4", (5, 4)), {"units": "K"}),
            "count": (("lat",), np.arange(4, dtype="<i8")),
        },
        coords={"time": np.arange(5, dtype="<f8"), "lat": np.linspace(-30, 30, 4)},
        attrs={"title": "xarray store"},
    )
    ds.to_zarr(str(path), zarr_format=2, consolidated=True, mode="w")
    back = xr.open_zarr(str(path), consolidated=True, mask_and_scale=False)
    for var in ("temp", "count", "time", "lat"):
        assert_same(_get(nczarrfs, _url(path), var, tmp_path), back[var].values, var)

    res = nczarrfs("dump", "-h", _url(path))
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    text = res.stdout.decode()
    dims = dict(re.findall(r"^\t(\w+) = (\d+) ;$", text.split("variables:")[0], re.M))
    assert dims == {"time": "5", "lat": "4"}, text
    assert re.search(r"^\tfloat temp\(time, lat\) ;$", text, re.M), text
    assert re.search(r"^\t\ttemp:units = \"K\" ;$", text, re.M), text
    assert re.search(r'^\t\t:title = "xarray store" ;$', text, re.M), text
    assert "_ARRAY_DIMENSIONS" not in text


def test_xarray_string_variables_dump_as_ncdump(nczarrfs, tmp_path):
    """An xarray dataset with `str` variables, as Zarr v2 and as netCDF-4 (netCDF4-python):
    `dump` of the one equals Debian's `ncdump` of the other."""
    import netCDF4

    words = _object_strings((3, 4))
    zpath, hpath = tmp_path / "twin.zarr", tmp_path / "twin.nc"
    xr.Dataset({"n": ("x", np.arange(3)), "words": (("x", "y"), words)}).to_zarr(
        str(zpath), zarr_format=2, consolidated=True)
    with netCDF4.Dataset(hpath, "w") as nc:
        nc.createDimension("x", 3)
        nc.createDimension("y", 4)
        nc.createVariable("n", "i8", ("x",))[:] = np.arange(3)
        nc.createVariable("words", str, ("x", "y"))[:] = words
    expected = subprocess.run(["ncdump", str(hpath)], capture_output=True, check=True).stdout
    ours = nczarrfs("dump", str(zpath))
    assert ours.returncode == 0, ours.stderr.decode(errors="replace")
    assert ours.stdout.decode() == expected.decode()


def test_xarray_string_variables_copy_to_nczarr(nczarrfs, tmp_path):
    """netcdf-c cannot read object arrays; `copy` writes them as NCZarr strings, which it reads."""
    import netCDF4

    words = _object_strings((5,))
    src, dst = tmp_path / "xr.zarr", tmp_path / "copy.file"
    xr.Dataset({"words": ("x", words)}).to_zarr(str(src), zarr_format=2, consolidated=True)
    res = nczarrfs("copy", str(src), f"file://{dst}#mode=nczarr,file")
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    with netCDF4.Dataset(f"file://{dst}#mode=nczarr,file") as nc:
        assert list(nc["words"][:]) == list(words)


def test_get_failing_on_a_chunk_names_it_and_keeps_the_old_output(nczarrfs, tmp_path):
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    _array(root, "v", _data("<i4"), compressors=numcodecs.Zlib(level=1))
    good = (path / "v" / "1.2").read_bytes()
    (path / "v" / "1.2").write_bytes(b"not zlib")
    out = tmp_path / "values.bin"
    out.write_bytes(b"previous content")
    res = nczarrfs("get", _url(path), "v", "-o", str(out))
    err = res.stderr.decode()
    assert res.returncode == 1
    assert '"v/1.2"' in err and str(out) not in err, err
    assert out.read_bytes() == b"previous content"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["store.zarr", "values.bin"]
    # A good read replaces it.
    (path / "v" / "1.2").write_bytes(good)
    assert nczarrfs("get", _url(path), "v", "-o", str(out)).returncode == 0
    assert out.read_bytes() == zarr.open_array(str(path / "v"), mode="r")[...].tobytes()


def test_a_damaged_object_chunk_fails_alone(nczarrfs, tmp_path):
    """Measuring the width skips a chunk that cannot be decoded: the others still read whole
    (here a 300-byte value), and only reads of that chunk fail, naming it."""
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    arr = root.create_array("v", shape=(4,), dtype=str, chunks=(2,), compressors=None,
                            attributes={"_ARRAY_DIMENSIONS": ["n"]})
    arr[:] = ["a", "b", "x" * 300, "yz"]
    damaged = path / "v" / "0"
    damaged.write_bytes(damaged.read_bytes()[:-1])
    url = _url(path)
    got = _get(nczarrfs, url, "v", tmp_path, "--start", "2", "--count", "2")
    assert _text(got) == ["x" * 300, "yz"]
    res = nczarrfs("get", url, "v", "-o", str(tmp_path / "all"))
    assert res.returncode == 1 and '"v/0"' in res.stderr.decode(), res.stderr.decode()


@pytest.mark.parametrize("fmt", ["v2", "v2-consolidated", "v3"])
def test_hidden_names_are_skipped_with_a_warning(nczarrfs, tmp_path, fmt):
    """zarr-python lists arrays and groups whose names begin with `.`; netcdf-c skips them,
    and so does nczarrfs, but it says so (once per name) rather than letting `copy` drop them
    unnoticed."""
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3 if fmt == "v3" else 2)
    _array(root, ".hidden", _data("<i2", (3,)))
    _array(root, "visible", _data("<i2", (3,)))
    _array(root.create_group(".hgroup"), "inner", _data("<i2", (3,)))
    if fmt == "v2-consolidated":
        zarr.consolidate_metadata(str(path))
    listed = zarr.open_group(str(path), mode="r")
    assert sorted(listed.array_keys()) == [".hidden", "visible"]
    assert sorted(listed.group_keys()) == [".hgroup"]
    location = f"file://{path}#mode=zarr,{'v3' if fmt == 'v3' else 'v2'},file"
    for args in (("dump", "-h", location), ("copy", "-k", "zarr", location, str(tmp_path / "c.zarr"))):
        res = nczarrfs(*args)
        assert res.returncode == 0, res.stderr.decode(errors="replace")
        stderr = res.stderr.decode()
        for what, name in (("array", ".hidden"), ("group", ".hgroup")):
            line = f'ignoring {what} "{name}": names beginning with "." are skipped'
            assert stderr.count(line) == 1, f"{args[0]}: {stderr}"
    copied = zarr.open_group(str(tmp_path / "c.zarr"), mode="r")
    assert sorted(copied.array_keys()) == ["visible"]


@pytest.mark.parametrize("mode", ["nczarr", "zarr"])
def test_gen_takes_dump_s_of_xarray_string_variables(nczarrfs, tmp_path, mode):
    """`dump -s` shows an xarray `str` variable's `_Codecs` with its `vlen-utf8` string
    encoding first; `gen` takes that chain (the string encoding is the target type's) and
    keeps its compressor, and the values read back in netCDF4-python / zarr-python."""
    import netCDF4

    words = _object_strings((5,))
    src = tmp_path / "xr.zarr"
    xr.Dataset({"words": ("x", words)}).to_zarr(
        str(src), zarr_format=2, consolidated=False,
        encoding={"words": {"compressors": [numcodecs.Zstd(level=4)]}})
    dumped = nczarrfs("dump", "-s", str(src))
    assert dumped.returncode == 0, dumped.stderr.decode(errors="replace")
    assert b'\\"vlen-utf8\\"' in dumped.stdout
    cdl, dst = tmp_path / "xr.cdl", tmp_path / "out"
    cdl.write_bytes(dumped.stdout)
    res = nczarrfs("gen", "-k", mode, "-o", str(dst), str(cdl))
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    assert json.loads((dst / "words" / ".zarray").read_text())["compressor"]["id"] == "zstd"
    if mode == "nczarr":
        with netCDF4.Dataset(f"file://{dst}#mode=nczarr,file") as nc:
            assert list(nc["words"][:]) == list(words)
    else:
        assert _text(zarr.open_group(str(dst), mode="r")["words"][...]) == list(words)
    copied = nczarrfs("copy", "--codec", '[{"id": "vlen-utf8"}, {"id": "zlib", "level": 1}]',
                      str(src), str(tmp_path / "copy.file"))
    assert copied.returncode == 0, copied.stderr.decode(errors="replace")


def test_zip_after_other_data_is_found_by_its_path(nczarrfs, tmp_path):
    """A zip archive may follow other bytes (a self-extracting stub, `cat stub a.zip`): zip
    readers find it from its end record. zarr-python's ZipStore reads such a file, so the
    plain path must too, as `#mode=zarr,zip` already did."""
    from zarr.storage import ZipStore

    data = _data("<i4")
    with ZipStore(tmp_path / "plain.zip", mode="w") as store:
        _array(zarr.open_group(store, mode="w", zarr_format=2), "a", data, compressors=None)
    stubbed = tmp_path / "stubbed.zip"
    stubbed.write_bytes(b"#!/bin/sh\necho stub\nexit 0\n" + bytes(100)
                        + (tmp_path / "plain.zip").read_bytes())
    with ZipStore(stubbed, mode="r") as store:
        want = zarr.open_group(store, mode="r")["a"][...]
    assert np.array_equal(want, data)
    assert_same(_get(nczarrfs, str(stubbed), "a", tmp_path), want, "stubbed zip by path")
    # Bytes that are no archive at all are still refused as such.
    other = tmp_path / "other.bin"
    other.write_bytes(b"not an archive, though PK\x05\x06 appears inside" + bytes(40))
    res = nczarrfs("dump", str(other))
    assert res.returncode != 0 and b"neither a directory nor a zip archive" in res.stderr
