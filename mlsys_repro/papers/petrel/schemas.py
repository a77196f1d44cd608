"""Config schemas of the Petrel reproduction: the simulated PS cluster, the synchronisation policies, the A3C
agent and the experiment parameters. Value checks run at compose time (``__post_init__``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from omegaconf import MISSING

from mlsys_repro.common.repro.schema import BaseHardware, BasePolicy, register_schema

POLICY_KINDS = ("bsp", "asp", "ssp", "dssp", "casp", "hier_bsp")
GROUPINGS = ("a3c", "kmeans", "prior", "random", "index")
HIER_GROUPINGS = ("index", "random")  # hier_bsp groups never look at speeds
ENGINE_MODES = ("vmap", "map")


def _positive(name: str, x: float) -> None:
    if not (isinstance(x, (int, float)) and math.isfinite(x) and x > 0):
        raise ValueError(f"{name} must be a finite number > 0, got {x!r}")


def _prob(name: str, x: float) -> None:
    if not (0.0 <= x <= 1.0):
        raise ValueError(f"{name} must be a probability in [0, 1], got {x!r}")


@dataclass
class PSClusterHardware(BaseHardware):
    """A heterogeneous parameter-server cluster: N workers in speed classes, a PS tier of ``ps_shards`` servers,
    FIFO NICs.

    One iteration of worker ``w`` takes ``base_step_s / class_speeds[class(w)]`` seconds, times per-iteration
    log-normal noise, a transient straggler slowdown and a persistent regime (see
    :mod:`mlsys_repro.papers.petrel.hardware`). ``prior_communities`` is the number of similarity groups known before
    training (e.g. GPU types); it is how CASP forms its first communities and the community count of the fixed-community
    ablation.

    [ours, issue #50] ``ps_shards`` = S parameter servers, each holding 1/S of the parameter vector behind its own
    NIC of ``ps_bandwidth_gbps``: every PS-tier message is split evenly over the S NICs (S = 1: a single PS
    NIC). ``permute_speeds_at_steps`` (None: never) makes the cluster non-stationary: at that simulated time (in
    units of ``base_step_s``) the workers' speed classes are permuted by a seeded permutation, so any partition
    fixed at the start groups mismatched speeds afterwards (see :mod:`mlsys_repro.papers.petrel.hardware`).
    """

    kind: str = "ps_cluster"
    num_workers: int = 16
    class_speeds: list[float] = field(default_factory=lambda: [1.0, 0.5, 0.25, 0.125])
    class_names: list[str] = field(default_factory=list)
    class_fractions: list[float] = field(default_factory=list)  # empty: equal shares
    prior_communities: int = 0  # 0: one community per speed class
    base_step_s: float = 0.01
    base_batch: int = 32  # base_step_s is one iteration at this per-worker batch; time scales linearly with batch
    noise_sigma: float = 0.03
    straggler_prob: float = 0.002
    straggler_slowdown: float = 2.0
    regime_shift_prob: float = 0.0002
    regime_shift_factor: float = 2.3
    ps_bandwidth_gbps: float = 1.0  # per PS NIC (each of the ps_shards servers has one)
    ps_shards: int = 1  # [ours] parameter servers the parameters are split over evenly; 1 = one PS NIC
    permute_speeds_at_steps: float | None = None  # [ours] permute the speed classes at this time (base steps)
    worker_bandwidth_gbps: float = 1.0
    latency_us: float = 50.0
    header_bytes: int = 64
    # bytes of one gradient / parameter message without header; 0 = the proxy model's float32 size. A realistic
    # model's payload (mlsys_repro.common.timing, e.g. ResNet-50 = 102,228,128 B) makes the network see that model.
    payload_bytes: int = 0
    workload: str = ""  # the model whose payload_bytes and base_step_s these are (mlsys_repro.common.timing.MODELS key)

    def __post_init__(self) -> None:
        if self.kind != "ps_cluster":
            raise ValueError(f"hardware.kind must be 'ps_cluster', got {self.kind!r}")
        if self.num_workers < 1:
            raise ValueError(f"hardware.num_workers must be >= 1, got {self.num_workers}")
        if not self.class_speeds:
            raise ValueError("hardware.class_speeds must list at least one speed class")
        for i, s in enumerate(self.class_speeds):
            _positive(f"hardware.class_speeds[{i}] (relative speed; zero would never finish)", s)
        if self.class_names and len(self.class_names) != len(self.class_speeds):
            raise ValueError(f"hardware.class_names has {len(self.class_names)} entries for "
                             f"{len(self.class_speeds)} speed classes")
        if self.class_fractions:
            if len(self.class_fractions) != len(self.class_speeds):
                raise ValueError(f"hardware.class_fractions has {len(self.class_fractions)} entries for "
                                 f"{len(self.class_speeds)} speed classes")
            if any(f < 0 for f in self.class_fractions) or not math.isclose(sum(self.class_fractions), 1.0,
                                                                           abs_tol=1e-6):
                raise ValueError(f"hardware.class_fractions must be >= 0 and sum to 1, got {self.class_fractions}")
        if self.prior_communities < 0:
            raise ValueError(f"hardware.prior_communities must be >= 0, got {self.prior_communities}")
        if self.communities() > self.num_workers:
            raise ValueError(f"hardware: {self.communities()} prior communities for {self.num_workers} workers "
                             "(more communities than workers)")
        _positive("hardware.base_step_s", self.base_step_s)
        if self.base_batch < 1:
            raise ValueError(f"hardware.base_batch must be >= 1, got {self.base_batch}")
        if not (0 <= self.noise_sigma < 2):
            raise ValueError(f"hardware.noise_sigma must be in [0, 2), got {self.noise_sigma}")
        _prob("hardware.straggler_prob", self.straggler_prob)
        _prob("hardware.regime_shift_prob", self.regime_shift_prob)
        if self.straggler_slowdown < 1 or self.regime_shift_factor < 1:
            raise ValueError("hardware.straggler_slowdown and hardware.regime_shift_factor must be >= 1, got "
                             f"{self.straggler_slowdown} and {self.regime_shift_factor}")
        _positive("hardware.ps_bandwidth_gbps", self.ps_bandwidth_gbps)
        if not (isinstance(self.ps_shards, int) and self.ps_shards >= 1):
            raise ValueError(f"hardware.ps_shards must be an integer >= 1 (parameter servers), got {self.ps_shards!r}")
        if self.permute_speeds_at_steps is not None and not (math.isfinite(self.permute_speeds_at_steps)
                                                             and self.permute_speeds_at_steps >= 0):
            raise ValueError("hardware.permute_speeds_at_steps must be None (never) or a time >= 0 in base steps, "
                             f"got {self.permute_speeds_at_steps!r}")
        _positive("hardware.worker_bandwidth_gbps", self.worker_bandwidth_gbps)
        if not (math.isfinite(self.latency_us) and self.latency_us >= 0):
            raise ValueError(f"hardware.latency_us must be >= 0, got {self.latency_us}")
        if self.payload_bytes < 0:
            raise ValueError(f"hardware.payload_bytes must be >= 0 (0: the proxy's size), got {self.payload_bytes}")
        if self.header_bytes < 0:
            raise ValueError(f"hardware.header_bytes must be >= 0, got {self.header_bytes}")

    def communities(self) -> int:
        return self.prior_communities or len(self.class_speeds)


@dataclass
class A3CConfig:
    """The A3C agent that picks the number of communities online (see mlsys_repro/papers/petrel/README.md)."""

    actors: int = 16  # actor-learners whose simulations run side by side
    episodes: int = 504  # total over all actors (21 chunks of the 24 training conditions)
    episode_decisions: int = 6
    t_max: int = 3
    hidden: int = 64
    lr: float = 0.001
    gamma: float = 0.9
    entropy_coef: float = 0.01
    value_coef: float = 0.25
    rmsprop_decay: float = 0.99
    rmsprop_eps: float = 0.1
    grad_clip: float = 40.0
    reward_scale: float = 5.0
    bytes_penalty: float = 0.0
    train_workers: list[int] = field(default_factory=lambda: [8, 16])
    train_speed_ratios: list[float] = field(default_factory=lambda: [1.0, 2.0, 4.0, 8.0])
    train_link_gbps: list[float] = field(default_factory=list)  # link rates trained on (empty: the hardware's)
    seed: int = 100_000  # training seeds are seed, seed+1, ... (disjoint from evaluation seeds)
    # [ours, #50] one agent per evaluation seed s, trained on its own stream seed + 10,000 s (a3c.AGENT_SEED_STRIDE),
    # so the CIs over seeds include training variance; False: one agent (stream seed) shared by every seed
    per_seed: bool = False
    # True: an episode cut off by the horizon bootstraps its last n-step return from the value of its last state;
    # False: the episode end is terminal (returns are sums of the episode's remaining rewards)
    bootstrap_at_end: bool = True

    def __post_init__(self) -> None:
        for k in ("actors", "episodes", "episode_decisions", "t_max", "hidden"):
            if getattr(self, k) < 1:
                raise ValueError(f"a3c.{k} must be >= 1, got {getattr(self, k)}")
        if self.episodes > 5_000:  # a3c.EVAL_SEED_OFFSET: training and greedy evaluation seeds must not overlap
            raise ValueError(f"a3c.episodes must be <= 5000 (the greedy evaluation seed offset), got {self.episodes}")
        _positive("a3c.lr", self.lr)
        if not (0 <= self.gamma <= 1):
            raise ValueError(f"a3c.gamma must be in [0, 1], got {self.gamma}")
        if self.entropy_coef < 0 or self.value_coef < 0 or self.bytes_penalty < 0:
            raise ValueError("a3c.entropy_coef, value_coef and bytes_penalty must be >= 0")
        if not self.train_workers or min(self.train_workers) < 1:
            raise ValueError(f"a3c.train_workers must be a non-empty list of counts >= 1, got {self.train_workers}")
        if any(g <= 0 for g in self.train_link_gbps):
            raise ValueError(f"a3c.train_link_gbps must be > 0, got {self.train_link_gbps}")
        if not self.train_speed_ratios or min(self.train_speed_ratios) < 1:
            raise ValueError(f"a3c.train_speed_ratios must be >= 1, got {self.train_speed_ratios}")


@dataclass
class SyncPolicy(BasePolicy):
    """A synchronisation mechanism.

    kind: ``bsp`` (barrier over all workers), ``asp`` (apply on arrival), ``ssp`` (clock gap <= ``staleness``),
    ``dssp`` (gap in [staleness_low, staleness_high], chosen per push by DSSP's controller), ``casp``
    (communities: synchronous inside, asynchronous across; ``grouping`` says how communities are formed),
    ``hier_bsp`` ([ours] BSP over all workers with its gradients aggregated in ``num_communities`` fixed groups, each
    at its first worker: ``grouping`` ``index`` = contiguous blocks of worker indices, ``random`` = a seeded random
    partition; speeds are never looked at).
    """

    kind: str = MISSING
    staleness: int = 0
    staleness_low: int = 2
    staleness_high: int = 8
    grouping: str = "a3c"
    num_communities: int = 0  # kmeans/random: fixed k; 0 = the hardware's prior community count
    regroup: bool = True  # re-form communities at every decision (from measured speeds)
    action_levels: int = 9  # a3c action space: k = round(N^(a / (levels - 1))), a = 0..levels-1 (1..N)
    decision_every_steps: float = 50.0  # decision interval, in units of hardware.base_step_s
    ewma_alpha: float = 0.2  # weight of the newest iteration time in each worker's speed estimate
    a3c: A3CConfig = field(default_factory=A3CConfig)

    def __post_init__(self) -> None:
        if self.kind not in POLICY_KINDS:
            raise ValueError(f"policy.kind must be one of {POLICY_KINDS}, got {self.kind!r}")
        if self.staleness < 0:
            raise ValueError(f"policy.staleness must be >= 0, got {self.staleness}")
        if not (0 <= self.staleness_low <= self.staleness_high):
            raise ValueError(f"policy: need 0 <= staleness_low <= staleness_high, got "
                             f"{self.staleness_low}, {self.staleness_high}")
        if self.grouping not in GROUPINGS:
            raise ValueError(f"policy.grouping must be one of {GROUPINGS}, got {self.grouping!r}")
        if self.kind == "hier_bsp" and self.grouping not in HIER_GROUPINGS:
            raise ValueError(f"policy.grouping must be one of {HIER_GROUPINGS} for kind hier_bsp (its groups ignore "
                             f"speeds), got {self.grouping!r}")
        if self.kind != "hier_bsp" and self.grouping == "index":
            raise ValueError(f"policy.grouping 'index' is only for kind hier_bsp, got kind {self.kind!r}")
        if self.num_communities < 0 or self.action_levels < 2:
            raise ValueError("policy.num_communities must be >= 0 and policy.action_levels >= 2 (k = 1 and k = N)")
        _positive("policy.decision_every_steps", self.decision_every_steps)
        if not (0 < self.ewma_alpha <= 1):
            raise ValueError(f"policy.ewma_alpha must be in (0, 1], got {self.ewma_alpha}")


@dataclass
class PetrelParams:
    """Training task, stopping rule and sweep of one experiment (``max_steps`` in units of hardware.base_step_s)."""

    dataset: str = "mnist"
    model: str = "mlp"
    hidden: int = 32  # mlp width (mlsys_repro.common.models.small.MLP)
    global_batch: int = 512  # samples per BSP round; each of N workers computes on global_batch // N
    # the PS's optimiser: w <- w - (lr / N) * v, v <- momentum * v + sum(g) over the gradients of one apply (one
    # momentum step per apply: per push under ASP, per round under BSP; sim.ps_update); momentum 0: plain SGD,
    # w <- w - (lr / N) * sum(g). [ours, #50] momentum 0.9 (the production convention) makes staleness cost
    # iterations, as in the paper's field; lr 0.03 (effective step lr / (1 - momentum) = 0.3) was picked before the
    # regeneration from a smoke measurement (README, "What is the paper's, what is ours"); the plain proxy before
    # #50 was lr 0.2, momentum 0
    lr: float = 0.03
    momentum: float = 0.9
    target_accuracy: float = 0.95
    n_train: int = 0  # 0: the whole training split
    n_test: int = 2000
    probe_size: int = 512  # PS-side probe batch for the A3C state and reward
    eval_every_grads: int = 128  # test evaluation every this many applied gradients (and at t = 0)
    max_steps: float = 8000.0  # horizon of a run that does not reach the target
    engine_mode: str = "vmap"
    speed_ratios: list[float] = field(default_factory=list)  # sweep: slowest/fastest class speed (empty: as hw)
    worker_counts: list[int] = field(default_factory=list)  # sweep: N (empty: hardware.num_workers)
    a3c_episodes: int = 0  # overrides policy.a3c.episodes when > 0 (smoke profile)
    a3c_episode_decisions: int = 0  # overrides policy.a3c.episode_decisions when > 0 (smoke profile)
    curve_points: int = 40  # points per run kept for the accuracy/loss vs time curves
    link_gbps: list[float] = field(default_factory=list)  # sweep: every NIC's rate, Gb/s (empty: as hardware)
    ps_shards: list[int] = field(default_factory=list)  # sweep: parameter servers S (empty: hardware.ps_shards)
    # sweep: speed classes permuted at this time, in base steps (0: never; empty: as hardware)
    permute_at_steps: list[float] = field(default_factory=list)
    # best fixed k baseline: CASP with k-means communities for each k here (k <= N), run on the reported seeds and
    # on ``tuning_seeds`` seeds from ``tuning_seed_offset``; the k with the least mean time on the tuning seeds is
    # reported as ``casp_best_k`` (picked without looking at the reported seeds)
    fixed_k: list[int] = field(default_factory=list)
    tuning_seeds: int = 2
    tuning_seed_offset: int = 1000

    def __post_init__(self) -> None:
        if self.dataset not in ("mnist", "cifar10_jpeg"):
            raise ValueError(f"params.dataset must be mnist or cifar10_jpeg, got {self.dataset!r}")
        for k in ("hidden", "global_batch", "n_test", "probe_size", "curve_points"):
            if getattr(self, k) < 1:
                raise ValueError(f"params.{k} must be >= 1, got {getattr(self, k)}")
        _positive("params.lr", self.lr)
        if not (isinstance(self.momentum, (int, float)) and 0.0 <= self.momentum < 1.0):
            raise ValueError(f"params.momentum must be in [0, 1) (0: plain SGD), got {self.momentum!r}")
        if not (0 < self.target_accuracy <= 1):
            raise ValueError(f"params.target_accuracy must be in (0, 1], got {self.target_accuracy}")
        if self.eval_every_grads < 1:
            raise ValueError(f"params.eval_every_grads must be >= 1, got {self.eval_every_grads}")
        _positive("params.max_steps", self.max_steps)
        if self.engine_mode not in ENGINE_MODES:
            raise ValueError(f"params.engine_mode must be one of {ENGINE_MODES}, got {self.engine_mode!r}")
        if any(r < 1 for r in self.speed_ratios):
            raise ValueError(f"params.speed_ratios must be >= 1 (slowest/fastest), got {self.speed_ratios}")
        if any(not (isinstance(s, int) and s >= 1) for s in self.ps_shards):
            raise ValueError(f"params.ps_shards must be integers >= 1, got {self.ps_shards}")
        if any(not (math.isfinite(t) and t >= 0) for t in self.permute_at_steps):
            raise ValueError(f"params.permute_at_steps must be times >= 0 in base steps (0: never), got "
                             f"{self.permute_at_steps}")
        if any(g <= 0 for g in self.link_gbps):
            raise ValueError(f"params.link_gbps must be > 0, got {self.link_gbps}")
        if any(k < 1 for k in self.fixed_k) or self.tuning_seeds < 1:
            raise ValueError(f"params.fixed_k must be >= 1 and params.tuning_seeds >= 1, got {self.fixed_k}, "
                             f"{self.tuning_seeds}")
        if any(n < 1 for n in self.worker_counts):
            raise ValueError(f"params.worker_counts must be >= 1, got {self.worker_counts}")
        if any(self.global_batch < n for n in self.worker_counts):
            raise ValueError(f"params.global_batch {self.global_batch} is smaller than a worker count in "
                             f"{self.worker_counts} (each worker needs >= 1 sample)")

    def batch_per_worker(self, n: int) -> int:
        if self.global_batch < n:
            raise ValueError(f"global batch {self.global_batch} cannot feed {n} workers")
        return self.global_batch // n

    def grad_lr(self, n: int) -> float:
        return self.lr / n


register_schema("hardware", "ps_cluster", PSClusterHardware)
register_schema("policy", "petrel_sync", SyncPolicy)
