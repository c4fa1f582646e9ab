"""Command lines written for Debian's ncgen, nccopy and ncdump (netcdf-c 4.9.0) given to
`gen`, `copy` and `dump`: where the reference tool takes an option, or a combination of
options, so does nczarrfs, with the same meaning (the same exit status, and the same output
or dataset content); where it refuses one, so does nczarrfs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import netCDF4
import pytest

from twins import nczarr_url

INT_CDL = "netcdf x { dimensions: d = 3 ; variables: int v(d) ; data: v = 1, 2, 3 ; }\n"


def _ncdump(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ncdump", *args], capture_output=True, check=False)


def _data_section(text: bytes) -> bytes:
    """What follows `data:` in CDL: the values, whatever the dataset's name and kind."""
    return text.split(b"data:", 1)[1]


@pytest.fixture
def int_twins(nczarrfs, tmp_path) -> tuple[Path, Path]:
    """The same small dataset made by ncgen (netCDF-4) and by `gen` (NCZarr)."""
    cdl = tmp_path / "x.cdl"
    cdl.write_text(INT_CDL)
    nc, store = tmp_path / "x.nc", tmp_path / "x.file"
    subprocess.run(["ncgen", "-k", "nc4", "-o", str(nc), str(cdl)], check=True)
    r = nczarrfs("gen", "-o", str(store), str(cdl))
    assert r.returncode == 0, r.stderr
    return nc, store


