"""Debian's netcdf-c (4.9.0) as a second NCZarr implementation, and variables without fill.

Debian's ncgen and ncdump write and read NCZarr themselves, in the upper-case `_NCZARR_*`
layout of netcdf-c 4.8.1–4.9.0. Random contents of twins.py, printed by Debian's `ncdump -s`
from their HDF5 twin, go through Debian's `ncgen` to NCZarr; then
* `nczarrfs dump` (with and without `-s`) of that store must print what Debian's `ncdump`
  prints of it, byte for byte;
* with `-x` (no fill) on both sides, `nczarrfs dump -s` of what `nczarrfs gen -x` makes must
  print what Debian's `ncdump -s` prints of what `ncgen -x` makes, but for `_NCProperties`,
  which names the writer; netCDF4-python (netcdf-c 4.10.1) must read our output as no-fill
  variables with the values `nczarrfs get` reads.

What 4.9.0's NCZarr cannot hold is left out of the drawn contents: string variables and
attributes (its ncgen crashes on them), scalars (its ncdump crashes on any NCZarr scalar),
unlimited dims (refused, "Invalid dimension size"), compression (written uncompressed, its
filter plugins missing) and `_Storage = "contiguous"` (refused), so every variable gets
explicit chunk sizes. Char data is changed as for the gen oracle (test_gen_oracle.py), where
ncgen cannot read back its own CDL text. Big-endian variables are left out of the read test: 4.9.0 writes their
chunks in little-endian order under a `>` dtype (zarr-python reads those values byte-swapped,
as we do; 4.10.1 fixed it).

netcdf-c stores a variable without fill as `"fill_value": null` in its `.zarray`, keeping any
`_FillValue` as an attribute; cells never written read as zeros there, not as that value. The
last test checks that on arrays netCDF4-python writes.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import netCDF4
import numpy as np

import twins
from conftest import SEED
from test_gen_oracle import _cdl_safe_chars

COUNT = 30

#: The line of `ncdump -s` that names the library that wrote the dataset.
_PROPERTIES = re.compile(rb"\t\t:_NCProperties = .*\n")
_CONTIGUOUS = re.compile(rb'.*:_Storage = "contiguous" ;\n')


def _for_debian_nczarr(root: twins.Group, strings_and_scalars: bool = False) -> None:
    """Changes, in place, a drawn content into one Debian's NCZarr can write and read: fixed
    dimensions, no compression, explicit chunks, and unless `strings_and_scalars` (which
    netcdf-c 4.9.1 holds) no strings and no scalars."""
    extent: dict[str, int] = {}

    def reach(grp: twins.Group) -> None:
        for var in grp.vars:
            for start, data in var.writes:
                for dim, first, count in zip(var.dims, start, data.shape):
                    extent[dim] = max(extent.get(dim, 0), first + count)
        for sub in grp.groups:
            reach(sub)

    def simplify(grp: twins.Group, sizes: dict[str, int]) -> None:
        grp.dims = [(name, size if size is not None else max(extent.get(name, 0), 1))
                    for name, size in grp.dims]
        sizes = {**sizes, **dict(grp.dims)}
        if not strings_and_scalars:
            grp.attrs = [a for a in grp.attrs if a.kind != "string"]
            grp.vars = [v for v in grp.vars if v.kind != "string" and v.dims]
        for var in grp.vars:
            if not strings_and_scalars:
                var.attrs = [a for a in var.attrs if a.kind != "string"]
            for key in ("zlib", "complevel", "shuffle"):
                var.kwargs.pop(key, None)
            if var.dims:
                chunks = var.kwargs.get("chunksizes") or [sizes[d] for d in var.dims]
                var.kwargs["chunksizes"] = [max(1, min(c, sizes[d]))
                                            for c, d in zip(chunks, var.dims)]
        for sub in grp.groups:
            simplify(sub, sizes)

    reach(root)
    simplify(root, {})


def _nczarr(path: Path) -> str:
    return f"file://{path}#mode=nczarr,file"


def _walk(grp, prefix=""):
    for name, var in grp.variables.items():
        yield f"{prefix}/{name}", var
    for name, sub in grp.groups.items():
        yield from _walk(sub, f"{prefix}/{name}")


def _same_as_get(nczarrfs, location: Path, fqn: str, var) -> bool:
    raw = nczarrfs("get", str(location), fqn)
    assert raw.returncode == 0, raw.stderr.decode()
    var.set_auto_maskandscale(False)
    want = np.asarray(var[...])
    got = np.frombuffer(raw.stdout, dtype=want.dtype.newbyteorder("=")).reshape(want.shape)
    nan_is_a_value = want.dtype.kind == "f"
    return bool(np.array_equal(got, want.astype(want.dtype.newbyteorder("=")),
                               equal_nan=nan_is_a_value))


def _little_endian(grp: twins.Group) -> None:
    for var in grp.vars:
        var.kwargs.pop("endian", None)
    for sub in grp.groups:
        _little_endian(sub)


def _debian_stores(tmp_path: Path, offset: int, ncgen_flags: list[str], big_endian: bool):
    """Yields (seed, CDL path, Debian ncgen's NCZarr store) for COUNT random contents."""
    for i in range(COUNT):
        seed = SEED + offset + i
        root = twins.plan(seed)
        _for_debian_nczarr(root)
        # Char data whose CDL text ncgen cannot read back (it overflows on a newline that
        # ends a constant early, and dies here) is changed as for the gen oracle.
        _cdl_safe_chars(root)
        if not big_endian:
            _little_endian(root)
        hpath = tmp_path / f"h{i}.nc"
        with netCDF4.Dataset(hpath, "w", format="NETCDF4") as nc:
            twins._apply(root, nc, hdf5=True)
        cdl = tmp_path / f"h{i}.cdl"
        text = subprocess.run(["ncdump", "-s", str(hpath)], capture_output=True,
                              check=True).stdout
        cdl.write_bytes(_CONTIGUOUS.sub(b"", text))
        ref = tmp_path / f"ncgen{i}.file"
        made = subprocess.run(["ncgen", *ncgen_flags, "-k", "nc4", "-o", _nczarr(ref), str(cdl)],
                              capture_output=True, check=False)
        assert made.returncode == 0, f"seed {seed}: ncgen: {made.stderr.decode()} ({made.returncode})"
        yield seed, cdl, ref


def test_dump_prints_what_debian_ncdump_prints_of_ncgen_stores(nczarrfs, tmp_path):
    print(f"seed {SEED}")
    failures = []
    for seed, _, ref in _debian_stores(tmp_path, 10_000, [], big_endian=False):
        for options in (["-s"], []):
            want = subprocess.run(["ncdump", *options, "-n", "x", _nczarr(ref)],
                                  capture_output=True, check=True).stdout
            got = nczarrfs("dump", *options, "-n", "x", str(ref))
            assert got.returncode == 0, got.stderr.decode()
            if got.stdout != want:
                failures.append(f"seed {seed}: dump {options} differs from Debian's ncdump")
    assert not failures, "\n".join(failures)


def test_gen_no_fill_writes_what_ncgen_x_writes(nczarrfs, tmp_path):
    print(f"seed {SEED}")
    failures = []
    for seed, cdl, ref in _debian_stores(tmp_path, 20_000, ["-x"], big_endian=True):
        want = subprocess.run(["ncdump", "-s", "-n", "x", _nczarr(ref)], capture_output=True,
                              check=True).stdout
        ours = tmp_path / f"ours-{ref.name}"
        made = nczarrfs("gen", "-x", "-o", str(ours), str(cdl))
        assert made.returncode == 0, made.stderr.decode()
        got = nczarrfs("dump", "-s", "-n", "x", str(ours))
        assert got.returncode == 0, got.stderr.decode()
        if _PROPERTIES.sub(b"", got.stdout) != _PROPERTIES.sub(b"", want):
            failures.append(f"seed {seed}: dump -s of gen -x differs from ncdump -s of ncgen -x")
            continue
        assert b'_NoFill = "true"' in want or b"variables:" not in want
        with netCDF4.Dataset(_nczarr(ours)) as nc:
            for fqn, var in _walk(nc):
                if var.get_fill_value() is not None:
                    failures.append(f"seed {seed}: netcdf-c reads {fqn} as filled")
                if not _same_as_get(nczarrfs, ours, fqn, var):
                    failures.append(f"seed {seed}: netcdf-c reads other values of {fqn}")
    assert not failures, "\n".join(failures)


def _values(kind: str) -> np.ndarray:
    return np.array([b"a"] * 4, "S1") if kind == "S1" else np.arange(1, 5, dtype=kind)


def test_no_fill_arrays_of_netcdf_c_read_as_netcdf_c_reads_them(nczarrfs, tmp_path):
    """netCDF4-python writes the first four of nine cells (chunks of three: one whole, one in
    part, one never) of variables without fill, with and without a `_FillValue`, and of
    variables with one. We must report no fill where netcdf-c does, and read what it reads:
    zeros where a variable without fill was not written, even beside its `_FillValue`."""
    path = tmp_path / "nofill.file"
    kinds = ["i1", "u2", "i4", "i8", "f4", "f8", "S1"]

    def fill(kind: str):
        return b"z" if kind == "S1" else np.array(7, kind)

    with netCDF4.Dataset(_nczarr(path), "w") as nc:
        nc.createDimension("x", 9)
        # The dataset's fill mode applies to the variables defined after it is set.
        nc.set_fill_off()
        for kind in kinds:
            nc.createVariable(f"plain_{kind}", kind, ("x",), chunksizes=(3,))
            nc.createVariable(f"attr_{kind}", kind, ("x",), chunksizes=(3,),
                              fill_value=fill(kind))
        nc.set_fill_on()
        for kind in kinds:
            nc.createVariable(f"on_{kind}", kind, ("x",), chunksizes=(3,),
                              fill_value=fill(kind))
        for var in nc.variables.values():
            var[0:4] = _values(var.dtype.str[1:])
    dumped = nczarrfs("dump", "-s", str(path))
    assert dumped.returncode == 0, dumped.stderr.decode()
    no_fill = set(re.findall(rb"\t\t(\w+):_NoFill = \"true\"", dumped.stdout))
    failures = []
    with netCDF4.Dataset(_nczarr(path)) as nc:
        for fqn, var in _walk(nc):
            theirs = var.get_fill_value() is None
            if theirs != (var.name.encode() in no_fill):
                failures.append(f"{fqn}: netcdf-c says no fill is {theirs}, we differ")
            if not _same_as_get(nczarrfs, path, fqn, var):
                failures.append(f"{fqn}: values differ from netcdf-c's")
    assert not failures, "\n".join(failures)
    # The point, from first principles: a `_FillValue` beside `null` fills nothing.
    with netCDF4.Dataset(_nczarr(path)) as nc:
        nc.set_auto_maskandscale(False)
        assert (nc["attr_i4"][8], nc["on_i4"][8], nc["plain_i4"][8]) == (0, 7, 0)
    assert no_fill == {f"{p}_{k}".encode() for p in ("plain", "attr") for k in kinds}


#: Record and fixed variables given fewer values than they hold, one given none; the first
#: is shorter than one that comes after it.
SHORT_DATA_CDL = """netcdf short {
dimensions:
	x = 3 ;
	t = UNLIMITED ;
variables:
	short one(t) ;
		one:_FillValue = 5s ;
	int full(t, x) ;
	float part(t, x) ;
	double fixed(x) ;
	byte none(t) ;
	char text(t, x) ;
data:
 one = 9 ;
 full = 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12 ;
 part = 1, 2, 3, 4 ;
 fixed = _, 2.5 ;
 text = "ab" ;
}
"""


def test_gen_no_fill_pads_records_as_ncgen_x_does(nczarrfs, tmp_path):
    """Under -x, ncgen writes the fill into every cell a data section leaves out, records
    included, up to the dataset's last; a variable without data gets nothing. The oracle is
    Debian's ncgen -x writing a classic file, where what is never written reads as zeros (the
    file grows sparse): its data section must be ours."""
    cdl = tmp_path / "short.cdl"
    cdl.write_text(SHORT_DATA_CDL)
    classic = tmp_path / "short.nc"
    subprocess.run(["ncgen", "-x", "-3", "-o", str(classic), str(cdl)], check=True)
    want = subprocess.run(["ncdump", str(classic)], capture_output=True, check=True).stdout
    ours = tmp_path / "short.file"
    made = nczarrfs("gen", "-x", "-o", str(ours), str(cdl))
    assert made.returncode == 0, made.stderr.decode()
    got = nczarrfs("dump", str(ours))
    assert got.returncode == 0, got.stderr.decode()
    data = lambda text: text[text.index(b"\ndata:"):]  # noqa: E731
    assert data(got.stdout) == data(want)
    # From first principles too: the records `one` was not given hold its fill, and the
    # variable without data reads as zeros.
    assert b" one = 9, _, _, _ ;" in want and b" none = 0, 0, 0, 0 ;" in want
