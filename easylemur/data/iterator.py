"""The data iterator the train loop holds (docs/design.md, "Bad records").

It sits in the main process, after the prefetch thread: it strips the bad-record notes the
rows carry, counts them and the tokens of each source, replaces padding ids with the pad id,
and makes global jax.Arrays when given a mesh. Its state (JSON-able) is grain's state of the
chain at the last batch consumed plus those counters, so a resumed run reports the same
totals. The state has one format whatever `data.prefetch` is; a state written by the worker
processes of easylemur before that (`mp_prefetch`) is refused with a one-line DataError.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any, Callable, Mapping

import grain
import numpy as np

from easylemur.data.records import SHOW_FIRST_BAD, DataError


def _close_held(held: list) -> None:
    while held:
        held.pop().close()


def multiprocess_workers(grain_state: Any) -> int:
    """The number of worker processes a grain state was saved by, 0 for any other state.

    Earlier easylemur ran the chain under grain's `mp_prefetch` for data.prefetch > 0; that
    state is an interleave of one chain per worker (each on a slice of every source), with
    these keys at the top. The chain's own states (pack, mix) never have them."""
    if isinstance(grain_state, Mapping) and "iterators_in_use_states" in grain_state and "exhausted" in grain_state:
        return len(grain_state["exhausted"]) or 1
    return 0


