"""Command lines written for Debian's ncgen, nccopy and ncdump (netcdf-c 4.9.0) given to
`gen`, `copy` and `dump`: where the reference tool takes an option, or a combination of
options, so does nczarrfs, with the same meaning (the same exit status, and the same output
or dataset content); where it refuses one, so does nczarrfs.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import netCDF4
import pytest

from conftest import nczarrfs_binary
from twins import nczarr_url

INT_CDL = "netcdf x { dimensions: d = 3 ; variables: int v(d) ; data: v = 1, 2, 3 ; }\n"


def _ncdump(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["ncdump", *args], capture_output=True, check=False)


def _data_section(text: bytes) -> bytes:
    """What follows `data:` in CDL: the values, whatever the dataset's name and kind."""
    return text.split(b"data:", 1)[1]


@pytest.fixture
def int_twins(nczarrfs, tmp_path) -> tuple[Path, Path]:
    """The same small dataset made by ncgen (netCDF-4) and by `gen` (NCZarr)."""
    cdl = tmp_path / "x.cdl"
    cdl.write_text(INT_CDL)
    nc, store = tmp_path / "x.nc", tmp_path / "x.file"
    subprocess.run(["ncgen", "-k", "nc4", "-o", str(nc), str(cdl)], check=True)
    r = nczarrfs("gen", "-o", str(store), str(cdl))
    assert r.returncode == 0, r.stderr
    return nc, store


@pytest.mark.parametrize("size", ["4194304", "64M", "1.5k", "0"])
def test_copy_dash_h_is_the_chunk_cache_size_as_in_nccopy(nczarrfs, int_twins, tmp_path, size):
    """nccopy's `-h N` sets the chunk cache size and copies; `-h` is not help."""
    nc, store = int_twins
    ref = tmp_path / "ref.nc"
    r = subprocess.run(["nccopy", "-h", size, str(nc), str(ref)], capture_output=True)
    assert r.returncode == 0, r.stderr
    out = tmp_path / "out.file"
    r = nczarrfs("copy", "-h", size, str(store), str(out))
    assert r.returncode == 0, r.stderr
    assert r.stdout == b""
    got = nczarrfs("dump", str(out))
    assert _data_section(got.stdout) == _data_section(_ncdump(str(ref)).stdout)


def test_copy_dash_h_with_a_bad_suffix_is_refused_as_by_nccopy(nczarrfs, int_twins, tmp_path):
    nc, store = int_twins
    r = subprocess.run(["nccopy", "-h", "4X", str(nc), str(tmp_path / "ref.nc")],
                       capture_output=True)
    assert r.returncode != 0
    out = tmp_path / "out.file"
    r = nczarrfs("copy", "-h", "4X", str(store), str(out))
    assert r.returncode == 2, r.stderr
    assert not out.exists()


@pytest.mark.parametrize("command", ["copy", "dump", "gen", "get", "put"])
def test_long_help_prints_help(nczarrfs, command):
    r = nczarrfs(command, "--help")
    assert r.returncode == 0, r.stderr
    assert b"Usage:" in r.stdout


# ncgen's and nccopy's kind options that make netCDF-4 (Debian 4.9.0: `ncdump -k` of the
# result says `netCDF-4`), which is NCZarr here.
NETCDF4_KINDS = [["-k", "nc4"], ["-k", "3"], ["-k", "netCDF-4"], ["-k", "netCDF4"],
                 ["-k", "enhanced"], ["-k", "hdf5"], ["-4"], ["-k", "nc7", "-4"],
                 ["-7", "-k", "nc4"], ["-k", "nc7", "-k", "nc4"]]
# Those that make the netCDF-4 classic model (`netCDF-4 classic model`) or a netCDF-3 format.
OTHER_KINDS = [(["-k", "4"], "netCDF-4 classic model"), (["-k", "nc7"], "netCDF-4 classic model"),
               (["-k", "netCDF-4 classic model"], "netCDF-4 classic model"),
               (["-7"], "netCDF-4 classic model"), (["-4", "-k", "nc7"], "netCDF-4 classic model"),
               (["-k", "nc4", "-7"], "netCDF-4 classic model"), (["-k", "1"], "classic"),
               (["-3"], "classic"), (["-k", "2"], "64-bit offset"), (["-6"], "64-bit offset")]


