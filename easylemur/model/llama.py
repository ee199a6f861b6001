"""Flax Llama whose logits match transformers' LlamaForCausalLM (and its kin's: Qwen2, Mistral).

Numerics follow HF exactly (docs/design.md, "Numerics"): RMSNorm in float32 as `w * x * rsqrt(mean(x²)+eps)`,
half-split RoPE with HF's inv_freq (theta and rope_scaling honoured), SwiGLU, grouped-query
attention (easylemur.model.attention: dense, blockwise or the splash kernel, per
`LlamaConfig.attention`). Packed rows carry `segment_ids` and per-segment `positions`;
attention never crosses a segment. `LlamaConfig` and the presets are plain data in
easylemur/model/config.py (no JAX there, so a run config is checked without loading this).

Parameter tree (kernels are [in, out...], HF's Linear weights transposed):
  embed_tokens/embedding [V, d]
  layers_{i}/  (or layers/ with a leading [L] axis when scan_layers)
    input_layernorm/scale [d], post_attention_layernorm/scale [d]
    self_attn/{q_proj [d, H, hd], k_proj [d, KV, hd], v_proj [d, KV, hd], o_proj [H, hd, d]}/kernel
    self_attn/{q_proj [H, hd], k_proj [KV, hd], v_proj [KV, hd]}/bias  (only when qkv_bias: Qwen2)
    mlp/{gate_proj [d, F], up_proj [d, F], down_proj [F, d]}/kernel
  norm/scale [d]
  lm_head/kernel [d, V]  (absent when tie_word_embeddings)
"""

from __future__ import annotations

import math
from typing import Any, Optional

import flax.linen as nn
import jax
import jax.numpy as jnp
from jax.ad_checkpoint import checkpoint_name
from jax.sharding import Mesh

from easylemur.model.attention import (
    SPLASH_RESIDUALS,
    attention,
    attention_mask,
)
from easylemur.model.config import LlamaConfig
from easylemur.ops.matmul import low_precision_matmul
from easylemur.sharding import ACCELERATED, RULES, constrain, gathered_rules, platform


# ----------------------------------------------------------------------------- RoPE


def rope_inv_freq(cfg: LlamaConfig, positions: jax.Array) -> jax.Array:
    """HF's inverse frequencies [hd/2] for cfg's rope type (docs/design.md, "RoPE"). None of the
    supported types scales attention (HF's attention_factor is 1.0 for all of them).

    `positions` is only read by the dynamic type, whose base grows with the longest row."""
    hd = cfg.hd
    exponents = jnp.arange(0, hd, 2, dtype=jnp.int32).astype(jnp.float32) / hd
    base = jnp.float32(cfg.rope_theta)
    scaling = cfg.rope_scaling_dict
    kind = cfg.rope_type
    if kind == "dynamic":
        factor = float(scaling["factor"])
        max_pos = float(scaling.get("original_max_position_embeddings", cfg.max_position_embeddings))
        seq_len = (jnp.max(positions) + 1).astype(jnp.float32)
        grown = base * ((factor * seq_len / max_pos) - (factor - 1)) ** (hd / (hd - 2))
        base = jnp.where(seq_len > max_pos, grown, base)
    inv_freq = 1.0 / (base**exponents)
    if kind == "linear":
        inv_freq = inv_freq / float(scaling["factor"])
    elif kind == "llama3":
        factor = float(scaling["factor"])
        low = float(scaling["low_freq_factor"])
        high = float(scaling["high_freq_factor"])
        old_len = float(scaling["original_max_position_embeddings"])
        low_wavelen, high_wavelen = old_len / low, old_len / high
        wavelen = 2 * math.pi / inv_freq
        scaled = jnp.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
        smooth = (old_len / wavelen - low) / (high - low)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
        inv_freq = jnp.where(medium, smoothed, scaled)
    return inv_freq


def rope_cos_sin(cfg: LlamaConfig, positions: jax.Array) -> tuple[jax.Array, jax.Array]:
    """cos, sin of shape [B, T, hd] in float32, from per-token positions [B, T]."""
    freqs = positions.astype(jnp.float32)[..., None] * rope_inv_freq(cfg, positions)  # [B, T, hd/2]
    emb = jnp.concatenate([freqs, freqs], axis=-1)
    return jnp.cos(emb), jnp.sin(emb)


@jax.custom_vjp
def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """x [B, T, N, hd]; the half-split form (rotate_half).

    The backward is the rotation by -angle, written out: autodiff of the split, concatenation
    and casts gives XLA:CPU padded float32/bf16 copies per head. cos/sin come from the
    positions, never trained: they get no gradient."""
    return _rope(x, cos, sin)


