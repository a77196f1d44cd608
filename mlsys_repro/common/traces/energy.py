"""Energy-side traces: hourly electricity prices, grid carbon intensity / renewable share, load profiles, and the
per-layer DNN latency tables vendored under ``data/energy/``.

Formats (see ``data/energy/README.md``):

* green-dcc price: ``Datetime (UTC),Datetime (Local),Price (USD/MWh)``; one row per UTC hour. Prices can be
  negative (real market outcomes): they are kept as they are.
* green-dcc carbon: ``datetime_utc,zone_id,ci_direct_gco2_per_kwh,ci_lca_gco2_per_kwh,low_carbon_pct,
  renewable_pct,estimated``; one row per UTC hour.
* pymgrid profile: one header line (may start with a BOM), then one value per hour of a typical year.
* Neurosurgeon latency table: CSV with numeric columns, the last one ``latency`` (ms, batch 1).

Error discipline (as in :mod:`mlsys_repro.common.traces.coflow`): anything malformed raises :class:`TraceFormatError`
naming file, line and field. Gaps are not errors: an empty cell, or hours missing between two timestamps, becomes NaN on
a contiguous hourly grid and is counted in ``num_missing``; :func:`fill_gaps` fills them explicitly (linear in
time, bounded gap length) so no NaN reaches a simulator unnoticed.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mlsys_repro.common.traces import register_loader
from mlsys_repro.common.traces._io import read_text, resolve
from mlsys_repro.common.traces.errors import TraceFormatError

HOUR = np.timedelta64(1, "h")


@dataclass(frozen=True)
class HourlySeries:
    """Values on a contiguous UTC hourly grid; NaN marks a gap in the source (counted in ``num_missing``)."""

    time: np.ndarray  # datetime64[h] [T], contiguous hours
    values: np.ndarray  # float64 [T]
    name: str
    unit: str
    path: str

    @property
    def num_missing(self) -> int:
        return int(np.isnan(self.values).sum())

    def __len__(self) -> int:
        return int(self.values.size)


@dataclass(frozen=True)
class CarbonSeries:
    """Grid carbon intensity and renewable share on a contiguous UTC hourly grid (NaN = gap)."""

    time: np.ndarray  # datetime64[h] [T]
    ci_direct: np.ndarray  # gCO2/kWh [T]
    renewable_frac: np.ndarray  # [0, 1] [T]
    estimated: np.ndarray  # bool [T]; True where the source estimated the value (False inside gaps)
    path: str

    @property
    def num_missing(self) -> int:
        return int(np.isnan(self.ci_direct).sum() + np.isnan(self.renewable_frac).sum())


@dataclass(frozen=True)
class RegionYear:
    """Price and carbon of one region for one calendar year, aligned hour by hour (gaps filled)."""

    region: str
    year: int
    time: np.ndarray  # datetime64[h] [T]
    price_usd_per_kwh: np.ndarray  # float64 [T], may be negative
    ci_g_per_kwh: np.ndarray  # float64 [T]
    renewable_frac: np.ndarray  # float64 [T] in [0, 1]
    filled: int  # number of values filled by :func:`fill_gaps`


@dataclass(frozen=True)
class EnergyTraces:
    """What the ``energy_green_dcc`` loader returns: region-years, hourly profiles and latency tables."""

    regions: dict[tuple[str, int], RegionYear]
    profiles: dict[str, HourlySeries]
    latency: dict[str, pd.DataFrame]


# ---------------------------------------------------------------------------------------------- parsing


def _rows(text: str, path, header: Sequence[str]) -> tuple[list[str], list[tuple[int, list[str]]]]:
    text = text.lstrip("\ufeff")
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise TraceFormatError(path, "empty file", 1)
    cols = [c.strip() for c in lines[0].rstrip("\r").split(",")]
    missing = [h for h in header if h not in cols]
    if missing:
        raise TraceFormatError(path, f"header lacks columns {missing}; has {cols}", 1)
    out = []
    for ln, raw in enumerate(lines[1:], start=2):
        raw = raw.rstrip("\r")
        if not raw.strip():
            raise TraceFormatError(path, "blank line inside the table", ln)
        f = raw.split(",")
        if len(f) != len(cols):
            raise TraceFormatError(path, f"row has {len(f)} fields, header has {len(cols)} (truncated row?)", ln)
        out.append((ln, f))
    if not out:
        raise TraceFormatError(path, "no data rows", 2)
    return cols, out


def _hour(tok: str, path, line: int, field: str) -> np.datetime64:
    try:
        ts = pd.Timestamp(tok.strip())
    except (ValueError, TypeError):
        raise TraceFormatError(path, f"not a timestamp: {tok!r}", line, field) from None
    if ts is pd.NaT:
        raise TraceFormatError(path, f"not a timestamp: {tok!r}", line, field)
    if ts.tzinfo is not None:
        ts = ts.tz_convert("UTC").tz_localize(None)
    if ts.minute or ts.second or ts.microsecond:
        raise TraceFormatError(path, f"timestamp {tok!r} is not on the hour", line, field)
    return np.datetime64(ts.to_datetime64(), "h")


def _hours(toks: list[str], lines: list[int], path, field: str) -> list[np.datetime64]:
    """Parse a timestamp column fast; on any failure fall back to row by row to name the bad line."""
    try:
        ts = pd.to_datetime(pd.Series(toks).str.strip(), utc=True, format="ISO8601")
        if ts.isna().any() or (ts.dt.minute != 0).any() or (ts.dt.second != 0).any():
            raise ValueError
        return list(ts.dt.tz_localize(None).to_numpy().astype("datetime64[h]"))
    except (ValueError, TypeError):
        return [_hour(t, path, ln, field) for t, ln in zip(toks, lines, strict=True)]


def _num(tok: str, path, line: int, field: str) -> float:
    tok = tok.strip()
    if tok == "":
        return math.nan
    try:
        v = float(tok)
    except ValueError:
        raise TraceFormatError(path, f"not a number: {tok!r} (gaps must be empty cells)", line, field) from None
    if not math.isfinite(v):
        raise TraceFormatError(path, f"non-finite value {tok!r}", line, field)
    return v


def _grid(times: list[np.datetime64], lines: list[int], path, field: str) -> tuple[np.ndarray, np.ndarray]:
    """Contiguous hourly grid from first to last timestamp and each row's index in it."""
    t = np.asarray(times, dtype="datetime64[h]")
    d = np.diff(t).astype(np.int64)
    if np.any(d <= 0):
        i = int(np.flatnonzero(d <= 0)[0]) + 1
        what = "duplicate" if d[i - 1] == 0 else "decreasing"
        raise TraceFormatError(path, f"{what} timestamp {t[i]} after {t[i - 1]}", lines[i], field)
    grid = np.arange(t[0], t[-1] + HOUR, HOUR)
    return grid, (t - t[0]).astype(np.int64)


