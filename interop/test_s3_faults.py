"""S3 faults: throttling and 5xx answers are retried with backoff (spaced as the proxy's clock
shows), slow or vanished servers fail reads with a clear error (CLI) or EIO (mount), a
stalled request is given up and not sent again, the mount recovers when the
server is back, and writes are never reported successful unless stored.

Faults are injected by a small HTTP proxy in front of moto (it answers 503 or stalls when told
to, and forwards otherwise), and by a private moto server that a test stops and restarts.
"""

from __future__ import annotations

import errno
import http.client
import os
import select
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pytest

from test_s3 import BUCKET, MOTO, _answers, _client, _ok, _run, _upload

REPO = Path(__file__).resolve().parent.parent
VENV_BIN = Path(os.environ.get("NCZARRFS_VENV", REPO / ".venv")) / "bin"


def _hangs_up_within(conn: socket.socket, seconds: float) -> bool:
    """Waits `seconds`, or less if the client closes the connection: whether it did."""
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([conn], [], [], left)
        if not readable:
            return False
        try:
            if conn.recv(1, socket.MSG_PEEK) == b"":
                return True
        except ConnectionError:
            return True
        # Bytes of a next request (never sent while this one waits): wait out the stall.
        time.sleep(max(0.0, deadline - time.monotonic()))
    return False


