"""Whole-variable write throughput: `nczarrfs put` and `nczarrfs copy` against netCDF4-python
(netcdf-c) writing the same values, uncompressed and with zlib level 1 + shuffle.

The source is bench_read.py's ``plain`` NCZarr dataset (about --size-mb of float32 in chunks of
(1, 512, 1024), a smooth field with quantized noise), created once with netCDF4-python and kept.
Each writer produces a new NCZarr dataset with the same chunking and codecs:

* ``nczarrfs put``: stores the raw values (``nczarrfs get`` of the source, a file already in the
  page cache) into an empty dataset made by ``nczarrfs gen`` with the same chunking and codecs
  (neither is timed); the time is the put process's;
* ``nczarrfs copy``: reads the source, writes the target and verifies it (it reads the copy
  back and compares checksums) — the whole user-facing command, so it does more than the others;
* ``netCDF4-python var[:]=``: writes the values, already in memory as a numpy array, with
  ``var[:] = values`` then closes the file (the time covers both);
* ``netCDF4-python copy``: the same after reading the values from the source, like ours;
* ``nccopy`` (Debian's netcdf-c, when it reads NCZarr): the same copy as ours;
* ``nczarrfs mount -o rw``: ``cat values.raw > MNT/field/data`` into an empty dataset made by
  ``nczarrfs gen`` (not timed, nor is starting the mount); the time runs until the unmounted
  daemon has exited, so it covers storing the last chunks. Needs FUSE (``fusermount3``).

Every run writes a fresh target (the previous one is removed outside the timing); the table shows
the best of --repeat runs after a warm-up (wall time, and the CPU time of that run: this process's
and its children's, so a writer's CPU time includes any threads and subprocesses it ran), the size
of what was written, and each row's time over ``nczarrfs copy``'s. Under each codec's rows the
line ``put vs var[:]=`` gives netCDF4-python's ``var[:] =`` time over ``nczarrfs put``'s (the aim
of at least 2: writing values from memory against writing them from a cached file), for wall and
CPU time. Every target is read back with netCDF4-python once and its
values compared with the source's.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_read import COLS, ROWS, VAR, Dataset, make_dataset, nczarrfs_binary  # noqa: E402


@dataclass
class Codec:
    """One compression setting, spelled for each writer."""

    name: str
    ours: list[str]
    netcdf4: dict
    nccopy: list[str]


CODECS = [
    Codec("plain", [], {}, ["-d", "0"]),
    Codec("zlib1+shuffle", ["-d", "1", "-s"], {"zlib": True, "complevel": 1, "shuffle": True},
          ["-d", "1", "-s"]),
]


@dataclass
class Timing:
    """Wall and CPU seconds of one timed region."""

    wall: float
    cpu: float


def _cpu() -> float:
    """CPU seconds of this process and of its waited-for children so far."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


class Stopwatch:
    """``with Stopwatch() as t:`` times the block into ``t.timing``."""

    def __enter__(self) -> "Stopwatch":
        self._wall, self._cpu = time.perf_counter(), _cpu()
        return self

    def __exit__(self, *exc) -> None:
        self.timing = Timing(time.perf_counter() - self._wall, _cpu() - self._cpu)


@dataclass
class Writer:
    """One row of the table: writes `src` (or `values`) to the NCZarr directory `dst`."""

    name: str
    #: Writes; returns its own timing when part of its work is set-up that is not timed.
    write: Callable[[Dataset, np.ndarray, Path, Codec], Timing | None]


def url(path: Path) -> str:
    return f"file://{path}#mode=nczarr,file"


def write_nczarrfs(src: Dataset, _values: np.ndarray, dst: Path, codec: Codec) -> None:
    subprocess.run([str(nczarrfs_binary()), "copy", *codec.ours, str(src.path), str(dst)],
                   check=True)


def write_netcdf4(_src: Dataset, values: np.ndarray, dst: Path, codec: Codec) -> None:
    _write_values(values, dst, codec)


def copy_netcdf4(src: Dataset, _values: np.ndarray, dst: Path, codec: Codec) -> None:
    _write_values(read_values(src.path), dst, codec)


