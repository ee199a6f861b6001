"""`python -m easylemur.aot --config CFG --topology v4:4x8x8`: does this run fit that TPU?

Compiles the train step `train` would run for the config (the same model config resolution,
the same step builder) for a TPU topology on this CPU through libtpu, without TPU hardware, and prints one JSON line: topology, devices, bytes_per_device
(arguments + outputs - donated aliases + temporaries, from XLA's memory analysis),
hbm_bytes_per_device and fits. A compile-time HBM OOM is an answer (fits: false), not a crash.
Exit status: 0 fits, 1 does not fit, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any, Optional, Sequence

from easylemur.errors import InputError, add_debug_flag, run_cli

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
    """Compiles the train step `train` would run for `cfg` (same model config resolution,
    same step builder) for `topology`, and reports its memory against the device's HBM."""
    from jax.experimental import topologies

    from easylemur import sharding
    from easylemur.step import build_train_step

    topo = topologies.get_topology_desc(platform="tpu", topology_name=topology)
    devices = list(topo.devices)
    mesh = sharding.make_mesh(cfg.mesh, devices)
    model_cfg, model_from = run_model_config(cfg)
    train_step = build_train_step(cfg, model_cfg, mesh)
    B, T = cfg.train.batch_size, cfg.data.seq_len
    hbm = _hbm_for(devices[0].device_kind)
    result = {"topology": topology, "devices": len(devices), "device_kind": devices[0].device_kind,
              "mesh": dict(mesh.shape), "params": model_cfg.num_params(), "model_from": model_from, "batch": [B, T]}
    try:
        compiled = train_step.lower(B, T, mesh).compile()
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


def run_model_config(cfg) -> tuple[Any, str]:
    """(model config, where it came from): the one `train` would resolve for `cfg` (resumed
    checkpoint, init.from, or preset; vocabulary growth included). When the weights it names
    are not readable on this machine (the usual case: checking a pod run on a laptop before the
    weights are there), the preset with the config's model.* keys, and the output says so."""
    from easylemur import checkpoint, hf
    from easylemur.config import ConfigError, model_config
    from easylemur.state import resolve_run

    try:
        resume = None
        if cfg.workdir and (checkpoint.as_path(cfg.workdir) / "checkpoints").is_dir():
            try:
                resume = checkpoint.read_meta(cfg.workdir)
            except checkpoint.CheckpointError:  # an empty checkpoints/ directory: a fresh start
                pass
        spec = resolve_run(cfg, resume)
    except (ConfigError, checkpoint.CheckpointError, hf.HFFormatError, OSError) as e:
        if not cfg.init["from"]:
            raise
        return model_config(cfg), f"preset {cfg.model.preset!r} with the config's model keys ({e})"
    if spec.resume is not None:
        return spec.model_cfg, f"resumed checkpoint {spec.resume.path}"
    return spec.model_cfg, f"init.from={cfg.init['from']}" if cfg.init["from"] else "preset and model keys"


def main(argv: Optional[Sequence[str]] = None) -> int:
    from easylemur.config import OVERRIDE_HELP, cli_config

    parser = argparse.ArgumentParser(
        prog="python -m easylemur.aot",
        description="Compile a config's train step for a TPU topology on this CPU (via libtpu) and "
        f"report per-device memory against HBM. Needs libtpu (pip install 'easylemur[tpu]'). {OVERRIDE_HELP}",
    )
    parser.add_argument("--config", required=True, help="a configs/*.py file")
    parser.add_argument("--topology", required=True, help="e.g. v4:4x8x8, v5e:2x2, v5p:2x2x2")
    add_debug_flag(parser)
    args, cfg = cli_config(parser, argv)
    try:
        result = compile_for_topology(cfg, args.topology)
    except InputError:
        raise
    except Exception as e:
        if "topology" in str(e).lower() or "libtpu" in str(e).lower() or "tpu" in type(e).__name__.lower():
            raise InputError(f"cannot compile for topology {args.topology!r}: {e}") from e
        raise
    print(json.dumps(result), flush=True)
    return 0 if result["fits"] else 1


if __name__ == "__main__":
    sys.exit(run_cli(main))
