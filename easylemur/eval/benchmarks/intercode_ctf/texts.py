"""What InterCode-CTF tells the model and what its environment says, read from InterCode's (Lemur's
fork's) Python files by their syntax trees, never run: the `ctf` template (`TemplateCTF` of
`experiments/utils/prompts.py`: its first message with the demonstrations `DEMO_CTF`, the query and
observation messages) and the retry message (`PromptTemplate.get_retry_msg`, language "CTF"); the
fork's `HFChatPolicy` as it ran lemur-70b-chat-v1 for CTF (system message, separator, stop sequences,
the "Action:" it puts after the assistant's header and the "Action: ..." message it keeps); the
runner's CTF steps (`experiments/eval_n_turn.py`: `SETTING_MAP["ctf"]`, `preprocess_ctf`'s `cd`, and
the observation of a wrong flag); the environment's name and the commands it passes to Docker
unwrapped (`intercode/envs/ctf/ctf_env.py`), and, as CTFEnv inherits BashEnv.exec_action, the bash
environment's observations of a command that timed out or could not run and its time limit. A name
that is missing or has another shape is a `PublishedFilesError` naming the file."""

from __future__ import annotations

import ast
import dataclasses
import functools
from pathlib import Path
from typing import Callable

from easylemur.eval.benchmarks.intercode_bash.files import BASH_ENV, IC_UTILS
from easylemur.eval.benchmarks.intercode_bash.texts import _handler_message, _policy_limit, setting_of
from easylemur.eval.benchmarks.intercode_ctf.files import CTF_ENV, INTERCODE, POLICIES, PROMPTS, RUNNER
from easylemur.eval.benchmarks.intercode_sql.texts import _hf_chat, render
from easylemur.eval.benchmarks.published import PublishedFilesError, RepoFiles, assigned, fstrings, returned, scope

ENV = "ctf"


@dataclasses.dataclass(frozen=True)
class CtfTexts:
    env_name: str  # "ic_ctf"
    language: str  # "CTF"
    setting: str  # "Capture the Flag"
    init_msg: str  # the ctf template's first message, its demonstrations included
    no_output: str  # TemplateCTF's observation of an empty output
    retry_msg: str  # PromptTemplate.get_retry_msg: a reply without "Action:"
    wrong_flag: str  # the runner's observation of a submitted flag that is not the task's
    raw_prefixes: tuple  # commands CTFEnv.clean_cmd passes to Docker as they are ("python3 -c", ...)
    timed_out: str
    malformed: str
    timeout: int
    response_limit: int  # HFChatPolicy's observation cut
    chat_response_limit: int  # ChatGPTPolicy's
    hf_system: str
    hf_separator: str
    hf_stops: tuple
    action_prompt: str  # "Action:": what the fork's policy puts after the assistant's header
    _query: Callable = dataclasses.field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    _obs: Callable = dataclasses.field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    _kept: Callable = dataclasses.field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    _cd: Callable = dataclasses.field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    _line: Callable = dataclasses.field(repr=False, compare=False, default=None)  # type: ignore[assignment]
    assistant_open: str = ""  # what lemur_encode_message puts after the messages: the assistant's header

    def encode(self, dialogue: list) -> str:
        """The fork's lemur_encode_message: the dialogue as ChatML text, the assistant's header open,
        then the policy's "Action:" (the text the fork sent to its TGI endpoint)."""
        return "".join(self._line(d["role"], d["content"]) for d in dialogue) + self.assistant_open + self.action_prompt

    def query_msg(self, query: str) -> str:
        return self._query(query)

    def obs_msg(self, observation: str) -> str:
        """TemplateCTF.get_obs_msg: "Output: ..." or, for an empty observation, "No output"."""
        return self._obs(observation) if observation != "" else self.no_output

    def kept(self, action: str) -> str:
        """The assistant's message the fork's policy keeps for a parsed action ("Action: ...")."""
        return self._kept(action)

    def cd(self, task_id: int) -> str:
        """preprocess_ctf's first command: into the task's folder."""
        return self._cd(task_id)

    def clean_cmd(self, action: str) -> str:
        """CTFEnv.clean_cmd: `python3 -c ...` as it is, anything else in single quotes for bash."""
        if any(action.strip().startswith(x) for x in self.raw_prefixes):
            return action
        return "/bin/bash -c '" + action.strip().replace("'", "'\\''") + "'"


