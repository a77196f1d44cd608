"""Discrete-event simulations of Canary and its baselines on :mod:`mlsys_repro.common.sim.netsim` (time and bytes only).

Gradient *values* never change what goes on the wire (sizes are fixed by the layout and the encoding), so each
protocol is simulated once per configuration and hands the training numerics (:mod:`mlsys_repro.papers.canary.train`)
a :class:`Schedule`: when every worker starts every iteration, the bytes it moved, and for the asynchronous
protocols which update becomes visible to which worker at which iteration.

Worker model (all protocols). Iteration ``t`` of worker ``w`` starts when the protocol's rule allows
(:meth:`_Sim.can_start`); it runs a fixed overhead, the forward pass, then the backward pass layer by layer;
colayer ``c`` is ready ``ready[c]`` seconds after the start (:meth:`Layout.colayer_ready`), times
``compute_scale[w]`` for heterogeneous workers ([ours]: e.g. one straggler 2x slower; default 1 for all).
Message sizes:
fp32 = 4 B/element; 8-bit sketch = 1 B/element + 8 B (lo, scale) per quantisation piece; every message also
carries ``header_bytes``.

Sketch arithmetic ([ours]; :meth:`_Sim.sketch_pass`). Every 8-bit exchange charges its quantise and dequantise work
at the worker's rate ``ComputeModel.sketch_bytes_per_s`` (fp32 bytes per second of a quantise + dequantise round
trip; each pass, an encode or a decode-and-add, costs half of it: ``2 * elements / rate`` seconds). Each worker's
sketch arithmetic is one FIFO of its own: passes run one at a time in the order they are asked for, apart from its
NICs and without delaying its backward pass. A pass is charged wherever the numerics
(:mod:`mlsys_repro.papers.canary.train`) quantise or use decoded values: the sender encodes before it sends, the
receiver decodes (and adds) before it merges or forwards a partial sum, and every worker decodes an aggregated piece
before it applies it; codes that are only relayed cost nothing. Rate 0 (the default) makes every pass free and the
schedules are exactly those without the model; fp32 policies never pay it.

Protocols (exact schedules; the README discusses what is the paper's and what is ours):

* ``canary``: per piece ``q`` of colayer ``c``, an owner ``q mod N`` and a first level ``q mod (k+1)``. As soon
  as a worker's colayer is ready, each of its pieces is reduced toward the owner along the BCube levels
  (``first, first+1, ...``): in each stage a holder whose digit differs from the owner's sends its partial sum
  to the group member with the owner's digit, which merges the ``n - 1`` partials it receives (decode, add,
  re-sketch). The owner then broadcasts the aggregated piece back down the same tree. No barrier: a worker
  starts iteration ``t`` once it has applied every piece of iteration ``t - 1 - s`` (bounded staleness ``s``).
  Sketch passes: the first sender of a partial quantises its own piece; a merging holder decodes each partial as it
  arrives and re-sketches the merged sum before it forwards it; the owner sketches the aggregate once for the
  broadcast; each worker (the owner included) decodes the aggregate to apply it, while relaying its codes at once.
  The :class:`~mlsys_repro.papers.canary.gei.GradientExchangeIndex` checks that every contribution is merged exactly
  once and that every worker applies every aggregated piece exactly once.
* ``ps``: TensorFlow-style BSP parameter server, shards co-located on all ``N`` servers (balanced contiguous
  shards), one NIC: each ready colayer is pushed shard by shard; a shard is updated when all ``N`` pushes of all
  its parts arrived, then every worker pulls it; a worker starts ``t + 1`` when it holds all shards.
  ``sketch=True`` is the BytePS-style variant (8-bit pushes and pulls): a worker encodes each push (the co-located
  shard too, as the numerics round-trip it, without the wire), the server decodes each push as it arrives, encodes
  the finished shard once, and every worker (the server too) decodes the pull before it counts as applied.
* ``ring``: Horovod-style ring all-reduce on one NIC, one colayer (fusion bucket) at a time in ready order;
  ``2 (N - 1)`` ring steps per bucket; ``sketch=True`` sends 8-bit chunks: in the reduce-scatter each hop encodes
  the partial sum it sends and the receiver decodes and adds it before its next send; the worker that completes a
  chunk encodes it once for the all-gather, whose codes are relayed as received; every worker decodes all ``N``
  finished chunks of a bucket to apply them.
* ``bml``: BML on BCube: after the backward pass the gradient is cut into ``k + 1`` parts, each reduce-scattered
  level by level (starting on a different level, so all NICs work in parallel) and all-gathered back. With
  ``overlap=True`` (``bml_overlap``, [ours]: BML with backward-pass pipelining) every colayer is such a bucket of its
  own, exchanged the same way as soon as its backward pass ends, in ready order (the NICs' FIFOs keep it); the same
  elements cross the same links, so only the per-message headers (and block rounding) add bytes.
* ``ako``: Ako on one NIC: after each backward pass a worker sends partition ``t mod p`` of its accumulated
  gradient to every peer; no barrier beyond a staleness bound ``s`` on received messages (TF.AKO's
  ``synch_max_diff``); ``p`` is chosen so ``(N - 1)`` partitions fit in one iteration's compute time at the NIC
  rate (the Ako rule: constant network load as ``N`` grows).
"""

