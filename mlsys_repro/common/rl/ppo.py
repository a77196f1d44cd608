"""Pure PPO building blocks (single- or multi-agent): GAE, clipped surrogate, value loss, entropy, batching.

Everything is a pure function of arrays, jit/vmap/grad-safe, with no parameters or state of its own, so a
single-agent PPO (one policy, one value) and MAPPO (shared policy over agents, centralised value) use the same
pieces. Arrays are **time-major**: ``[T, ...]`` where ``...`` is any batch shape (envs, agents).

Conventions:
  * ``dones[t]`` is 1.0 when the episode ended *at* step ``t`` (the transition ``t`` was its last), so the
    value of ``t + 1`` must not be bootstrapped into ``t``.
  * ``discounts`` (optional, same shape as rewards) replaces the constant ``gamma`` per step, for semi-MDPs
    where some steps take no time (e.g. several decisions inside one scheduling round: discount 1 for those).
  * Masked categorical helpers use a large negative logit for invalid actions; at least one must be valid.

Reference formulas: Schulman et al., "High-Dimensional Continuous Control Using Generalized Advantage
Estimation" (2016) and "Proximal Policy Optimization Algorithms" (2017); Yu et al., "The Surprising
Effectiveness of PPO in Cooperative Multi-Agent Games" (MAPPO, 2022) for value clipping and shared rewards.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

NEG_INF = -1e9


class PPOLossInfo(NamedTuple):
    total: jax.Array
    policy: jax.Array
    value: jax.Array
    entropy: jax.Array
    approx_kl: jax.Array
    clip_frac: jax.Array


def gae(rewards: jax.Array, values: jax.Array, dones: jax.Array, last_value: jax.Array, gamma: float = 0.99,
        lam: float = 0.95, discounts: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """Generalised advantage estimation over a time-major rollout.

    Args:
      rewards, values, dones: ``[T, ...]``; ``values[t] = V(s_t)``.
      last_value: ``[...]``, ``V(s_T)`` used to bootstrap the final step (ignored where ``dones[T-1]``).
      gamma, lam: discount and GAE lambda.
      discounts: optional ``[T, ...]`` per-step discount replacing ``gamma``.

    Returns:
      ``(advantages, returns)``, both ``[T, ...]``, with ``returns = advantages + values``.
    """
    rewards = jnp.asarray(rewards, jnp.float32)
    values = jnp.asarray(values, jnp.float32)
    notdone = 1.0 - jnp.asarray(dones, jnp.float32)
    disc = jnp.full_like(rewards, gamma) if discounts is None else jnp.asarray(discounts, jnp.float32)
    next_values = jnp.concatenate([values[1:], jnp.asarray(last_value, jnp.float32)[None]], axis=0)

    def step(carry, x):
        r, v, nv, nd, g = x
        delta = r + g * nv * nd - v
        adv = delta + g * lam * nd * carry
        return adv, adv

    _, adv = jax.lax.scan(step, jnp.zeros_like(rewards[0]), (rewards, values, next_values, notdone, disc),
                          reverse=True)
    return adv, adv + values


def normalize(x: jax.Array, mask: jax.Array | None = None, eps: float = 1e-8) -> jax.Array:
    """Zero-mean unit-variance over all elements (or the ``mask``-ed ones); used for advantages."""
    if mask is None:
        return (x - x.mean()) / (x.std() + eps)
    m = mask.astype(x.dtype)
    n = jnp.maximum(m.sum(), 1.0)
    mean = (x * m).sum() / n
    var = (((x - mean) ** 2) * m).sum() / n
    return (x - mean) / (jnp.sqrt(var) + eps)


def clipped_surrogate(logp: jax.Array, logp_old: jax.Array, advantages: jax.Array, clip_eps: float = 0.2,
                      mask: jax.Array | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """PPO clipped policy loss (to minimise), approximate KL and clip fraction, averaged over ``mask``."""
    ratio = jnp.exp(logp - logp_old)
    unclipped = ratio * advantages
    clipped = jnp.clip(ratio, 1.0 - clip_eps, 1.0 + clip_eps) * advantages
    loss = -jnp.minimum(unclipped, clipped)
    approx_kl = (ratio - 1.0) - (logp - logp_old)  # k3 estimator, always >= 0
    clip_frac = (jnp.abs(ratio - 1.0) > clip_eps).astype(jnp.float32)
    return _mean(loss, mask), _mean(approx_kl, mask), _mean(clip_frac, mask)


def value_loss(values: jax.Array, values_old: jax.Array, returns: jax.Array, clip_eps: float | None = None,
               mask: jax.Array | None = None) -> jax.Array:
    """0.5 * squared error to the returns; with ``clip_eps`` the pessimistic clipped variant (MAPPO/PPO2)."""
    err = (values - returns) ** 2
    if clip_eps is not None:
        v_clip = values_old + jnp.clip(values - values_old, -clip_eps, clip_eps)
        err = jnp.maximum(err, (v_clip - returns) ** 2)
    return 0.5 * _mean(err, mask)


def _mean(x: jax.Array, mask: jax.Array | None) -> jax.Array:
    if mask is None:
        return x.mean()
    m = jnp.broadcast_to(mask, x.shape).astype(x.dtype)
    return (x * m).sum() / jnp.maximum(m.sum(), 1.0)


# ---------------------------------------------------------------------------------------------- categorical


def masked_logits(logits: jax.Array, mask: jax.Array | None) -> jax.Array:
    """Logits with invalid actions (``mask == False``) pushed to a large negative value."""
    if mask is None:
        return logits
    return jnp.where(mask, logits, NEG_INF)


def categorical_log_prob(logits: jax.Array, action: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """``log pi(action)`` of a (masked) categorical over the last axis; ``action`` is an integer index."""
    lp = jax.nn.log_softmax(masked_logits(logits, mask), axis=-1)
    return jnp.take_along_axis(lp, action[..., None].astype(jnp.int32), axis=-1)[..., 0]


def categorical_entropy(logits: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Entropy of a (masked) categorical over the last axis (invalid actions contribute 0)."""
    z = masked_logits(logits, mask)
    lp = jax.nn.log_softmax(z, axis=-1)
    p = jnp.exp(lp)
    ent = -(p * jnp.where(p > 0, lp, 0.0))
    if mask is not None:
        ent = jnp.where(mask, ent, 0.0)
    return ent.sum(-1)


