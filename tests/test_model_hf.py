"""The Flax Llama against transformers' LlamaForCausalLM on random tiny configs."""

import json

import jax.numpy as jnp
import numpy as np
import pytest

import easylemur
from easylemur.convert import hf
from easylemur.model.llama import Llama
from hf_models import hf_logits, make_hf_model

CASES = {
    "mha_theta1e4": dict(num_attention_heads=4, num_key_value_heads=4, rope_theta=1e4),
    "gqa_theta1e6": dict(num_attention_heads=4, num_key_value_heads=2, rope_theta=1e6),
    "mqa_theta5e5": dict(num_attention_heads=4, num_key_value_heads=1, rope_theta=5e5),
    "tied": dict(tie_word_embeddings=True),
    "head_dim_32": dict(head_dim=32),
    "llama3_scaling": dict(
        rope_theta=5e5,
        max_position_embeddings=512,
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=16),
    ),
    "linear_scaling": dict(rope_scaling=dict(rope_type="linear", factor=4.0)),
    "dynamic_scaling": dict(max_position_embeddings=32, rope_scaling=dict(rope_type="dynamic", factor=2.0)),
}


def _ids(batch, length, vocab, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, size=(batch, length))


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CASES))
def test_logits_match_transformers(tmp_path, name):
    model = make_hf_model(**CASES[name])
    model.save_pretrained(tmp_path)
    # sequences past llama3's original_max_position_embeddings (16) and dynamic's max (32)
    ids = _ids(2, 48, model.config.vocab_size)
    ref = hf_logits(model, ids)
    ours = np.asarray(easylemur.load(tmp_path).logits(ids))
    scale = np.abs(ref).max()
    assert ours.shape == ref.shape == (2, 48, 1013)
    assert np.abs(ours - ref).max() <= 1e-5 * scale, (name, np.abs(ours - ref).max(), scale)


def test_theta_matters(tmp_path):
    """The test above would pass for a model that ignored rope_theta if theta did not change
    the logits; check that it does at this scale."""
    a, b = make_hf_model(rope_theta=1e4), make_hf_model(rope_theta=5e5)
    ids = _ids(1, 48, 1013)
    assert np.abs(hf_logits(a, ids) - hf_logits(b, ids)).max() > 1e-2


def test_bf16_compute_close(tmp_path):
    model = make_hf_model(num_key_value_heads=2)
    model.save_pretrained(tmp_path)
    ids = _ids(2, 32, 1013)
    ref = hf_logits(model, ids)
    ours = np.asarray(easylemur.load(tmp_path, dtype="bfloat16").logits(ids))
    # bf16 activations/matmul inputs with float32 accumulation: stated bound 5% of logit scale
    assert np.abs(ours - ref).max() <= 5e-2 * np.abs(ref).max()


def test_pytorch_bin_loads_without_pickle_code(tmp_path):
    model = make_hf_model()
    import torch

    model.config.save_pretrained(tmp_path)  # transformers 5 no longer writes .bin itself
    torch.save({k: v.to(torch.bfloat16) if k.endswith("norm.weight") else v for k, v in model.state_dict().items()},
               tmp_path / "pytorch_model.bin")
    with torch.no_grad():  # the bf16 norms above must be what the reference sees too
        for k, v in model.named_parameters():
            if k.endswith("norm.weight"):
                v.copy_(v.to(torch.bfloat16).float())
    ids = _ids(1, 16, 1013)
    ref = hf_logits(model, ids)
    ours = np.asarray(easylemur.load(tmp_path).logits(ids))
    assert np.abs(ours - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.slow
def test_packed_row_equals_documents_alone(tmp_path):
    model = make_hf_model()
    model.save_pretrained(tmp_path)
    m = easylemur.load(tmp_path)
    a, b = _ids(1, 20, 1013, seed=1)[0], _ids(1, 12, 1013, seed=2)[0]
    row = np.concatenate([a, b])[None]
    seg = np.array([[1] * 20 + [2] * 12])
    pos = np.array([list(range(20)) + list(range(12))])
    packed = np.asarray(m.logits(row, positions=pos, segment_ids=seg))[0]
    alone_a = np.asarray(m.logits(a[None]))[0]
    alone_b = np.asarray(m.logits(b[None]))[0]
    scale = np.abs(alone_a).max()
    assert np.abs(packed[:20] - alone_a).max() <= 1e-5 * scale
    assert np.abs(packed[20:] - alone_b).max() <= 1e-5 * scale
    # and the reference agrees for the documents alone
    assert np.abs(alone_b - hf_logits(model, b[None])[0]).max() <= 1e-5 * scale


@pytest.mark.slow
def test_blockwise_attention_equals_dense(tmp_path):
    import dataclasses

    model = make_hf_model()
    model.save_pretrained(tmp_path)
    m = easylemur.load(tmp_path)
    cfg = dataclasses.replace(m.config, attention="blockwise", attn_block_size=16)
    ids = _ids(2, 64, 1013)
    seg = np.array([[1] * 40 + [2] * 24, [1] * 64])
    pos = np.array([list(range(40)) + list(range(24)), list(range(64))])
    dense = np.asarray(m.logits(ids, pos, seg))
    block = np.asarray(Llama(cfg).apply({"params": m.params}, jnp.asarray(ids), jnp.asarray(pos), jnp.asarray(seg)))
    assert np.abs(block - dense).max() <= 1e-5 * np.abs(dense).max()


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("attention_bias", True, "attention_bias"),
        ("mlp_bias", True, "mlp_bias"),
        ("hidden_act", "gelu", "hidden_act"),
        ("rope_scaling", {"rope_type": "yarn", "factor": 2.0}, "rope_type"),
        ("model_type", "gemma", "model_type"),
    ],
)
def test_unsupported_config_names_field(tmp_path, field, value, needle):
    model = make_hf_model()
    model.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg[field] = value
    if field == "rope_scaling":
        cfg["rope_parameters"] = {"rope_theta": 1e4, **value}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(hf.HFFormatError, match=needle):
        easylemur.load(tmp_path)


def test_reads_legacy_and_v5_rope_fields():
    v5 = {"model_type": "llama", "vocab_size": 10, "hidden_size": 8, "intermediate_size": 16,
          "num_hidden_layers": 1, "num_attention_heads": 2,
          "rope_parameters": {"rope_theta": 5e5, "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                              "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}
    legacy = {k: v for k, v in v5.items() if k != "rope_parameters"}
    legacy["rope_theta"] = 5e5
    legacy["rope_scaling"] = {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                              "original_max_position_embeddings": 8192}
    a, b = hf.config_from_hf(v5), hf.config_from_hf(legacy)
    assert a.rope_theta == b.rope_theta == 5e5
    assert a.rope_type == b.rope_type == "llama3"
    assert a.rope_scaling_dict["factor"] == b.rope_scaling_dict["factor"] == 8.0
    # written back in both forms, and read back unchanged
    out = hf.config_to_hf(a)
    assert out["rope_theta"] == 5e5 and out["rope_parameters"]["rope_type"] == "llama3"
    assert out["rope_scaling"]["factor"] == 8.0
    assert hf.config_from_hf(out) == a


def test_shape_mismatch_is_an_error(tmp_path):
    model = make_hf_model()
    model.save_pretrained(tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["intermediate_size"] = 128
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(hf.HFFormatError, match=r"mlp\.\w+_proj\.weight has shape \(\d+, \d+\) but config.json implies"):
        easylemur.load(tmp_path)
