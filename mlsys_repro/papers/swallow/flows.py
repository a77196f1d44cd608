"""From a coflow-benchmark trace to fixed-shape flow tables, under explicit simulator conventions.

The trace gives, per coflow, its arrival, mapper ports and per-reducer received MB. Turning that into flows is a
convention, and the coflow literature uses coflowsim's (``CoflowBenchmarkTraceProducer`` + ``Job.arrangeTasks``):

* 1 MB = 2**20 bytes; each reducer's bytes are first rounded up to whole MB, then (``mb_round="mappers"``) up to a
  multiple of ``M`` MB, and split evenly over the ``M`` mappers; every flow is at least 1 MB;
* coflows are ordered by arrival (stable), and one ``deadlineMult = 1 + U[0,1)`` is drawn per coflow, in that
  order, from ``java.util.Random(17)``; it only matters for the back-fill order of the SEBF family;
* static keys computed once: SEBF ``alpha = max(total/M, max reducer bytes)`` (largest bytes at one port),
  SCF ``max reducer bytes / M``, NCF ``min(M, R)``, LCF the un-rounded-to-M total.

Flows are laid out coflow by coflow (arrival order), inside a coflow reducer port ascending, then mapper port
ascending: this is the order coflowsim visits them, which the back-fill pass depends on.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsys_repro.common.traces import CoflowTrace
from mlsys_repro.papers.swallow.javarand import JavaRandom

MIB = 1048576.0


@dataclass(frozen=True)
class Conventions:
    """Trace-to-flow conventions; the defaults are coflowsim's."""

    mb_bytes: float = MIB
    mb_round: str = "mappers"  # "mappers" (coflowsim) | "none" (exact MB/M split)
    min_flow_mb: float = 1.0  # coflowsim's createFlows floor
    deadline_seed: int = 17
    deadline_mult_factor: float = 1.0  # coflowsim main: 1 (DARK passes 0; unused there)

    def __post_init__(self) -> None:
        if self.mb_round not in ("mappers", "none"):
            raise ValueError(f"mb_round must be 'mappers' or 'none', got {self.mb_round!r}")
        if self.mb_bytes <= 0:
            raise ValueError("mb_bytes must be positive")


@dataclass(frozen=True)
class FlowTable:
    """Fixed-shape description of a trace: C coflows, R reducers, F flows, P ports (numpy, read-only).

    Bytes are float64. ``cof_*`` arrays are in arrival order; ``cof_id`` keeps the trace ids.
    """

    num_ports: int
    cof_id: np.ndarray  # int64 [C]
    cof_arrival_ms: np.ndarray  # float64 [C]
    cof_first_red: np.ndarray  # int32 [C]
    cof_num_red: np.ndarray  # int32 [C]
    cof_first_flow: np.ndarray  # int32 [C]
    cof_num_flow: np.ndarray  # int32 [C]
    cof_num_map: np.ndarray  # int32 [C]
    cof_bytes: np.ndarray  # float64 [C] total after rounding
    cof_orig_bytes: np.ndarray  # float64 [C] total before the multiple-of-M rounding
    cof_alpha: np.ndarray  # float64 [C] SEBF static alpha (bytes)
    cof_scf_key: np.ndarray  # float64 [C]
    cof_ncf_key: np.ndarray  # int32 [C]
    cof_deadline_mult: np.ndarray  # float64 [C]
    cof_bin: np.ndarray  # int32 [C] 0 SN, 1 LN, 2 SW, 3 LW (Varys bins on the raw trace)
    red_cof: np.ndarray  # int32 [R]
    red_port: np.ndarray  # int32 [R]
    red_bytes: np.ndarray  # float64 [R]
    red_orig_bytes: np.ndarray  # float64 [R]
    flow_cof: np.ndarray  # int32 [F]
    flow_red: np.ndarray  # int32 [F]
    flow_src: np.ndarray  # int32 [F]
    flow_dst: np.ndarray  # int32 [F]
    flow_bytes: np.ndarray  # float64 [F]
    map_cof: np.ndarray  # int32 [Mtot] one entry per (coflow, mapper port)
    map_port: np.ndarray  # int32 [Mtot]

    @property
    def num_coflows(self) -> int:
        return int(self.cof_id.size)

    @property
    def num_reducers(self) -> int:
        return int(self.red_cof.size)

    @property
    def num_flows(self) -> int:
        return int(self.flow_cof.size)

    @property
    def total_bytes(self) -> float:
        return float(self.flow_bytes.sum())


BIN_NAMES = ("SN", "LN", "SW", "LW")


def varys_bin(mappers: int, reducer_mb: np.ndarray) -> int:
    """Varys bins: long iff the longest flow (max reducer MB / M) is >= 5 MB; wide iff M*R > 50 flows."""
    long_ = float(np.max(reducer_mb)) / mappers >= 5.0
    wide = mappers * reducer_mb.size > 50
    return int(long_) + 2 * int(wide)


