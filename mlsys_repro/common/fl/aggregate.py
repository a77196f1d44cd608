"""Server-side parameter aggregation shared by federated methods (pure jnp; stacked ``[k, ...]`` pytrees).

Logit/label aggregation rules are method-specific and live with their papers; only the parameter-sharing
reference (FedAvg, McMahan et al., 2017) is here.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def fedavg(stacked, weights: jax.Array | None = None):
    """Weighted mean over the leading (client) axis: ``sum_k w_k theta_k / sum_k w_k``.

    ``weights`` are typically the clients' example counts (FedAvg's ``n_k / n``); ``None`` is the plain mean.
    """
    k = jax.tree.leaves(stacked)[0].shape[0]
    w = jnp.ones((k,), jnp.float32) if weights is None else jnp.asarray(weights, jnp.float32)
    if w.shape != (k,):
        raise ValueError(f"weights shape {w.shape} does not match {k} clients")
    w = w / w.sum()
    return jax.tree.map(lambda a: jnp.tensordot(w, a.astype(jnp.float32), axes=1).astype(a.dtype), stacked)