def _reference_kind(tool: str, options: list[str], tmp_path: Path) -> str:
    """`ncdump -k` of what ncgen or nccopy makes with `options`."""
    cdl = tmp_path / "ref.cdl"
    cdl.write_text(INT_CDL)
    src, out = tmp_path / "ref-src.nc", tmp_path / "ref-out.nc"
    out.unlink(missing_ok=True)
    if tool == "gen":
        cmd = ["ncgen", *options, "-o", str(out), str(cdl)]
    else:
        subprocess.run(["ncgen", "-k", "nc4", "-o", str(src), str(cdl)], check=True)
        cmd = ["nccopy", *options, str(src), str(out)]
    subprocess.run(cmd, check=True, capture_output=True)
    return _ncdump("-k", str(out)).stdout.decode().strip()


def _ours(nczarrfs, tool: str, options: list[str], store: Path, tmp_path: Path, out: Path):
    if tool == "gen":
        return nczarrfs("gen", *options, "-o", str(out), str(tmp_path / "x.cdl"))
    return nczarrfs("copy", *options, str(store), str(out))


@pytest.mark.parametrize("tool", ["gen", "copy"])
@pytest.mark.parametrize("options", NETCDF4_KINDS, ids=" ".join)
def test_netcdf4_kinds_make_nczarr(nczarrfs, int_twins, tmp_path, tool, options):
    assert _reference_kind(tool, options, tmp_path) == "netCDF-4"
    nc, store = int_twins
    out = tmp_path / "out.file"
    r = _ours(nczarrfs, tool, options, store, tmp_path, out)
    assert r.returncode == 0, r.stderr
    assert (out / ".zattrs").exists()  # NCZarr v2: its superblock is in the root's attributes
    got = nczarrfs("dump", str(out))
    assert _data_section(got.stdout) == _data_section(_ncdump(str(nc)).stdout)


@pytest.mark.parametrize("tool", ["gen", "copy"])
@pytest.mark.parametrize("options,kind", OTHER_KINDS, ids=lambda o: " ".join(o) if
                         isinstance(o, list) else o)
def test_classic_model_and_netcdf3_kinds_are_refused(nczarrfs, int_twins, tmp_path, tool,
                                                     options, kind):
    """NCZarr records no classic model (see below), nor is it a netCDF-3 format: rather than
    full netCDF-4 under the name of another kind, nothing is written."""
    assert _reference_kind(tool, options, tmp_path) == kind
    _, store = int_twins
    out = tmp_path / "out.file"
    r = _ours(nczarrfs, tool, options, store, tmp_path, out)
    assert r.returncode == 1, r.stderr
    want = b"classic model" if "model" in kind else b"netCDF-3 format"
    assert want in r.stderr, r.stderr
    assert not out.exists()


def test_netcdf_c_keeps_no_classic_model_in_nczarr(tmp_path):
    """Why the classic model is refused: netcdf-c, asked for it (NC_CLASSIC_MODEL) with
    mode=nczarr, writes the very objects it writes for netCDF-4, takes a string variable the
    classic model forbids, and reads the dataset back as netCDF-4."""
    trees = []
    for fmt in ("NETCDF4_CLASSIC", "NETCDF4"):
        path = tmp_path / f"{fmt}.file"
        with netCDF4.Dataset(nczarr_url(str(path)), "w", format=fmt) as nc:
            nc.createDimension("d", 2)
            nc.createVariable("s", str, ("d",))
        with netCDF4.Dataset(nczarr_url(str(path))) as nc:
            assert nc.data_model == "NETCDF4"
        trees.append({p.relative_to(path): p.read_bytes() for p in path.rglob("*")
                      if p.is_file()})
    assert trees[0] == trees[1]


# 2-D floats and doubles, without scalars (whose `-f f` index ncdump prints from past the end
# of its array).
NUMBERS_CDL = """netcdf n {
dimensions: r = 2, c = 3 ;
variables:
  double b(r, c) ;
  float f(r, c) ;
data:
  b = 0, 0.333333333333333, 0.666666666666667, 1, 1.33333333333333, 1.66666666666667 ;
  f = 0.1, 0.2, 0.3333333, 1.5, 2.25, 3.125 ;
}
"""


@pytest.fixture
def number_twins(nczarrfs, tmp_path) -> tuple[Path, Path]:
    cdl = tmp_path / "n.cdl"
    cdl.write_text(NUMBERS_CDL)
    nc, store = tmp_path / "n.nc", tmp_path / "n.file"
    subprocess.run(["ncgen", "-k", "nc4", "-o", str(nc), str(cdl)], check=True)
    r = nczarrfs("gen", "-o", str(store), str(cdl))
    assert r.returncode == 0, r.stderr
    return nc, store


