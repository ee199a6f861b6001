"""Code as Policies' RoboCodeGen notebook read by the syntax trees of its code cells, never run
on the host: what the model is told and what judges it are the notebook's own.

- The setup cell (the one that defines `eval_test`): the query each problem is asked with
  (`lmp_fgen_batch`'s f-string, `# define function: {f_sig}.`), how it follows the prompt
  (`lmp_batch`'s `f'{base_prompt}\\n{cmd}'`), the stop tokens (`lmp_fgen_batch`'s default
  `stop_tokens`), the token budget (`default_query_kwargs`' `max_tokens`), and the source of
  `merge_dicts`, `exec_safe` (how a completion becomes a function: the banned phrases, `exec`
  and `eval` blanked) and `eval_test` (the test: the reference and the generated function on
  each test input, compared by the problem's `test_equiv`), which run in the sandbox.
- The prompt cell (the one that assigns `prompt_f_gen_exec`): the few-shot prompts
  `prompt_f_gen_flat` and `prompt_f_gen` (each a string literal, `.strip()`ed) and the context
  the generated code runs with: the string the cell `exec`s into `context_vars`.
- The problems cell (the one that assigns `all_problems`): the problems in `all_problems`'
  order, each a dict literal whose `f_name` and `f_sig` are read here; the cell itself is run in
  the sandbox (its references, inputs and tests are Python: lambdas, `np.random` draws, shapely
  shapes); and what it adds to `context_vars` (`get_obj_outer_pts_np`: a lookup into a table the
  cell builds, handed to the generated code as that table's values, never as the cell's code).

A cell or a name that is missing, or has another shape than at the pinned commit, is a
`PublishedFilesError` naming the notebook: refused, not guessed at."""

from __future__ import annotations

import ast
import copy
import dataclasses
import functools
import json
from typing import Any, Optional

from easylemur.eval.benchmarks.published import PublishedFilesError, scope
from easylemur.eval.benchmarks.robocodegen.files import notebook_text

KEYS = ("f_name", "f_sig", "f_sol", "test_input_args", "test_equiv")  # every problem's dict has these


@dataclasses.dataclass(frozen=True)
class RcgProblem:
    task_id: str  # the function's name (`f_name`): unique, as the notebook's results name a problem
    f_sig: str  # "idx = get_top_most_idx(points_np)"
    solution: str = ""  # the reference (`f_sol`) written as a completion defining `f_name`; "" if not derivable

    @property
    def f_name(self) -> str:
        return self.task_id


@dataclasses.dataclass(frozen=True)
class CapNotebook:
    where: str
    prompt_flat: str  # prompt_f_gen_flat: the few-shot prompt of flat code generation
    prompt_hierarchical: str  # prompt_f_gen: the hierarchical prompt (its examples call undefined helpers)
    context: str  # the code exec'd into context_vars: what a generated function's globals hold
    stops: tuple  # lmp_fgen_batch's stop tokens
    max_tokens: int  # default_query_kwargs' max_tokens
    problems_source: str  # the problems cell, run in the sandbox
    candidate_harness: str  # merge_dicts and exec_safe, run in the sandbox around the completion
    judge_harness: str  # eval_test, run in the sandbox's judge
    lookups: tuple  # ((context_vars key, name of the table it looks up), ...)
    problems: tuple  # RcgProblem, in all_problems' order
    _query: ast.JoinedStr = dataclasses.field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    _join: ast.JoinedStr = dataclasses.field(repr=False, compare=False, default=None)  # type: ignore[assignment]

    def query(self, f_sig: str) -> str:
        """The line a problem is asked with: `# define function: {f_sig}.`"""
        return render(self._query, {"f_sig": f_sig}, self.where)

    def prompt(self, base_prompt: str, query: str) -> str:
        """The completion prompt: the few-shot prompt, then the query (`lmp_batch`'s f-string)."""
        return render(self._join, {"base_prompt": base_prompt, "cmd": query}, self.where)


def render(node: ast.JoinedStr, names: dict, where: str) -> str:
    """An f-string whose placeholders are plain names, as Python renders it with `names`."""
    out = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            out.append(part.value)
        elif (isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name) and part.value.id in names
              and part.format_spec is None):
            value = names[part.value.id]
            out.append({-1: str, 115: str, 114: repr, 97: ascii}[part.conversion](value))
        else:
            raise PublishedFilesError(f"{where}: a placeholder {ast.unparse(part)!r} this reader does not know")
    return "".join(out)


def _cells(text: str, where: str) -> list[tuple[str, ast.Module]]:
    """(source, tree) of every code cell that is Python (a cell of shell magics is left out)."""
    try:
        cells = json.loads(text)["cells"]
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise PublishedFilesError(f"{where}: not a Jupyter notebook ({type(e).__name__}: {e})") from None
    out = []
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        try:
            out.append((source, ast.parse(source)))
        except (SyntaxError, ValueError):
            continue
    return out


