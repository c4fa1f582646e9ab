"""nczarrfs mount against the kernel: layout, metadata files, values, faults, lifecycle."""

from __future__ import annotations

import errno
import json
import os
import random
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import REPO, daemon_pids, is_mounted, unmount, wait_until  # noqa: E402
from datasets import netcdf_values, nczarr_dataset, zarr_python_dataset  # noqa: E402


def var_dir(mnt: Path, fqn: str) -> Path:
    return mnt.joinpath(*fqn.strip("/").split("/"))


def data_array(mnt: Path, fqn: str) -> np.ndarray:
    """A variable's `data` read with numpy.fromfile, dtype and shape from @metadata.json."""
    d = var_dir(mnt, fqn)
    meta = json.loads((d / "@metadata.json").read_text())
    arr = np.fromfile(d / "data", dtype=np.dtype(meta["dtype"]))
    assert arr.nbytes == meta["data_size"] == (d / "data").stat().st_size
    return arr.reshape(meta["shape"])


@pytest.fixture
def nczarr(tmp_path):
    return nczarr_dataset(tmp_path / "ds.file")


def test_layout_of_an_nczarr_dataset(mounter, nczarr):
    mnt = mounter.mount(nczarr)
    listing = subprocess.run(["ls", "-R", str(mnt)], capture_output=True, text=True, check=True)
    assert listing.stdout.count("@metadata.json") == 10  # root, 7 variables, 2 subgroups
    assert sorted(os.listdir(mnt)) == sorted(
        ["@header.cdl", "@metadata.json", "@attributes", "time", "temp", "counts", "flags",
         "big", "scalar", "sub"])
    assert sorted(os.listdir(mnt / "temp")) == ["@attributes", "@header.cdl", "@metadata.json", "data"]
    assert sorted(os.listdir(mnt / "sub")) == sorted(
        ["@header.cdl", "@metadata.json", "@attributes", "vals", "inner"])
    assert sorted(os.listdir(mnt / "@attributes")) == ["factors", "title", "version"]

    root = json.loads((mnt / "@metadata.json").read_text())
    dims = {d["name"]: (d["size"], d["unlimited"]) for d in root["dimensions"]}
    assert dims == {"time": (4, True), "y": (5, False), "x": (7, False)}
    assert root["attributes"]["version"] == {"type": "int", "value": [3]}
    assert root["groups"] == ["sub"]

    temp = json.loads((mnt / "temp" / "@metadata.json").read_text())
    assert temp["type"] == "float"
    assert temp["shape"] == [4, 5, 7]
    assert temp["dimensions"] == ["/time", "/y", "/x"]
    assert temp["chunks"] == [2, 3, 4]
    assert temp["fill_value"] == -999.0

    # Attribute files: char attributes raw, others as CDL value lists.
    assert (mnt / "@attributes" / "title").read_bytes() == b"mount test"
    assert (mnt / "@attributes" / "factors").read_text() == "1.5f, 2.5f\n"
    assert (mnt / "temp" / "@attributes" / "long_name").read_text() == "temperature"
    assert (mnt / "sub" / "vals" / "@attributes" / "note").read_text() == "in a group"


def test_every_metadata_file_reads_with_its_size(mounter, nczarr):
    mnt = mounter.mount(nczarr)
    n = 0
    for dirpath, _dirs, files in os.walk(mnt):
        for f in files:
            p = Path(dirpath) / f
            if f == "data":
                continue
            cat = subprocess.run(["cat", str(p)], capture_output=True, check=True)
            assert len(cat.stdout) == p.stat().st_size, p
            if f == "@metadata.json":
                json.loads(cat.stdout)
            n += 1
    assert n > 20


def test_root_header_is_dump_h(mounter, nczarr):
    mnt = mounter.mount(nczarr)
    dump = mounter.run("dump", "-h", nczarr)
    assert dump.returncode == 0, dump.stderr
    assert (mnt / "@header.cdl").read_text() == dump.stdout
    # And ncdump -h's variable lines are in the variable's header.
    assert "float temp(time, y, x) ;" in (mnt / "temp" / "@header.cdl").read_text()


