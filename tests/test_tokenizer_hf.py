"""The HF `tokenizers` kind (tokenizer.json): tokenizers built here from the sample corpus, a
Llama-3-style one (its pre-tokenizer regex and special tokens, BOS) and a Qwen-style one
(ChatML markers native, NFC, no BOS); the same ids and text as transformers' AutoTokenizer on
many random strings; `load_tokenizer` picks the kind; pipeline and token store end to end."""

import hashlib
import json
import pickle
import random
import shutil
import unicodedata
from pathlib import Path

import numpy as np
import pytest
import tokenizers
import transformers
from ml_collections import ConfigDict

from easylemur.config import validate_sources
from easylemur.data import build
from easylemur.chat.chatml import render_chat
from easylemur.data.files import JSONL_SUFFIXES, resolve_files
from easylemur.data.jsonl import JsonlSource, iter_jsonl_texts
from easylemur.data.pipeline import make_pipeline
from easylemur.data.store import StoreSource, read_manifest
from easylemur.data.tokenize import Tokenize
from easylemur.convert.source import source_tokenizer
from easylemur.tokenizer import load_tokenizer, tokenizer_kind
from easylemur.tokenizer.hf import HFTokenizer
from easylemur.tokenizer.spm import DEFAULT_TOKENIZER_PATH, Tokenizer, TokenizerError


ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "data" / "samples"

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]
QWEN_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def build_hf_dir(out: Path, split: str, special: list[str], config: dict, nfc: bool = False, bos: str | None = None,
                 vocab_size: int = 1500) -> Path:
    """A byte-level BPE trained on the sample corpus, saved as tokenizer.json + tokenizer_config.json."""
    from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors, trainers

    tok = tokenizers.Tokenizer(models.BPE(ignore_merges=True, byte_fallback=False))
    if nfc:
        tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(split), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    texts = list(iter_jsonl_texts(SAMPLES / "code", "text")) + list(iter_jsonl_texts(SAMPLES / "text", "text"))
    tok.train_from_iterator(texts[::3], trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                                            initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in special])
    post = [processors.ByteLevel(trim_offsets=False)]
    if bos:  # as Llama-3's: the post-processor adds BOS when add_special_tokens=True
        post.append(processors.TemplateProcessing(single=f"{bos} $A", pair=f"{bos} $A {bos} $B",
                                                  special_tokens=[(bos, tok.token_to_id(bos))]))
    tok.post_processor = processors.Sequence(post)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(config, indent=2))
    return out


@pytest.fixture(scope="module")
def llama3_dir(tmp_path_factory):
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<|begin_of_text|>",
           "eos_token": {"content": "<|end_of_text|>", "lstrip": False, "normalized": False, "rstrip": False,
                         "single_word": False, "special": True, "__type": "AddedToken"},
           "clean_up_tokenization_spaces": False, "model_max_length": 131072}
    return build_hf_dir(tmp_path_factory.mktemp("llama3"), LLAMA3_SPLIT, LLAMA3_SPECIAL, cfg, bos="<|begin_of_text|>")


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory):
    cfg = {"tokenizer_class": "Qwen2Tokenizer", "bos_token": None, "eos_token": "<|endoftext|>",
           "pad_token": "<|endoftext|>", "add_prefix_space": False, "errors": "replace", "split_special_tokens": False,
           "clean_up_tokenization_spaces": False, "model_max_length": 32768}
    return build_hf_dir(tmp_path_factory.mktemp("qwen"), QWEN_SPLIT, QWEN_SPECIAL, cfg, nfc=True)


def _auto(d):
    return transformers.AutoTokenizer.from_pretrained(str(d))


