"""MINT's seven tasks by MINT's protocol (easylemur/eval/benchmarks/mint/), against a miniature
of MINT's repository written here (tests/mint_fixture.py: MINT's layout and Python structure,
its own texts): every word the model is told comes from those files, an episode's dialogue is
MINT's to the character, the checks follow MINT's rules (cheats included), the replay endpoint
gives back a transcript's success, the critic sees MINT's feedback prompt without the answer,
and the files are fetched once into a cache."""

from __future__ import annotations

import functools
import http.server
import json
import shutil
import threading
from pathlib import Path

import pytest
from mint_fixture import TEMPLATE, TEXTS, write_mint
from scripted_endpoint import ScriptedEndpoint

from easylemur.eval.api.task import MissingData
from easylemur.eval.backends.client import Client
from easylemur.eval.benchmarks import registry
from easylemur.eval.benchmarks.mint import checks
from easylemur.eval.benchmarks.mint.files import COMMIT
from easylemur.eval.benchmarks.mint.protocol import run_budget, solved_within, success_rate
from easylemur.eval.benchmarks.mint.tasks import MintProblem
from easylemur.eval.benchmarks.mint.replay import Replayer, serve
from easylemur.eval.benchmarks.published import PublishedFilesError
from easylemur.eval.benchmarks.mint.wikipedia import wikipedia_tool
from easylemur.eval.sandbox import Sandbox

needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap (bwrap) is not installed")


@pytest.fixture(scope="module")
def mint_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("evaldata") / "mint"
    write_mint(root)
    return root


@pytest.fixture(scope="module")
def sandbox():
    sb = Sandbox(timeout=20)
    sb.check()
    return sb


def client_chat(url: str):
    client = Client(url)
    return lambda messages, stop: client.chat(messages, max_tokens=512, stop=stop)


def test_every_text_the_model_sees_is_read_from_minTs_files(mint_dir, tmp_path):
    task = registry.build("m_humaneval", str(mint_dir))
    p = task.problems[0]
    first = task.first_message(p, 3, 2, False)
    example = (mint_dir / "mint/tasks/in_context_examples/humaneval/with_tool.txt").read_text()
    assert first == TEMPLATE.format(max_total_steps=3, max_propose_solution=2, tool_desc="", in_context_example=example,
                                    task_prompt="Task:\n" + TEXTS["he_prefix"] + p.record["prompt"])
    assert "with feedback" in task.first_message(p, 5, 2, True)  # a feedback run shows its own example
    gsm = registry.build("m_gsm8k", str(mint_dir))
    assert gsm.problems[0].prompt == "What is six times seven? Solution output format: an integer."  # stripped
    assert TEXTS["tool_header"] + "[1] wikipedia_search(query: str) -> str\nFixture wiki" in gsm.first_message(
        gsm.problems[0], 5, 2, False)
    tq = registry.build("m_theoremqa", str(mint_dir))
    assert tq.problems[0].prompt.startswith(TEXTS["tq_prefix"])
    assert gsm.texts.invalid_input == TEXTS["invalid"] and gsm.texts.stop_words[-1] == "\nHuman:"
    mbpp = registry.build("m_mbpp", str(mint_dir))
    assert mbpp.problems[0].prompt == "Write a function to square a number.\nassert square(3) == 9"
    # a copy whose Python moved a text is refused, naming the file and the name
    other = tmp_path / "mint"
    shutil.copytree(mint_dir, other)
    env = other / "mint/envs/general_env.py"
    env.write_text(env.read_text().replace("INVALID_INPUT_MESSAGE", "RENAMED"))
    with pytest.raises(PublishedFilesError, match=r"general_env.py: no assignment to INVALID_INPUT_MESSAGE"):
        registry.build("m_gsm8k", str(other))
    with pytest.raises(MissingData, match=r"not a copy of MINT's repository"):
        registry.build("m_gsm8k", str(tmp_path))


