"""Damaged metadata under a real mount: each variant of a dataset has one JSON value of one
metadata object replaced by a hostile one (a size that overflows, a negative or
non-finite number, another type, an unknown codec or dtype, a path). The mount either
refuses the dataset with a message and a non-zero exit, mounting nothing, or mounts it and
then answers every `stat`, `readdir` and `read` of the whole tree (errors such as EIO are
answers) and keeps serving: the generated files (@header.cdl, @metadata.json, attribute files)
and the `data` files of whatever the reader accepted. The variants are fixed by a seed, so a
failure names one that can be reproduced; HOSTILE_SEED and HOSTILE_VARIANTS draw others (900
variants of three seeds: about half refused, all answered).

The datasets cover the dialects the reader accepts, each written by its own tool: NCZarr by
netCDF4-python, Zarr v2 by zarr-python (with `_ARRAY_DIMENSIONS`) and by xarray (consolidated),
Zarr v3 by zarr-python (sharded, with `dimension_names`), and netcdf-c's stores in the old
NCZarr layouts (`ref_oldformat`, `ref_oldkeys`)."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import zipfile
from pathlib import Path

import numpy as np
import pytest

from conftest import daemon_pids, is_mounted, unmount
from datasets import nczarr_dataset, zarr_python_dataset

# netcdf-c's fixtures, beside the checkout unless NCZARRFS_SHARED says where (as in interop/).
SHARED = os.environ.get("NCZARRFS_SHARED") or Path(__file__).resolve().parents[2] / "shared"
FIXTURES = Path(SHARED) / "fixtures" / "nczarr_test"

VARIANTS = int(os.environ.get("HOSTILE_VARIANTS", "48"))
SEED = int(os.environ.get("HOSTILE_SEED", "20261126"))

HOSTILE = [
    -1, 0, 2**64, 2**64 - 1, 2**63, 2**32, 1e308, float("inf"), float("nan"), 2.5,
    None, True, [], {}, [[]], "", "x", "/", "..", "/nonexistent/dim", "<f8", "|S0", "|O",
    [2**64 - 1], [-1], [2**32, 2**32, 2**32], {"id": "no-such-codec"},
    {"id": "zlib", "level": 99}, [{"id": "shuffle", "elementsize": 0}], "caf\u00e9", "\ud800",
]


def _xarray_dataset(path: Path) -> None:
    import xarray as xr

    ds = xr.Dataset(
        {"t": (("time", "lat"), np.arange(12, dtype="f4").reshape(3, 4), {"units": "K"}),
         "lat": ("lat", np.linspace(-45, 45, 4), {"standard_name": "latitude"})},
        attrs={"title": "xarray"},
    )
    ds.to_zarr(path, zarr_format=2, consolidated=True, mode="w")


def _zarr_v3_dataset(path: Path) -> None:
    import zarr

    root = zarr.open_group(str(path), mode="w", zarr_format=3)
    root.attrs["title"] = "v3"
    a = root.create_array("a", shape=(8, 6), chunks=(2, 3), shards=(4, 6), dtype="<i4",
                          fill_value=-1, dimension_names=["r", "c"])
    a[:] = np.arange(48, dtype="<i4").reshape(8, 6)
    g = root.create_group("g")
    b = g.create_array("b", shape=(5,), chunks=(5,), dtype="<f8", fill_value=0.0,
                       dimension_names=["n"])
    b[:] = np.linspace(0, 1, 5)
    b.attrs["units"] = "m"


def _from_fixture_zip(name: str):
    def extract(path: Path) -> None:
        with zipfile.ZipFile(FIXTURES / name) as z:
            (top,) = {n.split("/")[0] for n in z.namelist()}
            z.extractall(path.parent / "unzipped")
        (path.parent / "unzipped" / top).rename(path)
    return extract


BASES = {
    "nczarr": nczarr_dataset,
    "zarr-python-v2": zarr_python_dataset,
    "xarray-consolidated": _xarray_dataset,
    "zarr-python-v3-sharded": _zarr_v3_dataset,
    "nczarr-oldformat": _from_fixture_zip("ref_oldformat.zip"),
    "nczarr-oldkeys": _from_fixture_zip("ref_oldkeys.file.zip"),
}


def _is_metadata(path: Path) -> bool:
    return path.is_file() and (
        path.name.startswith((".z", ".ncz")) or path.name == "zarr.json")


def _slots(node, path=()):
    """Every place in a JSON document that holds a value, as a path of keys and indices."""
    if path:
        yield path
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _slots(v, (*path, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield from _slots(v, (*path, i))


def _replace(doc, path, value):
    node = doc
    for step in path[:-1]:
        node = node[step]
    node[path[-1]] = value


def _damaged(base: Path, dest: Path, rng: random.Random) -> str:
    """A copy of `base` with one value of one metadata object replaced; what was done."""
    shutil.copytree(base, dest)
    # Objects with no value to replace (an empty `.zattrs`) are left alone.
    documents = {p: json.loads(p.read_text()) for p in dest.rglob("*") if _is_metadata(p)}
    obj = rng.choice(sorted(p for p, d in documents.items() if any(_slots(d))))
    doc = documents[obj]
    path = rng.choice(list(_slots(doc)))
    value = rng.choice(HOSTILE)
    _replace(doc, path, value)
    obj.write_text(json.dumps(doc, allow_nan=True, ensure_ascii=True))
    return f"{obj.relative_to(dest)}: {list(path)} = {value!r}"


def _walk_everything(mnt: Path, what: str) -> tuple[int, list[str]]:
    """stat, readdir and read every entry of the mount; returns how many files were read and
    the operations that failed (an errno is an answer, as long as the daemon logs why)."""
    read = 0
    failed: list[str] = []

    def attempt(op: str, path: str, call):
        try:
            return call()
        except OSError as e:
            failed.append(f"{op} {os.path.relpath(path, mnt)}: {e.strerror}")
            return None

    for root, dirs, files in os.walk(mnt, onerror=lambda e: failed.append(f"readdir: {e}")):
        for name in files:
            path = os.path.join(root, name)
            st = attempt("stat", path, lambda: os.stat(path))
            fd = attempt("open", path, lambda: os.open(path, os.O_RDONLY))
            if st is None or fd is None:
                continue
            try:
                for offset in {0, max(st.st_size - 4096, 0), st.st_size // 2}:
                    attempt("read", path, lambda: os.pread(fd, 1 << 16, offset))
                read += 1
            finally:
                os.close(fd)
    assert daemon_pids(mnt), f"{what}: the daemon died while the tree was read"
    assert os.listdir(mnt), f"{what}: the mount stopped answering"
    return read, failed


@pytest.mark.parametrize("dialect", BASES)
def test_damaged_metadata_is_refused_or_served(binary, tmp_path, dialect):
    base = tmp_path / "base.file"
    BASES[dialect](base)
    rng = random.Random(f"{SEED}-{dialect}")
    refused = served = with_errors = 0
    for i in range(VARIANTS):
        ds = tmp_path / f"v{i}.file"
        what = f"{dialect} variant {i} ({_damaged(base, ds, rng)})"
        mnt = tmp_path / f"mnt{i}"
        mnt.mkdir()
        try:
            log = tmp_path / f"v{i}.log"
            r = subprocess.run([str(binary), "mount", "--log-file", str(log), str(ds), str(mnt)],
                               capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                assert not is_mounted(mnt), f"{what}: refused but mounted"
                assert r.stderr.startswith("nczarrfs: ") and len(r.stderr) > 20, \
                    f"{what}: refused without a message: {r.stderr!r}"
                assert "panicked" not in r.stderr, f"{what}: {r.stderr}"
                refused += 1
                continue
            assert is_mounted(mnt), f"{what}: exit 0 but nothing mounted"
            read, failed = _walk_everything(mnt, what)
            assert read > 0, f"{what}: no file could be read"
            unmount(mnt)
            logged = log.read_text() if log.exists() else ""
            assert not failed or logged.strip(), \
                f"{what}: {len(failed)} failed without a log line, first {failed[0]}"
            served += 1
            with_errors += bool(failed)
        finally:
            unmount(mnt)
    # Both outcomes were exercised, or the variants test only one of the two paths.
    print(f"refused {refused}, served {served} ({with_errors} of them with failing reads)")
    assert refused > 0 and served > 0, f"refused {refused}, served {served}"


def test_a_metadata_object_grown_to_gigabytes_fails_the_reload_and_keeps_the_old_view(
        mounter, tmp_path):
    """The dataset's owner makes an attribute object a sparse file of 2 GiB under a mount
    whose address space is capped at 1.5 GB. The reload (forced by SIGHUP) refuses it by its
    length, logs why, and the mount keeps serving the view it had, values and attributes
    (docs/mount.md: a reload that fails keeps the old view)."""
    import resource
    import signal

    import netCDF4

    from conftest import wait_until

    store = tmp_path / "ds.file"
    url = nczarr_dataset(store)
    with netCDF4.Dataset(url) as nc:
        temp = nc["temp"][:].filled()
        long_name = nc["temp"].long_name
    log = tmp_path / "mount.log"
    mnt = mounter.mountpoint()

    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (1500 << 20, 1500 << 20))

    r = mounter.run("mount", "-o", "ttl=600", "--log-file", str(log), str(store), str(mnt),
                    preexec_fn=cap)
    assert r.returncode == 0, r.stderr
    data = mnt / "temp" / "data"
    assert data.read_bytes() == temp.astype("<f4").tobytes()
    size = 2 << 30
    with open(store / "temp" / ".zattrs", "r+b") as f:
        f.truncate(size)
    (pid,) = daemon_pids(mnt)
    os.kill(pid, signal.SIGHUP)
    refused = f'metadata object "temp/.zattrs" is {size} bytes long'
    assert wait_until(lambda: refused in log.read_text(), 30), log.read_text()
    assert "keeping the old" in log.read_text()
    assert daemon_pids(mnt) == [pid], "the daemon died"
    assert data.read_bytes() == temp.astype("<f4").tobytes()
    assert (mnt / "temp" / "@attributes" / "long_name").read_text() == long_name


def _nested_zip(path: Path, depth: int, title: str) -> None:
    """A Zarr v2 zip of `depth` groups `g`, each inside the last (entry names are not bound by
    PATH_MAX), with a root attribute `title`."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr(".zgroup", '{"zarr_format": 2}')
        z.writestr(".zattrs", json.dumps({"title": title}))
        for level in range(1, depth + 1):
            z.writestr("g/" * level + ".zgroup", '{"zarr_format": 2}')


