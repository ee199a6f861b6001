"""A suite's table: the rows of its averaged columns (`mean_row`), and table.md / table.json with
the paper's reference rows beside this model's (`render_tables`)."""

from __future__ import annotations

from typing import Any


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
        row["partial"] = "without " + ", ".join(missing)
    return row


# ------------------------------------------------------------------ the table

def _cell(v: Any) -> str:
    """A score of this run (a fraction) in %."""
    return "—" if v is None else f"{100 * v:.1f}"


def _ref(v: Any) -> str:
    """A reference figure (the paper's, already in %)."""
    return "—" if v is None else f"{v:.1f}" if round(v, 1) == v else f"{v:.2f}"


def render_tables(suite: dict, rows: dict[str, dict], model: str) -> tuple[str, dict]:
    """table.md and table.json: per table of the suite, this model's row (scores in %, skipped
    rows marked), the paper's reference rows beside, and per-column sample counts."""
    tasks = suite["tasks"]
    refs = suite.get("reference", {})
    md = [f"# {suite.get('title', suite.get('name', 'suite'))}: {model}", ""]
    out: dict[str, Any] = {"suite": suite.get("name"), "model": model, "tasks": rows, "tables": []}
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
            r = rows[c]
            if "skipped" in r:
                notes.append(f"{tasks[c].get('title', c)}: skipped: {r['skipped']}")
                mine.append(f"skipped[^{len(notes)}]")
            elif r.get("partial"):  # an average that lacks some of its rows: said in the table itself
                notes.append(f"{tasks[c].get('title', c)}: partial: {r['partial']}")
                mine.append(f"{_cell(r['score'])} (partial)[^{len(notes)}]")
            else:
                mine.append(_cell(r["score"]))
        scored = [rows[c]["score"] for c in cols if "score" in rows[c]]
        my_avg = (_cell(sum(scored) / len(scored)) + ("" if len(scored) == len(cols) else " (partial)")) if scored else "—"
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
        md.append("| samples | " + " | ".join(str(rows[c].get("n") or "—") if "skipped" not in rows[c] else "0"
                                             for c in cols) + (" | |" if avg else " |"))
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
