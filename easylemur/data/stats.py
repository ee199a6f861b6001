"""The pre-flight data report: what a config's mixture holds and what the run will do with it
(docs/design.md, "Data stats").

Per source: files, records, usable and bad records by kind (the first few with file:line),
tokens and the mean document length, and the rows one pass of it packs into. Per run: tokens
per step and in total, and for each source its share of the rows by the weights and the
epochs of it those rows imply, with warnings for a source that would repeat many times or
be used under one percent. With data.stages the same per stage (each stretch of the run with
constant weights), then summed over the stages.

It reads through the pipeline's own readers (`readers.open_source`, one file at a time) and
its own `Tokenize` stage, so a record is usable, bad or blank here exactly when it is in
training, and an exact count equals the tokens the pipeline yields for one pass. Files are
scanned in a thread pool (sentencepiece releases the GIL while it encodes, as in the
pipeline's read threads). With `sample_records` = N, about N records per source (spread over
its files, at least one per file, drawn at random with a fixed seed) are tokenized and each
file's counts are scaled by its records / records sampled: the counts are then estimates,
marked as such.

`preflight` is the same scan, run by `train` before step 1 when data.preflight=True: with
data.strict=True a bad record anywhere fails the run at start, naming file and line, rather
than hours in when the run reaches it.
"""

from __future__ import annotations

import math
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

import numpy as np

from easylemur.config import source_dict
from easylemur.data.files import JSONL_SUFFIXES, PARQUET_SUFFIXES, detect_kind, resolve_files
from easylemur.data.hub import StreamSpec
from easylemur.data.readers import open_source
from easylemur.data.records import SHOW_FIRST_BAD, BadRecord, DataError
from easylemur.data.store import store_entry
from easylemur.data.tokenize import Tokenize

if TYPE_CHECKING:
    from easylemur.tokenizer.spm import Tokenizer

REPEAT_WARN = 4.0  # epochs of one source above which the report warns (Lemur's text repeats ~2x)
SHARE_WARN = 0.01  # share of the rows below which a source is reported as next to unused
CHUNK = 4096  # records of a non-file source (HF, TFDS) per task
PROGRESS_EVERY = 512  # records between progress-bar updates


@dataclass
class SourceStats:
    """One source's counts. With `estimated`, `usable`, `blank`, `tokens`, `trained_tokens` and
    `rows` are scaled up from the `scanned` records; `bad` and `bad_examples` are what the
    scanned records held."""

    name: str
    path: str
    kind: str
    format: str
    weight: float
    files: int = 0
    records: int = 0  # non-empty lines / rows the reader indexes
    scanned: int = 0  # records read and tokenized
    usable: int = 0
    blank: int = 0  # whitespace-only lines: not records, never counted as bad
    bad: dict[str, int] = field(default_factory=dict)
    bad_examples: list[str] = field(default_factory=list)  # the first few, "file:line: kind (detail)"
    tokens: int = 0  # of the usable documents as packed: BOS + text + EOS, or the rendered conversation
    trained_tokens: int = 0  # of those, the ones with loss
    rows: int = 0  # rows of data.seq_len one pass of the source fills
    estimated: bool = False
    streamed: bool = False  # a hub dataset read as a stream: not counted

    @property
    def bad_total(self) -> int:
        return sum(self.bad.values())

    @property
    def mean_tokens(self) -> float:
        return self.tokens / self.usable if self.usable else 0.0


@dataclass
class _Part:
    """The counts of one task (a file, or a chunk of a non-file source), before scaling."""

    records: float = 0  # the records this task stands for
    scanned: int = 0
    usable: int = 0
    blank: int = 0
    bad: dict[str, int] = field(default_factory=dict)
    examples: list[tuple[str, str]] = field(default_factory=list)  # (index key, description)
    tokens: int = 0
    trained: int = 0
    chat_rows: int = 0  # rows a greedy in-order packing of the scanned conversations fills


class _Progress:
    """A records-scanned bar on stderr, updated from the scan threads."""

    def __init__(self, enabled: bool, desc: str):
        self._bar = None
        if enabled:
            from tqdm import tqdm

            self._bar = tqdm(desc=desc, unit=" rec", unit_scale=True, file=sys.stderr, dynamic_ncols=True)
        self._lock = threading.Lock()

    def update(self, n: int) -> None:
        if self._bar is not None and n:
            with self._lock:
                self._bar.update(n)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _units(name: str, scfg: Mapping[str, Any]) -> tuple[str, list[str] | None]:
    """(kind, files): the files of a JSONL or Parquet source, scanned one task each; None for
    other kinds, which are opened whole."""
    kind = scfg["kind"] if scfg["kind"] != "auto" else detect_kind(scfg["path"])
    if kind not in ("jsonl", "parquet"):
        return kind, None
    files = resolve_files(scfg["path"], JSONL_SUFFIXES if kind == "jsonl" else PARQUET_SUFFIXES)
    if not files:
        open_source({**scfg, "kind": kind})  # raises the pipeline's own message for this path
    return kind, files


