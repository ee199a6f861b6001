"""HF <-> easylemur converters, judged by transformers, orbax, safetensors and AutoTokenizer."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import ml_dtypes
import numpy as np
import pytest
import torch

import easylemur
from easylemur.checkpoint import model_meta
from easylemur.convert import cli as convert
from easylemur.convert import streaming_save
from easylemur.convert import hf
from easylemur.model.stacking import scan_params
from easylemur.convert.safetensors_io import read_safetensors_header
from easylemur.tokenizer.spm import DEFAULT_TOKENIZER_PATH, Tokenizer
from hf_models import hf_logits, make_hf_model

ROOT = Path(__file__).resolve().parents[1]
VOCAB = 4096  # the shipped tokenizer's size, so its ids index the model


def _ids(batch, length, vocab=VOCAB, seed=0):
    return np.random.default_rng(seed).integers(0, vocab, size=(batch, length))


def _tensors(path) -> dict:
    return {n: s.read() for n, s in hf.index_hf_tensors(path).items()}


def _bitwise_equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _run(argv, capsys=None):
    rc = convert.main([str(a) for a in argv])
    err = capsys.readouterr().err if capsys else ""
    return rc, err


def _one_line_error(err: str) -> str:
    """The CLI's error: exactly one line `error: ...` on stderr, no traceback."""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def _snapshot(d: Path) -> dict:
    """Every file under d (relative path -> bytes), symlinks as their targets, and the folders."""
    snap = {}
    for p in sorted(d.rglob("*")):
        rel = str(p.relative_to(d))
        snap[rel] = ("link", str(p.readlink())) if p.is_symlink() else p.read_bytes() if p.is_file() else "dir"
    return snap


def _leftovers(d: Path) -> list:
    """Staging or moved-aside directories a conversion left beside d."""
    return sorted(p.name for p in d.parent.iterdir() if p.name.startswith(d.name + "."))


@pytest.fixture(scope="module")
def hf_model(tmp_path_factory):
    """A random float32 HF Llama with the shipped (ChatML) tokenizer beside it."""
    d = tmp_path_factory.mktemp("hf")
    model = make_hf_model(vocab_size=VOCAB)
    model.save_pretrained(d)
    shutil.copyfile(DEFAULT_TOKENIZER_PATH, d / "tokenizer.model")
    return model, d


@pytest.fixture(scope="module")
def converted(hf_model, tmp_path_factory):
    _, d = hf_model
    out = tmp_path_factory.mktemp("ckpt")
    assert convert.main(["from-hf", "--hf", str(d), "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def exported_f32(converted, tmp_path_factory):
    out = tmp_path_factory.mktemp("export32")
    assert convert.main(["to-hf", "--checkpoint", str(converted), "--out", str(out), "--dtype", "float32", "--force"]) == 0
    return out


# ----------------------------------------------------------------------------- weights


def test_round_trip_float32_is_bitwise_and_transformers_loads_it(hf_model, converted, exported_f32):
    from transformers import LlamaForCausalLM

    model, src = hf_model
    a, b = _tensors(src), _tensors(exported_f32)
    assert sorted(a) == sorted(b)
    bad = [n for n in a if not _bitwise_equal(a[n], b[n])]
    assert not bad, bad
    # configs: the same model by easylemur's reading, and the same fields transformers reads
    ca, cb = (json.loads((p / "config.json").read_text()) for p in (src, exported_f32))
    assert hf.read_hf_config(src) == hf.read_hf_config(exported_f32)
    for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                "num_key_value_heads", "rms_norm_eps", "max_position_embeddings", "tie_word_embeddings",
                "bos_token_id", "eos_token_id", "model_type", "hidden_act"):
        assert ca[key] == cb[key], key
    assert cb["rope_parameters"]["rope_theta"] == cb["rope_theta"] == ca["rope_parameters"]["rope_theta"]
    assert json.loads((exported_f32 / "model.safetensors.index.json").read_text())["weight_map"].keys() == a.keys()
    reloaded = LlamaForCausalLM.from_pretrained(exported_f32, dtype=torch.float32)
    ids = _ids(2, 24)
    assert np.array_equal(hf_logits(reloaded, ids), hf_logits(model, ids))


@pytest.mark.slow
def test_logits_through_load_on_hf_dir_and_checkpoint(hf_model, converted):
    model, src = hf_model
    ids = _ids(2, 40, seed=3)
    ref = hf_logits(model, ids)
    scale = np.abs(ref).max()
    for path in (src, converted, converted / "checkpoints", converted / "checkpoints" / "0"):
        m = easylemur.load(path)
        ours = np.asarray(m.logits(ids))
        assert np.abs(ours - ref).max() <= 1e-5 * scale, (path, np.abs(ours - ref).max())
        assert m.tokenizer is not None and m.tokenizer.vocab_size == VOCAB


@pytest.mark.slow
def test_checkpoint_is_the_orbax_format(hf_model, converted, tmp_path):
    """Plain orbax restores it, model_meta.load_params restores it, the params tree is exactly
    the model's, and the step metadata names the same handler save_params records."""
    import orbax.checkpoint as ocp

    from easylemur.model.llama import param_specs

    _, src = hf_model
    cfg, params, tok = model_meta.load_params(converted)
    assert tok is not None and Path(tok).read_bytes() == Path(DEFAULT_TOKENIZER_PATH).read_bytes()
    assert cfg == hf.read_hf_config(src)  # float32 source: param_dtype float32
    shapes, _ = param_specs(cfg)
    assert jax.tree.structure(shapes) == jax.tree.structure(params)
    expected = hf.load_hf_params(src, cfg)
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), y), params, expected)

    raw = ocp.CheckpointManager((converted / "checkpoints").absolute()).restore(0)
    jax.tree.map(lambda x, y: np.testing.assert_array_equal(np.asarray(x), y), dict(raw["params"]), expected)
    assert raw["meta"]["model"]["vocab_size"] == VOCAB
    handlers = json.loads((converted / "checkpoints" / "0" / "_CHECKPOINT_METADATA").read_text())["item_handlers"]
    assert handlers["params"].endswith("StandardCheckpointHandler")
    # the streaming writer's tree metadata is exactly what model_meta.save_params writes
    model_meta.save_params(tmp_path / "ref", cfg, expected)
    ours, ref = (json.loads((p / "checkpoints/0/params/_METADATA").read_text()) for p in (converted, tmp_path / "ref"))
    assert ours == ref


