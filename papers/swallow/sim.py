"""Jit-compiled, event-driven coflow simulator (non-blocking big switch, flow-level fluid model, online arrivals).

The whole run is one ``lax.while_loop``. Each iteration jumps to the next event (an admission epoch, the quantum
in which some coflow completes, or a CPU-load sample boundary), advances every flow analytically over the
skipped quanta, and recomputes rates where the clock conventions say so. Every array has a fixed shape
(flows ``F``, reducers ``R``, coflows ``C``, ports ``P``), so a batch of configurations (bandwidth, CPU load,
codec, seed) is ``vmap``-ed through one compiled call.

Clock conventions are coflowsim's by default (:class:`Clock`): rates are allocated in bit/s, a simulated second
is ``second_ms`` ms, flows move ``rate/8 * quantum/second`` bytes per quantum, a flow is done when its remaining
bytes drop to ``zero`` or below, a reducer (and hence a coflow) finishes at the end of the quantum in which its
last flow finishes, coflows arriving within the next ``epoch_ms`` are admitted at the epoch boundary, and rates
change only when a coflow is admitted or departs.

Policies (``Static.policy``):

* ``fifo``, ``scf``, ``ncf``, ``lcf``, ``sebf``: coflowsim's CoflowSimulator family: a priority list (arrival;
  static length; static width; bytes left at insertion; static alpha), MADD per coflow in that order
  (``Gamma`` = largest remaining bytes / free bandwidth over its ports; every flow at ``remaining / Gamma``),
  coflows that meet a saturated port share the leftover per flow, then a work-conserving back-fill that hands the
  rest flow by flow in coflowsim's deadline order ``(int)(start + alpha/port_rate * deadlineMult * 1000 - now)``;
* ``fvdf`` (Swallow): the same machinery on *expected wire bytes* (remaining raw bytes divided by the predicted
  per-port disposal speed-up), ordered by the smallest predicted bottleneck disposal time at arrival, with aging
  for starvation freedom; flows are compressed as far as the sender's free CPU allows;
* ``sebf_compress``: SEBF, but every flow is always compressed;
* ``dark``: Aalo's D-CLAS as coflowsim's CoflowSimulatorDark: queues by bytes already sent (10 MB, x10),
  FIFO inside a queue, strict priority across queues, per-flow fair share inside a coflow, no back-fill;
* ``sincronia``: BSSI ordering recomputed at every admission and departure, greedy rates in that order;
* ``fair``: coflowsim's per-flow FAIR: each quantum a flow moves ``min(Q/#flows at its receiver,
  Q/#flows at its sender)`` bytes (``Q`` = one port-quantum), recomputed whenever a flow finishes.

Compression model (policies ``fvdf`` and ``sebf_compress``; see README "What is the paper's, what is ours"):
a port compresses with ``S_eff = speed_per_core x cores x free CPU fraction`` (CPU replayed from a real
utilisation trace) at ratio ``r`` (compressed/original). With pipelining, a sender whose flows use ``L`` wire
bytes/s disposes raw bytes ``g = 1 + (1 - r) min(S_eff / L, 1/r)`` times faster (compress what the CPU can,
send the rest raw); without pipelining (ablation) ``g = max(1, 1 / (L/S_eff + r))``. Always-on compression
gives ``g = min(S_eff/L, 1/r)``. Wire bytes = raw bytes / g.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from papers.swallow.workload import FlowTable

POLICIES = ("fifo", "scf", "ncf", "lcf", "sebf", "fvdf", "sebf_compress", "dark", "sincronia", "fair")
MADD_FAMILY = ("fifo", "scf", "ncf", "lcf", "sebf", "fvdf", "sebf_compress")
COMPRESSING = ("fvdf", "sebf_compress")
BIG = 1e300
IBIG = np.iinfo(np.int64).max // 4


@dataclass(frozen=True)
class Static:
    """Everything that changes the compiled program (hashable)."""

    policy: str
    second_ms: float = 1024.0
    quantum_ms: float = 8.0
    epoch_ms: float = 10240.0
    end_ms: float = 86400.0 * 1024.0
    zero: float = 1e-3
    cct_from: str = "admission"  # or "arrival"
    pipelined: bool = True
    starvation_ms: float = float("inf")  # fvdf aging threshold (promote coflows older than this)
    dark_queues: int = 10
    dark_first_bytes: float = 10.0 * 1048576.0
    dark_mult: float = 10.0
    max_iters: int = 2_000_000

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown policy {self.policy!r}; known: {POLICIES}")
        if self.quantum_ms <= 0 or self.second_ms <= 0 or self.epoch_ms <= 0:
            raise ValueError("second_ms, quantum_ms and epoch_ms must be positive")
        if abs(self.epoch_ms / self.quantum_ms - round(self.epoch_ms / self.quantum_ms)) > 1e-9:
            raise ValueError("epoch_ms must be a multiple of quantum_ms")
        if self.cct_from not in ("admission", "arrival"):
            raise ValueError(f"cct_from must be 'admission' or 'arrival', got {self.cct_from!r}")


class Params(NamedTuple):
    """Per-configuration numbers (vmappable leaves)."""

    port_bps: Any  # scalar, bit/s per port and direction
    ratio: Any  # scalar, compressed/original bytes (1 = no compression)
    speed_Bps: Any  # scalar, compression speed per core, raw bytes/s
    cores: Any  # scalar, cores per port (host)
    cpu_free: Any  # [T, P] actual free CPU fraction per sample and port
    cpu_pred: Any  # [T, P] predicted free CPU fraction used by the scheduler
    cpu_step_ms: Any  # scalar, sample length in simulated ms


def params(port_bps: float, *, ratio: float = 1.0, speed_Bps: float = 0.0, cores: float = 0.0,
           cpu_free: np.ndarray | None = None, cpu_pred: np.ndarray | None = None, num_ports: int = 1,
           cpu_step_ms: float = 300.0 * 1024.0) -> Params:
    """Build :class:`Params` (float64); without CPU series the CPU is taken as fully free."""
    if port_bps <= 0:
        raise ValueError(f"port_bps must be positive, got {port_bps}")
    if not 0 < ratio <= 1:
        raise ValueError(f"compression ratio must be in (0, 1], got {ratio}")
    if cpu_free is None:
        cpu_free = np.ones((1, num_ports))
    if cpu_pred is None:
        cpu_pred = cpu_free
    f = lambda x: np.asarray(x, np.float64)
    return Params(f(port_bps), f(ratio), f(speed_Bps), f(cores), f(cpu_free), f(cpu_pred), f(cpu_step_ms))


class Trace(NamedTuple):
    """Device copy of a :class:`FlowTable` (shared, not vmapped)."""

    arrival: Any
    cof_first_red: Any
    cof_num_red: Any
    cof_alpha: Any
    cof_scf: Any
    cof_ncf: Any
    cof_orig: Any
    cof_mult: Any
    cof_num_map: Any
    cof_bytes: Any
    red_cof: Any
    red_port: Any
    red_bytes: Any
    red_orig: Any
    flow_cof: Any
    flow_red: Any
    flow_src: Any
    flow_dst: Any
    flow_bytes: Any
    map_cof: Any
    map_port: Any


def device_trace(ft: FlowTable) -> Trace:
    f, i = (lambda x: jnp.asarray(x, jnp.float64)), (lambda x: jnp.asarray(x, jnp.int32))
    return Trace(
        f(ft.cof_arrival_ms), i(ft.cof_first_red), i(ft.cof_num_red), f(ft.cof_alpha), f(ft.cof_scf_key),
        f(ft.cof_ncf_key), f(ft.cof_orig_bytes), f(ft.cof_deadline_mult), f(ft.cof_num_map), f(ft.cof_bytes),
        i(ft.red_cof), i(ft.red_port), f(ft.red_bytes), f(ft.red_orig_bytes), i(ft.flow_cof), i(ft.flow_red),
        i(ft.flow_src), i(ft.flow_dst), f(ft.flow_bytes), i(ft.map_cof), i(ft.map_port))


class State(NamedTuple):
    t: Any  # ms, start of the next quantum to simulate
    next_epoch: Any  # first epoch boundary not yet checked for admissions
    nxt: Any  # next coflow (arrival order) to admit
    it: Any  # loop iterations (events)
    rem: Any  # [F] raw bytes left
    rate: Any  # [F] wire bit/s
    step: Any  # [F] raw bytes per quantum
    wire_per_raw: Any  # [F] wire bytes per raw byte at the current speeds
    alive: Any  # [F]
    red_done: Any  # [R]
    sbpr: Any  # [R] coflowsim shuffleBytesPerRack (LCF key)
    sent: Any  # [C] raw bytes delivered (Aalo's "bytes sent")
    wire: Any  # [C] wire bytes
    admitted: Any  # [C]
    done: Any  # [C]
    start: Any  # [C] ms
    finish: Any  # [C] ms
    rank: Any  # [C] priority (lower first); inf when inactive
    key: Any  # [C] policy key fixed at admission (fvdf)
    queue: Any  # [C] DARK queue index
    qcount: Any  # [C] DARK currentJobQueue counter


@dataclass(frozen=True)
class Result:
    start_ms: np.ndarray
    finish_ms: np.ndarray
    arrival_ms: np.ndarray
    wire_bytes: np.ndarray
    raw_bytes: np.ndarray
    events: int
    second_ms: float

    @property
    def cct_ms(self) -> np.ndarray:
        return self.finish_ms - self.start_ms


# --------------------------------------------------------------------------------------------- helpers


def _segsum(x, ids, n):
    return jax.ops.segment_sum(x, ids, num_segments=n)


def _jmax(v):
    """coflowsim's Utils.max over non-negative candidates (floor: Double.MIN_VALUE)."""
    return jnp.maximum(jnp.max(v, initial=0.0), jnp.finfo(jnp.float64).smallest_subnormal)


