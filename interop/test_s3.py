"""Datasets on S3: stores made by netCDF4-python and zarr-python, uploaded object by object to
local S3 servers, read by nczarrfs through S3 URLs.

The oracles are Debian's ncdump and netCDF4-python reading the HDF5 twin of each netCDF-4
store, zarr-python for its stores, and nczarrfs's own reading of the same store from the local
directory: reading through S3 must change nothing. The servers are started by ``scripts/s3-servers start`` (scripts/test does it): moto
(no authentication) and s3s-fs (checks signatures). These tests are skipped only when the
servers do not answer.
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path
from urllib.parse import quote, urlparse

import boto3
import netCDF4
import numpy as np
import pytest
import zarr

import twins

REPO = Path(__file__).resolve().parent.parent


def _server_env() -> dict[str, str]:
    """Endpoints, bucket and test keys: the environment, else what scripts/s3-servers says."""
    out = subprocess.run(
        [str(REPO / "scripts" / "s3-servers"), "env"], capture_output=True, text=True, check=True
    ).stdout
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return {k: os.environ.get(k) or v for k, v in values.items()}


ENV = _server_env()
MOTO = ENV["NCZARRFS_S3_ENDPOINT"]
S3S = ENV["NCZARRFS_S3S_ENDPOINT"]
BUCKET = ENV["NCZARRFS_S3_BUCKET"]
S3S_KEY = ENV["NCZARRFS_S3S_ACCESS_KEY"]
S3S_SECRET = ENV["NCZARRFS_S3S_SECRET_KEY"]
S3S_BIN = Path(ENV["NCZARRFS_S3S_BIN"])


def _answers(endpoint: str) -> bool:
    url = urlparse(endpoint)
    try:
        with socket.create_connection((url.hostname, url.port), timeout=2):
            return True
    except OSError:
        return False


def _client(endpoint: str, key: str, secret: str):
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=key,
        aws_secret_access_key=secret,
        region_name="us-east-1",
        config=Config(s3={"addressing_style": "path"}),
    )


@pytest.fixture(scope="module")
def moto():
    if not _answers(MOTO):
        pytest.skip(f"moto S3 server not reachable at {MOTO} (run scripts/s3-servers start)")
    client = _client(MOTO, "testing", "testing")
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture(scope="module")
def s3s():
    if not _answers(S3S):
        pytest.skip(f"s3s-fs server not reachable at {S3S} (run scripts/s3-servers start)")
    client = _client(S3S, S3S_KEY, S3S_SECRET)
    buckets = [b["Name"] for b in client.list_buckets().get("Buckets", [])]
    if BUCKET not in buckets:
        client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture
def clean_env(tmp_path):
    """An environment without the caller's AWS settings (HOME points at an empty directory)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env["HOME"] = str(tmp_path / "home")
    env["NCZARRFS_S3_RETRIES"] = "1"
    return env


@pytest.fixture
def moto_env(clean_env):
    """moto checks no signature but refuses unsigned reads of a private bucket: any keys do."""
    return dict(clean_env, AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")


def _upload(client, root: Path, prefix: str) -> list[str]:
    """Puts every file under root at prefix/<relative path>, keys verbatim."""
    keys = []
    for path in sorted(root.rglob("*")):
        if path.is_file():
            key = f"{prefix}/{path.relative_to(root).as_posix()}"
            client.put_object(Bucket=BUCKET, Key=key, Body=path.read_bytes())
            keys.append(key)
    assert keys, f"nothing to upload under {root}"
    return keys


def _run(nczarrfs_bin: Path, env, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(nczarrfs_bin), *args], capture_output=True, timeout=120, env=env, check=False
    )


@pytest.fixture(scope="module")
def binary():
    from conftest import nczarrfs_binary

    path = nczarrfs_binary()
    if not path.exists():
        pytest.fail(f"{path} not built: run `cargo build --release` first")
    return path


def _ok(res: subprocess.CompletedProcess, what: str) -> bytes:
    assert res.returncode == 0, f"{what}: exit {res.returncode}: {res.stderr.decode(errors='replace')}"
    return res.stdout


def _npy(binary, env, location: str, var: str, tmp_path: Path) -> np.ndarray:
    out = tmp_path / f"{uuid.uuid4().hex}.npy"
    _ok(_run(binary, env, "get", location, var, "--npy", "-o", str(out)), f"get {var} {location}")
    return np.load(io.BytesIO(out.read_bytes()), allow_pickle=False)


def _twin(path: Path) -> Path:
    """Where _make_netcdf4 puts the HDF5 twin of the NCZarr store `path`."""
    return path.with_suffix(".nc")


