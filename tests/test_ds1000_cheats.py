"""DS-1000 judged outside the candidate's reach (the sealed program of ds1000.py): a corpus of
cheats that pass the official single-process evaluator (monkeypatched assertions, a swapped
np.testing module, test functions rewritten through the frames or given another `__code__`,
always-equal results and subclasses, the expected answer or its code read from frames, gc, disk
or memory, the expected image copied) and attempts on the seal itself (planted judge files, a
daemon, forged values, a hostile figure pickle) all score 0; and the values that cross (the
sandbox's wire, the figures' allow-list) are rebuilt faithfully here, in-process, and what is not
data is refused. The honest fixtures these problems come from, with their official verdicts,
are test_ds1000.py's (ROWS, EXTRA_ROWS, HONEST)."""

import ast
import json
import pickle
import shutil
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from easylemur.eval.benchmarks.ds1000 import (DS1000, MISSING, NOT_DATA, REASONS, TEST_FAILED, failure_counts,
                                              load_ds1000)
from easylemur.eval.benchmarks.ds1000_seal import common
from easylemur.eval.sandbox import PASSED, Sandbox, run_programs
from easylemur.eval.sandbox.programs import wire
from test_ds1000 import EXTRA_ROWS, MATPLOTLIB_LEGEND, NUMPY_RESHAPE, PANDAS_SUM, official_verdicts

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")

# ----------------------------------------------------------------------------- the cheats

