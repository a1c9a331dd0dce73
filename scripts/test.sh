#!/usr/bin/env bash
# Sets up everything from nothing and runs lint, format check and the test suite.
# Usage: ./scripts/test.sh [pytest args...]
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv-test}"

# Browser tests drive Debian's chromium through playwright (no browser download).
if ! command -v chromium >/dev/null 2>&1; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends chromium >/dev/null
fi

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install -q --upgrade pip
# Non-editable on purpose: the tests exercise the installed wheel, profiles included.
rm -rf build  # setuptools' build/lib keeps modules a refactor removed
"$VENV/bin/python" -m pip install -q --force-reinstall --no-deps . >/dev/null
"$VENV/bin/python" -m pip install -q '.[test]'

"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/lint-imports"  # layer and no-cycle contracts in pyproject.toml
"$VENV/bin/pytest" -q "$@"