def test_values_equal_netcdf4_python(mounter, nczarr):
    expected = netcdf_values(nczarr)
    mnt = mounter.mount(nczarr)
    assert set(expected) == {"/time", "/temp", "/counts", "/flags", "/big", "/scalar", "/sub/vals"}
    for fqn, want in expected.items():
        got = data_array(mnt, fqn)
        assert got.shape == want.shape, fqn
        np.testing.assert_array_equal(got, want, err_msg=fqn)


def test_random_preads_equal_slices(mounter, nczarr):
    expected = netcdf_values(nczarr)
    mnt = mounter.mount(nczarr)
    rng = random.Random(1234)
    for fqn in ("/temp", "/counts", "/big"):
        want = np.ascontiguousarray(expected[fqn]).astype(expected[fqn].dtype.newbyteorder("="))
        raw = want.tobytes()
        fd = os.open(var_dir(mnt, fqn) / "data", os.O_RDONLY)
        try:
            for _ in range(200):
                off = rng.randrange(0, len(raw) + 8)
                n = rng.randrange(0, 64)
                assert os.pread(fd, n, off) == raw[off:off + n], (fqn, off, n)
        finally:
            os.close(fd)
    # dd of a middle range, as a user would.
    raw = expected["/temp"].astype("=f4").tobytes()
    dd = subprocess.run(["dd", f"if={mnt / 'temp' / 'data'}", "bs=4", "skip=13", "count=50",
                         "status=none"], capture_output=True, check=True)
    assert dd.stdout == raw[52:252]


def test_zarr_python_store(mounter, tmp_path):
    import zarr

    loc = zarr_python_dataset(tmp_path / "zp.zarr")
    mnt = mounter.mount(loc)
    root = zarr.open_group(loc, mode="r")
    np.testing.assert_array_equal(data_array(mnt, "/a"), root["a"][:])
    np.testing.assert_array_equal(data_array(mnt, "/b"), root["b"][:])
    assert (mnt / "b" / "@attributes" / "units").read_text() == "m"
    meta = json.loads((mnt / "a" / "@metadata.json").read_text())
    assert meta["chunks"] == [2, 5]
    assert meta["codecs"]["compressor"] == root["a"].metadata.to_dict()["compressor"]


def test_corrupt_chunk_gives_eio_only_for_its_range(mounter, tmp_path):
    import zarr

    loc = tmp_path / "bad.zarr"
    root = zarr.open_group(str(loc), mode="w", zarr_format=2)
    # Each chunk is 8 whole rows of 1024 int32: 32 KiB, page-aligned in `data`.
    a = root.create_array("a", shape=(64, 1024), chunks=(8, 1024), dtype="<i4", fill_value=0)
    want = np.arange(64 * 1024, dtype="<i4").reshape(64, 1024)
    a[:] = want
    a.attrs["_ARRAY_DIMENSIONS"] = ["r", "c"]
    (loc / "a" / "2.0").write_bytes(b"this is not a compressed chunk")
    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(loc), log=log)
    raw = want.tobytes()
    chunk = 32 * 1024
    fd = os.open(mnt / "a" / "data", os.O_RDONLY)
    try:
        assert os.pread(fd, 2 * chunk, 0) == raw[:2 * chunk]
        assert os.pread(fd, 5 * chunk, 3 * chunk) == raw[3 * chunk:]
        for off, n in ((2 * chunk, 100), (2 * chunk + 5000, 4), (3 * chunk - 4, 8)):
            with pytest.raises(OSError) as err:
                os.pread(fd, n, off)
            assert err.value.errno == errno.EIO
        # A read that starts in good data stops short where the corrupt chunk begins.
        assert os.pread(fd, 3 * chunk, 0) == raw[:2 * chunk]
        assert os.pread(fd, 4096, chunk) == raw[chunk:chunk + 4096]
    finally:
        os.close(fd)
    assert is_mounted(mnt) and daemon_pids(mnt), "the daemon must keep serving"
    assert (mnt / "@metadata.json").read_bytes()
    text = log.read_text()
    assert "a/2.0" in text, text