def _java_int(x):
    """Java (int) cast: truncate toward zero, saturate to int32."""
    return jnp.clip(jnp.trunc(x), -(2.0**31), 2.0**31 - 1)


def _cpu_index(t, p: Params):
    T = p.cpu_free.shape[0]
    return (jnp.floor(t / p.cpu_step_ms).astype(jnp.int32)) % T


def _speedups(st: Static, p: Params, cpu_frac, wire_Bps_at_src):
    """Raw-bytes-per-wire-byte factor g per port given CPU fraction and wire load (bytes/s) at each sender."""
    s_eff = p.speed_Bps * p.cores * cpu_frac
    load = jnp.maximum(wire_Bps_at_src, 1e-300)
    inv_r = 1.0 / p.ratio
    if st.policy == "sebf_compress":
        return jnp.minimum(s_eff / load, inv_r)
    if st.pipelined:
        return 1.0 + (1.0 - p.ratio) * jnp.minimum(s_eff / load, inv_r)
    return jnp.maximum(1.0, 1.0 / (load / jnp.maximum(s_eff, 1e-300) + p.ratio))


def _predicted_speedup(st: Static, p: Params, t, P: int):
    """The scheduler's guess of g per port: CPU predicted for now, wire load = a full port."""
    if st.policy != "fvdf":
        return jnp.ones(P)
    frac = p.cpu_pred[_cpu_index(t, p)]
    return _speedups(st, p, frac, jnp.full(P, p.port_bps / 8.0))


