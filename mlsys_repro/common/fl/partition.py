"""Splitting a labelled training set among federated clients, and carving out a public (unlabelled) set.

All functions are host-side numpy (they run once per experiment) and return index arrays into the caller's
``labels`` array, so the images themselves are never copied per client.

* :func:`split_public` carves a public set from the training split (disjoint from every private pool).
* :func:`dirichlet_partition` gives each client a non-IID share: for every class ``c`` a proportion vector
  ``p_c ~ Dir(alpha * 1_K)`` splits that class's examples among the ``K`` clients (Hsu, Qi and Brown, 2019, the
  split used by FedMD / FedDF / DS-FL follow-ups). ``alpha=None`` (or ``inf``) gives an IID split.
* :func:`pad_partitions` turns the ragged index lists into fixed-shape ``[K, M]`` arrays plus counts, the form
  :mod:`mlsys_repro.common.fl.clients` samples minibatches from inside ``vmap`` / ``lax.scan``.

Bad input raises ``ValueError`` naming the problem: ``alpha <= 0``, labels outside ``[0, num_classes)``, more
clients than samples, a public set as large as the training split.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def check_labels(labels: np.ndarray, num_classes: int | None = None) -> tuple[np.ndarray, int]:
    """``labels`` as a 1-d int64 array plus the class count; raises ValueError on bad values."""
    y = np.asarray(labels)
    if y.ndim != 1:
        raise ValueError(f"labels must be 1-d, got shape {y.shape}")
    if y.size == 0:
        raise ValueError("labels is empty")
    if not np.issubdtype(y.dtype, np.integer):
        if not np.all(np.isfinite(y)) or not np.all(y == np.round(y)):
            raise ValueError(f"labels must be integers, got dtype {y.dtype} with non-integer values")
    y = y.astype(np.int64)
    if num_classes is None:
        num_classes = int(y.max()) + 1
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    bad = np.flatnonzero((y < 0) | (y >= num_classes))
    if bad.size:
        raise ValueError(f"{bad.size} labels outside [0, {num_classes}); first at index {bad[0]}: {y[bad[0]]}")
    return y, int(num_classes)


def _check_alpha(alpha: float | None) -> float | None:
    if alpha is None or (isinstance(alpha, float) and math.isinf(alpha) and alpha > 0):
        return None
    a = float(alpha)
    if not math.isfinite(a) or a <= 0:
        raise ValueError(f"Dirichlet alpha must be > 0 (or None / inf for IID), got {alpha!r}")
    return a


def iid_partition(n: int, num_clients: int, seed: int = 0) -> list[np.ndarray]:
    """Shuffle ``range(n)`` and cut it into ``num_clients`` near-equal parts."""
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    if num_clients > n:
        raise ValueError(f"more clients ({num_clients}) than samples ({n})")
    perm = np.random.default_rng(seed).permutation(n)
    return [np.sort(p) for p in np.array_split(perm, num_clients)]


def dirichlet_partition(labels: np.ndarray, num_clients: int, alpha: float | None, *, seed: int = 0,
                        num_classes: int | None = None, min_per_client: int = 1,
                        max_tries: int = 1000) -> list[np.ndarray]:
    """Label-skewed split: client ``k`` gets ``p_c[k]`` of class ``c``'s examples, ``p_c ~ Dir(alpha)``.

    Args:
      labels: ``[N]`` integer class of each example.
      num_clients: ``K``.
      alpha: concentration (> 0); small is skewed (0.1: most clients see 1-2 classes), large tends to IID.
        ``None`` or ``inf`` gives :func:`iid_partition`.
      seed: the split is a deterministic function of ``(labels, K, alpha, seed)``.
      num_classes: class count (default ``max(labels) + 1``); labels must lie in ``[0, num_classes)``.
      min_per_client: redraw until every client holds at least this many examples.
      max_tries: redraws before giving up with a ValueError.

    Returns:
      ``K`` sorted, disjoint index arrays whose union is ``range(N)``.
    """
    y, num_classes = check_labels(labels, num_classes)
    if num_clients < 1:
        raise ValueError(f"num_clients must be >= 1, got {num_clients}")
    if num_clients * max(min_per_client, 1) > y.size:
        raise ValueError(f"more clients ({num_clients}) x min_per_client ({min_per_client}) than samples ({y.size})")
    a = _check_alpha(alpha)
    if a is None:
        return iid_partition(y.size, num_clients, seed)
    rng = np.random.default_rng(seed)
    by_class = [rng.permutation(np.flatnonzero(y == c)) for c in range(num_classes)]
    for _ in range(max_tries):
        parts: list[list[np.ndarray]] = [[] for _ in range(num_clients)]
        for idx in by_class:
            if idx.size == 0:
                continue
            p = rng.dirichlet(np.full(num_clients, a))
            cuts = (np.cumsum(p)[:-1] * idx.size).astype(np.int64)
            for k, chunk in enumerate(np.split(idx, cuts)):
                parts[k].append(chunk)
        out = [np.sort(np.concatenate(p)) if p else np.zeros(0, np.int64) for p in parts]
        if min(o.size for o in out) >= min_per_client:
            return out
    raise ValueError(f"no Dirichlet(alpha={alpha}) split gave every one of {num_clients} clients >= "
                     f"{min_per_client} examples in {max_tries} draws; use fewer clients or a larger alpha")


def split_public(labels: np.ndarray, n_public: int, *, seed: int = 0,
                 num_classes: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Carve a class-stratified public set of ``n_public`` examples out of the training split.

    Returns ``(private_idx, public_idx)``: disjoint sorted index arrays covering ``range(N)``. The caller drops
    the public labels (the protocol treats the public set as unlabelled; FedMD's transfer phase is the one place
    that is allowed to use them, and it says so).
    """
    y, num_classes = check_labels(labels, num_classes)
    if not 0 < n_public < y.size:
        raise ValueError(f"n_public must be in (0, {y.size}), got {n_public}")
    rng = np.random.default_rng(seed)
    counts = np.bincount(y, minlength=num_classes)
    share = np.floor(counts / y.size * n_public).astype(np.int64)
    rest = n_public - int(share.sum())
    order = np.argsort(-(counts / y.size * n_public - share), kind="stable")
    share[order[:rest]] += 1
    pub = np.concatenate([rng.choice(np.flatnonzero(y == c), int(share[c]), replace=False)
                          for c in range(num_classes) if share[c] > 0])
    mask = np.zeros(y.size, bool)
    mask[pub] = True
    return np.flatnonzero(~mask), np.sort(pub)