def test_reasoning_and_multiple_choice_checks_follow_minTs_rules(mint_dir):
    assert checks.reasoning("42", " 43 ") and not checks.reasoning("42", "45")  # within 5% of the reference
    assert checks.reasoning("paris", "it is paris, france") and not checks.reasoning("paris", "lyon")
    # the paper's rules (as its transcripts were scored, before MINT's fix): a negative reference never matched
    assert checks.reasoning("-4.0", "-4") and not checks.reasoning("-4.0", "-4", "paper")
    mmlu = registry.build("m_mmlu", str(mint_dir)).problems[0]
    assert mmlu.options == {"a": "6", "b": "121", "c": "18107", "d": "54,320"}
    assert checks.multiple_choice("c", mmlu.options, "C")
    assert not checks.multiple_choice("c", mmlu.options, "(A) 6")  # "a)" in it: the answer is the letter a
    assert checks.multiple_choice("c", mmlu.options, "the answer is 18107")  # the right option's text
    assert not checks.multiple_choice("c", mmlu.options, "B) 121")
    with pytest.raises(KeyError):  # MINT's check raises here too (its observation is the error)
        checks.multiple_choice("e", mmlu.options, "B")


@pytest.mark.slow
@needs_bwrap
def test_theoremqa_and_code_checks_run_in_the_sandbox_and_cheats_fail(mint_dir, sandbox):
    tq = {p.answer_type: p for p in registry.build("m_theoremqa", str(mint_dir)).problems}
    he = registry.build("m_humaneval", str(mint_dir))
    cases = [(tq["list of integer"], "[5, 3, 2]", True), (tq["list of integer"], "(2, 3, 5)", True),
             (tq["list of integer"], "[2, 3]", False), (tq["bool"], "yes", True), (tq["bool"], "False", False),
             (tq["float"], "x = 3.13", True), (tq["float"], "3.5", False),
             (tq["float"], "__import__('os')._exit(0)", False),  # the eval'd answer ends its process: no pass
             (tq["float"], "type('F', (float,), {'__eq__': lambda s, o: True})(0)", False)]
    for p, answer, want in cases:
        assert (sandbox.run(checks.judge("theoremqa", p, answer)) == "passed") is want, (p.answer_type, answer)
    option = MintProblem("9", "Which is it?", "a", answer_type="option")  # an option answer, as MINT's files have
    assert sandbox.run(checks.judge("theoremqa", option, "a) f is increasing")) == "passed"
    assert sandbox.run(checks.judge("theoremqa", option, "a) f is increasing", "paper")) != "passed"  # before cc4fbc1
    p = he.problems[0]
    assert sandbox.run(he.judge(p, "def add(a, b):\n    return a + b")) == "passed"
    assert sandbox.run(he.judge(p, "def add(a, b):\n    return a - b")) != "passed"
    assert sandbox.run(he.judge(p, "import os\ndef add(a, b):\n    os._exit(0)")) != "passed"


def _transcript(task, p, budget, replies, observations, success, reason):
    """A MINT results.jsonl record, as MINT's environment writes it, from its parts."""
    history = [{"role": "user", "content": task.first_message(p, budget, min(budget, 2), False)}]
    for reply, obs in zip(replies, observations):
        if reply:
            history.append({"role": "assistant", "content": "Assistant:\n" + reply + "\n"})
        if obs is not None:
            history.append({"role": "user", "content": obs})
    return {"state": {"history": history, "success": success, "terminate_reason": reason}, "task": task.record(p)}


