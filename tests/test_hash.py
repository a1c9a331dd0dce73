"""helm_plan._hash is the one integer hash: compiled, through numpy, and as the references say."""

from __future__ import annotations

import numba as nb
import numpy as np
from brute_cluster import M64, key64, mix64

from helm_plan._hash import counter_hash
from helm_plan._hash import mix64 as compiled_mix64
from helm_plan.cache.keys import splitmix64


@nb.njit(cache=False)
def _counter_hashes(seeds, a, b):  # noqa: ANN001, ANN202
    out = np.empty(seeds.shape[0], np.uint64)
    for i in range(seeds.shape[0]):
        out[i] = counter_hash(seeds[i], a[i], b[i])
    return out


def test_compiled_counter_hash_equals_the_python_reference() -> None:
    rng = np.random.default_rng(0)
    seeds = rng.integers(0, 2**31, 200)
    a = rng.integers(0, 2**40, 200)
    b = rng.integers(0, 2**20, 200)
    got = _counter_hashes(seeds, a, b)
    want = [key64(int(s), int(x), int(y)) for s, x, y in zip(seeds, a, b, strict=True)]
    assert [int(g) for g in got] == want


def test_the_numpy_path_runs_the_same_finaliser() -> None:
    xs = np.array([0, 1, 7, 2**63, M64 - 1, 123456789], np.uint64)
    golden = 0x9E3779B97F4A7C15
    assert [int(h) for h in splitmix64(xs)] == [mix64(int(x) + golden) for x in xs]
    assert [int(compiled_mix64(np.uint64(x))) for x in xs] == [mix64(int(x)) for x in xs]
