"""Config schemas of the Swallow reproduction: the simulated fabric (with its clock conventions), the policies, and
the params of each experiment. Registered in Hydra's ConfigStore on import; value checks run at compose time."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from mlsys_repro.common.repro.schema import BaseHardware, BasePolicy, check_range, register_schema

KINDS = ("madd", "dark", "sincronia", "fair")
ORDERS = ("fifo", "scf", "ncf", "lcf", "sebf", "fvdf")
COMPRESS = ("none", "always", "swallow")
# "validated": the forecaster (GRU, EWMA or last value) with the lowest MAE on the CPU trace's validation split
PREDICTORS = ("validated", "oracle", "gru", "ewma", "last", "none")
CODECS = ("lz4", "snappy", "zstd")
CPU_TRACES = ("bitbrains", "azure")
PAYLOAD_CLASSES = ("trace_text", "cpu_csv", "cpu_f32", "mnist_u8", "cifar_jpeg")  # = codecs.PAYLOADS
RANDOM_PAYLOADS = ("per_mapper", "per_coflow")  # classes drawn per (coflow, mapper) or per coflow (experiments.py)
PAYLOADS = (*PAYLOAD_CLASSES, "mix", *RANDOM_PAYLOADS)


@dataclass
class ClockConfig:
    """Simulator conventions; the defaults are coflowsim's (see mlsys_repro/papers/swallow/README.md)."""

    second_ms: float = 1024.0  # one simulated second
    quantum_ms: float = 8.0  # flows advance in quanta; a coflow finishes at the end of a quantum
    epoch_ms: float = 10240.0  # online admission epochs; arrivals within the next epoch start at its boundary
    gbit: float = 1073741824.0  # bits in "1 Gbps" (coflowsim: 2**30)
    mb_bytes: float = 1048576.0  # bytes in a trace MB
    mb_round: str = "mappers"  # reducer MB rounded up to a multiple of #mappers ("none": exact split)
    cct_from: str = "admission"  # or "arrival"
    zero_bytes: float = 1e-3  # a flow with at most this many bytes left is done

    def __post_init__(self) -> None:
        for k in ("second_ms", "quantum_ms", "epoch_ms", "gbit", "mb_bytes", "zero_bytes"):
            if getattr(self, k) <= 0:
                raise ValueError(f"clock.{k} must be positive, got {getattr(self, k)}")
        if abs(self.epoch_ms / self.quantum_ms - round(self.epoch_ms / self.quantum_ms)) > 1e-9:
            raise ValueError("clock.epoch_ms must be a multiple of clock.quantum_ms")
        if self.mb_round not in ("mappers", "none"):
            raise ValueError(f"clock.mb_round must be 'mappers' or 'none', got {self.mb_round!r}")
        if self.cct_from not in ("admission", "arrival"):
            raise ValueError(f"clock.cct_from must be 'admission' or 'arrival', got {self.cct_from!r}")


@dataclass
class CoflowFabric(BaseHardware):
    """Non-blocking big switch: every port has ``port_gbps`` up and down; every host has compression cores."""

    kind: str = "coflow_fabric"
    port_gbps: float = 1.0
    cores_per_port: float = 8.0  # cores a host can give the shuffle's compressor (scaled by its free CPU)
    codec: str = "lz4"
    codec_source: str = "measured"  # measured (data/codecs/codec_table.csv) | lz4_readme (the authors' table)
    codec_payload: str = "per_mapper"  # a payload class of the codec table, mix, or a RANDOM_PAYLOADS model
    cpu_trace: str = "bitbrains"
    cpu_sample_s: float = 300.0  # the CPU trace's sample length, in simulated seconds
    cpu_window: int = 512  # samples replayed per port (wraps around after that)
    clock: ClockConfig = field(default_factory=ClockConfig)

    def __post_init__(self) -> None:
        if self.port_gbps <= 0:
            raise ValueError(f"port_gbps must be positive, got {self.port_gbps}")
        if self.cores_per_port <= 0:
            raise ValueError(f"cores_per_port must be positive, got {self.cores_per_port}")
        if self.codec not in CODECS:
            raise ValueError(f"codec must be one of {CODECS}, got {self.codec!r}")
        if self.codec_source not in ("measured", "lz4_readme"):
            raise ValueError(f"codec_source must be 'measured' or 'lz4_readme', got {self.codec_source!r}")
        if self.codec_payload not in PAYLOADS:
            raise ValueError(f"codec_payload must be one of {PAYLOADS}, got {self.codec_payload!r}")
        if self.cpu_trace not in CPU_TRACES:
            raise ValueError(f"cpu_trace must be one of {CPU_TRACES}, got {self.cpu_trace!r}")
        if self.cpu_sample_s <= 0 or self.cpu_window < 1:
            raise ValueError("cpu_sample_s must be positive and cpu_window >= 1")


