"""Invalid hardware profiles, policies and params are rejected at compose time with the key named."""

from __future__ import annotations

import pytest

from mlsys_repro.common.repro.config import compose
from mlsys_repro.common.repro.errors import ConfigError

HEADLINE = ["experiment=petrel/heterogeneity", "profile=smoke"]


@pytest.mark.parametrize("override, match", [
    ("hardware.class_speeds=[1.0,0.0,0.5,0.25]", "zero would never finish"),
    ("hardware.class_speeds=[1.0,-2.0,0.5,0.25]", "class_speeds"),
    ("hardware.ps_bandwidth_gbps=-1.0", "ps_bandwidth_gbps"),
    ("hardware.worker_bandwidth_gbps=0", "worker_bandwidth_gbps"),
    ("hardware.num_workers=3", "more communities than workers"),
    ("hardware.prior_communities=20", "more communities than workers"),
    ("hardware.latency_us=-5", "latency_us"),
    ("hardware.straggler_prob=1.5", "straggler_prob"),
    ("hardware.class_fractions=[0.5,0.5]", "class_fractions"),
    ("hardware.base_step_s=0", "base_step_s"),
    ("hardware.num_workers=eight", "num_workers"),
    ("hardware.bandwidth=3", "bandwidth"),
    ("hardware.ps_shards=0", "ps_shards"),
    ("hardware.permute_speeds_at_steps=-1", "permute_speeds_at_steps"),
])
def test_bad_hardware_rejected_at_compose(override, match):
    with pytest.raises(ConfigError, match=match):
        compose([*HEADLINE, override])


@pytest.mark.parametrize("override, match", [
    ("experiment.params.target_accuracy=1.5", "target_accuracy"),
    ("experiment.params.lr=-0.1", "lr"),
    ("experiment.params.speed_ratios=[0.5]", "speed_ratios"),
    ("experiment.params.worker_counts=[0]", "worker_counts"),
    ("experiment.params.global_batch=4", "global_batch"),
    ("experiment.params.engine_mode=pmap", "engine_mode"),
    ("experiment.params.dataset=imagenet", "dataset"),
])
def test_bad_params_rejected_at_compose(override, match):
    with pytest.raises(ConfigError, match=match):
        compose(["experiment=petrel/scalability", "profile=default", override])


@pytest.mark.parametrize("override, match", [
    ("policy.kind=gossip", "policy.kind"),
    ("policy.staleness=-1", "staleness"),
    ("policy.grouping=spectral", "grouping"),
    ("policy.grouping=index", "only for kind hier_bsp"),
    ("policy.a3c.episodes=0", "episodes"),
    ("policy.a3c.gamma=2", "gamma"),
])
def test_bad_policy_rejected_at_compose(override, match):
    with pytest.raises(ConfigError, match=match):
        compose([*HEADLINE, "policy=petrel/casp", override])


def test_sweep_to_fewer_workers_than_communities_fails_clearly():
    from mlsys_repro.papers.petrel.hardware import with_workers
    from mlsys_repro.papers.petrel.schemas import PSClusterHardware

    hw = PSClusterHardware(name="x", num_workers=8)  # 4 speed classes -> 4 prior communities
    assert with_workers(hw, 4).num_workers == 4
    with pytest.raises(ValueError, match="more communities than workers"):
        with_workers(hw, 3)


def test_fixed_k_policy_with_more_communities_than_workers_fails():
    from mlsys_repro.papers.petrel.protocols import make_protocol
    from mlsys_repro.papers.petrel.schemas import SyncPolicy

    pol = SyncPolicy(name="c", kind="casp", grouping="kmeans", num_communities=9)
    with pytest.raises(ValueError, match="more communities than workers"):
        make_protocol(pol, 8, 4, seed=0)


def test_shipped_profiles_compose():
    for hw in ("ps_4class_1gbe", "ps_gavel_1gbe"):
        cfg = compose([*HEADLINE, f"hardware={hw}"])
        assert cfg.hardware.name == hw
