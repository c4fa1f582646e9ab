"""Damaged metadata under a real mount: each variant of a netCDF4-python dataset has one JSON
value of one metadata object replaced by a hostile one (a size that overflows, a negative or
non-finite number, another type, an unknown codec or dtype, a path). The mount either
refuses the dataset with a message and a non-zero exit, mounting nothing, or mounts it and
then answers every `stat`, `readdir` and `read` of the whole tree (errors such as EIO are
answers) and keeps serving: the generated files (@header.cdl, @metadata.json, attribute files)
and the `data` files of whatever the reader accepted. The variants are fixed by a seed, so a
failure names one that can be reproduced; HOSTILE_SEED and HOSTILE_VARIANTS draw others (900
variants of three seeds: about half refused, all answered)."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
from pathlib import Path

from conftest import daemon_pids, is_mounted, unmount
from datasets import nczarr_dataset

VARIANTS = int(os.environ.get("HOSTILE_VARIANTS", "48"))
SEED = int(os.environ.get("HOSTILE_SEED", "20261126"))

HOSTILE = [
    -1, 0, 2**64, 2**64 - 1, 2**63, 2**32, 1e308, float("inf"), float("nan"), 2.5,
    None, True, [], {}, [[]], "", "x", "/", "..", "/nonexistent/dim", "<f8", "|S0", "|O",
    [2**64 - 1], [-1], [2**32, 2**32, 2**32], {"id": "no-such-codec"},
    {"id": "zlib", "level": 99}, [{"id": "shuffle", "elementsize": 0}], "caf\u00e9", "\ud800",
]


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
    objects = sorted(p for p in dest.rglob(".z*") if p.is_file())
    obj = rng.choice(objects)
    doc = json.loads(obj.read_text())
    slots = list(_slots(doc))
    path = rng.choice(slots)
    value = rng.choice(HOSTILE)
    _replace(doc, path, value)
    obj.write_text(json.dumps(doc, allow_nan=True, ensure_ascii=True))
    return f"{obj.relative_to(dest)}: {list(path)} = {value!r}"


def _walk_everything(mnt: Path, what: str) -> int:
    """stat, readdir and read every entry of the mount; returns how many files were read."""
    read = 0
    for root, dirs, files in os.walk(mnt, onerror=lambda e: None):
        for name in files:
            path = os.path.join(root, name)
            try:
                size = os.stat(path).st_size
                fd = os.open(path, os.O_RDONLY)
            except OSError:
                continue
            try:
                for offset in {0, max(size - 4096, 0), size // 2}:
                    try:
                        os.pread(fd, 1 << 16, offset)
                    except OSError:
                        pass
                read += 1
            finally:
                os.close(fd)
    assert daemon_pids(mnt), f"{what}: the daemon died while the tree was read"
    assert os.listdir(mnt), f"{what}: the mount stopped answering"
    return read


def test_damaged_metadata_is_refused_or_served(binary, tmp_path):
    base = tmp_path / "base.file"
    nczarr_dataset(base)
    rng = random.Random(SEED)
    refused = served = 0
    for i in range(VARIANTS):
        ds = tmp_path / f"v{i}.file"
        what = f"variant {i} ({_damaged(base, ds, rng)})"
        mnt = tmp_path / f"mnt{i}"
        mnt.mkdir()
        try:
            r = subprocess.run([str(binary), "mount", str(ds), str(mnt)], capture_output=True,
                               text=True, timeout=60)
            if r.returncode != 0:
                assert not is_mounted(mnt), f"{what}: refused but mounted"
                assert r.stderr.startswith("nczarrfs: ") and len(r.stderr) > 20, \
                    f"{what}: refused without a message: {r.stderr!r}"
                assert "panicked" not in r.stderr, f"{what}: {r.stderr}"
                refused += 1
                continue
            assert is_mounted(mnt), f"{what}: exit 0 but nothing mounted"
            assert _walk_everything(mnt, what) > 0, f"{what}: no file could be read"
            served += 1
        finally:
            unmount(mnt)
    # Both outcomes were exercised, or the variants test only one of the two paths.
    print(f"refused {refused}, served {served}")
    assert refused > 0 and served > 0, f"refused {refused}, served {served}"
