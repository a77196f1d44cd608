"""The synchronisation mechanisms as (grouper, gate) pairs for :class:`mlsys_repro.papers.petrel.sim.PSSim`.

* ``bsp``: one group of all workers, gradients aggregated at the PS: w <- w - grad_lr * sum_i g_i(w), then every
  worker pulls. Iteration time = slowest worker + N pushes and N pulls through the PS NIC.
* ``asp``: singleton groups; the PS applies each gradient on arrival and the worker pulls the latest parameters.
* ``ssp`` (Ho et al., NIPS'13): ASP plus clocks; a worker whose clock is more than ``s`` ahead of the slowest
  worker's is held at the PS until the slowest catches up (s = 0 is BSP timing, s = inf is ASP).
* ``dssp`` (Zhao et al., ICDCS'19): SSP whose bound moves in [s_L, s_U]: above s_L the server's synchronisation
  controller predicts, from the last push times and intervals, how many extra iterations r* in [0, s_U - gap] the
  pushing worker can run so that its next push lands closest to the slowest worker's next push, and lets it run
  r* more iterations (r* = 0: wait).
* ``casp`` (Petrel): communities of similar workers, synchronous inside (aggregated at the community leader, one
  push and one pull per community round), asynchronous across communities. Communities come from a grouper:
  ``prior`` (known speed classes, fixed), ``kmeans`` (1-D k-means on measured EWMA iteration times with a fixed k,
  re-formed at each decision), ``random`` (fixed random partition), ``a3c`` (k chosen online by the A3C agent,
  :mod:`mlsys_repro.papers.petrel.a3c`).
* ``hier_bsp`` [ours, issue #50]: hierarchical BSP, the non-community aggregation baseline. One barrier over all
  workers, as BSP, but the gradients are aggregated in k fixed groups that ignore speeds (``index``: contiguous
  blocks of worker indices, sizes as ``np.array_split``; ``random``: a seeded random partition), each at its first
  (lowest-index) worker, which pushes one message per round; the PS applies the sum of all N gradients once every
  group's aggregate has arrived and sends the new parameters to the k group leaders, which forward them to their
  groups. The PS tier carries k pushes and k pulls per round instead of BSP's N (the relief CASP's leaders bring),
  with none of CASP's grouping by speed or asynchrony across groups; the update is BSP's, bit for bit.
"""

from __future__ import annotations

import numpy as np

from mlsys_repro.papers.petrel.communities import kmeans_1d, random_groups
from mlsys_repro.papers.petrel.hardware import prior_groups
from mlsys_repro.papers.petrel.schemas import SyncPolicy
from mlsys_repro.papers.petrel.sim import Gate, Grouper, PSSim


class AllInOne(Grouper):
    """BSP: one barrier group, aggregated at the PS."""

    def initial(self, sim: PSSim) -> list[list[int]]:
        return [list(range(sim.n))]


class Singletons(Grouper):
    """ASP/SSP/DSSP: every worker on its own."""

    def initial(self, sim: PSSim) -> list[list[int]]:
        return [[w] for w in range(sim.n)]


class HierarchicalGroups(Grouper):
    """hier_bsp: one barrier group of all workers, aggregated in ``k`` fixed speed-blind units at their first worker."""

    via_leader = True

    def __init__(self, k: int, grouping: str, seed: int):
        self.k, self.grouping, self.seed = int(k), grouping, seed

    def initial(self, sim: PSSim) -> list[list[int]]:
        return [list(range(sim.n))]

    def units(self, sim: PSSim, members: list[int]) -> list[list[int]]:
        k = min(self.k, len(members))
        if self.grouping == "random":
            return [[members[i] for i in g] for g in random_groups(len(members), k,
                                                                    np.random.default_rng([self.seed, 0x41E7]))]
        return [[int(m) for m in b] for b in np.array_split(np.asarray(members), k)]

    def leader(self, sim: PSSim, unit: list[int]) -> int:
        return min(unit)


class SSPGate(Gate):
    """Hold a worker whose clock is more than ``s`` ahead of the slowest worker's."""

    def __init__(self, s: int):
        self.s = int(s)

    def may_proceed(self, sim: PSSim, w: int) -> bool:
        return int(sim.clock[w] - sim.clock.min()) <= self.s


