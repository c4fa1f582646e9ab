"""`nczarrfs dump -s` (ncdump's special virtual attributes) against netcdf-c.

The oracle has two parts, both real netcdf-c:

* What to print is what netcdf-c reports through its inquiry functions (chunking, filters,
  byte order, no-fill, `_Codecs`, `_NCProperties`, ...), here asked through netCDF4-python
  (netcdf-c 4.10.1) and, for no-fill, through the same library with ctypes.
* How ncdump prints those reports (which lines, in which order) is `special_lines` below. It
  is checked first against Debian's `ncdump -s` of the HDF5 twin, fed with netCDF4-python's
  reports on that same file: the rule must reproduce ncdump's lines exactly.

Then `nczarrfs dump -s` of the NCZarr twin (written by netcdf-c) must equal Debian's
`ncdump -s` of the HDF5 twin with only the special lines replaced by the rule applied to
netcdf-c's reports on the NCZarr twin. The one choice of ours: a scalar is shown as
`contiguous` (netcdf-c reports an NCZarr scalar as chunked with no chunk sizes, which ncdump
cannot print).
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import re
import subprocess

import netCDF4
import numpy as np
import pytest

import twins
from conftest import SEED

COUNT = int(os.environ.get("NCZARRFS_SPECIAL_COUNT", "40"))
SPECIAL = {"_Storage", "_ChunkSizes", "_Fletcher32", "_Shuffle", "_DeflateLevel", "_Filter",
           "_Codecs", "_Endianness", "_NoFill", "_NCProperties", "_SuperblockVersion",
           "_IsNetcdf4", "_Format"}


def _libnetcdf():
    libs = os.path.join(os.path.dirname(netCDF4.__file__), "..", "netcdf4.libs")
    found = glob.glob(os.path.join(libs, "libnetcdf*"))
    assert found, f"no libnetcdf in {libs}"
    # The library netCDF4-python already loaded: the same ids are valid in both.
    return ctypes.CDLL(found[0])


LIB = _libnetcdf()


def _no_fill(var) -> bool:
    flag = ctypes.c_int(0)
    status = LIB.nc_inq_var_fill(var._grpid, var._varid, ctypes.byref(flag), None)
    assert status == 0, f"nc_inq_var_fill: {status}"
    return bool(flag.value)


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def special_lines(var) -> list[str]:
    """ncdump -s's lines for one variable, from netcdf-c's reports on it."""
    name = var.name
    lines = []
    chunking = var.chunking()
    if var.ndim == 0 or chunking == "contiguous":
        lines.append(f"{name}:_Storage = \"contiguous\"")
    else:
        lines.append(f"{name}:_Storage = \"chunked\"")
        lines.append(f"{name}:_ChunkSizes = " + ", ".join(str(c) for c in chunking))
    filters = var.filters() or {}
    others = [k for k in ("zstd", "bzip2", "blosc", "szip") if filters.get(k)]
    assert not others, f"{var.name}: the twins use no {others}"
    if filters.get("fletcher32"):
        lines.append(f"{name}:_Fletcher32 = \"true\"")
    if filters.get("shuffle"):
        lines.append(f"{name}:_Shuffle = \"true\"")
    if filters.get("zlib"):
        lines.append(f"{name}:_DeflateLevel = {filters['complevel']}")
    try:
        codecs = var.getncattr("_Codecs")
    except (AttributeError, KeyError, RuntimeError):
        codecs = ""
    if codecs:
        lines.append(f"{name}:_Codecs = {_quoted(codecs)}")
    sized = var.dtype != str and np.dtype(var.dtype).itemsize > 1
    if sized and var.endian() in ("little", "big"):
        lines.append(f"{name}:_Endianness = \"{var.endian()}\"")
    if _no_fill(var):
        lines.append(f"{name}:_NoFill = \"true\"")
    return lines


def global_lines(nc) -> list[str]:
    lines = []
    try:
        lines.append(f":_NCProperties = {_quoted(nc.getncattr('_NCProperties'))}")
    except (AttributeError, KeyError, RuntimeError):
        pass
    lines.append(f":_SuperblockVersion = {int(nc.getncattr('_SuperblockVersion'))}")
    lines.append(f":_IsNetcdf4 = {int(nc.getncattr('_IsNetcdf4'))}")
    assert nc.data_model == "NETCDF4"
    lines.append(':_Format = "netCDF-4"')
    return lines


def expected_specials(path: str) -> list[str]:
    """Every special line of a dataset, in ncdump's order (groups depth-first as ncdump
    walks them: a group's variables, then its attributes, then its subgroups)."""
    out: list[str] = []

    def walk(grp, root: bool):
        for var in grp.variables.values():
            out.extend(special_lines(var))
        if root:
            out.extend(global_lines(grp))
        for sub in grp.groups.values():
            walk(sub, False)

    with netCDF4.Dataset(path) as nc:
        walk(nc, True)
    return out