def test_orbax_internals_for_streaming_save():
    """from-hf streams its checkpoint through orbax internals (convert.lazy_array_params_handler);
    an orbax without them would make every conversion hold the model twice in memory."""
    try:
        streaming_save.lazy_array_params_handler()
    except streaming_save.OrbaxInternalsMissing as e:
        pytest.fail(f"{e}: from-hf now takes the public-API fallback, which holds the whole model in memory "
                    "(about twice); port convert.lazy_array_params_handler to this orbax")


def test_public_orbax_fallback_writes_the_same_checkpoint(hf_model, converted, tmp_path, monkeypatch, capsys):
    _, src = hf_model

    def gone(*args):
        raise streaming_save.OrbaxInternalsMissing("orbax.checkpoint.StandardCheckpointHandler()._impl")

    monkeypatch.setattr(streaming_save, "lazy_array_params_handler", gone)
    rc, err = _run(["from-hf", "--hf", src, "--out", tmp_path / "ck"], capsys)
    assert rc == 0 and "StandardCheckpointHandler()._impl" in err and "public StandardSave" in err
    a, b = model_meta.read_meta(converted), model_meta.read_meta(tmp_path / "ck")
    assert a.meta == b.meta
    (cfg_a, pa, _), (cfg_b, pb, _) = model_meta.load_params(a), model_meta.load_params(b)
    assert cfg_a == cfg_b
    assert jax.tree.structure(pa) == jax.tree.structure(pb)
    assert all(_bitwise_equal(np.asarray(x), np.asarray(y)) for x, y in zip(jax.tree.leaves(pa), jax.tree.leaves(pb)))
    for name in ("params/_METADATA", "_CHECKPOINT_METADATA"):
        ours, ref = (json.loads((s.path / name).read_text()) for s in (b, a))
        ours.pop("init_timestamp_nsecs", None), ref.pop("init_timestamp_nsecs", None)
        ours.pop("commit_timestamp_nsecs", None), ref.pop("commit_timestamp_nsecs", None)
        assert ours == ref, name


def test_bf16_export_equals_bf16_cast_of_original(hf_model, converted, tmp_path):
    model, _ = hf_model
    out = tmp_path / "bf16"
    assert convert.main(["to-hf", "--checkpoint", str(converted), "--out", str(out)]) == 0  # default bfloat16
    got = _tensors(out)
    for name, p in model.state_dict().items():
        want = p.detach().to(torch.bfloat16).view(torch.int16).numpy()
        assert got[name].dtype == ml_dtypes.bfloat16, name
        assert np.array_equal(got[name].view(np.int16), want), name
    assert json.loads((out / "config.json").read_text())["torch_dtype"] == "bfloat16"