def build_flow_table(trace: CoflowTrace, conv: Conventions = Conventions(),
                     max_coflows: int | None = None) -> FlowTable:
    """Flows of ``trace`` (optionally only its first ``max_coflows`` coflows by arrival) under ``conv``."""
    order = sorted(range(len(trace.coflows)), key=lambda i: trace.coflows[i].arrival_ms)  # stable, like Java
    if max_coflows is not None:
        if max_coflows < 1:
            raise ValueError(f"max_coflows must be >= 1, got {max_coflows}")
        order = order[:max_coflows]
    mb = conv.mb_bytes
    rng = JavaRandom(conv.deadline_seed)
    cols: dict[str, list] = {k: [] for k in (
        "cid", "arr", "fr", "nr", "ff", "nf", "nm", "bytes", "orig", "alpha", "scf", "ncf", "mult", "bin")}
    red_cof, red_port, red_bytes, red_orig = [], [], [], []
    fl_cof, fl_red, fl_src, fl_dst, fl_bytes = [], [], [], [], []
    map_cof, map_port = [], []
    for ci, k in enumerate(order):
        c = trace.coflows[k]
        mappers = np.sort(np.asarray(c.mappers, np.int64))
        ridx = np.argsort(c.reducers, kind="stable")
        reducers = np.asarray(c.reducers, np.int64)[ridx]
        rmb = np.asarray(c.reducer_mb, np.float64)[ridx]
        m = int(mappers.size)
        # reducer bytes rounded up to whole MB (ReduceTask constructor), then to a multiple of M MB
        orig = np.array([_round_up_bytes(x * mb, mb) for x in rmb])
        if conv.mb_round == "mappers":
            rbytes = np.array([_round_up_bytes(x, m * mb) for x in orig])
        else:
            rbytes = rmb * mb
        flow_sz = np.maximum(rbytes / m, conv.min_flow_mb * mb)
        total = float(rbytes.sum())
        alpha = max(_java_max(np.full(m, total / m)), _java_max(rbytes))
        cols["cid"].append(c.id)
        cols["arr"].append(float(c.arrival_ms))
        cols["fr"].append(len(red_cof))
        cols["nr"].append(reducers.size)
        cols["ff"].append(len(fl_cof))
        cols["nf"].append(m * reducers.size)
        cols["nm"].append(m)
        cols["bytes"].append(total)
        cols["orig"].append(float(orig.sum()))
        cols["alpha"].append(alpha)
        cols["scf"].append(float(rbytes.max()) / m)
        cols["ncf"].append(min(m, int(reducers.size)))
        cols["mult"].append(1.0 + rng.next_double() * conv.deadline_mult_factor)
        cols["bin"].append(varys_bin(m, np.asarray(c.reducer_mb, np.float64)))
        for j, port in enumerate(reducers):
            r = len(red_cof)
            red_cof.append(ci)
            red_port.append(int(port))
            red_bytes.append(float(rbytes[j]))
            red_orig.append(float(orig[j]))
            fl_cof.extend([ci] * m)
            fl_red.extend([r] * m)
            fl_src.extend(mappers.tolist())
            fl_dst.extend([int(port)] * m)
            fl_bytes.extend([float(flow_sz[j])] * m)
        map_cof.extend([ci] * m)
        map_port.extend(mappers.tolist())
    i32 = lambda x: np.asarray(x, np.int32)
    f64 = lambda x: np.asarray(x, np.float64)
    return FlowTable(
        num_ports=trace.num_ports,
        cof_id=np.asarray(cols["cid"], np.int64), cof_arrival_ms=f64(cols["arr"]), cof_first_red=i32(cols["fr"]),
        cof_num_red=i32(cols["nr"]), cof_first_flow=i32(cols["ff"]), cof_num_flow=i32(cols["nf"]),
        cof_num_map=i32(cols["nm"]), cof_bytes=f64(cols["bytes"]), cof_orig_bytes=f64(cols["orig"]),
        cof_alpha=f64(cols["alpha"]), cof_scf_key=f64(cols["scf"]), cof_ncf_key=i32(cols["ncf"]),
        cof_deadline_mult=f64(cols["mult"]), cof_bin=i32(cols["bin"]),
        red_cof=i32(red_cof), red_port=i32(red_port), red_bytes=f64(red_bytes), red_orig_bytes=f64(red_orig),
        flow_cof=i32(fl_cof), flow_red=i32(fl_red), flow_src=i32(fl_src), flow_dst=i32(fl_dst),
        flow_bytes=f64(fl_bytes), map_cof=i32(map_cof), map_port=i32(map_port),
    )


def _round_up_bytes(x: float, mult: float) -> float:
    """coflowsim's roundToNearestNMB: truncate to a long, then round up to a multiple of ``mult`` bytes."""
    tmp = int(x)
    mult = int(mult)
    n = tmp // mult + (1 if tmp % mult > 0 else 0)
    return float(mult * n)


def _java_max(a: np.ndarray) -> float:
    """coflowsim's Utils.max: starts from Double.MIN_VALUE, so it is never below the smallest positive double."""
    return float(max(np.max(a, initial=0.0), np.finfo(np.float64).smallest_subnormal))
