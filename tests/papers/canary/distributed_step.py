"""The real-engine path: Canary's synchronous gradient-exchange step across ``jax.distributed`` processes.

``canary_step_worker`` is a :func:`mlsys_repro.common.collectives.distributed.launch` target; process ``i`` is worker
``i``. Per step every process

1. computes the real gradient of the MLP's cross-entropy on its own shard of MNIST (mini-batch ``t`` of shard
   ``i``; shards and batches follow :func:`shard_batch`, the same for every process);
2. encodes it with the 8-bit per-piece sketch (:func:`mlsys_repro.common.quant.sketch.quantize_checked`: uint8 codes
   plus a float32 ``lo`` and ``scale`` per piece; NaN/Inf gradients raise instead of being encoded);
3. exchanges the sketches: each process writes its codes and metadata into its own slot of an ``[N, ...]`` array
   that is otherwise zero and ``psum``-s it over all processes, which is an exact all-gather (every slot holds
   one process's values plus zeros), so what crosses the processes is each worker's sketch, not its fp32
   gradient;
4. decodes the ``N`` sketches and sums them in process order (so every process gets the same bits), then applies
   the same update ``theta <- theta - (lr / N) * sum_i decode(sketch_i)``.

This is the synchronous (staleness 0) form of Canary's exchange in which every process is a piece owner for all
pieces (two processes: BCube's tree degenerates to one exchange between the two); the asynchronous, multi-NIC
schedule is what the discrete-event model (:mod:`mlsys_repro.papers.canary.protocols`) times.

:func:`simulated_step` runs the same steps in one process (the same jitted gradient and sketch kernels, the same
order of summation), so the parameters of every process must equal it bit for bit.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class StepJob:
    """What every process needs to run the same steps (picklable: it is sent to the processes)."""

    data_dir: str
    steps: int = 1
    seed: int = 0
    lr: float = 0.1
    batch: int = 32
    n_train: int = 1024
    hidden: int = 32
    piece_elems: int = 4096

    def __post_init__(self) -> None:
        if self.steps < 1 or self.batch < 1 or self.piece_elems < 1 or self.lr <= 0:
            raise ValueError("steps, batch and piece_elems must be >= 1 and lr > 0")


@functools.lru_cache(maxsize=4)
def _task(job: StepJob):
    """``(grad_fn, theta0, x_train, y_train)``: a jitted flat-parameter gradient of the MLP on MNIST."""
    import jax
    from jax.flatten_util import ravel_pytree

    from mlsys_repro.common.models.data import load_image_data
    from mlsys_repro.common.models.small import cross_entropy, make_model, pure

    data = load_image_data("mnist", job.data_dir, n_train=job.n_train, n_test=10, seed=job.seed)
    apply, params = pure(make_model("mlp", data.in_shape, data.num_classes, seed=job.seed, hidden=job.hidden))
    theta0, unravel = ravel_pytree(params)

    @jax.jit
    def grad_fn(theta, x, y):
        return jax.grad(lambda th: cross_entropy(apply(unravel(th), x), y))(theta)

    return grad_fn, np.asarray(theta0), data.x_train, data.y_train


def shard_batch(job: StepJob, num_workers: int, worker: int, step: int) -> np.ndarray:
    """Indices of worker ``worker``'s mini-batch at ``step``: contiguous shards, batches cycling in each shard."""
    shard = job.n_train // num_workers
    if shard < job.batch:
        raise ValueError(f"{job.n_train} examples cannot give {num_workers} workers a batch of {job.batch}")
    pos = (step * job.batch + np.arange(job.batch)) % shard
    return worker * shard + pos


def local_sketch(job: StepJob, theta: np.ndarray, num_workers: int, worker: int, step: int):
    """Worker ``worker``'s sketched gradient at ``theta`` as host arrays ``(codes uint8 [P, L], lo [P], scale [P])``."""
    from mlsys_repro.common.quant.sketch import quantize_checked

    grad_fn, _, x, y = _task(job)
    idx = shard_batch(job, num_workers, worker, step)
    g = np.asarray(grad_fn(theta, x[idx], y[idx]))
    sk = quantize_checked(g, job.piece_elems, where=f"worker {worker}, step {step}")
    return np.asarray(sk.codes), np.asarray(sk.lo), np.asarray(sk.scale)


def decode_sum(codes: np.ndarray, lo: np.ndarray, scale: np.ndarray, n: int) -> np.ndarray:
    """Sum over workers (in worker order) of the decoded sketches ``codes [N, P, L]``, ``lo/scale [N, P]``."""
    from mlsys_repro.common.quant.sketch import Sketch, dequantize

    total = np.zeros(n, np.float32)
    for w in range(codes.shape[0]):
        total = total + np.asarray(dequantize(Sketch(codes[w].astype(np.uint8), lo[w], scale[w]), n))
    return total


def apply_update(theta: np.ndarray, summed: np.ndarray, lr: float, num_workers: int) -> np.ndarray:
    return (theta - np.float32(lr / num_workers) * summed).astype(np.float32)


def canary_step_worker(ctx, job: StepJob) -> dict[str, Any]:
    """Worker ``ctx.process_id`` of ``ctx.num_processes``: run ``job.steps`` exchange steps, return the parameters."""
    _, theta0, _, _ = _task(job)
    n_w, me = ctx.num_processes, ctx.process_id
    theta = theta0.copy()
    sent = 0
    for t in range(job.steps):
        codes, lo, scale = local_sketch(job, theta, n_w, me, t)
        slot_codes = np.zeros((n_w, *codes.shape), np.float32)  # codes 0..255 and the metadata are exact in fp32
        slot_meta = np.zeros((n_w, 2, lo.size), np.float32)
        slot_codes[me] = codes
        slot_meta[me] = (lo, scale)
        all_codes = ctx.psum(slot_codes)
        all_meta = ctx.psum(slot_meta)
        theta = apply_update(theta, decode_sum(all_codes, all_meta[:, 0], all_meta[:, 1], theta.size), job.lr, n_w)
        # this worker's sketch on the wire (mlsys_repro.common.quant.sketch.wire_bytes)
        sent += theta.size + 8 * lo.size
    return {"process_id": me, "params": theta, "theta0": theta0, "sketch_bytes_sent": sent}


def simulated_step(job: StepJob, num_workers: int) -> np.ndarray:
    """The parameters after ``job.steps`` of the same exchange computed in this process for ``num_workers``."""
    _, theta0, _, _ = _task(job)
    theta = theta0.copy()
    for t in range(job.steps):
        sks = [local_sketch(job, theta, num_workers, w, t) for w in range(num_workers)]
        codes, lo, scale = (np.stack(a) for a in zip(*sks, strict=True))
        theta = apply_update(theta, decode_sum(codes, lo, scale, theta.size), job.lr, num_workers)
    return theta


__all__ = ["StepJob", "apply_update", "canary_step_worker", "decode_sum", "local_sketch", "shard_batch",
           "simulated_step"]
