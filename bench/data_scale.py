"""The data pipeline at scale: building a token store and reading it for training, on a synthetic
corpus of a given size.

    python bench/data_scale.py [--gb 1,5] [--workdir DIR] [--workers 1 2] [--file-mb 128] [--sample-mb 16]
        [--batch 64] [--late-step 1000] [--shard-steps 100] [--repeats 3] [--reuse-store] [--out FILE] [--quick]

Corpus (per --gb size, GB = 10^9 bytes of decompressed JSONL): `.jsonl.zst` files of two sources,
code (3/4 of the bytes: Python-like lines from a vocabulary of keywords and identifiers, with
indentation) and text (1/4: prose from a word list plus made-up words), documents of 1-20 KB
(lognormal, median 4 KB), each source in max(4, size / --file-mb) files so that tokenize has
units to share out. Written once under --workdir (default: a private dir in the system temp dir)
with a corpus.json marker; a rerun with the same size, seed and --file-mb reuses it.

Figures, one JSON line each (also appended to --out), then one table:

  raw_sentencepiece   `Tokenizer.encode_array` over a --sample-mb sample of the same documents (both
                      sources in the corpus's proportions), one thread, already decoded: the peer.
  tokenize            `python -m easylemur.data tokenize --workers K` then `finalize`, per K in
                      --workers, into a fresh store: wall time, tokens/s, tokens/s per worker and its
                      ratio to raw (1.0 = a worker is as fast as bare sentencepiece on one core),
                      tokens per CPU-second of the whole process tree (less sensitive to other load on
                      the machine), and the peak RSS of the largest process of the tree (its VmHWM,
                      polled: the tokenize process, or with K > 1 the largest worker), also as the
                      growth over a process that only imports the tokenize modules, loads the config and
                      the tokenizer (what a worker holds before its first record). Wall times include
                      the process start (imports, ~2-3 s a process here): negligible at 1 GB, not at
                      --quick sizes.
  reader              `make_pipeline` over the store (code:text weights 10:1 as in
                      configs/tiny_pretrain.py, seq_len 2048, global batch --batch, the config's
                      data.prefetch), one fresh process: RSS after the imports and tokenizer load, peak
                      RSS (VmHWM) at the end, their difference (what the reader holds), index_bytes (the
                      store's document offsets in memory, StoreSource.index_bytes, the one part that
                      grows with the corpus), time to build the pipeline and to the first batch, and
                      tokens/s (non-padding) from step 10 to --late-step against the trainer's need,
                      MaxText-level 1,400 tokens/s per chip x 4 chips per v4 host = 5,600 tokens/s.
  resume              fresh processes timing `make_pipeline + set_state + next()` from the state saved
                      after step 1 and after step --late-step (--repeats each, alternated; median and
                      trials); the first batch is checked against the one the uninterrupted run made.
  shards              bytes read from the store (DataIterator.bytes_read, read-ahead included) by each of
                      N data-shard processes (process_index/process_count, N = 1, 2, 4) over the same
                      --shard-steps global batches: ~1/N of N=1 each.
  scaling             with several sizes, largest minus smallest: the reader's peak RSS next to its
                      index's growth, and the tokenize worker's peak RSS (which follows --file-mb while
                      a JSONL reader holds a decompressed file).

--quick: --gb 0.01,0.04, --late-step 100, --shard-steps 20, --repeats 1, --sample-mb 4, a smoke run
of a minute or two. Tokenizing runs at about the sentencepiece rate (~5 MB/s per core here), so the
default 1 GB + 5 GB with 1 and 2 workers takes most of an hour on two cores.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import itertools
import json
import math
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

GEN_VERSION = 1  # bump when the generator changes: a corpus of another version is made again
SOURCES = {"code": 0.75, "text": 0.25}  # share of the corpus bytes
WEIGHTS = {"code": 10.0, "text": 1.0}  # mixture weights of the reader, as configs/tiny_pretrain.py
SEQ_LEN = 2048
NEED_TOKENS_PER_S = 1400 * 4  # MaxText-level tokens/s per chip x chips per v4 host
MIN_FILES = 4
DOC_MEDIAN, DOC_SIGMA, DOC_MIN, DOC_MAX = 4000, 0.75, 1000, 20000  # document bytes, lognormal
WARM_STEPS = 10

KEYWORDS = "def return if elif else for while in not and or import from class self None True False try except " \
    "with as yield lambda pass break continue raise assert is".split()
CODE_WORDS = ("value count index buffer result items config path name data key node parent child size offset length "
              "token batch step state model layer weight grad loss cache queue worker task event handler request "
              "response client server user session record field table row column query filter stream reader writer "
              "parser source target module scope context manager factory builder prefix suffix total mask shape dtype "
              "device mesh axis chunk block page line text word char byte seed rate limit timeout retry error").split()
MODULES = "os sys json time re math typing numpy collections itertools functools pathlib logging dataclasses".split()
PROSE = ("the of and to a in is that for it as was with be by on not he this are or his from at which but have an they "
         "you were her she there been one all we their has would when if so no will more can who some its into time "
         "about than them only other new what could these two may first then do any like my now over such our man me "
         "even most made after also did many before must through back years where much your way well down should "
         "because each just those people how too little state good very make world still own see men work long get "
         "here between both life being under never day same another know while last might us great old year off "
         "come since against go came right used take three himself few house use during without again place around "
         "however home small found thought went say part once general high upon school every does going although "
         "number system data model training language code program function memory process result value study "
         "research method problem question answer example important different large early following public local "
         "result later given several small important possible political social national human information").split()
SYLLABLES = "ka ren to mi sha lor vel an is or un tal ber gen dor fi mo que sta ri na el".split()


class Pool:
    """JSON-escaped pieces a corpus is assembled from: entry 0 opens a record, 1 closes it, the
    rest are lines (code) or sentences (text), each with its separator."""

    def __init__(self, pieces: list[str]):
        enc = [b'{"text": "', b'"}\n'] + [json.dumps(p, ensure_ascii=False)[1:-1].encode() for p in pieces]
        self.lens = np.array([len(e) for e in enc], np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.lens)[:-1]])
        self.buf = np.frombuffer(b"".join(enc), np.uint8)
        self.mean_len = float(self.lens[2:].mean())


def _ident(r: random.Random) -> str:
    return "_".join(r.choices(CODE_WORDS, k=r.randint(1, 3)))


def _camel(r: random.Random) -> str:
    return "".join(w.capitalize() for w in r.choices(CODE_WORDS, k=r.randint(1, 3)))


def _made_up(r: random.Random) -> str:
    return "".join(r.choices(SYLLABLES, k=r.randint(2, 4)))


_ZIPF = list(itertools.accumulate(1 / (i + 1) ** 0.9 for i in range(len(PROSE))))


def _prose_words(r: random.Random, n: int) -> list[str]:
    """Words by a Zipf law over PROSE (frequent words first), one in 12 made up (names, rare words)."""
    return [_made_up(r) if r.random() < 0.08 else w for w in r.choices(PROSE, cum_weights=_ZIPF, k=n)]


def code_pool(r: random.Random, n: int = 60_000) -> Pool:
    def lit():
        return r.choice([str(r.randrange(4096)), f'"{_ident(r)}"', "None", f"{r.random():.3f}"])

    templates = [
        lambda a, b, c: f"def {a}(self, {b}, {c}={lit()}):",
        lambda a, b, c: f"{a} = {b}({c}, {lit()})",
        lambda a, b, c: f"{a} = self.{b}[{c}]",
        lambda a, b, c: f"if {a} is None:",
        lambda a, b, c: f"for {a} in {b}:",
        lambda a, b, c: f"for {a}, {b} in enumerate({c}):",
        lambda a, b, c: f"return {a} + {b}",
        lambda a, b, c: f"return {a}({b}, {c}={lit()})",
        lambda a, b, c: "# " + " ".join(_prose_words(r, r.randint(3, 12))),
        lambda a, b, c: f"self.{a} = {b}",
        lambda a, b, c: f'raise ValueError(f"{a} must be positive, got {{{a}}}")',
        lambda a, b, c: f"import {r.choice(MODULES)}",
        lambda a, b, c: f"from {r.choice(MODULES)} import {_camel(r)}",
        lambda a, b, c: f"class {_camel(r)}({_camel(r)}):",
        lambda a, b, c: f"{a}.append({b}.{c}({lit()}))",
        lambda a, b, c: f"while {a} < len({b}):",
        lambda a, b, c: f"elif {a} == {lit()}:",
        lambda a, b, c: "else:",
        lambda a, b, c: "try:",
        lambda a, b, c: f"except {r.choice(['KeyError', 'ValueError', 'OSError'])} as e:",
        lambda a, b, c: r.choice(["pass", "break", "continue", "return None", "raise"]),
        lambda a, b, c: "",
        lambda a, b, c: f'with open({a}, "rb") as f:',
        lambda a, b, c: f"{a} = [{b} for {b} in {c} if {b}]",
        lambda a, b, c: f"yield {a}",
        lambda a, b, c: f'assert {a} >= 0, "{" ".join(_prose_words(r, 4))}"',
        lambda a, b, c: f"{a}: {r.choice(['int', 'str', 'float', 'list[int]', 'dict[str, Any]'])} = {lit()}",
        lambda a, b, c: f"    {a}={b},",
    ]
    lines = []
    for _ in range(n):
        line = r.choice(templates)(_ident(r), _ident(r), _ident(r))
        indent = r.choices(range(5), cum_weights=[20, 55, 80, 95, 100])[0]
        lines.append(("    " * indent + line if line else "") + "\n")
    return Pool(lines)


def text_pool(r: random.Random, n: int = 60_000) -> Pool:
    sents = []
    for _ in range(n):
        w = _prose_words(r, r.randint(6, 28))
        w[0] = w[0].capitalize()
        w = [x + "," if r.random() < 0.08 else x for x in w[:-1]] + w[-1:]
        end = r.choice(".....?!:")
        sents.append(" ".join(w) + end + ("\n\n" if r.random() < 0.2 else " "))
    return Pool(sents)


def corpus_chunk(rng, pool: Pool, n_docs: int) -> np.ndarray:
    """The JSONL bytes of `n_docs` documents drawn from `pool` (one gather, no Python per line)."""
    doc_bytes = np.clip(rng.lognormal(math.log(DOC_MEDIAN), DOC_SIGMA, n_docs), DOC_MIN, DOC_MAX)
    per = np.maximum(1, np.rint(doc_bytes / pool.mean_len)).astype(np.int64) + 2
    ends = np.cumsum(per)
    ent = rng.integers(2, len(pool.lens), int(ends[-1]))
    ent[ends - per] = 0
    ent[ends - 1] = 1
    lens = pool.lens[ent]
    out_start = np.cumsum(lens) - lens
    src = np.repeat(pool.starts[ent] - out_start, lens) + np.arange(int(lens.sum()))
    return pool.buf[src]


def make_corpus(workdir: str, gb: float, file_mb: float, seed: int) -> dict:
    """The corpus of `gb` decompressed GB under workdir (made, or reused when its marker fits)."""
    import zstandard

    root = os.path.join(workdir, f"corpus-{gb:g}gb")
    want = {"version": GEN_VERSION, "gb": gb, "file_mb": file_mb, "seed": seed, "shares": SOURCES}
    marker = os.path.join(root, "corpus.json")
    if os.path.exists(marker):
        with open(marker) as f:
            have = json.load(f)
        if {k: have.get(k) for k in want} == want:
            return {**have, "root": root, "generated_s": None}
    shutil.rmtree(root, ignore_errors=True)
    t0 = time.perf_counter()
    info = {**want, "sources": {}}
    cctx = zstandard.ZstdCompressor(level=3, threads=-1)
    for si, (name, share) in enumerate(SOURCES.items()):
        r = random.Random(f"{seed}/{name}")
        pool = code_pool(r) if name == "code" else text_pool(r)
        total = gb * 1e9 * share
        nfiles = max(MIN_FILES, math.ceil(total / (file_mb * 1e6)))
        per_file = total / nfiles
        doc_mean = DOC_MEDIAN * math.exp(DOC_SIGMA**2 / 2)  # about: only sizes the chunks
        os.makedirs(os.path.join(root, name))
        files, raw, packed = [], 0, 0
        for fi in range(nfiles):
            path = os.path.join(root, name, f"{fi:05d}.jsonl.zst")
            frng = np.random.default_rng([seed, si, fi, int(gb * 1e6)])
            written = 0
            with open(path, "wb") as f, cctx.stream_writer(f, closefd=False) as w:
                while written < per_file:
                    n = max(1, min(2000, math.ceil((per_file - written) / doc_mean)))
                    chunk = corpus_chunk(frng, pool, n)
                    w.write(chunk.data)
                    written += len(chunk)
            files.append(path)
            raw += written
            packed += os.path.getsize(path)
        info["sources"][name] = {"files": len(files), "bytes": raw, "compressed_bytes": packed}
    with open(marker, "w") as f:
        json.dump(info, f, indent=1)
    return {**info, "root": root, "generated_s": time.perf_counter() - t0}


def sample_texts(corpus: dict, mb: float) -> list[str]:
    """About `mb` MB of documents, from each source's first file in the corpus's proportions."""
    import zstandard

    texts = []
    for name, share in SOURCES.items():
        path = os.path.join(corpus["root"], name, "00000.jsonl.zst")
        budget, got = mb * 1e6 * share, 0
        with open(path, "rb") as f:
            lines = io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(f))
            for line in lines:
                texts.append(json.loads(line)["text"])
                got += len(line)
                if got >= budget:
                    break
    return texts


def raw_rate(tok, texts: list[str], min_s: float = 1.0) -> dict:
    n = nbytes = rounds = 0
    t0 = time.perf_counter()
    while rounds == 0 or time.perf_counter() - t0 < min_s:
        for t in texts:
            n += len(tok.encode_array(t))
        nbytes += sum(len(t.encode()) for t in texts)
        rounds += 1
    dt = time.perf_counter() - t0
    return {"tokens_per_s": n / dt, "mb_per_s": nbytes / dt / 1e6, "bytes_per_token": nbytes / n,
            "sample_mb": nbytes / rounds / 1e6}


def _tree(root: int) -> list[int]:
    """`root` and every process below it (/proc/PID/task/TID/children)."""
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except OSError:
            pass
    return out


def _vm_hwm(pid: int) -> int:
    """A process's own peak RSS (VmHWM, bytes; 0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def run_measured(cmd: list[str], log: str) -> dict:
    """Runs `cmd` (output to `log`), returning wall time, the exit code, the tree's CPU time
    (wait4) and the peak RSS of its largest single process: each process's VmHWM, polled every
    20 ms. Not wait4's ru_maxrss: a child starts with its parent's high-water mark (fork copies
    the memory map and exec keeps the mark), so it would report this bench's own size."""
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    peaks: dict[int, int] = {}
    with open(log, "wb") as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        while True:
            for pid in _tree(proc.pid):
                peaks[pid] = max(peaks.get(pid, 0), _vm_hwm(pid))
            done, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if done:
                break
            time.sleep(0.02)
        wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    with open(log, errors="replace") as f:
        text = f.read()
    if proc.returncode != 0:
        raise SystemExit(f"error: {' '.join(cmd)} exited {proc.returncode}:\n{text[-3000:]}")
    return {"wall_s": wall, "max_rss_bytes": max(peaks.values(), default=0), "cpu_s": ru.ru_utime + ru.ru_stime,
            "output": text}


