"""Older netcdf-c releases as readers: what we write for them, and what we rewrite of theirs.

netcdf-c moved NCZarr's own metadata twice, and each release reads only its own layout:
4.8.1–4.9.0 upper-case `_NCZARR_*` keys in `.zgroup`/`.zarray`, 4.9.1–4.9.2 the same keys in
lower case, 4.9.3 and later attributes in `.zattrs`. The netCDF4-python wheels 1.6.2 (netcdf-c
4.9.0) and 1.6.3 (4.9.1) run in their own venvs (scripts/test makes them) as those readers;
interop/netcdf_content.py prints what each sees of a dataset, as JSON, the same way under
every numpy.

* `copy --for-netcdf-c VERSION` of random contents written as NCZarr by netcdf-c 4.10.1, and
  `gen --for-netcdf-c VERSION` of the CDL Debian's `ncdump -p 9,17` prints of their HDF5 twin, must
  read, under that release, exactly as the twin reads under 4.10.1; for 4.9.0,
  Debian's `ncdump` (4.9.0 as well) of the copy must print what it prints of the HDF5 twin.
* A store written by the old release itself, changed by `nczarrfs put` and through a `rw`
  mount (an attribute, a group, a renamed variable), must still open under that release, with
  the changes (string variables left out: 4.9.1's writer fails an assertion on some).

What those releases cannot hold is left out of the drawn contents: unlimited dimensions (all
of them before 4.9.3) and compression (their wheels ship no filter plugins); for 4.9.0 also
strings and scalars, as in test_debian_nczarr.py, which draws contents the same way.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import netCDF4
import numpy as np
import pytest

import twins
from conftest import REPO, SEED, nczarrfs_binary
from test_debian_nczarr import _for_debian_nczarr
from test_gen_oracle import _cdl_safe_chars

COUNT = 12
RELEASES = ["4.9.0", "4.9.1"]
CONTENT = Path(__file__).resolve().parent / "netcdf_content.py"


def _python(release: str) -> Path:
    python = REPO / f".venv-netcdf-c-{release}" / "bin" / "python"
    if not python.exists():
        pytest.fail(f"{python} missing: scripts/test makes it (need_old_netcdf_venvs)")
    return python


def _nczarr(path: Path) -> str:
    return f"file://{path}#mode=nczarr,file"


def _show(python: Path | str, location: str) -> dict:
    done = subprocess.run([str(python), str(CONTENT), "show", location], capture_output=True,
                          timeout=120, check=False)
    assert done.returncode == 0, f"{python} cannot read {location}: {done.stderr.decode()}"
    return json.loads(done.stdout)


def _for_release(root: twins.Group, release: str) -> None:
    """Changes, in place, a drawn content into one that `release` can hold."""
    _for_debian_nczarr(root, strings_and_scalars=release != "4.9.0")


def _without_string_variables(grp: twins.Group) -> None:
    grp.vars = [v for v in grp.vars if v.kind != "string"]
    for sub in grp.groups:
        _without_string_variables(sub)


def _twins(tmp_path: Path, seed: int, release: str, strings: bool = True) -> tuple[Path, Path]:
    """The HDF5 twin and an NCZarr store (written by netcdf-c 4.10.1) of one drawn content."""
    root = twins.plan(seed)
    _for_release(root, release)
    if not strings:
        _without_string_variables(root)
    _cdl_safe_chars(root)
    hdf5 = tmp_path / f"h{seed}.nc"
    with netCDF4.Dataset(hdf5, "w", format="NETCDF4") as nc:
        twins._apply(root, nc, hdf5=True)
    store = tmp_path / f"z{seed}.file"
    with netCDF4.Dataset(_nczarr(store), "w", format="NETCDF4") as nc:
        twins._apply(root, nc)
    return hdf5, store


@pytest.mark.parametrize("release", RELEASES)
def test_copies_for_an_older_release_read_there_as_the_hdf5_twin(nczarrfs, tmp_path, release):
    print(f"seed {SEED}")
    python = _python(release)
    failures = []
    for i in range(COUNT):
        seed = SEED + 30_000 + i
        hdf5, store = _twins(tmp_path, seed, release)
        ours = tmp_path / f"ours{seed}.file"
        made = nczarrfs("copy", "--for-netcdf-c", release, str(store), str(ours))
        assert made.returncode == 0, f"seed {seed}: {made.stderr.decode()}"
        twin = _show(sys.executable, str(hdf5))
        if _show(python, _nczarr(ours)) != twin:
            failures.append(f"seed {seed}: netcdf-c {release} reads the copy otherwise")
        cdl = tmp_path / f"h{seed}.cdl"
        # 9 and 17 significant digits: every float and double as it is.
        text = subprocess.run(["ncdump", "-p", "9,17", str(hdf5)], capture_output=True,
                              check=True).stdout
        cdl.write_bytes(text)
        generated = tmp_path / f"gen{seed}.file"
        made = nczarrfs("gen", "--for-netcdf-c", release, "-o", str(generated), str(cdl))
        assert made.returncode == 0, f"seed {seed}: {made.stderr.decode()}"
        if _show(python, _nczarr(generated)) != twin:
            failures.append(f"seed {seed}: netcdf-c {release} reads gen's dataset otherwise")
        if release == "4.9.0":
            want = subprocess.run(["ncdump", "-n", "x", str(hdf5)], capture_output=True,
                                  check=True).stdout
            got = subprocess.run(["ncdump", "-n", "x", _nczarr(ours)], capture_output=True,
                                 check=False)
            if got.returncode != 0 or got.stdout != want:
                failures.append(f"seed {seed}: Debian's ncdump prints the copy otherwise")
    assert not failures, "\n".join(failures)



def _first_numeric_variable(hdf5: Path):
    """(full name, dtype, shape) of the first numeric variable with values, if any."""
    with netCDF4.Dataset(hdf5) as nc:
        groups = [nc]
        while groups:
            grp = groups.pop(0)
            for var in grp.variables.values():
                if var.dtype is not str and var.dtype.kind in "iuf" and var.size:
                    prefix = grp.path.rstrip("/")
                    return f"{prefix}/{var.name}", var.dtype.newbyteorder("="), var.shape
            groups.extend(grp.groups.values())
    return None


def _mount_rw_and_change(nczarrfs_binary: Path, store: Path, mnt: Path,
                         rename: str | None) -> None:
    """Adds the root attribute `added` and the group `newgroup` through a `rw` mount, and
    renames the root variable `rename` to `rename` + `_renamed`."""
    mnt.mkdir()
    daemon = subprocess.Popen([str(nczarrfs_binary), "mount", "-f", "-o", "rw", str(store),
                               str(mnt)], stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not any(line.split()[1] == str(mnt) for line in open("/proc/self/mounts")):
        assert daemon.poll() is None, daemon.stderr.read().decode()
        assert time.monotonic() < deadline, "the mount did not appear"
        time.sleep(0.02)
    try:
        (mnt / "@attributes" / "added").write_text("changed by nczarrfs")
        (mnt / "newgroup").mkdir()
        if rename is not None:
            (mnt / rename).rename(mnt / f"{rename}_renamed")
    finally:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=True)
    assert daemon.wait(timeout=60) == 0, daemon.stderr.read().decode()


@pytest.mark.parametrize("release", RELEASES)
def test_stores_of_an_older_release_stay_its_own_when_changed(nczarrfs, tmp_path, release):
    """The store is written by the old release itself (a copy of the HDF5 twin), then changed
    with `put` and through a `rw` mount: that release must read it as before, with the
    changes."""
    print(f"seed {SEED}")
    python = _python(release)
    failures = []
    for i in range(COUNT // 3):
        seed = SEED + 40_000 + i
        # netcdf-c 4.9.1 fails an assertion of its chunk cache writing some string variables
        # (11 of 40 contents here); its reading of them is tested above.
        hdf5, _ = _twins(tmp_path, seed, release, strings=False)
        store = tmp_path / f"old{seed}.file"
        subprocess.run([str(python), str(CONTENT), "copy", str(hdf5), _nczarr(store)],
                       check=True, capture_output=True)
        # What the release reads of its own store (4.9.1 drops the leading blanks of some
        # char attributes, so its view, not the twin, is the reference here).
        want = _show(python, _nczarr(store))
        target = _first_numeric_variable(hdf5)
        if target is not None:
            fqn, dtype, shape = target
            values = (np.arange(int(np.prod(shape))) % 100).astype(dtype).reshape(shape)
            put = subprocess.run([str(nczarrfs_binary()), "put", str(store), fqn],
                                 input=values.tobytes(), capture_output=True, check=False)
            assert put.returncode == 0, f"seed {seed}: {put.stderr.decode()}"
            *groups, name = fqn.strip("/").split("/")
            node = want
            for g in groups:
                node = node["groups"][g]
            node["vars"][name]["values"] = json.loads(json.dumps(values.tolist()))
        rename = next(iter(want["vars"]), None)
        _mount_rw_and_change(nczarrfs_binary(), store, tmp_path / f"mnt{seed}", rename)
        if rename is not None:
            want["vars"][f"{rename}_renamed"] = want["vars"].pop(rename)
        want["attrs"]["added"] = ["text", "changed by nczarrfs"]
        want["groups"]["newgroup"] = {"attrs": {}, "dims": {}, "groups": {}, "vars": {}}
        if _show(python, _nczarr(store)) != want:
            failures.append(f"seed {seed}: netcdf-c {release} reads the changed store otherwise")
    assert not failures, "\n".join(failures)


def _controls_cdl(strings: bool) -> str:
    """A dataset with every control character but NUL (netcdf-c's text ends there) in char
    attributes, a string attribute and a char fill value, in CDL octal escapes."""
    # Between other characters: netcdf-c 4.9.1 fails to store text that ends in DEL.
    every = "".join(f"\\{b:03o}" for b in [0x7F, *range(1, 0x20)])
    lines = ["netcdf controls {", "dimensions:", "  x = 2 ;", "variables:", "  char c(x) ;",
             '    c:_FillValue = "\\001" ;', f'    c:every = "a{every}z" ;']
    if strings:
        lines.append('  string :s = "p\\002q", "r\\033" ;')
    lines += [f'  :every = "a{every}z" ;', "data:", ' c = "q" ;', "}", ""]
    return "\n".join(lines)


@pytest.mark.parametrize("release", ["4.10.1", *RELEASES])
def test_control_characters_in_text_read_back_in_netcdf_c(nczarrfs, tmp_path, release):
    """netcdf-c writes control characters into the JSON as bytes and does not decode `\\u00XX`
    escapes: `gen`, and a rewrite through a `rw` mount of netcdf-c's own store, must leave
    text that it reads as written (as Debian's ncgen stores it in HDF5)."""
    python = Path(sys.executable) if release == "4.10.1" else _python(release)
    cdl = tmp_path / "controls.cdl"
    cdl.write_text(_controls_cdl(strings=release != "4.9.0"))
    hdf5 = tmp_path / "controls.nc"
    subprocess.run(["ncgen", "-k", "nc4", "-o", str(hdf5), str(cdl)], check=True)
    want = _show(sys.executable, str(hdf5))
    assert "\x1f" in want["attrs"]["every"][1]
    ours = tmp_path / "ours.file"
    flags = [] if release == "4.10.1" else ["--for-netcdf-c", release]
    made = nczarrfs("gen", *flags, "-o", str(ours), str(cdl))
    assert made.returncode == 0, made.stderr.decode()
    assert _show(python, _nczarr(ours)) == want
    theirs = tmp_path / "theirs.file"
    subprocess.run([str(python), str(CONTENT), "copy", str(hdf5), _nczarr(theirs)],
                   check=True, capture_output=True)
    before = _show(python, _nczarr(theirs))
    _mount_rw_and_change(nczarrfs_binary(), theirs, tmp_path / "mnt", rename=None)
    before["attrs"]["added"] = ["text", "changed by nczarrfs"]
    before["groups"]["newgroup"] = {"attrs": {}, "dims": {}, "groups": {}, "vars": {}}
    assert _show(python, _nczarr(theirs)) == before


NUL_WRITER = """
import sys, netCDF4
url, strings = sys.argv[1], sys.argv[2] == "1"
with netCDF4.Dataset(url, "w", format="NETCDF4") as d:
    d.createDimension("x", 2)
    c = d.createVariable("c", "S1", ("x",), fill_value=b"\\0")
    c.mid = "x\\0y"
    c.end = "abc\\0"
    c[0] = b"q"
    d.g = "p\\0q"
    if strings:
        d.setncattr_string("s", ["p\\0q", "r"])
"""


@pytest.mark.parametrize("release", ["4.10.1", *RELEASES])
def test_text_with_a_nul_byte_is_stored_as_netcdf_c_stores_it(nczarrfs, tmp_path, release):
    """netcdf-c reads no NUL byte in NCZarr JSON (a raw one fails the whole dataset, `\\u0000`
    reads as `u0000`), and its own writer ends text at a NUL: `gen` must store what the
    release's writer stores of the same attributes (as ncdump prints them of HDF5), warning
    where text after a NUL is lost."""
    python = Path(sys.executable) if release == "4.10.1" else _python(release)
    strings = release != "4.9.0"
    theirs = tmp_path / "theirs.file"
    subprocess.run([str(python), "-c", NUL_WRITER, _nczarr(theirs), str(int(strings))],
                   check=True, capture_output=True)
    want = _show(python, _nczarr(theirs))
    assert want["vars"]["c"]["attrs"]["mid"] == ["text", "x"]
    cdl = tmp_path / "nul.cdl"
    cdl.write_text("\n".join([
        "netcdf nul {", "dimensions:", "  x = 2 ;", "variables:", "  char c(x) ;",
        '    c:_FillValue = "\\000" ;', '    c:mid = "x\\000y" ;', '    c:end = "abc\\000" ;',
        *(['  string :s = "p\\000q", "r" ;'] if strings else []),
        '  :g = "p\\000q" ;', "data:", ' c = "q" ;', "}", ""]))
    ours = tmp_path / "ours.file"
    flags = [] if release == "4.10.1" else ["--for-netcdf-c", release]
    made = nczarrfs("gen", *flags, "-o", str(ours), str(cdl))
    assert made.returncode == 0, made.stderr.decode()
    got = _show(python, _nczarr(ours))
    for shown in (want, got):
        shown["attrs"].pop("_NCProperties", None)
    assert got == want
    warned = [line for line in made.stderr.decode().splitlines() if "NUL" in line]
    assert sorted(w.split('"')[1] for w in warned) == sorted(["mid", "g", *(["s"] if strings else [])])


@pytest.mark.parametrize("release", RELEASES)
def test_chunks_longer_than_a_fixed_dimension_are_cut_for_an_older_release(nczarrfs, tmp_path,
                                                                           release):
    """netcdf-c before 4.9.3 refuses a whole dataset with a chunk longer than its fixed
    dimension: a record variable's chunk of 512 records (netcdf-c's default) made fixed by
    `copy -u`, and `_ChunkSizes` longer than their dimension given to `gen`, must be stored so
    that the release opens the dataset and reads the values written."""
    python = _python(release)
    record = tmp_path / "record.cdl"
    record.write_text("netcdf record {\ndimensions:\n  t = UNLIMITED ;\nvariables:\n"
                      "  double t(t) ;\n    t:_ChunkSizes = 512 ;\ndata:\n  t = 1, 2, 3 ;\n}\n")
    source = tmp_path / "source.file"
    made = nczarrfs("gen", "-o", str(source), str(record))
    assert made.returncode == 0, made.stderr.decode()
    copied = tmp_path / "copied.file"
    done = nczarrfs("copy", "-u", "--for-netcdf-c", release, str(source), str(copied))
    assert done.returncode == 0, done.stderr.decode()
    got = _show(python, _nczarr(copied))
    assert got["dims"] == {"t": [3, False]}
    assert got["vars"]["t"]["values"] == [1.0, 2.0, 3.0]

    fixed = tmp_path / "fixed.cdl"
    fixed.write_text("netcdf fixed {\ndimensions:\n  d = 3 ;\n  e = 2 ;\nvariables:\n"
                     "  int v(d, e) ;\n    v:_ChunkSizes = 8, 1 ;\ndata:\n"
                     "  v = 1, 2, 3, 4, 5, 6 ;\n}\n")
    generated = tmp_path / "generated.file"
    made = nczarrfs("gen", "--for-netcdf-c", release, "-o", str(generated), str(fixed))
    assert made.returncode == 0, made.stderr.decode()
    got = _show(python, _nczarr(generated))
    assert got["dims"] == {"d": [3, False], "e": [2, False]}
    assert got["vars"]["v"]["values"] == [[1, 2], [3, 4], [5, 6]]
