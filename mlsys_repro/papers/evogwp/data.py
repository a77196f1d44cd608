"""From a shipped ``time x entity`` utilisation matrix to the arrays forecasters train and are scored on.

Gap handling (the traces have real gaps; Bitbrains 5.3 % of cells):

* model *inputs* are forward-filled per entity (a leading gap takes the entity's first observed value); the
  number of filled cells is counted in :attr:`Series.num_filled`;
* *targets* that were gaps are never scored: ``observed`` is False there and every metric drops those cells;
* an entity with no observation at all is an error (nothing to fill from).

Windows are indexed by their *origin* ``t``: the first target step. Inputs are ``[t - P, t)``, targets
``[t, t + Q)``. A chronological split gives train / validation / test index ranges; a window belongs to the
range that holds all its targets (test: first target in the test range), so test targets are strictly later
than anything a model was fitted on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from mlsys_repro.common.traces.workload import WorkloadMatrix


class DataError(ValueError):
    """Input that cannot be turned into forecasting windows (the message says what and where)."""


@dataclass(frozen=True)
class Series:
    """A prepared multivariate series; ``period`` is the number of steps per day (288 at 5 minutes)."""

    name: str
    entities: tuple[str, ...]
    time: np.ndarray  # int64 [T]
    raw: np.ndarray  # float32 [T, N], NaN = gap
    filled: np.ndarray  # float32 [T, N], gaps forward-filled
    observed: np.ndarray  # bool [T, N]
    period: int
    num_filled: int
    step_minutes: int = 5
    phase0: int = 0  # time-of-day slot (0 .. period-1) of step 0

    @property
    def num_steps(self) -> int:
        return int(self.raw.shape[0])

    @property
    def num_entities(self) -> int:
        return int(self.raw.shape[1])

    @property
    def constant_entities(self) -> tuple[str, ...]:
        """Entities whose observed values never change (scored normally; listed for the record)."""
        out = []
        for j, e in enumerate(self.entities):
            v = self.raw[self.observed[:, j], j]
            if v.size and np.all(v == v[0]):
                out.append(e)
        return tuple(out)


def fill_gaps(values: np.ndarray, names: Sequence[str] | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Forward-fill NaN per column (leading NaN <- first observed value); returns (filled, observed,
    count)."""
    v = np.asarray(values, dtype=np.float32)
    if v.ndim != 2:
        raise DataError(f"expected a [T, N] matrix, got shape {v.shape}")
    obs = ~np.isnan(v)
    empty = ~obs.any(0)
    if empty.any():
        cols = [names[i] if names else str(i) for i in np.flatnonzero(empty)[:5]]
        raise DataError(f"{int(empty.sum())} entities have no observed value at all (e.g. {cols}); drop them")
    idx = np.where(obs, np.arange(v.shape[0])[:, None], 0)
    np.maximum.accumulate(idx, axis=0, out=idx)
    filled = v[idx, np.arange(v.shape[1])[None, :]]
    first = v[obs.argmax(0), np.arange(v.shape[1])]
    filled = np.where(np.isnan(filled), first[None, :], filled)
    return filled.astype(np.float32), obs, int((~obs).sum())


