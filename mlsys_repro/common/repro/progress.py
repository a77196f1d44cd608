"""Progress lines (which experiment, how far, elapsed and ETA) for long runs, through Python ``logging``.

Lines go to the ``mlsys_repro`` logger: ``./reproduce.sh`` shows them on stderr (:func:`console_logging`), and a
Hydra run (``python -m mlsys_repro.common.repro.main``) also writes them to its job log file.
"""

from __future__ import annotations

import logging
import sys
import time

LOGGER = logging.getLogger("mlsys_repro")


def console_logging() -> None:
    """Show the ``mlsys_repro`` logger's INFO lines bare on stderr, unless something (Hydra) already handles them."""
    if LOGGER.handlers or logging.getLogger().handlers:
        return
    h = logging.StreamHandler(sys.stderr)
    h.setFormatter(logging.Formatter("%(message)s"))
    LOGGER.addHandler(h)
    LOGGER.setLevel(logging.INFO)
    LOGGER.propagate = False


def fmt_seconds(s: float) -> str:
    s = max(0, int(round(s)))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


class Progress:
    """Reports ``done/total`` of a unit of work with elapsed time and a linear ETA.

    The ETA is measured from the first reported step on: the first step of a jitted program includes its
    compilation (a 9-s job once predicted 1:32), so until a second step is done the ETA reads ``?`` and the line says
    that the first step included compiling.

    ``label`` is set by the runner to ``paper/experiment``; experiments call :meth:`start` with the number of
    steps they will report and :meth:`update` after each. Lines are throttled to one per ``min_interval`` s and go
    to ``stream`` when one is given, else to the ``mlsys_repro`` logger at INFO.
    """

    def __init__(self, label: str = "", stream=None, min_interval: float = 2.0):
        self.label = label
        self.stream = stream
        self.min_interval = min_interval
        self.total = 0
        self.done = 0
        self.t0 = time.monotonic()
        self._last = 0.0

    def start(self, total: int, what: str = "steps") -> None:
        self.total, self.done, self.what = int(total), 0, what
        self.t0 = time.monotonic()
        self._last = 0.0
        self._first: tuple[float, int] | None = None  # (time, steps done) at the first update

    def update(self, n: int = 1, note: str = "") -> None:
        self.done += n
        now = time.monotonic()
        first = getattr(self, "_first", None)
        if first is None:
            self._first = first = (now, self.done)
        if now - self._last < self.min_interval and self.done < self.total:
            return
        self._last = now
        elapsed = now - self.t0
        t1, d1 = first
        eta = (now - t1) / (self.done - d1) * (self.total - self.done) if self.done > d1 else float("nan")
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta_s = fmt_seconds(eta) if eta == eta else ("0:00" if self.done >= self.total else "? (first step compiled)")
        msg = (
            f"  [{self.label}] {self.done}/{self.total} {getattr(self, 'what', 'steps')} ({pct:.0f}%)"
            f" elapsed {fmt_seconds(elapsed)} eta {eta_s}"
        )
        self._emit(msg + (f"  {note}" if note else ""))

    def log(self, msg: str) -> None:
        self._emit(f"  [{self.label}] {msg}")

    def _emit(self, line: str) -> None:
        if self.stream is not None:
            print(line, file=self.stream, flush=True)
        else:
            LOGGER.info(line)
