"""Causal self-attention over packed rows, behind one contract (docs/design.md, "Attention").

    attention(q [B, T, H, hd], k [B, T, KV, hd], v [B, T, KV, hd], segment_ids [B, T],
              *, impl, mesh, block_size) -> [B, T, H, hd]

Query t attends to keys s <= t of the same segment (segment 0 is padding: padding tokens
attend to each other and no real token sees them). Query head j uses kv head j // (H // KV).
`impl` is `model.attention`:

- `dense`: one [T, T] score matrix per head, scores and softmax in float32. The numerics
  reference, and what the KV-cache decoder uses (`_attend`).
- `blockwise`: the queries in blocks of `block_size` under jax.checkpoint, so no [T, T] score
  matrix exists for the whole row; equal to dense (dense when the block does not divide T).
- `splash`: the Pallas TPU kernel (jax.experimental.pallas.ops.tpu.splash_attention): scores
  stay in VMEM block by block, forward and backward. Pallas interpret mode off TPU (tests).
- `flash`: pure JAX, tiles of `flash_block(T, block_size)` with causal tile skipping, one
  select per tile for the mask, and a hand-written backward whose matmuls all take the form
  XLA:CPU runs natively in bf16. What `auto` runs on a CPU.
- `cudnn`: cuDNN's fused flash attention on NVIDIA GPUs (bf16/fp16), through
  jax.nn.dot_product_attention for rows of one segment and cuDNN's segment offsets for packed
  rows (`cudnn_segments`, `_cudnn_packed`).
- `auto`: `resolve_impl`: splash on TPU when T is a multiple of 128; cudnn on GPU for bf16/fp16
  with a head dim cuDNN takes; flash on CPU for rows longer than one flash tile; elsewhere
  blockwise when the block splits the row (dense for a row of one block).
"""

from __future__ import annotations

import functools
import math
from typing import Optional

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh
from jax.sharding import PartitionSpec as P

from easylemur.errors import InputError
from easylemur.model.config import ATTENTION_IMPLS
from easylemur.sharding import logical_to_spec, platform

# The splash kernel tiles the sequence in lanes of 128: T and its blocks are multiples of it.
SPLASH_LANES = 128
# The checkpoint name of the splash kernel's residuals (its output and per-query logsumexp):
# a remat policy that saves this name keeps them, so the backward does not rerun the forward
# kernel; one that does not (e.g. `full`) recomputes them.
SPLASH_RESIDUALS = "splash_residuals"
# `auto` off TPU and GPU was blockwise whenever the block splits the row: on a CPU (2 cores,
# float32, 8 heads of 64, forward + backward) blocks of 512 take 0.7x dense's time at T=1024
# and 0.6x at T=2048 (the [T, T] scores stop fitting in cache), and its memory does not grow
# with T². On a CPU it is now flash, faster than both (docs/design.md, "Attention").
# flash's tiles are at most this long: on the 2-core CPU (bf16, 8 rows of 512, 8 heads of 64,
# forward + backward) tiles of 128 beat 256 and 512 (less work past the diagonal, scores that
# stay in cache).
FLASH_MAX_BLOCK = 128
# cuDNN's flash attention takes head dims that are a multiple of 8 up to this (H100/H200).
CUDNN_MAX_HEAD_DIM = 128


class AttentionError(InputError):
    """Attention inputs the chosen implementation cannot take (e.g. a splash row length that is
    not a multiple of 128); the message names `model.attention` and the value."""


