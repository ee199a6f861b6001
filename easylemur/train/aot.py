"""`python -m easylemur.aot --config CFG --accelerator v4-512`: does this run fit that TPU pod?

Compiles the train step `train` would run for the config (the same model config resolution,
the same step builder) on this CPU through libtpu, for the devices a TPU VM of that type
presents to JAX, and prints one JSON line (docs/design.md, "TPU AOT"):

  accelerator, topology, chip_config, devices, device_kind, mesh, params, model_from, batch,
  attention, peak_bytes_per_device (the TPU compiler's own peak, the figure it checks against
  HBM: "Total bytes" of its memory-usage report), hbm_bytes_per_device (the capacity the
  compiler reports), headroom (1 - peak / HBM), fits, memory_analysis (XLA's per-kind sums,
  which may add up to more than the peak), flops_per_step and flops_per_device_per_step
  (metrics.flops_per_token's formula: cost_analysis counts a scanned layer once and leaves
  Pallas kernels out).

With --memory-detail, a "peak_buffers" object (`memory_detail`: the largest buffers live at the
compiler's peak in HBM with shape, layout and tile padding, and their totals) and a table on
stderr.

With --cost, a "cost" object (step_cost: FLOPs, HBM bytes, collective bytes, host offload and
a roofline step time per device, an estimate) and a short table on stderr.

With --memory-only, the compile stops once the compiler has decided whether the step fits
(`memory_only`): the same verdict and figures, in seconds instead of minutes for a 70B step,
without generating the program's code ("memory_analysis": null, "memory_only": true).

A compile-time HBM OOM is an answer (fits: false), not a crash. Exit status: 0 fits, 1 does not
fit, 2 bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

from easylemur.errors import InputError, add_debug_flag
from easylemur.train.peak_buffers import compiler_peak_bytes_of, memory_detail, memory_detail_table

_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}

# Chips -> the torus a slice of that many chips is (gcloud's shapes; v4 and v5p 3D, v5e and
# v6e 2D).
_SHAPES_3D = {4: "2x2x1", 8: "2x2x2", 16: "2x2x4", 32: "2x4x4", 64: "4x4x4", 128: "4x4x8", 256: "4x8x8",
              512: "8x8x8", 1024: "8x8x16", 2048: "8x16x16", 3072: "12x16x16", 4096: "16x16x16"}
_SHAPES_2D = {1: "1x1", 4: "2x2", 8: "2x4", 16: "4x4", 32: "4x8", 64: "8x8", 128: "8x16", 256: "16x16"}
# gcloud accelerator prefix -> (libtpu platform name, cores per chip counted in the type's
# number, chip config a TPU VM of that type runs JAX in). v4 and v5p VMs run in megacore mode:
# each chip's two TensorCores are one JAX device with the whole chip's HBM (MaxText compiles
# them the same way); v5e and v6e have one core per chip.
_ACCELERATORS = {"v4": ("v4", 2, "megacore"), "v5p": ("v5p", 2, "megacore"), "v5litepod": ("v5e", 1, "default"),
                 "v6e": ("v6e", 1, "default")}


def accelerator_topology(accelerator: str) -> tuple[str, str]:
    """gcloud's accelerator type ('v4-512', 'v5litepod-16', 'v5p-128', 'v6e-256') -> (libtpu
    topology name, chip config) of what a TPU VM of that type presents to JAX."""
    m = re.fullmatch(r"(v4|v5p|v5litepod|v6e)-(\d+)", accelerator.strip())
    if not m:
        raise InputError(f"--accelerator {accelerator!r}: expected a TPU type as gcloud names it: v4-N, v5litepod-N, "
                         "v5p-N or v6e-N (e.g. v4-512)")
    platform, per_chip, chip_config = _ACCELERATORS[m.group(1)]
    n = int(m.group(2))
    chips = n // per_chip
    shapes = _SHAPES_3D if per_chip == 2 else _SHAPES_2D
    if n % per_chip or chips not in shapes:
        sizes = ", ".join(f"{m.group(1)}-{c * per_chip}" for c in shapes)
        raise InputError(f"--accelerator {accelerator}: no such slice; {m.group(1)} slices are {sizes}")
    return f"{platform}:{shapes[chips]}", chip_config


def default_chip_config(topology: str) -> str:
    """The chip config a TPU VM runs JAX in for this topology's generation."""
    return "megacore" if topology.split(":")[0] in ("v4", "v5p") else "default"