def _is_special(line: str) -> bool:
    lhs = line.strip().split(" = ", 1)[0]
    return ":" in lhs and lhs.rsplit(":", 1)[1] in SPECIAL


def split(cdl: str) -> tuple[list[str], list[str]]:
    """(the lines that are not special, the special lines without indentation and ` ;`, their
    names unescaped: the rule works on raw names, and the rest of the output, compared
    whole, shows that names are escaped as ncdump escapes them)."""
    plain, special = [], []
    for line in cdl.splitlines():
        if _is_special(line):
            lhs, value = line.strip().removesuffix(" ;").split(" = ", 1)
            special.append(re.sub(r"\\(.)", r"\1", lhs) + " = " + value)
        else:
            plain.append(line)
    return plain, special


def _ncdump(path: str) -> str | None:
    r = subprocess.run(["ncdump", "-s", "-h", path], capture_output=True, check=False)
    # Debian's ncdump fails on some HDF5 files ("HDF error"; see test_gen_oracle.py).
    return r.stdout.decode("utf-8", "surrogateescape") if r.returncode == 0 else None


def test_special_attributes_match_netcdf_c(nczarrfs, tmp_path):
    print(f"seed {SEED}")
    failures = []
    done = skipped = 0
    seed = SEED
    while done < COUNT:
        assert skipped <= COUNT // 10, f"Debian ncdump failed on {skipped} files"
        name = f"s{done + skipped}"
        zpath, hpath, _ = twins.write_twins(str(tmp_path), name, seed)
        seed += 1
        theirs = _ncdump(hpath)
        if theirs is None:
            skipped += 1
            continue
        done += 1
        context = f"seed {seed - 1}, files in {tmp_path}"
        plain_theirs, special_theirs = split(theirs)
        rule = expected_specials(hpath)
        if special_theirs != rule:
            failures.append(f"{context}: the rule disagrees with Debian's ncdump -s on {hpath}:"
                            f"\n  ncdump: {special_theirs}\n  rule:   {rule}")
            continue
        r = nczarrfs("dump", "-s", "-h", "-n", name, zpath)
        assert r.returncode == 0, r.stderr.decode()
        plain_ours, special_ours = split(r.stdout.decode("utf-8", "surrogateescape"))
        if plain_ours != plain_theirs:
            failures.append(f"{context}: dump -s differs outside the special attributes")
        want = expected_specials(twins.nczarr_url(zpath))
        if special_ours != want:
            diff = [f"ours {o!r} / netcdf-c {w!r}" for o, w in zip(special_ours, want) if o != w]
            failures.append(f"{context}: special attributes differ from netcdf-c's: "
                            f"{diff[:3] or (len(special_ours), len(want))}")
    print(f"{skipped} seeds skipped: Debian ncdump failed")
    assert not failures, "\n".join(failures)