def _sample(n_records: int, k: int | None, seed: int) -> np.ndarray:
    if k is None or k >= n_records:
        return np.arange(n_records)
    return np.sort(np.random.default_rng(seed).choice(n_records, size=k, replace=False))


def _scan(reader: Any, records: int, indices: np.ndarray, tokenize: Tokenize, seq_len: int,
          progress: _Progress) -> _Part:
    """The counts of `reader`'s records at `indices`, which stand for `records` records."""
    part = _Part(records=records, scanned=len(indices))
    fill, pending = 0, 0
    for j, i in enumerate(indices):
        out = tokenize.map(reader[int(i)])
        if out is None:
            part.blank += 1
        elif isinstance(out, BadRecord):
            part.bad[out.kind] = part.bad.get(out.kind, 0) + 1
            if len(part.examples) < SHOW_FIRST_BAD:
                part.examples.append((out.where, out.describe()))
        else:
            n = len(out["ids"])
            part.usable += 1
            part.tokens += n
            part.trained += int(out["mask"].sum())
            if tokenize.fmt == "chat":  # the packer's rule: a conversation never splits
                if fill + n > seq_len or fill == 0:
                    part.chat_rows += 1
                    fill = 0
                fill += n
        pending += 1
        if pending == PROGRESS_EVERY or j == len(indices) - 1:
            progress.update(pending)
            pending = 0
    return part


def _file_task(name: str, scfg: dict, kind: str, path: str, per_file: int | None, seed: int,
               tokenize: Tokenize, seq_len: int, progress: _Progress) -> _Part:
    try:
        reader = open_source({**scfg, "kind": kind, "path": path})
    except DataError as e:
        raise DataError(f"source '{name}': {e}") from None
    return _scan(reader, len(reader), _sample(len(reader), per_file, seed), tokenize, seq_len, progress)


def _merge(st: SourceStats, parts: list[_Part], seq_len: int) -> SourceStats:
    usable = blank = tokens = trained = chat_rows = records = 0.0
    for p in parts:
        # each task is a stratum: its counts scaled by its records / records scanned
        scale = p.records / p.scanned if p.scanned else 0.0
        usable += p.usable * scale
        blank += p.blank * scale
        tokens += p.tokens * scale
        trained += p.trained * scale
        chat_rows += p.chat_rows * scale
        records += p.records
        st.scanned += p.scanned
        for k, v in p.bad.items():
            st.bad[k] = st.bad.get(k, 0) + v
    examples = sorted((e for p in parts for e in p.examples), key=lambda e: _where_key(e[0]))
    st.bad_examples = [d for _, d in examples[:SHOW_FIRST_BAD]]
    st.records, st.usable, st.blank, st.tokens, st.trained_tokens = (
        int(round(x)) for x in (records, usable, blank, tokens, trained))
    st.estimated = st.scanned < st.records
    st.rows = int(round(chat_rows)) if st.format == "chat" else math.ceil(st.tokens / seq_len)
    return st


def _store_stats(st: SourceStats, scfg: dict, tokenizer: Tokenizer, seq_len: int) -> SourceStats:
    """A token store source's counts, from its manifest (checked against the run like training)."""
    try:
        man, src = store_entry(scfg, st.name, tokenizer, seq_len)
    except DataError as e:  # store_entry's checks name the source already
        msg = str(e)
        raise DataError(msg if msg.startswith(f"source '{st.name}'") else f"source '{st.name}': {msg}") from None
    e = man["sources"][src]
    st.files = len(e["units"])
    st.usable, st.blank, st.bad = e["documents"], e["blank"], dict(e["bad"])
    st.records = st.scanned = st.usable + st.blank + st.bad_total + len(e["dropped"])
    st.bad_examples = list(e["bad_first"])
    st.tokens, st.trained_tokens = e["tokens"], e["trained_tokens"]
    st.rows = e["chat_rows"] if st.format == "chat" else math.ceil(st.tokens / seq_len)
    return st


