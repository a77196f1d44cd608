"""From data to results: simulate the heuristics, train the learned policies, evaluate every policy.

Everything expensive is shared by the experiments of a run through the run cache (``cache``, the context's
``ctx.cache``), keyed by the inputs that determine it: loaded traces and profiles (by file), compiled functions
(one per shape: every MAIFS variant and seed share one vmapped training), trained parameters (keyed by the
training's own inputs: policies, environment and training configs, the stacked training windows, the cluster and
the seeds, so the headline, load-sweep and ablation experiments reuse one training run) and greedy evaluations.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.common.repro.cache import RunCache, cache_key
from mlsys_repro.common.repro.trainer import compile_trainer
from mlsys_repro.common.sim.cluster import Cluster, JobTable, SimConfig, SimResult, SpeedModel, simulate, summarize
from mlsys_repro.papers.maifs.baselines import Heuristic, HeuristicParams, ModelDemand, make_schedule
from mlsys_repro.papers.maifs.data import Data, training_windows
from mlsys_repro.papers.maifs.env import EnvConfig
from mlsys_repro.papers.maifs.model import Variant, variant
from mlsys_repro.papers.maifs.schemas import HeuristicPolicy, MaifsParams, RLPolicy
from mlsys_repro.papers.maifs.train import Problem, TrainConfig, evaluate, make_train
from mlsys_repro.papers.maifs.windows import Profiles, Window, stack

# ---------------------------------------------------------------------------------------------- heuristics


@functools.partial(jax.jit, static_argnames=("cfg", "lookahead"))
def _run_heuristic(hp: HeuristicParams, cl: Cluster, sm: SpeedModel, md: ModelDemand, jobs: JobTable,
                   cfg: SimConfig, lookahead: int):
    return simulate(cl, sm, jobs, cfg, make_schedule(hp, cl, md, jobs, lookahead))


def run_heuristic(pol: HeuristicPolicy | Heuristic, cl: Cluster, prof: Profiles, windows: list[Window], n: int,
                  lease_s: float, lookahead: int, restore_s: float) -> list[SimResult]:
    """Simulate each window under the heuristic ``pol`` (padded to ``n`` jobs so every window shares one compiled
    simulator); every net preemption costs ``restore_s`` seconds of work, as in the learned policies' env."""
    h = pol if isinstance(pol, Heuristic) else Heuristic.of(pol)
    jobs = stack(windows, pad_to=n)
    cfg = SimConfig(round_s=lease_s, restore_s=restore_s)
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
                     round_s=lease_s, makespan_weight=p.makespan_weight, reward_scale=p.reward_scale,
                     num_short=p.num_short, num_running=p.num_running, conflict_blocks=p.conflict_blocks,
                     restore_s=p.restore_s)


def train_config(p: MaifsParams, pol: RLPolicy, clone: bool = True) -> TrainConfig:
    """The training config of ``pol`` under budget ``p``; ``clone``: some run of the batch starts from the
    behaviour clone (else no cloning is compiled)."""
    return TrainConfig(num_envs=p.num_envs, rollout_len=p.rollout_len, num_updates=p.num_updates,
                       updates_per_chunk=p.updates_per_chunk, epochs=pol.epochs, minibatches=pol.minibatches,
                       lr=pol.lr, gamma=pol.gamma, gae_lambda=pol.gae_lambda, clip_eps=pol.clip_eps,
                       ent_coef=pol.ent_coef, hidden=pol.hidden, network=pol.network, paired=p.paired,
                       prior_beta=pol.prior_beta, credit=pol.credit, cf_lambda=pol.cf_lambda, adv_clip=pol.adv_clip,
                       bc_rounds=p.bc_rounds if clone else 0, bc_epochs=pol.bc_epochs, bc_lr=pol.bc_lr,
                       bc_dagger=pol.bc_dagger)