def _rope(x, cos, sin):
    half = x.shape[-1] // 2
    # cos/sin repeat their first half (concat(freqs, freqs)), so this is HF's
    # x * cos + rotate_half(x) * sin, term for term, without building rotate_half(x).
    # Low-precision inputs rotate in float32 (HF rotates in the input dtype): more exact, and
    # faster on CPUs, where bf16 arithmetic is emulated.
    dtype = x.dtype
    cos, sin = cos[:, :, None, :half], sin[:, :, None, :half]
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1).astype(dtype)


def _rope_fwd(x, cos, sin):
    return _rope(x, cos, sin), (cos, sin)


def _rope_bwd(res, ct):
    cos, sin = res
    return _rope(ct, cos, -sin), jnp.zeros_like(cos), jnp.zeros_like(sin)


apply_rope.defvjp(_rope_fwd, _rope_bwd)


# ----------------------------------------------------------------------------- modules


def _init(logical: tuple, scale: float = 0.02):
    return nn.with_logical_partitioning(nn.initializers.normal(stddev=scale), logical)


class RMSNorm(nn.Module):
    eps: float
    param_dtype: Any = jnp.float32

    @nn.compact
    def __call__(self, x):
        scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, ("norm",)),
                           (x.shape[-1],), self.param_dtype)
        xf = x.astype(jnp.float32)
        xf = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + self.eps)
        # HF: weight * hidden.to(input_dtype)
        return scale.astype(x.dtype) * xf.astype(x.dtype)


class Dense(nn.Module):
    """A projection with a [in..., out...] kernel and logical axis names; bias-free unless
    `use_bias` (a [out...] bias, added in float32 before the cast to out_dtype)."""

    features: tuple
    logical: tuple
    contract: int  # how many trailing input dims to contract
    dtype: Any
    param_dtype: Any
    out_dtype: Any = None  # default: dtype
    # the dtype the weight gradient is written in (see `low_precision_matmul`)
    weight_grad_dtype: Any = jnp.float32
    # the weight gradient through a transposed copy of x (see `low_precision_matmul`): CPU only
    transpose_for_cpu: bool = False
    use_bias: bool = False
    # set on a TPU/GPU mesh with fsdp > 1, and on any mesh with fsdp and tensor both > 1: the
    # kernel is gathered over fsdp explicitly before the matmul (see `_dense`)
    gather_mesh: Optional[Mesh] = None

    @nn.compact
    def __call__(self, x):
        in_shape = x.shape[-self.contract:]
        kernel = self.param("kernel", _init(self.logical), tuple(in_shape) + tuple(self.features), self.param_dtype)
        bias = None
        if self.use_bias:
            bias = self.param("bias", nn.with_logical_partitioning(nn.initializers.zeros,
                                                                   self.logical[-len(self.features):]),
                              tuple(self.features), self.param_dtype)
        out_dtype = self.out_dtype or self.dtype
        x, kernel = x.astype(self.dtype), kernel.astype(self.dtype)
        if self.gather_mesh is not None:
            kernel = constrain(kernel, self.logical, self.gather_mesh, gathered_rules())
        lead, n_in = x.shape[: x.ndim - self.contract], math.prod(in_shape)
        if jnp.dtype(self.dtype) == jnp.float32:
            # as [M, I] @ [I, O]: autodiff of the [B, T, I] form contracts two dimensions in the
            # weight gradient, which XLA:CPU runs on a transposed copy of the output gradient
            # that its loop fusions write column by column (docs/design.md, "Performance")
            y = jax.lax.dot(x.reshape(-1, n_in), kernel.reshape(n_in, -1), preferred_element_type=jnp.float32)
            y = y.reshape(*lead, *self.features)
            if bias is not None:
                y = y + bias.astype(jnp.float32)
            return y.astype(out_dtype)
        y = low_precision_matmul(x.reshape(-1, n_in), kernel.reshape(n_in, -1), jnp.dtype(out_dtype),
                                 jnp.dtype(self.weight_grad_dtype), self.transpose_for_cpu)
        y = y.reshape(*lead, *self.features)
        if bias is not None:
            y = (y.astype(jnp.float32) + bias.astype(jnp.float32)).astype(jnp.dtype(out_dtype))
        return y


def gathered_over_tensor(x: jax.Array, mesh: Optional[Mesh]) -> jax.Array:
    """The residual stream's [B, T, d] gathered over `tensor` once, before the projections that
    read it (q, k, v; gate, up): each projection gathered it for itself, and in the backward
    reduce-scattered its own input gradient, where one reduce-scatter of their sum does (the
    transpose of one gather)."""
    if mesh is None or mesh.shape.get("tensor", 1) == 1:
        return x
    return constrain(x, ("batch", "length", None), mesh)


