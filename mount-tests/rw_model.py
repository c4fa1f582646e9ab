"""A model of what a `rw` mount must hold, built from first principles, and random sequences
of what programs do to such a mount, applied to both: writes at random offsets (past the end of
variables on the unlimited dimension too), appends, attribute files written, removed and
renamed, groups made, variables renamed, files held open across it all, fsync and close at
random. Used by the mount tests (directory, zip) and the S3 tests (interop/test_s3_rw.py).

The dataset is the one `datasets.nczarr_dataset` writes, with its variable without fill."""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from datasets import netcdf_values

ATTR_NAMES = ["a1", "a2", "comment2"]
OPERATIONS = {
    "pwrite": 10, "append": 2, "check": 3, "fsync": 1, "close": 2, "attr": 3, "attr-rm": 1,
    "attr-mv": 1, "rename": 1, "mkdir": 1, "remount": 0.3,
}


@dataclass
class Var:
    """What a variable must hold: its values as native-order bytes and its shape."""

    dtype: np.dtype
    shape: list[int]
    unlimited: bool
    fill: bytes
    data: bytearray

    @property
    def record_bytes(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize


@dataclass
class Model:
    vars: dict[str, Var]
    # Attributes this test sets, per owner ("" for the root group): (netCDF type, value).
    attrs: dict[str, dict[str, tuple[str, object]]] = field(default_factory=dict)
    # Groups this test made under the root.
    groups: set[str] = field(default_factory=set)

    def grow_records(self, records: int) -> None:
        """The unlimited dimension grows to `records`: every variable on it reads as fill
        there."""
        for v in self.vars.values():
            if v.unlimited and v.shape[0] < records:
                v.data += v.fill * ((records - v.shape[0]) * v.record_bytes // len(v.fill))
                v.shape[0] = records

    def write(self, name: str, offset: int, payload: bytes) -> None:
        v = self.vars[name]
        end = offset + len(payload)
        if v.unlimited and end > len(v.data):
            self.grow_records(-(-end // v.record_bytes))
        v.data[offset:end] = payload


def initial_model(url: str) -> Model:
    """The model of the dataset at `url`, as netCDF4-python reads it."""
    import netCDF4

    values = netcdf_values(url)
    model = Model(vars={})
    with netCDF4.Dataset(url) as ds:
        for full, arr in values.items():
            var = ds[full]
            dt = arr.dtype.newbyteorder("=")
            if var.get_fill_value() is None:
                # No fill: what was never written reads as zeros, as netcdf-c reads it from
                # NCZarr, whatever a `_FillValue` attribute says.
                fill = 0
            elif "_FillValue" in var.ncattrs():
                fill = var.getncattr("_FillValue")
            else:
                fill = netCDF4.default_fillvals[dt.str[1:]]
            model.vars[full.strip("/")] = Var(
                dtype=dt,
                shape=list(arr.shape),
                unlimited=bool(var.get_dims()) and var.get_dims()[0].isunlimited(),
                fill=np.array(fill, dtype=dt).tobytes(),
                data=bytearray(arr.astype(dt).tobytes()),
            )
    return model


def check_mount(mnt: Path, model: Model, name: str) -> None:
    v = model.vars[name]
    path = mnt / name / "data"
    assert path.stat().st_size == len(v.data), name
    assert path.read_bytes() == bytes(v.data), name


def attr_text(rng: random.Random) -> tuple[str, str | None]:
    """Text written to an attribute file, and the type it gives a new attribute."""
    if rng.random() < 0.5:
        ints = [rng.randint(-1000, 1000) for _ in range(rng.randint(2, 4))]
        return ", ".join(map(str, ints)), "int"
    words = ["alpha", "beta", "gamma", "delta", "x", "y2"]
    return " ".join(rng.choice(words) for _ in range(rng.randint(1, 4))), None


def apply_attr(model: Model, owner: str, name: str, text: str, typed: str | None) -> None:
    """The documented rules: a CDL value list types a new attribute, an existing numeric one
    keeps its type when the values convert; anything else, or an existing char attribute,
    makes a char attribute of the text."""
    attrs = model.attrs.setdefault(owner, {})
    old = attrs.get(name)
    if typed == "int" and (old is None or old[0] == "int"):
        attrs[name] = ("int", [int(t) for t in text.split(",")])
    else:
        attrs[name] = ("char", text)


def run_operations(mnt: Path, model: Model, rng: random.Random, steps: int,
                   remount: Callable[[], Path]) -> Path:
    """Applies `steps` random operations to the mount at `mnt` and to `model`, checking the
    mount against the model on the way and at the end; `remount` unmounts (after every file
    is closed) and mounts again, returning the mount point. Returns the mount point."""
    fds: dict[str, int] = {}
    renamable = ["flags", "big", "counts"]
    owners = ["", "temp", "sub/vals"]

    def fd_of(name: str) -> int:
        if name not in fds:
            fds[name] = os.open(mnt / name / "data", os.O_RDWR)
        return fds[name]

    try:
        for _ in range(steps):
            op = rng.choices(list(OPERATIONS), weights=list(OPERATIONS.values()))[0]
            names = sorted(model.vars)
            if op == "pwrite":
                name = rng.choice(names)
                v = model.vars[name]
                limit = len(v.data) + (2 * v.record_bytes if v.unlimited else 0)
                offset = rng.randrange(limit)
                n = rng.randint(1, rng.choice([16, 96, 3 * max(v.record_bytes, 64)]))
                if not v.unlimited:
                    n = min(n, len(v.data) - offset)
                payload = rng.randbytes(n)
                assert os.pwrite(fd_of(name), payload, offset) == n
                model.write(name, offset, payload)
            elif op == "append":
                name = rng.choice([n for n in names if model.vars[n].unlimited])
                v = model.vars[name]
                payload = rng.randbytes(rng.randint(1, 3 * v.record_bytes))
                fd = os.open(mnt / name / "data", os.O_WRONLY | os.O_APPEND)
                try:
                    assert os.write(fd, payload) == len(payload)
                finally:
                    os.close(fd)
                model.write(name, len(v.data), payload)
            elif op == "check":
                check_mount(mnt, model, rng.choice(names))
            elif op == "fsync" and fds:
                os.fsync(fds[rng.choice(sorted(fds))])
            elif op == "close" and fds:
                os.close(fds.pop(rng.choice(sorted(fds))))
            elif op == "attr":
                owner, name = rng.choice(owners), rng.choice(ATTR_NAMES)
                text, typed = attr_text(rng)
                newline = "\n" if rng.random() < 0.5 else ""
                (mnt / owner / "@attributes" / name).write_text(text + newline)
                apply_attr(model, owner, name, text, typed)
            elif op in ("attr-rm", "attr-mv"):
                owner = rng.choice(owners)
                present = sorted(model.attrs.get(owner, {}))
                if not present:
                    continue
                old = rng.choice(present)
                attrs = mnt / owner / "@attributes"
                if op == "attr-rm":
                    os.unlink(attrs / old)
                    del model.attrs[owner][old]
                else:
                    new = rng.choice(ATTR_NAMES)
                    os.rename(attrs / old, attrs / new)
                    model.attrs[owner][new] = model.attrs[owner].pop(old)
            elif op == "mkdir":
                group = f"g{rng.randrange(1000)}"
                if group in model.groups:
                    continue
                (mnt / group).mkdir()
                model.groups.add(group)
                owners.append(group)
            elif op == "remount":
                for fd in fds.values():
                    os.close(fd)
                fds.clear()
                mnt = remount()
            elif op == "rename":
                old = rng.choice(renamable)
                new = f"{old.rstrip('0123456789_')}_{rng.randrange(100)}"
                if new in model.vars:
                    continue
                if old in fds:
                    os.close(fds.pop(old))
                os.rename(mnt / old, mnt / new)
                model.vars[new] = model.vars.pop(old)
                renamable[renamable.index(old)] = new
        for name in sorted(model.vars):
            check_mount(mnt, model, name)
    finally:
        for fd in fds.values():
            os.close(fd)
    return mnt


def check_netcdf(url: str, model: Model) -> None:
    """netCDF4-python reads exactly the model at `url` (after unmount)."""
    import netCDF4

    got = netcdf_values(url)
    assert sorted(k.strip("/") for k in got) == sorted(model.vars)
    for name, v in model.vars.items():
        arr = got["/" + name]
        assert list(arr.shape) == v.shape, name
        assert arr.astype(v.dtype).tobytes() == bytes(v.data), name
    with netCDF4.Dataset(url) as ds:
        assert set(ds.groups) == {"sub", *model.groups}
        for owner, attrs in model.attrs.items():
            obj = ds[owner] if owner else ds
            for name in ATTR_NAMES:
                if name not in attrs:
                    assert name not in obj.ncattrs(), (owner, name)
                    continue
                kind, value = attrs[name]
                got_value = obj.getncattr(name)
                if kind == "char":
                    assert got_value == value, (owner, name)
                else:
                    assert np.asarray(got_value).dtype == np.int32, (owner, name)
                    assert list(np.atleast_1d(got_value)) == value, (owner, name)
