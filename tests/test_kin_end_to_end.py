"""HF directories as a lab starts from today, one per family easylemur reads: a random
transformers model beside a tokenizer built here (tests/test_tokenizer_hf.py's builder, or the
shipped sentencepiece model where the family ships one). `convert from-hf` -> train a few steps
-> `convert to-hf` -> transformers loads the export: the same class and config, AutoTokenizer
gives easylemur's ids, the declared stop ids and BOS survive, and the logits equal easylemur's.

- qwen: Qwen2ForCausalLM, tied head, byte-level BPE with Qwen's regex and NFC, no BOS.
- llama3: LlamaForCausalLM with llama3 RoPE scaling, Llama-3's regex and special tokens, BOS
  <|begin_of_text|>, generation_config.json stopping on [<|end_of_text|>, <|eot_id|>].
- mistral: MistralForCausalLM with a sliding window exactly as long as a training row, and a
  sentencepiece tokenizer.model (as Mistral-7B ships).
- deepseek: DeepSeek-Coder's LlamaForCausalLM with linear RoPE scaling (factor 4, theta 1e5), a
  byte-level BPE with individual digits, BOS/EOS as its fullwidth-bar tokens and a
  LlamaTokenizerFast tokenizer_config.json.

The round trip without training (from-hf then to-hf in float32: byte-identical tensors, the
same config as easylemur reads it) is tests/test_model_kin.py's test_family_logits_and_round_trip
for each of these families' model configs; a bfloat16 source's, tests/test_convert.py's (Llama)."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
import transformers

import easylemur
from easylemur.convert import cli as convert
from easylemur.tokenizer import load_tokenizer
from easylemur.tokenizer.spm import DEFAULT_TOKENIZER_PATH
from hf_models import hf_logits
from test_model_kin import LLAMA3, make_kin
from test_tokenizer_hf import LLAMA3_SPECIAL, LLAMA3_SPLIT, QWEN_SPECIAL, QWEN_SPLIT, build_hf_dir, random_strings
from train_run import ROOT, SMALL, env

SEQ_LEN = int(next(o for o in SMALL if o.startswith("data.seq_len=")).split("=")[1])

DS_BOS, DS_EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"
DS_SPECIAL = [DS_BOS, DS_EOS, "<｜fim▁hole｜>", "<｜fim▁begin｜>", "<｜fim▁end｜>", "<|EOT|>"]
# DeepSeek-Coder's pre-tokenizer is a Sequence of Splits (newlines, letter runs with an optional
# leading space, punctuation runs, trailing whitespace, CJK runs) then individual digits; one
# alternation of the same pieces (digits one by one) is close enough to exercise that shape
DS_SPLIT = r"[\r\n]|\s?[A-Za-z\u00b5\u00c0-\u024f]+|\s?[!-/:-~]+|\s+$|[\u4e00-\u9fa5\uac00-\ud7ff]+|\p{N}"


def _token(content: str) -> dict:
    return {"content": content, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False,
            "special": True, "__type": "AddedToken"}


def _set_generation_eos(hf_dir, ids: list[int]) -> None:
    gen = json.loads((hf_dir / "generation_config.json").read_text())
    (hf_dir / "generation_config.json").write_text(json.dumps({**gen, "eos_token_id": ids}))


def qwen(d):
    cfg = {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|endoftext|>",
           "pad_token": "<|endoftext|>", "add_prefix_space": False, "clean_up_tokenization_spaces": False,
           "model_max_length": 32768}
    build_hf_dir(d, QWEN_SPLIT, QWEN_SPECIAL, cfg, nfc=True, vocab_size=600)
    tok = load_tokenizer(d)
    model = make_kin("Qwen2", rope_theta=1e6, vocab_size=tok.vocab_size, eos_token_id=tok.eos_id,
                     tie_word_embeddings=True)
    model.save_pretrained(d)
    stops = [tok.eos_id, 5]  # an id the tokenizer does not single out: only the declaration keeps it
    _set_generation_eos(d, stops)
    return model, stops, QWEN_SPECIAL


def llama3(d):
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
           "eos_token": _token("<|end_of_text|>"), "clean_up_tokenization_spaces": False, "model_max_length": 131072}
    build_hf_dir(d, LLAMA3_SPLIT, LLAMA3_SPECIAL, cfg, bos="<|begin_of_text|>", vocab_size=600)
    tok = load_tokenizer(d)
    model = make_kin("Llama", rope_theta=5e5, rope_scaling=LLAMA3, vocab_size=tok.vocab_size, bos_token_id=tok.bos_id,
                     eos_token_id=tok.eos_id)
    model.save_pretrained(d)
    stops = [tok.eos_id, tok.piece_to_id("<|eot_id|>")]
    _set_generation_eos(d, stops)
    return model, stops, LLAMA3_SPECIAL


def mistral(d):
    d.mkdir(parents=True)
    shutil.copyfile(DEFAULT_TOKENIZER_PATH, d / "tokenizer.model")
    tok = load_tokenizer(d)
    (d / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "LlamaTokenizer", "bos_token": tok.id_to_piece(tok.bos_id),
        "eos_token": tok.id_to_piece(tok.eos_id), "add_bos_token": True, "add_eos_token": False, "legacy": False}))
    # a window exactly as long as a training row: allowed, and it changes nothing
    model = make_kin("Mistral", rope_theta=1e6, sliding_window=SEQ_LEN, vocab_size=tok.vocab_size,
                     bos_token_id=tok.bos_id, eos_token_id=tok.eos_id)
    model.save_pretrained(d)
    return model, [tok.eos_id], []


def deepseek(d):
    cfg = {"tokenizer_class": "LlamaTokenizerFast", "add_bos_token": True, "add_eos_token": False,
           "bos_token": _token(DS_BOS), "eos_token": _token(DS_EOS), "pad_token": None, "unk_token": None,
           "legacy": True, "clean_up_tokenization_spaces": False, "model_max_length": 16384}
    build_hf_dir(d, DS_SPLIT, DS_SPECIAL, cfg, bos=DS_BOS, vocab_size=600)
    tok = load_tokenizer(d)
    model = make_kin("Llama", rope_theta=1e5, rope_scaling=dict(type="linear", factor=4.0), vocab_size=tok.vocab_size,
                     bos_token_id=tok.bos_id, eos_token_id=tok.eos_id)
    model.save_pretrained(d)
    return model, [tok.eos_id], DS_SPECIAL


# the config.json fields each family's export must carry over from the source (rope_theta: in rope_parameters)
SAME_FIELDS = ("model_type", "tie_word_embeddings", "vocab_size", "max_position_embeddings")


def _rope(config) -> dict:
    # the export's legacy rope_scaling names the type under both "rope_type" and "type" (older
    # loaders read the latter); transformers keeps whichever it is given
    return {k: v for k, v in config.rope_parameters.items() if k != "type"}


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("family", [qwen, llama3, mistral, deepseek], ids=lambda f: f.__name__)
def test_family_directory_trains_and_exports_to_what_transformers_reads(tmp_path, family):
    hf_dir = tmp_path / "hf"
    model, stops, special = family(hf_dir)
    tok = load_tokenizer(hf_dir)
    assert convert.main(["from-hf", "--hf", str(hf_dir), "--out", str(tmp_path / "ck")]) == 0

    run, out = tmp_path / "run", tmp_path / "out"
    overrides = [o for o in SMALL if not o.startswith("model.")] + [
        "train.steps=3", "checkpoint.every=3", "optimizer.lr=1e-2", f"init.from={tmp_path / 'ck'}"]
    p = subprocess.run([sys.executable, "-m", "easylemur.train", "--config", "configs/tiny_pretrain.py",
                        f"--config.workdir={run}", *[f"--config.{o}" for o in overrides]],
                       cwd=ROOT, env=env(1), capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    assert convert.main(["to-hf", "--checkpoint", str(run), "--out", str(out), "--dtype", "float32"]) == 0

    # the stop ids the source declared survive training into the export
    gen = json.loads((out / "generation_config.json").read_text())["eos_token_id"]
    assert set(stops) <= set(gen if isinstance(gen, list) else [gen]), (stops, gen)
    # the export's tokenizer is the source's, read by transformers as easylemur reads it
    auto = transformers.AutoTokenizer.from_pretrained(str(out))
    ours = load_tokenizer(out)
    assert type(ours) is type(tok) and ours.sha256 == tok.sha256
    assert (ours.bos_id, ours.eos_id) == (tok.bos_id, tok.eos_id) and auto.eos_token_id == tok.eos_id
    assert auto.bos_token_id == tok.bos_id  # BOS named in the export's tokenizer config (None for Qwen)
    bos = [tok.bos_id] if tok.bos_id is not None else []
    strings = random_strings(200, seed=3) + [f"x{t}y" for t in special]
    if tok.kind == "spm":
        # easylemur keeps the text "<s>", "</s>", "<unk>" as text on purpose, where AutoTokenizer
        # matches it as the token (spm.Tokenizer.encode): compare on the other strings
        strings = [s for s in strings if not any(t in s for t in ("<s>", "</s>", "<unk>"))]
    for s in strings:
        ids = ours.encode(s)
        assert auto(s, add_special_tokens=False)["input_ids"] == ids, s
        assert auto(s)["input_ids"] == bos + ids, s  # BOS exactly where the pipeline frames it
    # the trained weights: transformers' class of the family on the export gives easylemur's logits
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    assert type(reloaded) is type(model)
    for field in SAME_FIELDS:
        assert getattr(reloaded.config, field) == getattr(model.config, field), field
    if model.config.model_type == "mistral":
        assert reloaded.config.sliding_window == model.config.sliding_window == SEQ_LEN
    assert _rope(reloaded.config) == _rope(model.config)
    assert reloaded.config.bos_token_id == model.config.bos_token_id  # None stays None (Qwen)
    if tok.bos_id is not None:
        assert model.config.bos_token_id == tok.bos_id
    ids = np.random.default_rng(0).integers(0, tok.vocab_size, size=(2, 32))
    ref = hf_logits(reloaded, ids)
    trained = np.asarray(easylemur.load(run).logits(ids))
    assert np.abs(trained - ref).max() <= 1e-4 * np.abs(ref).max()
    assert not np.allclose(ref, hf_logits(model, ids))  # training changed the weights
