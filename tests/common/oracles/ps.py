"""Parameter-server push/pull with the servers sharded over the workers (per-device code for ``shard_map``).

Device ``i`` is both a worker and the server of shard ``i`` (chunk ``i`` of ``n`` equal chunks of the flat
vector). Push: every worker sends chunk ``j`` of its gradient to server ``j`` (one ``all_to_all``). The server
sums what it received (bulk-synchronous: all ``n`` pushes). Pull: every worker fetches every shard
(``all_gather``). Each device sends and receives ``2 (n - 1) / n`` of the vector, like a ring, but in one round
of ``n - 1`` concurrent messages per direction instead of ``2 (n - 1)`` ring steps.

:func:`push_pull_sketch` is the BytePS-style compressed variant: workers push 8-bit sketches (uint8 codes plus
``lo``/``scale`` per piece), the server decodes, sums, sketches the sum once and workers pull the codes. It
returns ``(result, bound)`` with ``bound`` the per-element error bound (sum of the pushed pieces' ``scale / 2``
plus the pulled piece's ``scale / 2``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from mlsys_repro.common.quant import sketch


def _chunks(x: jax.Array, n: int) -> jax.Array:
    if x.ndim != 1 or x.shape[0] % n:
        raise ValueError(f"expected a flat vector whose length is divisible by {n}, got shape {x.shape}")
    return x.reshape(n, -1)


def push(x: jax.Array, axis: str, n: int) -> jax.Array:
    """What server ``i`` holds after the push: ``[n, chunk]``, row ``w`` from worker ``w``."""
    return lax.all_to_all(_chunks(x, n), axis, 0, 0, tiled=False)


def pull(shard: jax.Array, axis: str) -> jax.Array:
    """Every worker fetches every server's shard; returns the flat vector."""
    return lax.all_gather(shard, axis, tiled=True)


def push_pull(x: jax.Array, axis: str, n: int) -> jax.Array:
    """Sum over workers via sharded PS (push, aggregate, pull)."""
    return pull(push(x, axis, n).sum(axis=0), axis)


def push_pull_sketch(x: jax.Array, axis: str, n: int, piece_size: int) -> tuple[jax.Array, jax.Array]:
    """BytePS-style sketched push/pull; ``(sum_hat [D], bound [D])``."""
    c = _chunks(x, n)
    d = c.shape[1]
    sk = jax.vmap(lambda v: sketch.quantize(v, piece_size))(c)
    got = sketch.Sketch(*(lax.all_to_all(a, axis, 0, 0, tiled=False) for a in sk))  # row w: from worker w
    dec = jax.vmap(lambda cd, lo, sc: sketch.dequantize(sketch.Sketch(cd, lo, sc), d))(*got)
    push_bound = jnp.sum(jax.vmap(lambda cd, lo, sc: jnp.max(
        sketch.error_bound(sketch.Sketch(cd, lo, sc), d)))(*got))
    agg = sketch.quantize(dec.sum(axis=0), piece_size)
    bound = push_bound + jnp.max(sketch.error_bound(agg, d))
    pulled = sketch.Sketch(*(lax.all_gather(a, axis, tiled=False) for a in agg))
    out = jax.vmap(lambda cd, lo, sc: sketch.dequantize(sketch.Sketch(cd, lo, sc), d))(*pulled)
    return out.reshape(-1), jnp.repeat(lax.all_gather(bound, axis), d)


__all__ = ["pull", "push", "push_pull", "push_pull_sketch"]
