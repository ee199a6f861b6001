"""The model a suite evaluates, reached one way: an OpenAI-compatible client. `--endpoint` is a
server already running; `--checkpoint` loads the model and starts easylemur's own continuously
batched server on a free local port, so a checkpoint and an endpoint are measured by the same
code."""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from easylemur.eval.backends.client import Client


@dataclasses.dataclass
class ModelAccess:
    """The client every task uses, and (for a checkpoint) the loaded model and its server."""

    client: Client
    name: str
    loaded: Any = None
    server: Any = None

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()


def client_options(args: Any) -> dict:
    """The client's fault handling from the command line: --request-timeout, --retries."""
    return {"timeout": float(getattr(args, "request_timeout", None) or 600.0),
            "retries": int(5 if getattr(args, "retries", None) is None else args.retries)}


def open_model(args: Any) -> ModelAccess:
    """The access that `args` asks for: `endpoint` (with `model`, `api_key`), or `checkpoint`
    (with `dtype`, `step`, `chat_template`, `slots`, `max_len`)."""
    if args.endpoint:
        client = Client(args.endpoint, model=args.model or "", api_key=args.api_key or os.environ.get("OPENAI_API_KEY", ""),
                        **client_options(args))
        return ModelAccess(client, client.model)
    from easylemur.generate.api import load
    from easylemur.serve.server import Server

    template = None
    if args.chat_template:
        from easylemur.chat.files import read_template_file

        template = read_template_file(args.chat_template)
    loaded = load(args.checkpoint, dtype=args.dtype, step=args.step)
    if template is not None:  # the server's chat and the rows that render locally (prompt_format chatml) alike
        loaded.use_chat_template(template, f"--chat-template {args.chat_template}")
    server = Server(loaded, port=0, slots=args.slots, max_len=args.max_len)
    server.warmup()
    server.start()
    client = Client(f"http://127.0.0.1:{server.port}/v1", model=server.service.name, **client_options(args))
    return ModelAccess(client, server.service.name, loaded, server)
