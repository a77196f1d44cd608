"""Config schemas of greenplace: the edge-cloud hardware, the policies (heuristics, DQN family, PPO) and the
experiment parameters. Value checks run at compose time (``__post_init__``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from mlsys_repro.common.repro.schema import BaseHardware, BasePolicy, register_schema

MODELS = ("alexnet", "vgg16", "resnet18", "mobilenet_v1")
HEURISTICS = ("cloud_only", "edge_only", "random", "neurosurgeon", "neurosurgeon_queue", "dads", "greedy_cheapest",
              "greedy_greenest", "myopic", "lookahead")
AGENTS = ("bdq", "flat_dqn", "ppo", "ppo_scorer")
EXPLORE = ("uniform", "top_k", "boltzmann")
LR_SCHEDULES = ("constant", "linear", "cosine")
REWARD_SCALES = ("clip", "symlog")


def _positive(where: str, **values: float) -> None:
    for k, v in values.items():
        if not v > 0:
            raise ValueError(f"{where}: {k} must be > 0, got {v}")


@dataclass
class NodeSpec:
    """One node: an edge site (jobs arrive there) or the cloud data centre. Powers are per lane (server)."""

    name: str = MISSING
    kind: str = "edge"  # edge | cloud (selects the measured latency model)
    speed: float = 1.0  # multiplier on the device-class latency model
    lanes: int = 1
    p_idle_w: float = MISSING
    p_max_w: float = MISSING
    pue: float = 1.0
    memory_gb: float = MISSING  # per lane
    green_kw: float = 0.0  # renewable capacity; available power = green_kw * hourly renewable share
    job_share: float = 0.0  # share of arriving jobs (edge sites only)

    def __post_init__(self) -> None:
        w = f"node {self.name!r}"
        if self.kind not in ("edge", "cloud"):
            raise ValueError(f"{w}: kind must be edge or cloud, got {self.kind!r}")
        _positive(w, speed=self.speed, lanes=self.lanes, p_max_w=self.p_max_w, memory_gb=self.memory_gb)
        if not 0 <= self.p_idle_w < self.p_max_w:
            raise ValueError(f"{w}: need 0 <= p_idle_w < p_max_w, got {self.p_idle_w}, {self.p_max_w}")
        if self.pue < 1.0:
            raise ValueError(f"{w}: pue must be >= 1, got {self.pue}")
        if self.green_kw < 0 or self.job_share < 0:
            raise ValueError(f"{w}: green_kw and job_share must be >= 0")
        if self.kind == "cloud" and self.job_share:
            raise ValueError(f"{w}: jobs arrive at edge sites; the cloud's job_share must be 0")


@dataclass
class EdgeCloudHardware(BaseHardware):
    """Edge sites of a city and one cloud data centre, with their links."""

    kind: str = "edge_cloud"
    nodes: list[NodeSpec] = field(default_factory=list)
    lan_mbps: float = 100.0  # site <-> site
    lan_rtt_ms: float = 5.0
    wan_mbps: float = 50.0  # site <-> cloud
    wan_rtt_ms: float = 40.0
    link_fifo: bool = False  # one FIFO uplink and downlink per edge site (WAN contention) [ours]; off: no contention
    net_kwh_per_gb: float = 0.006
    cold_start_s: float = 0.5  # 0 disables cold starts
    keep_alive_s: float = 600.0
    weight_load_gbps: float = 1.0

    def __post_init__(self) -> None:
        w = f"hardware {self.name!r}"
        if len(self.nodes) < 2:
            raise ValueError(f"{w}: needs at least one edge site and one cloud node")
        clouds = [n for n in self.nodes if n.kind == "cloud"]
        if len(clouds) != 1:
            raise ValueError(f"{w}: exactly one node must have kind cloud, got {len(clouds)}")
        if sum(n.job_share for n in self.nodes) <= 0:
            raise ValueError(f"{w}: some edge site must receive jobs (job_share > 0)")
        names = [n.name for n in self.nodes]
        if len(set(names)) != len(names):
            raise ValueError(f"{w}: duplicate node names {names}")
        _positive(w, lan_mbps=self.lan_mbps, wan_mbps=self.wan_mbps, weight_load_gbps=self.weight_load_gbps)
        if min(self.lan_rtt_ms, self.wan_rtt_ms, self.net_kwh_per_gb, self.cold_start_s, self.keep_alive_s) < 0:
            raise ValueError(f"{w}: rtts, net_kwh_per_gb, cold_start_s and keep_alive_s must be >= 0")
        if not isinstance(self.link_fifo, bool):
            raise ValueError(f"{w}: link_fifo must be true or false, got {self.link_fifo!r}")


@dataclass
class PlacementPolicy(BasePolicy):
    """A placement policy. ``kind`` is a heuristic (``HEURISTICS``) or an agent (``AGENTS``)."""

    kind: str = MISSING
    # DQN family (bdq, flat_dqn)
    lr: float = 5e-4
    gamma: float = 0.9
    batch_size: int = 64
    buffer_size: int = 50_000
    eps_start: float = 1.0
    eps_end: float = 0.05
    eps_decay_frac: float = 0.5  # of the training iterations
    target_period: int = 500  # gradient updates between target-network copies
    learning_starts: int = 1000  # transitions in the buffer before updates start
    huber_delta: float = 1.0
    updates_per_iter: int = 2  # gradient steps per iteration (one iteration steps every training environment)
    n_step: int = 1  # n-step returns, read from windows of each environment's consecutive transitions
    target_tau: float = 0.0  # > 0: soft (Polyak) target update every step; 0: hard copy every target_period
    act_on_target: bool = False  # the greedy (evaluated) policy reads the target network, a Polyak average
    policy_tau: float = 0.0  # > 0: the greedy policy reads its own Polyak average of the online network, updated
    # with this tau after every gradient step (slower than the target's; excludes act_on_target); 0: off
    lr_schedule: str = "constant"  # the learning rate over the run's gradient updates: constant, linear or cosine
    # decay from lr (first update) to lr * lr_end (last update)
    lr_end: float = 0.1  # lr_schedule linear / cosine: the last update's learning rate as a fraction of lr
    adam_eps: float = 1e-8  # Adam's epsilon (optax's default 1e-8; Rainbow and Dopamine use 1.5e-4)
    keep_best: bool = False  # the reported policy is the checkpoint with the lowest greedy objective on the
    # training-year curve episodes (selection on training data, never the evaluation year); else the last checkpoint
    explore: str = "uniform"  # epsilon draws: "uniform" over valid actions, "top_k" (uniform among the top_k
    # actions by predicted objective) or "boltzmann" (softmax of minus the predicted objective / temperature over them)
    temperature: float = 0.1  # explore="boltzmann": in normalised objective units
    action_features: bool = False  # observation + per-action predicted objectives (features.action_tables)
    cut_conditioned: bool = False  # bdq: node branches conditioned on the chosen cut (autoregressive branches)
    torso: list[int] = field(default_factory=lambda: [256, 256])
    head_hidden: int = 128
    max_grad_norm: float = 10.0
    # PPO
    rollout_len: int = 64
    epochs: int = 4
    minibatches: int = 4
    clip_eps: float = 0.2
    gae_lambda: float = 0.95
    ent_coef: float = 0.01
    vf_coef: float = 0.5
    # ppo_scorer: candidate actions scored, behaviour-cloning warm start onto myopic
    top_k: int = 16
    bc_steps: int = 0
    bc_lr: float = 1e-3
    # lookahead planner: candidates tried, sampled futures per candidate, future jobs per future
    plan_candidates: int = 4
    plan_rollouts: int = 4
    plan_horizon: int = 4

    def __post_init__(self) -> None:
        if self.kind not in (*HEURISTICS, *AGENTS):
            raise ValueError(f"policy {self.name!r}: unknown kind {self.kind!r}")
        _positive(f"policy {self.name!r}", lr=self.lr, batch_size=self.batch_size, buffer_size=self.buffer_size,
                  target_period=self.target_period, rollout_len=self.rollout_len, epochs=self.epochs,
                  minibatches=self.minibatches, top_k=self.top_k, bc_lr=self.bc_lr,
                  plan_candidates=self.plan_candidates, plan_rollouts=self.plan_rollouts,
                  plan_horizon=self.plan_horizon)
        _positive(f"policy {self.name!r}", updates_per_iter=self.updates_per_iter, n_step=self.n_step)
        if self.explore not in EXPLORE:
            raise ValueError(f"policy {self.name!r}: explore must be one of {EXPLORE}, got {self.explore!r}")
        _positive(f"policy {self.name!r}", temperature=self.temperature)
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"policy {self.name!r}: lr_schedule must be one of {LR_SCHEDULES}, "
                             f"got {self.lr_schedule!r}")
        if not 0 <= self.lr_end <= 1:
            raise ValueError(f"policy {self.name!r}: lr_end must be in [0, 1], got {self.lr_end}")
        _positive(f"policy {self.name!r}", adam_eps=self.adam_eps)
        if not 0 <= self.policy_tau <= 1:
            raise ValueError(f"policy {self.name!r}: policy_tau must be in [0, 1], got {self.policy_tau}")
        if self.policy_tau > 0 and self.act_on_target:
            raise ValueError(f"policy {self.name!r}: the greedy policy reads either the target network "
                             f"(act_on_target) or its own average (policy_tau > 0), not both")
        for flag in ("act_on_target", "keep_best"):
            if not isinstance(getattr(self, flag), bool):
                raise ValueError(f"policy {self.name!r}: {flag} must be true or false, got {getattr(self, flag)!r}")
        if not 0 <= self.target_tau <= 1:
            raise ValueError(f"policy {self.name!r}: target_tau must be in [0, 1], got {self.target_tau}")
        if self.bc_steps < 0:
            raise ValueError(f"policy {self.name!r}: bc_steps must be >= 0")
        if not 0 <= self.gamma < 1:
            raise ValueError(f"policy {self.name!r}: gamma must be in [0, 1), got {self.gamma}")
        if not 0 <= self.eps_end <= self.eps_start <= 1:
            raise ValueError(f"policy {self.name!r}: need 0 <= eps_end <= eps_start <= 1")


@dataclass
class Scenario:
    """A city (edge sites, its grid) and the region of its cloud data centre (green-dcc region names)."""

    name: str = MISSING
    city: str = MISSING
    cloud: str = MISSING
    utc_offset_h: int = 0  # for the time-of-day feature and the per-hour plot (standard time)


@dataclass
class Regime:
    """The network and load regime the scenarios run in [ours], on top of the hardware config: WAN bandwidth x
    ``wan_scale``, one FIFO uplink and downlink per edge site when ``link_fifo`` (transfers wait for each other), and
    the job arrival rate x ``load``. The reward normalisers stay those of the hardware as configured (the regime with
    scale 1, no FIFO links), so objectives are in the same unit in every regime. Rows carry ``regime = name``."""

    name: str = "uncontended"
    wan_scale: float = 1.0
    link_fifo: bool = False
    load: float = 1.0

    def __post_init__(self) -> None:
        _positive(f"regime {self.name!r}", wan_scale=self.wan_scale, load=self.load)
        if not isinstance(self.link_fifo, bool):
            raise ValueError(f"regime {self.name!r}: link_fifo must be true or false, got {self.link_fifo!r}")


@dataclass
class PlacementParams:
    """Parameters shared by the greenplace experiments (see conf/experiment/greenplace/*.yaml)."""

    scenarios: list[Scenario] = field(default_factory=list)
    train_year: int = 2022
    eval_year: int = 2023
    models: list[str] = field(default_factory=lambda: list(MODELS))
    model_probs: list[float] = field(default_factory=lambda: [0.25, 0.25, 0.25, 0.25])
    batch_min: int = 30  # frames per job (log-uniform)
    batch_max: int = 900
    jobs_per_hour: float = 360.0  # mean arrival rate, shaped by the building-load profile
    w_energy: list[float] = field(default_factory=lambda: [0.5])  # reward weights (one agent per weight)
    reward_clip: float = 10.0
    reward_scale: str = "clip"  # each reward term: "clip" at +-reward_clip, or "symlog" (sign(x) log(1 + |x|))
    reject_penalty: float = 5.0
    episode_jobs: int = 256
    train_iterations: int = 2000  # replay agents (bdq, flat_dqn): iterations x environments
    train_envs: int = 16
    onpolicy_iterations: int = 2048  # on-policy agents (ppo, ppo_scorer): steps per environment (PureJaxRL-style)
    onpolicy_envs: int = 256
    eval_episodes: int = 24
    eval_jobs: int = 512
    curve_episodes: int = 8  # training-year episodes scoring the learning curve and the training gates
    curve_jobs: int = 256
    latency_seed: int = 0  # split of the latency tables into fit / held-out rows
    headroom: dict[str, list[float]] = field(default_factory=dict)  # knob -> values (scenario.KNOBS)
    regime: Regime = field(default_factory=Regime)
    # policy name -> the scenario names it runs in (a policy not listed runs in every scenario): secondary agents
    # in fewer regions than the method
    policy_scenarios: dict[str, list[str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = [m for m in self.models if m not in MODELS]
        if unknown:
            raise ValueError(f"unknown models {unknown}; known {MODELS}")
        if len(self.model_probs) != len(self.models) or min(self.model_probs, default=0) < 0 \
                or sum(self.model_probs) <= 0:
            raise ValueError("model_probs needs one non-negative weight per model, not all zero")
        if not 1 <= self.batch_min <= self.batch_max:
            raise ValueError(f"need 1 <= batch_min <= batch_max, got {self.batch_min}, {self.batch_max}")
        if not all(0.0 <= w <= 1.0 for w in self.w_energy) or not self.w_energy:
            raise ValueError(f"w_energy values must be in [0, 1], got {self.w_energy}")
        _positive("params", jobs_per_hour=self.jobs_per_hour,
                  episode_jobs=self.episode_jobs, train_envs=self.train_envs,
                  onpolicy_iterations=self.onpolicy_iterations, onpolicy_envs=self.onpolicy_envs,
                  eval_episodes=self.eval_episodes,
                  eval_jobs=self.eval_jobs, reward_clip=self.reward_clip, curve_episodes=self.curve_episodes,
                  curve_jobs=self.curve_jobs)
        if self.train_iterations < 0:
            raise ValueError("train_iterations must be >= 0")
        knobs = ("price_spread", "green_scale", "wan_scale", "load", "contended_load")
        bad = [k for k in self.headroom if k not in knobs]
        if bad:
            raise ValueError(f"unknown headroom knobs {bad}; known {', '.join(knobs)}")
        if self.reward_scale not in REWARD_SCALES:
            raise ValueError(f"reward_scale must be one of {REWARD_SCALES}, got {self.reward_scale!r}")
        names = {s.name for s in self.scenarios}
        bad = {k: v for k, v in self.policy_scenarios.items() if not set(v) <= names}
        if bad:
            raise ValueError(f"policy_scenarios names scenarios that are not in scenarios {sorted(names)}: {bad}")
        if self.train_year == self.eval_year:
            raise ValueError("train_year and eval_year must differ (evaluation is on unseen data)")


register_schema("hardware", "edge_cloud", EdgeCloudHardware)
register_schema("policy", "greenplace", PlacementPolicy)
