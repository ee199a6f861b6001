"""The layering the design promises (docs/design.md, "Architecture"), checked on the import
graph (top-level and lazy imports alike): no cycle; the model imports no data, checkpoint,
conversion, run or serving code; checkpoint storage and the ops import no model; data imports
no run; chat (easylemur/chat/) imports nothing above it and the tokenizer no data; the workdir
lock needs no orbax; the storage layer (easylemur/storage.py) is the base floor and the one place
a path is judged a URL; nothing imports a command's entry point; the
architecture tree in docs/design.md lists exactly the package's files."""

import ast
import re
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "easylemur"
DESIGN = PKG.parent / "docs" / "design.md"


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
                # `from easylemur.x import y` names the module x.y when there is one, else x
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            else:
                continue
            deps.update(t for t in targets if t in modules and t != name and t != "easylemur")
        graph[name] = deps
    return graph


def _closure(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for d in graph[todo.pop()]:
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen


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


def _in(pkg: str, module: str) -> bool:
    return module == pkg or module.startswith(pkg + ".")


def test_no_import_cycle_among_modules():
    graph = _imports()
    assert "easylemur.train.start" in graph["easylemur.train.loop"]  # the walk sees real edges
    assert _cycle(graph) is None, " -> ".join(_cycle(graph))


def test_a_cycle_would_be_found():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


# what the evaluation's floors below the backends never reach: the model side and the config
BELOW_BACKENDS = ("easylemur.model", "easylemur.generate", "easylemur.serve", "easylemur.train", "easylemur.config",
                  "easylemur.sharding", "easylemur.ops", "easylemur.checkpoint", "easylemur.convert")

# The config checks eval.tasks against the benchmark registry (standard library only: the table, the
# contracts and the sandbox's types, the agent's feedback kinds), so whatever loads a config reaches
# those; the benchmarks themselves, the backends, the runs and the CLI stay out of its reach.
EVAL_ABOVE_THE_REGISTRY = ("easylemur.eval.backends", "easylemur.eval.runs", "easylemur.eval.cli",
                           *(f"easylemur.eval.benchmarks.{p.stem}" for p in (PKG / "eval" / "benchmarks").iterdir()
                             if p.stem not in ("__init__", "registry", "__pycache__")))

# (importer package, packages it may not reach, even through another module)
LAYERS = [
    # the base floor: local or bucket storage, which every layer uses, imports nothing of easylemur but errors
    ("easylemur.storage", ("easylemur.model", "easylemur.ops", "easylemur.data", "easylemur.checkpoint",
                           "easylemur.convert", "easylemur.train", "easylemur.generate", "easylemur.eval",
                           "easylemur.serve", "easylemur.tokenizer", "easylemur.config", "easylemur.sharding",
                           "easylemur.host", "easylemur.aot")),
    # chat (formats, ChatML, model templates, the renderer, the one template rule): below the tokenizer,
    # which writes ChatML's template; it takes a tokenizer as an argument and imports none
    ("easylemur.chat", ("easylemur.model", "easylemur.ops", "easylemur.data", "easylemur.checkpoint",
                        "easylemur.convert", "easylemur.train", "easylemur.generate", "easylemur.eval",
                        "easylemur.serve", "easylemur.tokenizer", "easylemur.config", "easylemur.sharding",
                        "easylemur.host", "easylemur.aot")),
    # what a run reports (metrics.jsonl, TensorBoard, W&B): below the run and the evals, which both write through it
    ("easylemur.tracker", ("easylemur.model", "easylemur.ops", "easylemur.data", "easylemur.convert", "easylemur.train",
                           "easylemur.generate", "easylemur.eval", "easylemur.serve", "easylemur.tokenizer")),
    ("easylemur.eval", ("easylemur.train",)),  # the train loop runs the evals, so they sit below it
    # evaluation's own floors, bottom up: sandbox <- api <- agent <- benchmarks <- backends <- runs <- cli.
    # The sandbox knows no benchmark and nothing of easylemur but errors; nothing below the backends
    # reaches the model side (generate, serve, model) or the config
    ("easylemur.eval.sandbox", tuple(f"easylemur.{p}" for p in (
        "model", "ops", "data", "checkpoint", "convert", "train", "generate", "serve", "tokenizer", "config", "chat",
        "tracker", "storage", "sharding", "host", "aot", "eval.api", "eval.agent", "eval.benchmarks", "eval.backends",
        "eval.runs", "eval.cli"))),
    ("easylemur.eval.api", ("easylemur.eval.agent", "easylemur.eval.benchmarks", "easylemur.eval.backends",
                            "easylemur.eval.runs", "easylemur.eval.cli", *BELOW_BACKENDS)),
    ("easylemur.eval.agent", ("easylemur.eval.benchmarks", "easylemur.eval.backends", "easylemur.eval.runs",
                              "easylemur.eval.cli", *BELOW_BACKENDS)),
    ("easylemur.eval.benchmarks", ("easylemur.eval.backends", "easylemur.eval.runs", "easylemur.eval.cli",
                                   *BELOW_BACKENDS)),
    ("easylemur.eval.backends", ("easylemur.eval.runs", "easylemur.eval.cli")),
    ("easylemur.eval.runs", ("easylemur.eval.cli",)),
    ("easylemur.model", ("easylemur.data", "easylemur.checkpoint", "easylemur.convert", "easylemur.train",
                         "easylemur.generate", "easylemur.eval", "easylemur.tokenizer", "easylemur.config")),
    ("easylemur.ops", ("easylemur.model", "easylemur.data", "easylemur.checkpoint", "easylemur.train")),
    ("easylemur.checkpoint.store", ("easylemur.model", "easylemur.train", "easylemur.data")),
    ("easylemur.checkpoint.fingerprint", ("easylemur.model",)),
    ("easylemur.checkpoint.paths", ("easylemur.model", "easylemur.checkpoint.store")),
    # data is handed its tokenizer: init.from's is resolved beside the converters (convert/source.py)
    ("easylemur.data", ("easylemur.convert", "easylemur.train", "easylemur.generate", *EVAL_ABOVE_THE_REGISTRY)),
    ("easylemur.tokenizer", ("easylemur.model", "easylemur.train", "easylemur.checkpoint", "easylemur.data")),
    ("easylemur.convert", ("easylemur.train", "easylemur.generate", *EVAL_ABOVE_THE_REGISTRY)),
    ("easylemur.generate", ("easylemur.train", "easylemur.eval", "easylemur.serve")),
    ("easylemur.serve", ("easylemur.train", "easylemur.eval")),  # the server: a model, its tokenizer, the slot engine
    ("easylemur.eval.sandbox", ("easylemur.model", "easylemur.generate", "easylemur.train")),
    ("easylemur.train.lock", ("easylemur.checkpoint.store", "easylemur.model")),  # taking the lock loads no orbax
]


def _is_command(module: str) -> bool:
    """A command's entry point: `__main__`, `cli` (a module, or a package of them), the train
    loop, `python -m easylemur.aot`."""
    return module.endswith((".__main__", ".cli")) or ".cli." in module or module in ("easylemur.train.loop",
                                                                                   "easylemur.aot")


def test_layers_import_only_what_is_below_them():
    """Each floor's library modules reach nothing above them. A command is the top floor
    whatever folder holds it (it wires the floors together: `python -m easylemur.data tokenize`
    resolves init.from beside the converters and hands the data floor the tokenizer), so the
    rules bind the modules a command imports, not the command itself."""
    graph = _imports()
    wrong = []
    for importer, forbidden in LAYERS:
        for module in (m for m in graph if _in(importer, m) and not _is_command(m)):
            reach = _closure(graph, module)
            wrong += [f"{module} -> {r}" for r in sorted(reach) if any(_in(f, r) for f in forbidden)]
    assert wrong == [], wrong


# modules that still judge a path a URL themselves, until they ask storage.is_url
def test_only_the_storage_layer_judges_whether_a_path_is_a_url():
    """`"://" in path` is decided once, by easylemur/storage.py's `is_url`; everyone asks it."""
    spelled = re.compile(r"""["']://["']\s+(not\s+)?in\b""")
    found = {str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if spelled.search(p.read_text())}
    assert "storage.py" in found  # the check sees the one place
    assert found - {"storage.py"} == set()


def test_nothing_imports_a_command_entry_point():
    """Commands (`__main__`, `cli`, the train loop, the one-line hand-overs) are leaves: only a
    command's `__main__` may import its CLI module."""
    graph = _imports()
    entry = {m for m in graph if _is_command(m)}
    assert "easylemur.eval.cli.suite" in entry and "easylemur.eval.cli.watch" in entry  # every argparse main is seen
    # a CLI package's door dispatches to its own subcommands
    wrong = [f"{m} -> {d}" for m, deps in graph.items() for d in deps & entry
             if not m.endswith(".__main__") and not (m.endswith(".cli") and d.startswith(m + "."))]
    assert wrong == [], wrong


def test_every_argparse_main_of_evaluation_is_a_command():
    """A module of eval/ that builds an argument parser is a command (so the rules above see it as one)."""
    found = [_module_name(p) for p in (PKG / "eval").rglob("*.py") if "argparse.ArgumentParser(" in p.read_text()]
    assert "easylemur.eval.cli.benchmark" in found
    assert [m for m in found if not _is_command(m)] == []


def test_eval_holds_only_its_entry_points_and_floors():
    """easylemur/eval/ is floors, not a room: its own files are the door, __main__ and the CLI."""
    eval_dir = PKG / "eval"
    assert sorted(p.name for p in eval_dir.glob("*.py")) == ["__init__.py", "__main__.py"]
    floors = sorted(p.name for p in eval_dir.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert floors == ["agent", "api", "backends", "benchmarks", "cli", "runs", "sandbox"], floors


def test_outside_evaluation_only_training_and_config_import_it_and_only_their_floor():
    """Training imports the runs floor only; the config checks eval.tasks against the benchmark
    registry (and the agent's feedback kinds, the k list); nothing else outside eval imports it."""
    allowed = {"easylemur.train": ("easylemur.eval.runs",),
               "easylemur.config": ("easylemur.eval.benchmarks.registry", "easylemur.eval.agent.episode",
                                    "easylemur.eval.api")}
    wrong = []
    for module, deps in _imports().items():
        if _in("easylemur.eval", module):
            continue
        ok = next((v for k, v in allowed.items() if _in(k, module)), ())
        wrong += [f"{module} -> {d}" for d in deps if _in("easylemur.eval", d) and not any(_in(a, d) for a in ok)]
    assert wrong == [], wrong


def test_the_lower_floors_of_evaluation_import_no_jax():
    """The sandbox, the contracts, the agent engine and the benchmarks load without JAX or Flax
    (anywhere in their code, lazily or not): config validation and the sandbox's programs rely on it."""
    found = []
    for floor in ("sandbox", "api", "agent", "benchmarks"):
        for path in (PKG / "eval" / floor).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                    [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                found += [f"{path.relative_to(PKG)}: {n}" for n in names if n.split(".")[0] in ("jax", "flax")]
    assert found == [], found


def test_at_most_six_top_level_modules():
    top = sorted(p.name for p in PKG.glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 6, top


def test_design_doc_tree_lists_every_file():
    """docs/design.md's architecture tree is the package, file for file (one line each)."""
    text = DESIGN.read_text()
    block = text[text.index("<!-- tree -->"):text.index("<!-- /tree -->")]
    listed, folders = set(), []  # folders: (indent, "name/") of the folders open at this line
    for line in block.splitlines():
        m = re.match(r"^(\s*)([\w.]+/?)\s", line + " ")
        if not m or line.startswith("<!--") or line.startswith("```"):
            continue
        indent, name = len(m.group(1)), m.group(2)
        while folders and folders[-1][0] >= indent:
            folders.pop()
        if indent == 0:  # the package's own line, easylemur/
            continue
        if name.endswith("/"):
            folders.append((indent, name))
            continue
        listed.add("".join(f for _, f in folders) + name)
    actual = {str(p.relative_to(PKG)) for p in PKG.rglob("*.py")}
    assert listed == actual, (sorted(actual - listed), sorted(listed - actual))


def test_no_module_imports_the_package_root():
    """`easylemur/__init__.py` is the user's door (easylemur.load); code inside the package names
    the module it needs (generate.api.load), so a command never loads the package whole."""
    found = []
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import) and any(a.name == "easylemur" for a in node.names):
                found.append(f"{path.relative_to(PKG)}:{node.lineno}")
    assert not found, found
