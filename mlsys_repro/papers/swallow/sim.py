"""Jit-compiled, event-driven coflow simulator (non-blocking big switch, flow-level fluid model, online arrivals).

The simulation is a ``lax.while_loop`` over events. Each iteration jumps to the next event (an admission epoch,
the quantum in which some coflow completes, or a CPU-load sample boundary), advances every flow analytically over
the skipped quanta, and recomputes rates where the clock conventions say so. Arrays have fixed shapes, so a batch
of configurations (bandwidth, CPU load, codec, seed, and, inside the MADD family, the policy itself) is ``vmap``-ed
through one compiled call.

Flows live in a slot buffer of ``K`` entries (only admitted, unfinished flows occupy slots). A host driver runs
the compiled loop in segments and moves the state to a larger or smaller buffer when the number of live flows
requires it (``K`` in powers of two), so the per-event cost follows the live flows rather than the whole trace.
Results do not depend on ``K``.

Clock conventions are coflowsim's by default (:class:`Static`): rates are in bit/s, a simulated second is
``second_ms`` ms, flows move ``rate/8 * quantum/second`` bytes per quantum, a flow is done when its remaining
bytes drop to ``zero`` or below, a reducer (and so a coflow) finishes at the end of the quantum in which its last
flow finishes, coflows arriving within the next ``epoch_ms`` are admitted at the epoch boundary (CCT from there,
or from the arrival with ``cct_from="arrival"``), and rates change only when a coflow is admitted or departs.

Program kinds (``Static.kind``) and policies (``POLICY_IDS``):

* ``madd``: coflowsim's CoflowSimulator family. A priority list (``fifo`` arrival; ``scf`` static length;
  ``ncf`` static width; ``lcf`` bytes left at insertion; ``sebf`` static alpha; ``fvdf`` predicted bottleneck
  disposal time, see below), MADD per coflow in that order (``Gamma`` = largest remaining bytes / free bandwidth
  over its ports, every flow at ``remaining / Gamma``), coflows meeting a saturated port share the leftover per
  flow, then a work-conserving back-fill hands out the rest flow by flow in coflowsim's deadline order
  ``(int)(start + alpha/port_rate * deadlineMult * 1000 - now)``. With compression (``Params.compress``) MADD
  runs on expected wire bytes (raw bytes / predicted speed-up of the sender) and flows dispose raw bytes faster.
* ``dark``: Aalo's D-CLAS as coflowsim's CoflowSimulatorDark (queues by bytes sent: 10 MB, x10, a coflow moves
  down once it has sent more than a threshold, an exact tie stays; FIFO in a queue by order of entry, movers
  appended in their old order; strict priority across queues, per-flow fair share inside a coflow, no back-fill).
* ``sincronia``: BSSI order recomputed at every admission and departure, greedy rates in that order.
* ``fair``: coflowsim's per-flow FAIR: each quantum a flow moves ``min(Q/#flows at its receiver,
  Q/#flows at its sender)`` bytes (``Q`` = one port-quantum), recomputed whenever a flow finishes.

Compression (``compress`` 1 = always on, 2 = Swallow's choice): a sender compresses with
``S = speed_per_core x cores x free CPU fraction`` at ratio ``r`` (compressed/original). Pipelined, a sender whose
flows use ``L`` wire bytes/s disposes raw bytes ``g = 1 + (1 - r) min(S/L, 1/r)`` times faster (compress what the
CPU can, send the rest raw); not pipelined, ``g = max(1, 1/(L/S + r))``; always on,
``g = min(S/L, 1/r)``. Every compressor (always-on and Swallow's alike) computes ``S`` from at least
``CPU_FLOOR`` of the cores: a saturated host time-shares its CPU with whichever compressor runs on it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from mlsys_repro.papers.swallow.flows import FlowTable

KINDS = ("madd", "dark", "sincronia", "fair")
POLICY_IDS = {"fifo": 0, "scf": 1, "ncf": 2, "lcf": 3, "sebf": 4, "fvdf": 5}
COMPRESS = {"none": 0, "always": 1, "swallow": 2}
IBIG = np.iinfo(np.int64).max // 4
K_MIN = 4096
CPU_FLOOR = 0.05  # share of its cores any compressor gets on a saturated host (time-shared; same for every policy)
SMALL_TRACE_FLOWS = 20_000  # below this, compilation dominates and padded batches share one program (_chunks)
CPU_SAMPLES = 512  # default length of the CPU series (same shape as the experiments', so programs are shared)


@dataclass(frozen=True)
class Static:
    """What changes the compiled program (hashable)."""

    kind: str = "madd"
    second_ms: float = 1024.0
    quantum_ms: float = 8.0
    epoch_ms: float = 10240.0
    end_ms: float = 86400.0 * 1024.0
    zero: float = 1e-3
    cct_from: str = "admission"  # or "arrival"
    dark_queues: int = 10
    dark_first_bytes: float = 10.0 * 1048576.0
    dark_mult: float = 10.0
    dark_tie_rel: float = 1e-9  # bytes sent must exceed a queue threshold by this fraction (tests/.../reference.py)
    segment_events: int = 64

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown simulator kind {self.kind!r}; known: {KINDS}")
        if self.quantum_ms <= 0 or self.second_ms <= 0 or self.epoch_ms <= 0:
            raise ValueError("second_ms, quantum_ms and epoch_ms must be positive")
        if abs(self.epoch_ms / self.quantum_ms - round(self.epoch_ms / self.quantum_ms)) > 1e-9:
            raise ValueError("epoch_ms must be a multiple of quantum_ms")
        if self.cct_from not in ("admission", "arrival"):
            raise ValueError(f"cct_from must be 'admission' or 'arrival', got {self.cct_from!r}")


class Params(NamedTuple):
    """Per-configuration numbers (vmappable leaves; build with :func:`params`)."""

    port_bps: Any  # bit/s per port and direction
    policy: Any  # POLICY_IDS (madd kind only)
    compress: Any  # COMPRESS
    ratio: Any  # compressed/original bytes: [1] (every coflow) or [C] (per coflow: its payload's compressibility)
    speed_Bps: Any  # compression speed per core, raw bytes/s: [1] or [C] like ratio
    cores: Any  # cores per port (host) usable for compression
    cpu_free: Any  # [T, P] actual free CPU fraction per 5-minute sample and port
    cpu_pred: Any  # [T, P] free CPU fraction predicted by the scheduler
    cpu_step_ms: Any  # sample length in simulated ms
    starvation_ms: Any  # fvdf aging: coflows older than this go first (inf = off)
    pipelined: Any  # 1: compression overlaps sending; 0: compress, then send


def params(port_bps: float, *, policy: str = "sebf", compress: str = "none", ratio: float | np.ndarray = 1.0,
           speed_Bps: float | np.ndarray = 0.0, cores: float = 0.0, cpu_free: np.ndarray | None = None,
           cpu_pred: np.ndarray | None = None, num_ports: int = 1, cpu_step_ms: float = 300.0 * 1024.0,
           starvation_ms: float = math.inf, pipelined: bool = True) -> Params:
    """Build :class:`Params` (numpy float64); without CPU series the CPU is taken as fully free.

    ``ratio`` and ``speed_Bps`` are scalars (one codec outcome for every coflow) or one value per coflow (the
    compressibility of each coflow's payload); configurations batched together must agree on which."""
    if port_bps <= 0:
        raise ValueError(f"port_bps must be positive, got {port_bps}")
    if policy not in POLICY_IDS:
        raise ValueError(f"unknown MADD-family policy {policy!r}; known: {sorted(POLICY_IDS)}")
    if compress not in COMPRESS:
        raise ValueError(f"compress must be one of {sorted(COMPRESS)}, got {compress!r}")
    ratio, speed_Bps = (np.atleast_1d(np.asarray(x, np.float64)) for x in (ratio, speed_Bps))
    if ratio.ndim != 1 or speed_Bps.ndim != 1:
        raise ValueError("ratio and speed_Bps must be scalars or one value per coflow")
    if not np.all((ratio > 0) & (ratio <= 1.0)):
        raise ValueError(f"compression ratio must be in (0, 1], got {ratio.min()}..{ratio.max()}")
    if compress != "none" and (np.any(speed_Bps <= 0) or cores <= 0):
        raise ValueError("compression needs a positive speed per core and number of cores")
    if cpu_free is None:
        cpu_free = np.ones((CPU_SAMPLES, num_ports))
    if cpu_pred is None:
        cpu_pred = cpu_free
    cpu_free, cpu_pred = np.asarray(cpu_free, np.float64), np.asarray(cpu_pred, np.float64)
    if cpu_free.shape != cpu_pred.shape or cpu_free.ndim != 2:
        raise ValueError(f"cpu_free and cpu_pred must be [T, P] of one shape, got {cpu_free.shape}, {cpu_pred.shape}")
    if np.any(cpu_free < 0) or np.any(cpu_free > 1) or np.any(~np.isfinite(cpu_pred)):
        raise ValueError("cpu_free must be in [0, 1] and cpu_pred finite")
    f = lambda x: np.asarray(x, np.float64)
    return Params(f(port_bps), f(POLICY_IDS[policy]), f(COMPRESS[compress]), ratio, speed_Bps, f(cores),
                  cpu_free, np.clip(cpu_pred, 0.0, 1.0), f(cpu_step_ms), f(starvation_ms), f(float(pipelined)))


def stack_params(ps: list[Params]) -> Params:
    """Batch of configurations (CPU series must share one shape)."""
    return Params(*(np.stack([np.asarray(getattr(x, f), np.float64) for x in ps]) for f in Params._fields))


class Trace(NamedTuple):
    """Device copy of a :class:`FlowTable` (shared by the batch)."""

    arrival: Any
    cof_first_red: Any
    cof_num_red: Any
    cof_first_flow: Any
    cof_flow_end: Any  # [C + 1] cumulative flows
    cof_alpha: Any
    cof_scf: Any
    cof_ncf: Any
    cof_orig: Any
    cof_mult: Any
    cof_num_map: Any
    cof_bytes: Any
    red_cof: Any
    red_port: Any
    red_orig: Any
    red_bytes: Any
    flow_cof: Any
    flow_red: Any
    flow_src: Any
    flow_dst: Any
    flow_bytes: Any
    map_cof: Any
    map_port: Any


def _bucket(n: int, lo: int) -> int:
    """Smallest power of two >= max(n, lo): traces of similar size share one compiled program."""
    return 1 << max(int(math.ceil(math.log2(max(n, 1)))), int(math.log2(lo)))


def device_trace(ft: FlowTable) -> Trace:
    """Device arrays of ``ft`` padded to power-of-two sizes with coflows that never arrive."""
    C, R, F, M = ft.num_coflows, ft.num_reducers, ft.num_flows, ft.map_cof.size
    Cp, Rp, Fp, Mp = _bucket(C + 1, 16), _bucket(R + 1, 256), _bucket(F, 4096), _bucket(M + 1, 128)
    ghost_c, ghost_r = Cp - 1, Rp - 1

    def pad(x, n, fill, dtype):
        out = np.full(n, fill, dtype)
        out[: len(x)] = x
        return jnp.asarray(out)

    f = lambda x, n, fill=0.0: pad(x, n, fill, np.float64)
    i = lambda x, n, fill=0: pad(x, n, fill, np.int32)
    ends = np.concatenate([[0], np.cumsum(ft.cof_num_flow)]).astype(np.int32)
    return Trace(
        f(ft.cof_arrival_ms, Cp, np.inf), i(ft.cof_first_red, Cp), i(ft.cof_num_red, Cp), i(ft.cof_first_flow, Cp),
        i(ends, Cp + 1, F), f(ft.cof_alpha, Cp, 1.0), f(ft.cof_scf_key, Cp), f(ft.cof_ncf_key, Cp),
        f(ft.cof_orig_bytes, Cp), f(ft.cof_deadline_mult, Cp, 1.0), f(ft.cof_num_map, Cp, 1.0), f(ft.cof_bytes, Cp),
        i(ft.red_cof, Rp, ghost_c), i(ft.red_port, Rp), f(ft.red_orig_bytes, Rp), f(ft.red_bytes, Rp),
        i(ft.flow_cof, Fp, ghost_c), i(ft.flow_red, Fp, ghost_r), i(ft.flow_src, Fp), i(ft.flow_dst, Fp),
        f(ft.flow_bytes, Fp), i(ft.map_cof, Mp, ghost_c), i(ft.map_port, Mp))


class State(NamedTuple):
    t: Any  # ms, start of the next quantum
    next_epoch: Any  # first epoch boundary not yet checked for admissions
    nxt: Any  # next coflow (arrival order) to admit
    it: Any  # events processed
    # slots [K]
    gid: Any  # global flow id (-1: empty)
    src: Any
    dst: Any
    red: Any
    cof: Any
    rem: Any  # raw bytes left
    rate: Any  # wire bit/s
    step: Any  # raw bytes per quantum
    wpr: Any  # wire bytes per raw byte at current speeds
    alive: Any
    # reducers [R] and coflows [C]
    red_done: Any
    sbpr: Any  # coflowsim shuffleBytesPerRack (LCF key)
    sent: Any  # raw bytes delivered (Aalo's bytes sent)
    wire: Any  # wire bytes
    admitted: Any
    done: Any
    start: Any
    finish: Any
    rank: Any  # priority, lower first; inf when inactive
    key: Any  # fvdf key fixed at admission
    queue: Any  # DARK queue
    qcount: Any  # DARK currentJobQueue
    peak_load: Any  # largest wire load of any port, as a fraction of its capacity, over the run (a check)


@dataclass(frozen=True)
class Result:
    """Per-coflow outcome of one configuration (times in simulated ms)."""

    start_ms: np.ndarray
    finish_ms: np.ndarray
    arrival_ms: np.ndarray
    wire_bytes: np.ndarray
    raw_bytes: np.ndarray
    sent_bytes: np.ndarray  # raw bytes delivered per coflow
    events: int
    second_ms: float
    peak_port_load: float  # max over time and ports of wire rate / capacity (<= 1 when the fabric is respected)

    @property
    def cct_ms(self) -> np.ndarray:
        return self.finish_ms - self.start_ms

    @property
    def cct_s(self) -> np.ndarray:
        return self.cct_ms / self.second_ms


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
    return jnp.floor(t / p.cpu_step_ms).astype(jnp.int32) % p.cpu_free.shape[0]


def _per_coflow(x, cof):
    """The value of a ``[1]`` or ``[C]`` per-coflow parameter for coflow indices ``cof``."""
    return x[0] if x.shape[0] == 1 else x[cof]


def _gain(p: Params, cpu_frac, load_Bps, ratio, speed):
    """Raw bytes disposed per wire byte (elementwise), for a sender with free CPU ``cpu_frac`` whose flows use
    ``load_Bps`` wire bytes/s, for payloads of compression ratio ``ratio`` at ``speed`` raw bytes/s per core.

    With payloads of several compressibilities on one host, each flow gets a share of the host's CPU in proportion
    to its wire rate [ours], so its own ``S_i / l_i`` equals ``S / L`` computed at its payload's speed."""
    s_eff = speed * p.cores * jnp.maximum(cpu_frac, CPU_FLOOR)
    load = jnp.maximum(load_Bps, 1e-300)
    inv_r = 1.0 / ratio
    g_pipe = 1.0 + (1.0 - ratio) * jnp.minimum(s_eff / load, inv_r)
    g_seq = jnp.maximum(1.0, 1.0 / (load / jnp.maximum(s_eff, 1e-300) + ratio))
    g_choice = jnp.where(p.pipelined > 0, g_pipe, g_seq)
    # always-on compression cannot fall back to raw sending (without the floor a saturated host's flows would
    # never finish); Swallow's choice may, but gets the same CPU allowance
    g_always = jnp.minimum(s_eff / load, inv_r)
    return jnp.where(p.compress == 2, g_choice, jnp.where(p.compress == 1, g_always, 1.0))


def _speedup(st: Static, p: Params, cpu_frac, load_Bps, cof=0):
    """``_gain`` for senders with CPU ``cpu_frac`` and load ``load_Bps`` carrying coflow(s) ``cof``."""
    return _gain(p, cpu_frac, load_Bps, _per_coflow(p.ratio, cof), _per_coflow(p.speed_Bps, cof))


def _predicted_speedup(st: Static, p: Params, t, ports, cof):
    """The scheduler's guess of g for coflow(s) ``cof`` sent from ``ports``: CPU predicted for now, a fully used
    port (Swallow only)."""
    cpu = p.cpu_pred[_cpu_index(t, p)][ports]
    g = _speedup(st, p, cpu, jnp.full(jnp.shape(ports), p.port_bps / 8.0), cof)
    return jnp.where(p.compress == 2, g, 1.0)


# --------------------------------------------------------------------------------------------- admission


def _insert(st: Static, tr: Trace, s: State, c, p: Params, P: int):
    """Put coflow ``c`` into the priority structure (coflowsim addToSortedJobs: before the first larger key)."""
    C = tr.arrival.shape[0]
    active = s.admitted & ~s.done & (jnp.arange(C) != c)
    last = jnp.max(jnp.where(active, s.rank, -1.0)) + 1.0
    if st.kind != "madd":
        s = s._replace(rank=s.rank.at[c].set(last))
        if st.kind == "dark":
            s = s._replace(queue=s.queue.at[c].set(0), qcount=s.qcount.at[c].set(0))
        return s
    # fvdf: predicted bottleneck disposal time (expected wire bytes at the most loaded port) at arrival
    inv_g = 1.0 / _predicted_speedup(st, p, s.t, tr.map_port, c)  # per mapper entry, coflow c's payload
    m = tr.cof_num_map[c]
    in_c = tr.map_cof == c
    send = jnp.max(jnp.where(in_c, tr.cof_bytes[c] / m * inv_g, 0.0))
    mean_inv = jnp.sum(jnp.where(in_c, inv_g, 0.0)) / m
    recv = jnp.max(jnp.where(tr.red_cof == c, tr.red_bytes * mean_inv, 0.0))
    key = s.key.at[c].set(jnp.maximum(_jmax(send), _jmax(recv)))
    left = _segsum(s.sbpr, tr.red_cof, C)
    pol = p.policy
    kall = jnp.select([pol == 1, pol == 2, pol == 3, pol == 4, pol == 5],
                      [tr.cof_scf, tr.cof_ncf, left, tr.cof_alpha, key], jnp.zeros(C))
    kc = jnp.select([pol == 1, pol == 2, pol == 3, pol == 4, pol == 5],
                    [tr.cof_scf[c], tr.cof_ncf[c], tr.cof_orig[c], tr.cof_alpha[c], key[c]], 0.0)
    before = active & (kc < kall) & (pol != 0)
    pos = jnp.min(jnp.where(before, s.rank, jnp.inf))
    pos = jnp.where(jnp.isfinite(pos), pos, last)
    rank = jnp.where(active & (s.rank >= pos), s.rank + 1.0, s.rank)
    return s._replace(rank=rank.at[c].set(pos), key=key)


def _batch_end(st: Static, tr: Trace, s: State, t_adm):
    """One past the last coflow admitted at boundary ``t_adm``."""
    return jnp.maximum(jnp.searchsorted(tr.arrival, t_adm + st.epoch_ms, side="right").astype(jnp.int32), s.nxt)


def _admit(st: Static, tr: Trace, s: State, p: Params, P: int):
    """Admit every coflow arriving by ``t + epoch`` into the priority structure and free slots."""
    end = _batch_end(st, tr, s, s.t)

    def body(c, s):
        start = s.t if st.cct_from == "admission" else tr.arrival[c]
        s = s._replace(admitted=s.admitted.at[c].set(True), start=s.start.at[c].set(start))
        return _insert(st, tr, s, c, p, P)

    s = lax.fori_loop(s.nxt, end, body, s)
    lo, hi = tr.cof_flow_end[s.nxt], tr.cof_flow_end[end]
    free = ~s.alive
    k = jnp.cumsum(free.astype(jnp.int32)) - 1
    take = free & (k < hi - lo)
    g = jnp.where(take, lo + k, s.gid)
    gi = jnp.where(take, lo + k, 0)
    pick = lambda new, old: jnp.where(take, new[gi], old)
    return s._replace(
        nxt=end, gid=g, src=pick(tr.flow_src, s.src), dst=pick(tr.flow_dst, s.dst), red=pick(tr.flow_red, s.red),
        cof=pick(tr.flow_cof, s.cof), rem=pick(tr.flow_bytes, s.rem), rate=jnp.where(take, 0.0, s.rate),
        alive=s.alive | take)


# --------------------------------------------------------------------------------------------- rate allocation


def _madd(st: Static, tr: Trace, s: State, wbytes, cap, P: int, order, n_active):
    """MADD per coflow in ``order`` on per-slot bytes ``wbytes``; then skipped coflows share the leftover."""
    C = tr.arrival.shape[0]
    z = st.zero
    w = jnp.where(s.alive, wbytes, 0.0)
    send_b = _segsum(w, s.cof * P + s.src, C * P).reshape(C, P)
    recv_b = _segsum(w, s.cof * P + s.dst, C * P).reshape(C, P)

    def body(i, carry):
        sf, rf, alpha, skip = carry
        c = order[i]
        sb, rb = send_b[c], recv_b[c]
        unknown = jnp.any((sb > 0) & (sf <= z)) | jnp.any((rb > 0) & (rf <= z))
        a = jnp.maximum(_jmax(jnp.where(sb > 0, sb * 8.0 / jnp.where(sf > z, sf, 1.0), 0.0)),
                        _jmax(jnp.where(rb > 0, rb * 8.0 / jnp.where(rf > z, rf, 1.0), 0.0)))
        sf = jnp.where(unknown, sf, sf - sb * 8.0 / a)
        rf = jnp.where(unknown, rf, rf - rb * 8.0 / a)
        return sf, rf, alpha.at[c].set(jnp.where(unknown, jnp.inf, a)), skip.at[c].set(unknown)

    init = (jnp.full(P, cap), jnp.full(P, cap), jnp.full(C, jnp.inf), jnp.zeros(C, bool))
    sf, rf, alpha, skip = lax.fori_loop(0, n_active, body, init)
    a_f = alpha[s.cof]
    rate = jnp.where(s.alive & jnp.isfinite(a_f), w * 8.0 / a_f, 0.0)
    m = s.alive & skip[s.cof] & (sf[s.src] > z) & (rf[s.dst] > z)
    mf = m.astype(jnp.float64)
    ns, nr = _segsum(mf, s.src, P), _segsum(mf, s.dst, P)
    x = jnp.minimum(sf[s.src] / jnp.maximum(ns[s.src], 1.0), rf[s.dst] / jnp.maximum(nr[s.dst], 1.0))
    x = jnp.where(m & (x > z), x, 0.0)
    rate = jnp.where(m, x, rate)
    return rate, sf - _segsum(x, s.src, P), rf - _segsum(x, s.dst, P)


def _greedy_fill(st: Static, s: State, rate, sf, rf, order_key, P: int):
    """Hand out leftover capacity flow by flow in ``order_key`` order: each flow adds min(free send, free recv).

    Only the first flow (in order) of a (sender, receiver) pair can get anything, since it exhausts one end; so
    the sequential pass runs on port pairs, in rounds: every still-viable pair that is first at both its ports
    takes its share (such pairs touch disjoint ports, so this equals the sequential order).
    """
    z = st.zero
    K = s.rem.shape[0]
    viable = s.alive & (sf[s.src] > z) & (rf[s.dst] > z)
    key = jnp.where(viable, order_key, IBIG)
    first = jax.ops.segment_min(key, s.src * P + s.dst, num_segments=P * P).reshape(P, P)
    cand = first < IBIG
    slot = jax.ops.segment_min(jnp.where(viable & (key == first.reshape(-1)[s.src * P + s.dst]), jnp.arange(K), K),
                               s.src * P + s.dst, num_segments=P * P)

    def body(c):
        sf, rf, left, _, got = c
        v = left & (sf[:, None] > z) & (rf[None, :] > z)
        kk = jnp.where(v, first, IBIG)
        dom = v & (kk == jnp.min(kk, axis=1, keepdims=True)) & (kk == jnp.min(kk, axis=0, keepdims=True))
        x = jnp.where(dom, jnp.minimum(sf[:, None], rf[None, :]), 0.0)
        return sf - x.sum(1), rf - x.sum(0), left & ~dom, jnp.any(dom), got + x

    sf, rf, _, _, got = lax.while_loop(lambda c: c[3], body, (sf, rf, cand, jnp.array(True), jnp.zeros((P, P))))
    return rate.at[slot].add(got.reshape(-1), mode="drop"), sf, rf


def _priority(s: State):
    """Position of each coflow in the priority list (active first)."""
    return jnp.argsort(jnp.argsort(jnp.where(s.admitted & ~s.done, s.rank, jnp.inf)))


def _backfill_key(tr: Trace, s: State, cur_time, cap):
    """coflowsim's back-fill order: stable sort by (int)(start + deadline - now), ties by priority; then flow id."""
    C = tr.arrival.shape[0]
    F = tr.flow_cof.shape[0]
    deadline = tr.cof_alpha / (cap / 8.0) * tr.cof_mult * 1000.0
    k = _java_int(s.start + deadline - cur_time)
    active = s.admitted & ~s.done
    pos = jnp.argsort(jnp.argsort(jnp.where(active, k, jnp.inf) * (C + 1.0) + _priority(s)))
    return pos[s.cof].astype(jnp.int64) * F + s.gid.astype(jnp.int64)


def _dark(st: Static, tr: Trace, s: State, cap, P: int):
    """Aalo / coflowsim DARK: move coflows up queues by bytes sent, then per-coflow fair share in queue order."""
    C = tr.arrival.shape[0]
    z = st.zero
    active = s.admitted & ~s.done
    target = jnp.zeros(C, jnp.int32)
    k = st.dark_first_bytes
    for _ in range(st.dark_queues + 30):  # thresholds 10 MB x 10^i, far beyond any trace
        target = target + (k * (1.0 + st.dark_tie_rel) < s.sent).astype(jnp.int32)  # exact ties stay
        k = k * st.dark_mult
    queue, qcount, rank = s.queue, s.qcount, s.rank
    for i in range(st.dark_queues):
        mv = active & (queue == i) & (qcount < target)
        qcount = jnp.where(mv, qcount + 1, qcount)
        if i + 1 < st.dark_queues:  # movers go to the end of the next queue, keeping their order
            base = jnp.max(jnp.where(active, rank, -1.0)) + 1.0
            pos = jnp.argsort(jnp.argsort(jnp.where(mv, rank, jnp.inf))).astype(jnp.float64)
            rank = jnp.where(mv, base + pos, rank)
            queue = jnp.where(mv, i + 1, queue)
    s = s._replace(queue=queue, qcount=qcount, rank=rank)
    order = jnp.argsort(jnp.where(active, queue * 1e12 + rank, jnp.inf))

    def body(i, carry):
        sf, rf, rate = carry
        c = order[i]
        mine = s.alive & (s.cof == c)
        m = mine & (sf[s.src] > z) & (rf[s.dst] > z)
        mf = m.astype(jnp.float64)
        ns, nr = _segsum(mf, s.src, P), _segsum(mf, s.dst, P)
        x = jnp.minimum(sf[s.src] / jnp.maximum(ns[s.src], 1.0), rf[s.dst] / jnp.maximum(nr[s.dst], 1.0))
        x = jnp.where(m & (x > z), x, 0.0)
        return sf - _segsum(x, s.src, P), rf - _segsum(x, s.dst, P), jnp.where(mine, x, rate)

    init = (jnp.full(P, cap), jnp.full(P, cap), jnp.zeros_like(s.rem))
    _, _, rate = lax.fori_loop(0, jnp.sum(active), body, init)
    return s._replace(rate=rate)


def _bssi_rank(tr: Trace, s: State, P: int):
    """Sincronia's BSSI order on remaining bytes (unit weights): rank 0 goes first."""
    C = tr.arrival.shape[0]
    w = jnp.where(s.alive, s.rem, 0.0)
    d = jnp.concatenate([_segsum(w, s.cof * P + s.src, C * P).reshape(C, P),
                         _segsum(w, s.cof * P + s.dst, C * P).reshape(C, P)], axis=1)
    active = s.admitted & ~s.done
    n = jnp.sum(active)

    def body(k, carry):
        left, wt, rank = carry
        b = jnp.argmax(jnp.sum(jnp.where(left[:, None], d, 0.0), axis=0))
        db = d[:, b]
        score = jnp.where(left & (db > 0), wt / jnp.where(db > 0, db, 1.0), jnp.inf)
        any_b = jnp.isfinite(jnp.min(score))
        last = jnp.argmin(jnp.where(any_b, score, jnp.where(left, 0.0, jnp.inf)))
        theta = jnp.where(any_b, wt[last] / jnp.where(db[last] > 0, db[last], 1.0), 0.0)
        wt = jnp.where(left, wt - theta * db, wt)
        return left.at[last].set(False), wt, rank.at[last].set((n - 1 - k).astype(jnp.float64))

    _, _, rank = lax.fori_loop(0, n, body, (active, jnp.ones(C), jnp.full(C, jnp.inf)))
    return rank


def _recompute(st: Static, tr: Trace, p: Params, s: State, cur_time, P: int, reorder=True):
    """New rates (and for DARK/Sincronia new priorities) at an admission or departure.

    Sincronia's greedy rates are also recomputed whenever a flow finishes (``reorder`` False: keep the order).
    """
    cap = p.port_bps
    F = tr.flow_cof.shape[0]
    if st.kind == "fair":
        return s
    if st.kind == "dark":
        return _dark(st, tr, s, cap, P)
    if st.kind == "sincronia":
        s = s._replace(rank=lax.cond(reorder, lambda s: _bssi_rank(tr, s, P), lambda s: s.rank, s))
        key = _priority(s)[s.cof].astype(jnp.int64) * F + s.gid.astype(jnp.int64)
        rate, _, _ = _greedy_fill(st, s, jnp.zeros_like(s.rem), jnp.full(P, cap), jnp.full(P, cap), key, P)
        return s._replace(rate=rate)
    wbytes = s.rem / _predicted_speedup(st, p, cur_time, s.src, s.cof)
    old = s.admitted & ~s.done & (cur_time - s.start > p.starvation_ms) & (p.policy == 5)
    eff_rank = jnp.where(old, s.rank - 1e9, s.rank)  # aged coflows first, in their own order
    active = s.admitted & ~s.done
    order = jnp.argsort(jnp.where(active, eff_rank, jnp.inf))
    rate, sf, rf = _madd(st, tr, s, wbytes, cap, P, order, jnp.sum(active))
    rate, _, _ = _greedy_fill(st, s, rate, sf, rf, _backfill_key(tr, s, cur_time, cap), P)
    return s._replace(rate=rate)


def _set_speeds(st: Static, tr: Trace, p: Params, s: State, P: int, check=True):
    """Per-slot raw bytes per quantum and wire bytes per raw byte, from rates and the CPU available now; when
    ``check``, the largest port load so far (``peak_load``) is updated."""
    s = _speeds(st, tr, p, s, P)

    def peak(s):
        wire_q = s.step * s.wpr
        cap_q = p.port_bps / 8.0 * st.quantum_ms / st.second_ms
        load = jnp.maximum(jnp.max(_segsum(wire_q, s.src, P)), jnp.max(_segsum(wire_q, s.dst, P))) / cap_q
        return s._replace(peak_load=jnp.maximum(s.peak_load, load))

    return peak(s) if check is True else lax.cond(check, peak, lambda s: s, s)


def _speeds(st: Static, tr: Trace, p: Params, s: State, P: int):
    q = st.quantum_ms / st.second_ms
    if st.kind == "fair":
        a = s.alive.astype(jnp.float64)
        ns, nr = _segsum(a, s.src, P), _segsum(a, s.dst, P)
        qb = p.port_bps / 8.0 * q
        wire_step = jnp.minimum(qb / jnp.maximum(nr[s.dst], 1.0), qb / jnp.maximum(ns[s.src], 1.0))
        return s._replace(step=jnp.where(s.alive, wire_step, 0.0), wpr=jnp.ones_like(s.rem))
    wire_step = jnp.where(s.alive, s.rate / 8.0 * q, 0.0)
    if st.kind != "madd":
        return s._replace(step=wire_step, wpr=jnp.ones_like(s.rem))
    load = _segsum(jnp.where(s.alive, s.rate / 8.0, 0.0), s.src, P)
    g = _speedup(st, p, p.cpu_free[_cpu_index(s.t, p)][s.src], load[s.src], s.cof)
    # wire bytes per raw byte: Swallow's choice sends what it could not compress raw (1/g); always-on compression
    # compresses every byte (r), leaving the link under-used when the CPU is the bottleneck
    wpr = jnp.where(p.compress == 1, _per_coflow(p.ratio, s.cof), 1.0 / g)
    return s._replace(step=wire_step * g, wpr=wpr)


# --------------------------------------------------------------------------------------------- the loop


def _quanta_to_finish(st: Static, s: State):
    """Quanta until each live flow's remaining bytes drop to ``zero`` (inf if it does not move)."""
    k = jnp.ceil((s.rem - st.zero) / jnp.where(s.step > 0, s.step, 1.0))
    return jnp.where(s.alive & (s.step > 0), jnp.maximum(k, 1.0), jnp.inf)


def _next_admission(st: Static, tr: Trace, s: State):
    C = tr.arrival.shape[0]
    arr = tr.arrival[jnp.minimum(s.nxt, C - 1)]
    b = jnp.maximum(s.next_epoch, jnp.ceil((arr - st.epoch_ms) / st.epoch_ms) * st.epoch_ms)
    return jnp.where(s.nxt < C, b, jnp.inf)


def needed_slots(st: Static, tr: Trace, s: State):
    """Live flows plus the flows of the next admission batch (what the buffer must hold next)."""
    t_adm = _next_admission(st, tr, s)
    end = jnp.where(jnp.isfinite(t_adm), _batch_end(st, tr, s, t_adm), s.nxt)
    return jnp.sum(s.alive) + tr.cof_flow_end[end] - tr.cof_flow_end[s.nxt]


def _finished(tr: Trace, s: State, end_ms: float):
    C = tr.arrival.shape[0]
    arriving = (s.nxt < C) & jnp.isfinite(tr.arrival[jnp.minimum(s.nxt, C - 1)])
    return (s.t >= end_ms) | (~arriving & ~jnp.any(s.admitted & ~s.done))


def _step(st: Static, tr: Trace, p: Params, s: State, P: int) -> State:
    C, R = tr.arrival.shape[0], tr.red_cof.shape[0]
    q = st.quantum_ms
    kf = _quanta_to_finish(st, s)
    active = s.admitted & ~s.done
    if st.kind in ("fair", "sincronia"):
        k_dep = jnp.min(kf)  # any flow completion changes the shares
    else:
        kr = jax.ops.segment_max(jnp.where(s.alive, kf, -1.0), s.red, num_segments=R)
        kc = jax.ops.segment_max(jnp.where(s.red_done, -1.0, kr), tr.red_cof, num_segments=C)
        k_dep = jnp.min(jnp.where(active & (kc >= 1), kc, jnp.inf))
    t_adm = _next_admission(st, tr, s)
    t_cpu = (jnp.floor(s.t / p.cpu_step_ms) + 1.0) * p.cpu_step_ms if st.kind == "madd" else jnp.inf
    t_cpu = jnp.where(p.compress > 0, t_cpu, jnp.inf)
    t_new = jnp.minimum(jnp.minimum(s.t + q * k_dep, t_adm), jnp.minimum(t_cpu, st.end_ms))
    k = jnp.round((t_new - s.t) / q)
    fin = s.alive & (kf <= k)
    moved = jnp.where(fin, s.rem, jnp.where(s.alive, k * s.step, 0.0))
    alive = s.alive & ~fin
    alive_red = _segsum(alive.astype(jnp.float64), s.red, R) > 0
    red_done = s.red_done | (s.admitted[tr.red_cof] & ~alive_red)
    cof_done = active & (_segsum((~red_done).astype(jnp.float64), tr.red_cof, C) == 0)
    if st.kind in ("madd", "dark"):  # per reducer: LCF's bytes left per rack; DARK's queues follow bytes sent
        per_red = _segsum(moved, s.red, R)
        sbpr = jnp.maximum(s.sbpr - per_red, 0.0) if st.kind == "madd" else s.sbpr
        sent, wire = s.sent + _segsum(per_red, tr.red_cof, C), s.wire + _segsum(moved * s.wpr, s.cof, C)
    else:  # FAIR, Sincronia: no compression (a wire byte is a raw byte); an event per flow completion, so one scatter
        sbpr, moved_c = s.sbpr, _segsum(moved, s.cof, C)
        sent, wire = s.sent + moved_c, s.wire + moved_c
    s = s._replace(
        t=t_new, rem=s.rem - moved, alive=alive, red_done=red_done, sbpr=sbpr, sent=sent, wire=wire,
        done=s.done | cof_done, finish=jnp.where(cof_done, t_new, s.finish),
        rank=jnp.where(cof_done, jnp.inf, s.rank), it=s.it + 1)
    admit = t_new == t_adm
    cur_time = jnp.where(admit, t_adm, t_new - q)
    s = lax.cond(admit, lambda s: _admit(st, tr, s, p, P)._replace(next_epoch=t_adm + st.epoch_ms), lambda s: s, s)
    reorder = admit | jnp.any(cof_done)
    need = reorder | (jnp.any(fin) & (st.kind == "sincronia"))
    if st.kind != "fair":
        s = lax.cond(need, lambda s: _recompute(st, tr, p, s, cur_time, P, reorder), lambda s: s, s)
    # FAIR's shares respect every port by construction (each flow gets at most 1/n of both its ports) and change at
    # every flow completion: its port-load check runs when flows are admitted, not at every event
    return _set_speeds(st, tr, p, s, P, check=admit if st.kind == "fair" else True)


def init_state(tr: Trace, K: int) -> State:
    C, R = tr.arrival.shape[0], tr.red_cof.shape[0]
    zf, zi = (lambda n: jnp.zeros(n, jnp.float64)), (lambda n: jnp.zeros(n, jnp.int32))
    zb = lambda n: jnp.zeros(n, bool)
    return State(
        t=jnp.array(0.0), next_epoch=jnp.array(0.0), nxt=jnp.array(0, jnp.int32), it=jnp.array(0, jnp.int32),
        gid=jnp.full(K, -1, jnp.int32), src=zi(K), dst=zi(K), red=zi(K), cof=zi(K), rem=zf(K), rate=zf(K),
        step=zf(K), wpr=jnp.ones(K), alive=zb(K), red_done=zb(R), sbpr=tr.red_orig, sent=zf(C), wire=zf(C),
        admitted=zb(C), done=zb(C), start=jnp.full(C, jnp.nan), finish=jnp.full(C, jnp.nan),
        rank=jnp.full(C, jnp.inf), key=zf(C), queue=zi(C), qcount=zi(C), peak_load=jnp.array(0.0))


def run_segment(st: Static, tr: Trace, p: Params, s: State, stop_it, P: int) -> State:
    """Process events until ``stop_it`` events, the end, or the buffer is too small for the next admission."""
    K = s.rem.shape[0]

    def cond(s):
        return (s.it < stop_it) & ~_finished(tr, s, st.end_ms) & (needed_slots(st, tr, s) <= K)

    return lax.while_loop(cond, lambda s: _step(st, tr, p, s, P), s)


@partial(jax.jit, static_argnames=("st", "P"))
def _segment_batch(st: Static, tr: Trace, p: Params, s: State, stop_it, P: int):
    seg = jax.vmap(lambda pp, ss: run_segment(st, tr, pp, ss, stop_it, P))(p, s)
    need = jax.vmap(lambda ss: needed_slots(st, tr, ss))(seg)
    return seg, need, jax.vmap(lambda ss: _finished(tr, ss, st.end_ms))(seg)


@partial(jax.jit, static_argnames=("st", "P"))
def _segment_one(st: Static, tr: Trace, p: Params, s: State, stop_it, P: int):
    """``_segment_batch`` for a batch of one, without ``vmap``: its ``lax.cond``s stay real branches (under
    ``vmap`` a batched predicate turns them into selects, so admission and rate recomputation would run at every
    event), which makes one configuration several times cheaper per event."""
    one = lambda x: x[0]
    seg = run_segment(st, tr, jax.tree.map(one, p), jax.tree.map(one, s), stop_it, P)
    add = lambda x: x[None]
    return (jax.tree.map(add, seg), add(needed_slots(st, tr, seg)), add(_finished(tr, seg, st.end_ms)))


def _size_class(n: int, F: int) -> int:
    k = K_MIN
    while k < n:
        k *= 2
    return max(K_MIN, min(k, 1 << int(math.ceil(math.log2(max(F, 1))))))


def _resize(s: State, K: int) -> State:
    """Move every live slot (per configuration) into a buffer of ``K`` slots."""
    a = np.asarray(s.alive)
    B, K0 = a.shape
    order = np.argsort(~a, axis=1, kind="stable")[:, :K]
    if np.any(a.sum(1) > K):
        raise ValueError("resize would drop live flows")
    rows = np.arange(B)[:, None]
    out = {}
    for name in ("gid", "src", "dst", "red", "cof", "rem", "rate", "step", "wpr", "alive"):
        x = np.asarray(getattr(s, name))
        y = x[rows, order] if K <= K0 else np.concatenate(
            [x[rows, order], np.zeros((B, K - K0), x.dtype)], axis=1)
        if K > K0:
            if name == "gid":
                y[:, K0:] = -1
            if name == "wpr":
                y[:, K0:] = 1.0
        out[name] = jnp.asarray(y)
    return s._replace(**out)


def run_batch(ft: FlowTable, st: Static, p: Params, log=None) -> tuple[State, dict]:
    """Simulate a batch of configurations (leading axis of every ``Params`` leaf); float64 throughout."""
    P = ft.num_ports
    with jax.enable_x64(True):
        tr = device_trace(ft)
        p = Params(*(jnp.asarray(x, jnp.float64) for x in p))
        B = int(p.port_bps.shape[0])
        s0 = init_state(tr, K_MIN)
        need0 = int(needed_slots(st, tr, s0))
        K = _size_class(need0, ft.num_flows)
        s = jax.tree.map(lambda x: jnp.broadcast_to(x, (B, *x.shape)), init_state(tr, K))
        stats = {"segments": 0, "resizes": 0, "sizes": [K]}
        while True:
            stop = jnp.max(s.it) + st.segment_events
            s, need, fin = (_segment_one if B == 1 else _segment_batch)(st, tr, p, s, stop, P)
            stats["segments"] += 1
            if bool(np.all(np.asarray(fin))):
                break
            need = int(np.max(np.where(np.asarray(fin), 0, np.asarray(need))))
            K_new = _size_class(need, ft.num_flows)
            if K_new > K or (K_new < K and need * 4 <= K):  # grow at once; shrink when a quarter suffices
                s = _resize(s, K_new)
                K = K_new
                stats["resizes"] += 1
                stats["sizes"].append(K)
                if log:
                    log(f"buffer -> {K} slots at t={float(jnp.max(s.t)) / st.second_ms:.0f} s")
        return jax.block_until_ready(s), stats


def _chunks(n: int, small: int = 8) -> list[tuple[int, int]]:
    """Split ``n`` configurations of a small trace into vmapped batches, as (real, padded) sizes: batches of
    ``small``, the last one padded so that compiled programs are reused, except that a single remaining
    configuration runs alone (the deterministic baselines)."""
    out = []
    while n > 0:
        b = min(small, n)
        out.append((b, 1 if n == 1 else small))
        n -= b
    return out


def simulate_batch(ft: FlowTable, st: Static, p: Params, log=None, workers: int | None = None) -> list[Result]:
    """Results of a batch of configurations (leading axis of every ``Params`` leaf); see :func:`simulate_many`."""
    n = int(np.asarray(p.port_bps).shape[0])
    return simulate_many(ft, [(st, Params(*(np.asarray(x)[i] for x in p))) for i in range(n)], log, workers)


def simulate_many(ft: FlowTable, jobs: Sequence[tuple[Static, Params]], log=None, workers: int | None = None,
                  on_result: Callable[[int], None] | None = None,
                  batch_below: int = SMALL_TRACE_FLOWS) -> list[Result]:
    """Results of configurations of any kinds (one unbatched :class:`Params` each), in the order given.

    Large traces (at least ``batch_below`` flows; simulation dominates): every configuration runs alone,
    unbatched (its ``lax.cond``s stay branches), ``workers`` at a time (default: one per CPU core) in threads. XLA
    runs each call on the calling thread's core, so a batch of k costs about k / workers single runs; a ``vmap``-ed
    batch would cost more than k single runs, because its loop runs to its slowest member's event count at its
    largest member's buffer size, with every branch taken as a select. The longest runs (FAIR and Sincronia, which
    stop at every flow completion; low bandwidth) start first. Small traces (compilation dominates: tests, smoke
    runs, fewer flows): configurations sharing a compiled program run as padded ``vmap``-ed batches of up to 8.
    ``on_result(i)`` is called (from a worker thread) when configuration ``i`` is done."""
    out: list[Result | None] = [None] * len(jobs)
    if ft.num_flows >= batch_below:
        def one(i: int) -> None:
            st, p = jobs[i]
            s, _ = run_batch(ft, st, stack_params([p]), log)
            out[i] = _result(ft, st, jax.tree.map(lambda x: np.asarray(x[0]), s))
            if on_result:
                on_result(i)

        cost = lambda i: (jobs[i][0].kind in ("fair", "sincronia"), -float(jobs[i][1].port_bps))
        order = sorted(range(len(jobs)), key=cost, reverse=True)
        with ThreadPoolExecutor(max(1, workers or os.cpu_count() or 1)) as pool:
            list(pool.map(one, order))  # re-raises the first error
        return out  # type: ignore[return-value]
    groups: dict[Static, list[int]] = {}
    for i, (st, _) in enumerate(jobs):
        groups.setdefault(st, []).append(i)
    for st, idx in groups.items():
        lo = 0
        for real, padded in _chunks(len(idx)):
            take = [idx[min(lo + j, lo + real - 1)] for j in range(padded)]
            s, _ = run_batch(ft, st, stack_params([jobs[i][1] for i in take]), log)
            for j in range(real):
                out[take[j]] = _result(ft, st, jax.tree.map(lambda x, j=j: np.asarray(x[j]), s))
                if on_result:
                    on_result(take[j])
            lo += real
    return out  # type: ignore[return-value]


def simulate(ft: FlowTable, st: Static, p: Params) -> Result:
    """One configuration."""
    return simulate_batch(ft, st, stack_params([p]))[0]


def _result(ft: FlowTable, st: Static, s) -> Result:
    C = ft.num_coflows
    done = np.asarray(s.done)[:C]
    raw = np.where(done, ft.cof_bytes, np.nan)
    return Result(np.asarray(s.start)[:C], np.where(done, np.asarray(s.finish)[:C], np.nan),
                  ft.cof_arrival_ms.copy(), np.asarray(s.wire)[:C], raw, np.asarray(s.sent)[:C], int(s.it),
                  st.second_ms, float(s.peak_load))