def _one_string_list(tree: ast.Module, where: str, qualname: str) -> tuple:
    lists = [n for n in ast.walk(scope(tree, qualname, where)) if isinstance(n, ast.List)
             and n.elts and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in n.elts)]
    if len(lists) != 1:
        raise PublishedFilesError(f"{where}: {qualname} has {len(lists)} lists of strings, the pinned commit 1")
    return tuple(ast.literal_eval(lists[0]))


def _wrong_flag(tree: ast.Module, where: str) -> str:
    """The observation run_expr gives a submitted flag that is not the task's: the string it assigns
    to `observation` under `if done and reward != 1 ...`."""
    for node in ast.walk(scope(tree, "ExperimentWrapper.run_expr", where)):
        if isinstance(node, ast.If) and "reward != 1" in ast.unparse(node.test):
            for inner in node.body:
                if (isinstance(inner, ast.Assign) and ast.unparse(inner.targets[0]) == "observation"
                        and isinstance(inner.value, ast.Constant)):
                    return str(inner.value.value)
    raise PublishedFilesError(f"{where}: ExperimentWrapper.run_expr has no observation for a wrong flag")


def _lemur_encoding(tree: ast.Module, where: str) -> tuple[Callable, str]:
    """lemur_encode_message of HFChatPolicy.__init__: (a message's line, the assistant's open header)."""
    fn = next((n for n in ast.walk(scope(tree, "HFChatPolicy.__init__", where))
               if isinstance(n, ast.FunctionDef) and n.name == "lemur_encode_message"), None)
    lines = [n for n in ast.walk(fn) if isinstance(n, ast.JoinedStr)] if fn is not None else []
    opens = [n.value.value for n in ast.walk(fn) if isinstance(n, ast.AugAssign) and isinstance(n.value, ast.Constant)
             ] if fn is not None else []
    parts = lines[0].values if len(lines) == 1 else []
    names = [ast.unparse(v.value) for v in parts if isinstance(v, ast.FormattedValue)]
    if names != ["d['role']", "d['content']"] or len(opens) != 1:
        raise PublishedFilesError(f"{where}: HFChatPolicy's lemur_encode_message is not as at the pinned commit")

    def line(role: str, content: str) -> str:
        values = {"d['role']": role, "d['content']": content}
        return "".join(str(v.value) if isinstance(v, ast.Constant) else str(values[ast.unparse(v.value)]) for v in parts)

    return line, str(opens[0])


