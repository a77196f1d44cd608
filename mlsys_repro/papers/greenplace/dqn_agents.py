"""Value-based agents: the branching dueling Q-network (BDQ, the multi-action method) and a flat dueling double DQN
over the joint action (the single-action ablation), trained entirely inside one ``jit``.

``make_train(env, env_params, policy, iterations, num_envs)`` returns ``train(key, w_energy, env_params) ->
(state, curves)`` (the ``env_params`` given to make_train fix shapes and are the default);
each iteration steps ``num_envs`` environments with epsilon-greedy actions (masked), stores the transitions in a
uniform replay buffer and takes ``updates_per_iter`` gradient steps with double-Q targets (BDQ: the mean over
branches of each branch's target value, Tavakoli et al. 2018). ``jax.vmap(train)`` runs seeds and reward weights
side by side. The whole train state (networks, optimiser, buffer, environments) is one pytree.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct

from mlsys_repro.common.rl.dqn import (
    BranchingQNetwork,
    DuelingQNetwork,
    branch_double_q_target,
    branch_epsilon_greedy,
    branch_td_loss,
    double_q_target,
    epsilon_greedy,
    linear_schedule,
    td_loss,
)
from mlsys_repro.common.rl.env import (
    BranchMask,
    Environment,
    branch_argmax,
    flatten_action,
    joint_mask,
    masked_argmax,
    unflatten_action,
)
from mlsys_repro.common.rl.replay import ReplayState, replay_add, replay_init, replay_sample
from mlsys_repro.papers.greenplace.schemas import PlacementPolicy

UPDATES_PER_ITER = 2


@struct.dataclass
class Transition:
    obs: jax.Array
    action: jax.Array  # int32 [D]
    reward: jax.Array
    discount: jax.Array  # gamma * (1 - done)
    next_obs: jax.Array
    next_mask: BranchMask


@struct.dataclass
class DQNState:
    params: Any  # nnx.State of the online network
    target: Any
    opt_state: Any
    buffer: ReplayState
    env_state: Any  # batched [num_envs]
    obs: jax.Array
    key: jax.Array
    updates: jax.Array
    iteration: jax.Array


def build_network(kind: str, obs_dim: int, nvec: tuple[int, ...], policy: PlacementPolicy, seed: int = 0):
    rngs = nnx.Rngs(seed)
    if kind == "bdq":
        return BranchingQNetwork(obs_dim, nvec, rngs, torso=tuple(policy.torso), head_hidden=policy.head_hidden)
    if kind == "flat_dqn":
        n = 1
        for k in nvec:
            n *= k
        return DuelingQNetwork(obs_dim, n, rngs, torso=tuple(policy.torso), head_hidden=policy.head_hidden)
    raise ValueError(f"not a DQN kind: {kind!r}")


def greedy_action(kind: str, q, mask: BranchMask, nvec) -> jax.Array:
    """Greedy valid action for one state (q: tuple of [A_d] for BDQ, [prod A] for flat)."""
    if kind == "bdq":
        return branch_argmax(q, mask)
    return unflatten_action(masked_argmax(q, joint_mask(mask).reshape(-1)), nvec)


def make_act(kind: str, graphdef, env: Environment, nvec):
    """Greedy evaluation policy ``act(params, key, obs, state, env_params) -> action``."""

    def act(params, key, obs, state, env_params):
        q = nnx.merge(graphdef, params)(obs)
        return greedy_action(kind, q, env.action_mask(state, env_params), nvec)

    return act


def make_train(env: Environment, env_params, policy: PlacementPolicy, iterations: int, num_envs: int,
               updates_per_iter: int = UPDATES_PER_ITER):
    kind = policy.kind
    nvec = env.action_space(env_params).nvec
    obs_dim = env.observation_size(env_params)
    graphdef, _ = nnx.split(build_network(kind, obs_dim, nvec, policy))
    tx = optax.chain(optax.clip_by_global_norm(policy.max_grad_norm), optax.adam(policy.lr))
    eps = linear_schedule(policy.eps_start, policy.eps_end, int(policy.eps_decay_frac * iterations))
    v_mask = jax.vmap(env.action_mask, in_axes=(0, None))

    def q_of(params, obs):
        return nnx.merge(graphdef, params)(obs)

    def explore(key, q, mask, epsilon):
        if kind == "bdq":
            return branch_epsilon_greedy(key, q, mask, epsilon)
        a = epsilon_greedy(key, q, joint_mask(mask).reshape(-1), epsilon)
        return unflatten_action(a, nvec)

    def loss_fn(params, target, batch: Transition):
        q = q_of(params, batch.obs)
        q_next = jax.lax.stop_gradient(q_of(params, batch.next_obs))
        q_targ = q_of(target, batch.next_obs)
        if kind == "bdq":
            y = jax.vmap(branch_double_q_target)(batch.reward, batch.discount, q_next, q_targ, batch.next_mask)
            return branch_td_loss(q, batch.action, y, policy.huber_delta)
        nm = jax.vmap(lambda m: joint_mask(m).reshape(-1))(batch.next_mask)
        y = jax.vmap(double_q_target)(batch.reward, batch.discount, q_next, q_targ, nm)
        return td_loss(q, flatten_action(batch.action, nvec), y, policy.huber_delta)

    def update(ts: DQNState, key) -> tuple[DQNState, jax.Array]:
        batch = replay_sample(ts.buffer, key, policy.batch_size)
        loss, grads = jax.value_and_grad(loss_fn)(ts.params, ts.target, batch)
        upd, opt_state = tx.update(grads, ts.opt_state, ts.params)
        params = optax.apply_updates(ts.params, upd)
        updates = ts.updates + 1
        copy = updates % policy.target_period == 0
        target = jax.tree.map(lambda p, t: jnp.where(copy, p, t), params, ts.target)
        return ts.replace(params=params, target=target, opt_state=opt_state, updates=updates), loss

    def iteration(env_params, ts: DQNState):
        key, k_act, k_step, k_upd = jax.random.split(ts.key, 4)
        mask = v_mask(ts.env_state, env_params)
        q = q_of(ts.params, ts.obs)
        epsilon = eps(ts.iteration)
        actions = jax.vmap(explore, in_axes=(0, 0, 0, None))(jax.random.split(k_act, num_envs), q, mask, epsilon)
        obs, env_state, reward, done, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_step, num_envs), ts.env_state, actions, env_params)
        trans = Transition(ts.obs, actions, reward, policy.gamma * (1.0 - done.astype(jnp.float32)), obs,
                           v_mask(env_state, env_params))
        ts = ts.replace(buffer=replay_add(ts.buffer, trans), env_state=env_state, obs=obs, key=key,
                        iteration=ts.iteration + 1)
        ready = ts.buffer.size >= max(policy.learning_starts, policy.batch_size)

        def do_updates(ts):
            ts, losses = jax.lax.scan(update, ts, jax.random.split(k_upd, updates_per_iter))
            return ts, losses.mean()

        ts, loss = jax.lax.cond(ready, do_updates, lambda ts: (ts, jnp.zeros(())), ts)
        return ts, {"reward": reward.mean(), "loss": loss, "objective": info["objective"].mean()}

    def init(key, params_env) -> DQNState:
        k_net, k_env, key = jax.random.split(key, 3)
        net = build_network(kind, obs_dim, nvec, policy)
        _, params = nnx.split(net)
        # re-initialise with the run's own key (build_network used a fixed seed for the graph structure)
        leaves, treedef = jax.tree.flatten(params)
        ks = jax.random.split(k_net, len(leaves))
        leaves = [_reinit(k, x) for k, x in zip(ks, leaves, strict=True)]
        params = jax.tree.unflatten(treedef, leaves)
        obs, env_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(k_env, num_envs), params_env)
        example = Transition(obs[0], jnp.zeros(len(nvec), jnp.int32), jnp.zeros(()), jnp.zeros(()), obs[0],
                             jax.tree.map(lambda x: x[0], v_mask(env_state, params_env)))
        return DQNState(params=params, target=params, opt_state=tx.init(params),
                        buffer=replay_init(example, policy.buffer_size), env_state=env_state, obs=obs, key=key,
                        updates=jnp.zeros((), jnp.int32), iteration=jnp.zeros((), jnp.int32))

    def start(key, w_energy, env_params=env_params) -> DQNState:
        return init(key, env_params.replace(w_energy=jnp.asarray(w_energy, jnp.float32)))

    def advance(ts: DQNState, w_energy, env_params=env_params, *, steps: int = iterations):
        p = env_params.replace(w_energy=jnp.asarray(w_energy, jnp.float32))
        return jax.lax.scan(lambda s, _: iteration(p, s), ts, None, length=steps)

    def train(key, w_energy, env_params=env_params):
        return advance(start(key, w_energy, env_params), w_energy, env_params)

    # chunked form for checkpointing: train == advance(start(...), steps=total_steps), cut into equal chunks
    train.start, train.advance, train.total_steps = start, advance, iterations  # type: ignore[attr-defined]
    train.graphdef = graphdef  # type: ignore[attr-defined]
    train.act = make_act(kind, graphdef, env, nvec)  # type: ignore[attr-defined]
    train.env_steps = iterations * num_envs  # type: ignore[attr-defined]
    return train


def _reinit(key, x):
    """Lecun-normal kernels, zero biases (the NNX Linear defaults), drawn from ``key``."""
    if x.ndim == 2:
        return jax.nn.initializers.lecun_normal()(key, x.shape, x.dtype)
    return jnp.zeros_like(x)


def policy_params(ts: DQNState):
    """What the greedy evaluation policy needs from a (possibly seed-batched) train state."""
    return ts.params
