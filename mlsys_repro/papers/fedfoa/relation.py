"""Cross-feature relation matrices: FedFoA's knowledge medium (reconstruction; choices labelled in README.md).

A client turns projector outputs ``Z [n, d]`` into the feature-correlation matrix ``R = Zs^T Zs / n`` (``Zs``:
columns standardised), factorises it with a principal-factor model ``R ~ L L^T + Psi`` (``L = V_r sqrt(Lambda_r)``
from the top-``r`` eigenpairs, ``Psi`` the diagonal that restores the unit diagonal of a correlation matrix) and
uploads only ``L``: ``d * r`` floats, independent of the encoder's size. The server rebuilds every client's
``R``, averages them weighted by the clients' example counts, re-factorises and broadcasts ``L_g``. During local
training a client adds ``lambda * ||R(batch) - R_g||_F^2 / d^2`` to its SSL loss (align feature mappings) and,
optionally, scales its step by its agreement with ``R_g`` (calibrate local updates).

Bad input is detected here: factors whose feature dimension differs across clients raise
:class:`RelationShapeError`; non-finite or constant (collapsed) representations make :func:`relation_matrix`
report ``ok = False`` so that the server leaves that client out instead of spreading NaNs.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

STD_EPS = 1e-4  # a feature whose batch std is below this is treated as collapsed


class RelationShapeError(ValueError):
    """Clients' relation factors (or projector dimensions) cannot be aggregated together."""


def standardise(z: jax.Array, eps: float = 1e-8) -> tuple[jax.Array, jax.Array]:
    """Columns of ``z [n, d]`` to zero mean and unit variance; returns ``(z_std, std)``."""
    mu = z.mean(axis=0)
    std = jnp.sqrt(((z - mu) ** 2).mean(axis=0) + eps)
    return (z - mu) / std, std


def relation_matrix(z: jax.Array) -> tuple[jax.Array, jax.Array]:
    """``(R [d, d], ok)``: the feature-correlation matrix of ``z [n, d]`` and whether ``z`` is usable.

    ``ok`` is False when ``z`` has a non-finite entry or a (near-)constant column, i.e. the representation has
    collapsed; ``R`` is then replaced by the identity so that downstream arithmetic stays finite.
    """
    zs, std = standardise(z)
    r = zs.T @ zs / z.shape[0]
    ok = jnp.all(jnp.isfinite(z)) & jnp.all(std > STD_EPS) & jnp.all(jnp.isfinite(r))
    return jnp.where(ok, r, jnp.eye(z.shape[1], dtype=z.dtype)), ok


def factorise(r: jax.Array, rank: int) -> jax.Array:
    """Loadings ``L [d, rank]`` of the top-``rank`` eigenpairs of the symmetric matrix ``r``: ``L = V sqrt(Lambda)``.

    Negative eigenvalues (possible after averaging or rounding) are clipped at zero. Columns are ordered by
    decreasing eigenvalue and each has its largest-magnitude entry positive, so the factor is unique up to ties.
    """
    d = r.shape[0]
    if not 1 <= rank <= d:
        raise ValueError(f"rank must be in [1, {d}], got {rank}")
    w, v = jnp.linalg.eigh(0.5 * (r + r.T))
    w, v = w[::-1][:rank], v[:, ::-1][:, :rank]
    sign = jnp.sign(v[jnp.argmax(jnp.abs(v), axis=0), jnp.arange(rank)])
    return v * sign * jnp.sqrt(jnp.clip(w, 0.0, None))


def reconstruct(loadings: jax.Array) -> jax.Array:
    """``L L^T + Psi`` with ``Psi = diag(max(0, 1 - rowsum(L^2)))``: a correlation-like matrix (unit diagonal)."""
    low = loadings @ loadings.T
    psi = jnp.clip(1.0 - jnp.diag(low), 0.0, None)
    return low + jnp.diag(psi)


def aggregate(loadings: jax.Array, weights: jax.Array, ok: jax.Array, rank: int) -> tuple[jax.Array, jax.Array]:
    """Server step: ``(L_g [d, rank], any_ok)`` from client factors ``[k, d, r]``, weights ``[k]`` and flags ``[k]``.

    Clients flagged not ok (collapsed) get weight 0; if none is ok, ``any_ok`` is False and ``L_g`` is the
    factor of the identity (callers keep their previous global matrix).
    """
    w = jnp.where(ok, weights.astype(jnp.float32), 0.0)
    total = w.sum()
    any_ok = total > 0
    # where, not a zero weight: a collapsed client's factor may be NaN and 0 * NaN is NaN
    rs = jnp.where(ok[:, None, None], jax.vmap(reconstruct)(loadings), 0.0)
    d = loadings.shape[1]
    r_g = jnp.where(any_ok, jnp.tensordot(w / jnp.where(any_ok, total, 1.0), rs, axes=1), jnp.eye(d))
    return factorise(r_g, rank), any_ok


def alignment_loss(z: jax.Array, r_target: jax.Array) -> jax.Array:
    """``||R(z) - R_target||_F^2 / d^2`` with ``R(z)`` the (differentiable) correlation matrix of the batch ``z``."""
    zs, _ = standardise(z)
    d = z.shape[1]
    r = zs.T @ zs / z.shape[0]
    return jnp.sum((r - r_target) ** 2) / d**2


def agreement(r_local: jax.Array, r_global: jax.Array) -> jax.Array:
    """``1 - ||R_l - R_g||^2 / (||R_l||^2 + ||R_g||^2)`` in [0, 1]: 1 when equal, 0.5 for orthogonal matrices."""
    num = jnp.sum((r_local - r_global) ** 2)
    den = jnp.sum(r_local**2) + jnp.sum(r_global**2)
    return jnp.clip(1.0 - num / jnp.maximum(den, 1e-12), 0.0, 1.0)


def check_dims(dims: Sequence[int], names: Sequence[str] | None = None) -> int:
    """The common projector dimension ``d`` of all clients; raises RelationShapeError if they differ."""
    dims = [int(x) for x in dims]
    if not dims:
        raise RelationShapeError("no clients")
    if len(set(dims)) > 1:
        names = list(names) if names is not None else [f"client {i}" for i in range(len(dims))]
        detail = ", ".join(f"{n}: d={x}" for n, x in zip(names, dims, strict=True))
        raise RelationShapeError(
            f"relation matrices need one projector output dimension for all clients, got {detail}")
    return dims[0]


def check_factors(factors: Sequence[jax.Array], rank: int) -> int:
    """Validate uploaded factors (each ``[d, rank]``, same ``d``) before aggregation; returns ``d``."""
    shapes = [tuple(f.shape) for f in factors]
    bad = [i for i, s in enumerate(shapes) if len(s) != 2 or s[1] != rank]
    if bad:
        raise RelationShapeError(f"client {bad[0]} uploaded a factor of shape {shapes[bad[0]]}, expected (d, {rank})")
    return check_dims([s[0] for s in shapes])


def factor_bytes(d: int, rank: int, itemsize: int = 4) -> int:
    """Bytes of one uploaded (or broadcast) factor ``L [d, rank]``: independent of the encoder."""
    return d * rank * itemsize
