"""BDQ's training recipe: root-conditioned branches, top-k and Boltzmann exploration, soft targets, windowed replay
for n-step returns, clipped or symlog-scaled rewards, per-action tables in the observation."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.rl.dqn import (
    ConditionedBranchingQNetwork,
    conditioned_double_q_target,
    conditioned_greedy,
    polyak,
    top_k_explore,
)
from mlsys_repro.common.rl.env import BranchMask, is_valid
from mlsys_repro.common.rl.replay import replay_add, replay_init, replay_sample_windows
from mlsys_repro.papers.greenplace import dqn_agents
from mlsys_repro.papers.greenplace.dqn_agents import boltzmann_explore
from mlsys_repro.papers.greenplace.env import Outcome, PlacementEnv, place, reward
from mlsys_repro.papers.greenplace.features import action_tables, predicted_objective, table_size
from mlsys_repro.papers.greenplace.schemas import PlacementPolicy
from tests.papers.greenplace.tiny import tiny_params

ENV = PlacementEnv()


def _net(tables=True):
    # 3 roots, branches of 2 and 4 choices; tables: 3 + 3*2 + 3*4 = 21 trailing columns of a 25-column observation
    return ConditionedBranchingQNetwork(25, (3, 2, 4), nnx.Rngs(0), torso=(16,), head_hidden=8, tables=tables)


def test_conditioned_branches_read_only_their_roots_table_row():
    net = _net()
    obs = jax.random.normal(jax.random.key(0), (25,))
    q = net(obs, jnp.int32(1))
    assert [x.shape for x in q] == [(3,), (2,), (4,)]
    assert np.allclose(q[0], net.root_values(obs))
    # columns 4..6: the root's table; 7..12 branch 1's ([3, 2] row-major); 13..24 branch 2's ([3, 4]). With the
    # torso blind to the tables, a branch's values move only with its own root's row
    k = net.torso.layers[0].kernel
    k.set_value(k.get_value().at[4:].set(0.0))
    q = net(obs, jnp.int32(1))
    other_row = obs.at[7 + 0 * 2].add(5.0).at[13 + 2 * 4 + 1].add(5.0)  # rows of roots 0 and 2
    own_row = obs.at[7 + 1 * 2].add(5.0)
    q_other = net(other_row, jnp.int32(1))
    assert np.allclose(q_other[1], q[1], atol=1e-6) and np.allclose(q_other[2], q[2], atol=1e-6)
    assert np.allclose(q_other[0], q[0], atol=1e-6)  # the root reads only its own table
    assert not np.allclose(net(own_row, jnp.int32(1))[1], q[1])
    assert not np.allclose(net(obs.at[5].add(5.0), jnp.int32(1))[0], q[0])
    # the root changes the branches' values (one-hot input), batched roots index their own rows
    assert not np.allclose(net(obs, jnp.int32(2))[1], q[1])
    qb = net(jnp.stack([obs, obs]), jnp.array([1, 2]))
    assert np.allclose(qb[1][0], q[1], atol=1e-6) and np.allclose(qb[1][1], net(obs, jnp.int32(2))[1], atol=1e-6)


def test_the_per_choice_term_treats_every_choice_alike():
    net = _net()
    k = net.torso.layers[0].kernel
    k.set_value(k.get_value().at[:].set(0.0))  # the heads' MLP parts are then the same for every state
    base = jnp.zeros(25)
    swapped = base.at[4].set(1.0)  # root choice 0 gets feature 1
    moved = base.at[6].set(1.0)  # root choice 2 gets it
    d0 = net.root_values(swapped) - net.root_values(base)
    d2 = net.root_values(moved) - net.root_values(base)
    # the same feature value shifts its own choice's advantage by the same amount (dueling re-centres the rest)
    assert float(d0[0] - d0[1]) == pytest.approx(float(d2[2] - d2[1]), abs=1e-5)


def test_conditioned_network_rejects_an_observation_too_small_for_its_tables():
    with pytest.raises(ValueError, match="table columns"):
        ConditionedBranchingQNetwork(21, (3, 2, 4), nnx.Rngs(0), torso=(8,), head_hidden=4, tables=True)


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**31 - 1))
def test_conditioned_greedy_is_valid_and_maximises_each_branch_given_the_root(seed):
    net = _net()
    k1, k2, k3 = jax.random.split(jax.random.key(seed), 3)
    root = jax.random.bernoulli(k1, 0.6, (3,)).at[0].set(True)
    c1 = jax.random.bernoulli(k2, 0.6, (3, 2)).at[:, 0].set(True)
    c2 = jax.random.bernoulli(k3, 0.5, (3, 4)).at[0, 3].set(True)
    mask = BranchMask(root, (c1, c2))
    obs = jax.random.normal(jax.random.key(seed + 1), (25,))
    a, q = conditioned_greedy(net, obs, mask)
    assert bool(is_valid(a, mask))
    q0 = np.where(np.asarray(root & c1.any(-1) & c2.any(-1)), np.asarray(net.root_values(obs)), -np.inf)
    assert int(a[0]) == int(np.argmax(q0))
    assert int(a[2]) == int(np.argmax(np.where(np.asarray(c2[a[0]]), np.asarray(q[2]), -np.inf)))


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 6))
def test_top_k_exploration_draws_only_valid_actions_among_the_k_best(seed, k):
    kv, ks, ka = jax.random.split(jax.random.key(seed), 3)
    valid = jax.random.bernoulli(kv, 0.4, (12,)).at[5].set(True)
    scores = jax.random.normal(ks, (12,))
    draws = jax.vmap(lambda key: top_k_explore(key, jnp.int32(5), scores, valid, k, 1.0))(jax.random.split(ka, 64))
    v, s = np.asarray(valid), np.asarray(scores)
    best = set(np.argsort(np.where(v, -s, np.inf), kind="stable")[:min(k, int(v.sum()))].tolist())
    assert set(np.asarray(draws).tolist()) <= best
    assert v[np.asarray(draws)].all()
    greedy = top_k_explore(ka, jnp.int32(5), scores, valid, k, 0.0)
    assert int(greedy) == 5


class _TableNet:
    """A root-conditioned two-branch Q "network" given by tables: observation = one-hot sample index; root values
    ``roots[s]`` [A0], node values given root r ``nodes[s, r]`` [A1]."""

    def __init__(self, roots, nodes):
        self.roots, self.nodes = jnp.asarray(roots, jnp.float32), jnp.asarray(nodes, jnp.float32)

    def root_values(self, obs):
        return obs @ self.roots

    def __call__(self, obs, root):
        q1 = jnp.einsum("...s,sra->...ra", obs, self.nodes)
        return self.root_values(obs), jnp.take_along_axis(q1, root[..., None, None], -2)[..., 0, :]


def test_conditioned_double_q_target_on_a_hand_made_two_branch_batch():
    """Online argmax (root first, masks respected, then the node given that root), target evaluation of both
    branches at it (the target's node branch conditioned on the online root), mean over the branches."""
    online = _TableNet([[5.0, 1.0], [0.0, 8.0]],
                       [[[0.0, 0.0, 0.0], [9.0, 2.0, 7.0]],  # sample 0: given root 1, node 0 is masked -> node 2
                        [[1.0, 4.0, 3.0], [0.0, 0.0, 0.0]]])  # sample 1: root 1 masked -> root 0 -> node 1
    target = _TableNet([[10.0, 20.0], [30.0, 40.0]],
                       [[[-1.0, -1.0, -1.0], [1000.0, 300.0, 100.0]],  # the target's own valid max (300) is not used
                        [[50.0, 60.0, 70.0], [0.0, 0.0, 0.0]]])
    # sample 0: root 0 leaves the node branch no valid choice, so root 1 although the online root prefers 0
    mask = BranchMask(jnp.array([[True, True], [True, False]]),
                      (jnp.array([[[False, False, False], [False, True, True]],
                                  [[True, True, True], [True, True, True]]]),))
    obs = jnp.eye(2)
    ret, disc = jnp.array([1.5, -2.0]), jnp.array([0.729, 0.5])
    y = conditioned_double_q_target(online, target, ret, disc, obs, mask)
    np.testing.assert_allclose(np.asarray(y), [1.5 + 0.729 * (20.0 + 100.0) / 2, -2.0 + 0.5 * (30.0 + 60.0) / 2],
                               rtol=1e-6)
    # an episode end inside the window (discount 0): the return alone
    np.testing.assert_allclose(np.asarray(conditioned_double_q_target(online, target, ret, jnp.zeros(2), obs, mask)),
                               [1.5, -2.0])


def test_polyak_by_hand():
    out = polyak({"w": jnp.array([1.0, 3.0])}, {"w": jnp.array([0.0, 1.0])}, 0.25)
    assert np.allclose(out["w"], [0.25, 1.5])


def test_windows_are_consecutive_steps_of_one_environment_and_never_straddle_the_write_position():
    width, cap = 3, 12  # 4 rows of 3 environments
    buf = replay_init({"t": jnp.int32(0), "env": jnp.int32(0)}, cap)
    for t in range(6):  # 6 rows written: rows 2..5 survive (t = 2..5), t = 4 and 5 overwrote the oldest
        buf = replay_add(buf, {"t": jnp.full(width, t, jnp.int32), "env": jnp.arange(width, dtype=jnp.int32)})
    w = replay_sample_windows(buf, jax.random.key(0), 500, width, 3)
    t, e = np.asarray(w["t"]), np.asarray(w["env"])
    assert (np.diff(t, axis=1) == 1).all() and (e == e[:, :1]).all()
    assert set(t[:, 0].tolist()) == {2, 3}  # windows of 3 in rows t = 2..5
    assert set(e[:, 0].tolist()) == {0, 1, 2}
    with pytest.raises(ValueError, match="multiple"):
        replay_sample_windows(buf, jax.random.key(0), 4, 5, 2)


def test_n_step_return_cuts_at_an_episode_end():
    tr = dqn_agents.Transition(obs=jnp.arange(4, dtype=jnp.float32)[None, :, None],
                               action=jnp.zeros((1, 4, 3), jnp.int32), reward=jnp.array([[1.0, 2.0, 4.0, 8.0]]),
                               done=jnp.array([[0.0, 0.0, 0.0, 0.0]]),
                               mask=BranchMask(jnp.ones((1, 4, 2), bool), ()))
    obs, _, ret, disc, nobs, _ = dqn_agents.n_step_returns(tr, 0.5, 3)
    assert float(ret[0]) == pytest.approx(1 + 0.5 * 2 + 0.25 * 4) and float(disc[0]) == pytest.approx(0.125)
    assert float(obs[0, 0]) == 0.0 and float(nobs[0, 0]) == 3.0
    ended = tr.replace(done=jnp.array([[0.0, 1.0, 0.0, 0.0]]))
    _, _, ret, disc, _, _ = dqn_agents.n_step_returns(ended, 0.5, 3)
    assert float(ret[0]) == pytest.approx(1 + 0.5 * 2) and float(disc[0]) == 0.0


def test_both_reward_terms_are_clipped():
    p = tiny_params(t_norm=jnp.float32(0.001), w_energy=jnp.float32(0.5))  # JCT / t_norm in the thousands
    _, s = ENV.reset(jax.random.key(0), p)
    a = jnp.array([2, 0, 0])  # all on the 1-lane edge
    out = place(s, p, a)
    assert float(out.jct / p.t_norm) > 100
    _, _, r, _, info = ENV.step(jax.random.key(1), s, a, p)
    cost_n = float(np.clip(out.cost / p.c_norm, -10, 10))
    assert float(r) == pytest.approx(-(0.5 * cost_n + 0.5 * 10.0), rel=1e-5)
    assert float(info["objective"]) > 50  # the reported objective stays unclipped


def test_action_tables_are_the_best_objective_and_the_regrets_per_cut_and_per_node():
    p = tiny_params()
    _, s = ENV.reset(jax.random.key(0), p)
    pred, valid = predicted_objective(s, p)
    tab = np.asarray(action_tables(pred, valid, p))
    assert tab.shape == (table_size(p),) == (1 + 3 + 2 * 3 * 2,)
    t = np.where(np.asarray(valid), np.clip(np.asarray(pred), -10, 10), np.inf).reshape(3, 2, 2)
    best = t.min()
    assert tab[0] == pytest.approx(np.sign(best) * np.log1p(abs(best)), rel=1e-5)
    f = lambda x: np.log1p(np.minimum(x - best, 20.0))  # noqa: E731
    assert np.allclose(tab[1:4], f(t.min((1, 2))), atol=1e-6)
    assert np.allclose(tab[4:10], f(t.min(2)).reshape(-1), atol=1e-6)
    assert np.allclose(tab[10:], f(t.min(1)).reshape(-1), atol=1e-6)
    assert tab[1:4].min() == 0.0  # myopic's cut has no regret
    assert np.isclose(tab[4:], np.log1p(20.0)).any()  # the pinned (empty-segment) combinations read as the worst


def test_recipe_agent_observes_the_tables_and_explores_only_valid_actions():
    p = tiny_params(rate=jnp.full(48, 0.5, jnp.float32), episode_jobs=8)
    pol = PlacementPolicy(name="bdq", kind="bdq", batch_size=8, buffer_size=64, learning_starts=16, torso=[8],
                          head_hidden=4, n_step=3, target_tau=0.1, explore="top_k", top_k=2, action_features=True,
                          cut_conditioned=True, updates_per_iter=1)
    assert dqn_agents.obs_size(ENV, p, pol) == ENV.observation_size(p) + table_size(p)
    train = dqn_agents.make_train(ENV, p, pol, iterations=12, num_envs=2)
    ts, curves = jax.jit(train)(jax.random.key(0), 0.5)
    assert np.isfinite(np.asarray(curves["loss"])).all()
    assert float(np.asarray(curves["objective"]).max()) < float(p.reject_penalty)  # nothing was rejected
    assert ts.buffer.data.obs.shape[-1] == dqn_agents.obs_size(ENV, p, pol)


def _outcome(cost, jct):
    z = jnp.zeros(())
    return Outcome(jct=jnp.float32(jct), cost=jnp.float32(cost), energy_kwh=z, green_kwh=z, co2_kg=z, net_kwh=z,
                   cloud_work=z, free_at=z, last_used=z, link_free_at=z)


@pytest.mark.parametrize("scale", ["clip", "symlog"])
def test_reward_scaling_known_values(scale):
    """clip: each term at +-reward_clip (JCT at [0, clip]); symlog: sign(x) log(1 + |x|) of each term."""
    p = tiny_params(c_norm=jnp.float32(2.0), t_norm=jnp.float32(4.0), w_energy=jnp.float32(0.25),
                    reward_symlog=jnp.asarray(scale == "symlog"))
    e = float(np.e)
    if scale == "clip":
        cases = [((2.0 * 3.0, 4.0 * 5.0), -(0.25 * 3.0 + 0.75 * 5.0)),  # inside the clip: the plain objective
                 ((2.0 * 40.0, 4.0 * 30.0), -(0.25 * 10.0 + 0.75 * 10.0)),  # both terms clipped at 10
                 ((-2.0 * 40.0, 4.0 * 1.0), -(0.25 * -10.0 + 0.75 * 1.0))]  # a negative price: cost at -10
    else:
        cases = [((2.0 * (e - 1.0), 4.0 * (e ** 2 - 1.0)), -(0.25 * 1.0 + 0.75 * 2.0)),
                 ((-2.0 * (e ** 3 - 1.0), 0.0), -(0.25 * -3.0)),
                 ((2.0 * (e ** 10 - 1.0), 4.0 * (e ** 12 - 1.0)), -(0.25 * 10.0 + 0.75 * 12.0))]  # no bound
    for (cost, jct), want in cases:
        assert float(reward(_outcome(cost, jct), p)) == pytest.approx(want, rel=1e-5)


def test_symlog_reward_reaches_the_environment_from_the_config():
    p = tiny_params(t_norm=jnp.float32(0.001), reward_symlog=jnp.asarray(True))
    _, s = ENV.reset(jax.random.key(0), p)
    a = jnp.array([2, 0, 0])
    out = place(s, p, a)
    _, _, r, _, info = ENV.step(jax.random.key(1), s, a, p)
    sl = lambda x: float(np.sign(x) * np.log1p(abs(x)))  # noqa: E731
    assert float(r) == pytest.approx(-(0.5 * sl(float(out.cost / p.c_norm)) + 0.5 * sl(float(out.jct / p.t_norm))),
                                     rel=1e-5)
    assert float(r) > -10  # JCT / t_norm in the thousands is not clipped but compressed
    assert float(info["objective"]) > 50  # the reported objective stays unscaled


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31 - 1), st.integers(1, 6), st.sampled_from([1e-3, 0.1, 10.0, 1e3]))
def test_boltzmann_exploration_draws_only_valid_actions_among_the_k_best(seed, k, temp):
    kv, kp, ka = jax.random.split(jax.random.key(seed), 3)
    valid = jax.random.bernoulli(kv, 0.4, (12,)).at[5].set(True)
    pred = jax.random.normal(kp, (12,))
    draws = jax.vmap(lambda key: boltzmann_explore(key, jnp.int32(5), pred, valid, k, temp, 1.0))(
        jax.random.split(ka, 64))
    v, s = np.asarray(valid), np.asarray(pred)
    best = set(np.argsort(np.where(v, s, np.inf), kind="stable")[:min(k, int(v.sum()))].tolist())
    assert set(np.asarray(draws).tolist()) <= best
    assert int(boltzmann_explore(ka, jnp.int32(5), pred, valid, k, temp, 0.0)) == 5  # epsilon 0: greedy


