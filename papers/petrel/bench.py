"""Benchmark: simulated worker-iterations per wall-second of the PS simulator with real MNIST gradients.

    PYTHONPATH=$PWD python -m papers.petrel.bench [--workers 32] [--iterations 2000] [--policies bsp asp casp]
                                                 [--modes vmap map] [--seeds 1]

Each run trains the MNIST MLP (hidden 32, global batch 512 -> 16 per worker at 32 workers) on the 4-class 8x
cluster until ``workers * iterations`` gradients have been applied. Gradient requests are computed lazily in
batches (``vmap`` over stacked parameter versions, or ``lax.map`` for the bit-exact mode); ``--seeds`` > 1 runs
several simulations side by side so that their requests share batches. Prints wall and process-CPU seconds,
worker-iterations per wall-second, gradients per flush (the batch the schedule allowed) and the load average.
Compilation is excluded (one short warm-up run per mode).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from papers.petrel.engine import GradEngine, load_task
from papers.petrel.hardware import with_speed_ratio
from papers.petrel.protocols import make_protocol
from papers.petrel.schemas import PSClusterHardware, SyncPolicy
from papers.petrel.sim import PSSim, run_batch

POLICIES = {
    "bsp": SyncPolicy(name="bsp", kind="bsp"),
    "asp": SyncPolicy(name="asp", kind="asp"),
    "ssp": SyncPolicy(name="ssp", kind="ssp", staleness=4),
    "casp": SyncPolicy(name="casp", kind="casp", grouping="kmeans", num_communities=4),
}


def _sims(task, engine, hw, policy, seeds, gradients):
    out = []
    for s in range(seeds):
        grouper, gate = make_protocol(policy, hw.num_workers, hw.communities(), s)
        out.append(PSSim(engine, hw, grouper, gate, seed=s, grad_lr=0.2 / hw.num_workers,
                         batch_size=512 // hw.num_workers, eval_every_grads=0, max_time_s=1e9,
                         decision_every_s=0.5, max_gradients=gradients, label=f"{policy.name}/{s}"))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=32)
    ap.add_argument("--iterations", type=int, default=2000, help="per worker")
    ap.add_argument("--policies", nargs="+", default=["bsp", "asp", "casp"], choices=sorted(POLICIES))
    ap.add_argument("--modes", nargs="+", default=["vmap"], choices=["vmap", "map"])
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--data-dir", default=str(Path(__file__).resolve().parents[2] / "data"))
    a = ap.parse_args(argv)
    task = load_task("mnist", a.data_dir, model="mlp", hidden=32, n_test=200, probe_size=64)
    hw = with_speed_ratio(PSClusterHardware(name="bench", num_workers=a.workers), 8.0)
    total = a.workers * a.iterations
    print(f"# {a.workers} workers x {a.iterations} iterations = {total} worker-iterations per run; "
          f"MLP {task.num_params} params; cpus={os.cpu_count()}")
    print(f"{'mode':5s} {'policy':6s} {'seeds':>5s} {'wall_s':>8s} {'cpu_s':>8s} {'iter/wall-s':>11s} "
          f"{'grads/flush':>11s} {'load1':>6s}")
    for mode in a.modes:
        engine = GradEngine(task, mode=mode)
        for name in a.policies:  # warm-up: compile every bucket this policy uses
            run_batch(_sims(task, engine, hw, POLICIES[name], a.seeds, 4 * a.workers * 8), engine)
        for name in a.policies:
            engine = GradEngine(task, mode=mode)
            sims = _sims(task, engine, hw, POLICIES[name], a.seeds, total)
            t0, c0 = time.perf_counter(), time.process_time()
            run_batch(sims, engine)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            n = sum(s.grads_applied for s in sims)
            print(f"{mode:5s} {name:6s} {a.seeds:5d} {wall:8.1f} {cpu:8.1f} {n / wall:11.0f} "
                  f"{engine.gradients_computed / max(engine.flushes, 1):11.1f} {os.getloadavg()[0]:6.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
