"""One forecasting table: every policy on every dataset of an experiment, scored on the same test windows.

Steps per dataset: load the matrix, select entities, aggregate, fill gaps (counted), split chronologically,
fit the scaler on training values, build the graph inputs a policy needs (correlation graph, shapelets +
evolution graph, all fitted on the training part only), train the neural policies with their seeds vmapped,
forecast the test windows, and score them (:mod:`mlsys_repro.papers.evogwp.metrics`).

To compile each model once per experiment instead of once per dataset, all datasets of an experiment share
array shapes: the same number of entities, series padded to a common length, origin lists padded to common
counts (padding is never sampled or scored).
"""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.common.repro.cache import RunCache
from mlsys_repro.common.repro.trainer import ChunkedTrainer, num_chunks
from mlsys_repro.common.traces._io import resolve
from mlsys_repro.common.traces.workload import load_workload_matrix
from mlsys_repro.papers.evogwp import baselines, checkpoint
from mlsys_repro.papers.evogwp.arrays import Context, build_arrays
from mlsys_repro.papers.evogwp.data import Scaler, Series, Split, chrono_split, origins, prepare, tail_split
from mlsys_repro.papers.evogwp.evolution import edge_persistence, union_adjacency
from mlsys_repro.papers.evogwp.forecasters import (
    EvoInputs,
    builder,
    fit_evo_inputs,
    fixed_entities,
    needs_context,
    needs_static_graph,
    static_graph,
)
from mlsys_repro.papers.evogwp.metrics import METRICS, UNITS, forecast_metrics, scored_cells
from mlsys_repro.papers.evogwp.schemas import NEURAL, ForecastParams, TrainParams, with_overrides
from mlsys_repro.papers.evogwp.train import first_decay, make_predict, make_train, plateaued, slope_before_decay

DETERMINISTIC = ("last_value", "seasonal_naive", "arima", "ets")


def load_series(name: str, trace, data_dir: Path, p: ForecastParams) -> Series:
    if name not in trace.files:
        raise KeyError(f"dataset {name!r} is not in trace {trace.name!r} (files: {sorted(trace.files)})")
    wm = load_workload_matrix(resolve(data_dir, trace.files[name]))
    values, entities, t = wm.values, wm.entities, wm.time
    if p.max_steps:
        values, t = values[: p.max_steps], t[: p.max_steps]
    return prepare(
        name=name,
        values=values,
        entities=entities,
        time=t,
        max_entities=p.max_entities,
        aggregate=p.aggregate,
    )


def make_split(s: Series, p: ForecastParams) -> Split:
    if p.split == "chrono":
        return chrono_split(s.num_steps, p.train_frac, p.val_frac)
    return tail_split(s.num_steps, int(p.test_days * s.period), int(p.train_days * s.period))


@dataclass
class Prepared:
    """One dataset, ready for every policy of the experiment."""

    series: Series
    split: Split
    scaler: Scaler
    train_o: np.ndarray
    val_o: np.ndarray
    test_o: np.ndarray
    target: np.ndarray  # [W, Q, N] raw test targets, NaN at gaps
    static: dict[float, np.ndarray] = field(default_factory=dict)
    evo: dict[tuple, EvoInputs] = field(default_factory=dict)
    periodic: np.ndarray | None = None  # [N] bool: daily autocorrelation of the training part >= PERIODIC_ACF

    @property
    def x_std(self) -> np.ndarray:
        return self.scaler.transform(self.series.filled)


def prepare_dataset(s: Series, p: ForecastParams, min_origin: int) -> Prepared:
    sp = make_split(s, p)
    obs = s.observed[: sp.train_end]
    sc = Scaler.fit(s.raw[: sp.train_end], obs)
    q, pl = p.horizon, p.input_len
    need = max(min_origin, s.period)
    if sp.val_end < need:
        raise ValueError(
            f"{s.name}: test starts at step {sp.val_end}, before the {need} steps of history the models need"
        )
    tr = origins(0, sp.train_end, pl, q, 1, min_origin)
    va_all = origins(sp.train_end, sp.val_end, pl, q, 1, min_origin)
    te = origins(sp.val_end, s.num_steps, pl, q, p.eval_stride, min_origin)
    if tr.size == 0 or va_all.size == 0 or te.size == 0:
        raise ValueError(
            f"{s.name}: no train/validation/test windows ({tr.size}/{va_all.size}/{te.size}); "
            "the series is too short for this setting"
        )
    va = va_all[np.linspace(0, va_all.size - 1, p.train.val_windows).round().astype(int)]
    idx = te[:, None] + np.arange(q)[None, :]
    target = np.where(s.observed[idx], s.raw[idx], np.nan).astype(np.float32)
    periodic = daily_autocorrelation(s.filled[: sp.train_end], s.period) >= PERIODIC_ACF
    return Prepared(s, sp, sc, tr, va, te, target, periodic=periodic)


