"""Running the train CLI from tests: a small model (0.6M params) on the tiny_pretrain mixture,
as a subprocess on N CPU devices (`run`, `cmd`) or in-process (`main`)."""

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SMALL = [
    "model.hidden_size=64", "model.intermediate_size=128", "model.num_layers=2", "model.num_heads=4",
    "model.num_kv_heads=2", "model.dtype=float32", "data.seq_len=64", "train.batch_size=8", "data.prefetch=0",
    "optimizer.warmup_steps=2", "log.every=1",
]
# the reference run the resume tests compare against (tests/conftest.py `reference_run`)
REFERENCE = ["train.steps=30", "checkpoint.every=6"]


# The suite's XLA:CPU skips LLVM's optimisation passes (tests/conftest.py sets it for the session;
# every subprocess environment built here carries it): the suite's programs are tiny, so compiling
# is most of their cost (a 4-step trainer of train_run's model: 12.5 -> 6.7 s of CPU). The numbers
# may differ from an optimised build's in the last bits (tiny_pretrain's bf16 loss after 4 steps:
# 8.1512 against 8.1513), so every comparison in the suite is between programs compiled alike; the
# README's demo and the notebook run as a user's do. TPU AOT compiles ignore it (same memory and
# collectives with and without it).
QUICK_COMPILE = "--xla_backend_optimization_level=0"


def env(devices: int = 1, quick_compile: bool = True) -> dict:
    """The environment of a CPU trainer on `devices` devices; `quick_compile=False` for a test whose
    steps run long enough that their speed matters more than the compile's (unoptimised code runs
    them up to 2x slower)."""
    e = dict(os.environ)
    e["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}" + (f" {QUICK_COMPILE}" if quick_compile else "")
    e["JAX_PLATFORMS"] = "cpu"
    return e


def cmd(workdir, overrides=(), config="configs/tiny_pretrain.py") -> list[str]:
    return [sys.executable, "-m", "easylemur.train", "--config", config, f"--config.workdir={workdir}",
            *[f"--config.{o}" for o in SMALL + list(overrides)]]


def run(workdir, overrides=(), devices=1, config="configs/tiny_pretrain.py", check=True) -> subprocess.CompletedProcess:
    p = subprocess.run(cmd(workdir, overrides, config), cwd=ROOT, env=env(devices), capture_output=True, text=True,
                       timeout=600)
    if check and p.returncode != 0:
        raise AssertionError(f"train failed ({p.returncode}):\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p


def losses(workdir) -> dict[int, float]:
    rows = [json.loads(l) for l in (Path(workdir) / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "loss" in r]  # task evals write lines of their own
    steps = [r["step"] for r in rows]
    assert len(steps) == len(set(steps)), f"duplicate steps in metrics.jsonl: {steps}"
    return {r["step"]: r["loss"] for r in rows}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(capsys, workdir, overrides) -> tuple[int, str, str]:
    """The train CLI in-process (its `main` through `run_cli`, as `python -m` runs it), on the
    test session's 8 CPU devices: (exit status, stdout, stderr)."""
    from easylemur.errors import run_cli
    from easylemur.train.loop import main as train_main

    rc = run_cli(train_main, ["--config", "configs/tiny_pretrain.py", f"--config.workdir={workdir}",
                              *[f"--config.{o}" for o in SMALL + list(overrides)]])
    out, err = capsys.readouterr()
    return rc, out, err
