#!/usr/bin/env bash
# Sets up everything from nothing and runs lint, format check, the test suite and the kernel
# tests again with numba's bounds checks.
# Usage: ./scripts/test.sh [pytest args...]      everything (CI)
#        ./scripts/test.sh --boundscheck [args]  only the bounds-checked kernel tests
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

# The brute-force tests of the compiled kernels (cache, node, batching, cluster) with
# NUMBA_BOUNDSCHECK=1: an index past an array's end raises IndexError in its test instead of
# writing over memory (a wrong figure, or pytest killed by SIGSEGV). Every kernel compiles
# again, with the checks, into a throw-away cache (a bounds-checked build must not be cached
# for normal runs, nor a normal one reused here): ~1.5 min on 2 cores, beside ~13 for the suite.
boundscheck() {
  local cache rc=0
  cache="$(mktemp -d)"
  NUMBA_BOUNDSCHECK=1 NUMBA_CACHE_DIR="$cache" \
    "$VENV/bin/pytest" -q tests/cache tests/sim tests/cluster -k brute "$@" || rc=$?
  rm -rf "$cache"
  return "$rc"
}

if [ "${1:-}" = "--boundscheck" ]; then
  shift
  boundscheck "$@"
  exit
fi

"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
"$VENV/bin/lint-imports"  # layer and no-cycle contracts in pyproject.toml
"$VENV/bin/pytest" -q "$@"
boundscheck
