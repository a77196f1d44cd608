"""Config schemas of the EvoGWP reproduction: forecaster policies (method, ablations, baselines) and the
parameters of the forecasting experiments. Imported at compose time, so it stays free of JAX."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from omegaconf import MISSING

from mlsys_repro.common.repro.schema import BasePolicy, register_schema

# ------------------------------------------------------------------------------------------- model
# hyper-parameters


@dataclass(frozen=True)
class NoHP:
    pass


@dataclass(frozen=True)
class SeasonalHP:
    season_days: int = 1  # y_hat(t + h) = y(t + h - season_days * period)

    def __post_init__(self) -> None:
        if self.season_days < 1:
            raise ValueError(f"season_days must be >= 1, got {self.season_days}")


@dataclass(frozen=True)
class StatsHP:
    """statsforecast model fitted once per series on the last ``fit_steps`` training steps, then applied
    (``forward``, no refit) to the last ``context_steps`` before every test origin."""

    season_length: int = 1
    fit_steps: int = 2016
    context_steps: int = 288

    def __post_init__(self) -> None:
        if self.season_length < 1 or self.fit_steps < 24 or self.context_steps < 12:
            raise ValueError("stats: season_length >= 1, fit_steps >= 24, context_steps >= 12")


@dataclass(frozen=True)
class RNNHP:
    hidden: int = 64
    num_layers: int = 1


@dataclass(frozen=True)
class DLinearHP:
    kernel: int = 25


@dataclass(frozen=True)
class PatchTSTHP:
    num_patches: int = 5  # patch_len = round(2 P / (num_patches + 1)), stride = patch_len // 2
    d_model: int = 32
    heads: int = 4
    layers: int = 2
    ff: int = 64


@dataclass(frozen=True)
class DCRNNHP:
    hidden: int = 32
    num_layers: int = 1
    max_step: int = 2
    graph_threshold: float = 0.1  # Gaussian-kernel weights below this are dropped (DCRNN: 0.1)


@dataclass(frozen=True)
class GWNetHP:
    dilations: tuple[int, ...] = ()  # empty: 1, 2, 4, ... until the receptive field covers the input
    residual: int = 32
    skip: int = 64
    end: int = 128
    emb_dim: int = 10
    max_step: int = 2
    graph_threshold: float = 0.1


@dataclass(frozen=True)
class EvoGWPHP:
    hidden: int = 32
    num_layers: int = 1
    max_step: int = 2
    evo_hidden: int = 32
    emb_dim: int = 8
    graph: str = "evolution"  # evolution | static | union (static plus evolution) | none
    learned: str = "evolstm"  # evolstm | embedding | none
    context_segments: int = 6  # history segments the EvoLSTM reads
    segments_per_day: int = 12  # L = period / segments_per_day
    num_shapelets: int = 32
    candidates_per_shapelet: int = 10
    num_classes: int = 4
    min_class_size: int = 3  # pseudo-label classes have >= this many entities
    shapelet_score: str = "hellinger"  # hellinger (bounded, ours) | kl (the authors')
    learn_importance: bool = True  # False: w = u = 1 (plain Euclidean shapelets), ablation
    shapelet_steps: int = 150
    shapelet_samples: int = 768
    link_percentile: float = 80.0
    top_shapelets: int = 3  # a workload's pattern = its nearest shapelets
    top_transitions: int = 3  # successors kept per shapelet in the transition matrix
    edge_fraction: float = 0.1  # out-edges kept per workload: ceil(edge_fraction (N - 1))
    graph_threshold: float = 0.1  # for graph = static or union

    def __post_init__(self) -> None:
        if self.graph not in ("evolution", "static", "union", "none"):
            raise ValueError(f"evogwp.graph must be evolution, static, union or none, got {self.graph!r}")
        if self.learned not in ("evolstm", "embedding", "none"):
            raise ValueError(f"evogwp.learned must be evolstm, embedding or none, got {self.learned!r}")
        if self.graph == "none" and self.learned == "none":
            raise ValueError("evogwp needs graph or learned adjacency")
        if self.context_segments < 1 or self.segments_per_day < 1:
            raise ValueError("evogwp: context_segments and segments_per_day must be >= 1")


HPARAMS: dict[str, type] = {
    "last_value": NoHP,
    "seasonal_naive": SeasonalHP,
    "arima": StatsHP,
    "ets": StatsHP,
    "lstm": RNNHP,
    "gru": RNNHP,
    "dlinear": DLinearHP,
    "patchtst": PatchTSTHP,
    "dcrnn": DCRNNHP,
    "gwnet": GWNetHP,
    "evogwp": EvoGWPHP,
}
NEURAL = ("lstm", "gru", "dlinear", "patchtst", "dcrnn", "gwnet", "evogwp")


def parse_hparams(kind: str, hparams: dict[str, Any] | None) -> Any:
    """The typed hyper-parameters of a ``kind`` (ValueError naming an unknown key or a bad value)."""
    if kind not in HPARAMS:
        raise ValueError(f"unknown forecaster kind {kind!r}; known: {sorted(HPARAMS)}")
    cls = HPARAMS[kind]
    hp = dict(hparams or {})
    names = {f.name for f in dataclasses.fields(cls)}
    bad = sorted(set(hp) - names)
    if bad:
        raise ValueError(f"{kind}: unknown hparams {bad}; allowed: {sorted(names)}")
    for f in dataclasses.fields(cls):
        if f.name in hp and isinstance(hp[f.name], list):
            hp[f.name] = tuple(hp[f.name])
    return cls(**hp)


@dataclass
class ForecasterPolicy(BasePolicy):
    """One forecaster: ``kind`` names the model family, ``hparams`` its typed hyper-parameters."""

    kind: str = MISSING
    hparams: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        parse_hparams(self.kind, self.hparams)

    @property
    def hp(self) -> Any:
        return parse_hparams(self.kind, self.hparams)


register_schema("policy", "forecaster", ForecasterPolicy)


def with_overrides(pol: ForecasterPolicy, overrides: dict[str, dict[str, Any]]) -> ForecasterPolicy:
    """``pol`` with the hyper-parameters of ``overrides[pol.kind]`` (if any) replacing its own."""
    over = dict(overrides.get(pol.kind) or {})
    if not over:
        return pol
    return dataclasses.replace(pol, hparams={**dict(pol.hparams), **over})

# ------------------------------------------------------------------------------------------- experiment
# params


@dataclass
class TrainParams:
    """Training loop of every neural model (one ``lax.scan`` under one ``jit``, seeds vmapped).

    The peak learning rate of a model is ``lr_by_model[kind]`` (the choice of the ``tuning`` experiment, written
    into every experiment that trains that model), else ``lr``. The schedule: a linear warm-up over
    ``warmup_steps`` updates, then ``x lr_gamma`` at each of ``lr_milestones`` (fractions of ``steps``). Early
    stopping counts ``patience`` only from the first decay on."""

    steps: int = 300
    batch_size: int = 8
    lr: float = 3e-3
    lr_by_model: dict[str, float] = field(default_factory=dict)  # model kind -> peak lr (tuning's picks)
    warmup_steps: int = 0  # linear warm-up to the peak lr over this many updates (0 = none)
    lr_milestones: list[float] = field(default_factory=lambda: [0.6, 0.85])  # fractions of steps
    lr_gamma: float = 0.1
    clip_norm: float = 1.0
    eval_every: int = 50  # validation period (one evaluation round)
    val_windows: int = 48
    cl_decay_steps: float = 75.0  # scheduled sampling k
    patience: int = 4  # early stopping: rounds in a row without a relative improvement > min_delta
    min_delta: float = 0.005  # relative; also the plateau tolerance of the ``converged`` gate
    init_margin: float = 0.01  # ``beats_untrained``: the kept parameters beat the initial ones by this fraction

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch_size < 1 or self.eval_every < 1 or self.val_windows < 1:
            raise ValueError("train: steps, batch_size, eval_every and val_windows must be >= 1")
        if self.steps % self.eval_every:
            raise ValueError(
                f"train.steps ({self.steps}) must be a multiple of eval_every ({self.eval_every})"
            )
        if self.lr <= 0 or self.clip_norm <= 0 or self.cl_decay_steps <= 0:
            raise ValueError("train: lr, clip_norm and cl_decay_steps must be > 0")
        if self.patience < 1 or not 0 <= self.min_delta < 1:
            raise ValueError("train: patience must be >= 1 and min_delta in [0, 1)")
        if not 0 <= self.warmup_steps <= self.steps:
            raise ValueError(f"train.warmup_steps must be in [0, steps], got {self.warmup_steps}")
        if not 0 <= self.init_margin < 1:
            raise ValueError(f"train.init_margin must be in [0, 1), got {self.init_margin}")
        bad = {k: v for k, v in dict(self.lr_by_model).items() if k not in NEURAL or not float(v) > 0}
        if bad:
            raise ValueError(f"train.lr_by_model: unknown model kinds or non-positive rates {bad} "
                             f"(kinds: {list(NEURAL)})")

    def lr_for(self, kind: str) -> float:
        """The peak learning rate of model ``kind``."""
        return float(self.lr_by_model.get(kind, self.lr))


@dataclass
class ForecastParams:
    """One forecasting table: datasets x policies on one window setting.

    ``datasets`` are keys of the trace's ``files``.
    ``aggregate`` averages that many 5-minute steps (``input_len``/``horizon`` count aggregated steps).
    ``split``: ``chrono`` (train_frac / val_frac / rest) or ``tail`` (train on the first ``train_days``, test
    on the last ``test_days``, validate in between).
    ``model_overrides``: per model kind, hyper-parameters that replace the policy files' values for every policy
    of that kind in this experiment (e.g. the segment length at hourly resolution, or the width the ablation
    runs at); the rows carry the resulting ``model_params``.
    """

    datasets: list[str] = field(default_factory=lambda: ["bitbrains", "azure", "google"])
    max_entities: int = 100
    max_steps: int = 0  # 0 = the whole series; else its first max_steps 5-minute steps (smoke)
    aggregate: int = 1
    input_len: int = 12
    horizon: int = 12
    split: str = "chrono"
    train_frac: float = 0.7
    val_frac: float = 0.1
    train_days: float = 0.0
    test_days: float = 0.0
    eval_stride: int = 12
    train: TrainParams = field(default_factory=TrainParams)
    best_of: list[str] = field(default_factory=lambda: ["dcrnn", "gwnet", "patchtst", "dlinear"])
    checkpoint_policies: list[str] = field(default_factory=list)
    figure_policies: list[str] = field(default_factory=list)
    model_overrides: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.datasets:
            raise ValueError("datasets must not be empty")
        for kind, over in dict(self.model_overrides).items():
            parse_hparams(kind, dict(over))  # unknown kinds, keys or bad values fail at compose time
        if self.input_len < 1 or self.horizon < 1 or self.eval_stride < 1 or self.aggregate < 1:
            raise ValueError("input_len, horizon, eval_stride and aggregate must be >= 1")
        if self.split not in ("chrono", "tail"):
            raise ValueError(f"split must be chrono or tail, got {self.split!r}")
        if self.split == "tail" and (self.train_days <= 0 or self.test_days <= 0):
            raise ValueError("split=tail needs train_days > 0 and test_days > 0")


@dataclass
class TuningParams(ForecastParams):
    """The ``tuning`` experiment: every learned model at every peak learning rate of ``lrs`` (vmapped with the
    tuning seeds), on tuning seeds ``seed + tuning_seed_offset ..`` (never the seeds results are reported on),
    scored on the validation windows only. Per model the rate with the lowest mean best-validation masked MAE is
    chosen (ties: the smaller rate); the choices go into ``train.lr_by_model`` of the experiments that report."""

    lrs: list[float] = field(default_factory=lambda: [1e-3, 3e-3])
    tuning_seed_offset: int = 100

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.lrs or any(not float(x) > 0 for x in self.lrs) or len(set(self.lrs)) != len(self.lrs):
            raise ValueError(f"tuning: lrs must be distinct positive rates, got {self.lrs}")
        if self.tuning_seed_offset < 1:
            raise ValueError("tuning: tuning_seed_offset must be >= 1 (tuning seeds differ from reported seeds)")
