"""mlsys_repro/common/rl: env API (auto-reset, masks), replay buffer, DQN / BDQ pieces."""

from __future__ import annotations

import itertools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx, struct
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.rl.dqn import (
    BranchingQNetwork,
    branch_double_q_target,
    branch_epsilon_greedy,
    branch_td_loss,
    double_q_target,
    dueling,
    linear_schedule,
    scale_gradient,
)
from mlsys_repro.common.rl.env import (
    BranchMask,
    Environment,
    MultiDiscrete,
    any_valid,
    branch_argmax,
    flatten_action,
    is_valid,
    joint_mask,
    product_mask,
    rollout,
    sample_uniform,
    unflatten_action,
)
from mlsys_repro.common.rl.replay import replay_add, replay_can_sample, replay_init, replay_sample


def _mask():
    root = jnp.array([True, True, False, True])
    c1 = jnp.array([[1, 0, 1], [0, 0, 0], [1, 1, 1], [0, 1, 0]], bool)  # root 1 has no valid a1
    c2 = jnp.array([[1, 1], [1, 1], [1, 1], [0, 1]], bool)
    return BranchMask(root, (c1, c2))


def test_joint_mask_matches_brute_force():
    m = _mask()
    j = np.asarray(joint_mask(m))
    for a in itertools.product(range(4), range(3), range(2)):
        assert j[a] == bool(is_valid(jnp.array(a), m)), a
    assert j.sum() == 4 + 1  # root 0: 2x2, root 3: 1x1
    assert bool(any_valid(m))
    assert not bool(any_valid(BranchMask(jnp.zeros(2, bool), (jnp.ones((2, 2), bool),))))


def test_branch_argmax_respects_conditional_masks():
    m = _mask()
    q = [jnp.array([0.0, 9.0, 8.0, 1.0]), jnp.array([5.0, 0.0, 1.0]), jnp.array([3.0, 0.0])]
    a = branch_argmax(q, m)  # root 1 has no completion, root 2 invalid -> root 3; then a1=1, a2=1
    assert a.tolist() == [3, 1, 1] and bool(is_valid(a, m))


def test_sample_uniform_is_uniform_over_joint_valid_actions():
    m = _mask()
    acts = jax.vmap(lambda k: sample_uniform(k, m))(jax.random.split(jax.random.key(0), 5000))
    assert bool(jax.vmap(lambda a: is_valid(a, m))(acts).all())
    idx = np.asarray(flatten_action(acts, (4, 3, 2)))
    counts = np.bincount(idx, minlength=24)[np.asarray(joint_mask(m)).reshape(-1)]
    assert counts.size == 5 and np.all(np.abs(counts / 5000 - 0.2) < 0.03)


@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.integers(0, 10_000))
@settings(max_examples=12, deadline=None)
def test_flatten_roundtrip(nvec, seed):
    n = int(np.prod(nvec))
    idx = jnp.arange(n)
    a = unflatten_action(idx, nvec)
    assert (flatten_action(a, nvec) == idx).all()
    assert bool((a < jnp.array(nvec)).all())
    assert MultiDiscrete(tuple(nvec)).num_joint == n


def test_product_mask_is_independent():
    m = product_mask([jnp.array([1, 0, 1], bool), jnp.array([0, 1], bool)])
    assert np.asarray(joint_mask(m)).tolist() == [[False, True], [False, False], [False, True]]


@struct.dataclass
class _CState:
    n: jax.Array


class _Counter(Environment):
    """Counts steps; the episode ends after 3 steps; reward = action."""

    def default_params(self):
        return 3

    def reset_env(self, key, params):
        return jnp.zeros(1), _CState(jnp.zeros((), jnp.int32))

    def step_env(self, key, state, action, params):
        n = state.n + 1
        return n.astype(jnp.float32)[None], _CState(n), action.astype(jnp.float32), n >= params, {"n": n}


def test_auto_reset_and_rollout():
    env = _Counter()
    state, (r, d, info) = jax.jit(lambda k: rollout(env, lambda k, o, s, p: jnp.int32(2), k, 3, 7))(
        jax.random.key(0))
    assert d.tolist() == [False, False, True, False, False, True, False]
    assert info["n"].tolist() == [1, 2, 3, 1, 2, 3, 1]  # info describes the step, the state restarts
    assert int(state.n) == 1 and r.sum() == 14
    with pytest.raises(TypeError):
        Environment().action_space(None)


class _KeyEcho(Environment):
    """State = the key data the last reset/step saw; the episode ends every step."""

    def reset_env(self, key, params):
        return jnp.zeros(1), jax.random.key_data(key)

    def step_env(self, key, state, action, params):
        return jnp.ones(1), jax.random.key_data(key), 0.0, jnp.bool_(True), {"k": jax.random.key_data(key)}


class _KeyEchoShared(_KeyEcho):
    reset_reuses_step_key = True


def test_auto_reset_key_split_unless_the_env_reuses_it():
    key = jax.random.key(3)
    raw = jax.random.key_data(key)
    _, st, _, _, info = _KeyEcho().step(key, None, 0, 0)
    k_step, k_reset = jax.random.split(key)
    assert np.array_equal(info["k"], jax.random.key_data(k_step))
    assert np.array_equal(st, jax.random.key_data(k_reset)) and not np.array_equal(st, raw)
    _, st, _, _, info = _KeyEchoShared().step(key, None, 0, 0)
    assert np.array_equal(info["k"], raw) and np.array_equal(st, raw)


