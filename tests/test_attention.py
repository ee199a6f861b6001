"""The attention implementations behind one contract (easylemur.model.attention): the splash
kernel, run here in Pallas interpret mode, and flash equal the dense reference on packed rows
with grouped-query heads (outputs and q/k/v gradients), sharded over a mesh too; the model with
splash equals transformers; `auto` picks splash when compiling for a TPU; cudnn refuses clearly
without a GPU, and the segment offsets it gives cuDNN describe the reference mask. Interpret mode is slow: shapes
are the smallest the kernel takes (rows of 128-256 tokens, tiny heads)."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.interpreters import partial_eval as pe
from jax.sharding import PartitionSpec as P

import easylemur
from easylemur.config import ConfigError, load_config
from easylemur.model.attention import SPLASH_RESIDUALS, AttentionError, attention, resolve_impl
from easylemur.model.config import LlamaConfig
from easylemur.model.llama import Llama, init_params
from markers import needs_libtpu
from easylemur.sharding import make_mesh, named_sharding
from hf_models import hf_logits, make_hf_model

ROOT = Path(__file__).resolve().parents[1]


def _packed_segments(rows: int, T: int) -> jnp.ndarray:
    """Rows of several documents whose boundaries fall inside the kernel's 128-token tiles,
    and padding (segment 0) at the end of every other row."""
    out = []
    for r in range(rows):
        if r % 2 == 0:
            a, b = 100 * T // 256, 120 * T // 256
            out.append([1] * a + [2] * b + [0] * (T - a - b))
        else:
            out.append([1] * (T // 3) + [2] * (T - T // 3))
    return jnp.asarray(np.array(out, np.int32))


def _inputs(B, T, H, KV, hd, seed=0):
    r = np.random.default_rng(seed)
    # rounded to bf16 so the float32 reference sees exactly what the bf16 runs see
    q, k, v, ct = (jnp.asarray(r.standard_normal(s), jnp.float32).astype(jnp.bfloat16).astype(jnp.float32)
                   for s in ((B, T, H, hd), (B, T, KV, hd), (B, T, KV, hd), (B, T, H, hd)))
    return q, k, v, ct


def _out_and_grads(impl, q, k, v, seg, ct, dtype=jnp.float32, mesh=None, block_size=128):
    """attention's output and the gradients of <output, ct> with respect to q, k, v, in one
    jitted program (in float32 for comparison)."""

    def loss(q, k, v):
        out = attention(q.astype(dtype), k.astype(dtype), v.astype(dtype), seg, impl=impl, mesh=mesh,
                        block_size=block_size)
        return jnp.sum(out.astype(jnp.float32) * ct), out

    (_, out), grads = jax.jit(jax.value_and_grad(loss, (0, 1, 2), has_aux=True))(q, k, v)
    return out, grads


def _rel(a, b) -> float:
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return float(np.abs(a - b).max() / np.abs(b).max())


@pytest.mark.slow
@pytest.mark.parametrize("dtype,bound", [(jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)])
def test_splash_equals_reference(dtype, bound):
    """Two 128-token tiles per row, grouped-query heads (2 per kv head), packed rows. bf16's
    bound: the kernel rounds q (pre-scaled), probabilities and the gradients' operands to bf16
    as the dense bf16 path does (measured: splash 6e-3, dense 4e-3 of the largest value)."""
    B, T, H, KV, hd = 2, 256, 4, 2, 32
    q, k, v, ct = _inputs(B, T, H, KV, hd)
    seg = _packed_segments(B, T)
    ref, ref_grads = _out_and_grads("dense", q, k, v, seg, ct)
    out, grads = _out_and_grads("splash", q, k, v, seg, ct, dtype=dtype)
    assert out.dtype == dtype and out.shape == (B, T, H, hd)
    assert _rel(out, ref) <= bound, _rel(out, ref)
    for name, g, r in zip("qkv", grads, ref_grads):
        assert _rel(g, r) <= bound, (name, _rel(g, r))


@pytest.mark.slow
@pytest.mark.parametrize("heads,kv_heads", [(4, 2), (4, 1), (6, 3)])
def test_splash_sharded_over_a_mesh(heads, kv_heads):
    """Under shard_map on a data 2 x fsdp 2 x tensor 2 mesh: query heads split over tensor, and
    kv heads either split with them (4, 2), or not divisible by it: one kv head for all of a
    shard's query heads (MQA), or groups straddling two shards (6 heads over 3 kv heads: shard
    0 has heads 0-2, which use kv heads 0, 0, 1)."""
    mesh = make_mesh("data:2,fsdp:2,tensor:2")
    B, T, hd = 4, 128, 8
    q, k, v, ct = _inputs(B, T, heads, kv_heads, hd, seed=1)
    seg = _packed_segments(B, T)
    ref, ref_grads = _out_and_grads("dense", q, k, v, seg, ct)
    put = lambda x, heads_axis: jax.device_put(x, named_sharding(("batch", "length", heads_axis, None), x.shape, mesh))
    out, grads = _out_and_grads("splash", put(q, "act_heads"), put(k, "act_kv_heads"), put(v, "act_kv_heads"),
                                seg, ct, mesh=mesh)
    assert out.sharding.spec == P(("data", "fsdp"), None, "tensor")
    assert _rel(out, ref) <= 1e-5, _rel(out, ref)
    for name, g, r in zip("qkv", grads, ref_grads):
        assert _rel(g, r) <= 1e-5, (name, _rel(g, r))


def test_model_with_splash_matches_transformers(tmp_path):
    model = make_hf_model(num_attention_heads=4, num_key_value_heads=2)
    model.save_pretrained(tmp_path)
    m = easylemur.load(tmp_path)
    cfg = dataclasses.replace(m.config, attention="splash", attn_block_size=128)
    ids = np.random.default_rng(0).integers(0, model.config.vocab_size, size=(2, 128))
    ref = hf_logits(model, ids)
    ours = np.asarray(jax.jit(lambda p, x: Llama(cfg).apply({"params": p}, x))(m.params, jnp.asarray(ids)))
    assert np.abs(ours - ref).max() <= 1e-5 * np.abs(ref).max(), np.abs(ours - ref).max()


def _pallas_calls(jaxpr, found=None):
    found = [] if found is None else found
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "pallas_call":
            found.append(str(eqn.params.get("name_and_src_info", eqn.params.get("name", ""))))
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            _pallas_calls(sub, found)
    return found


def test_remat_policy_keeps_or_drops_the_splash_residuals():
    """A rematerialised layer whose policy saves SPLASH_RESIDUALS does not rerun the forward
    kernel in its backward; one that saves nothing does."""
    q, k, v, _ = _inputs(1, 128, 2, 1, 8)
    seg = _packed_segments(1, 128)
    f = lambda q, k, v: jnp.sum(attention(q, k, v, seg, impl="splash", block_size=128))

    def forward_kernels(policy):
        grad = jax.value_and_grad(jax.checkpoint(f, policy=policy), (0, 1, 2))
        # without dead code: the program XLA would run (a recomputation whose outputs go unused
        # is dropped there too)
        jaxpr, _ = pe.dce_jaxpr(jax.make_jaxpr(grad)(q, k, v).jaxpr, [True] * 4)
        return sum("fwd" in name for name in _pallas_calls(jaxpr))

    cp = jax.checkpoint_policies
    assert forward_kernels(cp.save_only_these_names(SPLASH_RESIDUALS)) == 1
    assert forward_kernels(cp.nothing_saveable) == 2


def test_auto_choice():
    """auto: splash when compiling for TPU rows of a multiple of 128; cudnn on GPU for bf16/fp16
    and head dims cuDNN takes; flash on CPU for rows of several flash tiles; elsewhere blockwise
    when the block splits the row, dense for a row of one block."""
    assert resolve_impl("auto", 4096, "tpu", 512) == "splash"
    assert resolve_impl("auto", 4000, "tpu", 500) == "blockwise"
    assert resolve_impl("auto", 2048, "cpu", 512) == "flash"
    assert resolve_impl("auto", 128, "cpu", 512) == "dense"
    assert resolve_impl("auto", 1000, "gpu", 512) == "dense"
    assert resolve_impl("auto", 2048, "gpu", 512, jnp.bfloat16, 128) == "cudnn"
    assert resolve_impl("auto", 2048, "gpu", 512, jnp.float16, 64) == "cudnn"
    assert resolve_impl("auto", 2048, "gpu", 512, jnp.float32, 64) == "blockwise"
    assert resolve_impl("auto", 2048, "gpu", 512, jnp.bfloat16, 256) == "blockwise"
    assert resolve_impl("dense", 4096, "tpu", 512) == "dense"
    # the default, on this CPU: equal to dense
    q, k, v, _ = _inputs(2, 64, 4, 2, 16)
    seg = _packed_segments(2, 64)
    assert LlamaConfig().attention == "auto"
    np.testing.assert_array_equal(attention(q, k, v, seg), attention(q, k, v, seg, impl="dense"))


@pytest.mark.slow
@pytest.mark.parametrize("dtype,bound", [(jnp.float32, 1e-5), (jnp.bfloat16, 2e-2)])
def test_flash_equals_reference(dtype, bound):
    """flash (what auto runs on a CPU): four 64-token tiles per row, so tiles past the diagonal
    are skipped and document boundaries and padding fall inside tiles; grouped-query heads.
    Outputs and q/k/v gradients (its backward is hand-written). bf16 measures 5e-3."""
    B, T, H, KV, hd = 2, 256, 4, 2, 32
    q, k, v, ct = _inputs(B, T, H, KV, hd)
    seg = _packed_segments(B, T)
    ref, ref_grads = _out_and_grads("dense", q, k, v, seg, ct)
    out, grads = _out_and_grads("flash", q, k, v, seg, ct, dtype=dtype, block_size=64)
    assert out.dtype == dtype and out.shape == (B, T, H, hd)
    assert _rel(out, ref) <= bound, _rel(out, ref)
    for name, g, r in zip("qkv", grads, ref_grads):
        assert _rel(g, r) <= bound, (name, _rel(g, r))


def test_flash_sharded_over_a_mesh():
    """flash is plain JAX: on a data 2 x fsdp 2 x tensor 2 mesh XLA partitions it, and it still
    equals dense."""
    mesh = make_mesh("data:2,fsdp:2,tensor:2")
    B, T, H, KV, hd = 4, 128, 4, 2, 8
    q, k, v, ct = _inputs(B, T, H, KV, hd, seed=1)
    seg = _packed_segments(B, T)
    ref, ref_grads = _out_and_grads("dense", q, k, v, seg, ct)
    put = lambda x, heads_axis: jax.device_put(x, named_sharding(("batch", "length", heads_axis, None), x.shape, mesh))
    out, grads = _out_and_grads("flash", put(q, "act_heads"), put(k, "act_kv_heads"), put(v, "act_kv_heads"),
                                seg, ct, mesh=mesh, block_size=32)
    assert _rel(out, ref) <= 1e-5, _rel(out, ref)
    for name, g, r in zip("qkv", grads, ref_grads):
        assert _rel(g, r) <= 1e-5, (name, _rel(g, r))


@pytest.mark.slow
def test_cudnn_refuses_without_cudnn():
    """This machine has no NVIDIA GPU: model.attention=cudnn is a one-line AttentionError (an
    InputError) that names the setting, not a crash inside the call."""
    q, k, v, _ = _inputs(1, 128, 2, 1, 16)
    seg = jnp.ones((1, 128), jnp.int32)
    with pytest.raises(AttentionError, match="model.attention='cudnn' needs an NVIDIA GPU with cuDNN"):
        attention(q.astype(jnp.bfloat16), k.astype(jnp.bfloat16), v.astype(jnp.bfloat16), seg, impl="cudnn")
    assert issubclass(AttentionError, easylemur.errors.InputError)
    cfg = LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=1, num_heads=2,
                      num_kv_heads=1, dtype="bfloat16", attention="cudnn")
    params = init_params(cfg, jax.random.PRNGKey(0))  # initialisation runs dense attention
    with pytest.raises(AttentionError, match="model.attention='cudnn'"):
        Llama(cfg).apply({"params": params}, jnp.ones((1, 8), jnp.int32))


def _runs(*lengths_per_row):
    """Rows of consecutive segments of the given lengths (0 starts padding)."""
    rows = []
    for lengths in lengths_per_row:
        ids = []
        for i, n in enumerate(lengths):
            ids += [i + 1 if n > 0 else 0] * abs(n)
        rows.append(ids)
    return jnp.asarray(np.array(rows, np.int32))


@pytest.mark.slow
def test_cudnn_segments_give_the_reference_mask():
    """The seqlens/offsets cuDNN is given for packed rows (runs of segment ids) describe exactly
    attention_mask's mask: one document, several, padding at the end (segment 0 attends to
    itself), a document per token, documents that end inside and on tile edges."""
    from easylemur.model.attention import attention_mask, cudnn_segments, segments_mask

    T = 16
    seg = _runs([16], [5, 7, -4], [1] * 16, [3, 13], [8, 8], [15, -1])
    seqlens, offsets = cudnn_segments(seg)
    assert seqlens.shape == (6, T) and offsets.shape == (6, T + 1)
    np.testing.assert_array_equal(seqlens[1, :4], [5, 7, 4, -1])
    np.testing.assert_array_equal(offsets[1, :4], [0, 5, 12, -1])
    np.testing.assert_array_equal(offsets[2], list(range(16)) + [-1])
    idx = jnp.arange(T)
    np.testing.assert_array_equal(segments_mask(seqlens, offsets, T), attention_mask(seg, seg, idx, idx))
    # and the packer's rows in the other tests
    seg = _packed_segments(2, 256)
    idx = jnp.arange(256)
    np.testing.assert_array_equal(segments_mask(*cudnn_segments(seg), 256), attention_mask(seg, seg, idx, idx))


def test_cudnn_private_api_is_pinned():
    """Packed rows reach cuDNN through JAX's private fused-attention function (the public
    jax.nn.dot_product_attention has no segments): it, and every argument _cudnn_packed passes,
    exist in the installed JAX. A JAX that moves them fails here, not on a GPU."""
    import inspect

    from jax._src.cudnn import fused_attention_stablehlo as fa

    params = inspect.signature(fa.dot_product_attention).parameters
    for name in ("q_seqlen", "kv_seqlen", "q_offsets", "kv_offsets", "scale", "mask_type", "qkv_layout"):
        assert name in params, name
    assert fa.MaskType.PADDING_CAUSAL
    assert "implementation" in inspect.signature(jax.nn.dot_product_attention).parameters


def test_splash_refuses_what_it_cannot_take():
    q, k, v, _ = _inputs(1, 200, 2, 1, 8)
    with pytest.raises(AttentionError, match="multiple of 128, got 200"):
        attention(q, k, v, jnp.ones((1, 200), jnp.int32), impl="splash")
    with pytest.raises(ConfigError, match="data.seq_len to be a multiple of 128, got 200"):
        load_config(None, ["model.attention=splash", "data.seq_len=200"])
    with pytest.raises(ConfigError, match="attn_block_size=192 must be a multiple of 128"):
        load_config(None, ["model.attention=splash", "model.attn_block_size=192"])
    with pytest.raises(ConfigError, match="attention='sparse' must be one of auto, dense, blockwise, splash, flash, cudnn"):
        load_config(None, ["model.attention=sparse"])
    # parameters are made without running attention on the length the kernel refuses
    params = init_params(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=48, num_layers=1,
                                     num_heads=2, num_kv_heads=1, attention="splash"), jax.random.PRNGKey(0))
    assert params["layers_0"]["self_attn"]["q_proj"]["kernel"].shape == (32, 2, 16)


_AOT_SCRIPT = """
import json, re
from jax.experimental import topologies
from easylemur.config import load_config, model_config
from easylemur.sharding import make_mesh
from easylemur.train.step import build_train_step

