"""Worker compute-time model of the simulated heterogeneous cluster.

Iteration ``j`` of worker ``w`` takes

    base_step_s * (batch / base_batch) / class_speeds[class(w)] * regime(w, j) * exp(noise_sigma * z)
        * (straggler_slowdown if u < p else 1)

seconds, with ``regime`` toggling between 1 and ``regime_shift_factor`` with probability ``regime_shift_prob`` per
iteration (a co-located job arriving or leaving). Every worker draws from its own random stream, a fixed number of
variates per iteration, so iteration ``j`` of worker ``w`` takes the same time under every synchronisation policy
(common random numbers: policies are compared on the same hardware realisation).

Non-stationary speeds [ours, issue #50]: with ``hardware.permute_speeds_at_steps`` = T (in units of
``base_step_s``), the workers' speed classes are permuted at simulated time ``T * base_step_s`` by a permutation
seeded with the hardware seed (worker ``w`` takes the class worker ``perm[w]`` had; the class counts, so the cluster's
total speed, are unchanged). Speed is piecewise constant in time: an iteration that starts at ``t0`` needs
``d_old`` seconds at the old class and ``d_new`` at the new one (the same noise, regime and straggler draws); it
takes ``d_old`` if it ends by the switch, ``d_new`` if it starts at or after it, and otherwise runs the fraction
``(T - t0) / d_old`` of its work before the switch and the rest at the new speed.
"""

from __future__ import annotations

import dataclasses
import math

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


def permuted_classes(classes: np.ndarray, seed: int) -> np.ndarray:
    """The speed classes after the non-stationary switch: ``classes[perm]`` for a permutation seeded by ``seed``."""
    perm = np.random.default_rng([seed, 0x9E47]).permutation(classes.size)
    return classes[perm]


class ComputeModel:
    """Draws iteration times; deterministic in ``(seed, worker, iteration)`` (and the start time of the iteration when
    ``hw.permute_speeds_at_steps`` is set).

    ``classes`` and ``nominal`` are the speed classes at the start (what is known before training);
    ``classes_after`` / ``nominal_after`` hold after the switch at ``switch_s`` seconds (``inf``: never)."""

    def __init__(self, hw: PSClusterHardware, seed: int, batch: int | None = None):
        self.hw = hw
        self.classes = assign_classes(hw, seed)
        self.nominal = nominal_step_times(hw, self.classes, batch)
        self.switch_s = math.inf
        self.classes_after, self.nominal_after = self.classes, self.nominal
        if hw.permute_speeds_at_steps is not None:
            self.switch_s = hw.permute_speeds_at_steps * hw.base_step_s
            self.classes_after = permuted_classes(self.classes, seed)
            self.nominal_after = nominal_step_times(hw, self.classes_after, batch)
        self._rngs = [np.random.default_rng([seed, w, 0x57E9]) for w in range(hw.num_workers)]
        self.slow_regime = np.zeros(hw.num_workers, dtype=bool)
        self.iterations = np.zeros(hw.num_workers, dtype=np.int64)

    def classes_at(self, t: float) -> np.ndarray:
        """Each worker's speed class at simulated time ``t``."""
        return self.classes_after if t >= self.switch_s else self.classes

    def step_time(self, w: int, start: float = 0.0) -> float:
        """Seconds of worker ``w``'s next iteration, which starts at simulated time ``start``."""
        hw = self.hw
        rng = self._rngs[w]
        u_shift, u_strag = rng.random(2)
        z = rng.standard_normal()
        if u_shift < hw.regime_shift_prob:
            self.slow_regime[w] = not self.slow_regime[w]
        self.iterations[w] += 1
        t = self._scaled(self.nominal[w] if start < self.switch_s else self.nominal_after[w], z, u_strag, w)
        if start < self.switch_s < start + t:  # the switch falls inside this iteration: the rest at the new speed
            t_new = self._scaled(self.nominal_after[w], z, u_strag, w)
            before = self.switch_s - start
            t = before + (1.0 - before / t) * t_new
        return float(t)

    def _scaled(self, nominal: float, z: float, u_strag: float, w: int) -> float:
        hw = self.hw
        t = nominal * np.exp(hw.noise_sigma * z)
        if self.slow_regime[w]:
            t *= hw.regime_shift_factor
        if u_strag < hw.straggler_prob:
            t *= hw.straggler_slowdown
        return t


def with_speed_ratio(hw: PSClusterHardware, ratio: float) -> PSClusterHardware:
    """The same cluster with its classes respread geometrically so that fastest/slowest speed = ``ratio``."""
    c = len(hw.class_speeds)
    speeds = [float(ratio ** (-i / max(c - 1, 1))) for i in range(c)]
    return dataclasses.replace(hw, class_speeds=speeds, name=f"{hw.name}_x{ratio:g}")


def with_workers(hw: PSClusterHardware, n: int) -> PSClusterHardware:
    """The same cluster with ``n`` workers (re-validated: fails if ``n`` is below the prior community count)."""
    return dataclasses.replace(hw, num_workers=int(n))
