"""Hugging Face Llama-family directories: config mapping, tensor names and layouts, reading a directory.

What each family (Llama, Qwen2, Mistral) adds or refuses is the table in `convert/families.py`.

Every fact about HF's layout lives here (docs/design.md, "HF layout"): Linear weights are
[out, in] and Flax kernels are their transpose, reshaped so heads are a dimension of their own.
The mapping is a table of (HF name, param path, to_flax, to_hf), so readers and writers can go
tensor by tensor.

The files themselves (safetensors headers, TensorSource, LazyArray, the sharded writer, torch
.bin) are `easylemur.safetensors_io`; `index_hf_tensors` reads only a directory's headers and
hands out its TensorSources, which read one tensor on demand.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Callable, NoReturn

import numpy as np

from easylemur.errors import InputError
from easylemur.model.config import SUPPORTED_ROPE_TYPES, LlamaConfig
from easylemur.convert.families import FAMILIES, Family, family_of, known_fields
from easylemur.convert.safetensors_io import TensorSource, file_tensors


class HFFormatError(InputError):
    """An HF directory easylemur cannot read faithfully; the message names file and field.
    (A tensor file that cannot be read is a `safetensors_io.TensorFileError`.)"""


# ----------------------------------------------------------------------------- config


_REQUIRED = object()  # marks a config.json field without a default

# The scaling keys each supported rope_type reads (models/llama.py, rope frequencies).
_ROPE_KEYS = {"linear": ("factor",), "dynamic": ("factor",),
              "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")}


class _Fields:
    """Typed readers of an HF config dict's fields; a field that is missing (where required),
    null (where required) or of the wrong type is an HFFormatError naming `source` and it."""

    def __init__(self, hf: dict, source: str):
        self.hf, self.source = hf, source

    def fail(self, field: str, why: str) -> NoReturn:
        raise HFFormatError(f"{self.source}: {field} {why}")

    def value(self, field: str, default: Any, expected: str) -> tuple[Any, bool]:
        """(the field's value, True), or (`default`, False) where it is missing or null."""
        if field not in self.hf:
            if default is _REQUIRED:
                self.fail(field, f"is missing; expected {expected}")
            return default, False
        if self.hf[field] is None:
            if default is _REQUIRED:
                self.fail(field, f"is null; expected {expected}")
            return default, False
        return self.hf[field], True

    def integer(self, field: str, default: Any = _REQUIRED) -> Any:
        v, given = self.value(field, default, "a positive integer")
        if not given:
            return v
        # bool is an int to Python; 64.0 is what some exporters write for 64
        if isinstance(v, bool) or not (isinstance(v, int) or (isinstance(v, float) and v.is_integer())) or v < 1:
            self.fail(field, f"is {v!r}; expected a positive integer")
        return int(v)

    def number(self, field: str, default: Any = _REQUIRED, within: dict | None = None, where: str = "") -> Any:
        """A top-level field, or with `within` a key of that dict (named `where` + field)."""
        if within is None:
            v, given = self.value(field, default, "a number")
            if not given:
                return v
        elif field not in within:
            self.fail(f"{where}{field}", "is missing; expected a number")
        else:
            v = within[field]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.fail(f"{where}{field}", f"is {v!r}; expected a number")
        return float(v)

    def flag(self, field: str, default: Any) -> Any:
        v, given = self.value(field, default, "true or false")
        if given and not isinstance(v, bool):
            self.fail(field, f"is {v!r}; expected true or false")
        return v

    def text(self, field: str, default: Any, expected: str = "a string") -> Any:
        v, given = self.value(field, default, expected)
        if given and not isinstance(v, str):
            self.fail(field, f"is {v!r}; expected {expected}")
        return v

    def mapping(self, field: str) -> dict:
        v, given = self.value(field, {}, "an object")
        if given and not isinstance(v, dict):
            self.fail(field, f"is {v!r}; expected an object (or null)")
        return dict(v)

    def token_id(self, field: str, default: int) -> int:
        # some configs list several EOS ids; easylemur's config keeps the first
        v, given = self.value(field, default, "a token id")
        if given and isinstance(v, list):
            v = v[0] if v else default
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            self.fail(field, f"is {self.hf[field]!r}; expected a token id (an integer >= 0, or a list of them)")
        return v


def config_from_hf(hf: dict, source: str = "config.json", **overrides) -> LlamaConfig:
    """LlamaConfig from an HF config dict; unsupported features, missing required fields and
    values of the wrong type are HFFormatErrors naming `source`, the field and what was
    expected."""
    if not isinstance(hf, dict):
        raise HFFormatError(f"{source}: expected a JSON object of model settings, found {type(hf).__name__}")
    fields = _Fields(hf, source)
    family = _family(fields)
    sliding_window = _layer_settings(fields, family)
    theta, rope_scaling = _rope(fields)

    n_heads = fields.integer("num_attention_heads")
    cfg = dict(
        vocab_size=fields.integer("vocab_size"),
        hidden_size=fields.integer("hidden_size"),
        intermediate_size=fields.integer("intermediate_size"),
        num_layers=fields.integer("num_hidden_layers"),
        num_heads=n_heads,
        num_kv_heads=fields.integer("num_key_value_heads", n_heads),
        head_dim=fields.integer("head_dim", None),
        rms_norm_eps=fields.number("rms_norm_eps", 1e-6),
        rope_theta=theta,
        rope_scaling=rope_scaling,
        max_position_embeddings=fields.integer("max_position_embeddings", 4096),
        tie_word_embeddings=fields.flag("tie_word_embeddings", False),
        family=family.model_type,
        qkv_bias=family.qkv_bias,
        sliding_window=sliding_window,
        **_token_ids(fields),
    )
    if cfg["head_dim"] is not None and cfg["head_dim"] == cfg["hidden_size"] // n_heads:
        cfg["head_dim"] = None
    cfg.update(overrides)
    try:
        return LlamaConfig(**cfg)
    except (ValueError, TypeError) as e:
        raise HFFormatError(f"{source}: {e}") from None


def _family(fields: _Fields) -> Family:
    """The config's family (by model_type), once every field is one that family implements and
    the values it fixes are the ones it supports."""
    hf = fields.hf
    supported = ", ".join(repr(t) for t in FAMILIES)
    family = family_of(fields.text("model_type", _REQUIRED, f"one of {supported}"))
    if family is None:
        fields.fail("model_type", f"is {hf['model_type']!r}; supported: {supported}")
    known = known_fields(family)
    for field in hf:
        if field not in known:
            fields.fail(field, f"is not a field easylemur implements for model_type {family.model_type!r}; refusing it "
                               "rather than build a possibly different model (remove it if it changes nothing)")
    for field, want in family.fixed.items():
        v, given = fields.value(field, want, repr(want))
        if given and v != want:
            fields.fail(field, f"is {v!r}; easylemur supports only {json.dumps(want)} for model_type "
                               f"{family.model_type!r}")
    return family


def _layer_settings(fields: _Fields, family: Family) -> int | None:
    """The sliding window (for a family that reads one, else None), once every layer is full
    attention with SwiGLU and no attention dropout."""
    hf = fields.hf
    layer_types = hf.get("layer_types")
    if layer_types is not None and (not isinstance(layer_types, list) or any(t != "full_attention" for t in layer_types)):
        fields.fail("layer_types", f"is {layer_types!r}; only full attention in every layer is supported")
    sliding_window = fields.integer("sliding_window", None) if family.reads_sliding_window else None
    if fields.text("hidden_act", "silu") != "silu":
        fields.fail("hidden_act", f"is {hf['hidden_act']!r}; only 'silu' (SwiGLU) is supported")
    if fields.number("attention_dropout", 0.0) != 0.0:
        fields.fail("attention_dropout", "is non-zero; not supported")
    return sliding_window


def _rope(fields: _Fields) -> tuple[float, tuple | None]:
    """(rope_theta, rope_scaling as LlamaConfig keeps it: sorted items, or None for 'default')."""
    # transformers 5 writes rope_parameters; older configs and other loaders use
    # rope_theta + rope_scaling. Read both; rope_parameters wins where both exist.
    params = fields.mapping("rope_parameters")
    scaling = fields.mapping("rope_scaling")
    if "rope_theta" in params:
        theta = fields.number("rope_theta", within=params, where="rope_parameters.")
    else:
        theta = fields.number("rope_theta", 10000.0)
    params.pop("rope_theta", None)
    merged = {**scaling, **params}
    rope_type = merged.pop("rope_type", merged.pop("type", "default"))
    if rope_type not in SUPPORTED_ROPE_TYPES:
        fields.fail("rope_scaling.rope_type", f"is {rope_type!r}; supported: {', '.join(SUPPORTED_ROPE_TYPES)}")
    rope_scaling = None
    if rope_type != "default":
        merged.pop("partial_rotary_factor", None)
        for key in _ROPE_KEYS.get(rope_type, ()):
            fields.number(key, within=merged, where="rope_parameters." if key in params or not scaling else "rope_scaling.")
        rope_scaling = tuple(sorted({"rope_type": rope_type, **merged}.items()))
    if fields.number("partial_rotary_factor", 1.0) != 1.0:
        fields.fail("partial_rotary_factor", "is not 1.0; partial RoPE is not supported")
    return theta, rope_scaling


def _token_ids(fields: _Fields) -> dict:
    """bos_token_id and eos_token_id, as LlamaConfig's fields."""
    hf = fields.hf
    return dict(
        # null in a config without BOS (Qwen2.5's bos_token_id may be null): kept null, never Llama's 1
        bos_token_id=None if "bos_token_id" in hf and hf["bos_token_id"] is None else fields.token_id("bos_token_id", 1),
        eos_token_id=fields.token_id("eos_token_id", 2),
    )


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
    family = FAMILIES[cfg.family]
    return {
        "architectures": [family.architecture],
        "model_type": family.model_type,
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
        **family.export(cfg),
        "attention_dropout": 0.0,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": eos[0] if len(eos) == 1 else eos,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": torch_dtype,
        "dtype": torch_dtype,
    }


def generation_config(cfg: LlamaConfig, eos_token_ids: list[int], pad_token_id: int | None = None) -> dict:
    """generation_config.json: every id generation must stop on (for a ChatML model that
    includes <|im_end|>, since EOS is never trained after an assistant turn)."""
    out: dict[str, Any] = {"bos_token_id": cfg.bos_token_id,
                           "eos_token_id": eos_token_ids[0] if len(eos_token_ids) == 1 else list(eos_token_ids)}
    if pad_token_id is not None:
        out["pad_token_id"] = pad_token_id
    return out


EOT_TOKEN = "<|eot_id|>"  # Llama-3 Instruct ends a turn with it, not with EOS


def declared_eos_ids(path: str | Path) -> list[int]:
    """The ids an HF directory declares as `eos_token_id` (an id or a list of ids), in
    config.json and in generation_config.json, in that order without repeats (Llama-3.x
    Instruct lists [128001, 128008, 128009], in generation_config.json or, without that file, in
    config.json); [] without either."""
    ids: list[int] = []
    for name in ("config.json", "generation_config.json"):
        file = Path(path) / name
        if not file.is_file():
            continue
        data = _read_json(file)
        eos = data.get("eos_token_id") if isinstance(data, dict) else None
        got = [] if eos is None else eos if isinstance(eos, list) else [eos]
        if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in got):
            raise HFFormatError(f"{file}: eos_token_id {eos!r} must be a token id or a list of token ids")
        ids += [i for i in got if i not in ids]
    return ids