def write_configs(workdir: str, corpus: dict, store: str, batch: int) -> tuple[str, str]:
    """(tokenize config over the corpus, reader config over the store)."""
    paths = []
    for what, src in (("tokenize", lambda n: os.path.join(corpus["root"], n)), ("reader", lambda n: store)):
        sources = {n: {"path": src(n), "weight": WEIGHTS[n]} for n in SOURCES}
        path = os.path.join(workdir, f"{what}-{corpus['gb']:g}gb.py")
        with open(path, "w") as f:
            f.write("from ml_collections import ConfigDict\n\n\ndef get_config():\n    c = ConfigDict()\n"
                    f"    c.data = ConfigDict({{'seq_len': {SEQ_LEN}, 'sources': {sources!r}}})\n"
                    f"    c.train = ConfigDict({{'batch_size': {batch}}})\n    return c\n")
        paths.append(path)
    return paths[0], paths[1]


def child_run(mode: str, args: dict, log: str) -> dict:
    res = run_measured([sys.executable, os.path.abspath(__file__), "--child", mode, json.dumps(args)], log)
    out = json.loads([x for x in res["output"].splitlines() if x.startswith("{")][-1])
    out["polled_peak_rss_bytes"] = res["max_rss_bytes"]
    return out


# --- the reader's side, in a fresh process per measurement (--child MODE JSON) ------------------------------


