"""What an HF export says about the model, judged by transformers: a chat template and an
<|im_end|> stop only for a chat-tuned model (checkpoint meta `chat_format`, written by training
runs and from-hf), the CLI overrides, `model_max_length` = the model's context, and a
`tokenizer.json` beside a sentencepiece model that AutoTokenizer loads as a fast tokenizer with
easylemur's ids (docs/design.md, "HF layout")."""

import dataclasses
import json
import shutil
from pathlib import Path

import jax
import pytest

from easylemur.checkpoint import model_meta
from easylemur.config import load_config
from easylemur.convert import cli as convert
from easylemur.convert.to_hf import _check_strings, write_fast_tokenizer
from easylemur.chat.chatml import CHAT_TEMPLATE
from easylemur.model.config import PRESETS
from easylemur.model.llama import init_params
from easylemur.tokenizer.spm import DEFAULT_TOKENIZER_PATH, Tokenizer
from hf_models import make_hf_model
from test_tokenizer_hf import random_strings
from train_run import ROOT, run

# a tiny model on the shipped (ChatML) tokenizer; max_position_embeddings differs from every default
CFG = dataclasses.replace(PRESETS["tiny"], hidden_size=32, intermediate_size=64, num_layers=1, num_heads=2,
                          num_kv_heads=1, max_position_embeddings=384, dtype="float32")
TOK = Tokenizer.load(DEFAULT_TOKENIZER_PATH)
OWN_TEMPLATE = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}"


def _checkpoint(path: Path, **meta) -> Path:
    params = init_params(CFG, jax.random.key(0))
    model_meta.save_params(path, CFG, params, DEFAULT_TOKENIZER_PATH, extra_meta=meta)
    return path


def _export(ckpt: Path, out: Path, *flags: str) -> tuple[dict, list]:
    assert convert.main(["to-hf", "--checkpoint", str(ckpt), "--out", str(out), "--dtype", "float32", *flags]) == 0
    gen = json.loads((out / "generation_config.json").read_text())["eos_token_id"]
    return json.loads((out / "tokenizer_config.json").read_text()), gen if isinstance(gen, list) else [gen]


@pytest.fixture(scope="module")
def pretrain_ckpt(tmp_path_factory) -> Path:
    """A checkpoint whose meta is what a pre-training run (text sources only) records."""
    cfg = load_config(ROOT / "configs" / "tiny_pretrain.py").to_dict()
    fmt = model_meta.run_chat_format(cfg)
    assert fmt is None
    return _checkpoint(tmp_path_factory.mktemp("pretrain"), chat_format=fmt)


def test_run_chat_format_rule():
    chat = load_config(ROOT / "configs" / "tiny_chat.py").to_dict()
    text = load_config(ROOT / "configs" / "tiny_pretrain.py").to_dict()
    model = load_config(ROOT / "configs" / "qwen2.5_coder_7b_chat.py").to_dict()
    assert model_meta.run_chat_format(chat) == "chatml"
    assert model_meta.run_chat_format(model) == "model"
    assert model_meta.run_chat_format(text) is None
    # a text-only run keeps init.from's (or the resumed checkpoint's) format; a chat run sets its own
    assert model_meta.run_chat_format(text, "model") == "model"
    assert model_meta.run_chat_format(chat, "model") == "chatml"
    mixed = {"data": {"sources": {"a": {"format": "chat", "chat_format": "model"},
                                  "b": {"format": "chat", "chat_format": "chatml"}}}}
    assert model_meta.run_chat_format(mixed) == "chatml"


@pytest.mark.slow
def test_base_model_export_is_no_chat_model(pretrain_ckpt, tmp_path, capsys):
    from transformers import AutoTokenizer

    cfg, eos = _export(pretrain_ckpt, tmp_path / "out")
    assert "chat_template" not in cfg and not (tmp_path / "out" / "chat_template.jinja").exists()
    assert TOK.im_end_id not in eos and TOK.eos_id in eos
    assert "not chat-tuned" in capsys.readouterr().err
    # the model's context, not 2^30
    assert cfg["model_max_length"] == CFG.max_position_embeddings == 384
    auto = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert auto.model_max_length == 384 and auto.chat_template is None
    # tokenizer.json beside tokenizer.model: transformers loads the fast tokenizer, with easylemur's ids
    assert (tmp_path / "out" / "tokenizer.json").is_file() and auto.is_fast
    texts = random_strings(150, seed=5) + ["<|im_start|>user\nhi<|im_end|>\n", "x<|im_end|>y", " <|im_start|>",
                                           "<p><s>old</s></p>", "print('</s>')", "<unk><pad>"]
    # the text of BOS/EOS/UNK/pad and the ChatML markers: the same ids (spm.Tokenizer.encode)
    assert any("<|im_end|>" in t for t in texts) and sum(TOK.has_literal_specials(t) for t in texts) >= 20
    for t in texts:
        assert auto(t, add_special_tokens=False)["input_ids"] == TOK.encode(t), t
        assert auto(t)["input_ids"] == [TOK.bos_id] + TOK.encode(t), t


