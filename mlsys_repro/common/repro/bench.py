"""The one benchmark harness: time a callable (first call, then repeats: min and median), record the machine and its
load beside the figures, and build what is timed from the same configs as the experiments.

A paper's ``bench.py`` stays thin: it builds its inputs with :func:`bench_context` (the experiment's own composed
config, so a benchmark measures what ``./reproduce.sh`` runs), wraps each piece in a zero-argument callable and
prints :func:`time_it` lines::

    ctx = bench_context("greenplace/headline")
    print(machine_line())
    print(time_it("one PPO chunk", lambda: train.advance(state, *args), repeats=5).line())

Benchmarks print figures; they assert nothing (targets are read from the figures, with the load written beside).
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

_clock = time.perf_counter  # module attribute so that tests can drive it


@dataclass(frozen=True)
class Timing:
    """Wall seconds of one benchmarked callable: its first call (compilation included) and ``repeats`` more."""

    name: str
    first_s: float
    min_s: float
    median_s: float
    repeats: int
    per: str = ""  # what one call does, e.g. "1,000 env steps"
    load: float = 0.0  # 1-min load average when the timing finished

    def line(self) -> str:
        per = f" per {self.per}" if self.per else ""
        return (f"{self.name}: first {self.first_s:.3f} s, then min {self.min_s:.3f} s / median {self.median_s:.3f} s"
                f"{per} over {self.repeats} repeats (load {self.load:.2f})")


def _block(out: Any) -> Any:
    try:
        import jax
    except ImportError:  # pragma: no cover - jax is a dependency
        return out
    return jax.block_until_ready(out)


def time_it(name: str, fn: Callable[[], Any], repeats: int = 3, per: str = "") -> Timing:
    """Call ``fn()`` once (compilation, caches) and then ``repeats`` times, waiting for JAX outputs each time."""
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    t0 = _clock()
    _block(fn())
    first = _clock() - t0
    times = []
    for _ in range(repeats):
        t0 = _clock()
        _block(fn())
        times.append(_clock() - t0)
    return Timing(name, first, min(times), statistics.median(times), repeats, per, load())


def load() -> float:
    """The 1-minute load average (0.0 where the platform has none)."""
    try:
        return os.getloadavg()[0]
    except OSError:  # pragma: no cover
        return 0.0


def machine_line() -> str:
    """One line naming the machine a figure was measured on: CPUs, load, Python, JAX version and backend."""
    import jax

    return (f"machine: {os.cpu_count()} CPUs, load {load():.2f}, Python {platform.python_version()}, "
            f"jax {jax.__version__} ({jax.default_backend()})")


def bench_context(experiment: str, profile: str = "default", overrides: Sequence[str] = ()):
    """The :class:`mlsys_repro.common.repro.registry.RunContext` that ``experiment=<paper>/<name>`` gets under
    ``profile``: benchmarks build their inputs from the experiments' own configs."""
    from mlsys_repro.common.repro.config import build_context, compose_run

    return build_context(compose_run([f"experiment={experiment}", f"profile={profile}", *overrides]))
