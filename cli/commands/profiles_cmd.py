"""`helm-plan profiles`: shipped GPU and model profiles and their derived sizes."""

from __future__ import annotations

import dataclasses

import typer
from helm_plan_cli.options import JsonOpt, QuietOpt
from helm_plan_cli.output import emit_json, emit_table
from rich.table import Table

from helm_plan.pool import pair_sizes
from helm_plan.profiles import available, load_gpu, load_model


def _gib(b: int) -> str:
    return f"{b / (1 << 30):,.2f}"


def profiles_command(as_json: JsonOpt = False, quiet: QuietOpt = False) -> None:
    """List GPU and model profiles, and the cache pool, row and KV sizes of each pair.

    ``--quiet`` is accepted like on every other command; this one shows no progress.
    """
    gpus = [load_gpu(n) for n in available("gpu")]
    models = [load_model(n) for n in available("model")]
    pairs = pair_sizes()
    if as_json:
        obj = {
            "gpus": [dataclasses.asdict(g) for g in gpus],
            "models": [
                {
                    **dataclasses.asdict(m),
                    "emb_bytes_per_token": m.token_lookup_bytes,
                    "tables": [dataclasses.asdict(t) for t in m.tables],
                    "kv_bytes_per_token": m.kv_bytes_per_token,
                }
                for m in models
            ],
            "pairs": [dataclasses.asdict(p) for p in pairs],
        }
        emit_json("profiles", obj)
        return
    t = Table(title="GPU profiles")
    for c in ("gpu", "HBM GiB", "HBM TB/s", "H2D GB/s", "H2D lat us", "TFLOP/s", "$/h"):
        t.add_column(c, justify="left" if c == "gpu" else "right")
    for g in gpus:
        t.add_row(
            g.name, _gib(g.hbm_bytes), f"{g.hbm_bw_Bps / 1e12:.2f}", f"{g.h2d_bw_Bps / 1e9:.1f}",
            f"{g.h2d_latency_s * 1e6:.1f}", f"{g.peak_flops / 1e12:.0f}", f"{g.cost_per_hour:.2f}",
        )  # fmt: skip
    emit_table(t)
    t = Table(title="Model profiles")
    for c in (
        "model",
        "layers",
        "d_model",
        "max_seq_len",
        "cands",
        "tables",
        "EMB B/token",
        "kv B/token",
        "SLO ms",
    ):
        t.add_column(c, justify="left" if c == "model" else "right")
    for m in models:
        t.add_row(
            m.name, str(m.layers), str(m.d_model), f"{m.max_seq_len:,}", f"{m.n_candidates:,}",
            str(len(m.tables)), f"{m.token_lookup_bytes:,}", f"{m.kv_bytes_per_token:,}",
            f"{m.default_slo_ms:g}",
        )  # fmt: skip
    emit_table(t, "SLO ms: the model's default_slo_ms, every command's --slo-ms unless given "
                  "(its source: `helm-plan profiles --json`, slo_source)")  # fmt: skip
    t = Table(title="Cache pool per pair (hbm - weights - reserve)")
    for c in ("gpu", "model", "pool GiB", "pool rows", "pool KV tokens", "user KV MiB @max"):
        t.add_column(c, justify="left" if c in ("gpu", "model") else "right")
    for p in pairs:
        t.add_row(
            p.gpu, p.model, _gib(p.pool_bytes), f"{p.pool_emb_tokens:,}", f"{p.pool_kv_tokens:,}",
            f"{p.max_user_kv_bytes / (1 << 20):,.1f}",
        )  # fmt: skip
    emit_table(t)


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("profiles")(profiles_command)
