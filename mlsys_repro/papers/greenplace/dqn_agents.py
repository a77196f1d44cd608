"""Value-based agents: the branching dueling Q-network (BDQ, the multi-action method) and a flat dueling double DQN
over the joint action (the single-action ablation), trained entirely inside one ``jit``.

``make_train(env, env_params, policy, iterations, num_envs)`` returns ``train(key, w_energy, env_params) ->
(state, curves)`` (the ``env_params`` given to make_train fix shapes and are the default). Each iteration steps
``num_envs`` environments with epsilon-greedy actions (masked), stores the transitions in a replay buffer written
one row of ``num_envs`` at a time, and takes ``policy.updates_per_iter`` gradient steps with double-Q targets (BDQ:
the mean over branches of each branch's target value, Tavakoli et al. 2018). ``jax.vmap(train)`` runs seeds and
reward weights side by side. The whole train state (networks, optimiser, buffer, environments) is one pytree.

The recipe's parts, each a policy field (``conf/policy/greenplace/{bdq,flat_dqn}.yaml`` turn them all on):

* ``n_step``: n-step returns, read at sampling time from windows of one environment's consecutive transitions
  (:func:`mlsys_repro.common.rl.replay.replay_sample_windows`); an episode end inside the window cuts the return
  and the bootstrap.
* ``target_tau``: soft (Polyak) target updates after every step instead of a hard copy every ``target_period``.
* ``explore="top_k"``: an epsilon draw picks uniformly among the ``top_k`` valid joint actions with the lowest
  predicted objective (the environment's own one-job model, :mod:`mlsys_repro.papers.greenplace.features`), so
  exploration never parks a large job on a one-lane edge node where every later job would queue behind it;
  ``explore="boltzmann"`` draws among the same ``top_k`` with probabilities ``softmax(-objective / temperature)``
  (:func:`boltzmann_explore`).
* ``action_features``: the observation carries those predictions per cut and per (cut, node)
  (:func:`mlsys_repro.papers.greenplace.features.action_tables`).
* ``cut_conditioned`` (BDQ): the node branches are conditioned on the chosen cut and read that cut's row of the
  tables (:class:`mlsys_repro.common.rl.dqn.ConditionedBranchingQNetwork`).
* ``lr_schedule`` / ``lr_end`` / ``adam_eps``: the optimiser (:func:`make_optimizer`): Adam with the learning rate
  constant or decayed (linear or cosine) from ``lr`` at the first gradient update to ``lr * lr_end`` at the last
  (:func:`update_count` counts them exactly), and Adam's epsilon.
* ``policy_tau``: the greedy (evaluated) policy reads a Polyak average of the online network updated after every
  gradient step with this tau (weight averaging of the evaluated policy), instead of the online network or, with
  ``act_on_target``, the bootstrap target.

The reward's clipping (both terms at ``reward_clip``) is the environment's (:mod:`mlsys_repro.papers.greenplace.env`).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct

from mlsys_repro.common.rl.dqn import (
    BranchingQNetwork,
    ConditionedBranchingQNetwork,
    DuelingQNetwork,
    branch_double_q_target,
    branch_epsilon_greedy,
    branch_td_loss,
    conditioned_double_q_target,
    conditioned_greedy,
    double_q_target,
    epsilon_greedy,
    linear_schedule,
    polyak,
    td_loss,
    top_k_explore,
)
from mlsys_repro.common.rl.env import (
    BranchMask,
    Environment,
    branch_argmax,
    flatten_action,
    joint_mask,
    masked_argmax,
    sample_uniform,
    unflatten_action,
)
from mlsys_repro.common.rl.replay import ReplayState, replay_add, replay_init, replay_sample_windows
from mlsys_repro.papers.greenplace.features import action_tables, predicted_objective, table_size
from mlsys_repro.papers.greenplace.schemas import PlacementPolicy


@struct.dataclass
class Transition:
    obs: jax.Array  # the agent's observation (with the action tables when policy.action_features)
    action: jax.Array  # int32 [D]
    reward: jax.Array
    done: jax.Array  # float32: the episode ended with this step
    mask: BranchMask  # of ``obs``'s state (the bootstrap state's mask when read n steps later)


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
    act_on_target: bool = struct.field(pytree_node=False, default=False)
    avg: Any = None  # policy_tau > 0: the greedy policy's Polyak average of the online network (else None)


def n_step_returns(window: Transition, gamma: float, n: int):
    """From windows of ``n + 1`` consecutive transitions of one environment (leaves [B, n + 1, ...]): the first
    step's (obs, action), the n-step return ``R = sum_k gamma^k r_k`` over the steps before the first episode end,
    the discount to the bootstrap (``gamma^n``, 0 if an episode ended within the n steps) and the bootstrap
    state's (obs, mask), the window's last entry."""
    alive = jnp.cumprod(1.0 - window.done[:, :n], axis=1)  # no episode end up to and including step k
    before = jnp.concatenate([jnp.ones_like(alive[:, :1]), alive[:, :-1]], 1)
    ret = (window.reward[:, :n] * before * gamma ** jnp.arange(n, dtype=jnp.float32)).sum(1)
    last = jax.tree.map(lambda x: x[:, n], window)
    return window.obs[:, 0], window.action[:, 0], ret, gamma ** n * alive[:, -1], last.obs, last.mask


def obs_size(env: Environment, env_params, policy: PlacementPolicy) -> int:
    return env.observation_size(env_params) + (table_size(env_params) if policy.action_features else 0)


def build_network(kind: str, obs_dim: int, nvec: tuple[int, ...], policy: PlacementPolicy, seed: int = 0):
    rngs = nnx.Rngs(seed)
    if kind == "bdq" and policy.cut_conditioned:
        return ConditionedBranchingQNetwork(obs_dim, nvec, rngs, torso=tuple(policy.torso),
                                            head_hidden=policy.head_hidden, tables=policy.action_features)
    if kind == "bdq":
        return BranchingQNetwork(obs_dim, nvec, rngs, torso=tuple(policy.torso), head_hidden=policy.head_hidden)
    if kind == "flat_dqn":
        n = 1
        for k in nvec:
            n *= k
        return DuelingQNetwork(obs_dim, n, rngs, torso=tuple(policy.torso), head_hidden=policy.head_hidden)
    raise ValueError(f"not a DQN kind: {kind!r}")


def make_act(kind: str, graphdef, env: Environment, nvec, policy: PlacementPolicy):
    """Greedy evaluation policy ``act(params, key, obs, state, env_params) -> action``."""
    greedy = _greedy(kind, graphdef, nvec, policy)

    def act(params, key, obs, state, env_params):
        if policy.action_features:
            pred, valid = predicted_objective(state, env_params)
            obs = jnp.concatenate([obs, action_tables(pred, valid, env_params)])
        return greedy(params, obs, env.action_mask(state, env_params))[0]

    return act


def _greedy(kind: str, graphdef, nvec, policy: PlacementPolicy):
    """``greedy(params, obs, mask) -> (action int32 [D], values)`` for one state; ``values`` feed exploration."""

    def greedy(params, obs, mask: BranchMask):
        net = nnx.merge(graphdef, params)
        if kind == "bdq" and policy.cut_conditioned:
            return conditioned_greedy(net, obs, mask)
        q = net(obs)
        if kind == "bdq":
            return branch_argmax(q, mask), q
        return unflatten_action(masked_argmax(q, joint_mask(mask).reshape(-1)), nvec), q

    return greedy


def replay_capacity(policy: PlacementPolicy, iterations: int, num_envs: int) -> int:
    """The buffer's capacity: ``buffer_size`` rounded down to whole rows of ``num_envs`` transitions, never more
    than training writes (iterations x num_envs: the same draws, less memory), at least one n-step window."""
    return max(min(policy.buffer_size, iterations * num_envs) // num_envs, policy.n_step + 1) * num_envs


def _updates_from(policy: PlacementPolicy, num_envs: int) -> int:
    """Transitions the buffer must hold before gradient updates start."""
    return max(policy.learning_starts, policy.batch_size, (policy.n_step + 1) * num_envs)


def update_count(policy: PlacementPolicy, iterations: int, num_envs: int) -> int:
    """The gradient updates one run takes: ``updates_per_iter`` in every iteration after which the buffer holds
    :func:`_updates_from` transitions (it holds ``min(k * num_envs, capacity)`` after ``k`` iterations)."""
    need = _updates_from(policy, num_envs)
    if replay_capacity(policy, iterations, num_envs) < need:
        return 0
    first = -(-need // num_envs)  # the first iteration (1-based) that updates
    return max(iterations - first + 1, 0) * policy.updates_per_iter


def learning_rate(policy: PlacementPolicy, total_updates: int):
    """The learning rate (a float, or an optax schedule of the update count): ``lr`` for ``lr_schedule:
    constant``; else from ``lr`` at the first of ``total_updates`` gradient updates to ``lr * lr_end`` at the last,
    linearly or along a half cosine (Loshchilov and Hutter's SGDR without restarts)."""
    if policy.lr_schedule == "constant":
        return policy.lr
    span = max(int(total_updates) - 1, 1)
    if policy.lr_schedule == "linear":
        return optax.linear_schedule(policy.lr, policy.lr * policy.lr_end, span)
    if policy.lr_schedule == "cosine":
        return optax.cosine_decay_schedule(policy.lr, span, alpha=policy.lr_end)
    raise ValueError(f"unknown lr_schedule {policy.lr_schedule!r}")


def make_optimizer(policy: PlacementPolicy, total_updates: int) -> optax.GradientTransformation:
    """Global-norm gradient clipping at ``max_grad_norm``, then Adam (epsilon ``adam_eps``) at
    :func:`learning_rate`."""
    return optax.chain(optax.clip_by_global_norm(policy.max_grad_norm),
                       optax.adam(learning_rate(policy, total_updates), eps=policy.adam_eps))


def make_train(env: Environment, env_params, policy: PlacementPolicy, iterations: int, num_envs: int):
    kind = policy.kind
    nvec = env.action_space(env_params).nvec
    obs_dim = obs_size(env, env_params, policy)
    graphdef, _ = nnx.split(build_network(kind, obs_dim, nvec, policy))
    total_updates = update_count(policy, iterations, num_envs)
    tx = make_optimizer(policy, total_updates)
    eps = linear_schedule(policy.eps_start, policy.eps_end, int(policy.eps_decay_frac * iterations))
    v_mask = jax.vmap(env.action_mask, in_axes=(0, None))
    greedy = _greedy(kind, graphdef, nvec, policy)
    n = policy.n_step
    capacity = replay_capacity(policy, iterations, num_envs)
    conditioned = kind == "bdq" and policy.cut_conditioned

    def observe(obs, env_state, p):
        """The agent's observations [num_envs, ...] and, for top-k exploration, predicted objectives [num_envs, A]."""
        if not (policy.action_features or policy.explore in ("top_k", "boltzmann")):
            return obs, None
        pred, valid = jax.vmap(predicted_objective, in_axes=(0, None))(env_state, p)
        if policy.action_features:
            obs = jnp.concatenate([obs, jax.vmap(action_tables, in_axes=(0, 0, None))(pred, valid, p)], -1)
        return obs, (pred, valid)

    def explore(key, obs, mask, pred, epsilon, params):
        a, q = greedy(params, obs, mask)
        if policy.explore == "top_k":
            flat = top_k_explore(key, flatten_action(a, nvec), -pred[0], pred[1], policy.top_k, epsilon)
            return unflatten_action(flat, nvec)
        if policy.explore == "boltzmann":
            flat = boltzmann_explore(key, flatten_action(a, nvec), pred[0], pred[1], policy.top_k,
                                     policy.temperature, epsilon)
            return unflatten_action(flat, nvec)
        if kind == "bdq" and not conditioned:
            return branch_epsilon_greedy(key, q, mask, epsilon)
        if kind == "bdq":
            k1, k2 = jax.random.split(key)
            return jnp.where(jax.random.uniform(k1) < epsilon, sample_uniform(k2, mask), a).astype(jnp.int32)
        flat = epsilon_greedy(key, q, joint_mask(mask).reshape(-1), epsilon)
        return unflatten_action(flat, nvec)

    def loss_fn(params, target, window: Transition):
        obs, action, ret, disc, nobs, nmask = n_step_returns(window, policy.gamma, n)
        net, tgt = nnx.merge(graphdef, params), nnx.merge(graphdef, target)
        if conditioned:
            y = conditioned_double_q_target(net, tgt, ret, disc, nobs, nmask)
            return branch_td_loss(net(obs, action[:, 0]), action, y, policy.huber_delta)
        q = net(obs)
        q_next = jax.lax.stop_gradient(net(nobs))
        q_targ = tgt(nobs)
        if kind == "bdq":
            y = jax.vmap(branch_double_q_target)(ret, disc, q_next, q_targ, nmask)
            return branch_td_loss(q, action, y, policy.huber_delta)
        nm = jax.vmap(lambda m: joint_mask(m).reshape(-1))(nmask)
        y = jax.vmap(double_q_target)(ret, disc, q_next, q_targ, nm)
        return td_loss(q, flatten_action(action, nvec), y, policy.huber_delta)

    def update(nets, key, buffer: ReplayState):
        """One gradient step on (params, target, opt_state, updates, avg); the buffer is read, never carried."""
        params, target, opt_state, updates, avg = nets
        window = replay_sample_windows(buffer, key, policy.batch_size, num_envs, n + 1)
        loss, grads = jax.value_and_grad(loss_fn)(params, target, window)
        upd, opt_state = tx.update(grads, opt_state, params)
        params = optax.apply_updates(params, upd)
        updates = updates + 1
        if policy.target_tau > 0:
            target = polyak(params, target, policy.target_tau)
        else:
            copy = updates % policy.target_period == 0
            target = jax.tree.map(lambda p, t: jnp.where(copy, p, t), params, target)
        if policy.policy_tau > 0:
            avg = polyak(params, avg, policy.policy_tau)
        return (params, target, opt_state, updates, avg), loss

    def iteration(env_params, ts: DQNState):
        key, k_act, k_step, k_upd = jax.random.split(ts.key, 4)
        mask = v_mask(ts.env_state, env_params)
        obs, pred = observe(ts.obs, ts.env_state, env_params)
        epsilon = eps(ts.iteration)
        actions = jax.vmap(explore, in_axes=(0, 0, 0, 0, None, None))(
            jax.random.split(k_act, num_envs), obs, mask, pred, epsilon, ts.params)
        next_obs, env_state, reward, done, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(k_step, num_envs), ts.env_state, actions, env_params)
        trans = Transition(obs, actions, reward, done.astype(jnp.float32), mask)
        ts = ts.replace(buffer=replay_add(ts.buffer, trans), env_state=env_state, obs=next_obs, key=key,
                        iteration=ts.iteration + 1)
        ready = ts.buffer.size >= _updates_from(policy, num_envs)

        # only the networks pass through the cond: vmapped over seeds, its predicate is batched and the cond
        # becomes a select of both branches' outputs, which must not include the replay buffer
        buffer = ts.buffer

        def do_updates(nets):
            nets, losses = jax.lax.scan(lambda c, k: update(c, k, buffer), nets,
                                        jax.random.split(k_upd, policy.updates_per_iter))
            return nets, losses.mean()

        nets = (ts.params, ts.target, ts.opt_state, ts.updates, ts.avg)
        nets, loss = jax.lax.cond(ready, do_updates, lambda nets: (nets, jnp.zeros(())), nets)
        params, target, opt_state, updates, avg = nets
        ts = ts.replace(params=params, target=target, opt_state=opt_state, updates=updates, avg=avg)
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
        example = Transition(jnp.zeros(obs_dim, jnp.float32), jnp.zeros(len(nvec), jnp.int32), jnp.zeros(()),
                             jnp.zeros(()), jax.tree.map(lambda x: x[0], v_mask(env_state, params_env)))
        return DQNState(params=params, target=params, opt_state=tx.init(params),
                        buffer=replay_init(example, capacity), env_state=env_state, obs=obs, key=key,
                        updates=jnp.zeros((), jnp.int32), iteration=jnp.zeros((), jnp.int32),
                        act_on_target=policy.act_on_target, avg=params if policy.policy_tau > 0 else None)

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
    train.act = make_act(kind, graphdef, env, nvec, policy)  # type: ignore[attr-defined]
    train.env_steps = iterations * num_envs  # type: ignore[attr-defined]
    train.updates = total_updates  # type: ignore[attr-defined]
    return train


