"""Vocabulary extension: old tokens keep their logits, new rows are the mean of the old ones."""

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import ml_dtypes
import pytest
import torch

import easylemur
from easylemur.checkpoint import model_meta
from easylemur.convert import cli as convert
from easylemur.convert import hf
from easylemur.model.llama import Llama
from easylemur.model.stacking import scan_params
from easylemur.tokenizer.spm import Tokenizer
from easylemur.model.vocab import extend_vocab, grow_rows
from hf_models import hf_logits, make_hf_model


def _forward(cfg, params, ids):
    T = ids.shape[1]
    pos = jnp.broadcast_to(jnp.arange(T), ids.shape)
    return np.asarray(Llama(cfg).apply({"params": params}, jnp.asarray(ids), pos, jnp.ones_like(pos)))


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    make_hf_model().save_pretrained(d)
    return d


@pytest.mark.slow
@pytest.mark.parametrize("tied", [False, True])
def test_old_logits_unchanged_new_column_is_mean(tmp_path, tied):
    make_hf_model(tie_word_embeddings=tied).save_pretrained(tmp_path)
    cfg = hf.read_hf_config(tmp_path)
    params = hf.load_hf_params(tmp_path, cfg)
    V = cfg.vocab_size
    new, new_cfg = extend_vocab(params, cfg, V + 3)
    assert new_cfg.vocab_size == V + 3 and cfg.vocab_size == V
    assert params["embed_tokens"]["embedding"].shape[0] == V, "input tree must not be modified"
    emb = new["embed_tokens"]["embedding"]
    np.testing.assert_array_equal(emb[:V], params["embed_tokens"]["embedding"])
    mean = np.broadcast_to(params["embed_tokens"]["embedding"].mean(0), (3, cfg.hidden_size))
    np.testing.assert_allclose(emb[V:], mean, rtol=1e-6)
    assert ("lm_head" in new) == (not tied)

    ids = np.random.default_rng(0).integers(0, V, size=(2, 24))
    old = _forward(cfg, params, ids)
    ext = _forward(new_cfg, new, ids)
    assert ext.shape == (2, 24, V + 3)
    scale = np.abs(old).max()
    assert np.abs(ext[..., :V] - old).max() <= 1e-6 * scale
    # a linear head makes a mean column's logit the mean of the old logits
    np.testing.assert_allclose(ext[..., V], old.mean(-1), atol=1e-5 * scale)
    # and the new ids are usable as inputs
    assert np.isfinite(_forward(new_cfg, new, np.array([[V, V + 1, V + 2, 5]]))).all()


def test_scanned_and_jax_trees(model_dir):
    cfg = hf.read_hf_config(model_dir)
    params = hf.load_hf_params(model_dir, cfg)
    flat, _ = extend_vocab(params, cfg, cfg.vocab_size + 2)
    scanned = jax.tree.map(jnp.asarray, scan_params(params, cfg.num_layers))
    out, out_cfg = extend_vocab(scanned, cfg, cfg.vocab_size + 2)
    assert isinstance(out["embed_tokens"]["embedding"], jax.Array)
    V = cfg.vocab_size  # old columns exact; the means differ by summation order only (numpy vs XLA)
    np.testing.assert_array_equal(np.asarray(out["lm_head"]["kernel"])[:, :V], flat["lm_head"]["kernel"][:, :V])
    np.testing.assert_allclose(np.asarray(out["lm_head"]["kernel"])[:, V:], flat["lm_head"]["kernel"][:, V:],
                               rtol=1e-5, atol=1e-7)
    np.testing.assert_array_equal(np.asarray(out["layers"]["mlp"]["up_proj"]["kernel"]),
                                  np.asarray(scanned["layers"]["mlp"]["up_proj"]["kernel"]))
    assert out_cfg.vocab_size == cfg.vocab_size + 2