def test_bf16_source_stays_bf16_and_round_trips(tmp_path):
    model = make_hf_model(vocab_size=VOCAB).to(torch.bfloat16)
    model.save_pretrained(tmp_path / "hf")
    assert _run(["from-hf", "--hf", tmp_path / "hf", "--out", tmp_path / "ck"])[0] == 0
    meta = json.loads((tmp_path / "ck/checkpoints/0/meta/metadata").read_text())
    assert meta["model"]["param_dtype"] == "bfloat16"
    cfg, params, _ = model_meta.load_params(tmp_path / "ck")
    assert cfg.param_dtype == "bfloat16" and params["norm"]["scale"].dtype == ml_dtypes.bfloat16
    assert _run(["to-hf", "--checkpoint", tmp_path / "ck", "--out", tmp_path / "out"])[0] == 0
    a, b = _tensors(tmp_path / "hf"), _tensors(tmp_path / "out")
    assert sorted(a) == sorted(b) and all(_bitwise_equal(a[n], b[n]) for n in a)
    # asked for float32 storage instead, the values are the exact upcast
    assert _run(["from-hf", "--hf", tmp_path / "hf", "--out", tmp_path / "ck32", "--param-dtype", "float32"])[0] == 0
    cfg32, p32, _ = model_meta.load_params(tmp_path / "ck32")
    assert cfg32.param_dtype == "float32" and p32["norm"]["scale"].dtype == np.float32
    np.testing.assert_array_equal(np.asarray(p32["norm"]["scale"]), np.asarray(params["norm"]["scale"]).astype(np.float32))


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    """(HF dir, its checkpoint) of a model with one value beyond float16's 65504, in layer 1:
    a float16 conversion of it fails for real, mid-way, after the tensors before that one."""
    d = tmp_path_factory.mktemp("big")
    model = make_hf_model(vocab_size=VOCAB)
    with torch.no_grad():
        model.model.layers[1].mlp.down_proj.weight[3, 5] = 7e4
    model.save_pretrained(d / "hf")
    shutil.copyfile(DEFAULT_TOKENIZER_PATH, d / "hf" / "tokenizer.model")
    assert _run(["from-hf", "--hf", d / "hf", "--out", d / "ck"])[0] == 0
    return d / "hf", d / "ck"


@pytest.mark.slow
def test_float16_export_and_overflow_refusal(converted, big, tmp_path, capsys):
    ok = tmp_path / "fp16"
    assert _run(["to-hf", "--checkpoint", converted, "--out", ok, "--dtype", "float16"], capsys)[0] == 0
    assert all(t.dtype == np.float16 for t in _tensors(ok).values())

    bad = tmp_path / "bad"
    rc, err = _run(["to-hf", "--checkpoint", big[1], "--out", bad, "--dtype", "float16"], capsys)
    assert rc == 2
    line = _one_line_error(err)
    assert "model.layers.1.mlp.down_proj.weight" in line and "70000" in line and "--dtype bfloat16" in line
    assert not bad.exists() and _leftovers(bad) == [], "a refused export leaves nothing behind"
    assert _run(["to-hf", "--checkpoint", big[1], "--out", bad, "--dtype", "bfloat16"], capsys)[0] == 0


# ----------------------------------------------------------------------------- outputs never destroy


@pytest.fixture
def other_model_dir(tmp_path, llama2_like_spm):
    """An HF directory holding another model (pytorch_model.bin, its config, a sentencepiece and
    a fast tokenizer) next to files of the user's that belong to no model."""
    d = tmp_path / "out"
    other = make_hf_model(seed=7, vocab_size=600, hidden_size=32, intermediate_size=64, num_hidden_layers=3)
    other.config.save_pretrained(d)
    torch.save(other.state_dict(), d / "pytorch_model.bin")
    shutil.copyfile(llama2_like_spm, d / "tokenizer.model")
    (d / "tokenizer.json").write_text('{"model": {"type": "BPE"}}')
    (d / "README.md").write_text("# my notes about this model\n")
    (d / "eval").mkdir()
    (d / "eval" / "results.json").write_text('{"acc": 0.5}')
    os.chmod(d, 0o750)
    return d


def test_to_hf_refuses_a_directory_holding_another_model(converted, other_model_dir, capsys):
    before = _snapshot(other_model_dir)
    rc, err = _run(["to-hf", "--checkpoint", converted, "--out", other_model_dir], capsys)
    assert rc == 2
    line = _one_line_error(err)
    assert str(other_model_dir) in line and "not empty" in line and "--force" in line
    assert "pytorch_model.bin" in line and "config.json" in line and "tokenizer.model" in line
    assert _snapshot(other_model_dir) == before and _leftovers(other_model_dir) == []