WS = [" ", "  ", "    ", "\t", "\n", "\n\n", "\r\n", "\r", "\u00a0", "\u3000", "\u2009", "\x0b", "\x0c", "\u2028"]
EMOJI = ["🎉", "👍🏽", "👨‍👩‍👧‍👦", "🇯🇵", "❤️", "🧑‍💻", "\U0001f600"]
UNI_RANGES = [(0x20, 0x7e), (0x00, 0x1f), (0xa0, 0x24f), (0x300, 0x36f), (0x370, 0x3ff), (0x400, 0x4ff), (0x590, 0x6ff),
              (0x900, 0x97f), (0x3040, 0x30ff), (0x4e00, 0x4fff), (0xac00, 0xad00), (0xfe00, 0xfe0f), (0xff00, 0xffef),
              (0x1f300, 0x1f64f), (0x10000, 0x1007f), (0xe000, 0xe0ff)]
MARKERS = LLAMA3_SPECIAL + QWEN_SPECIAL + ["<|im_", "|>", "<s>", "</s>", "<|", "<|endoftext|", "<unk>"]


def random_strings(n: int, seed: int = 0) -> list[str]:
    """Random unicode, code cut from the sample corpus, whitespace runs, emoji, special-token text."""
    rnd = random.Random(seed)
    code = list(iter_jsonl_texts(SAMPLES / "code", "text"))

    def uni(k):
        out = []
        for _ in range(k):
            lo, hi = rnd.choice(UNI_RANGES)
            out.append(chr(rnd.randint(lo, hi)))
        return "".join(out)

    def snippet():
        doc = rnd.choice(code)
        i = rnd.randrange(len(doc))
        return doc[i:i + rnd.randint(1, 300)]

    def ws():
        return "".join(rnd.choice(WS) for _ in range(rnd.randint(1, 12)))

    parts = [lambda: uni(rnd.randint(1, 40)), snippet, ws, lambda: "".join(rnd.choices(EMOJI, k=rnd.randint(1, 4))),
             lambda: rnd.choice(MARKERS), lambda: rnd.choice(["123", "4567890", "3.14159", "0x1F", "'s", "'LL", "n't"])]
    out = []
    for i in range(n):
        k = 1 if i % 4 == 0 else rnd.randint(2, 6)
        out.append("".join(rnd.choice(parts)() for _ in range(k)))
    return out + ["", " ", "\n", "<|im_start|>", " <|endoftext|> ", "e\u0301\u212b", "ﬁ"]


STRINGS = random_strings(1100)


@pytest.mark.slow
@pytest.mark.parametrize("which", ["llama3", "qwen"])
def test_ids_and_text_equal_autotokenizer(which, llama3_dir, qwen_dir):
    d = llama3_dir if which == "llama3" else qwen_dir
    tok, auto = load_tokenizer(d), _auto(d)
    assert isinstance(tok, HFTokenizer)
    bos = [tok.bos_id] if tok.bos_id is not None else []
    ours = tok.encode_batch(STRINGS)
    assert len(STRINGS) >= 1000
    for s, ids in zip(STRINGS, ours):
        assert ids == auto(s, add_special_tokens=False)["input_ids"], s
        assert bos + ids == auto(s)["input_ids"], s  # with special tokens: BOS exactly as the pipeline frames
        assert tok.encode(s) == ids and tok.encode(s, continuation=True) == ids
        assert tok.encode_array(s).dtype == np.int32 and tok.encode_array(s).tolist() == ids
        text = tok.decode(ids)
        assert text == auto.decode(ids), s
        # lossless, up to the tokenizer's own normalizer (Qwen's NFC)
        assert text == (unicodedata.normalize("NFC", s) if which == "qwen" else s)
    # special-token text is matched whole, as AutoTokenizer does
    for t in (LLAMA3_SPECIAL if which == "llama3" else QWEN_SPECIAL):
        assert tok.encode(f"x{t}y")[1:2] == [tok.piece_to_id(t)]


