"""Data pipeline throughput against raw encoding of the same text, for one or more tokenizers.

    python bench/data_throughput.py [--config configs/tiny_pretrain.py] [--prefetch 0 2] [--batch-size 16 64]
        [--seconds 10] [--repeats 3] [--tokenizer config bpe PATH ...] [--bpe-vocab 4096]

--tokenizer names the tokenizers measured (default: config): `config` is the config's
data.tokenizer (the shipped sentencepiece model when unset); `bpe` is an HF `tokenizers`
byte-level BPE trained here on the config's sources with Llama-3's pre-tokenizer regex and
special tokens, --bpe-vocab pieces (default 4096, the shipped model's size); anything else is a
path `load_tokenizer` reads (a sentencepiece .model, a tokenizer.json, an HF directory).

raw: `encode` over every document of the config's sources, already decoded in memory, one
thread (the reference for ratio_to_raw). raw_array: the same with `encode_array` (ids as a numpy
buffer, what the pipeline calls), the reference for ratio_to_raw_array. pipeline: `make_pipeline`
(read, parse, tokenize, pack, mix, batch) with the given `data.prefetch` values (N batches built
ahead in a thread, N tokenizer threads per source; the batches are the same for every value),
steady state after a warm-up, counting non-padding tokens.

Vocabularies differ, so tokens/s alone misleads: every line also gives bytes of text per second
(raw: the UTF-8 bytes encoded; pipeline: the bytes the batch's tokens stand for, BOS/EOS none).
Tokenizers and settings are measured round-robin `--repeats` times (so a burst of load elsewhere
on the machine hits all of them alike); each line gives the median and every trial. Prints one
JSON line per measurement, then with several tokenizers one "vs" line per other tokenizer: its
tokens/s and bytes/s over the first's, raw and per pipeline setting. The host's load average
is on the pipeline lines, since thread parallelism needs idle cores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Llama-3's pre-tokenizer regex and special tokens (its tokenizer.json)
LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
                r"\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"]


def source_texts(cfg) -> list[str]:
    from easylemur.config import source_dict
    from easylemur.data.readers import open_source

    texts = []
    for s in cfg.data.sources.values():
        sd = source_dict(s)
        src = open_source(sd)
        field = sd["field"] or "text"
        for i in range(len(src)):
            _, rec = src[i]
            if isinstance(rec, dict) and isinstance(rec.get(field), str):
                texts.append(rec[field])
    return texts


def train_bpe(texts: list[str], vocab_size: int, out: Path) -> Path:
    """A Llama-3-style byte-level BPE (tokenizer.json + tokenizer_config.json, BOS added by the
    pipeline as for Llama-3) trained on `texts`."""
    import tokenizers
    from tokenizers import AddedToken, Regex, decoders, models, pre_tokenizers, processors, trainers

    tok = tokenizers.Tokenizer(models.BPE(ignore_merges=True, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(LLAMA3_SPECIAL), show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in LLAMA3_SPECIAL])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    out.mkdir(parents=True, exist_ok=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "bos_token": LLAMA3_SPECIAL[0], "eos_token": LLAMA3_SPECIAL[1]}))
    return out


def byte_lengths(tok) -> np.ndarray:
    """Bytes of text each id stands for: 0 for control/special tokens (BOS, EOS), 1 for a byte
    piece, else its piece's UTF-8 length (sentencepiece's "▁" is one space; a byte-level BPE
    piece has one character per byte)."""
    out = np.zeros(tok.vocab_size, np.int64)
    if tok.kind == "spm":
        sp = tok.sp
        for i in range(tok.vocab_size):
            if sp.is_byte(i):
                out[i] = 1
            elif not (sp.is_control(i) or sp.is_unknown(i)):
                out[i] = len(sp.id_to_piece(i).replace("\u2581", " ").encode("utf-8"))
        return out
    special = {i for i, t in tok.tok.get_added_tokens_decoder().items() if t.special}
    byte_level = type(tok.tok.decoder).__name__ == "ByteLevel"
    for i in range(tok.vocab_size):
        piece = tok.id_to_piece(i)
        if piece is None or i in special:
            continue
        if byte_level:
            out[i] = len(piece)
        elif piece.startswith("<0x") and piece.endswith(">") and len(piece) == 6:
            out[i] = 1
        else:
            out[i] = len(piece.replace("\u2581", " ").encode("utf-8"))
    return out


def raw_rate(texts: list[str], tok, seconds: float, array: bool = False) -> tuple[float, float]:
    """(tokens/s, bytes/s) of encoding `texts` over and over for `seconds`."""
    enc = tok.encode_array if array else tok.encode
    sizes = [len(t.encode("utf-8")) for t in texts]
    n = nbytes = 0
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        for t, b in zip(texts, sizes):
            n += len(enc(t))
            nbytes += b
    dt = time.perf_counter() - t0
    return n / dt, nbytes / dt


def pipeline_rate(cfg, tok, table: np.ndarray, prefetch: int, seconds: float, batch_size: int) -> tuple[float, float]:
    """(tokens/s, bytes/s) of the pipeline's batches, non-padding tokens."""
    from easylemur.data.pipeline import make_pipeline

    cfg.data.prefetch = prefetch
    with make_pipeline(cfg.data, tok, global_batch_size=batch_size, seed=0) as it:
        warm = time.perf_counter()
        while time.perf_counter() - warm < min(3.0, seconds / 2):
            next(it)  # files read, buffers filled
        n = nbytes = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            b = next(it)
            ids = b["input_ids"][b["segment_ids"] > 0]
            n += ids.size
            nbytes += int(table[ids].sum())
        dt = time.perf_counter() - t0
        return n / dt, nbytes / dt


