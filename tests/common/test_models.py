"""Shared small models: shapes, purity (apply(params, x) is jit/vmap/grad friendly), and a learning check."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from mlsys_repro.common.models.data import load_image_data, normalise, stratified_subset
from mlsys_repro.common.models.small import (
    MODELS,
    accuracy,
    cross_entropy,
    make_model,
    num_params,
    per_example_cross_entropy,
    pure,
)
from tests.conftest import DATA


@pytest.mark.parametrize("name, shape", [(n, s) for n in sorted(MODELS) for s in [(28, 28, 1), (32, 32, 3)]
                                         if not (n == "mlp" and s[2] == 3)])
def test_shapes_and_vmap_over_stacked_params(name, shape):
    apply, params = pure(make_model(name, shape, 10, seed=0))
    x = jnp.zeros((4, *shape))
    assert apply(params, x).shape == (4, 10)
    p2 = pure(make_model(name, shape, 10, seed=1))[1]
    both = jax.tree.map(lambda a, b: jnp.stack([a, b]), params, p2)
    out = jax.jit(jax.vmap(apply, in_axes=(0, None)))(both, x + 1.0)
    assert out.shape == (2, 4, 10)
    assert not np.allclose(out[0], out[1])  # different seeds, different functions


def test_param_counts_documented():
    counts = {n: num_params(pure(make_model(n, (28, 28, 1), 10))[1]) for n in MODELS}
    assert counts == {"mlp": 199_210, "lenet": 61_706, "cnn": 421_642, "convnet": 94_410}


def test_cnn_learns_mnist_subset():
    data = load_image_data("mnist", DATA, n_train=2000, n_test=500, seed=0)
    apply, params = pure(make_model("lenet", data.in_shape, 10, seed=0))
    tx = optax.adam(3e-3)
    opt = tx.init(params)

    @jax.jit
    def step(p, o, x, y):
        loss, g = jax.value_and_grad(lambda q: cross_entropy(apply(q, x), y))(p)
        u, o = tx.update(g, o, p)
        return optax.apply_updates(p, u), o, loss

    for i in range(150):
        sl = slice((i * 64) % 1936, (i * 64) % 1936 + 64)
        params, opt, _ = step(params, opt, data.x_train[sl], data.y_train[sl])
    acc = float(accuracy(apply(params, data.x_test), data.y_test))
    assert acc > 0.85


def test_normalise_and_stratified_subset():
    d = load_image_data("mnist", DATA, n_train=100, n_test=50, seed=3)
    assert d.x_train.shape == (100, 28, 28, 1) and np.bincount(d.y_train).tolist() == [10] * 10
    assert abs(float(normalise(np.full((1, 1), 255, np.uint8), "mnist")[0, 0]) - (1 - 0.1307) / 0.3081) < 1e-5
    d2 = load_image_data("mnist", DATA, n_train=100, n_test=50, seed=3)
    np.testing.assert_array_equal(d.y_train, d2.y_train)


def test_stratified_subset_counts_order_and_bad_input():
    y = np.repeat(np.arange(3), [5, 7, 9])
    x = np.arange(y.size) * 10
    xs, ys = stratified_subset(x, y, 8, np.random.default_rng(0), shuffle=False)
    assert np.bincount(ys, minlength=3).tolist() == [3, 3, 2]  # n // C each, the remainder to the first classes
    assert np.all(np.diff(xs) > 0) and np.array_equal(xs // 10, np.sort(xs // 10))  # original order kept
    np.testing.assert_array_equal(y[xs // 10], ys)
    xr, yr = stratified_subset(x, y, 8, np.random.default_rng(0))  # same draw, random order
    np.testing.assert_array_equal(np.sort(xr), xs)
    assert len(np.unique(xr)) == 8  # without replacement
    for n in (None, 21, 50):
        xa, ya = stratified_subset(x, y, n, np.random.default_rng(0))
        assert xa is x and ya is y
    with pytest.raises(ValueError, match="n must be >= 0"):
        stratified_subset(x, y, -1, np.random.default_rng(0))


def test_cross_entropy_known_values():
    logits = jnp.array([[0.0, 0.0], [np.log(3.0), 0.0]])
    labels = jnp.array([1, 0])
    per = per_example_cross_entropy(logits, labels)
    np.testing.assert_allclose(per, [np.log(2.0), np.log(4.0 / 3.0)], rtol=1e-6)
    np.testing.assert_allclose(cross_entropy(logits, labels), per.mean(), rtol=1e-7)
