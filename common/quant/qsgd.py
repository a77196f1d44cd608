"""QSGD (Alistarh et al., NeurIPS 2017): unbiased stochastic quantisation to ``s`` levels per bucket.

For a bucket ``v`` (a piece of :mod:`common.quant.pieces`) with ``norm = ||v||_2``:

    level_i = floor(s * |v_i| / norm + u_i),  u_i ~ U[0, 1)        (so level_i in {0, ..., s})
    Q(v)_i  = norm * sign(v_i) * level_i / s

``E[Q(v)] = v`` and ``E||Q(v) - v||^2 <= min(d / s^2, sqrt(d) / s) * ||v||^2`` for a bucket of ``d`` elements
(Lemma 3.1 of the paper). Signed levels are stored as int8 (``s <= 127``).

Wire size (:func:`wire_bits`) uses the paper's fixed-length variant, not Elias coding: ``1 + ceil(log2(s + 1))``
bits per element (sign and level) plus a float32 norm per bucket.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp

from common.quant.pieces import check_piece_size, from_pieces, num_pieces, to_pieces


class QSGDCode(NamedTuple):
    levels: jax.Array  # int8 [P, L], signed level in [-s, s]
    norm: jax.Array  # float32 [P]


def _check_levels(s: int) -> int:
    if int(s) != s or not 1 <= s <= 127:
        raise ValueError(f"QSGD levels s must be an integer in [1, 127], got {s!r}")
    return int(s)


@functools.partial(jax.jit, static_argnames=("s", "bucket_size"))
def quantize(x: jax.Array, key: jax.Array, s: int, bucket_size: int) -> QSGDCode:
    """Stochastic QSGD code of a flat tensor (buckets of ``bucket_size``)."""
    s = _check_levels(s)
    xp, valid = to_pieces(x.astype(jnp.float32), bucket_size)
    xp = jnp.where(valid, xp, 0.0)
    norm = jnp.sqrt(jnp.sum(xp * xp, axis=1))
    safe = jnp.where(norm > 0, norm, 1.0)
    r = s * jnp.abs(xp) / safe[:, None]
    lvl = jnp.clip(jnp.floor(r + jax.random.uniform(key, r.shape)), 0, s)
    return QSGDCode((jnp.sign(xp) * lvl).astype(jnp.int8), norm)


@functools.partial(jax.jit, static_argnames=("s", "n"))
def dequantize(code: QSGDCode, s: int, n: int) -> jax.Array:
    return from_pieces(code.norm[:, None] * code.levels.astype(jnp.float32) / s, n)


def variance_bound(v: jax.Array, s: int, bucket_size: int) -> jax.Array:
    """Lemma 3.1 bound on ``E||Q(v) - v||^2`` summed over buckets."""
    xp, valid = to_pieces(v.astype(jnp.float32), bucket_size)
    xp = jnp.where(valid, xp, 0.0)
    d = valid.sum(axis=1).astype(jnp.float32)
    sq = jnp.sum(xp * xp, axis=1)
    return jnp.sum(jnp.minimum(d / s**2, jnp.sqrt(d) / s) * sq)


def wire_bits(n: int, s: int, bucket_size: int) -> int:
    s = _check_levels(s)
    check_piece_size(bucket_size)
    return int(n) * (1 + math.ceil(math.log2(s + 1))) + 32 * num_pieces(n, bucket_size)


def wire_bytes(n: int, s: int, bucket_size: int) -> int:
    return -(-wire_bits(n, s, bucket_size) // 8)


__all__ = ["QSGDCode", "dequantize", "quantize", "variance_bound", "wire_bits", "wire_bytes"]
