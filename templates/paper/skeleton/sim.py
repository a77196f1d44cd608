"""The system model: one non-preemptive server, pure and fixed-shape.

:func:`simulate` serves ``N`` jobs in ``N`` steps of one ``lax.scan``: at each step the server takes, among the jobs
that have arrived and wait, the one with the lowest key (its arrival time under FIFO, its size under SJF), or, when
none waits, the next job to arrive. The order is a traced integer, so both policies share one compiled program;
:func:`simulate_seeds` ``vmap``s it over seeds under one ``jit``."""

from __future__ import annotations

import jax
import jax.numpy as jnp

FIFO, SJF = 0, 1
ORDER_CODES = {"fifo": FIFO, "sjf": SJF}


def simulate(arrival_s: jax.Array, service_s: jax.Array, order: jax.Array) -> jax.Array:
    """Waiting time (s) of each job, in input order.

    Args:
      arrival_s: [N] arrival times, sorted.
      service_s: [N] service times.
      order: FIFO or SJF (a scalar int; ties go to the earlier arrival).
    """
    n = arrival_s.shape[0]
    key = jnp.where(order == SJF, service_s, arrival_s)

    def step(carry, _):
        t, done = carry
        t = jnp.maximum(t, jnp.min(jnp.where(done, jnp.inf, arrival_s)))  # idle: wait for the next arrival
        ready = ~done & (arrival_s <= t)
        j = jnp.argmin(jnp.where(ready, key, jnp.inf))
        return (t + service_s[j], done.at[j].set(True)), (j, t - arrival_s[j])

    init = (jnp.zeros((), arrival_s.dtype), jnp.zeros(n, bool))
    _, (served, wait) = jax.lax.scan(step, init, None, length=n)
    return jnp.zeros_like(arrival_s).at[served].set(wait)


@jax.jit
def simulate_seeds(arrival_s: jax.Array, service_s: jax.Array, order: jax.Array) -> jax.Array:
    """:func:`simulate` for every seed: ``arrival_s``, ``service_s`` [seeds, N] -> waits [seeds, N]."""
    return jax.vmap(simulate, in_axes=(0, 0, None))(arrival_s, service_s, order)
