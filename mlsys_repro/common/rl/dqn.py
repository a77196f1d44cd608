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


class ConditionedBranchingQNetwork(nnx.Module):
    """BDQ whose non-root branches are conditioned on the root choice (autoregressive branches).

    Branch d >= 1 scores its choices given root choice ``c``: its head reads the torso features and ``one_hot(c)``.
    With ``tables``, the observation's last ``A0 + sum_{d>=1} A0 * A_d`` columns are per-choice features: one
    value per root choice, then one row-major [A0, A_d] block per other branch (a value per (root, choice)). Each
    branch then also reads its row (the root's table, or row ``c`` of its block), both as head input and through a
    per-choice term ``g_d(x_j)`` added to choice j's advantage (a small MLP applied to every choice's value alike:
    the same feature means the same thing for every choice). So "the best node depends on the cut" is expressible,
    which additive branches (:class:`BranchingQNetwork`) cannot do.

    ``net(obs, root)`` returns ``(q0 [..., A0], q1 [..., A1], ...)``: the root branch and the other branches
    given ``root`` (int [...]); ``net.root_values(obs)`` is ``q0`` alone (the greedy root needs nothing else).
    Dueling per branch as in BDQ: ``Q_d = V + A_d - mean A_d``.
    """

    def __init__(self, obs_dim: int, branch_sizes: Sequence[int], rngs: nnx.Rngs,
                 torso: Sequence[int] = (256, 256), head_hidden: int = 128, tables: bool = False,
                 scale_torso_grad: bool = True, choice_hidden: int = 16):
        self.branch_sizes = tuple(int(n) for n in branch_sizes)
        a0, rest = self.branch_sizes[0], self.branch_sizes[1:]
        self.table_cols = (a0 + sum(a0 * n for n in rest)) if tables else 0
        if self.table_cols >= obs_dim:
            raise ValueError(f"observation of {obs_dim} columns cannot hold {self.table_cols} table columns")
        self.tables = bool(tables)
        self.obs_dim = int(obs_dim)
        self.torso = MLP((obs_dim, *torso), rngs, activate_last=True)
        self.value = MLP((torso[-1], head_hidden, 1), rngs)
        self.root = MLP((torso[-1], head_hidden, a0), rngs)
        self.branches = nnx.List([MLP((torso[-1] + a0 + (n if tables else 0), head_hidden, n), rngs)
                                  for n in rest])
        self.choice = nnx.List([MLP((1, choice_hidden, 1), rngs) for _ in self.branch_sizes]) if tables else None
        self.torso_scale = 1.0 / (len(self.branch_sizes) + 1) if scale_torso_grad else 1.0

    def _trunk(self, obs: jax.Array) -> tuple[jax.Array, jax.Array]:
        h = scale_gradient(self.torso(obs), self.torso_scale)
        return h, self.value(h)

    def _per_choice(self, d: int, x: jax.Array) -> jax.Array:
        return self.choice[d](x[..., None])[..., 0]

    def root_values(self, obs: jax.Array) -> jax.Array:
        h, v = self._trunk(obs)
        adv = self.root(h)
        if self.tables:
            off = self.obs_dim - self.table_cols
            adv = adv + self._per_choice(0, obs[..., off:off + self.branch_sizes[0]])
        return dueling(v, adv)

    def __call__(self, obs: jax.Array, root: jax.Array) -> tuple[jax.Array, ...]:
        h, v = self._trunk(obs)
        a0 = self.branch_sizes[0]
        out = [self.root_values(obs)]
        onehot = jax.nn.one_hot(root, a0, dtype=h.dtype)
        off = self.obs_dim - self.table_cols + a0
        for d, (n, head) in enumerate(zip(self.branch_sizes[1:], self.branches, strict=True), start=1):
            if self.tables:
                tab = obs[..., off:off + a0 * n].reshape(*obs.shape[:-1], a0, n)
                row = jnp.take_along_axis(tab, root[..., None, None].astype(jnp.int32), -2)[..., 0, :]
                adv = head(jnp.concatenate([h, onehot, row], -1)) + self._per_choice(d, row)
                off += a0 * n
            else:
                adv = head(jnp.concatenate([h, onehot], -1))
            out.append(dueling(v, adv))
        return tuple(out)


