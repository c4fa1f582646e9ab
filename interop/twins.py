"""Random netCDF-4 content written twice: as NCZarr and as netCDF-4/HDF5.

The generator first draws a *plan* (plain Python data) from a seeded RNG, then applies the
same plan to two datasets with netCDF4-python (i.e. netcdf-c):

* ``NAME.file`` — NCZarr in a directory (``file://<abs>/NAME.file#mode=nczarr,file``);
* ``NAME.nc``   — netCDF-4/HDF5.

``ncdump NAME.nc`` is then the oracle for ``nczarrfs dump NAME.file``, and netCDF4-python's
values from ``NAME.nc`` are the oracle for ``nczarrfs get``.

Content is limited where netcdf-c's NCZarr writer is lossy (see the fixtures' INDEX.md,
"Known defects of netcdf-c 4.10.1"), so that both twins hold the same netCDF content:

* float and double attributes and fill values are exact in 6 significant digits;
* char attribute text never parses as JSON (netcdf-c would store it as JSON), is ASCII
  (netcdf-c cuts a char attribute at its first non-ASCII byte) and has no trailing blanks;
* a char fill value is never a backslash (netcdf-c writes invalid JSON for it);
* strings are short (NCZarr stores them as fixed-length ``|S<n>``, 128 bytes by default).

The HDF5 twin's string variables are first written with their fill value wherever the plan
writes less than the whole variable, which leaves the content as it is: Debian's ncdump
fails on HDF5 string variables with some chunks unwritten (see ``_hdf5_string_prefill``).

``verify_twins`` reads both twins back through netCDF4-python and reports any difference,
which is how the generator itself is checked (``test_twins.py``).

Command line: ``python interop/twins.py OUTDIR SEED [COUNT]`` writes COUNT twin pairs.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import netCDF4
import numpy as np

#: netCDF type name → numpy dtype (``str`` for NC_STRING, ``S1`` for NC_CHAR).
NUMERIC_TYPES = {
    "byte": "i1",
    "ubyte": "u1",
    "short": "i2",
    "ushort": "u2",
    "int": "i4",
    "uint": "u4",
    "int64": "i8",
    "uint64": "u8",
    "float": "f4",
    "double": "f8",
}
ALL_TYPES = list(NUMERIC_TYPES) + ["char", "string"]

# Name pieces: plain words plus characters netCDF allows in names and ncdump escapes in CDL.
WORDS = [
    "temp", "pres", "lat", "lon", "time", "x", "y", "z", "level", "obs", "station",
    "flag", "count", "wind", "rh", "depth", "v", "q", "mask", "alpha",
]
NAME_SPECIALS = [" ", "-", "+", ".", "@", "#", "(", ")", "=", "!", ":", "é", "~", "$", "'", "|"]

# Char attribute text: starts with a letter that cannot begin a JSON literal, so netcdf-c
# never mistakes it for JSON.
TEXT_STARTS = "ABCDEGHJKLMOPQRSUVWXYZabcdeghjkmopqrsuvwxyz"
TEXT_BODY = (
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789 .,;:-_+=/()[]{}<>!?#%&*'\"\\"
)
STRING_BODY = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJ0123456789 .,-_'\"\\é"


@dataclass
class Attr:
    """One attribute: ``kind`` is a netCDF type name; ``value`` a numpy array or text."""

    name: str
    kind: str
    value: object


@dataclass
class Var:
    """One variable and the hyperslabs written into it."""

    name: str
    kind: str
    dims: list[str]
    kwargs: dict
    attrs: list[Attr] = field(default_factory=list)
    #: (start tuple, numpy array) boxes written in order.
    writes: list[tuple[tuple[int, ...], np.ndarray]] = field(default_factory=list)


@dataclass
class Group:
    """One group: dims are (name, size or None for unlimited)."""

    name: str
    dims: list[tuple[str, int | None]] = field(default_factory=list)
    attrs: list[Attr] = field(default_factory=list)
    vars: list[Var] = field(default_factory=list)
    groups: list["Group"] = field(default_factory=list)


class _Names:
    """Draws names unique within the whole dataset, so scoping never shadows."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.used: set[str] = set()

    def draw(self, special_prob: float = 0.25) -> str:
        while True:
            name = str(self.rng.choice(WORDS))
            if self.rng.random() < special_prob:
                name += str(self.rng.choice(NAME_SPECIALS)) + str(self.rng.choice(WORDS))
            if self.rng.random() < 0.5:
                name += str(int(self.rng.integers(0, 100)))
            if self.rng.random() < 0.05:
                # A leading digit, which CDL must escape (`\1x`).
                name = str(int(self.rng.integers(0, 10))) + name
            if name not in self.used:
                self.used.add(name)
                return name


