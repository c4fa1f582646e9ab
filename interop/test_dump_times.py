"""`nczarrfs dump -t` / `-i` (values of CF time variables as dates) against Debian's ncdump.

(Attribute values are drawn among those netcdf-c's NCZarr writer keeps exactly.)

Random time variables (units from seconds to years since random base dates, every calendar
ncdump knows but `none`, values of every numeric type, whole and fractional, fill values,
`bounds` variables, and numeric attributes of one, two and more values, which ncdump also
annotates with dates) are written by netCDF4-python as NCZarr and as HDF5; `ncdump -t` of the
HDF5 file must equal `nczarrfs dump -t` of the NCZarr store, and so with `-i` and a random
line length. The calendar `none` is left out: ncdump reads its base date as month and day,
reports errors and prints dates without years, which nczarrfs does not imitate (it prints
such values as numbers).
"""

from __future__ import annotations

import difflib
import os
import subprocess

import netCDF4
import numpy as np
import pytest

import twins
from conftest import SEED

COUNT = int(os.environ.get("NCZARRFS_TIMES_COUNT", "40"))
# ncdump matches calendar names and unit words in any case.
CALENDARS = [None, "standard", "gregorian", "proleptic_gregorian", "noleap", "365_day",
             "all_leap", "366_day", "360_day", "julian", "no_leap", "allleap", "NOLEAP",
             "Julian", "360_DAY", "Proleptic_Gregorian", "ALL_LEAP", "Standard"]
UNITS = ["seconds", "second", "sec", "s", "minutes", "min", "mn", "hours", "hour", "hr",
         "days", "day", "dy", "weeks", "wk", "months", "month", "mo", "seasons", "years", "yr",
         "DAYS", "Hours", "SECONDS", "Min", "MO", "Years", "WK", "S"]
TYPES = ["f8", "f4", "i4", "i2", "i8", "u2", "i1", "u4"]


def _base(rng: np.random.Generator) -> str:
    year = int(rng.choice([1, 1582, 1600, 1850, 1900, 1970, 1979, 2000, -100, 1582]))
    year += int(rng.integers(-3, 4))
    date = f"{year:04d}-{int(rng.integers(1, 13))}-{int(rng.integers(1, 29)):02d}"
    style = int(rng.integers(0, 5))
    if style == 1:
        return date + f" {int(rng.integers(0, 24))}:{int(rng.integers(0, 60)):02d}"
    if style == 2:
        return date + f" {int(rng.integers(0, 24)):02d}:{int(rng.integers(0, 60)):02d}:" \
                      f"{float(rng.integers(0, 600)) / 10:04.1f}"
    if style == 3:
        # ISO 8601's `T` before the time, in the forms CF files use.
        hour, minute = int(rng.integers(0, 24)), int(rng.integers(0, 60))
        return date + str(rng.choice([f"T{hour:02d}:{minute:02d}:{int(rng.integers(0, 60)):02d}Z",
                                      f"T{hour:02d}", f"T{hour:02d}:{minute:02d}",
                                      f"T{hour:02d}:{minute:02d}:00+05:00", "T00:00:00Z"]))
    return date


def _values(rng: np.random.Generator, dtype: str, unit: str, n: int) -> np.ndarray:
    info = np.iinfo(dtype) if dtype[0] in "iu" else None
    unit = unit.lower()
    scale = {"s": 1e8, "m": 1e6}.get(unit[0], 1e4)
    if unit.startswith(("mo", "sea", "y")):
        scale = 300
    if unit.startswith(("mi", "mn")):
        scale = 1e6
    vals = rng.normal(0, scale, n)
    if rng.random() < 0.5:
        vals = np.round(vals)
    if info is not None:
        vals = np.clip(np.round(vals), info.min, info.max)
    return vals.astype(dtype)


def _attr_values(rng: np.random.Generator, dtype: str, n: int) -> np.ndarray:
    """Attribute values netcdf-c's NCZarr writer keeps exactly (it writes six significant
    digits): whole numbers below a million, or quarters below ten thousand."""
    if rng.random() < 0.5:
        vals = rng.integers(-999_999, 1_000_000, n).astype("f8")
    else:
        vals = rng.integers(-39_999, 40_000, n) / 4.0
    if dtype[0] in "iu":
        vals = np.round(vals)
    return vals.astype(dtype)