def test_a_variable_larger_than_a_file_can_be_shows_its_first_2_63_bytes(mounter, tmp_path):
    """Zarr allows shapes whose bytes no file offset reaches; the kernel would take the true
    size for an I/O error on every stat. The file shows what it can, with a log line."""
    import zarr

    loc = tmp_path / "huge.zarr"
    root = zarr.open_group(str(loc), mode="w", zarr_format=2)
    shape = (4_000_000_000, 4_000_000_000)
    a = root.create_array("v", shape=shape, chunks=(2, 4), dtype="<f8", fill_value=-1.0,
                          attributes={"_ARRAY_DIMENSIONS": ["y", "x"]})
    a[1, :4] = [1.5, 2.5, 3.5, 4.5]
    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(loc), log=log)
    size = (mnt / "v" / "data").stat().st_size
    assert size == 2**63 - 8
    with open(mnt / "v" / "data", "rb") as f:
        f.seek(shape[1] * 8)
        assert np.frombuffer(f.read(40), "<f8").tolist() == [1.5, 2.5, 3.5, 4.5, -1.0]
    assert "more bytes than a file can address" in log.read_text()


def test_umount_stops_the_daemon(mounter, nczarr):
    mnt = mounter.mount(nczarr)
    pids = daemon_pids(mnt)
    assert len(pids) == 1
    subprocess.run(["umount", str(mnt)], check=True)
    assert not is_mounted(mnt)
    assert wait_until(lambda: not Path(f"/proc/{pids[0]}").exists()), "daemon still running"


def descriptors_of(pid: int) -> list[str]:
    return [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]


def test_a_daemon_keeps_no_descriptor_of_its_caller(mounter, nczarr):
    """daemon(7): a daemon closes what it inherited beyond stdin, stdout and stderr. Kept, a
    pipe open in the caller beside stdout (`nczarrfs mount ... 7>&1 | cat`) had its reader
    wait for the end of the mount."""
    mnt = mounter.mountpoint()
    read_end, write_end = os.pipe()
    try:
        r = mounter.run("mount", "-o", "ro", nczarr, str(mnt), pass_fds=(write_end,))
    finally:
        os.close(write_end)
    assert r.returncode == 0, r.stderr
    pipe = os.readlink(f"/proc/self/fd/{read_end}")
    (daemon,) = daemon_pids(mnt)
    assert pipe not in descriptors_of(daemon)
    # No writer is left, so the reader sees the end at once.
    assert os.read(read_end, 1) == b""
    os.close(read_end)
    assert (mnt / "@attributes" / "title").read_text() == "mount test"