class FaultProxy:
    """Forwards HTTP requests to `upstream`, except that the next `fail` requests (or every
    request whose method is in `fail_methods`, or every request until the monotonic time
    `fail_until`) get a 503 SlowDown, and requests whose path contains `stall_on` wait `stall`
    seconds first (only the next `stalls_left` of them, unless that is None; only those of
    `stall_methods`, unless that is None), or until the
    client hangs up, which `abandoned` counts. PUTs whose path ends with `fail_put_on` get a
    503 too. The failing answer is `fail_status` with the S3 error code `fail_code` (503
    SlowDown unless changed: 403 ExpiredToken stands for credentials that expired). GETs whose
    path contains `hold_on` wait until `release()` (at most a minute); `held` counts those
    waiting. The next `resets_left` requests whose path contains `reset_after_on` are
    forwarded, and then the connection is reset instead of answered: the server did the
    request, the client never learns it. `timeline` records, on the proxy's monotonic clock,
    each request's arrival and each failing answer as (time, "arrived" or "503", method,
    path)."""

    def __init__(self, upstream: str):
        self.upstream = urlparse(upstream)
        self.fail = 0
        self.fail_put_on: str | None = None
        self.fail_methods: set[str] = set()
        self.fail_until = 0.0
        self.fail_status = 503
        self.fail_code = "SlowDown"
        self.reset_after_on: str | None = None
        self.resets_left = 0
        self.stall_on: str | None = None
        self.stall_methods: set[str] | None = None
        self.stall = 0.0
        self.stalls_left: int | None = None
        self.hold_on: str | None = None
        self.held = 0
        self.released = threading.Event()
        self.changed = threading.Condition()
        self.served = {"503": 0, "forwarded": 0}
        self.requests: list[tuple[str, str]] = []
        self.timeline: list[tuple[float, str, str, str]] = []
        self.abandoned = 0
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                arrived = time.monotonic()
                with proxy.lock:
                    proxy.requests.append((self.command, self.path))
                    proxy.timeline.append((arrived, "arrived", self.command, self.path))
                    failing = (proxy.fail > 0 or self.command in proxy.fail_methods
                               or time.monotonic() < proxy.fail_until
                               or (self.command == "PUT" and proxy.fail_put_on is not None
                                   and self.path.endswith(proxy.fail_put_on)))
                    if proxy.fail > 0:
                        proxy.fail -= 1
                    stall = proxy.stall if proxy.stall_on and proxy.stall_on in self.path else 0
                    if proxy.stall_methods is not None and self.command not in proxy.stall_methods:
                        stall = 0
                    if stall and proxy.stalls_left is not None:
                        if proxy.stalls_left > 0:
                            proxy.stalls_left -= 1
                        else:
                            stall = 0
                    hold = (self.command == "GET" and proxy.hold_on is not None
                            and proxy.hold_on in self.path)
                    reset = (proxy.reset_after_on is not None and proxy.resets_left > 0
                             and proxy.reset_after_on in self.path)
                    if reset:
                        proxy.resets_left -= 1
                    status, code = proxy.fail_status, proxy.fail_code
                if stall and _hangs_up_within(self.connection, stall):
                    with proxy.lock:
                        proxy.abandoned += 1
                    self.close_connection = True
                    return
                if hold:
                    with proxy.changed:
                        proxy.held += 1
                        proxy.changed.notify_all()
                    proxy.released.wait(60)
                    with proxy.changed:
                        proxy.held -= 1
                        proxy.changed.notify_all()
                if failing:
                    with proxy.lock:
                        proxy.served["503"] += 1
                        # Before the answer is sent: the client cannot start waiting earlier.
                        proxy.timeline.append((time.monotonic(), "503", self.command, self.path))
                    data = (b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>"
                            + code.encode() + b"</Code><Message>injected fault</Message></Error>")
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                conn = http.client.HTTPConnection(proxy.upstream.hostname, proxy.upstream.port,
                                                  timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() != "host"}
                headers["Host"] = proxy.upstream.netloc
                conn.request(self.command, self.path, body=body, headers=headers)
                resp = conn.getresponse()
                data = resp.read()
                with proxy.lock:
                    proxy.served["forwarded"] += 1
                if reset:
                    # An RST rather than a FIN: the client must not take the request as unsent.
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               struct.pack("ii", 1, 0))
                    self.close_connection = True
                    conn.close()
                    # Closed here, before the server's shutdown(SHUT_WR) could send a FIN.
                    os.close(self.connection.detach())
                    return
                self.send_response(resp.status)
                for k, v in resp.getheaders():
                    if k.lower() not in ("transfer-encoding", "connection", "content-length"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data)
                conn.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address):
                # A client that gave up on a stalled answer closed the connection first.
                if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
                    super().handle_error(request, client_address)

        self.server = Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait_held(self, count: int = 1, timeout: float = 60) -> None:
        """Waits until at least `count` GETs are held."""
        with self.changed:
            assert self.changed.wait_for(lambda: self.held >= count, timeout), "no GET held"

    def release(self) -> None:
        """Lets the held GETs (and any later ones) through."""
        self.released.set()

    def close(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def moto():
    if not _answers(MOTO):
        pytest.skip(f"moto S3 server not reachable at {MOTO} (run scripts/s3-servers start)")
    client = _client(MOTO, "testing", "testing")
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
def proxy(moto):
    p = FaultProxy(MOTO)
    yield p
    p.close()


@pytest.fixture(scope="module")
def binary():
    from conftest import nczarrfs_binary

    path = nczarrfs_binary()
    if not path.exists():
        pytest.fail(f"{path} not built: run `cargo build --release` first")
    return path


@pytest.fixture
def env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(tmp_path / "home"), AWS_ACCESS_KEY_ID="testing",
               AWS_SECRET_ACCESS_KEY="testing")
    return env


def _dataset(path: Path, rows: int = 40) -> np.ndarray:
    """An NCZarr store by netCDF4-python: `v` (float64, rows x 50, chunks 4 x 50)."""
    import netCDF4

    values = np.arange(rows * 50, dtype="f8").reshape(rows, 50) / 7
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file", "w") as nc:
        nc.createDimension("y", rows)
        nc.createDimension("x", 50)
        v = nc.createVariable("v", "f8", ("y", "x"), chunksizes=(4, 50))
        v[:] = values
    return values


def _uploaded(moto_client, tmp_path, rows: int = 40) -> tuple[str, np.ndarray]:
    local = tmp_path / "ds.file"
    values = _dataset(local, rows)
    prefix = f"faults-{uuid.uuid4().hex}/ds.file"
    _upload(moto_client, local, prefix)
    return prefix, values


