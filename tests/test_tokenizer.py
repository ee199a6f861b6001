"""The shipped sentencepiece BPE model: lossless on code, ChatML pieces, HF agreement, extension."""

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import sentencepiece as spm
from sentencepiece import sentencepiece_model_pb2 as pb

from easylemur.tokenizer import CHATML_TOKENS, DEFAULT_TOKENIZER_PATH, Tokenizer, extend_model

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
    from easylemur.data.sources import iter_jsonl_texts

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
    for text in CODE + [(ROOT / "easylemur" / "tokenizer.py").read_text()]:
        assert hf.encode(text, add_special_tokens=False) == tok.encode(text), text[:40]
    assert hf.encode("hi") == [tok.bos_id] + tok.encode("hi")
    assert hf.convert_tokens_to_ids(list(CHATML_TOKENS)) == [tok.im_start_id, tok.im_end_id]


def _plain_model(tmp_path) -> Path:
    """A small sentencepiece model without ChatML pieces, with Llama-2-like settings."""
    lines = [l for l in (ROOT / "easylemur" / "tokenizer.py").read_text().split("\n") if l.strip()] * 3
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_writer=proto, model_type="bpe",
                                   vocab_size=400, byte_fallback=True, minloglevel=2)
    path = tmp_path / "plain.model"
    path.write_bytes(proto.getvalue())
    return path


def test_extend_adds_chatml(tmp_path):
    plain = _plain_model(tmp_path)
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


def test_extend_cli(tmp_path):
    plain = _plain_model(tmp_path)
    r = subprocess.run([sys.executable, "-m", "easylemur.tokenizer", "extend", "--model", str(plain),
                        "--out", str(tmp_path / "x.model")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    rep = json.loads(r.stdout.strip().splitlines()[-1])
    assert rep["vocab_size"] == rep["old_vocab_size"] + 2
    r = subprocess.run([sys.executable, "-m", "easylemur.tokenizer", "extend", "--model", str(tmp_path / "nope"),
                        "--out", str(tmp_path / "y.model")], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode != 0 and "nope" in r.stderr
