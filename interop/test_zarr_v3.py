"""Zarr v3 stores written by zarr-python 3, read back by nczarrfs.

The reference values are zarr-python's own reads of each store: `nczarrfs get --npy`, and the
variable's `data` file through a read-only mount, must return the same values (netCDF has no bool or half float: bool reads as ubyte 0/1 and float16
as float32 of the same values; strings come back as NUL-padded UTF-8). `nczarrfs dump -h` must
show the dimensions from `dimension_names` (unnamed ones as `_Anonymous_Dim_<len>` in the root
group) and the attributes.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import time

import numpy as np
import pytest
import zarr
from zarr.codecs import (
    BloscCodec,
    BytesCodec,
    Crc32cCodec,
    GzipCodec,
    ShardingCodec,
    TransposeCodec,
    ZstdCodec,
)

SHAPE = (9, 11)
CHUNKS = (4, 3)


def _get(nczarrfs, path, var: str, tmp_path, *extra: str) -> np.ndarray:
    out = tmp_path / "get.npy"
    res = nczarrfs("get", str(path), var, "--npy", "-o", str(out), *extra)
    assert res.returncode == 0, f"get {var}: {res.stderr.decode(errors='replace')}"
    return np.load(io.BytesIO(out.read_bytes()), allow_pickle=False)


def _mounted(path, var: str, tmp_path) -> np.ndarray:
    """The variable's `data` file through a read-only mount, read with numpy.fromfile (dtype
    and shape from its @metadata.json)."""
    from conftest import nczarrfs_binary

    mnt = tmp_path / "mnt"
    mnt.mkdir(exist_ok=True)
    res = subprocess.run([str(nczarrfs_binary()), "mount", str(path), str(mnt)],
                         capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    try:
        d = mnt / var
        meta = json.loads((d / "@metadata.json").read_text())
        return np.fromfile(d / "data", dtype=np.dtype(meta["dtype"])).reshape(meta["shape"])
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True)
        for _ in range(100):
            if not os.path.ismount(mnt):
                break
            time.sleep(0.05)


def _header(nczarrfs, path) -> str:
    res = nczarrfs("dump", "-h", str(path))
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    return res.stdout.decode()


def _text(array: np.ndarray) -> list[str]:
    return [x.decode() if isinstance(x, bytes) else str(x) for x in array.flat]


def assert_same(got: np.ndarray, expected: np.ndarray, what: str) -> None:
    assert got.shape == expected.shape, f"{what}: shape {got.shape} != {expected.shape}"
    kind = expected.dtype.kind
    if kind in "USOT":
        assert _text(got) == _text(expected), f"{what}: text differs"
        return
    if kind == "b":
        assert got.dtype == np.uint8, f"{what}: bool read as {got.dtype}"
        assert np.array_equal(got, expected.astype(np.uint8)), f"{what}: values differ"
        return
    if kind == "f" and expected.dtype.itemsize == 2:
        expected = expected.astype(np.float32)
    assert got.dtype.kind == kind and got.dtype.itemsize == expected.dtype.itemsize, (
        f"{what}: dtype {got.dtype} != {expected.dtype}"
    )
    assert np.array_equal(got, expected, equal_nan=kind == "f"), (
        f"{what}: values differ\n ours     {got!r}\n expected {expected!r}"
    )


def _data(dtype, shape=SHAPE) -> np.ndarray:
    rng = np.random.default_rng(11)
    n = int(np.prod(shape))
    if dtype in (str, "vlen-str"):
        words = ["a", "bc", "", "héllo wörld", "x" * 40]
        return np.array([words[i % len(words)] for i in range(n)], dtype=object).reshape(shape)
    if dtype == "vlen-bytes":
        words = [b"a", b"\x00\x01b", b"", b"zz" * 10]
        return np.array([words[i % len(words)] for i in range(n)], dtype=object).reshape(shape)
    dt = np.dtype(dtype)
    if dt.kind == "f":
        out = rng.normal(size=shape).astype(dt)
        out.flat[::7] = np.nan
        if out.size > 3:
            out.flat[3] = np.inf
        return out
    if dt.kind == "b":
        return rng.random(size=shape) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(info.min, info.max, size=shape, endpoint=True, dtype=dt.newbyteorder("="))
    if dt.kind in "US":
        words = ["a", "bc", "def", "", "xyz"]
        return np.array([words[i % len(words)] for i in range(n)], dtype=dt).reshape(shape)
    raise ValueError(dtype)


def _zarr_dtype(dtype):
    if dtype == "vlen-str":
        return str
    if dtype == "vlen-bytes":
        return zarr.dtype.VariableLengthBytes()
    return dtype


def _store(tmp_path, name="store.zarr"):
    path = tmp_path / name
    return path, zarr.open_group(str(path), mode="w", zarr_format=3)


def _expected(path, var):
    return zarr.open_array(str(path / var), mode="r")[...]


DTYPES = [
    "bool", "int8", "uint8", "<i2", ">i2", "<u2", "<i4", ">u4", "<i8", ">u8",
    "<f2", ">f2", "<f4", ">f4", "<f8", ">f8", "<U5", "S3", "vlen-str", "vlen-bytes",
]


@pytest.mark.parametrize("sharded", [False, True], ids=["plain", "sharded"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_dtypes(nczarrfs, tmp_path, dtype, sharded):
    path, root = _store(tmp_path)
    data = _data(dtype)
    kwargs = {"shards": (8, 6)} if sharded else {}
    arr = root.create_array(
        "v", shape=data.shape, dtype=_zarr_dtype(dtype), chunks=CHUNKS, dimension_names=["y", "x"], **kwargs
    )
    arr[...] = data
    expected = _expected(path, "v")
    assert_same(_get(nczarrfs, path, "v", tmp_path), expected, f"{dtype} sharded={sharded}")
    assert_same(_mounted(path, "v", tmp_path), expected, f"mount: {dtype} sharded={sharded}")


CODECS = {
    "bytes-only": dict(compressors=None),
    "gzip": dict(compressors=GzipCodec(level=5)),
    "zstd": dict(compressors=ZstdCodec(level=3, checksum=True)),
    "blosc-lz4-shuffle": dict(compressors=BloscCodec(cname="lz4", clevel=5, shuffle="shuffle")),
    "blosc-zstd-bitshuffle": dict(compressors=BloscCodec(cname="zstd", shuffle="bitshuffle")),
    "blosc-noshuffle": dict(compressors=BloscCodec(cname="blosclz", shuffle="noshuffle")),
    "crc32c": dict(compressors=[ZstdCodec(level=1), Crc32cCodec()]),
    "big-endian": dict(serializer=BytesCodec(endian="big"), compressors=GzipCodec()),
    "transpose": dict(filters=[TransposeCodec(order=(1, 0))], compressors=ZstdCodec()),
}


@pytest.mark.parametrize("sharded", [False, True], ids=["plain", "sharded"])
@pytest.mark.parametrize("codecs", list(CODECS))
@pytest.mark.parametrize("dtype", ["<f4", "<i8", "<u2"])
def test_codecs(nczarrfs, tmp_path, codecs, dtype, sharded):
    path, root = _store(tmp_path)
    data = _data(dtype)
    kwargs = dict(CODECS[codecs])
    if sharded:
        # zarr-python puts array-to-array codecs (transpose) outside the shard.
        kwargs["shards"] = (8, 9)
    arr = root.create_array("v", shape=data.shape, dtype=dtype, chunks=CHUNKS, **kwargs)
    arr[...] = data
    expected = _expected(path, "v")
    assert_same(_get(nczarrfs, path, "v", tmp_path), expected, f"{codecs} {dtype}")
    assert_same(_mounted(path, "v", tmp_path), expected, f"mount: {codecs} {dtype}")


def test_transpose_3d(nczarrfs, tmp_path):
    path, root = _store(tmp_path)
    data = np.arange(2 * 5 * 7, dtype="<i4").reshape(2, 5, 7)
    arr = root.create_array(
        "v", shape=data.shape, dtype=data.dtype, chunks=(2, 3, 4), filters=[TransposeCodec(order=(2, 0, 1))]
    )
    arr[...] = data
    assert_same(_get(nczarrfs, path, "v", tmp_path), _expected(path, "v"), "transpose 3-d")


@pytest.mark.parametrize("index_location", ["end", "start"])
def test_sharded_hyperslabs_and_missing_chunks(nczarrfs, tmp_path, index_location):
    path, root = _store(tmp_path)
    shape = (20, 30)
    arr = root.create_array(
        "v",
        shape=shape,
        dtype="<f8",
        fill_value=-9.5,
        serializer=ShardingCodec(
            chunk_shape=(3, 4),
            codecs=[BytesCodec(), GzipCodec()],
            index_location=index_location,
        ),
        compressors=None,
        chunks=(12, 16),
    )
    data = np.arange(600, dtype="<f8").reshape(shape)
    # Leave inner chunks, and a whole shard, unwritten: they read as the fill value.
    arr[0:5, 0:9] = data[0:5, 0:9]
    arr[13:20, 17:30] = data[13:20, 17:30]
    expected = _expected(path, "v")
    assert_same(_get(nczarrfs, path, "v", tmp_path), expected, "whole")
    for start, count, stride in [
        ((1, 2), (4, 5), (1, 1)),
        ((0, 0), (7, 8), (3, 4)),
        ((12, 15), (8, 15), (1, 1)),
        ((19, 29), (1, 1), (1, 1)),
    ]:
        got = _get(
            nczarrfs, path, "v", tmp_path,
            "--start", ",".join(map(str, start)),
            "--count", ",".join(map(str, count)),
            "--stride", ",".join(map(str, stride)),
        )
        sel = tuple(slice(s, s + (c - 1) * k + 1, k) for s, c, k in zip(start, count, stride))
        assert_same(got, expected[sel], f"slab {start} {count} {stride}")


@pytest.mark.parametrize(
    "dtype,fill",
    [
        ("<f4", float("nan")),
        ("<f8", float("-inf")),
        ("<f4", float("inf")),
        ("<f2", 1.5),
        ("<i2", -7),
        ("<u8", 2**64 - 2),
        ("bool", True),
        ("<U4", "ab"),
        ("S3", b"xy"),
        ("vlen-str", "zz"),
    ],
)
def test_fill_values(nczarrfs, tmp_path, dtype, fill):
    path, root = _store(tmp_path)
    arr = root.create_array("v", shape=(7,), dtype=_zarr_dtype(dtype), chunks=(3,), fill_value=fill)
    arr[0] = _data(dtype, (1,))[0]
    assert_same(_get(nczarrfs, path, "v", tmp_path), _expected(path, "v"), f"fill {fill!r}")


def test_scalar_and_separators(nczarrfs, tmp_path):
    path, root = _store(tmp_path)
    s = root.create_array("s", shape=(), dtype="<i4", fill_value=0)
    s[...] = 42
    dot = root.create_array(
        "dot", shape=(5, 4), dtype="<i2", chunks=(2, 2), chunk_key_encoding={"name": "default", "separator": "."}
    )
    dot[...] = np.arange(20).reshape(5, 4)
    v2 = root.create_array(
        "v2keys", shape=(5, 4), dtype="<i2", chunks=(2, 2), chunk_key_encoding={"name": "v2", "separator": "/"}
    )
    v2[...] = np.arange(20).reshape(5, 4) * 2
    assert (path / "dot" / "c.1.1").exists() and (path / "v2keys" / "1" / "1").exists()
    for var in ["s", "dot", "v2keys"]:
        assert_same(_get(nczarrfs, path, var, tmp_path), _expected(path, var), var)


def _dims(header: str) -> dict[str, list[tuple[str, int]]]:
    """Group path -> [(dimension, length)] from a CDL header."""
    out: dict[str, list[tuple[str, int]]] = {}
    group = "/"
    in_dims = False
    stack = []
    for line in header.splitlines():
        s = line.strip()
        m = re.match(r"group: (\S+) \{", s)
        if m:
            stack.append(group)
            group = group.rstrip("/") + "/" + m.group(1)
            continue
        if s.startswith("} // group"):
            group = stack.pop()
            continue
        if s == "dimensions:":
            in_dims = True
            continue
        if s.endswith(":"):
            in_dims = False
            continue
        m = re.match(r"(\S+) = (\d+|UNLIMITED)", s)
        if in_dims and m:
            out.setdefault(group, []).append((m.group(1), int(m.group(2))))
    return out


@pytest.mark.parametrize("consolidated", [False, True], ids=["listed", "consolidated"])
def test_groups_dimension_names_and_attributes(nczarrfs, tmp_path, consolidated):
    path, root = _store(tmp_path)
    root.attrs.update({"title": "v3 store", "version": 3, "scale": [1.5, 2.0]})
    a = root.create_array("a", shape=(4, 6), dtype="<f4", dimension_names=["y", "x"])
    a[...] = 1
    b = root.create_array("b", shape=(4,), dtype="<i4", dimension_names=["y"], attributes={"units": "m"})
    b[...] = np.arange(4)
    # No names: anonymous root dimensions, shared by length.
    root.create_array("anon", shape=(6, 5), dtype="<i2")
    # One named dimension and one unnamed.
    root.create_array("half", shape=(4, 5), dtype="<i2", dimension_names=["y", None])
    g = root.create_group("g")
    g.attrs["kind"] = "sub"
    # Same name, other length: a new dimension in the subgroup.
    c = g.create_array("c", shape=(3,), dtype="<u1", dimension_names=["x"], attributes={"ints": [1, 2, 3]})
    c[...] = [1, 2, 3]
    # An implicit group: a directory without zarr.json that holds an array.
    zarr.open_group(str(path / "imp" / "deep"), mode="w", zarr_format=3).create_array(
        "d", shape=(2,), dtype="<f8", dimension_names=["x"]
    )[...] = [0.5, 1.5]
    if consolidated:
        zarr.consolidate_metadata(str(path))
        # Prove the consolidated metadata is what is read: hide the objects of the nodes it
        # records.
        meta = zarr.open_group(str(path), mode="r", use_consolidated=True).metadata
        recorded = meta.consolidated_metadata.flattened_metadata
        assert "g/c" in recorded
        # zarr-python does not record the implicit group; its consolidated view, which is the
        # one to follow, has no "imp".
        assert not any(name.startswith("imp") for name in recorded)
        for name in recorded:
            node = path / name / "zarr.json"
            node.rename(node.with_name("zarr.json.hidden"))

    header = _header(nczarrfs, path)
    dims = _dims(header)
    assert dims["/"] == [("y", 4), ("x", 6), ("_Anonymous_Dim_6", 6), ("_Anonymous_Dim_5", 5)], header
    assert dims["/g"] == [("x", 3)], header
    assert re.search(r"float a\(y, x\)", header), header
    assert re.search(r"short anon\(_Anonymous_Dim_6, _Anonymous_Dim_5\)", header), header
    assert re.search(r"short half\(y, _Anonymous_Dim_5\)", header), header
    assert re.search(r"ubyte c\(x\)", header), header
    assert ':title = "v3 store" ;' in header
    assert ":version = 3 ;" in header
    assert ":scale = 1.5, 2. ;" in header
    assert 'b:units = "m" ;' in header
    assert ':kind = "sub" ;' in header
    assert "c:ints = 1, 2, 3 ;" in header
    assert_same(_get(nczarrfs, path, "g/c", tmp_path), np.array([1, 2, 3], dtype="u1"), "g/c")
    if consolidated:
        assert "group: imp {" not in header, header
        return
    assert "group: imp {" in header and "group: deep {" in header
    assert re.search(r"double d\(x\)", header), header
    assert dims["/imp/deep"] == [("x", 2)], header
    assert_same(_get(nczarrfs, path, "imp/deep/d", tmp_path), np.array([0.5, 1.5]), "implicit")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_xarray_base64_fill_value_attribute(nczarrfs, tmp_path, dtype):
    """xarray writes a float variable's `_FillValue` attribute in Zarr v3 as base64 of a
    double: it is the number, and a copy to NCZarr masks it in netCDF4-python as xarray
    masks the original."""
    import json

    import netCDF4
    import xarray as xr

    path = tmp_path / "xr.zarr"
    ds = xr.Dataset({"t": (("x",), np.array([1.0, np.nan, 3.0]))})
    ds.to_zarr(str(path), zarr_format=3, mode="w",
               encoding={"t": {"dtype": dtype, "_FillValue": -9999.0}})
    stored = json.loads((path / "t" / "zarr.json").read_text())["attributes"]["_FillValue"]
    assert isinstance(stored, str), stored  # base64, as this test is about
    expected = xr.open_zarr(str(path))["t"].values

    res = nczarrfs("dump", f"file://{path}#mode=zarr,file")
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    # ncdump's spelling of the float and the double -9999.
    suffix = "f" if dtype == "float32" else ""
    assert f"t:_FillValue = -9999.{suffix} ;" in res.stdout.decode(), res.stdout.decode()
    assert " t = 1, _, 3 ;" in res.stdout.decode(), res.stdout.decode()

    copy = tmp_path / "copy.file"
    res = nczarrfs("copy", f"file://{path}#mode=zarr,file", str(copy))
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    with netCDF4.Dataset(f"file://{copy}#mode=nczarr,file") as nc:
        got = nc["t"][:]
        assert nc["t"].getncattr("_FillValue") == -9999.0
    assert np.array_equal(np.ma.filled(got.astype("f8"), np.nan), expected, equal_nan=True)


@pytest.mark.parametrize("node", ["array", "group"])
def test_unknown_fields_that_must_be_understood_refuse_the_node(nczarrfs, tmp_path, node):
    """As the Zarr v3 specification says and zarr-python does: an extension field without
    `"must_understand": false` refuses the node (an array stays visible, unreadable);
    with it, the field is ignored."""
    path = tmp_path / "store.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    root.create_array("a", shape=(2,), dtype="<i4")[:] = [1, 2]
    meta_path = path / ("a" if node == "array" else "") / "zarr.json"
    meta = json.loads(meta_path.read_text())

    meta["extension"] = {"must_understand": False, "x": 1}
    meta_path.write_text(json.dumps(meta))
    assert zarr.open_array(str(path / "a"), mode="r")[...].tolist() == [1, 2]
    assert _get(nczarrfs, path, "a", tmp_path).tolist() == [1, 2]

    meta["extension"] = {"x": 1}
    meta_path.write_text(json.dumps(meta))
    with pytest.raises((ValueError, TypeError), match="extra fields|unexpected keyword"):
        zarr.open_group(str(path), mode="r")["a"][...]
    res = nczarrfs("get", str(path), "a", "-o", str(tmp_path / "out"))
    assert res.returncode == 1
    assert '"extension"' in res.stderr.decode() and "must be understood" in res.stderr.decode()


@pytest.mark.parametrize("kind", ["zarr,v3", "zarr"])
def test_a_copy_keeps_json_attributes_netcdf_has_no_type_for(nczarrfs, tmp_path, kind):
    """zarr-python's object and list attributes read as their JSON text (netCDF has no type
    for them) and a copy to pure Zarr, v3 as v2, writes them back as the JSON values
    zarr-python wrote. `true` and `null` have no netCDF type either: they read as the ubyte 1
    (as netcdf-c reads a boolean) and the text "null", which is what a copy through netCDF
    values holds (only a `rw` rewrite of the same store keeps their stored JSON)."""
    src = tmp_path / "m.zarr"
    g = zarr.open_group(str(src), mode="w", zarr_format=3)
    attrs = {"o": {"k": 1, "l": [1, 2.5]}, "l": ["a", 1], "sl": ["a", "b"], "t": True,
             "n": None, "text": "[1, 2]"}
    g.attrs.update(attrs)
    g.create_array("v", shape=(1,), dtype="i4")[:] = 1
    dst = tmp_path / "c.zarr"
    res = nczarrfs("copy", "-k", kind, str(src), str(dst))
    assert res.returncode == 0, res.stderr.decode()
    got = dict(zarr.open_group(str(dst), mode="r").attrs)
    want = dict(attrs, t=1, n="null")
    assert got == want
    assert type(got["t"]) is int
