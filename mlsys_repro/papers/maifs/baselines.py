"""Heuristic schedulers on the round-based cluster simulator, each a pure ``schedule(state) -> state``.

A heuristic is (job order, allocation, preemption):

* order ``fifo`` (arrival), ``srtf`` (remaining fair-share time), ``las`` (attained GPU-time, continuous 2D-LAS),
  ``tiresias`` (2D-LAS discretised into priority queues on attained GPU-time, FIFO inside a queue, optional
  starvation promotion; Gu et al., NSDI'19), ``drf`` (smallest dominant share of the job's demand first;
  Ghodsi et al., NSDI'11), ``tetris`` (per decision the pending job with the best alignment of its demand with a
  server's free resources plus an SRPT term; Grandl et al., SIGCOMM'14).
* allocation ``fair`` (GPU-proportional share of CPU and memory: 3 CPUs + 62.5 GB per GPU on Synergy's server),
  ``greedy`` (the job's profiled best demand, or wait: Synergy-greedy, and the fixed multi-resource demand that
  DRF and Tetris schedule with), ``tune`` (Synergy-tune: best demand, else the demand capped at fair share, else
  take back CPU/memory that running peers hold above fair share on the chosen servers, Mohan et al., OSDI'22).
  As in Synergy's workload model, a job's best demand is capped at what one server holds (``cpus / gpus`` per
  GPU) and a job wider than a server asks for fair share.
* preemptive policies recompute every round which jobs deserve GPUs (Synergy's per-round lease): walking the
  priority order, a job is in the round's set if its GPUs fit the remaining budget (skip-greedy). Running jobs
  outside the set are preempted (they keep their progress); a running job inside it keeps its placement (lease
  extension). Non-preemptive policies only fill free capacity. Synergy re-allocates every job every round, so
  a job squeezed to fair share regains its best demand when resources free up; with lease extension the same
  happens through :func:`mlsys_repro.common.sim.cluster.top_up` (tune only), in priority order.

Placement follows Synergy (:func:`mlsys_repro.common.sim.cluster.fill_plan`). Each round at most ``lookahead`` pending
jobs are tried (a scheduler's bounded queue scan).

All parameters are traced (:class:`HeuristicParams`), so every heuristic runs through one compiled simulator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.common.sim.cluster import (
    EMPTY,
    FREE,
    INT_MAX,
    PENDING,
    RUNNING,
    Cluster,
    JobTable,
    SimState,
    fill_plan,
    float_key,
    int_key,
    job_usage,
    pack_keys,
    place,
    preempt,
    prio_bits,
    priority_order,
    server_free,
    slot_attr,
    top_up,
)
from mlsys_repro.papers.maifs.schemas import ALLOCATIONS, MAX_QUEUES, ORDERS, HeuristicPolicy, check_heuristic


class ModelDemand(NamedTuple):
    """Per-model profiled best demand per GPU (CPU cores, GB), as device arrays ``[M]``."""

    best_cpu: jax.Array
    best_mem: jax.Array


class HeuristicParams(NamedTuple):
    order: jax.Array  # int32 index into ORDERS
    allocation: jax.Array  # int32 index into ALLOCATIONS
    preemptive: jax.Array  # bool
    thresholds_gpu_s: jax.Array  # [MAX_QUEUES - 1] float32, +inf padded
    starvation: jax.Array  # float32, 0 = off
    tetris_eps: jax.Array  # float32


@dataclass(frozen=True)
class Heuristic:
    """A heuristic scheduler's parameters (see the module docstring)."""

    order: str = "fifo"
    allocation: str = "fair"
    preemptive: bool = True
    tiresias_thresholds_gpu_h: tuple[float, ...] = (1.0, 10.0)
    starvation_factor: float = 0.0  # Tiresias: pending > factor * executed time -> back to queue 0 (0 = off)
    tetris_epsilon: float = 1.0

    def __post_init__(self) -> None:
        th = check_heuristic(self.order, self.allocation, self.tiresias_thresholds_gpu_h, self.starvation_factor,
                             self.tetris_epsilon)
        object.__setattr__(self, "tiresias_thresholds_gpu_h", th)

    @classmethod
    def of(cls, pol: HeuristicPolicy) -> Heuristic:
        """The scheduler a policy config describes."""
        return cls(pol.order, pol.allocation, pol.preemptive, tuple(pol.tiresias_thresholds_gpu_h),
                   pol.starvation_factor, pol.tetris_epsilon)

    def params(self) -> HeuristicParams:
        th = np.full(MAX_QUEUES - 1, np.inf, np.float32)
        th[:len(self.tiresias_thresholds_gpu_h)] = np.asarray(self.tiresias_thresholds_gpu_h) * 3600.0
        return HeuristicParams(jnp.asarray(ORDERS.index(self.order), jnp.int32),
                               jnp.asarray(ALLOCATIONS.index(self.allocation), jnp.int32),
                               jnp.asarray(self.preemptive), jnp.asarray(th),
                               jnp.asarray(self.starvation_factor, jnp.float32),
                               jnp.asarray(self.tetris_epsilon, jnp.float32))


