"""Baseline placement policies, each ``act(key, obs, state, params) -> int32[3]`` (cut, front node, back node).

They use the system model the environment exposes (predicted layer latencies, bandwidths, prices), as their
papers assume; none looks at future prices or arrivals.

* ``cloud_only``: every layer on the cloud (cut with an empty front).
* ``edge_only``: every layer on the job's own site; if the model does not fit there, on the edge site with the
  most memory that fits (a job is never sent to the cloud).
* ``random``: uniform over the *joint* valid actions.
* ``neurosurgeon`` (Kang et al., ASPLOS 2017): latency-optimal single cut between the source site and the cloud,
  over the prefix cuts, per-frame latency from the regressors (no queues, no prices).
* ``neurosurgeon_queue``: Neurosurgeon adapting to network and server load (its paper re-picks the cut as they
  change), with the environment's queue model: the prefix cut between the site and the cloud with the lowest
  predicted JCT given the current lane and WAN-link queues (cost-blind).
* ``dads`` (Hu et al., INFOCOM 2019): the min-cut partition (DSL, light load) of the layer DAG between the source
  site and the cloud, or the cut minimising the slowest of the edge, transfer and cloud stages (DSH, heavy load,
  solved exactly over the candidates); the load test picks the mode whose predicted pipeline time for the job's
  B frames is shorter (a clip's frames are all present at arrival, so throughput matters when B is large).
* ``greedy_cheapest`` / ``greedy_greenest``: the valid action with the lowest predicted energy cost / CO2 for this
  job at current prices and renewables (ties broken by JCT); queue-blind for cost, myopic.
* ``myopic``: the valid action minimising this job's own weighted objective (cost and JCT, queues included): the
  one-step-greedy counterpart of the RL agents (a reference, not one of the paper's baselines).
* ``lookahead`` (:func:`make_lookahead`): a model-predictive planner, an upper reference for what looking ahead
  can gain [ours]. For each of the ``candidates`` actions with the lowest predicted objective it places the job,
  then simulates ``horizon`` future jobs under myopic placement, ``rollouts`` times, and picks the action with the
  lowest objective plus discounted future objectives. The future jobs are drawn from the known job distribution
  and the trace's arrival rate with the planner's own key (common random numbers across candidates): it knows the
  system model, not the jobs that will arrive.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp

from mlsys_repro.common.rl.env import masked_argmax, sample_uniform
from mlsys_repro.papers.greenplace.env import EnvParams, EnvState, PlacementEnv, objective, place, trace_hour
from mlsys_repro.papers.greenplace.features import action_outcomes, all_actions, valid_actions

ENV = PlacementEnv()


def _act(c, f, b):
    return jnp.stack([jnp.asarray(c), jnp.asarray(f), jnp.asarray(b)]).astype(jnp.int32)


def cloud_only(key, obs, state: EnvState, params: EnvParams):
    return _act(0, state.site, params.cloud)


def edge_only(key, obs, state: EnvState, params: EnvParams):
    m, s = state.model, state.site
    c = params.all_front[m]
    n = params.dev.shape[0]
    fits = (params.mem >= params.front_mem[m, c]) & (jnp.arange(n) != params.cloud)
    own = fits[s]
    other = jnp.argmax(jnp.where(fits, params.mem, -1.0))
    return _act(c, jnp.where(own, s, other), s)


def random_policy(key, obs, state: EnvState, params: EnvParams):
    return sample_uniform(key, ENV.action_mask(state, params))


def _per_frame_stages(state: EnvState, params: EnvParams, s, r):
    """Per-frame (edge compute, transfer, cloud compute) seconds of every candidate between site s and node r."""
    m = state.model
    t_e = params.front_lat[m, :, params.dev[s]] / params.speed[s]
    t_c = params.back_lat[m, :, params.dev[r]] / params.speed[r]
    bw = params.bw[s, r]
    fe, be = params.front_empty[m], params.back_empty[m]
    tx = jnp.where(fe, params.in_bytes[m], jnp.where(be, 0.0, params.cross_bytes[m])) / bw
    tx = tx + jnp.where(be, 0.0, params.out_bytes[m] / bw)
    return t_e, tx, t_c


def _fits(state: EnvState, params: EnvParams, s, r):
    m = state.model
    ok_f = params.front_empty[m] | (params.mem[s] >= params.front_mem[m])
    ok_b = params.back_empty[m] | (params.mem[r] >= params.back_mem[m])
    return params.cand_ok[m] & ok_f & ok_b


def _site_cloud(state: EnvState, params: EnvParams, c) -> jax.Array:
    """Cut ``c`` between the job's site (front) and the cloud (back). An empty segment's node is the site (the
    environment pins it there): a cut that keeps every layer in front runs the whole model at the site."""
    s = state.site
    return _act(c, s, jnp.where(params.back_empty[state.model, c], s, params.cloud))


def neurosurgeon(key, obs, state: EnvState, params: EnvParams):
    s, r = state.site, params.cloud
    t_e, tx, t_c = _per_frame_stages(state, params, s, r)
    ok = _fits(state, params, s, r) & params.is_prefix[state.model]
    return _site_cloud(state, params, masked_argmax(-(t_e + tx + t_c), ok))


def neurosurgeon_queue(key, obs, state: EnvState, params: EnvParams):
    """Neurosurgeon adapting to load: its partition re-chosen for the current network and server load (Kang et al.
    re-select the cut as the measured bandwidth and the datacenter's load change), here with the environment's exact
    queue model: among the prefix cuts between the job's site and the cloud, the one with the lowest predicted JCT
    for this job given the current lane and WAN-link queues. Cost-blind, as Neurosurgeon is."""
    outs = action_outcomes(state, params)
    acts = all_actions(params)
    m, s = state.model, state.site
    c = acts[:, 0]
    back = jnp.where(params.back_empty[m, c], s, params.cloud)
    ok = valid_actions(state, params) & params.is_prefix[m, c] & (acts[:, 1] == s) & (acts[:, 2] == back)
    return acts[masked_argmax(-outs.jct, ok)]


def dads(key, obs, state: EnvState, params: EnvParams):
    s, r = state.site, params.cloud
    t_e, tx, t_c = _per_frame_stages(state, params, s, r)
    ok = _fits(state, params, s, r)
    dsl = params.dads_cut[state.model, s]
    dsl_ok = ok[dsl]
    dsl_best = jnp.where(dsl_ok, dsl, masked_argmax(-(t_e + tx + t_c), ok))
    bottleneck = jnp.maximum(jnp.maximum(t_e, tx), t_c)
    dsh = masked_argmax(-bottleneck, ok)
    # load test: the job's B frames are all present at arrival; the predicted pipeline time of each mode is
    # sum of stages + (B - 1) x slowest stage, and DADS runs the mode that finishes the job first
    total = t_e + tx + t_c + (state.batch - 1.0) * bottleneck
    return _site_cloud(state, params, jnp.where(total[dsl_best] <= total[dsh], dsl_best, dsh))


def _best_by(score_fn):
    """The valid joint action with the lowest ``score_fn(outcomes, params)`` (predicted by the environment's
    model for the current job, :func:`mlsys_repro.papers.greenplace.features.action_outcomes`)."""
    def act(key, obs, state: EnvState, params: EnvParams):
        score = score_fn(action_outcomes(state, params), params)
        return all_actions(params)[masked_argmax(-score, valid_actions(state, params))]

    return act


def _lexi(primary, secondary):
    """Rank by ``primary``, then ``secondary`` (a tiny relative tie-break)."""
    scale = jnp.maximum(jnp.abs(primary).max(), 1e-12)
    return primary + 1e-6 * scale * secondary / jnp.maximum(jnp.abs(secondary).max(), 1e-12)


greedy_cheapest = _best_by(lambda o, p: _lexi(o.cost, o.jct))
greedy_greenest = _best_by(lambda o, p: _lexi(o.co2_kg, o.jct))
myopic = _best_by(lambda o, p: objective(o, p))

def _after(state: EnvState, params: EnvParams, action: jax.Array) -> EnvState:
    """The lanes, WAN links and warm functions after the current job is placed with ``action`` (no new job
    drawn)."""
    out = place(state, params, action)
    return state.replace(free_at=out.free_at, last_used=out.last_used, link_free_at=out.link_free_at)


def _myopic_step(state: EnvState, params: EnvParams) -> tuple[EnvState, jax.Array]:
    """Place the current job myopically; return the state after it and the job's objective (the reject penalty
    when no action is valid)."""
    outs = action_outcomes(state, params)
    valid = valid_actions(state, params)
    score = objective(outs, params)
    i = masked_argmax(-score, valid)
    return _after(state, params, all_actions(params)[i]), jnp.where(valid.any(), score[i], params.reject_penalty)


def _next_job(state: EnvState, params: EnvParams, u: jax.Array) -> EnvState:
    """The next arrival drawn as the environment draws it (exponential gap at the hour's rate, then the job)."""
    rate = params.rate[trace_hour(state, params, state.t)]
    return ENV._sample_job(u, state, params, state.t - jnp.log1p(-u[3]) / rate)


@dataclass(frozen=True)
class Lookahead:
    """The look-ahead planner as ``act(key, obs, state, params)`` (see the module docstring). A value: two planners
    with the same setting are equal and hash alike, so evaluations reuse one compilation per setting."""

    candidates: int
    rollouts: int
    horizon: int
    gamma: float

    def __call__(self, key, obs, state: EnvState, params: EnvParams):
        candidates, rollouts, horizon, gamma = self.candidates, self.rollouts, self.horizon, self.gamma
        outs = action_outcomes(state, params)
        valid = valid_actions(state, params)
        now = objective(outs, params)
        k = min(int(candidates), int(valid.shape[0]))
        _, idx = jax.lax.top_k(jnp.where(valid, -now, -jnp.inf), k)
        u = jax.random.uniform(key, (rollouts, horizon, 4))
        disc = gamma ** jnp.arange(1, horizon + 1, dtype=jnp.float32)

        def future(first: jax.Array, u_r: jax.Array) -> jax.Array:
            def body(s, u_h):
                s, obj = _myopic_step(_next_job(s, params, u_h), params)
                return s, obj

            _, objs = jax.lax.scan(body, _after(state, params, first), u_r)
            return (disc * objs).sum()

        acts = all_actions(params)[idx]
        fut = jax.vmap(lambda a: jax.vmap(lambda u_r: future(a, u_r))(u).mean())(acts)
        score = jnp.where(valid[idx], now[idx] + fut, jnp.inf)
        return acts[jnp.argmin(score)]


def make_lookahead(candidates: int, rollouts: int, horizon: int, gamma: float) -> Lookahead:
    """The look-ahead planner with this setting (equal settings give equal planners)."""
    return Lookahead(int(candidates), int(rollouts), int(horizon), float(gamma))


HEURISTIC_POLICIES = {
    "cloud_only": cloud_only, "edge_only": edge_only, "random": random_policy, "neurosurgeon": neurosurgeon,
    "neurosurgeon_queue": neurosurgeon_queue, "dads": dads, "greedy_cheapest": greedy_cheapest,
    "greedy_greenest": greedy_greenest, "myopic": myopic,
}
