"""WebArena's browser environment (github.com/web-arena-x/webarena at commit f62e0b9) as its `run.py`
drives it with the default flags `--observation_type accessibility_tree --action_set_tag
id_accessibility_tree --current_viewport_only --viewport_width 1280 --viewport_height 720
--sleep_after_execution 0.0`, restated on Playwright's sync API and Debian's Chromium:

- `browser_env/envs.py` (`ScriptBrowserEnv`: setup/reset/step/close) -> `Browser`;
- `browser_env/processors.py` (`TextObervationProcessor` for "accessibility_tree" with
  current_viewport_only: the tab header, the AX tree with every node's bounding box, the viewport
  filter, the text rendering and its clean-up, `get_element_center`) -> `Browser.observe`;
- `browser_env/actions.py` (`create_id_based_action`, the `create_*_action` helpers,
  `execute_action` with `execute_scroll`/`execute_key_press`/`execute_mouse_click`/...,
  `action2str`) -> `parse_action`, `Browser.step`, `action_description`;
- `browser_env/constants.py` (`SPECIAL_KEY_MAPPINGS`, `IGNORED_ACTREE_PROPERTIES`) and
  `browser_env/helper_functions.py` (`get_action_description`) -> `action_description`.

The observation text is meant to equal, character for character, what WebArena's processor gives
for the same page in the same Chromium (checked against WebArena's own processors.py, loaded from
the mirror, on test pages). Actions are plain dicts; "action_type" holds the name of WebArena's
`ActionTypes` member ("CLICK", "TYPE", "STOP", ...), and "text" is the typed text as a string
(WebArena keeps it as a list of character ids that map back to this same string, the trailing
"\\n" of the enter flag included).

Differences from WebArena's code (all deliberate):
1. Settling after input. WebArena pins Playwright 1.32 and observes straight after `mouse.click`/
   `keyboard.type`/`keyboard.press` (sleep_after_execution 0.0), so an observation can race a
   navigation the action started (old page, or a retry after a 500 ms `wait_for_load_state`).
   Here a small init script notes, through the Navigation API's `navigate` event, when the main
   frame starts leaving its document; after a click/type/press/hover that did so, `step` waits for
   the new document and its "load" (bounded by `settle_ms`, a timeout is ignored) before observing.
   Same-document navigations and downloads are not waited for.
2. Every page gets a CDP session when first observed. WebArena attaches one only to the pages it
   opens itself (start URLs, `new_tab`), so observing a tab the site opened (target=_blank), or
   the blank page `close_tab` opens when the last tab closes, raises AttributeError there.
   `Accessibility.enable` is sent, as in WebArena, only for the start-URL pages.
3. `stop` (and "NONE") does nothing in `step`, successfully. WebArena's `execute_action` has no
   STOP case (it would fail with "Unknown action type: 17"), but run.py never steps a stop.
4. No `DOMSnapshot.captureSnapshot` in `observe`: WebArena takes one for every observation but
   uses it only for the "html" observation type; the browser-info part it keeps (screen size,
   devicePixelRatio == 1 check, one retry after `wait_for_load_state("load", timeout=500)`) is
   kept. The bounding boxes come from the same CDP calls (DOM.resolveNode, then
   Runtime.callFunctionOn of getBoundingClientRect, or a Range's for a text node), but sent
   pipelined rather than one round trip at a time, once per DOM node rather than once per AX node
   (a StaticText and its InlineTextBoxes share one), with the objects in a group released after
   each observation (WebArena leaves them alive). None of this changes the text or the nodes;
   it makes a 12,000-node page take ~6 s instead of ~17 s.
5. `parse_action`: text that WebArena's character table cannot encode (control characters other
   than "\\n", chr(128), code points >= 1000 such as CJK or emoji) is typed as is; WebArena raises
   KeyError there, which run.py logs as an unhandled error and drops the task. An empty action
   text raises ActionParsingError("Invalid action ") where WebArena raises IndexError.
   "raw_prediction" is left "" (WebArena's agent sets it to the whole reply after parsing; so does
   the caller here).
6. One Chromium process per `Browser`; `reset` again opens a fresh context in it (WebArena
   restarts Playwright and Chromium), which gives the same clean cookies/storage/tabs.
7. Chromium is Debian's (`CHROMIUM`), not Playwright's bundled build (WebArena: Playwright 1.32's
   Chromium 112). The AX tree comes from the browser, so names/roles/properties can differ from
   WebArena's published trajectories where Chromium's accessibility code changed since; the text
   equals what WebArena's processor gives in the same browser.
8. `goto` takes http(s) URLs only (fail_error otherwise). WebArena's goes anywhere Chromium does:
   `file:///...` and `view-source:file:///...` show the host's files to the model, WebArena's task
   configurations with their reference answers among them. (A page cannot lead there itself:
   Chromium refuses a web page's navigation to a local file.)
Only the id-based action set is restated (no coordinate, playwright-code or role/name actions).
The sync API is bound to the thread that made the `Browser` and cannot run inside an asyncio loop.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from typing import Any, Optional

CHROMIUM = os.environ.get("EASYLEMUR_CHROMIUM", "/usr/bin/chromium")

# processors.py: a node stays when at least this share of it (as WebArena computes the share)
# lies in the viewport.
IN_VIEWPORT_RATIO_THRESHOLD = 0.6

# constants.py IGNORED_ACTREE_PROPERTIES: AX properties left out of a node's line.
IGNORED_ACTREE_PROPERTIES = ("focusable", "editable", "readonly", "level", "settable", "multiline", "invalid")

# processors.py: roles whose node is dropped from the text when it has neither a name nor
# (kept) properties; a nameless listitem is dropped even with properties.
_EMPTY_ROLES_DROPPED = ("generic", "img", "list", "strong", "paragraph", "banner", "navigation", "Section",
                        "LabelText", "Legend", "listitem")

# constants.py SPECIAL_KEY_MAPPINGS: a `press` key name, lowercased, -> Playwright's key name.
# (WebArena's table has no ArrowLeft, Control, Ctrl or Shift entry; those pass through as typed.)
_SPECIAL_KEYS = ["Backquote", "Minus", "Equal", "Backslash", "Backspace", "Meta", "Tab", "Delete", "Escape",
                 "ArrowDown", "End", "Enter", "Home", "Insert", "PageDown", "PageUp", "ArrowRight", "ArrowUp"]
SPECIAL_KEY_MAPPINGS = {k.lower(): k for k in _SPECIAL_KEYS} | {f"f{i}": f"F{i}" for i in range(1, 13)}

# actions.py execute_scroll (from natbot): one window height up or down.
_SCROLL_JS = ("(document.scrollingElement || document.body).scrollTop = "
              "(document.scrollingElement || document.body).scrollTop {sign} window.innerHeight;")

# processors.py get_bounding_client_rect: a text node's box comes from a Range over it.
_RECT_FN = """function() {
    if (this.nodeType == 3) {
        var range = document.createRange();
        range.selectNode(this);
        var rect = range.getBoundingClientRect().toJSON();
        range.detach();
        return rect;
    }
    return this.getBoundingClientRect().toJSON();
}"""
_OBJECT_GROUP = "easylemur-webarena-bounds"

# Difference 1 in the docstring: marks the main frame's document once a navigation away from it
# (not same-document, not a download) has begun, so step() knows to wait for the next document;
# _STAY_FLAG is set on the document before an input action, so a document without it is a new one.
_LEAVING_FLAG = "__easylemurLeaving"
_STAY_FLAG = "__easylemurStay"
_NAV_WATCH_JS = f"""(() => {{
  if (window.top !== window || typeof navigation === "undefined") return;
  navigation.addEventListener("navigate", (e) => {{
    if (!e.destination.sameDocument && !e.downloadRequest) window.{_LEAVING_FLAG} = true;
  }});
}})();"""

# The WebArena ActionTypes members the id-based action set produces (plus NONE, the action
# WebArena's agent falls back to when a reply cannot be parsed).
ACTION_TYPES = ("NONE", "SCROLL", "KEY_PRESS", "CLICK", "TYPE", "HOVER", "PAGE_FOCUS", "NEW_TAB", "GO_BACK",
                "GO_FORWARD", "GOTO_URL", "PAGE_CLOSE", "STOP")


class ActionParsingError(ValueError):
    """An action text WebArena's create_id_based_action rejects; the message is WebArena's."""


def _action(action_type: str, **fields: Any) -> dict:
    # actions.py create_none_action: every action carries all fields, unused ones empty.
    action = {"action_type": action_type, "element_id": "", "text": "", "answer": "", "url": "", "direction": "",
              "key_comb": "", "page_number": 0, "raw_prediction": ""}
    action.update(fields)
    return action


def none_action(raw_prediction: str = "") -> dict:
    """WebArena's create_none_action (what its agent uses when a reply cannot be parsed)."""
    return _action("NONE", raw_prediction=raw_prediction)


