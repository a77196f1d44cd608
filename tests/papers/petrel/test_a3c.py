"""A3C: n-step returns, action masking, real asynchronous actor-learner threads updating shared parameters."""

from __future__ import annotations

import threading

import jax.numpy as jnp
import numpy as np
import pytest

from papers.petrel.a3c import Learner, SharedAgent, a3c_grads, feature_dim, init_params
from papers.petrel.schemas import A3CConfig, PSClusterHardware, SyncPolicy


def test_masked_actions_never_chosen():
    agent = SharedAgent(A3CConfig(), k_max=8, seed=0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(feature_dim(8)).astype(np.float32)
    acts = {agent.act(x, n_workers=3, rng=rng) for _ in range(300)}
    assert acts <= {0, 1, 2} and len(acts) == 3
    assert agent.act(x, n_workers=1) == 0


def test_n_step_returns_known_answer(monkeypatch):
    cfg = A3CConfig(t_max=2, gamma=0.5)
    agent = SharedAgent(cfg, k_max=2, seed=0)
    seen = {}

    def fake_grads(params, x, a, ret, mask, value_coef, entropy_coef):
        seen["ret"] = np.asarray(ret)
        return {k: jnp.zeros_like(v) for k, v in params.items()}, 0.0, (0.0, 0.0, 0.0)

    monkeypatch.setattr("papers.petrel.a3c.a3c_grads", fake_grads)
    monkeypatch.setattr("papers.petrel.a3c.forward", lambda p, x, xp=np: (np.zeros(2), np.asarray(4.0)))
    lr = Learner(agent, 0, np.random.default_rng(0))
    x = np.zeros(feature_dim(2), np.float32)
    lr.step(x, None, 2)
    lr.step(x, 1.0, 2)
    lr.step(x, 2.0, 2)  # t_max rewards -> learn, bootstrap V = 4
    # R1 = 2 + 0.5 * 4 = 4 ; R0 = 1 + 0.5 * 4 = 3
    np.testing.assert_allclose(seen["ret"], [3.0, 4.0])
    assert agent.log.updates == 1


def test_a3c_loss_gradient_is_finite_and_respects_mask():
    p = init_params(feature_dim(4), 16, 4, 0)
    x = jnp.ones((3, feature_dim(4)))
    mask = jnp.asarray([[True, True, False, False]] * 3)
    g, total, (pi, v, ent) = a3c_grads(p, x, jnp.asarray([0, 1, 1]), jnp.asarray([1.0, 0.5, -1.0]), mask,
                                       value_coef=0.5, entropy_coef=0.01)
    assert np.isfinite(float(total)) and ent > 0
    assert all(np.isfinite(np.asarray(v)).all() for v in g.values())
    assert np.allclose(np.asarray(g["bp"])[2:], 0.0)  # masked logits get no policy gradient


def test_actor_threads_run_asynchronously_and_share_parameters(task):
    from papers.petrel.a3c import train_a3c
    from papers.petrel.engine import GradEngine
    from papers.petrel.sim import PSSim

    cfg = A3CConfig(actors=2, episodes=4, episode_decisions=4, t_max=2, hidden=8)
    hw = PSClusterHardware(name="t", num_workers=4, class_speeds=[1.0, 0.25])
    pol = SyncPolicy(name="casp", kind="casp", max_communities=4)
    threads = set()

    def make(ep, grouper):
        threads.add(threading.current_thread().name)
        eng = GradEngine(task)
        sim = PSSim(eng, hw, grouper, seed=1000 + ep, grad_lr=0.05, batch_size=8, eval_every_grads=0,
                    max_time_s=0.4 * (1 - 1e-9), decision_every_s=0.1, ewma_alpha=pol.ewma_alpha)
        return sim, eng

    before = init_params(feature_dim(4), 8, 4, cfg.seed)
    agent = train_a3c(cfg, 4, make)
    assert threads == {"a3c-actor-0", "a3c-actor-1"}
    assert sorted(agent.log.episode) == [0, 1, 2, 3]
    assert set(agent.log.actor) <= {0, 1}
    assert agent.log.updates >= 4  # two segments per episode (3 rewarded decisions + the final one)
    assert any(not np.array_equal(before[k], agent.params[k]) for k in before)
    assert all(1 <= k <= 4 for k in agent.log.mean_k)


def test_agent_key_ignores_class_layout():
    from papers.petrel.runner import _agent_key, training_hardware
    from papers.petrel.schemas import PetrelParams

    pol, params = SyncPolicy(name="casp", kind="casp"), PetrelParams()
    a = PSClusterHardware(name="a")
    b = PSClusterHardware(name="b", class_speeds=[1.0, 0.6, 0.14], class_fractions=[0.375, 0.3125, 0.3125])
    assert _agent_key(pol, a, params, 4) == _agent_key(pol, b, params, 4)
    assert _agent_key(pol, a, params, 4) != _agent_key(pol, a, params, 5)
    thw = training_hardware(b, 8, 4.0)
    assert thw.num_workers == 8 and len(thw.class_speeds) == 4
    assert thw.class_speeds[-1] == pytest.approx(0.25)
