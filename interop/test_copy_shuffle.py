"""`nczarrfs copy -s` and `-d N -s`: where shuffle is added, and that each variable keeps its
compression otherwise. With `-d`, the result is what Debian's nccopy makes of the netCDF-4
twin (`ncdump -hs` of its copy); alone, nccopy ignores `-s`, and nczarrfs adds shuffle before
the deflate of each deflated variable only (first principles: the chain is the source's with
shuffle first)."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

CDL = """netcdf cs {
dimensions:
  x = 100 ;
variables:
  float a(x) ;
    a:_DeflateLevel = 4 ;
  short b(x) ;
  int c(x) ;
    c:_DeflateLevel = 2 ;
    c:_Shuffle = "true" ;
  double d(x) ;
data:
  a = 1, 2, 3 ;
  b = 4, 5 ;
  c = 6 ;
}
"""


def _chains(path: Path) -> dict[str, list]:
    out = {}
    for name in "abcd":
        meta = json.loads((path / name / ".zarray").read_text())
        chain = [f["id"] for f in meta["filters"] or []]
        if meta["compressor"]:
            c = meta["compressor"]
            chain.append(f"{c['id']}:{c.get('level', c.get('clevel'))}")
        out[name] = chain
    return out


def _specials(text: str) -> list[str]:
    return sorted(re.findall(r"\w+:_(?:Shuffle|DeflateLevel) = \S+ ;", text))


@pytest.fixture
def source(nczarrfs, tmp_path):
    (tmp_path / "cs.cdl").write_text(CDL)
    src = tmp_path / "cs.file"
    r = nczarrfs("gen", "-o", str(src), str(tmp_path / "cs.cdl"))
    assert r.returncode == 0, r.stderr.decode()
    # d gets zstd, which -s leaves alone.
    r = nczarrfs("copy", "-V", "d", "--codec", "zstd:3", str(src), str(tmp_path / "d.file"))
    assert r.returncode == 0, r.stderr.decode()
    (src / "d").rename(tmp_path / "d_plain")
    (tmp_path / "d.file" / "d").rename(src / "d")
    return src


def test_shuffle_alone_goes_only_where_deflated(nczarrfs, source, tmp_path):
    out = tmp_path / "out.file"
    r = nczarrfs("copy", "-s", str(source), str(out))
    assert r.returncode == 0, r.stderr.decode()
    assert _chains(out) == {
        "a": ["shuffle", "zlib:4"],
        "b": [],
        "c": ["shuffle", "zlib:2"],
        "d": ["zstd:3"],
    }
    for name, want in (("a", b"\x00\x00\x80\x3f"), ("b", b"\x04\x00")):
        got = nczarrfs("get", str(out), name, "--count", "1").stdout
        assert got == want


@pytest.mark.parametrize("level", ["0", "3"])
def test_deflate_with_shuffle_is_what_nccopy_makes(nczarrfs, source, tmp_path, level):
    (tmp_path / "cs.cdl").write_text(CDL)
    nc = tmp_path / "cs.nc"
    subprocess.run(["ncgen", "-4", "-o", str(nc), str(tmp_path / "cs.cdl")], check=True)
    theirs = tmp_path / f"theirs{level}.nc"
    subprocess.run(["nccopy", "-d", level, "-s", str(nc), str(theirs)], check=True)
    want = _specials(subprocess.run(["ncdump", "-hs", str(theirs)], capture_output=True,
                                    text=True, check=True).stdout)
    ours = tmp_path / f"ours{level}.file"
    r = nczarrfs("copy", "-d", level, "-s", str(source), str(ours))
    assert r.returncode == 0, r.stderr.decode()
    got = _specials(nczarrfs("dump", "-hs", str(ours)).stdout.decode())
    assert got == want