# ---------------------------------------------------------------------------------------------- priorities


def tiresias_queue(attained_gpu_s: jax.Array, thresholds_gpu_s: jax.Array) -> jax.Array:
    """Queue index (0 = highest priority) from attained GPU-seconds."""
    return (attained_gpu_s[:, None] >= thresholds_gpu_s[None, :]).sum(1).astype(jnp.int32)


def priority_keys(hp: HeuristicParams, cl: Cluster, md: ModelDemand, state: SimState, jobs: JobTable
                  ) -> jax.Array:
    """Packed int32 keys (lower first) for every active slot; FIFO (job index) breaks ties where it matters."""
    c = state.status.shape[0]
    bits = prio_bits(c)
    job = jnp.maximum(state.slot_job, 0)
    qbits = 2

    def fifo(_):
        return int_key(job, bits)

    def srtf(_):
        return float_key(state.remaining, bits)

    def las(_):
        return float_key(state.attained, bits)

    def tiresias(_):
        q = tiresias_queue(state.attained, hp.thresholds_gpu_s)
        starving = (hp.starvation > 0) & (state.status == PENDING) & (state.run_s > 0) & (
            state.t - state.wait_since > hp.starvation * state.run_s)
        q = jnp.where(starving, 0, q)
        return (q << (bits - qbits)) | int_key(job, bits - qbits)

    def drf(_):
        g = slot_attr(state, jobs, "gpus").astype(jnp.float32)
        m = slot_attr(state, jobs, "model")
        tot = cl.cap.sum(0)
        share = jnp.maximum(g / tot[0], jnp.maximum(g * md.best_cpu[m] / tot[1], g * md.best_mem[m] / tot[2]))
        return float_key(share, bits)

    prio = jax.lax.switch(hp.order, [fifo, srtf, las, tiresias, drf, fifo], None)
    return pack_keys(prio, state.status != EMPTY)


def skip_greedy(order: jax.Array, valid: jax.Array, gpus_slot: jax.Array, budget, lookahead: int) -> jax.Array:
    """Slots that get GPUs this round: walk ``order`` and take a job when its GPUs fit the remaining budget.

    The longest prefix that fits is taken at once; after the first job that does not fit, the next
    ``lookahead`` jobs are checked one by one while budget remains.
    """
    c = order.shape[0]
    g = jnp.where(valid, gpus_slot[order], 0)
    cs = jnp.cumsum(g)
    sel = valid & (cs <= budget)
    f = sel.sum()
    rem = budget - jnp.where(f > 0, cs[jnp.maximum(f - 1, 0)], 0)

    def cond(carry):
        i, r, _ = carry
        return (i < lookahead) & (r > 0) & (f + i < c)

    def body(carry):
        i, r, s = carry
        p = f + i
        ok = valid[p] & (g[p] <= r) & (g[p] > 0)
        return i + 1, r - jnp.where(ok, g[p], 0), s.at[p].set(s[p] | ok)

    _, _, sel = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), rem, sel))
    return jnp.zeros(c, bool).at[order].set(sel)


