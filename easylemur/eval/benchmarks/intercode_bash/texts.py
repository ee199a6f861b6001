"""What InterCode-Bash tells the model and what its environment says, read from InterCode's (Lemur's
fork's) Python files by their syntax trees, never run: the `v2` template's first, query and
observation messages (`TemplateV2` of `experiments/utils/prompts.py`, rendered with the language
"BASH" and the setting `SETTING_MAP["bash"]` of `experiments/eval_n_turn.py`), the fork's
`HFChatPolicy` as it ran lemur-70b-chat-v1 (system message, separator, stop sequences, fenced
assistant message) and the policies' observation cut (`response_limit`), and from
`intercode/envs/bash/bash_env.py` the environment's name, its git status command, the shell of the
nl2bash image (`IMAGE_TO_SETTINGS`) and the observations of a command that timed out or could not
run; the time limit is `TIMEOUT_DURATION` of `intercode/utils/utils.py`. A name that is missing or
has another shape is a `PublishedFilesError` naming the file."""

from __future__ import annotations

import ast
import dataclasses
import functools
from pathlib import Path
from typing import Any, Callable, Optional

from easylemur.eval.benchmarks.intercode_bash.files import BASH_ENV, IC_UTILS, INTERCODE, POLICIES, PROMPTS, RUNNER
from easylemur.eval.benchmarks.intercode_sql.texts import _hf_chat, render
from easylemur.eval.benchmarks.published import PublishedFilesError, RepoFiles, assigned, returned, scope, strings

ENV = "bash"  # InterCode's --env; the policies' language is this upper-cased
IMAGE = "intercode-nl2bash"  # the image whose shell IMAGE_TO_SETTINGS names


@dataclasses.dataclass(frozen=True)
class BashTexts:
    env_name: str  # "ic_bash": BashEnv.name, the records' "environment"
    language: str  # "BASH"
    setting: str  # "Bourne Shell"
    init_msg: str  # the v2 template's first message
    no_output: str  # what an empty observation is shown as
    shell: str  # "/bin/bash": the shell every action runs in (clean_cmd)
    status_script: str  # GIT_STATUS_SCRIPT
    timed_out: str  # the observation of an action past the time limit
    malformed: str  # the observation of an action that could not run
    timeout: int  # TIMEOUT_DURATION, seconds
    response_limit: int  # HFChatPolicy's observation cut (characters)
    chat_response_limit: int  # ChatGPTPolicy's
    hf_system: Optional[str] = None
    hf_separator: Optional[str] = None
    hf_stops: tuple = ()
    _query: Callable = dataclasses.field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    _obs: Callable = dataclasses.field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    _fence: Optional[Callable] = dataclasses.field(repr=False, compare=False, default=None)

    def query_msg(self, query: str) -> str:
        return self._query(query)

    def obs_msg(self, observation: Any, reward: Any, query: str) -> str:
        """TemplateV2.get_obs_msg: an empty observation shown as "No output"."""
        if isinstance(observation, str) and observation == "":
            observation = self.no_output
        return self._obs(observation, reward, query)

    def fenced(self, action: str) -> str:
        """A parsed command as the fork's policy keeps it in the dialogue (a ```bash block)."""
        if self._fence is None:
            raise PublishedFilesError("this copy of InterCode has no hf_chat policy (Lemur's fork has)")
        return self._fence(action)

    def clean_cmd(self, action: str) -> str:
        """BashEnv.clean_cmd: the command line the container is given (docker-py splits it with shlex)."""
        return f'{self.shell} -c "{action.strip()}"'


def _handler_message(tree: ast.Module, where: str, caught: Optional[str]) -> str:
    """The text BashEnv.exec_action sets as the observation in its `except <caught>:` handler
    (`caught` None: the bare one): a plain string or an f-string without placeholders."""
    fn = scope(tree, "BashEnv.exec_action", where)
    for handler in (n for n in ast.walk(fn) if isinstance(n, ast.ExceptHandler)):
        name = handler.type.id if isinstance(handler.type, ast.Name) else None if handler.type is None else "?"
        if name != caught:
            continue
        for node in handler.body:
            if (isinstance(node, ast.Assign) and ast.unparse(node.targets[0]) == "self.observation"
                    and isinstance(node.value, (ast.Constant, ast.JoinedStr))):
                value = node.value
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    return value.value
                if isinstance(value, ast.JoinedStr) and all(isinstance(v, ast.Constant) for v in value.values):
                    return render(value, {}, where)
    raise PublishedFilesError(f"{where}: BashEnv.exec_action has no observation for `except {caught or ''}` "
                              "(the pinned commit has one)")


