"""Codec chains that other tools write or that `--codec` asks for, checked by the readers
that must decode what nczarrfs then writes: netCDF4-python (netcdf-c 4.10.1) for NCZarr,
zarr-python / numcodecs for Zarr.
"""

from __future__ import annotations

import io
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


@pytest.fixture(autouse=True)
def _quiet(monkeypatch):
    monkeypatch.setenv("HDF5_PLUGIN_PATH", PLUGINS)
    warnings.filterwarnings("ignore", module="zarr")
    warnings.filterwarnings("ignore", module="numcodecs")


def _netcdf_values(path, var: str):
    """netCDF4-python's read of an NCZarr dataset, in a process of its own (netcdf-c keeps
    state between opens)."""
    read = (f"import netCDF4\nwith netCDF4.Dataset('file://{path}#mode=nczarr,file') as nc:"
            f"\n    print(nc[{var!r}][...].ravel().tolist())")
    out = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True,
                         env={**os.environ, "HDF5_PLUGIN_PATH": PLUGINS}, timeout=60)
    assert out.returncode == 0, out.stderr[-500:]
    return json.loads(out.stdout)


def _v2_array(path, values, **kw):
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    a = root.create_array("v", shape=values.shape, dtype=values.dtype,
                          attributes={"_ARRAY_DIMENSIONS": ["x"]}, **kw)
    a[:] = values
    return a


def _int_source(nczarrfs, tmp_path, values=(1, 2, 3, 4, 5, 6)):
    cdl = tmp_path / "s.cdl"
    cdl.write_text("netcdf s {\ndimensions: x = %d;\nvariables: int i(x); string s(x);\n"
                   "data: i = %s; s = %s;\n}\n"
                   % (len(values), ", ".join(map(str, values)),
                      ", ".join(f'"{"ab" * v}"' for v in values)))
    src = tmp_path / "src.file"
    res = nczarrfs("gen", "-o", str(src), str(cdl))
    assert res.returncode == 0, res.stderr.decode()
    return src


@pytest.mark.parametrize("elementsize,dtype", [(2, "<f8"), (3, "<i4"), (8, "<i4")])
def test_copy_to_nczarr_shuffles_as_netcdf_c_does(nczarrfs, tmp_path, elementsize, dtype):
    """numcodecs shuffles by any element size, netcdf-c by the type size whatever the
    metadata says: the NCZarr copy stores a shuffle netcdf-c decodes to the same values."""
    values = (np.arange(24) * 1.5).astype(dtype)
    src = tmp_path / "src.zarr"
    _v2_array(src, values, chunks=(24,), filters=[numcodecs.Shuffle(elementsize=elementsize)],
              compressors=numcodecs.Zlib(level=1))
    target = tmp_path / "copy.file"
    res = nczarrfs("copy", str(src), str(target))
    assert res.returncode == 0, res.stderr.decode()
    assert _netcdf_values(target, "v") == values.tolist()
    # The same for a chain asked for.
    chosen = tmp_path / "chosen.file"
    chain = json.dumps([{"id": "shuffle", "elementsize": 5}, {"id": "zlib", "level": 1}])
    res = nczarrfs("copy", "--codec", chain, str(src), str(chosen))
    assert res.returncode == 0, res.stderr.decode()
    assert _netcdf_values(chosen, "v") == values.tolist()


def _netcdf_zstd_level(path, var: str):
    """netCDF4-python's `filters()["complevel"]` of a zstd variable of an NCZarr dataset."""
    read = (f"import netCDF4\nwith netCDF4.Dataset('file://{path}#mode=nczarr,file') as nc:"
            f"\n    f = nc[{var!r}].filters()\n    assert f['zstd'], f\n    print(f['complevel'])")
    out = subprocess.run([sys.executable, "-c", read], capture_output=True, text=True,
                         env={**os.environ, "HDF5_PLUGIN_PATH": PLUGINS}, timeout=60)
    assert out.returncode == 0, out.stderr[-500:]
    return int(out.stdout)


@pytest.mark.parametrize("level", [-1, -5])
def test_copy_to_nczarr_of_a_negative_zstd_level_keeps_it_for_netcdf_c(nczarrfs, tmp_path, level):
    """netcdf-c refuses a negative number as a zstd level: the copy stores the level as
    netcdf-c writes it (unsigned), which netCDF4-python opens and reports as the level."""
    values = np.arange(6, dtype="<i4")
    src = tmp_path / "src.zarr"
    _v2_array(src, values, chunks=(6,), compressors=numcodecs.Zstd(level=level))
    for args in ([], ["--codec", f"zstd:{level}"]):
        target = tmp_path / f"copy{len(args)}.file"
        res = nczarrfs("copy", *args, str(src), str(target))
        assert res.returncode == 0, res.stderr.decode()
        assert _netcdf_values(target, "v") == values.tolist()
        assert _netcdf_zstd_level(target, "v") == level


