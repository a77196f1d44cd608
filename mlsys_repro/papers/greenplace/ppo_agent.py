"""Factorised multi-head PPO: the alternative multi-action DRL agent.

The policy has one categorical head per action dimension (cut, front node, back node) over a shared actor torso;
the joint log-probability is the sum of the heads' log-probabilities, with the non-root heads masked given the
root choice (so every sampled joint action is valid; the mask is part of the stored transition). Entropy is the
sum of the heads' entropies. GAE, the clipped surrogate, the value loss and minibatching come from
:mod:`mlsys_repro.common.rl.ppo`. ``make_train(...)`` returns ``train(key, w_energy, env_params) -> (state, curves)``
with the whole loop (rollouts of ``rollout_len`` steps in ``num_envs`` environments, then ``epochs`` x ``minibatches``
updates) in one ``lax.scan``. The experiments give on-policy agents their own budget
(``onpolicy_envs`` x ``onpolicy_iterations``): PureJaxRL-style, many environments and many steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct

from mlsys_repro.common.models.mlp import MLP
from mlsys_repro.common.rl import ppo
from mlsys_repro.common.rl.env import BranchMask, Environment, branch_argmax, effective_root
from mlsys_repro.papers.greenplace.schemas import PlacementPolicy


class FactorisedActorCritic(nnx.Module):
    """Actor torso -> one logits head per branch; a separate critic MLP -> V(s)."""

    def __init__(self, obs_dim: int, branch_sizes: Sequence[int], rngs: nnx.Rngs, torso: Sequence[int] = (256, 256)):
        self.actor = MLP((obs_dim, *torso), rngs, activate_last=True)
        self.heads = nnx.List([nnx.Linear(torso[-1], int(n), rngs=rngs,
                                          kernel_init=nnx.initializers.orthogonal(0.01)) for n in branch_sizes])
        self.critic = MLP((obs_dim, *torso, 1), rngs)

    def __call__(self, obs: jax.Array) -> tuple[tuple[jax.Array, ...], jax.Array]:
        h = self.actor(obs)
        return tuple(head(h) for head in self.heads), self.critic(obs)[..., 0]


def _head_masks(mask: BranchMask, a0: jax.Array) -> list[jax.Array]:
    return [effective_root(mask)] + [c[a0] for c in mask.cond]


def sample(key: jax.Array, logits: Sequence[jax.Array], mask: BranchMask) -> jax.Array:
    """One joint action (root first, then the others given it) for one state."""
    keys = jax.random.split(key, len(logits))
    a0 = ppo.categorical_sample(keys[0], logits[0], effective_root(mask))
    rest = [ppo.categorical_sample(k, lg, c[a0]) for k, lg, c in zip(keys[1:], logits[1:], mask.cond, strict=True)]
    return jnp.stack([a0, *rest]).astype(jnp.int32)


def log_prob_entropy(logits: Sequence[jax.Array], mask: BranchMask, action: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Joint log-probability (sum over heads) and summed head entropies, for one state."""
    masks = _head_masks(mask, action[0])
    lp = sum(ppo.categorical_log_prob(lg, action[d], m) for d, (lg, m) in enumerate(zip(logits, masks, strict=True)))
    ent = sum(ppo.categorical_entropy(lg, m) for lg, m in zip(logits, masks, strict=True))
    return lp, ent


@struct.dataclass
class PPOState:
    params: Any
    opt_state: Any
    env_state: Any
    obs: jax.Array
    key: jax.Array


@struct.dataclass
class Step:
    obs: jax.Array
    action: jax.Array
    logp: jax.Array
    value: jax.Array
    reward: jax.Array
    done: jax.Array
    mask: BranchMask


def make_act(graphdef, env: Environment):
    def act(params, key, obs, state, env_params):
        logits, _ = nnx.merge(graphdef, params)(obs)
        return branch_argmax(logits, env.action_mask(state, env_params))

    return act