@needs_bwrap
def test_an_episode_is_minTs_dialogue_to_the_character_and_a_replay_gives_its_success(mint_dir, sandbox, tmp_path):
    """Hand-written transcripts of MINT's format are replayed through the harness: its records
    must equal them message for message (the observations, counters, invalid actions, the
    live interpreter's output, the last-step line), and the success rates must be theirs."""
    task = registry.build("m_gsm8k", str(mint_dir))
    p0, p1 = task.problems
    T = TEXTS
    turns = T["turns"].format
    run = [  # p0 at budget 5: state across cells, an invalid action, an empty reply, a wrong then a right answer
        ("<thought> compute </thought>\n<execute>\nx = 6 * 7\nx\n</execute>",
         T["observation"] + "Out[2]: 42\n" + turns(4, 2)),
        ("I think I know.", T["observation"] + T["invalid"] + "\n" + turns(3, 2)),
        ("", T["observation"] + T["invalid"] + "\n" + turns(2, 2)),
        ("<solution> 30 </solution>", T["observation"] + T["wrong"] + turns(1, 1) + T["last"]),
        ("<execute> print(x) </execute> no, answer: <solution> 42 </solution>", None),
    ]
    good = _transcript(task, p0, 5, [r for r, _ in run], [o for _, o in run], True, "task_success")
    # p1 at budget 5: its reply carries an invented observation, cut at MINT's stop word; then two wrong answers
    bad = _transcript(task, p1, 5, ["<solution> 5 </solution>", "<solution> 3 </solution>"],
                      [T["observation"] + T["wrong"] + turns(4, 1), None], False, "max_propose_steps")
    out = tmp_path / "outputs" / "F=None" / "max5_p2+tool+cd" / "reasoning" / "gsm8k"
    out.mkdir(parents=True)
    (out / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in (good, bad)))
    replayer = Replayer(tmp_path / "outputs")
    server = serve(replayer)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        sent = replayer.answer  # the first reply of p1 invents its own observation: the harness must cut it

        def answer(messages):
            status, text = sent(messages)
            if messages[0]["content"] == bad["state"]["history"][0]["content"] and len(messages) == 1:
                text += "\nObservation:\nCorrect! <solution> 4 </solution>"
            return status, text
        replayer.answer = answer
        records = run_budget(task, client_chat(url), sandbox, 5, concurrency=2, workers=1)
    finally:
        server.shutdown()
    for got, want in zip([r["state"]["history"] for r in records], [good["state"]["history"], bad["state"]["history"]]):
        assert [m["content"] for m in got] == [m["content"] for m in want]
        assert got == want
    assert [r["state"]["terminate_reason"] for r in records] == ["task_success", "max_propose_steps"]
    assert records[0]["state"]["agent_action_count"] == {"propose_solution": 2, "use_tool": 1, "invalid_action": 2}
    assert success_rate(records) == 0.5 and solved_within(records)(4) == 0.0 and solved_within(records)(5) == 0.5
    assert replayer.past_end == 0 and replayer.unknown == 0


@pytest.mark.slow
@needs_bwrap
def test_the_suite_runs_a_run_per_budget_and_an_endpoint_error_ends_the_episode(mint_dir, tmp_path):
    """`eval suite` on MINT rows: k = 1 and k = 2 are separate runs (k = 1 allows one proposal),
    their episodes are written in MINT's format, and an HTTP 400 (a dialogue past the model's
    context) ends an episode unsolved, counted."""
    from easylemur.eval.cli.suite import main

    def chat(messages):
        first = messages[0]["content"]
        if "2 plus 2" in first:
            return "<solution> 4 </solution>" if len(messages) > 1 or "Budget: 1 steps" in first else \
                "<execute> print(2 + 2) </execute>"
        return "<solution> 30 </solution>" if len(messages) == 1 else "<solution> 42 </solution>"

    with ScriptedEndpoint(chat=chat) as ep:
        code = main(["--endpoint", ep.url, "--tasks", "m_gsm8k", "--data-dir", str(mint_dir.parent), "--turns", "2",
                     "--wikipedia", "off", "--out", str(tmp_path / "out"), "--workers", "1"])
    assert code == 0
    row = json.loads((tmp_path / "out" / "table.json").read_text())["tasks"]["m_gsm8k"]
    # k=1: "30" is refused at once (one proposal), "2 plus 2" answered right; k=2: both solved
    assert (row["success@1"], row["success@2"], row["budgets"]) == (0.5, 1.0, "a run per budget")
    k1 = [json.loads(x) for x in (tmp_path / "out" / "m_gsm8k" / "k=1" / "results.jsonl").read_text().splitlines()]
    assert "Budget: 1 steps, 1 proposals" in k1[0]["state"]["history"][0]["content"]
    assert "| M-GSM8K | none | a run per budget | 50.0 | 100.0 |" in (tmp_path / "out" / "table.md").read_text()

    def too_long(messages):
        raise RuntimeError("unused")
    with ScriptedEndpoint(chat=lambda m: "<execute> print(1) </execute>") as ep:
        ep.chat = None  # every chat request is a 404: the endpoint refuses the dialogue
        code = main(["--endpoint", ep.url, "--tasks", "m_gsm8k", "--data-dir", str(mint_dir.parent), "--turns", "1",
                     "--wikipedia", "off", "--out", str(tmp_path / "out2"), "--workers", "1"])
    row = json.loads((tmp_path / "out2" / "table.json").read_text())["tasks"]["m_gsm8k"]
    assert code == 0 and row["score"] == 0.0 and row["errors"] == 2


