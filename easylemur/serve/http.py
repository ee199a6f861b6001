"""The HTTP side of the server: an ASGI app (Starlette) served by uvicorn over h11, as vLLM serves
its API on a maintained stack, in front of `server.Service` and its scheduler thread.

What the stack gives: HTTP/1.1 framing by h11 (chunked bodies read as bodies; a
Transfer-Encoding with a Content-Length, conflicting or malformed lengths refused with a 400;
pipelining), 405 for a wrong method (HEAD answered for GET routes), query strings ignored by
routing, no `Server` header. What is added here (docs/design.md, "Serving"):

- bounds: a request's headers must arrive within `HEADER_TIMEOUT` of the connection going idle
  and its body within `BODY_TIMEOUT` (slowloris ends there), at most `max_connections` open
  connections (more are closed at once), bodies of at most `max_body` bytes (413, refused from
  Content-Length before any is read);
- access: `api_key` (Bearer, on /v1 routes: 401 otherwise, as vLLM's --api-key), JSON bodies
  only (415 otherwise: a web page cannot make a browser post a "simple" text/plain or form
  request), and, when bound to a loopback address, a loopback Host header (400 otherwise: a
  DNS-rebinding page cannot reach it);
- errors as vLLM's JSON error objects, never with exception text;
- streams: a client that does not read its stream for `WRITE_TIMEOUT` is dropped and its job
  cancelled (its slot freed at the next step); one that goes away cancels its job too.

Request parsing and validation are `server.Service`'s; this module turns them into responses."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import queue
import time
import uuid
from typing import Any, AsyncIterator, Optional

from uvicorn.protocols.http.h11_impl import H11Protocol

HEADER_TIMEOUT = 10.0  # seconds for a request's headers to arrive once the connection is idle
BODY_TIMEOUT = 30.0  # seconds for its whole body
WRITE_TIMEOUT = 30.0  # seconds a stream's client may leave a chunk unread
POLL = 0.05  # how often a waiting handler looks at its client and its deadline (seconds)
MAX_BODY = 16 << 20  # bytes (--max-body-mb)
MAX_CONNECTIONS = 512


class RequestError(Exception):
    """A bad request: a 400 whose message names the field."""

    def __init__(self, message: str, param: Optional[str] = None, status: int = 400, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.param, self.status, self.kind = param, status, kind


def error_body(message: str, kind: str, param: Optional[str] = None, code: Optional[int] = None) -> dict:
    """vLLM's (and OpenAI's) error object; vLLM puts the HTTP status in `code`."""
    return {"error": {"message": message, "type": kind, "param": param, "code": code}}



class ServingProtocol(H11Protocol):
    """uvicorn's h11 protocol with a deadline for request headers (from when the connection opens
    or its last response ends) and a cap on open connections: slow or idle connections cannot
    pile up."""

    max_connections = MAX_CONNECTIONS
    header_timeout = HEADER_TIMEOUT

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._deadline = None
        if len(self.connections) > self.max_connections:
            transport.close()
            return
        self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.header_timeout, self._late)

    def _disarm(self) -> None:
        if getattr(self, "_deadline", None) is not None:
            self._deadline.cancel()
            self._deadline = None

    def _late(self) -> None:
        if self.cycle is None or self.cycle.response_complete:  # still waiting for headers
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        super().data_received(data)
        if self.cycle is not cycle:  # a request's headers arrived: its body has BODY_TIMEOUT (the app's)
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)


class _Quiet(logging.Filter):
    """uvicorn reports a response the app abandoned (a stream whose client stopped reading) as an
    error; here that is the policy, not a fault."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "without completing response" not in record.getMessage()


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_of(header: str) -> str:
    """The host of a Host header: "[::1]:8000" -> "::1", "localhost:8000" -> "localhost"."""
    if header.startswith("["):
        return header[1:header.find("]")] if "]" in header else header
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


def protocol(header_timeout: float = HEADER_TIMEOUT, max_connections: int = MAX_CONNECTIONS) -> type:
    """`ServingProtocol` with these bounds (uvicorn builds one per connection from the class)."""
    return type("ServingProtocol", (ServingProtocol,), {"header_timeout": header_timeout,
                                                        "max_connections": max_connections})


