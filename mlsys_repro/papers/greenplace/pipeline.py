"""greenplace's pipeline: what the experiments share that is not an experiment -- training an RL policy (compiled
once per run and configuration, shared by scenarios and experiments through ``ctx.cache``), greedy evaluation of
trained agents and heuristics on the evaluation year (compiled rollouts shared through the run's rollout table), the
learning curve and training gates, and the result rows of one policy.

The reported policy of an agent is its last checkpoint, or with the policy's ``keep_best`` the checkpoint with the
lowest greedy objective on the training-year curve episodes (:func:`train_selecting`: the selection lives in the
checkpointed state, so a resumed run selects the same checkpoint; the learning curve still shows every checkpoint).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from mlsys_repro.common.repro import RunContext, metric_rows
from mlsys_repro.common.repro.checkpoint import Checkpointer, run_chunked
from mlsys_repro.common.repro.trainer import ChunkedTrainer, Trained, compile_trainer, curve_rows
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


@struct.dataclass
class Selection:
    """A batched train state with the best checkpoint so far (``keep_best``): the policy parameters of the checkpoint
    with the lowest greedy training objective (leaves ``[R, ...]``), that objective (``[R]``, +inf before the first
    checkpoint) and its chunk (``[R]``, 1-based; 0 before the first)."""

    state: Any
    best: Any
    best_score: jax.Array
    best_chunk: jax.Array
    chunks: jax.Array  # int32 scalar: chunks done


def select_best(sel: Selection, current: Any, score: jax.Array) -> Selection:
    """After one more chunk: keep ``current`` (the policy parameters of the new checkpoint, leaves ``[R, ...]``) in
    the runs where its ``score`` [R] is strictly below the best so far (ties keep the earlier checkpoint; a NaN
    score is never selected)."""
    chunk = sel.chunks + 1
    better = jnp.asarray(score) < sel.best_score

    def pick(new, old):
        return jnp.where(better.reshape(better.shape + (1,) * (jnp.ndim(new) - 1)), new, old)

    return sel.replace(best=jax.tree.map(pick, current, sel.best), best_score=jnp.where(better, score, sel.best_score),
                       best_chunk=jnp.where(better, chunk, sel.best_chunk), chunks=chunk)


def train_selecting(tr: ChunkedTrainer, start_args, advance_args, monitor: Callable[[Any], jax.Array],
                    policy_params: Callable[[Any], Any], checkpointer: Checkpointer | None = None
                    ) -> tuple[Trained, Selection]:
    """:meth:`ChunkedTrainer.run` with ``monitor`` (a greedy training objective [R] per checkpoint, lower is
    better) and the best checkpoint's policy parameters kept in the state (:func:`select_best`), checkpointed with
    it, so a resumed run keeps its selection. Returns what ``run`` returns (the curve: every checkpoint's score)
    and the final :class:`Selection`."""
    advance_args = tuple(advance_args)

    def chunk(sel: Selection):
        state, metrics = tr.advance(sel.state, *advance_args)
        score = monitor(state)
        return select_best(sel.replace(state=state), policy_params(state), score), (metrics, score)

    def chunk_shape(sel: Selection):  # as ChunkedTrainer.run's: jitted functions bring their own eval_shape
        adv = tr.advance
        state, metrics = adv.eval_shape(sel.state, *advance_args) if hasattr(adv, "eval_shape") \
            else jax.eval_shape(adv, sel.state, *advance_args)
        score = monitor.eval_shape(state) if hasattr(monitor, "eval_shape") else jax.eval_shape(monitor, state)
        return sel, (metrics, score)

    chunk.eval_shape = chunk_shape  # type: ignore[attr-defined]
    init = tr.start(*start_args)
    pp = policy_params(init)
    runs = jax.tree.leaves(pp)[0].shape[0]
    sel0 = Selection(state=init, best=pp, best_score=jnp.full((runs,), jnp.inf, jnp.float32),
                     best_chunk=jnp.zeros((runs,), jnp.int32), chunks=jnp.zeros((), jnp.int32))
    sel, history = run_chunked(chunk, sel0, tr.chunks, checkpointer)
    steps = jax.tree.map(lambda *h: jnp.concatenate(h, axis=1), *[h[0] for h in history])
    curve = jnp.stack([h[1] for h in history], axis=1)
    return Trained(sel.state, steps, curve, tr.chunk_steps), sel


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
    if pol.keep_best:  # the reported policy: the checkpoint with the lowest greedy objective on the curve episodes
        done, sel = train_selecting(tr, (keys, ws, train_params), (ws, train_params), greedy_on_train,
                                    mod.policy_params, ckpt)
        reported, chosen = sel.best, np.asarray(sel.best_chunk)
    else:  # the last checkpoint
        done = tr.run((keys, ws, train_params), (ws, train_params), monitor=greedy_on_train, checkpointer=ckpt)
        reported, chosen = mod.policy_params(done.state), np.full(len(ws), tr.chunks)
    curves, lc = done.steps, np.asarray(done.curve)  # lc: [runs, chunks]
    out = {}
    for i, wt in enumerate(weights):
        sl = slice(i * len(seeds), (i + 1) * len(seeds))
        pp = jax.tree.map(lambda x, sl=sl: x[sl], reported)
        ep, starts = w.eval_params(scenario, wt)
        eval_keys = jax.vmap(jax.random.key)(jnp.asarray(seeds + 10_000, jnp.uint32))
        info = rollouts(train.act, ep, eval_keys, starts, p.eval_jobs, pp, compiled)
        cp, cstarts = w.curve_params(scenario, wt)
        ref = {name: np.asarray(rollouts(AsAgent(HEURISTIC_POLICIES[name]), cp, curve_keys[sl], cstarts,
                                         p.curve_jobs, compiled=compiled)["objective"].mean((1, 2)))
               for name in ("myopic", "cloud_only")}
        learn = {"curve": lc[sl], "env_steps": train.env_steps, "chunk_steps": train.env_steps // tr.chunks,
                 **training_gates(lc[sl], chosen[sl], start_obj[sl], ref["myopic"], ref["cloud_only"]),
                 "myopic_train_objective": ref["myopic"], "start_train_objective": start_obj[sl],
                 "warm_start": warm_start(pol),
                 "selected_env_steps": chosen[sl] * (train.env_steps // tr.chunks) if pol.keep_best else None}
        out[wt] = (summarise(info), info, jax.tree.map(lambda x, sl=sl: np.asarray(x[sl]), curves), learn)
    return out


def training_gates(curve: np.ndarray, chosen: np.ndarray, start: np.ndarray, myopic: np.ndarray,
                   cloud_only: np.ndarray) -> dict[str, np.ndarray]:
    """The training gates of runs with greedy training objectives ``curve`` [R, chunks] whose reported policy is
    checkpoint ``chosen`` [R] (1-based: the last, or the selected one with ``keep_best``): ``converged`` reads the
    learner's curve (:func:`converged`, its last checkpoints, whichever is reported); the comparisons read the
    reported policy's objective, against cloud-only (``beats_trivial_on_train``), myopic and the start."""
    c = np.asarray(curve, float)
    rep = c[np.arange(c.shape[0]), np.asarray(chosen) - 1]
    return {"converged": converged(c), "beats_trivial_on_train": rep < cloud_only,
            "beats_myopic_on_train": rep < myopic, "beats_start_on_train": rep < start}


def warm_start(pol: PlacementPolicy) -> bool:
    """Whether the agent starts from a heuristic's policy (behaviour cloning) rather than a random network."""
    return pol.kind == "ppo_scorer" and pol.bc_steps > 0


def learning_rows(name: str, learn: dict, seeds, **cond) -> list[dict]:
    """The learning curve (greedy objective on training-year episodes after each chunk, and before training at
    ``env_steps`` 0) and the gates: ``converged`` and ``beats_trivial_on_train`` (required by the claims),
    ``beats_myopic_on_train`` and the start comparison (reported): ``beats_untrained`` for a cold start (the same
    network at its initial parameters), ``beats_prior`` for a warm start (the behaviour-cloned network). The
    ``beats_*`` gates read the reported policy (with ``keep_best`` the selected checkpoint, whose ``env_steps`` is
    the row ``selected_env_steps``); ``converged`` reads the curve's last checkpoints either way."""
    start = learn["start_train_objective"][:, None]
    rows = curve_rows(name, {"greedy_train_objective": (start, "normalised")}, seeds, 0, step_column="env_steps",
                      **cond)
    rows += curve_rows(name, {"greedy_train_objective": (learn["curve"], "normalised")}, seeds,
                       learn["chunk_steps"], step_column="env_steps", **cond)
    start_gate = "beats_prior" if learn["warm_start"] else "beats_untrained"
    if learn.get("selected_env_steps") is not None:
        rows += metric_rows(name, {"selected_env_steps": (np.asarray(learn["selected_env_steps"], float), "steps")},
                            seeds=seeds, **cond)
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
