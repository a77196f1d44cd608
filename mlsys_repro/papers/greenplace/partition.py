"""Model partitions: candidate front sets, segment statistics, and the two partitioning baselines' solvers.

A partition is the set S of layers that run on the *front* node (closed under predecessors: no data flows back);
the rest runs on the *back* node. Candidates of a model are the prefixes at its partition points (``block_end``),
from S = {} (all remote) to S = all layers, plus any extra closed sets the DADS min-cut produces on DAG models.

* Neurosurgeon (Kang et al., ASPLOS 2017): over the prefix cuts i of a chain, pick
  argmin_i  sum_{j<=i} t_edge(j) + bytes_out(i)/bw + sum_{j>i} t_cloud(j)   (per-frame latency).
* DADS (Hu et al., INFOCOM 2019), light-load mode DSL: minimum s-t cut of a flow graph with source e (edge) and
  sink c (cloud): e->v capacity t_cloud(v), v->c capacity t_edge(v), u->u' capacity t_tx(u) and u'->v infinite
  for each DAG edge u->v (the auxiliary node u' makes a tensor with several consumers pay its transfer once), and
  infinite v->u so the edge side is closed under predecessors. The raw input starts at the edge and the result
  returns there, so consumers of the input add t_in to e->v and the output layer adds t_out to e->v.
  Heavy-load mode DSH minimises the slowest stage max(edge, transfer, cloud); we solve it exactly over the
  candidate set (DADS approximates it because it searches all cuts of general DAGs).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

from mlsys_repro.papers.greenplace.models import BYTES_PER_VALUE, LayerProfile

INF = 1e18


def closed(prof: LayerProfile, s: np.ndarray) -> bool:
    """True when every producer of a layer in ``s`` is in ``s``."""
    return all(all(i < 0 or s[i] for i in ins) for j, ins in enumerate(prof.inputs) if s[j])


def prefix_sets(prof: LayerProfile) -> list[np.ndarray]:
    """Empty set, then the prefix ending at every partition point (the last layer always is one)."""
    out = [np.zeros(prof.num_layers, bool)]
    for j in range(prof.num_layers):
        if prof.block_end[j] or j == prof.num_layers - 1:
            s = np.zeros(prof.num_layers, bool)
            s[: j + 1] = True
            out.append(s)
    return out


@dataclass(frozen=True)
class SegmentStats:
    front_lat: np.ndarray  # [D] seconds per frame on each device class
    back_lat: np.ndarray  # [D]
    cross_bytes: float  # bytes per frame from the front node to the back node
    front_mem: float  # bytes the front node must hold (weights + largest activation pair)
    back_mem: float
    front_params: float
    back_params: float
    front_flops: float
    back_flops: float


def _mem(prof: LayerProfile, idx: np.ndarray) -> float:
    if idx.size == 0:
        return 0.0
    acts = [np.prod(prof.in_shapes[j]) * BYTES_PER_VALUE + prof.out_bytes[j] for j in idx]
    return float(prof.param_bytes[idx].sum() + max(acts))


def segment_stats(prof: LayerProfile, lat: np.ndarray, s: np.ndarray) -> SegmentStats:
    """Statistics of the partition ``s`` (bool [L]) given per-layer latencies ``lat`` [L, D] (seconds)."""
    if not closed(prof, s):
        raise ValueError(f"{prof.name}: front set is not closed under predecessors")
    cons = prof.consumers()
    cross = 0.0
    if s.any() and not s.all():
        for i in np.flatnonzero(s):
            if any(not s[j] for j in cons[i]):
                cross += prof.out_bytes[i]
        if any(-1 in prof.inputs[j] for j in np.flatnonzero(~s)):
            cross += float(np.prod(prof.in_shapes[0])) * BYTES_PER_VALUE
    f, b = np.flatnonzero(s), np.flatnonzero(~s)
    return SegmentStats(
        front_lat=lat[f].sum(0), back_lat=lat[b].sum(0), cross_bytes=cross,
        front_mem=_mem(prof, f), back_mem=_mem(prof, b),
        front_params=float(prof.param_bytes[f].sum()), back_params=float(prof.param_bytes[b].sum()),
        front_flops=float(prof.flops[f].sum()), back_flops=float(prof.flops[b].sum()),
    )


# ---------------------------------------------------------------------------------------------- solvers


def neurosurgeon_latency(t_edge: np.ndarray, t_cloud: np.ndarray, out_bytes: np.ndarray, input_bytes: float,
                         output_bytes: float, bw: float) -> np.ndarray:
    """Per-frame latency of every prefix cut i = 0..L of a chain (i layers on the edge), Neurosurgeon's T(i)."""
    n = t_edge.size
    ce = np.concatenate([[0.0], np.cumsum(t_edge)])
    cc = np.concatenate([[0.0], np.cumsum(t_cloud[::-1])])[::-1]
    sent = np.concatenate([[input_bytes], out_bytes[:-1], [0.0]])  # what crosses after i layers
    back = np.concatenate([np.full(n, output_bytes), [0.0]])  # result returns from the cloud unless i = L
    return ce + cc + (sent + back) / bw


def max_flow_min_cut(cap: np.ndarray, s: int, t: int) -> tuple[float, np.ndarray]:
    """Edmonds-Karp on a dense capacity matrix; returns (flow value, bool mask of the source side of a min cut)."""
    n = cap.shape[0]
    res = cap.astype(np.float64).copy()
    flow = 0.0
    adj = [np.flatnonzero((cap[i] > 0) | (cap[:, i] > 0)) for i in range(n)]
    while True:
        parent = np.full(n, -1)
        parent[s] = s
        q = deque([s])
        while q and parent[t] < 0:
            u = q.popleft()
            for v in adj[u]:
                if parent[v] < 0 and res[u, v] > 1e-15:
                    parent[v] = u
                    q.append(v)
        if parent[t] < 0:
            break
        v, b = t, INF
        while v != s:
            b = min(b, res[parent[v], v])
            v = parent[v]
        v = t
        while v != s:
            u = parent[v]
            res[u, v] -= b
            res[v, u] += b
            v = u
        flow += b
        if flow >= INF / 2:
            raise ValueError("unbounded cut: no finite partition separates source and sink")
    side = parent >= 0
    return flow, side


def dads_min_cut(prof: LayerProfile, t_edge: np.ndarray, t_cloud: np.ndarray, bw: float, input_bytes: float,
                 output_bytes: float) -> tuple[np.ndarray, float]:
    """DADS DSL: the latency-optimal edge set of a DAG (bool [L]) and its per-frame latency (seconds)."""
    n = prof.num_layers
    e, c = 0, 1
    lay = lambda j: 2 + j  # noqa: E731
    aux = lambda j: 2 + n + j  # noqa: E731
    cap = np.zeros((2 + 2 * n, 2 + 2 * n))
    cons = prof.consumers()
    for j in range(n):
        cap[e, lay(j)] += t_cloud[j]
        cap[lay(j), c] += t_edge[j]
        if -1 in prof.inputs[j]:
            cap[e, lay(j)] += input_bytes / bw
        if cons[j]:
            cap[lay(j), aux(j)] += prof.out_bytes[j] / bw
            for k in cons[j]:
                cap[aux(j), lay(k)] = INF
                cap[lay(k), lay(j)] = INF
    cap[e, lay(n - 1)] += output_bytes / bw
    value, side = max_flow_min_cut(cap, e, c)
    s = side[2: 2 + n].copy()
    return s, value