# --------------------------------------------------------------------------------------------- admission


def _insert(st: Static, tr: Trace, s: State, c, P: int, p: Params):
    """Put coflow ``c`` into the priority structure as coflowsim's addToSortedJobs does."""
    active = s.admitted & ~s.done & (jnp.arange(s.admitted.shape[0]) != c)
    if st.policy in ("dark",):
        rank = jnp.max(jnp.where(active, s.rank, -1.0)) + 1.0
        return s._replace(rank=s.rank.at[c].set(rank), queue=s.queue.at[c].set(0), qcount=s.qcount.at[c].set(0))
    if st.policy in ("fifo", "sincronia", "fair"):
        rank = jnp.max(jnp.where(active, s.rank, -1.0)) + 1.0
        return s._replace(rank=s.rank.at[c].set(rank))
    key = s.key
    if st.policy in ("sebf", "sebf_compress"):
        kc, kall = tr.cof_alpha[c], tr.cof_alpha
    elif st.policy == "scf":
        kc, kall = tr.cof_scf[c], tr.cof_scf
    elif st.policy == "ncf":
        kc, kall = tr.cof_ncf[c], tr.cof_ncf
    elif st.policy == "lcf":
        left = _segsum(s.sbpr, tr.red_cof, tr.arrival.shape[0])
        kc, kall = tr.cof_orig[c], left
    else:  # fvdf: predicted bottleneck disposal time with the speed-ups predicted now
        g = _predicted_speedup(st, p, s.t, P)
        inv_g = 1.0 / g
        m = tr.cof_num_map[c]
        per_map = tr.cof_bytes[c] / m
        in_c = tr.map_cof == c
        send = jnp.max(jnp.where(in_c, per_map * inv_g[tr.map_port], 0.0))
        mean_inv = jnp.sum(jnp.where(in_c, inv_g[tr.map_port], 0.0)) / m
        red_c = tr.red_cof == c
        recv = jnp.max(jnp.where(red_c, tr.red_bytes * mean_inv, 0.0))
        kc = jnp.maximum(_jmax(send), _jmax(recv))
        key = key.at[c].set(kc)
        kall = key
    before = active & (kc < kall)
    pos = jnp.min(jnp.where(before, s.rank, jnp.inf))
    last = jnp.max(jnp.where(active, s.rank, -1.0)) + 1.0
    pos = jnp.where(jnp.isfinite(pos), pos, last)
    rank = jnp.where(active & (s.rank >= pos), s.rank + 1.0, s.rank)
    return s._replace(rank=rank.at[c].set(pos), key=key)


