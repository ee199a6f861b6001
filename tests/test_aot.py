"""AOT compilation of the real train step for TPU topologies on this CPU (libtpu), and the
model config it compiles: the one `train` would resolve for the same config."""

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Optional

import pytest

from easylemur.train.aot import accelerator_topology, run_model_config, verdict_words
from easylemur.config import load_config
from easylemur.errors import InputError
from easylemur.train.metrics import flops_per_token
from markers import needs_libtpu

ROOT = Path(__file__).resolve().parents[1]
NO_RUN = "/nonexistent/easylemur-test-workdir"  # no checkpoint to resume: the model is the config's


def _aot(*args: str, config: str = "configs/lemur_70b_pretrain.py", stderr: list | None = None) -> tuple[int, dict]:
    """(exit status, the JSON result) of the aot CLI; its stderr appended to `stderr` when given."""
    env = {k: v for k, v in os.environ.items() if k != "ALLOW_MULTIPLE_LIBTPU_LOAD"}  # aot.py's own rule, not ours
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="")
    # a workdir of its own: the config's relative runs/ may hold a real run (the demo's) to resume
    p = subprocess.run([sys.executable, "-m", "easylemur.aot", "--config", config,
                        f"--config.workdir={NO_RUN}", *args],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    lines = [l for l in p.stdout.splitlines() if l.startswith("{")]
    assert lines, p.stdout[-2000:] + p.stderr[-3000:]
    if stderr is not None:
        stderr.append(p.stderr)
    return p.returncode, json.loads(lines[-1])


def test_accelerator_names_map_to_what_their_vms_present():
    assert accelerator_topology("v4-512") == ("v4:4x8x8", "megacore")  # 256 chips, one device each
    assert accelerator_topology("v4-8") == ("v4:2x2x1", "megacore")
    assert accelerator_topology("v5p-128") == ("v5p:4x4x4", "megacore")
    assert accelerator_topology("v5litepod-16") == ("v5e:4x4", "default")
    assert accelerator_topology("v6e-256") == ("v6e:16x16", "default")
    for bad in ("v4-6", "v4-512x", "v3-8", "v5e-16"):
        with pytest.raises(InputError, match=re.escape(bad)):
            accelerator_topology(bad)


def test_pod_slices_are_tori_as_their_vms_wire_them():
    """Wraparound links close every dimension of a v4/v5p slice of 4x4x4 chips and up, and a
    16-chip dimension of v5e/v6e; a smaller slice is an open mesh."""
    from easylemur.train.aot import torus_wrap

    assert torus_wrap("v4:4x8x8") == torus_wrap("v5p:4x4x8") == torus_wrap("v4:4x4x4") == (True, True, True)
    assert torus_wrap("v4:2x4x4") == torus_wrap("v4:2x2x1") == torus_wrap("v5p:2x2x2") == (False, False, False)
    assert torus_wrap("v6e:16x16") == (True, True, False) and torus_wrap("v5e:8x16") == (False, True, False)
    assert torus_wrap("v5e:2x2") == torus_wrap("v6e:8x8") == (False, False, False)


GiB = 2**30


@pytest.mark.slow
@needs_libtpu
def test_aot_checks_on_a_host_without_chips_run_side_by_side():
    """libtpu's lockfile guards chips; a compile-only libtpu holds none, so two AOT checks at
    once (or one beside the suite) both describe their topology instead of one failing with
    "Internal error when accessing libtpu multi-process lockfile"."""
    code = ("import time; from easylemur.train.aot import topology_devices; "
            "print(len(topology_devices('v5e:2x2', 'default'))); time.sleep(3)")
    env = {k: v for k, v in os.environ.items() if k != "ALLOW_MULTIPLE_LIBTPU_LOAD"}
    env.update(JAX_PLATFORMS="cpu", XLA_FLAGS="")
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0] and [o.strip() for o, _ in outs] == ["4", "4"], \
        [e[-500:] for _, e in outs]


# The 70B checks below stop each compile at the TPU compiler's memory verdict (--memory-only,
# test_memory_only_gives_the_whole_compiles_answer): the same figures, 5 s of CPU where the whole
# compile spends 100 s more generating code that changes none of them.

@pytest.mark.slow
@needs_libtpu
def test_lemur_70b_fits_v4_512_with_room_on_both_meshes():
    """As a v4-512 TPU VM presents it: 256 megacore devices of 30.75 GiB. The TPU compiler's own
    peak leaves at least 68% of HBM free at fsdp 256 (MaxText's llama2-70b with the same
    layer-input offload: 70.9%; easylemur before down_proj was split on its mlp dimension: 64.9%)."""
    rc, out = _aot("--accelerator", "v4-512", "--memory-only")
    assert (rc, out["devices"], out["chip_config"], out["topology"]) == (0, 256, "megacore", "v4:4x8x8"), out
    assert out["fits"] is True and out["batch"] == [512, 4096]
    assert out["hbm_bytes_per_device"] == 30.75 * GiB  # as the compiler states it
    assert out["headroom"] >= 0.68 and out["peak_bytes_per_device"] <= 0.32 * out["hbm_bytes_per_device"], out
    assert out["model_from"].startswith("preset 'llama2_70b'")  # init.from's weights are not on this machine
    cfg = load_config("configs/lemur_70b_pretrain.py", [f"workdir={NO_RUN}"])
    model_cfg, _ = run_model_config(cfg)
    assert out["flops_per_device_per_step"] == flops_per_token(model_cfg, 4096) * 512 * 4096 / 256
    # tensor parallelism shards the residual stream too: without host offload, fsdp 64 x tensor
    # 4 fits (51.4 GiB, out of memory, when only the heads and the MLP were split; MaxText 20.9)
    rc, out = _aot("--accelerator", "v4-512", "--config.mesh=data:1,fsdp:64,tensor:4", "--config.model.remat=full",
                   "--memory-only")
    assert rc == 0 and out["mesh"] == {"data": 1, "fsdp": 64, "tensor": 4} and out["fits"] is True, out
    assert out["remat"] == "full" and out["peak_bytes_per_device"] <= 0.75 * out["hbm_bytes_per_device"], out


