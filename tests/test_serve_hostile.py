"""A server that can be put on a network: hostile clients (oversized, chunked, smuggled, slow and
never-read requests, and every malformed parameter) get vLLM's status codes and JSON errors, none
with exception text, while a canary client's requests keep succeeding and the process's memory
stays bounded; --api-key guards /v1 as vLLM's does (the `openai` client works with it); a Host
other than a loopback one is refused by a loopback server."""

from __future__ import annotations

import json
import socket
import threading
import time

import openai
import pytest

try:  # the HTTP library the openai client is built on (httpx2 from openai 3)
    import httpx2 as httpx
except ImportError:
    import httpx

import easylemur
from easylemur.serve.server import Server
from easylemur.tokenizer.spm import Tokenizer
from hf_models import make_hf_model

KEY = "s3cret"
MAX_BODY = 1 << 20
CANARY_TIMEOUT = 20  # seconds: a starved canary (the probe's: 60 s timeouts) fails


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    tok = Tokenizer.load()
    make_hf_model(vocab_size=tok.vocab_size, num_key_value_heads=2).save_pretrained(d)
    tok.save_hf(d)
    srv = Server(easylemur.load(d), port=0, slots=4, max_queue=16, name="m", api_key=KEY, max_body=MAX_BODY,
                 header_timeout=2, body_timeout=3, write_timeout=3, default_max_tokens=64)
    srv.warmup()
    srv.start()
    yield srv
    srv.shutdown()


def _raw(srv, data: bytes, *, read: bool = True, timeout: float = 30) -> bytes:
    """Sends raw bytes on a new connection; the whole answer (until the server closes or a pause)."""
    with socket.create_connection(("127.0.0.1", srv.port), timeout=timeout) as s:
        s.sendall(data)
        if not read:
            return b""
        out = b""
        try:
            while True:
                got = s.recv(65536)
                if not got:
                    break
                out += got
                if b"\r\n\r\n" in out and _complete(out):
                    break
        except socket.timeout:
            pass
        return out


def _complete(resp: bytes) -> bool:
    head, _, body = resp.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False


def _request(method: str, path: str, body: bytes = b"", headers: dict | None = None) -> bytes:
    h = {"Host": "127.0.0.1", "Authorization": f"Bearer {KEY}", "Content-Type": "application/json",
         "Content-Length": str(len(body)), **(headers or {})}
    lines = [f"{method} {path} HTTP/1.1"] + [f"{k}: {v}" for k, v in h.items() if v is not None]
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def _status(resp: bytes) -> int:
    return int(resp.split(b" ", 2)[1]) if resp.startswith(b"HTTP/1.1 ") else 0


def _json(resp: bytes) -> dict:
    return json.loads(resp.partition(b"\r\n\r\n")[2] or b"{}")


class Canary(threading.Thread):
    """A client asking for a short chat reply every 0.3 s; records each outcome."""

    def __init__(self, srv):
        super().__init__(daemon=True)
        # from another address (all of 127/8 is this machine): the scheduler's clients are addresses
        http = openai.DefaultHttpxClient(transport=httpx.HTTPTransport(local_address="127.0.0.2"))
        self.client = openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key=KEY, timeout=CANARY_TIMEOUT,
                                    max_retries=0, http_client=http)
        self.outcomes: list[tuple[bool, float, str]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t = time.monotonic()
            try:
                r = self.client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}],
                                                        max_tokens=2, temperature=0)
                self.outcomes.append((r.choices[0].finish_reason in ("length", "stop"), time.monotonic() - t, ""))
            except Exception as e:  # noqa: BLE001 (every failure is recorded and fails the test)
                self.outcomes.append((False, time.monotonic() - t, f"{type(e).__name__}: {e}"))
            self.stop.wait(0.3)


def _rss_mb() -> float:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024


