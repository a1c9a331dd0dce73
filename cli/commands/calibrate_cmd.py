"""`helm-plan calibrate`: measure the latency terms on this machine and write a latency profile."""

from __future__ import annotations

import math
from typing import Annotated

import typer
from helm_plan_cli.files import guard
from helm_plan_cli.options import JsonOpt, ModelOpt, OutOpt, QuietOpt, SeedOpt
from helm_plan_cli.output import emit_json, emit_line, emit_table
from helm_plan_cli.progress import task
from rich.table import Table

from helm_plan.io import write_toml
from helm_plan.latency.calibrate import CalibrateConfig

CALIBRATE = CalibrateConfig()
"""The calibration's defaults, read once here."""

DeviceOpt = Annotated[
    str, typer.Option("--device", help="Torch device to measure: cpu or cuda[:N].")
]
GpuLabelOpt = Annotated[
    str | None,
    typer.Option("--gpu", help="GPU name written into the profile (default: the device name)."),
]
QuickOpt = Annotated[
    bool, typer.Option("--quick", help="Small grid and few repeats: under a minute, rougher fit.")
]
LayersOpt = Annotated[
    int | None, typer.Option("--layers", help="Benchmark this many layers instead of the model's.")
]
DModelOpt = Annotated[
    int | None, typer.Option("--d-model", help="Benchmark this hidden size instead of the model's.")
]
ThreadsOpt = Annotated[
    int,
    typer.Option(
        "--threads", help="torch CPU threads, also the host-gather threads (0 = all cores)."
    ),
]
RepeatsOpt = Annotated[
    int | None, typer.Option("--repeats", help="Timed runs per grid point (fastest kept).")
]

_UNITS = {
    "t_launch_s": ("launch (per batch)", 1e6, "us"),
    "t_request_s": ("per request", 1e6, "us"),
    "weight_read_s": ("weight read (per batch)", 1e6, "us"),
    "dense_s_per_token": ("dense / token", 1e9, "ns"),
    "mfu_half_tokens": ("efficiency half-point", 1.0, "tokens"),
    "attn_s_per_pair": ("attention / pair", 1e12, "ps"),
    "hbm_bw_Bps": ("device gather bw", 1e-9, "GB/s"),
    "h2d_bw_Bps": ("H2D bw", 1e-9, "GB/s"),
    "h2d_latency_s": ("H2D latency", 1e6, "us"),
    "host_gather_Bps": ("host gather bw", 1e-9, "GB/s"),
}


def _pct(x: float) -> str:
    return "n/a" if math.isnan(x) else f"{100 * x:.1f}%"


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""

    @app.command("calibrate")
    def calibrate(
        out: OutOpt,
        device: DeviceOpt = CALIBRATE.device,
        model: ModelOpt = CALIBRATE.model,
        gpu: GpuLabelOpt = None,
        quick: QuickOpt = False,
        layers: LayersOpt = None,
        d_model: DModelOpt = None,
        threads: ThreadsOpt = CALIBRATE.threads,
        repeats: RepeatsOpt = None,
        seed: SeedOpt = CALIBRATE.seed,
        json_out: JsonOpt = False,
        quiet: QuietOpt = False,
    ) -> None:
        """Measure launch, per-request, weight-read, dense, attention, gather and H2D terms; write latency.toml."""
        guard(inputs=[model], outputs={"-o": out})
        from helm_plan.latency.calibrate import calibrate as run_calibration
        from helm_plan.latency.calibrate import resolve_device
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
            emit_json(
                "calibrate",
                {
                    "profile": p.name,
                    "source": p.source,
                    "coefficients": coeffs,
                    "heldout_mape": res.mape_heldout,
                    "out": str(out),
                },
            )
            return
        t = Table(title=f"latency profile {p.name}  ({res.device_name}, {res.elapsed_s:.1f} s)")
        t.add_column("coefficient")
        t.add_column("value", justify="right")
        t.add_column("unit")
        for k, (label, scale, unit) in _UNITS.items():
            t.add_row(label, f"{getattr(p, k) * scale:.4g}", unit)
        emit_table(t)
        m = Table(title="held-out MAPE per term")
        m.add_column("term")
        m.add_column("MAPE", justify="right")
        m.add_column("train / held-out points", justify="right")
        for term, fit in res.terms.items():
            m.add_row(term, _pct(fit.mape_heldout), f"{fit.n_train} / {fit.n_heldout}")
        emit_table(m)
        emit_line(f"wrote {out}")
