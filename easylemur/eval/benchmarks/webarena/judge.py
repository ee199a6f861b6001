"""WebArena's LLM judge (`evaluation_harness/helper_functions.py`: llm_fuzzy_match for a
fuzzy_match reference, llm_ua_match for an "N/A" one), its messages read from the file by syntax
tree: the system message, the user message as each function builds it (`message = ...` and
`message += ...`, f-strings filled with the question, the reference and the prediction), and the
request's settings (WebArena: gpt-4-1106-preview, temperature 0, max_tokens 768). The verdict is
WebArena's: fuzzy: 0 when the lower-cased reply says "partially correct" or "incorrect", else 1
when it says "correct"; ua: 0 when it says "different", else 1 when it says "same". A reply that
says neither fails WebArena's assertion there (the task is lost to an error); here it scores 0
and the record names it (`judge_errors`)."""

from __future__ import annotations

import ast
import dataclasses
from typing import Callable, Sequence

from easylemur.eval.benchmarks.intercode_sql.texts import render
from easylemur.eval.benchmarks.published import PublishedFilesError, RepoFiles, scope
from easylemur.eval.benchmarks.webarena.files import HELPERS

# (messages, stop words) -> the reply
Chat = Callable[[list, Sequence[str]], str]
FUNCTIONS = {"fuzzy": "llm_fuzzy_match", "ua": "llm_ua_match"}


class JudgeError(ValueError):
    """A judge's reply that holds none of the words WebArena's verdict reads."""


@dataclasses.dataclass(frozen=True)
class JudgeTexts:
    system: str
    parts: dict  # kind -> the ast nodes (Constant / JoinedStr) the user message is built from, in order
    settings: dict  # the request's keyword arguments: model, temperature, max_tokens, top_p
    where: str

    def messages(self, kind: str, pred: str, reference: str, question: str) -> list[dict]:
        names = {"pred": pred, "reference": reference, "question": question}
        text = "".join(p.value if isinstance(p, ast.Constant) else render(p, names, self.where) for p in self.parts[kind])
        return [{"role": "system", "content": self.system}, {"role": "user", "content": text}]


def _message_parts(fn: ast.AST, where: str) -> list:
    parts: list = []
    for node in ast.walk(fn):
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else None
        if getattr(target, "id", None) != "message" or getattr(node, "value", None) is None:
            continue
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            parts = []
        if not isinstance(node.value, (ast.Constant, ast.JoinedStr)):
            raise PublishedFilesError(f"{where}: line {node.lineno}: the judge's message is built from strings")
        parts.append(node.value)
    if not parts:
        raise PublishedFilesError(f"{where}: no judge message built (the pinned commit builds one)")
    return parts


def load_judge(files: RepoFiles) -> JudgeTexts:
    tree, where = files.tree(HELPERS)
    parts, settings, system = {}, {}, set()
    for kind, name in FUNCTIONS.items():
        fn = scope(tree, name, where)
        parts[kind] = sorted(_message_parts(fn, where), key=lambda n: (n.lineno, n.col_offset))
        for node in ast.walk(fn):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "generate_from_openai_chat_completion":
                settings[kind] = {k.arg: ast.literal_eval(k.value) for k in node.keywords
                                  if k.arg in ("model", "temperature", "max_tokens", "top_p")}
            if isinstance(node, ast.Dict) and any(getattr(k, "value", None) == "role" for k in node.keys):
                d = {getattr(k, "value", None): v for k, v in zip(node.keys, node.values)}
                if getattr(d.get("role"), "value", None) == "system" and isinstance(d.get("content"), ast.Constant):
                    system.add(d["content"].value)
    if len(system) != 1 or set(settings) != set(FUNCTIONS) or settings["fuzzy"] != settings["ua"]:
        raise PublishedFilesError(f"{where}: the judges' system message and settings are not one (the pinned "
                                  "commit's are)")
    return JudgeTexts(system.pop(), parts, settings["fuzzy"], where)


def verdict(kind: str, reply: str) -> float:
    """WebArena's reading of the judge's reply."""
    reply = reply.lower()
    if kind == "fuzzy":
        if "partially correct" in reply or "incorrect" in reply:
            return 0.0
        if "correct" in reply:
            return 1.0
    else:
        if "different" in reply:
            return 0.0
        if "same" in reply:
            return 1.0
    raise JudgeError(f"the judge's reply says neither verdict: {reply[:200]!r}")


def make_judge(texts: JudgeTexts, chat: Chat) -> Callable[[str, str, str, str], float]:
    """judge(kind, pred, reference, question) -> 0.0 or 1.0, asking `chat`."""

    def judge(kind: str, pred: str, reference: str, question: str) -> float:
        return verdict(kind, chat(texts.messages(kind, pred, reference, question), ()))

    return judge
