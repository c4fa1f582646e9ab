"""The shipped sample (samples/weather.file) dumps as ncdump prints its HDF5 twin."""

from pathlib import Path

import netCDF4
import numpy as np

import twins

SAMPLES = Path(__file__).resolve().parent.parent / "samples"


def test_sample_dump_matches_ncdump_of_its_twin(nczarrfs):
    res = nczarrfs("dump", str(SAMPLES / "weather.file"))
    assert res.returncode == 0, res.stderr.decode(errors="replace")
    assert res.stdout.decode() == (SAMPLES / "weather.cdl").read_text()


def test_sample_get_matches_netcdf_c(nczarrfs, tmp_path):
    url = twins.nczarr_url(str(SAMPLES / "weather.file"))
    with netCDF4.Dataset(url) as nc:
        for name, var in twins.walk_variables(nc):
            expected = twins.read_values(var)
            out = tmp_path / "v.bin"
            res = nczarrfs("get", str(SAMPLES / "weather.file"), name, "-o", str(out))
            assert res.returncode == 0, res.stderr.decode(errors="replace")
            got = np.frombuffer(out.read_bytes(), dtype=expected.dtype.newbyteorder("="))
            assert twins.same_values(got.reshape(expected.shape), expected), name


def test_an_error_with_stderr_closed_is_still_exit_status_1(tmp_path):
    """A script that closed the read end of stderr's pipe gets the status, not a panic (101)."""
    import os
    import subprocess

    from conftest import nczarrfs_binary

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        res = subprocess.run([str(nczarrfs_binary()), "dump", str(tmp_path / "missing")],
                             stdout=subprocess.DEVNULL, stderr=write_end, check=False)
    finally:
        os.close(write_end)
    assert res.returncode == 1
