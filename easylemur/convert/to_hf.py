"""easylemur checkpoint -> HF directory (`python -m easylemur.convert to-hf`): the checkpoint's
tensors read leaf by leaf (`CheckpointTensors`), the stop ids and chat template the export declares,
`tokenizer.json` beside a sentencepiece model, and the export, staged and put in place by `out_dir`."""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from easylemur.chat.choice import chat_template_for, own_template
from easylemur.chat.chatml import IM_END, chatml_template
from easylemur.checkpoint import store, model_meta
from easylemur.convert import hf
from easylemur.convert.dtypes import ConvertError, _np_dtype, cast
from easylemur.convert.out_dir import (
    _carry_over,
    _names,
    _put_in_place,
    _staging_dir,
    _unchanged,
    check_export_out,
    note_leftovers,
)
from easylemur.convert.safetensors_io import LazyArray, parse_size, write_sharded_safetensors
from easylemur.errors import RunError
from easylemur.model.config import LlamaConfig
from easylemur.model.llama import param_specs
from easylemur.tokenizer import load_tokenizer


class CheckpointTensors:
    """Reads an easylemur checkpoint's params one leaf (or one layer of a stacked leaf) at a
    time, straight from orbax's on-disk layout with tensorstore."""

    def __init__(self, path: str | Path, step: int | None = None):
        self.saved = model_meta.read_meta(path, step)
        self.cfg: LlamaConfig = self.saved.model_config
        self.params_dir = (self.saved.path / "params").absolute()
        md_file = self.params_dir / "_METADATA"
        if not md_file.is_file():
            raise store.CheckpointError(f"{self.params_dir}: no _METADATA; not an orbax params item")
        md = json.loads(md_file.read_text())
        self._ocdbt = bool(md.get("use_ocdbt", True))
        self._driver = "zarr3" if md.get("use_zarr3") else "zarr"
        self.keys = {tuple(k["key"] for k in v["key_metadata"]) for v in md["tree_metadata"].values()}
        self._ctx = None

    def _open(self, key: tuple):
        import tensorstore as ts

        if self._ctx is None:
            # no chunk cache: what was written to the HF file is not needed again
            self._ctx = ts.Context({"cache_pool": {"total_bytes_limit": 0}})
        name = ".".join(key)
        if self._ocdbt:
            kv = {"driver": "ocdbt", "base": f"file://{self.params_dir}", "path": name}
        else:
            kv = {"driver": "file", "path": str(self.params_dir / name)}
        return ts.open({"driver": self._driver, "kvstore": kv}, open=True, read=True, context=self._ctx).result()

    def locate(self, path: tuple) -> tuple[tuple, Optional[int]]:
        """Where an unscanned param path lives: (stored key, layer index into a stacked leaf)."""
        if path in self.keys:
            return path, None
        if path[0].startswith("layers_"):
            stacked = ("layers",) + tuple(path[1:])
            if stacked in self.keys:
                return stacked, int(path[0][len("layers_"):])
        raise hf.HFFormatError(f"{self.params_dir}: no parameter {'/'.join(path)} in the checkpoint")

    def shape(self, path: tuple) -> tuple[int, ...]:
        key, i = self.locate(path)
        shape = tuple(self._open(key).shape)
        return shape if i is None else shape[1:]

    def read(self, path: tuple) -> np.ndarray:
        key, i = self.locate(path)
        t = self._open(key)
        return np.asarray((t if i is None else t[i]).read().result())


def export_stop_ids(eos_token_id: int | None, tok: Any, declared: Sequence[int], chat_template: str | None) -> list[int]:
    """`hf.stop_ids` for a model's files: <|im_end|> only where the model ends turns with it (the
    chat template written beside it writes it, as ChatML's does) or its source declared it. A
    base model never emits it, and a stop on it would tell lm-eval and vLLM it is a chat model."""
    ids = hf.stop_ids(eos_token_id, tok, declared)
    im_end = getattr(tok, "im_end_id", None)
    if im_end is None or im_end == eos_token_id or im_end in {int(i) for i in declared} or (
            chat_template and IM_END in chat_template):
        return ids
    return [i for i in ids if i != im_end]


CHAT_TEMPLATE_CHOICES = ("auto", "chatml", "model", "none")


