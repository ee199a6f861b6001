"""Endpoint faults never spoil a row: the client retries 5xx, malformed bodies, empty choices,
dropped connections and stalls; a request that fails every try is lost (counted, never scored);
a refusal is not retried. The suite against an endpoint that injects every kind of fault into a
share of its answers gives the clean run's table, and what it loses is in table.md."""

from __future__ import annotations

import json
import re
import shutil
import threading

import pytest
from mint_fixture import write_mint
from scripted_endpoint import ScriptedEndpoint

from easylemur.eval.backends.client import Client, EndpointError, EndpointLost
from easylemur.eval.benchmarks.humaneval import load_humaneval
from easylemur.eval.cli import suite as suite_cli

KINDS = ("500", "malformed", "empty", "drop", "stall")


@pytest.mark.parametrize("kind", KINDS)
def test_each_fault_is_retried_and_a_lasting_one_is_lost(kind):
    with ScriptedEndpoint(complete=lambda prompt: "ok", faults=lambda r, a: kind if a < 2 else None, stall_s=1.0) as ep:
        c = Client(ep.url, timeout=0.5, retries=2, backoff=0.01)
        assert c.complete("x", max_tokens=4) == "ok" and ep.injected == [kind, kind]
        with pytest.raises(EndpointLost, match=r"lost after 2 tries"):
            Client(ep.url, timeout=0.5, retries=1, backoff=0.01).complete("y", max_tokens=4)


def test_a_refusal_is_not_retried_and_is_not_lost():
    with ScriptedEndpoint(complete=lambda prompt: "ok") as ep:
        c = Client(ep.url, model="nope", retries=3, backoff=0.01)
        with pytest.raises(EndpointError, match="HTTP 404") as e:
            c.complete("x", max_tokens=4)
        assert not isinstance(e.value, EndpointLost) and len(ep.requests) == 1


def _faulty(lasting: str = ""):
    """Faults on two of every three distinct requests, in the order they first arrive: the kinds
    in turn, on the first try or on the first two; a request containing `lasting` fails every try."""
    plans: dict[str, tuple] = {}
    lock = threading.Lock()

    def faults(request: dict, attempt: int):
        if lasting and lasting in json.dumps(request):
            return "500"
        key = json.dumps(request, sort_keys=True)
        with lock:
            if key not in plans:
                i = len(plans)
                faulted = sum(p is not None for p in plans.values())
                plans[key] = None if i % 3 == 2 else (KINDS[faulted % len(KINDS)], 1 + faulted % 2)
        plan = plans[key]
        return plan[0] if plan is not None and attempt < plan[1] else None
    return faults


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")
def test_the_suite_through_a_faulty_endpoint_gives_the_clean_table(tmp_path):
    problems = load_humaneval(None)[:6]
    right = {p.text: p.solution for p in problems[:4]}  # 4 of 6 right
    write_mint(tmp_path / "data" / "mint")

    def complete(prompt):
        return right.get(prompt, "    return None\n")

    def chat(messages):
        if "six times seven" in messages[0]["content"]:
            return "<execute> print(6 * 7) </execute>" if len(messages) == 1 else \
                "<solution> " + messages[-1]["content"].split("\n")[1] + " </solution>"
        return "<solution> 4 </solution>"

    def run(name: str, faults=None) -> tuple[dict, str]:
        out = tmp_path / name
        with ScriptedEndpoint(chat=chat, complete=complete, faults=faults, stall_s=1.5) as ep:
            code = suite_cli.main(["--endpoint", ep.url, "--suite", "lemur", "--tasks", "humaneval,m_gsm8k",
                                   "--limit", "6", "--turns", "2", "--budgets", "one-run", "--wikipedia", "off",
                                   "--data-dir", str(tmp_path / "data"), "--out", str(out), "--workers", "2",
                                   "--request-timeout", "1", "--retries", "2"])
            injected = list(ep.injected)
        assert code == 0
        return json.loads((out / "table.json").read_text())["tasks"], (out / "table.md").read_text(), injected

    clean, _, none = run("clean")
    assert none == [] and clean["humaneval"]["score"] == pytest.approx(4 / 6)
    faulty, md, injected = run("faulty", _faulty())
    assert set(injected) == set(KINDS), injected  # every kind of fault was met, and retried past
    for row in ("humaneval", "m_gsm8k"):
        assert faulty[row]["score"] == clean[row]["score"] and faulty[row]["lost"] == 0, row
    assert faulty["m_gsm8k"]["success@1"] == clean["m_gsm8k"]["success@1"]

    # one HumanEval prompt never answered: that sample is lost, the score is over the other five,
    # and table.md says so (1 of 6 is past the 5% line: incomplete)
    lost_prompt = problems[5].text.splitlines()[-2]
    rows, md, _ = run("lost", _faulty(lasting=lost_prompt))
    he = rows["humaneval"]
    assert (he["lost"], he["lost_of"], he["n"]) == (1, 6, 5) and he["score"] == pytest.approx(4 / 5)
    assert "incomplete" in he and "lost" in (tmp_path / "lost" / "humaneval" / "errors.txt").read_text()
    assert re.search(r"\| 80\.0 \(incomplete\)\[\^\d+\]", md), md
    assert "| samples | 5 (+1 lost)" in md and "1 of 6 samples or episodes lost to endpoint errors" in md
