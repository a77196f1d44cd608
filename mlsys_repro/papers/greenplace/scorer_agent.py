"""Action-scoring PPO with a behaviour-cloning warm start [ours]: an agent that sees what it chooses.

BDQ (the paper's multi-action architecture) sums per-branch values, so it cannot express how the best node
depends on the chosen cut, and its observation carries no prediction of what an action would cost. This agent
scores *joint* actions from per-action features instead:

* Action set: the ``top_k`` valid joint actions with the lowest predicted objective for the current job
  (:func:`mlsys_repro.papers.greenplace.features.candidates`, the same model myopic uses), each described by its
  predicted cost, JCT, objective, queue wait, cloud share and the lane time it takes on every node.
* Policy: ``logit(s, a) = MLP(W_s obs + W_a symlog(features(s, a)))`` over the candidates (one shared scorer, so
  any candidate count works); critic ``V(s) = MLP(obs, best predicted objective)``.
* Warm start: ``bc_steps`` steps of behaviour cloning (cross-entropy) onto myopic's choice, on the states myopic
  visits in ``num_envs`` training environments (DQfD-style demonstrations, here from the one-step-greedy policy).
* Then PPO (GAE, clipped surrogate, value loss and minibatches from :mod:`mlsys_repro.common.rl.ppo`) for
  ``iterations // rollout_len`` updates of ``rollout_len x num_envs`` steps: what it can add to myopic is the effect of
  a placement on later jobs (the lanes it occupies), which myopic ignores.

``make_train(...)`` has the interface of the other agents: ``train(key, w_energy, env_params) -> (state,
curves)`` with ``start`` (init + behaviour cloning), ``advance`` (PPO updates in one ``lax.scan``), ``act``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct

from mlsys_repro.common.models.mlp import MLP
from mlsys_repro.common.rl import ppo
from mlsys_repro.common.rl.env import Environment, unflatten_action
from mlsys_repro.papers.greenplace.env import symlog
from mlsys_repro.papers.greenplace.features import OBJECTIVE, candidates, num_features
from mlsys_repro.papers.greenplace.schemas import PlacementPolicy


class ActionScorer(nnx.Module):
    """Logits over candidate actions from (observation, per-candidate features); a separate critic."""

    def __init__(self, obs_dim: int, feat_dim: int, rngs: nnx.Rngs, hidden: int = 64):
        self.obs_in = nnx.Linear(obs_dim, hidden, rngs=rngs)
        self.feat_in = nnx.Linear(feat_dim, hidden, use_bias=False, rngs=rngs)
        self.mid = nnx.Linear(hidden, hidden, rngs=rngs)
        self.out = nnx.Linear(hidden, 1, rngs=rngs, kernel_init=nnx.initializers.orthogonal(0.01))
        self.critic = MLP((obs_dim + 1, hidden, hidden, 1), rngs)

    def __call__(self, obs: jax.Array, feats: jax.Array, valid: jax.Array) -> tuple[jax.Array, jax.Array]:
        """obs [..., G], feats [..., K, F], valid [..., K] -> (logits [..., K], value [...])."""
        h = jax.nn.relu(self.obs_in(obs)[..., None, :] + self.feat_in(symlog(feats)))
        logits = self.out(jax.nn.relu(self.mid(h)))[..., 0]
        best = jnp.where(valid, feats[..., OBJECTIVE], jnp.inf).min(-1, initial=jnp.inf)
        best = jnp.where(jnp.isfinite(best), best, 0.0)
        value = self.critic(jnp.concatenate([obs, symlog(best)[..., None]], -1))[..., 0]
        return logits, value


@struct.dataclass
class ScorerState:
    params: Any
    opt_state: Any
    env_state: Any
    obs: jax.Array
    key: jax.Array


@struct.dataclass
class Step:
    obs: jax.Array
    feats: jax.Array
    valid: jax.Array
    choice: jax.Array  # index into the candidates
    logp: jax.Array
    value: jax.Array
    reward: jax.Array
    done: jax.Array


def make_train(env: Environment, env_params, policy: PlacementPolicy, iterations: int, num_envs: int):
    num_updates = max(iterations // policy.rollout_len, 1)
    nvec = env.action_space(env_params).nvec
    obs_dim = env.observation_size(env_params)
    feat_dim = num_features(env_params)
    k = policy.top_k
    graphdef, _ = nnx.split(ActionScorer(obs_dim, feat_dim, nnx.Rngs(0), hidden=policy.head_hidden))
    t_len = policy.rollout_len
    if (t_len * num_envs) % policy.minibatches:
        raise ValueError(f"rollout_len x num_envs = {t_len * num_envs} is not divisible by "
                         f"minibatches={policy.minibatches}")
    bc_tx = optax.chain(optax.clip_by_global_norm(policy.max_grad_norm), optax.adam(policy.bc_lr))
    sched = optax.linear_schedule(policy.lr, 0.0, num_updates * policy.epochs * policy.minibatches)
    tx = optax.chain(optax.clip_by_global_norm(policy.max_grad_norm), optax.adam(sched, eps=1e-5))
    v_cand = jax.vmap(lambda s, p: candidates(s, p, k), in_axes=(0, None))
    v_step = jax.vmap(env.step, in_axes=(0, 0, 0, None))

    def forward(params, obs, feats, valid):
        return nnx.merge(graphdef, params)(obs, feats, valid)

    def to_action(idx, choice):
        return unflatten_action(jnp.take_along_axis(idx, choice[..., None], -1)[..., 0], nvec)

    def behaviour_cloning(p, params, env_state, obs, key):
        """``bc_steps`` steps of cross-entropy onto myopic's choice (candidate 0: the lowest predicted objective)
        on the states myopic visits."""
        opt = bc_tx.init(params)

        def step(carry, k_step):
            params, opt, env_state, obs = carry
            idx, feats, valid = v_cand(env_state, p)
            target = jnp.zeros(num_envs, jnp.int32)

            def loss(params):
                logits, _ = forward(params, obs, feats, valid)
                return -ppo.categorical_log_prob(logits, target, valid).mean()

            value, grads = jax.value_and_grad(loss)(params)
            upd, opt = bc_tx.update(grads, opt, params)
            params = optax.apply_updates(params, upd)
            obs, env_state, _, _, _ = v_step(jax.random.split(k_step, num_envs), env_state, to_action(idx, target), p)
            return (params, opt, env_state, obs), value

        (params, _, env_state, obs), losses = jax.lax.scan(step, (params, opt, env_state, obs),
                                                           jax.random.split(key, policy.bc_steps))
        return params, env_state, obs, losses

    def loss_fn(params, mb: Step, adv, ret):
        logits, value = forward(params, mb.obs, mb.feats, mb.valid)
        lp = ppo.categorical_log_prob(logits, mb.choice, mb.valid)
        ent = ppo.categorical_entropy(logits, mb.valid)
        info = ppo.ppo_loss(lp, mb.logp, adv, value, mb.value, ret, ent, clip_eps=policy.clip_eps,
                            vf_coef=policy.vf_coef, ent_coef=policy.ent_coef)
        return info.total, info

    def update(p, ts: ScorerState, _):
        def collect(carry, key):
            env_state, obs = carry
            ka, ks = jax.random.split(key)
            idx, feats, valid = v_cand(env_state, p)
            logits, value = forward(ts.params, obs, feats, valid)
            choice = ppo.categorical_sample(ka, logits, valid).astype(jnp.int32)
            logp = ppo.categorical_log_prob(logits, choice, valid)
            obs2, env_state, reward, done, info = v_step(jax.random.split(ks, num_envs), env_state,
                                                         to_action(idx, choice), p)
            step = Step(obs, feats, valid, choice, logp, value, reward, done.astype(jnp.float32))
            return (env_state, obs2), (step, info["objective"])

        key, k_roll, k_mb = jax.random.split(ts.key, 3)
        (env_state, obs), (traj, objective) = jax.lax.scan(collect, (ts.env_state, ts.obs),
                                                           jax.random.split(k_roll, t_len))
        _, feats, valid = v_cand(env_state, p)
        _, last_value = forward(ts.params, obs, feats, valid)
        adv, ret = ppo.gae(traj.reward, traj.value, traj.done, last_value, policy.gamma, policy.gae_lambda)
        flat = ppo.flatten_batch((traj, adv, ret))

        def epoch(carry, k_epoch):
            def step(carry, mb):
                params, opt_state = carry
                tr, a, r = mb
                grads, info = jax.grad(loss_fn, has_aux=True)(params, tr, ppo.normalize(a), r)
                upd, opt_state = tx.update(grads, opt_state, params)
                return (optax.apply_updates(params, upd), opt_state), info.total

            carry, losses = jax.lax.scan(step, carry, ppo.minibatches(k_epoch, flat, policy.minibatches))
            return carry, losses.mean()

        (params, opt_state), losses = jax.lax.scan(epoch, (ts.params, ts.opt_state),
                                                   jax.random.split(k_mb, policy.epochs))
        return ScorerState(params, opt_state, env_state, obs, key), {
            "reward": traj.reward.mean(), "loss": losses.mean(), "objective": objective.mean()}

    def start(key, w_energy, env_params=env_params) -> ScorerState:
        p = env_params.replace(w_energy=jnp.asarray(w_energy, jnp.float32))
        k_net, k_env, k_bc, key = jax.random.split(key, 4)
        _, params = nnx.split(ActionScorer(obs_dim, feat_dim, nnx.Rngs(k_net), hidden=policy.head_hidden))
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_env, num_envs), p)
        if policy.bc_steps:
            params, env_state, obs, _ = behaviour_cloning(p, params, env_state, obs, k_bc)
        return ScorerState(params, tx.init(params), env_state, obs, key)

    def advance(ts: ScorerState, w_energy, env_params=env_params, *, steps: int = num_updates):
        p = env_params.replace(w_energy=jnp.asarray(w_energy, jnp.float32))
        return jax.lax.scan(lambda s, x: update(p, s, x), ts, None, length=steps)

    def train(key, w_energy, env_params=env_params):
        return advance(start(key, w_energy, env_params), w_energy, env_params)

    def act(params, key, obs, state, env_params):
        idx, feats, valid = candidates(state, env_params, k)
        logits, _ = forward(params, obs, feats, valid)
        return to_action(idx, ppo.categorical_mode(logits, valid))

    train.start, train.advance, train.total_steps = start, advance, num_updates  # type: ignore[attr-defined]
    train.graphdef = graphdef  # type: ignore[attr-defined]
    train.act = act  # type: ignore[attr-defined]
    train.behaviour_cloning = behaviour_cloning  # type: ignore[attr-defined]
    train.env_steps = num_updates * t_len * num_envs  # type: ignore[attr-defined]
    return train


def policy_params(ts: ScorerState):
    return ts.params
