#!/usr/bin/env bash
# Mutation score of the core (issue 16). Not part of CI: a full run takes hours on two cores.
#
# mutmut mutates what [tool.mutmut] in pyproject.toml lists (helm_plan/sim, helm_plan/cache,
# helm_plan/oracle, helm_plan/report/summary.py), runs the tests covering each mutated function,
# then this prints the score per module and every surviving mutant. Numba kernels (@nb.njit)
# are not mutated (mutmut skips decorated functions); docs/mutation-survivors.md lists the
# survivors judged equivalent.
#
# Usage: scripts/mutation.sh [MUTANTS] [TEST_PATH...]
#   scripts/mutation.sh                                   # everything, the configured tests
#   scripts/mutation.sh 'helm_plan.sim.metrics*' tests/sim/test_sim_metrics.py tests/sim/test_sim_node.py
# MUTANTS is a mutmut name glob (module.x_function__mutmut_N); TEST_PATHs narrow the test
# selection (much faster for one module). JOBS sets the workers (default: one per core).
# Results accumulate in mutants/ (gitignored; `rm -rf mutants` starts over);
# `.venv-test/bin/mutmut show NAME` prints one mutant's diff.
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv-test}"
PATTERN="${1:-}"
[ $# -gt 0 ] && shift
JOBS="${JOBS:-$(nproc)}"
[ -x "$VENV/bin/mutmut" ] || "$VENV/bin/python" -m pip install -q '.[test]'

mkdir -p mutants
echo "mutmut run ${PATTERN:-(all)} with ${*:-the [tool.mutmut] test selection}; log: mutants/run.log"
MUTMUT_TESTS="$*" "$VENV/bin/python" scripts/mutmut_run.py run --max-children "$JOBS" \
  ${PATTERN:+"$PATTERN"} >mutants/run.log 2>&1 || {
  tail -c 4000 mutants/run.log
  exit 1
}

"$VENV/bin/mutmut" results --all true 2>/dev/null | "$VENV/bin/python" scripts/mutmut_run.py score "$PATTERN"
