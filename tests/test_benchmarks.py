"""Every script in ``benchmarks/`` run end to end at a tiny size, in a subprocess.

Nothing else runs them, and a benchmark that only parses ``--help`` breaks unnoticed
(``bench_sim.py`` once raised an IndexError after the model changed). The figures at
these sizes mean nothing; each case checks that the script finishes, prints its table
and, where it checks itself against a peer, that the comparison held.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import REPO, require_datasets

BENCH = REPO / "benchmarks"


@dataclass(frozen=True)
class Case:
    script: str
    args: str
    """The tiny-size arguments; ``{d}`` is the scratch folder (every file the script writes)."""
    expect: tuple[str, ...]
    """Lines (or parts of lines) the script must print on stdout."""
    setup: Callable[[Path], list[str]] | None = None
    """Prepares inputs in the scratch folder; returns more arguments."""
    data: bool = False
    """Reads the public logs (skips with a reason without them, fails under CI)."""

    def argv(self, d: Path) -> list[str]:
        extra = self.setup(d) if self.setup else []
        return [a.replace("{d}", str(d)) for a in self.args.split()] + extra


def _ingest_file(d: Path) -> list[str]:
    # a generated SASRec "user item" file: no need for the real 287k-line log
    rng = random.Random(0)
    path = d / "seq.txt"
    lines = (f"{u} {rng.randint(1, 500)}" for u in range(1, 301) for _ in range(rng.randint(3, 12)))
    path.write_text("\n".join(lines) + "\n")
    return ["--path", str(path)]


def _baseline_copy(d: Path) -> list[str]:
    # an A/A run against a copy of this tree, so the test needs no git worktree (which would
    # write under .git); copy2 keeps the mtimes, so the copy reuses the numba caches
    base = d / "baseline"
    for folder in ("helm_plan", "profiles"):
        shutil.copytree(REPO / folder, base / folder)
    return ["--baseline-dir", str(base)]


def _datasets(d: Path) -> list[str]:
    require_datasets()
    return []


CASES = {
    # both worker counts: the script itself checks their labels and summaries are identical
    "bench_analyze": Case(
        "bench_analyze",
        "--requests 2000 --shards-requests 3000 --dir {d}",
        (
            "| replays per analyze, ",
            "outputs identical: True",
            "MiB PSS",  # the process tree's memory, sampled beside the driver's peak
            "| curves pass, SHARDS 1%, bench_analyze_mixed_3000_64.parquet |",
        ),
    ),
    "bench_cache-abcd": Case(
        "bench_cache",
        "--n 20000 --universe 10000 --requests 2000 --repeat 1 --parts abcd --dir {d} "
        "--report-only",
        (
            "benchmarks: ours vs peer, same run",
            "(d) peak RSS, SHARDS 1% vs exact",
            "--report-only: ours and the peers agree",
        ),
    ),
    # (e) on its own: five `helm-plan profile` processes of ~3 s each
    "bench_cache-e": Case(
        "bench_cache",
        "--n 1000 --universe 1000 --stream-requests 1000 --repeat 1 --parts e --dir {d} "
        "--report-only",
        (
            "(e) profile wall s, --stream-out vs not",
            "(e) stream file:",
            "--report-only: ours and the peers agree",
        ),
    ),
    "bench_cluster": Case(
        "bench_cluster",
        "--dir {d} --base-size 1000 --sizes 2000 --headline-size 2000 "
        "--routing-duration-s 6 --routing-qps 600",
        (
            "| figure | value | peer (same run) | ratio | target |",
            "| throughput, 32 nodes x 2k, helm |",
            "| cost, 2,000 requests |",
            "| peak memory, 32 x 2k, helm |",
            "| helm vs best baseline (",
        ),
    ),
    "bench_controller": Case(
        "bench_controller",
        "--traces 1 --no-real --no-demo --contested 0 --duration-s 30 --load-scale 0.1 --trials 0 "
        "--fleet 2 --json {d}/controller.json",
        (
            "| figure | measured | peer (same run) | ratio | target |",
            "| controller vs best static, worst held-out trace (synth:mixed:gr-large",
            "| fleet of 2, controller per node vs best static per node",
            "| decision latency measured in these runs",
            "| controller (PPO) vs threshold rule, synth:mixed:gr-large",
        ),
    ),
    "bench_controller-contested": Case(
        "bench_controller",
        "--only none --no-demo --contested 1 --duration-s 2 --trials 0 --fleet 0 "
        "--fleet-contested 2 --json {d}/controller.json",
        (
            "| contested-s0 |",
            "| share of the oracle's gain captured, contested-s0 |",
            "| fleet of 2, controller per node vs best static per node (contested-s0, helm) |",
        ),
    ),
    "bench_controller-movielens": Case(
        "bench_controller",
        "--real-only --traces 1 --duration-s 30 --load-scale 0.1 --trials 0 --fleet 0 "
        "--json {d}/controller.json",
        ("| figure | measured | peer (same run) | ratio | target |", "log:movielens/azure"),
        _datasets,
    ),
    "bench_guard_risk": Case(
        "bench_guard_risk",
        "--seeds 100 --phases 2 --duration-s 2 --trials 0 --json {d}/risk.json",
        ("| contested-s100 | ", "| setting | worst gain over best static | mean gain |"),
    ),
    "bench_demo": Case(
        "bench_demo",
        "--cache kept --duration 10",
        ("demo, compiling on first use:", "ratio (peer / ahead):", "summaries identical: True"),
    ),
    "bench_exec": Case(
        "bench_exec",
        "--trials 1 --repeats 1 --duration-s 2",
        (
            "labels byte-identical across local 1, local 2, ray 2: yes",
            "| figure | ours | peer (same run) | ratio |",
        ),
    ),
    "bench_ghost": Case(
        "bench_ghost",
        "--requests 720 --nodes 2 --window-s 0.5",
        (
            "hits identical in every window",
            "| ghost EMB curves, stack kept from window to window |",
        ),
    ),
    "bench_ghost_sample": Case(
        "bench_ghost_sample",
        "--requests 2000 --keys 16384,8192",
        ("| 16,384 (default) |", "| exact ghost s (peer) | ratio |"),
    ),
    "bench_ingest": Case(
        "bench_ingest",
        "--repeat 1",
        ("ingest amazon: seq.txt, 2,", "vs ours/read", "duckdb read_csv"),
        _ingest_file,
    ),
    "bench_inspect": Case(
        "bench_inspect",
        "--requests 3000 --trace {d}/inspect.parquet",
        ('"figures_agree": true',),
    ),
    "bench_kernel_ab": Case(
        "bench_kernel_ab",
        "--requests 2000 --repeat 1 --rounds 1",
        (
            "| figure | value | peer (same run) | ratio |",
            "| changing, 2,000 requests, replay kernel",
            "results identical |",
        ),
        _baseline_copy,
    ),
    "bench_load": Case(
        "bench_load",
        "--requests 3000 --dir {d}",
        (
            "| figure | value | peer (same run) | ratio |",
            "| load_context, 3,000 requests",
            "pyarrow read_table only",
        ),
    ),
    "bench_plan": Case(
        "bench_plan",
        "--requests 1000 --peak-qps 300 --load-max-requests 2000 --policies best-static "
        "--routers jsq,helm",
        (
            "| figure | value | peer | ratio |",
            "| fleet sizes evaluated by the search |",
            "Cheapest:",
        ),
    ),
    "bench_regimes": Case(
        "bench_regimes",
        "--workers 1 --duration-s 12 --trials 2 --qps-scale 0.1 --json {d}/regimes.json",
        ("gr-small: mean r* by regime", "gr-large: mean r* by regime"),
    ),
    "bench_scale": Case(
        "bench_scale",
        "--requests 2000 --factors 1,2.5,0.5 --dir {d}",
        ("| figure | ours | peer (same run) | ratio |", "same arrays at every factor: True"),
    ),
    "bench_spill": Case(
        "bench_spill",
        "--requests 2000 --pool-fraction 0.3 --dir {d}",
        ("| figure | ours (tokens on disk) |", "same sojourns: True; spill files left behind: 0"),
    ),
    "bench_spill_windows": Case(
        "bench_spill",
        "--requests 2000 --windows 3 --pool-fraction 0.3 --dir {d}",
        ("| load, workload tables, the first 3 windows (", "same sojourns: True"),
    ),
    "bench_oracle_search": Case(
        "bench_oracle_search",
        "--trials 2 --duration-s 20",
        ("| all traces | evaluations per window |", "r* in the 0.01 grid's flat band"),
    ),
    "bench_ray_nodes": Case(
        "bench_ray_nodes",
        "--requests 400 --repeats 1",
        (
            "answers identical (local 1 worker, ray 1 node, ray 2 nodes): yes; cluster "
            "processes left: 0",
            "| 64 |",
        ),
    ),
    "bench_sim": Case(
        "bench_sim",
        "--requests-peer 300 --trials 1 --workers 1 --duration-s 5",
        ("same per-request misses", "whole trace, ratio changing every 2 windows", "oracle: "),
    ),
    "bench_traffic_model": Case(
        "bench_traffic_model",
        "--users 100 --k 2 --qps 60 --max-nodes 6",
        (
            "| traffic model | planned peak req/s | N (ours) |",
            "| users | ",
            "| users-shifted | ",
            "| time | ",
        ),
        data=True,
    ),
    "bench_synth": Case(
        "bench_synth",
        "--requests 2000 --big-requests 2000 --catalog-items 100000 --catalog-requests 1000 "
        "--out {d}/synth.parquet --big-out {d}/synth_big.parquet",
        (
            '"speedup_vs_naive_loop"',
            '"rss_ratio_peer_over_ours"',
            '"rss_ratio_polars_read_over_ours"',
        ),
    ),
}


@pytest.fixture
def scratch() -> Iterator[Path]:
    """The scripts' only writable folder, also their TMPDIR. Short, not pytest's tmp_path:
    Ray puts its sockets under TMPDIR, and a Unix socket path has at most 107 bytes."""
    d = Path(tempfile.mkdtemp(prefix="hpb-"))
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_every_script_has_a_case() -> None:
    scripts = {p.stem for p in BENCH.glob("bench_*.py")}
    assert scripts == {c.script for c in CASES.values()}


# the script's own 500 s limit below is the one that binds (one line naming the script), not
# the suite's 300 s: bench_ray_nodes starts three Ray nodes, and on a loaded 2-core machine
# (2026-12-07) that alone passed 300 s
@pytest.mark.timeout(600)
@pytest.mark.parametrize("name", list(CASES))
def test_benchmark_runs(name: str, scratch: Path) -> None:
    case = CASES[name]
    args = case.argv(scratch)
    path = os.pathsep.join(
        p for p in (str(REPO), str(BENCH), os.environ.get("PYTHONPATH", "")) if p
    )  # this tree's helm_plan, and the scripts' imports of one another
    env = {**os.environ, "PYTHONPATH": path, "TMPDIR": str(scratch), "COLUMNS": "200"}
    if case.data:
        from conftest import require_datasets

        env["HELM_PLAN_DATASETS"] = str(require_datasets())
    cmd = [sys.executable, str(BENCH / f"{case.script}.py"), *args]
    out = subprocess.run(
        cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=500, check=False
    )
    shown = f"$ {' '.join(cmd)}\n--- stderr\n{out.stderr[-6000:]}\n--- stdout\n{out.stdout[-3000:]}"
    assert out.returncode == 0, shown
    for want in case.expect:
        assert want in out.stdout, f"{want!r} not printed\n{shown}"


def test_kernel_ab_baseline_reads_its_own_profiles(scratch: Path) -> None:
    # a baseline tree imported beside an install of this one read this tree's GPU profiles
    # (an editable install maps helm_plan._profiles to its checkout): a profile key the
    # baseline did not know yet failed every A/B against an older revision
    base = scratch / "baseline"
    shutil.copytree(REPO / "helm_plan", base / "helm_plan")
    shutil.copytree(REPO / "profiles", base / "profiles")
    code = (
        "import sys; from pathlib import Path; sys.path.insert(0, sys.argv[1]);"
        "from bench_kernel_ab import own_data; own_data(Path(sys.argv[2]));"
        "from helm_plan._data import data_dir; import helm_plan.profiles as p;"
        "print(data_dir('helm_plan._profiles', 'profiles')); print(p.__file__)"
    )
    env = {**os.environ, "PYTHONPATH": str(base)}
    out = subprocess.run([sys.executable, "-c", code, str(BENCH), str(base)], cwd=base, env=env,
                         capture_output=True, text=True, timeout=120, check=True)  # fmt: skip
    profiles, package = out.stdout.split()
    assert Path(profiles).resolve() == (base / "profiles").resolve()
    assert Path(package).resolve().is_relative_to(base.resolve())