from __future__ import annotations

import abc
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mlsys_repro.common.collectives.bcube import BCube
from mlsys_repro.common.quant.pieces import num_pieces
from mlsys_repro.common.quant.sketch import PIECE_META_BYTES
from mlsys_repro.common.sim.netsim import EventLoop, Network, Transfer
from mlsys_repro.papers.canary.compute_model import ComputeModel, Layout
from mlsys_repro.papers.canary.gei import GradientExchangeIndex

PROTOCOLS = ("canary", "ps", "ring", "bml", "ako")
# [ours] share of a sketch round trip's time that one pass takes: an encode, or a decode and add (the benchmark,
# mlsys_repro/papers/canary/bench.py, measures the round trip; splitting it evenly keeps a round trip at its rate)
SKETCH_PASS_SHARE = 0.5


@dataclass(frozen=True)
class NetSpec:
    """The simulated cluster network: BCube(n, k) with NICs of ``nic_bytes_per_s`` and ``latency_s`` per hop."""

    n: int
    k: int
    nic_bytes_per_s: float
    latency_s: float
    header_bytes: int = 16

    @property
    def num_servers(self) -> int:
        return self.n ** (self.k + 1)


@dataclass(frozen=True)
class ProtocolSpec:
    """One policy's exchange: protocol name and its knobs (unused knobs are ignored by other protocols)."""

    protocol: str
    sketch: bool = False
    staleness: int = 0
    multi_nic: bool = True  # canary: use all k+1 NICs (BCube); False = one NIC, single switch
    pipeline: bool = True  # send colayers as the backward pass produces them
    ako_partitions: int = 0  # 0 = Ako's bandwidth rule
    ako_max_partitions: int = 256
    overlap: bool = False  # bml: exchange every colayer as soon as it is ready (backward-pass pipelining)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        if self.staleness < 0 or self.ako_partitions < 0:
            raise ValueError("staleness and ako_partitions must be >= 0")
        if self.overlap and self.protocol != "bml":
            raise ValueError(f"overlap is BML's backward-pass pipelining (protocol 'bml'), not {self.protocol!r}'s")
        if self.overlap and not self.pipeline:
            raise ValueError("overlap sends colayers as the backward pass produces them: it needs pipeline=True")


@dataclass
class Schedule:
    """What a protocol simulation produced (times in simulated seconds)."""

    protocol: str
    num_workers: int
    iterations: int
    fwd_start: np.ndarray  # [N, T+1]: start of iteration t (t = T: when iteration T could start)
    bwd_end: np.ndarray  # [N, T]
    bytes_per_iteration: float  # mean bytes on the wire per iteration (all servers, headers included)
    transfers_per_iteration: float
    visible: np.ndarray | None = None  # canary [T, N, Q] / ako [T, N_send, N_recv]: first iteration seeing it
    ako_partitions: int = 0
    log: list[Transfer] | None = None
    gei: Any = None
    extra: dict[str, float] = field(default_factory=dict)

    def time_at(self, t: int, worker: int = 0) -> float:
        return float(self.fwd_start[worker, t])

    @property
    def makespan(self) -> float:
        return float(self.fwd_start[:, -1].max())

    def steady_iteration_time(self) -> float:
        """Mean seconds per iteration over the second half of the run (slowest worker)."""
        t_all = self.iterations
        h = t_all // 2
        return float((self.fwd_start[:, t_all].max() - self.fwd_start[:, h].max()) / max(t_all - h, 1))

    @property
    def bytes_total(self) -> float:
        return self.bytes_per_iteration * self.iterations


def sketch_bytes(n_elems: int, piece_elems: int) -> int:
    return int(n_elems) + PIECE_META_BYTES * num_pieces(int(n_elems), piece_elems)


def payload_bytes(n_elems: int, sketch: bool, piece_elems: int) -> int:
    return sketch_bytes(n_elems, piece_elems) if sketch else 4 * int(n_elems)


def split_sizes(n: int, parts: int) -> list[int]:
    """Sizes of ``parts`` near-equal consecutive parts of ``n`` elements (``numpy.array_split`` rule)."""
    base, extra = divmod(int(n), int(parts))
    return [base + 1] * extra + [base] * (parts - extra)


