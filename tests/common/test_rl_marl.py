"""mlsys_repro.common.rl.marl: the JaxMARL-style contract (per-agent dicts, dones['__all__'], auto-reset) on a toy
env."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mlsys_repro.common.rl.marl import MultiAgentEnv, stack_agents, unstack_agents


class Counter(MultiAgentEnv):
    """Two agents add their actions to a shared counter; the episode ends when it reaches 3."""

    agents = ("a", "b")

    def reset_env(self, key):
        st = jnp.zeros((), jnp.int32)
        return self.get_obs(st), st

    def get_obs(self, st):
        return {a: jnp.stack([st, i]) for i, a in enumerate(self.agents)}

    def get_avail_actions(self, st):
        return {a: jnp.array([True, True]) for a in self.agents}

    def step_env(self, key, st, actions):
        st = st + actions["a"] + actions["b"]
        done = st >= 3
        return (self.get_obs(st), st, {a: st.astype(jnp.float32) for a in self.agents},
                {"a": done, "b": done, "__all__": done}, {"counter": st})


def test_auto_reset_and_info_keeps_pre_reset_values():
    env = Counter()
    assert env.num_agents == 2
    obs, st = env.reset(jax.random.key(0))
    step = jax.jit(env.step)
    one = {"a": jnp.int32(1), "b": jnp.int32(1)}
    obs, st, rew, done, info = step(jax.random.key(1), st, one)
    assert int(st) == 2 and not bool(done["__all__"]) and float(rew["a"]) == 2.0
    obs, st, rew, done, info = step(jax.random.key(2), st, one)
    assert bool(done["__all__"]) and int(info["counter"]) == 4  # the terminal value, before reset
    assert int(st) == 0 and np.asarray(obs["b"]).tolist() == [0, 1]  # a fresh episode


def test_vmap_over_environments():
    env = Counter()
    keys = jax.random.split(jax.random.key(0), 3)
    obs, st = jax.vmap(env.reset)(keys)
    acts = {"a": jnp.array([0, 1, 3]), "b": jnp.array([0, 1, 0])}
    _, st, _, done, _ = jax.vmap(env.step)(keys, st, acts)
    assert np.asarray(done["__all__"]).tolist() == [False, False, True]
    assert np.asarray(st).tolist() == [0, 2, 0]


def test_stack_and_unstack_are_inverse():
    d = {"a": {"x": jnp.ones(2)}, "b": {"x": jnp.zeros(2)}}
    s = stack_agents(d, ("a", "b"))
    assert s["x"].shape == (2, 2)
    back = unstack_agents(s, ("a", "b"))
    assert np.asarray(back["b"]["x"]).tolist() == [0.0, 0.0]


def test_abstract_methods_must_be_implemented():
    class Incomplete(MultiAgentEnv):
        agents = ("a",)

    with pytest.raises(TypeError):
        Incomplete()