def test_boltzmann_temperature_limits_and_probabilities():
    """Four valid actions with predicted objectives 1.0, 1.0 + ln 2 * T, 1.5, 9 (and an invalid 0.0); k = 3."""
    t = 0.2
    pred = jnp.array([1.0, 1.0 + np.log(2.0) * t, 1.5, 9.0, 0.0])
    valid = jnp.array([True, True, True, True, False])
    keys = jax.random.split(jax.random.key(0), 6000)

    def freq(temp):
        d = np.asarray(jax.vmap(lambda key: boltzmann_explore(key, jnp.int32(3), pred, valid, 3, temp, 1.0))(keys))
        return np.bincount(d, minlength=5) / d.size

    cold = freq(1e-6)  # -> the predicted best (myopic's choice)
    assert cold[0] == 1.0
    hot = freq(1e6)  # -> uniform among the 3 best valid ones; never the 4th or the invalid one
    np.testing.assert_allclose(hot[:3], 1 / 3, atol=0.03)
    assert hot[3] == 0.0 and hot[4] == 0.0
    mid = freq(t)  # softmax(-(pred - best) / T): weights 1, 1/2, exp(-0.5 / 0.2)
    w = np.array([1.0, 0.5, np.exp(-0.5 / t)])
    np.testing.assert_allclose(mid[:3], w / w.sum(), atol=0.03)


