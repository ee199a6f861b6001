"""Hugging Face <-> easylemur checkpoint converters, streaming one tensor at a time.

    python -m easylemur.convert from-hf --hf DIR --out CKPT [--param-dtype auto] [--add-chatml-tokens]
    python -m easylemur.convert to-hf --checkpoint CKPT [--step N] --out DIR [--dtype bfloat16] [--max-shard-size 5GB]
        [--chat-template [chatml|model] | --no-chat-template]

from-hf writes the checkpoint format `easylemur.checkpoint` reads (an orbax CheckpointManager
directory `CKPT/checkpoints/0/` with items `params` and `meta`), so `init.from=CKPT`,
`easylemur.load(CKPT)` and `model_meta.load_params(CKPT)` all take it. Parameters keep the HF
dtype by default (bf16 stays bf16: float32 would double the disk for no information; the
loaders cast on restore) and meta.model.param_dtype records it.

Memory: orbax's StandardSave wants the whole pytree and, for numpy leaves, deep-copies all of
them and writes them concurrently (2x the model in RAM). Here the tree handed to orbax holds
`safetensors_io.LazyArray` leaves (shape and dtype only), and a type handler for them
materialises and writes one leaf at a time (`lazy_array_params_handler`, the one place that
uses orbax internals; without them from-hf saves through orbax's public API, holding the model
in memory). The on-disk result is byte-for-byte the layout `save_params` writes (same handler,
same `np.ndarray` value type, OCDBT + zarr). to-hf reads leaf by leaf with tensorstore from that
layout (a scanned checkpoint's layer i is a slice of the stacked array) and writes shard files
tensor by tensor.

Outputs never destroy (docs/design.md, "HF layout"): both commands write into a fresh directory
beside the final one (`NAME.incomplete-XXXXXX`) and rename it into place only when complete, so
a crash leaves the previous output or the new one, never a mix. to-hf refuses an --out that is
not empty unless --force, and then replaces the model there whole: other models' weight,
config and tokenizer files are removed (and listed), files that belong to no model are kept.
from-hf --force replaces only a parameter-only checkpoint, never a training run's.
"""

from __future__ import annotations

import argparse
import dataclasses
import errno
import fnmatch
import json
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from easylemur.chat.choice import chat_template_for, own_template
from easylemur.chat.chatml import IM_END, chatml_template
from easylemur.chat.files import hf_dir_chat_template
from easylemur.checkpoint import store, model_meta
from easylemur.convert import hf
from easylemur.errors import InputError, RunError, add_debug_flag, run_cli
from easylemur.storage import is_url
from easylemur.model.llama import LlamaConfig, param_specs
from easylemur.convert.safetensors_io import (
    LazyArray,
    parse_size,
    write_sharded_safetensors,
)
from easylemur.tokenizer import load_tokenizer, tokenizer_kind
from easylemur.tokenizer.hf import extend_hf
from easylemur.tokenizer.spm import extend_model, tokenizer_file
from easylemur.model.vocab import grow_rows


class ConvertError(InputError):
    """A conversion that cannot be done faithfully; the message names the bad value."""



def _tokenizer_path(path: str | os.PathLike) -> Path:
    """The tokenizer file a path names: a directory's tokenizer.model (sentencepiece) or else its
    tokenizer.json (HF tokenizers), or the file itself."""
    p = Path(path)
    if p.is_dir() and tokenizer_kind(p) == "hf":
        return p / "tokenizer.json"
    return tokenizer_file(p)

def _np_dtype(name: str) -> np.dtype:
    import ml_dtypes

    table = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}
    if name not in table:
        raise ConvertError(f"dtype {name!r} is not one of {', '.join(table)}")
    return table[name]


def _dtype_name(dt: np.dtype) -> str:
    return {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}[np.dtype(dt).name]


