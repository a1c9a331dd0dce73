#!/usr/bin/env bash
# Retrain the shipped controller (helm_plan/controller/default/); see scripts/train_controller.py.
# Deterministic (seed 0); runs at nice 10 (labelling the suite is the long part).
set -euo pipefail
cd "$(dirname "$0")/.."
exec nice -n 10 "${PYTHON:-python}" scripts/train_controller.py "$@"
