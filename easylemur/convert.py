"""Hugging Face <-> easylemur checkpoint converters, streaming one tensor at a time.

    python -m easylemur.convert from-hf --hf DIR --out CKPT [--param-dtype auto] [--add-chatml-tokens]
    python -m easylemur.convert to-hf --checkpoint CKPT [--step N] --out DIR [--dtype bfloat16] [--max-shard-size 5GB]

from-hf writes the checkpoint format `easylemur.checkpoint` reads (an orbax CheckpointManager
directory `CKPT/checkpoints/0/` with items `params` and `meta`), so `init.from=CKPT`,
`easylemur.load(CKPT)` and `checkpoint.load_params(CKPT)` all take it. Parameters keep the HF
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
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from easylemur import checkpoint, hf
from easylemur.errors import InputError
from easylemur.models.llama import LlamaConfig, param_specs
from easylemur.safetensors_io import (
    LazyArray,
    TensorFileError,
    parse_size,
    write_sharded_safetensors,
)
from easylemur.tokenizer import Tokenizer, TokenizerError, extend_model
from easylemur.vocab import grow_rows


class ConvertError(InputError):
    """A conversion that cannot be done faithfully; the message names the bad value."""


def _np_dtype(name: str) -> np.dtype:
    import ml_dtypes

    table = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(ml_dtypes.bfloat16), "float16": np.dtype(np.float16)}
    if name not in table:
        raise ConvertError(f"dtype {name!r} is not one of {', '.join(table)}")
    return table[name]


def _dtype_name(dt: np.dtype) -> str:
    return {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}[np.dtype(dt).name]


def cast(name: str, x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """x in dtype; refuses a float16 cast that would turn a value into inf."""
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
                "export with --dtype bfloat16 or --dtype float32"
            )
    return x.astype(dtype)


# ----------------------------------------------------------------------------- streaming orbax save


class OrbaxInternalsMissing(RuntimeError):
    """The installed orbax lacks an internal name `lazy_array_params_handler` relies on."""

    def __init__(self, symbol: str):
        import orbax.checkpoint as ocp

        self.symbol = symbol
        version = getattr(ocp, "__version__", "?")
        super().__init__(f"orbax-checkpoint {version} has no {symbol} (convert.lazy_array_params_handler was "
                         "written against orbax-checkpoint 0.12.8)")


def lazy_array_params_handler():
    """(handler, save-args class) for a params item whose leaves are LazyArrays: each leaf is
    materialised only while it is written, one after the other. Raises OrbaxInternalsMissing
    naming the first orbax name that is gone.

    Written against orbax-checkpoint 0.12.8. Why: orbax's StandardSave takes the whole pytree
    and its numpy handler deep-copies every leaf before writing them all concurrently, so a
    from-hf conversion would hold the model twice in RAM. orbax has no public way to stream
    leaves, so this is the one place in easylemur that uses orbax internals:
      - `NumpyHandler._background_serialize`: the write of arrays already in memory, called
        here one leaf at a time;
      - `StandardCheckpointHandler()._impl`: the PyTreeCheckpointHandler it wraps, replaced by
        one whose type registry knows LazyArray (so the step metadata still names
        StandardCheckpointHandler, exactly as `checkpoint.save_params` writes);
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
                    arr = value()
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


def save_streaming(out: str | Path, params: Any, meta: dict, overwrite: bool = False, log=None) -> Path:
    """Writes a parameter-only step-0 checkpoint `out/checkpoints/0` from a tree whose leaves
    may be LazyArrays; returns the step directory."""
    import jax
    import orbax.checkpoint as ocp

    log = log or (lambda msg: print(msg, file=sys.stderr))
    ckdir = (Path(out) / "checkpoints").absolute()
    if ckdir.is_dir() and any(p.name.isdigit() for p in ckdir.iterdir()):
        if not overwrite:
            steps = sorted(p.name for p in ckdir.iterdir() if p.name.isdigit())
            raise ConvertError(f"--out {out}: {ckdir} already holds checkpoints (steps {', '.join(steps)}); "
                               "choose an empty directory or pass --force")
        shutil.rmtree(ckdir)
    try:
        handler, save_args = lazy_array_params_handler()
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
    finally:
        mngr.close()
    return ckdir / "0"


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
    cfg = hf.read_hf_config(hf_dir)
    pairs = hf.check_hf_tensors(hf_dir, hf.index_hf_tensors(hf_dir), cfg)
    store = _store_dtype(param_dtype, pairs)

    tok_path: Optional[Path] = Path(tokenizer) if tokenizer else None
    if tok_path is not None and tok_path.is_dir():
        tok_path = tok_path / "tokenizer.model"
    if tok_path is None and (hf_dir / "tokenizer.model").is_file():
        tok_path = hf_dir / "tokenizer.model"
    if tok_path is not None and not tok_path.is_file():
        raise ConvertError(f"--tokenizer {tok_path}: no such sentencepiece model file")
    if tok_path is None:
        log(f"note: {hf_dir} has no tokenizer.model; the checkpoint carries no tokenizer")

    vocab_size = cfg.vocab_size
    with tempfile.TemporaryDirectory() as tmp:
        if add_chatml_tokens:
            if tok_path is None:
                raise ConvertError("--add-chatml-tokens needs a sentencepiece tokenizer.model "
                                   f"(none in {hf_dir}; pass --tokenizer PATH)")
            report = extend_model(str(tok_path), str(Path(tmp) / "tokenizer.model"))
            tok_path = Path(report["model"])
            # New pieces get ids after the tokenizer's last; an embedding already padded past
            # the tokenizer (some checkpoints are) has rows for them.
            vocab_size = max(cfg.vocab_size, int(report["vocab_size"]))
            log(f"ChatML tokens {report['added'] or '(already present)'}; vocabulary {cfg.vocab_size} -> {vocab_size}")
        if tok_path is not None:
            n_tok = Tokenizer(str(tok_path)).vocab_size
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
                x = m.to_flax(cast(m.hf_name, src.read(), store))
                return x if grow is None else grow_rows(x, vocab_size, axis=grow)

            shape = hf.get_path(shapes, m.path).shape
            hf.set_path(tree, m.path, LazyArray(shape, store, load))

        meta = checkpoint.make_meta(0, out_cfg, tok_path, source={
            "converted_from": "hf", "hf_dir": str(hf_dir.absolute()), "hf_vocab_size": cfg.vocab_size})
        step_dir = save_streaming(out, tree, meta, overwrite=overwrite, log=log)
    return step_dir


