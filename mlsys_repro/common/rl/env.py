"""Single-agent functional environment API (gymnax style) with auto-reset and branching action masks.

An environment is a stateless object whose methods are pure functions of ``(key, state, action, params)``, so
they can be ``jit``-ed, ``vmap``-ped over environments and seeds and ``scan``-ned over time::

    env = MyEnv()
    params = env.default_params()
    obs, state = env.reset(key, params)
    obs, state, reward, done, info = env.step(key, state, action, params)   # auto-resets when done

Subclasses implement :meth:`Environment.reset_env`, :meth:`Environment.step_env`,
:meth:`Environment.action_mask` and :meth:`Environment.action_space`. ``step`` returns the observation of the
*reset* state when an episode ends (``info`` still describes the step that ended it), as in gymnax/JaxMARL.

Multi-dimensional discrete actions are an int32 vector with one entry per *branch* (head), sizes
``action_space(params).nvec``. Validity is a :class:`BranchMask`: the first branch has its own mask and every other
branch has a mask *conditioned on the first branch's choice* (``cond[i][a0]``). Joint validity is
``root[a0] & cond[0][a0, a1] & cond[1][a0, a2] ...``; that covers "a choice in one dimension restricts the others"
(e.g. a model-partition cut restricting which nodes can host each segment) while staying exact for per-branch
(branching / factorised) policies, which choose the root first and then the others given it. Independent
per-branch masks are the special case built by :func:`product_mask`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
from flax import struct

TState = TypeVar("TState")
TParams = TypeVar("TParams")


@struct.dataclass
class MultiDiscrete:
    """Action space of ``len(nvec)`` branches; branch ``i`` takes values ``0 .. nvec[i] - 1``."""

    nvec: tuple[int, ...] = struct.field(pytree_node=False)

    @property
    def num_branches(self) -> int:
        return len(self.nvec)

    @property
    def num_joint(self) -> int:
        n = 1
        for k in self.nvec:
            n *= int(k)
        return n


@struct.dataclass
class BranchMask:
    """Valid actions: ``root`` bool[A0]; ``cond[i]`` bool[A0, A_{i+1}] given the first branch's choice."""

    root: jax.Array
    cond: tuple[jax.Array, ...]


class Environment(Generic[TState, TParams]):
    """Base class: pure ``reset``/``step`` with auto-reset; see the module docstring for the contract."""

    #: ``step`` passes its key unsplit to both ``step_env`` and the auto-reset's ``reset_env``. Sound when the
    #: step's random draws feed only the next state (which the reset state replaces when the episode ends), so
    #: the reset may reuse them; an environment that draws the same values in both (e.g. one uniform vector from
    #: the key) then pays one draw per step instead of a key split and two draws (XLA merges the identical draw).
    reset_reuses_step_key: bool = False

    def default_params(self) -> TParams:
        raise TypeError(f"{type(self).__name__} has no default parameters; pass params explicitly")

    def reset(self, key: jax.Array, params: TParams | None = None) -> tuple[jax.Array, TState]:
        params = self.default_params() if params is None else params
        return self.reset_env(key, params)

    def step(self, key: jax.Array, state: TState, action: jax.Array, params: TParams | None = None):
        """One transition; when it ends the episode the returned obs/state are those of a fresh reset."""
        params = self.default_params() if params is None else params
        k_step, k_reset = (key, key) if self.reset_reuses_step_key else jax.random.split(key)
        obs_st, state_st, reward, done, info = self.step_env(k_step, state, action, params)
        obs_re, state_re = self.reset_env(k_reset, params)
        state = jax.tree.map(lambda a, b: jnp.where(done, a, b), state_re, state_st)
        if type(self).get_obs is not Environment.get_obs:
            # one observation of the selected state; the two above are dead code under jit
            return self.get_obs(state, params), state, reward, done, info
        obs = jnp.where(done, obs_re, obs_st)
        return obs, state, reward, done, info

    def get_obs(self, state: TState, params: TParams) -> jax.Array:
        """Optional: the observation as a pure function of the state.

        Environments that define it (and return ``get_obs(state)`` from ``reset_env`` / ``step_env``) get one
        observation per ``step`` instead of two (the reset branch's and the next state's, both evaluated under
        ``vmap``); the result is the same.
        """
        raise TypeError(f"{type(self).__name__} does not define get_obs")

    # ---- to implement
    def reset_env(self, key: jax.Array, params: TParams) -> tuple[jax.Array, TState]:
        raise TypeError(f"{type(self).__name__} must implement reset_env")

    def step_env(self, key: jax.Array, state: TState, action: jax.Array, params: TParams):
        raise TypeError(f"{type(self).__name__} must implement step_env")

    def action_mask(self, state: TState, params: TParams) -> BranchMask:
        raise TypeError(f"{type(self).__name__} must implement action_mask")

    def action_space(self, params: TParams) -> MultiDiscrete:
        raise TypeError(f"{type(self).__name__} must implement action_space")

    def observation_size(self, params: TParams) -> int:
        obs, _ = jax.eval_shape(lambda k: self.reset_env(k, params), jax.random.key(0))
        return int(obs.shape[-1])


