"""The Hugging Face Hub as lm-eval's rows reach it: reachable or not, found once per process.

lm-eval loads a task's dataset with `datasets.load_dataset`, from the Hub into the local
datasets cache (`$HF_HOME`, ~/.cache/huggingface). With no network, huggingface_hub retries
each request 5 times with a backoff doubling to 8 s: ~25 s per dataset before the row fails.
`offline()` says why the Hub cannot be reached (an `HF_*_OFFLINE` variable set, or no answer
from `HF_ENDPOINT` within `PROBE_SECONDS`) and then puts this process in the Hub libraries'
offline mode, where a dataset the cache holds still loads and a missing one fails at once;
`LOCAL_COPY` says how to place one.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
import urllib.error
import urllib.request

PROBE_SECONDS = 3.0
_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
LOCAL_COPY = ("place a copy: run this row once where the Hub is reachable (lm-eval stores its datasets in the Hugging "
              "Face cache, $HF_HOME or ~/.cache/huggingface) and copy that cache here, or give --lm-eval-include DIR "
              "with task YAMLs whose dataset_path reads local files (--data-dir is for the code and agent rows only)")


def _probe(url: str) -> str:
    """"" when `url` answers over HTTP (any status; through the environment's proxies), else why not."""
    try:
        urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=PROBE_SECONDS).close()
    except urllib.error.HTTPError:  # an answer: the Hub is there
        return ""
    except (urllib.error.URLError, OSError, ValueError) as e:
        return f"{url}: {getattr(e, 'reason', e)}"
    return ""


@functools.lru_cache(maxsize=None)
def unreachable() -> str:
    """Why the Hub cannot be reached from this process ("" when it can); asked once."""
    for var in _OFFLINE_VARS:
        if os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return f"{var}={os.environ[var]}"
    url = os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/")
    found: list[str] = []
    # in a thread: a name lookup that hangs is not bound by the request's timeout
    probe = threading.Thread(target=lambda: found.append(_probe(url)), daemon=True)
    probe.start()
    probe.join(PROBE_SECONDS + 1)
    return found[0] if found else f"{url}: no answer within {PROBE_SECONDS:g} s"


def offline() -> str:
    """Why the Hub cannot be reached ("" when it can); when it cannot, the Hub libraries of this
    process are put in offline mode first: the variables for those not imported yet, their
    module flags (read at import) for those that are."""
    why = unreachable()
    if why:
        os.environ["HF_HUB_OFFLINE"] = os.environ["HF_DATASETS_OFFLINE"] = "1"
        for module, flags in (("huggingface_hub.constants", ("HF_HUB_OFFLINE",)),
                              ("datasets.config", ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"))):
            loaded = sys.modules.get(module)
            for flag in flags:
                if loaded is not None and hasattr(loaded, flag):
                    setattr(loaded, flag, True)
    return why


def missing_offline(error: BaseException) -> bool:
    """Whether `error` (or what caused it) is a download refused or failed for want of the Hub."""
    seen = 0
    while error is not None and seen < 10:
        text = f"{type(error).__name__}: {error}"
        if isinstance(error, ConnectionError) or "OfflineModeIsEnabled" in text or "on the Hub" in text \
                or "offline mode" in text.lower():
            return True
        error, seen = error.__cause__ or error.__context__, seen + 1
    return False
