"""The training task: the vendored MNIST (or CIFAR-10 JPEG) images as a :class:`~mlsys_repro.papers.petrel.engine.Task`,
loaded once per run through the run cache, keyed by what determines it."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mlsys_repro.common.models.data import stratified_subset
from mlsys_repro.common.repro import RunContext
from mlsys_repro.common.traces.images import load_images
from mlsys_repro.papers.petrel.engine import Task
from mlsys_repro.papers.petrel.schemas import PetrelParams


def load_task(dataset: str, data_dir: str | Path, *, model: str = "mlp", n_train: int = 0, n_test: int = 2000,
              seed: int = 0, probe_size: int = 512, **model_kw) -> Task:
    """A :class:`Task` on the vendored ``mnist`` or ``cifar10_jpeg`` data (stratified subsets when asked)."""
    rng = np.random.default_rng([seed, 0xDA7A])
    data_dir = Path(data_dir)
    kw = {"limit": int(np.ceil(n_train / 10))} if dataset == "cifar10_jpeg" and n_train else {}
    xtr, ytr = load_images(dataset, data_dir, "train", **kw)
    kwt = {"limit": int(np.ceil(n_test / 10))} if dataset == "cifar10_jpeg" else {}
    xte, yte = load_images(dataset, data_dir, "test", **kwt)
    xtr, ytr = stratified_subset(xtr, ytr, n_train or None, rng, shuffle=False)
    xte, yte = stratified_subset(xte, yte, n_test, rng, shuffle=False)
    if xtr.ndim == 3:
        xtr, xte = xtr[..., None], xte[..., None]
    return Task(xtr, ytr, xte, yte, dataset=dataset, model=model, init_seed=seed, probe_size=probe_size, **model_kw)


def task_for(ctx: RunContext) -> Task:
    """The training task of ``ctx.params`` (loaded once per run: loading MNIST takes seconds)."""
    p: PetrelParams = ctx.params
    model_kw = {"hidden": p.hidden} if p.model == "mlp" else {}
    key = (p.dataset, p.model, model_kw, p.n_train, p.n_test, p.probe_size, ctx.data_dir)
    return ctx.cache.get("petrel.task", key, lambda: load_task(
        p.dataset, ctx.data_dir, model=p.model, n_train=p.n_train, n_test=p.n_test, probe_size=p.probe_size,
        **model_kw))
