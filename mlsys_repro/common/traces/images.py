"""Image datasets: MNIST and Fashion-MNIST (IDX, gzip) and the CIFAR-10 JPEG-q75 copy (npz of JPEG scans).

All loaders return ``(images uint8 [N, H, W, C], labels int32 [N])`` and check shapes, counts and label range.
The CIFAR-10 copy is lossy (JPEG quality ~75); tables built on it must say so (see data/images/cifar10/README.md).
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np

from mlsys_repro.common.traces._io import read_bytes, resolve
from mlsys_repro.common.traces.errors import TraceFormatError

IDX_MAGIC = {2049: 1, 2051: 3}  # labels: 1-d, images: 3-d (uint8)
FASHION_MNIST_DIRS = ("images/fashion_mnist", "/usr/share/datasets/fashion-mnist")


def parse_idx(data: bytes, path: str | Path = "<bytes>") -> np.ndarray:
    """Decode an uncompressed IDX (uint8) buffer, validating magic, dimensions and length."""
    if len(data) < 8:
        raise TraceFormatError(path, f"IDX header truncated ({len(data)} bytes)", field="header")
    magic = int.from_bytes(data[:4], "big")
    if magic not in IDX_MAGIC:
        raise TraceFormatError(path, f"bad IDX magic {magic} (expected 2049 labels or 2051 images)", field="magic")
    ndim = IDX_MAGIC[magic]
    hdr = 4 + 4 * ndim
    if len(data) < hdr:
        raise TraceFormatError(path, "IDX header truncated", field="header")
    dims = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(ndim)]
    expect = hdr + int(np.prod(dims))
    if len(data) != expect:
        raise TraceFormatError(path, f"IDX body has {len(data) - hdr} bytes, dims {dims} need {expect - hdr}",
                               field="body")
    return np.frombuffer(data, np.uint8, offset=hdr).reshape(dims)


def _check_labels(labels: np.ndarray, path, num_classes: int = 10) -> np.ndarray:
    bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
    if bad.size:
        raise TraceFormatError(path, f"{bad.size} labels outside [0, {num_classes}), first at index {bad[0]}: "
                               f"{labels[bad[0]]}", field="label")
    return labels.astype(np.int32)


def _load_idx_pair(img_path: Path, lbl_path: Path) -> tuple[np.ndarray, np.ndarray]:
    x = parse_idx(read_bytes(img_path), img_path)
    y = parse_idx(read_bytes(lbl_path), lbl_path)
    if x.ndim != 3 or y.ndim != 1:
        raise TraceFormatError(img_path, f"expected images [N,H,W] and labels [N], got {x.shape} / {y.shape}")
    if x.shape[0] != y.shape[0]:
        raise TraceFormatError(lbl_path, f"{y.shape[0]} labels for {x.shape[0]} images", field="count")
    return x[..., None], _check_labels(y, lbl_path)


def load_mnist(data_dir: str | Path, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """MNIST from ``data/images/mnist`` (exact canonical copy): ([N,28,28,1] uint8, [N] int32)."""
    pre = {"train": "train", "test": "t10k"}[split]
    d = Path(data_dir) / "images/mnist"
    return _load_idx_pair(resolve(d, f"{pre}-images.idx3-ubyte.gz"), resolve(d, f"{pre}-labels.idx1-ubyte.gz"))


def fashion_mnist_dir(data_dir: str | Path) -> Path | None:
    """Where Fashion-MNIST is (vendored copy or the Debian package ``dataset-fashion-mnist``), else None."""
    env = os.environ.get("FASHION_MNIST_DIR")
    for cand in ([env] if env else []) + [str(Path(data_dir) / FASHION_MNIST_DIRS[0]), FASHION_MNIST_DIRS[1]]:
        if (Path(cand) / "train-images-idx3-ubyte.gz").is_file():
            return Path(cand)
    return None


def load_fashion_mnist(data_dir: str | Path, split: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST ([N,28,28,1] uint8, [N] int32); install with ``apt-get install dataset-fashion-mnist``."""
    d = fashion_mnist_dir(data_dir)
    if d is None:
        raise TraceFormatError(FASHION_MNIST_DIRS[1], "Fashion-MNIST not found; install the Debian package "
                               "dataset-fashion-mnist (./reproduce.sh and .ci/run do) or set FASHION_MNIST_DIR")
    pre = {"train": "train", "test": "t10k"}[split]
    return _load_idx_pair(d / f"{pre}-images-idx3-ubyte.gz", d / f"{pre}-labels-idx1-ubyte.gz")


def load_cifar10_jpeg(data_dir: str | Path, split: str = "train", limit: int | None = None
                      ) -> tuple[np.ndarray, np.ndarray]:
    """CIFAR-10 **JPEG q75 copy** decoded with Pillow: ([N,32,32,3] uint8, [N] int32), class-sorted order.

    ``limit`` decodes only the first ``limit`` images of each class (keeps the class balance for small runs).
    """
    from PIL import Image

    path = resolve(data_dir, f"images/cifar10/cifar10_{split}_jpeg.npz")
    try:
        z = np.load(path)
        header, data, offsets, labels = z["header"], z["data"], z["offsets"], z["labels"]
    except (OSError, ValueError, KeyError, EOFError) as e:
        raise TraceFormatError(path, f"cannot read npz ({type(e).__name__}: {e})") from None
    n = labels.size
    if offsets.size != n + 1 or offsets[-1] != data.size or np.any(np.diff(offsets) <= 0):
        raise TraceFormatError(path, "offsets do not index the data buffer", field="offsets")
    labels = _check_labels(labels.astype(np.int64), path)
    idx = np.arange(n)
    if limit is not None:
        idx = np.concatenate([np.flatnonzero(labels == c)[:limit] for c in range(10)])
    head = header.tobytes()
    out = np.empty((idx.size, 32, 32, 3), np.uint8)
    for j, k in enumerate(idx):
        try:
            img = Image.open(io.BytesIO(head + data[offsets[k]:offsets[k + 1]].tobytes())).convert("RGB")
            out[j] = np.asarray(img)
        except (OSError, ValueError) as e:
            raise TraceFormatError(path, f"image {k} does not decode ({e})", field="data") from None
    return out, labels[idx]


def load_images(name: str, data_dir: str | Path, split: str = "train", **kw) -> tuple[np.ndarray, np.ndarray]:
    """Dispatch by dataset name: ``mnist``, ``fashion_mnist`` or ``cifar10_jpeg``."""
    fns = {"mnist": load_mnist, "fashion_mnist": load_fashion_mnist, "cifar10_jpeg": load_cifar10_jpeg}
    if name not in fns:
        raise ValueError(f"unknown image dataset {name!r}; known: {sorted(fns)}")
    return fns[name](data_dir, split, **kw)