def resolve_impl(impl: str, seq_len: int, platform: str, block_size: int = 512, dtype=None,
                 head_dim: Optional[int] = None) -> str:
    """The implementation `impl` runs as for rows of `seq_len` tokens on `platform` ('tpu',
    'cpu', 'gpu', ...). `auto`: splash on TPU when seq_len is a multiple of 128 (the kernel's
    tiles; any head dim compiles); cudnn on GPU when `dtype` is bf16/fp16 and `head_dim` is
    one cuDNN takes (a multiple of 8, at most 128); flash on CPU for rows of several flash
    tiles; elsewhere blockwise when
    `block_size` splits the row into several blocks, else dense (a row of one block is dense
    either way). Others are returned as they are."""
    if impl not in ATTENTION_IMPLS:
        raise AttentionError(f"model.attention={impl!r} must be one of {', '.join(ATTENTION_IMPLS)}")
    if impl != "auto":
        return impl
    if platform == "tpu" and seq_len % SPLASH_LANES == 0:
        return "splash"
    if platform in ("gpu", "cuda") and cudnn_takes(dtype, head_dim):
        return "cudnn"
    if platform == "cpu" and seq_len > FLASH_MAX_BLOCK:
        return "flash"  # several tiles, so some are skipped; one tile is dense with extra work
    return "blockwise" if 0 < block_size < seq_len and seq_len % block_size == 0 else "dense"


def cudnn_takes(dtype, head_dim: Optional[int]) -> bool:
    """Whether cuDNN's flash attention takes q/k/v of `dtype` with heads of `head_dim`."""
    if dtype is None or head_dim is None:
        return False
    return jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16) and head_dim % 8 == 0 and head_dim <= CUDNN_MAX_HEAD_DIM


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array,
    *,
    impl: str = "auto",
    mesh: Optional[Mesh] = None,
    block_size: int = 512,
) -> jax.Array:
    """Causal, segment-masked grouped-query attention (the contract in the module docstring).

    `mesh`: the mesh q/k/v are sharded over (rows on data x fsdp, heads on tensor); splash runs
    under shard_map over it, cuDNN's call and the pure-JAX paths are partitioned by XLA.
    `block_size`: the query block of blockwise, the tile of splash (clipped to T), the largest
    tile of flash."""
    B, T, H, hd = q.shape
    if k.shape != v.shape or k.shape[:2] != (B, T) or k.shape[3] != hd or H % k.shape[2]:
        raise AttentionError(f"attention: q {q.shape} and k {k.shape}, v {v.shape} are not [B, T, H, hd] and "
                             "[B, T, KV, hd] with KV dividing H")
    if segment_ids.shape != (B, T):
        raise AttentionError(f"attention: segment_ids {segment_ids.shape} must be [B, T] = {(B, T)}")
    kind = resolve_impl(impl, T, platform(mesh), block_size, q.dtype, hd)
    if kind == "splash":
        return splash_attention(q, k, v, segment_ids, mesh=mesh, block_size=block_size)
    if kind == "flash":
        return flash_attention(q, k, v, segment_ids, block_size=block_size)
    if kind == "cudnn":
        return cudnn_attention(q, k, v, segment_ids, mesh=mesh)
    return dot_product_attention(q, k, v, segment_ids, block_size=block_size if kind == "blockwise" else 0)


# ----------------------------------------------------------------------------- dense / blockwise


def attention_mask(q_seg: jax.Array, kv_seg: jax.Array, q_idx: jax.Array, kv_idx: jax.Array) -> jax.Array:
    """[B, 1, 1, Tq, Tk] bool: causal by index within the row, and same segment only."""
    causal = q_idx[:, None] >= kv_idx[None, :]
    same = q_seg[:, :, None] == kv_seg[:, None, :]
    return (same & causal[None])[:, None, None]


def _attend(q, k, v, mask):
    """q [B, Tq, KV, G, hd], k/v [B, Tk, KV, hd] -> [B, Tq, KV, G, hd]; scores in float32."""
    if q.dtype != jnp.float32:
        return _attend_low_precision(q, k, v, mask)
    return _attend_probs(q, k, v, mask)[0]


def _attend_probs(q, k, v, mask):
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = jnp.einsum("bqkgh,bskh->bkgqs", q, k, preferred_element_type=jnp.float32) * scale
    scores = jnp.where(mask, scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1)
    out = jnp.einsum("bkgqs,bskh->bqkgh", probs.astype(v.dtype), v, preferred_element_type=jnp.float32)
    return out.astype(q.dtype), probs


@jax.custom_vjp
def _attend_low_precision(q, k, v, mask):
    """_attend for bf16/f16 inputs, with a backward whose matmuls also take low-precision
    inputs (float32 accumulation, softmax gradient in float32), as flash-attention kernels do;
    plain autodiff would run them in float32 on converted copies."""
    return _attend_probs(q, k, v, mask)[0]


