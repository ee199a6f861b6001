"""Streamed text (generate/detok.py): the pieces given out as ids arrive, joined, are the reply's
decoded text, on replies full of byte tokens (half characters, invalid sequences) for a
byte-fallback sentencepiece model, the shipped one and a byte-level BPE; `TextStream` prints
exactly that, whatever order the host callbacks come in."""

import io
import random

import numpy as np
import pytest

from easylemur.generate.detok import IncrementalText
from easylemur.generate.engine import NO_TOKEN, TextStream
from easylemur.tokenizer.hf import HFTokenizer
from easylemur.tokenizer.spm import Tokenizer
from test_tokenizer_hf import LLAMA3_SPECIAL, LLAMA3_SPLIT, build_hf_dir


@pytest.fixture(scope="module")
def tokenizers(llama2_like_spm, tmp_path_factory):
    d = build_hf_dir(tmp_path_factory.mktemp("bpe"), LLAMA3_SPLIT, LLAMA3_SPECIAL,
                     {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}, vocab_size=400)
    return {"llama2_like": Tokenizer(str(llama2_like_spm)), "shipped": Tokenizer.load(),
            "byte_level": HFTokenizer.load(d)}


def _replies(tok, n: int, seed: int) -> list[list[int]]:
    """Random replies, 60% byte tokens (sentencepiece's <0xNN>; a byte-level BPE's single bytes)."""
    rnd = random.Random(seed)
    pieces = [tok.id_to_piece(i) for i in range(tok.vocab_size)]
    single = [i for i, p in enumerate(pieces) if p is not None and (p.startswith("<0x") or len(p) == 1)]
    return [[rnd.choice(single) if rnd.random() < 0.6 else rnd.randrange(tok.vocab_size)
             for _ in range(rnd.randint(1, 48))] for _ in range(n)]


@pytest.mark.parametrize("name", ["llama2_like", "shipped", "byte_level"])
def test_pieces_join_to_the_decoded_reply(name, tokenizers):
    tok = tokenizers[name]
    rnd = random.Random(1)
    held = 0
    for ids in _replies(tok, 400, seed=2):
        text, pieces, k = IncrementalText(tok), [], 0
        while k < len(ids):
            step = rnd.randint(1, 3)
            pieces.append(text.push(ids[k:k + step]))
            k += step
        pieces.append(text.finish())
        assert "".join(pieces) == tok.decode(ids), ids
        held += any(p == "" for p in pieces[:-1])
    assert held > 50  # half characters were held back, not given out as U+FFFD and taken back


def test_text_stream_prints_the_reply_in_step_order(tokenizers):
    tok = tokenizers["llama2_like"]
    for ids in _replies(tok, 50, seed=3):
        out = io.StringIO()
        stream = TextStream(tok, out)
        steps = list(range(len(ids))) + [len(ids), len(ids) + 1]  # then the row has stopped
        tokens = ids + [NO_TOKEN, NO_TOKEN]
        order = sorted(steps, key=lambda s: s + random.Random(s).choice([0, 0, 1.5]))  # some late
        for s in order:
            stream(s, np.asarray([tokens[s]]))
        stream.finish()
        assert out.getvalue() == tok.decode(ids)
