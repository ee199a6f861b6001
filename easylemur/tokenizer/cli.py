"""Tokenizer tools: `python -m easylemur.tokenizer`.

    python -m easylemur.tokenizer extend --model llama2/tokenizer.model --out extended.model
    python -m easylemur.tokenizer extend --model llama3_dir --out extended_dir   (tokenizer.json)
    python -m easylemur.tokenizer info [--model PATH]
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Sequence

from easylemur.chat.chatml import CHATML_TOKENS
from easylemur.errors import add_debug_flag, run_cli
from easylemur.tokenizer import load_tokenizer, tokenizer_kind
from easylemur.tokenizer.spm import DEFAULT_TOKENIZER_PATH, Tokenizer, TokenizerError, extend_model, tokenizer_file


def _cli_model(path: str | None) -> Tokenizer:
    """The --model a command reads, or a TokenizerError naming the file and what is wrong."""
    tok_path = str(tokenizer_file(DEFAULT_TOKENIZER_PATH if path is None else path))
    if not os.path.isfile(tok_path):
        raise TokenizerError(f"--model {path}: no such file; expected a sentencepiece .model file")
    try:
        return Tokenizer(tok_path)
    except (RuntimeError, ValueError):  # sentencepiece's and protobuf's parse errors, which name no file
        raise TokenizerError(f"--model {tok_path}: not a sentencepiece model (sentencepiece cannot parse it)") from None


def _main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m easylemur.tokenizer", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    ext = sub.add_parser("extend", help="add the ChatML tokens to a sentencepiece model and report the new vocabulary size")
    ext.add_argument("--model", required=True,
                     help="input sentencepiece .model (e.g. Llama-2's tokenizer.model), or a tokenizer.json / HF directory")
    ext.add_argument("--out", required=True, help="where to write the extended .model (for tokenizer.json: a directory)")
    ext.add_argument("--tokens", nargs="*", default=list(CHATML_TOKENS), help="pieces to add (default: the ChatML markers)")
    info = sub.add_parser("info", help="print vocabulary size and special ids")
    info.add_argument("--model", default=None, help="sentencepiece .model or tokenizer.json (default: the shipped one)")
    for p in (ap, ext, info):
        add_debug_flag(p)
    args = ap.parse_args(argv)
    hf = args.model is not None and tokenizer_kind(args.model) == "hf"
    if args.cmd == "extend" and hf:  # a tokenizer.json (HF directory): --out is the directory to write
        from easylemur.tokenizer.hf import extend_hf

        print(json.dumps(extend_hf(args.model, args.out, args.tokens)))
    elif args.cmd == "extend":
        _cli_model(args.model)
        # sentencepiece turns spaces into "▁" before it matches pieces: one with a space never matches
        bad = [t for t in args.tokens if not t or any(c.isspace() for c in t)]
        if bad:
            raise TokenizerError(f"--tokens {bad[0]!r}: a piece must be non-empty and hold no whitespace")
        if os.path.isdir(args.out):
            raise TokenizerError(f"--out {args.out}: is a directory; expected the path of the .model file to write")
        print(json.dumps(extend_model(args.model, args.out, args.tokens)))
    else:
        t = load_tokenizer(args.model) if hf else _cli_model(args.model)
        print(json.dumps({"model": t.model_path, "vocab_size": t.vocab_size, "bos_id": t.bos_id,
                          "eos_id": t.eos_id, "pad_id": t.pad_id, "im_start_id": t.im_start_id,
                          "im_end_id": t.im_end_id}))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI: one line `error: ...` on stderr, exit 2 for a bad --model/--out/--tokens, 1 when
    writing fails; the traceback only with --debug (`errors.run_cli`)."""
    return run_cli(_main, argv)
