"""`helm-plan calibrate`: measure the latency terms on this machine and write a latency profile."""

from __future__ import annotations

import json
import math
from typing import Annotated

import typer
from helm_plan_cli.options import JsonOpt, ModelOpt, OutOpt, QuietOpt, SeedOpt
from helm_plan_cli.progress import out_console, task
from rich.table import Table

from helm_plan.io import write_toml

DeviceOpt = Annotated[
    str, typer.Option("--device", help="Torch device to measure: cpu or cuda[:N].")
]
GpuLabelOpt = Annotated[
    str | None,
    typer.Option("--gpu", help="GPU name written into the profile (default: the device name)."),
]
QuickOpt = Annotated[
    bool, typer.Option("--quick", help="Small grid and few repeats: seconds, rougher fit.")
]
LayersOpt = Annotated[
    int | None, typer.Option("--layers", help="Benchmark this many layers instead of the model's.")
]
DModelOpt = Annotated[
    int | None, typer.Option("--d-model", help="Benchmark this hidden size instead of the model's.")
]
ThreadsOpt = Annotated[int, typer.Option("--threads", help="torch CPU threads (0 = all cores).")]
RepeatsOpt = Annotated[
    int | None, typer.Option("--repeats", help="Timed runs per grid point (median kept).")
]

_UNITS = {
    "t0_s": ("t0 (fixed)", 1e6, "us"),
    "prefill_a_s": ("a (prefill / token)", 1e6, "us"),
    "prefill_b_s": ("b (prefill / token / ctx)", 1e9, "ns"),
    "score_c_s": ("c (score / cand)", 1e6, "us"),
    "score_d_s": ("d (score / cand / ctx)", 1e9, "ns"),
    "host_gather_s": ("host gather / row", 1e9, "ns"),
    "hbm_bw_Bps": ("device gather bw", 1e-9, "GB/s"),
    "h2d_bw_Bps": ("H2D bw", 1e-9, "GB/s"),
    "h2d_latency_s": ("H2D latency", 1e6, "us"),
}


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.1f}%"


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""

    @app.command("calibrate")
    def calibrate(
        out: OutOpt,
        device: DeviceOpt = "cpu",
        model: ModelOpt = "gr-small",
        gpu: GpuLabelOpt = None,
        quick: QuickOpt = False,
        layers: LayersOpt = None,
        d_model: DModelOpt = None,
        threads: ThreadsOpt = 0,
        repeats: RepeatsOpt = None,
        seed: SeedOpt = 0,
        json_out: JsonOpt = False,
        quiet: QuietOpt = False,
    ) -> None:
        """Measure prefill, scoring, gathers and H2D copies with torch; fit and write latency.toml."""
        from helm_plan.latency.calibrate import CalibrateConfig, resolve_device
        from helm_plan.latency.calibrate import calibrate as run_calibration
        from helm_plan.profiles import profile_to_dict

        kw = {
            "device": device,
            "model": model,
            "gpu": gpu,
            "layers": layers,
            "d_model": d_model,
            "threads": threads,
            "seed": seed,
        }
        if repeats is not None:
            kw["repeats"] = repeats
        cfg = CalibrateConfig.quick(**kw) if quick else CalibrateConfig(**kw)
        resolve_device(cfg.device)  # fail before the progress bar when CUDA is absent
        with task(f"calibrate {device}", quiet=quiet or json_out) as update:
            res = run_calibration(cfg, progress=update)
        write_toml(out, profile_to_dict(res.profile, res.derivation()))

        p = res.profile
        if json_out:
            coeffs = {k: getattr(p, k) for k in _UNITS}
            typer.echo(
                json.dumps(
                    {
                        "profile": p.name,
                        "source": p.source,
                        "coefficients": coeffs,
                        "heldout_mape": res.mape_heldout,
                        "out": str(out),
                    },
                    indent=2,
                )
            )
            return
        t = Table(title=f"latency profile {p.name}  ({res.device_name}, {res.elapsed_s:.1f} s)")
        t.add_column("coefficient")
        t.add_column("value", justify="right")
        t.add_column("unit")
        for k, (label, scale, unit) in _UNITS.items():
            t.add_row(label, f"{getattr(p, k) * scale:.4g}", unit)
        out_console.print(t)
        m = Table(title="held-out MAPE per term")
        m.add_column("term")
        m.add_column("MAPE", justify="right")
        m.add_column("train / held-out points", justify="right")
        for term, fit in res.terms.items():
            m.add_row(term, _pct(fit.mape_heldout), f"{fit.n_train} / {fit.n_heldout}")
        out_console.print(m)
        typer.echo(f"wrote {out}")
