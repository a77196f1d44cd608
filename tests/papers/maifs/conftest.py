"""Tiny clusters and speed tables shared by the MAIFS tests (hand-made, no trace files)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from mlsys_repro.common.sim.cluster import ClusterSpec, speed_model
from mlsys_repro.papers.maifs.baselines import ModelDemand

CPU_LEVELS = [1.0, 3.0, 6.0, 12.0]
MEM_LEVELS = [20.0, 62.5, 125.0]


def tiny_tables():
    """The tiny speed tables and demands: model 0 is CPU-sensitive (2x at 6 CPUs/GPU), model 1 is not (speed 1)."""
    t = np.ones((2, 4, 3), np.float32)
    t[0] = [[0.3, 0.3, 0.3], [0.5, 1.0, 1.0], [0.5, 2.0, 2.0], [0.5, 2.0, 2.0]]
    sm = speed_model(t, CPU_LEVELS, MEM_LEVELS, [0.5, 0.8])
    md = ModelDemand(jnp.array([6.0, 1.0]), jnp.array([62.5, 20.0]))
    return sm, md


@pytest.fixture
def tiny():
    """2 servers x (4 GPUs, 12 CPUs, 250 GB) with :func:`tiny_tables`."""
    spec = ClusterSpec.uniform(1, 2, 4, 12.0, 250.0)
    sm, md = tiny_tables()
    return spec, spec.arrays(), sm, md
