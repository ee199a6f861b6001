"""WebArena (`easylemur/eval/benchmarks/webarena/`): its texts and tasks read from a miniature of
its repository in WebArena's formats (tests/webarena_fixture.py), its evaluators, and episodes
played through headless Chromium on a shop served on the loopback: scripted correct actions
score 1 under each evaluator kind, wrong ones 0, and run.py's early stops end an episode."""

from __future__ import annotations

import concurrent.futures
import json
import re
import shutil
import types
from pathlib import Path

import pytest

from easylemur.errors import InputError
from easylemur.eval.benchmarks.webarena import evaluators, protocol
from easylemur.eval.benchmarks.webarena.task import build, parse_url_map
from webarena_fixture import Site, write_repo

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
needs_browser = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    s = Site(tmp_path_factory.mktemp("shop"))
    yield s
    s.close()


@pytest.fixture(scope="module")
def browser():
    """One Chromium for the module's episodes: each play() resets it into a fresh context."""
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian's chromium is not installed")
    from easylemur.eval.benchmarks.webarena.browser import Browser

    with Browser() as b:
        yield b


@pytest.fixture
def task(tmp_path, site):
    return build(str(write_repo(tmp_path / "webarena")), url_map=f"shopping={site.url}")


def test_texts_tasks_and_skips_come_from_the_files(task, site):
    t = task.texts
    assert t.run["max_steps"] == 6 and t.run["parsing_failure_th"] == 2 and t.run["max_tokens"] == 384
    assert t.sites == {"REDDIT": "http://reddit.com", "SHOPPING": "http://onestopmarket.com"}
    assert t.intro.startswith("You are a fixture agent") and t.action_splitter == "```"
    assert [p.task_id for p in task.problems] == list(range(10))
    config = task.configured(task.problems[2])
    assert config["start_url"] == f"{site.url}/index.html"
    assert config["eval"]["reference_url"] == f"{site.url}/search.html?q=fax"
    reasons = {p.task_id: task.skip_reason(p) for p in task.problems}
    assert all(reasons[i] is None for i in (0, 1, 2, 3, 7)), reasons
    assert "LLM" in reasons[4] and "reddit is not in --webarena's map" in reasons[5]
    assert "logged in" in reasons[6] and "LLM" in reasons[8] and "helper gitlab_get_issue_count, not known" in reasons[9]
    task.judge = lambda *a: 1.0  # with a judge, the fuzzy_match tasks are played
    assert task.skip_reason(task.problems[4]) is None and task.skip_reason(task.problems[8]) is None


def test_url_map_from_a_file_or_inline_and_its_errors(tmp_path):
    sites = ["shopping", "reddit"]
    f = tmp_path / "map.json"
    f.write_text(json.dumps({"shopping": "http://h:7770/", "auth": str(tmp_path)}))
    assert parse_url_map(str(f), sites) == {"shopping": "http://h:7770", "auth": str(tmp_path)}
    assert parse_url_map("shopping=http://h:1,reddit=http://h:2", sites) == {"shopping": "http://h:1",
                                                                              "reddit": "http://h:2"}
    with pytest.raises(InputError, match="unknown site gitlab"):
        parse_url_map("gitlab=http://h:3", sites)
    with pytest.raises(InputError, match="no such file"):
        parse_url_map(str(tmp_path / "nope.json"), sites)
    with pytest.raises(InputError, match="not site=URL"):
        parse_url_map("shopping=", sites)


def test_evaluators_as_webarena_scores():
    c = {"task_id": 0, "eval": {"eval_types": ["string_match"], "reference_answers": {"exact_match": "$279.49"}}}
    assert evaluators.evaluate(c, ' "$279.49" ', None) == 1.0  # stripped, quotes removed, lower-cased
    assert evaluators.evaluate(c, "279.49", None) == 0.0
    c["eval"]["reference_answers"] = {"must_include": ["3"]}  # one reference of one character: a word
    assert evaluators.string_score(c, "There are 3 items.") == 1.0
    assert evaluators.string_score(c, "There are 13 items") == 0.0
    c["eval"]["reference_answers"] = {"must_include": ["3", "items"]}  # two references: substrings
    assert evaluators.string_score(c, "There are 13 items") == 1.0
    u = {"task_id": 1, "eval": {"reference_url": "http://h/search?q=fax |OR| http://h/find?q=fax&page=1"}}
    assert evaluators.url_score(u, "http://h/search/?q=fax&page=1&sort=a") == 1.0  # GOLD in PRED
    assert evaluators.url_score(u, "http://h/find?q=fax") == 0.0  # page=1 is required by the second
    assert evaluators.url_score(u, "http://h/search?q=printer&page=1") == 0.0


def _id(observation: str, role: str, name: str) -> str:
    m = re.search(rf"\[(\d+)\] {role} '{re.escape(name)}'", observation)
    assert m, f"no {role} {name!r} in:\n{observation}"
    return m.group(1)


