"""`helm-plan fit`: fit the latency model to a trace's observed latency_ms and validate it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from helm_plan_cli.files import guard
from helm_plan_cli.options import (
    GpuOpt,
    JsonOpt,
    LatencyOpt,
    ModelOpt,
    PoolBytesOpt,
    PoolFractionOpt,
    QuietOpt,
    SeedOpt,
    TraceArg,
)
from helm_plan_cli.output import emit_json, emit_line, emit_table
from helm_plan_cli.progress import task
from rich.table import Table

from helm_plan.io import write_toml
from helm_plan.latency.observed import FITTED
from helm_plan.sim.fit import FitConfig, fit_trace

FIT = FitConfig()
"""The fit's defaults, read once here."""

RatioOpt = Annotated[
    float, typer.Option("--ratio", help="EMB share r of the cache pool for the cache replay.")
]
HoldoutOpt = Annotated[
    float, typer.Option("--holdout", help="Share of requests held out to validate the fit.")
]
FitOutOpt = Annotated[
    Path | None,
    typer.Option("--out", "-o", help="Write the fitted latency profile here.", show_default=False),
]


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""

    @app.command("fit")
    def fit(
        trace: TraceArg,
        gpu: GpuOpt = FIT.gpu,
        model: ModelOpt = FIT.model,
        latency: LatencyOpt = FIT.latency,
        ratio: RatioOpt = FIT.ratio,
        pool_bytes: PoolBytesOpt = None,
        pool_fraction: PoolFractionOpt = None,
        holdout: HoldoutOpt = FIT.holdout_fraction,
        seed: SeedOpt = FIT.seed,
        out: FitOutOpt = None,
        json_out: JsonOpt = False,
        quiet: QuietOpt = False,
    ) -> None:
        """Fit launch, dense, attention, host gather and H2D latency to the trace's latency_ms; report MAPE."""
        guard(inputs=[trace, gpu, model, latency], outputs={"-o": out})
        cfg = FitConfig(
            gpu=gpu,
            model=model,
            latency=latency,
            ratio=ratio,
            pool_bytes=pool_bytes,
            pool_fraction=pool_fraction,
            holdout_fraction=holdout,
            seed=seed,
        )
        with task("fit latency model", quiet=quiet or json_out) as update:
            update(0, 1)
            res = fit_trace(trace, cfg)
            update(1, 1)
        if out is not None:
            write_toml(out, res.toml_dict())
        f = res.fit
        base = {k: getattr(res.base, k) for k in FITTED}
        if json_out:
            emit_json(
                "fit",
                {
                    "trace": str(trace),
                    "base_profile": res.base_name,
                    "base": base,
                    "fitted": f.coefficients,
                    "held_at_base": list(f.held_at_base),
                    "mape_heldout": f.mape_heldout,
                    "mape_base_heldout": f.mape_base_heldout,
                    "mape_train": f.mape_train,
                    "n_train": f.n_train,
                    "n_heldout": f.n_heldout,
                    "out": str(out) if out else None,
                },
            )
            return
        t = Table(title=f"latency fit to {trace.name}  (base {res.base_name})")
        t.add_column("coefficient")
        t.add_column("base", justify="right")
        t.add_column("fitted", justify="right")
        for k in FITTED:
            held = "  (held)" if k in f.held_at_base else ""
            t.add_row(k, f"{base[k]:.4g}", f"{f.coefficients[k]:.4g}{held}")
        emit_table(t)
        emit_line(
            f"held-out MAPE {100 * f.mape_heldout:.1f}% (base profile {100 * f.mape_base_heldout:.1f}%) "
            f"on {f.n_heldout} requests; train MAPE {100 * f.mape_train:.1f}% on {f.n_train}"
        )
        if out is not None:
            emit_line(f"wrote {out}")
