"""DS-1000 (Lai et al. 2022; the 2024 release `xlangai/DS-1000`): 1000 data-science problems
over NumPy, pandas, SciPy, Matplotlib, scikit-learn, PyTorch and TensorFlow, each judged by
running the dataset's own test code on the model's snippet, inside the sandbox
(docs/design.md, "Decoding and evaluation").

The data is one JSONL row per problem: `prompt` (a StackOverflow question whose code ends where
the model continues: after "BEGIN SOLUTION\\n<code>\\n", after "# SOLUTION START\\n" in the
Matplotlib problems, or after "    ### BEGIN SOLUTION" inside a `def f(...)`), `reference_code`
(a known-good snippet), `code_context` (the test: `exec_context`, a template with an `[insert]`
placeholder, `generate_test_case`, `exec_test`, `test_execution(solution)` and sometimes
`test_string(solution)`, which looks at the snippet's tokens, e.g. "no for loops") and
`metadata` (`problem_id`, `library_problem_id`, `library`, `test_case_cnt`, `perturbation_type`).

What the official evaluator (the repository's test_ds1000.py and execution.py) does, and this
module reproduces: the completion, generated with the stops "</code>" and "# SOLUTION END", is
post-processed (cut at "</code>", "```python" removed, cut at the next "```", cut at
"\\nEND SOLUTION", "<code>" removed); the test program is `code_context`, a newline,
`code = <repr of the snippet>`, `test_execution(code)` and, when `code_context` mentions
`test_string(`, `test_string(code)`; it is `exec`ed with empty globals in a fresh temporary
working directory, with a 120 s limit, and passes when nothing is raised.

Here the official test program runs outside the candidate's reach: each sample is a sealed
sandbox Program (`sandbox.Judge`; the stages are `ds1000_seal/`). In the official evaluator the
snippet runs in the test's own process, so it can monkeypatch `np.testing`, rewrite `exec_test`
through `sys._getframe(1).f_globals`, swap a function's `__code__`, return an object whose
`__eq__` is always True, or read `expected_result` off a frame; here none of that reaches the
verdict:

- The program (the candidate's stage) imports the libraries `code_context` names, then forks a
  child that runs `code_context` and the official `test_execution(code)` with every candidate
  `exec(code, {"test_input": ...})` recorded instead of run (and `exec_test` answering True):
  the code it would exec (`exec_context` with the snippet, as `test_execution` built it), the
  test environment (pickled: any input crosses to the candidate, a fitted model included) and
  the process state the snippet would have found there (numpy's, `random`'s and torch's random
  state, Matplotlib's rcParams). The child removes `code_context` and whatever the test code
  wrote (an "ans.png") and exits: the expected answers never exist in the candidate's process,
  on disk or in memory, and the parent never read `code_context`.
- The parent then runs the candidate's code case by case in one working directory and writes,
  as data (the sandbox's wire, `programs/wire.py`), each case's `result`, the regular files the
  code left (an "output.png", a saved model: 8 MiB a case), and its open Matplotlib figures.
- The runner kills every process of that stage and empties /tmp and /dev/shm. The judge then
  execs the official program (code_context, `code = <repr of the snippet>`, `test_execution`,
  `test_string`) with empty globals but for `exec`: each candidate exec of `test_execution`
  takes the next case's values instead: the files are written into the judge's directory (never
  over one the test code wrote itself: the expected "ans.png" is the judge's own), the figures
  are rebuilt into pyplot, and `result` is rebuilt with the judge's own classes. Then the
  official `generate_test_case`, `exec_test(result, ans)` and `test_string` run as they are, in
  that process. A pass needs the judge's end marker, printed after the program returned.

What crosses as `result` is plain data, rebuilt with the judge's classes (exact types; a
subclass or an object of the candidate's is not data): Python's builtins and containers,
numpy arrays and scalars (numbers, bytes, text, datetime64/timedelta64, object arrays of plain
elements, masked arrays, matrices, dtypes), pandas DataFrame, Series and indexes with their
dtypes, names, MultiIndex levels and DatetimeIndex freq (numpy, categorical, tz-aware, string,
nullable, period and interval arrays; Timestamp, Timedelta, Period, Interval, NaT, NA),
scipy.sparse matrices and arrays of every format (checked in full), torch CPU tensors
(requires_grad kept), torch.Size and dtypes, datetime values. A figure crosses as a pickle the
judge loads under an allow-list (`ds1000_seal/figures.py`: Matplotlib's own classes, numpy's
and pandas' reconstructors; no other call, no state set on a class), so `exec_test`'s
`plt.gca()` / `plt.gcf()` inspect the candidate's figure with the judge's Matplotlib.

The assertions `exec_context` itself ends with (`assert preprocess("aBc") == "ABC"`,
`assert os.path.exists("sklearn_model")`; the snippet's own when nothing follows it) run in the
judge too, where only their literals are read, never run (`ast.literal_eval`): the candidate's process gets
the code without them, evaluates only their operands that read its names (the "leaves") and
sends their values; the judge evaluates the comparisons, `and`/`or`/`not`, and the literals
(the expected text) never reach the candidate. A leaf that is not plain data is compared by
identity (`preprocess == tfidf.preprocessor` holds for the same function).

How a sample fails (`REASONS`, counted by `failure_counts`): TEST_FAILED, a test failed or
raised, the snippet's own exception included (the official verdict); MISSING, the candidate's
stage ended before writing its values (`os._exit`, a crash: the official run fails too);
NOT_DATA, a value the tests read could not cross: a result of a type the wire does not rebuild
(a function, an sklearn estimator, a generator, a subclass), a figure holding something the
allow-list does not name (a lambda tick formatter, a seaborn object), or a case's files over
8 MiB: never a pass, and counted apart, since the official evaluator may pass such a sample;
MALFORMED, the values file is not what the driver writes; NO_INPUTS, the test code failed
before any snippet ran (the environment's fault, as the reference would fail too). The values
file is bounded (`VALUES_BYTES`): past it the sandbox says "the values exceed N bytes".

Limits, stated (where the verdict may differ from the official one on an honest snippet):
- state the snippet leaves in the process crosses to later cases only within the candidate's
  stage: the random state goes one way (the judge's `generate_test_case` for case 2 draws from
  its own state, as if case 1's snippet had drawn nothing; DS-1000's cases reseed), and
  process-wide settings `code_context` makes at its top level other than the random state and
  rcParams (`pd.set_option`, `np.set_printoptions`) are not replayed in the candidate's process;
  figures the test code opened and left open are not in the candidate's process;
- a test input that cannot be pickled (a lambda, an instance of a class `code_context` defines)
  cannot cross: NO_INPUTS;
- only the assertions that end `exec_context` are held back; one in its middle runs in the
  candidate's process, as does any other statement after the snippet (`result = f(x) == y`
  compares with the candidate's objects' own `__eq__`, as the official run does); the leaves
  are all evaluated, in order, even one an `and` would have skipped (its exception counts only
  where the judge needs its value);
- the judge's trusted libraries read what the candidate made: PIL decodes its "output.png",
  Matplotlib (with its mathtext parser) handles its figure's state; the official evaluator
  runs both in the same process as the snippet.

Every package of this interpreter that a DS-1000 test may import is bound read-only
(`Program.libs`), as the official environment has them all installed; a problem whose test
imports a module the sandbox cannot provide (TensorFlow, which is not provided; seaborn when
not installed; a package whose vendored shared libraries are not bound) is skipped and counted
with the reason (`DS1000.skipped`, `DS1000.skip_counts()`). The time limit is the sandbox's
`--timeout`, for both stages together (the official one is 120 s); the sealed program runs the
imports twice (the candidate's stage and the judge), so a sample takes about twice as long.

Prompt formats:
- `base`: the prompt as is (it ends where the model continues); stops "</code>", "# SOLUTION END"
  and "\\nEND SOLUTION" (the last is also where the post-processing cuts).
- `chatml`: the prompt as the user turn (as DS-1000's authors sent it to chat models) and an
  assistant turn opened with "<code>\\n" that the model continues; stops as `base` plus "\\n```".
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.metadata
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from easylemur.eval.api import EvalDataError, Problem, Prompt, Task, read_jsonl
from easylemur.eval.benchmarks.ds1000_seal import PACKAGE, stage_files
from easylemur.eval.benchmarks.ds1000_seal import candidate as candidate_stage
from easylemur.eval.benchmarks.ds1000_seal import judge as judge_stage
from easylemur.eval.benchmarks.ds1000_seal.common import CONTEXT, PROGRAM, SNIPPET
from easylemur.eval.sandbox import LIB_DIR, PYTHON, Judge, Program, importable, lib_binds, new_marker

HF_NAME = "xlangai/DS-1000"
LIBRARIES = ("Numpy", "Pandas", "Scipy", "Matplotlib", "Sklearn", "Pytorch", "Tensorflow")
STOPS = ("</code>", "# SOLUTION END", "\nEND SOLUTION")
CHAT_PREFIX = "<code>\n"
TIMEOUT_S = 120.0  # the official evaluator's limit per program; the sandbox's own timeout is the caller's choice
PROGRAM_FILE = PROGRAM  # the official test program: the judge's
# The results of a sealed program that fails, as the sandbox words them (the judge's and the
# driver's exit statuses, ds1000_seal/judge.py and candidate.py), and what each means.
TEST_FAILED = "failed: the tests exited with status 1"
MISSING = f"failed: the tests exited with status {judge_stage.MISSING}"
NOT_DATA = f"failed: the tests exited with status {judge_stage.NOT_DATA}"
MALFORMED = f"failed: the tests exited with status {judge_stage.MALFORMED}"
NO_INPUTS = f"failed: the program exited with status {candidate_stage.NO_INPUTS}"
REASONS = {
    TEST_FAILED: "a test failed or raised (the candidate's code raised included): the official verdict",
    MISSING: "the candidate's stage ended before its driver wrote the values (os._exit, a crash)",
    NOT_DATA: "a value the tests read could not cross as data (a result of a type the wire does not rebuild, "
              "a figure the allow-list refuses, files over the bound)",
    MALFORMED: "the values file is not what the driver writes",
    NO_INPUTS: "the test inputs could not be made (the test code failed before the snippet ran)",
}
# The values the candidate's stage hands the judge, at most (a result of a few million numbers
# crosses; more fails as "the values exceed N bytes").
VALUES_BYTES = 64 << 20

# What a module a test imports needs bound into the sandbox: (required, optional). Required
# packages must be importable here, else the module (and every problem importing it) is
# unsupported; optional ones are bound when installed (dependencies of some versions only).
_PANDAS = (("pandas", "numpy", "dateutil"), ("six", "pytz", "tzdata"))
_MATPLOTLIB = (("matplotlib", "mpl_toolkits", "numpy", "cycler", "kiwisolver", "pyparsing", "packaging", "fontTools",
                "PIL", "contourpy", "dateutil"), ("six",))
_NEEDS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "numpy": (("numpy",), ()),
    "pandas": _PANDAS,
    "dateutil": (("dateutil",), ("six",)),
    "pytz": (("pytz",), ()),
    "scipy": (("scipy", "numpy"), ()),
    "matplotlib": _MATPLOTLIB,
    "mpl_toolkits": _MATPLOTLIB,
    "PIL": (("PIL",), ()),
    "sklearn": (("sklearn", "numpy", "scipy", "joblib", "threadpoolctl"), ("narwhals", "cloudpickle")),
    "joblib": (("joblib",), ("cloudpickle",)),
    "seaborn": (("seaborn",) + _MATPLOTLIB[0] + _PANDAS[0], _MATPLOTLIB[1] + _PANDAS[1] + ("scipy",)),
    "torch": (("torch", "numpy", "typing_extensions", "sympy", "mpmath", "networkx", "jinja2", "markupsafe",
               "filelock", "fsspec"), ("torchgen",)),
}
# Threads count against the sandbox's process limit (64): one per pool; a headless plot backend
# and a writable config dir for Matplotlib; joblib's process pools sized to one worker.
ENV = (("OMP_NUM_THREADS", "1"), ("OPENBLAS_NUM_THREADS", "1"), ("MKL_NUM_THREADS", "1"),
       ("NUMEXPR_NUM_THREADS", "1"), ("LOKY_MAX_CPU_COUNT", "1"), ("MPLBACKEND", "Agg"),
       ("MPLCONFIGDIR", "/tmp/.matplotlib"), ("PYTHONDONTWRITEBYTECODE", "1"))

_IMPORT = re.compile(r"^[ \t]*import[ \t]+([^\n#;]+)", re.M)
_FROM = re.compile(r"^[ \t]*from[ \t]+([A-Za-z_]\w*)", re.M)
_FROM_NAMES = re.compile(r"^[ \t]*from[ \t]+([A-Za-z_][\w.]*)[ \t]+import[ \t]+\(?([^\n#;)]+)", re.M)
_TEST_EXECUTION = re.compile(r"^def test_execution\(", re.M)


@dataclasses.dataclass(frozen=True)
class DS1000Problem(Problem):
    """`task_id` is metadata.problem_id; `text` the prompt; `tests` the code_context;
    `solution` the reference_code."""

    library: str = ""
    library_problem_id: int = 0
    perturbation_type: str = ""
    test_case_cnt: int = 0


# ----------------------------------------------------------------------------- data


def load_ds1000(source: Union[str, Path, None] = None) -> list[DS1000Problem]:
    """The problems of DS-1000's published JSONL (`ds1000.jsonl` or `ds1000.jsonl.gz`) at
    `source`, or of the HF dataset `source` (None: xlangai/DS-1000) where a network exists;
    in problem_id order."""
    source = HF_NAME if source is None else source
    path = Path(source)
    if path.is_file() or str(source).endswith((".jsonl", ".gz", ".json")):
        rows: Any = read_jsonl(path)
    else:
        rows = _hub_rows(str(source))
    problems: list[DS1000Problem] = []
    seen: dict[int, str] = {}
    for where, row in rows:
        p = _problem(where, row)
        if p.task_id in seen:
            raise EvalDataError(f"{where}: metadata.problem_id {p.task_id} repeats the one at {seen[p.task_id]}")
        seen[p.task_id] = where
        problems.append(p)
    if not problems:
        raise EvalDataError(f"DS-1000 data {source}: no problems")
    return sorted(problems, key=lambda p: p.task_id)


def _hub_rows(name: str):
    hint = (f"download ds1000.jsonl.gz from https://huggingface.co/datasets/{HF_NAME} (or the DS-1000 repository's "
            "data/ds1000.jsonl.gz) and pass its path")
    try:
        import datasets
    except ImportError:
        raise EvalDataError(f"DS-1000 data {name!r}: not a file, and the datasets package is not installed; {hint}") from None
    try:
        ds = datasets.load_dataset(name, split="test")
    except Exception as e:
        raise EvalDataError(f"DS-1000 data {name!r}: not a file, and the HF dataset could not be loaded "
                            f"({type(e).__name__}: {' '.join(str(e).split())[:200]}); {hint}") from None
    return ((f"{name}:test:{i}", dict(row)) for i, row in enumerate(ds))


def _int(where: str, key: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise EvalDataError(f"{where}: {key} {value!r}: expected an integer")
    try:
        return int(value)
    except ValueError:
        raise EvalDataError(f"{where}: {key} {value!r}: expected an integer") from None


def _problem(where: str, row: dict) -> DS1000Problem:
    for key in ("prompt", "reference_code", "code_context", "metadata"):
        if key not in row:
            raise EvalDataError(f"{where}: DS-1000 record lacks {key!r} (needs prompt, reference_code, code_context, "
                                "metadata)")
    for key in ("prompt", "reference_code", "code_context"):
        if not isinstance(row[key], str):
            raise EvalDataError(f"{where}: {key}: expected a string, got {type(row[key]).__name__}")
    meta = row["metadata"]
    if not isinstance(meta, dict):
        raise EvalDataError(f"{where}: metadata: expected an object with problem_id, library, ..., "
                            f"got {type(meta).__name__}")
    for key in ("problem_id", "library"):
        if key not in meta:
            raise EvalDataError(f"{where}: metadata lacks {key!r}")
    library = meta["library"]
    if not isinstance(library, str) or not library:
        raise EvalDataError(f"{where}: metadata.library {library!r}: expected a name such as {', '.join(LIBRARIES)}")
    perturbation = meta.get("perturbation_type", "")
    if not isinstance(perturbation, str):
        raise EvalDataError(f"{where}: metadata.perturbation_type {perturbation!r}: expected a string")
    context = row["code_context"]
    if not _TEST_EXECUTION.search(context):
        raise EvalDataError(f"{where}: code_context does not define test_execution(solution) (the 2024 release's "
                            "format; the 2022 release's per-problem folders are not read)")
    try:
        compile(context, where, "exec")
    except SyntaxError as e:
        raise EvalDataError(f"{where}: code_context line {e.lineno}: not valid Python ({e.msg})") from None
    return DS1000Problem(
        task_id=_int(where, "metadata.problem_id", meta["problem_id"]), text=row["prompt"], tests=context,
        solution=row["reference_code"], library=library,
        library_problem_id=_int(where, "metadata.library_problem_id", meta.get("library_problem_id", 0)),
        perturbation_type=perturbation,
        test_case_cnt=_int(where, "metadata.test_case_cnt", meta.get("test_case_cnt", 0)))


# ----------------------------------------------------------------------------- the sandbox's packages


@dataclasses.dataclass(frozen=True)
class Support:
    """What the sandbox can provide here: `libs` (every package to bind) and, per module a
    test may import, why it cannot (`missing`)."""

    libs: tuple[str, ...]
    missing: Mapping[str, str]
    versions: Mapping[str, str]


@functools.lru_cache(maxsize=1)
def support() -> Support:
    """Which of the known modules this interpreter can provide to the sandbox, checked once:
    every required package importable, and each wheel's vendored shared libraries
    (`<dist>.libs`, e.g. pillow.libs) bound by `lib_binds` beside it."""
    names = sorted({n for req, opt in _NEEDS.values() for n in req + opt})
    available = set(importable(tuple(names)))
    libs = tuple(n for n in names if n in available)
    bound = {inside for _, inside in lib_binds(libs)} if libs else set()
    unbound: dict[str, str] = {}
    dists = importlib.metadata.packages_distributions()
    for n in libs:
        spec = importlib.util.find_spec(n)
        origin = list(spec.submodule_search_locations)[0] if spec.submodule_search_locations else spec.origin
        site = os.path.dirname(origin)
        for dist in dists.get(n, []):
            for vendored in {re.sub(r"[-_.]+", "_", dist) + ".libs", re.sub(r"[-_.]+", "_", dist).lower() + ".libs"}:
                if os.path.isdir(os.path.join(site, vendored)) and f"{LIB_DIR}/{vendored}" not in bound:
                    unbound[n] = f"{vendored} (its shared libraries) is not bound by sandbox.lib_binds"
    missing: dict[str, str] = {}
    for module, (required, _) in _NEEDS.items():
        for n in required:
            if n not in available:
                missing[module] = f"needs {n}, which {sys.executable} cannot import"
                break
            if n in unbound:
                missing[module] = f"needs {n}: {unbound[n]}"
                break
    versions = {}
    for module in ("numpy", "pandas", "scipy", "matplotlib", "sklearn", "torch"):
        if module not in missing:
            for dist in dists.get(module, []):
                try:
                    versions[module] = importlib.metadata.version(dist)
                except importlib.metadata.PackageNotFoundError:
                    pass
    return Support(libs, missing, versions)


def imported_modules(code: str) -> list[str]:
    """The top-level modules `code` imports (also inside strings such as exec_context), in order."""
    found: list[str] = []
    for m in _IMPORT.finditer(code):
        for part in m.group(1).split(","):
            name = part.strip().split(" ")[0].split(".")[0]
            if name.isidentifier() and name not in found:
                found.append(name)
    for m in _FROM.finditer(code):
        if m.group(1) not in found:
            found.append(m.group(1))
    return found


def preloads(code: str) -> tuple[str, ...]:
    """The modules `code` imports (in strings too), dotted names kept (`matplotlib.pyplot`, and for
    `from scipy import stats` both `scipy` and `scipy.stats`): what the sealed program imports once,
    before it forks the inputs step, so the inputs and the candidate's code share the import time."""
    found: list[str] = []
    for m in _IMPORT.finditer(code):
        found += [part.strip().split(" ")[0] for part in m.group(1).split(",")]
    for m in _FROM_NAMES.finditer(code):
        found.append(m.group(1))
        found += [m.group(1) + "." + part.strip().split(" ")[0] for part in m.group(2).split(",")]
    ok = [n for n in found if n and all(part.isidentifier() for part in n.split("."))]
    return tuple(dict.fromkeys(ok))


