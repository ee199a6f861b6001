"""The train loop: exact resume after SIGKILL, mesh and multi-process equivalence, gradient
accumulation, metrics and TensorBoard, config errors, NaN guard. (Run safety beyond SIGKILL:
tests/test_run_safety.py.)"""

import dataclasses
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from easylemur.config import load_config
from easylemur.ops.loss import token_loss_sum
from easylemur.model.config import PRESETS
from easylemur.model.llama import init_params
from easylemur.train.optim import make_optimizer
from easylemur.train.step import make_train_step
from train_run import REFERENCE, ROOT, cmd, env, free_port, losses, main, run



@pytest.mark.slow
def test_sigkill_resume_is_bit_exact(tmp_path, reference_run):
    steps = REFERENCE
    whole = losses(reference_run)
    assert sorted(whole) == list(range(1, 31))

    killed = tmp_path / "killed"
    proc = subprocess.Popen(cmd(killed, steps), cwd=ROOT, env=env(1), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 300
    while not (killed / "checkpoints" / "12").is_dir():
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.time() < deadline
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    p = run(killed, steps)
    assert "resumed from" in p.stdout
    resumed = losses(killed)
    assert sorted(resumed) == list(range(1, 31))
    assert resumed == whole  # bit for bit, float32 on CPU


@pytest.mark.slow
def test_mesh_222_matches_one_device(tmp_path):
    o = ["train.steps=5", "checkpoint.every=100"]
    run(tmp_path / "one", o, devices=1)
    run(tmp_path / "eight", o + ["mesh=data:2,fsdp:2,tensor:2"], devices=8)
    a, b = losses(tmp_path / "one"), losses(tmp_path / "eight")
    assert sorted(a) == sorted(b) == [1, 2, 3, 4, 5]
    # different reduction orders only: stated tolerance 1e-5 relative
    for s in a:
        assert abs(a[s] - b[s]) <= 1e-5 * abs(a[s]), (s, a[s], b[s])


@pytest.mark.slow
def test_two_processes_match_one(tmp_path):
    o = ["train.steps=4", "checkpoint.every=2", "data.shards=2"]
    run(tmp_path / "single", o, devices=2)
    port = free_port()
    procs = [
        subprocess.Popen(
            cmd(tmp_path / "multi", o + [f"distributed.coordinator_address=127.0.0.1:{port}",
                                          "distributed.num_processes=2", f"distributed.process_id={i}"]),
            cwd=ROOT, env=env(1), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for i in range(2)
    ]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs[0][-3000:] + outs[1][-3000:]
    a, b = losses(tmp_path / "single"), losses(tmp_path / "multi")
    assert sorted(a) == sorted(b) == [1, 2, 3, 4]
    for s in a:
        assert abs(a[s] - b[s]) <= 1e-5 * abs(a[s]), (s, a[s], b[s])
    assert (tmp_path / "multi" / "checkpoints" / "4").is_dir()
    # the per-source token counters are summed over both processes' streams
    counts = [[{k: v for k, v in json.loads(l).items() if k.startswith("tokens/")}
               for l in (tmp_path / run / "metrics.jsonl").read_text().splitlines()] for run in ("single", "multi")]
    assert counts[0] == counts[1] and counts[0][-1]["tokens/code"] > 0


@pytest.mark.slow
def test_grad_accumulation_equals_one_batch():
    cfg = dataclasses.replace(PRESETS["tiny"], vocab_size=257, num_layers=2)
    params = init_params(cfg, jax.random.PRNGKey(0))
    opt = load_config(None).optimizer
    tx, _ = make_optimizer(opt, 10)
    rng = np.random.default_rng(0)
    B, T = 8, 32
    # rows with very different numbers of trained tokens: a per-row mean would differ
    mask = (rng.random((B, T)) < np.linspace(0.05, 1.0, B)[:, None]).astype(np.int32)
    batch = {
        "input_ids": jnp.asarray(rng.integers(0, 257, (B, T)), jnp.int32),
        "loss_mask": jnp.asarray(mask),
        "segment_ids": jnp.ones((B, T), jnp.int32),
        "positions": jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T)),
        "source": jnp.zeros((B,), jnp.int32),
    }
    state = {"params": params, "opt_state": tx.init(params)}
    one, m1 = jax.jit(make_train_step(cfg, None, tx, 1, 0.0))(state, batch)
    four, m4 = jax.jit(make_train_step(cfg, None, tx, 4, 0.0))(state, batch)
    np.testing.assert_allclose(m1["loss"], m4["loss"], rtol=1e-6)
    assert float(m1["trained_tokens"]) == float(m4["trained_tokens"]) == float(mask[:, 1:].sum())
    np.testing.assert_allclose(m1["grad_norm"], m4["grad_norm"], rtol=1e-5)
    for a, b in zip(jax.tree.leaves(one["params"]), jax.tree.leaves(four["params"])):
        np.testing.assert_allclose(a, b, atol=1e-6, rtol=1e-5)


