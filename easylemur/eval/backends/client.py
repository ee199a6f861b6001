"""A small client of an OpenAI-compatible endpoint (easylemur's own server, vLLM, an API): the
one way the suite talks to a model, so a checkpoint and any endpoint are measured alike.

Standard library only (urllib): the suite needs no `openai` package.

Faults, two kinds (docs/design.md, "Evaluation suites"):
- transient: a 5xx or 429, a refused, dropped or reset connection, a request past `timeout`
  seconds (a hung endpoint), a body that is not JSON, or one without the answer's fields
  (`{"choices": []}`). Each is retried, `retries` times at most, after a backoff that doubles
  from `backoff` seconds up to `MAX_BACKOFF_S`; when every try failed the request raises
  `EndpointLost`: the sample or episode is lost, counted as such and never scored as a wrong
  answer.
- a refusal: any other HTTP error (a 400 for a prompt past the model's context, a 401, a 404
  model): not retried, `EndpointError` naming the status and the server's message; the
  benchmark's own protocol decides what it means (a code sample that cannot be answered
  fails; MINT's episode ends with its error action, as MINT's harness ends it).
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Optional, Sequence

from easylemur.errors import InputError
from easylemur.eval.api.faults import EndpointError, EndpointLost

__all__ = ["Client", "EndpointError", "EndpointLost"]

MAX_BACKOFF_S = 8.0


class _Transient(Exception):
    """One try's transient fault, said in a few words."""


def _choice(out: Any) -> dict:
    """The first choice of a completion's body; _Transient when the body lacks it."""
    choices = out.get("choices") if isinstance(out, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _Transient("a body without choices")
    return choices[0]


def _chat_text(out: Any) -> str:
    message = _choice(out).get("message")
    if not isinstance(message, dict) or not isinstance(message.get("content") or "", str):
        raise _Transient("a choice without a message's content")
    return message.get("content") or ""


def _completion_text(out: Any) -> str:
    text = _choice(out).get("text")
    if not isinstance(text or "", str):
        raise _Transient("a choice without text")
    return text or ""


def _models(out: Any) -> list:
    data = out.get("data") if isinstance(out, dict) else None
    if not isinstance(data, list) or not all(isinstance(m, dict) and "id" in m for m in data):
        raise _Transient("a model list without data")
    return data


class Client:
    """`base_url` ends in /v1 (e.g. http://127.0.0.1:8000/v1); `model` is the id sent with each
    request (default: the first of /v1/models). `timeout`: seconds one try may take; `retries`:
    tries after the first for a transient fault."""

    def __init__(self, base_url: str, model: str = "", api_key: str = "", timeout: float = 600.0,
                 retries: int = 5, backoff: float = 0.5):
        if not base_url.startswith(("http://", "https://")):
            raise InputError(f"--endpoint {base_url!r}: expected an http(s) URL such as http://127.0.0.1:8000/v1")
        if timeout <= 0 or retries < 0:
            raise InputError(f"--request-timeout {timeout} / --retries {retries}: expected a timeout > 0 and retries >= 0")
        self.base = base_url.rstrip("/")
        self.api_key, self.timeout, self.retries, self.backoff = api_key, timeout, retries, backoff
        self.model = model or self._first_model()

    def _request(self, path: str, body: Optional[dict] = None, answer: Callable[[Any], Any] = lambda out: out) -> Any:
        """`answer(parsed body)` of the first try that gives one; transient faults retried."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode() if body is not None else None
        fault = ""
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(min(MAX_BACKOFF_S, self.backoff * 2 ** (attempt - 1)))
            req = urllib.request.Request(self.base + path, data=data, headers=headers,
                                         method="POST" if data is not None else "GET")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as r:
                    raw = r.read()
                try:
                    out = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError):
                    raise _Transient("a body that is not JSON") from None
                return answer(out)
            except urllib.error.HTTPError as e:
                try:
                    text = e.read().decode("utf-8", "replace")
                except (OSError, http.client.HTTPException):  # the error's body cut off with the connection
                    text = ""
                try:
                    text = json.loads(text)["error"]["message"]
                except (ValueError, KeyError, TypeError):
                    text = text[:300]
                if e.code >= 500 or e.code == 429:
                    fault = f"HTTP {e.code}: {text}"
                    continue
                raise EndpointError(f"{self.base}{path}: HTTP {e.code}: {text}") from None
            except _Transient as e:
                fault = str(e)
            except (urllib.error.URLError, http.client.HTTPException, ConnectionError, TimeoutError,
                    socket.timeout) as e:
                reason = getattr(e, "reason", e)
                fault = ("no answer within the request timeout" if isinstance(reason, (TimeoutError, socket.timeout))
                         else f"no answer ({type(reason).__name__}: {reason})")
        raise EndpointLost(f"{self.base}{path}: lost after {self.retries + 1} tries: {fault}")

    def _first_model(self) -> str:
        models = self._request("/models", answer=_models)
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
        return self._request("/chat/completions", body, _chat_text)

    def complete(self, prompt: Any, *, max_tokens: int, temperature: float = 0.0, seed: int = 0,
                 stop: Sequence[str] = ()) -> str:
        """The continuation of `prompt` (a string, or token ids where the server takes them)."""
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                                "temperature": temperature, "seed": seed}
        if stop:
            body["stop"] = list(stop)[:4]  # OpenAI takes at most 4; the rest are cut on the host
        return self._request("/completions", body, _completion_text)
