"""The trusted checker of a sandbox `Job`: runs the dataset's tests against the candidate's code
and writes the verdict.

Where it runs: inside the sandbox, as its pid 1 (`bwrap --as-pid-1`), with the sandbox's uid
(the same uid as the candidate). As pid 1 with SIGINT ignored and no other handler, no signal
from inside the namespace reaches it. It reads the job and the harness's random token from a
memfd, makes itself non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`, checked: the candidate can
neither ptrace it nor open its /proc files), closes every descriptor but the verdict pipe, and
only then starts the candidate's process (`candidate.py`, with `posix_spawn`, an explicit
environment and /dev/null as its standard streams). It runs the setup and the tests itself,
with the names the tests take from the candidate bound to proxies that call over the wire;
every reply is parsed by hand and rebuilt with the checker's own classes. A pass is the line
"passed <token>" on the verdict pipe, which no other process in the sandbox holds; else
"failed <reason>" with a reason of the checker's own words.

Why a separate program: the tests and the verdict must live in a process the candidate's code
cannot reach (the candidate runs in its own process, `candidate.py`); and it runs in the
sandbox's interpreter with `-I -S -B` (the standard library only; numpy, when the job binds it,
only to rebuild a numpy value).

How it is passed in: `programs/__init__.py` reads this file once, puts the text of `wire.py` and
`prelude.py` in place of the two `from easylemur.eval.sandbox.programs... import (...)` statements
below, and the sandbox passes the result to `python -I -S -B -c TEXT JOB_FD RESULT_FD` (in the
sandbox's argv, never in a file the candidate could write). The job (marshal): code, setup,
tests, entry_point, server (the candidate process's program text), path, libpath, token, workdir.
"""

import _ast
import builtins
import marshal
import os
import signal
import sys
from collections import Counter, OrderedDict, defaultdict, deque

from easylemur.eval.sandbox.programs.prelude import (
    keep_only,
    read_job,
    undumpable,
)
from easylemur.eval.sandbox.programs.wire import (
    THREAD_VARS,
    dec,
    enc,
    parse,
    recv_bytes,
    send_bytes,
)

job_fd, result_fd = int(sys.argv[1]), int(sys.argv[2])
child = None
# As pid 1 of its namespace, the checker gets only the signals it handles from the candidate:
# with SIGINT ignored too, none.
signal.signal(signal.SIGINT, signal.SIG_IGN)


def ident(text):
    text = "".join(c if c.isascii() and (c.isalnum() or c == "_") else "_" for c in str(text))[:60]
    return text if text[:1].isalpha() or text[:1] == "_" else "unnamed"


def verdict(text):
    if child is not None:  # the unsafe mode has no namespace to end it
        try:
            os.kill(child, 9)
        except OSError:
            pass
    os.write(result_fd, text.encode("ascii")[:4000])
    os.close(result_fd)
    os._exit(0)


class Failure(Exception):
    "A failure whose reason the checker words itself."


class CandidateError(Exception):
    "An exception of the candidate's that is not a builtin one."


if not undumpable():
    verdict("failed harness cannot make the checker non dumpable")
job, token = read_job(job_fd)
LIBPATH = job["libpath"]
sys.path += [p for p in LIBPATH.split(":") if p]  # the job's libraries, after the standard library
# Only the verdict pipe and the standard streams stay open; none of them reach the candidate.
keep_only((result_fd,))


remotes = {}
to_child = from_child = -1
MUTABLE = (list, bytearray, dict, Counter, OrderedDict, defaultdict, set, deque)


class Remote:
    "An object that stays in the candidate's process; equal only to itself."
    __slots__ = ("_id", "__weakref__")

    def __call__(self, *args, **kwargs):
        args = list(args)
        reply = rpc(["call", self._id, [enc(a, refuse) for a in args], [[k, enc(v, refuse)] for k, v in kwargs.items()]])
        for i, after in enumerate(reply[2] if len(reply) > 2 else []):
            a = args[i] if i < len(args) else None
            if type(a) in MUTABLE:  # the candidate's changes to a list, dict, set, ... argument
                new = decode(after)
                if type(new) is type(a):
                    if type(a) in (list, bytearray):
                        a[:] = new
                    elif type(a) is deque:
                        a.clear()
                        a.extend(new)
                    else:
                        a.clear()
                        a.update(new)  # into an empty Counter, update sets the counts
        return decode(reply[1])

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return decode(rpc(["getattr", self._id, name])[1])

    def __bool__(self):
        raise TypeError("the candidate's object has no truth value in the checker")

    def __repr__(self):
        return "<candidate object>"


class RemoteIter:
    "An iterator that stays in the candidate's process: its items come as the tests take them."
    __slots__ = ("_id", "_items", "_end", "_ask", "__weakref__")

    def __iter__(self):
        return self

    def __next__(self):
        if not self._items and self._end is None:
            reply = rpc(["next", self._id, self._ask])
            self._ask = min(2 * self._ask, 4096)  # one item first: an endless generator is read as far as needed
            if len(reply) != 3 or type(reply[1]) is not list:
                raise Failure("malformed reply")
            self._items = deque(decode(x) for x in reply[1])
            self._end = reply[2]
            if self._end is not None and (type(self._end) is not list or not self._end):
                raise Failure("malformed reply")
        if self._items:
            return self._items.popleft()
        if self._end == ["stop"]:
            raise StopIteration
        candidate_raised(self._end)

    def __bool__(self):
        return True

    def __repr__(self):
        return "<candidate iterator>"


def remote(i, tag):
    if (i, tag) not in remotes:
        r = object.__new__(Remote if tag == "h" else RemoteIter)
        object.__setattr__(r, "_id", i)
        if tag == "g":
            r._items, r._end, r._ask = deque(), None, 1
        remotes[(i, tag)] = r
    return remotes[(i, tag)]


