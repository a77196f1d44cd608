"""greenplace's pipeline: what the experiments share that is not an experiment -- training an RL policy (compiled
once per run and configuration, shared by scenarios and experiments through ``ctx.cache``), greedy evaluation of
trained agents and heuristics on the evaluation year (compiled rollouts shared through the run's rollout table), the
learning curve and training gates, and the result rows of one policy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.common.repro import RunContext, metric_rows
from mlsys_repro.common.repro.trainer import ChunkedTrainer, compile_trainer, curve_rows
from mlsys_repro.papers.greenplace import dqn_agents
from mlsys_repro.papers.greenplace.baselines import HEURISTIC_POLICIES, make_lookahead
from mlsys_repro.papers.greenplace.data import World
from mlsys_repro.papers.greenplace.env import PlacementEnv
from mlsys_repro.papers.greenplace.evaluate import METRICS, rollouts, summarise
from mlsys_repro.papers.greenplace.schemas import PlacementParams, PlacementPolicy

ENV = PlacementEnv()
RL_KINDS = ("bdq", "flat_dqn", "ppo", "ppo_scorer")
ON_POLICY = ("ppo", "ppo_scorer")  # trained with params.onpolicy_envs x onpolicy_iterations
CONVERGED_TOL = 0.03  # stated before any result: see converged()


def _trainer(kind: str):
    if kind in ("bdq", "flat_dqn"):
        return dqn_agents
    if kind == "ppo_scorer":
        from mlsys_repro.papers.greenplace import scorer_agent

        return scorer_agent
    from mlsys_repro.papers.greenplace import ppo_agent  # needs mlsys_repro/common/rl/ppo.py

    return ppo_agent


def converged(curve: np.ndarray, tol: float = CONVERGED_TOL) -> np.ndarray:
    """Per run (rows of ``curve`` [R, chunks], a greedy objective after each chunk, lower is better): the last
    chunk moved the objective by at most ``tol`` (relative) and sits within ``tol`` of the run's best chunk.
    A one-chunk curve cannot show convergence (False)."""
    c = np.asarray(curve, float)
    if c.shape[1] < 2:
        return np.zeros(c.shape[0], bool)
    last, prev = c[:, -1], c[:, -2]
    return (np.abs(last - prev) <= tol * np.abs(prev)) & (last <= c.min(1) + tol * np.abs(c.min(1)))


def _heuristic_act(pol: PlacementPolicy):
    if pol.kind == "lookahead":
        return make_lookahead(pol.plan_candidates, pol.plan_rollouts, pol.plan_horizon, pol.gamma)
    return HEURISTIC_POLICIES[pol.kind]


@dataclass(frozen=True)
class AsAgent:
    """A heuristic ``act(key, obs, state, params)`` in the agents' signature ``act(policy_params, key, obs, state,
    params)``. A value (equal for equal heuristics), so the run's table of compiled rollouts reuses one compilation
    per heuristic across scenarios and conditions."""

    act: Callable

    def __call__(self, pp, k, o, s, q):
        return self.act(k, o, s, q)


def _compiled(ctx: RunContext) -> dict:
    return ctx.cache.table("greenplace.rollouts")


def trainer(ctx: RunContext, pol: PlacementPolicy, train_params) -> tuple[Any, ChunkedTrainer]:
    """The training of ``pol`` at the experiment's budget, compiled once per run and configuration (shared by
    scenarios and experiments): the algorithm's ``train`` (its ``act``, budget and policy parameters) and the
    vmapped, chunked trainer (runs = seeds x reward weights)."""
    p: PlacementParams = ctx.params
    on_policy = pol.kind in ON_POLICY
    its, envs = (p.onpolicy_iterations, p.onpolicy_envs) if on_policy else (p.train_iterations, p.train_envs)

    def build():
        train = _trainer(pol.kind).make_train(ENV, train_params, pol, its, envs)
        return train, compile_trainer(train.start, train.advance, train.total_steps, start_axes=(0, 0, None),
                                      advance_axes=(0, 0, None))

    # the parameters given to make_train fix the shapes (candidates, nodes, lanes, models): a regime whose DADS
    # min-cut adds a candidate compiles its own trainer
    shapes = tuple(np.shape(x) for x in (train_params.cand_ok, train_params.lane_ok, train_params.price))
    return ctx.cache.get("greenplace.trainer", (pol, its, envs, shapes, train_params.episode_jobs), build)


def train_and_evaluate(w: World, scenario, pol: PlacementPolicy, seeds: np.ndarray, weights: list[float],
                       ctx: RunContext) -> dict[float, tuple[dict, dict, dict, dict]]:
    """Train one agent per (weight, seed) on the training year (one jit, vmapped), evaluate each greedily on the
    evaluation year. After every checkpointed chunk the greedy policy is also scored on fixed training-year
    episodes (the learning curve, with myopic and cloud-only on the same episodes for the gates).
    Returns {w: (per-seed metrics, rollout info, training curves, learning curve and gates)}."""
    p: PlacementParams = w.params
    mod = _trainer(pol.kind)
    train_params = w.train_params(scenario, weights[0])
    train, tr = trainer(ctx, pol, train_params)
    compiled = _compiled(ctx)
    keys = jax.vmap(jax.random.key)(jnp.asarray(np.tile(seeds, len(weights)), jnp.uint32))
    ws = jnp.repeat(jnp.asarray(weights, jnp.float32), len(seeds))
    ctx.progress.log(f"{w.regime.name}/{scenario.name}: training {pol.name} x {len(ws)} (seeds x weights), "
                     f"{train.env_steps:,} environment steps each, {tr.chunks} checkpointed chunks")
    curve_keys = jax.vmap(jax.random.key)(jnp.asarray(np.tile(seeds, len(weights)) + 20_000, jnp.uint32))

    def greedy_on_train(ts):
        out = []
        for i, wt in enumerate(weights):
            sl = slice(i * len(seeds), (i + 1) * len(seeds))
            cp, starts = w.curve_params(scenario, wt)
            pp = jax.tree.map(lambda x, sl=sl: x[sl], mod.policy_params(ts))
            out.append(rollouts(train.act, cp, curve_keys[sl], starts, p.curve_jobs, pp,
                                compiled)["objective"].mean((1, 2)))
        return jnp.concatenate(out)

    # the greedy policy at the start of training (a random network; the behaviour-cloned one for a warm start) on
    # the curve's episodes: what "beats its own initialisation" compares with
    start_obj = np.asarray(greedy_on_train(tr.start(keys, ws, train_params)))
    ckpt = ctx.checkpointer(f"{w.regime.name}-{scenario.name}-{pol.name}-w{'_'.join(f'{x:g}' for x in weights)}")
    done = tr.run((keys, ws, train_params), (ws, train_params), monitor=greedy_on_train, checkpointer=ckpt)
    ts, curves, lc = done.state, done.steps, np.asarray(done.curve)  # lc: [runs, chunks]
    out = {}
    for i, wt in enumerate(weights):
        sl = slice(i * len(seeds), (i + 1) * len(seeds))
        pp = jax.tree.map(lambda x, sl=sl: x[sl], mod.policy_params(ts))
        ep, starts = w.eval_params(scenario, wt)
        eval_keys = jax.vmap(jax.random.key)(jnp.asarray(seeds + 10_000, jnp.uint32))
        info = rollouts(train.act, ep, eval_keys, starts, p.eval_jobs, pp, compiled)
        cp, cstarts = w.curve_params(scenario, wt)
        ref = {name: np.asarray(rollouts(AsAgent(HEURISTIC_POLICIES[name]), cp, curve_keys[sl], cstarts,
                                         p.curve_jobs, compiled=compiled)["objective"].mean((1, 2)))
               for name in ("myopic", "cloud_only")}
        last = lc[sl, -1]
        learn = {"curve": lc[sl], "env_steps": train.env_steps, "chunk_steps": train.env_steps // tr.chunks,
                 "converged": converged(lc[sl]), "beats_trivial_on_train": last < ref["cloud_only"],
                 "beats_myopic_on_train": last < ref["myopic"], "myopic_train_objective": ref["myopic"],
                 "start_train_objective": start_obj[sl], "warm_start": warm_start(pol),
                 "beats_start_on_train": last < start_obj[sl]}
        out[wt] = (summarise(info), info, jax.tree.map(lambda x, sl=sl: np.asarray(x[sl]), curves), learn)
    return out


def warm_start(pol: PlacementPolicy) -> bool:
    """Whether the agent starts from a heuristic's policy (behaviour cloning) rather than a random network."""
    return pol.kind == "ppo_scorer" and pol.bc_steps > 0


