"""Issue #24 parameters: the communication-to-compute ratio's NIC rate, one optimiser for accuracy_cost,
the local-first policy flag."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_repro.common.timing import comm_compute_ratio, effective_flops_per_s, resnet50
from mlsys_repro.papers.canary.experiments import exchange_for, ratio_gbps
from mlsys_repro.papers.canary.protocols import Schedule
from mlsys_repro.papers.canary.schemas import AccuracyCostParams, BCubeCluster, CommRatioParams, ExchangePolicy


def test_ratio_sets_the_nic_rate():
    hw = BCubeCluster(workload="resnet50", gpu="p100")
    rate = effective_flops_per_s("p100")
    # one fp32 ResNet-50 gradient (102,228,128 B) over one NIC takes `ratio` iterations of 0.1909 s
    step = 3 * resnet50().fwd_flops * 32 / rate
    for ratio in (0.25, 1.0, 8.0):
        g = ratio_gbps(hw, 32, ratio)
        assert g == pytest.approx(8 * 102_228_128 / (ratio * step) / 1e9, rel=1e-12)
        assert comm_compute_ratio(resnet50(), 32, rate, g) == pytest.approx(ratio, rel=1e-12)
    assert ratio_gbps(hw, 32, 1.0) == pytest.approx(4.2838, abs=1e-4)
    with pytest.raises(ValueError, match="hardware.workload"):
        ratio_gbps(BCubeCluster(), 32, 1.0)
    with pytest.raises(ValueError, match="comm_ratios"):
        CommRatioParams(comm_ratios=[1.0, 1.0])
    with pytest.raises(ValueError, match="comm_ratios"):
        CommRatioParams(comm_ratios=[0.0])


def test_accuracy_cost_needs_one_optimiser_and_enough_evaluations():
    AccuracyCostParams(iterations=400, eval_every=10, optimiser={"bml": [0.2, 0.5], "canary": [0.2, 0.5]})
    with pytest.raises(ValueError, match="same optimiser"):
        AccuracyCostParams(iterations=400, eval_every=10, optimiser={"bml": [0.2, 0.5], "canary": [0.2, 0.0]})
    with pytest.raises(ValueError, match="plateau"):
        AccuracyCostParams(iterations=40, eval_every=10)


def test_local_first_policy_flag_reaches_the_numerics():
    T, n, q = 4, 9, 13
    vis = np.broadcast_to(np.arange(T)[:, None, None] + 2, (T, n, q)).copy()
    sched = Schedule("canary", n, T, np.zeros((n, T + 1)), np.zeros((n, T)), 0.0, 0.0, visible=vis)
    pol = ExchangePolicy(protocol="canary", sketch=True, staleness=1, local_first=True)
    ex = exchange_for(pol, sched, type("NS", (), {"n": 3, "k": 1, "num_servers": 9})())
    assert ex.kind == "tree" and ex.local_first and ex.visible is vis
    assert ex.key() != exchange_for(ExchangePolicy(protocol="canary", sketch=True, staleness=1), sched,
                                    type("NS", (), {"n": 3, "k": 1, "num_servers": 9})()).key()
    with pytest.raises(ValueError, match="local_first"):
        ExchangePolicy(protocol="canary", staleness=0, local_first=True)
    with pytest.raises(ValueError, match="local_first"):
        ExchangePolicy(protocol="ako", staleness=4, local_first=True)
