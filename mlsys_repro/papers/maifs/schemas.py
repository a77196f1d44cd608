"""Config schemas of the MAIFS reproduction (registered in Hydra's ConfigStore; value checks in __post_init__)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mlsys_repro.common.repro.schema import BaseHardware, BasePolicy, register_schema
from mlsys_repro.common.sim.cluster import ClusterSpec


@dataclass
class GpuClusterHardware(BaseHardware):
    """A simulated GPU cluster: ``racks x servers_per_rack`` identical servers, or the nodes of a node list.

    With ``node_list`` (a CSV under ``data/`` with ``sn,cpu_milli,memory_mib,gpu,model``) the servers are the
    nodes with at least ``node_min_gpus`` GPUs, ``num_servers`` of them evenly spaced through the list (0 = all);
    ``servers_per_rack`` groups them into racks.
    """

    kind: str = "gpu_cluster"
    racks: int = 1
    servers_per_rack: int = 16
    gpus_per_server: int = 8
    cpus_per_server: float = 24.0
    mem_gb_per_server: float = 500.0
    lease_s: float = 300.0
    node_list: str = ""
    node_min_gpus: int = 1
    num_servers: int = 0

    def __post_init__(self) -> None:
        if self.kind != "gpu_cluster":
            raise ValueError(f"hardware.kind must be 'gpu_cluster', got {self.kind!r}")
        if min(self.racks, self.servers_per_rack, self.gpus_per_server) < 1:
            raise ValueError("racks, servers_per_rack and gpus_per_server must be >= 1")
        if self.cpus_per_server <= 0 or self.mem_gb_per_server <= 0 or self.lease_s <= 0:
            raise ValueError("cpus_per_server, mem_gb_per_server and lease_s must be > 0")
        if self.num_servers < 0 or self.node_min_gpus < 1:
            raise ValueError("num_servers must be >= 0 and node_min_gpus >= 1")

    def spec(self, data_dir: str | Path) -> ClusterSpec:
        if not self.node_list:
            return ClusterSpec.uniform(self.racks, self.servers_per_rack, self.gpus_per_server,
                                       self.cpus_per_server, self.mem_gb_per_server, self.name)
        from mlsys_repro.common.traces._io import resolve
        from mlsys_repro.common.traces.gpu import load_alibaba_nodes

        nodes = load_alibaba_nodes(resolve(data_dir, self.node_list))
        idx = np.flatnonzero(nodes.gpus >= self.node_min_gpus)
        if idx.size == 0:
            raise ValueError(f"{self.node_list}: no node has >= {self.node_min_gpus} GPUs")
        if self.num_servers:
            if self.num_servers > idx.size:
                raise ValueError(f"{self.node_list}: {idx.size} eligible nodes < num_servers={self.num_servers}")
            idx = idx[np.linspace(0, idx.size - 1, self.num_servers).round().astype(int)]
        return ClusterSpec.from_servers(nodes.gpus[idx], nodes.cpu_milli[idx] / 1000.0,
                                        nodes.memory_mib[idx] / 1024.0,
                                        np.arange(idx.size) // self.servers_per_rack, self.name)


ORDERS = ("fifo", "srtf", "las", "tiresias", "drf", "tetris")
ALLOCATIONS = ("fair", "greedy", "tune")
MAX_QUEUES = 4  # Tiresias thresholds are padded to MAX_QUEUES - 1 (unused = +inf)


def check_heuristic(order: str, allocation: str, thresholds_gpu_h, starvation_factor: float,
                    tetris_epsilon: float) -> tuple[float, ...]:
    """Validate a heuristic scheduler's settings (the one check for configs and for
    :class:`mlsys_repro.papers.maifs.baselines.Heuristic`); returns the thresholds as a tuple of floats."""
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if allocation not in ALLOCATIONS:
        raise ValueError(f"allocation must be one of {ALLOCATIONS}, got {allocation!r}")
    th = tuple(float(x) for x in thresholds_gpu_h)
    if len(th) >= MAX_QUEUES or any(b <= a for a, b in zip(th, th[1:], strict=False)) or any(x <= 0 for x in th):
        raise ValueError(f"tiresias_thresholds_gpu_h: at most {MAX_QUEUES - 1} positive increasing values")
    if starvation_factor < 0 or tetris_epsilon < 0:
        raise ValueError("starvation_factor and tetris_epsilon must be >= 0")
    return th


@dataclass
class HeuristicPolicy(BasePolicy):
    """A baseline scheduler (see mlsys_repro/papers/maifs/baselines.py)."""

    kind: str = "heuristic"
    order: str = "fifo"
    allocation: str = "fair"
    preemptive: bool = True
    tiresias_thresholds_gpu_h: list[float] = field(default_factory=lambda: [1.0, 10.0])
    starvation_factor: float = 0.0
    tetris_epsilon: float = 1.0

    def __post_init__(self) -> None:
        if self.kind != "heuristic":
            raise ValueError(f"policy.kind must be 'heuristic', got {self.kind!r}")
        check_heuristic(self.order, self.allocation, self.tiresias_thresholds_gpu_h, self.starvation_factor,
                        self.tetris_epsilon)


WARM_STARTS = ("bc", "prior", "none")
CREDITS = ("team", "counterfactual")


@dataclass
class RLPolicy(BasePolicy):
    """A learned scheduler: MAIFS (``network: maifs``, with its ablation switches) or the single-agent DL2-style
    baseline (``network: flat``). Training budgets are experiment params (they scale with the profile).

    The recipe's switches [ours, from the scheduling-RL literature; mlsys_repro/papers/maifs/train.py]:
    ``warm_start`` ``bc`` (behaviour-clone Synergy-tune SRTF in MAIFS's action space, then PPO), ``prior`` (a fixed
    SRTF logit prior of strength ``prior_beta`` added to the network; the recipe before the clone) or ``none``
    (cold start); ``credit`` ``counterfactual`` (per-agent advantages from a COMA-style counterfactual critic,
    ``cf_lambda``) or ``team``; ``adv_clip`` clips the normalised advantage."""

    kind: str = "rl"
    network: str = "maifs"
    attention: bool = True
    coordination: bool = True
    fungible: bool = True
    hidden: int = 32
    lr: float = 1e-3
    gamma: float = 0.99
    gae_lambda: float = 0.95  # unused by the episodic update (Monte-Carlo returns with an input-dependent baseline)
    clip_eps: float = 0.2
    ent_coef: float = 0.001  # annealed linearly to 0 over training
    epochs: int = 4
    minibatches: int = 4
    # warm start [ours]: bc = the network is first trained by cross-entropy on Synergy-tune SRTF's joint actions in
    # MAIFS's action space (model.srtf_teacher; bc_rounds teacher batches, an experiment param) with bc_epochs x
    # minibatches steps per batch at bc_lr; every learned family gets the same teacher
    warm_start: str = "bc"
    bc_epochs: int = 4
    bc_lr: float = 1e-2
    # DAgger (Ross et al., 2011): this share of every cloning batch after the first is driven by the clone so far
    # (greedy) and each of its agents' decisions relabelled with the teacher's where that agent stood, so the clone
    # also learns on the states its own mistakes lead to; 0 = plain behaviour cloning on teacher episodes
    bc_dagger: float = 0.0
    # warm_start prior: the pick prior -prior_beta * (log1p(remaining h) - its least) on pending candidates and
    # -prior_beta on releases (model.srtf_prior), fixed in the network (20 made its greedy policy SRTF's); 0 otherwise
    prior_beta: float = 0.0
    # per-agent credit: counterfactual (COMA-style critic Q_i(s, a_<i, a); advantage (1 - cf_lambda) A_team +
    # cf_lambda Q_i(a_i) - E_pi Q_i) or team (A_team broadcast to every agent)
    credit: str = "counterfactual"
    cf_lambda: float = 0.5
    adv_clip: float = 5.0  # the normalised team advantage is clipped at +-adv_clip
    # evaluate the network at its initial parameters (same architecture and seeds as the trained policy
    # ``untrained_of``): isolates what training adds to the hand-designed structure (masks, priors, fallbacks)
    untrained: bool = False
    untrained_of: str = ""

    def __post_init__(self) -> None:
        if self.untrained and not self.untrained_of:
            raise ValueError("an untrained policy must name the trained policy it mirrors (untrained_of)")
        if self.kind != "rl":
            raise ValueError(f"policy.kind must be 'rl', got {self.kind!r}")
        if self.network not in ("maifs", "flat"):
            raise ValueError(f"network must be 'maifs' or 'flat', got {self.network!r}")
        if self.network == "flat" and (self.attention or self.coordination):
            raise ValueError("the flat single-agent network has no attention or coordination graph")
        if self.hidden < 1 or self.lr <= 0 or not 0 < self.gamma <= 1 or not 0 <= self.gae_lambda <= 1:
            raise ValueError("need hidden >= 1, lr > 0, 0 < gamma <= 1, 0 <= gae_lambda <= 1")
        if self.warm_start not in WARM_STARTS:
            raise ValueError(f"warm_start must be one of {WARM_STARTS}, got {self.warm_start!r}")
        if self.prior_beta < 0 or (self.prior_beta > 0) != (self.warm_start == "prior"):
            raise ValueError("prior_beta must be > 0 with warm_start 'prior' and 0 otherwise")
        if self.credit not in CREDITS:
            raise ValueError(f"credit must be one of {CREDITS}, got {self.credit!r}")
        if not 0 <= self.cf_lambda <= 1 or self.adv_clip <= 0 or self.bc_epochs < 1 or self.bc_lr <= 0:
            raise ValueError("need 0 <= cf_lambda <= 1, adv_clip > 0, bc_epochs >= 1 and bc_lr > 0")
        if not 0 <= self.bc_dagger <= 1:
            raise ValueError(f"bc_dagger must be in [0, 1], got {self.bc_dagger}")

    def hyper(self) -> tuple:
        """The training hyper-parameters that must agree between variants trained together (``warm_start`` and
        the ablation switches are per-run, traced)."""
        return (self.hidden, self.lr, self.gamma, self.gae_lambda, self.clip_eps, self.ent_coef, self.epochs,
                self.minibatches, self.prior_beta, self.credit, self.cf_lambda, self.adv_clip, self.bc_epochs,
                self.bc_lr, self.bc_dagger)


@dataclass
class MaifsParams:
    """Workloads, training budget and environment knobs shared by the MAIFS experiments."""

    # contended workloads [ours]: arrivals scaled to an offered load (fraction of the cluster's GPU capacity),
    # fair-share durations capped so that no single job sets a window's makespan
    load: float = 0.9  # the headline regime
    loads: list[float] = field(default_factory=list)  # load sweep (the claim-boundary map)
    train_loads: list[float] = field(default_factory=lambda: [0.7, 0.9, 1.1])  # training windows cycle these
    cap_duration_h: float = 2.0  # 0 = uncapped
    # heavy-tail sensitivity (experiment ``heavy_tail``): the evaluation windows with durations capped at each of
    # these (0 = uncapped); learned policies are the ones trained at ``cap_duration_h``
    tail_caps_h: list[float] = field(default_factory=list)
    eval_windows: int = 30  # Philly evaluation windows (every seed is evaluated on all of them)
    saturn_parts: int = 4  # each Saturn workload file is cut into this many consecutive windows
    # evaluation windows (Philly: the unseen later slice; Saturn: the held-out workload files); at most
    # jobs_per_window jobs per window
    jobs_per_window: int = 240
    eval_start: str = "2017-11-01"
    eval_end: str = "2017-12-22"
    class_split: list[float] = field(default_factory=lambda: [20.0, 70.0, 10.0])
    saturn_eval: list[str] = field(default_factory=lambda: [f"workload-{i}" for i in range(6, 11)])
    # training sets (one policy per trace): the earlier Philly slice; the other Saturn workload files
    train_start: str = "2017-09-04"
    train_end: str = "2017-11-01"
    train_windows: int = 60
    saturn_train: list[str] = field(default_factory=lambda: [f"workload-{i}" for i in range(1, 6)])
    num_updates: int = 100
    updates_per_chunk: int = 10
    bc_rounds: int = 4  # behaviour-cloning teacher batches (num_envs episodes each) before PPO, warm_start bc
    num_envs: int = 16
    rollout_len: int = 64  # decision steps per episode in training (longer episodes are cut and bootstrapped)
    paired: int = 4  # rollouts of each training window per update (the input-dependent baseline's group)
    # multi-agent environment
    servers_per_agent: int = 1
    num_candidates: int = 24
    num_short: int = 12  # of the candidates, chosen by least remaining work (the rest: oldest)
    num_running: int = 8  # running jobs per agent whose lease it may release (preemption as an action)
    conflict_blocks: bool = True  # a failed (conflicting) pick costs the agent the rest of the round
    # checkpoint-restore cost of a preemption [ours: 30-60 s is what restoring a DL job from a checkpoint takes; the low
    # end, so a round-robin scheduler (LAS) at its slowest placement still progresses between restores],
    # charged to every scheduler alike (s of fair-share work per net preemption)
    restore_s: float = 30.0
    max_substeps: int = 16
    makespan_weight: float = 2.0
    reward_scale: float = 100.0
    # heuristics: pending jobs tried per round (= num_candidates: the same queue visibility as MAIFS)
    lookahead: int = 24
    # validity gates of learned policies
    check_windows: int = 16  # training windows on which the trained network and its prior are compared
    curve_windows: int = 4  # the first training windows on which the learning curve (greedy JCT) is evaluated
    converge_tol: float = 0.05  # converged: last-fifth improvement of training JCT over the previous fifth below
    beats_margin: float = 0.01  # beats_prior: JCT at least this fraction below the network at its initialisation
    # PPO tuning (experiment ``tuning``): every learned family trains at each (lr, ent_coef) of one shared grid on
    # seeds ``seed + tuning_seed_offset ..``, disjoint from the reported seeds; the pick is the lowest greedy JCT
    # on the check (training) windows
    tune_lr: list[float] = field(default_factory=list)
    tune_ent_coef: list[float] = field(default_factory=list)
    tuning_seed_offset: int = 1000

    def __post_init__(self) -> None:
        positive = ("jobs_per_window", "train_windows", "num_updates",
                    "updates_per_chunk", "num_envs", "rollout_len", "servers_per_agent", "num_candidates",
                    "max_substeps", "reward_scale", "lookahead")
        for k in positive:
            if getattr(self, k) <= 0:
                raise ValueError(f"params.{k} must be > 0, got {getattr(self, k)}")
        if self.num_updates % self.updates_per_chunk:
            raise ValueError("params.num_updates must be a multiple of params.updates_per_chunk")
        if len(self.class_split) != 3 or min(self.class_split) < 0 or sum(self.class_split) <= 0:
            raise ValueError("params.class_split needs 3 non-negative weights (image, language, speech)")
        if self.load <= 0 or any(x <= 0 for x in self.loads) or not self.train_loads or any(
                x <= 0 for x in self.train_loads):
            raise ValueError("params.load, params.loads and params.train_loads must be positive")
        if self.cap_duration_h < 0 or any(x < 0 for x in self.tail_caps_h) or self.eval_windows < 1 \
                or self.saturn_parts < 1 or self.check_windows < 1 or self.curve_windows < 1 or self.bc_rounds < 0:
            raise ValueError("need cap_duration_h, tail_caps_h, bc_rounds >= 0 and eval_windows, saturn_parts, "
                             "check_windows, curve_windows >= 1")
        if not 0 <= self.num_short <= self.num_candidates or self.num_running < 0:
            raise ValueError("need 0 <= num_short <= num_candidates and num_running >= 0")
        if set(self.saturn_eval) & set(self.saturn_train):
            raise ValueError("params.saturn_eval and params.saturn_train must not overlap (held-out evaluation)")
        if self.makespan_weight < 0 or self.restore_s < 0:
            raise ValueError("params.makespan_weight and params.restore_s must be >= 0")
        if self.paired < 2 or self.num_envs % self.paired:
            raise ValueError("params.paired must be >= 2 and divide params.num_envs")
        if any(x <= 0 for x in self.tune_lr) or any(x < 0 for x in self.tune_ent_coef):
            raise ValueError("params.tune_lr must be positive and params.tune_ent_coef non-negative")
        if self.tuning_seed_offset < 0:
            raise ValueError("params.tuning_seed_offset must be >= 0")


register_schema("hardware", "gpu_cluster", GpuClusterHardware)
register_schema("policy", "maifs_heuristic", HeuristicPolicy)
register_schema("policy", "maifs_rl", RLPolicy)

__all__ = ["ALLOCATIONS", "CREDITS", "MAX_QUEUES", "ORDERS", "WARM_STARTS", "GpuClusterHardware", "HeuristicPolicy",
           "MaifsParams", "RLPolicy", "check_heuristic"]
