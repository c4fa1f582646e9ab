"""One writer per dataset: gen and copy against a rw mount, a dataset replaced under a rw
mount, writers of nested pure Zarr groups, mount points that would hide the dataset from its
own daemon, and the writer right after `fusermount3 -u`. netCDF4-python and zarr-python read
what was stored."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from conftest import daemon_pids, is_mounted, unmount, wait_until  # noqa: E402
from datasets import nczarr_dataset  # noqa: E402

BUSY = "another process is writing this"

CDL = """netcdf other {
dimensions:
    n = 3 ;
variables:
    int z(n) ;
data:
    z = 7, 8, 9 ;
}
"""


def umount_and_wait(mnt: Path) -> None:
    pids = daemon_pids(mnt)
    unmount(mnt)
    assert not is_mounted(mnt)
    assert wait_until(lambda: not any(Path(f"/proc/{p}").exists() for p in pids), 30)


def write_attribute(mnt: Path, name: str, text: str, group: str = "") -> None:
    """Creates an attribute file, which stores the metadata when closed."""
    path = mnt / group / "@attributes" / name if group else mnt / "@attributes" / name
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def netcdf_content(url: str) -> tuple[set, dict]:
    import netCDF4

    with netCDF4.Dataset(url) as ds:
        return set(ds.variables), {k: ds.getncattr(k) for k in ds.ncattrs()}


def test_gen_and_copy_do_not_replace_a_dataset_a_rw_mount_writes(mounter, tmp_path):
    """gen and copy used to replace the dataset under a rw mount, which then rewrote the new
    dataset's metadata from its view of the old one (netCDF4-python could not open it)."""
    path = tmp_path / "ds.file"
    url = nczarr_dataset(path)
    source = tmp_path / "src.file"
    made = mounter.run("gen", "-o", str(source), "-", input=CDL)
    assert made.returncode == 0, made.stderr
    mnt = mounter.mount(url, "rw")
    gen = mounter.run("gen", "-o", str(path), "-", input=CDL)
    assert gen.returncode == 1 and BUSY in gen.stderr, gen
    copied = mounter.run("copy", str(source), str(path))
    assert copied.returncode == 1 and BUSY in copied.stderr, copied
    write_attribute(mnt, "late", "forty-two")
    umount_and_wait(mnt)
    names, attrs = netcdf_content(url)
    assert {"time", "temp", "counts", "flags", "big", "scalar"} <= names
    assert attrs["late"] == "forty-two"
    assert attrs["title"] == "mount test"
    # With the writer gone, the dataset can be replaced.
    copied = mounter.run("copy", str(source), str(path))
    assert copied.returncode == 0, copied.stderr
    assert netcdf_content(f"file://{path}#mode=nczarr,file")[0] == {"z"}


def test_gen_refuses_to_replace_a_zip_archive_a_rw_mount_writes(mounter, tmp_path):
    archive = tmp_path / "ds.zip"
    made = mounter.run("gen", "-k", "zip", "-o", str(archive), "-", input=CDL)
    assert made.returncode == 0, made.stderr
    url = f"file://{archive}#mode=nczarr,zip"
    mnt = mounter.mount(url, "rw")
    gen = mounter.run("gen", "-k", "zip", "-o", str(archive), "-",
                      input=CDL.replace("7, 8, 9", "1, 1, 1"))
    assert gen.returncode == 1 and BUSY in gen.stderr, gen
    write_attribute(mnt, "late", "kept")
    umount_and_wait(mnt)
    import zarr

    with zarr.storage.ZipStore(archive, mode="r") as store:
        # netcdf-c's zip layout: the dataset is in a folder named as the archive.
        group = zarr.open_group(store, mode="r", path="ds", zarr_format=2)
        assert group["z"][:].tolist() == [7, 8, 9]
        assert group.attrs["late"] == "kept"


REPLACED = "the dataset was replaced or removed by another program"