@pytest.mark.parametrize("options", [
    "-p 3 -p 3,5", "-p 3,5 -p 3", "-p ,5", "-p ,", "-p 3,5,7", "-p 3x", "-p 3,5x", "-p 4,-7",
    "-b c -b f", "-f c -f f", "-b c -f f", "-f f -b c", "-b f -f c", "-f c -b c -b f",
    "-l 20 -l 30", "-n a -n b", "-h -h", "-c -c", "-t -t", "-k -x", "-x -k", "-k -k",
    "-p 3,0", "-p 3,", "-p 3,,5", "-p x",
])
def test_dump_takes_repeated_and_combined_options_as_ncdump(nczarrfs, number_twins, options):
    """Where ncdump takes the options, the output is the same; where it refuses them
    (`-p 3,0`, `-p 3,`, `-p x`), so does `dump`, with README's exit status: 1 for digits out
    of range (`3,0`, `4,-7`), 2 where no digits are (`3,`, `x`)."""
    nc, store = number_twins
    want = _ncdump(*options.split(), str(nc))
    got = nczarrfs("dump", *options.split(), str(store))
    if want.returncode == 0 and not want.stderr:
        assert got.returncode == 0, got.stderr
        assert got.stdout == want.stdout
    else:
        out_of_range = options in ("-p 3,0", "-p 4,-7")
        assert got.returncode == (1 if out_of_range else 2), got.stderr
        assert got.stdout == b""


def test_dump_x_is_refused_as_by_ncdump(nczarrfs, number_twins):
    nc, store = number_twins
    want = _ncdump("-x", str(nc))
    assert want.returncode == 1 and b"NcML" in want.stderr
    got = nczarrfs("dump", "-x", str(store))
    assert got.returncode == 1
    assert b"NcML" in got.stderr
    assert got.stdout == b""


# Floats and doubles with and without `C_format`, and float attributes.
C_FORMAT_CDL = """netcdf n {
dimensions: r = 2, c = 3 ;
variables:
  double b(r, c) ;
    b:C_format = "%.3f" ;
    b:scale = 0.333333333333333 ;
  double e(c) ;
  float f(r, c) ;
    f:C_format = "%.2e" ;
    f:scale = 0.3333333f ;
  float g(c) ;
data:
  b = 0, 0.333333333333333, 0.666666666666667, 1, 1.33333333333333, 1.66666666666667 ;
  e = 0.142857142857143, 1e+100, -2.5 ;
  f = 0.1, 0.2, 0.3333333, 1.5, 2.25, 3.125 ;
  g = 0.1428571, 3.125, -7 ;
}
"""


@pytest.fixture
def c_format_twins(nczarrfs, tmp_path) -> tuple[Path, Path]:
    cdl = tmp_path / "n.cdl"
    cdl.write_text(C_FORMAT_CDL)
    nc, store = tmp_path / "n.nc", tmp_path / "n.file"
    subprocess.run(["ncgen", "-k", "nc4", "-o", str(nc), str(cdl)], check=True)
    r = nczarrfs("gen", "-o", str(store), str(cdl))
    assert r.returncode == 0, r.stderr
    return nc, store


@pytest.mark.parametrize("options", [
    "-d 3,5", "-d 3", "-d3,5", "-d ,5", "-d 3,5,7", "-p 3,5", "-p 3,5 -d 4", "-d 3,5 -p 4",
    "-p 3,5 -p 4", "-p 3 -p ,5", "-d 2,3 -d 4", "-p 2 -d 3,4", "-d 2,3 -p ,5",
])
def test_dump_d_is_ncdumps_old_p_that_keeps_c_format(nczarrfs, c_format_twins, options):
    """ncdump's `-d F,D` sets the digits as `-p` does but leaves `C_format` in force; of
    several `-p` and `-d`, the last sets the digits and every `-p` its override."""
    nc, store = c_format_twins
    want = _ncdump(*options.split(), "-n", "n", str(nc))
    assert want.returncode == 0, want.stderr
    got = nczarrfs("dump", *options.split(), "-n", "n", str(store))
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout


@pytest.mark.parametrize("options,status", [(["-d", "0"], 1), (["-d", "3,21"], 1),
                                            (["-d", "x"], 2), (["-d", "3,"], 2)])
def test_dump_d_refuses_what_ncdump_refuses(nczarrfs, c_format_twins, options, status):
    nc, store = c_format_twins
    assert _ncdump(*options, str(nc)).returncode == 1
    got = nczarrfs("dump", *options, str(store))
    assert got.returncode == status, got.stderr
    assert got.stdout == b""


