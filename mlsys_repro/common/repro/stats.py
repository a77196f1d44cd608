"""Small statistics shared by the claims checker and the figures (no repro imports: the bottom of the stack)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats

ALPHA = 0.05  # two-sided; every CI in this repository is a 1 - ALPHA (95 %) Student-t interval unless it says so


def mean_ci(x: Sequence[float], level: float = 1 - ALPHA) -> tuple[float, float, float, int]:
    """Mean and two-sided Student-t confidence interval at ``level`` over the finite values of ``x``.

    Returns ``(mean, lo, hi, n)``. A single value gives a zero-width interval (its caller decides whether a single
    run may be read as a point: see the claims checker's ``deterministic``); no finite value gives NaNs and n = 0.
    """
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be in (0, 1), got {level!r}")
    a = np.asarray(x, dtype=np.float64)
    a = a[np.isfinite(a)]
    n = a.size
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    m = float(a.mean())
    if n == 1:
        return m, m, m, 1
    se = float(a.std(ddof=1)) / math.sqrt(n)
    h = float(stats.t.ppf(0.5 + level / 2, df=n - 1)) * se
    return m, m - h, m + h, n


def bonferroni_level(k: int, alpha: float = ALPHA) -> float:
    """Per-comparison confidence level for ``k`` simultaneous two-sided intervals at family level ``1 - alpha``."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k!r}")
    return 1.0 - alpha / k
