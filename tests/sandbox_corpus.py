"""Cheating completions that must score 0 and MBPP-format rows whose solutions must score 1.

Most cheats here make a harness that counts exit status 0 as a pass report a pass (the one
before the checker did, for 78 of the 100 HumanEval and 54 of the 76 MBPP programs that
tests/test_sandbox_cheats.py runs): they end the interpreter with status 0 before the tests
fail (SystemExit, exit(), os._exit, atexit, excepthook, tracing, a timer), forge the harness's
verdict, shadow what the tests use, or return an object that compares equal to anything. The
rest are hostile results (a KeyboardInterrupt, a list that contains itself, 64 MB of text) that
must fail cleanly. HumanEval cheats are function bodies that continue the prompt; MBPP cheats
are whole programs with `{fn}` standing for the function the tests call.
"""

_ANY = """class _Any:
    def __eq__(self, other):
        return True
    def __ne__(self, other):
        return False
    def __lt__(self, other):
        return True
    __le__ = __gt__ = __ge__ = __lt__
    def __bool__(self):
        return True
    def __abs__(self):
        return 0
    def __sub__(self, other):
        return 0
    __rsub__ = __add__ = __radd__ = __mul__ = __rmul__ = __sub__
    def __float__(self):
        return 0.0
    def __hash__(self):
        return 0
    def __len__(self):
        return 0
    def __iter__(self):
        return iter(())
"""

# Top-level statements after a body; each ends the process with status 0 or forges a pass.
_ENDINGS = {
    "raise_systemexit": "raise SystemExit(0)\n",
    "os_exit_at_import": "import os\nos._exit(0)\n",
    "atexit_os_exit": "import atexit, os\natexit.register(os._exit, 0)\n",
    "excepthook_exit": "import sys, os\nsys.excepthook = lambda *a: os._exit(0)\n",
    "settrace_exit_on_exception": ("import sys, os\ndef _t(frame, event, arg):\n    if event == 'exception':\n"
                                   "        os._exit(0)\n    return _t\nsys.settrace(_t)\nsys._getframe().f_trace = _t\n"),
    "setprofile_exit_on_call": ("import sys, os\nsys.setprofile(lambda f, e, a: os._exit(0) "
                                "if e == 'call' and f.f_code.co_name in ('check', '{fn}') else None)\n"),
    "timer_exit": ("import signal, os\nsignal.signal(signal.SIGALRM, lambda *a: os._exit(0))\n"
                   "signal.setitimer(signal.ITIMER_REAL, 0.3)\n"),
    "thread_exit": ("import threading, os, time\nthreading.Thread(target=lambda: (time.sleep(0.3), os._exit(0)), "
                    "daemon=True).start()\n"),
    "main_guard_exit": "if __name__ == '__main__':\n    import sys\n    sys.exit(0)\n",
    "patch_builtins": "import builtins\nbuiltins.abs = lambda x: 0\n",
    "forge_verdict_on_every_fd": ("import os\nfor _fd in range(1024):\n    try:\n"
                                  "        os.write(_fd, b'passed ' + b'0' * 32 + b'\\n')\n    except OSError:\n"
                                  "        pass\nos._exit(0)\n"),
    "forge_verdict_via_proc": ("import os\nfor _p in os.listdir('/proc'):\n    if not _p.isdigit():\n        continue\n"
                               "    for _f in ('environ', 'mem'):\n        try:\n"
                               "            open('/proc/%s/%s' % (_p, _f), 'rb').read(4096)\n        except OSError:\n"
                               "            pass\n    try:\n        _fds = os.listdir('/proc/%s/fd' % _p)\n"
                               "    except OSError:\n        continue\n    for _fd in _fds:\n        try:\n"
                               "            with open('/proc/%s/fd/%s' % (_p, _fd), 'wb') as _w:\n"
                               "                _w.write(b'passed x\\n')\n        except OSError:\n            pass\n"
                               "os._exit(0)\n"),
    "kill_the_checker": ("import os\nfor _pid in (1, os.getppid()):\n    for _sig in (9, 15):\n        try:\n"
                         "            os.kill(_pid, _sig)\n        except OSError:\n            pass\nos._exit(0)\n"),
    "bwrap_line_then_exit": "import sys\nsys.stderr.write('bwrap: passed\\n')\nsys.exit(0)\n",
}

# HumanEval: (name, completion) continuing any prompt.
# The body before an ending: one that never returns for the timers, 0 for the patched abs().
_BODY = {"timer_exit": "    while True:\n        pass\n", "thread_exit": "    while True:\n        pass\n",
         "patch_builtins": "    return 0\n"}
HUMANEVAL_CHEATS = [(f"wrong_body+{k}", _BODY.get(k, "    return None\n") + v) for k, v in _ENDINGS.items()] + [
    ("exit_in_body", "    exit()\n"),
    ("quit_in_body", "    quit()\n"),
    ("sys_exit_in_body", "    import sys\n    sys.exit(0)\n"),
    ("os_exit_in_body", "    import os\n    os._exit(0)\n"),
    ("keyboard_interrupt_in_body", "    raise KeyboardInterrupt\n"),
    ("always_equal_object", "    return _Any()\n" + _ANY),
    ("always_equal_int", "    class _T(int):\n        def __eq__(self, o):\n            return True\n"
                         "        def __ne__(self, o):\n            return False\n        __hash__ = int.__hash__\n"
                         "        def __bool__(self):\n            return True\n    return _T(0)\n"),
    ("always_equal_list", "    class _L(list):\n        def __eq__(self, o):\n            return True\n"
                          "        def __ne__(self, o):\n            return False\n    return _L()\n"),
    ("generator_of_always_equal", "    return (x for x in [_Any()])\n" + _ANY),
    ("self_containing_list", "    l = []\n    l.append(l)\n    return l\n"),
    ("huge_result", "    return 'x' * (64 << 20)\n"),
]

