"""The 8-bit gradient sketch: per-piece min/max uniform quantisation to uint8 codes.

For each piece (see :mod:`mlsys_repro.common.quant.pieces`) with valid elements ``x``:

    lo = min(x), hi = max(x), scale = (hi - lo) / 255
    code = round((x - lo) / scale)            deterministic rounding (nearest), or
    code = floor((x - lo) / scale + u)        stochastic rounding, u ~ U[0, 1) per element
    x_hat = lo + code * scale                 (code clipped to [0, 255]; scale = 0 gives x_hat = lo exactly)

Error bounds (what the tests check, element by element):

* deterministic: ``|x - x_hat| <= scale / 2`` in exact arithmetic; in float32 we allow a slack of
  ``4 * eps32 * max(|lo|, |hi|)`` for the rounding of the subtraction, division and multiply-add, plus the
  smallest normal float32 because XLA on CPU flushes subnormal numbers to zero (:func:`error_bound`).
* stochastic: ``|x - x_hat| <= scale`` (+ the same slack), and ``E[x_hat] = x`` (unbiased).

This is the min-offset form of the authors' affine uint8 quantiser (kimihe/Canary ``8bit_quantization``:
``scale = (max - min) / 255``, integer zero point); storing ``lo`` as a float instead of a truncated integer zero
point keeps the whole range representable, so the bound above holds for every element.

Wire layout of one piece (little-endian), :data:`PIECE_META_BYTES` + ``len`` bytes:

    offset 0: float32 lo      offset 4: float32 scale      offset 8: uint8 code[len]

:func:`to_bytes` / :func:`from_bytes` write and read exactly this; :func:`wire_bytes` counts it.

Non-finite input (NaN or +-Inf) is never silently encoded: the jitted kernel marks such a piece by setting its
``lo`` and ``scale`` to NaN (so anything decoded from it is NaN, not a plausible number), and the host-side
:func:`check_finite` / :func:`quantize_checked` raise :class:`NonFiniteGradientError` naming the pieces.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.common.quant.pieces import check_piece_size, from_pieces, num_pieces, piece_lengths, to_pieces

LEVELS = 255
PIECE_META_BYTES = 8  # float32 lo + float32 scale
_EPS32 = float(np.finfo(np.float32).eps)
_TINY32 = float(np.finfo(np.float32).tiny)  # XLA on CPU flushes subnormals to zero
_SLACK_ULPS = 4.0


class NonFiniteGradientError(ValueError):
    """A tensor handed to the sketch holds NaN or Inf; ``pieces`` are the offending piece indices."""

    def __init__(self, pieces: np.ndarray, where: str = ""):
        self.pieces = np.asarray(pieces)
        shown = ", ".join(map(str, self.pieces[:10].tolist())) + (" ..." if self.pieces.size > 10 else "")
        super().__init__(f"{where + ': ' if where else ''}non-finite gradient values (NaN/Inf) in "
                         f"{self.pieces.size} piece(s): {shown}; refusing to encode them")


class Sketch(NamedTuple):
    """Per-piece codes and metadata; ``codes`` is padded to ``[P, piece_size]`` (padding codes are 0)."""

    codes: jax.Array  # uint8 [P, L]
    lo: jax.Array  # float32 [P]
    scale: jax.Array  # float32 [P]


def _piece_stats(xp: jax.Array, valid: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    lo = jnp.min(jnp.where(valid, xp, jnp.inf), axis=-1)
    hi = jnp.max(jnp.where(valid, xp, -jnp.inf), axis=-1)
    finite = jnp.all(jnp.where(valid, jnp.isfinite(xp), True), axis=-1)
    return lo, hi, finite


def _cut(x: jax.Array, piece_size: int) -> tuple[jax.Array, jax.Array | None]:
    xp, valid = to_pieces(x, piece_size, pad="edge")
    return xp, (None if x.shape[0] % piece_size == 0 else valid)


def _encode(xp: jax.Array, valid: jax.Array | None, key: jax.Array | None) -> Sketch:
    """Sketch of ``[P, L]`` rows cut with ``to_pieces(..., pad="edge")`` (padding repeats a valid value, so the
    row min/max need no mask); ``valid`` (``None``: nothing padded) zeroes the padding codes.

    Unmasked min/max reductions are what keep this near memory speed on CPU; a piece holding NaN or Inf is
    recognised by a non-finite min or max (XLA's min/max propagate NaN).
    """
    xp = xp.astype(jnp.float32)
    lo, hi = jnp.min(xp, axis=-1), jnp.max(xp, axis=-1)
    finite = jnp.isfinite(lo) & jnp.isfinite(hi)
    scale = (hi - lo) / LEVELS
    ok = finite & (scale > 0)
    t = (xp - jnp.where(finite, lo, 0.0)[..., None]) / jnp.where(ok, scale, 1.0)[..., None]
    if key is None:
        q = jnp.round(t)
    else:
        q = jnp.floor(t + jax.random.uniform(key, t.shape, dtype=jnp.float32))
    q = jnp.where(ok[..., None], jnp.clip(q, 0, LEVELS), 0)
    if valid is not None:
        q = jnp.where(valid, q, 0)
    nan = jnp.float32(jnp.nan)
    return Sketch(q.astype(jnp.uint8), jnp.where(finite, lo, nan), jnp.where(finite, scale, nan))


@functools.partial(jax.jit, static_argnames=("piece_size",))
def quantize(x: jax.Array, piece_size: int, key: jax.Array | None = None) -> Sketch:
    """Sketch of a flat float tensor; deterministic rounding, or stochastic when a PRNG ``key`` is given."""
    return _encode(*_cut(x, piece_size), key)


def _decode(sk: Sketch) -> jax.Array:
    return sk.lo[..., None] + sk.codes.astype(jnp.float32) * sk.scale[..., None]


@functools.partial(jax.jit, static_argnames=("n",))
def dequantize(sk: Sketch, n: int) -> jax.Array:
    """The float32 tensor of length ``n`` a sketch decodes to."""
    return from_pieces(_decode(sk), n)


@functools.partial(jax.jit, static_argnames=("piece_size",))
def roundtrip(x: jax.Array, piece_size: int, key: jax.Array | None = None) -> jax.Array:
    """``dequantize(quantize(x))`` in one kernel (what a receiver sees of ``x``)."""
    return from_pieces(_decode(_encode(*_cut(x, piece_size), key)), x.shape[0])


@jax.jit
def roundtrip_pieces(xp: jax.Array, valid: jax.Array | None = None, key: jax.Array | None = None) -> jax.Array:
    """Round trip of an already-cut ``[..., P, L]`` array, one sketch per row; ``valid`` (broadcastable, e.g.
    ``[P, L]``) keeps padding out of the piece statistics; padding slots of the output are meaningless."""
    if valid is None:
        valid = jnp.ones(xp.shape[-1:], dtype=bool)
    xp = xp.astype(jnp.float32)
    lo, hi, _ = _piece_stats(xp, valid)
    scale = (hi - lo) / LEVELS
    safe = jnp.where(scale > 0, scale, 1.0)
    t = (xp - lo[..., None]) / safe[..., None]
    if key is None:
        q = jnp.round(t)
    else:
        q = jnp.floor(t + jax.random.uniform(key, t.shape, dtype=jnp.float32))
    q = jnp.clip(q, 0, LEVELS)  # float codes: the same values as _encode's uint8, without the casts
    out = lo[..., None] + q * scale[..., None]
    finite = jnp.isfinite(lo) & jnp.isfinite(hi)
    return jnp.where(finite[..., None], out, jnp.nan)


@functools.partial(jax.jit, static_argnames=("n", "stochastic"))
def error_bound(sk: Sketch, n: int, stochastic: bool = False) -> jax.Array:
    """Per-element bound on ``|x - x_hat|`` (length ``n``): scale/2 (scale if stochastic) + float32 slack."""
    hi = sk.lo + LEVELS * sk.scale
    slack = _SLACK_ULPS * _EPS32 * jnp.maximum(jnp.abs(sk.lo), jnp.abs(hi)) + _TINY32
    per_piece = (sk.scale if stochastic else sk.scale / 2) + slack
    return from_pieces(jnp.broadcast_to(per_piece[:, None], sk.codes.shape), n)


@functools.partial(jax.jit, static_argnames=("piece_size",))
def ef_quantize(x: jax.Array, residual: jax.Array, piece_size: int,
                key: jax.Array | None = None) -> tuple[Sketch, jax.Array]:
    """Error feedback: sketch ``x + residual`` and return the new residual ``(x + residual) - x_hat``."""
    corrected = x + residual
    sk = quantize(corrected, piece_size, key)
    return sk, corrected - dequantize(sk, x.shape[0])


def finite_pieces(x: jax.Array | np.ndarray, piece_size: int) -> np.ndarray:
    """Host-side bool ``[P]``: True where every element of the piece is finite."""
    a = np.asarray(x).reshape(-1)
    p = num_pieces(a.size, piece_size)
    padded = np.zeros(p * piece_size, dtype=a.dtype if a.dtype.kind == "f" else np.float32)
    padded[: a.size] = a
    return np.isfinite(padded.reshape(p, piece_size)).all(axis=1)


def check_finite(x: jax.Array | np.ndarray, piece_size: int, where: str = "") -> None:
    """Raise :class:`NonFiniteGradientError` if any piece of ``x`` holds NaN or Inf."""
    ok = finite_pieces(x, piece_size)
    if not ok.all():
        raise NonFiniteGradientError(np.flatnonzero(~ok), where)


def quantize_checked(x: jax.Array, piece_size: int, key: jax.Array | None = None, where: str = "") -> Sketch:
    """:func:`quantize` after :func:`check_finite` (the host-facing entry point)."""
    check_finite(x, piece_size, where)
    return quantize(jnp.asarray(x, jnp.float32).reshape(-1), piece_size, key)


def wire_bytes(n: int, piece_size: int) -> int:
    """Bytes of a sketched tensor of ``n`` elements: 1 per element + :data:`PIECE_META_BYTES` per piece."""
    return int(n) + PIECE_META_BYTES * num_pieces(n, piece_size)


def to_bytes(sk: Sketch, n: int) -> bytes:
    """Serialise to the documented wire layout (pieces back to back)."""
    codes = np.asarray(sk.codes)
    lo = np.asarray(sk.lo, dtype="<f4")
    scale = np.asarray(sk.scale, dtype="<f4")
    lens = piece_lengths(n, codes.shape[1]) if codes.size else np.zeros(0, np.int64)
    out = bytearray()
    for i, ln in enumerate(lens):
        out += lo[i].tobytes() + scale[i].tobytes() + codes[i, :ln].astype(np.uint8).tobytes()
    return bytes(out)


def from_bytes(buf: bytes, n: int, piece_size: int) -> Sketch:
    """Parse :func:`to_bytes` output back into a (padded) :class:`Sketch`; checks the length exactly."""
    piece_size = check_piece_size(piece_size)
    if len(buf) != wire_bytes(n, piece_size):
        raise ValueError(f"sketch of {n} elements in pieces of {piece_size} needs {wire_bytes(n, piece_size)} "
                         f"bytes, got {len(buf)}")
    lens = piece_lengths(n, piece_size)
    codes = np.zeros((lens.size, piece_size), np.uint8)
    lo = np.zeros(lens.size, np.float32)
    scale = np.zeros(lens.size, np.float32)
    off = 0
    for i, ln in enumerate(lens):
        lo[i], scale[i] = np.frombuffer(buf, "<f4", 2, off)
        codes[i, :ln] = np.frombuffer(buf, np.uint8, ln, off + PIECE_META_BYTES)
        off += PIECE_META_BYTES + int(ln)
    return Sketch(jnp.asarray(codes), jnp.asarray(lo), jnp.asarray(scale))


__all__ = [
    "LEVELS", "PIECE_META_BYTES", "NonFiniteGradientError", "Sketch", "check_finite", "dequantize", "ef_quantize",
    "error_bound", "finite_pieces", "from_bytes", "quantize", "quantize_checked", "roundtrip", "roundtrip_pieces",
    "to_bytes", "wire_bytes",
]
