"""Trains the shipped sentencepiece BPE model (tokenizer/easylemur_bpe.model) on data/samples.

    python tokenizer/build_tokenizer.py [--vocab-size 4096] [--out tokenizer/easylemur_bpe.model]

Settings are lossless for code (docs/design.md, "Tokenizer"): identity normalisation, no whitespace
collapsing, no dummy prefix (so separately encoded pieces of a ChatML conversation concatenate
to the encoding of the whole text), byte fallback, split digits, whitespace-only pieces (runs of
indentation become single tokens). Ids: 0 <unk>, 1 <s>, 2 </s>, 3 <pad>, 4 <|im_start|>,
5 <|im_end|>. The ChatML markers are USER_DEFINED pieces: sentencepiece matches them in raw text
exactly as Hugging Face's added tokens do, so `Tokenizer.encode` and
`AutoTokenizer.from_pretrained(dir)` agree on rendered conversations.

sentencepiece trains on lines, so "\n" never enters a learned piece; it is encoded through byte
fallback (<0x0A>), as in Llama-2's tokenizer.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from pathlib import Path

import sentencepiece as spm

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from easylemur.data.jsonl import iter_jsonl_texts  # noqa: E402

CHATML = ["<|im_start|>", "<|im_end|>"]


def training_lines(sample_dir: Path):
    for sub in ("code", "text"):
        for text in iter_jsonl_texts(sample_dir / sub, "text"):
            for line in text.split("\n"):
                if line:
                    yield line
    for text in iter_jsonl_texts(sample_dir / "chat", None):
        for line in text.split("\n"):
            if line:
                yield line


def build(out: Path, vocab_size: int, sample_dir: Path) -> None:
    proto = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=training_lines(sample_dir),
        model_writer=proto,
        model_type="bpe",
        vocab_size=vocab_size,
        character_coverage=0.9999,
        normalization_rule_name="identity",
        remove_extra_whitespaces=False,
        add_dummy_prefix=False,
        byte_fallback=True,
        split_digits=True,
        allow_whitespace_only_pieces=True,
        max_sentence_length=1 << 16,
        user_defined_symbols=CHATML,
        unk_id=0,
        bos_id=1,
        eos_id=2,
        pad_id=3,
        num_threads=2,
        seed_sentencepiece_size=200_000,
        minloglevel=2,
    )
    out.write_bytes(proto.getvalue())
    sp = spm.SentencePieceProcessor(model_proto=proto.getvalue())
    print(json.dumps({"model": str(out), "vocab_size": sp.get_piece_size(),
                      "im_start": sp.piece_to_id(CHATML[0]), "im_end": sp.piece_to_id(CHATML[1])}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--vocab-size", type=int, default=4096)
    ap.add_argument("--samples", type=Path, default=ROOT / "data" / "samples")
    ap.add_argument("--out", type=Path, default=ROOT / "tokenizer" / "easylemur_bpe.model")
    args = ap.parse_args()
    build(args.out, args.vocab_size, args.samples)


if __name__ == "__main__":
    main()