def cast(name: str, x: np.ndarray, dtype: np.dtype, flag: str = "--dtype") -> np.ndarray:
    """x in dtype; refuses a float16 cast that would turn a value into inf (the message
    suggests `flag`, the option that chose float16)."""
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if dtype == np.float16 and x.size:
        lo, hi = float(x.min()), float(x.max())  # min/max make no copy, unlike abs()
        limit = float(np.finfo(np.float16).max)
        if hi > limit or lo < -limit:
            worst = hi if abs(hi) >= abs(lo) else lo
            raise ConvertError(
                f"tensor {name} holds {worst:.6g}, beyond float16's range (±{limit:g}); "
                f"use {flag} bfloat16 or {flag} float32"
            )
    return x.astype(dtype)


# ----------------------------------------------------------------------------- output directories

# The files of an HF model directory besides its weights. An export writes some of them; any of
# them left from the model a directory held before would be read with the new weights
# (AutoTokenizer prefers an old tokenizer.json to the new tokenizer.model, for one).
_HF_MODEL_FILES = frozenset({
    "config.json", "generation_config.json", "tokenizer.model", "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt", "chat_template.jinja",
    "chat_template.json",
})
# Weights and weight indexes in the formats transformers, llama.cpp and Meta's checkpoints use.
_WEIGHT_PATTERNS = ("*.safetensors", "*.index.json", "pytorch_model*.bin", "tf_model*.h5", "flax_model*.msgpack",
                    "*.gguf", "consolidated*.pth")
INCOMPLETE, PREVIOUS = ".incomplete-", ".previous-"


def belongs_to_a_model(name: str) -> bool:
    """Whether a file named `name` in an HF directory is part of the model it holds."""
    return name in _HF_MODEL_FILES or any(fnmatch.fnmatch(name, p) for p in _WEIGHT_PATTERNS)


def _names(names, limit: int = 8) -> str:
    names = sorted(names)
    return ", ".join(names[:limit]) + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _local_dir(out: str | Path, flag: str = "--out") -> Path:
    """`out` as an absolute real path (a symlinked --out is followed: the link stays, its target
    is replaced); refuses what a rename cannot replace."""
    text = os.fspath(out)
    if is_url(text):
        raise ConvertError(f"{flag} {text}: only local directories are written (each output is renamed into "
                           "place when complete); write locally, then copy it to the bucket")
    final = Path(os.path.realpath(text))
    if final.exists() and not final.is_dir():
        raise ConvertError(f"{flag} {text}: exists and is not a directory")
    blocker = next((p for p in final.parents if p.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise ConvertError(f"{flag} {text}: {blocker} is a file, not a directory")
    if os.path.ismount(final):
        raise ConvertError(f"{flag} {text}: is a mount point, which cannot be replaced by a rename; "
                           "write into a directory inside it")
    return final


def _inside(path: str | Path, directory: Path) -> bool:
    path = Path(os.path.realpath(os.fspath(path)))
    return path == directory or directory in path.parents


def note_leftovers(final: Path, log) -> None:
    """Names the directories an interrupted (or still running) conversion left beside `final`."""
    if not final.parent.is_dir():
        return
    for p in sorted(final.parent.iterdir()):
        if p.name.startswith(final.name + INCOMPLETE):
            log(f"note: {p} is left from an interrupted or running conversion: the new output, unfinished, or "
                f"finished but not yet renamed to {final.name}; delete it once no conversion runs")
        elif p.name.startswith(final.name + PREVIOUS):
            log(f"note: {p} holds what an interrupted --force conversion moved aside from {final}; "
                f"{'move it back to ' + str(final) if not final.exists() else 'delete it'} unless it is still running")


def _staging_dir(final: Path) -> Path:
    """A new private directory beside `final` (same filesystem, so the rename is atomic)."""
    final.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(dir=final.parent, prefix=final.name + INCOMPLETE))


def _dir_mode(final: Path) -> int:
    """The mode the new directory gets: the replaced one's, else mkdir's (mkdtemp makes 0700,
    which would hide an export from everyone else)."""
    if final.is_dir():
        return stat.S_IMODE(final.stat().st_mode)
    umask = os.umask(0o022)
    os.umask(umask)
    return 0o777 & ~umask


def _unchanged(final: Path) -> str:
    """What a failed conversion left at `final` (its output is written beside it, then renamed)."""
    return (f"{final} is as it was (the partial output was removed)" if final.exists()
            else "nothing was written there (the partial output was removed)")


def _is_empty_dir(path: Path) -> bool:
    return path.is_dir() and not any(path.iterdir())


def _put_in_place(staged: Path, final: Path, replace: bool, log) -> None:
    """Renames the complete directory `staged` to `final`; a non-empty `final` only if `replace`."""
    os.chmod(staged, _dir_mode(final))
    if not final.exists() or _is_empty_dir(final) or not replace:
        try:
            os.rename(staged, final)  # onto an empty directory too; fails if one appeared and filled meanwhile
        except OSError as e:
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR):
                raise RunError(f"{final}: was filled by something else while this conversion ran; "
                               "the new output was discarded and that directory left as it is") from None
            raise
        return
    aside = Path(tempfile.mkdtemp(dir=final.parent, prefix=final.name + PREVIOUS))
    try:
        os.rename(final, aside)  # onto the empty placeholder that reserved the name
    except BaseException:
        os.rmdir(aside)
        raise
    # A crash right here, between the two renames, leaves no `final`: the previous output whole
    # in NAME.previous-XXXXXX and the new one whole in NAME.incomplete-XXXXXX. Renaming either
    # to NAME restores a complete directory; the next conversion into NAME names both
    # (`note_leftovers`).
    try:
        os.rename(staged, final)
    except BaseException:
        os.rename(aside, final)
        raise
    shutil.rmtree(aside, ignore_errors=True)
    if aside.exists():
        log(f"warning: could not remove {aside} (the replaced output); delete it")


