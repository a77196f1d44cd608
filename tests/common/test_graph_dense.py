"""mlsys_repro.common.graph: dense graph operators, diffusion convolution, DCGRU cell and the DCRNN seq2seq."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.graph.dcrnn import DCRNN, DCGRUCell, DiffusionConv, inverse_sigmoid_decay
from mlsys_repro.common.graph.dense import (
    adaptive_adjacency,
    correlation_adjacency,
    correlation_distance,
    diffusion_features,
    diffusion_terms,
    dual_random_walk,
    gaussian_kernel_adjacency,
    num_diffusion_terms,
    random_walk,
)


@given(st.integers(1, 6), st.integers(0, 2**31 - 1))
@settings(max_examples=25, deadline=None)
def test_random_walk_rows_sum_to_one_or_zero(n, seed):
    a = np.random.default_rng(seed).uniform(size=(n, n)) * (
        np.random.default_rng(seed + 1).uniform(size=(n, n)) > 0.5
    )
    p = np.asarray(random_walk(jnp.asarray(a, jnp.float32)))
    rows = p.sum(1)
    assert np.all(np.isfinite(p)) and np.all(p >= 0)
    np.testing.assert_allclose(rows[a.sum(1) > 0], 1.0, rtol=1e-5)
    np.testing.assert_array_equal(rows[a.sum(1) == 0], 0.0)


def test_dual_random_walk_is_forward_and_transposed():
    a = jnp.asarray([[0.0, 2.0, 0.0], [0.0, 0.0, 1.0], [1.0, 1.0, 0.0]])
    d = dual_random_walk(a)
    assert d.shape == (2, 3, 3)
    np.testing.assert_allclose(d[0], random_walk(a))
    np.testing.assert_allclose(d[1], random_walk(a.T))
    batched = dual_random_walk(jnp.stack([a, a.T]))
    assert batched.shape == (2, 2, 3, 3)
    np.testing.assert_allclose(batched[1, 0], random_walk(a.T))


def test_diffusion_terms_known_answer_on_a_path():
    # path 0 -> 1 -> 2: one step of P moves mass from each node's successor back to it
    p = jnp.asarray([[[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]])
    x = jnp.asarray([[[1.0], [2.0], [3.0]]])  # [B=1, N=3, F=1]
    t = diffusion_terms(x, p, 2)
    assert len(t) == num_diffusion_terms(1, 2) == 3
    np.testing.assert_allclose(t[1][0, :, 0], [2.0, 3.0, 0.0])
    np.testing.assert_allclose(t[2][0, :, 0], [3.0, 0.0, 0.0])
    f = diffusion_features(x, p, 2)
    np.testing.assert_allclose(f[0], [[1, 2, 3], [2, 3, 0], [3, 0, 0]])


def test_bfloat16_supports_round_the_products_inputs_and_accumulate_in_float32():
    """Supports in bfloat16 make every product bfloat16 x bfloat16 -> float32: exact where the inputs are
    representable, rounded (to bfloat16's 8-bit mantissa) where they are not, float32 terms either way."""
    p = jnp.asarray([[[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]])
    x = jnp.asarray([[[1.0], [2.0], [3.0]]])
    t = diffusion_terms(x, p.astype(jnp.bfloat16), 2)
    assert [a.dtype for a in t] == [jnp.float32] * 3
    np.testing.assert_array_equal(t[2][0, :, 0], [3.0, 0.0, 0.0])
    # 1 + 2^-10 is not a bfloat16: the product sees 1.0
    fine = jnp.asarray([[[1.0 + 2.0**-10], [2.0], [3.0]]])
    p_back = jnp.asarray([[[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    assert float(diffusion_terms(fine, p_back, 1)[1][0, 1, 0]) == 1.0 + 2.0**-10
    assert float(diffusion_terms(fine, p_back.astype(jnp.bfloat16), 1)[1][0, 1, 0]) == 1.0
    # random walks on random features, shared and per-sample supports: within bfloat16 rounding of float32
    k = jax.random.split(jax.random.key(3), 2)
    xr = jax.random.normal(k[0], (2, 40, 6))
    for sup in (dual_random_walk(jax.random.uniform(k[1], (40, 40))),
                dual_random_walk(jax.random.uniform(k[1], (2, 40, 40)))):
        ref = diffusion_features(xr, sup, 2)
        low = diffusion_features(xr, sup.astype(jnp.bfloat16), 2)
        assert low.dtype == jnp.float32
        err = np.abs(np.asarray(low) - np.asarray(ref))
        assert 0 < err.max() < 3 * 2.0**-8 * float(np.abs(ref).max())


def test_per_sample_supports_equal_shared_supports_per_sample():
    k = jax.random.split(jax.random.key(0), 3)
    x = jax.random.normal(k[0], (3, 5, 2))
    sup = dual_random_walk(jax.random.uniform(k[1], (3, 5, 5)))  # [B, 2, N, N]
    batched = diffusion_features(x, sup, 2)
    for b in range(3):
        np.testing.assert_allclose(
            batched[b], diffusion_features(x[b : b + 1], sup[b], 2)[0], rtol=1e-5, atol=1e-6
        )


def test_diffusion_rejects_bad_shapes():
    x = jnp.ones((2, 4, 3))
    with pytest.raises(ValueError, match="supports"):
        diffusion_terms(x, jnp.ones((2, 5, 5)), 1)
    with pytest.raises(ValueError, match="x must be"):
        diffusion_terms(jnp.ones((4, 3)), jnp.ones((1, 4, 4)), 1)
    with pytest.raises(ValueError, match="batch"):
        diffusion_terms(x, jnp.ones((3, 1, 4, 4)), 1)


def test_correlation_distance_and_kernel():
    t = np.linspace(0, 6, 50)
    s = np.stack([np.sin(t), 2 * np.sin(t) + 1, -np.sin(t), np.full_like(t, 3.0)], 1)
    d = correlation_distance(s)
    np.testing.assert_allclose(np.diag(d), 0.0, atol=1e-7)
    assert d[0, 1] == pytest.approx(0.0, abs=1e-6)  # perfectly correlated
    assert d[0, 2] == pytest.approx(2.0, abs=1e-6)  # anti-correlated
    assert d[0, 3] == pytest.approx(np.sqrt(2.0))  # constant column: no correlation
    a = gaussian_kernel_adjacency(d, threshold=0.1)
    np.testing.assert_allclose(np.diag(a), 1.0)
    assert a[0, 2] == 0.0 and a[0, 1] == pytest.approx(1.0)
    np.testing.assert_allclose(correlation_adjacency(s, 0.1), a)
    with pytest.raises(ValueError, match="NaN"):
        correlation_distance(np.where(s > 0.5, np.nan, s))


def test_adaptive_adjacency_is_row_stochastic():
    e1, e2 = jax.random.normal(jax.random.key(1), (2, 7, 3))
    a = adaptive_adjacency(e1, e2)
    np.testing.assert_allclose(a.sum(-1), 1.0, rtol=1e-5)
    assert bool(jnp.all(a >= 0))


def test_diffusion_conv_on_identity_support_sums_weight_blocks():
    conv = DiffusionConv(2, 3, num_supports=1, max_step=2, rngs=nnx.Rngs(0))
    x = jax.random.normal(jax.random.key(2), (1, 4, 2))
    y = conv(x, jnp.eye(4)[None])
    w = conv.w[...].reshape(3, 2, 3).sum(0)
    np.testing.assert_allclose(y, x @ w + conv.b[...], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="expects 1 supports"):
        conv(x, jnp.stack([jnp.eye(4)] * 2))


def test_dcgru_cell_interpolates_between_state_and_candidate():
    cell = DCGRUCell(1, 4, num_supports=2, max_step=1, rngs=nnx.Rngs(0))
    sup = dual_random_walk(jnp.ones((3, 3)))
    h = jnp.full((2, 3, 4), 0.5)
    h2 = cell(jnp.ones((2, 3, 1)), h, sup)
    assert h2.shape == (2, 3, 4) and bool(jnp.all(jnp.abs(h2) <= 1.0))
    # zero weights: r = u = sigmoid(1) (gate bias 1), candidate tanh(0) = 0 -> h' = u h
    gd, state = nnx.split(cell)
    state = jax.tree.map(jnp.zeros_like, state)
    z = nnx.merge(gd, state)
    z.gates.b[...] = jnp.ones_like(z.gates.b[...])
    np.testing.assert_allclose(z(jnp.ones((2, 3, 1)), h, sup), jax.nn.sigmoid(1.0) * h, rtol=1e-6)


def test_inverse_sigmoid_decay_is_monotone_to_zero():
    s = inverse_sigmoid_decay(jnp.asarray([0, 10, 100, 1000, 10_000]), 100.0)
    assert float(s[0]) == pytest.approx(100 / 101)
    assert bool(jnp.all(jnp.diff(s) < 0)) and float(s[-1]) < 1e-6


def _tiny_dcrnn():
    return DCRNN(2, 1, 4, 2, num_supports=2, max_step=1, horizon=3, dec_aux_dim=1, rngs=nnx.Rngs(0))


def test_dcrnn_shapes_teacher_forcing_and_gradients():
    m = _tiny_dcrnn()
    sup = dual_random_walk(jax.random.uniform(jax.random.key(3), (5, 5)))
    x = jax.random.normal(jax.random.key(4), (2, 6, 5, 2))
    aux = jnp.ones((2, 3, 5, 1))
    out = m(x, sup, aux=aux)
    assert out.shape == (2, 3, 5, 1) and bool(jnp.all(jnp.isfinite(out)))
    y1 = jnp.zeros((2, 3, 5, 1))
    y2 = y1.at[:, 0].set(5.0)
    k = jax.random.key(5)
    # always teacher-forced: the second step reads the true first target, so changing it changes the output
    a = m(x, sup, aux=aux, targets=y1, teacher_prob=1.0, key=k)
    b = m(x, sup, aux=aux, targets=y2, teacher_prob=1.0, key=k)
    assert not np.allclose(a[:, 1], b[:, 1])
    np.testing.assert_allclose(a[:, 0], b[:, 0])
    # never teacher-forced: targets are ignored
    np.testing.assert_allclose(m(x, sup, aux=aux, targets=y2, teacher_prob=0.0, key=k), out, rtol=1e-6)
    gd, params = nnx.split(m)
    g = jax.jit(jax.grad(lambda p: jnp.mean(nnx.merge(gd, p)(x, sup, aux=aux) ** 2)))(params)
    leaves = jax.tree.leaves(g)
    assert all(bool(jnp.all(jnp.isfinite(v))) for v in leaves)
    assert any(float(jnp.abs(v).sum()) > 0 for v in leaves)


def test_dcrnn_rejects_missing_aux():
    m = _tiny_dcrnn()
    with pytest.raises(ValueError, match="aux"):
        m(jnp.ones((1, 2, 3, 2)), dual_random_walk(jnp.ones((3, 3))))
