"""JaxMARL-style multi-agent environment API (functional, jittable, vmappable), without the JaxMARL dependency.

Contract (the shape of ``jaxmarl.environments.MultiAgentEnv``):

* ``env.agents``: agent names; ``env.num_agents``.
* ``obs, state = env.reset(key)``: ``obs`` maps agent name -> observation array.
* ``obs, state, rewards, dones, info = env.step(key, state, actions)``: ``actions`` maps agent name -> action
  array; ``rewards`` maps agent name -> scalar; ``dones`` maps agent name -> bool and ``"__all__"`` -> episode
  end. When ``dones["__all__"]`` the returned ``obs``/``state`` are those of a fresh episode (auto-reset, with
  a key split from ``key``); ``info`` holds the pre-reset values under the same keys the subclass returns.
* Subclasses implement ``reset_env(key)``, ``step_env(key, state, actions)``, ``get_obs(state)`` and
  ``get_avail_actions(state)`` (agent -> boolean mask).

Helpers :func:`stack_agents` / :func:`unstack_agents` convert between per-agent dicts and arrays with a leading
agent axis, which is what shared-parameter (MAPPO-style) networks consume.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp

Obs = dict[str, jax.Array]


class MultiAgentEnv(ABC):
    """Base class: provides ``step`` with auto-reset on top of the subclass' ``step_env``/``reset_env``."""

    agents: tuple[str, ...] = ()

    @property
    def num_agents(self) -> int:
        return len(self.agents)

    def reset(self, key: jax.Array) -> tuple[Obs, Any]:
        return self.reset_env(key)

    def step(self, key: jax.Array, state: Any, actions: dict[str, jax.Array]
             ) -> tuple[Obs, Any, dict[str, jax.Array], dict[str, jax.Array], dict[str, Any]]:
        key_step, key_reset = jax.random.split(key)
        obs_st, state_st, rewards, dones, info = self.step_env(key_step, state, actions)
        obs_re, state_re = self.reset_env(key_reset)
        done = dones["__all__"]
        state = jax.tree.map(lambda r, s: jax.lax.select(done, r, s), state_re, state_st)
        obs = jax.tree.map(lambda r, s: jax.lax.select(done, r, s), obs_re, obs_st)
        return obs, state, rewards, dones, info

    @abstractmethod
    def reset_env(self, key: jax.Array) -> tuple[Obs, Any]:
        """A fresh episode's observations and state."""

    @abstractmethod
    def step_env(self, key: jax.Array, state: Any, actions: dict[str, jax.Array]):
        """One transition without auto-reset: ``(obs, state, rewards, dones, info)``."""

    @abstractmethod
    def get_obs(self, state: Any) -> Obs:
        """Per-agent observations of ``state``."""

    @abstractmethod
    def get_avail_actions(self, state: Any) -> dict[str, jax.Array]:
        """Per-agent boolean masks of the actions valid in ``state``."""


def stack_agents(d: dict[str, Any], agents: Sequence[str]) -> Any:
    """Per-agent dict -> pytree with a leading agent axis (in ``agents`` order)."""
    return jax.tree.map(lambda *xs: jnp.stack(xs), *[d[a] for a in agents])


def unstack_agents(x: Any, agents: Sequence[str]) -> dict[str, Any]:
    """Inverse of :func:`stack_agents`."""
    return {a: jax.tree.map(lambda v, i=i: v[i], x) for i, a in enumerate(agents)}


__all__ = ["MultiAgentEnv", "Obs", "stack_agents", "unstack_agents"]
