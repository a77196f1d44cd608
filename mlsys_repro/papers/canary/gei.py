"""The Gradient Exchange Index (GEI): who has merged and who has applied which piece of which iteration.

Canary exchanges gradients piece by piece without central control, so every server needs to know, online, which
contributions a partial aggregate already holds and which aggregated pieces it has applied. The GEI is keyed by
``(iteration, piece)`` and records, as bit sets over sources/workers (Python ints):

* ``merged``: at each holder, the sources whose contribution its partial sum of the piece includes. Merging a
  partial that overlaps what the holder already has raises :class:`GEIError` (a contribution counted twice);
  the piece is **complete** when the owner's set holds all ``N`` sources.
* ``applied``: the workers that applied the aggregated piece; applying it twice raises.
* counters of transfers in the ``sent`` / ``received`` states and of ``broadcast`` sends, for reporting.

``iteration_done(t, w)`` tells a worker whether it has applied every piece of iteration ``t``, which is what the
bounded-staleness rule checks before it starts a new iteration. Entries of iterations every worker has fully
applied are retired (kept as counts only) so memory stays bounded over long runs.
"""

from __future__ import annotations

from collections import Counter


class GEIError(RuntimeError):
    """A piece contribution was merged twice, or an aggregated piece applied twice, or out of place."""


class GradientExchangeIndex:
    def __init__(self, num_pieces: int, num_workers: int):
        if num_pieces < 1 or num_workers < 1:
            raise ValueError("need at least one piece and one worker")
        self.num_pieces = num_pieces
        self.num_workers = num_workers
        self.full = (1 << num_workers) - 1
        self._merged: dict[tuple[int, int], dict[int, int]] = {}
        self._complete: set[tuple[int, int]] = set()
        self._applied: dict[tuple[int, int], int] = {}
        self._applied_count: dict[tuple[int, int], int] = {}  # (iteration, worker) -> pieces applied
        self.state_counts: Counter[str] = Counter()
        self.retired = 0
        self._low = 0  # every iteration below this is retired

    # ------------------------------------------------------------------ contributions
    def contribute(self, t: int, q: int, holder: int, sources: int) -> int:
        """Merge the bit set ``sources`` into ``holder``'s partial of piece ``(t, q)``; returns the new set."""
        self._check(t, q)
        if (t, q) in self._complete:
            raise GEIError(f"piece (t={t}, q={q}) is already complete; late contribution {sources:#x}")
        per = self._merged.setdefault((t, q), {})
        have = per.get(holder, 0)
        if have & sources:
            raise GEIError(f"piece (t={t}, q={q}) at server {holder}: sources {have & sources:#x} merged twice")
        per[holder] = have | sources
        self.state_counts["merged"] += 1
        return have | sources

    def take(self, t: int, q: int, holder: int) -> int:
        """Remove and return ``holder``'s partial set (it is being sent on to the next holder)."""
        per = self._merged.get((t, q), {})
        if holder not in per:
            raise GEIError(f"server {holder} holds no partial of piece (t={t}, q={q})")
        self.state_counts["sent"] += 1
        return per.pop(holder)

    def received(self) -> None:
        self.state_counts["received"] += 1

    def finish(self, t: int, q: int, owner: int) -> None:
        """The owner's partial is the full aggregate: check it holds every source exactly once."""
        got = self._merged.get((t, q), {}).get(owner, 0)
        if got != self.full:
            missing = self.full & ~got
            raise GEIError(f"piece (t={t}, q={q}) finished at {owner} without sources {missing:#x}")
        del self._merged[(t, q)]
        self._complete.add((t, q))

    def is_complete(self, t: int, q: int) -> bool:
        return (t, q) in self._complete or t < self._low

    # ------------------------------------------------------------------ broadcast / apply
    def broadcast(self) -> None:
        self.state_counts["broadcast"] += 1

    def apply(self, t: int, q: int, worker: int) -> None:
        """Worker applies the aggregated piece ``(t, q)``; exactly once per worker, only after completion."""
        if not self.is_complete(t, q):
            raise GEIError(f"worker {worker} applies piece (t={t}, q={q}) before it is complete")
        bit = 1 << worker
        have = self._applied.get((t, q), 0)
        if have & bit:
            raise GEIError(f"worker {worker} applied piece (t={t}, q={q}) twice")
        self._applied[(t, q)] = have | bit
        self.state_counts["applied"] += 1
        key = (t, worker)
        self._applied_count[key] = self._applied_count.get(key, 0) + 1

    def iteration_done(self, t: int, worker: int) -> bool:
        """Has ``worker`` applied every piece of iteration ``t``? (True for t < 0.)"""
        return t < self._low or self._applied_count.get((t, worker), 0) == self.num_pieces

    def retire(self, t: int) -> bool:
        """Drop iteration ``t`` if every worker applied all its pieces; returns whether it was retired."""
        if t != self._low or not all(self.iteration_done(t, w) for w in range(self.num_workers)):
            return False
        for q in range(self.num_pieces):
            if self._applied.pop((t, q), 0) != self.full:
                raise GEIError(f"piece (t={t}, q={q}) not applied by every worker")
            self._complete.discard((t, q))
        for w in range(self.num_workers):
            self._applied_count.pop((t, w), None)
        self._low = t + 1
        self.retired += 1
        return True

    def retire_finished(self) -> list[int]:
        """Retire every leading iteration that all workers have fully applied; returns their indices."""
        out = []
        while self.retire(self._low):
            out.append(self._low - 1)
        return out

    @property
    def lowest_open(self) -> int:
        return self._low

    def open_iterations(self) -> int:
        return len({t for t, _ in self._applied} | {t for t, _ in self._merged})

    def _check(self, t: int, q: int) -> None:
        if not 0 <= q < self.num_pieces:
            raise GEIError(f"piece index {q} outside [0, {self.num_pieces})")
        if t < self._low:
            raise GEIError(f"iteration {t} is already retired")


__all__ = ["GEIError", "GradientExchangeIndex"]