@pytest.mark.slow
@needs_libtpu
def test_lemur_on_llama31_70b_fits_v4_512():
    """The recipe on Llama-3.1-70B: a 128K vocabulary and 8192-token rows, one per device, still
    leave at least 35% of a v4 device's HBM free."""
    rc, out = _aot("--accelerator", "v4-512", "--memory-only", config="configs/lemur_llama3_70b_pretrain.py")
    assert rc == 0 and out["fits"] is True and out["batch"] == [256, 8192], out
    assert out["model_from"].startswith("preset 'llama3.1_70b'") and out["params"] > 70.5e9
    assert out["headroom"] >= 0.35, out


@pytest.mark.slow
@needs_libtpu
def test_lemur_70b_does_not_fit_v5e_2x2():
    err: list = []
    # the compiler's OOM comes before the point where --memory-only stops, so a whole compile would
    # give this very answer (test_memory_only_gives_the_whole_compiles_answer: the same where it fits)
    rc, out = _aot("--topology", "v5e:2x2", "--config.train.batch_size", "8", "--memory-only",  # the other spelling
                   stderr=err)
    assert out["devices"] == 4 and out["fits"] is False and rc == 1, out
    # stage lines as it works, then the verdict in words (libtpu's start-up warnings kept off)
    assert err[0].splitlines() == [
        "aot: describing TPU topology v5e:2x2 (default) with libtpu",
        f"aot: compiling the train step for 4 x {out['device_kind']}, mesh {out['mesh']}, "
        f"{out['params'] / 1e9:.3g}B params, batch 8 x 4096 (minutes for a 70B model)",
        verdict_words(out)], err[0]
    assert verdict_words(out).startswith(f"aot: does NOT fit on v5e:2x2 (4 x {out['device_kind']}): needs ")
    assert out["batch"] == [8, 4096] and out["chip_config"] == "default"
    assert out["peak_bytes_per_device"] > out["hbm_bytes_per_device"]


@pytest.mark.slow
@needs_libtpu
def test_memory_only_gives_the_whole_compiles_answer():
    """--memory-only stops the compile once the TPU compiler has checked the step against HBM (the
    memory-usage report, live ranges and buffer assignment are final there; code generation
    follows): the whole compile's JSON, verdict, peak and peak buffers alike, but for
    memory_analysis, which needs the finished executable."""
    tiny = ["--topology", "v5e:2x2", "--memory-detail", "--config.model.num_layers=2", f"--config.data.seq_len={TINY_T}",
            "--config.train.batch_size=8", "--config.model.attention=blockwise"]
    rc, whole = _aot(*tiny, config="configs/tiny_pretrain.py")
    fast_rc, fast = _aot(*tiny, "--memory-only", config="configs/tiny_pretrain.py")
    assert rc == fast_rc == 0 and whole["fits"] is True and whole.pop("memory_analysis")["generated_code"] > 0, whole
    assert fast.pop("memory_only") is True and fast.pop("memory_analysis") is None, fast  # stopped before code generation
    assert fast == whole
    from easylemur.train.aot import main

    with pytest.raises(SystemExit) as refused:  # --cost reads the finished executable
        main(["--config", "configs/tiny_pretrain.py", "--topology", "v5e:2x2", "--memory-only", "--cost"])
    assert refused.value.code == 2


def test_aot_compiles_the_model_train_resolves(tmp_path):
    """init.from's architecture and vocabulary growth, as train would run them, not the preset."""
    from easylemur.tokenizer.spm import DEFAULT_TOKENIZER_PATH
    from hf_models import make_hf_model

    make_hf_model(vocab_size=4000).save_pretrained(tmp_path / "hf")
    cfg = load_config("configs/tiny_chat.py", [f"workdir={tmp_path / 'w'}", f"init.from={tmp_path / 'hf'}",
                                              f"data.tokenizer={DEFAULT_TOKENIZER_PATH}", "train.extend_vocab=true",
                                              "model.remat=full"])
    model_cfg, source = run_model_config(cfg)
    assert (model_cfg.hidden_size, model_cfg.vocab_size, model_cfg.remat) == (64, 4096, "full")
    assert source == f"init.from={tmp_path / 'hf'}"
    missing = load_config("configs/tiny_chat.py", [f"workdir={tmp_path / 'w'}", f"init.from={tmp_path / 'nothing'}"])
    model_cfg, source = run_model_config(missing)
    assert model_cfg.hidden_size == 128 and source.startswith("preset 'tiny'")


# --- --cost: the step's cost estimate (train/hlo_cost.py) ---

