"""easylemur.eval.benchmarks.webarena.browser: WebArena's browser environment (observation text,
id-based actions, PREVIOUS ACTION wording) on a small static site served from a temp dir."""

import functools
import http.server
import importlib.util
import os
import re
import threading

import pytest

from easylemur.eval.benchmarks.webarena.browser import (
    CHROMIUM,
    ActionParsingError,
    Browser,
    action_description,
    parse_action,
)

if not os.path.exists(CHROMIUM) or importlib.util.find_spec("playwright") is None:
    pytest.skip(f"needs Chromium at {CHROMIUM} (Debian's `chromium`) and playwright", allow_module_level=True)

PAGES = {
    "index.html": """<!doctype html><html><head><title>Home Page</title></head><body>
<h1>Welcome</h1>
<a href="second.html">Go to second</a>
<button aria-label="Close dialog">X</button>
</body></html>""",
    "second.html": """<!doctype html><html><head><title>Second Page</title></head><body>
<p>This is the second page.</p></body></html>""",
    "search.html": """<!doctype html><html><head><title>Search</title></head><body>
<form action="results.html" method="get">
<input type="text" name="q" aria-label="Query">
<button type="submit">Search</button>
</form></body></html>""",
    "results.html": """<!doctype html><html><head><title>Results</title></head><body><p>Results</p></body></html>""",
    "long.html": """<!doctype html><html><head><title>Long</title></head><body style="margin:0">
<h1>Top heading</h1>
<div style="height:800px"></div>
<h2>Bottom heading</h2>
<p>Below the fold</p>
<div style="height:800px"></div>
</body></html>""",
}


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output clean
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    root = tmp_path_factory.mktemp("webarena_site")
    for name, html in PAGES.items():
        (root / name).write_text(html)
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_QuietHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture(scope="module")
def browser():
    """One Chromium for the module: each test's reset() opens a fresh context, as each task's does."""
    with Browser() as b:
        yield b


def _id_of(obs: dict, role: str, name: str) -> str:
    """The id of the observation line `[id] role 'name'` (ids are Chromium's AX node ids)."""
    m = re.search(rf"^\s*\[(\d+)\] {re.escape(role)} {re.escape(repr(name))}", obs["text"], re.M)
    assert m, f"no {role} {name!r} in:\n{obs['text']}"
    return m.group(1)


# ---- parse_action / action_description (no browser) ----

def test_parse_action_each_kind():
    assert parse_action("click [1234]")["action_type"] == "CLICK"
    assert parse_action("click [1234]")["element_id"] == "1234"
    assert parse_action("hover [5]")["action_type"] == "HOVER"
    assert parse_action("hover [5]")["element_id"] == "5"
    t = parse_action("type [12] [hello world] [0]")
    assert (t["action_type"], t["element_id"], t["text"]) == ("TYPE", "12", "hello world")
    assert parse_action("type [12] [hello] [1]")["text"] == "hello\n"
    assert parse_action("type [12] [hello]")["text"] == "hello\n"  # Enter is the default
    assert parse_action("  stop [42 dollars] ")["answer"] == "42 dollars"
    assert parse_action("stop")["action_type"] == "STOP" and parse_action("stop")["answer"] == ""
    assert parse_action("goto [http://x.test/a?b=1]")["url"] == "http://x.test/a?b=1"
    assert parse_action("scroll [down]")["direction"] == "down"
    assert parse_action("scroll [up]")["direction"] == "up"
    assert parse_action("press [Ctrl+v]")["key_comb"] == "Ctrl+v"  # WebArena's table has no Ctrl
    assert parse_action("press [meta+a]")["key_comb"] == "Meta+a"
    assert parse_action("press [enter]")["key_comb"] == "Enter"
    assert parse_action("tab_focus [1]")["page_number"] == 1
    assert parse_action("tab_focus [1]")["action_type"] == "PAGE_FOCUS"
    for text, kind in [("new_tab", "NEW_TAB"), ("close_tab", "PAGE_CLOSE"), ("go_back", "GO_BACK"),
                       ("go_forward", "GO_FORWARD")]:
        assert parse_action(text)["action_type"] == kind
    keys = {"action_type", "element_id", "text", "answer", "url", "direction", "key_comb", "page_number",
            "raw_prediction"}
    assert keys <= set(parse_action("click [1]"))


