"""A small client of an OpenAI-compatible endpoint (easylemur's own server, vLLM, an API): the
one way the suite talks to a model, so a checkpoint and any endpoint are measured alike.

Standard library only (urllib): the suite needs no `openai` package. A 503 (a full queue), a
429, a refused or a dropped connection is retried with backoff (a timeout is not); any other
HTTP error is an `EndpointError` naming the status and the server's message.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any, Optional, Sequence

from easylemur.errors import InputError, RunError


class EndpointError(RunError):
    """The endpoint answered with an error, or not at all."""


class Client:
    """`base_url` ends in /v1 (e.g. http://127.0.0.1:8000/v1); `model` is the id sent with each
    request (default: the first of /v1/models)."""

    def __init__(self, base_url: str, model: str = "", api_key: str = "", timeout: float = 600.0,
                 retries: int = 5):
        if not base_url.startswith(("http://", "https://")):
            raise InputError(f"--endpoint {base_url!r}: expected an http(s) URL such as http://127.0.0.1:8000/v1")
        self.base = base_url.rstrip("/")
        self.api_key, self.timeout, self.retries = api_key, timeout, retries
        self.model = model or self._first_model()

    def _request(self, path: str, body: Optional[dict] = None) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode() if body is not None else None
        delay = 0.5
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.base + path, data=data, headers=headers,
                                         method="POST" if data is not None else "GET")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    return json.loads(r.read().decode("utf-8"))
            except urllib.error.HTTPError as e:
                text = e.read().decode("utf-8", "replace")
                if e.code in (429, 503) and attempt < self.retries:
                    time.sleep(delay)
                    delay *= 2
                    continue
                try:
                    text = json.loads(text)["error"]["message"]
                except (ValueError, KeyError, TypeError):
                    text = text[:300]
                raise EndpointError(f"{self.base}{path}: HTTP {e.code}: {text}") from None
            except (urllib.error.URLError, ConnectionError, TimeoutError) as e:
                reason = getattr(e, "reason", e)
                # a refused or dropped connection is retried; a request that ran past the timeout
                # is not sent again (it would cost the whole timeout again)
                if attempt < self.retries and isinstance(reason, ConnectionError):
                    time.sleep(delay)
                    delay *= 2
                    continue
                raise EndpointError(f"{self.base}{path}: no answer ({getattr(e, 'reason', e)})") from None
        raise AssertionError("unreachable")

    def _first_model(self) -> str:
        models = self._request("/models").get("data") or []
        if not models:
            raise EndpointError(f"{self.base}/models lists no model; pass --model")
        return str(models[0]["id"])

    def chat(self, messages: Sequence[dict], *, max_tokens: int, temperature: float = 0.0, seed: int = 0,
             stop: Sequence[str] = ()) -> str:
        """The assistant's reply to `messages`."""
        body: dict[str, Any] = {"model": self.model, "messages": list(messages), "max_tokens": max_tokens,
                                "temperature": temperature, "seed": seed}
        if stop:
            body["stop"] = list(stop)[:4]
        out = self._request("/chat/completions", body)
        return out["choices"][0]["message"].get("content") or ""

    def complete(self, prompt: Any, *, max_tokens: int, temperature: float = 0.0, seed: int = 0,
                 stop: Sequence[str] = ()) -> str:
        """The continuation of `prompt` (a string, or token ids where the server takes them)."""
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                                "temperature": temperature, "seed": seed}
        if stop:
            body["stop"] = list(stop)[:4]  # OpenAI takes at most 4; the rest are cut on the host
        out = self._request("/completions", body)
        return out["choices"][0].get("text") or ""
