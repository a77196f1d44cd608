"""Ring reduce-scatter, all-gather and all-reduce with ``ppermute`` (per-device code for ``jax.shard_map``).

The vector of each of the ``n`` devices is cut into ``n`` equal chunks (callers pad; :func:`pad_to` helps).
Reduce-scatter takes ``n - 1`` steps: at step ``s`` device ``i`` sends its partial sum of chunk ``(i - s) mod n``
to device ``i + 1``, which adds it to its own copy; afterwards device ``i`` holds the complete sum of chunk
``(i + 1) mod n``. All-gather circulates the finished chunks for another ``n - 1`` steps. Each device sends
``2 (n - 1) / n`` of the vector in total, the bandwidth-optimal all-reduce (Patarasuk & Yuan 2009; Horovod, NCCL).

The ``*_sketch`` variants move 8-bit codes (:mod:`mlsys_repro.common.quant.sketch`): every hop of the reduce-scatter
sends the sketch of a partial sum (uint8 codes plus float32 ``lo``/``scale``), the receiver decodes and adds; the
finished chunk is sketched once by its owner and the codes are forwarded unchanged in the all-gather. They
return ``(result, bound)``: ``bound`` (per element) bounds ``|result - exact sum|``, accumulated from the
``scale / 2`` of every quantisation that chunk went through (so tests check the result against it exactly).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax

from mlsys_repro.common.quant import sketch


def pad_to(x: jax.Array, multiple: int) -> jax.Array:
    """Zero-pad a flat vector to a length divisible by ``multiple``."""
    return jnp.pad(x, (0, (-x.shape[0]) % multiple))


def _ring(n: int) -> list[tuple[int, int]]:
    return [(j, (j + 1) % n) for j in range(n)]


def _chunks(x: jax.Array, n: int) -> jax.Array:
    if x.ndim != 1 or x.shape[0] % n:
        raise ValueError(f"expected a flat vector whose length is divisible by {n}, got shape {x.shape}")
    return x.reshape(n, -1)


def reduce_scatter(x: jax.Array, axis: str, n: int) -> tuple[jax.Array, jax.Array]:
    """``(chunk, index)``: the fully reduced chunk this device owns, and its index ``(i + 1) mod n``."""
    acc = _chunks(x, n)
    i = lax.axis_index(axis)
    for s in range(n - 1):
        recv = lax.ppermute(acc[(i - s) % n], axis, _ring(n))
        acc = acc.at[(i - 1 - s) % n].add(recv)
    own = (i + 1) % n
    return acc[own], own


def all_gather(chunk: jax.Array, index: jax.Array, axis: str, n: int) -> jax.Array:
    """Inverse of :func:`reduce_scatter`'s layout: every device ends with all ``n`` chunks, flattened."""
    out = jnp.zeros((n, *chunk.shape), chunk.dtype).at[index].set(chunk)
    i = lax.axis_index(axis)
    cur = chunk
    for s in range(n - 1):
        cur = lax.ppermute(cur, axis, _ring(n))
        out = out.at[(i - s) % n].set(cur)
    return out.reshape(-1)


def allreduce(x: jax.Array, axis: str, n: int) -> jax.Array:
    """Ring all-reduce (sum) of a flat vector of length divisible by ``n``."""
    chunk, idx = reduce_scatter(x, axis, n)
    return all_gather(chunk, idx, axis, n)


def _send_sketch(v: jax.Array, piece_size: int, axis: str, perm) -> tuple[jax.Array, jax.Array]:
    """Sketch ``v``, move codes (uint8) and metadata with ``ppermute``; returns (decoded received, its q-bound)."""
    sk = sketch.quantize(v, piece_size)
    moved = sketch.Sketch(*(lax.ppermute(a, axis, perm) for a in sk))
    bound = jnp.max(sketch.error_bound(moved, v.shape[0]))
    return sketch.dequantize(moved, v.shape[0]), bound


def reduce_scatter_sketch(x: jax.Array, axis: str, n: int, piece_size: int):
    """Ring reduce-scatter with every hop sketched; returns ``(chunk, index, bound)``."""
    acc = _chunks(x, n)
    err = jnp.zeros(n, jnp.float32)
    i = lax.axis_index(axis)
    for s in range(n - 1):
        j_send, j_recv = (i - s) % n, (i - 1 - s) % n
        recv, qb = _send_sketch(acc[j_send], piece_size, axis, _ring(n))
        err_in = lax.ppermute(err[j_send], axis, _ring(n))
        acc = acc.at[j_recv].add(recv)
        err = err.at[j_recv].add(err_in + qb)
    own = (i + 1) % n
    return acc[own], own, err[own]


def allreduce_sketch(x: jax.Array, axis: str, n: int, piece_size: int) -> tuple[jax.Array, jax.Array]:
    """Horovod-style all-reduce with the 8-bit sketch; ``(sum_hat [D], bound [D])``."""
    chunk, own, err = reduce_scatter_sketch(x, axis, n, piece_size)
    sk = sketch.quantize(chunk, piece_size)
    qb = jnp.max(sketch.error_bound(sk, chunk.shape[0]))
    codes = all_gather(sk.codes, own, axis, n).reshape(n, *sk.codes.shape)
    lo = all_gather(sk.lo, own, axis, n).reshape(n, -1)
    scale = all_gather(sk.scale, own, axis, n).reshape(n, -1)
    dec = jax.vmap(lambda c, a, b: sketch.dequantize(sketch.Sketch(c, a, b), chunk.shape[0]))(codes, lo, scale)
    bound = all_gather((err + qb)[None], own, axis, n)
    return dec.reshape(-1), jnp.repeat(bound, chunk.shape[0])


__all__ = ["all_gather", "allreduce", "allreduce_sketch", "pad_to", "reduce_scatter", "reduce_scatter_sketch"]
