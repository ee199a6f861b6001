"""The Hugging Face Hub as lm-eval's rows reach it: reachable or not, found once per process.

lm-eval loads a task's dataset with `datasets.load_dataset`, from the Hub into the local
datasets cache (`$HF_HOME`, ~/.cache/huggingface). With no network, huggingface_hub retries
each request 5 times with a backoff doubling to 8 s: ~25 s per dataset before the row fails.
`offline()` says why the Hub cannot be reached (an `HF_*_OFFLINE` variable set, or no answer
from `HF_ENDPOINT` within a few seconds: `benchmarks/fetch.unanswered`) and then puts this
process in the Hub libraries' offline mode, where a dataset the cache holds still loads and a
missing one fails at once; `LOCAL_COPY` says how to place one.
"""

from __future__ import annotations

import functools
import os
import sys

from easylemur.eval.benchmarks.fetch import unanswered

_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
LOCAL_COPY = ("place a copy: run this row once where the Hub is reachable (lm-eval stores its datasets in the Hugging "
              "Face cache, $HF_HOME or ~/.cache/huggingface) and copy that cache here, or give --lm-eval-include DIR "
              "with task YAMLs whose dataset_path reads local files (--data-dir is for the code and agent rows only)")


@functools.lru_cache(maxsize=None)
def unreachable() -> str:
    """Why the Hub cannot be reached from this process ("" when it can); asked once."""
    for var in _OFFLINE_VARS:
        if os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE"):
            return f"{var}={os.environ[var]}"
    return unanswered(os.environ.get("HF_ENDPOINT", "https://huggingface.co").rstrip("/"))


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
