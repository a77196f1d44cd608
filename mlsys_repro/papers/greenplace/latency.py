"""Per-layer latency predictors calibrated on measured tables (Neurosurgeon's approach, Kang et al. ASPLOS 2017).

Neurosurgeon fits one regression per (device, layer type) on the layer's configuration and predicts a network's
latency on each device as the sum of its layers. We fit, per (device, type), a ridge regression of log-latency
on a cubic polynomial of the log configuration features plus log work (FLOPs or elements), on a random 80 % of
the measured rows, and report the error on the other 20 % (:func:`fit_all` returns it). Layers the tables do not
cover (the residual ``add``) use the batch-norm model of the same tensor size (both are elementwise passes).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from mlsys_repro.papers.greenplace.models import LayerProfile

DEVICES = ("edge", "cloud")
TABLE_TYPES = ("conv", "dw_conv", "linear", "maxpool", "avgpool", "batchnorm")


def design(kind: str, f: Mapping[str, np.ndarray | float]) -> np.ndarray:
    """Log features of layers of ``kind`` (columns as in the measured tables); returns [n, k]."""
    g = {k: np.atleast_1d(np.asarray(v, dtype=np.float64)) for k, v in f.items()}
    if kind == "conv":
        cols = [g["HW"], g["kernel"], g["stride"], g["Cin"], g["Cout"],
                (g["HW"] / g["stride"]) ** 2 * g["Cin"] * g["Cout"] * g["kernel"] ** 2]
    elif kind in ("dw_conv", "maxpool"):
        cols = [g["HW"], g["kernel"], g["stride"], g["Cin"], (g["HW"] / g["stride"]) ** 2 * g["Cin"] * g["kernel"] ** 2]
    elif kind == "linear":
        cols = [g["in_features"], g["out_features"], g["in_features"] * g["out_features"]]
    elif kind == "avgpool":
        cols = [g["HW"], g["output"], g["Cin"], g["HW"] ** 2 * g["Cin"]]
    elif kind == "batchnorm":
        cols = [g["HW"], g["Cin"], g["HW"] ** 2 * g["Cin"]]
    else:
        raise KeyError(f"no latency model for layer type {kind!r}")
    return np.log(np.maximum(np.stack(cols, axis=1), 1e-9))


def _poly3(x: np.ndarray) -> np.ndarray:
    n, k = x.shape
    cols = [np.ones(n)]
    for i in range(k):
        cols.append(x[:, i])
        for j in range(i, k):
            cols.append(x[:, i] * x[:, j])
            for m in range(j, k):
                cols.append(x[:, i] * x[:, j] * x[:, m])
    return np.stack(cols, axis=1)


@dataclass(frozen=True)
class LatencyModel:
    """Ridge regression of log(latency_ms) on cubic log features; standardised inputs."""

    kind: str
    device: str
    mean: np.ndarray
    std: np.ndarray
    coef: np.ndarray
    holdout_median_ape: float  # median |pred/true - 1| on the held-out 20 %
    holdout_mean_ape: float
    n_train: int
    n_test: int

    def predict_ms(self, features: Mapping[str, np.ndarray | float]) -> np.ndarray:
        x = (design(self.kind, features) - self.mean) / self.std
        return np.exp(_poly3(x) @ self.coef)


def fit(table: pd.DataFrame, kind: str, device: str, seed: int = 0, ridge: float = 1e-3,
        train_frac: float = 0.8) -> LatencyModel:
    feats = {c: table[c].to_numpy() for c in table.columns if c not in ("latency", "FLOPs")}
    x = design(kind, feats)
    y = np.log(table["latency"].to_numpy())
    perm = np.random.default_rng(seed).permutation(y.size)
    ntr = int(round(train_frac * y.size))
    tr, te = perm[:ntr], perm[ntr:]
    mean, std = x[tr].mean(0), x[tr].std(0) + 1e-9
    a = _poly3((x[tr] - mean) / std)
    coef = np.linalg.solve(a.T @ a + ridge * np.eye(a.shape[1]), a.T @ y[tr])
    pred = np.exp(_poly3((x[te] - mean) / std) @ coef)
    ape = np.abs(pred / np.exp(y[te]) - 1.0)
    return LatencyModel(kind, device, mean, std, coef, float(np.median(ape)), float(np.mean(ape)), tr.size, te.size)


def fit_all(tables: Mapping[str, pd.DataFrame], seed: int = 0) -> dict[tuple[str, str], LatencyModel]:
    """``tables`` keyed ``"<device>/<type>"`` (the trace loader's ``latency`` dict) -> models keyed (device, type)."""
    out = {}
    for dev in DEVICES:
        for kind in TABLE_TYPES:
            key = f"{dev}/{kind}"
            if key not in tables:
                raise KeyError(f"latency table {key} missing (have {sorted(tables)})")
            out[(dev, kind)] = fit(tables[key], kind, dev, seed)
    return out


def layer_latency_s(prof: LayerProfile, models: Mapping[tuple[str, str], LatencyModel]) -> np.ndarray:
    """Predicted latency (seconds, batch 1) of every layer on every device class: float64 [L, len(DEVICES)]."""
    out = np.zeros((prof.num_layers, len(DEVICES)))
    for j, (kind, feats) in enumerate(zip(prof.kinds, prof.features, strict=True)):
        k = "batchnorm" if kind == "add" else kind
        for d, dev in enumerate(DEVICES):
            out[j, d] = float(models[(dev, k)].predict_ms(feats)[0]) / 1000.0
    return out