def _defines(tree: ast.Module, name: str) -> bool:
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in tree.body) or _assignment(tree, name) is not None


def _assignment(tree: ast.Module, name: str) -> Optional[ast.expr]:
    """The value of the top-level `name = ...` of `tree` (the last one), or None."""
    found = None
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            found = node.value
    return found


def _cell(cells: list, name: str, where: str) -> tuple[str, ast.Module]:
    hits = [c for c in cells if _defines(c[1], name)]
    if len(hits) != 1:
        raise PublishedFilesError(f"{where}: {len(hits)} code cells define {name}, the pinned commit has one")
    return hits[0]


def _stripped_string(tree: ast.Module, name: str, where: str) -> str:
    """`name = '''...'''.strip()` (or a plain string literal) at the top of the cell."""
    value = _assignment(tree, name)
    if (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "strip"
            and not value.args and isinstance(value.func.value, ast.Constant) and isinstance(value.func.value.value, str)):
        return value.func.value.value.strip()
    if isinstance(value, ast.Constant) and isinstance(value.value, str):
        return value.value
    raise PublishedFilesError(f"{where}: {name} is not a string literal (the pinned commit's is)")


def _fstring(tree: ast.Module, where: str, qualname: str, placeholders: tuple) -> ast.JoinedStr:
    """The one f-string of `qualname` whose placeholders are exactly the names `placeholders`."""
    node = scope(tree, qualname, where)
    hits = [n for n in ast.walk(node) if isinstance(n, ast.JoinedStr)
            and tuple(v.value.id for v in n.values if isinstance(v, ast.FormattedValue)
                      and isinstance(v.value, ast.Name)) == placeholders
            and all(isinstance(v, ast.Constant) or isinstance(v.value, ast.Name) for v in n.values)]
    if len(hits) != 1:
        raise PublishedFilesError(f"{where}: {qualname} has {len(hits)} f-strings of {', '.join(placeholders)}, "
                                  "the pinned commit has one")
    return hits[0]


def _default(tree: ast.Module, where: str, function: str, arg: str) -> Any:
    f = scope(tree, function, where)
    assert isinstance(f, ast.FunctionDef)
    args = f.args.args
    defaults = dict(zip([a.arg for a in args[len(args) - len(f.args.defaults):]], f.args.defaults))
    try:
        return ast.literal_eval(defaults[arg])
    except (KeyError, ValueError):
        raise PublishedFilesError(f"{where}: {function}'s {arg} has no literal default (the pinned commit's has)") from None


def _source(text: str, tree: ast.Module, where: str, names: tuple) -> str:
    """The sources of the top-level functions `names` of a cell, in that order."""
    out = []
    for name in names:
        node = scope(tree, name, where)
        out.append(ast.get_source_segment(text, node) or "")
    return "\n\n".join(out) + "\n"


def _problem_dicts(tree: ast.Module, where: str) -> list[ast.Dict]:
    """The problems' dict literals, in `all_problems = a + b + ...`'s order."""
    value = _assignment(tree, "all_problems")
    parts: list[ast.expr] = []
    while isinstance(value, ast.BinOp) and isinstance(value.op, ast.Add):
        parts.insert(0, value.right)
        value = value.left
    parts.insert(0, value)  # type: ignore[arg-type]
    out = []
    for part in parts:
        listed = _assignment(tree, part.id) if isinstance(part, ast.Name) else None
        if not isinstance(listed, ast.List) or not all(isinstance(d, ast.Dict) for d in listed.elts):
            raise PublishedFilesError(f"{where}: all_problems is not a sum of lists of problem dicts")
        out += listed.elts
    return out


def _fields(d: ast.Dict, where: str) -> dict:
    fields = {k.value: v for k, v in zip(d.keys, d.values) if isinstance(k, ast.Constant)}
    if any(k not in fields for k in KEYS) or not all(isinstance(fields[k], ast.Constant) and isinstance(fields[k].value, str)
                                                     for k in ("f_name", "f_sig")):
        raise PublishedFilesError(f"{where}: a problem lacks one of {', '.join(KEYS)} or has a name that is not a string")
    return fields


def _lookups(tree: ast.Module, where: str) -> tuple:
    """What the problems cell adds to context_vars: `context_vars[KEY] = NAME` where
    `NAME = lambda x: TABLE[x]`, as (KEY, TABLE)."""
    out = []
    for node in tree.body:
        if not (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Subscript)
                and isinstance(node.targets[0].value, ast.Name) and node.targets[0].value.id == "context_vars"):
            continue
        key, value = node.targets[0].slice, node.value
        lam = _assignment(tree, value.id) if isinstance(value, ast.Name) else None
        if not (isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(lam, ast.Lambda)
                and len(lam.args.args) == 1 and isinstance(lam.body, ast.Subscript)
                and isinstance(lam.body.value, ast.Name) and isinstance(lam.body.slice, ast.Name)
                and lam.body.slice.id == lam.args.args[0].arg):
            raise PublishedFilesError(f"{where}: the problems cell adds to context_vars something other than a table "
                                      "lookup (the pinned commit adds get_obj_outer_pts_np)")
        out.append((key.value, lam.body.value.id))
    return tuple(out)


