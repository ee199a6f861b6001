"""Goodput (docs/design.md, "Goodput"): the events a run appends to events.jsonl, and the
accounting `python -m easylemur.train.goodput` prints from them, on a real run killed once and
resumed, and on synthetic events with known answers."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from easylemur.errors import run_cli
from easylemur.train import goodput
from train_run import ROOT, cmd, env, run


def _records(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a killed run's half-written line
    return out


def _metrics_steps(w: Path) -> list[int]:
    return [r["step"] for r in _records(w / "metrics.jsonl") if "loss" in r]


def _event_steps(w: Path) -> list[int]:
    return [e["step"] for e in _records(w / "events.jsonl") if e["event"] == "step"]


def _complete_checkpoints(w: Path) -> list[int]:
    d = w / "checkpoints"
    return [int(p.name) for p in d.iterdir() if p.name.isdigit()] if d.is_dir() else []


def _kill_past_a_checkpoint(proc: subprocess.Popen, w: Path) -> None:
    """SIGKILLs the run once it has a complete checkpoint and has logged step 7 or later, at a
    moment when its last step is not a checkpoint step and its events and metrics name the same
    last step (it is stopped first, so neither file changes while they are compared)."""
    deadline = time.time() + 300
    while True:
        assert proc.poll() is None and time.time() < deadline, "the first launch never got past its checkpoint"
        time.sleep(0.02)
        if not (w / "metrics.jsonl").exists():
            continue
        os.kill(proc.pid, signal.SIGSTOP)
        last = _metrics_steps(w)[-1:]
        if last and last[0] >= 7 and last[0] % 5 and _complete_checkpoints(w) and last == _event_steps(w)[-1:]:
            proc.kill()
            proc.wait()
            return
        os.kill(proc.pid, signal.SIGCONT)


@pytest.mark.slow
def test_goodput_of_a_run_killed_once_and_resumed(tmp_path):
    w = tmp_path / "w"
    t0 = time.time()
    # far more steps than the first launch gets through: it is killed past its first checkpoint
    proc = subprocess.Popen(cmd(w, ["train.steps=100000", "checkpoint.every=5"]), cwd=ROOT, env=env(1),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _kill_past_a_checkpoint(proc, w)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    killed_steps = _metrics_steps(w)  # what the killed launch computed (log.every=1)
    reached = killed_steps[-1]
    ckpts = _complete_checkpoints(w)
    # past what the killed launch reached, so every step it lost is computed again
    p = run(w, [f"train.steps={reached + 2}", "checkpoint.every=5"])
    elapsed = time.time() - t0
    resumed = int(p.stdout.split("resumed from ")[1].split()[0].rsplit("/", 1)[1])
    assert resumed == max(ckpts) and resumed < reached
    recomputed = [s for s in killed_steps if s > resumed]
    assert recomputed == list(range(resumed + 1, reached + 1))
    assert set(recomputed) <= set(_metrics_steps(w))  # the resumed launch wrote them again

    # the CLI, as a user runs it
    cli = subprocess.run([sys.executable, "-m", "easylemur.train.goodput", str(w), "--json"], cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    r = json.loads(cli.stdout.strip().splitlines()[-1])
    assert r["launches"] == 2 and r["interruptions"] == 1, r
    (x,) = r["interruption_details"]
    assert x["ended"] == "killed" and x["reached_step"] == reached and x["resumed_from"] == resumed
    assert x["steps_lost"] == r["steps_lost"] == len(recomputed)
    assert x["lost_seconds"] > 0 and x["down_seconds"] > 0
    assert r["state"] == "done" and r["last_step"] == reached + 2
    s = r["seconds"]
    assert abs(sum(s.values()) - r["wall_seconds"]) < 0.01, s
    assert all(v >= 0 for v in s.values()), s
    for k in ("train", "setup", "restore", "compile", "save", "lost", "down"):
        assert s[k] > 0, (k, s)
    assert s["eval"] == 0
    assert 0 < r["goodput"] < 1 and r["goodput"] == pytest.approx(s["train"] / r["wall_seconds"])
    # from the first process's start to the last record: within what the test saw
    assert 0.7 * elapsed < r["wall_seconds"] <= elapsed + 0.5, (r["wall_seconds"], elapsed)

    text = subprocess.run([sys.executable, "-m", "easylemur.train.goodput", str(w)], cwd=ROOT,
                          capture_output=True, text=True, timeout=120).stdout
    assert "goodput" in text and "interruptions: 1, steps lost: " + str(len(recomputed)) in text
    assert f"launch 1 (killed) reached step {reached}, the next resumed from step {resumed}" in text


# ----------------------------------------------------------------------------- the accounting


def _ev(launch, event, t, **kw):
    return {"event": event, "launch": launch, "time": t, **kw}


SYNTHETIC = [
    # launch a: fresh start, killed at step 9 after checkpointing step 5
    _ev("a", "start", 0.0), _ev("a", "restore", 2.0, seconds=1.0, step=0, resumed=False),
    _ev("a", "loop", 5.0, step=0), _ev("a", "step", 15.0, step=1, first=True), _ev("a", "step", 20.0, step=5),
    _ev("a", "save", 20.0, seconds=2.0, step=5), _ev("a", "step", 30.0, step=8),
    _ev("a", "eval", 30.0, seconds=1.0, step=8), _ev("a", "step", 35.0, step=9),
    # launch b: resumes step 5 and finishes at step 10
    _ev("b", "start", 50.0), _ev("b", "restore", 55.0, seconds=3.0, step=5, resumed=True),
    _ev("b", "loop", 60.0, step=5), _ev("b", "step", 70.0, step=6, first=True), _ev("b", "step", 80.0, step=10),
    _ev("b", "save", 80.0, seconds=2.0, step=10), _ev("b", "save", 82.0, seconds=1.0, step=10),
    _ev("b", "end", 85.0, step=10, status="done"),
]


def test_accounting_of_synthetic_events():
    r = goodput.account(SYNTHETIC)
    # a: setup 0-5, compile 5-15, train 15-22 less the save 20-22, lost 22-35 (the eval in it too)
    # down 35-50; b: setup 50-55 + 58-60 + 83-85, restore 55-58, compile 60-70, train 70-80, save 80-83
    assert r["seconds"] == pytest.approx({"setup": 5 + 9, "restore": 3, "compile": 20, "train": 5 + 10, "save": 2 + 3,
                                          "eval": 0, "lost": 13, "down": 15})
    assert r["wall_seconds"] == 85 and r["goodput"] == pytest.approx(15 / 85)
    assert r["launches"] == 2 and r["interruptions"] == 1 and r["steps_lost"] == 4
    assert r["interruption_details"] == [{"launch": 1, "ended": "killed", "reached_step": 9, "resumed_from": 5,
                                          "steps_lost": 4, "lost_seconds": pytest.approx(13), "down_seconds": 15,
                                          "relaunched": True}]
    assert r["state"] == "done" and r["last_step"] == 10


def test_a_lost_last_launch_is_an_interruption_with_its_cause_before_any_relaunch():
    """A pod that lost a host and was not relaunched (yet) still reports who, why and when."""
    lost = SYNTHETIC[:9] + [
        _ev("a", "fault", 36.0, step=9, at=10, cause="lost", phase="step", process=2, detect_seconds=30.6,
            message="lost process 2 of 4 (no heartbeat for 30 s ...)"),
        _ev("a", "end", 36.0, step=9, status="lost")]
    r = goodput.account(lost)
    assert r["state"] == "lost" and r["interruptions"] == 1 and r["steps_lost"] == 0
    x = r["interruption_details"][0]
    assert (x["relaunched"], x["lost_process"], x["detect_seconds"], x["resumed_from"]) == (False, 2, 30.6, None)
    text = goodput.report_text(r, "w")
    assert "launch 1 (lost: process 2) reached step 9, not relaunched" in text and "detected after 30.6 s" in text
    assert "lost process 2 of 4 (no heartbeat" in text


def test_a_signal_stop_loses_no_steps_and_a_kill_in_compile_loses_no_training():
    stopped = [
        _ev("a", "start", 0.0), _ev("a", "loop", 1.0, step=0), _ev("a", "step", 2.0, step=1, first=True),
        _ev("a", "step", 4.0, step=3), _ev("a", "save", 4.0, seconds=1.0, step=3),
        _ev("a", "save", 5.0, seconds=1.0, step=3), _ev("a", "end", 7.0, step=3, status="stopped"),
        # b dies while compiling; c resumes the same step 3
        _ev("b", "start", 10.0), _ev("b", "restore", 11.0, seconds=1.0, step=3, resumed=True),
        _ev("b", "loop", 12.0, step=3),
        _ev("c", "start", 20.0), _ev("c", "restore", 21.0, seconds=1.0, step=3, resumed=True),
        _ev("c", "loop", 22.0, step=3), _ev("c", "step", 23.0, step=4, first=True),
        _ev("c", "step", 24.0, step=5), _ev("c", "end", 25.0, step=5, status="done"),
    ]
    r = goodput.account(stopped)
    assert r["interruptions"] == 2 and r["steps_lost"] == 0 and r["seconds"]["lost"] == 0
    assert [(x["ended"], x["reached_step"]) for x in r["interruption_details"]] == [("stopped", 3), ("killed", 3)]
    assert r["seconds"]["down"] == pytest.approx(3 + 8) and r["wall_seconds"] == 25
    assert sum(r["seconds"].values()) == pytest.approx(25)
    assert r["seconds"]["train"] == pytest.approx(2 + 1) and r["seconds"]["save"] == 2


def test_event_log_appends_across_launches_and_mends_a_half_written_line(tmp_path):
    a = goodput.EventLog(tmp_path)
    a.start()
    a.loop(0)
    with open(tmp_path / "events.jsonl", "a") as f:
        f.write('{"event": "step", "launch": "')  # SIGKILL mid-write
    b = goodput.EventLog(tmp_path)
    b.start()
    with b.timed("save", 3):
        pass
    b.exit(None, None, None)
    events = goodput.read_events(tmp_path)
    assert [(e["launch"] == a.launch, e["event"]) for e in events] == [
        (True, "start"), (True, "loop"), (False, "start"), (False, "save"), (False, "end")]
    assert goodput.EventLog(tmp_path, active=False).file is None  # other processes write nothing


def test_event_log_on_a_bucket_appends_across_launches(gcs_bucket):
    url = f"{gcs_bucket}/run"
    for _ in range(2):
        log = goodput.EventLog(url)
        log.start()
        log.exit(None, None, None)
    events = goodput.read_events(url)
    assert [e["event"] for e in events] == ["start", "end", "start", "end"]
    assert goodput.account(events)["launches"] == 2


def test_cli_help_and_a_workdir_without_events(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        goodput.main(["--help"])
    assert e.value.code == 0 and "goodput" in capsys.readouterr().out
    assert run_cli(goodput.main, [str(tmp_path)]) == 2
    assert "events.jsonl: no such file" in capsys.readouterr().err
