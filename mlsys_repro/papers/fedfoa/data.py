"""The image sets a FedSSL experiment uses, carved from the vendored datasets (uint8, never normalised here).

From the training split: an unlabelled SSL *pool* (split among clients; its labels are used only to draw the
Dirichlet partition, for the linear probe and for the 1 % / 10 % fine-tuning subsets), a disjoint *public* set
(only the KD baseline reads it) and a disjoint labelled *validation* slice (for ablations; never the test set).
From the test split: a class-stratified *test* subset. Selection is a fixed function of ``seed`` and sizes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlsys_repro.common.fl.partition import split_public
from mlsys_repro.common.models.data import STATS
from mlsys_repro.common.traces.images import fashion_mnist_dir, load_images

DATASETS = tuple(STATS)


class EmptyShardError(ValueError):
    """A client was given no examples (its shard cannot be sampled)."""


@dataclass(frozen=True)
class SSLData:
    name: str
    pool_x: np.ndarray  # uint8 [N, H, W, C]
    pool_y: np.ndarray  # int32 [N]
    public_x: np.ndarray  # uint8 [P, H, W, C] (KD baseline only)
    val_x: np.ndarray
    val_y: np.ndarray
    test_x: np.ndarray
    test_y: np.ndarray
    mean: np.ndarray  # float32 [C], channel statistics in [0, 1] units
    std: np.ndarray

    @property
    def num_classes(self) -> int:
        return int(max(self.pool_y.max(), self.test_y.max())) + 1


def available(name: str, data_dir: str | Path) -> bool:
    """Fashion-MNIST comes from a Debian package and may be absent; the others are vendored."""
    if name == "fashion_mnist":
        return fashion_mnist_dir(data_dir) is not None
    return name in DATASETS


def _stratified(y: np.ndarray, n: int, seed: int) -> np.ndarray:
    """Sorted indices of a class-stratified random subset of size ``n`` (all of ``y`` if ``n >= len(y)``)."""
    if n >= y.size:
        return np.arange(y.size)
    _, sub = split_public(y, n, seed=seed)
    return sub


def load_ssl_data(name: str, data_dir: str | Path, *, n_pool: int, n_public: int, n_val: int, n_test: int,
                  seed: int = 0) -> SSLData:
    """Load ``name`` (``cifar10_jpeg``, ``mnist`` or ``fashion_mnist``) and carve pool/public/val/test."""
    if name not in DATASETS:
        raise ValueError(f"unknown dataset {name!r}; known: {DATASETS}")
    if min(n_pool, n_test) < 10 or min(n_public, n_val) < 0:
        raise ValueError(f"need n_pool, n_test >= 10 and n_public, n_val >= 0; got {n_pool}, {n_test}, "
                         f"{n_public}, {n_val}")
    need = n_pool + n_public + n_val
    kw = {"limit": math.ceil(need / 10)} if name == "cifar10_jpeg" else {}
    x, y = load_images(name, data_dir, "train", **kw)
    if need > y.size:
        raise ValueError(f"{name}: pool + public + val = {need} exceeds the {y.size} training images")
    rng_seed = 10_000 + seed
    keep = _stratified(y, need, rng_seed)
    x, y = x[keep], y[keep]
    if need > n_pool:
        pool, rest = split_public(y, need - n_pool, seed=rng_seed + 1)
    else:
        pool, rest = np.arange(y.size), np.zeros(0, np.int64)
    pub = val = np.zeros(0, np.int64)
    if n_public and n_val:
        r_rest, pub_local = split_public(y[rest], n_public, seed=rng_seed + 2)
        pub, val = rest[pub_local], rest[r_rest]
    elif n_public:
        pub = rest
    elif n_val:
        val = rest
    kwt = {"limit": math.ceil(n_test / 10)} if name == "cifar10_jpeg" else {}
    xt, yt = load_images(name, data_dir, "test", **kwt)
    t = _stratified(yt, n_test, rng_seed + 3)
    mean, std = (np.asarray(s, np.float32) for s in STATS[name])
    public_x = x[pub] if pub.size else x[:1]
    return SSLData(name, x[pool], y[pool].astype(np.int32), public_x, x[val], y[val].astype(np.int32), xt[t],
                   yt[t].astype(np.int32), mean, std)


def check_shards(counts: np.ndarray, where: str = "") -> None:
    """Raise EmptyShardError naming the first client without examples (``counts`` is ``[K]`` or ``[S, K]``)."""
    c = np.atleast_2d(np.asarray(counts))
    bad = np.argwhere(c < 1)
    if bad.size:
        row, k = (int(v) for v in bad[0])
        at = f" (partition {row})" if c.shape[0] > 1 else ""
        raise EmptyShardError(f"{where}client {k}{at} has an empty shard; every client needs >= 1 example "
                              "(raise the Dirichlet alpha or min_per_client, use fewer clients or a larger pool)")