@dataclass
class SwallowPolicy(BasePolicy):
    """A scheduler: program kind, coflow order, compression, speed predictor, pipelining, aging."""

    kind: str = "madd"
    order: str = "sebf"
    compress: str = "none"
    predictor: str = "none"  # what the scheduler assumes about free CPU ("none": all of it is free)
    pipelined: bool = True
    starvation_s: float | None = None  # fvdf aging threshold in simulated seconds (None: off)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"policy kind must be one of {KINDS}, got {self.kind!r}")
        if self.order not in ORDERS:
            raise ValueError(f"policy order must be one of {ORDERS}, got {self.order!r}")
        if self.compress not in COMPRESS:
            raise ValueError(f"policy compress must be one of {COMPRESS}, got {self.compress!r}")
        if self.predictor not in PREDICTORS:
            raise ValueError(f"policy predictor must be one of {PREDICTORS}, got {self.predictor!r}")
        if self.kind != "madd" and (self.compress != "none" or self.order != "sebf"):
            raise ValueError("order and compression apply to the madd kind only")
        if self.order == "fvdf" and self.compress != "swallow":
            raise ValueError("the fvdf order needs compress: swallow")
        if self.starvation_s is not None and self.starvation_s <= 0:
            raise ValueError(f"starvation_s must be positive or null, got {self.starvation_s}")


@dataclass
class ParityParams:
    max_coflows: int | None = None  # first N coflows of the trace (smoke); None = all

    def __post_init__(self) -> None:
        _check_trace_and_jobs(self)


def _check_trace_and_jobs(p: Any) -> None:
    """Ranges shared by the experiments' params (named in the error, reported at compose)."""
    check_range(p, "max_coflows", ge=1, optional=True)
    for name, bound in (("gru_steps", {"ge": 1}), ("jct_median_kappa", {"gt": 0}), ("jct_sigma", {"ge": 0}),
                        ("port_gbps", {"gt": 0}), ("cores_per_port", {"gt": 0})):
        if hasattr(p, name):
            check_range(p, name, **bound)


def _check_payloads(payloads: list[str]) -> None:
    if not payloads or len(set(payloads)) != len(payloads) or any(p not in PAYLOADS for p in payloads):
        raise ValueError(f"payloads must be distinct names from {PAYLOADS}, got {payloads}")


def _check_jct(chunks: list[int], disks: list[float]) -> None:
    if not chunks or any(int(c) != c or c < 1 for c in chunks):
        raise ValueError(f"jct_chunks must be integers >= 1, got {chunks}")
    if not disks or any(not (d > 0 and math.isfinite(d)) for d in disks):
        raise ValueError(f"disk_MBps must be positive finite numbers, got {disks}")


@dataclass
class HeadlineParams:
    max_coflows: int | None = None
    gru_steps: int = 1500  # training steps of the CPU-load predictor the scheduler uses
    payloads: list[str] = field(default_factory=lambda: ["per_mapper", "per_coflow"])  # the first is the headline's
    sensitivity_policies: list[str] | None = None  # run under the other payload models (None: every policy)
    jct_median_kappa: float = 2.0
    jct_sigma: float = 0.5
    disk_MBps: float = 100.0  # per-host disk bandwidth of map spill and reduce merge (jobs.py)
    jct_chunks: int = 1  # map/shuffle pipelining pieces (jobs.pipelined_jct_s; 1: Spark's stage barrier)

    def __post_init__(self) -> None:
        _check_trace_and_jobs(self)
        _check_payloads(self.payloads)
        _check_jct([self.jct_chunks], [self.disk_MBps])