def _dense(cfg: LlamaConfig, mesh: Optional[Mesh], features: tuple, logical: tuple, name: str, contract: int = 1,
           out_dtype=None, use_bias: bool = False) -> Dense:
    """A Dense in cfg's compute and parameter dtypes (a submodule of the module calling it),
    writing weight gradients in the compute dtype when the mesh is on TPU or GPU."""
    accelerated = mesh is not None and platform(mesh) in ACCELERATED
    grad_dtype = jnp.dtype(cfg.dtype) if accelerated else jnp.float32
    on_cpu = platform(mesh) == "cpu"
    # With the residual stream split over `tensor` and rows over data x fsdp, XLA's SPMD
    # partitioner (jax 0.10) may split a projection by moving rows between devices
    # (collective-permute) and never moving them back: wrong rows on CPU (docs/design.md,
    # "Tensor parallelism", has the reproducer). Gathering the kernel over fsdp first, which
    # FSDP does anyway, leaves it nothing to permute. On TPU/GPU the gather is explicit under
    # pure FSDP too: one gather serves the recomputed forward and the backward of a scanned
    # layer, where the partitioner's own placement gathered q_proj and k_proj twice in the
    # backward (Llama-2-70B at fsdp 256: 287 -> 275 GB of all-gathers; "Torus wraparound").
    fsdp = mesh is not None and mesh.shape.get("fsdp", 1) > 1
    tp = fsdp and mesh.shape.get("tensor", 1) > 1
    return Dense(features, logical, contract, jnp.dtype(cfg.dtype), jnp.dtype(cfg.param_dtype), out_dtype,
                 grad_dtype, on_cpu, use_bias, mesh if tp or (fsdp and accelerated) else None, name=name)


class Attention(nn.Module):
    """Grouped-query self-attention with RoPE; with a `cache`, a decoding step (see
    `cached_attention`). Returns (output, new cache or None)."""

    cfg: LlamaConfig
    mesh: Optional[Mesh] = None

    @nn.compact
    def __call__(self, x, cos, sin, segment_ids, cache=None):
        cfg = self.cfg
        H, KV, hd = cfg.num_heads, cfg.num_kv_heads, cfg.hd
        b = cfg.qkv_bias
        x = gathered_over_tensor(x, self.mesh)
        q = _dense(cfg, self.mesh, (H, hd), ("embed", "heads", "head_dim"), "q_proj", use_bias=b)(x)
        k = _dense(cfg, self.mesh, (KV, hd), ("embed", "kv_heads", "head_dim"), "k_proj", use_bias=b)(x)
        v = _dense(cfg, self.mesh, (KV, hd), ("embed", "kv_heads", "head_dim"), "v_proj", use_bias=b)(x)
        q = constrain(apply_rope(q, cos, sin), ("batch", "length", "act_heads", None), self.mesh)
        k = constrain(apply_rope(k, cos, sin), ("batch", "length", "act_kv_heads", None), self.mesh)
        v = constrain(v, ("batch", "length", "act_kv_heads", None), self.mesh)
        if cache is not None:
            out, cache = cached_attention(q, k, v, segment_ids, cache)
        else:
            # Parameter init (a [1, 1] batch) does not depend on the kernel; dense takes any length.
            impl = "dense" if self.is_initializing() else cfg.attention
            out = attention(q, k, v, segment_ids, impl=impl, mesh=self.mesh, block_size=cfg.attn_block_size)
        out = checkpoint_name(constrain(out, ("batch", "length", "act_heads", None), self.mesh), "attn_out")
        y = _dense(cfg, self.mesh, (cfg.hidden_size,), ("heads", "head_dim", "embed"), "o_proj", contract=2)(out)
        return y, cache


