"""MINT's published transcripts replayed through easylemur's harness: for one model of MINT's
outputs, every task at every turn budget (and its GPT-4-feedback run), the success rate
easylemur's harness gives against MINT's own, episode by episode.

    python bench/mint_replay.py --mint MINT_CLONE [--model lemur-70b-chat-v1] [--out DIR] [--tasks m_alfworld]
                                [--budgets one-run] [--limit N]

MINT_CLONE is a clone of github.com/xingyaoww/mint-bench (the pinned commit of
easylemur/eval/benchmarks/mint/files.py). The replay endpoint (`python -m
easylemur.eval.benchmarks.mint.replay`) answers each conversation with the transcript's next
assistant message and each critic request with its recorded feedback; `eval suite` plays them
by MINT's protocol. Per row: MINT's rate, easylemur's, the episodes whose success differs, and
the episodes whose dialogue (every message, observations included) is not MINT's to the
character. Not a test: it needs MINT's repository, which tests never download.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TASKS = {"m_humaneval": ("code_generation", "humaneval"), "m_mbpp": ("code_generation", "mbpp"),
         "m_gsm8k": ("reasoning", "gsm8k"), "m_math": ("reasoning", "math"),
         "m_theoremqa": ("reasoning", "theoremqa"), "m_mmlu": ("reasoning", "mmlu"),
         "m_hotpotqa": ("reasoning", "hotpotqa"), "m_alfworld": ("decision_making", "alfworld")}


def mint_records(outputs: Path, feedback: bool, k: int, task: str) -> dict[str, dict]:
    kind, folder = TASKS[task]
    setting = "F=gpt-4-0613/PHF=no_GT-textual" if feedback else "F=None"
    path = outputs / setting / f"max{k}_p{1 if k == 1 else 2}+tool+cd" / kind / folder / "results.jsonl"
    return {str(r["task"]["task_id"]): r for r in map(json.loads, path.read_text().splitlines()) if r}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mint", required=True, help="a clone of MINT's repository")
    ap.add_argument("--model", default="lemur-70b-chat-v1", help="a model of MINT's data/outputs")
    ap.add_argument("--out", default="", help="where the suite writes (default: a temporary directory)")
    ap.add_argument("--checks", choices=("pinned", "paper"), default="pinned",
                    help="MINT's checks at the pinned commit, or as the published transcripts were scored")
    ap.add_argument("--tasks", default=",".join(TASKS), help="MINT's tasks to replay (default: all eight)")
    ap.add_argument("--budgets", choices=("each", "one-run"), default="each",
                    help="each: MINT's runs at k = 1..5; one-run: only its k = 5 run (and the feedback run, at 5)")
    ap.add_argument("--limit", type=int, default=0, help="the first N problems of each task (0: all)")
    args = ap.parse_args()
    tasks = [t for t in args.tasks.split(",") if t]
    unknown = sorted(set(tasks) - set(TASKS))
    if unknown:
        ap.error(f"--tasks: unknown {', '.join(unknown)} (expected some of {', '.join(TASKS)})")
    budgets = [5] if args.budgets == "one-run" else [1, 2, 3, 4, 5]
    mint = Path(args.mint).resolve()
    outputs = mint / "data" / "outputs" / args.model
    from easylemur.eval.benchmarks.mint.replay import Replayer, serve

    replayer = Replayer(outputs)
    server = serve(replayer)
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        data.mkdir()
        (data / "mint").symlink_to(mint)
        out = Path(args.out or Path(tmp) / "out")
        rows = tasks + [t + "_fb" for t in tasks]
        cmd = [sys.executable, "-m", "easylemur.eval", "suite", "--endpoint", url, "--tasks", ",".join(rows),
               "--feedback-endpoint", url, "--data-dir", str(data), "--wikipedia", "off", "--out", str(out), "--force",
               "--mint-checks", args.checks, "--budgets", args.budgets]
        if args.limit:
            cmd += ["--limit", str(args.limit)]
        subprocess.run(cmd, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
        report = []
        for row in rows:
            task, feedback = row.removesuffix("_fb"), row.endswith("_fb")
            for k in ([5] if feedback else budgets):
                ours = {str(r["task"]["task_id"]): r for r in
                        map(json.loads, (out / row / f"k={k}" / "results.jsonl").read_text().splitlines())}
                theirs = {t: r for t, r in mint_records(outputs, feedback, k, task).items() if t in ours}
                differ = sorted(t for t in theirs if bool(theirs[t]["state"]["success"]) != bool(ours[t]["state"]["success"]))
                dialogue = sum(theirs[t]["state"]["history"] != ours[t]["state"]["history"] for t in theirs)
                n = len(theirs)
                report.append({"row": row, "k": k, "n": n,
                               "mint": round(100 * sum(bool(r["state"]["success"]) for r in theirs.values()) / n, 2),
                               "easylemur": round(100 * sum(bool(r["state"]["success"]) for r in ours.values()) / n, 2),
                               "success_differs": differ, "dialogue_differs": dialogue})
                print(json.dumps(report[-1]), flush=True)
    server.shutdown()
    print(json.dumps({"summary": {"rows": len(report), "episodes": sum(r["n"] for r in report),
                                  "success_differs": sum(len(r["success_differs"]) for r in report),
                                  "dialogue_differs": sum(r["dialogue_differs"] for r in report),
                                  "replies_past_a_transcript": replayer.past_end,
                                  "unknown_conversations": replayer.unknown}}), flush=True)


if __name__ == "__main__":
    main()
