"""Llama's kin (convert/families.py) against transformers' own classes: DeepSeek-Coder's linear
RoPE, Llama-3.x's llama3 RoPE and tied head, Qwen2 (q/k/v biases), Mistral (sliding window no
row reaches). Each: from-hf -> logits equal transformers' (float32), to-hf -> bit-identical
tensors and a config.json transformers loads into the same class; and the one-line refusals."""

import json
import shutil

import numpy as np
import pytest
import torch
import transformers

import easylemur
from easylemur.convert import cli as convert
from easylemur.convert import hf
from hf_models import hf_logits

BASE = dict(vocab_size=1013, hidden_size=64, intermediate_size=176, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, rms_norm_eps=1e-5, tie_word_embeddings=False)
LLAMA3 = dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
              original_max_position_embeddings=16)
CASES = {
    # DeepSeek-Coder: positions divided by the factor
    "llama_linear": ("Llama", dict(rope_theta=1e5, rope_scaling=dict(rope_type="linear", factor=4.0))),
    # Llama-3.1: frequency-dependent scaling (rows of 48 pass original_max_position_embeddings=16)
    "llama3": ("Llama", dict(rope_theta=5e5, rope_scaling=LLAMA3)),
    # Llama-3.2-1B/3B: the same, with the head tied to the embedding
    "llama3_tied": ("Llama", dict(rope_theta=5e5, rope_scaling=LLAMA3, tie_word_embeddings=True)),
    # Qwen2.5(-Coder): q/k/v biases, theta 1e6, a sliding_window that use_sliding_window=false switches off
    "qwen2": ("Qwen2", dict(rope_theta=1e6, use_sliding_window=False, sliding_window=8, max_window_layers=1)),
    "qwen2_tied": ("Qwen2", dict(rope_theta=1e6, tie_word_embeddings=True, bos_token_id=5, eos_token_id=7)),
    # Mistral: a window longer than every row
    "mistral": ("Mistral", dict(rope_theta=1e6, sliding_window=64)),
}


def make_kin(family: str, seed: int = 0, **overrides):
    """A random transformers <family>ForCausalLM, weights (biases included) large enough that a wrong
    convention shows (see hf_models.make_hf_model)."""
    config = getattr(transformers, f"{family}Config")(**{**BASE, **overrides})
    torch.manual_seed(seed)
    model = getattr(transformers, f"{family}ForCausalLM")(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.5 * torch.randn_like(p))
            elif name.endswith(".bias"):
                p.copy_(0.5 * torch.randn_like(p))
            elif p.ndim == 2:
                p.copy_(torch.randn_like(p) * (1.0 / p.shape[1] ** 0.5))
    return model


def _ids(batch, length, seed=0):
    return np.random.default_rng(seed).integers(0, BASE["vocab_size"], size=(batch, length))


def _tensors(path) -> dict:
    return {n: s.read() for n, s in hf.index_hf_tensors(path).items()}


def _one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_family_logits_and_round_trip(tmp_path, name):
    family, overrides = CASES[name]
    model = make_kin(family, **overrides)
    model.save_pretrained(tmp_path / "hf")
    assert convert.main(["from-hf", "--hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ck")]) == 0
    ids = _ids(2, 48)
    ref = hf_logits(model, ids)
    loaded = easylemur.load(tmp_path / "ck")
    assert loaded.config.family == family.lower() and loaded.config.qkv_bias == (family == "Qwen2")
    ours = np.asarray(loaded.logits(ids))
    err = np.abs(ours - ref).max() / np.abs(ref).max()
    assert ours.shape == ref.shape and err <= 1e-5, (name, err)

    assert convert.main(["to-hf", "--checkpoint", str(tmp_path / "ck"), "--out", str(tmp_path / "out"),
                         "--dtype", "float32"]) == 0
    a, b = _tensors(tmp_path / "hf"), _tensors(tmp_path / "out")
    assert sorted(a) == sorted(b)
    assert all(a[n].dtype == b[n].dtype and a[n].tobytes() == b[n].tobytes() for n in a)
    assert ("lm_head.weight" in b) == (not overrides.get("tie_word_embeddings", False))
    assert any(n.endswith("q_proj.bias") for n in b) == (family == "Qwen2")
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["model_type"] == family.lower() and written["architectures"] == [f"{family}ForCausalLM"]
    assert hf.read_hf_config(tmp_path / "out") == hf.read_hf_config(tmp_path / "hf")
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32)
    assert type(reloaded) is type(model)
    assert reloaded.config.tie_word_embeddings == model.config.tie_word_embeddings
    assert np.array_equal(hf_logits(reloaded, ids), ref)


def test_rope_scaling_changes_the_logits():
    """The cases above would pass for a model that ignored rope_scaling if scaling did not move
    the logits at this scale; check that it does."""
    ids = _ids(1, 48)
    plain = hf_logits(make_kin("Llama", rope_theta=5e5), ids)
    for scaling in (LLAMA3, dict(rope_type="linear", factor=4.0)):
        assert np.abs(hf_logits(make_kin("Llama", rope_theta=5e5, rope_scaling=scaling), ids) - plain).max() > 1e-2


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("qwen")
    make_kin("Qwen2").save_pretrained(d)
    return d