def test_groups_nested_thousands_deep_are_served_and_reloaded(mounter, tmp_path):
    """6000 nested groups overflowed the stack of the mount thread that printed the root's
    @header.cdl, and of the thread that re-read the metadata. The header has one
    `group: g {` line per level, each indented two spaces more (ncdump's layout), and a
    reload forced by SIGHUP sees the replaced archive."""
    import signal

    from conftest import wait_until

    depth = 6000
    archive = tmp_path / "deep.zip"
    _nested_zip(archive, depth, "first")
    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(archive), "ttl=600", log=log)
    with open(mnt / "@header.cdl") as f:
        indents = [len(line) - len(line.lstrip(" ")) for line in f
                   if line.strip() == "group: g {"]
    assert indents == [2 * level for level in range(depth)]
    meta = json.loads((mnt / "@metadata.json").read_text())
    assert meta["groups"] == ["g"] and meta["attributes"]
    (pid,) = daemon_pids(mnt)
    replaced = tmp_path / "replaced.zip"
    _nested_zip(replaced, depth, "second")
    os.replace(replaced, archive)
    os.kill(pid, signal.SIGHUP)
    title = mnt / "@attributes" / "title"
    assert wait_until(lambda: title.read_text() == "second", 120), log.read_text()
    assert daemon_pids(mnt) == [pid], "the daemon died"