def unsupported_reason(p: DS1000Problem) -> str:
    """Why the sandbox cannot judge `p` ("" when it can): a module its test imports that the
    standard library does not have and the sandbox cannot provide."""
    s = support()
    for module in imported_modules(p.tests):
        if module in sys.stdlib_module_names or module in ("__future__",):
            continue
        if module not in _NEEDS:
            return f"imports {module}, which the DS-1000 sandbox does not provide"
        if module in s.missing:
            return f"imports {module}, which {s.missing[module]}"
    return ""


# ----------------------------------------------------------------------------- the task


def postprocess(completion: str) -> str:
    """DS-1000's post-processing of a completion, step by step as the official evaluator does it."""
    code = completion.split("</code>")[0]
    code = code.replace("```python", "")
    code = code.split("```")[0]
    code = code.split("\nEND SOLUTION")[0]
    return code.replace("<code>", "")


def official_program(p: DS1000Problem, code: str) -> str:
    """The program the official evaluator executes for the snippet `code`."""
    calls = "test_execution(code)\n" + ("test_string(code)\n" if "test_string(" in p.tests else "\n")
    return f"{p.tests}\n" + f"code = {code!r}\n" + calls


class DS1000(Task[DS1000Problem]):
    name = "ds1000"

    def __init__(self, problems: Sequence[DS1000Problem], prompt_format: str = "base"):
        super().__init__(problems, prompt_format)
        for p in self.problems:
            if not isinstance(p, DS1000Problem):
                raise EvalDataError(f"DS1000 task: problem {p.task_id!r} is a {type(p).__name__}; load it with load_ds1000")
        runnable: list[DS1000Problem] = []
        for p in self.problems:
            why = unsupported_reason(p)
            if why:
                self.skipped.append((p, why))
            else:
                runnable.append(p)
        self.problems = runnable

    def prompt(self, p: DS1000Problem) -> Prompt:
        if self.prompt_format == "base":
            return Prompt(text=p.text)
        return Prompt(messages=({"role": "user", "content": p.text},), assistant_prefix=CHAT_PREFIX)

    def stops(self) -> tuple[str, ...]:
        return STOPS + (("\n```",) if self.prompt_format == "chatml" else ())

    def extract(self, p: DS1000Problem, completion: str) -> str:
        # The stops again (a no-op on a completion cut at them, e.g. one read from a samples
        # file), then the official post-processing.
        for stop in STOPS[:2]:
            completion = completion.split(stop)[0]
        return postprocess(completion)

    def program(self, p: DS1000Problem, code: str) -> Program:
        if not isinstance(p, DS1000Problem):
            raise EvalDataError(f"DS1000 task: problem {p.task_id!r} is a {type(p).__name__}; load it with load_ds1000")
        return sealed_program(p, code)


