"""KV-cache decoding and `python -m easylemur.generate`.

    python -m easylemur.generate --checkpoint runs/tiny_chat --chat --prompt "Write a Python add function."
    python -m easylemur.generate --checkpoint DIR --prompt "def fib(n):" --max-new-tokens 64

Chat prompts are rendered by the one ChatML renderer (easylemur.data.chat.render_prompt),
and decoding stops at <|im_end|> as well as EOS: Lemur-style chat models never train EOS.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

import jax
import jax.numpy as jnp

from easylemur.models.llama import Llama, init_cache


def _sample(logits: jax.Array, key: jax.Array, temperature: float, top_p: float) -> jax.Array:
    if temperature <= 0:
        return jnp.argmax(logits, axis=-1)
    logits = logits / temperature
    if top_p < 1.0:
        sorted_logits = jnp.sort(logits, axis=-1)[..., ::-1]
        probs = jax.nn.softmax(sorted_logits, axis=-1)
        cutoff_index = jnp.sum(jnp.cumsum(probs, axis=-1) < top_p, axis=-1, keepdims=True)
        cutoff = jnp.take_along_axis(sorted_logits, cutoff_index, axis=-1)
        logits = jnp.where(logits < cutoff, -jnp.inf, logits)
    return jax.random.categorical(key, logits, axis=-1)


def generate_ids(model, prompt_ids: Sequence[int], max_new_tokens: int = 128, temperature: float = 0.0,
                 top_p: float = 1.0, seed: int = 0, stop_ids: Sequence[int] = ()) -> list[int]:
    """Decodes up to max_new_tokens after prompt_ids with a KV cache; returns the new ids
    (without the stop token that ended decoding)."""
    cfg = model.config
    net = Llama(cfg)
    n = len(prompt_ids)
    if n == 0:
        raise ValueError("the prompt is empty")
    total = n + max_new_tokens
    if total > cfg.max_position_embeddings:
        print(f"note: {total} positions exceed max_position_embeddings={cfg.max_position_embeddings}", file=sys.stderr)
    cache_len = -(-total // 64) * 64  # fewer distinct shapes to compile
    cache = init_cache(cfg, 1, cache_len)

    @jax.jit
    def prefill(params, ids, cache):
        pos = jnp.arange(ids.shape[1], dtype=jnp.int32)[None]
        logits, cache = net.apply({"params": params}, ids, pos, jnp.ones_like(ids), cache=cache)
        return logits[:, -1], cache

    @jax.jit
    def step(params, token, pos, cache):
        logits, cache = net.apply({"params": params}, token, pos, jnp.ones_like(token), cache=cache)
        return logits[:, -1], cache

    key = jax.random.PRNGKey(seed)
    logits, cache = prefill(model.params, jnp.asarray([list(prompt_ids)], jnp.int32), cache)
    out: list[int] = []
    stops = set(int(s) for s in stop_ids)
    for i in range(max_new_tokens):
        key, sub = jax.random.split(key)
        token = int(_sample(logits, sub, temperature, top_p)[0])
        if token in stops:
            break
        out.append(token)
        if i == max_new_tokens - 1:
            break
        logits, cache = step(model.params, jnp.asarray([[token]], jnp.int32), jnp.asarray([[n + i]], jnp.int32), cache)
    return out


def generate(model, prompt: str | list, *, chat: bool = False, max_new_tokens: int = 128, temperature: float = 0.0,
             top_p: float = 1.0, seed: int = 0) -> str:
    """Text in, text out. `prompt` is a string, or with chat=True a string (one user turn) or a
    list of {"role", "content"} messages."""
    tok = model.tokenizer
    if tok is None:
        raise ValueError(f"{model.path}: no tokenizer in this checkpoint; cannot encode a text prompt")
    if chat:
        from easylemur.data.chat import render_prompt

        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else list(prompt)
        ids = render_prompt(messages, tok)
        stops = [tok.im_end_id, tok.eos_id]
    else:
        ids = [tok.bos_id] + tok.encode(prompt)
        stops = [tok.eos_id]
    new = generate_ids(model, ids, max_new_tokens, temperature, top_p, seed, stops)
    return tok.decode(new)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m easylemur.generate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkpoint", required=True, help="easylemur workdir, checkpoint step dir, or HF dir")
    parser.add_argument("--step", type=int, default=None, help="checkpoint step (default: newest)")
    parser.add_argument("--prompt", help="text to continue, or with --chat the user's message")
    parser.add_argument("--chat", action="store_true", help="ChatML chat: one turn with --prompt, else interactive on stdin")
    parser.add_argument("--system", default="", help="system message for --chat")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--temperature", type=float, default=0.0, help="0: greedy")
    parser.add_argument("--top-p", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--dtype", default=None, help="compute dtype (default float32)")
    args = parser.parse_args(argv)
    if not args.prompt and not args.chat:
        parser.error("give --prompt TEXT, or --chat")

    import easylemur

    model = easylemur.load(args.checkpoint, dtype=args.dtype, step=args.step)
    opts = dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature, top_p=args.top_p, seed=args.seed)
    system = [{"role": "system", "content": args.system}] if args.system else []
    if not args.chat:
        print(args.prompt + generate(model, args.prompt, **opts))
        return 0
    if args.prompt:
        print(generate(model, system + [{"role": "user", "content": args.prompt}], chat=True, **opts))
        return 0
    history = list(system)
    print("chat: type a message, an empty line to quit", file=sys.stderr)
    for line in sys.stdin:
        line = line.rstrip("\n")
        if not line:
            break
        history.append({"role": "user", "content": line})
        reply = generate(model, history, chat=True, **opts)
        history.append({"role": "assistant", "content": reply})
        print(reply, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
