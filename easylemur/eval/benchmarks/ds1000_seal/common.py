"""What DS-1000's trusted stages share (`inputs.py` before the candidate's code runs, `judge.py`
after every process of it is gone): the file names, which `exec` of a test program is the
candidate's, and the assertions that end an `exec_context`, held back from the candidate's process.

Some `exec_context`s end in assertions of their own (`assert preprocess("aBc") == "ABC"`,
`assert os.path.exists("sklearn_model")`). They run in the judge: the candidate's process gets the
code without them and evaluates only their operands that read its names (the "leaves": calls,
names, attributes), in its own namespace, and sends the values as data; the judge evaluates the
`and`/`or`/`not` and the comparisons itself, and the literals the leaves are compared with never
reach the candidate. Standard library only: it runs in the sandbox's interpreter, as a file of
the sealed program."""

import ast
import builtins
import operator
import sys

CONTEXT = "ds1000_context.py"  # code_context: in the inputs step and the judge, never beside the candidate
PROGRAM = "ds1000_program.py"  # the official test program, the judge's
SNIPPET = "ds1000_snippet.py"  # the candidate's snippet, as the test program's `code` string
CASES = "ds1000_cases.pickle"  # what the inputs step hands the candidate's driver
VALUES = "values"  # what the candidate's driver hands the judge (sandbox.Judge's file)

COMPARE = {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Lt: operator.lt, ast.LtE: operator.le,
           ast.Gt: operator.gt, ast.GtE: operator.ge, ast.Is: operator.is_, ast.IsNot: operator.is_not,
           ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}


def candidate_exec(env: object) -> bool:
    """Whether an `exec(code, env)` of the test program runs the candidate's code: DS-1000's
    `test_execution` execs `exec_context` with the snippet in `{"test_input": ...}`; any other
    exec is the test program's own and runs where it is."""
    return type(env) is dict and "test_input" in env


def own_exec(code, env, local) -> None:
    """An exec of the test program's own (not the candidate's), as the builtin runs it: with no
    namespace given, in the scope of the code that called `exec` (two frames up: the hook's caller)."""
    frame = sys._getframe(2)
    return builtins.exec(code, frame.f_globals if env is None else env,
                         (frame.f_locals if env is None else env) if local is None else local)


def split(code: str) -> tuple:
    """(the code the candidate runs, the assertions held back): the top-level `assert` statements
    that end `code`, each as a tree (`tree`), and the leaves' source texts in order."""
    try:
        body = ast.parse(code).body
    except (SyntaxError, ValueError):
        return code, [], []  # the candidate's exec raises it, as the official one does
    k = len(body)
    while k > 0 and type(body[k - 1]) is ast.Assert:
        k -= 1
    if k == len(body):
        return code, [], []
    lines = code.splitlines(keepends=True)
    first = body[k]
    start = sum(len(line) for line in lines[:first.lineno - 1])
    start += len(lines[first.lineno - 1].encode()[:first.col_offset].decode())  # col_offset counts UTF-8 bytes
    leaves = []
    trees = [tree(node.test, code, leaves) for node in body[k:]]
    return code[:start], trees, leaves


def tree(node, code: str, leaves: list) -> list:
    """An assertion's test as the judge evaluates it: ["and"|"or", [trees]], ["not", tree],
    ["cmp", [trees], [operators]], ["const", source] (a literal: the judge reads it with
    ast.literal_eval, never running it) or ["leaf", i] (leaves[i] is its source: the candidate
    evaluates it). The assertions that end the code may be the snippet's own (when nothing of
    exec_context follows it), so nothing here is run in the judge but literals."""
    t = type(node)
    if t is ast.BoolOp:
        return ["and" if type(node.op) is ast.And else "or", [tree(x, code, leaves) for x in node.values]]
    if t is ast.UnaryOp and type(node.op) is ast.Not:
        return ["not", tree(node.operand, code, leaves)]
    if t is ast.Compare and all(type(op) in COMPARE for op in node.ops):
        return ["cmp", [tree(x, code, leaves) for x in [node.left] + node.comparators], [type(op) for op in node.ops]]
    source = ast.get_source_segment(code, node)
    try:
        ast.literal_eval(node)  # a literal only (the snippet's own assertions come here too: nothing it could run)
        return ["const", source]
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        pass
    leaves.append("(" + source + "\n)")  # parenthesized: a leaf may span lines
    return ["leaf", len(leaves) - 1]