@pytest.mark.parametrize("level", [-1, -5])
def test_negative_zstd_levels_netcdf_c_writes_are_read(nczarrfs, tmp_path, level):
    """netCDF4-python (netcdf-c 4.10.1) stores complevel=-5 as {"id": "zstd", "level":
    4294967291}: get, dump -s and copies read it as the level netcdf-c means."""
    src = tmp_path / "src.file"
    twin = tmp_path / "twin.nc"
    for target in (f"file://{src}#mode=nczarr,file", str(twin)):
        with netCDF4.Dataset(target, "w") as nc:
            nc.createDimension("x", 50)
            v = nc.createVariable("v", "f4", ("x",), compression="zstd", complevel=level)
            v[:] = np.arange(50) % 7 * 0.5
    assert json.loads((src / "v" / ".zarray").read_text())["compressor"]["level"] == 2**32 + level
    want = _netcdf_values(src, "v")
    res = nczarrfs("get", str(src), "v")
    assert res.returncode == 0, res.stderr.decode()
    assert np.frombuffer(res.stdout, "<f4").tolist() == want
    # ncdump -s of the netCDF-4 twin prints the level as HDF5 holds it.
    ncdump = subprocess.run(["ncdump", "-hs", str(twin)], capture_output=True, text=True,
                            check=True).stdout
    want_filter = next(ln.strip() for ln in ncdump.splitlines() if ":_Filter" in ln)
    res = nczarrfs("dump", "-hs", str(src))
    assert res.returncode == 0, res.stderr.decode()
    assert want_filter in res.stdout.decode()
    copy = tmp_path / "copy.file"
    res = nczarrfs("copy", str(src), str(copy))
    assert res.returncode == 0, res.stderr.decode()
    assert _netcdf_values(copy, "v") == want
    assert _netcdf_zstd_level(copy, "v") == level
    pure = tmp_path / "copy.zarr"
    res = nczarrfs("copy", "-k", "zarr", str(src), str(pure))
    assert res.returncode == 0, res.stderr.decode()
    assert zarr.open_array(str(pure / "v"), mode="r")[:].tolist() == want
    # numcodecs' -5 prints as ncdump prints netcdf-c's.
    zsrc = tmp_path / "z.zarr"
    _v2_array(zsrc, np.arange(6, dtype="<f4"), chunks=(6,), compressors=numcodecs.Zstd(level))
    res = nczarrfs("dump", "-hs", str(zsrc))
    assert res.returncode == 0, res.stderr.decode()
    assert want_filter in res.stdout.decode()


def _zarr_v3_zstd(path, var: str):
    """zarr-python 3's zstd codec of a Zarr v3 array: it opens the array and parses the level
    (refusing one above 22, as netcdf-c's unsigned 4294967291 for -5)."""
    from zarr.codecs import ZstdCodec

    array = zarr.open_array(str(path / var), mode="r")
    assert array.metadata.zarr_format == 3
    [codec] = [c for c in array.compressors if isinstance(c, ZstdCodec)]
    return array, codec


@pytest.mark.parametrize("level", [-1, -5])
def test_negative_zstd_levels_on_zarr_v3_are_signed(nczarrfs, tmp_path, level):
    """netcdf-c writes no Zarr v3, so its unsigned form of a negative level serves no reader
    there: every v3 target stores the signed level, which zarr-python 3 opens; the NCZarr v2
    copy keeps netcdf-c's form."""
    want = (np.arange(50) % 7 * 0.5).tolist()
    src = tmp_path / "netcdf-c.file"
    with netCDF4.Dataset(f"file://{src}#mode=nczarr,file", "w") as nc:
        nc.createDimension("x", 50)
        nc.createVariable("v", "f4", ("x",), compression="zstd", complevel=level)[:] = want
    assert json.loads((src / "v" / ".zarray").read_text())["compressor"]["level"] == 2**32 + level
    plain = _int_source(nczarrfs, tmp_path)
    cdl = tmp_path / "dump.cdl"
    dump = nczarrfs("dump", "-s", str(src))
    assert dump.returncode == 0, dump.stderr.decode()
    assert f'_Filter = "32015,{2**32 + level}"'.encode() in dump.stdout
    cdl.write_bytes(dump.stdout)
    writes = [
        (["copy", "-k", "zarr,v3", str(src)], "v", want),
        (["copy", "-k", "nczarr,v3", str(src)], "v", want),
        (["copy", "-k", "nczarr,v3", "--codec", f"zstd:{level}", "-V", "i", str(plain)], "i",
         list(range(1, 7))),
        (["copy", "-k", "zarr,v3", "--codec", f"zstd:{level}", "-V", "i", str(plain)], "i",
         list(range(1, 7))),
        (["gen", "-k", "v3", "-o"], "v", want),
        (["gen", "-k", "zarr,v3", "-o"], "v", want),
    ]
    for n, (args, var, values) in enumerate(writes):
        target = tmp_path / f"t{n}.zarr"
        args = [*args, str(target), str(cdl)] if args[0] == "gen" else [*args, str(target)]
        res = nczarrfs(*args)
        assert res.returncode == 0, res.stderr.decode()
        array, codec = _zarr_v3_zstd(target, var)
        assert codec.level == level, args
        assert array[:].tolist() == values, args
    # netcdf-c reads the NCZarr v2 copy, in its own form.
    v2 = tmp_path / "v2.file"
    res = nczarrfs("copy", "-k", "nczarr", str(src), str(v2))
    assert res.returncode == 0, res.stderr.decode()
    assert json.loads((v2 / "v" / ".zarray").read_text())["compressor"]["level"] == 2**32 + level
    assert _netcdf_values(v2, "v") == want


