"""Everything that works on a directory works on S3: random twin datasets (netcdf-c) and
zarr-python stores uploaded to the local S3 servers dump, read and mount exactly as from the
directory they were made in; ``gen`` and ``copy`` to S3 and back give identical datasets, which
zarr-python (over s3fs and over obstore) reads as well, sharded ones (``copy --shards``)
included.

The oracles are Debian's ncdump of the HDF5 twin and netCDF4-python (for the twins and what is
copied back), zarr-python (for its stores), and nczarrfs on the local directory, which the other
suites check against those tools: S3 must change nothing. Servers: ``scripts/s3-servers start``.
"""

from __future__ import annotations

import difflib
import itertools
import os
import subprocess
import uuid
from pathlib import Path

import numpy as np
import pytest
import zarr

import twins
from conftest import SEED
from test_s3 import BUCKET, MOTO, S3S, S3S_KEY, S3S_SECRET, _npy, _ok, _run, _upload

REPO = Path(__file__).resolve().parent.parent

TWINS = 4


@pytest.fixture(scope="module")
def binary():
    from conftest import nczarrfs_binary

    path = nczarrfs_binary()
    if not path.exists():
        pytest.fail(f"{path} not built: run `cargo build --release` first")
    return path


@pytest.fixture(scope="module")
def moto():
    from test_s3 import _answers, _client

    if not _answers(MOTO):
        pytest.skip(f"moto S3 server not reachable at {MOTO} (run scripts/s3-servers start)")
    client = _client(MOTO, "testing", "testing")
    client.create_bucket(Bucket=BUCKET)
    return client


@pytest.fixture(scope="module")
def s3s():
    from test_s3 import _answers, _client

    if not _answers(S3S):
        pytest.skip(f"s3s-fs server not reachable at {S3S} (run scripts/s3-servers start)")
    return _client(S3S, S3S_KEY, S3S_SECRET)