@pytest.mark.parametrize("length", ["0x20", "0X1e", "012", "0100", " 0x1f", "0x50z"])
def test_dump_l_is_read_in_hex_and_octal_as_ncdump_reads_it(nczarrfs, c_format_twins, length):
    """ncdump reads `-l` with `strtol(.., 0)`: `0x20` is 32, `012` (octal) is 10."""
    nc, store = c_format_twins
    want = _ncdump("-l", length, "-n", "n", str(nc))
    assert want.returncode == 0, want.stderr
    got = nczarrfs("dump", "-l", length, "-n", "n", str(store))
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout


@pytest.mark.parametrize("length,read", [("08", 0), ("010x", 8), ("0x", 0), ("-0x20", -32)])
def test_dump_l_refuses_the_hex_and_octal_lengths_ncdump_refuses(nczarrfs, c_format_twins,
                                                                  length, read):
    nc, store = c_format_twins
    want = _ncdump("-l", length, str(nc))
    message = f"unreasonably small line length specified: {read}".encode()
    assert want.returncode == 1 and message in want.stderr, want.stderr
    got = nczarrfs("dump", "-l", length, str(store))
    assert got.returncode == 1, got.stderr
    assert message in got.stderr
    assert got.stdout == b""


@pytest.mark.parametrize("options", [["-L", "-1"], ["-L-1"], ["-Lx"], ["-L", "1.5"],
                                     ["-L", "-h"], ["-L", "99999999999999999999"]])
def test_dump_takes_every_log_level_ncdump_ignores(nczarrfs, c_format_twins, options):
    """ncdump reads `-L`'s value with `atoi` and, without logging built in, ignores it."""
    nc, store = c_format_twins
    want = _ncdump(*options, "-n", "n", str(nc))
    assert want.returncode == 0, want.stderr
    got = nczarrfs("dump", *options, "-n", "n", str(store))
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout


@pytest.mark.parametrize("name", ["-x", "-", "--", "-h"])
def test_dump_n_takes_a_name_starting_with_a_dash(nczarrfs, c_format_twins, name):
    nc, store = c_format_twins
    want = _ncdump("-n", name, str(nc))
    assert want.returncode == 0, want.stderr
    got = nczarrfs("dump", "-n", name, str(store))
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout


def test_dump_extended_kind_of_nczarr_is_refused_as_by_ncdump(nczarrfs, c_format_twins):
    """Debian's ncdump 4.9.0 reads the NCZarr store itself, but has no name for its extended
    format (netcdf-c's NC_FORMATX_NCZARR, 10): `-K` fails, exit 1, nothing printed; with `-k`,
    the kind is printed. So with `dump`."""
    _, store = c_format_twins
    url = nczarr_url(str(store))
    want = _ncdump("-K", url)
    assert want.returncode == 1, want.stderr
    assert b"unrecognized extended format: 10" in want.stderr
    assert want.stdout == b""
    for options in (["-K"], ["-K", "-x"], ["-K", "-h"]):
        got = nczarrfs("dump", *options, str(store))
        assert got.returncode == 1, got.stderr
        assert b"-K" in got.stderr
        assert got.stdout == b""
    for options in (["-k", "-K"], ["-K", "-k"]):
        want = _ncdump(*options, url)
        assert (want.returncode, want.stdout) == (0, b"netCDF-4\n"), want.stderr
        got = nczarrfs("dump", *options, str(store))
        assert (got.returncode, got.stdout) == (0, want.stdout), got.stderr


@pytest.fixture
def nested_twins(tmp_path) -> tuple[Path, Path]:
    """`v` in the root, `w` in `/g`, `u` in `/g/h`: as HDF5 and NCZarr."""
    nc, store = tmp_path / "t.nc", tmp_path / "t.file"
    for target in (str(nc), nczarr_url(str(store))):
        with netCDF4.Dataset(target, "w") as d:
            d.createDimension("n", 3)
            d.createVariable("v", "i4", ("n",))[:] = [1, 2, 3]
            g = d.createGroup("g")
            g.createVariable("w", "i4", ("n",))[:] = [4, 5, 6]
            g.createGroup("h").createVariable("u", "i4", ("n",))[:] = [7, 8, 9]
    return nc, store


@pytest.mark.parametrize("groups", ["/g/h/", "/g/", "//g", "/g//h", "//", "///g///h///",
                                    "/g/,//g/h", "h,/g/"])
def test_dump_g_skips_empty_parts_of_full_group_names_as_ncdump(nczarrfs, nested_twins,
                                                               groups):
    nc, store = nested_twins
    want = _ncdump("-g", groups, "-n", "t", str(nc))
    assert want.returncode == 0, want.stderr
    got = nczarrfs("dump", "-g", groups, "-n", "t", str(store))
    assert got.returncode == 0, got.stderr
    assert got.stdout == want.stdout


