"""Canary's claims file: the baseline_reached and plateaued gates on hand-made result tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from mlsys_repro.common.repro.claims import evaluate, load_claims
from mlsys_repro.papers.canary.experiments import plateaued, tta_metrics

CLAIMS = Path(__file__).resolve().parents[3] / "mlsys_repro" / "papers" / "canary" / "claims.yaml"


def _claims():
    return {c.id: c for c in load_claims(CLAIMS)[1]}


def _tta_rows(bml_reached: list[int], baseline: str = "bml_overlap", t_base: float = 1.6,
             sketch_gbps: tuple[float, ...] = (100.0,)) -> pd.DataFrame:
    """Five seeds at one NIC rate: Canary reaches the target at 1.0 s, the baseline at ``t_base`` where it reaches
    it, else it is censored at its run end ``t_base + 0.1`` (rows as tta_metrics writes them), at each sketch rate."""
    rows = []
    for sk in sketch_gbps:
        for seed in range(5):
            ok_b = bml_reached[seed]
            for policy, t, ok in (("canary", 1.0, 1), (baseline, t_base if ok_b else t_base + 0.1, ok_b)):
                for metric, value in (("tta_s", t), ("reached_target", ok), ("baseline_reached", ok)):
                    rows.append({"paper": "canary", "experiment": "tta_bcube9", "policy": policy, "seed": seed,
                                 "metric": metric, "value": float(value) + (0.01 * seed if metric == "tta_s" else 0.0),
                                 "unit": "s", "bandwidth_gbps": 1.0, "sketch_gbps": sk})
    return pd.DataFrame(rows)


def test_speedup_is_not_decided_when_the_baseline_missed_the_target():
    claim = _claims()["speedup_vs_bml"]
    assert claim.requires == ("baseline_reached",) and claim.baseline == {"policy": "bml_overlap"}
    ok = evaluate(claim, _tta_rows([1, 1, 1, 1, 1]))
    assert ok.verdict == "REPRODUCED"  # 1.6 / 1.0 = 1.6x against the band 1.61 +- 10 %
    # one miss in five: the cell passes its gate (80 %), but the censored time cannot decide the size
    one_missed = evaluate(claim, _tta_rows([1, 1, 0, 1, 1]))
    assert one_missed.verdict == "INCONCLUSIVE" and "by bml_overlap in 1/5" in one_missed.note
    # two misses: the only cell fails its gate, so the claim is not tested
    two_missed = evaluate(claim, _tta_rows([1, 0, 0, 1, 1]))
    assert two_missed.verdict == "NOT_TESTED" and "bml_overlap at bandwidth_gbps=1.0: baseline_reached passed 3/5" \
        in two_missed.note


def test_speedup_reads_the_gpu_class_rate_and_its_cpu_twin_the_measured_one():
    both = _tta_rows([1] * 5, sketch_gbps=(100.0, 1.17))
    both.loc[(both.sketch_gbps == 1.17) & (both.policy == "bml_overlap") & (both.metric == "tta_s"), "value"] += 1.0
    assert evaluate(_claims()["speedup_vs_bml"], both).verdict == "REPRODUCED"  # 1.6x: the 100 GB/s rows
    cpu = evaluate(_claims()["speedup_vs_bml_sketch_cpu"], both)  # (2.6 + 0.01 s) / (1 + 0.01 s): above the band
    want = np.mean([(2.6 + 0.01 * s) / (1.0 + 0.01 * s) for s in range(5)])
    assert cpu.verdict == "DIRECTION_ONLY" and cpu.mean == pytest.approx(want, rel=1e-9)


def test_canary_beats_ring_sketch_known_answers():
    claim = _claims()["canary_beats_ring_sketch"]
    assert claim.cls == "extension" and not claim.counted and claim.min_effect == 1.05
    assert (claim.experiment, claim.ours, claim.baseline) == ("tta_bcube9", {"policy": "canary"},
                                                              {"policy": "ring_sketch"})
    assert evaluate(claim, _tta_rows([1] * 5, "ring_sketch", 1.2)).verdict == "REPRODUCED"  # 1.2x >= 1.05
    level = evaluate(claim, _tta_rows([1] * 5, "ring_sketch", 1.01))  # 1.01x: significant, but below 1.05
    assert level.verdict == "NOT_REPRODUCED" and "smaller than the smallest effect" in level.note
    assert evaluate(claim, _tta_rows([1] * 5, "ring_sketch", 0.9)).verdict == "NOT_REPRODUCED"  # ring faster


def test_every_sketch_rate_a_claim_reads_is_one_its_experiment_runs():
    """Every training experiment's rows carry `sketch_gbps`: each claim on one of them selects exactly one rate,
    and a rate the experiment runs (the default profile's config)."""
    import yaml

    root = CLAIMS.parents[3]
    for c in _claims().values():
        exp = yaml.safe_load((root / "conf/experiment/canary" / f"{c.experiment}.yaml").read_text())["experiment"]
        rates = exp["params"].get("sketch_gbps")
        if rates is None:  # traffic: sizes only, no sketch arithmetic
            assert "sketch_gbps" not in c.where, c.id
            continue
        assert c.where.get("sketch_gbps") in rates, c.id
    cpu = [c for c in _claims().values() if c.where.get("sketch_gbps") == 1.17]
    assert cpu and all(c.cls == "sensitivity" for c in cpu)  # the measured CPU rate is never counted


def test_every_time_to_target_comparison_carries_the_gate():
    for c in _claims().values():
        if c.metric == "tta_s":
            assert c.reached == "reached_target" and "baseline_reached" in c.requires, c.id


def test_tta_metrics_write_the_gate_per_run():
    from mlsys_repro.papers.canary.experiments import PolicyRun
    from mlsys_repro.papers.canary.protocols import Schedule

    T = 20
    sched = Schedule("bml", 9, T, np.tile(np.arange(T + 1) * 0.5, (9, 1)), np.zeros((9, T)), 1e6, 10.0)
    acc = np.array([[0.1, 0.5, 0.93], [0.1, 0.5, 0.91]])  # evaluations at 0, 10, 20: seed 0 reaches 92 %, seed 1 not
    m = tta_metrics(PolicyRun("bml", 1.0, sched, acc, np.array([0, 10, 20]), 0.2, 0.5), 0.92, 32)
    assert m["baseline_reached"][0].tolist() == [1.0, 0.0] == m["reached_target"][0].tolist()
    assert m["tta_s"][0].tolist() == [10.0, 10.0]  # seed 1 censored at the last iteration


def test_plateau_gate_known_answers():
    flat = np.array([[0.5, 0.9, 0.95, 0.951, 0.952, 0.95, 0.951, 0.952, 0.953]])  # quarters: 0.9505 vs 0.9525 -> 0.2 pp
    rising = np.array([[0.5, 0.6, 0.7, 0.8, 0.85, 0.88, 0.9, 0.92, 0.94]])  # 0.93 vs 0.89 -> 4 pp
    assert plateaued(flat, 0.5).tolist() == [1.0] and plateaued(rising, 0.5).tolist() == [0.0]
    claim = _claims()["sketch_accuracy_mnist"]
    assert claim.experiment == "accuracy_cost" and claim.requires == ("plateaued",)
    rows = []
    for seed in range(5):
        rows.append({"policy": "canary", "reference": "bml", "seed": seed, "metric": "acc_drop_pp",
                     "value": 0.2 + 0.05 * seed, "unit": "pp", "bandwidth_gbps": 1.0, "sketch_gbps": 100.0})
        for pol in ("canary", "bml"):
            rows.append({"policy": pol, "reference": np.nan, "seed": seed, "metric": "plateaued",
                             "value": 0.0 if (pol == "bml" and seed in (1, 3)) else 1.0, "unit": "bool",
                         "bandwidth_gbps": 1.0, "sketch_gbps": 100.0})
    df = pd.DataFrame(rows)
    v = evaluate(claim, df)  # the gate rows are the experiment's (the claim's rows are canary vs reference bml)
    assert v.verdict == "REPRODUCED" and not v.dropped  # 8/10 = 80 % of the runs pass: the cell is valid
    df.loc[(df.metric == "plateaued") & (df.seed == 4) & (df.policy == "bml"), "value"] = 0.0
    v = evaluate(claim, df)
    assert v.verdict == "NOT_TESTED" and "plateaued passed 7/10" in v.note
    df.loc[df.metric == "plateaued", "value"] = 1.0
    assert evaluate(claim, df).verdict == "REPRODUCED"  # 0.2-0.4 pp, CI within the 1 pp bound
