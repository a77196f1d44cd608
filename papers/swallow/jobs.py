"""Job completion time (JCT) model: map stage, then the shuffle coflow, then the reduce stage.

The trace gives shuffles only, so compute stages are a declared assumption [our design]: each job's map and
reduce stages together take ``kappa`` times its isolated shuffle time at a reference 1 Gbps (its bottleneck bytes
over one port's rate), split evenly between map and reduce, with ``kappa ~ LogNormal(log 2, 0.5)`` drawn per job
and seed. A median of 2 puts the shuffle at one third of an uncontended job, the average share Orchestra
(SIGCOMM'11) reports for Facebook's MapReduce jobs. The coflow's trace arrival is the end of its map stage, so

    JCT = map + CCT + reduce.

Compute stages do not depend on the network policy (compression runs pipelined with the shuffle), so a policy
changes JCT only through CCT.
"""

from __future__ import annotations

import numpy as np

from papers.swallow.workload import FlowTable

REF_PORT_BPS = 2.0**30  # the coflowsim "1 Gbps"


def compute_stages_s(ft: FlowTable, seed: int, median_kappa: float = 2.0, sigma: float = 0.5,
                     ref_port_bps: float = REF_PORT_BPS) -> tuple[np.ndarray, np.ndarray]:
    """``(map_s, reduce_s)`` per coflow (seconds of the simulator's clock) for one seed."""
    if median_kappa <= 0 or sigma < 0:
        raise ValueError("median_kappa must be positive and sigma non-negative")
    rng = np.random.default_rng(np.random.SeedSequence([20181, int(seed)]))
    kappa = median_kappa * np.exp(sigma * rng.standard_normal(ft.num_coflows))
    iso = ft.cof_alpha * 8.0 / ref_port_bps
    return 0.5 * kappa * iso, 0.5 * kappa * iso


def jct_s(cct_s: np.ndarray, map_s: np.ndarray, reduce_s: np.ndarray) -> np.ndarray:
    return map_s + cct_s + reduce_s
