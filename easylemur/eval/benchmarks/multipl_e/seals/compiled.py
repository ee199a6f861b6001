"""The layout shared by the seals of MultiPL-E's C++ and Rust (`cpp.py`, `rs.py`), whose tests
close the prompt's function and then assert in a `main`:

    HEAD   "}", `int main() {` / `fn main() {` and the `candidate` alias
    CASES  `assert(candidate(...) == ...);` / `assert_eq!(candidate(...), ...);`, one per call
    TAIL   the line "}" that closes `main`

Program stage (untrusted), compiled and run: prompt + completion + "\\n" + HEAD + one statement
per call that records its value (the call's own text, in order) + the statement that writes the
values file and prints the program's end marker + TAIL. CASES, the only part holding expected
values, is not there.

Judge stage (trusted), compiled and run in a fresh directory once every process of the program
is gone: prompt + a stub body that returns the next value + "\\n" + the tests unchanged, with the
statement that checks every value was used and prints the judge's end marker as the last of
`main` (`languages.with_marker`). Tests outside that layout (a call that does not open a
comparison, a call inside another's arguments) are a data error: the driver would not make the
calls the judge's stub answers."""

from __future__ import annotations

import dataclasses
import re

from easylemur.eval.api import EvalDataError
from easylemur.eval.benchmarks.multipl_e.languages import Language, with_marker
from easylemur.eval.benchmarks.multipl_e.seals import scan, script
from easylemur.eval.sandbox import Judge, Program, new_marker


@dataclasses.dataclass(frozen=True)
class Layout:
    syntax: scan.Syntax  # the language's literals and comments, for finding the calls
    comparison: "re.Pattern[str]"  # what precedes each call on its line
    record: str  # the driver's statement recording one call's value; {call} is the call's text
    flush: str  # the driver's last statement: writes the values, prints the marker {m}
    done: str  # the judge's last statement (a line of its own): checks, then prints the marker {m}


def program(layout: Layout, lang: Language, prompt: str, completion: str, tests: str, where: str, *, stub: str,
            driver_prompt: str = "", tail: str = "", files: tuple = (), flags: tuple = (),
            ro_paths: tuple = ()) -> Program:
    """The sealed Program (module docstring). `stub`: the judge's body of the prompt's function;
    `driver_prompt`: the driver's copy of the prompt (default the prompt); `tail`: text after
    both programs; `files`: more files of both stages; `flags`: added to the compile command."""
    calls = scan.calls(tests, ("candidate",), layout.syntax, where)
    for c in calls:  # the driver records the calls it makes; one inside another's arguments it would not
        if scan.calls(c.args, ("candidate",), layout.syntax, where):
            raise EvalDataError(f"{where}: a call of the {lang.title} tests holds another in its arguments: "
                                f"{tests[c.start:c.end][:200]!r}")
    head, rest = script.split(tests, calls, lang.title, where, layout.comparison)
    first = tests[len(head):calls[0].start]
    indent = first[:len(first) - len(first.lstrip(" \t"))] or "    "
    ran, marker = new_marker(), new_marker()
    records = "".join(indent + layout.record.format(call=tests[c.start:c.end]) + "\n" for c in calls)
    # The driver's own marker only tells an early exit apart in the verdict's words ("exited before
    # the tests finished"); its source holds it, so it proves nothing: the judge's marker and values do.
    driver = ((driver_prompt or prompt) + completion + "\n" + head + records + indent + layout.flush.format(m=ran)
              + "\n" + rest + tail)
    judge = with_marker(dataclasses.replace(lang, print_marker=layout.done), prompt, stub, tests, marker, where) + tail
    steps = ((*lang.compile[0], *flags), lang.run)
    return Program(files=((lang.file, driver), *files), steps=steps, end_marker=ran, env=lang.env, output_bytes=4096,
                   timeout=lang.timeout, ro_paths=ro_paths,
                   judge=Judge(files=((lang.file, judge), *files), steps=steps, end_marker=marker, env=lang.env))
