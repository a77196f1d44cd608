"""Glue between configs and the pure simulator/learner: load data once, compile once, run policies on windows.

Everything expensive is memoised per process: loaded traces and profiles (by file), compiled functions (one per
shape: every heuristic shares one compiled simulator, every MAIFS variant and seed one vmapped training), and
trained parameters (the headline, load-sweep and ablation experiments reuse one training run).
"""

from __future__ import annotations

import functools
import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from common.repro.checkpoint import run_chunked
from common.sim.cluster import Cluster, JobTable, SimConfig, SimResult, SpeedModel, simulate, summarize
from common.traces._io import resolve
from common.traces.gpu import (
    PhillyJobs,
    SiaWorkloads,
    load_philly_jobs,
    load_sia_app_profiles,
    load_sia_workloads,
    load_synergy_profiles,
)
from papers.maifs.baselines import Heuristic, HeuristicParams, ModelDemand, make_schedule
from papers.maifs.env import EnvConfig
from papers.maifs.model import Variant, variant
from papers.maifs.schemas import MaifsParams, RLPolicy
from papers.maifs.train import Problem, TrainConfig, evaluate, make_train
from papers.maifs.workload import Profiles, Window, load_profiles, philly_windows, saturn_windows, stack

# ---------------------------------------------------------------------------------------------- data


@functools.cache
def _philly(path: str) -> PhillyJobs:
    return load_philly_jobs(path)


@functools.cache
def _sia(path: str) -> SiaWorkloads:
    return load_sia_workloads(path)


@functools.cache
def _profiles(tput: str, stats: str, sia: str) -> Profiles:
    return load_profiles(load_synergy_profiles(tput, stats), load_sia_app_profiles(sia))


@functools.cache
def _apps(sia: str):
    return load_sia_app_profiles(sia)


@dataclass
class Data:
    profiles: Profiles
    philly: PhillyJobs
    saturn: SiaWorkloads
    apps: dict
    dropped: dict[str, int]


def load_data(files: dict[str, str], data_dir: Path) -> Data:
    f = {k: str(resolve(data_dir, v)) for k, v in files.items()}
    prof = _profiles(f["synergy_tput"], f["synergy_stats"], f["sia_profiles"])
    ph, sa = _philly(f["jobs"]), _sia(f["saturn"])
    return Data(prof, ph, sa, _apps(f["sia_profiles"]), {**ph.dropped, **sa.dropped})


def philly_eval(d: Data, p: MaifsParams, cluster_gpus: int, seeds: np.ndarray, rate: float | None = None):
    """One Philly window of the later, unseen slice per seed (window index = seed)."""
    ws = philly_windows(d.philly, d.profiles, cluster_gpus=cluster_gpus, start=p.eval_start, end=p.eval_end,
                        jobs_per_window=p.jobs_per_window, num_windows=int(seeds.max()) + 1,
                        rate_jobs_per_h=rate or p.rate_jobs_per_h, class_split=p.class_split, seed=1)
    return [ws.windows[int(s)] for s in seeds], ws.dropped


def saturn_eval(d: Data, p: MaifsParams, cluster_gpus: int, seeds: np.ndarray):
    """Held-out Saturn workload files, one per seed (cycled if there are more seeds than files)."""
    names = [p.saturn_eval[int(s) % len(p.saturn_eval)] for s in seeds]
    ws = saturn_windows(d.saturn, d.apps, d.profiles, workloads=names, cluster_gpus=cluster_gpus,
                        rate_scale=p.saturn_rate_scale)
    return [_truncate(w, p.jobs_per_window) for w in ws.windows], ws.dropped


def training_windows(d: Data, p: MaifsParams, cluster_gpus: int) -> list[Window]:
    """The earlier Philly slice plus the training Saturn files (one policy serves both traces)."""
    ph = philly_windows(d.philly, d.profiles, cluster_gpus=cluster_gpus, start=p.train_start, end=p.train_end,
                        jobs_per_window=p.jobs_per_window, num_windows=p.train_windows,
                        rate_jobs_per_h=p.rate_jobs_per_h, class_split=p.class_split, seed=0).windows
    sa = saturn_windows(d.saturn, d.apps, d.profiles, workloads=p.saturn_train, cluster_gpus=cluster_gpus,
                        rate_scale=p.saturn_rate_scale).windows
    return ph + [_truncate(w, p.jobs_per_window) for w in sa]


