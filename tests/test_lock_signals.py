"""The workdir lock holds for the whole of a live run, and a second SIGTERM exits at once even
while the main thread waits in XLA (docs/design.md, "Run safety")."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from easylemur.errors import RunError
from easylemur.train.lock import HEARTBEAT_ENV, STALE_ENV, WorkdirLock, WorkdirLocked
from test_run_safety import _wait_for
from train_run import ROOT, cmd, env

# a model that takes seconds to compile and to step on a CPU: room for two signals 0.3 s apart
SLOW_STEP = ["model.hidden_size=512", "model.intermediate_size=1536", "model.num_layers=4", "model.num_heads=8",
             "model.num_kv_heads=4", "data.seq_len=256"]


def _beat_files(d: Path) -> list[str]:
    return sorted(p.name for p in d.glob("run.lock.beat-*"))


def _pid_start(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])


def _lock_record(**fields) -> str:
    return json.dumps({"host": socket.gethostname(), "started": time.time() - 7200, "heartbeat": time.time() - 3600,
                       "token": "someone-else", **fields})


def _mount_tmpfs(d: Path) -> None:
    d.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(d)], capture_output=True).returncode:
        pytest.skip("cannot mount a small tmpfs here (needs root)")


# ----------------------------------------------------------------------------- a live run keeps its lock


@pytest.mark.slow
def test_a_live_trainer_keeps_its_lock_past_the_stale_timeout_with_a_beating_heartbeat(tmp_path):
    w = tmp_path / "w"
    w.mkdir()
    (w / "run.lock.beat-0123abcd").write_text("{}")  # left by a run killed mid-heartbeat
    e = {**env(1), HEARTBEAT_ENV: "0.2", STALE_ENV: "1"}
    proc = subprocess.Popen(cmd(w, ["train.steps=100000", "checkpoint.every=100000"]), cwd=ROOT, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (w / "metrics.jsonl").exists(), proc, "its first step")
        beats, deadline = set(), time.time() + 4  # four stale timeouts
        while time.time() < deadline:
            beats.add(json.loads((w / "run.lock").read_text())["heartbeat"])
            time.sleep(0.05)
        assert len(beats) >= 5, f"the heartbeat advanced {len(beats) - 1} times in 4 s (every 0.2 s asked)"
        # a second run, even one that judges a heartbeat stale after 0.1 s, finds the workdir held
        said = []
        with pytest.raises(WorkdirLocked, match=f"pid {proc.pid}.*Its process runs on this machine"):
            WorkdirLock(w, log=said.append, stale_seconds=0.1).acquire()
        p = subprocess.run(cmd(w, ["train.steps=2"]), cwd=ROOT, env=e, capture_output=True, text=True, timeout=600)
        assert p.returncode == 2 and "in use by another run" in p.stderr, p.stderr[-2000:]
        assert said == [] and json.loads((w / "run.lock").read_text())["pid"] == proc.pid
        assert proc.poll() is None
        assert _beat_files(w) in ([], [f"run.lock.beat-{json.loads((w / 'run.lock').read_text())['token']}"])
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "workdir lock" not in out + err  # no heartbeat warning in the whole run
    assert not (w / "run.lock").exists() and _beat_files(w) == []


def test_a_holder_on_this_machine_is_judged_by_its_process_not_its_heartbeat(tmp_path):
    lock = tmp_path / "run.lock"
    holder = subprocess.Popen(["sleep", "300"])
    try:
        # alive, the same process as recorded: kept, though its heartbeat is an hour old
        lock.write_text(_lock_record(pid=holder.pid, pid_start=_pid_start(holder.pid)))
        with pytest.raises(WorkdirLocked, match=f"pid {holder.pid}, .*heartbeat 3600 s ago"):
            WorkdirLock(tmp_path, stale_seconds=1).acquire()
        # a lock of an older easylemur (no start time): a live pid is kept too
        lock.write_text(_lock_record(pid=holder.pid))
        with pytest.raises(WorkdirLocked):
            WorkdirLock(tmp_path, stale_seconds=1).acquire()
        # the pid alive but started at another time: reused by another process, the holder is gone
        lock.write_text(_lock_record(pid=holder.pid, pid_start=_pid_start(holder.pid) - 1))
        said = []
        with WorkdirLock(tmp_path, log=said.append):
            assert json.loads(lock.read_text())["pid"] == os.getpid()
        assert f"pid {holder.pid}) is no longer running (pid {holder.pid} now belongs to a process" in said[0]
    finally:
        holder.kill()
        holder.wait()
    # dead: taken over at once, though its heartbeat is fresh
    lock.write_text(_lock_record(pid=holder.pid, pid_start=1, heartbeat=time.time()))
    said = []
    with WorkdirLock(tmp_path, log=said.append):
        pass
    assert f"pid {holder.pid}) is no longer running" in said[0] and not lock.exists()


def test_a_holder_of_the_same_name_on_another_boot_is_judged_by_its_heartbeat(tmp_path):
    """Its pid means nothing here (a rebooted host, a container with the host's name)."""
    lock = tmp_path / "run.lock"
    record = dict(pid=os.getpid(), pid_start=_pid_start(os.getpid()), boot_id="another-boot")
    lock.write_text(_lock_record(**record, heartbeat=time.time() - 10))
    with pytest.raises(WorkdirLocked, match="older than 300 s is taken over"):
        WorkdirLock(tmp_path).acquire()
    lock.write_text(_lock_record(**record, heartbeat=time.time() - 3600))
    said = []
    with WorkdirLock(tmp_path, log=said.append):
        pass
    assert "has not refreshed it for 3600 s" in said[0]


# ----------------------------------------------------------------------------- a lost lock stops the run


def _wait_for_failure(lock: WorkdirLock) -> RunError:
    deadline = time.time() + 30
    while time.time() < deadline:
        try:
            lock.check()
        except RunError as e:
            return e
        time.sleep(0.05)
    raise AssertionError("check() never raised")


@pytest.mark.parametrize("how", ["replaced", "removed"])
def test_a_lock_taken_from_the_run_stops_it(tmp_path, how):
    said = []
    with WorkdirLock(tmp_path, log=said.append, heartbeat_seconds=0.1, stale_seconds=2) as lock:
        lock.check()
        other = tmp_path / "other"
        other.write_text(_lock_record(pid=1, heartbeat=time.time()))
        if how == "replaced":
            os.replace(other, tmp_path / "run.lock")
        else:
            (tmp_path / "run.lock").unlink()
        e = _wait_for_failure(lock)
    text = str(e)
    assert "\n" not in text and f"lost the workdir lock {tmp_path / 'run.lock'}: it is no longer this run's" in text
    assert any(s.startswith("warning: workdir lock") for s in said)
    if how == "replaced":  # the other run's lock is left alone
        assert json.loads((tmp_path / "run.lock").read_text())["token"] == "someone-else"
    assert _beat_files(tmp_path) == []


@pytest.mark.slow
def test_a_trainer_whose_lock_is_taken_stops_with_one_line(tmp_path):
    w = tmp_path / "w"
    e = {**env(1), HEARTBEAT_ENV: "0.2", STALE_ENV: "1"}
    proc = subprocess.Popen(cmd(w, ["train.steps=100000", "checkpoint.every=100000"]), cwd=ROOT, env=e,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for(lambda: (w / "metrics.jsonl").exists(), proc, "its first step")
        other = w / "other"
        other.write_text(_lock_record(pid=1, heartbeat=time.time()))
        os.replace(other, w / "run.lock")
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 1, err[-3000:]
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"error: lost the workdir lock {w / 'run.lock'}: it is no longer this run's"), line
    assert "stopped: saved step" not in out and not (w / "checkpoints").exists() or \
        not [p for p in (w / "checkpoints").iterdir() if p.name.isdigit()]
    assert json.loads((w / "run.lock").read_text())["token"] == "someone-else"  # left to its holder
    assert _beat_files(w) == []


def test_a_lock_that_cannot_be_refreshed_stops_the_run(tmp_path):
    w = tmp_path / "w"
    if os.geteuid() == 0:  # root writes through permissions: make the disk itself read-only
        _mount_tmpfs(w)
    else:
        w.mkdir()
    said = []
    try:
        with WorkdirLock(w, log=said.append, heartbeat_seconds=0.1, stale_seconds=1) as lock:
            if os.geteuid() == 0:
                subprocess.run(["mount", "-o", "remount,ro", str(w)], check=True)
            else:
                w.chmod(0o555)
            e = _wait_for_failure(lock)
        text = str(e)
        assert f"lost the workdir lock {w / 'run.lock'}: its heartbeat could not be written" in text, text
        assert "Read-only file system" in text or "Permission denied" in text
        assert any("could not refresh" in s for s in said)  # said at the first failed write
        assert _beat_files(w) == []
    finally:
        if os.geteuid() == 0:
            subprocess.run(["umount", "-l", str(w)])
        else:
            w.chmod(0o755)


# ----------------------------------------------------------------------------- a second signal


@pytest.mark.slow
def test_two_sigterms_while_the_first_step_compiles_exit_at_once_without_saving(tmp_path):
    """The main thread is in C for seconds here (XLA compiling the first step). Whether Python's
    own handler would see two calls depends on whether that C code polls for signals (this
    jaxlib does; a main thread that does not loses the second: the blocked-thread test below);
    the run must exit on the second either way, before any save."""
    w = tmp_path / "w"
    log = tmp_path / "stdout"
    with open(log, "w") as out_file:
        proc = subprocess.Popen(cmd(w, SLOW_STEP + ["train.steps=100000", "checkpoint.every=100000"]), cwd=ROOT,
                                env=env(1), stdout=out_file, stderr=subprocess.PIPE, text=True)
        _wait_for(lambda: "model " in log.read_text(), proc, "the start of its loop")
        time.sleep(1.5)  # tracing the step (Python) takes a fraction of this; compiling it, seconds more
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    out = log.read_text()
    assert proc.returncode == 128 + signal.SIGTERM, err[-3000:]
    assert "SIGTERM: finishing this step" in err and "SIGTERM again: exiting now" in err, err[-3000:]
    assert "stopped: saved step" not in out
    saved = [p.name for p in (w / "checkpoints").iterdir() if p.name.isdigit()] if (w / "checkpoints").exists() else []
    assert saved == [], f"the run went on to save step {saved} after the second signal"


SCRIPT = """
import signal, sys, time
from easylemur.train.signals import StopSignals

with StopSignals() as stop:
    # as while the main thread waits in XLA: no Python handler can run in it until it returns
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    print("ready", flush=True)
    time.sleep(float(sys.argv[1]))
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    time.sleep(0.5)
    print("requested", stop.requested, flush=True)
print("exited the scope", flush=True)
"""


@pytest.mark.slow
@pytest.mark.parametrize("signals", [[signal.SIGTERM], [signal.SIGTERM, signal.SIGTERM], [signal.SIGINT, signal.SIGTERM]],
                         ids=["one", "two", "int-then-term"])
def test_signals_are_counted_while_the_main_thread_is_blocked(signals):
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, "3"], cwd=ROOT, env=env(1), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    for i, s in enumerate(signals):
        if i:
            time.sleep(0.3)
        proc.send_signal(s)
    out, err = proc.communicate(timeout=120)
    first = signal.Signals(signals[0]).name
    assert f"{first}: finishing this step" in err, err
    if len(signals) == 1:  # asked to stop; the main thread goes on to save and leave
        assert proc.returncode == 0 and "requested True" in out and "exited the scope" in out, err
    else:
        assert proc.returncode == 128 + signals[-1], err
        assert f"{signal.Signals(signals[-1]).name} again: exiting now" in err and "requested" not in out


def test_stop_signals_restores_the_handlers_and_wakeup_fd_and_closes_its_fds():
    from easylemur.train.signals import StopSignals

    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    fds = len(os.listdir("/proc/self/fd"))
    with StopSignals() as stop:
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.time() + 10
        while not stop.requested and time.time() < deadline:
            time.sleep(0.01)
        assert stop.requested and stop.signum == signal.SIGTERM
    assert {s: signal.getsignal(s) for s in before} == before
    assert signal.set_wakeup_fd(-1) == -1
    assert len(os.listdir("/proc/self/fd")) == fds
