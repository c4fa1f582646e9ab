"""A writer killed with SIGKILL at random moments never leaves a broken dataset.

`nczarrfs copy` of a few tens of MB (many small zlib chunks) is killed at a random point of
its run, ≥ 20 times. Afterwards:

* the target either does not exist yet (it is published by a rename after verification) or
  is complete: netCDF4-python opens it and its values equal the source's;
* the staging copy left behind (`.NAME.nczarrfs-PID`) holds either nothing but temporary
  objects (the kill came before the first set of metadata objects was stored) or every
  metadata object: it opens in netCDF4-python and `nczarrfs dump` reads all of it, once the
  copy's rename helper has finished the set it was given (a kill cannot cut one).
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import time
from pathlib import Path

import netCDF4
import numpy as np
import pytest

from conftest import SEED, nczarrfs_binary

KILLS = 20


def _url(path: Path) -> str:
    return "file://" + str(path.resolve()) + "#mode=nczarr,file"


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    d = tmp_path_factory.mktemp("kill_src")
    src = d / "src.file"
    rng = np.random.default_rng(SEED)
    with netCDF4.Dataset(_url(src), "w", format="NETCDF4") as nc:
        nc.createDimension("t", None)
        nc.createDimension("y", 256)
        nc.createDimension("x", 256)
        for name in ("a", "b", "c"):
            v = nc.createVariable(name, "f4", ("t", "y", "x"), chunksizes=(1, 64, 64))
            v[0:40] = rng.standard_normal((40, 256, 256), dtype=np.float32)
        nc.title = "kill test"
    return src


def _values(path: Path) -> dict[str, np.ndarray]:
    with netCDF4.Dataset(_url(path)) as nc:
        return {n: np.asarray(v[...]) for n, v in nc.variables.items()}


def _rename_helpers() -> list[str]:
    """Pids of running `nczarrfs rename-helper` processes (a zombie has no command line)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[:2] == [b"nczarrfs", b"rename-helper"]:
            pids.append(proc.name)
    return pids


def _wait_for_rename_helpers(timeout: float = 30.0) -> None:
    """A killed writer's rename helper completes the set of renames it holds, then exits:
    until then the staging copy is still being written."""
    deadline = time.monotonic() + timeout
    while (pids := _rename_helpers()) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert not pids, f"rename helpers {pids} still running {timeout} s after the kill"


def test_sigkill_leaves_readable_datasets(source, tmp_path):
    binary = str(nczarrfs_binary())
    want = _values(source)
    args = [binary, "copy", "--codec", "zlib:1", "--chunks", "t/1,y/32,x/32"]
    # One full run to know how long a copy takes.
    t0 = time.monotonic()
    full = tmp_path / "full.file"
    subprocess.run([*args, str(source), str(full)], check=True, capture_output=True)
    duration = time.monotonic() - t0
    got = _values(full)
    assert all(np.array_equal(got[k], want[k]) for k in want)
    rng = random.Random(SEED)
    outcomes = {"absent": 0, "complete": 0, "staging checked": 0, "staging empty": 0}
    for i in range(KILLS):
        dst = tmp_path / f"k{i}.file"
        p = subprocess.Popen([*args, str(source), str(dst)], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0, duration * 1.3))
        p.send_signal(signal.SIGKILL)
        p.wait()
        _wait_for_rename_helpers()
        if dst.exists():
            outcomes["complete"] += 1
            got = _values(dst)
            assert set(got) == set(want), f"kill {i}: {sorted(got)}"
            for k in want:
                assert np.array_equal(got[k], want[k]), f"kill {i}: {k} differs"
        else:
            outcomes["absent"] += 1
        for left in tmp_path.glob(f".k{i}.file.nczarrfs-*"):
            if not (left / ".zgroup").exists():
                # Killed before its first set of metadata objects was given to the helper:
                # nothing but objects still being written (netCDF4 would open the directory
                # as a dataset without variables).
                names = [p.name for p in left.rglob("*") if p.is_file()]
                assert all(n.startswith(".nczarrfs-tmp.") for n in names), f"kill {i}: {names}"
                shutil.rmtree(left)
                outcomes["staging empty"] += 1
                continue
            with netCDF4.Dataset(_url(left)) as nc:
                assert set(nc.variables) == set(want), f"kill {i}: staging {left}"
                for v in nc.variables.values():
                    v[...]  # every chunk present decodes
            r = subprocess.run([binary, "dump", str(left)], capture_output=True)
            assert r.returncode == 0, f"kill {i}: dump {left}: {r.stderr.decode()}"
            shutil.rmtree(left)
            outcomes["staging checked"] += 1
    print(f"seed {SEED}: {outcomes}")
    assert outcomes["staging checked"] > 0, "no kill landed during a copy"