def test_grow_rows_appends_the_mean():
    x = np.array([[1.0, 2.0], [3.0, 8.0]], np.float32)
    np.testing.assert_array_equal(grow_rows(x, 4, axis=0), [[1, 2], [3, 8], [2, 5], [2, 5]])
    np.testing.assert_array_equal(grow_rows(x, 3, axis=1), [[1, 2, 1.5], [3, 8, 5.5]])
    assert grow_rows(x, 2, axis=0) is x
    # the mean is taken in float32 and cast back: bf16 stays bf16, jax stays jax
    b = grow_rows(x.astype(ml_dtypes.bfloat16), 3, axis=0)
    assert b.dtype == ml_dtypes.bfloat16 and b[2].astype(np.float32).tolist() == [2.0, 5.0]
    j = grow_rows(jnp.asarray(x), 3, axis=1)
    assert isinstance(j, jax.Array) and np.asarray(j).tolist() == [[1, 2, 1.5], [3, 8, 5.5]]


def test_shrinking_is_refused(model_dir):
    cfg = hf.read_hf_config(model_dir)
    params = hf.load_hf_params(model_dir, cfg)
    with pytest.raises(ValueError, match="smaller"):
        extend_vocab(params, cfg, cfg.vocab_size - 1)
    with pytest.raises(ValueError, match="smaller"):
        grow_rows(np.zeros((4, 2)), 3, axis=0)


@pytest.mark.slow
def test_from_hf_add_chatml_tokens(tmp_path, llama2_like_spm):
    from transformers import AutoTokenizer, LlamaForCausalLM

    src = tmp_path / "hf"
    src.mkdir()
    shutil.copyfile(llama2_like_spm, src / "tokenizer.model")
    tok = Tokenizer(str(src / "tokenizer.model"))
    assert not tok.has_chatml
    V = tok.vocab_size
    model = make_hf_model(vocab_size=V)
    model.save_pretrained(src)
    assert convert.main(["from-hf", "--hf", str(src), "--out", str(tmp_path / "ck"), "--add-chatml-tokens"]) == 0
    loaded = easylemur.load(tmp_path / "ck")
    assert loaded.config.vocab_size == V + 2
    assert loaded.tokenizer.has_chatml and (loaded.tokenizer.im_start_id, loaded.tokenizer.im_end_id) == (V, V + 1)
    ids = np.random.default_rng(1).integers(0, V, size=(2, 20))
    ref = hf_logits(model, ids)
    ours = np.asarray(loaded.logits(ids))
    assert np.abs(ours[..., :V] - ref).max() <= 1e-5 * np.abs(ref).max()
    # the source directory is untouched
    assert not Tokenizer(str(src / "tokenizer.model")).has_chatml

    # ... and exported, transformers sees the grown model and the ChatML tokens (the markers make
    # no chat model: ChatML's template and <|im_end|> stop come on request, or after chat tuning)
    assert model_meta.read_meta(tmp_path / "ck").chat_format is None
    assert convert.main(["to-hf", "--checkpoint", str(tmp_path / "ck"), "--out", str(tmp_path / "out"),
                         "--dtype", "float32", "--chat-template", "chatml"]) == 0
    exported = LlamaForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32)
    assert exported.config.vocab_size == V + 2
    np.testing.assert_allclose(hf_logits(exported, ids)[..., :V], ref, atol=1e-5 * np.abs(ref).max())
    at = AutoTokenizer.from_pretrained(tmp_path / "out")
    for text in ("def f(x): return x<|im_end|>\n<|im_start|>user\n", "<|im_start|>user\n hi<|im_end|>\n"):
        assert at(text, add_special_tokens=False)["input_ids"] == loaded.tokenizer.encode(text), text
    assert at.convert_tokens_to_ids("<|im_end|>") == V + 1
    gen = json.loads((tmp_path / "out" / "generation_config.json").read_text())
    assert V + 1 in gen["eos_token_id"]