def build_app(service: Any, *, api_key: Optional[str] = None, loopback: bool = True, max_body: int = MAX_BODY,
              request_timeout: float = 600.0, body_timeout: float = BODY_TIMEOUT, write_timeout: float = WRITE_TIMEOUT):
    """The Starlette app of a `server.Service` (module doc)."""
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.exceptions import HTTPException
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    uvicorn_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, _Quiet) for f in uvicorn_log.filters):  # once per process, not per server
        uvicorn_log.addFilter(_Quiet())

    def error(status: int, message: str, kind: str, param: Optional[str] = None, headers=None) -> JSONResponse:
        return JSONResponse(error_body(message, kind, param, status), status_code=status, headers=headers)

    def request_error(e: RequestError) -> JSONResponse:
        return error(e.status, str(e), e.kind, e.param)

    async def http_exception(request: Request, exc: HTTPException) -> Response:
        kinds = {404: "not_found_error", 405: "method_not_allowed"}
        message = f"no route {request.url.path}" if exc.status_code == 404 else str(exc.detail)
        return error(exc.status_code, message, kinds.get(exc.status_code, "invalid_request_error"),
                     headers=getattr(exc, "headers", None))

    async def server_error(request: Request, exc: Exception) -> Response:
        import traceback

        traceback.print_exception(exc)
        return error(500, "the server failed while serving this request (see the server's log)", "server_error")

    async def body_of(request: Request) -> dict:
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/json":
            raise RequestError(f"Content-Type {ctype or '(none)'}: the body must be application/json", None, 415,
                               "unsupported_media_type")
        length = request.headers.get("content-length")
        if length is not None and int(length) > max_body:
            raise RequestError(f"the body has {length} bytes; at most {max_body} are accepted", None, 413,
                               "request_too_large")
        chunks, size = [], 0

        async def read() -> None:
            nonlocal size
            async for chunk in request.stream():
                size += len(chunk)
                if size > max_body:
                    raise RequestError(f"the body is over {max_body} bytes, the most accepted", None, 413,
                                       "request_too_large")
                chunks.append(chunk)

        try:
            await asyncio.wait_for(read(), body_timeout)
        except TimeoutError:
            raise RequestError(f"the body did not arrive within {body_timeout:g} s", None, 408,
                               "request_timeout") from None
        return parse_json(b"".join(chunks))

    async def authorized(request: Request) -> Optional[Response]:
        if api_key is None:
            return None
        if request.headers.get("authorization", "") != f"Bearer {api_key}":
            return error(401, "Unauthorized: give the server's API key as 'Authorization: Bearer KEY'",
                         "authentication_error")
        return None

    async def health(request: Request) -> Response:
        s = service
        return JSONResponse({"status": "ok", "slots": s.engine.slots, "running": len(s.scheduler.running),
                             "queued": len(s.scheduler.pending)})

    async def models(request: Request) -> Response:
        if (denied := await authorized(request)) is not None:
            return denied
        return JSONResponse({"object": "list", "data": [{"id": service.name, "object": "model", "created": 0,
                                                         "owned_by": "easylemur"}]})

    async def events(job, request: Request, deadline: float) -> AsyncIterator[tuple]:
        """The job's events as they come; cancels the job when the client goes away (the
        iterator then ends) or the deadline passes (an error event)."""
        loop = asyncio.get_running_loop()
        flag = asyncio.Event()
        job.wake = lambda: loop.call_soon_threadsafe(flag.set)
        checked = time.monotonic()
        while True:
            if time.monotonic() - checked > POLL:  # also while events keep coming
                checked = time.monotonic()
                if await request.is_disconnected():
                    job.cancelled.set()
                    return
                if time.time() > deadline:
                    job.cancelled.set()
                    yield ("error", "timed out waiting for the model")
                    return
            try:
                ev = job.events.get_nowait()
            except queue.Empty:
                flag.clear()
                if job.events.empty():
                    try:
                        await asyncio.wait_for(flag.wait(), POLL)
                    except TimeoutError:
                        pass
                continue
            yield ev
            if ev[0] == "error" or ev[3] is not None:
                return

    async def collect(job, request: Request, deadline: float) -> Optional[tuple[str, list, str]]:
        """A non-streamed job's (text, logprob entries, finish reason); None when the client left."""
        text, entries = "", []
        async for ev in events(job, request, deadline):
            if ev[0] == "error":
                raise RequestError(ev[1], None, 500, "server_error")
            text += ev[1]
            entries += ev[2]
            if ev[3] is not None:
                return text, entries, ev[3]
        return None

    def sse(obj: Any) -> bytes:
        return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"

    class Stream(Response):
        """Server-sent events from an async iterator of bytes; a client that stops reading for
        WRITE_TIMEOUT or goes away ends it (`on_end` cancels the jobs)."""

        def __init__(self, chunks: AsyncIterator[bytes], on_end):
            self.chunks, self.on_end = chunks, on_end
            self.status_code = 200
            self.background = None
            self.init_headers({"content-type": "text/event-stream", "cache-control": "no-cache"})

        async def __call__(self, scope, receive, send) -> None:
            async def gone() -> None:
                while (await receive())["type"] != "http.disconnect":
                    pass

            watcher = asyncio.create_task(gone())
            try:
                await send({"type": "http.response.start", "status": 200, "headers": self.raw_headers})
                async for chunk in self.chunks:
                    if watcher.done():
                        return
                    await asyncio.wait_for(send({"type": "http.response.body", "body": chunk, "more_body": True}),
                                           write_timeout)
                await send({"type": "http.response.body", "body": b"", "more_body": False})
            except (TimeoutError, OSError):
                return  # a client that does not read, or a closed connection: the jobs are cancelled below
            finally:
                watcher.cancel()
                self.on_end()

    def cancel_all(jobs) -> None:
        for j in jobs:
            j.cancelled.set()

    def client_of(request: Request) -> str:
        """Whom the scheduler takes turns between, and shares the queue among: an address."""
        return request.client.host if request.client else ""

    async def accepted(request: Request, make) -> Any:
        """(what `make` made, whether to stream) for a request authorized, read, validated and
        queued (`make`: the Service method; it tokenizes, so it runs off the event loop), or the
        Response refusing it."""
        if (denied := await authorized(request)) is not None:
            return denied
        try:
            body = await body_of(request)
            made = await run_in_threadpool(make, body, client_of(request))
            service.scheduler.submit(made[0] if isinstance(made[0], list) else [made[0]])
            return made, service.stream_flag(body)
        except RequestError as e:
            return request_error(e)

    async def completions(request: Request) -> Response:
        got = await accepted(request, service.completion_jobs)
        if isinstance(got, Response):
            return got
        (jobs, texts, _), stream = got
        s = service
        rid, created = "cmpl-" + uuid.uuid4().hex, int(time.time())
        deadline = time.time() + request_timeout
        if stream:
            async def chunks() -> AsyncIterator[bytes]:
                for i, job in enumerate(jobs):
                    first, sent = True, len(texts[i]) if job.echo and texts[i] is not None else 0
                    async for ev in events(job, request, deadline):
                        if ev[0] == "error":
                            yield sse({"error": {"message": ev[1], "type": "server_error"}})
                            return
                        _, delta, entries, finish = ev
                        prefix = texts[i] if job.echo and first and texts[i] is not None else ""
                        choice = {"index": i, "text": prefix + delta, "finish_reason": finish,
                                  "logprobs": (s.legacy_logprobs(job, entries, first, sent)
                                               if job.logprobs is not None else None)}
                        first, sent = False, sent + len(delta)
                        yield sse({"id": rid, "object": "text_completion", "created": created, "model": s.name,
                                   "choices": [choice]})
                    if job.cancelled.is_set():
                        return
                yield sse(b"[DONE]")

            return Stream(chunks(), lambda: cancel_all(jobs))
        try:
            choices, usage_out = [], 0
            for i, job in enumerate(jobs):
                got = await collect(job, request, deadline)
                if got is None:
                    cancel_all(jobs)
                    return Response(status_code=499)  # nobody reads it
                text, entries, finish = got
                usage_out += len(entries) if job.logprobs is not None else len(job.new)
                out = (texts[i] or "") + text if job.echo else text
                base = len(texts[i]) if job.echo and texts[i] is not None else 0
                lp = s.legacy_logprobs(job, entries, True, base) if job.logprobs is not None else None
                choices.append({"index": i, "text": out, "finish_reason": finish, "logprobs": lp})
        except RequestError as e:
            cancel_all(jobs)
            return request_error(e)
        except BaseException:
            cancel_all(jobs)
            raise
        n_prompt = sum(len(j.ids) for j in jobs)
        return JSONResponse({"id": rid, "object": "text_completion", "created": created, "model": s.name,
                             "choices": choices, "usage": {"prompt_tokens": n_prompt, "completion_tokens": usage_out,
                                                           "total_tokens": n_prompt + usage_out}})

    async def chat(request: Request) -> Response:
        got = await accepted(request, service.chat_job)
        if isinstance(got, Response):
            return got
        (job, _), stream = got
        s = service
        rid, created = "chatcmpl-" + uuid.uuid4().hex, int(time.time())
        deadline = time.time() + request_timeout
        if stream:
            async def chunks() -> AsyncIterator[bytes]:
                first = True
                async for ev in events(job, request, deadline):
                    if ev[0] == "error":
                        yield sse({"error": {"message": ev[1], "type": "server_error"}})
                        return
                    _, delta, entries, finish = ev
                    d = {"role": "assistant", "content": delta} if first else {"content": delta}
                    first = False
                    yield sse({"id": rid, "object": "chat.completion.chunk", "created": created, "model": s.name,
                               "choices": [{"index": 0, "delta": d, "logprobs": s.chat_logprobs(job, entries),
                                            "finish_reason": finish}]})
                if not job.cancelled.is_set():
                    yield sse(b"[DONE]")

            return Stream(chunks(), lambda: cancel_all([job]))
        try:
            got = await collect(job, request, deadline)
        except RequestError as e:
            return request_error(e)
        if got is None:
            job.cancelled.set()
            return Response(status_code=499)
        text, entries, finish = got
        n_new = len(job.new)
        return JSONResponse({"id": rid, "object": "chat.completion", "created": created, "model": s.name,
                             "choices": [{"index": 0, "message": {"role": "assistant", "content": text},
                                          "logprobs": s.chat_logprobs(job, entries), "finish_reason": finish}],
                             "usage": {"prompt_tokens": len(job.ids), "completion_tokens": n_new,
                                       "total_tokens": len(job.ids) + n_new}})

    routes = []
    for path, endpoint, methods in (("/health", health, ["GET"]), ("/v1/models", models, ["GET"]),
                                    ("/v1/completions", completions, ["POST"]),
                                    ("/v1/chat/completions", chat, ["POST"])):
        routes += [Route(path, endpoint, methods=methods), Route(path + "/", endpoint, methods=methods)]
    app = Starlette(routes=routes, exception_handlers={HTTPException: http_exception, Exception: server_error})
    app.router.redirect_slashes = False

    async def front(scope, receive, send) -> None:
        """What every request passes first: a Transfer-Encoding with a Content-Length (a request
        smuggling attempt, RFC 9112 6.1) is a 400 and the connection is closed, so that no byte
        after it is read as a request; a loopback server answers only requests addressed to a
        loopback host (DNS rebinding)."""
        if scope["type"] == "http":
            headers = dict(scope["headers"])
            if b"transfer-encoding" in headers and b"content-length" in headers:
                await error(400, "a request with both Transfer-Encoding and Content-Length is refused",
                            "invalid_request_error", headers={"connection": "close"})(scope, receive, send)
                return
            host = headers.get(b"host", b"").decode("latin-1")
            if loopback and not _is_loopback(_host_of(host)):
                await error(400, f"Host {host!r}: this server answers only requests to localhost (it is bound to a "
                                 "loopback address)", "invalid_request_error")(scope, receive, send)
                return
        await app(scope, receive, send)

    return front


def parse_json(raw: bytes) -> dict:
    """A request body as a JSON object, or a RequestError (400) saying what is wrong, never an
    exception's text: NaN and Infinity are not JSON, nor is nesting past Python's recursion
    limit or an integer of more digits than Python converts."""
    def constant(name: str):
        raise ValueError(f"{name} is not a JSON value")

    try:
        body = json.loads(raw or b"null", parse_constant=constant)
    except RecursionError:
        raise RequestError("the body is not valid JSON: nested too deeply", None) from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError; so is a 10^6-digit integer
        msg = str(e).split("\n")[0][:200]
        raise RequestError(f"the body is not valid JSON: {msg}", None) from None
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object", None)
    return body
