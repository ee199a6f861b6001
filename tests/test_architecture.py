"""The module graph the design promises: easylemur's modules import each other in one
direction only (no cycle, lazy imports included), and nothing imports the train CLI."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "easylemur"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PKG.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports() -> dict[str, set[str]]:
    """module -> the easylemur modules it imports anywhere in its body (top level or lazily)."""
    modules = {_module_name(p): p for p in PKG.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        deps = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                # `from easylemur import hf` names a module; `from easylemur.x import f` names x
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            else:
                continue
            deps.update(t for t in targets if t in modules and t != name and t != "easylemur")
        graph[name] = deps
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(n: str) -> list[str] | None:
        state[n] = 1
        stack.append(n)
        for d in sorted(graph[n]):
            if state.get(d) == 1:
                return stack[stack.index(d):] + [d]
            if d not in state and (found := visit(d)):
                return found
        stack.pop()
        state[n] = 2
        return None

    for n in sorted(graph):
        if n not in state and (found := visit(n)):
            return found
    return None


def test_no_import_cycle_among_modules():
    graph = _imports()
    assert "easylemur.state" in graph["easylemur.train"]  # the walk sees real edges
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_a_cycle_would_be_found():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_only_the_cli_imports_train():
    importers = sorted(m for m, deps in _imports().items() if "easylemur.train" in deps)
    assert importers == [], importers
