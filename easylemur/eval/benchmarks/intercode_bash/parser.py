"""InterCode's bash action parser (`bash_parser` of experiments/utils/utils.py), restated: every
reply is an action (it never answers "no code").

- newlines become spaces first;
- a reply without a ``` fence: one that starts with "bash: " (any case) is the text after it;
  one that holds "command:" (any case) is the text after the first "command:" as written in
  lower case (InterCode looks it up case-sensitively: a reply with only "Command:" raises
  ValueError there, which its runner takes as a blocked episode; `parse_action` raises it too);
- otherwise the first fenced block of the reply lower-cased (a ```bash/```sh fence preferred,
  then any fence; InterCode matches on `action.lower()`, so the command is lower-cased), its
  blank space folded to single spaces; no block: the reply itself.
"""

from __future__ import annotations

import re

_SHELL_FENCE = re.compile(r"```(?:bash|BASH|sh)?([\S\s]+?)```", re.DOTALL)
_ANY_FENCE = re.compile(r"```([\S\s]+?)```", re.DOTALL)
_PREFIX, _COMMAND = "bash: ", "command:"


def parse_action(reply: str) -> str:
    """The command InterCode's bash parser takes from `reply` (ValueError where InterCode's raises)."""
    action = reply.replace("\n", " ")
    if "```" not in action:
        if action.lower().startswith(_PREFIX):
            return action[len(_PREFIX):]
        if _COMMAND in action.lower():
            return action[action.index(_COMMAND) + len(_COMMAND):]  # ValueError: only "Command:" and the like
    lower = action.lower()
    found = _SHELL_FENCE.findall(lower) + _ANY_FENCE.findall(lower)
    if not found:
        return action
    return " ".join(found[0].split())