def test_special_ids_from_tokenizer_config(llama3_dir, qwen_dir):
    l3, qw = load_tokenizer(llama3_dir), load_tokenizer(qwen_dir)
    assert (l3.bos_id, l3.eos_id, l3.pad_id) == (l3.piece_to_id("<|begin_of_text|>"), l3.piece_to_id("<|end_of_text|>"),
                                                 l3.piece_to_id("<|end_of_text|>"))
    assert not l3.has_chatml and l3.im_start_id is None
    with pytest.raises(TokenizerError, match="im_start"):
        l3.require_chatml()
    assert qw.bos_id is None and qw.eos_id == qw.pad_id == qw.piece_to_id("<|endoftext|>")
    assert qw.has_chatml and (qw.im_start_id, qw.im_end_id) == (qw.piece_to_id("<|im_start|>"), qw.piece_to_id("<|im_end|>"))
    assert qw.vocab_size == len(_auto(qwen_dir)) and l3.vocab_size == len(_auto(llama3_dir))
    assert l3.id_to_piece(l3.encode(" hello")[0]).startswith("Ġ") and l3.piece_to_id("no such piece") is None


def test_sha256_pickling_and_kinds(llama3_dir, qwen_dir, tmp_path):
    tok = load_tokenizer(qwen_dir)
    assert tok.sha256 == hashlib.sha256((qwen_dir / "tokenizer.json").read_bytes()).hexdigest()
    back = pickle.loads(pickle.dumps(tok))
    assert (back.sha256, back.bos_id, back.eos_id, back.im_end_id, back.model_path) == (
        tok.sha256, tok.bos_id, tok.eos_id, tok.im_end_id, tok.model_path)
    assert back.encode_batch(STRINGS[:50]) == tok.encode_batch(STRINGS[:50])
    assert load_tokenizer(llama3_dir).sha256 != tok.sha256
    # the loader picks the kind by what the path holds
    assert tokenizer_kind(qwen_dir) == tokenizer_kind(qwen_dir / "tokenizer.json") == "hf"
    assert isinstance(load_tokenizer(qwen_dir / "tokenizer.json"), HFTokenizer)
    assert tokenizer_kind(DEFAULT_TOKENIZER_PATH) == "spm" and type(load_tokenizer(None)) is Tokenizer
    assert type(load_tokenizer(DEFAULT_TOKENIZER_PATH)) is Tokenizer
    both = tmp_path / "both"
    shutil.copytree(qwen_dir, both)
    shutil.copyfile(DEFAULT_TOKENIZER_PATH, both / "tokenizer.model")
    assert tokenizer_kind(both) == "spm" and type(load_tokenizer(both)) is Tokenizer  # sentencepiece as before
    (tmp_path / "empty").mkdir()
    for bad in (tmp_path / "empty", tmp_path / "missing.model", tmp_path / "missing.json"):
        with pytest.raises(TokenizerError):
            load_tokenizer(bad)
    no_eos = shutil.copytree(qwen_dir, tmp_path / "no_eos")
    (no_eos / "tokenizer_config.json").write_text("{}")
    with pytest.raises(TokenizerError, match="eos_token"):
        load_tokenizer(no_eos)


def test_source_tokenizer_takes_either_kind(qwen_dir, tmp_path):
    cfg = ConfigDict({"data": {"tokenizer": str(qwen_dir)}, "init": {"from": ""}})
    assert isinstance(source_tokenizer(cfg, None), HFTokenizer)
    cfg = ConfigDict({"data": {"tokenizer": ""}, "init": {"from": str(qwen_dir)}})
    assert isinstance(source_tokenizer(cfg, str(qwen_dir)), HFTokenizer)  # an HF directory with tokenizer.json only
    assert type(source_tokenizer(ConfigDict({"data": {"tokenizer": ""}, "init": {"from": ""}}), None)) is Tokenizer