def _link_or_copy(src, dst) -> None:
    # a hard link costs no space and no time; the replaced directory is deleted right after
    try:
        os.link(src, dst, follow_symlinks=False)
    except OSError:
        shutil.copy2(src, dst, follow_symlinks=False)


def _carry_over(old: Path, new: Path) -> tuple[list[str], list[str], list[str]]:
    """Brings the entries of `old` that belong to no model into `new`; returns the names
    (kept, replaced by the new output, removed as another model's files)."""
    kept, replaced, removed = [], [], []
    for entry in sorted(old.iterdir()):
        dst = new / entry.name
        if dst.exists() or dst.is_symlink():
            replaced.append(entry.name)
        elif belongs_to_a_model(entry.name):
            removed.append(entry.name)
        else:
            if entry.is_symlink():
                os.symlink(os.readlink(entry), dst)
            elif entry.is_dir():
                shutil.copytree(entry, dst, symlinks=True, copy_function=_link_or_copy)
            else:
                _link_or_copy(entry, dst)
            kept.append(entry.name)
    return kept, replaced, removed


# ----------------------------------------------------------------------------- streaming orbax save


class OrbaxInternalsMissing(RuntimeError):
    """The installed orbax lacks an internal name `lazy_array_params_handler` relies on."""

    def __init__(self, symbol: str):
        import orbax.checkpoint as ocp

        self.symbol = symbol
        version = getattr(ocp, "__version__", "?")
        super().__init__(f"orbax-checkpoint {version} has no {symbol} (convert.lazy_array_params_handler was "
                         "written against orbax-checkpoint 0.12.8)")