def _write_values(values: np.ndarray, dst: Path, codec: Codec) -> None:
    with netCDF4.Dataset(url(dst), "w") as nc:
        nc.createDimension("time", None)
        nc.createDimension("y", ROWS)
        nc.createDimension("x", COLS)
        var = nc.createVariable(VAR, "f4", ("time", "y", "x"), chunksizes=(1, ROWS, COLS),
                                **codec.netcdf4)
        var.set_auto_maskandscale(False)
        var[:] = values


def raw_values(src: Dataset) -> Path:
    """The source's values as a raw file (``nczarrfs get``), made once and kept."""
    raw = src.path.parent / f"{src.path.name}.raw"
    if not raw.exists() or raw.stat().st_size != src.nbytes:
        subprocess.run([str(nczarrfs_binary()), "get", str(src.path), VAR, "-o", str(raw)],
                       check=True)
    return raw


def write_put(src: Dataset, _values: np.ndarray, dst: Path, codec: Codec) -> Timing:
    """Returns its own timing: the empty dataset is made, and the raw file read into the page
    cache, outside it."""
    raw = raw_values(src)
    subprocess.run([str(nczarrfs_binary()), "gen", "-", "-o", str(dst)], input=_cdl(codec),
                   text=True, check=True)
    with open(raw, "rb") as f:
        while f.read(1 << 24):
            pass
    with Stopwatch() as t:
        subprocess.run([str(nczarrfs_binary()), "put", str(dst), VAR, "-i", str(raw)],
                       check=True)
    return t.timing


def write_nccopy(src: Dataset, _values: np.ndarray, dst: Path, codec: Codec) -> None:
    subprocess.run(["nccopy", *codec.nccopy, url(src.path), url(dst)], check=True,
                   stderr=subprocess.DEVNULL)


def _cdl(codec: Codec) -> str:
    attrs = (f"\t\t{VAR}:_DeflateLevel = 1 ;\n\t\t{VAR}:_Shuffle = \"true\" ;\n"
             if codec.ours else "")
    return (
        "netcdf empty {\ndimensions:\n\ttime = UNLIMITED ;\n"
        f"\ty = {ROWS} ;\n\tx = {COLS} ;\nvariables:\n\tfloat {VAR}(time, y, x) ;\n"
        f"\t\t{VAR}:_ChunkSizes = 1, {ROWS}, {COLS} ;\n{attrs}}}\n"
    )


def write_mount(src: Dataset, _values: np.ndarray, dst: Path, codec: Codec) -> Timing:
    """Returns its own timing: the dataset and the mount are set up outside it (the daemon's
    CPU time is counted whole when it exits, start-up included)."""
    raw = raw_values(src)
    subprocess.run([str(nczarrfs_binary()), "gen", "-", "-o", str(dst)], input=_cdl(codec),
                   text=True, check=True)
    with tempfile.TemporaryDirectory() as mnt:
        daemon = subprocess.Popen([str(nczarrfs_binary()), "mount", "-f", "-o", "rw", str(dst),
                                   mnt])
        try:
            data = Path(mnt) / VAR / "data"
            deadline = time.monotonic() + 10
            while not data.exists():
                if daemon.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the mount did not come up")
                time.sleep(0.05)
            with Stopwatch() as t:
                with open(raw, "rb") as fin, open(data, "wb") as fout:
                    shutil.copyfileobj(fin, fout, 1 << 20)
                subprocess.run(["fusermount3", "-u", mnt], check=True)
                if daemon.wait(timeout=600) != 0:
                    raise RuntimeError(f"the mount exited with status {daemon.returncode}")
            return t.timing
        finally:
            if daemon.poll() is None:
                subprocess.run(["fusermount3", "-u", "-z", mnt], check=False)
                daemon.wait(timeout=60)


