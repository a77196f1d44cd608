"""LabelAvg's voting-based smoothing, DS-FL's ERA, FedMD's consensus: known answers and invariants."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.fl.comm import bits_for, packed_size
from mlsys_repro.papers.labelavg import methods as M


def test_vote_targets_known_answer():
    counts = jnp.array([[3, 1, 0], [0, 0, 4]])
    t = M.vote_targets(counts, 4, 0.3)
    np.testing.assert_allclose(t, [[0.7 * 0.75 + 0.1, 0.7 * 0.25 + 0.1, 0.1], [0.1, 0.1, 0.8]], rtol=1e-6)
    m = M.vote_targets(counts, 4, 0.2, rule="majority")
    np.testing.assert_allclose(m, [[0.8 + 0.2 * 0.75, 0.2 * 0.25, 0.0], [0.0, 0.0, 1.0]], rtol=1e-6)
    with pytest.raises(ValueError, match="smoothing rule"):
        M.vote_targets(counts, 4, 0.1, rule="median")


@given(k=st.integers(1, 20), c=st.integers(2, 12), eps=st.floats(0.0, 1.0), seed=st.integers(0, 50),
       rule=st.sampled_from(M.SMOOTHING_RULES))
@settings(max_examples=40, deadline=None)
def test_vote_targets_are_distributions(k, c, eps, seed, rule):
    labels = np.random.default_rng(seed).integers(0, c, (k, 7))
    counts = M.vote_counts(jnp.asarray(labels), c)
    assert counts.sum(-1).tolist() == [k] * 7
    t = np.asarray(M.vote_targets(counts, k, eps, rule))
    np.testing.assert_allclose(t.sum(-1), 1.0, rtol=1e-5)
    assert (t >= -1e-7).all()
    if rule == "vote_share":
        assert (t >= eps / c - 1e-6).all()
    # the plurality label keeps the largest target mass
    top = np.asarray(counts).argmax(-1)
    assert (t[np.arange(7), top] >= t.max(-1) - 1e-6).all()  # ties allowed (eps -> 1 flattens the targets)


def test_labelavg_roundtrip_upload_to_targets():
    """Client logits -> packed labels -> server votes -> packed counts -> client targets, exactly."""
    k, n, c = 5, 33, 10
    logits = jax.random.normal(jax.random.key(0), (k, n, c))
    up = M.client_upload("labelavg", logits, c)
    assert up.dtype == jnp.uint8 and up.shape == (k, packed_size(n, bits_for(c)))
    labels = M.server_decode("labelavg", up, n, c)
    np.testing.assert_array_equal(labels, logits.argmax(-1))
    down = M.server_aggregate("labelavg", labels, c)
    assert down.dtype == jnp.uint8 and down.shape == (packed_size(n * c, bits_for(k + 1)),)
    t = M.client_targets("labelavg", down, n, k, c, epsilon=0.1)
    np.testing.assert_allclose(t, M.vote_targets(M.vote_counts(logits.argmax(-1), c), k, 0.1), rtol=1e-6)


def test_era_known_answer_and_sharpening():
    probs = jnp.array([[[0.6, 0.4]], [[0.8, 0.2]]])  # 2 clients, 1 sample
    out = M.era(probs, 0.1)
    np.testing.assert_allclose(out[0], jax.nn.softmax(jnp.array([0.7, 0.3]) / 0.1), rtol=1e-6)
    ent = lambda p: -(p * jnp.log(p)).sum(-1)
    assert float(ent(out[0])) < float(ent(probs.mean(0)[0]))  # entropy reduction
    np.testing.assert_allclose(M.server_aggregate("dsfl", probs, 2, era_temperature=0.1), out)


def test_fedmd_consensus_and_uploads():
    logits = jnp.arange(12.0).reshape(2, 3, 2)
    assert M.client_upload("fedmd", logits, 2) is logits
    np.testing.assert_allclose(M.server_aggregate("fedmd", logits, 2), logits.mean(0))
    np.testing.assert_allclose(M.client_upload("dsfl", logits, 2).sum(-1), 1.0, rtol=1e-6)
    assert float(M.l1_logits(jnp.ones((2, 2)), jnp.zeros((2, 2)))) == 1.0
    with pytest.raises(ValueError, match="does not upload outputs"):
        M.client_upload("fedavg", logits, 2)