def test_replay_wraps_and_samples_only_filled():
    buf = replay_init({"x": jnp.zeros(2), "a": jnp.zeros((), jnp.int32)}, capacity=5)
    assert not bool(replay_can_sample(buf, 1))
    add = jax.jit(replay_add)
    buf = add(buf, {"x": jnp.ones((3, 2)) * jnp.arange(3)[:, None], "a": jnp.arange(3)})
    assert int(buf.size) == 3 and int(buf.pos) == 3
    s = replay_sample(buf, jax.random.key(0), 200)
    assert set(np.asarray(s["a"]).tolist()) <= {0, 1, 2}
    buf = add(buf, {"x": jnp.zeros((4, 2)), "a": jnp.arange(10, 14)})
    assert int(buf.size) == 5 and int(buf.pos) == 2
    assert np.asarray(buf.data["a"]).tolist() == [12, 13, 2, 10, 11]  # oldest overwritten first
    with pytest.raises(ValueError):
        replay_add(buf, {"x": jnp.zeros((6, 2)), "a": jnp.zeros(6, jnp.int32)})
    vb = jax.vmap(lambda k: replay_add(replay_init(jnp.zeros(()), 4), jnp.ones(2)))(jax.random.split(
        jax.random.key(0), 3))
    chex.assert_shape(vb.data, (3, 4))


def test_dueling_and_gradient_scaling():
    q = dueling(jnp.array([[2.0]]), jnp.array([[1.0, 3.0]]))
    assert q.tolist() == [[1.0, 3.0]]
    g = jax.grad(lambda x: (scale_gradient(x, 0.25) ** 2).sum())(jnp.array([2.0]))
    assert float(g[0]) == pytest.approx(1.0) and float(scale_gradient(jnp.array(3.0), 0.1)) == pytest.approx(3.0)


def test_bdq_target_and_loss_by_hand():
    m = product_mask([jnp.array([1, 1], bool), jnp.array([1, 0, 1], bool)])
    online = (jnp.array([0.0, 1.0]), jnp.array([5.0, 9.0, 1.0]))  # greedy: a0=1, a1=0 (1 is masked)
    target = (jnp.array([10.0, 20.0]), jnp.array([30.0, 0.0, 0.0]))
    y = branch_double_q_target(jnp.float32(1.0), jnp.float32(0.5), online, target, m)
    assert float(y) == pytest.approx(1.0 + 0.5 * (20.0 + 30.0) / 2)
    q = (jnp.array([[1.0, 2.0]]), jnp.array([[0.0, 4.0, 0.0]]))
    loss = branch_td_loss(q, jnp.array([[1, 1]]), jnp.array([3.0]))
    assert float(loss) == pytest.approx(0.5 * ((3 - 2) ** 2 + (3 - 4) ** 2) / 2)
    yf = double_q_target(jnp.float32(0.0), jnp.float32(1.0), jnp.array([1.0, 5.0]), jnp.array([7.0, 3.0]),
                         jnp.array([True, False]))
    assert float(yf) == 7.0


def test_bdq_network_shapes_and_torso_gradient_scale():
    net = BranchingQNetwork(6, (4, 3, 3), nnx.Rngs(0), torso=(16,), head_hidden=8)
    q = net(jnp.ones((5, 6)))
    assert [x.shape for x in q] == [(5, 4), (5, 3), (5, 3)]
    for x in q:  # dueling: advantages are mean-centred, so each branch's mean Q is V
        assert np.allclose(x.mean(-1), q[0].mean(-1), atol=1e-5)
    graphdef, state = nnx.split(net)

    @jax.jit
    def torso_grad(scale):
        def f(s):
            n = nnx.merge(graphdef, s)
            n.torso_scale = scale
            return sum(x.sum() for x in n(jnp.ones((2, 6))))
        return jax.grad(f)(state)["torso"]["layers"][0]["kernel"][...]

    assert np.allclose(torso_grad(0.25), 0.25 * torso_grad(1.0), rtol=1e-4, atol=1e-6)


def test_epsilon_greedy_branches():
    m = _mask()
    q = [jnp.array([0.0, 9.0, 8.0, 1.0]), jnp.array([5.0, 0.0, 1.0]), jnp.array([3.0, 0.0])]
    greedy = branch_epsilon_greedy(jax.random.key(1), q, m, 0.0)
    assert greedy.tolist() == [3, 1, 1]
    acts = jax.vmap(lambda k: branch_epsilon_greedy(k, q, m, 1.0))(jax.random.split(jax.random.key(0), 500))
    assert bool(jax.vmap(lambda a: is_valid(a, m))(acts).all()) and len(set(map(tuple, acts.tolist()))) > 1
    f = linear_schedule(1.0, 0.1, 10)
    assert float(f(0)) == 1.0 and float(f(5)) == pytest.approx(0.55) and float(f(50)) == pytest.approx(0.1)