def test_replica_groups_in_the_forms_xla_prints():
    from easylemur.train.hlo_cost import group_axes, replica_groups

    assert replica_groups("replica_groups={{0,1},{2,3}}, x", 4) == [[0, 1], [2, 3]]
    assert replica_groups("replica_groups={}, x", 4) == [[0, 1, 2, 3]]  # empty: every device
    assert replica_groups("replica_groups=[2,2]<=[4], x", 4) == [[0, 1], [2, 3]]
    assert replica_groups("replica_groups=[2,2]<=[2,2]T(1,0), x", 4) == [[0, 2], [1, 3]]
    assert replica_groups("replica_groups=mesh['a'=2,'b'=4] {'b'}, x", 8) == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert replica_groups("replica_groups=mesh['a'=2,'b'=4] {'a'}, x", 8)[0] == [0, 4]
    # XLA's examples for a mesh axis "a"=8: a:(1)2 -> [8] as [1,2,4] over dim 1; a:(1)2,a:(4)2 -> [2,2,2] over 0 and 2
    assert replica_groups("replica_groups=mesh['a'=8] {'a':(1)2}, x", 8) == [[0, 4], [1, 5], [2, 6], [3, 7]]
    assert sorted(replica_groups("replica_groups=mesh['a'=8] {'a':(1)2,'a':(4)2}, x", 8)[0]) == [0, 1, 4, 5]
    assert group_axes([0, 4], {"data": 2, "fsdp": 4}) == "data"
    assert group_axes([4, 5, 6, 7], {"data": 2, "fsdp": 4}) == "fsdp"
    assert group_axes(list(range(8)), {"data": 2, "fsdp": 4, "tensor": 1}) == "data+fsdp"


def test_roofline_arithmetic():
    from easylemur.train.hlo_cost import CHIPS, roofline
    from easylemur.train.metrics import _PEAKS

    v4 = CHIPS["v4"]
    assert dict(_PEAKS)["v4"] == v4.peak_flops and dict(_PEAKS)["v5p"] == CHIPS["v5p"].peak_flops  # one peak table
    r = roofline(flops=275e12, hbm_bytes=600e9, ici_bytes=v4.ici_bandwidth, chip=v4, tokens_per_step=2**21)
    assert r["compute_s"] == pytest.approx(1.0) and r["hbm_s"] == pytest.approx(0.5)
    assert r["ici_s"] == pytest.approx(2.0)  # sent bytes against half the bidirectional bandwidth
    assert r["bound_by"] == "ici" and r["step_s_bound"] == pytest.approx(2.0) and r["mfu_bound"] == pytest.approx(0.5)
    assert r["days_for_train_tokens"] == pytest.approx(90e9 / 2**21 * 2.0 / 86400)


# Rows of 64 tokens in the small TPU compiles below: what they check (which collectives, over
# which axes, how many bytes of weights and gradients) does not depend on T, and the TPU compiler
# takes 2.5 s for the tiny step at T = 64 where it takes 6.2 s at tiny_pretrain's 256.
TINY_T = 64


def _tiny_step_hlo(overrides: list[str], topology: str = "v5e:2x2"):
    """The compiled train step of a 2-layer tiny model on a small TPU topology (compiled once per
    worker for each setting: two tests read the same unscanned step)."""
    return _tiny_step_hlo_of(tuple(overrides), topology)


@functools.cache
def _tiny_step_hlo_of(overrides: tuple, topology: str):
    from easylemur import sharding
    from easylemur.train.aot import default_chip_config, topology_devices
    from easylemur.train.step import build_train_step

    cfg = load_config("configs/tiny_pretrain.py", [f"workdir={NO_RUN}", "model.num_layers=2", "model.remat=full",
                                                   "train.batch_size=8", f"data.seq_len={TINY_T}",
                                                   "model.attention=blockwise", *overrides])
    mesh = sharding.make_mesh(cfg.mesh, topology_devices(topology, default_chip_config(topology)))
    model_cfg, _ = run_model_config(cfg)
    compiled = build_train_step(cfg, model_cfg, mesh).lower(cfg.train.batch_size, cfg.data.seq_len, mesh).compile()
    return compiled.as_text(), model_cfg, mesh


def _layer_matrix_bytes(m) -> int:
    """bf16 bytes of every layer's weight matrices (norm vectors aside)."""
    d, f, hd = m.hidden_size, m.intermediate_size, m.hd
    return 2 * m.num_layers * (d * hd * (2 * m.num_heads + 2 * m.num_kv_heads) + 3 * d * f)


@pytest.mark.slow
@needs_libtpu
def test_collectives_of_a_pure_fsdp_step_from_its_hlo():
    """Pure FSDP over 4 devices: every collective spans the fsdp axis; each layer's weights are
    gathered (bf16) for the forward and again for the backward (remat=full keeps nothing),
    at most three times (forward, remat, backward), each gather moving (n-1)/n of them; remat
    moves nothing to the host."""
    from easylemur.train.hlo_cost import collective_bytes, host_transfer_bytes

    text, m, mesh = _tiny_step_hlo(["mesh=data:1,fsdp:-1,tensor:1", "model.scan_layers=false"])
    out = collective_bytes(text, dict(mesh.shape))
    # besides fsdp's gathers and reductions only a small re-tiling exchange may appear: down_proj's
    # shard of the mlp dimension (352 / 4 = 88 rows) is not a whole number of bf16 (16, 128) tiles
    assert set(out["bytes_by_axis"]) <= {"fsdp", "permute"} and out["unparsed_ops"] == 0, out
    assert out["bytes_by_axis"].get("permute", 0) <= 0.01 * out["total_bytes"], out
    gathered = _layer_matrix_bytes(m) * 3 / 4
    head = 2 * m.hidden_size * m.vocab_size * 3 / 4
    assert 2 * gathered <= out["bytes_by_kind"]["all-gather"] <= 3 * (gathered + head), out
    assert out["bytes_by_kind"]["reduce-scatter"] >= _layer_matrix_bytes(m) * 3 / 4 * 0.8, out  # the gradients
    assert host_transfer_bytes(text) == {"to_host": 0.0, "from_host": 0.0}