def test_chat_template_flag_overrides_a_base_model(pretrain_ckpt, tmp_path):
    cfg, eos = _export(pretrain_ckpt, tmp_path / "out", "--chat-template")  # no template of its own: ChatML's
    assert cfg["chat_template"] == CHAT_TEMPLATE and TOK.im_end_id in eos
    with pytest.raises(SystemExit):  # argparse: the two flags exclude each other
        convert.main(["to-hf", "--checkpoint", str(pretrain_ckpt), "--out", str(tmp_path / "x"), "--chat-template",
                      "--no-chat-template"])


def test_legacy_checkpoint_keeps_the_old_rule(tmp_path, capsys):
    """A checkpoint from before meta chat_format: ChatML's template and stop, as before."""
    ckpt = _checkpoint(tmp_path / "ck")
    assert not model_meta.read_meta(ckpt).has_chat_format
    cfg, eos = _export(ckpt, tmp_path / "out")
    assert cfg["chat_template"] == CHAT_TEMPLATE and TOK.im_end_id in eos
    assert "predates meta chat_format" in capsys.readouterr().err


@pytest.mark.slow
def test_chat_run_exports_chatml_and_no_chat_template_drops_it(tmp_path):
    """One tiny chat fine-tuning run (fresh, 2 steps): its checkpoints record chat_format chatml."""
    run(tmp_path / "run", ["init.from=", "train.steps=2", "checkpoint.every=2", "data.seq_len=128",
                           "model.max_position_embeddings=512", "eval.every=0"], config="configs/tiny_chat.py")
    saved = model_meta.read_meta(tmp_path / "run")
    assert saved.meta["chat_format"] == "chatml"
    cfg, eos = _export(tmp_path / "run", tmp_path / "out")
    assert cfg["chat_template"] == CHAT_TEMPLATE and TOK.im_end_id in eos
    assert cfg["model_max_length"] == saved.model_config.max_position_embeddings == 512
    cfg, eos = _export(tmp_path / "run", tmp_path / "plain", "--no-chat-template")
    assert "chat_template" not in cfg and TOK.im_end_id not in eos


