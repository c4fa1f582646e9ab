"""Whole-variable read throughput: nczarrfs against netcdf-c (netCDF4-python) and zarr-python.

Creates (once, then reuses) NCZarr datasets of about --size-mb each with netCDF4-python:
``plain`` (no compression) and ``zlib`` (zlib level 1 + shuffle), chunks of 2 MiB. Every reader
reads the whole variable --repeat times after a warm-up, so all rows run from the page cache;
the table shows the best time, throughput, and how many times faster than each reader ours is
(its time divided by ours: 2.00 means twice as fast).

To add a row, append a ``Reader`` to ``READERS``: a name and a function that reads the whole
variable of a dataset and returns a checksum (or None when it cannot check the values).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import netCDF4
import numpy as np
import zarr

REPO = Path(__file__).resolve().parent.parent
VAR = "field"
ROWS, COLS = 512, 1024  # one time step: 2 MiB of float32, also the chunk


@dataclass
class Dataset:
    """One benchmark store: its name, NCZarr directory and variable size in bytes."""

    name: str
    path: Path
    nbytes: int

    @property
    def url(self) -> str:
        return f"file://{self.path}#mode=nczarr,file"


@dataclass
class Reader:
    """One row of the table."""

    name: str
    read: Callable[[Dataset], int | None]


def _checksum(buf) -> int:
    return zlib.crc32(memoryview(buf).cast("B"))


def read_netcdf4(ds: Dataset) -> int:
    with netCDF4.Dataset(ds.url) as nc:
        var = nc.variables[VAR]
        var.set_auto_maskandscale(False)
        return _checksum(np.ascontiguousarray(var[...]))


def read_zarr(ds: Dataset) -> int:
    arr = zarr.open_array(str(ds.path / VAR), mode="r")
    return _checksum(np.ascontiguousarray(arr[...]))


def nczarrfs_binary() -> Path:
    return Path(os.environ.get("NCZARRFS_BIN", REPO / "target" / "release" / "nczarrfs"))


def read_nczarrfs_devnull(ds: Dataset) -> None:
    subprocess.run(
        [str(nczarrfs_binary()), "get", str(ds.path), VAR, "-o", "/dev/null"], check=True
    )
    return None


def read_nczarrfs_pipe(ds: Dataset) -> int:
    out = subprocess.run(
        [str(nczarrfs_binary()), "get", str(ds.path), VAR], check=True, stdout=subprocess.PIPE
    ).stdout
    return _checksum(out)


#: The table's rows; the first one marked ``ours`` is the numerator of the ratios.
READERS = [
    Reader("nczarrfs get -o /dev/null", read_nczarrfs_devnull),
    Reader("nczarrfs get | pipe (checked)", read_nczarrfs_pipe),
    Reader("netCDF4-python (netcdf-c)", read_netcdf4),
    Reader("zarr-python", read_zarr),
]
OURS = READERS[0].name


def _fix_shuffle(store: Path, itemsize: int) -> None:
    """netcdf-c writes shuffle with elementsize 0, which numcodecs treats as a no-op; write
    the real size so zarr-python decodes the same values (netcdf-c reads either)."""
    meta = store / VAR / ".zarray"
    doc = json.loads(meta.read_text())
    for flt in doc.get("filters") or []:
        if flt.get("id") == "shuffle":
            flt["elementsize"] = itemsize
    meta.write_text(json.dumps(doc))


def make_dataset(workdir: Path, name: str, size_mb: int, compress: bool) -> Dataset:
    steps = max(1, size_mb * 2**20 // (ROWS * COLS * 4))
    path = workdir / f"{name}_{steps}.file"
    nbytes = steps * ROWS * COLS * 4
    if (path / ".complete").exists():
        return Dataset(name, path, nbytes)
    print(f"creating {path} ({nbytes / 2**20:.0f} MiB)", file=sys.stderr)
    kwargs = {"zlib": True, "complevel": 1, "shuffle": True} if compress else {}
    y, x = np.mgrid[0:ROWS, 0:COLS].astype("f4")
    rng = np.random.default_rng(0)
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file", "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("y", ROWS)
        nc.createDimension("x", COLS)
        var = nc.createVariable(VAR, "f4", ("time", "y", "x"), chunksizes=(1, ROWS, COLS), **kwargs)
        for t in range(steps):
            # A smooth field plus quantized noise: compresses like real model output.
            field = 280 + 10 * np.sin(x / 97 + t / 7) * np.cos(y / 53)
            field += np.round(rng.normal(scale=0.5, size=field.shape), 2)
            var[t] = field.astype("f4")
    if compress:
        _fix_shuffle(path, 4)
    (path / ".complete").touch()
    return Dataset(name, path, nbytes)


def bench(ds: Dataset, reader: Reader, repeat: int) -> tuple[float, int | None]:
    checksum = reader.read(ds)  # warm-up: page cache, imports, first-open costs
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        reader.read(ds)
        best = min(best, time.perf_counter() - start)
    return best, checksum


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=400, help="size of each variable")
    parser.add_argument("--repeat", type=int, default=3, help="timed reads per row (best kept)")
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "nczarrfs-bench",
        help="where the datasets are created and kept between runs",
    )
    parser.add_argument("--only", default="", help="comma-separated reader names to run")
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    readers = [r for r in READERS if not args.only or r.name in args.only.split(",")]

    datasets = [
        make_dataset(args.workdir.resolve(), "plain", args.size_mb, compress=False),
        make_dataset(args.workdir.resolve(), "zlib+shuffle", args.size_mb, compress=True),
    ]
    print(f"{'dataset':<14} {'reader':<32} {'best s':>8} {'MiB/s':>8} {'ours ×':>10}  check")
    failed = False
    for ds in datasets:
        results = {}
        for reader in readers:
            try:
                results[reader.name] = bench(ds, reader, args.repeat)
            except (subprocess.CalledProcessError, OSError) as err:
                print(f"{ds.name:<14} {reader.name:<32} failed: {err}")
                failed = True
        sums = {v[1] for v in results.values() if v[1] is not None}
        ours = results.get(OURS, (None,))[0]
        for name, (secs, checksum) in results.items():
            ratio = f"{secs / ours:10.2f}" if ours else f"{'-':>10}"
            check = "-" if checksum is None else ("ok" if len(sums) == 1 else f"{checksum:08x}")
            mib = ds.nbytes / 2**20 / secs
            print(f"{ds.name:<14} {name:<32} {secs:8.3f} {mib:8.0f} {ratio}  {check}")
        if len(sums) > 1:
            print(f"{ds.name}: readers disagree on the values", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