def _six_digits(rng: np.random.Generator) -> float:
    """A double that survives netcdf-c's 6-significant-digit JSON (``%g``) unchanged."""
    mantissa = int(rng.integers(-999999, 1000000))
    exponent = int(rng.integers(-12, 12))
    return float(f"{mantissa}e{exponent}") if rng.random() < 0.7 else float(
        rng.choice([0.0, 1.0, -1.0, 0.5, 0.25, 100.0, 1e30, -1e-30])
    )


def _text(rng: np.random.Generator, lo: int = 1, hi: int = 24) -> str:
    n = int(rng.integers(lo, hi))
    alphabet = list(TEXT_BODY + ("\t\n" if rng.random() < 0.2 else ""))
    body = "".join(rng.choice(alphabet, size=n - 1)) if n > 1 else ""
    # netcdf-c's NCZarr writer drops trailing blanks of char attributes.
    return (str(rng.choice(list(TEXT_STARTS))) + body).rstrip()


def _string(rng: np.random.Generator) -> str:
    n = int(rng.integers(0, 12))
    return "".join(rng.choice(list(STRING_BODY), size=n)) if n else ""


def _int_values(rng: np.random.Generator, dtype: str, shape) -> np.ndarray:
    info = np.iinfo(dtype)
    # Mix full-range values with the extremes and small numbers.
    full = rng.integers(info.min, info.max, size=shape, dtype=dtype, endpoint=True)
    small = rng.integers(max(info.min, -100), min(info.max, 100), size=shape, endpoint=True)
    pick = rng.random(size=shape)
    out = np.where(pick < 0.5, full, small.astype(dtype))
    extremes = np.array([info.min, info.max], dtype=dtype)
    out = np.where(pick > 0.95, extremes[rng.integers(0, 2, size=shape)], out)
    return np.asarray(out, dtype=dtype)


def _float_values(rng: np.random.Generator, dtype: str, shape) -> np.ndarray:
    mag = rng.uniform(-1, 1, size=shape) * 10.0 ** rng.integers(-8, 9, size=shape)
    if dtype == "f4":
        mag = mag.astype("f4")
    pick = rng.random(size=shape)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, 0.1], dtype=dtype)
    out = np.where(pick > 0.9, specials[rng.integers(0, len(specials), size=shape)], mag)
    return np.asarray(out, dtype=dtype)


def values(rng: np.random.Generator, kind: str, shape) -> np.ndarray:
    """Random data of a netCDF type (``S1`` bytes for char, object ``str`` for string)."""
    shape = tuple(shape)
    if kind == "char":
        text = (TEXT_BODY + "\n\t").encode()
        if rng.random() < 0.2:
            # Control and non-ASCII bytes, which ncdump prints as octal escapes.
            text += b"\x01\x1b\x7f\x80\xc3\xa9\xff"
        alphabet = np.frombuffer(text, dtype="S1")
        out = rng.choice(alphabet, size=shape)
        # Trailing NULs, as in fixed-width text fields.
        if out.size and rng.random() < 0.5:
            out[rng.random(size=shape) < 0.2] = b""
        return out.astype("S1")
    if kind == "string":
        out = np.empty(shape, dtype=object)
        for idx in np.ndindex(*shape):
            out[idx] = _string(rng)
        return out
    dtype = NUMERIC_TYPES[kind]
    if dtype[0] == "f":
        return _float_values(rng, dtype, shape)
    return _int_values(rng, dtype, shape)


