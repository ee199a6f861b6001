"""A suite's table: the rows of its averaged columns (`mean_row`), and table.md / table.json with
the paper's reference rows beside this model's (`render_tables`), written whole each time a row
finishes (`write_tables`); a table that lacks rows says so (`incomplete`)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence


def mean_row(spec: dict, rows: dict[str, dict]) -> dict:
    """The average of the rows `spec["of"]` names that ran (a partial one says which it lacks); with
    `weighted`, over their problems (a micro average) instead of their scores."""
    parts = [rows[o] for o in spec["of"] if o in rows]
    scored = [r["score"] for r in parts if "skipped" not in r]
    if not scored:
        return {"skipped": "none of " + ", ".join(spec["of"]) + " ran"}
    missing = [o for o in spec["of"] if o not in rows or "skipped" in rows[o]]
    ran = [r for r in parts if "skipped" not in r]
    n = sum(r.get("n") or 0 for r in ran)
    if spec.get("weighted") and n:  # a micro average: every problem of every row counts once (MINT's)
        row = {"score": sum(r["score"] * (r.get("n") or 0) for r in ran) / n, "metric": "micro mean", "n": n}
    else:
        row = {"score": sum(scored) / len(scored), "metric": "mean", "n": n}
    if missing:
        row["partial"] = f"mean of {len(ran)} of {len(spec['of'])}: " + ", ".join(
            o for o in spec["of"] if o in rows and "skipped" not in rows[o]) + "; without " + ", ".join(missing)
    lost = sum(r.get("lost") or 0 for r in ran)
    if lost:
        row["lost"], row["lost_of"] = lost, sum(r.get("lost_of") or 0 for r in ran)
    return row


# ------------------------------------------------------------------ the table

def _cell(v: Any) -> str:
    """A score of this run (a fraction) in %."""
    return "—" if v is None else f"{100 * v:.1f}"


def _ref(v: Any) -> str:
    """A reference figure (the paper's, already in %)."""
    return "—" if v is None else f"{v:.1f}" if round(v, 1) == v else f"{v:.2f}"


def _mark(notes: list, new: list) -> str:
    """Footnote marks for `new` notes, appended to `notes`."""
    marks = ""
    for note in new:
        notes.append(note)
        marks += f"[^{len(notes)}]"
    return marks


def _caveats(r: dict) -> list[str]:
    """What a scored row's figure leaves out: a partial mean's parts, lost and refused requests,
    agent episodes that ended in an error, problems skipped and why."""
    out = []
    if r.get("partial"):
        out.append(f"partial: {r['partial']}")
    if r.get("lost"):
        out.append(f"{r['lost']} of {r.get('lost_of', '?')} samples or episodes lost to endpoint errors (no answer "
                   f"after every retry), left out of the score" + (": incomplete" if r.get("incomplete") else ""))
    if r.get("refused"):
        out.append(f"{r['refused']} requests refused by the endpoint (e.g. a prompt past the context), scored as failures")
    if r.get("errors"):
        out.append(f"{r['errors']} episodes ended in an error action (scored as unsolved)")
    for why, count in (r.get("skipped_problems") or {}).items():  # DS-1000's, per reason
        out.append(f"{count} problem{'s' if count != 1 else ''} skipped: {why}")
    return out


def _samples(r: dict) -> str:
    """A cell of the samples row: the problems (or items) scored, and what was lost."""
    if "skipped" in r:
        return "0"
    n = str(r.get("n") or "—")
    return n + (f" (+{r['lost']} lost)" if r.get("lost") else "")


def incomplete(rows: dict[str, dict], names: Sequence[str], how: str) -> str:
    """What a table of `rows` lacks of the rows `names`, `how` it came to lack them ("running",
    "interrupted by SIGINT"): the line table.md shows and table.json's `incomplete`."""
    missing = [n for n in names if n not in rows]
    return (f"{how}: {len(names) - len(missing)} of {len(names)} rows finished"
            + (f"; without {', '.join(missing)}" if missing else ""))


def render_tables(suite: dict, rows: dict[str, dict], model: str, lacking: str = "") -> tuple[str, dict]:
    """table.md and table.json: per table of the suite, this model's row (scores in %, skipped
    rows marked), the paper's reference rows beside, and per-column sample counts; `lacking`
    (`incomplete`'s words) marks a table without all its rows, in a line under the title and as
    table.json's `incomplete`."""
    tasks = suite["tasks"]
    refs = suite.get("reference", {})
    md = [f"# {suite.get('title', suite.get('name', 'suite'))}: {model}", ""]
    out: dict[str, Any] = {"suite": suite.get("name"), "model": model, "tasks": rows, "tables": []}
    if lacking:
        md += [f"**Incomplete** ({lacking}): the rows below are those that finished.", ""]
        out["incomplete"] = lacking
    notes = []
    for table in suite.get("tables", [{"title": "Results", "columns": list(tasks)}]):
        cols = [c for c in table["columns"] if c in rows]
        if not cols:
            continue
        titles = [tasks[c].get("title", c) for c in cols]
        avg = table.get("average", False)
        head = ["Model"] + titles + (["Avg"] if avg else [])
        md += [f"## {table['title']}", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        mine = []
        for c in cols:
            r, title = rows[c], tasks[c].get("title", c)
            if "skipped" in r:
                mine.append("skipped" + _mark(notes, [f"{title}: skipped: {r['skipped']}"]))
                continue
            # what table.json knows and a bare figure would hide, said in the cell and its footnotes
            flag = " (partial)" if r.get("partial") else " (incomplete)" if r.get("incomplete") else ""
            mine.append(_cell(r["score"]) + flag + _mark(notes, [f"{title}: {x}" for x in _caveats(r)]))
        scored = [c for c in cols if "score" in rows[c]]
        my_avg = "—"
        if scored and avg:
            my_avg = _cell(sum(rows[c]["score"] for c in scored) / len(scored))
            if len(scored) < len(table["columns"]):  # an average over fewer columns than the table's
                my_avg += " (partial)" + _mark(notes, [
                    f"{table['title']}: Avg over {len(scored)} of {len(table['columns'])} columns: "
                    + ", ".join(tasks[c].get("title", c) for c in scored)])
        md.append("| " + " | ".join([f"**{model}**"] + mine + ([my_avg] if avg else [])) + " |")
        ref_rows = {}
        for ref_name, ref in refs.items():
            if ref_name.startswith("_"):
                continue
            vals = [ref.get(c) for c in cols]
            if all(v is None for v in vals):
                continue
            # the paper's average is over the whole table: shown only beside the whole table
            ref_avg = ref.get("avg") if avg and cols == table["columns"] else None
            md.append("| " + " | ".join([ref_name + " (paper)"] + [_ref(v) for v in vals]
                                        + ([_ref(ref_avg)] if avg else [])) + " |")
            ref_rows[ref_name] = dict(zip(cols, vals))
        md.append("| samples | " + " | ".join(_samples(rows[c]) for c in cols) + (" | |" if avg else " |"))
        md.append("")
        out["tables"].append({"title": table["title"], "columns": cols, "model": {c: rows[c].get("score") for c in cols},
                              "reference": ref_rows})
    turn_rows = [c for c in rows if "turns" in rows[c] and "skipped" not in rows[c]]
    if turn_rows:
        k = max(rows[c]["turns"] for c in turn_rows)
        md += ["## Success rate per turn budget k", "",
               "How: a run per budget is MINT's method (a separate run at each k); one run reads every k off "
               "one run at the largest budget (solved within k turns).", "",
               "| Task | feedback | how | " + " | ".join(f"k={i}" for i in range(1, k + 1)) + " |",
               "|" + "---|" * (k + 3)]
        for c in turn_rows:
            md.append(f"| {tasks[c].get('title', c)} | {rows[c].get('feedback', '—')} | {rows[c].get('budgets', 'one run')} | "
                      + " | ".join(_cell(rows[c].get(f"success@{i}")) for i in range(1, k + 1)) + " |")
        md.append("")
    if notes:
        md += [f"[^{i}]: {note}" for i, note in enumerate(notes, 1)] + [""]
    source = refs.get("_source")
    if source:
        md += [f"Reference rows: {source}", ""]
    return "\n".join(md), out


def write_tables(out: Path, suite: dict, rows: dict[str, dict], model: str, lacking: str = "") -> str:
    """OUT/table.md and OUT/table.json (`render_tables`), each replaced whole (written beside and
    renamed into place: a reader, or an interrupt, never meets half a file); returns the markdown."""
    md, table = render_tables(suite, rows, model, lacking)
    for name, text in (("table.json", json.dumps(table, indent=1)), ("table.md", md)):
        tmp = out / f".{name}.tmp"
        tmp.write_text(text)
        os.replace(tmp, out / name)
    return md
