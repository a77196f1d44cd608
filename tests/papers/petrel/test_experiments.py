"""Derived pseudo-policies (best/mean non-community) on hand-made rows."""

from __future__ import annotations

from types import SimpleNamespace

import pandas as pd
import pytest

from mlsys_repro.common.repro import metric_rows
from mlsys_repro.papers.petrel.experiments import _derived
from mlsys_repro.papers.petrel.schemas import SyncPolicy


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


def _res(policy, seed, t, decisions=()):
    from mlsys_repro.papers.petrel.batch_runs import RunResult

    return RunResult(policy, seed, {"time_to_target_s": t}, [], list(decisions))


def test_best_k_is_picked_on_tuning_runs_only():
    from mlsys_repro.papers.petrel.experiments import pick_best_k

    tuning = [_res("tuning_casp_k1", 1000, 9.0), _res("tuning_casp_k1", 1001, 11.0),
              _res("tuning_casp_k4", 1000, 6.0), _res("tuning_casp_k4", 1001, 8.0),
              _res("tuning_casp_k16", 1000, 5.0), _res("tuning_casp_k16", 1001, 9.0)]
    assert pick_best_k(tuning) == 4  # means 10, 7, 7: the tie goes to the smaller k
    assert pick_best_k(tuning[:4]) == 4
    assert pick_best_k([_res("tuning_casp_k2", 1000, 3.0), _res("tuning_casp_k8", 1000, 2.0)]) == 8


def test_gate_rows_arms_differ_and_converged():
    from mlsys_repro.papers.petrel.a3c import TrainLog
    from mlsys_repro.papers.petrel.experiments import _gate_rows

    log = TrainLog()  # no complete chunk -> converged 0
    agent = SimpleNamespace(log=log, conditions=[(16, 1.0, 1.0), (16, 4.0, 1.0)])
    same = [("casp", 0, {"speed_ratio": 1.0}, [4, 4]), ("casp", 0, {"speed_ratio": 8.0}, [4])]
    rows = pd.DataFrame(_gate_rows({"casp": agent}, same))
    assert set(rows["metric"]) == {"arms_differ", "converged"} and len(rows) == 4
    assert (rows[rows.metric == "arms_differ"]["value"] == 0.0).all()  # constant k: a fixed-k policy in disguise
    assert (rows[rows.metric == "converged"]["value"] == 0.0).all()
    assert sorted(rows[rows.metric == "arms_differ"]["speed_ratio"]) == [1.0, 8.0]
    varied = same + [("casp", 1, {"speed_ratio": 8.0}, [16, 4])]
    rows = pd.DataFrame(_gate_rows({"casp": agent}, varied))
    assert (rows[rows.metric == "arms_differ"]["value"] == 1.0).all()
    assert len(rows) == 6