@pytest.mark.parametrize("groups", ["g/h/", "h/", "/g/x/", "//x"])
def test_dump_g_refuses_the_group_paths_ncdump_refuses(nczarrfs, nested_twins, groups):
    nc, store = nested_twins
    want = _ncdump("-g", groups, str(nc))
    assert want.returncode == 1
    assert b"No such group" in want.stderr
    got = nczarrfs("dump", "-g", groups, str(store))
    assert got.returncode == 1, got.stderr
    assert b"No such group" in got.stderr


@pytest.fixture
def record_twins(tmp_path) -> tuple[Path, Path]:
    """Root `a`, `b`, `c` along (t unlimited, x), and `w(t)` in group `g`: as HDF5 and NCZarr."""
    nc, store = tmp_path / "t.nc", tmp_path / "t.file"
    for target in (str(nc), nczarr_url(str(store))):
        with netCDF4.Dataset(target, "w") as d:
            d.createDimension("t", None)
            d.createDimension("x", 4)
            for name in "abc":
                d.createVariable(name, "i4", ("t", "x"))[0:2] = [[0, 1, 2, 3], [4, 5, 6, 7]]
            d.createGroup("g").createVariable("w", "i4", ("t",))[0:2] = [1, 2]
    return nc, store


def _deflation(text: bytes) -> list[bytes]:
    return [line.strip() for line in text.splitlines()
            if b"_DeflateLevel" in line or b"_Shuffle" in line]


# (options, the `dump -v` list of the variables whose data the copy holds; None: all)
COPY_REPEATS = [
    ("-d 1 -d 0", None), ("-d 0 -d 1", None), ("-d 1 -s -s", None), ("-u -u", None),
    ("-k nc4 -k nc4", None), ("-h 1M -h 2M", None),
    ("-V a,b -v b", "b"), ("-v b -V a,b", None), ("-V a -V b", None), ("-v a -v b", "b"),
    ("-G g -g /", "a,b,c"), ("-g / -G g", "w"), ("-G / -G g", "w"), ("-g g -g /", "a,b,c"),
    # Empty parts of a full group name are skipped.
    ("-G //g/", "w"), ("-g //", "a,b,c"), ("-g /g/", "w"),
]


@pytest.mark.parametrize("options,copied", COPY_REPEATS)
def test_copy_takes_repeated_and_combined_options_as_nccopy(nczarrfs, record_twins, tmp_path,
                                                            options, copied):
    """The last of an option, or of `-V`/`-v` and of `-G`/`-g`, counts: the same variables
    are defined, the same ones hold data, and the same deflation is used. (nccopy leaves the
    variables without data uninitialized, `copy` at their fill: only the copied data are
    compared.)"""
    nc, store = record_twins
    theirs, ours = tmp_path / "nccopy.nc", tmp_path / "copy.file"
    r = subprocess.run(["nccopy", *options.split(), str(nc), str(theirs)], capture_output=True)
    assert r.returncode == 0, r.stderr
    r = nczarrfs("copy", *options.split(), str(store), str(ours))
    assert r.returncode == 0, r.stderr
    assert nczarrfs("dump", "-h", "-n", "o", str(ours)).stdout == \
        _ncdump("-h", "-n", "o", str(theirs)).stdout
    data = ["-v", copied] if copied else []
    want = _ncdump(*data, "-n", "o", str(theirs))
    assert want.returncode == 0, want.stderr
    assert nczarrfs("dump", *data, "-n", "o", str(ours)).stdout == want.stdout
    assert _deflation(nczarrfs("dump", "-hs", str(ours)).stdout) == \
        _deflation(_ncdump("-hs", str(theirs)).stdout)


def _in(tmp_path: Path, cmd: list[str], stdin: Path | None = None):
    with open(stdin or "/dev/null", "rb") as f:
        return subprocess.run(cmd, cwd=tmp_path, stdin=f, capture_output=True, check=False)


@pytest.mark.parametrize("options", [["-b"], ["-l", "b"], ["-b", "-4"], []])
@pytest.mark.parametrize("from_stdin", [False, True], ids=["file", "stdin"])
def test_gen_takes_ncgens_binary_output_and_standard_input(nczarrfs, tmp_path, options,
                                                           from_stdin):
    """`ncgen -b -o R x.cdl`, `ncgen -l b ...` and `ncgen -o R < x.cdl` (no file named: ncgen
    reads standard input) make the dataset: so does `gen`, with the same content."""
    cdl = tmp_path / "x.cdl"
    cdl.write_text(INT_CDL)
    source = ([], cdl) if from_stdin else (["x.cdl"], None)
    r = _in(tmp_path, ["ncgen", *options, "-k", "nc4", "-o", "R.nc", *source[0]], source[1])
    assert r.returncode == 0, r.stderr
    r = _in(tmp_path, [str(nczarrfs_binary()), "gen", *options, "-o", "R.file", *source[0]],
            source[1])
    assert r.returncode == 0, r.stderr
    want = _ncdump(str(tmp_path / "R.nc")).stdout
    assert _data_section(nczarrfs("dump", str(tmp_path / "R.file")).stdout) == \
        _data_section(want)