def _helpers(tree: ast.Module) -> dict[str, ast.stmt]:
    """The cell's top-level functions: defs and `name = lambda ...`."""
    out: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            out[node.name] = node
        elif (isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)
              and isinstance(node.value, ast.Lambda)):
            out[node.targets[0].id] = node
    return out


def _solution(f_name: str, f_sol: ast.expr, tree: ast.Module, context_keys: set) -> str:
    """The reference `f_sol` written as a completion that defines `f_name` (a lambda as a def
    returning its body; a function of the cell with the cell's functions it calls nested in it,
    since a completion's own helpers are not in its globals); "" when it is something else."""
    helpers = _helpers(tree)
    if isinstance(f_sol, ast.Name) and isinstance(helpers.get(f_sol.id), ast.Assign):
        f_sol = helpers[f_sol.id].value  # type: ignore[attr-defined]
    if isinstance(f_sol, ast.Lambda):
        return f"\ndef {f_name}({ast.unparse(f_sol.args)}):\n    return {ast.unparse(f_sol.body)}\n"
    if not (isinstance(f_sol, ast.Name) and isinstance(helpers.get(f_sol.id), ast.FunctionDef)):
        return ""
    main = copy.deepcopy(helpers[f_sol.id])
    assert isinstance(main, ast.FunctionDef)
    main.name = f_name
    needed: list[str] = []
    todo = [helpers[f_sol.id]]
    while todo:
        for n in ast.walk(todo.pop()):
            if (isinstance(n, ast.Name) and n.id in helpers and n.id != f_sol.id and n.id not in needed
                    and n.id not in context_keys):
                needed.append(n.id)
                todo.append(helpers[n.id])
    main.body = [copy.deepcopy(helpers[n]) for n in needed] + main.body
    return "\n" + ast.unparse(main) + "\n"


@functools.lru_cache(maxsize=8)
def _read(text: str, where: str) -> CapNotebook:
    cells = _cells(text, where)
    setup_text, setup = _cell(cells, "eval_test", where)
    prompt_text, prompts = _cell(cells, "prompt_f_gen_exec", where)
    problems_text, problems = _cell(cells, "all_problems", where)
    execs = [n.value for n in prompts.body if isinstance(n, ast.Expr) and isinstance(n.value, ast.Call)
             and isinstance(n.value.func, ast.Name) and n.value.func.id == "exec" and len(n.value.args) == 2
             and isinstance(n.value.args[0], ast.Name) and isinstance(n.value.args[1], ast.Name)
             and n.value.args[1].id == "context_vars"]
    if len(execs) != 1:
        raise PublishedFilesError(f"{where}: the prompt cell does not exec one string into context_vars "
                                  "(the pinned commit execs prompt_f_gen_exec)")
    kwargs = _assignment(setup, "default_query_kwargs")
    try:
        max_tokens = int(ast.literal_eval(kwargs)["max_tokens"])  # type: ignore[arg-type]
    except (ValueError, KeyError, TypeError):
        raise PublishedFilesError(f"{where}: default_query_kwargs has no literal max_tokens") from None
    stops = _default(setup, where, "lmp_fgen_batch", "stop_tokens")
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise PublishedFilesError(f"{where}: lmp_fgen_batch's stop_tokens is not a list of strings")
    lookups = _lookups(problems, where)
    keys = {k for k, _ in lookups}
    out: list[RcgProblem] = []
    for d in _problem_dicts(problems, where):
        fields = _fields(d, where)
        f_name = fields["f_name"].value
        out.append(RcgProblem(f_name, fields["f_sig"].value, _solution(f_name, fields["f_sol"], problems, keys)))
    if len({p.f_name for p in out}) != len(out) or not out:
        raise PublishedFilesError(f"{where}: the problems' f_name are not unique (or there are none)")
    return CapNotebook(
        where=where, prompt_flat=_stripped_string(prompts, "prompt_f_gen_flat", where),
        prompt_hierarchical=_stripped_string(prompts, "prompt_f_gen", where),
        context=_stripped_string(prompts, execs[0].args[0].id, where),  # type: ignore[attr-defined]
        stops=tuple(stops), max_tokens=max_tokens, problems_source=problems_text,
        candidate_harness=_source(setup_text, setup, where, ("merge_dicts", "exec_safe")),
        judge_harness=_source(setup_text, setup, where, ("eval_test",)), lookups=lookups, problems=tuple(out),
        _query=_fstring(setup, where, "lmp_fgen_batch", ("f_sig",)),
        _join=_fstring(setup, where, "lmp_batch", ("base_prompt", "cmd")))


def load_notebook(data: Optional[str] = None) -> CapNotebook:
    """The notebook of `data` (files.notebook_text), read once per text."""
    text, where = notebook_text(data)
    return _read(text, where)

