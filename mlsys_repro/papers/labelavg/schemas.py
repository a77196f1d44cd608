"""Config schemas of the L-Attack / LabelAvg reproduction (registered in Hydra's ConfigStore on import)."""

from __future__ import annotations

from dataclasses import dataclass, field

from omegaconf import MISSING

from mlsys_repro.common.repro.schema import BaseHardware, BasePolicy, register_schema
from mlsys_repro.papers.labelavg.methods import METHODS, SMOOTHING_RULES
from mlsys_repro.papers.labelavg.models import REGISTRY

DATASETS = ("mnist", "fashion_mnist", "cifar10_jpeg")
ATTACKERS = ("init", "zo", "sign", "whitebox", "surrogate")


@dataclass
class FederationHardware(BaseHardware):
    """The simulated federation: ``num_clients`` clients whose architectures cycle through ``archs``.

    FedAvg (parameter averaging) needs one architecture, so it always runs ``homogeneous_arch`` on every client;
    a policy with ``homogeneous: true`` (e.g. ``labelavg_mlp``) does the same, for same-architecture comparisons.
    """

    kind: str = "federation"
    num_clients: int = 10
    archs: list[str] = field(default_factory=lambda: ["mlp", "conv_s2"])
    homogeneous_arch: str = "mlp"

    def __post_init__(self) -> None:
        if self.num_clients < 2:
            raise ValueError(f"num_clients must be >= 2, got {self.num_clients}")
        bad = [a for a in [*self.archs, self.homogeneous_arch] if a not in REGISTRY]
        if bad or not self.archs:
            raise ValueError(f"archs must be non-empty names from {sorted(REGISTRY)}, got {bad or self.archs}")

    def client_archs(self, method: str, homogeneous: bool = False) -> list[str]:
        if method == "fedavg" or homogeneous:
            return [self.homogeneous_arch] * self.num_clients
        return [self.archs[k % len(self.archs)] for k in range(self.num_clients)]


