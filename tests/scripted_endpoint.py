"""An OpenAI-compatible endpoint whose replies come from a script (a Python function of the
request), for testing the evaluation suite end to end without a model: the harness cannot tell
it from a real server (same routes, same JSON), so what it asserts is the harness's behaviour.

    with ScriptedEndpoint(chat=lambda messages: "...", complete=lambda prompt: "...") as ep:
        Client(ep.url) ...

`faults(request, attempt)` (the request's path and body; attempt 0, 1, ... for the same request)
may name a fault to answer with instead: "500", "malformed" (a 200 whose body is cut JSON),
"empty" (`{"choices": []}`), "drop" (the connection closed without an answer) or "stall" (the
answer comes only after `stall_s` seconds).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional


def send_json(handler: BaseHTTPRequestHandler, status: int, body) -> None:
    """A JSON answer from a test server's request handler."""
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class ScriptedEndpoint:
    def __init__(self, chat: Optional[Callable[[list], str]] = None, complete: Optional[Callable[[object], str]] = None,
                 model: str = "scripted", faults: Optional[Callable[[dict, int], Optional[str]]] = None,
                 stall_s: float = 3.0):
        self.chat, self.complete, self.model, self.faults, self.stall_s = chat, complete, model, faults, stall_s
        self.requests: list[dict] = []
        self.attempts: dict[str, int] = {}
        self.injected: list[str] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, status: int, body: dict) -> None:
                send_json(self, status, body)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": outer.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                request = {"path": self.path, **body}
                key = json.dumps(request, sort_keys=True)
                with outer.lock:
                    outer.requests.append(request)
                    attempt = outer.attempts[key] = outer.attempts.get(key, -1) + 1
                fault = outer.faults(request, attempt) if outer.faults else None
                if fault:
                    with outer.lock:
                        outer.injected.append(fault)
                if fault == "500":
                    self._send(500, {"error": {"message": "injected"}})
                    return
                if fault == "empty":
                    self._send(200, {"object": "text_completion", "choices": []})
                    return
                if fault == "malformed":
                    data = b'{"choices": [{"index": 0, "te'
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                if fault == "drop":  # HTTP/1.0: the connection closes with no answer written
                    return
                if fault == "stall":
                    time.sleep(outer.stall_s)
                if body.get("model") != outer.model:
                    self._send(404, {"error": {"message": f"model {body.get('model')!r} not found"}})
                elif self.path == "/v1/chat/completions" and outer.chat:
                    text = outer.chat(body["messages"])
                    self._send(200, {"object": "chat.completion", "choices": [
                        {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]})
                elif self.path == "/v1/completions" and outer.complete:
                    text = outer.complete(body["prompt"])
                    self._send(200, {"object": "text_completion", "choices": [
                        {"index": 0, "text": text, "finish_reason": "stop"}]})
                else:
                    self._send(404, {"error": {"message": f"no route {self.path}"}})

        class Server(ThreadingHTTPServer):
            def handle_error(self, request, client_address) -> None:  # a client that gave up on a stall
                pass

        self.httpd = Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "ScriptedEndpoint":
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
