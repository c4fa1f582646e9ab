"""`rw` mounts whose stores refuse what a write, `mkdir` or `mv` asks for: the call fails, and
the mount lists and shows what storage holds, as zarr-python and netCDF4-python read it once
unmounted. A shell redirection (`printf … > FILE`) closes a duplicate of the file while it is
still empty before the text comes; that close stores nothing, so a refused text leaves no
attribute where the file was new and the old value where it was rewritten. Expected values come from first principles (a refused
write changes nothing) and the readers named."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_mount_rw import umount_and_wait  # noqa: E402

CDL = """netcdf d {
dimensions:
  x = 2 ;
variables:
  float v(x) ;
    v:keep = "k" ;
:title = "t" ;
data:
  v = 1, 2 ;
}
"""


def shown_attrs(d: Path) -> dict[str, str]:
    """The char attributes the mount shows on the group or variable directory `d`: its
    `@attributes` listing with each file's text, checked to be what `@metadata.json` and
    `@header.cdl` show too."""
    files = {n: (d / "@attributes" / n).read_text() for n in os.listdir(d / "@attributes")}
    meta = json.loads((d / "@metadata.json").read_text())["attributes"]
    assert {n: a["value"] for n, a in meta.items() if a["type"] == "char"} == files
    prefix = f"\t\t{d.name if d.name == 'v' else ''}:"
    lines = [line for line in (d / "@header.cdl").read_text().splitlines()
             if line.startswith(prefix)]
    assert lines == [f'{prefix}{n} = "{v}" ;' for n, v in files.items()]
    return files


def shell_write(path: Path, text: str) -> None:
    """`printf TEXT > PATH` in bash, which does not check the close (it succeeds either way)."""
    subprocess.run(["bash", "-c", 'printf "$0" > "$1"', text, str(path)], check=True)


def refused_write(path: Path, data: bytes, flags: int = os.O_TRUNC) -> int:
    """Writes `data` to the attribute file `path` (created if need be) in one open and
    returns the errno of its failed close."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | flags, 0o644)
    os.write(fd, data)
    with pytest.raises(OSError) as err:
        os.close(fd)
    return err.value.errno


@pytest.mark.parametrize("kind", ["zarr", "nczarr,v3"])
@pytest.mark.parametrize("owner", ["v", ""])
def test_char_text_a_store_refuses_leaves_the_attributes_as_stored(mounter, tmp_path, kind,
                                                                   owner):
    """Pure Zarr v2 and NCZarr on Zarr v3 hold char text in JSON, as UTF-8 only: text that is
    not UTF-8 is refused at the close (ENOTSUP). A new attribute file is then not listed, and
    a rewritten one shows its old value, whether written in one open or by a shell
    redirection (whose first close, of the still empty file, stores nothing), on a variable
    and on the root group alike; zarr-python reads the same once unmounted."""
    import zarr

    cdl = tmp_path / "d.cdl"
    cdl.write_text(CDL)
    store = tmp_path / "d.zarr"
    r = mounter.run("gen", "-k", kind, "-o", str(store), str(cdl))
    assert r.returncode == 0, r.stderr
    mnt = mounter.mount(str(store), "rw")
    d = mnt / owner if owner else mnt
    attrs = d / "@attributes"
    before = shown_attrs(d)
    assert before == ({"keep": "k"} if owner else {"title": "t"})
    old = next(iter(before))

    shell_write(attrs / "w", "a\\377")
    assert shown_attrs(d) == before
    assert not (attrs / "w").exists()
    assert refused_write(attrs / "w", b"a\xff") == errno.ENOTSUP
    assert shown_attrs(d) == before
    shell_write(attrs / old, "a\\377")
    assert shown_attrs(d) == before
    assert refused_write(attrs / old, b"a\xff") == errno.ENOTSUP
    assert shown_attrs(d) == before
    # What is stored can still be written.
    shell_write(attrs / "w", "ok")
    assert shown_attrs(d) == {**before, "w": "ok"}
    shell_write(attrs / "w", "b\\377")
    assert shown_attrs(d) == {**before, "w": "ok"}
    # A text stored by `fsync`, then emptied: a duplicate's close stores no empty text (it is
    # no value yet), and the refused text after that leaves the fsynced one.
    fd = os.open(attrs / "w", os.O_RDWR)
    try:
        os.write(fd, b"synced")
        os.fsync(fd)
        os.ftruncate(fd, 0)
        os.close(os.dup(fd))
        assert shown_attrs(d) == {**before, "w": "synced"}
        os.pwrite(fd, b"c\xff", 0)
    except BaseException:
        os.close(fd)
        raise
    with pytest.raises(OSError) as err:
        os.close(fd)
    assert err.value.errno == errno.ENOTSUP
    assert shown_attrs(d) == {**before, "w": "synced"}
    umount_and_wait(mnt)

    group = zarr.open_group(str(store), mode="r")
    stored = dict((group[owner] if owner else group).attrs)
    assert stored[old] == before[old]
    assert stored["w"] == "synced"


