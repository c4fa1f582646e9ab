"""Writes to S3 under faults: a rw mount whose server stalled and came back stores its
changes at the unmount and at an `fsync` (it asks the server then rather than fail from what
it remembers); a write-back that failed is not restarted by every following write; a `gen`
whose claim marker was stored but whose answer was lost goes on; a stopped server (connections
refused) is not reported as one that hangs.

Faults come from the FaultProxy of test_s3_faults.py in front of moto. Expected values are
what netCDF4-python reads from the stored objects, compared with the bytes written.
"""

from __future__ import annotations

import errno
import os
import threading
import uuid
from pathlib import Path

import numpy as np
import pytest

from test_s3 import BUCKET, MOTO, S3S_KEY, S3S_SECRET, _ok, _run
from test_s3_faults import binary, env, moto, proxy  # noqa: F401 (fixtures)
from test_s3_rw import RwMount, _download, _env, private_s3s  # noqa: F401 (fixture)

# A float variable of 4 rows of 4, one row per chunk, and an untouched integer variable.
CDL = """netcdf t {
dimensions:
  t = UNLIMITED ;
  x = 4 ;
variables:
  float v(t, x) ;
    v:_ChunkSizes = 1, 4 ;
  int f(x) ;
data:
  v = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16 ;
  f = 1, 2, 3, 4 ;
}
"""
INITIAL = np.arange(1, 17, dtype="<f4").reshape(4, 4)


def _generated(binary, env, tmp_path: Path, cdl: str = CDL) -> str:  # noqa: F811
    """A new dataset on moto (written directly, not through the proxy): its prefix."""
    prefix = f"write-faults-{uuid.uuid4().hex}/ds.file"
    source = tmp_path / "t.cdl"
    source.write_text(cdl)
    _ok(_run(binary, env, "gen", "-o", f"{MOTO}/{BUCKET}/{prefix}#mode=nczarr,s3", str(source)),
        "gen")
    return prefix


def _stored_v(client, prefix: str, tmp_path: Path) -> np.ndarray:
    import netCDF4

    local = _download(client, prefix, tmp_path / f"stored-{uuid.uuid4().hex}")
    with netCDF4.Dataset(f"file://{local}#mode=nczarr,file") as nc:
        nc.set_auto_mask(False)
        return np.asarray(nc["v"][:])


def _expect_eio(op) -> None:
    with pytest.raises(OSError) as info:
        op()
    assert info.value.errno == errno.EIO, info.value


def _stall_until_down(proxy, data: Path, row: int, values: bytes) -> None:  # noqa: F811
    """Writes `values` to row `row` of the mounted `data` file while every request stalls:
    the fsync runs out of time, the check that follows gets no answer, so the mount takes
    the server as down, and the close fails from that memory. Then the server answers
    again."""
    proxy.stall_on = "/"
    proxy.stall = 120
    fd = os.open(data, os.O_WRONLY)
    try:
        assert os.pwrite(fd, values, row * 16) == len(values)
        _expect_eio(lambda: os.fsync(fd))
        before = len(proxy.requests)
    finally:
        _expect_eio(lambda: os.close(fd))
    puts = [path for method, path in proxy.requests[before:] if method == "PUT"]
    assert not puts, f"the close sent {puts} to a server held as down"
    proxy.stall_on = None


# A probe of a server held as down is due a timeout after the last one: long enough for the
# steps after the server came back to run before it.
TIMEOUTS = {"NCZARRFS_S3_TIMEOUT": "10", "NCZARRFS_S3_CONNECT_TIMEOUT": "1",
            "NCZARRFS_S3_RETRIES": "1"}


def test_unmount_after_the_server_came_back_stores_the_changes(moto, proxy, binary, env,  # noqa: F811
                                                               tmp_path):
    prefix = _generated(binary, env, tmp_path)
    env = dict(env, **TIMEOUTS)
    location = f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    log = tmp_path / "mount.log"
    row = np.full(4, 9.5, dtype="<f4")
    with RwMount(binary, env, location, tmp_path / "mnt", log) as m:
        data = m.mnt / "v" / "data"
        assert data.read_bytes() == INITIAL.tobytes()
        _stall_until_down(proxy, data, 1, row.tobytes())
        before = len(proxy.requests)
        status = m.unmount()
    text = log.read_text()
    assert status == 0, f"the final flush gave up on a server that answers:\n{text}"
    assert any(method == "PUT" for method, _ in proxy.requests[before:]), proxy.requests[before:]
    want = INITIAL.copy()
    want[1] = row
    assert np.array_equal(_stored_v(moto, prefix, tmp_path), want)