@pytest.fixture(scope="module")
def plugins():
    path = os.path.join(os.path.dirname(netCDF4.__file__), "plugins")
    old = os.environ.get("HDF5_PLUGIN_PATH")
    os.environ["HDF5_PLUGIN_PATH"] = path
    yield path
    if old is None:
        os.environ.pop("HDF5_PLUGIN_PATH", None)
    else:
        os.environ["HDF5_PLUGIN_PATH"] = old


COMPRESSIONS = [
    dict(compression="bzip2", complevel=9),
    dict(compression="zstd", complevel=4),
    dict(compression="blosc_lz4", complevel=5, blosc_shuffle=1),
    dict(compression="blosc_zstd", complevel=7, blosc_shuffle=2),
    dict(compression="blosc_zlib", complevel=2, blosc_shuffle=0),
    dict(zlib=True, complevel=3, shuffle=True, fletcher32=True),
    dict(zlib=True, complevel=9, shuffle=False),
    dict(fletcher32=True),
]


def filter_reports(var) -> list[str]:
    """netcdf-c's report of a variable's filters (`nc_inq_var_filter_ids` and
    `nc_inq_var_filter_info`), each as `id,param,...`, in the order it gives them."""
    count = ctypes.c_size_t(0)
    status = LIB.nc_inq_var_filter_ids(var._grpid, var._varid, ctypes.byref(count), None)
    assert status == 0, f"nc_inq_var_filter_ids: {status}"
    ids = (ctypes.c_uint * max(count.value, 1))()
    LIB.nc_inq_var_filter_ids(var._grpid, var._varid, ctypes.byref(count), ids)
    out = []
    for fid in ids[:count.value]:
        n = ctypes.c_size_t(0)
        status = LIB.nc_inq_var_filter_info(var._grpid, var._varid, fid, ctypes.byref(n), None)
        assert status == 0, f"nc_inq_var_filter_info: {status}"
        params = (ctypes.c_uint * max(n.value, 1))()
        LIB.nc_inq_var_filter_info(var._grpid, var._varid, fid, ctypes.byref(n), params)
        out.append(",".join(str(v) for v in [fid, *params[:n.value]]))
    return out


def filter_lines(var, all_filters: bool) -> list[str]:
    """ncdump -s's filter lines for one variable, from netcdf-c's report on its filters:
    fletcher32, shuffle and deflate by their own attributes (unless `-F`), the rest in
    `_Filter`."""
    reports = filter_reports(var)
    ids = [r.split(",")[0] for r in reports]
    lines = []
    if not all_filters:
        if "3" in ids:
            lines.append(f'{var.name}:_Fletcher32 = "true"')
        if "2" in ids:
            lines.append(f'{var.name}:_Shuffle = "true"')
        if "1" in ids:
            lines.append(f"{var.name}:_DeflateLevel = {reports[ids.index('1')].split(',')[1]}")
        reports = [r for r, i in zip(reports, ids) if i not in ("1", "2", "3")]
    if reports:
        lines.append(f'{var.name}:_Filter = "{"|".join(reports)}"')
    return lines


FILTER_NAMES = ("_Fletcher32", "_Shuffle", "_DeflateLevel", "_Filter")


def dumped_filter_lines(cdl: str) -> list[str]:
    return [s for s in split(cdl)[1] if s.split(" = ")[0].rsplit(":", 1)[1] in FILTER_NAMES]


def expected_filter_lines(url: str, all_filters: bool) -> list[str]:
    with netCDF4.Dataset(url) as nc:
        return [line for var in nc.variables.values() for line in filter_lines(var, all_filters)]


def _as_sets(lines):
    return [(l.split(" = ")[0], frozenset(l.split(" = ")[1].strip('"').split("|")))
            for l in lines]