# A wrong answer for NUMPY_RESHAPE (problem 0): what each cheat would need its trick to pass.
_WRONG_B = "B = A\n"
# The expected answers' code: found on disk or in this process's memory, it would solve every case.
_SOLVE_FROM_CONTEXT = r'''
import gc, os, types, numpy as np
fns = [o for o in gc.get_objects() if type(o) is types.FunctionType and o.__name__ == "generate_test_case"]
texts = []
for root in ("/tmp", "/dev/shm") if not fns else ():
    for d, _, names in os.walk(root):
        for n in names:
            try:
                texts.append(open(os.path.join(d, n), errors="ignore").read())
            except OSError:
                pass
try:
    mem = open("/proc/self/mem", "rb", 0)
    for line in open("/proc/self/maps").read().splitlines() if not fns else ():
        span, perms = line.split()[:2]
        lo, hi = (int(x, 16) for x in span.split("-"))
        if perms.startswith("rw") and hi - lo < 1 << 26:
            try:
                mem.seek(lo)
                texts.append(mem.read(hi - lo).decode("latin-1"))
            except (OSError, OverflowError, ValueError):
                pass
except OSError:
    pass
for text in texts:
    at = text.find("def generate_test_case")
    while at >= 0 and not fns:
        ns = {}
        try:  # each copy of this snippet's own text fails here; code_context's would not
            exec(text[text.rfind("import numpy", 0, at):text.find("exec_context", at)], ns)
            fns.append(ns["generate_test_case"])
        except BaseException:
            pass
        at = text.find("def generate_test_case", at + 1)
B = A
for fn in fns:
    for i in range(1, 6):
        try:
            (a, n), ans = fn(i)
        except BaseException:
            continue
        if np.array_equal(a, A) and n == ncol:
            B = ans
'''
NUMPY_CHEATS = {
    "np.testing patched": "import numpy as np\nnp.testing.assert_array_equal = lambda *a, **k: None\n" + _WRONG_B,
    "numpy.testing swapped in sys.modules": (
        "import sys, types, numpy\nfake = types.ModuleType('numpy.testing')\n"
        "fake.assert_array_equal = lambda *a, **k: None\nsys.modules['numpy.testing'] = fake\nnumpy.testing = fake\n"
        + _WRONG_B),
    "numpy's comparison internals patched": (
        "import numpy.testing._private.utils as u\nu.assert_array_compare = lambda *a, **k: None\n" + _WRONG_B),
    "exec_test rewritten in the caller's globals": (
        "import sys\nsys._getframe(1).f_globals['exec_test'] = lambda *a, **k: 1\n" + _WRONG_B),
    "frames walked up to the test module": (
        "import sys\nf = sys._getframe()\nwhile f is not None:\n    if 'exec_test' in f.f_globals:\n"
        "        f.f_globals['exec_test'] = lambda *a, **k: 1\n    f = f.f_back\n" + _WRONG_B),
    "np.testing's __code__ swapped": (
        "import numpy as np\ntry:\n    np.testing.assert_array_equal.__code__ = (lambda *a, **k: None).__code__\n"
        "except Exception:\n    pass\n" + _WRONG_B),
    "exec_test's __code__ swapped through the frames": (
        "import sys\nf = sys._getframe()\nwhile f is not None:\n    for v in list(f.f_globals.values()):\n"
        "        if getattr(v, '__name__', '') == 'exec_test':\n"
        "            v.__code__ = (lambda *a, **k: 1).__code__\n    f = f.f_back\n" + _WRONG_B),
    "answer read from frames and gc": (
        "import gc, sys\nfound = []\nf = sys._getframe()\nwhile f is not None:\n"
        "    found += [f.f_locals[k] for k in ('expected_result', 'ans') if k in f.f_locals]\n    f = f.f_back\n"
        "found += [o['expected_result'] for o in gc.get_objects() if type(o) is dict and 'expected_result' in o]\n"
        "B = found[0] if found else A\n"),
    "answer's code read from gc, disk or this process's memory": _SOLVE_FROM_CONTEXT,
    # the attempts on the harness itself (none of these passes the official evaluator either; the
    # early exits are test_ds1000.py's test_early_exit_fails)
    "AssertionError replaced": (
        "import builtins\nbuiltins.AssertionError = type('AssertionError', (BaseException,), {})\n" + _WRONG_B),
    "atexit hook": "import atexit, os\natexit.register(os._exit, 0)\n" + _WRONG_B,
    "planted judge files": (
        "import os\nfor d in ('/tmp/judge/easylemur/eval/benchmarks/ds1000_seal', '/tmp/judge/run'):\n"
        "    os.makedirs(d, exist_ok=True)\n"
        "open('/tmp/judge/ds1000_program.py', 'w').write('print(1)')\n"
        "open('/tmp/judge/values', 'w').write('[]')\nopen('/tmp/sitecustomize.py', 'w').write('import os')\n"
        "open('/tmp/numpy.py', 'w').write('')\n" + _WRONG_B),
    "a daemon rewrites the judge's program": (
        "import os, time\nif os.fork() == 0:\n    os.setsid()\n    for _ in range(3000):\n        try:\n"
        "            open('/tmp/judge/ds1000_program.py', 'w').write('import sys\\nprint(sys.argv)')\n"
        "        except OSError:\n            pass\n        time.sleep(0.002)\n    os._exit(0)\n" + _WRONG_B),
    "values forged": (
        "import os\nB = A\nopen(os.path.join(os.path.dirname(os.getcwd()), 'values'), 'w').write("
        "'[[\"case\", [\"n\"], [], [], [\"n\"]]]')\nos._exit(0)\n"),
}
# For NUMPY_EQ (problem 16), whose exec_test is `assert (result == ans).all()`.
EQ_CHEATS = {
    "always-equal ndarray subclass": (
        "class E(np.ndarray):\n    def __eq__(self, o):\n        return np.ones(np.shape(o), bool)\n"
        "result = np.zeros(1).view(E)\n"),
    "always-equal object": (
        "class Eq:\n    def __eq__(self, o):\n        return np.True_\nresult = Eq()\n"),
    "always-equal list subclass": (
        "class L(list):\n    def __eq__(self, o):\n        return np.True_\nresult = L()\n"),
    "object array of an always-equal object": (
        "class Eq:\n    def __eq__(self, o):\n        return True\nresult = np.array([Eq()], dtype=object)\n"),
}
# For PANDAS_SUM (problem 2; exec_test: assert_frame_equal(check_dtype=False) in a try) and
# PANDAS_EQUALS (problem 17; exec_test: result.equals(ans)). A DataFrame subclass with an
# always-True `equals` is refused by the wire (test_the_wire_rebuilds_pandas_values_faithfully).
PANDAS_CHEATS = {
    (2, "pd.testing patched"): "import pandas as pd\npd.testing.assert_frame_equal = lambda *a, **k: None\n",
    (2, "always-equal object in a column"): (
        "class Eq:\n    def __eq__(self, o):\n        return True\n    __hash__ = object.__hash__\n"
        "df['Sum'] = [Eq() for _ in range(len(df))]\n"),
    (17, "DataFrame.equals patched"): "pd.DataFrame.equals = lambda *a, **k: True\nresult = df\n",
}
# For MATPLOTLIB_LEGEND (problem 5): each draws the line without its legend. (Its monkeypatches,
# np.allclose and PIL's Image.open, are of the numpy ones' kind, and as slow as a figure: left out.)
_EVIL_DUMP = "import sys\nsys.modules['__main__'].dump_figures = lambda: {pickle}\nplt.plot(x, y)\n"
MATPLOTLIB_CHEATS = {
    "ans.png copied or planted": (  # (a line naming savefig is dropped by the test's skip_plt_cmds)
        "import shutil\ntry:\n    shutil.copy('ans.png', 'output.png')\nexcept OSError:\n    pass\nplt.plot(x, y)\n"
        "getattr(plt, 'save' + 'fig')('ans.png', bbox_inches='tight')\n"),
    # the attempts on the figures' channel
    "a figure pickle that binds savefig": _EVIL_DUMP.format(  # (split: the test drops a line naming savefig)
        pickle="b'\\x80\\x04cmatplotlib.figure\\nFigure\\n)\\x81\\x94(Vm\\nh\\x00Vsave' b'fig\\nt\\x94Q)R.'"),
}  # (more pickles are refused in-process: test_figures_cross_under_the_allow_list_and_nothing_else_does)
# For CLOSING_ASSERTS (problem 13): the leaves' values are compared in the judge.
ASSERT_CHEATS = {
    "always-equal return value": (
        "class Eq:\n    def __eq__(self, o):\n        return True\n"
        "def shout(s):\n    return Eq()\nclass H:\n    pass\nhelper = H()\nhelper.fn = shout\n"),
    "the literal read from its own code": (
        "import sys\nconsts = [c for c in sys._getframe().f_code.co_consts if isinstance(c, str) and c.isupper()]\n"
        "def shout(s):\n    return max(consts, key=len) if consts else s\nclass H:\n    pass\nhelper = H()\n"
        "helper.fn = shout\n"),
}
# Cheats aimed at the harness: none passes the official evaluator either (they target the seal).
HARNESS_ONLY = {"AssertionError replaced", "atexit hook", "planted judge files", "a daemon rewrites the judge's program",
                "values forged", "a figure pickle that binds savefig"}


