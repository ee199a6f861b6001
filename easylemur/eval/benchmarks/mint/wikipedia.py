"""MINT's `wikipedia_search` tool, answered on the host (the interpreter in the sandbox calls
it through its session; it has no network of its own).

`online`: as MINT's tool (LangChain's Wikipedia wrapper over the `wikipedia` package): the
MediaWiki search for the query (cut to MINT's 300 characters), the top 2 titles' intro
summaries as "Page: TITLE\nSummary: TEXT", joined by a blank line and cut to 1,000 characters,
or MINT's no-result text. A page that is missing or a disambiguation page is passed over, as
there. Wikipedia has changed since MINT's runs, so answers may differ from its transcripts.
`off`: MINT's no-result text for every query (a run without a network).
A path: a JSONL file of {"title": ..., "summary": ...} pages, searched offline: the pages whose
title equals the query (case-insensitive), then those whose title contains it, then those whose
summary does, top 2 (a stand-in for Wikipedia's ranking, not the same).
"""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from typing import Callable

from easylemur.errors import InputError
from easylemur.eval.benchmarks.mint.texts import Wikipedia

API = "https://en.wikipedia.org/w/api.php"
USER_AGENT = "easylemur-eval (MINT's wikipedia_search tool)"


def _get(params: dict) -> dict:
    url = API + "?" + urllib.parse.urlencode({**params, "format": "json"})
    req = urllib.request.Request(url, headers={"User-Agent": USER_AGENT})
    with urllib.request.urlopen(req, timeout=20) as r:
        return json.loads(r.read().decode("utf-8"))


def _online(w: Wikipedia) -> Callable[[str], str]:
    def search(query: str) -> str:
        try:
            hits = _get({"action": "query", "list": "search", "srsearch": query[: w.query_chars], "srlimit": 10,
                         "srprop": ""})["query"]["search"]
            summaries = []
            for title in [h["title"] for h in hits][: w.top_k]:
                pages = _get({"action": "query", "prop": "extracts|pageprops", "explaintext": 1, "exintro": 1,
                              "redirects": 1, "titles": title})["query"]["pages"]
                page = next(iter(pages.values()))
                if "missing" in page or "disambiguation" in page.get("pageprops", {}):
                    continue
                summaries.append(f"Page: {title}\nSummary: {page.get('extract', '')}")
        except Exception as e:  # noqa: BLE001 - the tool's failure is the model's observation, not the run's
            return f"{w.no_result} ({type(e).__name__}: Wikipedia could not be reached)"
        return "\n\n".join(summaries)[: w.chars] if summaries else w.no_result
    return search


def _pages(w: Wikipedia, path: str) -> Callable[[str], str]:
    pages = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                pages.append((str(row["title"]), str(row["summary"])))
            except (json.JSONDecodeError, KeyError, TypeError):
                raise InputError(f"{path}:{i}: expected a JSON object with title and summary") from None

    def search(query: str) -> str:
        q = query[: w.query_chars].strip().lower()
        ranked = ([p for p in pages if p[0].lower() == q] + [p for p in pages if q in p[0].lower() and p[0].lower() != q]
                  + [p for p in pages if q not in p[0].lower() and q in p[1].lower()])
        found = [f"Page: {t}\nSummary: {s}" for t, s in ranked[: w.top_k]]
        return "\n\n".join(found)[: w.chars] if found else w.no_result
    return search


def wikipedia_tool(w: Wikipedia, mode: str) -> Callable[[str], str]:
    """The tool's host side for `--wikipedia MODE`: online, off, or a pages file."""
    if mode == "online":
        return _online(w)
    if mode == "off":
        return lambda query: w.no_result
    if not os.path.isfile(os.path.expanduser(mode)):
        raise InputError(f"--wikipedia {mode!r}: expected online, off, or a JSONL file of title/summary pages")
    return _pages(w, os.path.expanduser(mode))
