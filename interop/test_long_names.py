"""File names as long as Linux allows (NAME_MAX, 255 bytes) through `gen`, `copy`, `get -o` and
`put`, with Debian's ncgen and ncdump as the oracles: ncgen writes `STEM.nc` for a 250-byte
STEM, and nczarrfs must write `STEM.file` (255 bytes) and `STEM.zip` as well, and rewrite them.

nczarrfs builds what it writes beside its destination under hidden names that copy the
destination's name (a staging directory, a temporary file); those must stay within NAME_MAX
however long the destination's name is, and leave nothing behind.
"""

from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

CDL = b"""netcdf x {
dimensions:
\tx = 3 ;
variables:
\tint v(x) ;
\t\tv:units = "m" ;
data:
 v = 1, 2, 3 ;

group: g {
  variables:
  \tdouble w(x) ;
  data:
   w = 0.5, 1.5, 2.5 ;
  } // group g
}
"""

#: Stems of 250 bytes: ASCII, two-byte UTF-8 characters, and bytes that are no UTF-8 (a file
#: name is bytes). With `.file` the name is 255 bytes long, the most a name may be.
STEMS = {
    "ascii": b"a" * 250,
    "utf8": "é".encode() * 125,
    "bytes": "é".encode() * 100 + b"\xff" * 50,
}


@pytest.fixture(params=sorted(STEMS))
def stem(request) -> bytes:
    return STEMS[request.param]


def _ncdump(*args: bytes | str) -> bytes:
    return subprocess.run(["ncdump", *args], capture_output=True, check=True).stdout


def _ncgen(tmp: bytes, stem: bytes) -> bytes:
    """The oracle: ncgen writes `stem.nc` from CDL beside it; returns that path."""
    cdl = os.path.join(tmp, b"x.cdl")
    with open(cdl, "wb") as f:
        f.write(CDL)
    nc = os.path.join(tmp, stem + b".nc")
    subprocess.run(["ncgen", "-k", "nc4", "-o", nc, cdl], check=True)
    return nc


def _clean(r: subprocess.CompletedProcess) -> None:
    """A command that succeeded without any complaint (no "could not remove" warning)."""
    assert r.returncode == 0, r.stderr
    assert b"WARN" not in r.stderr and b"could not" not in r.stderr, r.stderr


def test_gen_and_copy_write_names_as_long_as_ncgen_does(nczarrfs, tmp_path, stem):
    tmp = os.fsencode(tmp_path)
    nc = _ncgen(tmp, stem)
    expected = _ncdump(nc)
    cdl = os.path.join(tmp, b"x.cdl")
    made = os.path.join(tmp, stem + b".file")
    assert len(os.path.basename(made)) == 255
    # Written, and written again over itself (the old dataset is moved aside by a name that
    # is longer still).
    for _ in range(2):
        _clean(nczarrfs("gen", "-o", made, cdl))
        r = nczarrfs("dump", made)
        assert r.returncode == 0, r.stderr
        assert r.stdout == expected
    zipped = os.path.join(tmp, stem + b".zip")
    _clean(nczarrfs("gen", "-o", zipped, cdl))
    assert nczarrfs("dump", zipped).stdout == expected

    # copy to the same names, from the other storage.
    os.mkdir(os.path.join(tmp, b"copies"))
    for source, name in ((zipped, stem + b".file"), (made, stem + b".zip")):
        target = os.path.join(tmp, b"copies", name)
        for _ in range(2):
            _clean(nczarrfs("copy", source, target))
            assert nczarrfs("dump", target).stdout == expected
    assert sorted(os.listdir(os.path.join(tmp, b"copies"))) == [stem + b".file", stem + b".zip"]
    assert sorted(os.listdir(tmp)) == sorted(
        [b"x.cdl", b"copies", stem + b".nc", stem + b".file", stem + b".zip"])


def test_get_and_put_with_names_as_long_as_ncgen_writes(nczarrfs, tmp_path, stem):
    tmp = os.fsencode(tmp_path)
    nc = _ncgen(tmp, stem)
    cdl = os.path.join(tmp, b"x.cdl")
    ncgen_values = np.array([1, 2, 3], dtype="=i4")
    for suffix in (b".file", b".zip"):
        dataset = os.path.join(tmp, stem + suffix)
        _clean(nczarrfs("gen", "-o", dataset, cdl))
        # get -o to a 255-byte name, through its temporary file beside it; again over it.
        raw = os.path.join(tmp, stem[:-1] + b".bin")
        assert len(os.path.basename(raw)) == 253
        for _ in range(2):
            _clean(nczarrfs("get", "-o", raw, dataset, "v"))
            with open(raw, "rb") as f:
                assert f.read() == ncgen_values.tobytes()
        # put into the dataset: a zip archive is rewritten through a temporary file.
        source = os.path.join(tmp, b"nine.bin")
        with open(source, "wb") as f:
            f.write(np.full(3, 9, dtype="=i4").tobytes())
        _clean(nczarrfs("put", "-i", source, dataset, "v"))
        r = nczarrfs("get", dataset, "v")
        assert r.returncode == 0, r.stderr
        assert r.stdout == np.full(3, 9, dtype="=i4").tobytes()
        # Otherwise what ncgen wrote.
        assert nczarrfs("dump", "-v", "g/w", dataset).stdout == _ncdump("-v", "g/w", nc)
        for leftover in (raw, source):
            os.remove(leftover)
    assert sorted(os.listdir(tmp)) == sorted(
        [b"x.cdl", stem + b".nc", stem + b".file", stem + b".zip"])