def parse_price_csv(text: str, path: str | Path = "<string>") -> HourlySeries:
    """green-dcc price file -> USD/MWh on a contiguous UTC hourly grid (negative prices kept, gaps NaN)."""
    tcol, vcol = "Datetime (UTC)", "Price (USD/MWh)"
    cols, rows = _rows(text, path, (tcol, vcol))
    it, iv = cols.index(tcol), cols.index(vcol)
    times = _hours([f[it] for _, f in rows], [ln for ln, _ in rows], path, tcol)
    vals = [_num(f[iv], path, ln, vcol) for ln, f in rows]
    grid, idx = _grid(times, [ln for ln, _ in rows], path, tcol)
    out = np.full(grid.size, np.nan)
    out[idx] = vals
    return HourlySeries(grid, out, "price", "USD/MWh", str(path))


def parse_carbon_csv(text: str, path: str | Path = "<string>") -> CarbonSeries:
    """green-dcc carbon file -> direct CI (gCO2/kWh, >= 0) and renewable share (fraction in [0, 1])."""
    tcol, ccol, rcol, ecol = "datetime_utc", "ci_direct_gco2_per_kwh", "renewable_pct", "estimated"
    cols, rows = _rows(text, path, (tcol, ccol, rcol))
    it, ic, ir = cols.index(tcol), cols.index(ccol), cols.index(rcol)
    ie = cols.index(ecol) if ecol in cols else None
    times = _hours([f[it] for _, f in rows], [ln for ln, _ in rows], path, tcol)
    ci, ren, est = [], [], []
    for ln, f in rows:
        c = _num(f[ic], path, ln, ccol)
        r = _num(f[ir], path, ln, rcol)
        if c < 0:
            raise TraceFormatError(path, f"negative carbon intensity {c}", ln, ccol)
        if not (math.isnan(r) or 0.0 <= r <= 100.0):
            raise TraceFormatError(path, f"renewable_pct {r} outside [0, 100]", ln, rcol)
        e = False
        if ie is not None:
            tok = f[ie].strip().lower()
            if tok not in ("true", "false", ""):
                raise TraceFormatError(path, f"expected true/false, got {f[ie]!r}", ln, ecol)
            e = tok == "true"
        ci.append(c)
        ren.append(r / 100.0)
        est.append(e)
    grid, idx = _grid(times, [ln for ln, _ in rows], path, tcol)
    c_out, r_out, e_out = np.full(grid.size, np.nan), np.full(grid.size, np.nan), np.zeros(grid.size, bool)
    c_out[idx], r_out[idx], e_out[idx] = ci, ren, est
    return CarbonSeries(grid, c_out, r_out, e_out, str(path))