PERIODIC_ACF = 0.5  # fixed before looking at any result: "clearly daily-periodic" entities


def daily_autocorrelation(x: np.ndarray, period: int) -> np.ndarray:
    """Per-entity autocorrelation at a lag of one day of ``x [T, N]`` (0 for a constant entity or when the
    series is shorter than two days): how periodic, i.e. how much EvoGWP's premise of recurring daily patterns
    holds, each entity is."""
    x = np.asarray(x, dtype=np.float64)
    if x.shape[0] < 2 * period:
        return np.zeros(x.shape[1])
    a, b = x[:-period], x[period:]
    a, b = a - a.mean(0), b - b.mean(0)
    den = np.sqrt((a * a).sum(0) * (b * b).sum(0))
    return np.where(den > 0, (a * b).sum(0) / np.where(den > 0, den, 1.0), 0.0)


def _pad_rows(a: np.ndarray, n: int) -> np.ndarray:
    if a.shape[0] >= n:
        return a
    return np.concatenate([a, np.zeros((n - a.shape[0], *a.shape[1:]), a.dtype)])


def _pad_idx(a: np.ndarray, n: int) -> np.ndarray:
    return np.concatenate([a, np.full(n - a.size, a[-1], a.dtype)]) if a.size < n else a


def evo_key(hp) -> tuple:
    f = (
        "segments_per_day",
        "num_shapelets",
        "candidates_per_shapelet",
        "num_classes",
        "min_class_size",
        "shapelet_score",
        "learn_importance",
        "shapelet_steps",
        "shapelet_samples",
        "link_percentile",
        "top_shapelets",
        "top_transitions",
        "edge_fraction",
        "context_segments",
    )
    return tuple(getattr(hp, k) for k in f)


def graph_arrays(kind: str, hp, ds: Prepared) -> tuple[dict[str, np.ndarray], EvoInputs | None]:
    """Extra arrays (correlation graph, shapelet distances + evolution graph) of ``kind`` on ``ds``."""
    extra: dict[str, np.ndarray] = {}
    evo = None
    if needs_static_graph(kind, hp):
        thr = float(hp.graph_threshold)
        if thr not in ds.static:
            ds.static[thr] = static_graph(ds.series.filled[: ds.split.train_end], thr)
        extra["static_adj"] = ds.static[thr]
    if needs_context(kind, hp):
        key = evo_key(hp)
        if key not in ds.evo:
            ds.evo[key] = fit_evo_inputs(ds.x_std, ds.series.period, ds.split.train_end, hp)
        evo = ds.evo[key]
        extra.update(evo.arrays(ds.x_std))
    return extra, evo


def _compiled(kind: str, hp, n: int, pl: int, q: int, tcfg: TrainParams, ctx: Context | None, k: int,
              cache: RunCache | None):
    """``(build, trainer, predict)``: the model builder, its training through the shared driver (start vmapped over
    seeds, the seed-batched ``advance_seeds`` that skips rounds once every seed has stopped early, equal jitted
    chunks of evaluation rounds) and the vmapped predict function; built once per shape and run when ``cache``
    is given, so every dataset of equal shapes shares them."""

    def build_all():
        build = builder(kind, hp, num_nodes=n, input_len=pl, horizon=q, num_shapelets=k)
        train = make_train(build, pl, q, tcfg, ctx)
        # ``advance_seeds`` is already seed-batched (a vmap could not skip the rounds after every seed has stopped
        # early), so it is only jitted; the chunking is the shared driver's.
        chunks = num_chunks(train.rounds)
        per = train.rounds // chunks
        trainer = ChunkedTrainer(
            start=jax.jit(jax.vmap(train.start, in_axes=(0, None, None, None, None, 0))),
            advance=jax.jit(functools.partial(train.advance_seeds, rounds=per)),
            chunks=chunks,
            chunk_steps=per,
        )
        pred = jax.jit(jax.vmap(make_predict(build, pl, q, ctx), in_axes=(0, None, None)))
        return build, Trainer(trainer, train.finish), pred

    if cache is None:
        return build_all()
    return cache.get("evogwp.compiled", (kind, hp, n, pl, q, tcfg, ctx, k), build_all)


