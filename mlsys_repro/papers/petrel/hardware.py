"""Worker compute-time model of the simulated heterogeneous cluster.

Iteration ``j`` of worker ``w`` takes

    base_step_s * (batch / base_batch) / class_speeds[class(w)] * regime(w, j) * exp(noise_sigma * z)
        * (straggler_slowdown if u < p else 1)

seconds, with ``regime`` toggling between 1 and ``regime_shift_factor`` with probability ``regime_shift_prob`` per
iteration (a co-located job arriving or leaving). Every worker draws from its own random stream, a fixed number of
variates per iteration, so iteration ``j`` of worker ``w`` takes the same time under every synchronisation policy
(common random numbers: policies are compared on the same hardware realisation).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mlsys_repro.papers.petrel.schemas import PSClusterHardware


def assign_classes(hw: PSClusterHardware, seed: int) -> np.ndarray:
    """Speed class of each worker: shares per ``class_fractions`` (equal if empty), in a seeded random order."""
    c = len(hw.class_speeds)
    frac = np.asarray(hw.class_fractions or [1.0 / c] * c, dtype=np.float64)
    counts = np.floor(frac * hw.num_workers).astype(int)
    rest = hw.num_workers - counts.sum()
    order = np.argsort(-(frac * hw.num_workers - counts), kind="stable")
    counts[order[:rest]] += 1
    classes = np.repeat(np.arange(c), counts)
    return np.random.default_rng([seed, 0xC1A55]).permutation(classes)


def nominal_step_times(hw: PSClusterHardware, classes: np.ndarray, batch: int | None = None) -> np.ndarray:
    """What is known before training (the GPU type of each worker): its nominal seconds per iteration at
    ``batch`` samples (default ``hw.base_batch``)."""
    scale = (batch or hw.base_batch) / hw.base_batch
    return hw.base_step_s * scale / np.asarray(hw.class_speeds, dtype=np.float64)[classes]


def prior_groups(hw: PSClusterHardware, classes: np.ndarray) -> list[list[int]]:
    """Communities from prior knowledge: workers sorted by nominal speed, cut into ``hw.communities()`` groups
    at class boundaries when the counts match, else into contiguous near-equal groups."""
    from mlsys_repro.papers.petrel.communities import kmeans_1d

    t = np.log(nominal_step_times(hw, classes))
    return kmeans_1d(t, hw.communities())


class ComputeModel:
    """Draws iteration times; deterministic in ``(seed, worker, iteration)``."""

    def __init__(self, hw: PSClusterHardware, seed: int, batch: int | None = None):
        self.hw = hw
        self.classes = assign_classes(hw, seed)
        self.nominal = nominal_step_times(hw, self.classes, batch)
        self._rngs = [np.random.default_rng([seed, w, 0x57E9]) for w in range(hw.num_workers)]
        self.slow_regime = np.zeros(hw.num_workers, dtype=bool)
        self.iterations = np.zeros(hw.num_workers, dtype=np.int64)

    def step_time(self, w: int) -> float:
        hw = self.hw
        rng = self._rngs[w]
        u_shift, u_strag = rng.random(2)
        z = rng.standard_normal()
        if u_shift < hw.regime_shift_prob:
            self.slow_regime[w] = not self.slow_regime[w]
        self.iterations[w] += 1
        t = self.nominal[w] * np.exp(hw.noise_sigma * z)
        if self.slow_regime[w]:
            t *= hw.regime_shift_factor
        if u_strag < hw.straggler_prob:
            t *= hw.straggler_slowdown
        return float(t)


def with_speed_ratio(hw: PSClusterHardware, ratio: float) -> PSClusterHardware:
    """The same cluster with its classes respread geometrically so that fastest/slowest speed = ``ratio``."""
    c = len(hw.class_speeds)
    speeds = [float(ratio ** (-i / max(c - 1, 1))) for i in range(c)]
    return dataclasses.replace(hw, class_speeds=speeds, name=f"{hw.name}_x{ratio:g}")


def with_workers(hw: PSClusterHardware, n: int) -> PSClusterHardware:
    """The same cluster with ``n`` workers (re-validated: fails if ``n`` is below the prior community count)."""
    return dataclasses.replace(hw, num_workers=int(n))
