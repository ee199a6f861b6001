"""The docs' commands exist and answer --help, every --flag they name is one the command
accepts, every --config.KEY they name is in the schema, and the quick start's demo runs end to
end. "The docs" are the README and the pages it leads to (CONTRIBUTING.md, docs/index.md and the
guides under docs/guides/), which hold what was the long README. Also: the docs site builds with
`mkdocs build --strict` (no broken link, anchor or page left out of the nav), the README links to
every guide, the generated config reference is current, and every `docs/design.md, "Section"`
the code cites is a heading of docs/design.md."""

import atexit
import functools
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
GUIDES = sorted((ROOT / "docs" / "guides").glob("*.md"))
PAGES = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", ROOT / "docs" / "index.md", *GUIDES]
DOCS = "\n\n".join(p.read_text() for p in PAGES)  # every page's commands, prose and keys, checked alike
DESIGN = ROOT / "docs" / "design.md"
ENV = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": ""}

# Flags of other programs the docs name in their prose (in its code blocks, other programs'
# commands are recognised as not ours and skipped): SLURM's --requeue, `mkdocs build --strict`,
# pytest's --strict-markers (pytest.ini), TensorBoard's --logdir.
EXTERNAL_FLAGS = {"--requeue", "--strict", "--strict-markers", "--logdir"}


def _code_commands() -> list[list[str]]:
    """The commands of the docs' bash blocks, as words: continuation lines joined,
    comments dropped, split at ;, &&, ||, | and at launch.sh's -- (its command is one too)."""
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", DOCS, re.S):
        text = re.sub(r"\\\n", " ", block)
        for line in text.splitlines():
            lex = shlex.shlex(line, posix=True, punctuation_chars=";&|")
            lex.whitespace_split, lex.commenters = True, "#"
            cmd: list[str] = []
            for word in list(lex) + [";"]:
                if word in (";", "&&", "||", "|", "&"):
                    if cmd:
                        commands.append(cmd)
                    cmd = []
                else:
                    cmd.append(word)
    out = []
    for cmd in commands:
        if _key(cmd) and _key(cmd)[0].endswith(".sh") and "--" in cmd:
            i = cmd.index("--")
            out += [cmd[:i], cmd[i + 1:]]
        else:
            out.append(cmd)
    return out


def _key(cmd: list[str]) -> tuple[str, ...] | None:
    """("easylemur.data", "stats") or ("tpu_scripts/launch.sh",) for a command of ours, else None."""
    words = [w for w in cmd if not re.fullmatch(r"[A-Z_]+=\S*", w)]  # VAR=value prefixes
    words = words[1:] if words[:1] == ["bash"] else words
    if not words:
        return None
    if words[0].endswith("python") and words[1:2] == ["-m"] and words[2].startswith("easylemur"):
        sub = words[3] if len(words) > 3 and re.fullmatch(r"[a-z][\w-]*", words[3]) else None
        return (words[2], sub) if sub else (words[2],)
    if re.fullmatch(r"(\./)?(tpu_scripts/\w+\.sh)", words[0]):
        return (words[0].removeprefix("./"),)
    return None


def _commands() -> list[tuple[str, ...]]:
    found = {_key(c) for c in _code_commands()}
    for m in re.finditer(r"python -m (easylemur(?:\.\w+)*)((?: [a-z][\w-]*)?)", DOCS):  # prose mentions too
        module, sub = m.group(1), m.group(2).strip()
        found.add((module, sub) if sub and not sub.startswith("-") else (module,))
    return sorted(k for k in found if k)


def _argv(key: tuple[str, ...]) -> list[str]:
    return ["bash", key[0]] if key[0].endswith(".sh") else [sys.executable, "-m", *key]


@functools.lru_cache(maxsize=None)
def _helps() -> dict[tuple[str, ...], subprocess.CompletedProcess]:
    """Every docs command's --help, run two at a time (each imports jax)."""
    def run(key):
        return key, subprocess.run([*_argv(key), "--help"], cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=180)

    with ThreadPoolExecutor(2) as pool:
        return dict(pool.map(run, _commands()))


def _flags(words: list[str]) -> set[str]:
    """The --flags among `words`; optional ones may be written in brackets: [--rows N]."""
    words = [w.strip("[](),|") for w in words]
    return {w.split("=", 1)[0] for w in words if re.match(r"--[a-z][\w-]*(=|$)", w)}