def _attr(rng: np.random.Generator, names: _Names, kind: str | None = None) -> Attr:
    kind = kind or str(rng.choice(ALL_TYPES))
    name = names.draw(special_prob=0.15)
    n = int(rng.integers(1, 5))
    if kind == "char":
        return Attr(name, kind, _text(rng) if rng.random() < 0.95 else "")
    if kind == "string":
        return Attr(name, kind, [_string(rng) for _ in range(n)] if n > 1 else _string(rng))
    dtype = NUMERIC_TYPES[kind]
    if dtype[0] == "f":
        vals = np.array([_six_digits(rng) for _ in range(n)], dtype=dtype)
        if rng.random() < 0.2:
            vals[int(rng.integers(0, n))] = rng.choice([np.nan, np.inf, -np.inf])
        return Attr(name, kind, vals)
    return Attr(name, kind, _int_values(rng, dtype, (n,)))


def _fill_value(rng: np.random.Generator, kind: str):
    dtype = NUMERIC_TYPES[kind]
    if dtype[0] == "f":
        return np.array(_six_digits(rng), dtype=dtype)
    if dtype[1] == "8":
        # netcdf-c parses 64-bit fill values through a double: keep them exact in 53 bits.
        return np.array(int(rng.integers(-(2**53), 2**53)), dtype=dtype) if dtype[0] == "i" else (
            np.array(int(rng.integers(0, 2**53)), dtype=dtype)
        )
    return _int_values(rng, dtype, ())


def _palindromic_fill(rng: np.random.Generator, kind: str):
    dtype = np.dtype(NUMERIC_TYPES[kind])
    if dtype.kind == "f":
        return np.zeros((), dtype=dtype)
    byte = int(rng.choice([0, 0xFF, 0x7F, 0x81, 0x11]))
    return np.frombuffer(bytes([byte]) * dtype.itemsize, dtype=dtype)[0]


