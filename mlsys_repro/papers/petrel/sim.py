"""Discrete-event simulator of parameter-server training: real gradients, simulated time.

Workers compute real gradients (:class:`mlsys_repro.papers.petrel.engine.GradEngine`) on the parameter version they
pulled, so staleness is real; compute times come from :class:`mlsys_repro.papers.petrel.hardware.ComputeModel`; every
message crosses FIFO NICs (sender egress and receiver ingress, ``latency + bytes / bandwidth``) and its bytes are the
actual payload (``4 * P`` float32 bytes plus a header), or the payload of a realistic model (``hardware.payload_bytes``,
from :mod:`mlsys_repro.common.timing`) while the numerics train the small proxy.

Traffic is counted per tier: the *PS tier* (pushes and pulls through the PS NICs) and the *leader tier* (member <->
leader messages between workers). Every message belongs to exactly one tier; its bytes are counted when it leaves
the sender's egress link and again when it arrives at the receiver, so per tier ``sent = arrived + in flight``
(tested). *Wire bytes* (:attr:`PSSim.wire_bytes`, ``wire_bytes_to_target``) count every message once, whichever
tier: PS-tier bytes plus leader-tier bytes; they equal the PS-tier bytes for mechanisms without leaders (BSP, ASP,
SSP, DSSP) and exceed them when gradients are aggregated at workers (CASP, hier_bsp).

PS sharding [ours, issue #50]: the PS tier is ``hw.ps_shards`` = S parameter servers, each holding 1/S of the
parameter vector behind its own NIC (one :class:`Link` per direction, all in a :class:`LinkBank`). A PS-tier message
of ``b`` bytes (a push or a pull, of a worker or a leader) is split into S parts of ``b / S`` bytes (the remainder
spread one byte at a time over the first parts; headers are not duplicated), part ``s`` crossing PS NIC ``s``; the
worker's NIC sends (or receives) the parts one after another, each part holds its two links like any transfer, and
the message is delivered when its last part has arrived. So each PS NIC carries 1/S of the PS-tier bytes and a
burst of ``m`` equal messages through the PS tier takes ``(m + S - 1) / S`` single-NIC message times instead of
``m`` (parts pipeline over the S NICs; the ``(S - 1) / S`` is the pipeline filling, which an ideal fluid split
would not pay), while one isolated message still takes one message time at equal NIC rates (the worker's NIC is
then the bottleneck). As every transfer here holds both its links at the slower one's rate, an isolated message is
not faster with S either when the worker NICs are faster than the PS NICs (a fluid split would take 1/S of the
time). S = 1 is the single-PS model, operation for operation.

Every synchronisation mechanism is a partition of the workers into *groups* plus an optional *gate*:

* a group runs rounds: its members compute on the parameters they received, their gradients are aggregated
  (at the PS for ``via_leader=False``, otherwise at the group's leader, which then pushes one aggregated message),
  the PS applies :func:`ps_update` to ``sum(g)`` (sum in worker order): ``w <- w - grad_lr * sum(g)``, or with
  ``momentum`` mu > 0 momentum SGD run by the PS, ``v <- mu v + sum(g); w <- w - grad_lr * v`` (one momentum step
  per apply: per push under ASP, per round under BSP, as a PS's server-side optimiser does), and sends the new
  parameters back (to every member, or to the leader, which broadcasts them to the other members);
* BSP = one group of all workers aggregated at the PS; ASP = singleton groups; SSP/DSSP = singletons with a gate
  that holds a worker's reply while it is too far ahead; CASP = communities aggregated at a leader, asynchronous
  across communities, re-formed by a grouper (A3C, k-means, prior or random) every decision interval;
  hier_bsp [ours] = one group of all workers whose gradients are aggregated in fixed *units* (blocks of worker
  indices), each at the unit's first worker, which pushes one message per round and broadcasts the parameters it
  pulls to its unit. A group's aggregation units are the grouper's choice (:meth:`Grouper.units`; one unit = the
  whole group by default), and so is each unit's leader (:meth:`Grouper.leader`; by default the member with the
  least EWMA iteration time).

A new partition takes effect at round boundaries: a group that is not in the new partition finishes its round
(each of its gradients is applied exactly once), then its members wait until every member of their new group is
free; the new group's leader pulls the parameters from the PS and broadcasts them.

The simulator never blocks on numerics until it must: an event that applies gradients waits at the head of the
queue until :meth:`GradEngine.flush` has computed them, so many simulations advance side by side and their
gradient requests are computed in shared batches (see :func:`run_batch`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from mlsys_repro.papers.petrel.engine import EvalTicket, GradEngine, Ticket
from mlsys_repro.papers.petrel.hardware import ComputeModel
from mlsys_repro.papers.petrel.schemas import PSClusterHardware

PS = -1
TIERS = ("ps", "leader")


@dataclass
class Grad:
    """One computed gradient: who, which iteration, on which parameter version, and its SSP clock gap."""

    gid: int
    worker: int
    iteration: int
    version: int
    ticket: Ticket
    compute_s: float
    gap: int
    applied_version: int = -1  # PS version this gradient produced (set when applied)
    start_s: float = 0.0  # simulated time its computation started


@dataclass
class Group:
    """Workers whose gradients the PS applies together, once per round. With ``via_leader`` the gradients are first
    aggregated per unit (``units[i]``, at ``leaders[i]``), and each unit's leader pushes one message per round."""

    members: list[int]
    units: list[list[int]]
    leaders: list[int]
    via_leader: bool
    ps_buffer: list[Grad] = field(default_factory=list)  # at the PS
    rounds: int = 0
    dissolve: bool = False
    buffers: list[list[Grad]] = field(init=False)  # per unit, at its leader
    unit_of: dict[int, int] = field(init=False)  # member -> index of its unit

    def __post_init__(self) -> None:
        self.buffers = [[] for _ in self.units]
        self.unit_of = {m: i for i, u in enumerate(self.units) for m in u}

    @property
    def key(self) -> tuple[int, ...]:
        return tuple(self.members)

    @property
    def leader(self) -> int:
        """The leader of the first unit (the only one unless the grouper splits groups into units)."""
        return self.leaders[0]