@dataclass
class BandwidthParams:
    max_coflows: int | None = None
    gru_steps: int = 1500  # training steps of the CPU-load predictor the scheduler uses
    bandwidth_gbps: list[float] = field(default_factory=lambda: [0.1, 0.3, 1.0, 3.0, 10.0])
    jct_median_kappa: float = 2.0
    jct_sigma: float = 0.5
    disk_MBps: float = 100.0  # per-host disk bandwidth of map spill and reduce merge (jobs.py)
    jct_chunks: int = 1  # map/shuffle pipelining pieces (jobs.pipelined_jct_s; 1: Spark's stage barrier)

    def __post_init__(self) -> None:
        _check_trace_and_jobs(self)
        if not self.bandwidth_gbps or any(b <= 0 for b in self.bandwidth_gbps):
            raise ValueError("bandwidth_gbps must be a non-empty list of positive numbers")
        _check_jct([self.jct_chunks], [self.disk_MBps])


@dataclass
class JctParams:
    max_coflows: int | None = None
    gru_steps: int = 1500  # training steps of the CPU-load predictor the scheduler uses
    jct_median_kappa: float = 2.0
    jct_sigma: float = 0.5
    jct_chunks: list[int] = field(default_factory=lambda: [1, 2, 4, 8, 16])
    disk_MBps: list[float] = field(default_factory=lambda: [25.0, 50.0, 100.0, 200.0, 400.0, 800.0])
    headline_chunks: int = 1  # the slice the figure shows of the other axis (the headline's job model)
    headline_disk_MBps: float = 100.0

    def __post_init__(self) -> None:
        _check_trace_and_jobs(self)
        _check_jct(self.jct_chunks, self.disk_MBps)
        if self.headline_chunks not in self.jct_chunks or self.headline_disk_MBps not in self.disk_MBps:
            raise ValueError("headline_chunks and headline_disk_MBps must be among jct_chunks and disk_MBps")


@dataclass
class RegimeMapParams:
    max_coflows: int | None = None
    gru_steps: int = 1500  # training steps of the CPU-load predictor the scheduler uses
    bandwidth_gbps: list[float] = field(default_factory=lambda: [0.1, 0.3, 1.0, 3.0, 10.0])
    cores_per_port: list[float] = field(default_factory=lambda: [0.25, 0.5, 1.0, 2.0, 8.0])
    contour: float = 1.47  # the speed-up drawn as a line on the map (the paper's CCT number)

    def __post_init__(self) -> None:
        _check_trace_and_jobs(self)
        for k in ("bandwidth_gbps", "cores_per_port"):
            v = getattr(self, k)
            if not v or any(x <= 0 for x in v):
                raise ValueError(f"{k} must be a non-empty list of positive numbers")


@dataclass
class AblationParams:
    max_coflows: int | None = None
    gru_steps: int = 1500  # training steps of the CPU-load predictor the scheduler uses
    port_gbps: float = 1.0
    cores_per_port: float = 0.25  # where CPU is scarce enough for prediction and pipelining to matter
    codecs: list[str] = field(default_factory=lambda: ["lz4", "snappy", "zstd", "lz4_readme"])

    def __post_init__(self) -> None:
        _check_trace_and_jobs(self)
        bad = [c for c in self.codecs if c not in (*CODECS, "lz4_readme")]
        if bad:
            raise ValueError(f"unknown codecs {bad}")


@dataclass
class PredictorParams:
    sources: list[str] = field(default_factory=lambda: ["bitbrains", "azure"])
    window: int = 12
    hidden: int = 32
    steps: int = 1500
    eval_stride: int = 5

    def __post_init__(self) -> None:
        bad = [s for s in self.sources if s not in CPU_TRACES]
        if bad:
            raise ValueError(f"unknown CPU traces {bad}")
        if self.window < 2 or self.hidden < 1 or self.steps < 1 or self.eval_stride < 1:
            raise ValueError("window >= 2, hidden >= 1, steps >= 1, eval_stride >= 1")


register_schema("hardware", "coflow_fabric", CoflowFabric)
register_schema("policy", "swallow", SwallowPolicy)