def cached_attention(q, k, v, segment_ids, cache):
    """Decoding with a KV cache: cache = dict(k, v [B, KV, S, hd], seg [B, S], index int32).

    The new tokens are written at `index`; query t attends to cache slots <= index + t that
    hold the same segment (slots never written have segment 0, which no real token uses).
    The cache is heads-major so that each step's score and value matmuls read it as it lies:
    with [B, S, KV, hd] XLA transposed every layer's whole cache at every decoded token."""
    B, T = q.shape[:2]
    i = cache["index"]
    k_all = jax.lax.dynamic_update_slice_in_dim(cache["k"], k.swapaxes(1, 2).astype(cache["k"].dtype), i, axis=2)
    v_all = jax.lax.dynamic_update_slice_in_dim(cache["v"], v.swapaxes(1, 2).astype(cache["v"].dtype), i, axis=2)
    seg_all = jax.lax.dynamic_update_slice_in_dim(cache["seg"], segment_ids, i, axis=1)
    S = k_all.shape[2]
    H, KV, hd = q.shape[2], k.shape[2], q.shape[3]
    qg = q.reshape(B, T, KV, H // KV, hd)
    mask = attention_mask(segment_ids, seg_all, i + jnp.arange(T), jnp.arange(S))  # [B, 1, 1, T, S]
    scores = jnp.einsum("btkgh,bksh->bkgts", qg, k_all.astype(q.dtype), preferred_element_type=jnp.float32)
    scores = jnp.where(mask, scores / math.sqrt(hd), jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum("bkgts,bksh->btkgh", probs.astype(q.dtype), v_all.astype(q.dtype),
                     preferred_element_type=jnp.float32)
    return out.astype(q.dtype).reshape(B, T, H, hd), {"k": k_all, "v": v_all, "seg": seg_all, "index": i + T}


class MLP(nn.Module):
    cfg: LlamaConfig
    mesh: Optional[Mesh] = None

    @nn.compact
    def __call__(self, x):
        cfg = self.cfg
        x = gathered_over_tensor(x, self.mesh)
        gate = _dense(cfg, self.mesh, (cfg.intermediate_size,), ("embed", "mlp"), "gate_proj")(x)
        up = _dense(cfg, self.mesh, (cfg.intermediate_size,), ("embed", "mlp"), "up_proj")(x)
        h = constrain(nn.silu(gate) * up, ("batch", "length", "act_mlp"), self.mesh)
        return _dense(cfg, self.mesh, (cfg.hidden_size,), ("mlp", "embed"), "down_proj")(h)


class Block(nn.Module):
    """A pre-norm decoder layer: x + attention(norm(x)), then x + mlp(norm(x))."""

    cfg: LlamaConfig
    mesh: Optional[Mesh] = None

    @nn.compact
    def __call__(self, x, cos, sin, segment_ids, cache=None):
        cfg = self.cfg
        pdt = jnp.dtype(cfg.param_dtype)
        x = checkpoint_name(x, "layer_input")  # what remat=full_offload moves to the host
        h, cache = Attention(cfg, self.mesh, name="self_attn")(
            RMSNorm(cfg.rms_norm_eps, pdt, name="input_layernorm")(x), cos, sin, segment_ids, cache
        )
        x = x + h
        x = x + MLP(cfg, self.mesh, name="mlp")(RMSNorm(cfg.rms_norm_eps, pdt, name="post_attention_layernorm")(x))
        x = constrain(x, ("batch", "length", "act_embed"), self.mesh)
        return x, cache


def _remat_policy(name: str):
    """What a rematerialised layer keeps for its backward. `full`: nothing but its input (the
    scan's carry, one [B, T, d] per layer); `full_offload`: not even that on the device: the
    layer inputs go to host memory and come back for the backward (TPU/GPU; the copies overlap
    the layer's compute)."""
    cp = jax.checkpoint_policies
    if name == "full_offload":
        return cp.save_and_offload_only_these_names(
            names_which_can_be_saved=[], names_which_can_be_offloaded=["layer_input"],
            offload_src="device", offload_dst="pinned_host")
    return {
        "full": cp.nothing_saveable,
        "dots": cp.checkpoint_dots,
        "dots_no_batch": cp.checkpoint_dots_with_no_batch_dims,
        # the attention output, and with splash the kernel's residuals, so that the backward
        # does not run the attention forward again
        "save_attn_out": cp.save_only_these_names("attn_out", SPLASH_RESIDUALS),
    }[name]


class Llama(nn.Module):
    cfg: LlamaConfig
    mesh: Optional[Mesh] = None

    @nn.compact
    def __call__(self, input_ids, positions=None, segment_ids=None, cache=None, return_hidden=False):
        cfg = self.cfg
        dt, pdt = jnp.dtype(cfg.dtype), jnp.dtype(cfg.param_dtype)
        B, T = input_ids.shape
        if cfg.sliding_window is not None:
            span = T if cache is None else cache[0]["k"].shape[2]
            if span > cfg.sliding_window:
                raise ValueError(f"sliding_window={cfg.sliding_window} is shorter than this row ({span} tokens); "
                                 "easylemur does not implement sliding-window attention: use rows of at most "
                                 f"{cfg.sliding_window} tokens")
        if positions is None:
            positions = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
        if segment_ids is None:
            segment_ids = jnp.ones((B, T), jnp.int32)
        embed = nn.Embed(
            cfg.vocab_size, cfg.hidden_size, dtype=dt, param_dtype=pdt, name="embed_tokens",
            embedding_init=nn.with_logical_partitioning(nn.initializers.normal(0.02), ("vocab", "embed")),
        )
        x = embed(input_ids.astype(jnp.int32)).astype(dt)
        x = constrain(x, ("batch", "length", "act_embed"), self.mesh)
        cos, sin = rope_cos_sin(cfg, positions)

        if cache is not None and cfg.scan_layers:
            raise ValueError("KV-cache decoding needs scan_layers=False (load the model unscanned)")
        if cfg.scan_layers:
            # Block's (x, ...) -> (x, None) is the (carry, xs) -> (carry, ys) scan wants.
            body = Block
            if cfg.remat != "none":
                body = nn.remat(body, policy=_remat_policy(cfg.remat), prevent_cse=False)
            x, _ = nn.scan(
                body, variable_axes={"params": 0}, split_rngs={"params": True},
                in_axes=(nn.broadcast, nn.broadcast, nn.broadcast), length=cfg.num_layers,
                metadata_params={nn.PARTITION_NAME: "layers"},
            )(cfg, self.mesh, name="layers")(x, cos, sin, segment_ids)
            new_cache = None
        else:
            body = Block
            if cfg.remat != "none":
                body = nn.remat(Block, policy=_remat_policy(cfg.remat), prevent_cse=True)
            new_cache = [] if cache is not None else None
            for i in range(cfg.num_layers):
                x, c = body(cfg, self.mesh, name=f"layers_{i}")(
                    x, cos, sin, segment_ids, None if cache is None else cache[i]
                )
                if cache is not None:
                    new_cache.append(c)
        x = RMSNorm(cfg.rms_norm_eps, pdt, name="norm")(x)
        if return_hidden:
            return x, new_cache
        if cfg.tie_word_embeddings:
            logits = jax.lax.dot_general(
                x.astype(dt), embed.embedding.astype(dt), (((x.ndim - 1,), (1,)), ((), ())),
                preferred_element_type=jnp.float32,
            )
        else:
            logits = _dense(cfg, self.mesh, (cfg.vocab_size,), ("embed", "vocab"), "lm_head", out_dtype=jnp.float32)(x)
        logits = constrain(logits, ("batch", "length", "act_vocab"), self.mesh)
        return (logits, new_cache) if cache is not None else logits


def lm_head_kernel(params: dict, cfg: LlamaConfig) -> jax.Array:
    """[d, V]: the LM head, or the transposed embedding when tied. The one place outside the
    module that knows the head's two forms (the fused loss and the decoder's last-position
    logits use it)."""
    return params["embed_tokens"]["embedding"].T if cfg.tie_word_embeddings else params["lm_head"]["kernel"]


def init_cache(cfg: LlamaConfig, batch: int, max_len: int, dtype=None) -> list[dict]:
    dtype = dtype or jnp.dtype(cfg.dtype)
    shape = (batch, cfg.num_kv_heads, max_len, cfg.hd)  # heads-major: see cached_attention
    return [
        {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype),
         "seg": jnp.zeros((batch, max_len), jnp.int32), "index": jnp.zeros((), jnp.int32)}
        for _ in range(cfg.num_layers)
    ]


# ----------------------------------------------------------------------------- sharded init


def param_specs(cfg: LlamaConfig) -> tuple[Any, Any]:
    """(tree of ShapeDtypeStruct, tree of logical PartitionSpecs) for cfg's params, without
    allocating anything."""
    ids = jax.ShapeDtypeStruct((1, 1), jnp.int32)
    boxed = jax.eval_shape(lambda: Llama(cfg).init(jax.random.PRNGKey(0), jnp.zeros(ids.shape, ids.dtype)))
    logical = nn.get_partition_spec(boxed)["params"]
    shapes = nn.unbox(boxed)["params"]
    return shapes, logical


def param_shardings(cfg: LlamaConfig, mesh: Mesh, rules=RULES) -> Any:
    from easylemur.sharding import tree_shardings

    shapes, logical = param_specs(cfg)
    return tree_shardings(logical, shapes, mesh, rules)


def init_params(cfg: LlamaConfig, rng: jax.Array, mesh: Optional[Mesh] = None, rules=RULES) -> Any:
    """Random params, created directly in their shards (never whole on one host)."""

    def init(key):
        return nn.unbox(Llama(cfg).init(key, jnp.zeros((1, 1), jnp.int32)))["params"]

    if mesh is None:
        return jax.jit(init)(rng)
    return jax.jit(init, out_shardings=param_shardings(cfg, mesh, rules))(rng)