#: The table's rows; the first is ours, the numerator of the "this/ours" ratios.
WRITERS = [
    Writer("nczarrfs copy (verified)", write_nczarrfs),
    Writer("nczarrfs put", write_put),
    Writer("netCDF4-python var[:]=", write_netcdf4),
    Writer("netCDF4-python copy", copy_netcdf4),
    Writer("nccopy (Debian netcdf-c)", write_nccopy),
    Writer("nczarrfs mount rw + cat", write_mount),
]


def _checksum(arr: np.ndarray) -> int:
    return zlib.crc32(memoryview(np.ascontiguousarray(arr)).cast("B"))


def read_values(path: Path) -> np.ndarray:
    with netCDF4.Dataset(url(path)) as nc:
        var = nc.variables[VAR]
        var.set_auto_maskandscale(False)
        return np.ascontiguousarray(var[...])


def du(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def bench(writer: Writer, src: Dataset, values: np.ndarray, codec: Codec, workdir: Path,
          repeat: int) -> tuple[Timing, Path]:
    dst = workdir / f"out_{codec.name}_{'_'.join(writer.name.split()[:2])}.file"
    best = Timing(float("inf"), float("inf"))
    for i in range(repeat + 1):
        shutil.rmtree(dst, ignore_errors=True)
        subprocess.run(["sync"], check=False)
        with Stopwatch() as t:
            own = writer.write(src, values, dst, codec)
        timing = own if own is not None else t.timing
        if i > 0 and timing.wall < best.wall:  # the first run is a warm-up
            best = timing
    return best, dst


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=400, help="size of the variable")
    parser.add_argument("--repeat", type=int, default=3, help="timed writes per row (best kept)")
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "nczarrfs-bench",
        help="where the source is created and kept between runs, and the copies written",
    )
    parser.add_argument("--only", default="", help="comma-separated writer names to run")
    args = parser.parse_args(argv)
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    writers = [w for w in WRITERS if not args.only or w.name in args.only.split(",")]
    if shutil.which("nccopy") is None:
        writers = [w for w in writers if w.write is not write_nccopy]
    if shutil.which("fusermount3") is None or not Path("/dev/fuse").exists():
        writers = [w for w in writers if w.write is not write_mount]

    src = make_dataset(workdir, "plain", args.size_mb, compress=False)
    values = read_values(src.path)
    want = _checksum(values)
    print(f"source {src.path} ({src.nbytes / 2**20:.0f} MiB), best of {args.repeat}")
    print(f"{'codec':<14} {'writer':<26} {'best s':>8} {'cpu s':>7} {'MiB/s':>8} {'out MiB':>8} "
          f"{'this/ours':>10}  check")
    failed = False
    for codec in CODECS:
        results = {}
        for writer in writers:
            try:
                secs, dst = bench(writer, src, values, codec, workdir, args.repeat)
            except (subprocess.CalledProcessError, OSError, RuntimeError) as err:
                print(f"{codec.name:<14} {writer.name:<26} failed: {err}")
                failed = failed or writer.name.startswith("nczarrfs")
                continue
            ok = _checksum(read_values(dst)) == want
            failed = failed or not ok
            results[writer.name] = (secs, du(dst), ok)
            shutil.rmtree(dst, ignore_errors=True)
        ours = results.get(WRITERS[0].name, (None,))[0]
        for name, (timing, size, ok) in results.items():
            secs = timing.wall
            ratio = f"{secs / ours.wall:10.2f}" if ours else f"{'-':>10}"
            mib = src.nbytes / 2**20 / secs
            check = "ok" if ok else "DIFFERENT VALUES"
            if codec.ours and size >= src.nbytes:
                check += " (not compressed)"
            print(f"{codec.name:<14} {name:<26} {secs:8.3f} {timing.cpu:7.3f} {mib:8.0f} "
                  f"{size / 2**20:8.1f} {ratio}  {check}")
        put, nc = results.get("nczarrfs put"), results.get("netCDF4-python var[:]=")
        if put and nc:
            print(f"{codec.name:<14} {'put vs var[:]=':<26} netCDF4-python/put: "
                  f"{nc[0].wall / put[0].wall:.2f}x wall, {nc[0].cpu / put[0].cpu:.2f}x CPU "
                  "(aim: 2x)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