def test_readme_names_every_cli():
    modules = {c[0] for c in _commands()}
    assert {"easylemur.train", "easylemur.convert", "easylemur.data", "easylemur.generate", "easylemur.aot",
            "easylemur.tokenizer", "easylemur.eval", "easylemur.checkpoint"} <= modules
    assert {f"tpu_scripts/{s}.sh" for s in ("create", "setup", "launch", "status", "logs", "stop")} <= modules


@pytest.mark.slow
@pytest.mark.parametrize("cmd", _commands(), ids=" ".join)
def test_readme_command_has_help(cmd):
    p = _helps()[cmd]
    assert p.returncode == 0, p.stderr[-2000:]
    assert "usage:" in p.stdout.lower()


def test_readme_flags_are_accepted_by_their_commands():
    helps = {k: p.stdout for k, p in _helps().items()}
    wrong = []
    for cmd in _code_commands():
        key = _key(cmd)
        if key is None:
            continue  # another program (pip, gcloud, sbatch, vllm, ...)
        for flag in sorted(_flags(cmd)):
            if not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", helps[key]):
                wrong.append(f"{' '.join(key)}: {flag}")
    # flags named in the prose: each must be one some docs command accepts; a span running one of
    # scripts/*.sh (no --help: its header comment states its flags) must name a flag of that script
    every = "\n".join(helps.values())
    for span in re.findall(r"`([^`\n]*--[^`\n]*)`", re.sub(r"```.*?```", "", DOCS, flags=re.S)):
        script = re.match(r"bash (scripts/\w+\.sh)\b", span)
        accepted = (ROOT / script.group(1)).read_text() if script else every
        for flag in sorted(_flags(span.split())):
            if flag not in EXTERNAL_FLAGS and not re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", accepted):
                wrong.append(f"prose `{span}`: {flag}")
    assert not wrong, "flags the docs name that no parser accepts:\n" + "\n".join(wrong)


def test_readme_config_keys_exist():
    from easylemur.config import SOURCE_DEFAULTS, default_config
    from easylemur.model.config import LlamaConfig

    cfg, llama = default_config(), set(LlamaConfig.__dataclass_fields__)
    keys = set(re.findall(r"--config\.([a-z_][a-z0-9_.]*[a-z0-9_])", DOCS))  # not the KEY placeholder
    assert len(keys) > 5

    def exists(key: str) -> bool:
        parts = key.split(".")
        if parts[0] == "model":
            return len(parts) == 2 and (parts[1] in llama or parts[1] == "preset")
        if parts[:2] in (["data", "sources"], ["data", "eval_sources"]):
            return len(parts) == 4 and parts[3] in SOURCE_DEFAULTS
        node = cfg
        for p in parts:
            if not hasattr(node, "keys") or p not in node:
                return False
            node = node[p]
        return not hasattr(node, "keys")

    assert not [k for k in sorted(keys) if not exists(k)]


def test_readme_is_short_and_links_every_guide_and_page():
    assert len(README.splitlines()) <= 200
    assert len(GUIDES) >= 8
    for page in [*GUIDES, DESIGN, ROOT / "docs/reference/config.md", ROOT / "docs/reference/api.md",
                 ROOT / "BENCHMARKS.md", ROOT / "CONTRIBUTING.md"]:
        assert f"]({page.relative_to(ROOT)}" in README, f"the README does not link {page.relative_to(ROOT)}"
    for text in (README, (ROOT / "CONTRIBUTING.md").read_text()):  # GitHub shows these two: their links resolve
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
            assert "://" in target or (ROOT / target).exists(), target


@functools.lru_cache(maxsize=None)
def _site_build() -> tuple[subprocess.CompletedProcess, Path]:
    """`mkdocs build --strict` once per test process, into a temporary folder removed at exit."""
    out = Path(tempfile.mkdtemp(prefix="easylemur-site-"))
    atexit.register(shutil.rmtree, out, True)
    env = {**ENV, "NO_MKDOCS_2_WARNING": "1"}
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-d", str(out / "site")],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    return p, out / "site"


