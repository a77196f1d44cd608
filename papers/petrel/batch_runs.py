"""Glue between configs and the simulator: build tasks, train (and cache) the A3C agent, run policies x seeds.

``run_policies`` builds one :class:`~papers.petrel.sim.PSSim` per (policy, seed) and advances all of them together
(:func:`~papers.petrel.sim.run_batch`), so gradient requests of every run are computed in shared batches.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from papers.petrel.a3c import SharedAgent, train_a3c, with_episodes
from papers.petrel.engine import GradEngine, Task, load_task
from papers.petrel.hardware import with_speed_ratio, with_workers
from papers.petrel.protocols import make_protocol
from papers.petrel.schemas import PetrelParams, PSClusterHardware, SyncPolicy
from papers.petrel.sim import Grouper, PSSim, run_batch

_TASKS: dict[tuple, Task] = {}
_AGENTS: dict[str, SharedAgent] = {}
_LOCK = threading.Lock()


def task_for(params: PetrelParams, data_dir: str | Path) -> Task:
    """The training task of ``params`` (cached per process: loading MNIST takes seconds)."""
    model_kw = {"hidden": params.hidden} if params.model == "mlp" else {}
    key = (params.dataset, params.model, tuple(sorted(model_kw.items())), params.n_train, params.n_test,
           params.probe_size, str(data_dir))
    with _LOCK:
        if key not in _TASKS:
            _TASKS[key] = load_task(params.dataset, data_dir, model=params.model, n_train=params.n_train,
                                    n_test=params.n_test, probe_size=params.probe_size, **model_kw)
        return _TASKS[key]


@dataclass
class RunResult:
    policy: str
    seed: int
    metrics: dict[str, float]
    curve: list[tuple[float, float, float, float]]
    decisions: list[tuple[float, int]]


def make_sim(task: Task, engine: GradEngine, hw: PSClusterHardware, policy: SyncPolicy, params: PetrelParams,
             seed: int, agent: SharedAgent | None = None, record: bool = False,
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
        label=f"{policy.name}/s{seed}", record=record)


def _agent_key(policy: SyncPolicy, hw: PSClusterHardware, params: PetrelParams, episodes: int) -> str:
    hw_base = dataclasses.replace(hw, name="", description="", class_speeds=[1.0], class_names=[],
                                  class_fractions=[], num_workers=max(policy.a3c.train_workers),
                                  prior_communities=0)
    if policy.a3c.train_link_gbps:  # the agent trains on its own link rates: the hardware's do not matter
        hw_base = dataclasses.replace(hw_base, ps_bandwidth_gbps=1.0, worker_bandwidth_gbps=1.0)
    return repr((policy.a3c, episodes, policy.action_levels, policy.decision_every_steps, policy.ewma_alpha,
                 hw_base, params.dataset, params.model, params.hidden, params.global_batch, params.lr,
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


def agent_for(policy: SyncPolicy, hw: PSClusterHardware, params: PetrelParams, task: Task,
              log: Callable[[str], None] | None = None) -> SharedAgent:
    """Train the CASP A3C agent for this hardware family (cached per process; same config -> same agent)."""
    cfg = with_episodes(policy.a3c, params.a3c_episodes, params.a3c_episode_decisions)
    key = _agent_key(policy, hw, params, cfg.episodes)
    with _LOCK:
        if key in _AGENTS:
            return _AGENTS[key]
    decision_steps = policy.decision_every_steps

    def make_train_sim(ep: int, cond: tuple[int, float, float], grouper: Grouper, engine: GradEngine) -> PSSim:
        n, ratio, gbps = cond
        thw = training_hardware(hw, n, ratio, link_gbps=gbps)
        horizon = cfg.episode_decisions * decision_steps * thw.base_step_s * (1 - 1e-9)
        return make_sim(task, engine, thw, policy, params, seed=cfg.seed + ep, grouper=grouper,
                        max_time_s=horizon, target=2.0)

    def progress(ep: int, ret: float) -> None:
        if log and ((ep + 1) % 24 == 0 or ep + 1 == cfg.episodes):
            log(f"a3c episode {ep + 1}/{cfg.episodes}: return {ret:.3f}")

    agent = train_a3c(cfg, policy.action_levels, make_train_sim,
                      lambda: GradEngine(task, mode=params.engine_mode), progress)
    with _LOCK:
        _AGENTS[key] = agent
    return agent


def run_policies(task: Task, hw: PSClusterHardware, policies: Mapping[str, SyncPolicy], seeds: Sequence[int],
                 params: PetrelParams, agents: Mapping[str, SharedAgent] | None = None,
                 progress: Callable[[PSSim], None] | None = None) -> list[RunResult]:
    """Run every (policy, seed) on ``hw`` to the target accuracy (or the horizon), batched together."""
    jobs = [(name, pol, int(s)) for name, pol in policies.items() for s in seeds]
    return run_jobs(task, hw, jobs, params, agents, progress)


def run_jobs(task: Task, hw: PSClusterHardware, jobs: Sequence[tuple[str, SyncPolicy, int]], params: PetrelParams,
             agents: Mapping[str, SharedAgent] | None = None,
             progress: Callable[[PSSim], None] | None = None) -> list[RunResult]:
    """Run every (name, policy, seed) job on ``hw``, all batched together on one engine."""
    engine = GradEngine(task, mode=params.engine_mode)
    sims: list[tuple[str, int, PSSim]] = []
    for name, pol, s in jobs:
        agent = (agents or {}).get(name)
        sims.append((name, int(s), make_sim(task, engine, hw, pol, params, int(s), agent)))
    run_batch([s for _, _, s in sims], engine, progress)
    return [RunResult(name, seed, sim.summary(), sim.curve(params.curve_points), list(sim.decisions))
            for name, seed, sim in sims]


def condition_hardware(hw: PSClusterHardware, ratio: float | None = None, workers: int | None = None,
                       link_gbps: float | None = None) -> PSClusterHardware:
    out = hw
    if workers is not None:
        out = with_workers(out, workers)
    if ratio is not None:
        out = with_speed_ratio(out, ratio)
    if link_gbps is not None:
        out = with_link_gbps(out, link_gbps)
    return out
