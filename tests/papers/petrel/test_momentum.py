"""The PS's momentum SGD (issue #50's staleness-sensitive proxy): the update by hand, one worker without staleness
equals sequential momentum SGD, and on a quadratic staleness slows momentum SGD monotonically, by more than it
slows plain SGD at the same effective step."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_repro.papers.petrel.schemas import PetrelParams, PSClusterHardware, SyncPolicy
from mlsys_repro.papers.petrel.sim import ps_update
from tests.papers.petrel.conftest import run


def test_ps_update_known_answer():
    w, v, g = np.array([1.0, 2.0]), np.array([0.5, -1.0]), np.array([0.1, 0.2])
    w1, v1 = ps_update(w, v, g, 0.5, 0.9)
    np.testing.assert_allclose(v1, [0.9 * 0.5 + 0.1, 0.9 * -1.0 + 0.2])  # [0.55, -0.7]
    np.testing.assert_allclose(w1, [1.0 - 0.5 * 0.55, 2.0 + 0.5 * 0.7])  # [0.725, 2.35]


def test_zero_momentum_is_plain_sgd_bit_for_bit():
    rng = np.random.default_rng(0)
    w, v, g = (rng.standard_normal(1000).astype(np.float32) for _ in range(3))
    w1, _ = ps_update(w, v, g, np.float32(0.0125), np.float32(0.0))
    assert np.array_equal(w1, w - np.float32(0.0125) * g)  # whatever the (finite) buffer holds


def test_single_worker_asp_is_sequential_momentum_sgd(make_sim, task):
    from mlsys_repro.papers.petrel.engine import single_gradient
    from mlsys_repro.papers.petrel.sim import ShardSampler

    hw = PSClusterHardware(name="one", num_workers=1, class_speeds=[1.0])
    sim, engine = make_sim(SyncPolicy(name="asp", kind="asp"), hw=hw, seed=5, max_updates=4, max_time_s=1e9,
                           mode="map", momentum=0.9)
    run(sim, engine)
    sampler = ShardSampler(task.n_train, 1, 16, 5)
    lr, mu = np.float32(0.2), np.float32(0.9)
    w, v = task.w0.copy(), np.zeros_like(task.w0)
    for _ in range(4):  # one worker: every gradient on the latest parameters, staleness 0
        g, _ = single_gradient(task, w, sampler.next(0), mode="map")
        v = mu * v + g
        w = w - lr * v
    assert sim.staleness_max == 0 and sim.version == 4
    assert np.array_equal(sim.v, v) and np.array_equal(sim.w, w)
    # and it is not plain SGD: the momentum buffer moved the parameters further
    plain, pe = make_sim(SyncPolicy(name="asp", kind="asp"), hw=hw, seed=5, max_updates=4, max_time_s=1e9,
                         mode="map")
    run(plain, pe)
    assert not np.array_equal(plain.w, sim.w)


def _steps_to_target(lr: float, mu: float, staleness: list[int], steps: int = 400) -> list[int]:
    """Updates until f(w) = 0.5 w^2 stays below 1e-4 of f(w0) (steps + 1: never), per fixed staleness."""
    import jax.numpy as jnp

    from mlsys_repro.papers.petrel.staleness import delayed_quadratic

    loss = np.asarray(delayed_quadratic(jnp.ones(1), jnp.ones(1), lr, mu, jnp.asarray(staleness), steps=steps,
                                        max_staleness=max(staleness)))
    out = []
    for below in loss <= 1e-4 * 0.5:  # loss[t - 1] is f after update t
        above = np.flatnonzero(~below)
        out.append(steps + 1 if not below[-1] else int(above[-1]) + 2 if above.size else 1)
    return out


def test_staleness_slows_momentum_sgd_monotonically_and_more_than_plain_sgd():
    s = [0, 1, 2, 3, 4]
    mom = _steps_to_target(0.02, 0.9, s)  # effective step lr / (1 - mu) = 0.2
    assert all(b > a for a, b in zip(mom[:-1], mom[1:], strict=True)), mom  # strictly slower with every delay
    assert mom[-1] == 401  # at s = 4 it never gets there in 400 updates
    plain = _steps_to_target(0.2, 0.0, s)  # the same effective step without momentum
    assert plain[-1] <= 400  # plain SGD still converges at s = 4
    # at s = 3 plain SGD is within 2x of its undelayed speed; momentum SGD is more than 2.5x slower
    assert plain[3] <= 2 * plain[0] and mom[3] > 2.5 * mom[0]


@pytest.mark.parametrize("value", [-0.1, 1.0, float("nan")])
def test_momentum_out_of_range_is_rejected(value, make_sim):
    with pytest.raises(ValueError, match="momentum"):
        PetrelParams(momentum=value)
    with pytest.raises(ValueError, match="momentum"):
        make_sim(SyncPolicy(name="asp", kind="asp"), momentum=value)