def export_chat_template(saved: model_meta.ModelCheckpoint, tok: Any, choice: str | None = None) -> tuple[Optional[str], str]:
    """(the chat template an export writes, or None; why, for the log). `choice` None: the one the
    checkpoint chats with (`chat.choice.chat_template_for`, THE rule: meta chat_format null none,
    "chatml" ChatML's, "model" the tokenizer's own; a checkpoint from before the key the tokenizer's
    own, else ChatML's when the tokenizer has the markers). --chat-template: "auto" (the
    tokenizer's own, else ChatML's), "chatml", "model"; --no-chat-template: "none"."""
    if choice not in (None,) + CHAT_TEMPLATE_CHOICES:
        raise ConvertError(f"--chat-template {choice}: not one of chatml, model")
    if choice == "none":
        return None, "none (--no-chat-template)"
    if tok is None:
        if choice is not None:
            raise ConvertError("--chat-template: the checkpoint carries no tokenizer to write a chat template for")
        return None, "none (no tokenizer)"
    if choice is None:
        template, why = chat_template_for(saved, tok)
        return template, why if template is not None else f"{why}; --chat-template writes one"
    own = own_template(tok, saved.meta)
    chatml = chatml_template(tok)  # no BOS (Qwen2.5): ChatML's template writes none either
    want = ("model" if own else "chatml") if choice == "auto" else choice
    if want == "chatml" and chatml is None:
        raise ConvertError(f"--chat-template {choice}: the tokenizer has no <|im_start|>/<|im_end|> tokens, which "
                           "ChatML's template writes")
    if want == "model" and own is None:
        raise ConvertError(f"--chat-template {choice}: the tokenizer has no chat template of its own; "
                           "use --chat-template chatml")
    return (chatml, "ChatML's (--chat-template)") if want == "chatml" else (own, "the tokenizer's own (--chat-template)")


def _check_strings(tok: Any) -> list[str]:
    """Texts AutoTokenizer on the export must encode exactly as easylemur does: code, whitespace runs,
    unicode, and the text of the tokens matched whole in raw text (spm.Tokenizer.encode, docs/design.md
    "Literal special-token text"): "<s>", "</s>", "<unk>", "<pad>", the tokenizer's own BOS/EOS/UNK/pad
    and the ChatML markers, alone, broken and inside code and HTML, whether the tokenizer has them or
    not (then both read them as text)."""
    import random

    rnd = random.Random(0)
    specials = ["<s>", "</s>", "<unk>", "<pad>", "<|im_start|>", "<|im_end|>"]
    ids = (tok.bos_id, tok.eos_id, tok.pad_id) + ((tok.sp.unk_id(),) if hasattr(tok, "sp") else ())
    specials += sorted({tok.id_to_piece(i) for i in ids if i is not None and i >= 0} - set(specials))
    pieces = ["def f(x):\n\treturn x  +  1\n", "    if a == b:\n        print('héllo wörld 1234567')\n", "  ", " ",
              "\n\n", "\r\n", "\t", "emoji 🦙🎉", "代码 コード 코드", "{\"k\": [1, 2.5, 0x1F]}", "n't 's", "▁x", "\u00a0",
              "#include <stdio.h>", "a<|b|>c", "<p><s>old</s> new</p>", "print('</s>')", " </s>", "<s", "</", "s>",
              "<|im_", "<|im_start|>user\n", "<|im_end|>\n"] + specials
    out = list(pieces)
    for _ in range(128):
        out.append("".join(rnd.choice(pieces) for _ in range(rnd.randint(1, 6))))
    return out


def write_fast_tokenizer(out_dir: Path, tok: Any, log) -> bool:
    """Writes `tokenizer.json` (transformers' fast tokenizer, converted from tokenizer.model)
    beside a sentencepiece export, so that transformers and vLLM load it without converting;
    kept only when AutoTokenizer on the export gives easylemur's ids on `_check_strings`.
    transformers is optional: without it nothing is written and the log says so."""
    try:
        from transformers import AutoTokenizer
    except ImportError:
        log("note: transformers is not installed, so no tokenizer.json was written (transformers and vLLM convert "
            "tokenizer.model when they load it); `pip install transformers` before to-hf writes one")
        return False
    target = out_dir / "tokenizer.json"
    problem, disagrees = None, False
    try:
        with tempfile.TemporaryDirectory() as tmp:
            AutoTokenizer.from_pretrained(out_dir).save_pretrained(tmp)
            if not (Path(tmp) / "tokenizer.json").is_file():
                raise RuntimeError("transformers wrote no tokenizer.json")
            shutil.copyfile(Path(tmp) / "tokenizer.json", target)
        fast = AutoTokenizer.from_pretrained(out_dir)
        if not fast.is_fast:
            problem = f"AutoTokenizer loaded it as {type(fast).__name__}, not a fast tokenizer"
        for text in _check_strings(tok) if problem is None else []:
            theirs, ours = fast(text, add_special_tokens=False)["input_ids"], tok.encode(text)
            if list(theirs) != list(ours):
                problem = f"gives other ids than easylemur's tokenizer for {text!r} ({list(theirs)[:8]} vs {ours[:8]})"
                disagrees = True
                break
    except Exception as e:  # a converter that fails is a missing convenience, never a failed export
        problem = f"could not be made ({type(e).__name__}: {e})"
    if problem is not None:
        target.unlink(missing_ok=True)
        # other ids: transformers' conversion reads the model otherwise than training did, on load too
        log(f"{'warning' if disagrees else 'note'}: no tokenizer.json written: transformers' fast tokenizer {problem}; "
            "tokenizer.model alone is the tokenizer (transformers and vLLM convert it on load)")
        return False
    return True


