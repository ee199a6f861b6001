"""Hostile generated code run through the evaluation sandbox: it fails, the host's files stay
as they were, no socket is reached, no process is left behind, nothing of the host's environment
or files is visible, the tmpfs mounts are capped, and honest results cross the checker's pipe
intact."""

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
import json
import uuid
import warnings
from pathlib import Path

import pytest

from easylemur.errors import run_cli
from easylemur.eval.cli import main
from easylemur.eval.sandbox import PASSED, PYTHON, TIMED_OUT, Job, Program, Sandbox, SandboxUnavailable, run_programs

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


@pytest.mark.slow
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


@pytest.fixture
def canaries(monkeypatch):
    """A secret in the eval process's environment and in a file under its working directory
    (the checkout), where the old sandbox let a program read both."""
    secret = f"canary{uuid.uuid4().hex}"
    monkeypatch.setenv("EASYLEMUR_CANARY", secret)
    path = Path.cwd() / f".easylemur-canary-{uuid.uuid4().hex}"
    path.write_text(secret)
    # a host process started with the secret in its environment, as a token would be
    holder = subprocess.Popen(["sleep", "60"], env=dict(os.environ))
    try:
        yield secret, path
    finally:
        holder.kill()
        holder.wait()
        path.unlink()


def _leak_probes(path: Path) -> list[str]:
    """Programs that fail when they find something of the host's."""
    return [
        # every process's environment, pid 1 (the checker) included
        "import os\nfound = []\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n        try:\n"
        "            data = open('/proc/%s/environ' % p, 'rb').read()\n        except OSError:\n            continue\n"
        "        if b'EASYLEMUR_CANARY' in data:\n            found.append(p)\nassert not found, found",
        # the canary file under the host's working directory
        f"try:\n    data = open({str(path)!r}).read()\nexcept OSError:\n    data = ''\nassert 'canary' not in data",
        f"import os\nassert not [d for d in ('/work', '/home', '/root', {str(Path.cwd())!r}, {str(Path.home())!r}) "
        "if os.path.exists(d)]",
        "import os\nassert 'EASYLEMUR_CANARY' not in os.environ and os.path.expanduser('~') == os.environ['HOME']\n"
        "assert not [f for f in os.listdir(os.environ['HOME']) if 'canary' in f]",
    ]


def test_program_sees_no_host_environment_files_or_processes(sandbox, canaries):
    secret, path = canaries
    probes = _leak_probes(path)
    # the interpreter and its standard library are there, read-only
    sees_stdlib = ("import os, json\nassert os.path.isfile(os.__file__)\ntry:\n    open(os.__file__, 'a')\n"
                   "except OSError:\n    pass\nelse:\n    raise AssertionError('writable')")
    assert run_programs(probes + [sees_stdlib], sandbox, workers=2) == [PASSED] * (len(probes) + 1)
    # the same probes find the canaries when nothing confines them: they do look
    unsafe = Sandbox(timeout=5.0, unsafe_no_sandbox=True)
    with pytest.warns(UserWarning, match="WITHOUT a sandbox"):
        unsafe.check()
    assert run_programs(probes[:2], unsafe, workers=2) == ["failed: AssertionError"] * 2


def test_canaries_never_reach_results(tmp_path, capsys, canaries):
    """What a program prints or raises never becomes a result, even where it could read the secret."""
    secret, path = canaries
    grab = (f"    import os, sys\n    s = os.environ.get('EASYLEMUR_CANARY', '')\n    for p in os.listdir('/proc'):\n"
            f"        try:\n            s += open('/proc/%s/environ' % p).read()\n        except Exception:\n            pass\n"
            f"    try:\n        s += open({str(path)!r}).read()\n    except OSError:\n        pass\n"
            f"    s = ''.join(c for c in s if c.isalnum())\n")
    completions = [grab + "    sys.stderr.write('bwrap: ' + s + '\\n')\n    sys.exit(1)\n",
                   grab + "    raise ValueError(s)\n",
                   grab + "    raise type(s or 'nothing', (Exception,), {})()\n",
                   grab + "    return s\n"]
    samples = tmp_path / "s.jsonl"
    samples.write_text("".join(json.dumps({"task_id": "HumanEval/0", "completion": c}) + "\n" for c in completions))
    for name, extra in (("sandboxed", []), ("unsafe", ["--unsafe-no-sandbox"])):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert run_cli(main, ["humaneval", "--samples", str(samples), "--out", str(tmp_path / name), *extra]) == 0
        text = (tmp_path / name / "results.jsonl").read_text()
        assert secret not in text and "bwrap" not in text, text
        assert [json.loads(l)["result"] for l in text.splitlines()] == [
            "failed: SystemExit", "failed: ValueError",
            "failed: the candidate raised an exception of its own class", "failed: AssertionError"]
    capsys.readouterr()