def test_gen_reads_standard_input_named_as_ncgen_names_it(nczarrfs, tmp_path):
    """Without a file nor `-o`, ncgen -b names its output after `netcdf x`: `x.nc`."""
    cdl = tmp_path / "input.cdl"
    cdl.write_text(INT_CDL)
    assert _in(tmp_path, ["ncgen", "-b"], cdl).returncode == 0
    assert (tmp_path / "x.nc").exists()
    r = _in(tmp_path, [str(nczarrfs_binary()), "gen"], cdl)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "x.file").is_dir()


@pytest.mark.parametrize("options,ncgen_takes", [
    (["-b", "-l", "b"], False), (["-b", "-b"], False), (["-l", "b", "-l", "b"], False),
    (["-l", "binary"], False), (["-l", "c"], True), (["-l", "f77"], True),
    (["-l", "java"], True),
])
def test_gen_refuses_other_languages_and_repeats(nczarrfs, tmp_path, options, ncgen_takes):
    """ncgen wants one language, once; its program languages (`-l c`, ...) write code, which
    `gen` does not: refused as command-line errors, nothing written."""
    cdl = tmp_path / "x.cdl"
    cdl.write_text(INT_CDL)
    r = _in(tmp_path, ["ncgen", *options, "-o", "R.nc", "x.cdl"])
    assert (r.returncode == 0) == ncgen_takes, r.stderr
    r = nczarrfs("gen", *options, "-o", str(tmp_path / "R.file"), str(cdl))
    assert r.returncode == 2, r.stderr
    assert not (tmp_path / "R.file").exists()


def test_gen_takes_repeated_no_fill_and_output_as_ncgen_does(nczarrfs, tmp_path):
    """ncgen takes `-x -x`, and of `-o A -o B` writes B only: so does `gen`."""
    cdl = tmp_path / "x.cdl"
    cdl.write_text(INT_CDL)
    r = _in(tmp_path, ["ncgen", "-x", "-x", "-k", "nc4", "-o", "A.nc", "-o", "B.nc", "x.cdl"])
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "A.nc").exists() and (tmp_path / "B.nc").exists()
    r = nczarrfs("gen", "-x", "-x", "-o", str(tmp_path / "A.file"), "-o",
                 str(tmp_path / "B.file"), str(cdl))
    assert r.returncode == 0, r.stderr
    assert not (tmp_path / "A.file").exists()
    want = _ncdump("-s", str(tmp_path / "B.nc")).stdout
    got = nczarrfs("dump", "-s", str(tmp_path / "B.file")).stdout
    assert b'_NoFill = "true"' in want
    assert _data_section(got) == _data_section(want)
    assert got.count(b'_NoFill = "true"') == want.count(b'_NoFill = "true"')


BIG = "99999999999999999999"  # past 2^64