def test_hostile_clients_while_a_canary_is_served(server):
    canary = Canary(server)
    rss0 = _rss_mb()
    canary.start()
    try:
        _framing(server)
        _slow_and_unread(server)
        _bad_parameters(server)
        _access(server)
    finally:
        canary.stop.set()
        canary.join(timeout=CANARY_TIMEOUT + 5)
    failed = [o for o in canary.outcomes if not o[0]]
    assert len(canary.outcomes) >= 5 and not failed, failed[:3]
    assert _rss_mb() - rss0 < 400  # nothing buffered whole: a 200 MB Content-Length was refused unread


def _framing(srv) -> None:
    chat = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}).encode()
    # a chunked body is a body: the request is answered, and the connection is not confused
    chunked = b"%x\r\n%s\r\n0\r\n\r\n" % (len(chat), chat)
    resp = _raw(srv, _request("POST", "/v1/chat/completions", chunked,
                              {"Content-Length": None, "Transfer-Encoding": "chunked"}))
    assert _status(resp) == 200, resp[:300]
    # smuggling and broken lengths: 400 from the HTTP layer, and the smuggled request never runs
    smuggled = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    for headers, body in (({"Transfer-Encoding": "chunked"}, b"0\r\n\r\n" + smuggled),  # CL and TE both
                          ({"Content-Length": "5\r\nContent-Length: 6"}, b"{}    "),
                          ({"Content-Length": "-1"}, b"{}"),
                          ({"Content-Length": "abc"}, b"{}")):
        resp = _raw(srv, _request("POST", "/v1/chat/completions", body, headers))
        assert _status(resp) == 400 and resp.count(b"HTTP/1.1 ") == 1, (headers, resp[:300])
    # too large: refused from the header, before reading (413), and when the body runs past the cap
    resp = _raw(srv, _request("POST", "/v1/chat/completions", b"{}", {"Content-Length": str(10 ** 23)}))
    assert _status(resp) == 400, resp[:300]  # past what h11 takes for a length
    resp = _raw(srv, _request("POST", "/v1/chat/completions", b"{}", {"Content-Length": str(200 << 20)}))
    assert _status(resp) == 413 and "at most" in _json(resp)["error"]["message"], resp[:300]
    big = b'{"prompt": "' + b"x" * (MAX_BODY + 10) + b'"}'
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(big[i:i + 65536]), big[i:i + 65536]) for i in range(0, len(big), 65536))
    resp = _raw(srv, _request("POST", "/v1/completions", chunks + b"0\r\n\r\n",
                              {"Content-Length": None, "Transfer-Encoding": "chunked"}))
    assert _status(resp) == 413, resp[:300]


def _slow_and_unread(srv) -> None:
    # slowloris: connections that never finish their headers are closed after header_timeout (2 s)
    socks = []
    for _ in range(30):
        s = socket.create_connection(("127.0.0.1", srv.port), timeout=10)
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        socks.append(s)
    time.sleep(1)
    for s in socks:
        s.sendall(b"a")  # a byte now and then does not extend the deadline
    closed = 0
    for s in socks:
        try:
            closed += s.recv(1) == b""
        except (socket.timeout, ConnectionResetError):
            closed += 1
        s.close()
    assert closed == len(socks)
    # a body that never finishes: 408 after body_timeout (3 s)
    resp = _raw(srv, _request("POST", "/v1/completions", b'{"prompt": ', {"Content-Length": "100"}))
    assert _status(resp) == 408, resp[:300]
    # one request of many prompts, and streams whose clients never read: the canary still gets turns
    many = json.dumps({"model": "m", "prompt": ["def f():"] * 8, "max_tokens": 96, "temperature": 0}).encode()
    unread = []
    for _ in range(8):
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.connect(("127.0.0.1", srv.port))
        s.sendall(_request("POST", "/v1/chat/completions", json.dumps(
            {"model": "m", "messages": [{"role": "user", "content": "go"}], "max_tokens": 256, "stream": True,
             "temperature": 0}).encode()))
        unread.append(s)
    resp = _raw(srv, _request("POST", "/v1/completions", many), timeout=120)
    assert _status(resp) == 200 and len(_json(resp)["choices"]) == 8
    for s in unread:
        s.close()


