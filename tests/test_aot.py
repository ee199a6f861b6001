"""AOT compilation of the real train step for TPU topologies on this CPU (libtpu)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("libtpu", reason="AOT compilation for TPU needs libtpu (pip install 'easylemur[tpu]')")
ROOT = Path(__file__).resolve().parents[1]


def _aot(topology: str, *extra: str) -> tuple[int, dict]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    p = subprocess.run([sys.executable, "-m", "easylemur.aot", "--config", "configs/lemur_70b_pretrain.py",
                        "--topology", topology, *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    assert lines, p.stdout[-2000:] + p.stderr[-3000:]
    return p.returncode, json.loads(lines[-1])


def test_lemur_70b_fits_v4_pod():
    rc, out = _aot("v4:4x8x8")
    assert out["devices"] == 512 and out["fits"] is True and rc == 0, out
    assert out["batch"] == [512, 4096]
    assert 0 < out["breakdown"]["argument"] < out["hbm_bytes_per_device"]


def test_lemur_70b_does_not_fit_v5e_2x2():
    rc, out = _aot("v5e:2x2")
    assert out["devices"] == 4 and out["fits"] is False and rc == 1, out
    assert out["bytes_per_device"] > out["hbm_bytes_per_device"]