def test_fsync_after_the_server_came_back_stores_the_changes(moto, proxy, binary, env,  # noqa: F811
                                                             tmp_path):
    prefix = _generated(binary, env, tmp_path)
    env = dict(env, **TIMEOUTS)
    location = f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    log = tmp_path / "mount.log"
    row = np.full(4, -3.25, dtype="<f4")
    with RwMount(binary, env, location, tmp_path / "mnt", log) as m:
        data = m.mnt / "v" / "data"
        assert data.read_bytes() == INITIAL.tobytes()
        _stall_until_down(proxy, data, 2, row.tobytes())
        fd = os.open(data, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        want = INITIAL.copy()
        want[2] = row
        # Stored by the fsync, before the unmount.
        assert np.array_equal(_stored_v(moto, prefix, tmp_path), want)
        assert m.unmount() == 0, log.read_text()


# After _stall_until_down, failed stores in a row (the fsync, the close's flush and its
# release) leave a pacing window of 4 / 32 of the timeout (1.25 s here) during which a close
# sends no probe; waited out so that the next close probes, well before the probe the server
# held as down would get anyway (a timeout after the check).
PACING_WINDOW_AFTER_STALL = 2.0


def _write_row(data: Path, row: int, values: bytes):
    """Opens the mounted `data`, writes `values` to row `row`: the open descriptor."""
    fd = os.open(data, os.O_WRONLY)
    assert os.pwrite(fd, values, row * 16) == len(values)
    return fd


def test_close_after_the_server_came_back_stores_the_changes(moto, proxy, binary, env,  # noqa: F811
                                                             tmp_path):
    """A close does not fail from the memory of a server held as down: it probes the server
    at once, and finding it back, stores the changed chunks (those of the earlier failed
    close too) before it returns."""
    prefix = _generated(binary, env, tmp_path)
    env = dict(env, **TIMEOUTS)
    location = f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    log = tmp_path / "mount.log"
    earlier, later = np.full(4, 9.5, dtype="<f4"), np.full(4, -1.5, dtype="<f4")
    with RwMount(binary, env, location, tmp_path / "mnt", log) as m:
        data = m.mnt / "v" / "data"
        assert data.read_bytes() == INITIAL.tobytes()
        _stall_until_down(proxy, data, 1, earlier.tobytes())
        threading.Event().wait(PACING_WINDOW_AFTER_STALL)
        fd = _write_row(data, 2, later.tobytes())
        before = len(proxy.requests)
        os.close(fd)
        sent = proxy.requests[before:]
        assert ("HEAD" in [method for method, _ in sent]
                and any(method == "PUT" and "/v/" in path for method, path in sent)), sent
        want = INITIAL.copy()
        want[1], want[2] = earlier, later
        # Stored by the close, before the unmount.
        assert np.array_equal(_stored_v(moto, prefix, tmp_path), want)
        assert m.unmount() == 0, log.read_text()


def test_closes_while_the_server_stays_down_wait_once_per_window(moto, proxy, binary, env,  # noqa: F811
                                                                 tmp_path):
    """A close while the server still does not answer sends one probe, fails with EIO and
    logs why; the closes right after it (within the pacing window its failure starts) send
    nothing and fail at once, saying that they sent no probe. Once the server is back, an
    fsync stores every row those closes failed to store."""
    prefix = _generated(binary, env, tmp_path)
    env = dict(env, **TIMEOUTS)
    location = f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    log = tmp_path / "mount.log"
    rows = {1: 9.5, 2: -1.5, 3: 0.25, 0: 42.0}
    with RwMount(binary, env, location, tmp_path / "mnt", log) as m:
        data = m.mnt / "v" / "data"
        assert data.read_bytes() == INITIAL.tobytes()
        _stall_until_down(proxy, data, 1, np.full(4, rows[1], dtype="<f4").tobytes())
        proxy.stall_on = "/"
        threading.Event().wait(PACING_WINDOW_AFTER_STALL)
        fd = _write_row(data, 2, np.full(4, rows[2], dtype="<f4").tobytes())
        before = len(proxy.requests)
        _expect_eio(lambda: os.close(fd))
        probed = proxy.requests[before:]
        assert [method for method, _ in probed] == ["HEAD"], probed
        before = len(proxy.requests)
        for row in (3, 0):
            fd = _write_row(data, row, np.full(4, rows[row], dtype="<f4").tobytes())
            _expect_eio(lambda: os.close(fd))
        assert proxy.requests[before:] == [], "a close within the window sent requests"
        text = log.read_text()
        assert "sent no probe" in text, text
        assert len([line for line in text.splitlines() if "flush /v/data" in line]) >= 4, text
        proxy.stall_on = None
        fd = os.open(data, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        want = INITIAL.copy()
        for row, value in rows.items():
            want[row] = value
        assert np.array_equal(_stored_v(moto, prefix, tmp_path), want)
        assert m.unmount() == 0, log.read_text()


# netcdf-c's default float fill (netcdf.h: NC_FILL_FLOAT).
FILL_FLOAT = np.float32(9.9692099683868690e36)


def test_a_refused_write_back_is_not_restarted_by_every_write(moto, proxy, binary, env,  # noqa: F811
                                                              tmp_path):
    """Credentials that expired (403 ExpiredToken on every PUT) while a stream of appends fills
    the cache with changed chunks: the write-back that fails is tried again only after a
    window (a 32nd of the timeout at first, 2 s here), not by each following write, and its
    failure is logged with the server's error. Once the server takes the PUTs again, the
    unmount stores every byte a write reported written."""
    record = 64
    initial = np.arange(record, dtype="<f4")
    cdl = ("netcdf big {\ndimensions:\n  t = UNLIMITED ;\n  x = 64 ;\nvariables:\n"
           "  float v(t, x) ;\n    v:_ChunkSizes = 1, 64 ;\ndata:\n  v = "
           + ", ".join(str(x) for x in initial) + " ;\n}\n")
    prefix = _generated(binary, env, tmp_path, cdl)
    env = dict(env, NCZARRFS_S3_TIMEOUT="64", NCZARRFS_S3_RETRIES="1")
    window = 64 / 32
    location = f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    log = tmp_path / "mount.log"
    written = []
    with RwMount(binary, env, location, tmp_path / "mnt", log, options="rw,cache_size=64K") as m:
        data = m.mnt / "v" / "data"
        proxy.fail_methods = {"PUT"}
        proxy.fail_status, proxy.fail_code = 403, "ExpiredToken"
        start = len(proxy.timeline)
        fd = os.open(data, os.O_WRONLY | os.O_APPEND)
        try:
            # 256 chunks of 256 bytes fill the cache: about 65 appends of 1000 bytes.
            for i in range(80):
                values = np.arange(250, dtype="<f4") + 1000 * (i + 1)
                try:
                    n = os.write(fd, values.tobytes())
                except OSError as e:
                    assert e.errno == errno.EIO, e
                    break
                assert n % 4 == 0
                written.append(values[:n // 4])
                if n < len(values) * 4:
                    break
            writes_done = len(proxy.timeline)
            # The failure shows in the log while the writes run, before any flush.
            text = log.read_text()
            assert "ExpiredToken" in text and "not stored" in text, text
        finally:
            _expect_eio(lambda: os.close(fd))
        puts: dict[str, list[float]] = {}
        for t, event, method, path in proxy.timeline[start:writes_done]:
            if event == "arrived" and method == "PUT":
                puts.setdefault(path, []).append(t)
        assert puts, "no write-back was tried"
        for path, times in puts.items():
            gaps = [b - a for a, b in zip(times, times[1:])]
            assert all(gap >= window - 0.05 for gap in gaps), (
                f"{path} sent again after {min(gaps):.3f} s ({len(times)} PUTs)")
        proxy.fail_methods = set()
        assert m.unmount() == 0, log.read_text()
    flat = np.concatenate([initial, *written])
    want = np.full(-(-len(flat) // record) * record, FILL_FLOAT, dtype="<f4")
    want[:len(flat)] = flat
    assert len(flat) > 100 * record, "the writes stopped before the cache was half full"
    assert np.array_equal(_stored_v(moto, prefix, tmp_path).ravel(), want)


def test_a_stopped_server_is_not_reported_as_one_that_hangs(private_s3s, binary, tmp_path):
    """Connections refused (the server stopped): each fsync's PUT is retried until its
    retries are used up, which takes longer than the connect timeout, but a refused
    connection is no stall. The errors say the connection was refused, never that a request
    ran out of time, and the server is not held as down: every fsync asks it again."""
    private_s3s.start()
    env = _env(tmp_path, S3S_KEY, S3S_SECRET, NCZARRFS_S3_TIMEOUT="4",
               NCZARRFS_S3_CONNECT_TIMEOUT="1", NCZARRFS_S3_RETRIES="10")
    location = f"{private_s3s.endpoint}/{BUCKET}/stopped/ds.file#mode=nczarr,s3"
    source = tmp_path / "t.cdl"
    source.write_text(CDL)
    _ok(_run(binary, env, "gen", "-o", location, str(source)), "gen")
    log = tmp_path / "mount.log"
    with RwMount(binary, env, location, tmp_path / "mnt", log) as m:
        data = m.mnt / "v" / "data"
        assert data.read_bytes() == INITIAL.tobytes()
        private_s3s.stop()
        fd = os.open(data, os.O_WRONLY)
        try:
            assert os.pwrite(fd, np.full(4, 9.5, dtype="<f4").tobytes(), 16) == 16
            for _ in range(2):
                _expect_eio(lambda: os.fsync(fd))
        finally:
            _expect_eio(lambda: os.close(fd))
        text = log.read_text()
        flushes = [line for line in text.splitlines() if "flush /v/data" in line]
        assert len(flushes) >= 3, text
        assert all("Connection refused" in line for line in flushes), text
        assert "out of time" not in text and "taken as down" not in text, text
        assert m.unmount() != 0


def test_a_claim_whose_answer_was_lost_goes_on(moto, proxy, binary, env, tmp_path):  # noqa: F811
    """The server stores the `.nczarrfs-writing` marker of a `gen`, but the connection is
    reset before its answer: the marker read back is this run's own, so the run goes on, and
    removes the marker once the dataset is complete."""
    prefix = f"write-faults-{uuid.uuid4().hex}/ds.file"
    source = tmp_path / "t.cdl"
    source.write_text(CDL)
    proxy.reset_after_on = ".nczarrfs-writing"
    proxy.resets_left = 1
    res = _run(binary, env, "gen", "-o", f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3",
               str(source))
    assert proxy.resets_left == 0, "the marker's PUT was not reset"
    _ok(res, "gen whose claim's answer was lost")
    keys = [o["Key"] for o in moto.list_objects_v2(Bucket=BUCKET, Prefix=prefix + "/")
            .get("Contents", [])]
    assert f"{prefix}/.nczarrfs-writing" not in keys, keys
    assert np.array_equal(_stored_v(moto, prefix, tmp_path), INITIAL)



def test_reads_do_not_wait_for_a_flush_stuck_on_the_server(moto, proxy, binary, env,  # noqa: F811
                                                           tmp_path):
    """PUTs stall while GETs are answered: a writer's fsync waits for its PUT until the
    timeout. Meanwhile another process reads a variable nobody wrote (its chunk fetched from
    the server) and the generated header, and both are done while the PUT still hangs: the
    flush stores the chunks without the lock that reads take."""
    prefix = _generated(binary, env, tmp_path)
    env = dict(env, NCZARRFS_S3_TIMEOUT="30", NCZARRFS_S3_CONNECT_TIMEOUT="1",
               NCZARRFS_S3_RETRIES="1")
    location = f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    log = tmp_path / "mount.log"
    row = np.full(4, 7.5, dtype="<f4")
    with RwMount(binary, env, location, tmp_path / "mnt", log) as m:
        data = m.mnt / "v" / "data"
        assert data.read_bytes() == INITIAL.tobytes()
        proxy.stall_on, proxy.stall_methods, proxy.stall = "/v/", {"PUT"}, 120
        fd = os.open(data, os.O_WRONLY)
        fsync_failed = threading.Event()

        def fsync():
            assert os.pwrite(fd, row.tobytes(), 3 * 16) == 16
            _expect_eio(lambda: os.fsync(fd))
            fsync_failed.set()

        writer = threading.Thread(target=fsync)
        writer.start()
        try:
            while not any(method == "PUT" and "/v/" in path
                          for method, path in list(proxy.requests)):
                assert writer.is_alive(), "the fsync ended before its PUT reached the server"
                threading.Event().wait(0.01)
            f = (m.mnt / "f" / "data").read_bytes()
            header = (m.mnt / "@header.cdl").read_text()
            # Done before the stalled PUT was given up.
            assert not fsync_failed.is_set() and proxy.abandoned == 0, \
                "the reads waited for the flush"
            assert f == np.arange(1, 5, dtype="<i4").tobytes()
            assert "float v(t, x)" in header, header
        finally:
            writer.join()
            proxy.stall_on = None
        want = INITIAL.copy()
        want[3] = row
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        assert m.unmount() == 0, log.read_text()
    assert np.array_equal(_stored_v(moto, prefix, tmp_path), want)


def test_reads_do_not_wait_for_a_shard_store_stuck_on_the_server(moto, proxy, binary, env,  # noqa: F811
                                                                  tmp_path):
    """As above for a Zarr v3 dataset with a sharded array: the flush rewrites the shard
    whose inner chunk was written while its PUT hangs, and reads of another array and of
    the generated header are done meanwhile. Once the server takes PUTs again, zarr-python
    reads every inner chunk of the shard from the bucket: the written one and those kept."""
    import zarr

    from test_s3 import _upload

    store = tmp_path / "s.zarr"
    root = zarr.open_group(str(store), mode="w", zarr_format=3)
    sharded = root.create_array("s", shape=(8,), chunks=(2,), shards=(8,), dtype="<i4",
                                fill_value=0, dimension_names=["x"])
    sharded[...] = np.arange(1, 9, dtype="<i4")
    plain = root.create_array("f", shape=(4,), chunks=(4,), dtype="<i4", fill_value=0,
                              dimension_names=["y"])
    plain[...] = np.arange(10, 14, dtype="<i4")
    prefix = f"write-faults-{uuid.uuid4().hex}/s.zarr"
    _upload(moto, store, prefix)
    env = dict(env, NCZARRFS_S3_TIMEOUT="30", NCZARRFS_S3_CONNECT_TIMEOUT="1",
               NCZARRFS_S3_RETRIES="1")
    location = f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=zarr,s3"
    log = tmp_path / "mount.log"
    with RwMount(binary, env, location, tmp_path / "mnt", log) as m:
        data = m.mnt / "s" / "data"
        assert data.read_bytes() == np.arange(1, 9, dtype="<i4").tobytes()
        proxy.stall_on, proxy.stall_methods, proxy.stall = "/s/", {"PUT"}, 120
        fd = os.open(data, os.O_WRONLY)
        fsync_failed = threading.Event()

        def fsync():
            # Inner chunk 1 (elements 2 and 3) of the array's only shard.
            assert os.pwrite(fd, np.array([-2, -3], dtype="<i4").tobytes(), 2 * 4) == 8
            _expect_eio(lambda: os.fsync(fd))
            fsync_failed.set()

        writer = threading.Thread(target=fsync)
        writer.start()
        try:
            while not any(method == "PUT" and "/s/" in path
                          for method, path in list(proxy.requests)):
                assert writer.is_alive(), "the fsync ended before its PUT reached the server"
                threading.Event().wait(0.01)
            f = (m.mnt / "f" / "data").read_bytes()
            header = (m.mnt / "@header.cdl").read_text()
            # Done before the stalled PUT was given up.
            assert not fsync_failed.is_set() and proxy.abandoned == 0, \
                "the reads waited for the flush"
            assert f == np.arange(10, 14, dtype="<i4").tobytes()
            assert "int s(x)" in header, header
        finally:
            writer.join()
            proxy.stall_on = None
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        assert m.unmount() == 0, log.read_text()
    local = _download(moto, prefix, tmp_path / "stored.zarr")
    want = np.arange(1, 9, dtype="<i4")
    want[2:4] = [-2, -3]
    np.testing.assert_array_equal(zarr.open_array(str(local / "s"), mode="r")[...], want)
