"""The shipped sentencepiece BPE model: lossless on code, ChatML pieces, HF agreement, extension."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb

from easylemur.chat.chatml import CHATML_TOKENS
from easylemur.tokenizer.spm import (
    DEFAULT_TOKENIZER_PATH,
    Tokenizer,
    encode_ids_array,
    extend_model,
    sentencepiece_has_numpy_output,
)

ROOT = Path(__file__).resolve().parents[1]

CODE = [
    "def f(x):\n\tif x:\n\t\treturn  x  *  2\n    else:\n        return None\n",
    "    \n\n\n        trailing   spaces   \t\t \n",
    "int main(void) {\r\n    printf(\"%d\\n\", 1234567890);\r\n}\r\n",
    "# coding: utf-8\nname = 'Grüße, naïve café — 日本語 🎉'\n",
    "\x00\x01 control \x7f and \u200b zero width",
    " leading space and <|im_start|> inline marker<|im_end|>",
    "",
    "x" * 5000,
]


@pytest.fixture(scope="module")
def tok():
    return Tokenizer.load()


def test_shipped_model_settings(tok):
    m = pb.ModelProto()
    m.ParseFromString(Path(DEFAULT_TOKENIZER_PATH).read_bytes())
    assert m.trainer_spec.model_type == pb.TrainerSpec.BPE
    assert 1000 <= tok.vocab_size <= 10000
    assert m.normalizer_spec.name == "identity"
    assert not m.normalizer_spec.remove_extra_whitespaces
    assert not m.normalizer_spec.add_dummy_prefix
    assert m.trainer_spec.byte_fallback and m.trainer_spec.split_digits
    assert m.trainer_spec.allow_whitespace_only_pieces
    assert (tok.bos_id, tok.eos_id, tok.pad_id) == (1, 2, 3)
    for t, i in zip(CHATML_TOKENS, (tok.im_start_id, tok.im_end_id)):
        assert tok.id_to_piece(i) == t
        assert m.pieces[i].type == pb.ModelProto.SentencePiece.USER_DEFINED
        assert tok.encode(t) == [i]


@pytest.mark.parametrize("text", CODE)
def test_round_trip_byte_for_byte(tok, text):
    ids = tok.encode(text)
    assert tok.bos_id not in ids and tok.eos_id not in ids
    assert tok.decode(ids) == text


def test_round_trip_sample_corpus(tok):
    from easylemur.data.jsonl import iter_jsonl_texts

    n = 0
    for text in iter_jsonl_texts(ROOT / "data" / "samples" / "code", "text"):
        assert tok.decode(tok.encode(text)) == text
        n += 1
    assert n > 100


def test_whitespace_runs_are_pieces(tok):
    # indentation should cost one token, not one per space (allow_whitespace_only_pieces)
    assert len(tok.encode("        ")) <= 2
    assert "\t" in "".join(tok.id_to_piece(i) for i in tok.encode("\tx"))


def test_pickles(tok):
    import pickle

    t2 = pickle.loads(pickle.dumps(tok))
    assert t2.encode(CODE[0]) == tok.encode(CODE[0]) and t2.im_end_id == tok.im_end_id


def test_build_script_reproduces_shipped_model(tmp_path):
    out = tmp_path / "m.model"
    subprocess.run([sys.executable, str(ROOT / "tokenizer" / "build_tokenizer.py"), "--out", str(out)],
                   check=True, capture_output=True)
    a, b = Tokenizer(str(out)), Tokenizer.load()
    assert a.vocab_size == b.vocab_size
    assert [a.id_to_piece(i) for i in range(a.vocab_size)] == [b.id_to_piece(i) for i in range(b.vocab_size)]


def test_hf_autotokenizer_agrees(tok, tmp_path):
    transformers = pytest.importorskip("transformers")
    tok.save_hf(tmp_path)
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    for text in CODE:
        assert hf.encode(text, add_special_tokens=False) == tok.encode(text), text[:40]
    # this source file writes "<s>" and "</s>": matched as BOS/EOS by both (see below)
    text = (ROOT / "easylemur" / "tokenizer" / "spm.py").read_text()
    assert "</s>" in text and hf.encode(text, add_special_tokens=False) == tok.encode(text)
    assert hf.encode("hi") == [tok.bos_id] + tok.encode("hi")
    assert hf.convert_tokens_to_ids(list(CHATML_TOKENS)) == [tok.im_start_id, tok.im_end_id]


def test_extend_adds_chatml(tmp_path, llama2_like_spm):
    plain = llama2_like_spm
    t0 = Tokenizer(str(plain))
    assert not t0.has_chatml
    with pytest.raises(ValueError, match="extend"):
        t0.require_chatml()
    report = extend_model(str(plain), str(tmp_path / "ext.model"))
    t1 = Tokenizer.load(tmp_path / "ext.model")
    assert report["vocab_size"] == t0.vocab_size + 2 == t1.vocab_size
    assert (t1.im_start_id, t1.im_end_id) == (t0.vocab_size, t0.vocab_size + 1)
    assert t1.im_start_id in t1.encode("<|im_start|>user")
    assert t1.encode("<|im_start|>user", continuation=True)[0] == t1.im_start_id
    # every old id keeps its meaning
    assert all(t0.id_to_piece(i) == t1.id_to_piece(i) for i in range(t0.vocab_size))
    text = "some text\n  with  spaces"
    assert t0.encode(text) == t1.encode(text)
    # extending twice adds nothing
    assert extend_model(str(tmp_path / "ext.model"), str(tmp_path / "ext2.model"))["added"] == {}


def test_extend_cli(tmp_path, llama2_like_spm):
    plain = llama2_like_spm
    r = subprocess.run([sys.executable, "-m", "easylemur.tokenizer", "extend", "--model", str(plain),
                        "--out", str(tmp_path / "x.model")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    assert rep["vocab_size"] == rep["old_vocab_size"] + 2
    r = subprocess.run([sys.executable, "-m", "easylemur.tokenizer", "extend", "--model", str(tmp_path / "nope"),
                        "--out", str(tmp_path / "y.model")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 2 and r.stderr.strip() == f"error: --model {tmp_path / 'nope'}: no such file; expected a " \
        "sentencepiece .model file"
    assert not (tmp_path / "y.model").exists()


def _cli(argv, capsys) -> tuple[int, str, str]:
    from easylemur.tokenizer.cli import main

    rc = main([str(a) for a in argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def _one_line_error(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_cli_errors_are_one_line_with_the_exit_code(tmp_path, llama2_like_spm, capsys):
    junk = tmp_path / "junk.model"
    junk.write_text("not a model")
    # bad input: exit 2, naming the file or value
    for argv, named in [
        (["info", "--model", tmp_path / "nope.model"], "nope.model"),
        (["info", "--model", junk], "not a sentencepiece model"),
        (["extend", "--model", junk, "--out", tmp_path / "x.model"], str(junk)),
        (["extend", "--model", llama2_like_spm, "--out", tmp_path], "is a directory"),
        (["extend", "--model", llama2_like_spm, "--out", tmp_path / "x.model", "--tokens", "<a b>"], "'<a b>'"),
    ]:
        rc, _, err = _cli(argv, capsys)
        assert rc == 2 and named in _one_line_error(err), (argv, err)
    assert not (tmp_path / "x.model").exists()
    # a failed run (the OS refuses the write): exit 1, the OS's message naming the path
    rc, _, err = _cli(["extend", "--model", llama2_like_spm, "--out", junk / "x.model"], capsys)
    assert rc == 1 and str(junk) in _one_line_error(err)
    # --debug: the traceback, then the same line
    rc, _, err = _cli(["info", "--model", junk, "--debug"], capsys)
    assert rc == 2 and "Traceback" in err and err.strip().splitlines()[-1].startswith("error: --model")
    rc, out, err = _cli(["info"], capsys)
    assert rc == 0 and err == "" and json.loads(out)["vocab_size"] == 4096


# --- HF parity over many strings, for the shipped model and a Llama-2-style (dummy-prefix) one --


def _dummy_prefix_model(tmp_path, base: Path) -> Tokenizer:
    """The Llama-2-style test model (add_dummy_prefix=True, lossless settings otherwise),
    extended with the ChatML pieces."""
    extend_model(str(base), str(tmp_path / "tokenizer.model"))
    tok = Tokenizer(str(tmp_path / "tokenizer.model"))
    assert tok.add_dummy_prefix and tok.has_chatml
    return tok


@pytest.fixture(scope="module", params=["shipped", "dummy_prefix"])
def tok_pair(request, tmp_path_factory, llama2_like_spm):
    """(our Tokenizer, AutoTokenizer of its save_hf export)."""
    transformers = pytest.importorskip("transformers")
    d = tmp_path_factory.mktemp(request.param)
    ours = Tokenizer.load() if request.param == "shipped" else _dummy_prefix_model(d, llama2_like_spm)
    assert ours.add_dummy_prefix == (request.param == "dummy_prefix")
    ours.save_hf(d / "hf")
    return ours, transformers.AutoTokenizer.from_pretrained(str(d / "hf"))


_CORPUS = None
# the text of BOS/EOS/UNK/pad, alone, broken and in code and HTML (spm.Tokenizer.encode matches them as HF does)
LITERAL_SPECIALS = ["<s>", "</s>", "<unk>", "<pad>", "<p><s>old</s> new</p>", "print('</s>')", " </s>", "<s", "</s",
                    "<pad><pad>", "<<unk>>"]


def _random_strings(n: int, seed: int) -> list[str]:
    """Random mixes of whitespace, code, non-ASCII text and ChatML markers (whole and broken),
    with the awkward cases (leading/trailing space, marker first, empty) over-represented."""
    import random

    global _CORPUS
    if _CORPUS is None:
        from easylemur.data.jsonl import iter_jsonl_texts

        _CORPUS = [t for _, t in zip(range(50), iter_jsonl_texts(ROOT / "data" / "samples" / "code", "text"))]
    rng = random.Random(seed)
    ws = [" ", "  ", "    ", "\n", "\n\n", "\t", "\t\t", "\r\n", " \n", "\n    ", "\u2581", "\u3000", "\u00a0"]
    marks = ["<|im_start|>", "<|im_end|>", "<|im_start|>user\n", "<|im_end|>\n", "<|im_start|>assistant\n",
             "<|im_", "|>", "<|im_end", "< |im_start|>"] + LITERAL_SPECIALS
    words = ["hello", "def", "x = 1", "return x", "12345", "3.14", "if (a && b) {", "}", "print('hi')",
             "# comment", "é", "日本語", "🎉", "Grüße", "naïve café", "\u200b", "Ωμέγα", "ё", "—", "$HOME"]

    def frag():
        r = rng.random()
        if r < 0.3:
            return rng.choice(ws)
        if r < 0.45:
            return rng.choice(marks)
        if r < 0.75:
            return rng.choice(words)
        t = rng.choice(_CORPUS)
        i = rng.randrange(len(t))
        return t[i : i + rng.randrange(1, 80)]

    out = ["", " ", "  ", "\n", "\u2581", " hello", "hello ", "<|im_start|>", "<|im_start|><|im_end|>",
           " <|im_end|>", "<|im_end|> ", "\n<|im_start|>user\nhi<|im_end|>\n", "é", " é", "\t x"]
    while len(out) < n:
        parts = [frag() for _ in range(rng.randrange(1, 9))]
        if rng.random() < 0.3:  # start with whitespace or a marker
            parts.insert(0, rng.choice(ws + marks[:5]))
        out.append("".join(parts))
    return out


def test_hf_parity_random_strings(tok_pair):
    ours, hf = tok_pair
    texts = _random_strings(600, seed=0)
    assert sum(ours.has_literal_specials(t) for t in texts) > 100  # the text of <s>, </s>, <unk>, <pad> is covered
    theirs = hf(texts, add_special_tokens=False)["input_ids"]
    bad = [(t, h, ours.encode(t)) for t, h in zip(texts, theirs) if h != ours.encode(t)]
    assert not bad, f"{len(bad)} of {len(texts)} differ, e.g. {bad[0][0]!r}: HF " \
        f"{hf.convert_ids_to_tokens(bad[0][1])} ours {[ours.id_to_piece(i) for i in bad[0][2]]}"
    assert ours.encode_batch(texts, num_threads=2) == theirs
    arrays = [ours.encode_array(t) for t in texts]
    assert all(a.dtype == np.int32 for a in arrays) and [a.tolist() for a in arrays] == theirs
    assert hf(texts[:50])["input_ids"] == [[ours.bos_id] + t for t in theirs[:50]]  # add_bos_token
    if not ours.add_dummy_prefix:  # the shipped model is lossless, markers included (a literal
        # "▁" is sentencepiece's space: it decodes as " ", in HF too; sentencepiece decodes BOS/EOS/...
        # to nothing, as HF with skip_special_tokens)
        for t in texts:
            if ours.has_literal_specials(t):
                continue
            assert ours.decode(ours.encode(t)) == t.replace("\u2581", " ") == hf.decode(ours.encode(t)).replace("\u2581", " ")


def test_hf_parity_random_chats(tok_pair):
    import random

    from easylemur.chat.chatml import render_chat, render_prompt

    ours, hf = tok_pair
    rng = random.Random(1)
    contents = _random_strings(200, seed=2)
    for _ in range(60):
        msgs = [{"role": rng.choice(["system", "user", "assistant"]), "content": rng.choice(contents)}
                for _ in range(rng.randrange(1, 5))]
        assert list(hf.apply_chat_template(msgs, tokenize=True, return_dict=False)) == render_chat(msgs, ours)[0], msgs
        assert list(hf.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True,
                                           return_dict=False)) == render_prompt(msgs, ours), msgs


def test_literal_special_text_is_matched_as_hf_does(tok_pair):
    """The one rule for "<s>", "</s>", "<unk>", "<pad>" written in text (a code corpus holds
    them in HTML and strings): their ids, in training, easylemur's eval and the export's
    AutoTokenizer alike (docs/design.md, "Literal special-token text")."""
    ours, hf = tok_pair
    has_pad = ours.id_to_piece(ours.pad_id) == "<pad>"
    cases = {"x = '</s>'": ours.eos_id, "<s>hi": ours.bos_id, "<unk>": ours.sp.unk_id(), "<p><s>a</s></p>": ours.eos_id}
    if has_pad:
        cases["tokens: <pad> <pad>"] = ours.pad_id
    for s, want in cases.items():
        ids = ours.encode(s)
        assert want in ids and hf(s, add_special_tokens=False)["input_ids"] == ids, s
    # a conversation whose content writes "</s>": the export's chat template gives training's ids
    from easylemur.chat.chatml import render_chat

    msgs = [{"role": "user", "content": "strike <s>this</s>"}, {"role": "assistant", "content": "print('</s>')"}]
    ids = render_chat(msgs, ours)[0]
    assert ids.count(ours.eos_id) == 2 and list(hf.apply_chat_template(msgs, tokenize=True, return_dict=False)) == ids


def test_literal_specials_without_chatml(llama2_like_spm, tmp_path):
    """Llama-2's kind of model with no ChatML pieces: "<|im_start|>" is text on both sides, "</s>" EOS."""
    import transformers

    ours = Tokenizer(str(llama2_like_spm))
    assert not ours.has_chatml
    ours.save_hf(tmp_path)
    hf = transformers.AutoTokenizer.from_pretrained(str(tmp_path))
    texts = _random_strings(400, seed=4)
    assert sum(ours.has_literal_specials(t) for t in texts) > 40 and sum("<|im_start|>" in t for t in texts) > 30
    theirs = hf(texts, add_special_tokens=False)["input_ids"]
    bad = [t for t, h in zip(texts, theirs) if h != ours.encode(t)]
    assert not bad, f"{len(bad)} of {len(texts)} differ, e.g. {bad[0]!r}"
    assert ours.encode_batch(texts) == theirs and [ours.encode_array(t).tolist() for t in texts] == theirs
    assert ours.encode("<|im_start|>") != [ours.piece_to_id("<|im_start|>")]