def scripted(steps: list, seen: list):
    """A model that answers each step with the CoT form and the next action of `steps`; an entry
    is the action text, or a function of the observation giving it. The prompts go to `seen`."""
    it = iter(steps)

    def model(messages, stop):
        seen.append(messages)
        obs = messages[-1]["content"]
        step = next(it, "stop []")
        action = step(obs) if callable(step) else step
        return f"Let's think step-by-step. In summary, the next action I will perform is ```{action}```"

    return model


def _office(obs):
    return f"click [{_id(obs, 'link', 'Office Products')}]"


def _search(word):
    return lambda obs: f"type [{_id(obs, 'textbox', 'Search')}] [{word}] [1]"


SCRIPTS = {  # task_id: (correct, wrong)
    0: ([_office, "stop [$279.49]"], [_office, "stop [$100]"]),
    1: ([_office, "stop [HP Inkjet Fax Machine]"], ["stop [Printers]"]),
    2: ([_search("fax"), "stop []"], [_search("printer"), "stop []"]),
    3: (["goto [http://onestopmarket.com/office.html]", "stop []"], ["stop []"]),
    7: (["stop []"], None),  # judged on the shop's state (its newest order's page), not the episode
}


@needs_browser
@pytest.mark.slow
def test_scripted_episodes_pass_and_wrong_ones_fail_in_chromium(task, site, browser):
    for task_id, (good, wrong) in SCRIPTS.items():
        p = task.problems[task_id]
        for steps, want in ((good, 1.0), (wrong, 0.0))[:2 if wrong else 1]:
            seen: list = []
            record = protocol.play(task, p, scripted(steps, seen), browser=browser, wait=0)
            assert record["score"] == want, (task_id, want, record)
            if task_id == 3 and want == 0.0:  # the wrong run stayed where it began
                assert record["final_url"] == f"{site.url}/index.html"
        # the prompt's URL line shows the site by its real-world URL (the observation is left as the
        # browser gives it, as WebArena leaves it), and the model's URLs go to the deployment (task 3)
        first = seen[0][-1]["content"]
        assert "\nURL: http://onestopmarket.com/index.html\n" in first and f"URL: {site.url}" not in first
        assert seen[0][0]["role"] == "system" and seen[0][1]["name"] == "example_user"


@needs_browser
@pytest.mark.slow
def test_run_pys_early_stops_end_the_episode(task, browser):
    p = task.problems[0]
    seen: list = []
    r = protocol.play(task, p, lambda m, s: (seen.append(m), "I am not sure.")[1], browser=browser, wait=0)
    assert r["answer"] == "Early stop: Failed to parse actions for 2 times" and len(seen) == 2 and r["score"] == 0
    r = protocol.play(task, p, scripted(["scroll [down]"] * 9, []), browser=browser, wait=0)
    assert r["answer"] == "Early stop: Same action for 3 times"
    r = protocol.play(task, p, scripted(["scroll [down]", "scroll [up]"] * 9, []), browser=browser, wait=0)
    assert r["answer"] == "Early stop: Reach max steps 6" and r["easylemur"]["actions"] == 7


def test_the_suite_row_is_skipped_without_a_deployment(task, tmp_path, monkeypatch):
    from easylemur.eval.runs.suite import Skip, run_webarena

    monkeypatch.delenv("EASYLEMUR_WEBARENA", raising=False)
    args = types.SimpleNamespace(webarena="", seed=0)
    with pytest.raises(Skip, match="--webarena URL_MAP"):
        run_webarena("webarena", {}, task, None, args, tmp_path)


@needs_browser
@pytest.mark.slow
def test_the_suite_row_plays_the_runnable_tasks_and_counts_the_skips(task, site, tmp_path):
    """run_webarena on the fixture's deployment: the five playable tasks in one Chromium, each
    answered by its correct script (the row's score: 1.0), the other five skipped per reason
    (no judge is given: the two fuzzy_match tasks share one)."""
    from easylemur.eval.runs.suite import run_webarena

    by_intent = {p.intent: SCRIPTS[p.task_id][0] for p in task.problems if p.task_id in SCRIPTS}
    pending: dict = {}

    def chat(messages, *, max_tokens, temperature, seed, stop):
        assert max_tokens == 384 and temperature == 0.0  # run.py's max_tokens; greedy unless the row says
        intent = re.search(r"\nOBJECTIVE: (.*)\n", messages[-1]["content"]).group(1)
        model = pending.setdefault(intent, scripted(by_intent[intent], []))
        return model(messages, stop)

    access = types.SimpleNamespace(client=types.SimpleNamespace(chat=chat), loaded=None)
    # an endpoint (no checkpoint) with a local --tokenizer: WebArena's cut of the observation by it
    from easylemur.tokenizer.spm import DEFAULT_TOKENIZER_PATH

    args = types.SimpleNamespace(webarena=f"shopping={site.url}", seed=0, tokenizer=str(DEFAULT_TOKENIZER_PATH))
    # in a thread of its own: Playwright's sync API allows one instance per thread, and this
    # module's `browser` may hold this one's
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        row = pool.submit(run_webarena, "webarena", {}, task, access, args, tmp_path).result()
    assert row["score"] == 1.0 and row["n"] == 5 and row["errors"] == 0, (row, (tmp_path / "results.jsonl").read_text())
    assert row["observation_cut"] == "the model's tokenizer"
    assert sum(row["skipped_problems"].values()) == 5 and len(row["skipped_problems"]) == 4, row
    records = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in records] == [0, 1, 2, 3, 7] and all(r["score"] == 1.0 for r in records)