class _Sim(abc.ABC):
    """Worker compute loop shared by every protocol; subclasses implement the exchange."""

    def __init__(self, spec: ProtocolSpec, net_spec: NetSpec, layout: Layout, cm: ComputeModel, batch: int,
                 iterations: int, nics: int, keep_log: bool, compute_scale=None):
        self.spec, self.ns, self.layout = spec, net_spec, layout
        self.T = int(iterations)
        if self.T < 1:
            raise ValueError("iterations must be >= 1")
        self.N = net_spec.num_servers
        self.loop = EventLoop()
        self.nics = nics
        self.net = Network(self.loop, net_spec.nic_bytes_per_s, net_spec.latency_s, num_nodes=self.N,
                           num_nics=nics, keep_log=keep_log)
        self.ready, self.compute = layout.colayer_ready(cm, batch, spec.pipeline)
        self.scale = np.ones(self.N) if compute_scale is None else np.asarray(compute_scale, dtype=float)
        if self.scale.shape != (self.N,) or not np.all(self.scale > 0):
            raise ValueError(f"compute_scale must hold one positive factor per worker ({self.N})")
        self.fwd_start = np.full((self.N, self.T + 1), np.nan)
        self.bwd_end = np.full((self.N, self.T), np.nan)
        self.next = [0] * self.N
        self.busy = [False] * self.N
        self.hdr = net_spec.header_bytes
        self.iter_bytes = np.zeros(self.T)
        self.sketch_rate = float(cm.sketch_bytes_per_s)
        self.sketch_free = [0.0] * self.N  # when each worker's sketch arithmetic is next idle
        self.sketch_busy_s = 0.0  # all workers, all iterations

    # ------------------------------------------------------------------ worker loop
    def run(self) -> Schedule:
        for w in range(self.N):
            self.try_start(w)
        self.loop.run()
        stuck = [w for w in range(self.N) if self.next[w] <= self.T]
        if stuck:
            raise RuntimeError(f"{self.spec.protocol}: workers {stuck[:5]} stopped at iterations "
                               f"{[self.next[w] for w in stuck[:5]]} of {self.T} (deadlock)")
        return self.schedule()

    def try_start(self, w: int) -> None:
        if self.busy[w] or self.next[w] > self.T or not self.can_start(w, self.next[w]):
            return
        t = self.next[w]
        now = self.loop.now
        self.fwd_start[w, t] = now
        if t == self.T:
            self.next[w] = self.T + 1
            return
        self.busy[w] = True
        k = self.scale[w]
        for c, off in enumerate(self.ready):
            self.loop.at(now + off * k, self.on_ready, w, t, c)
        self.loop.at(now + self.compute * k, self._backward_done, w, t)

    def _backward_done(self, w: int, t: int) -> None:
        self.busy[w] = False
        self.bwd_end[w, t] = self.loop.now
        self.next[w] = t + 1
        self.on_backward_done(w, t)
        self.try_start(w)

    def sketch_pass(self, w: int, elems: int, fn, *args) -> None:
        """Run ``fn(*args)`` when worker ``w`` has made one sketch pass (an encode, or a decode and add) over
        ``elems`` fp32 elements: ``SKETCH_PASS_SHARE * 4 * elems / rate`` seconds on ``w``'s own FIFO, after the
        passes asked for before it. Free (``fn`` runs now) for fp32 policies and at rate 0."""
        if not (self.spec.sketch and self.sketch_rate):
            fn(*args)
            return
        now = self.loop.now
        start = self.sketch_free[w] if self.sketch_free[w] > now else now
        dur = SKETCH_PASS_SHARE * 4 * int(elems) / self.sketch_rate
        self.sketch_free[w] = start + dur
        self.sketch_busy_s += dur
        self.loop.at(start + dur, fn, *args)

    def send(self, t: int, src: int, dst: int, nbytes: int, nic: int, fn, *args) -> None:
        """Send a message of iteration ``t`` (``fn(transfer, *args)`` on arrival); adds the header."""
        self.iter_bytes[t] += nbytes + self.hdr
        self.net.send(src, dst, nbytes + self.hdr, src_nic=nic, on_arrival=fn, args=args)

    # ------------------------------------------------------------------ protocol hooks
    @abc.abstractmethod
    def can_start(self, w: int, t: int) -> bool:
        """May worker ``w`` start iteration ``t`` now (``t == T`` asks whether training could go on)?"""

    def on_ready(self, w: int, t: int, c: int) -> None:  # noqa: B027 - optional hook
        """Colayer ``c`` of worker ``w``'s iteration ``t`` is ready (default: nothing to do)."""

    def on_backward_done(self, w: int, t: int) -> None:  # noqa: B027 - optional hook
        """Worker ``w`` finished the backward pass of iteration ``t`` (default: nothing to do)."""

    def schedule(self, **kw) -> Schedule:
        if not np.isclose(self.iter_bytes.sum(), self.net.bytes_on_wire):
            raise RuntimeError("byte accounting mismatch between iterations and the network")
        return Schedule(self.spec.protocol, self.N, self.T, self.fwd_start, self.bwd_end,
                        float(self.iter_bytes.mean()), self.net.count / self.T,
                        log=self.net.log if self.net.keep_log else None,
                        extra={"sketch_s_per_iteration": self.sketch_busy_s / (self.N * self.T)}, **kw)


