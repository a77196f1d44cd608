"""The evolution graph: how usage patterns (shapelets) follow each other, projected onto the workloads.

Input: ``sdist[g, n, k]``, the distance of workload n's grid segment g to shapelet k (:mod:`.shapelets`).
For every transition ``g-1 -> g`` (the authors' per-segment construction, dense for N <= 500):

1. **Transition matrix** ``tmat [K, K]``: a workload links shapelet a (at g-1) to shapelet b (at g) when both
   of its distances are under the ``link_percentile`` threshold (80th percentile of the *training* distances);
   the link weighs ``(1 - minmax(d_src)[a]) (1 - minmax(d_dst)[b])`` (min-max over the K shapelets of that
   workload), and links are summed over workloads. Entries ``<= min_weight`` are zeroed, rows normalised to
   sum to one, and an empty row gets a self-loop.
2. **Projection** to a workload x workload adjacency ``adj [N, N]`` (interference among workloads): every
   workload is mapped to its ``top_shapelets`` nearest shapelets and every shapelet to its ``top_workloads``
   nearest workloads; then

   * two workloads that share a shapelet k at g-1 get the largest such ``max_b tmat[k, b]`` (the maximum
     transition weight of a shared shapelet), and
   * ``adj[nodes_{g-1}(a), nodes_g(b)] += tmat[a, b]`` (dense: ``Q_src^T tmat Q_dst``).

   The diagonal is zeroed (the diffusion convolution has its own identity term).

``adj[0]`` (no predecessor) is all zeros. Everything is a jitted function of arrays; ``lax.map`` runs over the
transitions so memory stays at one ``[N, N, K]`` block.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np


@dataclass(frozen=True)
class EvolutionConfig:
    link_percentile: float = 80.0
    min_weight: float = 0.01
    top_shapelets: int = 10
    top_workloads: int = 10

    def __post_init__(self) -> None:
        if not 0 < self.link_percentile <= 100:
            raise ValueError(f"evolution.link_percentile must be in (0, 100], got {self.link_percentile}")
        if self.top_shapelets < 1 or self.top_workloads < 1 or self.min_weight < 0:
            raise ValueError("evolution: top_shapelets/top_workloads must be >= 1 and min_weight >= 0")


def link_threshold(sdist_train: np.ndarray, percentile: float) -> float:
    return float(np.percentile(np.asarray(sdist_train, dtype=np.float64), percentile))


def _minmax(d: jax.Array) -> jax.Array:
    lo, hi = d.min(-1, keepdims=True), d.max(-1, keepdims=True)
    return (d - lo) / jnp.maximum(hi - lo, 1e-9)


def transition_matrix(d_src: jax.Array, d_dst: jax.Array, theta: float, min_weight: float) -> jax.Array:
    """``tmat [K, K]`` for one transition from the ``[N, K]`` distances at the source and destination
    segments."""
    a = (1.0 - _minmax(d_src)) * (d_src < theta)
    b = (1.0 - _minmax(d_dst)) * (d_dst < theta)
    t = a.T @ b
    t = jnp.where(t > min_weight, t, 0.0)
    row = t.sum(1, keepdims=True)
    k = t.shape[0]
    return jnp.where(row > 0, t / jnp.where(row > 0, row, 1.0), jnp.eye(k, dtype=t.dtype))


def _top_mask(d: jax.Array, m: int, axis: int) -> jax.Array:
    """1 where an entry is among the ``m`` smallest along ``axis`` (ties by position)."""
    dm = jnp.moveaxis(d, axis, -1)
    m = min(m, dm.shape[-1])
    _, idx = jax.lax.top_k(-dm, m)
    mask = jax.nn.one_hot(idx, dm.shape[-1], dtype=d.dtype).sum(-2)
    return jnp.moveaxis(mask, -1, axis)


def project(
    d_src: jax.Array, d_dst: jax.Array, tmat: jax.Array, top_shapelets: int, top_workloads: int
) -> jax.Array:
    """Workload adjacency ``[N, N]`` of one transition (see the module docstring)."""
    p = _top_mask(d_src, top_shapelets, axis=1)  # [N, K] workload -> its nearest shapelets
    q_src = _top_mask(d_src, top_workloads, axis=0)  # [N, K] shapelet -> its nearest workloads (at g-1)
    q_dst = _top_mask(d_dst, top_workloads, axis=0)  # (at g)
    wk = tmat.max(1)  # [K] maximum transition weight out of each shapelet
    shared = jnp.max(p[:, None, :] * p[None, :, :] * wk, axis=-1)
    trans = q_src @ tmat @ q_dst.T
    adj = shared + trans
    return adj * (1.0 - jnp.eye(adj.shape[0], dtype=adj.dtype))


def evolution_graph(sdist: np.ndarray, theta: float, cfg: EvolutionConfig) -> np.ndarray:
    """``adj [G, N, N]`` for every grid transition ``g-1 -> g`` (``adj[0] = 0``)."""
    sd = jnp.asarray(sdist, jnp.float32)
    if sd.ndim != 3:
        raise ValueError(f"sdist must be [G, N, K], got {sd.shape}")
    if sd.shape[0] < 2:
        return np.zeros((sd.shape[0], sd.shape[1], sd.shape[1]), np.float32)
    out = _graph(sd, float(theta), float(cfg.min_weight), int(cfg.top_shapelets), int(cfg.top_workloads))
    return np.concatenate([np.zeros((1, *out.shape[1:]), np.float32), np.asarray(out)])


@jax.jit(static_argnames=("min_weight", "top_shapelets", "top_workloads"))
def _graph(sd, theta, min_weight, top_shapelets, top_workloads):
    def one(pair):
        src, dst = pair
        t = transition_matrix(src, dst, theta, min_weight)
        return project(src, dst, t, top_shapelets, top_workloads)

    return jax.lax.map(one, (sd[:-1], sd[1:]))
