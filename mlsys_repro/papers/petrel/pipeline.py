"""The glue: train the A3C agent, run (policy, seed) jobs together on one engine, one hardware condition each.

``run_jobs`` builds one :class:`~mlsys_repro.papers.petrel.sim.PSSim` per (policy, seed) and advances all of them
together (:func:`~mlsys_repro.papers.petrel.sim.run_batch`), so gradient requests of every run are computed in shared
batches. The task and the trained agents are shared by the experiments of a run through the run cache (``ctx.cache``),
keyed by the configuration that determines them (and, for per-seed agents, the evaluation seed).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from mlsys_repro.common.repro import RunContext
from mlsys_repro.papers.petrel.a3c import AgentSet, agent_stream, train_agents, with_episodes
from mlsys_repro.papers.petrel.engine import GradEngine, Task
from mlsys_repro.papers.petrel.hardware import with_speed_ratio, with_workers
from mlsys_repro.papers.petrel.protocols import make_protocol
from mlsys_repro.papers.petrel.schemas import PetrelParams, PSClusterHardware, SyncPolicy
from mlsys_repro.papers.petrel.sim import Grouper, PSSim, run_batch


@dataclass
class RunResult:
    policy: str
    seed: int
    metrics: dict[str, float]
    curve: list[tuple[float, float, float, float]]
    decisions: list[tuple[float, int]]


def make_sim(task: Task, engine: GradEngine, hw: PSClusterHardware, policy: SyncPolicy, params: PetrelParams,
             seed: int, agent=None, record: bool = False,
             grouper: Grouper | None = None, max_time_s: float | None = None, target: float | None = None) -> PSSim:
    gate = None
    if grouper is None:
        grouper, gate = make_protocol(policy, hw.num_workers, hw.communities(), seed, agent)
    return PSSim(
        engine, hw, grouper, gate, seed=seed, grad_lr=params.grad_lr(hw.num_workers),
        batch_size=params.batch_per_worker(hw.num_workers),
        eval_every_grads=params.eval_every_grads if target is None else 0,
        max_time_s=max_time_s if max_time_s is not None else params.max_steps * hw.base_step_s,
        target_accuracy=params.target_accuracy if target is None else target,
        decision_every_s=policy.decision_every_steps * hw.base_step_s, ewma_alpha=policy.ewma_alpha,
        label=f"{policy.name}/s{seed}", record=record, momentum=params.momentum)


def _agent_key(policy: SyncPolicy, hw: PSClusterHardware, params: PetrelParams, episodes: int) -> str:
    hw_base = dataclasses.replace(hw, name="", description="", class_speeds=[1.0], class_names=[],
                                  class_fractions=[], num_workers=max(policy.a3c.train_workers),
                                  prior_communities=0)
    if policy.a3c.train_link_gbps:  # the agent trains on its own link rates: the hardware's do not matter
        hw_base = dataclasses.replace(hw_base, ps_bandwidth_gbps=1.0, worker_bandwidth_gbps=1.0)
    return repr((policy.a3c, episodes, policy.action_levels, policy.decision_every_steps, policy.ewma_alpha,
                 hw_base, params.dataset, params.model, params.hidden, params.global_batch, params.lr, params.momentum,
                 params.n_train, params.probe_size, params.engine_mode))


def training_hardware(hw: PSClusterHardware, n: int, ratio: float, classes: int = 4,
                      link_gbps: float = 0.0) -> PSClusterHardware:
    """The A3C training cluster: ``hw``'s network (links at ``link_gbps`` if > 0) and noise, ``classes`` geometric
    speed classes, ``n`` workers."""
    base = dataclasses.replace(hw, class_speeds=[1.0] * classes, class_names=[], class_fractions=[],
                               prior_communities=0, num_workers=max(n, classes))
    if link_gbps > 0:
        base = with_link_gbps(base, link_gbps)
    return with_workers(with_speed_ratio(base, ratio), n)


def with_link_gbps(hw: PSClusterHardware, gbps: float) -> PSClusterHardware:
    """The same cluster with every NIC (PS and workers) at ``gbps``."""
    return dataclasses.replace(hw, ps_bandwidth_gbps=float(gbps), worker_bandwidth_gbps=float(gbps),
                               name=f"{hw.name}_{gbps:g}gbps")


def agents_for(ctx: RunContext, policy: SyncPolicy, task: Task, seeds: Sequence[int]) -> AgentSet:
    """The CASP A3C agents for this hardware family (see :func:`_agent_key`): one shared agent, trained once per run
    and configuration, or with ``a3c.per_seed`` one per evaluation seed in ``seeds`` (each cached on its own; the
    seeds not yet trained in this run are trained together, :func:`~mlsys_repro.papers.petrel.a3c.train_agents`)."""
    hw, params = ctx.hardware, ctx.params
    cfg = with_episodes(policy.a3c, params.a3c_episodes, params.a3c_episode_decisions)
    decision_steps = policy.decision_every_steps
    log = ctx.progress.log
    key = _agent_key(policy, hw, params, cfg.episodes)

    def make_train_sim(hw_seed: int, cond: tuple[int, float, float], grouper: Grouper, engine: GradEngine) -> PSSim:
        n, ratio, gbps = cond
        thw = training_hardware(hw, n, ratio, link_gbps=gbps)
        horizon = cfg.episode_decisions * decision_steps * thw.base_step_s * (1 - 1e-9)
        return make_sim(task, engine, thw, policy, params, seed=hw_seed, grouper=grouper, max_time_s=horizon,
                        target=2.0)

    def train(eval_seeds: Sequence[int | None]):
        names = ["shared" if s is None else f"seed {s}" for s in eval_seeds]

        def progress(a: int, ep: int, ret: float) -> None:
            if (ep + 1) % 24 == 0 or ep + 1 == cfg.episodes:
                log(f"a3c ({names[a]}) episode {ep + 1}/{cfg.episodes}: return {ret:.3f}")

        return train_agents(cfg, policy.action_levels, make_train_sim,
                            lambda: GradEngine(task, mode=params.engine_mode),
                            [agent_stream(cfg, s) for s in eval_seeds], progress)

    if not cfg.per_seed:
        return AgentSet(shared=ctx.cache.get("petrel.a3c_agent", key, lambda: train([None])[0]))
    seeds = sorted({int(s) for s in seeds})
    missing = [s for s in seeds if ("petrel.a3c_agent", (key, s)) not in ctx.cache]
    trained = dict(zip(missing, train(missing), strict=True)) if missing else {}
    return AgentSet(by_seed={s: ctx.cache.get("petrel.a3c_agent", (key, s), lambda s=s: trained[s]) for s in seeds})


def run_policies(task: Task, hw: PSClusterHardware, policies: Mapping[str, SyncPolicy], seeds: Sequence[int],
                 params: PetrelParams, agents: Mapping[str, AgentSet] | None = None,
                 progress: Callable[[PSSim], None] | None = None) -> list[RunResult]:
    """Run every (policy, seed) on ``hw`` to the target accuracy (or the horizon), batched together."""
    jobs = [(name, pol, int(s)) for name, pol in policies.items() for s in seeds]
    return run_jobs(task, hw, jobs, params, agents, progress)


def run_jobs(task: Task, hw: PSClusterHardware, jobs: Sequence[tuple[str, SyncPolicy, int]], params: PetrelParams,
             agents: Mapping[str, AgentSet] | None = None,
             progress: Callable[[PSSim], None] | None = None) -> list[RunResult]:
    """Run every (name, policy, seed) job on ``hw``, all batched together on one engine (an A3C policy ``name``
    uses its agent for the job's seed, ``agents[name].for_seed(seed)``)."""
    engine = GradEngine(task, mode=params.engine_mode)
    sims: list[tuple[str, int, PSSim]] = []
    for name, pol, s in jobs:
        aset = (agents or {}).get(name)
        agent = aset.for_seed(int(s)) if aset is not None else None
        sims.append((name, int(s), make_sim(task, engine, hw, pol, params, int(s), agent)))
    run_batch([s for _, _, s in sims], engine, progress)
    return [RunResult(name, seed, sim.summary(), sim.curve(params.curve_points), list(sim.decisions))
            for name, seed, sim in sims]


def condition_hardware(hw: PSClusterHardware, ratio: float | None = None, workers: int | None = None,
                       link_gbps: float | None = None, ps_shards: int | None = None,
                       permute_at_steps: float | None = None) -> PSClusterHardware:
    """``hw`` with the condition's speed ratio, worker count, link rate, PS shards and speed permutation time
    (``permute_at_steps`` 0: never); ``None`` keeps the hardware's own."""
    out = hw
    if ps_shards is not None:
        out = dataclasses.replace(out, ps_shards=int(ps_shards))
    if permute_at_steps is not None:
        out = dataclasses.replace(out, permute_speeds_at_steps=float(permute_at_steps) or None)
    if workers is not None:
        out = with_workers(out, workers)
    if ratio is not None:
        out = with_speed_ratio(out, ratio)
    if link_gbps is not None:
        out = with_link_gbps(out, link_gbps)
    return out