@pytest.fixture(scope="module")
def tiny_run():
    """One tiny BDQ training with the recipe's switches on (Boltzmann exploration, a linear learning-rate decay,
    Adam epsilon 1.5e-4, the greedy policy's own Polyak average at policy_tau 1, so it must equal the online
    network), shared by the tests that read it."""
    p = tiny_params(rate=jnp.full(48, 0.5, jnp.float32), episode_jobs=8)
    pol = PlacementPolicy(name="bdq", kind="bdq", batch_size=8, buffer_size=10_000, learning_starts=16, torso=[8],
                          head_hidden=4, n_step=3, target_tau=0.1, explore="boltzmann", top_k=3,
                          action_features=True, cut_conditioned=True, updates_per_iter=2, lr_schedule="linear",
                          lr_end=0.25, adam_eps=1.5e-4, policy_tau=1.0)
    train = dqn_agents.make_train(ENV, p, pol, iterations=12, num_envs=2)
    ts, curves = jax.jit(train)(jax.random.key(0), 0.5)
    return p, pol, train, ts, curves


def test_replay_capacity_is_what_training_writes(tiny_run):
    p, _, _, ts, curves = tiny_run
    assert ts.buffer.capacity == 12 * 2 and int(ts.buffer.size) == 24
    assert np.isfinite(np.asarray(curves["loss"])).all() and int(ts.updates) > 0
    assert float(np.asarray(curves["objective"]).max()) < float(p.reject_penalty)  # nothing was rejected


