"""The fleet-size search (bracket + bisection, minimality, non-monotone cases) and cost by hand."""

from __future__ import annotations

import math

import pytest

from helm_plan.errors import ConfigError
from helm_plan.plan.search import Point, cost, first_guess, minimal_nodes


def _threshold(k, calls=None):
    def ev(n):
        if calls is not None:
            calls.append(n)
        return Point(n, n >= k, 100.0 / n, min(1.0, n / k))

    return ev


@pytest.mark.parametrize("k", [1, 2, 3, 7, 31, 32, 33, 100])
@pytest.mark.parametrize("start", [1, 5, 40])
def test_minimal_size_with_n_minus_one_failing(k, start):
    calls = []
    s = minimal_nodes(_threshold(k, calls), start=start, max_nodes=128)
    assert s.nodes == k and not s.non_monotone
    assert s.at[k].passes
    if k > 1:
        assert not s.at[k - 1].passes  # N - 1 was evaluated and fails
    assert len(calls) == len(set(calls))  # no size evaluated twice
    assert len(calls) <= 2 * math.ceil(math.log2(128)) + 3


def test_a_good_guess_costs_three_sizes():
    calls = []
    s = minimal_nodes(_threshold(20, calls), start=20, max_nodes=128)
    assert s.nodes == 20 and sorted(calls) == [19, 20, 21]


def test_none_passes_up_to_max_nodes():
    s = minimal_nodes(_threshold(500), start=3, max_nodes=64)
    assert s.nodes is None and max(p.nodes for p in s.evaluated) == 64


def test_a_non_monotone_answer_is_reported():
    # passes at 4 (a lucky routing), fails 5..8, passes from 9 on
    def ev(n):
        return Point(n, n == 4 or n >= 9, 1.0, 1.0)

    s = minimal_nodes(ev, start=4, max_nodes=64)  # 4 passes, 2 and 3 fail: N = 4 ...
    assert s.nodes == 4 and not s.at[3].passes
    assert not s.at[5].passes and s.non_monotone  # ... but 5 fails: reported
    s2 = minimal_nodes(ev, start=6, max_nodes=64)  # up from a failing start: 6, 7 fail, 9 passes
    assert s2.nodes == 9 and not s2.at[8].passes and s2.at[10].passes
    assert not s2.non_monotone  # the lucky 4 was never tried


def test_cost_by_hand():
    # 12 GPUs at 2.5 USD/h serving 3000 req/s: 30 USD/h; 10.8M requests per hour
    c = cost(12, 2.5, 3000.0)
    assert c.gpu_hours_per_day == 288.0
    assert c.usd_per_hour == 30.0
    assert c.usd_per_million_requests == pytest.approx(30.0 / 10.8, rel=1e-12)
    with pytest.raises(ConfigError, match="cost_per_hour must be finite and >= 0"):
        cost(1, -1.0, 10.0)
    assert first_guess(1000.0, 150.0) == 7 and first_guess(10.0, 0.0) == 1


def test_the_gallop_doubles_its_step_down_and_up():
    # down from a passing guess: 10, 9, 7, 3 pass (steps 1, 2, 4), 1 fails; bisect 2; check 4
    calls = []
    s = minimal_nodes(_threshold(3, calls), start=10, max_nodes=64)
    assert s.nodes == 3 and calls == [10, 9, 7, 3, 1, 2, 4]
    # up from a failing guess: 1, 2, 4, 8, 16 fail, 32 passes; bisect 24, 20, 18, 19; check 21
    calls = []
    s = minimal_nodes(_threshold(20, calls), start=1, max_nodes=64)
    assert s.nodes == 20 and calls == [1, 2, 4, 8, 16, 32, 24, 20, 18, 19, 21]


