"""`get` streams a hyperslab in bounded memory whatever the chunks' shape.

A variable chunked along its whole first dimension (a time series chunked `(ntime, 1)`) made
every block of `get` a whole row of chunks, i.e. the whole variable, held twice: 8 GiB of
them ran a machine out of memory. The values are checked against netCDF4-python's writes and
netCDF's default fill; the memory against the variable's size.
"""

from __future__ import annotations

import subprocess

import netCDF4
import numpy as np

from conftest import nczarrfs_binary

ROWS, COLUMNS = 4096, 16384  # 512 MiB of doubles


def test_get_of_chunks_spanning_the_first_dimension_streams(tmp_path):
    path = tmp_path / "series.file"
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file", "w") as nc:
        nc.createDimension("t", ROWS)
        nc.createDimension("x", COLUMNS)
        v = nc.createVariable("v", "f8", ("t", "x"), chunksizes=(ROWS, 1))
        v[:, 5] = np.arange(ROWS, dtype="f8")
        v[:, COLUMNS - 3] = -np.arange(ROWS, dtype="f8")
    with netCDF4.Dataset(f"file://{path}#mode=nczarr,file") as nc:
        nc.set_auto_mask(False)
        # netcdf-c stores the default fill with 6 digits; what it reads back is the oracle.
        fill = float(nc["v"][0, 0])
    proc = subprocess.Popen([str(nczarrfs_binary()), "get", str(path), "v"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    row_bytes = COLUMNS * 8
    want = np.full(COLUMNS, fill)
    rows = 0
    while chunk := proc.stdout.read(row_bytes):
        assert len(chunk) == row_bytes, f"row {rows} cut short"
        want[5], want[COLUMNS - 3] = rows, -rows
        got = np.frombuffer(chunk, dtype="<f8")
        assert np.array_equal(got, want), f"row {rows}"
        rows += 1
        if rows == ROWS // 2:
            # Halfway, `get` waits for this reader with more to write: its peak so far (the
            # buffers are made at the start) is that of the whole run.
            peak = _peak_rss(proc.pid)
    assert proc.wait() == 0, proc.stderr.read().decode()
    assert rows == ROWS
    # Two blocks of the old whole-variable size would be 1 GiB.
    assert peak < 256 << 20, f"peak RSS {peak >> 20} MiB for a 512 MiB variable"


def _peak_rss(pid: int) -> int:
    """The process's peak resident memory (VmHWM) in bytes."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmHWM for process {pid}")