def plan(seed: int) -> Group:
    """Draws the content of one dataset from ``seed``."""
    rng = np.random.default_rng(seed)
    names = _Names(rng)
    # Unlimited dims get their length from the writes: remember a target per dim.
    ulen: dict[str, int] = {}
    sizes: dict[str, int | None] = {}

    def make_group(name: str, depth: int, visible: list[str]) -> Group:
        grp = Group(name)
        for _ in range(int(rng.integers(0 if depth else 1, 4))):
            dname = names.draw(special_prob=0.15)
            if rng.random() < 0.25:
                grp.dims.append((dname, None))
                sizes[dname] = None
                ulen[dname] = int(rng.integers(0, 6))
            else:
                size = int(rng.integers(1, 9))
                grp.dims.append((dname, size))
                sizes[dname] = size
        scope = visible + [d for d, _ in grp.dims]
        for _ in range(int(rng.integers(0, 4))):
            grp.attrs.append(_attr(rng, names))
        for _ in range(int(rng.integers(0 if depth else 1, 5))):
            grp.vars.append(make_var(scope))
        if depth < 2:
            for _ in range(int(rng.integers(0, 3 - depth))):
                grp.groups.append(make_group(names.draw(special_prob=0.15), depth + 1, scope))
        return grp

    def make_var(scope: list[str]) -> Var:
        kind = str(rng.choice(ALL_TYPES))
        ndims = int(rng.integers(0, min(3, len(scope)) + 1)) if scope else 0
        dims = [str(d) for d in rng.choice(scope, size=ndims, replace=False)] if ndims else []
        mode = rng.random()
        whole = mode < 0.6 and all(sizes[d] if sizes[d] is not None else ulen[d] for d in dims)
        # netcdf-c's HDF5 reader misplaces values of a variable whose extent along a
        # non-leading unlimited dim is shorter than the dim. A variable written whole reaches
        # every dim's final length (no write goes beyond a dim's planned length); any other
        # gets one unlimited dim, leading.
        if not whole:
            unlimited = [d for d in dims if sizes[d] is None]
            dims = unlimited[:1] + [d for d in dims if sizes[d] is not None]
        var = Var(names.draw(), kind, dims, {})
        numeric = kind in NUMERIC_TYPES
        if dims and kind != "string" and rng.random() < 0.4:
            var.kwargs["zlib"] = True
            var.kwargs["complevel"] = int(rng.integers(1, 10))
            var.kwargs["shuffle"] = bool(rng.random() < 0.5)
        if dims and rng.random() < 0.5:
            var.kwargs["chunksizes"] = [
                int(rng.integers(1, (sizes[d] or max(ulen[d], 1)) + 1)) for d in dims
            ]
        if numeric and rng.random() < 0.3:
            var.kwargs["endian"] = "big"
            # netcdf-c writes the fill of partly written big-endian chunks byte-swapped; a fill
            # whose bytes read the same both ways keeps the twins equal.
            var.kwargs["fill_value"] = _palindromic_fill(rng, kind)
        # netcdf-c writes the default double fill as 9.96921e+36 (6 digits), so the unwritten
        # cells of a double variable differ between the twins unless its fill is explicit.
        if "fill_value" not in var.kwargs and (kind == "double" or (numeric and rng.random() < 0.4)):
            var.kwargs["fill_value"] = _fill_value(rng, kind)
        if whole and dims and "fill_value" not in var.kwargs and rng.random() < 0.15:
            # No fill (`_NoFill = "true"`): only when every cell is written, since unwritten
            # cells then hold whatever each format leaves there.
            var.kwargs["fill_value"] = False
        for _ in range(int(rng.integers(0, 4))):
            var.attrs.append(_attr(rng, names))
        if numeric and rng.random() < 0.2:
            var.attrs.append(Attr("missing_value", kind, np.atleast_1d(_fill_value(rng, kind))))
        if kind in ("float", "double") and "endian" not in var.kwargs and rng.random() < 0.15:
            special = rng.choice([np.nan, np.inf, -np.inf])
            var.kwargs["fill_value"] = np.array(special, dtype=NUMERIC_TYPES[kind])[()]
        if kind == "char" and rng.random() < 0.3:
            # netcdf-c's NCZarr writer fails on closing ("Invalid argument") with a backslash
            # char fill: it does not escape it in the JSON.
            fill = rng.choice([c for c in TEXT_BODY if c != "\\"])
            var.kwargs["fill_value"] = np.bytes_(fill.encode())
        if kind == "string" and rng.random() < 0.3:
            var.kwargs["fill_value"] = _string(rng) or "fill"
        # Current length of each dim for this variable's writes.
        shape = [sizes[d] if sizes[d] is not None else ulen[d] for d in dims]
        if whole:
            var.writes.append(((0,) * len(shape), values(rng, kind, shape)))
        elif 0.6 <= mode < 0.85 and all(shape):
            # A sub-box: the rest stays fill.
            start = tuple(int(rng.integers(0, n)) for n in shape)
            count = tuple(int(rng.integers(1, n - s + 1)) for n, s in zip(shape, start))
            var.writes.append((start, values(rng, kind, count)))
        return var

    return make_group("/", 0, [])


def _set_attr(target, attr: Attr) -> None:
    if attr.kind == "string":
        target.setncattr_string(attr.name, attr.value)
    elif attr.kind == "char":
        target.setncattr(attr.name, attr.value)
    else:
        target.setncattr(attr.name, attr.value)


def _find_dim(nc, name: str):
    """The dim ``name`` as seen from group ``nc``: its own or the nearest ancestor's."""
    while name not in nc.dimensions:
        nc = nc.parent
    return nc.dimensions[name]