def stop_ids(eos_token_id: int | None, tokenizer: Any = None, declared: Any = ()) -> list[int]:
    """Every id decoding stops on, the one owner of that set (generate, eval, from-hf, to-hf):
    the model's EOS, the tokenizer's EOS, <|im_end|> when the tokenizer has ChatML (chat models
    never train EOS), <|eot_id|> when it has that token (Llama-3 Instruct), and the `declared`
    ids (generation_config.json's eos_token_id, which a checkpoint carries as meta `stop_ids`).
    The model's EOS first, as HF configs list it, then the rest ascending."""
    rest = {int(i) for i in declared}
    if tokenizer is not None:
        rest.add(tokenizer.eos_id)
        if tokenizer.im_end_id is not None:
            rest.add(tokenizer.im_end_id)
        eot = tokenizer.piece_to_id(EOT_TOKEN)  # sentencepiece answers unk for a piece it lacks
        if eot is not None and tokenizer.id_to_piece(eot) == EOT_TOKEN:
            rest.add(eot)
    first = [eos_token_id] if eos_token_id is not None and eos_token_id >= 0 else []
    return first + sorted(i for i in rest if i is not None and i >= 0 and i not in first)


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


def _bias(out_dims: tuple) -> tuple[Callable, Callable]:
    """HF [out] <-> Flax [*out_dims]."""
    return (lambda b: np.ascontiguousarray(b).reshape(*out_dims), lambda b: np.ascontiguousarray(b).reshape(-1))


