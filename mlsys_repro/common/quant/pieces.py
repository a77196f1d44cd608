"""Cutting a flat tensor into fixed-size pieces (buckets) for per-piece compression.

A tensor of ``n`` elements cut with ``piece_size = L`` has ``P = ceil(n / L)`` pieces; the last one holds
``n - (P - 1) * L`` elements when ``L`` does not divide ``n``. Kernels work on the padded ``[P, L]`` array and a
``valid`` mask, so shapes stay static under ``jit``; padding never enters a piece's statistics or its bytes.
A zero-length tensor has zero pieces; a piece size below 1 is an error.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np


def check_piece_size(piece_size: int) -> int:
    if isinstance(piece_size, bool) or int(piece_size) != piece_size or piece_size < 1:
        raise ValueError(f"piece_size must be an integer >= 1 (zero-length pieces are not allowed), got "
                         f"{piece_size!r}")
    return int(piece_size)


def num_pieces(n: int, piece_size: int) -> int:
    """Number of pieces of a tensor with ``n`` elements."""
    piece_size = check_piece_size(piece_size)
    if n < 0:
        raise ValueError(f"tensor length must be >= 0, got {n}")
    return -(-int(n) // piece_size)


def piece_lengths(n: int, piece_size: int) -> np.ndarray:
    """Valid elements in each piece: ``piece_size`` except possibly the last (int64 ``[P]``)."""
    p = num_pieces(n, piece_size)
    out = np.full(p, piece_size, dtype=np.int64)
    if p:
        out[-1] = n - (p - 1) * piece_size
    return out


def to_pieces(x: jnp.ndarray, piece_size: int, pad: str = "zero") -> tuple[jnp.ndarray, jnp.ndarray]:
    """``(padded [P, L], valid bool [P, L])`` of a 1-D array; the padding (masked out by ``valid``) is 0, or with
    ``pad="edge"`` the last element repeated (so unmasked per-row min/max are those of the valid elements)."""
    if pad not in ("zero", "edge"):
        raise ValueError(f"pad must be 'zero' or 'edge', got {pad!r}")
    if x.ndim != 1:
        raise ValueError(f"expected a flat (1-D) tensor, got shape {x.shape}; flatten it first")
    n = x.shape[0]
    p = num_pieces(n, piece_size)
    extra = p * piece_size - n
    xp = jnp.pad(x, (0, extra), mode="edge" if pad == "edge" and extra else "constant").reshape(p, piece_size)
    valid = (jnp.arange(p * piece_size) < n).reshape(p, piece_size)
    return xp, valid


def from_pieces(xp: jnp.ndarray, n: int) -> jnp.ndarray:
    """Inverse of :func:`to_pieces`: the first ``n`` elements of the flattened ``[P, L]`` array."""
    return xp.reshape(-1)[:n]


__all__ = ["check_piece_size", "from_pieces", "num_pieces", "piece_lengths", "to_pieces"]
