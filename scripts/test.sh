#!/usr/bin/env bash
# Sets up .venv and runs the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup_env.sh
bash scripts/setup_eval.sh
.venv/bin/python -m pytest -q tests "$@"