@dataclass(frozen=True)
class Trainer:
    """A neural forecaster's training: the chunked, seed-batched trainer and the function that turns its final
    state and curves into (best parameters, curves)."""

    chunked: ChunkedTrainer
    finish: Any

    def __call__(self, keys, aj, tr, n_train, val_o, lrs, checkpointer=None):
        args = (aj, tr, n_train, val_o)
        done = self.chunked.run((keys, *args, lrs), args, checkpointer=checkpointer)
        return self.finish(done.state, done.steps)


@dataclass
class PolicyResult:
    preds: np.ndarray  # [S, W, Q, N]
    seeds: list[int]
    seconds: float
    notes: dict[str, float] = field(default_factory=dict)
    params: Any = None
    build: Any = None
    evo: EvoInputs | None = None
    extra: dict[str, np.ndarray] = field(default_factory=dict)
    training: dict[str, Any] | None = None  # curves and gates per seed (neural policies)
    window_persistence: np.ndarray | None = None  # [W - 1] edge persistence between consecutive test windows
    num_params: int = 0  # trainable parameters of one run (capacity)


def run_policy(
    pol, ds: Prepared, p: ForecastParams, seeds: np.ndarray, pads: dict[str, int], checkpointer=None,
    cache: RunCache | None = None, lrs: np.ndarray | None = None, test: bool = True,
) -> PolicyResult:
    """Forecasts of ``pol`` on the test windows of ``ds``; a neural policy is trained first (runs vmapped: one
    per entry of ``seeds``, at the peak learning rate ``lrs[i]``, by default the model's ``train.lr_for``),
    checkpointed through ``checkpointer`` (an orbax :class:`mlsys_repro.common.repro.checkpoint.Checkpointer` or None),
    with its compiled functions shared through ``cache`` (the run cache). ``test=False`` (tuning) trains and
    validates only: the test windows are not forecast (``preds`` is empty)."""
    kind, hp = pol.kind, pol.hp
    s, q, pl = ds.series, p.horizon, p.input_len
    t0 = time.monotonic()
    if kind == "last_value":
        return PolicyResult(baselines.last_value(s.filled, ds.test_o, q)[None], [0], time.monotonic() - t0)
    if kind == "seasonal_naive":
        pr = baselines.seasonal_naive(s.filled, ds.test_o, q, hp.season_days * s.period)
        return PolicyResult(pr[None], [0], time.monotonic() - t0)
    if kind in ("arima", "ets"):
        pr, fb = baselines.stats_forecast(kind, s.filled, ds.test_o, q, ds.split.train_end, hp)
        return PolicyResult(pr[None], [0], time.monotonic() - t0, {"stats_fallback_series": fb})
    if kind not in NEURAL:
        raise ValueError(f"unknown kind {kind!r}")
    extra, evo = graph_arrays(kind, hp, ds)
    arrays = build_arrays(s, ds.scaler, **extra)
    t_pad = pads["steps"]
    for name in ("x", "y", "obs", "nz"):
        arrays[name] = _pad_rows(arrays[name], t_pad)
    arrays["tod"] = ((np.arange(t_pad) % s.period) / s.period).astype(np.float32)
    if evo is not None:
        g_pad = t_pad // evo.context.seg_len
        arrays["sdist"], arrays["adj"] = _pad_rows(arrays["sdist"], g_pad), _pad_rows(arrays["adj"], g_pad)
    ctx = evo.context if evo is not None else None
    k = int(evo.shapelets.v.shape[0]) if evo is not None else 0
    build, train, pred = _compiled(kind, hp, s.num_entities, pl, q, p.train, ctx, k, cache)
    aj = {a: jnp.asarray(v) for a, v in arrays.items()}
    keys = jax.vmap(jax.random.key)(jnp.asarray(seeds))
    if lrs is None:
        lrs = np.full(len(seeds), p.train.lr_for(kind))
    tr = jnp.asarray(_pad_idx(ds.train_o, pads["train"]))
    params, curves = train(
        keys, aj, tr, jnp.asarray(ds.train_o.size, jnp.int32), jnp.asarray(ds.val_o),
        jnp.asarray(lrs, jnp.float32), checkpointer,
    )
    w = ds.test_o.size
    if test:
        preds = np.asarray(pred(params, aj, jnp.asarray(_pad_idx(ds.test_o, pads["test"]))))[:, :w]
    else:
        preds = np.zeros((len(seeds), 0, q, s.num_entities), np.float32)
    curves = jax.tree.map(np.asarray, curves)
    lv = val_last_value_mae(ds, p)
    curves["gates"] = training_gates(curves, lv, p.train)
    curves["val_last_value"] = lv
    notes: dict[str, float] = {}
    persistence = None
    if evo is not None:
        used = used_adjacency(hp, extra)
        notes.update(evo.diagnostics(used, extra["sdist"]))
        if hp.graph in ("evolution", "union"):
            persistence = window_persistence(used, ds.test_o, evo.context.seg_len)
    n_par = int(sum(np.prod(a.shape[1:]) for a in jax.tree.leaves(params)))
    return PolicyResult(
        preds, [int(x) for x in seeds], time.monotonic() - t0, notes, params, build, evo, extra, training=curves,
        window_persistence=persistence, num_params=n_par,
    )


