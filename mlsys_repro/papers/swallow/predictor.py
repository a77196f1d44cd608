"""Compression-speed prediction: forecast each host's CPU load for the next 5-minute sample.

Swallow predicts compression speed with an RNN [paper]; ours is a small GRU (flax NNX) over the last ``window``
samples of one host's CPU utilisation, predicting the next sample as a residual on the last value. Baselines:
last value, EWMA (smoothing chosen on the validation split) and the oracle (the true next value). The GRU trains
on the first 70 % of every series of the trace (``make_train(cfg) -> train(key)``, the whole loop one
``lax.scan`` under ``jit``), is validated on the next 10 % and evaluated on the last 20 %.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from mlsys_repro.papers.swallow.cpuload import CpuTrace

PREDICTORS = ("oracle", "gru", "ewma", "last")
CANDIDATES = ("gru", "ewma", "last")  # what a scheduler can actually run (the oracle is an upper bound only)


@dataclass(frozen=True)
class GruConfig:
    window: int = 12
    hidden: int = 32
    steps: int = 1500
    batch: int = 256
    lr: float = 3e-3
    seed: int = 0


class GruPredictor(nnx.Module):
    """GRU over a window of loads in [0, 1]; output = last value + a bounded correction."""

    def __init__(self, hidden: int, *, rngs: nnx.Rngs):
        self.cell = nnx.GRUCell(1, hidden, rngs=rngs)
        self.head = nnx.Linear(hidden, 1, rngs=rngs)

    def __call__(self, x):  # x [B, W] in [0, 1]
        h0 = jnp.zeros((x.shape[0], self.cell.hidden_features), x.dtype)
        h, _ = jax.lax.scan(lambda h, xt: self.cell(h, xt[:, None]), h0, x.T)
        return jnp.clip(x[:, -1] + jnp.tanh(self.head(h)[:, 0]), 0.0, 1.0)


def make_train(cfg: GruConfig, series: np.ndarray):
    """``series`` [T, N] percent (training split). Returns ``(graphdef, train)``; ``train(key) -> (params, losses)``
    initialises and trains one model (jit/vmap it; vmapping over keys trains several seeds at once)."""
    data = jnp.asarray(series.T / 100.0, jnp.float32)  # [N, T]
    n, t = data.shape
    w = cfg.window
    if t <= w + 1:
        raise ValueError(f"training split too short ({t} samples) for window {w}")
    graphdef, _ = nnx.split(nnx.eval_shape(lambda: GruPredictor(cfg.hidden, rngs=nnx.Rngs(0))), nnx.Param)
    tx = optax.adam(cfg.lr)

    def loss_fn(params, xb, yb):
        return jnp.mean((nnx.merge(graphdef, params)(xb) - yb) ** 2)

    def step(carry, key):
        params, opt = carry
        kv, kt = jax.random.split(key)
        vm = jax.random.randint(kv, (cfg.batch,), 0, n)
        t0 = jax.random.randint(kt, (cfg.batch,), 0, t - w)
        xb = data[vm[:, None], t0[:, None] + jnp.arange(w)[None, :]]
        yb = data[vm, t0 + w]
        loss, g = jax.value_and_grad(loss_fn)(params, xb, yb)
        upd, opt = tx.update(g, opt, params)
        return (optax.apply_updates(params, upd), opt), loss

    def train(key):
        k_init, k_run = jax.random.split(key)
        _, params0 = nnx.split(GruPredictor(cfg.hidden, rngs=nnx.Rngs(k_init)), nnx.Param)
        (params, _), losses = jax.lax.scan(step, (params0, tx.init(params0)), jax.random.split(k_run, cfg.steps))
        return params, losses

    return graphdef, train


def windows(series: np.ndarray, w: int, stride: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """All (window, next value) pairs of a [T, N] series, time-strided: X [M, w], y [M]."""
    T, N = series.shape
    t0 = np.arange(0, T - w, stride)
    X = series[t0[:, None] + np.arange(w)[None, :]]  # [M_t, w, N]
    X = np.moveaxis(X, 2, 1).reshape(-1, w)
    y = series[t0 + w].reshape(-1)
    return X, y


@partial(jax.jit, static_argnums=0)
def _apply(graphdef, params, x):
    return nnx.merge(graphdef, params)(x)


def gru_predict(graphdef, params, X: np.ndarray, batch: int = 16384) -> np.ndarray:
    """Predictions in percent for windows ``X`` [M, w] (percent); fixed-size batches share one program."""
    out = []
    for i in range(0, len(X), batch):
        xb = np.zeros((batch, X.shape[1]), np.float32)
        n = min(batch, len(X) - i)
        xb[:n] = X[i:i + n] / 100.0
        out.append(np.asarray(_apply(graphdef, params, jnp.asarray(xb)))[:n])
    return np.concatenate(out) * 100.0 if out else np.zeros(0)


def ewma_predict(X: np.ndarray, alpha: float) -> np.ndarray:
    """EWMA of each window (oldest first), used as the next-value forecast."""
    m = X[:, 0].astype(np.float64)
    for k in range(1, X.shape[1]):
        m = alpha * X[:, k] + (1 - alpha) * m
    return m


@dataclass(frozen=True)
class Trained:
    graphdef: object
    params: object
    ewma_alpha: float
    window: int
    losses: np.ndarray


def train_predictors(trace: CpuTrace, cfg: GruConfig = GruConfig(),
                     seeds: tuple[int, ...] = (0,)) -> tuple[Trained, ...]:
    """Train one GRU per seed (vmapped, one program) on the train split of ``trace``; EWMA smoothing picked on
    validation. Experiments share the result through the run cache (``ctx.cache``)."""
    graphdef, train = make_train(cfg, trace.split("train"))
    params, losses = jax.jit(jax.vmap(train))(jnp.stack([jax.random.key(s) for s in seeds]))
    Xv, yv = windows(trace.split("val"), cfg.window, stride=7)
    alphas = (0.1, 0.2, 0.3, 0.5, 0.7, 0.9)
    best = min(alphas, key=lambda a: float(np.mean(np.abs(ewma_predict(Xv, a) - yv))))
    return tuple(Trained(graphdef, jax.tree.map(lambda x, i=i: x[i], params), best, cfg.window,
                         np.asarray(losses[i])) for i in range(len(seeds)))


def split_errors(tr: Trained, trace: CpuTrace, split: str, stride: int = 5) -> dict[str, dict[str, float]]:
    """MAE and RMSE (percentage points) of every predictor on one split of the trace."""
    X, y = windows(trace.split(split), tr.window, stride=stride)
    preds = {"oracle": y, "last": X[:, -1], "ewma": ewma_predict(X, tr.ewma_alpha),
             "gru": gru_predict(tr.graphdef, tr.params, X)}
    return {k: {"mae": float(np.mean(np.abs(v - y))), "rmse": float(np.sqrt(np.mean((v - y) ** 2)))}
            for k, v in preds.items()}


def select_on_validation(tr: Trained, trace: CpuTrace, stride: int = 5) -> str:
    """The forecaster a scheduler should run: the candidate (GRU, EWMA, last value) with the lowest MAE on the
    validation split (never the test split). Ties go to the simpler model (last value, then EWMA)."""
    return pick_by_error(split_errors(tr, trace, "val", stride))


def pick_by_error(err: dict[str, dict[str, float]]) -> str:
    """The candidate with the lowest MAE in ``err`` (``{method: {"mae": ...}}``); ties go to the simpler model."""
    return min(("last", "ewma", "gru"), key=lambda m: err[m]["mae"])


def predict(method: str, tr: Trained, hist: np.ndarray, window: np.ndarray) -> np.ndarray:
    """Forecast of every sample of ``window`` [L, P] from the samples before it (``hist`` then the window)."""
    if method == "oracle":
        return window.copy()
    full = np.concatenate([hist, window], axis=0)
    w = tr.window
    if hist.shape[0] < w:
        raise ValueError(f"need at least {w} history samples, got {hist.shape[0]}")
    L, P = window.shape
    start = hist.shape[0]
    X = full[(start - w + np.arange(L))[:, None] + np.arange(w)[None, :]]  # [L, w, P]
    X = np.moveaxis(X, 2, 1).reshape(-1, w)
    if method == "last":
        y = X[:, -1]
    elif method == "ewma":
        y = ewma_predict(X, tr.ewma_alpha)
    elif method == "gru":
        y = gru_predict(tr.graphdef, tr.params, X)
    else:
        raise ValueError(f"unknown predictor {method!r}; known: {PREDICTORS}")
    return np.asarray(y, np.float64).reshape(L, P)


def evaluate(tr: Trained, trace: CpuTrace, stride: int = 5) -> dict[str, dict[str, float]]:
    """MAE and RMSE (percentage points) of every predictor on the test split."""
    return split_errors(tr, trace, "test", stride)
