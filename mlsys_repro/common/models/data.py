"""Image arrays ready for the models in :mod:`mlsys_repro.common.models.small`: float32, per-channel standardised."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlsys_repro.common.traces.images import load_images

# Per-channel mean/std of the training split, in [0, 1] units (computed on the vendored copies; CIFAR-10 is the
# JPEG q75 copy, whose statistics differ slightly from the canonical ones).
STATS = {
    "mnist": ((0.1307,), (0.3081,)),
    "fashion_mnist": ((0.2860,), (0.3530,)),
    "cifar10_jpeg": ((0.4913, 0.4821, 0.4465), (0.2451, 0.2428, 0.2608)),
}


@dataclass(frozen=True)
class ImageData:
    name: str
    x_train: np.ndarray  # float32 [N, H, W, C]
    y_train: np.ndarray  # int32 [N]
    x_test: np.ndarray
    y_test: np.ndarray

    @property
    def in_shape(self) -> tuple[int, int, int]:
        return tuple(self.x_train.shape[1:])  # type: ignore[return-value]

    @property
    def num_classes(self) -> int:
        return int(max(self.y_train.max(), self.y_test.max())) + 1


def normalise(x_uint8: np.ndarray, name: str) -> np.ndarray:
    mean, std = (np.asarray(s, np.float32) for s in STATS[name])
    return ((x_uint8.astype(np.float32) / 255.0) - mean) / std


def stratified_subset(x: np.ndarray, y: np.ndarray, n: int | None, rng: np.random.Generator, *,
                      shuffle: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """A class-stratified random subset of ``n`` examples (all of them, in order, if ``n`` is None or >= len(y)).

    Each class gets ``n // C`` examples and the first ``n mod C`` classes (in label order) one more, drawn without
    replacement by ``rng``. The subset comes in a random order (``shuffle``) or in the original order.
    """
    if n is None or n >= y.size:
        return x, y
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    classes = np.unique(y)
    per = np.full(classes.size, n // classes.size)
    per[: n - per.sum()] += 1
    idx = np.concatenate([rng.choice(np.flatnonzero(y == c), k, replace=False) for c, k in zip(classes, per,
                                                                                                strict=True)])
    idx = rng.permutation(idx) if shuffle else np.sort(idx)
    return x[idx], y[idx]


def load_image_data(name: str, data_dir: str | Path, n_train: int | None = None, n_test: int | None = None,
                    seed: int = 0) -> ImageData:
    """Load ``mnist``, ``fashion_mnist`` or ``cifar10_jpeg``; optional class-stratified subsets (seeded)."""
    rng = np.random.default_rng(seed)
    kw = {}
    if name == "cifar10_jpeg" and n_train is not None:
        kw = {"limit": int(np.ceil(n_train / 10 * 1.0))}
    xtr, ytr = load_images(name, data_dir, "train", **kw)
    kwt = {"limit": int(np.ceil(n_test / 10))} if name == "cifar10_jpeg" and n_test is not None else {}
    xte, yte = load_images(name, data_dir, "test", **kwt)
    xtr, ytr = stratified_subset(xtr, ytr, n_train, rng)
    xte, yte = stratified_subset(xte, yte, n_test, rng)
    return ImageData(name, normalise(xtr, name), ytr.astype(np.int32), normalise(xte, name), yte.astype(np.int32))