# With a dummy prefix (Llama-2's) transformers 5's tokenizer (Metaspace, prepend_scheme "first")
# and sentencepiece part ways; sentencepiece itself prepends the dummy "▁" to text that starts
# with a space or a ChatML marker, HF does not, and Tokenizer.encode follows HF. Pinned here
# for both models, beside the random strings above.


@pytest.mark.parametrize("s", ["hello world", "def f(x):\n    return x", "a<|im_end|>\nb", "\n", " hello",
                               "<|im_start|>user\nhi<|im_end|>\n"])
def test_hf_parity_pinned_strings(tok_pair, s):
    ours, hf = tok_pair
    assert hf(s, add_special_tokens=False)["input_ids"] == ours.encode(s)


def test_hf_parity_pinned_chat(tok_pair):
    from easylemur.chat.chatml import render_chat

    ours, hf = tok_pair
    msgs = [{"role": "user", "content": "Write a function."}, {"role": "assistant", "content": "def f():\n    pass"}]
    assert list(hf.apply_chat_template(msgs, tokenize=True, return_dict=False)) == render_chat(msgs, ours)[0]


# --- the one sentencepiece internal (tokenizer.sentencepiece_has_numpy_output) ---------------


def test_sentencepiece_numpy_output_is_available():
    assert sentencepiece_has_numpy_output(), (
        f"sentencepiece {spm.__version__} has no sentencepiece._ENCODE_DISPATCH[False]['numpy'], the private "
        "table easylemur.tokenizer.sentencepiece_has_numpy_output reads: Tokenizer.encode_array now builds its "
        "arrays from lists of Python ints (the data pipeline's slow path); find how this sentencepiece asks "
        "for return_type='numpy' and update that function")


def test_numpy_and_list_encode_paths_agree(tok):
    texts = CODE + _random_strings(100, seed=3)
    for text in texts:
        fast = encode_ids_array(tok.sp, text, numpy_output=True)
        slow = encode_ids_array(tok.sp, text, numpy_output=False)
        assert fast.dtype == slow.dtype == np.int32, (fast.dtype, slow.dtype)
        assert fast.tolist() == slow.tolist() == tok.sp.encode(text), repr(text)
