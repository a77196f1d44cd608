"""Wide utilisation matrices (first column time, one column per entity, values in %).

Used for the Bitbrains, Azure and Google 2011 traces. Empty cells are real gaps in the trace: they are returned
as NaN *and* counted in :attr:`WorkloadMatrix.num_missing`, so callers choose to mask or fill them explicitly.
Anything else that is not a number, a negative value, a ragged row or a time column that does not increase is
an error naming the file, line and column.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mlsys_repro.common.traces._io import read_text
from mlsys_repro.common.traces.errors import TraceFormatError


@dataclass(frozen=True)
class WorkloadMatrix:
    time: np.ndarray  # int64 [T], strictly increasing
    entities: tuple[str, ...]
    values: np.ndarray  # float32 [T, N], NaN = gap in the trace
    path: str
    time_column: str

    @property
    def num_missing(self) -> int:
        return int(np.isnan(self.values).sum())

    @property
    def shape(self) -> tuple[int, int]:
        return self.values.shape  # type: ignore[return-value]


def parse_workload_csv(text: str, path: str | Path = "<string>", allow_gaps: bool = True) -> WorkloadMatrix:
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if len(lines) < 2:
        raise TraceFormatError(path, "needs a header and at least one data row", 1)
    header = lines[0].split(",")
    if len(header) < 2 or any(not h.strip() for h in header):
        raise TraceFormatError(path, "header must be '<time>,<entity>,...' with non-empty names", 1)
    if len(set(header)) != len(header):
        dup = sorted({h for h in header if header.count(h) > 1})
        raise TraceFormatError(path, f"duplicate column names {dup}", 1)
    ncol = len(header)
    for i, ln in enumerate(lines[1:], start=2):
        k = ln.count(",") + 1
        if k != ncol:
            raise TraceFormatError(path, f"row has {k} fields, header has {ncol} (truncated or ragged row)", i)
    df = pd.read_csv(io.StringIO("\n".join(lines)), dtype=str, keep_default_na=False)
    time_s = df.iloc[:, 0]
    t = pd.to_numeric(time_s, errors="coerce")
    if t.isna().any():
        i = int(np.flatnonzero(t.isna().to_numpy())[0])
        raise TraceFormatError(path, f"time must be an integer, got {time_s.iloc[i]!r}", i + 2, header[0])
    t = t.to_numpy()
    if np.any(t != np.round(t)):
        i = int(np.flatnonzero(t != np.round(t))[0])
        raise TraceFormatError(path, f"time must be an integer, got {time_s.iloc[i]!r}", i + 2, header[0])
    d = np.diff(t)
    if np.any(d <= 0):
        i = int(np.flatnonzero(d <= 0)[0]) + 1
        raise TraceFormatError(path, f"time does not increase ({t[i - 1]:g} then {t[i]:g})", i + 2, header[0])
    raw = df.iloc[:, 1:]
    empty = (raw == "").to_numpy()
    vals = raw.apply(pd.to_numeric, errors="coerce").to_numpy(np.float64)
    bad = np.isnan(vals) & ~empty
    if bad.any():
        r, c = map(int, np.argwhere(bad)[0])
        raise TraceFormatError(path, f"not a number: {raw.iat[r, c]!r} (gaps must be empty cells)", r + 2,
                               header[c + 1])
    inf = np.isinf(vals)
    neg = vals < 0
    for mask, what in ((inf, "infinite value"), (neg, "negative utilisation")):
        if mask.any():
            r, c = map(int, np.argwhere(mask)[0])
            raise TraceFormatError(path, f"{what}: {raw.iat[r, c]}", r + 2, header[c + 1])
    if empty.any() and not allow_gaps:
        r, c = map(int, np.argwhere(empty)[0])
        raise TraceFormatError(path, f"{int(empty.sum())} empty cells (gaps) where none are allowed", r + 2,
                               header[c + 1])
    return WorkloadMatrix(t.astype(np.int64), tuple(header[1:]), vals.astype(np.float32), str(path), header[0])


def load_workload_matrix(path: str | Path, allow_gaps: bool = True) -> WorkloadMatrix:
    """Load a shipped ``time x entity`` CSV(.gz); see the module docstring for what is an error."""
    return parse_workload_csv(read_text(path), path, allow_gaps)