def test_tmpfs_mounts_are_capped_within_the_memory_budget():
    sb = Sandbox(timeout=5.0, memory_bytes=1 << 30, tmp_bytes=8 << 20, shm_bytes=4 << 20, file_bytes=2 << 20)
    fill = "for i in range(64):\n    with open('{d}/f%d' % i, 'wb') as f:\n        f.write(b'x' * (1 << 20))"
    fits = "for i in range(2):\n    with open('/dev/shm/f%d' % i, 'wb') as f:\n        f.write(b'x' * (1 << 20))"
    limit = f"import resource\nassert resource.getrlimit(resource.RLIMIT_AS)[0] == {(1 << 30) - (12 << 20)}"
    assert run_programs([fill.format(d="/dev/shm"), fill.format(d="/tmp"), fits, limit], sb, workers=2) == [
        "failed: OSError", "failed: OSError", PASSED, PASSED]


def test_results_cross_the_checker_pipe_as_they_are(sandbox):
    """Honest candidates pass: exact types, NaN, big ints, mutations of arguments, generators,
    objects passed back in, and exceptions a test expects; and a call that never returns still
    times out."""
    code = ("def f(xs, *, scale=1):\n    xs.append(len(xs))\n"
            "    return (1, [2.5, -0.0], {3, 4}, {'b': 1, 'a': 2}, 10 ** 40, b'\\x00', 1j, None, True, float('nan'))\n"
            "def g(n):\n    yield from range(n)\n"
            "class P:\n    def __init__(self, v):\n        self.v = v\n"
            "def total(ps):\n    return sum(p.v for p in ps)\n"
            "def bad(x):\n    raise ValueError(x)\n"
            "def forever():\n    while True:\n        pass\n")
    tests = ("xs = [7]\nr = f(xs, scale=2)\nassert xs == [7, 1]\n"
             "assert r[:9] == (1, [2.5, -0.0], {3, 4}, {'b': 1, 'a': 2}, 10 ** 40, b'\\x00', 1j, None, True)\n"
             "assert type(r) is tuple and type(r[1]) is list and list(r[3]) == ['b', 'a'] and r[9] != r[9]\n"
             "assert str(r[1][1]) == '-0.0' and r[8] is True\n"
             "assert list(g(3)) == [0, 1, 2] and P(1) != P(1)\nassert total([P(2), P(3)]) == 5\n"
             "try:\n    bad(1)\nexcept ValueError:\n    pass\nelse:\n    raise AssertionError\n")
    # the checker (pid 1) outlives every signal the candidate sends it
    kill = ("import os\ndef f():\n    for s in (2, 15, 9, 1, 3, 10):\n        try:\n            os.kill(1, s)\n"
            "        except OSError:\n            pass\n    return 1\n")
    jobs = [Job(code=code, tests=tests), Job(code=code, tests="forever()"), Job(code=code, tests="assert P(1)"),
            Job(code=kill, tests="assert f() == 1\nimport time\ntime.sleep(0.2)")]
    assert run_programs(jobs, sandbox, workers=2) == [PASSED, TIMED_OUT, "failed: TypeError", PASSED]


# Forks 8 children one after the other, each touching 150 MiB once the one before has touched
# its pages or died; then prints how many are alive with their pages touched (all at once), and
# how many ever touched them, and holds a moment longer for the test to count from outside.
_FORK_AND_TOUCH = """
import os, time
N, SIZE = 8, 150 << 20
r, w = os.pipe()
release_r, release_w = os.pipe()
touched = []
for i in range(N):
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        b = bytearray(SIZE)
        b[::4096] = b"\\1" * len(range(0, SIZE, 4096))  # writes every page
        os.write(w, b"+")
        os.read(release_r, 1)  # holds the pages until the parent has counted
        os._exit(0)
    while True:  # until this child has touched its pages or was killed
        if os.waitpid(pid, os.WNOHANG)[0]:
            break
        if os.read(r, 1) if __import__("select").select([r], [], [], 0.01)[0] else b"":
            touched.append(pid)
            break
holding = [pid for pid in touched if os.waitpid(pid, os.WNOHANG)[0] == 0]
print("holding", len(holding), "touched", len(touched), "of", N, flush=True)
time.sleep(0.3)
os.close(release_w)
"""


