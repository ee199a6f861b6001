"""The OpenAI-compatible server: its continuous-batching scheduler, request validation
(`Service`) and `Server`, which puts the HTTP side (`http.py`: uvicorn serving a Starlette app)
in front of them.

One scheduler thread owns the `SlotEngine` (docs/design.md "Serving"): between decoding steps
it admits queued requests into free slots (one prefill each; the client with the fewest
running first), then runs one step for every active slot, hands each request its token, and
frees the slots of requests that finished (a stop id, a stop string, max_tokens, the cache row
full) or whose client went away. The HTTP side only validates, enqueues and relays events, so
a slow client never stalls the batch; one request's failure is its own.

Requests are answered as vLLM answers them (docs/design.md "Serving"): chat prompts rendered
with the model's own chat template (`LoadedModel.chat_renderer`, as transformers'
apply_chat_template; a base model's chat is a 400 unless the server was given a template), an
unknown `model` a 404, every malformed field a 400 naming it (text that is not UTF-8, a prompt
over the context), `max_tokens` defaulting to 16 for completions and to `default_max_tokens`
for chat, and a client that goes away costs no traceback.
"""

from __future__ import annotations

import math
import queue
import socket
import sys
import threading
import time
import traceback
import uuid
from typing import Any, Callable, Optional, Sequence


from easylemur.errors import InputError
from easylemur.generate.detok import IncrementalText
from easylemur.serve.http import RequestError
from easylemur.generate.slots import TOP_LOGPROBS, SlotEngine
from easylemur.serve import CHAT_MAX_TOKENS, COMPLETION_MAX_TOKENS
from easylemur.tokenizer.spm import check_text

# How long a handler waits for the scheduler before it gives up on a request (seconds).
REQUEST_TIMEOUT = 600.0
# What a client is told when serving its request failed inside the server (the cause goes to stderr)
INTERNAL_ERROR = "the server failed while serving this request (see the server's log)"


class Job:
    """One prompt being served: the scheduler fills it, a handler reads `events` (`wake`, when
    set, is called after each event: how an asyncio handler learns of one)."""

    def __init__(self, ids: list[int], *, max_tokens: int, temperature: float, top_p: float, seed: int,
                 stop_ids: Sequence[int], stop: Sequence[str], logprobs: Optional[int], echo: bool, tokenizer,
                 client: str = ""):
        self.ids, self.max_tokens = ids, max_tokens
        self.temperature, self.top_p, self.seed = temperature, top_p, seed
        self.stop_ids, self.stop = set(stop_ids), [s for s in stop if s]
        self.logprobs, self.echo, self.tok = logprobs, echo, tokenizer
        self.client = client  # who sent it: the scheduler takes turns between clients
        self.events: queue.Queue = queue.Queue()
        self.wake: Optional[Callable[[], None]] = None
        self.cancelled = threading.Event()
        self.new: list[int] = []
        self.entries: list[tuple[int, float, list[tuple[int, float]]]] = []  # (id, logprob, top) per new token
        # the new text as it became final, and each new token's share of it (a token that ends half a
        # character has "", the one completing it the character): decoded once, a window at a time
        self.detok = IncrementalText(tokenizer) if tokenizer is not None else None
        self.text = ""
        self.pieces: list[str] = []
        self.starts: list[int] = []  # where each new token's text starts in `text`
        self.searched = 0  # `text` before this offset holds no stop string
        self.sent_chars = 0  # how much of the new text went out
        self.sent_entries = 0
        self.prompt_entries: list[tuple[int, Optional[float], list[tuple[int, float]]]] = []

    def put(self, event: tuple) -> None:
        self.events.put(event)
        if self.wake is not None:
            self.wake()

    # --- called by the scheduler thread

    def add(self, token: int, logprob: float, top: list[tuple[int, float]]) -> None:
        """A new token: its entry, and the text it makes final."""
        self.new.append(token)
        self.entries.append((token, logprob, top))
        piece = self.detok.push([token]) if self.detok is not None else ""
        self.starts.append(len(self.text))
        self.pieces.append(piece)
        self.text += piece

    def publish(self, finish: Optional[str]) -> Optional[str]:
        """Sends the new text that can no longer change: held back while it could be the start of
        a stop string (half a character is never in `text`); at the end, cut at the first stop.
        Linear in the reply: each step looks at the text it added and a stop string's length
        before it."""
        if finish is not None and self.detok is not None:
            tail = self.detok.finish()  # a reply that ends in half a character: as it decodes
            if tail:
                self.text += tail
                self.pieces[-1] += tail
        text = self.text
        cut, hit = len(text), False
        longest = max((len(s) for s in self.stop), default=0)
        start = max(0, self.searched - longest + 1)
        for s in self.stop:
            i = text.find(s, start)
            if 0 <= i < cut:
                cut, hit = i, True
        self.searched = len(text)
        if hit:
            finish = finish or "stop"
        if finish is None:
            safe = cut
            for s in self.stop:  # a suffix that is a prefix of a stop string may still become one
                for k in range(min(len(s) - 1, len(text)), 0, -1):
                    if text.endswith(s[:k]):
                        safe = min(safe, len(text) - k)
                        break
            cut = max(safe, self.sent_chars)
        delta = text[self.sent_chars:cut]
        if not delta and finish is None:
            return None
        # a stop string cuts the token list too: the tokens whose text starts before it
        upto = (next((i for i in range(1, len(self.starts)) if self.starts[i] >= cut), len(self.entries))
                if hit else len(self.entries))
        entries = [e + (self.pieces[i],) for i, e in enumerate(self.entries[self.sent_entries:upto], self.sent_entries)]
        self.sent_chars, self.sent_entries = cut, upto
        self.put(("data", delta, entries if self.logprobs is not None else [], finish))
        return finish