class DataIterator:
    """Batches for this process; `get_state`/`set_state` for checkpoints; bad-record counts.

    The counting lives here, not in the grain chain, because only here is every batch seen
    exactly once, when it is consumed: counters kept inside the chain would run ahead of the
    batches consumed by as much as the prefetch thread has built."""

    def __init__(self, ds: grain.IterDataset, source_names: list[str], mesh: Any, pad_id: int,
                 readers: list | None = None):
        self._ds = ds
        self._readers = list(readers or [])  # the sources' readers: a token store counts its bytes read
        # The grain iterator lives in a list the finalizer empties: closed and released when this
        # object is collected or, if it never is, at interpreter exit while the modules grain's
        # cleanup needs still exist (grain's own __del__ would run after they are gone and print
        # errors).
        self._held = [ds.__iter__()]
        self._closer = weakref.finalize(self, _close_held, self._held)
        self.source_names = source_names
        self.mesh = mesh
        self.pad_id = pad_id
        self._bad = {n: {} for n in source_names}
        self._tokens = {n: 0 for n in source_names}
        self._shown = {n: 0 for n in source_names}
        self._finished = False

    def __iter__(self) -> DataIterator:
        return self

    def __next__(self) -> dict[str, Any]:
        if self._it is None:
            raise RuntimeError("the data iterator was closed")  # a bug in the caller, not bad data
        try:
            batch = next(self._it)
        except StopIteration:
            if not self._finished:
                self._finished = True
                self.print_report()
            raise
        notes = batch.pop("_bad")
        for src_index, kind, where, detail in notes:
            self._count_bad(self.source_names[src_index], kind, where, detail)
        src = batch["source"]
        seg = batch["segment_ids"]
        counts = np.bincount(src[src >= 0], weights=(seg[src >= 0] > 0).sum(axis=1), minlength=len(self.source_names))
        for i, n in enumerate(self.source_names):
            self._tokens[n] += int(counts[i])
        batch["input_ids"] = np.where(seg > 0, batch["input_ids"], np.int32(self.pad_id)).astype(np.int32)
        if self.mesh is not None:
            from easylemur.sharding import host_local_to_global

            return host_local_to_global(batch, self.mesh)
        return batch

    def _count_bad(self, name: str, kind: str, where: str, detail: str) -> None:
        per = self._bad.setdefault(name, {})
        per[kind] = per.get(kind, 0) + 1
        if self._shown.get(name, 0) < SHOW_FIRST_BAD:
            self._shown[name] = self._shown.get(name, 0) + 1
            msg = f"easylemur.data: skipped bad record of source '{name}' at {where}: {kind}"
            print(msg + (f" ({detail})" if detail else ""), file=sys.stderr)
            if self._shown[name] == SHOW_FIRST_BAD:
                print(f"easylemur.data: further bad records of '{name}' are counted, not shown", file=sys.stderr)

    def bytes_read(self) -> int:
        """Bytes this process has fetched from its token-store sources so far (read ahead by
        the prefetch and read threads included); 0 for other sources, which do not count."""
        return sum(int(getattr(r, "bytes_read", 0)) for r in self._readers)

    def bad_records(self) -> dict[str, dict[str, int]]:
        """{source name: {bad-record kind: count}} over the batches consumed so far."""
        return {n: dict(v) for n, v in self._bad.items()}

    def token_counts(self) -> dict[str, int]:
        """{source name: tokens}: the non-padding tokens (segment_ids > 0) of each source over
        the batches this iterator has yielded so far. It is the run's one per-source token
        counter (the train loop reads it rather than counting on device), and it is part of
        `get_state()`, so a resumed run continues the totals instead of restarting them."""
        return dict(self._tokens)

    def report(self) -> str:
        """One line with the bad-record totals per source and kind, for the end of a run."""
        parts = []
        for n, kinds in self._bad.items():
            total = sum(kinds.values())
            if total:
                parts.append(f"'{n}': {total} (" + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) + ")")
        return "easylemur.data: bad records skipped: " + ("; ".join(parts) if parts else "none")

    def print_report(self) -> None:
        """Writes `report()` to stderr (done once by itself when finite data runs out)."""
        print(self.report(), file=sys.stderr)

    def get_state(self) -> dict[str, Any]:
        """The JSON-able state a checkpoint stores: grain's chain plus every counter."""
        if self._it is None:
            raise RuntimeError("the data iterator was closed; its state was not kept")
        return {"version": 1, "grain": self._it.get_state(), "bad": self.bad_records(),
                "tokens": self.token_counts(), "shown": dict(self._shown), "sources": list(self.source_names)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        """Resumes from `get_state()`; refuses a state saved for other sources, or by the
        worker processes of an older easylemur, with a DataError (never a KeyError)."""
        if not isinstance(state, Mapping) or state.get("version") != 1:
            found = state.get("version") if isinstance(state, Mapping) else type(state).__name__
            raise DataError(f"unknown data iterator state version {found!r} (expected 1)")
        if list(state["sources"]) != self.source_names:
            raise DataError(f"iterator state is for sources {state['sources']}, the pipeline reads {self.source_names}")
        grain_state = state["grain"]
        workers = multiprocess_workers(grain_state)
        if workers:
            raise DataError(
                f"the checkpoint's data position was saved by {workers} data worker processes of an older "
                f"easylemur (data.prefetch={workers}), each reading its own slice of the data; it cannot carry "
                "over to this version, whose batches do not depend on data.prefetch: resume with the easylemur "
                "that wrote it, or start a new workdir with init.from=<this checkpoint> (weights kept, "
                "optimizer and data order new)"
            )
        try:
            self._it.set_state(grain_state)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            # a state of another chain: a changed source kind (file <-> hub stream), a hand-edited
            # checkpoint; grain itself would name only the missing key
            raise DataError(
                f"the checkpoint's data state does not fit the data pipeline of sources {self.source_names} "
                f"({type(e).__name__}: {e}); resume with the data.sources it was saved with"
            ) from e
        self._bad = {n: dict(state["bad"].get(n, {})) for n in self.source_names}
        self._tokens = {n: int(state["tokens"].get(n, 0)) for n in self.source_names}
        self._shown = {n: int(state["shown"].get(n, 0)) for n in self.source_names}
        self._finished = False

    @property
    def _it(self) -> Any:
        return self._held[0] if self._held else None

    def close(self) -> None:
        """Stops the prefetch and read threads now and waits for the prefetch thread to end
        (idempotent); the iterator cannot be used after it."""
        self._closer()
        for r in self._readers:  # after the threads: a token store's open files
            if isinstance(getattr(r, "close", None), Callable):
                r.close()

    def __enter__(self) -> DataIterator:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
