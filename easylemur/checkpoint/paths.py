"""Where checkpoints and run files live: local paths or bucket URLs as etils epath paths, the
kind orbax and tensorstore take (which is which: easylemur/storage.py's `is_url`). Kept apart
from the store so the workdir lock and the metrics writer need no orbax."""

from __future__ import annotations

import os

from etils import epath

from easylemur.storage import is_url


def as_path(path: str | os.PathLike) -> epath.Path:
    """Local paths made absolute; bucket URLs (gs://...) kept as they are, so every host of a pod
    writes its shards into the same checkpoint."""
    text = os.fspath(path)
    return epath.Path(text) if is_url(text) else epath.Path(os.path.abspath(text))
