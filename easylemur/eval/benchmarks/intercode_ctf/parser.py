"""InterCode's CTF action parser (`ctf_parser` of experiments/utils/utils.py), restated: the reply's
first line; where it holds "Action:", the text after the first "Action:", stripped, is the action;
otherwise the line, stripped, is no action (the runner answers with the retry message). The fork's
policy puts "Action: " before the model's reply, so with it every reply is an action."""

from __future__ import annotations

import re

_ACTION = re.compile(r"Action:(.*)", re.DOTALL)


def parse_action(reply: str) -> tuple[str, bool]:
    """(action, is_code) as InterCode's ctf_parser gives them."""
    line = reply.split("\n")[0]
    found = _ACTION.findall(line)
    return (found[0].strip(), True) if found else (line.strip(), False)
