"""Dense graph operators for small graphs (N <= ~500 nodes), where ``A @ X`` beats edge lists on CPU.

Conventions: node features are ``[..., N, F]``; an adjacency is ``[N, N]`` (``A[i, j]`` = weight of the edge
i -> j) or batched ``[B, N, N]``; a stack of *supports* (the matrices a diffusion convolution walks on) is
``[S, N, N]`` shared by the whole batch or ``[B, S, N, N]`` per sample. Everything is a pure function of
arrays, so it jit-compiles, vmaps and differentiates.

Definitions (DCRNN, Li et al., ICLR 2018, Eq. 2):

* random walk matrix ``D_O^{-1} A`` (rows sum to one; a row without out-edges stays zero);
* dual random walk supports ``(D_O^{-1} A, D_I^{-1} A^T)`` for directed graphs;
* diffusion features of ``X``: ``[X, P_1 X, P_1^2 X, ..., P_1^K X, P_2 X, ..., P_S^K X]`` concatenated on the
  feature axis, i.e. the plain powers of the paper's definition. (The DCRNN reference code uses the
  Chebyshev-like recursion ``2 P x_{k-1} - x_{k-2}`` instead; both span the same polynomial space for K <= 2
  up to a reweighting that the following linear layer absorbs.)
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def random_walk(adj: jax.Array) -> jax.Array:
    """``D_O^{-1} A`` over the last two axes; rows with zero out-degree stay zero (no NaN)."""
    deg = adj.sum(-1, keepdims=True)
    return jnp.where(deg > 0, adj / jnp.where(deg > 0, deg, 1.0), 0.0)


def dual_random_walk(adj: jax.Array) -> jax.Array:
    """Forward and backward random-walk supports, stacked on a new axis -3: ``[..., 2, N, N]``."""
    return jnp.stack([random_walk(adj), random_walk(jnp.swapaxes(adj, -1, -2))], axis=-3)


def adaptive_adjacency(e1: jax.Array, e2: jax.Array) -> jax.Array:
    """Graph WaveNet's self-adaptive adjacency ``softmax(ReLU(E1 E2^T))`` (row softmax); ``e*: [..., N,
    d]``."""
    return jax.nn.softmax(jax.nn.relu(e1 @ jnp.swapaxes(e2, -1, -2)), axis=-1)


def _check(x: jax.Array, supports: jax.Array) -> None:
    if x.ndim != 3:
        raise ValueError(f"x must be [B, N, F], got shape {x.shape}")
    if supports.ndim not in (3, 4) or supports.shape[-1] != x.shape[1] or supports.shape[-2] != x.shape[1]:
        raise ValueError(
            f"supports must be [S, N, N] or [B, S, N, N] with N={x.shape[1]}, got {supports.shape}"
        )
    if supports.ndim == 4 and supports.shape[0] != x.shape[0]:
        raise ValueError(f"per-sample supports {supports.shape} do not match batch {x.shape[0]}")


def diffusion_terms(x: jax.Array, supports: jax.Array, max_step: int) -> list[jax.Array]:
    """``[X, P_1 X, ..., P_1^K X, P_2 X, ..., P_S^K X]``, each ``[B, N, F]`` (support-major, then k).

    Args:
      x: ``[B, N, F]`` node features.
      supports: ``[S, N, N]`` (shared by the batch) or ``[B, S, N, N]`` (one stack per sample).
      max_step: diffusion steps K >= 0.

    Precision: the products take their inputs in the supports' dtype and accumulate in float32. Float32
    supports (the default everywhere in training) give plain float32 products; bfloat16 supports, cast once by
    the caller, make every product a bfloat16 x bfloat16 -> float32 one (the features are rounded to bfloat16
    before each product; the terms returned are float32 except ``X`` itself).
    """
    _check(x, supports)
    if max_step < 0:
        raise ValueError(f"max_step must be >= 0, got {max_step}")
    ns, (b, n, f) = supports.shape[-3], x.shape
    if ns == 0 or max_step == 0:
        return [x]

    def product(spec: str, a: jax.Array, v: jax.Array) -> jax.Array:
        return jnp.einsum(spec, a, v.astype(a.dtype), preferred_element_type=jnp.float32)

    # first step for all supports in one product ([S*N, N] or [B, S*N, N]), then per support
    if supports.ndim == 3:
        xk = product("kn,bnf->bkf", supports.reshape(ns * n, n), x).reshape(b, ns, n, f)
        spec = "snm,bsmf->bsnf"
    else:
        xk = product("bkn,bnf->bkf", supports.reshape(b, ns * n, n), x).reshape(b, ns, n, f)
        spec = "bsnm,bsmf->bsnf"
    powers = [xk]
    for _ in range(max_step - 1):
        xk = product(spec, supports, xk)
        powers.append(xk)
    return [x] + [powers[k][:, s] for s in range(ns) for k in range(max_step)]


def diffusion_features(x: jax.Array, supports: jax.Array, max_step: int) -> jax.Array:
    """:func:`diffusion_terms` concatenated on the feature axis: ``[B, N, F * (1 + S * K)]``."""
    return jnp.concatenate(diffusion_terms(x, supports, max_step), axis=-1)


def num_diffusion_terms(num_supports: int, max_step: int) -> int:
    """How many copies of the input features :func:`diffusion_features` concatenates."""
    return 1 + num_supports * max_step


# ------------------------------------------------------------------------------------------- graphs from data


def correlation_distance(series: np.ndarray) -> np.ndarray:
    """``sqrt(2 (1 - rho))`` between the columns of ``series`` ``[T, N]`` (a constant column: sqrt(2) to
    all)."""
    x = np.asarray(series, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 2:
        raise ValueError(f"series must be [T >= 2, N], got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("series has NaN/inf: fill or drop gaps before building a correlation graph")
    xc = x - x.mean(0)
    sd = np.sqrt((xc**2).sum(0))
    ok = sd > 0
    z = np.where(ok, xc / np.where(ok, sd, 1.0), 0.0)
    rho = np.clip(z.T @ z, -1.0, 1.0)
    rho[~ok, :] = 0.0
    rho[:, ~ok] = 0.0
    np.fill_diagonal(rho, 1.0)
    return np.sqrt(np.maximum(2.0 * (1.0 - rho), 0.0))


def gaussian_kernel_adjacency(
    dist: np.ndarray, threshold: float = 0.1, sigma: float | None = None
) -> np.ndarray:
    """DCRNN's thresholded Gaussian kernel ``exp(-d^2 / sigma^2)`` with entries below ``threshold`` zeroed.

    ``sigma`` defaults to the standard deviation of the off-diagonal distances (as DCRNN's gen_adj_mx does
    with all finite distances). The diagonal is kept (weight 1), as in DCRNN.
    """
    d = np.asarray(dist, dtype=np.float64)
    if d.ndim != 2 or d.shape[0] != d.shape[1]:
        raise ValueError(f"dist must be a square matrix, got shape {d.shape}")
    if sigma is None:
        off = d[~np.eye(d.shape[0], dtype=bool)]
        sigma = float(off.std()) if off.size else 1.0
    sigma = sigma if sigma > 0 else 1.0
    adj = np.exp(-((d / sigma) ** 2))
    adj[adj < threshold] = 0.0
    return adj.astype(np.float32)


def correlation_adjacency(
    series: np.ndarray, threshold: float = 0.1, sigma: float | None = None
) -> np.ndarray:
    """Static graph of a set of series: Gaussian kernel of their correlation distance (DCRNN-style)."""
    return gaussian_kernel_adjacency(correlation_distance(series), threshold, sigma)