def _default_disposition(sig: int):
    """What a child runs before exec so that `sig` ends it: a signal inherited as ignored
    stays ignored (as `nohup`, which may run the suite, leaves SIGHUP), and the test is of the
    handling a user's signal meets."""
    return lambda: signal.signal(sig, signal.SIG_DFL)


def _staging(dst: Path) -> list[Path]:
    return sorted(dst.parent.glob(f".{dst.name}.nczarrfs-*"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_removes_the_staging_copy(source, tmp_path, sig):
    """Ctrl-C, SIGTERM or a hang-up in the middle of a copy: the process ends by that signal
    (a shell's `$?` is 128 + its number) and its staging copy goes, so nothing is left."""
    binary = str(nczarrfs_binary())
    rng = random.Random(SEED + int(sig))
    for i in range(3):
        dst = tmp_path / f"s{i}.file"
        p = subprocess.Popen(
            [binary, "copy", "--codec", "zlib:1", "--chunks", "t/1,y/32,x/32", str(source), str(dst)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, preexec_fn=_default_disposition(sig))
        deadline = time.monotonic() + 30
        while not _staging(dst) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.001)
        assert _staging(dst), f"round {i}: no staging copy appeared"
        time.sleep(rng.uniform(0, 0.3))
        p.send_signal(sig)
        p.wait()
        assert p.returncode == -sig, (p.returncode, p.stderr.read().decode())
        # The cleaner removes it once the copy's process has gone.
        deadline = time.monotonic() + 30
        while _staging(dst) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not _staging(dst), f"round {i}: {_staging(dst)} left"
        assert not dst.exists()


def test_staging_left_by_a_dead_process_is_removed_by_the_next_copy(source, tmp_path):
    """A SIGKILL leaves the staging copy; the next copy to the same place removes it, but
    not one of a live process, nor a `.old` dataset that a cut replacement left aside."""
    binary = str(nczarrfs_binary())
    dead = subprocess.Popen(["true"])
    dead.wait()
    dst = tmp_path / "d.file"
    left = [tmp_path / f".d.file.nczarrfs-{pid}" for pid in (dead.pid, os.getpid())]
    left.append(tmp_path / f".d.file.nczarrfs-{dead.pid}.old")
    for d in left:
        (d / "a").mkdir(parents=True)
        (d / "a" / "0.0.0").write_bytes(b"x")
    subprocess.run([binary, "copy", "-V", "a", "-v", "a", str(source), str(dst)], check=True,
                   capture_output=True)
    assert not left[0].exists()
    assert left[1].exists() and left[2].exists()
    assert np.array_equal(_values(dst)["a"], _values(source)["a"])


def _get_temporaries(out: Path) -> list[Path]:
    return sorted(out.parent.glob(f".{out.name}.nczarrfs-get.*"))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP],
                         ids=["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_signal_during_get_o_leaves_no_temporary_file(source, tmp_path, sig):
    """As an interrupted cp leaves only the file it was named: `get -o` writes into a hidden
    temporary file beside its output, which the signal must take with the process."""
    binary = str(nczarrfs_binary())
    out = tmp_path / "out.raw"
    out.write_bytes(b"before")
    for i in range(3):
        p = subprocess.Popen([binary, "get", str(source), "a", "-o", str(out)],
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             preexec_fn=_default_disposition(sig))
        deadline = time.monotonic() + 30
        while not _get_temporaries(out) and p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.0005)
        p.send_signal(sig)
        p.wait()
        if p.returncode == 0:
            continue  # finished before the signal: nothing to check this round
        assert p.returncode == -sig, (p.returncode, p.stderr.read().decode())
        assert _get_temporaries(out) == [], f"round {i}"
        assert out.read_bytes() == b"before"
        return
    pytest.fail("every get finished before its signal")


def test_get_o_removes_the_temporary_files_of_killed_gets(source, tmp_path):
    dead = subprocess.Popen(["true"])
    dead.wait()
    out = tmp_path / "out.raw"
    token = "0123456789abcdef"
    killed = tmp_path / f".out.raw.nczarrfs-get.{dead.pid}.{token}"
    live = tmp_path / f".out.raw.nczarrfs-get.{os.getpid()}.{token}"
    for f in (killed, live):
        f.write_bytes(b"partial")
        # Killed a minute ago: a file written within the last seconds may be a live get's.
        os.utime(f, (time.time() - 60, time.time() - 60))
    fresh = tmp_path / f".out.raw.nczarrfs-get.{dead.pid}.fedcba9876543210"
    fresh.write_bytes(b"partial")
    subprocess.run([str(nczarrfs_binary()), "get", str(source), "a", "--count", "1,1,1",
                    "-o", str(out)], check=True, capture_output=True)
    assert not killed.exists()
    assert live.exists()
    assert fresh.exists()
    assert out.stat().st_size > 0


def test_get_o_keeps_the_temporary_file_of_a_get_it_cannot_see(source, tmp_path):
    """A get in another PID namespace (another container on a shared volume) has no entry in
    this /proc, so its process number says nothing: its lock on the file tells it is alive."""
    if shutil.which("unshare") is None:
        pytest.fail("unshare (util-linux) is needed for this test")
    binary = str(nczarrfs_binary())
    out = tmp_path / "out.raw"
    whole = subprocess.run([binary, "get", str(source), "a"], check=True,
                           capture_output=True).stdout
    for _ in range(5):
        out.unlink(missing_ok=True)
        live = subprocess.Popen([binary, "get", str(source), "a", "-o", str(out)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not _get_temporaries(out) and live.poll() is None and time.monotonic() < deadline:
            time.sleep(0.0005)
        live.send_signal(signal.SIGSTOP)
        try:
            temporaries = _get_temporaries(out)
            if not temporaries:
                continue  # finished before it could be stopped: try again
            other = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", binary,
                                    "get", str(source), "a", "--count", "1,1,1", "-o", str(out)],
                                   capture_output=True)
            assert other.returncode == 0, other.stderr.decode()
            assert all(t.exists() for t in temporaries)
        finally:
            live.send_signal(signal.SIGCONT)
            _, err = live.communicate(timeout=120)
        assert live.returncode == 0, err.decode()
        assert out.read_bytes() == whole
        return
    pytest.fail("every get finished before it could be stopped")


def test_get_o_keeps_a_locked_temporary_file_of_an_ended_process(source, tmp_path):
    import fcntl

    dead = subprocess.Popen(["true"])
    dead.wait()
    out = tmp_path / "out.raw"
    held = tmp_path / f".out.raw.nczarrfs-get.{dead.pid}.0123456789abcdef"
    held.write_bytes(b"partial")
    os.utime(held, (time.time() - 60, time.time() - 60))
    with open(held, "rb") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        subprocess.run([str(nczarrfs_binary()), "get", str(source), "a", "--count", "1,1,1",
                        "-o", str(out)], check=True, capture_output=True)
        assert held.exists()