# Every option that takes a value, given one of the wrong form (exit status 2) and, where it
# has a range, one of its form out of it (exit status 1), as README's rule says whichever
# option: 1 for a value out of range, 2 for a command line that cannot be parsed.
EXIT_STATUSES = [
    # dump
    (["dump", "-p", "x", "{ds}"], 2), (["dump", "-p", "3,x", "{ds}"], 2),
    (["dump", "-p", "21", "{ds}"], 1), (["dump", "-p", "0", "{ds}"], 1),
    (["dump", "-p", "3,21", "{ds}"], 1), (["dump", "-p", BIG, "{ds}"], 1),
    (["dump", "-l", "x", "{ds}"], 2), (["dump", "-l", "9", "{ds}"], 1),
    (["dump", "-b", "x", "{ds}"], 2), (["dump", "-X", "q", "{ds}"], 2),
    (["dump", "--bogus", "{ds}"], 2),
    # get and put
    (["get", "--start", "a", "{ds}", "v"], 2), (["get", "--start", BIG, "{ds}", "v"], 1),
    (["get", "--count", "a", "{ds}", "v"], 2), (["get", "--count", BIG, "{ds}", "v"], 1),
    (["get", "--stride", "a", "{ds}", "v"], 2), (["get", "--stride", "0", "{ds}", "v"], 1),
    (["get", "--cache-size", "xyz", "{ds}", "v"], 2),
    (["get", "--cache-size", BIG, "{ds}", "v"], 1),
    (["put", "--start", "a", "{ds}", "v"], 2), (["put", "--start", BIG, "{ds}", "v"], 1),
    (["put", "--cache-size", "xyz", "{ds}", "v"], 2),
    (["put", "--cache-size", BIG, "{ds}", "v"], 1),
    # copy
    (["copy", "-d", "x", "{ds}", "{out}"], 2), (["copy", "-d", "10", "{ds}", "{out}"], 1),
    (["copy", "-d", BIG, "{ds}", "{out}"], 1),
    (["copy", "-h", "4X", "{ds}", "{out}"], 2), (["copy", "-h", BIG, "{ds}", "{out}"], 1),
    (["copy", "-c", "garbage", "{ds}", "{out}"], 2), (["copy", "-c", "d/x", "{ds}", "{out}"], 2),
    (["copy", "-c", "v:x", "{ds}", "{out}"], 2), (["copy", "-c", "d/0", "{ds}", "{out}"], 1),
    (["copy", "-c", "v:0", "{ds}", "{out}"], 1), (["copy", "-c", f"d/{BIG}", "{ds}", "{out}"], 1),
    (["copy", "-c", f"v:{BIG}", "{ds}", "{out}"], 1),
    (["copy", "-k", "zarr,v3", "--shards", "d/x", "{ds}", "{out}"], 2),
    (["copy", "-k", "zarr,v3", "--shards", f"d/{BIG}", "{ds}", "{out}"], 1),
    (["copy", "--codec", "nope", "{ds}", "{out}"], 2),
    (["copy", "--codec", "zlib:x", "{ds}", "{out}"], 2),
    (["copy", "--codec", "zlib:10", "{ds}", "{out}"], 1),
    (["copy", "--codec", "blosc:lzma", "{ds}", "{out}"], 2),
    (["copy", "--codec", '[{"id": "nope"}]', "{ds}", "{out}"], 2),
    (["copy", "--codec", '[{"id": "zlib", "level": "x"}]', "{ds}", "{out}"], 2),
    (["copy", "--codec", '[{"id": "zlib", "level": 5.0}]', "{ds}", "{out}"], 2),
    (["copy", "--codec", '[{"id": "blosc", "cname": "lzma"}]', "{ds}", "{out}"], 2),
    (["copy", "--codec", '[{"id": "zlib"}', "{ds}", "{out}"], 2),
    (["copy", "--codec", '[{"id": "zlib", "level": 10}]', "{ds}", "{out}"], 1),
    (["copy", "--codec", '[{"id": "blosc", "blocksize": 4294967296}]', "{ds}", "{out}"], 1),
    (["copy", "--dimension-separator", "x", "{ds}", "{out}"], 2),
    (["copy", "-k", "bogus", "{ds}", "{out}"], 2),
    (["copy", "--for-netcdf-c", "x", "{ds}", "{out}"], 2),
    (["copy", "--for-netcdf-c", "4.7.4", "{ds}", "{out}"], 1),
    (["copy", "--for-netcdf-c", "4.9.99999999999", "{ds}", "{out}"], 1),
    # gen
    (["gen", "-k", "bogus", "-o", "{out}", "{cdl}"], 2),
    (["gen", "--dimension-separator", "x", "-o", "{out}", "{cdl}"], 2),
    (["gen", "-l", "java", "-o", "{out}", "{cdl}"], 2),
    (["gen", "--for-netcdf-c", "x", "-o", "{out}", "{cdl}"], 2),
    (["gen", "--for-netcdf-c", "4.7.4", "-o", "{out}", "{cdl}"], 1),
    (["gen", "--for-netcdf-c", "4.9.99999999999", "-o", "{out}", "{cdl}"], 1),
]


