"""What staleness costs momentum SGD, on a quadratic (pure JAX; the reason the proxy's PS runs momentum, issue #50).

:func:`delayed_quadratic` runs the simulator's own PS update (:func:`mlsys_repro.papers.petrel.sim.ps_update`) on
``f(w) = 0.5 * sum(h * w**2)`` with every gradient taken at the iterate ``s`` updates old (a fixed staleness ``s``,
the regime of an asynchronous PS where each gradient was computed on an older pull), under ``lax.scan`` in one jit,
vmapped over staleness values. With momentum the heavy-ball recursion's characteristic polynomial gains ``s`` extra
roots, and the step that converges fastest without delay oscillates or diverges with it (Mitliagkas et al. 2016,
"Asynchrony begets momentum": asynchrony adds implicit momentum on top of the explicit one). The tests read the
monotone loss in ``s`` from it; the README quotes it as the reason momentum makes the proxy staleness-sensitive.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from mlsys_repro.papers.petrel.sim import ps_update


@partial(jax.jit, static_argnames=("steps", "max_staleness"))
def delayed_quadratic(h: jax.Array, w0: jax.Array, lr: float, mu: float, staleness: jax.Array, *, steps: int,
                      max_staleness: int) -> jax.Array:
    """Loss ``f(w_t)`` for t = 1..steps of momentum SGD whose gradient at update t is taken at ``w_{t - s}``
    (``w_0`` before the start), for every ``s`` in ``staleness`` (int array, each <= ``max_staleness``): [S, steps].

    The iterates live in a ring buffer of ``max_staleness + 1`` slots, so one compiled scan serves every ``s``
    (vmapped)."""
    h, w0 = jnp.asarray(h, jnp.float32), jnp.asarray(w0, jnp.float32)
    slots = max_staleness + 1

    def run(s):
        def step(carry, t):
            ring, v = carry
            w = ring[t % slots]
            stale = ring[jnp.maximum(t - s, 0) % slots]
            w, v = ps_update(w, v, h * stale, lr, mu)
            ring = ring.at[(t + 1) % slots].set(w)
            return (ring, v), 0.5 * jnp.sum(h * w * w)

        ring = jnp.broadcast_to(w0, (slots, *w0.shape))
        _, loss = jax.lax.scan(step, (ring, jnp.zeros_like(w0)), jnp.arange(steps))
        return loss

    return jax.vmap(run)(jnp.asarray(staleness, jnp.int32))