def _admit(st: Static, tr: Trace, s: State, P: int, p: Params):
    """Admit every coflow arriving by ``t + epoch`` (the caller guarantees at least one)."""
    C = tr.arrival.shape[0]

    def cond(s):
        return (s.nxt < C) & (tr.arrival[jnp.minimum(s.nxt, C - 1)] <= s.t + st.epoch_ms)

    def body(s):
        c = s.nxt
        start = s.t if st.cct_from == "admission" else tr.arrival[c]
        s = s._replace(admitted=s.admitted.at[c].set(True), start=s.start.at[c].set(start), nxt=c + 1)
        return _insert(st, tr, s, c, P, p)

    s = lax.while_loop(cond, body, s)
    alive = s.alive | (s.admitted[tr.flow_cof] & ~s.done[tr.flow_cof] & (s.rem > st.zero) & ~s.alive)
    return s._replace(alive=alive)


# --------------------------------------------------------------------------------------------- rate allocation


def _order(s: State):
    """Active coflows first, by rank."""
    active = s.admitted & ~s.done
    return jnp.argsort(jnp.where(active, s.rank, jnp.inf)), jnp.sum(active)


def _madd(st: Static, tr: Trace, s: State, wbytes, cap, P: int, order, n_active):
    """MADD per coflow in priority order on ``wbytes`` (per-flow bytes to schedule); returns rates and free caps."""
    C = tr.arrival.shape[0]
    w = jnp.where(s.alive, wbytes, 0.0)
    send_b = _segsum(w, tr.flow_cof * P + tr.flow_src, C * P).reshape(C, P)
    recv_b = _segsum(w, tr.flow_cof * P + tr.flow_dst, C * P).reshape(C, P)
    z = st.zero

    def body(i, carry):
        sf, rf, alpha, skip = carry
        c = order[i]
        sb, rb = send_b[c], recv_b[c]
        unknown = jnp.any((sb > 0) & (sf <= z)) | jnp.any((rb > 0) & (rf <= z))
        a = jnp.maximum(_jmax(jnp.where(sb > 0, sb * 8.0 / jnp.where(sf > z, sf, 1.0), 0.0)),
                        _jmax(jnp.where(rb > 0, rb * 8.0 / jnp.where(rf > z, rf, 1.0), 0.0)))
        use = i < n_active
        ok = use & ~unknown
        sf = jnp.where(ok, sf - sb * 8.0 / a, sf)
        rf = jnp.where(ok, rf - rb * 8.0 / a, rf)
        return sf, rf, alpha.at[c].set(jnp.where(ok, a, jnp.inf)), skip.at[c].set(use & unknown)

    init = (jnp.full(P, cap), jnp.full(P, cap), jnp.full(C, jnp.inf), jnp.zeros(C, bool))
    sf, rf, alpha, skip = lax.fori_loop(0, n_active, body, init)
    rate = jnp.where(s.alive & jnp.isfinite(alpha[tr.flow_cof]), w * 8.0 / alpha[tr.flow_cof], 0.0)
    # coflows that met a saturated port share what is left, per flow
    m = s.alive & skip[tr.flow_cof] & (sf[tr.flow_src] > z) & (rf[tr.flow_dst] > z)
    ns = _segsum(m.astype(jnp.float64), tr.flow_src, P)
    nr = _segsum(m.astype(jnp.float64), tr.flow_dst, P)
    x = jnp.minimum(sf[tr.flow_src] / jnp.maximum(ns[tr.flow_src], 1.0), rf[tr.flow_dst] / jnp.maximum(nr[tr.flow_dst], 1.0))
    x = jnp.where(m & (x > z), x, 0.0)
    rate = jnp.where(m, x, rate)
    sf = sf - _segsum(x, tr.flow_src, P)
    rf = rf - _segsum(x, tr.flow_dst, P)
    return rate, sf, rf