def test_update_count_is_the_updates_training_takes_and_the_policy_reads_its_average(tiny_run):
    _, pol, train, ts, _ = tiny_run
    # updates start once the buffer holds max(learning_starts 16, batch 8, 4 x 2 envs) = 16 transitions: after
    # iteration 8 of 12, so 5 iterations x 2 updates
    assert train.updates == dqn_agents.update_count(pol, 12, 2) == 10 == int(ts.updates)
    counts = [int(x) for x in jax.tree.leaves(ts.opt_state) if jnp.issubdtype(x.dtype, jnp.integer)]
    assert counts and set(counts) == {10}  # Adam's and the schedule's step counts: the decay spans exactly these
    pp = dqn_agents.policy_params(ts)
    assert pp is ts.avg
    for a, b in zip(jax.tree.leaves(pp), jax.tree.leaves(ts.params), strict=True):  # policy_tau 1: a copy
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not all(np.array_equal(np.asarray(a), np.asarray(b))  # the target (tau 0.1) lags behind
                   for a, b in zip(jax.tree.leaves(pp), jax.tree.leaves(ts.target), strict=True))


def test_update_count_known_values():
    pol = PlacementPolicy(name="q", kind="bdq", batch_size=8, learning_starts=16, n_step=3, updates_per_iter=3)
    assert dqn_agents.update_count(pol, 12, 2) == (12 - 8 + 1) * 3
    assert dqn_agents.update_count(pol.__class__(**{**pol.__dict__, "learning_starts": 1}), 12, 2) == (12 - 4 + 1) * 3
    assert dqn_agents.update_count(pol, 7, 2) == 0  # 14 transitions never reach 16
    small = pol.__class__(**{**pol.__dict__, "buffer_size": 10})
    assert dqn_agents.replay_capacity(small, 12, 2) == 10 and dqn_agents.update_count(small, 12, 2) == 0


