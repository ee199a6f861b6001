"""Bash, sealed (`script.py` has the layout). A function's value, to MultiPL-E's Bash tests, is
its standard output as `[[ $(candidate "a" "b") = "expected" ]]` captures it: the bytes it
printed, trailing newlines removed, NUL bytes dropped by the shell. Its exit status and
standard error are not observed (the status of `[[ ]]` is the comparison's, so `set -e` does not
see a failing substitution inside it), and the substitution's subshell keeps every other effect
away from the tests' shell.

The program stage runs the completion, the tests' `candidate` wrapper, `set -e` and
`run_test() {` as the tests do, with each `[[ $(candidate ...) = ... ]]` replaced by a statement
that appends the same `$(candidate ...)`'s result and a NUL byte to the values file (a result
never holds a NUL, so none is ambiguous). The judge runs MultiPL-E's tests unchanged with the
prompt's function printing the next value (read with `read -d ''` before the tests start;
a counter in a file of the judge's directory, since each call runs in its own subshell): the
same captured text, byte for byte. A values file without exactly one value per call ends the
judge before the tests; a call past the last value kills the judge's shell, since a status
inside `$(...)` would go unseen."""

from __future__ import annotations

import re

from easylemur.eval.benchmarks.multipl_e.seals import scan, script

# The tests quote every argument with "..."; a `#` inside an argument is no comment.
SYNTAX = scan.Syntax(quotes="\"'", line_comment="", block_comment=())
CANDIDATE = re.compile(r"\$\(\s*candidate(\s|\))")

DECODER = r"""# easylemur's judge: the program's values, one per call, each ended by a NUL byte (seals/sh.py).
__easylemur_values=() __easylemur_value=
while IFS= read -r -d '' __easylemur_value; do __easylemur_values+=("$__easylemur_value"); __easylemur_value=; done < values
if [[ -n $__easylemur_value ]] || (( ${#__easylemur_values[@]} != @CALLS@ )); then
    echo "easylemur: the program's values cannot be used: ${#__easylemur_values[@]} values for @CALLS@ calls" >&2
    exit 1
fi
__easylemur_count="$PWD/.easylemur-calls"
echo 0 > "$__easylemur_count" || exit 1
__easylemur_next() {
    local k
    read -r k < "$__easylemur_count"
    if [[ ! $k =~ ^[0-9]+$ ]] || (( k >= @CALLS@ )); then
        echo "easylemur: the tests make more calls than the program made" >&2
        kill -KILL $$
        exit 1
    fi
    echo $(( k + 1 )) > "$__easylemur_count"
    printf '%s' "${__easylemur_values[k]}"
}
"""


def find(tests: str, where: str) -> list:
    """The tests' `$(candidate ...)` substitutions, each as a Call spanning "$(" to ")"."""
    return [c for c in scan.calls(tests, ("$",), SYNTAX, where) if CANDIDATE.match(tests, c.start)]


SEAL = script.ScriptSeal(
    comparison=re.compile(r"[ \t]*\[\[[ \t]+"), find=find, record="builtin printf '%s\\0' \"@CALL@\" >> values",
    encoder="", flush="", decoder=DECODER, stub="    __easylemur_next\n")

program = SEAL.program  # languages.build_program's entry point
