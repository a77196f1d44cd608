"""MAIFS policy/value networks (flax NNX) and the coordinated joint-action sampler.

:class:`MaifsNet` (shared parameters across agents, MAPPO-style), all sizes small for CPU training:

1. Encoders: each agent's own server state plus global features -> ``h_i``; each candidate job's features as
   that agent sees them -> ``e_ik``; ``h_i`` += a projection of the mean of its valid job embeddings.
2. **Multi-agent attention** (MAAC-style, Iqbal & Sha, ICML'19): ``h_i`` attends over every agent's embedding
   (scaled dot product, residual), so each agent's decision uses the resource state other agents observe.
3. Pick logits ``s_ik = <W h_i, e_ik> / sqrt(H) + u(e_ik)`` plus a no-op logit from ``h_i``.
4. **Dynamic coordination graph** (after DCG, Boehmer et al., ICML'20, adapted to a policy-gradient actor):
   the edge weight between agents ``i != j`` is the probability that their current pick distributions collide on
   the same job, ``w_ij = sum_k p_i(k) p_j(k)``; agents exchange messages along these edges
   (``h_i += sum_j w_ij MLP([h_j, E_pj[e_j]])``) and recompute their logits. Sampling then resolves the remaining
   conflicts along the graph: agents act in index order and a job taken by an earlier agent is masked for later
   ones (an autoregressive joint policy, so ``log pi(a) = sum_i log pi_i(a_i | s, a_<i)`` is exact for PPO).
5. Level logits for the picked job: ``MLP([h_i, e_i,pick]) + w . f_level`` where ``f_level`` is each level's
   profiled speed and CPU/memory cost (``w`` starts preferring the faster level); the critic reads the mean agent
   embedding after attention plus the global features (a centralised value, MAPPO).

Ablations are a traced :class:`Variant` (so all variants share one compiled training and vmap together):
``attention=0`` skips step 2 (agents see only their own group); ``coordination=0`` skips step 4 and samples
agents independently (the environment then drops colliding picks); ``fungible=0`` restricts every pick to the
fair-share level (fixed, GPU-proportional allocation). :class:`FlatNet` is the single-agent DL2-style baseline:
one MLP over the flattened cluster state and job slots.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx

from mlsys_repro.common.models.mlp import MLP
from mlsys_repro.common.rl import ppo
from mlsys_repro.papers.maifs.env import (
    GPUS_FEATURE,
    LEVELS,
    PRIV_FEATURES,
    REMAINING_FEATURE,
    RUNNING_FEATURE,
    WIDE_FEATURE,
)

BEST_LEVEL, FAIR_LEVEL = LEVELS.index("best"), LEVELS.index("fair")
RELEASE_PRIOR = -3.0  # initial logit offset of releasing a lease (an untrained policy rarely preempts)


def _dense(sizes: tuple[int, ...], rngs: nnx.Rngs, final_scale: float = 1.0) -> MLP:
    """The network's dense blocks: tanh between layers, linear output."""
    return MLP(sizes, rngs, activation=jax.nn.tanh, final_scale=final_scale)


class Variant(NamedTuple):
    """Traced ablation switches (1.0 = on). ``warm``: training starts from the behaviour clone of the SRTF teacher
    (:func:`srtf_teacher`) instead of the network's random initialisation (the cold start)."""

    attention: jax.Array
    coordination: jax.Array
    fungible: jax.Array
    warm: jax.Array


def variant(attention: bool = True, coordination: bool = True, fungible: bool = True, warm: bool = True) -> Variant:
    return Variant(*(jnp.asarray(float(x), jnp.float32) for x in (attention, coordination, fungible, warm)))


def level_prior(rngs: nnx.Rngs, prior_beta: float = 0.0) -> nnx.Linear:
    """Linear score of an allocation level from (profiled speed, CPU/fair, memory/fair), initialised to prefer
    the faster level (weight ``3 (1 + prior_beta)`` on speed, 0 on cost; with the SRTF prior the level is as
    sure as the pick, so sampled episodes stay near the prior's own); training moves it."""
    lin = nnx.Linear(3, 1, rngs=rngs)
    lin.kernel.set_value(jnp.array([[3.0 * (1.0 + prior_beta)], [0.0], [0.0]]))
    lin.bias.set_value(jnp.zeros(1))
    return lin


