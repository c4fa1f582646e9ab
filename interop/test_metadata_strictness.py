"""Array metadata that breaks the Zarr rules, written by editing stores zarr-python made.

zarr-python 3.1.6 (and netcdf-c for Zarr v2) is the oracle: where it refuses an array whose
metadata leaves the values to a guess (a v3 `bytes` codec whose `endian` is not "little" or
"big", a codec list without exactly one array-to-bytes codec, no fill value), nczarrfs
refuses that variable too, naming the metadata object and the value, and reads the others.
Where a reference reads a form unambiguously, nczarrfs reads it with the same values.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest
import zarr
from zarr.codecs import BytesCodec

VALUES = [1, 2, 3, 4]
OTHER = [0.5, 1.5, 2.5]


def _v3_store(path, a_dtype="i4"):
    """A group with `a` (big-endian chunks: a byte order read wrongly shows) and `b`."""
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    multi = np.dtype(a_dtype).itemsize > 1
    a = root.create_array("a", shape=(4,), chunks=(4,), dtype=a_dtype, compressors=None,
                          serializer=BytesCodec(endian="big" if multi else None),
                          fill_value=0)
    a[:] = VALUES
    b = root.create_array("b", shape=(3,), chunks=(3,), dtype="f8", fill_value=0)
    b[:] = OTHER
    return path / "a" / "zarr.json"


def _edit(meta_path, change) -> None:
    meta = json.loads(meta_path.read_text())
    change(meta)
    meta_path.write_text(json.dumps(meta))


def _zarr_python_reads(path) -> np.ndarray | None:
    try:
        return zarr.open_array(str(path), mode="r")[...]
    except (ValueError, TypeError, KeyError, OverflowError):
        return None


def _get(nczarrfs, path, var: str, tmp_path) -> np.ndarray:
    out = tmp_path / f"{var}.npy"
    res = nczarrfs("get", str(path), var, "--npy", "-o", str(out))
    assert res.returncode == 0, f"get {var}: {res.stderr.decode(errors='replace')}"
    return np.load(io.BytesIO(out.read_bytes()), allow_pickle=False)


def _set_endian(value):
    def change(meta):
        meta["codecs"][0]["configuration"] = {"endian": value}
    return change


def _drop_endian(meta):
    meta["codecs"][0].pop("configuration", None)


def _codecs(codecs):
    def change(meta):
        meta["codecs"] = codecs
    return change


def _fill(value):
    def change(meta):
        meta["fill_value"] = value
    return change


def _no_fill(meta):
    del meta["fill_value"]


LITTLE = {"name": "bytes", "configuration": {"endian": "little"}}
ZSTD = {"name": "zstd", "configuration": {"level": 1, "checksum": False}}

REFUSED_V3 = {
    "endian-BIG": (_set_endian("BIG"), 'endian "BIG" is not "little" or "big"'),
    "endian-Big": (_set_endian("Big"), 'endian "Big" is not "little" or "big"'),
    "endian-be": (_set_endian("be"), 'endian "be" is not "little" or "big"'),
    "endian-middle": (_set_endian("middle"), 'endian "middle" is not "little" or "big"'),
    "endian-null": (_set_endian(None), 'codec "bytes": endian null, where'),
    "no-codecs": (_codecs([]), "hold no array-to-bytes codec"),
    "compressor-only": (_codecs([ZSTD]), "hold no array-to-bytes codec"),
    "two-bytes-codecs": (_codecs([LITTLE, ZSTD, LITTLE]), "2 array-to-bytes codecs"),
    "transpose-after-bytes": (
        _codecs([LITTLE, {"name": "transpose", "configuration": {"order": [0]}}]),
        'codec "transpose" works on arrays but follows the array-to-bytes codec "bytes"',
    ),
    "compressor-before-bytes": (
        _codecs([ZSTD, LITTLE]),
        'codec "zstd" works on bytes but comes before the array-to-bytes codec "bytes"',
    ),
    "fill-null": (_fill(None), 'fill_value null is no value of data_type "int32"'),
    "fill-missing": (_no_fill, "no fill_value, which Zarr v3 requires"),
    "fill-list": (_fill([1]), "fill_value [1] does not fit data_type int32"),
    "fill-object": (_fill({"a": 1}), 'fill_value {"a": 1} does not fit data_type int32'),
    "fill-fraction": (_fill(2.5), "fill_value 2.5 does not fit data_type int32"),
    "fill-NaN": (_fill("NaN"), 'fill_value "NaN" does not fit data_type int32'),
    "fill-too-large": (_fill(2**31), "fill_value 2147483648 does not fit data_type int32"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_V3))
def test_v3_arrays_zarr_python_refuses_are_refused_and_named(nczarrfs, tmp_path, case):
    change, says = REFUSED_V3[case]
    store = tmp_path / "s.zarr"
    meta = _v3_store(store)
    _edit(meta, change)
    assert _zarr_python_reads(store / "a") is None, "zarr-python reads it"
    res = nczarrfs("get", str(store), "a")
    err = res.stderr.decode(errors="replace")
    assert res.returncode == 1, err
    assert f"variable /a: " in err and says in err, err
    # The warning at open names the metadata object.
    assert f"a/zarr.json: " in err, err
    dump = nczarrfs("dump", str(store))
    assert dump.returncode == 1, dump.stderr
    assert _get(nczarrfs, store, "b", tmp_path).tolist() == OTHER


READ_V3 = {
    "endian-big": ("i4", _set_endian("big")),
    "endian-little-of-big-chunks": ("i4", _set_endian("little")),
    # zarr-python takes its machine's order (little) for an absent endian.
    "endian-missing": ("i4", _drop_endian),
    # Single bytes need no endian.
    "int8-without-endian": ("i1", _drop_endian),
    "int8-endian-null": ("i1", _set_endian(None)),
}


@pytest.mark.parametrize("case", sorted(READ_V3))
def test_v3_arrays_zarr_python_reads_read_the_same(nczarrfs, tmp_path, case):
    dtype, change = READ_V3[case]
    store = tmp_path / "s.zarr"
    _edit(_v3_store(store, dtype), change)
    expected = _zarr_python_reads(store / "a")
    assert expected is not None
    got = _get(nczarrfs, store, "a", tmp_path)
    assert got.astype(np.int64).tolist() == expected.astype(np.int64).tolist()


def test_a_null_bool_fill_value_reads_as_false(nczarrfs, tmp_path):
    """zarr-python reads `"fill_value": null` of bool as false: so do unwritten chunks here."""
    store = tmp_path / "s.zarr"
    root = zarr.open_group(str(store), mode="w", zarr_format=3)
    a = root.create_array("a", shape=(4,), chunks=(2,), dtype="bool", fill_value=True)
    a[:2] = [True, False]
    _edit(store / "a" / "zarr.json", _fill(None))
    expected = _zarr_python_reads(store / "a")
    assert expected is not None and expected.tolist() == [True, False, False, False]
    assert _get(nczarrfs, store, "a", tmp_path).tolist() == [1, 0, 0, 0]


def test_a_shard_its_inner_chunks_do_not_divide_is_refused(nczarrfs, tmp_path):
    store = tmp_path / "s.zarr"
    root = zarr.open_group(str(store), mode="w", zarr_format=3)
    a = root.create_array("a", shape=(8,), chunks=(2,), shards=(4,), dtype="i2", fill_value=0)
    a[:] = np.arange(8)
    meta = store / "a" / "zarr.json"
    _edit(meta, lambda m: m["chunk_grid"]["configuration"].update(chunk_shape=[3]))
    assert _zarr_python_reads(store / "a") is None
    res = nczarrfs("get", str(store), "a")
    assert res.returncode == 1
    assert b"inner chunk_shape [2] does not divide the shard [3]" in res.stderr


def _v2_store(path, **edits):
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    a = root.create_array("a", shape=(6,), chunks=(3,), dtype="<i4", compressors=None,
                          fill_value=-1, attributes={"_ARRAY_DIMENSIONS": ["x"]})
    a[:] = [1, 2, 3, 4, 5, 6]
    b = root.create_array("b", shape=(3,), chunks=(3,), dtype="<f8", fill_value=0,
                          attributes={"_ARRAY_DIMENSIONS": ["y"]})
    b[:] = OTHER
    _edit(path / "a" / ".zarray", lambda m: m.update(edits))


_NETCDF_READ = """
import sys, netCDF4
with netCDF4.Dataset(sys.argv[1], mode="r") as ds:
    print(ds["a"][:].tolist())