@pytest.mark.slow
@needs_libtpu
def test_a_pod_slice_gathers_weights_with_all_gathers():
    """On a v4-128 (64 devices, a 4x4x4 torus with its wraparound links, as its VMs are wired)
    FSDP gathers each layer's weights with real all-gathers. Described as an open mesh (what
    libtpu assumes without `wrap`) the TPU compiler ran each as an all-reduce of a zero-padded
    buffer, twice the bytes; at this size it reduces the gradients with all-reduces either way
    (docs/design.md, "Torus wraparound")."""
    from easylemur.train.hlo_cost import collective_bytes

    text, m, mesh = _tiny_step_hlo(["mesh=data:1,fsdp:-1,tensor:1", "model.scan_layers=true", "train.batch_size=64"],
                                   topology="v4:4x4x4")
    out = collective_bytes(text, dict(mesh.shape))
    assert mesh.shape["fsdp"] == 64 and out["unparsed_ops"] == 0, out
    assert out["bytes_by_kind"]["all-gather-as-all-reduce"] == 0, out
    assert out["bytes_by_kind"]["all-gather"] >= 2 * _layer_matrix_bytes(m) * 63 / 64, out


@pytest.mark.slow
@needs_libtpu
def test_scanned_collectives_and_offload_counted_per_layer():
    """The same step scanned: the loop's body holds one layer's collectives, which the trip
    count read from the HLO multiplies back to the unscanned total (the gradients' reductions
    match it); each layer's weights are gathered twice (forward; the recomputed forward and
    the backward together), where the unscanned program, free of memory pressure, keeps each
    gathered weight from the forward to the backward (once); remat=full_offload moves each
    layer's input [rows, T, d] (bf16) to the host and back once."""
    from easylemur.train.hlo_cost import collective_bytes, host_transfer_bytes

    common = ["mesh=data:1,fsdp:-1,tensor:1"]
    unscanned, _, mesh = _tiny_step_hlo(common + ["model.scan_layers=false"])
    scanned, m, _ = _tiny_step_hlo(common + ["model.scan_layers=true"])
    a, b = collective_bytes(unscanned, dict(mesh.shape)), collective_bytes(scanned, dict(mesh.shape))
    assert b["loops"] and all(loop["trips"] is not None for loop in b["loops"]), b["loops"]
    assert b["bytes_by_kind"]["reduce-scatter"] == pytest.approx(a["bytes_by_kind"]["reduce-scatter"], rel=0.1), (a, b)
    gathered, head = _layer_matrix_bytes(m) * 3 / 4, 2 * m.hidden_size * m.vocab_size * 3 / 4
    assert gathered <= a["bytes_by_kind"]["all-gather"] <= gathered + 3 * head, a
    assert 2 * gathered <= b["bytes_by_kind"]["all-gather"] <= 2 * gathered + 3 * head, b
    offload, _, _ = _tiny_step_hlo(common + ["model.scan_layers=true", "model.remat=full_offload"])
    layer_input = 8 // 4 * TINY_T * m.hidden_size * 2  # rows per device x T x d, bf16
    assert host_transfer_bytes(offload) == {"to_host": m.num_layers * layer_input, "from_host": m.num_layers * layer_input}


@pytest.mark.slow
@needs_libtpu
def test_collectives_map_to_their_mesh_axes():
    """fsdp 2 x tensor 2: the weight gathers span fsdp, the tensor-parallel activations' reductions
    span tensor."""
    from easylemur.train.hlo_cost import collective_bytes

    text, _, mesh = _tiny_step_hlo(["mesh=data:1,fsdp:2,tensor:2", "model.scan_layers=true"])
    axes = collective_bytes(text, dict(mesh.shape))["bytes_by_axis"]
    assert axes.get("fsdp", 0) > 0 and axes.get("tensor", 0) > 0, axes


@pytest.mark.slow
@needs_libtpu
def test_the_residual_stream_is_gathered_over_tensor_once_per_block(monkeypatch):
    """fsdp 2 x tensor 4 on a v4 2x2x2: q, k and v (and gate and up) read the residual stream
    gathered over `tensor` once, so the step sends far fewer bytes over `tensor` than when each
    projection gathers it itself and reduce-scatters its own input gradient (6.15 -> 3.79 MB
    when this was written; Lemur-70B at fsdp 64 x tensor 4: 484.5 -> 387.9 GB)."""
    from easylemur import sharding
    from easylemur.model import llama
    from easylemur.train.aot import default_chip_config, topology_devices
    from easylemur.train.hlo_cost import collective_bytes
    from easylemur.train.step import build_train_step

    cfg = load_config("configs/tiny_pretrain.py", [f"workdir={NO_RUN}", "model.num_layers=2", "model.remat=full",
                                                   "train.batch_size=16", f"data.seq_len={TINY_T}", "model.attention=blockwise",
                                                   "model.scan_layers=true", "mesh=data:1,fsdp:2,tensor:4"])
    mesh = sharding.make_mesh(cfg.mesh, topology_devices("v4:2x2x2", default_chip_config("v4:2x2x2")))
    model_cfg, _ = run_model_config(cfg)

    def tensor_bytes() -> float:
        text = build_train_step(cfg, model_cfg, mesh).lower(16, TINY_T, mesh).compile().as_text()
        return collective_bytes(text, dict(mesh.shape))["bytes_by_axis"]["tensor"]

    once = tensor_bytes()
    monkeypatch.setattr(llama, "gathered_over_tensor", lambda x, mesh: x)  # each projection gathers for itself
    each = tensor_bytes()
    assert once <= 0.75 * each, (once, each)


