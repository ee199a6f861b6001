#!/usr/bin/env bash
# Creates .venv (if missing) and installs easylemur with its test extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
.venv/bin/pip install -q --upgrade pip
# torch first and pinned: the local CPU wheel; anything looser pulls a multi-GB CUDA build.
.venv/bin/pip install -q "torch==2.13.0"
.venv/bin/pip install -q -e ".[test]"
# bubblewrap sandboxes generated code in `python -m easylemur.eval` (and its tests).
if ! command -v bwrap >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    SUDO=$([ "$(id -u)" = 0 ] || echo sudo -n)
    { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq bubblewrap; } >/dev/null 2>&1 \
        || echo "setup_env: could not install bubblewrap (apt-get install -y bubblewrap); sandbox tests will be skipped" >&2
fi
# The linter of tpu_scripts/ and scripts/ (tests/test_tpu_scripts.py runs it).
if ! command -v shellcheck >/dev/null 2>&1 && command -v apt-get >/dev/null 2>&1; then
    SUDO=$([ "$(id -u)" = 0 ] || echo sudo -n)
    { $SUDO apt-get update -qq && $SUDO apt-get install -y -qq shellcheck; } >/dev/null 2>&1 \
        || echo "setup_env: could not install shellcheck (apt-get install -y shellcheck); the shellcheck test will be skipped" >&2
fi