def test_copy_to_nczarr_leaves_out_a_shuffle_of_1_byte_elements(nczarrfs, tmp_path):
    """numcodecs' Shuffle(1) changes nothing, but netcdf-c would shuffle by the type size
    wherever the chain has one: the NCZarr copy leaves it out rather than refusing a shuffle
    after the compressor that only its rewrite made."""
    src = tmp_path / "src.zarr"
    _v2_array(src, np.arange(50, dtype="<i4"), chunks=(20,), compressors=None,
              filters=[numcodecs.Shuffle(4), numcodecs.Zlib(1), numcodecs.Shuffle(1)])
    want = zarr.open_array(str(src / "v"), mode="r")[:].tolist()
    target = tmp_path / "copy.file"
    res = nczarrfs("copy", str(src), str(target))
    assert res.returncode == 0, res.stderr.decode()
    assert _netcdf_values(target, "v") == want
    pure = tmp_path / "copy.zarr"
    res = nczarrfs("copy", "-k", "zarr", str(src), str(pure))
    assert res.returncode == 0, res.stderr.decode()
    assert zarr.open_array(str(pure / "v"), mode="r")[:].tolist() == want


@pytest.mark.parametrize("mode", ["zarr,v3", "nczarr,v3"])
def test_shuffled_strings_on_zarr_v3_read_in_zarr_python(nczarrfs, tmp_path, mode):
    """`-s` on a string variable: its variable-length values make a stream numcodecs will not
    unshuffle, so the v3 copy leaves the shuffle out, as the v2 writer does when it must."""
    src = _int_source(nczarrfs, tmp_path)
    target = tmp_path / "v3.zarr"
    res = nczarrfs("copy", "-s", "-d", "1", "-k", mode, str(src), str(target))
    assert res.returncode == 0, res.stderr.decode()
    root = zarr.open_group(str(target), mode="r")
    assert root["s"][:].tolist() == ["ab" * v for v in range(1, 7)]
    assert root["i"][:].tolist() == list(range(1, 7))


REFUSED = [
    ("zlib,shuffle", "after the compressor zlib"),
    ("blosc:snappy", "blosclz, lz4, lz4hc, zlib, zstd"),
    ('[{"id": "blosc", "cname": "snappy", "clevel": 5, "shuffle": 1}]',
     "blosclz, lz4, lz4hc, zlib, zstd"),
]


@pytest.mark.parametrize("mode,chain,why", [
    *[("zarr", c, w) for c, w in REFUSED],
    *[("nczarr", c, w) for c, w in REFUSED],
    # NCZarr stores any shuffle by the type size, as netcdf-c reads it.
    ("zarr", '[{"id": "shuffle", "elementsize": 16}]', "16-byte elements over chunks of 24"),
])
def test_chains_numcodecs_cannot_decode_are_refused(nczarrfs, tmp_path, chain, why, mode):
    """What numcodecs (so zarr-python) could not decode is refused with the reason, and no
    target is left. The chains it decodes are written and read back in zarr-python."""
    src = _int_source(nczarrfs, tmp_path)
    target = tmp_path / "t.zarr"
    res = nczarrfs("copy", "-V", "i", "--codec", chain, "-k", mode, str(src), str(target))
    assert res.returncode != 0
    assert why in res.stderr.decode()
    assert not target.exists()
    res = nczarrfs("copy", "-V", "i", "--codec", "shuffle,blosc:zstd", "-k", mode, str(src),
                   str(target))
    assert res.returncode == 0, res.stderr.decode()
    assert zarr.open_array(str(target / "i"), mode="r")[:].tolist() == list(range(1, 7))


