"""The seal shared by MultiPL-E's script languages (JavaScript, Bash, Perl: `js.py`, `sh.py`,
`pl.py` beside this module), whose tests are top-level code in one layout:

    HEAD   the test function's start and the `candidate` alias (`let candidate = f;`,
           `candidate() { f "$@"; }` ... `run_test() {`, `my $candidate = \\&f;`)
    CASES  one comparison per call of the function under test, expected values in them
    TAIL   from the line "}" that closes the test function: the call of the test function

Program stage (untrusted): prompt + completion + "\\n" + the language's encoder + HEAD + one
statement per call that records its value + TAIL + the statement that writes the values file +
the print of the program's end marker.
The same calls with the same argument text, in the same order, inside the same test function
and alias, so the candidate runs as the tests would run it; CASES, the only part holding
expected values, is not there.

Judge stage (trusted): the language's decoder + prompt + a stub body + "\\n" + the tests
unchanged + the end marker's statement: MultiPL-E's own comparison on the values the stub hands
back one call after another. The decoder parses the values file (never evaluates it), checks it
holds exactly one value per call, and fails the run (an exception, `die`, a killed shell) on
anything else."""

from __future__ import annotations

import dataclasses
import re
from typing import Callable, Optional

from easylemur.eval.api import EvalDataError
from easylemur.eval.benchmarks.multipl_e.languages import Language, with_marker
from easylemur.eval.benchmarks.multipl_e.seals.scan import Call
from easylemur.eval.sandbox import Judge, Program, new_marker


@dataclasses.dataclass(frozen=True)
class ScriptSeal:
    find: Callable[[str, str], list]  # (tests, where) -> the calls of the function under test, in order
    # what precedes each call on its line: the tests' comparison (the layout the driver assumes)
    comparison: "re.Pattern[str]"
    record: str  # the driver's statement that records one call's value; @CALL@ is the call's text
    encoder: str  # the driver's code before the tests' HEAD (top level, after the completion)
    flush: str  # the driver's last statement: writes the values file ("" when `record` writes it)
    decoder: str  # the judge's code before the prompt: reads and checks the values; @CALLS@ is their count
    stub: str  # the body that replaces the completion in the judge (closing the function where it does)

    def program(self, lang: Language, prompt: str, completion: str, tests: str, where: str = "") -> Program:
        """The sealed Program that judges `completion` of a MultiPL-E problem in `lang` (module docstring)."""
        where = where or lang.name
        calls: list[Call] = self.find(tests, where)
        head, tail = split(tests, calls, lang.title, where, self.comparison)
        first = tests[len(head):calls[0].start]
        indent = first[:len(first) - len(first.lstrip(" \t"))]
        records = "".join(indent + self.record.replace("@CALL@", tests[c.start:c.end]) + "\n" for c in calls)
        # The driver's own marker only tells an early exit apart in the verdict's words ("exited before
        # the tests finished"); its source holds it, so it proves nothing: the judge's marker and values do.
        ran = new_marker()
        driver = (prompt + completion + "\n" + self.encoder + head + records + tail.rstrip("\n") + "\n" + self.flush
                  + lang.print_marker.format(m=ran) + "\n")
        marker = new_marker()
        judge = self.decoder.replace("@CALLS@", str(len(calls))) + with_marker(lang, prompt, self.stub, tests, marker, where)
        return Program(files=((lang.file, driver),), steps=(lang.run,), end_marker=ran, env=lang.env, output_bytes=4096,
                       timeout=lang.timeout,
                       judge=Judge(files=((lang.file, judge),), steps=(lang.run,), end_marker=marker, env=lang.env))


def split(tests: str, calls: list, title: str, where: str,
          comparison: Optional["re.Pattern[str]"] = None) -> tuple[str, str]:
    """(HEAD, TAIL) of `tests` around `calls` (module docstring): HEAD ends where the first
    call's line starts, TAIL starts at the first line "}" after the last call. With
    `comparison`, each call must open its line's comparison: other statements among the cases
    (an older MultiPL-E layout declared the arguments there) would be left out of the driver, so
    they are a data error."""
    if not calls:
        raise EvalDataError(f"{where}: no call of the function under test found in the {title} tests")
    for call in calls if comparison is not None else ():
        line_start = tests.rfind("\n", 0, call.start) + 1
        if not comparison.fullmatch(tests, line_start, call.start):
            line = tests[line_start:].split("\n", 1)[0].strip()
            raise EvalDataError(f"{where}: a call of the {title} tests does not open one of MultiPL-E's "
                                f"comparisons: {line!r}")
    head_end = tests.rfind("\n", 0, calls[0].start) + 1
    at = tests.find("\n", calls[-1].end)
    while at >= 0:
        line_end = tests.find("\n", at + 1)
        line = tests[at + 1:len(tests) if line_end < 0 else line_end]
        if line.rstrip() == "}":
            return tests[:head_end], tests[at + 1:]
        at = line_end
    raise EvalDataError(f"{where}: the {title} tests do not end with 1 closing brace of their test function "
                        "(a line \"}\" after the last call)")
