"""mlsys_repro.common.rl.ppo: GAE vs a plain-Python reference, surrogate/value/entropy known answers, minibatching."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.rl import ppo


def gae_reference(r, v, d, last_v, gamma, lam, disc=None):
    T = len(r)
    adv = np.zeros(T)
    nxt = 0.0
    for t in reversed(range(T)):
        nv = last_v if t == T - 1 else v[t + 1]
        g = gamma if disc is None else disc[t]
        nd = 1.0 - d[t]
        delta = r[t] + g * nv * nd - v[t]
        nxt = delta + g * lam * nd * nxt
        adv[t] = nxt
    return adv, adv + v


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 12), st.floats(0.5, 1.0), st.floats(0.0, 1.0), st.integers(0, 10_000))
def test_gae_matches_reference(T, gamma, lam, seed):
    rng = np.random.default_rng(seed)
    r, v = rng.normal(size=T), rng.normal(size=T)
    d = (rng.random(T) < 0.3).astype(float)
    disc = rng.uniform(0.5, 1.0, size=T)
    lv = float(rng.normal())
    for dd in (None, disc):
        a, ret = ppo.gae(r, v, d, lv, gamma, lam, None if dd is None else jnp.asarray(dd))
        ea, eret = gae_reference(r, v, d, lv, gamma, lam, dd)
        np.testing.assert_allclose(np.asarray(a), ea, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(np.asarray(ret), eret, rtol=1e-4, atol=1e-4)


def test_gae_lambda_one_is_discounted_return_minus_value():
    r = np.array([1.0, 2.0, 3.0])
    v = np.array([0.5, 0.1, -0.2])
    adv, ret = ppo.gae(r, v, np.zeros(3), 10.0, gamma=0.5, lam=1.0)
    expect = np.array([1 + 0.5 * 2 + 0.25 * 3 + 0.125 * 10, 2 + 0.5 * 3 + 0.25 * 10, 3 + 0.5 * 10])
    np.testing.assert_allclose(np.asarray(ret), expect, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(adv), expect - v, rtol=1e-6)


def test_gae_done_stops_bootstrap_and_batch_axes():
    r = jnp.ones((4, 3, 2))
    v = jnp.zeros((4, 3, 2))
    d = jnp.zeros((4, 3, 2)).at[1].set(1.0)
    adv, _ = ppo.gae(r, v, d, jnp.full((3, 2), 100.0), gamma=1.0, lam=1.0)
    # steps 0,1 form an episode (return 2, 1); steps 2,3 bootstrap the last value 100
    np.testing.assert_allclose(np.asarray(adv[:, 0, 0]), [2.0, 1.0, 102.0, 101.0])


def test_clipped_surrogate_known_answers():
    adv = jnp.array([1.0, -1.0])
    loss, kl, cf = ppo.clipped_surrogate(jnp.zeros(2), jnp.zeros(2), adv, 0.2)
    assert float(loss) == pytest.approx(0.0) and float(kl) == pytest.approx(0.0) and float(cf) == 0.0
    # ratio e^1 > 1.2 with positive advantage is clipped to 1.2
    loss, _, cf = ppo.clipped_surrogate(jnp.array([1.0]), jnp.array([0.0]), jnp.array([2.0]), 0.2)
    assert float(loss) == pytest.approx(-1.2 * 2.0) and float(cf) == 1.0
    # negative advantage: min picks the unclipped (more pessimistic) e^1 * -1
    loss, _, _ = ppo.clipped_surrogate(jnp.array([1.0]), jnp.array([0.0]), jnp.array([-1.0]), 0.2)
    assert float(loss) == pytest.approx(math.e, rel=1e-5)


def test_value_loss_clipping_is_pessimistic():
    v, v_old, ret = jnp.array([2.0]), jnp.array([0.0]), jnp.array([2.0])
    assert float(ppo.value_loss(v, v_old, ret)) == 0.0
    # clipped prediction 0.2 is far from the return: pessimistic max
    assert float(ppo.value_loss(v, v_old, ret, clip_eps=0.2)) == pytest.approx(0.5 * 1.8 ** 2)


def test_masked_categorical():
    logits = jnp.array([[0.0, 0.0, 0.0, 0.0]])
    assert float(ppo.categorical_entropy(logits)[0]) == pytest.approx(math.log(4), rel=1e-6)
    mask = jnp.array([[True, False, True, False]])
    assert float(ppo.categorical_entropy(logits, mask)[0]) == pytest.approx(math.log(2), rel=1e-6)
    assert float(ppo.categorical_log_prob(logits, jnp.array([2]), mask)[0]) == pytest.approx(math.log(0.5))
    samples = jax.vmap(lambda k: ppo.categorical_sample(k, logits[0], mask[0]))(
        jax.random.split(jax.random.key(0), 256))
    assert set(np.unique(np.asarray(samples)).tolist()) <= {0, 2}
    assert int(ppo.categorical_mode(jnp.array([5.0, 1.0]), jnp.array([False, True]))) == 1


def test_ppo_loss_combines_terms_and_masks():
    n = 6
    z = jnp.zeros(n)
    info = ppo.ppo_loss(z, z, jnp.ones(n), z + 1.0, z, z, jnp.ones(n), vf_coef=0.5, ent_coef=0.1)
    assert float(info.total) == pytest.approx(-1.0 + 0.5 * 0.5 - 0.1)
    mask = jnp.array([1, 1, 0, 0, 0, 0], bool)
    info = ppo.ppo_loss(z, z, jnp.array([1.0, 1.0, 9, 9, 9, 9]), z, z, z, z, mask=mask)
    assert float(info.policy) == pytest.approx(-1.0)


def test_minibatches_partition_the_batch():
    tree = {"x": jnp.arange(12), "y": jnp.arange(24).reshape(12, 2)}
    mb = ppo.minibatches(jax.random.key(1), tree, 3)
    assert mb["x"].shape == (3, 4) and mb["y"].shape == (3, 4, 2)
    assert sorted(np.asarray(mb["x"]).ravel().tolist()) == list(range(12))
    np.testing.assert_array_equal(np.asarray(mb["y"])[..., 0], 2 * np.asarray(mb["x"]))
    with pytest.raises(ValueError, match="divisible"):
        ppo.minibatches(jax.random.key(1), tree, 5)
    flat = ppo.flatten_batch({"a": jnp.zeros((3, 4, 5))})
    assert flat["a"].shape == (12, 5)


def test_jit_and_vmap():
    f = jax.jit(jax.vmap(lambda r: ppo.gae(r, jnp.zeros(5), jnp.zeros(5), 0.0, 0.9, 0.9)[0]))
    out = f(jnp.ones((3, 5)))
    assert out.shape == (3, 5) and bool(jnp.all(jnp.isfinite(out)))
    assert float(ppo.normalize(jnp.array([1.0, 2.0, 3.0])).mean()) == pytest.approx(0.0, abs=1e-6)