def release_prior(job_dim: int, rngs: nnx.Rngs) -> nnx.Linear:
    """Linear pick score from raw job features, zero except ``RELEASE_PRIOR`` on the "running job" feature."""
    lin = nnx.Linear(job_dim, 1, rngs=rngs)
    lin.kernel.set_value(jnp.zeros((job_dim, 1)).at[RUNNING_FEATURE, 0].set(RELEASE_PRIOR))
    return lin


def srtf_prior(jobs: jax.Array, beta: float) -> jax.Array:
    """``[..., K + R + 1]`` prior pick logits: ``-beta * (log1p(remaining h) - the least of it)`` for every pending
    candidate, ``-beta`` for every release option, 0 for no-op (valid only when nothing else is). Added to the
    learned logits, it makes the greedy pick of an untrained network the pending job with the shortest remaining
    work (SRTF order: Synergy-tune SRTF's choice in this action space; the level prior picks the profiled best
    allocation, with the environment's fall-backs as Synergy's tuning-down) and a release rare, and training
    learns a residual on it (a warm start from the best heuristic; ``beta = 0``: no prior)."""
    pending = (jobs[..., 0] > 0.5) & (jobs[..., RUNNING_FEATURE] < 0.5)
    rem = jobs[..., REMAINING_FEATURE]
    best = jnp.min(jnp.where(pending, rem, jnp.inf), axis=-1, keepdims=True)
    s = jnp.where(pending, -beta * (rem - jnp.where(jnp.isfinite(best), best, 0.0)), -beta)
    return jnp.concatenate([s, jnp.zeros(s.shape[:-1] + (1,), s.dtype)], -1)


class Heads(NamedTuple):
    pick: jax.Array  # [A, K+1] raw logits (callers mask them)
    emb: jax.Array  # [A, H] final agent embeddings
    jobs: jax.Array  # [A, K, H] job embeddings
    value: jax.Array  # [] centralised value