def learning_rows(name: str, learn: dict, seeds, **cond) -> list[dict]:
    """The learning curve (greedy objective on training-year episodes after each chunk, and before training at
    ``env_steps`` 0) and the gates: ``converged`` and ``beats_trivial_on_train`` (required by the claims),
    ``beats_myopic_on_train`` and the start comparison (reported): ``beats_untrained`` for a cold start (the same
    network at its initial parameters), ``beats_prior`` for a warm start (the behaviour-cloned network)."""
    start = learn["start_train_objective"][:, None]
    rows = curve_rows(name, {"greedy_train_objective": (start, "normalised")}, seeds, 0, step_column="env_steps",
                      **cond)
    rows += curve_rows(name, {"greedy_train_objective": (learn["curve"], "normalised")}, seeds,
                       learn["chunk_steps"], step_column="env_steps", **cond)
    start_gate = "beats_prior" if learn["warm_start"] else "beats_untrained"
    return rows + metric_rows(name, {
        "converged": (learn["converged"].astype(float), "0/1"),
        "beats_trivial_on_train": (learn["beats_trivial_on_train"].astype(float), "0/1"),
        "beats_myopic_on_train": (learn["beats_myopic_on_train"].astype(float), "0/1"),
        start_gate: (learn["beats_start_on_train"].astype(float), "0/1"),
        "myopic_train_objective": (learn["myopic_train_objective"], "normalised"),
        "train_env_steps": (np.full(len(seeds), float(learn["env_steps"])), "steps")}, seeds=seeds, **cond)


def evaluate_heuristic(ctx: RunContext, w: World, scenario, name: str, pol: PlacementPolicy, seeds: np.ndarray,
                       wt: float, params=None):
    """Greedy evaluation of a heuristic on the evaluation year (or on ``params``, e.g. a headroom variant)."""
    ep, starts = w.eval_params(scenario, wt)
    ep = ep if params is None else params
    eval_keys = jax.vmap(jax.random.key)(jnp.asarray(seeds + 10_000, jnp.uint32))
    info = rollouts(AsAgent(_heuristic_act(pol)), ep, eval_keys, starts, w.params.eval_jobs, compiled=_compiled(ctx))
    return summarise(info), info


def policy_rows(name: str, metrics: dict, seeds, **cond):
    """The evaluation metrics of one policy (``METRICS``, per seed) as result rows."""
    return metric_rows(name, {k: (metrics[k], METRICS[k]) for k in METRICS}, seeds=seeds, **cond)