@pytest.mark.parametrize("change, field, needle", [
    ({"use_sliding_window": True}, "use_sliding_window", "is True"),
    ({"layer_types": ["sliding_attention", "full_attention"]}, "layer_types", "full attention"),
    ({"rope_parameters": {"rope_theta": 1e6, "rope_type": "yarn", "factor": 4.0}}, "rope_scaling.rope_type", "'yarn'"),
    ({"attn_logit_softcapping": 30.0}, "attn_logit_softcapping", "is not a field easylemur implements"),
    ({"model_type": "gemma"}, "model_type", "'gemma'"),
])
def test_refusals_are_one_line_naming_the_field(qwen_dir, tmp_path, capsys, change, field, needle):
    d = tmp_path / "hf"
    shutil.copytree(qwen_dir, d)
    cfg = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**cfg, **change}))
    assert convert.main(["from-hf", "--hf", str(d), "--out", str(tmp_path / "ck")]) == 2
    line = _one_line_error(capsys.readouterr().err)
    assert line.startswith(f"error: {d / 'config.json'}: {field} ") and needle in line, line
    assert not (tmp_path / "ck").exists()


def test_mistral_window_shorter_than_the_row_is_refused(tmp_path):
    make_kin("Mistral", sliding_window=16).save_pretrained(tmp_path)
    m = easylemur.load(tmp_path)
    assert m.config.sliding_window == 16
    m.logits(_ids(1, 16))  # a row the window covers: nothing changes
    with pytest.raises(ValueError, match="sliding_window=16 is shorter than this row"):
        m.logits(_ids(1, 17))


def test_llama_refuses_mistral_and_qwen_fields():
    """A field of another family is not silently accepted for llama."""
    base = {"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
            "num_hidden_layers": 1, "num_attention_heads": 2}
    for field, value in (("sliding_window", 4096), ("use_sliding_window", False)):
        with pytest.raises(hf.HFFormatError, match=f"config.json: {field} is not a field"):
            hf.config_from_hf({**base, field: value})
    with pytest.raises(hf.HFFormatError, match="attention_bias is True"):
        hf.config_from_hf({**base, "attention_bias": True})


# published parameter counts (billions) of the models the family presets copy
PRESET_SIZES = {"llama3_8b": 8.03, "llama3_70b": 70.55, "llama3.1_8b": 8.03, "llama3.1_70b": 70.55,
                "llama3.2_1b": 1.24, "llama3.2_3b": 3.21,
                "qwen2.5_coder_0.5b": 0.494, "qwen2.5_coder_1.5b": 1.54, "qwen2.5_coder_3b": 3.09,
                "qwen2.5_coder_7b": 7.62, "qwen2.5_coder_14b": 14.77, "qwen2.5_coder_32b": 32.76}


@pytest.mark.parametrize("name", sorted(PRESET_SIZES))
def test_family_presets(name):
    from easylemur.model.config import PRESETS

    cfg = PRESETS[name]
    assert abs(cfg.num_params() / 1e9 - PRESET_SIZES[name]) <= 0.01 * PRESET_SIZES[name]
    out = hf.config_to_hf(cfg)
    assert hf.config_from_hf(out) == cfg
    theirs = transformers.AutoConfig.for_model(**out)
    assert type(theirs).__name__ == f"{ {'llama': 'Llama', 'qwen2': 'Qwen2'}[cfg.family]}Config"
    assert theirs.tie_word_embeddings == cfg.tie_word_embeddings and theirs.num_hidden_layers == cfg.num_layers


@pytest.mark.slow
def test_qwen2_greedy_decoding_equals_transformers(qwen_dir):
    """The KV-cache path (prefill, then one token at a time) adds the q/k/v biases too."""
    theirs = make_kin("Qwen2")
    prompts = [[5, 17, 300, 2, 41], list(range(3, 30))]
    ours = easylemur.load(qwen_dir).generate(prompts, max_new_tokens=8, stop_ids=[])
    for p, got in zip(prompts, ours):
        ref = theirs.generate(torch.tensor([p]), max_new_tokens=8, do_sample=False, eos_token_id=None, pad_token_id=0)
        assert got == ref[0, len(p):].tolist()


def test_training_rows_longer_than_the_window_are_refused():
    import dataclasses

    from ml_collections import ConfigDict

    from easylemur.config import ConfigError
    from easylemur.model.config import PRESETS
    from easylemur.train.start import _check_sliding_window

    model = dataclasses.replace(PRESETS["tiny"], family="mistral", sliding_window=256)
    _check_sliding_window(ConfigDict({"data": {"seq_len": 256}}), model)
    with pytest.raises(ConfigError, match="data.seq_len=512 is longer than the model's sliding_window=256"):
        _check_sliding_window(ConfigDict({"data": {"seq_len": 512}}), model)


def test_qwen2_bf16_compute_close(qwen_dir):
    """The low-precision projections add the biases too (in float32, then cast)."""
    ids = _ids(2, 32)
    ref = hf_logits(make_kin("Qwen2"), ids)
    ours = np.asarray(easylemur.load(qwen_dir, dtype="bfloat16").logits(ids))
    assert np.abs(ours - ref).max() <= 5e-2 * np.abs(ref).max()
