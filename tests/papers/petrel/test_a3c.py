"""A3C: action range 1..N, the progress-rate reward, n-step returns, asynchronous actor-learners on shared
parameters, the learning-curve gates (improved / plateaued / converged) and arms_differ."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from mlsys_repro.papers.petrel.a3c import (
    Learner,
    SharedAgent,
    TrainLog,
    a3c_grads,
    arms_differ,
    episode_condition,
    eval_conditions,
    eval_hw_seed,
    feature_dim,
    greedy_summary,
    init_params,
    k_levels,
    learning_summary,
    progress_reward,
    train_conditions,
)
from mlsys_repro.papers.petrel.schemas import A3CConfig, PSClusterHardware, SyncPolicy


@pytest.mark.parametrize("n", [1, 2, 4, 8, 16, 64])
def test_actions_span_one_to_n(n):
    k = k_levels(n, 9)
    assert k[0] == 1 and k[-1] == n  # k = 1 (BSP timing) and k = N (ASP) are both reachable
    assert np.all(np.diff(k) >= 0) and k.min() >= 1 and k.max() <= n
    if n == 16:
        assert k.tolist() == [1, 1, 2, 3, 4, 6, 8, 11, 16]
    with pytest.raises(ValueError):
        k_levels(n, 1)


def test_progress_reward_hand_case():
    # probe loss 1.0 -> e^-0.5 over a full interval: log-loss decrease 0.5, scale 5 -> 2.5
    assert progress_reward(0.0, -0.5, dt=10.0, interval=10.0, reward_scale=5.0) == pytest.approx(2.5)
    # the same decrease in half the time is twice the rate
    assert progress_reward(0.0, -0.5, dt=5.0, interval=10.0, reward_scale=5.0) == pytest.approx(5.0)
    # loss going up is negative progress; no previous loss (first interval) is zero
    assert progress_reward(0.0, 0.2, dt=10.0, interval=10.0, reward_scale=1.0) == pytest.approx(-0.2)
    assert progress_reward(float("nan"), -3.0, dt=10.0, interval=10.0, reward_scale=1.0) == 0.0
    # bytes penalty: PS bytes / capacity
    assert progress_reward(0.0, -0.5, 10.0, 10.0, 1.0, ps_bytes=50.0, ps_capacity_bytes=100.0,
                           bytes_penalty=0.2) == pytest.approx(0.5 - 0.1)


def test_sampled_actions_cover_every_level():
    agent = SharedAgent(A3CConfig(), levels=9, seed=0)
    rng = np.random.default_rng(0)
    x = rng.standard_normal(feature_dim(9)).astype(np.float32)
    acts = {agent.act(x, rng=rng) for _ in range(600)}
    assert acts == set(range(9))
    assert 0 <= agent.act(x) < 9


def test_n_step_returns_known_answer(monkeypatch):
    cfg = A3CConfig(t_max=2, gamma=0.5)
    agent = SharedAgent(cfg, levels=2, seed=0)
    seen = {}

    def fake_grads(params, x, a, ret, mask, value_coef, entropy_coef):
        seen["ret"] = np.asarray(ret)
        return {k: jnp.zeros_like(v) for k, v in params.items()}, 0.0, (0.0, 0.0, 0.0)

    monkeypatch.setattr("mlsys_repro.papers.petrel.a3c.a3c_grads", fake_grads)
    monkeypatch.setattr("mlsys_repro.papers.petrel.a3c.forward", lambda p, x, xp=np: (np.zeros(2), np.asarray(4.0)))
    lr = Learner(agent, 0, np.random.default_rng(0))
    x = np.zeros(feature_dim(2), np.float32)
    lr.step(x, None, 2)
    lr.step(x, 1.0, 2)
    lr.step(x, 2.0, 2)  # t_max rewards -> learn, bootstrap V = 4
    # R1 = 2 + 0.5 * 4 = 4 ; R0 = 1 + 0.5 * 4 = 3
    np.testing.assert_allclose(seen["ret"], [3.0, 4.0])
    assert agent.log.updates == 1


@pytest.mark.parametrize("bootstrap, want", [(False, [2.75, 3.5, 3.0]), (True, [3.25, 4.5, 5.0])])
def test_one_update_per_episode_with_terminal_end(monkeypatch, bootstrap, want):
    """t_max >= the episode's rewards: one update at the episode end over all of them; the end is terminal (R = 0
    after the last reward) unless bootstrap_at_end (R = V(last state) = 4)."""
    cfg = A3CConfig(t_max=6, episode_decisions=6, gamma=0.5, bootstrap_at_end=bootstrap)
    agent = SharedAgent(cfg, levels=2, seed=0)
    seen = []

    def fake_grads(params, x, a, ret, mask, value_coef, entropy_coef):
        seen.append(np.asarray(ret))
        return {k: jnp.zeros_like(v) for k, v in params.items()}, 0.0, (0.0, 0.0, 0.0)

    monkeypatch.setattr("mlsys_repro.papers.petrel.a3c.a3c_grads", fake_grads)
    monkeypatch.setattr("mlsys_repro.papers.petrel.a3c.forward", lambda p, x, xp=np: (np.zeros(2), np.asarray(4.0)))
    lr = Learner(agent, 0, np.random.default_rng(0))
    x = np.zeros(feature_dim(2), np.float32)
    for r in (None, 1.0, 2.0):
        lr.step(x, r, 2)
    assert seen == []  # no update before the episode ends
    lr.finish(x, 3.0)
    # terminal: R2 = 3, R1 = 2 + 0.5 * 3, R0 = 1 + 0.5 * 3.5; bootstrapped: R2 = 3 + 0.5 * 4, ...
    assert len(seen) == 1 and agent.log.updates == 1
    np.testing.assert_allclose(seen[0], want)


def test_a3c_loss_gradient_is_finite_and_respects_mask():
    p = init_params(feature_dim(4), 16, 4, 0)
    x = jnp.ones((3, feature_dim(4)))
    mask = jnp.asarray([[True, True, False, False]] * 3)
    g, total, (pi, v, ent) = a3c_grads(p, x, jnp.asarray([0, 1, 1]), jnp.asarray([1.0, 0.5, -1.0]), mask,
                                       value_coef=0.5, entropy_coef=0.01)
    assert np.isfinite(float(total)) and ent > 0
    assert all(np.isfinite(np.asarray(v)).all() for v in g.values())
    assert np.allclose(np.asarray(g["bp"])[2:], 0.0)  # masked logits get no policy gradient


def test_chunks_visit_every_condition_once():
    cfg = A3CConfig(train_workers=[8, 16], train_speed_ratios=[1.0, 4.0], train_link_gbps=[1.0, 10.0])
    conds = train_conditions(cfg)
    assert len(conds) == 8 and (16, 4.0, 10.0) in conds
    for chunk in range(3):
        seen = [episode_condition(cfg, chunk * 8 + i) for i in range(8)]
        assert {c for c, _ in seen} == {chunk} and sorted(i for _, i in seen) == list(range(8))


def _log(table):
    log = TrainLog()
    for ch, row in enumerate(table):
        for c, r in enumerate(row):
            log.ret.append(float(r))
            log.chunk.append(ch)
            log.condition.append(c)
    return log


def test_learning_summary_gates():
    rng = np.random.default_rng(0)
    base = rng.normal(0, 1, 6)
    learning = [base + 3 * min(i, 4) / 4 + rng.normal(0, 0.05, 6) for i in range(8)]  # rises, then flat
    s = learning_summary(_log(learning), 6)
    assert s["improved"] == 1.0 and s["plateaued"] == 1.0 and s["converged"] == 1.0
    flat = [base + rng.normal(0, 0.05, 6) for _ in range(8)]  # never improves
    assert learning_summary(_log(flat), 6)["converged"] == 0.0
    rising = [base + 0.5 * i + rng.normal(0, 0.01, 6) for i in range(8)]  # still climbing: no plateau
    s = learning_summary(_log(rising), 6)
    assert s["improved"] == 1.0 and s["plateaued"] == 0.0 and s["converged"] == 0.0
    assert learning_summary(_log(learning[:3]), 6)["converged"] == 0.0  # too few chunks to tell


def _glog(table, num_conditions):
    """A log whose greedy curve is ``table`` (row 0: point -1, the untrained policy; row i: after chunk i - 1) over
    the evaluation conditions 0..m-1, with every chunk of the table complete in training."""
    log = TrainLog()
    for p, row in enumerate(table):
        for c, r in enumerate(row):
            log.greedy_chunk.append(p - 1)
            log.greedy_condition.append(c)
            log.greedy_ret.append(float(r))
            log.greedy_k.append(4.0)
    log.episode = list(range((len(table) - 1) * num_conditions))
    return log


def test_greedy_summary_gates():
    rng = np.random.default_rng(0)
    base = rng.normal(0, 1, 6)  # six evaluation conditions, paired across points
    learning = [base + 2 * min(i, 3) / 3 + rng.normal(0, 0.05, 6) for i in range(6)]  # rises, then flat
    s = greedy_summary(_glog(learning, 12), 12)
    assert s["improved"] == 1.0 and s["plateaued"] == 1.0 and s["converged"] == 1.0 and s["chunks"] == 5
    assert s["initial_return"] == pytest.approx(learning[0].mean())
    flat = [base] * 6  # the greedy policy never changes: the same returns on the same held-out seeds
    s = greedy_summary(_glog(flat, 12), 12)
    assert s["improved"] == 0.0 and s["plateaued"] == 1.0 and s["converged"] == 0.0
    worse = [base] + [base - 1 + rng.normal(0, 0.05, 6) for _ in range(5)]  # training made it worse
    assert greedy_summary(_glog(worse, 12), 12)["improved"] == 0.0
    rising = [base + 0.5 * i + rng.normal(0, 0.01, 6) for i in range(6)]  # still climbing: no plateau
    s = greedy_summary(_glog(rising, 12), 12)
    assert s["improved"] == 1.0 and s["plateaued"] == 0.0 and s["converged"] == 0.0
    assert greedy_summary(_glog(learning[:3], 12), 12)["converged"] == 0.0  # 2 chunks < tail_chunks 3: too short
    # a point whose chunk is not complete in training (the last, partial chunk) is left out: here chunk 4
    log = _glog(rising, 12)
    log.episode = log.episode[:-1]
    assert greedy_summary(log, 12)["chunks"] == 4
    no_initial = _glog(learning, 12)
    keep = [i for i, p in enumerate(no_initial.greedy_chunk) if p >= 0]
    for f in ("greedy_chunk", "greedy_condition", "greedy_ret"):
        setattr(no_initial, f, [getattr(no_initial, f)[i] for i in keep])
    assert greedy_summary(no_initial, 12)["converged"] == 0.0  # no untrained point to compare with


def test_eval_conditions_and_seeds_are_held_out():
    cfg = A3CConfig(train_workers=[8, 16], train_speed_ratios=[1.0, 2.0, 4.0, 8.0], train_link_gbps=[1.0, 10.0, 100.0],
                    episodes=120, seed=100_000)
    conds = train_conditions(cfg)
    ev = eval_conditions(cfg)
    # a cyclic diagonal at N = 16: every speed ratio and every link rate, 4 conditions
    assert sorted(conds[i] for i in ev) == [(16, 1.0, 1.0), (16, 2.0, 10.0), (16, 4.0, 100.0), (16, 8.0, 1.0)]
    seeds = {eval_hw_seed(cfg, i) for i in ev}
    train_seeds = {cfg.seed + e for e in range(cfg.episodes)}
    assert len(seeds) == 4 and not seeds & train_seeds and min(seeds) > max(train_seeds)
    assert max(seeds) < cfg.seed + 10_000  # below the next agent's stream


def test_arms_differ():
    assert arms_differ([[4, 4], [4]]) == 0.0
    assert arms_differ([[4, 4], [4, 8]]) == 1.0
    assert arms_differ([]) == 0.0


def test_actors_learn_asynchronously_on_shared_parameters(task):
    from mlsys_repro.papers.petrel.a3c import train_a3c
    from mlsys_repro.papers.petrel.engine import GradEngine
    from mlsys_repro.papers.petrel.pipeline import training_hardware
    from mlsys_repro.papers.petrel.sim import PSSim

    cfg = A3CConfig(actors=3, episodes=4, episode_decisions=4, t_max=2, hidden=8, train_workers=[4, 6],
                    train_speed_ratios=[4.0], train_link_gbps=[1.0])
    pol = SyncPolicy(name="casp", kind="casp")
    base = PSClusterHardware(name="t", num_workers=4, class_speeds=[1.0, 0.25])
    built = []

    def make(hw_seed, cond, grouper, engine):
        n, ratio, gbps = cond
        hw = training_hardware(base, n, ratio, classes=2, link_gbps=gbps)
        built.append((hw_seed - cfg.seed, n, id(engine)))  # hardware seed = stream + episode
        return PSSim(engine, hw, grouper, seed=hw_seed, grad_lr=0.05, batch_size=8, eval_every_grads=0,
                     max_time_s=0.4 * (1 - 1e-9), decision_every_s=0.1, ewma_alpha=pol.ewma_alpha)

    before = init_params(feature_dim(9), 8, 9, cfg.seed)
    agent = train_a3c(cfg, 9, make, lambda: GradEngine(task))
    assert sorted(agent.log.episode) == [0, 1, 2, 3]
    assert set(agent.log.actor) == {0, 1, 2}  # a wave of 3 actors, then one more episode
    # sims with different worker counts (batch sizes) never share an engine inside a wave
    wave = [b for b in built if b[0] < 3]
    assert len({e for _, n, e in wave if n == 4} & {e for _, n, e in wave if n == 6}) == 0
    assert agent.log.updates >= 4
    assert any(not np.array_equal(before[k], agent.params[k]) for k in before)
    assert all(1 <= k <= 6 for k in agent.log.mean_k)


def test_agent_key_ignores_class_layout_and_link_rate():
    from mlsys_repro.papers.petrel.pipeline import _agent_key, training_hardware
    from mlsys_repro.papers.petrel.schemas import PetrelParams

    pol = SyncPolicy(name="casp", kind="casp", a3c=A3CConfig(train_link_gbps=[1.0, 10.0]))
    params = PetrelParams()
    a = PSClusterHardware(name="a")
    b = PSClusterHardware(name="b", class_speeds=[1.0, 0.6, 0.14], class_fractions=[0.375, 0.3125, 0.3125],
                          ps_bandwidth_gbps=10.0, worker_bandwidth_gbps=10.0)
    assert _agent_key(pol, a, params, 4) == _agent_key(pol, b, params, 4)
    assert _agent_key(pol, a, params, 4) != _agent_key(pol, a, params, 5)
    thw = training_hardware(b, 8, 4.0, link_gbps=1.0)
    assert thw.num_workers == 8 and len(thw.class_speeds) == 4 and thw.ps_bandwidth_gbps == 1.0
    assert thw.class_speeds[-1] == pytest.approx(0.25)


def _train_tiny(task, streams, mode="map", evaluate=True):
    """Two actors, two episodes each, of three decisions on a 4-worker cluster: agents for ``streams``."""
    from mlsys_repro.papers.petrel.a3c import train_agents
    from mlsys_repro.papers.petrel.engine import GradEngine
    from mlsys_repro.papers.petrel.pipeline import training_hardware
    from mlsys_repro.papers.petrel.sim import PSSim

    cfg = A3CConfig(actors=2, episodes=4, episode_decisions=3, t_max=2, hidden=8, train_workers=[4],
                    train_speed_ratios=[1.0, 4.0], train_link_gbps=[1.0], per_seed=True)
    base = PSClusterHardware(name="t", num_workers=4, class_speeds=[1.0, 0.25])
    hw_seeds = []

    def make(hw_seed, cond, grouper, engine):
        n, ratio, gbps = cond
        hw_seeds.append(hw_seed)
        return PSSim(engine, training_hardware(base, n, ratio, classes=2, link_gbps=gbps), grouper, seed=hw_seed,
                     grad_lr=0.05, batch_size=8, eval_every_grads=0, max_time_s=0.3 * (1 - 1e-9),
                     decision_every_s=0.1, momentum=0.5)

    agents = train_agents(cfg, 9, make, lambda: GradEngine(task, mode=mode), streams(cfg), evaluate=evaluate)
    return cfg, agents, hw_seeds


def _same_agent(a, b) -> bool:
    return (all(np.array_equal(a.params[k], b.params[k]) for k in a.params) and a.log.ret == b.log.ret
            and a.log.mean_k == b.log.mean_k)


def test_per_seed_agents_are_distinct_deterministic_and_independent(task):
    from mlsys_repro.papers.petrel.a3c import AGENT_SEED_STRIDE, agent_stream

    def both(cfg):
        return [agent_stream(cfg, 0), agent_stream(cfg, 1)]

    cfg, (a0, a1), hw_seeds = _train_tiny(task, both)
    # seed 0's stream is the shared agent's (a3c.seed); seed 1's is a stride above, and the streams are disjoint
    assert agent_stream(cfg, 0) == agent_stream(cfg, None) == cfg.seed
    assert agent_stream(cfg, 1) == cfg.seed + AGENT_SEED_STRIDE
    # training episodes on stream + episode; greedy evaluation (3 points x 2 conditions) on held-out stream + 5000 + c
    train_seeds = [cfg.seed + e for e in range(4)] + [cfg.seed + AGENT_SEED_STRIDE + e for e in range(4)]
    eval_seeds = [s + 5000 + c for s in (cfg.seed, cfg.seed + AGENT_SEED_STRIDE) for c in (0, 1)]
    assert sorted(hw_seeds) == sorted(train_seeds + 3 * eval_seeds)
    assert a0.cfg.seed == cfg.seed and a1.cfg.seed == cfg.seed + AGENT_SEED_STRIDE
    assert len(a0.log.ret) == len(a1.log.ret) == 4 and a0.log.updates >= 2 and a1.log.updates >= 2
    # distinct parameters per seed (own initialisation, own episodes)
    assert any(not np.array_equal(a0.params[k], a1.params[k]) for k in a0.params)
    # deterministic per seed: trained again, bit for bit
    _, (b0, b1), _ = _train_tiny(task, both)
    assert _same_agent(a0, b0) and _same_agent(a1, b1)
    # independent of the agents trained beside it (map mode: each gradient independent of its batch)
    _, (alone,), _ = _train_tiny(task, lambda cfg: [agent_stream(cfg, 1)], evaluate=False)
    assert _same_agent(a1, alone) and alone.log.greedy_ret == []  # and of its greedy evaluation
    assert a0.log.greedy_ret == b0.log.greedy_ret
    with pytest.raises(ValueError, match="streams must differ"):
        _train_tiny(task, lambda cfg: [cfg.seed, cfg.seed])


def test_greedy_curve_rows_of_a_tiny_training(task):
    """2 actors x 4 episodes over 2 conditions (chunks of 2 episodes): greedy points -1, 0, 1 on both conditions,
    written as greedy_return / greedy_mean_k rows with the gate rows beside them."""
    import pandas as pd

    from mlsys_repro.papers.petrel.a3c import agent_stream
    from mlsys_repro.papers.petrel.experiments import greedy_rows

    _, (agent,), _ = _train_tiny(task, lambda cfg: [agent_stream(cfg, 0)])
    log = agent.log
    points = sorted(zip(log.greedy_chunk, log.greedy_condition, strict=True))
    assert points == [(p, c) for p in (-1, 0, 1) for c in (0, 1)]
    assert all(np.isfinite(log.greedy_ret)) and all(1 <= k <= 4 for k in log.greedy_k)
    rows = pd.DataFrame(greedy_rows("casp", 3, agent))
    curve = rows[rows.metric == "greedy_return"]
    assert len(curve) == 6 and set(curve["chunk"]) == {-1, 0, 1} and set(curve["speed_ratio"]) == {1.0, 4.0}
    assert (rows["seed"] == 3).all() and len(rows[rows.metric == "greedy_mean_k"]) == 6
    gates = rows[rows.metric.isin(["improved", "plateaued", "converged", "sampled_converged"])]
    assert len(gates) == 4 and gates["value"].isin([0.0, 1.0]).all()
    assert rows[rows.metric == "converged"]["value"].item() == 0.0  # 2 complete chunks < tail_chunks 3
    assert rows[rows.metric == "complete_chunks"]["value"].item() == 2.0


def test_agent_set_serves_each_seed_its_agent():
    from mlsys_repro.papers.petrel.a3c import AgentSet

    a, b = SharedAgent(A3CConfig(), 9, 0), SharedAgent(A3CConfig(), 9, 1)
    per = AgentSet(by_seed={0: a, 3: b})
    assert per.for_seed(3) is b and per.for_seed(0) is a and per.items() == [(0, a), (3, b)]
    with pytest.raises(KeyError, match="seed 1"):
        per.for_seed(1)
    shared = AgentSet(shared=a)
    assert shared.for_seed(7) is a and shared.items() == [(None, a)]
    with pytest.raises(ValueError, match="5000"):
        A3CConfig(episodes=5_001)
