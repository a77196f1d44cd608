"""Per-port CPU load replayed from a real utilisation trace (Bitbrains or Azure, 5-minute samples).

Each port (host) of the simulated fabric replays one VM's CPU-utilisation series. Gaps (empty cells) are filled
with the last seen value (0 % before the first sample); values are clipped to [0, 100] %. Series are split in
time: the first 70 % trains the speed predictor, the next 10 % validates it, and scheduling runs only on the last
20 % (no leakage into the predictor).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlsys_repro.common.traces import load_workload_matrix

SOURCES = {
    "bitbrains": "workload_traces/bitbrains_rnd/cpu_util_pct.csv.gz",
    "azure": "workload_traces/azure_v1_100vm/cpu_avg_pct.csv.gz",
}
SPLITS = (0.7, 0.1, 0.2)


@dataclass(frozen=True)
class CpuTrace:
    util: np.ndarray  # float32 [T, N] percent, gaps filled
    gaps: int  # number of cells that were gaps in the file
    source: str

    def split(self, name: str) -> np.ndarray:
        """``train`` (first 70 %), ``val`` (next 10 %) or ``test`` (last 20 %) as [T_split, N]."""
        T = self.util.shape[0]
        a, b = int(T * SPLITS[0]), int(T * (SPLITS[0] + SPLITS[1]))
        return {"train": self.util[:a], "val": self.util[a:b], "test": self.util[b:]}[name]


def fill_gaps(x: np.ndarray) -> np.ndarray:
    """Forward-fill NaN along time (axis 0); leading gaps become 0; clip to [0, 100]."""
    x = np.array(x, dtype=np.float32, copy=True)
    mask = np.isnan(x)
    idx = np.where(~mask, np.arange(x.shape[0])[:, None], 0)
    np.maximum.accumulate(idx, axis=0, out=idx)
    out = x[idx, np.arange(x.shape[1])[None, :]]
    out[np.isnan(out)] = 0.0
    return np.clip(out, 0.0, 100.0)


def load_cpu_trace(data_dir: str, source: str = "bitbrains") -> CpuTrace:
    if source not in SOURCES:
        raise ValueError(f"unknown CPU trace {source!r}; known: {sorted(SOURCES)}")
    m = load_workload_matrix(Path(data_dir) / SOURCES[source])
    return CpuTrace(fill_gaps(m.values), m.num_missing, source)


def port_window(trace: CpuTrace, num_ports: int, length: int, history: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A seeded draw of ``num_ports`` VMs and a start in the test split.

    Returns ``(hist [history, P], window [length, P])`` in percent: ``window[k]`` is the load during the k-th
    5-minute sample of the simulation, ``hist`` the samples before it. VMs are drawn without replacement when the
    trace has enough of them; windows longer than the test split wrap around inside it.
    """
    test = trace.split("test")
    T, N = test.shape
    rng = np.random.default_rng(seed)
    vms = rng.choice(N, size=num_ports, replace=num_ports > N)
    start = int(rng.integers(history, T))
    idx = (start - history + np.arange(history + length)) % T
    x = test[idx][:, vms]
    return x[:history], x[history:]
