"""The README's commands exist and answer --help; the quick start's demo runs end to end."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}


def _commands() -> list[tuple[str, ...]]:
    found = set()
    for m in re.finditer(r"python -m (easylemur(?:\.\w+)*)((?: [a-z][\w-]*)?)", README):
        module, sub = m.group(1), m.group(2).strip()
        found.add((module, sub) if sub and not sub.startswith("-") else (module,))
    return sorted(found)


def test_readme_names_every_cli():
    modules = {c[0] for c in _commands()}
    assert {"easylemur.train", "easylemur.convert", "easylemur.data", "easylemur.generate", "easylemur.aot",
            "easylemur.tokenizer"} <= modules


@pytest.mark.parametrize("cmd", _commands(), ids=" ".join)
def test_readme_command_has_help(cmd):
    p = subprocess.run([sys.executable, "-m", *cmd, "--help"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "usage:" in p.stdout


def test_quick_start_demo_runs(tmp_path):
    assert "bash scripts/demo.sh" in README and "bash scripts/test.sh" in README
    few = "--config.train.steps=4 --config.log.every=2 --config.checkpoint.every=4 --config.data.prefetch=0"
    env = {**ENV, "SKIP_SETUP": "1", "PYTHON": sys.executable, "RUNS": str(tmp_path), "PRETRAIN_ARGS": few, "CHAT_ARGS": few}
    p = subprocess.run(["bash", "scripts/demo.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert (tmp_path / "tiny_chat_hf" / "config.json").is_file()
    assert re.search(r"tiny_chat: loss [\d.]+ \(step 2\) -> [\d.]+ \(step 4\)", p.stdout)
