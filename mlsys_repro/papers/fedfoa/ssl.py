"""BYOL and SimSiam objectives on two augmented views (pure functions of parameter dicts).

BYOL (Grill et al., 2020): online encoder+projector+predictor ``q(g(f(v)))`` regresses the target network's
projection ``g'(f'(v'))`` of the other view, normalised MSE ``2 - 2 cos``, symmetrised; the target is an EMA of
the online encoder+projector (:func:`ema_update`). SimSiam (Chen and He, 2021): ``-cos(q(z1), sg(z2)) / 2`` and
the symmetric term, with no target network. :func:`siamese_loss` computes either from a traced flag. All return
the online projections ``(z1, z2)`` as auxiliary output (FedFoA's relation matrices are computed on them).

The two views go through the network as one ``vmap`` over a leading view axis, so batch-norm statistics are per
view (as in the reference implementations) while the matmuls are batched.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mlsys_repro.papers.fedfoa.models import Net, Params

BACKBONES = ("byol", "simsiam")


def normalize(x: jax.Array, eps: float = 1e-8) -> jax.Array:
    return x / jnp.sqrt(jnp.sum(x * x, axis=-1, keepdims=True) + eps)


def cosine(a: jax.Array, b: jax.Array) -> jax.Array:
    """Row-wise cosine similarity ``[B]``."""
    return jnp.sum(normalize(a) * normalize(b), axis=-1)


def _embed_views(net: Net, params: Params, views: jax.Array) -> jax.Array:
    return jax.vmap(net.embed, in_axes=(None, 0))(params, views)


def byol_loss(net: Net, params: Params, target: Params, v1: jax.Array, v2: jax.Array
              ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    views = jnp.stack([v1, v2])
    z = _embed_views(net, params, views)  # [2, B, d]
    p = jax.vmap(net.predict, in_axes=(None, 0))(params, z)
    t = jax.lax.stop_gradient(_embed_views(net, target, views))
    loss = jnp.mean(2 - 2 * cosine(p[0], t[1])) + jnp.mean(2 - 2 * cosine(p[1], t[0]))
    return loss, (z[0], z[1])


def simsiam_loss(net: Net, params: Params, v1: jax.Array, v2: jax.Array
                 ) -> tuple[jax.Array, tuple[jax.Array, jax.Array]]:
    z = _embed_views(net, params, jnp.stack([v1, v2]))
    p = jax.vmap(net.predict, in_axes=(None, 0))(params, z)
    zs = jax.lax.stop_gradient(z)
    loss = -0.5 * jnp.mean(cosine(p[0], zs[1])) - 0.5 * jnp.mean(cosine(p[1], zs[0]))
    return loss, (z[0], z[1])


def ssl_loss(backbone: str, net: Net, params: Params, target: Params, v1: jax.Array, v2: jax.Array):
    """Dispatch on ``backbone``; ``target`` is ignored by SimSiam."""
    if backbone == "byol":
        return byol_loss(net, params, target, v1, v2)
    if backbone == "simsiam":
        return simsiam_loss(net, params, v1, v2)
    raise ValueError(f"unknown SSL backbone {backbone!r}; known: {BACKBONES}")


def siamese_loss(net: Net, params: Params, target: Params, v1: jax.Array, v2: jax.Array, simsiam: jax.Array):
    """BYOL or SimSiam chosen by a traced flag, in one program (so both backbones share a compiled executable).

    SimSiam's loss is exactly ``(L_BYOL - 4) / 4`` with the target projections replaced by the stop-gradient
    online projections, so the flag only swaps the target branch (a ``lax.cond``: no wasted target forward)
    and rescales. Same values and gradients as :func:`byol_loss` / :func:`simsiam_loss` (tested).
    """
    views = jnp.stack([v1, v2])
    z = _embed_views(net, params, views)
    p = jax.vmap(net.predict, in_axes=(None, 0))(params, z)
    t = jax.lax.cond(simsiam, lambda: z, lambda: _embed_views(net, target, views))
    t = jax.lax.stop_gradient(t)
    byol = jnp.mean(2 - 2 * cosine(p[0], t[1])) + jnp.mean(2 - 2 * cosine(p[1], t[0]))
    return jnp.where(simsiam, 0.25 * (byol - 4.0), byol), (z[0], z[1])


def ema_update(target: Params, online: Params, tau: float) -> Params:
    """BYOL target step ``xi <- tau xi + (1 - tau) theta`` for encoder and projector (predictor left as is)."""
    out = dict(target)
    for part in ("encoder", "projector"):
        out[part] = jax.tree.map(lambda t, o: tau * t + (1 - tau) * o, target[part], online[part])
    return out