def _programs(env_cfg: EnvConfig, cfg: TrainConfig, num_servers: int):
    """The jitted programs of :func:`_compiled` for one static configuration."""
    init, chunk, _, graphdef = make_train(env_cfg, cfg, num_servers)
    trainer = compile_trainer(init, chunk, cfg.num_updates, start_axes=(0, 0, None),
                              advance_axes=(0, 0, None), steps_arg=None, chunk_steps=cfg.updates_per_chunk)

    def ev(params, var, prob, w, greedy, key):
        return evaluate(env_cfg, graphdef, params, var, prob, w, greedy=greedy, key=key)

    def mean_jct_h(params, var, prob, w):
        st = ev(params, var, prob, w, True, jax.random.key(0))
        jobs = jax.tree.map(lambda x: x[w], prob.windows)
        real = jnp.arange(jobs.arrival.shape[0]) < jobs.num_jobs
        jct = jnp.where(real, st.sim.finish - jobs.arrival, 0.0).sum() / jnp.maximum(real.sum(), 1)
        return jct / 3600.0

    def curve(params, var, prob, n):
        per_run = jax.vmap(lambda p_, v_: jax.vmap(lambda w: mean_jct_h(p_, v_, prob, w))(jnp.arange(n)))
        return per_run(params, var).mean(-1)

    return (trainer, jax.jit(jax.vmap(ev, in_axes=(0, 0, None, 0, None, 0))),  # paired (params_s, window_s)
            jax.jit(curve, static_argnums=3))


def _compiled(env_cfg: EnvConfig, cfg: TrainConfig, num_servers: int, cache: RunCache):
    """``(trainer, eval_v, curve_v)``: the MAPPO training compiled once per shape (vmapped over variant x seed,
    chunks of ``cfg.updates_per_chunk`` updates), the vmapped evaluation of (params, window) pairs (greedy, or the
    stochastic policy sampled with per-pair keys), and ``curve_v(params, var, prob, n)`` -> ``[R]``: each run's
    greedy mean JCT (h) over the first ``n`` windows of ``prob`` (the learning curve's monitor: deterministic given
    the parameters, unlike training episodes). Built once per run cache and static configuration: the experiments
    of one ``run_all`` process, or a test session's smoke runs of this paper, share one cache."""
    return cache.get("maifs.compiled", (env_cfg, cfg, num_servers), lambda: _programs(env_cfg, cfg, num_servers))


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
    init_params: Any = None  # the same networks before PPO (the warm start: the behaviour clone, or random)
    check: dict[str, np.ndarray] | None = None  # {"trained"|"untrained": [variant*seed] mean JCT, training windows}
    bc: np.ndarray | None = None  # [variant*seed, bc_rounds, len(train.BC_STATS)] behaviour cloning per round
    trace: str = "philly"
    key: str = ""  # cache key of the training's inputs (identifies it in the run cache)


def _variant_of(pol: RLPolicy) -> Variant:
    return variant(pol.attention, pol.coordination, pol.fungible, warm=pol.warm_start == "bc")


def train_policies(pols: dict[str, RLPolicy], d: Data, p: MaifsParams, cl: Cluster, lease_s: float,
                   seeds: np.ndarray, cache: RunCache, progress=None, checkpoints=None,
                   trace: str = "philly") -> Trained:
    """Train every policy in ``pols`` (same network family and hyper-parameters) for every seed in one vmapped
    run, once per run and set of training inputs (``cache``). ``checkpoints`` (e.g. ``ctx.checkpointer``) maps a
    name to an orbax Checkpointer or None: given one, the training saves after every chunk and a killed run
    resumes from it."""
    import time

    names = sorted(pols)
    nets = {pols[n].network for n in names}
    hypers = {pols[n].hyper() for n in names}
    if len(nets) != 1 or len(hypers) != 1:
        raise ValueError(f"policies {names} differ in network or training hyper-parameters; train them apart")
    pol = pols[names[0]]
    s = int(cl.cap.shape[0])
    env_cfg = env_config(p, s, lease_s, pol.network == "flat")
    cfg = train_config(p, pol, clone=any(pols[n].warm_start == "bc" for n in names))
    wins = training_windows(d, p, int(np.asarray(cl.cap)[:, 0].sum()), trace)
    n_pad = max(len(w) for w in wins)
    prob = Problem(cl, d.profiles.speed, d.profiles.demand(), stack(wins, pad_to=n_pad))
    # the training's inputs, all of them: what it learns from (prob), how (configs, policies), which seeds, and the
    # windows its beats_prior check uses
    key = cache_key((names, [pols[n] for n in names], env_cfg, cfg, prob, seeds, p.check_windows, trace))

    def train() -> Trained:
        trainer, _, curve_v = _compiled(env_cfg, cfg, s, cache)
        vars_ = [_variant_of(pols[n]) for n in names for _ in seeds]
        var = jax.tree.map(lambda *x: jnp.stack(x), *vars_)
        keys = jnp.stack([jax.random.key(int(sd)) for _ in names for sd in seeds])
        t0 = time.monotonic()
        state0 = trainer.start(keys, var, prob)  # the warm start (behaviour cloning runs here, once)
        init_params = state0.params
        trainer = dataclasses.replace(trainer, start=lambda *_: state0)
        if progress is not None:
            progress.start(trainer.chunks, f"training chunks ({', '.join(names)} x {len(seeds)} seeds)")

        def on_chunk(i, m):
            if progress is not None:
                j = np.asarray(m[0]["jct_h"])
                progress.update(1, f"train JCT {np.nanmean(j):.2f} h" if np.isfinite(j).any() else
                                "no episode done")

        ckpt = checkpoints(f"train-{key[:16]}") if checkpoints is not None else None
        n_curve = min(p.curve_windows, len(wins))

        def monitor(rs):  # greedy JCT on the first curve_windows training windows after every chunk
            return curve_v(rs.params, var, prob, n_curve)

        done = trainer.run((keys, var, prob), (var, prob), checkpointer=ckpt, on_chunk=on_chunk, monitor=monitor)
        curves = {k: np.asarray(v) for k, v in done.steps.items()}
        curves["check_jct_h"] = np.asarray(done.curve)  # [runs, chunks]
        curves["check_jct_h_start"] = np.asarray(curve_v(init_params, var, prob, n_curve))  # [runs]: the warm start
        # beats_prior: greedy JCT of trained vs initial networks on the first check_windows training windows
        chk = wins[:p.check_windows]
        check = {}
        for tag, prm in (("trained", done.state.params), ("untrained", init_params)):
            check[tag] = _eval_grid(env_cfg, cfg, s, prm, var, cl, d, chk, n_pad, cache).mean(1)
        return Trained(names, seeds, done.state.params, var, curves, env_cfg, cfg, time.monotonic() - t0,
                       init_params, check, np.asarray(state0.bc), trace, key)

    return cache.get("maifs.trained", key, train)