def test_to_hf_force_leaves_exactly_one_model(hf_model, converted, other_model_dir, capsys):
    from transformers import AutoTokenizer, LlamaForCausalLM

    model, _ = hf_model
    before = _snapshot(other_model_dir)
    rc, err = _run(["to-hf", "--checkpoint", converted, "--out", other_model_dir, "--dtype", "float32", "--force"], capsys)
    assert rc == 0, err
    new = {"config.json", "generation_config.json", "model-00001-of-00001.safetensors", "model.safetensors.index.json",
           "tokenizer.model", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"}
    assert {p.name for p in other_model_dir.iterdir()} == new | {"README.md", "eval"}
    # the old model's files are gone and named (its tokenizer.json replaced by the export's own,
    # converted from the new tokenizer.model); the user's files are kept as they were
    removed = next(line for line in err.splitlines() if line.startswith("--force: removed"))
    assert "pytorch_model.bin" in removed
    replaced = next(line for line in err.splitlines() if line.startswith("--force: replaced"))
    assert "config.json" in replaced and "tokenizer.json" in replaced
    after = _snapshot(other_model_dir)
    assert {k: after[k] for k in ("README.md", "eval", "eval/results.json")} == \
        {k: before[k] for k in ("README.md", "eval", "eval/results.json")}
    assert os.stat(other_model_dir).st_mode & 0o777 == 0o750 and _leftovers(other_model_dir) == []
    # one model: transformers loads it and gets the converted model's logits; the tokenizer is the new one
    ids = _ids(1, 16)
    reloaded = LlamaForCausalLM.from_pretrained(other_model_dir, dtype=torch.float32)
    assert np.array_equal(hf_logits(reloaded, ids), hf_logits(model, ids))
    ours = Tokenizer.load(DEFAULT_TOKENIZER_PATH)
    text = "def f(x):\n    return x  # <|im_end|>"
    assert AutoTokenizer.from_pretrained(other_model_dir)(text, add_special_tokens=False)["input_ids"] == ours.encode(text)


def test_failed_export_leaves_the_previous_one_byte_identical(big, tmp_path, capsys):
    """A real failure mid-export (a tensor float16 cannot hold, after several shards are
    written) leaves the previous export exactly as it was and nothing beside it."""
    _, ck = big
    out = tmp_path / "export"
    assert _run(["to-hf", "--checkpoint", ck, "--out", out, "--dtype", "bfloat16"], capsys)[0] == 0
    before = _snapshot(out)
    rc, err = _run(["to-hf", "--checkpoint", ck, "--out", out, "--dtype", "float16", "--max-shard-size", "100KB",
                    "--force"], capsys)
    assert rc == 2 and "model.layers.1.mlp.down_proj.weight" in _one_line_error(err)
    assert _snapshot(out) == before and _leftovers(out) == []


def test_failed_swap_puts_the_previous_export_back(converted, tmp_path, monkeypatch, capsys):
    """The OS refusing the rename that puts the new export in place (the second of the two)
    leaves the previous export under its name, and no staging directory."""
    out = tmp_path / "export"
    assert _run(["to-hf", "--checkpoint", converted, "--out", out], capsys)[0] == 0
    before = _snapshot(out)
    real_rename = os.rename

    def rename(src, dst):
        if Path(dst) == out and ".incomplete-" in Path(src).name:
            raise OSError(28, "No space left on device")
        return real_rename(src, dst)

    monkeypatch.setattr(os, "rename", rename)
    rc, err = _run(["to-hf", "--checkpoint", converted, "--out", out, "--dtype", "float32", "--force"], capsys)
    assert rc == 1 and "No space left" in _one_line_error(err)
    assert _snapshot(out) == before and _leftovers(out) == []


def test_interrupted_swap_is_named_on_the_next_run(converted, tmp_path, capsys):
    """What a crash between the two renames of --force leaves (no OUT, the previous export in
    OUT.previous-*, the new one in OUT.incomplete-*) is named, with what to do, by the next run."""
    out = tmp_path / "export"
    assert _run(["to-hf", "--checkpoint", converted, "--out", out], capsys)[0] == 0
    out.rename(tmp_path / "export.previous-abc123")
    (tmp_path / "export.incomplete-def456").mkdir()
    rc, err = _run(["to-hf", "--checkpoint", converted, "--out", tmp_path / "other"], capsys)
    assert rc == 0 and "export." not in err  # only leftovers of the same name are reported
    rc, err = _run(["to-hf", "--checkpoint", converted, "--out", out], capsys)
    assert rc == 0
    notes = [line for line in err.splitlines() if line.startswith("note:")]
    assert any("export.previous-abc123" in n and "interrupted --force" in n for n in notes), err
    assert any("export.incomplete-def456" in n and "interrupted" in n for n in notes), err


def test_to_hf_never_writes_into_a_workdir_or_its_checkpoint(converted, tmp_path, capsys):
    before = _snapshot(converted)
    for out in (converted, converted / "checkpoints"):
        rc, err = _run(["to-hf", "--checkpoint", converted, "--out", out, "--force"], capsys)
        assert rc == 2 and str(out) in _one_line_error(err)
    other = tmp_path / "wd"
    shutil.copytree(converted, other)
    rc, err = _run(["to-hf", "--checkpoint", converted, "--out", other, "--force"], capsys)
    assert rc == 2 and "checkpoints" in _one_line_error(err)
    assert _snapshot(converted) == before


def test_from_hf_force_never_replaces_a_training_run(hf_model, converted, tmp_path, capsys):
    _, src = hf_model
    wd = tmp_path / "wd"
    shutil.copytree(converted, wd)
    # a training run's step holds optimizer state beside params and meta
    shutil.copytree(wd / "checkpoints/0/params", wd / "checkpoints/0/opt_state")
    (wd / "metrics.jsonl").write_text('{"step": 1, "loss": 8.0}\n')
    before = _snapshot(wd)
    rc, err = _run(["from-hf", "--hf", src, "--out", wd, "--force"], capsys)
    assert rc == 2
    line = _one_line_error(err)
    assert str(wd) in line and "optimizer state" in line and "training run" in line
    assert _snapshot(wd) == before and _leftovers(wd / "checkpoints") == []


@pytest.mark.slow
def test_from_hf_force_replaces_an_earlier_conversion_only_once_complete(big, converted, tmp_path, capsys):
    hf_dir, _ = big
    out = tmp_path / "ck"
    shutil.copytree(converted, out)
    (out / "notes.txt").write_text("mine")
    before = _snapshot(out)
    # fails mid-way (the float16 overflow in layer 1): the earlier conversion is untouched
    rc, err = _run(["from-hf", "--hf", hf_dir, "--out", out, "--force", "--param-dtype", "float16"], capsys)
    assert rc == 2
    line = _one_line_error(err)
    assert "model.layers.1.mlp.down_proj.weight" in line and "--param-dtype bfloat16" in line
    assert _snapshot(out) == before and _leftovers(out / "checkpoints") == [] and _leftovers(out) == []
    # succeeds: replaced, and the other file in --out kept
    rc, err = _run(["from-hf", "--hf", hf_dir, "--out", out, "--force", "--param-dtype", "bfloat16"], capsys)
    assert rc == 0, err
    assert model_meta.read_meta(out).model_config.param_dtype == "bfloat16"
    assert sorted(p.name for p in out.iterdir()) == ["checkpoints", "notes.txt"] and (out / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["0"]
    # a conversion into a new directory that fails leaves no directory under that name
    rc, _ = _run(["from-hf", "--hf", hf_dir, "--out", tmp_path / "new", "--param-dtype", "float16"], capsys)
    assert rc == 2 and not (tmp_path / "new").exists() and _leftovers(tmp_path / "new") == []


@pytest.mark.slow
def test_sharded_safetensors_input_via_subprocess(tmp_path):
    model = make_hf_model(vocab_size=VOCAB)
    model.save_pretrained(tmp_path / "hf", max_shard_size="200KB")
    shards = sorted((tmp_path / "hf").glob("model-*.safetensors"))
    assert len(shards) >= 3 and (tmp_path / "hf" / "model.safetensors.index.json").is_file()
    p = subprocess.run([sys.executable, "-m", "easylemur.convert", "from-hf", "--hf", str(tmp_path / "hf"),
                        "--out", str(tmp_path / "ck")], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout.strip().splitlines()[-1])["checkpoint"].endswith("checkpoints/0")
    ids = _ids(1, 32, seed=5)
    ref = hf_logits(model, ids)
    ours = np.asarray(easylemur.load(tmp_path / "ck").logits(ids))
    assert np.abs(ours - ref).max() <= 1e-5 * np.abs(ref).max()


def test_pytorch_bin_input(tmp_path):
    model = make_hf_model(vocab_size=VOCAB)
    model.config.save_pretrained(tmp_path / "hf")
    torch.save(model.state_dict(), tmp_path / "hf" / "pytorch_model.bin")
    assert _run(["from-hf", "--hf", tmp_path / "hf", "--out", tmp_path / "ck"])[0] == 0
    assert _run(["to-hf", "--checkpoint", tmp_path / "ck", "--out", tmp_path / "out", "--dtype", "float32"])[0] == 0
    got = _tensors(tmp_path / "out")
    for name, t in model.state_dict().items():
        assert np.array_equal(got[name], t.numpy()), name


def test_small_max_shard_size_gives_several_shards_transformers_loads(converted, hf_model, tmp_path):
    from transformers import LlamaForCausalLM

    model, _ = hf_model
    out = tmp_path / "sharded"
    assert _run(["to-hf", "--checkpoint", converted, "--out", out, "--dtype", "float32", "--max-shard-size", "300KB"])[0] == 0
    shards = sorted(out.glob("model-*.safetensors"))
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(shards) >= 4 and {s.name for s in shards} == set(index["weight_map"].values())
    assert index["metadata"]["total_size"] == sum(t.nbytes for t in _tensors(out).values())
    # no shard is over the limit unless it holds a single bigger tensor
    for s in shards:
        header, _ = read_safetensors_header(s)
        names = [n for n in header if n != "__metadata__"]
        assert s.stat().st_size <= 300_000 + 4096 or len(names) == 1, (s.name, names)
    reloaded = LlamaForCausalLM.from_pretrained(out, dtype=torch.float32)
    ids = _ids(1, 16)
    assert np.array_equal(hf_logits(reloaded, ids), hf_logits(model, ids))


@pytest.mark.slow
def test_scanned_jax_checkpoint_exports_like_unscanned(hf_model, exported_f32, tmp_path):
    """Checkpoints the train loop writes hold jax.Arrays, possibly scanned (stacked `layers`):
    to-hf reads layer i as a slice and gives the same files."""
    import dataclasses

    import jax.numpy as jnp

    _, src = hf_model
    cfg = hf.read_hf_config(src)
    params = scan_params(hf.load_hf_params(src, cfg), cfg.num_layers)
    params = jax.tree.map(jnp.asarray, params)
    model_meta.save_params(tmp_path / "scanned", dataclasses.replace(cfg, scan_layers=True), params, DEFAULT_TOKENIZER_PATH)
    assert _run(["to-hf", "--checkpoint", tmp_path / "scanned", "--out", tmp_path / "out", "--dtype", "float32"])[0] == 0
    a, b = _tensors(exported_f32), _tensors(tmp_path / "out")
    assert sorted(a) == sorted(b) and all(_bitwise_equal(a[n], b[n]) for n in a)


@pytest.mark.slow
def test_tied_embeddings_round_trip(tmp_path):
    model = make_hf_model(vocab_size=VOCAB, tie_word_embeddings=True)
    model.save_pretrained(tmp_path / "hf")
    assert _run(["from-hf", "--hf", tmp_path / "hf", "--out", tmp_path / "ck"])[0] == 0
    assert _run(["to-hf", "--checkpoint", tmp_path / "ck", "--out", tmp_path / "out", "--dtype", "float32"])[0] == 0
    got = _tensors(tmp_path / "out")
    assert "lm_head.weight" not in got
    assert json.loads((tmp_path / "out" / "config.json").read_text())["tie_word_embeddings"] is True
    ids = _ids(1, 16)
    ours = np.asarray(easylemur.load(tmp_path / "out").logits(ids))
    ref = hf_logits(model, ids)
    assert np.abs(ours - ref).max() <= 1e-5 * np.abs(ref).max()


# ----------------------------------------------------------------------------- tokenizer


CODE_STRINGS = [
    "def f(x):\n\treturn x  +  1\n\n\n",
    "    if a == b:\n        print('héllo wörld 1234567')\n",
    "  leading spaces and trailing   ",
    "emoji 🦙 and CJK 代码 and\r\nwindows newlines",
    "{\"key\": [1, 2, 3]}\n#include <stdio.h>\nint main(){return 0;}",
    "",
    " ",
    "\n",
    "literal <|im_end|> inside text",
]
# (messages, the text HF's chat template renders for them)
CHATS = [
    ([{"role": "user", "content": "Write a function."}, {"role": "assistant", "content": "def f():\n    pass"}],
     "<s><|im_start|>user\nWrite a function.<|im_end|>\n<|im_start|>assistant\ndef f():\n    pass<|im_end|>\n"),
    ([{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "  spaced\n\tout  "},
      {"role": "assistant", "content": "ok"}, {"role": "user", "content": "more?"}],
     "<s><|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\n  spaced\n\tout  <|im_end|>\n"
     "<|im_start|>assistant\nok<|im_end|>\n<|im_start|>user\nmore?<|im_end|>\n"),
]


def test_auto_tokenizer_encodes_like_easylemur(converted, tmp_path):
    from transformers import AutoTokenizer

    from easylemur.chat.chatml import render_chat, render_prompt, render_text

    # the source has no chat template, so the checkpoint is no chat model: ChatML's template on request
    exported_f32 = tmp_path / "chatml"
    assert convert.main(["to-hf", "--checkpoint", str(converted), "--out", str(exported_f32), "--chat-template",
                         "chatml"]) == 0
    ours = Tokenizer.load(DEFAULT_TOKENIZER_PATH)
    theirs = AutoTokenizer.from_pretrained(exported_f32)
    assert theirs.is_fast and (exported_f32 / "tokenizer.json").is_file()
    for s in CODE_STRINGS:
        assert theirs(s, add_special_tokens=False)["input_ids"] == ours.encode(s), repr(s)
        assert theirs(s)["input_ids"] == [ours.bos_id] + ours.encode(s), repr(s)
        assert theirs.decode(ours.encode(s)) == ours.decode(ours.encode(s)), repr(s)
    # the text of BOS/EOS/UNK/pad is those tokens on both sides (docs/design.md "Literal special-token text")
    for s in ["x = '</s>'", "<p><s>old</s> new</p>", "<unk> <pad>", "a</s><|im_end|>b"]:
        assert theirs(s, add_special_tokens=False)["input_ids"] == ours.encode(s), repr(s)
    for msgs, expected in CHATS:
        text = theirs.apply_chat_template(msgs, tokenize=False)
        assert text == expected == theirs.bos_token + render_text(msgs)
        ids = theirs.apply_chat_template(msgs, tokenize=True, return_dict=False)
        assert list(ids) == render_chat(msgs, ours)[0]
        prompt = theirs.apply_chat_template(msgs, tokenize=True, add_generation_prompt=True, return_dict=False)
        assert list(prompt) == render_prompt(msgs, ours)
        assert theirs.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True).endswith("<|im_start|>assistant\n")
    gen = json.loads((exported_f32 / "generation_config.json").read_text())
    assert ours.im_end_id in gen["eos_token_id"] and ours.eos_id in gen["eos_token_id"]
    from transformers import GenerationConfig

    assert ours.im_end_id in GenerationConfig.from_pretrained(exported_f32).eos_token_id


# ----------------------------------------------------------------------------- errors


def _edit_config(d: Path, **changes):
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(changes)
    (d / "config.json").write_text(json.dumps(cfg))


@pytest.fixture
def hf_copy(hf_model, tmp_path):
    _, src = hf_model
    d = tmp_path / "hf"
    shutil.copytree(src, d)
    return d


def test_error_not_llama(hf_copy, tmp_path, capsys):
    _edit_config(hf_copy, model_type="gemma")
    rc, err = _run(["from-hf", "--hf", hf_copy, "--out", tmp_path / "ck"], capsys)
    assert rc == 2 and "model_type" in err and "gemma" in err and "llama" in err


@pytest.mark.parametrize("change, field, expected", [
    ({"hidden_size": None}, "hidden_size", "is missing; expected a positive integer"),
    ({"num_hidden_layers": "2"}, "num_hidden_layers", "is '2'; expected a positive integer"),
    ({"vocab_size": 0}, "vocab_size", "is 0; expected a positive integer"),
    ({"tie_word_embeddings": "false"}, "tie_word_embeddings", "is 'false'; expected true or false"),
    ({"rms_norm_eps": [1e-5]}, "rms_norm_eps", "expected a number"),
    ({"rope_parameters": {"rope_theta": 5e5, "rope_type": "llama3", "factor": 8.0}}, "rope_parameters.low_freq_factor",
     "is missing; expected a number"),
])
def test_error_config_field_missing_or_malformed(hf_copy, tmp_path, capsys, change, field, expected):
    cfg = json.loads((hf_copy / "config.json").read_text())
    cfg.update(change)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    (hf_copy / "config.json").write_text(json.dumps(cfg))
    rc, err = _run(["from-hf", "--hf", hf_copy, "--out", tmp_path / "ck"], capsys)
    assert rc == 2
    line = _one_line_error(err)
    assert line.startswith(f"error: {hf_copy / 'config.json'}: {field} ") and expected in line, line
    assert not (tmp_path / "ck").exists()


def test_error_config_not_json(hf_copy, tmp_path, capsys):
    (hf_copy / "config.json").write_text('{"model_type": "llama",\n "hidden_size": 64,,}')
    rc, err = _run(["from-hf", "--hf", hf_copy, "--out", tmp_path / "ck"], capsys)
    assert rc == 2
    line = _one_line_error(err)
    assert str(hf_copy / "config.json") in line and "not valid JSON" in line and "line 2" in line


def test_error_unsupported_rope_type(hf_copy, tmp_path, capsys):
    _edit_config(hf_copy, rope_parameters={"rope_theta": 1e4, "rope_type": "yarn", "factor": 2.0})
    rc, err = _run(["from-hf", "--hf", hf_copy, "--out", tmp_path / "ck"], capsys)
    assert rc == 2 and "rope_type" in err and "yarn" in err


def test_error_missing_shard(tmp_path, capsys):
    make_hf_model(vocab_size=VOCAB).save_pretrained(tmp_path / "hf", max_shard_size="200KB")
    victim = sorted((tmp_path / "hf").glob("model-*.safetensors"))[1]
    victim.unlink()
    rc, err = _run(["from-hf", "--hf", tmp_path / "hf", "--out", tmp_path / "ck"], capsys)
    assert rc == 2 and victim.name in err and "missing" in err


def test_error_shape_contradicts_config(hf_copy, tmp_path, capsys):
    _edit_config(hf_copy, num_key_value_heads=4)
    rc, err = _run(["from-hf", "--hf", hf_copy, "--out", tmp_path / "ck"], capsys)
    assert rc == 2 and "self_attn.k_proj.weight" in err and "(32, 64)" in err and "(64, 64)" in err
    assert not (tmp_path / "ck").exists(), "nothing is written before every tensor checks out"


def test_error_truncated_safetensors(hf_copy, tmp_path, capsys):
    f = hf_copy / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-1000])
    rc, err = _run(["from-hf", "--hf", hf_copy, "--out", tmp_path / "ck"], capsys)
    assert rc == 2 and "model.safetensors" in err