def conditioned_greedy(net: ConditionedBranchingQNetwork, obs: jax.Array, mask: BranchMask
                       ) -> tuple[jax.Array, tuple[jax.Array, ...]]:
    """Greedy action of a root-conditioned BDQ for one state: the root among those that leave every other branch a
    choice, then each branch given it. Returns (int32 [D], the branch values given that root)."""
    a0 = masked_argmax(net.root_values(obs), effective_root(mask))
    q = net(obs, a0)
    rest = [masked_argmax(v, c[a0]) for v, c in zip(q[1:], mask.cond, strict=True)]
    return jnp.stack([a0, *rest]).astype(jnp.int32), q


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


def conditioned_double_q_target(online, target, ret: jax.Array, discount: jax.Array, next_obs: jax.Array,
                                next_mask: BranchMask) -> jax.Array:
    """Double-Q BDQ target for a batch, root-conditioned networks (:class:`ConditionedBranchingQNetwork`):

        y = ret + discount * (1/D) * sum_d Q_d^target(s', a*_d | a*_0),   a* = conditioned_greedy(online, s')

    The online network picks the next action (the root, then each branch given that root, masks respected); the
    target network evaluates every branch at that action, its non-root branches conditioned on the online root.
    ``ret`` and ``discount`` [B] (the n-step return and ``gamma^n`` times "no episode end"), ``next_obs`` [B, obs],
    ``next_mask`` a batched :class:`BranchMask`. ``online`` and ``target`` need only ``root_values(obs)`` and
    ``__call__(obs, root)``; no gradient flows through the target."""
    a_next = jax.lax.stop_gradient(jax.vmap(lambda o, m: conditioned_greedy(online, o, m)[0])(next_obs, next_mask))
    q_t = target(next_obs, a_next[:, 0])
    qs = jnp.stack([jnp.take_along_axis(qd, a_next[:, d:d + 1], -1)[:, 0] for d, qd in enumerate(q_t)], -1)
    return jax.lax.stop_gradient(ret + discount * qs.mean(-1))


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


def top_k_explore(key: jax.Array, greedy: jax.Array, scores: jax.Array, valid: jax.Array, k: int,
                  epsilon: jax.Array) -> jax.Array:
    """Exploration restricted to promising actions: with probability ``epsilon`` a joint action drawn uniformly
    from the ``k`` valid ones with the highest ``scores`` (flat [A], e.g. minus a model's predicted cost), else
    ``greedy`` (flat index). Never returns an invalid action when ``greedy`` is valid; with fewer than ``k`` valid
    actions only valid ones are drawn."""
    k = min(int(k), int(scores.shape[-1]))
    top, idx = jax.lax.top_k(jnp.where(valid, scores, -jnp.inf), k)
    k1, k2 = jax.random.split(key)
    pick = idx[jax.random.categorical(k1, jnp.where(jnp.isfinite(top), 0.0, -jnp.inf))]
    return jnp.where(jax.random.uniform(k2) < epsilon, pick, greedy).astype(jnp.int32)


def polyak(online, target, tau: float):
    """Soft target update ``target <- tau * online + (1 - tau) * target`` (leaf-wise)."""
    return jax.tree.map(lambda p, t: tau * p + (1.0 - tau) * t, online, target)


def linear_schedule(start: float, end: float, steps: int):
    """t -> start + (end - start) * min(t / steps, 1)."""

    def f(t):
        frac = jnp.clip(jnp.asarray(t, jnp.float32) / max(int(steps), 1), 0.0, 1.0)
        return start + (end - start) * frac

    return f


__all__ = [
    "BranchingQNetwork", "ConditionedBranchingQNetwork", "DuelingQNetwork", "branch_double_q_target",
    "conditioned_double_q_target",
    "branch_epsilon_greedy", "branch_td_loss", "conditioned_greedy", "double_q_target", "dueling", "epsilon_greedy",
    "linear_schedule", "polyak", "sample_uniform", "scale_gradient", "td_loss", "top_k_explore",
]
