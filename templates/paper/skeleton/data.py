"""The skeleton's data: the job stream each seed sees (gaps between arrivals and job sizes), loaded once per run
through ``ctx.cache`` (the cache keys are here).

A real paper loads its vendored data here: a trace under ``data/`` with a provenance README, read through
``mlsys_repro.common.traces.load_trace(ctx.trace, ctx.data_dir)`` and keyed in ``ctx.cache`` by the file and the
options that shape it (see mlsys_repro/papers/swallow/data.py). The skeleton has no data to ship, so it draws a
synthetic stream from a seeded generator instead: Poisson arrivals at unit rate and exponential sizes of mean 1
(the pipeline scales the gaps to the load)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mlsys_repro.common.repro import RunContext

MEAN_SIZE = 1.0  # work units


@dataclass(frozen=True)
class Jobs:
    """One job stream per seed, in arrival order: ``gap`` [seeds, N] (mean 1) and ``size`` [seeds, N] work units."""

    seeds: tuple[int, ...]
    gap: np.ndarray
    size: np.ndarray


def draw_jobs(seeds: tuple[int, ...], num_jobs: int) -> Jobs:
    """Each seed's stream from its own generator, so seed ``s`` sees the same jobs whatever other seeds run."""
    gap, size = [], []
    for s in seeds:
        rng = np.random.default_rng(np.random.SeedSequence([0x5CE1, int(s)]))
        gap.append(rng.exponential(1.0, num_jobs))
        size.append(rng.exponential(MEAN_SIZE, num_jobs))
    return Jobs(tuple(seeds), np.stack(gap).astype(np.float32), np.stack(size).astype(np.float32))


def jobs(ctx: RunContext, num_jobs: int) -> Jobs:
    """The job streams of the run's seeds (drawn once per run, see ``ctx.cache``)."""
    seeds = tuple(int(s) for s in ctx.seeds())
    return ctx.cache.get("skeleton.jobs", (seeds, num_jobs), lambda: draw_jobs(seeds, num_jobs))