@pytest.fixture
def env(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(HOME=str(tmp_path / "home"), AWS_ACCESS_KEY_ID="testing",
               AWS_SECRET_ACCESS_KEY="testing", NCZARRFS_S3_RETRIES="1")
    return env


def _variables(location: str) -> list[str]:
    """Full names of every variable of a local NCZarr store, listed by netCDF4-python."""
    import netCDF4

    with netCDF4.Dataset(location) as nc:
        return [path for path, _ in twins.walk_variables(nc)]


def _tree(root: Path) -> dict[str, bytes]:
    """Every file under a mount point, by relative path."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def unmount(mnt: Path) -> None:
    """Unmounts `mnt` if something is mounted there."""
    with open("/proc/self/mounts") as f:
        if f" {mnt.resolve()} " not in f.read():
            return
    subprocess.run(["fusermount3", "-u", str(mnt)], capture_output=True, check=False)


def _same_mounts(binary, env, local: str, remote: str, tmp_path: Path) -> None:
    mounts = []
    try:
        for i, location in enumerate((local, remote)):
            mnt = tmp_path / f"mnt{i}-{uuid.uuid4().hex[:6]}"
            mnt.mkdir()
            res = subprocess.run([str(binary), "mount", location, str(mnt)], env=env,
                                 capture_output=True, timeout=60, check=False)
            assert res.returncode == 0, res.stderr.decode(errors="replace")
            mounts.append(mnt)
        a, b = (_tree(m) for m in mounts)
        assert sorted(a) == sorted(b)
        for path in a:
            assert a[path] == b[path], f"{path} differs between the directory and S3 mounts"
    finally:
        for mnt in mounts:
            unmount(mnt)


def _dumps_as_ncdump(binary, env, location: str, hpath: str) -> None:
    """`nczarrfs dump location` is Debian's `ncdump` of the HDF5 twin, byte for byte (both
    name the dataset after the last path element without its extension)."""
    expected = subprocess.run(["ncdump", hpath], capture_output=True, check=True).stdout
    got = _ok(_run(binary, env, "dump", location), f"dump {location}")
    if got != expected:
        diff = difflib.unified_diff(expected.decode(errors="replace").splitlines(keepends=True),
                                    got.decode(errors="replace").splitlines(keepends=True),
                                    fromfile=f"ncdump {hpath}", tofile=f"dump {location}")
        pytest.fail("".join(diff), pytrace=False)


def _same_everywhere(binary, env, local, remote, variables, tmp_path, mount=True):
    expected = _ok(_run(binary, env, "dump", local), f"dump {local}")
    got = _ok(_run(binary, env, "dump", remote), f"dump {remote}")
    assert got == expected, f"dump differs:\n--- local\n{expected.decode()}\n--- s3\n{got.decode()}"
    for var in variables:
        a = _npy(binary, env, local, var, tmp_path)
        b = _npy(binary, env, remote, var, tmp_path)
        assert a.dtype == b.dtype and a.shape == b.shape, var
        assert a.tobytes() == b.tobytes(), var
    if mount:
        _same_mounts(binary, env, local, remote, tmp_path)


@pytest.mark.parametrize("index", range(TWINS))
def test_twins_on_s3_read_and_mount_as_from_a_directory(moto, binary, env, tmp_path, index):
    seed = SEED + 1000 + index
    zpath, hpath, _ = twins.write_twins(str(tmp_path), f"tw{index}", seed)
    local = twins.nczarr_url(zpath)
    prefix = f"twins-{uuid.uuid4().hex}/tw{index}.file"
    _upload(moto, Path(zpath), prefix)
    remote = f"{MOTO}/{BUCKET}/{prefix}#mode=nczarr,s3"
    variables = _variables(local)
    _dumps_as_ncdump(binary, env, remote, hpath)
    _same_everywhere(binary, env, local, remote, variables, tmp_path)


@pytest.mark.parametrize("fmt", [2, 3])
def test_zarr_python_stores_on_s3(moto, binary, env, tmp_path, fmt):
    local = tmp_path / "zp.zarr"
    root = zarr.open_group(str(local), mode="w", zarr_format=fmt)
    names = []
    for i, (dtype, compressors) in enumerate([("<f8", "auto"), ("<i2", None), ("|u1", "auto")]):
        name = f"a{i}"
        kw = {"dimension_names": ["r", "c"]} if fmt == 3 else {
            "attributes": {"_ARRAY_DIMENSIONS": ["r", "c"]}}
        arr = root.create_array(name, shape=(37, 11), chunks=(5, 4), dtype=dtype,
                                compressors=compressors, **kw)
        arr[...] = (np.arange(37 * 11).reshape(37, 11) % 200).astype(dtype)
        names.append(name)
    sub = root.create_group("sub")
    sub.attrs["note"] = "nested"
    kw = {"dimension_names": ["k"]} if fmt == 3 else {"attributes": {"_ARRAY_DIMENSIONS": ["k"]}}
    sub.create_array("s", shape=(9,), chunks=(4,), dtype="<f4", **kw)[...] = np.linspace(0, 1, 9)
    names.append("/sub/s")
    zarr.consolidate_metadata(str(local), zarr_format=fmt)
    prefix = f"zp-{uuid.uuid4().hex}/zp.zarr"
    _upload(moto, local, prefix)
    mode = "zarr" if fmt == 2 else "zarr,v3"
    remote = f"{MOTO}/{BUCKET}/{prefix}#mode={mode},s3"
    _same_everywhere(binary, env, f"file://{local}#mode={mode},file", remote, names, tmp_path)
    for name in names:
        expected = zarr.open_array(str(local / name.lstrip("/")), mode="r")[...]
        assert np.array_equal(_npy(binary, env, remote, name, tmp_path), expected), name


def _s3_reader(backend: str, endpoint: str, key: str, secret: str, prefix: str):
    """A read-only zarr-python store on S3 through s3fs (fsspec) or obstore."""
    if backend == "obstore":
        from obstore.store import S3Store

        store = S3Store(BUCKET, prefix=prefix, endpoint=endpoint, access_key_id=key,
                        secret_access_key=secret, region="us-east-1",
                        virtual_hosted_style_request=False, client_options={"allow_http": True})
        return zarr.storage.ObjectStore(store, read_only=True)
    return zarr.storage.FsspecStore.from_url(
        f"s3://{BUCKET}/{prefix}", read_only=True,
        storage_options={"key": key, "secret": secret,
                         "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"}})


@pytest.mark.parametrize("server", ["moto", "s3s"])
def test_gen_and_copy_through_s3_round_trip(request, binary, env, tmp_path, server):
    client = request.getfixturevalue(server)
    endpoint, key, secret = (MOTO, "testing", "testing") if server == "moto" else (
        S3S, S3S_KEY, S3S_SECRET)
    env = dict(env, AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret)
    # The zarr-python comparison at the end needs a numeric variable in the root group.
    seed = next(s for s in itertools.count(SEED + 2000)
                if any(v.kind in twins.NUMERIC_TYPES for v in twins.plan(s).vars))
    zpath, hpath, _ = twins.write_twins(str(tmp_path), "src", seed)
    local = twins.nczarr_url(zpath)
    variables = _variables(local)
    base = f"{endpoint}/{BUCKET}/rt-{uuid.uuid4().hex}"

    # copy directory → S3 → directory: identical dumps and values.
    on_s3 = f"{base}/src.file#mode=nczarr,s3"
    _ok(_run(binary, env, "copy", local, on_s3), "copy to S3")
    back = tmp_path / "back" / "src.file"
    back.parent.mkdir()
    _ok(_run(binary, env, "copy", on_s3, f"file://{back}#mode=nczarr,file"), "copy from S3")
    _dumps_as_ncdump(binary, env, on_s3, hpath)
    _same_everywhere(binary, env, local, on_s3, variables, tmp_path, mount=False)
    _same_everywhere(binary, env, local, f"file://{back}#mode=nczarr,file", variables, tmp_path,
                     mount=False)
    # netcdf-c reads what we wrote to S3 once it is copied home, as it reads the HDF5 twin.
    import netCDF4

    with netCDF4.Dataset(f"file://{back}#mode=nczarr,file") as nc:
        assert [p for p, _ in twins.walk_variables(nc)] == variables
    assert twins.verify_twins(str(back), hpath) == []

    # gen from the dump's CDL straight to S3, pure Zarr and consolidated: dump equals the
    # local gen's, and zarr-python reads the values.
    cdl = tmp_path / "src.cdl"
    cdl.write_bytes(_ok(_run(binary, env, "dump", local), "dump"))
    gen_local = tmp_path / "gen" / "src.file"
    gen_local.parent.mkdir()
    _ok(_run(binary, env, "gen", "-k", "nczarr,consolidated", "-o",
             f"file://{gen_local}#mode=nczarr,file", str(cdl)), "gen local")
    gen_s3 = f"{base}/gen/src.file#mode=nczarr,s3"
    _ok(_run(binary, env, "gen", "-k", "nczarr,consolidated", "-o", gen_s3, str(cdl)), "gen S3")
    _same_everywhere(binary, env, f"file://{gen_local}#mode=nczarr,file", gen_s3, variables,
                     tmp_path, mount=False)
    _dumps_as_ncdump(binary, env, gen_s3, hpath)
    keys = {o["Key"] for o in client.list_objects_v2(
        Bucket=BUCKET, Prefix=base.split(f"/{BUCKET}/", 1)[1] + "/gen/")["Contents"]}
    assert any(k.endswith("/.zmetadata") for k in keys), keys

    # zarr-python reads the pure-Zarr dialect: NCZarr keeps netcdf-c's plain-text fill_value for
    # strings and chars (netcdf-c reads it as text), which zarr-python would take as base64.
    zarr_s3 = f"{base}/gen/src.zarr#mode=zarr,s3"
    _ok(_run(binary, env, "gen", "-k", "zarr,consolidated", "-o", zarr_s3, str(cdl)), "gen zarr S3")
    prefix = base.split(f"/{BUCKET}/", 1)[1] + "/gen/src.zarr"
    ours = {var: _npy(binary, env, zarr_s3, var, tmp_path) for var in variables
            if "/" not in var.strip("/")}  # subgroups: zarr-python paths, checked via the root
    for backend in ("s3fs", "obstore"):
        group = zarr.open_group(_s3_reader(backend, endpoint, key, secret, prefix), mode="r",
                                zarr_format=2)
        compared = 0
        for var, values in ours.items():
            if values.dtype.kind in "SU" or values.dtype == object:
                continue  # netCDF strings and chars are stored as |S<n>; the model differs
            theirs = group[var.strip("/")][...]
            if values.ndim == 0:
                theirs = theirs.reshape(())  # NCZarr stores a scalar as shape [1]
            assert np.array_equal(values, theirs, equal_nan=values.dtype.kind == "f"), (
                backend, var)
            compared += 1
        assert compared, f"no numeric variable read through {backend}"


@pytest.mark.parametrize("server", ["moto", "s3s"])
def test_sharded_copy_to_s3_reads_in_zarr_python(request, binary, env, tmp_path, server):
    """`copy --shards` to a bucket: one object per shard, which zarr-python (over s3fs and
    over obstore) reads with the shapes asked for and the values netCDF4-python wrote."""
    import netCDF4

    client = request.getfixturevalue(server)
    endpoint, key, secret = (MOTO, "testing", "testing") if server == "moto" else (
        S3S, S3S_KEY, S3S_SECRET)
    env = dict(env, AWS_ACCESS_KEY_ID=key, AWS_SECRET_ACCESS_KEY=secret)
    src = tmp_path / "src.file"
    values = np.arange(10 * 12, dtype="f8").reshape(10, 12) / 7
    with netCDF4.Dataset(f"file://{src}#mode=nczarr,file", "w") as nc:
        nc.createDimension("y", 10)
        nc.createDimension("x", 12)
        v = nc.createVariable("v", "f8", ("y", "x"), chunksizes=(2, 3), zlib=True)
        v[:] = values
    prefix = f"sh-{uuid.uuid4().hex}/out.zarr"
    remote = f"{endpoint}/{BUCKET}/{prefix}#mode=zarr,v3,s3"
    _ok(_run(binary, env, "copy", f"file://{src}#mode=nczarr,file", remote, "-k", "zarr,v3",
             "--shards", "v:4,6"), "copy --shards to S3")
    keys = {o["Key"] for o in client.list_objects_v2(Bucket=BUCKET, Prefix=prefix)["Contents"]}
    # ceil(10/4) x ceil(12/6) shards, one object each.
    assert len([k for k in keys if k.startswith(f"{prefix}/v/c/")]) == 3 * 2, sorted(keys)
    assert np.array_equal(_npy(binary, env, remote, "v", tmp_path), values)
    for backend in ("s3fs", "obstore"):
        group = zarr.open_group(_s3_reader(backend, endpoint, key, secret, prefix), mode="r",
                                zarr_format=3)
        arr = group["v"]
        assert (arr.shards, arr.chunks) == ((4, 6), (2, 3)), backend
        assert np.array_equal(arr[...], values), backend


def test_s3_destinations_must_be_empty_and_failures_leave_nothing(moto, binary, env, tmp_path):
    """On S3, `gen` and `copy` write only under an empty prefix: a dataset there is not
    replaced, other objects are not mixed with, and a copy that fails half-way deletes what
    it wrote (a half-written dataset would otherwise look whole, and block the retry)."""
    cdl = tmp_path / "a.cdl"
    cdl.write_text("netcdf a {\ndimensions:\n x = 6 ;\nvariables:\n int v(x) ;\n"
                   "  v:_ChunkSizes = 2 ;\n int w(x) ;\n  w:_ChunkSizes = 2 ;\n"
                   "data:\n v = 1, 2, 3, 4, 5, 6 ;\n w = 6, 5, 4, 3, 2, 1 ;\n}\n")
    base = f"rt-{uuid.uuid4().hex}"

    def listing(prefix: str) -> list[str]:
        found = moto.list_objects_v2(Bucket=BUCKET, Prefix=f"{prefix}/")
        return sorted(o["Key"] for o in found.get("Contents", []))

    def url(prefix: str) -> str:
        return f"{MOTO}/{BUCKET}/{prefix}#mode=nczarr,s3"

    # Unrelated objects: refused, untouched.
    moto.put_object(Bucket=BUCKET, Key=f"{base}/other/v/0", Body=b"not a chunk")
    res = _run(binary, env, "gen", "-o", url(f"{base}/other"), str(cdl))
    assert res.returncode != 0 and b"holds other objects" in res.stderr, res.stderr
    assert listing(f"{base}/other") == [f"{base}/other/v/0"]

    # An existing dataset: refused, untouched.
    _ok(_run(binary, env, "gen", "-o", url(f"{base}/ds"), str(cdl)), "gen to S3")
    before = listing(f"{base}/ds")
    res = _run(binary, env, "gen", "-o", url(f"{base}/ds"), str(cdl))
    assert res.returncode != 0 and b"already holds a dataset" in res.stderr, res.stderr
    assert listing(f"{base}/ds") == before

    # A copy that fails on a corrupt source chunk leaves an empty prefix: the retry works.
    src = tmp_path / "src.file"
    _ok(_run(binary, env, "gen", "-o", str(src), str(cdl)), "gen locally")
    (src / "w" / "1").write_bytes(b"short")
    res = _run(binary, env, "copy", str(src), url(f"{base}/copy"))
    assert res.returncode != 0, res.stderr
    assert listing(f"{base}/copy") == []
    (src / "w" / "1").write_bytes(np.array([4, 3], "<i4").tobytes())
    _ok(_run(binary, env, "copy", str(src), url(f"{base}/copy")), "copy retried")
    got = _npy(binary, env, url(f"{base}/copy"), "w", tmp_path)
    assert got.tolist() == [6, 5, 4, 3, 2, 1]