@pytest.mark.slow
@needs_libtpu
def test_layer_fit_matches_an_unscanned_compile():
    """--cost's HBM bytes: XLA's cost of the step unscanned with 1 and 2 layers, extrapolated to
    L, against the same step compiled unscanned with L layers (4 here); XLA's FLOPs too."""
    import dataclasses

    from easylemur import sharding
    from easylemur.train.aot import _xla_cost, default_chip_config, per_layer_fit, topology_devices
    from easylemur.train.step import build_train_step

    cfg = load_config("configs/tiny_pretrain.py", [f"workdir={NO_RUN}", "mesh=data:1,fsdp:-1,tensor:1", "train.batch_size=8",
                                                   f"data.seq_len={TINY_T}",
                                                   "model.attention=blockwise", "model.remat=full_offload",
                                                   "model.scan_layers=true"])
    mesh = sharding.make_mesh(cfg.mesh, topology_devices("v5e:2x2", default_chip_config("v5e:2x2")))
    model_cfg, _ = run_model_config(cfg)
    assert model_cfg.num_layers == 4
    fit = per_layer_fit(cfg, model_cfg, mesh, 8, cfg.data.seq_len)
    unscanned = dataclasses.replace(model_cfg, scan_layers=False)
    direct = _xla_cost(build_train_step(cfg, unscanned, mesh).lower(8, cfg.data.seq_len, mesh).compile())
    assert fit["bytes accessed"]["at_num_layers"] == pytest.approx(direct["bytes accessed"], rel=0.1), (fit, direct)
    assert fit["flops"]["at_num_layers"] == pytest.approx(direct["flops"], rel=0.01), (fit, direct)


# --- multi-slice: dcn_data ---

@needs_libtpu
def test_multi_slice_mesh_keeps_each_slice_whole():
    """Two slices of a v5e:2x2: the mesh's data axis runs across them, every fsdp group lies in
    one slice; a mesh that does not name the slices is refused in one line."""
    from easylemur import sharding
    from easylemur.train.aot import topology_devices

    devices = topology_devices("v5e:2x2", "default", num_slices=2)
    assert sorted({d.slice_index for d in devices}) == [0, 1]
    mesh = sharding.make_mesh("dcn_data:2,fsdp:-1", devices)
    assert dict(mesh.shape) == {"data": 2, "fsdp": 4, "tensor": 1}
    for k in range(2):
        assert {d.slice_index for d in mesh.devices[k].flat} == {k}
    with pytest.raises(sharding.MeshError, match="in 2 TPU slices; name them with dcn_data:2"):
        sharding.make_mesh("data:1,fsdp:-1", devices)
    with pytest.raises(sharding.MeshError, match="in 2 TPU slices"):
        sharding.make_mesh("dcn_data:4,fsdp:-1", devices)


@pytest.mark.slow
@needs_libtpu
def test_two_slice_step_reports_its_dcn_bytes():
    """A two-slice compile through libtpu's multi-slice topology: the collectives inside the
    program stay within a slice, and what crosses the data-center network (the compiler's
    megascale host transfers) is the data-parallel reduction of the gradients: about one f32
    gradient shard per device per step."""
    rc, out = _aot("--topology", "v5e:2x2", "--config.mesh=dcn_data:2,fsdp:-1", "--config.model.num_layers=2",
                   "--config.train.batch_size=8", f"--config.data.seq_len={TINY_T}",
                   "--config.model.attention=blockwise", "--cost",
                   config="configs/tiny_pretrain.py")
    assert rc == 0 and (out["slices"], out["devices"]) == (2, 8), out
    c = out["cost"]
    assert not any("dcn_data" in axis for axis in c["collective_bytes_by_axis"]), c["collective_bytes_by_axis"]
    shard = 4 * out["params"] / 4  # f32 gradients, fsdp 4 within each slice
    assert 0.5 * shard <= c["dcn_bytes_by_kind"]["all-reduce"] <= 3 * shard, (c["dcn_bytes_by_kind"], shard)
    assert c["dcn_bytes_per_device"] == pytest.approx(sum(c["dcn_bytes_by_kind"].values()))
    assert c["dcn_s"] == pytest.approx(c["dcn_bytes_per_device"] / c["chip"]["dcn_bandwidth"])
    single_rc, single = _aot("--topology", "v5e:2x2", "--config.mesh=fsdp:-1", "--config.model.num_layers=2",
                             "--config.train.batch_size=8", f"--config.data.seq_len={TINY_T}",
                             "--config.model.attention=blockwise", "--cost",
                             config="configs/tiny_pretrain.py")
    assert single_rc == 0 and single["slices"] == 1 and single["cost"]["dcn_bytes_per_device"] == 0