@pytest.mark.parametrize("old_one", ["removed", "kept"])
def test_a_rw_mount_stops_writing_a_dataset_replaced_under_it(mounter, tmp_path, old_one):
    """Another program replaces the dataset (new directory at the path, the old one removed,
    or kept under another name): the mount's metadata stores fail with EBUSY instead of
    rewriting the new dataset from the old one's view, so a writer of the new dataset loses
    nothing. Each failed store is logged once, naming the replacement."""
    path = tmp_path / "ds.file"
    url = nczarr_dataset(path)
    replacement = tmp_path / "new.file"
    made = mounter.run("gen", "-o", str(replacement), "-", input=CDL)
    assert made.returncode == 0, made.stderr
    log = tmp_path / "first.log"
    first = mounter.mount(url, "rw", log=log)
    os.rename(path, tmp_path / "old.file")
    os.rename(replacement, path)
    if old_one == "removed":
        shutil.rmtree(tmp_path / "old.file")
    with pytest.raises(OSError) as refused:
        write_attribute(first, "from_first", "lost")
    assert refused.value.errno == errno.EBUSY
    errors = [line for line in log.read_text().splitlines() if " ERROR " in line]
    assert errors, log.read_text()
    # One line per failed store, each naming the replacement; nothing names a file as
    # missing.
    assert all(line.count(REPLACED) == 1 for line in errors), errors
    assert all("attributes/from_first" in line for line in errors), errors
    second = mounter.mount(url, "rw")
    write_attribute(second, "from_second", "kept")
    with pytest.raises(OSError) as again:
        write_attribute(first, "from_first_again", "lost")
    assert again.value.errno == errno.EBUSY
    umount_and_wait(second)
    umount_and_wait(first)
    import netCDF4

    with netCDF4.Dataset(url) as ds:
        assert set(ds.variables) == {"z"}
        assert ds["z"][:].tolist() == [7, 8, 9]
        assert {k: ds.getncattr(k) for k in ds.ncattrs()} == {"from_second": "kept"}


@pytest.fixture
def pure_zarr(tmp_path) -> Path:
    """A zarr-python v2 store with groups `sub` (holding `deep`) and `side`, each with an
    array."""
    import zarr

    path = tmp_path / "pz.zarr"
    root = zarr.open_group(str(path), mode="w", zarr_format=2)
    root.attrs["level"] = "root"
    for name in ("sub", "side", "sub/deep"):
        g = root.create_group(name)
        a = g.create_array("v", shape=(4,), chunks=(2,), dtype="<i4", fill_value=0)
        a[:] = np.arange(4, dtype="<i4")
        a.attrs["_ARRAY_DIMENSIONS"] = ["n"]
    return path


def put(mounter, location: str, var: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(mounter.binary), "put", location, var, "--start", "1",
                           "--count", "1", "-i", "-"],
                          input=np.int32(99).tobytes(), capture_output=True, timeout=60,
                          check=False)


