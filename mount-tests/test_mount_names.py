"""Names on mounts that no file name can be, or that are not the spelling of any name.

* A directory lists no entry longer than NAME_MAX (255 bytes, what `statfs` reports): the
  kernel refuses such an entry, which would fail the whole listing with EIO. Each such
  directory gets one log line; looking such a name up is ENAMETOOLONG, as on a local file
  system, and so is making one on a `rw` mount (with a log line).
* Attribute file names are the attribute names with `/`, `%` and control characters written
  `%XX`; only that spelling names an attribute, so that distinct file names are distinct
  files and a file is listed under the name it was created with: `%FF` (not UTF-8), `50%`
  (no escape), `%41` (an escape of a character that needs none) are refused (EPERM, logged).
* A dataset holding a JSON `\\ud800` escape in an attribute name is not mounted `rw`: every
  metadata change rewrites its attributes, and that name would become U+FFFD.

Expected names come from zarr-python and netCDF4-python, which read the datasets after
unmount, and from what a local file system does (`ENAMETOOLONG`, `ls` listing what was
created).
"""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_mount_rw import umount_and_wait  # noqa: E402

NAME_MAX = 255


@pytest.fixture(autouse=True)
def _quiet():
    warnings.filterwarnings("ignore", module="zarr")


def _nczarr(tmp_path: Path) -> str:
    """An NCZarr dataset (netCDF4-python) with a variable `v` holding `units`, and a
    global `title`."""
    import netCDF4

    url = f"file://{tmp_path / 'ds.file'}#mode=nczarr,file"
    with netCDF4.Dataset(url, "w") as ds:
        ds.title = "names"
        ds.createDimension("d", 2)
        v = ds.createVariable("v", "i4", ("d",))
        v.units = "m"
        v[:] = [1, 2]
    return url


def _netcdf_attrs(url: str) -> tuple[list[str], list[str]]:
    import netCDF4

    with netCDF4.Dataset(url) as ds:
        return ds.ncattrs(), ds["v"].ncattrs()


def test_entries_longer_than_name_max_are_left_out_of_listings(mounter, tmp_path):
    """zarr-python stores an attribute named with 1400 control characters (4200 bytes as a
    file name), one of 300 bytes, a global one of 256 bytes, and in a zip archive an array
    named with 300 bytes; every other entry stays listed, and the log names each directory
    by its path."""
    import zarr
    from zarr.storage import ZipStore

    store = tmp_path / "z.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=2)
    arr = group.create_array("v", shape=(2,), dtype="i4")
    arr[:] = [1, 2]
    arr.attrs.update({"_ARRAY_DIMENSIONS": ["d"], "units": "m", "\x01" * 1400: 1,
                      "a" * 300: 2, "b" * NAME_MAX: 3})
    group.attrs["é" * 128] = 4
    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(store), log=log)
    assert os.listdir(mnt / "@attributes") == []
    attrs = mnt / "v" / "@attributes"
    assert sorted(os.listdir(attrs)) == ["b" * NAME_MAX, "units"]
    assert (attrs / ("b" * NAME_MAX)).read_text() == "3\n"
    for name in ["a" * 300, "%01" * 1400]:
        with pytest.raises(OSError) as e:
            os.stat(attrs / name)
        assert e.value.errno == errno.ENAMETOOLONG
    text = log.read_text()
    assert text.count("left out of the listing") == 2, text
    assert "] /v/@attributes: 2 entries" in text, text
    assert "] /@attributes: 1 entry" in text, text

    zipped = tmp_path / "z.zip"
    with ZipStore(str(zipped), mode="w") as zs:
        root = zarr.open_group(zs, mode="w", zarr_format=2)
        root.create_array("x" * 300, shape=(1,), dtype="i1")
        root.create_array("ok", shape=(1,), dtype="i1")
    mnt = mounter.mount(str(zipped))
    assert sorted(e for e in os.listdir(mnt) if not e.startswith("@")) == ["ok"]