def _truncate(w: Window, n: int) -> Window:
    if len(w) <= n:
        return w
    return Window(w.name, w.arrival[:n], w.work[:n], w.gpus[:n], w.model[:n])


# ---------------------------------------------------------------------------------------------- heuristics


@functools.partial(jax.jit, static_argnames=("cfg", "lookahead"))
def _run_heuristic(hp: HeuristicParams, cl: Cluster, sm: SpeedModel, md: ModelDemand, jobs: JobTable,
                   cfg: SimConfig, lookahead: int):
    return simulate(cl, sm, jobs, cfg, make_schedule(hp, cl, md, jobs, lookahead))


def run_heuristic(h: Heuristic, cl: Cluster, prof: Profiles, windows: list[Window], n: int, lease_s: float,
                  lookahead: int) -> list[SimResult]:
    """Simulate each window (padded to ``n`` jobs so every window shares one compiled simulator)."""
    jobs = stack(windows, pad_to=n)
    cfg = SimConfig(round_s=lease_s)
    out = []
    for i in range(len(windows)):
        j = jax.tree.map(lambda x, i=i: x[i], jobs)
        st = _run_heuristic(h.params(), cl, prof.speed, prof.demand(), j, cfg, lookahead)
        out.append(summarize(cl, j, st))
    return out


# ---------------------------------------------------------------------------------------------- learning