def tensor_maps(cfg: LlamaConfig) -> list[TensorMap]:
    d, f, hd, H, KV, V = cfg.hidden_size, cfg.intermediate_size, cfg.hd, cfg.num_heads, cfg.num_kv_heads, cfg.vocab_size
    maps = [TensorMap("model.embed_tokens.weight", ("embed_tokens", "embedding"), (V, d), *_same())]
    for i in range(cfg.num_layers):
        p, h = f"layers_{i}", f"model.layers.{i}"
        maps += [
            TensorMap(f"{h}.input_layernorm.weight", (p, "input_layernorm", "scale"), (d,), *_same()),
            TensorMap(f"{h}.post_attention_layernorm.weight", (p, "post_attention_layernorm", "scale"), (d,), *_same()),
            TensorMap(f"{h}.self_attn.q_proj.weight", (p, "self_attn", "q_proj", "kernel"), (H * hd, d), *_linear((H, hd), (d,))),
            TensorMap(f"{h}.self_attn.k_proj.weight", (p, "self_attn", "k_proj", "kernel"), (KV * hd, d),
                      *_linear((KV, hd), (d,))),
            TensorMap(f"{h}.self_attn.v_proj.weight", (p, "self_attn", "v_proj", "kernel"), (KV * hd, d),
                      *_linear((KV, hd), (d,))),
        ]
        if cfg.qkv_bias:
            maps += [TensorMap(f"{h}.self_attn.{n}_proj.bias", (p, "self_attn", f"{n}_proj", "bias"), (heads * hd,),
                               *_bias((heads, hd))) for n, heads in (("q", H), ("k", KV), ("v", KV))]
        maps += [
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


def index_hf_tensors(path: str | Path) -> dict[str, TensorSource]:
    """Name -> TensorSource for every tensor of an HF directory, reading headers only."""
    path = Path(path)
    sources: dict[str, TensorSource] = {}
    for file in _weight_files(path):
        for src in file_tensors(file):
            if src.name in sources:
                raise HFFormatError(f"tensor {src.name} appears twice: in {sources[src.name].file} and {src.file}")
            sources[src.name] = src
    return sources


def check_hf_tensors(path: str | Path, sources: dict[str, TensorSource],
                     cfg: LlamaConfig) -> list[tuple[TensorMap, TensorSource]]:
    """Pairs each expected tensor with its source; unexpected, missing or misshapen tensors
    are errors naming the tensor, before anything is converted."""
    maps = {m.hf_name: m for m in tensor_maps(cfg)}
    for name, src in sources.items():
        if name.endswith(_IGNORED_SUFFIXES) or (name == "lm_head.weight" and cfg.tie_word_embeddings):
            continue  # some exporters write buffers or the tied head anyway
        m = maps.get(name)
        if m is None:
            raise HFFormatError(f"{path}: unexpected tensor {name!r} for this {cfg.family} config")
        if src.shape != m.hf_shape:
            raise HFFormatError(f"{path}: tensor {name} has shape {src.shape} but config.json implies {m.hf_shape}")
    missing = [n for n in maps if n not in sources]
    if missing:
        raise HFFormatError(f"{path}: missing tensors: {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}")
    return [(m, sources[n]) for n, m in maps.items()]


def read_hf_config(path: str | Path, **overrides) -> LlamaConfig:
    path = Path(path)
    file = path / "config.json"
    if not file.is_file():
        raise HFFormatError(f"{path}: no config.json")
    return config_from_hf(_read_json(file), source=str(file), **overrides)


def _read_json(file: Path) -> Any:
    """A JSON config file of an HF directory; not JSON or not UTF-8 is an HFFormatError naming it."""
    try:
        return json.loads(file.read_text())
    except json.JSONDecodeError as e:
        raise HFFormatError(f"{file}: not valid JSON (line {e.lineno}, column {e.colno}: {e.msg})") from None
    except UnicodeDecodeError as e:
        raise HFFormatError(f"{file}: not UTF-8 text (byte {e.start}); expected a JSON config") from None


def load_hf_params(path: str | Path, cfg: LlamaConfig, dtype=np.float32) -> dict:
    """Nested numpy params (unscanned layout) from an HF dir, checked name by name and shape by
    shape against cfg."""
    params: dict = {}
    for m, src in check_hf_tensors(path, index_hf_tensors(path), cfg):
        set_path(params, m.path, m.to_flax(src.read().astype(dtype, copy=False)))
    return params


# ----------------------------------------------------------------------------- param paths


def set_path(tree: dict, path: tuple, value) -> None:
    """tree[path[0]][path[1]]... = value, creating the dicts on the way (a TensorMap.path)."""
    for p in path[:-1]:
        tree = tree.setdefault(p, {})
    tree[path[-1]] = value


def get_path(tree: dict, path: tuple):
    """tree[path[0]][path[1]]..."""
    for p in path:
        tree = tree[p]
    return tree
