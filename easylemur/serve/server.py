"""The OpenAI-compatible HTTP server and its continuous-batching scheduler.

One scheduler thread owns the `SlotEngine` (docs/design.md "Serving"): between decoding steps
it admits queued requests into free slots (one prefill each), then runs one step for every
active slot, hands each request its token, and frees the slots of requests that finished (a
stop id, a stop string, max_tokens, the cache row full) or whose client went away. HTTP
handler threads (`ThreadingHTTPServer`) only validate, enqueue and relay events, so a slow
client never stalls the batch.

Requests are answered as vLLM answers them (docs/design.md "Serving"): chat prompts rendered
with the model's own chat template (`LoadedModel.chat_renderer`, as transformers'
apply_chat_template; a base model's chat is a 400 unless the server was given a template), an
unknown `model` a 404, every malformed field a 400 naming it (text that is not UTF-8, a prompt
over the context), `max_tokens` defaulting to 16 for completions and to `default_max_tokens`
for chat, and a client that goes away costs no traceback.
"""

from __future__ import annotations

import json
import queue
import select
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Optional, Sequence


from easylemur.errors import InputError
from easylemur.generate.slots import TOP_LOGPROBS, SlotEngine
from easylemur.serve import CHAT_MAX_TOKENS, COMPLETION_MAX_TOKENS
from easylemur.tokenizer.spm import check_text

# How long a handler waits for the scheduler before it gives up on a request (seconds).
REQUEST_TIMEOUT = 600.0


