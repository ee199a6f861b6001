"""Device mesh, logical-axis rules, and the helpers that turn rules into shardings.

Sharding is data: `RULES` maps each logical axis name the model uses to mesh axes. A mesh axis
that does not divide a dimension is dropped for that array (replicated instead) rather than
failing, so one rule table serves MHA, GQA and MQA shapes alike.
"""

from __future__ import annotations

import math
import os
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
    ("mlp", "tensor"),
    ("norm", None),
    ("layers", None),
    # activations
    ("batch", ("data", "fsdp")),
    ("length", None),
    # None, not "tensor": with the embedding of the residual stream split over `tensor`, XLA
    # fuses the split into the projections' all-reduce as a reduce-scatter, which XLA:CPU
    # (jax 0.10) miscompiles on a data x fsdp x tensor mesh (wrong rows; tests/test_sharding.py).
    # Tensor-parallel runs keep their saved layer inputs small with model.remat=full_offload.
    ("act_embed", None),
    ("act_heads", "tensor"),
    ("act_kv_heads", "tensor"),
    ("act_mlp", "tensor"),
    ("act_vocab", "tensor"),
)


class MeshError(InputError):
    pass


def parse_mesh(spec: str, num_devices: int) -> dict[str, int]:
    """'data:1,fsdp:-1,tensor:1' -> {'data': 1, 'fsdp': N, 'tensor': 1} for N devices."""
    sizes: dict[str, int] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        name, _, size = part.partition(":")
        name = name.strip()
        if name not in MESH_AXES:
            raise MeshError(f"mesh {spec!r}: unknown axis {name!r}; axes are {', '.join(MESH_AXES)}")
        if name in sizes:
            raise MeshError(f"mesh {spec!r}: axis {name!r} given twice")
        try:
            sizes[name] = int(size)
        except ValueError:
            raise MeshError(f"mesh {spec!r}: size of {name!r} must be an integer, got {size!r}") from None
        if sizes[name] == 0 or sizes[name] < -1:
            raise MeshError(f"mesh {spec!r}: size of {name!r} must be positive or -1, got {sizes[name]}")
    for name in MESH_AXES:
        sizes.setdefault(name, 1)
    free = [n for n, s in sizes.items() if s == -1]
    if len(free) > 1:
        raise MeshError(f"mesh {spec!r}: only one axis may be -1, got {free}")
    fixed = math.prod(s for s in sizes.values() if s != -1)
    if free:
        if num_devices % fixed:
            raise MeshError(f"mesh {spec!r}: {num_devices} devices do not divide by the fixed axes' product {fixed}")
        sizes[free[0]] = num_devices // fixed
    elif fixed != num_devices:
        raise MeshError(f"mesh {spec!r}: axes multiply to {fixed} but there are {num_devices} devices")
    return {n: sizes[n] for n in MESH_AXES}


def make_mesh(spec: str = "data:1,fsdp:-1,tensor:1", devices: Sequence[jax.Device] | None = None) -> Mesh:
    devices = list(devices if devices is not None else jax.devices())
    sizes = parse_mesh(spec, len(devices))
    shape = tuple(sizes[n] for n in MESH_AXES)
    try:
        # Topology-aware placement where the platform supports it (TPU); Auto axes because the
        # model uses with_sharding_constraint, not the explicit-sharding type system.
        return jax.make_mesh(shape, MESH_AXES, axis_types=(AxisType.Auto,) * 3, devices=devices)
    except Exception:
        return Mesh(np.asarray(devices).reshape(shape), MESH_AXES, axis_types=(AxisType.Auto,) * 3)


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


def initialize_distributed(
    coordinator_address: str = "", num_processes: int = 0, process_id: int = -1
) -> None:
    """Multi-host start-up. Explicit arguments for GPU/CPU clusters; on TPU VMs (several
    workers) jax finds the coordinator itself. Single-process runs do nothing."""
    if coordinator_address:
        # Must run before any backend starts; gloo only affects the CPU backend's collectives.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
        jax.distributed.initialize(
            coordinator_address=coordinator_address,
            num_processes=num_processes or None,
            process_id=None if process_id < 0 else process_id,
        )
    elif _on_tpu_vm():
        # jax finds the pod's coordinator, process count and index from the TPU VM metadata;
        # on a single-host TPU VM this is one process and costs nothing.
        jax.distributed.initialize()


def platform(mesh: Mesh | None) -> str:
    """The platform the program is compiled for: the mesh's devices' ('cpu', 'gpu'/'cuda',
    'tpu'), not the default backend (AOT compiles for TPU devices on a CPU host); the default
    backend without a mesh. The one place the model, attention and the loss learn it."""
    if mesh is not None:
        return mesh.devices.flat[0].platform
    return jax.default_backend()


ACCELERATED = ("tpu", "gpu", "cuda", "rocm")


def _on_tpu_vm() -> bool:
    from easylemur.host import tpu_device_nodes

    if os.environ.get("JAX_PLATFORMS", "") not in ("", "tpu"):
        return False
    return tpu_device_nodes()
