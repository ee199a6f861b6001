"""The README's quick start and tour, run as a newcomer runs them: the demo (`bash
scripts/demo.sh`, its setup skipped: this is the environment it makes), then, in that environment
(`python` is the venv's: PATH as `source .venv/bin/activate` leaves it, JAX_PLATFORMS unset),
every command of the "A tour" block in its order, in a folder of its own that holds the
checkout's configs/, data/ and scripts (so runs/, checkpoints/ and eval/ are the tour's own).

What each command needs that a test machine lacks is said beside it in `ADAPT`: the TPU
scripts run with `--dry-run` (they print their gcloud commands), the 70B AOT compile is
tests/test_aot.py's, `--hf /path/Llama-2-7b-hf` is a tiny random HF model, the server is
started, asked and stopped, HellaSwag needs the Hub. Training and the evaluations run with
fewer steps and problems (their cost, not their behaviour). Every command must exit 0 and
print neither a traceback nor libtpu's start-up noise."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from easylemur.tokenizer.spm import DEFAULT_TOKENIZER_PATH
from hf_models import make_hf_model
from train_run import ROOT, free_port

README = (ROOT / "README.md").read_text()
FEW = ["--config.train.steps=6", "--config.checkpoint.every=3", "--config.log.every=2", "--config.data.prefetch=0"]


def tour_commands() -> list[str]:
    """The bash block under "## A tour", one command per entry (continuations joined, comments cut)."""
    block = re.search(r"## A tour\n.*?```bash\n(.*?)```", README, re.S).group(1)
    commands, current = [], ""
    for line in block.splitlines():
        line = re.sub(r"\s+#\s.*$", "", line).rstrip()
        current += line.rstrip("\\").strip() + " " if line.endswith("\\") else line.strip()
        if not line.endswith("\\") and current:
            commands.append(current.strip())
            current = ""
    return commands


def adapt(command: str, hf_dir: Path) -> tuple[list[str] | None, str]:
    """(the argv to run, or None; what was changed and why)."""
    argv = shlex.split(command)
    if argv[0].startswith("tpu_scripts/"):
        at = argv.index("--") if "--" in argv else len(argv)
        return ["bash", *argv[:at], "--dry-run", *argv[at:]], "a dry run: it prints its gcloud commands"
    if argv[:3] == ["python", "-m", "easylemur.aot"]:
        return None, "compiles Lemur-70B for a v4-512 (minutes): tests/test_aot.py runs it"
    if argv[:3] == ["python", "-m", "easylemur.train"]:
        return argv + FEW, "fewer steps"
    if "/path/Llama-2-7b-hf" in argv:
        return [str(hf_dir) if a == "/path/Llama-2-7b-hf" else a for a in argv], "a tiny random HF Llama"
    if argv[:4] == ["python", "-m", "easylemur.eval", "lm-eval"]:
        return None, "HellaSwag's dataset comes from the Hub (tests/test_harness.py runs lm-eval on a local task)"
    if argv[:4] == ["python", "-m", "easylemur.eval", "humaneval"]:
        return argv + ["--limit", "1"], "one problem"
    if argv[:4] == ["python", "-m", "easylemur.eval", "suite"]:
        # every row of the lemur suite on a checkpoint: tests/test_agent.py's end-to-end test
        return argv + ["--tasks", "humaneval,m_humaneval", "--limit", "1"], "two rows, one problem each"
    return argv, ""


def serve(argv: list[str], cwd: Path, env: dict) -> None:
    """Starts the server as written, waits until /v1/models answers, asks one completion, stops it."""
    port = free_port()
    argv = [a if a != "8000" else str(port) for a in argv]
    p = subprocess.Popen(argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 240
        while True:
            assert p.poll() is None, p.communicate()[1][-3000:]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
                    model = json.loads(r.read())["data"][0]["id"]
                    break
            except OSError:
                assert time.monotonic() < deadline, "the server did not answer"
                time.sleep(0.5)
        body = json.dumps({"model": model, "prompt": "def add(a, b):", "max_tokens": 4}).encode()
        req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=120) as r:
            assert json.loads(r.read())["choices"][0]["text"] is not None
    finally:
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=60)
    assert "Traceback" not in err, err[-3000:]


def quick_start(tour: Path, env: dict) -> None:
    """The README's first command, on few steps: pre-train, chat-tune, export, generate."""
    assert "bash scripts/demo.sh" in README and "bash scripts/test.sh" in README
    few = " ".join(FEW[:2]).replace("steps=6", "steps=4").replace("every=3", "every=4")
    p = subprocess.run(["bash", "scripts/demo.sh"], cwd=tour, capture_output=True, text=True, timeout=600,
                       env={**env, "SKIP_SETUP": "1", "PYTHON": sys.executable, "PRETRAIN_ARGS": few,
                            "CHAT_ARGS": few + " --config.log.every=2"})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert (tour / "runs" / "tiny_chat_hf" / "config.json").is_file()
    assert re.search(r"tiny_chat: loss [\d.]+ \(step 2\) -> [\d.]+ \(step 4\)", p.stdout), p.stdout[-2000:]


@pytest.mark.slow
@pytest.mark.e2e
def test_the_readme_quick_start_and_tour_run_as_written(tmp_path):
    commands = tour_commands()
    assert len(commands) >= 15 and commands[0].startswith("python -m easylemur.data preview"), commands
    tour = tmp_path / "tour"
    tour.mkdir()
    for name in ("configs", "data", "scripts", "tpu_scripts", "tokenizer", "easylemur", "setup.py"):
        (tour / name).symlink_to(ROOT / name)
    hf_dir = tmp_path / "Llama-2-7b-hf"
    make_hf_model(vocab_size=4096, num_hidden_layers=1, max_position_embeddings=256).save_pretrained(hf_dir)
    shutil.copyfile(DEFAULT_TOKENIZER_PATH, hf_dir / "tokenizer.model")
    venv_bin = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if k not in ("JAX_PLATFORMS", "XLA_FLAGS", "PYTHONPATH")}
    env.update(PATH=f"{venv_bin}{os.pathsep}{env.get('PATH', '')}", HOME=str(tmp_path / "home"),
               PYTHONPATH=str(ROOT), EASYLEMUR_CPU_PEAK_FLOPS="1e11", EASYLEMUR_MALLOC="default")
    (tmp_path / "home").mkdir()
    quick_start(tour, env)  # the tour's runs go on from the demo's (steps 4 -> 6)
    ran, skipped = [], []
    for command in commands:
        argv, why = adapt(command, hf_dir)
        if argv is None:
            skipped.append(f"{command[:60]}: {why}")
            continue
        began = time.monotonic()
        if argv[:3] == ["python", "-m", "easylemur.serve"]:
            serve(argv, tour, env)
        else:
            p = subprocess.run(argv, cwd=tour, env=env, capture_output=True, text=True, timeout=600)
            assert p.returncode == 0, f"{command}\n{p.stdout[-2000:]}\n{p.stderr[-3000:]}"
            assert "Traceback" not in p.stderr and "E0000" not in p.stderr and "TPU_WORKER" not in p.stderr, p.stderr
        ran.append(f"{time.monotonic() - began:5.1f} s  {command[:90]}{f'  ({why})' if why else ''}")
    print("\n".join(["ran:", *ran, "skipped:", *skipped]))
    assert (tour / "runs" / "tiny_chat_hf" / "config.json").is_file()
    assert (tour / "eval" / "table" / "table.md").is_file()