class DSSPGate(Gate):
    """Dynamic staleness bound in [low, high] chosen per push from predicted push times."""

    def __init__(self, low: int, high: int):
        self.low, self.high = int(low), int(high)
        self.last_push: dict[int, float] = {}
        self.interval: dict[int, float] = {}
        self.granted: dict[int, int] = {}
        self.controller_calls = 0

    def on_apply(self, sim: PSSim, w: int) -> None:
        t = sim.now
        if w in self.last_push:
            self.interval[w] = t - self.last_push[w]
        self.last_push[w] = t

    def may_proceed(self, sim: PSSim, w: int) -> bool:
        gap = int(sim.clock[w] - sim.clock.min())
        if gap <= self.low:
            self.granted[w] = 0
            return True
        if gap > self.high:
            return False
        if self.granted.get(w, 0) > 0:
            self.granted[w] -= 1
            return True
        r = self.extra_iterations(sim, w, gap)
        if r > 0:
            self.granted[w] = r - 1
            return True
        return False

    def extra_iterations(self, sim: PSSim, w: int, gap: int) -> int:
        """r* = argmin_r |now + r * I_w - (t_slow + I_slow)| over r in [0, high - gap]."""
        self.controller_calls += 1
        slow = int(np.argmin(sim.clock))
        if w not in self.interval or slow not in self.interval:
            return 0
        t_slow_next = self.last_push[slow] + self.interval[slow]
        r = np.arange(0, self.high - gap + 1)
        return int(r[np.argmin(np.abs(sim.now + r * self.interval[w] - t_slow_next))])


class PriorCommunities(Grouper):
    """CASP with the communities known a priori (speed classes), never re-formed."""

    via_leader = True

    def initial(self, sim: PSSim) -> list[list[int]]:
        return prior_groups(sim.hw, sim.compute.classes)


class KMeansCommunities(Grouper):
    """CASP with a fixed number of communities, re-formed from measured speeds at each decision."""

    via_leader = True

    def __init__(self, k: int, regroup: bool = True):
        self.k, self.decides = int(k), bool(regroup)

    def initial(self, sim: PSSim) -> list[list[int]]:
        return kmeans_1d(np.log(sim.ewma), self.k)

    def decide(self, sim: PSSim) -> list[list[int]]:
        return kmeans_1d(np.log(sim.ewma), self.k)


class RandomCommunities(Grouper):
    """CASP ablation: a fixed random partition into k communities (similarity ignored)."""

    via_leader = True

    def __init__(self, k: int, seed: int):
        self.k, self.seed = int(k), seed

    def initial(self, sim: PSSim) -> list[list[int]]:
        return random_groups(sim.n, self.k, np.random.default_rng([self.seed, 0x7A9D]))


def make_protocol(policy: SyncPolicy, sim_n: int, prior_k: int, seed: int, agent=None) -> tuple[Grouper, Gate]:
    """(grouper, gate) for ``policy``; ``agent`` is the trained A3C policy for ``grouping='a3c'``."""
    kind = policy.kind
    if kind == "bsp":
        return AllInOne(), Gate()
    if kind == "asp":
        return Singletons(), Gate()
    if kind == "ssp":
        return Singletons(), SSPGate(policy.staleness)
    if kind == "dssp":
        return Singletons(), DSSPGate(policy.staleness_low, policy.staleness_high)
    k = policy.num_communities or prior_k
    if k > sim_n:
        raise ValueError(f"policy {policy.name}: {k} communities for {sim_n} workers (more communities than workers)")
    if kind == "hier_bsp":
        return HierarchicalGroups(k, policy.grouping, seed), Gate()
    if policy.grouping == "prior":
        return PriorCommunities(), Gate()
    if policy.grouping == "kmeans":
        return KMeansCommunities(k, policy.regroup), Gate()
    if policy.grouping == "random":
        return RandomCommunities(k, seed), Gate()
    if agent is None:
        raise ValueError(f"policy {policy.name}: grouping 'a3c' needs a trained agent")
    from mlsys_repro.papers.petrel.a3c import A3CCommunities

    return A3CCommunities(agent, greedy=True), Gate()