def stop_action(answer: str) -> dict:
    """WebArena's create_stop_action (run.py also uses it for early stops: "Early stop: ...")."""
    return _action("STOP", answer=answer)


def chromium_problem(executable: str | None = None) -> str:
    """Why no episode can run here ("" when Chromium and Playwright are there)."""
    path = executable or os.environ.get("EASYLEMUR_CHROMIUM", CHROMIUM)
    if not os.path.exists(path):
        return (f"WebArena's browser: Chromium not found at {path} (install Debian's chromium, as "
                "scripts/setup_eval.sh does, or set EASYLEMUR_CHROMIUM)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "WebArena's browser is driven by Playwright: pip install -e '.[eval]'"
    return ""


def _map_keys(key_comb: str) -> str:
    # actions.py create_key_press_action: each "+"-separated key through SPECIAL_KEY_MAPPINGS.
    return "+".join(SPECIAL_KEY_MAPPINGS.get(k.lower(), k) for k in key_comb.split("+"))


def parse_action(text: str) -> dict:
    """WebArena's create_id_based_action: the text inside the ``` of a reply (e.g. "click [1234]",
    "type [12] [hello] [0]", "stop [answer]", "goto [url]", "scroll [down]", "press [Ctrl+v]",
    "new_tab", "tab_focus [1]", "close_tab", "go_back", "go_forward", "hover [5]") -> an action
    dict ("action_type", "element_id", "text", "answer", "url", "direction", "key_comb",
    "page_number", "raw_prediction"). Raises ActionParsingError with WebArena's message when it
    cannot parse."""
    s = text.strip()
    if not s:
        raise ActionParsingError(f"Invalid action {s}")  # WebArena: IndexError (difference 5)
    # The verb is what precedes the first "[", else the first word.
    verb = s.split("[")[0].strip() if "[" in s else s.split()[0].strip()
    if verb in ("click", "hover"):
        m = re.search(rf"{verb} ?\[(\d+)\]", s)
        if not m:
            raise ActionParsingError(f"Invalid {verb} action {s}")
        return _action(verb.upper(), element_id=m.group(1))
    if verb == "type":
        if not (s.endswith("[0]") or s.endswith("[1]")):
            s += " [1]"  # pressing Enter after typing is the default
        m = re.search(r"type ?\[(\d+)\] ?\[(.+)\] ?\[(\d+)\]", s)
        if not m:
            raise ActionParsingError(f"Invalid type action {s}")
        typed = m.group(2) + ("\n" if m.group(3) == "1" else "")
        return _action("TYPE", element_id=m.group(1), text=typed)
    if verb == "press":
        m = re.search(r"press ?\[(.+)\]", s)
        if not m:
            raise ActionParsingError(f"Invalid press action {s}")
        return _action("KEY_PRESS", key_comb=_map_keys(m.group(1)))
    if verb == "scroll":
        m = re.search(r"scroll ?\[?(up|down)\]?", s)
        if not m:
            raise ActionParsingError(f"Invalid scroll action {s}")
        return _action("SCROLL", direction=m.group(1))
    if verb == "goto":
        m = re.search(r"goto ?\[(.+)\]", s)
        if not m:
            raise ActionParsingError(f"Invalid goto action {s}")
        return _action("GOTO_URL", url=m.group(1))
    if verb == "tab_focus":
        m = re.search(r"tab_focus ?\[(\d+)\]", s)
        if not m:
            raise ActionParsingError(f"Invalid tab_focus action {s}")
        return _action("PAGE_FOCUS", page_number=int(m.group(1)))
    simple = {"new_tab": "NEW_TAB", "go_back": "GO_BACK", "go_forward": "GO_FORWARD", "close_tab": "PAGE_CLOSE"}
    if verb in simple:
        return _action(simple[verb])
    if verb == "stop":
        m = re.search(r"stop ?\[(.+)\]", s)
        return stop_action(m.group(1) if m else "")  # some tasks need no answer
    raise ActionParsingError(f"Invalid action {s}")


def _action_str(action: dict, semantic_element: str) -> str:
    # actions.py action2str for "id_accessibility_tree".
    t, eid = action["action_type"], action["element_id"]
    if t == "CLICK":
        return f"click [{eid}] where [{eid}] is {semantic_element}"
    if t == "TYPE":
        typed = action["text"].replace("\n", " ")
        return f"type [{eid}] [{typed}] where [{eid}] is {semantic_element}"
    if t == "HOVER":
        return f"hover [{eid}] where [{eid}] is {semantic_element}"
    fixed = {"NEW_TAB": "new_tab", "PAGE_CLOSE": "close_tab", "GO_BACK": "go_back", "GO_FORWARD": "go_forward",
             "NONE": "none"}
    if t in fixed:
        return fixed[t]
    formats = {"SCROLL": ("scroll", "direction"), "KEY_PRESS": ("press", "key_comb"), "GOTO_URL": ("goto", "url"),
               "PAGE_FOCUS": ("page_focus", "page_number"), "STOP": ("stop", "answer")}
    if t in formats:
        verb, field = formats[t]
        return f"{verb} [{action[field]}]"  # WebArena writes tab_focus back as "page_focus [n]"
    raise ValueError(f"Unknown action type {t}")


def action_description(action: dict, nodes: dict, action_splitter: str = "```") -> str:
    """The PREVIOUS ACTION text WebArena's run.py records for the prompt (helper_functions.py
    get_action_description for id_accessibility_tree), with `nodes` the node info of the
    observation the action was chosen on (Browser.observe()["nodes"]). `action_splitter` is the
    prompt's (``` in WebArena's prompts); it appears only in the message for an unparsable reply
    (a "NONE" action)."""
    t = action["action_type"]
    if t in ("CLICK", "HOVER", "TYPE"):
        eid = action["element_id"]
        if eid in nodes:
            # The node's line without its "[id]", whitespace runs collapsed.
            return _action_str(action, " ".join(nodes[eid]["text"].split()[1:]))
        return (f'Attempt to perfom "{t.lower()}" on element "[{eid}]" but no matching element found. '
                "Please check the observation more carefully.")
    if t == "NONE":
        return (f'The previous prediction you issued was "{action["raw_prediction"]}". However, the format was '
                f"incorrect. Ensure that the action is wrapped inside a pair of {action_splitter} and enclose "
                f"arguments within [] as follows: {action_splitter}action [arg] ...{action_splitter}.")
    return _action_str(action, "")


# ---- observation (processors.py TextObervationProcessor, accessibility_tree, viewport only) ----

def _in_viewport_ratio(x: float, y: float, width: float, height: float, win_width: float, win_height: float) -> float:
    overlap_w = max(0, min(x + width, win_width) - max(x, 0))
    overlap_h = max(0, min(y + height, win_height) - max(y, 0))
    # Sic: WebArena divides by width then multiplies by height (not the area ratio); kept so the
    # same nodes survive the filter.
    return overlap_w * overlap_h / width * height


def _send_many(client: Any, calls: list[tuple[str, dict]]) -> list[Any]:
    """The CDP calls' results in order, an Exception in place of a failed one. WebArena sends
    them one at a time (a round trip each: ~15 s for a page of 6000 AX nodes); pipelining them
    through the sync session's async half gives the same answers in a fraction of that, falling
    back to one at a time if Playwright's internals ever change shape."""
    impl, run = getattr(client, "_impl_obj", None), getattr(client, "_sync", None)
    if impl is not None and run is not None and hasattr(impl, "send"):
        import asyncio
        import inspect

        # Playwright 1.5x added a keyword-only timeout (None: no timeout) to the async send.
        extra = {"timeout": None} if "timeout" in inspect.signature(impl.send).parameters else {}

        async def gather() -> list[Any]:
            return await asyncio.gather(*(impl.send(method=m, params=p, **extra) for m, p in calls),
                                        return_exceptions=True)

        return run(gather())
    out: list[Any] = []
    for method, params in calls:
        try:
            out.append(client.send(method, params))
        except Exception as e:
            out.append(e)
    return out


def _node_bounds(client: Any, backend_ids: list) -> list[Optional[list]]:
    # processors.py get_bounding_client_rect for each node; any failure (a detached node, a node
    # without getBoundingClientRect) leaves that node without a box.
    resolved = _send_many(client, [("DOM.resolveNode", {"backendNodeId": int(b), "objectGroup": _OBJECT_GROUP})
                                   for b in backend_ids])
    ok = [i for i, r in enumerate(resolved) if not isinstance(r, BaseException)]
    rects = _send_many(client, [("Runtime.callFunctionOn", {"objectId": resolved[i]["object"]["objectId"],
                                                            "functionDeclaration": _RECT_FN, "returnByValue": True})
                                for i in ok])
    bounds: list[Optional[list]] = [None] * len(backend_ids)
    for i, resp in zip(ok, rects):
        if isinstance(resp, BaseException) or resp.get("result", {}).get("subtype", "") == "error":
            continue
        v = resp["result"]["value"]
        bounds[i] = [v["x"], v["y"], v["width"], v["height"]]
    return bounds


def _fetch_ax_tree(client: Any, win_width: float, win_height: float) -> list:
    nodes = client.send("Accessibility.getFullAXTree", {})["nodes"]
    seen: set = set()
    tree = []
    for node in nodes:  # the same node can be listed twice; the first copy counts
        if node["nodeId"] not in seen:
            tree.append(node)
            seen.add(node["nodeId"])
    cursor = {}
    measured = []
    for i, node in enumerate(tree):
        cursor[node["nodeId"]] = i
        if "backendDOMNodeId" not in node:  # usually not rendered
            node["union_bound"] = None
        elif node["role"]["value"] == "RootWebArea":
            node["union_bound"] = [0.0, 0.0, 10.0, 10.0]  # the document always counts as visible
        else:
            measured.append(node)
    try:
        # A text node's StaticText and its InlineTextBox children share one DOM node: measure each
        # DOM node once (the same call gives the same box), each AX node gets its own copy.
        backend_ids = list(dict.fromkeys(n["backendDOMNodeId"] for n in measured))
        bounds = dict(zip(backend_ids, _node_bounds(client, backend_ids)))
        for node in measured:
            bound = bounds[node["backendDOMNodeId"]]
            node["union_bound"] = list(bound) if bound is not None else None
    finally:
        try:
            client.send("Runtime.releaseObjectGroup", {"objectGroup": _OBJECT_GROUP})
        except Exception:
            pass

    def remove(node: dict) -> None:
        # Splice the node out: its children take its place, in order, in its parent's list.
        parent = tree[cursor[node["parentId"]]]
        at = parent["childIds"].index(node["nodeId"])
        parent["childIds"][at:at + 1] = list(node["childIds"])
        for child in node["childIds"]:
            tree[cursor[child]]["parentId"] = node["parentId"]
        node["parentId"] = "[REMOVED]"

    for node in tree:
        bound = node["union_bound"]
        if not bound:
            remove(node)
            continue
        x, y, width, height = bound
        if width == 0 or height == 0:
            remove(node)
            continue
        if _in_viewport_ratio(float(x), float(y), float(width), float(height),
                              win_width, win_height) < IN_VIEWPORT_RATIO_THRESHOLD:
            remove(node)
    return [n for n in tree if n.get("parentId", "Root") != "[REMOVED]"]


def _render_ax_tree(tree: list) -> tuple[str, dict]:
    # processors.py parse_accessibility_tree: depth-first, one tab of indent per kept ancestor;
    # a node whose fields are missing (e.g. an ignored node without a name) is skipped, its
    # children kept at its depth.
    index = {node["nodeId"]: i for i, node in enumerate(tree)}
    info: dict = {}

    def dfs(i: int, obs_id: str, depth: int) -> str:
        out = ""
        node = tree[i]
        valid = True
        try:
            role = node["role"]["value"]
            name = node["name"]["value"]
            line = f"[{obs_id}] {role} {repr(name)}"
            props = []
            for prop in node.get("properties", []):
                try:
                    if prop["name"] in IGNORED_ACTREE_PROPERTIES:
                        continue
                    props.append(f'{prop["name"]}: {prop["value"]["value"]}')
                except KeyError:
                    pass
            if props:
                line += " " + " ".join(props)
            if not line.strip():
                valid = False
            if not name.strip():
                if not props:
                    if role in _EMPTY_ROLES_DROPPED:
                        valid = False
                elif role == "listitem":
                    valid = False
            if valid:
                out += "\t" * depth + line
                info[obs_id] = {"backend_id": node["backendDOMNodeId"], "union_bound": node["union_bound"],
                                "text": line}
        except Exception:
            valid = False
        for child in node["childIds"]:
            if child not in index:
                continue
            sub = dfs(index[child], child, depth + 1 if valid else depth)
            if sub.strip():
                if out.strip():
                    out += "\n"
                out += sub
        return out

    return dfs(0, tree[0]["nodeId"], 0), info


def _clean_ax_text(text: str) -> str:
    # processors.py clean_accesibility_tree: a StaticText line goes when its text already shows
    # in one of the three lines kept before it. (Sic: any line that contains "statictext" in any
    # case but does not match the pattern goes too.)
    kept: list[str] = []
    for line in text.split("\n"):
        if "statictext" in line.lower():
            m = re.search(r"\[\d+\] StaticText (.+)", line, re.DOTALL)
            if m:
                static = m.group(1)[1:-1]  # drop the quotes
                if static and all(static not in prev for prev in kept[-3:]):
                    kept.append(line)
        else:
            kept.append(line)
    return "\n".join(kept)


def _tab_header(page: Any) -> str:
    pages = page.context.pages
    try:
        current = pages.index(page)
        return " | ".join(f"Tab {i} (current): {p.title()}" if i == current else f"Tab {i}: {p.title()}"
                          for i, p in enumerate(pages))
    except Exception:
        return " | ".join(["Tab {idx}" for _ in pages])  # sic: WebArena's fallback is not an f-string


class Browser:
    """One episode's browser (WebArena's ScriptBrowserEnv with run.py's default flags). A context
    manager; close() always frees Chromium. Use it from one thread, outside any asyncio loop."""

    def __init__(self, *, executable: str | None = None, storage_state: str | None = None,
                 geolocation: dict | None = None, viewport: tuple[int, int] = (1280, 720), timeout_ms: int = 30000,
                 settle_ms: int = 10000) -> None:
        self.executable = executable or os.environ.get("EASYLEMUR_CHROMIUM", CHROMIUM)
        if not os.path.exists(self.executable):
            raise FileNotFoundError(f"Chromium not found at {self.executable}: install Debian's `chromium` package "
                                    "(apt-get install chromium) or set EASYLEMUR_CHROMIUM to a Chromium binary")
        self.storage_state = storage_state
        self.geolocation = geolocation
        self.viewport = {"width": int(viewport[0]), "height": int(viewport[1])}
        self.timeout_ms = timeout_ms
        self.settle_ms = settle_ms
        self._nodes: dict = {}  # the last observation's obs_nodes_info (WebArena keeps it on the processor)
        self._clients: dict = {}  # page -> CDP session (WebArena hangs it on the page as `page.client`)
        self._context: Any = None
        self._page: Any = None
        from playwright.sync_api import sync_playwright  # lazily: the module imports without playwright

        self._pw_manager = sync_playwright()
        self._pw = self._pw_manager.start()
        try:
            self._browser = self._pw.chromium.launch(executable_path=self.executable, headless=True)
        except BaseException:
            self._pw.stop()
            raise

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    @property
    def page(self) -> Any:
        """The current Playwright page (None before reset)."""
        return self._page

    def close(self) -> None:
        """Close the context, Chromium and Playwright's driver; safe to call twice."""
        pw, self._pw = getattr(self, "_pw", None), None
        if pw is None:
            return
        try:
            self._browser.close()
        except Exception:
            pass
        finally:
            pw.stop()
            self._context = self._page = None
            self._clients.clear()

    def _client(self, page: Any, enable_ax: bool = False) -> Any:
        client = self._clients.get(page)
        if client is None:  # difference 2: any page gets a session when it needs one
            client = page.context.new_cdp_session(page)
            if enable_ax:
                client.send("Accessibility.enable")
            self._clients[page] = client
        return client

    def reset(self, start_url: str, *, storage_state: str | None = None, geolocation: dict | None = None) -> dict:
        """ScriptBrowserEnv.reset: a fresh context (viewport, storage_state, geolocation, scale 1:
        this task's, else the browser's), one tab per URL of `start_url` (URLs joined by " |AND| "),
        the first tab current; returns observe(). One Browser serves task after task."""
        if self._pw is None:
            raise RuntimeError("Browser is closed")
        if self._context is not None:
            self._context.close()
        self._clients.clear()
        self._nodes = {}
        self._context = self._browser.new_context(viewport=self.viewport,
                                                  storage_state=storage_state or self.storage_state,
                                                  geolocation=geolocation or self.geolocation, device_scale_factor=1)
        self._context.set_default_timeout(self.timeout_ms)
        self._context.add_init_script(_NAV_WATCH_JS)
        if start_url:
            for url in start_url.split(" |AND| "):
                page = self._context.new_page()
                self._client(page, enable_ax=True)
                page.goto(url)
            self._page = self._context.pages[0]
            self._page.bring_to_front()
        else:
            self._page = self._context.new_page()
            self._client(self._page, enable_ax=True)
        return self.observe()

    def observe(self) -> dict:
        """{"text": the accessibility-tree observation as WebArena's processor renders it (tab
        header, a blank line, the tree), "url": page.url, "nodes": obs_nodes_info (AX node id ->
        {"backend_id", "union_bound": [x, y, width, height] in viewport pixels, "text": the line})}."""
        if self._page is None:
            raise RuntimeError("Call reset first")
        page = self._page
        client = self._client(page)
        header = _tab_header(page)
        try:
            win_width, win_height = self._browser_config(page)
        except Exception:
            page.wait_for_load_state("load", timeout=500)
            win_width, win_height = self._browser_config(page)
        tree = _fetch_ax_tree(client, win_width, win_height)
        text, nodes = _render_ax_tree(tree)
        self._nodes = nodes
        return {"text": f"{header}\n\n{_clean_ax_text(text)}", "url": page.url, "nodes": nodes}

    @staticmethod
    def _browser_config(page: Any) -> tuple[float, float]:
        # processors.py fetch_browser_info: the viewport filter compares boxes with the screen size.
        width, height, ratio = page.evaluate("[window.screen.width, window.screen.height, window.devicePixelRatio]")
        assert ratio == 1.0, "devicePixelRatio is not 1.0"
        return width, height

    def _element_center(self, element_id: str) -> tuple[float, float]:
        # processors.py get_element_center, then execute_mouse_click's scaling back to pixels (the
        # same arithmetic, so the same float coordinates). An unknown id raises KeyError, whose
        # str() (the quoted id) becomes fail_error, as in WebArena.
        x, y, width, height = self._nodes[element_id]["union_bound"]
        left = (x + width / 2) / self.viewport["width"]
        top = (y + height / 2) / self.viewport["height"]
        size = self._page.viewport_size
        return left * size["width"], top * size["height"]

    def _execute(self, action: dict) -> None:
        # actions.py execute_action, id-based branches.
        t = action["action_type"]
        page = self._page
        if t in ("NONE", "STOP"):
            return  # difference 3
        if t == "SCROLL":
            sign = "-" if "up" in action["direction"] else "+"
            page.evaluate(_SCROLL_JS.format(sign=sign))
        elif t in ("KEY_PRESS", "CLICK", "HOVER", "TYPE"):
            self._input(action)
        elif t == "PAGE_FOCUS":
            self._page = self._context.pages[action["page_number"]]
            self._page.bring_to_front()
        elif t == "NEW_TAB":
            self._page = self._context.new_page()
            self._client(self._page)  # WebArena: a session without Accessibility.enable
        elif t == "GO_BACK":
            page.go_back()
        elif t == "GO_FORWARD":
            page.go_forward()
        elif t == "GOTO_URL":
            if urllib.parse.urlparse(action["url"]).scheme.lower() not in ("http", "https"):  # difference 8
                raise ValueError(f"goto takes an http(s) URL, not {action['url'][:80]!r}")
            page.goto(action["url"])
        elif t == "PAGE_CLOSE":
            page.close()
            self._clients.pop(page, None)
            pages = self._context.pages
            self._page = pages[-1] if pages else self._context.new_page()
        else:
            raise ValueError(f"Unknown action type: {t}")

    def _input(self, action: dict) -> None:
        t = action["action_type"]
        page = self._page
        if t != "KEY_PRESS" and not action["element_id"]:
            # WebArena falls through to its role/name and playwright-code locators, which an
            # id-based action leaves empty.
            kind = {"CLICK": "click", "HOVER": "hover", "TYPE": "type"}[t]
            raise (ValueError if t == "CLICK" else NotImplementedError)(f"No proper locator found for {kind} action")
        try:
            page.evaluate(f"window.{_LEAVING_FLAG} = false; window.{_STAY_FLAG} = true")
        except Exception:
            pass
        if t == "KEY_PRESS":
            key = action["key_comb"]
            if "Meta" in key and "Mac" not in page.evaluate("navigator.platform"):
                key = key.replace("Meta", "Control")
            page.keyboard.press(key)
        else:
            x, y = self._element_center(action["element_id"])
            if t == "HOVER":
                page.mouse.move(x, y)
            else:
                page.mouse.click(x, y)
                if t == "TYPE":
                    page.keyboard.type(action["text"])  # a trailing "\n" presses Enter
        self._settle(page)

    def _settle(self, page: Any) -> None:
        # Difference 1: wait for a document the action started loading, so the observation shows it.
        from playwright.sync_api import Error as PlaywrightError

        if page.is_closed():
            return
        try:
            # Two macrotask turns first: some navigations (a form submitted by Enter) start from a
            # queued task, not during the input event. Then: leaving, or already in a new document
            # (one without the flag set before the action).
            leaving = page.evaluate(f"""async () => {{
                for (let i = 0; i < 2; i++) await new Promise(r => setTimeout(r, 0));
                return !!window.{_LEAVING_FLAG} || !window.{_STAY_FLAG};
            }}""")
        except PlaywrightError:
            leaving = True  # the document went away mid-call: a navigation committed
        if not leaving:
            return
        try:
            page.wait_for_function(f"!window.{_STAY_FLAG}", timeout=self.settle_ms)  # the new document is in
            page.wait_for_load_state("load", timeout=self.settle_ms)
        except PlaywrightError:
            pass  # e.g. a download or a 204 never replaces the document: observe what is there

    def step(self, action: dict) -> dict:
        """ScriptBrowserEnv.step: execute the action (an error becomes fail_error, its str()),
        then {"observation": observe(), "success": bool, "fail_error": str}."""
        if self._page is None:
            raise RuntimeError("Call reset first before calling step.")
        success, fail_error = False, ""
        try:
            self._execute(action)
            success = True
        except Exception as e:
            fail_error = str(e)
        return {"observation": self.observe(), "success": success, "fail_error": fail_error}
