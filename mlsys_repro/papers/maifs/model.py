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

RELEASE_PRIOR = -3.0  # initial logit offset of releasing a lease (an untrained policy rarely preempts)


def _dense(sizes: tuple[int, ...], rngs: nnx.Rngs, final_scale: float = 1.0) -> MLP:
    """The network's dense blocks: tanh between layers, linear output."""
    return MLP(sizes, rngs, activation=jax.nn.tanh, final_scale=final_scale)


class Variant(NamedTuple):
    """Traced ablation switches (1.0 = on)."""

    attention: jax.Array
    coordination: jax.Array
    fungible: jax.Array


def variant(attention: bool = True, coordination: bool = True, fungible: bool = True) -> Variant:
    return Variant(*(jnp.asarray(float(x), jnp.float32) for x in (attention, coordination, fungible)))


def level_prior(rngs: nnx.Rngs) -> nnx.Linear:
    """Linear score of an allocation level from (profiled speed, CPU/fair, memory/fair), initialised to prefer
    the faster level (weight 3 on speed, 0 on cost); training moves it."""
    lin = nnx.Linear(3, 1, rngs=rngs)
    lin.kernel.set_value(jnp.array([[3.0], [0.0], [0.0]]))
    lin.bias.set_value(jnp.zeros(1))
    return lin


def release_prior(job_dim: int, rngs: nnx.Rngs) -> nnx.Linear:
    """Linear pick score from raw job features, zero except ``RELEASE_PRIOR`` on the "running job" feature."""
    from mlsys_repro.papers.maifs.env import RUNNING_FEATURE

    lin = nnx.Linear(job_dim, 1, rngs=rngs)
    lin.kernel.set_value(jnp.zeros((job_dim, 1)).at[RUNNING_FEATURE, 0].set(RELEASE_PRIOR))
    return lin


class Heads(NamedTuple):
    pick: jax.Array  # [A, K+1] raw logits (callers mask them)
    emb: jax.Array  # [A, H] final agent embeddings
    jobs: jax.Array  # [A, K, H] job embeddings
    value: jax.Array  # [] centralised value


class MaifsNet(nnx.Module):
    """Actor-critic over stacked per-agent observations (leading axis = agent)."""

    def __init__(self, self_dim: int, glob_dim: int, job_dim: int, levels: int, hidden: int = 32, *,
                 rngs: nnx.Rngs):
        h = hidden
        self.hidden = hidden
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
        self.level_lin = level_prior(rngs)
        self.pick_lin = release_prior(job_dim, rngs)
        self.critic = _dense((h + glob_dim, h, 1), rngs)

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
        value = self.critic(jnp.concatenate([hi.mean(0), obs["glob"][0]], -1))[0]
        direct = self._pick_direct(obs["jobs"])  # a linear path from raw job features (e.g. remaining work)
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
                 *, rngs: nnx.Rngs):
        d = self_dim + glob_dim + num_jobs * job_dim
        self.num_jobs, self.levels = num_jobs, levels
        self.trunk = _dense((d, hidden, hidden), rngs)
        self.pi = nnx.Linear(hidden, num_jobs + 1, rngs=rngs)
        self.pick_lin = release_prior(job_dim, rngs)
        self.lv = nnx.Linear(hidden, num_jobs * levels, rngs=rngs)
        self.vf = nnx.Linear(hidden, 1, rngs=rngs)
        self.pi.kernel.set_value(self.pi.kernel.get_value() * 0.01)
        self.lv.kernel.set_value(self.lv.kernel.get_value() * 0.01)
        self.level_lin = level_prior(rngs)

    def __call__(self, obs: dict, var: Variant, k: int | None = None) -> Heads:
        x = jnp.concatenate([obs["self"], obs["glob"], obs["jobs"].reshape(obs["jobs"].shape[0], -1)], -1)
        z = jax.nn.tanh(self.trunk(x))  # [1, H]
        logits = self.pi(z) + jnp.concatenate([self.pick_lin(obs["jobs"])[..., 0], jnp.zeros((z.shape[0], 1))], -1)
        lv = self.lv(z).reshape(z.shape[0], self.num_jobs, self.levels)
        return Heads(logits, z, lv, self.vf(z)[0, 0])

    def level_logits(self, heads: Heads, picks: jax.Array, levels: jax.Array) -> jax.Array:
        idx = jnp.clip(picks, 0, self.num_jobs - 1)
        f = jnp.take_along_axis(levels, idx[:, None, None, None], axis=1)[:, 0]
        return jnp.take_along_axis(heads.jobs, idx[:, None, None], axis=1)[:, 0] + self.level_lin(f)[..., 0]


