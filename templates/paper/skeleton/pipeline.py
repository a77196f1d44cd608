"""The skeleton's pipeline: a setting (policy, number of jobs, load) -> the simulator's inputs (the seeds' job streams
scaled to the load and the server's rate) -> :func:`sim.simulate_seeds` -> metrics. Experiments build settings and
format rows; everything between is here."""

from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from mlsys_repro.common.repro import RunContext
from skeleton import sim
from skeleton.data import MEAN_SIZE, Jobs, jobs
from skeleton.schemas import QueuePolicy, QueueServer


@dataclass(frozen=True)
class Setting:
    """One simulated configuration: a policy run on every seed of the experiment."""

    policy: str
    num_jobs: int
    load: float


@dataclass(frozen=True)
class WaitMetrics:
    """Per-seed waiting-time metrics of one setting (each [seeds], simulated seconds)."""

    seeds: tuple[int, ...]
    mean_wait_s: np.ndarray
    p95_wait_s: np.ndarray

    def as_metrics(self) -> dict[str, tuple[np.ndarray, str]]:
        """``{metric: (values per seed, unit)}`` for :func:`mlsys_repro.common.repro.metric_rows`."""
        return {"mean_wait_s": (self.mean_wait_s, "s"), "p95_wait_s": (self.p95_wait_s, "s")}


def sim_inputs(hw: QueueServer, jb: Jobs, load: float) -> tuple[jnp.ndarray, jnp.ndarray]:
    """Arrival and service times (s) of every seed's jobs: arrivals at rate ``load * service_rate / MEAN_SIZE``."""
    rate = load * hw.service_rate / MEAN_SIZE
    return jnp.asarray(np.cumsum(jb.gap / rate, axis=1)), jnp.asarray(jb.size / hw.service_rate)


def run_setting(ctx: RunContext, x: Setting, policy: QueuePolicy | None = None) -> WaitMetrics:
    """Simulate ``x`` on the run's seeds and reduce each seed's waits to its metrics."""
    pol = policy or ctx.policies[x.policy]
    jb = jobs(ctx, x.num_jobs)
    arrival, service = sim_inputs(ctx.hardware, jb, x.load)
    wait = np.asarray(sim.simulate_seeds(arrival, service, sim.ORDER_CODES[pol.order]), np.float64)
    return WaitMetrics(jb.seeds, wait.mean(axis=1), np.percentile(wait, 95, axis=1))