def lazy_array_params_handler(failures: Optional[list] = None):
    """(handler, save-args class) for a params item whose leaves are LazyArrays: each leaf is
    materialised only while it is written, one after the other. Raises OrbaxInternalsMissing
    naming the first orbax name that is gone.

    A leaf that fails to load (an unreadable tensor, a value float16 cannot hold) stops the
    writing and is appended to `failures` instead of raised: raised in orbax's writer thread it
    would reach the user as orbax's logged traceback. The caller raises it after the save and
    discards the checkpoint, which lacks the leaves from that one on.

    Written against orbax-checkpoint 0.12.8. Why: orbax's StandardSave takes the whole pytree
    and its numpy handler deep-copies every leaf before writing them all concurrently, so a
    from-hf conversion would hold the model twice in RAM. orbax has no public way to stream
    leaves, so this is the one place in easylemur that uses orbax internals:
      - `NumpyHandler._background_serialize`: the write of arrays already in memory, called
        here one leaf at a time;
      - `StandardCheckpointHandler()._impl`: the PyTreeCheckpointHandler it wraps, replaced by
        one whose type registry knows LazyArray (so the step metadata still names
        StandardCheckpointHandler, exactly as `model_meta.save_params` writes);
      - `StandardCheckpointHandler()._supported_types`: its leaf-type check, extended with
        LazyArray.
    tests/test_convert.py::test_orbax_internals_for_streaming_save fails naming the symbol
    when an orbax upgrade removes one; `save_streaming` then falls back to the public API."""
    import jax
    import orbax.checkpoint as ocp
    from orbax.checkpoint import future, type_handlers

    if not hasattr(type_handlers.NumpyHandler, "_background_serialize"):
        raise OrbaxInternalsMissing("orbax.checkpoint.type_handlers.NumpyHandler._background_serialize")
    handler = ocp.StandardCheckpointHandler()
    for name in ("_impl", "_supported_types"):
        if not hasattr(handler, name):
            raise OrbaxInternalsMissing(f"orbax.checkpoint.StandardCheckpointHandler().{name}")

    class LazyNumpyHandler(type_handlers.NumpyHandler):
        # typestr stays "np.ndarray": the checkpoint must read back exactly like save_params'.
        def __init__(self):
            super().__init__(deepcopy_host_arrays=False)

        async def serialize(self, values, infos, args=None):
            args = args or [ocp.SaveArgs()] * len(values)

            async def one_at_a_time():
                for value, info, arg in zip(values, infos, args):
                    if failures:
                        return
                    try:
                        arr = value()
                    except Exception as e:
                        if failures is None:
                            raise
                        failures.append(e)
                        return
                    await self._background_serialize([arr], [info], [arg])
                    del arr

            return [future.CommitFutureAwaitingContractedSignals(one_at_a_time(), name="easylemur_lazy_numpy")]

    # jax.Array's handler is there only so orbax keeps writing its array-metadata store, as
    # it does for save_params; every leaf here is a LazyArray.
    registry = type_handlers.create_type_handler_registry((jax.Array, type_handlers.ArrayHandler()),
                                                          (LazyArray, LazyNumpyHandler()))
    handler._impl = ocp.PyTreeCheckpointHandler(type_handler_registry=registry)
    handler._supported_types = (*handler._supported_types, LazyArray)
    return handler, ocp.args.StandardSave


def check_checkpoint_out(out: str | Path, overwrite: bool) -> Path:
    """Refuses an `out` whose checkpoints from-hf must not replace; returns `out` as a local
    real path. Without --force any checkpoint there is refused; with it only a parameter-only
    step 0 (an earlier from-hf or `save_params`) is replaced: a training run's checkpoints hold
    optimizer state and a history no conversion can give back."""
    final = _local_dir(out)
    ckdir = final / "checkpoints"
    if ckdir.exists() and not ckdir.is_dir():
        raise ConvertError(f"--out {out}: {ckdir} exists and is not a directory")
    held = sorted(p.name for p in ckdir.iterdir()) if ckdir.is_dir() else []
    if not held:
        return final
    steps = sorted((p for p in held if p.isdigit()), key=int)
    if not overwrite:
        what = f"checkpoints (steps {', '.join(steps)})" if steps else f"files ({_names(held)})"
        raise ConvertError(f"--out {out}: {ckdir} already holds {what}; choose an empty directory or pass --force")
    trained = [s for s in steps if (ckdir / s / "opt_state").exists()]
    if trained or steps != ["0"] or held != ["0"]:
        why = f"step {trained[0]} has optimizer state" if trained else f"it holds {_names(held)}"
        raise ConvertError(f"--out {out}: {ckdir} is not a parameter-only step-0 checkpoint ({why}); from-hf "
                           "--force replaces only an earlier conversion, never a training run; choose another directory")
    return final