_ASYNC_HLO = """HloModule t

%start (p0: bf16[4,128]) -> (bf16[4,128], bf16[16,128]) {
  %p0 = bf16[4,128]{1,0} parameter(0)
  %ag = bf16[16,128]{1,0} all-gather(%p0), channel_id=1, replica_groups={{0,1,2,3}}, frontend_attributes={chain_id="0"}
  ROOT %cc = (bf16[4,128]{1,0}, bf16[16,128]{1,0}) custom-call(%p0, %ag), custom_call_target="AsyncCollectiveStart"
}

%done (p0: bf16[4,128], p1: bf16[16,128]) -> bf16[16,128] {
  %p0 = bf16[4,128]{1,0} parameter(0)
  %p1 = bf16[16,128]{1,0} parameter(1)
  %ag = bf16[16,128]{1,0} all-gather(%p0), channel_id=1, replica_groups={{0,1,2,3}}, frontend_attributes={chain_id="0"}
  ROOT %cc = bf16[16,128]{1,0} custom-call(%p0, %p1, %ag), custom_call_target="AsyncCollectiveDone"
}

%mm (a: bf16[8,64], b: bf16[64,16]) -> f32[8,16] {
  %a = bf16[8,64]{1,0} parameter(0)
  %b = bf16[64,16]{1,0} parameter(1)
  ROOT %c = f32[8,16]{1,0} convolution(%a, %b), dim_labels=bf_io->bf
}

ENTRY %main (x: bf16[4,128], a: bf16[8,64], b: bf16[64,16]) -> (bf16[16,128], f32[8,16], bf16[16,128]) {
  %x = bf16[4,128]{1,0} parameter(0)
  %a = bf16[8,64]{1,0} parameter(1)
  %b = bf16[64,16]{1,0} parameter(2)
  %s = (bf16[4,128]{1,0}, bf16[16,128]{1,0}) fusion(%x), kind=kCustom, calls=%start
  %g0 = bf16[4,128]{1,0} get-tuple-element(%s), index=0
  %g1 = bf16[16,128]{1,0} get-tuple-element(%s), index=1
  %BEFORE
  %d = bf16[16,128]{1,0} fusion(%g0, %g1), kind=kCustom, calls=%done
  %AFTER
  %ag2 = bf16[16,128]{1,0} all-gather(%x), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT %t = (bf16[16,128]{1,0}, f32[8,16]{1,0}, bf16[16,128]{1,0}) tuple(%d, %m, %ag2)
}
"""


def test_overlap_counts_an_async_collective_hidden_up_to_the_matmuls_scheduled_inside_it():
    """A start/done pair around a matmul hides the collective up to that matmul's time; the same
    matmul scheduled after the done, and any synchronous collective, hide nothing."""
    from easylemur.train.hlo_cost import Chip, collective_bytes, collective_overlap

    mesh = {"data": 1, "fsdp": 4, "tensor": 1}
    matmul = "%m = f32[8,16]{1,0} fusion(%a, %b), kind=kOutput, calls=%mm"
    inside = _ASYNC_HLO.replace("%BEFORE", matmul).replace("  %AFTER\n", "")
    after = _ASYNC_HLO.replace("  %BEFORE\n", "").replace("%AFTER", matmul)
    gather = 4 * 128 * 2 * 3  # bytes each all-gather sends: O * (n - 1)
    assert collective_bytes(inside, mesh)["bytes_by_kind"]["all-gather"] == 2 * gather  # the async one counted once
    flops = 2 * 8 * 16 * 64
    slow = Chip(peak_flops=flops / 10.0, hbm_bandwidth=1.0, ici_bandwidth=2.0 * gather, source="test")  # matmul 10 s
    fast = Chip(peak_flops=flops / 0.25, hbm_bandwidth=1.0, ici_bandwidth=2.0 * gather, source="test")  # matmul 0.25 s
    o = collective_overlap(inside, mesh, slow)  # each gather takes 1 s on the link
    assert (o["ici_s"], o["async_ici_s"], o["hidden_ici_s"], o["exposed_ici_s"]) == pytest.approx((2, 1, 1, 1))
    assert collective_overlap(inside, mesh, fast)["hidden_ici_s"] == pytest.approx(0.25)
    assert collective_overlap(after, mesh, slow)["hidden_ici_s"] == 0


# --- --memory-detail: the buffers live at the compiler's peak ---