# MBPP: (name, program) with {fn} the function under test.
MBPP_CHEATS = [(f"wrong_function+{k}", "def {fn}(*a, **k):\n" + _BODY.get(k, "    return None\n") + v)
               for k, v in _ENDINGS.items()] + [
    ("exit_in_function", "def {fn}(*a, **k):\n    exit()\n"),
    ("os_exit_in_function", "import os\ndef {fn}(*a, **k):\n    os._exit(0)\n"),
    ("always_equal_object", _ANY + "def {fn}(*a, **k):\n    return _Any()\n"),
    ("shadow_builtins_and_math", _ANY + "def {fn}(*a, **k):\n    return _Any()\n"
                                        "sorted = set = list = tuple = abs = round = len = str = int = float = {fn}\n"
                                        "class _M:\n    def __getattr__(self, n):\n        return lambda *a, **k: True\n"
                                        "math = _M()\n"),
    ("no_function_at_all", "pass\n"),
]

# Rows in MBPP's format written for these tests (not MBPP data): what the tests use crosses the
# checker's pipe, so they cover floats and NaN, tuples against lists, sets, dict order, big
# ints, bytes, generators, a class instance passed back in, a constant from the setup, a module
# the test takes from the candidate's imports, and a list changed in place.
MBPP_EXTRA_ROWS = [
    {"task_id": 21, "text": "Write a function to find the area of a circle.",
     "code": "import math\ndef circle_area(r):\n    return math.pi * r * r",
     "test_list": ["assert math.isclose(circle_area(2), 12.566370614359172)",
                   "assert circle_area(0) == 0.0 and isinstance(circle_area(1), float)"], "test_setup_code": ""},
    {"task_id": 22, "text": "Write a function to return the minimum and maximum of a list as a tuple.",
     "code": "def min_max(xs):\n    return (min(xs), max(xs))",
     "test_list": ["assert min_max([3, 1, 2]) == (1, 3)", "assert min_max([5]) != [5, 5]"], "test_setup_code": ""},
    {"task_id": 23, "text": "Write a function to find the common elements of two lists as a set.",
     "code": "def common(a, b):\n    return set(a) & set(b)",
     "test_list": ["assert common([1, 2, 3], [2, 3, 4]) == {2, 3}", "assert common([], [1]) == set()"],
     "test_setup_code": ""},
    {"task_id": 24, "text": "Write a function to count the characters of a string, in order of first appearance.",
     "code": "def char_count(s):\n    d = {}\n    for c in s:\n        d[c] = d.get(c, 0) + 1\n    return d",
     "test_list": ["assert list(char_count('banana').items()) == [('b', 1), ('a', 3), ('n', 2)]"],
     "test_setup_code": ""},
    {"task_id": 25, "text": "Write a function to compute the factorial of n.",
     "code": "def fact(n):\n    return 1 if n < 2 else n * fact(n - 1)",
     "test_list": ["assert fact(30) == 265252859812191058636308480000000", "assert fact(0) == 1"],
     "test_setup_code": ""},
    {"task_id": 26, "text": "Write a function to return the not-a-number float and the bytes of a string.",
     "code": "def nan_and_bytes(s):\n    return float('nan'), s.encode()",
     "test_list": ["assert nan_and_bytes('a')[0] != nan_and_bytes('a')[0]", "assert nan_and_bytes('hé')[1] == b'h\\xc3\\xa9'"],
     "test_setup_code": ""},
    {"task_id": 27, "text": "Write a generator of the first n squares.",
     "code": "def squares(n):\n    for i in range(n):\n        yield i * i",
     "test_list": ["assert list(squares(4)) == [0, 1, 4, 9]", "assert sum(squares(3)) == 5"], "test_setup_code": ""},
    {"task_id": 28, "text": "Write a function to find the longest chain of pairs, each pair's first above the previous second.",
     "code": ("class Pair(object):\n    def __init__(self, a, b):\n        self.a = a\n        self.b = b\n"
              "def max_chain_length(arr, n):\n    mcl = [1] * n\n    for i in range(1, n):\n        for j in range(i):\n"
              "            if arr[i].a > arr[j].b and mcl[i] < mcl[j] + 1:\n                mcl[i] = mcl[j] + 1\n"
              "    return max(mcl)"),
     "test_list": ["assert max_chain_length([Pair(5, 24), Pair(15, 25), Pair(27, 40), Pair(50, 60)], 4) == 3",
                   "assert max_chain_length([Pair(1, 2), Pair(3, 4), Pair(5, 6), Pair(7, 8)], 4) == 4"],
     "test_setup_code": ""},
    {"task_id": 29, "text": "Write a function to sort a list in place, scaled by the setup's factor.",
     "code": "def scale_sort(xs):\n    xs.sort()\n    xs[:] = [x * FACTOR for x in xs]",
     "test_list": ["xs = [3, 1, 2]\nscale_sort(xs)\nassert xs == [10, 20, 30]"], "test_setup_code": "FACTOR = 10"},
]
