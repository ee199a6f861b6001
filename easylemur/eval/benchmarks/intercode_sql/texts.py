"""What InterCode (and Lemur's fork of it) tells the model, read from its own Python files by
their syntax trees (never executed): the `game_sql` template's first message, the query and observation messages and the
retry message (`experiments/utils/prompts.py`, f-strings rendered here with InterCode's values),
the handicap (`handicap_sql` in `experiments/utils/utils.py`), the parser's keywords
(`SQL_KEYWORDS`) and prefix, the setting's name (`SETTING_MAP` of `experiments/eval_n_turn.py`) and
the chat policy's observation cut (`ChatGPTPolicy`'s `response_limit`), the error observation
(`SqlEnv.exec_action`), and the fork's `HFChatPolicy` as it ran lemur-70b-chat-v1 (its system
message, stop sequences and fenced assistant message) and its parser's "empty block" word. A name that is missing or
has another shape is an `PublishedFilesError` naming the file: another commit that moved a text is
refused, not guessed at."""

from __future__ import annotations

import ast
import dataclasses
import functools
from pathlib import Path
from typing import Any, Callable, Optional

from easylemur.eval.benchmarks.intercode_sql.files import INTERCODE, POLICIES, PROMPTS, RUNNER, SQL_ENV, UTILS
from easylemur.eval.benchmarks.published import PublishedFilesError, RepoFiles, assigned, fstrings, parse, returned, \
    scope, strings

ENV = "sql"  # InterCode's --env; its language is this upper-cased


def _value(node: ast.expr, names: dict, where: str) -> Any:
    """An f-string placeholder's value: a name, `self.<attr>`, or str(...) of one."""
    if isinstance(node, ast.Name) and node.id in names:
        return names[node.id]
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and f"{node.value.id}.{node.attr}" in names:
        return names[f"{node.value.id}.{node.attr}"]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and len(node.args) == 1:
        return str(_value(node.args[0], names, where))
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("lower", "upper")
            and not node.args):
        return getattr(str(_value(node.func.value, names, where)), node.func.attr)()
    raise PublishedFilesError(f"{where}: a placeholder {ast.unparse(node)!r} this reader does not know")


def render(node: ast.JoinedStr, names: dict, where: str) -> str:
    """The f-string `node` as Python renders it with `names` ("query", "self.language", ...)."""
    out = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            out.append(part.value)
            continue
        assert isinstance(part, ast.FormattedValue)
        v = _value(part.value, names, where)
        conv = {-1: None, 115: str, 114: repr, 97: ascii}[part.conversion]
        if conv is not None:
            v = conv(v)
        spec = render(part.format_spec, names, where) if part.format_spec is not None else ""
        out.append(format(v, spec))
    return "".join(out)


@dataclasses.dataclass(frozen=True)
class InterCodeTexts:
    env_name: str  # "ic_sql": SqlEnv.name, the records' "environment"
    language: str  # "SQL"
    setting: str  # "MySQL Database"
    init_msg: str  # the game_sql template's system message
    no_output: str  # what an empty observation is shown as
    keywords: tuple  # SQL_KEYWORDS: the words an action starts with
    sql_prefix: str  # the parser's "SQL: " prefix
    handicap_header: str
    response_limit: int  # an observation's text is cut to this many characters
    _query: Callable = dataclasses.field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    _obs: Callable = dataclasses.field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    _retry: Callable = dataclasses.field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    _table: Callable = dataclasses.field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    _error: Callable = dataclasses.field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    # Lemur's fork: its parser's word for an empty fenced block, and its `hf_chat` policy as run for
    # lemur-70b-chat-v1 (the system message without the handicap, the separator between the template
    # and the question, its stop sequences, and how a parsed query is kept in the dialogue)
    no_action: Optional[str] = None
    hf_system: Optional[str] = None
    hf_separator: Optional[str] = None
    hf_stops: tuple = ()
    _fence: Optional[Callable] = dataclasses.field(repr=False, compare=False, default=None)

    def fenced(self, action: str) -> str:
        """A parsed query as the fork's policy keeps it in the dialogue (a fenced block)."""
        if self._fence is None:
            raise PublishedFilesError("this copy of InterCode has no hf_chat policy (Lemur's fork has)")
        return self._fence(action)

    def error_msg(self, message: str) -> str:
        """The observation of a query that failed (SqlEnv.exec_action), with the engine's message."""
        return self._error(message)

    def query_msg(self, query: str) -> str:
        return self._query(query)

    def obs_msg(self, observation: Any, reward: Any, query: str) -> str:
        """The observation message (TemplateV2.get_obs_msg): an empty output shown as "No output"."""
        if (isinstance(observation, str) and observation == "") or (isinstance(observation, list) and not observation):
            observation = self.no_output
        return self._obs(observation, reward, query)

    def retry_msg(self) -> str:
        return self._retry()

    def handicap(self, db_tables: dict) -> str:
        """handicap_sql: the header, then one line per table with its columns."""
        return self.handicap_header + "".join(self._table(name, cols) for name, cols in db_tables.items())


