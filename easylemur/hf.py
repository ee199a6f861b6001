"""Hugging Face Llama format: config mapping, tensor names and layouts, streaming safetensors I/O.

Every fact about HF's layout lives here (DESIGN.md §4): Linear weights are [out, in] and Flax
kernels are their transpose, reshaped so heads are a dimension of their own. The mapping is a
table of (HF name, param path, to_flax, to_hf), so readers and writers can go tensor by tensor.

Streaming: `index_hf_tensors` reads only headers and hands out TensorSources that read one
tensor on demand; `LazyArray` (shape + dtype + loader) is what the writers take, so
`write_sharded_safetensors` and convert's orbax save hold one tensor at a time.
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
    try:
        with open(tmp, "wb") as f:
            f.write(struct.pack("<Q", len(blob)))
            f.write(blob)
            for name, arr in items:
                a = np.ascontiguousarray(arr() if callable(arr) else arr)
                if tuple(a.shape) != tuple(header[name]["shape"]) or _ST_NAMES[np.dtype(a.dtype)] != header[name]["dtype"]:
                    raise ValueError(f"{name}: promised {header[name]['shape']} {header[name]['dtype']}, got {a.shape} {a.dtype}")
                f.write(memoryview(a.reshape(-1).view(np.uint8)))
                del a
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def _shape_dtype(arr) -> tuple[tuple, Any]:
    if callable(arr) and hasattr(arr, "shape"):
        return tuple(arr.shape), arr.dtype
    if callable(arr):
        raise TypeError("a lazy tensor must carry .shape and .dtype")
    return tuple(arr.shape), arr.dtype


class LazyArray:
    """Shape and dtype now, data when called: what the streaming writers (safetensors shards,
    the orbax checkpoint of `convert from-hf`) hold instead of arrays, so that at most one
    tensor of the model is in memory at a time."""

    def __init__(self, shape: tuple[int, ...], dtype: Any, load: Callable[[], np.ndarray]):
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self._load = load

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __call__(self) -> np.ndarray:
        arr = self._load()
        if tuple(arr.shape) != self.shape or np.dtype(arr.dtype) != self.dtype:
            raise ValueError(f"lazy tensor promised {self.shape} {self.dtype}, produced {arr.shape} {arr.dtype}")
        return arr

    def __repr__(self) -> str:
        return f"LazyArray({self.shape}, {self.dtype})"


def parse_size(text: str | int) -> int:
    """'5GB' -> 5e9 bytes, as transformers' max_shard_size reads it (KB/MB/GB powers of 10,
    KiB/MiB/GiB powers of 2, a bare number is bytes)."""
    if isinstance(text, int):
        return text
    import re

    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?\s*", str(text), re.IGNORECASE)
    if not m:
        raise ValueError(f"size {text!r} is not a number of bytes like 5GB, 500MB, 2GiB or 1000000")
    unit = (m.group(2) or "B").upper()
    mult = {"B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
            "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}[unit]
    n = int(float(m.group(1)) * mult)
    if n <= 0:
        raise ValueError(f"size {text!r} must be positive")
    return n


def plan_shards(items: list[tuple[str, Any]], max_shard_bytes: int) -> list[list[tuple[str, Any]]]:
    """Consecutive groups of at most max_shard_bytes (a bigger tensor gets a shard alone)."""
    shards: list[list] = [[]]
    size = 0
    for name, arr in items:
        shape, dtype = _shape_dtype(arr)
        n = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        if shards[-1] and size + n > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append((name, arr))
        size += n
    return shards


def write_sharded_safetensors(out_dir: str | Path, items: list[tuple[str, Any]], max_shard_bytes: int) -> dict:
    """model-0000k-of-0000n.safetensors + model.safetensors.index.json, one tensor in memory at
    a time; returns the index. Shards are renamed into place only once complete; on an error
    the shards already written are removed, so a failed export leaves no half model."""
    out_dir = Path(out_dir)
    shards = plan_shards(items, max_shard_bytes)
    n = len(shards)
    weight_map: dict[str, str] = {}
    total = 0
    written: list[Path] = []
    try:
        for k, shard in enumerate(shards, 1):
            fname = f"model-{k:05d}-of-{n:05d}.safetensors"
            write_safetensors(out_dir / fname, shard)
            written.append(out_dir / fname)
            for name, arr in shard:
                shape, dtype = _shape_dtype(arr)
                weight_map[name] = fname
                total += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    except BaseException:
        for f in written:
            f.unlink(missing_ok=True)
        raise
    index = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    return index


def generation_config(cfg: LlamaConfig, eos_token_ids: list[int], pad_token_id: int | None = None) -> dict:
    """generation_config.json: every id generation must stop on (for a ChatML model that
    includes <|im_end|>, since EOS is never trained after an assistant turn)."""
    out: dict[str, Any] = {"bos_token_id": cfg.bos_token_id,
                           "eos_token_id": eos_token_ids[0] if len(eos_token_ids) == 1 else list(eos_token_ids)}
    if pad_token_id is not None:
        out["pad_token_id"] = pad_token_id
    return out


# ----------------------------------------------------------------------------- reading a directory


def is_hf_dir(path: str | Path) -> bool:
    path = Path(path)
    return (path / "config.json").is_file() and bool(_weight_files(path, required=False))


def _weight_files(path: Path, required: bool = True) -> list[Path]:
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = path / index_name
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise HFFormatError(f"{index}: not a weight index (needs a 'weight_map'): {e}") from None
            files = sorted(set(weight_map.values()))
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


@dataclasses.dataclass
class TensorSource:
    """One tensor of an HF directory: shape and dtype known, data read only by `read()`.

    safetensors data is read with a positioned read into a fresh buffer rather than through a
    long-lived memory map: a map keeps every page it touched resident (and counted in RSS)
    until it is closed, which over a whole 140 GB model is the whole model."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    file: Path
    offset: int = 0  # absolute byte offset in a safetensors file
    tensor: Any = None  # the (memory-mapped) torch tensor of a .bin file

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    def read(self) -> np.ndarray:
        if self.tensor is not None:
            return _torch_to_numpy(self.tensor).copy()
        out = np.empty(self.shape, self.dtype)
        buf = memoryview(out.reshape(-1).view(np.uint8))
        with open(self.file, "rb", buffering=0) as f:
            f.seek(self.offset)
            done = 0
            while done < len(buf):
                n = f.readinto(buf[done:])
                if not n:
                    raise HFFormatError(f"{self.file}: truncated; tensor {self.name} ends past the end of the file")
                done += n
        return out