_LIVE_RANGE = """HloLiveRange (max 1939):
  InstructionSequence:
    0:param.47
  Live ranges at 681 (peak):
    dynamic-update-slice.63{}: 10737418240 bytes (cumulative: 10737418240 bytes)
    copy.613{}: 83886080 bytes (cumulative: 10821304320 bytes)
    param.47{}: 83886080 bytes (cumulative: 10905190400 bytes)
    fusion.480{0}: 469762048 bytes (cumulative: 11374952448 bytes)
    conditional{23}: 293601280 bytes (cumulative: 11668553728 bytes)
    fusion.480{}: 16 bytes (cumulative: 11668553744 bytes)
  Stack trace breakdown for peak usage: 11 668 553 744 bytes
"""
_BUFFER_ASSIGNMENT = """BufferAssignment:
allocation 10: size 83886080, parameter 33, shape |f32[80,64,128,32]| at ShapeIndex {}, maybe-live-out:
 value: <3644 copy.678 @0> (size=83886080,offset=0): f32[80,64,128,32]{2,3,1,0:T(8,128)}
 value: <3685 param.47 @0> (size=83886080,offset=0): f32[80,64,128,32]{2,3,1,0:T(8,128)}
 value: <4778 conditional{23} (phi) @0> (size=293601280,offset=0): f32[80,112,8192]{2,1,0:T(8,128)}
 value: <3634 copy.613 @0> (size=335544320,offset=1738407936): f32[80,64,128,32]{3,2,1,0:T(8,128)}
 value: <3047 dynamic-update-slice.63 @5> (size=10737418240,offset=0): bf16[80,2,4096,8192]{3,2,1,0:T(8,128)(2,1)S(5)}
 value: <3129 fusion.480{} @0> (size=512,offset=0): (bf16[2,4096,28672]{2,1,0:T(8,128)(2,1)}, f32[]{:T(128)})
 value: <3130 fusion.480{0} @0> (size=469762048,offset=0): bf16[2,4096,28672]{2,1,0:T(8,128)(2,1)}
"""
_REPORT = """Memory Space: default (color=0)
Total bytes: 9462042624 (8.81GiB)
Memory Space: cmem (color=5)
Total bytes: 10737418240 (10.00GiB)
"""


def _write_dump(path: Path, live_range: str = _LIVE_RANGE) -> str:
    prefix = path / "module_0000.jit_step.cl_1.after_optimizations"
    Path(f"{prefix}-live-range.txt").write_text(live_range)
    Path(f"{prefix}-buffer-assignment.txt").write_text(_BUFFER_ASSIGNMENT)
    Path(f"{prefix}-memory-usage-report.txt").write_text(_REPORT)
    return str(path)


def test_peak_buffers_parses_the_live_range_and_buffer_assignment_reports(tmp_path):
    """Lines as libtpu writes them (a 70B step's): every buffer live at the peak in HBM with its
    buffer-assignment size and layout; the host-offloaded one (S(5)) is listed apart; padding is
    allocated - logical: o_proj's shard laid out {3,2,1,0} has the 32-wide dimension minor,
    padded to 128 by the (8, 128) tiles, 320 MiB for 80 MiB, where {2,3,1,0} pads nothing."""
    from easylemur.train.hlo_cost import HOST_SPACE
    from easylemur.train.peak_buffers import logical_bytes, memory_detail, peak_buffers

    MiB = 2**20
    out = peak_buffers(_write_dump(tmp_path))
    assert [e["name"] for e in out] == ["fusion.480{0}", "copy.613{}", "conditional{23}", "param.47{}", "fusion.480{}"]
    by = {e["name"]: e for e in out}
    assert by["copy.613{}"]["shape"] == "f32[80,64,128,32]{3,2,1,0:T(8,128)}" and by["copy.613{}"]["dtype"] == "f32"
    assert (by["copy.613{}"]["allocated_bytes"], by["copy.613{}"]["logical_bytes"], by["copy.613{}"]["padding_bytes"]) \
        == (320 * MiB, 80 * MiB, 240 * MiB)
    assert (by["param.47{}"]["allocated_bytes"], by["param.47{}"]["padding_bytes"]) == (80 * MiB, 0)
    assert by["conditional{23}"]["padding_bytes"] == 0 and by["fusion.480{0}"]["logical_bytes"] == 448 * MiB
    assert (by["fusion.480{}"]["dtype"], by["fusion.480{}"]["logical_bytes"], by["fusion.480{}"]["padding_bytes"]) \
        == ("tuple", 16, 496)  # a tuple: one pointer per element, as the live-range report counts it
    assert all(e["memory_space"] == 0 and e["allocated_bytes"] >= e["logical_bytes"] for e in out)
    host = peak_buffers(str(tmp_path), memory_space=HOST_SPACE)
    assert [(e["name"], e["allocated_bytes"], e["padding_bytes"]) for e in host] == [("dynamic-update-slice.63{}", 10 * 2**30, 0)]

    detail = memory_detail(str(tmp_path), top=2)
    live = (448 + 320 + 280 + 80) * MiB + 512
    assert (detail["peak_instruction"], detail["buffers"], detail["live_bytes"]) == (681, 5, live)
    assert detail["padding_bytes"] == 240 * MiB + 496
    assert detail["compiler_peak_bytes"] == 9462042624 and [e["name"] for e in detail["top"]] == ["fusion.480{0}", "copy.613{}"]
    assert detail["other_memory_spaces"] == [{"memory_space": 5, "report_name": "cmem", "host": True,
                                              "live_bytes": 10 * 2**30, "buffers": 1}]

    assert logical_bytes("bf16[2,4096,8192]{2,1,0:T(8,128)(2,1)}") == 2 * 4096 * 8192 * 2
    assert logical_bytes("pred[]{:T(512)}") == 1 and logical_bytes("s4[3]{0}") == 2 and logical_bytes("f8e4m3fn[10]") == 10
    assert logical_bytes("(s32[]{:T(128)}, (f32[2]{0}, f32[3]{0}), /*index=2*/bf16[4,4]{1,0:T(4,128)(2,1)})") == 24

    with pytest.raises(ValueError, match="copy.999"):  # a live buffer the buffer assignment lacks: not silently dropped
        peak_buffers(_write_dump(tmp_path, _LIVE_RANGE.replace("copy.613{}", "copy.999{}")))
    with pytest.raises(FileNotFoundError):
        peak_buffers(str(tmp_path / "nothing"))
    assert memory_detail(str(tmp_path / "nothing")) is None


