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

Here that test program runs in the sandbox as a Program: a small driver reads it, moves into an
empty directory, `exec`s it with empty globals, then writes the end marker itself (so an early
`sys.exit(0)` or `os._exit(0)` in the snippet fails) and exits at once. Every package of this
interpreter that a DS-1000 test may import is bound read-only (`Program.libs`), as the official
environment has them all installed; a problem whose test imports a module the sandbox cannot
provide (TensorFlow, which is not provided; seaborn when not installed; a package whose vendored
shared libraries are not bound) is skipped and counted with the reason (`DS1000.skipped`,
`DS1000.skip_counts()`).

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
from easylemur.eval.sandbox import LIB_DIR, PYTHON, Program, importable, lib_binds, new_marker

HF_NAME = "xlangai/DS-1000"
LIBRARIES = ("Numpy", "Pandas", "Scipy", "Matplotlib", "Sklearn", "Pytorch", "Tensorflow")
STOPS = ("</code>", "# SOLUTION END", "\nEND SOLUTION")
CHAT_PREFIX = "<code>\n"
TIMEOUT_S = 120.0  # the official evaluator's limit per program; the sandbox's own timeout is the caller's choice
PROGRAM_FILE = "ds1000_program.py"
DRIVER_FILE = "ds1000_run.py"

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


# Runs in the sandbox: the test program, exec'd as the official evaluator does, then the marker.
# The marker goes straight to fd 1 (a snippet may have replaced sys.stdout), and os._exit skips
# whatever the snippet left to run at exit (threads, atexit hooks): the official verdict is
# taken when exec returns.
_DRIVER = """import os, sys
with open({program!r}) as f:
    source = f.read()
os.mkdir("work")
os.chdir("work")
exec(compile(source, "<string>", "exec"), {{}})
for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
    try:
        stream.flush()
    except Exception:
        pass
os.write(1, {marker!r}.encode())
os._exit(0)
"""


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
        marker = new_marker()
        return Program(files=((PROGRAM_FILE, official_program(p, code)),
                              (DRIVER_FILE, _DRIVER.format(program=PROGRAM_FILE, marker=f"\n{marker}\n"))),
                       steps=((PYTHON, DRIVER_FILE),), end_marker=marker, env=ENV, libs=support().libs)


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