def _make_netcdf4(path: Path) -> list[str]:
    """An NCZarr store written by netCDF4-python (netcdf-c): groups, attributes, chunks,
    an unlimited dimension and a fill value; and its HDF5 twin at _twin(path), the reference
    for ncdump and netCDF4-python. Returns its variable paths."""
    for target in (f"file://{path}#mode=nczarr,file", str(_twin(path))):
        variables = _write_netcdf4(target)
    return variables


def _write_netcdf4(target: str) -> list[str]:
    ds = netCDF4.Dataset(target, "w", format="NETCDF4")
    ds.title = "on S3"
    ds.createDimension("time", None)
    ds.createDimension("x", 7)
    t = ds.createVariable("time", "f8", ("time",))
    t.units = "days since 2000-01-01"
    t[:] = np.arange(5) * 0.5
    v = ds.createVariable("v", "i4", ("time", "x"), chunksizes=(2, 3), fill_value=-9)
    v[:] = np.arange(35, dtype="i4").reshape(5, 7)
    v[4, 6] = np.ma.masked
    g = ds.createGroup("sub")
    g.createDimension("y", 4)
    w = g.createVariable("w", "f4", ("y",))
    w.long_name = "in a group"
    w[:] = np.array([1.5, -2.25, 3.0, 1e-3], dtype="f4")
    ds.close()
    return ["time", "v", "/sub/w"]


def _make_zarr(path: Path, names: list[str]) -> None:
    """A pure Zarr v2 store by zarr-python with one array per name."""
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    for i, name in enumerate(names):
        arr = root.create_array(
            name, shape=(5, 4), chunks=(2, 3), dtype="<f8",
            attributes={"_ARRAY_DIMENSIONS": ["r", "c"]},
        )
        arr[...] = np.arange(20, dtype="<f8").reshape(5, 4) + i


def _same_everywhere(binary, env, local: str, remote: str, variables, tmp_path,
                     twin: Path | None = None):
    """The remote store dumps and reads as the local one; with `twin` (an HDF5 file of the
    same content), its dump is also `ncdump twin` and its values netCDF4-python's of twin."""
    expected = _ok(_run(binary, env, "dump", local), f"dump {local}")
    got = _ok(_run(binary, env, "dump", remote), f"dump {remote}")
    assert got == expected, f"dump differs:\n--- local\n{expected.decode()}\n--- s3\n{got.decode()}"
    if twin is not None:
        reference = subprocess.run(["ncdump", str(twin)], capture_output=True, check=True).stdout
        assert got == reference, (
            f"dump differs from ncdump:\n--- ncdump\n{reference.decode()}\n--- s3\n{got.decode()}")
    for var in variables:
        a = _npy(binary, env, local, var, tmp_path)
        b = _npy(binary, env, remote, var, tmp_path)
        assert a.dtype == b.dtype and a.shape == b.shape, var
        assert np.array_equal(a, b, equal_nan=a.dtype.kind == "f"), var
        if twin is not None:
            with netCDF4.Dataset(str(twin)) as nc:
                want = twins.read_values(nc["/" + var.lstrip("/")])
            assert twins.same_values(b, want), f"{var}: {b!r} != netCDF4-python's {want!r}"


def test_netcdf4_store_on_moto(moto, binary, moto_env, tmp_path):
    local = tmp_path / "ds.file"
    variables = _make_netcdf4(local)
    prefix = f"py-{uuid.uuid4().hex}/ds.file"
    _upload(moto, local, prefix)
    remote = f"{MOTO}/{BUCKET}/{prefix}#mode=nczarr,s3"
    _same_everywhere(binary, moto_env, f"file://{local}#mode=nczarr,file", remote, variables,
                     tmp_path, _twin(local))


def test_zarr_store_with_awkward_keys_on_moto(moto, binary, moto_env, tmp_path):
    names = ["a b", "x[1]", "p%41", "h#1", "plain"]
    local = tmp_path / "store.zarr"
    _make_zarr(local, names)
    # A space in the prefix too, percent-encoded in the URL as any URL client would.
    prefix = f"py-{uuid.uuid4().hex}/my data/store.zarr"
    keys = _upload(moto, local, prefix)
    assert any("x[1]/" in k for k in keys) and any("p%41/" in k for k in keys)
    remote = f"{MOTO}/{BUCKET}/{quote(prefix)}#mode=zarr,s3"
    _same_everywhere(
        binary, moto_env, f"file://{local}#mode=zarr,file", remote, names, tmp_path
    )
    for name in names:
        expected = zarr.open_array(str(local / name), mode="r")[...]
        assert np.array_equal(_npy(binary, moto_env, remote, name, tmp_path), expected), name