def _host_has_tpu_chips() -> bool:
    """TPU chips appear to a VM as /dev/accel* (v2-v5e) or /dev/vfio/* (v5p, v6e)."""
    dev = Path("/dev")
    return any(dev.glob("accel*")) or any(p.name != "vfio" for p in (dev / "vfio").glob("*"))


def torus_wrap(topology: str) -> tuple[bool, bool, bool]:
    """Which of the slice's ICI dimensions close into a ring (wraparound links): on v4 and v5p
    every dimension of a slice of 64 chips or more (4x4x4 and up, built of whole 4x4x4 cubes
    joined by optical switches), none below; on v5e and v6e a dimension of 16 chips (the full
    pod's). Without it libtpu describes an open mesh, on which the TPU compiler runs every
    large FSDP all-gather as an all-reduce of a zero-padded buffer: twice the bytes
    (docs/design.md, "Torus wraparound")."""
    generation, _, shape = topology.partition(":")
    try:
        dims = [int(d) for d in shape.split("x")]
    except ValueError:
        return (False, False, False)
    if generation in ("v4", "v5p", "v5"):
        closed = math.prod(dims) >= 64 and all(d % 4 == 0 for d in dims)
        wrap = [closed] * len(dims)
    else:
        wrap = [d == 16 for d in dims]
    return tuple((wrap + [False] * 3)[:3])


def topology_devices(topology: str, chip_config: str, num_slices: int = 1) -> list:
    """The devices `num_slices` slices of `topology` present to JAX (each device knows its
    `slice_index`: a multi-slice job's slices are joined by the data-center network), with the
    slice's torus wraparound (`torus_wrap`) and 2x2 chips per host, as TPU VMs have them."""
    from jax.experimental import topologies

    if not _host_has_tpu_chips():
        # libtpu takes /tmp/libtpu_lockfile so that two processes never drive the same chips;
        # a compile-only libtpu on a host without chips drives none, and the lock would only make
        # a second AOT check (or the test suite beside one) fail with "Internal error when
        # accessing libtpu multi-process lockfile". Read when libtpu initializes, so set here.
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    import jax

    # An executable compiled for a described topology cannot be loaded back on this host (no TPU
    # client: "PjRtCompiler must be constructed with a Client"), so a persistent compilation cache
    # would only store what it can never read, and warn on every second compile of the same step.
    # JAX decides once per process whether it uses the cache: this holds for a process that has
    # compiled nothing yet (`python -m easylemur.aot`); one that has (a test worker) may still warn.
    jax.config.update("jax_enable_compilation_cache", False)
    kwargs = {} if chip_config == "default" else {"chip_config_name": chip_config}
    wrap = torus_wrap(topology)
    if any(wrap):
        kwargs.update(wrap=wrap, chips_per_host_bounds=(2, 2, 1))
    if num_slices > 1:
        kwargs["num_slices"] = num_slices
    try:
        with _libtpu_start_quiet(not _host_has_tpu_chips()):
            return list(topologies.get_topology_desc(platform="tpu", topology_name=topology, **kwargs).devices)
    except Exception as e:
        raise InputError(f"cannot describe TPU topology {topology!r} (chip config {chip_config}) with libtpu: "
                         f"{' '.join(str(e).split())[:300]}") from e


