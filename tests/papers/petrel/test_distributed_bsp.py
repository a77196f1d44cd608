"""Real-engine path: BSP over two jax.distributed processes (gloo on 127.0.0.1) equals the simulator's BSP."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_repro.common.collectives.distributed import hostname_is_loopback, launch
from tests.conftest import DATA
from tests.papers.petrel.distributed_bsp import BSPJob, simulated_bsp

pytestmark = pytest.mark.skipif(
    not hostname_is_loopback(),
    reason="gloo binds to the address the hostname resolves to, which is not a loopback address here; "
           "refusing to open collective ports on an external interface",
)


def test_two_process_bsp_matches_simulator_bit_for_bit():
    job = BSPJob(data_dir=str(DATA), steps=3, seed=11, n_train=1024, n_test=100, hidden=16, mode="map")
    results = launch(2, "tests.papers.petrel.distributed_bsp:bsp_worker", job, timeout_s=600)
    sim_w = simulated_bsp(job, num_workers=2)
    assert [r["process_id"] for r in results] == [0, 1]
    for r in results:
        assert np.array_equal(r["params"], sim_w)
    first = results[0]["params"]
    assert np.abs(first - results[0]["w0"]).max() > 0  # three real SGD steps moved the parameters