def test_writers_of_nested_zarr_groups_exclude_each_other(mounter, pure_zarr):
    """A rw mount of a pure Zarr root and one of its subgroup were both accepted; the root's
    mount then rewrote the subgroup's attributes from its own view, losing the other's."""
    root = str(pure_zarr)
    sub = str(pure_zarr / "sub")
    deep = str(pure_zarr / "sub" / "deep")
    m_root = mounter.mount(root, "rw")
    for location in (sub, deep):
        nested = mounter.run("mount", "-o", "rw", location, str(mounter.mountpoint()))
        assert nested.returncode == 1 and BUSY in nested.stderr, nested
        refused = put(mounter, location, "v")
        assert refused.returncode == 1 and BUSY.encode() in refused.stderr, refused
    write_attribute(m_root, "r1", "one", group="sub")
    umount_and_wait(m_root)

    m_sub = mounter.mount(sub, "rw")
    for location in (root, deep):
        other = mounter.run("mount", "-o", "rw", location, str(mounter.mountpoint()))
        assert other.returncode == 1 and BUSY in other.stderr, other
        refused = put(mounter, location, "v" if location == deep else "sub/v")
        assert refused.returncode == 1 and BUSY.encode() in refused.stderr, refused
    gen = mounter.run("gen", "-k", "zarr", "-o", root, "-", input=CDL)
    assert gen.returncode == 1 and BUSY in gen.stderr, gen
    # A group beside it is another writer's.
    m_side = mounter.mount(str(pure_zarr / "side"), "rw")
    write_attribute(m_side, "s", "side")
    write_attribute(m_sub, "s1", "two")
    umount_and_wait(m_side)
    umount_and_wait(m_sub)
    stored = put(mounter, sub, "deep/v")
    assert stored.returncode == 0, stored.stderr

    import zarr

    group = zarr.open_group(root, mode="r")
    assert dict(group["sub"].attrs) == {"r1": "one", "s1": "two"}
    assert dict(group["side"].attrs) == {"s": "side"}
    assert dict(group.attrs) == {"level": "root"}
    assert group["sub/deep/v"][:].tolist() == [0, 99, 2, 3]
    assert group["sub/v"][:].tolist() == [0, 1, 2, 3]


def test_mount_points_that_hide_the_dataset_are_refused(mounter, tmp_path):
    """A mount point inside the dataset made reads of its chunks see the mount (silent fill
    values) and stored a write reported as failed; one equal to the dataset's directory or
    holding it hung the first metadata change, unkillably. Only the refusal is tried here."""
    path = tmp_path / "x" / "ds.file"
    path.parent.mkdir()
    url = nczarr_dataset(path)
    (tmp_path / "link").symlink_to(path)
    archive = tmp_path / "z" / "ds.zip"
    archive.parent.mkdir()
    made = mounter.run("gen", "-k", "zip", "-o", str(archive), "-", input=CDL)
    assert made.returncode == 0, made.stderr
    cases = [
        (str(path), path / "temp", "inside"),
        (url, path / "sub", "inside"),
        (str(tmp_path / "link"), path / "counts", "inside"),
        (str(path), path, "own directory"),
        (str(tmp_path / "link"), path, "own directory"),
        (str(path), path.parent, "holds"),
        (str(path), tmp_path, "holds"),
        (str(archive), archive.parent, "holds"),
    ]
    bound = tmp_path / "bound"
    bound.mkdir()
    if subprocess.run(["mount", "--bind", str(path), str(bound)],
                      capture_output=True).returncode == 0:
        cases += [(str(path), bound / "temp", "inside"), (str(bound), path / "flags", "inside")]
    try:
        for options in (["-o", "ro"], ["-o", "rw"]):
            for location, mountpoint, why in cases:
                r = mounter.run("mount", *options, location, str(mountpoint))
                mounted = is_mounted(mountpoint)
                if mounted:
                    mounter.mounts.append(mountpoint)
                assert r.returncode == 1 and not mounted, (location, mountpoint, r)
                assert why in r.stderr and "choose a mount point outside" in r.stderr, r.stderr
    finally:
        if is_mounted(bound):
            subprocess.run(["umount", str(bound)], check=False)
    import netCDF4

    with netCDF4.Dataset(url) as ds:
        assert ds["counts"][:].tolist() == (np.arange(35).reshape(5, 7) * -3).tolist()


