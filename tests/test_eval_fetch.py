"""A benchmark's data fetched from where its authors publish it (eval/benchmarks/fetch.py), for
real, from servers this file starts on 127.0.0.1: a mirror (`$EASYLEMUR_EVAL_MIRROR`) serving
files in the authors' formats (MBPP's mbpp.jsonl, MultiPL-E's prompts JSON, Spider's zip), and a
Hugging Face Hub answering the requests `hf_hub_download` makes (HEAD and GET of
/datasets/REPO/resolve/REVISION/FILE with the commit and ETag headers). The fetched files are read
by the benchmarks' own loaders and commands; a download cut short (or of another digest) leaves
no file that looks whole; offline, a row is refused at once in one line saying where the data
is published and where to place a copy; huggingface_hub's own cache answers offline."""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest

from easylemur.eval.api import MissingData
from easylemur.eval.benchmarks import fetch, registry

ROOT = Path(__file__).resolve().parents[1]

# MBPP's published rows (mbpp.jsonl's format): the few-shot problems 2-4 and two of the test split
MBPP = [
    {"text": "Write a function to find the similar elements from the given two tuple lists.",
     "code": "def similar_elements(test_tup1, test_tup2):\r\n  res = tuple(set(test_tup1) & set(test_tup2))\r\n  return (res) ",
     "task_id": 2, "test_setup_code": "", "challenge_test_list": [],
     "test_list": ["assert similar_elements((3, 4, 5, 6),(5, 7, 4, 10)) == (4, 5)"]},
    {"text": "Write a python function to identify non-prime numbers.",
     "code": "import math\r\ndef is_not_prime(n):\r\n    return any(n % i == 0 for i in range(2, int(math.sqrt(n)) + 1))",
     "task_id": 3, "test_setup_code": "", "challenge_test_list": [], "test_list": ["assert is_not_prime(10) == True"]},
    {"text": "Write a function to find the largest integers from a given list of numbers using heap queue algorithm.",
     "code": "import heapq as hq\r\ndef heap_queue_largest(nums,n):\r\n  return hq.nlargest(n, nums)",
     "task_id": 4, "test_setup_code": "", "challenge_test_list": [],
     "test_list": ["assert heap_queue_largest([25, 35, 22, 85], 2) == [85, 35]"]},
    {"text": "Write a python function to remove first and last occurrence of a given character from the string.",
     "code": "def remove_Occ(s,ch): \r\n    i = s.find(ch)\r\n    s = s[:i] + s[i + 1:] if i >= 0 else s\r\n"
             "    j = s.rfind(ch)\r\n    return s[:j] + s[j + 1:] if j >= 0 else s",
     "task_id": 11, "test_setup_code": "", "challenge_test_list": [],
     "test_list": ["assert remove_Occ(\"hello\",\"l\") == \"heo\"", "assert remove_Occ(\"PHP\",\"P\") == \"H\""]},
    {"text": "Write a function to find the perimeter of a square.", "code": "def square_perimeter(a):\r\n  return 4*a",
     "task_id": 17, "test_setup_code": "", "challenge_test_list": [], "test_list": ["assert square_perimeter(10)==40"]},
]
MBPP_TEXT = "".join(json.dumps(r) + "\n" for r in MBPP)


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture
def serve():
    """serve(handler) -> its base URL; every server is stopped at the end."""
    servers = []

    def start(handler) -> str:
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(httpd)
        return f"http://127.0.0.1:{httpd.server_address[1]}"

    yield start
    for httpd in servers:
        httpd.shutdown()
        httpd.server_close()


def _site(root: Path, tmp_path: Path) -> Path:
    """A mirror laid out as the cache: mbpp.jsonl, multipl_e/humaneval-js-reworded.json (a JSON
    list of rows, as MultiPL-E's prompts are published) and spider.zip (spider_data/ as Spider's
    zip holds it, with its macOS metadata)."""
    from test_agent import _spider
    from test_multipl_e import ROWS

    root.mkdir()
    (root / "mbpp.jsonl").write_text(MBPP_TEXT)
    (root / "multipl_e").mkdir()
    (root / "multipl_e" / "humaneval-js-reworded.json").write_text(json.dumps([r for r, _, _ in ROWS["js"]], indent=1))
    spider = _spider(tmp_path / "spider_src")
    with zipfile.ZipFile(root / "spider.zip", "w") as z:
        for f in sorted(spider.rglob("*")):
            if f.is_file():
                z.write(f, f"spider_data/{f.relative_to(spider)}")
        z.writestr("__MACOSX/spider_data/._dev.json", b"\0\5\26\7")
    return root


