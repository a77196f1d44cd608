"""The placement environment: online DNN jobs partitioned and placed over edge sites and a cloud (pure JAX).

One step = one arriving job. A job (model m, B frames of one video clip, arriving at edge site s) is cut into a
front segment (the layers of candidate partition c) and a back segment; the action ``(c, front node, back node)``
places them. Execution is a pipeline of up to five stages: input transfer s -> first node, front compute, transfer
of the cut activations, back compute, result transfer -> s. B frames flow through it (flow-shop recursion: a stage
starts when its node has a free lane and the first frame has arrived, and ends B frame-times later or one
frame-time after the previous stage's last frame, whichever is later), so a job's completion time (JCT) includes
queueing, cold starts, transfers and the pipeline's bottleneck.

Links: a transfer a -> b takes ``rtt[a, b]`` plus one frame-time ``bytes / bw[a, b]`` per frame. By default links
have no contention (any number of transfers run at full bandwidth at once). With ``link_fifo`` on [ours], each
edge site has one full-duplex WAN link to the cloud, an uplink (site -> cloud) and a downlink (cloud -> site), each a
FIFO server of transfers: a transfer between an edge site and the cloud (exactly one endpoint is the cloud) cannot
send its first frame before its direction's link of the edge endpoint is free (``link_free_at[d, site]``, d = 0 up,
1 down), and then holds that link until its last frame has arrived (the stage's last-frame time, RTT included).
Transfers are served in placement order (arrival order of their jobs) without backfilling, as lanes are. The two
directions are separate links so that a job's result download never waits for its own upload (a job uses each
directed link at most once, so an unloaded system gives the same JCTs with and without ``link_fifo``). LAN
transfers between edge sites and same-node no-ops stay uncontended.

Energy: a busy lane of node n draws ``p_max`` instead of ``p_idle`` (facility power, PUE included). Renewable power
``green_kw[h, n]`` (node capacity x the region's hourly renewable share) is shared by the node's lanes and covers
idle power first; only the brown part of the job's extra power is bought, at the node's hourly price (which can be
negative), and emits at the region's carbon intensity. Network transfer energy (kWh/GB) is bought at the source
site. Metrics are the job's *marginal* cost, energy, CO2 and green share; idle draw is the same for every policy.

Masks (``action_mask``): a cut exists for the job's model; a node may host a segment only if the segment's
weights and largest activations fit its memory; an empty segment's node is pinned to the source site. A job no
action can place (larger than every node) or an invalid action is rejected with ``reject_penalty``.

Reward (:func:`reward`): -(w_energy * f(cost / c_norm) + (1 - w_energy) * f(JCT / t_norm)), both terms clipped at
``reward_clip`` (or, with ``reward_symlog``, both symlog-scaled): a placement that queues a job for minutes (an
exploring agent's) would otherwise give rewards of -100 beside the -1 of good placements. The reported objective
(``info["objective"]``) is unscaled.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from mlsys_repro.common.rl.env import BranchMask, Environment, MultiDiscrete

SECONDS_PER_HOUR = 3600.0
NO_USE = -1e9  # last-use time of a function never deployed on a node


@struct.dataclass
class EnvParams:
    # hourly traces, [T, N] (T hours from Jan 1 00:00 UTC of the trace year)
    price: jax.Array  # USD/kWh at node n
    green_kw: jax.Array  # renewable power available to node n (kW)
    ci: jax.Array  # gCO2/kWh at node n
    rate: jax.Array  # [T] total job arrival rate (jobs/s)
    local_offset_h: jax.Array  # hours added to UTC for the time-of-day feature
    # nodes [N]
    dev: jax.Array  # int32 latency-model device class (0 edge, 1 cloud)
    speed: jax.Array  # multiplier on the device-class latency model
    lane_ok: jax.Array  # bool [N, Lmax]: lanes (servers) that exist
    p_idle: jax.Array  # kW per lane, facility level
    p_max: jax.Array  # kW per lane, facility level
    mem: jax.Array  # bytes per lane
    site_probs: jax.Array  # where jobs arrive (0 for the cloud)
    bw: jax.Array  # [N, N] bytes/s (diagonal unused)
    rtt: jax.Array  # [N, N] seconds (0 on the diagonal)
    # models [M] and their partition candidates [M, C]
    model_probs: jax.Array
    in_bytes: jax.Array  # [M] bytes of one input frame
    out_bytes: jax.Array  # [M] bytes of one result
    cand_ok: jax.Array  # bool [M, C]
    front_empty: jax.Array  # bool [M, C]
    back_empty: jax.Array  # bool [M, C]
    is_prefix: jax.Array  # bool [M, C] (a prefix cut; Neurosurgeon's search space)
    front_lat: jax.Array  # [M, C, D] seconds per frame
    back_lat: jax.Array  # [M, C, D]
    cross_bytes: jax.Array  # [M, C]
    front_mem: jax.Array  # [M, C]
    back_mem: jax.Array  # [M, C]
    front_params: jax.Array  # [M, C] bytes (cold start loads them)
    back_params: jax.Array  # [M, C]
    front_frac: jax.Array  # [M, C] share of the model's FLOPs in the front segment
    all_front: jax.Array  # int32 [M] candidate index of "every layer in front"
    dads_cut: jax.Array  # int32 [M, N] DADS DSL candidate for (model, source site) with the cloud as back node
    cloud: jax.Array  # int32 index of the cloud node
    # job, accounting, reward
    batch_min: jax.Array
    batch_max: jax.Array
    net_kwh_per_byte: jax.Array
    cold_start_s: jax.Array
    keep_alive_s: jax.Array
    load_bps: jax.Array
    w_energy: jax.Array
    c_norm: jax.Array
    t_norm: jax.Array
    reward_clip: jax.Array
    reject_penalty: jax.Array
    start_hours: jax.Array  # int32 [S] episode start hours to draw from
    # bool scalar: FIFO WAN links per edge site (see the module docstring); off = no link contention
    link_fifo: jax.Array = struct.field(default_factory=lambda: jnp.asarray(False))
    # bool scalar: reward terms symlog-scaled (sign(x) log(1 + |x|)) instead of clipped at reward_clip
    reward_symlog: jax.Array = struct.field(default_factory=lambda: jnp.asarray(False))
    episode_jobs: int = struct.field(pytree_node=False, default=256)


@struct.dataclass
class EnvState:
    t: jax.Array  # seconds since the episode start (arrival time of the current job)
    hour0: jax.Array  # int32 trace hour of the episode start
    free_at: jax.Array  # [N, Lmax] time each lane becomes free
    last_used: jax.Array  # [N, M] last time model m's function ran on node n (warm if recent)
    link_free_at: jax.Array  # [2, N] time the uplink (row 0) / downlink (row 1) of edge site n becomes free
    model: jax.Array  # int32 current job
    batch: jax.Array  # frames
    site: jax.Array  # int32
    step: jax.Array  # int32 jobs handled this episode


@struct.dataclass
class Outcome:
    jct: jax.Array
    cost: jax.Array  # USD
    energy_kwh: jax.Array  # compute + network, marginal
    green_kwh: jax.Array
    co2_kg: jax.Array
    net_kwh: jax.Array
    cloud_work: jax.Array  # share of the job's FLOPs run on the cloud
    free_at: jax.Array
    last_used: jax.Array
    link_free_at: jax.Array


def trace_hour(state: EnvState, params: EnvParams, t: jax.Array) -> jax.Array:
    return (state.hour0 + jnp.floor(t / SECONDS_PER_HOUR).astype(jnp.int32)) % params.price.shape[0]


def _compute_stage(state: EnvState, params: EnvParams, free_at, last_used, ff, lf, node, tau, active, seg_params):
    """One compute stage of the job's pipeline on ``node``: returns updated lanes and (ff, lf, kWh, brown share,
    start time)."""
    lanes = jnp.where(params.lane_ok[node], free_at[node], jnp.inf)
    lane = jnp.argmin(lanes)
    warm = (ff - last_used[node, state.model]) <= params.keep_alive_s
    cold = jnp.where(warm | (params.cold_start_s <= 0), 0.0, params.cold_start_s + seg_params / params.load_bps)
    start = jnp.maximum(lanes[lane], ff) + cold
    ff2 = start + tau
    lf2 = jnp.maximum(start + state.batch * tau, lf + tau)
    # one-hot selects instead of scatters: elementwise, so they vectorise under vmap
    node_hit = active & (jnp.arange(free_at.shape[0]) == node)[:, None]
    free_at = jnp.where(node_hit & (jnp.arange(free_at.shape[1]) == lane), lf2, free_at)
    last_used = jnp.where(node_hit & (jnp.arange(last_used.shape[1]) == state.model), lf2, last_used)
    h = trace_hour(state, params, start)
    nl = params.lane_ok[node].sum()
    g = params.green_kw[h, node] / nl
    pi, pm = params.p_idle[node], params.p_max[node]
    brown = (jnp.maximum(pm - g, 0.0) - jnp.maximum(pi - g, 0.0)) / jnp.maximum(pm - pi, 1e-9)
    kwh = jnp.where(active, state.batch * tau * (pm - pi) / SECONDS_PER_HOUR, 0.0)
    ff = jnp.where(active, ff2, ff)
    lf = jnp.where(active, lf2, lf)
    cost = kwh * brown * params.price[h, node]
    co2 = kwh * brown * params.ci[h, node] / 1000.0
    return free_at, last_used, ff, lf, kwh, kwh * (1.0 - brown), cost, co2


def _wan_link(params: EnvParams, a, b) -> jax.Array:
    """bool [2, N]: the one-hot directed WAN link (row 0 uplink, row 1 downlink; column = the edge endpoint) the
    transfer a -> b occupies when ``link_fifo`` is on; all False for LAN transfers, no-ops, or with the flag off."""
    n = params.dev.shape[0]
    up = (b == params.cloud) & (a != params.cloud)
    down = (a == params.cloud) & (b != params.cloud)
    site = jnp.where(up, a, b)
    direction = jnp.where(down, 1, 0)
    return (params.link_fifo & (up | down) & (jnp.arange(2) == direction)[:, None]
            & (jnp.arange(n) == site)[None, :])


def _transfer(state: EnvState, params: EnvParams, link_free_at, ff, lf, a, b, nbytes, active=True):
    """Network stage a -> b (no-op when a == b): bandwidth-limited; returns (ff, lf, kWh, link_free_at).

    Without ``link_fifo`` there is no contention. With it, a WAN transfer (see :func:`_wan_link`) starts sending
    when its directed link is free, ``start = max(ff, link_free_at[link])``, and holds the link until its last frame
    has arrived: ``link_free_at[link] = lf``. ``active = False`` (a transfer ``place`` computes and then discards)
    leaves the links as they are."""
    moving = a != b
    tau = jnp.where(moving, nbytes / params.bw[a, b], 0.0)
    lat = jnp.where(moving, params.rtt[a, b], 0.0)
    link = _wan_link(params, a, b) & active
    start = jnp.maximum(ff, jnp.where(link, link_free_at, -jnp.inf).max())  # = ff when no link is used
    ff2 = start + lat + tau
    lf2 = jnp.maximum(lf + lat + tau, ff2 + (state.batch - 1.0) * tau)
    kwh = jnp.where(moving, state.batch * nbytes * params.net_kwh_per_byte, 0.0)
    # one-hot select instead of a scatter (vectorises under vmap, as in _compute_stage)
    return ff2, lf2, kwh, jnp.where(link, lf2, link_free_at)


def wan_links_used(state: EnvState, params: EnvParams, action: jax.Array) -> jax.Array:
    """bool [2, N]: the directed WAN links :func:`place` occupies for the current job under ``action`` (none with
    ``link_fifo`` off): those of its input, cut-activation and result transfers."""
    m, s = state.model, state.site
    c, af, ab = action[0], action[1], action[2]
    fe, be = params.front_empty[m, c], params.back_empty[m, c]
    first, last = jnp.where(fe, ab, af), jnp.where(be, af, ab)
    mid = ~fe & ~be & (af != ab)
    return _wan_link(params, s, first) | (_wan_link(params, af, ab) & mid) | _wan_link(params, last, s)


def place(state: EnvState, params: EnvParams, action: jax.Array) -> Outcome:
    """Simulate the current job under ``action`` = (cut, front node, back node); pure, vmappable over actions."""
    m, s = state.model, state.site
    c, af, ab = action[0], action[1], action[2]
    fe, be = params.front_empty[m, c], params.back_empty[m, c]
    first = jnp.where(fe, ab, af)
    last = jnp.where(be, af, ab)
    same = (af == ab) & ~fe & ~be
    tf = params.front_lat[m, c, params.dev[af]] / params.speed[af]
    tb = params.back_lat[m, c, params.dev[ab]] / params.speed[ab]
    tf = jnp.where(same, tf + tb, tf)
    t0 = state.t
    ff, lf, net1, links = _transfer(state, params, state.link_free_at, t0, t0, s, first, params.in_bytes[m])
    seg_f = jnp.where(same, params.front_params[m, c] + params.back_params[m, c], params.front_params[m, c])
    free_at, last_used, ff, lf, e1, g1, c1, co1 = _compute_stage(
        state, params, state.free_at, state.last_used, ff, lf, af, tf, ~fe, seg_f)
    mid = ~fe & ~be & ~same
    ff_m, lf_m, net2, links = _transfer(state, params, links, ff, lf, af, ab, params.cross_bytes[m, c], mid)
    ff, lf, net2 = jnp.where(mid, ff_m, ff), jnp.where(mid, lf_m, lf), jnp.where(mid, net2, 0.0)
    free_at, last_used, ff, lf, e2, g2, c2, co2 = _compute_stage(
        state, params, free_at, last_used, ff, lf, ab, tb, ~be & ~same, params.back_params[m, c])
    ff, lf, net3, links = _transfer(state, params, links, ff, lf, last, s, params.out_bytes[m])
    net = net1 + net2 + net3
    h0 = trace_hour(state, params, t0)
    cost = c1 + c2 + net * params.price[h0, s]
    co2_kg = co1 + co2 + net * params.ci[h0, s] / 1000.0
    frac = params.front_frac[m, c]
    cloud_work = jnp.where(af == params.cloud, frac, 0.0) + jnp.where(ab == params.cloud, 1.0 - frac, 0.0)
    return Outcome(jct=lf - t0, cost=cost, energy_kwh=e1 + e2 + net, green_kwh=g1 + g2, co2_kg=co2_kg, net_kwh=net,
                   cloud_work=cloud_work, free_at=free_at, last_used=last_used, link_free_at=links)


def objective(outcome: Outcome, params: EnvParams) -> jax.Array:
    """The per-job quantity the reward penalises (unclipped): w * cost / c_norm + (1 - w) * JCT / t_norm."""
    return params.w_energy * outcome.cost / params.c_norm + (1.0 - params.w_energy) * outcome.jct / params.t_norm


def reward(outcome: Outcome, params: EnvParams) -> jax.Array:
    """The reward of an accepted placement: -(w * f(cost / c_norm) + (1 - w) * f(JCT / t_norm)), with f a clip at
    +-reward_clip (JCT at [0, reward_clip]) or, with ``reward_symlog``, ``symlog`` (no bound, logarithmic beyond
    1). Either way both terms are scaled alike, so a job queued for minutes cannot outweigh hundreds of good ones."""
    cost_n, jct_n = outcome.cost / params.c_norm, outcome.jct / params.t_norm
    clipped = (jnp.clip(cost_n, -params.reward_clip, params.reward_clip), jnp.clip(jct_n, 0.0, params.reward_clip))
    cost_s, jct_s = (jnp.where(params.reward_symlog, symlog(x), c) for x, c in zip((cost_n, jct_n), clipped,
                                                                                    strict=True))
    return -(params.w_energy * cost_s + (1.0 - params.w_energy) * jct_s)


def inverse_cdf(probs: jax.Array, u: jax.Array) -> jax.Array:
    """Index drawn from the categorical ``probs`` (unnormalised, >= 0) by a uniform ``u`` in [0, 1): the first
    index whose cumulative share exceeds ``u``. Zero-probability entries are never drawn (the last cumulative
    share is exactly 1, so trailing zeros are skipped too)."""
    cdf = jnp.cumsum(probs)
    cdf = cdf / cdf[-1]
    return jnp.sum(cdf <= u).astype(jnp.int32)


def symlog(x: jax.Array) -> jax.Array:
    return jnp.sign(x) * jnp.log1p(jnp.abs(x))


class PlacementEnv(Environment[EnvState, EnvParams]):
    """Actions: int32[3] = (partition candidate, front node, back node); see the module docstring.

    Randomness: ``reset_env`` and ``step_env`` draw the same four uniforms from their key (:meth:`_draw`) -- the
    next job, its gap and the episode's start hour -- so the auto-reset reuses the step's key and one draw serves
    both (``reset_reuses_step_key``): when an episode ends the step's next job is discarded and the reset state
    uses the draw instead.
    """

    reset_reuses_step_key = True

    @staticmethod
    def _draw(key: jax.Array) -> jax.Array:
        return jax.random.uniform(key, (4,))

    def action_space(self, params: EnvParams) -> MultiDiscrete:
        n = params.dev.shape[0]
        return MultiDiscrete((int(params.cand_ok.shape[1]), n, n))

    def action_mask(self, state: EnvState, params: EnvParams) -> BranchMask:
        m, s = state.model, state.site
        n = params.dev.shape[0]
        site = jnp.arange(n) == s
        fits_f = params.mem[None, :] >= params.front_mem[m][:, None]
        fits_b = params.mem[None, :] >= params.back_mem[m][:, None]
        front = jnp.where(params.front_empty[m][:, None], site[None, :], fits_f)
        back = jnp.where(params.back_empty[m][:, None], site[None, :], fits_b)
        return BranchMask(params.cand_ok[m], (front, back))

    def _sample_job(self, u: jax.Array, state: EnvState, params: EnvParams, t: jax.Array) -> EnvState:
        """The job arriving at ``t`` from three uniforms ``u`` in [0, 1) (model, batch, site; inverse CDF, so one
        random draw per job instead of a Gumbel vector per categorical)."""
        batch = jnp.round(params.batch_min * (params.batch_max / params.batch_min) ** u[1])
        return state.replace(t=t, model=inverse_cdf(params.model_probs, u[0]), batch=batch,
                             site=inverse_cdf(params.site_probs, u[2]))

    def reset_env(self, key, params: EnvParams):
        u = self._draw(key)
        n, lm = params.lane_ok.shape
        m = params.model_probs.shape[0]
        n_start = params.start_hours.shape[0]
        state = EnvState(
            t=jnp.zeros((), jnp.float32),
            hour0=params.start_hours[jnp.minimum((u[3] * n_start).astype(jnp.int32), n_start - 1)].astype(jnp.int32),
            free_at=jnp.zeros((n, lm), jnp.float32),
            last_used=jnp.full((n, m), NO_USE, jnp.float32),
            link_free_at=jnp.zeros((2, n), jnp.float32),
            model=jnp.zeros((), jnp.int32), batch=jnp.ones((), jnp.float32), site=jnp.zeros((), jnp.int32),
            step=jnp.zeros((), jnp.int32),
        )
        state = self._sample_job(u, state, params, state.t)
        return self.get_obs(state, params), state

    def placeable(self, state: EnvState, params: EnvParams, action: jax.Array) -> jax.Array:
        """``is_valid(action, mask) & any_valid(mask)`` for ``mask = action_mask(state)``, from the job's [C]
        rows only (the [C, N] mask is not built; tested equal)."""
        m, s = state.model, state.site
        c, af, ab = action[0], action[1], action[2]
        fe, be = params.front_empty[m], params.back_empty[m]
        mem_max = params.mem.max()
        some_node = params.cand_ok[m] & (fe | (mem_max >= params.front_mem[m])) & (be | (mem_max >= params.back_mem[m]))
        front_ok = jnp.where(fe[c], af == s, params.mem[af] >= params.front_mem[m, c])
        back_ok = jnp.where(be[c], ab == s, params.mem[ab] >= params.back_mem[m, c])
        return params.cand_ok[m, c] & front_ok & back_ok & some_node.any()

    def step_env(self, key, state: EnvState, action: jax.Array, params: EnvParams):
        ok = self.placeable(state, params, action)
        out = place(state, params, action)
        r = jnp.where(ok, reward(out, params), -params.reject_penalty)
        okf = ok.astype(jnp.float32)
        info = {
            "jct": out.jct * okf, "cost": out.cost * okf, "energy_kwh": out.energy_kwh * okf,
            "green_kwh": out.green_kwh * okf, "co2_kg": out.co2_kg * okf, "net_kwh": out.net_kwh * okf,
            "cloud_work": out.cloud_work * okf,
            "objective": jnp.where(ok, objective(out, params), params.reject_penalty),
            "rejected": 1.0 - okf, "hour": trace_hour(state, params, state.t), "model": state.model,
            "site": state.site, "action": action,
        }
        state = state.replace(free_at=jnp.where(ok, out.free_at, state.free_at),
                              last_used=jnp.where(ok, out.last_used, state.last_used),
                              link_free_at=jnp.where(ok, out.link_free_at, state.link_free_at), step=state.step + 1)
        u = self._draw(key)
        rate = params.rate[trace_hour(state, params, state.t)]
        gap = -jnp.log1p(-u[3]) / rate  # exponential inter-arrival time
        state = self._sample_job(u, state, params, state.t + gap)
        done = state.step >= params.episode_jobs
        return self.get_obs(state, params), state, r, done, info

    def get_obs(self, state: EnvState, params: EnvParams) -> jax.Array:
        m, s = state.model, state.site
        n_models = params.model_probs.shape[0]
        n = params.dev.shape[0]
        h = trace_hour(state, params, state.t)
        backlog = jnp.maximum(state.free_at - state.t, 0.0) / params.t_norm
        backlog = jnp.where(params.lane_ok, backlog, jnp.inf)
        nl = params.lane_ok.sum(-1)
        busy_min = jnp.log1p(backlog.min(-1))
        busy_mean = jnp.log1p(jnp.where(params.lane_ok, backlog, 0.0).sum(-1) / nl)
        # [2N] wait for each site's uplink, then downlink (always present, so the size does not depend on the flag;
        # zeros with link_fifo off and in the cloud's columns)
        link_wait = jnp.log1p(jnp.maximum(state.link_free_at - state.t, 0.0) / params.t_norm).reshape(-1)
        green_share = jnp.clip(params.green_kw[h] / nl / params.p_max, 0.0, 2.0)
        warm = ((state.t - state.last_used[:, m]) <= params.keep_alive_s).astype(jnp.float32)
        tod = 2.0 * jnp.pi * ((h + params.local_offset_h) % 24) / 24.0
        return jnp.concatenate([
            jax.nn.one_hot(m, n_models),
            jnp.log(state.batch / params.batch_min)[None]
            / jnp.maximum(jnp.log(params.batch_max / params.batch_min), 1e-6),
            jax.nn.one_hot(s, n),
            params.front_frac[m],
            jnp.log1p(params.cross_bytes[m]) / 16.0,
            params.cand_ok[m].astype(jnp.float32),  # the mask's root
            busy_min, busy_mean, link_wait,
            symlog(params.price[h] * 1000.0 / 50.0) / 3.0,
            green_share,
            params.ci[h] / 500.0,
            warm,
            jnp.stack([jnp.sin(tod), jnp.cos(tod)]),
        ]).astype(jnp.float32)
