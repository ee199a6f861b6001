"""Lemur-70B on a TPU v4-512 (or a v5p-256), easylemur against MaxText, as the TPU compiler sees
them: both compiled ahead of time on this CPU through libtpu for the devices a VM of that type
presents (v4-512: 256 megacore devices of 30.75 GiB; v5p-256: 128 of 95.74 GiB), at pure fsdp
over every device (fsdp 256; fsdp 128) and at fsdp x tensor 4 (fsdp 64 x tensor 4; fsdp 32 x
tensor 4).

    python bench/aot_vs_maxtext.py [--accelerator v4-512|v5p-256] [--model llama2-70b|llama3.1-70b]
        [--maxtext-venv DIR]
        [--python PYTHON3.12] [--meshes fsdp,tp4] [--easylemur-remat config,full]
        [--cost [--cost-meshes fsdp]] [--keep-dumps DIR]

`--accelerator` (gcloud's name, v4-N or v5p-N: N/2 megacore devices; default v4-512) sets what
both sides compile for, with the same work, the config's 512 rows of 4096 tokens: easylemur
with `--accelerator` of that name, MaxText with compile_topology of that name and
per_device_batch_size = 512 / devices (v4-512: 2, v5p-256: 4).
`--model llama3.1-70b` compiles MaxText's llama3.1-70b against
`configs/lemur_llama3_70b_pretrain.py` instead (its 256 rows of 8192 tokens; a 128K vocabulary,
whose LM head easylemur's config computes in chunks and MaxText whole).

MaxText comes from PyPI (`maxtext`, which needs Python >= 3.12 and declares no dependencies
outside extras) in a venv of its own, created on first use with a Python 3.12 found as
`find_python` says: maxtext --no-deps, then jax[tpu] and the packages its imports ask for.
Its llama2-70b is compiled with `train_compile`
(compile_topology=v4-512, per_device_batch_size=2 (v5p-256: 4), max_target_length=4096, attention=flash, i.e.
splash attention, dataset_type=synthetic) twice: with its default remat_policy=full, and with
remat_policy=custom decoder_layer_input=offload, the host offload easylemur's config uses;
easylemur's with
`python -m easylemur.aot --config configs/lemur_70b_pretrain.py --accelerator v4-512` (the
same 512 rows of 4096, fp32 parameters and Adam moments, bf16 compute). The HBM a headroom is
taken against is the one easylemur.aot reports (`hbm_bytes_per_device`: the compiler's own
figure).

The figure compared is each compiler's peak per device: "Total bytes" of the memory-usage
report the TPU compiler writes with xla_dump_to, which is what it checks against HBM.
`memory_analysis()`'s sum is shown beside it. A table, then one JSON line.
`--easylemur-remat config,full` adds easylemur with `--config.model.remat=full` (no host
offload: like for like with MaxText's default). `--same-compiler` adds easylemur compiled in
MaxText's venv (its jax and libtpu, this checkout's code). `--keep-dumps DIR` keeps each
compile's memory-usage report, buffer assignment, live ranges and optimized HLO
(DIR/<mesh>-<system>-<remat>/). The memory table is printed once every mesh is compiled, before
the cost's extra compiles. Compiles run one at a time, with libtpu's one-process lock off
(ALLOW_MULTIPLE_LIBTPU_LOAD: compiling touches no TPU).

With `--cost`, the step cost of both, side by side, an estimate (docs/design.md, "Step cost
estimate"): easylemur's from `python -m easylemur.aot --cost`; MaxText's computed here with
easylemur's own functions (easylemur/train/hlo_cost.py) from the optimized HLO of MaxText's
train step that its compile dumps: collective bytes by kind and mesh axis with loop trip
counts, host-offload bytes; XLA's cost_analysis FLOPs and bytes (train_compile prints them)
corrected for the layer scan by the same fit as easylemur's, MaxText compiled unscanned
(`scan_layers=false base_num_decoder_layers=1`, then 2): cost(L) = fixed + per_layer x 80, for
the remat settings in `--fit-remat` (others show the raw, layer-once figures, labelled); the
FLOPs of the roofline are the model's (easylemur's `flops_per_token`: the same Llama-2-70B,
the same tokens), with the same chip constants (hlo_cost.CHIPS["v4"], or ["v5p"]).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from easylemur.train import hlo_cost  # noqa: E402  (the parsing and roofline easylemur.aot --cost uses)

GiB = 2**30


# MaxText's model_name -> the easylemur config of the same model
# easylemur's workdir for both the shape read here and its compile: no run in it, so the model is
# the config's, not a resumed run's
NO_RUN = "/nonexistent/aot-vs-maxtext"
MODELS = {
    "llama2-70b": "configs/lemur_70b_pretrain.py",
    # a 128K vocabulary: easylemur's config chunks the LM head (loss_chunk 512); MaxText makes
    # the whole [rows, 8192, 128256] logits
    "llama3.1-70b": "configs/lemur_llama3_70b_pretrain.py",
}


class Model:
    """A model both sides compile: MaxText's model_name, the easylemur config of the same model,
    and what that config says of it: the batch (rows of seq tokens, the same work on both
    sides) and the decoder layers (of the model easylemur.aot compiles for it)."""

    def __init__(self, name: str):
        from easylemur.config import load_config
        from easylemur.train.aot import run_model_config

        self.name, self.config = name, MODELS[name]
        cfg = load_config(str(ROOT / self.config), [f"workdir={NO_RUN}"])
        self.rows, self.seq = cfg.train.batch_size, cfg.data.seq_len
        self.layers = run_model_config(cfg)[0].num_layers


class Accelerator:
    """What a TPU VM of gcloud's type `name` (v4-N, v5p-N) presents to JAX and the compilers:
    N/2 megacore devices (easylemur.train.aot.accelerator_topology: v4 and v5p count two
    TensorCores per chip in N, and a VM runs each chip as one megacore device), `platform` the
    key of hlo_cost.CHIPS (and libtpu's platform name), `rows` / devices rows on each device (the
    same work on every accelerator), and the meshes compared:
      fsdp: pure fsdp over every device;
      tp4: tensor 4 x fsdp devices / 4 (fsdp 64 x tensor 4 on 256 devices, 32 x 4 on 128).
    For each: easylemur's mesh, MaxText's ici_* arguments, MaxText's mesh without its size-1 axes
    in its order (data, stage, fsdp, ..., tensor, ...: a replica group's device ids index the
    mesh's devices in that order, hlo_cost.group_axes), and the label printed."""

    def __init__(self, name: str, rows: int):
        m = re.fullmatch(r"(v4|v5p)-(\d+)", name.strip())
        if not m:
            raise ValueError(f"--accelerator {name!r}: expected v4-N or v5p-N (e.g. v4-512, v5p-256)")
        self.name, self.platform, self.devices = m.group(0), m.group(1), int(m.group(2)) // 2
        if self.platform not in hlo_cost.CHIPS:
            raise ValueError(f"--accelerator {name}: no chip constants for {self.platform} in hlo_cost.CHIPS")
        if int(m.group(2)) % 2:
            raise ValueError(f"--accelerator {name}: {self.platform} types count two TensorCores per chip (an even N)")
        if not self.devices or rows % self.devices:
            raise ValueError(f"--accelerator {name}: its {self.devices} devices do not split {rows} rows evenly")
        self.rows_per_device = rows // self.devices
        fsdp = self.devices // 4
        self.meshes = {
            "fsdp": ("data:1,fsdp:-1,tensor:1", ["ici_fsdp_parallelism=-1"], {"fsdp": self.devices},
                     f"fsdp {self.devices}"),
            "tp4": (f"data:1,fsdp:{fsdp},tensor:4", [f"ici_fsdp_parallelism={fsdp}", "ici_tensor_parallelism=4"],
                    {"fsdp": fsdp, "tensor": 4}, f"fsdp {fsdp} x tp 4"),
        }
        if self.devices % 4:
            del self.meshes["tp4"]
KEEP = ("memory-usage-report", "buffer-assignment", "live-range", "after_optimizations.txt")
MAXTEXT_PACKAGES = ["jax[tpu]==0.11.1", "flax", "optax", "orbax-checkpoint", "grain", "omegaconf", "pydantic",
                    "tensorboardX", "sentencepiece", "tiktoken", "datasets", "transformers", "jsonlines",
                    "ml-collections", "absl-py", "etils", "aqtp", "qwix", "tokamax", "pathwaysutils",
                    # imported by maxtext 0.2.5 too (each a ModuleNotFoundError in a fresh venv without it)
                    "jinja2", "drjax", "pillow", "sympy"]


def find_python(version: str = "3.12") -> str | None:
    """A Python `version` interpreter that runs: pyenv's install of it (`pyenv prefix`, then
    ~/.pyenv/versions/VERSION*), then pythonVERSION on PATH. Each candidate must run
    `-c 'import sys'` and be that version: pyenv's shim pythonVERSION is on PATH even when the
    version is not active, and then exits 127."""
    candidates = []
    if shutil.which("pyenv"):
        p = subprocess.run(["pyenv", "prefix", version], capture_output=True, text=True)
        if p.returncode == 0 and p.stdout.strip():
            candidates.append(os.path.join(p.stdout.strip().splitlines()[0], "bin", f"python{version}"))
    root = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates += sorted(glob.glob(f"{root}/versions/{version}*/bin/python{version}"), reverse=True)
    candidates.append(shutil.which(f"python{version}"))
    want = tuple(int(x) for x in version.split("."))
    for c in candidates:
        if c and os.access(c, os.X_OK) and subprocess.run(
                [c, "-c", f"import sys; sys.exit(sys.version_info[:{len(want)}] != {want})"],
                capture_output=True).returncode == 0:
            return c
    return None


def maxtext_venv(venv: Path, python: str) -> Path:
    """The venv's python, creating the venv (maxtext --no-deps, then what it imports) if needed."""
    py = venv / "bin" / "python"
    if py.exists() and subprocess.run([py, "-c", "import maxtext"], capture_output=True).returncode == 0:
        return py
    print(f"creating {venv} with {python} (maxtext from PyPI)", file=sys.stderr)
    subprocess.run([python, "-m", "venv", str(venv)], check=True)
    pip = [str(py), "-m", "pip", "install", "-q"]
    subprocess.run(pip + ["--upgrade", "pip"], check=True)
    subprocess.run(pip + ["--no-deps", "maxtext==0.2.5"], check=True)
    for pkg in MAXTEXT_PACKAGES:  # one at a time: a package missing from the index is skipped, said
        if subprocess.run(pip + [pkg]).returncode:
            print(f"note: could not install {pkg} into the MaxText venv", file=sys.stderr)
    return py


def compiler_peak(dump: str) -> int | None:
    """The largest "Total bytes" among the train step's memory-usage reports."""
    totals = []
    for path in glob.glob(f"{dump}/*train_step*memory-usage-report*.txt") or glob.glob(f"{dump}/*memory-usage-report*.txt"):
        m = re.search(r"Total bytes: (\d+)", Path(path).read_text())
        if m:
            totals.append(int(m.group(1)))
    return max(totals) if totals else None


# MaxText's remat settings compared: its default (`full`: layer inputs kept in HBM) and the
# same offload easylemur's config uses (`custom` with decoder_layer_input in host memory)
MAXTEXT_REMAT = {"full": ["remat_policy=full"], "offload": ["remat_policy=custom", "decoder_layer_input=offload"]}


def _env(xla_flags: str) -> dict:
    """A compile's environment: the CPU platform (libtpu only compiles), and libtpu's
    one-process lock off, as compiling touches no TPU (another compile on the machine holds it)."""
    return {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": xla_flags, "ALLOW_MULTIPLE_LIBTPU_LOAD": "1"}


def _maxtext_cmd(py: Path, acc: Accelerator, model: Model, args: list[str], out_dir: str) -> list[str]:
    base = subprocess.run([py, "-c", "import maxtext, os; print(os.path.dirname(maxtext.__file__))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    return [str(py), "-m", "maxtext.trainers.pre_train.train_compile", f"{base}/configs/base.yml",
            f"compile_topology={acc.name}", "compile_topology_num_slices=1", f"model_name={model.name}",
            f"per_device_batch_size={acc.rows_per_device}", f"max_target_length={model.seq}", "attention=flash",
            "dataset_type=synthetic", "base_output_directory=" + out_dir, "run_name=aot", *args]


def _xla_cost(output: str) -> dict | None:
    """flops and bytes accessed from train_compile's `Cost analysis: {...}` line."""
    m = re.search(r"Cost analysis: (.*)", output)
    if not m:
        return None
    num = r"['\"]%s['\"]:\s*(?:np\.float\d+\()?([-+\d.eE]+)"
    got = {k: re.search(num % k, m.group(1)) for k in ("flops", "bytes accessed")}
    return {k: float(v.group(1)) for k, v in got.items() if v} or None


def train_step_hlo(dump: str) -> str | None:
    """The optimized HLO of the train step in a dump dir (the largest, if several)."""
    paths = glob.glob(f"{dump}/*train_step*after_optimizations.txt")
    return max(paths, key=os.path.getsize) if paths else None


def keep_dump(dump: str, dest: str | None) -> None:
    if dest:
        os.makedirs(dest, exist_ok=True)
        for path in glob.glob(f"{dump}/*"):
            if any(k in os.path.basename(path) for k in KEEP):
                shutil.copy(path, dest)


def run_maxtext(py: Path, acc: Accelerator, model: Model, mesh_args: list[str], mesh_shape: dict | None = None,
                keep: str | None = None) -> dict:
    """MaxText's step compiled for the pod: peak, memory_analysis sum; with `mesh_shape`, what
    the cost needs from this compile (collectives and host offload from its HLO, XLA's raw
    cost_analysis)."""
    dump = tempfile.mkdtemp(prefix="maxtext-aot-")
    p = subprocess.run(_maxtext_cmd(py, acc, model, mesh_args, dump), env=_env(f"--xla_dump_to={dump}"),
                       capture_output=True, text=True, cwd=tempfile.gettempdir())
    try:
        out = {"peak": compiler_peak(dump), "ok": p.returncode == 0}
        m = re.search(r"Memory analysis: (.*)", p.stdout + p.stderr)
        if m:
            sizes = {k: int(v) for k, v in re.findall(r"(\w+)_size_in_bytes=(\d+)", m.group(1))}
            out["analysis_sum"] = (sizes.get("argument", 0) + sizes.get("output", 0) - sizes.get("alias", 0)
                                   + sizes.get("temp", 0) + sizes.get("generated_code", 0))
        if not out["ok"]:
            out["error"] = (p.stdout + p.stderr).strip().splitlines()[-1][:300]
        hlo = train_step_hlo(dump)
        if mesh_shape is not None and hlo:
            text = Path(hlo).read_text()
            out["collectives"] = hlo_cost.collective_bytes(text, mesh_shape)
            out["host"] = hlo_cost.host_transfer_bytes(text)
            out["overlap"] = hlo_cost.collective_overlap(text, mesh_shape, hlo_cost.CHIPS[acc.platform])
        out["xla_raw"] = _xla_cost(p.stdout + p.stderr)
        keep_dump(dump, keep)
        return out
    finally:
        shutil.rmtree(dump, ignore_errors=True)


def maxtext_layer_fit(py: Path, acc: Accelerator, model: Model, args: list[str]) -> dict | None:
    """XLA's cost_analysis of MaxText's step unscanned with 1 and 2 decoder layers:
    cost(L) = fixed + per_layer x L at the model's L (easylemur.train.aot.per_layer_fit's method)."""
    costs = []
    for layers in (1, 2):
        out_dir = tempfile.mkdtemp(prefix="maxtext-fit-")
        try:
            unscanned = ["scan_layers=false", "override_model_config=true", f"base_num_decoder_layers={layers}"]
            p = subprocess.run(_maxtext_cmd(py, acc, model, args + unscanned, out_dir), env=_env(""), capture_output=True,
                               text=True, cwd=tempfile.gettempdir())
        finally:
            shutil.rmtree(out_dir, ignore_errors=True)
        c = _xla_cost(p.stdout + p.stderr)
        if p.returncode or not c or len(c) < 2:
            print(f"note: MaxText {layers}-layer compile for the fit failed: "
                  f"{(p.stdout + p.stderr).strip().splitlines()[-1][:200] if (p.stdout + p.stderr).strip() else p.returncode}",
                  file=sys.stderr)
            return None
        costs.append(c)
    fit = {}
    for key in ("bytes accessed", "flops"):
        per_layer = costs[1][key] - costs[0][key]
        fixed = costs[0][key] - per_layer
        fit[key] = {"fixed": fixed, "per_layer": per_layer, "at_num_layers": fixed + per_layer * model.layers}
    return fit


def maxtext_cost(res: dict, fit: dict | None, flops_per_device: float, platform: str, tokens: int) -> dict | None:
    """MaxText's step cost in the shape of easylemur.aot's `cost` object (the keys the table
    reads), from its HLO (collectives, host offload), XLA's figures (fit, else raw) and the
    model's FLOPs, with hlo_cost's roofline and chip constants; `tokens` per step."""
    if "collectives" not in res:
        return None
    coll, host, raw = res["collectives"], res["host"], res.get("xla_raw") or {}
    if fit:
        hbm, method = fit["bytes accessed"]["at_num_layers"], "unscanned 1- and 2-layer compiles: fixed + per_layer x L"
        xla_flops = fit["flops"]["at_num_layers"]
    else:
        hbm, method = raw.get("bytes accessed", 0.0), "RAW cost_analysis (layer loop once, no fit)"
        xla_flops = raw.get("flops", 0.0)
    chip = hlo_cost.CHIPS[platform]
    roof = hlo_cost.roofline(flops_per_device, hbm, coll["total_bytes"], chip, tokens)
    offload = host["to_host"] + host["from_host"]
    overlap = res["overlap"]  # the same schedule reading as easylemur.aot's (hlo_cost.collective_overlap)
    overlapped = max(roof["compute_s"], roof["hbm_s"]) + overlap["exposed_ici_s"]
    return {"estimate": True, "flops_per_device": flops_per_device, "xla_flops_raw": raw.get("flops"),
            "xla_flops_fit": xla_flops, "hbm_bytes_per_device": hbm, "hbm_method": method,
            "xla_bytes_accessed_raw": raw.get("bytes accessed"), "per_layer_fit": fit,
            "collective_bytes_per_device": coll["total_bytes"], "collective_bytes_by_kind": coll["bytes_by_kind"],
            "collective_bytes_by_axis": coll["bytes_by_axis"], "collective_ops_by_kind": coll["ops_by_kind"],
            "loops": coll["loops"], "unparsed_collectives": coll["unparsed_ops"],
            "host_offload_bytes_per_device": host,
            "host_bandwidth_needed": offload / roof["step_s_bound"] if roof["step_s_bound"] else None,
            "tokens_per_step": tokens, **roof, "overlap": overlap, "step_s_overlap_estimate": overlapped,
            "mfu_overlap_estimate": roof["compute_s"] / overlapped if overlapped else None}


# `python -m easylemur.aot` with its compile's dump dir kept (it writes it to a temporary
# directory of its own): the module's tempfile.TemporaryDirectory, pointed at KEEP_DIR
_EASYLEMUR_KEEPING = """
import os, sys, types
import easylemur.train.aot as aot
from easylemur.errors import run_cli
keep = sys.argv.pop(1)

class _Keep:
    def __init__(self, *a, **k):
        os.makedirs(keep, exist_ok=True)
    def __enter__(self):
        return keep
    def __exit__(self, *a):
        return False

aot.tempfile = types.SimpleNamespace(TemporaryDirectory=_Keep)
sys.exit(run_cli(aot.main, sys.argv[1:]))
"""


def versions(python: str) -> str:
    """jax and libtpu versions of a Python's environment."""
    p = subprocess.run([python, "-c", "import importlib.metadata as m; print(m.version('jax'), m.version('libtpu'))"],
                       capture_output=True, text=True)
    jax_v, _, libtpu_v = p.stdout.strip().partition(" ")
    return f"jax {jax_v}, libtpu {libtpu_v}" if p.returncode == 0 else "?"


def run_easylemur(acc: Accelerator, model: Model, mesh: str, remat: str = "config", cost: bool = False, keep: str | None = None,
                  python: str | None = None) -> dict:
    """easylemur.aot's result; `python`: another environment's interpreter (its jax and libtpu),
    easylemur imported from this checkout."""
    env = _env("")
    if python:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    args = ["--config", model.config, f"--config.workdir={NO_RUN}", "--accelerator", acc.name, f"--config.mesh={mesh}"]
    args += [] if remat == "config" else [f"--config.model.remat={remat}"]
    args += ["--cost"] if cost else []
    python = python or sys.executable
    head = [python, "-c", _EASYLEMUR_KEEPING, keep] if keep else [python, "-m", "easylemur.aot"]
    p = subprocess.run(head + args, cwd=ROOT, env=env, capture_output=True, text=True)
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"ok": False, "error": (p.stderr.strip().splitlines() or ["no output"])[-1][:300]}
    r = json.loads(lines[-1])
    if keep:  # the dump's other modules (the HBM probe) and unoptimized HLO are not what is compared
        for path in glob.glob(f"{keep}/*"):
            if "jit_step" not in os.path.basename(path) or not any(k in os.path.basename(path) for k in KEEP):
                shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else os.remove(path)
    return {"ok": r["fits"], "peak": r["peak_bytes_per_device"], "analysis_sum": r.get("memory_analysis", {}).get("sum"),
            "attention": r["attention"], "remat": r["remat"], "cost": r.get("cost"),
            "flops_per_device": r.get("flops_per_device_per_step"), "hbm": r.get("hbm_bytes_per_device")}


def _note(what: str, res: dict) -> dict:
    """A compile's result on stderr as it lands (a long run's partial results survive)."""
    brief = {k: v for k, v in res.items() if k in ("ok", "peak", "analysis_sum", "error")}
    print(f"{what}: {json.dumps(brief)}", file=sys.stderr, flush=True)
    return res


def cost_rows(columns: list[tuple[str, dict]]) -> str:
    """easylemur's and MaxText's step cost side by side (per device per step, an estimate)."""
    G = 1e9

    def kind(c, k):
        return f"{c['collective_bytes_by_kind'].get(k, 0) / G:.1f} GB"

    rows = [
        ("FLOPs (flops_per_token x tokens)", lambda c: f"{c['flops_per_device'] / 1e12:.0f} T"),
        ("XLA FLOPs raw / layer fit", lambda c: f"{(c['xla_flops_raw'] or 0) / 1e12:.0f} T / {c['xla_flops_fit'] / 1e12:.0f} T"
         + ("" if c.get("per_layer_fit") else " (raw, no fit)")),
        ("HBM bytes (layer fit; raw)", lambda c: f"{c['hbm_bytes_per_device'] / G:.0f} GB "
         f"({(c['xla_bytes_accessed_raw'] or 0) / G:.0f} GB)" + ("" if c.get("per_layer_fit") else " RAW, no fit")),
        *[(f"collectives: {k}", (lambda k: lambda c: kind(c, k))(k)) for k in hlo_cost.KINDS],
        ("collectives: total", lambda c: f"{c['collective_bytes_per_device'] / G:.1f} GB"),
        ("collectives by mesh axis", lambda c: ", ".join(f"{a} {v / G:.1f}" for a, v in c["collective_bytes_by_axis"].items())),
        ("collective ops per step", lambda c: ", ".join(f"{k} {v:.0f}" for k, v in c["collective_ops_by_kind"].items() if v)),
        ("while loops (trips)", lambda c: ", ".join(str(lp["trips"]) for lp in c["loops"])),
        ("host offload to + from host", lambda c: f"{sum(c['host_offload_bytes_per_device'].values()) / G:.1f} GB"),
        ("compute / HBM / ICI time", lambda c: f"{c['compute_s']:.2f} / {c['hbm_s']:.2f} / {c['ici_s']:.2f} s"),
        ("bound, by", lambda c: f"{c['step_s_bound']:.2f} s, {c['bound_by']}"),
        ("MFU the bound allows", lambda c: f"{c['mfu_bound']:.0%}"),
        ("no overlap (compute + ICI), MFU", lambda c: f"{c['step_s_no_overlap']:.2f} s, {c['mfu_no_overlap']:.1%}"),
        ("ICI hidden by the schedule (async)", lambda c: f"{c['overlap']['hidden_fraction']:.0%} "
         f"({c['overlap']['async_ici_s']:.2f} of {c['overlap']['ici_s']:.2f} s async)"),
        ("with that overlap: step, MFU", lambda c: f"{c['step_s_overlap_estimate']:.2f} s, {c['mfu_overlap_estimate']:.1%}"),
        ("days for 90B tokens at the bound", lambda c: f"{c['days_for_train_tokens']:.1f}"),
    ]
    lines = ["| | " + " | ".join(name for name, _ in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for label, f in rows:
        lines.append(f"| {label} | " + " | ".join(f(c) for _, c in columns) + " |")
    return "\n".join(lines)


def _gib(x):
    return f"{x / GiB:.2f}" if x else "-"


def memory_table(rows: list[dict], py: Path, acc: Accelerator) -> None:
    """The memory rows: peak per device, memory_analysis sum, HBM free (of the HBM easylemur.aot
    reports, the compiler's own figure; no headroom where no easylemur compile gave one)."""
    hbm = next((res["hbm"] for r in rows for res in r["easylemur"].values() if res.get("hbm")), None)
    print(f"easylemur: {versions(sys.executable)}; MaxText: {versions(str(py))} (also easylemur's rows marked *)")
    print(f"{'system':10} {'mesh':14} {'attention, remat':28} {'peak GiB':>9} {'analysis sum':>13} {'headroom':>9}")
    for r in rows:
        mesh = acc.meshes[r["mesh"]][3]
        entries = [("easylemur" + ("*" if "@" in k else ""), res, f"{res.get('attention')}, {res.get('remat')}")
                   for k, res in r["easylemur"].items()]
        entries += [("MaxText", r["maxtext"]["full"], "splash, full"),
                    ("MaxText", r["maxtext"]["offload"], "splash, input offload")]
        for system, res, attn in entries:
            head = f"{1 - res['peak'] / hbm:.1%}" if res.get("peak") and hbm else "-"
            print(f"{system:10} {mesh:14} {attn:28} {_gib(res.get('peak')):>9} {_gib(res.get('analysis_sum')):>13} {head:>9}"
                  + ("" if res.get("ok") else f"  (failed: {res.get('error', '')[:80]})"))
    sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--accelerator", default="v4-512",
                    help="what both compile for, gcloud's name: v4-512 (256 megacore devices, 2 rows each) or v5p-256 "
                         "(128 devices, 4 rows each); v4-N, v5p-N: N/2 devices, 512 / (N/2) rows each")
    ap.add_argument("--model", default="llama2-70b", choices=sorted(MODELS),
                    help="MaxText's model_name, compiled against the easylemur config of the same model: "
                         + ", ".join(f"{k} ({v})" for k, v in MODELS.items()) + "; the batch is the config's")
    ap.add_argument("--maxtext-venv", default=str(ROOT / "bench" / ".venv-maxtext"),
                    help="MaxText's own venv (created if missing)")
    ap.add_argument("--python", default=None,
                    help="a Python 3.12 for MaxText's venv (default: pyenv's 3.12, else python3.12 on PATH)")
    ap.add_argument("--meshes", default="fsdp,tp4",
                    help="which of fsdp (fsdp over every device: 256 on v4-512, 128 on v5p-256) and tp4 (tensor 4 x "
                         "fsdp devices/4: fsdp 64 x tensor 4 on v4-512, fsdp 32 x tensor 4 on v5p-256; MaxText's "
                         "ici_fsdp_parallelism the same)")
    ap.add_argument("--easylemur-remat", default="config",
                    help="easylemur rows: 'config' (the config's remat, full_offload) and/or remat values, e.g. config,full")
    ap.add_argument("--same-compiler", action="store_true",
                    help="also easylemur (the config's remat) compiled in MaxText's venv: its jax and libtpu, this code")
    ap.add_argument("--cost", action="store_true",
                    help="also the step cost of both side by side (an estimate; easylemur.aot --cost's method)")
    ap.add_argument("--cost-meshes", default=None, help="with --cost: the meshes to cost (default: all of --meshes)")
    ap.add_argument("--fit-remat", default="offload",
                    help="with --cost: the MaxText remat settings (full, offload) whose HBM bytes get the 1-/2-layer fit")
    ap.add_argument("--keep-dumps", default=None, help="keep each compile's memory reports and optimized HLO here")
    args = ap.parse_args()
    try:
        model = Model(args.model)
        acc = Accelerator(args.accelerator, model.rows)
    except ValueError as e:
        ap.error(str(e))
    unknown = [m for m in args.meshes.split(",") if m not in acc.meshes]
    if unknown:
        ap.error(f"--meshes {','.join(unknown)}: not a mesh of {acc.name} (its meshes: {', '.join(acc.meshes)})")
    args.python = args.python or find_python("3.12")
    if not args.python:
        print("error: no Python 3.12 that runs (pyenv install 3.12, or --python PATH)", file=sys.stderr)
        return 2
    py = maxtext_venv(Path(args.maxtext_venv), args.python)
    fit_remats = set(args.fit_remat.split(",")) if args.cost else set()
    keep = lambda name: os.path.join(args.keep_dumps, name) if args.keep_dumps else None  # noqa: E731
    cost_meshes = set((args.cost_meshes or args.meshes).split(",")) if args.cost else set()
    # memory first, for every mesh (its table printed as soon as it is known), then the cost
    rows = []
    for name in args.meshes.split(","):
        mesh, mt_args, mt_shape, _ = acc.meshes[name]
        el = {remat: _note(f"{name} easylemur {remat}",
                           run_easylemur(acc, model, mesh, remat, keep=keep(f"{name}-easylemur-{remat}")))
              for remat in args.easylemur_remat.split(",")}
        if args.same_compiler:
            el["config@maxtext-venv"] = _note(f"{name} easylemur, MaxText's compiler", run_easylemur(
                acc, model, mesh, "config", keep=keep(f"{name}-easylemur-config-maxtext-venv"), python=str(py)))
        mt = {remat: _note(f"{name} MaxText {remat}", run_maxtext(
                  py, acc, model, mt_args + extra, mt_shape if name in cost_meshes else None,
                  keep(f"{name}-maxtext-{remat}")))
              for remat, extra in MAXTEXT_REMAT.items()}
        rows.append({"mesh": name, "easylemur": el, "maxtext": mt})
    memory_table(rows, py, acc)
    for r in rows:
        if r["mesh"] not in cost_meshes:
            continue
        mesh, mt_args, _, _ = acc.meshes[r["mesh"]]
        # easylemur's cost is easylemur.aot --cost's own (its step compiled again, and its layer fit)
        with_cost = _note(f"{r['mesh']} easylemur --cost", run_easylemur(acc, model, mesh, cost=True))
        r["easylemur"].setdefault("config", {})["cost"] = with_cost.get("cost")
        flops = next((e["flops_per_device"] for e in r["easylemur"].values() if e.get("flops_per_device")), None)
        for remat, extra in MAXTEXT_REMAT.items():
            fit = maxtext_layer_fit(py, acc, model, mt_args + extra) if remat in fit_remats else None
            tokens = model.rows * model.seq
            r["maxtext"][remat]["cost"] = maxtext_cost(r["maxtext"][remat], fit, flops, acc.platform, tokens) if flops else None

    if args.cost:
        for r in rows:
            mesh = acc.meshes[r["mesh"]][3]
            cols = [(f"easylemur {res.get('remat')}, {mesh}", res["cost"]) for res in r["easylemur"].values() if res.get("cost")]
            cols += [(f"MaxText {remat}, {mesh}", res["cost"]) for remat, res in r["maxtext"].items() if res.get("cost")]
            print(f"\nstep cost per device per step, {model.name}, {acc.name}, {mesh} "
                  "(an ESTIMATE: roofline, no overlap modelled)")
            print(cost_rows(cols))
    summary = {}
    for r in rows:
        el = r["easylemur"].get("config", next(iter(r["easylemur"].values()))).get("peak")
        summary[r["mesh"]] = {"easylemur_peak_bytes": el,
                              **{f"easylemur_remat_{k}_peak_bytes": v.get("peak") for k, v in r["easylemur"].items()
                                 if k != "config"},
                              **{f"maxtext_{k}_peak_bytes": v.get("peak") for k, v in r["maxtext"].items()},
                              "easylemur_le_maxtext": bool(el) and all(v.get("peak") and el <= v["peak"]
                                                                        for v in r["maxtext"].values())}
        if args.cost:
            summary[r["mesh"]]["cost"] = {
                **{f"easylemur_{k}": v.get("cost") for k, v in r["easylemur"].items() if v.get("cost")},
                **{f"maxtext_{k}": v.get("cost") for k, v in r["maxtext"].items() if v.get("cost")}}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