def _where_key(where: str) -> tuple:
    """Sorts "file:line" (and "file:row N") by file, then line as a number."""
    path, _, rest = where.rpartition(":")
    digits = "".join(c for c in rest if c.isdigit())
    return (path, int(digits) if digits else 0, rest)


def scan_sources(
    sources: Any,
    tokenizer: Tokenizer,
    seq_len: int,
    *,
    sample_records: int | None = None,
    workers: int | None = None,
    progress: bool = False,
    process_index: int = 0,
    process_count: int = 1,
) -> list[SourceStats]:
    """Scans every source of `sources` (a data.sources section) and returns their counts.

    `process_index`/`process_count` scan only this process's share of the tasks (files, or
    chunks of a non-file source), as `preflight` does on several hosts; the counts are then
    this process's part. A missing path, an unreadable or corrupt file is the pipeline's own
    DataError, naming the source and file."""
    if sample_records is not None and sample_records < 1:
        raise DataError(f"--sample-records must be at least 1, got {sample_records}")
    workers = workers or min(32, os.cpu_count() or 1)
    bar = _Progress(progress, "scanning records")
    out: list[SourceStats] = []
    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="easylemur-stats") as pool:
            plans = []
            for si, name in enumerate(sources.keys()):
                scfg = source_dict(sources[name])
                st = SourceStats(name, scfg["path"], scfg["kind"], scfg["format"], float(scfg["weight"]))
                tokenize = Tokenize(scfg["format"], scfg["field"], tokenizer, seq_len, False, name,
                                    scfg["chat_format"])
                try:
                    kind, files = _units(name, scfg)
                except DataError as e:
                    raise DataError(f"source '{name}': {e}") from None
                st.kind = kind
                futures = []
                if kind == "tokens":  # counted when it was tokenized: the manifest's figures, exact
                    plans.append((_store_stats(st, scfg, tokenizer, seq_len), None))
                    continue
                if files is not None:
                    st.files = len(files)
                    per_file = None if sample_records is None else max(1, math.ceil(sample_records / len(files)))
                    for fi, f in enumerate(files):
                        if fi % process_count == process_index:
                            futures.append(pool.submit(_file_task, name, scfg, kind, f, per_file, si * 1_000_003 + fi,
                                                       tokenize, seq_len, bar))
                else:
                    try:
                        reader = open_source({**scfg, "kind": kind})
                    except DataError as e:
                        raise DataError(f"source '{name}': {e}") from None
                    if isinstance(reader, StreamSpec):
                        st.streamed = True
                    else:
                        idx = _sample(len(reader), sample_records, si)
                        chunks = [idx[i:i + CHUNK] for i in range(0, len(idx), CHUNK)] or [idx]
                        for ci, chunk in enumerate(chunks):
                            if ci % process_count == process_index:
                                # a chunk stands for its share of the records (all of them when exact)
                                records = len(reader) * len(chunk) / max(1, len(idx))
                                futures.append(pool.submit(_scan, reader, records, chunk, tokenize, seq_len, bar))
                plans.append((st, futures))
            for st, futures in plans:
                if futures is None:
                    out.append(st)
                    continue
                parts = []
                try:
                    for fut in as_completed(futures):
                        parts.append(fut.result())
                except BaseException:
                    pool.shutdown(wait=True, cancel_futures=True)
                    raise
                out.append(_merge(st, parts, seq_len) if not st.streamed else st)
    finally:
        bar.close()
    return out


def stage_spans(stats: list[SourceStats], stages: Any, steps: int) -> list[dict[str, Any]]:
    """The run's stretches of constant weights: the sources' own weights from step 0 until the
    first of data.stages (which replaces them when it starts at step 0), then each stage until
    the next; `steps` of each within the run's `steps` (0 for a stage at or after them)."""
    spans = [{"from": "data.sources", "start_step": 0, "weights": {s.name: s.weight for s in stats}}]
    for i, st in enumerate(stages or ()):
        span = {"from": f"data.stages[{i}]", "start_step": int(st["start_step"]),
                "weights": {s.name: float(st["weights"][s.name]) for s in stats}}
        if span["start_step"] == 0:
            spans[0] = span
        else:
            spans.append(span)
    for k, span in enumerate(spans):
        end = spans[k + 1]["start_step"] if k + 1 < len(spans) else steps
        span["steps"] = max(0, min(end, steps) - min(span["start_step"], steps))
    return spans