def _hdf5_string_prefill(var: Var, nc):
    """The box a string variable's HDF5 twin is first filled with its fill value, or None.

    Debian's ncdump (netcdf-c 4.9.0) fails with "NetCDF: HDF error" on a string variable
    some of whose chunks are allocated and some not. Writing the fill value over the
    variable's extent before the real writes changes nothing in the content, and the NCZarr
    twin keeps its missing chunks (the read path under test).
    """
    if var.kind != "string" or not var.dims or not var.writes:
        return None
    if var.kwargs.get("fill_value") is False:
        return None  # written whole: every chunk is allocated
    end = [0] * len(var.dims)
    for start, data in var.writes:
        end = [max(e, s + n) for e, s, n in zip(end, start, data.shape)]
    extent = []
    for dname, e in zip(var.dims, end):
        dim = _find_dim(nc, dname)
        # Fixed dims are filled whole; unlimited ones only as far as the writes reach, so
        # the dim's length stays what the writes make it.
        extent.append(e if dim.isunlimited() else len(dim))
    return tuple(slice(0, n) for n in extent)


def _apply(grp: Group, nc, hdf5: bool = False) -> None:
    """Applies a plan to an open dataset; ``hdf5`` marks the HDF5 twin (see
    ``_hdf5_string_prefill``)."""
    for dname, size in grp.dims:
        nc.createDimension(dname, size)
    for attr in grp.attrs:
        _set_attr(nc, attr)
    for var in grp.vars:
        if var.kind == "string":
            dtype = str
        elif var.kind == "char":
            dtype = "S1"
        else:
            # The dtype's byte order must agree with the endian keyword.
            order = ">" if var.kwargs.get("endian") == "big" else "<"
            dtype = order + NUMERIC_TYPES[var.kind]
        v = nc.createVariable(var.name, dtype, tuple(var.dims), **var.kwargs)
        v.set_auto_maskandscale(False)
        if var.kind == "char":
            v.set_auto_chartostring(False)
        for attr in var.attrs:
            _set_attr(v, attr)
    for sub in grp.groups:
        _apply(sub, nc.createGroup(sub.name), hdf5)
    # Writes after all definitions: unlimited dims grow as variables are written.
    for var in grp.vars:
        v = nc.variables[var.name]
        prefill = _hdf5_string_prefill(var, nc) if hdf5 else None
        if prefill is not None:
            fill = var.kwargs.get("fill_value", "")
            v[prefill] = np.full(tuple(s.stop for s in prefill), fill, dtype=object)
        for start, data in var.writes:
            index = tuple(slice(s, s + n) for s, n in zip(start, data.shape))
            if var.kind == "string" and not index:
                v[0] = data[()]
            elif not index:
                v.assignValue(data)
            else:
                v[index] = data


def nczarr_url(path: str) -> str:
    """The netcdf-c URL of an NCZarr directory store."""
    return "file://" + os.path.abspath(path) + "#mode=nczarr,file"


def write_twins(outdir: str, name: str, seed: int) -> tuple[str, str, Group]:
    """Writes ``outdir/name.file`` (NCZarr) and ``outdir/name.nc`` (HDF5) from ``seed``.

    Returns the NCZarr directory, the HDF5 path and the plan.
    """
    root = plan(seed)
    zpath = os.path.join(outdir, name + ".file")
    hpath = os.path.join(outdir, name + ".nc")
    for target, hdf5 in ((nczarr_url(zpath), False), (hpath, True)):
        with netCDF4.Dataset(target, "w", format="NETCDF4") as nc:
            _apply(root, nc, hdf5)
    return zpath, hpath, root


def walk_variables(nc, prefix: str = ""):
    """Yields (full name, netCDF4.Variable) for every variable, groups depth-first."""
    for name, var in nc.variables.items():
        yield prefix + "/" + name, var
    for name, sub in nc.groups.items():
        yield from walk_variables(sub, prefix + "/" + name)


def read_values(var) -> np.ndarray:
    """A variable's raw values: fill values kept, char as ``S1``, strings as objects."""
    var.set_auto_maskandscale(False)
    if var.dtype == "S1" or getattr(var.dtype, "char", "") == "S":
        var.set_auto_chartostring(False)
    if var.dtype is str:
        return np.asarray(var[...], dtype=object)
    return np.asarray(var[...])


