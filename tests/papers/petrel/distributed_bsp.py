"""The real-engine path: BSP steps run as ``jax.distributed`` processes (one worker per process, gloo all-reduce).

``bsp_worker`` is a :func:`mlsys_repro.common.collectives.distributed.launch` target. Process ``i`` plays worker ``i``
of the simulator: it draws the same mini-batches (:class:`mlsys_repro.papers.petrel.sim.ShardSampler` with the same
seed), computes its gradient with the same compiled function, all-reduces the gradients (``psum``) and applies
``w <- w - (lr / N) * sum_i g_i`` on the host, exactly as the simulated PS does. With two processes the float32
sum is order-independent, so the parameters must match the simulator's BSP run bit for bit.

``simulated_bsp`` runs the same number of BSP rounds in the discrete-event simulator for comparison.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from mlsys_repro.papers.petrel.data import load_task
from mlsys_repro.papers.petrel.engine import GradEngine, single_gradient
from mlsys_repro.papers.petrel.schemas import PSClusterHardware
from mlsys_repro.papers.petrel.sim import PSSim, ShardSampler


@dataclass(frozen=True)
class BSPJob:
    data_dir: str
    steps: int = 3
    seed: int = 0
    lr: float = 0.2
    batch_size: int = 32
    n_train: int = 2048
    n_test: int = 200
    hidden: int = 32
    mode: str = "map"


def _task(job: BSPJob):
    return load_task("mnist", job.data_dir, model="mlp", hidden=job.hidden, n_train=job.n_train,
                     n_test=job.n_test, probe_size=8)


def bsp_worker(ctx, job: BSPJob) -> dict[str, Any]:
    """Worker ``ctx.process_id`` of a ``ctx.num_processes``-worker BSP job; returns the final parameters."""
    task = _task(job)
    sampler = ShardSampler(task.n_train, ctx.num_processes, job.batch_size, job.seed)
    w = task.w0.copy()
    lr = np.float32(job.lr / ctx.num_processes)
    for _ in range(job.steps):
        g, _ = single_gradient(task, w, sampler.next(ctx.process_id), mode=job.mode)
        w = w - lr * ctx.psum(g)
    return {"process_id": ctx.process_id, "params": w, "w0": task.w0}


def simulated_bsp(job: BSPJob, num_workers: int) -> np.ndarray:
    """Parameters after ``job.steps`` BSP rounds of the discrete-event simulator (same seeds)."""
    from mlsys_repro.papers.petrel.protocols import AllInOne

    task = _task(job)
    engine = GradEngine(task, mode=job.mode)
    hw = PSClusterHardware(name="parity", num_workers=num_workers, class_speeds=[1.0])
    sim = PSSim(engine, hw, AllInOne(), seed=job.seed, grad_lr=job.lr / num_workers, batch_size=job.batch_size,
                eval_every_grads=0, max_time_s=1e9, max_updates=job.steps)
    while not sim.done:
        sim.run_until_blocked()
        engine.flush()
    return sim.w