def _proc_status(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def _batch_hash(b) -> str:
    return hashlib.sha256(np.ascontiguousarray(b["input_ids"]).tobytes()).hexdigest()[:16]


def child(mode: str, a: dict) -> None:
    from easylemur.config import load_config
    from easylemur.data.pipeline import make_pipeline
    from easylemur.tokenizer.spm import Tokenizer

    cfg = load_config(a["config"])
    tok = Tokenizer.load(cfg.data.get("tokenizer") or None)
    out = {"rss_base_bytes": _proc_status("VmRSS"), "prefetch": int(cfg.data.prefetch)}
    batch = int(cfg.train.batch_size)
    if mode == "steady":
        t0 = time.perf_counter()
        it = make_pipeline(cfg.data, tok, global_batch_size=batch, seed=0)
        out["open_s"] = time.perf_counter() - t0
        next(it)
        out["first_batch_s"] = time.perf_counter() - t0
        with open(a["state_early"], "w") as f:
            json.dump(it.get_state(), f)
        n = 0
        for step in range(2, a["late"] + 1):
            if step == WARM_STEPS + 1:
                t1, n = time.perf_counter(), 0
            b = next(it)
            n += int((b["segment_ids"] > 0).sum())
            if step == 2:
                out["hash_early"] = _batch_hash(b)
        dt = time.perf_counter() - t1
        out.update(tokens_per_s=n / dt, timed_steps=a["late"] - WARM_STEPS, steps=a["late"])
        with open(a["state_late"], "w") as f:
            json.dump(it.get_state(), f)
        out["hash_late"] = _batch_hash(next(it))
        out["index_bytes"] = sum(int(getattr(r, "index_bytes", 0)) for r in it._readers)
        out["documents"] = sum(len(r) for r in it._readers)
        out["bytes_read"] = it.bytes_read()
        it.close()
    elif mode == "resume":
        with open(a["state"]) as f:
            state = json.load(f)
        t0 = time.perf_counter()
        it = make_pipeline(cfg.data, tok, global_batch_size=batch, seed=0)
        out["open_s"] = time.perf_counter() - t0
        it.set_state(state)
        b = next(it)
        out["resume_s"] = time.perf_counter() - t0
        out["hash"] = _batch_hash(b)
        out["bytes_read"] = it.bytes_read()
        it.close()
    elif mode == "shards":
        out["shards"] = {}
        for n in (1, 2, 4):
            per = []
            for p in range(n):
                with make_pipeline(cfg.data, tok, global_batch_size=batch, seed=0, process_index=p, process_count=n) as it:
                    tokens = 0
                    for _ in range(a["steps"]):
                        tokens += int((next(it)["segment_ids"] > 0).sum())
                    per.append({"bytes_read": it.bytes_read(), "tokens": tokens,
                                "itemsize": int(getattr(it._readers[0], "dtype", np.dtype("<u2")).itemsize)})
            out["shards"][str(n)] = per
    out["rss_peak_bytes"] = _proc_status("VmHWM")
    print(json.dumps(out), flush=True)


# --- the driver ------------------------------------------------------------------------------------------


def _mb(x: float) -> str:
    return f"{x / 2**20:.1f} MiB" if abs(x) >= 2**20 else f"{x / 2**10:.1f} KiB"


def _k(x: float) -> str:
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}k"


