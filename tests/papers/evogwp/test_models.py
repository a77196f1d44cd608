"""Forecaster modules: shapes, the shared residual convention, graph supports, and the config schemas."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from mlsys_repro.papers.evogwp import models
from mlsys_repro.papers.evogwp.forecasters import builder, doubling_dilations, fixed_entities, patch_sizes
from mlsys_repro.papers.evogwp.schemas import parse_hparams

B, P, Q, N, K, C = 2, 12, 4, 5, 3, 2


def _batch(seed=0):
    k = jax.random.split(jax.random.key(seed), 4)
    return {
        "x": jax.random.normal(k[0], (B, P, N)),
        "tod_in": jnp.tile(jnp.arange(P) / 288.0, (B, 1)),
        "tod_out": jnp.tile((P + jnp.arange(Q)) / 288.0, (B, 1)),
        "y_std": jax.random.normal(k[1], (B, Q, N)),
        "static_adj": jax.random.uniform(k[2], (N, N)),
        "ctx_sdist": jax.random.normal(k[3], (B, C, N, K)),
        "ctx_adj": jax.random.uniform(k[2], (B, C, N, N)),
    }


SMALL = {
    "lstm": {"hidden": 4},
    "gru": {"hidden": 4},
    "dlinear": {"kernel": 5},
    "patchtst": {"d_model": 8, "heads": 2, "ff": 8, "layers": 1},
    "dcrnn": {"hidden": 4},
    "gwnet": {"residual": 4, "skip": 4, "end": 8, "emb_dim": 2},
    "evogwp": {"hidden": 4, "evo_hidden": 4, "emb_dim": 2},
}


def _model(kind, **over):
    hp = parse_hparams(kind, {**SMALL[kind], **over})
    return builder(kind, hp, num_nodes=N, input_len=P, horizon=Q, num_shapelets=K)(nnx.Rngs(0))


@pytest.mark.parametrize("kind", list(SMALL))
def test_every_model_forecasts_finite_values_of_the_right_shape(kind):
    gd, params = nnx.split(_model(kind))

    @jax.jit
    def both(p, b):
        m = nnx.merge(gd, p)
        return m(b), m(b, teacher_prob=0.5, key=jax.random.key(1))

    out, tf = both(params, _batch())
    assert out.shape == tf.shape == (B, Q, N) and bool(jnp.all(jnp.isfinite(out)))


@pytest.mark.parametrize(
    "kind, head", [("dcrnn", "net.proj"), ("evogwp", "net.proj"), ("lstm", "proj"), ("gwnet", "end2")]
)
def test_recurrent_and_graph_models_start_from_the_last_value(kind, head):
    m = _model(kind)
    obj = m
    for part in head.split("."):
        obj = getattr(obj, part)
    obj.kernel[...] = jnp.zeros_like(obj.kernel[...])
    obj.bias[...] = jnp.zeros_like(obj.bias[...])
    b = _batch()
    np.testing.assert_allclose(m(b), jnp.broadcast_to(b["x"][:, -1:], (B, Q, N)), atol=1e-6)


def test_dlinear_keeps_a_constant_series_constant_at_init():
    b = _batch()
    b["x"] = jnp.full((B, P, N), 0.7)
    np.testing.assert_allclose(_model("dlinear")(b), 0.7, rtol=1e-5)


def test_evogwp_supports_per_switch():
    b = _batch()
    for graph, learned, n_sup in (
        ("evolution", "evolstm", 3),
        ("static", "evolstm", 3),
        ("union", "evolstm", 3),
        ("evolution", "none", 2),
        ("none", "embedding", 1),
    ):
        sup = _model("evogwp", graph=graph, learned=learned).supports(b)
        assert sup.shape == (B, n_sup, N, N)
        rows = sup.sum(-1)
        assert bool(jnp.all((jnp.abs(rows - 1) < 1e-4) | (jnp.abs(rows) < 1e-6)))
    # the learned adjacency depends on the window's shapelet history
    m = _model("evogwp")
    b2 = dict(b, ctx_sdist=b["ctx_sdist"] + 1.0)
    assert not np.allclose(m.supports(b)[:, 2], m.supports(b2)[:, 2])


def test_the_union_variant_diffuses_over_static_and_evolution_edges():
    from mlsys_repro.common.graph.dense import dual_random_walk
    from mlsys_repro.papers.evogwp.evolution import union_adjacency

    b = _batch()
    eye = jnp.eye(N)
    b["static_adj"] = jnp.roll(eye, 1, axis=1)  # i -> i + 1
    b["ctx_adj"] = jnp.broadcast_to(jnp.roll(eye, 2, axis=1), (B, C, N, N))  # i -> i + 2
    sup = _model("evogwp", graph="union").supports(b)
    want = dual_random_walk(union_adjacency(b["static_adj"], b["ctx_adj"][:, -1]))
    np.testing.assert_allclose(sup[:, :2], want, atol=1e-6)
    fwd = np.asarray(sup[0, 0]) > 0
    assert fwd[0, 1] and fwd[0, 2] and fwd.sum() == 2 * N  # both graphs' edges, each once
    ev = _model("evogwp", graph="evolution").supports(b)
    assert (np.asarray(ev[0, 0]) > 0).sum() == N  # the evolution graph alone


def test_hparam_schema_rejects_typos_and_bad_values():
    with pytest.raises(ValueError, match="unknown hparams"):
        parse_hparams("dcrnn", {"hiden": 3})
    with pytest.raises(ValueError, match="graph"):
        parse_hparams("evogwp", {"graph": "nope"})
    with pytest.raises(ValueError, match="needs graph"):
        parse_hparams("evogwp", {"graph": "none", "learned": "none"})
    with pytest.raises(ValueError, match="unknown forecaster"):
        parse_hparams("prophet", {})


def test_fixed_entity_models_and_helpers():
    hp = parse_hparams("evogwp", {})
    assert not fixed_entities("evogwp", hp) and fixed_entities("dcrnn", parse_hparams("dcrnn", {}))
    assert fixed_entities("evogwp", parse_hparams("evogwp", {"graph": "static"}))
    assert fixed_entities("evogwp", parse_hparams("evogwp", {"graph": "union"}))
    assert fixed_entities("evogwp", parse_hparams("evogwp", {"graph": "none", "learned": "embedding"}))
    assert not fixed_entities("patchtst", parse_hparams("patchtst", {}))
    assert doubling_dilations(12) == (1, 2, 4, 8) and 1 + sum(doubling_dilations(48)) >= 48
    assert patch_sizes(12, 5) == (4, 2) and patch_sizes(48, 5) == (16, 8)
    assert models.PatchTST(12, 4, 4, 2, 8, 2, 1, 8, rngs=nnx.Rngs(0)).num_patches == 6
