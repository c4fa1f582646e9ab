"""Command lines written for Debian's ncgen, nccopy and ncdump (netcdf-c 4.9.0) given to
`gen`, `copy` and `dump`: where the reference tool takes an option, or a combination of
options, so does nczarrfs, with the same meaning (the same exit status, and the same output
or dataset content); where it refuses one, so does nczarrfs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

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
