"""Loaders and schemas for every vendored trace and dataset under ``data/``.

Every loader raises :class:`TraceFormatError` (file, line, field) on malformed input and never returns silent
NaNs: real gaps are returned explicitly and counted. ``load_trace(cfg, data_dir)`` dispatches on a trace config's
``loader`` name; papers add loaders with :func:`register_loader`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from mlsys_repro.common.traces._io import resolve
from mlsys_repro.common.traces.coflow import Coflow, CoflowTrace, load_coflow_trace, parse_coflow_text
from mlsys_repro.common.traces.errors import TraceFormatError
from mlsys_repro.common.traces.images import load_cifar10_jpeg, load_fashion_mnist, load_images, load_mnist, parse_idx
from mlsys_repro.common.traces.workload import WorkloadMatrix, load_workload_matrix, parse_workload_csv

LOADERS: dict[str, Callable[[Any, Path], Any]] = {}


def register_loader(name: str):
    """Register ``fn(trace_cfg, data_dir) -> object`` under ``name`` (the ``loader:`` key of a trace config)."""

    def wrap(fn):
        if name in LOADERS and LOADERS[name] is not fn:
            raise ValueError(f"trace loader {name!r} registered twice")
        LOADERS[name] = fn
        return fn

    return wrap


def load_trace(cfg: Any, data_dir: str | Path) -> Any:
    """Load the data a trace config names (``cfg.loader``, ``cfg.files``, ``cfg.options``)."""
    if cfg.loader not in LOADERS:
        raise KeyError(f"trace {cfg.name!r}: unknown loader {cfg.loader!r}; known: {sorted(LOADERS)}")
    return LOADERS[cfg.loader](cfg, Path(data_dir))


@register_loader("coflow_benchmark")
def _coflow(cfg, data_dir: Path) -> CoflowTrace:
    return load_coflow_trace(resolve(data_dir, cfg.files["trace"]))


@register_loader("workload_matrix")
def _workload(cfg, data_dir: Path) -> dict[str, WorkloadMatrix]:
    allow = bool(cfg.options.get("allow_gaps", True))
    return {k: load_workload_matrix(resolve(data_dir, f), allow) for k, f in cfg.files.items()}


__all__ = [
    "LOADERS", "Coflow", "CoflowTrace", "TraceFormatError", "WorkloadMatrix", "load_cifar10_jpeg",
    "load_coflow_trace", "load_fashion_mnist", "load_images", "load_mnist", "load_trace", "load_workload_matrix",
    "parse_coflow_text", "parse_idx", "parse_workload_csv", "register_loader", "resolve",
]