# ---------------------------------------------------------------------------------------------- allocation


def best_demand(cl: Cluster, md: ModelDemand, model, gpus) -> tuple[jax.Array, jax.Array]:
    """``[S]`` per-GPU best demand capped as in Synergy: at most one server's CPU/memory for the whole job, and
    fair share for a job wider than the server."""
    fair = cl.fair_per_gpu
    g = jnp.asarray(gpus, jnp.float32)
    wide = g > cl.cap[:, 0]
    cpu = jnp.where(wide, fair[:, 0], jnp.minimum(md.best_cpu[model], cl.cap[:, 1] / g))
    mem = jnp.where(wide, fair[:, 1], jnp.minimum(md.best_mem[model], cl.cap[:, 2] / g))
    return cpu, mem


def _plan(cl: Cluster, state: SimState, g, cpu_pg, mem_pg):
    return fill_plan(server_free(cl, state.occ), g, cpu_pg, mem_pg, g > 1)


def reclaim_from_peers(state: SimState, cl: Cluster, g, cpu_pg: jax.Array, mem_pg: jax.Array) -> SimState:
    """Synergy-tune's last resort: on the servers the job would use, reset running peers that hold CPU/memory
    above fair share back to fair share (single-server peers and the largest per-GPU holders first) until the
    job's fair-capped demand fits there. Peers keep their GPUs; only their speed changes."""
    occ = state.occ
    c = state.status.shape[0]
    free = server_free(cl, occ)
    s = free.shape[0]
    nfree = free[:, 0].astype(jnp.int32)
    idx = jnp.arange(s, dtype=jnp.int32)
    # the servers Synergy's _get_underutilized_servers picks
    first_big = jnp.argmin(jnp.where(nfree >= g, idx, INT_MAX))
    use_one = (g > 1) & (nfree >= g).any()
    sk = jnp.sort(jnp.where(nfree > 0, nfree * s + idx, INT_MAX))
    valid = sk != INT_MAX
    order = jnp.where(valid, sk % s, 0)
    ks = jnp.where(valid, nfree[order], 0)
    take_sorted = jnp.clip(g - (jnp.cumsum(ks) - ks), 0, ks)
    spread = jnp.zeros(s, jnp.int32).at[order].add(take_sorted)
    tgt = jnp.where(use_one, (idx == first_big).astype(jnp.int32) * g, spread).astype(jnp.float32)
    need_c = jnp.maximum(tgt * cpu_pg - free[:, 1], 0.0)
    need_m = jnp.maximum(tgt * mem_pg - free[:, 2], 0.0)
    fair = cl.fair_per_gpu
    o = occ.owner
    exc_c = jnp.where(o >= 0, jnp.maximum(occ.cpu - fair[:, :1], 0.0), 0.0)
    exc_m = jnp.where(o >= 0, jnp.maximum(occ.mem - fair[:, 1:], 0.0), 0.0)
    # global peer order: (servers spanned, -cpu/GPU, -mem/GPU)
    u = job_usage(occ, c)
    gg = jnp.maximum(u.gpus, 1).astype(jnp.float32)
    comp = (u.servers.astype(jnp.float32) * 1e4 - jnp.minimum(u.cpu / gg, 99.0) * 1e2
            - jnp.minimum(u.mem / gg, 999.0) * 0.1)
    porder, _ = priority_order(pack_keys(float_key(comp, prio_bits(c)), u.gpus > 0))
    rank = jnp.zeros(c, jnp.int32).at[porder].set(jnp.arange(c, dtype=jnp.int32))
    gsz = o.shape[1]
    cell_rank = jnp.where(o >= 0, rank[jnp.clip(o, 0, c - 1)], INT_MAX // (2 * gsz))
    # within each server: cells sorted by their owner's rank; a peer is reset while the need is unmet
    ck = jnp.sort(cell_rank * gsz + jnp.arange(gsz, dtype=jnp.int32)[None, :], axis=1) % gsz
    ec = jnp.take_along_axis(exc_c, ck, axis=1)
    em = jnp.take_along_axis(exc_m, ck, axis=1)
    before_c = jnp.cumsum(ec, axis=1) - ec
    before_m = jnp.cumsum(em, axis=1) - em
    unmet = (before_c < need_c[:, None] - 1e-6) | (before_m < need_m[:, None] - 1e-6)
    hit_sorted = unmet & ((ec > 0) | (em > 0)) & ((need_c > 0) | (need_m > 0))[:, None]
    owner_sorted = jnp.take_along_axis(o, ck, axis=1)
    reset = jnp.zeros(c + 1, bool).at[jnp.where(hit_sorted, owner_sorted, c)].set(True)[:c]
    cell_reset = (o >= 0) & reset[jnp.clip(o, 0, c - 1)]
    occ = occ._replace(cpu=jnp.where(cell_reset, jnp.minimum(occ.cpu, fair[:, :1]), occ.cpu),
                       mem=jnp.where(cell_reset, jnp.minimum(occ.mem, fair[:, 1:]), occ.mem))
    return state._replace(occ=occ)


def allocate(hp: HeuristicParams, cl: Cluster, md: ModelDemand, jobs: JobTable, state: SimState, slot
             ) -> SimState:
    """Try to start pending ``slot`` under the allocation mode; it stays pending if it cannot be placed."""
    job = jnp.maximum(state.slot_job[slot], 0)
    g, m = jobs.gpus[job], jobs.model[job]
    fair = cl.fair_per_gpu
    bc, bm = best_demand(cl, md, m, g)
    is_fair = hp.allocation == 0
    cpu_pg = jnp.where(is_fair, fair[:, 0], bc)
    mem_pg = jnp.where(is_fair, fair[:, 1], bm)
    take, ok = _plan(cl, state, g, cpu_pg, mem_pg)
    cap_c, cap_m = jnp.minimum(cpu_pg, fair[:, 0]), jnp.minimum(mem_pg, fair[:, 1])

    def direct(st):
        return place(st, jobs, slot, take, cpu_pg, mem_pg, ok)

    def fallback(st):
        t2, ok2 = _plan(cl, st, g, cap_c, cap_m)

        def reclaim(st2):
            st3 = reclaim_from_peers(st2, cl, g, cap_c, cap_m)
            t3, ok3 = _plan(cl, st3, g, cap_c, cap_m)
            st3 = st3._replace(occ=jax.tree.map(lambda a, b: jnp.where(ok3, a, b), st3.occ, st2.occ))
            return place(st3, jobs, slot, t3, cap_c, cap_m, ok3)

        return jax.lax.cond(ok2, lambda s2: place(s2, jobs, slot, t2, cap_c, cap_m, ok2), reclaim, st)

    return jax.lax.cond(ok | (hp.allocation != 2), direct, fallback, state)


def _tetris_scores(hp: HeuristicParams, cl: Cluster, md: ModelDemand, jobs: JobTable, state: SimState,
                   cand: jax.Array, tried: jax.Array) -> jax.Array:
    """Alignment of each candidate's (capped best) demand with the best-fitting server's free resources, plus
    ``eps`` x an SRPT term in (0, 1]; -inf for candidates that fit nowhere or were tried."""
    c = state.status.shape[0]
    ok = (cand < c) & ~tried
    job = jnp.maximum(state.slot_job[jnp.clip(cand, 0, c - 1)], 0)
    g = jobs.gpus[job]
    m = jobs.model[job]
    free = server_free(cl, state.occ)
    bc, bm = jax.vmap(lambda mm, gg: best_demand(cl, md, mm, gg))(m, g)  # [L, S]
    per_srv = jnp.minimum(g[:, None].astype(jnp.float32), cl.cap[None, :, 0])
    d = jnp.stack([per_srv, per_srv * bc, per_srv * bm], -1)  # [L, S, 3]
    fits = jnp.all(d <= free[None] + 1e-4, axis=-1)
    align = jnp.where(fits, ((d / cl.cap[None]) * (free / cl.cap)[None]).sum(-1), -1.0).max(-1)
    rem = jnp.where(ok, state.remaining[jnp.clip(cand, 0, c - 1)], jnp.inf)
    srpt = jnp.min(rem) / jnp.maximum(rem, 1e-6)
    return jnp.where(ok & (align >= 0), align + hp.tetris_eps * srpt, -jnp.inf)


# ---------------------------------------------------------------------------------------------- rounds


def candidates(order: jax.Array, valid: jax.Array, status: jax.Array, lookahead: int) -> jax.Array:
    """The first ``lookahead`` pending slots in priority order (``C`` = none)."""
    c = order.shape[0]
    pend = valid & (status[order] == PENDING)
    pos = jnp.nonzero(pend, size=min(lookahead, c), fill_value=c)[0]
    return jnp.where(pos < c, order[jnp.clip(pos, 0, c - 1)], c)


def make_schedule(hp: HeuristicParams, cl: Cluster, md: ModelDemand, jobs: JobTable, lookahead: int = 64):
    """``schedule(state) -> state`` for one round of the heuristic ``hp`` (traced parameters)."""
    total_gpus = cl.cap[:, 0].sum().astype(jnp.int32)
    is_tetris = hp.order == ORDERS.index("tetris")

    def schedule(state: SimState) -> SimState:
        c = state.status.shape[0]
        order, valid = priority_order(priority_keys(hp, cl, md, state, jobs))

        def preempt_outside(st):
            desired = skip_greedy(order, valid, slot_attr(st, jobs, "gpus"), total_gpus, lookahead)
            return preempt(st, (st.status == RUNNING) & ~desired)

        state = jax.lax.cond(hp.preemptive, preempt_outside, lambda st: st, state)
        cand = candidates(order, valid, state.status, lookahead)
        n = cand.shape[0]

        def pick(i, st, tried):
            def tetris(_):
                sc = _tetris_scores(hp, cl, md, jobs, st, cand, tried)
                return jnp.argmax(sc).astype(jnp.int32), jnp.isfinite(sc.max())

            def ordered(_):
                k = jnp.minimum(i, n - 1)
                return k, (i < n) & (cand[k] < c)

            return jax.lax.cond(is_tetris, tetris, ordered, None)

        def cond(carry):
            i, st, tried, k, has = carry
            return has & (i < n) & ((st.occ.owner == FREE).sum() > 0)

        def body(carry):
            i, st, tried, k, _ = carry
            st = allocate(hp, cl, md, jobs, st, cand[k])
            tried = tried.at[k].set(True)
            k2, has2 = pick(i + 1, st, tried)
            return i + 1, st, tried, k2, has2

        tried0 = jnp.zeros(n, bool)
        k0, has0 = pick(jnp.zeros((), jnp.int32), state, tried0)
        _, state, _, _, _ = jax.lax.while_loop(cond, body, (jnp.zeros((), jnp.int32), state, tried0, k0, has0))

        def grow(st):
            rank = jnp.zeros(c, jnp.int32).at[order].set(jnp.arange(c, dtype=jnp.int32))
            o = st.occ.owner
            oc = jnp.clip(o, 0, c - 1)
            job = jnp.maximum(st.slot_job[oc], 0)
            m, g = jobs.model[job], jobs.gpus[job].astype(jnp.float32)
            fair = cl.fair_per_gpu
            wide = g > cl.cap[:, :1]
            tc = jnp.where(wide, fair[:, :1], jnp.minimum(md.best_cpu[m], cl.cap[:, 1:2] / g))
            tm = jnp.where(wide, fair[:, 1:], jnp.minimum(md.best_mem[m], cl.cap[:, 2:3] / g))
            tc = jnp.where(o >= 0, tc, 0.0)
            tm = jnp.where(o >= 0, tm, 0.0)
            return st._replace(occ=top_up(cl, st.occ, tc, tm, rank))

        return jax.lax.cond(hp.allocation == 2, grow, lambda st: st, state)

    return schedule


__all__ = ["Heuristic", "HeuristicParams", "ModelDemand", "allocate",
           "best_demand", "candidates", "make_schedule", "priority_keys", "reclaim_from_peers", "skip_greedy",
           "tiresias_queue"]
