"""Writes docs/reference/config.md, the config reference, from the schema itself: every key of
`easylemur.config.default_config()`, the per-source keys of `SOURCE_DEFAULTS` (both in
easylemur/config/schema.py) and the `model.*` fields of `LlamaConfig`, each with its default and
the comment beside it (or the comment block just above it) in the source.

    python docs/gen_config_reference.py           # rewrite the page
    python docs/gen_config_reference.py --check   # exit 1 if the page is not current

The mkdocs hook (docs/hooks.py) and tests/test_readme.py run the check, so a key added to the
schema without regenerating the page fails the docs build and the suite.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import io
import sys
import tokenize
from pathlib import Path

PAGE = Path(__file__).resolve().parent / "reference" / "config.md"


def _comments(path: str) -> tuple[dict[int, str], dict[int, str]]:
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


def _comment_of(node: ast.AST, trailing: dict[int, str], alone: dict[int, str]) -> str:
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


def _schema_comments(fn) -> dict[str, tuple[int, str]]:
    """key -> (line, comment), from the assignments in a function's source (default_config)."""
    path = inspect.getsourcefile(fn)
    lines, start = inspect.getsourcelines(fn)
    tree = ast.parse(Path(path).read_text())
    func = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == fn.__name__ and n.lineno == start)
    trailing, alone = _comments(path)
    out = {}
    for node in ast.walk(func):
        if not isinstance(node, ast.Assign):
            continue
        key = _target(node.targets[0])
        if key is None:
            continue
        out[key] = (node.lineno, _comment_of(node, trailing, alone))
        value = node.value
        if isinstance(value, ast.Call) and value.args and isinstance(value.args[0], ast.Dict):
            value = value.args[0]  # ConfigDict({"preset": "tiny"}): its keys, commented where the assignment is
        if isinstance(value, ast.Dict):
            for k in value.keys:
                if isinstance(k, ast.Constant):
                    out[f"{key}.{k.value}"] = (k.lineno, _comment_of(k, trailing, alone) or out[key][1])
    return out


def _dict_comments(module, name: str) -> dict[str, str]:
    """key -> comment of a module-level dict literal NAME (SOURCE_DEFAULTS)."""
    path = inspect.getsourcefile(module)
    trailing, alone = _comments(path)
    for node in ast.parse(Path(path).read_text()).body:
        targets = [node.target] if isinstance(node, ast.AnnAssign) else getattr(node, "targets", [])
        if any(isinstance(t, ast.Name) and t.id == name for t in targets) and isinstance(node.value, ast.Dict):
            out = {}
            for k, v in zip(node.value.keys, node.value.values):
                span = ast.Tuple(elts=[], lineno=k.lineno, end_lineno=v.end_lineno)
                out[k.value] = _comment_of(span, trailing, alone)
            return out
    return {}


