"""BYOL / SimSiam objectives: the one-program form equals the reference forms (values and gradients)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.papers.fedfoa.models import NetSpec, make_net
from mlsys_repro.papers.fedfoa.ssl import byol_loss, cosine, ema_update, siamese_loss, simsiam_loss

NET = make_net(NetSpec("cnn_s", 3, 16, hidden=32))
P = NET.init(jax.random.key(0))
T = NET.init(jax.random.key(1))
V1 = jax.random.normal(jax.random.key(2), (8, 8, 8, 3))
V2 = jax.random.normal(jax.random.key(3), (8, 8, 8, 3))


def _close(a, b):
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_allclose(x, y, rtol=2e-4, atol=1e-6)


def test_siamese_loss_equals_byol_and_simsiam():
    for flag, ref in ((False, lambda p: byol_loss(NET, p, T, V1, V2)),
                      (True, lambda p: simsiam_loss(NET, p, V1, V2))):
        f = jax.jit(lambda p, flag=flag: siamese_loss(NET, p, T, V1, V2, jnp.bool_(flag))[0])
        r = jax.jit(lambda p, ref=ref: ref(p)[0])
        np.testing.assert_allclose(f(P), r(P), rtol=1e-4)  # float32 sums in another order
        _close(jax.jit(jax.grad(f))(P), jax.jit(jax.grad(r))(P))


def test_loss_ranges():
    b = float(byol_loss(NET, P, T, V1, V2)[0])
    s = float(simsiam_loss(NET, P, V1, V2)[0])
    assert 0.0 <= b <= 8.0 and -1.0 <= s <= 1.0
    assert float(cosine(V1.reshape(8, -1), V1.reshape(8, -1)).min()) > 0.9999


def test_target_gradient_is_stopped():
    g = jax.grad(lambda t: byol_loss(NET, P, t, V1, V2)[0])(T)
    assert all(float(jnp.abs(x).max()) == 0.0 for x in jax.tree.leaves(g))


def test_ema_update():
    _close(ema_update(T, P, 0.0)["encoder"], P["encoder"])
    _close(ema_update(T, P, 1.0)["projector"], T["projector"])
    _close(ema_update(T, P, 0.5)["predictor"], T["predictor"])  # the predictor is not part of the target