# ---------------------------------------------------------------------------------------------- masks


def product_mask(masks: Sequence[jax.Array]) -> BranchMask:
    """Independent per-branch masks as a BranchMask (the conditional rows do not depend on the root choice)."""
    root = jnp.asarray(masks[0], bool)
    cond = tuple(jnp.broadcast_to(jnp.asarray(m, bool), (*root.shape, m.shape[-1])) for m in masks[1:])
    return BranchMask(root, cond)


def joint_mask(mask: BranchMask) -> jax.Array:
    """Dense joint validity, bool[A0, A1, ..., Ak] (for a flat-action agent, reshape to [prod A])."""
    k = len(mask.cond)
    out = mask.root.reshape((-1,) + (1,) * k)
    for i, c in enumerate(mask.cond):
        shape = [c.shape[0]] + [1] * k
        shape[i + 1] = c.shape[1]
        out = out & c.reshape(shape)
    return out


def effective_root(mask: BranchMask) -> jax.Array:
    """Root choices that leave every other branch at least one valid option."""
    ok = mask.root
    for c in mask.cond:
        ok = ok & c.any(-1)
    return ok


def any_valid(mask: BranchMask) -> jax.Array:
    return effective_root(mask).any()


def masked_argmax(values: jax.Array, mask: jax.Array) -> jax.Array:
    """argmax over valid entries (first valid index on ties); index 0 if none is valid."""
    return jnp.argmax(jnp.where(mask, values, -jnp.inf), axis=-1).astype(jnp.int32)


def branch_argmax(values: Sequence[jax.Array], mask: BranchMask) -> jax.Array:
    """Greedy per-branch action: root first (among roots that leave the others a choice), then each other
    branch given it. ``values[i]`` has shape [A_i]. Returns int32[num_branches]."""
    a0 = masked_argmax(values[0], effective_root(mask))
    rest = [masked_argmax(v, c[a0]) for v, c in zip(values[1:], mask.cond, strict=True)]
    return jnp.stack([a0, *rest]).astype(jnp.int32)


def is_valid(action: jax.Array, mask: BranchMask) -> jax.Array:
    ok = mask.root[action[0]]
    for i, c in enumerate(mask.cond):
        ok = ok & c[action[0], action[i + 1]]
    return ok


def sample_uniform(key: jax.Array, mask: BranchMask) -> jax.Array:
    """A uniformly random *joint* valid action (root weighted by how many completions it has)."""
    counts = mask.root.astype(jnp.float32)
    for c in mask.cond:
        counts = counts * c.sum(-1).astype(jnp.float32)
    keys = jax.random.split(key, 1 + len(mask.cond))
    a0 = jax.random.categorical(keys[0], jnp.where(counts > 0, jnp.log(jnp.maximum(counts, 1e-30)), -jnp.inf))
    rest = [jax.random.categorical(k, jnp.where(c[a0], 0.0, -jnp.inf)) for k, c in zip(keys[1:], mask.cond,
                                                                                       strict=True)]
    return jnp.stack([a0, *rest]).astype(jnp.int32)


def flatten_action(action: jax.Array, nvec: Sequence[int]) -> jax.Array:
    """Row-major index of a multi-discrete action (inverse of :func:`unflatten_action`)."""
    idx = jnp.zeros(action.shape[:-1], jnp.int32)
    for i, n in enumerate(nvec):
        idx = idx * int(n) + action[..., i]
    return idx


def unflatten_action(index: jax.Array, nvec: Sequence[int]) -> jax.Array:
    out = []
    for n in reversed(nvec):
        out.append(index % int(n))
        index = index // int(n)
    return jnp.stack(out[::-1], axis=-1).astype(jnp.int32)


def rollout(env: Environment, policy, key: jax.Array, params: Any, num_steps: int):
    """Scan ``policy(key, obs, state, params) -> action`` for ``num_steps`` steps from a reset.

    Returns ``(final_state, (reward, done, info))`` stacked over time. Jit the caller, vmap over keys.
    """
    k0, key = jax.random.split(key)
    obs, state = env.reset(k0, params)

    def body(carry, k):
        obs, state = carry
        ka, ks = jax.random.split(k)
        action = policy(ka, obs, state, params)
        obs, state, reward, done, info = env.step(ks, state, action, params)
        return (obs, state), (reward, done, info)

    (obs, state), out = jax.lax.scan(body, (obs, state), jax.random.split(key, num_steps))
    return state, out


__all__ = [
    "BranchMask", "Environment", "MultiDiscrete", "any_valid", "branch_argmax", "effective_root",
    "flatten_action", "is_valid", "joint_mask", "masked_argmax", "product_mask", "rollout", "sample_uniform",
    "unflatten_action",
]
