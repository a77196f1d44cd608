"""Baseline placement policies, each ``act(key, obs, state, params) -> int32[3]`` (cut, front node, back node).

They use the system model the environment exposes (predicted layer latencies, bandwidths, prices), as their
papers assume; none looks at future prices or arrivals.

* ``cloud_only``: every layer on the cloud (cut with an empty front).
* ``edge_only``: every layer on the job's own site; if the model does not fit there, on the edge site with the
  most memory that fits (a job is never sent to the cloud).
* ``random``: uniform over the *joint* valid actions.
* ``neurosurgeon`` (Kang et al., ASPLOS 2017): latency-optimal single cut between the source site and the cloud,
  over the prefix cuts, per-frame latency from the regressors (no queues, no prices).
* ``dads`` (Hu et al., INFOCOM 2019): the min-cut partition (DSL, light load) of the layer DAG between the source
  site and the cloud, or the cut minimising the slowest of the edge, transfer and cloud stages (DSH, heavy load,
  solved exactly over the candidates); the load test picks the mode whose predicted pipeline time for the job's
  B frames is shorter (a clip's frames are all present at arrival, so throughput matters when B is large).
* ``greedy_cheapest`` / ``greedy_greenest``: the valid action with the lowest predicted energy cost / CO2 for this
  job at current prices and renewables (ties broken by JCT); queue-blind for cost, myopic.
* ``myopic``: the valid action minimising this job's own weighted objective (cost and JCT, queues included): the
  one-step-greedy counterpart of the RL agents (a reference, not one of the paper's baselines).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from common.rl.env import joint_mask, masked_argmax, sample_uniform, unflatten_action
from papers.greenplace.env import EnvParams, EnvState, PlacementEnv, objective, place

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


def neurosurgeon(key, obs, state: EnvState, params: EnvParams):
    s, r = state.site, params.cloud
    t_e, tx, t_c = _per_frame_stages(state, params, s, r)
    ok = _fits(state, params, s, r) & params.is_prefix[state.model]
    return _act(masked_argmax(-(t_e + tx + t_c), ok), s, r)


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
    return _act(jnp.where(total[dsl_best] <= total[dsh], dsl_best, dsh), s, r)


def all_actions(params: EnvParams) -> jax.Array:
    nvec = ENV.action_space(params).nvec
    total = nvec[0] * nvec[1] * nvec[2]
    return unflatten_action(jnp.arange(total), nvec)


def _best_by(score_fn):
    def act(key, obs, state: EnvState, params: EnvParams):
        acts = all_actions(params)
        outs = jax.vmap(lambda a: place(state, params, a))(acts)
        score = score_fn(outs, params)
        valid = joint_mask(ENV.action_mask(state, params)).reshape(-1)
        return acts[masked_argmax(-score, valid)]

    return act


def _lexi(primary, secondary):
    """Rank by ``primary``, then ``secondary`` (a tiny relative tie-break)."""
    scale = jnp.maximum(jnp.abs(primary).max(), 1e-12)
    return primary + 1e-6 * scale * secondary / jnp.maximum(jnp.abs(secondary).max(), 1e-12)


greedy_cheapest = _best_by(lambda o, p: _lexi(o.cost, o.jct))
greedy_greenest = _best_by(lambda o, p: _lexi(o.co2_kg, o.jct))
myopic = _best_by(lambda o, p: objective(o, p))

HEURISTIC_POLICIES = {
    "cloud_only": cloud_only, "edge_only": edge_only, "random": random_policy, "neurosurgeon": neurosurgeon,
    "dads": dads, "greedy_cheapest": greedy_cheapest, "greedy_greenest": greedy_greenest, "myopic": myopic,
}
