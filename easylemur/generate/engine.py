"""The batched decode engine (its CLI: `generate/cli.py`).

How it decodes (docs/design.md, "Decoding and evaluation"):
- A batch of prompts of different lengths is left-padded to one length. Padding has segment 0,
  which no real token uses, so the model's segment mask keeps it out of every real token's
  attention; each row carries its own positions (0.. its own length), so a row decodes exactly
  as its prompt alone would.
- Prefill and the whole decode loop are one compiled program: `lax.while_loop`s over the KV
  cache (`num_kv_heads` heads wide) that sample inside the loop (greedy, temperature, top-k,
  top-p, a key per row), stop a row on any stop id and leave when every row stopped. The cache
  grows between loops (`cache_spans`), so a step attends over about the columns written so far.
- Programs are compiled per shape bucket (batch, prompt length, new tokens, each rounded up to
  a power of two) and kept on the `Decoder`, which the loaded model keeps, so a shape seen once
  never compiles again.
- With a mesh, parameters sit in the training rule table's shardings and rows are split over
  the batch axes; the same program runs sharded.

Chat prompts are rendered with the model's chat template (LoadedModel.chat_prompt_ids), and
decoding stops at every id the model declares (convert.hf.stop_ids): EOS, <|im_end|> (Lemur-style
chat models never train EOS), <|eot_id|> and generation_config.json's eos_token_id list.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from typing import Any, Callable, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from easylemur.errors import InputError
from easylemur.model.config import LlamaConfig
from easylemur.model.llama import Llama, init_cache, lm_head_kernel
from easylemur.sharding import constrain, logical_to_spec


class GenerateError(InputError):
    """Bad generation arguments (empty prompt, ids out of the vocabulary, ...)."""


# An emitted slot that holds no token: the row had stopped (or hit its stop id) by then.
NO_TOKEN = -1


def _bucket(n: int, minimum: int) -> int:
    """n rounded up to a power of two, at least `minimum`: few distinct shapes to compile, at
    most twice the work of the exact shape."""
    b = minimum
    while b < n:
        b *= 2
    return b


def cache_spans(prompt_len: int, new_tokens: int) -> list[int]:
    """The KV cache lengths the decode loop runs through: the cache starts at the first span and
    grows (zero columns, segment 0) to the next when the steps reach its end, so each step's
    attention reads about the columns written so far, not the whole prompt + new tokens (at
    batch 16 reading the full cache was a third of a step). One while loop per span: up to 4,
    at least 64 steps each."""
    phases = min(max(new_tokens // 64, 1), 4)
    chunk = -(-new_tokens // phases)
    return [min(prompt_len + chunk * (k + 1), prompt_len + new_tokens) for k in range(phases)]


@dataclasses.dataclass(frozen=True)
class Shape:
    """What one compiled program is specialised to."""

    batch: int
    prompt_len: int
    new_tokens: int
    n_stop: int
    sample: bool  # False: greedy (argmax), no sort or key work at all
    stream: bool  # True: every step's tokens go to the host as they are produced


@dataclasses.dataclass
class Sampling:
    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def validate(self) -> None:
        if not self.temperature >= 0:
            raise GenerateError(f"temperature={self.temperature} must be >= 0 (0: greedy)")
        if self.top_k < 0:
            raise GenerateError(f"top_k={self.top_k} must be >= 0 (0: no top-k)")
        if not 0 < self.top_p <= 1:
            raise GenerateError(f"top_p={self.top_p} must be in (0, 1]")


def _filter_logits(logits: jax.Array, top_k: jax.Array, top_p: jax.Array) -> jax.Array:
    """Top-k, then top-p (the smallest set of most likely tokens whose probability reaches
    top_p) on [B, V] logits; the rest become -inf. One descending sort serves both."""
    V = logits.shape[-1]
    srt = -jnp.sort(-logits, axis=-1)
    rank = jnp.arange(V)[None]
    srt = jnp.where((top_k > 0) & (rank >= top_k), -jnp.inf, srt)
    cum = jnp.cumsum(jax.nn.softmax(srt, axis=-1), axis=-1)
    last = jnp.where(top_p < 1.0, jnp.sum(cum < top_p, axis=-1), V - 1)
    # Rounding can leave cum just below 1 past the k-th entry: never keep more than k.
    last = jnp.minimum(last, jnp.where(top_k > 0, top_k - 1, V - 1))[:, None]
    threshold = jnp.take_along_axis(srt, last, axis=-1)
    return jnp.where(logits < threshold, -jnp.inf, logits)


class Decoder:
    """Compiled decode programs for one model's parameters, one per `Shape`, built on first
    use and kept. `easylemur.load(...)` returns a model that owns one (`model.decoder`)."""

    def __init__(self, cfg: LlamaConfig, params: Any, mesh: Optional[Mesh] = None, grow_cache: bool = True):
        """`grow_cache=False`: one loop over the whole prompt + new tokens cache (the program
        before `cache_spans`; the decode bench times it for comparison). Same tokens."""
        if cfg.scan_layers:
            raise GenerateError("decoding needs the unscanned layer layout (load the model with easylemur.load)")
        self.cfg = cfg
        self.params = params
        self.mesh = mesh
        self.grow_cache = grow_cache
        self.programs: dict[Shape, Callable] = {}
        self._sink: Optional[Callable[[int, np.ndarray], None]] = None
        self._lock = threading.Lock()  # one generation at a time: the stream sink is shared

    # ------------------------------------------------------------------ the compiled program

    def _emit(self, step, tokens) -> None:
        if self._sink is not None:
            self._sink(int(step), np.asarray(tokens))

    def _build(self, shape: Shape) -> Callable:
        cfg, mesh = self.cfg, self.mesh
        net = Llama(cfg, mesh)
        dt = jnp.dtype(cfg.dtype)

        def last_logits(params, hidden):
            # The LM head on the last position only: the prompt's other positions need no
            # [P, V] logits. Same dtypes as the model's head (inputs in the compute dtype,
            # float32 accumulation).
            h = hidden[:, -1].astype(dt)
            w = lm_head_kernel(params, cfg).astype(dt)
            return jax.lax.dot_general(h, w, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)

        def run(params, ids, positions, segments, lengths, active, seeds, rows, stop_ids, n_new,
                temperature, top_k, top_p):
            B, Plen = ids.shape
            spans = cache_spans(Plen, shape.new_tokens) if self.grow_cache else [Plen + shape.new_tokens]
            kv = ("batch", "act_kv_heads", "length", None)  # init_cache's layout: heads-major [B, KV, S, hd]

            def placed(cache):
                return [{"k": constrain(c["k"], kv, mesh), "v": constrain(c["v"], kv, mesh),
                         "seg": constrain(c["seg"], ("batch", "length"), mesh), "index": c["index"]} for c in cache]

            cache = placed(init_cache(cfg, B, spans[0]))
            hidden, cache = net.apply({"params": params}, ids, positions, segments, cache=cache, return_hidden=True)
            logits = last_logits(params, hidden)
            row_keys = jax.vmap(lambda s, r: jax.random.fold_in(jax.random.PRNGKey(s), r))(seeds, rows)

            def pick(logits, i):
                if not shape.sample:
                    return jnp.argmax(logits, axis=-1).astype(jnp.int32)
                lg = logits / temperature
                lg = jax.lax.cond((top_k > 0) | (top_p < 1.0), lambda x: _filter_logits(x, top_k, top_p),
                                  lambda x: x, lg)
                keys = jax.vmap(jax.random.fold_in, (0, None))(row_keys, i)
                return jax.vmap(jax.random.categorical)(keys, lg).astype(jnp.int32)

            out = jnp.full((B, shape.new_tokens), NO_TOKEN, jnp.int32)
            done = ~active
            ones = jnp.ones((B, 1), jnp.int32)

            def body(carry):
                i, logits, cache, done, out = carry
                tok = pick(logits, i)
                hit = jnp.any(tok[:, None] == stop_ids[None, :], axis=-1)
                emitted = jnp.where(done | hit, NO_TOKEN, tok)
                out = jax.lax.dynamic_update_slice_in_dim(out, emitted[:, None], i, axis=1)
                done = done | hit
                if shape.stream:
                    jax.debug.callback(self._emit, i, emitted)
                # token i of a row sits at position length + i
                step_logits, cache = net.apply({"params": params}, tok[:, None], (lengths + i)[:, None], ones,
                                               cache=cache)
                return i + 1, step_logits[:, -1], cache, done, out

            carry = (jnp.zeros((), jnp.int32), logits, cache, done, out)
            for j, span in enumerate(spans):
                if j:  # the cache grows to the next span: new columns have segment 0 (masked)
                    i, logits, cache, done, out = carry
                    grow = span - spans[j - 1]
                    cache = placed([{"k": jnp.pad(c["k"], ((0, 0), (0, 0), (0, grow), (0, 0))),
                                     "v": jnp.pad(c["v"], ((0, 0), (0, 0), (0, grow), (0, 0))),
                                     "seg": jnp.pad(c["seg"], ((0, 0), (0, grow))), "index": c["index"]}
                                    for c in cache])
                    carry = (i, logits, cache, done, out)

                def cond(carry, last=span - Plen):
                    # step i writes cache column Plen + i: this loop runs the steps its span holds
                    i, _, _, done, _ = carry
                    return (i < n_new) & (i < last) & ~jnp.all(done)

                carry = jax.lax.while_loop(cond, body, carry)
            return carry[4]

        return jax.jit(run)

    def program(self, shape: Shape) -> Callable:
        if shape not in self.programs:
            self.programs[shape] = self._build(shape)
        return self.programs[shape]

    # ------------------------------------------------------------------ host side

    def _put(self, x: np.ndarray, batched: bool):
        if self.mesh is None:
            return x
        if not batched:
            return jax.device_put(x, NamedSharding(self.mesh, P()))
        logical = ("batch",) + (None,) * (x.ndim - 1)
        return jax.device_put(x, NamedSharding(self.mesh, logical_to_spec(logical, x.shape, self.mesh)))

    def generate(self, prompt_ids: Sequence[Sequence[int]], *, max_new_tokens: int, temperature: float = 0.0,
                 top_k: int = 0, top_p: float = 1.0, seed: int | Sequence[int] = 0,
                 stop_ids: Sequence[int] = (), on_token: Optional[Callable[[int, np.ndarray], None]] = None
                 ) -> list[list[int]]:
        """New ids per prompt, without the stop id that ended the row.

        `seed`: an int gives row r the key fold_in(PRNGKey(seed), r); a list gives each row its
        own seed (key fold_in(PRNGKey(seed[r]), 0)), so a row's samples do not depend on the
        other rows of the batch. `on_token(step, tokens)` is called for every decoding step
        with the [batch] tokens just produced (NO_TOKEN for rows that have stopped)."""
        sampling = Sampling(float(temperature), int(top_k), float(top_p))
        sampling.validate()
        if isinstance(prompt_ids, (str, bytes)) or (len(prompt_ids) and isinstance(prompt_ids[0], (int, np.integer))):
            raise GenerateError("prompt_ids must be a list of prompts, each a list of token ids "
                                "(for text use complete() or chat())")
        if max_new_tokens < 1:
            raise GenerateError(f"max_new_tokens={max_new_tokens} must be >= 1")
        prompts = [list(map(int, p)) for p in prompt_ids]
        if not prompts:
            return []
        V = self.cfg.vocab_size
        for r, p in enumerate(prompts):
            if not p:
                raise GenerateError(f"prompt {r} is empty; give at least one token (e.g. BOS)")
            bad = [t for t in p if not 0 <= t < V]
            if bad:
                raise GenerateError(f"prompt {r}: token id {bad[0]} is outside the vocabulary [0, {V})")
        if isinstance(seed, (int, np.integer)):
            seeds, rows = [int(seed)] * len(prompts), list(range(len(prompts)))
        else:
            seeds, rows = [int(s) for s in seed], [0] * len(prompts)
            if len(seeds) != len(prompts):
                raise GenerateError(f"seed is a list of {len(seeds)} but there are {len(prompts)} prompts")

        n, longest = len(prompts), max(len(p) for p in prompts)
        stops = sorted({int(s) for s in stop_ids})
        shape = Shape(batch=_bucket(n, 1), prompt_len=_bucket(longest, 16), new_tokens=_bucket(max_new_tokens, 16),
                      n_stop=_bucket(max(len(stops), 1), 4), sample=sampling.temperature > 0,
                      stream=on_token is not None)
        limit = self.cfg.max_position_embeddings
        if longest + max_new_tokens > limit:
            # refused before anything is compiled: the KV cache is sized prompt + new tokens, so
            # an absurd value is an out-of-memory error deep in XLA, and positions past the
            # context are ones the model never trained
            raise GenerateError(
                f"max_new_tokens={max_new_tokens}: the longest prompt ({longest} tokens) plus the new tokens "
                f"({longest + max_new_tokens}) exceed the model's context, max_position_embeddings={limit}; "
                + (f"at most {limit - longest} new tokens fit" if longest < limit else "the prompt alone fills it"))

        B, Plen = shape.batch, shape.prompt_len
        ids = np.zeros((B, Plen), np.int32)
        positions = np.zeros((B, Plen), np.int32)
        segments = np.zeros((B, Plen), np.int32)
        lengths = np.ones((B,), np.int32)
        active = np.zeros((B,), bool)
        for r, p in enumerate(prompts):
            ids[r, Plen - len(p):] = p
            positions[r, Plen - len(p):] = np.arange(len(p))
            segments[r, Plen - len(p):] = 1
            lengths[r], active[r] = len(p), True
        segments[n:, -1] = 1  # filler rows: one token each, stopped from the start
        seed_arr = np.zeros((B,), np.uint32)
        seed_arr[:n] = np.asarray(seeds, np.int64) % 2**32
        row_arr = np.zeros((B,), np.int32)
        row_arr[:n] = rows
        stop_arr = np.full((shape.n_stop,), NO_TOKEN, np.int32)
        stop_arr[: len(stops)] = stops

        args = (
            self._put(ids, True), self._put(positions, True), self._put(segments, True),
            self._put(lengths, True), self._put(active, True), self._put(seed_arr, True), self._put(row_arr, True),
            self._put(stop_arr, False), self._put(np.int32(max_new_tokens), False),
            self._put(np.float32(max(sampling.temperature, 1e-6)), False), self._put(np.int32(sampling.top_k), False),
            self._put(np.float32(sampling.top_p), False),
        )
        program = self.program(shape)
        with self._lock:
            self._sink = on_token
            try:
                out = np.asarray(jax.device_get(program(self.params, *args)))
            finally:
                self._sink = None
        result = []
        for r in range(n):
            row = out[r, :max_new_tokens]
            cut = np.flatnonzero(row == NO_TOKEN)
            result.append(row[: cut[0] if cut.size else len(row)].tolist())
        return result


def truncate_at_stops(text: str, stops: Sequence[str]) -> str:
    """`text` up to the first occurrence of any stop string (stop strings act on the host, on
    decoded text: a token boundary need not fall where a stop string starts)."""
    cut = len(text)
    for s in stops:
        if s:
            i = text.find(s)
            if i >= 0:
                cut = min(cut, i)
    return text[:cut]


class TextStream:
    """Prints one row's text as its tokens arrive (for `on_token`), in pieces that never change
    (`detok.IncrementalText`: half a character waits for its next byte); `finish` prints what
    still waits when the reply ends. What it prints is the reply's decoded text."""

    def __init__(self, tokenizer, out=None):
        from easylemur.generate.detok import IncrementalText

        self.text = IncrementalText(tokenizer)
        self.out = out or sys.stdout
        self.next = 0  # the next step to print
        self.steps: dict[int, int] = {}

    def _write(self, piece: str) -> None:
        if piece:
            self.out.write(piece)
            self.out.flush()

    def __call__(self, step: int, tokens: np.ndarray) -> None:
        # Host callbacks may arrive out of order: print steps strictly in sequence.
        self.steps[step] = int(tokens[0])
        new = []
        while self.next in self.steps:
            t = self.steps.pop(self.next)
            self.next += 1
            if t != NO_TOKEN:
                new.append(t)
        if new:
            self._write(self.text.push(new))

    def finish(self) -> None:
        self._write(self.text.finish())