def sealed_program(p: DS1000Problem, code: str) -> Program:
    """The sandbox program that judges snippet `code` of `p` (the module docstring): the inputs
    step and the candidate's driver as the program, the official test program in its Judge."""
    marker = new_marker()
    judge = Judge(files=stage_files(("judge", "common", "figures")) + ((PROGRAM, official_program(p, code)),),
                  steps=((PYTHON, "-B", "-m", f"{PACKAGE}.judge", marker),), end_marker=marker, env=ENV,
                  values_bytes=VALUES_BYTES)
    return Program(files=stage_files(("inputs", "common", "candidate", "figures")) + ((CONTEXT, p.tests), (SNIPPET, code)),
                   steps=((PYTHON, "-B", "-m", f"{PACKAGE}.candidate", *preloads(p.tests)),), env=ENV,
                   libs=support().libs, judge=judge)


def failure_counts(results: Sequence[str]) -> dict[str, int]:
    """How many results failed for each reason of `REASONS` (keyed by its description), the rest
    under their own wording ("timed out", ...): NOT_DATA's count is the samples whose values could
    not cross, which the official evaluator may have passed."""
    counts: dict[str, int] = {}
    for r in results:
        if r != "passed":
            key = REASONS.get(r, r)
            counts[key] = counts.get(key, 0) + 1
    return counts


