"""The experiment functions at toy scale: what the attack rows say (private vs non-member, the no-upload references,
the server's best attack, surrogate extraction) and the accuracy experiment's per-policy seeds."""

from __future__ import annotations

import importlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from omegaconf import OmegaConf

from mlsys_repro.common.repro import RunContext
from mlsys_repro.common.repro.claims import load_claims
from mlsys_repro.common.repro.claims.evaluate import evaluate
from mlsys_repro.common.repro.config import build_context, compose, compose_run
from mlsys_repro.common.repro.results import to_frame
from mlsys_repro.papers.labelavg import experiments as E
from mlsys_repro.papers.labelavg.schemas import (
    AccuracyParams,
    FDPolicy,
    FDSchedule,
    FederationHardware,
)

DATA = Path(__file__).resolve().parents[3] / "data"
TINY = FDSchedule(n_train=600, n_public=150, n_test=200, public_batch=50, warmup_steps=5, rounds=2, local_steps=5,
                  distill_steps=5, curve_n_test=100, min_per_client=5)


def _ctx(tmp_path, params, policies, num_seeds=2):
    return RunContext(paper="labelavg", experiment="t", profile="smoke", num_seeds=num_seeds, seed=0, params=params,
                      policies={p: FDPolicy(name=p, method=p) for p in policies}, trace=None,
                      hardware=FederationHardware(name="h", num_clients=4), data_dir=DATA, out_dir=tmp_path,
                      cfg=OmegaConf.create({}))


def test_nonmembers_are_never_in_the_federation():
    data = E.load_fd_data("mnist", DATA, TINY)
    used = np.concatenate([E.to_uint8(data.arrays["x_train"], "mnist"), E.to_uint8(data.arrays["x_pub"], "mnist")])
    # the uint8 round trip is exact
    np.testing.assert_allclose(E.to_uint8(data.arrays["x_train"][:5], "mnist") / 255.0,
                               np.asarray(data.arrays["x_train"][:5]) * 0.3081 + 0.1307, atol=1e-5)
    pool_x, pool_y = E.nonmember_pool("mnist", DATA, used)
    assert pool_x.shape[0] >= 60000 - used.shape[0]
    seen = {r.tobytes() for r in used}
    assert not any(r.tobytes() in seen for r in pool_x[:: 50])
    classes = np.arange(3)
    cands, mask = E.nonmember_candidates(pool_x, pool_y, classes, np.array([4, 0, 2]), 5, np.random.default_rng(0))
    assert mask.sum(1).tolist() == [4, 0, 2] and cands.shape == (3, 5, 28, 28, 1)
    with pytest.raises(ValueError, match="non-members needed"):
        E.nonmember_candidates(pool_x[:10], pool_y[:10], np.array([0]), np.array([50]), 50, np.random.default_rng(0))


def test_pick_best_uses_the_evaluator_then_the_target_label_rate():
    acc = np.array([[0.5, 0.2, 0.3], [0.4, 0.2, 0.6], [0.5, 0.1, 0.1]])  # [attackers, seeds]
    rate = np.array([[0.1, 0.5, 0.0], [0.9, 0.4, 0.0], [0.3, 0.9, 0.0]])
    assert E.pick_best(acc, rate).tolist() == [2, 0, 1]  # seed 0: tie on acc broken by the rate


def test_attack_rows_compare_private_nonmember_and_public_references(tmp_path):
    """The attack experiment's smoke profile, end to end (tests/test_configs.py leaves its smoke run to this test:
    CI time), read row by row; and every claim of the experiment finds the column it sweeps."""
    spec = compose_run(["experiment=labelavg/attack", "profile=smoke", f"paths.checkpoint_dir={tmp_path / 'ck'}"])
    ctx = build_context(spec, out_dir=tmp_path)
    sched, acfg = ctx.params.fd, ctx.params.attack
    assert set(acfg.attackers) == {"init", "zo", "sign", "whitebox", "surrogate"} and list(ctx.policies) == ["labelavg"]
    df = to_frame(spec.fn(ctx), trace=getattr(ctx.trace, "name", "none"), hardware=ctx.hardware.name)
    assert np.isfinite(df["value"]).all()
    attackers = set(df["attacker"])
    assert {"init", "zo", "sign", "whitebox", "surrogate", "public_mean", "public_nearest", "best"} <= attackers
    psnr = df[df["metric"] == "psnr_db"]
    assert set(psnr["reference"]) == {"private", "nonmember"}
    assert not psnr.duplicated(["attacker", "reference", "seed"]).any()
    # the advantage is the per-seed difference of the two references
    for a in ("zo", "public_mean"):
        p = psnr[psnr["attacker"] == a].pivot(index="seed", columns="reference", values="value")
        adv = df[(df["metric"] == "membership_adv_db") & (df["attacker"] == a)].set_index("seed")["value"]
        np.testing.assert_allclose(adv.loc[p.index], p["private"] - p["nonmember"], atol=1e-9)
    # the best rows are, seed by seed, the rows of the chosen server attacker
    chosen = df[df["metric"] == "chosen_as_best"]
    assert set(chosen["attacker"]) == {"zo", "sign", "surrogate"}
    assert (chosen.groupby("seed")["value"].sum() == 1).all()
    for seed, g in chosen.groupby("seed"):
        pick = g.loc[g["value"] == 1, "attacker"].iloc[0]
        acc = df[(df["metric"] == "attack_acc") & (df["seed"] == seed)].set_index("attacker")["value"]
        assert float(acc["best"]) == float(acc[pick])
    sur = df[df["attacker"] == "surrogate"]
    assert float(sur[sur["metric"] == "transcript_pairs"]["value"].iloc[0]) == sched.rounds * sched.public_batch
    assert float(sur[sur["metric"] == "queries"]["value"].iloc[0]) == 0
    assert sur[sur["metric"] == "surrogate_agreement"]["value"].between(0, 1).all()
    assert (tmp_path / "attack_quality.png").exists()
    # what tests/test_configs.py::test_experiment_smoke_run checks of the other experiments' smoke runs
    pcfg = compose(["paper=labelavg"]).paper
    _, claims = load_claims(Path(importlib.import_module(pcfg.module).__file__).parent / pcfg.claims)
    counted = [c for c in claims if c.experiment == "attack" and not c.skip]
    assert counted
    for c in counted:
        v = evaluate(c, df, "labelavg")
        assert "'over' column" not in v.note, f"{c.id}: {v.note}"


def test_accuracy_runs_reference_policies_on_fewer_seeds_and_central_once(tmp_path):
    # one policy, one compile (CI time): central, on the first of the run's two seeds
    params = AccuracyParams(datasets=["mnist"], alphas=[0.1, 1.0], fd=TINY, policy_seeds={"central": 1})
    ctx = _ctx(tmp_path, params, ["central"])
    df = pd.DataFrame(E.accuracy(ctx))
    acc = df[df["metric"] == "test_acc"]
    assert set(df["policy"]) == {"central"} and sorted(df["seed"].unique()) == [0]
    c = acc.pivot(index="seed", columns="alpha", values="value")
    assert c.shape == (1, 2)  # a row per alpha
    np.testing.assert_array_equal(c[0.1], c[1.0])  # pooled data: alpha plays no part
    assert E.policy_seed_count(params, "central", 10) == 1 and E.policy_seed_count(params, "dsfl", 10) == 10
    with pytest.raises(ValueError, match="policy_seeds"):
        AccuracyParams(policy_seeds={"fedmd": 0})
