"""`python -m easylemur.data preview` as DESIGN.md section 3 specifies."""

import json
import subprocess
import sys
from pathlib import Path

from easylemur.tokenizer import Tokenizer

ROOT = Path(__file__).resolve().parents[1]


def run(*args):
    return subprocess.run([sys.executable, "-m", "easylemur.data", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_preview_json_pretrain():
    r = run("preview", "--config", "configs/tiny_pretrain.py", "--rows", "12", "--format", "json",
            "--config.data.seq_len=64", "--config.data.prefetch=0")
    assert r.returncode == 0, r.stderr
    rows = [json.loads(l) for l in r.stdout.splitlines()]
    assert len(rows) == 12
    tok = Tokenizer.load()
    for row in rows:
        assert row["source"] in ("code", "text")
        assert len(row["input_ids"]) == len(row["loss_mask"]) == len(row["segment_ids"]) == 64
        # trained_text is the decoded text of each run of trained tokens
        runs, cur = [], []
        for t, m in zip(row["input_ids"], row["loss_mask"]):
            if m:
                cur.append(t)
            elif cur:
                runs.append(tok.decode(cur)), cur.clear()
        if cur:
            runs.append(tok.decode(cur))
        assert row["trained_text"] == runs
    assert {r["source"] for r in rows} == {"code", "text"}  # 10:1 -> one text row in 11
    assert "bad records" in r.stderr


def test_preview_text_chat():
    r = run("preview", "--config", "configs/tiny_chat.py", "--rows", "2", "--format", "text", "--config.data.prefetch=0")
    assert r.returncode == 0, r.stderr
    assert "=== row 0  source=chat" in r.stdout and "<|im_start|>assistant\n⟦" in r.stdout
    assert "<|im_end|>\n⟧" in r.stdout


def test_preview_errors_and_help():
    r = run("preview", "--config", "configs/tiny_pretrain.py", "--config.data.sources.code.wieght=3")
    assert r.returncode != 0 and "data.sources.code.wieght" in r.stderr
    r = run("preview", "--help")
    assert r.returncode == 0 and "--rows" in r.stdout and "--format" in r.stdout
