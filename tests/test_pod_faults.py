"""Lost hosts and hangs on a local 4-process pod (docs/design.md, "Lost hosts and hangs").

`LocalPod` starts N trainer processes on localhost as one pod (what scripts/local_pod.sh does
from a shell). One run is taken through every fault, each launch resuming the last: a worker
SIGKILLed during a checkpoint save, a worker stopped (SIGSTOP), the coordinator SIGKILLed, a data
read that never returns; each must end every process within the bound, with one line naming
the process and the cause, and the last launch's losses must equal an uninterrupted run's bit
for bit."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from easylemur.train import pod as pod_mod
from train_run import ROOT, cmd, env, free_port, losses

HEARTBEAT, FLOOR = 5, 10  # the tests' short timeouts (defaults: 30 s and 60 s)
# every process gone within the heartbeat timeout plus the beat, the exit and this machine's load;
# process 0 leaves last and waits for slow peers (at most the heartbeat timeout + 5 s more)
LOST_BOUND = 2 * HEARTBEAT + 6
STEPS = 8
# no malloc restart, no CPU peak measured by 4 processes at once (their MFU is not under test)
QUICK = {"EASYLEMUR_MALLOC": "default", "EASYLEMUR_CPU_PEAK_FLOPS": "1e11", "PYTHONUNBUFFERED": "1"}
O = ["data.shards=4", f"train.steps={STEPS}", "checkpoint.every=2", "checkpoint.keep=0",
     f"distributed.heartbeat_timeout_seconds={HEARTBEAT}", f"watchdog.floor_seconds={FLOOR}"]


class LocalPod:
    """N trainer processes (one CPU device each) of one run on localhost, joined as a pod;
    process i's output in `logs/process<i>.log`. `wait` polls until all exited and records
    when each did (time.monotonic)."""

    def __init__(self, workdir: Path, n: int = 4, overrides=(), fault: str = ""):
        self.workdir, self.n = Path(workdir), n
        events = self.workdir / "events.jsonl"
        self.launch = 1 + (events.read_text().count('"event": "start"') if events.exists() else 0)
        self.logs = self.workdir.parent / f"logs-{time.monotonic_ns()}"
        self.logs.mkdir(parents=True)
        port = free_port()
        e = {**env(1), **QUICK, "TMPDIR": str(self.logs)}  # JAX's diverted native log (pod.native_log) goes here
        if fault:
            e["EASYLEMUR_FAULT"] = fault
        self.procs = []
        for i in range(n):
            with open(self.logs / f"process{i}.log", "w") as out:
                self.procs.append(subprocess.Popen(
                    cmd(workdir, [*overrides, f"distributed.coordinator_address=127.0.0.1:{port}",
                                  f"distributed.num_processes={n}", f"distributed.process_id={i}"]),
                    cwd=ROOT, env=e, stdout=out, stderr=subprocess.STDOUT))
        self.ended: dict[int, float] = {}

    def log(self, i: int) -> str:
        return (self.logs / f"process{i}.log").read_text(errors="replace")

    def poll(self) -> None:
        for i, p in enumerate(self.procs):
            if i not in self.ended and p.poll() is not None:
                self.ended[i] = time.monotonic()

    def logged(self) -> dict:
        try:
            return losses(self.workdir)
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            return {}

    def steps_done(self) -> int:
        """The newest step this launch finished (events.jsonl: its start is the file's last)."""
        try:
            events = [json.loads(line) for line in (self.workdir / "events.jsonl").read_text().splitlines()]
        except (FileNotFoundError, json.JSONDecodeError):
            return 0
        starts = [e["launch"] for e in events if e["event"] == "start"]
        if len(starts) < self.launch:
            return 0
        return max([e["step"] for e in events if e["event"] == "step" and e["launch"] == starts[-1]], default=0)

    def wait_until(self, cond, timeout: float = 240) -> None:
        """Polls until `cond()`; fails at `timeout`, or at once when every process ended without it."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            if cond():
                return
            if time.monotonic() > deadline or len(self.ended) == self.n:
                self.kill()
                raise AssertionError("timed out:\n" + "\n".join(self.log(i)[-1500:] for i in range(self.n)))
            time.sleep(0.05)

    def wait(self, timeout: float = 240) -> list[int]:
        self.wait_until(lambda: len(self.ended) == self.n, timeout)
        return [p.returncode for p in self.procs]

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
                p.wait()

    def error_line(self, i: int) -> str:
        lines = [line for line in self.log(i).splitlines() if line.startswith("error: ")]
        assert len(lines) == 1, (i, self.log(i)[-3000:])
        return lines[0]

    def jax_trace(self, i: int) -> str:
        """Process i left after JAX's abort: its console holds no C++ trace; the file its line names does."""
        assert "Check failure stack trace" not in self.log(i) and "    @ " not in self.log(i), self.log(i)[-3000:]
        line = self.error_line(i)
        path = Path(line.split("JAX's message and C++ trace: ")[1].split(")")[0])
        assert path.parent == self.logs, line
        text = path.read_text()
        assert "Check failure stack trace" in text, text
        return text


def newest_complete(workdir: Path) -> int:
    from easylemur.checkpoint import store

    steps = [int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit() and store.is_complete(p)]
    return max(steps, default=0)


def ended_within(pod: LocalPod, since: float, bound: float, who) -> list[float]:
    took = [round(pod.ended[i] - since, 1) for i in who]
    print(f"detection: processes {list(who)} exited {took} s after the fault (bound {bound} s)")
    assert max(took) <= bound, took
    return took


@pytest.fixture
def pod_run(tmp_path):
    pods = []
    yield tmp_path / "run", pods
    for p in pods:
        p.kill()


def quick(monkeypatch) -> None:
    for k, v in QUICK.items():
        monkeypatch.setenv(k, v)


def check_saves(workdir: Path) -> None:
    """Every step folder that resume or `checkpoint verify` accepts verifies whole; a save cut by a
    lost process is refused by both."""
    from easylemur.checkpoint import store

    folders = list((workdir / "checkpoints").iterdir())
    complete = {int(p.name) for p in folders if p.name.isdigit() and store.is_complete(p)}
    mngr = store.manager(workdir / "checkpoints", keep=0)
    assert sorted(mngr.all_steps()) == sorted(complete)  # what resume chooses from
    mngr.close()
    for p in folders:
        step = int(p.name.split(".")[0])
        if step in complete:
            assert store.verify_step(workdir / "checkpoints", step).startswith("ok")
        else:  # orbax's temporary folder of a cut save, or a step folder never finalized
            with pytest.raises(Exception, match="incomplete|not found"):
                store.verify_step(workdir / "checkpoints", step)


def same_where_both(a: dict, b: dict, steps) -> None:
    """Losses of the steps both computed (one launch's, the next one's after its resume) equal bit for bit."""
    both = [s for s in steps if s in a and s in b]
    assert both, (a, b)
    assert {s: a[s] for s in both} == {s: b[s] for s in both}


@pytest.mark.slow
@pytest.mark.e2e
def test_lost_coordinator_and_worker_end_the_pod_and_the_relaunch_is_exact(pod_run, monkeypatch):
    workdir, pods = pod_run
    quick(monkeypatch)
    # three processes (two survivors name each lost one; the 4-process pod is the next test's)
    o3 = ["data.shards=3", "train.batch_size=6", *O[1:]]

    # 0. the same run on a pod where nothing fails: what every launch below must reproduce
    pods.append(pod := LocalPod(workdir.parent / "uninterrupted", n=3, overrides=o3))
    assert pod.wait() == [0, 0, 0], pod.log(0)[-3000:]
    reference = losses(workdir.parent / "uninterrupted")
    assert sorted(reference) == list(range(1, STEPS + 1))

    # 1. the coordinator (process 0) SIGKILLed once step 3 is logged (odd: its step is not saved yet)
    pods.append(pod := LocalPod(workdir, n=3, overrides=o3))
    pod.wait_until(lambda: 3 in pod.logged())
    pod.procs[0].kill()
    killed = time.monotonic()
    assert pod.wait() == [-9, 75, 75]
    ended_within(pod, killed, LOST_BOUND, (1, 2))
    for i in (1, 2):
        assert pod.error_line(i).startswith("error: lost process 0 of 3 ("), pod.error_line(i)
        assert "coordinator" in pod.error_line(i)
        assert "Failed to send RPC to coordination service" in pod.jax_trace(i)
    check_saves(workdir)
    first = losses(workdir)  # steps 1..3 or more, computed from step 0 without a stop
    same_where_both(reference, first, range(1, STEPS + 1))
    resume = newest_complete(workdir)

    # 2. a worker SIGKILLed (by itself, EASYLEMUR_FAULT) right after its save of step 6 began
    pods.append(pod := LocalPod(workdir, n=3, overrides=o3, fault="kill_save@2:6"))
    pod.wait_until(lambda: 2 in pod.ended)
    assert pod.procs[2].returncode == -signal.SIGKILL
    killed = pod.ended[2]
    assert pod.wait() == [75, 75, -9]
    ended_within(pod, killed, LOST_BOUND, (0, 1))
    for i in (0, 1):
        assert pod.error_line(i).startswith("error: lost process 2 of 3 ("), pod.error_line(i)
    check_saves(workdir)
    second = losses(workdir)
    assert max(second) >= 6
    same_where_both(reference, second, range(resume + 1, STEPS + 1))
    resume = newest_complete(workdir)
    assert resume in (4, 6)

    # 3. the relaunch finishes: its losses are the uninterrupted pod's, bit for bit
    pods.append(pod := LocalPod(workdir, n=3, overrides=o3))
    assert pod.wait() == [0, 0, 0], pod.log(0)[-3000:]
    final = losses(workdir)
    assert final == reference

    from easylemur.train.goodput import account, read_events

    r = account(read_events(workdir))
    assert r["launches"] == 3 and r["interruptions"] == 2 and r["state"] == "done", r
    # the killed coordinator wrote no end: process 1 recorded it, under the launch process 0 started
    assert [(x["ended"], x.get("lost_process")) for x in r["interruption_details"]] == [("lost", 0), ("lost", 2)], r
    assert r["interruption_details"][0]["detect_seconds"] <= LOST_BOUND
    assert r["interruption_details"][1]["detect_seconds"] >= HEARTBEAT - 1  # process 2 silent, then named lost
    assert r["interruption_details"][1]["restart_seconds"] > 0
    print("goodput:", json.dumps(r["interruption_details"]))


@pytest.mark.slow
@pytest.mark.e2e
def test_a_stopped_coordinator_and_a_hung_data_read_end_the_pod(pod_run, monkeypatch):
    workdir, pods = pod_run
    quick(monkeypatch)

    # 1. the coordinator stopped (SIGSTOP): the workers name it; continued, it finds itself stalled
    # and leaves at once (its peers gave up on it), and the launch has one fault record (process
    # 1's). A stopped worker takes the same path (the test of JAX's abort below stops one; the
    # stalled process's own exit is the same code)
    pods.append(pod := LocalPod(workdir, overrides=O))
    pod.wait_until(lambda: pod.steps_done() >= 1)
    pod.procs[0].send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    pod.wait_until(lambda: all(i in pod.ended for i in (1, 2, 3)))
    ended_within(pod, stopped, LOST_BOUND, (1, 2, 3))
    for i in (1, 2, 3):
        assert pod.error_line(i).startswith("error: lost process 0 of 4 ("), pod.error_line(i)
    pod.procs[0].send_signal(signal.SIGCONT)
    continued = time.monotonic()
    assert pod.wait() == [75, 75, 75, 75]
    ended_within(pod, continued, 5, (0,))
    assert "stalled" in pod.error_line(0), pod.error_line(0)
    events = [json.loads(line) for line in (workdir / "events.jsonl").read_text().splitlines()]
    launch = [e for e in events if e["event"] == "start"][-1]["launch"]
    assert [(e["event"], e.get("process")) for e in events if e["launch"] == launch and e["event"] in ("fault", "end")] \
        == [("fault", 0), ("end", None)], events
    resume = newest_complete(workdir)

    # 2. a data read that never returns on process 3: the step watchdog, on every process
    hang_at = resume + 2
    pods.append(pod := LocalPod(workdir, overrides=O, fault=f"hang_data@3:{hang_at}"))
    pod.wait_until(lambda: "EASYLEMUR_FAULT" in pod.log(3))
    hung = time.monotonic()
    assert pod.wait() == [76, 76, 76, 76]
    ended_within(pod, hung, FLOOR + HEARTBEAT + 6, range(4))
    for i in range(4):
        line = pod.error_line(i)
        assert line.startswith("error: hang"), line
        assert "process 3 in a data read" in line, line
    assert "Thread 0x" in pod.log(3) or "Current thread" in pod.log(3)  # faulthandler's stacks
    assert f"step {hang_at} data" in pod.error_line(3)
    events = [json.loads(line) for line in (workdir / "events.jsonl").read_text().splitlines()]
    faults = [e for e in events if e["event"] == "fault"]
    assert [e["cause"] for e in faults] == ["lost", "hang"] and "stacks" in faults[-1]
    assert not (workdir / "run.lock").exists()  # released before os._exit


def test_watchdog_limit_is_the_larger_of_the_median_times_factor_and_the_floor(monkeypatch):
    from ml_collections import ConfigDict

    cfg = ConfigDict({"distributed": {"heartbeat_timeout_seconds": 30}, "watchdog": {"step_factor": 10.0,
                                                                                      "floor_seconds": 5.0}})
    g = pod_mod.Guard(cfg)
    assert g.limit() == 5.0  # no step yet: the floor
    g.durations.extend([0.1, 0.2, 3.0])
    assert g.limit() == 5.0  # 10 x median 0.2 = 2 s < the floor
    g.durations.extend([1.0, 1.0])
    assert g.limit() == 10.0  # 10 x median 1.0
    g.loop_started(0)
    assert g.phase_name == "compile" and g.armed
    g.phase("data", 1)
    g.progress -= 100  # long ago
    with g.long("save"):
        assert g.phase_name == "save"
    assert g.phase_name == "data" and time.monotonic() - g.progress < 100  # the watch starts over after a long phase
    g.durations.clear()
    g.durations.extend([0.0, 0.0, 0.0, 2.0])  # steps too short to time are left out of the median
    assert g.median_step() == 2.0 and g.limit() == 20.0


def test_a_silent_peers_verdict_comes_before_a_local_hang():
    """One order of verdicts: while a peer's beat has stopped changing (it will be named lost
    within the heartbeat timeout, or beat again), the watchdog does not call a local hang; and
    JAX's own heartbeat can never fire before easylemur's verdict (it may react T_jax / 2 after
    a fault; ours comes at most T + 2 s after it)."""
    from ml_collections import ConfigDict

    cfg = ConfigDict({"distributed": {"heartbeat_timeout_seconds": 30}, "watchdog": {"step_factor": 10.0,
                                                                                      "floor_seconds": 5.0}})
    g = pod_mod.Guard(cfg)
    g.count = 4
    now = time.monotonic()
    g._peers = {1: ("7 3 step", now - 0.5), 2: ("6 3 step", now - 0.5), 3: ("9 3 step", now)}
    assert not g._peer_going_silent(now)
    g._peers[2] = ("6 3 step", now - 3.5 * g.interval)  # stopped: its beat no longer changes
    assert g._peer_going_silent(now)
    g._peers[2] = ("exit 75 1 lost", now - 10)  # a peer that said it exits is no silent peer
    assert not g._peer_going_silent(now)
    for t in (1, 5, 30, 100):
        assert pod_mod.jax_heartbeat_seconds(t) / 2 >= t + 2 + 8


def test_a_peer_refusing_bad_input_during_setup_is_given_time_to_be_refused_alike(monkeypatch):
    """Every process reads one config, so a peer's exit 2 (bad input) while this process still sets up
    is most likely its own verdict a moment later (on a loaded host, a second-process mesh refusal
    came out as 75, which the babysitter relaunches): no loss is declared for the heartbeat timeout.
    Any other exit, or exit 2 once the loop runs, is a loss at once."""
    from ml_collections import ConfigDict

    cfg = ConfigDict({"distributed": {"heartbeat_timeout_seconds": 30}, "watchdog": {"step_factor": 10.0,
                                                                                      "floor_seconds": 5.0}})
    g = pod_mod.Guard(cfg)
    said = []
    monkeypatch.setattr(g, "lost", lambda process, cause, detect_seconds=0.0: said.append((process, cause)))
    now = time.monotonic()
    g._peers = {1: ("exit 2 - -", now)}
    g._check_peers(now + 10, stale=False)
    assert said == []  # still setting up: its own refusal may come
    g._check_peers(now + 31, stale=False)
    assert said == [(1, "it exited with status 2; its log says why")]  # not within the timeout: lost
    said.clear()
    g.phase("data", 1)
    g._check_peers(now + 1, stale=False)
    assert said and said[0][0] == 1  # past setup a peer's exit 2 is a loss at once
    said.clear()
    g.phase_name = "setup"
    g._peers = {1: ("exit 1 - -", now)}
    g._check_peers(now + 1, stale=False)
    assert said and said[0][0] == 1  # a failed run (exit 1) is not the same verdict coming


@pytest.mark.slow
def test_hang_in_one_process_dumps_stacks_and_exits_76(tmp_path):
    """The watchdog on a plain single-process run (a data read that never returns)."""
    e = {**env(1), **QUICK, "EASYLEMUR_FAULT": "hang_data@0:3"}
    t = time.monotonic()
    p = subprocess.run(cmd(tmp_path / "w", ["train.steps=6", "watchdog.floor_seconds=3"]), cwd=ROOT, env=e,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 76, p.stderr[-3000:]
    errors = [line for line in p.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and errors[0].startswith("error: hang: no step finished for "), errors
    assert "process 0 is in step 3 data" in errors[0]
    assert "in next" in p.stderr or "Thread 0x" in p.stderr  # the stacks
    print(f"single process: hang ended the run {time.monotonic() - t:.1f} s after its start")
    events = [json.loads(line) for line in (tmp_path / "w" / "events.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events][-2:] == ["fault", "end"] and events[-1]["status"] == "hang"
    assert not (tmp_path / "w" / "run.lock").exists()  # released before os._exit


def test_local_pod_script_usage():
    p = subprocess.run(["bash", str(ROOT / "scripts" / "local_pod.sh"), "--help"], capture_output=True, text=True)
    assert p.returncode == 0 and "75 a process of the pod lost" in p.stdout
    p = subprocess.run(["bash", str(ROOT / "scripts" / "local_pod.sh"), "0"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith("local_pod.sh: N must be")
    assert os.access(ROOT / "scripts" / "local_pod.sh", os.X_OK)


def test_goodput_counts_a_lost_host_with_its_detection_and_restart():
    from easylemur.train.goodput import account, report_text

    def ev(launch, event, t, **kw):
        return {"event": event, "launch": launch, "time": t, **kw}

    r = account([
        ev("a", "start", 0.0), ev("a", "restore", 1.0, seconds=1.0, step=0, resumed=False), ev("a", "loop", 2.0, step=0),
        ev("a", "step", 10.0, step=1, first=True), ev("a", "save", 12.0, seconds=1.0, step=4),
        ev("a", "step", 20.0, step=6),
        ev("a", "fault", 26.0, step=6, at=7, cause="lost", phase="step", message="lost process 2 of 4 (...)", process=2,
           detect_seconds=5.5),
        ev("a", "end", 26.0, step=6, status="lost"),
        ev("b", "start", 30.0), ev("b", "restore", 31.0, seconds=2.0, step=4, resumed=True), ev("b", "loop", 34.0, step=4),
        ev("b", "step", 40.0, step=5, first=True), ev("b", "step", 45.0, step=8), ev("b", "end", 46.0, step=8, status="done"),
    ])
    [x] = r["interruption_details"]
    assert x["ended"] == "lost" and x["steps_lost"] == 2 and x["detect_seconds"] == 5.5 and x["restart_seconds"] == 14.0
    assert "detected after 5.5 s, restarted (first step) 14.0 s later" in report_text(r, "w")
    assert "launch 1 (lost: process 2) reached step 6" in report_text(r, "w")


def test_local_pod_script_says_each_exit_when_it_happens(tmp_path):
    """local_pod.sh reports exits in the order they happen: process 0 still running (or stopped)
    does not hide the others'. A stand-in for python: process i sleeps (N - i) x 0.4 s, exits i."""
    fake = tmp_path / "python"
    fake.write_text("#!/usr/bin/env bash\n"
                    "for a in \"$@\"; do case $a in --config.distributed.process_id=*) i=${a#*=} ;; esac; done\n"
                    "sleep \"$(( (3 - i) * 4 ))e-1\"\nexit \"$i\"\n")
    fake.chmod(0o755)
    p = subprocess.run(["bash", str(ROOT / "scripts" / "local_pod.sh"), "3", "--port", "1", "--logs",
                        str(tmp_path / "logs"), "--", "--config", "x.py"], capture_output=True, text=True,
                       env={**os.environ, "PYTHON": str(fake)}, timeout=60)
    order = [line.split()[1] for line in p.stdout.splitlines() if " exited " in line]
    assert order == ["2", "1", "0"], p.stdout + p.stderr
    assert p.returncode == 2  # the first non-zero status, in the order of exits



@pytest.mark.slow
@pytest.mark.e2e
def test_where_jax_aborts_first_the_task_it_names_is_named_and_its_trace_kept_off_the_console(pod_run, monkeypatch):
    """JAX's heartbeat forced below easylemur's (`jax_heartbeat_timeout_seconds` 4 s against the
    default 30 s): JAX aborts every survivor ("tasks are unhealthy (stopped sending heartbeats):
    2") before any easylemur verdict. Each survivor names process 2 from JAX's own message, not the
    coordinator by assumption; its console holds one line and no C++ trace, which is in the file
    the line names; goodput records one fault, by the coordinator, naming process 2."""
    workdir, pods = pod_run
    quick(monkeypatch)
    o = ["data.shards=3", "train.batch_size=6", "train.steps=400", "checkpoint.every=1000", "checkpoint.keep=0",
         "distributed.jax_heartbeat_timeout_seconds=4", f"watchdog.floor_seconds={FLOOR}"]
    pods.append(pod := LocalPod(workdir, n=3, overrides=o))
    pod.wait_until(lambda: pod.steps_done() >= 2)
    pod.procs[2].send_signal(signal.SIGSTOP)
    stopped = time.monotonic()
    pod.wait_until(lambda: all(i in pod.ended for i in (0, 1)), timeout=60)
    ended_within(pod, stopped, 4 + 6, (0, 1))  # JAX's limit (no easylemur verdict before 30 s)
    for i in (0, 1):
        line = pod.error_line(i)
        assert line.startswith("error: lost process 2 of 3 (JAX's coordination service found it unhealthy"), line
        assert pod.procs[i].returncode == 75
        assert "unhealthy (stopped sending heartbeats)" in pod.jax_trace(i)
    pod.kill()
    faults = [json.loads(x) for x in (workdir / "events.jsonl").read_text().splitlines() if '"fault"' in x]
    assert len(faults) == 1 and faults[0]["process"] == 2 and 1 <= faults[0]["detect_seconds"] <= 10, faults
