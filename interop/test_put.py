"""`nczarrfs put` against netcdf-c: datasets are created empty (or pre-filled) by
netCDF4-python, as NCZarr and as pure Zarr, uncompressed and with zlib+shuffle; `put` stores
numpy arrays (raw bytes from a file, from a pipe, from a redirected file, or `.npy`) into
whole variables and hyperslabs; netCDF4-python (and zarr-python for pure Zarr) reads them back,
and the expected values are the numpy arrays written, placed with numpy's own slicing.

Errors (input of the wrong length, a hyperslab past a fixed dimension, a `.npy` of the wrong
dtype) must fail with a message and leave every stored object as it was.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import netCDF4
import numpy as np
import pytest

from conftest import SEED, nczarrfs_binary

PLUGINS = os.path.join(os.path.dirname(netCDF4.__file__), "plugins")

MODES = ["nczarr", "zarr"]
CODECS = {"plain": {}, "zlib+shuffle": {"zlib": True, "complevel": 1, "shuffle": True}}


@pytest.fixture(autouse=True)
def _plugins(monkeypatch):
    monkeypatch.setenv("HDF5_PLUGIN_PATH", PLUGINS)


def url(path: Path, mode: str) -> str:
    return f"file://{path}#mode={mode},file"


def make(path: Path, mode: str, codec: str, records: int,
         prefill: np.ndarray | None = None) -> None:
    """A dataset with `t`, `y` = 5, `x` = 7 and the variables `v(t, y, x)` int32 chunked
    (2, 3, 4), `d(y, x)` float64 chunked (5, 7), `s` a scalar short, each with a fill value.
    `t` is unlimited in NCZarr; pure Zarr has no unlimited dimensions, so there it is fixed at
    `records`."""
    with netCDF4.Dataset(url(path, mode), "w") as nc:
        nc.createDimension("t", None if mode == "nczarr" else records)
        nc.createDimension("y", 5)
        nc.createDimension("x", 7)
        v = nc.createVariable("v", "i4", ("t", "y", "x"), chunksizes=(2, 3, 4),
                              fill_value=-99, **CODECS[codec])
        nc.createVariable("d", "f8", ("y", "x"), chunksizes=(5, 7), fill_value=-1.5,
                          **CODECS[codec])
        nc.createVariable("s", "i2", (), fill_value=-7)
        if prefill is not None:
            v.set_auto_maskandscale(False)
            v[: prefill.shape[0]] = prefill


def read(path: Path, mode: str, name: str) -> np.ndarray:
    with netCDF4.Dataset(url(path, mode)) as nc:
        var = nc.variables[name]
        var.set_auto_maskandscale(False)
        return np.asarray(var[...])


def put(*args: str, stdin=None, input_bytes: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([str(nczarrfs_binary()), "put", *args], stdin=stdin, input=input_bytes,
                          capture_output=True, timeout=120, check=False)


def ok(r: subprocess.CompletedProcess) -> None:
    assert r.returncode == 0, r.stderr.decode()


def snapshot(path: Path) -> dict[str, bytes]:
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()}


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(SEED)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("mode", MODES)
def test_whole_variables_from_a_file(tmp_path, mode, codec, rng):
    ds = tmp_path / "ds.file"
    make(ds, mode, codec, records=6)
    values = rng.integers(-2**31, 2**31, size=(6, 5, 7), dtype="<i4")
    raw = tmp_path / "v.raw"
    values.tofile(raw)
    # An unlimited dimension grows to what the input holds.
    ok(put(str(ds), "v", "-i", str(raw)))
    d = rng.standard_normal((5, 7))
    np.save(tmp_path / "d.npy", d)
    ok(put(str(ds), "/d", "--npy", "-i", str(tmp_path / "d.npy")))
    ok(put(str(ds), "s", input_bytes=np.array(1234, "<i2").tobytes()))
    np.testing.assert_array_equal(read(ds, mode, "v"), values)
    np.testing.assert_array_equal(read(ds, mode, "d"), d)
    assert read(ds, mode, "s") == 1234
    # netcdf-c records shuffle as {"elementsize": 0}, which numcodecs treats as no shuffle, so
    # zarr-python cannot read netcdf-c's shuffled stores whoever wrote their chunks.
    if mode == "zarr" and codec == "plain":
        import zarr

        np.testing.assert_array_equal(zarr.open_array(str(ds / "v"), mode="r")[...], values)
        np.testing.assert_array_equal(zarr.open_array(str(ds / "d"), mode="r")[...], d)


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("mode", MODES)
def test_hyperslabs_into_existing_values(tmp_path, mode, codec, rng):
    ds = tmp_path / "ds.file"
    before = rng.integers(-1000, 1000, size=(4, 5, 7), dtype="<i4")
    make(ds, mode, codec, records=4, prefill=before)
    want = before.copy()
    # Partial chunks: a block straddling chunk edges, then a strided selection.
    block = rng.integers(0, 100, size=(2, 3, 5), dtype="<i4")
    ok(put(str(ds), "v", "--start", "1,1,2", "--count", "2,3,5", input_bytes=block.tobytes()))
    want[1:3, 1:4, 2:7] = block
    strided = rng.integers(100, 200, size=(2, 2, 3), dtype="<i4")
    ok(put(str(ds), "v", "--start", "0,0,1", "--count", "2,2,3", "--stride", "3,4,2",
           input_bytes=strided.tobytes()))
    want[0:4:3, 0:5:4, 1:7:2] = strided
    # Only --start: the dimensions run to their end (an unlimited one: as far as the input goes).
    rows = rng.integers(200, 300, size=(2, 2, 4), dtype="<i4")
    ok(put(str(ds), "v", "--start", "2,3,3", input_bytes=rows.tobytes()))
    want[2:4, 3:5, 3:7] = rows
    np.testing.assert_array_equal(read(ds, mode, "v"), want)
    # The fixed-size variable, a hyperslab from a .npy file.
    part = rng.standard_normal((2, 3))
    np.save(tmp_path / "p.npy", part)
    ok(put(str(ds), "d", "--npy", "--start", "3,4", "-i", str(tmp_path / "p.npy")))
    d = np.full((5, 7), -1.5)
    d[3:5, 4:7] = part
    np.testing.assert_array_equal(read(ds, mode, "d"), d)


def test_growth_along_the_unlimited_dimension(tmp_path, rng):
    ds = tmp_path / "ds.file"
    mode = "nczarr"
    before = rng.integers(-1000, 1000, size=(2, 5, 7), dtype="<i4")
    make(ds, mode, "zlib+shuffle", records=2, prefill=before)
    # Records 5 and 6, leaving 2..4 unwritten: they read as the fill value.
    new = rng.integers(0, 10, size=(2, 5, 7), dtype="<i4")
    ok(put(str(ds), "v", "--start", "5,0,0", input_bytes=new.tobytes()))
    # One value past the end, through an explicit count: the dimension grows to 9.
    ok(put(str(ds), "v", "--start", "8,4,6", "--count", "1,1,1",
           input_bytes=np.array([42], "<i4").tobytes()))
    want = np.full((9, 5, 7), -99, "<i4")
    want[:2] = before
    want[5:7] = new
    want[8, 4, 6] = 42
    got = read(ds, mode, "v")
    np.testing.assert_array_equal(got, want)
    with netCDF4.Dataset(url(ds, mode)) as nc:
        assert len(nc.dimensions["t"]) == 9


def test_standard_input_piped_and_redirected(tmp_path, rng):
    ds = tmp_path / "ds.file"
    make(ds, "nczarr", "zlib+shuffle", records=0)
    # A pipe (read whole before anything is stored).
    first = rng.integers(-5, 5, size=(3, 5, 7), dtype="<i4")
    ok(put(str(ds), "v", "-i", "-", input_bytes=first.tobytes()))
    # A regular file redirected to standard input (mapped like `-i FILE`).
    second = rng.integers(5, 10, size=(2, 5, 7), dtype="<i4")
    raw = tmp_path / "second.raw"
    second.tofile(raw)
    with open(raw, "rb") as f:
        ok(put(str(ds), "v", "--start", "3,0,0", stdin=f))
    np.testing.assert_array_equal(read(ds, "nczarr", "v"), np.concatenate([first, second]))


def test_redirected_standard_input_is_read_from_its_offset(tmp_path, rng):
    """A script that reads a header from standard input and lets `put` read the rest: `put`
    starts where the header ended, as `cat` would, and leaves the offset at the end, as
    reading everything does. Raw values appended along `t`, and a `.npy` file."""
    ds = tmp_path / "ds.file"
    make(ds, "nczarr", "plain", records=0)
    header = b"HEADER:8"
    record = rng.integers(-100, 100, size=(1, 5, 7), dtype="<i4")
    raw = tmp_path / "with-header.raw"
    raw.write_bytes(header + record.tobytes())
    d = rng.normal(size=(5, 7))
    np.save(tmp_path / "d.npy", d)
    npy = tmp_path / "with-header.npy"
    npy.write_bytes(header + (tmp_path / "d.npy").read_bytes())
    for path, args in ((raw, ["v"]), (npy, ["d", "--npy"])):
        fd = os.open(path, os.O_RDONLY)
        try:
            assert os.read(fd, len(header)) == header
            ok(put(str(ds), *args, stdin=fd))
            assert os.lseek(fd, 0, os.SEEK_CUR) == path.stat().st_size
        finally:
            os.close(fd)
    np.testing.assert_array_equal(read(ds, "nczarr", "v"), record)
    np.testing.assert_array_equal(read(ds, "nczarr", "d"), d)


def test_an_endless_pipe_is_refused_as_too_long(tmp_path):
    """A pipe is read as far as the hyperslab needs and one byte more: endless input (raw
    values, or a `.npy` header followed by endless zeros) is refused as longer than needed,
    in an address space of 1 GB that reading it whole would exhaust."""
    import resource

    ds = tmp_path / "ds.file"
    make(ds, "nczarr", "plain", records=0)
    stored = snapshot(ds)
    np.save(tmp_path / "d.npy", np.zeros((5, 7)))
    header = (tmp_path / "d.npy").read_bytes()[:-280]

    def capped():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    cases = (
        (["s"], "exec cat /dev/zero", "more than 2 bytes", "(short values of 2 bytes) needs 2"),
        (["d", "--npy"], f"cat '{tmp_path / 'header'}'; exec cat /dev/zero",
         "more than 280 bytes", "needs 280"),
    )
    (tmp_path / "header").write_bytes(header)
    for args, feed, held, needs in cases:
        writer = subprocess.Popen(["sh", "-c", feed], stdout=subprocess.PIPE)
        r = subprocess.run([str(nczarrfs_binary()), "put", str(ds), *args],
                           stdin=writer.stdout, capture_output=True, timeout=120,
                           check=False, preexec_fn=capped)
        writer.stdout.close()
        writer.kill()
        writer.wait()
        err = r.stderr.decode()
        assert r.returncode == 1, err
        assert f"standard input holds {held} of values" in err and needs in err, err
    assert snapshot(ds) == stored


@pytest.mark.parametrize("mode", MODES)
def test_errors_store_nothing(tmp_path, mode, rng):
    ds = tmp_path / "ds.file"
    before = rng.integers(-1000, 1000, size=(2, 5, 7), dtype="<i4")
    make(ds, mode, "plain", records=2, prefill=before)
    stored = snapshot(ds)

    def fails(*args: str, data: bytes = b"", says: str) -> None:
        r = put(str(ds), *args, input_bytes=data)
        assert r.returncode != 0
        assert says in r.stderr.decode(), r.stderr.decode()
        assert snapshot(ds) == stored

    four = np.arange(4, dtype="<i4").tobytes()
    # Length mismatch: one value short, one too many, a partial record.
    fails("v", "--count", "1,1,5", data=four, says="needs 20")
    fails("v", "--start", "0,0,0", "--count", "1,1,3", data=four, says="needs 12")
    # (Pure Zarr has no unlimited dimension: the whole variable is wanted.)
    fails("v", data=np.zeros(36, "<i4").tobytes(),
          says="needs 280" if mode == "zarr"
          else "144 bytes, not a whole number of records of /v (140 bytes each")
    # Past a fixed dimension, by start or by count (the unlimited one may grow).
    fails("v", "--start", "0,0,6", "--count", "1,1,2", data=four[:8], says="fixed length 7")
    fails("v", "--start", "1,5,0", "--count", "1,1,4", data=four, says="fixed length 5")
    if mode == "zarr":
        # Pure Zarr has no unlimited dimension: `t` does not grow.
        fails("v", "--start", "2,0,0", "--count", "1,1,4", data=four, says="fixed length 2")
    fails("d", "--start", "0,0", "--count", "2,4", "--stride", "5,1",
          data=np.zeros(8).tobytes(), says="fixed length 5")
    # A .npy of another dtype, or not a .npy at all.
    np.save(tmp_path / "f4.npy", np.zeros((5, 7), "<f4"))
    fails("d", "--npy", "-i", str(tmp_path / "f4.npy"), says="needs <f8")
    fails("d", "--npy", data=b"just bytes", says="not a .npy")
    # Unknown variable, bad option.
    fails("nope", data=four, says="no variable")
    fails("v", "--start", "1,x,0", data=four, says="not a non-negative integer")
    np.testing.assert_array_equal(read(ds, mode, "v"), before)


def test_put_strings_into_a_variable_gen_made_empty(nczarrfs, tmp_path):
    """A string variable without data gets netcdf-c's width (128 bytes), and `put` takes a
    `.npy` of narrower strings (numpy sizes `|S` to the longest value)."""
    cdl = tmp_path / "s.cdl"
    cdl.write_text("netcdf s {\ndimensions:\n\tn = 3 ;\nvariables:\n\tstring s(n) ;\n}\n")
    path = tmp_path / "s.file"
    r = nczarrfs("gen", "-o", str(path), str(cdl))
    assert r.returncode == 0, r.stderr.decode()
    words = np.array([b"alpha", b"beta", b"a much longer value"])
    npy = tmp_path / "words.npy"
    np.save(npy, words)
    r = nczarrfs("put", str(path), "s", "--npy", "-i", str(npy))
    assert r.returncode == 0, r.stderr.decode()
    with netCDF4.Dataset(url(path, "nczarr")) as nc:
        assert nc["s"][:].tolist() == ["alpha", "beta", "a much longer value"]
    too_wide = tmp_path / "wide.npy"
    np.save(too_wide, np.array([b"x" * 200] * 3))
    r = nczarrfs("put", str(path), "s", "--npy", "-i", str(too_wide))
    assert r.returncode != 0 and b"128 bytes wide" in r.stderr, r.stderr.decode()


def test_char_variables_stay_char_when_the_metadata_is_rewritten(nczarrfs, tmp_path):
    """Appending a record rewrites every variable's metadata on the grown dimension: a char
    variable must keep netcdf-c's `>S1` (a `|S1` is a one-byte string to netcdf-c)."""
    path = tmp_path / "c.file"
    with netCDF4.Dataset(url(path, "nczarr"), "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("n", 4)
        t = nc.createVariable("t", "f8", ("time",))
        c = nc.createVariable("c", "S1", ("time", "n"))
        t[0:2] = [1.0, 2.0]
        c[0:2] = np.array([list("abcd"), list("efgh")], dtype="S1")
    src = tmp_path / "one.bin"
    src.write_bytes(np.array([10.0], "<f8").tobytes())
    r = nczarrfs("put", str(path), "t", "--start", "2", "-i", str(src))
    assert r.returncode == 0, r.stderr.decode()
    assert json.loads((path / "c" / ".zarray").read_text())["dtype"] == ">S1"
    with netCDF4.Dataset(url(path, "nczarr")) as nc:
        assert nc["c"].dtype == np.dtype("S1")
        assert nc["c"].shape == (3, 4)
        assert b"".join(nc["c"][1].data.tolist()) == b"efgh"
    header = nczarrfs("dump", "-h", str(path))
    assert b"char c(time, n) ;" in header.stdout, header.stdout.decode()


def _zip_of(store: Path, archive: Path) -> None:
    """Zips the directory store `store` with its keys at the archive root (zarr-python's
    layout)."""
    import zipfile

    with zipfile.ZipFile(archive, "w") as z:
        for f in sorted(store.rglob("*")):
            if f.is_file():
                z.write(f, f.relative_to(store).as_posix())


def test_concurrent_puts_into_a_zip_keep_every_write(nczarrfs, tmp_path):
    """Writers of one zip archive take turns (a busy one is refused and retries); every put
    that succeeded is in the archive afterwards, however they interleaved. netCDF4-python
    reads the extracted archive; the expected values are the numpy array with each writer's
    element set."""
    import threading
    import zipfile

    n, writers = 2000, 12
    store = tmp_path / "src"
    with netCDF4.Dataset(url(store, "nczarr"), "w") as nc:
        nc.createDimension("x", n)
        nc.createVariable("v", "i4", ("x",), chunksizes=(1,))[:] = np.arange(n, dtype="i4")
    archive = tmp_path / "ds.zip"
    _zip_of(store, archive)
    binary = str(nczarrfs_binary())
    failures: list[str] = []

    def writer(i: int) -> None:
        value = np.array([-i - 1], "<i4").tobytes()
        for _ in range(2000):
            r = subprocess.run([binary, "put", "--start", str(i * 7), "--count", "1",
                                str(archive), "v"],
                               input=value, capture_output=True, timeout=120)
            if r.returncode == 0:
                return
            if b"another process is writing this dataset" not in r.stderr:
                failures.append(f"put {i}: {r.stderr.decode()}")
                return
        failures.append(f"put {i} stayed refused")

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(1, writers + 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures, failures
    expected = np.arange(n, dtype="i4")
    for i in range(1, writers + 1):
        expected[i * 7] = -i - 1
    extracted = tmp_path / "extracted"
    with zipfile.ZipFile(archive) as z:
        z.extractall(extracted)
    np.testing.assert_array_equal(read(extracted, "nczarr", "v"), expected)


def test_a_put_into_an_archive_its_user_cannot_write_is_refused(nczarrfs, tmp_path):
    """A read-only (0444) archive is not rewritten by its owner's put, though the directory
    would let the new archive be renamed over it: a shell refuses to write the file too.
    The archive stays as it was. (Run as root, which takes the user `nobody`.)"""
    import shutil
    import tempfile

    nobody = 65534
    # pytest's tmp_path is private to root; nobody needs a directory of its own.
    shared = Path(tempfile.mkdtemp(prefix="nczarrfs-ro-"))
    try:
        shared.chmod(0o777)
        store = tmp_path / "src"
        with netCDF4.Dataset(url(store, "nczarr"), "w") as nc:
            nc.createDimension("x", 4)
            nc.createVariable("v", "i4", ("x",))[:] = np.arange(1, 5, dtype="i4")
        archive = shared / "ro.zip"
        _zip_of(store, archive)
        os.chown(archive, nobody, nobody)
        archive.chmod(0o444)
        before = archive.read_bytes()

        def as_nobody() -> None:
            os.setgid(nobody)
            os.setuid(nobody)

        shell = subprocess.run(["sh", "-c", f": > {archive}"], preexec_fn=as_nobody,
                               capture_output=True)
        assert shell.returncode != 0 and b"Permission denied" in shell.stderr, shell
        r = subprocess.run([str(nczarrfs_binary()), "put", str(archive), "v"],
                           input=np.array([9, 9, 9, 9], "<i4").tobytes(),
                           preexec_fn=as_nobody, capture_output=True)
        assert r.returncode != 0
        assert f"{archive}: Permission denied".encode() in r.stderr, r.stderr
        assert archive.read_bytes() == before
        assert archive.stat().st_mode & 0o7777 == 0o444
        assert sorted(p.name for p in shared.iterdir()) == ["ro.zip"]
    finally:
        shutil.rmtree(shared)
