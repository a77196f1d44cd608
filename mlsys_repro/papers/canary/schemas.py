"""Config schemas of the Canary reproduction: the simulated cluster, the exchange policies, experiment params."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from mlsys_repro.common.repro.schema import BaseHardware, BasePolicy, register_schema
from mlsys_repro.papers.canary.protocols import PROTOCOLS

MODELS = ("mlp", "lenet", "cnn", "convnet")
DATASETS = ("mnist", "fashion_mnist", "cifar10_jpeg")


@dataclass
class BCubeCluster(BaseHardware):
    """BCube(n, k) servers (``n ** (k + 1)``, each with ``k + 1`` NICs) and the compute model of one worker.

    Single-NIC policies use one NIC per server on a non-blocking switch (what a Fat-Tree provides); the
    bandwidth of every NIC is ``nic_gbps`` unless an experiment sweeps it. Compute time per layer:
    ``flops * batch / (worker_tflops * 1e12) + kernel_overhead`` (backward ``backward_factor`` times the FLOPs
    and two kernels), plus ``iteration_overhead_ms`` per iteration (data loading, optimizer, framework).
    """

    kind: str = "bcube_cluster"
    bcube_n: int = 3
    bcube_k: int = 1
    nic_gbps: float = 10.0
    link_latency_us: float = 5.0
    header_bytes: int = 16
    worker_tflops: float = 4.0
    kernel_overhead_us: float = 20.0
    iteration_overhead_ms: float = 1.0
    backward_factor: float = 2.0
    # [ours] timing from a realistic model (mlsys_repro.common.timing.MODELS key, e.g. resnet50): the discrete-event
    # model sees its per-layer FLOPs and gradient bytes (proxy pieces mapped by fractional position) on `gpu`
    # (mlsys_repro.common.timing: Gavel-measured training rate; the calibrated rate includes kernel and iteration
    # overheads, so those above are then unused); empty: the trained proxy's own layers on worker_tflops
    workload: str = ""
    gpu: str = "p100"

    def __post_init__(self) -> None:
        from mlsys_repro.common.timing import GAVEL_RESNET50_STEPS_PER_S
        from mlsys_repro.common.timing import MODELS as TIMING_MODELS

        if self.workload and self.workload not in TIMING_MODELS:
            raise ValueError(f"hardware.workload must be one of {sorted(TIMING_MODELS)} or empty, "
                             f"got {self.workload!r}")
        if self.gpu not in GAVEL_RESNET50_STEPS_PER_S:
            raise ValueError(f"hardware.gpu must be one of {sorted(GAVEL_RESNET50_STEPS_PER_S)}, got {self.gpu!r}")
        if self.bcube_n < 2 or self.bcube_k < 0:
            raise ValueError(f"BCube needs bcube_n >= 2 and bcube_k >= 0, got {self.bcube_n}, {self.bcube_k}")
        for f in ("nic_gbps", "worker_tflops", "backward_factor"):
            if not getattr(self, f) > 0:
                raise ValueError(f"hardware.{f} must be > 0, got {getattr(self, f)}")
        for f in ("link_latency_us", "kernel_overhead_us", "iteration_overhead_ms", "header_bytes"):
            if getattr(self, f) < 0:
                raise ValueError(f"hardware.{f} must be >= 0, got {getattr(self, f)}")

    @property
    def num_servers(self) -> int:
        return self.bcube_n ** (self.bcube_k + 1)


@dataclass
class ExchangePolicy(BasePolicy):
    """A gradient-exchange scheme: Canary or a baseline (see mlsys_repro/papers/canary/protocols.py)."""

    protocol: str = "canary"
    sketch: bool = False
    staleness: int = 0
    multi_nic: bool = True
    pipeline: bool = True
    ako_partitions: int = 0  # 0: Ako's bandwidth rule
    local_first: bool = False  # [ours] async Canary: apply the own gradient at once, only remote pieces are stale
    overlap: bool = False  # [ours] BML with backward-pass pipelining: each colayer exchanged as soon as it is ready

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS:
            raise ValueError(f"policy.protocol must be one of {PROTOCOLS}, got {self.protocol!r}")
        if self.staleness < 0 or self.ako_partitions < 0:
            raise ValueError("policy.staleness and policy.ako_partitions must be >= 0")
        if self.local_first and (self.protocol != "canary" or self.staleness < 1):
            raise ValueError("policy.local_first needs protocol 'canary' with staleness >= 1")
        if self.sketch and self.protocol in ("bml", "ako"):
            raise ValueError(f"protocol {self.protocol!r} has no 8-bit variant")
        if self.overlap and (self.protocol != "bml" or not self.pipeline):
            raise ValueError("policy.overlap is BML's backward-pass pipelining: it needs protocol 'bml' and "
                             "pipeline: true")


@dataclass
class TrainParams:
    """Model, optimiser, exchange layout and sweep of the training experiments."""

    model: str = "mlp"
    n_train: int = 0  # 0: the whole training split
    n_test: int = 2000
    batch: int = 32
    iterations: int = 240
    eval_every: int = 10
    lr: float = 0.1
    momentum: float = 0.9
    target_acc: float = 0.94
    bandwidths_gbps: list[float] = field(default_factory=lambda: [1.0, 10.0, 25.0])
    colayer_bytes: int = 65536
    piece_elems: int = 16384
    des_max_simulated: int = 60  # synchronous protocols: simulate this many iterations, then the period
    # "policy:reference" pairs: report the per-seed final-accuracy drop of policy against reference (pp)
    accuracy_pairs: list[str] = field(default_factory=list)
    # per-policy optimiser {policy: [lr, momentum]} (the `optimiser_sweep` choice); unlisted policies use lr/momentum;
    # a key "policy@<gbps>" (e.g. "canary@1") overrides the policy's entry at that NIC rate
    optimiser: dict[str, list[float]] = field(default_factory=dict)
    # [ours] conditions: the workers' 8-bit sketch arithmetic rate, GB/s of fp32 input per quantise + dequantise round
    # trip (ComputeModel.sketch_bytes_per_s); 0 = free; rows carry `sketch_gbps`; fp32 policies do not depend on it
    sketch_gbps: list[float] = field(default_factory=lambda: [0.0])
    # per-policy run length as a multiple of `iterations` (e.g. {ako: 3}: Ako trains 3x as long, so that a slow
    # policy's time to target is measured rather than censored); unlisted policies run `iterations`
    iterations_factor: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"params.model must be one of {MODELS}, got {self.model!r}")
        if self.iterations < 1 or self.eval_every < 1 or self.iterations % self.eval_every:
            raise ValueError("params.iterations must be a positive multiple of params.eval_every")
        if not 0 < self.target_acc <= 1:
            raise ValueError(f"params.target_acc must be in (0, 1], got {self.target_acc}")
        if not self.bandwidths_gbps or min(self.bandwidths_gbps) <= 0:
            raise ValueError("params.bandwidths_gbps must be a non-empty list of positive rates")
        if self.piece_elems < 1:
            raise ValueError(f"params.piece_elems must be >= 1 (no zero-length pieces), got {self.piece_elems}")
        if self.n_train < 0 or self.n_test < 1 or self.batch < 1 or self.lr <= 0 or not 0 <= self.momentum < 1:
            raise ValueError("invalid n_train/n_test/batch/lr/momentum")
        for pair in self.accuracy_pairs:
            if pair.count(":") != 1 or "" in pair.split(":"):
                raise ValueError(f"params.accuracy_pairs entries look like 'policy:reference', got {pair!r}")
        for name, opt in self.optimiser.items():
            if len(opt) != 2 or not opt[0] > 0 or not 0 <= opt[1] < 1:
                raise ValueError(f"params.optimiser.{name} must be [lr > 0, 0 <= momentum < 1], got {list(opt)}")
        rates = list(self.sketch_gbps)
        if not rates or not all(math.isfinite(r) and r >= 0 for r in rates) or len(set(rates)) != len(rates):
            raise ValueError(f"params.sketch_gbps must be distinct finite rates >= 0 (0 = free), got {rates}")
        for name, f in self.iterations_factor.items():
            if isinstance(f, bool) or not isinstance(f, int) or f < 1:
                raise ValueError(f"params.iterations_factor.{name} must be an integer >= 1, got {f!r}")
        for pair in self.accuracy_pairs:
            a, b = pair.split(":")
            if self.iterations_for(a) != self.iterations_for(b):
                raise ValueError(f"params.accuracy_pairs {pair!r} compares final accuracies after different run "
                                 "lengths (params.iterations_factor)")

    def iterations_for(self, policy: str) -> int:
        """Iterations ``policy`` trains for: ``iterations`` times its ``iterations_factor`` (default 1)."""
        return self.iterations * int(self.iterations_factor.get(policy, 1))

    def optimiser_for(self, policy: str, gbps: float | None = None) -> tuple[float, float]:
        """``(lr, momentum)`` that ``policy`` trains with (at NIC rate ``gbps``: ``policy@<gbps>`` first)."""
        at = self.optimiser.get(f"{policy}@{gbps:g}") if gbps is not None else None
        lr, mom = at if at is not None else self.optimiser.get(policy, (self.lr, self.momentum))
        return float(lr), float(mom)


@dataclass
class OptimiserSweepParams(TrainParams):
    """Grid of (lr, momentum) per policy, trained on tuning seeds disjoint from the evaluation seeds.

    Each policy's choice is the grid point with the fewest mean iterations to ``target_acc`` (a seed that misses
    counts as ``iterations + eval_every``), ties broken by higher mean final accuracy. Time to target is
    iterations to target times the policy's fixed per-iteration time, so this is also the fastest in time.
    """

    lrs: list[float] = field(default_factory=lambda: [0.05, 0.1, 0.2])
    momenta: list[float] = field(default_factory=lambda: [0.0, 0.5, 0.9])
    tuning_seed_offset: int = 1000  # tuning seeds are seed + offset .. : never the seeds the results are reported on
    # policies tuned at the first NIC rate only: the experiments run them there (or at a rate no sweep runs, which
    # takes the first rate's choice), so the other rates' trainings would choose for nothing
    first_rate_only: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        if len(set(self.first_rate_only)) != len(self.first_rate_only):
            raise ValueError(f"params.first_rate_only lists a policy twice: {self.first_rate_only}")
        if len(self.sketch_gbps) != 1:
            raise ValueError("params.sketch_gbps: a sweep chooses at one sketch rate (one per policy and NIC rate)")
        if self.iterations_factor:
            raise ValueError("params.iterations_factor: a sweep scores every grid point over the same run length")
        if not self.lrs or min(self.lrs) <= 0 or not self.momenta or not all(0 <= m < 1 for m in self.momenta):
            raise ValueError("params.lrs must be positive and params.momenta in [0, 1), both non-empty")
        if self.tuning_seed_offset < 1:
            raise ValueError("params.tuning_seed_offset must be >= 1 (tuning seeds differ from evaluation seeds)")


@dataclass
class CommRatioParams(TrainParams):
    """Time to accuracy against the communication-to-compute ratio (claim boundary, [ours]).

    The ratio is :func:`mlsys_repro.common.timing.comm_compute_ratio` of ``hardware.workload``: one fp32 gradient over
    one NIC divided by one iteration's compute on ``hardware.gpu``; each ratio sets the NIC rate
    ``8 * gradient bytes / (ratio * step time)`` (``bandwidths_gbps`` is ignored). The first ``sketch_gbps`` runs at
    every slowdown; the others (sensitivity readings) on homogeneous workers only (the first slowdown, 1).
    """

    comm_ratios: list[float] = field(default_factory=lambda: [0.25, 1.0, 4.0])
    # heterogeneity: the last worker computes `slowdown` times slower (1.0: homogeneous); rows carry `slowdown`
    slowdowns: list[float] = field(default_factory=lambda: [1.0])

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.slowdowns or min(self.slowdowns) < 1 or len(set(self.slowdowns)) != len(self.slowdowns):
            raise ValueError("params.slowdowns must be distinct factors >= 1 (1 = homogeneous)")
        if len(self.sketch_gbps) > 1 and self.slowdowns[0] != 1.0:
            raise ValueError("params.slowdowns must start with 1.0 (homogeneous) where several sketch_gbps run: the "
                             "sensitivity rates run at the first slowdown only")
        if not self.comm_ratios or min(self.comm_ratios) <= 0 or len(set(self.comm_ratios)) != len(self.comm_ratios):
            raise ValueError("params.comm_ratios must be distinct positive ratios")


@dataclass
class AccuracyCostParams(TrainParams):
    """Final-accuracy cost of the sketch and staleness, every policy at the same optimiser, run to a plateau ([ours]).

    ``plateaued`` (a 0/1 gate per run): the mean test accuracy over the last quarter of the evaluations exceeds the
    mean over the quarter before it by less than ``plateau_pp`` percentage points.
    """

    plateau_pp: float = 0.5

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.plateau_pp > 0:
            raise ValueError(f"params.plateau_pp must be > 0, got {self.plateau_pp}")
        if len(set(map(tuple, self.optimiser.values()))) > 1:
            raise ValueError("accuracy_cost compares policies at the same optimiser: params.optimiser must not "
                             "differ between policies (use lr/momentum)")
        if self.iterations // self.eval_every < 8:
            raise ValueError("accuracy_cost needs >= 8 evaluations to tell a plateau")


@dataclass
class TrafficParams:
    """Bytes on the wire per iteration (discrete-event model only) for several cluster sizes."""

    model: str = "mlp"
    batch: int = 32
    bcube_k: list[int] = field(default_factory=lambda: [1, 2])
    iterations: int = 20
    colayer_bytes: int = 65536
    piece_elems: int = 16384

    def __post_init__(self) -> None:
        if self.model not in MODELS or not self.bcube_k or min(self.bcube_k) < 0 or self.iterations < 1:
            raise ValueError("invalid traffic params")


@dataclass
class PieceSweepParams:
    """Canary throughput against piece size, NIC count and bandwidth (discrete-event model only)."""

    model: str = "mlp"
    batch: int = 32
    piece_elems: list[int] = field(default_factory=lambda: [2048, 8192, 16384, 65536])
    bandwidths_gbps: list[float] = field(default_factory=lambda: [1.0, 10.0])
    iterations: int = 40
    colayer_bytes: int = 65536

    def __post_init__(self) -> None:
        if not self.piece_elems or min(self.piece_elems) < 1:
            raise ValueError("params.piece_elems must be integers >= 1 (no zero-length pieces)")
        if not self.bandwidths_gbps or min(self.bandwidths_gbps) <= 0 or self.iterations < 1:
            raise ValueError("invalid piece sweep params")


register_schema("hardware", "bcube_cluster", BCubeCluster)
register_schema("policy", "exchange", ExchangePolicy)