class MaifsNet(nnx.Module):
    """Actor-critic over stacked per-agent observations (leading axis = agent)."""

    def __init__(self, self_dim: int, glob_dim: int, job_dim: int, levels: int, hidden: int = 32, *,
                 priv_dim: int = PRIV_FEATURES, prior_beta: float = 0.0, rngs: nnx.Rngs):
        h = hidden
        self.hidden = hidden
        self.prior_beta = prior_beta
        self.agent_enc = _dense((self_dim + glob_dim, h, h), rngs)
        self.job_enc = _dense((job_dim, h, h), rngs)
        self.job_pool = nnx.Linear(h, h, rngs=rngs)
        self.q = nnx.Linear(h, h, rngs=rngs)
        self.k = nnx.Linear(h, h, rngs=rngs)
        self.v = nnx.Linear(h, h, rngs=rngs)
        self.pick_q = nnx.Linear(h, h, rngs=rngs)
        self.pick_u = nnx.Linear(h, 1, rngs=rngs)
        self.noop = _dense((h, h, 1), rngs, final_scale=0.01)
        self.pick_q.kernel.set_value(self.pick_q.kernel.get_value() * 0.01)
        self.pick_u.kernel.set_value(self.pick_u.kernel.get_value() * 0.01)
        self.msg = _dense((2 * h, h, h), rngs)
        self.level = _dense((2 * h, h, levels), rngs, final_scale=0.01)
        self.level_lin = level_prior(rngs, prior_beta)
        self.pick_lin = release_prior(job_dim, rngs)
        self.critic = _dense((h + glob_dim + priv_dim, h, 1), rngs)
        # counterfactual critic (per-agent credit, COMA-style): Q_i(s, a_<i, a) for each pick option a of agent i,
        # given the jobs the agents before it picked; it reads the actor's features without moving them
        self.q_prev = nnx.Linear(h, h, rngs=rngs)
        self.q_ctx = nnx.Linear(glob_dim + priv_dim, h, rngs=rngs)
        self.q_pick = nnx.Linear(h, h, rngs=rngs)
        self.q_u = nnx.Linear(h, 1, rngs=rngs)
        self.q_noop = nnx.Linear(h, 1, rngs=rngs)

    def q_values(self, heads: Heads, picks: jax.Array, obs: dict) -> jax.Array:
        """``[A, K+R+1]`` counterfactual action values: agent ``i``'s value of each of its pick options given the
        state and the picks of agents ``< i`` (the order the joint policy samples in)."""
        e = jax.lax.stop_gradient(heads.jobs)  # [A, K+R, H]
        hi = jax.lax.stop_gradient(heads.emb)
        n = e.shape[1]
        pe = jnp.take_along_axis(e, jnp.clip(picks, 0, n - 1)[:, None, None], axis=1)[:, 0] * (picks < n)[:, None]
        prev = jnp.cumsum(pe, 0) - pe  # sum of the job embeddings earlier agents picked
        ctx = jnp.concatenate([obs["glob"][0], _priv(obs)], -1)
        hq = jax.nn.tanh(hi + self.q_prev(prev) + self.q_ctx(ctx)[None])
        q = jnp.einsum("ah,akh->ak", self.q_pick(hq), e) / jnp.sqrt(self.hidden) + self.q_u(e)[..., 0]
        return jnp.concatenate([q, self.q_noop(hq)], -1)

    def _logits(self, hi, e):
        # bilinear agent-job score plus a per-job utility: cheap enough to evaluate for every (agent, job) pair
        s = jnp.einsum("ah,akh->ak", self.pick_q(hi), e) / jnp.sqrt(self.hidden) + self.pick_u(e)[..., 0]
        return jnp.concatenate([s, self.noop(hi)], -1)

    def _pick_direct(self, jobs):
        return jnp.concatenate([self.pick_lin(jobs)[..., 0], jnp.zeros(jobs.shape[:1] + (1,))], -1)

    def __call__(self, obs: dict, var: Variant, k: int | None = None) -> Heads:
        mask = obs["mask"]  # [A, K+R+1]
        a, kk1 = mask.shape
        hi = self.agent_enc(jnp.concatenate([obs["self"], obs["glob"]], -1))  # [A, H]
        e = self.job_enc(obs["jobs"])  # [A, K, H]
        valid = mask[:, :-1, None].astype(e.dtype)
        pooled = (e * valid).sum(1) / jnp.maximum(valid.sum(1), 1.0)
        hi = hi + self.job_pool(pooled)
        att = jax.nn.softmax(self.q(hi) @ self.k(hi).T / jnp.sqrt(self.hidden), axis=-1)  # [A, A]
        hi = hi + var.attention * (att @ self.v(hi))
        value = self.critic(jnp.concatenate([hi.mean(0), obs["glob"][0], _priv(obs)], -1))[0]
        # a linear path from raw job features (e.g. remaining work) and the fixed SRTF prior
        direct = self._pick_direct(obs["jobs"]) + srtf_prior(obs["jobs"], self.prior_beta)
        logits = self._logits(hi, e) + direct
        p = jax.nn.softmax(ppo.masked_logits(logits, mask), -1)[:, :-1]  # [A, K+R] pick probabilities (no no-op)
        kk = p.shape[1] if k is None else k
        w = p[:, :kk] @ p[:, :kk].T * (1.0 - jnp.eye(a))  # collision probability on shared candidates
        intent = (p[:, :, None] * e).sum(1)  # expected picked-job embedding
        hc = hi + w @ self.msg(jnp.concatenate([hi, intent], -1))
        logits = jnp.where(var.coordination > 0, self._logits(hc, e) + direct, logits)
        hi = jnp.where(var.coordination > 0, hc, hi)
        return Heads(logits, hi, e, value)

    def level_logits(self, heads: Heads, picks: jax.Array, levels: jax.Array) -> jax.Array:
        """``[A, L]`` logits of the allocation level for each agent's pick; ``levels`` ``[A, K, L, 3]``."""
        kk = heads.jobs.shape[1]
        idx = jnp.clip(picks, 0, kk - 1)
        ej = jnp.take_along_axis(heads.jobs, idx[:, None, None], axis=1)[:, 0]
        f = jnp.take_along_axis(levels, idx[:, None, None, None], axis=1)[:, 0]  # [A, L, 3]
        return self.level(jnp.concatenate([heads.emb, ej], -1)) + self.level_lin(f)[..., 0]