def corpus(by_id) -> list:
    "(problem id, cheat name, snippet) of every cheat whose problem the sandbox runs here."
    out = ([(0, n, c) for n, c in NUMPY_CHEATS.items()] + [(16, n, c) for n, c in EQ_CHEATS.items()]
           + [(pid, n, c) for (pid, n), c in PANDAS_CHEATS.items()] + [(13, n, c) for n, c in ASSERT_CHEATS.items()]
           + [(5, n, c) for n, c in MATPLOTLIB_CHEATS.items()])
    return [c for c in out if c[0] in by_id]


def _rows_file(tmp_path_factory, rows) -> Path:
    path = tmp_path_factory.mktemp("ds1000x") / "ds1000.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def task(tmp_path_factory) -> DS1000:
    return DS1000(load_ds1000(_rows_file(tmp_path_factory, [NUMPY_RESHAPE, PANDAS_SUM, MATPLOTLIB_LEGEND]
                                         + EXTRA_ROWS)))


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    sb = Sandbox(timeout=60)
    sb.check()
    return sb


@pytest.mark.slow
def test_the_cheats_pass_the_official_evaluator(task):
    """The corpus is of real cheats: but those aimed at the seal itself, each passes the official
    rule (the test program exec'd in one process) with a wrong answer."""
    cheats = [c for c in corpus({p.task_id: p for p in task.problems}) if c[1] not in HARNESS_ONLY]
    contexts = {p.task_id: p.tests for p in task.problems}
    official = official_verdicts([(contexts[pid], code) for pid, _, code in cheats])
    assert [(pid, name) for (pid, name, _), ok in zip(cheats, official) if not ok] == []