def used_adjacency(hp, extra: dict[str, np.ndarray]) -> np.ndarray:
    """``[G, N, N]``: the graph EvoGWP's variant diffuses over at each grid segment (the evolution graph, or its
    union with the static graph for ``graph = union``)."""
    if hp.graph == "union":
        return np.asarray(union_adjacency(extra["static_adj"], extra["adj"]))
    return extra["adj"]


def window_persistence(adj: np.ndarray, test_origins: np.ndarray, seg_len: int) -> np.ndarray:
    """``[W - 1]``: for each test window after the first, the fraction of the edges of the graph it diffuses
    over (the transition into its last context segment, ``origin // seg_len - 1``) that were edges of the
    previous test window's graph."""
    g = np.asarray(test_origins) // seg_len - 1
    return edge_persistence(adj[g])


def val_last_value_mae(ds: Prepared, p: ForecastParams) -> float:
    """Masked MAE of last value on the validation windows the early stopping reads (pooled over cells, as
    the training loop's validation loss is)."""
    s, q = ds.series, p.horizon
    idx = ds.val_o[:, None] + np.arange(q)[None, :]
    y = np.where(s.observed[idx], s.raw[idx], 0.0)
    nz = s.observed[idx] & (y != 0)
    last = s.filled[ds.val_o - 1][:, None, :]
    return float((np.abs(last - y) * nz).sum() / max(nz.sum(), 1))


def training_gates(curves: dict[str, np.ndarray], val_last_value: float, tcfg: TrainParams) -> dict[str, np.ndarray]:
    """0/1 validity gates per seed (the claims' ``requires``), from the training record only (no test data):

    * ``converged``: the validation curve stopped improving within the budget: early stopping triggered, or
      the best of the last ``patience`` rounds is within the relative ``min_delta`` of the best before them;
    * ``beats_trivial``: the kept (best-validation) parameters beat last value on the same validation windows;
    * ``beats_untrained``: the kept parameters beat the same network at its initial parameters on the same
      validation windows by at least ``init_margin`` (relative). A plateau reached because the learning-rate
      schedule decayed, with nothing learned, passes ``converged`` but not this gate. (For the recurrent and
      graph models the initial parameters forecast the last value, so it is also a margin over last value.)
    """
    best = np.atleast_1d(curves["best_val"])
    stopped = np.atleast_1d(curves["stopped"]).astype(bool)
    val = np.atleast_2d(curves["val_mae_masked"])
    run = np.atleast_1d(curves["rounds_run"])
    conv = [
        bool(st) or plateaued(v, r, tcfg.patience, tcfg.min_delta)
        for st, v, r in zip(stopped, val, run, strict=True)
    ]
    init = np.atleast_1d(curves["val_init"]) if "val_init" in curves else np.full(best.shape, np.inf)
    return {
        "converged": np.asarray(conv, np.float64),
        "beats_trivial": (best < val_last_value).astype(np.float64),
        "beats_untrained": (best < init * (1.0 - tcfg.init_margin)).astype(np.float64),
    }


