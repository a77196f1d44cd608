"""The training protocol is chosen on tuning seeds and validation windows, then frozen: the pick is the argmin of
the mean validation score per model (ties to the smaller rate), and every experiment that trains a model uses
one rate for it, the one the committed tuning chose."""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from mlsys_repro.papers.evogwp.experiments import pick_lr
from mlsys_repro.papers.evogwp.schemas import TrainParams, TuningParams
from tests.conftest import ROOT

CONF = ROOT / "conf/experiment/evogwp"
REPORTING = ("table_short", "long_term", "ablation", "alibaba_univariate")


def test_pick_is_the_argmin_of_the_mean_validation_score_per_model():
    val = pd.DataFrame(
        [
            # dcrnn: 1e-3 wins on the mean over two tuning seeds (1.0, 1.2 -> 1.1) although 3e-3 wins seed 0
            {"policy": "dcrnn", "lr": 0.001, "value": 1.0},
            {"policy": "dcrnn", "lr": 0.001, "value": 1.2},
            {"policy": "dcrnn", "lr": 0.003, "value": 0.9},
            {"policy": "dcrnn", "lr": 0.003, "value": 1.5},
            # gwnet: a tie goes to the smaller rate
            {"policy": "gwnet", "lr": 0.003, "value": 0.8},
            {"policy": "gwnet", "lr": 0.001, "value": 0.8},
            # evogwp: the larger rate is clearly better
            {"policy": "evogwp", "lr": 0.001, "value": 2.0},
            {"policy": "evogwp", "lr": 0.003, "value": 1.7},
        ]
    )
    assert pick_lr(val) == {"dcrnn": 0.001, "gwnet": 0.001, "evogwp": 0.003}
    assert pick_lr(val.iloc[0:0]) == {}


def test_learning_rate_per_model_and_tuning_schema():
    t = TrainParams(lr=0.003, lr_by_model={"dcrnn": 0.001})
    assert t.lr_for("dcrnn") == 0.001 and t.lr_for("gwnet") == 0.003
    with pytest.raises(ValueError, match="lr_by_model"):
        TrainParams(lr_by_model={"dcrnnn": 0.001})
    with pytest.raises(ValueError, match="warmup"):
        TrainParams(steps=10, eval_every=5, warmup_steps=20)
    with pytest.raises(ValueError, match="lrs"):
        TuningParams(lrs=[0.001, 0.001])
    with pytest.raises(ValueError, match="tuning_seed_offset"):
        TuningParams(tuning_seed_offset=0)


def _exp(name: str) -> dict:
    return yaml.safe_load((CONF / f"{name}.yaml").read_text())["experiment"]


def test_every_reporting_experiment_trains_a_model_at_one_frozen_rate():
    """One protocol: each model's peak rate is the same in every experiment that reports it (default profile),
    and every model the tuning experiment tunes has one."""
    tuned = set(_exp("tuning")["policies"])
    maps = {n: _exp(n)["params"]["train"]["lr_by_model"] for n in REPORTING}
    for name, m in maps.items():
        assert tuned <= set(m) or name == "alibaba_univariate", (name, tuned - set(m))
    for kind in tuned:
        rates = {n: m[kind] for n, m in maps.items() if kind in m}
        assert len(set(rates.values())) == 1, (kind, rates)


def test_the_frozen_rates_are_the_committed_tunings_choice():
    path = ROOT / "results/evogwp/tuning.csv"
    if not path.exists():
        pytest.skip("no committed tuning.csv (run the tuning experiment, then write its chosen_lr into lr_by_model)")
    d = pd.read_csv(path)
    chosen = {r.policy: float(r.value) for r in d[d.metric == "chosen_lr"].itertuples()}
    assert chosen, "tuning.csv has no chosen_lr rows"
    for name in REPORTING:
        m = _exp(name)["params"]["train"]["lr_by_model"]
        for kind, lr in chosen.items():
            if kind in m:
                assert float(m[kind]) == pytest.approx(lr), (name, kind, m[kind], lr)


def test_tuning_seeds_are_disjoint_from_the_reported_seeds():
    t = _exp("tuning")
    lo = int(t["params"]["tuning_seed_offset"]) + int(t.get("seed", 0))
    for name in REPORTING:
        e = _exp(name)
        assert int(e.get("seed", 0)) + int(e["num_seeds"]) <= lo, name
