"""mlsys_repro.common.models.mlp: layer sizes, where the activation applies, the last layer's initial scale, bad
sizes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mlsys_repro.common.models.mlp import MLP


def test_layers_and_activation_placement():
    m = MLP((3, 5, 2), nnx.Rngs(0), activation=jnp.tanh)
    assert [(lyr.in_features, lyr.out_features) for lyr in m.layers] == [(3, 5), (5, 2)]
    x = jax.random.normal(jax.random.key(1), (4, 3)) * 10.0
    want = m.layers[1](jnp.tanh(m.layers[0](x)))  # activation between layers, linear output
    np.testing.assert_allclose(m(x), want, rtol=1e-6)
    assert float(jnp.abs(m(x)).max()) > 1.0  # the output is not squashed
    last = MLP((3, 5, 2), nnx.Rngs(0), activation=jnp.tanh, activate_last=True)
    assert float(jnp.abs(last(x)).max()) <= 1.0


def test_final_scale_multiplies_only_the_last_kernel():
    a, b = MLP((3, 4, 2), nnx.Rngs(7)), MLP((3, 4, 2), nnx.Rngs(7), final_scale=0.01)
    np.testing.assert_array_equal(a.layers[0].kernel.get_value(), b.layers[0].kernel.get_value())
    np.testing.assert_allclose(b.layers[1].kernel.get_value(), 0.01 * a.layers[1].kernel.get_value(), rtol=1e-6)


def test_needs_two_sizes():
    with pytest.raises(ValueError, match="at least an input and an output size"):
        MLP((3,), nnx.Rngs(0))
