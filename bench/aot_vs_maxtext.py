"""Lemur-70B on a TPU v4-512, easylemur against MaxText, as the TPU compiler sees them: both
compiled ahead of time on this CPU through libtpu for the devices a v4-512 VM presents (256
megacore devices of 30.75 GiB), at fsdp 256 and at fsdp 64 x tensor 4.

    python bench/aot_vs_maxtext.py [--maxtext-venv DIR] [--python PYTHON3.12] [--meshes fsdp,tp4]

MaxText comes from PyPI (`maxtext`, which needs Python >= 3.12 and declares no dependencies
outside extras) in a venv of its own, created on first use with a Python 3.12 found as
`find_python` says: maxtext --no-deps, then jax[tpu] and the packages its imports ask for.
Its llama2-70b is compiled with `train_compile`
(compile_topology=v4-512, per_device_batch_size=2, max_target_length=4096, attention=flash, i.e.
splash attention, dataset_type=synthetic) twice: with its default remat_policy=full, and with
remat_policy=custom decoder_layer_input=offload, the host offload easylemur's config uses;
easylemur's with
`python -m easylemur.aot --config configs/lemur_70b_pretrain.py --accelerator v4-512` (the
same 512 rows of 4096, fp32 parameters and Adam moments, bf16 compute).

The figure compared is each compiler's peak per device: "Total bytes" of the memory-usage
report the TPU compiler writes with xla_dump_to, which is what it checks against HBM.
`memory_analysis()`'s sum is shown beside it. A table, then one JSON line.
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
GiB = 2**30
HBM = 30.75 * GiB  # a v4 megacore device, as the compiler states it (easylemur.aot asks it)
MESHES = {"fsdp": ("data:1,fsdp:-1,tensor:1", ["ici_fsdp_parallelism=-1"]),
          "tp4": ("data:1,fsdp:64,tensor:4", ["ici_fsdp_parallelism=64", "ici_tensor_parallelism=4"])}
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


def run_maxtext(py: Path, mesh_args: list[str]) -> dict:
    base = subprocess.run([py, "-c", "import maxtext, os; print(os.path.dirname(maxtext.__file__))"],
                          capture_output=True, text=True, check=True).stdout.strip()
    dump = tempfile.mkdtemp(prefix="maxtext-aot-")
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_dump_to={dump}"}
    cmd = [str(py), "-m", "maxtext.trainers.pre_train.train_compile", f"{base}/configs/base.yml",
           "compile_topology=v4-512", "compile_topology_num_slices=1", "model_name=llama2-70b",
           "per_device_batch_size=2", "max_target_length=4096", "attention=flash",
           "dataset_type=synthetic", "base_output_directory=" + dump, "run_name=aot", *mesh_args]
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=tempfile.gettempdir())
    try:
        out = {"peak": compiler_peak(dump), "ok": p.returncode == 0}
        m = re.search(r"Memory analysis: (.*)", p.stdout + p.stderr)
        if m:
            sizes = {k: int(v) for k, v in re.findall(r"(\w+)_size_in_bytes=(\d+)", m.group(1))}
            out["analysis_sum"] = (sizes.get("argument", 0) + sizes.get("output", 0) - sizes.get("alias", 0)
                                   + sizes.get("temp", 0) + sizes.get("generated_code", 0))
        if not out["ok"]:
            out["error"] = (p.stdout + p.stderr).strip().splitlines()[-1][:300]
        return out
    finally:
        shutil.rmtree(dump, ignore_errors=True)


def run_easylemur(mesh: str) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}
    p = subprocess.run([sys.executable, "-m", "easylemur.aot", "--config", "configs/lemur_70b_pretrain.py",
                        "--accelerator", "v4-512", f"--config.mesh={mesh}"], cwd=ROOT, env=env, capture_output=True,
                       text=True)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    if not lines:
        return {"ok": False, "error": p.stderr.strip().splitlines()[-1][:300]}
    r = json.loads(lines[-1])
    return {"ok": r["fits"], "peak": r["peak_bytes_per_device"], "analysis_sum": r.get("memory_analysis", {}).get("sum"),
            "attention": r["attention"], "remat": r["remat"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--maxtext-venv", default=str(ROOT / "bench" / ".venv-maxtext"),
                    help="MaxText's own venv (created if missing)")
    ap.add_argument("--python", default=None,
                    help="a Python 3.12 for MaxText's venv (default: pyenv's 3.12, else python3.12 on PATH)")
    ap.add_argument("--meshes", default="fsdp,tp4", help="which of fsdp (fsdp 256) and tp4 (fsdp 64 x tensor 4)")
    args = ap.parse_args()
    args.python = args.python or find_python("3.12")
    if not args.python:
        print("error: no Python 3.12 that runs (pyenv install 3.12, or --python PATH)", file=sys.stderr)
        return 2
    py = maxtext_venv(Path(args.maxtext_venv), args.python)
    rows = []
    for name in args.meshes.split(","):
        mesh, mt_args = MESHES[name]
        el = run_easylemur(mesh)
        mt = {remat: run_maxtext(py, mt_args + extra) for remat, extra in MAXTEXT_REMAT.items()}
        rows.append({"mesh": name, "easylemur": el, "maxtext": mt})

    def gib(x):
        return f"{x / GiB:.2f}" if x else "-"

    print(f"{'system':10} {'mesh':14} {'attention':22} {'peak GiB':>9} {'analysis sum':>13} {'headroom':>9}")
    for r in rows:
        mesh = "fsdp 256" if r["mesh"] == "fsdp" else "fsdp 64 x tp 4"
        ours = f"{r['easylemur'].get('attention')}, {r['easylemur'].get('remat')}"
        for system, res, attn in (("easylemur", r["easylemur"], ours),
                                  ("MaxText", r["maxtext"]["full"], "splash, full"),
                                  ("MaxText", r["maxtext"]["offload"], "splash, input offload")):
            head = f"{1 - res['peak'] / HBM:.1%}" if res.get("peak") else "-"
            print(f"{system:10} {mesh:14} {attn:22} {gib(res.get('peak')):>9} {gib(res.get('analysis_sum')):>13} {head:>9}"
                  + ("" if res.get("ok") else f"  (failed: {res.get('error', '')[:80]})"))
    summary = {}
    for r in rows:
        el = r["easylemur"].get("peak")
        summary[r["mesh"]] = {"easylemur_peak_bytes": el,
                              **{f"maxtext_{k}_peak_bytes": v.get("peak") for k, v in r["maxtext"].items()},
                              "easylemur_le_maxtext": bool(el) and all(v.get("peak") and el <= v["peak"]
                                                                        for v in r["maxtext"].values())}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
