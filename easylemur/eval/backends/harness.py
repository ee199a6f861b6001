"""`--model easylemur` for lm-evaluation-harness: its tasks scored by easylemur's JAX model,
no HF export and no torch (docs/design.md, "lm-evaluation-harness").

    python -m easylemur.eval lm-eval --model easylemur --model_args path=CKPT_OR_HF_DIR \\
        --tasks hellaswag --batch_size 16

Importing this module registers the model with lm-eval (`@register_model`); lm-eval 0.4.x finds
models only in its own `MODEL_MAPPING` or by such an import (no entry-point group), so the
`lm-eval` subcommand of `easylemur.eval` imports it and then runs lm-eval's own CLI. Only what
runs lm-eval imports this module, and lazily (that subcommand, a suite's lm-eval rows, training's
`lm_eval:TASK` evals): the rest of easylemur works without lm_eval installed.

What it computes:
- `loglikelihood`: tokens as lm-eval's `hf` backend makes them for a Llama tokenizer that adds
  BOS: `[BOS] + encode(context + continuation)` split at `len([BOS] + encode(context))`; an empty
  context is `[BOS]`. Rows longer than `max_length + 1` lose tokens on the left, as HFLM's.
- `loglikelihood_rolling`: exactly one BOS before the document (the `hf` backend with
  `add_bos_token=True` puts two, lm-evaluation-harness#3333), the BOS's own prediction never
  scored, windows of `max_length` from lm-eval's `get_rolling_token_windows`: for a document that
  fits one window the sum is minus the document's token loss as easylemur trains it.
- Rows are right-padded to a few bucket lengths (powers of two, at least `MIN_BUCKET`, at most
  `max_length`) in batches of exactly `batch_size` rows, so a task compiles one scoring program
  per bucket; log-softmax, the gather and the greedy check run on device (no [B, T, V] transfer).
- `--apply_chat_template`: the model's own chat template (ChatML's or its tokenizer's, as its
  HF export carries it: `LoadedModel.chat_renderer`), rendered as HFLM renders it
  (`apply_chat_template`); a base model has none (an error naming it).
- `generate_until`: the compiled decode engine (`LoadedModel.generate`), stopping on the model's
  declared stop ids, the text cut at the first `until` string (and the EOS piece), as HFLM does.
"""

from __future__ import annotations

import json
import re
from typing import Any, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from lm_eval import utils as lm_utils
from lm_eval.api.model import TemplateLM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs

from easylemur.errors import InputError
from easylemur.eval.api import Progress

MIN_BUCKET = 128  # the shortest padded row: a multiple of 128 keeps TPU's splash kernel (docs/design.md, "Attention")
DEFAULT_BATCH_SIZE = 8
# a Llama-2 batch of 8 x 4096 positions has 4 GiB of float32 logits: the scoring program takes
# the LM head a chunk of positions at a time (lax.map) under this many bytes of logits
HEAD_CHUNK_BYTES = 256 * 2**20
DEFAULT_MAX_GEN_TOKS = 256  # HFLM's
# generation options the decode engine takes; any other is refused rather than silently dropped
_GEN_OPTIONS = ("temperature", "top_p", "top_k", "do_sample", "seed")
_MESH_PART = re.compile(r"^[a-z]+:-?\d+$")


def _head_chunk(batch: int, length: int, vocab: int) -> int:
    """Positions per LM-head step of the scoring program: the whole row while the float32 logits
    of the batch stay under HEAD_CHUNK_BYTES, else the longest divisor of the row that does."""
    for c in range(length, 0, -1):
        if length % c == 0 and (c == 1 or batch * c * vocab * 4 <= HEAD_CHUNK_BYTES):
            return c
    return 1


def length_bucket(n: int, max_length: int) -> int:
    """The padded row length for a row of `n` tokens: a power of two >= MIN_BUCKET, capped at
    `max_length` (rows never exceed it)."""
    b = MIN_BUCKET
    while b < n:
        b *= 2
    return min(b, max_length)