@pytest.mark.parametrize("text,message", [
    ("click 12", "Invalid click action click 12"),
    ("foo [1]", "Invalid action foo [1]"),
    ("hover [x]", "Invalid hover action hover [x]"),
    ("type [12]", "Invalid type action type [12] [1]"),
    ("scroll [left]", "Invalid scroll action scroll [left]"),
    ("tab_focus [a]", "Invalid tab_focus action tab_focus [a]"),
    ("goto", "Invalid goto action goto"),
    ("", "Invalid action "),
])
def test_parse_action_errors(text, message):
    with pytest.raises(ActionParsingError) as e:
        parse_action(text)
    assert str(e.value) == message


def test_action_description_wording():
    nodes = {"7": {"backend_id": 3, "union_bound": [0, 0, 10, 10], "text": "[7] link 'Go  to second'"}}
    assert action_description(parse_action("click [7]"), nodes) == "click [7] where [7] is link 'Go to second'"
    assert (action_description(parse_action("type [7] [abc]"), nodes)
            == "type [7] [abc ] where [7] is link 'Go to second'")
    assert action_description(parse_action("click [8]"), nodes) == (
        'Attempt to perfom "click" on element "[8]" but no matching element found. '
        "Please check the observation more carefully.")
    assert action_description(parse_action("tab_focus [2]"), nodes) == "page_focus [2]"
    assert action_description(parse_action("scroll [down]"), nodes) == "scroll [down]"
    assert action_description(parse_action("stop [yes]"), nodes) == "stop [yes]"


# ---- the browser ----

def test_observation_format_and_click_navigates(browser, site):
    obs = browser.reset(f"{site}/index.html")
    lines = obs["text"].split("\n")
    assert lines[0] == "Tab 0 (current): Home Page" and lines[1] == ""
    # Chromium reports a url property on the document and on links; a StaticText under the
    # button stays since its text ("X") is not in the lines above it.
    patterns = [rf"\[(\d+)\] RootWebArea 'Home Page' focused: True url: {re.escape(site)}/index\.html",
                r"\t\[(\d+)\] heading 'Welcome'",
                rf"\t\[(\d+)\] link 'Go to second' url: {re.escape(site)}/second\.html",
                r"\t\[(\d+)\] button 'Close dialog'",
                r"\t\t\[(\d+)\] StaticText 'X'"]
    assert len(lines) == 2 + len(patterns), obs["text"]
    ids = []
    for line, pattern in zip(lines[2:], patterns):
        m = re.fullmatch(pattern, line)
        assert m, (line, pattern)
        ids.append(m.group(1))
    assert set(ids) <= set(obs["nodes"]) and obs["url"] == f"{site}/index.html"
    link = ids[2]
    assert obs["nodes"][link]["text"] == f"[{link}] link 'Go to second' url: {site}/second.html"
    assert action_description(parse_action(f"click [{link}]"), obs["nodes"]) == (
        f"click [{link}] where [{link}] is link 'Go to second' url: {site}/second.html")

    result = browser.step(parse_action(f"click [{link}]"))
    assert result["success"] and result["fail_error"] == ""
    assert result["observation"]["url"] == f"{site}/second.html" == browser.page.url
    assert result["observation"]["text"].startswith("Tab 0 (current): Second Page\n\n")
    assert "StaticText 'This is the second page.'" in result["observation"]["text"]

    missing = browser.step(parse_action("click [999999]"))
    assert not missing["success"] and missing["fail_error"] == "'999999'"  # WebArena's KeyError text