@contextlib.contextmanager
def _libtpu_start_quiet(quiet: bool) -> Iterator[None]:
    """libtpu, loaded on a host without chips to compile for a described topology, first looks
    for the chips and this VM's pod (TPU_ACCELERATOR_TYPE, TPU_WORKER_HOSTNAMES) and writes five
    lines of warnings about their absence to file descriptor 2, one of them an `E0000 ...
    INVALID_ARGUMENT` that reads like a failure. Here that is expected: those lines go to a
    temporary file, shown only if describing the topology fails."""
    if not quiet:
        yield
        return
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as f:
        os.dup2(f.fileno(), 2)
        try:
            yield
        except BaseException:
            os.dup2(saved, 2)
            f.seek(0)
            sys.stderr.write(f.read().decode(errors="replace"))
            raise
        finally:
            os.dup2(saved, 2)
            os.close(saved)


def _parse_oom(message: str) -> tuple[Optional[float], Optional[float]]:
    """(used, capacity) bytes from XLA's compile-time OOM message (two wordings seen)."""
    for pattern in (r"Used ([\d.]+)([KMGT]?) of ([\d.]+)([KMGT]?) hbm",
                    r"required for [^(]*\(([\d.]+)([KMGT]?)\) exceeds available HBM \(([\d.]+)([KMGT]?)\)"):
        m = re.search(pattern, message)
        if m:
            return float(m.group(1)) * _UNITS[m.group(2)], float(m.group(3)) * _UNITS[m.group(4)]
    return None, None


def hbm_capacity(devices: list) -> Optional[float]:
    """The HBM per device the TPU compiler allows, asked of the compiler itself: a program that
    cannot fit, whose compile-time OOM message states the capacity."""
    import jax
    import jax.numpy as jnp

    mesh = jax.sharding.Mesh(devices[:1], ("x",))
    sh = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    too_big = jax.ShapeDtypeStruct((2**20, 2**18), jnp.float32, sharding=sh)  # 1 TiB
    try:
        jax.jit(lambda a: a * 2, out_shardings=sh).lower(too_big).compile()
    except Exception as e:
        return _parse_oom(str(e))[1]
    return None


def compiler_peak_bytes(dump_dir: str, module: str = "jit_step") -> Optional[int]:
    """The TPU compiler's peak for the compiled module: "Total bytes" of the memory-usage
    report it writes with xla_dump_to."""
    totals = [compiler_peak_bytes_of(open(path).read()) for path in glob.glob(f"{dump_dir}/*{module}*memory-usage-report*.txt")]
    return max((t for t in totals if t is not None), default=None)


