"""Plain-text progress lines (which experiment, how far, elapsed and ETA) for long runs."""

from __future__ import annotations

import sys
import time


def fmt_seconds(s: float) -> str:
    s = max(0, int(round(s)))
    h, rem = divmod(s, 3600)
    m, sec = divmod(rem, 60)
    return f"{h}:{m:02d}:{sec:02d}" if h else f"{m}:{sec:02d}"


class Progress:
    """Reports ``done/total`` of a unit of work with elapsed time and a linear ETA.

    ``label`` is set by the runner to ``paper/experiment``; experiments call :meth:`start` with the number of
    steps they will report and :meth:`update` after each. Lines are throttled to one per ``min_interval`` s.
    """

    def __init__(self, label: str = "", stream=None, min_interval: float = 2.0):
        self.label = label
        self.stream = stream or sys.stderr
        self.min_interval = min_interval
        self.total = 0
        self.done = 0
        self.t0 = time.monotonic()
        self._last = 0.0

    def start(self, total: int, what: str = "steps") -> None:
        self.total, self.done, self.what = int(total), 0, what
        self.t0 = time.monotonic()
        self._last = 0.0

    def update(self, n: int = 1, note: str = "") -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last < self.min_interval and self.done < self.total:
            return
        self._last = now
        elapsed = now - self.t0
        eta = elapsed / self.done * (self.total - self.done) if self.done else float("nan")
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta_s = fmt_seconds(eta) if eta == eta else "?"
        msg = (
            f"  [{self.label}] {self.done}/{self.total} {getattr(self, 'what', 'steps')} ({pct:.0f}%)"
            f" elapsed {fmt_seconds(elapsed)} eta {eta_s}"
        )
        print(msg + (f"  {note}" if note else ""), file=self.stream, flush=True)

    def log(self, msg: str) -> None:
        print(f"  [{self.label}] {msg}", file=self.stream, flush=True)