@pytest.fixture(scope="module")
def hf_dir(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("hf")
    make_hf_model(vocab_size=TOK.vocab_size, num_hidden_layers=1, hidden_size=32, intermediate_size=64,
                  num_attention_heads=2, num_key_value_heads=1).save_pretrained(d)
    shutil.copyfile(DEFAULT_TOKENIZER_PATH, d / "tokenizer.model")
    return d


def test_from_hf_chat_format_follows_the_source_template(hf_dir, tmp_path):
    # no template in the source: not chat-tuned, no template and no <|im_end|> stop written
    assert convert.main(["from-hf", "--hf", str(hf_dir), "--out", str(tmp_path / "base")]) == 0
    base = model_meta.read_meta(tmp_path / "base")
    assert base.has_chat_format and base.chat_format is None and TOK.im_end_id not in base.stop_ids
    cfg, eos = _export(tmp_path / "base", tmp_path / "base_hf")
    assert "chat_template" not in cfg and TOK.im_end_id not in eos

    # the source's own template: chat_format model, and the export keeps that template
    chat = tmp_path / "chat_src"
    shutil.copytree(hf_dir, chat)
    (chat / "tokenizer_config.json").write_text(json.dumps({"chat_template": OWN_TEMPLATE}))
    assert convert.main(["from-hf", "--hf", str(chat), "--out", str(tmp_path / "chat")]) == 0
    assert model_meta.read_meta(tmp_path / "chat").chat_format == "model"
    cfg, eos = _export(tmp_path / "chat", tmp_path / "chat_hf")
    assert cfg["chat_template"] == OWN_TEMPLATE and TOK.im_end_id not in eos  # the template never writes it
    cfg, eos = _export(tmp_path / "chat", tmp_path / "chat_chatml", "--chat-template", "chatml")
    assert cfg["chat_template"] == CHAT_TEMPLATE and TOK.im_end_id in eos
    cfg, _ = _export(tmp_path / "chat", tmp_path / "chat_auto", "--chat-template")  # bare: its own first
    assert cfg["chat_template"] == OWN_TEMPLATE


def test_chat_template_model_without_one_is_a_one_line_error(pretrain_ckpt, tmp_path, capsys):
    assert convert.main(["to-hf", "--checkpoint", str(pretrain_ckpt), "--out", str(tmp_path / "o"),
                         "--chat-template", "model"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: --chat-template model:") and "no chat template of its own" in err[-1]
    assert not (tmp_path / "o").exists()


def test_fast_tokenizer_skipped_without_transformers(pretrain_ckpt, tmp_path, monkeypatch, capsys):
    import builtins

    real = builtins.__import__

    def no_transformers(name, *a, **k):
        if name == "transformers" or name.startswith("transformers."):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_transformers)
    _export(pretrain_ckpt, tmp_path / "out")
    assert not (tmp_path / "out" / "tokenizer.json").exists() and (tmp_path / "out" / "tokenizer.model").is_file()
    assert "transformers is not installed" in capsys.readouterr().err


def test_fast_tokenizer_that_disagrees_is_not_written(pretrain_ckpt, tmp_path, monkeypatch, capsys):
    """to-hf's check on the old pair: easylemur reading "</s>" as text (sentencepiece's own rule, what
    encode did before), the export matching it as EOS. The check's strings hold that text, so it fails."""
    monkeypatch.setattr(Tokenizer, "encode", lambda self, text, continuation=False: self.sp.encode(text))
    _export(pretrain_ckpt, tmp_path / "out")
    assert not (tmp_path / "out" / "tokenizer.json").exists()
    err = capsys.readouterr().err
    assert "warning: no tokenizer.json written" in err and "other ids than easylemur's tokenizer for" in err


def test_check_fails_on_a_tokenizer_config_that_reads_special_text_as_text(tmp_path):
    """The check against a deliberately wrong tokenizer_config.json: split_special_tokens makes
    AutoTokenizer spell out "</s>" and the ChatML markers, which easylemur matches."""
    TOK.save_hf(tmp_path)
    assert write_fast_tokenizer(tmp_path, TOK, print)
    cfg = json.loads((tmp_path / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**cfg, "split_special_tokens": True}))
    logged = []
    assert not write_fast_tokenizer(tmp_path, TOK, logged.append)
    assert not (tmp_path / "tokenizer.json").exists() and logged[0].startswith("warning: no tokenizer.json written")
    checked = _check_strings(TOK)
    for t in ("<s>", "</s>", "<unk>", "<pad>", "<|im_start|>", "<|im_end|>"):
        assert t in checked and any(t in c and c != t for c in checked), t  # alone and inside text


@pytest.mark.slow
def test_dummy_prefix_tokenizer_gets_a_fast_tokenizer_json(llama2_like_spm, tmp_path):
    """Llama-2's kind of sentencepiece model (dummy prefix, byte fallback, no ChatML)."""
    from transformers import AutoTokenizer

    tok = Tokenizer(str(llama2_like_spm))
    cfg = dataclasses.replace(CFG, vocab_size=tok.vocab_size)
    model_meta.save_params(tmp_path / "ck", cfg, init_params(cfg, jax.random.key(0)), llama2_like_spm,
                           extra_meta={"chat_format": None})
    tcfg, eos = _export(tmp_path / "ck", tmp_path / "out")
    assert "chat_template" not in tcfg and eos == [tok.eos_id] and tcfg["model_max_length"] == 384
    auto = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert (tmp_path / "out" / "tokenizer.json").is_file() and auto.is_fast
    texts = random_strings(150, seed=7) + ["</s> lead", "<s>x", "<|im_start|>"]  # no ChatML pieces: that is text
    for t in texts + [" lead", "x", "▁y"]:
        assert auto(t, add_special_tokens=False)["input_ids"] == tok.encode(t), t