def test_names_too_long_for_a_file_are_enametoolong_on_rw_mounts(mounter, tmp_path):
    url = _nczarr(tmp_path)
    before = _netcdf_attrs(url)
    log = tmp_path / "mount.log"
    mnt = mounter.mount(url, "rw", log=log)
    long = "a" * 400
    attempts = [
        lambda: (mnt / "v" / "@attributes" / long).write_text("1"),
        lambda: os.mkdir(mnt / long),
        lambda: os.rename(mnt / "v" / "@attributes" / "units", mnt / "v" / "@attributes" / long),
        lambda: os.rename(mnt / "v", mnt / long),
    ]
    for attempt in attempts:
        with pytest.raises(OSError) as e:
            attempt()
        assert e.value.errno == errno.ENAMETOOLONG
    r = subprocess.run(["sh", "-c", f'echo 1 > "{mnt}/v/@attributes/{long}"'],
                       capture_output=True, text=True)
    assert r.returncode != 0 and "File name too long" in r.stderr, r.stderr
    umount_and_wait(mnt)
    assert "a name of 400 bytes" in log.read_text() and "ENAMETOOLONG" in log.read_text()
    assert _netcdf_attrs(url) == before


@pytest.mark.parametrize("entry", ["%FF", "%FE", "a%C3", "50%", "%%", "%41", "glob%20al", "%2e",
                                   "a%2fb", "%C3%A9"])
def test_attribute_file_names_that_spell_no_name_are_refused(mounter, tmp_path, entry):
    url = _nczarr(tmp_path)
    before = _netcdf_attrs(url)
    log = tmp_path / "mount.log"
    mnt = mounter.mount(url, "rw", log=log)
    attrs = mnt / "v" / "@attributes"
    with pytest.raises(OSError) as e:
        (attrs / entry).write_text("x")
    assert e.value.errno == errno.EPERM
    with pytest.raises(OSError) as e:
        os.rename(attrs / "units", attrs / entry)
    assert e.value.errno == errno.EPERM
    assert not (attrs / entry).exists()
    assert sorted(os.listdir(attrs)) == ["units"]
    umount_and_wait(mnt)
    assert "not an attribute file name" in log.read_text()
    assert _netcdf_attrs(url) == before


def test_the_empty_name_and_the_nul_character_are_two_attribute_files(mounter, tmp_path):
    """zarr-python stores attributes named `""` and `"\\0"` (JSON keys may be either): the
    mount shows them as two files, `%` and `%00`, each reading its own value; `%0` and
    `%%` name nothing. netCDF names may be neither, but a `rw` mount rewrites attributes
    the dataset already holds under the names they have: each takes its new value."""
    import zarr

    store = tmp_path / "z.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=2)
    arr = group.create_array("v", shape=(2,), dtype="i4")
    arr[:] = [1, 2]
    arr.attrs.update({"_ARRAY_DIMENSIONS": ["d"], "": "empty", "\0": "nul"})
    mnt = mounter.mount(str(store))
    attrs = mnt / "v" / "@attributes"
    assert sorted(os.listdir(attrs)) == ["%", "%00"]
    assert (attrs / "%").read_text() == "empty"
    assert (attrs / "%00").read_text() == "nul"
    for other in ["%0", "%%", "%00%00"]:
        assert not (attrs / other).exists(), other
    umount_and_wait(mnt)

    mnt = mounter.mount(str(store), "rw")
    attrs = mnt / "v" / "@attributes"
    (attrs / "%").write_text("changed")
    (attrs / "%00").write_text("12")
    assert (attrs / "%").read_text() == "changed"
    assert (attrs / "%00").read_text() == "12"
    umount_and_wait(mnt)
    attributes = dict(zarr.open_array(str(store), path="v", mode="r").attrs)
    assert attributes[""] == "changed"
    assert attributes["\0"] == "12"


def test_a_file_created_is_listed_under_its_name(mounter, tmp_path):
    """As on a local file system: what `ls` lists is what was created, and reads back the
    same file. netCDF4-python then reads the names the files stand for."""
    url = _nczarr(tmp_path)
    mnt = mounter.mount(url, "rw")
    attrs = mnt / "v" / "@attributes"
    created = {"50%25": "three", "p%25%2541": "one", "é": "two"}
    for entry, text in created.items():
        (attrs / entry).write_text(text)
    assert sorted(os.listdir(attrs)) == sorted([*created, "units"])
    for entry, text in created.items():
        assert (attrs / entry).read_text() == text
    with pytest.raises(OSError) as e:
        (attrs / "%41").read_text()
    assert e.value.errno == errno.ENOENT
    umount_and_wait(mnt)
    assert sorted(_netcdf_attrs(url)[1]) == sorted(["units", "50%", "p%%41", "é"])


