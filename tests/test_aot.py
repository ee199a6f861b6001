"""AOT compilation of the real train step for TPU topologies on this CPU (libtpu), and the
model config it compiles: the one `train` would resolve for the same config."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from easylemur.aot import run_model_config
from easylemur.config import load_config

ROOT = Path(__file__).resolve().parents[1]
needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="AOT compilation for TPU needs libtpu (pip install 'easylemur[tpu]')")


def _aot(topology: str, *extra: str) -> tuple[int, dict]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    p = subprocess.run([sys.executable, "-m", "easylemur.aot", "--config", "configs/lemur_70b_pretrain.py",
                        "--topology", topology, *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    assert lines, p.stdout[-2000:] + p.stderr[-3000:]
    return p.returncode, json.loads(lines[-1])


@pytest.mark.slow
@needs_libtpu
def test_lemur_70b_fits_v4_pod():
    rc, out = _aot("v4:4x8x8")
    assert out["devices"] == 512 and out["fits"] is True and rc == 0, out
    assert out["batch"] == [512, 4096]
    assert 0 < out["breakdown"]["argument"] < out["hbm_bytes_per_device"]
    assert out["model_from"].startswith("preset 'llama2_70b'")  # init.from's weights are not on this machine


@pytest.mark.slow
@needs_libtpu
def test_lemur_70b_does_not_fit_v5e_2x2():
    rc, out = _aot("v5e:2x2", "--config.train.batch_size", "8")  # the CLI's other override spelling
    assert out["devices"] == 4 and out["fits"] is False and rc == 1, out
    assert out["batch"] == [8, 4096]
    assert out["bytes_per_device"] > out["hbm_bytes_per_device"]


def test_aot_compiles_the_model_train_resolves(tmp_path):
    """init.from's architecture and vocabulary growth, as train would run them, not the preset."""
    from easylemur.tokenizer import DEFAULT_TOKENIZER_PATH
    from hf_models import make_hf_model

    make_hf_model(vocab_size=4000).save_pretrained(tmp_path / "hf")
    cfg = load_config("configs/tiny_chat.py", [f"init.from={tmp_path / 'hf'}", f"data.tokenizer={DEFAULT_TOKENIZER_PATH}",
                                              "train.extend_vocab=true", "model.remat=full"])
    model_cfg, source = run_model_config(cfg)
    assert (model_cfg.hidden_size, model_cfg.vocab_size, model_cfg.remat) == (64, 4096, "full")
    assert source == f"init.from={tmp_path / 'hf'}"
    missing = load_config("configs/tiny_chat.py", [f"init.from={tmp_path / 'nothing'}"])
    model_cfg, source = run_model_config(missing)
    assert model_cfg.hidden_size == 128 and source.startswith("preset 'tiny'")