def index_hf_tensors(path: str | Path) -> dict[str, TensorSource]:
    """Name -> TensorSource for every tensor of an HF directory, reading headers only."""
    path = Path(path)
    sources: dict[str, TensorSource] = {}
    for file in _weight_files(path):
        if file.suffix == ".safetensors":
            header, start = read_safetensors_header(file)
            size = file.stat().st_size
            for name, info in header.items():
                if name == "__metadata__":
                    continue
                if info.get("dtype") not in _ST_DTYPES:
                    raise HFFormatError(f"{file}: tensor {name} has unsupported dtype {info.get('dtype')}")
                lo, hi = info["data_offsets"]
                src = TensorSource(name, tuple(info["shape"]), np.dtype(_ST_DTYPES[info["dtype"]]), file, start + lo)
                if hi - lo != src.nbytes or start + hi > size:
                    raise HFFormatError(f"{file}: tensor {name} has inconsistent offsets {lo}..{hi} (file is {size} bytes)")
                _add_source(sources, src)
        else:
            for name, t in _torch_state(file).items():
                dtype = _torch_to_numpy(t.reshape(-1)[:0]).dtype  # an empty view: no data read
                _add_source(sources, TensorSource(name, tuple(t.shape), np.dtype(dtype), file, tensor=t))
    return sources


def _add_source(sources: dict, src: TensorSource) -> None:
    if src.name in sources:
        raise HFFormatError(f"tensor {src.name} appears twice: in {sources[src.name].file} and {src.file}")
    sources[src.name] = src


def check_hf_tensors(path: str | Path, sources: dict[str, TensorSource], cfg: LlamaConfig) -> list[tuple[TensorMap, TensorSource]]:
    """Pairs each expected tensor with its source; unexpected, missing or misshapen tensors
    are errors naming the tensor, before anything is converted."""
    maps = {m.hf_name: m for m in tensor_maps(cfg)}
    for name, src in sources.items():
        if name.endswith(_IGNORED_SUFFIXES) or (name == "lm_head.weight" and cfg.tie_word_embeddings):
            continue  # some exporters write buffers or the tied head anyway
        m = maps.get(name)
        if m is None:
            raise HFFormatError(f"{path}: unexpected tensor {name!r} for this Llama config")
        if src.shape != m.hf_shape:
            raise HFFormatError(f"{path}: tensor {name} has shape {src.shape} but config.json implies {m.hf_shape}")
    missing = [n for n in maps if n not in sources]
    if missing:
        raise HFFormatError(f"{path}: missing tensors: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    return [(m, sources[n]) for n, m in maps.items()]


def iter_hf_tensors(path: str | Path) -> Iterator[tuple[str, np.ndarray]]:
    """Streams (name, array) from an HF dir's shards: safetensors memory-mapped, .bin through
    torch.load(weights_only=True, mmap=True) — never unpickling code."""
    for file in _weight_files(Path(path)):
        if file.suffix == ".safetensors":
            yield from iter_safetensors(file)
        else:
            yield from _iter_torch_bin(file)


def _torch_state(file: Path) -> dict:
    import torch

    try:
        state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
    except Exception as e:  # weights_only refuses pickled code: say so, do not fall back
        raise HFFormatError(f"{file}: cannot load safely with torch.load(weights_only=True): {e}") from None
    if not isinstance(state, dict):
        raise HFFormatError(f"{file}: expected a state dict of tensors, found {type(state).__name__}")
    return state


def _torch_to_numpy(t) -> np.ndarray:
    import torch

    t = t.detach().contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def _iter_torch_bin(file: Path) -> Iterator[tuple[str, np.ndarray]]:
    for name, t in _torch_state(file).items():
        yield name, _torch_to_numpy(t)


def read_hf_config(path: str | Path, **overrides) -> LlamaConfig:
    path = Path(path)
    file = path / "config.json"
    if not file.is_file():
        raise HFFormatError(f"{path}: no config.json")
    return config_from_hf(json.loads(file.read_text()), source=str(file), **overrides)


def load_hf_params(path: str | Path, cfg: LlamaConfig, dtype=np.float32) -> dict:
    """Nested numpy params (unscanned layout) from an HF dir, checked name by name and shape by
    shape against cfg."""
    params: dict = {}
    for m, src in check_hf_tensors(path, index_hf_tensors(path), cfg):
        _set(params, m.path, m.to_flax(src.read().astype(dtype, copy=False)))
    return params


def _set(tree: dict, path: tuple, value) -> None:
    for p in path[:-1]:
        tree = tree.setdefault(p, {})
    tree[path[-1]] = value


def get_path(tree: dict, path: tuple):
    for p in path:
        tree = tree[p]
    return tree