def same_values(a: np.ndarray, b: np.ndarray) -> bool:
    """Exact equality, NaN equal to NaN, shapes and dtypes (by kind and size) included."""
    if a.shape != b.shape:
        return False
    if a.dtype.kind == "O" or b.dtype.kind == "O":
        return a.dtype.kind == b.dtype.kind and all(x == y for x, y in zip(a.flat, b.flat))
    if a.dtype.kind != b.dtype.kind or a.dtype.itemsize != b.dtype.itemsize:
        return False
    if a.dtype.kind == "f":
        # Bitwise-ish: NaN positions and signed zeros must agree too.
        return bool(np.array_equal(a, b, equal_nan=True)) and bool(
            np.array_equal(np.signbit(a), np.signbit(b))
        )
    return bool(np.array_equal(a, b))


def _same_attr(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, list) or isinstance(b, list):
        return list(np.atleast_1d(a)) == list(np.atleast_1d(b))
    return same_values(np.atleast_1d(np.asarray(a)), np.atleast_1d(np.asarray(b)))


def _compare_group(z, h, path: str, out: list[str]) -> None:
    zd = {n: (len(d), d.isunlimited()) for n, d in z.dimensions.items()}
    hd = {n: (len(d), d.isunlimited()) for n, d in h.dimensions.items()}
    if list(zd.items()) != list(hd.items()):
        out.append(f"{path}: dims {zd} != {hd}")
    if z.ncattrs() != h.ncattrs():
        out.append(f"{path}: attr names {z.ncattrs()} != {h.ncattrs()}")
    for name in h.ncattrs():
        if name in z.ncattrs() and not _same_attr(z.getncattr(name), h.getncattr(name)):
            out.append(f"{path}: attr {name!r} {z.getncattr(name)!r} != {h.getncattr(name)!r}")
    if list(z.variables) != list(h.variables):
        out.append(f"{path}: vars {list(z.variables)} != {list(h.variables)}")
    for name, hv in h.variables.items():
        zv = z.variables.get(name)
        if zv is None:
            continue
        where = f"{path}/{name}"
        if zv.dimensions != hv.dimensions or zv.dtype != hv.dtype:
            out.append(f"{where}: {zv.dimensions} {zv.dtype} != {hv.dimensions} {hv.dtype}")
        if zv.ncattrs() != hv.ncattrs():
            out.append(f"{where}: attr names {zv.ncattrs()} != {hv.ncattrs()}")
        for attr in hv.ncattrs():
            if attr in zv.ncattrs() and not _same_attr(zv.getncattr(attr), hv.getncattr(attr)):
                out.append(f"{where}: attr {attr!r} {zv.getncattr(attr)!r} != {hv.getncattr(attr)!r}")
        za, ha = read_values(zv), read_values(hv)
        if not same_values(za, ha):
            out.append(f"{where}: values differ\n  nczarr {za!r}\n  hdf5   {ha!r}")
    if list(z.groups) != list(h.groups):
        out.append(f"{path}: groups {list(z.groups)} != {list(h.groups)}")
    for name in h.groups:
        if name in z.groups:
            _compare_group(z.groups[name], h.groups[name], f"{path}/{name}", out)


def verify_twins(zpath: str, hpath: str) -> list[str]:
    """Differences between the twins as netcdf-c reads them back (empty when identical)."""
    out: list[str] = []
    with netCDF4.Dataset(nczarr_url(zpath)) as z, netCDF4.Dataset(hpath) as h:
        _compare_group(z, h, "", out)
    return out


def main(argv: list[str]) -> int:
    if len(argv) not in (3, 4):
        print(__doc__.strip().splitlines()[-1], file=sys.stderr)
        return 2
    outdir, seed = argv[1], int(argv[2])
    count = int(argv[3]) if len(argv) == 4 else 1
    os.makedirs(outdir, exist_ok=True)
    bad = 0
    for i in range(count):
        zpath, hpath, _ = write_twins(outdir, f"ds{i:03d}", seed + i)
        diffs = verify_twins(zpath, hpath)
        if diffs:
            bad += 1
            print(f"seed {seed + i}: {hpath}\n  " + "\n  ".join(diffs))
    print(f"{count - bad} passed, {bad} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
