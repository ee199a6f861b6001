"""Hugging Face Llama format: config mapping, tensor names and layouts, streaming safetensors I/O.

Every fact about HF's layout lives here (DESIGN.md §4): Linear weights are [out, in] and Flax
kernels are their transpose, reshaped so heads are a dimension of their own. The mapping is a
table of (HF name, param path, to_flax, to_hf), so readers and writers can go tensor by tensor.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
from pathlib import Path
from typing import Any, Callable, Iterator

import ml_dtypes
import numpy as np

from easylemur.models.llama import SUPPORTED_ROPE_TYPES, LlamaConfig


class HFFormatError(ValueError):
    """An HF directory easylemur cannot read faithfully; the message names file and field."""


# ----------------------------------------------------------------------------- config


def config_from_hf(hf: dict, source: str = "config.json", **overrides) -> LlamaConfig:
    """LlamaConfig from an HF config dict; unsupported features are errors naming the field."""

    def fail(field, why):
        raise HFFormatError(f"{source}: {field} {why}")

    model_type = hf.get("model_type")
    if model_type != "llama":
        fail("model_type", f"is {model_type!r}; only 'llama' models are supported")
    if hf.get("hidden_act", "silu") != "silu":
        fail("hidden_act", f"is {hf['hidden_act']!r}; only 'silu' (SwiGLU) is supported")
    for flag in ("attention_bias", "mlp_bias"):
        if hf.get(flag):
            fail(flag, "is true; Llama projections without biases are the only layout supported")
    if float(hf.get("attention_dropout", 0.0) or 0.0) != 0.0:
        fail("attention_dropout", "is non-zero; not supported")

    # transformers 5 writes rope_parameters; older configs and other loaders use
    # rope_theta + rope_scaling. Read both; rope_parameters wins where both exist.
    params = dict(hf.get("rope_parameters") or {})
    scaling = dict(hf.get("rope_scaling") or {})
    theta = params.pop("rope_theta", hf.get("rope_theta", 10000.0))
    merged = {**scaling, **params}
    rope_type = merged.pop("rope_type", merged.pop("type", "default"))
    if rope_type not in SUPPORTED_ROPE_TYPES:
        fail("rope_scaling.rope_type", f"is {rope_type!r}; supported: {', '.join(SUPPORTED_ROPE_TYPES)}")
    rope_scaling = None
    if rope_type != "default":
        merged.pop("partial_rotary_factor", None)
        rope_scaling = tuple(sorted({"rope_type": rope_type, **merged}.items()))
    if float(hf.get("partial_rotary_factor", 1.0) or 1.0) != 1.0:
        fail("partial_rotary_factor", "is not 1.0; partial RoPE is not supported")

    def _int(v, default):
        if isinstance(v, list):
            return int(v[0]) if v else default
        return default if v is None else int(v)

    n_heads = int(hf["num_attention_heads"])
    cfg = dict(
        vocab_size=int(hf["vocab_size"]),
        hidden_size=int(hf["hidden_size"]),
        intermediate_size=int(hf["intermediate_size"]),
        num_layers=int(hf["num_hidden_layers"]),
        num_heads=n_heads,
        num_kv_heads=int(hf.get("num_key_value_heads") or n_heads),
        head_dim=hf.get("head_dim"),
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        rope_theta=float(theta),
        rope_scaling=rope_scaling,
        max_position_embeddings=int(hf.get("max_position_embeddings", 4096)),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        bos_token_id=_int(hf.get("bos_token_id"), 1),
        eos_token_id=_int(hf.get("eos_token_id"), 2),
    )
    if cfg["head_dim"] is not None and int(cfg["head_dim"]) == cfg["hidden_size"] // n_heads:
        cfg["head_dim"] = None
    cfg.update(overrides)
    try:
        return LlamaConfig(**cfg)
    except ValueError as e:
        raise HFFormatError(f"{source}: {e}") from None


def config_to_hf(cfg: LlamaConfig, eos_token_ids: list[int] | None = None, torch_dtype: str = "bfloat16") -> dict:
    """config.json that transformers 5 and older loaders (vLLM, TGI) both read."""
    scaling = cfg.rope_scaling_dict
    rope_parameters = {"rope_theta": cfg.rope_theta, "rope_type": cfg.rope_type, **scaling}
    rope_parameters["rope_type"] = cfg.rope_type
    legacy_scaling = None
    if cfg.rope_type != "default":
        legacy_scaling = {**scaling, "rope_type": cfg.rope_type}
        legacy_scaling.setdefault("type", cfg.rope_type)
    eos = eos_token_ids or [cfg.eos_token_id]
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.hd,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "max_position_embeddings": cfg.max_position_embeddings,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": legacy_scaling,
        "rope_parameters": rope_parameters,
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": eos[0] if len(eos) == 1 else eos,
        "initializer_range": 0.02,
        "pretraining_tp": 1,
        "use_cache": True,
        "torch_dtype": torch_dtype,
        "dtype": torch_dtype,
    }


# ----------------------------------------------------------------------------- tensor layout


@dataclasses.dataclass(frozen=True)
class TensorMap:
    hf_name: str
    path: tuple[str, ...]  # into the (unscanned) params tree
    hf_shape: tuple[int, ...]
    to_flax: Callable[[np.ndarray], np.ndarray]
    to_hf: Callable[[np.ndarray], np.ndarray]


def _linear(out_dims: tuple, in_dims: tuple) -> tuple[Callable, Callable]:
    """HF [out, in] <-> Flax [*in_dims, *out_dims]."""
    n_in, n_out = int(np.prod(in_dims)), int(np.prod(out_dims))
    return (
        lambda w: np.ascontiguousarray(w.reshape(n_out, n_in).T).reshape(*in_dims, *out_dims),
        lambda k: np.ascontiguousarray(k.reshape(n_in, n_out).T),
    )


def _same():
    return (lambda w: w, lambda k: k)


def tensor_maps(cfg: LlamaConfig) -> list[TensorMap]:
    d, f, hd, H, KV, V = cfg.hidden_size, cfg.intermediate_size, cfg.hd, cfg.num_heads, cfg.num_kv_heads, cfg.vocab_size
    maps = [TensorMap("model.embed_tokens.weight", ("embed_tokens", "embedding"), (V, d), *_same())]
    for i in range(cfg.num_layers):
        p, h = f"layers_{i}", f"model.layers.{i}"
        maps += [
            TensorMap(f"{h}.input_layernorm.weight", (p, "input_layernorm", "scale"), (d,), *_same()),
            TensorMap(f"{h}.post_attention_layernorm.weight", (p, "post_attention_layernorm", "scale"), (d,), *_same()),
            TensorMap(f"{h}.self_attn.q_proj.weight", (p, "self_attn", "q_proj", "kernel"), (H * hd, d), *_linear((H, hd), (d,))),
            TensorMap(f"{h}.self_attn.k_proj.weight", (p, "self_attn", "k_proj", "kernel"), (KV * hd, d), *_linear((KV, hd), (d,))),
            TensorMap(f"{h}.self_attn.v_proj.weight", (p, "self_attn", "v_proj", "kernel"), (KV * hd, d), *_linear((KV, hd), (d,))),
            TensorMap(f"{h}.self_attn.o_proj.weight", (p, "self_attn", "o_proj", "kernel"), (d, H * hd), *_linear((d,), (H, hd))),
            TensorMap(f"{h}.mlp.gate_proj.weight", (p, "mlp", "gate_proj", "kernel"), (f, d), *_linear((f,), (d,))),
            TensorMap(f"{h}.mlp.up_proj.weight", (p, "mlp", "up_proj", "kernel"), (f, d), *_linear((f,), (d,))),
            TensorMap(f"{h}.mlp.down_proj.weight", (p, "mlp", "down_proj", "kernel"), (d, f), *_linear((d,), (f,))),
        ]
    maps.append(TensorMap("model.norm.weight", ("norm", "scale"), (d,), *_same()))
    if not cfg.tie_word_embeddings:
        maps.append(TensorMap("lm_head.weight", ("lm_head", "kernel"), (V, d), *_linear((V,), (d,))))
    return maps


# Buffers some exporters write that carry no weights.
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)


def scan_params(params: dict, num_layers: int) -> dict:
    """Unscanned tree (layers_{i}) -> scanned tree (layers, leading [L] axis)."""
    out = {k: v for k, v in params.items() if not k.startswith("layers_")}
    layers = [params[f"layers_{i}"] for i in range(num_layers)]
    import jax

    out["layers"] = jax.tree.map(lambda *xs: np.stack(xs), *layers)
    return out


def unscan_params(params: dict, num_layers: int) -> dict:
    import jax

    out = {k: v for k, v in params.items() if k != "layers"}
    for i in range(num_layers):
        out[f"layers_{i}"] = jax.tree.map(lambda x: x[i], params["layers"])
    return out


# ----------------------------------------------------------------------------- safetensors


_ST_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}
_ST_NAMES = {np.dtype(v): k for k, v in _ST_DTYPES.items()}


def read_safetensors_header(path: str | Path) -> tuple[dict, int]:
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise HFFormatError(f"{path}: not a safetensors file (too short)")
        (n,) = struct.unpack("<Q", raw)
        if n > 100 * 2**20:
            raise HFFormatError(f"{path}: not a safetensors file (header of {n} bytes)")
        try:
            header = json.loads(f.read(n))
        except json.JSONDecodeError as e:
            raise HFFormatError(f"{path}: corrupt safetensors header: {e}") from None
    return header, 8 + n


def iter_safetensors(path: str | Path) -> Iterator[tuple[str, np.ndarray]]:
    """(name, array) for each tensor, memory-mapped: nothing is read until it is used."""
    header, start = read_safetensors_header(path)
    mm = np.memmap(path, dtype=np.uint8, mode="r")
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if info["dtype"] not in _ST_DTYPES:
            raise HFFormatError(f"{path}: tensor {name} has unsupported dtype {info['dtype']}")
        lo, hi = info["data_offsets"]
        dtype = np.dtype(_ST_DTYPES[info["dtype"]])
        arr = mm[start + lo : start + hi].view(dtype).reshape(info["shape"])
        yield name, arr


def write_safetensors(path: str | Path, tensors: Iterator[tuple[str, np.ndarray]] | list, metadata: dict | None = None) -> None:
    """Writes tensors one at a time (the list of names and shapes must be known up front, so
    pass a list of (name, array-or-thunk)); memory use is one tensor at a time."""
    items = list(tensors)
    header: dict[str, Any] = {"__metadata__": {"format": "pt", **(metadata or {})}}
    offset = 0
    for name, arr in items:
        shape, dtype = _shape_dtype(arr)
        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        header[name] = {"dtype": _ST_NAMES[np.dtype(dtype)], "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    tmp = Path(str(path) + ".tmp")
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for name, arr in items:
            a = np.ascontiguousarray(arr() if callable(arr) else arr)
            f.write(memoryview(a.reshape(-1).view(np.uint8)))
            del a
    os.replace(tmp, path)


def _shape_dtype(arr) -> tuple[tuple, Any]:
    if callable(arr) and hasattr(arr, "shape"):
        return tuple(arr.shape), arr.dtype
    if callable(arr):
        raise TypeError("a lazy tensor must carry .shape and .dtype")
    return tuple(arr.shape), arr.dtype


# ----------------------------------------------------------------------------- reading a directory


def is_hf_dir(path: str | Path) -> bool:
    path = Path(path)
    return (path / "config.json").is_file() and bool(_weight_files(path, required=False))


def _weight_files(path: Path, required: bool = True) -> list[Path]:
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = path / index_name
        if index.is_file():
            files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
            missing = [f for f in files if not (path / f).is_file()]
            if missing:
                raise HFFormatError(f"{index}: shard files missing: {', '.join(missing)}")
            return [path / f for f in files]
    for pattern in ("*.safetensors", "pytorch_model*.bin"):
        files = sorted(path.glob(pattern))
        if files:
            return files
    if required:
        raise HFFormatError(f"{path}: no model.safetensors, *.safetensors or pytorch_model*.bin found")
    return []


def iter_hf_tensors(path: str | Path) -> Iterator[tuple[str, np.ndarray]]:
    """Streams (name, array) from an HF dir's shards: safetensors memory-mapped, .bin through
    torch.load(weights_only=True, mmap=True) — never unpickling code."""
    for file in _weight_files(Path(path)):
        if file.suffix == ".safetensors":
            yield from iter_safetensors(file)
        else:
            yield from _iter_torch_bin(file)


def _iter_torch_bin(file: Path) -> Iterator[tuple[str, np.ndarray]]:
    import torch

    try:
        state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # weights_only refuses pickled code: say so, do not fall back
        raise HFFormatError(f"{file}: cannot load safely with torch.load(weights_only=True): {e}") from None
    for name, t in state.items():
        t = t.detach().contiguous()
        if t.dtype == torch.bfloat16:
            yield name, t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
        else:
            yield name, t.numpy()


def read_hf_config(path: str | Path, **overrides) -> LlamaConfig:
    path = Path(path)
    file = path / "config.json"
    if not file.is_file():
        raise HFFormatError(f"{path}: no config.json")
    return config_from_hf(json.loads(file.read_text()), source=str(file), **overrides)


def load_hf_params(path: str | Path, cfg: LlamaConfig, dtype=np.float32) -> dict:
    """Nested numpy params (unscanned layout) from an HF dir, checked name by name and shape by
    shape against cfg."""
    maps = {m.hf_name: m for m in tensor_maps(cfg)}
    params: dict = {}
    seen = set()
    for name, arr in iter_hf_tensors(path):
        if name.endswith(_IGNORED_SUFFIXES):
            continue
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue  # some exporters write the tied head anyway
        m = maps.get(name)
        if m is None:
            raise HFFormatError(f"{path}: unexpected tensor {name!r} for this Llama config")
        if tuple(arr.shape) != m.hf_shape:
            raise HFFormatError(
                f"{path}: tensor {name} has shape {tuple(arr.shape)} but config.json implies {m.hf_shape}"
            )
        _set(params, m.path, m.to_flax(np.asarray(arr, dtype=dtype)))
        seen.add(name)
    missing = [n for n in maps if n not in seen]
    if missing:
        raise HFFormatError(f"{path}: missing tensors: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    return params


def _set(tree: dict, path: tuple, value) -> None:
    for p in path[:-1]:
        tree = tree.setdefault(p, {})
    tree[path[-1]] = value


def get_path(tree: dict, path: tuple):
    for p in path:
        tree = tree[p]
    return tree