def test_the_next_writer_after_fusermount3_u_is_not_refused(mounter, tmp_path, binary):
    """`fusermount3 -u` returns before the daemon has stored its last changes and let go of
    the lock: the next writer used to be refused, naming a writer that no longer exists. It
    now waits for that daemon."""
    import netCDF4

    path = tmp_path / "big.file"
    url = f"file://{path}#mode=nczarr,file"
    width = 1 << 18
    with netCDF4.Dataset(url, "w", format="NETCDF4") as ds:
        ds.createDimension("t", None)
        ds.createDimension("x", width)
        ds.createVariable("v", "i4", ("t", "x"), chunksizes=(1, width))
    mnt = mounter.mountpoint()
    for run in range(4):
        r = mounter.run("mount", "-o", "rw,cache_size=1G", url, str(mnt))
        assert r.returncode == 0, (run, r.stderr)
        fd = os.open(mnt / "v" / "data", os.O_WRONLY)
        try:
            block = np.full(1 << 18, run + 1, dtype="<i4").tobytes()
            for k in range(64):
                os.pwrite(fd, block, k << 20)
        finally:
            os.close(fd)
        subprocess.run(["fusermount3", "-u", str(mnt)], check=True, timeout=60)
        # The next writer, at once: a put, or another rw mount.
        if run % 2:
            stored = subprocess.run(
                [str(binary), "put", url, "v", "--start", f"{run},0", "--count", "1,1",
                 "-i", "-"], input=np.int32(-run).tobytes(), capture_output=True, timeout=60,
                check=False)
            assert stored.returncode == 0, (run, stored.stderr)
        else:
            again = mounter.run("mount", "-o", "rw", url, str(mnt))
            assert again.returncode == 0, (run, again.stderr)
            umount_and_wait(mnt)
    with netCDF4.Dataset(url) as ds:
        v = ds["v"][:]
    # Every run rewrote all 64 records; the last put wrote one value after the last run.
    expected = np.full((64, width), 4, dtype="i4")
    expected[3, 0] = -3
    assert v.shape == expected.shape
    assert np.array_equal(np.asarray(v), expected)


CONNECTIONS = Path("/sys/fs/fuse/connections")


def fuse_connection_of(mnt: Path) -> int:
    """The FUSE connection number of the mount at `mnt`: the minor of its device `0:N`."""
    target = str(mnt.resolve())
    devices = [line.split()[2] for line in Path("/proc/self/mountinfo").read_text().splitlines()
               if line.split()[4] == target]
    assert devices and devices[-1].startswith("0:"), devices
    return int(devices[-1].split(":")[1])


def test_a_writer_waits_for_an_unmounted_daemon_whose_connection_number_is_taken(
        mounter, tmp_path, binary):
    """The kernel gives the number of an ended FUSE connection to the next FUSE mount: a
    writer waiting for an unmounted daemon still storing its last changes used to take such
    a mount for the daemon's own, and was refused at once as if by a live writer. The daemon,
    stopped (SIGSTOP) in place of a slow last store, is waited for until it goes on."""
    import signal
    import threading

    mounts = [line.split()[1:3] for line in Path("/proc/self/mounts").read_text().splitlines()]
    if [str(CONNECTIONS), "fusectl"] not in mounts:
        # What the daemon's check reads; systemd mounts it at boot, as root may here.
        subprocess.run(["mount", "-t", "fusectl", "fusectl", str(CONNECTIONS)], check=True)
    path = tmp_path / "ds.file"
    other = tmp_path / "other.file"
    for target in (path, other):
        made = mounter.run("gen", "-o", str(target), "-", input=CDL)
        assert made.returncode == 0, made.stderr
    mnt = mounter.mount(str(path), "rw")
    [daemon] = daemon_pids(mnt)
    number = fuse_connection_of(mnt)
    resume = threading.Timer(1.0, os.kill, (daemon, signal.SIGCONT))
    os.kill(daemon, signal.SIGSTOP)
    try:
        subprocess.run(["fusermount3", "-u", str(mnt)], check=True, timeout=60)
        # The lowest free number goes to the next mount: at most `number` mounts take it
        # (or another program's mount does meanwhile).
        taken = False
        for _ in range(number + 8):
            mounter.mount(str(other))
            taken = (CONNECTIONS / str(number)).exists()
            if taken:
                break
        assert taken, f"no FUSE mount took the connection number {number}"
        resume.start()
        put = subprocess.run([str(binary), "put", str(path), "z", "--count", "1", "-i", "-"],
                             input=np.int32(42).tobytes(), capture_output=True, timeout=60,
                             check=False)
    finally:
        resume.cancel()
        os.kill(daemon, signal.SIGCONT)
    assert put.returncode == 0, put.stderr
    shown = mounter.run("dump", "-v", "z", str(path))
    assert shown.returncode == 0, shown.stderr
    assert "z = 42, 8, 9 ;" in shown.stdout, shown.stdout