@pytest.mark.parametrize("flag", [[], ["-F"]], ids=["standard", "all-filters"])
def test_filters_and_codecs_match_netcdf_c(nczarrfs, tmp_path, plugins, flag):
    """Every compression netCDF4-python offers, written by netcdf-c as NCZarr and as HDF5.
    The rule `filter_lines` turning netcdf-c's filter reports into ncdump's lines must give
    Debian's `ncdump -s` (with `-F`, `ncdump -s -F`) of the HDF5 file from the reports on that
    file; our filter lines must be the rule applied to netcdf-c's reports on the NCZarr store,
    which differ from HDF5's in their parameters (netcdf-c reports shuffle without the element
    size, blosc without type size and chunk bytes). `_Codecs` equals netcdf-c's report. HDF5
    runs fletcher32 first whatever the order asked, so with `-F` the HDF5 check compares a
    chain holding it as a set."""
    zpath = str(tmp_path / "c.file")
    hpath = str(tmp_path / "c.nc")
    for target in (twins.nczarr_url(zpath), hpath):
        with netCDF4.Dataset(target, "w") as nc:
            nc.createDimension("x", 60)
            nc.createDimension("y", 7)
            for i, kw in enumerate(COMPRESSIONS):
                dtype = ("f4", "f8", "i2", "i4")[i % 4]
                v = nc.createVariable(f"v{i}", dtype, ("x", "y"), chunksizes=(20, 7), **kw)
                v[:] = np.arange(420).reshape(60, 7)
    theirs = subprocess.run(["ncdump", "-s", "-h", *flag, hpath], capture_output=True,
                            check=True).stdout.decode()
    rule = expected_filter_lines(hpath, bool(flag))
    if flag:
        assert _as_sets(rule) == _as_sets(dumped_filter_lines(theirs))
    else:
        assert rule == dumped_filter_lines(theirs)
    r = nczarrfs("dump", "-s", "-h", *flag, zpath)
    assert r.returncode == 0, r.stderr.decode()
    want = expected_filter_lines(twins.nczarr_url(zpath), bool(flag))
    assert any("32001,0,0,0,0," in l for l in want), "netcdf-c's blosc report changed"
    assert dumped_filter_lines(r.stdout.decode()) == want
    codecs = [s for s in split(r.stdout.decode())[1] if ":_Codecs = " in s]
    with netCDF4.Dataset(twins.nczarr_url(zpath)) as nc:
        expected = [f"v{i}:_Codecs = {_quoted(nc[f'v{i}'].getncattr('_Codecs'))}"
                    for i in range(len(COMPRESSIONS))]
    assert codecs == expected


OUR_CHAINS = [
    "shuffle,zlib:4",
    "shuffle,fletcher32,zlib:2",
    "shuffle,zstd:5",
    "zstd:-5",
    "bz2:9",
    "blosc:lz4:5:1",
    "shuffle,blosc:zstd:3:2",
    "blosc:blosclz:0:0",
    '[{"id": "blosc", "cname": "zlib", "clevel": 4, "shuffle": 1, "blocksize": 1024}]',
]


@pytest.mark.parametrize("chain", OUR_CHAINS)
@pytest.mark.parametrize("flag", [[], ["-F"]], ids=["standard", "all-filters"])
def test_filters_of_our_stores_match_netcdf_c(nczarrfs, tmp_path, plugins, chain, flag):
    """A store `copy` writes, with each codec chain over variables of several types (strings,
    whose shuffle copy leaves out, and chars too): our filter lines are the rule applied to
    what netcdf-c reports reading that store."""
    src = str(tmp_path / "src.file")
    with netCDF4.Dataset(twins.nczarr_url(src), "w") as nc:
        nc.createDimension("x", 12)
        nc.createDimension("n", 5)
        nc.createVariable("i", "i4", ("x",))[:] = np.arange(12)
        nc.createVariable("d", "f8", ("x", "n"))[:] = np.arange(60).reshape(12, 5) / 7
        nc.createVariable("b", "i1", ("n",))[:] = np.arange(5)
        s = nc.createVariable("s", str, ("n",))
        for k in range(5):
            s[k] = "w" * k
        nc.createVariable("c", "S1", ("x",))[:] = np.array(list(b"abcdefghijkl"), "S1")
    out = str(tmp_path / "out.file")
    r = nczarrfs("copy", "--codec", chain, src, out)
    assert r.returncode == 0, r.stderr.decode()
    r = nczarrfs("dump", "-s", "-h", *flag, out)
    assert r.returncode == 0, r.stderr.decode()
    want = expected_filter_lines(twins.nczarr_url(out), bool(flag))
    assert want
    assert dumped_filter_lines(r.stdout.decode()) == want


