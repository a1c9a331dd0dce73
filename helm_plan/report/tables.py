"""Names of the run-store tables: written by the analyze stages, read by the report sections.

One constant per table; docs/summary-schema.md and the stage that writes a
table describe its columns. :data:`ALL` lists every name a store may hold.
"""

from __future__ import annotations

# inspect (helm_plan.analyze.stages.stage_inspect)
STATS = "stats"
WORKLOAD_ARRIVALS = "workload_arrivals"
WORKLOAD_HISTORY = "workload_history"
WORKLOAD_POPULARITY = "workload_popularity"
# curves
CURVES = "curves"
CURVE_KNEES = "curve_knees"
# capacity (helm_plan.analyze.capacity.capacity_tables)
CAPACITY = "capacity"
CAPACITY_SAVINGS = "capacity_savings"
CAPACITY_GPUS = "capacity_gpus"
CAPACITY_EVALUATED = "capacity_evaluated"
LOAD_CURVE = "load_curve"
MAX_QPS = "max_qps"
CAPACITY_FRONTIER = "capacity_frontier"
CAPACITY_HEADROOM = "capacity_headroom"
ROUTING = "routing"
ROUTING_WINDOWS = "routing_windows"
# oracle (helm_plan.analyze.stages.labels_tables)
LABELS = "labels"
LABELS_GRID = "labels_grid"
# policies (helm_plan.analyze.policies_stage.stage_policies)
POLICY_WINDOWS = "policy_windows"
POLICIES = "policies"
LATENCY_TERMS = "latency_terms"
SENSITIVITY = "sensitivity"
ADAPTIVITY = "adaptivity"
STATIC_SWEEP = "static_sweep"
REGIMES = "regimes"
# the run itself (helm_plan.analyze.run)
LATENCY_COEF = "latency_coef"
CONFIG = "config"
VERSIONS = "versions"
TIMINGS = "timings"

ALL = (
    STATS, WORKLOAD_ARRIVALS, WORKLOAD_HISTORY, WORKLOAD_POPULARITY, CURVES, CURVE_KNEES,
    CAPACITY, CAPACITY_SAVINGS, CAPACITY_GPUS, CAPACITY_EVALUATED, LOAD_CURVE, MAX_QPS, CAPACITY_FRONTIER,
    CAPACITY_HEADROOM, ROUTING,
    ROUTING_WINDOWS, LABELS, LABELS_GRID, POLICY_WINDOWS, POLICIES, LATENCY_TERMS, SENSITIVITY,
    ADAPTIVITY, STATIC_SWEEP, REGIMES, LATENCY_COEF, CONFIG, VERSIONS, TIMINGS,
)  # fmt: skip
"""Every table name, in pipeline order."""
