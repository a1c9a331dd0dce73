"""`helm-plan atlas`: the sensitivity atlas, where the EMB/KV split matters (helm_plan.atlas)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated

import typer
from helm_plan_cli.files import guard
from helm_plan_cli.options import (
    ExecutorOptionalOpt,
    JsonOpt,
    QuietOpt,
    RayAddressOpt,
    SeedOptionalOpt,
    WorkersOptionalOpt,
)
from helm_plan_cli.output import emit_json, emit_table
from helm_plan_cli.progress import task
from rich.table import Table

from helm_plan import atlas
from helm_plan.config import load_plan
from helm_plan.errors import ConfigError
from helm_plan.exec import get_executor

"""Files `atlas` writes into its folder (each atomically)."""

AtlasDirOpt = Annotated[
    Path,
    typer.Option("--out", "-o", help="Atlas folder: the page, the cells and their cache."),
]
AtlasFileOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="TOML atlas file: [atlas] (requests, windows, trials, panels, ...), [base] (the "
        "base cell's axes), [levels] (axis = [levels]); flags override it.",
        show_default=False,
    ),
]
QuickOpt = Annotated[
    bool,
    typer.Option("--quick", help="2 x 2 levels per panel on smaller cell traces (minutes)."),
]
ExportOpt = Annotated[
    str | None,
    typer.Option(
        "--export",
        help="Write cell KEY's trace, model, GPU and analyze plan into OUT/cells/KEY and print "
        "the `helm-plan analyze` command that re-measures it (KEY: the cells table's key).",
        show_default=False,
    ),
]


def atlas_command(
    out: AtlasDirOpt = Path("reports/out/atlas"),
    quick: QuickOpt = False,
    config: AtlasFileOpt = None,
    workers: WorkersOptionalOpt = None,
    executor: ExecutorOptionalOpt = None,
    ray_address: RayAddressOpt = None,
    seed: SeedOptionalOpt = None,
    export: ExportOpt = None,
    as_json: JsonOpt = False,
    quiet: QuietOpt = False,
) -> None:
    """Measure the grid of cells where the split may matter and write its heatmap page."""
    # before any work, the config file read included: the run's files, or the exported cell's
    folder, files = (out, atlas.OUTPUTS) if export is None else (out / "cells" / export,
                                                                 atlas.EXPORT_FILES)  # fmt: skip
    guard(inputs=[config], run_dir=folder, run_files=files.values())
    cfg = atlas.build_config(load_plan(config) if config else None, quick=quick, seed=seed)
    if export is not None:
        _export(cfg, out, export, as_json)
        return
    with (
        get_executor(executor or "local", 1 if workers is None else workers, ray_address) as ex,
        task("atlas cells", quiet=quiet or as_json) as tick,
    ):
        res = atlas.run_atlas(cfg, out, executor=ex, progress=tick)
    paths = atlas.write_outputs(res, out, atlas.render(res))
    df = res.cells
    if as_json:
        emit_json("atlas", {
            "out": str(out), "files": {k: str(v) for k, v in paths.items()}, "cells": df.height,
            "cached": res.cached, "measured": res.measured, "seconds": res.seconds,
            "rows": df.drop("panels").to_dicts(),
        })  # fmt: skip
        return
    t = Table(title=f"helm-plan atlas: {df.height} cells ({res.cached} cached) in "
                    f"{res.seconds:.0f} s, largest oracle gains")  # fmt: skip
    for c in ("key", "cell", "oracle gain [CI]", "r* range", "SLO static / oracle"):
        t.add_column(c, justify="left" if c in ("key", "cell") else "right")
    base = dataclasses.asdict(cfg.base)
    for r in df.sort("oracle_gain", descending=True).head(10).to_dicts():
        diff = ", ".join(f"{k}={r[k]}" for k in base if r[k] != base[k]) or "base"
        t.add_row(
            r["key"], diff,
            f"{r['oracle_gain']:.1%} [{r['oracle_gain_lo']:.1%}, {r['oracle_gain_hi']:.1%}]",
            f"{r['r_star_min']:.2f}–{r['r_star_max']:.2f}",
            f"{r['static_attainment']:.1%} / {r['oracle_attainment']:.1%}",
        )  # fmt: skip
    emit_table(t, f"wrote {paths['html']}, {paths['csv']} and {paths['parquet']}")


def _export(cfg: atlas.AtlasConfig, out: Path, key: str, as_json: bool) -> None:
    cells = {atlas.cell_key(c, cfg): c for c, _ in atlas.grid(cfg)}
    if key not in cells:
        raise ConfigError(f"no cell {key!r} in this atlas grid",
                          hint="pass a key from the cells table (cells.csv) of the same grid")  # fmt: skip
    paths = atlas.export(cells[key], cfg, out / "cells" / key)
    if as_json:
        emit_json("atlas", {"export": key, **paths})
        return
    emit_table(f"wrote {paths['trace']}, {paths['model']}, {paths['gpu']}, {paths['plan']}",
               f"re-measure with: {paths['command']}")  # fmt: skip


def register(app: typer.Typer) -> None:
    """Add this command to ``app``."""
    app.command("atlas")(atlas_command)