def categorical_sample(key: jax.Array, logits: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Sample from a (masked) categorical over the last axis."""
    return jax.random.categorical(key, masked_logits(logits, mask), axis=-1)


def categorical_mode(logits: jax.Array, mask: jax.Array | None = None) -> jax.Array:
    """Greedy action of a (masked) categorical (used for evaluation)."""
    return jnp.argmax(masked_logits(logits, mask), axis=-1)


# ---------------------------------------------------------------------------------------------- batching


def ppo_loss(logp: jax.Array, logp_old: jax.Array, advantages: jax.Array, values: jax.Array,
             values_old: jax.Array, returns: jax.Array, entropy: jax.Array, *, clip_eps: float = 0.2,
             vf_coef: float = 0.5, ent_coef: float = 0.01, vf_clip: float | None = None,
             mask: jax.Array | None = None) -> PPOLossInfo:
    """Total PPO loss = surrogate + vf_coef * value loss - ent_coef * entropy (all masked means)."""
    pl, kl, cf = clipped_surrogate(logp, logp_old, advantages, clip_eps, mask)
    vl = value_loss(values, values_old, returns, vf_clip, mask)
    ent = _mean(entropy, mask)
    total = pl + vf_coef * vl - ent_coef * ent
    return PPOLossInfo(total, pl, vl, ent, kl, cf)


def flatten_batch(tree: Any, num_leading: int = 2) -> Any:
    """Merge the first ``num_leading`` axes of every leaf (e.g. ``[T, E, ...] -> [T*E, ...]``)."""
    def f(x):
        return x.reshape((-1, *x.shape[num_leading:]))

    return jax.tree.map(f, tree)


def minibatches(key: jax.Array, tree: Any, num_minibatches: int) -> Any:
    """Shuffle a flat batch (leading axis B) and split it into ``[M, B // M, ...]`` (M = num_minibatches).

    ``B`` must be divisible by ``num_minibatches``; the result is meant for ``lax.scan`` over minibatches.
    """
    size = jax.tree.leaves(tree)[0].shape[0]
    if size % num_minibatches:
        raise ValueError(f"batch of {size} is not divisible into {num_minibatches} minibatches")
    perm = jax.random.permutation(key, size)

    def f(x):
        return x[perm].reshape((num_minibatches, size // num_minibatches, *x.shape[1:]))

    return jax.tree.map(f, tree)


__all__ = [
    "NEG_INF", "PPOLossInfo", "categorical_entropy", "categorical_log_prob", "categorical_mode",
    "categorical_sample", "clipped_surrogate", "flatten_batch", "gae", "masked_logits", "minibatches",
    "normalize", "ppo_loss", "value_loss",
]
