"""Where the commands write: standard output for `get` (a closed pipe ends it quietly, as it
ends `dump` and ncdump), `-o -` as standard output, and `-` refused as the place of a
dataset (a directory or an archive, not a stream)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import nczarrfs_binary

CDL = """netcdf gp {
dimensions:
  x = 2000000 ;
variables:
  int a(x) ;
data:
  a = 1, 2, 3 ;
}
"""


@pytest.fixture
def dataset(nczarrfs, tmp_path) -> Path:
    (tmp_path / "gp.cdl").write_text(CDL)
    path = tmp_path / "gp.file"
    r = nczarrfs("gen", "-o", str(path), str(tmp_path / "gp.cdl"))
    assert r.returncode == 0, r.stderr.decode()
    return path


@pytest.mark.parametrize("command", [["get", "{ds}", "a"], ["dump", "{ds}"]])
def test_a_closed_pipe_ends_the_output_quietly(dataset, command):
    args = [str(nczarrfs_binary()), *(a.format(ds=dataset) for a in command)]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = p.stdout.read(10)
    p.stdout.close()
    err = p.stderr.read()
    assert p.wait(timeout=60) == 0, err.decode()
    assert err == b""
    assert len(first) == 10


def test_get_dash_o_dash_is_standard_output(nczarrfs, dataset, tmp_path):
    r = subprocess.run([str(nczarrfs_binary()), "get", str(dataset), "a", "--count", "3",
                        "-o", "-"], capture_output=True, cwd=tmp_path, check=False)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b"\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00"
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("command", [["gen", "-o", "-", "gp.cdl"], ["copy", "gp.file", "-"]])
def test_a_dataset_is_not_written_to_standard_output(dataset, tmp_path, command):
    r = subprocess.run([str(nczarrfs_binary()), *command], capture_output=True, cwd=tmp_path,
                       check=False)
    assert r.returncode == 1
    assert b"standard output" in r.stderr, r.stderr.decode()
    assert r.stdout == b""
    assert not (tmp_path / "-").exists()
