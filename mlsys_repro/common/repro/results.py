"""The one long result format, its validation, provenance and atomic CSV writes.

Every experiment writes ``results/<paper>/<experiment>.csv`` with the columns

    paper, experiment, policy, trace, hardware, seed, metric, value, unit,
    [condition columns ...], profile, git_sha, jax_version, config_hash

Condition columns are optional extra columns an experiment adds for the variable it sweeps (``bandwidth_gbps``,
``alpha``, ``step``, ...); claims can filter and aggregate over them. ``value`` is always a finite float.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from mlsys_repro.common.repro.errors import ResultSchemaError

ROW_COLUMNS = ("policy", "trace", "hardware", "seed", "metric", "value", "unit")
RESULT_COLUMNS = ("paper", "experiment", *ROW_COLUMNS)
PROVENANCE_COLUMNS = ("profile", "git_sha", "jax_version", "config_hash")


def metric_rows(
    policy: str,
    metrics: Mapping[str, tuple[Any, str]],
    seeds: Iterable[int] | None = None,
    **conditions: Any,
) -> list[dict[str, Any]]:
    """Rows for one policy: ``metrics`` maps name -> (values, unit); values is a scalar or one per seed.

    >>> metric_rows("sebf", {"avg_cct_s": ([1.0, 2.0], "s")}, seeds=[0, 1])[1]["value"]
    2.0
    """
    rows: list[dict[str, Any]] = []
    for metric, (values, unit) in metrics.items():
        vals = np.atleast_1d(np.asarray(values, dtype=np.float64))
        sds = np.arange(vals.size) if seeds is None else np.asarray(list(seeds))
        if sds.size != vals.size:
            raise ResultSchemaError(f"metric {metric!r} of {policy!r}: {vals.size} values for {sds.size} seeds")
        for s, v in zip(sds, vals, strict=True):
            rows.append({"policy": policy, "seed": int(s), "metric": metric, "value": float(v), "unit": unit,
                         **conditions})
    return rows


def to_frame(rows: pd.DataFrame | Iterable[Mapping[str, Any]], *, trace: str, hardware: str) -> pd.DataFrame:
    """Accept a frame or row dicts, fill ``trace``/``hardware`` defaults, and validate the result."""
    df = rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
    if df.empty:
        raise ResultSchemaError("experiment returned no rows")
    if "trace" not in df:
        df["trace"] = trace
    if "hardware" not in df:
        df["hardware"] = hardware
    df["trace"] = df["trace"].fillna(trace)
    df["hardware"] = df["hardware"].fillna(hardware)
    validate_rows(df)
    extra = [c for c in df.columns if c not in ROW_COLUMNS]
    return df[[*ROW_COLUMNS, *extra]].reset_index(drop=True)


def validate_rows(df: pd.DataFrame) -> None:
    missing = [c for c in ROW_COLUMNS if c not in df.columns]
    if missing:
        raise ResultSchemaError(f"result rows lack columns {missing}; have {list(df.columns)}")
    reserved = [c for c in (*RESULT_COLUMNS[:2], *PROVENANCE_COLUMNS) if c in df.columns]
    if reserved:
        raise ResultSchemaError(f"columns {reserved} are set by the runner, not by experiments")
    try:
        values = pd.to_numeric(df["value"], errors="raise").astype(np.float64)
    except (TypeError, ValueError) as e:
        raise ResultSchemaError(f"non-numeric value in results: {e}") from None
    bad = ~np.isfinite(values.to_numpy())
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        r = df.iloc[i]
        raise ResultSchemaError(
            f"{int(bad.sum())} non-finite values; first: policy={r['policy']!r} metric={r['metric']!r} "
            f"seed={r['seed']!r} value={r['value']!r}"
        )
    df["value"] = values
    if not pd.api.types.is_integer_dtype(df["seed"]):
        try:
            seeds = df["seed"].astype(np.float64)
            if not np.all(seeds == np.round(seeds)):
                raise ValueError
            df["seed"] = seeds.astype(np.int64)
        except (TypeError, ValueError):
            raise ResultSchemaError("seed must be an integer column") from None
    for col in ("policy", "metric", "unit", "trace", "hardware"):
        if df[col].isna().any() or (df[col].astype(str).str.len() == 0).any() and col != "unit":
            raise ResultSchemaError(f"column {col!r} has empty entries")
    for col in df.columns:
        if df[col].map(lambda v: isinstance(v, (list, dict, tuple, np.ndarray))).any():
            raise ResultSchemaError(f"column {col!r} holds non-scalar values")


@functools.cache
def git_sha(root: str) -> str:
    try:
        sha = subprocess.run(
            ["git", "-C", root, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", root, "status", "--porcelain", "--untracked-files=no", "--", "mlsys_repro", "conf", "data"],
            capture_output=True, text=True, check=True,
        ).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def package_version() -> str:
    """The installed distribution's version (``unknown`` when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("mlsys-repro")
    except PackageNotFoundError:
        return "unknown"


def config_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def with_provenance(df: pd.DataFrame, *, paper: str, experiment: str, profile: str, root: str,
                    chash: str) -> pd.DataFrame:
    import jax

    out = df.copy()
    out.insert(0, "experiment", experiment)
    out.insert(0, "paper", paper)
    out["profile"] = profile
    out["git_sha"] = git_sha(root)
    out["jax_version"] = jax.__version__
    out["config_hash"] = chash
    return out


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so readers see either the old file or the complete new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; results are for everyone to read
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_csv(df: pd.DataFrame, path: Path) -> None:
    atomic_write_bytes(path, df.to_csv(index=False, float_format="%.10g").encode())


def read_results(path: Path) -> pd.DataFrame:
    df = pd.read_csv(path)
    missing = [c for c in (*RESULT_COLUMNS, *PROVENANCE_COLUMNS) if c not in df.columns]
    if missing:
        raise ResultSchemaError(f"{path}: missing columns {missing}")
    return df


def is_up_to_date(path: Path, chash: str) -> bool:
    """True when ``path`` is a complete result file produced by a run with config hash ``chash``."""
    if not Path(path).exists():
        return False
    try:
        df = read_results(path)
    except (ResultSchemaError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
        return False
    return len(df) > 0 and set(df["config_hash"].astype(str)) == {chash}
