"""A3C (Mnih et al., ICML 2016) choosing the number of CASP communities online.

Real asynchronous actor-learners: ``actors`` Python threads, each running its own training simulation (its own
:class:`~papers.petrel.engine.GradEngine` on the shared task) and its own copy of the policy. Every ``t_max``
decisions an actor computes the n-step actor-critic gradient on its local copy, applies it to the shared
parameters under a lock with shared RMSProp statistics (the "shared RMSProp" of the A3C paper), and re-syncs its
copy; actors run unsynchronised otherwise (the JAX computations release the GIL), so their copies go stale exactly
as in A3C.

MDP (one step = one decision interval of ``decision_every_steps * base_step_s`` simulated seconds):

* state (scale-free): 9 quantiles of log(EWMA iteration time / median); the RMS within-community spread of those
  log times for k = 1..K (1-D k-means); one-hot of the current k; PS ingress and egress utilisation, mean worker
  idle fraction and mean staleness / N over the last interval; log of the PS probe loss and its change over the
  last interval.
* action: k in 1..K (K = ``max_communities``; k > N masked); communities = 1-D k-means of the log EWMA times
  into k groups (similar workers together), adopted at round boundaries.
* reward: ``reward_scale * (log L_prev - log L_now) - bytes_penalty * (PS bytes in the interval / PS capacity)``,
  L = loss of the current PS parameters on a fixed probe batch of training data.

Training episodes use hardware seeds, worker counts and speed ratios drawn from ``a3c.seed + episode`` (disjoint
from evaluation seeds); evaluation runs use the trained policy greedily and frozen.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from papers.petrel.communities import dispersion_profile, kmeans_1d
from papers.petrel.sim import Grouper, PSSim

QUANTILES = np.linspace(0.0, 1.0, 9)


def feature_dim(k_max: int) -> int:
    return QUANTILES.size + 2 * k_max + 6


@dataclass
class _Snap:
    t: float = 0.0
    ps_in_busy: float = 0.0
    ps_out_busy: float = 0.0
    idle: float = 0.0
    stale: float = 0.0
    grads: int = 0
    ps_bytes: int = 0
    log_loss: float = float("nan")


class Observer:
    """Builds the state vector and the reward from a running simulation."""

    def __init__(self, k_max: int, reward_scale: float, bytes_penalty: float):
        self.k_max, self.reward_scale, self.bytes_penalty = k_max, reward_scale, bytes_penalty
        self.prev = _Snap()

    def observe(self, sim: PSSim, k_now: int) -> tuple[np.ndarray, float]:
        """(state, reward of the interval that just ended)."""
        log_t = np.log(sim.ewma)
        rel = log_t - np.median(log_t)
        q = np.quantile(rel, QUANTILES)
        disp = dispersion_profile(log_t, self.k_max)
        onehot = np.zeros(self.k_max)
        onehot[min(k_now, self.k_max) - 1] = 1.0
        log_loss = float(np.log(max(sim.engine.probe_loss(sim.w), 1e-8)))
        p = self.prev
        dt = max(sim.now - p.t, 1e-12)
        u_in = (sim.ps_in.busy - p.ps_in_busy) / dt
        u_out = (sim.ps_out.busy - p.ps_out_busy) / dt
        idle = (float(sim.idle_time.sum()) - p.idle) / (dt * sim.n)
        dg = sim.grads_applied - p.grads
        stale = (sim.staleness_sum - p.stale) / max(dg, 1) / sim.n
        dloss = 0.0 if p.log_loss != p.log_loss else log_loss - p.log_loss
        capacity = 2 * sim.ps_in.bw / 8 * dt
        reward = -self.reward_scale * dloss - self.bytes_penalty * (sim.ps_bytes - p.ps_bytes) / capacity
        x = np.concatenate([q, disp, onehot, [min(u_in, 2.0), min(u_out, 2.0), np.clip(idle, 0, 1),
                                               min(stale, 4.0), log_loss, dloss]]).astype(np.float32)
        self.prev = _Snap(sim.now, sim.ps_in.busy, sim.ps_out.busy, float(sim.idle_time.sum()), sim.staleness_sum,
                          sim.grads_applied, sim.ps_bytes, log_loss)
        return x, float(reward)


# --------------------------------------------------------------------------------------------- network


def init_params(dim: int, hidden: int, k_max: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, 0xA3C])

    def dense(i: int, o: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((i, o)) * scale / np.sqrt(i)).astype(np.float32)

    return {
        "w1": dense(dim, hidden), "b1": np.zeros(hidden, np.float32),
        "w2": dense(hidden, hidden), "b2": np.zeros(hidden, np.float32),
        "wp": dense(hidden, k_max, 0.01), "bp": np.zeros(k_max, np.float32),
        "wv": dense(hidden, 1), "bv": np.zeros(1, np.float32),
    }


def forward(params, x, xp=np):
    """(logits [.., K], value [..]) of the two-layer tanh trunk; ``xp`` is numpy or jax.numpy."""
    h = xp.tanh(x @ params["w1"] + params["b1"])
    h = xp.tanh(h @ params["w2"] + params["b2"])
    return h @ params["wp"] + params["bp"], (h @ params["wv"] + params["bv"])[..., 0]


def _masked(logits, mask, xp=np):
    return xp.where(mask, logits, -1e9)


@partial(jax.jit, static_argnames=("value_coef", "entropy_coef"))
def a3c_grads(params, x, a, ret, mask, value_coef: float, entropy_coef: float):
    """Gradient of the A3C loss over one n-step segment (x [T, D], a [T], returns [T], mask [T, K])."""

    def loss(p):
        logits, v = forward(p, x, jnp)
        logp = jax.nn.log_softmax(_masked(logits, mask, jnp))
        adv = jax.lax.stop_gradient(ret - v)
        pi_loss = -jnp.sum(jnp.take_along_axis(logp, a[:, None], axis=1)[:, 0] * adv)
        v_loss = 0.5 * jnp.sum((ret - v) ** 2)
        probs = jnp.exp(logp)
        ent = -jnp.sum(jnp.where(mask, probs * logp, 0.0))
        return pi_loss + value_coef * v_loss - entropy_coef * ent, (pi_loss, v_loss, ent)

    (total, aux), g = jax.value_and_grad(loss, has_aux=True)(params)
    return g, total, aux


# --------------------------------------------------------------------------------------------- shared agent


@dataclass
class TrainLog:
    episode: list[int] = field(default_factory=list)
    actor: list[int] = field(default_factory=list)
    ret: list[float] = field(default_factory=list)
    mean_k: list[float] = field(default_factory=list)
    updates: int = 0


class SharedAgent:
    """Shared policy/value parameters and RMSProp statistics, updated by the actor threads under a lock."""

    def __init__(self, cfg, k_max: int, seed: int):
        self.cfg, self.k_max = cfg, k_max
        self.dim = feature_dim(k_max)
        self.params = init_params(self.dim, cfg.hidden, k_max, seed)
        self.ms = {k: np.zeros_like(v) for k, v in self.params.items()}
        self.lock = threading.Lock()
        self.log = TrainLog()
        self._episodes = 0

    def snapshot(self) -> dict[str, np.ndarray]:
        with self.lock:
            return {k: v.copy() for k, v in self.params.items()}

    def next_episode(self) -> int | None:
        with self.lock:
            if self._episodes >= self.cfg.episodes:
                return None
            self._episodes += 1
            return self._episodes - 1

    def apply_gradients(self, grads: dict[str, np.ndarray]) -> None:
        cfg = self.cfg
        norm = float(np.sqrt(sum(float(np.sum(g * g)) for g in grads.values())))
        scale = min(1.0, cfg.grad_clip / max(norm, 1e-12))
        with self.lock:
            for k, g in grads.items():
                g = g * scale
                self.ms[k] = cfg.rmsprop_decay * self.ms[k] + (1 - cfg.rmsprop_decay) * g * g
                self.params[k] = self.params[k] - cfg.lr * g / np.sqrt(self.ms[k] + cfg.rmsprop_eps)
            self.log.updates += 1

    def act(self, x: np.ndarray, n_workers: int, params=None, rng: np.random.Generator | None = None) -> int:
        """Action index (k - 1): greedy when ``rng`` is None, else sampled."""
        params = params if params is not None else self.params
        logits, _ = forward(params, x)
        mask = np.arange(1, self.k_max + 1) <= n_workers
        logits = _masked(logits.astype(np.float64), mask)
        if rng is None:
            return int(np.argmax(logits))
        p = np.exp(logits - logits.max())
        p /= p.sum()
        return int(rng.choice(self.k_max, p=p))


class Learner:
    """One actor-learner: local parameter copy, n-step segment buffer, gradient push every ``t_max`` steps."""

    def __init__(self, agent: SharedAgent, actor_id: int, rng: np.random.Generator):
        self.agent, self.actor_id, self.rng = agent, actor_id, rng
        self.local = agent.snapshot()
        self.xs: list[np.ndarray] = []
        self.acts: list[int] = []
        self.rews: list[float] = []
        self.masks: list[np.ndarray] = []
        self.episode_return = 0.0
        self.ks: list[int] = []

    def step(self, x: np.ndarray, reward: float | None, n_workers: int) -> int:
        """Record the reward of the previous action, learn every t_max steps, and choose the next action."""
        if reward is not None:
            self.rews.append(reward)
            self.episode_return += reward
            if len(self.rews) == self.agent.cfg.t_max:
                self._learn(bootstrap_x=x)
        a = self.agent.act(x, n_workers, self.local, self.rng)
        self.xs.append(x)
        self.acts.append(a)
        self.masks.append(np.arange(1, self.agent.k_max + 1) <= n_workers)
        self.ks.append(a + 1)
        return a

    def finish(self, x: np.ndarray, reward: float) -> None:
        """Episode cut off by the horizon: bootstrap from the value of the last state."""
        self.rews.append(reward)
        self.episode_return += reward
        self._learn(bootstrap_x=x)

    def _learn(self, bootstrap_x: np.ndarray) -> None:
        n = len(self.rews)
        if n == 0:
            return
        cfg = self.agent.cfg
        xs, acts, masks = self.xs[:n], self.acts[:n], self.masks[:n]
        _, v_last = forward(self.local, bootstrap_x)
        ret = np.zeros(n, np.float32)
        r = float(v_last)
        for i in range(n - 1, -1, -1):
            r = self.rews[i] + cfg.gamma * r
            ret[i] = r
        g, _, _ = a3c_grads(self.local, jnp.asarray(np.stack(xs)), jnp.asarray(np.asarray(acts, np.int32)),
                            jnp.asarray(ret), jnp.asarray(np.stack(masks)), value_coef=cfg.value_coef,
                            entropy_coef=cfg.entropy_coef)
        self.agent.apply_gradients({k: np.asarray(v) for k, v in g.items()})
        self.local = self.agent.snapshot()
        self.xs, self.acts, self.masks = self.xs[n:], self.acts[n:], self.masks[n:]
        self.rews = []


class A3CCommunities(Grouper):
    """CASP grouper: k from the agent at every decision, communities by 1-D k-means on log EWMA times."""

    via_leader = True
    decides = True

    def __init__(self, agent: SharedAgent, k_max: int, greedy: bool = True, learner: Learner | None = None):
        self.agent, self.k_max, self.greedy, self.learner = agent, k_max, greedy, learner
        self.observer = Observer(k_max, agent.cfg.reward_scale, agent.cfg.bytes_penalty)
        self.k = 1
        self._first = True
        self.chosen: list[int] = []

    def initial(self, sim: PSSim) -> list[list[int]]:
        from papers.petrel.hardware import prior_groups

        groups = prior_groups(sim.hw, sim.compute.classes)
        self.k = len(groups)
        return groups

    def decide(self, sim: PSSim) -> list[list[int]]:
        x, reward = self.observer.observe(sim, self.k)
        if self.learner is not None:
            a = self.learner.step(x, None if self._first else reward, sim.n)
        else:
            a = self.agent.act(x, sim.n)
        self._first = False
        self.k = min(a + 1, sim.n)
        self.chosen.append(self.k)
        return kmeans_1d(np.log(sim.ewma), self.k)

    def finish(self, sim: PSSim) -> None:
        if self.learner is not None and not self._first:
            x, reward = self.observer.observe(sim, self.k)
            self.learner.finish(x, reward)


def train_a3c(cfg, k_max: int, make_sim: Callable[[int, Grouper], tuple[PSSim, object]],
              progress: Callable[[int, float], None] | None = None) -> SharedAgent:
    """Train a shared agent with ``cfg.actors`` asynchronous actor-learner threads.

    ``make_sim(episode, grouper) -> (sim, engine)`` builds the training simulation of an episode (its own engine,
    horizon = ``cfg.episode_decisions`` decisions, no early stop).
    """
    from papers.petrel.sim import run_batch

    agent = SharedAgent(cfg, k_max, cfg.seed)
    errors: list[BaseException] = []

    def actor(actor_id: int) -> None:
        rng = np.random.default_rng([cfg.seed, actor_id, 0xAC7])
        learner = Learner(agent, actor_id, rng)
        try:
            while (ep := agent.next_episode()) is not None:
                learner.episode_return, learner.ks = 0.0, []
                grouper = A3CCommunities(agent, k_max, greedy=False, learner=learner)
                sim, engine = make_sim(ep, grouper)
                run_batch([sim], engine)
                grouper.finish(sim)
                with agent.lock:
                    agent.log.episode.append(ep)
                    agent.log.actor.append(actor_id)
                    agent.log.ret.append(learner.episode_return)
                    agent.log.mean_k.append(float(np.mean(learner.ks)) if learner.ks else float("nan"))
                if progress:
                    progress(ep, learner.episode_return)
        except BaseException as e:  # surfaced in the main thread
            errors.append(e)

    threads = [threading.Thread(target=actor, args=(i,), name=f"a3c-actor-{i}") for i in range(cfg.actors)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return agent


def with_episodes(cfg, episodes: int = 0, episode_decisions: int = 0):
    """``cfg`` with the episode count / length overridden where the override is > 0 (smoke profile)."""
    if episodes > 0:
        cfg = dataclasses.replace(cfg, episodes=int(episodes))
    if episode_decisions > 0:
        cfg = dataclasses.replace(cfg, episode_decisions=int(episode_decisions))
    return cfg
