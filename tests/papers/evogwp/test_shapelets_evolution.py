"""Two-level-importance shapelets and the evolution graph: known answers and invariants."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from mlsys_repro.papers.evogwp.evolution import (
    EvolutionConfig,
    evolution_graph,
    graph_stats,
    project,
    sparsify_rows,
    transition_matrix,
)
from mlsys_repro.papers.evogwp.shapelets import (
    ShapeletConfig,
    Shapelets,
    enforce_min_class_size,
    farthest_points,
    fit_shapelets,
    hellinger_score,
    kl_score,
    kmeans,
    pseudo_labels,
    sample_distance,
    segment_distances,
    weighted_sq_dist,
)


def test_weighted_sq_dist_matches_brute_force():
    rng = np.random.default_rng(0)
    v, w = rng.normal(size=(3, 5)), rng.normal(size=(3, 5))
    segs = rng.normal(size=(4, 2, 5))
    got = np.asarray(weighted_sq_dist(jnp.asarray(v), jnp.asarray(w), jnp.asarray(segs)))
    want = np.array(
        [[[np.mean((w[k] * (v[k] - segs[m, s])) ** 2) for s in range(2)] for m in range(4)] for k in range(3)]
    )
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_sample_distance_is_a_soft_minimum_over_weighted_segments():
    v = jnp.zeros((1, 2))
    w = jnp.ones((1, 2))
    segs = jnp.asarray([[[1.0, 1.0], [3.0, 3.0]]])  # distances 1 and 3
    d = sample_distance(v, w, jnp.ones((1, 2)), segs, tau=1e-3)
    assert float(d[0, 0]) == pytest.approx(1.0, abs=1e-2)
    # the global factor reweights segment positions: making segment 0 expensive selects segment 1
    d2 = sample_distance(v, w, jnp.asarray([[10.0, 1.0]]), segs, tau=1e-3)
    assert float(d2[0, 0]) == pytest.approx(3.0, abs=1e-2)


def test_kmeans_recovers_obvious_clusters():
    x = np.concatenate([np.zeros((5, 2)), np.full((5, 2), 10.0)]) + np.random.default_rng(0).normal(
        0, 0.1, (10, 2)
    )
    lab = kmeans(x, 2, seed=3)
    assert len(set(lab[:5])) == 1 and len(set(lab[5:])) == 1 and lab[0] != lab[5]


def test_farthest_points_picks_extremes():
    pool = np.array([[0.0], [0.1], [5.0], [-5.0], [0.2]])
    idx = farthest_points(pool, 3)
    assert set(idx.tolist()) == {0, 2, 3} or set(idx.tolist()) == {1, 2, 3}


def test_kl_score_separates_better_classes_higher():
    onehot = jnp.asarray(np.repeat(np.eye(2), 20, axis=0))
    rng = np.random.default_rng(1)
    mixed = jnp.asarray(rng.normal(size=40))
    apart = jnp.asarray(np.concatenate([rng.normal(0, 1, 20), rng.normal(6, 1, 20)]))
    assert float(kl_score(apart, onehot)) > 5 * float(kl_score(mixed, onehot))


def _two_shape_series(n=8, days=6, period=24):
    t = np.arange(days * period)
    a = np.sin(2 * np.pi * t / period)
    b = np.where((t % period) < period // 2, 1.0, -1.0)
    rng = np.random.default_rng(2)
    cols = [(a if j % 2 else b) + rng.normal(0, 0.05, t.size) for j in range(n)]
    return np.stack(cols, 1).astype(np.float32)


def test_fit_shapelets_shapes_order_and_importance_switch():
    x = _two_shape_series()
    cfg = ShapeletConfig(
        num_shapelets=4, seg_len=6, candidates_per_shapelet=3, num_classes=2, max_samples=64, steps=5
    )
    shp = fit_shapelets(x, 24, 5 * 24, cfg)
    assert shp.v.shape == (4, 6) and shp.w.shape == (4, 6) and shp.u.shape == (4, 4)
    assert np.all(np.diff(shp.score) <= 1e-6)
    assert set(shp.labels[::2]) != set(shp.labels[1::2])  # the two daily shapes land in different classes
    flat = fit_shapelets(x, 24, 5 * 24, ShapeletConfig(**{**cfg.__dict__, "steps": 0}))
    np.testing.assert_array_equal(flat.w, 1.0)
    np.testing.assert_array_equal(flat.u, 1.0)
    again = Shapelets.from_arrays(shp.arrays())
    np.testing.assert_array_equal(again.v, shp.v)


def test_segment_distances_use_the_slot_weights():
    v = np.zeros((1, 2), np.float32)
    shp = Shapelets(
        v,
        np.ones((1, 2), np.float32),
        np.array([[1.0, 2.0, 3.0]], np.float32),
        np.ones(1),
        np.zeros(1, np.int32),
        6,
    )
    x = np.ones((6, 1), np.float32)  # three segments of length 2, each at distance 1 from v
    sd = segment_distances(shp, x)
    np.testing.assert_allclose(sd[:, 0, 0], [1.0, 2.0, 3.0], rtol=1e-4)
    np.testing.assert_allclose(segment_distances(shp, x, first_slot=1)[:, 0, 0], [2.0, 3.0, 1.0], rtol=1e-4)


def test_transition_matrix_known_answer_and_self_loops():
    # one workload: close to shapelet 0 at the source, to shapelet 1 at the destination; shapelet 2 never
    # linked
    d_src = jnp.asarray([[0.0, 5.0, 9.0]])
    d_dst = jnp.asarray([[5.0, 0.0, 9.0]])
    t = np.asarray(transition_matrix(d_src, d_dst, theta=6.0, min_weight=0.01))
    np.testing.assert_allclose(t.sum(1), 1.0, rtol=1e-6)
    assert t[0, 1] > t[0, 0] and t[0, 2] == 0.0  # 0 -> 1 is the transition
    np.testing.assert_allclose(t[2], [0.0, 0.0, 1.0])  # empty row -> self-loop


def test_project_links_workloads_through_transitions_only():
    # workloads 0, 1 near shapelet 0; workload 2 near shapelet 1; everything moves 0 -> 1
    d_src = jnp.asarray([[0.0, 9.0], [0.0, 9.0], [9.0, 0.0]])
    d_dst = d_src
    tmat = jnp.asarray([[0.0, 1.0], [0.0, 1.0]])
    adj = np.asarray(project(d_src, d_dst, tmat, top_shapelets=1, edges_per_node=2))
    assert adj.shape == (3, 3) and np.all(adj >= 0) and np.all(np.diag(adj) == 0)
    assert adj[0, 2] > 0 and adj[1, 2] > 0  # shapelet 0 (0, 1 at g-1) -> shapelet 1 (2 at g)
    assert adj[0, 1] == 0 and adj[1, 0] == 0  # sharing shapelet 0 alone is no longer an edge
    assert adj[2, 0] == 0 and adj[2, 1] == 0  # nothing moves 1 -> 0


def test_sparsify_rows_keeps_the_k_largest_per_row():
    a = jnp.asarray([[5.0, 1.0, 2.0, 3.0], [1.0, 0.0, 0.0, 0.0], [4.0, 3.0, 9.0, 1.0], [0.0, 0.0, 0.0, 0.0]])
    out = np.asarray(sparsify_rows(a, 2))
    np.testing.assert_array_equal(out[0], [0.0, 0.0, 2.0, 3.0])  # diagonal dropped first
    np.testing.assert_array_equal(out[1], [1.0, 0.0, 0.0, 0.0])  # zeros never become edges
    np.testing.assert_array_equal(out[2], [4.0, 3.0, 0.0, 0.0])
    np.testing.assert_array_equal(out[3], 0.0)


def _uniform_patterns(g=6, n=24, k=10, seed=0):
    """The degenerate case the old projection turned into a complete graph: every workload close to the same
    few shapelets, small random differences."""
    rng = np.random.default_rng(seed)
    base = np.linspace(0.2, 3.0, k)
    return (base[None, None, :] + rng.uniform(0, 0.3, (g, n, k))).astype(np.float32)


def test_evolution_graph_is_sparse_even_when_every_workload_shares_its_shapelets():
    sd = _uniform_patterns()
    cfg = EvolutionConfig(top_shapelets=3, top_transitions=3, edge_fraction=0.1)
    adj = evolution_graph(sd, float(np.percentile(sd, 80)), cfg)
    st = graph_stats(adj)
    assert st["graph_density"] < 0.5, st
    assert st["graph_density"] <= cfg.edges_per_node(24) / 23 + 1e-9
    assert st["graph_row_entropy"] < 0.6, st  # not a uniform average over the other workloads
    # every row has its k out-edges
    assert np.all((adj[1:] > 0).sum(-1) == cfg.edges_per_node(24))


def test_graph_stats_flag_a_complete_graph():
    n = 10
    full = np.ones((3, n, n)) - np.eye(n)
    st = graph_stats(full)
    assert st["graph_density"] == pytest.approx(1.0)
    assert st["graph_row_entropy"] == pytest.approx(1.0)
    assert st["graph_degree_entropy"] == pytest.approx(1.0)
    assert st["graph_edge_persistence"] == pytest.approx(1.0)
    star = np.zeros((2, n, n))
    star[:, 1:, 0] = 1.0  # everyone points at workload 0: one hub
    s2 = graph_stats(star)
    assert s2["graph_density"] == pytest.approx((n - 1) / (n * (n - 1)))
    assert s2["graph_degree_entropy"] == pytest.approx(0.0, abs=1e-9)


def test_evolution_graph_shapes_and_first_transition():
    rng = np.random.default_rng(3)
    sd = rng.uniform(size=(5, 4, 3)).astype(np.float32)
    adj = evolution_graph(sd, 0.8, EvolutionConfig(top_shapelets=2, top_transitions=2, edge_fraction=0.5))
    assert adj.shape == (5, 4, 4)
    np.testing.assert_array_equal(adj[0], 0.0)
    assert np.all(adj >= 0) and np.all(adj[:, np.arange(4), np.arange(4)] == 0)
    assert adj[1:].sum() > 0


def test_min_class_size_dissolves_tiny_classes():
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.normal(0, 0.1, (6, 2)), rng.normal(5, 0.1, (6, 2)), [[20.0, 20.0]]])
    lab = np.r_[np.zeros(6), np.ones(6), [2]].astype(np.int32)  # a one-member class
    out = enforce_min_class_size(x, lab, 3)
    assert np.bincount(out).min() >= 3 and np.unique(out).size == 2
    assert len(set(out[:6])) == 1 and len(set(out[6:12])) == 1 and out[0] != out[6]
    np.testing.assert_array_equal(enforce_min_class_size(x, lab, 1), lab)  # nothing to do
    assert np.unique(enforce_min_class_size(x[:5], lab[:5], 3)).size == 1  # too few points: one class


def test_pseudo_labels_respect_the_minimum_class_size():
    x = _two_shape_series(n=9)
    x[:, 8] = np.cos(np.arange(x.shape[0]) * 2 * np.pi / 6)  # one odd entity k-means would isolate
    lab = pseudo_labels(x, 24, 5 * 24, k=4, min_class_size=3)
    assert np.bincount(lab).min() >= 3


def test_hellinger_score_is_bounded_where_kl_explodes():
    onehot = jnp.asarray(np.concatenate([np.repeat([[1.0, 0.0]], 2, 0), np.repeat([[0.0, 1.0]], 38, 0)]))
    rng = np.random.default_rng(1)
    # a "fingerprint": a two-sample class at one exact distance, far from the rest
    d = jnp.asarray(np.r_[[3.0, 3.0], rng.normal(0, 1, 38)])
    assert float(kl_score(d, onehot)) > 50  # the authors' score with its 1e-3 floor
    h = float(hellinger_score(d, onehot))
    assert 0.0 <= h <= 1.0
    # still ranks separated classes above mixed ones
    oh2 = jnp.asarray(np.repeat(np.eye(2), 20, axis=0))
    mixed = jnp.asarray(rng.normal(size=40))
    apart = jnp.asarray(np.concatenate([rng.normal(0, 1, 20), rng.normal(6, 1, 20)]))
    assert float(hellinger_score(apart, oh2)) > 5 * float(hellinger_score(mixed, oh2))
    assert float(hellinger_score(apart, oh2)) <= 1.0
