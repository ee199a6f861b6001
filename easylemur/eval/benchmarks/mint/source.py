"""String constants read out of MINT's own Python files by their syntax tree (never executed),
so the messages MINT's environment writes (its invalid-action text, the observation's lines,
the tool header, the stop words) come from MINT's files, not from a copy typed into easylemur.

A name that is missing or has another shape is a `MintFilesError` naming the file and the
name: a MINT commit other than the pinned one that moved a text is refused, not guessed at."""

from __future__ import annotations

import ast
from typing import Any

from easylemur.errors import InputError


class MintFilesError(InputError):
    """MINT's files are missing, or one does not hold what MINT's pinned commit holds."""


def _tree(text: str, where: str) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as e:
        raise MintFilesError(f"{where}: not Python ({e.msg}, line {e.lineno})") from None


def _scope(tree: ast.Module, qualname: str, where: str) -> ast.AST:
    """The module (qualname "") or the class / function `A.b` inside it."""
    node: ast.AST = tree
    for part in [p for p in qualname.split(".") if p]:
        body = getattr(node, "body", [])
        found = next((n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef)) and n.name == part), None)
        if found is None:
            raise MintFilesError(f"{where}: no {qualname} (MINT's pinned commit has it)")
        node = found
    return node


def _target_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_target_name(node.value)}.{node.attr}"
    return ""


def assigned(text: str, where: str, qualname: str, target: str) -> Any:
    """The literal value assigned to `target` (e.g. "INVALID_INPUT_MESSAGE", "self.stop_words") by
    a statement directly in the scope `qualname` ("" for the module)."""
    scope = _scope(_tree(text, where), qualname, where)
    for node in getattr(scope, "body", []):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if getattr(node, "value", None) is not None and any(_target_name(t) == target for t in targets):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                raise MintFilesError(f"{where}: {target} in {qualname or 'the module'} is not a literal") from None
    raise MintFilesError(f"{where}: no assignment to {target} in {qualname or 'the module'}")


def strings(text: str, where: str, qualname: str) -> list[str]:
    """Every plain string constant in the function `qualname`, in source order: its docstring
    and the literal parts of f-strings left out."""
    scope = _scope(_tree(text, where), qualname, where)
    skip: set[int] = set()
    body = getattr(scope, "body", [])
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        skip.add(id(body[0].value))
    for node in ast.walk(scope):
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
    found = [n for n in ast.walk(scope) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]
    found.sort(key=lambda n: (n.lineno, n.col_offset))
    return [n.value for n in found]


def the_string(text: str, where: str, qualname: str, *, starting: str = "", ending: str = "", first: bool = False) -> str:
    """The one non-blank string constant of `qualname` that starts with `starting` and ends with
    `ending`, or with `first`, the first of them in source order."""
    hits = [s for s in strings(text, where, qualname) if s.strip() and s.startswith(starting) and s.endswith(ending)]
    if not hits or (len(hits) > 1 and not first):
        raise MintFilesError(f"{where}: {qualname} has {len(hits)} strings like {starting!r}...{ending!r}, "
                             "MINT's pinned commit has one")
    return hits[0]
