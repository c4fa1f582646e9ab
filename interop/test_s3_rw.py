"""Read-write mounts of datasets on S3 (moto and s3s-fs, see scripts/s3-servers).

A dataset made by ``nczarrfs gen -o`` on the server is mounted ``-o rw`` (a real kernel FUSE
mount) and edited with ordinary tools: Python ``pwrite`` at random offsets and ``dd
conv=notrunc`` into ``data`` files, ``cat >>`` appending records along the unlimited dimension,
attribute files written and removed, ``mkdir`` of a subgroup, ``mv`` of a variable. After the
unmount the bucket prefix is downloaded with boto3 and opened with netCDF4-python (netcdf-c),
and every value and attribute is compared with a numpy model of the writes: the expected
bytes are the initial values (known from the CDL) with each write's bytes laid over them.

Faults: a private s3s-fs server (it keeps its objects on disk, so it can be stopped and
started again with the same content) goes away while changed chunks wait in the mount's cache;
``fsync``, ``close`` and the unmount then report the failure (EIO, a non-zero exit of the
daemon) and the server's objects are unchanged; once the server is back the same mount stores
everything on the next ``fsync``.
"""

from __future__ import annotations

import errno
import os
import random
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from test_s3 import BUCKET, MOTO, S3S, S3S_BIN, S3S_KEY, S3S_SECRET, _answers, _client, _ok, _run

# The model of a rw mount and its random operations, shared with the mount tests.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "mount-tests"))
from datasets import nczarr_dataset  # noqa: E402
from rw_model import check_netcdf, initial_model, run_operations  # noqa: E402

Y, X = 6, 8
RECORDS = 4
# netcdf-c's default fill values (netcdf.h: NC_FILL_FLOAT, NC_FILL_DOUBLE).
FILL_FLOAT = np.float32(9.9692099683868690e36)
FILL_DOUBLE = 9.9692099683868690e36

CDL = f"""netcdf rw {{
dimensions:
    time = UNLIMITED ; // ({RECORDS} currently)
    y = {Y} ;
    x = {X} ;
variables:
    double time(time) ;
        time:units = "days since 2000-01-01" ;
    float temp(time, y, x) ;
        temp:long_name = "temperature" ;
        temp:comment = "to be removed" ;
        temp:_ChunkSizes = 1, 3, 4 ;
    double grid(y, x) ;
        grid:_ChunkSizes = 4, 4 ;
        grid:_DeflateLevel = 1 ;
        grid:_Shuffle = "true" ;
// global attributes:
        :title = "rw on s3" ;
data:
 time = {", ".join(str(0.5 * i) for i in range(RECORDS))} ;
 temp = {", ".join(str(float(i)) for i in range(RECORDS * Y * X))} ;
 grid = {", ".join(repr(i / 8) for i in range(Y * X))} ;
}}
"""


def _initial():
    time_v = np.arange(RECORDS, dtype="<f8") * 0.5
    temp = np.arange(RECORDS * Y * X, dtype="<f4").reshape(RECORDS, Y, X)
    grid = np.arange(Y * X, dtype="<f8").reshape(Y, X) / 8
    return time_v, temp, grid


@pytest.fixture(scope="module")
def binary():
    from conftest import nczarrfs_binary

    path = nczarrfs_binary()
    if not path.exists():
        pytest.fail(f"{path} not built: run `cargo build --release` first")
    return path


@pytest.fixture(autouse=True)
def _plugins(monkeypatch):
    """netcdf-c finds the zlib filter of `grid` through HDF5_PLUGIN_PATH."""
    import netCDF4

    monkeypatch.setenv("HDF5_PLUGIN_PATH", str(Path(netCDF4.__file__).parent / "plugins"))


