"""The global batch of a multi-host run, and the eval batches (docs/design.md, "Multi-host").

The global batch is made of `data.shards` independent data shards (default: one per
process), row block s of every batch from shard s. Each process reads only its own shards;
with data.shards fixed, the global batches are the same for any process count that divides it.

It takes the `data` section and the two run settings it needs (the global batch size and the
seed), so the data package does not depend on the rest of the run config; a setting that does
not fit (data.shards, the mesh, a saved state) is a DataError.
"""

from __future__ import annotations

import json
from typing import Any, Iterator

import jax
import numpy as np
from ml_collections import ConfigDict

from easylemur import sharding
from easylemur.data import batch as batch_layout
from easylemur.data.pipeline import make_pipeline
from easylemur.data.records import DataError


class DataShards:
    """This process's shards of the global batch. `__next__` gives the global batch as jax
    arrays; the state is every shard's, gathered so that process 0 saves all of them.

    `data_cfg` is the run's `data` section (seq_len, shards, sources, ...); `global_batch_size`
    and `seed` are train.batch_size and the run's seed."""

    def __init__(self, data_cfg: ConfigDict, tokenizer: Any, mesh: Any, *, global_batch_size: int, seed: int):
        P, p = jax.process_count(), jax.process_index()
        S = data_cfg.shards or P
        if S % P:
            raise DataError(f"data.shards={S} must be a multiple of the process count {P}")
        self.mesh, self.num_shards = mesh, S
        self.mine = list(range(p * S // P, (p + 1) * S // P))
        check_rows_per_process(mesh, global_batch_size, data_cfg.seq_len)
        self.shards = []  # one data iterator per shard of this process's
        # the sources' readers, opened once for all of them: a JSONL file indexed (decompressed)
        # once, a token store's offsets held once, however many shards this process feeds
        readers: dict[str, Any] = {}
        try:
            for s in self.mine:
                self.shards.append(make_pipeline(data_cfg, tokenizer, global_batch_size=global_batch_size,
                                                 seed=seed, process_index=s, process_count=S, open_readers=readers))
        except BaseException:
            self.close()  # the shards already built: nothing of them may outlive this error
            raise
        self.source_names: list[str] = list(self.shards[0].source_names)

    def __next__(self) -> dict:
        parts = [next(it) for it in self.shards]
        local = {k: np.concatenate([q[k] for q in parts]) for k in parts[0]}
        return sharding.host_local_to_global(local, self.mesh)

    def local_token_counts(self) -> np.ndarray:
        """[sources] non-padding tokens this process's shards have given so far (the data
        iterators' own counters, which their saved state carries across a resume)."""
        return np.array([sum(it.token_counts()[n] for it in self.shards) for n in self.source_names], np.int64)

    def get_state(self) -> dict:
        # "streams" is the checkpoint format's key for the shards' states (docs/design.md,
        # "Checkpoint layout"): kept, so that saved runs resume
        mine = {str(s): it.get_state() for s, it in zip(self.mine, self.shards)}
        return {"shards": self.num_shards, "streams": allgather_json(mine)}

    def set_state(self, state: dict) -> None:
        if state.get("shards") != self.num_shards:
            raise DataError(
                f"the checkpoint's data state has {state.get('shards')} shards but data.shards resolves to "
                f"{self.num_shards}; resume with --config.data.shards={state.get('shards')}"
            )
        for s, it in zip(self.mine, self.shards):
            it.set_state(state["streams"][str(s)])

    def close(self) -> None:
        for it in self.shards:
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
        raise DataError(
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


class EvalData:
    """The eval batches of data.eval_sources: `batches()` gives exactly `batches` (eval.batches)
    global batches (unshuffled, one pass from the start) each time it is called. The sources
    are opened once (a JSONL file indexed, a token store's index read) and kept across evals.
    A process whose share of the data ends feeds rows that train nothing, so every process runs
    the same number of eval steps and the collectives stay in step across hosts."""

    def __init__(self, data_cfg: ConfigDict, tokenizer: Any, mesh: Any, *, global_batch_size: int, batches: int):
        self.cfg = ConfigDict(data_cfg.to_dict())
        self.cfg.prefetch = 0  # a few batches, once: threads reading ahead would tokenize rows never used
        self.tokenizer, self.mesh = tokenizer, mesh
        self.global_batch_size, self.num_batches = global_batch_size, batches
        self._readers: dict[str, Any] = {}

    def batches(self) -> Iterator[dict]:
        P = jax.process_count()
        with make_pipeline(
            self.cfg, self.tokenizer, global_batch_size=self.global_batch_size, seed=0,  # the seed only shuffles
            process_index=jax.process_index(), process_count=P,
            sources=self.cfg.eval_sources, shuffle=False, repeat=False, open_readers=self._readers,
        ) as it:
            empty = batch_layout.empty(self.global_batch_size // P, self.cfg.seq_len)
            for _ in range(self.num_batches):
                try:
                    local = next(it)
                except StopIteration:
                    local = empty
                yield sharding.host_local_to_global(local, self.mesh)
