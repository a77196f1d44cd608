"""DQN pieces: dueling and *branching* dueling Q-networks (BDQ), double-Q targets, TD losses, exploration.

Branching Dueling Q-Network (Tavakoli, Pardo, Kormushev, AAAI 2018): a shared torso, a state value V(s) and one
advantage branch per action dimension d,

    Q_d(s, a_d) = V(s) + A_d(s, a_d) - mean_a' A_d(s, a')

the greedy action is the per-branch argmax, the TD target is shared by all branches and averages the branches'
double-Q estimates,

    y = r + gamma * (1/D) * sum_d Q_d^-(s', argmax_a' Q_d(s', a'))

and the loss is E[(1/D) sum_d (y - Q_d(s, a_d))^2]. Gradients entering the shared torso are scaled by 1/(D+1)
(D branches plus the value stream). The output count grows linearly with D, unlike a flat Q-network over the
joint action space (:class:`DuelingQNetwork`, used for the single-action ablation).

Masks are :class:`mlsys_repro.common.rl.env.BranchMask` (root branch first, others conditioned on it): greedy actions
and double-Q argmaxes respect them. All functions are pure and batch over leading axes with ``jax.vmap``.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from mlsys_repro.common.models.mlp import MLP
from mlsys_repro.common.rl.env import BranchMask, branch_argmax, effective_root, masked_argmax, sample_uniform


def scale_gradient(x: jax.Array, scale: float) -> jax.Array:
    """Identity in the forward pass; multiplies the gradient by ``scale`` in the backward pass."""
    return x * scale + jax.lax.stop_gradient(x * (1.0 - scale))


def dueling(value: jax.Array, advantage: jax.Array) -> jax.Array:
    """Q = V + A - mean(A) over the last axis (``value`` [..., 1], ``advantage`` [..., A])."""
    return value + advantage - advantage.mean(-1, keepdims=True)


class BranchingQNetwork(nnx.Module):
    """BDQ: shared torso -> value stream + one advantage stream per branch; returns a tuple of [..., A_d]."""

    def __init__(self, obs_dim: int, branch_sizes: Sequence[int], rngs: nnx.Rngs,
                 torso: Sequence[int] = (256, 256), head_hidden: int = 128, scale_torso_grad: bool = True):
        self.branch_sizes = tuple(int(n) for n in branch_sizes)
        self.torso = MLP((obs_dim, *torso), rngs, activate_last=True)
        self.value = MLP((torso[-1], head_hidden, 1), rngs)
        self.branches = nnx.List([MLP((torso[-1], head_hidden, n), rngs)
                                  for n in self.branch_sizes])
        self.torso_scale = 1.0 / (len(self.branch_sizes) + 1) if scale_torso_grad else 1.0

    def __call__(self, obs: jax.Array) -> tuple[jax.Array, ...]:
        h = scale_gradient(self.torso(obs), self.torso_scale)
        v = self.value(h)
        return tuple(dueling(v, b(h)) for b in self.branches)


class DuelingQNetwork(nnx.Module):
    """Flat dueling Q-network over ``num_actions`` joint actions (returns [..., num_actions])."""

    def __init__(self, obs_dim: int, num_actions: int, rngs: nnx.Rngs, torso: Sequence[int] = (256, 256),
                 head_hidden: int = 128):
        self.torso = MLP((obs_dim, *torso), rngs, activate_last=True)
        self.value = MLP((torso[-1], head_hidden, 1), rngs)
        self.advantage = MLP((torso[-1], head_hidden, num_actions), rngs)

    def __call__(self, obs: jax.Array) -> jax.Array:
        h = self.torso(obs)
        return dueling(self.value(h), self.advantage(h))


# ---------------------------------------------------------------------------------------------- targets, losses


def branch_double_q_target(reward: jax.Array, discount: jax.Array, q_next_online: Sequence[jax.Array],
                           q_next_target: Sequence[jax.Array], next_mask: BranchMask) -> jax.Array:
    """BDQ target for one transition: r + discount * mean_d Q_d^target(s', greedy_d(online, mask)).

    ``discount`` is gamma * (1 - terminal). Unbatched; ``jax.vmap`` for batches.
    """
    a = branch_argmax(q_next_online, next_mask)
    qs = jnp.stack([q[a[d]] for d, q in enumerate(q_next_target)])
    return reward + discount * qs.mean()


def branch_td_loss(q: Sequence[jax.Array], actions: jax.Array, target: jax.Array, huber_delta: float | None = None
                   ) -> jax.Array:
    """mean over batch of (1/D) sum_d loss(y - Q_d(s, a_d)); ``q[d]`` [B, A_d], ``actions`` [B, D], ``target`` [B]."""
    taken = jnp.stack([jnp.take_along_axis(qd, actions[:, d:d + 1], axis=-1)[:, 0] for d, qd in enumerate(q)], -1)
    err = jax.lax.stop_gradient(target)[:, None] - taken
    per = optax.huber_loss(err, delta=huber_delta) if huber_delta else 0.5 * err ** 2
    return per.mean()


def double_q_target(reward: jax.Array, discount: jax.Array, q_next_online: jax.Array, q_next_target: jax.Array,
                    next_mask: jax.Array) -> jax.Array:
    """Flat double-DQN target for one transition (van Hasselt et al. 2016), argmax over valid actions."""
    a = masked_argmax(q_next_online, next_mask)
    return reward + discount * q_next_target[a]


def td_loss(q: jax.Array, actions: jax.Array, target: jax.Array, huber_delta: float | None = None) -> jax.Array:
    taken = jnp.take_along_axis(q, actions[:, None], axis=-1)[:, 0]
    err = jax.lax.stop_gradient(target) - taken
    return (optax.huber_loss(err, delta=huber_delta) if huber_delta else 0.5 * err ** 2).mean()


# ---------------------------------------------------------------------------------------------- exploration


def branch_epsilon_greedy(key: jax.Array, q: Sequence[jax.Array], mask: BranchMask, epsilon: jax.Array
                          ) -> jax.Array:
    """Per-branch epsilon-greedy: each branch independently explores with probability ``epsilon`` (uniform over
    its valid choices), else takes its greedy choice; non-root branches are decided given the root actually taken."""
    k0, *ks = jax.random.split(key, 1 + 2 * len(mask.cond) + 1)
    root_ok = effective_root(mask)
    greedy0 = masked_argmax(q[0], root_ok)
    rand0 = jax.random.categorical(ks[0], jnp.where(root_ok, 0.0, -jnp.inf))
    a0 = jnp.where(jax.random.uniform(k0) < epsilon, rand0, greedy0)
    out = [a0]
    for i, (qi, c) in enumerate(zip(q[1:], mask.cond, strict=True)):
        m = c[a0]
        g = masked_argmax(qi, m)
        r = jax.random.categorical(ks[1 + 2 * i], jnp.where(m, 0.0, -jnp.inf))
        out.append(jnp.where(jax.random.uniform(ks[2 + 2 * i]) < epsilon, r, g))
    return jnp.stack(out).astype(jnp.int32)


def epsilon_greedy(key: jax.Array, q: jax.Array, mask: jax.Array, epsilon: jax.Array) -> jax.Array:
    k1, k2 = jax.random.split(key)
    rand = jax.random.categorical(k1, jnp.where(mask, 0.0, -jnp.inf))
    return jnp.where(jax.random.uniform(k2) < epsilon, rand, masked_argmax(q, mask)).astype(jnp.int32)


def linear_schedule(start: float, end: float, steps: int):
    """t -> start + (end - start) * min(t / steps, 1)."""

    def f(t):
        frac = jnp.clip(jnp.asarray(t, jnp.float32) / max(int(steps), 1), 0.0, 1.0)
        return start + (end - start) * frac

    return f


__all__ = [
    "BranchingQNetwork", "DuelingQNetwork", "branch_double_q_target", "branch_epsilon_greedy",
    "branch_td_loss", "double_q_target", "dueling", "epsilon_greedy", "linear_schedule", "sample_uniform",
    "scale_gradient", "td_loss",
]
