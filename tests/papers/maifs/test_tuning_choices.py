"""PPO tuning of the learned families (experiment ``tuning``): the selection rule on hand-made rows, and the policy
configs carrying the committed tuning's pick.

The tuning is deterministic given its config and the code (tuning seeds disjoint from the reported ones), so a
policy config equal to the committed pick is what a rerun would choose; a mismatch means a learned policy is
reported at a setting its own tuning did not pick.
"""

from __future__ import annotations

import pandas as pd
import pytest
from omegaconf import OmegaConf

from mlsys_repro.common.repro.config import policy_node
from mlsys_repro.papers.maifs.experiments import pick_grid_point
from mlsys_repro.papers.maifs.schemas import MaifsParams
from tests.conftest import ROOT

FAMILIES = {"maifs": ("maifs", "maifs_cold", "maifs_no_attention", "maifs_no_cg", "maifs_fixed_alloc", "maifs_prior"),
            "dl2": ("dl2",)}


def _rows(values: dict[tuple[float, float], list[float]], policy: str = "maifs") -> pd.DataFrame:
    return pd.DataFrame([{"policy": policy, "seed": s, "metric": "check_jct_h", "value": v, "lr": lr, "ent_coef": e}
                         for (lr, e), vs in values.items() for s, v in enumerate(vs)])


def test_pick_is_the_lowest_seed_mean_check_jct():
    rows = _rows({(3e-4, 0.01): [1.2, 1.2], (1e-3, 0.01): [1.0, 1.3], (1e-3, 0.001): [1.1, 1.1]})
    assert pick_grid_point(rows, "maifs") == (1e-3, 0.001)  # 1.1 < 1.15 < 1.2: the mean, not the best seed


def test_pick_breaks_ties_by_grid_order_and_ignores_other_policies_and_metrics():
    rows = pd.concat([_rows({(3e-4, 0.01): [1.0], (1e-3, 0.01): [1.0]}),
                      _rows({(1e-3, 0.01): [0.1]}, policy="dl2"),
                      _rows({(1e-3, 0.01): [0.1]}).assign(metric="check_jct_prior_h")])
    assert pick_grid_point(rows, "maifs") == (3e-4, 0.01)
    with pytest.raises(ValueError, match="no check_jct_h rows for policy 'tetris'"):
        pick_grid_point(rows, "tetris")


def test_bad_tuning_grid_is_a_clear_error():
    with pytest.raises(ValueError, match="tune_lr must be positive"):
        MaifsParams(tune_lr=[0.0])
    with pytest.raises(ValueError, match="tune_ent_coef non-negative"):
        MaifsParams(tune_ent_coef=[-0.1])


def _chosen() -> dict[str, tuple[float, float]]:
    path = ROOT / "results/maifs/tuning.csv"
    if not path.exists():
        pytest.skip("no committed results/maifs/tuning.csv")
    d = pd.read_csv(path)
    wide = d[d.metric.isin(["chosen_lr", "chosen_ent_coef"])].pivot_table(index="policy", columns="metric",
                                                                          values="value", aggfunc="first")
    return {p: (float(r.chosen_lr), float(r.chosen_ent_coef)) for p, r in wide.iterrows()}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_policy_configs_carry_the_committed_pick(family):
    want = _chosen()[family]
    got = {}
    for name in FAMILIES[family]:
        pol = OmegaConf.to_object(policy_node("maifs", name))
        got[name] = (float(pol.lr), float(pol.ent_coef))
    wrong = {n: g for n, g in got.items() if g != want}
    assert not wrong, f"tuning picked (lr, ent_coef) = {want} for {family}; configured: {wrong}"


def test_smoke_grid_point_is_the_maifs_policys_own():
    """The tuning smoke run trains maifs at one grid point; at maifs's own (lr, ent_coef) its trainer (lr and
    ent_coef are static in the compiled program) is the one the other maifs smoke runs compiled (CI time: a
    stale point recompiles the PPO chunk)."""
    from mlsys_repro.common.repro.config import compose, experiment_node

    node = experiment_node(compose(["experiment=maifs/tuning", "profile=smoke"]))
    assert list(node.policies) == ["maifs"]
    pol = OmegaConf.to_object(policy_node("maifs", "maifs"))
    grid = [(float(lr), float(e)) for lr in node.params.tune_lr for e in node.params.tune_ent_coef]
    assert grid == [(float(pol.lr), float(pol.ent_coef))]
