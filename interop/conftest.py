"""Shared pytest setup for the interop oracles: the binary under test and the run's seed."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))

#: Base seed of this run: NCZARRFS_SEED to reproduce, else fresh.
SEED = int(os.environ.get("NCZARRFS_SEED") or random.SystemRandom().randrange(1, 2**31))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under the test command (NCZARRFS_REQUIRE_ALL set, and NCZARRFS_REQUIRE_S3 with the
    servers started; packages and tools installed), every skip is a failure: an S3 server that
    does not answer, a server binary or Python package that is missing. A failure names the
    run's seed (the report header that also shows it is hidden under -q)."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and (os.environ.get("NCZARRFS_REQUIRE_ALL")
                           or os.environ.get("NCZARRFS_REQUIRE_S3")):
        report.outcome = "failed"
    if report.failed:
        report.sections.append(("nczarrfs seed", f"reproduce with NCZARRFS_SEED={SEED}"))


def pytest_report_header(config):
    return f"nczarrfs interop seed: {SEED} (reproduce with NCZARRFS_SEED={SEED})"


def nczarrfs_binary() -> Path:
    """NCZARRFS_BIN, else the release build, else the debug build."""
    if os.environ.get("NCZARRFS_BIN"):
        return Path(os.environ["NCZARRFS_BIN"])
    for profile in ("release", "debug"):
        candidate = REPO / "target" / profile / "nczarrfs"
        if candidate.exists():
            return candidate
    return REPO / "target" / "release" / "nczarrfs"


@pytest.fixture(scope="session")
def nczarrfs():
    """Runs the binary: ``nczarrfs(*args) -> CompletedProcess`` (bytes output)."""
    binary = nczarrfs_binary()
    if not binary.exists():
        pytest.fail(f"{binary} not built: run `cargo build --release` first")

    def run(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
        return subprocess.run(
            [str(binary), *args], capture_output=True, timeout=timeout, check=False
        )

    return run


@pytest.fixture(scope="session")
def seed() -> int:
    return SEED