def _bad_parameters(srv) -> None:
    def post(body, path="/v1/chat/completions", headers=None) -> tuple[int, dict]:
        raw = body if isinstance(body, bytes) else json.dumps(body).encode()
        resp = _raw(srv, _request("POST", path, raw, headers))
        return _status(resp), _json(resp)

    msg = [{"role": "user", "content": "hi"}]
    cases = [
        (b"[" * 100000 + b"]" * 100000, 400, "nested too deeply"),
        (b'{"model": "m", "messages": [], "max_tokens": ' + b"9" * 100000 + b"}", 400, "not valid JSON"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}', 400, "NaN"),
        (b'{"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": 1e400}', 400, "finite"),
        ({"model": "m", "messages": msg, "seed": 2 ** 70}, 400, "64-bit"),
        ({"model": "m", "prompt": [1] * 256, "max_tokens": 0, "echo": True, "logprobs": 1}, 400, "context length"),
        ({"model": "m", "prompt": ["a"] * 9}, 400, "at most 8"),
        ({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {}}]}]},
         400, "text parts"),
        ({"model": "m", "prompt": "x" * (MAX_BODY - 100)}, 400, "cannot fit"),
    ]
    for body, status, words in cases:
        path = "/v1/completions" if isinstance(body, dict) and "prompt" in body else "/v1/chat/completions"
        got, out = post(body, path)
        assert got == status and words in out["error"]["message"], (str(body)[:80], got, out)
        assert "Traceback" not in json.dumps(out) and set(out["error"]) == {"message", "type", "param", "code"}
    # text parts are content, joined by newlines as vLLM joins them
    got, out = post({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                            {"type": "text", "text": "b"}]}],
                     "max_tokens": 1})
    assert got == 200 and out["usage"]["prompt_tokens"] == srv.service.chat_ids([{"role": "user", "content": "a\nb"}]) \
        .__len__()
    # methods, paths and content types
    resp = _raw(srv, _request("GET", "/v1/chat/completions"))
    assert _status(resp) == 405 and b"allow: POST" in resp.lower().replace(b"allow: post", b"allow: POST")
    assert _status(_raw(srv, _request("GET", "/v1/models?x=1"))) == 200
    assert _status(_raw(srv, _request("OPTIONS", "/v1/models"))) == 405
    head = _raw(srv, _request("HEAD", "/health"), timeout=5)
    assert _status(head) == 200 and head.endswith(b"\r\n\r\n")
    for ctype in ("text/plain", "application/x-www-form-urlencoded", None):
        got, out = post({"model": "m", "messages": msg}, headers={"Content-Type": ctype})
        assert got == 415, (ctype, got, out)
    resp = _raw(srv, _request("GET", "/health"))
    assert b"\r\nserver:" not in resp.lower() and b"python" not in resp.lower()


def _access(srv) -> None:
    chat = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}).encode()
    for auth in (None, "Bearer wrong", KEY):
        resp = _raw(srv, _request("POST", "/v1/chat/completions", chat, {"Authorization": auth}))
        assert _status(resp) == 401 and _json(resp)["error"]["code"] == 401, (auth, resp[:200])
    assert _status(_raw(srv, _request("GET", "/v1/models", headers={"Authorization": None}))) == 401
    assert _status(_raw(srv, _request("GET", "/health", headers={"Authorization": None}))) == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=f"http://127.0.0.1:{srv.port}/v1", api_key="wrong", max_retries=0).models.list()
    # a page on another origin (DNS rebinding) names another host: a loopback server refuses it
    for host in ("evil.example", "evil.example:80", "10.0.0.1"):
        resp = _raw(srv, _request("GET", "/v1/models", headers={"Host": host}))
        assert _status(resp) == 400 and "localhost" in _json(resp)["error"]["message"], host
    for host in ("localhost", "localhost:9", "[::1]:80", "127.0.0.1"):
        assert _status(_raw(srv, _request("GET", "/v1/models", headers={"Host": host}))) == 200, host
