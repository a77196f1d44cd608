"""mlsys_repro.common.collectives.distributed: N real jax.distributed processes on loopback, results back in order."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys_repro.common.collectives.distributed import DistributedError, hostname_is_loopback, launch

needs_loopback = pytest.mark.skipif(
    not hostname_is_loopback(),
    reason="gloo binds to the hostname's address, which is not loopback here; skipping real multi-process runs",
)


@needs_loopback
def test_two_processes_psum():
    res = launch(2, "mlsys_repro.common.collectives.distributed:psum_check", 5, timeout_s=300)
    assert [r["process_id"] for r in res] == [0, 1]
    for r in res:
        assert r["num_processes"] == 2
        np.testing.assert_array_equal(r["sum"], np.full(5, 3.0, np.float32))


@needs_loopback
def test_failing_target_reports_its_output():
    with pytest.raises(DistributedError, match="No module named|ModuleNotFoundError"):
        launch(2, "mlsys_repro.common.collectives.no_such_module:f", None, timeout_s=300)


def test_bad_arguments():
    with pytest.raises(ValueError, match="n_processes"):
        launch(0, "a:b")
    with pytest.raises(ValueError, match="module:function"):
        launch(1, "no_colon")