def run_plan(stats: list[SourceStats], *, steps: int, batch_size: int, seq_len: int, stages: Any = ()) -> dict[str, Any]:
    """What `train.steps` steps do with the sources: tokens per step and in total (padding
    included, as `tokens_per_second` counts them), and per source its share of the rows (the
    mixture gives source i round(n * w_i / sum w) of n rows), the rows and tokens that share
    reads, and the epochs of the source it implies.

    With data.stages (`stages`), the same per stage ("stages": each stretch of constant
    weights, its steps within the run and per source weight, share, rows, tokens and epochs
    read in it); "sources" then sums the stages. Without, "stages" is the one stretch of the
    sources' own weights."""
    by_name = {s.name: s for s in stats}

    def entry(share: float, rows: float, s: SourceStats) -> dict[str, Any]:
        e: dict[str, Any] = {"share": share, "rows": int(round(rows)), "estimated": s.estimated}
        if s.rows:
            e["tokens"] = int(round(rows * s.tokens / s.rows))
            e["epochs"] = rows / s.rows
        else:
            e["tokens"] = e["epochs"] = None  # streamed, or no usable record
        return e

    spans = stage_spans(stats, stages, steps)
    rows_of = {s.name: 0.0 for s in stats}
    for span in spans:
        total_w = sum(span["weights"].values())
        per = {}
        for n, w in span["weights"].items():
            rows = span["steps"] * batch_size * w / total_w
            rows_of[n] += rows
            per[n] = {"weight": w, **entry(w / total_w, rows, by_name[n])}
        span["end_step"] = span["start_step"] + span["steps"]
        span["sources"] = per
        del span["weights"]
    rows_total = steps * batch_size
    if len(spans) == 1:  # the shares are the weights' (also for a run of 0 steps)
        per = {n: {k: v for k, v in e.items() if k != "weight"} for n, e in spans[0]["sources"].items()}
    else:
        per = {s.name: entry(rows_of[s.name] / rows_total if rows_total else 0.0, rows_of[s.name], s) for s in stats}
    return {"steps": steps, "batch_size": batch_size, "seq_len": seq_len, "tokens_per_step": batch_size * seq_len,
            "tokens": steps * batch_size * seq_len, "sources": per, "stages": spans}


def _staged(plan: Mapping[str, Any]) -> bool:
    stages = plan.get("stages") or []
    return len(stages) > 1 or bool(stages) and stages[0]["from"] != "data.sources"


def warnings(stats: list[SourceStats], plan: Mapping[str, Any]) -> list[str]:
    """What a user should look at before launching: sources that repeat more than
    REPEAT_WARN times or get under SHARE_WARN of the rows (of a stage, with data.stages),
    bad records, sources not counted, stages after the run's last step."""
    out = []
    staged = _staged(plan)
    for s in stats:
        p = plan["sources"][s.name]
        if s.streamed:
            out.append(f"source '{s.name}' ({s.path}) is a streamed hub dataset: not counted, its epochs are unknown")
            continue
        if not s.usable:
            out.append(f"source '{s.name}' ({s.path}) has no usable record: the run would stop at start")
            continue
        if p["epochs"] is not None and p["epochs"] > REPEAT_WARN:
            out.append(f"source '{s.name}' would repeat {p['epochs']:.1f} times in {plan['steps']} steps "
                       f"({p['share']:.1%} of the rows, {s.tokens:,} tokens{' (estimated)' if s.estimated else ''}); "
                       "more data or a smaller weight")
        if not staged and p["share"] < SHARE_WARN:
            out.append(f"source '{s.name}' gets {p['share']:.2%} of the rows "
                       f"(weight {s.weight:g} of {sum(x.weight for x in stats):g})")
        for k, span in enumerate(plan["stages"] if staged else []):
            q = span["sources"][s.name]
            if span["steps"] and 0 < q["share"] < SHARE_WARN:
                total_w = sum(e["weight"] for e in span["sources"].values())
                out.append(f"source '{s.name}' gets {q['share']:.2%} of the rows of stage {k} ({span['from']}, "
                           f"from step {span['start_step']}; weight {q['weight']:g} of {total_w:g})")
        if staged and p["rows"] == 0 and plan["steps"]:
            out.append(f"source '{s.name}' gets no rows in {plan['steps']} steps: its weight is 0 in every stage the run "
                       "reaches")
        if s.bad_total:
            first = f"; first: {s.bad_examples[0]}" if s.bad_examples else ""
            sampled = " in the sample" if s.estimated else ""
            out.append(f"source '{s.name}' has {_n(s.bad_total, 'bad record')}{sampled} (skipped and counted; "
                       f"data.strict=True stops at the first){first}")
    for span in plan.get("stages") or []:
        if span["start_step"] >= plan["steps"] and span["from"] != "data.sources":
            out.append(f"{span['from']} starts at step {span['start_step']}, not before train.steps={plan['steps']}: "
                       "it never applies")
    return out