@pytest.mark.parametrize("kind", ["zarr", "nczarr,v3"])
def test_a_refused_new_attribute_stays_out_of_storage_when_a_sibling_was_stored(mounter,
                                                                                tmp_path, kind):
    """A new attribute file held open while another attribute of the same variable is stored:
    that store writes the new one's empty placeholder with it. The new file's text refused at
    its close (not UTF-8, ENOTSUP), storage holds no attribute of its name, as the mount lists
    none, read by zarr-python while mounted and once unmounted."""
    import zarr

    def stored_attrs(store: Path) -> dict:
        """The attributes of `v` as zarr-python reads them, less the ones the layout keeps
        (`_ARRAY_DIMENSIONS`, `_nczarr_*`)."""
        attrs = zarr.open_group(str(store), mode="r")["v"].attrs
        return {n: a for n, a in attrs.items() if not n.startswith("_")}

    cdl = tmp_path / "d.cdl"
    cdl.write_text(CDL)
    store = tmp_path / "d.zarr"
    r = mounter.run("gen", "-k", kind, "-o", str(store), str(cdl))
    assert r.returncode == 0, r.stderr
    mnt = mounter.mount(str(store), "rw")
    attrs = mnt / "v" / "@attributes"

    fd = os.open(attrs / "new", os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        shell_write(attrs / "other", "hi")
        os.write(fd, b"a\xff")
    except BaseException:
        os.close(fd)
        raise
    with pytest.raises(OSError) as err:
        os.close(fd)
    assert err.value.errno == errno.ENOTSUP
    expected = {"keep": "k", "other": "hi"}
    assert shown_attrs(mnt / "v") == expected
    assert stored_attrs(store) == expected
    umount_and_wait(mnt)

    assert stored_attrs(store) == expected


def test_quantize_values_netcdf_refuses_leave_the_attributes_as_stored(mounter, tmp_path):
    """A quantization setting netcdf-c refuses (digits out of range, a second mode) fails the
    close with EPERM: a new attribute file is not listed, a rewritten one keeps its value,
    as netCDF4-python reads it once unmounted."""
    import netCDF4

    url = f"file://{tmp_path / 'q.file'}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as ds:
        ds.createDimension("x", 4)
        ds.createVariable("v", "f4", ("x",), significant_digits=3)
    mnt = mounter.mount(url, "rw")
    attrs = mnt / "v" / "@attributes"
    groom = "_QuantizeBitGroomNumberOfSignificantDigits"
    second = "_QuantizeBitRoundNumberOfSignificantBits"
    assert os.listdir(attrs) == [groom]
    shell_write(attrs / groom, "99")
    assert (attrs / groom).read_text().strip() == "3"
    assert refused_write(attrs / groom, b"99") == errno.EPERM
    assert (attrs / groom).read_text().strip() == "3"
    shell_write(attrs / second, "4")
    assert refused_write(attrs / second, b"4") == errno.EPERM
    assert os.listdir(attrs) == [groom]
    meta = json.loads((mnt / "v" / "@metadata.json").read_text())["attributes"]
    assert list(meta) == [groom]
    umount_and_wait(mnt)
    with netCDF4.Dataset(url) as ds:
        assert ds["v"].ncattrs() == [groom]
        assert ds["v"].quantization() == (3, "BitGroom")


def test_a_zip_rewritten_in_place_refuses_changes_and_the_mount_shows_what_it_holds(
        mounter, tmp_path):
    """Once another program rewrote the zip archive in place, every store of the mount fails
    with EBUSY: a new attribute file is not listed, a rewritten one keeps its old value, a
    `mkdir` makes no group and a `mv` renames nothing. A new file's duplicate closed empty
    before the rewrite stored nothing, so when its text cannot be stored it is not listed.
    The archive, as zarr-python reads it, holds what the mount showed."""
    import zarr

    cdl = tmp_path / "d.cdl"
    cdl.write_text(CDL)
    archive = tmp_path / "d.zip"
    r = mounter.run("gen", "-k", "nczarr,zip", "-o", str(archive), str(cdl))
    assert r.returncode == 0, r.stderr
    mnt = mounter.mount(str(archive), "rw")
    attrs = mnt / "v" / "@attributes"
    early = os.open(attrs / "early", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.close(os.dup(early))
        with zipfile.ZipFile(archive, "a") as z:
            z.writestr("other.txt", "another program's")
        os.write(early, b"late")
        with pytest.raises(OSError) as err:
            os.close(early)
        assert err.value.errno == errno.EBUSY
    except BaseException:
        os.close(early)
        raise
    shell_write(attrs / "w", "x")
    shell_write(attrs / "keep", "changed")
    assert refused_write(attrs / "w", b"x") == errno.EBUSY
    assert refused_write(attrs / "keep", b"changed") == errno.EBUSY
    with pytest.raises(OSError) as err:
        os.mkdir(mnt / "g")
    assert err.value.errno == errno.EBUSY
    with pytest.raises(OSError) as err:
        os.rename(mnt / "v", mnt / "v2")
    assert err.value.errno == errno.EBUSY
    with pytest.raises(OSError) as err:
        os.rename(attrs / "keep", attrs / "keep2")
    assert err.value.errno == errno.EBUSY
    shown = shown_attrs(mnt / "v")
    assert shown == {"keep": "k"}
    assert sorted(p for p in os.listdir(mnt) if not p.startswith("@")) == ["v"]
    umount_and_wait(mnt)

    with zipfile.ZipFile(archive) as z:
        assert z.read("other.txt") == b"another program's"
    group = zarr.open_group(zarr.storage.ZipStore(archive, mode="r"), path="d", mode="r",
                            zarr_format=2)
    assert list(group.group_keys()) == []
    assert list(group.array_keys()) == ["v"]
    stored = {k: v for k, v in group["v"].attrs.items() if not k.startswith("_")}
    assert stored == shown