def test_save_hf_and_chatml_without_bos(qwen_dir, llama3_dir, tmp_path):
    tok = load_tokenizer(qwen_dir)
    tok.save_hf(tmp_path / "out")
    auto = _auto(tmp_path / "out")
    assert (tmp_path / "out" / "tokenizer.json").read_bytes() == (qwen_dir / "tokenizer.json").read_bytes()
    assert load_tokenizer(tmp_path / "out").sha256 == tok.sha256
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Print hi <|im_end|> in Tcl"},
            {"role": "assistant", "content": "puts hi\n"}]
    ids, mask = render_chat(msgs, tok)
    assert ids[0] == tok.im_start_id and mask[0] == 0  # no BOS: the conversation starts at <|im_start|>
    assert ids == list(auto.apply_chat_template(msgs, tokenize=True, return_dict=True)["input_ids"])
    l3 = load_tokenizer(llama3_dir)
    l3.save_hf(tmp_path / "l3", chat_template="{{ bos_token }}{{ messages[0]['content'] }}")
    assert json.loads((tmp_path / "l3" / "tokenizer_config.json").read_text())["chat_template"].startswith("{{ bos")
    assert _auto(tmp_path / "l3")("a b", add_special_tokens=False)["input_ids"] == l3.encode("a b")


@pytest.mark.parametrize("split", [False, True])
def test_export_reads_special_token_text_as_easylemur(qwen_dir, tmp_path, split):
    """Special-token text in a document ("<|endoftext|>", "<|im_start|>", "</s>"): AutoTokenizer on
    the export gives easylemur's ids, whichever the tokenizer's rule: its added tokens matched
    (the default), or special ones read as text (tokenizer_config.json's split_special_tokens)."""
    src = shutil.copytree(qwen_dir, tmp_path / "src")
    cfg = json.loads((src / "tokenizer_config.json").read_text())
    (src / "tokenizer_config.json").write_text(json.dumps({**cfg, "split_special_tokens": split}))
    tok = load_tokenizer(src)
    tok.save_hf(tmp_path / "out")
    auto = _auto(tmp_path / "out")
    texts = [t for t in STRINGS if "<|" in t or "</s>" in t] + ["a<|endoftext|>b", "x = '<|im_end|>'", "<|im_start|>"]
    assert len(texts) > 150
    assert tok.encode_batch(texts) == auto(texts, add_special_tokens=False)["input_ids"]
    eot = tok.piece_to_id("<|endoftext|>")
    assert (eot in tok.encode("a<|endoftext|>b")) is not split and tok.has_chatml is not split


def _expected_docs(path: Path, auto, tok) -> list[list[int]]:
    """The documents of `path` framed as the pipeline frames them, encoded by AutoTokenizer."""
    bos = [tok.bos_id] if tok.bos_id is not None else []
    return [bos + auto(t, add_special_tokens=False)["input_ids"] + [tok.eos_id]
            for t in iter_jsonl_texts(path, "text") if t.strip()]


@pytest.mark.parametrize("which", ["llama3", "qwen"])
def test_pipeline_batches_equal_autotokenizer_documents(which, llama3_dir, qwen_dir):
    d = llama3_dir if which == "llama3" else qwen_dir
    tok, auto = load_tokenizer(d), _auto(d)
    cfg = ConfigDict({"seq_len": 256, "strict": False, "prefetch": 2,
                      "sources": ConfigDict({"text": {"path": str(SAMPLES / "text")}}), "eval_sources": ConfigDict()})
    validate_sources(cfg.sources, "data.sources")
    it = make_pipeline(cfg, tok, global_batch_size=8, seed=0, shuffle=False, repeat=False)
    ids, mask = [], []
    for _ in range(12):
        b = next(it)
        seg = b["segment_ids"]
        assert (seg > 0).all()  # split text documents fill every row
        ids += b["input_ids"].ravel().tolist()
        mask += b["loss_mask"].ravel().tolist()
    want = np.concatenate(_expected_docs(SAMPLES / "text", auto, tok)).tolist()
    assert len(ids) == 12 * 8 * 256 < len(want)
    assert ids == want[:len(ids)]
    # each document's first token (BOS, or without one its first text token) is never trained
    at = np.cumsum([0] + [len(x) for x in _expected_docs(SAMPLES / "text", auto, tok)])
    assert all(mask[i] == 0 for i in at if i < len(mask))
    assert sum(mask) > 0.9 * len(mask)


