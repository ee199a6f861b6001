"""An OpenAI-compatible endpoint whose replies come from a script (a Python function of the
request), for testing the evaluation suite end to end without a model: the harness cannot tell
it from a real server (same routes, same JSON), so what it asserts is the harness's behaviour.

    with ScriptedEndpoint(chat=lambda messages: "...", complete=lambda prompt: "...") as ep:
        Client(ep.url) ...
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable, Optional


class ScriptedEndpoint:
    def __init__(self, chat: Optional[Callable[[list], str]] = None, complete: Optional[Callable[[object], str]] = None,
                 model: str = "scripted"):
        self.chat, self.complete, self.model = chat, complete, model
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/v1/models":
                    self._send(200, {"object": "list", "data": [{"id": outer.model, "object": "model"}]})
                else:
                    self._send(404, {"error": {"message": "not found"}})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                with outer.lock:
                    outer.requests.append({"path": self.path, **body})
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

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> "ScriptedEndpoint":
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
