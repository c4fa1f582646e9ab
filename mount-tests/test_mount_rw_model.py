"""Random sequences of what programs do to a `rw` mount (see rw_model.py) on a directory store
and on a zip archive: the mount must read as the model at every check, and netCDF4-python must
read exactly the model after unmount."""

from __future__ import annotations

import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from datasets import nczarr_dataset  # noqa: E402
from rw_model import check_netcdf, initial_model, run_operations  # noqa: E402
from test_mount_rw import umount_and_wait  # noqa: E402


def zip_dataset(path: Path) -> str:
    """The dataset zipped as netcdf-c zips a store: its objects under one top folder."""
    tree = path.with_suffix(".file")
    nczarr_dataset(tree, no_fill=True)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(tree.rglob("*")):
            if f.is_file():
                z.write(f, f"{tree.name}/{f.relative_to(tree)}")
    return f"file://{path}#mode=nczarr,zip"


def readable_url(url: str, tmp_path: Path) -> str:
    """A URL netCDF4-python opens for the dataset at `url`: its wheel's netcdf-c reads no zip,
    so an archive is unpacked first (by Debian's unzip)."""
    if not url.endswith(",zip"):
        return url
    out = tmp_path / "unzipped"
    shutil.rmtree(out, ignore_errors=True)
    archive = url.removeprefix("file://").split("#")[0]
    subprocess.run(["unzip", "-q", archive, "-d", str(out)], check=True)
    (top,) = out.iterdir()
    return f"file://{top}#mode=nczarr,file"


@pytest.mark.parametrize("storage, seed", [("file", 0), ("file", 1), ("file", 2), ("zip", 0)])
def test_random_operations_match_a_model(mounter, tmp_path, storage, seed):
    url = (nczarr_dataset(tmp_path / "ds.file", no_fill=True) if storage == "file"
           else zip_dataset(tmp_path / "ds.zip"))
    model = initial_model(readable_url(url, tmp_path))
    mounts = [mounter.mount(url, "rw")]

    def remount() -> Path:
        # The mount of the moment, not the first one: two rw mounts of one dataset at once
        # are refused (each would store the metadata as it sees it).
        umount_and_wait(mounts[-1])
        mounts.append(mounter.mount(url, "rw"))
        return mounts[-1]

    mnt = run_operations(mounts[0], model, random.Random(seed), 250, remount)
    umount_and_wait(mnt)
    check_netcdf(readable_url(url, tmp_path), model)
