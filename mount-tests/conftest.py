"""Real kernel mounts of nczarrfs: datasets made by netCDF4-python and zarr-python, mounted in a
temporary directory and always unmounted afterwards."""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urlparse

import pytest

REPO = Path(__file__).resolve().parent.parent

# netcdf-c finds its compression filters through HDF5_PLUGIN_PATH; it must be set before
# netCDF4 is imported.
_spec = importlib.util.find_spec("netCDF4")
if _spec and _spec.submodule_search_locations:
    _plugins = Path(list(_spec.submodule_search_locations)[0]) / "plugins"
    if _plugins.is_dir():
        os.environ.setdefault("HDF5_PLUGIN_PATH", str(_plugins))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under the test command (NCZARRFS_REQUIRE_ALL set: root, S3 servers started, packages
    and tools installed), every skip is a failure, so that a test that did not run cannot
    pass the stage unnoticed."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("NCZARRFS_REQUIRE_ALL"):
        report.outcome = "failed"


def nczarrfs_binary() -> Path:
    """NCZARRFS_BIN, else the release build, else the debug build."""
    if os.environ.get("NCZARRFS_BIN"):
        return Path(os.environ["NCZARRFS_BIN"]).resolve()
    for profile in ("release", "debug"):
        candidate = REPO / "target" / profile / "nczarrfs"
        if candidate.exists():
            return candidate
    return REPO / "target" / "release" / "nczarrfs"


@pytest.fixture(scope="session")
def binary() -> Path:
    b = nczarrfs_binary()
    if not b.exists():
        pytest.fail(f"{b} not built: run `cargo build --release` first")
    if not Path("/dev/fuse").exists():
        pytest.fail("/dev/fuse is missing: these tests need FUSE")
    return b


def is_mounted(path: Path) -> bool:
    # As bytes: a mount point's name need not be UTF-8, nor another mount's.
    target = os.fsencode(Path(path).resolve())
    with open("/proc/self/mounts", "rb") as f:
        return any(line.split()[1] == target for line in f)


def unmount(path: Path) -> None:
    """Unmounts whatever is at `path`, lazily if it is busy."""
    if not is_mounted(path):
        return
    for cmd in (["fusermount3", "-u", str(path)], ["umount", str(path)], ["umount", "-l", str(path)]):
        subprocess.run(cmd, capture_output=True, check=False)
        if not is_mounted(path):
            return


#: The bucket scripts/s3-servers makes on its servers.
S3_BUCKET = "nczarrfs-test"


def s3_endpoint() -> str:
    """moto's address: the environment, else what scripts/s3-servers says."""
    if os.environ.get("NCZARRFS_S3_ENDPOINT"):
        return os.environ["NCZARRFS_S3_ENDPOINT"]
    out = subprocess.run([str(REPO / "scripts" / "s3-servers"), "env"], capture_output=True,
                         text=True, check=True).stdout
    values = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    return values["NCZARRFS_S3_ENDPOINT"]


def endpoint_answers(endpoint: str) -> bool:
    url = urlparse(endpoint)
    try:
        with socket.create_connection((url.hostname, url.port), timeout=2):
            return True
    except OSError:
        return False


def moto_or_skip() -> str:
    """moto's address, once it answers; the test is skipped when it does not, unless
    NCZARRFS_REQUIRE_S3 is set (the test command's setting), which makes that a failure."""
    endpoint = s3_endpoint()
    if not endpoint_answers(endpoint):
        message = f"moto S3 server not reachable at {endpoint} (run scripts/s3-servers start)"
        if os.environ.get("NCZARRFS_REQUIRE_S3"):
            pytest.fail(message)
        pytest.skip(message)
    return endpoint


def wait_until(cond, timeout: float = 10.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def daemon_pids(mountpoint: Path) -> list[int]:
    """Process ids of nczarrfs daemons serving `mountpoint` (found by their command line)."""
    target = os.fsencode(Path(mountpoint).resolve())
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            argv = (d / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[1:2] == [b"mount"] and target in argv:
            pids.append(int(d.name))
    return pids


class Mounter:
    """Mounts datasets under a temporary directory; unmounts everything at teardown."""

    def __init__(self, binary: Path, tmp: Path):
        self.binary = binary
        self.tmp = tmp
        self.mounts: list[Path] = []
        self.n = 0

    def run(self, *args: str, **kw) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.binary), *args], capture_output=True, text=True,
                              timeout=60, check=False, **kw)

    def mountpoint(self) -> Path:
        self.n += 1
        mnt = self.tmp / f"mnt{self.n}"
        mnt.mkdir()
        self.mounts.append(mnt)
        return mnt

    def mount(self, location: str, *options: str, log: Path | None = None) -> Path:
        mnt = self.mountpoint()
        args = ["mount"]
        for o in options:
            args += ["-o", o]
        if log is not None:
            args += ["--log-file", str(log)]
        r = self.run(*args, location, str(mnt))
        assert r.returncode == 0, f"mount failed ({r.returncode}): {r.stderr}"
        assert is_mounted(mnt), "nczarrfs mount exited 0 but nothing is mounted"
        return mnt

    def cleanup(self) -> None:
        for mnt in self.mounts:
            unmount(mnt)


@pytest.fixture
def mounter(binary, tmp_path):
    m = Mounter(binary, tmp_path)
    try:
        yield m
    finally:
        m.cleanup()