class Report:
    def __init__(self, path: str):
        self.path, self.rows = path, []

    def emit(self, rec: dict) -> None:
        rec = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in rec.items()}
        rec.update(cpus=os.cpu_count(), load_avg_1m=round(os.getloadavg()[0], 2))
        line = json.dumps(rec)
        print(line, flush=True)
        with open(self.path, "a") as f:
            f.write(line + "\n")

    def row(self, size: str, what: str, value: str, against: str = "") -> None:
        self.rows.append((size, what, value, against))

    def table(self) -> None:
        head = ("corpus", "measurement", "value", "against")
        w = [max(len(r[i]) for r in [head, *self.rows]) for i in range(4)]
        for r in [head, tuple("-" * x for x in w), *self.rows]:
            print("  ".join(c.ljust(x) for c, x in zip(r, w)).rstrip())


def measure_size(gb: float, args, rep: Report, tok, peaks: dict) -> None:
    size = f"{gb:g} GB"
    corpus = make_corpus(args.workdir, gb, args.file_mb, args.seed)
    raw_b = sum(s["bytes"] for s in corpus["sources"].values())
    packed = sum(s["compressed_bytes"] for s in corpus["sources"].values())
    files = {n: s["files"] for n, s in corpus["sources"].items()}
    rep.emit({"what": "corpus", "corpus_gb": gb, "bytes": raw_b, "compressed_bytes": packed, "files": files,
              "generated_s": corpus["generated_s"], "reused": corpus["generated_s"] is None})
    gen = "reused" if corpus["generated_s"] is None else f"made in {corpus['generated_s']:.1f} s"
    rep.row(size, "corpus (.jsonl.zst)", f"{raw_b / 1e9:.3f} GB in {sum(files.values())} files", f"{_mb(packed)} zst, {gen}")

    texts = sample_texts(corpus, args.sample_mb)
    raw = raw_rate(tok, texts)
    rep.emit({"what": "raw_sentencepiece", "corpus_gb": gb, **raw})
    rep.row(size, "raw sentencepiece, 1 thread", f"{_k(raw['tokens_per_s'])} tok/s",
            f"{raw['mb_per_s']:.2f} MB/s, {raw['bytes_per_token']:.2f} B/token")

    store = os.path.join(args.workdir, f"store-{gb:g}gb")
    tok_cfg, reader_cfg = write_configs(args.workdir, corpus, store, args.batch)
    logs = os.path.join(args.workdir, "logs")
    os.makedirs(logs, exist_ok=True)
    if args.reuse_store and os.path.exists(os.path.join(store, "manifest.json")):
        rep.row(size, "tokenize", "skipped (--reuse-store)", store)
    else:
        # what a worker holds before its first record: the imports, the config and the tokenizer
        base = run_measured([sys.executable, "-c", "import sys, easylemur.data.build, easylemur.data.__main__; from "
                             "easylemur.config import load_config; from easylemur.tokenizer.spm import Tokenizer; "
                             "load_config(sys.argv[1]); Tokenizer.load()", tok_cfg],
                            os.path.join(logs, "tokenize-baseline.log"))
        base, startup = base["max_rss_bytes"], base["wall_s"]
        for k in args.workers:
            shutil.rmtree(store, ignore_errors=True)
            cmd = [sys.executable, "-m", "easylemur.data"]
            t = run_measured(cmd + ["tokenize", "--config", tok_cfg, "--out", store, "--workers", str(k)],
                             os.path.join(logs, f"tokenize-{gb:g}gb-w{k}.log"))
            fin = run_measured(cmd + ["finalize", "--config", tok_cfg, "--out", store],
                               os.path.join(logs, f"finalize-{gb:g}gb-w{k}.log"))
            with open(os.path.join(store, "manifest.json")) as f:
                man = json.load(f)
            tokens = sum(s["tokens"] for s in man["sources"].values())
            docs = sum(s["documents"] for s in man["sources"].values())
            rate = tokens / t["wall_s"]
            rec = {"what": "tokenize", "corpus_gb": gb, "workers": k, "wall_s": t["wall_s"], "startup_s": startup,
                   "tokens": tokens, "documents": docs, "tokens_per_s": rate, "tokens_per_s_per_worker": rate / k,
                   "ratio_per_worker_to_raw": rate / k / raw["tokens_per_s"], "cpu_s": t["cpu_s"],
                   "tokens_per_cpu_s": tokens / t["cpu_s"], "ratio_per_cpu_s_to_raw": tokens / t["cpu_s"] / raw["tokens_per_s"],
                   "peak_rss_bytes": t["max_rss_bytes"], "baseline_rss_bytes": base,
                   "rss_growth_bytes": t["max_rss_bytes"] - base, "finalize_s": fin["wall_s"],
                   "store_bytes": sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(store) for f in fs)}
            rep.emit(rec)
            rep.row(size, f"tokenize, {k} worker{'s' * (k > 1)}",
                    f"{_k(rate / k)} tok/s per worker ({t['wall_s']:.1f} s, {_k(rate)} tok/s)",
                    f"x{rec['ratio_per_worker_to_raw']:.2f} raw; x{rec['ratio_per_cpu_s_to_raw']:.2f} per CPU-s")
            rep.row(size, f"tokenize, {k} worker{'s' * (k > 1)}: peak RSS", _mb(t["max_rss_bytes"]),
                    f"+{_mb(t['max_rss_bytes'] - base)} over imports+tokenizer ({_mb(base)}); finalize {fin['wall_s']:.1f} s")
            peaks.setdefault("tokenize", {})[gb] = t["max_rss_bytes"]

    states = os.path.join(args.workdir, f"states-{gb:g}gb")
    os.makedirs(states, exist_ok=True)
    early, late = os.path.join(states, "early.json"), os.path.join(states, "late.json")
    st = child_run("steady", {"config": reader_cfg, "late": args.late_step, "state_early": early, "state_late": late},
                   os.path.join(logs, f"reader-{gb:g}gb.log"))
    growth = st["rss_peak_bytes"] - st["rss_base_bytes"]
    rep.emit({"what": "reader", "corpus_gb": gb, "seq_len": SEQ_LEN, "batch": args.batch, **st,
              "rss_growth_bytes": growth, "need_tokens_per_s": NEED_TOKENS_PER_S,
              "ratio_to_need": st["tokens_per_s"] / NEED_TOKENS_PER_S})
    rep.row(size, "reader: peak RSS", _mb(st["rss_peak_bytes"]),
            f"+{_mb(growth)} over imports ({_mb(st['rss_base_bytes'])}); index {_mb(st['index_bytes'])}")
    peaks.setdefault("reader", {})[gb] = st["rss_peak_bytes"]
    peaks.setdefault("index", {})[gb] = st["index_bytes"]
    rep.row(size, "reader: time to first batch", f"{st['first_batch_s']:.2f} s", f"make_pipeline {st['open_s']:.2f} s")
    rep.row(size, "reader: tokens/s (steady)", f"{_k(st['tokens_per_s'])} tok/s",
            f"x{st['tokens_per_s'] / NEED_TOKENS_PER_S:.0f} the need of a v4 host (5.6k)")

    trials = {"early": [], "late": []}
    for r in range(args.repeats):
        for which in ("early", "late") if r % 2 == 0 else ("late", "early"):
            trials[which].append(child_run("resume", {"config": reader_cfg, "state": early if which == "early" else late},
                                           os.path.join(logs, f"resume-{gb:g}gb-{which}-{r}.log")))
    med = {w: statistics.median(t["resume_s"] for t in ts) for w, ts in trials.items()}
    same = all(t["hash"] == st["hash_early"] for t in trials["early"]) and all(
        t["hash"] == st["hash_late"] for t in trials["late"])
    rep.emit({"what": "resume", "corpus_gb": gb, "late_step": args.late_step, "early_s": med["early"], "late_s": med["late"],
              "ratio_late_to_early": med["late"] / med["early"], "batches_match": same,
              "early_trials": [round(t["resume_s"], 3) for t in trials["early"]],
              "late_trials": [round(t["resume_s"], 3) for t in trials["late"]],
              "early_bytes_read": [t["bytes_read"] for t in trials["early"]],
              "late_bytes_read": [t["bytes_read"] for t in trials["late"]]})
    rep.row(size, f"resume at step 1 / {args.late_step}", f"{med['early']:.2f} s / {med['late']:.2f} s",
            f"x{med['late'] / med['early']:.2f}; batches {'match' if same else 'DIFFER'}")

    sh = child_run("shards", {"config": reader_cfg, "steps": args.shard_steps}, os.path.join(logs, f"shards-{gb:g}gb.log"))
    one = statistics.mean(p["bytes_read"] for p in sh["shards"]["1"])
    rec = {"what": "shards", "corpus_gb": gb, "global_batches": args.shard_steps, "batch": args.batch}
    for n, per in sh["shards"].items():
        mean = statistics.mean(p["bytes_read"] for p in per)
        ideal = statistics.mean(p["tokens"] * p["itemsize"] for p in per)
        rec[f"n{n}"] = {"bytes_read": [p["bytes_read"] for p in per], "mean_fraction_of_n1": mean / one,
                        "read_per_consumed": mean / ideal}
        rep.row(size, f"bytes read per process, {n} shard{'s' * (int(n) > 1)}", _mb(mean),
                f"x{mean / one:.3f} of 1 shard (1/{n} = {1 / int(n):.3f}); x{mean / ideal:.2f} of tokens used")
    rep.emit(rec)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--child":  # a measurement process started by the driver
        child(sys.argv[2], json.loads(sys.argv[3]))
        return
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gb", default=None, help="corpus sizes, decompressed GB, comma-separated (default 1,5)")
    ap.add_argument("--workdir", default=None, help="corpora, stores and logs (default: a private dir in the temp dir)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2], help="tokenize --workers values (default 1 2)")
    ap.add_argument("--file-mb", type=float, default=128, help="decompressed MB per corpus file (default 128)")
    ap.add_argument("--sample-mb", type=float, default=None, help="raw sentencepiece sample, MB (default 16)")
    ap.add_argument("--batch", type=int, default=64, help="reader global batch, rows of 2048 (default 64)")
    ap.add_argument("--late-step", type=int, default=None, help="the late resume step (default 1000)")
    ap.add_argument("--shard-steps", type=int, default=None, help="global batches per shard measurement (default 100)")
    ap.add_argument("--repeats", type=int, default=None, help="resume trials per state (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--reuse-store", action="store_true", help="skip tokenize where a finalized store is there")
    ap.add_argument("--out", default=None, help="JSON lines appended here (default WORKDIR/data_scale.jsonl)")
    ap.add_argument("--quick", action="store_true", help="a small smoke run (sizes 0.01,0.04)")
    args = ap.parse_args()
    q = args.quick
    args.gb = [float(x) for x in (args.gb or ("0.01,0.04" if q else "1,5")).split(",")]
    args.sample_mb = args.sample_mb or (4 if q else 16)
    args.late_step = args.late_step or (100 if q else 1000)
    args.shard_steps = args.shard_steps or (20 if q else 100)
    args.repeats = args.repeats or (1 if q else 3)
    if args.late_step <= WARM_STEPS + 1:
        ap.error(f"--late-step must be above {WARM_STEPS + 1}")
    if args.batch % 4:
        ap.error("--batch must divide by 4 (the shard measurement runs 4 processes)")
    if args.workdir is None:
        user = os.environ.get("USER") or str(os.getuid())
        args.workdir = os.path.join(tempfile.gettempdir(), f"easylemur-data-scale-{user}")
    os.makedirs(args.workdir, mode=0o700, exist_ok=True)
    args.workdir = os.path.abspath(args.workdir)
    rep = Report(args.out or os.path.join(args.workdir, "data_scale.jsonl"))
    from easylemur.tokenizer.spm import Tokenizer

    tok = Tokenizer.load()
    t0 = time.perf_counter()
    peaks: dict = {}
    for gb in args.gb:
        measure_size(gb, args, rep, tok, peaks)
    if len(args.gb) > 1:  # what grows with the corpus: the reader's peak against its index, the tokenize worker's
        lo, hi = min(args.gb), max(args.gb)
        rec = {"what": "scaling", "from_gb": lo, "to_gb": hi,
               "reader_peak_rss_delta_bytes": peaks["reader"][hi] - peaks["reader"][lo],
               "reader_index_delta_bytes": peaks["index"][hi] - peaks["index"][lo]}
        if "tokenize" in peaks and lo in peaks["tokenize"] and hi in peaks["tokenize"]:
            rec["tokenize_peak_rss_delta_bytes"] = peaks["tokenize"][hi] - peaks["tokenize"][lo]
            rep.row(f"{lo:g}->{hi:g}", "tokenize: peak RSS change", f"{rec['tokenize_peak_rss_delta_bytes'] / 2**20:+.1f} MiB",
                    f"--file-mb {args.file_mb:g}")
        rep.emit(rec)
        rep.row(f"{lo:g}->{hi:g}", "reader: peak RSS change", f"{rec['reader_peak_rss_delta_bytes'] / 2**20:+.1f} MiB",
                f"index {rec['reader_index_delta_bytes'] / 2**20:+.1f} MiB")
    print(f"\nworkdir {args.workdir}; {time.perf_counter() - t0:.0f} s in all; {os.cpu_count()} cpus, "
          f"load average {os.getloadavg()[0]:.2f}")
    rep.table()


if __name__ == "__main__":
    main()
