"""One module per command; each exposes ``register(app)``."""

from __future__ import annotations

from helm_plan_cli.commands import (
    analyze_cmd,
    atlas_cmd,
    calibrate_cmd,
    cluster_cmd,
    datasets_cmd,
    fit_cmd,
    ingest_cmd,
    inspect_cmd,
    oracle_cmd,
    plan_cmd,
    profile_cmd,
    profiles_cmd,
    report_cmd,
    simulate_cmd,
    synth_cmd,
    train_cmd,
    validate_cmd,
)

COMMAND_MODULES = [
    ingest_cmd,
    synth_cmd,
    inspect_cmd,
    profiles_cmd,
    profile_cmd,
    calibrate_cmd,
    fit_cmd,
    simulate_cmd,
    cluster_cmd,
    plan_cmd,
    oracle_cmd,
    train_cmd,
    validate_cmd,
    analyze_cmd,
    atlas_cmd,
    report_cmd,
    datasets_cmd,
]
