"""SHARDS (cache/shards.py) against a plain-Python SHARDS worked from the module docstring.

Pins the hash (murmur3's 64-bit finaliser of key xor seed * the golden-ratio constant,
reduced to ``[0, 2**24)``), the threshold ``T = max(1, round(R * P))``, the sampled
distances ``b(x) + (sampled bytes above x) / R`` binned at the first capacity ``>= d``, the
fixed-size rule (on overflow ``T`` drops to the largest live hash, whose keys leave), the
SHARDS_adj shortfall added to the smallest bin, the plain-SHARDS normalisation, the clip to
``[0, lookup]``, size classes, windows and ``shards_mae``. The reference is quadratic list code
on streams of a few dozen accesses.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from helm_plan.cache import shards
from helm_plan.errors import ConfigError

P = 1 << 24
M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


def ref_hash(x: int, seed: int) -> int:
    """murmur3 fmix64 of ``x ^ (seed * golden)``, low 24 bits (plain Python integers)."""
    h = (x ^ ((seed & M64) * GOLDEN & M64)) & M64
    h ^= h >> 33
    h = h * 0xFF51AFD7ED558CCD & M64
    h ^= h >> 33
    h = h * 0xC4CEB9FE1A85EC53 & M64
    h ^= h >> 33
    return h & (P - 1)


def ref_class(ids, kb, offs, edges, grid, rate, s_max, seed, max_b):
    """One size class of SHARDS: (acc [n_win, len(grid)+1], weight [n_win], final T)."""
    t = max(1, round(rate * P))
    n_win = len(edges) - 1
    acc = np.zeros((n_win, len(grid) + 1))
    weight = np.zeros(n_win)
    stack: list[int] = []  # sampled keys, least recent first
    for r in range(len(offs) - 1):
        w = max(k for k in range(n_win) if edges[k] <= r)
        for x in ids[offs[r] : offs[r + 1]]:
            x, b = int(x), int(kb[x])
            if b > max_b or ref_hash(x, seed) >= t:
                continue
            if s_max and x not in stack and len(stack) + 1 > s_max:
                t = max(ref_hash(y, seed) for y in [*stack, x])
                stack = [y for y in stack if ref_hash(y, seed) < t]
                if ref_hash(x, seed) >= t:
                    continue
            scale = P / t
            if x in stack:
                i = stack.index(x)
                d = sum(int(kb[y]) for y in stack[i + 1 :]) * scale + b
                k = next((k for k, g in enumerate(grid) if g >= d), len(grid))
                acc[w, k] += b * scale
                weight[w] += b * scale
                stack.pop(i)
            else:
                acc[w, -1] += b * scale
            stack.append(x)
    return acc, weight, t


def ref_binned(ids, grid, *, rate, s_max=None, seed=0, adjust=True, kb=None, offs=None, edges=None):
    """Plain-Python ``shards_binned_hits``: (hits [n_win, len(grid)], lookup bytes [n_win])."""
    ids = [int(x) for x in ids]
    n_ids = max(ids) + 1 if ids else 0
    kb = [1] * n_ids if kb is None else [int(v) for v in kb]
    offs = [0, len(ids)] if offs is None else [int(o) for o in offs]
    edges = [0, len(offs) - 1] if edges is None else [int(e) for e in edges]
    n_win = len(edges) - 1
    win_of = [max(k for k in range(n_win) if edges[k] <= r) for r in range(len(offs) - 1)]
    sizes = sorted(set(kb[:n_ids]))
    hits = np.zeros((n_win, len(grid)))
    lookup = np.zeros(n_win, np.int64)
    for r in range(len(offs) - 1):
        lookup[win_of[r]] += sum(kb[x] for x in ids[offs[r] : offs[r + 1]])
    for max_b in sizes:
        hi = next((s for s in sizes if s > max_b), None)
        idx = [c for c, g in enumerate(grid) if g >= max_b and (hi is None or g < hi)]
        if not idx:
            continue
        look = np.zeros(n_win)
        cold = np.zeros(n_win)
        seen: set[int] = set()
        for r in range(len(offs) - 1):
            for x in ids[offs[r] : offs[r + 1]]:
                if kb[x] <= max_b:
                    look[win_of[r]] += kb[x]
                    if x not in seen:
                        cold[win_of[r]] += kb[x]
                seen.add(x)
        sub = [grid[c] for c in idx]
        acc, weight, _ = ref_class(ids, kb, offs, edges, sub, rate, s_max or 0, seed, max_b)
        if adjust:
            acc[:, 0] += look - cold - weight
        h = np.cumsum(acc[:, :-1], axis=1)
        if not adjust:
            total = weight + acc[:, -1]
            f = np.array([look[w] / total[w] if total[w] > 0 else 0.0 for w in range(n_win)])
            h = h * f[:, None]
        hits[:, idx] = np.clip(h, 0.0, look[:, None])
    return hits, lookup


def lru_hit_bytes(ids, kb, cap):
    """Brute-force byte-capacity LRU (keys larger than the capacity are never cached)."""
    stack: list[int] = []
    hit = 0
    for x in ids:
        x = int(x)
        if x in stack:
            hit += kb[x]
            stack.remove(x)
        if kb[x] <= cap:
            stack.append(x)
            while sum(kb[y] for y in stack) > cap:
                stack.pop(0)
    return hit


# a stream with reuse at several distances, two key sizes, three requests per window
IDS = np.array([0, 1, 2, 3, 0, 4, 1, 5, 6, 2, 0, 7, 3, 1, 8, 0, 9, 4, 2, 6, 1, 0, 5, 3])
OFFS = np.array([0, 3, 5, 8, 10, 13, 16, 18, 21, 24])
EDGES = np.array([0, 3, 6, 9])
KB = np.array([3, 1, 3, 1, 1, 3, 1, 3, 1, 1])
GRID = np.array([0, 1, 2, 3, 4, 6, 8, 10, 13, 20])


def seed_sampling(rate: float, want: int) -> int:
    """A seed whose threshold samples exactly ``want`` of the 10 keys (found by the reference)."""
    t = max(1, round(rate * P))
    return next(s for s in range(1000) if sum(ref_hash(x, s) < t for x in range(10)) == want)


def test_key_hashes_are_murmur3_fmix64_of_key_xor_seed_mix():
    for seed in (0, 1, 7, -1, 2**64 + 5):
        want = [ref_hash(x, seed) for x in range(40)]
        got = shards.key_hashes(40, seed)
        assert got.dtype == np.int64 and got.shape == (40,)
        assert got.tolist() == want, seed


def test_seed_mix_is_seed_times_golden_ratio_mod_2_64():
    assert shards.seed_mix(0) == 0
    assert shards.seed_mix(1) == GOLDEN
    assert shards.seed_mix(2) == 2 * GOLDEN - 2**64
    assert shards.seed_mix(-1) == 2**64 - GOLDEN  # -1 is all ones: -golden mod 2**64
    assert shards.seed_mix(2**64 + 3) == shards.seed_mix(3)
    assert isinstance(shards.seed_mix(3), np.uint64)


def test_threshold_rounds_rate_times_modulus_and_is_at_least_one():
    assert shards.SHARDS_MODULUS == 2**24
    assert shards.threshold(1.0) == 2**24
    assert shards.threshold(0.5) == 2**23
    assert shards.threshold(0.3) == 5033165  # 0.3 * 2**24 = 5033164.8 rounds up
    assert shards.threshold(0.1) == 1677722  # 1677721.6
    assert shards.threshold(1.2 / 2**24) == 1  # 1.2 rounds down
    assert shards.threshold(1.6 / 2**24) == 2
    assert shards.threshold(1e-12) == 1
    assert shards.threshold(0.0) == 1
    assert isinstance(shards.threshold(0.3), int)


@pytest.mark.parametrize("adjust", [True, False])
@pytest.mark.parametrize(("rate", "want"), [(1.0, 10), (0.5, 5), (0.3, 4)])
def test_binned_hits_equal_the_plain_python_shards(rate, want, adjust):
    seed = 0 if want == 10 else seed_sampling(rate, want)
    got, look = shards.shards_binned_hits(
        IDS, GRID, sample_rate=rate, seed=seed, adjust=adjust, key_bytes=KB, offsets=OFFS,
        edges=EDGES,
    )  # fmt: skip
    ref, ref_look = ref_binned(
        IDS, GRID, rate=rate, seed=seed, adjust=adjust, kb=KB, offs=OFFS, edges=EDGES
    )
    assert got.dtype == np.float64 and look.dtype == np.int64
    np.testing.assert_array_equal(look, ref_look)
    np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-9)


def test_full_sample_is_the_exact_lru_at_every_capacity():
    got, look = shards.shards_binned_hits(IDS, GRID, sample_rate=1.0, key_bytes=KB)
    assert look.tolist() == [int(KB[IDS].sum())]
    want = [lru_hit_bytes(IDS, KB, int(c)) for c in GRID]
    assert got[0].tolist() == want
    # unit sizes, no key_bytes: capacities in rows
    got, look = shards.shards_binned_hits(IDS, np.arange(12), sample_rate=1.0, adjust=False)
    assert look.tolist() == [len(IDS)]
    assert got[0].tolist() == [lru_hit_bytes(IDS, [1] * 10, c) for c in range(12)]


@pytest.mark.parametrize("adjust", [True, False])
@pytest.mark.parametrize("s_max", [1, 2, 3, 5])
def test_fixed_size_equals_the_plain_python_shards(s_max, adjust):
    for seed in (0, 3):
        kw = {"key_bytes": KB, "offsets": OFFS, "edges": EDGES, "seed": seed, "adjust": adjust}
        got, _ = shards.shards_binned_hits(IDS, GRID, sample_rate=0.9, sample_size=s_max, **kw)
        ref, _ = ref_binned(
            IDS, GRID, rate=0.9, s_max=s_max, seed=seed, adjust=adjust, kb=KB, offs=OFFS,
            edges=EDGES,
        )  # fmt: skip
        np.testing.assert_allclose(got, ref, rtol=1e-12, atol=1e-9, err_msg=f"{seed}")


def test_fixed_size_threshold_drops_to_the_largest_live_hash():
    kb = np.ones(10, np.int64)
    for s_max in (2, 4):
        sp = shards.ShardsPass(
            kb, 1, np.array([1, 3]), 1, sample_rate=1.0, sample_size=s_max, seed=1
        )
        assert sp.threshold == P
        ids = np.arange(10, dtype=np.int32)
        sp.feed(ids, np.ones(10, np.int32), np.array([0, 10]), 0, np.array([0, 1]))
        _, _, t = ref_class(ids, kb, [0, 10], [0, 1], [1, 3], 1.0, s_max, 1, 1)
        assert sp.threshold == t < P
        hs = sorted(ref_hash(x, 1) for x in range(10))
        assert sum(h < t for h in hs) <= s_max


def test_hand_worked_sample_of_two_keys_at_rate_one_half():
    """Keys 0..3 of one byte; the seed is chosen so only keys 0 and 2 hash under T = 2**23."""
    t = P // 2
    seed = next(
        s
        for s in range(1000)
        if [ref_hash(x, s) < t for x in range(4)] == [True, False, True, False]
    )
    # keys 1 and 3 are not sampled; each sampled access stands for 1/R = 2 bytes
    ids = np.array([0, 1, 2, 0, 3, 0, 2], np.int32)
    # sampled accesses: 0 (cold), 2 (cold), 0 (d = 1*2 + 1 = 3), 0 (d = 0 + 1 = 1),
    # 2 (d = 1*2 + 1 = 3); each stands for 2 bytes, and the two cold ones for 2 bytes each
    grid = np.array([0, 1, 2, 3, 4])
    hits, look = shards.shards_binned_hits(ids, grid, sample_rate=0.5, seed=seed, adjust=False)
    assert look.tolist() == [7]
    # plain SHARDS: bins 1 -> 2 bytes, 3 -> 4 bytes, represented total 10 of 7 looked up
    np.testing.assert_allclose(hits[0], np.array([0, 2, 2, 6, 6]) * 7 / 10)
    # SHARDS_adj: exact reuse 7 - 4 distinct = 3 against 6 represented: bin 0 gets -3
    hits, _ = shards.shards_binned_hits(ids, grid, sample_rate=0.5, seed=seed)
    np.testing.assert_allclose(hits[0], [0, 0, 0, 3, 3])


def test_hit_bytes_clip_to_zero_and_to_the_lookup():
    sp = shards.ShardsPass(np.ones(4, np.int64), 1, np.array([1, 2, 3]), 2,
                           sample_rate=1.0, sample_size=None, seed=0)  # fmt: skip
    sp.acc[:] = [[5.0, 1.0, 4.0, 2.0], [1.0, 1.0, 1.0, 9.0]]
    sp.weight[:] = [10.0, 3.0]
    look = np.array([8.0, 4.0])
    # adjust: bin 0 += reuse - weight; window 0: 5 + (1 - 10) = -4 -> cumsum -4, -3, 1;
    # window 1: 1 + (5 - 3) = 3 -> 3, 4, 5, clipped at the lookup 4
    got = sp.hit_bytes(look, np.array([1.0, 5.0]), True)
    np.testing.assert_array_equal(got, [[0.0, 0.0, 1.0], [3.0, 4.0, 4.0]])
    assert sp.acc[0, 0] == 5.0  # the pass's own histogram is left alone
    # plain: cumsum scaled by lookup / (weight + cold): 8/12 * (5, 6, 10), 4/12 * (1, 2, 3)
    got = sp.hit_bytes(look, np.array([1.0, 5.0]), False)
    np.testing.assert_allclose(got, [[10 / 3, 4.0, 20 / 3], [1 / 3, 2 / 3, 1.0]])
    sp.weight[:] = [1.0, 3.0]  # window 0: 8/3 * (5, 6, 10), all above the lookup 8
    got = sp.hit_bytes(look, np.array([1.0, 5.0]), False)
    np.testing.assert_allclose(got, [[8.0, 8.0, 8.0], [1 / 3, 2 / 3, 1.0]])
    # nothing represented: zero hits, not NaN, even for a huge lookup
    sp.acc[:] = 0.0
    sp.weight[:] = 0.0
    big = np.array([8.0, 1e9])
    with warnings.catch_warnings():  # and without a floating-point warning on the way
        warnings.simplefilter("error")
        with np.errstate(all="warn"):
            assert sp.hit_bytes(big, np.zeros(2), False).tolist() == [[0.0] * 3] * 2
    # one reuse access of one byte represented: the lookup scales it by lookup / 1
    sp.acc[:] = [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]
    sp.weight[:] = [1.0, 0.0]
    assert sp.hit_bytes(np.array([3.0, 5.0]), np.zeros(2), False).tolist() == [
        [0.0, 3.0, 3.0],
        [0.0, 0.0, 0.0],
    ]


def test_single_capacity_class_is_adjusted():
    """A class with one capacity still gets the shortfall in its (only) bin."""
    sp = shards.ShardsPass(np.ones(4, np.int64), 1, np.array([1]), 1,
                           sample_rate=1.0, sample_size=None, seed=0)  # fmt: skip
    sp.acc[:] = [[1.0, 3.0]]
    sp.weight[:] = [1.0]
    assert sp.hit_bytes(np.array([9.0]), np.array([4.0]), True).tolist() == [[4.0]]
    assert sp.hit_bytes(np.array([9.0]), np.array([4.0]), False).tolist() == [[9 / 4]]


def test_pass_sizes_its_tables_by_the_keys_sampled_at_the_start():
    kb = np.array([1, 2, 1, 2, 1, 2, 1, 2, 1, 2, 5, 5], np.int64)
    seed = seed_sampling(0.5, 5)
    t = P // 2
    live = sum(ref_hash(x, seed) < t and kb[x] <= 2 for x in range(12))
    sp = shards.ShardsPass(kb, 2, [1, 2, 4], 3, sample_rate=0.5, sample_size=None, seed=seed)
    m = 2 * live + 16  # the docstring's Fenwick slots
    assert sp.item_at.shape == (m,) and (sp.item_at == -1).all()
    assert sp.tree.shape == (m + 1,) and not sp.tree.any()
    cap = len(sp.tkey)
    assert cap & (cap - 1) == 0 and cap >= max(16, 2 * live) and (sp.tkey == -1).all()
    assert sp.threshold == t
    assert sp.acc.shape == (3, 4) and sp.weight.shape == (3,)
    assert sp.max_bytes == 2
    fixed = shards.ShardsPass(kb, 2, [1], 1, sample_rate=0.5, sample_size=3, seed=seed)
    assert fixed.item_at.shape == (2 * 3 + 16,)
    # 40 sampled keys: the table keeps its load factor at most 1/2
    full = shards.ShardsPass(np.ones(40, np.int64), 1, [1], 1, sample_rate=1.0, sample_size=None,
                             seed=0)  # fmt: skip
    assert full.item_at.shape == (2 * 40 + 16,) and len(full.tkey) >= 80


def test_sample_settings_are_checked():
    kb = np.ones(3, np.int64)
    for rate in (0.0, 0.5 / P, 1.0 + 1e-9, -1.0):
        with pytest.raises(ConfigError, match="^sample_rate must be in"):
            shards.ShardsPass(kb, 1, [1], 1, sample_rate=rate, sample_size=None, seed=0)
        with pytest.raises(ConfigError, match="^sample_rate must be in"):
            shards.shards_binned_hits(np.array([0, 1]), [1], sample_rate=rate)
        # checked even when no capacity holds a key (no pass is built)
        with pytest.raises(ConfigError, match="^sample_rate must be in"):
            shards.shards_binned_hits(np.array([0, 1]), [0], sample_rate=rate)
    for size in (0, -2):
        with pytest.raises(ConfigError, match="^sample_size must be positive"):
            shards.ShardsPass(kb, 1, [1], 1, sample_rate=1.0, sample_size=size, seed=0)
    with pytest.raises(ConfigError, match="n_ids=3 but the stream holds id 5"):
        shards.shards_binned_hits(np.array([0, 5]), [1], sample_rate=1.0, n_ids=3)
    # the bounds themselves are valid
    shards.ShardsPass(kb, 1, [1], 1, sample_rate=1.0 / P, sample_size=None, seed=0)
    shards.shards_binned_hits(np.array([0, 1]), [1], sample_rate=1.0 / P)


def test_keys_of_a_capacity_size_are_cached_larger_ones_never():
    ids = np.array([0, 1, 0, 1, 2, 0, 2], np.int32)
    kb = np.array([2, 5, 3])
    grid = np.array([1, 2, 3, 4, 5, 7, 10])
    got, look = shards.shards_binned_hits(ids, grid, sample_rate=1.0, key_bytes=kb)
    assert look.tolist() == [2 + 5 + 2 + 5 + 3 + 2 + 3]
    assert got[0].tolist() == [lru_hit_bytes(ids, kb, int(c)) for c in grid]


def test_mae_is_the_mean_absolute_hit_rate_error():
    assert shards.shards_mae(np.zeros(0, np.int32), [1, 2], sample_rate=0.5) == 0.0
    assert shards.shards_mae(IDS, GRID, sample_rate=1.0, key_bytes=KB) == 0.0
    for adjust in (True, False):
        seed = seed_sampling(0.5, 5)
        est, n = ref_binned(IDS, GRID, rate=0.5, seed=seed, adjust=adjust, kb=KB)
        exact = np.array([lru_hit_bytes(IDS, KB, int(c)) for c in GRID])
        want = float(np.mean(np.abs(est[0] - exact) / n[0]))
        got = shards.shards_mae(IDS, GRID, sample_rate=0.5, seed=seed, adjust=adjust, key_bytes=KB)
        assert want > 0.01
        assert got == pytest.approx(want, rel=1e-12)
    # fixed size, unit keys (no key_bytes)
    est, n = ref_binned(IDS, np.arange(11), rate=1.0, s_max=3, seed=2)
    exact = np.array([lru_hit_bytes(IDS, [1] * 10, c) for c in range(11)])
    want = float(np.mean(np.abs(est[0] - exact) / n[0]))
    got = shards.shards_mae(IDS, np.arange(11), sample_rate=1.0, sample_size=3, seed=2)
    assert want > 0.01 and got == pytest.approx(want, rel=1e-12)


def test_defaults_are_seed_zero_adjusted_unbounded():
    want, look = ref_binned(IDS, GRID, rate=0.5, seed=0, adjust=True, kb=KB)
    assert not np.allclose(want, ref_binned(IDS, GRID, rate=0.5, seed=1, kb=KB)[0])
    got, n = shards.shards_binned_hits(IDS, GRID, sample_rate=0.5, key_bytes=KB)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-9)
    exact = np.array([lru_hit_bytes(IDS, KB, int(c)) for c in GRID])
    mae = shards.shards_mae(IDS, GRID, sample_rate=0.5, key_bytes=KB)
    assert mae == pytest.approx(float(np.mean(np.abs(want[0] - exact) / look[0])), rel=1e-12)
