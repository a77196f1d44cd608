"""MAPPO training of MAIFS (and the single-agent DL2-style baseline) and greedy evaluation.

``make_train(env_cfg, cfg, num_servers)`` returns ``(init, chunk, train, graphdef)`` of pure functions whose
arrays (cluster, speed tables, job windows: :class:`Problem`) and ablation switches (:class:`Variant`) are
arguments, so one compilation trains every variant and seed (vmapped) on every trace of the same shape:

* ``init(key, var, prob) -> RunnerState`` (parameters, optimiser, key);
* ``chunk(state, var, prob) -> (state, metrics)`` runs ``updates_per_chunk`` PPO updates in one ``lax.scan``;
  metrics are per update (the learning curve);
* ``train(key, var, prob)`` = ``init`` + all updates in one scan: jit it and ``vmap`` it over seeds/variants.

One update, the recipe of scheduling RL with stochastic inputs (Decima; Mao et al., ICLR 2019):

* **Full episodes, paired.** ``num_envs / paired`` training windows are drawn and each is rolled out ``paired``
  times from its start (same arrivals, different sampled actions) for up to ``rollout_len`` decision steps;
  an episode cut by that cap is bootstrapped with the critic's value.
* **Input-dependent baseline.** A rollout's advantage at simulated time ``tau`` is its return-to-go (semi-MDP
  discounts ``gamma ** elapsed_rounds``) minus the mean return-to-go of the other rollouts of its window from
  ``tau`` (:func:`mlsys_repro.common.rl.input_baseline.time_aligned_baseline`): the arrivals' variance cancels.
* **Centralised critic with privileged inputs** (jobs and GPU-hours still to arrive, pending work, elapsed time,
  the window's load; MAPPO's ValueNorm): trained on the same returns, used for the bootstrap and as a diagnostic
  (explained variance).
* **Per-agent credit** (``credit="counterfactual"``, COMA-style, Foerster et al., AAAI 2018): a counterfactual
  critic ``Q_i(s, a_<i, a)`` (agent ``i``'s value of each of its pick options, given the state, the privileged
  inputs and the picks of the agents before it in the joint policy's sampling order) regresses the team advantage
  of the pick taken; agent ``i``'s advantage is ``(1 - cf_lambda) A + cf_lambda Q_i(a_i) - sum_a pi_i(a) Q_i(a)``
  (:func:`counterfactual_advantage`). Its baseline does not depend on ``a_i``, so ``cf_lambda = 0`` keeps the
  gradient unbiased; ``cf_lambda = 1`` is COMA's advantage. ``credit="team"`` broadcasts ``A`` to every agent.
* The team advantage ``A`` is normalised over the batch and clipped at ``+-adv_clip`` (rewards are scaled by the
  environment's ``reward_scale``; returns by ValueNorm).
* ``epochs`` x ``minibatches`` clipped-surrogate updates; the entropy bonus anneals linearly to 0.
* **Warm start by behaviour cloning** (``bc_rounds > 0``, runs whose :class:`~mlsys_repro.papers.maifs.model.Variant`
  has ``warm = 1``): before PPO, ``bc_rounds`` batches of ``num_envs`` episodes on random training windows, each
  followed by ``bc_epochs`` x ``minibatches`` cross-entropy steps (``bc_lr``) to the teacher's decisions (Synergy-tune
  SRTF in MAIFS's action space, :func:`~mlsys_repro.papers.maifs.model.srtf_teacher`: pick and allocation level of
  every agent, under the masks that agent faced). The first batch is teacher episodes; with ``bc_dagger > 0`` that
  share of every later batch is driven by the clone so far (greedy) and relabelled by the teacher where each agent
  stood (DAgger: the clone learns to recover from the states its own mistakes lead to). The clone is the policy's
  initial parameters (the ``maifs_prior`` row); PPO starts from it. ``warm = 0`` runs start from the random
  initialisation (the cold start).

Chunks exist so a long training can be checkpointed and resumed (``mlsys_repro.common.repro.checkpoint.run_chunked``).
Centralised training, decentralised execution: every agent acts from its own observation with shared parameters
(plus the attention and coordination messages); the critics read privileged inputs. Agents whose only valid action
was no-op carry no policy gradient.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import nnx

from mlsys_repro.common.rl import ppo
from mlsys_repro.common.rl.input_baseline import returns_to_go, time_aligned_baseline
from mlsys_repro.common.rl.marl import stack_agents
from mlsys_repro.common.sim.cluster import Cluster, JobTable, SpeedModel, is_done
from mlsys_repro.papers.maifs.baselines import ModelDemand
from mlsys_repro.papers.maifs.env import JOB_FEATURES, LEVELS, PRIV_FEATURES, EnvConfig, EnvState, MaifsEnv
from mlsys_repro.papers.maifs.model import FlatNet, MaifsNet, Variant, act, srtf_teacher, teacher_relabel

CREDITS = ("team", "counterfactual")
# behaviour cloning per round (RunnerState.bc's columns): cross-entropy to the teacher, greedy agreement with its pick
# and its level on the batch trained on (last epoch), policy entropy, and the clone's pick agreement on its own
# (DAgger) episodes of the batch before training on them
BC_STATS = ("loss", "agreement", "entropy", "level_agreement", "own_agreement")


@dataclass(frozen=True)
class TrainConfig:
    """MAPPO's static settings, built by :func:`mlsys_repro.papers.maifs.pipeline.train_config` from the experiment's
    budget (:class:`mlsys_repro.papers.maifs.schemas.MaifsParams`) and the policy's hyper-parameters
    (:class:`mlsys_repro.papers.maifs.schemas.RLPolicy`), which hold their one set of defaults; only the settings that
    no config exposes have defaults here."""

    num_envs: int
    rollout_len: int
    num_updates: int
    updates_per_chunk: int
    epochs: int
    minibatches: int
    lr: float
    gamma: float  # per 300 s round
    gae_lambda: float
    clip_eps: float
    ent_coef: float
    hidden: int
    network: str  # maifs | flat (single agent, DL2-style)
    paired: int  # rollouts per training window in one update (the input-dependent baseline's group)
    prior_beta: float  # strength of the SRTF pick prior (model.srtf_prior; 0 = none)
    credit: str  # team | counterfactual (per-agent advantages from the counterfactual critic)
    cf_lambda: float  # weight of the critic's Q_i(a_i) against the Monte-Carlo team advantage (0 = unbiased)
    adv_clip: float  # the normalised team advantage is clipped at +-adv_clip
    bc_rounds: int  # behaviour-cloning rounds (teacher batches) before PPO for warm runs; 0 = none
    bc_epochs: int  # cross-entropy epochs per teacher batch (each of ``minibatches`` steps)
    bc_lr: float
    bc_dagger: float  # share of every cloning batch after the first driven by the clone and relabelled (DAgger)
    vf_coef: float = 0.5
    max_grad_norm: float = 0.5
    value_norm_beta: float = 0.95  # EMA of the return statistics per update (MAPPO's ValueNorm, debiased)

    def __post_init__(self) -> None:
        if self.network not in ("maifs", "flat"):
            raise ValueError(f"network must be 'maifs' or 'flat', got {self.network!r}")
        if self.num_updates % self.updates_per_chunk:
            raise ValueError("num_updates must be a multiple of updates_per_chunk")
        if (self.num_envs * self.rollout_len) % self.minibatches:
            raise ValueError("num_envs * rollout_len must be divisible by minibatches")
        if self.paired < 2 or self.num_envs % self.paired:
            raise ValueError("paired must be >= 2 and divide num_envs (rollouts per window)")
        if self.prior_beta < 0:
            raise ValueError("prior_beta must be >= 0")
        if self.credit not in CREDITS:
            raise ValueError(f"credit must be one of {CREDITS}, got {self.credit!r}")
        if not 0.0 <= self.cf_lambda <= 1.0 or self.adv_clip <= 0:
            raise ValueError("need 0 <= cf_lambda <= 1 and adv_clip > 0")
        if self.bc_rounds < 0 or self.bc_epochs < 1 or self.bc_lr <= 0 or not 0.0 <= self.bc_dagger <= 1.0:
            raise ValueError("need bc_rounds >= 0, bc_epochs >= 1, bc_lr > 0 and 0 <= bc_dagger <= 1")
        for k in ("num_envs", "rollout_len", "num_updates", "updates_per_chunk", "epochs", "minibatches", "hidden"):
            if getattr(self, k) < 1:
                raise ValueError(f"{k} must be >= 1")


def build_model(env_cfg: EnvConfig, cfg: TrainConfig, num_servers: int, rngs: nnx.Rngs):
    per = num_servers // env_cfg.num_agents
    self_dim, glob_dim = per * 3 + 3, 6
    if cfg.network == "flat":
        if env_cfg.num_agents != 1:
            raise ValueError("the flat (single-agent) network needs an environment with num_agents=1")
        return FlatNet(self_dim, glob_dim, JOB_FEATURES, env_cfg.num_candidates + env_cfg.num_running, len(LEVELS),
                       hidden=2 * cfg.hidden, priv_dim=PRIV_FEATURES, prior_beta=cfg.prior_beta, rngs=rngs)
    return MaifsNet(self_dim, glob_dim, JOB_FEATURES, len(LEVELS), hidden=cfg.hidden, priv_dim=PRIV_FEATURES,
                    prior_beta=cfg.prior_beta, rngs=rngs)


class Problem(NamedTuple):
    """Traced inputs of training and evaluation: the cluster, speed tables, demands and job windows."""

    cl: Cluster
    sm: SpeedModel
    md: ModelDemand
    windows: JobTable  # [W, N]


class ValueNorm(NamedTuple):
    """Running (debiased EMA) mean and mean square of the returns; the critic predicts normalised values
    (MAPPO's ValueNorm, Yu et al. 2022), so the value loss is on a unit scale whatever the return scale."""

    mean: jax.Array
    mean_sq: jax.Array
    debias: jax.Array

    @staticmethod
    def init() -> ValueNorm:
        z = jnp.zeros((), jnp.float32)
        return ValueNorm(z, z, z)

    def stats(self) -> tuple[jax.Array, jax.Array]:
        d = jnp.maximum(self.debias, 1e-5)
        mean = self.mean / d
        var = jnp.maximum(self.mean_sq / d - mean ** 2, 1e-4)
        return mean, jnp.sqrt(var)

    def update(self, x: jax.Array, beta: float, mask: jax.Array | None = None) -> ValueNorm:
        m = jnp.ones_like(x) if mask is None else mask.astype(x.dtype)
        n = jnp.maximum(m.sum(), 1.0)
        return ValueNorm(beta * self.mean + (1 - beta) * (x * m).sum() / n,
                         beta * self.mean_sq + (1 - beta) * (x ** 2 * m).sum() / n, beta * self.debias + (1 - beta))

    def denormalize(self, v: jax.Array) -> jax.Array:
        mean, std = self.stats()
        return jnp.where(self.debias > 0, v * std + mean, v)

    def normalize(self, x: jax.Array) -> jax.Array:
        mean, std = self.stats()
        return (x - mean) / std


class RunnerState(NamedTuple):
    params: Any
    opt_state: Any
    key: jax.Array
    update: jax.Array
    vnorm: ValueNorm
    bc: jax.Array  # [max(bc_rounds, 1), len(BC_STATS)] behaviour cloning per round (NaN: none)


def counterfactual_advantage(team: jax.Array, q: jax.Array, probs: jax.Array, picks: jax.Array,
                             lam: float) -> jax.Array:
    """Per-agent advantages ``[..., A]``: ``(1 - lam) * team + lam * q[a_i] - sum_a probs[a] q[a]``.

    Args:
      team: ``[...]`` the team (Monte-Carlo, input-baselined) advantage of the joint action.
      q: ``[..., A, N]`` each agent's counterfactual action values (given the state and the earlier agents' picks).
      probs: ``[..., A, N]`` each agent's policy over its N options (the masks it sampled under).
      picks: ``[..., A]`` the options taken.
      lam: 0 keeps only the counterfactual baseline (``sum_a probs q``, which does not depend on the agent's own
        action: unbiased); 1 is COMA's advantage ``q[a_i] - sum_a probs q``.
    """
    q_taken = jnp.take_along_axis(q, picks[..., None].astype(jnp.int32), axis=-1)[..., 0]
    return (1.0 - lam) * team[..., None] + lam * q_taken - (probs * q).sum(-1)


class Transition(NamedTuple):
    obs: Any
    picks: jax.Array
    levels: jax.Array
    masks: jax.Array
    logp: jax.Array
    value: jax.Array
    reward: jax.Array
    done: jax.Array
    alive: jax.Array  # the episode had not ended before this step (later steps are padding)
    time: jax.Array  # simulated time of the decision (s)
    elapsed: jax.Array
    jct_h: jax.Array
    makespan_h: jax.Array
    conflicts: jax.Array
    decisions: jax.Array
    releases: jax.Array


def _masked_var(x: jax.Array, mask: jax.Array) -> jax.Array:
    m = mask.astype(x.dtype)
    n = jnp.maximum(m.sum(), 1.0)
    mean = (x * m).sum() / n
    return (((x - mean) ** 2) * m).sum() / n


def cloning_batch(env: MaifsEnv, model, var: Variant, key: jax.Array, num_envs: int, steps: int, clone_share
                  ) -> tuple[dict, jax.Array]:
    """Behaviour-cloning data: ``num_envs`` episodes on random windows of ``env`` for ``steps`` decision steps, the
    first ``round(clone_share * num_envs)`` driven by ``model`` (greedy, as the clone is evaluated), the others by
    the teacher (:func:`~mlsys_repro.papers.maifs.model.srtf_teacher`; every episode when ``model`` is None: then
    no network is traced). Every agent decision is labelled with the
    teacher's decision where that agent stood (:func:`~mlsys_repro.papers.maifs.model.teacher_relabel` under the
    masks it faced): on teacher episodes the teacher's own joint action, on the model's the DAgger relabelling of the
    states the model visits.

    Returns ``({"obs", "picks", "levels", "masks", "alive"}`` with leading axes ``[steps, num_envs]``: the labels
    are ``picks`` and ``levels``, ``masks`` what each agent sampled under, ``alive`` the episode had not ended)
    and ``[agreed, decisions]``: the model's greedy picks against the labels on its own episodes, over the agent
    decisions with more than one option."""
    agents = env.agents
    kk = env.cfg.num_candidates
    k_win, k_env = jax.random.split(key)
    wins = jax.random.randint(k_win, (num_envs,), 0, env.num_windows)
    obs, env_state = jax.vmap(env.reset_window)(wins)
    obs_st = jax.vmap(lambda o: stack_agents(o, agents))(obs)
    by_model = (jnp.arange(num_envs) < jnp.round(clone_share * num_envs))[:, None]

    def step(carry, k):
        env_state, obs_st, alive, hits = carry
        tp, tl, tm = jax.vmap(lambda o: srtf_teacher(o, var, kk))(obs_st)
        if model is None:
            picks, levels, masks, lp, ll = tp, tl, tm, tp, tl
        else:
            ja = jax.vmap(lambda o: act(model, o, None, var, greedy=True, k=kk))(obs_st)
            picks, levels = jnp.where(by_model, ja.picks, tp), jnp.where(by_model, ja.levels, tl)
            masks = jnp.where(by_model[..., None], ja.pick_masks, tm)
            lp, ll = jax.vmap(lambda o, m: teacher_relabel(o, var, m, kk))(obs_st, masks)
            own = by_model & alive[:, None] & (masks.sum(-1) > 1)
            hits = hits + jnp.stack([((ja.picks == lp) & own).sum(), own.sum()]).astype(jnp.float32)
        actions = {a: jnp.stack([picks[:, i], levels[:, i]], -1) for i, a in enumerate(agents)}
        obs, env_state, _, done, _ = jax.vmap(env.step_env)(jax.random.split(k, num_envs), env_state, actions)
        obs2 = jax.vmap(lambda o: stack_agents(o, agents))(obs)
        return (env_state, obs2, alive & ~done["__all__"], hits), (obs_st, lp, ll, masks, alive)

    (_, _, _, hits), (o, p, lv, m, al) = jax.lax.scan(
        step, (env_state, obs_st, jnp.ones(num_envs, bool), jnp.zeros(2)), jax.random.split(k_env, steps))
    return {"obs": o, "picks": p, "levels": lv, "masks": m, "alive": al}, hits


def make_train(env_cfg: EnvConfig, cfg: TrainConfig, num_servers: int):
    """``(init, chunk, train, graphdef)``: ``init(key, var, prob)``, ``chunk(rs, var, prob)``, ``train(key, var,
    prob)``; pure functions to jit and vmap (over seeds and :class:`~mlsys_repro.papers.maifs.model.Variant`)."""
    graphdef, _ = nnx.split(build_model(env_cfg, cfg, num_servers, nnx.Rngs(0)))
    tx = optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(cfg.lr))
    e = cfg.num_envs
    kk = env_cfg.num_candidates

    def env_of(prob: Problem) -> MaifsEnv:
        return MaifsEnv(prob.cl, prob.sm, prob.md, prob.windows, env_cfg)

    def policy(params, var, obs_st, key):
        model = nnx.merge(graphdef, params)
        return jax.vmap(lambda o, k: act(model, o, k, var, k=kk))(obs_st, jax.random.split(key, e))

    cf = cfg.credit == "counterfactual"
    bc_tx = optax.chain(optax.clip_by_global_norm(cfg.max_grad_norm), optax.adam(cfg.bc_lr))

    dagger = cfg.bc_dagger > 0 and cfg.bc_rounds > 1  # else every batch is the teacher's: no clone rollouts traced

    def bc_batch(params, key, var: Variant, prob: Problem, clone_share):
        """:func:`cloning_batch` of the clone ``params``, flattened to ``[rollout_len * num_envs]``."""
        model = nnx.merge(graphdef, params) if dagger else None
        batch, hits = cloning_batch(env_of(prob), model, var, key, e, cfg.rollout_len, clone_share)
        return ppo.flatten_batch(batch), hits

    def bc_loss(params, var, mb):
        """Cross-entropy of the policy to the teacher's labels (pick and, where it places, level) under the masks
        each agent faced, per agent decision with a real choice; aux: greedy agreement with the teacher's pick (where
        the pick had options) and level (where it placed), entropy."""
        model = nnx.merge(graphdef, params)
        ja = jax.vmap(lambda o, p, lv, m: act(model, o, None, var, replay=(p, lv, m), k=kk))(
            mb["obs"], mb["picks"], mb["levels"], mb["masks"])
        alive = mb["alive"][:, None]
        choice = (mb["masks"].sum(-1) > 1) & alive  # [B, A] the pick had options
        placed = (mb["picks"] < kk) & alive  # [B, A] a level was chosen
        live = (choice | placed).astype(jnp.float32)
        n = jnp.maximum(live.sum(), 1.0)
        nc, npl = jnp.maximum(choice.sum(), 1), jnp.maximum(placed.sum(), 1)
        pick_ok = (jnp.argmax(ja.probs, -1) == mb["picks"]) & choice
        lv_ok = (ja.level_mode == mb["levels"]) & placed
        return -(ja.logp * live).sum() / n, (pick_ok.sum() / nc, (ja.entropy * live).sum() / n, lv_ok.sum() / npl)

    def behaviour_clone(params, key, var: Variant, prob: Problem):
        """``bc_rounds`` x (a batch of episodes, ``bc_epochs`` x ``minibatches`` cross-entropy steps). The first
        batch is the teacher's episodes; with ``bc_dagger > 0`` that share of every later batch is driven by the
        clone so far and relabelled by the teacher (DAgger, Ross et al., AISTATS 2011: the clone learns the
        teacher's decisions on the states its own mistakes lead to, not only on the teacher's). Returns the clone's
        parameters and per round ``BC_STATS``: the last epoch's mean loss, pick agreement, entropy and level
        agreement, and the clone's pick agreement on its own episodes of that batch before training on them
        (NaN without any)."""

        def round_(carry, r):
            p, o, key = carry
            key, k_data, k_mb = jax.random.split(key, 3)
            batch, hits = bc_batch(p, k_data, var, prob, jnp.where(r > 0, cfg.bc_dagger, 0.0))
            own = jnp.where(hits[1] > 0, hits[0] / jnp.maximum(hits[1], 1.0), jnp.nan)

            def epoch(c, _):
                p, o, key = c
                key, sub = jax.random.split(key)

                def mb_step(c2, mb):
                    p, o = c2
                    (loss, aux), grads = jax.value_and_grad(bc_loss, has_aux=True)(p, var, mb)
                    upd, o = bc_tx.update(grads, o, p)
                    return (optax.apply_updates(p, upd), o), jnp.stack([loss, *aux])

                (p, o), st = jax.lax.scan(mb_step, (p, o), ppo.minibatches(sub, batch, cfg.minibatches))
                return (p, o, key), st.mean(0)

            (p, o, _), st = jax.lax.scan(epoch, (p, o, k_mb), None, length=cfg.bc_epochs)
            return (p, o, key), jnp.concatenate([st[-1], own[None]])

        (p, _, _), m = jax.lax.scan(round_, (params, bc_tx.init(params), key), jnp.arange(cfg.bc_rounds))
        return p, m

    def init(key, var: Variant, prob: Problem) -> RunnerState:
        k_init, k_bc, k_run = jax.random.split(key, 3)
        params = nnx.state(build_model(env_cfg, cfg, num_servers, nnx.Rngs(k_init)), nnx.Param)
        bc = jnp.full((1, len(BC_STATS)), jnp.nan)
        if cfg.bc_rounds:
            clone, bc = behaviour_clone(params, k_bc, var, prob)
            params = jax.tree.map(lambda a, b: jnp.where(var.warm > 0, a, b), clone, params)
            bc = jnp.where(var.warm > 0, bc, jnp.nan)
        return RunnerState(params, tx.init(params), k_run, jnp.zeros((), jnp.int32), ValueNorm.init(), bc)

    def loss_fn(params, var, mb, ent_coef):
        model = nnx.merge(graphdef, params)
        ja = jax.vmap(lambda o, p, lv, m: act(model, o, None, var, replay=(p, lv, m), k=kk, with_q=cf))(
            mb["obs"], mb["picks"], mb["levels"], mb["masks"])
        decide = mb["obs"]["mask"][..., :-1].any(-1) & mb["alive"][:, None]  # [B, A] agents with a real choice
        team = mb["adv"]  # [B] normalised, clipped
        nd = jnp.maximum(decide.sum(), 1)
        if cf:
            adv = counterfactual_advantage(team, jax.lax.stop_gradient(ja.q), jax.lax.stop_gradient(ja.probs),
                                           mb["picks"], cfg.cf_lambda)
            q_taken = jnp.take_along_axis(ja.q, mb["picks"][..., None], axis=-1)[..., 0]
            ql = 0.5 * (((q_taken - team[:, None]) ** 2) * decide).sum() / nd
        else:
            adv = jnp.broadcast_to(team[:, None], decide.shape)
            ql = jnp.zeros(())
        spread = (jnp.abs(adv - team[:, None]) * decide).sum() / nd  # how far per-agent credit moves the signal
        pl, kl, cfrac = ppo.clipped_surrogate(ja.logp, mb["logp"], adv, cfg.clip_eps, decide)
        vl = ppo.value_loss(ja.value, mb["value"], mb["returns"], mask=mb["alive"])  # normalised targets
        ent = (ja.entropy * decide).sum() / nd
        return pl + cfg.vf_coef * (vl + ql) - ent_coef * ent, (pl, vl, ent, kl, cfrac, ql, spread)

    def update(rs: RunnerState, var: Variant, prob: Problem):
        env = env_of(prob)
        agents = env.agents
        key, k_win, k_roll = jax.random.split(rs.key, 3)
        wins = jnp.repeat(jax.random.randint(k_win, (e // cfg.paired,), 0, env.num_windows), cfg.paired)
        obs, env_state = jax.vmap(env.reset_window)(wins)
        obs_st = jax.vmap(lambda o: stack_agents(o, agents))(obs)

        def env_step(carry, _):
            params, env_state, obs_st, alive, key = carry
            key, k_act, k_env = jax.random.split(key, 3)
            ja = policy(params, var, obs_st, k_act)
            actions = {a: jnp.stack([ja.picks[:, i], ja.levels[:, i]], -1) for i, a in enumerate(agents)}
            t0 = env_state.sim.t
            obs, env_state, rew, done, info = jax.vmap(env.step_env)(jax.random.split(k_env, e), env_state, actions)
            obs2 = jax.vmap(lambda o: stack_agents(o, agents))(obs)
            fin = done["__all__"] & alive
            tr = Transition(obs_st, ja.picks, ja.levels, ja.pick_masks, ja.logp, ja.value,
                            jnp.where(alive, rew[agents[0]], 0.0), fin, alive, t0, info["elapsed_rounds"],
                            info["jct_h"], info["makespan_h"], info["conflicts"], info["decisions"],
                            info["releases"])
            return (params, env_state, obs2, alive & ~done["__all__"], key), tr

        (params, env_state, obs_st, alive, key), traj = jax.lax.scan(
            env_step, (rs.params, env_state, obs_st, jnp.ones(e, bool), k_roll), None, length=cfg.rollout_len)
        key, k_last = jax.random.split(key)
        vn = rs.vnorm
        last = jnp.where(alive, vn.denormalize(policy(params, var, obs_st, k_last).value), 0.0)  # cut episodes
        values = vn.denormalize(traj.value)
        disc = jnp.where(traj.alive, cfg.gamma ** traj.elapsed, 1.0)
        ret = returns_to_go(traj.reward, disc, last)
        base = time_aligned_baseline(ret, traj.time, last, cfg.paired)
        live = traj.alive
        ev = 1.0 - _masked_var(ret - values, live) / jnp.maximum(_masked_var(ret, live), 1e-12)
        vn = vn.update(ret, cfg.value_norm_beta, live)
        decide = traj.obs["mask"][..., :-1].any(-1).any(-1) & live
        adv_raw = ppo.normalize(ret - base, decide)
        adv = jnp.clip(adv_raw, -cfg.adv_clip, cfg.adv_clip)
        batch = ppo.flatten_batch({"obs": traj.obs, "picks": traj.picks, "levels": traj.levels,
                                   "masks": traj.masks, "logp": traj.logp, "value": traj.value, "adv": adv,
                                   "returns": vn.normalize(ret), "alive": live})
        ent_coef = cfg.ent_coef * (1.0 - rs.update / cfg.num_updates)  # annealed linearly to 0

        def epoch(carry, _):
            params, opt_state, key = carry
            key, sub = jax.random.split(key)

            def mb_step(c, mb):
                p, o = c
                (loss, aux), grads = jax.value_and_grad(loss_fn, has_aux=True)(p, var, mb, ent_coef)
                upd, o = tx.update(grads, o, p)
                return (optax.apply_updates(p, upd), o), (loss, *aux)

            (params, opt_state), stats = jax.lax.scan(mb_step, (params, opt_state),
                                                      ppo.minibatches(sub, batch, cfg.minibatches))
            return (params, opt_state, key), stats

        (params, opt_state, key), stats = jax.lax.scan(epoch, (params, rs.opt_state, key), None,
                                                       length=cfg.epochs)
        n_done = traj.done.sum()
        fin = traj.done.astype(jnp.float32)
        tried = ((traj.conflicts + traj.decisions) * fin).sum()
        metrics = {
            "reward": traj.reward.sum() / e,
            "episodes": n_done,
            "cut_episodes": alive.mean(),  # episodes longer than rollout_len (bootstrapped)
            "jct_h": jnp.where(n_done > 0, (traj.jct_h * fin).sum() / jnp.maximum(n_done, 1), jnp.nan),
            "makespan_h": jnp.where(n_done > 0, (traj.makespan_h * fin).sum() / jnp.maximum(n_done, 1), jnp.nan),
            "conflict_rate": jnp.where(tried > 0, (traj.conflicts * fin).sum() / jnp.maximum(tried, 1), jnp.nan),
            "loss": stats[0].mean(), "policy_loss": stats[1].mean(), "value_loss": stats[2].mean(),
            "entropy": stats[3].mean(), "approx_kl": stats[4].mean(), "explained_variance": ev,
            "release_rate": jnp.where(tried > 0, (traj.releases * fin).sum() / jnp.maximum(tried, 1), jnp.nan),
            "q_loss": stats[6].mean(), "credit_spread": stats[7].mean(),
            "adv_clip_frac": ((jnp.abs(adv_raw) > cfg.adv_clip) & decide).sum() / jnp.maximum(decide.sum(), 1),
        }
        return RunnerState(params, opt_state, key, rs.update + 1, vn, rs.bc), metrics

    def chunk(rs: RunnerState, var: Variant, prob: Problem):
        return jax.lax.scan(lambda r, _: update(r, var, prob), rs, None, length=cfg.updates_per_chunk)

    def train(key, var: Variant, prob: Problem):
        rs = init(key, var, prob)
        return jax.lax.scan(lambda r, _: update(r, var, prob), rs, None, length=cfg.num_updates)

    return init, chunk, train, graphdef


# ---------------------------------------------------------------------------------------------- evaluation


def evaluate(env_cfg: EnvConfig, graphdef, params, var: Variant, prob: Problem, window,
             max_steps: int = 500_000, greedy=True, key: jax.Array | None = None) -> EnvState:
    """Rollout of window ``window`` of ``prob.windows`` to completion, greedy or (``greedy`` False, a Python or
    traced bool) sampling the stochastic policy with ``key``; returns the final state."""
    env = MaifsEnv(prob.cl, prob.sm, prob.md, prob.windows, env_cfg)
    _, st = env.reset_window(window)
    model = nnx.merge(graphdef, params)
    key = jax.random.key(0) if key is None else key

    def cond(carry):
        st, i, _ = carry
        return ~env_done(env, st) & (i < max_steps)

    def body(carry):
        st, i, key = carry
        key, k = jax.random.split(key)
        obs = stack_agents(env.get_obs(st), env.agents)
        ja = act(model, obs, k, var, greedy=greedy, k=env_cfg.num_candidates)
        actions = {a: jnp.stack([ja.picks[j], ja.levels[j]]) for j, a in enumerate(env.agents)}
        _, st, _, _, _ = env.step_env(jax.random.key(0), st, actions)
        return st, i + 1, key

    st, _, _ = jax.lax.while_loop(cond, body, (st, jnp.zeros((), jnp.int32), key))
    return st


def env_done(env: MaifsEnv, st: EnvState) -> jax.Array:
    return is_done(st.sim, st.jobs) | (st.sim.stats.rounds >= env.cfg.max_rounds)


__all__ = ["BC_STATS", "CREDITS", "Problem", "RunnerState", "TrainConfig", "Transition", "ValueNorm", "build_model",
           "cloning_batch", "counterfactual_advantage", "env_done", "evaluate", "make_train"]