def breakdown(problems: Sequence[DS1000Problem], scores: Mapping[str, float]) -> dict[str, dict[str, dict[str, float]]]:
    """The official report's split: mean score and count per library and per perturbation_type,
    from `scores` keyed by str(task_id) (problems without a score are left out)."""
    out: dict[str, dict[str, dict[str, float]]] = {"library": {}, "perturbation_type": {}}
    for key in out:
        groups: dict[str, list[float]] = {}
        for p in problems:
            if str(p.task_id) in scores:
                groups.setdefault(getattr(p, key), []).append(scores[str(p.task_id)])
        out[key] = {k: {"count": len(v), "mean": sum(v) / len(v)} for k, v in sorted(groups.items())}
    return out


def supported_libraries() -> dict[str, str]:
    """DS-1000 library name -> the version the sandbox runs, or why it cannot ("unsupported: ...")."""
    s = support()
    module = {"Numpy": "numpy", "Pandas": "pandas", "Scipy": "scipy", "Matplotlib": "matplotlib", "Sklearn": "sklearn",
              "Pytorch": "torch", "Tensorflow": "tensorflow"}
    out = {}
    for lib in LIBRARIES:
        m = module[lib]
        if m not in _NEEDS:
            out[lib] = f"unsupported: {m} is not provided to the DS-1000 sandbox"
        elif m in s.missing:
            out[lib] = f"unsupported: {s.missing[m]}"
        else:
            out[lib] = s.versions.get(m, "?")
    return out


def single_turn(data: Optional[str], variant: str = "", prompt_format: str = "base") -> DS1000:
    return DS1000(load_ds1000(data), prompt_format)