def parse_profile_csv(text: str, path: str | Path = "<string>", expected_rows: int | None = 8760,
                      allow_negative: bool = False) -> HourlySeries:
    """A one-column hourly profile of a typical year (pymgrid): header line, then one number per hour."""
    text = text.lstrip("\ufeff")
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) < 2:
        raise TraceFormatError(path, "needs a header line and at least one value", 1)
    name = lines[0].strip()
    if "," in name:
        raise TraceFormatError(path, f"expected one column, header is {name!r}", 1)
    vals = np.empty(len(lines) - 1)
    for i, raw in enumerate(lines[1:]):
        v = _num(raw, path, i + 2, name)
        if v < 0 and not allow_negative:
            raise TraceFormatError(path, f"negative value {v}", i + 2, name)
        vals[i] = v
    if expected_rows is not None and vals.size != expected_rows:
        raise TraceFormatError(path, f"expected {expected_rows} hourly rows, found {vals.size} (truncated?)",
                               len(lines), name)
    time = np.arange(vals.size).astype("datetime64[h]")  # hour-of-year (no calendar in the source)
    return HourlySeries(time, vals, name, "", str(path))


LATENCY_COLUMNS = {
    "conv": ("HW", "kernel", "stride", "Cin", "Cout", "FLOPs", "latency"),
    "dw_conv": ("HW", "kernel", "stride", "Cin", "FLOPs", "latency"),
    "linear": ("in_features", "out_features", "FLOPs", "latency"),
    "maxpool": ("HW", "kernel", "stride", "Cin", "latency"),
    "avgpool": ("HW", "output", "Cin", "latency"),
    "batchnorm": ("HW", "Cin", "latency"),
}


def parse_latency_csv(text: str, layer_type: str, path: str | Path = "<string>") -> pd.DataFrame:
    """A per-layer latency table (Neurosurgeon style): all columns numeric, latency in ms and > 0, no gaps."""
    if layer_type not in LATENCY_COLUMNS:
        raise TraceFormatError(path, f"unknown layer type {layer_type!r}; known {sorted(LATENCY_COLUMNS)}")
    want = LATENCY_COLUMNS[layer_type]
    cols, rows = _rows(text, path, want)
    data = {c: np.empty(len(rows)) for c in want}
    idx = {c: cols.index(c) for c in want}
    for k, (ln, f) in enumerate(rows):
        for c in want:
            v = _num(f[idx[c]], path, ln, c)
            if math.isnan(v):
                raise TraceFormatError(path, "empty cell (latency tables have no gaps)", ln, c)
            if v < 0 or (c == "latency" and v == 0):
                raise TraceFormatError(path, f"value must be {'> 0' if c == 'latency' else '>= 0'}, got {v}", ln, c)
            data[c][k] = v
    return pd.DataFrame(data)


def load_price_series(path: str | Path) -> HourlySeries:
    return parse_price_csv(read_text(path), path)


def load_carbon_series(path: str | Path) -> CarbonSeries:
    return parse_carbon_csv(read_text(path), path)


def load_profile(path: str | Path, expected_rows: int | None = 8760) -> HourlySeries:
    return parse_profile_csv(read_text(path), path, expected_rows)


def load_latency_table(path: str | Path, layer_type: str) -> pd.DataFrame:
    return parse_latency_csv(read_text(path), layer_type, path)


# ---------------------------------------------------------------------------------------------- gaps