def _tiled_f32_bytes(shape: str) -> Optional[int]:
    """Bytes of an f32 array tiled T(r,128) on the two minor dimensions of its layout, or None
    for another kind of shape."""
    m = re.fullmatch(r"f32\[([\d,]+)\]\{([\d,]+):T\((\d+),128\)\}", shape)
    if not m or "," not in m.group(1):
        return None
    dims, minor_to_major, r = [int(d) for d in m.group(1).split(",")], [int(d) for d in m.group(2).split(",")], int(m.group(3))
    minor, second = dims[minor_to_major[0]], dims[minor_to_major[1]]
    major = 1
    for d in minor_to_major[2:]:
        major *= dims[d]
    return major * -(-second // r) * r * -(-minor // 128) * 128 * 4


@pytest.mark.slow
@needs_libtpu
# a test worker that compiled before has its persistent compilation cache on (aot.topology_devices
# turns it off only in a process that has compiled nothing), and a TPU program compiled here
# cannot be loaded back from it on a host without chips: JAX warns and compiles
@pytest.mark.filterwarnings("ignore:Error reading persistent compilation cache entry")
def test_peak_buffers_of_a_tiny_step_add_up_to_at_most_the_compilers_peak(tmp_path):
    """A tiny step compiled for v5e:2x2 with a dump: the HBM buffers live at the compiler's peak
    instruction add up to at most its "Total bytes" (the HBM heap also holds buffers live at
    other instructions and the holes between them; that instruction is where all memory spaces,
    VMEM included, peak); each one's logical bytes are the live-range report's own, unpadded,
    figure and its allocation is never smaller; f32 arrays take exactly their (r, 128) tiles,
    and some of the model's (head_dim 32 minor) are padded."""
    from easylemur import sharding
    from easylemur.train.aot import compiler_peak_bytes, default_chip_config, topology_devices
    from easylemur.train.peak_buffers import _dump_files, _peak_entries, memory_detail, peak_buffers
    from easylemur.train.step import build_train_step

    cfg = load_config("configs/tiny_pretrain.py", [f"workdir={NO_RUN}", "model.num_layers=2", "model.remat=full_offload",
                                                   "train.batch_size=8", f"data.seq_len={TINY_T}", "model.attention=blockwise",
                                                   "mesh=data:1,fsdp:-1,tensor:1", "model.scan_layers=true"])
    mesh = sharding.make_mesh(cfg.mesh, topology_devices("v5e:2x2", default_chip_config("v5e:2x2")))
    model_cfg, _ = run_model_config(cfg)
    build_train_step(cfg, model_cfg, mesh).lower(8, TINY_T, mesh).compile({"xla_dump_to": str(tmp_path)})
    out = peak_buffers(str(tmp_path))
    peak = compiler_peak_bytes(str(tmp_path))
    assert out and peak and sum(e["allocated_bytes"] for e in out) <= peak, (sum(e["allocated_bytes"] for e in out), peak)
    assert all(e["allocated_bytes"] >= e["logical_bytes"] and not re.search(r"S\(\d+\)\}$", e["shape"]) for e in out), out
    _, every_space = _peak_entries(_dump_files(str(tmp_path), "jit_step"))
    assert all(e["logical_bytes"] == e["live_range_bytes"] for e in every_space), every_space
    tiled = [(e, _tiled_f32_bytes(e["shape"])) for e in out if _tiled_f32_bytes(e["shape"])]
    assert tiled and all(e["allocated_bytes"] == t for e, t in tiled), tiled
    assert any(e["padding_bytes"] > 0 for e, _ in tiled), tiled
    detail = memory_detail(str(tmp_path))
    assert (detail["live_bytes"], detail["buffers"], detail["compiler_peak_bytes"]) == \
        (sum(e["allocated_bytes"] for e in out), len(out), peak)
    assert detail["padding_bytes"] == sum(e["padding_bytes"] for e in out) > 0


@pytest.mark.slow
@needs_libtpu
def test_memory_detail_flag_adds_peak_buffers_and_a_table(capsys):
    """`python -m easylemur.aot ... --memory-detail` (in process, a tiny step): a peak_buffers
    object with the 25 largest, largest first, within the compiler's peak, and a table on stderr."""
    from easylemur.train.aot import main

    rc = main(["--config", "configs/tiny_pretrain.py", f"--config.workdir={NO_RUN}", "--topology", "v5e:2x2",
               "--memory-detail", "--config.model.num_layers=2", f"--config.data.seq_len={TINY_T}",
               "--config.train.batch_size=8", "--config.model.attention=blockwise"])
    captured = capsys.readouterr()
    out = json.loads([line for line in captured.out.splitlines() if line.startswith("{")][-1])
    assert rc == 0 and out["fits"] is True, out
    detail = out["peak_buffers"]
    top = detail["top"]
    assert 0 < len(top) <= 25 and detail["buffers"] >= len(top)
    assert [e["allocated_bytes"] for e in top] == sorted((e["allocated_bytes"] for e in top), reverse=True)
    assert 0 < detail["live_bytes"] <= out["peak_bytes_per_device"] == detail["compiler_peak_bytes"]
    assert set(top[0]) == {"name", "shape", "dtype", "memory_space", "allocated_bytes", "logical_bytes", "padding_bytes"}
    assert "buffers live at the compiler's peak" in captured.err and top[0]["name"] in captured.err