def _netcdf_v(path: Path) -> np.ndarray:
    """`v` of a local NCZarr store as netCDF4-python reads it (fill values unmasked)."""
    import netCDF4

    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file") as nc:
        nc["v"].set_auto_mask(False)
        return np.asarray(nc["v"][:])


def _get(binary, env, location, tmp_path) -> np.ndarray:
    out = tmp_path / f"{uuid.uuid4().hex}.npy"
    _ok(_run(binary, env, "get", location, "v", "--npy", "-o", str(out)), "get")
    return np.load(out)


# object_store's first retry waits exactly this long; each later one a random time between it
# and 4 times the previous wait (src/zmap/s3.rs), so no wait is shorter.
INIT_BACKOFF = 0.1


def _waits_before_retries(timeline) -> list[tuple[str, float | None]]:
    """For each 503 of a proxy's timeline: its path, and the time from that answer until the
    same request arrived again (None if it never did)."""
    waits = []
    for i, (answered, event, method, path) in enumerate(timeline):
        if event != "503":
            continue
        again = next((t for t, e, m, p in timeline[i + 1:]
                      if e == "arrived" and (m, p) == (method, path)), None)
        waits.append((path, None if again is None else again - answered))
    return waits


def test_throttling_is_retried_with_backoff(moto, proxy, binary, env, tmp_path):
    prefix, values = _uploaded(moto, tmp_path)
    location = f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    proxy.fail = 3
    got = _get(binary, dict(env, NCZARRFS_S3_RETRIES="5"), location, tmp_path)
    assert np.array_equal(got, values)
    assert proxy.served["503"] == 3
    # Each throttled request (the first ones, asked concurrently) was asked again, after a
    # backoff: on the proxy's clock, never sooner than the first delay after the 503.
    waits = _waits_before_retries(proxy.timeline)
    assert len(waits) == 3, proxy.timeline
    for path, wait in waits:
        assert wait is not None, f"{path} was not retried after its 503"
        assert wait >= INIT_BACKOFF, f"{path} retried {wait:.3f} s after its 503"


def test_a_throttling_burst_is_outlasted(moto, proxy, binary, env, tmp_path):
    """Every request is throttled for 2 s. object_store draws each delay at random up to a
    multiple of the previous one; with delays that double on average, 12 retries last 2 s
    but for about one run in 10,000 (with the multiple 2 they hardly grew: 12 retries were
    over within 2 s in a third of the runs)."""
    prefix, values = _uploaded(moto, tmp_path)
    location = f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    proxy.fail_until = time.monotonic() + 2.0
    got = _get(binary, dict(env, NCZARRFS_S3_RETRIES="12"), location, tmp_path)
    assert np.array_equal(got, values)
    assert proxy.served["503"] >= 1


def test_throttling_without_retries_is_a_clear_error(moto, proxy, binary, env, tmp_path):
    prefix, _ = _uploaded(moto, tmp_path)
    location = f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    proxy.fail = 1000
    res = _run(binary, dict(env, NCZARRFS_S3_RETRIES="0"), "dump", location)
    stderr = res.stderr.decode(errors="replace")
    assert res.returncode != 0
    assert "SlowDown" in stderr and "503" in stderr, stderr
    assert proxy.endpoint in stderr, stderr


def test_stalled_answer_fails_after_the_timeout(moto, proxy, binary, env, tmp_path):
    """A chunk whose answer does not come (the proxy would wait a minute): the request is
    given up after the timeout, which also bounds its retries (object_store's retry_timeout),
    so it is not sent again, and the read fails."""
    prefix, _ = _uploaded(moto, tmp_path)
    location = f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    proxy.stall_on = "/v/3"
    proxy.stall = 60
    res = _run(binary, dict(env, NCZARRFS_S3_TIMEOUT="2", NCZARRFS_S3_RETRIES="1"),
               "get", location, "v", "-o", str(tmp_path / "out.bin"))
    stderr = res.stderr.decode(errors="replace")
    assert res.returncode != 0, "a stalled chunk must fail the read"
    assert "timed out" in stderr.lower() or "timeout" in stderr.lower(), stderr
    # One request for the chunk, given up by the client (it closed the connection) before
    # the proxy's stall ended.
    stalled = [path for _, path in proxy.requests if proxy.stall_on in path]
    assert len(stalled) == 1, stalled
    assert proxy.abandoned == 1


