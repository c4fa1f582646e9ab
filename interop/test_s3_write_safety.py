"""Writing to S3 safely: `gen` and `copy` write straight under the destination prefix (an
object store has no rename), so two runs must never write into one prefix, a run must never
delete what it did not write, a destination inside another dataset is refused as a
directory inside one is, and a catchable signal deletes what the run wrote. A `put` or a
`rw` mount's `mv` or `mkdir` that fails half-way must leave nothing that shows later.

The expected values come from first principles (a dataset reported written reads back as
its source; a refused or withdrawn run leaves the objects as they were), read back by
netCDF4-python from a download of the objects.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
import uuid
from pathlib import Path

import netCDF4
import numpy as np
import pytest

from test_s3 import BUCKET, MOTO, _client, _ok, _run
from test_s3_faults import binary, env, moto, proxy  # noqa: F401 (fixtures)
from test_s3_rw import RwMount, _download, _env, _server

MARKER = ".nczarrfs-writing"


def _listing(client, prefix: str) -> list[str]:
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET, Prefix=prefix + "/")
    return sorted(o["Key"][len(prefix) + 1:] for page in pages for o in page.get("Contents", []))


def _local(path: Path, name: str, rows: int, offset: float = 0.0) -> np.ndarray:
    """An NCZarr store by netCDF4-python: `name` (float64, rows x 50, chunks 4 x 50)."""
    values = np.arange(rows * 50, dtype="f8").reshape(rows, 50) + offset
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file", "w") as nc:
        nc.createDimension("y", rows)
        nc.createDimension("x", 50)
        nc.createVariable(name, "f8", ("y", "x"), chunksizes=(4, 50))[:] = values
    return values


def _read(client, prefix: str, name: str, tmp_path: Path) -> np.ndarray:
    local = _download(client, prefix, tmp_path / f"dl-{uuid.uuid4().hex}")
    with netCDF4.Dataset(f"file://{local}#mode=nczarr,file") as nc:
        return np.asarray(nc[name][:])


def _url(endpoint: str, prefix: str) -> str:
    return f"{endpoint}/{BUCKET}/{prefix}#mode=nczarr,s3"


@pytest.mark.parametrize("attempt", range(3))
def test_concurrent_copies_to_one_prefix(moto, binary, env, tmp_path, attempt):  # noqa: F811
    """Two copies of different datasets into one empty prefix, started together: one claims
    the prefix and its dataset is stored whole; the other is refused, naming the other
    writer, and deletes nothing (its clean-up used to delete the whole prefix, the winner's
    dataset included)."""
    a_values = _local(tmp_path / "a.file", "v", 40)
    b_values = _local(tmp_path / "b.file", "w", 40, offset=0.5)
    prefix = f"claim-{uuid.uuid4().hex}/ds.file"
    runs = {
        name: subprocess.Popen([str(binary), "copy", str(tmp_path / f"{name}.file"),
                                _url(MOTO, prefix)], env=env, stderr=subprocess.PIPE)
        for name in ("a", "b")
    }
    ended = {name: (p.wait(timeout=120), p.stderr.read().decode()) for name, p in runs.items()}
    winners = [name for name, (code, _) in ended.items() if code == 0]
    assert len(winners) == 1, ended
    loser = "b" if winners == ["a"] else "a"
    assert "being written by another gen or copy" in ended[loser][1], ended[loser][1]
    name, want = {"a": ("v", a_values), "b": ("w", b_values)}[winners[0]]
    assert MARKER not in _listing(moto, prefix)
    assert np.array_equal(_read(moto, prefix, name, tmp_path), want)


def test_a_claimed_prefix_is_refused_and_left_alone(moto, binary, env, tmp_path):  # noqa: F811
    """The marker of a run that was killed (SIGKILL) or still runs: refused, not deleted."""
    _local(tmp_path / "a.file", "v", 8)
    prefix = f"claim-{uuid.uuid4().hex}/ds.file"
    moto.put_object(Bucket=BUCKET, Key=f"{prefix}/{MARKER}", Body=b'{"pid": 1}')
    res = _run(binary, env, "copy", str(tmp_path / "a.file"), _url(MOTO, prefix))
    assert res.returncode != 0
    assert b"being written by another gen or copy" in res.stderr, res.stderr
    assert _listing(moto, prefix) == [MARKER]


@pytest.mark.parametrize("server", ["moto", "s3s"])
def test_destinations_inside_a_dataset_are_refused(server, binary, tmp_path):  # noqa: F811
    """As for a directory: a prefix under a dataset's root, a group's or an array's (where
    a later growth of the array deletes it as a stale chunk) is refused, and so is a copy
    into its own source; the outer dataset's objects stay as they were."""
    endpoint, key, secret, client = _server(server)
    env = _env(tmp_path, key, secret)
    cdl = tmp_path / "a.cdl"
    cdl.write_text("netcdf a {\ndimensions:\n t = UNLIMITED ;\n x = 4 ;\nvariables:\n"
                   " float v(t, x) ;\n  v:_ChunkSizes = 1, 4 ;\ndata:\n"
                   " v = 1, 2, 3, 4, 5, 6, 7, 8 ;\n}\n")
    outer = f"nest-{uuid.uuid4().hex}/outer.file"
    _ok(_run(binary, env, "gen", "-o", _url(endpoint, outer), str(cdl)), "gen outer")
    before = _listing(client, outer)
    for inner in ("sub", "v/2.0", "v/deeper/still"):
        res = _run(binary, env, "gen", "-o", _url(endpoint, f"{outer}/{inner}"), str(cdl))
        assert res.returncode != 0, f"gen into {inner} accepted"
        assert b"is inside the Zarr" in res.stderr, res.stderr
    res = _run(binary, env, "copy", _url(endpoint, outer), _url(endpoint, f"{outer}/self"))
    assert res.returncode != 0 and b"is inside the Zarr" in res.stderr, res.stderr
    assert _listing(client, outer) == before
    # Beside it is fine.
    _ok(_run(binary, env, "gen", "-o", _url(endpoint, f"{outer}-sibling"), str(cdl)), "sibling")


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_during_a_copy_deletes_what_it_wrote(proxy, binary, env, tmp_path,  # noqa: F811
                                                      signum):
    """A chunk's PUT is held by the server; the signal comes meanwhile. The run ends by the
    signal after deleting every object it wrote, that PUT's too once it has landed (the
    metadata was already stored, so what stayed used to open as a complete dataset with
    missing values read as fill)."""
    moto_client = _client(MOTO, "testing", "testing")
    _local(tmp_path / "a.file", "v", 40)
    prefix = f"sig-{uuid.uuid4().hex}/ds.file"
    proxy.stall_on = f"{prefix}/v/5.0"
    proxy.stall = 4
    run = subprocess.Popen([str(binary), "copy", str(tmp_path / "a.file"),
                            _url(proxy.endpoint, prefix)], env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not any(path.endswith("/v/5.0") for _, path in list(proxy.requests)):
        assert run.poll() is None, run.stderr.read()
        assert time.monotonic() < deadline, "the held PUT never came"
        time.sleep(0.05)
    assert _listing(moto_client, prefix), "nothing stored before the signal"
    run.send_signal(signum)
    assert run.wait(timeout=60) == -signum, run.stderr.read()
    time.sleep(0.5)
    assert _listing(moto_client, prefix) == []


def test_values_of_a_failed_put_never_resurface(proxy, binary, env, tmp_path):  # noqa: F811
    """A `put` of records 2..11 whose array shape is not stored (its PUT fails) leaves their
    chunks and the group's new length: the records read as fill. A later `put` of record 12
    alone must leave them fill (its metadata gave the array the dimension's length, which
    showed the failed put's values)."""
    cdl = tmp_path / "a.cdl"
    cdl.write_text("netcdf a {\ndimensions:\n t = UNLIMITED ;\n x = 4 ;\nvariables:\n"
                   " float v(t, x) ;\n  v:_ChunkSizes = 1, 4 ;\ndata:\n"
                   " v = 1, 2, 3, 4, 5, 6, 7, 8 ;\n}\n")
    prefix = f"resurface-{uuid.uuid4().hex}/a.file"
    location = _url(proxy.endpoint, prefix)
    _ok(_run(binary, env, "gen", "-o", location, str(cdl)), "gen")
    failing = tmp_path / "rows.bin"
    (np.arange(40, dtype="<f4").reshape(10, 4) + 100).tofile(failing)
    proxy.fail_put_on = f"{prefix}/v/.zarray"
    env = dict(env, NCZARRFS_S3_RETRIES="1")
    res = _run(binary, env, "put", location, "v", "--start", "2,0", "-i", str(failing))
    assert res.returncode != 0, "the put reported success without the array's shape"
    proxy.fail_put_on = None
    row = tmp_path / "row.bin"
    np.full((1, 4), 7, dtype="<f4").tofile(row)
    _ok(_run(binary, env, "put", location, "v", "--start", "12,0", "-i", str(row)), "put")
    local = _download(_client(MOTO, "testing", "testing"), prefix, tmp_path / "dl")
    with netCDF4.Dataset(f"file://{local}#mode=nczarr,file") as nc:
        v = nc["v"][:]
    assert v.shape == (13, 4)
    assert v[:2].tolist() == [[1, 2, 3, 4], [5, 6, 7, 8]]
    assert np.ma.getmaskarray(v)[2:12].all(), v[2:12]
    assert v[12].tolist() == [7, 7, 7, 7]


CDL_RW = ("netcdf a {\ndimensions:\n t = UNLIMITED ;\n x = 4 ;\nvariables:\n"
          " float v(t, x) ;\n  v:_ChunkSizes = 1, 4 ;\ndata:\n"
          " v = 1, 2, 3, 4, 5, 6, 7, 8 ;\n}\n")


def _mounted_rw(proxy, binary, env, tmp_path, name):  # noqa: F811
    """A new dataset on moto, mounted rw through the proxy; returns (mount, prefix)."""
    cdl = tmp_path / "a.cdl"
    cdl.write_text(CDL_RW)
    prefix = f"rwfault-{name}-{uuid.uuid4().hex}/a.file"
    _ok(_run(binary, env, "gen", "-o", _url(MOTO, prefix), str(cdl)), "gen")
    env = dict(env, NCZARRFS_S3_RETRIES="1", NCZARRFS_S3_TIMEOUT="5")
    mount = RwMount(binary, env, _url(proxy.endpoint, prefix), tmp_path / "mnt",
                    tmp_path / "mount.log")
    return mount, prefix


def _fails_with_eio(op):
    with pytest.raises(OSError) as info:
        op()
    assert info.value.errno == errno.EIO, info.value


def test_a_failed_rename_leaves_no_copies(proxy, binary, env, tmp_path):  # noqa: F811
    """The copy of chunk v2/1.0 fails: `mv v v2` fails with EIO and deletes the copies it
    made, so the retry works (the copies used to stay, and the retry was refused for good
    as storage holding objects not part of the dataset)."""
    moto_client = _client(MOTO, "testing", "testing")
    mount, prefix = _mounted_rw(proxy, binary, env, tmp_path, "mv")
    with mount:
        proxy.fail_put_on = "/v2/1.0"
        _fails_with_eio(lambda: os.rename(mount.mnt / "v", mount.mnt / "v2"))
        proxy.fail_put_on = None
        assert not [k for k in _listing(moto_client, prefix) if k.startswith("v2/")]
        os.rename(mount.mnt / "v", mount.mnt / "v2")
        assert mount.unmount() == 0
    keys = _listing(moto_client, prefix)
    assert not [k for k in keys if k.startswith("v/")], keys
    with netCDF4.Dataset(f"file://{_download(moto_client, prefix, tmp_path / 'dl')}"
                         "#mode=nczarr,file") as nc:
        assert nc["v2"][:].tolist() == [[1, 2, 3, 4], [5, 6, 7, 8]]
        assert "v" not in nc.variables


def test_a_rename_whose_old_objects_stay_succeeds(proxy, binary, env, tmp_path):  # noqa: F811
    """Deleting the old objects fails after the new metadata is stored: the rename has
    happened, and `mv` says so (it used to fail with EIO while the new name was in place)."""
    moto_client = _client(MOTO, "testing", "testing")
    mount, prefix = _mounted_rw(proxy, binary, env, tmp_path, "mvdel")
    with mount:
        proxy.fail_methods = {"POST", "DELETE"}
        os.rename(mount.mnt / "v", mount.mnt / "v2")
        proxy.fail_methods = set()
        assert mount.unmount() == 0
    with netCDF4.Dataset(f"file://{_download(moto_client, prefix, tmp_path / 'dl')}"
                         "#mode=nczarr,file") as nc:
        assert nc["v2"][:].tolist() == [[1, 2, 3, 4], [5, 6, 7, 8]]
        assert "v" not in nc.variables
    assert "objects under" in (tmp_path / "mount.log").read_text()


def test_a_failed_mkdir_leaves_no_group(proxy, binary, env, tmp_path):  # noqa: F811
    """The PUT of newg/.zattrs fails: `mkdir newg` fails with EIO and deletes what it
    stored, so the retry works and no reader sees a group (newg/.zgroup used to stay)."""
    moto_client = _client(MOTO, "testing", "testing")
    mount, prefix = _mounted_rw(proxy, binary, env, tmp_path, "mkdir")
    with mount:
        proxy.fail_put_on = "/newg/.zattrs"
        _fails_with_eio(lambda: os.mkdir(mount.mnt / "newg"))
        proxy.fail_put_on = None
        assert not [k for k in _listing(moto_client, prefix) if k.startswith("newg/")]
        os.mkdir(mount.mnt / "newg")
        assert mount.unmount() == 0
    with netCDF4.Dataset(f"file://{_download(moto_client, prefix, tmp_path / 'dl')}"
                         "#mode=nczarr,file") as nc:
        assert list(nc.groups) == ["newg"]
