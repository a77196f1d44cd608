"""What the network sees of a model: layers, their compute time, colayers and pieces.

* :func:`profile_layers` reads a model's layers (top-level parameter groups) and their forward FLOPs per sample
  from the jaxpr of ``apply`` (every ``dot_general`` / ``conv_general_dilated`` whose weight operand is a
  parameter: ``2 * output elements * contracted size``), in forward order.
* :class:`ComputeModel` turns FLOPs into time on a hardware profile (documented model):
  ``t_fwd(layer) = flops * batch / throughput + kernel_overhead``, ``t_bwd = backward_factor * flops * batch /
  throughput + 2 * kernel_overhead`` (input and weight gradients), plus a fixed per-iteration overhead (data
  loading, optimizer step, framework) at the start of every iteration. Its ``sketch_bytes_per_s`` is the worker's
  8-bit sketch arithmetic rate (fp32 bytes per second of a quantise + dequantise round trip; 0 = free), which the
  discrete-event protocols charge on a per-worker FIFO of its own, apart from the compute above
  (:meth:`mlsys_repro.papers.canary.protocols._Sim.sketch_pass`).
* :class:`Layout` is the exchange layout: layers in *backward* order are grouped into **colayers** of roughly
  ``colayer_bytes`` each (a layer larger than the target is a colayer on its own); each colayer's gradient is cut
  into **pieces** of ``piece_elems`` elements (the last piece of a colayer is shorter when the size does not
  divide). A colayer is ready to send when the backward pass of its last layer ends.

**Timing from a realistic model** (:func:`timing_layout`, [ours]): the numerics train a small proxy, but the
discrete-event model may see a realistic model (:mod:`mlsys_repro.common.timing`, e.g. ResNet-50): its layers, FLOPs and
gradient bytes. The proxy's pieces are mapped onto the realistic gradient by *fractional position* (proxy piece
``[a, b)`` of ``D`` elements becomes ``[a R, b R)`` with ``R = D_real / D``, rounded down), so the schedule keeps
one entry per proxy piece while each message carries the realistic bytes, and a piece is ready when the backward
pass of the realistic layer holding its first element ends.

Pieces are ranges of the tree-order flat vector of ``jax.flatten_util.ravel_pytree`` (no copy or permutation
is needed to cut or reassemble them); a colayer whose layers are not adjacent in that vector is cut run by run,
so no piece straddles two runs. Pieces are numbered colayer by colayer in backward order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.common.quant.pieces import check_piece_size

_WEIGHT_OPS = {"dot_general", "conv_general_dilated"}


@dataclass(frozen=True)
class Layer:
    name: str
    size: int  # parameters (elements)
    offset: int  # start in the tree-order flat vector
    fwd_flops: float  # forward FLOPs per sample


def profile_layers(apply, params, in_shape: tuple[int, ...]) -> list[Layer]:
    """Layers of ``params`` (grouped by top-level key) with forward FLOPs per sample, in forward order."""
    leaves = jax.tree.leaves_with_path(params)
    if not leaves:
        raise ValueError("model has no parameters")
    names, sizes, offsets, off = [], [], [], 0
    for path, leaf in leaves:
        names.append(str(getattr(path[0], "key", getattr(path[0], "name", path[0]))))
        sizes.append(int(np.prod(leaf.shape)))
        offsets.append(off)
        off += sizes[-1]
    batch = 2
    closed = jax.make_jaxpr(apply)(params, jnp.zeros((batch, *in_shape), jnp.float32))
    invar_leaf = {id(v): i for i, v in enumerate(closed.jaxpr.invars[: len(leaves)])}
    flops: dict[str, float] = {}
    first_use: dict[str, int] = {}
    for k, eqn in enumerate(closed.jaxpr.eqns):
        idx = [invar_leaf[id(v)] for v in eqn.invars if id(v) in invar_leaf]
        for i in idx:
            first_use.setdefault(names[i], k)
        if eqn.primitive.name not in _WEIGHT_OPS or not idx:
            continue
        w = leaves[idx[0]][1]
        out = int(np.prod(eqn.outvars[0].aval.shape))
        if eqn.primitive.name == "conv_general_dilated":
            out_ch = eqn.outvars[0].aval.shape[-1]
            contracted = int(np.prod(w.shape)) // int(out_ch)
        else:
            (lc, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            contracted = int(np.prod([lhs[d] for d in lc]))
        flops[names[idx[0]]] = flops.get(names[idx[0]], 0.0) + 2.0 * out * contracted / batch
    layers: dict[str, list[int]] = {}
    for i, nm in enumerate(names):
        layers.setdefault(nm, []).append(i)
    out_layers = []
    for nm, ids in layers.items():
        if any(ids[j + 1] != ids[j] + 1 for j in range(len(ids) - 1)):
            raise ValueError(f"parameters of layer {nm!r} are not contiguous in the flat vector")
        out_layers.append(Layer(nm, sum(sizes[i] for i in ids), offsets[ids[0]], flops.get(nm, 0.0)))
    return sorted(out_layers, key=lambda l: first_use.get(l.name, math.inf))


@dataclass(frozen=True)
class ComputeModel:
    """Per-layer compute time on one worker (see the module docstring); all times in seconds."""

    throughput_flops: float  # effective FLOP/s of one worker
    kernel_overhead_s: float = 0.0
    iteration_overhead_s: float = 0.0
    backward_factor: float = 2.0
    # [ours] fp32 bytes per second of one 8-bit sketch round trip (quantise, then dequantise) on this worker; each
    # pass (an encode, or a decode and add) costs half of it; 0 = sketch arithmetic takes no simulated time
    sketch_bytes_per_s: float = 0.0

    def __post_init__(self) -> None:
        if not self.throughput_flops > 0:
            raise ValueError("throughput must be > 0 FLOP/s")
        if min(self.kernel_overhead_s, self.iteration_overhead_s) < 0 or self.backward_factor <= 0:
            raise ValueError("overheads must be >= 0 and backward_factor > 0")
        if not (math.isfinite(self.sketch_bytes_per_s) and self.sketch_bytes_per_s >= 0):
            raise ValueError(f"sketch_bytes_per_s must be finite and >= 0 (0 = free), got {self.sketch_bytes_per_s}")

    def fwd(self, layer: Layer, batch: int) -> float:
        return layer.fwd_flops * batch / self.throughput_flops + self.kernel_overhead_s

    def bwd(self, layer: Layer, batch: int) -> float:
        return self.backward_factor * layer.fwd_flops * batch / self.throughput_flops + 2 * self.kernel_overhead_s


@dataclass(frozen=True)
class Layout:
    """Colayers and pieces over the flat parameter vector (see the module docstring)."""

    layers: tuple[Layer, ...]  # forward order
    colayers: tuple[tuple[int, ...], ...]  # layer indices, backward order within and across colayers
    colayer_ranges: tuple[tuple[tuple[int, int], ...], ...]  # [start, end) runs of each colayer
    piece_elems: int
    piece_start: np.ndarray = field(repr=False)  # [Q]
    piece_len: np.ndarray = field(repr=False)  # [Q]
    piece_colayer: np.ndarray = field(repr=False)  # [Q]

    @property
    def size(self) -> int:
        return int(sum(l.size for l in self.layers))

    @property
    def num_pieces(self) -> int:
        return int(self.piece_len.size)

    @property
    def num_colayers(self) -> int:
        return len(self.colayers)

    def colayer_size(self, c: int) -> int:
        return int(sum(e - s for s, e in self.colayer_ranges[c]))

    def gather_index(self) -> np.ndarray:
        """``[Q, piece_elems]`` flat index of every piece slot; padding slots point at ``size``."""
        e = np.arange(self.piece_elems)[None, :]
        idx = self.piece_start[:, None] + e
        return np.where(e < self.piece_len[:, None], idx, self.size)

    def flat_position(self) -> np.ndarray:
        """``[size]``: position of each flat-vector element in the flattened ``[Q, piece_elems]`` array."""
        pos = np.full(self.size, -1, dtype=np.int64)
        for q, (st, ln) in enumerate(zip(self.piece_start, self.piece_len, strict=True)):
            pos[st: st + ln] = q * self.piece_elems + np.arange(ln)
        return pos

    def colayer_ready(self, cm: ComputeModel, batch: int, pipeline: bool = True) -> tuple[np.ndarray, float]:
        """``(ready offset of each colayer from the iteration start, iteration compute time)``.

        Without ``pipeline`` every colayer is ready only when the whole backward pass has finished.
        """
        t = cm.iteration_overhead_s + sum(cm.fwd(l, batch) for l in self.layers)
        ready = np.zeros(self.num_colayers)
        for c, ids in enumerate(self.colayers):
            for i in ids:
                t += cm.bwd(self.layers[i], batch)
            ready[c] = t
        if not pipeline:
            ready[:] = t
        return ready, t


def make_layout(layers: list[Layer], colayer_bytes: int, piece_elems: int, bytes_per_elem: int = 4) -> Layout:
    """Group layers (given in forward order) into colayers in backward order and cut them into pieces."""
    piece_elems = check_piece_size(piece_elems)
    if colayer_bytes <= 0:
        raise ValueError(f"colayer_bytes must be > 0, got {colayer_bytes}")
    if not layers:
        raise ValueError("no layers")
    spans = sorted((l.offset, l.offset + l.size) for l in layers)
    if spans[0][0] != 0 or any(a[1] != b[0] for a, b in zip(spans, spans[1:], strict=False)):
        raise ValueError("layers must tile the flat parameter vector without gaps or overlaps")
    colayers: list[tuple[int, ...]] = []
    cur: list[int] = []
    acc = 0
    for i in reversed(range(len(layers))):
        cur.append(i)
        acc += layers[i].size * bytes_per_elem
        if acc >= colayer_bytes:
            colayers.append(tuple(cur))
            cur, acc = [], 0
    if cur:
        colayers.append(tuple(cur))
    ranges, pstart, plen, pcol = [], [], [], []
    for c, ids in enumerate(colayers):
        runs: list[list[int]] = []
        for a, b in sorted((layers[i].offset, layers[i].offset + layers[i].size) for i in ids):
            if runs and runs[-1][1] == a:
                runs[-1][1] = b
            else:
                runs.append([a, b])
        ranges.append(tuple((a, b) for a, b in runs))
        for a, b in runs:
            for s in range(a, b, piece_elems):
                pstart.append(s)
                plen.append(min(piece_elems, b - s))
                pcol.append(c)
    return Layout(tuple(layers), tuple(colayers), tuple(ranges), piece_elems, np.asarray(pstart),
                  np.asarray(plen), np.asarray(pcol))


def realistic_layers(cost) -> list[Layer]:
    """A :class:`mlsys_repro.common.timing.ModelCost`'s layers with parameters, as :class:`Layer` (forward order,
    tiling)."""
    out, off = [], 0
    for l in cost.layers:
        if l.params:
            out.append(Layer(l.name, int(l.params), off, float(l.flops)))
            off += int(l.params)
    if not out:
        raise ValueError(f"model {cost.name!r} has no parameters")
    return out


def timing_layout(proxy: Layout, cost) -> Layout:
    """The proxy's pieces on a realistic model's gradient (see the module docstring).

    Returns a :class:`Layout` over ``cost``'s layers (a :class:`mlsys_repro.common.timing.ModelCost`) with the proxy's
    piece count and numbering: piece ``q`` covers ``[start_q R, end_q R)`` (floor) of the realistic flat vector. Its
    colayers are runs of consecutive realistic layers in backward order, each closed by a layer that holds the first
    element of some piece; piece ``q`` belongs to the colayer of the layer holding its first element (its other
    elements lie in later layers, whose backward pass ends earlier). ``piece_elems`` stays the proxy's: it is the
    quantisation granularity (one ``(lo, scale)`` per ``piece_elems`` elements of a message); the timing layout's
    pieces are messages of any length and it has no gather index.
    """
    layers = realistic_layers(cost)
    d, d_real = proxy.size, int(sum(l.size for l in layers))
    if d_real < d:
        raise ValueError(f"the realistic model ({d_real} parameters) is smaller than the proxy ({d})")
    start = np.asarray(proxy.piece_start, dtype=np.int64)
    end = start + np.asarray(proxy.piece_len, dtype=np.int64)
    r_start, r_end = start * d_real // d, end * d_real // d
    ends = np.asarray([l.offset + l.size for l in layers])
    holder = np.searchsorted(ends, r_start, side="right")  # layer holding each piece's first element
    closing = set(holder.tolist())
    colayers, cur, col_of_layer = [], [], {}
    for i in reversed(range(len(layers))):
        cur.append(i)
        if i in closing:
            col_of_layer[i] = len(colayers)
            colayers.append(tuple(cur))
            cur = []
    if cur:  # cannot happen: the piece starting at 0 closes the last group
        raise AssertionError("layer 0 must hold a piece start")
    ranges = tuple(((layers[ids[-1]].offset, layers[ids[0]].offset + layers[ids[0]].size),) for ids in colayers)
    pcol = np.asarray([col_of_layer[int(h)] for h in holder])
    return Layout(tuple(layers), tuple(colayers), ranges, proxy.piece_elems, r_start, r_end - r_start, pcol)


__all__ = ["ComputeModel", "Layer", "Layout", "make_layout", "profile_layers", "realistic_layers", "timing_layout"]