@pytest.fixture
def mirror(serve, tmp_path, monkeypatch):
    site = _site(tmp_path / "site", tmp_path)
    url = serve(functools.partial(_Quiet, directory=str(site)))
    monkeypatch.setenv(fetch.MIRROR_ENV, url)
    monkeypatch.setenv(fetch.CACHE_ENV, str(tmp_path / "cache"))
    return url


def test_fetched_once_into_the_cache_and_read_by_the_loaders(mirror, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    mbpp = fetch.find_data("mbpp", None, None)
    assert mbpp == str(cache / "mbpp.jsonl") and Path(mbpp).read_text() == MBPP_TEXT
    task = registry.build("mbpp", mbpp)
    assert [p.task_id for p in task.problems] == [11, 17] and [p.task_id for p in task.fewshot] == [2, 3, 4]
    js = fetch.find_data("multipl_e:js", None, None)
    assert js == str(cache / "multipl_e" / "humaneval-js-reworded.json")
    assert len(registry.build("multipl_e:js", js).problems) >= 2
    # Spider's zip: unpacked, its folder holding dev.json renamed into place, macOS metadata left out
    for name in ("spider", "sql_agent"):
        assert fetch.find_data(name, None, None) == str(cache / "spider")
    assert sorted(p.name for p in (cache / "spider").iterdir()) == ["database", "dev.json", "tables.json"]
    assert len(registry.build("spider", str(cache / "spider")).problems) == 3
    assert sorted(p.name for p in cache.iterdir()) == ["mbpp.jsonl", "multipl_e", "spider"]  # no partial file left
    # the mirror gone: the cache answers; a copy under --data-dir comes before it
    monkeypatch.setenv(fetch.MIRROR_ENV, "http://127.0.0.1:9")
    assert fetch.find_data("mbpp", None, None) == str(cache / "mbpp.jsonl")
    local = tmp_path / "data"
    local.mkdir()
    (local / "mbpp.jsonl").write_text(MBPP_TEXT)
    assert fetch.find_data("mbpp", None, str(local)) == str(local / "mbpp.jsonl")
    assert fetch.find_data("mbpp", "elsewhere.jsonl", str(local)) == "elsewhere.jsonl"  # --data NAME=PATH first


@pytest.mark.filterwarnings("ignore:running generated code WITHOUT a sandbox")
def test_the_benchmark_command_reads_a_fetched_file(mirror, tmp_path, capsys):
    """`python -m easylemur.eval mbpp --samples ...` with no --data: MBPP fetched into --cache-dir
    and scored (the programs checked without the sandbox, in the checker with its limits)."""
    from easylemur.eval.cli.benchmark import main

    samples = tmp_path / "samples.jsonl"
    samples.write_text("".join(json.dumps({"task_id": r["task_id"], "completion": r["code"]}) + "\n"
                               for r in MBPP if r["task_id"] >= 11))
    cache = tmp_path / "other_cache"
    assert main(["mbpp", "--samples", str(samples), "--out", str(tmp_path / "out"), "--cache-dir", str(cache),
                 "--unsafe-no-sandbox", "--workers", "2"]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["pass@1"] == 1.0
    assert (cache / "mbpp.jsonl").read_text() == MBPP_TEXT


class _CutShort(http.server.BaseHTTPRequestHandler):
    """Announces 4096 bytes and sends 100, then closes: a download cut short."""

    def log_message(self, *args):
        pass

    def do_HEAD(self):
        self.send_response(200)
        self.end_headers()

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "4096")
        self.end_headers()
        self.wfile.write(MBPP_TEXT.encode()[:100])
        self.wfile.flush()
        self.close_connection = True


def test_a_download_cut_short_or_of_another_digest_leaves_nothing_that_looks_whole(serve, tmp_path, monkeypatch):
    monkeypatch.setenv(fetch.MIRROR_ENV, serve(_CutShort))
    cache = tmp_path / "cache"
    with pytest.raises(MissingData, match=r"fetching it failed: http://127\.0\.0\.1:\d+/mbpp\.jsonl: cut short, "
                                          r"100 of 4096 bytes; .*--data mbpp=PATH"):
        fetch.find_data("mbpp", None, None, str(cache))
    with pytest.raises(MissingData, match="cut short"):  # an archive likewise: no spider/ folder
        fetch.find_data("spider", None, None, str(cache))
    assert [p for p in cache.rglob("*")] == []  # nothing at mbpp.jsonl, no temporary file left
    # the whole file, but not the pinned one: refused likewise
    site = tmp_path / "site"
    site.mkdir()
    (site / "mbpp.jsonl").write_text(MBPP_TEXT)
    url = serve(functools.partial(_Quiet, directory=str(site)))
    with pytest.raises(fetch.FetchError, match=f"sha256 {hashlib.sha256(MBPP_TEXT.encode()).hexdigest()}, not the pinned"):
        fetch.download(f"{url}/mbpp.jsonl", cache / "mbpp.jsonl", sha256="0" * 64)
    assert [p for p in cache.rglob("*")] == []
    fetch.download(f"{url}/mbpp.jsonl", cache / "mbpp.jsonl", sha256=hashlib.sha256(MBPP_TEXT.encode()).hexdigest())
    assert (cache / "mbpp.jsonl").read_text() == MBPP_TEXT and len(list(cache.iterdir())) == 1


def test_offline_a_row_is_one_line_at_once(tmp_path, monkeypatch):
    """A refused connection, and a host that takes the connection and never answers (no answer
    within PROBE_SECONDS, 0.5 s here): MissingData at once, one line saying where the data is
    published and where to place a copy; the Hub offline with nothing in its cache likewise."""
    monkeypatch.setenv(fetch.MIRROR_ENV, "http://127.0.0.1:9")
    t = time.monotonic()
    with pytest.raises(MissingData) as e:
        fetch.find_data("mbpp", None, str(tmp_path / "data"), str(tmp_path / "cache"))
    why = str(e.value)
    assert time.monotonic() - t < 2 and "\n" not in why, why
    assert why.startswith(f"no data (looked for {tmp_path / 'data' / 'mbpp.jsonl'} and not in the cache, "
                          f"{tmp_path / 'cache' / 'mbpp.jsonl'}) and fetching it failed: no answer from "
                          "http://127.0.0.1:9: "), why
    assert why.endswith(f"is published at github.com/google-research/google-research, mbpp/mbpp.jsonl at "
                        f"{fetch.GOOGLE_RESEARCH[:12]}: place a copy at {tmp_path / 'cache' / 'mbpp.jsonl'} (or "
                        "D/mbpp.jsonl with --data-dir D), or pass --data mbpp=PATH"), why
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # connections are taken (the backlog) and never answered
    monkeypatch.setattr(fetch, "PROBE_SECONDS", 0.5)
    monkeypatch.setenv(fetch.MIRROR_ENV, f"http://127.0.0.1:{silent.getsockname()[1]}")
    t = time.monotonic()
    try:
        with pytest.raises(MissingData, match=r"no answer from http://127\.0\.0\.1:\d+: timed out; MultiPL-E's "
                                              r"humaneval-go-reworded\.json is published at huggingface\.co/datasets/"
                                              r"nuprl/MultiPL-E \(config humaneval-go"):
            fetch.find_data("multipl_e:go", None, None, str(tmp_path / "cache"))
    finally:
        silent.close()
    assert time.monotonic() - t < 3
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hf"))
    with pytest.raises(MissingData, match=r"the Hub cannot be reached \(HF_HUB_OFFLINE=1\) and huggingface_hub's cache "
                                          r"does not hold xlangai/DS-1000's test\.jsonl at 4416080ac5cb; DS-1000's "
                                          r"test\.jsonl is published at huggingface\.co/datasets/xlangai/DS-1000"):
        fetch.find_data("ds1000", None, None, str(tmp_path / "cache"))
    assert not (tmp_path / "cache").exists() or list((tmp_path / "cache").iterdir()) == []


def _hub(files: dict[str, bytes]):
    """The Hub as hf_hub_download asks it: HEAD and GET /datasets/REPO/resolve/REVISION/FILE answer
    with the commit (X-Repo-Commit), an ETag and the length; anything else is a 404."""

    class Hub(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def _head(self) -> bytes | None:
            body = files.get(self.path)
            if body is None:
                self.send_response(404)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None
            self.send_response(200)
            self.send_header("X-Repo-Commit", self.path.split("/resolve/")[1].split("/")[0])
            self.send_header("ETag", f'"{hashlib.sha256(body).hexdigest()}"')
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            return body

        def do_HEAD(self):
            self._head()

        def do_GET(self):
            body = self._head()
            if body is not None:
                self.wfile.write(body)

    return Hub


def test_the_fetch_command_from_the_hub_and_a_mirror_then_offline_from_the_hubs_cache(serve, tmp_path):
    """`python -m easylemur.eval fetch --suite S --cache-dir C`: DS-1000's test.jsonl from the Hub
    (hf_hub_download at the pinned revision, through HF_ENDPOINT into HF_HUB_CACHE, then copied into
    the cache), MBPP's file from the mirror; read by their loaders. Then, the servers gone and
    HF_HUB_OFFLINE set, into a new cache: DS-1000 from huggingface_hub's cache, MBPP one line."""
    from easylemur.eval.benchmarks.ds1000 import load_ds1000
    from test_ds1000 import NUMPY_RESHAPE, PANDAS_SUM

    ds1000 = "".join(json.dumps(r) + "\n" for r in (NUMPY_RESHAPE, PANDAS_SUM)).encode()
    hub = serve(_hub({f"/datasets/xlangai/DS-1000/resolve/{fetch.DS1000}/test.jsonl": ds1000}))
    site = tmp_path / "site"
    site.mkdir()
    (site / "mbpp.jsonl").write_text(MBPP_TEXT)
    suite = tmp_path / "suite.json"
    suite.write_text(json.dumps({"name": "two", "tasks": {"ds1000": {"kind": "code", "benchmark": "ds1000"},
                                                          "mbpp": {"kind": "code", "benchmark": "mbpp"},
                                                          "gsm8k": {"kind": "lm_eval", "task": "gsm8k"}}}))
    env = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
    env.update(HF_ENDPOINT=hub, HF_HUB_CACHE=str(tmp_path / "hf"), HF_HUB_DISABLE_TELEMETRY="1",
               EASYLEMUR_EVAL_MIRROR=serve(functools.partial(_Quiet, directory=str(site))))

    def run(cache: Path, **more: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "easylemur.eval", "fetch", "--suite", str(suite),
                               "--cache-dir", str(cache)], capture_output=True, text=True, cwd=ROOT, timeout=120,
                              env={**env, **more})

    p = run(tmp_path / "cache")
    assert p.returncode == 0, p.stdout + p.stderr[-2000:]
    lines = p.stdout.splitlines()
    assert lines[0] == f"fetch: ds1000: {tmp_path / 'cache' / 'ds1000.jsonl'} (fetched in 0 s)", lines
    assert lines[1] == f"fetch: mbpp: {tmp_path / 'cache' / 'mbpp.jsonl'} (fetched in 0 s)", lines
    assert lines[2].startswith("fetch: gsm8k: lm-eval's task gsm8k: lm-eval fetches its dataset"), lines
    assert [p.task_id for p in load_ds1000(tmp_path / "cache" / "ds1000.jsonl")] == [0, 2]
    assert (tmp_path / "cache" / "ds1000.jsonl").read_bytes() == ds1000
    assert list((tmp_path / "hf").glob(f"datasets--xlangai--DS-1000/snapshots/{fetch.DS1000}/test.jsonl"))
    again = run(tmp_path / "cache")  # all there: nothing fetched again
    assert again.returncode == 0 and "(in the cache)" in again.stdout.splitlines()[1], again.stdout

    t = time.monotonic()
    p = run(tmp_path / "cache2", HF_HUB_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9",
            EASYLEMUR_EVAL_MIRROR="http://127.0.0.1:9")
    assert time.monotonic() - t < 20
    assert p.returncode == 1, p.stdout + p.stderr[-2000:]
    lines = p.stdout.splitlines()
    assert lines[0] == f"fetch: ds1000: {tmp_path / 'cache2' / 'ds1000.jsonl'} (fetched in 0 s)", lines
    assert lines[1].startswith("fetch: mbpp: not fetched: no data (not in the cache, ") and "--data mbpp=PATH" in lines[1]
    assert (tmp_path / "cache2" / "ds1000.jsonl").read_bytes() == ds1000
    assert p.stderr.strip().splitlines()[-1] == "fetch: 1 not fetched (see above)"
