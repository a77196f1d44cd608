"""Community formation: optimal 1-D k-means on (log) iteration times, and random partitions.

Workers are similar when their iteration times are close, so a community is a contiguous run of workers sorted by
their (measured or nominal) iteration time. ``kmeans_1d`` finds the partition of the sorted values into ``k``
contiguous groups with the least within-group sum of squares by dynamic programming (exact, O(k n^2); n <= 64).
"""

from __future__ import annotations

import numpy as np


def kmeans_costs(x: np.ndarray, k_max: int) -> tuple[np.ndarray, np.ndarray]:
    """DP tables over the sorted values: ``cost[k, j]`` = least SSE of the first j+1 values in k+1 groups,
    ``arg[k, j]`` = start index of the last group."""
    x = np.sort(np.asarray(x, dtype=np.float64))
    n = x.size
    s1 = np.concatenate([[0.0], np.cumsum(x)])
    s2 = np.concatenate([[0.0], np.cumsum(x * x)])
    i, j = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    with np.errstate(divide="ignore", invalid="ignore"):
        m = j - i + 1
        s = s1[j + 1] - s1[i]
        sse = np.where(i <= j, np.maximum(s2[j + 1] - s2[i] - s * s / m, 0.0), np.inf)  # sse[i, j]: values i..j
    k_max = min(k_max, n)
    cost = np.full((k_max, n), np.inf)
    arg = np.zeros((k_max, n), dtype=np.int64)
    cost[0] = sse[0]
    for k in range(1, k_max):
        cand = cost[k - 1, :-1][:, None] + sse[1:, :]  # cand[i-1, j]: last group starts at i >= 1
        arg[k] = np.argmin(cand, axis=0) + 1
        cost[k] = cand[arg[k] - 1, np.arange(n)]
    return cost, arg


def kmeans_1d(x: np.ndarray, k: int) -> list[list[int]]:
    """Partition indices of ``x`` into ``min(k, n)`` groups of contiguous sorted values with least SSE.

    Groups are returned fastest first (smallest values first); members of a group are sorted by index.
    """
    x = np.asarray(x, dtype=np.float64)
    n = x.size
    if n == 0:
        return []
    if k < 1:
        raise ValueError(f"need k >= 1 communities, got {k}")
    k = min(k, n)
    order = np.argsort(x, kind="stable")
    _, arg = kmeans_costs(x, k)
    bounds = []
    j = n - 1
    for kk in range(k - 1, -1, -1):
        i = int(arg[kk, j]) if kk > 0 else 0
        bounds.append((i, j))
        j = i - 1
    bounds.reverse()
    return [sorted(int(w) for w in order[i:j + 1]) for i, j in bounds]


def dispersion_profile(x: np.ndarray, k_max: int) -> np.ndarray:
    """Root-mean-square within-community spread of ``x`` for k = 1..k_max (padded with zeros past n)."""
    x = np.asarray(x, dtype=np.float64)
    cost, _ = kmeans_costs(x, k_max)
    out = np.zeros(k_max)
    out[: cost.shape[0]] = np.sqrt(cost[:, -1] / x.size)
    return out


def random_groups(n: int, k: int, rng: np.random.Generator) -> list[list[int]]:
    """A random partition of ``range(n)`` into ``min(k, n)`` groups of near-equal size."""
    if k < 1:
        raise ValueError(f"need k >= 1 communities, got {k}")
    perm = rng.permutation(n)
    return [sorted(int(w) for w in g) for g in np.array_split(perm, min(k, n))]
