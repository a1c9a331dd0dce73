"""Shared fixtures: small generated traces and the real datasets folder; the hung-test watchdog."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from hang_watchdog import pytest_runtest_protocol, pytest_sessionstart  # noqa: F401 (hooks)

from helm_plan import trace
from helm_plan.datasets import ENV_DIR, ENV_REQUIRE, default_dir

REPO = Path(__file__).resolve().parents[1]
DATASETS = default_dir(REPO)
"""$HELM_PLAN_DATASETS, else ../shared/datasets beside the repository."""


def spy_search_seeds(monkeypatch: pytest.MonkeyPatch, module: object) -> list[int]:
    """Record the seed of every ``module.search`` call (the oracle's per-window Optuna search),
    still running the real search."""
    seeds: list[int] = []
    real = module.search

    def search(objective, ocfg, seed, known=None, evaluate=None, **kw):  # noqa: ANN001, ANN003
        seeds.append(seed)
        return real(objective, ocfg, seed, known, evaluate, **kw)

    monkeypatch.setattr(module, "search", search)
    return seeds


def small_table(
    n: int = 400,
    *,
    n_users: int = 40,
    n_items: int = 200,
    max_new: int = 6,
    n_candidates: int = 8,
    seed: int = 0,
    with_candidates: bool = True,
    rate_qps: float = 50.0,
) -> pa.Table:
    """A small Zipf-ish canonical trace built directly with numpy (independent of synth)."""
    rng = np.random.default_rng(seed)
    ts = np.cumsum(rng.exponential(1.0 / rate_qps, size=n))
    ts -= ts[0]
    users = rng.zipf(1.3, size=n) % n_users
    k = rng.integers(0, max_new + 1, size=n)
    off = np.zeros(n + 1, np.int64)
    np.cumsum(k, out=off[1:])
    vals = rng.zipf(1.2, size=int(off[-1])) % n_items
    kw = {}
    if with_candidates:
        coff = np.arange(n + 1, dtype=np.int64) * n_candidates
        kw = {
            "candidates_offsets": coff,
            "candidates_values": rng.zipf(1.1, size=n * n_candidates) % n_items,
        }
    return trace.make_table(ts, users, off, vals, np.full(n, n_candidates), **kw)


def require_datasets() -> Path:
    """The real datasets folder; skip the test (fail where CI requires them) when absent."""
    if not DATASETS.is_dir():
        msg = (
            f"real datasets not found at {DATASETS}; set {ENV_DIR} to their folder "
            "(`helm-plan datasets` lists them)"
        )
        if os.environ.get(ENV_REQUIRE) == "1":
            pytest.fail(f"{msg} ({ENV_REQUIRE}=1)")
        pytest.skip(msg)
    return DATASETS


@pytest.fixture
def datasets() -> Path:
    """The read-only real datasets (see :func:`require_datasets`)."""
    return require_datasets()


@pytest.fixture
def small_trace(tmp_path: Path) -> Path:
    """A small canonical trace written to a temporary parquet file."""
    p = tmp_path / "small.parquet"
    trace.write(small_table(), p, {"source": "tests.small_table", "seed": 0})
    return p


def untimed(summary: dict, also: tuple[str, ...] = ()) -> dict:
    """A summary without what a clock measured: stage timings (``timings_s``) and the
    controller's decision latency (measured in the run by its runtime's own timer); ``also``
    drops more top-level keys."""
    out = {k: v for k, v in summary.items() if k != "timings_s" and k not in also}
    if out.get("controller"):
        out["controller"] = {k: v for k, v in out["controller"].items()
                             if k != "decision_latency_us"}  # fmt: skip
    return out


from hostile_ws import ws  # noqa: E402, F401 (the hostile-input workspace fixture)
