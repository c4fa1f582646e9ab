"""Codec parameters that only compressing uses (zlib, gzip and bz2 levels, blosc's clevel and
shuffle), given out of the codec's range in a store's metadata (edited by hand into what the
references wrote). The references read such stores: numcodecs (so zarr-python 2 and 3)
always, netcdf-c for all but a deflate level; they fail only when compressing. nczarrfs
reads them, shows the parameter as stored, and refuses writes with the variable, codec and
range named, storing nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import netCDF4
import numcodecs
import numpy as np
import pytest
import zarr

PLUGINS = os.path.join(os.path.dirname(netCDF4.__file__), "plugins")

# (variable, codec zarr-python writes it with, parameter edited, value, range nczarrfs names)
EDITS = [
    ("zl", numcodecs.Zlib(level=1), "level", 15, "-1..=9"),
    ("zm", numcodecs.Zlib(level=1), "level", -2, "-1..=9"),
    ("gz", numcodecs.GZip(level=1), "level", 15, "-1..=9"),
    ("bz", numcodecs.BZ2(level=1), "level", 0, "1..=9"),
    ("bl", numcodecs.Blosc(clevel=5), "clevel", 12, "0..=9"),
    ("bs", numcodecs.Blosc(clevel=5), "shuffle", 7, "-1..=2"),
]


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("HDF5_PLUGIN_PATH", PLUGINS)
    warnings.filterwarnings("ignore", module="zarr")
    warnings.filterwarnings("ignore", module="numcodecs")


def _edit(path, key: str, value) -> None:
    meta = json.loads(path.read_text())
    meta["compressor"][key] = value
    path.write_text(json.dumps(meta))


def _stored(array_dir) -> dict:
    return {p.name: p.read_bytes() for p in sorted(array_dir.iterdir())}


@pytest.fixture
def edited(tmp_path):
    """A Zarr v2 group written by zarr-python, one variable per edit plus `ok`, with the
    edits made in `.zarray`; the values zarr-python reads back."""
    path = tmp_path / "s.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    values = {}
    for name, codec, *_ in [*EDITS, ("ok", numcodecs.Zlib(level=1))]:
        arr = root.create_array(name, shape=(40,), chunks=(16,), dtype="<i4", compressors=codec,
                                attributes={"_ARRAY_DIMENSIONS": ["x"]})
        arr[:] = np.arange(40, dtype="<i4") % 7 * (len(values) + 1)
    for name, _, key, value, _ in EDITS:
        _edit(path / name / ".zarray", key, value)
    for name in [*(e[0] for e in EDITS), "ok"]:
        values[name] = zarr.open_array(str(path / name), mode="r")[...]
    return path, values


def test_zarr_python_reads_and_refuses_to_write(edited):
    """The premise: zarr-python 3 (numcodecs 0.16) reads every edited variable and fails to
    write to it."""
    path, values = edited
    for name, *_ in EDITS:
        arr = zarr.open_array(str(path / name), mode="r+")
        assert arr[...].tolist() == values[name].tolist()
        with pytest.raises(Exception):
            arr[0] = 1


def test_get_and_dump_read_what_zarr_python_reads(nczarrfs, edited):
    path, values = edited
    for name, *_ in EDITS:
        res = nczarrfs("get", str(path), name)
        assert res.returncode == 0, res.stderr.decode()
        assert np.frombuffer(res.stdout, "<i4").tolist() == values[name].tolist(), name
    res = nczarrfs("dump", str(path))
    assert res.returncode == 0, res.stderr.decode()
    want = ", ".join(map(str, values["bl"].tolist()[:4]))
    assert f" bl = {want}," in res.stdout.decode(), res.stdout.decode()
    res = nczarrfs("dump", "-hs", str(path))
    assert res.returncode == 0, res.stderr.decode()
    assert "zl:_DeflateLevel = 15 ;" in res.stdout.decode()
    # Shown as stored, as `_Codecs` beside it shows it (netcdf-c opens no such variable).
    assert "zm:_DeflateLevel = -2 ;" in res.stdout.decode()


def test_gen_takes_a_negative_deflate_level_as_none_as_ncgen_does(nczarrfs, tmp_path):
    cdl = tmp_path / "x.cdl"
    cdl.write_text("netcdf x {\ndimensions:\n n = 4 ;\nvariables:\n int v(n) ;\n"
                   "  v:_DeflateLevel = -1 ;\ndata:\n v = 1, 2, 3, 4 ;\n}\n")
    oracle = tmp_path / "x.nc"
    subprocess.run(["ncgen", "-k", "nc4", "-o", str(oracle), str(cdl)], check=True)
    special = subprocess.run(["ncdump", "-hs", str(oracle)], capture_output=True, text=True,
                             check=True).stdout
    assert "_DeflateLevel" not in special
    out = tmp_path / "x.file"
    res = nczarrfs("gen", "-o", str(out), str(cdl))
    assert res.returncode == 0, res.stderr.decode()
    ours = nczarrfs("dump", "-hs", str(out)).stdout.decode()
    assert "_DeflateLevel" not in ours and "zlib" not in ours, ours
    assert np.frombuffer(nczarrfs("get", str(out), "v").stdout, "<i4").tolist() == [1, 2, 3, 4]


def test_put_is_refused_naming_variable_codec_and_range(nczarrfs, edited, tmp_path):
    path, values = edited
    one = tmp_path / "one.bin"
    one.write_bytes(np.int32(99).tobytes())
    for name, codec, key, value, valid in EDITS:
        before = _stored(path / name)
        res = nczarrfs("put", str(path), name, "--start", "3", "--count", "1", "-i", str(one))
        err = res.stderr.decode()
        assert res.returncode == 1, err
        assert f"variable /{name}: codec {codec.codec_id} cannot encode" in err, err
        assert f'"{key}" = {value} is outside {valid}' in err, err
        assert _stored(path / name) == before
        assert zarr.open_array(str(path / name), mode="r")[...].tolist() == values[name].tolist()
    res = nczarrfs("put", str(path), "ok", "--start", "3", "--count", "1", "-i", str(one))
    assert res.returncode == 0, res.stderr.decode()
    assert zarr.open_array(str(path / "ok"), mode="r")[3] == 99


def test_copy_reads_them_and_refuses_to_keep_their_codec(nczarrfs, edited, tmp_path):
    path, values = edited
    kept = tmp_path / "kept.file"
    res = nczarrfs("copy", str(path), str(kept))
    err = res.stderr.decode()
    assert res.returncode == 1, err
    assert "cannot keep the source's codec" in err and "-d N" in err and "--codec" in err, err
    assert not kept.exists()
    for args in (["-d", "4"], ["--codec", "bz2:9"], ["--codec", "blosc:zstd:5:1"]):
        target = tmp_path / f"c{len(os.listdir(tmp_path))}.zarr"
        res = nczarrfs("copy", "-k", "zarr", *args, str(path), str(target))
        assert res.returncode == 0, res.stderr.decode()
        for name in values:
            got = zarr.open_array(str(target / name), mode="r")[...]
            assert got.tolist() == values[name].tolist(), (args, name)


@pytest.mark.parametrize("option", [
    ["-d", "15"],
    ["--codec", "zlib:15"],
    ["--codec", '[{"id": "zlib", "level": 15}]'],
    ["--codec", '[{"id": "bz2", "level": 0}]'],
    ["--codec", '[{"id": "blosc", "cname": "lz4", "clevel": 12, "shuffle": 1}]'],
])
def test_copy_options_giving_such_a_level_exit_1(nczarrfs, edited, tmp_path, option):
    """README, exit status: a value out of range is 1, whichever option gives it."""
    path, _ = edited
    target = tmp_path / "t.file"
    res = nczarrfs("copy", *option, str(path), str(target))
    assert res.returncode == 1, res.stderr.decode()
    assert b"level" in res.stderr, res.stderr.decode()
    assert not target.exists()


def _netcdf(path, code: str) -> str:
    """Runs `code` with `nc`, netCDF4-python's open NCZarr dataset, in a process of its own
    (netcdf-c keeps state between opens); its standard output."""
    script = (f"import netCDF4, json\nwith netCDF4.Dataset('file://{path}#mode=nczarr,file')"
              f" as nc:\n" + "".join(f"    {line}\n" for line in code.splitlines()))
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "HDF5_PLUGIN_PATH": PLUGINS}, timeout=60)
    assert out.returncode == 0, out.stderr[-500:]
    return out.stdout


def test_netcdf_c_stores_with_edited_levels(nczarrfs, tmp_path):
    """netCDF4-python (netcdf-c 4.10.1) writes the store; after the levels are edited it
    reads bzip2 level 0, blosc clevel 12 and zstd level 99 and reports them as complevel.
    nczarrfs reads the same values and prints the same levels in `dump -s`. netcdf-c refuses
    to read a deflate level of 15, which zarr-python reads: nczarrfs reads it as zarr-python
    does, the values netCDF4-python read before the edit."""
    src = tmp_path / "nc.file"
    compressions = {"zl": "zlib", "bz": "bzip2", "bl": "blosc_lz4", "zs": "zstd"}
    with netCDF4.Dataset(f"file://{src}#mode=nczarr,file", "w") as nc:
        nc.createDimension("x", 100)
        for name, compression in compressions.items():
            v = nc.createVariable(name, "i4", ("x",), compression=compression, complevel=4,
                                  chunksizes=(50,))
            v[:] = np.arange(100) % 7
    before = json.loads(_netcdf(src, "print(json.dumps({n: nc[n][:].tolist() for n in nc.variables}))"))
    for name, key, value in [("zl", "level", 15), ("bz", "level", 0), ("bl", "clevel", 12),
                             ("zs", "level", 99)]:
        _edit(src / name / ".zarray", key, value)
    after = json.loads(_netcdf(src, "print(json.dumps({n: [nc[n][:].tolist(), "
                                    "nc[n].filters()['complevel']] for n in ('bz', 'bl', 'zs')}))"))
    levels = {name: level for name, (_, level) in after.items()}
    assert levels == {"bz": 0, "bl": 12, "zs": 99}
    for name in compressions:
        res = nczarrfs("get", str(src), name)
        assert res.returncode == 0, res.stderr.decode()
        got = np.frombuffer(res.stdout, "<i4").tolist()
        assert got == before[name], name
        if name in after:
            assert got == after[name][0], name
    res = nczarrfs("dump", "-hs", str(src))
    assert res.returncode == 0, res.stderr.decode()
    dump = res.stdout.decode()
    assert "zl:_DeflateLevel = 15 ;" in dump
    assert f'bz:_Filter = "307,{levels["bz"]}" ;' in dump
    assert f'zs:_Filter = "32015,{levels["zs"]}" ;' in dump
    assert '\\"clevel\\": 12' in dump


def test_zarr_v3_blosc_clevel_zarr_python_reads(nczarrfs, tmp_path):
    """zarr-python 3 reads a Zarr v3 blosc codec with clevel 12 (it refuses a v3 gzip level
    of 15 or zstd of 99 when opening, which nczarrfs reads all the same)."""
    path = tmp_path / "v3.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    arr = root.create_array("b", shape=(40,), chunks=(16,), dtype="<i4",
                            compressors=zarr.codecs.BloscCodec(clevel=5, typesize=4,
                                                               shuffle="shuffle"),
                            dimension_names=["x"])
    arr[:] = np.arange(40, dtype="<i4") % 5
    meta_path = path / "b" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    [blosc] = [c for c in meta["codecs"] if c["name"] == "blosc"]
    blosc["configuration"]["clevel"] = 12
    meta_path.write_text(json.dumps(meta))
    want = zarr.open_array(str(path / "b"), mode="r")[...].tolist()
    res = nczarrfs("get", str(path), "b")
    assert res.returncode == 0, res.stderr.decode()
    assert np.frombuffer(res.stdout, "<i4").tolist() == want
    one = tmp_path / "one.bin"
    one.write_bytes(np.int32(9).tobytes())
    before = _stored(path / "b" / "c")
    res = nczarrfs("put", str(path), "b", "--start", "0", "--count", "1", "-i", str(one))
    assert res.returncode == 1 and b"codec blosc cannot encode" in res.stderr, res.stderr
    assert _stored(path / "b" / "c") == before


# (codec zarr-python writes, parameter edited into `.zarray`, value): the edges where
# numcodecs 0.16 decides by the parameter's type (a zstd checksum is any value's Python truth,
# a zlib level must be an int, a blosc blocksize a C int) or lacks the compressor (snappy).
WRITE_EDGES = [
    (numcodecs.Zstd(level=1), "checksum", "yes"),
    (numcodecs.Zstd(level=1), "checksum", ""),
    (numcodecs.Zstd(level=1), "checksum", "0"),
    (numcodecs.Zstd(level=1), "checksum", []),
    (numcodecs.Zstd(level=1), "checksum", {}),
    (numcodecs.Zstd(level=1), "checksum", {"a": 1}),
    (numcodecs.Zstd(level=1), "checksum", None),
    (numcodecs.Zlib(level=1), "level", "5"),
    (numcodecs.Zlib(level=1), "level", 5.0),
    (numcodecs.Zlib(level=1), "level", None),
    (numcodecs.GZip(level=1), "level", "5"),
    (numcodecs.GZip(level=1), "level", 5.0),
    (numcodecs.Zlib(level=1), "level", True),
    (numcodecs.Zstd(level=1), "level", "5"),
    (numcodecs.Zstd(level=1), "level", None),
    (numcodecs.Zstd(level=1), "level", 5.0),
    (numcodecs.BZ2(level=1), "level", 5.0),
    (numcodecs.BZ2(level=1), "level", "5"),
    (numcodecs.BZ2(level=1), "level", None),
    (numcodecs.BZ2(level=1), "level", True),
    (numcodecs.Blosc(cname="lz4", clevel=5), "blocksize", 2**31 - 1),
    (numcodecs.Blosc(cname="lz4", clevel=5), "blocksize", -2**31),
    (numcodecs.Blosc(cname="lz4", clevel=5), "blocksize", 2**31),
    (numcodecs.Blosc(cname="lz4", clevel=5), "blocksize", -2**31 - 1),
    (numcodecs.Blosc(cname="lz4", clevel=5), "blocksize", 2**40),
    (numcodecs.Blosc(cname="lz4", clevel=5), "blocksize", 5.5),
    (numcodecs.Blosc(cname="lz4", clevel=5), "blocksize", 1e12),
    (numcodecs.Blosc(cname="lz4", clevel=5), "blocksize", "5"),
    (numcodecs.Blosc(cname="lz4", clevel=5), "blocksize", None),
    (numcodecs.Blosc(cname="lz4", clevel=5), "cname", "snappy"),
    # Cython `int` parameters: a float truncated, a string or None a TypeError, a value
    # beyond a C int an OverflowError (netcdf-c's unsigned zstd level aside).
    (numcodecs.Zstd(level=1), "level", 5.5),
    (numcodecs.Zstd(level=1), "level", -3.7),
    (numcodecs.Zstd(level=1), "level", 1e10),
    (numcodecs.Zstd(level=1), "level", 2**40),
    (numcodecs.Zstd(level=1), "level", -2**31 - 1),
    (numcodecs.Zstd(level=1), "level", True),
    (numcodecs.LZ4(acceleration=1), "acceleration", 5.5),
    (numcodecs.LZ4(acceleration=1), "acceleration", "1"),
    (numcodecs.LZ4(acceleration=1), "acceleration", None),
    (numcodecs.LZ4(acceleration=1), "acceleration", 2**31),
    (numcodecs.LZ4(acceleration=1), "acceleration", -1),
    (numcodecs.Blosc(cname="lz4", clevel=5), "clevel", None),
    (numcodecs.Blosc(cname="lz4", clevel=5), "clevel", "5"),
    (numcodecs.Blosc(cname="lz4", clevel=5), "clevel", 5.7),
    (numcodecs.Blosc(cname="lz4", clevel=5), "clevel", 9.9),
    (numcodecs.Blosc(cname="lz4", clevel=5), "clevel", -0.5),
    (numcodecs.Blosc(cname="lz4", clevel=5), "clevel", 2**31),
    (numcodecs.Blosc(cname="lz4", clevel=5), "shuffle", "1"),
    (numcodecs.Blosc(cname="lz4", clevel=5), "shuffle", None),
    (numcodecs.Blosc(cname="lz4", clevel=5), "shuffle", 2.9),
    (numcodecs.Blosc(cname="lz4", clevel=5), "shuffle", -1.5),
    (numcodecs.Blosc(cname="lz4", clevel=5), "shuffle", True),
    (numcodecs.Blosc(cname="lz4", clevel=5), "cname", None),
    (numcodecs.Blosc(cname="lz4", clevel=5), "cname", 5),
    (numcodecs.Blosc(cname="lz4", clevel=5), "typesize", "4"),
    (numcodecs.Blosc(cname="lz4", clevel=5), "typesize", 4.5),
    (numcodecs.Blosc(cname="lz4", clevel=5), "typesize", None),
    (numcodecs.Blosc(cname="lz4", clevel=5), "typesize", 4),
    (numcodecs.Blosc(cname="lz4", clevel=5), "typesize", True),
    (numcodecs.Blosc(cname="lz4", clevel=5), "typesize", 2**31),
    # Values numcodecs compresses with that zarr-python 3's own codecs take in another form.
    (numcodecs.GZip(level=1), "level", -1),
    (numcodecs.GZip(level=1), "level", True),
    (numcodecs.GZip(level=1), "level", False),
    (numcodecs.Zlib(level=1), "level", -1),
    (numcodecs.Blosc(cname="lz4", clevel=5), "clevel", True),
    (numcodecs.Blosc(cname="lz4", clevel=5), "shuffle", -1),
    (numcodecs.Blosc(cname="lz4", clevel=5), "blocksize", True),
    (numcodecs.LZ4(acceleration=1), "acceleration", True),
]


@pytest.mark.parametrize("codec, key, value", WRITE_EDGES,
                         ids=[f"{c.codec_id}-{k}-{v!r}" for c, k, v in WRITE_EDGES])
def test_put_writes_where_zarr_python_writes(nczarrfs, tmp_path, codec, key, value):
    """`put` writes to such a variable exactly where zarr-python (numcodecs 0.16) writes, and
    what it writes zarr-python reads; where zarr-python refuses, `put` is refused and stores
    nothing. Both read the variable either way."""
    import shutil

    path = tmp_path / "s.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    arr = root.create_array("v", shape=(40,), chunks=(16,), dtype="<f8", compressors=codec,
                            attributes={"_ARRAY_DIMENSIONS": ["x"]})
    arr[:] = np.arange(40.0) % 7
    _edit(path / "v" / ".zarray", key, value)
    oracle = tmp_path / "oracle.zarr"
    shutil.copytree(path, oracle)
    try:
        zarr.open_array(str(oracle / "v"), mode="r+")[3] = 99.0
        zarr_python_writes = True
    except Exception:  # noqa: BLE001 - numcodecs raises TypeError, OverflowError, ValueError
        zarr_python_writes = False
    before = _stored(path / "v")
    if zarr_python_writes and codec.codec_id == "blosc":
        # The chunk written holds, in its header, the shuffle and type size numcodecs took.
        want_flags = (oracle / "v" / "0").read_bytes()[2:4]
    res = nczarrfs("get", str(path), "v")
    assert res.returncode == 0, res.stderr.decode()
    assert np.frombuffer(res.stdout, "<f8").tolist() == (np.arange(40.0) % 7).tolist()
    one = tmp_path / "one.bin"
    one.write_bytes(np.float64(99.0).tobytes())
    res = nczarrfs("put", str(path), "v", "--start", "3", "--count", "1", "-i", str(one))
    assert (res.returncode == 0) == zarr_python_writes, res.stderr.decode()
    want = np.arange(40.0) % 7
    if zarr_python_writes:
        want[3] = 99.0
        if codec.codec_id == "blosc":
            assert (path / "v" / "0").read_bytes()[2:4] == want_flags
    else:
        assert res.returncode == 1 and b"cannot encode" in res.stderr, res.stderr.decode()
        assert _stored(path / "v") == before
    assert zarr.open_array(str(path / "v"), mode="r")[...].tolist() == want.tolist()
    # copy keeps the codec exactly where it can write with it.
    res = nczarrfs("copy", "-k", "zarr", str(path), str(tmp_path / "copy.zarr"))
    assert (res.returncode == 0) == zarr_python_writes, res.stderr.decode()


@pytest.mark.parametrize("codec, key, value", WRITE_EDGES,
                         ids=[f"{c.codec_id}-{k}-{v!r}" for c, k, v in WRITE_EDGES])
def test_copy_to_zarr_v3_compresses_as_numcodecs(nczarrfs, tmp_path, codec, key, value):
    """`copy -k zarr,v3` of such a variable: where zarr-python (numcodecs 0.16) writes with
    the edited configuration, zarr-python 3 opens the copy, reads the values, and compresses
    a chunk to the very bytes numcodecs makes of it with the source's configuration (but for
    the time in a gzip header); where it does not, the copy is refused naming the variable,
    and nothing is created."""
    path = tmp_path / "s.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    values = np.arange(40.0) % 7
    arr = root.create_array("v", shape=(40,), chunks=(16,), dtype="<f8", compressors=codec,
                            attributes={"_ARRAY_DIMENSIONS": ["x"]})
    arr[:] = values
    _edit(path / "v" / ".zarray", key, value)
    config = json.loads((path / "v" / ".zarray").read_text())["compressor"]
    try:
        want = numcodecs.get_codec(dict(config)).encode(values[:16])
    except Exception:  # noqa: BLE001 - numcodecs raises TypeError, OverflowError, ValueError
        want = None
    target = tmp_path / "v3.zarr"
    res = nczarrfs("copy", "-k", "zarr,v3", str(path), str(target))
    if want is None:
        assert res.returncode == 1 and b"variable /v" in res.stderr, res.stderr.decode()
        assert not target.exists()
        return
    assert res.returncode == 0, res.stderr.decode()
    copied = zarr.open_array(str(target / "v"), mode="r+")
    assert copied[...].tolist() == values.tolist()
    copied[:] = values
    got = (target / "v" / "c" / "0").read_bytes()
    if codec.codec_id == "gzip":
        # A gzip header's bytes 4 to 7 are the time it was written (RFC 1952).
        got, want = got[:4] + got[8:], bytes(want[:4]) + bytes(want[8:])
    assert got == bytes(want)


# (codec zarr-python writes, Zarr v3 configuration edited, value; None removes the key).
V3_EDGES = [
    ("blosc", "clevel", 5.5),
    ("blosc", "clevel", None),
    ("blosc", "shuffle", 1),
    ("blosc", "shuffle", "twice"),
    ("blosc", "shuffle", None),
    ("blosc", "typesize", None),
    ("blosc", "typesize", 0),
    ("blosc", "typesize", 4.0),
    ("blosc", "cname", None),
    ("blosc", "cname", "LZ4"),
    ("blosc", "blocksize", "0"),
    ("blosc", "clevel", True),
    ("zstd", "level", 5.5),
    ("zstd", "level", 23),
    ("zstd", "level", -5),
    ("zstd", "checksum", 1),
    ("gzip", "level", -1),
    ("gzip", "level", 5.0),
    ("gzip", "level", None),
]


@pytest.mark.parametrize("name, key, value", V3_EDGES,
                         ids=[f"{n}-{k}-{v!r}" for n, k, v in V3_EDGES])
def test_zarr_v3_codec_configurations(nczarrfs, tmp_path, name, key, value):
    """A Zarr v3 blosc, zstd or gzip configuration edited: where zarr-python 3 opens the
    array and writes to it, `put` writes, and the blosc chunk header (compressor, shuffle,
    type size) is the one zarr-python writes; where zarr-python refuses to open it, `put`
    is refused and stores nothing. nczarrfs reads the array either way."""
    import shutil

    codecs = {"blosc": zarr.codecs.BloscCodec(cname="lz4", clevel=5, typesize=4,
                                              shuffle="noshuffle"),
              "zstd": zarr.codecs.ZstdCodec(level=3), "gzip": zarr.codecs.GzipCodec(level=1)}
    path = tmp_path / "v3.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    arr = root.create_array("v", shape=(40,), chunks=(16,), dtype="<i4",
                            compressors=codecs[name], dimension_names=["x"])
    values = np.arange(40, dtype="<i4") % 7
    arr[:] = values
    meta_path = path / "v" / "zarr.json"
    meta = json.loads(meta_path.read_text())
    [entry] = [c for c in meta["codecs"] if c["name"] == name]
    if value is None:
        del entry["configuration"][key]
    else:
        entry["configuration"][key] = value
    meta_path.write_text(json.dumps(meta))
    oracle = tmp_path / "oracle.zarr"
    shutil.copytree(path, oracle)
    try:
        zarr.open_array(str(oracle / "v"), mode="r+")[3] = 99
        zarr_python_writes = True
    except Exception:  # noqa: BLE001 - zarr-python raises TypeError or ValueError
        zarr_python_writes = False
    before = _stored(path / "v" / "c")
    res = nczarrfs("get", str(path), "v")
    assert res.returncode == 0, res.stderr.decode()
    assert np.frombuffer(res.stdout, "<i4").tolist() == values.tolist()
    one = tmp_path / "one.bin"
    one.write_bytes(np.int32(99).tobytes())
    res = nczarrfs("put", str(path), "v", "--start", "3", "--count", "1", "-i", str(one))
    assert (res.returncode == 0) == zarr_python_writes, res.stderr.decode()
    if zarr_python_writes:
        values[3] = 99
        if name == "blosc":
            assert ((path / "v" / "c" / "0").read_bytes()[1:4]
                    == (oracle / "v" / "c" / "0").read_bytes()[1:4])
        got = zarr.open_array(str(path / "v"), mode="r")[...]
        assert got.tolist() == values.tolist()
    else:
        assert res.returncode == 1 and b"cannot encode" in res.stderr, res.stderr.decode()
        assert _stored(path / "v" / "c") == before