# ---------------------------------------------------------------------------------------------- Canary


class CanarySim(_Sim):
    def __init__(self, spec, net_spec, layout, cm, batch, iterations, keep_log=False, compute_scale=None):
        bc = BCube(net_spec.n, net_spec.k) if spec.multi_nic else BCube(net_spec.num_servers, 0)
        super().__init__(spec, net_spec, layout, cm, batch, iterations, bc.num_levels, keep_log, compute_scale)
        self.bc = bc
        self.L = bc.num_levels
        self.Q = layout.num_pieces
        tree = piece_tree(bc, self.Q)
        self.owner, self.level, self.send_stage, self.target = tree
        self.msg = [payload_bytes(int(n), spec.sketch, layout.piece_elems) for n in layout.piece_len]
        self.plen = [int(n) for n in layout.piece_len]
        self.pieces_of = [np.flatnonzero(layout.piece_colayer == c).tolist() for c in range(layout.num_colayers)]
        self.gei = GradientExchangeIndex(self.Q, self.N)
        self.arrival = np.full((self.T, self.Q, self.N), np.nan)
        self.state: dict[tuple[int, int], tuple[list[int], list[list[int]], list[bool]]] = {}

    def _st(self, t: int, q: int):
        st = self.state.get((t, q))
        if st is None:
            st = ([0] * self.N, [[0] * self.L for _ in range(self.N)], [False] * self.N)
            self.state[(t, q)] = st
        return st

    def can_start(self, w, t):
        return self.gei.iteration_done(t - 1 - self.spec.staleness, w)

    def on_ready(self, w, t, c):
        for q in self.pieces_of[c]:
            stage, got, ready = self._st(t, q)
            ready[w] = True
            self.gei.contribute(t, q, w, 1 << w)
            self._advance(t, q, w)

    def _advance(self, t, q, h):
        stage, got, ready = self._st(t, q)
        while True:
            j = stage[h]
            if j == self.L:  # h is the owner and holds every contribution: sketch the aggregate once
                stage[h] = self.L + 1
                self.gei.finish(t, q, h)
                self.sketch_pass(h, self.plen[q], self._aggregated, t, q, h)
                return
            if self.send_stage[q][h] == j:  # sketch the partial (own piece, or the merged sum), then send it
                sources = self.gei.take(t, q, h)
                stage[h] = self.L + 1
                tgt = self.target[q][h]
                self.sketch_pass(h, self.plen[q], self.send, t, h, tgt, self.msg[q], self.level[q][j],
                                 self._contribution, t, q, tgt, j, sources)
                return
            if got[h][j] < self.bc.n - 1:
                return
            stage[h] = j + 1

    def _aggregated(self, t, q, h):
        """The owner ``h`` sketched the aggregate: it decodes it to apply it, and broadcasts the codes."""
        self.sketch_pass(h, self.plen[q], self._deliver, t, q, h)
        self._broadcast(t, q, h, self.L)

    def _contribution(self, tr, t, q, h, j, sources):
        self.gei.received()
        self.gei.contribute(t, q, h, sources)
        self.sketch_pass(h, self.plen[q], self._merged, t, q, h, j)  # decode and add it

    def _merged(self, t, q, h, j):
        stage, got, ready = self._st(t, q)
        got[h][j] += 1
        if ready[h] and stage[h] == j:
            self._advance(t, q, h)

    def _broadcast(self, t, q, h, jr):
        """``h`` got the aggregate at reverse stage ``jr``: it serves its groups on levels ``jr - 1 .. 0``."""
        for j in range(jr - 1, -1, -1):
            lvl = self.level[q][j]
            for peer in self.bc.neighbours(h, lvl):
                self.gei.broadcast()
                self.send(t, h, peer, self.msg[q], lvl, self._bcast_arrive, t, q, peer, j)

    def _bcast_arrive(self, tr, t, q, h, jr):
        self.sketch_pass(h, self.plen[q], self._deliver, t, q, h)  # decode to apply; the codes are relayed now
        self._broadcast(t, q, h, jr)

    def _deliver(self, t, q, w):
        self.arrival[t, q, w] = self.loop.now
        self.gei.apply(t, q, w)
        if self.gei.iteration_done(t, w):
            for old in self.gei.retire_finished():
                for qq in range(self.Q):
                    self.state.pop((old, qq), None)
            self.try_start(w)

    def schedule(self):
        vis = np.empty((self.T, self.N, self.Q), dtype=np.int32)
        for w in range(self.N):
            vis[:, w, :] = np.searchsorted(self.fwd_start[w], self.arrival[:, :, w], side="left")
        return super().schedule(visible=vis, gei=self.gei)


