"""HF directory -> easylemur checkpoint (`python -m easylemur.convert from-hf`): the tensors, cast
leaf by leaf to the stored dtype, the tokenizer (with --add-chatml-tokens its new pieces and the
grown embedding rows) and the meta, written by `streaming_save`."""

from __future__ import annotations

import dataclasses
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional

import numpy as np

from easylemur.chat.choice import hf_dir_chat_template, template_in
from easylemur.checkpoint import model_meta
from easylemur.convert import hf
from easylemur.convert.dtypes import ConvertError, _dtype_name, _np_dtype, cast
from easylemur.convert.out_dir import _inside, check_checkpoint_out
from easylemur.convert.safetensors_io import LazyArray
from easylemur.convert.streaming_save import save_streaming
from easylemur.convert.to_hf import export_stop_ids
from easylemur.model.llama import param_specs
from easylemur.model.vocab import grow_rows
from easylemur.tokenizer import load_tokenizer, tokenizer_kind
from easylemur.tokenizer.hf import extend_hf
from easylemur.tokenizer.spm import extend_model, tokenizer_file


def _tokenizer_path(path: str | os.PathLike) -> Path:
    """The tokenizer file a path names: a directory's tokenizer.model (sentencepiece) or else its
    tokenizer.json (HF tokenizers), or the file itself."""
    p = Path(path)
    if p.is_dir() and tokenizer_kind(p) == "hf":
        return p / "tokenizer.json"
    return tokenizer_file(p)


def _store_dtype(param_dtype: str, pairs) -> np.dtype:
    if param_dtype != "auto":
        return _np_dtype(param_dtype)
    kinds = {np.dtype(src.dtype).name for _, src in pairs}
    if len(kinds) == 1 and next(iter(kinds)) in ("float32", "bfloat16", "float16"):
        return np.dtype(next(iter(pairs))[1].dtype)
    return np.dtype(np.float32)  # mixed or integer storage: float32 holds all of them exactly


def from_hf(hf_dir: str | Path, out: str | Path, *, param_dtype: str = "auto", tokenizer: str | Path | None = None,
            add_chatml_tokens: bool = False, overwrite: bool = False, log=None) -> Path:
    """HF Llama directory -> easylemur checkpoint `out/checkpoints/0`; returns the step dir."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    hf_dir = Path(hf_dir)
    if not hf_dir.is_dir():
        raise ConvertError(f"--hf {hf_dir}: not a directory (nor a Hub model name like org/name)")
    final = check_checkpoint_out(out, overwrite)  # before any work: a refusal costs nothing
    if _inside(hf_dir, final / "checkpoints"):
        raise ConvertError(f"--hf {hf_dir} lies inside {final / 'checkpoints'}, which --out {out} would replace")
    cfg = hf.read_hf_config(hf_dir)
    declared = hf.declared_eos_ids(hf_dir)
    # chat-tuned as far as the directory says: its tokenizer has a chat template (meta chat_format)
    source_template = hf_dir_chat_template(hf_dir)
    pairs = hf.check_hf_tensors(hf_dir, hf.index_hf_tensors(hf_dir), cfg)
    store = _store_dtype(param_dtype, pairs)

    tok_path: Optional[Path] = _tokenizer_path(tokenizer) if tokenizer else None
    if tok_path is None and tokenizer_kind(hf_dir) is not None:
        tok_path = _tokenizer_path(hf_dir)
    if tok_path is not None and not tok_path.is_file():
        raise ConvertError(f"--tokenizer {tok_path}: no such tokenizer file (a sentencepiece .model, a tokenizer.json, "
                           "or a directory holding one)")
    if tok_path is None:
        log(f"note: {hf_dir} has neither tokenizer.model nor tokenizer.json; the checkpoint carries no tokenizer")

    vocab_size = cfg.vocab_size
    with tempfile.TemporaryDirectory() as tmp:
        if add_chatml_tokens:
            if tok_path is None:
                raise ConvertError("--add-chatml-tokens needs a tokenizer (tokenizer.model or tokenizer.json; "
                                   f"none in {hf_dir}; pass --tokenizer PATH)")
            if tokenizer_kind(tok_path) == "hf":
                report = extend_hf(tok_path, tmp)
                tok_path = Path(tmp) / "tokenizer.json"
            else:
                report = extend_model(str(tok_path), str(Path(tmp) / "tokenizer.model"))
                tok_path = Path(report["model"])
            # New pieces get ids after the tokenizer's last; an embedding already padded past
            # the tokenizer (some checkpoints are) has rows for them.
            vocab_size = max(cfg.vocab_size, int(report["vocab_size"]))
            log(f"ChatML tokens {report['added'] or '(already present)'}; vocabulary {cfg.vocab_size} -> {vocab_size}")
        tok = load_tokenizer(tok_path) if tok_path is not None else None
        if tok is not None:
            n_tok = tok.vocab_size
            if n_tok > vocab_size:
                raise ConvertError(f"tokenizer {tok_path} has {n_tok} pieces but the model only {vocab_size} "
                                   "embedding rows; ids past the embedding would be out of range")

        out_cfg = dataclasses.replace(cfg, vocab_size=vocab_size, param_dtype=_dtype_name(store), scan_layers=False)
        shapes, _ = param_specs(out_cfg)
        tree: dict = {}
        for m, src in pairs:
            grow = None
            if vocab_size != cfg.vocab_size and m.hf_name == "model.embed_tokens.weight":
                grow = 0
            elif vocab_size != cfg.vocab_size and m.hf_name == "lm_head.weight":
                grow = 1

            def load(m=m, src=src, grow=grow):
                x = m.to_flax(cast(m.hf_name, src.read(), store, "--param-dtype"))
                return x if grow is None else grow_rows(x, vocab_size, axis=grow)

            shape = hf.get_path(shapes, m.path).shape
            hf.set_path(tree, m.path, LazyArray(shape, store, load))

        stops = export_stop_ids(out_cfg.eos_token_id, tok, declared, source_template)  # generate and to-hf read them back
        extra: dict[str, Any] = {"chat_format": "model" if source_template else None}
        if source_template and template_in((tok.config if tok is not None else {}).get("chat_template"), {}) != \
                source_template:
            # the embedded tokenizer's configuration does not carry it (a chat_template.jinja or a
            # named template file won over it, or there is none)
            extra["chat_template"] = source_template
        meta = model_meta.make_meta(0, out_cfg, tok_path, stop_ids=stops, source={
            "converted_from": "hf", "hf_dir": str(hf_dir.absolute()), "hf_vocab_size": cfg.vocab_size}, **extra)
        step_dir = save_streaming(out, tree, meta, overwrite=overwrite, log=log)
    return step_dir
