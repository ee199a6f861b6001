"""Finding the calls of the function under test in MultiPL-E's tests: the argument text of each
`candidate(...)` (or `$candidate->(...)`, `hasCloseElements(...)`), so a sealed program can make
the same calls in the candidate's process while the expected values stay with the judge. A
scanner that knows the language's string and comment syntax, so a parenthesis, quote or the
name inside a literal is not taken for code."""

from __future__ import annotations

import dataclasses
import re
from typing import Sequence

from easylemur.eval.api import EvalDataError


@dataclasses.dataclass(frozen=True)
class Syntax:
    quotes: str = "\"'"  # characters that open a literal closed by the same character, `\` escaping
    line_comment: str = "//"  # "" for none
    block_comment: tuple = ("/*", "*/")  # () for none
    raw: str = ""  # a regex for other literals, matched at a literal's start (Rust r#"..."#, Java text blocks)


@dataclasses.dataclass(frozen=True)
class Call:
    start: int  # where the callee's name starts
    open: int  # the index of the "(" after it
    end: int  # one past the matching ")"
    args: str  # the text between the parentheses


def _skip_literal(text: str, i: int, syntax: Syntax) -> int:
    """The index just past a literal or comment starting at `i`, or `i` when none starts there."""
    if syntax.raw:
        m = re.compile(syntax.raw, re.S).match(text, i)
        if m:
            return m.end()
    if syntax.line_comment and text.startswith(syntax.line_comment, i):
        end = text.find("\n", i)
        return len(text) if end < 0 else end
    if syntax.block_comment and text.startswith(syntax.block_comment[0], i):
        end = text.find(syntax.block_comment[1], i + len(syntax.block_comment[0]))
        return len(text) if end < 0 else end + len(syntax.block_comment[1])
    q = text[i]
    if q in syntax.quotes:
        j = i + 1
        while j < len(text) and text[j] != q:
            j += 2 if text[j] == "\\" else 1
        return min(j + 1, len(text))
    return i


def matching(text: str, open_at: int, syntax: Syntax, where: str = "") -> int:
    """One past the bracket that closes the one at `open_at` ("(", "[" or "{"), skipping literals."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    stack, i = [], open_at
    while i < len(text):
        j = _skip_literal(text, i, syntax)
        if j != i:
            i = j
            continue
        c = text[i]
        if c in pairs:
            stack.append(pairs[c])
        elif c in ")]}":
            if not stack or stack.pop() != c:
                raise EvalDataError(f"{where}: unbalanced {c!r} at offset {i} of the tests")
            if not stack:
                return i + 1
        i += 1
    raise EvalDataError(f"{where}: the bracket at offset {open_at} of the tests is never closed")


def calls(text: str, names: Sequence[str], syntax: Syntax, where: str = "") -> list[Call]:
    """Every call of one of `names` (each followed, after optional spaces, by "("), in order,
    outside literals and comments; a name must not continue an identifier on its left."""
    found, i = [], 0
    while i < len(text):
        j = _skip_literal(text, i, syntax)
        if j != i:
            i = j
            continue
        name = next((n for n in names if text.startswith(n, i)), None)
        left_ok = i == 0 or not (text[i - 1].isalnum() or text[i - 1] in "_$")
        if name is not None and left_ok:
            k = i + len(name)
            if not (name[-1:].isalnum() or name[-1:] == "_") or k >= len(text) or not (text[k].isalnum() or text[k] == "_"):
                while k < len(text) and text[k] in " \t":
                    k += 1
                if k < len(text) and text[k] == "(":
                    end = matching(text, k, syntax, where)
                    found.append(Call(i, k, end, text[k + 1:end - 1]))
                    i = end
                    continue
        i += 1
    return found
