"""Streamed Hugging Face hub datasets (`kind=hf_hub`; docs/design.md, "Sources").

A hub dataset is read with `datasets.load_dataset(..., streaming=True)`: it has no length and
no random access, so it cannot be a grain MapDataset like the file sources. `StreamSpec` is
what `readers.open_source` gives for one; `StreamIterDataset` brings it into the pipeline as
an IterDataset of (where, record), split between the data shards (`split_dataset_by_node`),
with the number of records consumed as its state.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import grain


def check_reachable(name: str, where: str) -> None:
    """A Hub dataset `name` the run will stream, asked for once with a short timeout before the
    run starts: unreachable (offline), missing or gated is one line naming `where` (the config
    key) and what to do, instead of the datasets library's minute of retries and log lines.
    Skipped when HF_HUB_OFFLINE / HF_DATASETS_OFFLINE (or TRANSFORMERS_OFFLINE, which
    huggingface_hub also reads) ask for the local cache."""
    import os

    from easylemur.data.records import DataError

    if any(os.environ.get(k, "").lower() in ("1", "true", "yes") for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE",
                                                                      "TRANSFORMERS_OFFLINE")):
        return
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

    try:
        HfApi().dataset_info(name, timeout=10)
    except GatedRepoError:
        raise DataError(f"{where}: {name}: a gated Hub dataset; accept its terms on the Hub and log in "
                        "(`hf auth login` or HF_TOKEN)") from None
    except RepositoryNotFoundError:
        raise DataError(f"{where}: {name}: no such dataset on the Hub (nor a file or directory here)") from None
    except Exception as e:  # noqa: BLE001 (any transport error: DNS, refused, timeout, proxy)
        msg = " ".join(str(e).split())[:160] or type(e).__name__
        raise DataError(f"{where}: {name}: cannot reach the Hub ({msg}); without a network, point the key at a "
                        "local copy (a directory of .jsonl or .parquet files), or set HF_HUB_OFFLINE=1 to read "
                        "the datasets cache") from None


@dataclass(frozen=True)
class StreamSpec:
    """A hub dataset read with `datasets.load_dataset(..., streaming=True)` (no random access)."""

    name: str
    config: str
    split: str

    def open(self, shard_index: int, shard_count: int, seed: int | None) -> Any:
        """This shard's part of the stream (a `datasets.IterableDataset`), shuffled in a buffer
        when `seed` is given."""
        import datasets
        from datasets.distributed import split_dataset_by_node

        ds = datasets.load_dataset(self.name, self.config or None, split=self.split, streaming=True)
        if seed is not None:
            ds = ds.shuffle(seed=seed, buffer_size=10_000)
        if shard_count > 1:
            ds = split_dataset_by_node(ds, rank=shard_index, world_size=shard_count)
        return ds


class StreamIterDataset(grain.IterDataset):
    """A streamed HF hub dataset as a grain source: one data shard's part of it
    (split_dataset_by_node); its state is the number of records consumed."""

    def __init__(self, spec: StreamSpec, shard_index: int, shard_count: int, seed: int | None):
        super().__init__()
        self.spec = spec
        self.shard_index, self.shard_count, self.seed = shard_index, shard_count, seed

    def __iter__(self) -> StreamIterator:
        return StreamIterator(self)


class StreamIterator(grain.DatasetIterator):
    """Reads one shard of a `StreamIterDataset`, naming each record by its ordinal ("name:record
    n") since a stream has no file and line for bad-record messages to point at."""

    def __init__(self, ds: StreamIterDataset):
        super().__init__()
        self.ds = ds
        self.count = 0
        self._it = None

    def _open(self):
        self._it = iter(self.ds.spec.open(self.ds.shard_index, self.ds.shard_count, self.ds.seed))

    def __next__(self) -> tuple[str, Any]:
        if self._it is None:
            self._open()
        rec = next(self._it)
        where = f"{self.ds.spec.name}:record {self.count}"
        self.count += 1
        return where, rec

    def get_state(self) -> dict[str, int]:
        return {"count": self.count}

    def set_state(self, state: Mapping[str, int]) -> None:
        # Streams cannot seek: reopen and skip (exact, but costs a re-read of the prefix).
        self._open()
        for _ in range(int(state["count"])):
            next(self._it)
        self.count = int(state["count"])
