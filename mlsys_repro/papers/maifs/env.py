"""The MAIFS multi-agent scheduling environment (JaxMARL-style API on :mod:`mlsys_repro.common.rl.marl`).

Agents [our design; the paper does not say]: the cluster's servers are split into ``num_agents`` equal,
contiguous groups (racks); agent ``i`` makes the placement *and* (CPU, memory) allocation decisions for its
group. A decision step is one sub-step of a scheduling round: every agent picks one of the ``K`` oldest pending
jobs (or no-op) and an allocation level for it; jobs are then placed in agent order on the picking agent's
servers (Synergy's best-fit placement inside the group; a job wider than a group spills over the whole cluster).

* Observation per agent (a dict): ``self`` (free GPU/CPU/memory fraction of each of its servers, its totals),
  ``glob`` (cluster free fractions, queue and running counts, sub-step), ``jobs`` ``[K, F]`` (per candidate:
  present, GPUs, remaining fair-share hours, waiting hours, profiled speed at the minimal / fair / best
  allocation, placement penalty, attained hours, queue position, whether it fits on this agent's servers, on one
  of them, whether it is wider than a group), ``levels`` ``[K, L, 3]`` (per allocation level: profiled speed,
  CPU and memory per GPU relative to fair share), ``mask`` ``[K + 1]`` (valid picks; no-op only when nothing
  fits: work-conserving, like every baseline).
* Action per agent: ``int32[2]`` = (pick in ``0..K`` with ``K`` = no-op, level in ``0..3``). Levels per GPU:
  ``minimal`` (1 CPU, 20.83 GB: the grid's smallest), ``fair`` (the server's GPU-proportional share),
  ``mid`` (halfway fair -> best), ``best`` (the profiled best demand, capped to one server as in Synergy). If
  the level does not fit, the placement falls back to fair, then minimal; the chosen level stays the job's
  target and free CPU/memory later tops it up (as Synergy re-grants a tuned-down job its demand). The
  non-fungible ablation restricts the policy to ``fair`` (fair shares always fit, so nothing else changes).
* Picks of the same job by two agents, or picks that no longer fit after an earlier agent's placement, fail and
  are counted in ``info["conflicts"]``; the policy's coordination graph exists to avoid them.
* The clock advances one round (Synergy's 300 s lease) after ``max_substeps`` sub-steps, or when no agent has a
  valid pick, in which case it jumps to the round of the next completion or arrival (nothing can change before
  it). Each step does a bounded amount of work, so vmapped environments stay in lockstep; steps in which no
  agent can act are all-no-op steps that the learner masks out.
* Reward (shared): ``-(accrued job time + makespan_weight * elapsed time while jobs remain) / (3600 * scale)``
  over the step, so an episode's return is ``-(sum of JCTs + makespan_weight * makespan)`` in scaled hours.
  ``info["elapsed_rounds"]`` gives the semi-MDP discount exponent for GAE.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import jax
import jax.numpy as jnp

from mlsys_repro.common.rl.marl import MultiAgentEnv
from mlsys_repro.common.sim.cluster import (
    PENDING,
    RUNNING,
    Cluster,
    JobTable,
    SimConfig,
    SimState,
    SpeedModel,
    admit,
    advance,
    charge_restore,
    fill_plan,
    gpus_that_fit,
    init_state,
    is_done,
    job_speed,
    job_usage,
    jump_idle,
    place,
    preempt,
    profile_tput,
    server_free,
    slot_attr,
    top_up,
)
from mlsys_repro.papers.maifs.baselines import ModelDemand, best_demand

LEVELS = ("minimal", "fair", "mid", "best")
JOB_FEATURES = 16
PRIV_FEATURES = 5  # critic-only inputs (MaifsEnv.privileged)
GPUS_FEATURE, REMAINING_FEATURE, WIDE_FEATURE = 1, 2, 12  # job features: GPUs / 8, log1p(remaining h), wide
RUNNING_FEATURE = 14  # index of the "this entry is a running job (release option)" job feature


@dataclass(frozen=True)
class EnvConfig:
    """The environment's static settings, built from an experiment's params by
    :func:`mlsys_repro.papers.maifs.pipeline.env_config`: the experiment knobs have no defaults here (their one set of
    defaults is :class:`mlsys_repro.papers.maifs.schemas.MaifsParams`)."""

    num_agents: int
    num_candidates: int
    max_substeps: int
    round_s: float
    makespan_weight: float
    reward_scale: float
    num_short: int  # candidate entries chosen by shortest remaining work (the rest: oldest pending)
    num_running: int  # R running jobs per agent whose lease it may release (0 = non-preemptive agents)
    conflict_blocks: bool  # a failed pick blocks the agent until the next round
    restore_s: float  # checkpoint-restore cost of a net preemption (s of work), charged as in the heuristics' sim
    max_rounds: int = 50_000  # safety cap on an episode's rounds (not an experiment knob)

    def __post_init__(self) -> None:
        if self.num_agents < 1 or self.num_candidates < 1 or self.max_substeps < 1:
            raise ValueError("num_agents, num_candidates and max_substeps must be >= 1")
        if not 0 <= self.num_short <= self.num_candidates or self.num_running < 0:
            raise ValueError("need 0 <= num_short <= num_candidates and num_running >= 0")
        if self.round_s <= 0 or self.reward_scale <= 0 or self.makespan_weight < 0 or self.restore_s < 0:
            raise ValueError("round_s and reward_scale must be > 0, makespan_weight and restore_s >= 0")


class EnvState(NamedTuple):
    sim: SimState
    jobs: JobTable  # this episode's window
    target: jax.Array  # [C] int32 allocation level each placed job asked for (top-up goal)
    substep: jax.Array
    conflicts: jax.Array  # failed picks this episode
    decisions: jax.Array  # successful picks this episode
    blocked: jax.Array  # [A] bool: the agent's pick failed this round; it waits for the next round
    releases: jax.Array  # leases released (preemptions) this episode
    steps: jax.Array  # decision sub-steps taken this episode (the cost of simulating it)
    was_running: jax.Array  # [C] bool: running when the round's decisions began (net preemptions pay restore_s)


class MaifsEnv(MultiAgentEnv):
    """Multi-agent scheduling over a set of job windows (an episode = one window, drawn at reset).

    Every array (cluster, speed tables, windows) may be a tracer: build the environment inside a jitted function
    and pass the arrays as arguments, so one compilation serves every trace and configuration of the same shape.
    """

    def __init__(self, cluster: Cluster, speed: SpeedModel, demand: ModelDemand, windows: JobTable,
                 cfg: EnvConfig):
        s = cluster.cap.shape[0]
        if s % cfg.num_agents:
            raise ValueError(f"{s} servers cannot be split into {cfg.num_agents} equal agent groups")
        self.cl, self.sm, self.md, self.windows, self.cfg = cluster, speed, demand, windows, cfg
        self.agents = tuple(f"agent_{i}" for i in range(cfg.num_agents))
        per = s // cfg.num_agents
        self.group = jnp.arange(s)[None, :] // per == jnp.arange(cfg.num_agents)[:, None]  # [A, S]
        self.group_gpus = (self.group * cluster.cap[None, :, 0]).sum(1)  # [A]
        self.num_windows = int(windows.arrival.shape[0])
        self.sim_cfg = SimConfig(round_s=cfg.round_s, restore_s=cfg.restore_s)

    # ------------------------------------------------------------------------------------------ helpers

    def _window(self, w) -> JobTable:
        return jax.tree.map(lambda x: x[w], self.windows)

    def candidates(self, sim: SimState) -> jax.Array:
        """``[K]`` pending slots (``C`` = none): the ``K - num_short`` oldest, then the ``num_short`` with the
        least remaining work among the others (the queue a preemptive SRTF scan would look at first)."""
        c = sim.status.shape[0]
        pend = sim.status == PENDING
        k_old = self.cfg.num_candidates - self.cfg.num_short
        old = jnp.nonzero(pend, size=k_old, fill_value=c)[0].astype(jnp.int32)
        if not self.cfg.num_short:
            return old
        taken = jnp.zeros(c + 1, bool).at[old].set(True)[:c]
        key = jnp.where(pend & ~taken, sim.remaining, jnp.inf)
        order = jnp.argsort(key)[:self.cfg.num_short].astype(jnp.int32)
        short = jnp.where(jnp.isfinite(key[order]), order, c)
        return jnp.concatenate([old, short])

    def running_slots(self, sim: SimState) -> jax.Array:
        """``[A, R]`` running slots holding GPUs on each agent's servers, oldest first (``C`` = none)."""
        c = sim.status.shape[0]
        r = self.cfg.num_running
        o = sim.occ.owner  # [S, G]
        on = jnp.zeros((o.shape[0], c + 1), bool).at[jnp.arange(o.shape[0])[:, None], jnp.where(o >= 0, o, c)].set(
            True)[:, :c]  # [S, C]
        holds = ((self.group.astype(jnp.int32) @ on.astype(jnp.int32)) > 0) & (sim.status == RUNNING)[None]
        return jax.vmap(lambda h: jnp.nonzero(h, size=r, fill_value=c)[0].astype(jnp.int32))(holds)

    def _release_mask(self, sim: SimState, runc: jax.Array) -> jax.Array:
        """``[A, R]`` release options: a running job, and some job is waiting for GPUs (else releasing is moot)."""
        c = sim.status.shape[0]
        return (runc < c) & (sim.status == PENDING).any()

    def _levels(self, model, gpus) -> jax.Array:
        """``[L, S, 2]`` per-GPU (cpu, mem) of each level on each server for a job."""
        fair = self.cl.fair_per_gpu
        bc, bm = best_demand(self.cl, self.md, model, gpus)
        best = jnp.stack([bc, bm], -1)
        mn = jnp.broadcast_to(jnp.stack([self.sm.cpu_levels[0], self.sm.mem_levels[0]]), fair.shape)
        return jnp.stack([mn, fair, 0.5 * (fair + best), best])

    def level_values(self, level: jax.Array, model: jax.Array, gpus: jax.Array) -> tuple[jax.Array, jax.Array]:
        """Per-GPU (cpu, mem) of ``level`` for the owners of an ``[S, G]`` table (elementwise per server)."""
        cap = self.cl.cap
        fair = self.cl.fair_per_gpu
        g = gpus.astype(jnp.float32)
        wide = g > cap[:, :1]
        bc = jnp.where(wide, fair[:, :1], jnp.minimum(self.md.best_cpu[model], cap[:, 1:2] / g))
        bm = jnp.where(wide, fair[:, 1:], jnp.minimum(self.md.best_mem[model], cap[:, 2:3] / g))
        opts_c = jnp.stack([jnp.full_like(bc, self.sm.cpu_levels[0]), jnp.broadcast_to(fair[:, :1], bc.shape),
                            0.5 * (fair[:, :1] + bc), bc])
        opts_m = jnp.stack([jnp.full_like(bm, self.sm.mem_levels[0]), jnp.broadcast_to(fair[:, 1:], bm.shape),
                            0.5 * (fair[:, 1:] + bm), bm])
        lv = jnp.clip(level, 0, len(LEVELS) - 1)[None]
        return (jnp.take_along_axis(opts_c, lv, 0)[0], jnp.take_along_axis(opts_m, lv, 0)[0])

    def _masks(self, sim: SimState, jobs: JobTable, cand: jax.Array, blocked: jax.Array | None = None,
               substep=None) -> tuple[jax.Array, jax.Array, jax.Array]:
        """``fits[A, K]`` (minimal allocation, agent scope), ``one[A, K]`` (on one of its servers), pick mask
        ``[A, K + R + 1]``: placements that fit, lease releases (only at a lease boundary: substep 0 of a
        round, one release per agent per round), no-op only when nothing else is valid for the agent. A blocked
        agent (its pick failed this round) may only no-op. Releases are free (the job keeps its progress), so a
        release option at every sub-step let trained policies churn (release and re-place the same jobs up to
        ``max_substeps`` times a round: 65 releases per job and 30x longer episodes, measured 2026-12-04)."""
        c = sim.status.shape[0]
        free = server_free(self.cl, sim.occ)
        ok = cand < c
        job = jnp.maximum(sim.slot_job[jnp.clip(cand, 0, c - 1)], 0)
        g = jobs.gpus[job]
        mn_c, mn_m = self.sm.cpu_levels[0], self.sm.mem_levels[0]
        k = gpus_that_fit(free, jnp.full(free.shape[0], mn_c), jnp.full(free.shape[0], mn_m))  # [S]
        per_agent = (self.group * k[None]).sum(1)  # [A]
        one = ((self.group * k[None])[:, None, :] >= g[None, :, None]).any(-1)  # [A, K]
        wide = g[None, :] > self.group_gpus[:, None]
        fits = jnp.where(wide, k.sum() >= g[None, :], per_agent[:, None] >= g[None, :]) & ok[None]
        a = fits.shape[0]
        blocked = jnp.zeros(a, bool) if blocked is None else blocked
        fits = fits & ~blocked[:, None]
        if self.cfg.num_running:
            rel = self._release_mask(sim, self.running_slots(sim))
            lease = jnp.asarray(True) if substep is None else (substep == 0)
            rel = rel & ~blocked[:, None] & lease
        else:
            rel = jnp.zeros((a, 0), bool)
        mask = jnp.concatenate([fits, rel, ~fits.any(1, keepdims=True)], axis=1)
        return fits, one & ok[None], mask

    def _any_valid(self, st: EnvState) -> jax.Array:
        """Whether any agent has a real decision: a placement that fits, or a release at a lease boundary."""
        fits, _, mask = self._masks(st.sim, st.jobs, self.candidates(st.sim), st.blocked, st.substep)
        kk = self.cfg.num_candidates
        return fits.any() | mask[:, kk:kk + self.cfg.num_running].any()

    # ------------------------------------------------------------------------------------------ API

    def get_obs(self, state: EnvState) -> dict:
        sim, jobs = state.sim, state.jobs
        c = sim.status.shape[0]
        cand = self.candidates(sim)
        fits, one, mask = self._masks(sim, jobs, cand, state.blocked, state.substep)
        free = server_free(self.cl, sim.occ)
        frac = free / self.cl.cap  # [S, 3]
        a = self.cfg.num_agents
        per = frac.shape[0] // a
        own = frac.reshape(a, per * 3)
        own_tot = (self.group[:, :, None] * free[None]).sum(1) / (self.group[:, :, None] * self.cl.cap[None]).sum(1)
        n_pend = (sim.status == PENDING).sum()
        n_run = (sim.status == RUNNING).sum()
        glob = jnp.concatenate([free.sum(0) / self.cl.cap.sum(0),
                                jnp.stack([jnp.log1p(n_pend) / 5, jnp.log1p(n_run) / 5,
                                           state.substep / self.cfg.max_substeps])])
        kk, r = self.cfg.num_candidates, self.cfg.num_running
        runc = self.running_slots(sim) if r else jnp.zeros((a, 0), jnp.int32)  # [A, R]
        ent = jnp.concatenate([jnp.broadcast_to(cand[None], (a, kk)), runc], 1)  # [A, K + R] slots
        is_run = jnp.arange(kk + r) >= kk
        ok = ent < c
        cs = jnp.clip(ent, 0, c - 1)
        job = jnp.maximum(sim.slot_job[cs], 0)
        g = jobs.gpus[job]  # [A, K + R]
        m = jobs.model[job]
        lv = jax.vmap(jax.vmap(self._levels))(m, g)  # [A, K + R, L, S, 2]
        sp = jax.vmap(jax.vmap(
            lambda mm, l: profile_tput(self.sm, jnp.full(l.shape[:2], mm), l[..., 0], l[..., 1])))(m, lv)
        sp = sp[..., 0]  # [A, K + R, L] speed of each level on server 0's fair share (homogeneous servers)
        penalty = jnp.asarray(self.sm.penalty)[m]  # throughput kept when spread over servers
        wait = jnp.maximum(sim.t - jobs.arrival[job], 0.0)
        usage = job_usage(sim.occ, c)
        cur = job_speed(self.sm, slot_attr(sim, jobs, "model"), usage)[cs]  # current speed of running entries
        pos = jnp.where(is_run, 0.0, jnp.arange(kk + r) / max(kk, 1)).astype(jnp.float32)
        fits_all = jnp.concatenate([fits, jnp.zeros((a, r), bool)], 1)
        one_all = jnp.concatenate([one, jnp.zeros((a, r), bool)], 1)
        jobs_f = jnp.stack([
            ok.astype(jnp.float32), g / 8.0, jnp.log1p(sim.remaining[cs] / 3600.0), jnp.log1p(wait / 3600.0),
            sp[..., 0], sp[..., 1], sp[..., 3], penalty, jnp.log1p(sim.attained[cs] / 3600.0),
            jnp.broadcast_to(pos[None], ok.shape), fits_all.astype(jnp.float32), one_all.astype(jnp.float32),
            (g > self.group_gpus[:, None]).astype(jnp.float32), ok.astype(jnp.float32),
            jnp.broadcast_to(is_run[None], ok.shape).astype(jnp.float32), jnp.where(is_run[None], cur, 0.0),
        ], -1) * ok[..., None]  # [A, K + R, JOB_FEATURES]
        self_f = jnp.concatenate([own, own_tot], -1)
        fair0 = self.cl.fair_per_gpu[0]
        level_f = jnp.concatenate([sp[..., None], lv[:, :, :, 0, :] / fair0], -1) * ok[..., None, None]
        level_mask = jnp.ones((a, len(LEVELS)), bool)
        kfit = gpus_that_fit(free, jnp.full(free.shape[0], self.sm.cpu_levels[0]),
                             jnp.full(free.shape[0], self.sm.mem_levels[0]))  # [S] GPUs placeable at minimal
        cap = jnp.stack([(self.group * kfit[None]).sum(1), jnp.broadcast_to(kfit.sum(), (a,))], -1).astype(
            jnp.float32)  # [A, 2]: placeable GPUs in the agent's group and in the cluster (sequential masks)
        priv = self.privileged(state)
        obs = {ag: {"self": self_f[i], "glob": glob, "jobs": jobs_f[i], "levels": level_f[i], "mask": mask[i],
                    "level_mask": level_mask[i], "cap": cap[i], "priv": priv} for i, ag in enumerate(self.agents)}
        if r:  # the running slot behind each release option (the sampler masks a job an earlier agent released)
            run_ids = jnp.where(runc < c, runc, -1).astype(jnp.int32)  # [A, R]
            for i, ag in enumerate(self.agents):
                obs[ag]["run_ids"] = run_ids[i]
        return obs

    def privileged(self, state: EnvState) -> jax.Array:
        """``[PRIV_FEATURES]`` inputs only the centralised critic reads (training-time information an agent does
        not have, for an input-dependent value): the share of the window's jobs still to arrive, their fair-share
        GPU-hours, the pending GPU-hours, the time since the first arrival and the window's offered load."""
        sim, jobs = state.sim, state.jobs
        n = jobs.arrival.shape[0]
        real = jnp.arange(n) < jobs.num_jobs
        future = real & (jnp.arange(n) >= sim.next_job)
        gpu_h = jobs.work * jobs.gpus / 3600.0
        pend = sim.status == PENDING
        pend_h = jnp.where(pend, sim.remaining * jobs.gpus[jnp.clip(sim.slot_job, 0, n - 1)], 0.0).sum() / 3600.0
        first = jobs.arrival[0]
        last = jnp.max(jnp.where(real, jobs.arrival, first))
        span_h = jnp.maximum(last - first, 3600.0) / 3600.0
        load = jnp.where(real, gpu_h, 0.0).sum() / (span_h * self.cl.cap[:, 0].sum())
        return jnp.stack([future.sum() / jnp.maximum(jobs.num_jobs, 1),
                          jnp.log1p(jnp.where(future, gpu_h, 0.0).sum()) / 5, jnp.log1p(pend_h) / 5,
                          jnp.log1p(jnp.maximum(sim.t - first, 0.0) / 3600.0) / 3, load]).astype(jnp.float32)

    def get_avail_actions(self, state: EnvState) -> dict:
        obs = self.get_obs(state)
        return {ag: {"job": obs[ag]["mask"], "level": obs[ag]["level_mask"]} for ag in self.agents}

    def reset_env(self, key: jax.Array):
        w = jax.random.randint(key, (), 0, self.num_windows)
        return self.reset_window(w)

    def reset_window(self, w):
        jobs = self._window(w)
        sim = init_state(self.cl, jobs, self.sim_cfg)
        c = sim.status.shape[0]
        sim = jump_idle(sim, jobs, self.cfg.round_s)
        sim = admit(sim, jobs, self.sim_cfg)  # the window's first arrivals
        st = EnvState(sim, jobs, jnp.ones(c, jnp.int32), jnp.zeros((), jnp.int32),
                      jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32), jnp.zeros(self.cfg.num_agents, bool),
                      jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32), sim.status == RUNNING)
        return self.get_obs(st), st

    # ------------------------------------------------------------------------------------------ dynamics

    def _accrued(self, sim: SimState, jobs: JobTable) -> tuple[jax.Array, jax.Array]:
        """Job-seconds accrued by arrived jobs up to ``sim.t`` and the makespan clock (s)."""
        t = sim.t
        n = jobs.arrival.shape[0]
        real = jnp.arange(n) < jobs.num_jobs
        arrived = real & (jobs.arrival <= t)
        end = jnp.where(sim.finish >= 0, jnp.minimum(sim.finish, t), t)
        jobs_s = jnp.where(arrived, end - jobs.arrival, 0.0).sum()
        done = is_done(sim, jobs)
        last = jnp.where(done, jnp.max(jnp.where(real, sim.finish, 0.0)), t)
        span = jnp.maximum(jnp.minimum(t, last) - jobs.arrival[0], 0.0)
        return jobs_s, span

    def _round(self, st: EnvState, stuck) -> EnvState:
        """Advance the clock: one round, or (when no agent can act, ``stuck``) straight to the round of the next
        completion or arrival, since nothing can change before it (non-preemptive agents)."""
        sim, jobs = st.sim, st.jobs
        sim = charge_restore(sim, st.was_running & (sim.status == PENDING), self.cfg.restore_s)
        c = sim.status.shape[0]
        n = jobs.arrival.shape[0]
        running = sim.status == RUNNING
        speed = jnp.where(running, job_speed(self.sm, slot_attr(sim, jobs, "model"), job_usage(sim.occ, c)), 0.0)
        fin = jnp.where(running & (speed > 0), sim.remaining / jnp.maximum(speed, 1e-9), jnp.inf).min()
        nxt = jnp.where(sim.next_job < jobs.num_jobs, jobs.arrival[jnp.clip(sim.next_job, 0, n - 1)] - sim.t,
                        jnp.inf)
        k = jnp.ceil(jnp.minimum(fin, nxt) / self.cfg.round_s - 1e-6)
        k = jnp.where(stuck & jnp.isfinite(k), jnp.clip(k, 1.0, 1e6), 1.0)
        sim = advance(self.cl, self.sm, sim, jobs, self.cfg.round_s * k)
        sim = sim._replace(t=sim.t + self.cfg.round_s * k,
                           stats=sim.stats._replace(rounds=sim.stats.rounds + k.astype(jnp.int32) - 1))
        sim = jump_idle(sim, jobs, self.cfg.round_s)
        sim = admit(sim, jobs, self.sim_cfg)
        return st._replace(sim=sim, substep=jnp.zeros((), jnp.int32), blocked=jnp.zeros_like(st.blocked),
                           was_running=sim.status == RUNNING)

    def _advance(self, st: EnvState, force) -> tuple[EnvState, jax.Array, jax.Array]:
        """Advance the clock once if ``force`` or no agent can act. Returns the state, the elapsed rounds and the
        reward of the elapsed time. Bounded work per step keeps vmapped environments in lockstep."""
        s0, m0 = self._accrued(st.sim, st.jobs)
        t0 = st.sim.t
        stuck = ~self._any_valid(st)
        go = (force | stuck) & ~is_done(st.sim, st.jobs)
        st = jax.lax.cond(go, lambda s: self._round(s, stuck), lambda s: s, st)
        s1, m1 = self._accrued(st.sim, st.jobs)
        reward = -((s1 - s0) + self.cfg.makespan_weight * (m1 - m0)) / (3600.0 * self.cfg.reward_scale)
        return st, (st.sim.t - t0) / self.cfg.round_s, reward

    def apply(self, st: EnvState, picks: jax.Array, levels: jax.Array) -> tuple[EnvState, jax.Array, jax.Array]:
        """Carry out every agent's pick in agent order (place a candidate, or release the lease of one of its
        running jobs: a preemption that keeps the job's progress); returns the state, successes and failures
        ``[A]``. A pick that fails (the job was taken or released by an earlier agent, or no longer fits) is a
        conflict; with ``conflict_blocks`` the agent then waits for the next round (its binding cycle is lost)."""
        sim, jobs = st.sim, st.jobs
        c = sim.status.shape[0]
        cand = self.candidates(sim)
        kk, r = self.cfg.num_candidates, self.cfg.num_running
        runc = self.running_slots(sim) if r else jnp.zeros((self.cfg.num_agents, 1), jnp.int32) + c

        def one(carry, x):
            s, target = carry
            i, pick, level = x
            is_rel = (pick >= kk) & (pick < kk + r)
            rslot = runc[i, jnp.clip(pick - kk, 0, runc.shape[1] - 1)]
            rsc = jnp.clip(rslot, 0, c - 1)
            rel_ok = is_rel & (rslot < c) & (s.status[rsc] == RUNNING)
            s = preempt(s, (jnp.arange(c) == rsc) & rel_ok)
            slot = jnp.where(pick < kk, cand[jnp.clip(pick, 0, kk - 1)], c)
            sc = jnp.clip(slot, 0, c - 1)
            live = (slot < c) & (s.status[sc] == PENDING)
            job = jnp.maximum(s.slot_job[sc], 0)
            g, m = jobs.gpus[job], jobs.model[job]
            lv = self._levels(m, g)  # [L, S, 2]
            wide = g > self.group_gpus[i]
            scope = jnp.where(wide, jnp.ones_like(self.group[i]), self.group[i])
            free = server_free(self.cl, s.occ) * scope[:, None]

            def attempt(lvl):
                take, ok = fill_plan(free, g, lv[lvl, :, 0], lv[lvl, :, 1], g > 1)
                return take, ok

            tries = [level, jnp.ones_like(level), jnp.zeros_like(level)]  # requested, fair, minimal
            take, ok, used = jnp.zeros(free.shape[0], jnp.int32), jnp.zeros((), bool), level
            for lvl in reversed(tries):
                t_, ok_ = attempt(lvl)
                take = jnp.where(ok_, t_, take)
                used = jnp.where(ok_, lvl, used)
                ok = ok | ok_
            ok = ok & live
            s = place(s, jobs, sc, take, lv[used, :, 0], lv[used, :, 1], ok)
            target = target.at[sc].set(jnp.where(ok, level, target[sc]))
            return (s, target), (ok | rel_ok, ((pick < kk) & ~ok) | (is_rel & ~rel_ok))

        (sim, target), (succ, fail) = jax.lax.scan(
            one, (sim, st.target), (jnp.arange(self.cfg.num_agents), picks, levels))
        # free CPU/memory tops running jobs up to their chosen level (oldest first)
        o = sim.occ.owner
        oc = jnp.clip(o, 0, c - 1)
        job = jnp.maximum(sim.slot_job[oc], 0)
        tc, tm = self.level_values(target[oc], jobs.model[job], jobs.gpus[job])
        tc, tm = jnp.where(o >= 0, tc, 0.0), jnp.where(o >= 0, tm, 0.0)
        sim = sim._replace(occ=top_up(self.cl, sim.occ, tc, tm, jnp.arange(c, dtype=jnp.int32)))
        return st._replace(sim=sim, target=target), succ, fail

    def step_env(self, key: jax.Array, state: EnvState, actions: dict):
        acts = jnp.stack([jnp.asarray(actions[a]) for a in self.agents])  # [A, 2]
        kk = self.cfg.num_candidates
        released = ((acts[:, 0] >= kk) & (acts[:, 0] < kk + self.cfg.num_running))
        st, succ, fail = self.apply(state, acts[:, 0], acts[:, 1])
        blocked = st.blocked | (fail & self.cfg.conflict_blocks)
        st = st._replace(substep=st.substep + 1, conflicts=st.conflicts + fail.sum(),
                         decisions=st.decisions + succ.sum(), blocked=blocked,
                         releases=st.releases + (released & succ).sum(), steps=st.steps + 1)
        force = st.substep >= self.cfg.max_substeps
        st, elapsed, reward = self._advance(st, force)
        done = is_done(st.sim, st.jobs) | (st.sim.stats.rounds >= self.cfg.max_rounds)
        info = episode_info(st, done)
        info["elapsed_rounds"] = elapsed
        rewards = {a: reward for a in self.agents}
        dones = {a: done for a in self.agents}
        dones["__all__"] = done
        return self.get_obs(st), st, rewards, dones, info


def episode_info(st: EnvState, done) -> dict:
    """Mean JCT (h), makespan (h), conflicts of the episode (meaningful where ``done``)."""
    jobs, sim = st.jobs, st.sim
    n = jobs.arrival.shape[0]
    real = jnp.arange(n) < jobs.num_jobs
    fin = jnp.where(real, sim.finish, 0.0)
    jct = jnp.where(real, fin - jobs.arrival, 0.0).sum() / jnp.maximum(jobs.num_jobs, 1) / 3600.0
    span = (jnp.max(fin) - jobs.arrival[0]) / 3600.0
    return {"done": done, "jct_h": jct, "makespan_h": span, "conflicts": st.conflicts,
            "decisions": st.decisions, "releases": st.releases, "steps": st.steps}


__all__ = ["GPUS_FEATURE", "JOB_FEATURES", "LEVELS", "PRIV_FEATURES", "REMAINING_FEATURE", "RUNNING_FEATURE",
           "WIDE_FEATURE", "EnvConfig", "EnvState", "MaifsEnv", "episode_info"]
