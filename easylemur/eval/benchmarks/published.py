"""A benchmark's authors' repository as the source of what the benchmark tells the model and
judges by (MINT's, InterCode's): a copy laid out as the repository is, found under
`--data-dir D` as `D/<dir_name>/`, given as `--data NAME=DIR`, or fetched file by file from
GitHub's raw files at the pinned commit into a cache (`$EASYLEMUR_<ENV>_CACHE`; else, with an
eval cache set (`--cache-dir`, `$EASYLEMUR_EVAL_CACHE`), `<that>/<dir_name>/<commit>`; default
`~/.cache/easylemur/<dir_name>/<commit>`; `$EASYLEMUR_<ENV>_URL`, else `$EASYLEMUR_EVAL_MIRROR`'s
`<dir_name>/`, changes the source), each file written whole or not at all (`fetch.download`), a
source that does not answer refused at once (`fetch.unanswered`); and the readers of the texts
its Python files hold, by syntax tree, never run. A file or a name that is missing, or has
another shape than at the pinned commit, is a `PublishedFilesError` naming the file and the
name: refused, not guessed at."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Optional

from easylemur.errors import InputError
from easylemur.eval.api.task import MissingData
from easylemur.eval.benchmarks.fetch import CACHE_ENV, FetchError, download, mirror, unanswered


class PublishedFilesError(InputError):
    """A benchmark's published files are missing, or one does not hold what the pinned commit holds."""


def json_list(text: str, where: str) -> list:
    """A published task file's rows: a JSON list (a PublishedFilesError naming the file and line
    otherwise), as InterCode's task files are."""
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as e:
        raise PublishedFilesError(f"{where}:{e.lineno}: not JSON ({e.msg})") from None
    if not isinstance(rows, list):
        raise PublishedFilesError(f"{where}: expected a JSON list of tasks")
    return rows


def yaml_mapping(text: str, where: str) -> dict:
    """A published YAML file's top-level mapping (a PublishedFilesError naming the file otherwise),
    as MINT's ALFWorld `base_config.yaml` is."""
    import yaml

    try:
        out = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise PublishedFilesError(f"{where}: not YAML ({e})") from None
    if not isinstance(out, dict):
        raise PublishedFilesError(f"{where}: expected a YAML mapping")
    return out


@dataclasses.dataclass(frozen=True)
class Repository:
    name: str  # how messages name it: "MINT"
    github: str  # "owner/repo"
    commit: str  # the pinned commit every file is read at
    dir_name: str  # its directory under --data-dir, and --data's NAME
    markers: tuple  # directories every copy has (a directory without them is not one)
    env: str  # EASYLEMUR_<env>_URL / EASYLEMUR_<env>_CACHE

    @property
    def url(self) -> str:
        return f"https://github.com/{self.github}"

    def cache_dir(self) -> Path:
        env = os.environ.get(f"EASYLEMUR_{self.env}_CACHE")
        if env:
            return Path(os.path.expanduser(env))
        root = os.environ.get(CACHE_ENV)
        return (Path(os.path.expanduser(root)) if root else Path.home() / ".cache" / "easylemur") / self.dir_name / self.commit

    def how(self) -> str:
        return (f"pass --data-dir D with D/{self.dir_name} a clone of {self.url} at {self.commit[:12]}, "
                f"or --data {self.dir_name}=DIR")


class RepoFiles:
    """Read access to one copy of a repository: a local directory, or the fetch cache (then a
    file not yet there is fetched from `url` at the pinned commit)."""

    def __init__(self, repo: Repository, root: Path, url: Optional[str] = None):
        self.repo, self.root, self.url = repo, Path(root), url

    @classmethod
    def locate(cls, repo: Repository, data: Optional[str]) -> "RepoFiles":
        """`data`: a directory laid out as the repository; None: the fetch cache."""
        if data is not None:
            root = Path(os.path.expanduser(data))
            if not all((root / m).is_dir() for m in repo.markers):
                raise MissingData(f"{root}: not a copy of {repo.name}'s repository (expected "
                                  f"{' and '.join(m + '/' for m in repo.markers)} in it; git clone {repo.url} and "
                                  f"check out {repo.commit[:12]})")
            return cls(repo, root)
        url = os.environ.get(f"EASYLEMUR_{repo.env}_URL") or (f"{mirror()}/{repo.dir_name}" if mirror() else
                                                            f"https://raw.githubusercontent.com/{repo.github}")
        return cls(repo, repo.cache_dir(), url.rstrip("/"))

    def where(self, rel: str) -> str:
        return str(self.root / rel)

    def path(self, rel: str) -> Path:
        """The local file `rel` (fetched first when this copy is the cache)."""
        path = self.root / rel
        if not path.is_file():
            if self.url is None:
                raise PublishedFilesError(f"{path}: missing from this copy of {self.repo.name}'s repository "
                                          f"({self.repo.url} at {self.repo.commit[:12]})")
            self._fetch(rel, path)
        return path

    def text(self, rel: str) -> str:
        path = self.path(rel)
        try:
            return path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise PublishedFilesError(f"{path}: unreadable ({type(e).__name__}: {e})") from None

    def tree(self, rel: str) -> tuple[ast.Module, str]:
        """(syntax tree, where) of the Python file `rel`."""
        return parse(self.text(rel), self.where(rel)), self.where(rel)

    def _fetch(self, rel: str, path: Path) -> None:
        url = f"{self.url}/{self.repo.commit}/{rel}"
        try:
            why = unanswered(url)  # a host that does not answer: at once, not after the fetch's timeout
            if why:
                raise FetchError(f"no answer from {why}")
            download(url, path)  # whole or not at all: a cut download never looks fetched
        except FetchError as e:
            raise MissingData(f"{self.repo.name}'s {rel}: no local copy and fetching {url} failed "
                              f"({e}); {self.repo.how()}") from None