def piece_tree(bc: BCube, num_pieces_: int):
    """Static reduce tree of every piece: ``(owner[Q], level[Q][j], send_stage[Q][N], target[Q][N])``.

    Piece ``q`` is owned by server ``q mod N`` and starts on level ``q mod (k + 1)``; in stage ``j`` (level
    ``level[q][j]``) a holder whose digit differs from the owner's sends to the member with the owner's digit.
    ``send_stage`` is the stage at which a server sends (``L`` for the owner, which never sends).
    """
    n_srv, L = bc.num_servers, bc.num_levels
    owner, level, send_stage, target = [], [], [], []
    for q in range(num_pieces_):
        o = q % n_srv
        lv = bc.level_order(q % L)
        ss, tg = [L] * n_srv, [-1] * n_srv
        for h in range(n_srv):
            for j, l in enumerate(lv):
                if bc.digit(h, l) != bc.digit(o, l):
                    ss[h], tg[h] = j, bc.with_digit(h, l, bc.digit(o, l))
                    break
        owner.append(o)
        level.append(lv)
        send_stage.append(ss)
        target.append(tg)
    return owner, level, send_stage, target


# ---------------------------------------------------------------------------------------------- PS


class ParamServerSim(_Sim):
    def __init__(self, spec, net_spec, layout, cm, batch, iterations, keep_log=False, compute_scale=None):
        super().__init__(spec, net_spec, layout, cm, batch, iterations, 1, keep_log, compute_scale)
        bounds = np.linspace(0, layout.size, self.N + 1).round().astype(int)
        self.shard_size = np.diff(bounds)
        self.segments = []  # per colayer: [(shard, push bytes, elements)]
        self.parts = np.zeros(self.N, dtype=int)
        for c in range(layout.num_colayers):
            segs = []
            for s in range(self.N):
                m = sum(max(0, min(e, bounds[s + 1]) - max(a, bounds[s])) for a, e in layout.colayer_ranges[c])
                if m > 0:
                    segs.append((s, payload_bytes(m, spec.sketch, layout.piece_elems), m))
                    self.parts[s] += 1
            self.segments.append(segs)
        self.pull_bytes = [payload_bytes(int(m), spec.sketch, layout.piece_elems) for m in self.shard_size]
        self.seg_count: dict[tuple[int, int, int], int] = {}
        self.parts_done: dict[tuple[int, int], int] = {}
        self.pulled: dict[tuple[int, int], int] = {}

    def can_start(self, w, t):
        return t == 0 or self.pulled.get((t - 1, w), 0) == self.N

    def on_ready(self, w, t, c):
        for s, nb, m in self.segments[c]:
            if s == w:  # the co-located shard: no wire, but encoded and decoded as the numerics do
                self.sketch_pass(w, m, self.sketch_pass, w, m, self._pushed, None, t, s, c)
            else:
                self.sketch_pass(w, m, self.send, t, w, s, nb, 0, self._push_arrived, t, s, c, m)

    def _push_arrived(self, tr, t, s, c, m):
        self.sketch_pass(s, m, self._pushed, tr, t, s, c)  # the server decodes and adds the push

    def _pushed(self, tr, t, s, c):
        k = (t, s, c)
        self.seg_count[k] = self.seg_count.get(k, 0) + 1
        if self.seg_count[k] < self.N:
            return
        del self.seg_count[k]
        self.parts_done[(t, s)] = self.parts_done.get((t, s), 0) + 1
        if self.parts_done[(t, s)] == self.parts[s]:
            del self.parts_done[(t, s)]
            self.sketch_pass(s, int(self.shard_size[s]), self._serve, t, s)  # sketch the updated shard once

    def _serve(self, t, s):
        """Shard ``s`` of iteration ``t`` is aggregated (and sketched): the server applies it, every worker pulls it."""
        self.sketch_pass(s, int(self.shard_size[s]), self._pulled, None, t, s, s)
        for i in range(1, self.N):
            r = (s + i) % self.N
            self.send(t, s, r, self.pull_bytes[s], 0, self._pull_arrived, t, s, r)

    def _pull_arrived(self, tr, t, s, r):
        self.sketch_pass(r, int(self.shard_size[s]), self._pulled, tr, t, s, r)  # decode to apply

    def _pulled(self, tr, t, s, r):
        self.pulled[(t, r)] = self.pulled.get((t, r), 0) + 1
        if self.pulled[(t, r)] == self.N:
            self.pulled.pop((t - 1, r), None)
            self.try_start(r)


