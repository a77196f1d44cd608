"""A3C (Mnih et al., ICML 2016) choosing the number of CASP communities online.

Asynchronous actor-learners: ``actors`` simulations run side by side (one
:class:`~mlsys_repro.papers.petrel.sim.run_batch` wave, sharing one gradient engine), each driven by its own
:class:`Learner` with its own copy of the policy. Every ``t_max`` decisions a learner computes the n-step actor-critic
gradient on its local copy, applies it at once to the shared parameters with shared RMSProp statistics (the "shared
RMSProp" of the A3C paper) and re-syncs its copy; the other learners keep acting on their older copies, so updates are
asynchronous and computed on stale parameters exactly as in A3C. The actors are interleaved in one thread (the
simulations advance event by event in a fixed order), which makes training deterministic; nothing waits for a
synchronised batch of actors (that would be A2C).

MDP (one step = one decision interval of ``decision_every_steps * base_step_s`` simulated seconds):

* state (scale-free): 9 quantiles of log(EWMA iteration time / median); the RMS within-community spread of those
  log times at each action's k (1-D k-means); one-hot of the current action; PS ingress and egress utilisation,
  mean worker idle fraction and mean staleness / N over the last interval; log of the PS probe loss and its change
  over the last interval; log(one message's transfer time / median iteration time) (the communication-to-compute
  ratio, known from the message size and the link rate); log2(N / 16).
* action: one of ``levels`` community counts spanning 1..N geometrically, ``k_a = round(N^(a / (levels - 1)))``
  (:func:`k_levels`: k = 1 is BSP timing with leader aggregation, k = N is ASP); communities = 1-D k-means of the
  log EWMA times into k groups (similar workers together), adopted at round boundaries.
* reward (progress rate): ``reward_scale * (log L_prev - log L_now) * (T / dt) - bytes_penalty * (PS bytes in the
  interval / PS capacity)``, L = loss of the current PS parameters on a fixed probe batch of training data, dt the
  interval's simulated length and T the decision interval (so the reward is the probe log-loss decrease per
  simulated second, in units of one decision interval).

Training episodes cycle through every training condition (workers x speed ratio x link rate) once per *chunk*, in
a seeded order, on hardware seeds ``a3c.seed + episode`` (disjoint from evaluation seeds). Before the first update
and after each complete chunk the frozen greedy policy is evaluated on the evaluation conditions (:func:`eval_conditions`:
the training conditions at the largest training worker count) on held-out hardware seeds, the same at every point
(:func:`eval_hw_seed`), so the points of this greedy curve are paired; :func:`greedy_summary` reads improvement and
plateau from it (the gate), :func:`learning_summary` from the sampled training returns (informational). Evaluation
runs use the trained policy greedily and frozen.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.papers.petrel.communities import dispersion_profile, kmeans_1d
from mlsys_repro.papers.petrel.sim import Grouper, PSSim

QUANTILES = np.linspace(0.0, 1.0, 9)
EXTRA = 8  # utilisation in/out, idle, staleness, log loss, its change, log comm/compute ratio, log2(N/16)


def feature_dim(levels: int) -> int:
    return QUANTILES.size + 2 * levels + EXTRA


def k_levels(n: int, levels: int) -> np.ndarray:
    """The community count of each action at ``n`` workers: geometric from 1 to ``n`` (both always included)."""
    if levels < 2:
        raise ValueError(f"need at least 2 action levels (k = 1 and k = N), got {levels}")
    k = np.rint(float(n) ** (np.arange(levels) / (levels - 1))).astype(np.int64)
    return np.clip(k, 1, n)


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


def progress_reward(log_loss_prev: float, log_loss_now: float, dt: float, interval: float, reward_scale: float,
                    ps_bytes: float = 0.0, ps_capacity_bytes: float = 1.0, bytes_penalty: float = 0.0) -> float:
    """Probe log-loss decrease per simulated second, in units of one decision interval, minus a bytes penalty."""
    dloss = 0.0 if log_loss_prev != log_loss_prev else log_loss_now - log_loss_prev
    return float(-reward_scale * dloss * (interval / max(dt, 1e-12)) - bytes_penalty * ps_bytes / ps_capacity_bytes)


class Observer:
    """Builds the state vector and the reward from a running simulation."""

    def __init__(self, levels: int, reward_scale: float, bytes_penalty: float):
        self.levels, self.reward_scale, self.bytes_penalty = levels, reward_scale, bytes_penalty
        self.prev = _Snap()

    def observe(self, sim: PSSim, level_now: int) -> tuple[np.ndarray, float]:
        """(state, reward of the interval that just ended)."""
        log_t = np.log(sim.ewma)
        rel = log_t - np.median(log_t)
        q = np.quantile(rel, QUANTILES)
        ks = k_levels(sim.n, self.levels)
        disp = dispersion_profile(log_t, int(ks.max()))[ks - 1]
        onehot = np.zeros(self.levels)
        onehot[level_now] = 1.0
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
        interval = sim.decision_every_s or dt
        reward = progress_reward(p.log_loss, log_loss, dt, interval, self.reward_scale, sim.ps_bytes - p.ps_bytes,
                                 capacity, self.bytes_penalty)
        comm = sim.msg_bytes * 8.0 / min(sim.ps_in.bw, sim.w_in[0].bw) / float(np.median(sim.ewma))
        x = np.concatenate([q, disp, onehot, [min(u_in, 2.0), min(u_out, 2.0), np.clip(idle, 0, 1),
                                               min(stale, 4.0), log_loss, dloss, np.log(comm),
                                               np.log2(sim.n / 16)]]).astype(np.float32)
        self.prev = _Snap(sim.now, sim.ps_in.busy, sim.ps_out.busy, float(sim.idle_time.sum()), sim.staleness_sum,
                          sim.grads_applied, sim.ps_bytes, log_loss)
        return x, reward


# --------------------------------------------------------------------------------------------- network


def init_params(dim: int, hidden: int, levels: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng([seed, 0xA3C])

    def dense(i: int, o: int, scale: float = 1.0) -> np.ndarray:
        return (rng.standard_normal((i, o)) * scale / np.sqrt(i)).astype(np.float32)

    return {
        "w1": dense(dim, hidden), "b1": np.zeros(hidden, np.float32),
        "w2": dense(hidden, hidden), "b2": np.zeros(hidden, np.float32),
        "wp": dense(hidden, levels, 0.01), "bp": np.zeros(levels, np.float32),
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
    condition: list[int] = field(default_factory=list)
    chunk: list[int] = field(default_factory=list)
    updates: int = 0
    # greedy evaluation curve: one entry per (evaluation point, evaluation condition); point -1 = before any update,
    # c >= 0 = after the wave in which chunk c's last episode ran; condition = index into train_conditions
    greedy_chunk: list[int] = field(default_factory=list)
    greedy_condition: list[int] = field(default_factory=list)
    greedy_ret: list[float] = field(default_factory=list)
    greedy_k: list[float] = field(default_factory=list)


class SharedAgent:
    """Shared policy/value parameters and RMSProp statistics, updated by the actor-learners as they come."""

    def __init__(self, cfg, levels: int, seed: int):
        self.cfg, self.levels = cfg, levels
        self.dim = feature_dim(levels)
        self.params = init_params(self.dim, cfg.hidden, levels, seed)
        self.ms = {k: np.zeros_like(v) for k, v in self.params.items()}
        self.lock = threading.Lock()
        self.log = TrainLog()
        self.conditions: list[tuple] = []
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

    def act(self, x: np.ndarray, params=None, rng: np.random.Generator | None = None) -> int:
        """Action index: greedy when ``rng`` is None, else sampled."""
        params = params if params is not None else self.params
        logits, _ = forward(params, x)
        logits = logits.astype(np.float64)
        if rng is None:
            return int(np.argmax(logits))
        p = np.exp(logits - logits.max())
        p /= p.sum()
        return int(rng.choice(self.levels, p=p))


class Learner:
    """One actor-learner: local parameter copy, n-step segment buffer, gradient push every ``t_max`` steps."""

    def __init__(self, agent: SharedAgent, actor_id: int, rng: np.random.Generator):
        self.agent, self.actor_id, self.rng = agent, actor_id, rng
        self.local = agent.snapshot()
        self.xs: list[np.ndarray] = []
        self.acts: list[int] = []
        self.rews: list[float] = []
        self.episode_return = 0.0
        self.ks: list[int] = []

    def reset(self) -> None:
        """A new episode: fresh buffers and a fresh copy of the shared parameters."""
        self.xs, self.acts, self.rews, self.ks = [], [], [], []
        self.episode_return = 0.0
        self.local = self.agent.snapshot()

    def step(self, x: np.ndarray, reward: float | None, n_workers: int) -> int:
        """Record the reward of the previous action, learn every t_max steps, and choose the next action."""
        if reward is not None:
            self.rews.append(reward)
            self.episode_return += reward
            if len(self.rews) == self.agent.cfg.t_max:
                self._learn(bootstrap_x=x)
        a = self.agent.act(x, self.local, self.rng)
        self.xs.append(x)
        self.acts.append(a)
        self.ks.append(int(k_levels(n_workers, self.agent.levels)[a]))
        return a

    def finish(self, x: np.ndarray, reward: float) -> None:
        """Episode cut off by the horizon: bootstrap from the value of the last state, or (``a3c.bootstrap_at_end``
        false) treat the end as terminal, so the returns are sums over the rest of the episode."""
        self.rews.append(reward)
        self.episode_return += reward
        self._learn(bootstrap_x=x if self.agent.cfg.bootstrap_at_end else None)

    def _learn(self, bootstrap_x: np.ndarray | None) -> None:
        n = len(self.rews)
        if n == 0:
            return
        cfg = self.agent.cfg
        xs, acts = self.xs[:n], self.acts[:n]
        ret = np.zeros(n, np.float32)
        r = 0.0 if bootstrap_x is None else float(forward(self.local, bootstrap_x)[1])
        for i in range(n - 1, -1, -1):
            r = self.rews[i] + cfg.gamma * r
            ret[i] = r
        mask = np.ones((n, self.agent.levels), dtype=bool)
        g, _, _ = a3c_grads(self.local, jnp.asarray(np.stack(xs)), jnp.asarray(np.asarray(acts, np.int32)),
                            jnp.asarray(ret), jnp.asarray(mask), value_coef=cfg.value_coef,
                            entropy_coef=cfg.entropy_coef)
        self.agent.apply_gradients({k: np.asarray(v) for k, v in g.items()})
        self.local = self.agent.snapshot()
        self.xs, self.acts = self.xs[n:], self.acts[n:]
        self.rews = []


class A3CCommunities(Grouper):
    """CASP grouper: an action (a community count in 1..N) from the agent at every decision, communities by 1-D
    k-means on log EWMA times."""

    via_leader = True
    decides = True

    def __init__(self, agent: SharedAgent, greedy: bool = True, learner: Learner | None = None,
                 params: dict[str, np.ndarray] | None = None):
        self.agent, self.greedy, self.learner = agent, greedy, learner
        self.params = params  # greedy on these frozen parameters (None: the agent's current ones)
        self.observer = Observer(agent.levels, agent.cfg.reward_scale, agent.cfg.bytes_penalty)
        self.level = 0
        self._first = True
        self.chosen: list[int] = []
        self.rewards: list[float] = []  # of every decision interval that ended (greedy and learning alike)

    def initial(self, sim: PSSim) -> list[list[int]]:
        from mlsys_repro.papers.petrel.hardware import prior_groups

        groups = prior_groups(sim.hw, sim.compute.classes)
        ks = k_levels(sim.n, self.agent.levels)
        self.level = int(np.argmin(np.abs(ks - len(groups))))
        return groups

    def decide(self, sim: PSSim) -> list[list[int]]:
        x, reward = self.observer.observe(sim, self.level)
        if not self._first:
            self.rewards.append(reward)
        if self.learner is not None:
            a = self.learner.step(x, None if self._first else reward, sim.n)
        else:
            a = self.agent.act(x, self.params)
        self._first = False
        self.level = a
        k = int(k_levels(sim.n, self.agent.levels)[a])
        self.chosen.append(k)
        return kmeans_1d(np.log(sim.ewma), k)

    def finish(self, sim: PSSim) -> None:
        """The reward of the last interval (cut off by the horizon); a learner learns from it."""
        if self._first:
            return
        x, reward = self.observer.observe(sim, self.level)
        self.rewards.append(reward)
        if self.learner is not None:
            self.learner.finish(x, reward)


def train_conditions(cfg) -> list[tuple[int, float, float]]:
    """Every training condition (workers, speed ratio, link Gb/s; 0 = the hardware's own link rate)."""
    links = list(cfg.train_link_gbps) or [0.0]
    return [(int(n), float(r), float(g)) for n, r, g in itertools.product(cfg.train_workers,
                                                                          cfg.train_speed_ratios, links)]


def episode_condition(cfg, ep: int) -> tuple[int, int]:
    """(chunk, condition index) of episode ``ep``: each chunk visits every condition once, in a seeded order."""
    c = len(train_conditions(cfg))
    chunk = ep // c
    order = np.random.default_rng([cfg.seed, chunk, 0xC4D]).permutation(c)
    return chunk, int(order[ep % c])


def eval_conditions(cfg) -> list[int]:
    """Indices (into :func:`train_conditions`) of the greedy evaluation conditions, at the largest training worker
    count: a cyclic diagonal of the speed ratio x link rate grid, ``max(ratios, links)`` conditions that cover every
    speed ratio and every link rate (4 ratios x 3 rates: (1x, 1), (2x, 10), (4x, 100), (8x, 1) Gb/s)."""
    n = max(int(w) for w in cfg.train_workers)
    ratios = [float(r) for r in cfg.train_speed_ratios]
    links = [float(g) for g in cfg.train_link_gbps] or [0.0]
    want = {(ratios[i % len(ratios)], links[i % len(links)]) for i in range(max(len(ratios), len(links)))}
    return [i for i, c in enumerate(train_conditions(cfg)) if c[0] == n and (c[1], c[2]) in want]


# held-out hardware seeds of the greedy evaluation: stream + EVAL_SEED_OFFSET + condition index, above every training
# episode's seed (stream + episode, episodes <= EVAL_SEED_OFFSET, checked in the schema) and below the next stream
EVAL_SEED_OFFSET = 5_000


def eval_hw_seed(cfg, condition: int) -> int:
    """The hardware seed of the greedy evaluation on training condition ``condition`` (fixed across chunks)."""
    return int(cfg.seed) + EVAL_SEED_OFFSET + int(condition)


# [ours, #50] per-seed agents: the agent of evaluation seed s trains on its own stream, a3c.seed + s * stride: its
# initial parameters, its actors' sampling, its condition order and its training hardware seeds (stream + episode).
# Streams never overlap while a3c.episodes <= the stride (checked in the schema), and all lie above the evaluation
# (0..) and tuning (1000..) seeds. Seed 0's stream is the shared agent's (a3c.seed).
AGENT_SEED_STRIDE = 10_000


def agent_stream(cfg, eval_seed: int | None) -> int:
    """The training seed stream of the agent for evaluation seed ``eval_seed`` (None: the one shared agent)."""
    return int(cfg.seed) + AGENT_SEED_STRIDE * int(eval_seed or 0)


@dataclass
class AgentSet:
    """The trained agents of one A3C policy: one ``shared`` agent for every seed, or one per evaluation seed
    (``by_seed``, ``a3c.per_seed``)."""

    shared: SharedAgent | None = None
    by_seed: dict[int, SharedAgent] = field(default_factory=dict)

    def for_seed(self, seed: int) -> SharedAgent:
        if self.shared is not None:
            return self.shared
        if int(seed) not in self.by_seed:
            raise KeyError(f"no A3C agent was trained for evaluation seed {seed} (trained: {sorted(self.by_seed)})")
        return self.by_seed[int(seed)]

    def items(self) -> list[tuple[int | None, SharedAgent]]:
        """(evaluation seed, agent) pairs; the shared agent's seed is None."""
        return [(None, self.shared)] if self.shared is not None else sorted(self.by_seed.items())


def train_a3c(cfg, levels: int, make_sim: Callable[..., PSSim], make_engine: Callable[[], object],
              progress: Callable[[int, float], None] | None = None) -> SharedAgent:
    """Train one shared agent (training stream ``cfg.seed``) with ``cfg.actors`` asynchronous actor-learners; see
    :func:`train_agents`."""
    return train_agents(cfg, levels, make_sim, make_engine, [cfg.seed],
                        None if progress is None else (lambda i, ep, ret: progress(ep, ret)))[0]


def train_agents(cfg, levels: int, make_sim: Callable[..., PSSim], make_engine: Callable[[], object],
                 streams: list[int], progress: Callable[[int, int, float], None] | None = None,
                 evaluate: bool = True) -> list[SharedAgent]:
    """Train one independent agent per training stream in ``streams`` (:func:`agent_stream`), side by side.

    Each agent has ``cfg.actors`` asynchronous actor-learners (its own parameters, shared RMSProp statistics, log
    and episode budget ``cfg.episodes``; its ``cfg.seed`` is its stream). Episodes run in waves: every agent's
    actors take one episode each, and every simulation of the wave with the same worker count shares one engine
    (``make_engine()``), so the gradients of all agents' simulations are computed in the same batched calls (the
    simulator's form of vmapping over seeds: the discrete events stay in Python, per simulation). The agents
    never read each other's state; with ``engine_mode="map"`` (gradients independent of their batch) an agent is
    bit for bit the agent trained alone on its stream. ``make_sim(hw_seed, condition, grouper, engine) -> sim``
    builds an episode's training simulation on hardware seed ``stream + episode`` (horizon =
    ``cfg.episode_decisions`` decisions, no early stop); ``progress(agent index, episode, return)``.

    With ``evaluate``, every agent's greedy policy is evaluated on its :func:`eval_conditions` (hardware seeds
    :func:`eval_hw_seed`) with its parameters frozen before the first wave (point -1) and at the end of the wave in
    which each of its chunks completes (point = that chunk), and at the end if the last chunk is incomplete; the
    returns and mean k go to the agent's log (``greedy_*``). These greedy runs go into the next wave's batches (they
    run beside its training episodes on their frozen copy; the last point's run alone), so they cost few extra
    batched calls. They never touch the parameters, the learners or their random streams: with
    ``engine_mode="map"`` training is bit for bit the same with or without them.
    """
    from mlsys_repro.papers.petrel.sim import run_batch

    if len(set(streams)) != len(streams):
        raise ValueError(f"training streams must differ (one per agent), got {streams}")
    agents, learners = [], []
    for stream in streams:
        acfg = dataclasses.replace(cfg, seed=int(stream))
        agent = SharedAgent(acfg, levels, acfg.seed)
        agent.conditions = train_conditions(acfg)
        agents.append(agent)
        learners.append([Learner(agent, i, np.random.default_rng([acfg.seed, i, 0xAC7]))
                         for i in range(cfg.actors)])
    def eval_runs(points: list[tuple[int, int, dict]], engines: dict[int, object]) -> list[tuple]:
        """Greedy runs of agent ``a`` on its frozen parameters ``params``, labelled ``point``, for every (a, point,
        params), on ``engines`` (one per worker count, shared with the training wave that runs beside them)."""
        runs = []
        for a, point, params in points:
            agent = agents[a]
            for ci in eval_conditions(agent.cfg):
                cond = agent.conditions[ci]
                engine = engines.setdefault(cond[0], make_engine())
                grouper = A3CCommunities(agent, greedy=True, params=params)
                runs.append((a, point, ci, grouper, make_sim(eval_hw_seed(agent.cfg, ci), cond, grouper, engine),
                             engine))
        return runs

    def record(runs: list[tuple]) -> None:
        for a, point, ci, grouper, sim, _ in runs:
            grouper.finish(sim)
            log = agents[a].log
            log.greedy_chunk.append(point)
            log.greedy_condition.append(ci)
            log.greedy_ret.append(float(np.sum(grouper.rewards)))
            log.greedy_k.append(float(np.mean(grouper.chosen)) if grouper.chosen else float("nan"))

    # evaluation points waiting to run (beside the next wave): (agent, point, its parameters frozen at that point)
    pending = [(a, -1, agent.snapshot()) for a, agent in enumerate(agents)] if evaluate else []
    c = len(agents[0].conditions)
    while True:
        wave = []
        for a, agent in enumerate(agents):
            for learner in learners[a]:
                ep = agent.next_episode()
                if ep is None:
                    break
                wave.append((a, ep, learner))
        if not wave:
            break
        engines: dict[int, object] = {}  # one engine per worker count (the per-worker batch size differs)
        runs = []
        for a, ep, learner in wave:
            agent = agents[a]
            learner.reset()
            chunk, ci = episode_condition(agent.cfg, ep)
            cond = agent.conditions[ci]
            engine = engines.setdefault(cond[0], make_engine())
            grouper = A3CCommunities(agent, greedy=False, learner=learner)
            runs.append((a, ep, chunk, ci, learner, grouper, make_sim(agent.cfg.seed + ep, cond, grouper, engine),
                         engine))
        greedy = eval_runs(pending, engines)
        pending = []
        for engine in engines.values():
            run_batch([r[6] for r in runs if r[7] is engine] + [g[4] for g in greedy if g[5] is engine], engine)
        record(greedy)
        for a, ep, chunk, ci, learner, grouper, sim, _ in runs:
            grouper.finish(sim)
            log = agents[a].log
            log.episode.append(ep)
            log.actor.append(learner.actor_id)
            log.ret.append(learner.episode_return)
            log.mean_k.append(float(np.mean(learner.ks)) if learner.ks else float("nan"))
            log.condition.append(ci)
            log.chunk.append(chunk)
            if progress:
                progress(a, ep, learner.episode_return)
        if evaluate:
            for a in sorted({w[0] for w in wave}):
                done = len(agents[a].log.episode)
                lo = len([e for w_a, e, _ in wave if w_a == a])
                complete = list(range((done - lo) // c, done // c))  # chunks completed in this wave
                if complete:
                    pending.append((a, complete[-1], agents[a].snapshot()))
                elif done == agents[a].cfg.episodes and done % c:
                    pending.append((a, done // c, agents[a].snapshot()))  # the last, incomplete chunk
    if pending:  # the points of the last wave run on their own
        engines = {}
        greedy = eval_runs(pending, engines)
        for engine in engines.values():
            run_batch([g[4] for g in greedy if g[5] is engine], engine)
        record(greedy)
    return agents


def learning_summary(log: TrainLog, num_conditions: int, tail_chunks: int = 3) -> dict[str, float]:
    """Gate metrics of a training run, read from complete chunks (each visits every condition once).

    ``improved``: the per-condition gain of the mean return over the last ``tail_chunks`` chunks against the first
    chunk has a one-sided 95 % t lower bound above 0 (paired over conditions). ``plateaued``: the last chunk's mean
    return does not differ from the chunk before it (paired two-sided 95 % t interval contains 0). ``converged`` =
    both. Fewer than ``tail_chunks + 1`` complete chunks: all 0 (too short to tell).
    """
    from scipy import stats

    ret = np.asarray(log.ret, dtype=np.float64)
    chunk = np.asarray(log.chunk)
    cond = np.asarray(log.condition)
    complete = [c for c in np.unique(chunk) if np.sum(chunk == c) == num_conditions]
    out = {"improved": 0.0, "plateaued": 0.0, "converged": 0.0, "chunks": float(len(complete)),
           "first_chunk_return": float("nan"), "last_chunks_return": float("nan")}
    if not complete:
        return out
    table = np.full((max(complete) + 1, num_conditions), np.nan)
    for c in complete:
        sel = chunk == c
        table[c, cond[sel]] = ret[sel]
    table = table[complete]
    out["first_chunk_return"] = float(table[0].mean())
    out["last_chunks_return"] = float(table[-tail_chunks:].mean())
    if len(complete) < tail_chunks + 1 or num_conditions < 2:
        return out
    t95 = stats.t.ppf(0.95, num_conditions - 1)
    t975 = stats.t.ppf(0.975, num_conditions - 1)
    gain = table[-tail_chunks:].mean(axis=0) - table[0]
    se = gain.std(ddof=1) / np.sqrt(num_conditions)
    improved = gain.mean() - t95 * se > 0
    step = table[-1] - table[-2]
    se2 = step.std(ddof=1) / np.sqrt(num_conditions)
    plateaued = abs(step.mean()) <= t975 * se2
    out.update(improved=float(improved), plateaued=float(plateaued), converged=float(improved and plateaued))
    return out


def greedy_summary(log: TrainLog, num_conditions: int, tail_chunks: int = 3) -> dict[str, float]:
    """Gate metrics of a training run, read from its greedy evaluation curve (``log.greedy_*``), paired over the
    evaluation conditions (the same held-out hardware seeds at every point).

    ``improved``: the per-condition gain of the mean greedy return over the last ``tail_chunks`` complete chunks
    against the untrained policy (point -1) has a one-sided 95 % t lower bound above 0. ``plateaued``: the last
    complete chunk's greedy returns do not differ from the chunk before it (paired two-sided 95 % t interval contains
    0). ``converged`` = both. Chunk c is complete when the run had at least ``(c + 1) * num_conditions`` episodes
    (its :func:`learning_summary` table); fewer than ``max(tail_chunks, 2)`` complete chunks or no point -1: all 0.
    """
    from scipy import stats

    ret = np.asarray(log.greedy_ret, dtype=np.float64)
    point = np.asarray(log.greedy_chunk)
    cond = np.asarray(log.greedy_condition)
    conds = sorted(set(cond.tolist()))
    m = len(conds)
    n_complete = len(log.episode) // num_conditions if num_conditions else 0
    pts = [p for p in sorted(set(point.tolist())) if p < n_complete]
    out = {"improved": 0.0, "plateaued": 0.0, "converged": 0.0, "chunks": float(len([p for p in pts if p >= 0])),
           "initial_return": float("nan"), "last_chunks_return": float("nan")}
    if -1 not in pts:
        return out
    col = {c: j for j, c in enumerate(conds)}
    table = np.full((len(pts), m), np.nan)
    row = {p: i for i, p in enumerate(pts)}
    for p, c, r in zip(point, cond, ret, strict=True):
        if p in row:
            table[row[p], col[c]] = r
    if np.isnan(table).any():
        raise ValueError("every greedy evaluation point must cover every evaluation condition")
    out["initial_return"] = float(table[0].mean())
    done = table[1:]
    if len(done):
        out["last_chunks_return"] = float(done[-tail_chunks:].mean())
    if len(done) < max(tail_chunks, 2) or m < 2:
        return out
    t95 = stats.t.ppf(0.95, m - 1)
    t975 = stats.t.ppf(0.975, m - 1)
    gain = done[-tail_chunks:].mean(axis=0) - table[0]
    improved = gain.mean() - t95 * gain.std(ddof=1) / np.sqrt(m) > 0
    step = done[-1] - done[-2]
    plateaued = abs(step.mean()) <= t975 * step.std(ddof=1) / np.sqrt(m)
    out.update(improved=float(improved), plateaued=float(plateaued), converged=float(improved and plateaued))
    return out


def arms_differ(choices: list[list[int]]) -> float:
    """1 if the agent's decisions over all runs take at least two different community counts, else 0 (one agent's:
    with per-seed agents each is judged on its own runs, ``experiments._gate_rows``).

    Meant for runs at one worker count (the experiments of the A3C claims have N = 16): across worker counts one
    action level maps to different k (:func:`k_levels`), so different k there need not mean different actions."""
    return float(len({int(k) for run in choices for k in run}) >= 2)


def with_episodes(cfg, episodes: int = 0, episode_decisions: int = 0):
    """``cfg`` with the episode count / length overridden where the override is > 0 (smoke profile)."""
    if episodes > 0:
        cfg = dataclasses.replace(cfg, episodes=int(episodes))
    if episode_decisions > 0:
        cfg = dataclasses.replace(cfg, episode_decisions=int(episode_decisions))
    return cfg
