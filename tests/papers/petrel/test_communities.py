"""1-D k-means (exact DP) against brute force, and partition properties."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.papers.petrel.communities import dispersion_profile, kmeans_1d, random_groups


def _sse(x, groups):
    return sum(float(((x[g] - x[g].mean()) ** 2).sum()) for g in groups)


def _brute(x, k):
    order = np.argsort(x, kind="stable")
    best = np.inf
    for cuts in itertools.combinations(range(1, x.size), k - 1):
        bounds = [0, *cuts, x.size]
        groups = [order[a:b] for a, b in itertools.pairwise(bounds)]
        best = min(best, _sse(x, groups))
    return best


@settings(max_examples=60, deadline=None)
@given(x=st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=9), k=st.integers(1, 5))
def test_kmeans_1d_is_optimal_and_a_partition(x, k):
    x = np.asarray(x)
    groups = kmeans_1d(x, k)
    assert len(groups) == min(k, x.size)
    assert sorted(i for g in groups for i in g) == list(range(x.size))
    assert all(g for g in groups)
    assert _sse(x, [np.asarray(g) for g in groups]) == pytest.approx(_brute(x, min(k, x.size)), abs=1e-9)
    # contiguous in sorted order: group maxima below the next group's minima
    for a, b in itertools.pairwise(groups):
        assert x[a].max() <= x[b].min()


def test_kmeans_known_answer():
    x = np.log([10, 10.5, 80, 20, 41, 9.8, 79, 40])
    assert kmeans_1d(x, 4) == [[0, 1, 5], [3], [4, 7], [2, 6]]
    assert kmeans_1d(x, 1) == [list(range(8))]


def test_dispersion_profile_decreases_to_zero():
    x = np.array([1.0, 1.1, 3.0, 3.2, 7.0])
    d = dispersion_profile(x, 8)
    assert np.all(np.diff(d[:5]) <= 1e-12) and d[4] == pytest.approx(0, abs=1e-6) and np.all(d[5:] == 0)


def test_random_groups_partition():
    rng = np.random.default_rng(0)
    g = random_groups(10, 3, rng)
    assert sorted(sum(g, [])) == list(range(10)) and sorted(len(x) for x in g) == [3, 3, 4]
    with pytest.raises(ValueError):
        random_groups(4, 0, rng)
    with pytest.raises(ValueError):
        kmeans_1d(np.ones(3), 0)