@pytest.mark.slow
def test_chat_loss_reaches_only_assistant_tokens(tmp_path):
    from easylemur.data.pipeline import make_pipeline
    from easylemur.tokenizer.spm import Tokenizer

    convs = [
        {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add 2 and 3."},
                      {"role": "assistant", "content": "5"}, {"role": "user", "content": "In Python?"},
                      {"role": "assistant", "content": "print(2 + 3)"}]},
        {"conversations": [{"from": "human", "value": "Say hi."}, {"from": "gpt", "value": "Hi there!"}]},
    ]
    (tmp_path / "chat.jsonl").write_text("".join(json.dumps(c) + "\n" for c in convs))
    cfg = load_config("configs/tiny_chat.py", ["data.prefetch=0", f"data.sources.chat.path={tmp_path / 'chat.jsonl'}"])
    tok = Tokenizer.load(None)
    batch = next(make_pipeline(cfg.data, tok, global_batch_size=2, seed=0, shuffle=False))
    b = {k: jnp.asarray(v) for k, v in batch.items()}
    logits = jnp.zeros(b["input_ids"].shape + (tok.vocab_size,), jnp.float32)
    g = jax.grad(lambda l: token_loss_sum(l, b)[0])(logits)
    reached = np.asarray(jnp.abs(g).sum(-1) > 0)  # [B, T]: positions whose next-token prediction is trained
    ids = np.asarray(batch["input_ids"])
    trained = "".join(tok.decode(ids[r, 1:][reached[r, :-1]].tolist()) for r in range(ids.shape[0]))
    # each assistant message + <|im_end|>\n, and nothing else (conversations repeat to fill rows)
    units = ["5<|im_end|>\nprint(2 + 3)<|im_end|>\n", "Hi there!<|im_end|>\n"]
    rest, seen = trained, set()
    while rest:
        unit = next((u for u in units if rest.startswith(u)), None)
        assert unit is not None, f"untrained text reached the loss: {rest[:80]!r}"
        seen.add(unit)
        rest = rest[len(unit):]
    assert seen == set(units)


@pytest.mark.slow
def test_metrics_fields_eval_and_tensorboard(tmp_path):
    w = tmp_path / "run"
    run(w, ["train.steps=4", "checkpoint.every=100", "eval.every=2", "eval.batches=2",
             "log.every=2"] , config=str(_eval_config(tmp_path)))
    rows = [json.loads(l) for l in (w / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4]
    for r in rows:
        for k in ("step", "loss", "learning_rate", "grad_norm", "tokens_per_second", "mfu", "tokens/code", "tokens/text",
                  "eval_loss"):
            assert k in r, k
        assert np.isfinite(r["loss"]) and np.isfinite(r["eval_loss"])
    assert rows[1]["tokens/code"] > rows[0]["tokens/code"] > 0
    # text rows are packed full: the counters hold exactly the tokens of the steps logged so far
    assert [r["tokens/code"] + r["tokens/text"] for r in rows] == [2 * 8 * 64, 4 * 8 * 64]
    assert json.loads((w / "config.json").read_text())["train"]["steps"] == 4

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(w / "tb"))
    acc.Reload()
    losses = [(e.step, e.value) for e in acc.Scalars("loss")]
    assert losses == [(r["step"], pytest.approx(r["loss"], rel=1e-6)) for r in rows]


def _eval_config(tmp_path) -> Path:
    f = tmp_path / "with_eval.py"
    f.write_text(
        "import importlib.util, pathlib\n"
        f"spec = importlib.util.spec_from_file_location('base', {str(ROOT / 'configs/tiny_pretrain.py')!r})\n"
        "base = importlib.util.module_from_spec(spec); spec.loader.exec_module(base)\n"
        "def get_config():\n"
        "    c = base.get_config()\n"
        "    c.data.eval_sources = {'text': dict(c.data.sources.text)}\n"
        "    return c\n"
    )
    return f


