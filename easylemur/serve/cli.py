"""Serve a model at an OpenAI-compatible endpoint (/v1/completions, /v1/chat/completions,
/v1/models, /health), continuously batched over a fixed number of slots.

Example: python -m easylemur.serve --checkpoint runs/tiny_chat --port 8000
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from easylemur.errors import InputError, add_debug_flag


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m easylemur.serve", description=__doc__.split("\n\n")[0],
                                     epilog=__doc__.split("\n\n")[1])
    parser.add_argument("--checkpoint", required=True, help="easylemur workdir, checkpoint step dir, or HF dir")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: newest)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    parser.add_argument("--port", type=int, default=8000, help="port (0: any free port, printed)")
    parser.add_argument("--slots", type=int, default=8, help="requests decoded together (the KV cache's batch)")
    parser.add_argument("--max-queue", type=int, default=64, help="requests waiting for a slot before 503s")
    parser.add_argument("--max-len", type=int, default=None,
                        help="KV cache length per slot: prompt + max_tokens limit (default: max_position_embeddings)")
    parser.add_argument("--model-name", default=None, help="the id /v1/models reports (default: the checkpoint's name)")
    parser.add_argument("--dtype", default=None, help="compute dtype (default float32)")
    parser.add_argument("--mesh", default=None, help="shard the model, e.g. 'data:1,fsdp:1,tensor:-1' (default: one device)")
    add_debug_flag(parser)
    args = parser.parse_args(argv)

    import easylemur
    from easylemur.serve.server import Server

    for flag, v in (("--slots", args.slots), ("--max-queue", args.max_queue)):
        if v < 1:
            raise InputError(f"{flag}={v} must be >= 1")
    model = easylemur.load(args.checkpoint, dtype=args.dtype, step=args.step, mesh=args.mesh)
    server = Server(model, host=args.host, port=args.port, slots=args.slots, max_queue=args.max_queue,
                    max_len=args.max_len, name=args.model_name)
    server.warmup()
    print(f"serving {server.service.name} at http://{args.host}:{server.port}/v1 ({args.slots} slots, "
          f"cache {server.engine.max_len} tokens each)", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    finally:
        server.shutdown()
    return 0
