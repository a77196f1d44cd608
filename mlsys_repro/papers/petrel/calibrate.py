"""Fit the straggler model of the simulated cluster to the PAI 2020 per-worker mini-batch times.

The compute time of one iteration of worker ``w`` is modelled (see :mod:`mlsys_repro.papers.petrel.hardware`) as

    base_step_s * class_slowdown[w] * regime[w] * LogNormal(0, noise_sigma) * (straggler_slowdown if straggling)

with a transient straggler in each iteration with probability ``straggler_prob`` and, in each iteration, a regime
shift (the worker's persistent speed level changes, e.g. a co-located job arrives) with probability
``regime_shift_prob``. This module estimates ``noise_sigma``, ``straggler_prob``, ``straggler_slowdown``,
``regime_shift_prob`` and ``regime_shift_factor`` from the four PAI jobs (10 workers each):

* level: a worker's running median over ``window`` iterations; ratio r = time / level;
* noise_sigma: robust (MAD) standard deviation of log r over non-straggling iterations;
* transient straggler: an iteration with r > ``straggler_threshold``; slowdown = mean r of those;
* regime shift: consecutive blocks of ``block`` iterations whose median levels differ by more than
  ``shift_threshold`` times; rate = shifts / worker-iterations, factor = geometric mean of the level ratios.

Run ``python -m mlsys_repro.papers.petrel.calibrate`` to print the fit; the hardware profiles carry the rounded numbers
and a test checks that they agree with this fit.
"""

from __future__ import annotations

import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from mlsys_repro.common.traces.errors import TraceFormatError

PAI_DIR = "gpu_traces/alibaba_pai2020"
PAI_FILES = tuple(f"minibatch_time_job_{j}_norm.csv.gz" for j in (1, 2, 3, 4))
COLUMNS = ("worker", "time", "batch_time_norm")


@dataclass(frozen=True)
class StragglerFit:
    noise_sigma: float
    straggler_prob: float
    straggler_slowdown: float
    regime_shift_prob: float
    regime_shift_factor: float
    worker_iterations: int
    jobs: int
    max_speed_ratio_within_job: float


def load_pai_minibatch(path: Path) -> np.ndarray:
    """One PAI job as a ``[iterations, workers]`` float array of mini-batch times (NaN where a worker has none)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: PAI mini-batch trace missing (vendored under data/{PAI_DIR})")
    df = pd.read_csv(path, index_col=0)
    for c in COLUMNS:
        if c not in df.columns:
            raise TraceFormatError(path, f"missing column {c!r}; have {list(df.columns)}", line=1, field=c)
    t = pd.to_numeric(df["batch_time_norm"], errors="coerce")
    bad = t.isna() | (t <= 0)
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise TraceFormatError(path, f"not a positive number: {df.iloc[i, :].tolist()}", line=i + 2,
                               field="batch_time_norm")
    return df.assign(batch_time_norm=t).pivot_table(index="time", columns="worker", values="batch_time_norm",
                                                    aggfunc="mean").to_numpy(dtype=np.float64)


def fit(times: list[np.ndarray], window: int = 51, straggler_threshold: float = 1.5, block: int = 50,
        shift_threshold: float = 1.5) -> StragglerFit:
    """Fit the straggler model to a list of ``[iterations, workers]`` arrays (one per job)."""
    log_r, strag_r, shift_logs = [], [], []
    n_iter = 0
    ratios = []
    for m in times:
        med_w = np.nanmedian(m, axis=0)
        ratios.append(float(np.nanmax(med_w) / np.nanmin(med_w)))
        for w in range(m.shape[1]):
            x = m[:, w]
            x = x[np.isfinite(x)]
            if x.size < 2 * block:
                continue
            n_iter += x.size
            level = pd.Series(x).rolling(window, center=True, min_periods=1).median().to_numpy()
            r = x / level
            strag = r > straggler_threshold
            strag_r.append(r[strag])
            log_r.append(np.log(r[~strag]))
            b = x[: x.size // block * block].reshape(-1, block)
            lv = np.median(b, axis=1)
            jumps = np.log(lv[1:] / lv[:-1])
            shift_logs.append(np.abs(jumps[np.abs(jumps) > np.log(shift_threshold)]))
    lr = np.concatenate(log_r)
    sr = np.concatenate(strag_r)
    sh = np.concatenate(shift_logs)
    mad = float(np.median(np.abs(lr - np.median(lr))))
    return StragglerFit(
        noise_sigma=1.4826 * mad,
        straggler_prob=float(sr.size / n_iter),
        straggler_slowdown=float(sr.mean()) if sr.size else 1.0,
        regime_shift_prob=float(sh.size / n_iter),
        regime_shift_factor=float(np.exp(sh.mean())) if sh.size else 1.0,
        worker_iterations=int(n_iter),
        jobs=len(times),
        max_speed_ratio_within_job=max(ratios),
    )


def fit_pai(data_dir: str | Path) -> StragglerFit:
    d = Path(data_dir) / PAI_DIR
    return fit([load_pai_minibatch(d / f) for f in PAI_FILES])


if __name__ == "__main__":
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[3] / "data"
    for k, v in asdict(fit_pai(root)).items():
        print(f"{k}: {v:.6g}" if isinstance(v, float) else f"{k}: {v}")