def _greedy_fill(st: Static, tr: Trace, s: State, rate, sf, rf, flow_order_key, P: int):
    """Hand leftover capacity flow by flow in ``flow_order_key`` order: each flow gets min(free send, free recv).

    Only the first flow (in order) of each (sender, receiver) pair can get anything (it exhausts one end), so
    the sequential pass is done on port pairs: in rounds, every pair that comes first at both its ports among
    still-viable pairs takes its share; those pairs touch disjoint ports, so this equals the sequential order.
    """
    z = st.zero
    F = tr.flow_cof.shape[0]
    viable_f = s.alive & (sf[tr.flow_src] > z) & (rf[tr.flow_dst] > z)
    pair = tr.flow_src * P + tr.flow_dst
    key = jnp.where(viable_f, flow_order_key, IBIG)
    first = jax.ops.segment_min(key, pair, num_segments=P * P).reshape(P, P)
    cand = first < IBIG

    def cond(c):
        return c[3]

    def body(c):
        sf, rf, cand, _, got = c
        v = cand & (sf[:, None] > z) & (rf[None, :] > z)
        kk = jnp.where(v, first, IBIG)
        dom = v & (kk == jnp.min(kk, axis=1, keepdims=True)) & (kk == jnp.min(kk, axis=0, keepdims=True))
        x = jnp.where(dom, jnp.minimum(sf[:, None], rf[None, :]), 0.0)
        return sf - x.sum(1), rf - x.sum(0), cand & ~dom, jnp.any(dom), got + x

    init = (sf, rf, cand, jnp.array(True), jnp.zeros((P, P)))
    sf, rf, _, _, got = lax.while_loop(lambda c: c[3], lambda c: body(c), init)
    fidx = jnp.where(cand, first % F, F).reshape(-1)
    rate = rate.at[fidx].add(got.reshape(-1), mode="drop")
    return rate, sf, rf


def _backfill_key(st: Static, tr: Trace, s: State, cur_time, cap):
    """coflowsim's back-fill order: stable sort by (int)(start + deadline - now), ties by priority."""
    C = tr.arrival.shape[0]
    F = tr.flow_cof.shape[0]
    deadline = tr.cof_alpha / (cap / 8.0) * tr.cof_mult * 1000.0
    k = _java_int(s.start + deadline - cur_time)
    active = s.admitted & ~s.done
    prio = jnp.argsort(jnp.argsort(jnp.where(active, s.rank, jnp.inf)))
    pos = jnp.argsort(jnp.argsort(jnp.where(active, k, jnp.inf) * (C + 1.0) + prio))
    return pos[tr.flow_cof].astype(jnp.int64) * F + jnp.arange(F, dtype=jnp.int64)


def _dark(st: Static, tr: Trace, s: State, cap, P: int):
    """Aalo / coflowsim DARK: move coflows up queues by bytes sent, then per-coflow fair share in queue order."""
    C = tr.arrival.shape[0]
    z = st.zero
    active = s.admitted & ~s.done
    target = jnp.zeros(C, jnp.int32)
    k = st.dark_first_bytes
    for _ in range(st.dark_queues + 40):  # thresholds 10 MB x 10^i, far beyond any trace
        target = target + (k < s.sent).astype(jnp.int32)
        k = k * st.dark_mult
    queue, qcount, rank = s.queue, s.qcount, s.rank
    for i in range(st.dark_queues):
        inq = active & (queue == i)
        mv = inq & (qcount < target)
        qcount = jnp.where(mv, qcount + 1, qcount)
        if i + 1 < st.dark_queues:
            base = jnp.max(jnp.where(active, rank, -1.0)) + 1.0
            order = jnp.argsort(jnp.where(mv, rank, jnp.inf))
            newpos = jnp.zeros(C).at[order].set(jnp.arange(C, dtype=jnp.float64))
            rank = jnp.where(mv, base + newpos, rank)
            queue = jnp.where(mv, i + 1, queue)
    s = s._replace(queue=queue, qcount=qcount, rank=rank)
    order = jnp.argsort(jnp.where(active, queue * 1e12 + rank, jnp.inf))
    n_active = jnp.sum(active)
    # per coflow, in order: flows with both ports free share min(send/#, recv/#) of the coflow's own flows
    def body(i, carry):
        sf, rf, rate = carry
        c = order[i]
        m = s.alive & (tr.flow_cof == c) & (sf[tr.flow_src] > z) & (rf[tr.flow_dst] > z)
        ns = _segsum(m.astype(jnp.float64), tr.flow_src, P)
        nr = _segsum(m.astype(jnp.float64), tr.flow_dst, P)
        x = jnp.minimum(sf[tr.flow_src] / jnp.maximum(ns[tr.flow_src], 1.0),
                        rf[tr.flow_dst] / jnp.maximum(nr[tr.flow_dst], 1.0))
        x = jnp.where(m & (x > z), x, 0.0)
        rate = jnp.where(tr.flow_cof == c, x, rate)
        return sf - _segsum(x, tr.flow_src, P), rf - _segsum(x, tr.flow_dst, P), rate

    F = tr.flow_cof.shape[0]
    _, _, rate = lax.fori_loop(0, n_active, body, (jnp.full(P, cap), jnp.full(P, cap), jnp.zeros(F)))
    return s, rate


