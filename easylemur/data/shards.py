"""The global batch of a multi-host run, and the eval batches (docs/design.md, "Multi-host").

The global batch is made of `data.shards` independent data streams (default: one per
process), row block s of every batch from stream s. Each process reads only its own streams;
with data.shards fixed, the global batches are the same for any process count that divides it.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import jax
import numpy as np
from ml_collections import ConfigDict

from easylemur import sharding
from easylemur.config import ConfigError
from easylemur.data import batch as batch_layout
from easylemur.data.pipeline import make_pipeline


class DataShards:
    """This process's streams of the global batch. `__next__` gives the global batch as jax
    arrays; the state is every stream's, gathered so that process 0 saves all of them."""

    def __init__(self, cfg: ConfigDict, tokenizer: Any, mesh: Any):
        P, p = jax.process_count(), jax.process_index()
        S = cfg.data.shards or P
        if S % P:
            raise ConfigError(f"data.shards={S} must be a multiple of the process count {P}")
        self.mesh, self.num_shards = mesh, S
        self.mine = list(range(p * S // P, (p + 1) * S // P))
        check_rows_per_process(mesh, cfg.train.batch_size, cfg.data.seq_len)
        self.streams = []
        try:
            for s in self.mine:
                self.streams.append(make_pipeline(cfg.data, tokenizer, global_batch_size=cfg.train.batch_size,
                                                  seed=cfg.seed, process_index=s, process_count=S))
        except BaseException:
            self.close()  # the streams already built: nothing of them may outlive this error
            raise
        self.source_names: list[str] = list(self.streams[0].source_names)

    def __next__(self) -> dict:
        parts = [next(it) for it in self.streams]
        local = {k: np.concatenate([q[k] for q in parts]) for k in parts[0]}
        return sharding.host_local_to_global(local, self.mesh)

    def local_token_counts(self) -> np.ndarray:
        """[sources] non-padding tokens this process's streams have given so far (the data
        iterators' own counters, which their saved state carries across a resume)."""
        return np.array([sum(it.token_counts()[n] for it in self.streams) for n in self.source_names], np.int64)

    def get_state(self) -> dict:
        mine = {str(s): it.get_state() for s, it in zip(self.mine, self.streams)}
        return {"shards": self.num_shards, "streams": allgather_json(mine)}

    def set_state(self, state: dict) -> None:
        if state.get("shards") != self.num_shards:
            raise ConfigError(
                f"the checkpoint's data state has {state.get('shards')} shards but data.shards resolves to "
                f"{self.num_shards}; resume with --config.data.shards={state.get('shards')}"
            )
        for s, it in zip(self.mine, self.streams):
            it.set_state(state["streams"][str(s)])

    def close(self) -> None:
        for it in self.streams:
            it.close()


def check_rows_per_process(mesh: Any, batch_size: int, seq_len: int) -> None:
    """Each process feeds rows [p*B/P, (p+1)*B/P) of the global batch; that holds only if its
    devices own exactly those rows (a mesh whose tensor axis spans hosts breaks it)."""
    P, p = jax.process_count(), jax.process_index()
    if P == 1:
        return
    per = batch_size // P
    rows = set()
    for idx in sharding.batch_sharding(mesh).addressable_devices_indices_map((batch_size, seq_len)).values():
        rows.update(range(*idx[0].indices(batch_size)))
    if rows != set(range(p * per, (p + 1) * per)):
        mesh_text = ",".join(f"{k}:{v}" for k, v in mesh.shape.items())
        raise ConfigError(
            f"mesh {mesh_text}: process {p}'s devices hold batch rows {min(rows)}..{max(rows)}, not its own "
            f"{p * per}..{(p + 1) * per - 1}; keep the tensor axis within a host (put hosts on data/fsdp)"
        )


def allgather_json(obj: dict) -> dict:
    """Merges every process's dict (JSON-able) into one, on every process."""
    if jax.process_count() == 1:
        return obj
    from jax.experimental import multihost_utils

    raw = np.frombuffer(json.dumps(obj).encode(), np.uint8)
    sizes = multihost_utils.process_allgather(np.array([raw.size], np.int64))
    padded = np.zeros(int(sizes.max()), np.uint8)
    padded[: raw.size] = raw
    every = multihost_utils.process_allgather(padded)
    out: dict = {}
    for row, n in zip(every, sizes.reshape(-1)):
        out.update(json.loads(bytes(row[: int(n)]).decode()))
    return out


def eval_batches(cfg: ConfigDict, tokenizer: Any, mesh: Any) -> Iterator[dict]:
    """Exactly `eval.batches` global batches of data.eval_sources (unshuffled, one pass). A
    process whose share of the data ends feeds rows that train nothing, so every process runs
    the same number of eval steps and the collectives stay in step across hosts."""
    data_cfg = ConfigDict(cfg.data.to_dict())
    data_cfg.prefetch = 0  # a few batches, once: threads reading ahead would tokenize rows never used
    P = jax.process_count()
    with make_pipeline(
        data_cfg, tokenizer, global_batch_size=cfg.train.batch_size, seed=cfg.seed,
        process_index=jax.process_index(), process_count=P,
        sources=cfg.data.eval_sources, shuffle=False, repeat=False,
    ) as it:
        empty = batch_layout.empty(cfg.train.batch_size // P, cfg.data.seq_len)
        for _ in range(cfg.eval.batches):
            try:
                local = next(it)
            except StopIteration:
                local = empty
            yield sharding.host_local_to_global(local, mesh)