def _build(nc, rng: np.random.Generator) -> None:
    nc.createDimension("t", 7)
    nc.createDimension("nv", 2)
    for i in range(int(rng.integers(1, 5))):
        dtype = str(rng.choice(TYPES))
        unit = str(rng.choice(UNITS))
        v = nc.createVariable(f"time{i}", dtype, ("t",), fill_value=None if rng.random() < 0.6
                              else np.array(0, dtype)[()] + 1)
        v.units = f"{unit} since {_base(rng)}"
        cal = rng.choice(CALENDARS)
        if cal is not None:
            v.calendar = str(cal)
        values = _values(rng, dtype, unit, 7)
        v[:] = values
        if rng.random() < 0.5:
            v.valid_min = _attr_values(rng, "f8", 1)[0]
        if rng.random() < 0.5:
            count = int(rng.integers(1, 6))
            v.actual_range = _attr_values(rng, str(rng.choice(["f4", "f8", "i4"])), count)
        # One bounds variable at most: ncdump forgets every `bounds` attribute but the last
        # one it printed (its list is emptied at each insertion), so the bounds variables of
        # the other time variables print as numbers there, as dates here.
        if rng.random() < 0.5 and not any(n.endswith("_bnds") for n in nc.variables):
            b = nc.createVariable(f"time{i}_bnds", dtype, ("t", "nv"))
            b[:] = _values(rng, dtype, unit, 14).reshape(7, 2)
            v.bounds = f"time{i}_bnds"
    x = nc.createVariable("x", "f4", ("t",))
    x.units = "m"
    x[:] = np.arange(7)


def _same(expected: bytes, got: bytes, what: str) -> str | None:
    if expected == got:
        return None
    diff = difflib.unified_diff(expected.decode(errors="replace").splitlines(keepends=True),
                                got.decode(errors="replace").splitlines(keepends=True),
                                fromfile="ncdump", tofile="nczarrfs dump")
    return f"{what}\n" + "".join(list(diff)[:40])


# netCDF4-python warns that a time attribute does not fit an integer variable's type.
@pytest.mark.filterwarnings("ignore:WARNING")
def test_times_match_ncdump(nczarrfs, tmp_path):
    print(f"seed {SEED}")
    failures = []
    for k in range(COUNT):
        seed = SEED + k
        rng = np.random.default_rng(seed)
        zpath, hpath = tmp_path / f"t{k}.file", tmp_path / f"t{k}.nc"
        state = rng.bit_generator.state
        for target in (twins.nczarr_url(str(zpath)), str(hpath)):
            rng.bit_generator.state = state
            with netCDF4.Dataset(target, "w") as nc:
                _build(nc, rng)
        # ncdump sets the separator at each of -t and -i: the last one given wins.
        options = [["-t"], ["-i"], ["-i", "-t"], ["-t", "-i"]][k % 4]
        if rng.random() < 0.5:
            options += ["-l", str(int(rng.integers(10, 120)))]
        want = subprocess.run(["ncdump", *options, "-n", "t", str(hpath)], capture_output=True,
                              check=True).stdout
        got = nczarrfs("dump", *options, "-n", "t", str(zpath))
        assert got.returncode == 0, got.stderr.decode()
        problem = _same(want, got.stdout, f"seed {seed} ({' '.join(options)}), {hpath}")
        if problem:
            failures.append(problem)
    assert not failures, "\n".join(failures[:3]) + f"\n({len(failures)} of {COUNT} differ)"


