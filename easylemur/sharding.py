"""Device mesh, logical-axis rules, and the helpers that turn rules into shardings.

Sharding is data: `RULES` maps each logical axis name the model uses to mesh axes. A mesh axis
that does not divide a dimension is dropped for that array (replicated instead) rather than
failing, so one rule table serves MHA, GQA and MQA shapes alike.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import jax
import numpy as np
from jax.sharding import AxisType, Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from easylemur.errors import InputError

MESH_AXES = ("data", "fsdp", "tensor")

# logical axis -> mesh axis (or tuple of mesh axes, or None for replicated)
RULES: tuple[tuple[str, Any], ...] = (
    # parameters
    ("vocab", "tensor"),
    ("embed", "fsdp"),
    ("heads", "tensor"),
    ("kv_heads", "tensor"),
    ("head_dim", None),
    # then fsdp: a [mlp, embed] kernel (down_proj) is split on its wide mlp dimension, not on
    # embed (already fsdp's in gate/up_proj, [embed, mlp]); at fsdp 256 an 8192-wide embed leaves
    # 32 columns a device, which the TPU's (8, 128) tiles pad 4x in every optimizer buffer
    ("mlp", ("tensor", "fsdp")),
    ("norm", None),
    ("layers", None),
    # activations
    ("batch", ("data", "fsdp")),
    ("length", None),
    # The residual stream's embedding split over `tensor` (as MaxText does): a tensor-parallel
    # layer then saves 1/tensor of its input for the backward (model/llama.py's `_dense` says
    # what that needs of the projections to stay right).
    ("act_embed", "tensor"),
    ("act_heads", "tensor"),
    ("act_kv_heads", "tensor"),
    ("act_mlp", "tensor"),
    ("act_vocab", "tensor"),
)


class MeshError(InputError):
    pass


# The slices of a multi-slice job (TPU slices joined by the data-center network, or GPU hosts
# over their NICs) only ever split the `data` axis: `dcn_data:K` in a mesh spec makes `data`
# K times larger, its outer factor running across the K slices, so each slice holds whole FSDP
# and tensor groups and only the gradient reduction crosses the slow network (docs/design.md,
# "Multi-slice").
DCN_AXES = ("dcn_data",)


def _mesh_terms(spec: str) -> dict[str, int]:
    """The axis sizes a mesh spec names, checked one by one (-1 left for the caller)."""
    sizes: dict[str, int] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, size = part.partition(":")
        name = name.strip()
        if name not in MESH_AXES + DCN_AXES:
            raise MeshError(f"mesh {spec!r}: unknown axis {name!r}; axes are {', '.join(MESH_AXES + DCN_AXES)}")
        if name in sizes:
            raise MeshError(f"mesh {spec!r}: axis {name!r} given twice")
        try:
            sizes[name] = int(size)
        except ValueError:
            raise MeshError(f"mesh {spec!r}: size of {name!r} must be an integer, got {size!r}") from None
        if sizes[name] == 0 or sizes[name] < -1 or (name in DCN_AXES and sizes[name] < 1):
            raise MeshError(f"mesh {spec!r}: size of {name!r} must be positive{'' if name in DCN_AXES else ' or -1'}, "
                            f"got {sizes[name]}")
    return sizes


def mesh_slices(spec: str) -> int:
    """How many slices a mesh spec spans: its dcn_data (1 without one)."""
    return _mesh_terms(spec).get("dcn_data", 1)


def parse_mesh_layout(spec: str, num_devices: int) -> tuple[dict[str, int], int]:
    """'dcn_data:2,fsdp:-1' over N devices -> ({'data': 1, 'fsdp': N // 2, 'tensor': 1}, 2): the
    axes within one slice, and the number of slices the `data` axis spans."""
    sizes = _mesh_terms(spec)
    slices = sizes.pop("dcn_data", 1)
    if num_devices % slices:
        raise MeshError(f"mesh {spec!r}: {num_devices} devices do not split into dcn_data={slices} slices")
    per_slice = num_devices // slices
    for name in MESH_AXES:
        sizes.setdefault(name, 1)
    free = [n for n, s in sizes.items() if s == -1]
    if len(free) > 1:
        raise MeshError(f"mesh {spec!r}: only one axis may be -1, got {free}")
    fixed = math.prod(s for s in sizes.values() if s != -1)
    where = f"{per_slice} devices per slice" if slices > 1 else f"{num_devices} devices"
    if free:
        if per_slice % fixed:
            raise MeshError(f"mesh {spec!r}: {where} do not divide by the fixed axes' product {fixed}")
        sizes[free[0]] = per_slice // fixed
    elif fixed != per_slice:
        raise MeshError(f"mesh {spec!r}: axes multiply to {fixed} but there are {where}")
    return {n: sizes[n] for n in MESH_AXES}, slices


def parse_mesh(spec: str, num_devices: int) -> dict[str, int]:
    """'data:1,fsdp:-1,tensor:1' -> {'data': 1, 'fsdp': N, 'tensor': 1} for N devices: the
    mesh's axis sizes, `data` counting every slice's (dcn_data x data)."""
    ici, slices = parse_mesh_layout(spec, num_devices)
    return {**ici, "data": ici["data"] * slices}


def device_slice(device: Any) -> int:
    """The slice a device belongs to: its TPU slice, else its process (a GPU host)."""
    index = getattr(device, "slice_index", None)
    return int(index) if index is not None else int(getattr(device, "process_index", 0))


def make_mesh(spec: str = "data:1,fsdp:-1,tensor:1", devices: Sequence[jax.Device] | None = None) -> Mesh:
    devices = list(devices if devices is not None else jax.devices())
    ici, slices = parse_mesh_layout(spec, len(devices))
    shape = tuple(ici[n] for n in MESH_AXES)
    tpu_slices = sorted({d.slice_index for d in devices if getattr(d, "slice_index", None) is not None})
    if len(tpu_slices) > 1 and slices != len(tpu_slices):
        raise MeshError(f"mesh {spec!r}: the devices are in {len(tpu_slices)} TPU slices; name them with "
                        f"dcn_data:{len(tpu_slices)} (data parallel across slices, the other axes within each)")
    # Each slice's devices, in slice order; every slice gets the same topology-aware layout. One
    # host with no slices (a CPU, one GPU box) splits its devices in order, which is how the
    # tests check that a dcn_data mesh computes what a single-slice one does.
    ordered = sorted(devices, key=lambda d: (device_slice(d), d.id))
    per_slice = len(devices) // slices
    groups = [ordered[i * per_slice:(i + 1) * per_slice] for i in range(slices)]
    owner = {device_slice(d): i for i, g in enumerate(groups) for d in g}
    if len(owner) > 1 and any(owner[device_slice(d)] != i for i, g in enumerate(groups) for d in g):
        raise MeshError(f"mesh {spec!r}: dcn_data={slices} would split a host's or slice's devices between slices; "
                        f"it must divide the {len(owner)} hosts/slices the devices are on")
    arrays = [_slice_mesh(shape, g) for g in groups]
    return Mesh(np.concatenate(arrays, axis=0), MESH_AXES, axis_types=(AxisType.Auto,) * 3)


def _slice_mesh(shape: tuple[int, ...], devices: list) -> np.ndarray:
    """One slice's devices arranged as `shape`: topology-aware where the platform supports it
    (TPU), else in device order."""
    try:
        return np.asarray(jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * 3, devices=devices).devices)
    except Exception:
        return np.asarray(devices).reshape(shape)


def gathered_rules(rules: Sequence[tuple[str, Any]] = RULES, axis: str = "fsdp") -> tuple[tuple[str, Any], ...]:
    """The rule table with `axis` taken out of every target: a parameter constrained by it is
    gathered over that axis (what FSDP does before a layer uses its weights)."""
    def drop(target):
        if target == axis:
            return None
        if isinstance(target, tuple):
            kept = tuple(t for t in target if t != axis)
            return kept[0] if len(kept) == 1 else (kept or None)
        return target
    return tuple((name, drop(target)) for name, target in rules)


def logical_to_spec(
    logical: Sequence[str | None] | None,
    shape: Sequence[int],
    mesh: Mesh,
    rules: Sequence[tuple[str, Any]] = RULES,
) -> P:
    """PartitionSpec for an array of `shape` whose dims carry the `logical` axis names."""
    if logical is None:
        return P()
    table = dict(rules)
    used: set[str] = set()
    out = []
    for name, dim in zip(logical, shape):
        target = table.get(name) if name is not None else None
        if name is not None and name not in table:
            raise KeyError(f"logical axis {name!r} has no sharding rule")
        axes = (target,) if isinstance(target, str) else tuple(target or ())
        kept = []
        size = 1
        for ax in axes:
            n = mesh.shape[ax]
            if ax in used or n == 1 or dim % (size * n):
                continue
            kept.append(ax)
            size *= n
        used.update(kept)
        out.append(None if not kept else kept[0] if len(kept) == 1 else tuple(kept))
    while out and out[-1] is None:
        out.pop()
    return P(*out)


def named_sharding(logical, shape, mesh: Mesh, rules=RULES) -> NamedSharding:
    return NamedSharding(mesh, logical_to_spec(logical, shape, mesh, rules))


def tree_shardings(logical_tree: Any, shape_tree: Any, mesh: Mesh, rules=RULES) -> Any:
    """Shardings for a pytree, from a matching tree of logical PartitionSpecs (flax
    `nn.get_partition_spec`) and a tree of arrays or ShapeDtypeStructs."""
    return jax.tree.map(
        lambda logical, x: named_sharding(tuple(logical), x.shape, mesh, rules),
        logical_tree,
        shape_tree,
        is_leaf=lambda x: isinstance(x, P),
    )


def constrain(x: jax.Array, logical: Sequence[str | None], mesh: Mesh | None, rules=RULES) -> jax.Array:
    """with_sharding_constraint by logical names; a no-op without a mesh or on one device."""
    if mesh is None or mesh.size == 1:
        return x
    return jax.lax.with_sharding_constraint(x, named_sharding(logical, x.shape, mesh, rules))


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
    """Rows over data x fsdp, everything else replicated."""
    return NamedSharding(mesh, P(("data", "fsdp"), *([None] * (ndim - 1))))


def host_local_to_global(batch: Mapping[str, np.ndarray], mesh: Mesh) -> dict[str, jax.Array]:
    """Assembles each process's rows into global jax.Arrays sharded over the batch axes.

    Every process passes its own `global_rows / process_count` rows, in process order."""
    return {
        k: jax.make_array_from_process_local_data(batch_sharding(mesh, np.ndim(v)), np.asarray(v))
        for k, v in batch.items()
    }


def process_sum(x: np.ndarray) -> np.ndarray:
    """Elementwise sum of a host array over all processes; every process must call it."""
    if jax.process_count() == 1:
        return x
    from jax.experimental import multihost_utils

    return np.asarray(multihost_utils.process_allgather(x)).sum(axis=0)


def all_processes_agree(ok: bool) -> bool:
    """True on every process when `ok` is true on every process (a collective: all call it)."""
    return not process_sum(np.array([0 if ok else 1], np.int64))[0]


def sync_processes(name: str) -> None:
    """Waits until every process reaches the barrier `name` (nothing to do for one process)."""
    if jax.process_count() > 1:
        from jax.experimental import multihost_utils

        multihost_utils.sync_global_devices(name)


def platform(mesh: Mesh | None) -> str:
    """The platform the program is compiled for: the mesh's devices' ('cpu', 'gpu'/'cuda',
    'tpu'), not the default backend (AOT compiles for TPU devices on a CPU host); the default
    backend without a mesh. The one place the model, attention and the loss learn it."""
    if mesh is not None:
        return mesh.devices.flat[0].platform
    return jax.default_backend()


ACCELERATED = ("tpu", "gpu", "cuda", "rocm")
