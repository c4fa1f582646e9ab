"""The generator's own check: both twins read back identically through netcdf-c."""

import numpy as np
import pytest

import twins
from conftest import SEED

COUNT = 20


@pytest.mark.parametrize("index", range(COUNT))
def test_twins_hold_the_same_content(tmp_path, index):
    seed = SEED + index
    zpath, hpath, _ = twins.write_twins(str(tmp_path), f"tw{index}", seed)
    diffs = twins.verify_twins(zpath, hpath)
    assert not diffs, f"seed {seed}: twins differ:\n" + "\n".join(diffs)


def test_plan_is_deterministic():
    a, b = twins.plan(12345), twins.plan(12345)
    assert repr(a) == repr(b)


def test_plans_cover_every_type_and_feature():
    kinds, attr_kinds, features = set(), set(), set()

    def walk(grp, depth):
        for _, size in grp.dims:
            features.add("unlimited" if size is None else "fixed")
        if depth:
            features.add("subgroup")
        for attr in grp.attrs:
            attr_kinds.add(attr.kind)
        for var in grp.vars:
            kinds.add(var.kind)
            attr_kinds.update(a.kind for a in var.attrs)
            features.update(k for k in ("zlib", "chunksizes", "endian", "fill_value") if k in var.kwargs)
            if var.kwargs.get("zlib"):
                features.add("shuffle" if var.kwargs["shuffle"] else "noshuffle")
            if not var.dims:
                features.add("scalar")
            if any(" " in n for n in [var.name]):
                features.add("space-in-name")
            for _, data in var.writes:
                if data.dtype.kind == "f" and np.isnan(data).any():
                    features.add("nan")
        for sub in grp.groups:
            walk(sub, depth + 1)

    for seed in range(100):
        walk(twins.plan(seed), 0)
    assert kinds == set(twins.ALL_TYPES)
    assert attr_kinds == set(twins.ALL_TYPES)
    assert features >= {
        "unlimited", "fixed", "subgroup", "zlib", "shuffle", "noshuffle", "chunksizes",
        "endian", "fill_value", "scalar", "space-in-name", "nan",
    }
