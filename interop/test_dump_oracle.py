"""Oracle: random netCDF-4 content, `ncdump` of the HDF5 twin vs `nczarrfs dump` of the NCZarr twin.

Each run draws NCZARRFS_ORACLE_COUNT (default 100) datasets from a fresh base seed (printed in
the header; set NCZARRFS_SEED to reproduce). For every dataset:

* `ncdump NAME.nc` must equal `nczarrfs dump NAME.file` byte for byte (both name it NAME),
  and so must both with ncdump's `-p`, `-l`, `-g`, `-b`, `-f`, `-w`, `-L` and `-X` options
  drawn at random (but for the index ncdump -f f prints for a scalar, which it reads from past
  the end of an array);
* `nczarrfs get` of every variable must equal netCDF4-python's values from NAME.nc, and so
  must one random strided hyperslab per dataset.
"""

from __future__ import annotations

import difflib
import io
import os
import re
import subprocess

import netCDF4
import numpy as np
import pytest

import twins
from conftest import SEED

COUNT = int(os.environ.get("NCZARRFS_ORACLE_COUNT", "100"))


def _location(zpath: str, index: int) -> str:
    # Alternate between the two location forms the CLI accepts.
    return zpath if index % 2 == 0 else twins.nczarr_url(zpath)


def _context(seed: int, path) -> str:
    return f"seed {seed} (NCZARRFS_SEED={SEED}, dataset #{seed - SEED}), files in {path}"


def _native(values: np.ndarray) -> np.ndarray:
    if values.dtype.kind == "O":
        return values
    # astype, not ascontiguousarray: the latter turns scalars into 1-element arrays.
    return values.astype(values.dtype.newbyteorder("="), order="C")


def _decode(raw: bytes, like: np.ndarray) -> np.ndarray:
    dtype = like.dtype.newbyteorder("=")
    if len(raw) != like.size * dtype.itemsize:
        raise AssertionError(f"got {len(raw)} bytes, expected {like.size * dtype.itemsize}")
    return np.frombuffer(raw, dtype=dtype).reshape(like.shape)


def _as_text(array: np.ndarray) -> list[str]:
    out = []
    for item in array.flat:
        out.append(item.decode() if isinstance(item, bytes) else str(item))
    return out


def _check_get(nczarrfs, location, name, expected, tmp_path, extra=()):
    out = tmp_path / "get.out"
    if expected.dtype.kind == "O":
        res = nczarrfs("get", location, name, *extra, "--npy", "-o", str(out))
        assert res.returncode == 0, f"get {name} failed: {res.stderr.decode(errors='replace')}"
        got = np.load(io.BytesIO(out.read_bytes()), allow_pickle=False)
        assert got.shape == expected.shape, f"get {name}: shape {got.shape} != {expected.shape}"
        assert _as_text(got) == _as_text(expected), f"get {name}: strings differ"
        return
    res = nczarrfs("get", location, name, *extra, "-o", str(out))
    assert res.returncode == 0, f"get {name} failed: {res.stderr.decode(errors='replace')}"
    got = _decode(out.read_bytes(), expected)
    assert twins.same_values(got, _native(expected)), (
        f"get {name} {' '.join(extra)}: values differ\n ours     {got!r}\n expected {expected!r}"
    )


