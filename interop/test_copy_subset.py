"""`nczarrfs copy -V`, `-v`, `-g`, `-G` and `-u` against nccopy: random netCDF-4 content (twins.py) is
copied by Debian's nccopy from the HDF5 twin and by nczarrfs from the NCZarr twin with the
same options, and Debian's ncdump of the one must equal `nczarrfs dump` of the other.

nccopy turns fill off in what it writes, so with `-v`, `-g` and `-G` the variables it leaves
without data hold whatever the file had there (nczarrfs leaves them at their fill value); only
the header and the data of the variables copied are compared then.
"""

from __future__ import annotations

import os
import subprocess

import netCDF4
import numpy as np

import twins
from conftest import SEED

COUNT = int(os.environ.get("NCZARRFS_SUBSET_COUNT", "30"))


def _names(hpath: str, rng: np.random.Generator) -> list[str]:
    """One to three variable names of the dataset, as plain or full names (not with commas,
    which split the list in nccopy as in ours)."""
    with netCDF4.Dataset(hpath) as nc:
        full = [p for p, _ in twins.walk_variables(nc) if "," not in p]
    if not full:
        return []
    picked = rng.choice(full, size=min(len(full), int(rng.integers(1, 4))), replace=False)
    return [p if rng.random() < 0.5 else p.rsplit("/", 1)[1] for p in picked]


def _groups(hpath: str, rng: np.random.Generator) -> list[str]:
    """One or two group names of the dataset, as full names (`/` for the root) or plain ones
    (every group of that name)."""
    full = ["/"]
    with netCDF4.Dataset(hpath) as nc:
        def walk(g, path):
            for name, sub in g.groups.items():
                if "," not in name:
                    full.append(f"{path}/{name}")
                walk(sub, f"{path}/{name}")
        walk(nc, "")
    picked = rng.choice(full, size=min(len(full), int(rng.integers(1, 3))), replace=False)
    return [p if p == "/" or rng.random() < 0.5 else p.rsplit("/", 1)[1] for p in picked]


def _copied_vars(hpath: str, names: list[str]) -> list[str]:
    """Names of the variables whose data a `-g`/`-G` copy holds, from first principles: those
    whose own group is one the list names (full name, or plain name at any depth). (nccopy -G
    refuses a group listed without its parent.)"""
    with netCDF4.Dataset(hpath) as nc:
        paths = [p for p, _ in twins.walk_variables(nc)]
    def group_of(p):
        return p.rsplit("/", 1)[0] or "/"
    def wanted(g):
        return any(g == n if n.startswith("/") else g != "/" and g.rsplit("/", 1)[1] == n
                   for n in names)
    copied = [p for p in paths if wanted(group_of(p))]
    # Debian's ncdump finds no variable by a full name in the root group (`/v`): a root
    # variable is named plainly, where that names no other variable.
    plain = [p.rsplit("/", 1)[1] for p in paths]
    return [p if group_of(p) != "/" else p[1:] for p in copied
            if group_of(p) != "/" or plain.count(p[1:]) == 1]


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, check=False)


