"""Config schemas of the FedFoA reproduction (registered in Hydra's ConfigStore at import).

* ``/schema/hardware/fedssl_federation``: the simulated federation -- client architecture groups and the common
  projector dimension (``conf/hardware/fedssl_*.yaml``).
* ``/schema/policy/fedssl``: one method (``conf/policy/fedfoa/*.yaml``).
* :class:`FedSSLParams`: the params node of every training experiment (sizes, optimiser, evaluation).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mlsys_repro.common.repro.schema import BaseHardware, BasePolicy, register_schema
from mlsys_repro.papers.fedfoa.federation import METHODS
from mlsys_repro.papers.fedfoa.models import ARCHS
from mlsys_repro.papers.fedfoa.relation import RelationShapeError, check_dims
from mlsys_repro.papers.fedfoa.ssl import BACKBONES


@dataclass
class ClientGroupConfig:
    arch: str = "cnn_s"
    count: int = 1
    proj_dim: int = 64

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"unknown encoder arch {self.arch!r}; known: {sorted(ARCHS)}")
        if self.count < 1:
            raise ValueError(f"client group {self.arch}: count must be >= 1, got {self.count}")
        if self.proj_dim < 2:
            raise ValueError(f"client group {self.arch}: proj_dim must be >= 2, got {self.proj_dim}")


@dataclass
class FederationHardware(BaseHardware):
    """Clients grouped by encoder architecture; every group must share one projector output dimension d."""

    clients: list[ClientGroupConfig] = field(default_factory=list)
    hidden: int = 256  # projector / predictor hidden width

    def __post_init__(self) -> None:
        if not self.clients:
            raise ValueError(f"federation {self.name}: needs at least one client group")
        archs = [g.arch for g in self.clients]
        if len(set(archs)) != len(archs):
            raise ValueError(f"federation {self.name}: list each architecture once, got {archs}")
        try:
            check_dims([g.proj_dim for g in self.clients], archs)
        except RelationShapeError as e:
            raise ValueError(f"federation {self.name}: {e}") from None
        if self.hidden < 1:
            raise ValueError(f"federation {self.name}: hidden must be >= 1")

    @property
    def num_clients(self) -> int:
        return sum(g.count for g in self.clients)


@dataclass
class FedSSLPolicy(BasePolicy):
    """One federated SSL method. ``foa`` adds FedFoA's relation alignment to any ``method``."""

    method: str = "local"
    foa: bool = False
    calibrate: bool = False
    lam: float = 1.0
    kd_weight: float = 1.0
    dapu_threshold: float = 0.4
    dapu_rel: float = 0.0  # FedU: > 0 sets mu = dapu_rel * median round-0 divergence (then dapu_threshold is unused)
    ema_scaler_target: float = 0.7

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"policy {self.name}: method must be one of {METHODS}, got {self.method!r}")
        if self.calibrate and not self.foa:
            raise ValueError(f"policy {self.name}: calibrate needs foa (it uses the aggregated relation matrix)")
        if self.lam < 0 or self.kd_weight < 0 or self.dapu_threshold < 0 or self.dapu_rel < 0 \
                or self.ema_scaler_target <= 0:
            raise ValueError(f"policy {self.name}: need lam, kd_weight, dapu_threshold, dapu_rel >= 0 and "
                             "ema_scaler_target > 0")