def test_values_that_are_no_time_print_as_plain_dump_prints_them(nczarrfs, tmp_path):
    """xarray's NaT (int64 -2^63, no fill value) and a double of 1e300 are no date (Debian's
    `ncdump -t` prints undefined bytes for them): `dump -t` prints them as plain ncdump does,
    between the dates of the other values, in the data and in an attribute's date comment."""
    zpath, hpath = tmp_path / "t.file", tmp_path / "t.nc"
    for target in (twins.nczarr_url(str(zpath)), str(hpath)):
        with netCDF4.Dataset(target, "w") as nc:
            nc.createDimension("n", 2)
            t = nc.createVariable("time", "i8", ("n",), fill_value=False)
            t.units = "hours since 2000-01-01 00:00:00"
            t[:] = [np.iinfo("i8").min, 60]
            d = nc.createVariable("d", "f8", ("n",), fill_value=False)
            d.units = "days since 2000-01-01"
            d.valid_range = np.array([1.0, 1e300])
            d[:] = [1e300, 1]
    plain = subprocess.run(["ncdump", str(hpath)], capture_output=True, check=True).stdout
    lines = dict(ln.strip().split(" = ", 1) for ln in plain.decode().splitlines()
                 if " = " in ln)
    nat, _ = lines["time"].rstrip(" ;").split(", ")
    big, _ = lines["d"].rstrip(" ;").split(", ")
    _, big_attr = lines["d:valid_range"].rstrip(" ;").split(", ")
    assert (nat, big) == ("-9223372036854775808", "1e+300")  # the stored values
    got = nczarrfs("dump", "-t", str(zpath))
    assert got.returncode == 0, got.stderr.decode()
    text = got.stdout.decode()
    # 60 hours and 1 day after 2000-01-01.
    assert f' time = {nat}, "2000-01-03 12" ;\n' in text, text
    assert f' d = {big}, "2000-01-02" ;\n' in text, text
    assert f'd:valid_range = 1., {big_attr} ; // "2000-01-02", {big_attr}\n' in text, text


# Units and calendars ncdump reads in ways the random draw above may miss: the base date's
# time after ISO 8601's `T` (with or without a zone, a blank after the `T`, nothing before
# it, which is cdtime's default base year 1979), unit words and calendar names in any case,
# and a capitalized `Since`, which is no time in both.
TABLE_UNITS = ["days since 2000-01-01T12:00:00Z", "days since 2000-01-01T12",
               "hours since 2000-01-01T06:30:15 UTC", "days since 2000-01-01T12:30",
               "days since 2000-01-01T12:00:00+05:00", "days since 2000-01-01T",
               "days since 2000-01-01T 06:00", "days since T12", "days since 2000-01-01t12",
               "days since 2000-01-01 12:00T5", "DAYS since 2000-01-01", "Days since 2000-01-01",
               "HR since 2000-01-01", "S since 2000-01-01", "MONTHS since 2000-01-15",
               "Seasons since 2000-01-15", "YR since 2000-01-15", "Days Since 2000-01-01"]
TABLE_CALENDARS = ["NOLEAP", "Noleap", "NO_LEAP", "365_DAY", "360_DAY", "ALL_LEAP", "All_leap",
                   "ALLLEAP", "366_DAY", "JULIAN", "Julian", "PROLEPTIC_GREGORIAN",
                   "Proleptic_gregorian", "STANDARD", "Gregorian", "J", "P"]


@pytest.mark.parametrize("option", ["-t", "-i"])
def test_iso_bases_and_names_in_any_case_match_ncdump(nczarrfs, tmp_path, option):
    zpath, hpath = tmp_path / "t.file", tmp_path / "t.nc"
    for target in (twins.nczarr_url(str(zpath)), str(hpath)):
        with netCDF4.Dataset(target, "w") as nc:
            nc.createDimension("t", 3)
            for i, units in enumerate(TABLE_UNITS):
                v = nc.createVariable(f"u{i}", "f8", ("t",))
                v.units = units
                v.valid_max = 2.5
                v[:] = [1.25, -0.75, 400.5]
            for i, calendar in enumerate(TABLE_CALENDARS):
                v = nc.createVariable(f"c{i}", "f8", ("t",))
                v.units = "days since 1582-10-01 06:00"
                v.calendar = calendar
                v[:] = [4.0, 400.0, -1000.25]
    want = subprocess.run(["ncdump", option, "-n", "t", str(hpath)], capture_output=True,
                          check=True).stdout
    got = nczarrfs("dump", option, "-n", "t", str(zpath))
    assert got.returncode == 0, got.stderr.decode()
    problem = _same(want, got.stdout, f"{option}, {hpath}")
    assert problem is None, problem