def load(spec: str, cfg, texts: list[str], vocab: int, tmp: Path):
    from easylemur.tokenizer import load_tokenizer

    if spec == "config":
        return load_tokenizer(cfg.data.get("tokenizer") or None)
    if spec == "bpe":
        return load_tokenizer(train_bpe(texts, vocab, tmp / "bpe"))
    return load_tokenizer(spec)


def _median(trials: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(t for t, _ in trials), statistics.median(b for _, b in trials)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="configs/tiny_pretrain.py")
    ap.add_argument("--prefetch", type=int, nargs="*", default=[0, 2])
    ap.add_argument("--batch-size", type=int, nargs="*", default=[16, 64])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tokenizer", nargs="+", default=["config"],
                    help="config, bpe, or a tokenizer path; the first is the reference of the 'vs' lines")
    ap.add_argument("--bpe-vocab", type=int, default=4096, help="vocabulary of the `bpe` tokenizer (specials included)")
    args = ap.parse_args()
    if len(set(args.tokenizer)) != len(args.tokenizer):
        ap.error(f"--tokenizer: {args.tokenizer} names a tokenizer twice")
    from easylemur.config import load_config

    cfg = load_config(args.config)
    texts = source_texts(cfg)
    with tempfile.TemporaryDirectory() as tmp:
        toks = {spec: load(spec, cfg, texts, args.bpe_vocab, Path(tmp)) for spec in args.tokenizer}
        tables = {spec: byte_lengths(tok) for spec, tok in toks.items()}
        settings = [(p, b) for b in args.batch_size for p in args.prefetch]
        raw: dict = {(s, a): [] for s in toks for a in (False, True)}
        pipe: dict = {(s, p, b): [] for s in toks for p, b in settings}
        for _ in range(args.repeats):
            for spec, tok in toks.items():
                for array in (False, True):
                    raw[(spec, array)].append(raw_rate(texts, tok, args.seconds, array))
        for _ in range(args.repeats):
            for p, b in settings:
                for spec, tok in toks.items():
                    pipe[(spec, p, b)].append(pipeline_rate(cfg, tok, tables[spec], p, args.seconds, b))

    def who(spec):
        return {"tokenizer": spec, "kind": toks[spec].kind, "vocab_size": toks[spec].vocab_size}

    med = {k: _median(v) for k, v in {**raw, **pipe}.items()}
    for spec in toks:
        for array in (False, True):
            t, by = med[(spec, array)]
            print(json.dumps({"what": "raw encode" + (", numpy ids" if array else ""), **who(spec),
                              "tokens_per_s": round(t), "bytes_per_s": round(by), "bytes_per_token": round(by / t, 3),
                              "trials": [round(x) for x, _ in raw[(spec, array)]]}), flush=True)
        for p, b in settings:
            t, by = med[(spec, p, b)]
            print(json.dumps({"what": "pipeline", **who(spec), "prefetch": p, "seq_len": cfg.data.seq_len,
                              "cpus": os.cpu_count(), "load_avg_1m": round(os.getloadavg()[0], 2), "batch_size": b,
                              "tokens_per_s": round(t), "bytes_per_s": round(by),
                              "trials": [round(x) for x, _ in pipe[(spec, p, b)]],
                              "ratio_to_raw": round(t / med[(spec, False)][0], 3),
                              "ratio_to_raw_array": round(t / med[(spec, True)][0], 3)}), flush=True)
    ref = args.tokenizer[0]
    for spec in args.tokenizer[1:]:
        def vs(key_of):
            t, by = med[key_of(spec)]
            rt, rby = med[key_of(ref)]
            return {"tokens_per_s": round(t / rt, 3), "bytes_per_s": round(by / rby, 3)}

        print(json.dumps({"what": "vs", **who(spec), "reference": ref, "raw": vs(lambda s: (s, False)),
                          "raw_array": vs(lambda s: (s, True)),
                          "pipeline": [{"prefetch": p, "batch_size": b, **vs(lambda s: (s, p, b))} for p, b in settings]}),
              flush=True)


if __name__ == "__main__":
    main()
