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


def _step_sums(p: np.ndarray, y: np.ndarray, obs: np.ndarray) -> np.ndarray:
    """``[5, 2]`` (sum, count) of one horizon step's ``[W, N]`` cells for each metric of :data:`METRICS`
    (squared errors for the RMSEs)."""
    if not np.isfinite(p[obs]).all():
        raise ValueError("predictions contain NaN/inf at scored cells")
    y0 = np.where(obs, y, 0.0)
    ae = np.abs(np.where(obs, p, 0.0) - y0)
    se = ae * ae
    nz = obs & (y0 != 0)
    with np.errstate(invalid="ignore", divide="ignore"):
        ape = np.where(nz, ae / np.where(nz, np.abs(y0), 1.0), 0.0) * 100.0
    n_obs, n_nz = float(obs.sum()), float(nz.sum())
    return np.array(
        [
            [ae.sum(), n_obs],
            [se.sum(), n_obs],
            [np.where(nz, ae, 0.0).sum(), n_nz],
            [np.where(nz, se, 0.0).sum(), n_nz],
            [ape.sum(), n_nz],
        ]
    )


def forecast_metrics(
    pred: np.ndarray, target: np.ndarray, observed: np.ndarray | None = None
) -> dict[str, tuple[float, np.ndarray]]:
    """``{metric: (averaged, per_horizon[Q])}`` for the five metrics (NaN where nothing is scored).

    Computed one horizon step at a time in float64, so memory stays at a few ``[W, N]`` slices (a month of
    Bitbrains at stride 1 is ``[8053, 12, 402]``: one float64 copy of the whole array is 310 MB)."""
    if np.shape(pred) != np.shape(target) or np.ndim(pred) != 3:
        raise ValueError(f"pred and target must both be [W, Q, N]; got {np.shape(pred)} and {np.shape(target)}")
    sums = np.zeros((len(METRICS), 2, np.shape(pred)[1]))  # metric, (sum, count), step
    for h in range(sums.shape[2]):
        y = np.asarray(target[:, h], dtype=np.float64)
        obs = np.isfinite(y) if observed is None else (np.asarray(observed[:, h], bool) & np.isfinite(y))
        sums[:, :, h] = _step_sums(np.asarray(pred[:, h], dtype=np.float64), y, obs)
    out: dict[str, tuple[float, np.ndarray]] = {}
    with np.errstate(invalid="ignore", divide="ignore"):
        for k, name in enumerate(METRICS):
            tot, cnt = sums[k]
            per_h = np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)
            avg = tot.sum() / cnt.sum() if cnt.sum() > 0 else np.nan
            if name.startswith("rmse"):
                per_h, avg = np.sqrt(per_h), np.sqrt(avg)
            out[name] = (float(avg), per_h)
    return out


def scored_cells(target: np.ndarray, observed: np.ndarray | None = None) -> dict[str, int]:
    """How many cells the unmasked and masked metrics score."""
    y = np.asarray(target, dtype=np.float64)
    obs = np.isfinite(y) if observed is None else (np.asarray(observed, bool) & np.isfinite(y))
    return {"cells": int(y.size), "scored": int(obs.sum()), "scored_masked": int((obs & (y != 0)).sum())}