def test_learning_rate_schedules_known_values():
    base = dict(name="q", kind="bdq", lr=1e-3, lr_end=0.25)
    assert dqn_agents.learning_rate(PlacementPolicy(**base), 5) == 1e-3
    lin = dqn_agents.learning_rate(PlacementPolicy(**base, lr_schedule="linear"), 5)  # updates 0..4
    cos = dqn_agents.learning_rate(PlacementPolicy(**base, lr_schedule="cosine"), 5)
    for step, want_lin, want_cos in [(0, 1e-3, 1e-3), (1, 1e-3 * (1 - 0.75 / 4),
                                                       1e-3 * (0.25 + 0.75 * 0.5 * (1 + np.cos(np.pi / 4)))),
                                     (2, 6.25e-4, 6.25e-4), (4, 2.5e-4, 2.5e-4), (9, 2.5e-4, 2.5e-4)]:
        assert float(lin(step)) == pytest.approx(want_lin, rel=1e-6)
        assert float(cos(step)) == pytest.approx(want_cos, rel=1e-6)


def test_optimizer_steps_with_adam_epsilon_and_the_decayed_rate():
    """A constant gradient: Adam's bias-corrected step is lr_t * g / (|g| + eps) at every step, so the steps read
    the schedule (lr, 0.75 lr, 0.5 lr over 3 updates to lr_end 0.5) and epsilon's damping of a small gradient."""
    pol = PlacementPolicy(name="q", kind="bdq", lr=0.1, lr_schedule="linear", lr_end=0.5, adam_eps=1.5e-4)
    tx = dqn_agents.make_optimizer(pol, 3)
    params = {"w": jnp.zeros(2)}
    state = tx.init(params)
    g = {"w": jnp.array([1e-4, 1.0])}
    steps = []
    for _ in range(3):
        upd, state = tx.update(g, state, params)
        steps.append(np.asarray(upd["w"]))
    steps = np.stack(steps)
    np.testing.assert_allclose(steps[:, 1], -0.1 * np.array([1.0, 0.75, 0.5]) / (1 + 1.5e-4), rtol=5e-5)  # float32
    np.testing.assert_allclose(steps[:, 0], -0.1 * np.array([1.0, 0.75, 0.5]) * 1e-4 / (1e-4 + 1.5e-4), rtol=1e-4)
    plain = dqn_agents.make_optimizer(PlacementPolicy(name="q", kind="bdq", lr=0.1), 3)  # the defaults: 1e-8
    upd, _ = plain.update(g, plain.init(params), params)
    np.testing.assert_allclose(np.asarray(upd["w"]), [-0.1 * 1e-4 / (1e-4 + 1e-8), -0.1 / (1 + 1e-8)], rtol=1e-5)


@pytest.mark.parametrize("bad, match", [({"lr_schedule": "step"}, "lr_schedule"), ({"lr_end": 1.5}, "lr_end"),
                                        ({"adam_eps": 0.0}, "adam_eps"), ({"policy_tau": 2.0}, "policy_tau"),
                                        ({"policy_tau": 0.01, "act_on_target": True}, "not both")])
def test_recipe_switches_are_checked(bad, match):
    with pytest.raises(ValueError, match=match):
        PlacementPolicy(name="q", kind="bdq", **bad)
