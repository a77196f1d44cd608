"""Non-stationary speeds (issue #50): ``hardware.permute_speeds_at_steps`` permutes the workers' speed classes at one
simulated instant. Iteration times change exactly there (piecewise-constant speed), not before; the permutation is
seeded and keeps the class counts; a partition fixed at the start groups mismatched speeds afterwards."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mlsys_repro.papers.petrel.hardware import ComputeModel, permuted_classes, prior_groups
from mlsys_repro.papers.petrel.schemas import PSClusterHardware, SyncPolicy
from tests.papers.petrel.conftest import run

HW = PSClusterHardware(name="t", num_workers=8, class_speeds=[1.0, 0.5, 0.25, 0.125], straggler_prob=0.1,
                       regime_shift_prob=0.05)
SWITCH_STEPS = 30.0  # x base_step_s = 0.3 s


def test_default_is_stationary():
    m = ComputeModel(HW, 0)
    assert HW.permute_speeds_at_steps is None and m.switch_s == np.inf
    assert m.classes_after is m.classes and m.nominal_after is m.nominal
    assert np.array_equal(m.classes_at(1e9), m.classes)


def test_permutation_is_seeded_and_keeps_class_counts():
    hw = dataclasses.replace(HW, permute_speeds_at_steps=SWITCH_STEPS)
    a, b = ComputeModel(hw, 3), ComputeModel(hw, 3)
    assert np.array_equal(a.classes_after, b.classes_after)
    assert np.array_equal(a.classes_after, permuted_classes(a.classes, 3))
    assert np.bincount(a.classes_after, minlength=4).tolist() == np.bincount(a.classes, minlength=4).tolist()
    assert not np.array_equal(a.classes_after, a.classes)
    assert not np.array_equal(permuted_classes(np.arange(8), 3), permuted_classes(np.arange(8), 4))
    assert a.switch_s == pytest.approx(SWITCH_STEPS * hw.base_step_s)
    assert np.array_equal(a.classes_at(a.switch_s - 1e-9), a.classes)
    assert np.array_equal(a.classes_at(a.switch_s), a.classes_after)


def test_step_times_change_exactly_at_the_switch():
    """Same draws as the stationary model; an iteration ending by the switch is unchanged, one starting at or after
    it runs at the new class's speed, one straddling it runs the part of its work before the switch at the old
    speed and the rest at the new one."""
    hw = dataclasses.replace(HW, permute_speeds_at_steps=SWITCH_STEPS)
    base, perm = ComputeModel(HW, 2), ComputeModel(hw, 2)
    T = perm.switch_s
    ratio = perm.nominal_after / perm.nominal  # new / old seconds per iteration, per worker
    assert np.any(ratio != 1.0)
    kinds = set()
    for w in range(hw.num_workers):
        t = 0.0
        for _ in range(80):
            old = base.step_time(w, t)
            new = perm.step_time(w, t)
            if t + old <= T:
                assert new == old
                kinds.add("before")
            elif t >= T:
                assert new == pytest.approx(old * ratio[w], rel=1e-12)
                kinds.add("after")
            else:
                done = (T - t) / old  # fraction of the work done before the switch
                assert new == pytest.approx((T - t) + (1 - done) * old * ratio[w], rel=1e-12)
                kinds.add("straddle")
            t += new
    assert kinds == {"before", "after", "straddle"}
    assert np.array_equal(base.slow_regime, perm.slow_regime)  # the same regime and straggler draws


@pytest.mark.parametrize("name, pol", [("bsp", SyncPolicy(name="bsp", kind="bsp")),
                                       ("casp_prior", SyncPolicy(name="cp", kind="casp", grouping="prior"))])
def test_simulation_changes_speeds_at_the_switch_and_not_before(make_sim, name, pol):
    """The same run with and without the permutation: identical up to the switch (every gradient that started and
    finished before it), and every iteration that starts after it runs at the worker's new class speed."""
    hw = dataclasses.replace(HW, permute_speeds_at_steps=SWITCH_STEPS)
    a, ea = make_sim(pol, hw=HW, seed=1, max_time_s=0.6, mode="map")
    b, eb = make_sim(pol, hw=hw, seed=1, max_time_s=0.6, mode="map")
    run(a, ea)
    run(b, eb)
    T = b.compute.switch_s
    assert 0 < T < b.now
    pre_a = [(g.worker, g.iteration, g.start_s, g.compute_s) for g in a.started if g.start_s + g.compute_s <= T]
    pre_b = [(g.worker, g.iteration, g.start_s, g.compute_s) for g in b.started if g.start_s + g.compute_s <= T]
    assert pre_a == pre_b and len(pre_b) > 0
    ratio = b.compute.nominal_after / b.compute.nominal
    base = ComputeModel(HW, 1, batch=16)  # the stationary draws of the same realisation
    draws = {(w, j): base.step_time(w) for w in range(HW.num_workers) for j in range(int(b.iters.max()))}
    after = [g for g in b.started if g.start_s >= T]
    assert after
    for g in after:
        assert g.compute_s == pytest.approx(draws[(g.worker, g.iteration)] * ratio[g.worker], rel=1e-12)
    assert np.array_equal(b.compute.classes_at(T), b.compute.classes_after)


def test_fixed_prior_partition_is_mismatched_after_the_switch():
    hw = dataclasses.replace(HW, num_workers=16, permute_speeds_at_steps=SWITCH_STEPS)
    m = ComputeModel(hw, 0)
    groups = prior_groups(hw, m.classes)
    assert all(len({int(m.classes[w]) for w in g}) == 1 for g in groups)  # one class per community before
    mixed = [len({int(m.classes_after[w]) for w in g}) for g in groups]
    assert max(mixed) > 1  # after: communities mix speed classes


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_bad_switch_time_rejected(bad):
    with pytest.raises(ValueError, match="permute_speeds_at_steps"):
        PSClusterHardware(name="x", permute_speeds_at_steps=bad)
