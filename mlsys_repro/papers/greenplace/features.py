"""Per-action predictions: what placing the current job under each joint action (cut, front node, back node) would
cost, computed with the environment's own model (:func:`mlsys_repro.papers.greenplace.env.place`, queues included).

This is exactly what the ``myopic`` baseline computes before taking the argmin of the objective; the
action-scoring agent (:mod:`mlsys_repro.papers.greenplace.scorer_agent`) reads the same numbers as per-action features
and learns what they leave out (the effect of a placement on later jobs). Joint actions are indexed as
:func:`mlsys_repro.common.rl.env.flatten_action` does with ``nvec = (C, N, N)``.

Feature columns (:data:`FEATURES`), all for the current job only:

* ``cost``: predicted energy cost / c_norm, clipped to +-reward_clip (the reward's cost term);
* ``jct``: predicted JCT / t_norm (the reward's time term);
* ``objective``: w * cost + (1 - w) * jct, unclipped cost (the quantity myopic minimises);
* ``queue``: wait for the earliest free lane of the front and back nodes and, with ``link_fifo`` on, for the WAN
  links the job's transfers use, from the job's arrival, / t_norm (the queueing part of ``jct``);
* ``cloud_work``: the share of the job's FLOPs placed on the cloud;
* ``occupy_<n>`` for each node n: lane time the job adds on node n (the capacity later jobs lose), / t_norm.

:func:`candidates` keeps the ``k`` valid actions with the lowest predicted objective (an agent's pruned action
set; ties keep the lower flat index).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from mlsys_repro.common.rl.env import joint_mask, unflatten_action
from mlsys_repro.papers.greenplace.env import (
    EnvParams,
    EnvState,
    Outcome,
    PlacementEnv,
    objective,
    place,
    symlog,
    wan_links_used,
)

ENV = PlacementEnv()
FEATURES = ("cost", "jct", "objective", "queue", "cloud_work")  # then one occupy_<n> column per node
OBJECTIVE = FEATURES.index("objective")


def all_actions(params: EnvParams) -> jax.Array:
    """Every joint action, int32 [A, 3], in flat-index order."""
    nvec = ENV.action_space(params).nvec
    return unflatten_action(jnp.arange(nvec[0] * nvec[1] * nvec[2]), nvec)


def action_outcomes(state: EnvState, params: EnvParams) -> Outcome:
    """:func:`place` of the current job under every joint action (leaves [A, ...])."""
    return jax.vmap(lambda a: place(state, params, a))(all_actions(params))


def valid_actions(state: EnvState, params: EnvParams) -> jax.Array:
    """bool [A]: the joint actions the environment accepts for the current job."""
    return joint_mask(ENV.action_mask(state, params)).reshape(-1)


def num_features(params: EnvParams) -> int:
    return len(FEATURES) + int(params.dev.shape[0])


def action_features(state: EnvState, params: EnvParams) -> jax.Array:
    """float32 [A, num_features] for the current job (see the module docstring); invalid actions get zeros."""
    out = action_outcomes(state, params)
    acts = all_actions(params)
    cost = jnp.clip(out.cost / params.c_norm, -params.reward_clip, params.reward_clip)
    jct = out.jct / params.t_norm
    wait = jnp.maximum(jnp.where(params.lane_ok, state.free_at, jnp.inf).min(-1) - state.t, 0.0) / params.t_norm
    fe = params.front_empty[state.model, acts[:, 0]]
    be = params.back_empty[state.model, acts[:, 0]]
    queue = jnp.maximum(jnp.where(fe, 0.0, wait[acts[:, 1]]), jnp.where(be, 0.0, wait[acts[:, 2]]))
    link_wait = jnp.maximum(state.link_free_at - state.t, 0.0) / params.t_norm  # [2, N]
    used = jax.vmap(lambda a: wan_links_used(state, params, a))(acts)  # [A, 2, N]; all False with link_fifo off
    queue = jnp.maximum(queue, jnp.where(used, link_wait, 0.0).max((1, 2)))
    busy_before = jnp.maximum(state.free_at, state.t)
    occupy = (jnp.maximum(out.free_at, state.t) - busy_before).sum(-1) / params.t_norm  # [A, N]
    feats = jnp.concatenate([jnp.stack([cost, jct, objective(out, params), queue, out.cloud_work], -1), occupy], -1)
    return jnp.where(valid_actions(state, params)[:, None], feats, 0.0).astype(jnp.float32)


def candidates(state: EnvState, params: EnvParams, k: int) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The ``k`` valid joint actions with the lowest predicted objective: (flat indices int32 [k], features
    [k, num_features], valid bool [k]); when fewer than ``k`` are valid the rest are marked invalid."""
    feats = action_features(state, params)
    valid = valid_actions(state, params)
    k = min(int(k), int(valid.shape[0]))
    score = jnp.where(valid, -feats[:, OBJECTIVE], -jnp.inf)
    _, idx = jax.lax.top_k(score, k)
    return idx.astype(jnp.int32), feats[idx], valid[idx]


def predicted_objective(state: EnvState, params: EnvParams) -> tuple[jax.Array, jax.Array]:
    """(predicted objective [A] of every joint action for the current job, valid bool [A]): the numbers myopic
    takes the argmin of, in flat-index order."""
    return objective(action_outcomes(state, params), params), valid_actions(state, params)


def table_size(params: EnvParams) -> int:
    """Columns :func:`action_tables` appends: 1 + C + 2 * C * N."""
    c, n = int(params.cand_ok.shape[1]), int(params.dev.shape[0])
    return 1 + c + 2 * c * n


def action_tables(pred: jax.Array, valid: jax.Array, params: EnvParams) -> jax.Array:
    """Per-action predictions in the layout the root-conditioned BDQ reads
    (:class:`mlsys_repro.common.rl.dqn.ConditionedBranchingQNetwork`, ``tables=True``), flat float32
    [1 + C + 2 C N]: the best predicted objective of any valid action (``symlog``), then each choice's *regret*
    (its best predicted objective minus that best, ``log1p``): per cut [C], per (cut, front node) over back nodes
    [C, N], per (cut, back node) over front nodes [C, N]. Objectives are clipped at +-reward_clip first; a
    combination with no valid action reads as the largest regret (``2 * reward_clip``). Regret 0 marks myopic's
    choice; an agent learns what the one-job prediction leaves out."""
    c, n = int(params.cand_ok.shape[1]), int(params.dev.shape[0])
    clip = params.reward_clip
    obj = jnp.where(valid, jnp.clip(pred, -clip, clip), jnp.inf)
    best = jnp.where(valid.any(), obj.min(), clip)
    t = obj.reshape(c, n, n)
    f = lambda x: jnp.log1p(jnp.minimum(x - best, 2.0 * clip))  # noqa: E731  (inf -> the largest regret)
    return jnp.concatenate([symlog(best)[None], f(t.min((1, 2))), f(t.min(2)).reshape(-1),
                            f(t.min(1)).reshape(-1)]).astype(jnp.float32)
