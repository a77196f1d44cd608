"""The experiments' conditions: sketch arithmetic rates (`sketch_gbps`), per-policy run lengths (`iterations_factor`)
and bml_overlap, wired through `train_and_time` with the real configs and discrete-event model, a stub dataset and a
stub trainer (no training: the numerics have their own tests)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import yaml

from mlsys_repro.common.models.data import ImageData
from mlsys_repro.common.repro.config import build_context, compose_run
from mlsys_repro.papers.canary import experiments
from mlsys_repro.papers.canary.schemas import (
    BCubeCluster,
    CommRatioParams,
    ExchangePolicy,
    OptimiserSweepParams,
    TrainParams,
)
from tests.conftest import ROOT

GPU_GBPS, CPU_GBPS = 100.0, 1.17


def _exp(name: str) -> dict:
    return yaml.safe_load((ROOT / "conf/experiment/canary" / f"{name}.yaml").read_text())["experiment"]


def test_params_validation_and_run_lengths():
    p = TrainParams(iterations=240, eval_every=5, iterations_factor={"ako": 3}, sketch_gbps=[GPU_GBPS, CPU_GBPS])
    assert (p.iterations_for("ako"), p.iterations_for("canary")) == (720, 240)
    assert TrainParams().sketch_gbps == [0.0]  # default: free sketch arithmetic (the schedules as before)
    for bad, match in ((dict(sketch_gbps=[]), "sketch_gbps"), (dict(sketch_gbps=[1.0, 1.0]), "sketch_gbps"),
                       (dict(sketch_gbps=[-1.0]), "sketch_gbps"), (dict(iterations_factor={"ako": 0}), "ako"),
                       (dict(iterations_factor={"ako": 1.5}), "ako"),
                       (dict(iterations_factor={"ako": 2}, accuracy_pairs=["ako:bml"]), "run lengths")):
        with pytest.raises(ValueError, match=match):
            TrainParams(**bad)
    with pytest.raises(ValueError, match="one sketch rate"):
        OptimiserSweepParams(sketch_gbps=[0.0, GPU_GBPS])
    with pytest.raises(ValueError, match="same run length"):
        OptimiserSweepParams(iterations_factor={"ako": 3})
    with pytest.raises(ValueError, match="homogeneous"):
        CommRatioParams(slowdowns=[2.0, 1.0], sketch_gbps=[GPU_GBPS, CPU_GBPS])


def test_compute_model_and_protocol_spec_carry_the_new_knobs():
    hw = BCubeCluster(workload="resnet50")
    assert experiments.compute_model(hw).sketch_bytes_per_s == 0.0
    assert experiments.compute_model(hw, CPU_GBPS).sketch_bytes_per_s == pytest.approx(1.17e9)
    assert experiments.protocol_spec(ExchangePolicy(protocol="bml", overlap=True)).overlap


def test_configs_state_the_two_rates_the_overlap_baseline_and_the_ako_cap():
    # both rates where the headline is read (GPU-class first: the counted reading); the claim boundary at the
    # GPU-class rate only (budget)
    p = _exp("tta_bcube9")["params"]
    assert p["sketch_gbps"] == [GPU_GBPS, CPU_GBPS] and p["iterations_factor"] == {"ako": 3}
    assert _exp("comm_ratio")["params"]["iterations_factor"] == {"ako": 3}
    for name in ("comm_ratio", "tta_bcube27", "ablation", "accuracy_cost", "sketch_accuracy"):
        assert _exp(name)["params"]["sketch_gbps"] == [GPU_GBPS], name
    for name in ("optimiser_sweep", "optimiser_sweep27"):
        assert _exp(name)["params"]["sketch_gbps"] == [0.0], name
    assert _exp("ablation")["num_seeds"] == 10
    # bml_overlap runs wherever bml does, except the sweeps (its numerics are bml's, so is its optimiser choice)
    for path in sorted((ROOT / "conf/experiment/canary").glob("*.yaml")):
        exp = yaml.safe_load(path.read_text())["experiment"]
        if "bml" in exp["policies"] and not path.stem.startswith("optimiser_sweep"):
            assert "bml_overlap" in exp["policies"], path.stem
            opt = exp["params"].get("optimiser", {})
            assert opt.get("bml_overlap") == opt.get("bml"), path.stem


def _stub_data(*_, **__) -> ImageData:
    x = np.zeros((64, 28, 28, 1), np.float32)
    y = np.zeros(64, np.int32)
    y[0] = 9
    return ImageData("stub", x, y, x[:16], y[:16])


class _StubTrainer:
    """``make_train`` stand-in: accuracy 0.5 at iteration 0, 0.95 from the first evaluation on; records calls."""

    def __init__(self):
        self.built: list[tuple[int, str]] = []

    def __call__(self, setup, ex):
        self.built.append((setup.iterations, ex.kind))

        def train(seeds, lr=None, momentum=None):
            acc = np.full((len(seeds), setup.iterations // setup.eval_every + 1), 0.95)
            acc[:, 0] = 0.5
            return {"acc": acc}

        return train


@pytest.fixture
def stubbed(monkeypatch):
    trainer = _StubTrainer()
    sims = []
    real = experiments.simulate

    def counting(spec, *a, **kw):
        sims.append(spec)
        return real(spec, *a, **kw)

    monkeypatch.setattr(experiments, "load_images_trace", _stub_data)
    monkeypatch.setattr(experiments, "make_train", trainer)
    monkeypatch.setattr(experiments, "simulate", counting)
    return trainer, sims


def _context(name: str, tmp_path, **params):
    ctx = build_context(compose_run([f"experiment=canary/{name}", "profile=default"]), out_dir=tmp_path)
    return replace(ctx, num_seeds=2, params=replace(ctx.params, **params))


def test_tta_rows_carry_each_sketch_rate_and_ako_runs_longer(stubbed, tmp_path):
    trainer, sims = stubbed
    ctx = _context("tta_bcube9", tmp_path, iterations=20, eval_every=10, bandwidths_gbps=[1.0], des_max_simulated=10)
    df = pd.DataFrame(experiments.tta_bcube9(ctx))
    # the three 8-bit policies are simulated at each rate, the five fp32 ones once for both
    assert len(sims) == 3 * 2 + 5
    assert set(df.sketch_gbps) == {GPU_GBPS, CPU_GBPS}
    tta = df[df.metric == "tta_s"].groupby(["policy", "sketch_gbps"]).value.mean().unstack()
    assert set(tta.index) == set(ctx.policies)
    for fp32 in ("bml", "bml_overlap", "ako", "ps", "ring"):
        assert tta.loc[fp32, GPU_GBPS] == tta.loc[fp32, CPU_GBPS]
    for sk in ("canary", "ps_sketch", "ring_sketch"):
        assert tta.loc[sk, CPU_GBPS] > tta.loc[sk, GPU_GBPS]
    assert tta.loc["bml_overlap", GPU_GBPS] < tta.loc["bml", GPU_GBPS]
    busy = df[df.metric == "sketch_s_per_iter"].groupby(["policy", "sketch_gbps"]).value.first()
    assert busy[("bml", GPU_GBPS)] == 0.0
    assert busy[("canary", CPU_GBPS)] == pytest.approx(busy[("canary", GPU_GBPS)] * GPU_GBPS / CPU_GBPS, rel=1e-9)
    runs = df[df.metric == "iterations_run"].groupby("policy").value.first()
    assert runs["ako"] == 60 and runs["canary"] == 20 and (60, "ako") in trainer.built
    assert {n for n, _ in trainer.built} == {20, 60}
    drop = df[df.metric == "acc_drop_pp"]
    assert sorted(drop.sketch_gbps.unique()) == [CPU_GBPS, GPU_GBPS]
    _claims_read(df, "tta_bcube9")


def test_comm_ratio_runs_the_sensitivity_rate_on_homogeneous_workers_only(stubbed, tmp_path):
    _, _ = stubbed
    ctx = _context("comm_ratio", tmp_path, iterations=20, eval_every=10, comm_ratios=[1.0], des_max_simulated=10,
                   sketch_gbps=[GPU_GBPS, CPU_GBPS])  # the default profile runs the first only (budget)
    ctx = replace(ctx, policies={k: ctx.policies[k] for k in ("canary", "bml_overlap")})
    df = pd.DataFrame(experiments.comm_ratio(ctx))
    rates = df.groupby("slowdown").sketch_gbps.unique()
    assert sorted(rates[1.0]) == [CPU_GBPS, GPU_GBPS] and list(rates[2.0]) == [GPU_GBPS]
    _claims_read(df, "comm_ratio")


def test_the_sweep_tunes_first_rate_only_policies_at_the_first_rate_alone(stubbed, tmp_path):
    trainer, _ = stubbed
    ctx = _context("optimiser_sweep", tmp_path, iterations=20, eval_every=10, bandwidths_gbps=[1.0, 10.0],
                   lrs=[0.1], momenta=[0.0], des_max_simulated=10, first_rate_only=["canary_local"])
    ctx = replace(ctx, policies={k: ctx.policies[k] for k in ("canary", "canary_local", "bml")})
    df = pd.DataFrame(experiments.optimiser_sweep(ctx))
    chosen = df[df.metric == "chosen_lr"].groupby("policy").bandwidth_gbps.unique()
    assert sorted(chosen["canary"]) == sorted(chosen["bml"]) == [1.0, 10.0] and list(chosen["canary_local"]) == [1.0]
    assert set(df[df.policy == "canary_local"].bandwidth_gbps) == {1.0}
    with pytest.raises(ValueError, match="does not run"):
        experiments.optimiser_sweep(replace(ctx, params=replace(ctx.params, first_rate_only=["ring"])))
    with pytest.raises(ValueError, match="twice"):
        OptimiserSweepParams(first_rate_only=["canary", "canary"])


def _claims_read(df: pd.DataFrame, experiment: str) -> None:
    """Every claim on ``experiment`` selects one row per seed and condition from its rows (no 'several rows'
    schema error, no missing column) and gets a verdict."""
    from mlsys_repro.common.repro.claims import evaluate, load_claims

    df = df.assign(paper="canary", experiment=experiment)
    claims = [c for c in load_claims(ROOT / "mlsys_repro/papers/canary/claims.yaml")[1] if c.experiment == experiment]
    assert claims
    for c in claims:
        v = evaluate(c, df)
        assert "not in results" not in v.note and "damaged" not in v.note, (c.id, v.note)
        if set(c.ours.values()) | set((c.baseline or {}).values()) <= set(df.policy):
            assert v.verdict not in ("SKIPPED", "NOT_RUN"), (c.id, v.note)
