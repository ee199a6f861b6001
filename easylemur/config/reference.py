"""The config schema's own descriptions: the comment beside each key (or the comment block just
above it) in easylemur/config/schema.py, read from the source, so that `--help-config` and the
generated reference (docs/gen_config_reference.py) say exactly what the schema says."""

from __future__ import annotations

import ast
import inspect
import io
import tokenize
from pathlib import Path
from typing import Any


def comments(path: str) -> tuple[dict[int, str], dict[int, str]]:
    """(trailing comment of each line, comment-only text of each line) of a source file."""
    trailing, alone = {}, {}
    code_lines = set()
    for tok in tokenize.generate_tokens(io.StringIO(Path(path).read_text()).readline):
        if tok.type == tokenize.COMMENT:
            text = tok.string.lstrip("#").strip()
            (trailing if tok.start[0] in code_lines else alone)[tok.start[0]] = text
        elif tok.type not in (tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENCODING):
            code_lines.update(range(tok.start[0], tok.end[0] + 1))
    return trailing, alone


def comment_of(node: ast.AST, trailing: dict[int, str], alone: dict[int, str]) -> str:
    """The comment on a node's line(s), else the block of comment lines right above it."""
    for line in range(node.lineno, (node.end_lineno or node.lineno) + 1):
        if line in trailing:
            return trailing[line]
    block, line = [], node.lineno - 1
    while line in alone:
        block.insert(0, alone[line])
        line -= 1
    return " ".join(block)


def _target(node: ast.AST) -> str | None:
    """c.a.b -> "a.b", c.a["b"] -> "a.b"; else None."""
    parts = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.insert(0, node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant):
            parts.insert(0, str(node.slice.value))
            node = node.value
        elif isinstance(node, ast.Name):
            return ".".join(parts) if parts else None
        else:
            return None


def schema_comments(fn) -> dict[str, tuple[int, str]]:
    """key -> (line, comment), from the assignments in a function's source (default_config)."""
    path = inspect.getsourcefile(fn)
    lines, start = inspect.getsourcelines(fn)
    tree = ast.parse(Path(path).read_text())
    func = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == fn.__name__ and n.lineno == start)
    trailing, alone = comments(path)
    out = {}
    for node in ast.walk(func):
        if not isinstance(node, ast.Assign):
            continue
        key = _target(node.targets[0])
        if key is None:
            continue
        out[key] = (node.lineno, comment_of(node, trailing, alone))
        value = node.value
        if isinstance(value, ast.Call) and value.args and isinstance(value.args[0], ast.Dict):
            value = value.args[0]  # ConfigDict({"preset": "tiny"}): its keys, commented where the assignment is
        if isinstance(value, ast.Dict):
            for k in value.keys:
                if isinstance(k, ast.Constant):
                    out[f"{key}.{k.value}"] = (k.lineno, comment_of(k, trailing, alone) or out[key][1])
    return out


def dict_comments(module, name: str) -> dict[str, str]:
    """key -> comment of a module-level dict literal NAME (SOURCE_DEFAULTS)."""
    path = inspect.getsourcefile(module)
    trailing, alone = comments(path)
    for node in ast.parse(Path(path).read_text()).body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and isinstance(node.value, ast.Dict):
            out = {}
            for k, v in zip(node.value.keys, node.value.values):
                span = ast.Tuple(elts=[], lineno=k.lineno, end_lineno=v.end_lineno)
                out[k.value] = comment_of(span, trailing, alone)
            return out
    return {}


def field_comments(cls) -> dict[str, str]:
    """field -> comment of a dataclass's annotated fields (LlamaConfig)."""
    path = inspect.getsourcefile(cls)
    trailing, alone = comments(path)
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            return {n.target.id: comment_of(n, trailing, alone) for n in node.body
                    if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    return {}


def flat(cfg: Any, prefix: str = "") -> list[tuple[str, object]]:
    """(dotted key, default) of every leaf of a ConfigDict, in its order."""
    out = []
    for key in cfg.keys():
        value = cfg[key]
        if hasattr(value, "keys") and len(value.keys()):
            out += flat(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", dict(value) if hasattr(value, "keys") else value))
    return out


def descriptions() -> dict[str, str]:
    """Every key of `default_config()` -> the description the page gives it (the comment beside it
    in the schema; "" where there is none, which tests/test_docs_site.py refuses)."""
    import easylemur.config.schema as config

    comments = schema_comments(config.default_config)
    return {key: comments.get(key, (0, ""))[1] for key, _ in flat(config.default_config())}


def help_text() -> str:
    """`--help-config`: every key with its default and description, one per line, grouped as the
    schema is."""
    import easylemur.config.schema as config

    where = schema_comments(config.default_config)
    text = descriptions()
    rows = sorted(((k, v, text[k]) for k, v in flat(config.default_config())),
                  key=lambda r: (where.get(r[0], (1 << 30, ""))[0], r[0]))  # the schema's order
    width = min(44, max(len(k) for k, _, _ in rows))
    lines = ["Every config key (override with --config.KEY=VALUE; the reference: docs/reference/config.md)", ""]
    for key, value, text in rows:
        default = repr(value) if not isinstance(value, str) else f'"{value}"'
        lines.append(f"{key:<{width}} = {default}")
        if text:
            lines.append(f"    {text}")
    lines += ["", "data.sources.<name> / data.eval_sources.<name> take: " + ", ".join(config.SOURCE_DEFAULTS),
              "model.<field>: any LlamaConfig field (easylemur/model/config.py), over the preset or init.from"]
    return "\n".join(lines)
