"""Serving throughput: `python -m easylemur.serve`'s continuous batching at 1, 8 and 32
concurrent clients against transformers' `generate` one request at a time and batched, on the
same random Llama (default about 10M parameters: d=256, 4 layers, 4 heads, ff 704, vocab 32000),
the same prompts, greedy, on this machine.

    python bench/serve_throughput.py [--clients 1,8,32 --new-tokens 64 --prompt-len 32 --requests-per-client 2
                                      --reply-tokens 1024]

The server runs in this process (HTTP on 127.0.0.1, a free port, --slots = the largest client
count, --max-len = prompt + new tokens) after a warm-up that compiles its programs (every step
bucket: a step is sized to the active slots and the cache columns they use); each client
is a thread sending its requests one after another over HTTP (stdlib urllib). transformers
decodes exactly --new-tokens per row; the server may stop a row early at an end id (the random
model rarely says one), so tokens/s counts the tokens it returned. Prints one JSON line per
client count with both rates and their ratios, then a summary line. Not a test: timings go here,
never into assertions.

First, the cost of the server around one long reply (`--reply-tokens`, default 1024; 0 skips it):
the same random model with the shipped tokenizer's vocabulary and that tokenizer (so that the
reply's text is decoded, as a chat reply's is), one slot, one greedy reply non-streamed and one
streamed, against the slot engine alone decoding the same number of tokens (prefill + steps, no
HTTP, no text) and `LoadedModel.generate` (one compiled loop) for them: the ratios say what the
server adds per reply (each decoded text, stop-string checks, events, HTTP).
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
import urllib.request

os.environ.setdefault("JAX_PLATFORMS", "cpu")

from random_llama import add_model_args, random_llama  # noqa: E402 (bench/, run as a script)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--clients", default="1,8,32")
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--prompt-len", type=int, default=32)
    ap.add_argument("--requests-per-client", type=int, default=2)
    ap.add_argument("--reply-tokens", type=int, default=1024)
    add_model_args(ap, hidden=256, layers=4, heads=4, ff=704, vocab=32000)
    args = ap.parse_args()

    import numpy as np
    import torch

    from easylemur.serve.server import Server

    if args.reply_tokens:
        print(json.dumps(_reply_overhead(args)), flush=True)
    hf, ours, params = random_llama(args)  # float32 compute on both sides

    levels = [int(c) for c in args.clients.split(",")]
    N, P = args.new_tokens, args.prompt_len
    srv = Server(ours, port=0, slots=max(levels), max_queue=max(levels) * args.requests_per_client + 8,
                 max_len=P + N + 1)
    t = time.perf_counter()
    srv.warmup()
    srv.engine.warmup()  # every (rows, span) step bucket: the levels below measure no compile
    url = f"http://127.0.0.1:{srv.port}/v1/completions"
    srv.start()
    rng = np.random.default_rng(0)
    _post(url, {"prompt": rng.integers(3, args.vocab, P).tolist(), "max_tokens": 2, "temperature": 0})  # the prefill bucket
    compile_s = time.perf_counter() - t
    lone = _lone_slot_steps(ours, srv.engine, rng.integers(3, args.vocab, P).tolist(), N)
    print(json.dumps(lone), flush=True)

    rows = []
    for C in levels:
        prompts = rng.integers(3, args.vocab, (C, args.requests_per_client, P)).tolist()
        done = [0] * C

        def client(i: int) -> None:
            for p in prompts[i]:
                r = _post(url, {"prompt": p, "max_tokens": N, "temperature": 0})
                done[i] += r["usage"]["completion_tokens"]

        threads = [threading.Thread(target=client, args=(i,)) for i in range(C)]
        t = time.perf_counter()
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        serve_s = time.perf_counter() - t
        n_req = C * args.requests_per_client
        serve_rps, serve_tps = n_req / serve_s, sum(done) / serve_s

        with torch.no_grad():
            one = torch.tensor([prompts[0][0]])
            hf.generate(one, max_new_tokens=N, min_new_tokens=N, do_sample=False, pad_token_id=0)  # warm-up
            seq_s = _timed(lambda: hf.generate(one, max_new_tokens=N, min_new_tokens=N, do_sample=False, pad_token_id=0))
            batch = torch.tensor([p[0] for p in prompts])
            bat_s = _timed(lambda: hf.generate(batch, max_new_tokens=N, min_new_tokens=N, do_sample=False,
                                               pad_token_id=0))
        seq_rps, bat_rps = 1 / seq_s, C / bat_s
        row = {"clients": C, "requests": n_req, "new_tokens": N, "prompt_len": P,
               "serve_req_s": serve_rps, "serve_tok_s": serve_tps,
               "transformers_one_at_a_time_req_s": seq_rps, "transformers_one_at_a_time_tok_s": seq_rps * N,
               "transformers_batched_req_s": bat_rps, "transformers_batched_tok_s": bat_rps * N,
               "ratio_vs_one_at_a_time": serve_rps / seq_rps, "ratio_vs_batched": serve_rps / bat_rps}
        rows.append(row)
        print(json.dumps(row), flush=True)
    srv.shutdown()
    print(json.dumps({"params": params, "slots": max(levels), "server_compile_s": compile_s, "lone_slot": lone,
                      "step_programs": len(srv.engine.step_buckets()),
                      "torch_threads": torch.get_num_threads(), "cores": os.cpu_count(), "results": rows}))


def _reply_overhead(args) -> dict:
    """One long reply through the server against the engine alone and `generate` (module doc)."""
    import numpy as np

    from easylemur.serve.server import Server
    from easylemur.tokenizer.spm import Tokenizer

    tok = Tokenizer.load()
    _, model, _ = random_llama(argparse.Namespace(**{**vars(args), "vocab": tok.vocab_size}))
    model.tokenizer = tok
    R, P = args.reply_tokens, args.prompt_len
    prompt = np.random.default_rng(1).integers(3, tok.vocab_size, P).tolist()
    srv = Server(model, port=0, slots=1, max_len=P + R + 1)
    srv.warmup()
    srv.engine.warmup()
    srv.start()
    url = f"http://127.0.0.1:{srv.port}/v1/completions"
    body = {"prompt": prompt, "max_tokens": R, "temperature": 0}
    _post(url, {**body, "max_tokens": 2})  # the prefill bucket
    t = time.perf_counter()
    reply = _post(url, body)
    whole_s = time.perf_counter() - t
    n = reply["usage"]["completion_tokens"]  # the random model may say a stop id before R
    t = time.perf_counter()
    streamed = _stream(url, body)
    stream_s = time.perf_counter() - t
    assert streamed == reply["choices"][0]["text"]
    eng = srv.engine
    srv.shutdown()
    t = time.perf_counter()
    eng.prefill(0, prompt)
    for _ in range(n - 1):
        eng.step()
    engine_s = time.perf_counter() - t
    eng.release(0)
    model.generate([prompt], max_new_tokens=n, stop_ids=[])  # compiles
    t = time.perf_counter()
    model.generate([prompt], max_new_tokens=n, stop_ids=[])
    generate_s = time.perf_counter() - t
    return {"reply_tokens": n, "server_s": whole_s, "server_streamed_s": stream_s, "engine_alone_s": engine_s,
            "generate_s": generate_s, "server_over_engine": whole_s / engine_s,
            "streamed_over_engine": stream_s / engine_s, "server_over_generate": whole_s / generate_s}


def _stream(url: str, body: dict) -> str:
    req = urllib.request.Request(url, data=json.dumps({**body, "stream": True}).encode(),
                                 headers={"Content-Type": "application/json"})
    text = ""
    with urllib.request.urlopen(req, timeout=600) as r:
        for line in r:
            if line.startswith(b"data: {"):
                text += json.loads(line[6:])["choices"][0]["text"]
    return text


def _lone_slot_steps(model, sized, prompt: list, n: int) -> dict:
    """ms per engine step with one active slot: the server's engine (a step sized to the active
    slots) against the same engine running every slot over the whole row, alternating; the
    tokens must agree. Called before the server takes requests (the engine is idle)."""
    import numpy as np

    from easylemur.generate.slots import SlotEngine

    whole = SlotEngine(model.config, model.params, slots=sized.slots, max_len=sized.max_len, sized_steps=False)
    times: dict = {"sized": [], "whole": []}
    toks: dict = {"sized": [], "whole": []}
    for name, eng in (("sized", sized), ("whole", whole)):
        eng.prefill(0, prompt)
        eng.step()  # compiles what is missing
    for _ in range(n - 1):
        for name, eng in (("sized", sized), ("whole", whole)):
            t = time.perf_counter()
            toks[name].append(int(eng.step().tokens[0]))
            times[name].append(time.perf_counter() - t)
    sized.release(0)
    # the same tokens up to where float rounding over another span flips a near tie of the random
    # model (long replies); the steps' work is the same either way
    same = next((i for i, (a, b) in enumerate(zip(toks["sized"], toks["whole"])) if a != b), len(toks["sized"]))
    assert same >= min(64, n - 1), same
    ms = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    return {"lone_slot_step_ms_sized": ms["sized"], "lone_slot_step_ms_all_slots_whole_row": ms["whole"],
            "lone_slot_step_speedup": ms["whole"] / ms["sized"], "lone_slot_same_tokens": same}


def _post(url: str, body: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