class RequestError(Exception):
    """A bad request: a 400 whose message names the field."""

    def __init__(self, message: str, param: Optional[str] = None, status: int = 400, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.param, self.status, self.kind = param, status, kind


def error_body(message: str, kind: str, param: Optional[str] = None, code: Optional[int] = None) -> dict:
    """vLLM's (and OpenAI's) error object; vLLM puts the HTTP status in `code`."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}


class Job:
    """One prompt being served: the scheduler fills it, a handler thread reads `events`."""

    def __init__(self, ids: list[int], *, max_tokens: int, temperature: float, top_p: float, seed: int,
                 stop_ids: Sequence[int], stop: Sequence[str], logprobs: Optional[int], echo: bool, tokenizer):
        self.ids, self.max_tokens = ids, max_tokens
        self.temperature, self.top_p, self.seed = temperature, top_p, seed
        self.stop_ids, self.stop = set(stop_ids), [s for s in stop if s]
        self.logprobs, self.echo, self.tok = logprobs, echo, tokenizer
        self.events: queue.Queue = queue.Queue()
        self.cancelled = threading.Event()
        self.new: list[int] = []
        self.entries: list[tuple[int, float, list[tuple[int, float]]]] = []  # (id, logprob, top) per new token
        self.sent_chars = 0  # how much of the new text went out
        self.sent_entries = 0
        self.prompt_entries: list[tuple[int, Optional[float], list[tuple[int, float]]]] = []

    # --- called by the scheduler thread

    def text(self) -> str:
        return self.tok.decode(self.new) if self.tok is not None else ""

    def publish(self, finish: Optional[str]) -> None:
        """Sends the new text that can no longer change: held back while it ends in half a
        character or could be the start of a stop string; at the end, cut at the first stop."""
        text = self.text()
        cut = len(text)
        hit = False
        for s in self.stop:
            i = text.find(s)
            if i >= 0 and i < cut:
                cut, hit = i, True
        if hit:
            finish = finish or "stop"
        if finish is None:
            safe = cut
            for s in self.stop:  # a suffix that is a prefix of a stop string may still become one
                for k in range(min(len(s) - 1, len(text)), 0, -1):
                    if text.endswith(s[:k]):
                        safe = min(safe, len(text) - k)
                        break
            while safe > self.sent_chars and text[safe - 1] == "\ufffd":
                safe -= 1
            cut = max(safe, self.sent_chars)
        delta = text[self.sent_chars:cut]
        if not delta and finish is None:
            return None
        upto = len(self._entries_before(cut)) if hit else len(self.entries)
        pieces = piece_texts(self.tok, self.new[:upto])
        entries = [e + (pieces[i],) for i, e in enumerate(self.entries[self.sent_entries:upto], self.sent_entries)]
        self.sent_chars, self.sent_entries = cut, upto
        self.events.put(("data", delta, entries if self.logprobs is not None else [], finish))
        return finish

    def _entries_before(self, cut: int) -> list:
        """The new tokens whose text starts before `cut` (a stop string cuts the token list too)."""
        keep = []
        for i, e in enumerate(self.entries):
            if i > 0 and len(self.tok.decode(self.new[:i])) >= cut:
                break
            keep.append(e)
        return keep


def piece_texts(tok, ids: list[int]) -> list[str]:
    """Each token's text: the growth of the decoded text when it is added."""
    out, prev = [], ""
    for i in range(len(ids)):
        cur = tok.decode(ids[: i + 1]) if tok is not None else ""
        out.append(cur[len(prev):] if cur.startswith(prev) else cur)
        prev = cur
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

    def submit(self, jobs: list[Job]) -> None:
        with self.cond:
            if len(self.pending) + len(jobs) > self.max_queue:
                raise RequestError(f"the server is busy: {len(self.pending)} requests are queued (--max-queue "
                                   f"{self.max_queue}); retry later", None, 503, "server_busy")
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

    def _admit(self, slot: int, job: Job) -> None:
        eng = self.engine
        try:
            last, prompt = eng.prefill(slot, job.ids, temperature=job.temperature, top_p=job.top_p, seed=job.seed,
                                       echo=job.echo and job.logprobs is not None)
        except Exception as e:  # a bad prompt fails its own request only
            eng.release(slot)
            job.events.put(("error", str(e)))
            return
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

    def _loop(self) -> None:
        eng = self.engine
        while True:
            with self.cond:
                while not self.stopped and not self.pending and not self.running:
                    self.cond.wait()
                if self.stopped:
                    for job in self.pending + list(self.running.values()):
                        job.events.put(("error", "the server is shutting down"))
                    return
                admit = []
                free = [s for s in range(eng.slots) if s not in self.running]
                while free and self.pending:
                    job = self.pending.pop(0)
                    if not job.cancelled.is_set():
                        admit.append((free.pop(0), job))
                        self.running[admit[-1][0]] = job  # reserved now; filled by _admit
            for slot, job in admit:
                self.running.pop(slot)
                self._admit(slot, job)
            for slot, job in list(self.running.items()):
                if job.cancelled.is_set():
                    self._finish(slot, job, None)
            if not self.running:
                continue
            try:
                out = eng.step()
            except Exception as e:  # the engine is broken: fail every running request, keep serving
                for slot, job in list(self.running.items()):
                    job.events.put(("error", f"decoding failed: {e}"))
                    self._finish(slot, job, None)
                continue
            self.steps += 1
            for slot, job in list(self.running.items()):
                t = int(out.tokens[slot])
                if t in job.stop_ids:
                    self._finish(slot, job, "stop")
                    continue
                k = job.logprobs or 0
                job.new.append(t)
                job.entries.append((t, float(out.logprobs[slot]),
                                    list(zip(out.top_ids[slot, :k].tolist(), out.top_logprobs[slot, :k].tolist()))))
                finish = "length" if len(job.new) >= job.max_tokens or eng.room(slot) <= 0 else None
                if job.publish(finish) is not None:
                    self._finish(slot, job, None)


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
        if room < 0 or (room == 0 and mt != 0):  # the prompt alone leaves no room for the reply
            raise RequestError(f"'{prompt_field}': this model's maximum context length is {limit} tokens, and the "
                               f"prompt has {n_prompt} tokens{' (rendered with the chat template)' if chat else ''}; "
                               "shorten it", prompt_field)
        if mt is None:
            mt = min(self.default_max_tokens if chat else COMPLETION_MAX_TOKENS, room)
        if mt > room:
            raise RequestError(f"'max_tokens'={mt} is too large: this model's maximum context length is {limit} tokens "
                               f"and the prompt has {n_prompt} ({mt} > {limit} - {n_prompt})", "max_tokens")
        temperature = float(_field(body, "temperature", 1.0))
        if not temperature >= 0:
            raise RequestError(f"'temperature'={temperature} must be >= 0", "temperature")
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
                bos = [self.tok.bos_id] if self.tok.bos_id is not None else []
                return bos + self.tok.encode(x), x
            if isinstance(x, list) and x and all(isinstance(t, int) and not isinstance(t, bool) for t in x):
                bad = [t for t in x if not 0 <= t < V]
                if bad:
                    raise RequestError(f"'{where}': token id {bad[0]} is outside the vocabulary [0, {V})", "prompt")
                return list(x), None
            raise RequestError(f"'{where}' must be a non-empty string or a non-empty list of token ids", "prompt")

        if isinstance(p, list) and p and all(isinstance(x, (str, list)) for x in p):
            pairs = [ids_of(x, f"prompt[{i}]") for i, x in enumerate(p)]
        else:
            pairs = [ids_of(p, "prompt")]
        return [a for a, _ in pairs], [b for _, b in pairs]

    def completion_jobs(self, body: dict) -> tuple[list[Job], list[Optional[str]], dict]:
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
        jobs = [Job(p, logprobs=lp, echo=echo, tokenizer=self.tok, stop_ids=self.stop_ids, **opts) for p in prompts]
        return jobs, texts, opts

    def chat_ids(self, msgs: list) -> list[int]:
        """The prompt ids of a `messages` list, as apply_chat_template(messages,
        add_generation_prompt=True) gives them from the served chat template."""
        from easylemur.chat.template import TemplateRejected

        if not isinstance(msgs, list) or not msgs:
            raise RequestError("'messages' is required: a non-empty list of {role, content}", "messages")
        for i, m in enumerate(msgs):
            if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                raise RequestError(f"'messages[{i}]' must be an object with string 'role' and 'content'", "messages")
            _utf8(m["role"], f"messages[{i}].role", "messages")
            _utf8(m["content"], f"messages[{i}].content", "messages")
        if self.renderer is None:
            raise RequestError(self.chat_error)
        try:
            return self.renderer.prompt_ids([{"role": m["role"], "content": m["content"]} for m in msgs])
        except TemplateRejected as e:
            raise RequestError(f"'messages': {e}", "messages") from None

    def chat_job(self, body: dict) -> tuple[Job, dict]:
        self.check_model(body)
        ids = self.chat_ids(_field(body, "messages", None))
        opts = self._common(body, len(ids), chat=True)
        lp = _field(body, "logprobs", False)
        top = _field(body, "top_logprobs", 0) if lp else None
        if top is not None and not 0 <= top <= TOP_LOGPROBS:
            raise RequestError(f"'top_logprobs' must be in [0, {TOP_LOGPROBS}]", "top_logprobs")
        return Job(ids, logprobs=top, echo=False, tokenizer=self.tok, stop_ids=self.stop_ids, **opts), opts

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


def _wait(job: Job, handler: "Handler", deadline: float):
    """The job's next event; watches the client's socket meanwhile (at most every 50 ms, also
    while events keep coming): a closed connection cancels the job, freeing its slot at the next
    step."""
    while True:
        if time.monotonic() - handler.checked > 0.05:
            handler.checked = time.monotonic()
            if handler.client_gone():
                job.cancelled.set()
                return None
        try:
            return job.events.get(timeout=0.05)
        except queue.Empty:
            pass
        if time.time() > deadline:
            job.cancelled.set()
            return ("error", "timed out waiting for the model")


def _collect(job: Job, handler: "Handler", deadline: float):
    """A non-streamed job's whole answer: (text, logprob entries, finish reason), or None when
    the client went away (the job is cancelled)."""
    text, entries, finish = "", [], None
    while finish is None:
        ev = _wait(job, handler, deadline)
        if ev is None:
            return None
        if ev[0] == "error":
            raise RequestError(ev[1], None, 500, "server_error")
        text += ev[1]
        entries += ev[2]
        finish = ev[3]
    return text, entries, finish


class Handler(BaseHTTPRequestHandler):
    service: Service  # set on the subclass the server builds
    protocol_version = "HTTP/1.1"
    checked = 0.0  # when client_gone last looked at the socket

    def log_message(self, format: str, *args) -> None:  # quiet: one line per request is noise at load
        pass

    # --- plumbing

    def client_gone(self) -> bool:
        try:
            r, _, _ = select.select([self.connection], [], [], 0)
            if r:
                return self.connection.recv(1, socket.MSG_PEEK) == b""
        except (OSError, ValueError):
            return True
        return False

    def _json(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _error(self, e: RequestError) -> None:
        self._json(e.status, error_body(str(e), e.kind, e.param, e.status))

    def _sse_start(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True

    def _sse(self, obj: Any) -> None:
        self.wfile.write(b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n")
        self.wfile.flush()

    def _body(self) -> dict:
        n = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(n) if n else b""
        try:
            body = json.loads(raw or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise RequestError(f"the body is not valid JSON: {e}", None) from None
        if not isinstance(body, dict):
            raise RequestError("the body must be a JSON object", None)
        return body

    # --- routes

    def do_GET(self) -> None:
        s = self.service
        if self.path.rstrip("/") == "/health":
            self._json(200, {"status": "ok", "slots": s.engine.slots, "running": len(s.scheduler.running),
                             "queued": len(s.scheduler.pending)})
        elif self.path.rstrip("/") == "/v1/models":
            self._json(200, {"object": "list", "data": [{"id": s.name, "object": "model", "created": 0,
                                                         "owned_by": "easylemur"}]})
        else:
            self._json(404, error_body(f"no route {self.path}", "not_found_error", None, 404))

    def do_POST(self) -> None:
        try:
            route = self.path.rstrip("/")
            if route not in ("/v1/completions", "/v1/chat/completions"):
                raise RequestError(f"no route {self.path}", None, 404, "not_found_error")
            body = self._body()
            if route == "/v1/completions":
                self._completions(body)
            else:
                self._chat(body)
        except RequestError as e:
            self._error(e)
        except (BrokenPipeError, ConnectionResetError):
            pass
        except Exception as e:  # a bug answers 500 with its message, and the server keeps serving
            try:
                self._json(500, error_body(f"{type(e).__name__}: {e}", "server_error", None, 500))
            except OSError:
                pass

    def _completions(self, body: dict) -> None:
        s = self.service
        jobs, texts, opts = s.completion_jobs(body)
        stream = _field(body, "stream", False)
        s.scheduler.submit(jobs)
        rid, created = "cmpl-" + uuid.uuid4().hex, int(time.time())
        deadline = time.time() + REQUEST_TIMEOUT
        if stream:
            self._sse_start()
            try:
                for i, job in enumerate(jobs):
                    first, sent = True, len(texts[i]) if job.echo and texts[i] is not None else 0
                    while True:
                        ev = _wait(job, self, deadline)
                        if ev is None or ev[0] == "error":
                            if ev is not None:
                                self._sse({"error": {"message": ev[1], "type": "server_error"}})
                            for j in jobs:
                                j.cancelled.set()
                            return
                        _, delta, entries, finish = ev
                        prefix = texts[i] if job.echo and first and texts[i] is not None else ""
                        choice = {"index": i, "text": prefix + delta, "finish_reason": finish,
                                  "logprobs": (s.legacy_logprobs(job, entries, first, sent)
                                               if job.logprobs is not None else None)}
                        first, sent = False, sent + len(delta)
                        self._sse({"id": rid, "object": "text_completion", "created": created, "model": s.name,
                                   "choices": [choice]})
                        if finish is not None:
                            break
                self._sse(b"[DONE]")
            except (BrokenPipeError, ConnectionResetError, OSError):
                for j in jobs:
                    j.cancelled.set()
            return
        choices, usage_out = [], 0
        for i, job in enumerate(jobs):
            got = _collect(job, self, deadline)
            if got is None:
                for j in jobs:
                    j.cancelled.set()
                return
            text, entries, finish = got
            usage_out += len(entries) if job.logprobs is not None else len(job.new)
            out = (texts[i] or "") + text if job.echo else text
            base = len(texts[i]) if job.echo and texts[i] is not None else 0
            lp = s.legacy_logprobs(job, entries, True, base) if job.logprobs is not None else None
            choices.append({"index": i, "text": out, "finish_reason": finish, "logprobs": lp})
        n_prompt = sum(len(j.ids) for j in jobs)
        self._json(200, {"id": rid, "object": "text_completion", "created": created, "model": s.name,
                         "choices": choices, "usage": {"prompt_tokens": n_prompt, "completion_tokens": usage_out,
                                                       "total_tokens": n_prompt + usage_out}})

    def _chat(self, body: dict) -> None:
        s = self.service
        job, opts = s.chat_job(body)
        stream = _field(body, "stream", False)
        s.scheduler.submit([job])
        rid, created = "chatcmpl-" + uuid.uuid4().hex, int(time.time())
        deadline = time.time() + REQUEST_TIMEOUT

        def lp_content(entries):
            if job.logprobs is None:
                return None
            return {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()),
                                 "top_logprobs": [{"token": s._piece(i), "logprob": v, "bytes": list(s._piece(i).encode())}
                                                  for i, v in top]}
                                for _, lp, top, t in entries]}

        if stream:
            self._sse_start()
            try:
                first = True
                while True:
                    ev = _wait(job, self, deadline)
                    if ev is None or ev[0] == "error":
                        if ev is not None:
                            self._sse({"error": {"message": ev[1], "type": "server_error"}})
                        job.cancelled.set()
                        return
                    _, delta, entries, finish = ev
                    d = {"role": "assistant", "content": delta} if first else {"content": delta}
                    first = False
                    self._sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": s.name,
                               "choices": [{"index": 0, "delta": d, "logprobs": lp_content(entries),
                                            "finish_reason": finish}]})
                    if finish is not None:
                        break
                self._sse(b"[DONE]")
            except (BrokenPipeError, ConnectionResetError, OSError):
                job.cancelled.set()
            return
        got = _collect(job, self, deadline)
        if got is None:
            return
        text, entries, finish = got
        n_new = len(job.new)
        self._json(200, {"id": rid, "object": "chat.completion", "created": created, "model": s.name,
                         "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                      "logprobs": lp_content(entries), "finish_reason": finish}],
                         "usage": {"prompt_tokens": len(job.ids), "completion_tokens": n_new,
                                   "total_tokens": len(job.ids) + n_new}})