def _random_slab(rng: np.random.Generator, shape):
    start, count, stride = [], [], []
    for n in shape:
        s = int(rng.integers(0, n))
        st = int(rng.integers(1, 4))
        c = int(rng.integers(1, (n - s - 1) // st + 2))
        start.append(s)
        count.append(c)
        stride.append(st)
    return start, count, stride


@pytest.mark.parametrize("index", range(COUNT))
def test_dump_and_get_match_netcdf_c(nczarrfs, tmp_path, index):
    seed = SEED + index
    name = f"ds{index:03d}"
    zpath, hpath, _ = twins.write_twins(str(tmp_path), name, seed)
    where = _context(seed, tmp_path)
    location = _location(zpath, index)

    expected = subprocess.run(["ncdump", hpath], capture_output=True, check=True).stdout
    ours = nczarrfs("dump", location)
    if ours.returncode != 0:
        err = ours.stderr.decode(errors="replace")
        pytest.fail(f"{where}\nnczarrfs dump {location} failed:\n{err}", pytrace=False)
    _same_or_fail(where, expected, ours.stdout, f"ncdump {name}.nc", f"nczarrfs dump {location}")

    # The same with ncdump's options drawn at random: -p (float digits, or float and double
    # digits; 1 to 20), -l (line length, 10 and up), -g (groups), -b and -f (annotations), and
    # -w, -L, -X (DAP caching, netcdf-c logging, reading into memory).
    rng = np.random.default_rng(seed)
    options = []
    if rng.random() < 0.7:
        digits = [str(int(rng.integers(1, 21)))] * (1 + int(rng.random() < 0.5))
        digits[-1] = str(int(rng.integers(1, 21)))
        options += ["-p", ",".join(digits)]
    if rng.random() < 0.7:
        options += ["-l", str(int(rng.integers(10, 121)))]
    with netCDF4.Dataset(hpath) as nc:
        # -g splits its argument at commas, in ncdump as in ours.
        paths = [p for p, _ in _group_paths(nc) if "," not in p]
    if paths and rng.random() < 0.4:
        chosen = rng.choice(paths, size=min(len(paths), int(rng.integers(1, 3))), replace=False)
        # A full name selects one group, a plain name every group so named.
        names = [p if rng.random() < 0.5 else p.rsplit("/", 1)[1] for p in chosen]
        options += ["-g", ",".join(names)]
    lang = "cf"[int(rng.integers(0, 2))]
    options += [["-b", lang], ["-f", lang], ["-b", lang, "-f", lang], []][int(rng.integers(0, 4))]
    # Options that change nothing here, which ncdump command lines may hold all the same.
    options += [[], ["-w"], ["-L", "0"], ["-Xp"], ["-Xm"]][int(rng.integers(0, 5))]
    if options:
        expected = subprocess.run(["ncdump", *options, hpath], capture_output=True,
                                  check=True).stdout
        ours = nczarrfs("dump", *options, location)
        if "-f" in options and lang == "f":
            # For a scalar, ncdump -f f prints an index from past the end of its array.
            expected, ours.stdout = (_scalar_index_unknown(t, hpath)
                                     for t in (expected, ours.stdout))
        flags = " ".join(options)
        _same_or_fail(where, expected, ours.stdout, f"ncdump {flags} {name}.nc",
                      f"nczarrfs dump {flags} {location}")

    problem = _check_all_gets(nczarrfs, location, hpath, np.random.default_rng(seed), tmp_path)
    if problem:
        pytest.fail(f"{where}\n{problem}", pytrace=False)


def _same_or_fail(where: str, expected: bytes, got: bytes, theirs: str, ours: str) -> None:
    """Fails with a unified diff unless `got` is `expected`."""
    if got != expected:
        diff = difflib.unified_diff(
            expected.decode(errors="replace").splitlines(keepends=True),
            got.decode(errors="replace").splitlines(keepends=True),
            fromfile=theirs,
            tofile=ours,
        )
        pytest.fail(f"{where}\n" + "".join(diff), pytrace=False)


def _group_paths(grp, prefix=""):
    """(full name, group) of every group below `grp`, depth-first."""
    for name, sub in grp.groups.items():
        yield prefix + "/" + name, sub
        yield from _group_paths(sub, prefix + "/" + name)


def _scalar_index_unknown(text: bytes, hpath: str) -> bytes:
    """The index in the `-f f` comment of every scalar variable replaced by `?`."""
    with netCDF4.Dataset(hpath) as nc:
        scalars = {var.name for _, var in twins.walk_variables(nc) if var.ndim == 0}
    # The last comment of a variable: `;  // NAME(N)`, NAME escaped as CDL escapes it.
    pattern = re.compile(rb";  // ((?:\\.|[^(\\])+)\((\d+)\)$")
    out = []
    for line in text.split(b"\n"):
        m = pattern.search(line)
        if m:
            name = re.sub(rb"\\(.)", rb"\1", m.group(1)).decode(errors="replace")
            if name in scalars:
                line = line[: m.start(2)] + b"?" + line[m.end(2):]
        out.append(line)
    return b"\n".join(out)


def _check_all_gets(nczarrfs, location, hpath, rng, tmp_path) -> str | None:
    """Every variable whole, plus one random strided hyperslab; the first problem or None."""
    slab_done = False
    with netCDF4.Dataset(hpath) as nc:
        for full_name, var in twins.walk_variables(nc):
            values = twins.read_values(var)
            try:
                _check_get(nczarrfs, location, full_name, values, tmp_path)
                if not slab_done and values.ndim and values.size and values.dtype.kind != "O":
                    start, count, stride = _random_slab(rng, values.shape)
                    index_ = tuple(slice(s, s + c * st, st) for s, c, st in zip(start, count, stride))
                    extra = (
                        "--start", ",".join(map(str, start)),
                        "--count", ",".join(map(str, count)),
                        "--stride", ",".join(map(str, stride)),
                    )
                    _check_get(nczarrfs, location, full_name, values[index_], tmp_path, extra)
                    slab_done = True
            except AssertionError as err:
                return str(err)
    return None


def _same_dump_as_ncdump(nczarrfs, tmp_path, build, *options: str) -> None:
    """Writes the same content with netCDF4-python as NCZarr and as HDF5 (`build(dataset)`)
    and asserts `nczarrfs dump` of the one equals `ncdump` of the other."""
    zpath = tmp_path / "fixed.file"
    hpath = tmp_path / "fixed.nc"
    for target in (f"file://{zpath}#mode=nczarr,file", str(hpath)):
        with netCDF4.Dataset(target, "w") as nc:
            build(nc)
    expected = subprocess.run(["ncdump", *options, str(hpath)], capture_output=True,
                              check=True).stdout
    ours = nczarrfs("dump", *options, f"file://{zpath}#mode=nczarr,file")
    assert ours.returncode == 0, ours.stderr.decode(errors="replace")
    if ours.stdout != expected:
        diff = difflib.unified_diff(expected.decode(errors="replace").splitlines(keepends=True),
                                    ours.stdout.decode(errors="replace").splitlines(keepends=True),
                                    fromfile="ncdump", tofile="nczarrfs dump")
        pytest.fail("".join(diff), pytrace=False)


def test_variables_named_like_cdl_keywords(nczarrfs, tmp_path):
    # ncdump sets the `:` of some of them apart (`variables :a`), not of others (`variable:a`).
    names = ["variable", "variables", "dimension", "dimensions", "data", "group", "groups",
             "types", "type", "netcdf", "enum", "compound", "opaque", "int", "string", "NaN",
             "unlimited", "UNLIMITED", "Infinity"]

    def build(nc):
        for name in names:
            nc.createVariable(name, "i4").setncattr("a", 1)

    _same_dump_as_ncdump(nczarrfs, tmp_path, build, "-h")


def test_backslash_in_names(nczarrfs, tmp_path):
    # A legal netCDF name; netcdf-c writes it into the keys as it is.
    def build(nc):
        nc.createDimension("d\\x", 2)
        v = nc.createVariable("a\\b", "i4", ("d\\x",))
        v[:] = [1, 2]
        v.setncattr("at\\tr", "x")
        nc.createGroup("g\\1").createVariable("s", "i2")[...] = 3

    _same_dump_as_ncdump(nczarrfs, tmp_path, build)


def test_char_attributes_that_are_not_utf8(nczarrfs, tmp_path):
    """netcdf-c writes a char attribute's bytes into the JSON as they are (its writer drops
    some such values, so the NCZarr twin gets them by hand, as netcdf-c stores them); they
    read back, and a copy writes them back, byte for byte."""
    latin1, raw = b"caf\xe9", b"\xff\xfe ok"

    zpath = tmp_path / "fixed.file"
    hpath = tmp_path / "fixed.nc"
    for target, hdf5 in ((f"file://{zpath}#mode=nczarr,file", False), (str(hpath), True)):
        with netCDF4.Dataset(target, "w") as nc:
            nc.setncattr("latin1", latin1 if hdf5 else "LATIN1")
            nc.createVariable("v", "S1").setncattr("bytes", raw if hdf5 else "RAW")
    for key, mark, value in ((".zattrs", b"LATIN1", latin1), ("v/.zattrs", b"RAW", raw)):
        path = zpath / key
        text = path.read_bytes()
        assert text.count(b'"' + mark + b'"') == 1, text
        path.write_bytes(text.replace(b'"' + mark + b'"', b'"' + value + b'"'))

    expected = subprocess.run(["ncdump", str(hpath)], capture_output=True, check=True).stdout
    ours = nczarrfs("dump", f"file://{zpath}#mode=nczarr,file")
    assert ours.returncode == 0, ours.stderr.decode(errors="replace")
    assert ours.stdout == expected
    copy = tmp_path / "copy.file"
    res = nczarrfs("copy", f"file://{zpath}#mode=nczarr,file", str(copy))
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    assert latin1 in (copy / ".zattrs").read_bytes()
    assert raw in (copy / "v" / ".zattrs").read_bytes()
    # netcdf-c reads the copy as the HDF5 twin (netCDF4-python decodes both alike).
    with netCDF4.Dataset(f"file://{copy}#mode=nczarr,file") as nc, \
            netCDF4.Dataset(str(hpath)) as ref:
        assert nc.getncattr("latin1") == ref.getncattr("latin1")
        assert nc["v"].getncattr("bytes") == ref["v"].getncattr("bytes")



def test_char_attributes_that_are_json_text(nczarrfs, tmp_path):
    """netcdf-c stores a char attribute whose text parses as JSON as that JSON, and reads it
    back as the text: an array of strings stays its JSON text, not the strings joined."""
    texts = {"names": '["lat","lon"]', "mixed": '[1,"a"]', "one": '["x"]'}

    def build(nc):
        for name, text in texts.items():
            nc.setncattr(name, text)

    _same_dump_as_ncdump(nczarrfs, tmp_path, build)
    # The text survives our own gen of that CDL, as netcdf-c reads it.
    location = f"file://{tmp_path / 'fixed.file'}#mode=nczarr,file"
    (tmp_path / "again.cdl").write_bytes(nczarrfs("dump", location).stdout)
    res = nczarrfs("gen", "-o", str(tmp_path / "again.file"), str(tmp_path / "again.cdl"))
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    with netCDF4.Dataset(f"file://{tmp_path / 'again.file'}#mode=nczarr,file") as nc:
        assert {name: nc.getncattr(name) for name in texts} == texts


@pytest.mark.parametrize("fmt,dtype,values", [
    ("%e%%", "f8", [1.5, 2.0]),
    ("%% %g", "f8", [1.5, 2.0]),
    ("no value", "f8", [1.5, 2.0]),
    ("no value", "i4", [1, 2]),
    ("%x", "i4", [-1, 255]),
    ("%u", "i2", [-1, 7]),
    ("%o", "i1", [-1, 8]),
    ("%d", "u4", [4_000_000_000, 1]),
    ("%hhd", "i4", [300, -129]),
    ("%#08.3hx", "i4", [-2, 17]),
    ("%+.3e %%", "f4", [-0.125, 3.0e10]),
    ("%-150d|", "i4", [3, -3]),
])
def test_c_format_as_ncdump_prints_it(nczarrfs, tmp_path, fmt, dtype, values):
    """ncdump hands a variable's `C_format` to snprintf with each value (ints of 32 bits and
    fewer as C ints) into a 100-byte buffer."""
    def build(nc):
        nc.createDimension("n", len(values))
        v = nc.createVariable("v", dtype, ("n",), fill_value=False)
        v.setncattr("C_format", fmt)
        v[:] = np.array(values).astype(np.int64).astype(dtype) if dtype[0] in "iu" \
            else np.array(values, dtype=dtype)

    _same_dump_as_ncdump(nczarrfs, tmp_path, build)