def _n(n: int, noun: str) -> str:
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def report(stats: list[SourceStats], plan: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON report: sources, run, warnings."""
    return {
        "sources": [{**asdict(s), "bad_total": s.bad_total, "mean_tokens": round(s.mean_tokens, 1)} for s in stats],
        "run": plan,
        "warnings": warnings(stats, plan),
    }


def format_text(rep: Mapping[str, Any]) -> str:
    """The report for a terminal."""
    lines = []
    for s in rep["sources"]:
        est = " (estimated from {:,} records)".format(s["scanned"]) if s["estimated"] else ""
        lines.append(f"source '{s['name']}': {s['path']} ({s['kind']}, {s['format']}, weight {s['weight']:g})")
        if s["streamed"]:
            lines.append("  streamed hub dataset: not counted")
            continue
        bad = ", ".join(f"{k} {v:,}" for k, v in sorted(s["bad"].items()))
        lines.append(f"  files {s['files']:,}  records {s['records']:,}  usable {s['usable']:,}  "
                     f"bad {s['bad_total']:,}{f' ({bad})' if bad else ''}  blank {s['blank']:,}")
        for ex in s["bad_examples"]:
            lines.append(f"    {ex}")
        lines.append(f"  tokens {s['tokens']:,}{est}  trained {s['trained_tokens']:,}  "
                     f"mean {s['mean_tokens']:,.1f} tokens/document  rows of {rep['run']['seq_len']}: {s['rows']:,}")
    r = rep["run"]
    lines.append(f"run: {r['steps']:,} steps x {r['batch_size']} rows x {r['seq_len']} tokens = "
                 f"{r['tokens']:,} tokens ({r['tokens_per_step']:,} per step)")
    width = max(len(n) for n in r["sources"])

    def source_lines(per: Mapping[str, Any], indent: str) -> None:
        for n, p in per.items():
            est = "~" if p["estimated"] else ""
            tail = "tokens ?  epochs ?" if p["epochs"] is None else f"tokens {est}{p['tokens']:,}  epochs {est}{p['epochs']:.2f}"
            weight = f"  weight {p['weight']:<5g}" if "weight" in p else ""
            lines.append(f"{indent}{n:<{width}}{weight}  share {p['share']:6.1%}  rows {p['rows']:,}  {tail}")

    if _staged(r):
        for k, span in enumerate(r["stages"]):
            never = " (at or after train.steps: never applies)" if span["from"] != "data.sources" and not span["steps"] else ""
            lines.append(f"  stage {k} ({span['from']}): from step {span['start_step']:,}, {span['steps']:,} steps{never}")
            source_lines(span["sources"], "    ")
        lines.append("  all stages:")
        source_lines(r["sources"], "    ")
    else:
        source_lines(r["sources"], "  ")
    for w in rep["warnings"]:
        lines.append(f"warning: {w}")
    return "\n".join(lines) + "\n"


def preflight(cfg: Any, tokenizer: Tokenizer) -> list[SourceStats]:
    """data.preflight: every record of data.sources read and tokenized before step 1.

    Each process scans its share of the files; process 0 prints the report (this process's
    part of the counts on several hosts) to stderr. With data.strict=True a bad record found
    by any process fails the run on every process, the finding one naming file and line."""
    import jax

    from easylemur.sharding import all_processes_agree

    p, n = jax.process_index(), jax.process_count()
    stats = scan_sources(cfg.data.sources, tokenizer, int(cfg.data.seq_len), progress=p == 0,
                         process_index=p, process_count=n)
    if p == 0:
        plan = run_plan(stats, steps=cfg.train.steps, batch_size=cfg.train.batch_size, seq_len=int(cfg.data.seq_len),
                        stages=cfg.data.get("stages"))
        print("easylemur.data preflight:\n" + format_text(report(stats, plan)), end="", file=sys.stderr, flush=True)
    if cfg.data.strict:
        bad = [s for s in stats if s.bad_total]
        if not all_processes_agree(not bad):
            if bad:
                s = bad[0]
                raise DataError(f"source '{s.name}': {_n(s.bad_total, 'bad record')} found by data.preflight, the first at "
                                f"{s.bad_examples[0]} (data.strict=True); the run did not start")
            raise DataError("data.preflight: another process found bad records (data.strict=True); the run did not start")
    return stats
