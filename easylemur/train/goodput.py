"""Goodput: the share of a run's wall time spent training (docs/design.md, "Goodput").

    python -m easylemur.train.goodput WORKDIR [--json]

The train loop appends what it does to `WORKDIR/events.jsonl` (`EventLog`, process 0 only):
one JSON line per event, every launch of the run appending to the same file (never truncated,
unlike metrics.jsonl, whose lines after a resumed step are dropped). `account` reads the events
back and splits the wall time from the first launch's start to the last record into setup,
restore, compile, train, save, eval, lost (steps computed and then thrown away because the
launch died before they were checkpointed) and down (between a launch's last record and the
next launch's start); goodput = train / wall. Reading needs no JAX."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import sys
import time
import uuid
from typing import Any, Callable, Iterator, Optional, Sequence

from easylemur.storage import LineFile, exists, read

EVENTS = "events.jsonl"
CATEGORIES = ("train", "setup", "restore", "compile", "save", "eval", "lost", "down")


def process_start_time() -> float:
    """When this process started (unix seconds), so that interpreter start and imports count:
    /proc/self/stat field 22 (clock ticks since boot) against the boot-time clock; the current
    time where either is missing."""
    try:
        with open("/proc/self/stat") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        age = time.clock_gettime(time.CLOCK_BOOTTIME) - ticks / os.sysconf("SC_CLK_TCK")
        return time.time() - max(0.0, age)
    except (OSError, ValueError, IndexError, AttributeError):
        return time.time()


class EventLog:
    """Appends this launch's events to WORKDIR/events.jsonl; a no-op when `active` is False
    (processes other than 0). Every record has `event`, `launch` (this launch's id) and `time`
    (unix seconds); a timed one also `seconds`. A bucket cannot append: the file is read once
    and rewritten whole on every event, as metrics.jsonl is."""

    def __init__(self, workdir: Any, active: bool = True):
        from easylemur.checkpoint.paths import as_path

        self.active = active
        self.path = as_path(workdir) / EVENTS
        self.launch = uuid.uuid4().hex[:12]
        self.step = 0  # the newest step this launch finished, for the end record
        self.outcome: Optional[str] = None  # "done" / "stopped", set by the loop when it ends without an error
        self.file: Optional[LineFile] = None
        if not active:
            return
        # locally: appended, a killed launch's half-written last line ended first; in a bucket:
        # its complete lines read once, then rewritten whole with each event
        self.file = LineFile(self.path, lambda: _read_lines(self.path))

    def take_over(self) -> bool:
        """Process 0, this log's writer, is lost (the coordinator killed): this process writes the
        launch's last records in its place, under the launch id of the file's newest start (process
        0's, of this launch: it wrote it before any step). False when the file has no start."""
        if self.active:
            return True
        starts = [r for r in map(json.loads, _read_lines(self.path)) if r.get("event") == "start"]
        if not starts:
            return False
        self.launch, self.active = starts[-1]["launch"], True
        self.file = LineFile(self.path, lambda: _read_lines(self.path))
        return True

    def ended(self) -> bool:
        """Whether this launch's end is recorded already: by process 1 in the place of a stalled
        coordinator that then ran again (one fault and one end per launch)."""
        return self.active and any(r.get("event") == "end" and r.get("launch") == self.launch
                                   for r in map(json.loads, _read_lines(self.path)))

    def write(self, event: str, t: float, **fields: Any) -> None:
        if not self.active:
            return
        self.file.append(json.dumps({"event": event, "launch": self.launch, "time": round(t, 3), **fields}))

    def start(self) -> None:
        """The launch's first record, written once the workdir lock is held; its time is the
        process's start."""
        self.write("start", process_start_time(), host=socket.gethostname(), pid=os.getpid())

    def restored(self, began: float, step: int, resumed: bool) -> None:
        """`restore_or_init` ran from `began` to now: restored `step` from the workdir
        (`resumed`), or made the fresh / init.from state (step 0)."""
        self.step = step
        self.write("restore", began, seconds=round(time.time() - began, 3), step=step, resumed=resumed)

    def loop(self, step: int) -> None:
        """The train loop begins at `step`: from here to the first step's end is compilation."""
        self.write("loop", time.time(), step=step)

    def step_ended(self, step: int, first: bool, logged: bool) -> None:
        """`StepLogger` read step `step`'s metrics (its end); recorded for the launch's first
        step and for every step that gets a metrics record."""
        self.step = step
        if first or logged:
            self.write("step", time.time(), step=step, **({"first": True} if first else {}))

    @contextlib.contextmanager
    def timed(self, event: str, step: int) -> Iterator[None]:
        """Times a blocking side job of the loop (`save`, `eval`), recorded even when it fails."""
        t = time.time()
        try:
            yield
        finally:
            self.write(event, t, seconds=round(time.time() - t, 3), step=step)

    def timed_call(self, event: str, step: int, fn: Callable[[], Any]) -> Callable[[], Any]:
        def call() -> Any:
            with self.timed(event, step):
                return fn()
        return call

    def exit(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        """The launch's last record (an ExitStack callback, so after every later cleanup):
        `status` done, stopped (a signal, after its save) or error (`error`: the type)."""
        if exc_type is None:
            self.write("end", time.time(), step=self.step, status=self.outcome or "done")
        else:
            self.write("end", time.time(), step=self.step, status="error", error=exc_type.__name__)
        return False


def _read_lines(path: Any) -> list[str]:
    """The file's complete JSON lines (a half-written one, from a killed launch, dropped)."""
    try:
        text = read(path).decode()
    except FileNotFoundError:
        return []
    lines = []
    for line in text.splitlines():
        try:
            if isinstance(json.loads(line), dict):
                lines.append(line)
        except json.JSONDecodeError:
            continue
    return lines


def read_events(workdir: Any) -> list[dict]:
    from easylemur.checkpoint.paths import as_path

    path = as_path(workdir) / EVENTS
    if not exists(path):
        from easylemur.errors import InputError

        raise InputError(f"{path}: no such file; goodput needs the events a run of this easylemur writes "
                         "(runs started before it have none)")
    return [json.loads(l) for l in _read_lines(path)]


def _overlap(a0: float, a1: float, b0: float, b1: float) -> float:
    return max(0.0, min(a1, b1) - max(a0, b0))


def _launch_seconds(ev: list[dict], lost_from: Optional[float]) -> tuple[dict, float, float]:
    """One launch's time by category, its start and its last record's time. `lost_from`: when
    the steps its successor recomputes began (train, save and eval after it become lost)."""
    out = dict.fromkeys(CATEGORIES, 0.0)
    start = next((e["time"] for e in ev if e["event"] == "start"), min(e["time"] for e in ev))
    last = max(e["time"] + e.get("seconds", 0.0) for e in ev)
    end = next((e["time"] for e in ev if e["event"] == "end"), None)
    loop = next((e["time"] for e in ev if e["event"] == "loop"), None)
    first = next((e["time"] for e in ev if e["event"] == "step" and e.get("first")), None)
    restore = next((e for e in ev if e["event"] == "restore"), None)
    jobs = [(e["time"], e["time"] + e["seconds"], e["event"]) for e in ev if e["event"] in ("save", "eval")]

    setup_end = loop if loop is not None else last
    out["setup"] = setup_end - start
    if restore is not None and restore.get("resumed"):
        r = _overlap(restore["time"], restore["time"] + restore["seconds"], start, setup_end)
        out["restore"], out["setup"] = r, out["setup"] - r
    if loop is None:
        return out, start, last
    compile_end = first if first is not None else last
    out["compile"] = compile_end - loop
    if first is None:
        return out, start, last
    # the loop's end: its last step or side job; after it (closing down) is setup again
    loop_end = max([e["time"] for e in ev if e["event"] == "step"] + [b for _, b, _ in jobs])
    if end is not None:
        out["setup"] += max(0.0, end - loop_end)
    window = max(0.0, loop_end - first)
    for a, b, kind in jobs:
        out[kind] += _overlap(a, b, first, loop_end)
    out["train"] = window - out["save"] - out["eval"]
    if lost_from is not None and lost_from < loop_end:
        lo = max(lost_from, first)
        for kind in ("save", "eval"):
            gone = sum(_overlap(a, b, lo, loop_end) for a, b, k in jobs if k == kind)
            out[kind] -= gone
            out["lost"] += gone
        gone_train = (loop_end - lo) - sum(_overlap(a, b, lo, loop_end) for a, b, _ in jobs)
        out["train"] -= gone_train
        out["lost"] += gone_train
    return out, start, max(last, end or last)


def _resumed_from(ev: list[dict]) -> int:
    r = next((e for e in ev if e["event"] == "restore"), None)
    return int(r["step"]) if r is not None else 0


def _last_step(ev: list[dict]) -> Optional[int]:
    """The newest step the launch recorded (its starting step when it finished none)."""
    steps = [int(e["step"]) for e in ev if "step" in e]
    return max(steps) if steps else None


def _kept_until(ev: list[dict], step: int) -> Optional[float]:
    """When the launch was done with step `step` (its save, else its step record, else the
    loop's start when the launch itself began there): its later steps are the lost ones."""
    saves = [e["time"] + e["seconds"] for e in ev if e["event"] == "save" and e.get("step") == step]
    if saves:
        return max(saves)
    steps = [e["time"] for e in ev if e["event"] == "step" and e.get("step") == step]
    if steps:
        return max(steps)
    loop = next((e for e in ev if e["event"] == "loop"), None)
    if loop is not None and step <= int(loop["step"]):
        return loop["time"]
    return None


def account(events: Sequence[dict]) -> dict:
    """The run's goodput from its events (`read_events`): wall seconds from the first launch's
    start to the last record, seconds and fractions per category (they sum to the wall time),
    goodput = train / wall, and each interruption (a launch that ended other than done and was
    followed by another, or the last launch when a fault ended it, `relaunched` false): how it
    ended, its cause and lost process, the step it reached, the step the next launch resumed
    from, the steps lost (recomputed) and the seconds lost and down."""
    launches: dict[str, list[dict]] = {}
    for e in events:
        if isinstance(e.get("time"), (int, float)) and "launch" in e and "event" in e:
            launches.setdefault(e["launch"], []).append(e)
    if not launches:
        from easylemur.errors import InputError

        raise InputError("no events recorded yet (the run has not started)")
    order = sorted(launches.values(), key=lambda ev: next((e["time"] for e in ev if e["event"] == "start"),
                                                          min(e["time"] for e in ev)))
    seconds = dict.fromkeys(CATEGORIES, 0.0)
    interruptions = []
    spans = []
    for i, ev in enumerate(order):
        nxt = order[i + 1] if i + 1 < len(order) else None
        end = next((e for e in ev if e["event"] == "end"), None)
        status = end["status"] if end is not None else "killed"
        lost_from = None
        if nxt is not None and status != "done":
            resumed = _resumed_from(nxt)
            lost_from = _kept_until(ev, resumed)
        part, start, last = _launch_seconds(ev, lost_from)
        for k, v in part.items():
            seconds[k] += v
        spans.append((start, last))
        fault = next((e for e in ev if e["event"] == "fault"), None)
        # an interruption: a launch that ended other than done and was followed by another, or the
        # last launch when a fault ended it (not relaunched yet: nothing lost is counted until then)
        if status != "done" and (nxt is not None or (end is not None and fault is not None)):
            reached = _last_step(ev)
            resumed = _resumed_from(nxt) if nxt is not None else None
            interruptions.append({
                "launch": i + 1, "ended": status, "reached_step": reached, "resumed_from": resumed,
                "steps_lost": max(0, (reached or 0) - resumed) if resumed is not None else 0,
                "lost_seconds": part["lost"], "relaunched": nxt is not None,
            })
            if fault is not None:
                # a lost host or a hang (docs/design.md, "Lost hosts and hangs"): which process, how
                # long it went unnoticed, and from the launch's end to the next launch's first step
                interruptions[-1]["detect_seconds"] = fault.get("detect_seconds")
                interruptions[-1]["cause"] = fault.get("message")
                if fault.get("process") is not None:
                    interruptions[-1]["lost_process"] = fault["process"]
                if nxt is not None:
                    first = next((e["time"] for e in nxt if e["event"] == "step" and e.get("first")), None)
                    interruptions[-1]["restart_seconds"] = (first - last) if first is not None else None
    for i in range(1, len(spans)):
        down = max(0.0, spans[i][0] - spans[i - 1][1])
        seconds["down"] += down
        if interruptions and any(x["launch"] == i for x in interruptions):
            next(x for x in interruptions if x["launch"] == i)["down_seconds"] = down
    wall = max(s[1] for s in spans) - spans[0][0]
    last_end = next((e for e in order[-1] if e["event"] == "end"), None)
    return {
        "wall_seconds": wall,
        "goodput": seconds["train"] / wall if wall > 0 else float("nan"),
        "seconds": seconds,
        "fractions": {k: (v / wall if wall > 0 else float("nan")) for k, v in seconds.items()},
        "launches": len(order),
        "interruptions": len(interruptions),
        "steps_lost": sum(x["steps_lost"] for x in interruptions),
        "interruption_details": interruptions,
        "last_step": _last_step(order[-1]),
        "state": last_end["status"] if last_end is not None else "running or died (no end record)",
    }


def _duration(s: float) -> str:
    s = max(0.0, s)
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.2f} h"


def report_text(r: dict, workdir: str) -> str:
    lines = [f"{workdir}: {r['launches']} launch(es), last step {r['last_step']}, last launch: {r['state']}",
             f"wall time {_duration(r['wall_seconds'])}, goodput {r['goodput']:.1%}", ""]
    for k in CATEGORIES:
        lines.append(f"  {k:<8} {_duration(r['seconds'][k]):>10}  {r['fractions'][k]:6.1%}")
    lines.append("")
    lines.append(f"interruptions: {r['interruptions']}, steps lost: {r['steps_lost']}")
    for x in r["interruption_details"]:
        ended = x["ended"] + (f": process {x['lost_process']}" if x.get("lost_process") is not None else "")
        after = (f"the next resumed from step {x['resumed_from']}: {x['steps_lost']} steps lost "
                 f"({_duration(x['lost_seconds'])}), down {_duration(x.get('down_seconds', 0.0))}"
                 if x.get("relaunched", True) else "not relaunched (run the same command to resume)")
        lines.append(f"  launch {x['launch']} ({ended}) reached step {x['reached_step']}, {after}"
                     + (f", detected after {_duration(x['detect_seconds'])}" if x.get("detect_seconds") is not None else "")
                     + (f", restarted (first step) {_duration(x['restart_seconds'])} later"
                        if x.get("restart_seconds") is not None else ""))
        if x.get("cause"):
            lines.append(f"    {x['cause']}")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    from easylemur.errors import add_debug_flag

    parser = argparse.ArgumentParser(
        prog="python -m easylemur.train.goodput",
        description="A run's goodput: the share of its wall time (first launch's start to the last record) spent "
        "training, and where the rest went: setup (process start, imports, data, closing), restore (a checkpoint), "
        "compile (the loop's start to its first step's end), save, eval, lost (steps computed and then recomputed "
        "after a kill or crash), down (a launch's last record to the next launch's start). Reads WORKDIR/events.jsonl.",
    )
    parser.add_argument("workdir", metavar="WORKDIR", help="the run's workdir (local or gs://)")
    parser.add_argument("--json", action="store_true", help="print one JSON line instead of the table")
    add_debug_flag(parser)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = _parser().parse_args(argv)
    r = account(read_events(args.workdir))
    if args.json:
        print(json.dumps({"workdir": args.workdir, **r}))
    else:
        print(report_text(r, args.workdir))
    return 0


if __name__ == "__main__":
    from easylemur.errors import run_cli

    sys.exit(run_cli(main))
