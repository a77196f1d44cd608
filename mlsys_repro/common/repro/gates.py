"""The validity-gate contract: one closed vocabulary of 0/1 gate metrics, one definition each, and how a claim reads
them.

A gate answers "did our implementation do what a comparison presumes?" -- that a learner trained to a plateau, that
it learned something (beats its own initialisation or prior on the data it was trained or selected on, never test
data), that a censored baseline reached its target. It never asks whether the method wins: a method that passes its
gates and then loses is a result (NOT_REPRODUCED), not invalidity.

An experiment writes one 0/1 row per (policy, seed[, condition]) with ``metric`` = the gate's name; a claim lists
the names it needs in ``requires``, and the claims schema rejects any name not in :data:`GATES`. The claims checker
judges gates per cell (:func:`cell_valid`): a (compared policy, condition) cell is valid when at least
``gate_fraction`` (default :data:`DEFAULT_FRACTION`) of its runs pass every required gate; verdicts use the valid
cells only, and a claim with no valid cell is NOT_TESTED.

The reference definitions (:func:`plateaued`, :func:`beats_prior`, :func:`reached`) are what each name means; the
thresholds belong in the experiment's YAML, so the config hash covers them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

DEFAULT_FRACTION = 0.8  # share of a cell's runs that must pass each gate for the cell to count


@dataclass(frozen=True)
class Gate:
    role: str  # plateau | learned | reached | acts
    definition: str


PLATEAU = "plateau: the training (or validation) curve stopped improving within the budget"
LEARNED = "learned: beats its own initialisation or prior on the data it was trained or selected on (never test data)"
REACHED = "reached: the compared baseline reached the target within the budget (else its time is censored)"
ACTS = "acts on its state: the learned chooser takes at least two different actions over the experiment's runs"

GATES: dict[str, Gate] = {
    "converged": Gate("plateau", PLATEAU),
    "plateaued": Gate("plateau", PLATEAU),
    "beats_trivial": Gate("learned", LEARNED + "; the prior is last value, the forecaster's initialisation"),
    "beats_trivial_on_train": Gate("learned", LEARNED + "; the prior is the best heuristic on the training year"),
    "beats_untrained": Gate("learned", LEARNED + "; the prior is the same network at its initial parameters"),
    "beats_prior": Gate("learned", LEARNED + "; the prior is the warm start: the network at its initial parameters, "
                                             "which carry a heuristic's policy"),
    "beats_pixels_and_untrained": Gate("learned", LEARNED + "; the prior is the better of the same network at its "
                                                           "initial parameters and a linear probe on the raw input "
                                                           "pixels (both read with the same probe)"),
    "baseline_reached": Gate("reached", REACHED),
    "arms_differ": Gate("acts", ACTS),
}


def unknown_gates(names: Sequence[str]) -> list[str]:
    """The names of ``names`` that are not in the vocabulary."""
    return [n for n in names if n not in GATES]


def cell_valid(passed: Sequence[float], fraction: float = DEFAULT_FRACTION) -> bool:
    """Whether a cell whose runs recorded ``passed`` (0/1 per run) counts: at least ``fraction`` of them pass."""
    a = np.asarray(passed, dtype=np.float64)
    if a.size == 0:
        raise ValueError("a cell with no gate rows cannot be judged")
    if not np.isfinite(a).all():
        raise ValueError("gate values must be finite 0/1")
    return bool((a >= 0.5).mean() >= fraction - 1e-12)


def plateaued(curve: Sequence[float], *, rel_tol: float, better: str = "lower", tail: float = 0.25) -> bool:
    """Plateau: the mean of the last ``tail`` of ``curve`` improves on the mean of the ``tail`` before it by less than
    ``rel_tol`` (relative to the earlier mean's magnitude)."""
    c = np.asarray(curve, dtype=np.float64)
    k = max(1, int(round(tail * c.size)))
    if c.size < 2 * k:
        raise ValueError(f"a curve of {c.size} points is too short for two windows of {k}")
    last, before = c[-k:].mean(), c[-2 * k:-k].mean()
    gain = (before - last) if better == "lower" else (last - before)
    return bool(gain < rel_tol * abs(before))


def beats_prior(ours: float, prior: float, *, rel_margin: float = 0.0, better: str = "lower") -> bool:
    """Learned: ``ours`` beats ``prior`` (the initialisation's or prior's score on training or selection data) by at
    least ``rel_margin`` of the prior's magnitude."""
    if better == "lower":
        return bool(ours < prior - rel_margin * abs(prior))
    return bool(ours > prior + rel_margin * abs(prior))


def reached(values: Sequence[float], target: float, *, better: str = "higher") -> bool:
    """Reached: some point of ``values`` attains ``target``."""
    v = np.asarray(values, dtype=np.float64)
    return bool((v >= target).any() if better == "higher" else (v <= target).any())
