"""A miniature of WebArena's repository and a site made for the tests: WebArena's layout and
formats (`config_files/test.raw.json` with `__SHOPPING__` placeholders, the CoT prompt file
`agent/prompts/raw/p_cot_id_actree_2s.py` as a `prompt` dict, `run.py`'s argparse defaults,
`browser_env/env_config.py`'s URL_MAPPINGS) with the fixture's own shorter texts, and a small shop
served from a folder on the loopback. Its tasks cover each evaluator kind (string_match's
exact_match and must_include, url_match, program_html with a JavaScript locator and with the whole
page) and each reason a task is skipped."""

from __future__ import annotations

import functools
import http.server
import json
import threading
from pathlib import Path

PROMPT = '''prompt = {
\t"intro": """You are a fixture agent browsing a shop. Issue one action at a time.
End with "In summary, the next action I will perform is" and the action inside ``````.""",
\t"examples": [
\t\t(
\t\t\t"""OBSERVATION:
[1] link 'Example'
URL: http://onestopmarket.com
OBJECTIVE: Open the example
PREVIOUS ACTION: None""",
\t\t\t"Let's think step-by-step. In summary, the next action I will perform is ```click [1]```",
\t\t),
\t],
\t"template": """OBSERVATION:
{observation}
URL: {url}
OBJECTIVE: {objective}
PREVIOUS ACTION: {previous_action}""",
\t"meta_data": {
\t\t"observation": "accessibility_tree",
\t\t"action_type": "id_accessibility_tree",
\t\t"keywords": ["url", "objective", "observation", "previous_action"],
\t\t"prompt_constructor": "CoTPromptConstructor",
\t\t"answer_phrase": "In summary, the next action I will perform is",
\t\t"action_splitter": "```"
\t},
}
'''

RUN = '''import argparse


def config():
    parser = argparse.ArgumentParser(description="fixture")
    parser.add_argument("--viewport_width", type=int, default=1280)
    parser.add_argument("--viewport_height", type=int, default=720)
    parser.add_argument("--max_steps", type=int, default=6)
    parser.add_argument("--parsing_failure_th", type=int, default=2)
    parser.add_argument("--repeating_action_failure_th", type=int, default=3)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--top_p", type=float, default=0.9)
    parser.add_argument("--max_tokens", type=int, default=384)
    parser.add_argument("--max_retry", type=int, default=1)
    parser.add_argument("--max_obs_length", type=int, default=1920)
    return parser.parse_args()
'''

ENV_CONFIG = '''import os

SHOPPING = os.environ.get("SHOPPING", "")
REDDIT = os.environ.get("REDDIT", "")

URL_MAPPINGS = {
    REDDIT: "http://reddit.com",
    SHOPPING: "http://onestopmarket.com",
}
'''

PAGES = {
    "index.html": """<html><head><title>One Stop Market</title></head><body>
<h1>One Stop Market</h1>
<a href="office.html">Office Products</a>
<form action="search.html" method="get"><input name="q" aria-label="Search" placeholder="Search">
<button type="submit">Go</button></form>
</body></html>""",
    "office.html": """<html><head><title>Office Products</title></head><body>
<h1>Office Products</h1>
<p>HP Inkjet Fax Machine</p><p id="price">$279.49</p>
<a href="index.html">Home</a>
</body></html>""",
    "search.html": """<html><head><title>Search</title></head><body><h1>Search results</h1></body></html>""",
}


def task(task_id: int, intent: str, eval_: dict, start: str = "__SHOPPING__/index.html", sites=("shopping",),
         storage_state=None) -> dict:
    base = {"eval_types": [], "reference_answers": None, "reference_url": "", "program_html": [], "string_note": "",
            "reference_answer_raw_annotation": ""}
    return {"sites": list(sites), "task_id": task_id, "require_login": True, "storage_state": storage_state,
            "start_url": start, "geolocation": None, "intent_template": intent, "instantiation_dict": {},
            "intent": intent, "require_reset": False, "eval": {**base, **eval_}, "intent_template_id": task_id}


TASKS = [
    task(0, "What is the price of HP Inkjet Fax Machine",
         {"eval_types": ["string_match"], "reference_answers": {"exact_match": "$279.49"}}),
    task(1, "Which products are in Office Products",
         {"eval_types": ["string_match"], "reference_answers": {"must_include": ["Fax", "HP"]}}),
    task(2, "Search the shop for fax",
         {"eval_types": ["url_match"], "reference_url": "__SHOPPING__/search.html?q=fax", "url_note": "GOLD in PRED"}),
    task(3, "Open the page of office products",
         {"eval_types": ["url_match", "program_html"], "reference_url": "__SHOPPING__/office.html",
          "program_html": [{"url": "last", "locator": "document.querySelector('#price').outerText",
                            "required_contents": {"exact_match": "$279.49"}},
                           {"url": "last", "locator": "",
                            "required_contents": {"must_include": ["fax machine |OR| fax printer"]}}]}),
    task(4, "How many stars does the fax have",
         {"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": ["4 stars"]}}),
    task(5, "Post in the forum", {"eval_types": ["string_match"], "reference_answers": {"exact_match": "x"}},
         start="__REDDIT__", sites=("reddit",)),
    task(6, "Show my orders", {"eval_types": ["string_match"], "reference_answers": {"exact_match": "x"}},
         storage_state="./.auth/shopping_state.json"),
    task(7, "Show the latest order", {"eval_types": ["program_html"], "program_html": [
        {"url": "func:shopping_get_latest_order_url()", "locator": "", "required_contents": {"must_include": ["x"]}}]}),
]


def write_repo(root: Path) -> Path:
    """The miniature repository under `root` (returned)."""
    files = {"config_files/test.raw.json": json.dumps(TASKS, indent=2),
             "agent/prompts/raw/p_cot_id_actree_2s.py": PROMPT, "run.py": RUN,
             "browser_env/env_config.py": ENV_CONFIG}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


class Site:
    """The fixture's shop, served from a folder on 127.0.0.1 (`url`) until `close()`."""

    def __init__(self, folder: Path):
        for name, text in PAGES.items():
            (folder / name).write_text(text)
        handler = functools.partial(_Quiet, directory=str(folder))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # the tests' output stays theirs
        pass