def _holding(pid: int) -> bool:
    """Whether `pid` is alive and not on its way out: neither a zombie nor a process the kernel
    has already killed (SIGKILL pending, or exiting: PF_EXITING), whose pages it is taking back."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        status = Path(f"/proc/{pid}/status").read_text()
    except (OSError, IndexError):
        return False
    pending = 0
    for line in status.splitlines():
        if line.startswith(("SigPnd:", "ShdPnd:")):
            pending |= int(line.split()[1], 16)
    return fields[0] not in ("Z", "X") and not int(fields[6]) & 0x4 and not pending & (1 << 8)


def _descendants(skip: frozenset = frozenset()) -> set[int]:
    """This process's descendants, leaving out the processes in `skip` and all below them."""
    parent = {}
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                parent[int(pid)] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                pass
    mine, todo = set(), [os.getpid()]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parent.items() if pp == p and c not in mine and c not in skip]
        mine.update(kids)
        todo += kids
    return mine


def _anon_bytes_of_descendants(before: frozenset) -> tuple[int, list]:
    """The anonymous memory of this process's descendants (the sandbox's processes) held at once,
    each shared page counted once (Pss_Anon: copy-on-write pages a fork shares are split between
    them), and (MiB, pid, command) of each. Processes that were already there (`before`: servers
    an earlier test of this worker started for the session, such as the GCS emulator) and theirs
    are not the sandbox's and are left out. A scan of /proc is not one instant: a process read,
    then killed before the scan ended (the kernel enforcing the budget while the next child touches
    its pages) is left out, as is one still giving its pages back then, so the sum is of processes
    holding their pages together at the scan's end (their pages only grow until they are killed)."""
    held = {}
    for pid in _descendants(before):
        try:
            rollup = Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()
            command = Path(f"/proc/{pid}/cmdline").read_bytes()[:60].replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue  # gone, or the non-dumpable runner (a few MiB)
        field = "Pss_Anon:" if any(l.startswith("Pss_Anon:") for l in rollup) else "Pss:"
        held[pid] = (sum(int(l.split()[1]) << 10 for l in rollup if l.startswith(field)), command)
    counted = sorted(((n, pid, command) for pid, (n, command) in held.items() if _holding(pid)), reverse=True)
    return sum(n for n, _, _ in counted), [(n >> 20, pid, command) for n, pid, command in counted]


def _memory_cgroup_possible() -> bool:
    """Whether this process can make a memory cgroup at the top of the hierarchy (as root, where
    /sys/fs/cgroup is writable and cgroup v2's root gives the memory controller to its children)."""
    if os.geteuid() != 0:
        return False
    v2 = Path("/sys/fs/cgroup/cgroup.subtree_control")
    if v2.exists():
        return os.access(v2.parent, os.W_OK) and "memory" in v2.read_text().split()
    return os.access("/sys/fs/cgroup/memory", os.W_OK)


def test_a_programs_processes_together_stay_within_the_memory_budget():
    """8 children x 150 MiB under a 256 MiB budget: with a memory cgroup the program's processes
    together hold at most the budget (the kernel kills children past it); without one, the stated
    bound (max_processes x RLIMIT_AS plus the tmpfs caps) holds. Counted by the program (children
    alive with their pages touched, all at once) and from outside (their anonymous memory). Without
    the cgroup, 8 children hold their pages together: 1.2 GiB."""
    sb = Sandbox(timeout=30.0, memory_bytes=256 << 20, max_processes=16)
    scope = sb.memory_scope()
    if _memory_cgroup_possible():
        assert scope.startswith("cgroup"), "this process can make a memory cgroup: the sandbox should use one"
    bound = sb.memory_bytes if scope.startswith("cgroup") else (
        sb.max_processes * sb.address_space_bytes() + sb.tmp_bytes + sb.shm_bytes)
    program = Program(files=(("touch.py", _FORK_AND_TOUCH),), steps=((PYTHON, "-I", "-S", "touch.py"),))
    done, peak, at_peak, before = {}, 0, [], frozenset(_descendants())
    runner = threading.Thread(target=lambda: done.update(result=sb.run_program(program)))
    runner.start()
    while runner.is_alive():
        held, who = _anon_bytes_of_descendants(before)
        if held > peak:
            peak, at_peak = held, who
        time.sleep(0.01)
    runner.join()
    result = done["result"]
    assert result.passed, result
    holding, touched = int(result.output.split()[1]), int(result.output.split()[3])
    # a child the kernel is killing can still be alive (not yet reapable) beside the next child's
    # new pages, seen from inside as from outside, so one child's worth over the bound is allowed
    # on both counts (unbounded: 8 children, 1.2 GiB)
    assert touched >= 1 and holding * (150 << 20) <= bound + (150 << 20), (scope, result.output)
    assert peak <= bound + (150 << 20), (scope, peak >> 20, at_peak[:12])


