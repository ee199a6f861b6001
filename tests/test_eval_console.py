"""What the evaluation commands print besides their results: progress lines (`eval/api/console.py`),
each log record once (`eval/api/console.py`), and an lm-eval dataset that the Hub cannot send
failing at once (`eval/backends/hub.py`)."""

import io
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from easylemur.eval.api import Progress

ROOT = Path(__file__).resolve().parent.parent


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_in_a_log_is_a_plain_line_per_tenth_and_at_the_end():
    stream, clock = io.StringIO(), Clock()
    with Progress("suite: humaneval: judged", 40, "samples", stream=stream, clock=clock) as progress:
        for _ in range(7):
            clock.now += 0.5
            progress()
    assert stream.getvalue().splitlines() == [
        "suite: humaneval: judged 0/40 samples",
        "suite: humaneval: judged 4/40 samples (2.0/s, 2 s, ~18 s left)",
        "suite: humaneval: judged 7/40 samples (2.0/s, 4 s, ~16 s left)"]  # the last count, at close
    # a slow task: a line every 30 s though no tenth is done; rates under one a second per minute
    stream = io.StringIO()
    progress = Progress("m_gsm8k: played", 100, "episodes", stream=stream, clock=clock)
    clock.now += 31
    progress.update()
    progress.close()
    progress.close()
    assert stream.getvalue().splitlines()[1:] == ["m_gsm8k: played 1/100 episodes (1.9/min, 31 s, ~51:09 left)"]


def test_progress_on_a_terminal_is_one_line_rewritten_and_counts_from_every_thread():
    stream = Terminal()
    with Progress("humaneval: generated", 64, stream=stream) as progress:
        threads = [threading.Thread(target=lambda: [progress() for _ in range(16)]) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    text = stream.getvalue()
    assert progress.done == 64 and text.startswith("\rhumaneval: generated 0/64 samples") and text.endswith("\n")
    assert text.count("\n") == 1 and "\rhumaneval: generated 64/64 samples (" in text
    silent = io.StringIO()
    with Progress("nothing", 0, stream=silent) as progress:
        progress()
    assert silent.getvalue() == ""


LOGS = """
import logging, sys
if sys.argv[1] == "fixed":
    from easylemur.eval.api.console import one_line_per_record
    one_line_per_record()
from absl import logging as absl_logging
absl_logging.warning("absl: once")  # absl's first record runs logging.basicConfig() where root has no handler
from huggingface_hub.utils import logging as hub_logging
hub_logging.get_logger("huggingface_hub.utils._http").warning("hub: once")  # its own stderr handler, propagating
logging.getLogger("easylemur.example").warning("plain: once")
"""


def test_each_log_record_is_printed_once():
    """huggingface_hub prints its records with its own handler and passes them on to the root
    logger, where absl's basicConfig put a second handler: twice, until the commands' logging set-up."""
    def run(mode: str) -> list[str]:
        return subprocess.run([sys.executable, "-c", LOGS, mode], capture_output=True, text=True, cwd=ROOT,
                              timeout=120, check=True).stderr.splitlines()

    assert [line for line in run("as-before") if "hub: once" in line] == [
        "hub: once", "WARNING:huggingface_hub.utils._http:hub: once"]
    lines = [line for line in run("fixed") if "once" in line]
    assert [line.split(":")[-2].strip() for line in lines] == ["absl", "hub", "plain"], lines


HUB = """
import time
import datasets  # imported before the check: its offline flag is set in the module
from easylemur.eval.backends import hub
t = time.monotonic()
why = hub.offline()
try:
    datasets.load_dataset("easylemur-tests/not-in-the-cache")
except Exception as e:
    print(hub.missing_offline(e), round(time.monotonic() - t, 1), why, sep="|")
"""


def test_a_dataset_the_hub_cannot_send_fails_at_once(tmp_path):
    """No answer from the Hub (HF_ENDPOINT at a closed local port): offline mode, and a dataset
    that is not in the cache fails in seconds (huggingface_hub's retries took ~25 s)."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")}
    env.update(HF_ENDPOINT="http://127.0.0.1:9", HF_HOME=str(tmp_path / "hf"))
    t = time.monotonic()
    out = subprocess.run([sys.executable, "-c", HUB], capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    missing, seconds, why = out.stdout.strip().split("|")
    assert missing == "True" and float(seconds) < 8 and why.startswith("http://127.0.0.1:9: "), out.stderr[-2000:]
    assert time.monotonic() - t < 60