"""


def _netcdf_c_reads(path):
    """netCDF4-python's values of `a`, or None where it refuses (or crashes: in a child)."""
    res = subprocess.run([sys.executable, "-c", _NETCDF_READ, f"file://{path}#mode=zarr,file"],
                         capture_output=True, text=True, timeout=120, check=False)
    return json.loads(res.stdout) if res.returncode == 0 else None


@pytest.mark.parametrize("edit,says", [
    ({"order": None}, "order null is not C or F"),
])
def test_v2_forms_every_reference_refuses_fail_the_open(nczarrfs, tmp_path, edit, says):
    store = tmp_path / "s.zarr"
    _v2_store(store, **edit)
    assert _zarr_python_reads(store / "a") is None
    assert _netcdf_c_reads(store) is None
    res = nczarrfs("dump", "-h", str(store))
    err = res.stderr.decode(errors="replace")
    assert res.returncode == 1 and says in err and "a/.zarray" in err, err


def test_v2_native_byte_order_is_refused_for_that_variable(nczarrfs, tmp_path):
    store = tmp_path / "s.zarr"
    _v2_store(store, dtype="=i4")
    assert _zarr_python_reads(store / "a") is None
    assert _netcdf_c_reads(store) is None
    res = nczarrfs("get", str(store), "a")
    err = res.stderr.decode(errors="replace")
    assert res.returncode == 1 and 'dtype "=i4": byte order "="' in err, err
    assert _get(nczarrfs, store, "b", tmp_path).tolist() == OTHER


