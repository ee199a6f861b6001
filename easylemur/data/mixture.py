"""Rows of several sources, interleaved by weight (docs/design.md, "Mixture").

Smooth weighted round-robin rather than sampling: the shares are exact at every step (not
just in expectation), the order is deterministic, and the state is a few floats.

Stages (data.stages): the weights may change at given steps. The mixer counts the rows it has
given; a stage starting at step s starts at row s * rows_per_step (rows_per_step: this data
shard's rows of a batch), and there the round-robin starts afresh (credits reset to 0), so
each stage's shares are exact on their own: m rows into a stage, source i has given
round(m * w_i / sum(w)) of them within one, whatever the stages before it did.
"""

from __future__ import annotations

import bisect
from typing import Any, Mapping, Sequence

import grain

from easylemur.data.records import DataError

# (start row, weights): the schedule of a mixture, the first entry at row 0
Schedule = list[tuple[int, list[float]]]


def stage_weights(stages: Any, names: Sequence[str]) -> list[tuple[int, list[float]]]:
    """data.stages (a list of {start_step, weights: {source name: weight}}) as (start_step,
    [weight of each of `names`]). config.validate checks the same with ConfigErrors; this is
    for a data section built without it."""
    out = []
    for i, stage in enumerate(stages or ()):
        w = stage["weights"]
        unknown = sorted(set(w.keys()) - set(names))
        missing = [n for n in names if n not in w]
        if unknown or missing:
            what = f"names no source '{unknown[0]}'" if unknown else f"has no weight for source '{missing[0]}'"
            raise DataError(f"data.stages[{i}] {what}; the sources are {', '.join(names)}")
        out.append((int(stage["start_step"]), [float(w[n]) for n in names]))
    return out


def make_schedule(weights: Sequence[float], stages: Sequence[tuple[int, Sequence[float]]], rows_per_step: int) -> Schedule:
    """The rows at which each stage starts, and its weights: the sources' own weights from
    row 0 until the first stage (which replaces them when it starts at step 0)."""
    schedule: Schedule = [(0, [float(w) for w in weights])]
    last = -1
    for i, (step, ws) in enumerate(stages):
        if step <= last or step < 0:
            raise DataError(f"data.stages[{i}].start_step={step} must be 0 or more and after the stage before it")
        if len(ws) != len(weights):
            raise DataError(f"data.stages[{i}] has {len(ws)} weights for {len(weights)} sources")
        if not any(w > 0 for w in ws):
            raise DataError(f"data.stages[{i}] gives no source a weight above 0")
        last = step
        entry = (step * rows_per_step, [float(w) for w in ws])
        if entry[0] == 0:
            schedule[0] = entry
        else:
            schedule.append(entry)
    return schedule


class MixIterDataset(grain.IterDataset):
    """Smooth weighted round-robin over the parents: after n rows, source i has given
    round(n * w_i / sum(w)) rows (within one). An exhausted source (repeat=False) leaves the
    mix and the others go on; grain's own mix stops at the first exhausted source.

    `stages`: (start_step, weights) pairs, the weights from that step on (see the module's
    docstring); a weight of 0 pauses a source. `rows_per_step`: the rows of this shard a step
    consumes (its part of the global batch)."""

    def __init__(self, parents: Sequence[grain.IterDataset], weights: Sequence[float],
                 stages: Sequence[tuple[int, Sequence[float]]] = (), rows_per_step: int = 1):
        super().__init__(list(parents))
        self.weights = [float(w) for w in weights]
        self.schedule = make_schedule(self.weights, stages, rows_per_step)

    def __iter__(self) -> MixIterator:
        return MixIterator([p.__iter__() for p in self._parents], self.schedule)


class MixIterator(grain.DatasetIterator):
    """The round-robin of a `MixIterDataset`. Its state holds each source's credit, whether it
    is still in the mix, the rows given so far (which place a resumed run in its stage) and the
    weights the credits were earned with, so that a restored run continues the exact
    interleaving instead of restarting it (which would skew the shares around every
    checkpoint). A state whose weights differ from the ones in effect at its row (the config's
    weights or stages changed) starts a fresh round-robin there, as a stage does."""

    def __init__(self, parents: Sequence[grain.DatasetIterator], schedule: Sequence[tuple[int, Sequence[float]]]):
        super().__init__(list(parents))
        self.schedule = [(int(r), list(w)) for r, w in schedule]
        self._starts = [r for r, _ in self.schedule]
        self.active = [True] * len(parents)
        self.rows: int | None = 0  # None: restored from a state saved before stages existed
        self._enter(0)

    def _enter(self, stage: int) -> None:
        """Starts stage `stage`: its weights, credits from 0."""
        self.stage = stage
        self.weights = self.schedule[stage][1]
        self.credit = [0.0] * len(self._parents)
        self._next_start = self._starts[stage + 1] if stage + 1 < len(self._starts) else None
        self._live = None

    def _stage_at(self, rows: int) -> int:
        return bisect.bisect_right(self._starts, rows) - 1

    def __next__(self) -> Any:
        weights, active, credit = self.weights, self.active, self.credit
        while True:
            if self._live is None:  # the sources in the mix (not exhausted, not paused), their total weight
                live = [i for i, a in enumerate(active) if a and weights[i] > 0]
                self._live = (live, sum(weights[i] for i in live))
            live, total = self._live
            if not live:
                raise StopIteration
            best = live[0]
            for i in live:
                credit[i] += weights[i]
                if credit[i] > credit[best]:
                    best = i
            credit[best] -= total
            try:
                row = next(self._parents[best])
            except StopIteration:
                active[best] = False
                self._live = None
                continue
            if self.rows is not None:
                self.rows += 1
                # eagerly: a state saved after this row is already the next stage's
                if self.rows == self._next_start:
                    self._enter(self.stage + 1)
            return row

    def get_state(self) -> dict[str, Any]:
        return {"parents": [p.get_state() for p in self._parents], "credit": list(self.credit),
                "active": list(self.active), "rows": self.rows, "weights": list(self.weights)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        if len(state["parents"]) != len(self._parents):
            raise DataError(f"iterator state has {len(state['parents'])} sources, the pipeline has {len(self._parents)}")
        rows = state.get("rows")  # absent in states saved before data.stages
        if rows is None and len(self.schedule) > 1:
            raise DataError(
                "the checkpoint's data state was saved by an easylemur without data.stages and does not record how "
                "many rows the mixture has given, so it cannot place the run in a stage; resume without data.stages, "
                "or start a new workdir with init.from=<this checkpoint>"
            )
        for p, s in zip(self._parents, state["parents"]):
            p.set_state(s)
        self.rows = None if rows is None else int(rows)
        self._enter(0 if rows is None else self._stage_at(self.rows))
        self.active = [bool(a) for a in state["active"]]
        saved_weights = state.get("weights")
        if saved_weights is None or [float(w) for w in saved_weights] == self.weights:
            self.credit = [float(c) for c in state["credit"]]
            if len(self.credit) != len(self._parents):
                raise DataError(f"iterator state has {len(self.credit)} credits for {len(self._parents)} sources")