def piece_texts(tok, ids: list[int]) -> list[str]:
    """Each token's text: what it adds to the decoded text (`detok.IncrementalText`: a token that
    ends half a character adds "", the one completing it the character); linear in `ids`."""
    if tok is None:
        return [""] * len(ids)
    detok = IncrementalText(tok)
    out = [detok.push([t]) for t in ids]
    if out:
        out[-1] += detok.finish()
    return out


class Scheduler:
    """Owns the engine; admits, steps and retires jobs in one thread."""

    def __init__(self, engine: SlotEngine, max_queue: int = 64):
        self.engine = engine
        self.max_queue = max_queue
        self.pending: list[Job] = []
        self.running: dict[int, Job] = {}
        self.cond = threading.Condition()
        self.stopped = False
        self.steps = 0
        self.thread = threading.Thread(target=self._loop, name="easylemur-scheduler", daemon=True)
        self.thread.start()

    @property
    def share(self) -> int:
        """The most queued prompts one client may have: half the queue, so that others always find room."""
        return max(1, self.max_queue // 2)

    def submit(self, jobs: list[Job]) -> None:
        with self.cond:
            if len(self.pending) + len(jobs) > self.max_queue:
                raise RequestError(f"the server is busy: {len(self.pending)} requests are queued (--max-queue "
                                   f"{self.max_queue}); retry later", None, 503, "server_busy")
            mine = sum(j.client == jobs[0].client for j in self.pending) if jobs else 0
            if mine + len(jobs) > self.share:
                raise RequestError(f"the server is busy: {mine} of your requests are queued (at most {self.share}, "
                                   "half of --max-queue); retry later", None, 503, "server_busy")
            self.pending.extend(jobs)
            self.cond.notify()

    def close(self) -> None:
        with self.cond:
            self.stopped = True
            self.cond.notify()
        self.thread.join(timeout=10)

    def _finish(self, slot: Optional[int], job: Job, finish: Optional[str]) -> None:
        if slot is not None:
            self.engine.release(slot)
            self.running.pop(slot, None)
        if finish is not None:
            job.publish(finish)

    def _fail(self, slot: Optional[int], job: Job, message: str = INTERNAL_ERROR) -> None:
        """Ends one job with an error (its handler answers 500) and frees its slot; the cause goes
        to the server's stderr, never to the client."""
        traceback.print_exc(file=sys.stderr)
        if slot is not None:
            try:
                self.engine.release(slot)
            finally:
                self.running.pop(slot, None)
        job.put(("error", message))

    def _admit(self, slot: int, job: Job) -> None:
        eng = self.engine
        try:
            last, prompt = eng.prefill(slot, job.ids, temperature=job.temperature, top_p=job.top_p, seed=job.seed,
                                       echo=job.echo and job.logprobs is not None)
            if prompt is not None:
                k = job.logprobs or 0
                job.prompt_entries = [(job.ids[0], None, [])] + [
                    (job.ids[i + 1], float(prompt.logprobs[i]),
                     list(zip(prompt.top_ids[i, :k].tolist(), prompt.top_logprobs[i, :k].tolist())))
                    for i in range(len(job.ids) - 1)]
            if job.max_tokens == 0:
                self._finish(slot, job, "length")
                return
            self.running[slot] = job
        except Exception:  # a prompt the engine cannot take fails its own request only
            self._fail(slot, job)

    def _next_pending(self) -> Optional[Job]:
        """The next job to admit: the oldest of the client (an address) with the fewest jobs
        running, so that one client's many prompts or streams never starve another's (cancelled
        ones dropped). A prompt whose prefill program is not compiled yet waits while it compiles
        on the engine's background thread, unless nothing else is decoding (then nobody waits
        for its compile)."""
        self.pending = [j for j in self.pending if not j.cancelled.is_set()]
        ready = [j for j in self.pending
                 if self.engine.prefill_ready(len(j.ids), j.echo and j.logprobs is not None)]
        if not ready and not self.running:
            ready = self.pending
        if not ready:
            return None
        load: dict[str, int] = {}
        for j in self.running.values():
            load[j.client] = load.get(j.client, 0) + 1
        job = min(ready, key=lambda j: load.get(j.client, 0))  # min keeps the oldest of equals
        self.pending.remove(job)
        return job

    def _loop(self) -> None:
        while True:
            try:
                if not self._tick():
                    return
            except Exception:  # a bug between jobs: the running ones fail, the loop goes on
                for slot, job in list(self.running.items()):
                    self._fail(slot, job)

    def _tick(self) -> bool:
        """Admits, steps and publishes once; False when the server is shutting down."""
        eng = self.engine
        with self.cond:
            while not self.stopped and not self.pending and not self.running:
                self.cond.wait()
            if self.stopped:
                for job in self.pending + list(self.running.values()):
                    job.put(("error", "the server is shutting down"))
                return False
            admit = []
            free = [s for s in range(eng.slots) if s not in self.running]
            while free:
                job = self._next_pending()
                if job is None:
                    break
                admit.append((free.pop(0), job))
                self.running[admit[-1][0]] = job  # reserved now; filled by _admit
        for slot, job in admit:
            self.running.pop(slot)
            self._admit(slot, job)
        for slot, job in list(self.running.items()):
            if job.cancelled.is_set():
                self._finish(slot, job, None)
        if not self.running:
            return True
        try:
            out = eng.step()
        except Exception:  # the engine is broken: fail every running request, keep serving
            for slot, job in list(self.running.items()):
                self._fail(slot, job, "decoding failed (see the server's log)")
            return True
        self.steps += 1
        for slot, job in list(self.running.items()):
            try:
                t = int(out.tokens[slot])
                if t in job.stop_ids:
                    self._finish(slot, job, "stop")
                    continue
                k = job.logprobs or 0
                job.add(t, float(out.logprobs[slot]),
                        list(zip(out.top_ids[slot, :k].tolist(), out.top_logprobs[slot, :k].tolist())))
                finish = "length" if len(job.new) >= job.max_tokens or eng.room(slot) <= 0 else None
                if job.publish(finish) is not None:
                    self._finish(slot, job, None)
            except Exception:  # one request's failure is its own
                self._fail(slot, job)
        return True


# ---------------------------------------------------------------------- request parsing

_TYPES = {
    "model": (str,), "prompt": (str, list), "messages": (list,), "max_tokens": (int,), "max_completion_tokens": (int,),
    "temperature": (int, float), "top_p": (int, float), "seed": (int,), "stop": (str, list), "stream": (bool,),
    "logprobs": (int, bool), "top_logprobs": (int,), "echo": (bool,), "n": (int,), "user": (str,),
}


def _field(body: dict, name: str, default: Any) -> Any:
    v = body.get(name, default)
    if v is None:
        return default
    types = _TYPES[name]
    if isinstance(v, bool) and bool not in types or not isinstance(v, types):
        raise RequestError(f"'{name}' must be of type {' or '.join(t.__name__ for t in types)}, got {type(v).__name__}",
                           name)
    return v


def _utf8(text: str, where: str, param: str) -> str:
    """`text`, or a 400 naming `where` for text the tokenizer cannot take (a lone surrogate,
    which JSON's \\ud800 escape makes and sentencepiece/tokenizers fail on with a cast error)."""
    try:
        return check_text(text, f"'{where}'")
    except InputError as e:
        raise RequestError(str(e), param) from None


def _longest_piece(tok) -> int:
    """The most characters one token of `tok` can stand for (its longest vocabulary entry, at least
    16): a bound on a text's tokens from its length."""
    if tok is None:
        return 16
    pieces = (tok.id_to_piece(i) for i in range(tok.vocab_size))
    return max(16, max((len(p) for p in pieces if p), default=0))


class Service:
    """What the handlers call: request JSON -> jobs -> response JSON. `names`: the `model`
    values answered (another is a 404, none at all is this model); `chat_template`: the
    template chat renders with instead of the model's own (serve --chat-template)."""

    def __init__(self, model, engine: SlotEngine, scheduler: Scheduler, name: str, *, names: Sequence[str] = (),
                 chat_template: Optional[str] = None, chat_template_why: str = "",
                 default_max_tokens: int = CHAT_MAX_TOKENS):
        self.model, self.engine, self.scheduler, self.name = model, engine, scheduler, name
        self.names = {name, *names}
        self.tok = model.tokenizer
        self.stop_ids = model.default_stop_ids()
        self.default_max_tokens = default_max_tokens
        self.chars_per_token = _longest_piece(self.tok)
        # the chat renderer, built once: a template given here must render (an InputError at
        # start); the model's own may not (a base model: None), which its chat requests are told
        self.renderer, self.chat_error = None, None
        if chat_template is not None:
            from easylemur.chat.renderer import ChatRenderer

            self.renderer = ChatRenderer(self.tok, chat_template, chat_template_why or "--chat-template")
            self.chat_why = chat_template_why or "--chat-template"
        else:
            self.chat_why = model.chat_template_why
            if model.chat_template is None:
                self.chat_error = (f"this model has no chat template ({self.chat_why}): it is not a chat model; "
                                   "/v1/completions continues text, or start the server with --chat-template FILE")
            else:
                try:
                    self.renderer = model.chat_renderer()
                except InputError as e:  # a template this tokenizer cannot render (said at every chat request)
                    self.chat_error = f"{e} (start the server with --chat-template FILE)"

    def check_model(self, body: dict) -> None:
        """vLLM's 404 for a `model` this server does not serve (absent or empty: this one)."""
        m = _field(body, "model", "")
        if m and m not in self.names:
            raise RequestError(f"The model `{m}` does not exist.", "model", 404, "NotFoundError")

    def _common(self, body: dict, n_prompt: int, chat: bool) -> dict:
        _field(body, "user", "")
        limit = self.engine.max_len
        prompt_field = "messages" if chat else "prompt"
        mt = _field(body, "max_tokens", None)
        if chat and mt is None:
            mt = _field(body, "max_completion_tokens", None)
        if mt is not None and not 0 <= mt <= limit:
            raise RequestError(f"'max_tokens'={mt} must be in [0, {limit}] (the context)", "max_tokens")
        room = limit - n_prompt
        # the prompt alone leaves no room for the reply (the cache holds limit - 1 prompt tokens)
        if room < 0 or (room == 0 and mt != 0) or n_prompt >= self.engine.max_len:
            raise RequestError(f"'{prompt_field}': this model's maximum context length is {limit} tokens, and the "
                               f"prompt has {n_prompt} tokens{' (rendered with the chat template)' if chat else ''}; "
                               "shorten it", prompt_field)
        if mt is None:
            mt = min(self.default_max_tokens if chat else COMPLETION_MAX_TOKENS, room)
        if mt > room:
            raise RequestError(f"'max_tokens'={mt} is too large: this model's maximum context length is {limit} tokens "
                               f"and the prompt has {n_prompt} ({mt} > {limit} - {n_prompt})", "max_tokens")
        temperature = float(_field(body, "temperature", 1.0))
        if not (temperature >= 0 and math.isfinite(temperature)):
            raise RequestError(f"'temperature'={temperature} must be a finite number >= 0", "temperature")
        top_p = float(_field(body, "top_p", 1.0))
        if not 0 < top_p <= 1:
            raise RequestError(f"'top_p'={top_p} must be in (0, 1]", "top_p")
        n = _field(body, "n", 1)
        if n != 1:
            raise RequestError(f"'n'={n}: only n=1 is supported", "n")
        stop = _field(body, "stop", [])
        stop = [stop] if isinstance(stop, str) else stop
        if not all(isinstance(s, str) for s in stop) or len(stop) > 4:
            raise RequestError("'stop' must be a string or a list of at most 4 strings", "stop")
        seed = _field(body, "seed", None)
        if seed is not None and not -2**63 <= seed < 2**63:
            raise RequestError(f"'seed' must be a 64-bit integer, got one of {len(str(abs(seed)))} digits", "seed")
        if seed is None:
            seed = int.from_bytes(uuid.uuid4().bytes[:4], "little")
        return dict(max_tokens=mt, temperature=temperature, top_p=top_p, seed=seed, stop=stop)

    def _prompts(self, body: dict) -> tuple[list[list[int]], list[Optional[str]]]:
        p = _field(body, "prompt", None)
        if p is None:
            raise RequestError("'prompt' is required", "prompt")
        V = self.model.config.vocab_size

        def ids_of(x, where):
            if isinstance(x, str):
                if self.tok is None:
                    raise RequestError(f"'{where}': this model has no tokenizer; send token ids", "prompt")
                _utf8(x, where, "prompt")
                self._bound(len(x), where)
                bos = [self.tok.bos_id] if self.tok.bos_id is not None else []
                return bos + self.tok.transformers_encoder.encode(x), x  # as vLLM encodes it
            if isinstance(x, list) and x and all(isinstance(t, int) and not isinstance(t, bool) for t in x):
                bad = [t for t in x if not 0 <= t < V]
                if bad:
                    raise RequestError(f"'{where}': token id {bad[0]} is outside the vocabulary [0, {V})", "prompt")
                return list(x), None
            raise RequestError(f"'{where}' must be a non-empty string or a non-empty list of token ids", "prompt")

        if isinstance(p, list) and p and all(isinstance(x, (str, list)) for x in p):
            if len(p) > self.scheduler.share:
                raise RequestError(f"'prompt': {len(p)} prompts in one request; at most {self.scheduler.share} (half "
                                   "of --max-queue)", "prompt")
            pairs = [ids_of(x, f"prompt[{i}]") for i, x in enumerate(p)]
        else:
            pairs = [ids_of(p, "prompt")]
        return [a for a, _ in pairs], [b for _, b in pairs]

    def completion_jobs(self, body: dict, client: str = "") -> tuple[list[Job], list[Optional[str]], dict]:
        self.check_model(body)
        prompts, texts = self._prompts(body)
        opts = self._common(body, max(len(p) for p in prompts), chat=False)
        lp = _field(body, "logprobs", None)
        if lp is not None:
            if isinstance(lp, bool) or not 0 <= lp <= TOP_LOGPROBS:
                raise RequestError(f"'logprobs' must be an integer in [0, {TOP_LOGPROBS}]", "logprobs")
        echo = _field(body, "echo", False)
        if opts["max_tokens"] == 0 and not echo:
            pass  # an empty completion, as OpenAI answers
        jobs = [Job(p, logprobs=lp, echo=echo, tokenizer=self.tok, stop_ids=self.stop_ids, client=client, **opts)
                for p in prompts]
        return jobs, texts, opts

    def chat_ids(self, msgs: list) -> list[int]:
        """The prompt ids of a `messages` list, as apply_chat_template(messages,
        add_generation_prompt=True) gives them from the served chat template."""
        from easylemur.chat.template import TemplateRejected

        if not isinstance(msgs, list) or not msgs:
            raise RequestError("'messages' is required: a non-empty list of {role, content}", "messages")
        plain = []
        for i, m in enumerate(msgs):
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):  # content parts: their text, joined by newlines, as vLLM does
                if not all(isinstance(p, dict) and p.get("type") == "text" and isinstance(p.get("text"), str)
                           for p in content):
                    raise RequestError(f"'messages[{i}].content': only text parts ({{\"type\": \"text\", \"text\": "
                                       "...}) are supported", "messages")
                content = "\n".join(p["text"] for p in content)
            if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(content, str)):
                raise RequestError(f"'messages[{i}]' must be an object with string 'role' and 'content'", "messages")
            _utf8(m["role"], f"messages[{i}].role", "messages")
            _utf8(content, f"messages[{i}].content", "messages")
            plain.append({"role": m["role"], "content": content})
        self._bound(sum(len(m["content"]) + len(m["role"]) for m in plain), "messages")
        if self.renderer is None:
            raise RequestError(self.chat_error)
        try:
            return self.renderer.prompt_ids(plain)
        except TemplateRejected as e:
            raise RequestError(f"'messages': {e}", "messages") from None

    def _bound(self, chars: int, field: str) -> None:
        """A 400 for text that cannot fit the context whatever it tokenizes to (a token is never
        longer than the longest piece of the vocabulary), before any is tokenized."""
        most = 2 * self.engine.max_len * self.chars_per_token  # twice: a normalizer may fold characters
        if chars > most:
            raise RequestError(f"'{field}': {chars} characters cannot fit this model's maximum context length of "
                               f"{self.engine.max_len} tokens; shorten it", field)

    def chat_job(self, body: dict, client: str = "") -> tuple[Job, dict]:
        self.check_model(body)
        ids = self.chat_ids(_field(body, "messages", None))
        opts = self._common(body, len(ids), chat=True)
        lp = _field(body, "logprobs", False)
        top = _field(body, "top_logprobs", 0) if lp else None
        if top is not None and not 0 <= top <= TOP_LOGPROBS:
            raise RequestError(f"'top_logprobs' must be in [0, {TOP_LOGPROBS}]", "top_logprobs")
        return Job(ids, logprobs=top, echo=False, tokenizer=self.tok, stop_ids=self.stop_ids, client=client, **opts), opts

    @staticmethod
    def stream_flag(body: dict) -> bool:
        return _field(body, "stream", False)

    def chat_logprobs(self, job: Job, entries: list) -> Optional[dict]:
        """Chat's `logprobs` object for some of a job's new tokens (None when not asked for)."""
        if job.logprobs is None:
            return None
        return {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()),
                             "top_logprobs": [{"token": self._piece(i), "logprob": v,
                                               "bytes": list(self._piece(i).encode())} for i, v in top]}
                            for _, lp, top, t in entries]}

    # --- logprobs formatting (OpenAI legacy completions)

    def legacy_logprobs(self, job: Job, entries: list, with_prompt: bool, base: int) -> dict:
        """OpenAI's legacy `logprobs` object; `base`: the text offset of the first new token."""
        tokens, lps, tops, offs = [], [], [], []
        if with_prompt and job.echo and job.prompt_entries:
            pos = 0
            for (t, lp, top), s in zip(job.prompt_entries, piece_texts(self.tok, job.ids)):
                tokens.append(s)
                lps.append(lp)
                tops.append(None if lp is None else {self._piece(i): v for i, v in top})
                offs.append(pos)
                pos += len(s)
        pos = base
        for t, lp, top, s in entries:
            tokens.append(s)
            lps.append(lp)
            tops.append({self._piece(i): v for i, v in top})
            offs.append(pos)
            pos += len(s)
        return {"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": offs}

    def _piece(self, i: int) -> str:
        return self.tok.decode([i]) if self.tok is not None else str(i)


