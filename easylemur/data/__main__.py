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
    return ap


def _load_tokenizer(cfg):
    """The train loop's choice (data.tokenizer, else init.from's tokenizer, else the shipped
    one); when init.from names a run not trained yet, the shipped one, with a note."""
    from easylemur.data.tokenizer_of import read_source, source_tokenizer
    from easylemur.tokenizer.spm import Tokenizer

    try:
        return source_tokenizer(cfg, read_source(cfg.init["from"]))
    except Exception as e:  # e.g. init.from names a run that has not been trained yet
        if cfg.data.get("tokenizer"):
            raise
        print(f"easylemur.data: {e}; previewing with the shipped tokenizer", file=sys.stderr)
    return Tokenizer.load(None)


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
    plan = statslib.run_plan(found, steps=cfg.train.steps, batch_size=cfg.train.batch_size, seq_len=seq_len)
    rep = statslib.report(found, plan)
    out.write(json.dumps(rep) + "\n" if fmt == "json" else statslib.format_text(rep))
    out.flush()
    return 0


def _main(argv: Sequence[str] | None) -> int:
    from easylemur.config import parse_cli
    from easylemur.errors import InputError

    args, overrides = parse_cli(_parser(), argv)
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
