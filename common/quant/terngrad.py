"""TernGrad (Wen et al., NeurIPS 2017): unbiased ternary gradients {-1, 0, +1} times a per-bucket scale.

For a bucket ``g`` (optionally clipped first to ``clip_sigma`` standard deviations, the paper's gradient
clipping, which makes the code unbiased for the *clipped* gradient):

    s_t = max_i |g_i|,   b_i ~ Bernoulli(|g_i| / s_t),   tern_i = sign(g_i) * b_i,   g~_i = s_t * tern_i

``E[g~] = g`` and ``|g~_i - g_i| <= s_t``. Wire size: 2 bits per element plus a float32 scale per bucket.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from common.quant.pieces import check_piece_size, from_pieces, num_pieces, to_pieces


class TernCode(NamedTuple):
    tern: jax.Array  # int8 [P, L] in {-1, 0, 1}
    scale: jax.Array  # float32 [P]


def clip(x: jax.Array, clip_sigma: float) -> jax.Array:
    """The paper's layer-wise clipping: values beyond ``clip_sigma`` standard deviations are clipped."""
    c = clip_sigma * jnp.std(x)
    return jnp.clip(x, -c, c)


@functools.partial(jax.jit, static_argnames=("bucket_size",))
def quantize(x: jax.Array, key: jax.Array, bucket_size: int) -> TernCode:
    xp, valid = to_pieces(x.astype(jnp.float32), bucket_size)
    xp = jnp.where(valid, xp, 0.0)
    st = jnp.max(jnp.abs(xp), axis=1)
    safe = jnp.where(st > 0, st, 1.0)
    b = jax.random.uniform(key, xp.shape) < jnp.abs(xp) / safe[:, None]
    return TernCode((jnp.sign(xp) * b).astype(jnp.int8), st)


@functools.partial(jax.jit, static_argnames=("n",))
def dequantize(code: TernCode, n: int) -> jax.Array:
    return from_pieces(code.scale[:, None] * code.tern.astype(jnp.float32), n)


def wire_bytes(n: int, bucket_size: int) -> int:
    check_piece_size(bucket_size)
    return -(-2 * int(n) // 8) + 4 * num_pieces(n, bucket_size)


__all__ = ["TernCode", "clip", "dequantize", "quantize", "wire_bytes"]