@pytest.mark.slow
@needs_bwrap
def test_cheats_score_0(task, sandbox):
    """Every cheat fails: its tricks reach only the candidate's process; a result that is not
    plain data is refused as such (NOT_DATA, counted apart), as is the documented limit beside
    them: a result the wire does not rebuild (a function), which the official exec_test could
    call. The references of these problems pass (test_ds1000.py's verdict test)."""
    by_id = {p.task_id: p for p in task.problems}
    cheats = corpus(by_id) + [(0, "limit: a function as the result", "B = lambda: None\n")]
    results = run_programs([task.program(by_id[pid], code) for pid, _, code in cheats], sandbox, workers=2)
    assert [(pid, name, r) for (pid, name, _), r in zip(cheats, results) if r == PASSED] == []
    why = {(pid, name): r for (pid, name, _), r in zip(cheats, results)}
    not_data = [(16, n) for n in EQ_CHEATS] + [(2, "always-equal object in a column"), (0, "limit: a function as the result")]
    not_data += [(5, n) for n in MATPLOTLIB_CHEATS if "pickle" in n and 5 in by_id]
    assert {k: why[k] for k in not_data} == {k: NOT_DATA for k in not_data}
    assert why[(0, "values forged")] in (MISSING, TEST_FAILED) and why[(0, "np.testing patched")] == TEST_FAILED
    counts = failure_counts(results)
    assert counts[REASONS[NOT_DATA]] == len(not_data) and sum(counts.values()) == len(cheats)


# ----------------------------------------------------------------------------- in-process: what crosses


def _across(v, kept=None):
    kept = [] if kept is None else kept

    def other(x):
        kept.append(x)
        return ["h", str(len(kept) - 1)]

    return wire.dec(wire.parse(repr(wire.enc(v, other))), lambda i, tag: ("handle", i))


def test_the_wire_rebuilds_pandas_values_faithfully():
    """What pandas' strict assertions compare survives: dtypes (categorical, tz-aware, string,
    nullable, period, interval, object), indexes (MultiIndex, RangeIndex, freq, names),
    duplicate labels, NaN/NaT/NA; a frame with an object of the candidate's is a handle."""
    import datetime as dt

    frames = [
        pd.DataFrame({"a": [1, 2], "b": [1.5, np.nan], "c": ["x", None], "d": [True, False]}),
        pd.DataFrame({"o": pd.Series(["x", 1], dtype=object), "l": [[1, 2], (3,)]}),
        pd.DataFrame({"t": pd.date_range("2020", periods=3, freq="D"), "tz": pd.date_range("2020", periods=3, tz="Asia/Tokyo"),
                      "td": pd.to_timedelta([1, 2, 3], unit="s")}, index=pd.date_range("2021", periods=3, freq="h", name="w")),
        pd.DataFrame({"cat": pd.Categorical(["a", "b", "a"], categories=["b", "a"], ordered=True),
                      "I": pd.array([1, None, 3], dtype="Int64"), "B": pd.array([True, None, False], dtype="boolean"),
                      "S": pd.array(["a", None, "c"], dtype="string")}),
        pd.DataFrame(np.arange(6).reshape(3, 2), columns=pd.MultiIndex.from_tuples([("a", 1), ("b", 2)], names=["x", "y"]),
                     index=pd.MultiIndex.from_product([["k"], [1, 2, 3]], names=["p", None])),
        pd.DataFrame({"p": pd.period_range("2020", periods=2, freq="M"), "iv": pd.interval_range(0, 2)}),
        pd.DataFrame([[1, 2], [3, 4]], columns=["a", "a"], index=["r", "r"]),
        pd.DataFrame({"ts": [pd.Timestamp("2020-01-01", tz="UTC"), pd.NaT], "o": [pd.Timestamp("2020"), dt.date(2020, 1, 2)]}),
        pd.DataFrame(index=pd.RangeIndex(5, 9, 2, name="r")),
    ]
    for f in frames:
        out = _across(f)
        pd.testing.assert_frame_equal(out, f, check_exact=True, check_freq=True, check_flags=True)
        assert list(out.dtypes) == list(f.dtypes) and repr(out) == repr(f)
    for s in (pd.Series([1, 2], index=["a", "b"], name=("n", 1)), pd.Series(pd.Categorical(["x"])),
              pd.Series([], dtype=float)):
        pd.testing.assert_series_equal(_across(s), s, check_exact=True)
    for ix in (pd.Index(["a", "b"]), pd.Index(["a"], dtype=object), pd.date_range("2020", periods=4, freq="ME"),
               pd.RangeIndex(3)):
        out = _across(ix)
        pd.testing.assert_index_equal(out, ix, exact=True)
        assert type(out) is type(ix) and repr(out) == repr(ix)
    for v in (pd.Timestamp("2020-01-01 10:00", tz="US/Eastern"), pd.Timedelta("1D"), pd.Period("2020-01", freq="M"),
              pd.Interval(0, 1, closed="both"), pd.CategoricalDtype(["a"], ordered=True), pd.Int64Dtype(),
              dt.datetime(2020, 1, 2, tzinfo=dt.timezone(dt.timedelta(hours=2))), dt.timedelta(days=1)):
        out = _across(v)
        assert type(out) is type(v) and repr(out) == repr(v)
    assert _across(pd.NaT) is pd.NaT and _across(pd.NA) is pd.NA

    class Eq:
        def __eq__(self, o):
            return True

    kept = []
    assert _across(pd.DataFrame({"a": [Eq()]}), kept)[0] == "handle" and type(kept[-1]) is pd.DataFrame
    assert _across(pd.Series([1], index=[Eq()]), kept)[0] == "handle" and type(kept[-1]) is pd.Series
    assert _across(type("F", (pd.DataFrame,), {})({"a": [1]}))[0] == "handle"