def fill_gaps(values: np.ndarray, max_gap: int | None = 24, what: str = "series") -> tuple[np.ndarray, int]:
    """Fill NaN runs by linear interpolation between their neighbours (ends: nearest value).

    Returns ``(filled, count)``. Raises ValueError when every value is missing or a run is longer than
    ``max_gap`` hours (``None``: no limit), so long outages are a decision, not an accident.
    """
    v = np.asarray(values, dtype=np.float64).copy()
    miss = np.isnan(v)
    n = int(miss.sum())
    if n == 0:
        return v, 0
    if n == v.size:
        raise ValueError(f"{what}: every value is missing")
    if max_gap is not None:
        edges = np.diff(np.concatenate([[0], miss.astype(np.int8), [0]]))
        runs = np.flatnonzero(edges == -1) - np.flatnonzero(edges == 1)
        if runs.max() > max_gap:
            raise ValueError(f"{what}: a gap of {int(runs.max())} hours exceeds max_gap={max_gap}")
    x = np.arange(v.size)
    v[miss] = np.interp(x[miss], x[~miss], v[~miss])
    return v, n


def year_grid(year: int) -> np.ndarray:
    """Every UTC hour of a calendar year, datetime64[h]."""
    return np.arange(np.datetime64(f"{year}-01-01T00", "h"), np.datetime64(f"{year + 1}-01-01T00", "h"), HOUR)


def _on_year(time: np.ndarray, values: np.ndarray, year: int) -> np.ndarray:
    grid = year_grid(year)
    out = np.full(grid.size, np.nan)
    pos = (time - grid[0]).astype(np.int64)
    ok = (pos >= 0) & (pos < grid.size)
    out[pos[ok]] = values[ok]
    return out


def region_year(price: HourlySeries, carbon: CarbonSeries, region: str, year: int,
                max_gap: int | None = 24) -> RegionYear:
    """Align a price and a carbon series on the calendar year's hourly grid and fill gaps (see fill_gaps)."""
    p, n1 = fill_gaps(_on_year(price.time, price.values, year), max_gap, f"{price.path} price")
    c, n2 = fill_gaps(_on_year(carbon.time, carbon.ci_direct, year), max_gap, f"{carbon.path} ci")
    r, n3 = fill_gaps(_on_year(carbon.time, carbon.renewable_frac, year), max_gap, f"{carbon.path} renewable")
    return RegionYear(region, year, year_grid(year), p / 1000.0, c, np.clip(r, 0.0, 1.0), n1 + n2 + n3)


def load_region_year(data_dir: str | Path, price_file: str, ci_file: str, region: str, year: int,
                     max_gap: int | None = 24) -> RegionYear:
    return region_year(load_price_series(resolve(data_dir, price_file)),
                       load_carbon_series(resolve(data_dir, ci_file)), region, year, max_gap)


@register_loader("energy_green_dcc")
def _energy(cfg, data_dir: Path) -> EnergyTraces:
    """Trace config keys: ``price/<REGION>/<YEAR>``, ``ci/<REGION>/<YEAR>``, ``profile/<name>``,
    ``latency/<device>/<layer_type>``; option ``max_gap_hours`` (default 24)."""
    files = dict(cfg.files)
    max_gap = cfg.options.get("max_gap_hours", 24)
    regions: dict[tuple[str, int], RegionYear] = {}
    profiles: dict[str, HourlySeries] = {}
    latency: dict[str, pd.DataFrame] = {}
    for key, rel in files.items():
        parts = key.split("/")
        if parts[0] == "price":
            if len(parts) != 3:
                raise ValueError(f"trace {cfg.name}: price key must be price/<REGION>/<YEAR>, got {key!r}")
            region, year = parts[1], int(parts[2])
            ci_key = f"ci/{region}/{year}"
            if ci_key not in files:
                raise ValueError(f"trace {cfg.name}: {key} has no matching {ci_key}")
            regions[(region, year)] = load_region_year(data_dir, rel, files[ci_key], region, year, max_gap)
        elif parts[0] == "profile":
            profiles[parts[1]] = load_profile(resolve(data_dir, rel))
        elif parts[0] == "latency":
            latency["/".join(parts[1:])] = load_latency_table(resolve(data_dir, rel), parts[2])
        elif parts[0] != "ci":
            raise ValueError(f"trace {cfg.name}: unknown file key {key!r}")
    return EnergyTraces(regions, profiles, latency)


__all__ = [
    "LATENCY_COLUMNS", "CarbonSeries", "EnergyTraces", "HourlySeries", "RegionYear", "fill_gaps",
    "load_carbon_series", "load_latency_table", "load_price_series", "load_profile", "load_region_year",
    "parse_carbon_csv", "parse_latency_csv", "parse_price_csv", "parse_profile_csv", "region_year", "year_grid",
]