def test_zstd_level_23_is_read(nczarrfs, tmp_path):
    """numcodecs takes levels above 22 (libzstd clamps them when compressing)."""
    values = np.arange(5, dtype="<i4")
    src = tmp_path / "src.zarr"
    _v2_array(src, values, chunks=(5,), compressors=numcodecs.Zstd(level=23))
    res = nczarrfs("get", str(src), "v")
    assert res.returncode == 0, res.stderr.decode()
    assert np.frombuffer(res.stdout, "<i4").tolist() == [0, 1, 2, 3, 4]


def test_shuffle_without_elementsize_is_numcodecs_default(nczarrfs, tmp_path):
    """A Zarr v2 `{"id": "shuffle"}` is numcodecs' Shuffle(), of 4-byte elements."""
    values = np.array([1.5, -2.25, 3.0, 1e10], dtype="<f8")
    src = tmp_path / "src.zarr"
    _v2_array(src, values, chunks=(4,), filters=[numcodecs.Shuffle(elementsize=4)],
              compressors=None)
    zarray = src / "v" / ".zarray"
    meta = json.loads(zarray.read_text())
    meta["filters"] = [{"id": "shuffle"}]
    zarray.write_text(json.dumps(meta))
    want = zarr.open_array(str(src / "v"), mode="r")[:]
    assert want.tolist() == values.tolist()
    res = nczarrfs("get", "--npy", str(src), "v")
    assert res.returncode == 0, res.stderr.decode()
    got = np.load(io.BytesIO(res.stdout))
    assert got.tolist() == want.tolist()
    # Copied on, the values stay.
    target = tmp_path / "copy.file"
    assert nczarrfs("copy", str(src), str(target)).returncode == 0
    assert _netcdf_values(target, "v") == values.tolist()


def test_dump_s_of_zarr_v3_is_gen_input(nczarrfs, tmp_path):
    """`_Codecs` of a Zarr v3 variable is a v3 codec list, which gen takes back."""
    from zarr.codecs import ZstdCodec
    from zarr.codecs.numcodecs import Shuffle

    values = np.arange(24, dtype="<i4")
    src = tmp_path / "src.zarr"
    root = zarr.open_group(str(src), mode="w", zarr_format=3)
    root.create_array("v", shape=(24,), chunks=(8,), dtype="<i4", dimension_names=["x"],
                      compressors=[Shuffle(elementsize=4), ZstdCodec(level=3)])[:] = values
    dump = nczarrfs("dump", "-s", str(src))
    assert dump.returncode == 0, dump.stderr.decode()
    assert b'"name\\": \\"numcodecs.shuffle' in dump.stdout
    cdl = tmp_path / "d.cdl"
    cdl.write_bytes(dump.stdout)
    for mode in ["nczarr", "zarr,v3"]:
        target = tmp_path / f"{mode.replace(',', '')}.file"
        res = nczarrfs("gen", "-k", mode, "-o", str(target), str(cdl))
        assert res.returncode == 0, res.stderr.decode()
        out = zarr.open_array(str(target / "v"), mode="r")
        assert out[:].tolist() == values.tolist()
        assert out.chunks == (8,)
    assert _netcdf_values(tmp_path / "nczarr.file", "v") == values.tolist()


@pytest.mark.parametrize("codec", ["crc32", "lz4"])
def test_codec_netcdf_c_lacks_warns_when_asked_for(nczarrfs, tmp_path, codec):
    src = _int_source(nczarrfs, tmp_path)
    target = tmp_path / "t.file"
    chain = json.dumps([{"id": codec}])
    res = nczarrfs("copy", "-V", "i", "--codec", chain, str(src), str(target))
    assert res.returncode == 0, res.stderr.decode()
    assert f"netcdf-c has no codec {codec}" in res.stderr.decode()
    with pytest.raises(RuntimeError, match="[Ff]ilter"):
        with netCDF4.Dataset(f"file://{target}#mode=nczarr,file") as nc:
            nc["i"][:]


def test_a_truncated_string_chunk_is_called_truncated(nczarrfs, tmp_path):
    src = tmp_path / "s.zarr"
    root = zarr.open_group(str(src), mode="w", zarr_format=2)
    a = root.create_array("v", shape=(4,), chunks=(4,), dtype=str, compressors=None,
                          attributes={"_ARRAY_DIMENSIONS": ["x"]})
    a[:] = ["x", "", "hello world", "ab"]
    chunk = src / "v" / "0"
    chunk.write_bytes(chunk.read_bytes()[:-3])
    with pytest.raises(ValueError, match="truncated"):
        zarr.open_array(str(src / "v"), mode="r")[:]
    res = nczarrfs("get", str(src), "v")
    assert res.returncode != 0
    err = res.stderr.decode().splitlines()[-1]
    assert "truncated or corrupt" in err, err
    assert "since it was opened" not in err
