"""What the MultiPL-E seal tests share (test_multipl_e_seal_scripts.py; its compiled-language
twin can use the same): a batch of cases judged once per test run, the sealed Programs and
today's single-process ones through the sandbox two at a time with MultiPL-E's reference harness
beside them, and a judge run against many values files in one sandbox."""

from __future__ import annotations

import concurrent.futures
import json
from pathlib import Path
from typing import Callable, Optional, Sequence

import pytest

from easylemur.eval.benchmarks.multipl_e.languages import LANGUAGES, unavailable
from easylemur.eval.sandbox import PASSED, Program, Sandbox, run_programs
from test_multipl_e import reference_verdict

# (key, sealed Program, (lang, row, completion) for the reference or None, today's Program or None)
Case = tuple


def judge_cases(cases: Sequence[Case], out: Path, also: Sequence[tuple[list, Program]] = ()) -> None:
    """out/verdicts.json: [[key], sealed result, reference pass or null, today's result or null] per
    case, then [[key], output, null, null] for each Program of `also` (run one at a time beside)."""
    programs = [p for _, sealed, _, today in cases for p in (sealed, today) if p is not None]
    sandbox = Sandbox(timeout=10)  # each Program brings its language's own wall clock
    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        refs = [pool.submit(reference_verdict, LANGUAGES[ref[0]], ref[1], ref[2], "") if ref else None
                for _, _, ref, _ in cases]
        results = iter(run_programs(programs, sandbox, workers=2))
        rows = [[list(key), sandbox.run_program(program).output, None, None] for key, program in also]
        for (key, _, _, today), ref in zip(cases, refs):
            sealed = next(results)
            rows.append([list(key), sealed, ref.result() if ref else None, next(results) if today is not None else None])
    (out / "verdicts.json").write_text(json.dumps(rows))


def load_verdicts(built_once: Callable, name: str, build: Callable[[Path], None]) -> dict:
    """{key: (sealed result or output, reference pass, today's result)} from `build`'s
    verdicts.json, built once per test run (the worker that asks first judges, the others read)."""
    rows = json.loads((built_once(name, build) / "verdicts.json").read_text())
    return {tuple(key): (sealed, ref, today) for key, sealed, ref, today in rows}


def need(lang: str) -> None:
    """Skips the test when `lang`'s toolchain is not installed here."""
    why = unavailable(LANGUAGES[lang])
    if why:
        pytest.skip(why)


def judge_loop(sealed: Program, values: Sequence[bytes], run: Optional[tuple] = None) -> Program:
    """A Program that runs the judge of `sealed` once per values file of `values`, in one sandbox,
    and prints "<index> <exit status> <1 if it printed its end marker, else 0>" per file: the
    judge's verdict on each, without a program stage (the judge's files alone, no compile step)."""
    judge = sealed.judge
    argv = " ".join(f"'{a}'" for a in (run or judge.steps[-1]))
    loop = (f"for i in {{0..{len(values) - 1}}}; do cp v$i values; {argv} > out 2>&1; s=$?; m=0; "
            f"[[ $(< out) == *{judge.end_marker}* ]] && m=1; echo \"$i $s $m\"; done")
    return Program(files=judge.files + tuple((f"v{i}", v) for i, v in enumerate(values)),
                   steps=(("bash", "-c", loop),), env=judge.env, timeout=30.0)


def assert_cheats_fail(lang: str, cheats: dict, verdicts: dict) -> None:
    """Every cheat of `lang` fails sealed; `cheats`: name -> (whether MultiPL-E's reference passes
    it, whether today's single-process layout does), each None where the test does not claim it."""
    need(lang)
    for name, (ref_passes, today_passes) in cheats.items():
        sealed, reference, today = verdicts[(lang, "cheat", name)]
        assert sealed.startswith("failed: "), (lang, name, sealed)
        if ref_passes is not None:
            assert reference is ref_passes, f"{lang} {name!r}: MultiPL-E's reference {'passes' if reference else 'fails'} it"
        if today_passes is not None:
            assert (today == PASSED) is today_passes, f"{lang} {name!r}: the single-process layout gave {today}"
