"""Benchmark of the jit-compiled queue simulator (prints figures; no assertions).

Figures: one FIFO batch of the ``skeleton/headline`` experiment's seeds (first call with compilation, then the
compiled run), the same for SJF (the same program), and jobs per second. The inputs are the experiment's own
(its hardware, params and job streams, through :mod:`mlsys_repro.common.repro.bench`), so the benchmark measures
what ``./reproduce.sh`` runs; ``--jobs`` and ``--seeds`` change the shape.

Run, once the paper is registered in ``conf/`` (templates/paper/README.md):
``PYTHONPATH=$PWD python -m skeleton.bench [--jobs N] [--seeds S] [--repeats R]``.
"""

from __future__ import annotations

import argparse

from mlsys_repro.common.repro.bench import bench_context, machine_line, time_it
from skeleton import sim
from skeleton.data import draw_jobs
from skeleton.pipeline import sim_inputs


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=None, help="jobs per seed (default: the experiment's num_jobs)")
    ap.add_argument("--seeds", type=int, default=None, help="seeds in one batch (default: the experiment's)")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args(argv)
    ctx = bench_context("skeleton/headline")
    n = a.jobs or ctx.params.num_jobs
    seeds = tuple(range(a.seeds or ctx.num_seeds))
    arrival, service = sim_inputs(ctx.hardware, draw_jobs(seeds, n), ctx.params.load)
    print(machine_line())
    for name, code in sim.ORDER_CODES.items():
        t = time_it(f"{name}: {len(seeds)} seeds x {n} jobs", lambda code=code: sim.simulate_seeds(
            arrival, service, code), a.repeats, per="batch")
        print(f"{t.line()}; {len(seeds) * n / t.min_s:,.0f} jobs/s")


if __name__ == "__main__":
    main()