def test_signed_access_with_environment_keys(s3s, binary, clean_env, tmp_path):
    local = tmp_path / "ds.file"
    variables = _make_netcdf4(local)
    prefix = f"py-{uuid.uuid4().hex}/ds.file"
    _upload(s3s, local, prefix)
    env = dict(clean_env, AWS_ACCESS_KEY_ID=S3S_KEY, AWS_SECRET_ACCESS_KEY=S3S_SECRET)
    remote = f"{S3S}/{BUCKET}/{prefix}#mode=nczarr,s3"
    _same_everywhere(binary, env, f"file://{local}#mode=nczarr,file", remote, variables, tmp_path,
                     _twin(local))


def test_wrong_secret_is_refused_clearly(s3s, binary, clean_env, tmp_path):
    local = tmp_path / "ds.file"
    _make_netcdf4(local)
    prefix = f"py-{uuid.uuid4().hex}/ds.file"
    _upload(s3s, local, prefix)
    wrong = "Wrong-Secret-" + uuid.uuid4().hex
    env = dict(clean_env, AWS_ACCESS_KEY_ID=S3S_KEY, AWS_SECRET_ACCESS_KEY=wrong)
    res = _run(binary, env, "dump", "-h", f"{S3S}/{BUCKET}/{prefix}#mode=nczarr,s3")
    stderr = res.stderr.decode(errors="replace")
    assert res.returncode != 0
    assert "refused" in stderr and "SignatureDoesNotMatch" in stderr, stderr
    assert wrong not in stderr and wrong not in res.stdout.decode(errors="replace")
    # No credentials at all: unsigned requests, refused as well.
    res = _run(binary, clean_env, "dump", "-h", f"{S3S}/{BUCKET}/{prefix}#mode=nczarr,s3")
    assert res.returncode != 0 and b"refused" in res.stderr, res.stderr


def test_named_profile_with_endpoint(s3s, binary, clean_env, tmp_path):
    local = tmp_path / "ds.file"
    variables = _make_netcdf4(local)
    prefix = f"py-{uuid.uuid4().hex}/ds.file"
    _upload(s3s, local, prefix)
    config = tmp_path / "aws-config"
    credentials = tmp_path / "aws-credentials"
    config.write_text(f"[profile local]\nregion = us-east-1\nendpoint_url = {S3S}\n")
    credentials.write_text(
        f"[local]\naws_access_key_id = {S3S_KEY}\naws_secret_access_key = {S3S_SECRET}\n"
    )
    env = dict(
        clean_env,
        AWS_CONFIG_FILE=str(config),
        AWS_SHARED_CREDENTIALS_FILE=str(credentials),
    )
    remote = f"s3://{BUCKET}/{prefix}#mode=nczarr,s3&aws.profile=local"
    _same_everywhere(binary, env, f"file://{local}#mode=nczarr,file", remote, variables, tmp_path,
                     _twin(local))
    # The same profile chosen by AWS_PROFILE.
    env_profile = dict(env, AWS_PROFILE="local")
    got = _ok(_run(binary, env_profile, "dump", "-h", f"s3://{BUCKET}/{prefix}#mode=nczarr,s3"), "AWS_PROFILE")
    assert got.startswith(b"netcdf ds {")


def test_missing_dataset_on_s3(moto, binary, moto_env):
    res = _run(binary, moto_env, "dump", "-h", f"{MOTO}/{BUCKET}/nothing-{uuid.uuid4().hex}#mode=nczarr,s3")
    assert res.returncode != 0
    assert b"no objects under this prefix" in res.stderr, res.stderr


def _requests_to_open(binary, env, endpoint: str, location_tail: str) -> list[tuple[str, str]]:
    """The requests of `dump -h` through a counting proxy in front of `endpoint`."""
    from test_s3_faults import FaultProxy

    proxy = FaultProxy(endpoint)
    try:
        _ok(_run(binary, env, "dump", "-h", f"{proxy.endpoint}/{location_tail}"), "dump -h")
        return list(proxy.requests)
    finally:
        proxy.close()