def test_failed_puts_are_never_reported_as_written(moto, proxy, binary, env, tmp_path):
    local = tmp_path / "ds.file"
    _dataset(local)
    proxy.fail_methods = {"PUT", "POST"}
    prefix = f"faults-{uuid.uuid4().hex}/copy.file"
    target = f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    res = _run(binary, dict(env, NCZARRFS_S3_RETRIES="1"), "copy",
               f"file://{local}#mode=nczarr,file", target)
    assert res.returncode != 0, "copy reported success although no PUT was stored"
    assert b"503" in res.stderr or b"SlowDown" in res.stderr, res.stderr
    cdl = tmp_path / "x.cdl"
    cdl.write_text("netcdf x {\ndimensions:\n n = 3 ;\nvariables:\n int v(n) ;\ndata:\n v = 1, 2, 3 ;\n}\n")
    res = _run(binary, dict(env, NCZARRFS_S3_RETRIES="1"), "gen", "-o",
               f"{proxy.endpoint}/{BUCKET}/{prefix}-gen#mode=nczarr,s3", str(cdl))
    assert res.returncode != 0, "gen reported success although no PUT was stored"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class PrivateMoto:
    """A moto server of the test's own, on a free port, to stop and restart."""

    def __init__(self):
        self.port = _free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def start(self):
        exe = VENV_BIN / "moto_server"
        if not exe.exists():
            pytest.skip(f"{exe} missing")
        self.proc = subprocess.Popen([str(exe), "-H", "127.0.0.1", "-p", str(self.port)],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not _answers(self.endpoint):
            assert time.monotonic() < deadline, "private moto did not start"
            time.sleep(0.1)
        client = _client(self.endpoint, "testing", "testing")
        client.create_bucket(Bucket=BUCKET)
        return client

    def stop(self):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None


@pytest.fixture
def private_moto():
    m = PrivateMoto()
    yield m
    m.stop()


def _unmount(mnt: Path):
    with open("/proc/self/mounts") as f:
        if f" {mnt.resolve()} " in f.read():
            subprocess.run(["fusermount3", "-u", "-z", str(mnt)], capture_output=True, check=False)


def _read_at(path: Path, offset: int, size: int) -> bytes:
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.pread(fd, size, offset)
    finally:
        os.close(fd)


def test_server_gone_mid_read_then_back(private_moto, binary, env, tmp_path):
    client = private_moto.start()
    local = tmp_path / "ds.file"
    values = _dataset(local)
    prefix = "gone/ds.file"
    _upload(client, local, prefix)
    location = f"{private_moto.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    env = dict(env, NCZARRFS_S3_TIMEOUT="3", NCZARRFS_S3_RETRIES="2")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    res = subprocess.run([str(binary), "mount", "-o", "cache_size=0,readahead=0,ttl=0",
                          location, str(mnt)], env=env, capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr
    try:
        data = mnt / "v" / "data"
        row = 50 * 8
        assert _read_at(data, 0, 4 * row) == values[:4].tobytes()

        private_moto.stop()
        # The CLI: a clear error naming the server (a command that kept retrying would run
        # into _run's timeout and fail the test).
        res = _run(binary, env, "get", location, "v", "-o", str(tmp_path / "o.bin"))
        assert res.returncode != 0
        assert private_moto.endpoint.encode() in res.stderr, res.stderr
        # The mount: EIO for data the kernel does not hold already (pages it read ahead
        # earlier are served from its page cache, as on any filesystem).
        Path("/proc/sys/vm/drop_caches").write_text("1")
        with pytest.raises(OSError) as info:
            _read_at(data, 8 * row, 4 * row)
        assert info.value.errno == errno.EIO

        # Back (moto keeps nothing in memory across restarts: upload again, same port).
        client = private_moto.start()
        _upload(client, local, prefix)
        assert _read_at(data, 8 * row, 4 * row) == values[8:12].tobytes()
        assert data.read_bytes() == values.tobytes()
    finally:
        _unmount(mnt)


