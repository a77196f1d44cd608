"""Shared fixtures: one small real MNIST task (loaded once per session) and a simulator factory."""

from __future__ import annotations

import pytest

from tests.conftest import DATA

# the small cluster and one policy of every kind that the simulator tests share
SMALL_HW_KW = dict(num_workers=6, class_speeds=[1.0, 0.5, 0.2], straggler_prob=0.05, regime_shift_prob=0.02)


def small_hw(**kw):
    from mlsys_repro.papers.petrel.schemas import PSClusterHardware

    return PSClusterHardware(**{"name": "t", **SMALL_HW_KW, **kw})


def every_kind() -> dict:
    """One SyncPolicy of every mechanism (a fresh dict: callers may add or drop entries)."""
    from mlsys_repro.papers.petrel.schemas import SyncPolicy

    return {
        "bsp": SyncPolicy(name="bsp", kind="bsp"),
        "asp": SyncPolicy(name="asp", kind="asp"),
        "ssp": SyncPolicy(name="ssp", kind="ssp", staleness=2),
        "dssp": SyncPolicy(name="dssp", kind="dssp", staleness_low=1, staleness_high=3),
        "casp_kmeans": SyncPolicy(name="casp_kmeans", kind="casp", grouping="kmeans", num_communities=2),
        "casp_prior": SyncPolicy(name="casp_prior", kind="casp", grouping="prior"),
        "casp_random": SyncPolicy(name="casp_random", kind="casp", grouping="random", num_communities=3),
        "hier_bsp": SyncPolicy(name="hier_bsp", kind="hier_bsp", grouping="index", num_communities=2),
    }


@pytest.fixture(scope="session")
def task():
    from mlsys_repro.papers.petrel.data import load_task

    return load_task("mnist", DATA, model="mlp", hidden=16, n_train=1024, n_test=200, probe_size=64)


@pytest.fixture
def make_sim(task):
    """``make_sim(policy, hw=..., seed=..., **sim_kw) -> (sim, engine)`` for a SyncPolicy on the tiny task."""
    from mlsys_repro.papers.petrel.engine import GradEngine
    from mlsys_repro.papers.petrel.protocols import make_protocol
    from mlsys_repro.papers.petrel.schemas import PSClusterHardware
    from mlsys_repro.papers.petrel.sim import PSSim

    def build(policy, hw: PSClusterHardware | None = None, seed: int = 0, mode: str = "vmap", agent=None, **kw):
        hw = hw or PSClusterHardware(name="t", num_workers=6, class_speeds=[1.0, 0.5, 0.25])
        engine = GradEngine(task, mode=mode)
        grouper, gate = make_protocol(policy, hw.num_workers, hw.communities(), seed, agent)
        args = dict(seed=seed, grad_lr=0.2 / hw.num_workers, batch_size=16, eval_every_grads=0, max_time_s=0.6,
                    decision_every_s=0.1, record=True, label=policy.name)
        args.update(kw)
        return PSSim(engine, hw, grouper, gate, **args), engine

    return build


def run(sim, engine) -> None:
    from mlsys_repro.papers.petrel.sim import run_batch

    run_batch([sim], engine)