def checkpoint_meta(pol, ds: Prepared, p: ForecastParams, res: PolicyResult, seed: int) -> dict[str, Any]:
    s = ds.series
    meta: dict[str, Any] = {
        "policy": pol.name,
        "kind": pol.kind,
        "hparams": _plain(pol.hparams),
        "dataset": s.name,
        "input_len": p.input_len,
        "horizon": p.horizon,
        "aggregate": p.aggregate,
        "period": s.period,
        "step_minutes": s.step_minutes,
        "scaler": {"mean": ds.scaler.mean, "std": ds.scaler.std},
        "entities": list(s.entities),
        "fixed_entities": fixed_entities(pol.kind, pol.hp),
        "time0": int(s.time[0]),
        "time_step": int(s.time[1] - s.time[0]),
        "seed": seed,
        "split": {
            "train_end": ds.split.train_end,
            "val_end": ds.split.val_end,
            "num_steps": ds.split.num_steps,
        },
    }
    if res.evo is not None:
        e = res.evo
        meta["evo"] = {
            "theta": e.theta,
            "sd_mean": e.sd_mean,
            "sd_std": e.sd_std,
            "seg_len": e.context.seg_len,
            "segments": e.context.segments,
            "evolution": dataclasses.asdict(e.evolution),
        }
    return meta


def _plain(x):
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def save_checkpoint(path: Path, pol, ds: Prepared, p: ForecastParams, res: PolicyResult) -> Path:
    params0 = jax.tree.map(lambda a: np.asarray(a[0]), res.params)
    arrays: dict[str, np.ndarray] = {}
    if "static_adj" in res.extra:
        arrays["static_adj"] = res.extra["static_adj"]
    if res.evo is not None:
        arrays.update({f"shapelet:{k}": v for k, v in res.evo.shapelets.arrays().items()})
    return checkpoint.save(path, checkpoint_meta(pol, ds, p, res, res.seeds[0]), params0, arrays)


def metric_rows_for(policy: str, res: PolicyResult, ds: Prepared, setting: str) -> list[dict[str, Any]]:
    rows = []
    for i, seed in enumerate(res.seeds):
        m = forecast_metrics(res.preds[i], ds.target)
        for name in METRICS:
            avg, per_h = m[name]
            if not np.isfinite(avg):
                continue
            rows.append(
                {
                    "policy": policy,
                    "seed": seed,
                    "metric": name,
                    "value": avg,
                    "unit": UNITS[name],
                    "dataset": ds.series.name,
                    "setting": setting,
                    "horizon": "avg",
                }
            )
            for h, v in enumerate(per_h, 1):
                if np.isfinite(v):
                    rows.append(
                        {
                            "policy": policy,
                            "seed": seed,
                            "metric": name,
                            "value": float(v),
                            "unit": UNITS[name],
                            "dataset": ds.series.name,
                            "setting": setting,
                            "horizon": str(h),
                        }
                    )
    return rows


def group_rows_for(policy: str, res: PolicyResult, ds: Prepared, setting: str) -> list[dict[str, Any]]:
    """``mae_masked_by_group`` per seed, horizon step and ``group`` (``periodic`` / ``aperiodic`` entities by
    :func:`daily_autocorrelation` of the training part): the claim boundary, where the premise of recurring
    daily patterns holds and where it does not."""
    if ds.periodic is None:
        return []
    rows = []
    for group, cols in (("periodic", ds.periodic), ("aperiodic", ~ds.periodic)):
        if not cols.any():
            continue
        for i, seed in enumerate(res.seeds):
            avg, per_h = forecast_metrics(res.preds[i][..., cols], ds.target[..., cols])["mae_masked"]
            for h, v in [("avg", avg), *((str(k), x) for k, x in enumerate(per_h, 1))]:
                if np.isfinite(v):
                    rows.append({"policy": policy, "seed": seed, "metric": "mae_masked_by_group", "value": float(v),
                                 "unit": "%", "dataset": ds.series.name, "setting": setting, "horizon": h,
                                 "group": group})
    return rows


