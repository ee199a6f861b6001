"""Go, sealed: the candidate's code and MultiPL-E's tests are compiled and run apart. Go needs it
although its prompts import only "testing" and "fmt" (no `os`, `unsafe`, `reflect` for a
completion, which cannot add an import after the prompt's code): a completion may declare
package-level names that the tests' expected values then mean, since the universe's names can be
shadowed at package level. `const false = true` makes every `expected: false` true, so a
completion that always returns true passes every bool problem under `go test` and in one process;
a completion's `type int int64` with a String method is the `int` of the prompt's signature and
of the tests' `[]int{...}` literals alike, and prints both sides of their `fmt.Sprintf("%v", ...)`
comparison. Apart, the tests are compiled without the completion: `false` is false, `int` is int.

Program stage (untrusted): prompt + completion + "\\n" + a driver: the tests' own head (`func
TestX(t *testing.T) {` and `candidate := f`), then `easylemurPut(candidate(ARGS))` for each call
the tests make (`scan.calls`; same argument text, same order), then `easylemurWrite(...)`,
which writes the values file and prints the program's end marker; `support/el_out.go` beside it
(the same package, in a file of its own that may import what it needs). No expected value is
in it.

Judge stage (trusted, every process of the program gone): prompt + `return
easylemurNext[<declared return type>]()` + "\\n" + MultiPL-E's tests unchanged, their last
statement checking that every value was used and printing the judge's end marker, with
`support/el_in.go`: the tests' own `fmt.Sprintf("%v", ...)` comparison runs on the values
rebuilt as the declared type (the encoding: el_out.go).

Both stages run today's commands (`go test -c`, with its `go vet` checks, then the test
binary). A cold build cache costs each `go test -c` ~1.7 s of vet facts and export data for the
standard library, so the seal fills one once per machine outside the sandbox (`warm_cache`,
`prebuilt.py`: the toolchain and the helper files are trusted) and hands each stage a copy as
files of its working directory at $HOME/.cache/go-build, where the go command finds it. Go's
cache is keyed by the content of every input, so a copy only saves work; a stage that has no
copy builds it cold, the same program."""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from easylemur.eval.api import EvalDataError
from easylemur.eval.benchmarks.multipl_e.languages import LANGUAGES, Language, with_marker
from easylemur.eval.benchmarks.multipl_e.seals import scan
from easylemur.eval.benchmarks.multipl_e.seals.prebuilt import prebuilt
from easylemur.eval.sandbox import SANDBOX_PATH, Judge, Program, new_marker

# Go's literals: "..." and '...' with escapes, raw strings `...`.
SYNTAX = scan.Syntax(quotes="\"'", raw=r"`[^`]*`")
SUPPORT = Path(__file__).resolve().parent / "support"
OUT, IN = "easylemur_out_test.go", "easylemur_in_test.go"  # the helpers' file names in the stages
CACHE = ".cache/go-build"  # where go looks under $HOME when GOCACHE is unset (the runner sets HOME)
PACKAGE = re.compile(r"^\s*package\s+([A-Za-z_]\w*)", re.M)


def program(lang: Language, prompt: str, completion: str, tests: str, where: str = "") -> Program:
    """The sealed Program that judges `completion` of a MultiPL-E Go problem (module docstring)."""
    where = where or lang.name
    package, ret = _package(prompt, where), _return_type(prompt, where)
    calls = scan.calls(tests, ("candidate",), SYNTAX, where)
    if not calls:
        raise EvalDataError(f"{where}: no call of `candidate` found in the Go tests")
    alias = re.search(r"^[ \t]*candidate\s*:=.*\n", tests[:calls[0].start], re.M)
    if alias is None:
        raise EvalDataError(f"{where}: the Go tests do not start with `candidate := <function>`")
    program_marker, judge_marker = new_marker(), new_marker()
    records = "".join(f"    easylemurPut({tests[c.start:c.end]})\n" for c in calls)
    # `fmt` is the prompt's import that only the tests use: the driver keeps it used
    driver = (prompt + completion + "\n" + tests[:alias.end()] + records
              + f'    easylemurWrite("{program_marker}")\n    _ = fmt.Sprint\n}}\n')
    judge_lang = dataclasses.replace(lang, print_marker='    easylemurDone("{m}")')
    judge = with_marker(judge_lang, prompt, f"    return easylemurNext[{ret}]()\n}}\n", tests, judge_marker, where)
    cache = warm_cache()
    # no GOCACHE: go then uses $HOME/.cache/go-build, inside each stage's own working directory
    env = tuple((k, v) for k, v in lang.env if k != "GOCACHE")
    compile_ = lang.compile[0][:-1]  # go test -c -o program.test, then the files
    return Program(files=((lang.file, driver), (OUT, helper("el_out.go", package)), *cache),
                   steps=((*compile_, lang.file, OUT), lang.run), end_marker=program_marker, env=env,
                   output_bytes=4096, timeout=lang.timeout,
                   judge=Judge(files=((lang.file, judge), (IN, helper("el_in.go", package)), *cache),
                               steps=((*compile_, lang.file, IN), lang.run), end_marker=judge_marker, env=env))


