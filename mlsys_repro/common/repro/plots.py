"""Matplotlib (Agg) helpers shared by the papers' figures: the one style every figure uses (:data:`STYLE`,
applied on import and again by :func:`figure`), 95 % CI bars and bands that say so, whiskers that stop at a
physical zero, and atomic PNG writes titled with the experiment, profile and number of seeds
(:meth:`mlsys_repro.common.repro.registry.RunContext.save_figure`).
"""

from __future__ import annotations

import io
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from mlsys_repro.common.repro.results import atomic_write_bytes  # noqa: E402
from mlsys_repro.common.repro.stats import mean_ci  # noqa: E402

CI_NOTE = "error bars / bands: 95 % CI of the mean over seeds"

# The house style: small type that fits multi-panel figures, light grids behind the data, one colour cycle.
STYLE: dict[str, object] = {
    "font.size": 9, "axes.titlesize": 9, "axes.labelsize": 9, "xtick.labelsize": 8, "ytick.labelsize": 8,
    "legend.fontsize": 8, "legend.framealpha": 0.8, "figure.titlesize": 9,
    "axes.grid": True, "axes.axisbelow": True, "grid.alpha": 0.3,
    "axes.prop_cycle": matplotlib.cycler(color=list(matplotlib.colormaps["tab10"].colors)),
    "lines.linewidth": 1.5, "lines.markersize": 4, "errorbar.capsize": 3, "image.cmap": "viridis",
    "savefig.dpi": 120, "savefig.facecolor": "white",
}


def apply_style() -> None:
    """Set :data:`STYLE` on matplotlib's global parameters (idempotent)."""
    matplotlib.rcParams.update(STYLE)


apply_style()


ONE_RUN_NOTE = "1 run: no CI (deterministic, or one seed)"


def wrap_note(note: str, width_in: float, fontsize: float = 7.0) -> str:
    """``note`` broken into lines that fit a figure ``width_in`` inches wide at ``fontsize`` points (about 0.55 em
    per character), so a provenance header wraps instead of running past the image's edge."""
    chars = max(20, int(width_in * 72.0 / (0.55 * fontsize)))
    return "\n".join(textwrap.wrap(note, chars)) or note


def save_figure(fig, path: Path, dpi: int = 120, note: str | None = None) -> None:
    """Write ``fig`` as PNG atomically and close it; ``note`` (e.g. profile and seeds) goes on top in small type,
    wrapped to the figure's width."""
    buf = io.BytesIO()
    if note:
        text = wrap_note(note, fig.get_size_inches()[0])
        lines = text.count("\n") + 1
        fig.suptitle(text, fontsize=7, color="#444")
        fig.tight_layout(rect=(0, 0, 1, 1.0 - min(0.3, 0.12 * lines / fig.get_size_inches()[1] + 0.01)))
    else:
        fig.tight_layout()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    plt.close(fig)
    atomic_write_bytes(Path(path), buf.getvalue())


def cdf(ax, samples: Mapping[str, Sequence[float]], xlabel: str, log: bool = True) -> None:
    """Empirical CDF per label (e.g. per-coflow CCT per policy)."""
    for label, xs in samples.items():
        x = np.sort(np.asarray(xs, dtype=float))
        ax.step(x, np.arange(1, x.size + 1) / max(x.size, 1), where="post", label=label)
    if log:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("CDF")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def _nonneg(values: np.ndarray, nonneg: bool | None) -> bool:
    """Whether intervals stop at 0: as given, else when every value of the metric is >= 0 (times, counts, rates,
    accuracies: a metric that cannot be negative)."""
    return bool((values >= 0).all()) if nonneg is None else nonneg


def bars_with_ci(ax, df: pd.DataFrame, metric: str, by: str = "policy", ylabel: str | None = None,
                 nonneg: bool | None = None, hue: str | None = None) -> None:
    """Bar per ``by`` value of the seed mean of ``metric`` with a 95 % CI whisker; with ``hue`` (a column), one
    bar per (``by``, ``hue``) pair, grouped by ``by``, coloured and labelled by ``hue``.

    ``nonneg`` (default: every value of the metric is >= 0, e.g. times, counts, rates): the metric cannot be
    negative, so a whisker stops at 0 instead of reaching below it."""

    sel = df[df["metric"] == metric]
    names = list(dict.fromkeys(sel[by].tolist()))
    nonneg = _nonneg(sel["value"].to_numpy(dtype=float), nonneg)
    groups = [None] if hue is None else list(dict.fromkeys(sel[hue].tolist()))
    width = 0.8 / max(len(groups), 1)
    for j, g in enumerate(groups):
        sub = sel if g is None else sel[sel[hue] == g]
        stats_ = [mean_ci(sub[sub[by] == n]["value"].to_numpy()) for n in names]
        means = np.array([s[0] for s in stats_])
        lows = np.array([max(s[1], 0.0) if nonneg else s[1] for s in stats_])
        err = np.array([means - lows, [s[2] - s[0] for s in stats_]])
        xs = np.arange(len(names)) + (j - (len(groups) - 1) / 2) * width
        if g is None:
            ax.bar(xs, means, width, yerr=err, capsize=3, color="tab:blue", alpha=0.8)
        else:
            ax.bar(xs, means, width, yerr=err, capsize=2, label=str(g), alpha=0.9)
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_ylabel(ylabel or metric)
    ax.grid(axis="y", alpha=0.3)
    if hue is not None:
        ax.legend(title=hue, fontsize=7, title_fontsize=7)


def lines_with_ci(ax, df: pd.DataFrame, metric: str, x: str, by: str = "policy", xlabel: str | None = None,
                  ylabel: str | None = None, logx: bool = False, nonneg: bool | None = None) -> None:
    """One line per ``by`` value: mean over seeds of ``metric`` against column ``x``, shaded 95 % CI (stopping at
    0 when the metric cannot be negative: ``nonneg``, as in :func:`bars_with_ci`)."""

    sel = df[df["metric"] == metric]
    nonneg = _nonneg(sel["value"].to_numpy(dtype=float), nonneg)
    for name, g in sel.groupby(by, sort=False):
        xs = sorted(g[x].unique())
        st = [mean_ci(g[g[x] == v]["value"].to_numpy()) for v in xs]
        m = np.array([s[0] for s in st])
        lo = np.array([s[1] for s in st])
        ax.plot(xs, m, marker="o", ms=3, label=str(name))
        ax.fill_between(xs, np.maximum(lo, 0.0) if nonneg else lo, [s[2] for s in st], alpha=0.2)
    if logx:
        ax.set_xscale("log")
    ax.set_xlabel(xlabel or x)
    ax.set_ylabel(ylabel or metric)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)


def figure(ncols: int = 1, nrows: int = 1, w: float = 5.0, h: float = 3.6):
    """A grid of ``nrows x ncols`` axes (always 2-D) in the house style."""
    apply_style()
    return plt.subplots(nrows, ncols, figsize=(w * ncols, h * nrows), squeeze=False)
