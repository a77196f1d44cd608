"""Benchmark: simulated worker-iterations per wall-second of the PS simulator with real MNIST gradients.

    PYTHONPATH=$PWD python -m mlsys_repro.papers.petrel.bench [--workers 32] [--iterations 2000]
                                [--policies bsp asp casp_kmeans] [--modes vmap map] [--seeds 1]

Each run trains the ``petrel/ablation`` experiment's task (its dataset, model and global batch) with that
experiment's policies on its cluster at ``--workers`` workers and speed ratio 8 until ``workers * iterations``
gradients have been applied: the configs are the experiment's own
(:func:`mlsys_repro.common.repro.bench.bench_context`). Gradient requests are computed lazily in batches (``vmap`` over
stacked parameter versions, or ``lax.map`` for the bit-exact mode); ``--seeds`` > 1 runs several simulations side by
side so that their requests share batches. Prints wall and process-CPU seconds, worker-iterations per wall-second,
gradients per flush (the batch the schedule allowed) and the load average. Compilation is excluded (one short warm-up
run per mode).
"""

from __future__ import annotations

import argparse
import time

from mlsys_repro.common.repro.bench import bench_context, load, machine_line
from mlsys_repro.papers.petrel.data import task_for
from mlsys_repro.papers.petrel.engine import GradEngine
from mlsys_repro.papers.petrel.pipeline import condition_hardware
from mlsys_repro.papers.petrel.protocols import make_protocol
from mlsys_repro.papers.petrel.sim import PSSim, run_batch


def _sims(ctx, task, engine, hw, policy, seeds, gradients):
    out = []
    for s in range(seeds):
        grouper, gate = make_protocol(policy, hw.num_workers, hw.communities(), s)
        out.append(PSSim(engine, hw, grouper, gate, seed=s, grad_lr=ctx.params.grad_lr(hw.num_workers),
                         batch_size=ctx.params.batch_per_worker(hw.num_workers), eval_every_grads=0,
                         max_time_s=1e9, decision_every_s=policy.decision_every_steps * hw.base_step_s,
                         max_gradients=gradients, label=f"{policy.name}/{s}", momentum=ctx.params.momentum))
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=32)
    ap.add_argument("--iterations", type=int, default=2000, help="per worker")
    ap.add_argument("--policies", nargs="+", default=["asp", "casp_kmeans"],
                    help="names from the ablation experiment's policies (not the A3C one: it needs training)")
    ap.add_argument("--modes", nargs="+", default=["vmap"], choices=["vmap", "map"])
    ap.add_argument("--seeds", type=int, default=1)
    a = ap.parse_args(argv)
    ctx = bench_context("petrel/ablation")
    unknown = sorted(set(a.policies) - set(ctx.policies))
    if unknown:
        ap.error(f"unknown policies {unknown}; the ablation's: {sorted(ctx.policies)}")
    task = task_for(ctx)
    hw = condition_hardware(ctx.hardware, ratio=8.0, workers=a.workers)
    total = a.workers * a.iterations
    print(machine_line())
    print(f"# {a.workers} workers x {a.iterations} iterations = {total} worker-iterations per run; "
          f"{ctx.params.model} {task.num_params} params")
    print(f"{'mode':5s} {'policy':6s} {'seeds':>5s} {'wall_s':>8s} {'cpu_s':>8s} {'iter/wall-s':>11s} "
          f"{'grads/flush':>11s} {'load1':>6s}")
    for mode in a.modes:
        engine = GradEngine(task, mode=mode)
        for name in a.policies:  # warm-up: compile every bucket this policy uses
            run_batch(_sims(ctx, task, engine, hw, ctx.policies[name], a.seeds, 4 * a.workers * 8), engine)
        for name in a.policies:
            engine = GradEngine(task, mode=mode)
            sims = _sims(ctx, task, engine, hw, ctx.policies[name], a.seeds, total)
            t0, c0 = time.perf_counter(), time.process_time()
            run_batch(sims, engine)
            wall, cpu = time.perf_counter() - t0, time.process_time() - c0
            n = sum(s.grads_applied for s in sims)
            print(f"{mode:5s} {name:6s} {a.seeds:5d} {wall:8.1f} {cpu:8.1f} {n / wall:11.0f} "
                  f"{engine.gradients_computed / max(engine.flushes, 1):11.1f} {load():6.1f}",
                  flush=True)


if __name__ == "__main__":
    main()