def compile_for_topology(cfg, topology: str, chip_config: Optional[str] = None, accelerator: Optional[str] = None,
                         cost: bool = False, num_slices: Optional[int] = None, detail: bool = False,
                         dump_to: Optional[str] = None, announce: Optional[Callable[[dict, Optional[float]], None]] = None,
                         say: Callable[[str], None] = lambda line: None) -> dict:
    """Compiles the train step `train` would run for `cfg` (same model config resolution,
    same step builder) for `topology` as a TPU VM presents it, and reports its memory against
    the device's HBM; with `cost`, also the step's estimated cost (`step_cost`); with `detail`,
    the buffers live at the compiler's peak (`memory_detail`, also when the step does not fit).
    `num_slices` slices of the topology (default: the mesh's dcn_data) make a multi-slice job.
    `dump_to`: the compiler's dump goes there (default: a temporary directory); `announce(result,
    hbm)` is called with what is known before the compile starts (`memory_only` uses both);
    `say(line)` is told each stage as it begins (the command prints them: a 70B compile takes
    minutes)."""
    from easylemur import sharding
    from easylemur.train.metrics import flops_per_token
    from easylemur.train.step import build_train_step

    chip_config = chip_config or default_chip_config(topology)
    num_slices = num_slices or sharding.mesh_slices(cfg.mesh)
    say(f"describing TPU topology {topology} ({chip_config}{f', {num_slices} slices' if num_slices > 1 else ''}) "
        "with libtpu")
    devices = topology_devices(topology, chip_config, num_slices)
    mesh = sharding.make_mesh(cfg.mesh, devices)
    model_cfg, model_from = run_model_config(cfg)
    train_step = build_train_step(cfg, model_cfg, mesh)
    B, T = cfg.train.batch_size, cfg.data.seq_len
    hbm = hbm_capacity(devices)
    flops = flops_per_token(model_cfg, T) * B * T
    result = {"accelerator": accelerator, "topology": topology, "chip_config": chip_config, "slices": num_slices,
              "devices": len(devices),
              "device_kind": devices[0].device_kind, "mesh": dict(mesh.shape), "params": model_cfg.num_params(),
              "model_from": model_from, "batch": [B, T], "attention": model_cfg.attention,
              "remat": model_cfg.remat, "flops_per_step": flops, "flops_per_device_per_step": flops / len(devices)}
    if announce is not None:
        announce(result, hbm)
    say(f"compiling the train step for {len(devices)} x {devices[0].device_kind}, mesh {dict(mesh.shape)}, "
        f"{model_cfg.num_params() / 1e9:.3g}B params, batch {B} x {T} (minutes for a 70B model)")
    with tempfile.TemporaryDirectory(prefix="easylemur-aot-") as tmp:
        dump = dump_to or tmp
        try:
            compiled = train_step.lower(B, T, mesh).compile({"xla_dump_to": dump})
        except Exception as e:  # XLA raises a runtime error for compile-time OOM
            text = str(e)
            if "RESOURCE_EXHAUSTED" not in text and "hbm" not in text.lower():
                raise
            used, cap = _parse_oom(text)
            cap = cap or hbm
            return {**result, "peak_bytes_per_device": used, "hbm_bytes_per_device": cap,
                    "headroom": 1 - used / cap if used and cap else None, "fits": False,
                    "error": text.splitlines()[0][:300],
                    **({"peak_buffers": memory_detail(dump)} if detail else {})}
        peak = compiler_peak_bytes(dump)
        buffers = memory_detail(dump) if detail else None
    mem = compiled.memory_analysis()
    analysis = {k: int(getattr(mem, f"{k}_size_in_bytes", 0)) for k in ("argument", "output", "alias", "temp", "generated_code")}
    analysis["sum"] = (analysis["argument"] + analysis["output"] - analysis["alias"] + analysis["temp"]
                       + analysis["generated_code"])
    # The verdict is the TPU compiler's: it checks its peak against HBM and fails the compile
    # (handled above) when the program does not fit.
    result = _fits(result, peak, hbm, analysis)
    if detail:
        result["peak_buffers"] = buffers
    if cost:
        say("estimating the step's cost from the compiled program")
        result["cost"] = step_cost(cfg, model_cfg, mesh, compiled, topology.split(":")[0], B, T)
    return result


def verdict_words(result: dict) -> str:
    """The answer to "does it fit?" in one line, before the JSON: the TPU compiler's verdict, the
    peak per device against HBM, and the headroom."""
    gib = 2**30
    peak, hbm = result.get("peak_bytes_per_device"), result.get("hbm_bytes_per_device")
    where = f"{result.get('accelerator') or result.get('topology')} ({result.get('devices')} x {result.get('device_kind')})"
    if not result.get("fits"):
        need = f": needs {peak / gib:.2f} GiB of {hbm / gib:.2f} GiB HBM per device" if peak and hbm else ""
        return f"aot: does NOT fit on {where}{need}; see docs/guides/tpu-pods.md for what to change"
    figures = (f": peak {peak / gib:.2f} GiB of {hbm / gib:.2f} GiB HBM per device, headroom {result['headroom']:.1%}"
               if peak and hbm else "")
    return f"aot: fits on {where}{figures}"


def _fits(result: dict, peak: Optional[int], hbm: Optional[float], analysis: Optional[dict]) -> dict:
    return {**result, "peak_bytes_per_device": peak, "hbm_bytes_per_device": hbm,
            "headroom": 1 - peak / hbm if peak and hbm else None, "fits": True, "memory_analysis": analysis}


