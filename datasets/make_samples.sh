#!/usr/bin/env bash
# Regenerate the small samples in datasets/samples/ with the project's own generator.
# Deterministic: the same helm-plan version and seeds give byte-identical files.
set -euo pipefail
cd "$(dirname "$0")/samples"
common=(--qps 20 --duration-s 120 --users 150 --items 5000 --candidates 64 --max-seq-len 256 --seed 0 -q)
helm-plan synth -o mixed-small.parquet --regime mixed "${common[@]}"