def boltzmann_explore(key: jax.Array, greedy: jax.Array, pred: jax.Array, valid: jax.Array, k: int,
                      temperature: float, epsilon: jax.Array) -> jax.Array:
    """Boltzmann exploration on the predicted objective: with probability ``epsilon`` a joint action drawn from
    ``softmax(-(pred - best) / temperature)`` over the ``k`` valid actions with the lowest ``pred`` (flat [A], e.g.
    the environment's one-job prediction; lower is better), else ``greedy`` (flat index). ``temperature`` -> 0 draws
    the predicted best (myopic's choice), -> inf uniformly among the ``k`` (``top_k_explore``). Only valid actions
    are drawn."""
    k = min(int(k), int(pred.shape[-1]))
    neg, idx = jax.lax.top_k(jnp.where(valid, -pred, -jnp.inf), k)  # neg[0] = -best
    logits = jnp.where(jnp.isfinite(neg), (neg - neg[0]) / temperature, -jnp.inf)
    k1, k2 = jax.random.split(key)
    pick = idx[jax.random.categorical(k1, logits)]
    return jnp.where(jax.random.uniform(k2) < epsilon, pick, greedy).astype(jnp.int32)


def _reinit(key, x):
    """Lecun-normal kernels, zero biases (the NNX Linear defaults), drawn from ``key``."""
    if x.ndim == 2:
        return jax.nn.initializers.lecun_normal()(key, x.shape, x.dtype)
    return jnp.zeros_like(x)


def policy_params(ts: DQNState):
    """What the greedy evaluation policy needs from a (possibly seed-batched) train state: the online network;
    with ``policy_tau > 0`` its own Polyak average of the online network (over the last ~1/policy_tau updates); or
    with ``act_on_target`` the target network (with soft updates, a Polyak average over the last ~1/target_tau
    updates). Averaging the weights is the usual way to read a stable greedy policy off a noisy Q-learner."""
    if ts.avg is not None:
        return ts.avg
    return ts.target if ts.act_on_target else ts.params
