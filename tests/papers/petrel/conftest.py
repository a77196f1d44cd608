"""Shared fixtures: one small real MNIST task (loaded once per session) and a simulator factory."""

from __future__ import annotations

import pytest

from tests.conftest import DATA


@pytest.fixture(scope="session")
def task():
    from mlsys_repro.papers.petrel.engine import load_task

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