def _server(name: str):
    """(endpoint, access key, secret key, boto3 client) of a shared server, or a skip."""
    endpoint, key, secret = {
        "moto": (MOTO, "testing", "testing"),
        "s3s": (S3S, S3S_KEY, S3S_SECRET),
    }[name]
    if not _answers(endpoint):
        pytest.skip(f"{name} S3 server not reachable at {endpoint} (run scripts/s3-servers start)")
    client = _client(endpoint, key, secret)
    if BUCKET not in [b["Name"] for b in client.list_buckets().get("Buckets", [])]:
        client.create_bucket(Bucket=BUCKET)
    return endpoint, key, secret, client


def _env(tmp_path: Path, key: str, secret: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(tmp_path / "home"), AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret)
    env.update(extra)
    return env


class RwMount:
    """`nczarrfs mount -f -o rw` of `location` on `mnt`: the daemon stays our child, so its
    exit status (non-zero when the final flush failed) can be checked after the unmount."""

    def __init__(self, binary: Path, env, location: str, mnt: Path, log: Path,
                 options: str = "rw"):
        self.binary, self.env, self.location, self.mnt, self.log = binary, env, location, mnt, log
        self.options = options
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> "RwMount":
        self.mnt.mkdir(exist_ok=True)
        self.proc = subprocess.Popen(
            [str(self.binary), "mount", "-f", "-o", self.options, "--log-file", str(self.log),
             self.location, str(self.mnt)],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 60
        while not self.mounted():
            if self.proc.poll() is not None:
                raise AssertionError(f"mount failed: {self.proc.stderr.read().decode()}"
                                     f"{self.log.read_text() if self.log.exists() else ''}")
            assert time.monotonic() < deadline, "the mount did not appear"
            time.sleep(0.02)
        return self

    def mounted(self) -> bool:
        with open("/proc/self/mounts") as f:
            return any(line.split()[1] == str(self.mnt) for line in f)

    def unmount(self, timeout: float = 120) -> int:
        """Unmounts and returns the daemon's exit status once it has stored everything."""
        if self.mounted():
            subprocess.run(["fusermount3", "-u", str(self.mnt)], capture_output=True, check=True)
        assert self.proc is not None
        return self.proc.wait(timeout=timeout)

    def __exit__(self, *exc):
        if self.mounted():
            subprocess.run(["fusermount3", "-u", "-z", str(self.mnt)], capture_output=True)
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _pwrite(path: Path, offset: int, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        assert os.pwrite(fd, data, offset) == len(data)
    finally:
        os.close(fd)


def _download(client, prefix: str, dest: Path) -> Path:
    """Every object under prefix/ into dest, as a directory store ("folder" objects, which
    end in `/`, are directories there)."""
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/")
    count = 0
    for page in pages:
        for obj in page.get("Contents", []):
            if obj["Key"].endswith("/"):
                continue
            path = dest / obj["Key"][len(prefix) + 1:]
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(client.get_object(Bucket=BUCKET, Key=obj["Key"])["Body"].read())
            count += 1
    assert count, f"nothing stored under {prefix}"
    return dest


def _objects(client, prefix: str) -> dict[str, bytes]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/")
    return {
        o["Key"]: client.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
        for page in pages for o in page.get("Contents", [])
    }


def _gen(binary, env, location: str, tmp_path: Path) -> None:
    cdl = tmp_path / "rw.cdl"
    cdl.write_text(CDL)
    _ok(_run(binary, env, "gen", "-o", location, str(cdl)), "gen -o s3")


@pytest.mark.parametrize("server", ["moto", "s3s"])
def test_rw_mount_edits_reach_the_bucket(server, binary, tmp_path, seed):
    endpoint, key, secret, client = _server(server)
    env = _env(tmp_path, key, secret, NCZARRFS_S3_RETRIES="2")
    prefix = f"rw-{uuid.uuid4().hex}/ds.file"
    location = f"{endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    _gen(binary, env, location, tmp_path)
    rng = random.Random(seed)

    time_v, temp, grid = _initial()
    temp_bytes = bytearray(temp.tobytes())
    grid_bytes = bytearray(grid.tobytes())
    time_bytes = bytearray(time_v.tobytes())
    mnt = tmp_path / "mnt"
    with RwMount(binary, env, location, mnt, tmp_path / "mount.log") as m:
        # Random writes, not aligned to elements: the bytes land where they are written.
        for _ in range(12):
            length = rng.randrange(1, 200)
            offset = rng.randrange(0, len(temp_bytes) - length)
            data = bytes(rng.randrange(256) for _ in range(length))
            _pwrite(mnt / "temp" / "data", offset, data)
            temp_bytes[offset:offset + length] = data
        # dd into the compressed variable, in place.
        patch = (np.arange(11, dtype="<f8") * -3.25).tobytes()
        src = tmp_path / "patch.bin"
        src.write_bytes(patch)
        seek = 8 * 13
        _ok(subprocess.run(["dd", f"if={src}", f"of={mnt / 'grid' / 'data'}", "bs=8",
                            f"seek={seek // 8}", "conv=notrunc", "status=none"],
                           capture_output=True), "dd")
        grid_bytes[seek:seek + len(patch)] = patch
        # Two records appended along `time` with cat >>; time's new records read as fill
        # until written.
        records = (np.arange(2 * Y * X, dtype="<f4") * 0.25 - 7).tobytes()
        (tmp_path / "records.bin").write_bytes(records)
        _ok(subprocess.run(f"cat {tmp_path / 'records.bin'} >> {mnt / 'temp' / 'data'}",
                           shell=True, capture_output=True), "cat >>")
        temp_bytes += records
        time_bytes += np.full(2, FILL_DOUBLE, dtype="<f8").tobytes()
        assert (mnt / "temp" / "data").stat().st_size == len(temp_bytes)
        assert (mnt / "time" / "data").stat().st_size == len(time_bytes)
        _pwrite(mnt / "time" / "data", 8 * RECORDS + 8, np.float64(2.5).tobytes())
        time_bytes[8 * RECORDS + 8:8 * RECORDS + 16] = np.float64(2.5).tobytes()
        # Reads through the mount see every write at once.
        assert (mnt / "temp" / "data").read_bytes() == bytes(temp_bytes)
        # Attributes: a new typed one, a rewritten one, a removed one, a global one.
        (mnt / "temp" / "@attributes" / "valid_range").write_text("-50.f, 50.f\n")
        (mnt / "temp" / "@attributes" / "long_name").write_text("air temperature\n")
        os.unlink(mnt / "temp" / "@attributes" / "comment")
        (mnt / "@attributes" / "history").write_text("edited on S3")
        # A subgroup and a renamed variable.
        (mnt / "sub").mkdir()
        (mnt / "grid").rename(mnt / "grid2")
        assert sorted(p.name for p in mnt.iterdir() if not p.name.startswith("@")) == [
            "grid2", "sub", "temp", "time"]
        assert m.unmount() == 0, (tmp_path / "mount.log").read_text()

    import netCDF4

    local = _download(client, prefix, tmp_path / "downloaded")
    with netCDF4.Dataset(f"file://{local}#mode=nczarr,file") as nc:
        nc.set_auto_mask(False)
        assert nc.dimensions["time"].isunlimited() and len(nc.dimensions["time"]) == RECORDS + 2
        want_temp = np.frombuffer(bytes(temp_bytes), dtype="<f4").reshape(RECORDS + 2, Y, X)
        got = np.asarray(nc["temp"][:])
        assert got.tobytes() == want_temp.tobytes()
        assert np.asarray(nc["time"][:]).tobytes() == bytes(time_bytes)
        assert "grid" not in nc.variables
        assert np.asarray(nc["grid2"][:]).tobytes() == bytes(grid_bytes)
        assert nc["grid2"].filters().get("zlib"), nc["grid2"].filters()
        assert nc["temp"].long_name == "air temperature"
        assert "comment" not in nc["temp"].ncattrs()
        vr = nc["temp"].valid_range
        assert vr.dtype == np.float32 and list(vr) == [-50.0, 50.0]
        assert nc.history == "edited on S3" and nc.title == "rw on s3"
        assert list(nc.groups) == ["sub"]
    # Nothing is left under the old name.
    assert not [k for k in _objects(client, prefix) if k.startswith(f"{prefix}/grid/")]


@pytest.mark.parametrize("server", ["moto", "s3s"])
def test_random_operations_match_a_model(server, binary, tmp_path, seed):
    """The mount tests' random sequences of writes, appends past the end, attribute files,
    renames, groups and remounts (mount-tests/rw_model.py), on a dataset netCDF4-python wrote
    and that was uploaded to the bucket: after the last unmount, the objects downloaded from
    the bucket must read exactly as the model in netCDF4-python."""
    endpoint, key, secret, client = _server(server)
    env = _env(tmp_path, key, secret, NCZARRFS_S3_RETRIES="2")
    url = nczarr_dataset(tmp_path / "ds.file", no_fill=True)
    model = initial_model(url)
    prefix = f"rw-model-{uuid.uuid4().hex}/ds.file"
    for path in sorted((tmp_path / "ds.file").rglob("*")):
        if path.is_file():
            key_name = f"{prefix}/{path.relative_to(tmp_path / 'ds.file')}"
            client.put_object(Bucket=BUCKET, Key=key_name, Body=path.read_bytes())
    location = f"{endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    mnt, log = tmp_path / "mnt", tmp_path / "mount.log"
    mounts = [RwMount(binary, env, location, mnt, log).__enter__()]

    def remount() -> Path:
        assert mounts[-1].unmount() == 0, log.read_text()
        mounts.append(RwMount(binary, env, location, mnt, log).__enter__())
        return mnt

    try:
        run_operations(mnt, model, random.Random(seed), 150, remount)
        assert mounts[-1].unmount() == 0, log.read_text()
    finally:
        for m in mounts:
            m.__exit__(None, None, None)
    local = _download(client, prefix, tmp_path / "downloaded")
    check_netcdf(f"file://{local}#mode=nczarr,file", model)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateS3s:
    """An s3s-fs server of the test's own, stopped and started again on the same port and
    directory: unlike moto it keeps its objects across restarts."""

    def __init__(self, root: Path):
        self.root = root
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self):
        if not S3S_BIN.exists():
            pytest.skip(f"{S3S_BIN} missing (scripts/s3-servers start builds it)")
        (self.root / BUCKET).mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            [str(S3S_BIN), "--host", "127.0.0.1", "--port", str(self.port), "--access-key",
             S3S_KEY, "--secret-key", S3S_SECRET, str(self.root)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not _answers(self.endpoint):
            assert time.monotonic() < deadline, "private s3s-fs did not start"
            time.sleep(0.05)
        return _client(self.endpoint, S3S_KEY, S3S_SECRET)

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture
def private_s3s(tmp_path):
    server = PrivateS3s(tmp_path / "s3s-data")
    yield server
    server.stop()


def _expect_eio(fn) -> None:
    with pytest.raises(OSError) as info:
        fn()
    assert info.value.errno == errno.EIO, info.value


def test_server_gone_with_dirty_chunks(private_s3s, binary, tmp_path):
    client = private_s3s.start()
    env = _env(tmp_path, S3S_KEY, S3S_SECRET, NCZARRFS_S3_TIMEOUT="2", NCZARRFS_S3_RETRIES="1")
    prefix = "gone/ds.file"
    location = f"{private_s3s.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    _gen(binary, env, location, tmp_path)
    _, temp, grid = _initial()
    temp_bytes = bytearray(temp.tobytes())
    stored = _objects(client, prefix)
    data = tmp_path / "mnt" / "temp" / "data"
    log = tmp_path / "mount.log"

    with RwMount(binary, env, location, tmp_path / "mnt", log) as m:
        first = np.full(Y * X, 111.0, dtype="<f4").tobytes()
        second = np.full(X, -222.0, dtype="<f4").tobytes()
        # Every chunk in the mount's cache first: a partial chunk write reads the chunk.
        assert data.read_bytes() == bytes(temp_bytes)
        private_s3s.stop()
        # fsync of a written file while the server is away: EIO, and the server (once
        # back, but before the mount tries again) holds what it held before.
        fd = os.open(data, os.O_WRONLY)
        assert os.pwrite(fd, first, 0) == len(first)
        _expect_eio(lambda: os.fsync(fd))
        # Nothing was stored: the close that follows says so again.
        _expect_eio(lambda: os.close(fd))
        temp_bytes[0:len(first)] = first
        # close of a written file (its flush) while the server is away: EIO as well.
        fd = os.open(data, os.O_WRONLY)
        assert os.pwrite(fd, second, 4 * Y * X * 2) == len(second)
        _expect_eio(lambda: os.close(fd))
        temp_bytes[4 * Y * X * 2:4 * Y * X * 2 + len(second)] = second
        # Reads still see the writes: they wait in the cache.
        assert data.read_bytes() == bytes(temp_bytes)
        # Each close's release tries once more after the close returned, while reads go on:
        # five failed flushes in all (the fsync, then a flush and a release per close) before
        # the server may come back unseen by them.
        deadline = time.monotonic() + 120
        while log.read_text().count("ERROR nczarrfs::fuse::fs] flush /temp/data") < 5:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)

        private_s3s.start()
        assert _objects(client, prefix) == stored, "a failed flush changed the stored dataset"
        # Back: the next fsync stores every chunk that waited.
        fd = os.open(data, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        now = _objects(client, prefix)
        assert now != stored
        assert m.unmount() == 0, log.read_text()

    import netCDF4

    local = _download(client, prefix, tmp_path / "after")
    with netCDF4.Dataset(f"file://{local}#mode=nczarr,file") as nc:
        nc.set_auto_mask(False)
        assert np.asarray(nc["temp"][:]).tobytes() == bytes(temp_bytes)
        assert np.asarray(nc["grid"][:]).tobytes() == grid.tobytes()


def test_unmount_with_the_server_gone_fails_loudly(private_s3s, binary, tmp_path):
    client = private_s3s.start()
    env = _env(tmp_path, S3S_KEY, S3S_SECRET, NCZARRFS_S3_TIMEOUT="2", NCZARRFS_S3_RETRIES="1")
    prefix = "unmount/ds.file"
    location = f"{private_s3s.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    _gen(binary, env, location, tmp_path)
    stored = _objects(client, prefix)
    log = tmp_path / "mount.log"
    with RwMount(binary, env, location, tmp_path / "mnt", log) as m:
        # A write the kernel hands over without a flush (the file stays open until the
        # server is gone), then the unmount: the daemon cannot store it.
        fd = os.open(tmp_path / "mnt" / "temp" / "data", os.O_WRONLY)
        try:
            assert os.pwrite(fd, b"\x01" * 64, 100) == 64
            private_s3s.stop()
        finally:
            with pytest.raises(OSError):
                os.close(fd)
        status = m.unmount()
    text = log.read_text()
    assert status != 0, f"the daemon exited 0 although the final flush failed:\n{text}"
    assert "flush" in text and private_s3s.endpoint in text, text
    private_s3s.start()
    assert _objects(client, prefix) == stored


@pytest.mark.parametrize("server", ["moto", "s3s"])
def test_rename_of_a_group_with_many_chunks_and_odd_names(server, binary, tmp_path):
    """`mv` of a group holding a subgroup and 600 chunks, their names holding characters S3
    clients are tempted to encode (space, `#`, `%`, `[`): the server copies every object to
    the new keys exactly, nothing stays under the old name, and netcdf-c reads the values at
    the new name. (No `%` followed by two hex digits: s3s-fs lists such a key decoded, `h%20`
    as `h `, so no client could read it back from its listing.)"""
    import netCDF4

    endpoint, key, secret, client = _server(server)
    env = _env(tmp_path, key, secret, NCZARRFS_S3_RETRIES="2")
    local = tmp_path / "ds.file"
    values = np.arange(500, dtype="<i4") * 3
    deeper = np.arange(100, dtype="<f8") / 4
    with netCDF4.Dataset(f"file://{local}#mode=nczarr,file", "w") as nc:
        g = nc.createGroup("g #1")
        g.createDimension("n", 500)
        v = g.createVariable("v[%] x", "i4", ("n",), chunksizes=(1,))
        v[:] = values
        h = g.createGroup("h%_2")
        h.createDimension("m", 100)
        w = h.createVariable("w", "f8", ("m",), chunksizes=(1,))
        w[:] = deeper
    prefix = f"rename-{uuid.uuid4().hex}/ds.file"
    stored = [p for p in sorted(local.rglob("*")) if p.is_file()]
    for path in stored:
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{path.relative_to(local)}",
                          Body=path.read_bytes())
    under_old = [p for p in stored if p.relative_to(local).parts[0] == "g #1"]
    assert len(under_old) > 600
    location = f"{endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    with RwMount(binary, env, location, tmp_path / "mnt", tmp_path / "mount.log") as m:
        (m.mnt / "g #1").rename(m.mnt / "moved %[x]#")
        assert (m.mnt / "moved %[x]#" / "v[%] x" / "data").read_bytes() == values.tobytes()
        assert m.unmount() == 0, (tmp_path / "mount.log").read_text()
    keys = list(_objects(client, prefix))
    assert not [k for k in keys if k.startswith(f"{prefix}/g #1/")]
    moved = [k for k in keys if k.startswith(f"{prefix}/moved %[x]#/")]
    assert len(moved) == len(under_old), (len(moved), len(under_old))
    with netCDF4.Dataset(f"file://{_download(client, prefix, tmp_path / 'dl')}"
                         "#mode=nczarr,file") as nc:
        assert list(nc.groups) == ["moved %[x]#"]
        g = nc.groups["moved %[x]#"]
        assert np.asarray(g["v[%] x"][:]).tolist() == values.tolist()
        assert np.asarray(g.groups["h%_2"]["w"][:]).tolist() == deeper.tolist()


def test_folder_objects_are_no_objects_of_a_name(binary, tmp_path):
    """Empty "folder" objects (`g/`, `g/empty/`, `h/`: what S3 consoles, s3fs-fuse's mkdir and
    Hadoop make; moto lists them, s3s-fs does not) are taken for no object of their name: `mv`
    onto a name that has one, back again, and `mkdir` of a name left with one all work, and
    netcdf-c reads the result."""
    import netCDF4

    endpoint, key, secret, client = _server("moto")
    env = _env(tmp_path, key, secret, NCZARRFS_S3_RETRIES="2")
    local = tmp_path / "ds.file"
    with netCDF4.Dataset(f"file://{local}#mode=nczarr,file", "w") as nc:
        g = nc.createGroup("g")
        g.createDimension("n", 4)
        g.createVariable("v", "i4", ("n",))[:] = np.arange(4)
    prefix = f"folders-{uuid.uuid4().hex}/ds.file"
    for path in sorted(local.rglob("*")):
        if path.is_file():
            client.put_object(Bucket=BUCKET, Key=f"{prefix}/{path.relative_to(local)}",
                              Body=path.read_bytes())
    for folder in ("g/", "g/empty/", "h/"):
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{folder}", Body=b"")
    location = f"{endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    with RwMount(binary, env, location, tmp_path / "mnt", tmp_path / "mount.log") as m:
        os.rename(m.mnt / "g", m.mnt / "h")
        os.rename(m.mnt / "h", m.mnt / "g")
        os.rename(m.mnt / "g", m.mnt / "h")
        os.mkdir(m.mnt / "g")
        assert m.unmount() == 0, (tmp_path / "mount.log").read_text()
    with netCDF4.Dataset(f"file://{_download(client, prefix, tmp_path / 'dl')}"
                         "#mode=nczarr,file") as nc:
        assert sorted(nc.groups) == ["g", "h"]
        assert np.asarray(nc.groups["h"]["v"][:]).tolist() == [0, 1, 2, 3]
        assert not nc.groups["g"].variables