@functools.lru_cache(maxsize=8)
def _load(root: str, url: str) -> InterCodeTexts:
    files = RepoFiles(INTERCODE, Path(root), url or None)

    def src(rel: str) -> tuple[ast.Module, str]:
        where = files.where(rel)
        return parse(files.text(rel), where), where

    prompts, p_at = src(PROMPTS)
    utils, u_at = src(UTILS)
    runner, r_at = src(RUNNER)
    policies, pol_at = src(POLICIES)
    env, e_at = src(SQL_ENV)
    errors = fstrings(env, e_at, "SqlEnv.exec_action")
    if len(errors) != 1:
        raise PublishedFilesError(f"{e_at}: SqlEnv.exec_action has {len(errors)} f-strings, the pinned commit 1")
    language = ENV.upper()
    settings = assigned(runner, r_at, "", "SETTING_MAP")
    if not isinstance(settings, dict) or ENV not in settings:
        raise PublishedFilesError(f"{r_at}: SETTING_MAP has no {ENV!r}")
    setting = settings[ENV]
    me = {"self.language": language, "self.setting": setting}
    init = render(returned(prompts, p_at, "TemplateSQLGame.get_init_msg"), me, p_at)
    query_node = returned(prompts, p_at, "TemplateV2.get_query_msg")
    obs_node = returned(prompts, p_at, "TemplateV2.get_obs_msg")
    retry_node = returned(prompts, p_at, "PromptTemplate.get_retry_msg")
    no_output = [s for s in strings(prompts, p_at, "TemplateV2.get_obs_msg") if s.strip()]
    if len(no_output) != 1:
        raise PublishedFilesError(f"{p_at}: TemplateV2.get_obs_msg has {len(no_output)} plain strings, the pinned commit 1")
    handicap_strings = [s for s in strings(utils, u_at, "handicap_sql") if s.endswith("\n")]
    lines = fstrings(utils, u_at, "handicap_sql")
    if len(handicap_strings) != 1 or len(lines) != 1:
        raise PublishedFilesError(f"{u_at}: handicap_sql is not a header and one f-string line (as the pinned commit)")
    prefix = [render(n, {}, u_at) for n in fstrings(utils, u_at, "sql_parser") if not any(
        isinstance(v, ast.FormattedValue) for v in n.values)]
    prefix = [s for s in prefix if s.strip().endswith(":")]
    if len(set(prefix)) != 1:
        raise PublishedFilesError(f"{u_at}: sql_parser has no one 'SQL: ' prefix")
    init_fn = scope(policies, "ChatGPTPolicy.__init__", pol_at)
    assert isinstance(init_fn, ast.FunctionDef)
    args = init_fn.args
    defaults = dict(zip([a.arg for a in args.args][-len(args.defaults):], args.defaults))
    if "response_limit" not in defaults:
        raise PublishedFilesError(f"{pol_at}: ChatGPTPolicy.__init__ has no response_limit default")
    hf = _hf_chat(policies, pol_at, language)
    empty = [c for c in strings(utils, u_at, "sql_parser") if c.isupper() and " " in c]
    return InterCodeTexts(
        no_action=empty[0] if len(empty) == 1 else None, **hf,
        env_name=assigned(env, e_at, "SqlEnv", "name"), language=language, setting=setting, init_msg=init,
        no_output=no_output[0],
        keywords=tuple(assigned(utils, u_at, "", "SQL_KEYWORDS")), sql_prefix=prefix[0],
        handicap_header=handicap_strings[0], response_limit=int(ast.literal_eval(defaults["response_limit"])),
        _query=lambda q: render(query_node, {**me, "query": q}, p_at),
        _obs=lambda o, r, q: render(obs_node, {**me, "observation": o, "reward": r, "self.query": q}, p_at),
        _retry=lambda: render(retry_node, me, p_at),
        _table=lambda name, cols: render(lines[0], {"name": name, "columns": cols}, u_at),
        _error=lambda message: render(errors[0], {"err.msg": message}, e_at))


def _hf_chat(tree: ast.Module, where: str, language: str) -> dict:
    """The fork's HFChatPolicy as run for lemur-70b-chat-v1 ({} where the copy has none)."""
    cls = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "HFChatPolicy"), None)
    if cls is None or not any(isinstance(n, ast.FunctionDef) and n.name == "prepare_dialogue" for n in cls.body):
        return {}
    me = {"self.language": language}
    system = [n for n in fstrings(tree, where, "HFChatPolicy.prepare_dialogue")
              if all(isinstance(v, ast.Constant) or ast.unparse(v.value) == "self.language" for v in n.values)]
    separators = [c for c in strings(tree, where, "HFChatPolicy.prepare_dialogue") if c and not c.strip()]
    stops = []
    for node in ast.walk(scope(tree, "HFChatPolicy.__init__", where)):
        if isinstance(node, ast.Assign) and any(ast.unparse(t) == "self.stop_sequences" for t in node.targets):
            value = ast.literal_eval(node.value)
            if "<|im_start|>" in value:  # ChatML's: the lemur-70b-chat-v1 branch
                stops.append(tuple(value))
    fences = [n for n in fstrings(tree, where, "HFChatPolicy.forward")
              if isinstance(n.values[0], ast.Constant) and str(n.values[0].value).startswith("```")]
    if len(system) != 1 or len(set(separators)) != 1 or len(stops) != 1 or len(fences) != 1:
        raise PublishedFilesError(f"{where}: HFChatPolicy is not the one of Lemur's fork at its pinned commit")
    return {"hf_system": render(system[0], me, where), "hf_separator": separators[0], "hf_stops": stops[0],
            "_fence": lambda action: render(fences[0], {**me, "action": action}, where)}


def load_texts(files: RepoFiles) -> InterCodeTexts:
    """InterCode's texts from `files` (read once per copy)."""
    return _load(str(files.root), files.url or "")