def test_the_wire_rebuilds_arrays_and_sparse_matrices():
    """numpy object, datetime and masked arrays and matrices; scipy.sparse in every format (the
    class kept, matrix or array)."""
    import scipy.sparse as sp

    rows = np.empty(2, dtype=object)
    rows[:] = [np.arange(2), np.arange(3)]
    out = _across(rows)
    assert out.dtype == object and [list(r) for r in out] == [[0, 1], [0, 1, 2]]
    for a in (np.array(["2020-01-01", "NaT"], dtype="datetime64[D]"), np.arange(3).astype("m8[s]"),
              np.matrix([[1, 2], [3, 4]])):
        out = _across(a)
        assert type(out) is type(a) and out.dtype == a.dtype
        np.testing.assert_array_equal(out, a)
    m = _across(np.ma.masked_array([1, 2, 3], mask=[0, 1, 0], fill_value=7))
    assert list(m.mask) == [False, True, False] and m.fill_value == 7
    for s in (sp.csr_matrix(np.array([[0, 1], [2, 0]])), sp.csc_array(np.eye(3)),
              sp.coo_matrix(([1.0], ([0], [1])), shape=(2, 3)), sp.lil_matrix(np.eye(2)), sp.dok_array(np.eye(2)),
              sp.dia_matrix(np.eye(3)), sp.bsr_matrix(np.eye(4), blocksize=(2, 2))):
        out = _across(s)
        assert type(out) is type(s) and out.dtype == s.dtype and (out != s).nnz == 0


@pytest.mark.slow
def test_the_wire_rebuilds_torch_tensors():
    """torch tensors (dtype, shape, requires_grad, bfloat16, Parameter), sizes and dtypes."""
    torch = pytest.importorskip("torch")
    for t in (torch.arange(6).reshape(2, 3).t(), torch.tensor([1.5], requires_grad=True),
              torch.tensor([1, 2], dtype=torch.bfloat16), torch.nn.Parameter(torch.ones(2))):
        out = _across(t)
        assert type(out) is type(t) and out.dtype == t.dtype and out.requires_grad == t.requires_grad
        assert torch.equal(out.detach(), t.detach())
    assert _across(torch.Size([2, 3])) == torch.Size([2, 3]) and _across(torch.float16) is torch.float16


def test_the_wire_refuses_forged_values():
    """A value is rebuilt only from well-formed parts: sparse indices out of bounds, a frame whose
    columns disagree with its index, an unknown sparse class or time zone key all raise."""
    parts = (np.array([1.0]), np.array([5], dtype=np.int32), np.array([0, 1, 1], dtype=np.int32))  # column 5 of 2
    bad_csr = ["sp", "csr_matrix", ["0x2", "0x2"], [wire.enc(x, None) for x in parts]]
    frame = wire.enc(pd.DataFrame({"a": [1, 2]}), None)
    frame[3] = wire.enc(pd.RangeIndex(3), None)
    for bad in (bad_csr, ["sp", "spmatrix", ["0x1", "0x1"], bad_csr[3]], frame, ["tz", "zi", "../../etc/passwd"],
                ["pD", "object"], ["tT", "float32", ["0x2"], "00", False, False]):
        with pytest.raises(Exception):
            wire.dec(wire.parse(repr(bad)), lambda i, tag: ("handle", i))


