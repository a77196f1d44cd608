"""Device arrays of one prepared series and the jit-able gather of a batch of windows from them.

``build_arrays`` turns a :class:`~mlsys_repro.papers.evogwp.data.Series` into fixed-shape arrays:

* ``x [T, N]`` standardised, gap-filled values (model inputs and teacher-forcing targets);
* ``y [T, N]`` raw targets (0 at gaps), ``obs [T, N]`` 1 where observed, ``nz [T, N]`` 1 where observed and
  non-zero (the masked training loss);
* ``tod [T]`` time-of-day phase ``((t + phase0) mod period) / period``;
* optional graph inputs: ``static_adj [N, N]``; ``sdist [G, N, K]`` (standardised shapelet distances of the
  grid segments) and ``adj [G, N, N]`` (evolution adjacency of the transition ``g-1 -> g``).

``gather(arrays, origins, P, Q, context)`` slices the windows of a batch of origins (first target steps) with
``lax.dynamic_slice`` under ``vmap``, so sampling batches happens inside the jitted training loop. The EvoGWP
context of origin ``t`` is the ``C`` grid segments that end at or before ``t``: ``g = t // L - C .. t // L -
1``.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.papers.evogwp.data import Scaler, Series


@dataclass(frozen=True)
class Context:
    """EvoGWP's history: ``segments`` grid segments of ``seg_len`` steps before each origin."""

    seg_len: int
    segments: int

    def min_origin(self) -> int:
        """Earliest origin with a full context (segment 0 has no predecessor transition)."""
        return (self.segments + 1) * self.seg_len


def build_arrays(series: Series, scaler: Scaler, pad: int = 0, **extra: np.ndarray) -> dict[str, np.ndarray]:
    """Arrays for ``series`` (see the module docstring); ``pad`` zero rows are appended so windows may reach
    past the end (forecasting the unknown future); ``extra`` arrays (graph inputs) are passed through."""
    t, n = series.raw.shape
    obs = series.observed
    y = np.where(obs, series.raw, 0.0).astype(np.float32)
    out = {
        "x": scaler.transform(series.filled).astype(np.float32),
        "y": y,
        "obs": obs.astype(np.float32),
        "nz": (obs & (y != 0)).astype(np.float32),
    }
    if pad:
        out = {k: np.concatenate([v, np.zeros((pad, n), np.float32)]) for k, v in out.items()}
    out["tod"] = (((np.arange(t + pad) + series.phase0) % series.period) / series.period).astype(np.float32)
    out["mean"] = np.asarray(scaler.mean, np.float32)
    out["std"] = np.asarray(scaler.std, np.float32)
    for k, v in extra.items():
        if v is not None:
            out[k] = np.asarray(v, np.float32)
    return out


def gather(
    arrays: dict, origins: jax.Array, input_len: int, horizon: int, context: Context | None = None
) -> dict:
    """Batch of windows for ``origins [B]`` (int32 first-target steps); traceable under jit."""
    n = arrays["x"].shape[1]

    def one(t):
        xs = jax.lax.dynamic_slice(arrays["x"], (t - input_len, 0), (input_len, n))
        b = {
            "x": xs,
            "y_std": jax.lax.dynamic_slice(arrays["x"], (t, 0), (horizon, n)),
            "y": jax.lax.dynamic_slice(arrays["y"], (t, 0), (horizon, n)),
            "obs": jax.lax.dynamic_slice(arrays["obs"], (t, 0), (horizon, n)),
            "nz": jax.lax.dynamic_slice(arrays["nz"], (t, 0), (horizon, n)),
            "tod_in": jax.lax.dynamic_slice(arrays["tod"], (t - input_len,), (input_len,)),
            "tod_out": jax.lax.dynamic_slice(arrays["tod"], (t,), (horizon,)),
        }
        if context is not None:
            g0 = t // context.seg_len - context.segments
            k = arrays["sdist"].shape[2]
            b["ctx_sdist"] = jax.lax.dynamic_slice(arrays["sdist"], (g0, 0, 0), (context.segments, n, k))
            b["ctx_adj"] = jax.lax.dynamic_slice(arrays["adj"], (g0, 0, 0), (context.segments, n, n))
        return b

    batch = jax.vmap(one)(jnp.asarray(origins, jnp.int32))
    if "static_adj" in arrays:
        batch["static_adj"] = arrays["static_adj"]
    return batch