@pytest.mark.parametrize("kind", ["nczarr", "zarr"])
def test_open_fetches_each_object_once(moto, binary, moto_env, tmp_path, kind):
    """Opening a dataset without .zmetadata reads every object it needs exactly once, and
    with .zmetadata needs no object but the root's."""
    local = tmp_path / "ds"
    if kind == "nczarr":
        _make_netcdf4(local)
        objects = {".zgroup", ".zattrs", "time/.zarray", "time/.zattrs", "v/.zarray",
                   "v/.zattrs", "sub/.zgroup", "sub/.zattrs", "sub/w/.zarray", "sub/w/.zattrs"}
    else:
        _make_zarr(local, ["a", "b"])
        zarr.open_group(str(local), mode="a", zarr_format=2).create_group("g")
        objects = {".zgroup", ".zattrs", "a/.zarray", "a/.zattrs", "b/.zarray", "b/.zattrs",
                   "g/.zarray", "g/.zgroup", "g/.zattrs"}
    prefix = f"py-{uuid.uuid4().hex}/ds"
    _upload(moto, local, prefix)
    tail = f"{BUCKET}/{prefix}#mode={kind},s3"
    requests = _requests_to_open(binary, moto_env, MOTO, tail)
    gets = [p.split(f"/{prefix}/", 1)[1] for m, p in requests if m == "GET" and f"/{prefix}/" in p]
    assert len(gets) == len(set(gets)), f"fetched more than once: {sorted(gets)}"
    assert [m for m, _ in requests if m not in ("GET",)] == [], requests
    # Objects that may be there (zarr.json, .zmetadata) are asked for once as well.
    assert objects <= set(gets), sorted(objects - set(gets))
    assert set(gets) - objects <= {"zarr.json", ".zmetadata"}, sorted(gets)

    zarr.consolidate_metadata(str(local), zarr_format=2)
    moto.put_object(Bucket=BUCKET, Key=f"{prefix}/.zmetadata",
                    Body=(local / ".zmetadata").read_bytes())
    requests = _requests_to_open(binary, moto_env, MOTO, tail)
    # One round trip: a store may hold both (zarr-python's migration to v3 keeps the v2
    # objects), and v3 wins, as in zarr-python.
    assert sorted(p.split(f"/{prefix}/", 1)[1] for _, p in requests) == [
        ".zmetadata", "zarr.json"], requests
    # With the version named in the fragment, .zmetadata is the only request.
    requests = _requests_to_open(binary, moto_env, MOTO, f"{BUCKET}/{prefix}#mode={kind},v2,s3")
    assert [(m, p.split(f"/{prefix}/", 1)[1]) for m, p in requests] == [
        ("GET", ".zmetadata")], requests


def test_get_of_many_small_chunks_stays_in_bounded_memory(s3s, binary, clean_env, tmp_path):
    """A read on S3 is cut into windows of rows of chunks; each window once kept the capacity
    of every row after it, so memory grew with the square of the chunks read (20,000 chunks of
    one int: 168 MB for 80 KB of values). The values are netCDF4-python's; the bound is far
    above the process's fixed cost and far below the quadratic one."""
    n = 20_000
    local = tmp_path / "small.file"
    with netCDF4.Dataset(f"file://{local}#mode=nczarr,file", "w") as nc:
        nc.createDimension("x", n)
        v = nc.createVariable("v", "i4", ("x",), chunksizes=(1,))
        v[::1000] = np.arange(0, n, 1000, dtype="i4")
    with netCDF4.Dataset(f"file://{local}#mode=nczarr,file") as nc:
        nc.set_auto_mask(False)
        want = np.asarray(nc["v"][:], dtype="<i4")
    prefix = f"py-{uuid.uuid4().hex}/small.file"
    _upload(s3s, local, prefix)
    env = dict(clean_env, AWS_ACCESS_KEY_ID=S3S_KEY, AWS_SECRET_ACCESS_KEY=S3S_SECRET)
    out = tmp_path / "v.bin"
    # A Python of its own runs the get, so that its children's peak is the get's alone.
    script = (
        "import resource, subprocess, sys\n"
        "with open(sys.argv[1], 'wb') as out:\n"
        "    code = subprocess.run(sys.argv[2:], stdout=out).returncode\n"
        "print(code, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    )
    remote = f"{S3S}/{BUCKET}/{prefix}#mode=nczarr,s3"
    done = subprocess.run(
        [sys.executable, "-c", script, str(out), str(binary), "get", remote, "v"],
        capture_output=True, text=True, timeout=300, env=env, check=False,
    )
    code, peak_kib = (int(x) for x in done.stdout.split())
    assert code == 0, done.stderr
    assert np.array_equal(np.fromfile(out, dtype="<i4"), want)
    assert peak_kib < 100 * 1024, f"peak RSS {peak_kib // 1024} MiB for {n} chunks of 4 bytes"
