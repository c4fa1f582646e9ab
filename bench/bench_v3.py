"""Reading a sharded Zarr v3 array: `nczarrfs get` against zarr-python on the same store.

Creates (once, then reuses) a Zarr v3 store with zarr-python: one float32 array of about
--size-mb, shape (steps, 512, 1024), shards of (8, 512, 1024) (16 MiB) holding 64 inner chunks
of (1, 128, 512) each, compressed with zstd level 1 (the values are bench_read.py's smooth field
with quantized noise). Two reads, each timed as the best of --repeat after a warm-up, all from
the page cache:

* the whole array: ``nczarrfs get -o /dev/null`` against ``zarr.open_array(...)[...]``;
* one inner chunk (256 KiB, a partial read of one shard): ``nczarrfs get --start --count``
  against ``zarr.open_array(...)[t, :128, :512]``. Both sides include opening the array; ours
  also includes starting the process, which dominates at this size.

The ratio is zarr-python's time over ours (above 1: we are faster). The values are compared
once through a pipe (CRC-32 of the raw bytes against zarr-python's).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path
from typing import Callable

import numpy as np
import zarr
from zarr.codecs import ZstdCodec

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_read import COLS, ROWS, VAR, nczarrfs_binary  # noqa: E402

SHARD_STEPS = 8
INNER = (1, 128, 512)


def make_store(workdir: Path, size_mb: int) -> tuple[Path, tuple[int, int, int]]:
    steps = max(SHARD_STEPS, size_mb * 2**20 // (ROWS * COLS * 4) // SHARD_STEPS * SHARD_STEPS)
    shape = (steps, ROWS, COLS)
    path = workdir / f"v3_sharded_{steps}.zarr"
    if (path / ".complete").exists():
        return path, shape
    print(f"creating {path} ({steps * ROWS * COLS * 4 / 2**20:.0f} MiB)", file=sys.stderr)
    group = zarr.open_group(str(path), mode="w", zarr_format=3)
    arr = group.create_array(
        VAR, shape=shape, dtype="f4", chunks=INNER, shards=(SHARD_STEPS, ROWS, COLS),
        compressors=ZstdCodec(level=1), dimension_names=("time", "y", "x"), fill_value=0,
    )
    y, x = np.mgrid[0:ROWS, 0:COLS].astype("f4")
    rng = np.random.default_rng(0)
    for t0 in range(0, steps, SHARD_STEPS):
        block = np.empty((SHARD_STEPS, ROWS, COLS), dtype="f4")
        for i in range(SHARD_STEPS):
            t = t0 + i
            field = 280 + 10 * np.sin(x / 97 + t / 7) * np.cos(y / 53)
            field += np.round(rng.normal(scale=0.5, size=field.shape), 2)
            block[i] = field
        arr[t0:t0 + SHARD_STEPS] = block
    (path / ".complete").touch()
    return path, shape


def _crc(buf) -> int:
    return zlib.crc32(memoryview(np.ascontiguousarray(buf)).cast("B"))


def best_of(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up: page cache, imports, first-open costs
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def ours(path: Path, sel: list[str], out: str | None) -> bytes:
    cmd = [str(nczarrfs_binary()), "get", str(path), VAR, *sel]
    if out:
        subprocess.run([*cmd, "-o", out], check=True)
        return b""
    return subprocess.run(cmd, check=True, stdout=subprocess.PIPE).stdout


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=400, help="size of the array")
    parser.add_argument("--repeat", type=int, default=3, help="timed reads per row (best kept)")
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "nczarrfs-bench",
        help="where the store is created and kept between runs",
    )
    # bench/run passes every benchmark the same options; --only names other scripts' rows.
    parser.add_argument("--only", default="", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    workdir = args.workdir.resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    path, shape = make_store(workdir, args.size_mb)
    nbytes = int(np.prod(shape)) * 4
    t = shape[0] // 2
    cases = [
        ("whole array", [], lambda a: a[...], nbytes),
        (
            "one inner chunk",
            ["--start", f"{t},0,0", "--count", ",".join(map(str, (1, *INNER[1:])))],
            lambda a: a[t, : INNER[1], : INNER[2]],
            int(np.prod(INNER)) * 4,
        ),
    ]
    print(f"store {path}: {shape} float32, shards (8, 512, 1024) of 64 chunks {INNER}, zstd 1")
    print(f"{'read':<16} {'reader':<28} {'best s':>9} {'MiB/s':>8} {'zarr/ours':>10}  check")
    failed = False
    for name, sel, select, size in cases:
        want = _crc(select(zarr.open_array(str(path / VAR), mode="r")))
        ok = _crc(np.frombuffer(ours(path, sel, None), dtype="f4")) == want
        failed = failed or not ok
        mine = best_of(lambda: ours(path, sel, "/dev/null"), args.repeat)
        theirs = best_of(
            lambda: select(zarr.open_array(str(path / VAR), mode="r")), args.repeat
        )
        for reader, secs, ratio in (
            ("nczarrfs get -o /dev/null", mine, theirs / mine),
            ("zarr-python", theirs, None),
        ):
            r = f"{ratio:10.2f}" if ratio else f"{'':>10}"
            check = ("ok" if ok else "DIFFERENT VALUES") if ratio else "-"
            print(f"{name:<16} {reader:<28} {secs:9.4f} {size / 2**20 / secs:8.0f} {r}  {check}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