# ------------------------------------------------------------------ reading Python by its syntax tree

def parse(text: str, where: str) -> ast.Module:
    try:
        return ast.parse(text)
    except SyntaxError as e:
        raise PublishedFilesError(f"{where}: not Python ({e.msg}, line {e.lineno})") from None


def scope(tree: ast.AST, qualname: str, where: str) -> ast.AST:
    """The module (qualname "") or the class / function `A.b` inside it."""
    node = tree
    for part in [p for p in qualname.split(".") if p]:
        found = next((n for n in getattr(node, "body", []) if isinstance(n, (ast.ClassDef, ast.FunctionDef))
                      and n.name == part), None)
        if found is None:
            raise PublishedFilesError(f"{where}: no {qualname} (the pinned commit has it)")
        node = found
    return node


def _target_name(node: ast.expr) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_target_name(node.value)}.{node.attr}"
    return ""


def assigned(tree: ast.AST, where: str, qualname: str, target: str) -> Any:
    """The literal value assigned to `target` (e.g. "INVALID_INPUT_MESSAGE", "self.stop_words") by
    a statement directly in the scope `qualname` ("" for the module)."""
    for node in getattr(scope(tree, qualname, where), "body", []):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        if getattr(node, "value", None) is not None and any(_target_name(t) == target for t in targets):
            try:
                return ast.literal_eval(node.value)
            except ValueError:
                raise PublishedFilesError(f"{where}: {target} in {qualname or 'the module'} is not a literal") from None
    raise PublishedFilesError(f"{where}: no assignment to {target} in {qualname or 'the module'}")


def strings(tree: ast.AST, where: str, qualname: str) -> list[str]:
    """Every plain string constant of `qualname`, in source order: its docstring and the literal
    parts of f-strings left out."""
    node = scope(tree, qualname, where)
    skip = {id(v) for n in ast.walk(node) if isinstance(n, ast.JoinedStr) for v in n.values}
    body = getattr(node, "body", [])
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        skip.add(id(body[0].value))
    found = [n for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in skip]
    return [n.value for n in sorted(found, key=lambda n: (n.lineno, n.col_offset))]


def the_string(tree: ast.AST, where: str, qualname: str, *, starting: str = "", ending: str = "",
               first: bool = False) -> str:
    """The one non-blank string constant of `qualname` that starts with `starting` and ends with
    `ending`, or with `first`, the first of them in source order."""
    hits = [s for s in strings(tree, where, qualname) if s.strip() and s.startswith(starting) and s.endswith(ending)]
    if not hits or (len(hits) > 1 and not first):
        raise PublishedFilesError(f"{where}: {qualname} has {len(hits)} strings like {starting!r}...{ending!r}, "
                                  "the pinned commit has one")
    return hits[0]


def fstrings(tree: ast.AST, where: str, qualname: str) -> list[ast.JoinedStr]:
    """The f-strings of `qualname`, outermost only, in source order."""
    node = scope(tree, qualname, where)
    inner = {id(v) for n in ast.walk(node) if isinstance(n, ast.JoinedStr) for v in ast.walk(n) if v is not n}
    found = [n for n in ast.walk(node) if isinstance(n, ast.JoinedStr) and id(n) not in inner]
    return sorted(found, key=lambda n: (n.lineno, n.col_offset))


def returned(tree: ast.AST, where: str, qualname: str) -> ast.JoinedStr:
    """The f-string the function `qualname` returns (its one return statement)."""
    returns = [n for n in ast.walk(scope(tree, qualname, where)) if isinstance(n, ast.Return)]
    if len(returns) != 1 or not isinstance(returns[0].value, ast.JoinedStr):
        raise PublishedFilesError(f"{where}: {qualname} does not return one f-string (the pinned commit does)")
    return returns[0].value