def test_token_store_with_hf_tokenizer(qwen_dir, tmp_path):
    tok = load_tokenizer(qwen_dir)
    srcs = ConfigDict({"text": {"path": str(SAMPLES / "text"), "format": "text"}})
    validate_sources(srcs, "data.sources")
    build.tokenize(srcs, tok, str(tmp_path / "store"), seq_len=128, strict=False, log=lambda m: None)
    man = build.finalize(srcs, tok, str(tmp_path / "store"), seq_len=128)
    assert man["tokenizer"]["sha256"] == tok.sha256 and man["tokenizer"]["bos_id"] is None
    src = StoreSource(str(tmp_path / "store"), "text", read_manifest(str(tmp_path / "store")))
    t = Tokenize("text", "", tok, 128, False, "x")
    want = []
    for f in resolve_files(str(SAMPLES / "text"), JSONL_SUFFIXES):
        js = JsonlSource([f])
        want += [d for d in (t.map(js[i]) for i in range(len(js))) if isinstance(d, dict)]
    got = [src[i][1] for i in range(len(src))]
    assert len(got) == len(want) > 10
    assert all(g["ids"].tolist() == w["ids"].tolist() and g["mask"].tolist() == w["mask"].tolist()
               for g, w in zip(got, want))
    assert want[0]["ids"][-1] == tok.eos_id and want[0]["mask"][0] == 0 and want[0]["ids"][0] != tok.eos_id


def test_extend_adds_chatml_after_the_last_id(llama3_dir, tmp_path, capsys):
    from easylemur.tokenizer.cli import main
    from easylemur.tokenizer.hf import extend_hf

    old = load_tokenizer(llama3_dir)
    report = extend_hf(llama3_dir, tmp_path / "ext")
    new = load_tokenizer(tmp_path / "ext")
    assert report["added"] == {"<|im_start|>": old.vocab_size, "<|im_end|>": old.vocab_size + 1}
    assert new.vocab_size == report["vocab_size"] == old.vocab_size + 2 and new.has_chatml
    assert (new.bos_id, new.eos_id) == (old.bos_id, old.eos_id)
    auto = _auto(tmp_path / "ext")
    for s in STRINGS[:300] + ["<|im_start|>user\nhi<|im_end|>\n"]:
        assert new.encode(s) == auto(s, add_special_tokens=False)["input_ids"], s
        if "<|im_" not in s:
            assert new.encode(s) == old.encode(s)  # old ids keep their meaning
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]
    assert render_chat(msgs, new)[0] == list(auto.apply_chat_template(msgs, tokenize=True, return_dict=True)["input_ids"])
    assert extend_hf(tmp_path / "ext", tmp_path / "ext2")["added"] == {}
    # the CLI takes either kind
    assert main(["extend", "--model", str(llama3_dir), "--out", str(tmp_path / "ext3")]) == 0
    assert json.loads(capsys.readouterr().out)["im_end_id"] == old.vocab_size + 1
    assert main(["info", "--model", str(tmp_path / "ext3")]) == 0
    assert json.loads(capsys.readouterr().out)["bos_id"] == old.bos_id