def pad_partitions(parts: Sequence[np.ndarray], size: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Ragged client index lists as ``(idx [K, M] int32, counts [K] int32)``.

    Row ``k`` holds client ``k``'s indices followed by copies of its first index (never read when sampling
    positions below ``counts[k]``). ``size`` fixes ``M`` (so splits with different ``alpha`` share one compiled
    program); it must be at least the largest part.
    """
    if not parts:
        raise ValueError("no partitions")
    sizes = np.array([len(p) for p in parts])
    if np.any(sizes == 0):
        raise ValueError(f"client {int(np.flatnonzero(sizes == 0)[0])} has no examples")
    m = int(sizes.max()) if size is None else int(size)
    if m < sizes.max():
        raise ValueError(f"size {m} is smaller than the largest partition ({int(sizes.max())})")
    idx = np.empty((len(parts), m), np.int32)
    for k, p in enumerate(parts):
        idx[k, : len(p)] = p
        idx[k, len(p):] = p[0]
    return idx, sizes.astype(np.int32)


def label_histogram(labels: np.ndarray, parts: Sequence[np.ndarray], num_classes: int | None = None) -> np.ndarray:
    """``[K, C]`` count of each class held by each client."""
    y, num_classes = check_labels(labels, num_classes)
    return np.stack([np.bincount(y[p], minlength=num_classes) for p in parts])