def test_error_messages_for_bad_cli_values(converted, tmp_path, capsys):
    rc, err = _run(["to-hf", "--checkpoint", tmp_path / "nowhere", "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "nowhere" in err
    rc, err = _run(["to-hf", "--checkpoint", converted, "--out", tmp_path / "o", "--max-shard-size", "lots"], capsys)
    assert rc == 2 and "'lots'" in err
    rc, err = _run(["to-hf", "--checkpoint", converted, "--step", "7", "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "step 7" in err
    rc, err = _run(["from-hf", "--hf", tmp_path / "nothing", "--out", tmp_path / "o"], capsys)
    assert rc == 2 and "nothing" in err
    # an existing checkpoint is not silently replaced
    rc, err = _run(["from-hf", "--hf", converted, "--out", converted], capsys)
    assert rc == 2
    with pytest.raises(SystemExit):
        convert.main(["to-hf", "--checkpoint", str(converted), "--out", str(tmp_path), "--dtype", "int8"])
    assert "int8" in capsys.readouterr().err


def test_existing_output_needs_force(hf_model, converted, capsys):
    _, src = hf_model
    rc, err = _run(["from-hf", "--hf", src, "--out", converted], capsys)
    assert rc == 2 and "--force" in err and "steps 0" in err


@pytest.mark.slow
def test_cli_errors_are_one_line_and_debug_shows_the_traceback(tmp_path):
    """Through the real entry point: stderr is the one line, exit 2; --debug adds the traceback."""
    argv = [sys.executable, "-m", "easylemur.convert", "to-hf", "--checkpoint", str(tmp_path / "nowhere"),
            "--out", str(tmp_path / "o")]
    p = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2 and "nowhere" in _one_line_error(p.stderr) and p.stdout == ""
    p = subprocess.run(argv + ["--debug"], cwd=ROOT, capture_output=True, text=True)
    assert p.returncode == 2 and "Traceback" in p.stderr and p.stderr.strip().splitlines()[-1].startswith("error: ")
    assert not (tmp_path / "o").exists()


def test_help_for_each_subcommand():
    for cmd in ("from-hf", "to-hf"):
        with pytest.raises(SystemExit) as e:
            convert.main([cmd, "--help"])
        assert e.value.code == 0