# ---------------------------------------------------------------------------------------------- ring


class RingSim(_Sim):
    def __init__(self, spec, net_spec, layout, cm, batch, iterations, keep_log=False, compute_scale=None):
        super().__init__(spec, net_spec, layout, cm, batch, iterations, 1, keep_log, compute_scale)
        sizes = [layout.colayer_size(c) for c in range(layout.num_colayers)]
        self.chunk_elems = [split_sizes(size, self.N) for size in sizes]
        self.chunk_bytes = [[payload_bytes(m, spec.sketch, layout.piece_elems) for m in ch] for ch in self.chunk_elems]
        self.B = len(sizes)
        self.steps = 2 * (self.N - 1)
        self.turn = {}  # (t, w) -> bucket being reduced
        self.is_ready: set[tuple[int, int, int]] = set()
        self.sent: dict[tuple[int, int, int], int] = {}
        self.recv: dict[tuple[int, int, int], int] = {}
        self.done_iter: set[tuple[int, int]] = set()
        self.received_all: set[tuple[int, int]] = set()  # (t, w): every step of every bucket arrived
        self.decoding: dict[tuple[int, int], int] = {}  # (t, w): finished chunks still being decoded to apply

    def can_start(self, w, t):
        return t == 0 or (t - 1, w) in self.done_iter

    def on_ready(self, w, t, c):
        self.is_ready.add((t, w, c))
        self.turn.setdefault((t, w), 0)
        self._pump(t, c, w)

    def _pump(self, t, b, w):
        if self.turn.get((t, w)) != b or (t, w, b) not in self.is_ready:
            return
        k = (t, b, w)
        s = self.sent.get(k, -1) + 1
        while s < self.steps and (s == 0 or self.recv.get(k, -1) >= s - 1):
            chunk = (w - s) % self.N
            dst = (w + 1) % self.N
            args = (t, w, dst, self.chunk_bytes[b][chunk], 0, self._recv, t, b, dst, s)
            if s < self.N:  # a partial sum, or (s = N - 1) the chunk this worker completed: sketch it first
                self.sketch_pass(w, self.chunk_elems[b][chunk], self.send, *args)
                if s == self.N - 1:
                    self._decode_to_apply(t, b, w, chunk)
            else:  # all-gather: the codes go on as they came
                self.send(*args)
            self.sent[k] = s
            s += 1

    def _recv(self, tr, t, b, w, s):
        chunk = (w - 1 - s) % self.N
        if s < self.N - 1:  # a partial sum: decode and add it before it goes on
            self.sketch_pass(w, self.chunk_elems[b][chunk], self._got, t, b, w, s)
        else:  # a finished chunk: relayed as is, decoded to be applied
            self._decode_to_apply(t, b, w, chunk)
            self._got(t, b, w, s)

    def _decode_to_apply(self, t, b, w, chunk):
        if not self.spec.sketch:
            return
        self.decoding[(t, w)] = self.decoding.get((t, w), 0) + 1
        self.sketch_pass(w, self.chunk_elems[b][chunk], self._decoded, t, w)

    def _decoded(self, t, w):
        self.decoding[(t, w)] -= 1
        self._maybe_done(t, w)

    def _maybe_done(self, t, w):
        if (t, w) in self.received_all and not self.decoding.get((t, w), 0):
            self.received_all.discard((t, w))
            self.decoding.pop((t, w), None)
            self.done_iter.discard((t - 1, w))
            self.done_iter.add((t, w))
            self.try_start(w)

    def _got(self, t, b, w, s):
        k = (t, b, w)
        self.recv[k] = s
        if s == self.steps - 1:
            self.sent.pop(k, None)
            self.recv.pop(k, None)
            self.is_ready.discard((t, w, b))
            if b + 1 == self.B:
                self.turn.pop((t, w), None)
                self.received_all.add((t, w))
                self._maybe_done(t, w)
            else:
                self.turn[(t, w)] = b + 1
                self._pump(t, b + 1, w)
        else:
            self._pump(t, b, w)


# ---------------------------------------------------------------------------------------------- BML