def test_subsets_match_nccopy(nczarrfs, tmp_path):
    print(f"seed {SEED}")
    failures, done, skipped, seed = [], 0, 0, SEED
    while done < COUNT:
        # Debian's nccopy fails on about two in five of them ("NetCDF: Invalid argument"), for
        # one with `-u` and an unlimited dimension of length 0, which netCDF cannot fix.
        assert skipped <= COUNT, f"Debian's nccopy or ncdump failed on {skipped} files"
        name = f"c{done + skipped}"
        zpath, hpath, _ = twins.write_twins(str(tmp_path), name, seed)
        rng = np.random.default_rng(seed)
        seed += 1
        mode = ["-V", "-v", "-g", "-G", "-u"][int(rng.integers(0, 5))]
        names = _groups(hpath, rng) if mode in ("-g", "-G") else _names(hpath, rng)
        options = ["-u"] if mode == "-u" or not names else [mode, ",".join(names)]
        theirs_nc = str(tmp_path / f"{name}_nccopy.nc")
        ours_z = str(tmp_path / f"{name}_copy.file")
        r = _run(["nccopy", *options, hpath, theirs_nc])
        if b"trying to copy a group but not the parent" in r.stderr:
            # nccopy -G refuses a group listed without its parent: so must we.
            done += 1
            res = nczarrfs("copy", *options, zpath, ours_z)
            if res.returncode != 1 or b"without its parent group" not in res.stderr:
                failures.append(f"seed {seed - 1} ({' '.join(options)}): not refused")
            continue
        if r.returncode != 0:
            skipped += 1
            continue
        dump_opts = ["-v", ",".join(names)] if options[0] == "-v" else []
        if options[0] in ("-g", "-G"):
            copied = _copied_vars(hpath, names)
            # ncdump -v needs one variable at least; with none, the header is compared.
            dump_opts = ["-v", ",".join(copied)] if copied else ["-h"]
        want = _run(["ncdump", *dump_opts, "-n", name, theirs_nc])
        if want.returncode != 0:
            skipped += 1
            continue
        done += 1
        res = nczarrfs("copy", *options, zpath, ours_z)
        context = f"seed {seed - 1} ({' '.join(options)}), {name}.* in {tmp_path}"
        if res.returncode != 0:
            failures.append(f"{context}: copy failed: {res.stderr.decode(errors='replace')}")
            continue
        got = nczarrfs("dump", *dump_opts, "-n", name, ours_z)
        if got.stdout != want.stdout:
            failures.append(f"{context}: dump of the copy differs from ncdump of nccopy's")
    print(f"{skipped} seeds skipped: Debian's nccopy or ncdump failed")
    assert not failures, "\n".join(failures)


def test_unknown_variable_is_refused_and_nothing_written(nczarrfs, tmp_path):
    zpath, _, _ = twins.write_twins(str(tmp_path), "u", SEED)
    target = tmp_path / "out.file"
    for flag in ("-V", "-v"):
        res = nczarrfs("copy", flag, "no_such_variable", zpath, str(target))
        assert res.returncode == 1
        assert b"no_such_variable: No such variable" in res.stderr
        assert not target.exists()
    # nccopy finds a group by its full name or a plain one, not by a relative path.
    for flag in ("-g", "-G"):
        for name in ("no_such_group", "a/b"):
            res = nczarrfs("copy", flag, name, zpath, str(target))
            assert res.returncode == 1
            assert f"{name}: No such group".encode() in res.stderr
            assert not target.exists()


def test_an_empty_list_is_refused_and_nothing_written(nczarrfs, tmp_path):
    """`-V "$VARS"` with VARS unset names nothing; nccopy and ncdump crash on it (SIGSEGV in
    4.9.0). Selecting nothing is never what was meant, so nothing is copied or printed."""
    zpath, _, _ = twins.write_twins(str(tmp_path), "e", SEED)
    target = tmp_path / "out.file"
    for flag, what in (("-V", "variable"), ("-v", "variable"), ("-g", "group"),
                       ("-G", "group")):
        for empty in ("", ","):
            res = nczarrfs("copy", flag, empty, zpath, str(target))
            assert res.returncode == 1
            assert f"{flag} names no {what}".encode() in res.stderr, res.stderr
            assert not target.exists()
    for flag, what in (("-v", "variable"), ("-g", "group")):
        res = nczarrfs("dump", flag, "", zpath)
        assert res.returncode == 1
        assert res.stdout == b""
        assert f"{flag} names no {what}".encode() in res.stderr, res.stderr


