"""A chat function over a model in this process, for agent episodes inside a training run
(`eval.tasks=m_humaneval`): the episodes' threads each ask for a reply; one decoding thread
gathers the requests that are waiting and decodes them as one batch (`LoadedModel.generate`:
one compiled program per shape bucket, reused at every turn and every eval), so the episodes
advance together while their sandbox work runs beside the decoding.

Prompts are rendered as the server renders them (the model's chat template through
`LoadedModel.chat_prompt_ids`), and each reply stops at the model's stop ids (`<|im_end|>` for a
ChatML model, `<|eot_id|>` for Llama-3's template).
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any, Sequence

# how long the decoding thread waits for more requests once one is queued: episodes whose
# sandbox work just ended join the batch instead of waiting for the next one
GATHER_S = 0.05


class LocalChat:
    """`chat(messages) -> str` for `eval.agent.episode.run_episodes` (a str is a text prompt, completed,
    as an endpoint's /v1/completions does); `close()` ends the decoding thread."""

    def __init__(self, model: Any, *, max_tokens: int, temperature: float = 0.0, batch_size: int = 8, seed: int = 0,
                 max_prompt_tokens: int = 0):
        from easylemur.errors import InputError

        tok = model.tokenizer
        if tok is None:
            raise InputError(f"{model.path}: no tokenizer; agent evals need one")
        model.chat_renderer()  # a model without a chat template: an InputError now, not at the first turn
        self.model, self.tok = model, tok
        self.max_tokens, self.temperature, self.batch_size, self.seed = max_tokens, temperature, batch_size, seed
        self.max_prompt_tokens = max_prompt_tokens
        self.requests: queue.Queue = queue.Queue()
        self.calls = 0
        self.thread = threading.Thread(target=self._loop, name="easylemur-local-chat", daemon=True)
        self.thread.start()

    def __call__(self, messages: "Sequence[dict] | str") -> str:
        ids = self.model.text_prompt_ids(messages) if isinstance(messages, str) else \
            self.model.chat_prompt_ids([{"role": m["role"], "content": m["content"]} for m in messages])
        if self.max_prompt_tokens and len(ids) > self.max_prompt_tokens:
            # the conversation outgrew the context: the episode ends as a model that says nothing would
            return ""
        done: Future = Future()
        self.requests.put((ids, done))
        return done.result()

    def _loop(self) -> None:
        while True:
            first = self.requests.get()
            if first is None:
                return
            batch = [first]
            try:
                while len(batch) < self.batch_size:
                    item = self.requests.get(timeout=GATHER_S)
                    if item is None:
                        self.requests.put(None)
                        break
                    batch.append(item)
            except queue.Empty:
                pass
            try:
                seeds = [(self.seed * 1_000_003 + self.calls + i) % 2**31 for i in range(len(batch))]
                self.calls += len(batch)
                new = self.model.generate([ids for ids, _ in batch], max_new_tokens=self.max_tokens,
                                          temperature=self.temperature, seed=seeds)
                for (_, done), out in zip(batch, new):
                    done.set_result(self.tok.decode(out))
            except BaseException as e:  # noqa: BLE001 - each waiting episode gets the error
                for _, done in batch:
                    if not done.done():
                        done.set_exception(e)

    def close(self) -> None:
        self.requests.put(None)
        self.thread.join(timeout=60)