def to_hf(checkpoint_path: str | Path, out: str | Path, *, step: int | None = None, dtype: str = "bfloat16",
          max_shard_size: str | int = "5GB", overwrite: bool = False, chat_template: str | None = None,
          log=None) -> Path:
    """easylemur checkpoint -> HF directory (sharded safetensors + index, config.json,
    generation_config.json, tokenizer files, `tokenizer.json` beside a sentencepiece model when
    transformers is installed and agrees); returns out. The chat template and the <|im_end|> stop
    follow the checkpoint's meta chat_format unless `chat_template` (`export_chat_template`)
    says otherwise; tokenizer_config.json's model_max_length is the model's context.

    The export is written into `OUT.incomplete-XXXXXX` beside `out` and renamed to `out` when
    complete. With `overwrite` a non-empty `out` is replaced whole by a directory holding
    the new export plus the entries of the old one that belong to no model (hard links, see
    `belongs_to_a_model`); the files of the old model are listed on stderr."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    target = _np_dtype(dtype)
    try:
        max_bytes = parse_size(max_shard_size)
    except ValueError as e:
        raise ConvertError(f"--max-shard-size: {e}") from None
    final = check_export_out(out, checkpoint_path, overwrite)
    reader = CheckpointTensors(checkpoint_path, step)
    cfg = dataclasses.replace(reader.cfg, scan_layers=False)

    shapes, _ = param_specs(cfg)
    items = []
    for m in hf.tensor_maps(cfg):
        want = hf.get_path(shapes, m.path).shape
        have = reader.shape(m.path)
        if tuple(have) != tuple(want):
            raise hf.HFFormatError(f"{reader.params_dir}: {'/'.join(m.path)} has shape {tuple(have)} "
                                   f"but the checkpoint's model config implies {tuple(want)}")

        def load(m=m):
            return cast(m.hf_name, m.to_hf(reader.read(m.path)), target)

        items.append((m.hf_name, LazyArray(m.hf_shape, target, load)))

    tok_path = reader.saved.tokenizer_path()
    tok = load_tokenizer(tok_path) if tok_path is not None else None
    template, why = export_chat_template(reader.saved, tok, chat_template)
    notes: list[str] = []  # what the export holds, said once it is in place (a failure says one line)
    note_leftovers(final, log)
    staged = _staging_dir(final)
    try:
        index = write_sharded_safetensors(staged, items, max_bytes)
        # every stop id: EOS, <|im_end|> when the chat template ends turns with it (chat models
        # never train EOS after a turn), <|eot_id|>, and the ids the checkpoint carries from its
        # source's generation_config.json
        eos_ids = export_stop_ids(cfg.eos_token_id, tok, reader.saved.stop_ids, template)
        pad_id = None
        if tok is not None:
            if tok.vocab_size > cfg.vocab_size:
                log(f"warning: tokenizer has {tok.vocab_size} pieces, the model {cfg.vocab_size} rows")
            tok.save_hf(staged, template, write_chat_template=template is not None,
                        model_max_length=cfg.max_position_embeddings)
            notes.append(f"chat template: {why}")
            if tok.kind == "spm" and tok.twin is not None:
                notes.append("wrote tokenizer.json: the one beside the source's tokenizer.model, as it came")
            elif tok.kind == "spm" and write_fast_tokenizer(staged, tok, notes.append):
                notes.append("wrote tokenizer.json (transformers' fast tokenizer, its ids checked against easylemur's)")
            pad_id = tok.pad_id
        else:
            log("note: the checkpoint carries no tokenizer; none written")
        (staged / "config.json").write_text(json.dumps(hf.config_to_hf(cfg, torch_dtype=dtype), indent=2) + "\n")
        (staged / "generation_config.json").write_text(
            json.dumps(hf.generation_config(cfg, eos_ids, pad_id), indent=2) + "\n")
        kept, replaced, removed = _carry_over(final, staged) if overwrite and final.is_dir() else ([], [], [])
        _put_in_place(staged, final, overwrite, log)
    except OSError as e:  # a full disk, a permission: an OSError from write() names no file
        shutil.rmtree(staged, ignore_errors=True)
        raise RunError(f"--out {out}: writing the export failed: {store.write_failure_cause(e)}; "
                       f"{_unchanged(final)}") from e
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    if removed:
        log(f"--force: removed from {out} (files of the model it held): {_names(removed, limit=len(removed))}")
    if replaced:
        log(f"--force: replaced in {out}: {_names(replaced, limit=len(replaced))}")
    if kept:
        log(f"--force: kept in {out} (no model files): {_names(kept, limit=len(kept))}")
    for note in notes:
        log(note)
    n_files = len(set(index["weight_map"].values()))
    log(f"wrote {len(items)} tensors ({index['metadata']['total_size'] / 1e9:.3g} GB, {dtype}) in {n_files} shard(s) to {out}")
    return Path(out)
