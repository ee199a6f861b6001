"""Hostile generated code run through the evaluation sandbox: it fails, the host's files stay
as they were, no socket is reached, and no process is left behind."""

import os
import shutil
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from easylemur.evaluation.sandbox import PASSED, TIMED_OUT, Sandbox, SandboxUnavailable, run_programs

# Without bwrap on PATH these tests cannot run; a bwrap that is present but unusable fails them.
pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(timeout=1.5)
    sb.check()
    return sb


@pytest.fixture
def victim():
    """A host directory outside /tmp (the sandbox's /tmp is its own), visible to the sandbox."""
    base = "/var/tmp" if os.access("/var/tmp", os.W_OK) else str(Path.home())
    d = Path(tempfile.mkdtemp(prefix="easylemur-victim-", dir=base))
    (d / "keep.txt").write_text("keep")
    (d / "sub").mkdir()
    (d / "sub" / "inner.txt").write_text("inner")
    os.chmod(d, 0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def _snapshot(d: Path) -> dict:
    return {str(p.relative_to(d)): (p.read_text() if p.is_file() else None) for p in sorted(d.rglob("*"))}


def _processes_with(marker: str) -> list[int]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(int(pid))
            except OSError:
                pass
    return found


def test_good_and_wrong_programs(sandbox):
    assert run_programs(["assert sum([1, 2]) == 3", "assert 1 == 2", "import tempfile, os\n"
                         "p = os.path.join(tempfile.gettempdir(), 'x')\nopen(p, 'w').write('ok')\nassert open(p).read() == 'ok'"],
                        sandbox, workers=2) == [PASSED, "failed: AssertionError", PASSED]


def test_writing_deleting_rmtree_outside_fail_and_host_files_stay(sandbox, victim):
    before = _snapshot(victim)
    programs = [
        f"open({str(victim / 'new.txt')!r}, 'w').write('x')",
        f"open({str(victim / 'keep.txt')!r}, 'w').write('gone')",
        f"import os\nos.remove({str(victim / 'keep.txt')!r})",
        f"import shutil\nshutil.rmtree({str(victim)!r})",
        f"import os\nos.rename({str(victim / 'keep.txt')!r}, {str(victim / 'moved.txt')!r})",
        "open(__import__('os').path.expanduser('~/.bashrc_easylemur'), 'w')",  # HOME is the private /tmp
    ]
    results = run_programs(programs, sandbox, workers=3)
    assert all(r.startswith("failed") for r in results[:5]), results
    assert _snapshot(victim) == before
    assert not Path(os.path.expanduser("~/.bashrc_easylemur")).exists()


def test_endless_loop_times_out_and_huge_allocation_fails(sandbox):
    loop, alloc = run_programs(["while True:\n    pass", "b = bytearray(4 << 30)\nb[-1] = 1"], sandbox, workers=2)
    assert loop == TIMED_OUT
    assert alloc == "failed: MemoryError"


def test_no_network_to_a_host_listener(sandbox):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.setblocking(False)
    port = listener.getsockname()[1]
    try:
        [result] = run_programs([f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).send(b'hi')"],
                                sandbox)
        assert result.startswith("failed"), result
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody ever connected
    finally:
        listener.close()


def test_fork_storm_and_detached_child_leave_no_process(sandbox, victim):
    storm_marker = f"91.{uuid.uuid4().int % 10**8}"
    late_marker = f"0.8{uuid.uuid4().int % 10**6}"
    storm = ("import os\nwhile True:\n    try:\n        if os.fork() == 0:\n"
             f"            os.execv('/bin/sleep', ['sleep', {storm_marker!r}])\n    except OSError:\n        pass")
    detached = ("import subprocess\n"
                f"subprocess.Popen(['/bin/sh', '-c', 'sleep {late_marker}; echo late > {victim / 'late.txt'}'], "
                "start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)\n"
                "assert False, 'wrong answer, child left running'")
    before = _snapshot(victim)
    results = run_programs([storm, detached], sandbox, workers=2)
    assert results == [TIMED_OUT, "failed: AssertionError"]
    assert _processes_with(storm_marker) == [] and _processes_with(late_marker) == []
    time.sleep(1.0)  # past the detached child's sleep: had it survived, it would have written now
    assert _snapshot(victim) == before


def test_missing_bwrap_is_refused_with_install_hint(tmp_path):
    with pytest.raises(SandboxUnavailable, match="apt-get install -y bubblewrap"):
        Sandbox(bwrap=str(tmp_path / "no-bwrap")).check()


def test_unsafe_mode_still_times_out(tmp_path):
    sb = Sandbox(timeout=1.0, unsafe_no_sandbox=True)
    with pytest.warns(UserWarning, match="WITHOUT a sandbox"):
        sb.check()
    assert sb.python == sys.executable
    assert run_programs(["assert True", "while True: pass"], sb, workers=2) == [PASSED, TIMED_OUT]
