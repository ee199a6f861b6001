"""The one scoring loop of single-turn benchmarks: completions judged in the sandbox, pass@k.
The CLI (`python -m easylemur.eval NAME`), the suite's code rows and training's task evals all
score through `score`, in their own process.

It writes OUT/samples.jsonl (`task_id`, `completion`: the code that was checked) before anything
runs, then OUT/results.jsonl (`task_id`, `completion_id`, `passed`, `result`: "passed", "timed
out" or "failed: <reason>", worded by the sandbox's checker, never the program's output)."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from easylemur.errors import InputError
from easylemur.eval.api import Task, mean_pass_at_k, write_jsonl
from easylemur.eval.sandbox import Sandbox, run_programs


@dataclasses.dataclass
class Scores:
    pass_at: dict[str, float]  # {"pass@1": ..., "pass@10": ...}: the mean over problems
    counts: dict[str, tuple[int, int]]  # str(task_id) -> (samples, passed)

    @property
    def samples_per_problem(self) -> Any:
        """The number of samples of each problem (a list of the sizes when they differ)."""
        sizes = sorted({n for n, _ in self.counts.values()})
        return sizes[0] if len(sizes) == 1 else sizes

    def summary(self) -> dict:
        """pass@k, samples per problem and the problem count: the CLI's last line."""
        return {**self.pass_at, "n": self.samples_per_problem, "problems": len(self.counts)}


def score(task: Task, samples: Sequence[tuple[Any, str]], sandbox: Sandbox, ks: Sequence[int], out: Path, *,
          workers: int = 0, progress: Optional[Callable[[], None]] = None,
          cancel: Optional[threading.Event] = None) -> Scores:
    """Judges `samples` ((task_id, code) pairs, a problem's samples in their order) of `task`'s
    problems in the sandbox the task needs, `workers` programs at a time, and returns pass@k for
    each k of `ks`. Once `cancel` is set, the programs not yet started are not run (their
    result: "failed: not run")."""
    write_jsonl(out / "samples.jsonl", ({"task_id": tid, "completion": code} for tid, code in samples))
    by_id = {str(p.task_id): p for p in task.problems}
    missing = [tid for tid, _ in samples if str(tid) not in by_id]
    if missing:
        raise InputError(f"task_id {missing[0]!r} is not a {task.name} problem")
    programs = [task.program(by_id[str(tid)], code) for tid, code in samples]
    results = run_programs(programs, task.sized(sandbox), workers, progress=progress, cancel=cancel)
    # per problem in the task's order (the mean's order too), those with samples
    present = {str(tid) for tid, _ in samples}
    counts: dict[str, list[int]] = {str(p.task_id): [0, 0] for p in task.problems if str(p.task_id) in present}
    records = []
    for (tid, _), result in zip(samples, results):
        c = counts.setdefault(str(tid), [0, 0])
        records.append({"task_id": tid, "completion_id": c[0], "passed": result == "passed", "result": result})
        c[0] += 1
        c[1] += result == "passed"
    write_jsonl(out / "results.jsonl", records)
    per_problem = {k: (n, passed) for k, (n, passed) in counts.items()}
    return Scores(mean_pass_at_k(per_problem.values(), ks), per_problem)