def save_streaming(out: str | Path, params: Any, meta: dict, overwrite: bool = False, log=None) -> Path:
    """Writes a parameter-only step-0 checkpoint `out/checkpoints/0` from a tree whose leaves
    may be LazyArrays; returns the step directory.

    The checkpoint is written into a new directory and renamed into place when complete: to
    `out` when `out` does not exist yet, else to `out/checkpoints` (what else `out` holds is
    left alone). A previous conversion there (`overwrite`, see `check_checkpoint_out`) is
    replaced only then, so a failed conversion leaves it as it was."""
    import jax
    import orbax.checkpoint as ocp

    log = log or (lambda msg: print(msg, file=sys.stderr))
    final = check_checkpoint_out(out, overwrite)
    target = final / "checkpoints" if final.is_dir() else final
    note_leftovers(target, log)
    staged = _staging_dir(target)
    ckdir = staged if target != final else staged / "checkpoints"
    failures: list = []  # a leaf that failed to load (see lazy_array_params_handler)
    try:
        try:
            handler, save_args = lazy_array_params_handler(failures)
        except OrbaxInternalsMissing as e:
            log(f"note: {e}; saving through orbax's public StandardSave instead, which holds the whole model "
                "in memory (about twice)")
            handler, save_args = ocp.StandardCheckpointHandler(), ocp.args.StandardSave
            params = jax.tree.map(lambda x: x() if isinstance(x, LazyArray) else x, params)
        mngr = ocp.CheckpointManager(
            ckdir,
            options=ocp.CheckpointManagerOptions(create=True, enable_async_checkpointing=False),
            item_handlers={"params": handler, "meta": ocp.JsonCheckpointHandler()},
        )
        try:
            mngr.save(0, args=ocp.args.Composite(params=save_args(params), meta=ocp.args.JsonSave(meta)), force=True)
            mngr.wait_until_finished()
        except Exception as e:
            if failures:  # a leaf that could not be read stopped the writing: that is the error
                raise failures[0] from None
            # a full disk, a permission: the writer's error (tensorstore's RESOURCE_EXHAUSTED
            # for ENOSPC) says little on its own; name the output and the OS's words
            raise RunError(f"--out {out}: writing the checkpoint {final / 'checkpoints' / '0'} failed: "
                           f"{store.write_failure_cause(e)}; {_unchanged(final)}") from e
        finally:
            mngr.close()
        if failures:
            raise failures[0]
        check_checkpoint_out(out, overwrite)  # again: what is there now is what gets replaced
        # a whole new `out` never replaces one that appeared meanwhile; checkpoints/ may be replaced
        _put_in_place(staged, target, overwrite and target != final, log)
    except BaseException:
        shutil.rmtree(staged, ignore_errors=True)
        raise
    return final / "checkpoints" / "0"


# ----------------------------------------------------------------------------- from-hf


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
        raise ConvertError(f"--hf {hf_dir}: not a directory")
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
        if source_template and not (tok is not None and tok.kind == "hf" and tok.config.get("chat_template")):
            # the embedded tokenizer does not carry it (sentencepiece, or a chat_template.jinja file)
            extra["chat_template"] = source_template
        meta = model_meta.make_meta(0, out_cfg, tok_path, stop_ids=stops, source={
            "converted_from": "hf", "hf_dir": str(hf_dir.absolute()), "hf_vocab_size": cfg.vocab_size}, **extra)
        step_dir = save_streaming(out, tree, meta, overwrite=overwrite, log=log)
    return step_dir


# ----------------------------------------------------------------------------- to-hf


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


def check_export_out(out: str | Path, checkpoint_path: str | Path, overwrite: bool) -> Path:
    """`out` as a local real path. A directory that is not empty is refused unless `overwrite`;
    one that holds easylemur checkpoints, or the checkpoint being exported, always."""
    final = _local_dir(out)
    if not is_url(checkpoint_path) and _inside(checkpoint_path, final):
        raise ConvertError(f"--out {out} holds the checkpoint being exported ({checkpoint_path}); "
                           "choose a directory outside it")
    held = sorted(p.name for p in final.iterdir()) if final.is_dir() else []
    if (final / "checkpoints").is_dir() or ((final / "meta").is_dir() and final.name.isdigit()) or any(
            n.isdigit() and (final / n / "meta").is_dir() for n in held):
        raise ConvertError(f"--out {out}: holds easylemur checkpoints; to-hf never writes into a workdir or "
                           "checkpoint directory, even with --force; choose another directory")
    if held and not overwrite:
        raise ConvertError(f"--out {out}: not empty (holds {_names(held)}); choose a new or empty directory, or pass "
                           "--force to replace the model there (its weight, config and tokenizer files go, other "
                           "files stay)")
    return final


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
            if tok.kind == "spm" and write_fast_tokenizer(staged, tok, notes.append):
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


