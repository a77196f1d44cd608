"""Forecast error metrics, exactly as reported.

For predictions and targets ``[W, Q, N]`` (windows, horizon steps, entities), in the data's units (%):

* **unmasked** ``mae``, ``rmse``: over every target cell that was observed (gaps in the trace are never
  scored);
* **masked** ``mae_masked``, ``rmse_masked``, ``mape_masked``: additionally drop cells whose target is exactly
  0, as the EvoGWP/DCRNN code does (``masked_mae(..., null_val=0)``); MAPE is reported masked only, in
  percent.

Per horizon step h (1-based) the metric pools all windows and entities at that step; the *averaged* value
pools every cell of every step (for MAE this equals the mean of the per-step values when all steps have the
same number of scored cells). RMSE is the square root of the pooled mean squared error.
"""

from __future__ import annotations

import numpy as np

METRICS = ("mae", "rmse", "mae_masked", "rmse_masked", "mape_masked")
UNITS = {"mae": "%", "rmse": "%", "mae_masked": "%", "rmse_masked": "%", "mape_masked": "%"}


def _pooled(err: np.ndarray, mask: np.ndarray, axis) -> np.ndarray:
    cnt = mask.sum(axis)
    tot = np.where(mask, err, 0.0).sum(axis)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)


def forecast_metrics(
    pred: np.ndarray, target: np.ndarray, observed: np.ndarray | None = None
) -> dict[str, tuple[float, np.ndarray]]:
    """``{metric: (averaged, per_horizon[Q])}`` for the five metrics (NaN where nothing is scored)."""
    p = np.asarray(pred, dtype=np.float64)
    y = np.asarray(target, dtype=np.float64)
    if p.shape != y.shape or p.ndim != 3:
        raise ValueError(f"pred and target must both be [W, Q, N]; got {p.shape} and {y.shape}")
    obs = np.isfinite(y) if observed is None else (np.asarray(observed, bool) & np.isfinite(y))
    if not np.isfinite(p[obs]).all():
        raise ValueError("predictions contain NaN/inf at scored cells")
    y0 = np.where(obs, y, 0.0)
    ae = np.abs(np.where(obs, p, 0.0) - y0)
    se = ae**2
    nz = obs & (y0 != 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ape = np.where(nz, ae / np.where(nz, np.abs(y0), 1.0), 0.0) * 100.0
    out: dict[str, tuple[float, np.ndarray]] = {}
    for name, err, m, root in (
        ("mae", ae, obs, False),
        ("rmse", se, obs, True),
        ("mae_masked", ae, nz, False),
        ("rmse_masked", se, nz, True),
        ("mape_masked", ape, nz, False),
    ):
        per_h = _pooled(err, m, (0, 2))
        avg = float(_pooled(err.reshape(-1), m.reshape(-1), 0))
        if root:
            per_h, avg = np.sqrt(per_h), float(np.sqrt(avg))
        out[name] = (avg, per_h)
    return out


def scored_cells(target: np.ndarray, observed: np.ndarray | None = None) -> dict[str, int]:
    """How many cells the unmasked and masked metrics score."""
    y = np.asarray(target, dtype=np.float64)
    obs = np.isfinite(y) if observed is None else (np.asarray(observed, bool) & np.isfinite(y))
    return {"cells": int(y.size), "scored": int(obs.sum()), "scored_masked": int((obs & (y != 0)).sum())}