def setting_name(name: str, p: ForecastParams) -> str:
    return f"{name}:{p.input_len * p.aggregate}->{p.horizon * p.aggregate}"


def prepare_all(ctx) -> tuple[dict[str, Any], list[Prepared], dict[str, int]]:
    """The experiment's policies (``model_overrides`` applied), its prepared datasets and the shared padding."""
    p: ForecastParams = ctx.params
    policies = {name: with_overrides(pol, p.model_overrides) for name, pol in ctx.policies.items()}
    series = [load_series(n, ctx.trace, ctx.data_dir, p) for n in p.datasets]
    ctx_need = [pol.hp for pol in policies.values() if pol.kind == "evogwp"]
    min_o = p.input_len
    for hp in ctx_need:
        period = series[0].period
        min_o = max(min_o, (hp.context_segments + 1) * (period // hp.segments_per_day))
    prepared = [prepare_dataset(s, p, min_o) for s in series]
    pads = {
        "steps": max(d.series.num_steps for d in prepared),
        "train": max(d.train_o.size for d in prepared),
        "test": max(d.test_o.size for d in prepared),
    }
    return policies, prepared, pads


def run_table(ctx) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Rows of every (policy, dataset, seed, metric, horizon) plus what the figures need."""
    p: ForecastParams = ctx.params
    policies, prepared, pads = prepare_all(ctx)
    seeds = ctx.seeds()
    rows: list[dict[str, Any]] = []
    keep: dict[tuple[str, str], np.ndarray] = {}
    ctx.progress.start(len(policies) * len(prepared), "policy x dataset")
    for ds in prepared:
        setting = setting_name(ds.series.name, p)
        cells = scored_cells(ds.target)
        info = {
            "data_entities": ds.series.num_entities,
            "data_test_windows": ds.test_o.size,
            "data_filled_cells": ds.series.num_filled,
            "data_constant_entities": len(ds.series.constant_entities),
            "data_test_cells_scored": cells["scored"],
            "data_test_cells_masked": cells["scored_masked"],
            "data_train_steps": ds.split.train_end,
            "data_test_steps": ds.split.num_steps - ds.split.val_end,
            "data_periodic_entities": int(ds.periodic.sum()) if ds.periodic is not None else 0,
        }
        for k, v in info.items():
            rows.append(
                {
                    "policy": "-",
                    "seed": 0,
                    "metric": k,
                    "value": float(v),
                    "unit": "count",
                    "dataset": ds.series.name,
                    "setting": setting,
                    "horizon": "avg",
                }
            )
    for name, pol in policies.items():
        for ds in prepared:
            setting = setting_name(ds.series.name, p)
            res = run_policy(pol, ds, p, seeds, pads, ctx.checkpointer(f"{name}-{ds.series.name}"), ctx.cache)
            rows += metric_rows_for(name, res, ds, setting)
            rows += group_rows_for(name, res, ds, setting)
            rows += training_rows(name, res, ds, setting, p.train)
            rows += graph_rows(name, res, ds, setting)
            for k, v in res.notes.items():
                rows.append(
                    {
                        "policy": name,
                        "seed": res.seeds[0],
                        "metric": k,
                        "value": float(v),
                        "unit": note_unit(k),
                        "dataset": ds.series.name,
                        "setting": setting,
                        "horizon": "avg",
                    }
                )
            if name in p.figure_policies:
                keep[(name, ds.series.name)] = res.preds[0]
            if name in p.checkpoint_policies and res.params is not None:
                save_checkpoint(
                    ctx.out_dir / "checkpoints" / f"{ctx.experiment}_{ds.series.name}_{name}.npz",
                    pol,
                    ds,
                    p,
                    res,
                )
            ctx.progress.update(1, f"{name} on {ds.series.name}: {res.seconds:.0f}s")
    rows += best_of_rows(rows, p.best_of)
    return rows, {"prepared": prepared, "preds": keep}


GATES = ("converged", "beats_trivial", "beats_untrained")
COPIED = (*METRICS, *GATES, "mae_masked_by_group")  # what best_sota copies from the picked policy


def note_unit(name: str) -> str:
    if "mae" in name:
        return "%"
    if name.startswith(("graph_", "shapelet_score")):
        return "ratio"
    return "count"


def training_rows(
    policy: str, res: PolicyResult, ds: Prepared, setting: str, tcfg: TrainParams
) -> list[dict[str, Any]]:
    """Per seed: the gates, the kept validation MAE, last value's and the initial parameters' on the same
    windows, the peak learning rate, the steps trained, the step whose parameters were kept (``best_step``), the
    slope of the validation curve before the first learning-rate decay (``val_slope_before_decay``, % per 100
    steps; negative = still falling when the rate was cut), and the learning curves (``curve_*`` rows with a
    ``step`` column, one per evaluation round actually run)."""
    tr = res.training
    if tr is None:
        return []
    base = {"policy": policy, "dataset": ds.series.name, "setting": setting, "horizon": "avg"}
    rows = []
    decay = first_decay(tcfg) or tcfg.steps  # the slope before the first decay, or before the end without one
    for i, seed in enumerate(res.seeds):
        run = int(tr["rounds_run"][i])
        per_seed = {**{g: (tr["gates"][g][i], "bool") for g in GATES},
                    "val_mae_masked": (tr["best_val"][i], "%"),
                    "val_mae_masked_last_value": (tr["val_last_value"], "%"),
                    "val_mae_masked_init": (tr["val_init"][i], "%"),
                    "peak_lr": (tr["lr"][i], "1"),
                    "train_steps": (run * tcfg.eval_every, "count"),
                    "best_step": (int(tr["best_round"][i]) * tcfg.eval_every, "count")}
        slope = slope_before_decay(tr["val_mae_masked"][i], run, tcfg.eval_every, decay)
        if np.isfinite(slope):
            per_seed["val_slope_before_decay"] = (slope, "%/100 steps")
        rows += [{**base, "seed": seed, "metric": k, "value": float(v), "unit": u} for k, (v, u) in per_seed.items()]
        for r in range(run):
            step = (r + 1) * tcfg.eval_every
            rows.append({**base, "seed": seed, "metric": "curve_train_loss", "value": float(tr["train_loss"][i, r]),
                         "unit": "%", "step": step})
            rows.append({**base, "seed": seed, "metric": "curve_val_mae_masked",
                         "value": float(tr["val_mae_masked"][i, r]), "unit": "%", "step": step})
    return rows


def graph_rows(policy: str, res: PolicyResult, ds: Prepared, setting: str) -> list[dict[str, Any]]:
    """``model_params`` (trainable parameters of one run: the capacity each model is compared at) and, for
    EvoGWP variants that read the evolution graph, ``graph_edge_persistence_window`` per test window (a
    ``window`` column, 1-based; the graph does not depend on the seed)."""
    base = {"policy": policy, "seed": res.seeds[0], "dataset": ds.series.name, "setting": setting, "horizon": "avg"}
    rows = []
    if res.num_params:
        rows.append({**base, "metric": "model_params", "value": float(res.num_params), "unit": "count"})
    if res.window_persistence is not None:
        rows += [{**base, "metric": "graph_edge_persistence_window", "value": float(v), "unit": "ratio",
                  "window": w} for w, v in enumerate(res.window_persistence, 1) if np.isfinite(v)]
    return rows


def best_of_rows(rows: list[dict[str, Any]], best_of: list[str]) -> list[dict[str, Any]]:
    """Rows of policy ``best_sota``: per setting, a copy of the rows (test metrics and training gates) of the
    ``best_of`` policy with the lowest mean (over seeds) masked MAE on the *validation* windows
    (``val_mae_masked``, the early-stopping score): the strongest competitor there, picked without looking at
    the test windows."""
    out = []
    settings = sorted({r["setting"] for r in rows})
    for st in settings:
        cand = {}
        for pol in best_of:
            v = [
                r["value"]
                for r in rows
                if r["setting"] == st and r["policy"] == pol and r["metric"] == "val_mae_masked"
            ]
            if v:
                cand[pol] = float(np.mean(v))
        if not cand:
            continue
        pick = min(cand, key=cand.get)
        out += [
            {**r, "policy": "best_sota", "picked": pick}
            for r in rows
            if r["setting"] == st and r["policy"] == pick and r["metric"] in COPIED
        ]
    return out