# The TPU compiler checks the step's memory against HBM at buffer assignment (a compile-time
# OOM is raised there, before this file is written) and writes this file right after it; by
# then the memory-usage report, live ranges and buffer assignment are final. What follows is
# code generation (LLO scheduling, register allocation, bundle packing): about 98% of the
# compile of a 70B step (about 95 s of CPU on a CPU host, against 2 s up to here), and it
# changes none of those files (docs/design.md, "TPU AOT").
_FITS_MARK = "*jit_step*after_optimizations_after_buffer_assignment.txt"
_STATIC, _CHILD_OUT = "easylemur-aot-static.json", "easylemur-aot-stdout.txt"


def memory_only(argv: Sequence[str], detail: bool = False) -> tuple[int, Optional[dict]]:
    """`python -m easylemur.aot ARGV` (without --memory-only) stopped once the compiler has passed
    its HBM check: (exit status, result). The compile runs in a child process (a fresh
    interpreter, so the program is the one the plain command compiles), dumping into a directory
    of ours; the child is killed when the compiler has written `_FITS_MARK`, and the result is
    the plain command's (the same peak from the same memory-usage report, the same `fits`, the
    same `peak_buffers`) without "memory_analysis", which needs the finished executable. A child
    that ends first (a compile-time OOM, an error, or a compile done before the mark was seen)
    answers for itself: its result as printed (None, its error on stderr, if it printed none)."""
    with tempfile.TemporaryDirectory(prefix="easylemur-aot-") as dump:
        with open(os.path.join(dump, _CHILD_OUT), "w") as out:
            proc = subprocess.Popen([sys.executable, "-m", "easylemur.aot", *argv, "--memory-only-dump", dump],
                                    stdout=out)
        stopped = False
        try:
            while proc.poll() is None and not glob.glob(os.path.join(dump, _FITS_MARK)):
                time.sleep(0.05)
        finally:
            if proc.poll() is None:
                proc.kill()
                stopped = True
            rc = proc.wait()
        if not stopped:  # it ended by itself
            lines = [line for line in Path(dump, _CHILD_OUT).read_text().splitlines() if line.startswith("{")]
            return rc, json.loads(lines[-1]) if lines else None
        known = json.loads(Path(dump, _STATIC).read_text())
        peak = compiler_peak_bytes(dump)
        if peak is None:
            raise RuntimeError(f"the TPU compiler passed buffer assignment but wrote no memory-usage report in {dump}")
        result = {**_fits(known["result"], peak, known["hbm"], None), "memory_only": True}
        if detail:
            result["peak_buffers"] = memory_detail(dump)
        return 0, result


def _xla_cost(compiled) -> dict:
    ca = compiled.cost_analysis()
    ca = (ca[0] if ca else {}) if isinstance(ca, (list, tuple)) else (ca or {})
    return {"flops": float(ca.get("flops", 0.0)), "bytes accessed": float(ca.get("bytes accessed", 0.0))}


def per_layer_fit(cfg, model_cfg, mesh, B: int, T: int) -> dict:
    """XLA's cost_analysis of the same step compiled unscanned with 1 and 2 layers: cost(L) =
    fixed + per_layer x L, evaluated at the model's L. (cost_analysis counts a while body once,
    so the scanned program's own figure holds one layer; loops other than the layer scan, such
    as the loss's chunks, are counted once in all three.)"""
    import dataclasses

    from easylemur.train.step import build_train_step

    costs = []
    for layers in (1, 2):
        small = dataclasses.replace(model_cfg, num_layers=layers, scan_layers=False)
        costs.append(_xla_cost(build_train_step(cfg, small, mesh).lower(B, T, mesh).compile()))
    fit = {}
    for key in ("bytes accessed", "flops"):
        per_layer = costs[1][key] - costs[0][key]
        fixed = costs[0][key] - per_layer
        fit[key] = {"fixed": fixed, "per_layer": per_layer, "at_num_layers": fixed + per_layer * model_cfg.num_layers}
    return fit