def test_in_the_foreground_the_callers_descriptors_stay_open(binary, tmp_path, nczarr):
    """`-f` is an ordinary program, not a daemon: what it inherits it keeps."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    read_end, write_end = os.pipe()
    p = subprocess.Popen([str(binary), "mount", "-f", nczarr, str(mnt)], pass_fds=(write_end,))
    try:
        assert wait_until(lambda: is_mounted(mnt) or p.poll() is not None)
        assert os.readlink(f"/proc/self/fd/{write_end}") in descriptors_of(p.pid)
    finally:
        os.close(write_end)
        os.close(read_end)
        p.send_signal(signal.SIGTERM)
        p.wait(30)
        unmount(mnt)


def test_auto_unmount_clears_the_mount_point_of_a_killed_daemon(mounter, nczarr):
    mnt = mounter.mount(nczarr, "auto_unmount")
    # This mount goes through fusermount3, which splits options at commas: the location's
    # comma (`#mode=nczarr,file`) must reach the mount table whole.
    with open("/proc/self/mounts") as f:
        source = next(line.split()[0] for line in f if line.split()[1] == str(mnt.resolve()))
    assert source.replace("\\043", "#") == nczarr
    want = netcdf_values(nczarr)
    assert np.array_equal(data_array(mnt, "/temp"), want["/temp"])
    pids = daemon_pids(mnt)
    assert len(pids) == 1
    os.kill(pids[0], signal.SIGKILL)
    assert wait_until(lambda: not is_mounted(mnt), 20), "still mounted after the daemon died"
    assert list(mnt.iterdir()) == []


def test_without_auto_unmount_a_killed_daemon_leaves_a_dead_mount_point(mounter, nczarr):
    """The behaviour auto_unmount exists for: the kernel keeps the mount of a dead daemon,
    and every access fails with ENOTCONN until it is unmounted."""
    mnt = mounter.mount(nczarr)
    pids = daemon_pids(mnt)
    os.kill(pids[0], signal.SIGKILL)
    assert wait_until(lambda: not Path(f"/proc/{pids[0]}/fd").exists(), 20)
    assert is_mounted(mnt)
    with pytest.raises(OSError) as err:
        os.listdir(mnt)
    assert err.value.errno == errno.ENOTCONN
    r = mounter.run("mount", nczarr, str(mnt))
    assert r.returncode != 0
    assert "daemon that has died" in r.stderr and f"fusermount3 -u {mnt}" in r.stderr, r.stderr


def test_a_second_mount_on_a_mount_point_is_refused(mounter, nczarr):
    """A second mount would hide the first, whose daemon would go on running unseen."""
    mnt = mounter.mount(nczarr)
    r = mounter.run("mount", nczarr, str(mnt))
    assert r.returncode != 0
    assert f"is mounted on {mnt} already" in r.stderr, r.stderr
    assert len(daemon_pids(mnt)) == 1
    assert (mnt / "@attributes" / "title").read_text() == "mount test"


def test_sigterm_unmounts_and_exits_zero(binary, tmp_path, nczarr):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    sock_path = tmp_path / "notify"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(str(sock_path))
    sock.settimeout(20)
    env = dict(os.environ, NOTIFY_SOCKET=str(sock_path))
    proc = subprocess.Popen([str(binary), "mount", "-f", nczarr, str(mnt)], env=env,
                            stderr=subprocess.PIPE)
    try:
        assert sock.recv(64) == b"READY=1"
        assert is_mounted(mnt)
        assert (mnt / "flags" / "data").read_bytes() == bytes(range(0, 210, 30))
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0, proc.stderr.read()
        assert not is_mounted(mnt)
    finally:
        if proc.poll() is None:
            proc.kill()
        unmount(mnt)
        sock.close()


@pytest.mark.parametrize("args, message", [
    (["/nonexistent/dataset.zarr"], "nonexistent"),
    (["-o", "bogus_option"], "bogus_option"),
    (["-o", "cache_size=lots"], "cache_size"),
    (["{bogus_mode}"], 'unknown mode word(s) "bogus"'),
])
def test_mount_failures_are_reported(mounter, nczarr, args, message):
    mnt = mounter.mountpoint()
    args = [a.format(bogus_mode=nczarr.replace("#mode=", "#mode=bogus,")) for a in args]
    if args[0].startswith("/") or "#" in args[0]:
        full = ["mount", *args, str(mnt)]
    else:
        full = ["mount", *args, nczarr, str(mnt)]
    r = mounter.run(*full)
    # mount(8)'s code for a helper's incorrect invocation, a location of the wrong form too.
    assert r.returncode == 1, r.stderr
    assert message in r.stderr
    assert not is_mounted(mnt)


def test_a_missing_mount_point_is_named_as_the_mount_point(mounter, nczarr, tmp_path):
    missing = tmp_path / "nonexist"
    r = mounter.run("mount", nczarr, str(missing))
    assert r.returncode == 1
    assert f"mount point {missing}: No such file or directory" in r.stderr, r.stderr


def test_nofail_forgives_only_a_dataset_that_does_not_exist(mounter, tmp_path):
    """As mount(8)'s nofail for a device that does not exist: the command succeeds quietly
    with nothing mounted. Anything else that fails a mount still fails it."""
    mnt = mounter.mountpoint()
    r = mounter.run("mount", "-o", "ro,nofail", str(tmp_path / "missing.file"), str(mnt))
    assert (r.returncode, r.stderr) == (0, "")
    assert not is_mounted(mnt)
    (tmp_path / "empty").mkdir()
    r = mounter.run("mount", "-o", "ro,nofail", str(tmp_path / "empty"), str(mnt))
    assert r.returncode == 1 and r.stderr.startswith("nczarrfs: "), r.stderr
    assert not is_mounted(mnt)
    # mount(8) with nofail still says "mount point does not exist" for a missing device.
    r = mounter.run("mount", "-o", "ro,nofail", str(tmp_path / "missing.file"),
                    str(tmp_path / "no-mount-point"))
    assert r.returncode == 1 and "no-mount-point" in r.stderr, r.stderr


def test_not_a_dataset_is_refused(mounter, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    mnt = mounter.mountpoint()
    r = mounter.run("mount", str(empty), str(mnt))
    assert r.returncode != 0 and "not a netCDF/Zarr dataset" in r.stderr
    assert not is_mounted(mnt)


def test_changes_underneath_show_after_ttl(mounter, tmp_path):
    import zarr

    # netCDF4-python cannot reopen an NCZarr URL for writing (it re-creates it), so the
    # dataset is changed with zarr-python.
    loc = zarr_python_dataset(tmp_path / "zp.zarr")
    mnt = mounter.mount(loc, "ttl=0.5")
    assert data_array(mnt, "/a")[3, 4] == 34
    assert "added" not in os.listdir(mnt / "b" / "@attributes")
    root = zarr.open_group(loc, mode="r+")
    root["a"][3, 4] = -1
    root["b"].attrs["added"] = "later"
    time.sleep(1.2)
    assert data_array(mnt, "/a")[3, 4] == -1
    meta = json.loads((mnt / "b" / "@metadata.json").read_text())
    assert meta["attributes"]["added"]["value"] == "later"
    assert (mnt / "b" / "@attributes" / "added").read_text() == "later"


def test_a_user_other_than_root_mounts_through_fusermount3(binary):
    """Users other than root mount through the setuid fusermount3, which splits its options
    at commas; a location with one (`#mode=nczarr,file`) used to break the mount. /dev/fuse
    is opened by the user first, so it gets Debian's usual mode 0666 for the test."""
    nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    home = Path(tempfile.mkdtemp(prefix="nczarrfs-user-", dir="/tmp"))
    mode = os.stat("/dev/fuse").st_mode & 0o777
    try:
        shutil.copytree(REPO / "samples" / "weather.file", home / "weather.file")
        shutil.copy2(binary, home / "nczarrfs")
        (home / "mnt").mkdir()
        for p in [home, *home.rglob("*")]:
            os.chown(p, 65534, 65534)
        home.chmod(0o755)
        url = f"file://{home}/weather.file#mode=nczarr,file"
        os.chmod("/dev/fuse", 0o666)
        r = subprocess.run([*nobody, str(home / "nczarrfs"), "mount", url, str(home / "mnt")],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        header = subprocess.run([*nobody, "cat", str(home / "mnt" / "@header.cdl")],
                                capture_output=True, check=True).stdout
        dump = subprocess.run([str(binary), "dump", "-h", url], capture_output=True,
                              check=True).stdout
        assert header == dump
        subprocess.run([*nobody, "fusermount3", "-u", str(home / "mnt")], check=True)
        assert not is_mounted(home / "mnt")
    finally:
        os.chmod("/dev/fuse", mode)
        unmount(home / "mnt")
        shutil.rmtree(home)


def access_errno(path: Path, mode: int) -> int:
    """access(2)'s errno for `path` and `mode`, 0 when granted."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return 0 if libc.access(os.fsencode(path), mode) == 0 else ctypes.get_errno()


@pytest.mark.parametrize("mode", ["ro", "rw"])
def test_access_follows_the_modes_stat_reports(mounter, nczarr, mode):
    """The kernel grants every access(2) of a filesystem that does not answer it, so `test -x`
    found every 0444 file executable. As on a local filesystem, for root (the owner): X_OK
    where a mode has an execute bit, W_OK where it has the owner's write bit on a rw
    filesystem, EROFS on a read-only one (access(2))."""
    mnt = mounter.mount(nczarr, mode)
    paths = [mnt, *mnt.rglob("*")]
    assert len(paths) > 40
    kinds = set()
    for p in paths:
        st_mode = p.stat().st_mode
        executable = bool(st_mode & stat.S_IXUSR)
        assert access_errno(p, os.X_OK) == (0 if executable else errno.EACCES), p
        assert (subprocess.run(["test", "-x", str(p)]).returncode == 0) == executable, p
        assert access_errno(p, os.R_OK) == 0, p
        writable = mode == "rw" and bool(st_mode & stat.S_IWUSR)
        want_w = 0 if writable else errno.EROFS if mode == "ro" else errno.EACCES
        assert access_errno(p, os.W_OK) == want_w, p
        assert (subprocess.run(["test", "-w", str(p)]).returncode == 0) == writable, p
        kinds.add((stat.S_ISDIR(st_mode), executable, writable))
    # Files and directories, and on a rw mount both writable and read-only ones of each.
    want = {(True, True, False), (False, False, False)}
    if mode == "rw":
        want |= {(True, True, True), (False, False, True)}
    assert kinds == want
    found = subprocess.run(["find", str(mnt), "-type", "f", "-executable"],
                           capture_output=True, text=True, check=True).stdout
    assert found == ""


def test_root_without_cap_sys_admin_is_told_what_mounting_needs(binary, tmp_path):
    """mount(2) refuses root without CAP_SYS_ADMIN (a service's capability bounding set, a
    container), and fuser then tries fusermount3, which the same bounding set stops. The
    location's comma must reach fusermount3 escaped (it once read `file` as an option), and
    the error must say which capability is missing."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    url = f"file://{REPO}/samples/weather.file#mode=nczarr,file"
    r = subprocess.run(["setpriv", "--inh-caps=-all", "--bounding-set=-sys_admin", str(binary),
                        "mount", url, str(mnt)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 1
    assert not is_mounted(mnt)
    assert "unknown option" not in r.stderr, r.stderr
    assert "Operation not permitted" in r.stderr and "CAP_SYS_ADMIN" in r.stderr, r.stderr


def test_a_user_who_cannot_open_dev_fuse_is_told_so(binary):
    """fuser's own open of /dev/fuse failed as if the mount point were "Permission denied".
    In a mount namespace of its own, /dev/fuse is covered by a file only root may open (as a
    0600 /dev/fuse is), leaving the real one alone for everything else running."""
    home = Path(tempfile.mkdtemp(prefix="nczarrfs-devfuse-", dir="/tmp"))
    try:
        shutil.copytree(REPO / "samples" / "weather.file", home / "weather.file")
        shutil.copy2(binary, home / "nczarrfs")
        (home / "mnt").mkdir()
        for p in [home, *home.rglob("*")]:
            os.chown(p, 65534, 65534)
        home.chmod(0o755)
        (home / "fuse").write_bytes(b"")
        os.chown(home / "fuse", 0, 0)
        (home / "fuse").chmod(0o600)
        script = ('mount --bind "$1/fuse" /dev/fuse && exec setpriv --reuid=65534 '
                  '--regid=65534 --clear-groups "$1/nczarrfs" mount "$1/weather.file" "$1/mnt"')
        r = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                            script, "sh", str(home)], capture_output=True, text=True, timeout=60)
        assert r.returncode == 1
        assert r.stderr.startswith(
            f"nczarrfs: cannot open /dev/fuse: {os.strerror(errno.EACCES)}"), r.stderr
        assert "mount point" not in r.stderr and str(home / "mnt") not in r.stderr
    finally:
        unmount(home / "mnt")
        shutil.rmtree(home)


def test_mount_helper_as_mount8_calls_it(binary, tmp_path, nczarr):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    log = tmp_path / "helper.log"
    env = dict(os.environ, NCZARRFS=str(binary))
    try:
        r = subprocess.run([str(REPO / "scripts" / "mount.nczarrfs"), nczarr, str(mnt), "-o",
                            f"ro,nofail,_netdev,x-systemd.automount,log_file={log}"],
                           env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert is_mounted(mnt)
        assert (mnt / "@attributes" / "title").read_text() == "mount test"
    finally:
        unmount(mnt)


def test_mount_helper_options_are_not_file_name_patterns(binary, tmp_path, nczarr):
    """`fsname=*` stays `*`, even where a file matches it."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    (cwd / "fsname=SURPRISE").touch()
    env = dict(os.environ, NCZARRFS=str(binary))
    try:
        r = subprocess.run([str(REPO / "scripts" / "mount.nczarrfs"), nczarr, str(mnt), "-o",
                            "ro,fsname=*"], env=env, cwd=cwd, capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 0, r.stderr
        with open("/proc/self/mounts") as f:
            sources = [ln.split()[0] for ln in f if ln.split()[1] == str(mnt)]
        assert sources == ["*"], sources
    finally:
        unmount(mnt)


def test_mount_helper_takes_every_o_and_refuses_t_without_a_type(binary, tmp_path, nczarr):
    """Each -o adds options (the last one used to replace the others); `-t` without its
    argument gets the usage line, not a shell error."""
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    helper = str(REPO / "scripts" / "mount.nczarrfs")
    env = dict(os.environ, NCZARRFS=str(binary))
    r = subprocess.run([helper, nczarr, str(mnt), "-t"], env=env, capture_output=True,
                       text=True, timeout=60)
    assert (r.returncode, r.stderr) == (
        1, "usage: mount.nczarrfs LOCATION MOUNTPOINT [-sfnv] [-N NAMESPACE] [-o OPTIONS]\n")
    try:
        r = subprocess.run([helper, nczarr, str(mnt), "-o", "ro", "-ofsname=first", "-o",
                            "noexec"], env=env, capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        with open("/proc/self/mounts") as f:
            fields = [ln.split() for ln in f if ln.split()[1] == str(mnt)]
        assert len(fields) == 1 and fields[0][0] == "first", fields
        assert {"ro", "noexec"} <= set(fields[0][3].split(",")), fields
    finally:
        unmount(mnt)


def test_systemd_units_verify(binary, tmp_path):
    if shutil.which("systemd-analyze") is None:
        pytest.fail("systemd-analyze is missing: install the Debian package systemd")
    units = tmp_path / "units"
    units.mkdir()
    for f in (REPO / "systemd").iterdir():
        text = f.read_text().replace("/usr/local/bin/nczarrfs", str(binary))
        (units / f.name).write_text(text)
    shutil.copy(units / "nczarrfs@.service", units / "nczarrfs@example.service")
    r = subprocess.run(["systemd-analyze", "verify", "--man=no",
                        str(units / "nczarrfs@example.service"), str(units / "mnt-example.mount"),
                        str(units / "mnt-example.automount")],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "nczarrfs" not in r.stderr, r.stderr


def test_a_variable_with_an_unknown_codec_is_named_unreadable(mounter, tmp_path):
    """zarr-python writes numcodecs' Delta, which nczarrfs has no codec for: the variable's
    metadata says why its reads fail, and a rw mount still serves and writes the others."""
    import numcodecs
    import zarr

    loc = tmp_path / "delta.zarr"
    root = zarr.open_group(str(loc), mode="w", zarr_format=2)
    a = root.create_array("a", shape=(4,), chunks=(2,), dtype="<f8", compressors=None,
                          filters=[numcodecs.Delta("<f8")], attributes={"_ARRAY_DIMENSIONS": ["x"]})
    a[:] = [1, 2, 3, 4]
    b = root.create_array("b", shape=(4,), chunks=(2,), dtype="<i4",
                          attributes={"_ARRAY_DIMENSIONS": ["x"]})
    b[:] = [5, 6, 7, 8]
    mnt = mounter.mount(str(loc))
    meta = json.loads((mnt / "a" / "@metadata.json").read_text())
    assert meta["unreadable"] == 'unknown codec "delta"'
    assert json.loads((mnt / "b" / "@metadata.json").read_text())["unreadable"] is None
    with pytest.raises(OSError) as err:
        (mnt / "a" / "data").read_bytes()
    assert err.value.errno == errno.EIO
    rw = mounter.mount(str(loc), "rw")
    with pytest.raises(OSError):
        with open(rw / "a" / "data", "r+b") as f:
            f.write(np.float64(9).tobytes())
    with open(rw / "b" / "data", "r+b") as f:
        f.write(np.int32(-1).tobytes())
    unmount(rw)
    unmount(mnt)
    root = zarr.open_group(str(loc), mode="r")
    assert root["b"][:].tolist() == [-1, 6, 7, 8]
    assert root["a"][:].tolist() == [1, 2, 3, 4]


def test_a_codec_parameter_nczarrfs_refuses_is_named_unreadable(mounter, tmp_path):
    """A known codec with a parameter that decoding needs and nczarrfs cannot take (a shuffle
    of -4-byte elements) fails every read: the metadata says why, as it does for an unknown
    codec, where it said null. A parameter only encoding uses (a zlib level of 10) does not
    stop reads (see test_mount_rw.py)."""
    import numcodecs
    import zarr

    loc = tmp_path / "level.zarr"
    root = zarr.open_group(str(loc), mode="w", zarr_format=2)
    a = root.create_array("a", shape=(4,), chunks=(2,), dtype="<i4",
                          filters=[numcodecs.Shuffle(elementsize=4)], compressors=None,
                          attributes={"_ARRAY_DIMENSIONS": ["x"]})
    a[:] = [1, 2, 3, 4]
    zarray = loc / "a" / ".zarray"
    meta = json.loads(zarray.read_text())
    meta["filters"][0]["elementsize"] = -4
    zarray.write_text(json.dumps(meta))
    mnt = mounter.mount(str(loc))
    why = json.loads((mnt / "a" / "@metadata.json").read_text())["unreadable"]
    assert why is not None and "shuffle" in why and "elementsize" in why, why
    with pytest.raises(OSError) as err:
        (mnt / "a" / "data").read_bytes()
    assert err.value.errno == errno.EIO
    unmount(mnt)


def test_demo_takes_a_relative_mount_point_from_the_callers_directory(binary, tmp_path):
    """`scripts/demo mm` run from a directory mounts at that directory's `mm`, as any command
    takes a relative path, not in the repository. A copy of the repository with a `cargo` that
    builds nothing keeps the test from building."""
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "scripts", repo / "scripts")
    shutil.copytree(REPO / "samples" / "weather.file", repo / "samples" / "weather.file")
    (repo / "target" / "release").mkdir(parents=True)
    (repo / "target" / "release" / "nczarrfs").symlink_to(binary)
    fakebin = tmp_path / "fakebin"
    fakebin.mkdir()
    (fakebin / "cargo").write_text("#!/bin/sh\nexit 0\n")
    (fakebin / "cargo").chmod(0o755)
    caller = tmp_path / "caller"
    caller.mkdir()
    env = dict(os.environ, PATH=f"{fakebin}:{os.environ['PATH']}")
    try:
        r = subprocess.run([str(repo / "scripts" / "demo"), "mm"], cwd=caller, env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert is_mounted(caller / "mm")
        assert not (repo / "mm").exists()
        assert (caller / "mm" / "@header.cdl").read_text().startswith("netcdf weather")
    finally:
        unmount(caller / "mm")
        unmount(repo / "mm")


def test_a_listing_of_many_requests_is_whole_and_follows_changes(mounter, tmp_path):
    """A directory of thousands of entries takes the kernel many readdir requests, each
    continuing at an offset: every entry comes exactly once, with the right type, both with
    `ls -f` (readdir) and `os.scandir` (readdirplus), and a change of the dataset between two
    listings shows in the next one."""
    store = tmp_path / "many.zarr"
    store.mkdir()
    (store / ".zgroup").write_text('{"zarr_format": 2}')
    array = json.dumps({"zarr_format": 2, "shape": [2], "chunks": [2], "dtype": "<i2",
                        "compressor": None, "fill_value": 0, "filters": None, "order": "C"})
    names = {f"v{i:05d}" for i in range(3000)}
    for name in names:
        (store / name).mkdir()
        (store / name / ".zarray").write_text(array)
    mnt = mounter.mount(f"file://{store}#mode=zarr,file", "rw")
    own = {"@header.cdl", "@metadata.json", "@attributes"}
    listed = subprocess.run(["ls", "-f", str(mnt)], capture_output=True, text=True,
                            check=True).stdout.split()
    assert sorted(listed) == sorted(names | own | {".", ".."})
    with os.scandir(mnt) as it:
        entries = {e.name: e.is_dir() for e in it}
    assert entries.keys() == names | own
    assert all(entries[n] for n in names) and not entries["@header.cdl"]
    (mnt / "added").mkdir()
    os.rename(mnt / "v00007", mnt / "renamed")
    assert set(os.listdir(mnt)) == (names - {"v00007"}) | {"added", "renamed"} | own
