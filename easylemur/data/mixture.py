"""Rows of several sources, interleaved by weight (docs/design.md, "Mixture").

Smooth weighted round-robin rather than sampling: the shares are exact at every step (not
just in expectation), the order is deterministic, and the state is a few floats.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import grain

from easylemur.data.records import DataError


class MixIterDataset(grain.IterDataset):
    """Smooth weighted round-robin over the parents: after n rows, source i has given
    round(n * w_i / sum(w)) rows (within one). An exhausted source (repeat=False) leaves the
    mix and the others go on; grain's own mix stops at the first exhausted source."""

    def __init__(self, parents: Sequence[grain.IterDataset], weights: Sequence[float]):
        super().__init__(list(parents))
        self.weights = [float(w) for w in weights]

    def __iter__(self) -> MixIterator:
        return MixIterator([p.__iter__() for p in self._parents], self.weights)


class MixIterator(grain.DatasetIterator):
    """The round-robin of a `MixIterDataset`. Its state holds each source's credit and whether
    it is still in the mix, so that a restored run continues the exact interleaving instead of
    restarting it (which would skew the shares around every checkpoint)."""

    def __init__(self, parents: Sequence[grain.DatasetIterator], weights: Sequence[float]):
        super().__init__(list(parents))
        self.weights = list(weights)
        self.credit = [0.0] * len(parents)
        self.active = [True] * len(parents)
        self._live = None

    def __next__(self) -> Any:
        weights, active, credit = self.weights, self.active, self.credit
        while True:
            if self._live is None:  # the sources still in the mix, and their total weight
                live = [i for i, a in enumerate(active) if a]
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
                return next(self._parents[best])
            except StopIteration:
                active[best] = False
                self._live = None

    def get_state(self) -> dict[str, Any]:
        return {"parents": [p.get_state() for p in self._parents], "credit": list(self.credit),
                "active": list(self.active)}

    def set_state(self, state: Mapping[str, Any]) -> None:
        if len(state["parents"]) != len(self._parents):
            raise DataError(f"iterator state has {len(state['parents'])} sources, the pipeline has {len(self._parents)}")
        for p, s in zip(self._parents, state["parents"]):
            p.set_state(s)
        self.credit = [float(c) for c in state["credit"]]
        self.active = [bool(a) for a in state["active"]]
        self._live = None