def _mesh_spec(mesh: Any, extra: dict[str, Any]) -> Optional[str]:
    """The mesh spec from model_args. lm-eval's `simple_evaluate(model_args="a=b,...")` splits
    `mesh=data:1,fsdp:-1,tensor:1` at every comma, so the later axes arrive as keys with no
    value ("fsdp:-1": ""); they are joined back here. `;` and `/` may separate the axes too."""
    parts = [] if mesh in (None, "") else [str(mesh)]
    for key in [k for k, v in extra.items() if _MESH_PART.match(k) and v in ("", None)]:
        extra.pop(key)
        parts.append(key)
    if not parts:
        return None
    return ",".join(parts).replace(";", ",").replace("/", ",")


@register_model("easylemur")
class EasylemurLM(TemplateLM):
    """lm-eval's LM over `easylemur.load(path)`. model_args: `path` (a workdir, checkpoint step
    dir or HF dir; `pretrained` is accepted as its alias), `dtype` (float32 default, bfloat16),
    `step`, `batch_size`, `max_length` (default: the model's max_position_embeddings),
    `max_gen_toks` (default 256), `mesh` (e.g. data:1,fsdp:-1,tensor:1). From Python, `loaded`
    takes a model already loaded (an `easylemur.load` LoadedModel) instead of `path`; its
    parameters are read at every call, so they may be swapped between evaluations. Progress goes
    to stderr (`api.Progress`) under `progress_label` (a suite names its row there)."""

    progress_label = "easylemur"

    def __init__(self, path: Optional[str] = None, pretrained: Optional[str] = None, dtype: Optional[str] = None,
                 step: Optional[int] = None, batch_size: int | str | None = None, max_batch_size: Any = None,
                 max_length: Optional[int] = None, max_gen_toks: int = DEFAULT_MAX_GEN_TOKS, mesh: Optional[str] = None,
                 device: Any = None, loaded: Any = None, **extra: Any):
        super().__init__()
        from easylemur.generate.api import load
        from easylemur.model.llama import Llama, lm_head_kernel

        mesh = _mesh_spec(mesh, extra)
        extra.pop("trust_remote_code", None)  # lm-eval's CLI may add it for every model; nothing to trust here
        if extra:
            raise InputError(f"model_args {sorted(extra)[0]!r}: not an easylemur model argument (path, dtype, step, "
                             "batch_size, max_length, max_gen_toks, mesh)")
        if path is None:
            path = pretrained
        if loaded is not None:  # from Python: a model already in memory (the train loop's task evals)
            self.model, path = loaded, path or loaded.path
        else:
            if not path:
                raise InputError("model_args path: missing; give path=CHECKPOINT_OR_HF_DIR")
            if dtype in ("auto", ""):
                dtype = None
            self.model = load(str(path), dtype=dtype, step=None if step is None else int(step), mesh=mesh)
        self.tok = self.model.tokenizer
        if self.tok is None:
            raise InputError(f"model_args path={path}: no tokenizer beside the model; lm-eval's tasks are text")
        # requests are encoded as lm-eval's hf backend encodes them: with the tokenizer transformers
        # loads (a directory's tokenizer.json beside its tokenizer.model)
        self.enc = self.tok.transformers_encoder
        limit = self.model.config.max_position_embeddings
        self._max_length = limit if max_length in (None, "") else int(max_length)
        if not 1 < self._max_length <= limit:
            raise InputError(f"model_args max_length={max_length}: must be in [2, {limit}] "
                             f"(the model's max_position_embeddings)")
        # lm-eval passes its --batch_size (default 1) here; "auto" has nothing to probe on a JAX device
        if batch_size in (None, "", "auto") or str(batch_size).startswith("auto"):
            batch_size = DEFAULT_BATCH_SIZE
        self._batch_size = int(batch_size)
        if self._batch_size < 1:
            raise InputError(f"batch_size={batch_size}: must be at least 1")
        self._max_gen_toks = int(max_gen_toks)
        if self._max_gen_toks < 1:
            raise InputError(f"model_args max_gen_toks={max_gen_toks}: must be at least 1")
        self.path = str(path)
        cfg, model_mesh = self.model.config, self.model.mesh

        def score(params, ids, positions, segments, targets, weights):
            hidden, _ = Llama(cfg, model_mesh).apply({"params": params}, ids, positions, segments, return_hidden=True)
            head = lm_head_kernel(params, cfg).astype(cfg.dtype)
            B, T, _ = hidden.shape
            c = _head_chunk(B, T, cfg.vocab_size)

            def chunk(xs):  # the LM head over c positions: [B, c, V] logits never exist for the whole row
                h, tgt, w = xs
                logits = jax.lax.dot_general(h, head, (((2,), (0,)), ((), ())), preferred_element_type=jnp.float32)
                lp = jnp.take_along_axis(logits, tgt[..., None], axis=-1)[..., 0] - jax.nn.logsumexp(logits, axis=-1)
                greedy = (jnp.argmax(logits, axis=-1) == tgt) | (w == 0)
                return jnp.sum(lp * w, axis=-1), jnp.all(greedy, axis=-1)

            def split(x):  # [B, T, ...] -> [T / c, B, c, ...]
                return x.reshape(B, T // c, c, *x.shape[2:]).swapaxes(0, 1)

            sums, greedy = jax.lax.map(chunk, (split(hidden.astype(cfg.dtype)), split(targets), split(weights)))
            return jnp.sum(sums, axis=0), jnp.all(greedy, axis=0)

        # one program per (batch_size, bucket) shape: `score_shapes` lists them (tests count compiles)
        self._score = jax.jit(score)
        self.score_shapes: set[tuple[int, int]] = set()
        self._special = {i for i in (self.tok.bos_id, self.tok.eos_id, self.tok.pad_id, self.tok.im_start_id,
                                     self.tok.im_end_id) if i is not None and i >= 0}
        if self.tok.kind == "spm":
            self._special.add(self.tok.sp.unk_id())  # HF marks <unk> special: skipped when decoding

    # ------------------------------------------------------------------ what lm-eval asks about

    @property
    def eot_token_id(self) -> int:
        return self.tok.eos_id

    @property
    def prefix_token_id(self) -> int:
        # the one BOS every easylemur document starts with (EOS for a tokenizer without BOS, as HFLM)
        return self.tok.bos_id if self.tok.bos_id is not None else self.tok.eos_id

    @property
    def max_length(self) -> int:
        return self._max_length

    @property
    def max_gen_toks(self) -> int:
        return self._max_gen_toks

    @property
    def batch_size(self) -> int:
        return self._batch_size

    @property
    def tokenizer_name(self) -> str:
        return self.tok.model_path.replace("/", "__")

    def chat_template(self, chat_template: bool | str = False) -> Optional[str]:
        """The model's chat template (`LoadedModel.chat_renderer`: ChatML's or the tokenizer's
        own, as its HF export carries it); an InputError for a base model, which has none."""
        if chat_template is False or chat_template is None:
            return None
        return self.model.chat_renderer().template

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The conversation as HFLM renders it from the same template: transformers'
        apply_chat_template(tokenize=False, add_generation_prompt, continue_final_message=not
        add_generation_prompt), and, when the template refuses it, again without the system
        messages. BOS is in the text when the template writes it; tok_encode then adds no second
        one (HFLM's has_bos_prefix rule)."""
        from easylemur.chat.template import TemplateRejected

        renderer = self.model.chat_renderer()
        try:
            return renderer.text(chat_history, add_generation_prompt, continue_final_message=not add_generation_prompt)
        except TemplateRejected:  # HFLM retries without the system role (templates that refuse one)
            chat_history = [m for m in chat_history if m["role"] != "system"]
            try:
                return renderer.text(chat_history, add_generation_prompt,
                                     continue_final_message=not add_generation_prompt)
            except TemplateRejected as e:
                raise InputError(f"--apply_chat_template: {e}") from None

    # ------------------------------------------------------------------ tokens

    def tok_encode(self, string: str, add_special_tokens: Optional[bool] = None, left_truncate_len: Optional[int] = None,
                   **kwargs: Any) -> list[int]:
        """`[BOS] + encode(string)` (add_special_tokens None or True), as the HF export's tokenizer
        (add_bos_token true) gives HFLM. A string that already starts with the BOS piece's text
        (a chat template wrote it) is encoded as it is, with no BOS added, as HFLM's
        `has_bos_prefix` rule: its text gives the BOS, and what follows is encoded as after one."""
        bos = self.tok.bos_id
        if bos is not None and add_special_tokens is not False:
            piece = self.tok.id_to_piece(bos)
            if add_special_tokens is None and piece and string.startswith(piece):
                ids = self.enc.encode(string)
            else:
                ids = [bos] + self.enc.encode(string)
        else:
            ids = self.enc.encode(string)
        return ids[-left_truncate_len:] if left_truncate_len else ids

    def tok_decode(self, ids: Sequence[int]) -> str:
        """Text of generated ids, special tokens skipped (HFLM decodes with skip_special_tokens)."""
        return self.tok.decode([int(i) for i in ids if int(i) not in self._special])

    # ------------------------------------------------------------------ scoring

    def _put(self, x: np.ndarray) -> Any:
        mesh = self.model.mesh
        if mesh is None:
            return x
        from easylemur.sharding import logical_to_spec

        logical = ("batch",) + (None,) * (x.ndim - 1)
        return jax.device_put(x, NamedSharding(mesh, logical_to_spec(logical, x.shape, mesh)))

    def score_rows(self, rows: Sequence[tuple[list[int], int]], disable_tqdm: bool = True) -> list[tuple[float, bool]]:
        """(sum of log-probs, all greedy) of the last `n` tokens of each `ids`, each predicted
        from the tokens before it: `rows` are (ids, n) with 1 <= n < len(ids) <= max_length + 1."""
        L, B = self.max_length, self.batch_size
        out: list[Optional[tuple[float, bool]]] = [None] * len(rows)
        # longest first: similar lengths share a batch, and a batch's bucket is its first row's
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i][0]))
        progress = Progress(f"{self.progress_label}: scored", 0 if disable_tqdm else len(rows), "rows")
        for start in range(0, len(order), B):
            chunk = order[start:start + B]
            T = length_bucket(len(rows[chunk[0]][0]) - 1, L)
            ids = np.zeros((B, T), np.int32)
            targets = np.zeros((B, T), np.int32)
            positions = np.zeros((B, T), np.int32)
            segments = np.zeros((B, T), np.int32)  # 0: padding, which no real token attends to
            weights = np.zeros((B, T), np.float32)
            for r, i in enumerate(chunk):
                toks, n = rows[i]
                m = len(toks) - 1
                ids[r, :m], targets[r, :m] = toks[:-1], toks[1:]
                positions[r, :m], segments[r, :m] = np.arange(m), 1
                weights[r, m - n:m] = 1.0
            self.score_shapes.add((B, T))
            sums, greedy = self._score(self.model.params, *(self._put(a) for a in (ids, positions, segments,
                                                                                   targets, weights)))
            sums, greedy = np.asarray(sums), np.asarray(greedy)
            for r, i in enumerate(chunk):
                out[i] = (float(sums[r]), bool(greedy[r]))
            progress.update(len(chunk))
        progress.close()
        return out  # type: ignore[return-value]

    def _loglikelihood_tokens(self, requests: list[tuple[tuple[str, str] | None, list[int], list[int]]],
                              disable_tqdm: bool = False, **kwargs: Any) -> list[tuple[float, bool]]:
        rows = []
        for _, context_enc, continuation_enc in requests:
            if not continuation_enc:
                raise InputError("loglikelihood: a continuation encodes to no tokens; nothing to score")
            if len(continuation_enc) > self.max_length:
                raise InputError(f"loglikelihood: a continuation of {len(continuation_enc)} tokens is longer than "
                                 f"max_length={self.max_length}")
            # HFLM's left truncation: the last max_length + 1 tokens (max_length inputs)
            toks = (context_enc + continuation_enc)[-(self.max_length + 1):]
            rows.append((toks, len(continuation_enc)))
        answers = self.score_rows(rows, disable_tqdm=disable_tqdm)
        for (request, _, _), answer in zip(requests, answers):
            if request is not None:
                self.cache_hook.add_partial("loglikelihood", request, answer)
        return answers

    def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[float]:
        """Each document: one BOS (the prefix token), then its tokens scored in disjoint windows of
        max_length; all windows of all documents are batched together."""
        windows, owner = [], []
        for k, (string,) in enumerate(req.args for req in requests):
            tokens = self.tok_encode(string, add_special_tokens=False)
            for context, pred in map(lm_utils.make_disjoint_window, lm_utils.get_rolling_token_windows(
                    token_list=tokens, prefix_token=self.prefix_token_id, max_seq_len=self.max_length, context_len=1)):
                windows.append((None, context, pred))
                owner.append(k)
        totals = [0.0] * len(requests)
        for k, (lp, _) in zip(owner, self._loglikelihood_tokens(windows, disable_tqdm=disable_tqdm)):
            totals[k] += lp
        for req, total in zip(requests, totals):
            self.cache_hook.add_partial("loglikelihood_rolling", tuple(req.args), total)
        return totals

    # ------------------------------------------------------------------ generation

    def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
        from easylemur.generate.engine import truncate_at_stops

        results: list[Optional[str]] = [None] * len(requests)
        groups: dict[str, list[int]] = {}
        for i, req in enumerate(requests):
            groups.setdefault(json.dumps(req.args[1], sort_keys=True, default=str), []).append(i)
        eos_text = self.tok.id_to_piece(self.tok.eos_id)  # HFLM adds the EOS piece's text to `until`
        progress = Progress(f"{self.progress_label}: generated", 0 if disable_tqdm else len(requests), "requests")
        for members in groups.values():
            kwargs = normalize_gen_kwargs(dict(requests[members[0]].args[1]), self.max_gen_toks)
            until = handle_stop_sequences(kwargs.pop("until", None), eos=eos_text)
            max_gen_toks = int(kwargs.pop("max_gen_toks"))
            unknown = sorted(k for k in kwargs if k not in _GEN_OPTIONS)
            if unknown:
                raise InputError(f"generation_kwargs {unknown[0]!r}: easylemur's decoder takes only "
                                 f"{', '.join(_GEN_OPTIONS)}, until and max_gen_toks")
            # normalize_gen_kwargs set do_sample and zeroed the temperature without it; do_sample
            # with temperature 0 samples at HF's default temperature, 1
            temperature = (float(kwargs.get("temperature") or 0.0) or 1.0) if kwargs.get("do_sample") else 0.0
            max_ctx = self.max_length - max_gen_toks
            if max_ctx < 1:
                raise InputError(f"max_gen_toks={max_gen_toks}: leaves no room for a prompt within "
                                 f"max_length={self.max_length}")
            prompts = {i: self.tok_encode(requests[i].args[0], left_truncate_len=max_ctx) for i in members}
            order = sorted(members, key=lambda i: -len(prompts[i]))
            base_seed = int(kwargs.get("seed") or 0)
            for start in range(0, len(order), self.batch_size):
                chunk = order[start:start + self.batch_size]
                new = self.model.generate([prompts[i] for i in chunk], max_new_tokens=max_gen_toks,
                                          temperature=temperature, top_k=int(kwargs.get("top_k") or 0),
                                          top_p=float(kwargs.get("top_p") or 1.0),
                                          seed=[(base_seed * 1_000_003 + i) % 2**31 for i in chunk])
                for i, ids in zip(chunk, new):
                    text = truncate_at_stops(self.tok_decode(ids), until)
                    results[i] = text
                    self.cache_hook.add_partial("generate_until", requests[i].args, text)
                progress.update(len(chunk))
        progress.close()
        return results  # type: ignore[return-value]

    def get_model_info(self) -> dict:
        return {"model_path": self.path, "max_length": self.max_length, "dtype": self.model.config.dtype}