def test_deleted_chunk_under_a_mount_reads_as_fill_after_ttl(moto, binary, env, tmp_path):
    prefix, values = _uploaded(moto, tmp_path, rows=400)
    location = f"{MOTO}/{BUCKET}/{prefix}#mode=nczarr,s3"
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    res = subprocess.run([str(binary), "mount", "-o", "cache_size=0,readahead=0", location,
                          str(mnt)], env=env, capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr
    try:
        data = mnt / "v" / "data"
        row = 50 * 8
        assert _read_at(data, 0, 4 * row) == values[:4].tobytes()
        assert _read_at(data, 360 * row, 4 * row) == values[360:364].tobytes()
        # A Zarr chunk that does not exist holds the array's fill value: what netCDF4-python
        # reads from the local twin with the same chunk deleted. (netcdf-c writes the default
        # double fill rounded to 6 digits in .zarray, 9.96921e+36, and reads that back.)
        moto.delete_object(Bucket=BUCKET, Key=f"{prefix}/v/90.0")
        (tmp_path / "ds.file" / "v" / "90.0").unlink()
        want = _netcdf_v(tmp_path / "ds.file")
        assert not np.array_equal(want[360:364], values[360:364])
        # Chunks and kernel pages read before are dropped at most one TTL (5 s) later.
        time.sleep(6)
        assert _read_at(data, 360 * row, 4 * row) == want[360:364].tobytes()
        assert _read_at(data, 380 * row, 4 * row) == values[380:384].tobytes()
        # The metadata gone: the next metadata check (ttl, 5 s by default) makes the mount
        # answer from what it had; reads of surviving chunks still work.
        moto.delete_object(Bucket=BUCKET, Key=f"{prefix}/v/.zarray")
        assert _read_at(data, 0, 400) == values[0].tobytes()
    finally:
        _unmount(mnt)


def test_a_stalled_server_is_not_asked_again_and_again(moto, proxy, binary, env, tmp_path):
    """A server that accepts requests and never answers: the first stalled request takes it
    as down, and until a probe (one per timeout) is answered, reads fail at once instead of
    each waiting the timeout (the kernel retries a failed readahead page by page)."""
    prefix, values = _uploaded(moto, tmp_path, rows=400)
    location = f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    concurrency = 4
    env = dict(env, NCZARRFS_S3_TIMEOUT="2", NCZARRFS_S3_RETRIES="1",
               NCZARRFS_S3_CONCURRENCY=str(concurrency))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    res = subprocess.run([str(binary), "mount", "-o", "cache_size=0", location, str(mnt)],
                         env=env, capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr
    try:
        data = mnt / "v" / "data"
        assert _read_at(data, 0, 400) == values[0].tobytes()
        Path("/proc/sys/vm/drop_caches").write_text("1")
        proxy.stall_on = "/"
        proxy.stall = 6
        before = len(proxy.requests)
        started = time.monotonic()
        with pytest.raises(OSError) as info:
            data.read_bytes()
        assert info.value.errno == errno.EIO
        elapsed = time.monotonic() - started
        sent = len(proxy.requests) - before
        # The requests in flight when the first one stalled, then one probe per timeout
        # (without the memory of the stall: about 300 requests in 32 s).
        assert sent <= concurrency + 1 + int(elapsed / 2), f"{sent} requests in {elapsed:.1f} s"
        # On the proxy's clock, which a loaded machine cannot make tighter: after the requests
        # in flight when the server stalled, each request is a probe that comes a timeout (2 s,
        # less the clocks' granularity) after the one before.
        arrivals = sorted(t for t, kind, _, _ in proxy.timeline
                          if kind == "arrived" and t >= started)
        for before, probe in zip([arrivals[0], *arrivals[concurrency:]], arrivals[concurrency:]):
            assert probe - before >= 1.95, [round(t - arrivals[0], 2) for t in arrivals]
        proxy.stall_on = None
        time.sleep(2.5)
        assert data.read_bytes() == values.tobytes()
    finally:
        _unmount(mnt)


def test_one_stalled_request_does_not_fail_other_reads(moto, proxy, binary, env, tmp_path):
    """One GET that runs out of time (a slow answer, a dropped connection) is not an outage:
    reads made while it hangs succeed, and so do reads right after it failed, whether other
    requests were answered meanwhile or a check request has to find the server answering."""
    prefix, values = _uploaded(moto, tmp_path)
    location = f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    env = dict(env, NCZARRFS_S3_TIMEOUT="2", NCZARRFS_S3_RETRIES="0")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    # Direct I/O: each read is one request of the kernel's, one GET of one chunk (4 rows).
    res = subprocess.run([str(binary), "mount", "-o", "cache_size=0,readahead=0,direct_io",
                          location, str(mnt)], env=env, capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr
    try:
        data = mnt / "v" / "data"
        chunk = 4 * 50 * 8

        def read_chunk(i: int) -> bytes:
            return _read_at(data, i * chunk, chunk)

        assert read_chunk(0) == values[0:4].tobytes()
        for stalled, others_meanwhile in ((5, True), (7, False)):
            proxy.stall_on = f"/v/{stalled}.0"
            proxy.stall = 8
            proxy.stalls_left = 1
            failure: list[BaseException] = []

            def stalled_read():
                try:
                    read_chunk(stalled)
                except OSError as e:
                    failure.append(e)

            reader = threading.Thread(target=stalled_read)
            before = len(proxy.requests)
            reader.start()
            while not any(proxy.stall_on in path for _, path in proxy.requests[before:]):
                time.sleep(0.01)
            if others_meanwhile:
                for i in (1, 2, 3):
                    assert read_chunk(i) == values[4 * i:4 * i + 4].tobytes()
            reader.join()
            assert failure and failure[0].errno == errno.EIO, "the stalled GET must fail"
            # Right after the stall: the server answers, so reads work.
            for i in range(10):
                assert read_chunk(i) == values[4 * i:4 * i + 4].tobytes(), f"chunk {i}"
    finally:
        _unmount(mnt)


def test_writes_do_not_wait_for_reads_waiting_on_the_server(moto, proxy, binary, env, tmp_path):
    """On a rw mount, a write of values (to a chunk in the cache, or to one it fetches) does
    not wait for other readers' GETs: with the readers' GETs held by the proxy, the writes
    complete, and everything reads and is stored as written once the GETs go on."""
    import netCDF4
    from test_s3_rw import RwMount, _download

    local = tmp_path / "ds.file"
    read_values = np.arange(40 * 500, dtype="f8").reshape(40, 500) / 3
    with netCDF4.Dataset(f"file://{local}#mode=nczarr,file", "w") as nc:
        nc.createDimension("y", 40)
        nc.createDimension("x", 500)
        nc.createVariable("r", "f8", ("y", "x"), chunksizes=(4, 500))[:] = read_values
        nc.createVariable("w", "f8", ("y", "x"), chunksizes=(4, 500))[:] = 1.0
    prefix = f"faults-{uuid.uuid4().hex}/ds.file"
    _upload(moto, local, prefix)
    location = f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    chunk = 4 * 500 * 8
    want = np.ones((40, 500))
    with RwMount(binary, env, location, tmp_path / "mnt", tmp_path / "mount.log",
                 options="rw,cache_size=1M") as m:
        wfd = os.open(m.mnt / "w" / "data", os.O_WRONLY)
        try:
            assert os.pwrite(wfd, np.float64(2).tobytes(), 0) == 8  # chunk 0 is now cached
            want[0, 0] = 2

            proxy.hold_on = "/r/"
            got: list[bytes] = []
            reader = threading.Thread(
                target=lambda: got.append(_read_at(m.mnt / "r" / "data", 0, 4 * chunk)))
            reader.start()
            proxy.wait_held()
            writes_done = threading.Event()

            def writes():
                os.pwrite(wfd, np.float64(3).tobytes(), 8)  # cached chunk 0
                os.pwrite(wfd, np.float64(4).tobytes(), 5 * chunk)  # chunk 5, fetched
                writes_done.set()

            threading.Thread(target=writes, daemon=True).start()
            # Not a time limit on the writes: before the fix they waited for the release.
            completed = writes_done.wait(30)
            still_held = proxy.held
            proxy.release()
            reader.join()
            assert completed and still_held >= 1, "the writes waited for the readers' GETs"
            want[0, 1] = 3
            want[20, 0] = 4
            assert got == [read_values[:16].tobytes()]
            assert (m.mnt / "w" / "data").read_bytes() == want.tobytes()
        finally:
            os.close(wfd)
        assert m.unmount() == 0, (tmp_path / "mount.log").read_text()
    stored = _download(moto, prefix, tmp_path / "stored.file")
    with netCDF4.Dataset(f"file://{stored}#mode=nczarr,file") as nc:
        assert np.array_equal(nc["w"][:], want)
        assert np.array_equal(nc["r"][:], read_values)


def test_a_prefetch_keeps_requesting_while_one_of_its_chunks_is_held(moto, proxy, binary, env,
                                                                     tmp_path):
    """A prefetch window larger than the mount's in-flight budget (32 MiB) gets part of it at
    first; as its chunks arrive and their shares go back, it requests the next ones. With one
    GET of the first part held by the proxy, the chunks after that part are still requested:
    the prefetch does not wait for the slowest chunk of a part before asking for the rest."""
    import netCDF4

    rows, row = 24, 1 << 19  # one chunk per row, 4 MiB of float64 each (stored compressed)
    values = np.repeat(np.arange(rows, dtype="f8"), row).reshape(rows, row)
    local = tmp_path / "ds.file"
    with netCDF4.Dataset(f"file://{local}#mode=nczarr,file", "w") as nc:
        nc.createDimension("y", rows)
        nc.createDimension("x", row)
        nc.createVariable("v", "f8", ("y", "x"), chunksizes=(1, row), zlib=True,
                          complevel=1)[:] = values
    prefix = f"faults-{uuid.uuid4().hex}/ds.file"
    _upload(moto, local, prefix)
    location = f"{proxy.endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    # A 64 MiB window (16 chunks), twice the budget; direct I/O: each read is one request.
    res = subprocess.run([str(binary), "mount", "-o",
                          "cache_size=256M,readahead=64M,direct_io", location, str(mnt)],
                         env=env, capture_output=True, timeout=60)
    assert res.returncode == 0, res.stderr
    try:
        data = mnt / "v" / "data"

        def requested(chunk: int) -> bool:
            return any(method == "GET" and path.endswith(f"/v/{chunk}.0")
                       for method, path in list(proxy.requests))

        proxy.hold_on = "/v/3.0"
        # Three reads in a row confirm a sequential reader: the third one prefetches a window
        # of 16 chunks from the reader's on (rows 1 to 16 to load), 8 within the budget at
        # first, chunk 3 among them.
        fd = os.open(data, os.O_RDONLY)
        try:
            for i in range(3):
                assert os.pread(fd, 8, 8 * i) == values[0, i].tobytes()
        finally:
            os.close(fd)
        proxy.wait_held()
        later = range(9, 13)
        deadline = time.monotonic() + 30
        while not all(requested(c) for c in later) and time.monotonic() < deadline:
            time.sleep(0.05)
        asked = [c for c in later if requested(c)]
        still_held = proxy.held
        proxy.release()
        assert still_held == 1 and asked == list(later), (
            f"chunks {asked} of {list(later)} requested while chunk 3 was held")
        assert data.read_bytes() == values.tobytes()
    finally:
        _unmount(mnt)