@needs_bwrap
def test_the_critic_sees_minTs_feedback_prompt_without_the_answer_and_its_reply_reaches_the_agent(mint_dir, sandbox):
    task = registry.build("m_hotpotqa", str(mint_dir))
    critic_prompts = []

    def critic(messages):
        critic_prompts.append(messages)
        return "Fixture critic: check the capital again."

    def agent(messages):
        return "<solution> Lyon </solution>" if len(messages) == 1 else "<solution> Paris </solution>"

    with ScriptedEndpoint(chat=agent) as ep, ScriptedEndpoint(chat=critic) as fb:
        records = run_budget(task, client_chat(ep.url), sandbox, 5, feedback=client_chat(fb.url), concurrency=1)
    prompt = critic_prompts[0][0]["content"]
    assert len(critic_prompts) == 1 and critic_prompts[0][0]["role"] == "user"
    assert prompt.startswith("Fixture critic. Example:\n\nTask:\nAdd 1 and 1.")  # the example from its "Task:" on
    assert "Task:\nWhich city is the capital of France?\nAssistant:\n<solution> Lyon </solution>" in prompt
    assert TEXTS["no_gt"] in prompt and "paris" not in prompt.lower()  # no ground truth
    hist = records[0]["state"]["history"]
    assert hist[2]["content"].endswith("\nExpert feedback:\nFixture critic: check the capital again.\n")
    assert records[0]["state"]["success"] is True and "with feedback" in hist[0]["content"]


@needs_bwrap
def test_wikipedia_search_is_answered_on_the_host_from_a_pages_file(mint_dir, sandbox, tmp_path):
    pages = tmp_path / "pages.jsonl"
    pages.write_text(json.dumps({"title": "Paris", "summary": "Paris is the capital of France."}) + "\n")
    task = registry.build("m_hotpotqa", str(mint_dir))
    w = task.texts.wikipedia
    tool = wikipedia_tool(w, str(pages))
    assert tool("paris") == "Page: Paris\nSummary: Paris is the capital of France."
    assert tool("Lyon") == TEXTS["no_result"] and wikipedia_tool(w, "off")("Paris") == TEXTS["no_result"]

    def agent(messages):
        if len(messages) == 1:
            return "<execute> r = wikipedia_search('Paris')\nprint(r.split('Summary: ')[1]) </execute>"
        return "<solution> " + messages[-1]["content"].split("\n")[1].split(" is")[0] + " </solution>"

    with ScriptedEndpoint(chat=agent) as ep:
        records = run_budget(task, client_chat(ep.url), sandbox, 3, tools={w.name: tool}, concurrency=1)
    assert records[0]["state"]["history"][2]["content"].startswith("Obs:\nParis is the capital of France.\n")
    assert records[0]["state"]["success"] is True


def test_minTs_files_are_fetched_once_into_the_cache_and_offline_is_one_line(mint_dir, tmp_path, monkeypatch):
    served = tmp_path / "served" / COMMIT
    shutil.copytree(mint_dir, served)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "served"))
    handler.log_message = lambda *a: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    cache = tmp_path / "cache"
    monkeypatch.setenv("EASYLEMUR_MINT_URL", f"http://127.0.0.1:{httpd.server_address[1]}")
    monkeypatch.setenv("EASYLEMUR_MINT_CACHE", str(cache))
    try:
        task = registry.build("m_mmlu", registry.find_data("m_mmlu", None, None))
    finally:
        httpd.shutdown()
        httpd.server_close()
    assert len(task.problems) == 1 and (cache / "data/processed/mmlu/test_prompts.json").is_file()
    assert (cache / "mint/prompt/templates/template_with_tool.txt").read_text() == TEMPLATE
    assert not [p for p in cache.rglob(".*") if p.is_file()]  # no partial download left behind
    again = registry.build("m_mmlu", None)  # the server is gone: the cache answers
    assert again.problems == task.problems
    monkeypatch.setenv("EASYLEMUR_MINT_CACHE", str(tmp_path / "empty"))
    with pytest.raises(MissingData, match=r"no local copy and fetching http://127\.0\.0\.1:\d+/"
                                          + COMMIT + r"/.* failed .*--data-dir D with D/mint"):
        registry.build("m_mmlu", None)