def _bssi_rank(tr: Trace, s: State, P: int):
    """Sincronia's BSSI order on remaining bytes (unit weights): returns a rank per coflow (0 = first)."""
    C = tr.arrival.shape[0]
    w = jnp.where(s.alive, s.rem, 0.0)
    d = jnp.concatenate([_segsum(w, tr.flow_cof * P + tr.flow_src, C * P).reshape(C, P),
                         _segsum(w, tr.flow_cof * P + tr.flow_dst, C * P).reshape(C, P)], axis=1)
    active = s.admitted & ~s.done
    n = jnp.sum(active)

    def body(k, carry):
        left, wt, rank = carry
        load = jnp.sum(jnp.where(left[:, None], d, 0.0), axis=0)
        b = jnp.argmax(load)
        db = d[:, b]
        score = jnp.where(left & (db > 0), wt / jnp.where(db > 0, db, 1.0), jnp.inf)
        # a coflow with nothing at b cannot be the bottleneck's last; fall back to any remaining one
        any_b = jnp.isfinite(jnp.min(score))
        score = jnp.where(any_b, score, jnp.where(left, wt, jnp.inf))
        last = jnp.argmin(score)
        ratio = jnp.where(any_b, wt[last] / jnp.where(db[last] > 0, db[last], 1.0), 0.0)
        wt = jnp.where(left, wt - ratio * db, wt)
        return left.at[last].set(False), wt, rank.at[last].set(n - 1 - k)

    _, _, rank = lax.fori_loop(0, n, body, (active, jnp.ones(C), jnp.full(C, jnp.inf)))
    return rank.astype(jnp.float64)


def _recompute(st: Static, tr: Trace, p: Params, s: State, cur_time, P: int):
    """New rates (and, for DARK/Sincronia, new priorities) at an admission or departure."""
    cap = p.port_bps
    F = tr.flow_cof.shape[0]
    if st.policy == "fair":
        return s
    if st.policy == "dark":
        s, rate = _dark(st, tr, s, cap, P)
        return s._replace(rate=rate)
    if st.policy == "sincronia":
        rank = _bssi_rank(tr, s, P)
        s = s._replace(rank=jnp.where(s.admitted & ~s.done, rank, jnp.inf))
        key = (jnp.argsort(jnp.argsort(s.rank))[tr.flow_cof].astype(jnp.int64) * F
               + jnp.arange(F, dtype=jnp.int64))
        rate, _, _ = _greedy_fill(st, tr, s, jnp.zeros(F), jnp.full(P, cap), jnp.full(P, cap), key, P)
        return s._replace(rate=rate)
    g_hat = _predicted_speedup(st, p, cur_time, P)
    wbytes = s.rem / g_hat[tr.flow_src]
    rank = s.rank
    if st.policy == "fvdf" and np.isfinite(st.starvation_ms):
        old = s.admitted & ~s.done & (cur_time - s.start > st.starvation_ms)
        s = s._replace(rank=jnp.where(old, s.rank - 1e9, s.rank))  # aged coflows first, in their own order
    order, n_active = _order(s)
    s = s._replace(rank=rank)
    rate, sf, rf = _madd(st, tr, s, wbytes, cap, P, order, n_active)
    key = _backfill_key(st, tr, s, cur_time, cap)
    rate, _, _ = _greedy_fill(st, tr, s, rate, sf, rf, key, P)
    return s._replace(rate=rate)