@dataclass
class FDPolicy(BasePolicy):
    """One federated method and its own hyper-parameters (the shared schedule is in the experiment params).

    order: ``train_first`` (DS-FL / LabelAvg: local update, predict, aggregate, distil) or ``distill_first``
      (FedMD: communicate, aggregate, digest, revisit).
    temperature: client distillation temperature (soft cross-entropy methods).
    epsilon, smoothing_rule: LabelAvg's voting-based label smoothing (see methods.vote_targets).
    era_temperature: DS-FL's entropy-reduction aggregation temperature.
    pretrain_public_steps: FedMD's first transfer-learning phase: steps on the *labelled* public set before the
      warm-up (FedMD assumes one; extra information no other method gets; ``fedmd_unlabelled`` sets it to 0).
    homogeneous: run every client on the hardware's ``homogeneous_arch`` (FedAvg always does).
    server_steps, server_lr, server_temperature: FedDF's server-side ensemble distillation.
    """

    method: str = MISSING
    order: str = "train_first"
    temperature: float = 1.0
    epsilon: float = 0.1
    smoothing_rule: str = "vote_share"
    era_temperature: float = 0.1
    pretrain_public_steps: int = 0
    homogeneous: bool = False
    server_steps: int = 0
    server_lr: float = 1e-3
    server_temperature: float = 1.0

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}, got {self.method!r}")
        if self.order not in ("train_first", "distill_first"):
            raise ValueError(f"order must be train_first or distill_first, got {self.order!r}")
        if not 0.0 <= self.epsilon <= 1.0:
            raise ValueError(f"epsilon must be in [0, 1], got {self.epsilon}")
        if self.smoothing_rule not in SMOOTHING_RULES:
            raise ValueError(f"smoothing_rule must be one of {SMOOTHING_RULES}, got {self.smoothing_rule!r}")
        for name in ("temperature", "era_temperature", "server_temperature", "server_lr"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if min(self.pretrain_public_steps, self.server_steps) < 0:
            raise ValueError("step counts must be >= 0")


@dataclass
class FDSchedule:
    """Data sizes and the per-round schedule shared by every method of one experiment."""

    n_train: int = 8000  # class-stratified subset of the train split: private pools + public set
    n_public: int = 2000  # carved from it; labels dropped (FedMD's transfer phase excepted)
    n_test: int = 1000
    public_batch: int = 320  # public samples scored per round (P)
    warmup_steps: int = 50  # private minibatch steps before round 1, the same for every method
    rounds: int = 10
    local_steps: int = 10  # private minibatch steps per round
    distill_steps: int = 10  # public minibatch steps per round
    batch_size: int = 32
    lr: float = 1e-3  # client Adam
    curve_n_test: int = 500  # test examples for the per-round accuracy curve
    min_per_client: int = 10

    def __post_init__(self) -> None:
        if not 0 < self.n_public < self.n_train:
            raise ValueError(f"need 0 < n_public < n_train, got {self.n_public}, {self.n_train}")
        if not 0 < self.public_batch <= self.n_public:
            raise ValueError(f"public_batch must be in (0, n_public], got {self.public_batch}")
        if min(self.warmup_steps, self.local_steps, self.distill_steps) < 0:
            raise ValueError("warmup_steps, local_steps and distill_steps must be >= 0")
        for name in ("n_test", "rounds", "batch_size", "curve_n_test"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.curve_n_test > self.n_test:
            raise ValueError("curve_n_test must be <= n_test")
        if self.lr <= 0:
            raise ValueError(f"lr must be > 0, got {self.lr}")


def _check_alphas(alphas: list[float]) -> None:
    if not alphas or any(not a > 0 for a in alphas):
        raise ValueError(f"Dirichlet alphas must be > 0, got {alphas}")


def _check_datasets(datasets: list[str]) -> None:
    bad = [d for d in datasets if d not in DATASETS]
    if bad or not datasets:
        raise ValueError(f"datasets must be names from {DATASETS}, got {datasets}")


@dataclass
class AccuracyParams:
    """Test accuracy and traffic of every method per dataset and Dirichlet alpha.

    policy_seeds: ``{policy: n}`` runs that policy on the experiment's first ``n`` seeds only (reference rows
      paid for with fewer seeds); every other policy runs all of them. Claims that pair such a policy with a
      fuller one select the common seeds (``where: {seed: [...]}``).
    """

    datasets: list[str] = field(default_factory=lambda: list(DATASETS))
    alphas: list[float] = field(default_factory=lambda: [0.1, 0.5, 1.0])
    fd: FDSchedule = field(default_factory=FDSchedule)
    policy_seeds: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        _check_datasets(self.datasets)
        _check_alphas(self.alphas)
        bad = {k: v for k, v in self.policy_seeds.items() if int(v) < 1}
        if bad:
            raise ValueError(f"policy_seeds must be >= 1, got {bad}")


@dataclass
class AttackConfig:
    """L-Attack and its references (see mlsys_repro/papers/labelavg/attack.py)."""

    attackers: list[str] = field(default_factory=lambda: list(ATTACKERS))
    target_client: int = 0
    images_per_class: int = 2
    repeats: int = 1  # independent attacks per target (own generator, codes, directions; each with the full budget)
    min_class_count: int = 10  # a class is attacked/evaluated if the target holds at least this many
    latent_dim: int = 32
    steps: int = 400  # generator updates
    directions: int = 10  # q: random directions per gradient estimate (q + 1 queries per image)
    mu: float = 1e-3  # finite-difference step (normalised pixel units)
    direction_res: int = 7  # search directions drawn on a res x res grid and upsampled (0: full resolution)
    sign_delta: float = 0.5  # smoothing radius of the label-only (sign) estimator
    surrogate_steps: int = 500  # surrogate extraction: Adam steps on the server's transcript of the target
    surrogate_batch: int = 64
    surrogate_lr: float = 1e-3
    # the attacks an FD server can run against an upload (whitebox needs the parameters, init is a reference);
    # the "best" rows take, per seed, the one whose reconstructions the evaluator recognises most often
    server_attackers: list[str] = field(default_factory=lambda: ["zo", "sign", "surrogate"])
    public_references: bool = True  # score the no-upload references (public class mean, most typical image)
    lr: float = 1e-3  # generator Adam
    tv_weight: float = 0.05
    l2_weight: float = 1e-3
    query_fraction: float = 0.2  # queries per round at most this fraction of the round's public batch
    evaluator_steps: int = 600  # independent evaluator: LeNet trained on the test split only
    evaluator_arch: str = "lenet"

    def __post_init__(self) -> None:
        bad = [a for a in self.attackers if a not in ATTACKERS]
        if bad or not self.attackers:
            raise ValueError(f"attackers must be names from {ATTACKERS}, got {self.attackers}")
        if not 0 < self.query_fraction <= 1:
            raise ValueError(f"query_fraction must be in (0, 1], got {self.query_fraction}")
        if self.direction_res < 0:
            raise ValueError(f"direction_res must be >= 0, got {self.direction_res}")
        bad = [a for a in self.server_attackers if a not in ("zo", "sign", "surrogate")]
        if bad:
            raise ValueError(f"server_attackers must be among zo, sign, surrogate (no parameters needed), got {bad}")
        for name in ("images_per_class", "repeats", "steps", "directions", "latent_dim", "evaluator_steps",
                     "surrogate_steps", "surrogate_batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        for name in ("mu", "sign_delta", "lr", "surrogate_lr"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.evaluator_arch not in REGISTRY:
            raise ValueError(f"evaluator_arch must be one of {sorted(REGISTRY)}")


@dataclass
class AttackParams:
    """Reconstruction attack on one client of a trained federation, per method and attacker."""

    dataset: str = "mnist"
    alpha: float = 0.5
    fd: FDSchedule = field(default_factory=FDSchedule)
    attack: AttackConfig = field(default_factory=AttackConfig)
    figure_seed: int = 0

    def __post_init__(self) -> None:
        _check_datasets([self.dataset])
        _check_alphas([self.alpha])


register_schema("hardware", "federation", FederationHardware)
register_schema("policy", "fd_method", FDPolicy)