def _alp_fwd(q, k, v, mask):
    out, probs = _attend_probs(q, k, v, mask)
    return out, (q, k, v, probs)


def _alp_bwd(res, ct):
    q, k, v, probs = res
    lp = q.dtype
    ct = ct.astype(lp)
    f32 = jnp.float32
    dv = jnp.einsum("bkgqs,bqkgh->bskh", probs.astype(lp), ct, preferred_element_type=f32)
    dp = jnp.einsum("bqkgh,bskh->bkgqs", ct, v, preferred_element_type=f32)
    ds = probs * (dp - jnp.sum(dp * probs, axis=-1, keepdims=True))
    ds = (ds * (1.0 / math.sqrt(q.shape[-1]))).astype(lp)
    dq = jnp.einsum("bkgqs,bskh->bqkgh", ds, k, preferred_element_type=f32)
    dk = jnp.einsum("bkgqs,bqkgh->bskh", ds, q, preferred_element_type=f32)
    return dq.astype(lp), dk.astype(lp), dv.astype(lp), None


_attend_low_precision.defvjp(_alp_fwd, _alp_bwd)


def dot_product_attention(q, k, v, segment_ids, *, block_size: int = 0):
    """Grouped-query attention with segment masking.

    q [B, T, H, hd]; k, v [B, T, KV, hd]. Query heads j use kv head j // (H // KV) — the
    grouping is a reshape, K/V are never repeated. With block_size > 0 the queries are taken
    in blocks under jax.checkpoint, so no [T, T] score matrix is ever held for the whole row."""
    B, T, H, hd = q.shape
    KV = k.shape[2]
    qg = q.reshape(B, T, KV, H // KV, hd)
    idx = jnp.arange(T)
    if block_size <= 0 or block_size >= T or T % block_size:
        mask = attention_mask(segment_ids, segment_ids, idx, idx)
        return _attend(qg, k, v, mask).reshape(B, T, H, hd)

    nblocks = T // block_size

    @jax.checkpoint
    def block(q_blk, seg_blk, idx_blk):
        mask = attention_mask(seg_blk, segment_ids, idx_blk, idx)
        return _attend(q_blk, k, v, mask)

    qb = qg.reshape(B, nblocks, block_size, KV, H // KV, hd).swapaxes(0, 1)
    segb = segment_ids.reshape(B, nblocks, block_size).swapaxes(0, 1)
    idxb = idx.reshape(nblocks, block_size)
    out = jax.lax.map(lambda a: block(*a), (qb, segb, idxb))  # [nb, B, bs, KV, G, hd]
    return out.swapaxes(0, 1).reshape(B, T, H, hd)


# ----------------------------------------------------------------------------- flash (pure JAX)


def flash_block(seq_len: int, block_size: int) -> int:
    """flash's tile for rows of `seq_len`: the largest divisor of seq_len that is at most
    min(block_size, FLASH_MAX_BLOCK) (seq_len itself when that is smaller)."""
    block = max(1, min(block_size, FLASH_MAX_BLOCK, seq_len))
    while seq_len % block:
        block -= 1
    return block


def flash_attention(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array, *,
                    block_size: int = 512) -> jax.Array:
    """Causal, segment-masked grouped-query attention a tile at a time, in pure JAX, with a
    hand-written backward: the contract of `attention`, the numerics of `dense` (scores,
    softmax and its gradient in float32; bf16/f16 matmul operands with float32 accumulation).

    Query tile i meets key tiles j <= i only (causal block skipping: about half the work of a
    full [T, T] score matrix); masking is one select on each tile's scores. Tiles of
    `flash_block(T, block_size)`. Heads-major inside ([B, KV, G, T, hd]), so every matmul,
    forward and backward, contracts the minor dimension of its left operand: the form XLA:CPU
    runs natively in bf16. The backward recomputes each tile's probabilities from the saved
    per-query logsumexp twice, as [q, s] for dq and as [s, q] for dk and dv, rather than
    transposing them (docs/design.md, "Attention")."""
    B, T, H, hd = q.shape
    KV = k.shape[2]
    block = flash_block(T, block_size)
    qh = q.reshape(B, T, KV, H // KV, hd).transpose(0, 2, 3, 1, 4)  # [B, KV, G, T, hd]
    kh, vh = k.transpose(0, 2, 1, 3), v.transpose(0, 2, 1, 3)  # [B, KV, T, hd]
    seg = segment_ids.astype(jnp.int32)
    out = _flash(qh, kh, vh, seg, block)
    return out.transpose(0, 3, 1, 2, 4).reshape(B, T, H, hd)


def _tile_mask(seg, i0, i1, j0, j1):
    """[B, 1, 1, i1-i0, j1-j0] bool for queries i0:i1 and keys j0:j1."""
    return attention_mask(seg[:, i0:i1], seg[:, j0:j1], jnp.arange(i0, i1), jnp.arange(j0, j1))


def _tile_mask_t(seg, j0, j1, i0, i1):
    """The transposed mask, [B, 1, 1, j1-j0, i1-i0]: keys j0:j1 (rows) against queries i0:i1."""
    causal = jnp.arange(i0, i1)[None, :] >= jnp.arange(j0, j1)[:, None]
    same = seg[:, j0:j1, None] == seg[:, None, i0:i1]
    return (same & causal[None])[:, None, None]


_NEG = float(jnp.finfo(jnp.float32).min)


def _flash_forward(q, k, v, seg, block):
    """q [B, KV, G, T, hd], k/v [B, KV, T, hd] -> out (q's dtype), lse [B, KV, G, T] float32."""
    T, hd = q.shape[3], q.shape[4]
    scale = 1.0 / math.sqrt(hd)
    outs, lses = [], []
    for i0 in range(0, T, block):
        i1 = i0 + block
        s = jnp.einsum("bkgqh,bksh->bkgqs", q[:, :, :, i0:i1], k[:, :, :i1], preferred_element_type=jnp.float32)
        s = jnp.where(_tile_mask(seg, i0, i1, 0, i1), s * scale, _NEG)
        m = jnp.max(s, axis=-1, keepdims=True)
        e = jnp.exp(s - m)
        l = jnp.sum(e, axis=-1, keepdims=True)
        o = jnp.einsum("bkgqs,bksh->bkgqh", e.astype(v.dtype), v[:, :, :i1], preferred_element_type=jnp.float32)
        outs.append((o / l).astype(q.dtype))
        lses.append((m + jnp.log(l))[..., 0])
    return jnp.concatenate(outs, axis=3), jnp.concatenate(lses, axis=3)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _flash(q, k, v, seg, block):
    return _flash_forward(q, k, v, seg, block)[0]


def _flash_fwd(q, k, v, seg, block):
    out, lse = _flash_forward(q, k, v, seg, block)
    return out, (q, k, v, seg, out, lse)


def _flash_bwd(block, res, ct):
    q, k, v, seg, out, lse = res
    lp, f32 = q.dtype, jnp.float32
    T, hd = q.shape[3], q.shape[4]
    scale = 1.0 / math.sqrt(hd)
    ct = ct.astype(lp)
    delta = jnp.sum(ct.astype(f32) * out.astype(f32), axis=-1)  # [B, KV, G, T]: rowsum(dP * P)
    # dq: query tile i against key tiles 0..i, scores as [q, s]
    dqs = []
    for i0 in range(0, T, block):
        i1 = i0 + block
        s = jnp.einsum("bkgqh,bksh->bkgqs", q[:, :, :, i0:i1], k[:, :, :i1], preferred_element_type=f32)
        p = jnp.where(_tile_mask(seg, i0, i1, 0, i1), jnp.exp(s * scale - lse[..., i0:i1, None]), 0.0)
        dp = jnp.einsum("bkgqh,bksh->bkgqs", ct[:, :, :, i0:i1], v[:, :, :i1], preferred_element_type=f32)
        ds = (p * (dp - delta[..., i0:i1, None]) * scale).astype(lp)
        dqs.append(jnp.einsum("bkgqs,bksh->bkgqh", ds, k[:, :, :i1], preferred_element_type=f32).astype(lp))
    # dk, dv: key tile j against query tiles j..T, scores as [s, q]; the G query heads of a kv
    # head are summed by the contraction
    dks, dvs = [], []
    for j0 in range(0, T, block):
        j1 = j0 + block
        st = jnp.einsum("bksh,bkgqh->bkgsq", k[:, :, j0:j1], q[:, :, :, j0:], preferred_element_type=f32)
        pt = jnp.where(_tile_mask_t(seg, j0, j1, j0, T), jnp.exp(st * scale - lse[..., None, j0:]), 0.0)
        dvs.append(jnp.einsum("bkgsq,bkgqh->bksh", pt.astype(lp), ct[:, :, :, j0:], preferred_element_type=f32))
        dpt = jnp.einsum("bksh,bkgqh->bkgsq", v[:, :, j0:j1], ct[:, :, :, j0:], preferred_element_type=f32)
        dst = (pt * (dpt - delta[..., None, j0:]) * scale).astype(lp)
        dks.append(jnp.einsum("bkgsq,bkgqh->bksh", dst, q[:, :, :, j0:], preferred_element_type=f32))
    dq = jnp.concatenate(dqs, axis=3)
    dk = jnp.concatenate(dks, axis=2).astype(k.dtype)
    dv = jnp.concatenate(dvs, axis=2).astype(v.dtype)
    return dq, dk, dv, None


_flash.defvjp(_flash_fwd, _flash_bwd)


# ----------------------------------------------------------------------------- splash


def splash_block(seq_len: int, block_size: int) -> int:
    """The splash tile for rows of `seq_len`: the largest multiple of 128 that is at most
    `block_size` and divides seq_len (the kernel's grid needs whole tiles)."""
    if seq_len % SPLASH_LANES:
        raise AttentionError(f"model.attention='splash' needs rows whose length is a multiple of {SPLASH_LANES}, "
                             f"got {seq_len} (set data.seq_len to one, or model.attention=auto)")
    if block_size < SPLASH_LANES or block_size % SPLASH_LANES:
        raise AttentionError(f"model.attn_block_size={block_size} must be a multiple of {SPLASH_LANES} "
                             "with model.attention='splash'")
    block = min(block_size, seq_len)
    while seq_len % block:
        block -= SPLASH_LANES
    return block


@functools.lru_cache(maxsize=64)
def _splash_kernel(heads: int, seq_len: int, block: int, interpret: bool):
    """The kernel for one row of `heads` query heads (any number of kv heads dividing them),
    causal; the segment mask comes with each call. Cached: the mask's block structure is
    computed in numpy, once per shape."""
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_kernel as sk
    from jax.experimental.pallas.ops.tpu.splash_attention import splash_attention_mask as sm

    mask = sm.MultiHeadMask([sm.CausalMask((seq_len, seq_len)) for _ in range(heads)])
    sizes = sk.BlockSizes(block_q=block, block_kv=block, block_kv_compute=block,
                          block_q_dkv=block, block_kv_dkv=block, block_kv_dkv_compute=block,
                          block_q_dq=block, block_kv_dq=block)
    return sk.make_splash_mha(mask, block_sizes=sizes, head_shards=1, q_seq_shards=1,
                              residual_checkpoint_name=SPLASH_RESIDUALS, interpret=interpret)


def _splash_rows(q, k, v, segment_ids, block: int, interpret: bool):
    """The kernel over the rows at hand (one device's shard): q [b, T, h, hd] (pre-scaled),
    k/v [b, T, kv, hd] with kv dividing h, segment_ids [b, T] -> [b, T, h, hd]."""
    from jax.experimental.pallas.ops.tpu.splash_attention.splash_attention_kernel import SegmentIds

    _, T, h, _ = q.shape
    # The kernel's mask info is made of concrete arrays; make it outside any trace that jit or
    # shard_map may be running, so it is a constant of the program and never a leaked tracer.
    with jax.ensure_compile_time_eval():
        kernel = _splash_kernel(h, T, block, interpret)

    def one_row(q, k, v, seg):  # [h, T, hd], [kv, T, hd], [kv, T, hd], [T]
        return kernel(q, k, v, SegmentIds(q=seg, kv=seg))

    heads_first = lambda x: x.transpose(0, 2, 1, 3)
    out = jax.vmap(one_row)(heads_first(q), heads_first(k), heads_first(v), segment_ids.astype(jnp.int32))
    return heads_first(out)


def _spec_entry(spec: P, i: int):
    return spec[i] if i < len(spec) else None


def _axis_size(mesh: Mesh, entry) -> int:
    names = () if entry is None else (entry,) if isinstance(entry, str) else tuple(entry)
    return math.prod(mesh.shape[n] for n in names)


def splash_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    segment_ids: jax.Array,
    *,
    mesh: Optional[Mesh] = None,
    block_size: int = 512,
    interpret: Optional[bool] = None,
) -> jax.Array:
    """The splash kernel under the attention contract: q is scaled by 1/sqrt(hd) here (the
    kernel does not scale), each row is one kernel call (jax.vmap), and over a mesh the call
    runs per device under jax.shard_map: rows split as the `batch` rule splits them (data x
    fsdp), query heads as `act_heads` (tensor), the sequence never. kv heads follow their query
    heads: split over the same axes when those divide KV, else each device is given the kv
    heads its query heads use (gathered before the shard_map, so autodiff sums their
    gradients). `interpret`: None runs the kernel in Pallas interpret mode off TPU."""
    B, T, H, hd = q.shape
    KV = k.shape[2]
    block = splash_block(T, block_size)
    if interpret is None:
        interpret = platform(mesh) != "tpu"
    # Pre-scaled in float32 and rounded once to the compute dtype.
    q = (q.astype(jnp.float32) * (1.0 / math.sqrt(hd))).astype(q.dtype)
    run = functools.partial(_splash_rows, block=block, interpret=interpret)
    if mesh is None or mesh.size == 1:
        return run(q, k, v, segment_ids)

    q_spec = logical_to_spec(("batch", None, "act_heads", None), q.shape, mesh)
    rows, heads = _spec_entry(q_spec, 0), _spec_entry(q_spec, 2)
    shards = _axis_size(mesh, heads)
    if shards > 1 and KV % shards:
        # The tensor axis splits the query heads but not the kv heads: give shard d the kv heads
        # its H / shards query heads use. One kv head when they all share it (G a multiple of
        # the heads per shard, e.g. MQA), else the kv head of each query head (groups that
        # straddle two shards).
        per_shard, group = H // shards, H // KV
        if group % per_shard == 0:
            index = [d * per_shard // group for d in range(shards)]
        else:
            index = [(d * per_shard + i) // group for d in range(shards) for i in range(per_shard)]
        index = np.asarray(index, np.int32)
        k, v = jnp.take(k, index, axis=2), jnp.take(v, index, axis=2)
    x_spec = P(rows, None, heads, None)
    fn = jax.shard_map(run, mesh=mesh, in_specs=(x_spec, x_spec, x_spec, P(rows, None)), out_specs=x_spec,
                       check_vma=False)
    return fn(q, k, v, segment_ids)


# ----------------------------------------------------------------------------- cudnn


def cudnn_segments(segment_ids: jax.Array) -> tuple[jax.Array, jax.Array]:
    """cuDNN's description of packed rows: (seqlens [B, T], offsets [B, T + 1]) int32, one
    entry per run of equal segment ids (a segment of the packer is one run; padding at the end
    of a row is one more), in the layout of the `q_seqlen`/`q_offsets` arguments of JAX's
    cuDNN attention: run m of row b covers tokens offsets[b, m] <= t < offsets[b, m] +
    seqlens[b, m]; entries past the row's last run are -1. Causal attention within each run is
    then exactly `attention_mask` whenever each segment id is one contiguous run (as the packer
    writes them). T entries, the most runs a row can have, so no row is ever cut short."""
    B, T = segment_ids.shape
    seg = segment_ids.astype(jnp.int32)
    starts = jnp.concatenate([jnp.ones((B, 1), bool), seg[:, 1:] != seg[:, :-1]], axis=1)  # [B, T]
    first = jax.vmap(lambda row: jnp.nonzero(row, size=T, fill_value=-1)[0])(starts).astype(jnp.int32)
    valid = first >= 0
    following = jnp.concatenate([first[:, 1:], jnp.full((B, 1), -1, jnp.int32)], axis=1)
    ends = jnp.where(following >= 0, following, T)
    seqlens = jnp.where(valid, ends - first, -1)
    offsets = jnp.concatenate([first, jnp.full((B, 1), -1, jnp.int32)], axis=1)
    return seqlens, offsets


def segments_mask(seqlens: jax.Array, offsets: jax.Array, T: int) -> jax.Array:
    """[B, 1, 1, T, T] bool: the mask cuDNN applies for (seqlens, offsets) with a causal
    padding mask: query t sees key s <= t of the same run. For tests against attention_mask."""
    idx = jnp.arange(T)
    start, length = offsets[:, :-1], seqlens  # [B, M]
    inside = (idx[None, None, :] >= start[:, :, None]) & (idx[None, None, :] < (start + length)[:, :, None])
    inside &= (length >= 0)[:, :, None]  # [B, M, T]
    run_of = jnp.argmax(inside, axis=1)  # [B, T]: each token's run (tokens lie in exactly one)
    same = run_of[:, :, None] == run_of[:, None, :]
    return (same & (idx[:, None] >= idx[None, :])[None])[:, None, None]


def _cudnn_available() -> bool:
    try:
        from jax._src.lib import cuda_versions
    except ImportError:
        return False
    return cuda_versions is not None


def _cudnn_packed(q, k, v, seqlens, offsets, scale: float) -> jax.Array:
    """The one call of JAX's private cuDNN attention with segment offsets (packed rows): JAX's
    public jax.nn.dot_product_attention has no segment argument. Pinned by
    tests/test_attention.py (the function and the keyword arguments used here)."""
    from jax._src.cudnn import fused_attention_stablehlo as fa

    return fa.dot_product_attention(q, k, v, q_seqlen=seqlens, kv_seqlen=seqlens, q_offsets=offsets,
                                    kv_offsets=offsets, scale=scale, mask_type=fa.MaskType.PADDING_CAUSAL,
                                    qkv_layout="BTNH")


def cudnn_attention(q: jax.Array, k: jax.Array, v: jax.Array, segment_ids: jax.Array, *,
                    mesh: Optional[Mesh] = None, packed: bool = True) -> jax.Array:
    """cuDNN's fused flash attention under the attention contract (NVIDIA GPUs, bf16/fp16).

    `packed=True` (what `attention` passes, since segment ids are data): the rows' runs of
    segment ids go to cuDNN as sequence offsets (`cudnn_segments`, `_cudnn_packed`), so packed
    documents never see each other. `packed=False`: every row is one causal sequence,
    jax.nn.dot_product_attention(implementation="cudnn", is_causal=True), the public API.
    Raises AttentionError off GPU, without cuDNN, or for inputs cuDNN does not take."""
    plat = platform(mesh)
    if plat not in ("gpu", "cuda") or not _cudnn_available():
        raise AttentionError(f"model.attention='cudnn' needs an NVIDIA GPU with cuDNN; this run's devices are "
                             f"{plat!r}{'' if _cudnn_available() else ' and JAX finds no cuDNN'} "
                             "(use model.attention=auto)")
    hd = q.shape[-1]
    if not cudnn_takes(q.dtype, hd):
        raise AttentionError(f"model.attention='cudnn' needs bfloat16 or float16 compute (model.dtype) and a head "
                             f"dim that is a multiple of 8 up to {CUDNN_MAX_HEAD_DIM}; got {q.dtype} and {hd}")
    scale = 1.0 / math.sqrt(hd)
    if not packed:
        return jax.nn.dot_product_attention(q, k, v, scale=scale, is_causal=True, implementation="cudnn")
    seqlens, offsets = cudnn_segments(segment_ids)
    return _cudnn_packed(q, k, v, seqlens, offsets, scale)