class FlatNet(nnx.Module):
    """Single-agent DL2-style actor-critic: one MLP over the flattened state (expects exactly one agent)."""

    def __init__(self, self_dim: int, glob_dim: int, job_dim: int, num_jobs: int, levels: int, hidden: int = 128,
                 *, priv_dim: int = PRIV_FEATURES, prior_beta: float = 0.0, rngs: nnx.Rngs):
        d = self_dim + glob_dim + num_jobs * job_dim
        self.num_jobs, self.levels, self.prior_beta = num_jobs, levels, prior_beta
        self.trunk = _dense((d, hidden, hidden), rngs)
        self.pi = nnx.Linear(hidden, num_jobs + 1, rngs=rngs)
        self.pick_lin = release_prior(job_dim, rngs)
        self.lv = nnx.Linear(hidden, num_jobs * levels, rngs=rngs)
        self.vf = _dense((hidden + priv_dim, hidden, 1), rngs)
        self.pi.kernel.set_value(self.pi.kernel.get_value() * 0.01)
        self.lv.kernel.set_value(self.lv.kernel.get_value() * 0.01)
        self.level_lin = level_prior(rngs, prior_beta)
        self.qf = nnx.Linear(hidden + glob_dim + priv_dim, num_jobs + 1, rngs=rngs)  # counterfactual critic

    def q_values(self, heads: Heads, picks: jax.Array, obs: dict) -> jax.Array:
        """``[1, K+R+1]`` action values of the single agent's pick options (no other agent to condition on)."""
        z = jax.lax.stop_gradient(heads.emb)
        ctx = jnp.concatenate([obs["glob"][0], _priv(obs)], -1)
        return self.qf(jnp.concatenate([z, jnp.broadcast_to(ctx[None], (z.shape[0], ctx.shape[0]))], -1))

    def __call__(self, obs: dict, var: Variant, k: int | None = None) -> Heads:
        x = jnp.concatenate([obs["self"], obs["glob"], obs["jobs"].reshape(obs["jobs"].shape[0], -1)], -1)
        z = jax.nn.tanh(self.trunk(x))  # [1, H]
        logits = self.pi(z) + jnp.concatenate([self.pick_lin(obs["jobs"])[..., 0], jnp.zeros((z.shape[0], 1))], -1)
        logits = logits + srtf_prior(obs["jobs"], self.prior_beta)
        lv = self.lv(z).reshape(z.shape[0], self.num_jobs, self.levels)
        return Heads(logits, z, lv, self.vf(jnp.concatenate([z[0], _priv(obs)], -1))[0])

    def level_logits(self, heads: Heads, picks: jax.Array, levels: jax.Array) -> jax.Array:
        idx = jnp.clip(picks, 0, self.num_jobs - 1)
        f = jnp.take_along_axis(levels, idx[:, None, None, None], axis=1)[:, 0]
        return jnp.take_along_axis(heads.jobs, idx[:, None, None], axis=1)[:, 0] + self.level_lin(f)[..., 0]


def _priv(obs: dict) -> jax.Array:
    """The critic's privileged inputs (the same for every agent; empty when the observation has none)."""
    return obs["priv"][0] if "priv" in obs else jnp.zeros((0,), jnp.float32)


# ---------------------------------------------------------------------------------------------- joint action


class JointAction(NamedTuple):
    picks: jax.Array  # [A] int32 (K = no-op)
    levels: jax.Array  # [A] int32
    pick_masks: jax.Array  # [A, K+1] the masks each agent actually sampled under
    logp: jax.Array  # [A] log pi_i(pick, level | s, a_<i)
    entropy: jax.Array  # [A]
    value: jax.Array  # []
    probs: jax.Array  # [A, K+1] pick probabilities under pick_masks
    q: jax.Array  # [A, K+1] counterfactual action values (zeros unless asked for: ``act(..., with_q=True)``)
    level_mode: jax.Array  # [A] the most likely level for each agent's pick (its greedy level)


