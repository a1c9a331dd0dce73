#!/usr/bin/env bash
# Regenerate the small samples in datasets/samples/ with the project's own generator.
# Deterministic: the same helm-plan version and seeds give byte-identical files.
set -euo pipefail
cd "$(dirname "$0")/samples"
# New users only and bursts without new items: the rows stay those the golden digests pin
# (tests/golden); long histories and new burst items are the CLI defaults since issue 14.
common=(--qps 20 --duration-s 120 --users 150 --items 5000 --candidates 64 --max-seq-len 256
        --returning-share 0 --burst-new-item-share 0 --seed 0 -q)
helm-plan synth -o mixed-small.parquet --regime mixed "${common[@]}"