def test_fix_unlimited_with_a_subset_keeps_the_source_length(nczarrfs, tmp_path):
    """`-u` with `-V`, `-v`, `-g` or `-G` that copy nothing along the unlimited `t` (3
    records) or the group's `r` (2): nccopy makes each a fixed dimension of its length, so the
    variables along it that are defined have its records (ours hold their fill value)."""
    hpath, zpath = str(tmp_path / "u.nc"), str(tmp_path / "u.file")
    for target in (hpath, twins.nczarr_url(zpath)):
        with netCDF4.Dataset(target, "w") as nc:
            nc.createDimension("t", None)
            nc.createDimension("x", 2)
            nc.createVariable("a", "i4", ("t",))[0:3] = [1, 2, 3]
            nc.createVariable("b", "i4", ("x",))[:] = [7, 8]
            g = nc.createGroup("g")
            g.createDimension("r", None)
            g.createVariable("k", "i4", ())[...] = 5
            g.createVariable("q", "i4", ("r",))[0:2] = [4, 5]
    for i, options in enumerate((["-V", "b"], ["-v", "b"], ["-g", "g"], ["-G", "g"],
                                 ["-V", "k"], ["-v", "k"])):
        theirs, ours = str(tmp_path / f"n{i}.nc"), str(tmp_path / f"o{i}.file")
        subprocess.run(["nccopy", "-u", *options, hpath, theirs], check=True)
        res = nczarrfs("copy", "-u", *options, zpath, ours)
        assert res.returncode == 0, res.stderr
        with netCDF4.Dataset(theirs) as h, netCDF4.Dataset(twins.nczarr_url(ours)) as z:
            for hg, zg in ((h, z), (h["g"], z["g"])):
                for name, dim in hg.dimensions.items():
                    got = zg.dimensions[name]
                    assert (len(got), got.isunlimited()) == (len(dim), dim.isunlimited()), \
                        (options, hg.path, name)
                for name, var in hg.variables.items():
                    assert zg[name].shape == var.shape, (options, hg.path, name)
            if "a" in z.variables:
                assert z["a"][:].mask.all(), options


def test_a_group_of_an_nczarr_dataset_is_refused_as_one_with_its_remedies(nczarrfs, tmp_path):
    """netCDF4-python (netcdf-c 4.10.1) opens `src.file/g` as a dataset of its own, but as
    pure Zarr: no superblock there, so the dimensions come from `_ARRAY_DIMENSIONS` in each
    array's group (`/h` gets its own `lon`), none unlimited. NCZarr names the group's
    dimensions from the dataset's root, so `copy` and `dump` refuse the path as the group it
    is, and the ways they name work: `-G`/`-g` on the dataset, or `#mode=zarr`, which reads
    what netcdf-c reads."""
    src = tmp_path / "src.file"
    with netCDF4.Dataset(twins.nczarr_url(str(src)), "w") as nc:
        nc.createDimension("t", None)
        g = nc.createGroup("g")
        g.createDimension("lon", 2)
        g.createVariable("w", "i4", ("lon",))[:] = [7, 8]
        g.createVariable("tv", "i4", ("t",))[0:3] = [1, 2, 3]
        g.createGroup("h").createVariable("q", "f4", ("lon",))[:] = [1.5, 2.5]
    with netCDF4.Dataset(twins.nczarr_url(f"{src}/g/h")) as nc:
        assert [(n, len(d), d.isunlimited()) for n, d in nc.dimensions.items()] == \
            [("lon", 2, False)]
        want_q = nc["q"][:].tolist()
    for group, parents in (("/g", "/g"), ("/g/h", "/g,/g/h")):
        path = f"{src}{group}"
        for cmd in (["copy", path, str(tmp_path / "out.file")], ["dump", path]):
            r = nczarrfs(*cmd)
            assert r.returncode == 1 and r.stdout == b"", r.stderr
            assert (f"{path} is the group {group} of the NCZarr dataset {src}, not a "
                    f"dataset").encode() in r.stderr, r.stderr
            assert f"copy -G {parents} {src} OUT, dump -g {group} {src}".encode() \
                in r.stderr, r.stderr
            assert not (tmp_path / "out.file").exists()
    out = str(tmp_path / "g.file")
    assert nczarrfs("copy", "-G", "/g,/g/h", str(src), out).returncode == 0
    with netCDF4.Dataset(twins.nczarr_url(out)) as nc:
        assert nc["g"]["w"][:].tolist() == [7, 8]
        assert nc["g"]["h"]["q"][:].tolist() == want_q
    pure = nczarrfs("copy", f"file://{src}/g/h#mode=zarr,file", str(tmp_path / "h.file"))
    assert pure.returncode == 0, pure.stderr
    with netCDF4.Dataset(twins.nczarr_url(str(tmp_path / "h.file"))) as nc:
        assert [(n, len(d), d.isunlimited()) for n, d in nc.dimensions.items()] == \
            [("lon", 2, False)]
        assert nc["q"][:].tolist() == want_q
