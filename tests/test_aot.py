"""AOT compilation of the real train step for TPU topologies on this CPU (libtpu), and the
model config it compiles: the one `train` would resolve for the same config."""

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from easylemur.train.aot import accelerator_topology, run_model_config
from easylemur.config import load_config
from easylemur.errors import InputError
from easylemur.train.metrics import flops_per_token

ROOT = Path(__file__).resolve().parents[1]
NO_RUN = "/nonexistent/easylemur-test-workdir"  # no checkpoint to resume: the model is the config's
needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                                  reason="AOT compilation for TPU needs libtpu (pip install 'easylemur[tpu]')")


def _aot(*args: str, config: str = "configs/lemur_70b_pretrain.py") -> tuple[int, dict]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    # a workdir of its own: the config's relative runs/ may hold a real run (the demo's) to resume
    p = subprocess.run([sys.executable, "-m", "easylemur.aot", "--config", config,
                        f"--config.workdir={NO_RUN}", *args],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    assert lines, p.stdout[-2000:] + p.stderr[-3000:]
    return p.returncode, json.loads(lines[-1])


def test_accelerator_names_map_to_what_their_vms_present():
    assert accelerator_topology("v4-512") == ("v4:4x8x8", "megacore")  # 256 chips, one device each
    assert accelerator_topology("v4-8") == ("v4:2x2x1", "megacore")
    assert accelerator_topology("v5p-128") == ("v5p:4x4x4", "megacore")
    assert accelerator_topology("v5litepod-16") == ("v5e:4x4", "default")
    assert accelerator_topology("v6e-256") == ("v6e:16x16", "default")
    for bad in ("v4-6", "v4-512x", "v3-8", "v5e-16"):
        with pytest.raises(InputError, match=re.escape(bad)):
            accelerator_topology(bad)


GiB = 2**30


@pytest.mark.slow
@needs_libtpu
def test_lemur_70b_fits_v4_512_with_room_on_both_meshes():
    """As a v4-512 TPU VM presents it: 256 megacore devices of 30.75 GiB. The TPU compiler's own
    peak leaves at least 35% of HBM free (MaxText's llama2-70b with splash attention: 37% at
    fsdp 256, 20.9 GiB at fsdp 64 x tensor 4)."""
    rc, out = _aot("--accelerator", "v4-512")
    assert (rc, out["devices"], out["chip_config"], out["topology"]) == (0, 256, "megacore", "v4:4x8x8"), out
    assert out["fits"] is True and out["batch"] == [512, 4096]
    assert out["hbm_bytes_per_device"] == 30.75 * GiB  # as the compiler states it
    assert out["headroom"] >= 0.35 and out["peak_bytes_per_device"] <= 0.65 * out["hbm_bytes_per_device"], out
    assert out["model_from"].startswith("preset 'llama2_70b'")  # init.from's weights are not on this machine
    cfg = load_config("configs/lemur_70b_pretrain.py", [f"workdir={NO_RUN}"])
    model_cfg, _ = run_model_config(cfg)
    assert out["flops_per_device_per_step"] == flops_per_token(model_cfg, 4096) * 512 * 4096 / 256
    rc, out = _aot("--accelerator", "v4-512", "--config.mesh=data:1,fsdp:64,tensor:4")
    assert rc == 0 and out["mesh"] == {"data": 1, "fsdp": 64, "tensor": 4} and out["fits"] is True, out
    assert out["peak_bytes_per_device"] <= 20.9 * GiB, out


@pytest.mark.slow
@needs_libtpu
def test_lemur_on_llama31_70b_fits_v4_512():
    """The recipe on Llama-3.1-70B: a 128K vocabulary and 8192-token rows, one per device, still
    leave at least 35% of a v4 device's HBM free."""
    rc, out = _aot("--accelerator", "v4-512", config="configs/lemur_llama3_70b_pretrain.py")
    assert rc == 0 and out["fits"] is True and out["batch"] == [256, 8192], out
    assert out["model_from"].startswith("preset 'llama3.1_70b'") and out["params"] > 70.5e9
    assert out["headroom"] >= 0.35, out


@pytest.mark.slow
@needs_libtpu
def test_lemur_70b_does_not_fit_v5e_2x2():
    rc, out = _aot("--topology", "v5e:2x2", "--config.train.batch_size", "8")  # the CLI's other override spelling
    assert out["devices"] == 4 and out["fits"] is False and rc == 1, out
    assert out["batch"] == [8, 4096] and out["chip_config"] == "default"
    assert out["peak_bytes_per_device"] > out["hbm_bytes_per_device"]


def test_aot_compiles_the_model_train_resolves(tmp_path):
    """init.from's architecture and vocabulary growth, as train would run them, not the preset."""
    from easylemur.tokenizer.spm import DEFAULT_TOKENIZER_PATH
    from hf_models import make_hf_model

    make_hf_model(vocab_size=4000).save_pretrained(tmp_path / "hf")
    cfg = load_config("configs/tiny_chat.py", [f"workdir={tmp_path / 'w'}", f"init.from={tmp_path / 'hf'}",
                                              f"data.tokenizer={DEFAULT_TOKENIZER_PATH}", "train.extend_vocab=true",
                                              "model.remat=full"])
    model_cfg, source = run_model_config(cfg)
    assert (model_cfg.hidden_size, model_cfg.vocab_size, model_cfg.remat) == (64, 4096, "full")
    assert source == f"init.from={tmp_path / 'hf'}"
    missing = load_config("configs/tiny_chat.py", [f"workdir={tmp_path / 'w'}", f"init.from={tmp_path / 'nothing'}"])
    model_cfg, source = run_model_config(missing)
    assert model_cfg.hidden_size == 128 and source.startswith("preset 'tiny'")
