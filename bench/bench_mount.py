"""Reading through a FUSE mount: whole-variable `cat`, random 4 KiB preads, a 1000-variable
dataset's headers, and the daemon's peak memory.

Uses the datasets of bench_read.py (``plain`` and ``zlib+shuffle``, created once and kept in
--workdir) plus a dataset of 1000 small variables. Every timed row is the best of --repeat;
each repetition mounts afresh (``nczarrfs mount -f``), so neither the kernel's page cache nor the
daemon's chunk cache carries over from the previous one. The many-variable mounts are timed
as a user runs them: ``nczarrfs mount`` returns once the mount is ready. The raw-chunk row (`cat` of the chunk
files themselves) is the ceiling a mount can reach; netCDF4-python reads the same variable in
process. For the 1000-variable browse (`ls -lR` plus `cat` of every @header.cdl), the same
browse of a copy of the mounted tree in ordinary local files is the floor. Peak RSS is the daemon's VmHWM after all reads of one mount, against its cache_size.
A dataset of 10,000 such variables shows how the open scales: only the mount and the root
@header.cdl are timed there, against netCDF4-python's open.
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import netCDF4
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_read  # noqa: E402  (the datasets and the in-process readers)

NVARS = 1000
# A larger open, to show how the two scale: only the open and the root header are timed.
NVARS_LARGE = 10000


def is_mounted(path: Path) -> bool:
    target = str(path.resolve())
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] == target for line in f)


class Mount:
    """``nczarrfs mount -f`` in a child process (so its pid and memory can be read)."""

    def __init__(self, location: Path, mountpoint: Path, options: list[str]):
        self.mountpoint = mountpoint
        args = [str(bench_read.nczarrfs_binary()), "mount", "-f"]
        for o in options:
            args += ["-o", o]
        # The daemon complains when fusermount3 has already unmounted it: not our concern.
        self.proc = subprocess.Popen(args + [str(location), str(mountpoint)],
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while not is_mounted(mountpoint):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise OSError(f"mount of {location} failed")
            time.sleep(0.0005)

    def peak_rss_mib(self) -> float:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        return float("nan")

    def __enter__(self) -> "Mount":
        return self

    def __exit__(self, *exc) -> None:
        subprocess.run(["fusermount3", "-u", str(self.mountpoint)], check=False)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class DaemonMount:
    """``nczarrfs mount`` as a user runs it: the command returns once the mount is ready (the
    daemon stays behind). Timing that return, unlike polling for the mount from here, leaves
    both cores to the daemon while it opens the dataset."""

    def __init__(self, location: Path, mountpoint: Path):
        self.mountpoint = mountpoint
        subprocess.run([str(bench_read.nczarrfs_binary()), "mount", str(location),
                        str(mountpoint)], check=True)

    def __enter__(self) -> "DaemonMount":
        return self

    def __exit__(self, *exc) -> None:
        subprocess.run(["fusermount3", "-u", str(self.mountpoint)], check=False)


def best_of(repeat: int, run) -> float:
    """Best wall time of `run()` (which returns its own elapsed seconds) over `repeat` runs."""
    return min(run() for _ in range(repeat))


def timed(cmd: list[str] | str, shell: bool = False) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, check=True, shell=shell, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of process `pid` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def cat_mounted(
    ds: bench_read.Dataset, mnt: Path, options: list[str]
) -> tuple[float, float, float]:
    """(wall seconds, CPU seconds of `cat`, CPU seconds of the daemon) of one `cat` of the
    variable on a fresh mount."""
    with Mount(ds.path, mnt, options) as m:
        daemon = cpu_seconds(m.proc.pid)
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = timed(["cat", str(mnt / bench_read.VAR / "data")])
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        daemon = cpu_seconds(m.proc.pid) - daemon
    cat = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cat, daemon


def netcdf_c(ds: bench_read.Dataset) -> float:
    start = time.perf_counter()
    bench_read.read_netcdf4(ds)
    return time.perf_counter() - start


def random_preads(ds: bench_read.Dataset, mnt: Path, options: list[str], seconds: float) -> float:
    """4 KiB preads at random page-aligned offsets for `seconds`; returns reads per second."""
    rng = random.Random(0)
    pages = ds.nbytes // 4096
    with Mount(ds.path, mnt, options):
        fd = os.open(mnt / bench_read.VAR / "data", os.O_RDONLY)
        try:
            n = 0
            start = time.perf_counter()
            while (elapsed := time.perf_counter() - start) < seconds:
                for _ in range(64):
                    if len(os.pread(fd, 4096, rng.randrange(pages) * 4096)) != 4096:
                        raise OSError("short read")
                n += 64
            return n / elapsed
        finally:
            os.close(fd)


def peak_rss(ds: bench_read.Dataset, mnt: Path, cache: str) -> float:
    """The daemon's peak RSS after a whole `cat` and random reads with cache_size=`cache`."""
    with Mount(ds.path, mnt, [f"cache_size={cache}"]) as m:
        timed(["cat", str(mnt / bench_read.VAR / "data")])
        fd = os.open(mnt / bench_read.VAR / "data", os.O_RDONLY)
        rng = random.Random(1)
        try:
            for _ in range(2000):
                os.pread(fd, 4096, rng.randrange(ds.nbytes // 4096) * 4096)
        finally:
            os.close(fd)
        return m.peak_rss_mib()


def make_many(workdir: Path, nvars: int = NVARS) -> Path:
    """1000 variables of 100 floats, each with three attributes, in three groups' worth of
    dimensions: the shape of a large model output's metadata."""
    path = workdir / f"many_{nvars}.file"
    if (path / ".complete").exists():
        return path
    print(f"creating {path}", file=sys.stderr)
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file", "w") as nc:
        nc.title = "many variables"
        nc.createDimension("t", None)
        nc.createDimension("x", 100)
        for i in range(nvars):
            v = nc.createVariable(f"v{i:04d}", "f4", ("x",) if i % 2 else ("t", "x"))
            v.units = "K"
            v.long_name = f"variable number {i}"
            v.valid_range = np.array([0, 1000], "f4")
            v[...] = np.arange(100, dtype="f4") if i % 2 else np.arange(100, dtype="f4")[None]
    (path / ".complete").touch()
    return path


def browse(tree: Path) -> float:
    """Seconds for `ls -lR` of `tree` plus `cat` of every @header.cdl in it."""
    return timed(
        f"ls -lR {tree} > /dev/null && find {tree} -name @header.cdl -exec cat {{}} + > /dev/null",
        shell=True,
    )


def headers(path: Path, mnt: Path, walk: bool = True) -> tuple[float, float, float | None]:
    """(seconds to mount, seconds for `cat` of the root @header.cdl right after, seconds for
    `ls -lR` plus `cat` of every @header.cdl, unless not `walk`)."""
    start = time.perf_counter()
    with DaemonMount(path, mnt):
        mounted = time.perf_counter() - start
        with open(mnt / "@header.cdl", "rb") as f:
            f.read()
        header = time.perf_counter() - start
        walked = browse(mnt) if walk else None
    return mounted, header, walked


def browse_local_copy(path: Path, mnt: Path, workdir: Path, repeat: int) -> float:
    """The same browse of a copy of the mounted tree in ordinary files on `workdir`'s file
    system, its kernel caches warm: the floor for the browse row, which no mount reaches."""
    with tempfile.TemporaryDirectory(dir=workdir, prefix="tree-") as tmp:
        tree = Path(tmp) / "tree"
        with Mount(path, mnt, []):
            subprocess.run(["cp", "-r", str(mnt), str(tree)], check=True)
        browse(tree)
        return best_of(repeat, lambda: browse(tree))


def open_netcdf4(path: Path, nvars: int = NVARS) -> float:
    start = time.perf_counter()
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file") as nc:
        names = list(nc.variables)
    assert len(names) == nvars
    return time.perf_counter() - start


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=int, default=400, help="size of each variable")
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per row (best kept)")
    parser.add_argument("--seconds", type=float, default=3.0, help="duration of the pread rows")
    parser.add_argument("--cache", default="64M", help="cache_size of the peak RSS row")
    parser.add_argument(
        "--workdir", type=Path, default=Path(tempfile.gettempdir()) / "nczarrfs-bench",
        help="where the datasets are created and kept between runs",
    )
    parser.add_argument("-o", dest="options", action="append", default=[],
                        help="extra mount options for the timed mounts")
    args = parser.parse_args(argv)
    work = args.workdir.resolve()
    work.mkdir(parents=True, exist_ok=True)
    datasets = [
        bench_read.make_dataset(work, "plain", args.size_mb, compress=False),
        bench_read.make_dataset(work, "zlib+shuffle", args.size_mb, compress=True),
    ]
    many = make_many(work)
    opts = args.options
    with tempfile.TemporaryDirectory(prefix="nczarrfs-bench-mnt-") as tmp:
        mnt = Path(tmp) / "mnt"
        mnt.mkdir()
        print(f"{'dataset':<14} {'reader':<34} {'best s':>8} {'MiB/s':>8} {'× netcdf-c':>10}")
        for ds in datasets:
            chunks = sorted(str(p) for p in (ds.path / bench_read.VAR).glob("[0-9]*"))
            netcdf_c(ds)  # warm-up: page cache of the chunk files, imports
            cats = min((cat_mounted(ds, mnt, opts) for _ in range(args.repeat)),
                       key=lambda r: r[0])
            rows = {
                "netCDF4-python (in-process)": best_of(args.repeat, lambda: netcdf_c(ds)),
                "cat raw chunk files (ceiling)": best_of(
                    args.repeat, lambda: timed(["cat", *chunks])),
                "cat MOUNT/field/data": cats[0],
            }
            if "direct_io" not in opts:
                # The other mode, in the same run: one copy fewer, but no kernel readahead.
                rows["cat MOUNT/field/data, -o direct_io"] = min(
                    cat_mounted(ds, mnt, [*opts, "direct_io"])[0] for _ in range(args.repeat))
            ref = rows["netCDF4-python (in-process)"]
            for name, secs in rows.items():
                mib = ds.nbytes / 2**20 / secs
                print(f"{ds.name:<14} {name:<34} {secs:8.3f} {mib:8.0f} {ref / secs:10.2f}")
            # CPU time tells more than wall time on a loaded machine.
            print(f"{ds.name:<14} {'  CPU s of that cat: cat, daemon':<34} {cats[1]:8.3f} "
                  f"{cats[2]:8.3f}")
            rate = random_preads(ds, mnt, opts, args.seconds)
            print(f"{ds.name:<14} {'random 4 KiB preads/s':<34} {rate:8.0f}")
            rss = peak_rss(ds, mnt, args.cache)
            print(f"{ds.name:<14} {'daemon peak RSS MiB, cache ' + args.cache:<34} {rss:8.0f}")
        open_netcdf4(many)
        nc_open = best_of(args.repeat, lambda: open_netcdf4(many))
        runs = [headers(many, mnt) for _ in range(args.repeat)]
        rows = {
            "mount (until mounted)": min(r[0] for r in runs),
            "mount + cat of the root @header.cdl": min(r[1] for r in runs),
            "ls -lR + cat every @header.cdl": min(r[2] for r in runs),
            "  the same, local copy (the floor)": browse_local_copy(many, mnt, work, args.repeat),
        }
        print(f"{'many (1000 v)':<14} {'netCDF4-python open':<34} {nc_open:8.3f}")
        for name, secs in rows.items():
            print(f"{'many (1000 v)':<14} {name:<34} {secs:8.3f} {'':>8} {nc_open / secs:10.2f}")
        large = make_many(work, NVARS_LARGE)
        open_netcdf4(large, NVARS_LARGE)
        nc_open = best_of(args.repeat, lambda: open_netcdf4(large, NVARS_LARGE))
        runs = [headers(large, mnt, walk=False) for _ in range(args.repeat)]
        label = f"many ({NVARS_LARGE // 1000}k v)"
        print(f"{label:<14} {'netCDF4-python open':<34} {nc_open:8.3f}")
        for name, secs in {
            "mount (until mounted)": min(r[0] for r in runs),
            "mount + cat of the root @header.cdl": min(r[1] for r in runs),
        }.items():
            print(f"{label:<14} {name:<34} {secs:8.3f} {'':>8} {nc_open / secs:10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