class BMLSim(_Sim):
    def __init__(self, spec, net_spec, layout, cm, batch, iterations, keep_log=False, compute_scale=None):
        super().__init__(spec, net_spec, layout, cm, batch, iterations, net_spec.k + 1, keep_log, compute_scale)
        self.bc = BCube(net_spec.n, net_spec.k)
        self.L = self.bc.num_levels
        n = self.bc.n
        if spec.overlap:  # every colayer is a bucket, exchanged when its backward pass ends
            sizes = [layout.colayer_size(c) for c in range(layout.num_colayers)]
            self.bucket_of = list(range(layout.num_colayers))
        else:  # BML synchronises the whole gradient after the backward pass (the last colayer is ready)
            sizes = [layout.size]
            self.bucket_of = [-1] * (layout.num_colayers - 1) + [0]
        self.parts = [split_sizes(size, self.L) for size in sizes]  # per bucket: its k + 1 parts
        # block sizes (elements) sent to each peer in reduce stage i and broadcast stage i, per bucket and part
        self.red = [[[math.ceil(p / n ** (i + 1)) for i in range(self.L)] for p in parts] for parts in self.parts]
        self.bc_sz = [[[math.ceil(p / self.N * n**i) for i in range(self.L)] for p in parts] for parts in self.parts]
        self.num_parts = len(sizes) * self.L  # (bucket, part) exchanges per iteration
        self.stage: dict[tuple[int, int, int, int], int] = {}
        self.got: dict[tuple[int, int, int, int, int], int] = {}
        self.parts_done: dict[tuple[int, int], int] = {}
        self.done_iter: set[tuple[int, int]] = set()

    def can_start(self, w, t):
        return t == 0 or (t - 1, w) in self.done_iter

    def on_ready(self, w, t, c):
        b = self.bucket_of[c]
        if b < 0:
            return
        for j in range(self.L):
            self.stage[(t, b, j, w)] = 0
            self._stage_send(t, b, j, w)

    def _level(self, j, i):
        order = self.bc.level_order(j)
        return order[i] if i < self.L else order[2 * self.L - 1 - i]

    def _stage_send(self, t, b, j, w):
        i = self.stage[(t, b, j, w)]
        lvl = self._level(j, i)
        elems = self.red[b][j][i] if i < self.L else self.bc_sz[b][j][i - self.L]
        for peer in self.bc.neighbours(w, lvl):
            self.send(t, w, peer, 4 * elems, lvl, self._got, t, b, j, peer, i)
        self._check(t, b, j, w)

    def _got(self, tr, t, b, j, w, i):
        k = (t, b, j, w, i)
        self.got[k] = self.got.get(k, 0) + 1
        self._check(t, b, j, w)

    def _check(self, t, b, j, w):
        i = self.stage.get((t, b, j, w))
        if i is None or self.got.get((t, b, j, w, i), 0) < self.bc.n - 1:
            return
        del self.got[(t, b, j, w, i)]
        if i + 1 == 2 * self.L:
            del self.stage[(t, b, j, w)]
            self.parts_done[(t, w)] = self.parts_done.get((t, w), 0) + 1
            if self.parts_done[(t, w)] == self.num_parts:
                del self.parts_done[(t, w)]
                self.done_iter.discard((t - 1, w))
                self.done_iter.add((t, w))
                self.try_start(w)
            return
        self.stage[(t, b, j, w)] = i + 1
        self._stage_send(t, b, j, w)


# ---------------------------------------------------------------------------------------------- Ako


def ako_partitions(spec: ProtocolSpec, net_spec: NetSpec, layout: Layout, compute_s: float) -> int:
    """Ako's rule: the fewest partitions whose per-iteration sends fit the NIC during one iteration's compute."""
    if spec.ako_partitions:
        return min(spec.ako_partitions, layout.size)
    need = (net_spec.num_servers - 1) * 4 * layout.size / (net_spec.nic_bytes_per_s * compute_s)
    return int(min(max(1, math.ceil(need)), spec.ako_max_partitions, layout.size))


class AkoSim(_Sim):
    def __init__(self, spec, net_spec, layout, cm, batch, iterations, keep_log=False, compute_scale=None):
        super().__init__(spec, net_spec, layout, cm, batch, iterations, 1, keep_log, compute_scale)
        self.p = ako_partitions(spec, net_spec, layout, self.compute)
        self.part_bytes = [4 * m for m in split_sizes(layout.size, self.p)]
        self.arrival = np.full((self.T, self.N, self.N), np.nan)
        self.count: dict[tuple[int, int], int] = {}
        self.upto = [-1] * self.N  # highest iteration whose messages from every peer arrived

    def can_start(self, w, t):
        return t - 1 - self.spec.staleness <= self.upto[w]

    def on_backward_done(self, w, t):
        nb = self.part_bytes[t % self.p]
        for i in range(1, self.N):
            r = (w + i) % self.N
            self.send(t, w, r, nb, 0, self._arrive, t, w, r)

    def _arrive(self, tr, t, s, r):
        self.arrival[t, s, r] = self.loop.now
        self.count[(t, r)] = self.count.get((t, r), 0) + 1
        while self.count.get((self.upto[r] + 1, r), 0) == self.N - 1:
            self.count.pop((self.upto[r] + 1, r))
            self.upto[r] += 1
        self.try_start(r)

    def schedule(self):
        vis = np.empty((self.T, self.N, self.N), dtype=np.int32)
        for r in range(self.N):
            vis[:, :, r] = np.searchsorted(self.fwd_start[r], self.arrival[:, :, r], side="left")
            vis[:, r, r] = np.arange(1, self.T + 1)  # a worker applies its own gradient at once
        return super().schedule(visible=vis, ako_partitions=self.p)