def test_closing_assertions_are_held_back_and_judged_on_the_leaves():
    code = ("import numpy as np\nx = 1; y = 2\nresult = None\nassert f('aB') == 'AB' and not g\n"
            "assert (h(1,\n  2)) in [3, 4] != 5\n")
    kept, trees, leaves = common.split(code)
    assert kept == "import numpy as np\nx = 1; y = 2\nresult = None\n"
    assert leaves == ["(f('aB')\n)", "(g\n)", "(h(1,\n  2)\n)"] and "'AB'" not in "".join(leaves)
    assert common.split("x = 1\nassert x\ny = 2\n")[1:] == ([], [])  # only the assertions that end the code
    # the snippet's own closing assertions come here too: the judge runs nothing of them but literals
    _, own, own_leaves = common.split("B = 1\nassert ().__class__.__base__.__subclasses__() == [1, -2j, ('a',)]\n")
    assert own == [["cmp", [["leaf", 0], ["const", "[1, -2j, ('a',)]"]], [ast.Eq]]]
    assert own_leaves == ["(().__class__.__base__.__subclasses__()\n)"]
    assert common.split("def f(:\n")[0] == "def f(:\n"
    from easylemur.eval.benchmarks.ds1000_seal.judge import evaluate
    assert evaluate(trees[0], ["AB", False, 3]) is True and evaluate(trees[0], ["AB", True, 3]) is False
    assert evaluate(trees[1], ["AB", False, 3]) is True and evaluate(trees[1], ["AB", False, 7]) is False


def test_figures_cross_under_the_allow_list_and_nothing_else_does():
    """An honest figure (lines, legend, bars, texts) is rebuilt with the judge's Matplotlib and
    inspected as the official fallback does; pickles that call anything outside the allow-list,
    set state on a class or bind an unlisted method are refused before they act."""
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from easylemur.eval.benchmarks.ds1000_seal.figures import Refused, dump_figures, load_figures

    plt.close("all")
    fig, (a, b) = plt.subplots(1, 2)
    a.plot(np.arange(5), "r--", label="y")
    a.legend()
    b.bar(["p", "q"], [1, 2], color="yellow")
    b.set_title("T", y=1.1)
    data = dump_figures()
    plt.close("all")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (out,) = load_figures(data)
    assert plt.gcf() is out and plt.gca() is out.axes[-1]
    a, b = out.axes
    assert [t.get_text() for t in a.get_legend().get_texts()] == ["y"] and a.get_lines()[0]._color == "r"
    assert len(b.patches) == 2 and b.title._y == 1.1 and isinstance(b.patches[0], matplotlib.patches.Rectangle)
    get_legend = matplotlib.axes._base._AxesBase.get_legend
    refused = [pickle.dumps(print), b"cbuiltins\neval\n(V1\ntR.", b"cos\nsystem\n(Vtrue\ntR.",
               b"cmatplotlib.axes._base\n_AxesBase\n}(Vget_legend\nI1\nub.",  # state set on a class
               b"\x80\x04cmatplotlib.figure\nFigure\n)\x81\x94(Vm\nh\x00Vsavefig\nt\x94Q)R.",  # savefig bound
               b"\x80\x04(Vf\nVbuiltins\nVgetattr\nt\x94Q.", b"\x80\x04cmatplotlib.backends.backend_pdf\nPdfPages\n."]
    for data in refused:
        plt.close("all")
        with pytest.raises(Refused):
            load_figures(data)
    assert matplotlib.axes._base._AxesBase.get_legend is get_legend
    with pytest.raises(Exception):  # a dtype's state through its own __setstate__: a copy, and refused there
        load_figures(b"\x80\x04cnumpy\ndtype\n\x94(Vf8\n\x89\x89t\x94R}(V__class__\nh\x00ub.")
    assert np.dtype("f8").str == "<f8"
    plt.close("all")


def test_the_docstring_names_every_result_and_reason():
    import easylemur.eval.benchmarks.ds1000 as ds1000

    doc = ds1000.__doc__
    for key in ("sealed", "Judge", "exec_test", "NOT_DATA", "figure", "random state", "rcParams", "limit"):
        assert key in doc, key
    assert set(REASONS) == {ds1000.TEST_FAILED, ds1000.MISSING, ds1000.NOT_DATA, ds1000.MALFORMED, ds1000.NO_INPUTS}
    assert ast.get_docstring(ast.parse(Path(ds1000.__file__).read_text()))
