"""Serve a model at an OpenAI-compatible endpoint (/v1/completions, /v1/chat/completions,
/v1/models, /health), continuously batched over a fixed number of slots.

Example: python -m easylemur.serve --checkpoint runs/tiny_chat --port 8000

Chat renders with the model's chat template, as its HF export does (ChatML's or the tokenizer's
own); a base model has none, and its /v1/chat/completions is a 400 unless --chat-template is
given. A request without max_tokens gets 16 on /v1/completions (OpenAI's default) and
--default-max-tokens on chat, at most what the context leaves after the prompt.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Optional, Sequence

from easylemur.errors import InputError, add_debug_flag
from easylemur.serve import CHAT_MAX_TOKENS, COMPLETION_MAX_TOKENS


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m easylemur.serve", description=__doc__.split("\n\n")[0],
                                     epilog="\n\n".join(__doc__.split("\n\n")[1:]),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True, help="easylemur workdir, checkpoint step dir, or HF dir")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: newest)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free port, printed)")
    parser.add_argument("--slots", type=int, default=8, help="requests decoded together (the KV cache's batch)")
    parser.add_argument("--max-queue", type=int, default=64, help="requests waiting for a slot before 503s")
    parser.add_argument("--max-len", type=int, default=None,
                        help="KV cache length per slot: prompt + max_tokens limit (default: max_position_embeddings)")
    parser.add_argument("--model-name", default=None,
                        help="the id /v1/models reports; a request naming another model is a 404 (default: the "
                             "checkpoint's folder name, and --checkpoint as given is answered too)")
    parser.add_argument("--chat-template", metavar="FILE", default=None,
                        help="a Jinja chat template (or a tokenizer_config.json holding one) that chat renders with "
                             "instead of the model's own; a base model has none, and needs one to chat")
    parser.add_argument("--default-max-tokens", type=int, default=CHAT_MAX_TOKENS,
                        help=f"max_tokens of a chat request that sets none (default {CHAT_MAX_TOKENS}; "
                             f"/v1/completions: {COMPLETION_MAX_TOKENS}, OpenAI's), at most the context left after "
                             "the prompt")
    parser.add_argument("--api-key", default=None,
                        help="require 'Authorization: Bearer KEY' on /v1 routes (401 otherwise), as vLLM's --api-key; "
                             "default: $EASYLEMUR_API_KEY, else $VLLM_API_KEY, else none")
    parser.add_argument("--max-body-mb", type=float, default=16,
                        help="the largest request body accepted, in MiB (413 beyond; default 16)")
    parser.add_argument("--dtype", default=None, help="compute dtype (default float32)")
    parser.add_argument("--mesh", default=None, help="shard the model, e.g. 'data:1,fsdp:1,tensor:-1' (default: one device)")
    add_debug_flag(parser)
    args = parser.parse_args(argv)

    from easylemur.generate.api import load
    from easylemur.serve.server import Server

    for flag, v in (("--slots", args.slots), ("--max-queue", args.max_queue),
                    ("--default-max-tokens", args.default_max_tokens)):
        if v < 1:
            raise InputError(f"{flag}={v} must be >= 1")
    template = None
    if args.chat_template is not None:  # before the model loads: a bad file is a quick error
        from easylemur.chat.files import read_template_file

        template = read_template_file(args.chat_template)
    if args.max_body_mb <= 0:
        raise InputError(f"--max-body-mb={args.max_body_mb} must be > 0")
    api_key = args.api_key or os.environ.get("EASYLEMUR_API_KEY") or os.environ.get("VLLM_API_KEY") or None
    model = load(args.checkpoint, dtype=args.dtype, step=args.step, mesh=args.mesh)
    server = Server(model, host=args.host, port=args.port, slots=args.slots, max_queue=args.max_queue,
                    max_len=args.max_len, name=args.model_name, chat_template=template,
                    chat_template_why=f"--chat-template {args.chat_template}", default_max_tokens=args.default_max_tokens,
                    api_key=api_key, max_body=int(args.max_body_mb * 2**20))
    if not server.loopback and api_key is None:
        print(f"warning: --host {args.host} reaches beyond this machine and no --api-key is set: anyone who can "
              "connect can use the model", file=sys.stderr, flush=True)
    server.warmup()
    chat = server.service.chat_why if server.service.renderer is not None else "none, chat is a 400"
    print(f"serving {server.service.name} at http://{args.host}:{server.port}/v1 ({args.slots} slots, "
          f"cache {server.engine.max_len} tokens each; chat template: {chat})", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.shutdown()
    return 0