class _HTTPServer(ThreadingHTTPServer):
    # the listen backlog: socketserver's default of 5 refuses connections when dozens of
    # clients connect at once while the accept thread waits for the CPU; the queue bound
    # (--max-queue, a 503) is where requests are turned away, not the kernel
    request_queue_size = 256

    def handle_error(self, request, client_address) -> None:
        """A client that went away (a dropped /health probe, a reset mid-answer) is normal
        traffic: no traceback for it; anything else is printed as socketserver prints it."""
        if isinstance(sys.exc_info()[1], ConnectionError):  # BrokenPipe, ConnectionReset, ConnectionAborted
            return
        super().handle_error(request, client_address)


class Server:
    """The model, its engine and scheduler, and the HTTP server around them."""

    def __init__(self, model, *, host: str = "127.0.0.1", port: int = 8000, slots: int = 8, max_queue: int = 64,
                 max_len: Optional[int] = None, name: Optional[str] = None, chat_template: Optional[str] = None,
                 chat_template_why: str = "", default_max_tokens: int = CHAT_MAX_TOKENS):
        """`name`: the model id served (default: the checkpoint's folder name; then the path as
        given is answered too, as vLLM's default name is); `chat_template`: chat renders with it
        instead of the model's own (--chat-template)."""
        self.model = model
        if default_max_tokens < 1:
            raise InputError(f"--default-max-tokens {default_max_tokens}: must be at least 1")
        self.engine = SlotEngine(model.config, model.params, slots=slots, max_len=max_len, mesh=model.mesh)
        self.scheduler = Scheduler(self.engine, max_queue=max_queue)
        default = model.path.rstrip("/").split("/")[-1] or "easylemur"
        self.service = Service(model, self.engine, self.scheduler, name or default,
                               names=() if name or not model.path else (model.path,), chat_template=chat_template,
                               chat_template_why=chat_template_why, default_max_tokens=default_max_tokens)
        handler = type("BoundHandler", (Handler,), {"service": self.service})
        self.httpd = _HTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]

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
        self.httpd.serve_forever(poll_interval=0.2)

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.serve_forever, name="easylemur-http", daemon=True)
        t.start()
        return t

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.scheduler.close()
        self.engine.close()