@functools.lru_cache(maxsize=8)
def _load(root: str, url: str) -> CtfTexts:
    files = RepoFiles(INTERCODE, Path(root), url or None)
    prompts, p_at = files.tree(PROMPTS)
    runner, r_at = files.tree(RUNNER)
    policies, pol_at = files.tree(POLICIES)
    ctf_env, c_at = files.tree(CTF_ENV)
    bash_env, b_at = files.tree(BASH_ENV)
    ic_utils, i_at = files.tree(IC_UTILS)
    language, setting, me = setting_of(runner, r_at, ENV)
    # TemplateCTF.get_init_msg returns f"""...""" + DEMO_CTF
    init = [n for n in ast.walk(scope(prompts, "TemplateCTF.get_init_msg", p_at)) if isinstance(n, ast.Return)]
    value = init[0].value if len(init) == 1 else None
    if not (isinstance(value, ast.BinOp) and isinstance(value.left, ast.JoinedStr) and isinstance(value.right, ast.Name)):
        raise PublishedFilesError(f"{p_at}: TemplateCTF.get_init_msg is not an f-string plus the demonstrations")
    init_msg = render(value.left, me, p_at) + assigned(prompts, p_at, "", value.right.id)
    obs = sorted((n for n in ast.walk(scope(prompts, "TemplateCTF.get_obs_msg", p_at)) if isinstance(n, ast.Return)),
                 key=lambda n: n.lineno)
    if len(obs) != 2 or not isinstance(obs[0].value, ast.JoinedStr) or not isinstance(obs[1].value, ast.Constant):
        raise PublishedFilesError(f"{p_at}: TemplateCTF.get_obs_msg is not an f-string and a plain fallback")
    obs_node, no_output = obs[0].value, str(obs[1].value.value)
    query_node = returned(prompts, p_at, "TemplateCTF.get_query_msg")
    hf = _hf_chat(policies, pol_at, language)
    forward = scope(policies, "HFChatPolicy.forward", pol_at)
    prompt = [ast.literal_eval(n.value) for n in ast.walk(forward) if isinstance(n, ast.Assign)
              and ast.unparse(n.targets[0]) == "action_prompt" and isinstance(n.value, ast.Constant)]
    if len(prompt) != 1:
        raise PublishedFilesError(f"{pol_at}: HFChatPolicy.forward has no one action_prompt (the pinned commit has)")
    kept = [n for n in fstrings(policies, pol_at, "HFChatPolicy.forward")
            if isinstance(n.values[0], ast.Constant) and str(n.values[0].value).startswith(prompt[0])]
    # preprocess_ctf's f"cd /ctf/{record['task_id']}": its text before the task's id
    cd = [n.values[0].value for n in fstrings(runner, r_at, "preprocess_ctf")
          if len(n.values) == 2 and isinstance(n.values[0], ast.Constant) and str(n.values[0].value).startswith("cd ")
          and ast.unparse(n.values[1].value) == "record['task_id']"]
    if len(kept) != 1 or len(cd) != 1:
        raise PublishedFilesError(f"{pol_at}, {r_at}: the fork's CTF action message or preprocess_ctf's cd is not "
                                  "as at the pinned commit")
    line, opened = _lemur_encoding(policies, pol_at)
    timeout = assigned(ic_utils, i_at, "", "TIMEOUT_DURATION")
    return CtfTexts(
        env_name=assigned(ctf_env, c_at, "CTFEnv", "name"), language=language, setting=setting, init_msg=init_msg,
        no_output=no_output, retry_msg=render(returned(prompts, p_at, "PromptTemplate.get_retry_msg"), me, p_at),
        wrong_flag=_wrong_flag(runner, r_at), raw_prefixes=_one_string_list(ctf_env, c_at, "CTFEnv.clean_cmd"),
        timed_out=_handler_message(bash_env, b_at, "TimeoutError"), malformed=_handler_message(bash_env, b_at, None),
        timeout=int(timeout), response_limit=_policy_limit(policies, pol_at, "HFChatPolicy"),
        chat_response_limit=_policy_limit(policies, pol_at, "ChatGPTPolicy"),
        hf_system=hf["hf_system"], hf_separator=hf["hf_separator"], hf_stops=hf["hf_stops"], action_prompt=prompt[0],
        _query=lambda q: render(query_node, {**me, "query": q}, p_at),
        _obs=lambda o: render(obs_node, {**me, "observation": o}, p_at),
        _kept=lambda a: render(kept[0], {**me, "action": a}, pol_at),
        _cd=lambda task_id: f"{cd[0]}{task_id}", _line=line, assistant_open=opened)


def load_texts(files: RepoFiles) -> CtfTexts:
    """InterCode-CTF's texts from `files` (read once per copy)."""
    return _load(str(files.root), files.url or "")
