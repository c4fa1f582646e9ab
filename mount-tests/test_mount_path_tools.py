"""Programs that know only paths read a mounted variable as a local raw file: GDAL's raw raster
reader (through rasterio's bundled GDAL) with a VRT beside the mount that describes `data` from
its `@metadata.json`, a Fortran program reading records by direct access, and `dd` of one
record. Expected values come from netCDF4-python reading the dataset itself."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from datasets import netcdf_values, nczarr_dataset  # noqa: E402


def raw_vrt(data: Path, dtype: np.dtype, shape: list[int]) -> str:
    """A GDAL VRT reading `data` (C order, shape (bands, rows, cols) or (rows, cols)) as raw
    rasters, one band per leading index."""
    gdal_types = {"f4": "Float32", "f8": "Float64", "i2": "Int16", "u1": "Byte", "i4": "Int32"}
    kind = gdal_types[dtype.str[1:]]
    order = "LSB" if dtype.byteorder in "<=" and sys.byteorder == "little" else "MSB"
    *lead, rows, cols = shape
    bands = int(np.prod(lead, dtype=np.int64)) if lead else 1
    item = dtype.itemsize
    band_xml = "".join(
        f'<VRTRasterBand dataType="{kind}" band="{b + 1}" subClass="VRTRawRasterBand">'
        f'<SourceFilename relativeToVRT="0">{data}</SourceFilename>'
        f"<ImageOffset>{b * rows * cols * item}</ImageOffset>"
        f"<PixelOffset>{item}</PixelOffset><LineOffset>{cols * item}</LineOffset>"
        f"<ByteOrder>{order}</ByteOrder></VRTRasterBand>"
        for b in range(bands)
    )
    return f'<VRTDataset rasterXSize="{cols}" rasterYSize="{rows}">{band_xml}</VRTDataset>'


# A raw raster has no georeferencing, which rasterio warns about.
@pytest.mark.filterwarnings("ignore::rasterio.errors.NotGeoreferencedWarning")
def test_gdal_reads_mounted_variables_as_raw_rasters(mounter, tmp_path):
    import rasterio

    url = nczarr_dataset(tmp_path / "ds.file")
    expected = netcdf_values(url)
    mnt = mounter.mount(url)
    for var in ("temp", "counts"):
        meta = json.loads((mnt / var / "@metadata.json").read_text())
        dtype = np.dtype(meta["dtype"])
        vrt = tmp_path / f"{var}.vrt"
        vrt.write_text(raw_vrt(mnt / var / "data", dtype, meta["shape"]))
        with rasterio.open(vrt) as src:
            got = src.read()
        want = expected[f"/{var}"]
        assert got.reshape(want.shape).tobytes() == want.astype(dtype).tobytes(), var


FORTRAN = """\
program records
  ! Reads one record of a raw file by direct access: argument 1 the file, 2 the record length
  ! in bytes, 3 the record to read, 4 the file to write the record's bytes to.
  implicit none
  character(len=4096) :: path, out, arg
  integer :: recl, rec
  character(len=:), allocatable :: buf
  call get_command_argument(1, path)
  call get_command_argument(2, arg)
  read (arg, *) recl
  call get_command_argument(3, arg)
  read (arg, *) rec
  call get_command_argument(4, out)
  allocate(character(len=recl) :: buf)
  open (unit=10, file=trim(path), access='direct', form='unformatted', recl=recl, &
        action='read', status='old')
  read (10, rec=rec) buf
  close (10)
  open (unit=11, file=trim(out), access='stream', form='unformatted', status='replace')
  write (11) buf
  close (11)
end program records
"""


def test_fortran_direct_access_reads_records(mounter, tmp_path):
    url = nczarr_dataset(tmp_path / "ds.file")
    want = netcdf_values(url)["/temp"]
    exe = tmp_path / "records"
    (tmp_path / "records.f90").write_text(FORTRAN)
    subprocess.run(["gfortran", "-o", str(exe), str(tmp_path / "records.f90")], check=True)
    mnt = mounter.mount(url)
    record_bytes = want[0].size * 4
    out = tmp_path / "record.bin"
    for rec in range(1, want.shape[0] + 1):
        subprocess.run([str(exe), str(mnt / "temp" / "data"), str(record_bytes), str(rec),
                        str(out)], check=True)
        assert out.read_bytes() == want[rec - 1].astype("=f4").tobytes(), rec


def test_dd_reads_one_record(mounter, tmp_path):
    url = nczarr_dataset(tmp_path / "ds.file")
    want = netcdf_values(url)["/temp"]
    mnt = mounter.mount(url)
    record = want[2].astype("=f4").tobytes()
    out = subprocess.run(
        ["dd", f"if={mnt / 'temp' / 'data'}", f"bs={len(record)}", "skip=2", "count=1",
         "status=none"], capture_output=True, check=True).stdout
    assert out == record
