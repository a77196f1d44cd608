"""Relation matrices: known answers, factorisation, aggregation, collapse and shape errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.papers.fedfoa import relation as rel


def _z(seed=0, n=200, d=6):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(d, d))
    return jnp.asarray(rng.normal(size=(n, d)) @ a, jnp.float32)


def test_relation_matrix_is_the_correlation_matrix():
    z = _z()
    r, ok = rel.relation_matrix(z)
    assert bool(ok)
    np.testing.assert_allclose(r, np.corrcoef(np.asarray(z), rowvar=False), atol=1e-4)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(8, 64), d=st.integers(2, 8))
def test_relation_matrix_is_a_correlation(seed, n, d):
    r, ok = rel.relation_matrix(_z(seed, n, d))
    r = np.asarray(r)
    np.testing.assert_allclose(r, r.T, atol=1e-5)
    np.testing.assert_allclose(np.diag(r), 1.0, atol=1e-3)
    assert np.all(np.abs(r) <= 1 + 1e-4)
    assert np.linalg.eigvalsh(r).min() > -1e-4


def test_collapsed_or_nan_representations_are_flagged():
    z = np.asarray(_z())
    const = z.copy()
    const[:, 2] = 1.5  # a dead feature
    r, ok = rel.relation_matrix(jnp.asarray(const))
    assert not bool(ok) and np.allclose(r, np.eye(6))
    bad = z.copy()
    bad[3, 1] = np.nan
    r, ok = rel.relation_matrix(jnp.asarray(bad))
    assert not bool(ok) and np.all(np.isfinite(r))


def test_full_rank_factor_reconstructs_exactly_and_low_rank_keeps_unit_diagonal():
    r, _ = rel.relation_matrix(_z(d=8))
    np.testing.assert_allclose(rel.reconstruct(rel.factorise(r, 8)), r, atol=1e-4)
    low = rel.reconstruct(rel.factorise(r, 3))
    np.testing.assert_allclose(np.diag(low), 1.0, atol=1e-5)
    w = np.linalg.eigvalsh(np.asarray(r))[::-1]
    l3 = rel.factorise(r, 3)
    # L L^T is the best rank-3 approximation: its spectrum is the top-3 eigenvalues
    np.testing.assert_allclose(np.linalg.eigvalsh(np.asarray(l3 @ l3.T))[::-1][:3], w[:3], rtol=1e-4)


def test_factor_is_sign_canonical():
    r, _ = rel.relation_matrix(_z())
    a = np.asarray(rel.factorise(r, 4))
    assert np.all(a[np.abs(a).argmax(0), np.arange(4)] > 0)
    with pytest.raises(ValueError, match="rank"):
        rel.factorise(r, 7)


def test_aggregate_is_the_weighted_mean_and_skips_collapsed_clients():
    rs = [rel.relation_matrix(_z(s))[0] for s in range(3)]
    ls = jnp.stack([rel.factorise(r, 6) for r in rs])
    w = jnp.array([1.0, 3.0, 100.0])
    lg, any_ok = rel.aggregate(ls, w, jnp.array([True, True, True]), 6)
    want = (1 * rs[0] + 3 * rs[1] + 100 * rs[2]) / 104
    assert bool(any_ok)
    np.testing.assert_allclose(rel.reconstruct(lg), want, atol=1e-4)
    bad = ls.at[2].set(jnp.nan)
    lg2, _ = rel.aggregate(bad, w, jnp.array([True, True, False]), 6)
    np.testing.assert_allclose(rel.reconstruct(lg2), (rs[0] + 3 * rs[1]) / 4, atol=1e-4)
    _, none_ok = rel.aggregate(ls, w, jnp.zeros(3, bool), 6)
    assert not bool(none_ok)


def test_alignment_loss_and_agreement():
    z = _z()
    r, _ = rel.relation_matrix(z)
    assert float(rel.alignment_loss(z, r)) < 1e-8
    assert float(rel.alignment_loss(z, jnp.eye(6))) > 0.0
    g = jax.grad(lambda q: rel.alignment_loss(q, jnp.eye(6)))(z)
    assert np.all(np.isfinite(g))
    assert float(rel.agreement(r, r)) == pytest.approx(1.0)
    a = float(rel.agreement(r, jnp.eye(6)))
    assert 0.0 <= a < 1.0


def test_mismatched_projector_dimensions_are_rejected():
    assert rel.check_dims([64, 64], ["cnn_s", "cnn_l"]) == 64
    with pytest.raises(rel.RelationShapeError, match="cnn_l: d=32"):
        rel.check_dims([64, 32], ["cnn_s", "cnn_l"])
    with pytest.raises(rel.RelationShapeError, match="client 1"):
        rel.check_factors([jnp.zeros((8, 4)), jnp.zeros((8, 3))], rank=4)
    with pytest.raises(rel.RelationShapeError, match="d=6"):
        rel.check_factors([jnp.zeros((8, 4)), jnp.zeros((6, 4))], rank=4)


def test_upload_size_is_independent_of_the_model():
    assert rel.factor_bytes(64, 16) == 64 * 16 * 4
