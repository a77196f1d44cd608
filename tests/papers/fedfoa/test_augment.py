"""JAX augmentations: exact resampling identities, value ranges, determinism."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.papers.fedfoa.augment import (
    AugmentSpec,
    augment,
    colour_jitter,
    crop_resize,
    eval_view,
    grayscale,
    interp_matrix,
    resize,
    two_views,
)

IMG = jax.random.uniform(jax.random.key(0), (8, 8, 3))


@settings(max_examples=25, deadline=None)
@given(start=st.floats(0, 6), length=st.floats(1, 8), out=st.integers(1, 12))
def test_interp_rows_are_convex_weights(start, length, out):
    w = np.asarray(interp_matrix(jnp.float32(start), jnp.float32(length), out, 8))
    assert w.shape == (out, 8)
    assert np.all(w >= -1e-6)
    np.testing.assert_allclose(w.sum(1), 1.0, atol=1e-5)


def test_full_box_same_size_is_identity():
    np.testing.assert_allclose(resize(IMG, 8), IMG, atol=1e-6)


def test_half_size_is_2x2_average_pool():
    ref = IMG.reshape(4, 2, 4, 2, 3).mean(axis=(1, 3))
    np.testing.assert_allclose(resize(IMG, 4), ref, atol=1e-6)


def test_flip_mirrors_the_crop():
    a = crop_resize(IMG, jnp.float32(1), jnp.float32(2), jnp.float32(5), jnp.float32(4), 6)
    b = crop_resize(IMG, jnp.float32(1), jnp.float32(2), jnp.float32(5), jnp.float32(4), 6, flip=True)
    np.testing.assert_allclose(b, a[:, ::-1], atol=1e-6)


def test_grayscale_and_jitter_stay_in_range():
    g = grayscale(IMG)
    np.testing.assert_allclose(g[..., 0], g[..., 2])
    spec = AugmentSpec(out_size=8)
    for s in range(5):
        x = colour_jitter(jax.random.key(s), IMG, spec)
        assert x.shape == IMG.shape and float(x.min()) >= 0.0 and float(x.max()) <= 1.0


def test_augment_shapes_range_determinism_and_single_channel():
    spec = AugmentSpec(out_size=4)
    a = augment(jax.random.key(3), IMG, spec)
    assert a.shape == (4, 4, 3) and float(a.min()) >= 0 and float(a.max()) <= 1
    np.testing.assert_array_equal(a, augment(jax.random.key(3), IMG, spec))
    assert not np.allclose(a, augment(jax.random.key(4), IMG, spec))
    mono = augment(jax.random.key(3), IMG[..., :1], spec)
    assert mono.shape == (4, 4, 1)


def test_two_views_and_eval_view_are_normalised():
    u8 = (np.asarray(jax.random.uniform(jax.random.key(1), (5, 8, 8, 3))) * 255).astype(np.uint8)
    mean, std = jnp.array([0.5, 0.5, 0.5]), jnp.array([0.25, 0.25, 0.25])
    v1, v2 = two_views(jax.random.key(0), jnp.asarray(u8), AugmentSpec(out_size=4), mean, std)
    assert v1.shape == v2.shape == (5, 4, 4, 3) and not np.allclose(v1, v2)
    assert float(jnp.abs(v1).max()) <= 2.0 + 1e-5  # ((x in [0,1]) - 0.5) / 0.25
    ev = eval_view(jnp.asarray(u8), 4, mean, std)
    ref = (u8.astype(np.float32) / 255).reshape(5, 4, 2, 4, 2, 3).mean(axis=(2, 4))
    np.testing.assert_allclose(ev, (ref - 0.5) / 0.25, atol=1e-5)
