"""Tokenizers: `spm.py` (sentencepiece, as Llama-2 ships it; ChatML pieces; HF tokenizer files;
the CLI), `hf.py` (HF `tokenizers`' tokenizer.json: Llama-3, Qwen2.5, DeepSeek-Coder), `files.py`
(the configuration files beside them), and `load_tokenizer`, which picks the kind a path holds.
Imports only `errors` and chat's floor (`chat.chatml`'s markers and template, `chat.files`)."""

from __future__ import annotations

import os
from pathlib import Path


def tokenizer_kind(path: str | os.PathLike) -> str | None:
    """The kind of tokenizer a path holds: "spm" for a sentencepiece `.model` file or a directory
    holding `tokenizer.model` (it wins over a tokenizer.json beside it, as in Llama-2's HF
    directories), "hf" for a `tokenizer.json` file or a directory holding only that, None when
    the path holds no tokenizer."""
    p = Path(path)
    if p.is_dir():
        if (p / "tokenizer.model").is_file():
            return "spm"
        return "hf" if (p / "tokenizer.json").is_file() else None
    if not p.is_file():
        return None
    return "hf" if p.suffix == ".json" else "spm"


def load_tokenizer(path: str | os.PathLike | None = None):
    """The tokenizer a path holds (see `tokenizer_kind`): `spm.Tokenizer` or `hf.HFTokenizer`;
    None = the sentencepiece model shipped in tokenizer/."""
    from easylemur.tokenizer.spm import Tokenizer, TokenizerError

    if path is None or tokenizer_kind(path) == "spm":
        return Tokenizer.load(path)
    if tokenizer_kind(path) == "hf":
        from easylemur.tokenizer.hf import HFTokenizer

        return HFTokenizer.load(path)
    if Path(path).is_dir():
        raise TokenizerError(f"tokenizer directory {path} holds neither tokenizer.model nor tokenizer.json")
    raise TokenizerError(f"tokenizer model {path} does not exist")