def _field_comments(cls) -> dict[str, str]:
    """field -> comment of a dataclass's annotated fields (LlamaConfig)."""
    path = inspect.getsourcefile(cls)
    trailing, alone = _comments(path)
    for node in ast.walk(ast.parse(Path(path).read_text())):
        if isinstance(node, ast.ClassDef) and node.name == cls.__name__:
            return {n.target.id: _comment_of(n, trailing, alone) for n in node.body
                    if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    return {}


def _flat(cfg, prefix: str = "") -> list[tuple[str, object]]:
    out = []
    for key in cfg.keys():
        value = cfg[key]
        if hasattr(value, "keys") and len(value.keys()):
            out += _flat(value, f"{prefix}{key}.")
        else:
            out.append((f"{prefix}{key}", dict(value) if hasattr(value, "keys") else value))
    return out


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("\n", " ")


def _default(value) -> str:
    text = repr(value) if not isinstance(value, str) else '"' + value + '"'
    return "`" + _cell(text) + "`"


def _table(rows: list[tuple[str, object, str]]) -> list[str]:
    out = ["| key | default | what |", "|---|---|---|"]
    out += [f"| `{key}` | {_default(value)} | {_cell(comment)} |" for key, value, comment in rows]
    return out


def descriptions() -> dict[str, str]:
    """Every key of `default_config()` -> the description the page gives it (the comment beside it
    in the schema; "" where there is none, which tests/test_docs_site.py refuses)."""
    import easylemur.config.schema as config

    comments = _schema_comments(config.default_config)
    return {key: comments.get(key, (0, ""))[1] for key, _ in _flat(config.default_config())}


def render() -> str:
    import easylemur.config.schema as config
    from easylemur.model.config import LlamaConfig

    comments = _schema_comments(config.default_config)
    groups: dict[str, list] = {}
    flat = sorted(_flat(config.default_config()), key=lambda kv: (comments.get(kv[0], (1 << 30, ""))[0], kv[0]))  # source order
    for key, value in flat:
        group = key.split(".")[0] if "." in key else "(top level)"
        groups.setdefault(group, []).append((key, value, comments.get(key, (0, ""))[1]))
    lines = [
        "# Config reference",
        "",
        "<!-- generated by docs/gen_config_reference.py from easylemur/config/schema.py; do not edit by hand -->",
        "",
        "Every key of the one schema, `easylemur.config.default_config()`, with its default and the",
        "comment beside it in the source. A config file (`configs/*.py`) sets the keys it changes;",
        "any key can be overridden on every command that takes a config with `--config.KEY=VALUE`",
        "(or `--config.KEY VALUE`). An unknown key, or a value of the wrong type, is an error naming",
        "the key. See the [training guide](../guides/training.md) for how they fit together.",
        "",
    ]
    for group, rows in groups.items():
        lines += [f"## `{group}`" if group != "(top level)" else "## Top level", "", *_table(rows), ""]
    source_comments = _dict_comments(config, "SOURCE_DEFAULTS")
    lines += ["## `data.sources.<name>` and `data.eval_sources.<name>`", "",
              "Each named source of the mixture (and of the held-out eval data) takes these keys",
              "(`SOURCE_DEFAULTS`); a key left out gets the default.", "",
              *_table([(k, v, source_comments.get(k, "")) for k, v in config.SOURCE_DEFAULTS.items()]), ""]
    field_comments = _field_comments(LlamaConfig)
    lines += ["## `model.*` (`LlamaConfig` fields)", "",
              "`model.preset` names a shape (`easylemur.model.config.PRESETS`); any `LlamaConfig` field set",
              "as `model.<field>` applies on top of the preset (or of `init.from`'s architecture). The",
              "defaults below are the dataclass's; a preset sets its own shape.", "",
              *_table([(f"model.{f.name}", f.default, field_comments.get(f.name, ""))
                       for f in dataclasses.fields(LlamaConfig)]), ""]
    return "\n".join(lines + _benchmarks())


def _benchmarks() -> list[str]:
    """The benchmarks `eval.tasks` (and `python -m easylemur.eval`, the suites) accept: the
    registry's rows, so the page lists exactly what the code knows."""
    from easylemur.eval.benchmarks import registry

    lines = ["## Benchmarks", "",
             "The names `eval.tasks` accepts besides `lm_eval:TASK`, from the one table of them",
             "(`easylemur/eval/benchmarks/registry.py`); the same names run with `python -m easylemur.eval`",
             "(single-turn) and in suites. Data: `eval.data_dir` holds it under one of the usual names.", "",
             "| benchmark | name | kind | data under `eval.data_dir` | also from |", "|---|---|---|---|---|"]
    for b in registry.BENCHMARKS.values():
        name = f"`{b.name}:{b.variant_label}` ({', '.join(registry.variants(b))})" if b.variants else f"`{b.name}`"
        data = ", ".join(f"`{d}`" for d in b.data) or "—"
        also = ([f"`eval.{b.config_key}`"] if b.config_key else []) + (["its package (shipped)"] if b.shipped else [])
        lines.append(f"| {b.title or b.name} | {name} | {b.kind} | {data} | {', '.join(also) or '—'} |")
    return lines + [""]


def main(argv: list[str]) -> int:
    text = render()
    if "--check" in argv:
        if not PAGE.is_file() or PAGE.read_text() != text:
            print(f"{PAGE} is not current: run python docs/gen_config_reference.py", file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
