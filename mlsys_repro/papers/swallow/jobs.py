"""Job completion time (JCT) model: map stage, map-output spill, the shuffle coflow, reduce-side merge, reduce stage.

The trace gives shuffles only, so everything else is a declared assumption [ours]:

* Compute: each job's map and reduce stages together take ``kappa`` times its isolated shuffle time at a reference
  1 Gbps (its bottleneck bytes over one port's rate), split evenly between map and reduce, with
  ``kappa ~ LogNormal(log 2, 0.5)`` drawn per job and seed. A median of 2 puts the shuffle at one third of an
  uncontended job, the average share Orchestra (SIGCOMM'11) reports for Facebook's MapReduce jobs.
* Disk I/O (Hadoop/Spark write map output to local disk before the shuffle and the reducers merge what they fetch
  through disk): each mapper writes its share of the shuffle bytes, and each reducer reads back what it received,
  at ``disk_Bps`` per host. A policy that compresses the shuffle compresses map output as it is produced, so both
  I/O stages move the coflow's *wire* bytes (compressed volume), not its raw bytes. The disk bandwidth is stated,
  not measured: 100 MB/s per host, a 2010-era 7200 rpm disk's sequential rate (the hosts of the FB trace); this
  machine's SSD says nothing about those hosts.

The coflow's trace arrival is taken as the end of its map stage, and

    JCT = map + spill + CCT + merge + reduce.

Compute stages do not depend on the policy; spill and merge do, through the compression it achieved, so the JCT
speed-up of a compressing policy can exceed its CCT speed-up (with ``disk_Bps = inf`` it cannot).

Map/shuffle pipelining (``pipelined_jct_s``), a declared assumption [ours]: the map output is produced, spilled,
shuffled and merged in ``chunks`` equal pieces that flow through the four stages map -> spill -> shuffle -> merge
like a pipeline (a piece enters a stage when the stage is free and the piece has left the previous stage), and
each stage processes a piece in ``1/chunks`` of its total time. With stage totals ``T_1..T_4`` and ``n`` equal
pieces the classic pipeline makespan is ``sum_i T_i / n + (n - 1) * max_i T_i / n``, i.e.
``max_i T_i + (sum_i T_i - max_i T_i) / n``; the reduce stage runs after the last merge, so

    JCT = max_i T_i + (sum_i T_i - max_i T_i) / n + reduce,

which lies between ``max_i T_i + reduce`` (n -> inf) and ``jct_s`` (n = 1, equal to it exactly). Why pieces:
Hadoop MapReduce reducers start fetching map outputs while maps still run (``mapreduce.job.reduce.slowstart.
completedmaps``, default 0.05, the fraction of maps done before reducers are scheduled), a map spills its sort
buffer to disk while it keeps producing output, and Hadoop's reduce-side merge (in-memory and on-disk mergers)
runs while the fetch goes on. Spark's reduce stage waits for its whole map stage, so ``chunks=1`` is the
stage-barrier case (and the default of ``jct_s``). The shuffle's total time under a policy is its simulated CCT,
which assumes the coflow's transfer takes the same time when its bytes arrive in pieces: a stated approximation,
since the simulator releases all of a coflow's bytes at its admission (the end of its map stage in the trace).
"""

from __future__ import annotations

import numpy as np

from mlsys_repro.papers.swallow.flows import FlowTable

REF_PORT_BPS = 2.0**30  # the coflowsim "1 Gbps"
DISK_BPS = 100e6  # per-host sequential disk bandwidth (stated assumption, see the module doc)


def compute_stages_s(ft: FlowTable, seed: int, median_kappa: float = 2.0, sigma: float = 0.5,
                     ref_port_bps: float = REF_PORT_BPS) -> tuple[np.ndarray, np.ndarray]:
    """``(map_s, reduce_s)`` per coflow (seconds of the simulator's clock) for one seed."""
    if median_kappa <= 0 or sigma < 0:
        raise ValueError("median_kappa must be positive and sigma non-negative")
    rng = np.random.default_rng(np.random.SeedSequence([20181, int(seed)]))
    kappa = median_kappa * np.exp(sigma * rng.standard_normal(ft.num_coflows))
    iso = ft.cof_alpha * 8.0 / ref_port_bps
    return 0.5 * kappa * iso, 0.5 * kappa * iso