def built_site() -> Path:
    """The docs site, built strictly (mkdocs.yml: links, anchors and pages validated as warnings,
    which --strict makes errors; docs/hooks.py: the config reference current), once per process:
    this file checks that it builds, tests/test_docs_site.py reads its pages. Skips where mkdocs
    and its plugins are not installed."""
    import importlib.util

    def absent(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is None
        except ModuleNotFoundError:  # its parent package is not there
            return True

    missing = [m for m in ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python") if absent(m)]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)} (pip install -e '.[test]')")
    p, site = _site_build()
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    return site


def test_docs_site_builds_strictly():
    """`mkdocs build --strict` passes and makes every page (built_site)."""
    site = built_site()
    for page in ["index.html", "guides/training/index.html", "reference/config/index.html", "reference/api/index.html",
                 "design/index.html", "benchmarks/index.html", "contributing/index.html"]:
        assert (site / page).is_file(), page
    api = (site / "reference/api/index.html").read_text()
    assert "default_config" in api and "LoadedModel" in api  # rendered from the docstrings


def test_config_reference_is_current():
    """docs/reference/config.md is docs/gen_config_reference.py's output for today's schema."""
    import importlib.util

    from easylemur.config import default_config

    spec = importlib.util.spec_from_file_location("gen_config_reference", ROOT / "docs" / "gen_config_reference.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    text = gen.render()
    assert gen.PAGE.read_text() == text, "stale: run python docs/gen_config_reference.py"

    def keys(cfg, prefix=""):
        for k in cfg.keys():
            v = cfg[k]
            yield from keys(v, f"{prefix}{k}.") if hasattr(v, "keys") and len(v.keys()) else [f"{prefix}{k}"]

    assert all(f"| `{k}` |" in text for k in keys(default_config()))
    assert "| `train.batch_size` | `8` | global rows per optimizer step |" in text  # default and comment


# a citation: docs/design.md, "Section" (or without the comma), maybe across a comment's line break
CITATION = re.compile(r"design\.md,?[\s#]*\"([^\"\n]+)\"")


def _design_headings() -> list[str]:
    return [re.sub(r"^#+\s*", "", line).strip() for line in DESIGN.read_text().splitlines() if re.match(r"#+\s", line)]


def _cited(name: str, headings: list[str]) -> bool:
    """A heading is cited by its text, or by the part before a parenthesis: "Serving" for
    "Serving (continuous batching)"."""
    return any(h == name or h.startswith(name + " (") for h in headings)


def test_design_sections_cited_by_the_code_exist():
    headings = _design_headings()
    assert "Architecture" in headings and _cited("Serving", headings) and not _cited("Nowhere", headings)
    cited, wrong = 0, []
    folders = ("easylemur", "tests", "scripts", "tpu_scripts", "bench", "configs", "docs")
    files = [p for d in folders for p in (ROOT / d).rglob("*") if p.suffix in (".py", ".sh", ".md", ".sbatch", ".json")
             and not any(part.startswith(".venv") for part in p.parts) and p != DESIGN]
    for path in [*files, ROOT / "README.md", ROOT / "CONTRIBUTING.md"]:
        for m in CITATION.finditer(path.read_text(errors="replace")):
            if m.group(1) == "Section":
                continue  # the placeholder, where the docs and this test spell the form
            cited += 1
            if not _cited(m.group(1), headings):
                wrong.append(f"{path.relative_to(ROOT)}: \"{m.group(1)}\"")
    assert cited > 40  # the search sees the code's citations
    assert not wrong, "citations of docs/design.md sections that are not headings there:\n" + "\n".join(wrong)


def test_every_repository_path_the_docs_name_exists():
    """A path of the repository that the docs name in backticks (`easylemur/...`, `tests/...`,
    `docs/...`, `configs/...`, ...) is there: CONTRIBUTING's recipes name the files a change
    touches, and a moved file must take its mentions along."""
    path = re.compile(r"`((?:easylemur|tests|docs|configs|scripts|bench|tpu_scripts|data)/[\w./-]*\w/?)`")
    missing = []
    for page in PAGES:
        for m in path.finditer(page.read_text()):
            target = m.group(1).split("*")[0]  # a glob names its folder
            if "*" not in m.group(1) and not (ROOT / target).exists():
                missing.append(f"{page.relative_to(ROOT)}: {m.group(1)}")
            elif "*" in m.group(1) and not (ROOT / target).parent.exists():
                missing.append(f"{page.relative_to(ROOT)}: {m.group(1)}")
    assert missing == [], missing