def decode(v):
    "A value of the candidate's, rebuilt with the checker's own types; a value it cannot rebuild is a failure."
    try:
        return dec(v, remote)
    except (Failure, CandidateError):
        raise
    except Exception:
        raise Failure("malformed reply")


def refuse(v):
    if type(v) is Remote or type(v) is RemoteIter:
        return ["h", v._id]
    raise TypeError("cannot pass a %s to the candidate" % type(v).__name__)


def candidate_raised(reply):
    "Raises the builtin exception the candidate named (so `except ValueError` in a test works), else a failure."
    name = ident(reply[1] if len(reply) > 1 else "")
    cls = getattr(builtins, name, None)
    if isinstance(cls, type) and issubclass(cls, Exception) and not issubclass(cls, (Failure, CandidateError)):
        try:
            e = cls("raised by the candidate")
        except Exception:
            e = None
        if isinstance(e, cls):
            raise e
    raise CandidateError(name)


def rpc(req):
    try:
        send_bytes(to_child, marshal.dumps(req))
        data = recv_bytes(from_child)
    except (EOFError, OSError):
        raise Failure("exited before the tests finished")
    except OverflowError:
        raise Failure("reply too large")
    try:
        reply = parse(data.decode("ascii"))
    except (ValueError, SyntaxError, MemoryError, RecursionError, UnicodeDecodeError):
        raise Failure("malformed reply")
    if type(reply) is not list or not reply or reply[0] not in ("ok", "raise"):
        raise Failure("malformed reply")
    if reply[0] == "raise":
        candidate_raised(reply)
    return reply


def walk(node):
    todo = [node]
    while todo:
        node = todo.pop()
        yield node
        for field in node._fields:
            value = getattr(node, field, None)
            if isinstance(value, list):
                todo.extend(x for x in value if isinstance(x, _ast.AST))
            elif isinstance(value, _ast.AST):
                todo.append(value)


def free_names(src):
    "Names the tests read but never bind; the names they call; the names they take attributes of."
    loads, bound, called, bases = set(), set(), set(), set()
    for node in walk(compile(src, "<tests>", "exec", _ast.PyCF_ONLY_AST)):
        t = type(node)
        if t is _ast.Name:
            (loads if type(node.ctx) is _ast.Load else bound).add(node.id)
        elif t in (_ast.FunctionDef, _ast.AsyncFunctionDef, _ast.ClassDef):
            bound.add(node.name)
        elif t is _ast.arg:
            bound.add(node.arg)
        elif t is _ast.alias:
            bound.add((node.asname or node.name).split(".")[0])
        elif t is _ast.ExceptHandler and node.name:
            bound.add(node.name)
        elif t is _ast.Call and type(node.func) is _ast.Name:
            called.add(node.func.id)
        elif t is _ast.Attribute and type(node.value) is _ast.Name:
            bases.add(node.value.id)
    return loads - bound, called, bases


try:
    # The candidate's process starts first, so its start-up overlaps the checker's setup.
    r1, to_child = os.pipe()
    from_child, w2 = os.pipe()
    os.set_inheritable(r1, True)
    os.set_inheritable(w2, True)
    env = {"PATH": job["path"], "HOME": job["workdir"], "LANG": "C.UTF-8"}
    if LIBPATH:
        env.update((var, "1") for var in THREAD_VARS)  # numpy's BLAS: one thread, within the memory budget
    child = os.posix_spawn(sys.executable, [sys.executable, "-I", "-S", "-B", "-c", job["server"], str(r1), str(w2),
                                            job["workdir"], LIBPATH], env,
                           file_actions=[(os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0),
                                         (os.POSIX_SPAWN_OPEN, 1, "/dev/null", os.O_WRONLY, 0),
                                         (os.POSIX_SPAWN_DUP2, 1, 2)],
                           setsigdef=(signal.SIGINT,))
    os.close(r1)
    os.close(w2)

    ns = {"__name__": "checker", "__builtins__": builtins}
    try:
        exec(compile(job["setup"], "<setup>", "exec"), ns)
    except Exception as e:
        raise Failure("test setup raised " + ident(type(e).__name__))
    entry = job["entry_point"]
    free, called, bases = free_names(job["tests"])
    wanted = []
    for name in sorted(free):
        if name in ns or hasattr(builtins, name):
            continue
        if name in bases and name not in called:
            # e.g. math.isclose in a test: the checker's own module (-I -S: only the standard
            # library is importable), not whatever the candidate bound to that name
            try:
                ns[name] = __import__(name)
                continue
            except ImportError:
                pass
        wanted.append(name)
    if entry:
        ns.pop(entry, None)  # the prompt's stub: the candidate's function replaces it
        wanted.append(entry)

    rpc(["load", job["code"]])
    if wanted:
        values = rpc(["get", wanted])[1]
        if type(values) is not list or len(values) != len(wanted):
            raise Failure("malformed reply")
        for name, value in zip(wanted, values):
            if value is not None:
                ns[name] = decode(value)
    if entry and entry not in ns:
        raise Failure("NameError")
    exec(compile(job["tests"], "<tests>", "exec"), ns)
    if entry:
        ns["check"](ns[entry])
except Failure as e:
    verdict("failed " + str(e))
except CandidateError as e:
    # Only a builtin exception's name: the candidate's own class names could carry what it read.
    name = str(e)
    cls = getattr(builtins, name, None)
    ok = isinstance(cls, type) and issubclass(cls, BaseException)
    verdict("failed " + (name if ok else "the candidate raised an exception of its own class"))
except BaseException as e:
    verdict("failed " + ident(type(e).__name__))
verdict("passed " + token)