class Link:
    """One direction of a NIC: FIFO, ``bw`` bits per second."""

    __slots__ = ("bw", "free_at", "busy", "bytes")

    def __init__(self, bw: float):
        self.bw, self.free_at, self.busy, self.bytes = bw, 0.0, 0.0, 0


class LinkBank:
    """One direction of the PS tier: one :class:`Link` per parameter server (``links[s]``).

    Read as a whole it is one link of the summed rate: ``bytes`` = bytes over all its links, ``bw`` = their summed
    rate, ``busy`` = the mean busy seconds per link (so ``busy / elapsed`` is a utilisation in [0, 1]). With one
    server these are that link's own values."""

    __slots__ = ("links",)

    def __init__(self, shards: int, bw: float):
        self.links = [Link(bw) for _ in range(shards)]

    @property
    def bytes(self) -> int:
        return sum(lk.bytes for lk in self.links)

    @property
    def bw(self) -> float:
        return sum(lk.bw for lk in self.links)

    @property
    def busy(self) -> float:
        return sum(lk.busy for lk in self.links) / len(self.links)


def ps_update(w, v, g_sum, lr, mu):
    """One PS update, a pure function of arrays (numpy or jax.numpy): ``(w', v')``.

    Momentum SGD as a PS's server-side optimiser runs it (heavy ball, PyTorch/MXNet convention):
    ``v' = mu * v + g_sum``, ``w' = w - lr * v'``. With ``mu = 0`` this is plain SGD, ``w' = w - lr * g_sum``, bit for
    bit (``0 * v`` is a signed zero and ``+-0 + g = g`` exactly, for finite ``v``). No branch on ``mu``, so it traces
    under ``jit`` with ``mu`` an array. The simulator calls it once per apply, so a stale gradient enters the momentum
    buffer as it arrives and keeps acting on later updates: momentum amplifies what staleness costs (Mitliagkas et
    al. 2016, "Asynchrony begets momentum")."""
    v = mu * v + g_sum
    return w - lr * v, v


def shard_bytes(nbytes: int, shards: int) -> list[int]:
    """``nbytes`` split over ``shards`` parameter servers: equal parts, the remainder one byte each to the first
    parts; parts of zero bytes are dropped (a message smaller than ``shards`` bytes)."""
    q, r = divmod(int(nbytes), shards)
    return [q + (s < r) for s in range(shards) if q + (s < r) > 0]


