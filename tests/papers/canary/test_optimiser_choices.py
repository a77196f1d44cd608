"""The training experiments carry each policy's optimiser as the committed optimiser_sweep chose it.

The sweep is deterministic given its config and the code (tuning seeds disjoint from the reported ones), so a
config that equals the committed sweep's choice is what a rerun of the sweep would choose; a mismatch means a
policy was reported at a setting its own tuning did not pick (the 2026-12-04 regeneration found four).
"""

from __future__ import annotations

import pandas as pd
import pytest
import yaml

from tests.conftest import ROOT

TRAINING = ("tta_bcube9", "tta_bcube27", "ablation", "comm_ratio")
# ablations of Canary's own asynchronous exchange that are not swept and take Canary's choice (README, budget)
REUSE_CANARY = ("canary_1nic", "canary_nopipe")


def _optimisers(name: str) -> dict[str, list[float]]:
    cfg = yaml.safe_load((ROOT / "conf/experiment/canary" / f"{name}.yaml").read_text())
    return cfg["experiment"]["params"]["optimiser"]


def _chosen() -> dict[str, tuple[float, float]]:
    path = ROOT / "results/canary/optimiser_sweep.csv"
    if not path.exists():
        pytest.skip("no committed optimiser_sweep.csv")
    d = pd.read_csv(path)
    d = d[d.metric.isin(["chosen_lr", "chosen_momentum"]) & (d.bandwidth_gbps == 1.0)]
    wide = d.pivot_table(index="policy", columns="metric", values="value", aggfunc="first")
    return {p: (float(r.chosen_lr), float(r.chosen_momentum)) for p, r in wide.iterrows()}


@pytest.mark.parametrize("name", TRAINING)
def test_training_configs_use_the_sweeps_choice(name):
    chosen = _chosen()
    wrong = {}
    for policy, (lr, mom) in _optimisers(name).items():
        if "@" in policy:  # per-NIC-rate entries: the sweep runs at 1 Gbps only
            continue
        want = chosen["canary"] if policy in REUSE_CANARY else chosen.get(policy)
        assert want is not None, f"{name}: {policy} has an optimiser entry but the sweep did not tune it"
        if (float(lr), float(mom)) != want:
            wrong[policy] = ((lr, mom), want)
    assert not wrong, f"{name}: configured vs the sweep's choice: {wrong}"