# ----------------------------------------------------------------------------- CLI


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m easylemur.convert", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True, metavar="{from-hf,to-hf}")
    a = sub.add_parser("from-hf", help="HF Llama directory -> easylemur checkpoint",
                       description="Convert a Hugging Face Llama directory (config.json + safetensors, sharded or "
                                   "not, or pytorch_model*.bin) into an easylemur checkpoint OUT/checkpoints/0.")
    a.add_argument("--hf", required=True, metavar="DIR", help="the HF model directory")
    a.add_argument("--out", required=True, metavar="CKPT", help="output directory (a workdir-shaped folder)")
    a.add_argument("--param-dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                   help="stored parameter dtype; auto (default) keeps the HF files' dtype")
    a.add_argument("--tokenizer", default=None, metavar="PATH",
                   help="sentencepiece model to embed (default: DIR/tokenizer.model when present)")
    a.add_argument("--add-chatml-tokens", action="store_true",
                   help="add <|im_start|>/<|im_end|> to the tokenizer and grow the embedding and LM head "
                        "(new rows = mean of the existing rows)")
    a.add_argument("--force", action="store_true",
                   help="replace an earlier conversion in --out (never a training run's checkpoints)")
    b = sub.add_parser("to-hf", help="easylemur checkpoint -> HF directory",
                       description="Export an easylemur checkpoint as a Hugging Face Llama directory: sharded "
                                   "safetensors + index, config.json, generation_config.json, tokenizer files; "
                                   "a chat template (and the <|im_end|> stop) only for a chat-tuned model.")
    b.add_argument("--checkpoint", required=True, metavar="CKPT", help="a workdir (newest step), checkpoints dir or step dir")
    b.add_argument("--step", type=int, default=None, help="step to export (default: the newest)")
    b.add_argument("--out", required=True, metavar="DIR", help="output HF directory")
    b.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"],
                   help="tensor dtype of the export (default bfloat16; float16 is refused if a value overflows it)")
    b.add_argument("--max-shard-size", default="5GB", metavar="SIZE",
                   help="largest shard file, e.g. 5GB (default), 500MB, 2GiB or bytes")
    b.add_argument("--force", action="store_true",
                   help="replace the model in a non-empty --out (its weight, config and tokenizer files are "
                        "removed and listed; other files are kept)")
    tmpl = b.add_mutually_exclusive_group()
    tmpl.add_argument("--chat-template", nargs="?", const="auto", choices=["auto", "chatml", "model"], default=None,
                      help="write a chat template whatever the checkpoint's chat_format says: chatml (ChatML's), "
                           "model (the tokenizer's own); auto or bare: the tokenizer's own when it has one, else ChatML's")
    tmpl.add_argument("--no-chat-template", action="store_const", const="none", dest="chat_template",
                      help="write no chat template (and no <|im_end|> stop the source did not declare)")
    for p in (ap, a, b):
        add_debug_flag(p)
    return ap


def _main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.cmd == "from-hf":
        step_dir = from_hf(args.hf, args.out, param_dtype=args.param_dtype, tokenizer=args.tokenizer,
                           add_chatml_tokens=args.add_chatml_tokens, overwrite=args.force)
        print(json.dumps({"checkpoint": str(step_dir)}))
    else:
        out = to_hf(args.checkpoint, args.out, step=args.step, dtype=args.dtype,
                    max_shard_size=args.max_shard_size, overwrite=args.force, chat_template=args.chat_template)
        print(json.dumps({"hf_dir": str(out)}))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI: one line `error: ...` on stderr and exit 2 for bad input (`InputError`), 1 for a
    conversion that failed; the traceback only with --debug (`errors.run_cli`)."""
    return run_cli(_main, argv)
