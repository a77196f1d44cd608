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
    from mlsys_repro.papers.petrel.pipeline import RunResult

    return RunResult(policy, seed, {"time_to_target_s": t}, [], list(decisions))


def test_best_k_is_picked_on_tuning_runs_only():
    from mlsys_repro.papers.petrel.experiments import pick_best_k

    tuning = [_res("tuning_casp_k1", 1000, 9.0), _res("tuning_casp_k1", 1001, 11.0),
              _res("tuning_casp_k4", 1000, 6.0), _res("tuning_casp_k4", 1001, 8.0),
              _res("tuning_casp_k16", 1000, 5.0), _res("tuning_casp_k16", 1001, 9.0)]
    assert pick_best_k(tuning) == 4  # means 10, 7, 7: the tie goes to the smaller k
    assert pick_best_k(tuning[:4]) == 4
    assert pick_best_k([_res("tuning_casp_k2", 1000, 3.0), _res("tuning_casp_k8", 1000, 2.0)]) == 8


def test_reported_seeds_run_only_the_picked_ks():
    from mlsys_repro.papers.petrel.experiments import _reported_ks
    from mlsys_repro.papers.petrel.schemas import PetrelParams

    ctx = SimpleNamespace(policies={}, params=PetrelParams(fixed_k=[1, 4, 16]))
    hw = SimpleNamespace(num_workers=8)
    tuning = [_res("tuning_casp_k1", 1000, 5.0), _res("tuning_casp_k4", 1000, 3.0)]
    assert _reported_ks(ctx, hw, tuning, None) == [4]  # the condition's best
    assert _reported_ks(ctx, hw, tuning, 1) == [1, 4]  # and the constant k
    assert _reported_ks(ctx, hw, tuning, 4) == [4]  # once when they agree
    assert _reported_ks(ctx, hw, tuning, 16) == [4]  # a constant k above N = 8 does not run here
    assert _reported_ks(ctx, hw, [], 1) == []  # no tuning runs (no fixed_k): no fixed k at all


def _agent_with_log(table):
    """A stand-in agent whose greedy evaluation curve has one return per (point, condition) from ``table`` (row 0:
    the untrained policy, point -1; row i: after chunk i - 1), and whose training log has those chunks complete."""
    from mlsys_repro.papers.petrel.a3c import TrainLog

    log = TrainLog()
    for ch, row in enumerate(table):
        for c, r in enumerate(row):
            log.greedy_ret.append(float(r))
            log.greedy_chunk.append(ch - 1)
            log.greedy_condition.append(c)
            if ch:
                log.episode.append(len(log.episode))
    return SimpleNamespace(log=log, conditions=[(16, 1.0, 1.0), (16, 4.0, 1.0), (16, 8.0, 1.0)])


def test_gate_rows_arms_differ_and_converged():
    from mlsys_repro.papers.petrel.a3c import AgentSet
    from mlsys_repro.papers.petrel.experiments import _gate_rows

    agent = _agent_with_log([])  # no complete chunk -> converged 0
    same = [("casp", 0, {"speed_ratio": 1.0}, [4, 4]), ("casp", 0, {"speed_ratio": 8.0}, [4])]
    rows = pd.DataFrame(_gate_rows({"casp": AgentSet(shared=agent)}, same))
    assert set(rows["metric"]) == {"arms_differ", "converged"} and len(rows) == 4
    assert (rows[rows.metric == "arms_differ"]["value"] == 0.0).all()  # constant k: a fixed-k policy in disguise
    assert (rows[rows.metric == "converged"]["value"] == 0.0).all()
    assert sorted(rows[rows.metric == "arms_differ"]["speed_ratio"]) == [1.0, 8.0]
    varied = same + [("casp", 1, {"speed_ratio": 8.0}, [16, 4])]
    rows = pd.DataFrame(_gate_rows({"casp": AgentSet(shared=agent)}, varied))
    assert (rows[rows.metric == "arms_differ"]["value"] == 1.0).all()
    assert len(rows) == 6


def test_gate_rows_read_each_seeds_own_agent():
    from mlsys_repro.papers.petrel.a3c import AgentSet
    from mlsys_repro.papers.petrel.experiments import _gate_rows

    # seed 0's agent rises then levels off (converged); seed 1's never improves
    rising = _agent_with_log([[0.0, 0.1, 0.2]] + [[1.0, 1.1, 1.2], [1.02, 1.08, 1.21], [0.99, 1.12, 1.19],
                                                   [1.01, 1.09, 1.2]])
    flat = _agent_with_log([[0.0, 0.1, 0.2], [0.01, 0.09, 0.21], [-0.01, 0.1, 0.2], [0.0, 0.11, 0.19],
                            [0.01, 0.1, 0.2]])
    runs = [("casp", 0, {"speed_ratio": 1.0}, [4]), ("casp", 1, {"speed_ratio": 1.0}, [8])]
    rows = pd.DataFrame(_gate_rows({"casp": AgentSet(by_seed={0: rising, 1: flat})}, runs))
    conv = rows[rows.metric == "converged"].set_index("seed")["value"]
    assert conv.to_dict() == {0: 1.0, 1: 0.0}
    with pytest.raises(KeyError, match="seed 2"):
        _gate_rows({"casp": AgentSet(by_seed={0: rising})}, [("casp", 2, {}, [4])])