def test_checkpoint_meta_embeds_tokenizer_json_with_its_config(qwen_dir):
    from easylemur.checkpoint import model_meta
    from easylemur.model.config import PRESETS

    tok = load_tokenizer(qwen_dir)
    meta = model_meta.make_meta(3, next(iter(PRESETS.values())), tok.model_path)
    assert meta["tokenizer_sha256"] == tok.sha256
    assert meta["tokenizer_config"] == json.loads((qwen_dir / "tokenizer_config.json").read_text())
    path = model_meta.tokenizer_from_json(meta["tokenizer"], meta["tokenizer_sha256"], "ckpt", meta["tokenizer_config"])
    back = load_tokenizer(path)  # what a resume, init.from a checkpoint and generate load
    assert isinstance(back, HFTokenizer) and back.sha256 == tok.sha256
    assert (back.bos_id, back.eos_id, back.im_end_id) == (tok.bos_id, tok.eos_id, tok.im_end_id)
    # re-embedded from there (the next checkpoint of a resumed run): the same meta
    again = model_meta.make_meta(4, next(iter(PRESETS.values())), back.model_path)
    assert (again["tokenizer"], again["tokenizer_config"]) == (meta["tokenizer"], meta["tokenizer_config"])
    # a sentencepiece model's meta is as before: no tokenizer_config
    assert "tokenizer_config" not in model_meta.make_meta(0, next(iter(PRESETS.values())), DEFAULT_TOKENIZER_PATH)


def test_continuation_drops_a_prefix_space(qwen_dir, tmp_path):
    """A tokenizer.json that adds a prefix space (ByteLevel add_prefix_space) adds it at the start
    of an input, as AutoTokenizer does, and never with continuation=True (ChatML rendering)."""
    spec = json.loads((qwen_dir / "tokenizer.json").read_text())
    for p in spec["pre_tokenizer"]["pretokenizers"]:
        if p["type"] == "ByteLevel":
            p["add_prefix_space"] = True
    d = tmp_path / "prefix"
    d.mkdir()
    (d / "tokenizer.json").write_text(json.dumps(spec))
    cfg = {**json.loads((qwen_dir / "tokenizer_config.json").read_text()), "tokenizer_class": "PreTrainedTokenizerFast"}
    del cfg["add_prefix_space"]
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    tok, plain, auto = load_tokenizer(d), load_tokenizer(qwen_dir), _auto(d)
    for s in ["hi there", "def f():\n    return 1", "x"]:
        assert tok.encode(s) == auto(s, add_special_tokens=False)["input_ids"] != plain.encode(s)
        assert tok.decode(tok.encode(s)) == auto.decode(tok.encode(s))
        assert tok.encode(s, continuation=True) == plain.encode(s)


def test_chatml_conversations_equal_apply_chat_template(qwen_dir, tmp_path):
    """render_chat on the Qwen-style tokenizer = transformers' apply_chat_template over random
    conversations, contents starting with newlines and spaces included (the pre-tokenizer merges
    them with the role's "\\n"); the mask trains the assistant content + <|im_end|>\\n (and the
    role's "\\n" when one token holds it and the content's start)."""
    tok = load_tokenizer(qwen_dir)
    tok.save_hf(tmp_path / "out")
    auto = _auto(tmp_path / "out")
    rnd = random.Random(1)
    plain = [s for s in STRINGS if "<|" not in s]
    for i in range(60):
        msgs = [{"role": r, "content": rnd.choice(plain) if i % 3 else "\n" + rnd.choice(plain)}
                for r in (["system"] if i % 2 else []) + ["user", "assistant", "user", "assistant"]]
        ids, mask = render_chat(msgs, tok)
        assert ids == list(auto.apply_chat_template(msgs, tokenize=True, return_dict=True)["input_ids"]), msgs
        runs, cur = [], []  # the trained runs: one per assistant turn
        for t, m in zip(ids + [0], mask + [0]):
            if m:
                cur.append(t)
            elif cur:
                runs, cur = runs + [tok.decode(cur)], []
        want = [unicodedata.normalize("NFC", m["content"]) + "<|im_end|>\n" for m in msgs if m["role"] == "assistant"]
        # a token spanning the role's "\n" and the content goes to the content
        assert all(r in (w, "\n" + w) for r, w in zip(runs, want)) and len(runs) == len(want), (runs, want)