@dataclass
class FedSSLParams:
    """Sizes, optimiser and evaluation of one federated SSL experiment."""

    n_pool: int = 5000  # unlabelled SSL images split among clients
    n_public: int = 0  # public set (KD baseline); disjoint from the pool
    n_val: int = 0  # labelled validation slice (ablations evaluate on it instead of the test set)
    n_test: int = 2000
    eval_on: str = "test"  # test | val
    alpha: float = 0.1  # Dirichlet concentration; 0 means IID
    min_per_client: int = 20
    backbone: str = "byol"
    rounds: int = 8
    local_steps: int = 10
    batch_size: int = 64
    image_size: int = 16
    rank: int = 16
    rel_samples: int = 256
    kd_batch: int = 64
    lr: float = 0.05
    momentum: float = 0.9
    weight_decay: float = 5e-4
    target_tau: float = 0.99
    calib_floor: float = 0.1
    probe_steps: int = 300
    ft_fractions: list[float] = field(default_factory=list)  # e.g. [0.01, 0.1]; empty: no fine-tuning
    ft_steps: int = 60
    ft_batch: int = 32
    random_init_reference: bool = False  # also write the untrained encoders' rows (policy "random_init")
    round_curves: bool = True  # per-round SSL / alignment loss rows (for the figures)
    init: str = "common"  # common: the server broadcasts the initial model (heterogeneous: a common head); independent
    gate_pp: float = 5.0  # beats_untrained: a trained encoder's probe must beat the untrained one by this many pp
    monitor: bool = True  # probe accuracy and cross-client CKA after every chunk of rounds (rows with `round`)
    cka_samples: int = 256  # evaluation images whose representations the CKA compares

    def __post_init__(self) -> None:
        if self.init not in ("common", "independent"):
            raise ValueError(f"init must be 'common' or 'independent', got {self.init!r}")
        if self.gate_pp < 0 or self.cka_samples < 2:
            raise ValueError("need gate_pp >= 0 and cka_samples >= 2")
        if self.eval_on not in ("test", "val"):
            raise ValueError(f"eval_on must be 'test' or 'val', got {self.eval_on!r}")
        if self.eval_on == "val" and self.n_val < 10:
            raise ValueError("eval_on=val needs n_val >= 10")
        if self.alpha < 0:
            raise ValueError(f"alpha must be >= 0 (0 = IID), got {self.alpha}")
        if self.backbone not in BACKBONES:
            raise ValueError(f"backbone must be one of {BACKBONES}, got {self.backbone!r}")
        if self.image_size % 4:
            raise ValueError(f"image_size must be a multiple of 4 (two 2x2 poolings), got {self.image_size}")
        for f in self.ft_fractions:
            if not 0 < f <= 1:
                raise ValueError(f"ft_fractions must lie in (0, 1], got {f}")
        for name in ("n_pool", "n_test", "rounds", "local_steps", "batch_size", "rank", "rel_samples",
                     "probe_steps", "ft_steps", "ft_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    @property
    def split_name(self) -> str:
        return "iid" if self.alpha == 0 else f"dir{self.alpha:g}"


@dataclass
class CalibPoint:
    """One setting of the SSL budget calibration grid (everything else comes from the experiment's params)."""

    dataset: str = "cifar10_jpeg"
    image_size: int = 16
    arch: str = "cnn_s"
    clients: int = 5
    local_steps: int = 10

    def __post_init__(self) -> None:
        if self.arch not in ARCHS:
            raise ValueError(f"calibration point: unknown arch {self.arch!r}; known: {sorted(ARCHS)}")
        if self.image_size % 4 or self.image_size < 4:
            raise ValueError(f"calibration point: image_size must be a positive multiple of 4, got {self.image_size}")
        if self.clients < 2 or self.local_steps < 1:
            raise ValueError("calibration point: need clients >= 2 (CKA) and local_steps >= 1")


@dataclass
class CalibrationParams(FedSSLParams):
    """SSL budget calibration: local-only SSL against the untrained encoder at each grid point, probed after every
    chunk of rounds, so one run per point gives the whole accuracy-vs-steps curve."""

    grid: list[CalibPoint] = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.grid:
            raise ValueError("calibration needs a non-empty grid")


@dataclass
class CommParams:
    """The communication table: bytes per client per round for each method and architecture (no training)."""

    archs: list[str] = field(default_factory=lambda: ["cnn_s", "cnn_l"])
    proj_dim: int = 64
    hidden: int = 256
    rank: int = 16
    n_public: int = 1000
    in_channels: int = 3


register_schema("hardware", "fedssl_federation", FederationHardware)
register_schema("policy", "fedssl", FedSSLPolicy)