_SIMS = {"canary": CanarySim, "ps": ParamServerSim, "ring": RingSim, "bml": BMLSim, "ako": AkoSim}


def simulate(spec: ProtocolSpec, net_spec: NetSpec, layout: Layout, cm: ComputeModel, batch: int,
             iterations: int, keep_log: bool = False, max_simulated: int | None = None,
             compute_scale=None) -> Schedule:
    """Run the protocol's discrete-event simulation for ``iterations`` iterations on every worker.

    ``compute_scale`` (``[N]``, default all 1): each worker's compute time factor (heterogeneous workers).

    With ``max_simulated`` < ``iterations``, a *synchronous* protocol is simulated for that many iterations only;
    if it has reached a periodic steady state (:func:`extrapolate`) the rest is extended from the period, else the
    full run is simulated. Asynchronous protocols (Ako, Canary with staleness > 0) are always fully simulated:
    their visibility pattern need not be periodic.
    """
    sim_cls = _SIMS[spec.protocol]
    asynchronous = spec.protocol == "ako" or (spec.protocol == "canary" and spec.staleness > 0)
    kw = dict(keep_log=keep_log, compute_scale=compute_scale)
    if max_simulated is None or max_simulated >= iterations or asynchronous:
        return sim_cls(spec, net_spec, layout, cm, batch, iterations, **kw).run()
    short = sim_cls(spec, net_spec, layout, cm, batch, max_simulated, **kw).run()
    out = extrapolate(short, iterations, margin=spec.staleness + 3)
    if out is None:
        return sim_cls(spec, net_spec, layout, cm, batch, iterations, **kw).run()
    return out


def extrapolate(s: Schedule, iterations: int, margin: int = 3, window: int = 8,
                periods: tuple[int, ...] = (1, 2, 3, 4, 6), rtol: float = 1e-4) -> Schedule | None:
    """Extend a schedule periodically to ``iterations``, or None if it is not periodic.

    The last ``margin`` simulated iterations are dropped (no later traffic competes with them, so they are not
    steady state). Periodic with period ``P``: over the ``window`` iterations before that, every worker's start
    times satisfy ``f[t] - f[t - P] = const`` to within ``rtol`` of one iteration's duration, and every
    visibility entry ``vis[t] = vis[t - P] + P`` exactly.
    """
    t1 = s.iterations - margin
    if t1 - window - max(periods) < 1:
        return None
    f = s.fwd_start
    for p in periods:
        d = f[:, t1 - window: t1 + 1] - f[:, t1 - window - p: t1 + 1 - p]
        if np.max(np.abs(d - d[:, -1:])) > rtol * float(np.mean(d[:, -1])) / p:
            continue
        vis = s.visible
        if vis is not None:
            dv = vis[t1 - window: t1 + 1] - vis[t1 - window - p: t1 + 1 - p]
            if np.any(dv != p):
                continue
        fw = np.empty((s.num_workers, iterations + 1))
        fw[:, : t1 + 1] = f[:, : t1 + 1]
        for t in range(t1 + 1, iterations + 1):
            fw[:, t] = fw[:, t - p] + d[:, -1]
        bw = np.empty((s.num_workers, iterations))
        bw[:, : t1 + 1] = s.bwd_end[:, : t1 + 1]
        db = s.bwd_end[:, t1] - s.bwd_end[:, t1 - p]
        for t in range(t1 + 1, iterations):
            bw[:, t] = bw[:, t - p] + db
        nv = None
        if vis is not None:
            nv = np.empty((iterations, *vis.shape[1:]), dtype=vis.dtype)
            nv[: t1 + 1] = vis[: t1 + 1]
            for t in range(t1 + 1, iterations):
                nv[t] = nv[t - p] + p
        return Schedule(s.protocol, s.num_workers, iterations, fw, bw, s.bytes_per_iteration,
                        s.transfers_per_iteration, visible=nv, ako_partitions=s.ako_partitions, log=s.log, gei=s.gei,
                        extra={**s.extra, "simulated_iterations": s.iterations, "period": p})
    return None


__all__ = ["PROTOCOLS", "SKETCH_PASS_SHARE", "NetSpec", "ProtocolSpec", "Schedule", "ako_partitions", "extrapolate",
           "payload_bytes", "piece_tree", "simulate", "sketch_bytes", "split_sizes"]
