"""Generate text from a checkpoint or an HF directory: `python -m easylemur.generate`.

    python -m easylemur.generate --checkpoint runs/tiny_chat --chat --prompt "Write a Python add function."
    python -m easylemur.generate --checkpoint DIR --prompt "def fib(n):" --max-new-tokens 64
"""

from __future__ import annotations

import argparse
import sys
from typing import Iterator, Optional, Sequence

from easylemur.errors import InputError, add_debug_flag
from easylemur.generate.engine import Sampling
from easylemur.tokenizer.spm import check_text


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m easylemur.generate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="easylemur workdir, checkpoint step dir, or HF dir")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: newest)")
    parser.add_argument("--prompt", help="text to continue, or with --chat the user's message")
    parser.add_argument("--chat", action="store_true",
                        help="chat in the model's chat template (ChatML's or its tokenizer's own, as its HF export "
                             "renders it): one turn with --prompt, else interactive on stdin")
    parser.add_argument("--chat-template", metavar="FILE", default=None,
                        help="with --chat: render with this Jinja chat template instead (a base model has none)")
    parser.add_argument("--system", default="", help="system message for --chat")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    parser.add_argument("--top-k", type=int, default=0, help="0: no top-k")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default=None, help="compute dtype (default float32)")
    parser.add_argument("--mesh", default=None, help="shard the model, e.g. 'data:1,fsdp:1,tensor:-1' (default: one device)")
    add_debug_flag(parser)
    args = parser.parse_args(argv)
    if not args.prompt and not args.chat:
        raise InputError("give --prompt TEXT, or --chat")
    # before the model loads: undecodable bytes in argv arrive as lone surrogates
    check_text(args.prompt or "", "--prompt")
    check_text(args.system, "--system")
    if args.chat_template is not None and not args.chat:
        raise InputError("--chat-template FILE: only with --chat")
    template = None
    if args.chat_template is not None:
        from easylemur.chat.files import read_template_file

        template = read_template_file(args.chat_template)
    if args.max_new_tokens < 1:
        raise InputError(f"--max-new-tokens {args.max_new_tokens}: must be at least 1")
    Sampling(args.temperature, args.top_k, args.top_p).validate()

    from easylemur.generate.api import load

    model = load(args.checkpoint, dtype=args.dtype, step=args.step, mesh=args.mesh)
    if template is not None:
        model.use_chat_template(template, f"--chat-template {args.chat_template}")
    if args.chat:
        model.chat_renderer()  # a base model without --chat-template: say so before reading stdin
    opts = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_k=args.top_k,
                top_p=args.top_p, seed=args.seed)
    system = [{"role": "system", "content": args.system}] if args.system else []
    if not args.chat:
        sys.stdout.write(args.prompt)
        sys.stdout.flush()
        model.complete([args.prompt], stream=True, **opts)
        print()
        return 0
    if args.prompt:
        model.chat(system + [{"role": "user", "content": args.prompt}], stream=True, **opts)
        print()
        return 0
    history = list(system)
    if sys.stdin.isatty():  # piped input needs no instructions (stderr stays for errors)
        print("chat: type a message, an empty line to quit", file=sys.stderr)
    for line in _stdin_lines():
        if not line:
            break
        history.append({"role": "user", "content": line})
        reply = model.chat(history, stream=True, **opts)
        print(flush=True)
        history.append({"role": "assistant", "content": reply})
    return 0


def _stdin_lines() -> Iterator[str]:
    """stdin's lines without their line ends, decoded as UTF-8 strictly: a line that is not
    UTF-8 is an InputError naming it (Python's own decoding would pass the bytes on as lone
    surrogates, or fail with a UnicodeDecodeError, depending on the locale)."""
    raw = getattr(sys.stdin, "buffer", None)
    for n, line in enumerate(raw if raw is not None else sys.stdin, 1):
        if isinstance(line, bytes):
            try:
                line = line.decode("utf-8")
            except UnicodeDecodeError as e:
                raise InputError(f"stdin line {n}: not UTF-8 text (byte 0x{line[e.start]:02x} at byte {e.start}); "
                                 "give UTF-8 text") from None
        yield check_text(line.rstrip("\r\n"), f"stdin line {n}")