def io_stages_s(ft: FlowTable, wire_fraction: np.ndarray, disk_Bps: float = DISK_BPS) -> tuple[np.ndarray, np.ndarray]:
    """``(spill_s, merge_s)`` per coflow: the busiest mapper writing, and the busiest reducer reading, its bytes at
    ``disk_Bps``, scaled by ``wire_fraction`` (wire bytes / raw bytes of the coflow under the policy; 1 = raw)."""
    if not disk_Bps > 0:
        raise ValueError(f"disk_Bps must be positive (inf: no disk stage), got {disk_Bps}")
    w = np.asarray(wire_fraction, np.float64)
    if w.shape != (ft.num_coflows,) or np.any(~(w > 0)) or np.any(w > 1 + 1e-9):
        raise ValueError("wire_fraction must be one value in (0, 1] per coflow")
    per_mapper = ft.cof_bytes / ft.cof_num_map
    per_reducer = np.zeros(ft.num_coflows)
    np.maximum.at(per_reducer, ft.red_cof, ft.red_bytes)
    return per_mapper * w / disk_Bps, per_reducer * w / disk_Bps


def jct_s(cct_s: np.ndarray, map_s: np.ndarray, reduce_s: np.ndarray, spill_s: np.ndarray | float = 0.0,
          merge_s: np.ndarray | float = 0.0) -> np.ndarray:
    return map_s + spill_s + cct_s + merge_s + reduce_s


def _stage(name: str, x) -> np.ndarray:
    a = np.asarray(x, dtype=np.float64)
    if not np.all(np.isfinite(a)):
        raise ValueError(f"{name} must be finite (no NaN or inf), got {x!r}")
    if np.any(a < 0):
        raise ValueError(f"{name} must be non-negative, got {x!r}")
    return a


def pipelined_jct_s(cct_s: np.ndarray | float, map_s: np.ndarray | float, reduce_s: np.ndarray | float,
                    spill_s: np.ndarray | float = 0.0, merge_s: np.ndarray | float = 0.0,
                    chunks: int | np.ndarray = 1) -> np.ndarray:
    """JCT per coflow with map -> spill -> shuffle -> merge pipelined over ``chunks`` equal pieces, then reduce:
    ``max_i T_i + (sum_i T_i - max_i T_i) / chunks + reduce_s`` over the four stage totals ``T_i`` (module doc).

    Arguments are per-coflow arrays or scalars (broadcast together); times non-negative and finite seconds;
    ``chunks`` integers >= 1. ``chunks=1`` gives ``jct_s`` exactly (the stage barrier)."""
    n = np.asarray(chunks)
    if n.dtype == np.bool_ or not np.issubdtype(n.dtype, np.integer):
        raise ValueError(f"chunks must be integers >= 1, got {chunks!r}")
    if np.any(n < 1):
        raise ValueError(f"chunks must be integers >= 1, got {chunks!r}")
    stages = {"cct_s": cct_s, "map_s": map_s, "reduce_s": reduce_s, "spill_s": spill_s, "merge_s": merge_s}
    a = {k: _stage(k, v) for k, v in stages.items()}
    try:
        mp, sp, cc, mg, rd, n = np.broadcast_arrays(a["map_s"], a["spill_s"], a["cct_s"], a["merge_s"],
                                                    a["reduce_s"], n)
    except ValueError:
        shapes = {k: v.shape for k, v in a.items()} | {"chunks": n.shape}
        raise ValueError(f"stage times and chunks must broadcast to one shape per coflow, got {shapes}") from None
    barrier = mp + sp + cc + mg  # the same sum, in the same order, as jct_s: chunks=1 is bit-identical
    longest = np.maximum(np.maximum(mp, sp), np.maximum(cc, mg))
    piped = longest + (barrier - longest) / n
    # the clip is a no-op in exact arithmetic; it keeps max_i T_i <= makespan <= sum_i T_i under rounding
    makespan = np.where(n == 1, barrier, np.clip(piped, longest, barrier))
    return makespan + rd
