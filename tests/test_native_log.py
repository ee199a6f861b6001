"""JAX's native log on a pod's way down (easylemur/train/native_log.py): a process whose fd 2
runs through the filter keeps its own output whole and in order on the console, while JAX's
fatal message and C++ trace (the real text JAX 0.9 writes, below) go to the file, where
`jax_verdict` reads which task JAX found unhealthy."""

import subprocess
import sys
import textwrap
from pathlib import Path

from train_run import ROOT

E_SERVICE = ("E1206 14:30:55.922542   27784 coordination_service.cc:1549] [4622152333799410571] Use error polling "
             "to propagate the following error to all tasks: UNAVAILABLE: The following tasks are unhealthy (stopped "
             "sending heartbeats):\n2\nThe tasks have crashed. Check the task logs for an earlier error, or scheduler "
             "events (e.g. preemption, eviction) to debug further. "
             "[type.googleapis.com/tensorflow.CoordinationServiceError='']\n")
E_AGENT = ("E1206 14:30:55.923053   27795 coordination_service_agent.cc:289] Polled an error from coordination "
           "service (this can be an error from this or another task).\n")
FATAL = ("F1206 14:30:55.923194   27795 client.h:80] Terminating process because the JAX distributed service detected "
         "fatal errors. absl::Status: UNAVAILABLE: The following tasks are unhealthy (stopped sending heartbeats):\n"
         "{tasks}\nThe tasks have crashed. Check the task logs for an earlier error.\n\nRPC: "
         "/xla.coordination.CoordinationService/PollForError [type.googleapis.com/tensorflow.CoordinationServiceError='']\n")
TRACE = "*** Check failure stack trace: ***\n" + "".join(
    f"    @     0x7fdc66a4{i:04x}  absl::log_internal::LogMessage::SendToLog()\n" for i in range(12))
PREEMPTION = ("W1206 14:42:14.901929   30400 preemption_sync_manager.cc:147] Failed to retrieve preemption notice "
              "from coordination service: UNAVAILABLE: Socket closed\nAdditional GRPC error information from remote "
              "target coordination_service while calling /xla.coordination.CoordinationService/GetKeyValue:\n")
GONE = ("F1206 14:30:28.030688   27730 client.h:80] Terminating process because the JAX distributed service detected "
        "fatal errors. absl::Status: UNAVAILABLE: Failed to send RPC to coordination service. Either the leader task "
        "was preempted/died/restarted unexpectedly or this task is experiencing network issues.\n")


def run(tmp_path: Path, writes: list[str]) -> tuple[str, str, tuple]:
    """A child process diverts its fd 2, writes `writes` to it (each one write), reads the verdict,
    then says its line; returns (its console, the file's text, the verdict)."""
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {str(ROOT)!r})
        from easylemur.train import native_log
        path = native_log.divert(1)
        for w in {writes!r}:
            os.write(2, w.encode())
        verdict = native_log.jax_verdict(path, wait=0.5 if "Check failure" in "".join({writes!r}) else 0)
        os.write(2, ("\\nerror: the line " + path + "\\n").encode())
        print(repr(verdict))
    """)
    tmp_path.mkdir(exist_ok=True)
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, timeout=60,
                       env={"TMPDIR": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 0, p.stderr
    files = list(tmp_path.glob("easylemur-jax-p1-*.log"))
    return p.stderr.decode(), (files[0].read_text() if files else ""), eval(p.stdout)


def test_a_heartbeat_abort_goes_to_the_file_and_names_the_task(tmp_path):
    ours = "step 1\rstep 2\rstep 3\nI1206 14:30:00.000001   27784 gloo.cc:1] connected\nEpoch and more\n"
    console, file, verdict = run(tmp_path, [ours, E_SERVICE, E_AGENT, FATAL.format(tasks="2"), TRACE])
    assert console.startswith(ours)  # progress bars, info lines and plain text pass unchanged
    assert "Check failure" not in console and "unhealthy" not in console and "    @" not in console, console
    assert console.rstrip().endswith("error: the line " + str(next(tmp_path.glob("easylemur-jax-p1-*.log"))))
    # everything of JAX's but the blank lines (ours end a progress bar with one)
    assert file == (E_SERVICE + E_AGENT + FATAL.format(tasks="2") + TRACE).replace("\n\n", "\n")
    assert verdict == ([2], False)


def test_the_coordinator_gone_and_several_tasks(tmp_path):
    console, file, verdict = run(tmp_path / "a", [PREEMPTION, GONE, TRACE])
    assert verdict == (None, True) and file == PREEMPTION + GONE + TRACE and "preemption" not in console, console
    assert run(tmp_path / "b", [FATAL.format(tasks="1,3"), TRACE])[2] == ([1, 3], False)


def test_a_run_without_jax_errors_leaves_no_file(tmp_path):
    console, file, verdict = run(tmp_path, ["W1206 14:30:00.000001   1 foo.cc:9] a warning\n", "E", "rror: split\n"])
    assert console.startswith("W1206 14:30:00.000001   1 foo.cc:9] a warning\nError: split\n")
    assert verdict == (None, False)
    # the filter removes its empty file once the process is gone
    assert not list(tmp_path.glob("easylemur-jax-p1-*.log"))