# ---------------------------------------------------------------------------------------------- joint action


class JointAction(NamedTuple):
    picks: jax.Array  # [A] int32 (K = no-op)
    levels: jax.Array  # [A] int32
    pick_masks: jax.Array  # [A, K+1] the masks each agent actually sampled under
    logp: jax.Array  # [A] log pi_i(pick, level | s, a_<i)
    entropy: jax.Array  # [A]
    value: jax.Array  # []


def _conditional_masks(base: jax.Array, picks: jax.Array | None, key: jax.Array, logits: jax.Array,
                       sequential, greedy: bool, kk: int) -> tuple[jax.Array, jax.Array]:
    """Sample (or replay ``picks``) agent by agent; with ``sequential`` a shared candidate (index < ``kk``) taken
    by an earlier agent is masked for later agents (no-op becomes valid when no placement is left)."""
    a, n1 = base.shape
    noop = n1 - 1

    def body(taken, x):
        i, bm, lg, kx = x
        m = bm & ~(jnp.concatenate([taken, jnp.zeros(n1 - kk, bool)]) & sequential)
        m = m.at[noop].set(m[noop] | ~m[:kk].any())
        if picks is not None:
            p = picks[i]
        elif greedy:
            p = ppo.categorical_mode(lg, m)
        else:
            p = ppo.categorical_sample(kx, lg, m)
        taken = taken | ((jnp.arange(kk) == p) & (p < kk))
        return taken, (p.astype(jnp.int32), m)

    _, (ps, ms) = jax.lax.scan(body, jnp.zeros(kk, bool), (jnp.arange(a), base, logits, jax.random.split(key, a)))
    return ps, ms


def act(model, obs: dict, key: jax.Array | None, var: Variant, *, greedy: bool = False,
        replay: tuple[jax.Array, jax.Array, jax.Array] | None = None, k: int | None = None) -> JointAction:
    """Joint action of all agents for one environment (stacked obs). ``replay=(picks, levels, pick_masks)``
    recomputes log-probabilities and entropies of stored actions (PPO update). ``k`` = number of shared
    (pending) candidates; pick indices ``k .. k+R-1`` release an agent's running jobs (default: no releases)."""
    kk = obs["mask"].shape[-1] - 1 if k is None else k
    heads = model(obs, var, kk)
    key = jax.random.key(0) if key is None else key
    fair_only = jnp.arange(obs["level_mask"].shape[-1]) == 1
    lmask = obs["level_mask"] & ((var.fungible > 0) | fair_only)
    if replay is None:
        kp, kl = jax.random.split(key)
        picks, masks = _conditional_masks(obs["mask"], None, kp, heads.pick, var.coordination > 0, greedy, kk)
        lv_logits = model.level_logits(heads, picks, obs["levels"])
        if greedy:
            levels = ppo.categorical_mode(lv_logits, lmask)
        else:
            levels = ppo.categorical_sample(kl, lv_logits, lmask)
    else:
        picks, levels, masks = replay
        lv_logits = model.level_logits(heads, picks, obs["levels"])
    placed = picks < kk
    lp = ppo.categorical_log_prob(heads.pick, picks, masks) + jnp.where(
        placed, ppo.categorical_log_prob(lv_logits, levels, lmask), 0.0)
    ent = ppo.categorical_entropy(heads.pick, masks) + jnp.where(
        placed, ppo.categorical_entropy(lv_logits, lmask), 0.0)
    return JointAction(picks.astype(jnp.int32), levels.astype(jnp.int32), masks, lp, ent, heads.value)


__all__ = ["FlatNet", "Heads", "JointAction", "MaifsNet", "Variant", "act", "variant"]