def test_the_llm_judge_is_webarenas_messages_and_verdicts(task):
    from easylemur.eval.benchmarks.webarena.judge import JudgeError, load_judge, make_judge, verdict

    texts = load_judge(task.files)
    assert texts.settings == {"model": "fixture-judge", "temperature": 0, "max_tokens": 64, "top_p": 1.0}
    assert texts.messages("fuzzy", "4 stars", "four stars", "How many stars?") == [
        {"role": "system", "content": "You are a fixture judge"},
        {"role": "user", "content": "Fixture grader: is the student's answer the reference's?\nquestion: How many stars?\n"
                                    "reference answer: four stars\nstudent answer: 4 stars\n"
                                    "Say correct/incorrect/partially correct."}]
    assert [verdict("fuzzy", r) for r in ("Correct.", "It is partially correct", "INCORRECT")] == [1.0, 0.0, 0.0]
    assert [verdict("ua", r) for r in ("the same", "Different")] == [1.0, 0.0]
    with pytest.raises(JudgeError):
        verdict("fuzzy", "I cannot tell")
    asked: list = []

    def chat(messages, stop):
        asked.append(messages[-1]["content"])
        return "correct" if "student answer: 4 stars" in messages[-1]["content"] else "same" \
            if "no phone" in messages[-1]["content"] else "incorrect"

    judge = make_judge(texts, chat)
    fuzzy, na = task.configured(task.problems[4]), task.configured(task.problems[8])
    assert evaluators.string_score(fuzzy, "4 stars", judge) == 1.0  # the cleaned answer is what is judged
    assert evaluators.string_score(fuzzy, "2 stars", judge) == 0.0
    n = len(asked)
    assert evaluators.string_score(na, ' "N/A" ', judge) == 1.0 and len(asked) == n  # "N/A" itself: no judge
    assert evaluators.string_score(na, "There is no phone listed", judge) == 1.0  # ua_match: the reasons agree
    assert "actual reason: the shop lists no phone number" in asked[-1]
    with pytest.raises(ValueError, match="needs the LLM judge"):
        evaluators.string_score(fuzzy, "4 stars")


def test_helpers_are_called_by_name_never_evaluated(task, site):
    from easylemur.eval.benchmarks.webarena import helpers

    assert helpers.reddit_get_post_url("http://h:9/f/books/59421/comment/123") == "http://h:9/f/books/59421/"
    assert helpers.reddit_get_post_url("http://h:9/forums/all") == "http://h:9/forums/all"
    known = task.helpers()
    assert helpers.call("reddit_get_post_url('http://h/f/a/1/x')", None, known) == "http://h/f/a/1/"
    for bad in ("__import__('os').system('true')", "reddit_get_post_url(url='x')", "os.getcwd()", "x +"):
        with pytest.raises(helpers.HelperError):
            helpers.call(bad, None, known)
    # the shop's REST API, with env_config.py's admin account
    assert known["shopping_get_latest_order_url"]() == f"{site.url}/sales/order/view/order_id/187/"
    assert known["shopping_get_sku_latest_review_author"]("SKU1") == "Lily"  # the last review
    assert known["shopping_get_sku_latest_review_rating"]("SKU1") == "60"
    assert known["shopping_get_sku_latest_review_author"]("SKU2") == ""
    with pytest.raises(helpers.HelperError, match="404"):
        known["shopping_get_sku_latest_review_rating"]("SKU3")


@needs_browser
def test_func_targets_judge_through_the_helpers(task, site, browser):
    """program_html's func: URL and locator, as WebArena's HTMLContentEvaluator calls them."""
    config = {"task_id": 9, "eval": {"eval_types": ["program_html"], "program_html": [
        {"url": f"{site.url}/members.html", "locator": "func:gitlab_get_project_memeber_role(__page__, 'yjlou')",
         "required_contents": {"must_include": ["Guest"]}},
        {"url": "last", "locator": "func:shopping_get_sku_latest_review_author('SKU1')",
         "required_contents": {"exact_match": "lily"}},
        {"url": "func:reddit_get_post_url('__last_url__')", "locator": "",
         "required_contents": {"must_include": ["yjlou"]}}]}}
    browser.reset(f"{site.url}/index.html")
    assert evaluators.evaluate(config, "", browser.page, wait=0, helpers=task.helpers()) == 1.0
    config["eval"]["program_html"][0]["locator"] = "func:gitlab_get_project_memeber_role(__page__, 'nobody')"
    assert evaluators.evaluate(config, "", browser.page, wait=0, helpers=task.helpers()) == 0.0
