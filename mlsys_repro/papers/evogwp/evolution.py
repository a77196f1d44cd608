"""The evolution graph: how usage patterns (shapelets) follow each other, projected onto the workloads.

Input: ``sdist[g, n, k]``, the distance of workload n's grid segment g to shapelet k (:mod:`.shapelets`).
For every transition ``g-1 -> g`` (the authors' per-segment construction, dense for N <= 500):

1. **Transition matrix** ``tmat [K, K]`` [authors' code]: a workload links shapelet a (at g-1) to shapelet b
   (at g) when both of its distances are under the ``link_percentile`` threshold (80th percentile of the
   *training* distances); the link weighs ``(1 - minmax(d_src)[a]) (1 - minmax(d_dst)[b])`` (min-max over the K
   shapelets of that workload), and links are summed over workloads. Entries ``<= min_weight`` are zeroed,
   [ours] only each row's ``top_transitions`` largest entries are kept (a pattern's few typical successors),
   rows are normalised to sum to one, and an empty row gets a self-loop.
2. **Projection** to a workload x workload adjacency ``adj [N, N]`` [ours, replacing the authors' projection]:
   workload i's *pattern* at g-1 is its ``top_shapelets`` nearest shapelets, weighted ``1 - minmax(d)``
   (``P_src [N, K]``, likewise ``P_dst`` at g), and

       adj[i, j] = sum_ab P_src[i, a] tmat[a, b] P_dst[j, b] = (P_src tmat P_dst^T)[i, j]:

   j's pattern now is where i's pattern typically goes next, so diffusing from j tells i what its evolution
   looks like. The diagonal is zeroed (the diffusion convolution has its own identity term) and each row keeps
   only its ``ceil(edge_fraction (N - 1))`` largest entries, so the density is at most ~``edge_fraction``.

   The authors' projection also linked every two workloads sharing *any* of their top-10 shapelets with that
   shapelet's largest transition weight; since every shapelet has a positive largest weight (rows are
   normalised, empty rows get a self-loop) and workloads share their nearest shapelets, that term made the graph
   ~complete (97-99.9 % of the possible edges on our traces, a near-uniform averaging). It is dropped.

``adj[0]`` (no predecessor) is all zeros. Everything is a jitted function of arrays; ``lax.map`` runs over the
transitions so memory stays at one ``[N, N]`` block. :func:`graph_stats` measures density, degree entropy and
how much the graph changes from one transition to the next; :func:`edge_persistence` the same change between
any sequence of graphs (e.g. the ones consecutive test windows diffuse over).

:func:`union_adjacency` [ours, the "static plus evolution graph" ablation] unites the static correlation graph
with each evolution graph: an edge of either is an edge of the union, once (each graph scaled to a largest
weight of 1, then the element-wise maximum), so the evolution graph adds edges to the static one instead of
replacing it.
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
    top_shapelets: int = 3  # a workload's pattern: its nearest shapelets
    top_transitions: int = 3  # a shapelet's successors kept in tmat
    edge_fraction: float = 0.1  # each workload keeps ceil(edge_fraction (N - 1)) out-edges

    def __post_init__(self) -> None:
        if not 0 < self.link_percentile <= 100:
            raise ValueError(f"evolution.link_percentile must be in (0, 100], got {self.link_percentile}")
        if self.top_shapelets < 1 or self.top_transitions < 1 or self.min_weight < 0:
            raise ValueError("evolution: top_shapelets/top_transitions must be >= 1 and min_weight >= 0")
        if not 0 < self.edge_fraction <= 1:
            raise ValueError(f"evolution.edge_fraction must be in (0, 1], got {self.edge_fraction}")

    def edges_per_node(self, n: int) -> int:
        return max(1, min(n - 1, int(np.ceil(self.edge_fraction * (n - 1) - 1e-9))))


def link_threshold(sdist_train: np.ndarray, percentile: float) -> float:
    return float(np.percentile(np.asarray(sdist_train, dtype=np.float64), percentile))


def _minmax(d: jax.Array) -> jax.Array:
    lo, hi = d.min(-1, keepdims=True), d.max(-1, keepdims=True)
    return (d - lo) / jnp.maximum(hi - lo, 1e-9)


def transition_matrix(
    d_src: jax.Array, d_dst: jax.Array, theta: float, min_weight: float, top_transitions: int | None = None
) -> jax.Array:
    """``tmat [K, K]`` for one transition from the ``[N, K]`` distances at the source and destination
    segments (``top_transitions``: keep only each row's largest entries; None keeps all)."""
    a = (1.0 - _minmax(d_src)) * (d_src < theta)
    b = (1.0 - _minmax(d_dst)) * (d_dst < theta)
    t = a.T @ b
    t = jnp.where(t > min_weight, t, 0.0)
    if top_transitions is not None and top_transitions < t.shape[1]:
        t = t * _top_mask(-t, top_transitions, axis=1)
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


def pattern_weights(d: jax.Array, top_shapelets: int) -> jax.Array:
    """``[N, K]``: each workload's ``top_shapelets`` nearest shapelets, weighted ``1 - minmax(d)`` (0 elsewhere)."""
    return _top_mask(d, top_shapelets, axis=1) * (1.0 - _minmax(d))


def sparsify_rows(adj: jax.Array, k: int) -> jax.Array:
    """Zero the diagonal, then keep each row's ``k`` largest positive entries."""
    n = adj.shape[0]
    adj = adj * (1.0 - jnp.eye(n, dtype=adj.dtype))
    keep = _top_mask(-adj, k, axis=1) * (adj > 0)
    return adj * keep


def project(d_src: jax.Array, d_dst: jax.Array, tmat: jax.Array, top_shapelets: int, edges_per_node: int) -> jax.Array:
    """Workload adjacency ``[N, N]`` of one transition (see the module docstring)."""
    p_src = pattern_weights(d_src, top_shapelets)
    p_dst = pattern_weights(d_dst, top_shapelets)
    return sparsify_rows(p_src @ tmat @ p_dst.T, edges_per_node)


def evolution_graph(sdist: np.ndarray, theta: float, cfg: EvolutionConfig) -> np.ndarray:
    """``adj [G, N, N]`` for every grid transition ``g-1 -> g`` (``adj[0] = 0``)."""
    sd = jnp.asarray(sdist, jnp.float32)
    if sd.ndim != 3:
        raise ValueError(f"sdist must be [G, N, K], got {sd.shape}")
    if sd.shape[0] < 2:
        return np.zeros((sd.shape[0], sd.shape[1], sd.shape[1]), np.float32)
    out = _graph(
        sd,
        float(theta),
        min_weight=float(cfg.min_weight),
        top_shapelets=int(cfg.top_shapelets),
        top_transitions=int(cfg.top_transitions),
        edges_per_node=cfg.edges_per_node(sd.shape[1]),
    )
    return np.concatenate([np.zeros((1, *out.shape[1:]), np.float32), np.asarray(out)])


@jax.jit(static_argnames=("min_weight", "top_shapelets", "top_transitions", "edges_per_node"))
def _graph(sd, theta, min_weight, top_shapelets, top_transitions, edges_per_node):
    def one(pair):
        src, dst = pair
        t = transition_matrix(src, dst, theta, min_weight, top_transitions)
        return project(src, dst, t, top_shapelets, edges_per_node)

    return jax.lax.map(one, (sd[:-1], sd[1:]))


def union_adjacency(static: jax.Array, evo: jax.Array) -> jax.Array:
    """The union of ``static [N, N]`` and ``evo [..., N, N]`` (broadcast over the leading axes of ``evo``): each
    graph is scaled so that its largest weight is 1 (per ``[N, N]`` slice; an empty slice stays empty), the union
    takes the element-wise maximum (an edge of both appears once, not summed) and the diagonal is zeroed."""
    def unit(a):
        m = jnp.max(a, axis=(-2, -1), keepdims=True)
        return jnp.where(m > 0, a / jnp.where(m > 0, m, 1.0), 0.0)

    s = unit(jnp.asarray(static, jnp.float32))
    e = unit(jnp.asarray(evo, jnp.float32))
    n = e.shape[-1]
    return jnp.maximum(s, e) * (1.0 - jnp.eye(n, dtype=jnp.float32))


def edge_persistence(adjs: np.ndarray) -> np.ndarray:
    """``[W - 1]`` for a sequence of graphs ``adjs [W, N, N]``: the fraction of graph ``w``'s (off-diagonal)
    edges that were edges of graph ``w - 1`` (1 = nothing changed, 0 = all new); NaN where graph ``w`` has none."""
    a = np.asarray(adjs)
    if a.ndim != 3 or a.shape[-1] != a.shape[-2]:
        raise ValueError(f"adjs must be [W, N, N], got {a.shape}")
    e = (a > 0) & ~np.eye(a.shape[-1], dtype=bool)
    if e.shape[0] < 2:
        return np.zeros(0)
    kept = (e[1:] & e[:-1]).sum((1, 2)).astype(np.float64)
    now = e[1:].sum((1, 2)).astype(np.float64)
    return np.where(now > 0, kept / np.maximum(now, 1.0), np.nan)


def graph_stats(adj: np.ndarray) -> dict[str, float]:
    """Means over the transitions of ``adj [G, N, N]`` (all-zero slices, e.g. ``adj[0]``, skipped):

    * ``graph_density``: fraction of the ``N (N - 1)`` off-diagonal entries that are edges (1 = complete);
    * ``graph_degree_entropy``: entropy of the weighted in-degree distribution / log N (1 = every workload
      equally central, low = a few hubs);
    * ``graph_row_entropy``: mean entropy of the random-walk rows / log (N - 1) (1 = each workload averages all
      others uniformly, the degenerate case);
    * ``graph_edge_persistence``: fraction of a transition's edges that were edges of the previous one (1 = a
      static graph).
    """
    a = np.asarray(adj, dtype=np.float64)
    n = a.shape[-1]
    off = ~np.eye(n, dtype=bool)
    live = np.flatnonzero(a.reshape(a.shape[0], -1).sum(1) > 0)
    if live.size == 0 or n < 2:
        return {"graph_density": 0.0, "graph_degree_entropy": 0.0, "graph_row_entropy": 0.0,
                "graph_edge_persistence": 0.0}
    a = a[live]
    e = (a > 0) & off
    dens = e.sum((1, 2)) / (n * (n - 1))
    deg = a.sum(1)  # in-degree [G, N]
    pd_ = deg / np.maximum(deg.sum(1, keepdims=True), 1e-12)
    h_deg = -(np.where(pd_ > 0, pd_ * np.log(np.where(pd_ > 0, pd_, 1.0)), 0.0)).sum(1) / np.log(n)
    rs = a.sum(2, keepdims=True)
    pr = a / np.where(rs > 0, rs, 1.0)
    h_row = -(np.where(pr > 0, pr * np.log(np.where(pr > 0, pr, 1.0)), 0.0)).sum(2)
    has = rs[..., 0] > 0
    h_row = (h_row * has).sum(1) / np.maximum(has.sum(1), 1) / np.log(n - 1) if n > 2 else np.zeros(len(a))
    if e.shape[0] > 1:
        both = (e[1:] & e[:-1]).sum((1, 2))
        persist = float(np.mean(both / np.maximum(e[1:].sum((1, 2)), 1)))
    else:
        persist = 1.0
    return {
        "graph_density": float(dens.mean()),
        "graph_degree_entropy": float(h_deg.mean()),
        "graph_row_entropy": float(np.mean(h_row)),
        "graph_edge_persistence": persist,
    }
