"""A Qwen2.5-style HF directory, as a lab starts from today: a Qwen2ForCausalLM (random weights)
with a locally built byte-level BPE tokenizer.json and no BOS. `convert from-hf` -> train a few
steps -> `convert to-hf` -> transformers loads the export: AutoTokenizer gives easylemur's ids,
and the logits equal easylemur's."""

import json
import subprocess
import sys

import numpy as np
import torch
import transformers

import easylemur
from easylemur.convert import cli as convert
from easylemur.tokenizer import load_tokenizer
from hf_models import hf_logits
from test_model_kin import make_kin
from test_tokenizer_hf import QWEN_SPECIAL, QWEN_SPLIT, build_hf_dir, random_strings
from train_run import ROOT, SMALL, env


def test_qwen_style_directory_trains_and_exports_to_what_transformers_reads(tmp_path):
    cfg = {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|endoftext|>",
           "pad_token": "<|endoftext|>", "add_prefix_space": False, "clean_up_tokenization_spaces": False,
           "model_max_length": 32768}
    hf_dir = build_hf_dir(tmp_path / "hf", QWEN_SPLIT, QWEN_SPECIAL, cfg, nfc=True, vocab_size=600)
    tok = load_tokenizer(hf_dir)
    model = make_kin("Qwen2", rope_theta=1e6, vocab_size=tok.vocab_size, eos_token_id=tok.eos_id,
                     tie_word_embeddings=True)
    model.save_pretrained(hf_dir)
    gen = json.loads((hf_dir / "generation_config.json").read_text())
    (hf_dir / "generation_config.json").write_text(json.dumps({**gen, "eos_token_id": [tok.eos_id, 5]}))
    assert convert.main(["from-hf", "--hf", str(hf_dir), "--out", str(tmp_path / "ck")]) == 0

    run = tmp_path / "run"
    overrides = [o for o in SMALL if not o.startswith("model.")] + [
        "train.steps=3", "checkpoint.every=3", "optimizer.lr=1e-2", f"init.from={tmp_path / 'ck'}"]
    p = subprocess.run([sys.executable, "-m", "easylemur.train", "--config", "configs/tiny_pretrain.py",
                        f"--config.workdir={run}", *[f"--config.{o}" for o in overrides]],
                       cwd=ROOT, env=env(1), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert convert.main(["to-hf", "--checkpoint", str(run), "--out", str(tmp_path / "out"), "--dtype", "float32"]) == 0

    # the stop ids the source declared survive training into the export
    assert 5 in json.loads((tmp_path / "out" / "generation_config.json").read_text())["eos_token_id"]
    # the export's tokenizer is the source's, read by transformers as easylemur reads it
    auto = transformers.AutoTokenizer.from_pretrained(str(tmp_path / "out"))
    ours = load_tokenizer(tmp_path / "out")
    assert ours.sha256 == tok.sha256 and ours.bos_id is None
    for s in random_strings(200, seed=3):
        assert auto(s, add_special_tokens=False)["input_ids"] == ours.encode(s), s
    # the trained weights: transformers' Qwen2 on the export gives easylemur's logits
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32)
    assert type(reloaded) is type(model) and reloaded.config.tie_word_embeddings
    ids = np.random.default_rng(0).integers(0, tok.vocab_size, size=(2, 32))
    ref = hf_logits(reloaded, ids)
    trained = np.asarray(easylemur.load(run).logits(ids))
    assert np.abs(trained - ref).max() <= 1e-4 * np.abs(ref).max()
    assert not np.allclose(ref, hf_logits(model, ids))  # training changed the weights
