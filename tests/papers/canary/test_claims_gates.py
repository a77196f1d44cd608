"""Canary's claims file: the baseline_reached and plateaued gates on hand-made result tables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from mlsys_repro.common.repro.claims import evaluate, load_claims
from mlsys_repro.papers.canary.experiments import plateaued, tta_metrics

CLAIMS = Path(__file__).resolve().parents[3] / "mlsys_repro" / "papers" / "canary" / "claims.yaml"


def _claims():
    return {c.id: c for c in load_claims(CLAIMS)[1]}


def _tta_rows(bml_reached: list[int]) -> pd.DataFrame:
    """Five seeds at one NIC rate: Canary reaches the target at 1.0 s, BML at 1.6 s where it reaches it, else it
    is censored at its run end 1.7 s (rows as tta_metrics writes them)."""
    rows = []
    for seed in range(5):
        for policy, t, ok in (("canary", 1.0, 1), ("bml", 1.6 if bml_reached[seed] else 1.7, bml_reached[seed])):
            for metric, value in (("tta_s", t), ("reached_target", ok), ("baseline_reached", ok)):
                rows.append({"paper": "canary", "experiment": "tta_bcube9", "policy": policy, "seed": seed,
                             "metric": metric, "value": float(value) + (0.01 * seed if metric == "tta_s" else 0.0),
                             "unit": "s", "bandwidth_gbps": 1.0})
    return pd.DataFrame(rows)


def test_speedup_is_not_decided_when_the_baseline_missed_the_target():
    claim = _claims()["speedup_vs_bml"]
    assert claim.requires == ("baseline_reached",)
    ok = evaluate(claim, _tta_rows([1, 1, 1, 1, 1]))
    assert ok.verdict == "REPRODUCED"  # 1.6 / 1.0 = 1.6x against the band 1.61 +- 10 %
    # one miss in five: the cell passes its gate (80 %), but the censored time cannot decide the size
    one_missed = evaluate(claim, _tta_rows([1, 1, 0, 1, 1]))
    assert one_missed.verdict == "INCONCLUSIVE" and "by bml in 1/5" in one_missed.note
    # two misses: the only cell fails its gate, so the claim is not tested
    two_missed = evaluate(claim, _tta_rows([1, 0, 0, 1, 1]))
    assert two_missed.verdict == "NOT_TESTED" and "bml at bandwidth_gbps=1.0: baseline_reached passed 3/5" in \
        two_missed.note


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
                     "value": 0.2 + 0.05 * seed, "unit": "pp", "bandwidth_gbps": 1.0})
        for pol in ("canary", "bml"):
            rows.append({"policy": pol, "reference": np.nan, "seed": seed, "metric": "plateaued",
                             "value": 0.0 if (pol == "bml" and seed in (1, 3)) else 1.0, "unit": "bool",
                         "bandwidth_gbps": 1.0})
    df = pd.DataFrame(rows)
    v = evaluate(claim, df)  # the gate rows are the experiment's (the claim's rows are canary vs reference bml)
    assert v.verdict == "REPRODUCED" and not v.dropped  # 8/10 = 80 % of the runs pass: the cell is valid
    df.loc[(df.metric == "plateaued") & (df.seed == 4) & (df.policy == "bml"), "value"] = 0.0
    v = evaluate(claim, df)
    assert v.verdict == "NOT_TESTED" and "plateaued passed 7/10" in v.note
    df.loc[df.metric == "plateaued", "value"] = 1.0
    assert evaluate(claim, df).verdict == "REPRODUCED"  # 0.2-0.4 pp, CI within the 1 pp bound