devices = topologies.get_topology_desc(platform="tpu", topology_name="v4:2x2x1", chip_config_name="megacore").devices
cfg = load_config(None, ["mesh=data:1,fsdp:2,tensor:2", "model.dtype=bfloat16", "model.scan_layers=true",
                         "model.remat=full", "train.batch_size=4", "data.seq_len=256"])
mesh = make_mesh(cfg.mesh, devices)
model_cfg = model_config(cfg)
text = build_train_step(cfg, model_cfg, mesh).lower(4, 256, mesh).compile().as_text()
print(json.dumps({"devices": len(devices), "attention": model_cfg.attention,
                  "kernels": sorted(set(re.findall(r"splash_mha_[a-z_]+", text)))}))
"""


@pytest.mark.slow
@needs_libtpu
def test_auto_compiles_splash_for_tpu():
    """The tiny preset's train step compiled for a v4-8 (4 megacore devices, fsdp 2 x tensor 2)
    through libtpu on this CPU: with the default attention=auto the program holds the splash
    kernels, forward and both backward ones."""
    # ALLOW_MULTIPLE_LIBTPU_LOAD: another process describing a topology (an aot run) holds
    # libtpu's lock file; only a topology is described here, no chip is opened.
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "", "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}
    p = subprocess.run([sys.executable, "-c", _AOT_SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=600)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    assert p.returncode == 0 and lines, p.stdout[-2000:] + p.stderr[-3000:]
    out = json.loads(lines[-1])
    assert out["devices"] == 4 and out["attention"] == "auto"
    kinds = {name.split("_")[2] for name in out["kernels"]}
    assert kinds == {"fwd", "dq", "dkv"}, out["kernels"]
