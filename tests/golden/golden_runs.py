"""Golden runs: canonical digests of simulate --json, oracle labels and analyze --demo.

The refactors that must not change a figure (architecture, scale) are pinned by
these digests. A deliberate model change regenerates them with
``python tests/golden/golden_runs.py --write`` and says why in its commit.
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
from typer.testing import CliRunner

HERE = Path(__file__).resolve().parent
SAMPLE = HERE.parents[1] / "datasets" / "samples" / "mixed-small.parquet"
GOLDEN = HERE / "golden.json"
COMMON = ["--pool-fraction", "0.1", "--slo-ms", "1", "--window-s", "10"]
VOLATILE = {"timings_s", "versions", "stages_cached", "trace"}


def _canon(v: Any) -> Any:
    if isinstance(v, float):
        return None if not math.isfinite(v) else float(repr(v)) if v == v else None
    if isinstance(v, dict):
        return {k: _canon(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_canon(x) for x in v]
    return v


def digest(obj: Any) -> str:
    blob = json.dumps(_canon(obj), sort_keys=True, allow_nan=False).encode()
    return hashlib.sha256(blob).hexdigest()


def _invoke(args: list[str]) -> str:
    from helm_plan_cli.main import app

    res = CliRunner().invoke(app, args, catch_exceptions=False)
    if res.exit_code != 0:
        raise RuntimeError(f"{args}: exit {res.exit_code}: {res.output}")
    return res.stdout


def _labels(path: Path) -> dict[str, Any]:
    t = pq.read_table(path)
    md = t.schema.metadata or {}
    return {
        "rows": t.to_pylist(),
        "window_s": md[b"helm_plan.window_s"].decode(),
        "grid": md[b"helm_plan.coarse_grid"].decode(),
    }


def runs(tmp: Path) -> dict[str, Any]:
    """Every golden output, canonical (JSON-able), by name."""
    out: dict[str, Any] = {}
    s = str(SAMPLE)
    for mode in ("window", "carry"):
        lp = tmp / f"labels-{mode}.parquet"
        _invoke(["oracle", s, "-o", str(lp), *COMMON, "--trials", "5", "--warmup", mode,
                 "--workers", "1", "--quiet"])  # fmt: skip
        out[f"oracle-{mode}"] = _labels(lp)
    lp = tmp / "labels-carry.parquet"
    sims = {
        "static": ["--policy", "static:0.3"],
        "emb-max": ["--policy", "emb-max"],
        "kv-max": ["--policy", "kv-max"],
        "best-static": ["--policy", "best-static"],
        "sched-eager": ["--policy", f"schedule:{lp}", "--realloc", "eager"],
        "sched-throttled": ["--policy", f"schedule:{lp}", "--realloc", "throttled"],
        "sched-lazy": ["--policy", f"schedule:{lp}", "--realloc", "lazy"],
        "sched-slots2": ["--policy", f"schedule:{lp}", "--slots", "2", "--throttle-share", "0.5"],
    }
    for name, extra in sims.items():
        doc = json.loads(_invoke(["simulate", s, *COMMON, *extra, "--json", "--quiet"]))
        doc.pop("trace", None)
        doc["policy"] = doc["policy"].split(":")[0]
        out[f"simulate-{name}"] = doc
    demo = tmp / "demo"
    _invoke(["analyze", "--demo", "-o", str(demo), "--quiet"])
    summ = json.loads((demo / "summary.json").read_text())
    out["analyze-demo"] = {k: v for k, v in summ.items() if k not in VOLATILE}
    if out["analyze-demo"].get("controller"):  # measured in the run by the runtime's timer
        out["analyze-demo"]["controller"].pop("decision_latency_us", None)
    return out


def digests(tmp: Path) -> dict[str, str]:
    return {k: digest(v) for k, v in runs(tmp).items()}


if __name__ == "__main__":
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        got = digests(Path(d))
    if "--write" in sys.argv:
        GOLDEN.write_text(json.dumps(got, indent=2, sort_keys=True) + "\n")
    print(json.dumps(got, indent=2, sort_keys=True))
