"""Writes the shipped sample dataset ``samples/weather.file`` (NCZarr) with netCDF4-python.

Also writes ``samples/weather.cdl``: Debian ``ncdump`` of the same content written as
netCDF-4/HDF5, which is what ``nczarrfs dump samples/weather.file`` must print.

Usage: python samples/make_sample.py  (needs netCDF4 and ncdump; deterministic output)
"""

import os
import shutil
import subprocess
import tempfile

import netCDF4
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
NAME = "weather"


def fill(nc: netCDF4.Dataset) -> None:
    """The sample's content: a small gridded time series plus a station group."""
    nc.title = "nczarrfs sample: hourly temperature on a small grid"
    nc.institution = "nczarrfs project"
    nc.history = "written by samples/make_sample.py"
    nc.createDimension("time", None)
    nc.createDimension("lat", 6)
    nc.createDimension("lon", 8)

    time = nc.createVariable("time", "f8", ("time",))
    time.units = "hours since 2024-01-01 00:00:00"
    time.standard_name = "time"
    lat = nc.createVariable("lat", "f4", ("lat",))
    lat.units = "degrees_north"
    lon = nc.createVariable("lon", "f4", ("lon",))
    lon.units = "degrees_east"
    temp = nc.createVariable(
        "temperature", "f4", ("time", "lat", "lon"),
        zlib=True, complevel=4, shuffle=True, chunksizes=(6, 6, 8), fill_value=np.float32(-999),
    )
    temp.units = "K"
    temp.long_name = "air temperature at 2 m"
    temp.valid_range = np.array([180, 340], dtype="f4")
    precip = nc.createVariable(
        "precip", "i2", ("time", "lat", "lon"), zlib=True, complevel=6, chunksizes=(12, 3, 4)
    )
    precip.units = "mm"
    precip.scale_factor = 0.1
    precip.missing_value = np.int16(-1)

    lat[:] = np.linspace(40, 50, 6, dtype="f4")
    lon[:] = np.linspace(-5, 9, 8, dtype="f4")
    hours = np.arange(24, dtype="f8")
    time[:] = hours
    t, y, x = np.meshgrid(hours, np.arange(6), np.arange(8), indexing="ij")
    temp[:] = (280 + 8 * np.sin(2 * np.pi * t / 24) - 1.5 * y + 0.25 * x).astype("f4")
    # Only the first 18 hours of precipitation exist: the rest reads as the fill value.
    precip[:18] = ((t[:18] * 7 + y[:18] * 3 + x[:18]) % 23).astype("i2")

    station = nc.createGroup("station")
    station.description = "one weather station inside the grid"
    station.createDimension("name_len", 12)
    name = station.createVariable("name", "S1", ("name_len",))
    name[:] = netCDF4.stringtoarr("Grenoble", 12)
    elevation = station.createVariable("elevation", "i4", ())
    elevation.units = "m"
    elevation.assignValue(212)
    obs = station.createVariable("observed", "f8", ("time",), fill_value=-9999.0)
    obs.units = "K"
    obs[:] = 281.5 + 0.125 * np.arange(24)


def main() -> None:
    store = os.path.join(HERE, NAME + ".file")
    shutil.rmtree(store, ignore_errors=True)
    with netCDF4.Dataset("file://" + store + "#mode=nczarr,file", "w") as nc:
        fill(nc)
    with tempfile.TemporaryDirectory() as tmp:
        twin = os.path.join(tmp, NAME + ".nc")
        with netCDF4.Dataset(twin, "w") as nc:
            fill(nc)
        cdl = subprocess.run(["ncdump", twin], capture_output=True, check=True).stdout
    with open(os.path.join(HERE, NAME + ".cdl"), "wb") as out:
        out.write(cdl)


if __name__ == "__main__":
    main()