def _eval_grid(env_cfg: EnvConfig, cfg: TrainConfig, num_servers: int, params, var: Variant, cl: Cluster,
               d: Data, windows: list[Window], n: int, cache: RunCache, states: bool = False, sampled: bool = False):
    """Greedy (or, with ``sampled``, stochastic: pair ``i`` sampled with key ``fold_in(key(SAMPLE_SEED), i)``)
    evaluation of every parameter set (leading axis P) on every window: ``[P, W]`` mean JCT (h), or the final
    states (leading axis P * W) with ``states``. One vmapped rollout per chunk of pairs."""
    _, eval_v, _ = _compiled(env_cfg, cfg, num_servers, cache)
    jobs = stack(windows, pad_to=n)
    prob = Problem(cl, d.profiles.speed, d.profiles.demand(), jobs)
    npar = int(jax.tree.leaves(params)[0].shape[0])
    nw = len(windows)
    pi, wi = np.repeat(np.arange(npar), nw), np.tile(np.arange(nw), npar)
    outs = []
    for lo in range(0, pi.size, EVAL_CHUNK):
        sl = slice(lo, lo + EVAL_CHUNK)
        ip, iw = _pad_idx(pi[sl]), _pad_idx(wi[sl])
        prm = jax.tree.map(lambda x, ip=ip: x[ip], params)
        vv = jax.tree.map(lambda x, ip=ip: x[ip], var)
        keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(SAMPLE_SEED), i))(jnp.arange(lo, lo + EVAL_CHUNK))
        st = eval_v(prm, vv, prob, jnp.asarray(iw), jnp.asarray(not sampled), keys)
        outs.append(jax.tree.map(lambda x, k=pi[sl].size: np.asarray(x)[:k], st))
    st = jax.tree.map(lambda *x: np.concatenate(x), *outs)
    if states:
        return st, jobs, wi
    real = np.arange(n)[None] < np.asarray(jobs.num_jobs)[wi][:, None]
    jct = np.where(real, st.sim.finish - np.asarray(jobs.arrival)[wi], 0.0).sum(1) / np.maximum(real.sum(1), 1)
    return (jct / 3600.0).reshape(npar, nw)


EVAL_CHUNK = 64  # episodes per vmapped evaluation call (fixed, padded: one compilation per window shape)
SAMPLE_SEED = 20261207  # the key of stochastic-policy evaluations (fixed: a rerun samples the same episodes)


def _pad_idx(idx: np.ndarray) -> np.ndarray:
    return np.concatenate([idx, np.full(EVAL_CHUNK - idx.size, idx[-1] if idx.size else 0, idx.dtype)])