def env_config(p: MaifsParams, num_servers: int, lease_s: float, single_agent: bool) -> EnvConfig:
    agents = 1 if single_agent else max(1, num_servers // p.servers_per_agent)
    return EnvConfig(num_agents=agents, num_candidates=p.num_candidates, max_substeps=p.max_substeps,
                     round_s=lease_s, makespan_weight=p.makespan_weight, reward_scale=p.reward_scale)


def train_config(p: MaifsParams, pol: RLPolicy) -> TrainConfig:
    return TrainConfig(num_envs=p.num_envs, rollout_len=p.rollout_len, num_updates=p.num_updates,
                       updates_per_chunk=p.updates_per_chunk, epochs=pol.epochs, minibatches=pol.minibatches,
                       lr=pol.lr, gamma=pol.gamma, gae_lambda=pol.gae_lambda, clip_eps=pol.clip_eps,
                       ent_coef=pol.ent_coef, hidden=pol.hidden, network=pol.network)


@functools.cache
def _compiled(env_cfg: EnvConfig, cfg: TrainConfig, num_servers: int):
    init, chunk, _, graphdef = make_train(env_cfg, cfg, num_servers)
    init_v = jax.jit(jax.vmap(init, in_axes=(0, 0, None)))
    chunk_v = jax.jit(jax.vmap(chunk, in_axes=(0, 0, None)))

    def ev(params, var, prob, w):
        return evaluate(env_cfg, graphdef, params, var, prob, w)

    eval_v = jax.jit(jax.vmap(ev, in_axes=(0, 0, None, 0)))  # paired (params_s, window_s)
    return init_v, chunk_v, eval_v


@dataclass
class Trained:
    names: list[str]  # policy name per variant
    seeds: np.ndarray
    params: Any  # leading axis = variant * len(seeds) + seed index
    var: Variant
    curves: dict[str, np.ndarray]  # metric -> [variant*seed, updates]
    env_cfg: EnvConfig
    cfg: TrainConfig
    seconds: float


_TRAINED: dict[str, Trained] = {}
# the params that define a training run (the rest only change evaluation)
TRAIN_FIELDS = ("jobs_per_window", "rate_jobs_per_h", "class_split", "saturn_rate_scale", "train_start",
                "train_end", "train_windows", "saturn_train", "num_updates", "updates_per_chunk", "num_envs",
                "rollout_len", "servers_per_agent", "num_candidates", "max_substeps", "makespan_weight",
                "reward_scale")


def _variant_of(pol: RLPolicy) -> Variant:
    return variant(pol.attention, pol.coordination, pol.fungible)


def train_policies(pols: dict[str, RLPolicy], d: Data, p: MaifsParams, cl: Cluster, lease_s: float,
                   seeds: np.ndarray, progress=None, checkpoints=None) -> Trained:
    """Train every policy in ``pols`` (same network family and hyper-parameters) for every seed in one vmapped
    run, memoised for the process. ``checkpoints`` (e.g. ``ctx.checkpointer``) maps a name to an orbax
    Checkpointer or None: given one, the training saves after every chunk and a killed run resumes from it."""
    import time

    names = sorted(pols)
    nets = {pols[n].network for n in names}
    hypers = {pols[n].hyper() for n in names}
    if len(nets) != 1 or len(hypers) != 1:
        raise ValueError(f"policies {names} differ in network or training hyper-parameters; train them apart")
    pol = pols[names[0]]
    train_fields = {k: v for k, v in asdict(p).items() if k in TRAIN_FIELDS}
    key = hashlib.sha256(json.dumps([names, [asdict(pols[n]) for n in names], train_fields, seeds.tolist(),
                                     np.asarray(cl.cap).tolist(), lease_s], sort_keys=True).encode()).hexdigest()
    if key in _TRAINED:
        return _TRAINED[key]
    s = int(cl.cap.shape[0])
    env_cfg = env_config(p, s, lease_s, pol.network == "flat")
    cfg = train_config(p, pol)
    init_v, chunk_v, _ = _compiled(env_cfg, cfg, s)
    wins = training_windows(d, p, int(np.asarray(cl.cap)[:, 0].sum()))
    prob = Problem(cl, d.profiles.speed, d.profiles.demand(), stack(wins, pad_to=p.jobs_per_window))
    vars_ = [_variant_of(pols[n]) for n in names for _ in seeds]
    var = jax.tree.map(lambda *x: jnp.stack(x), *vars_)
    keys = jnp.stack([jax.random.key(int(sd)) for _ in names for sd in seeds])
    t0 = time.monotonic()
    rs = init_v(keys, var, prob)
    n_chunks = cfg.num_updates // cfg.updates_per_chunk
    if progress is not None:
        progress.start(n_chunks, f"training chunks ({', '.join(names)} x {len(seeds)} seeds)")

    def on_chunk(i, m):
        if progress is not None:
            progress.update(1, f"train JCT {np.nanmean(np.asarray(m['jct_h'])):.2f} h")

    ckpt = checkpoints(f"train-{key[:16]}") if checkpoints is not None else None
    rs, hist = run_chunked(lambda r: chunk_v(r, var, prob), rs, n_chunks, ckpt, on_chunk=on_chunk)
    curves = {k: np.concatenate([np.asarray(h[k]) for h in hist], axis=1) for k in hist[0]}
    out = Trained(names, seeds, rs.params, var, curves, env_cfg, cfg, time.monotonic() - t0)
    _TRAINED[key] = out
    return out


def run_trained(tr: Trained, name: str, d: Data, cl: Cluster, windows: list[Window], n: int) -> list[SimResult]:
    """Greedy evaluation of policy ``name``: seed ``i``'s parameters on window ``i``."""
    if len(windows) != len(tr.seeds):
        raise ValueError(f"{len(windows)} windows for {len(tr.seeds)} seeds")
    v = tr.names.index(name)
    sl = slice(v * len(tr.seeds), (v + 1) * len(tr.seeds))
    params = jax.tree.map(lambda x: x[sl], tr.params)
    var = jax.tree.map(lambda x: x[sl], tr.var)
    _, _, eval_v = _compiled(tr.env_cfg, tr.cfg, int(cl.cap.shape[0]))
    jobs = stack(windows, pad_to=n)
    prob = Problem(cl, d.profiles.speed, d.profiles.demand(), jobs)
    st = eval_v(params, var, prob, jnp.arange(len(windows)))
    out = []
    for i in range(len(windows)):
        s = jax.tree.map(lambda x, i=i: x[i], st)
        r = summarize(cl, jax.tree.map(lambda x, i=i: x[i], jobs), s.sim)
        r.counters["conflicts"] = int(s.conflicts)
        r.counters["decisions"] = int(s.decisions)
        out.append(r)
    return out


__all__ = ["Data", "Trained", "env_config", "load_data", "philly_eval", "run_heuristic", "run_trained",
           "saturn_eval", "train_config", "train_policies", "training_windows"]
