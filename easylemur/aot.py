"""`python -m easylemur.aot --config CFG --topology v4:4x8x8`: does this run fit that TPU?

Compiles the real train step (the one train.py runs) for a TPU topology on this CPU through
libtpu, without TPU hardware, and prints one JSON line: topology, devices, bytes_per_device
(arguments + outputs - donated aliases + temporaries, from XLA's memory analysis),
hbm_bytes_per_device and fits. A compile-time HBM OOM is an answer (fits: false), not a crash.
Exit status: 0 fits, 1 does not fit, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Optional, Sequence

# Usable HBM per device as XLA reports it (bytes), for when the compile succeeds and so
# reports no capacity of its own. v4: 15.25 GiB per device as compiled for v4:4x8x8.
_HBM = {"v4": 15.25 * 2**30, "v5e": 15.75 * 2**30, "v5 lite": 15.75 * 2**30, "v5p": 95.74 * 2**30, "v6e": 31.25 * 2**30, "v6 lite": 31.25 * 2**30}

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def _hbm_for(kind: str) -> float:
    kind = kind.lower()
    for key, value in sorted(_HBM.items(), key=lambda kv: -len(kv[0])):
        if key in kind.replace("tpu ", ""):
            return value
    return float("nan")


def _parse_oom(message: str) -> tuple[Optional[float], Optional[float]]:
    """(used, capacity) bytes from XLA's compile-time OOM message (two wordings seen)."""
    for pattern in (r"Used ([\d.]+)([KMGT]?) of ([\d.]+)([KMGT]?) hbm",
                    r"required for [^(]*\(([\d.]+)([KMGT]?)\) exceeds available HBM \(([\d.]+)([KMGT]?)\)"):
        m = re.search(pattern, message)
        if m:
            return float(m.group(1)) * _UNITS[m.group(2)], float(m.group(3)) * _UNITS[m.group(4)]
    return None, None


def compile_for_topology(cfg, topology: str) -> dict:
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies

    from easylemur import checkpoint, sharding
    from easylemur.config import model_config
    from easylemur.models.llama import param_shardings
    from easylemur.optim import make_optimizer
    from easylemur.train import abstract_state, make_train_step

    topo = topologies.get_topology_desc(platform="tpu", topology_name=topology)
    devices = list(topo.devices)
    mesh = sharding.make_mesh(cfg.mesh, devices)
    model_cfg = model_config(cfg)
    tx, _ = make_optimizer(cfg.optimizer, cfg.train.steps)
    param_sh = param_shardings(model_cfg, mesh)
    params_abs = checkpoint.abstract_params(model_cfg, param_sh)
    state_abs, state_sh = abstract_state(params_abs, tx, param_sh, mesh)
    B, T = cfg.train.batch_size, cfg.data.seq_len
    row = sharding.batch_sharding(mesh, 2)
    batch_abs = {
        k: jax.ShapeDtypeStruct((B, T), jnp.int32, sharding=row)
        for k in ("input_ids", "loss_mask", "segment_ids", "positions")
    }
    batch_abs["source"] = jax.ShapeDtypeStruct((B,), jnp.int32, sharding=sharding.batch_sharding(mesh, 1))
    step = jax.jit(
        make_train_step(model_cfg, mesh, tx, cfg.train.grad_accum, cfg.train.z_loss, cfg.train.loss_chunk),
        in_shardings=(state_sh, {k: v.sharding for k, v in batch_abs.items()}),
        out_shardings=(state_sh, None), donate_argnums=(0,),
    )
    hbm = _hbm_for(devices[0].device_kind)
    result = {"topology": topology, "devices": len(devices), "device_kind": devices[0].device_kind,
              "mesh": dict(mesh.shape), "params": model_cfg.num_params(), "batch": [B, T]}
    try:
        compiled = step.lower(state_abs, batch_abs).compile()
    except Exception as e:  # XLA raises a runtime error for compile-time OOM
        text = str(e)
        if "RESOURCE_EXHAUSTED" not in text and "hbm" not in text.lower():
            raise
        used, cap = _parse_oom(text)
        return {**result, "bytes_per_device": used, "hbm_bytes_per_device": cap or hbm, "fits": False,
                "error": text.splitlines()[0][:300]}
    mem = compiled.memory_analysis()
    used = (mem.argument_size_in_bytes + mem.output_size_in_bytes - mem.alias_size_in_bytes
            + mem.temp_size_in_bytes + getattr(mem, "generated_code_size_in_bytes", 0))
    breakdown = {k: int(getattr(mem, f"{k}_size_in_bytes", 0)) for k in ("argument", "output", "alias", "temp", "generated_code")}
    # The verdict is the TPU compiler's: it checks the program's buffers against the chip's
    # HBM and fails the compile (handled above) when they do not fit. The byte count is the
    # sum of XLA's allocations, which can exceed what its heap simulation keeps live at once.
    return {**result, "bytes_per_device": int(used), "hbm_bytes_per_device": hbm, "fits": True,
            "fits_by": "TPU compiler HBM check", "breakdown": breakdown}


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m easylemur.aot",
        description="Compile a config's train step for a TPU topology on this CPU (via libtpu) and "
        "report per-device memory against HBM. Needs libtpu (pip install 'easylemur[tpu]').",
    )
    parser.add_argument("--config", required=True, help="a configs/*.py file")
    parser.add_argument("--topology", required=True, help="e.g. v4:4x8x8, v5e:2x2, v5p:2x2x2")
    args, rest = parser.parse_known_args(argv)
    bad = [r for r in rest if not r.startswith("--config.")]
    if bad:
        parser.error(f"unrecognised arguments {bad}; overrides look like --config.train.batch_size=8")

    from easylemur.config import ConfigError, load_config

    try:
        cfg = load_config(args.config, [r[len("--config."):] for r in rest])
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        result = compile_for_topology(cfg, args.topology)
    except Exception as e:
        if "topology" in str(e).lower() or "libtpu" in str(e).lower() or "tpu" in type(e).__name__.lower():
            print(f"error: cannot compile for topology {args.topology!r}: {e}", file=sys.stderr)
            return 2
        raise
    print(json.dumps(result), flush=True)
    return 0 if result["fits"] else 1


if __name__ == "__main__":
    sys.exit(main())