def test_a_rw_mount_does_not_rewrite_a_zip_archive_rewritten_in_place(mounter, tmp_path):
    """zarr-python's ZipStore(mode="a") appends to the archive a rw mount writes (same file,
    the mount's lock ignored): the mount's next store fails with EBUSY and leaves the archive
    as zarr-python wrote it, instead of rewriting it from the offsets it read before."""
    import zarr

    archive = tmp_path / "ds.zip"
    made = mounter.run("gen", "-k", "zarr,zip", "-o", str(archive), "-", input=CDL)
    assert made.returncode == 0, made.stderr
    inode = archive.stat().st_ino
    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(archive), "rw", log=log)
    with zarr.storage.ZipStore(archive, mode="a") as store:
        zarr.open_group(store, mode="a", zarr_format=2).create_array(
            "extra", shape=(2,), chunks=(2,), dtype="<i4", fill_value=0)[:] = [4, 5]
    assert archive.stat().st_ino == inode
    appended = archive.read_bytes()
    with pytest.raises(OSError) as refused:
        write_attribute(mnt, "late", "lost")
    assert refused.value.errno == errno.EBUSY
    umount_and_wait(mnt)
    assert "rewritten in place by another program" in log.read_text()
    assert archive.read_bytes() == appended
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []
    with zarr.storage.ZipStore(archive, mode="r") as store:
        group = zarr.open_group(store, mode="r", zarr_format=2)
        assert group["z"][:].tolist() == [7, 8, 9]
        assert group["extra"][:].tolist() == [4, 5]
        assert "late" not in group.attrs


def test_reads_of_a_zip_archive_rewritten_in_place_fail_with_ebusy(mounter, tmp_path):
    """An Info-ZIP archive of a netCDF4-python NCZarr dataset, mounted rw, that another
    program rewrites in place (`cp` of a Python-zipfile archive of the same directory: its
    entries at other offsets): a write into part of a chunk (which reads the chunk) and a read
    of the `data` file fail with EBUSY and the log tells why, as a flush does, instead of an EIO
    about a bad local file header."""
    import zipfile

    import netCDF4

    folder = tmp_path / "nc"
    with netCDF4.Dataset(f"file://{folder}#mode=nczarr,file", "w") as ds:
        ds.createDimension("x", 10)
        ds.createVariable("v", "i4", ("x",))[:] = np.arange(10, dtype="i4")
    archive = tmp_path / "ds.zip"
    subprocess.run(["zip", "-q", "-r", str(archive), "nc"], cwd=tmp_path, check=True)
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as z:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                z.write(path, str(path.relative_to(tmp_path)))
    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(archive), "rw", log=log)
    subprocess.run(["cp", str(other), str(archive)], check=True)
    fd = os.open(mnt / "v" / "data", os.O_WRONLY)
    try:
        with pytest.raises(OSError) as refused:
            os.pwrite(fd, np.int32(42).tobytes(), 4)
        assert refused.value.errno == errno.EBUSY
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
    with pytest.raises(OSError) as refused:
        (mnt / "v" / "data").read_bytes()
    assert refused.value.errno == errno.EBUSY
    umount_and_wait(mnt)
    text = log.read_text()
    assert "rewritten in place by another program" in text, text
    assert "local file header" not in text, text
    assert archive.read_bytes() == other.read_bytes()