def test_type_submits_only_with_enter(browser, site):
    obs = browser.reset(f"{site}/search.html")
    box = _id_of(obs, "textbox", "Query")
    result = browser.step(parse_action(f"type [{box}] [cheap shoes] [0]"))
    assert result["success"] and browser.page.url == f"{site}/search.html"
    assert browser.page.input_value("input[name=q]") == "cheap shoes"

    obs = browser.reset(f"{site}/search.html")
    box = _id_of(obs, "textbox", "Query")
    result = browser.step(parse_action(f"type [{box}] [cheap shoes] [1]"))
    assert result["success"]
    assert result["observation"]["url"] == f"{site}/results.html?q=cheap+shoes"
    assert result["observation"]["text"].startswith("Tab 0 (current): Results\n\n")


def test_viewport_only_and_scroll(browser, site):
    obs = browser.reset(f"{site}/long.html")
    assert "heading 'Top heading'" in obs["text"]
    assert "Bottom heading" not in obs["text"] and "Below the fold" not in obs["text"]
    obs = browser.step(parse_action("scroll [down]"))["observation"]
    assert browser.page.evaluate("window.scrollY") == 720  # one window height
    assert "heading 'Top heading'" not in obs["text"]
    assert "heading 'Bottom heading'" in obs["text"] and "Below the fold" in obs["text"]
    obs = browser.step(parse_action("scroll [up]"))["observation"]
    assert "heading 'Top heading'" in obs["text"] and "Bottom heading" not in obs["text"]


def test_history_goto_and_tabs(browser, site):
    browser.reset(f"{site}/index.html |AND| {site}/search.html")
    assert browser.observe()["text"].startswith("Tab 0 (current): Home Page | Tab 1: Search\n\n")

    obs = browser.step(parse_action(f"goto [{site}/second.html]"))["observation"]
    assert obs["url"] == f"{site}/second.html"
    assert browser.step(parse_action("go_back"))["observation"]["url"] == f"{site}/index.html"
    assert browser.step(parse_action("go_forward"))["observation"]["url"] == f"{site}/second.html"

    obs = browser.step(parse_action("tab_focus [1]"))["observation"]
    assert obs["text"].startswith("Tab 0: Second Page | Tab 1 (current): Search\n\n")
    obs = browser.step(parse_action("new_tab"))["observation"]
    assert obs["text"].startswith("Tab 0: Second Page | Tab 1: Search | Tab 2 (current): \n\n")
    assert obs["url"] == "about:blank"
    obs = browser.step(parse_action("tab_focus [0]"))["observation"]
    assert obs["text"].startswith("Tab 0 (current): Second Page | Tab 1: Search | Tab 2: \n\n")
    obs = browser.step(parse_action("close_tab"))["observation"]  # the last tab becomes current
    assert obs["text"].startswith("Tab 0: Search | Tab 1 (current): \n\n")
    bad = browser.step(parse_action("tab_focus [5]"))
    assert not bad["success"] and bad["fail_error"] == "list index out of range"
    assert browser.step(parse_action("stop [done]"))["success"]


def test_goto_cannot_read_the_hosts_files(browser, site, tmp_path):
    """A task's answers lie in files on the host (WebArena's config_files/): a model's goto to a
    local file, in any spelling Chromium takes, fails and shows nothing of it; a link on a page
    cannot go there either (Chromium refuses it)."""
    secret = tmp_path / "test.raw.json"
    secret.write_text('[{"reference_answers": {"exact_match": "SECRET-279"}}]')
    browser.reset(f"{site}/index.html")
    for url in (f"file://{secret}", f"view-source:file://{secret}", f"FILE://{secret}", "chrome://version"):
        r = browser.step(parse_action(f"goto [{url}]"))
        assert not r["success"] and r["fail_error"].startswith("goto takes an http(s) URL"), (url, r["fail_error"])
        assert "SECRET-279" not in r["observation"]["text"] and r["observation"]["url"] == f"{site}/index.html"
    browser.page.evaluate(f"location.href = {str('file://' + str(secret))!r}")
    browser.page.wait_for_timeout(300)
    assert "SECRET-279" not in browser.observe()["text"]


def test_missing_chromium_is_named():
    with pytest.raises(FileNotFoundError, match=r"/nonexistent/chromium.*Debian's `chromium` package"):
        Browser(executable="/nonexistent/chromium")
