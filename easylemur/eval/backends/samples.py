"""Completions of HumanEval/MBPP problems from a loaded model: the one place prompts are built
and decoded for pass@k (the CLI, the suite and the train loop's task evals use it)."""

from __future__ import annotations

import sys
from typing import Any, Optional

from easylemur.errors import InputError
from easylemur.eval.api import Progress, Task


def prompt_ids(task: Task, problem: Any, model: Any) -> list[int]:
    """A problem's prompt as token ids: a chat prompt in the model's chat template
    (`LoadedModel.chat_prompt_ids`, the assistant's turn opened with the task's prefix), else
    BOS + the text, as every pre-training document starts (no BOS for a tokenizer without one)."""
    prompt = task.prompt(problem)
    tok = model.tokenizer
    if prompt.messages:
        return model.chat_prompt_ids(list(prompt.messages), prompt.assistant_prefix)
    return ([tok.bos_id] if tok.bos_id is not None else []) + tok.encode(prompt.text)


DEFAULT_MAX_NEW_TOKENS = 512  # a completion's length unless the caller sets it (then what fits the context)


def fit_context(task: Task, model: Any, prompts: list[tuple[Any, list[int]]], asked: Optional[int],
                default: int = DEFAULT_MAX_NEW_TOKENS) -> tuple[int, list[tuple[Any, list[int]]], str]:
    """(new tokens per sample, the prompts to decode, a note for stderr) for `prompts`
    ((problem, ids) pairs) on `model`, decided before anything is decoded. `asked`: kept when
    the context holds it beside the longest prompt, else the decoder's own error (in its words),
    raised now. None: `default`, cut to what the context leaves beside the longest prompt; a
    problem whose prompt alone fills the context is left out (into `task.skipped`, with why).
    The note ("" when nothing changed) says what was cut and left out."""
    limit = model.config.max_position_embeddings
    if asked is not None:
        longest = max(len(ids) for _, ids in prompts)
        if longest + asked > limit:  # generate.Decoder's check and words, before any decoding
            raise InputError(
                f"max_new_tokens={asked}: the longest prompt ({longest} tokens) plus the new tokens ({longest + asked}) "
                f"exceed the model's context, max_position_embeddings={limit}; "
                + (f"at most {limit - longest} new tokens fit" if longest < limit else "the prompt alone fills it"))
        return asked, prompts, ""
    fit = [(p, ids) for p, ids in prompts if len(ids) < limit]
    over = [(p, ids) for p, ids in prompts if len(ids) >= limit]
    if not fit:
        raise InputError(f"every prompt fills the model's context, max_position_embeddings={limit} (the shortest has "
                         f"{min(len(ids) for _, ids in prompts)} tokens): no new token fits")
    top, top_ids = max(fit, key=lambda r: len(r[1]))
    room = limit - len(top_ids)
    notes = []
    if room < default:
        notes.append(f"max_new_tokens {room}, not the default {default}: the context (max_position_embeddings={limit}) "
                     f"leaves {room} beside the longest prompt ({top.task_id}, {len(top_ids)} tokens)")
    if over:
        why = f"its prompt fills the model's context (max_position_embeddings={limit})"
        task.skipped += [(p, why) for p, _ in over]
        gone = {id(p) for p, _ in over}
        task.problems = [p for p in task.problems if id(p) not in gone]
        notes.append(f"{len(over)} problem{'s' if len(over) > 1 else ''} left out, the prompt alone as long as the "
                     "context: " + ", ".join(f"{p.task_id} ({len(ids)} tokens)" for p, ids in over[:5])
                     + (", ..." if len(over) > 5 else ""))
    return min(default, room), fit, "; ".join(notes)


def generate_samples(task: Task, model: Any, n: int, *, batch_size: int, max_new_tokens: Optional[int],
                     temperature: float, top_p: float = 0.95, seed: int = 0,
                     progress: str = "") -> list[tuple[Any, str]]:
    """(task_id, extracted code) for `n` samples of every problem of `task`, decoded by
    `model` (an `easylemur.load` model) in batches of `batch_size` prompts. Sample i gets its
    own seed, so it does not depend on the batch it lands in. `max_new_tokens` is checked against
    the context before anything is decoded (`fit_context`; None is the default, fitted to the
    longest prompt, with one line on stderr when cut). `progress`: the label of a progress line
    on stderr (`api.Progress`; none when empty)."""
    from easylemur.generate.engine import truncate_at_stops

    tok = model.tokenizer
    if tok is None:
        raise InputError(f"{model.path}: no tokenizer, cannot encode the prompts")
    prompts = [(p, prompt_ids(task, p, model)) for p in task.problems]
    if not prompts:
        return []
    max_new_tokens, prompts, why = fit_context(task, model, prompts, max_new_tokens)
    if why:
        print(f"{task.name}: {why}", file=sys.stderr, flush=True)
    rows = [row for row in prompts for _ in range(n)]  # (problem, prompt ids), n of each
    # similar lengths together: fewer padded positions per batch and fewer shape buckets
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][1]))
    codes: list[Optional[str]] = [None] * len(rows)
    with Progress(progress, len(rows) if progress else 0) as shown:
        for start in range(0, len(order), batch_size):
            chunk = order[start:start + batch_size]
            seeds = [(seed * 1_000_003 + i) % 2**31 for i in chunk]
            new = model.generate([rows[i][1] for i in chunk], max_new_tokens=max_new_tokens, temperature=temperature,
                                 top_p=top_p, seed=seeds)
            for i, ids in zip(chunk, new):
                codes[i] = task.extract(rows[i][0], truncate_at_stops(tok.decode(ids), task.stops()))
            shown.update(len(chunk))
    return [(rows[i][0].task_id, codes[i]) for i in range(len(rows))]