def _policy_limit(tree: ast.Module, where: str, cls: str) -> int:
    fn = scope(tree, f"{cls}.__init__", where)
    assert isinstance(fn, ast.FunctionDef)
    names = [a.arg for a in fn.args.args][-len(fn.args.defaults):] if fn.args.defaults else []
    defaults = dict(zip(names, fn.args.defaults))
    if "response_limit" not in defaults:
        raise PublishedFilesError(f"{where}: {cls}.__init__ has no response_limit default")
    return int(ast.literal_eval(defaults["response_limit"]))


def _template_v2(tree: ast.Module, where: str, me: dict) -> tuple[str, ast.JoinedStr, ast.JoinedStr, str]:
    """(first message, query f-string, observation f-string, the "No output" word) of TemplateV2."""
    explore = [n for n in ast.walk(scope(tree, "TemplateV2.get_init_msg", where))
               if isinstance(n, ast.Assign) and ast.unparse(n.targets[0]) == "self.explore_msg"
               and isinstance(n.value, ast.JoinedStr)]
    names = dict(me)
    if explore:
        names["self.explore_msg"] = render(explore[0].value, me, where)  # type: ignore[arg-type]
    init = render(returned(tree, where, "TemplateV2.get_init_msg"), names, where)
    no_output = [s for s in strings(tree, where, "TemplateV2.get_obs_msg") if s.strip()]
    if len(no_output) != 1:
        raise PublishedFilesError(f"{where}: TemplateV2.get_obs_msg has {len(no_output)} plain strings, the pinned "
                                  "commit 1")
    return (init, returned(tree, where, "TemplateV2.get_query_msg"), returned(tree, where, "TemplateV2.get_obs_msg"),
            no_output[0])


def setting_of(runner: ast.Module, where: str, env: str) -> tuple[str, str, dict]:
    """(language, setting, the template's `self` names) of InterCode's --env `env`: the policies'
    language is env upper-cased, the setting SETTING_MAP's of experiments/eval_n_turn.py."""
    settings = assigned(runner, where, "", "SETTING_MAP")
    if not isinstance(settings, dict) or env not in settings:
        raise PublishedFilesError(f"{where}: SETTING_MAP has no {env!r}")
    language, setting = env.upper(), settings[env]
    return language, setting, {"self.language": language, "self.setting": setting}


@functools.lru_cache(maxsize=8)
def _load(root: str, url: str) -> BashTexts:
    files = RepoFiles(INTERCODE, Path(root), url or None)
    prompts, p_at = files.tree(PROMPTS)
    runner, r_at = files.tree(RUNNER)
    policies, pol_at = files.tree(POLICIES)
    env, e_at = files.tree(BASH_ENV)
    ic_utils, i_at = files.tree(IC_UTILS)
    language, setting, me = setting_of(runner, r_at, ENV)
    init, query_node, obs_node, no_output = _template_v2(prompts, p_at, me)
    shells = assigned(env, e_at, "", "IMAGE_TO_SETTINGS")
    if not isinstance(shells, dict) or IMAGE not in shells:
        raise PublishedFilesError(f"{e_at}: IMAGE_TO_SETTINGS has no {IMAGE!r}")
    timeout = assigned(ic_utils, i_at, "", "TIMEOUT_DURATION")
    if not isinstance(timeout, int) or timeout <= 0:
        raise PublishedFilesError(f"{i_at}: TIMEOUT_DURATION is not a positive int")
    return BashTexts(
        env_name=assigned(env, e_at, "BashEnv", "name"), language=language, setting=setting, init_msg=init,
        no_output=no_output, shell=shells[IMAGE], status_script=assigned(env, e_at, "", "GIT_STATUS_SCRIPT"),
        timed_out=_handler_message(env, e_at, "TimeoutError"), malformed=_handler_message(env, e_at, None),
        timeout=timeout, response_limit=_policy_limit(policies, pol_at, "HFChatPolicy"),
        chat_response_limit=_policy_limit(policies, pol_at, "ChatGPTPolicy"),
        **_hf_chat(policies, pol_at, language),
        _query=lambda q: render(query_node, {**me, "query": q}, p_at),
        _obs=lambda o, r, q: render(obs_node, {**me, "observation": o, "reward": r, "self.query": q}, p_at))


def load_texts(files: RepoFiles) -> BashTexts:
    """InterCode-Bash's texts from `files` (read once per copy)."""
    return _load(str(files.root), files.url or "")

