"""The "static plus evolution graph" ablation unites the two graphs (it does not replace either), and edge
persistence (how much the graph changes from one window to the next) on hand-made graphs."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_repro.papers.evogwp.evaluate import window_persistence
from mlsys_repro.papers.evogwp.evolution import edge_persistence, union_adjacency


def _edges(a) -> set[tuple[int, int]]:
    a = np.asarray(a)
    return {(int(i), int(j)) for i, j in zip(*np.nonzero(a), strict=True)}


def test_union_has_the_edges_of_both_graphs_each_once():
    static = np.zeros((4, 4), np.float32)
    static[0, 1] = 0.5
    static[1, 2] = 1.0
    static[2, 2] = 0.7  # a self-loop is not an edge of the union
    evo = np.zeros((2, 4, 4), np.float32)
    evo[0, 0, 1] = 4.0  # also a static edge
    evo[0, 3, 0] = 2.0
    evo[1, 2, 3] = 8.0  # evo[1] otherwise empty
    u = np.asarray(union_adjacency(static, evo))
    assert u.shape == (2, 4, 4)
    assert _edges(u[0]) == {(0, 1), (1, 2), (3, 0)}  # static {01, 12} U evolution {01, 30}
    assert _edges(u[1]) == {(0, 1), (1, 2), (2, 3)}
    # no duplicates: an edge of both counts once (scaled weights, maximum), never the sum of the two
    assert u[0, 0, 1] == pytest.approx(1.0)  # max(0.5 / 1.0, 4.0 / 4.0)
    assert u[0, 1, 2] == pytest.approx(1.0) and u[0, 3, 0] == pytest.approx(0.5)
    assert u.max() <= 1.0 + 1e-6 and np.all(np.diagonal(u, axis1=1, axis2=2) == 0)
    assert len(_edges(u[0])) == len(_edges(static) - {(2, 2)} | _edges(evo[0]))
    # an empty evolution graph leaves the static one (scaled)
    np.testing.assert_allclose(np.asarray(union_adjacency(static, np.zeros((4, 4))))[0, 1], 0.5)


def test_edge_persistence_on_a_hand_made_pair():
    a = np.zeros((2, 3, 3))
    a[0, 0, 1] = a[0, 1, 2] = a[0, 2, 0] = 1.0  # edges 01, 12, 20
    a[1, 0, 1] = 0.3  # kept (weight changes do not matter)
    a[1, 2, 1] = 1.0  # new
    a[1, 1, 1] = 5.0  # a self-loop is not an edge
    np.testing.assert_allclose(edge_persistence(a), [0.5])  # 1 of graph 1's 2 edges was in graph 0
    np.testing.assert_allclose(edge_persistence(np.stack([a[0], a[0], a[1]])), [1.0, 1.0 / 2.0])
    np.testing.assert_allclose(edge_persistence(np.stack([a[1], a[0]])), [1.0 / 3.0])
    assert np.isnan(edge_persistence(np.stack([a[0], np.zeros((3, 3))]))[0])
    assert edge_persistence(a[:1]).size == 0


def test_window_persistence_reads_each_windows_last_context_transition():
    adj = np.zeros((5, 2, 2))
    adj[1, 0, 1] = adj[2, 0, 1] = adj[3, 1, 0] = 1.0
    # segments of 4 steps; windows at origins 8, 12, 16 diffuse over transitions 1, 2, 3
    np.testing.assert_allclose(window_persistence(adj, np.array([8, 12, 16]), 4), [1.0, 0.0])
