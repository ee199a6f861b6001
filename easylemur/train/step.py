"""The train and eval steps: pure functions of (state, batch), and the one builder of the jitted
train step that both `train` runs and `aot` compiles.

state = {"params", "opt_state"}; a batch is the layout of easylemur.data.batch. The loss is
the mean over every trained token of the global batch, across gradient-accumulation
micro-batches too (docs/design.md, "Loss"): token-loss sums and token counts are accumulated,
and divided once.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Iterable, Optional

import jax
import jax.numpy as jnp
import optax
from ml_collections import ConfigDict

from easylemur import sharding
from easylemur.config import ConfigError
from easylemur.data import batch as batch_layout
from easylemur.ops.loss import head_loss_sum
from easylemur.model.config import LlamaConfig
from easylemur.model.llama import Llama, lm_head_kernel, param_shardings, param_specs
from easylemur.train.optim import applied_lr, make_optimizer


def loss_sum_fn(model_cfg: LlamaConfig, mesh, z_loss: float, loss_chunk: int) -> Callable:
    """(params, batch) -> (sum of token losses, trained tokens): the one loss, through the model."""
    model = Llama(model_cfg, mesh)
    compute = jnp.dtype(model_cfg.dtype)

    def loss_sum(params, mb):
        # Mixed precision: cast the sharded float32 params once, so FSDP all-gathers move
        # compute-dtype weights (half the bytes in bf16); gradients flow back to float32.
        params = jax.tree.map(lambda p: p.astype(compute) if jnp.issubdtype(p.dtype, jnp.floating) else p, params)
        hidden, _ = model.apply({"params": params}, mb["input_ids"], mb["positions"], mb["segment_ids"], return_hidden=True)
        return head_loss_sum(hidden, lm_head_kernel(params, model_cfg), mb, z_loss, loss_chunk, mesh)

    return loss_sum


def micro_batches(batch: dict, n: int) -> dict:
    """[B, T] rows -> [n, B/n, T]; row r goes to micro-batch r % n, so every device holds rows
    of every micro-batch. `source` (per-row bookkeeping) is not part of the loss."""
    return {k: v.reshape(v.shape[0] // n, n, *v.shape[1:]).swapaxes(0, 1) for k, v in batch.items()
            if k in batch_layout.ROW_KEYS}


def make_train_step(model_cfg: LlamaConfig, mesh, tx: optax.GradientTransformation, grad_accum: int, z_loss: float,
                    loss_chunk: int = 0, lr_schedule: Optional[optax.Schedule] = None) -> Callable:
    """(state, batch) -> (state, metrics): loss, grad_norm, finite, trained_tokens, and with
    `lr_schedule` (tx's schedule) learning_rate: the rate this step's update applies, read from
    the optimizer's count (skipped steps do not advance it)."""
    grad_fn = jax.value_and_grad(loss_sum_fn(model_cfg, mesh, z_loss, loss_chunk), has_aux=True)

    def step(state, batch):
        params = state["params"]
        if grad_accum == 1:
            (lsum, n), grads = grad_fn(params, batch)
        else:
            def body(carry, mb):
                g_acc, l_acc, n_acc = carry
                mb = {k: sharding.constrain(v, ("batch",) + (None,) * (v.ndim - 1), mesh) for k, v in mb.items()}
                (l, n), g = grad_fn(params, mb)
                return (jax.tree.map(jnp.add, g_acc, g), l_acc + l, n_acc + n), None

            zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
            init = (zeros, jnp.float32(0), jnp.float32(0))
            (grads, lsum, n), _ = jax.lax.scan(body, init, micro_batches(batch, grad_accum))
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
        if lr_schedule is not None:
            metrics["learning_rate"] = applied_lr(state["opt_state"], lr_schedule)
        return new_state, metrics

    return step


def make_eval_step(model_cfg: LlamaConfig, mesh, grad_accum: int = 1, loss_chunk: int = 0) -> Callable:
    """(params, batch) -> (loss sum, trained tokens), in the train step's micro-batches and
    loss chunks, so an eval batch fits wherever a train batch does."""
    loss_sum = loss_sum_fn(model_cfg, mesh, 0.0, loss_chunk)

    def step(params, batch):
        if grad_accum == 1:
            return loss_sum(params, batch)
        sums, counts = jax.lax.map(lambda mb: loss_sum(params, mb), micro_batches(batch, grad_accum))
        return jnp.sum(sums), jnp.sum(counts)

    return step


def mean_eval_loss(eval_fn: Callable, params: Any, batches: Iterable[dict]) -> float:
    """Token-weighted mean loss over `batches` (NaN when they hold no trained token)."""
    total, count = 0.0, 0.0
    for b in batches:
        s, n = jax.device_get(eval_fn(params, b))
        total, count = total + float(s), count + float(n)
    return total / count if count else float("nan")


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


@dataclasses.dataclass(frozen=True)
class TrainStep:
    """Everything the run's compiled step is made of: the optimizer and its schedule, the
    abstract state and its shardings, and the jitted step (state donated)."""

    model_cfg: LlamaConfig
    tx: optax.GradientTransformation
    lr_schedule: optax.Schedule
    state_abstract: Any
    state_shardings: Any
    fn: Any  # jax.jit(step): (state, batch) -> (state, metrics)

    def lower(self, batch_size: int, seq_len: int, mesh) -> Any:
        """The step lowered for a global batch of this shape (what `aot` compiles)."""
        return self.fn.lower(self.state_abstract, batch_layout.abstract(batch_size, seq_len, mesh))


def check_run_shape(cfg: ConfigDict, model_cfg: LlamaConfig, mesh) -> None:
    """The batch and row shape the step can take, checked before anything is compiled: every
    micro-batch's rows split evenly over the mesh's batch axes, and rows fit the positions the
    model was trained for (raise model.max_position_embeddings, with model.rope_scaling, to
    train longer rows on purpose)."""
    rows = mesh.shape["data"] * mesh.shape["fsdp"]
    B, n = cfg.train.batch_size, cfg.train.grad_accum
    if B % (n * rows):
        raise ConfigError(
            f"train.batch_size={B} with train.grad_accum={n} gives micro-batches of {B / n:g} rows, which the mesh's "
            f"batch axes (data x fsdp = {rows} devices) do not divide; use a batch size that is a multiple of {n * rows}")
    if cfg.data.seq_len > model_cfg.max_position_embeddings:
        raise ConfigError(
            f"data.seq_len={cfg.data.seq_len} is longer than the model's max_position_embeddings="
            f"{model_cfg.max_position_embeddings}; shorten the rows, or set model.max_position_embeddings (with "
            "model.rope_scaling for a model trained shorter) to train longer rows on purpose")


def build_train_step(cfg: ConfigDict, model_cfg: LlamaConfig, mesh) -> TrainStep:
    """The one builder of the train step for a run config and its resolved model config: `train`
    runs it, `aot` compiles it, so both see the same program."""
    check_run_shape(cfg, model_cfg, mesh)
    tx, lr_schedule = make_optimizer(cfg.optimizer, cfg.train.steps)
    param_sh = param_shardings(model_cfg, mesh)
    shapes, _ = param_specs(model_cfg)
    state_abs, state_sh = abstract_state(shapes, tx, param_sh, mesh)
    step = make_train_step(model_cfg, mesh, tx, cfg.train.grad_accum, cfg.train.z_loss, cfg.train.loss_chunk,
                           lr_schedule)
    fn = jax.jit(step, in_shardings=(state_sh, batch_layout.shardings(mesh)), out_shardings=(state_sh, None),
                 donate_argnums=(0,))
    return TrainStep(model_cfg, tx, lr_schedule, state_abs, state_sh, fn)


def build_eval_step(cfg: ConfigDict, model_cfg: LlamaConfig, mesh) -> Any:
    """The jitted eval step of a run: (params, batch) -> (loss sum, trained tokens)."""
    return jax.jit(make_eval_step(model_cfg, mesh, cfg.train.grad_accum, cfg.train.loss_chunk))