def aggregate_steps(values: np.ndarray, k: int) -> np.ndarray:
    """Mean over consecutive blocks of ``k`` steps (gaps ignored; an all-gap block stays NaN); drops a
    remainder."""
    if k < 1:
        raise DataError(f"aggregation factor must be >= 1, got {k}")
    if k == 1:
        return np.asarray(values, dtype=np.float32)
    t = (values.shape[0] // k) * k
    blocks = values[:t].reshape(t // k, k, *values.shape[1:]).astype(np.float64)
    cnt = (~np.isnan(blocks)).sum(1)
    tot = np.nansum(blocks, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        out = np.where(cnt > 0, tot / np.maximum(cnt, 1), np.nan)
    return out.astype(np.float32)


def select_entities(entities: Sequence[str], max_entities: int) -> list[int]:
    """Column indices of an evenly spaced, deterministic subset of at most ``max_entities`` entities (0 =
    all)."""
    n = len(entities)
    if max_entities <= 0 or max_entities >= n:
        return list(range(n))
    return [int(i) for i in np.linspace(0, n - 1, max_entities).round().astype(int)]


def check_time(time: np.ndarray, where: str = "time column") -> int:
    """Strictly increasing, evenly spaced time stamps; returns the spacing (a clear error otherwise)."""
    t = np.asarray(time)
    if t.ndim != 1 or t.size < 2:
        raise DataError(f"{where}: need at least two time stamps, got {t.size}")
    d = np.diff(t)
    if np.any(d <= 0):
        i = int(np.flatnonzero(d <= 0)[0])
        raise DataError(f"{where}: time stamps are not increasing at row {i + 1} ({t[i]} then {t[i + 1]})")
    if np.any(d != d[0]):
        i = int(np.flatnonzero(d != d[0])[0])
        raise DataError(
            f"{where}: uneven time step at row {i + 1} ({d[0]} then {d[i]}); resample to a regular grid "
            "(missing steps must be rows with empty cells)"
        )
    return int(d[0])


def prepare(
    wm: WorkloadMatrix | None = None,
    *,
    name: str,
    values: np.ndarray | None = None,
    entities: Sequence[str] | None = None,
    time: np.ndarray | None = None,
    max_entities: int = 0,
    aggregate: int = 1,
    period_5min: int = 288,
) -> Series:
    """Select entities, aggregate ``aggregate`` 5-minute steps, fill gaps; see the module docstring."""
    if wm is not None:
        values, entities, time = wm.values, wm.entities, wm.time
    if values is None or entities is None:
        raise DataError("prepare() needs a WorkloadMatrix or values + entities")
    values = np.asarray(values, dtype=np.float32)
    time = np.arange(values.shape[0], dtype=np.int64) if time is None else np.asarray(time, dtype=np.int64)
    if period_5min % aggregate:
        raise DataError(f"aggregation {aggregate} must divide the daily period {period_5min}")
    cols = select_entities(entities, max_entities)
    raw = aggregate_steps(values[:, cols], aggregate)
    t = time[: raw.shape[0] * aggregate : aggregate]
    names = tuple(entities[i] for i in cols)
    filled, obs, n = fill_gaps(raw, names)
    return Series(name, names, t, raw, filled, obs, period_5min // aggregate, n, 5 * aggregate)


def with_prefix(s: Series, steps: int) -> Series:
    """The first ``steps`` steps of ``s`` (gaps re-filled from the truncated data only)."""
    filled, obs, n = fill_gaps(s.raw[:steps], s.entities)
    return replace(s, time=s.time[:steps], raw=s.raw[:steps], filled=filled, observed=obs, num_filled=n)


@dataclass(frozen=True)
class Split:
    """Index ranges: train ``[0, train_end)``, validation ``[train_end, val_end)``, test ``[val_end, T)``."""

    train_end: int
    val_end: int
    num_steps: int

    def __post_init__(self) -> None:
        if not 0 < self.train_end < self.val_end < self.num_steps:
            raise DataError(f"bad split {self.train_end} < {self.val_end} < {self.num_steps}")


def chrono_split(num_steps: int, train: float = 0.7, val: float = 0.1) -> Split:
    """First ``train`` of the steps for training, the next ``val`` for validation, the rest for test."""
    if not (0 < train and 0 < val and train + val < 1):
        raise DataError(f"split fractions must be positive and sum below 1, got {train}, {val}")
    return Split(int(round(num_steps * train)), int(round(num_steps * (train + val))), num_steps)


def tail_split(num_steps: int, test_steps: int, train_steps: int) -> Split:
    """Train on the first ``train_steps``, test on the last ``test_steps``, validate on what lies between."""
    return Split(train_steps, num_steps - test_steps, num_steps)


def origins(
    start: int, end: int, input_len: int, horizon: int, stride: int = 1, min_origin: int = 0
) -> np.ndarray:
    """Window origins ``t`` (first target) with ``start <= t``, ``t + horizon <= end`` and enough history."""
    lo = max(start, input_len, min_origin)
    hi = end - horizon
    if hi < lo:
        return np.zeros(0, dtype=np.int32)
    return np.arange(lo, hi + 1, max(stride, 1), dtype=np.int32)


@dataclass(frozen=True)
class Scaler:
    """Global standardisation from training values only (one mean and std for all entities, as DCRNN)."""

    mean: float
    std: float

    @staticmethod
    def fit(values: np.ndarray, observed: np.ndarray | None = None) -> Scaler:
        v = np.asarray(values, dtype=np.float64)
        v = v[observed] if observed is not None else v[np.isfinite(v)]
        if v.size == 0:
            raise DataError("no observed training values to fit the scaler")
        sd = float(v.std())
        return Scaler(float(v.mean()), sd if sd > 1e-6 else 1.0)

    def transform(self, x):
        return (x - self.mean) / self.std

    def inverse(self, z):
        return z * self.std + self.mean
