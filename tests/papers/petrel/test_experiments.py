"""Derived pseudo-policies (best/mean non-community) on hand-made rows."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from common.repro import metric_rows
from papers.petrel.experiments import _derived
from papers.petrel.schemas import SyncPolicy


def test_best_and_mean_noncommunity():
    pols = {n: SyncPolicy(name=n, kind=k) for n, k in (("bsp", "bsp"), ("asp", "asp"), ("casp", "casp"))}
    ctx = SimpleNamespace(policies=pols)
    rows = []
    for pol, t, ps, wire in (("bsp", 10.0, 100.0, 100.0), ("asp", 4.0, 300.0, 300.0), ("casp", 3.0, 50.0, 200.0)):
        for seed in (0, 1):
            reached = 0.0 if (pol, seed) == ("bsp", 1) else 1.0  # bsp misses the target in seed 1
            rows += metric_rows(pol, {"time_to_target_s": (t + seed, "s"), "ps_traffic_mb": (ps, "MB"),
                                      "wire_traffic_mb": (wire, "MB"), "reached_target": (reached, "fraction")},
                                seeds=[seed], speed_ratio=2.0)
    out = pd.DataFrame(_derived(rows, ctx, ["speed_ratio"]))
    best = out[out.policy == "best_noncommunity"].set_index(["seed", "metric"])["value"]
    mean = out[out.policy == "mean_noncommunity"].set_index(["seed", "metric"])["value"]
    assert best[(0, "time_to_target_s")] == 4.0 and best[(1, "time_to_target_s")] == 5.0
    assert best[(0, "ps_traffic_mb")] == 300.0  # the traffic of the fastest baseline (asp)
    assert mean[(0, "time_to_target_s")] == pytest.approx(7.0)
    assert mean[(1, "wire_traffic_mb")] == pytest.approx(200.0)
    assert best[(0, "reached_target")] == 1.0 and best[(1, "reached_target")] == 1.0  # asp, the fastest, reached
    assert mean[(0, "reached_target")] == 1.0 and mean[(1, "reached_target")] == 0.0  # not every one did
    assert set(out["speed_ratio"]) == {2.0} and len(out) == 2 * 2 * 4