class Server:
    """The model, its engine and scheduler, and the HTTP server in front of them (`serve/http.py`:
    uvicorn serving a Starlette app; `start` runs it on a thread, `serve_forever` here)."""

    def __init__(self, model, *, host: str = "127.0.0.1", port: int = 8000, slots: int = 8, max_queue: int = 64,
                 max_len: Optional[int] = None, name: Optional[str] = None, chat_template: Optional[str] = None,
                 chat_template_why: str = "", default_max_tokens: int = CHAT_MAX_TOKENS,
                 api_key: Optional[str] = None, max_body: Optional[int] = None,
                 request_timeout: float = REQUEST_TIMEOUT, header_timeout: Optional[float] = None,
                 body_timeout: Optional[float] = None, write_timeout: Optional[float] = None):
        """`name`: the model id served (default: the checkpoint's folder name; then the path as
        given is answered too when it is relative, as vLLM's default name is); `chat_template`:
        chat renders with it instead of the model's own (--chat-template); `api_key`: the Bearer
        token /v1 routes require (None: none); `max_body`: the largest request body in bytes;
        the timeouts: serve/http.py's defaults unless given."""
        import uvicorn

        from easylemur.serve import http

        self.model = model
        if default_max_tokens < 1:
            raise InputError(f"--default-max-tokens {default_max_tokens}: must be at least 1")
        self.engine = SlotEngine(model.config, model.params, slots=slots, max_len=max_len, mesh=model.mesh)
        self.scheduler = Scheduler(self.engine, max_queue=max_queue)
        default = model.path.rstrip("/").split("/")[-1] or "easylemur"
        relative = model.path and not model.path.startswith("/")  # an absolute path is never a model's name
        self.service = Service(model, self.engine, self.scheduler, name or default,
                               names=() if name or not relative else (model.path,), chat_template=chat_template,
                               chat_template_why=chat_template_why, default_max_tokens=default_max_tokens)
        self.host = host
        self.loopback = http._is_loopback(host)
        app = http.build_app(self.service, api_key=api_key, loopback=self.loopback,
                             max_body=max_body or http.MAX_BODY, request_timeout=request_timeout,
                             body_timeout=body_timeout or http.BODY_TIMEOUT,
                             write_timeout=write_timeout or http.WRITE_TIMEOUT)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.sock.bind((host, port))
        except OSError as e:
            self.close()
            raise InputError(f"--host {host} --port {port}: cannot listen there ({e.strerror or e})") from None
        self.sock.listen(256)  # dozens of clients may connect at once; --max-queue turns requests away, not the kernel
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(app, http=http.protocol(header_timeout or http.HEADER_TIMEOUT), lifespan="off",
                                log_level="warning", access_log=False, server_header=False, timeout_keep_alive=5,
                                timeout_graceful_shutdown=2)
        self.uvicorn = uvicorn.Server(config)
        self._thread: Optional[threading.Thread] = None

    def warmup(self) -> None:
        """Compiles the smallest prefill, the decode step of one slot over the shortest cache span
        and the step of every slot over the whole row before the first request; the step sizes
        between compile in the background as they are met (the whole step serves them until
        then: SlotEngine._step_program)."""
        eng = self.engine
        eng.prefill(0, [0])
        eng.release(0)
        buckets = eng.step_buckets()
        eng.warmup([buckets[0], buckets[-1]])

    def serve_forever(self) -> None:
        """Serves until SIGINT/SIGTERM (in the main thread) or `shutdown`."""
        self.uvicorn.run(sockets=[self.sock])

    def start(self) -> threading.Thread:
        """Serves on a thread; returns once the server accepts connections."""
        self._thread = threading.Thread(target=self.serve_forever, name="easylemur-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 60
        while not self.uvicorn.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        return self._thread

    def close(self) -> None:
        """Stops the scheduler and the engine and closes the socket (a server never started, or
        after `shutdown`)."""
        self.scheduler.close()
        self.engine.close()
        if getattr(self, "sock", None) is not None:
            self.sock.close()

    def shutdown(self) -> None:
        self.uvicorn.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        self.close()
