"""Forecasting with a saved model on data it never saw.

``load(path) -> Forecaster``; ``Forecaster.forecast(series, origins) -> [W, Q, N]`` forecasts the windows
whose first target steps are ``origins`` of a prepared series; ``predict(model, history) -> [Q, N]`` forecasts
the ``horizon`` steps after the end of ``history``.

Entities: a model with ``fixed_entities`` (DCRNN and Graph WaveNet: a graph or node embeddings over the
training entities) reads exactly its training entities, matched by name (extra columns are ignored, a missing
one is an error). EvoGWP (evolution graph built from the history itself), LSTM/GRU, DLinear and PatchTST
forecast any set of entities.

Time of day: the checkpoint records the training series' first time stamp and step. A history whose time
column uses the same clock gets its time-of-day phase from it; otherwise step 0 of the history is taken as
phase 0. EvoGWP's grid of history segments must start on a segment boundary, so up to ``L - 1`` leading steps
are dropped (``Forecaster.trim``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from mlsys_repro.papers.evogwp import checkpoint
from mlsys_repro.papers.evogwp.arrays import Context, build_arrays
from mlsys_repro.papers.evogwp.data import DataError, Scaler, Series, prepare
from mlsys_repro.papers.evogwp.evolution import EvolutionConfig
from mlsys_repro.papers.evogwp.forecasters import EvoInputs, builder, fixed_entities
from mlsys_repro.papers.evogwp.schemas import parse_hparams
from mlsys_repro.papers.evogwp.shapelets import Shapelets
from mlsys_repro.papers.evogwp.train import make_predict, make_segment_predict, segment_grid

#: Input dtypes of the diffusion products on the per-segment path (accumulation is float32 in both).
PRECISIONS = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def _check_precision(precision: str) -> None:
    """Raise :class:`DataError` unless ``precision`` names one of :data:`PRECISIONS`."""
    if precision not in PRECISIONS:
        raise DataError(f"precision must be one of {sorted(PRECISIONS)}, got {precision!r}")


@dataclass
class Forecaster:
    """A trained model restored from a checkpoint."""

    meta: dict[str, Any]
    params: Any
    build: Any
    static_adj: np.ndarray | None
    evo: EvoInputs | None
    _segment_fns: dict = field(default_factory=dict, repr=False, compare=False)

    @functools.cached_property
    def predict_fn(self):
        """The jitted predict function of this model's architecture (compiled on first use, kept with the model)."""
        return jax.jit(make_predict(self.build, self.input_len, self.horizon, self.context))

    def segment_predict_fn(self, precision: str = "float32"):
        """The jitted per-segment predict function (models with a context: supports shared by the windows of
        a segment), its diffusion products in ``precision`` (compiled on first use, kept with the model)."""
        _check_precision(precision)
        if precision not in self._segment_fns:
            dtype = None if precision == "float32" else PRECISIONS[precision]
            fn = make_segment_predict(self.build, self.input_len, self.horizon, self.context, product_dtype=dtype)
            self._segment_fns[precision] = jax.jit(fn)
        return self._segment_fns[precision]

    @property
    def name(self) -> str:
        return str(self.meta["policy"])

    @property
    def kind(self) -> str:
        return str(self.meta["kind"])

    @property
    def input_len(self) -> int:
        return int(self.meta["input_len"])

    @property
    def horizon(self) -> int:
        return int(self.meta["horizon"])

    @property
    def entities(self) -> tuple[str, ...]:
        return tuple(self.meta["entities"])

    @property
    def fixed_entities(self) -> bool:
        return bool(self.meta["fixed_entities"])

    @property
    def scaler(self) -> Scaler:
        return Scaler(float(self.meta["scaler"]["mean"]), float(self.meta["scaler"]["std"]))

    @property
    def context(self) -> Context | None:
        return self.evo.context if self.evo is not None else None

    def min_origin(self) -> int:
        return max(self.input_len, self.context.min_origin() if self.context else 0)

    def phase0(self, time: np.ndarray) -> int:
        """Time-of-day slot of ``time[0]`` on the training clock (0 if the clocks are not comparable)."""
        t0, dt, period = int(self.meta["time0"]), int(self.meta["time_step"]), int(self.meta["period"])
        if time.size >= 2 and int(time[1] - time[0]) == dt and (int(time[0]) - t0) % dt == 0:
            return int(((int(time[0]) - t0) // dt) % period)
        return 0

    def trim(self, phase0: int) -> int:
        """Leading steps to drop so the history starts on a segment boundary (0 for models without
        context)."""
        if self.context is None:
            return 0
        return (-phase0) % self.context.seg_len

    def entity_columns(self, names: tuple[str, ...]) -> list[int]:
        """Column indices of ``names`` this model reads (all, or its training entities by name)."""
        if not self.fixed_entities:
            return list(range(len(names)))
        pos = {n: i for i, n in enumerate(names)}
        missing = [e for e in self.entities if e not in pos]
        if missing:
            raise DataError(
                f"model {self.name} ({self.kind}) has a fixed graph over its {len(self.entities)} "
                f"training entities; the data lacks {len(missing)} of them, e.g. {missing[:5]}"
            )
        return [pos[e] for e in self.entities]

    def products_precision(self, precision: str) -> str:
        """The precision the diffusion products actually run in when ``precision`` is asked for: only the
        per-segment path of models with a context (EvoGWP) takes ``bfloat16``; every other model runs
        float32."""
        _check_precision(precision)
        return precision if self.context is not None else "float32"

    def forecast(self, series: Series, origins: np.ndarray, precision: str = "float32") -> np.ndarray:
        """Forecasts ``[W, Q, N]`` (data units) of the windows at ``origins`` of ``series`` (columns already
        chosen with :meth:`entity_columns`; step 0 on a segment boundary for EvoGWP). ``precision``: the input
        dtype of EvoGWP's diffusion products (:data:`PRECISIONS`; see :meth:`products_precision`)."""
        precision = self.products_precision(precision)
        o = np.asarray(origins, dtype=np.int32)
        if o.size == 0:
            return np.zeros((0, self.horizon, series.num_entities), np.float32)
        if o.min() < self.min_origin():
            raise DataError(
                f"origin {o.min()} leaves less history than the model needs ({self.min_origin()})"
            )
        if self.fixed_entities and series.entities != self.entities:
            raise DataError("series entities differ from the model's fixed entities (use entity_columns)")
        scaler = self.scaler
        extra: dict[str, np.ndarray] = {}
        if self.static_adj is not None:
            extra["static_adj"] = self.static_adj
        if self.evo is not None:
            extra.update(self.evo.arrays(scaler.transform(series.filled), series.phase0))
        arrays = {k: jnp.asarray(v) for k, v in build_arrays(series, scaler, pad=self.horizon, **extra).items()}
        if self.context is None:
            return np.asarray(self.predict_fn(self.params, arrays, jnp.asarray(o)))
        grid, pos = segment_grid(o, self.context.seg_len)
        out = np.asarray(self.segment_predict_fn(precision)(self.params, arrays, jnp.asarray(grid)))
        return out.reshape(-1, *out.shape[2:])[pos]


def from_parts(meta: dict[str, Any], arrays: dict[str, np.ndarray], where: str = "checkpoint") -> Forecaster:
    kind = meta["kind"]
    hp = parse_hparams(kind, meta["hparams"])
    evo = None
    if "evo" in meta:
        e = meta["evo"]
        shp = Shapelets.from_arrays(
            {k.split(":", 1)[1]: v for k, v in arrays.items() if k.startswith("shapelet:")}
        )
        evo = EvoInputs(
            shp,
            float(e["theta"]),
            float(e["sd_mean"]),
            float(e["sd_std"]),
            Context(int(e["seg_len"]), int(e["segments"])),
            EvolutionConfig(**e["evolution"]),
        )
    build = builder(
        kind,
        hp,
        num_nodes=len(meta["entities"]),
        input_len=int(meta["input_len"]),
        horizon=int(meta["horizon"]),
        num_shapelets=int(evo.shapelets.v.shape[0]) if evo else 0,
    )
    params = checkpoint.restore_params(build, arrays, where)
    static = arrays.get("static_adj")
    if fixed_entities(kind, hp) != bool(meta["fixed_entities"]):
        raise checkpoint.CheckpointError(f"{where}: fixed_entities flag disagrees with the model kind")
    return Forecaster(meta, params, build, None if static is None else np.asarray(static), evo)


def load(path: str | Path) -> Forecaster:
    meta, arrays = checkpoint.read(path)
    return from_parts(meta, arrays, str(path))


def _history_series(f: Forecaster, history) -> Series:
    """A prepared series from a DataFrame (first column time), a WorkloadMatrix or a ``[T, N]`` array."""
    import pandas as pd

    from mlsys_repro.common.traces.workload import WorkloadMatrix

    if isinstance(history, WorkloadMatrix):
        values, names, time = history.values, history.entities, history.time
    elif isinstance(history, pd.DataFrame):
        values = history.iloc[:, 1:].to_numpy(np.float32)
        names, time = tuple(map(str, history.columns[1:])), history.iloc[:, 0].to_numpy(np.int64)
    else:
        values = np.asarray(history, dtype=np.float32)
        if values.ndim != 2:
            raise DataError(f"history must be [T, N], got shape {values.shape}")
        if f.fixed_entities and values.shape[1] != len(f.entities):
            raise DataError(f"an unnamed history must have the model's {len(f.entities)} entities")
        names = f.entities if f.fixed_entities else tuple(f"e{i}" for i in range(values.shape[1]))
        time = None
    agg = int(f.meta["aggregate"])
    cols = f.entity_columns(tuple(names))
    s = prepare(
        name="history",
        values=np.asarray(values)[:, cols],
        entities=[names[i] for i in cols],
        time=time,
        aggregate=agg,
        period_5min=int(f.meta["period"]) * agg,
    )
    phase = f.phase0(s.time) if time is not None else 0
    cut = f.trim(phase)
    return _drop_head(s, cut, (phase + cut) % s.period)


def _drop_head(s: Series, k: int, phase0: int) -> Series:
    from dataclasses import replace

    from mlsys_repro.papers.evogwp.data import fill_gaps

    if k == 0:
        return replace(s, phase0=phase0)
    filled, obs, n = fill_gaps(s.raw[k:], s.entities)
    return replace(
        s, time=s.time[k:], raw=s.raw[k:], filled=filled, observed=obs, num_filled=n, phase0=phase0
    )


def predict(model, history) -> np.ndarray:
    """Forecast ``[horizon, N]`` (data units) for the steps right after ``history``.

    ``model``: a :class:`Forecaster` or a checkpoint path. ``history``: a DataFrame (first column time, one
    column per entity), a :class:`~mlsys_repro.common.traces.WorkloadMatrix` or a ``[T, N]`` array, in the model's units
    (%).
    """
    f = model if isinstance(model, Forecaster) else load(model)
    s = _history_series(f, history)
    if s.num_steps < f.min_origin():
        raise DataError(f"history has {s.num_steps} usable steps; {f.name} needs at least {f.min_origin()}")
    return f.forecast(s, np.asarray([s.num_steps]))[0]
