"""Mesh parsing, the rule table's PartitionSpecs, and sharded == single-device numerics."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from easylemur import sharding
from easylemur.model.config import PRESETS
from easylemur.model.llama import Llama, init_params, param_shardings


def test_parse_mesh():
    assert sharding.parse_mesh("data:1,fsdp:-1,tensor:1", 8) == {"data": 1, "fsdp": 8, "tensor": 1}
    assert sharding.parse_mesh("data:2,fsdp:2,tensor:2", 8) == {"data": 2, "fsdp": 2, "tensor": 2}
    assert sharding.parse_mesh("tensor:4", 4) == {"data": 1, "fsdp": 1, "tensor": 4}
    with pytest.raises(sharding.MeshError, match="multiply to 4 but there are 8 devices"):
        sharding.parse_mesh("data:2,fsdp:2,tensor:1", 8)
    with pytest.raises(sharding.MeshError, match="unknown axis 'model'"):
        sharding.parse_mesh("model:8", 8)
    with pytest.raises(sharding.MeshError, match="do not divide"):
        sharding.parse_mesh("data:3,fsdp:-1", 8)


def test_parse_mesh_with_slices():
    """dcn_data:K splits `data` over K slices; the other axes (and -1) are per slice."""
    assert sharding.parse_mesh_layout("dcn_data:2,fsdp:-1", 8) == ({"data": 1, "fsdp": 4, "tensor": 1}, 2)
    assert sharding.parse_mesh("dcn_data:2,data:2,fsdp:-1,tensor:1", 16) == {"data": 4, "fsdp": 4, "tensor": 1}
    assert sharding.parse_mesh_layout("fsdp:-1", 8) == ({"data": 1, "fsdp": 8, "tensor": 1}, 1)
    assert sharding.mesh_slices("dcn_data:4,fsdp:-1") == 4 and sharding.mesh_slices("fsdp:-1") == 1
    with pytest.raises(sharding.MeshError, match="8 devices do not split into dcn_data=3 slices"):
        sharding.parse_mesh("dcn_data:3,fsdp:-1", 8)
    with pytest.raises(sharding.MeshError, match="axes multiply to 8 but there are 4 devices per slice"):
        sharding.parse_mesh("dcn_data:2,fsdp:8", 8)
    with pytest.raises(sharding.MeshError, match="size of 'dcn_data' must be positive, got -1"):
        sharding.parse_mesh("dcn_data:-1,fsdp:4", 8)
    # one host without slices splits its devices in order: slice k holds the k-th block
    mesh = sharding.make_mesh("dcn_data:2,fsdp:-1")
    assert dict(mesh.shape) == {"data": 2, "fsdp": 4, "tensor": 1}
    assert [d.id for d in mesh.devices[1].flat] == [d.id for d in jax.devices()[4:]]


CFG = dataclasses.replace(PRESETS["tiny"], vocab_size=1000, num_heads=4, num_kv_heads=2)


def test_param_partition_specs():
    mesh = sharding.make_mesh("data:2,fsdp:2,tensor:2")
    specs = jax.tree.map(lambda s: s.spec, param_shardings(CFG, mesh))
    layer = specs["layers_0"]
    assert specs["embed_tokens"]["embedding"] == P("tensor", "fsdp")  # [vocab, embed]
    assert specs["lm_head"]["kernel"] == P("fsdp", "tensor")  # [embed, vocab]
    assert layer["self_attn"]["q_proj"]["kernel"] == P("fsdp", "tensor")  # [embed, heads, head_dim]
    assert layer["self_attn"]["k_proj"]["kernel"] == P("fsdp", "tensor")  # [embed, kv_heads, head_dim]
    assert layer["self_attn"]["o_proj"]["kernel"] == P("tensor", None, "fsdp")  # [heads, head_dim, embed]
    assert layer["mlp"]["gate_proj"]["kernel"] == P("fsdp", "tensor")
    assert layer["mlp"]["down_proj"]["kernel"] == P(("tensor", "fsdp"))  # [mlp, embed]: the wide dim takes both
    assert layer["input_layernorm"]["scale"] == P()
    assert specs["norm"]["scale"] == P()


def test_indivisible_dims_replicate():
    """MQA has one kv head: tensor=2 cannot split it, so that dim is replicated, not an error."""
    cfg = dataclasses.replace(CFG, num_kv_heads=1, vocab_size=1001)
    mesh = sharding.make_mesh("data:2,fsdp:2,tensor:2")
    specs = jax.tree.map(lambda s: s.spec, param_shardings(cfg, mesh))
    assert specs["layers_0"]["self_attn"]["k_proj"]["kernel"] == P("fsdp")
    assert specs["embed_tokens"]["embedding"] == P(None, "fsdp")  # 1001 rows do not split in 2


def test_scanned_params_get_layer_axis():
    cfg = dataclasses.replace(CFG, scan_layers=True)
    mesh = sharding.make_mesh("data:2,fsdp:2,tensor:2")
    specs = jax.tree.map(lambda s: s.spec, param_shardings(cfg, mesh))
    assert specs["layers"]["self_attn"]["q_proj"]["kernel"] == P(None, "fsdp", "tensor")


@pytest.mark.slow
def test_sharded_forward_equals_single_device():
    mesh = sharding.make_mesh("data:2,fsdp:2,tensor:2")
    params = init_params(CFG, jax.random.PRNGKey(0), mesh)
    # really sharded: each device holds a quarter of the fsdp x tensor sharded q kernel
    q = params["layers_0"]["self_attn"]["q_proj"]["kernel"]
    assert q.addressable_shards[0].data.shape == (CFG.hidden_size // 2, CFG.num_heads // 2, CFG.hd)

    ids = np.random.default_rng(0).integers(0, CFG.vocab_size, (4, 32))
    seg = np.array([[1] * 20 + [2] * 12] * 4)
    pos = np.array([list(range(20)) + list(range(12))] * 4)
    batch = sharding.host_local_to_global({"ids": ids, "pos": pos, "seg": seg}, mesh)
    sharded = jax.jit(lambda p, b: Llama(CFG, mesh).apply({"params": p}, b["ids"], b["pos"], b["seg"]))(params, batch)

    single = jax.device_put(params, jax.devices()[0])
    ref = Llama(CFG).apply({"params": single}, jnp.asarray(ids), jnp.asarray(pos), jnp.asarray(seg))
    np.testing.assert_allclose(np.asarray(sharded), np.asarray(ref), rtol=0, atol=1e-5 * np.abs(ref).max())


@pytest.mark.slow
def test_sharded_gradients_equal_single_device():
    """The residual stream split over `tensor` with rows over data x fsdp: every parameter's
    gradient equals the single-device one (the projections gather their kernels over fsdp
    first; without that XLA's partitioner swaps rows: docs/design.md, "Tensor parallelism")."""
    mesh = sharding.make_mesh("data:2,fsdp:2,tensor:2")
    assert sharding.logical_to_spec(("batch", "length", "act_embed"), (4, 32, 128), mesh) == P(("data", "fsdp"), None,
                                                                                                 "tensor")
    params = init_params(CFG, jax.random.PRNGKey(2), mesh)
    ids = np.random.default_rng(1).integers(0, CFG.vocab_size, (4, 32))
    batch = sharding.host_local_to_global({"ids": ids}, mesh)

    def loss(p, ids, m=None):
        return jnp.mean(jax.nn.log_softmax(Llama(CFG, m).apply({"params": p}, ids))[..., 0])

    sharded = jax.jit(jax.grad(lambda p, i: loss(p, i, mesh)))(params, batch["ids"])
    ref = jax.grad(loss)(jax.device_put(params, jax.devices()[0]), jnp.asarray(ids))
    for path, a in jax.tree_util.tree_leaves_with_path(sharded):
        b = np.asarray(_at(ref, path))
        np.testing.assert_allclose(np.asarray(a), b, rtol=0, atol=2e-5 * np.abs(b).max() + 1e-9, err_msg=str(path))


def _at(tree, path):
    for key in path:
        tree = tree[key.key]
    return tree


def test_kernel_gather_keeps_rows_in_place():
    """The reproducer of the partitioner bug (docs/design.md, "Tensor parallelism"), written
    the way easylemur's projections run it: the kernel gathered over fsdp first, right."""
    mesh = sharding.make_mesh("data:2,fsdp:2,tensor:2")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 8, 32)).astype(np.float32)
    w = rng.standard_normal((32, 16)).astype(np.float32)
    act = sharding.named_sharding(("batch", "length", "act_mlp"), x.shape, mesh)
    xs = jax.device_put(x, act)
    ws = jax.device_put(w, NamedSharding(mesh, P("tensor", "fsdp")))  # the reproducer's kernel

    def down(x, w):
        w = sharding.constrain(w, ("mlp", "embed"), mesh, sharding.gathered_rules())
        return sharding.constrain(x @ w, ("batch", "length", "act_embed"), mesh)

    np.testing.assert_allclose(np.asarray(jax.jit(down)(xs, ws)), x @ w, rtol=1e-5, atol=1e-4)


@pytest.mark.slow
def test_scan_equals_unrolled():
    from easylemur.model.stacking import scan_params

    params = jax.device_get(init_params(CFG, jax.random.PRNGKey(1)))
    ids = jnp.asarray(np.random.default_rng(0).integers(0, CFG.vocab_size, (2, 16)))
    ref = Llama(CFG).apply({"params": params}, ids)
    grads = {}
    for remat in ("none", "full", "full_offload"):
        cfg = dataclasses.replace(CFG, scan_layers=True, remat=remat)
        out = Llama(cfg).apply({"params": scan_params(params, CFG.num_layers)}, ids)
        np.testing.assert_allclose(np.asarray(out), np.asarray(ref), atol=1e-5 * np.abs(ref).max())
        loss = lambda p, cfg=cfg: jnp.mean(Llama(cfg).apply({"params": p}, ids) ** 2)
        grads[remat] = jax.grad(loss)(scan_params(params, CFG.num_layers))
    # rematerialising (on the device or from host memory) recomputes the same backward
    for remat in ("full", "full_offload"):
        for a, b in zip(jax.tree.leaves(grads["none"]), jax.tree.leaves(grads[remat])):
            np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-7)
