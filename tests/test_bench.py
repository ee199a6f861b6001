"""The benchmark scripts start and report what they promise, cheaply (no timing is asserted):
bench/gpu_mfu.py builds its configurations anywhere and refuses in one line without a GPU;
bench/train_throughput.py's last line is the JSON the README and BENCHMARKS.md quote."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _run(script: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run([sys.executable, str(ROOT / "bench" / script), *args], capture_output=True, text=True,
                          env=env, timeout=300)


def test_gpu_mfu_builds_its_configs_and_refuses_without_a_gpu():
    dry = _run("gpu_mfu.py", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "1b: 1.10B params" in dry.stdout and "7b: 6.74B params" in dry.stdout, dry.stdout
    assert "batch 4 x 4096, bfloat16 compute" in dry.stdout
    run = _run("gpu_mfu.py", "--models", "1b", "--attention", "cudnn", "--steps", "1")
    assert run.returncode == 1, (run.returncode, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: bench/gpu_mfu.py needs an NVIDIA GPU, and JAX sees cpu"), lines
    bad = _run("gpu_mfu.py", "--models", "13b", "--dry-run")
    assert bad.returncode == 2 and "--models: '13b' is not one of 1b, 7b" in bad.stderr, bad.stderr


def test_train_throughput_reports_its_json():
    """A tiny model, easylemur alone: the last line holds tokens/s, the matmul ceiling measured in
    the same run and the fraction of it, and no transformers figures."""
    run = _run("train_throughput.py", "--only", "easylemur", "--hidden", "64", "--layers", "1", "--heads", "2",
               "--kv-heads", "1", "--ff", "128", "--vocab", "256", "--seq", "32", "--batch", "2", "--steps", "1",
               "--repeats", "1")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    for key in ("easylemur_tokens_per_second", "matmul_ceiling_gflops", "easylemur_gflops",
                "easylemur_fraction_of_ceiling", "load_average_1m"):
        assert result[key] > 0, key
    assert "transformers_tokens_per_second" not in result and "ratio" not in result
    assert result["batch"] == [2, 32]
    bad = _run("train_throughput.py", "--hidden", "60", "--heads", "8")
    assert bad.returncode == 2 and "heads must divide hidden" in bad.stderr, bad.stderr
