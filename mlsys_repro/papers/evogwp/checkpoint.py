"""Checkpoints of trained forecasters: one compressed ``.npz`` with the weights, the data-derived inputs the
model needs (correlation graph, shapelets) and a JSON ``meta`` record (policy, window sizes, scaler,
entities).

Layout: ``meta`` (JSON text), ``param:<path>`` for every weight (paths as ``jax.tree_util.keystr``),
``static_adj`` for fixed-graph models, ``shapelet:<v|w|u|score|labels|period>`` for EvoGWP.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

from mlsys_repro.common.repro.results import atomic_write_bytes

FORMAT = "evogwp-checkpoint/1"


class CheckpointError(ValueError):
    """A checkpoint file that is missing, of another format, or inconsistent with its own meta record."""


def _flat(tree) -> dict[str, np.ndarray]:
    leaves, _ = jax.tree_util.tree_flatten_with_path(tree)
    return {jax.tree_util.keystr(p): np.asarray(v) for p, v in leaves}


def save(path: str | Path, meta: dict[str, Any], params, arrays: dict[str, np.ndarray] | None = None) -> Path:
    """Write ``params`` (an nnx State of one model), ``arrays`` and ``meta`` to ``path`` atomically."""
    path = Path(path)
    payload = {f"param:{k}": v for k, v in _flat(params).items()}
    for k, v in (arrays or {}).items():
        payload[k] = np.asarray(v)
    payload["meta"] = np.asarray(json.dumps({"format": FORMAT, **meta}, sort_keys=True))
    buf = io.BytesIO()
    np.savez_compressed(buf, **payload)
    atomic_write_bytes(path, buf.getvalue())
    return path


def read(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """``(meta, arrays)`` of a checkpoint file (weights still flat, keyed ``param:<path>``)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"{path}: checkpoint not found")
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise CheckpointError(f"{path}: not a readable .npz checkpoint ({e})") from None
    if "meta" not in arrays:
        raise CheckpointError(f"{path}: no meta record")
    meta = json.loads(str(arrays.pop("meta")))
    if meta.get("format") != FORMAT:
        raise CheckpointError(f"{path}: format {meta.get('format')!r}, expected {FORMAT!r}")
    return meta, arrays


def restore_params(build, arrays: dict[str, np.ndarray], where: str = "checkpoint"):
    """The weights of ``build``'s model, filled from ``param:<path>`` entries (shapes checked)."""
    abstract = nnx.split(nnx.eval_shape(lambda: build(nnx.Rngs(0))))[1]
    leaves, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    out = []
    for p, leaf in leaves:
        key = f"param:{jax.tree_util.keystr(p)}"
        if key not in arrays:
            raise CheckpointError(f"{where}: weight {key} missing")
        v = arrays[key]
        if tuple(v.shape) != tuple(leaf.shape):
            raise CheckpointError(f"{where}: weight {key} has shape {v.shape}, model expects {leaf.shape}")
        out.append(jax.numpy.asarray(v, leaf.dtype))
    return jax.tree_util.tree_unflatten(treedef, out)