def test_kind_is_netcdf4(nczarrfs, tmp_path):
    """`dump -k` prints what `ncdump -k` prints for a netCDF-4 file, the kind netcdf-c
    reports for NCZarr (its data model is NETCDF4)."""
    zpath = str(tmp_path / "k.file")
    hpath = str(tmp_path / "k.nc")
    for target in (twins.nczarr_url(zpath), hpath):
        with netCDF4.Dataset(target, "w") as nc:
            nc.createDimension("x", 1)
    with netCDF4.Dataset(twins.nczarr_url(zpath)) as nc:
        assert nc.data_model == "NETCDF4"
    want = subprocess.run(["ncdump", "-k", hpath], capture_output=True, check=True).stdout
    assert nczarrfs("dump", "-k", zpath).stdout == want


def test_dump_s_output_regenerates_the_same_storage(nczarrfs, tmp_path, plugins):
    """`dump -s` of netcdf-c's NCZarr, through `gen`, gives a store whose `dump -s` is the
    same but for two things: the writer in `_NCProperties`, and shuffle's element size, which
    netcdf-c writes as 0 (a no-op to numcodecs) and gen writes as the real one. netcdf-c
    reads the same values and filters from both."""
    src = str(tmp_path / "src.file")
    with netCDF4.Dataset(twins.nczarr_url(src), "w") as nc:
        nc.createDimension("x", 60)
        nc.createDimension("y", 7)
        for i, kw in enumerate(COMPRESSIONS):
            v = nc.createVariable(f"v{i}", ("f4", "f8", "i2", "i4")[i % 4], ("x", "y"),
                                  chunksizes=(20, 7), **kw)
            v[:] = np.arange(420).reshape(60, 7) * (i + 1)
    first = nczarrfs("dump", "-s", "-n", "d", src)
    assert first.returncode == 0, first.stderr.decode()
    cdl = tmp_path / "d.cdl"
    cdl.write_bytes(first.stdout)
    out = str(tmp_path / "out.file")
    r = nczarrfs("gen", "-o", out, str(cdl))
    assert r.returncode == 0, r.stderr.decode()
    second = nczarrfs("dump", "-s", "-n", "d", out)

    def comparable(text: bytes) -> list[str]:
        lines = [l for l in text.decode().splitlines() if ":_NCProperties = " not in l]
        return [re.sub(r'elementsize\\": \d+', 'elementsize\\": N', l) for l in lines]

    assert comparable(second.stdout) == comparable(first.stdout)
    shuffled = 0
    for i in range(len(COMPRESSIONS)):
        zarray = json.loads((tmp_path / "out.file" / f"v{i}" / ".zarray").read_text())
        for codec in zarray["filters"] or []:
            if codec["id"] == "shuffle":
                shuffled += 1
                assert codec["elementsize"] == np.dtype(("f4", "f8", "i2", "i4")[i % 4]).itemsize
    assert shuffled == 1
    with netCDF4.Dataset(twins.nczarr_url(src)) as a, netCDF4.Dataset(twins.nczarr_url(out)) as b:
        for name, var in a.variables.items():
            assert var.filters() == b[name].filters(), name
            assert np.array_equal(var[:], b[name][:]), name