def _set_speeds(st: Static, tr: Trace, p: Params, s: State, P: int):
    """Per-flow raw bytes per quantum (and wire bytes per raw byte) from rates and the CPU available now."""
    q = st.quantum_ms / st.second_ms
    wire_step = jnp.where(s.alive, s.rate / 8.0 * q, 0.0)
    if st.policy in COMPRESSING:
        load = _segsum(jnp.where(s.alive, s.rate / 8.0, 0.0), tr.flow_src, P)
        g = _speedups(st, p, p.cpu_free[_cpu_index(s.t, p)], load)[tr.flow_src]
    else:
        g = jnp.ones_like(s.rem)
    if st.policy == "fair":
        alive = s.alive.astype(jnp.float64)
        ns = _segsum(alive, tr.flow_src, P)
        nr = _segsum(alive, tr.flow_dst, P)
        qb = p.port_bps / 8.0 * q
        wire_step = jnp.where(s.alive, jnp.minimum(qb / jnp.maximum(nr[tr.flow_dst], 1.0),
                                                   qb / jnp.maximum(ns[tr.flow_src], 1.0)), 0.0)
    return s._replace(step=wire_step * g, wire_per_raw=1.0 / g)


# --------------------------------------------------------------------------------------------- the loop


def _quanta_to_finish(st: Static, s: State):
    """Quanta until each alive flow's remaining bytes drop to ``zero`` (inf if it does not move)."""
    k = jnp.ceil((s.rem - st.zero) / jnp.where(s.step > 0, s.step, 1.0))
    return jnp.where(s.alive & (s.step > 0), jnp.maximum(k, 1.0), jnp.inf)


def _next_admission(st: Static, tr: Trace, s: State):
    C = tr.arrival.shape[0]
    arr = tr.arrival[jnp.minimum(s.nxt, C - 1)]
    b = jnp.maximum(s.next_epoch, jnp.ceil((arr - st.epoch_ms) / st.epoch_ms) * st.epoch_ms)
    return jnp.where(s.nxt < C, b, jnp.inf)


def _step(st: Static, tr: Trace, p: Params, s: State, P: int) -> State:
    C = tr.arrival.shape[0]
    R = tr.red_cof.shape[0]
    q = st.quantum_ms
    kf = _quanta_to_finish(st, s)
    active = s.admitted & ~s.done
    if st.policy == "fair":
        k_dep = jnp.min(kf)  # any flow completion changes the shares
    else:
        kr = jax.ops.segment_max(jnp.where(s.alive, kf, -1.0), tr.flow_red, num_segments=R)
        kr = jnp.where(s.red_done, -1.0, kr)
        kc = jax.ops.segment_max(kr, tr.red_cof, num_segments=C)
        k_dep = jnp.min(jnp.where(active & (kc >= 1), kc, jnp.inf))
    t_adm = _next_admission(st, tr, s)
    t_cpu = (jnp.floor(s.t / p.cpu_step_ms) + 1.0) * p.cpu_step_ms if st.policy in COMPRESSING else jnp.inf
    t_dep = s.t + q * k_dep
    t_new = jnp.minimum(jnp.minimum(t_dep, t_adm), jnp.minimum(t_cpu, st.end_ms))
    t_new = jnp.where(jnp.isfinite(t_new), t_new, st.end_ms)
    k = jnp.round((t_new - s.t) / q)
    # advance every flow k quanta
    fin = s.alive & (kf <= k)
    moved = jnp.where(fin, s.rem, jnp.where(s.alive, k * s.step, 0.0))
    rem = s.rem - moved
    alive = s.alive & ~fin
    per_red = _segsum(moved, tr.flow_red, R)
    per_cof = _segsum(moved, tr.flow_cof, C)
    wire = s.wire + _segsum(moved * s.wire_per_raw, tr.flow_cof, C)
    alive_red = _segsum(alive.astype(jnp.float64), tr.flow_red, R) > 0
    red_done = s.red_done | (s.admitted[tr.red_cof] & ~alive_red)
    cof_done = active & (_segsum((~red_done).astype(jnp.float64), tr.red_cof, C) == 0)
    departed = jnp.any(cof_done)
    s = s._replace(t=t_new, rem=rem, alive=alive, red_done=red_done, sbpr=jnp.maximum(s.sbpr - per_red, 0.0),
                   sent=s.sent + per_cof, wire=wire, done=s.done | cof_done,
                   finish=jnp.where(cof_done, t_new, s.finish), rank=jnp.where(cof_done, jnp.inf, s.rank),
                   it=s.it + 1)
    admit = (t_new == t_adm)
    cur_time = jnp.where(admit, t_adm, t_new - q)
    s = lax.cond(admit, lambda s: _admit(st, tr, s, P, p)._replace(next_epoch=t_adm + st.epoch_ms),
                 lambda s: s, s)
    need = admit | departed | (st.policy == "fair")
    s = lax.cond(need, lambda s: _recompute(st, tr, p, s, cur_time, P), lambda s: s, s)
    return _set_speeds(st, tr, p, s, P)