@pytest.mark.parametrize("edit,says", [
    ({"dtype": "|u1", "fill_value": 300}, "fill_value 300 does not fit dtype |u1"),
    ({"fill_value": "NaN"}, 'fill_value "NaN" does not fit dtype <i4'),
    ({"fill_value": 2.5}, "fill_value 2.5 does not fit dtype <i4"),
    ({"fill_value": [1]}, "fill_value [1] does not fit dtype <i4"),
    ({"dtype": "<f8", "fill_value": "abc"}, 'fill_value "abc" does not fit dtype <f8'),
], ids=["300-u1", "NaN-i4", "2.5-i4", "list-i4", "abc-f8"])
def test_v2_fill_value_that_does_not_fit_is_refused_for_that_variable(
    nczarrfs, tmp_path, edit, says
):
    store = tmp_path / "s.zarr"
    _v2_store(store, **edit)
    assert _zarr_python_reads(store / "a") is None
    for command in [("get", str(store), "a"), ("dump", str(store))]:
        res = nczarrfs(*command)
        err = res.stderr.decode(errors="replace")
        assert res.returncode == 1, err
        assert f"variable /a: {says}" in err and f"a/.zarray: {says}" in err, err
    assert _get(nczarrfs, store, "b", tmp_path).tolist() == OTHER


@pytest.mark.parametrize("edit", [
    {"dimension_separator": None},
    {"dtype": "<i04"},
    {"dtype": "<i+4"},
], ids=["separator-null", "dtype-<i04", "dtype-<i+4"])
def test_v2_forms_netcdf_c_reads_read_the_same(nczarrfs, tmp_path, edit):
    """zarr-python refuses these; netcdf-c reads them, as `<i4` with the default separator."""
    store = tmp_path / "s.zarr"
    _v2_store(store, **edit)
    assert _zarr_python_reads(store / "a") is None
    expected = _netcdf_c_reads(store)
    assert expected == [1, 2, 3, 4, 5, 6]
    assert _get(nczarrfs, store, "a", tmp_path).tolist() == expected


def test_v2_int_without_byte_order_reads_little_endian(nczarrfs, tmp_path):
    """`|i4`: zarr-python refuses it, netcdf-c 4.9.0 and 4.9.1 and NumPy read it in the
    machine's order (the chunks zarr-python wrote here are little-endian), netcdf-c 4.10.1
    big-endian. nczarrfs reads it as 4.9 does and warns."""
    store = tmp_path / "s.zarr"
    _v2_store(store, dtype="|i4")
    assert _zarr_python_reads(store / "a") is None
    assert np.dtype("|i4") == np.dtype("<i4")
    res = nczarrfs("get", str(store), "a", "--npy", "-o", str(tmp_path / "a.npy"))
    assert res.returncode == 0, res.stderr
    assert b'dtype "|i4" gives no byte order' in res.stderr
    assert np.load(tmp_path / "a.npy").tolist() == [1, 2, 3, 4, 5, 6]
