"""Completions of HumanEval/MBPP problems from a loaded model: the one place prompts are built
and decoded for pass@k (the CLI, the suite and the train loop's task evals use it)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from easylemur.errors import InputError
from easylemur.eval.api import Task


def prompt_ids(task: Task, problem: Any, model: Any) -> list[int]:
    """A problem's prompt as token ids: a chat prompt in the model's chat template
    (`LoadedModel.chat_prompt_ids`, the assistant's turn opened with the task's prefix), else
    BOS + the text, as every pre-training document starts (no BOS for a tokenizer without one)."""
    prompt = task.prompt(problem)
    tok = model.tokenizer
    if prompt.messages:
        return model.chat_prompt_ids(list(prompt.messages), prompt.assistant_prefix)
    return ([tok.bos_id] if tok.bos_id is not None else []) + tok.encode(prompt.text)


def generate_samples(task: Task, model: Any, n: int, *, batch_size: int, max_new_tokens: int, temperature: float,
                     top_p: float = 0.95, seed: int = 0, progress: Optional[Callable[[int], None]] = None
                     ) -> list[tuple[Any, str]]:
    """(task_id, extracted code) for `n` samples of every problem of `task`, decoded by
    `model` (an `easylemur.load` model) in batches of `batch_size` prompts. Sample i gets its
    own seed, so it does not depend on the batch it lands in; `progress(k)` after each batch."""
    from easylemur.generate.engine import truncate_at_stops

    tok = model.tokenizer
    if tok is None:
        raise InputError(f"{model.path}: no tokenizer, cannot encode the prompts")
    rows = []  # (problem, prompt ids)
    for p in task.problems:
        ids = prompt_ids(task, p, model)
        rows += [(p, ids)] * n
    # similar lengths together: fewer padded positions per batch and fewer shape buckets
    order = sorted(range(len(rows)), key=lambda i: len(rows[i][1]))
    codes: list[Optional[str]] = [None] * len(rows)
    for start in range(0, len(order), batch_size):
        chunk = order[start:start + batch_size]
        seeds = [(seed * 1_000_003 + i) % 2**31 for i in chunk]
        new = model.generate([rows[i][1] for i in chunk], max_new_tokens=max_new_tokens, temperature=temperature,
                             top_p=top_p, seed=seeds)
        for i, ids in zip(chunk, new):
            codes[i] = task.extract(rows[i][0], truncate_at_stops(tok.decode(ids), task.stops()))
        if progress is not None:
            progress(len(chunk))
    return [(rows[i][0].task_id, codes[i]) for i in range(len(rows))]