@pytest.mark.parametrize("size", ["4194304", "64M", "1.5k", "0"])
def test_copy_dash_h_is_the_chunk_cache_size_as_in_nccopy(nczarrfs, int_twins, tmp_path, size):
    """nccopy's `-h N` sets the chunk cache size and copies; `-h` is not help."""
    nc, store = int_twins
    ref = tmp_path / "ref.nc"
    r = subprocess.run(["nccopy", "-h", size, str(nc), str(ref)], capture_output=True)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out.file"
    r = nczarrfs("copy", "-h", size, str(store), str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout == b""
    got = nczarrfs("dump", str(out))
    assert _data_section(got.stdout) == _data_section(_ncdump(str(ref)).stdout)


def test_copy_dash_h_with_a_bad_suffix_is_refused_as_by_nccopy(nczarrfs, int_twins, tmp_path):
    nc, store = int_twins
    r = subprocess.run(["nccopy", "-h", "4X", str(nc), str(tmp_path / "ref.nc")],
                       capture_output=True)
    assert r.returncode != 0
    out = tmp_path / "out.file"
    r = nczarrfs("copy", "-h", "4X", str(store), str(out))
    assert r.returncode == 2, r.stderr
    assert not out.exists()


@pytest.mark.parametrize("command", ["copy", "dump", "gen", "get", "put"])
def test_long_help_prints_help(nczarrfs, command):
    r = nczarrfs(command, "--help")
    assert r.returncode == 0, r.stderr
    assert b"Usage:" in r.stdout


# ncgen's and nccopy's kind options that make netCDF-4 (Debian 4.9.0: `ncdump -k` of the
# result says `netCDF-4`), which is NCZarr here.
NETCDF4_KINDS = [["-k", "nc4"], ["-k", "3"], ["-k", "netCDF-4"], ["-k", "netCDF4"],
                 ["-k", "enhanced"], ["-k", "hdf5"], ["-4"], ["-k", "nc7", "-4"],
                 ["-7", "-k", "nc4"], ["-k", "nc7", "-k", "nc4"]]
# Those that make the netCDF-4 classic model (`netCDF-4 classic model`) or a netCDF-3 format.
OTHER_KINDS = [(["-k", "4"], "netCDF-4 classic model"), (["-k", "nc7"], "netCDF-4 classic model"),
               (["-k", "netCDF-4 classic model"], "netCDF-4 classic model"),
               (["-7"], "netCDF-4 classic model"), (["-4", "-k", "nc7"], "netCDF-4 classic model"),
               (["-k", "nc4", "-7"], "netCDF-4 classic model"), (["-k", "1"], "classic"),
               (["-3"], "classic"), (["-k", "2"], "64-bit offset"), (["-6"], "64-bit offset")]


def _reference_kind(tool: str, options: list[str], tmp_path: Path) -> str:
    """`ncdump -k` of what ncgen or nccopy makes with `options`."""
    cdl = tmp_path / "ref.cdl"
    cdl.write_text(INT_CDL)
    src, out = tmp_path / "ref-src.nc", tmp_path / "ref-out.nc"
    out.unlink(missing_ok=True)
    if tool == "gen":
        cmd = ["ncgen", *options, "-o", str(out), str(cdl)]
    else:
        subprocess.run(["ncgen", "-k", "nc4", "-o", str(src), str(cdl)], check=True)
        cmd = ["nccopy", *options, str(src), str(out)]
    subprocess.run(cmd, check=True, capture_output=True)
    return _ncdump("-k", str(out)).stdout.decode().strip()


def _ours(nczarrfs, tool: str, options: list[str], store: Path, tmp_path: Path, out: Path):
    if tool == "gen":
        return nczarrfs("gen", *options, "-o", str(out), str(tmp_path / "x.cdl"))
    return nczarrfs("copy", *options, str(store), str(out))


@pytest.mark.parametrize("tool", ["gen", "copy"])
@pytest.mark.parametrize("options", NETCDF4_KINDS, ids=" ".join)
def test_netcdf4_kinds_make_nczarr(nczarrfs, int_twins, tmp_path, tool, options):
    assert _reference_kind(tool, options, tmp_path) == "netCDF-4"
    nc, store = int_twins
    out = tmp_path / "out.file"
    r = _ours(nczarrfs, tool, options, store, tmp_path, out)
    assert r.returncode == 0, r.stderr
    assert (out / ".zattrs").exists()  # NCZarr v2: its superblock is in the root's attributes
    got = nczarrfs("dump", str(out))
    assert _data_section(got.stdout) == _data_section(_ncdump(str(nc)).stdout)


@pytest.mark.parametrize("tool", ["gen", "copy"])
@pytest.mark.parametrize("options,kind", OTHER_KINDS, ids=lambda o: " ".join(o) if
                         isinstance(o, list) else o)
def test_classic_model_and_netcdf3_kinds_are_refused(nczarrfs, int_twins, tmp_path, tool,
                                                     options, kind):
    """NCZarr records no classic model (see below), nor is it a netCDF-3 format: rather than
    full netCDF-4 under the name of another kind, nothing is written."""
    assert _reference_kind(tool, options, tmp_path) == kind
    _, store = int_twins
    out = tmp_path / "out.file"
    r = _ours(nczarrfs, tool, options, store, tmp_path, out)
    assert r.returncode == 1, r.stderr
    want = b"classic model" if "model" in kind else b"netCDF-3 format"
    assert want in r.stderr, r.stderr
    assert not out.exists()


def test_netcdf_c_keeps_no_classic_model_in_nczarr(tmp_path):
    """Why the classic model is refused: netcdf-c, asked for it (NC_CLASSIC_MODEL) with
    mode=nczarr, writes the very objects it writes for netCDF-4, takes a string variable the
    classic model forbids, and reads the dataset back as netCDF-4."""
    trees = []
    for fmt in ("NETCDF4_CLASSIC", "NETCDF4"):
        path = tmp_path / f"{fmt}.file"
        with netCDF4.Dataset(nczarr_url(str(path)), "w", format=fmt) as nc:
            nc.createDimension("d", 2)
            nc.createVariable("s", str, ("d",))
        with netCDF4.Dataset(nczarr_url(str(path))) as nc:
            assert nc.data_model == "NETCDF4"
        trees.append({p.relative_to(path): p.read_bytes() for p in path.rglob("*")
                      if p.is_file()})
    assert trees[0] == trees[1]