def test_the_sandbox_programs_are_standard_library_modules_passed_as_text():
    """The launcher, a Job's checker and candidate process, and a Program's runner are modules of
    sandbox/programs/; what the interpreter gets by `-c` is each file's text, with the shared
    modules' text (the wire: checker and candidate; the pid-1 prelude: checker and runner) in
    place of their import of it: it compiles and imports only the standard library (numpy
    lazily, from the job's libraries), nothing of easylemur."""
    import ast

    from easylemur.eval.sandbox import programs

    shared = {m: (programs.HERE / f"{m}.py").read_text() for m in programs.SHARED}
    texts = {"launcher": programs.LAUNCHER, "checker": programs.CHECKER, "candidate": programs.CANDIDATE,
             "runner": programs.RUNNER}
    carries = {"launcher": set(), "checker": {"wire", "prelude"}, "candidate": {"wire"}, "runner": {"prelude"}}
    for name, text in texts.items():
        source = (programs.HERE / f"{name}.py").read_text()
        assert ast.get_docstring(ast.parse(source)), name  # what it is, where it runs
        for module, module_text in shared.items():
            assert (module_text in text) == (module in carries[name]), (name, module)
            assert (f"programs.{module} import" in source) == (module in carries[name]), (name, module)
        imported = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                imported.add(node.module.split(".")[0])
        assert imported - set(sys.stdlib_module_names) <= {"numpy"}, (name, imported)


def test_the_wire_rebuilds_plain_data_with_its_own_types():
    """The wire's encoding read back as the checker reads it (a literal of lists, str, int, bool
    and None) gives values of the same exact types, in the host's own process; an object that is
    not plain data, a subclass with a forged `__eq__` included, becomes a handle."""
    import ast
    from array import array
    from collections import Counter, OrderedDict, defaultdict, deque, namedtuple
    from decimal import Decimal
    from fractions import Fraction

    import numpy as np

    from easylemur.eval.sandbox.programs import wire

    kept = []

    def other(v):
        kept.append(v)
        return ["h", len(kept) - 1]

    def across(v):
        return wire.dec(ast.literal_eval(repr(wire.enc(v, other))), lambda i, tag: ("handle", i, tag))

    point = namedtuple("Point", "x y")
    values = [None, True, 10 ** 40, -0.0, 1 + 2j, "é", b"\x00", bytearray(b"x"), range(1, 9, 2), [1, (2,)],
              {3, 4}, frozenset({5}), {"b": 1, "a": 2}, Counter("abca"), OrderedDict(b=1, a=2), deque([1, 2], maxlen=3),
              Fraction(1, 3), Decimal("1.10"), array("i", [1, 2]), {1: 2}.keys(), {1: 2}.items()]
    for v in values:
        out = across(v)
        assert type(out) is type(v) and out == v and repr(out) == repr(v), (v, out)
    dd = across(defaultdict(list, a=[1]))
    assert type(dd) is defaultdict and dd.default_factory is list and dd == {"a": [1]}
    p = across(point(1, 2))
    assert type(p) is not point and type(p).__name__ == "Point" and p._fields == ("x", "y") and tuple(p) == (1, 2)
    nan = across(float("nan"))
    assert type(nan) is float and nan != nan
    for a in (np.arange(6, dtype=np.int16).reshape(2, 3), np.array(["ab", "c"]), np.float32(1.5), np.bool_(True)):
        out = across(a)
        assert type(out) is type(a) and out.dtype == a.dtype and np.array_equal(out, a), (a, out)

    class Always(int):
        def __eq__(self, other):
            return True

        __hash__ = int.__hash__

    assert across(Always(1)) == ("handle", len(kept) - 1, "h") and type(kept[-1]) is Always
    assert across(np.array([object()])) == ("handle", len(kept) - 1, "h")
