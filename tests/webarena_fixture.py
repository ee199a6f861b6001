"""A miniature of WebArena's repository and a site made for the tests: WebArena's layout and
formats (`config_files/test.raw.json` with `__SHOPPING__` placeholders, the CoT prompt file
`agent/prompts/raw/p_cot_id_actree_2s.py` as a `prompt` dict, `run.py`'s argparse defaults,
`browser_env/env_config.py`'s URL_MAPPINGS, the LLM judge's functions in
`evaluation_harness/helper_functions.py`) with the fixture's own shorter texts, and a small shop
served from a folder on the loopback. Its tasks cover each evaluator kind (string_match's
exact_match, must_include and fuzzy_match (a reference and "N/A"), url_match, program_html with a
JavaScript locator and with the whole page) and each reason a task is skipped."""

from __future__ import annotations

import functools
import http.server
import json
import threading
from pathlib import Path

from scripted_endpoint import send_json

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

ACCOUNTS = {
    "shopping_site_admin": {"username": "fixture-admin", "password": "fixture-pass"},
}

URL_MAPPINGS = {
    REDDIT: "http://reddit.com",
    SHOPPING: "http://onestopmarket.com",
}
'''

HELPERS = '''from typing import Any


def llm_fuzzy_match(pred: str, reference: str, question: str) -> float:
    messages: list[dict[str, Any]] = []
    message = "Fixture grader: is the student's answer the reference's?\\n"
    message += f"question: {question}\\n"
    message += f"reference answer: {reference}\\n"
    message += f"student answer: {pred}\\n"
    message += "Say correct/incorrect/partially correct."
    messages = [
        {"role": "system", "content": "You are a fixture judge"},
        {"role": "user", "content": message},
    ]
    response = generate_from_openai_chat_completion(
        model="fixture-judge", messages=messages, temperature=0, max_tokens=64, top_p=1.0, context_length=0,
    ).lower()
    return 0.0 if "incorrect" in response else 1.0


def llm_ua_match(pred: str, reference: str, question: str) -> float:
    messages: list[dict[str, Any]] = []
    message = ""
    message += f"task: {question}\\n"
    message += f"actual reason: {reference}\\n"
    message += f"reported reason: {pred}\\n"
    message += (
        "Respond with 'same' "
        "or 'different'."
    )
    messages = [
        {"role": "system", "content": "You are a fixture judge"},
        {"role": "user", "content": message},
    ]
    response = generate_from_openai_chat_completion(
        model="fixture-judge", messages=messages, temperature=0, max_tokens=64, top_p=1.0, context_length=0,
    ).lower()
    return 0.0 if "different" in response else 1.0
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
    # a GitLab project's members table, as WebArena's gitlab_get_project_memeber_role reads it
    "members.html": """<html><body><table>
<tr><td data-label="Account"><span class="gl-avatar-labeled-sublabel">@byteblaze</span></td>
<td class="col-max-role"><span>Owner</span></td></tr>
<tr><td data-label="Account"><span class="gl-avatar-labeled-sublabel">@yjlou</span></td>
<td class="col-max-role"><span>Guest</span></td></tr>
</table></body></html>""",
}
PAGES["sales/order/view/order_id/187/index.html"] = "<html><body><h1>Order # 000000187</h1></body></html>"
TOKEN = "fixture-token"
# the shop's REST API as Magento answers WebArena's helpers (with the admin token only)
REST = {
    "/rest/V1/orders": {"items": [{"increment_id": "000000187", "created_at": "2023-05-01"}]},
    "/rest/V1/products/SKU1/reviews": [
        {"nickname": "Emma", "ratings": [{"rating_name": "Rating", "percent": 80}]},
        {"nickname": "Lily", "ratings": [{"rating_name": "Rating", "percent": 60}]}],
    "/rest/V1/products/SKU2/reviews": [],
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
        {"url": "func:shopping_get_latest_order_url()", "locator": "document.querySelector('h1').outerText",
         "required_contents": {"exact_match": "Order # 000000187"}}]}),
    task(8, "What is the phone number of the shop",
         {"eval_types": ["string_match"], "reference_answers": {"fuzzy_match": "N/A"},
          "string_note": "the shop lists no phone number"}),
    task(9, "Count the open issues", {"eval_types": ["program_html"], "program_html": [
        {"url": "last", "locator": "func:gitlab_get_issue_count(__page__)", "required_contents": {"exact_match": "3"}}]}),
]


def write_repo(root: Path) -> Path:
    """The miniature repository under `root` (returned)."""
    files = {"config_files/test.raw.json": json.dumps(TASKS, indent=2),
             "agent/prompts/raw/p_cot_id_actree_2s.py": PROMPT, "run.py": RUN,
             "browser_env/env_config.py": ENV_CONFIG, "evaluation_harness/helper_functions.py": HELPERS}
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


class Site:
    """The fixture's shop, served from a folder on 127.0.0.1 (`url`) until `close()`."""

    def __init__(self, folder: Path):
        for name, text in PAGES.items():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            (folder / name).write_text(text)
        handler = functools.partial(_Quiet, directory=str(folder))
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Quiet(http.server.SimpleHTTPRequestHandler):
    """The shop's pages, and its REST API (REST) behind the fixture admin's token."""

    def log_message(self, *args) -> None:  # the tests' output stays theirs
        pass

    def _json(self, status: int, body) -> None:
        send_json(self, status, body)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        if self.path == "/rest/default/V1/integration/admin/token" and body == {"username": "fixture-admin",
                                                                               "password": "fixture-pass"}:
            return self._json(200, TOKEN)
        self._json(401, {"message": "wrong account"})

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path.startswith("/rest/"):
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                return self._json(401, {"message": "no token"})
            if path == "/rest/V1/orders" and "created_at" not in self.path:
                return self._json(400, {"message": "unsorted"})
            return self._json(200, REST[path]) if path in REST else self._json(404, {"message": "none"})
        super().do_GET()
