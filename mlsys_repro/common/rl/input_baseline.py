"""Input-dependent baselines for RL in environments driven by an exogenous input process (job arrivals).

When the input (here: a job window) drives most of the variance of the return, a state-value baseline cannot
remove it: it does not know the arrivals still to come. Mao et al. ("Variance reduction for reinforcement learning
in input-driven environments", ICLR 2019; used by Decima, SIGCOMM 2019) run several rollouts on the *same* input
sequence and use, as the baseline of a rollout at time ``tau``, the mean return-to-go of the *other* rollouts of
that input from the same time ``tau``. Rollouts of one input take decisions at different times, so the others'
returns are read at their first decision at or after ``tau`` (time-aligned, not step-aligned).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def returns_to_go(rewards: jax.Array, discounts: jax.Array, last: jax.Array) -> jax.Array:
    """``G_t = r_t + d_t * G_{t+1}`` over a time-major ``[T, E]`` rollout with ``G_T = last`` ``[E]`` (zero for a
    finished episode, a value estimate for a truncated one). Steps after an episode ended must carry zero
    reward."""
    def step(g, x):
        r, d = x
        g = r + d * g
        return g, g

    _, g = jax.lax.scan(step, last, (rewards, discounts), reverse=True)
    return g


def time_aligned_baseline(returns: jax.Array, times: jax.Array, last: jax.Array, group: int) -> jax.Array:
    """``[T, E]`` baseline: for rollout ``e`` at step ``t``, the mean over the other rollouts ``e'`` of its group
    of ``returns[t', e']``, ``t'`` the first step of ``e'`` whose time is ``>= times[t, e]`` (``last[e']`` when
    ``e'`` has none: it ended, or was cut, before that time).

    Args:
      returns: ``[T, E]`` returns-to-go; times: ``[T, E]`` non-decreasing decision times per rollout;
      last: ``[E]`` return-to-go after the final step; group: rollouts per input, consecutive along ``E``
        (``E`` divisible by ``group``, ``group >= 2``).
    """
    t, e = returns.shape
    if group < 2 or e % group:
        raise ValueError(f"need group >= 2 dividing the {e} rollouts, got {group}")
    ext = jnp.concatenate([returns, last[None]], 0)  # [T + 1, E]

    def read(ret_col, time_col, query):  # the other rollout's return-to-go at its first decision >= query
        idx = jnp.searchsorted(time_col, query, side="left")
        return ret_col[idx]

    # value[t, e, e'] for e' in e's group
    g = e // group
    r3 = ext.T.reshape(g, group, t + 1)  # [G, M, T + 1]
    tm3 = times.T.reshape(g, group, t)  # [G, M, T]
    at = jax.vmap(  # groups
        lambda rg, tg: jax.vmap(  # query rollout m
            lambda tq: jax.vmap(lambda rc, tc: read(rc, tc, tq))(rg, tg))(tg))(r3, tm3)  # [G, M(query), M, T]
    others = 1.0 - jnp.eye(group)  # [M, M]
    base = (at * others[None, :, :, None]).sum(2) / (group - 1)  # [G, M, T]
    return base.reshape(e, t).T


__all__ = ["returns_to_go", "time_aligned_baseline"]