class ShardSampler:
    """IID shards of the training set, one per worker; each worker walks epochs of its shard in random order."""

    def __init__(self, n_train: int, num_workers: int, batch: int, seed: int):
        if n_train < num_workers:
            raise ValueError(f"{n_train} training examples cannot be split over {num_workers} workers")
        perm = np.random.default_rng([seed, 0x54A2D]).permutation(n_train)
        self.shards = np.array_split(perm, num_workers)
        self.batch = batch
        self._rngs = [np.random.default_rng([seed, w, 0xBA7C]) for w in range(num_workers)]
        self._order = [r.permutation(s) for r, s in zip(self._rngs, self.shards, strict=True)]
        self._pos = [0] * num_workers

    def next(self, w: int) -> np.ndarray:
        if self._pos[w] + self.batch > self._order[w].size:
            self._order[w] = self._rngs[w].permutation(self.shards[w])
            self._pos[w] = 0
        p = self._pos[w]
        self._pos[w] = p + self.batch
        if self.batch > self._order[w].size:  # tiny shard: sample with replacement
            return self._rngs[w].choice(self.shards[w], self.batch).astype(np.int32)
        return self._order[w][p:p + self.batch].astype(np.int32)


class Gate:
    """No gate: a worker always proceeds (BSP, ASP, CASP)."""

    def on_apply(self, sim: PSSim, w: int) -> None:
        pass

    def may_proceed(self, sim: PSSim, w: int) -> bool:
        return True


class Grouper:
    """Partition policy: the initial groups and, for adaptive policies, a new partition at each decision; and, for
    ``via_leader`` policies, the aggregation units of a group and the leader of each unit."""

    via_leader: bool = False
    decides: bool = False

    def initial(self, sim: PSSim) -> list[list[int]]:
        raise TypeError(f"{type(self).__name__} must define initial()")

    def decide(self, sim: PSSim) -> list[list[int]] | None:
        return None

    def units(self, sim: PSSim, members: list[int]) -> list[list[int]]:
        """Aggregation units of a group (``members`` sorted): by default one, the whole group."""
        return [members]

    def leader(self, sim: PSSim, unit: list[int]) -> int:
        """The unit's aggregator: by default the member with the least EWMA iteration time (ties: lowest index)."""
        return min(unit, key=lambda m: (sim.ewma[m], m))


@dataclass
class EvalPoint:
    t: float
    ticket: EvalTicket
    ps_bytes: int
    wire_bytes: int
    grads: int
    updates: int

    @property
    def acc(self) -> float:
        return self.ticket.box[0]

    @property
    def loss(self) -> float:
        return self.ticket.box[1]