# ----------------------------------------------------------------------------- to-hf


class CheckpointTensors:
    """Reads an easylemur checkpoint's params one leaf (or one layer of a stacked leaf) at a
    time, straight from orbax's on-disk layout with tensorstore."""

    def __init__(self, path: str | Path, step: int | None = None):
        self.saved = checkpoint.read_meta(path, step)
        self.cfg: LlamaConfig = self.saved.model_config
        self.params_dir = (self.saved.path / "params").absolute()
        md_file = self.params_dir / "_METADATA"
        if not md_file.is_file():
            raise checkpoint.CheckpointError(f"{self.params_dir}: no _METADATA; not an orbax params item")
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


def to_hf(checkpoint_path: str | Path, out: str | Path, *, step: int | None = None, dtype: str = "bfloat16",
          max_shard_size: str | int = "5GB", overwrite: bool = False, log=None) -> Path:
    """easylemur checkpoint -> HF directory (sharded safetensors + index, config.json,
    generation_config.json, tokenizer files with the ChatML chat template); returns out."""
    log = log or (lambda msg: print(msg, file=sys.stderr))
    target = _np_dtype(dtype)
    try:
        max_bytes = parse_size(max_shard_size)
    except ValueError as e:
        raise ConvertError(f"--max-shard-size: {e}") from None
    reader = CheckpointTensors(checkpoint_path, step)
    cfg = dataclasses.replace(reader.cfg, scan_layers=False)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConvertError(f"--out {out}: exists and is not a directory")
    old = sorted(out.glob("model*.safetensors")) + sorted(out.glob("*.index.json")) if out.is_dir() else []
    if old and not overwrite:
        raise ConvertError(f"--out {out}: already holds a model ({old[0].name}); choose an empty directory or pass --force")
    out.mkdir(parents=True, exist_ok=True)
    for f in old:
        f.unlink()

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
    index = write_sharded_safetensors(out, items, max_bytes)

    tok_path = reader.saved.tokenizer_path()
    eos_ids = [cfg.eos_token_id]
    pad_id = None
    if tok_path is not None:
        tok = Tokenizer(str(tok_path))
        if tok.vocab_size > cfg.vocab_size:
            log(f"warning: tokenizer has {tok.vocab_size} pieces, the model {cfg.vocab_size} rows")
        tok.save_hf(out)
        if tok.has_chatml:
            eos_ids.append(tok.im_end_id)  # chat models end a turn with <|im_end|>, never EOS
        pad_id = tok.pad_id
    else:
        log("note: the checkpoint carries no tokenizer; none written")
    (out / "config.json").write_text(json.dumps(hf.config_to_hf(cfg, torch_dtype=dtype), indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps(hf.generation_config(cfg, eos_ids, pad_id), indent=2) + "\n")
    n_files = len(set(index["weight_map"].values()))
    log(f"wrote {len(items)} tensors ({index['metadata']['total_size'] / 1e9:.3g} GB, {dtype}) in {n_files} shard(s) to {out}")
    return out


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
    a.add_argument("--force", action="store_true", help="replace checkpoints already in --out")
    b = sub.add_parser("to-hf", help="easylemur checkpoint -> HF directory",
                       description="Export an easylemur checkpoint as a Hugging Face Llama directory: sharded "
                                   "safetensors + index, config.json, generation_config.json, tokenizer files "
                                   "with the ChatML chat template.")
    b.add_argument("--checkpoint", required=True, metavar="CKPT", help="a workdir (newest step), checkpoints dir or step dir")
    b.add_argument("--step", type=int, default=None, help="step to export (default: the newest)")
    b.add_argument("--out", required=True, metavar="DIR", help="output HF directory")
    b.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"],
                   help="tensor dtype of the export (default bfloat16; float16 is refused if a value overflows it)")
    b.add_argument("--max-shard-size", default="5GB", metavar="SIZE",
                   help="largest shard file, e.g. 5GB (default), 500MB, 2GiB or bytes")
    b.add_argument("--force", action="store_true", help="replace model files already in --out")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.cmd == "from-hf":
            step_dir = from_hf(args.hf, args.out, param_dtype=args.param_dtype, tokenizer=args.tokenizer,
                               add_chatml_tokens=args.add_chatml_tokens, overwrite=args.force)
            print(json.dumps({"checkpoint": str(step_dir)}))
        else:
            out = to_hf(args.checkpoint, args.out, step=args.step, dtype=args.dtype,
                        max_shard_size=args.max_shard_size, overwrite=args.force)
            print(json.dumps({"hf_dir": str(out)}))
    except (ConvertError, hf.HFFormatError, TensorFileError, checkpoint.CheckpointError, TokenizerError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
