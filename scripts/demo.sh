#!/usr/bin/env bash
# The tiny demo, offline on a CPU: pre-train on data/samples (10:1 code:text), chat-tune the
# result on ChatML conversations, export to Hugging Face format, and generate a reply.
# Environment knobs (for tests and impatient people): RUNS (output folder, default runs),
# PRETRAIN_ARGS / CHAT_ARGS (extra --config.* overrides), SKIP_SETUP=1 (use the current python).
set -euo pipefail
cd "$(dirname "$0")/.."
RUNS=${RUNS:-runs}
if [ "${SKIP_SETUP:-0}" != 1 ]; then bash scripts/setup_env.sh; PY=.venv/bin/python; else PY=${PYTHON:-python}; fi
export JAX_PLATFORMS=${JAX_PLATFORMS:-cpu}

echo "== 1/4 continued pre-training (configs/tiny_pretrain.py)"
$PY -m easylemur.train --config configs/tiny_pretrain.py --config.workdir="$RUNS/tiny_pretrain" ${PRETRAIN_ARGS:-}
echo "== 2/4 chat fine-tuning from it (configs/tiny_chat.py)"
$PY -m easylemur.train --config configs/tiny_chat.py --config.workdir="$RUNS/tiny_chat" \
    --config.init.from="$RUNS/tiny_pretrain" ${CHAT_ARGS:-}
echo "== 3/4 export to Hugging Face format"
$PY -m easylemur.convert to-hf --checkpoint "$RUNS/tiny_chat" --out "$RUNS/tiny_chat_hf" --force
echo "== 4/4 generate a reply from the export"
$PY -m easylemur.generate --checkpoint "$RUNS/tiny_chat_hf" --chat --max-new-tokens 48 \
    --prompt "Write a Python function that returns the square of a number."
python3 - "$RUNS" <<'PY'
import json, sys
for run in ("tiny_pretrain", "tiny_chat"):
    rows = [json.loads(l) for l in open(f"{sys.argv[1]}/{run}/metrics.jsonl")]
    print(f"{run}: loss {rows[0]['loss']:.3f} (step {rows[0]['step']}) -> {rows[-1]['loss']:.3f} (step {rows[-1]['step']})")
PY