def test_unknown_config_key_fails_with_its_name(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(capsys, tmp_path / "x", ["train.stepz=3"])
    assert e.value.code == 2 and "train.stepz" in capsys.readouterr().err


@pytest.mark.slow
def test_nan_loss_stops_with_message(tmp_path, capsys):
    rc, out, err = main(capsys, tmp_path / "nan", ["train.steps=6", "checkpoint.every=1", "optimizer.lr=1e30",
                                                    "optimizer.clip_norm=0.0", "optimizer.warmup_steps=0",
                                                    "optimizer.schedule=constant"])
    assert rc == 1, out[-2000:] + err[-2000:]
    # one line: the non-finite step, and the newest checkpoint that exists and verifies
    line = err.strip().splitlines()[-1]
    assert line.startswith("error: step 2: ") and "stopping" in line, err[-2000:]
    assert f"The last good state is checkpoint step 1 ({tmp_path / 'nan' / 'checkpoints' / '1'}, verified)" in line


@pytest.mark.slow
def test_init_from_checkpoint_into_scanned_layout_and_grown_vocab(tmp_path):
    """init.from an HF model (vocab smaller than the tokenizer's): converted with from-hf, then
    trained unscanned and scanned (restacked on device) with the vocabulary grown: same losses."""
    from easylemur.convert import cli as convert
    from hf_models import make_hf_model

    make_hf_model(vocab_size=4000, hidden_size=64, intermediate_size=128, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=512).save_pretrained(tmp_path / "hf")
    assert convert.main(["from-hf", "--hf", str(tmp_path / "hf"), "--out", str(tmp_path / "ckpt")]) in (0, None)
    o = ["train.steps=2", "checkpoint.every=100", f"init.from={tmp_path / 'ckpt'}", "train.extend_vocab=true"]
    # a source without a tokenizer is an error, not a silent switch to the shipped one
    p = run(tmp_path / "no_tok", o, check=False)
    assert p.returncode == 2 and "set data.tokenizer" in p.stderr, p.stderr[-2000:]
    o.append(f"data.tokenizer={ROOT / 'tokenizer/easylemur_bpe.model'}")
    runs = {}
    for scan in ("false", "true"):
        p = run(tmp_path / f"scan_{scan}", o + [f"model.scan_layers={scan}"])
        assert "vocabulary grown from 4000 to 4096" in p.stdout
        runs[scan] = losses(tmp_path / f"scan_{scan}")
    for s in (1, 2):
        assert abs(runs["false"][s] - runs["true"][s]) <= 1e-5 * runs["false"][s]


def test_explicit_model_keys_apply_over_init_from(tmp_path):
    from easylemur.config import ConfigError
    from easylemur.train.start import resolve_run
    from easylemur.tokenizer.spm import DEFAULT_TOKENIZER_PATH
    from hf_models import make_hf_model

    make_hf_model(vocab_size=4096).save_pretrained(tmp_path)
    base = [f"init.from={tmp_path}", f"data.tokenizer={DEFAULT_TOKENIZER_PATH}", "model.dtype=bfloat16"]
    cfg = resolve_run(load_config("configs/tiny_pretrain.py", base + ["model.rope_theta=1e6",
                                                                     "model.max_position_embeddings=4096"])).model_cfg
    assert (cfg.rope_theta, cfg.max_position_embeddings, cfg.hidden_size, cfg.dtype) == (1e6, 4096, 64, "bfloat16")
    with pytest.raises(ConfigError, match=r"model\.hidden_size=128 contradicts init\.from"):
        resolve_run(load_config("configs/tiny_pretrain.py", base + ["model.hidden_size=128"]))


@pytest.mark.slow
def test_tensor_axis_across_processes_is_refused(tmp_path):
    port = free_port()
    o = ["train.steps=2", "mesh=data:1,fsdp:1,tensor:2", f"distributed.coordinator_address=127.0.0.1:{port}",
         "distributed.num_processes=2"]
    procs = [subprocess.Popen(cmd(tmp_path / "w", o + [f"distributed.process_id={i}"]), cwd=ROOT, env=env(1),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [2, 2], outs
    assert all("keep the tensor axis within a host" in out for out in outs)