# A negative number is a number of the option's form out of its range: exit status 1, with
# a message saying so, for every option taking a count, length, index, size or level, after a
# space (which the command line parser must take as the value, not as an option), after `=`,
# attached to a short option and inside a list.
NEGATIVE_VALUES = [
    ["dump", "-p", "-1", "{ds}"], ["dump", "-p", "3,-1", "{ds}"], ["dump", "-l", "-1", "{ds}"],
    ["get", "--start", "-1", "{ds}", "v"], ["get", "--start=-1", "{ds}", "v"],
    ["get", "--count", "-1", "{ds}", "v"], ["get", "--stride", "-1", "{ds}", "v"],
    ["get", "--cache-size", "-1", "{ds}", "v"], ["get", "--cache-size=-64K", "{ds}", "v"],
    ["put", "--start", "-1", "{ds}", "v"], ["put", "--start=-1", "{ds}", "v"],
    ["put", "--count", "-1", "{ds}", "v"], ["put", "--stride", "-1", "{ds}", "v"],
    ["put", "--cache-size", "-1", "{ds}", "v"],
    ["copy", "-d", "-1", "{ds}", "{out}"], ["copy", "-d=-1", "{ds}", "{out}"],
    ["copy", "-d-1", "{ds}", "{out}"], ["copy", "--deflate", "-1", "{ds}", "{out}"],
    ["copy", "-h", "-1", "{ds}", "{out}"], ["copy", "-h=-1", "{ds}", "{out}"],
    ["copy", "--cache-size", "-4M", "{ds}", "{out}"],
    ["copy", "-c", "d/-5", "{ds}", "{out}"], ["copy", "-c=d/-5", "{ds}", "{out}"],
    ["copy", "-c", "v:-5", "{ds}", "{out}"], ["copy", "--chunks", "v:-5", "{ds}", "{out}"],
    ["copy", "-k", "zarr,v3", "--shards", "d/-2", "{ds}", "{out}"],
    ["copy", "-k", "zarr,v3", "--shards", "v:-2", "{ds}", "{out}"],
    ["copy", "--codec", "zlib:-1", "{ds}", "{out}"], ["copy", "--codec", "bz2:-1", "{ds}", "{out}"],
    ["copy", "--codec", "blosc:lz4:-1", "{ds}", "{out}"],
    ["copy", "--codec", "blosc:lz4:5:-1", "{ds}", "{out}"],
]
EXIT_STATUSES += [(args, 1) for args in NEGATIVE_VALUES]


@pytest.mark.parametrize("args", NEGATIVE_VALUES, ids=" ".join)
def test_a_negative_number_is_refused_as_out_of_range(nczarrfs, int_twins, tmp_path, args):
    _, store = int_twins
    out = tmp_path / "out.file"
    args = [a.replace("{ds}", str(store)).replace("{out}", str(out)) for a in args]
    values = tmp_path / "one.bin"
    values.write_bytes(b"\0" * 4)
    extra = ["-i", str(values)] if args[0] == "put" else []
    r = nczarrfs(*args, *extra)
    assert r.returncode == 1, r.stderr
    message = r.stderr.decode()
    assert message.startswith("nczarrfs: ") and "\n" == message[-1], message
    assert any(says in message for says in ("negative", "not from", "must be 1 to 20",
                                            "unreasonably small")), message
    assert r.stdout == b""
    assert not out.exists()


@pytest.mark.parametrize("args, status", EXIT_STATUSES,
                         ids=[" ".join(a[:3]) for a, _ in EXIT_STATUSES])
def test_exit_status_of_every_option_value_follows_readmes_rule(nczarrfs, int_twins,
                                                                 tmp_path, args, status):
    _, store = int_twins
    out = tmp_path / "out.file"
    cdl = tmp_path / "x.cdl"
    cdl.write_text(INT_CDL)
    fill = {"ds": str(store), "out": str(out), "cdl": str(cdl)}
    values = tmp_path / "one.bin"
    values.write_bytes(b"\0" * 4)
    extra = ["-i", str(values)] if args[0] == "put" else []
    for key, value in fill.items():
        args = [a.replace("{" + key + "}", value) for a in args]
    r = nczarrfs(*args, *extra)
    assert r.returncode == status, r.stderr
    assert r.stdout == b""
    assert not out.exists()


@pytest.mark.parametrize("executable", [False, True])
def test_a_destination_under_a_regular_file_is_not_a_directory(nczarrfs, int_twins, tmp_path,
                                                               executable):
    """`copy src z.zip/inner` (a zip archive taken for a folder) and `gen -o file/inner` fail
    as the kernel refuses an entry under a file, ENOTDIR, with nothing else to say (no
    temporary to remove), whether the file is executable or not."""
    _, store = int_twins
    plain = tmp_path / "archive.zip"
    plain.write_text("not a folder")
    plain.chmod(0o755 if executable else 0o644)
    with pytest.raises(OSError) as kernel:
        (plain / "probe").write_text("")
    cdl = tmp_path / "x.cdl"
    for cmd, target in ((["copy", str(store)], plain / "out.file"),
                        (["copy", str(store)], plain / "out.zip"),
                        (["gen", str(cdl), "-o"], plain / "out.file")):
        r = nczarrfs(*cmd, str(target))
        assert r.returncode == 1, r.stderr
        lines = r.stderr.decode().splitlines()
        assert lines == [f"nczarrfs: {target}: {kernel.value.strerror} (os error "
                         f"{kernel.value.errno})"], lines
