"""Real-engine path: Canary's sketched exchange step over two jax.distributed processes equals one process's
simulation of the same step, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_repro.common.collectives.distributed import hostname_is_loopback, launch
from mlsys_repro.common.quant.sketch import NonFiniteGradientError, wire_bytes
from tests.conftest import DATA
from tests.papers.canary.distributed_step import StepJob, _task, decode_sum, local_sketch, shard_batch, simulated_step

loopback_only = pytest.mark.skipif(
    not hostname_is_loopback(),
    reason="gloo binds to the address the hostname resolves to, which is not a loopback address here; "
           "refusing to open collective ports on an external interface",
)

JOB = StepJob(data_dir=str(DATA), steps=2, seed=5, n_train=512, hidden=16, piece_elems=1000)


@loopback_only
def test_two_process_step_matches_single_process_simulation():
    results = launch(2, "tests.papers.canary.distributed_step:canary_step_worker", JOB, timeout_s=600)
    sim = simulated_step(JOB, num_workers=2)
    assert [r["process_id"] for r in results] == [0, 1]
    for r in results:
        assert np.array_equal(r["params"], sim)
        assert r["sketch_bytes_sent"] == JOB.steps * wire_bytes(sim.size, JOB.piece_elems)
    assert np.abs(sim - results[0]["theta0"]).max() > 0  # real steps moved the parameters


def test_sketched_sum_is_within_the_per_piece_bound_of_the_fp32_sum():
    grad_fn, theta, x, y = _task(JOB)
    sks = [local_sketch(JOB, theta, 2, w, 0) for w in range(2)]
    codes, lo, scale = (np.stack(a) for a in zip(*sks, strict=True))
    got = decode_sum(codes, lo, scale, theta.size)
    exact = sum(np.asarray(grad_fn(theta, x[shard_batch(JOB, 2, w, 0)], y[shard_batch(JOB, 2, w, 0)]))
                for w in range(2))
    bound = np.repeat(scale.sum(0) / 2, JOB.piece_elems)[: theta.size] * (1 + 1e-4) + 1e-7
    assert np.all(np.abs(got - exact) <= bound)
    assert not np.array_equal(got, exact)  # the sketch really rounds


def test_shards_are_disjoint_and_bad_input_is_rejected():
    a, b = shard_batch(JOB, 2, 0, 3), shard_batch(JOB, 2, 1, 3)
    assert not set(a) & set(b) and a.max() < 256 <= b.min()
    with pytest.raises(ValueError):
        shard_batch(StepJob(data_dir=str(DATA), n_train=40, batch=32), 2, 0, 0)
    with pytest.raises(ValueError):
        StepJob(data_dir=str(DATA), piece_elems=0)
    _, theta, _, _ = _task(JOB)
    bad = theta.copy()
    bad[0] = np.nan  # a NaN parameter gives NaN gradients: the sketch must refuse them
    with pytest.raises(NonFiniteGradientError):
        local_sketch(JOB, bad, 2, 0, 0)
