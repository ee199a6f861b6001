#!/usr/bin/env bash
# Creates .venv (if missing) and installs easylemur with its test extras. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then "$PY" -m venv .venv; fi
.venv/bin/pip install -q --upgrade pip
# torch first and pinned: the local CPU wheel; anything looser pulls a multi-GB CUDA build.
.venv/bin/pip install -q "torch==2.13.0"
# wandb: tests/test_wandb.py logs to W&B offline (log.wandb_project)
.venv/bin/pip install -q -e ".[test,wandb]"
# Debian tools the tests use: bubblewrap sandboxes generated code in `python -m easylemur.eval`
# (tests/test_sandbox.py, test_eval.py); shellcheck lints tpu_scripts/ and scripts/
# (tests/test_tpu_scripts.py). Tests that need a missing one are skipped, with the reason.
apt_install() {  # COMMAND PACKAGE
    command -v "$1" >/dev/null 2>&1 && return 0
    command -v apt-get >/dev/null 2>&1 || { echo "setup_env: no apt-get; install $2 to run the tests that need $1" >&2; return 0; }
    local sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo -n"
    { $sudo apt-get update -qq && $sudo apt-get install -y -qq "$2"; } >/dev/null 2>&1 \
        || echo "setup_env: could not install $2 (apt-get install -y $2); the tests that need $1 will be skipped" >&2
}
apt_install bwrap bubblewrap
apt_install shellcheck shellcheck