class PSSim:
    """One training run of one policy on one hardware realisation (``seed``)."""

    def __init__(self, engine: GradEngine, hw: PSClusterHardware, grouper: Grouper, gate: Gate | None = None, *,
                 seed: int, grad_lr: float, batch_size: int, eval_every_grads: int, max_time_s: float,
                 target_accuracy: float = 1.0, decision_every_s: float = 0.0, ewma_alpha: float = 0.2,
                 max_updates: int = 0, max_gradients: int = 0, label: str = "", record: bool = False,
                 momentum: float = 0.0):
        self.engine, self.hw, self.grouper, self.gate = engine, hw, grouper, gate or Gate()
        self.label, self.seed = label, seed
        n = hw.num_workers
        self.n = n
        self.lr = np.float32(grad_lr)
        if not (0.0 <= momentum < 1.0):
            raise ValueError(f"momentum must be in [0, 1), got {momentum!r}")
        self.mu = np.float32(momentum)
        self.compute = ComputeModel(hw, seed, batch_size)
        self.sampler = ShardSampler(engine.task.n_train, n, batch_size, seed)
        self.latency = hw.latency_us * 1e-6
        self.ps_shards = hw.ps_shards
        self.ps_in = LinkBank(hw.ps_shards, hw.ps_bandwidth_gbps * 1e9)
        self.ps_out = LinkBank(hw.ps_shards, hw.ps_bandwidth_gbps * 1e9)
        self.w_in = [Link(hw.worker_bandwidth_gbps * 1e9) for _ in range(n)]
        self.w_out = [Link(hw.worker_bandwidth_gbps * 1e9) for _ in range(n)]
        # a gradient or a parameter vector (the proxy's, or a realistic model's payload), plus header
        self.msg_bytes = (hw.payload_bytes or engine.grad_bytes) + hw.header_bytes
        self.eval_every, self.max_time_s, self.target = eval_every_grads, max_time_s, target_accuracy
        self._next_eval = eval_every_grads
        self.decision_every_s, self.ewma_alpha = decision_every_s, ewma_alpha
        self.record = record
        self.max_updates, self.max_gradients = max_updates, max_gradients

        self.now = 0.0
        self._heap: list = []
        self._seq = 0
        self.w = engine.task.w0.copy()
        self.v = np.zeros_like(self.w)  # the PS's momentum buffer (without momentum: the last summed gradient)
        self.version = 0
        self.clock = np.zeros(n, dtype=np.int64)  # applied gradients per worker (SSP clocks)
        self.iters = np.zeros(n, dtype=np.int64)
        self.ewma = self.compute.nominal.copy()  # speed estimate; starts at the prior (nominal class speed)
        self.idle_since = np.zeros(n)
        self.idle_time = np.zeros(n)
        self.held: set[int] = set()
        self.free: set[int] = set()
        self.pending_groups: list[tuple[int, ...]] = []
        self.groups: list[Group] = []
        self.group_of: list[Group | None] = [None] * n
        self.next_gid = 0
        self.bytes_sent = self.bytes_delivered = self.bytes_in_flight = 0
        self.tier_sent = dict.fromkeys(TIERS, 0)
        self.tier_arrived = dict.fromkeys(TIERS, 0)
        self.grads_applied = 0
        self.staleness_sum = 0
        self.staleness_max = 0
        self.loss_ewma = float("nan")
        self.evals: list[EvalPoint] = []
        self.decisions: list[tuple[float, int]] = []
        self.done = False
        self.stop_reason = ""
        self.crossing: tuple[float, float, float] | None = None  # (t, ps_bytes, wire_bytes) at the target
        self.crossing_grads = 0
        self.applied: list[Grad] = []  # every applied gradient (record=True only)
        self.started: list[Grad] = []  # every started gradient (record=True only)
        self._checked = 0
        self._start()

    # ------------------------------------------------------------------------------------------- event queue
    def _push(self, t: float, fn: Callable, args: tuple, needs: Sequence[Ticket] | None = None) -> None:
        heapq.heappush(self._heap, (t, self._seq, fn, args, needs))
        self._seq += 1

    def run_until_blocked(self) -> bool:
        """Process events until one needs a gradient not yet computed (True) or the run is over (False)."""
        heap = self._heap
        while heap and not self.done:
            t, _, fn, args, needs = heap[0]
            if t > self.max_time_s:
                self.done, self.stop_reason = True, "horizon"
                break
            if needs is not None and not all(tk.box for tk in needs):
                return True
            heapq.heappop(heap)
            self.now = t
            fn(*args)
        if not heap and not self.done:
            raise RuntimeError(f"{self.label}: event queue ran dry at t={self.now:.4f} (deadlock)")
        return False

    # ------------------------------------------------------------------------------------------- network
    def _send(self, src: int, dst: int, nbytes: int, fn: Callable, args: tuple,
              needs: Sequence[Ticket] | None = None) -> None:
        """Send one message; ``fn(*args)`` runs when it has arrived (its last part, for a PS-tier message)."""
        tier = "ps" if PS in (src, dst) else "leader"
        if tier == "leader":
            end = self._transfer(self.w_out[src], self.w_in[dst], nbytes)
        else:
            end = self.now
            for s, part in enumerate(shard_bytes(nbytes, self.ps_shards)):
                out = self.ps_out.links[s] if src == PS else self.w_out[src]
                inn = self.ps_in.links[s] if dst == PS else self.w_in[dst]
                end = max(end, self._transfer(out, inn, part))
        self.bytes_sent += nbytes
        self.bytes_in_flight += nbytes
        self.tier_sent[tier] += nbytes
        self._push(end + self.latency, self._deliver, (nbytes, tier, fn, args), needs)

    def _transfer(self, out: Link, inn: Link, nbytes: int) -> float:
        """Hold egress ``out`` and ingress ``inn`` (FIFO) for ``nbytes`` at the slower one's rate; its end time."""
        dur = nbytes * 8.0 / min(out.bw, inn.bw)
        start = max(self.now, out.free_at, inn.free_at)
        out.free_at = inn.free_at = start + dur
        out.busy += dur
        inn.busy += dur
        out.bytes += nbytes
        inn.bytes += nbytes
        return start + dur

    def _deliver(self, nbytes: int, tier: str, fn: Callable, args: tuple) -> None:
        self.bytes_in_flight -= nbytes
        self.bytes_delivered += nbytes
        self.tier_arrived[tier] += nbytes
        fn(*args)

    @property
    def ps_bytes(self) -> int:
        """PS-tier bytes: every push and pull, counted once (= the bytes through the PS NICs, all shards)."""
        return self.ps_in.bytes + self.ps_out.bytes

    @property
    def wire_bytes(self) -> int:
        """Every message once, PS tier and leader tier: the bytes put on the network (>= :attr:`ps_bytes`)."""
        return self.bytes_sent

    @property
    def leader_bytes(self) -> int:
        """Leader-tier bytes: member <-> leader messages between workers (``wire_bytes - ps_bytes``)."""
        return self.tier_sent["leader"]

    # ------------------------------------------------------------------------------------------- protocol
    def _start(self) -> None:
        for members in self.grouper.initial(self):
            g = self._new_group(members)
            for m in g.members:
                self._begin(m, self.w, self.version)
        if self.eval_every > 0:
            self._evaluate()
        if self.grouper.decides and self.decision_every_s > 0:
            self._push(self.decision_every_s, self._decide, ())

    def _new_group(self, members: Sequence[int]) -> Group:
        ms = sorted(int(m) for m in members)
        via = self.grouper.via_leader and len(ms) > 1
        units = self.grouper.units(self, ms) if via else [ms]
        if sorted(m for u in units for m in u) != ms:
            raise ValueError(f"{self.label}: aggregation units {units} do not cover group {ms} exactly once")
        units = [sorted(int(m) for m in u) for u in units]
        g = Group(ms, units, [self.grouper.leader(self, u) for u in units], via)
        self.groups.append(g)
        for m in ms:
            self.group_of[m] = g
            self.free.discard(m)
        return g

    def _begin(self, w: int, params: np.ndarray, version: int) -> None:
        gap = int(self.clock[w] - self.clock.min())
        d = self.compute.step_time(w, self.now)
        tk = self.engine.request(params, self.sampler.next(w))
        g = Grad(self.next_gid, w, int(self.iters[w]), version, tk, d, gap, start_s=self.now)
        self.next_gid += 1
        self.iters[w] += 1
        self.idle_time[w] += self.now - self.idle_since[w]
        if self.record:
            self.started.append(g)
        self._push(self.now + d, self._computed, (g,))

    def _computed(self, g: Grad) -> None:
        w = g.worker
        self.ewma[w] += self.ewma_alpha * (g.compute_s - self.ewma[w])
        self.idle_since[w] = self.now
        grp = self.group_of[w]
        if grp.via_leader:
            u = grp.unit_of[w]
            if w == grp.leaders[u]:
                self._leader_collect(grp, u, g)
            else:
                self._send(w, grp.leaders[u], self.msg_bytes, self._leader_collect, (grp, u, g))
        else:
            self._send(w, PS, self.msg_bytes, self._ps_receive, (grp, [g]), needs=(g.ticket,))

    def _leader_collect(self, grp: Group, u: int, g: Grad) -> None:
        """Unit ``u``'s leader holds ``g``; once it has its whole unit's gradients it pushes one aggregate."""
        grp.buffers[u].append(g)
        if len(grp.buffers[u]) == len(grp.units[u]):
            grads, grp.buffers[u] = grp.buffers[u], []
            self._send(grp.leaders[u], PS, self.msg_bytes, self._ps_receive, (grp, grads),
                       needs=tuple(x.ticket for x in grads))

    def _ps_receive(self, grp: Group, grads: list[Grad]) -> None:
        grp.ps_buffer.extend(grads)
        if len(grp.ps_buffer) < len(grp.members):
            return
        grads, grp.ps_buffer = sorted(grp.ps_buffer, key=lambda x: x.worker), []
        self._apply(grads)
        grp.rounds += 1
        self._after_round(grp)

    def _apply(self, grads: list[Grad]) -> None:
        s = grads[0].ticket.value.copy()
        for g in grads[1:]:
            s += g.ticket.value
        self.w, self.v = ps_update(self.w, self.v, s, self.lr, self.mu)
        before = self.version
        self.version += 1
        a = 0.1
        for g in grads:
            st = before - g.version
            self.staleness_sum += st
            self.staleness_max = max(self.staleness_max, st)
            self.clock[g.worker] += 1
            g.applied_version = self.version
            loss = g.ticket.loss
            self.loss_ewma = loss if self.loss_ewma != self.loss_ewma else self.loss_ewma + a * (loss - self.loss_ewma)
            self.gate.on_apply(self, g.worker)
            if self.record:
                self.applied.append(g)
        self.grads_applied += len(grads)
        if self.max_updates and self.version >= self.max_updates:
            self.done, self.stop_reason = True, "updates"
        if self.max_gradients and self.grads_applied >= self.max_gradients:
            self.done, self.stop_reason = True, "gradients"
        if self.eval_every > 0 and self.grads_applied >= self._next_eval:
            self._evaluate()
            while self._next_eval <= self.grads_applied:
                self._next_eval += self.eval_every

    def _after_round(self, grp: Group) -> None:
        if grp.dissolve:
            self.groups.remove(grp)
            for m in grp.members:
                self.group_of[m] = None
                self.free.add(m)
            self._start_pending()
            return
        if grp.via_leader:
            for u, leader in enumerate(grp.leaders):
                self._send(PS, leader, self.msg_bytes, self._leader_params, (grp, u, self.w, self.version))
            return
        for m in grp.members:
            if self.gate.may_proceed(self, m):
                self._send(PS, m, self.msg_bytes, self._begin, (m, self.w, self.version))
            else:
                self.held.add(m)
        for m in sorted(self.held):
            if m not in grp.members and self.gate.may_proceed(self, m):
                self.held.discard(m)
                self._send(PS, m, self.msg_bytes, self._begin, (m, self.w, self.version))

    def _leader_params(self, grp: Group, u: int, w: np.ndarray, version: int) -> None:
        """Unit ``u``'s leader received the parameters: it starts its next iteration and forwards them to its unit."""
        leader = grp.leaders[u]
        self._begin(leader, w, version)
        for m in grp.units[u]:
            if m != leader:
                self._send(leader, m, self.msg_bytes, self._begin, (m, w, version))

    # ------------------------------------------------------------------------------------------- regrouping
    def set_partition(self, groups: Sequence[Sequence[int]]) -> None:
        """Adopt a new partition at round boundaries (groups that stay the same keep running)."""
        new = [tuple(sorted(int(m) for m in g)) for g in groups if len(g)]
        flat = sorted(m for g in new for m in g)
        if flat != list(range(self.n)):
            raise ValueError(f"{self.label}: a partition must cover every worker exactly once, got {new}")
        running = {g.key: g for g in self.groups}
        for key, g in running.items():
            g.dissolve = key not in new
        self.pending_groups = [k for k in new if k not in running]
        self._start_pending()

    def _start_pending(self) -> None:
        still = []
        for key in self.pending_groups:
            if all(m in self.free for m in key):
                g = self._new_group(key)
                if g.via_leader:
                    for u, leader in enumerate(g.leaders):
                        self._send(PS, leader, self.msg_bytes, self._leader_params, (g, u, self.w, self.version))
                else:
                    self._send(PS, g.leader, self.msg_bytes, self._begin, (g.leader, self.w, self.version))
            else:
                still.append(key)
        self.pending_groups = still

    def _decide(self) -> None:
        part = self.grouper.decide(self)
        if part is not None:
            self.decisions.append((self.now, len(part)))
            self.set_partition(part)
        self._push(self.now + self.decision_every_s, self._decide, ())

    # ------------------------------------------------------------------------------------------- evaluation
    def _evaluate(self) -> None:
        """Snapshot the PS parameters for a (lazy) test evaluation: at t=0 and every ``eval_every`` gradients."""
        self.evals.append(EvalPoint(self.now, self.engine.request_eval(self.w), self.ps_bytes, self.bytes_sent,
                                    self.grads_applied, self.version))

    def check_target(self) -> None:
        """After a flush: stop at the first evaluation that reaches the target (linear interpolation)."""
        while self._checked < len(self.evals) and self.evals[self._checked].ticket.box:
            i = self._checked
            e = self.evals[i]
            self._checked += 1
            if e.acc >= self.target and self.crossing is None:
                if i == 0:
                    self.crossing = (e.t, float(e.ps_bytes), float(e.wire_bytes))
                    self.crossing_grads = e.grads
                else:
                    p = self.evals[i - 1]
                    f = (self.target - p.acc) / max(e.acc - p.acc, 1e-12)
                    self.crossing = (_lerp(p.t, e.t, f), _lerp(p.ps_bytes, e.ps_bytes, f),
                                     _lerp(p.wire_bytes, e.wire_bytes, f))
                    self.crossing_grads = int(round(_lerp(p.grads, e.grads, f)))
                self.done, self.stop_reason = True, "target"
                del self.evals[i + 1:]
                self._checked = len(self.evals)
                return

    # ------------------------------------------------------------------------------------------- results
    def summary(self) -> dict[str, float]:
        """Metrics of the finished run (time and bytes at the target, or at the horizon if never reached)."""
        done_evals = [e for e in self.evals if e.ticket.box]
        last = done_evals[-1] if done_evals else None
        reached = self.crossing is not None
        t, psb, wb = self.crossing if reached else (self.max_time_s, float(self.ps_bytes), float(self.bytes_sent))
        horizon = self.now if not reached else t
        idle = float(self.idle_time.sum())
        return {
            "reached_target": float(reached),
            "time_to_target_s": float(t),
            # PS tier: pushes and pulls through the PS NICs (all shards), each message once
            "ps_bytes_to_target": float(psb),
            # wire: every message once, PS tier + leader tier (the bytes put on the network; = PS tier without leaders)
            "wire_bytes_to_target": float(wb),
            # every message is on exactly one tier: leader tier = all messages - PS tier; a PS message crosses one
            # worker NIC, a leader-tier message two
            "leader_bytes_to_target": float(wb - psb),
            "worker_nic_bytes_to_target": float(psb + 2 * (wb - psb)),
            "gradients_to_target": float(self.crossing_grads if reached else self.grads_applied),
            "final_accuracy": float(last.acc) if last else float("nan"),
            "best_accuracy": float(max(e.acc for e in done_evals)) if done_evals else float("nan"),
            "mean_staleness": self.staleness_sum / max(self.grads_applied, 1),
            "max_staleness": float(self.staleness_max),
            "idle_fraction": idle / max(horizon * self.n, 1e-12),
            "ps_updates": float(self.version),
            "sim_time_s": float(self.now),
        }

    def curve(self, points: int) -> list[tuple[float, float, float, float]]:
        """(t, test accuracy, test loss, PS bytes) at up to ``points`` evaluation times (evenly thinned)."""
        ev = [e for e in self.evals if e.ticket.box]
        if len(ev) > points:
            keep = np.unique(np.linspace(0, len(ev) - 1, points).round().astype(int))
            ev = [ev[i] for i in keep]
        return [(e.t, e.acc, e.loss, float(e.ps_bytes)) for e in ev]


def _lerp(a: float, b: float, f: float) -> float:
    return a + f * (b - a)


def run_batch(sims: Sequence[PSSim], engine: GradEngine, progress: Callable[[PSSim], None] | None = None) -> None:
    """Advance every simulation until it is done, computing their gradient requests in shared batches."""
    active = list(sims)
    while active:
        for s in active:
            s.run_until_blocked()
        engine.flush()
        still = []
        for s in active:
            s.check_target()
            if s.done:
                if progress:
                    progress(s)
            else:
                still.append(s)
        active = still
    engine.flush()
    for s in sims:
        s.check_target()