def _conditional_masks(base: jax.Array, picks: jax.Array | None, key: jax.Array, logits: jax.Array,
                       sequential, greedy, kk: int, cap: jax.Array | None = None,
                       gpus: jax.Array | None = None, wide: jax.Array | None = None,
                       run_ids: jax.Array | None = None) -> tuple[jax.Array, jax.Array]:
    """Sample (or replay ``picks``) agent by agent. With ``sequential`` agent ``i`` sees the state after the
    agents before it: a shared candidate (index < ``kk``) taken by an earlier agent is masked, and, given the
    capacity inputs (``cap [A, 2]``: GPUs placeable at the minimal allocation in the agent's group and in the
    cluster; ``gpus``, ``wide`` ``[A, kk]`` per candidate), so is a placement the capacity left may not hold: a
    group an earlier agent placed on leaves the pool wide jobs draw from, and after a wide placement (which may
    take GPUs of any group) no other placement is offered in the step. Given ``run_ids`` ``[A, R]`` (the running
    slot behind each release option), a job an earlier agent released (a job spanning several agents' servers is a
    release option of each) is no release option for later ones. No-op becomes valid when nothing is left.
    Without ``sequential`` the masks are the simultaneous ones (the environment drops conflicting picks).
    ``greedy`` is a Python bool or a traced one (then both are computed and one is selected)."""
    a, n1 = base.shape
    noop = n1 - 1
    nr = n1 - 1 - kk  # release options per agent
    if cap is None:
        cap = jnp.full((a, 2), jnp.inf)
        gpus = jnp.zeros((a, kk))
        wide = jnp.zeros((a, kk), bool)
    if run_ids is None:
        run_ids = -2 - jnp.arange(a * nr, dtype=jnp.int32).reshape(a, nr)  # distinct: no shared release options

    def body(carry, x):
        taken, pool, wide_done, released = carry
        i, bm, lg, kx, cp, g, wd, rid = x
        room = ~wide_done & jnp.where(wd, g <= pool + 1e-6, True)
        block = (taken | ~room) & sequential
        gone = (rid[:, None] == released[None, :]).any(-1) & sequential  # [R] released by an earlier agent
        m = bm & ~jnp.concatenate([block, gone, jnp.zeros(1, bool)])
        m = m.at[noop].set(m[noop] | ~m[:kk].any())
        if picks is not None:
            p = picks[i]
        else:
            p = _choose(greedy, kx, lg, m)
        placed = p < kk
        pw = placed & wd[jnp.clip(p, 0, kk - 1)]
        pool = jnp.where(pw, pool - g[jnp.clip(p, 0, kk - 1)], jnp.where(placed, pool - cp[0], pool))
        taken = taken | ((jnp.arange(kk) == p) & placed)
        is_rel = (p >= kk) & (p < kk + nr)
        released = released.at[i].set(jnp.where(is_rel, rid[jnp.clip(p - kk, 0, max(nr - 1, 0))], -1)) if nr \
            else released
        return (taken, pool, wide_done | pw, released), (p.astype(jnp.int32), m)

    init = (jnp.zeros(kk, bool), cap[0, 1], jnp.zeros((), bool), jnp.full(a, -1, jnp.int32))
    _, (ps, ms) = jax.lax.scan(body, init, (jnp.arange(a), base, logits, jax.random.split(key, a), cap, gpus,
                                            wide, run_ids))
    return ps, ms


def _choose(greedy, key: jax.Array, logits: jax.Array, mask: jax.Array) -> jax.Array:
    """The mode (``greedy``) or a sample of a masked categorical; ``greedy`` may be traced."""
    if isinstance(greedy, bool):
        return ppo.categorical_mode(logits, mask) if greedy else ppo.categorical_sample(key, logits, mask)
    return jnp.where(greedy, ppo.categorical_mode(logits, mask), ppo.categorical_sample(key, logits, mask))


def act(model, obs: dict, key: jax.Array | None, var: Variant, *, greedy=False,
        replay: tuple[jax.Array, jax.Array, jax.Array] | None = None, k: int | None = None,
        with_q: bool = False) -> JointAction:
    """Joint action of all agents for one environment (stacked obs). ``replay=(picks, levels, pick_masks)``
    recomputes log-probabilities and entropies of stored actions (PPO update). ``k`` = number of shared
    (pending) candidates; pick indices ``k .. k+R-1`` release an agent's running jobs (default: no releases).
    ``greedy`` (a Python or traced bool) takes each agent's most likely choice; ``with_q`` also returns the
    counterfactual critic's action values given the picks."""
    kk = obs["mask"].shape[-1] - 1 if k is None else k
    heads = model(obs, var, kk)
    key = jax.random.key(0) if key is None else key
    fair_only = jnp.arange(obs["level_mask"].shape[-1]) == 1
    lmask = obs["level_mask"] & ((var.fungible > 0) | fair_only)
    if replay is None:
        kp, kl = jax.random.split(key)
        cap = obs.get("cap")
        g = None if cap is None else jnp.round(obs["jobs"][:, :kk, GPUS_FEATURE] * 8.0)
        wd = None if cap is None else obs["jobs"][:, :kk, WIDE_FEATURE] > 0.5
        picks, masks = _conditional_masks(obs["mask"], None, kp, heads.pick, var.coordination > 0, greedy, kk,
                                          cap, g, wd, obs.get("run_ids"))
        lv_logits = model.level_logits(heads, picks, obs["levels"])
        levels = _choose(greedy, kl, lv_logits, lmask)
    else:
        picks, levels, masks = replay
        lv_logits = model.level_logits(heads, picks, obs["levels"])
    placed = picks < kk
    lp = ppo.categorical_log_prob(heads.pick, picks, masks) + jnp.where(
        placed, ppo.categorical_log_prob(lv_logits, levels, lmask), 0.0)
    ent = ppo.categorical_entropy(heads.pick, masks) + jnp.where(
        placed, ppo.categorical_entropy(lv_logits, lmask), 0.0)
    probs = jax.nn.softmax(ppo.masked_logits(heads.pick, masks), -1)
    q = model.q_values(heads, picks, obs) if with_q else jnp.zeros_like(probs)
    return JointAction(picks.astype(jnp.int32), levels.astype(jnp.int32), masks, lp, ent, heads.value, probs, q,
                       ppo.categorical_mode(lv_logits, lmask).astype(jnp.int32))