def step_cost(cfg, model_cfg, mesh, compiled, platform: str, B: int, T: int) -> dict:
    """Per device per step: FLOPs (metrics.flops_per_token, the analytic count; XLA's raw
    figure beside it), HBM bytes (XLA's, corrected for the layer scan by `per_layer_fit`),
    collective bytes read from the compiled HLO (hlo_cost), host-offload bytes, and a roofline
    estimate of the step time on `platform`'s chip. An estimate: docs/design.md, "TPU AOT"."""
    from easylemur import sharding
    from easylemur.train import hlo_cost
    from easylemur.train.metrics import flops_per_token

    n = mesh.size
    raw = _xla_cost(compiled)
    text = compiled.as_text()
    # the data axis split into its slices (outer) and each slice's part: the collectives of a
    # multi-slice program are within a slice (their cross-slice parts are host transfers)
    slices = sharding.mesh_slices(cfg.mesh)
    shape = dict(mesh.shape)
    if slices > 1:
        shape = {"dcn_data": slices, **shape, "data": shape["data"] // slices}
    coll = hlo_cost.collective_bytes(text, shape)
    dcn = hlo_cost.dcn_transfer_bytes(text)
    host = hlo_cost.host_transfer_bytes(text)
    if model_cfg.scan_layers:
        fit = per_layer_fit(cfg, model_cfg, mesh, B, T)
        hbm, method = fit["bytes accessed"]["at_num_layers"], "unscanned 1- and 2-layer compiles: fixed + per_layer x L"
    else:
        fit, hbm, method = None, raw["bytes accessed"], "cost_analysis of the program (no layer loop)"
    flops = flops_per_token(model_cfg, T) * B * T / n
    chip = hlo_cost.CHIPS[platform]
    roof = hlo_cost.roofline(flops, hbm, coll["total_bytes"], chip, B * T, dcn_bytes=dcn["total_bytes"])
    offload = host["to_host"] + host["from_host"]
    overlap = hlo_cost.collective_overlap(text, shape, chip)
    # the compiled schedule's own overlap: compute (or HBM) time, then the ICI time it leaves exposed
    overlapped = max(roof["compute_s"], roof["hbm_s"]) + overlap["exposed_ici_s"] + roof.get("dcn_s", 0.0)
    return {
        "estimate": True,
        "flops_per_device": flops, "xla_flops_raw": raw["flops"],
        # XLA's count of the executed program by the same fit: remat's recompute in, Pallas kernels out
        "xla_flops_fit": fit["flops"]["at_num_layers"] if fit else raw["flops"],
        "hbm_bytes_per_device": hbm, "hbm_method": method, "xla_bytes_accessed_raw": raw["bytes accessed"],
        "per_layer_fit": fit,
        "collective_bytes_per_device": coll["total_bytes"], "collective_bytes_by_kind": coll["bytes_by_kind"],
        "dcn_bytes_per_device": dcn["total_bytes"], "dcn_bytes_by_kind": dcn["bytes_by_kind"],
        "collective_bytes_by_axis": coll["bytes_by_axis"], "collective_ops_by_kind": coll["ops_by_kind"],
        "loops": coll["loops"], "unparsed_collectives": coll["unparsed_ops"],
        "host_offload_bytes_per_device": host,
        # what each chip's host link would need to hide the offload behind the bound step time
        "host_bandwidth_needed": offload / roof["step_s_bound"] if roof["step_s_bound"] else None,
        "chip": {"platform": platform, "peak_flops": chip.peak_flops, "hbm_bandwidth": chip.hbm_bandwidth,
                 "ici_bandwidth_bidirectional": chip.ici_bandwidth, "dcn_bandwidth": chip.dcn_bandwidth,
                 "source": chip.source},
        "tokens_per_step": B * T, **roof,
        "overlap": overlap, "step_s_overlap_estimate": overlapped,
        "mfu_overlap_estimate": roof["compute_s"] / overlapped if overlapped else None,
        "ignores": "kernel efficiency, ICI topology (every link assumed busy), host offload transfers over PCIe "
                   "(reported, not in the bound); overlap only in the overlap estimate",
    }


def cost_table(result: dict) -> str:
    """A short human summary of result['cost'] (stderr)."""
    c = result["cost"]
    G = 1e9
    kinds = ", ".join(f"{k} {v / G:.1f}" for k, v in c["collective_bytes_by_kind"].items() if v)
    axes = ", ".join(f"{k} {v / G:.1f}" for k, v in c["collective_bytes_by_axis"].items())
    host = c["host_offload_bytes_per_device"]
    return "\n".join([
        f"step cost estimate, per device per step ({result['accelerator'] or result['topology']}, {result['devices']} devices; "
        f"an estimate: ignores {c['ignores']})",
        f"  FLOPs           {c['flops_per_device'] / 1e12:9.1f} T   (XLA cost_analysis raw: {c['xla_flops_raw'] / 1e12:.1f} T, "
        f"scanned layer once; by the layer fit: {c['xla_flops_fit'] / 1e12:.1f} T, remat in, Pallas kernels out)",
        f"  HBM bytes       {c['hbm_bytes_per_device'] / G:9.1f} GB  ({c['hbm_method']}; "
        f"raw {c['xla_bytes_accessed_raw'] / G:.1f} GB)",
        f"  collectives     {c['collective_bytes_per_device'] / G:9.1f} GB  ({kinds}; by axis: {axes})",
        *([f"  across slices   {c['dcn_bytes_per_device'] / G:9.1f} GB  (sent to other slices over the data-center network: "
             + ", ".join(f"{k} {v / G:.1f}" for k, v in c["dcn_bytes_by_kind"].items())
             + (f"; {c['dcn_s']:.2f} s at {c['chip']['dcn_bandwidth'] / G:.2f} GB/s per chip)" if "dcn_s" in c
                else "; no published DCN bandwidth for this chip, so no time)")] if c["dcn_bytes_per_device"] else []),
        f"  host offload    {(host['to_host'] + host['from_host']) / G:9.1f} GB  (to host {host['to_host'] / G:.1f}, "
        f"from host {host['from_host'] / G:.1f}; not in the bound)",
        f"  compute {c['compute_s']:.2f} s, HBM {c['hbm_s']:.2f} s, ICI {c['ici_s']:.2f} s"
        + (f", DCN {c['dcn_s']:.2f} s" if "dcn_s" in c else "") + f" -> bound {c['step_s_bound']:.2f} s "
        f"({c['bound_by']}), MFU at most {c['mfu_bound']:.1%}, "
        f"{c['days_for_train_tokens']:.1f} days for {c['train_tokens'] / 1e9:.0f}B tokens; no overlap of compute and ICI: "
        f"{c['step_s_no_overlap']:.2f} s, MFU {c['mfu_no_overlap']:.1%}",
        f"  overlap         {c['overlap']['hidden_fraction']:9.1%}    of ICI time hidden by the compiled schedule "
        f"(async {c['overlap']['async_ici_s']:.2f} s of {c['overlap']['ici_s']:.2f} s; matmul time between start and done): "
        f"step about {c['step_s_overlap_estimate']:.2f} s, MFU {c['mfu_overlap_estimate']:.1%}",
    ])


def run_model_config(cfg) -> tuple[Any, str]:
    """(model config, where it came from): the one `train` would resolve for `cfg` (resumed
    checkpoint, init.from, or preset; vocabulary growth included). When the weights it names
    are not readable on this machine (the usual case: checking a pod run on a laptop before the
    weights are there), the preset with the config's model.* keys, and the output says so."""
    from easylemur.checkpoint import store, model_meta
    from easylemur.checkpoint.paths import as_path
    from easylemur.convert import hf
    from easylemur.config import ConfigError, model_config
    from easylemur.train.start import resolve_run

    try:
        resume = None
        if cfg.workdir and (as_path(cfg.workdir) / "checkpoints").is_dir():
            try:
                resume = model_meta.read_meta(cfg.workdir)
            except store.CheckpointError:  # an empty checkpoints/ directory: a fresh start
                pass
        spec = resolve_run(cfg, resume)
    except (ConfigError, store.CheckpointError, hf.HFFormatError, OSError) as e:
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
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--accelerator", help="TPU type as gcloud names it: v4-N, v5litepod-N, v5p-N, v6e-N (e.g. v4-512); "
                       "compiled for the devices a TPU VM of that type presents (v4/v5p: megacore)")
    where.add_argument("--topology", help="expert form: a libtpu topology name, e.g. v4:4x8x8, v5e:2x2, v5p:2x2x2")
    parser.add_argument("--chip-config", choices=("default", "megacore"), default=None,
                        help="with --topology: libtpu's chip config (default: megacore for v4/v5p, as their VMs run)")
    parser.add_argument("--cost", action="store_true",
                        help="also estimate the step's cost per device (FLOPs, HBM bytes, collective bytes by kind and "
                        "mesh axis, host offload) and a roofline step time; adds a 'cost' object and a table on stderr")
    parser.add_argument("--num-slices", type=int, default=None,
                        help="compile for that many slices of the accelerator joined by the data-center network (a "
                        "multi-slice job; default: the mesh's dcn_data, e.g. --config.mesh=dcn_data:2,fsdp:-1)")
    parser.add_argument("--memory-detail", action="store_true",
                        help="also list the buffers live at the compiler's peak in HBM (the largest 25, with shape, "
                        "layout and tile padding) and their totals; adds a 'peak_buffers' object and a table on stderr")
    parser.add_argument("--memory-only", action="store_true",
                        help="stop the compile once the TPU compiler has checked the step's memory against HBM (the "
                        "same verdict and figures, seconds instead of minutes for a 70B step); the program's code is "
                        "not generated, so no 'memory_analysis' and no --cost")
    parser.add_argument("--memory-only-dump", help=argparse.SUPPRESS)  # memory_only's child: dump there
    add_debug_flag(parser)
    argv = list(sys.argv[1:] if argv is None else argv)
    args, cfg = cli_config(parser, argv)
    if args.num_slices is not None and args.num_slices < 1:
        parser.error(f"--num-slices must be at least 1, got {args.num_slices}")
    if args.memory_only and args.cost:
        parser.error("--cost reads the finished executable; it does not go with --memory-only")
    if args.accelerator:
        if args.chip_config:
            parser.error("--chip-config goes with --topology; --accelerator implies the chip config its VMs run")
        topology, chip_config = accelerator_topology(args.accelerator)
    else:
        topology, chip_config = args.topology, args.chip_config
    if args.memory_only and not args.memory_only_dump:  # (the child compiles as the plain command does)
        rc, result = memory_only([a for a in argv if a != "--memory-only"], detail=args.memory_detail)
        if result is None or "memory_only" not in result:  # the child answered: its tables are on stderr already
            if result is not None:
                print(json.dumps(result), flush=True)
            return rc
        if "peak_buffers" in result:
            print(memory_detail_table(result["peak_buffers"]), file=sys.stderr, flush=True)
        print(verdict_words(result), file=sys.stderr, flush=True)
        print(json.dumps(result), flush=True)
        return 0

    def announce(known: dict, hbm: Optional[float]) -> None:
        Path(args.memory_only_dump, _STATIC).write_text(json.dumps({"result": known, "hbm": hbm}))

    try:
        result = compile_for_topology(cfg, topology, chip_config, args.accelerator, cost=args.cost,
                                      num_slices=args.num_slices, detail=args.memory_detail,
                                      dump_to=args.memory_only_dump, announce=announce if args.memory_only_dump else None,
                                      say=lambda line: print(f"aot: {line}", file=sys.stderr, flush=True))
    except InputError:
        raise
    except Exception as e:
        if "topology" in str(e).lower() or "libtpu" in str(e).lower() or "tpu" in type(e).__name__.lower():
            raise InputError(f"cannot compile for topology {topology!r}: {e}") from e
        raise
    if "peak_buffers" in result:
        print(memory_detail_table(result["peak_buffers"]), file=sys.stderr, flush=True)
    if "cost" in result:
        print(cost_table(result), file=sys.stderr, flush=True)
    print(verdict_words(result), file=sys.stderr, flush=True)
    print(json.dumps(result), flush=True)
    return 0 if result["fits"] else 1
