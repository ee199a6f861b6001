#!/usr/bin/env bash
# Sets up .venv and the eval toolchains, then runs the test suite.
#   bash scripts/test.sh            everything (CI runs this)
#   bash scripts/test.sh --fast     the fast tier: pytest -m "not slow" (in-process tests of every package)
# Any other arguments go to pytest (e.g. -k serve, -x).
set -euo pipefail
cd "$(dirname "$0")/.."
args=()
for a in "$@"; do
    if [ "$a" = "--fast" ]; then args+=(-m "not slow"); else args+=("$a"); fi
done
bash scripts/setup_env.sh
bash scripts/setup_eval.sh
# -n 2: two pytest-xdist workers (most of the suite waits on subprocesses, compiles and sandboxes,
# so two workers overlap well even on 2 cores); worksteal balances the few minute-long tests.
.venv/bin/python -m pytest -q -n "${EASYLEMUR_TEST_WORKERS:-2}" --dist worksteal tests "${args[@]+"${args[@]}"}"