def _teacher_logits(obs: dict, kk: int) -> jax.Array:
    """``[A, K+R+1]`` the teacher's scores: minus the remaining fair-share work of each shared candidate (the
    largest is the SRTF pick; ties go to the earlier candidate), a release far below anything (never taken while
    no-op is valid, and no-op is valid whenever no placement is), no-op below every placement."""
    rem = obs["jobs"][..., REMAINING_FEATURE]
    n = rem.shape[-1]
    return jnp.concatenate([jnp.where(jnp.arange(n) < kk, -rem, -1e6), jnp.full(rem.shape[:-1] + (1,), -1e5)], -1)


def _teacher_levels(var: Variant, picks: jax.Array) -> jax.Array:
    """``[A]`` Synergy-tune's allocation for each agent's pick: its profiled best demand (level ``best``, the
    fastest level by construction; fair share for a job wider than a server), fair share in the non-fungible
    variant. (Labelling "the fastest level, ties to the smaller one" instead hinged on exact speed ties between
    near-identical levels: minimal for speed-insensitive models, fair share for a model whose minimal allocation is
    10x slower; the clone could not tell the two apart and gave the latter minimal, 10x slower: 1.56x the teacher's
    JCT on Philly's check windows.)"""
    return jnp.broadcast_to(jnp.where(var.fungible > 0, BEST_LEVEL, FAIR_LEVEL), picks.shape).astype(jnp.int32)


def srtf_teacher(obs: dict, var: Variant, k: int | None = None) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Synergy-tune SRTF in MAIFS's action space, the behaviour-cloning teacher: agents in order (the capacity-aware
    sequential masks of the coordinated sampler, so no pick over-commits), each takes its valid pending candidate
    with the least remaining fair-share work (ties: the earlier candidate), never a release (no-op when nothing
    fits), at Synergy-tune's allocation: the profiled best demand (level ``best``; fair share in the non-fungible
    variant; the environment falls back to fair share, then minimal, when it does not fit, and tops it up later, as
    Synergy-tune's tuning-down and re-grant). Returns ``(picks [A], levels [A], pick_masks [A, K+R+1])`` for one
    environment's stacked obs."""
    mask = obs["mask"]
    kk = mask.shape[-1] - 1 if k is None else k
    jobs = obs["jobs"]
    cap = obs.get("cap")
    g = None if cap is None else jnp.round(jobs[:, :kk, GPUS_FEATURE] * 8.0)
    wd = None if cap is None else jobs[:, :kk, WIDE_FEATURE] > 0.5
    picks, masks = _conditional_masks(mask, None, jax.random.key(0), _teacher_logits(obs, kk), True, True, kk, cap,
                                      g, wd, obs.get("run_ids"))
    return picks, _teacher_levels(var, picks), masks


def teacher_relabel(obs: dict, var: Variant, masks: jax.Array, k: int | None = None) -> tuple[jax.Array, jax.Array]:
    """The teacher's decision at each agent's own decision point: ``(picks [A], levels [A])``, agent ``i``'s the
    SRTF pick under ``masks[i]`` (the masks it faced, which carry the picks of the agents before it) and Synergy-tune's
    level for it. Under the teacher's own masks this is :func:`srtf_teacher`'s joint action; under the masks a
    clone sampled under, it is what the teacher would have done where the clone stood (DAgger's relabelling)."""
    kk = masks.shape[-1] - 1 if k is None else k
    picks = ppo.categorical_mode(_teacher_logits(obs, kk), masks).astype(jnp.int32)
    return picks, _teacher_levels(var, picks)


__all__ = ["FlatNet", "Heads", "JointAction", "MaifsNet", "Variant", "act", "srtf_teacher", "teacher_relabel",
           "variant"]