def _store_listing(store: Path) -> list[str]:
    """Every file and directory below `store` (`find` walks any depth)."""
    out = subprocess.run(["find", str(store)], capture_output=True, text=True, check=True)
    return sorted(out.stdout.splitlines())


def test_mkdir_too_deep_for_a_directory_store_is_enametoolong_before_any_change(
        mounter, tmp_path):
    """A directory store's object files must have paths shorter than PATH_MAX (4096 bytes,
    the store's own path included). A mkdir whose group could not be stored fails with
    ENAMETOOLONG, as mkdir of too long a path does, with a line in the log, and leaves the
    store as it was; before, it failed with EIO after directories were made."""
    store = tmp_path / "deep.file"
    try:
        _mkdir_too_deep(mounter, tmp_path, store)
    finally:
        # pytest's own clean-up of old temporary directories recurses and cannot remove a
        # tree this deep (RecursionError at the end of a later session); rm can.
        subprocess.run(["rm", "-rf", str(store)], check=True)


def _mkdir_too_deep(mounter, tmp_path: Path, store: Path) -> None:
    import errno

    # Deep enough that a group of a 200-byte name one level further down cannot be
    # stored (its temporary file's path passes 4096 bytes), while the groups made fit.
    depth = (4096 - len(str(store)) - 150) // 2
    cdl = tmp_path / "deep.cdl"
    cdl.write_text("netcdf deep {\n" + "group: g {\n" * depth + "}\n" * depth + "}\n")
    r = mounter.run("gen", "-o", str(store), str(cdl))
    assert r.returncode == 0, r.stderr
    before = _store_listing(store)
    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(store), "rw", log=log)
    # The mount's own path is too long to name from the root: walk down descriptor by
    # descriptor, as `find` does.
    fd = os.open(mnt, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            down = os.open("g", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = down
        with pytest.raises(OSError) as refused:
            os.mkdir("n" * 200, dir_fd=fd)
        assert refused.value.errno == errno.ENAMETOOLONG, refused.value
        # A short name at the same depth still fits.
        os.mkdir("s", dir_fd=fd)
    finally:
        os.close(fd)
    unmount(mnt)
    text = log.read_text()
    assert "mkdir" in text and "ENAMETOOLONG" in text and "PATH_MAX" in text, text
    after = _store_listing(store)
    assert set(before) <= set(after)
    made = [p for p in after if p not in before]
    # Only the short group's objects were added, and nothing of the refused one.
    assert made and all(("/g" * depth + "/s") in p for p in made), made
    assert not any("nnnn" in p for p in after)
