"""A slot-based, step-wise decode engine for continuous batching (the server's engine,
`easylemur/serve`; docs/design.md "Serving").

`Decoder` (engine.py) compiles prefill and the whole decode loop of one batch as one program;
a server instead needs requests to join and leave between decoding steps. Here a fixed number
of slots share one KV cache of shape [slots, max_len] per layer:

- `prefill(slot, ids)` runs one prompt (right-padded to a power-of-two bucket, padding in
  segment 0) into that slot's cache rows, from column 0, and keeps the logits of its last token
  on device for the next `step`. One program per prompt bucket.
- `step()` samples one token for every active slot from its kept logits (greedy, or
  temperature/top-p with the slot's own seed) and runs it through the model at that slot's own
  position. The step is sized to the active slots: their count rounded up to a power of two
  (rows) and the cache columns they need rounded up to a power of two, at least 64 (span); the
  rows' first `span` columns are gathered, the model runs on the copy, and only the column each
  row wrote is scattered back. One program per (rows, span); with every slot over the whole
  row, no gather at all. Programs not compiled yet compile on a background thread while a
  larger compiled one serves (`_step_program`).

Each slot's cache column equals its token's position, so a slot's cache index is its next
position. The model's cache path has one scalar index per cache; `jax.vmap` over the slot axis
gives each slot its own index (the write becomes a scatter), reusing `cached_attention` as is.
Columns past a slot's index hold stale entries of an earlier request or prompt padding: the
causal mask hides them until the slot writes them itself.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from easylemur.generate.engine import GenerateError, _bucket
from easylemur.model.config import LlamaConfig
from easylemur.model.llama import Llama, init_cache, lm_head_kernel

# How many top logprobs every step and echo returns to the host (OpenAI allows at most 5 for the
# legacy completions and 20 for chat); the server slices what a request asked for.
TOP_LOGPROBS = 20


@dataclasses.dataclass
class StepOutput:
    """One decoding step, per slot (rows of inactive slots are meaningless)."""

    tokens: np.ndarray  # [slots] int32
    logprobs: np.ndarray  # [slots] float32: log_softmax of the raw logits at the chosen token
    top_ids: np.ndarray  # [slots, TOP_LOGPROBS]
    top_logprobs: np.ndarray  # [slots, TOP_LOGPROBS]


@dataclasses.dataclass
class PromptLogprobs:
    """Echo: for prompt token t >= 1, its logprob given the tokens before it, and the top
    alternatives at that position (row t - 1 of the logits)."""

    logprobs: np.ndarray  # [len - 1]
    top_ids: np.ndarray  # [len - 1, TOP_LOGPROBS]
    top_logprobs: np.ndarray  # [len - 1, TOP_LOGPROBS]


def _top_p_filter(logits: jax.Array, top_p: jax.Array) -> jax.Array:
    """The smallest set of most likely tokens whose probability reaches top_p (per row, [B]);
    the rest become -inf. The same rule as engine._filter_logits with top_k 0."""
    V = logits.shape[-1]
    srt = -jnp.sort(-logits, axis=-1)
    cum = jnp.cumsum(jax.nn.softmax(srt, axis=-1), axis=-1)
    last = jnp.where(top_p < 1.0, jnp.sum(cum < top_p[:, None], axis=-1), V - 1)[:, None]
    threshold = jnp.take_along_axis(srt, last, axis=-1)
    return jnp.where(logits < threshold, -jnp.inf, logits)


class SlotEngine:
    """Slots over one KV cache; not thread-safe (one scheduler thread owns it)."""

    def __init__(self, cfg: LlamaConfig, params: Any, *, slots: int = 8, max_len: Optional[int] = None,
                 mesh: Optional[Mesh] = None, sized_steps: bool = True):
        if cfg.scan_layers:
            raise GenerateError("decoding needs the unscanned layer layout (load the model with easylemur.load)")
        if slots < 1:
            raise GenerateError(f"slots={slots} must be >= 1")
        self.cfg, self.params, self.mesh = cfg, params, mesh
        self.slots = slots
        self.sized_steps = sized_steps  # False: every step runs all slots over the whole row (the bench compares)
        self.max_len = int(max_len or cfg.max_position_embeddings)
        if not 1 <= self.max_len <= cfg.max_position_embeddings:
            raise GenerateError(f"max_len={self.max_len} must be in [1, max_position_embeddings="
                                f"{cfg.max_position_embeddings}]")
        self.cache = init_cache(cfg, slots, self.max_len)
        self.index = jnp.zeros((slots,), jnp.int32)  # each slot's next column == next position
        self.logits = jnp.zeros((slots, cfg.vocab_size), jnp.float32)  # what the next step samples from
        # per-slot sampling state, host side (small; sent every step)
        self.active = np.zeros((slots,), bool)
        self.temperature = np.zeros((slots,), np.float32)
        self.top_p = np.ones((slots,), np.float32)
        self.seed = np.zeros((slots,), np.uint32)
        self.count = np.zeros((slots,), np.int32)  # tokens sampled so far: the step index of the key
        self.length = np.zeros((slots,), np.int32)  # host mirror of `index`
        self._prefill: dict[tuple[int, bool], Any] = {}
        self._steps: dict[tuple[int, int], Any] = {}  # (rows, span) -> compiled step
        self._lock = threading.Lock()  # _steps and _pending: the scheduler and the compiler thread
        self._pending: set[tuple[int, int]] = set()
        self._queue: queue.Queue = queue.Queue()
        self._thread: Optional[threading.Thread] = None

    # ------------------------------------------------------------------ programs

    def _slot_apply(self, net, params, tok, pos, seg, cache_row, idx):
        """One slot's forward through the model's own cache path (a batch of 1)."""
        cache = [{"k": c["k"][None], "v": c["v"][None], "seg": c["seg"][None], "index": idx} for c in cache_row]
        logits, cache = net.apply({"params": params}, tok, pos, seg, cache=cache)
        return logits[0, -1], [{"k": c["k"][0], "v": c["v"][0], "seg": c["seg"][0]} for c in cache]

    def _build_step(self, n: int, span: int):
        """The step for `n` rows (a power of two, or all slots) attending over the first `span`
        cache columns. Unless n is all slots and span the whole row, the rows' first `span`
        columns are gathered, the model runs on that copy, and only the column each row wrote
        goes back into the cache (padding rows, `valid` False, write nothing)."""
        cfg, net = self.cfg, Llama(self.cfg, self.mesh)
        whole = n == self.slots and span == self.max_len

        def step(params, cache, all_logits, index, rows, valid, temperature, top_p, seed, count):
            if n != self.slots:
                logits, idx = all_logits[rows], index[rows]
            else:  # rows is 0..slots-1
                logits, idx = all_logits, index
            # sample from the kept logits: greedy rows take the argmax; sampling rows use
            # fold_in(fold_in(PRNGKey(seed), 0), count), the key Decoder gives a row with its own seed
            greedy = jnp.argmax(logits, axis=-1).astype(jnp.int32)

            def sampled(_):
                lg = logits / jnp.maximum(temperature, 1e-6)[:, None]
                lg = jax.lax.cond(jnp.any(top_p < 1.0), lambda x: _top_p_filter(x, top_p), lambda x: x, lg)
                keys = jax.vmap(lambda s, c: jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(s), 0), c))(
                    seed, count)
                return jax.vmap(jax.random.categorical)(keys, lg).astype(jnp.int32)

            any_sample = jnp.any(valid & (temperature > 0))
            tok = jax.lax.cond(any_sample, sampled, lambda _: greedy, None)
            tok = jnp.where(temperature > 0, tok, greedy)
            logp = jax.nn.log_softmax(logits, axis=-1)
            tok_lp = jnp.take_along_axis(logp, tok[:, None], axis=-1)[:, 0]
            top_lp, top_ids = jax.lax.top_k(logp, min(TOP_LOGPROBS, cfg.vocab_size))

            if whole:
                sub = [{"k": c["k"], "v": c["v"], "seg": c["seg"]} for c in cache]
            elif n == self.slots:
                sub = [{"k": c["k"][:, :, :span], "v": c["v"][:, :, :span], "seg": c["seg"][:, :span]} for c in cache]
            else:
                sub = [{"k": c["k"][rows, :, :span], "v": c["v"][rows, :, :span], "seg": c["seg"][rows, :span]}
                       for c in cache]
            seg = valid.astype(jnp.int32)[:, None, None]  # padding rows write segment 0: attended by nothing
            # an active row's index is below span (the host picks span so); a padding row's write
            # is clamped inside its copy and never goes back
            col = jnp.minimum(idx, span - 1)

            def one(t, i, s, row):
                return self._slot_apply(net, params, t[None, None], i[None, None], s, row, i)

            new_logits, new_sub = jax.vmap(one)(tok, col, seg, sub)
            new_idx = jnp.where(valid, jnp.minimum(idx + 1, self.max_len - 1), idx)
            if whole:
                # an inactive slot keeps its index (its write lands past its index, hidden by the mask)
                return new_sub, new_logits, new_idx, (tok, tok_lp, top_ids, top_lp)
            dest = jnp.where(valid, rows, self.slots)  # out of range: dropped
            r = jnp.arange(n)
            cache = [{"k": c["k"].at[dest, :, col].set(w["k"][r, :, col], mode="drop"),
                      "v": c["v"].at[dest, :, col].set(w["v"][r, :, col], mode="drop"),
                      "seg": c["seg"].at[dest, col].set(w["seg"][r, col], mode="drop")}
                     for c, w in zip(cache, new_sub)]
            if n != self.slots:
                new_logits = all_logits.at[dest].set(new_logits, mode="drop")
                new_idx = index.at[dest].set(new_idx, mode="drop")
            return cache, new_logits, new_idx, (tok, tok_lp, top_ids, top_lp)

        return jax.jit(step, donate_argnums=(1, 2))

    def _build_prefill(self, bucket: int, echo: bool):
        cfg, net = self.cfg, Llama(self.cfg, self.mesh)
        dt = jnp.dtype(cfg.dtype)

        def prefill(params, cache, logits, index, slot, ids, length):
            row = [{"k": c["k"][slot][None], "v": c["v"][slot][None], "seg": c["seg"][slot][None],
                    "index": jnp.zeros((), jnp.int32)} for c in cache]
            cols = jnp.arange(bucket, dtype=jnp.int32)[None]
            seg = (cols < length).astype(jnp.int32)  # right padding: segment 0, attended by no real token
            hidden, row = net.apply({"params": params}, ids, cols, seg, cache=row, return_hidden=True)
            w = lm_head_kernel(params, cfg).astype(dt)

            def head(h):  # as Decoder's last-position head: compute dtype in, float32 out
                return jax.lax.dot_general(h.astype(dt), w, (((h.ndim - 1,), (0,)), ((), ())),
                                           preferred_element_type=jnp.float32)

            last = head(jax.lax.dynamic_index_in_dim(hidden[0], length - 1, keepdims=False))
            cache = [{"k": c["k"].at[slot].set(r["k"][0]), "v": c["v"].at[slot].set(r["v"][0]),
                      "seg": c["seg"].at[slot].set(r["seg"][0])} for c, r in zip(cache, row)]
            logits = logits.at[slot].set(last)
            index = index.at[slot].set(length)
            extra = None
            if echo:
                logp = jax.nn.log_softmax(head(hidden[0]), axis=-1)  # [bucket, V]
                nxt = jnp.concatenate([ids[0, 1:], jnp.zeros((1,), jnp.int32)])
                tok_lp = jnp.take_along_axis(logp, nxt[:, None], axis=-1)[:, 0]
                top_lp, top_ids = jax.lax.top_k(logp, min(TOP_LOGPROBS, cfg.vocab_size))
                extra = (tok_lp, top_ids, top_lp)
            return cache, logits, index, last, extra

        return jax.jit(prefill, donate_argnums=(1, 2))

    # ------------------------------------------------------------------ host side

    def prefill_bucket(self, n: int) -> int:
        return min(_bucket(n, 16), self.max_len)

    def prefill(self, slot: int, ids: Sequence[int], *, temperature: float = 0.0, top_p: float = 1.0, seed: int = 0,
                echo: bool = False) -> tuple[np.ndarray, Optional[PromptLogprobs]]:
        """Writes prompt `ids` into `slot` (replacing whatever it held) and activates it; returns
        the logits [V] after its last token (and with `echo`, the prompt's logprobs)."""
        ids = [int(t) for t in ids]
        n = len(ids)
        if not 1 <= n < self.max_len:
            raise GenerateError(f"prompt of {n} tokens: must be 1..{self.max_len - 1} (the cache length)")
        bad = [t for t in ids if not 0 <= t < self.cfg.vocab_size]
        if bad:
            raise GenerateError(f"token id {bad[0]} is outside the vocabulary [0, {self.cfg.vocab_size})")
        bucket = self.prefill_bucket(n)
        key = (bucket, bool(echo))
        with self._lock:
            program = self._prefill.get(key)
        if program is None:  # compiled at its first call (`prefill_ready` compiles ahead, off this thread)
            program = self._build_prefill(bucket, bool(echo))
            with self._lock:
                self._prefill.setdefault(key, program)
        arr = np.zeros((1, bucket), np.int32)
        arr[0, :n] = ids
        cache = [{"k": c["k"], "v": c["v"], "seg": c["seg"]} for c in self.cache]
        cache, self.logits, self.index, last, extra = program(
            self.params, cache, self.logits, self.index, np.int32(slot), arr, np.int32(n))
        self.cache = cache
        self.active[slot] = True
        self.temperature[slot], self.top_p[slot] = temperature, top_p
        self.seed[slot], self.count[slot], self.length[slot] = int(seed) % 2**32, 0, n
        prompt = None
        if echo:
            lp, ti, tl = (np.asarray(x) for x in jax.device_get(extra))
            prompt = PromptLogprobs(lp[: n - 1], ti[: n - 1], tl[: n - 1])
        return np.asarray(last), prompt

    def release(self, slot: int) -> None:
        """Frees `slot`; its cache rows stay until the next prefill overwrites them."""
        self.active[slot] = False
        self.temperature[slot] = 0.0

    def step_shape(self) -> tuple[int, int]:
        """(rows, span) of the next step: the active slots' count rounded up to a power of two
        (at most all slots) and the cache columns they need (their longest index + 1) rounded
        up to a power of two, at least 64, at most max_len."""
        if not self.sized_steps:
            return self.slots, self.max_len
        act = np.flatnonzero(self.active)
        n = min(_bucket(max(len(act), 1), 1), self.slots)
        need = int(self.length[act].max()) + 1 if len(act) else 1
        return n, min(_bucket(need, 64), self.max_len)

    def _specs(self, n: int) -> tuple:
        """The step's argument shapes (and shardings) for `n` rows: what a compile needs."""
        def spec(x):
            return jax.ShapeDtypeStruct(np.shape(x), x.dtype, sharding=getattr(x, "sharding", None))

        cache = [{"k": c["k"], "v": c["v"], "seg": c["seg"]} for c in self.cache]
        return jax.tree.map(spec, (self.params, cache, self.logits, self.index,
                                   *self._step_args(n, np.zeros((0,), np.int64))))

    def _compile(self, key: tuple[int, int], specs: tuple):
        if self.mesh is not None:  # jit picks the shardings the arrays arrive with (compiled at first call)
            return self._build_step(*key)
        return self._build_step(*key).lower(*specs).compile()

    def _compiler(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            key, specs = job
            try:
                if key[0] == "prefill":
                    program = self._build_prefill(*key[1:]).lower(*specs).compile()
                else:
                    program = self._compile(key, specs)
            except Exception:  # a step falls back to a larger program, a prefill compiles when it is called
                program = None
            with self._lock:
                self._pending.discard(key)
                if program is not None and key[0] == "prefill":
                    self._prefill[key[1:]] = program
                elif program is not None:
                    self._steps[key] = program

    def _background(self, key: tuple, specs: Callable[[], tuple]) -> None:
        """Queues a compile on the background thread (started at the first) unless it is queued
        already; `specs` is called only then (the scheduler asks every step). Call under _lock."""
        if key in self._pending:
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._compiler, name="easylemur-step-compiler", daemon=True)
            self._thread.start()
        self._pending.add(key)
        self._queue.put((key, specs()))

    def prefill_ready(self, n: int, echo: bool = False) -> bool:
        """Whether a prompt of `n` tokens prefills without compiling first; when not, its program
        starts compiling on the background thread (the server admits such a prompt once it is
        ready, and meanwhile keeps decoding the others). With a mesh, programs compile when first
        called (jit picks the shardings the arrays arrive with): always ready."""
        key = (self.prefill_bucket(max(n, 1)), bool(echo))
        with self._lock:
            if key in self._prefill or self.mesh is not None:
                return True
            self._background(("prefill", *key), lambda: self._prefill_specs(key[0]))
            return False

    def _prefill_specs(self, bucket: int) -> tuple:
        """The prefill's argument shapes for a prompt bucket: what a compile needs."""
        def spec(x):
            return jax.ShapeDtypeStruct(np.shape(x), x.dtype)

        cache = [{"k": c["k"], "v": c["v"], "seg": c["seg"]} for c in self.cache]
        scalar = jax.ShapeDtypeStruct((), np.int32)
        return (*jax.tree.map(spec, (self.params, cache, self.logits, self.index)), scalar,
                jax.ShapeDtypeStruct((1, bucket), np.int32), scalar)

    def _step_program(self, n: int, span: int) -> tuple[tuple[int, int], Any]:
        """(bucket, program) for a step of (n, span): the exact bucket once compiled; before
        that the smallest compiled bucket that covers it (same tokens, more work) while the
        exact one compiles on a background thread, so that no request waits for a compile;
        with none compiled yet (or with a mesh), the exact one, compiled now."""
        key = (n, span)
        with self._lock:
            if key in self._steps:
                return key, self._steps[key]
            cover = [k for k in self._steps if k[0] >= n and k[1] >= span]
            if cover and self.mesh is None:
                self._background(key, lambda: self._specs(n))
                best = min(cover, key=lambda k: (k[0] * k[1], k))
                return best, self._steps[best]
        program = self._compile(key, self._specs(n))
        with self._lock:
            self._steps[key] = program
        return key, program

    def step_buckets(self) -> list[tuple[int, int]]:
        """Every (rows, span) a step can take."""
        spans = sorted({min(_bucket(c, 64), self.max_len) for c in range(1, self.max_len + 1)})
        ns, n = [], 1
        while n < self.slots:
            ns.append(n)
            n *= 2
        return [(n, span) for n in ns + [self.slots] for span in spans]

    def warmup(self, buckets: Optional[Sequence[tuple[int, int]]] = None) -> None:
        """Compiles the step for these (rows, span) buckets now, by default every one (see
        `_step_program` for the ones compiled later)."""
        for key in self.step_buckets() if buckets is None else buckets:
            with self._lock:
                have = key in self._steps
            if not have:
                program = self._compile(key, self._specs(key[0]))
                with self._lock:
                    self._steps[key] = program

    def close(self) -> None:
        """Stops the background compiler (after the compile under way, if any)."""
        if self._thread is not None:
            with self._lock:
                while not self._queue.empty():
                    job = self._queue.get_nowait()
                    if job is not None:
                        self._pending.discard(job[0])
            self._queue.put(None)
            self._thread.join()
            self._thread = None

    def _step_args(self, n: int, act: np.ndarray) -> tuple:
        rows = np.zeros((n,), np.int32)
        rows[: len(act)] = act
        valid = np.zeros((n,), bool)
        valid[: len(act)] = True
        if n == self.slots:  # every slot, in order
            rows, valid = np.arange(n, dtype=np.int32), np.isin(np.arange(n), act)
        pick = rows
        return (rows, valid, self.temperature[pick], self.top_p[pick], self.seed[pick], self.count[pick])

    def step(self) -> StepOutput:
        """One token for every active slot, each at its own position."""
        act = np.flatnonzero(self.active)
        (n, _), program = self._step_program(*self.step_shape())
        cache = [{"k": c["k"], "v": c["v"], "seg": c["seg"]} for c in self.cache]
        self.cache, self.logits, self.index, out = program(
            self.params, cache, self.logits, self.index, *self._step_args(n, act))
        tok, lp, ti, tl = (np.asarray(x) for x in jax.device_get(out))
        if n != self.slots:  # rows -> slots (rows of inactive slots are meaningless)
            full = [np.zeros((self.slots,) + x.shape[1:], x.dtype) for x in (tok, lp, ti, tl)]
            for f, x in zip(full, (tok, lp, ti, tl)):
                f[act] = x[: len(act)]
            tok, lp, ti, tl = full
        self.count[self.active] += 1
        self.length[self.active] += 1
        return StepOutput(tok, lp, ti, tl)

    def room(self, slot: int) -> int:
        """How many more tokens `slot` can decode before its cache row is full."""
        return self.max_len - int(self.length[slot])