def _package(prompt: str, where: str) -> str:
    m = PACKAGE.search(prompt)
    if m is None:
        raise EvalDataError(f"{where}: the Go prompt has no package clause")
    return m.group(1)


def _return_type(prompt: str, where: str) -> str:
    """The declared return type of the function the prompt's last line opens: the text between
    its parameters' closing parenthesis and the final `{`."""
    start = prompt.rstrip().rfind("\nfunc ") + 1
    opened = prompt.find("(", start)
    if prompt.rstrip().endswith("{") and start > 0 and opened > 0:
        ret = prompt.rstrip()[scan.matching(prompt, opened, SYNTAX, where):-1].strip()
        if ret and not ret.startswith("("):  # one result: MultiPL-E's functions return one value
            return ret
    raise EvalDataError(f"{where}: the Go prompt does not end with a function that returns one value "
                        "(`func <name>(<parameters>) <type> {`)")


def helper(name: str, package: str) -> str:
    """The support file `name` (`el_out.go`, `el_in.go`) as a file of Go package `package`."""
    return PACKAGE.sub(f"package {package}", (SUPPORT / name).read_text(), count=1)


@functools.lru_cache(maxsize=None)
def warm_cache() -> tuple:
    """((path under the working dir, bytes), ...): a Go build cache holding what `go test -c`
    builds for the standard library packages of the tests and the helpers (vet facts, export
    data), filled once per machine (`prebuilt`, named for the go command and the helpers) and
    read once per process; () when it cannot be made (no go, no cache folder)."""
    go = shutil.which("go", path=SANDBOX_PATH)
    if go is None:
        return ()
    try:
        version = subprocess.run([go, "env", "GOVERSION", "GOROOT"], capture_output=True, text=True, check=True,
                                 timeout=60, env={"PATH": SANDBOX_PATH, "HOME": tempfile.gettempdir()}).stdout
    except (OSError, subprocess.SubprocessError):
        return ()
    helpers = {OUT: helper("el_out.go", "easylemur_warm_test"), IN: helper("el_in.go", "easylemur_warm_test")}
    lang = LANGUAGES["go"]
    warm = ('package easylemur_warm_test\n\nimport (\n    "testing"\n    "fmt"\n)\n\n'
            "func TestWarm(t *testing.T) {\n    easylemurPut(fmt.Sprint(1))\n    easylemurWrite(\"\")\n"
            "    _ = easylemurNext[[]interface{}]\n    easylemurDone(\"\")\n}\n")

    def build(folder: Path) -> None:
        with tempfile.TemporaryDirectory(prefix="easylemur-go-") as d:
            for name, text in (("warm_test.go", warm), *helpers.items()):
                Path(d, name).write_text(text)
            env = {**dict(lang.env), "PATH": SANDBOX_PATH, "HOME": d, "GOCACHE": str(folder), "GOPATH": f"{d}/go"}
            subprocess.run([go, "test", "-c", "-o", "warm.test", "warm_test.go", *helpers], cwd=d, env=env,
                           capture_output=True, check=True, timeout=600)

    folder = prebuilt("go-cache", (version, os.path.realpath(go), dict(lang.env), helpers, warm), build)
    if not folder:
        return ()
    files = []
    for root, _, names in os.walk(folder):
        for name in sorted(names):
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                files.append((os.path.join(CACHE, os.path.relpath(path, folder)), f.read()))
    return tuple(files)