def test_arms_differ_is_judged_per_agent():
    from mlsys_repro.papers.petrel.a3c import AgentSet
    from mlsys_repro.papers.petrel.experiments import _gate_rows

    agents = {"casp": AgentSet(by_seed={s: _agent_with_log([]) for s in (0, 1, 2)})}
    runs = [("casp", 0, {"link_gbps": 1.0}, [2, 2]), ("casp", 0, {"link_gbps": 100.0}, [16]),  # 2 values: acts
            ("casp", 1, {"link_gbps": 1.0}, [4, 4]), ("casp", 1, {"link_gbps": 100.0}, [4]),  # a constant: no
            ("casp", 2, {"link_gbps": 1.0}, [8, 8]), ("casp", 2, {"link_gbps": 100.0}, [8])]
    rows = pd.DataFrame(_gate_rows(agents, runs))
    differ = rows[rows.metric == "arms_differ"]
    assert len(differ) == 6  # one row per run, its seed's agent's flag
    assert differ.groupby("seed")["value"].agg(["min", "max"]).to_dict("index") == {
        0: {"min": 1.0, "max": 1.0}, 1: {"min": 0.0, "max": 0.0}, 2: {"min": 0.0, "max": 0.0}}
    # the constants differ across agents (4 vs 8), which the pooled reading would have counted as acting
    # one worker count at a time: k = 4 at N = 8 and k = 16 at N = 16 is not two values at one N
    by_n = [("casp", 0, {"num_workers": 8}, [4, 4]), ("casp", 0, {"num_workers": 16}, [16])]
    rows = pd.DataFrame(_gate_rows(agents, by_n))
    assert (rows[rows.metric == "arms_differ"]["value"] == 0.0).all()


def _tuning_rows(times: dict[tuple[int, float], list[float]]) -> list[dict]:
    """``tuning_casp_k<k>`` time rows per (k, link rate) over tuning seeds 1000.."""
    rows = []
    for (k, gbps), ts in times.items():
        for i, t in enumerate(ts):
            rows += metric_rows(f"tuning_casp_k{k}", {"time_to_target_s": (t, "s")}, seeds=[1000 + i],
                                link_gbps=gbps)
    return rows


def test_constant_k_is_one_k_for_every_condition_picked_on_tuning_rows():
    from mlsys_repro.papers.petrel.experiments import pick_constant_k

    # k = 1 is best at 100 Gb/s, k = 16 at 1 Gb/s; over both, k = 4 has the least mean (6 vs 7.5 and 7.5)
    rows = _tuning_rows({(1, 1.0): [12.0, 12.0], (1, 100.0): [3.0, 3.0], (4, 1.0): [8.0, 8.0], (4, 100.0): [4.0, 4.0],
                         (16, 1.0): [5.0, 5.0], (16, 100.0): [10.0, 10.0]})
    assert pick_constant_k(rows) == 4
    # the reported seeds' rows of a fixed k never enter the pick
    rows += metric_rows("casp_k16", {"time_to_target_s": (0.1, "s")}, seeds=[0], link_gbps=1.0)
    assert pick_constant_k(rows) == 4
    tie = _tuning_rows({(8, 1.0): [2.0], (2, 1.0): [2.0]})
    assert pick_constant_k(tie) == 2
    with pytest.raises(ValueError, match="tuning_casp_k"):
        pick_constant_k(metric_rows("casp", {"time_to_target_s": (1.0, "s")}, seeds=[0]))


def test_constant_k_rows_repeat_that_k_in_every_condition():
    from mlsys_repro.papers.petrel.experiments import _constant_k_rows

    rows = _tuning_rows({(2, 1.0): [5.0], (2, 10.0): [5.0], (8, 1.0): [4.0], (8, 10.0): [9.0]})  # k = 2 (5 < 6.5)
    for k in (2, 8):
        for seed in (0, 1):
            for gbps in (1.0, 10.0):
                rows += metric_rows(f"casp_k{k}", {"time_to_target_s": (k * 10 + seed + gbps, "s"),
                                                   "reached_target": (1.0, "fraction")}, seeds=[seed], link_gbps=gbps)
    out = pd.DataFrame(_constant_k_rows(rows))
    assert set(out["policy"]) == {"casp_const_k"}
    times = out[out.metric == "time_to_target_s"].set_index(["seed", "link_gbps"])["value"]
    assert times.to_dict() == {(0, 1.0): 21.0, (0, 10.0): 30.0, (1, 1.0): 22.0, (1, 10.0): 31.0}
    ks = out[out.metric == "const_k"]
    assert sorted(ks["seed"]) == [0, 1] and (ks["value"] == 2.0).all()


def test_condition_hardware_sets_shards_and_permutation():
    from mlsys_repro.papers.petrel.pipeline import condition_hardware
    from mlsys_repro.papers.petrel.schemas import PSClusterHardware

    hw = PSClusterHardware(ps_shards=4)
    assert condition_hardware(hw).ps_shards == 4 and condition_hardware(hw).permute_speeds_at_steps is None
    one = condition_hardware(hw, ps_shards=1, permute_at_steps=300.0, ratio=8.0)
    assert one.ps_shards == 1 and one.permute_speeds_at_steps == 300.0
    assert one.class_speeds[0] / one.class_speeds[-1] == pytest.approx(8.0)
    assert condition_hardware(hw, permute_at_steps=0.0).permute_speeds_at_steps is None  # 0: never
    with pytest.raises(ValueError, match="ps_shards"):
        condition_hardware(hw, ps_shards=0)


@pytest.mark.parametrize("field, value, match", [("ps_shards", [0], "ps_shards"), ("ps_shards", [2.5], "ps_shards"),
                                                  ("permute_at_steps", [-1.0], "permute_at_steps"),
                                                  ("permute_at_steps", [float("nan")], "permute_at_steps")])
def test_params_reject_bad_sweeps(field, value, match):
    from mlsys_repro.papers.petrel.schemas import PetrelParams

    with pytest.raises(ValueError, match=match):
        PetrelParams(**{field: value})
