"""The training experiments carry each policy's optimiser as the committed optimiser_sweep chose it.

The sweep is deterministic given its config and the code (tuning seeds disjoint from the reported ones), so a
config that equals the committed sweep's choice is what a rerun of the sweep would choose; a mismatch means a
policy was reported at a setting its own tuning did not pick (the 2026-12-04 regeneration found four).

The sweeps choose per (policy, cluster size, NIC rate) at the rates they run (1, 10 and 25 Gbps): ``optimiser_sweep``
on 9 servers for the 9-server experiments, ``optimiser_sweep27`` on 27 servers for ``tta_bcube27``. An experiment that
runs a policy at a swept rate must train it with that rate's choice (its ``policy@<gbps>`` entry where the choice
differs from the 1 Gbps one). Rates the sweep does not run (``comm_ratio``'s 0.54 / 4.28 / 17.1 Gbps) take the 1 Gbps
choice. Both stated in the README.
"""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from tests.conftest import ROOT

# each training experiment and the sweep that tunes its cluster size
TRAINING = {"tta_bcube9": "optimiser_sweep", "tta_bcube27": "optimiser_sweep27", "ablation": "optimiser_sweep",
            "comm_ratio": "optimiser_sweep"}
# policies that are not swept and take another's choice: ablations of Canary's own asynchronous exchange (README,
# budget), and BML with backward-pass overlap, whose numerics are BML's (the fp32 mean: the same trainings, so the
# sweep's rule picks the same point)
REUSE = {"canary_1nic": "canary", "canary_nopipe": "canary", "bml_overlap": "bml"}
REFERENCE_GBPS = 1.0


def _params(name: str) -> dict:
    cfg = yaml.safe_load((ROOT / "conf/experiment/canary" / f"{name}.yaml").read_text())
    return cfg["experiment"]["params"]


def _chosen(sweep: str) -> dict[tuple[str, float], tuple[float, float]]:
    """``{(policy, gbps): (lr, momentum)}`` from the committed ``sweep``."""
    path = ROOT / "results/canary" / f"{sweep}.csv"
    if not path.exists():
        pytest.skip(f"no committed {sweep}.csv")
    d = pd.read_csv(path)
    d = d[d.metric.isin(["chosen_lr", "chosen_momentum"])]
    wide = d.pivot_table(index=["policy", "bandwidth_gbps"], columns="metric", values="value", aggfunc="first")
    return {(p, float(g)): (float(r.chosen_lr), float(r.chosen_momentum)) for (p, g), r in wide.iterrows()}


def _configured(opt: dict, policy: str, gbps: float) -> tuple[float, float]:
    """What ``TrainParams.optimiser_for(policy, gbps)`` returns for the listed policies."""
    lr, mom = opt.get(f"{policy}@{gbps:g}", opt[policy])
    return float(lr), float(mom)


@pytest.mark.parametrize("name", ["tta_bcube9", "tta_bcube27"])
def test_the_sweep_chooses_at_every_rate_and_policy_of_the_headlines(name):
    sweep = TRAINING[name]
    chosen = _chosen(sweep)
    swept = {g for _, g in chosen}
    assert set(map(float, _params(name)["bandwidths_gbps"])) <= swept, swept
    exp = yaml.safe_load((ROOT / "conf/experiment/canary" / f"{name}.yaml").read_text())["experiment"]
    tuned = {p for p, _ in chosen}
    needed = {REUSE.get(p, p) for p in exp["policies"]}
    assert needed <= tuned, f"{sweep} does not tune {needed - tuned}"


def test_the_27_server_sweep_runs_on_27_servers_with_the_9_server_grid_and_effort():
    nine, s27 = (yaml.safe_load((ROOT / "conf/experiment/canary" / f"{n}.yaml").read_text())
                 for n in ("optimiser_sweep", "optimiser_sweep27"))
    assert s27["defaults"][3] == {"override /hardware": "bcube3_2_resnet50_p100"}
    assert nine["defaults"][3] == {"override /hardware": "bcube3_1_resnet50_p100"}
    for k in ("lrs", "momenta", "iterations", "eval_every", "tuning_seed_offset"):
        assert s27["experiment"]["params"][k] == nine["experiment"]["params"][k], k
    # the 27-server sweep runs the rates tta_bcube27 runs (1 Gbps by default; all three on full), within the 9's
    assert s27["experiment"]["params"]["bandwidths_gbps"] == _params("tta_bcube27")["bandwidths_gbps"]
    assert set(s27["experiment"]["params"]["bandwidths_gbps"]) <= set(nine["experiment"]["params"]["bandwidths_gbps"])
    assert (s27["experiment"]["profiles"]["full"]["params"]["bandwidths_gbps"]
            == nine["experiment"]["params"]["bandwidths_gbps"])
    assert s27["experiment"]["num_seeds"] == nine["experiment"]["num_seeds"]
    assert s27["experiment"]["params"]["target_acc"] == _params("tta_bcube27")["target_acc"]
    assert s27["experiment"]["fn"] == nine["experiment"]["fn"]


@pytest.mark.parametrize("name", TRAINING)
def test_optimiser_entries_are_float_pairs(name):
    # the params schema types them dict[str, list[float]]: a YAML int (0) fails composition at run time
    bad = {k: v for k, v in _params(name)["optimiser"].items()
           if not (len(v) == 2 and all(isinstance(x, float) for x in v))}
    assert not bad, f"{name}: write [lr, momentum] as floats: {bad}"


@pytest.mark.parametrize("name", TRAINING)
def test_training_configs_use_the_sweeps_choice(name):
    chosen = _chosen(TRAINING[name])
    swept = {g for _, g in chosen}
    params = _params(name)
    opt = params["optimiser"]
    rates = [float(g) for g in params.get("bandwidths_gbps", [])] or [REFERENCE_GBPS]
    wrong = {}
    for key in opt:
        policy, _, at = key.partition("@")
        assert policy in opt, f"{name}: {key} overrides a policy with no base entry"
        if at:
            assert float(at) in swept and float(at) in rates, \
                f"{name}: {key} is not a rate the sweep chose at for this experiment"
            continue
        tuned = REUSE.get(policy, policy)
        for gbps in rates:
            g = gbps if gbps in swept else REFERENCE_GBPS
            want = chosen.get((tuned, g))
            assert want is not None, f"{name}: {policy} has an optimiser entry but the sweep did not tune it at {g:g}"
            have = _configured(opt, policy, gbps)
            if have != want:
                wrong[f"{policy}@{gbps:g}"] = (have, want)
    assert not wrong, f"{name}: configured vs the sweep's choice: {wrong}"