def run_trained(tr: Trained, name: str, d: Data, cl: Cluster, windows: list[Window], n: int, cache: RunCache,
                untrained: bool = False, sampled: bool = False) -> list[list[SimResult]]:
    """Greedy (``sampled``: stochastic) evaluation of policy ``name`` (at its warm start with ``untrained``): for
    every training seed, its parameters on every window; ``[seed][window]`` results, once per run and set of
    windows."""

    def build() -> list[list[SimResult]]:
        v = tr.names.index(name)
        ns = len(tr.seeds)
        sl = slice(v * ns, (v + 1) * ns)
        params = jax.tree.map(lambda x: x[sl], tr.init_params if untrained else tr.params)
        var = jax.tree.map(lambda x: x[sl], tr.var)
        st, jobs, wi = _eval_grid(tr.env_cfg, tr.cfg, int(cl.cap.shape[0]), params, var, cl, d, windows, n, cache,
                                  states=True, sampled=sampled)
        out: list[list[SimResult]] = []
        for i in range(ns):
            row = []
            for j in range(len(windows)):
                k = i * len(windows) + j
                s = jax.tree.map(lambda x, k=k: x[k], st)
                r = summarize(cl, jax.tree.map(lambda x, j=j: x[j], jobs), s.sim)
                r.counters["conflicts"] = int(s.conflicts)
                r.counters["decisions"] = int(s.decisions)
                r.counters["releases"] = int(s.releases)
                r.counters["steps"] = int(s.steps)
                row.append(r)
            out.append(row)
        return out

    return cache.get("maifs.greedy_eval", (tr.key, name, untrained, sampled, n, cl, windows), build)


def gates(tr: Trained, name: str, p: MaifsParams) -> dict[str, np.ndarray]:
    """0/1 validity gates per seed of a trained policy.

    * ``converged``: the learning curve has plateaued: the greedy JCT on the curve windows (training windows,
      evaluated after every chunk of updates; deterministic given the parameters) averaged over the last fifth of
      the chunks is less than ``converge_tol`` (relative) below its average over the fifth before. (The noisy
      training-episode JCT, whose windows cycle through loads, passed or failed that test by chance.)
    * ``beats_prior``: on the first ``check_windows`` training windows, the trained policy's greedy mean JCT is
      at least ``beats_margin`` (relative) below that of the same network before PPO (its warm start: the
      behaviour clone of Synergy-tune SRTF, the ``maifs_prior`` row; for a cold start, its random initialisation).
    """
    v = tr.names.index(name)
    ns = len(tr.seeds)
    sl = slice(v * ns, (v + 1) * ns)
    return {"converged": converged(tr.curves["check_jct_h"][sl], p.converge_tol),
            "beats_prior": (tr.check["trained"][sl] <= (1.0 - p.beats_margin) * tr.check["untrained"][sl]
                            ).astype(float)}


def window_mean(curve: np.ndarray, which: str, frac: float = 0.2) -> np.ndarray:
    """``[seeds]`` nan-mean of one window of ``curve [seeds, updates]`` that is ``frac`` of its updates long
    (rounded, at least one): ``"first"``, ``"last"`` or ``"previous"`` (the window just before the last). A window
    without a finite entry (no finished episode) gives NaN."""
    curve = np.atleast_2d(np.asarray(curve, float))
    u = curve.shape[1]
    w = max(1, int(round(frac * u)))
    bounds = {"first": (0, w), "last": (u - w, u), "previous": (u - 2 * w, u - w)}
    if which not in bounds:
        raise ValueError(f"which must be one of {sorted(bounds)}, got {which!r}")
    lo, hi = bounds[which]
    if lo < 0:
        raise ValueError(f"a curve of {u} updates has no {which!r} window of {w}")
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN window: NaN
        return np.nanmean(curve[:, lo:hi], axis=1)


def converged(curve: np.ndarray, tol: float, frac: float = 0.2) -> np.ndarray:
    """``[seeds]`` 1.0 where the (lower-is-better) curve ``[seeds, updates]`` improved by less than ``tol``
    (relative) from the mean of its second-to-last ``frac`` of updates to the mean of its last ``frac``
    (NaN entries, updates without a finished episode, are ignored; too short a curve is not converged)."""
    curve = np.atleast_2d(np.asarray(curve, float))
    u = curve.shape[1]
    if 2 * max(1, int(round(frac * u))) > u:
        return np.zeros(curve.shape[0])
    last, prev = window_mean(curve, "last", frac), window_mean(curve, "previous", frac)
    with np.errstate(all="ignore"):
        improvement = (prev - last) / np.abs(prev)
    return (np.isfinite(improvement) & (improvement < tol)).astype(float)


__all__ = ["Trained", "converged", "env_config", "gates", "run_heuristic", "run_trained", "train_config",
           "train_policies", "window_mean"]