def test_read_only_mounts_name_attributes_by_one_spelling_only(mounter, tmp_path):
    url = _nczarr(tmp_path)
    mnt = mounter.mount(url)
    attrs = mnt / "@attributes"
    assert (attrs / "title").read_text() == "names"
    for other in ["%74itle", "titl%65", "%74%69%74%6C%65"]:
        assert not (attrs / other).exists(), other


def test_names_that_are_not_utf8_are_refused(mounter, tmp_path):
    """A lossy reading (U+FFFD) would create, or reach, another name."""
    url = _nczarr(tmp_path)
    log = tmp_path / "mount.log"
    mnt = mounter.mount(url, "rw", log=log)
    attrs = os.fsencode(mnt / "v" / "@attributes")
    raw = attrs + b"/x\xff"
    with pytest.raises(OSError) as e:
        with open(raw, "w") as f:
            f.write("1")
    assert e.value.errno == errno.EPERM
    (mnt / "v" / "@attributes" / "x\ufffd").write_text("kept")
    with pytest.raises(OSError) as e:
        os.unlink(raw)
    assert e.value.errno == errno.ENOENT
    assert (mnt / "v" / "@attributes" / "x\ufffd").read_text() == "kept"
    umount_and_wait(mnt)
    assert "not UTF-8" in log.read_text()
    assert sorted(_netcdf_attrs(url)[1]) == ["units", "x\ufffd"]


def test_a_lone_surrogate_in_an_attribute_name_keeps_the_dataset_read_only(mounter, tmp_path):
    import zarr

    store = tmp_path / "s.zarr"
    group = zarr.open_group(str(store), mode="w", zarr_format=2)
    arr = group.create_array("v", shape=(2,), dtype="i4")
    arr[:] = [1, 2]
    arr.attrs.update({"_ARRAY_DIMENSIONS": ["d"], "x\ud800y": 1})
    before = sorted(zarr.open_group(str(store), mode="r")["v"].attrs)

    mnt = mounter.mountpoint()
    r = mounter.run("mount", "-o", "rw", str(store), str(mnt))
    assert r.returncode != 0
    assert "cannot be opened for writing" in r.stderr and "\\ud800" in r.stderr, r.stderr

    log = tmp_path / "mount.log"
    mnt = mounter.mount(str(store), log=log)
    assert sorted(os.listdir(mnt / "v" / "@attributes")) == ["x\ufffdy"]
    assert "lone UTF-16 surrogate" in log.read_text()
    umount_and_wait(mnt)
    assert sorted(zarr.open_group(str(store), mode="r")["v"].attrs) == before


def test_a_zip_archive_named_at_name_max_takes_writes_on_a_rw_mount(mounter, binary, tmp_path):
    """A rw mount rewrites a zip archive through hidden files beside it named after it: for
    an archive of 255 bytes those names are cut and hashed, still names the file system
    takes, and none is left behind. zarr-python reads what was written."""
    import numpy as np
    import zarr

    stem = "s" * (NAME_MAX - len(".zip"))
    cdl = tmp_path / "x.cdl"
    cdl.write_text("netcdf x {\ndimensions:\n\td = 4 ;\nvariables:\n\tint v(d) ;\n"
                   "data:\n v = 1, 2, 3, 4 ;\n}\n")
    data = tmp_path / "data"
    data.mkdir()
    archive = data / f"{stem}.zip"
    subprocess.run([str(binary), "gen", "-o", str(archive), str(cdl)], check=True)
    mnt = mounter.mount(str(archive), "rw")
    with open(mnt / "v" / "data", "r+b") as f:
        f.seek(4)
        f.write(np.array([20, 30], "<i4").tobytes())
        f.flush()
        os.fsync(f.fileno())
    (mnt / "g").mkdir()
    umount_and_wait(mnt)
    assert os.listdir(data) == [archive.name]
    root = zarr.open_group(zarr.storage.ZipStore(str(archive), mode="r"), path=stem,
                           mode="r", zarr_format=2)
    assert root["v"][:].tolist() == [1, 20, 30, 4]
    assert isinstance(root["g"], zarr.Group)
