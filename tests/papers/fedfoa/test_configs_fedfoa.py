"""Config-level bad input: mismatched projector dimensions and parameter averaging on mixed encoders."""

from __future__ import annotations

import pytest

from mlsys_repro.common.repro.config import ConfigError, build_context, compose, compose_run
from mlsys_repro.papers.fedfoa.federation import ConfigurationError
from mlsys_repro.papers.fedfoa.fedssl_runs import make_shape, policy_knobs


def test_mismatched_projector_dims_fail_at_compose():
    mix = "[{arch: cnn_s, count: 2, proj_dim: 64}, {arch: cnn_l, count: 2, proj_dim: 32}]"
    with pytest.raises(ConfigError, match="projector output dimension"):
        compose(["experiment=fedfoa/hetero", f"hardware.clients={mix}"])


def test_fedavg_on_heterogeneous_federation_fails_before_training():
    ctx = build_context(compose_run(["experiment=fedfoa/hetero", "profile=smoke"]))
    shape = make_shape(ctx.hardware, ctx.params, 3, kd_path=True)
    fedavg = compose(["policy=fedfoa/fedavg"]).policy
    from omegaconf import OmegaConf

    with pytest.raises(ConfigurationError, match="homogeneous"):
        policy_knobs(shape, OmegaConf.to_object(fedavg), ctx.params)


def test_unknown_method_and_bad_params_fail_at_compose():
    with pytest.raises(ConfigError, match="method"):
        compose(["experiment=fedfoa/headline", "policy=fedfoa/local", "policy.method=fedprox"])
    with pytest.raises(ConfigError, match="image_size"):
        compose(["experiment=fedfoa/headline", "experiment.params.image_size=18"])
