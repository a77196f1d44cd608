"""The non-learned baselines: last value, seasonal naive and per-series ARIMA / ETS (statsforecast).

All read the gap-filled series in the data's units ``filled [T, N]`` and forecast windows at ``origins [W]``
(first target steps), returning ``[W, Q, N]``:

* last value: ``y_hat(t + h) = y(t - 1)``;
* seasonal naive: ``y_hat(t + h) = y(t + h - m)`` with ``m = season_days * period`` (same time yesterday);
* ARIMA / ETS: ``AutoARIMA`` / ``AutoETS`` fitted once per series on the last ``fit_steps`` training steps,
  then applied with the fitted parameters (``forward``, no refit) to the ``context_steps`` before each origin.
  A series whose fit fails (e.g. a constant one) falls back to last value; the count is returned.
"""

from __future__ import annotations

import warnings

import numpy as np

from mlsys_repro.papers.evogwp.schemas import StatsHP


def last_value(filled: np.ndarray, origins: np.ndarray, horizon: int) -> np.ndarray:
    x = np.asarray(filled, dtype=np.float32)
    return np.repeat(x[np.asarray(origins) - 1][:, None, :], horizon, axis=1)


def seasonal_naive(filled: np.ndarray, origins: np.ndarray, horizon: int, season: int) -> np.ndarray:
    o = np.asarray(origins)
    if o.size and o.min() < season:
        raise ValueError(f"seasonal naive needs origins >= season ({season}), got {o.min()}")
    if horizon > season:
        raise ValueError(f"horizon {horizon} exceeds the season {season}")
    idx = o[:, None] + np.arange(horizon)[None, :] - season
    return np.asarray(filled, dtype=np.float32)[idx]


def _model(kind: str, season_length: int):
    from statsforecast.models import AutoARIMA, AutoETS

    if kind == "arima":
        return AutoARIMA(season_length=season_length)
    if kind == "ets":
        return AutoETS(season_length=season_length)
    raise ValueError(f"unknown statistical model {kind!r}")


def stats_forecast(
    kind: str,
    filled: np.ndarray,
    origins: np.ndarray,
    horizon: int,
    train_end: int,
    hp: StatsHP,
    progress=None,
) -> tuple[np.ndarray, int]:
    """Forecasts ``[W, Q, N]`` and the number of series that fell back to last value."""
    x = np.asarray(filled, dtype=np.float64)
    o = np.asarray(origins)
    lo = max(0, train_end - hp.fit_steps)
    if o.size and o.min() < hp.context_steps:
        raise ValueError(f"{kind}: origins must leave {hp.context_steps} steps of context")
    out = np.empty((o.size, horizon, x.shape[1]), np.float32)
    fallbacks = 0
    for j in range(x.shape[1]):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fm = _model(kind, hp.season_length).fit(x[lo:train_end, j])
                for i, t in enumerate(o):
                    out[i, :, j] = fm.forward(y=x[t - hp.context_steps : t, j], h=horizon)["mean"]
            if not np.isfinite(out[:, :, j]).all():
                raise FloatingPointError("non-finite forecast")
        except Exception:  # statsforecast raises assorted errors on degenerate series
            fallbacks += 1
            out[:, :, j] = x[o - 1, j][:, None]
        if progress is not None:
            progress()
    return out, fallbacks
