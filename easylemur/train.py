"""THE train loop, for continued pre-training and chat fine-tuning alike.

    python -m easylemur.train --config configs/tiny_pretrain.py [--config.train.steps=50 ...]

Reads top to bottom: config -> mesh -> tokenizer, model config, params, optimizer, data ->
(resume from the newest checkpoint) -> jitted step -> metrics, checkpoints.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
import optax
from ml_collections import ConfigDict

from easylemur import checkpoint, hf, sharding
from easylemur.config import ConfigError, load_config, model_config, to_json
from easylemur.loss import head_loss_sum
from easylemur.metrics import MetricsWriter, flops_per_token, peak_flops
from easylemur.models.llama import Llama, LlamaConfig, init_params, param_shardings
from easylemur.optim import make_optimizer

# LlamaConfig fields that say how to compute, not what the model is: a run config sets them
# even when the architecture comes from init.from.
COMPUTE_FIELDS = ("dtype", "param_dtype", "scan_layers", "remat", "attention", "attn_block_size")
SHAPE_FIELDS = ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                "head_dim", "tie_word_embeddings")


class TrainingError(RuntimeError):
    pass


# ----------------------------------------------------------------------------- the step


def lm_head_kernel(params: dict, cfg: LlamaConfig) -> jax.Array:
    """[d, V]: the LM head, or the transposed embedding when tied."""
    return params["embed_tokens"]["embedding"].T if cfg.tie_word_embeddings else params["lm_head"]["kernel"]


def make_train_step(model_cfg: LlamaConfig, mesh, tx: optax.GradientTransformation, grad_accum: int, z_loss: float,
                    loss_chunk: int = 0) -> Callable:
    """(state, batch) -> (state, metrics). state = {"params", "opt_state"}. The loss is the
    mean over every trained token of the global batch, across micro-batches too: token-loss
    sums and token counts are accumulated, and divided once."""
    loss_sum = _loss_sum_fn(model_cfg, mesh, z_loss, loss_chunk)

    grad_fn = jax.value_and_grad(loss_sum, has_aux=True)

    def step(state, batch):
        params = state["params"]
        if grad_accum == 1:
            (lsum, n), grads = grad_fn(params, batch)
        else:
            micro = _micro_batches(batch, grad_accum)

            def body(carry, mb):
                g_acc, l_acc, n_acc = carry
                mb = {k: sharding.constrain(v, ("batch",) + (None,) * (v.ndim - 1), mesh) for k, v in mb.items()}
                (l, n), g = grad_fn(params, mb)
                return (jax.tree.map(jnp.add, g_acc, g), l_acc + l, n_acc + n), None

            zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
            (grads, lsum, n), _ = jax.lax.scan(body, (zeros, jnp.float32(0), jnp.float32(0)), micro)
        denom = jnp.maximum(n, 1.0)
        grads = jax.tree.map(lambda g, p: (g / denom).astype(p.dtype), grads, params)
        loss = lsum / denom
        grad_norm = optax.tree.norm(grads)
        finite = jnp.isfinite(loss) & jnp.isfinite(grad_norm)
        updates, new_opt = tx.update(grads, state["opt_state"], params)
        new_params = optax.apply_updates(params, updates)
        # A non-finite step changes nothing; the host decides to stop or go on. (cond, not a
        # where per leaf: picking buffers costs nothing, a select pass over the state does.)
        new_state = jax.lax.cond(
            finite, lambda: {"params": new_params, "opt_state": new_opt},
            lambda: {"params": params, "opt_state": state["opt_state"]},
        )
        metrics = {"loss": loss, "grad_norm": grad_norm, "finite": finite, "trained_tokens": n}
        return new_state, metrics

    return step


def _loss_sum_fn(model_cfg: LlamaConfig, mesh, z_loss: float, loss_chunk: int) -> Callable:
    """(params, batch) -> (sum of token losses, trained tokens): the one loss, through the model."""
    model = Llama(model_cfg, mesh)
    compute = jnp.dtype(model_cfg.dtype)

    def loss_sum(params, mb):
        # Mixed precision: cast the sharded float32 params once, so FSDP all-gathers move
        # compute-dtype weights (half the bytes in bf16); gradients flow back to float32.
        params = jax.tree.map(lambda p: p.astype(compute) if jnp.issubdtype(p.dtype, jnp.floating) else p, params)
        hidden, _ = model.apply({"params": params}, mb["input_ids"], mb["positions"], mb["segment_ids"], return_hidden=True)
        return head_loss_sum(hidden, lm_head_kernel(params, model_cfg), mb, z_loss, loss_chunk)

    return loss_sum


def _micro_batches(batch: dict, n: int) -> dict:
    """[B, ...] -> [n, B/n, ...]; row r goes to micro-batch r % n, so every device holds rows
    of every micro-batch."""
    return {
        k: v.reshape(v.shape[0] // n, n, *v.shape[1:]).swapaxes(0, 1) for k, v in batch.items() if k != "source"
    }


def make_eval_step(model_cfg: LlamaConfig, mesh, grad_accum: int = 1, loss_chunk: int = 0) -> Callable:
    """(params, batch) -> (loss sum, trained tokens), in the train step's micro-batches and
    loss chunks, so an eval batch fits wherever a train batch does."""
    loss_sum = _loss_sum_fn(model_cfg, mesh, 0.0, loss_chunk)

    def step(params, batch):
        if grad_accum == 1:
            return loss_sum(params, batch)
        sums, counts = jax.lax.map(lambda mb: loss_sum(params, mb), _micro_batches(batch, grad_accum))
        return jnp.sum(sums), jnp.sum(counts)

    return step


def source_tokens(batch: dict, num_sources: int) -> jax.Array:
    """Non-padding tokens per mixture source in this batch."""
    per_row = jnp.sum(batch["segment_ids"] > 0, axis=1).astype(jnp.int32)
    return jnp.zeros((num_sources,), jnp.int32).at[batch["source"]].add(per_row)


# ----------------------------------------------------------------------------- setup pieces


def load_tokenizer(cfg: ConfigDict):
    from easylemur.tokenizer import Tokenizer

    if cfg.data.tokenizer:
        return Tokenizer.load(cfg.data.tokenizer)
    src = cfg.init["from"]
    if src:
        if hf.is_hf_dir(src):
            if (Path(src) / "tokenizer.model").is_file():
                return Tokenizer.load(Path(src) / "tokenizer.model")
            # training on the shipped tokenizer's ids would silently scramble a real model
            raise ConfigError(
                f"init.from={src} has no tokenizer.model; set data.tokenizer to the sentencepiece model it was trained with"
            )
        else:
            d, s = checkpoint.resolve(src)
            mngr = checkpoint.manager(d, async_save=False)
            tok = checkpoint.tokenizer_from_json(checkpoint.restore_meta(mngr, s).get("tokenizer"))
            mngr.close()
            if tok is not None:
                return Tokenizer.load(tok)
            raise ConfigError(f"init.from={src} holds no tokenizer; set data.tokenizer")
    return Tokenizer.load(None)


def source_model_config(src: str) -> LlamaConfig:
    if hf.is_hf_dir(src):
        return hf.read_hf_config(src)
    d, s = checkpoint.resolve(src)
    mngr = checkpoint.manager(d, async_save=False)
    meta = checkpoint.restore_meta(mngr, s)
    mngr.close()
    return checkpoint.model_config_from_json(meta["model"])


def resolve_model_config(cfg: ConfigDict, tokenizer) -> LlamaConfig:
    """The architecture from init.from when set (else the preset), compute options from the
    run config; from scratch, the vocabulary follows the tokenizer unless model.vocab_size is set."""
    run = model_config(cfg)
    src = cfg.init["from"]
    if src:
        arch = source_model_config(src)
        # what the run config sets explicitly wins (e.g. rope_theta / rope_scaling /
        # max_position_embeddings for long-context training); shapes must agree with the source
        explicit = {k: getattr(run, k) for k in cfg.model if k != "preset"}
        for k in SHAPE_FIELDS:
            if k in explicit and explicit[k] != getattr(arch, k):
                raise ConfigError(
                    f"model.{k}={explicit[k]} contradicts init.from={src} ({k}={getattr(arch, k)}); "
                    f"drop the override (vocabulary growth: train.extend_vocab)"
                )
        return dataclasses.replace(arch, **{**{k: getattr(run, k) for k in COMPUTE_FIELDS}, **explicit})
    if "vocab_size" not in cfg.model:
        run = dataclasses.replace(run, vocab_size=tokenizer.vocab_size)
    return run


def put_global(host_tree: Any, shardings: Any) -> Any:
    """Host numpy params (the same on every process) -> global arrays in `shardings`."""
    return jax.tree.map(
        lambda x, s: jax.make_array_from_callback(x.shape, s, lambda idx: np.asarray(x[idx])), host_tree, shardings
    )


def initial_params(cfg: ConfigDict, model_cfg: LlamaConfig, mesh, shardings, tokenizer) -> Any:
    """Random (sharded) params, or the params of init.from in the run's layout and shardings.

    An easylemur checkpoint is restored straight into shards (no host ever holds the whole
    model) and restacked on device when its layout (scan_layers) differs from the run's. An HF
    directory is read on each host: convert big models with `convert from-hf` first."""
    src = cfg.init["from"]
    if not src:
        return init_params(model_cfg, jax.random.PRNGKey(cfg.seed), mesh)
    pdt = jnp.dtype(model_cfg.param_dtype)
    if hf.is_hf_dir(src):
        host = hf.load_hf_params(src, hf.read_hf_config(src), dtype=pdt)
        if model_cfg.scan_layers:
            host = hf.scan_params(host, model_cfg.num_layers)
        return put_global(host, shardings)
    saved = source_model_config(src)
    layout = dataclasses.replace(model_cfg, scan_layers=saved.scan_layers, vocab_size=saved.vocab_size)
    _, params, _ = checkpoint.load_params(
        src, shardings=param_shardings(dataclasses.replace(layout, param_dtype=saved.param_dtype), mesh),
        param_dtype=model_cfg.param_dtype,
    )
    if saved.scan_layers != model_cfg.scan_layers:
        restack = hf.scan_params if model_cfg.scan_layers else hf.unscan_params
        target = param_shardings(dataclasses.replace(layout, scan_layers=model_cfg.scan_layers), mesh)
        params = jax.jit(lambda p: restack(p, model_cfg.num_layers, xp=jnp), out_shardings=target)(params)
    return params


def check_vocab(model_cfg: LlamaConfig, tokenizer) -> None:
    if tokenizer.vocab_size > model_cfg.vocab_size:
        raise ConfigError(
            f"the tokenizer has {tokenizer.vocab_size} pieces but the model's vocab_size is "
            f"{model_cfg.vocab_size}; set train.extend_vocab=True to grow the embeddings"
        )


def abstract_state(params_abstract: Any, tx: optax.GradientTransformation, param_sh: Any, mesh) -> tuple[Any, Any]:
    """Abstract {"params", "opt_state"} and matching shardings: optimizer moments are sharded
    like the parameter they belong to, scalars (counts) replicated."""
    opt_abstract = jax.eval_shape(tx.init, params_abstract)
    replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
    opt_sh = optax.tree_map_params(
        tx, lambda _, s: s, opt_abstract, param_sh, transform_non_params=lambda _: replicated,
        is_leaf=lambda x: isinstance(x, jax.ShapeDtypeStruct),
    )
    state_sh = {"params": param_sh, "opt_state": opt_sh}
    state_abs = jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
        {"params": params_abstract, "opt_state": opt_abstract}, state_sh,
    )
    return state_abs, state_sh


# ----------------------------------------------------------------------------- the run


def train(cfg: ConfigDict) -> dict:
    d = cfg.distributed
    sharding.initialize_distributed(d.coordinator_address, d.num_processes, d.process_id)
    if not cfg.workdir:
        raise ConfigError("workdir is empty; set --config.workdir=DIR")
    workdir = checkpoint.as_path(cfg.workdir)
    is_main = jax.process_index() == 0
    mesh = sharding.make_mesh(cfg.mesh)
    mngr = checkpoint.manager(workdir / "checkpoints", keep=cfg.checkpoint.keep)
    resume_step = mngr.latest_step()

    # -- tokenizer and model config: a resumed run takes its own, as saved
    from easylemur.tokenizer import Tokenizer

    if resume_step is not None:
        meta = checkpoint.restore_meta(mngr, resume_step)
        tokenizer = Tokenizer.load(checkpoint.tokenizer_from_json(meta["tokenizer"]))
        # the saved architecture, with this run's compute choices (e.g. remat on after an OOM);
        # param dtype and layer layout stay the saved ones: the state is restored as stored
        saved = checkpoint.model_config_from_json(meta["model"])
        run = model_config(cfg)
        kept = ("param_dtype", "scan_layers")
        model_cfg = dataclasses.replace(saved, **{k: getattr(run, k) for k in COMPUTE_FIELDS if k not in kept})
    else:
        meta = None
        tokenizer = load_tokenizer(cfg)
        model_cfg = resolve_model_config(cfg, tokenizer)
        if not cfg.train.extend_vocab:  # else grown below, once the source params are loaded
            check_vocab(model_cfg, tokenizer)

    tx, lr_schedule = make_optimizer(cfg.optimizer, cfg.train.steps)
    param_sh = param_shardings(model_cfg, mesh)

    if resume_step is not None:
        params_abs = checkpoint.abstract_params(model_cfg, param_sh)
        state_abs, state_sh = abstract_state(params_abs, tx, param_sh, mesh)
        params, opt_state, meta = checkpoint.restore(mngr, resume_step, state_abs["params"], state_abs["opt_state"])
        state = {"params": params, "opt_state": opt_state}
        start_step = resume_step
        print(f"resumed from {workdir / 'checkpoints' / str(resume_step)}", flush=True)
    else:
        params = initial_params(cfg, model_cfg, mesh, param_sh, tokenizer)
        if tokenizer.vocab_size > model_cfg.vocab_size:
            params, model_cfg, param_sh = _grow_vocab(params, model_cfg, tokenizer, mesh)
        params_abs = jax.tree.map(lambda p: jax.ShapeDtypeStruct(p.shape, p.dtype), params)
        state_abs, state_sh = abstract_state(params_abs, tx, param_sh, mesh)
        opt_state = jax.jit(tx.init, out_shardings=state_sh["opt_state"])(params)
        state = {"params": params, "opt_state": opt_state}
        start_step = 0

    if is_main:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "config.json").write_text(to_json(cfg))

    # -- data
    data = DataShards(cfg, tokenizer, mesh)
    if meta is not None and meta.get("data_state") is not None:
        data.set_state(meta["data_state"])
    names = list(data.source_names)
    tokens_seen = {n: int((meta or {}).get("tokens", {}).get(n, 0)) for n in names}
    nan_skips = int((meta or {}).get("nan_skips", 0))

    # -- compiled steps
    step_fn = jax.jit(
        make_train_step(model_cfg, mesh, tx, cfg.train.grad_accum, cfg.train.z_loss, cfg.train.loss_chunk),
        in_shardings=(state_sh, None), out_shardings=(state_sh, None), donate_argnums=(0,),
    )
    count_fn = jax.jit(lambda b: source_tokens(b, len(names)))
    eval_fn = jax.jit(make_eval_step(model_cfg, mesh, cfg.train.grad_accum, cfg.train.loss_chunk))

    seq_len = cfg.data.seq_len
    flops_tok = flops_per_token(model_cfg, seq_len)
    peak, peak_how = peak_flops()
    tokens_per_step = cfg.train.batch_size * seq_len
    writer = MetricsWriter(workdir, cfg.log.wandb_project, cfg.to_dict(), resume_step=start_step)
    if is_main:
        print(
            f"model {model_cfg.num_params() / 1e6:.2f}M params, {jax.device_count()} devices, mesh {dict(mesh.shape)}, "
            f"peak {peak:.3g} FLOP/s ({peak_how}), steps {start_step}->{cfg.train.steps}", flush=True,
        )

    def save(step: int, force: bool = False) -> None:
        meta_out = {
            "step": step, "model": checkpoint.model_config_to_json(model_cfg),
            "tokenizer": checkpoint.tokenizer_to_json(tokenizer.model_path),
            "rng": {"seed": cfg.seed}, "data_state": data.get_state(), "tokens": dict(tokens_seen),
            "nan_skips": nan_skips, "config": cfg.to_dict(),
        }
        checkpoint.save(mngr, step, state["params"], meta_out, state["opt_state"], force=force)

    progress = _progress(start_step, cfg.train.steps, is_main)
    window_t, window_steps = None, 0
    last: dict = {}
    pending = None  # metrics of the step before, read after the next one is dispatched

    def finish(step: int, m: dict) -> None:
        nonlocal nan_skips, window_t, window_steps, last
        m = jax.device_get(m)
        for n, c in zip(names, m["counts"]):
            tokens_seen[n] += int(c)
        if not bool(m["finite"]):
            if cfg.train.nan_policy == "stop":
                raise TrainingError(
                    f"step {step}: loss is {float(m['loss'])}, grad norm {float(m['grad_norm'])}; stopping. "
                    f"The step was not applied; the newest checkpoint in {workdir / 'checkpoints'} is the last good state."
                )
            nan_skips += 1
            print(f"step {step}: non-finite loss, step skipped ({nan_skips} so far)", flush=True)
        now = time.perf_counter()
        if window_t is None:  # the first step includes compilation: time from its end
            window_t = now
        else:
            window_steps += 1
        last = {"loss": float(m["loss"]), "grad_norm": float(m["grad_norm"])}
        eval_due = bool(cfg.eval.every) and step % cfg.eval.every == 0
        if step % cfg.log.every == 0 or step == cfg.train.steps or eval_due:
            dt = now - window_t
            tps = tokens_per_step * window_steps / dt if window_steps and dt > 0 else float("nan")
            mfu = tps * flops_tok / peak if math.isfinite(tps) else float("nan")
            record = {
                "step": step, "loss": last["loss"], "learning_rate": float(lr_schedule(step)),
                "grad_norm": last["grad_norm"], "trained_tokens": int(m["trained_tokens"]),
                "tokens_per_second": tps, "mfu": mfu, "nan_skips": nan_skips,
                **{f"tokens/{n}": tokens_seen[n] for n in names},
            }
            if eval_due:
                record["eval_loss"] = evaluate(cfg, tokenizer, mesh, eval_fn, state["params"])
            writer.write(record)
            progress.set_postfix_str(f"loss {last['loss']:.4f} tok/s {tps:,.0f} mfu {mfu:.1%}", refresh=False)
            window_t, window_steps = time.perf_counter(), 0
        progress.update(1)

    step = start_step
    try:
        while step < cfg.train.steps:
            batch = next(data)
            state, m = step_fn(state, batch)
            m["counts"] = count_fn(batch)
            step += 1
            if pending is not None:
                finish(*pending)
            pending = (step, m)
            preempted = mngr.reached_preemption(step)
            eval_due = bool(cfg.eval.every) and step % cfg.eval.every == 0
            if eval_due:  # evaluate these weights, before the next step replaces them
                finish(*pending)
                pending = None
            if step % cfg.checkpoint.every == 0 or step == cfg.train.steps or preempted:
                if pending is not None:
                    finish(*pending)
                    pending = None
                save(step, force=step == cfg.train.steps or preempted)
            if preempted:
                print(f"preempted: saved step {step}, stopping", flush=True)
                break
        if pending is not None:
            finish(*pending)
    finally:
        mngr.wait_until_finished()
        mngr.close()
        writer.close()
        progress.close()
        data.close()
    return {"step": step, **last, "tokens": tokens_seen}


class DataShards:
    """The global batch as `data.shards` independent data streams (default: one per process),
    row block s of every batch from stream s. Each process reads only its streams; with
    data.shards fixed, the global batches are the same for any process count that divides it.
    State: every stream's, gathered so process 0 saves all of them."""

    def __init__(self, cfg: ConfigDict, tokenizer, mesh):
        from easylemur.data.pipeline import make_pipeline

        P, p = jax.process_count(), jax.process_index()
        S = cfg.data.shards or P
        if S % P:
            raise ConfigError(f"data.shards={S} must be a multiple of the process count {P}")
        self.mesh, self.num_shards = mesh, S
        self.mine = list(range(p * S // P, (p + 1) * S // P))
        _check_rows_per_process(mesh, cfg.train.batch_size, cfg.data.seq_len)
        self.streams = [
            make_pipeline(cfg.data, tokenizer, global_batch_size=cfg.train.batch_size, seed=cfg.seed,
                          process_index=s, process_count=S)
            for s in self.mine
        ]
        self.source_names = self.streams[0].source_names

    def __next__(self) -> dict:
        parts = [next(it) for it in self.streams]
        local = {k: np.concatenate([q[k] for q in parts]) for k in parts[0]}
        return sharding.host_local_to_global(local, self.mesh)

    def get_state(self) -> dict:
        mine = {str(s): it.get_state() for s, it in zip(self.mine, self.streams)}
        return {"shards": self.num_shards, "streams": _allgather_json(mine)}

    def close(self) -> None:
        for it in self.streams:
            it.close()

    def set_state(self, state: dict) -> None:
        if state.get("shards") != self.num_shards:
            raise ConfigError(
                f"the checkpoint's data state has {state.get('shards')} shards but data.shards resolves to "
                f"{self.num_shards}; resume with --config.data.shards={state.get('shards')}"
            )
        for s, it in zip(self.mine, self.streams):
            it.set_state(state["streams"][str(s)])


def _check_rows_per_process(mesh, batch_size: int, seq_len: int) -> None:
    """Each process feeds rows [p*B/P, (p+1)*B/P) of the global batch; that holds only if its
    devices own exactly those rows (a mesh whose tensor axis spans hosts breaks it)."""
    P, p = jax.process_count(), jax.process_index()
    if P == 1:
        return
    per = batch_size // P
    rows = set()
    for idx in sharding.batch_sharding(mesh).addressable_devices_indices_map((batch_size, seq_len)).values():
        rows.update(range(*idx[0].indices(batch_size)))
    if rows != set(range(p * per, (p + 1) * per)):
        raise ConfigError(
            f"mesh {cfg_mesh_str(mesh)}: process {p}'s devices hold batch rows {min(rows)}..{max(rows)}, not its own "
            f"{p * per}..{(p + 1) * per - 1}; keep the tensor axis within a host (put hosts on data/fsdp)"
        )


def cfg_mesh_str(mesh) -> str:
    return ",".join(f"{k}:{v}" for k, v in mesh.shape.items())


def _allgather_json(obj: dict) -> dict:
    """Merges every process's dict (JSON-able) into one, on every process."""
    if jax.process_count() == 1:
        return obj
    from jax.experimental import multihost_utils

    raw = np.frombuffer(json.dumps(obj).encode(), np.uint8)
    sizes = multihost_utils.process_allgather(np.array([raw.size], np.int64))
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[: raw.size] = raw
    every = multihost_utils.process_allgather(padded)
    out: dict = {}
    for row, n in zip(every, sizes.reshape(-1)):
        out.update(json.loads(bytes(row[: int(n)]).decode()))
    return out


def _grow_vocab(params, model_cfg: LlamaConfig, tokenizer, mesh):
    """Embedding and LM head grown on device to the tokenizer's size (new rows: the mean)."""
    from easylemur.vocab import extend_vocab

    grown_params, grown = extend_vocab(params, model_cfg, tokenizer.vocab_size)
    sh = param_shardings(grown, mesh)
    print(f"vocabulary grown from {model_cfg.vocab_size} to {grown.vocab_size} (ChatML tokens)", flush=True)
    return jax.device_put(grown_params, sh), grown, sh


def evaluate(cfg: ConfigDict, tokenizer, mesh, eval_fn, params) -> float:
    """Token-weighted mean loss over the first eval.batches batches of data.eval_sources."""
    from easylemur.data.pipeline import make_pipeline

    if not cfg.data.eval_sources:
        return float("nan")
    data_cfg = ConfigDict(cfg.data.to_dict())
    data_cfg.prefetch = 0  # a few batches: worker processes would cost more than they save
    total, count = 0.0, 0.0
    with make_pipeline(
        data_cfg, tokenizer, global_batch_size=cfg.train.batch_size, seed=cfg.seed,
        process_index=jax.process_index(), process_count=jax.process_count(),
        sources=cfg.data.eval_sources, shuffle=False, repeat=False,
    ) as it:
        # every process runs exactly eval.batches steps, feeding rows that train nothing once
        # its share of the data ends, so the collectives stay in step across hosts
        rows, T = cfg.train.batch_size // jax.process_count(), cfg.data.seq_len
        empty = {k: np.zeros((rows, T), np.int32) for k in ("input_ids", "loss_mask", "segment_ids", "positions")}
        empty["source"] = np.zeros((rows,), np.int32)
        for _ in range(cfg.eval.batches):
            try:
                local = next(it)
            except StopIteration:
                local = empty
            s, n = jax.device_get(eval_fn(params, sharding.host_local_to_global(local, mesh)))
            total, count = total + float(s), count + float(n)
    return total / count if count else float("nan")


class _NoProgress:
    def update(self, n):
        pass

    def set_postfix_str(self, *a, **k):
        pass

    def close(self):
        pass


def _progress(start: int, total: int, active: bool):
    if not active:
        return _NoProgress()
    from tqdm import tqdm

    return tqdm(total=total, initial=start, desc="train", dynamic_ncols=True, mininterval=1.0, file=sys.stdout)


# ----------------------------------------------------------------------------- CLI


def parse_args(argv: Optional[Sequence[str]] = None) -> tuple[Optional[str], list[str]]:
    parser = argparse.ArgumentParser(
        prog="python -m easylemur.train",
        description="Train (continued pre-training or chat fine-tuning). Resumes from the newest "
        "checkpoint in the config's workdir. Override any config key with --config.KEY=VALUE, "
        "e.g. --config.train.steps=50 --config.data.sources.code.weight=5.",
    )
    parser.add_argument("--config", required=True, help="a configs/*.py file defining get_config()")
    args, rest = parser.parse_known_args(argv)
    overrides = []
    for item in rest:
        if not item.startswith("--config."):
            parser.error(f"unrecognised argument {item!r}; overrides look like --config.train.steps=10")
        overrides.append(item[len("--config."):])
    return args.config, overrides


def main(argv: Optional[Sequence[str]] = None) -> int:
    path, overrides = parse_args(argv)
    try:
        cfg = load_config(path, overrides)
    except ConfigError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        train(cfg)
    except (ConfigError, TrainingError, sharding.MeshError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
