#!/usr/bin/env bash
# Retrain the shipped controller (helm_plan/controller/default/); see scripts/train_controller.py.
set -euo pipefail
cd "$(dirname "$0")/.."
exec "${PYTHON:-python}" scripts/train_controller.py "$@"
