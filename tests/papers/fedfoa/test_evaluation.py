"""Linear probe and fine-tuning on synthetic features/images with known answers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.papers.fedfoa.evaluation import features, fine_tune, linear_probe
from mlsys_repro.papers.fedfoa.models import NetSpec, make_net


def _blobs(n, d=8, c=4, sep=4.0, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(c, d)) * sep
    y = rng.integers(0, c, n)
    return jnp.asarray(centres[y] + rng.normal(size=(n, d)), jnp.float32), jnp.asarray(y, jnp.int32)


def test_probe_separates_separable_classes_and_not_noise():
    x, y = _blobs(600)
    assert float(linear_probe(x[:400], y[:400], x[400:], y[400:], 4, steps=200)) > 0.95
    noise = jax.random.normal(jax.random.key(0), (600, 8))
    acc = float(linear_probe(noise[:400], y[:400], noise[400:], y[400:], 4, steps=200))
    assert acc < 0.45  # chance is 0.25


def test_probe_on_nonfinite_features_scores_zero():
    x, y = _blobs(100)
    bad = x.at[3, 2].set(jnp.nan)
    assert float(linear_probe(bad, y, x, y, 4, steps=10)) == 0.0


def test_features_chunking_matches_one_pass():
    net = make_net(NetSpec("cnn_s", 3, 8, hidden=16))
    p = net.init(jax.random.key(0))
    u8 = jnp.asarray(np.random.default_rng(0).integers(0, 256, (7, 8, 8, 3)), jnp.uint8)
    mean, std = jnp.full((3,), 0.5), jnp.full((3,), 0.25)
    np.testing.assert_allclose(features(net, p, u8, 8, mean, std, chunk=3), features(net, p, u8, 8, mean, std,
                                                                                       chunk=7), atol=1e-5)


def test_fine_tuning_learns_an_easy_task():
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 120)
    # class 1 images are bright, class 0 dark
    x = np.clip(rng.normal(60 + 120 * y[:, None, None, None], 20, (120, 8, 8, 3)), 0, 255).astype(np.uint8)
    net = make_net(NetSpec("cnn_s", 3, 8, hidden=16))
    acc = fine_tune(net, net.init(jax.random.key(0)), jax.random.key(1), jnp.asarray(x[:40]), jnp.asarray(y[:40]),
                    jnp.asarray(x[40:]), jnp.asarray(y[40:]), num_classes=2, image_size=8,
                    mean=jnp.full((3,), 0.5), std=jnp.full((3,), 0.25), steps=30, batch_size=16, lr=1e-2)
    assert float(acc) > 0.9