def _init(tr: Trace, P: int) -> State:
    C = tr.arrival.shape[0]
    F = tr.flow_cof.shape[0]
    R = tr.red_cof.shape[0]
    z = lambda n, d=jnp.float64: jnp.zeros(n, d)
    return State(
        t=jnp.array(0.0), next_epoch=jnp.array(0.0), nxt=jnp.array(0, jnp.int32), it=jnp.array(0, jnp.int32),
        rem=tr.flow_bytes, rate=z(F), step=z(F), wire_per_raw=jnp.ones(F), alive=z(F, bool), red_done=z(R, bool),
        sbpr=tr.red_orig, sent=z(C), wire=z(C), admitted=z(C, bool), done=z(C, bool), start=jnp.full(C, jnp.nan),
        finish=jnp.full(C, jnp.nan), rank=jnp.full(C, jnp.inf), key=z(C), queue=z(C, jnp.int32),
        qcount=z(C, jnp.int32))


def run_state(st: Static, tr: Trace, p: Params, P: int) -> State:
    """The whole simulation as one while loop (jit/vmap this)."""
    C = tr.arrival.shape[0]
    s = _init(tr, P)

    def cond(s):
        return (s.it < st.max_iters) & (s.t < st.end_ms) & ((s.nxt < C) | jnp.any(s.admitted & ~s.done))

    return lax.while_loop(cond, lambda s: _step(st, tr, p, s, P), s)


@partial(jax.jit, static_argnames=("st", "P"))
def _run_jit(st: Static, tr: Trace, p: Params, P: int) -> State:
    return run_state(st, tr, p, P)


@partial(jax.jit, static_argnames=("st", "P"))
def _run_vmap(st: Static, tr: Trace, p: Params, P: int) -> State:
    return jax.vmap(lambda pp: run_state(st, tr, pp, P))(p)


def simulate(ft: FlowTable, st: Static, p: Params) -> Result:
    """Run one configuration (float64 inside)."""
    with jax.enable_x64(True):
        tr = device_trace(ft)
        p = Params(*(jnp.asarray(x, jnp.float64) for x in p))
        s = jax.block_until_ready(_run_jit(st, tr, p, ft.num_ports))
        return _result(ft, st, s)


def simulate_batch(ft: FlowTable, st: Static, p: Params) -> list[Result]:
    """Run a batch of configurations (leading axis of every ``Params`` leaf) in one vmapped call."""
    with jax.enable_x64(True):
        tr = device_trace(ft)
        p = Params(*(jnp.asarray(x, jnp.float64) for x in p))
        s = jax.block_until_ready(_run_vmap(st, tr, p, ft.num_ports))
        n = int(np.asarray(s.t).shape[0])
        return [_result(ft, st, jax.tree.map(lambda x, i=i: x[i], s)) for i in range(n)]


def _result(ft: FlowTable, st: Static, s: State) -> Result:
    raw = np.where(np.asarray(s.done), ft.cof_bytes, np.nan)
    return Result(np.asarray(s.start), np.asarray(s.finish), ft.cof_arrival_ms.copy(), np.asarray(s.wire),
                  raw, int(s.it), st.second_ms)


def stack_params(ps: list[Params]) -> Params:
    return Params(*(np.stack([np.asarray(getattr(x, f), np.float64) for x in ps]) for f in Params._fields))


__all__ = ["MADD_FAMILY", "POLICIES", "Params", "Result", "Static", "device_trace", "params", "simulate",
           "simulate_batch", "stack_params", "field"]
