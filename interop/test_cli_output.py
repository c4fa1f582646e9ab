"""Where the commands write: standard output for `get` (a closed pipe ends it quietly, as it
ends `dump` and ncdump; one closed at start is an error, as for `cat`), `-o -` as standard
output, and `-` refused as the place of a dataset (a directory or an archive, not a
stream)."""

from __future__ import annotations

import json
import os
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


@pytest.mark.parametrize("flags", [["-k"], ["-h"], []])
def test_dump_to_a_pipe_closed_before_it_writes_ends_quietly(dataset, flags):
    """The reader gone before the first byte (`dump -k DS | true`): EPIPE at the first write."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        r = subprocess.run([str(nczarrfs_binary()), "dump", *flags, str(dataset)],
                           stdout=write_end, stderr=subprocess.PIPE, timeout=60)
    finally:
        os.close(write_end)
    assert (r.returncode, r.stderr) == (0, b"")


@pytest.mark.parametrize("flags", [["-k"], ["-h"], []])
def test_dump_to_a_full_device_fails(dataset, flags):
    with open("/dev/full", "wb") as full:
        r = subprocess.run([str(nczarrfs_binary()), "dump", *flags, str(dataset)], stdout=full,
                           stderr=subprocess.PIPE, timeout=60)
    assert r.returncode == 1
    # Named as `get` names it: the writer of CDL has no other output here.
    assert r.stderr.decode().startswith("nczarrfs: standard output: No space left on device")


def closed_stdout(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """Runs `args` with descriptor 1 closed, as `ARGS >&-` does."""
    return subprocess.run(args, stdin=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=cwd,
                          preexec_fn=lambda: os.close(1), timeout=60, check=False)


@pytest.mark.parametrize("command", [["dump", "gp.file"], ["dump", "-k", "gp.file"],
                                     ["get", "gp.file", "a"], ["get", "gp.file", "a", "-o", "-"],
                                     ["get", "gp.file", "a", "--count", "0"],
                                     ["get", "gp.file", "a", "-o", "/dev/stdout"],
                                     ["get", "gp.file", "a", "-o", "/dev/fd/1"],
                                     ["get", "gp.file", "a", "-o", "/proc/self/fd/1"]])
def test_standard_output_closed_at_start_fails_as_cat_fails(dataset, command):
    """`cat FILE >&-` fails at once with EBADF, even with nothing to write; so do the commands
    that write to standard output, rather than write to the `/dev/null` that the Rust runtime
    puts on a closed descriptor 1."""
    cat = closed_stdout(["cat", "gp.cdl"], dataset.parent)
    assert cat.returncode == 1
    assert cat.stderr == b"cat: standard output: Bad file descriptor\n"
    ours = closed_stdout([str(nczarrfs_binary()), *command], dataset.parent)
    assert ours.returncode == cat.returncode
    assert ours.stderr.decode().startswith("nczarrfs: standard output: Bad file descriptor")


def test_get_to_a_file_needs_no_standard_output(dataset):
    r = closed_stdout([str(nczarrfs_binary()), "get", "gp.file", "a", "--count", "3", "-o",
                       "a.bin"], dataset.parent)
    assert (r.returncode, r.stderr) == (0, b"")
    assert (dataset.parent / "a.bin").read_bytes() == (
        b"\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00\x00")


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


@pytest.mark.parametrize("command", ["gen", "copy"])
def test_a_symbolic_link_is_written_through(nczarrfs, tmp_path, command):
    """Debian's ncgen writes `-o LINK` through the link, the link staying; so do gen and copy:
    the dataset the link points to (relative to the link's directory) is replaced."""
    oracle_cdl = tmp_path / "one.cdl"
    oracle_cdl.write_text("netcdf x { dimensions: d = 1 ; variables: int v(d) ; data: v = 7 ; }")
    (tmp_path / "t.nc").write_bytes(b"")
    subprocess.run(["ncgen", "-4", "-o", str(tmp_path / "t.nc"), str(oracle_cdl)], check=True)
    (tmp_path / "l.nc").symlink_to("t.nc")
    oracle_cdl.write_text("netcdf x { dimensions: d = 1 ; variables: int v(d) ; data: v = 8 ; }")
    subprocess.run(["ncgen", "-4", "-o", str(tmp_path / "l.nc"), str(oracle_cdl)], check=True)
    assert (tmp_path / "l.nc").is_symlink()
    assert "v = 8" in subprocess.run(["ncdump", str(tmp_path / "t.nc")], capture_output=True,
                                     text=True, check=True).stdout

    store = tmp_path / "store"
    store.mkdir()
    old = tmp_path / "old.cdl"
    old.write_text("netcdf old { dimensions: d = 1 ; variables: int old(d) ; data: old = 1 ; }")
    assert nczarrfs("gen", "-o", str(store / "ds.file"), str(old)).returncode == 0
    link = tmp_path / "link.file"
    link.symlink_to(Path("store") / "ds.file")
    new = tmp_path / "new.cdl"
    new.write_text("netcdf new { dimensions: d = 1 ; variables: int v(d) ; data: v = 8 ; }")
    if command == "gen":
        r = nczarrfs("gen", "-o", str(link), str(new))
    else:
        src = tmp_path / "src.file"
        assert nczarrfs("gen", "-o", str(src), str(new)).returncode == 0
        r = nczarrfs("copy", str(src), str(link))
    assert r.returncode == 0, r.stderr.decode()
    assert link.is_symlink()
    dumped = nczarrfs("dump", str(store / "ds.file")).stdout.decode()
    assert "int v(d)" in dumped and "v = 8" in dumped, dumped


@pytest.mark.parametrize("file_name", ["foo.cdl", "bar.txt", "my.data.cdl", "plain"])
def test_gen_names_its_output_as_ncgen_does(tmp_path, file_name):
    """Without `-o`, Debian's ncgen names its output after the CDL file with its last
    extension dropped (`bar.txt` gives `bar.nc`); gen names it so too, ending in `.file`."""
    cdl = "netcdf inner {\nvariables:\n int v ;\ndata:\n v = 1 ;\n}\n"
    made = {}
    for tool, cmd in [("ncgen", ["ncgen", "-b"]), ("gen", [str(nczarrfs_binary()), "gen"])]:
        cwd = tmp_path / tool
        cwd.mkdir()
        (cwd / file_name).write_text(cdl)
        subprocess.run([*cmd, file_name], cwd=cwd, check=True, capture_output=True)
        made[tool] = sorted(p.name for p in cwd.iterdir() if p.name != file_name)
    [nc] = made["ncgen"]
    assert made["gen"] == [nc.removesuffix(".nc") + ".file"]


def assert_nczarr_v2(store: Path, arrays: list[str]) -> None:
    """`store` is NCZarr over Zarr v2, as netcdf-c writes it: a `.zgroup` of zarr_format 2 (no
    v3 `zarr.json`), the root `.zattrs` holding `_nczarr_superblock` and `_nczarr_group`, and
    `_nczarr_array` in each array's `.zattrs`. `dump -h` cannot tell: it prints the same
    header for a pure Zarr store."""
    assert not (store / "zarr.json").exists()
    assert json.loads((store / ".zgroup").read_text())["zarr_format"] == 2
    root = json.loads((store / ".zattrs").read_text())
    assert "_nczarr_superblock" in root, root
    assert root.get("_nczarr_group", {}).get("arrays") == arrays, root
    for name in arrays:
        assert "_nczarr_array" in json.loads((store / name / ".zattrs").read_text()), name


def test_copy_takes_nccopy_format_names_as_gen_does(nczarrfs, dataset, tmp_path):
    """`-k nc4` (nccopy's and ncgen's name for netCDF-4) is NCZarr for copy as for gen, from
    an NCZarr source and from a pure Zarr one."""
    pure = tmp_path / "pure.file"
    r = nczarrfs("gen", "-k", "zarr", "-o", str(pure), str(tmp_path / "gp.cdl"))
    assert r.returncode == 0, r.stderr.decode()
    assert not (pure / ".zattrs").exists()
    made = tmp_path / "made.file"
    r = nczarrfs("gen", "-k", "nc4", "-o", str(made), str(tmp_path / "gp.cdl"))
    assert r.returncode == 0, r.stderr.decode()
    assert_nczarr_v2(made, ["a"])
    src_dump = nczarrfs("dump", "-h", str(dataset)).stdout.split(b"\n", 1)[1]
    for n, src in enumerate([dataset, pure]):
        dst = tmp_path / f"c{n}.file"
        r = nczarrfs("copy", "-k", "nc4", str(src), str(dst))
        assert r.returncode == 0, r.stderr.decode()
        assert nczarrfs("dump", "-h", str(dst)).stdout.split(b"\n", 1)[1] == src_dump
        assert_nczarr_v2(dst, ["a"])


GRID = """netcdf grid {
dimensions:
  y = 5 ;
  x = 7 ;
variables:
  int v(y, x) ;
}
"""


@pytest.mark.parametrize("command", ["get", "put"])
@pytest.mark.parametrize("options, says", [
    (["--start", "6,0"], "--start 6,0 is past the end of dimension /y of /v, which has the "
                         "fixed length 5"),
    (["--start", "0,0", "--count", "6,1"], "--start 0,0 --count 6,1 --stride 1,1 reaches "
                                           "past the end of dimension /y of /v, which has "
                                           "the fixed length 5"),
    (["--start", "0,6", "--count", "1,2", "--stride", "1,1"],
     "--start 0,6 --count 1,2 --stride 1,1 reaches past the end of dimension /x of /v, which "
     "has the fixed length 7"),
    (["--count", "1,1", "--stride", "0,1"], "--stride 0,1 steps by 0 along dimension /y of "
                                            "/v: steps must be at least 1"),
])
def test_hyperslab_errors_name_the_option_the_variable_and_the_dimension(
        nczarrfs, tmp_path, command, options, says):
    """`get` and `put` refuse the same mistakes with the same words, naming what the
    dataset's CDL names: the variable /v and its dimensions /y (5) and /x (7)."""
    (tmp_path / "grid.cdl").write_text(GRID)
    path = tmp_path / "grid.file"
    assert nczarrfs("gen", "-o", str(path), str(tmp_path / "grid.cdl")).returncode == 0
    r = subprocess.run([str(nczarrfs_binary()), command, str(path), "v", *options],
                       input=b"\0" * 8, capture_output=True, timeout=60, check=False)
    assert r.returncode == 1, r.stderr.decode()
    assert r.stderr.decode().startswith(f"nczarrfs: invalid hyperslab: {says}"), \
        r.stderr.decode()


@pytest.mark.parametrize("command", ["get", "put"])
@pytest.mark.parametrize("option, value, says", [
    ("--start", "-1,0", '--start: "-1" is negative'),
    ("--count", "-1,2", '--count: "-1" is negative'),
    ("--stride", "-2,1", '--stride: "-2" is negative'),
    ("--cache-size", "-5", 'size "-5" is negative'),
])
def test_a_negative_value_is_refused_by_its_option(nczarrfs, tmp_path, command, option,
                                                    value, says):
    """A value that begins with `-` is the option's value (refused by the option's own
    rule), not another option: the parser's tip to write `-- -1` was wrong. A negative
    number is a number out of the option's range: exit status 1 (README)."""
    (tmp_path / "grid.cdl").write_text(GRID)
    path = tmp_path / "grid.file"
    assert nczarrfs("gen", "-o", str(path), str(tmp_path / "grid.cdl")).returncode == 0
    r = subprocess.run([str(nczarrfs_binary()), command, str(path), "v", option, value],
                       input=b"", capture_output=True, timeout=60, check=False)
    assert r.returncode == 1, r.stderr.decode()
    assert says in r.stderr.decode(), r.stderr.decode()


@pytest.mark.parametrize("spelling", ["same", "link", "url"])
def test_copy_onto_its_own_source_is_refused_as_nccopy_refuses(nczarrfs, dataset, tmp_path,
                                                                 spelling):
    oracle = tmp_path / "o.nc"
    subprocess.run(["ncgen", "-4", "-o", str(oracle), str(tmp_path / "gp.cdl")], check=True)
    r = subprocess.run(["nccopy", str(oracle), str(oracle)], capture_output=True, text=True)
    assert r.returncode == 1 and "overwrite input" in r.stderr
    notes = dataset / "NOTES.txt"
    notes.write_text("kept\n")
    (tmp_path / "link.file").symlink_to(dataset.name)
    target = {"same": str(dataset), "link": str(tmp_path / "link.file"),
              "url": f"file://{dataset}#mode=nczarr,file"}[spelling]
    r = nczarrfs("copy", str(dataset), target)
    assert r.returncode == 1 and b"overwrite the input" in r.stderr, r.stderr.decode()
    assert notes.read_text() == "kept\n"


@pytest.mark.parametrize("spelling", ["path", "link"])
def test_copy_onto_a_dataset_holding_its_source_is_refused(nczarrfs, tmp_path, spelling):
    """A copy of a group of a pure Zarr dataset onto that dataset would replace the dataset,
    its source included, with the copy of its part: refused, and nothing changes."""
    import zarr

    z = tmp_path / "z.zarr"
    root = zarr.open_group(str(z), mode="w", zarr_format=2)
    v = root.create_array("v", shape=(4,), dtype="<i4")
    v[:] = [1, 2, 3, 4]
    v.attrs["_ARRAY_DIMENSIONS"] = ["x"]
    w = root.create_group("sub").create_array("w", shape=(3,), dtype="<i4")
    w[:] = [7, 8, 9]
    w.attrs["_ARRAY_DIMENSIONS"] = ["q"]
    (tmp_path / "link.zarr").symlink_to(z.name)
    target = {"path": z, "link": tmp_path / "link.zarr"}[spelling]
    r = nczarrfs("copy", str(z / "sub"), str(target))
    assert r.returncode == 1 and b"overwrite the input" in r.stderr, r.stderr.decode()
    after = zarr.open_group(str(z), mode="r")
    assert list(after["v"][:]) == [1, 2, 3, 4]
    assert list(after["sub"]["w"][:]) == [7, 8, 9]


@pytest.mark.parametrize("args, code, says", [
    (["copy", "-d", "10", "{ds}", "{out}"], 1, 'deflate level "10" is not from 0 to 9'),
    (["copy", "--codec", "zlib:10", "{ds}", "{out}"], 1, 'level "10" is not from 0 to 9'),
    (["copy", "--codec", "zlib:x", "{ds}", "{out}"], 2, 'level "x" is not a number'),
    (["get", "{ds}", "a", "--start", "99999999999999999999999,0"], 1, "is too large"),
    (["get", "{ds}", "a", "--cache-size", "99999999999999999999G"], 1, "is too large"),
    (["copy", "--for-netcdf-c", "x", "{ds}", "{out}"], 2, 'netcdf-c version "x"'),
    (["gen", "--for-netcdf-c", "x", "-o", "{out}", "{cdl}"], 2, 'netcdf-c version "x"'),
    (["copy", "--for-netcdf-c", "4.8.0", "{ds}", "{out}"], 1, "netcdf-c 4.8.0 reads only"),
])
def test_values_out_of_range_exit_1_and_values_of_the_wrong_form_2(dataset, tmp_path, args,
                                                                    code, says):
    """README, exit status: 1 for a value out of range, 2 for one of the wrong form; the same
    refusal exits the same whichever option gives it (`-d 10`, `--codec zlib:10`)."""
    out = tmp_path / "out.file"
    fill = {"ds": str(dataset), "out": str(out), "cdl": str(tmp_path / "gp.cdl")}
    r = subprocess.run([str(nczarrfs_binary()), *(a.format(**fill) for a in args)],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == code, r.stderr
    assert r.stderr.startswith("nczarrfs: ") and says in r.stderr, r.stderr
    assert not out.exists()


@pytest.mark.parametrize("args, says", [
    (["get", "{ds}", "a", "--cache-size", "xyz"], 'invalid size "xyz"'),
    (["get", "{ds}", "a", "--start", "a"], '--start: "a" is not a non-negative integer'),
    (["copy", "--dimension-separator", "x", "{ds}", "{out}"], "dimension separator"),
    (["copy", "-k", "bogus", "{ds}", "{out}"], "bogus"),
    (["gen", "-k", "bogus", "-o", "{out}", "{cdl}"], "bogus"),
    (["copy", "-c", "garbage", "{ds}", "{out}"], 'invalid --chunks "garbage"'),
    (["copy", "--codec", "nope", "{ds}", "{out}"], 'invalid codec "nope"'),
    # A -k refusal quotes the words as typed (not `nc4` read as `nczarr`) and the destination
    # as given.
    (["gen", "-k", "nc4,zarr", "-o", "{out}", "{cdl}"],
     "-k nc4,zarr: conflicting formats in mode: nc4 and zarr"),
    (["copy", "-k", "NC4,zarr", "{ds}", "{out}"],
     "-k NC4,zarr: conflicting formats in mode: NC4 and zarr"),
    (["gen", "-k", "s3", "-o", "{out}", "{cdl}"],
     "-k s3: mode s3 needs an s3:// or http(s):// URL, not {out}"),
    (["copy", "-k", "zarr,s3", "{ds}", "{out}"],
     "-k zarr,s3: mode s3 needs an s3:// or http(s):// URL, not {out}"),
    # A location's own mode words are refused as -k's are, by every command.
    (["gen", "-o", "file://{out}#mode=bogus", "{cdl}"], 'unknown mode word(s) "bogus"'),
    (["copy", "{ds}", "{out}#mode=zarr,nczarr", ], "conflicting formats"),
    (["copy", "{ds}#mode=bogus", "{out}"], 'unknown mode word(s) "bogus"'),
    (["dump", "file://{ds}#mode=bogus"], 'unknown mode word(s) "bogus"'),
    (["get", "{ds}#mode=bogus", "a"], 'unknown mode word(s) "bogus"'),
    (["put", "{ds}#mode=bogus", "a", "-i", "/dev/null"], 'unknown mode word(s) "bogus"'),
    (["dump", "ftp://host/{ds}"], 'unsupported URL scheme "ftp"'),
])
def test_an_option_value_of_the_wrong_form_exits_2(dataset, tmp_path, args, says):
    """README, exit status: 2 for a command line that cannot be parsed (an unknown option, a
    value of the wrong form, a location that cannot be understood), as the command line
    parser's own refusals (`copy -d x`)."""
    out = tmp_path / "out.file"
    fill = {"ds": str(dataset), "out": str(out), "cdl": str(tmp_path / "gp.cdl")}
    r = subprocess.run([str(nczarrfs_binary()), *(a.format(**fill) for a in args)],
                       capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 2, r.stderr
    says = says.format(**fill)
    assert r.stderr.startswith("nczarrfs: ") and says in r.stderr, r.stderr
    assert "mode-probe" not in r.stderr and "nczarr and" not in r.stderr, r.stderr
    assert not out.exists()
    parser = subprocess.run([str(nczarrfs_binary()), "copy", "-d", "x", str(dataset), str(out)],
                            capture_output=True, text=True, timeout=60, check=False)
    assert parser.returncode == 2
