"""Agents learn on a tiny deterministic problem: BDQ beats random; flat DQN and factorised PPO run and improve."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mlsys_repro.papers.greenplace import dqn_agents, ppo_agent
from mlsys_repro.papers.greenplace.baselines import random_policy
from mlsys_repro.papers.greenplace.env import PlacementEnv
from mlsys_repro.papers.greenplace.evaluate import rollouts, summarise
from mlsys_repro.papers.greenplace.schemas import PlacementPolicy
from tests.papers.greenplace.tiny import T, tiny_params

ENV = PlacementEnv()


def _params():
    # fixed 10-frame jobs every ~2 s at one site; JCT only (w = 0): the cloud is 6x faster than the site
    return tiny_params(rate=jnp.full(T, 0.5, jnp.float32), w_energy=jnp.float32(0.0), episode_jobs=32)


def _evaluate(act, params, pp=None):
    keys = jax.vmap(jax.random.key)(jnp.arange(2, dtype=jnp.uint32))
    return summarise(rollouts(act, params, keys, np.array([0, 5]), 64, pp))


@pytest.mark.slow
def test_bdq_beats_random_and_flat_dqn_learns():
    p = _params()
    rnd = _evaluate(lambda pp, k, o, s, q: random_policy(k, o, s, q), p)
    for kind in ("bdq", "flat_dqn"):
        # the recipe the configs use (conf/policy/greenplace/{bdq,flat_dqn}.yaml), at the tiny problem's scale
        pol = PlacementPolicy(name=kind, kind=kind, lr=1e-3, batch_size=64, buffer_size=4000, learning_starts=256,
                              torso=[64, 64], head_hidden=32, eps_decay_frac=0.5, n_step=3, target_tau=0.01,
                              explore="top_k", top_k=4, action_features=True, cut_conditioned=kind == "bdq")
        train = dqn_agents.make_train(ENV, p, pol, iterations=400, num_envs=8)
        keys = jax.vmap(jax.random.key)(jnp.arange(2, dtype=jnp.uint32))
        ts, curves = jax.jit(jax.vmap(train, in_axes=(0, 0, None)))(keys, jnp.zeros(2), p)
        assert np.isfinite(np.asarray(curves["loss"])).all()
        got = _evaluate(train.act, p, dqn_agents.policy_params(ts))
        assert (got["objective"] < rnd["objective"]).all(), (kind, got["objective"], rnd["objective"])
        assert got["rejected_frac"].max() == 0.0


@pytest.mark.slow
def test_factorised_ppo_improves_on_its_start():
    p = _params()
    pol = PlacementPolicy(name="ppo", kind="ppo", lr=3e-3, rollout_len=16, epochs=4, minibatches=4, torso=[64, 64])
    train = ppo_agent.make_train(ENV, p, pol, iterations=16 * 40, num_envs=8)
    keys = jax.vmap(jax.random.key)(jnp.arange(2, dtype=jnp.uint32))
    ts, curves = jax.jit(jax.vmap(train, in_axes=(0, 0, None)))(keys, jnp.zeros(2), p)
    obj = np.asarray(curves["objective"])
    assert np.isfinite(obj).all() and obj[:, -5:].mean() < obj[:, :5].mean()
    got = _evaluate(train.act, p, ppo_agent.policy_params(ts))
    assert got["rejected_frac"].max() == 0.0


def test_factorised_sampling_is_valid_and_log_probs_sum_heads():
    from mlsys_repro.common.rl.env import BranchMask, is_valid

    mask = BranchMask(jnp.array([True, False, True]),
                      (jnp.array([[1, 0], [1, 1], [0, 1]], bool), jnp.array([[1, 1], [1, 1], [1, 0]], bool)))
    logits = (jnp.zeros(3), jnp.zeros(2), jnp.zeros(2))
    acts = jax.vmap(lambda k: ppo_agent.sample(k, logits, mask))(jax.random.split(jax.random.key(0), 200))
    assert bool(jax.vmap(lambda a: is_valid(a, mask))(acts).all())
    lp, ent = ppo_agent.log_prob_entropy(logits, mask, jnp.array([0, 0, 1]))
    assert float(lp) == pytest.approx(np.log(0.5) + np.log(1.0) + np.log(0.5))
    assert float(ent) == pytest.approx(np.log(2) + 0.0 + np.log(2))


def test_training_resumes_bit_identically_after_a_kill(tmp_path):
    import functools

    from mlsys_repro.common.repro.checkpoint import Checkpointer, run_chunked
    from tests.fixtures.dying_checkpointer import DiesAfterFirstSave, Killed

    p = _params()
    pol = PlacementPolicy(name="bdq", kind="bdq", batch_size=16, buffer_size=256, learning_starts=16,
                          target_period=8, torso=[16], head_hidden=8)
    train = dqn_agents.make_train(ENV, p, pol, iterations=24, num_envs=2)
    start = jax.jit(train.start)
    advance = jax.jit(functools.partial(train.advance, steps=8))  # 3 chunks of 8 iterations

    def run(ck):
        return run_chunked(lambda s: advance(s, jnp.float32(0.0), p), start(jax.random.key(0), 0.0, p), 3, ck)

    whole = run(None)
    with pytest.raises(Killed):
        run(DiesAfterFirstSave(tmp_path / "ck"))
    resumed = run(Checkpointer(tmp_path / "ck"))
    for a, b in zip(jax.tree.leaves(whole), jax.tree.leaves(resumed), strict=True):
        a, b = np.asarray(jax.random.key_data(a) if jnp.issubdtype(a.dtype, jax.dtypes.prng_key) else a), \
            np.asarray(jax.random.key_data(b) if jnp.issubdtype(b.dtype, jax.dtypes.prng_key) else b)
        np.testing.assert_array_equal(a, b)