def make_train(env: Environment, env_params, policy: PlacementPolicy, iterations: int, num_envs: int):
    num_updates = max(iterations // policy.rollout_len, 1)
    nvec = env.action_space(env_params).nvec
    obs_dim = env.observation_size(env_params)
    graphdef, _ = nnx.split(FactorisedActorCritic(obs_dim, nvec, nnx.Rngs(0), torso=tuple(policy.torso)))
    t_len = policy.rollout_len
    batch = t_len * num_envs
    if batch % policy.minibatches:
        raise ValueError(f"rollout_len x num_envs = {batch} is not divisible by minibatches={policy.minibatches}")
    sched = optax.linear_schedule(policy.lr, 0.0, num_updates * policy.epochs * policy.minibatches)
    tx = optax.chain(optax.clip_by_global_norm(policy.max_grad_norm), optax.adam(sched, eps=1e-5))
    v_mask = jax.vmap(env.action_mask, in_axes=(0, None))

    def forward(params, obs):
        return nnx.merge(graphdef, params)(obs)

    def loss_fn(params, mb: Step, adv, ret):
        logits, value = forward(params, mb.obs)
        lp, ent = jax.vmap(log_prob_entropy)(logits, mb.mask, mb.action)
        info = ppo.ppo_loss(lp, mb.logp, adv, value, mb.value, ret, ent, clip_eps=policy.clip_eps,
                            vf_coef=policy.vf_coef, ent_coef=policy.ent_coef)
        return info.total, info

    def update(env_params, ts: PPOState, _):
        def collect(carry, k):
            env_state, obs = carry
            ka, ks = jax.random.split(k)
            mask = v_mask(env_state, env_params)
            logits, value = forward(ts.params, obs)
            action = jax.vmap(sample)(jax.random.split(ka, num_envs), logits, mask)
            logp, _ = jax.vmap(log_prob_entropy)(logits, mask, action)
            obs2, env_state, reward, done, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(ks, num_envs), env_state, action, env_params)
            return (env_state, obs2), (Step(obs, action, logp, value, reward, done.astype(jnp.float32), mask),
                                       info["objective"])

        key, k_roll, k_mb = jax.random.split(ts.key, 3)
        (env_state, obs), (traj, objective) = jax.lax.scan(collect, (ts.env_state, ts.obs),
                                                           jax.random.split(k_roll, t_len))
        _, last_value = forward(ts.params, obs)
        adv, ret = ppo.gae(traj.reward, traj.value, traj.done, last_value, policy.gamma, policy.gae_lambda)
        flat = ppo.flatten_batch((traj, adv, ret))

        def epoch(carry, k):
            params, opt_state = carry
            mbs = ppo.minibatches(k, flat, policy.minibatches)

            def step(carry, mb):
                params, opt_state = carry
                tr, a, r = mb
                grads, info = jax.grad(loss_fn, has_aux=True)(params, tr, ppo.normalize(a), r)
                upd, opt_state = tx.update(grads, opt_state, params)
                return (optax.apply_updates(params, upd), opt_state), info.total

            (params, opt_state), losses = jax.lax.scan(step, (params, opt_state), mbs)
            return (params, opt_state), losses.mean()

        (params, opt_state), losses = jax.lax.scan(epoch, (ts.params, ts.opt_state),
                                                   jax.random.split(k_mb, policy.epochs))
        ts = PPOState(params, opt_state, env_state, obs, key)
        return ts, {"reward": traj.reward.mean(), "loss": losses.mean(), "objective": objective.mean()}

    def start(key, w_energy, env_params=env_params) -> PPOState:
        p = env_params.replace(w_energy=jnp.asarray(w_energy, jnp.float32))
        k_net, k_env, key = jax.random.split(key, 3)
        _, params = nnx.split(FactorisedActorCritic(obs_dim, nvec, nnx.Rngs(k_net), torso=tuple(policy.torso)))
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_env, num_envs), p)
        return PPOState(params, tx.init(params), env_state, obs, key)

    def advance(ts: PPOState, w_energy, env_params=env_params, *, steps: int = num_updates):
        p = env_params.replace(w_energy=jnp.asarray(w_energy, jnp.float32))
        return jax.lax.scan(lambda s, x: update(p, s, x), ts, None, length=steps)

    def train(key, w_energy, env_params=env_params):
        return advance(start(key, w_energy, env_params), w_energy, env_params)

    # chunked form for checkpointing: train == advance(start(...), steps=total_steps), cut into equal chunks
    train.start, train.advance, train.total_steps = start, advance, num_updates  # type: ignore[attr-defined]
    train.graphdef = graphdef  # type: ignore[attr-defined]
    train.act = make_act(graphdef, env)  # type: ignore[attr-defined]
    train.env_steps = num_updates * t_len * num_envs  # type: ignore[attr-defined]
    return train


def policy_params(ts: PPOState):
    return ts.params