def test_one_node_fleets_and_the_start_clamp():
    calls = []
    s = minimal_nodes(_threshold(1, calls), start=0, max_nodes=1)  # max_nodes 1 is allowed
    assert s.nodes == 1 and calls == [1]  # no N + 1 beyond max_nodes, no N - 1 below one
    calls = []
    s = minimal_nodes(_threshold(1, calls), start=1, max_nodes=8)
    assert s.nodes == 1 and calls == [1, 2] and not s.non_monotone
    calls = []
    s = minimal_nodes(_threshold(8, calls), start=3, max_nodes=8)  # the answer is max_nodes
    assert s.nodes == 8 and max(calls) == 8 and not s.non_monotone
    with pytest.raises(ConfigError, match="^max_nodes must"):
        minimal_nodes(_threshold(1), start=1, max_nodes=0)


def test_nothing_passing_is_not_non_monotone():
    s = minimal_nodes(_threshold(500), start=3, max_nodes=16)
    assert s.nodes is None and s.non_monotone is False


def test_first_guess_edges_and_cost_errors():
    assert first_guess(10.0, 0.5) == 20  # a slow node: many nodes, not the fallback
    assert first_guess(10.0, 100.0) == 1  # a fast node: one
    assert first_guess(10.0, math.inf) == 1 and first_guess(10.0, math.nan) == 1
    with pytest.raises(ConfigError, match="^nodes must") as e:
        cost(0, 1.0, 10.0)
    assert e.value.hint
    with pytest.raises(ConfigError, match="^qps must") as e:
        cost(1, 1.0, 0.0)
    assert e.value.hint
    with pytest.raises(ConfigError, match="cost_per_hour") as e:
        cost(1, math.inf, 10.0)
    assert e.value.hint == "pass --cost-per-hour GPU=USD with a price in dollars"
    # free and sub-dollar GPUs are prices too
    assert cost(2, 0.0, 10.0).usd_per_hour == 0.0
    assert cost(2, 0.5, 10.0).usd_per_hour == 1.0


@pytest.mark.parametrize("start", [1, 2, 5, 9, 40])
@pytest.mark.parametrize("k", [1, 2, 3, 5, 8, 9, 40, 41, 100])
def test_a_ceiling_is_bisected_from_below(k, start):
    # start is an upper bound (one node's capacity was a lower bound): the same minimal N as
    # a linear scan, N - 1 evaluated failing, no size evaluated twice, and start itself only
    # where every size below it failed or it is the N + 1 check
    calls = []
    s = minimal_nodes(_threshold(k, calls), start=start, max_nodes=128, ceiling=True)
    assert s.nodes == next(n for n in range(1, 129) if n >= k) and not s.non_monotone
    assert s.at[k].passes and (k == 1 or not s.at[k - 1].passes)
    assert len(calls) == len(set(calls))
    if k <= start:
        assert (start in calls) == (k >= start - 1)
        assert len(calls) <= math.ceil(math.log2(start)) + 2
    else:  # the bound was wrong: every size up to start failed, then the gallop up from it
        i = calls.index(start)
        assert calls[: i + 1] == sorted(calls[: i + 1]) and not s.at[start].passes


def test_a_ceiling_by_hand():
    # 5 nodes bound one node passing 1M requests: 2 passes, 1 passes; 5 and 4 never run
    calls = []
    s = minimal_nodes(_threshold(1, calls), start=5, max_nodes=64, ceiling=True,
                      check_above=False)  # fmt: skip
    assert s.nodes == 1 and calls == [2, 1]
    # the gallop from the same guess: 5, 4, 2, 1
    calls = []
    minimal_nodes(_threshold(1, calls), start=5, max_nodes=64, check_above=False)
    assert calls == [5, 4, 2, 1]
    # answer 4 below a ceiling of 5: 2 and 3 fail, 4 passes; 5 never runs
    calls = []
    s = minimal_nodes(_threshold(4, calls), start=5, max_nodes=64, ceiling=True,
                      check_above=False)  # fmt: skip
    assert s.nodes == 4 and calls == [2, 3, 4]
    # a wrong ceiling: 2, 3, 4 and 5 fail, then up by 1 and 2 from 5 (6 fails, 8 passes), 7
    calls = []
    s = minimal_nodes(_threshold(8, calls), start=5, max_nodes=64, ceiling=True,
                      check_above=False)  # fmt: skip
    assert s.nodes == 8 and calls == [2, 3, 4, 5, 6, 8, 7]
