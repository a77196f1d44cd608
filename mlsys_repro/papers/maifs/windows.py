"""MAIFS workloads: profiles -> speed model, and real traces -> windows of jobs for the simulator.

* :func:`load_profiles`: Synergy's CPU x memory throughput grid for 12 models (``profile_set=models``, the
  1-GPU matrices that Synergy's simulator uses for every GPU count) and a placement penalty per task class
  measured from Sia's per-application step times (consolidated vs spread placements).
* :func:`philly_windows`: windows of consecutive Philly jobs from a date slice, filtered like Sia/Pollux
  (duration >= 60 s, GPU-time < 1000 GPU-h) plus the jobs that cannot fit the cluster, each filter counted;
  arrivals are time-scaled to a target rate (jobs/h, the load knob); models are drawn by Synergy's class split.
* :func:`saturn_windows`: the Helios-Saturn workloads sampled by Sia (160 jobs each) with their real submit
  offsets, applications and GPU counts; run time at fair share derived from Sia's own profiles (iterations of
  the application's validation run at that batch size x step time at that GPU count).
* :func:`stack`: pad windows to one length and stack them into a batched :class:`JobTable` (vmap over seeds).

Every filter is counted in ``WorkloadSet.dropped`` and reported by the experiments; nothing is dropped silently.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from mlsys_repro.common.sim.cluster import JobTable, SpeedModel, make_jobs, speed_model
from mlsys_repro.common.traces.gpu import PhillyJobs, SiaAppProfile, SiaWorkloads, SynergyProfiles
from mlsys_repro.papers.maifs.baselines import ModelDemand

TASKS = ("image", "language", "speech")
# Sia application whose placement profile stands in for each Synergy task class [our choice]
PENALTY_SOURCE = {"image": "imagenet", "language": "bert", "speech": "deepspeech2"}
# Synergy model profile used for each Sia/Pollux application of the Saturn workloads [our choice]
SATURN_MODEL = {"cifar10": "res18", "imagenet": "res50", "yolov3": "shufflenet", "deepspeech2": "deepspeech",
                "bert": "bert"}


@dataclass(frozen=True)
class Profiles:
    speed: SpeedModel
    models: tuple[str, ...]
    task: tuple[str, ...]
    best_cpu: np.ndarray
    best_mem: np.ndarray
    penalty_by_task: dict[str, float]

    def demand(self) -> ModelDemand:
        return ModelDemand(jnp.asarray(self.best_cpu, jnp.float32), jnp.asarray(self.best_mem, jnp.float32))

    def index(self, model: str) -> int:
        try:
            return self.models.index(model)
        except ValueError:
            raise KeyError(f"unknown model {model!r}; profiled models: {list(self.models)}") from None

    def models_of(self, task: str) -> list[int]:
        return [i for i, t in enumerate(self.task) if t == task]


def placement_penalty(app: SiaAppProfile, consolidated: str = "4", spread: str = "22") -> float:
    """Median over local batch sizes of throughput(spread) / throughput(consolidated), capped at 1."""
    p = app.placements
    a = p[p["placement"] == consolidated].set_index("local_bsz")["step_time"]
    b = p[p["placement"] == spread].set_index("local_bsz")["step_time"]
    ratio = (a / b).dropna()
    if ratio.empty:
        raise ValueError(f"no common local batch sizes for placements {consolidated!r} and {spread!r}")
    return float(min(1.0, ratio.median()))


def load_profiles(synergy: SynergyProfiles, sia_apps: Mapping[str, SiaAppProfile],
                  use_penalty: bool = True) -> Profiles:
    pen_task = {t: placement_penalty(sia_apps[a]) if use_penalty else 1.0 for t, a in PENALTY_SOURCE.items()}
    penalty = np.array([pen_task[t] for t in synergy.task], np.float32)
    sm = speed_model(synergy.tput, synergy.cpu_levels, synergy.mem_levels, penalty)
    return Profiles(sm, synergy.models, synergy.task, synergy.best_cpu.astype(np.float32),
                    synergy.best_mem.astype(np.float32), pen_task)


# ---------------------------------------------------------------------------------------------- windows


@dataclass
class Window:
    """One workload: jobs sorted by arrival, arrival relative to the first job (s)."""

    name: str
    arrival: np.ndarray
    work: np.ndarray
    gpus: np.ndarray
    model: np.ndarray
    source: np.ndarray | None = None  # int64 id of each job's trace row (disjointness checks)

    def __len__(self) -> int:
        return int(self.arrival.size)

    @property
    def gpu_hours(self) -> float:
        return float((self.work * self.gpus).sum() / 3600.0)

    def replace(self, **kw) -> Window:
        return Window(**{**self.__dict__, **kw})


# ---------------------------------------------------------------------------------------------- load


def offered_load(w: Window, cluster_gpus: int) -> float:
    """Offered load rho = arrival rate x mean GPU-seconds per job / cluster GPUs, the arrival rate measured as
    ``(n - 1) / arrival span`` (the queueing-theory utilisation lambda E[S] / c at fair-share speed)."""
    n = len(w)
    span = float(w.arrival[-1] - w.arrival[0]) if n else 0.0
    if n < 2 or span <= 0:
        return float("inf")
    return (n - 1) / span * float((w.work * w.gpus).mean()) / cluster_gpus


def at_load(w: Window, target: float, cluster_gpus: int) -> Window:
    """The window with its arrival times scaled (about the first arrival) so that its offered load is ``target``
    [ours: the load knob of the contended workloads; inter-arrival pattern and job mix are the trace's]."""
    if target <= 0:
        raise ValueError(f"target load must be > 0, got {target}")
    rho = offered_load(w, cluster_gpus)
    if not np.isfinite(rho):
        raise ValueError(f"window {w.name!r}: all jobs arrive at once, its load cannot be scaled")
    t = w.arrival - w.arrival[0]
    return w.replace(arrival=t * (rho / target))


def cap_durations(w: Window, max_h: float | None) -> tuple[Window, int]:
    """Fair-share run times capped at ``max_h`` hours, so that no single job sets a window's makespan [ours]; also
    returns how many jobs were capped."""
    if max_h is None:
        return w, 0
    cap = max_h * 3600.0
    return w.replace(work=np.minimum(w.work, cap)), int((w.work > cap).sum())


def split(w: Window, parts: int) -> list[Window]:
    """``parts`` consecutive windows of (almost) equal size, arrivals re-based to each one's first job."""
    if parts < 1 or parts > len(w):
        raise ValueError(f"cannot split {len(w)} jobs into {parts} windows")
    out = []
    for k, idx in enumerate(np.array_split(np.arange(len(w)), parts)):
        src = None if w.source is None else w.source[idx]
        out.append(Window(f"{w.name}/{k}", w.arrival[idx] - w.arrival[idx[0]], w.work[idx], w.gpus[idx],
                          w.model[idx], src))
    return out


def check_disjoint(a: Sequence[Window], b: Sequence[Window]) -> None:
    """Raise if a trace row appears in both window sets (e.g. training and evaluation) or twice in one of them."""
    for ws, what in ((a, "first"), (b, "second")):
        if any(w.source is None for w in ws):
            raise ValueError(f"a window of the {what} set has no source ids")
    sa = np.concatenate([w.source for w in a]) if a else np.zeros(0, np.int64)
    sb = np.concatenate([w.source for w in b]) if b else np.zeros(0, np.int64)
    for s, what in ((sa, "first"), (sb, "second")):
        if np.unique(s).size != s.size:
            raise ValueError(f"windows of the {what} set overlap")
    both = np.intersect1d(sa, sb)
    if both.size:
        raise ValueError(f"{both.size} trace rows are in both window sets (e.g. {both[:3].tolist()})")


@dataclass
class WorkloadSet:
    windows: list[Window]
    dropped: dict[str, int] = field(default_factory=dict)
    note: str = ""


def _assign_models(rng: np.random.Generator, n: int, profiles: Profiles, class_split: Sequence[float]) -> np.ndarray:
    split = np.asarray(class_split, np.float64)
    if split.shape != (3,) or np.any(split < 0) or split.sum() <= 0:
        raise ValueError(f"class_split needs 3 non-negative weights (image, language, speech), got {class_split}")
    split = split / split.sum()
    task = rng.choice(3, size=n, p=split)
    out = np.empty(n, np.int32)
    for k, t in enumerate(TASKS):
        ms = profiles.models_of(t)
        sel = task == k
        if sel.any() and not ms:
            raise ValueError(f"class split asks for {t} jobs but no {t} model is profiled")
        out[sel] = rng.choice(ms, size=int(sel.sum())) if sel.any() else []
    return out


def _scale_arrivals(t: np.ndarray, rate_jobs_per_h: float | None) -> np.ndarray:
    t = t - t[0]
    if rate_jobs_per_h is None or t.size < 2 or t[-1] <= 0:
        return t
    native = (t.size - 1) / (t[-1] / 3600.0)
    return t * (native / rate_jobs_per_h)


def philly_filter(philly: PhillyJobs, cluster_gpus: int, min_duration_s: float = 60.0,
                  max_gpu_time_h: float = 1000.0, max_duration_h: float | None = None
                  ) -> tuple[np.ndarray, dict[str, int]]:
    """Keep-mask and per-reason counts of the Sia/Pollux filter plus the jobs the cluster can never run."""
    reasons = {
        f"duration<{min_duration_s:g}s": philly.duration_s < min_duration_s,
        f"gpu_time>={max_gpu_time_h:g}GPUh": philly.gpu_time_s >= max_gpu_time_h * 3600.0,
        f"num_gpus>{cluster_gpus}(cluster)": philly.num_gpus > cluster_gpus,
    }
    if max_duration_h is not None:
        reasons[f"duration>{max_duration_h:g}h"] = philly.duration_s > max_duration_h * 3600.0
    keep = np.ones(len(philly), bool)
    counts = {}
    for k, m in reasons.items():
        counts[k] = int((m & keep).sum())
        keep &= ~m
    return keep, counts


def philly_windows(philly: PhillyJobs, profiles: Profiles, *, cluster_gpus: int, start: str, end: str,
                   jobs_per_window: int, num_windows: int, rate_jobs_per_h: float | None,
                   class_split: Sequence[float] = (20, 70, 10), seed: int = 0, first_window: int = 0,
                   min_duration_s: float = 60.0, max_gpu_time_h: float = 1000.0,
                   max_duration_h: float | None = None, load: float | None = None,
                   cap_duration_h: float | None = None) -> WorkloadSet:
    """Evenly spaced, non-overlapping windows of ``jobs_per_window`` consecutive filtered jobs submitted in
    ``[start, end)``.

    Window ``k`` (``first_window <= k < first_window + num_windows``) starts at position
    ``k * stride`` of the slice, stride ``(len - jobs_per_window) / num_windows_total`` where the total is
    ``first_window + num_windows``; its models are drawn with ``default_rng([seed, k])``. Durations are capped
    at ``cap_duration_h`` (counted as ``capped[...]``). Arrivals are scaled to an offered ``load`` (fraction of
    the cluster's GPUs, :func:`at_load`) when given, else to ``rate_jobs_per_h``.
    """
    keep, dropped = philly_filter(philly, cluster_gpus, min_duration_s, max_gpu_time_h, max_duration_h)
    t0 = pd.Timestamp(start).timestamp()
    t1 = pd.Timestamp(end).timestamp()
    in_slice = (philly.submit_s >= t0) & (philly.submit_s < t1)
    dropped = {k: int(v) for k, v in dropped.items()}
    idx = np.flatnonzero(keep & in_slice)
    total = first_window + num_windows
    if idx.size < jobs_per_window:
        raise ValueError(f"slice [{start}, {end}) has {idx.size} jobs after filtering, need {jobs_per_window}")
    stride = (idx.size - jobs_per_window) / max(total, 1)
    if total > 1 and stride < jobs_per_window:
        raise ValueError(f"slice [{start}, {end}) has {idx.size} jobs: {total} windows of {jobs_per_window} would "
                         "overlap")
    wins = []
    capped = 0
    for k in range(first_window, total):
        lo = int(round(k * stride))
        sel = idx[lo:lo + jobs_per_window]
        rng = np.random.default_rng([seed, k])
        arr = _scale_arrivals(philly.submit_s[sel], None if load is not None else rate_jobs_per_h)
        w = Window(f"philly[{start}..{end})#{k}", arr, philly.duration_s[sel].astype(np.float64),
                   philly.num_gpus[sel].astype(np.int32), _assign_models(rng, sel.size, profiles, class_split),
                   sel.astype(np.int64))
        w, c = cap_durations(w, cap_duration_h)
        capped += c
        wins.append(at_load(w, load, cluster_gpus) if load is not None else w)
    if cap_duration_h is not None:
        dropped[f"capped[duration>{cap_duration_h:g}h]"] = capped
    return WorkloadSet(wins, dropped, f"{idx.size} filtered jobs in [{start}, {end})")


# ---------------------------------------------------------------------------------------------- Saturn


def sia_step_time(app: SiaAppProfile, replicas: int, local_bsz: float) -> float:
    """Step time at ``replicas`` GPUs (consolidated placement) and a per-GPU batch, linear in the batch and
    clamped to the profiled range; below 6 GPUs Sia only profiled single-node placements ('1'..'4')."""
    if replicas >= 6:
        df = app.scalability[app.scalability["num_replicas"] == replicas]
    else:
        df = app.placements[app.placements["placement"] == str(replicas)]
    if df.empty:
        raise ValueError(f"no step-time profile for {replicas} replicas")
    df = df.sort_values("local_bsz")
    return float(np.interp(local_bsz, df["local_bsz"].to_numpy(float), df["step_time"].to_numpy(float)))


def saturn_duration_s(app: SiaAppProfile, batch_size: int, replicas: int) -> float:
    """Fair-share run time of a Pollux/Sia job: iterations of the application's profiled training run at this
    batch size x step time at this GPU count."""
    if batch_size not in app.validation:
        raise ValueError(f"no validation profile for batch size {batch_size}; have {sorted(app.validation)}")
    iters = int(app.validation[batch_size]["iteration"].iloc[-1])
    return iters * sia_step_time(app, replicas, batch_size / replicas)


def saturn_windows(sia: SiaWorkloads, apps: Mapping[str, SiaAppProfile], profiles: Profiles, *,
                   workloads: Sequence[str], cluster_gpus: int, rate_scale: float = 1.0,
                   source_set: str = "saturn") -> WorkloadSet:
    """One window per workload file; ``rate_scale`` multiplies the arrival rate (divides submit offsets)."""
    if rate_scale <= 0:
        raise ValueError("rate_scale must be > 0")
    dropped = {"application:unprofiled": 0, f"num_replicas>{cluster_gpus}(cluster)": 0}
    wins = []
    cache: dict[tuple[str, int, int], float] = {}
    for w in workloads:
        rows = sia.select(source_set, w)
        arr, work, gpus, model, src = [], [], [], [], []
        base = _workload_id(source_set, w)
        for row, (t, a, r, b) in enumerate(zip(rows.time_s, rows.application, rows.num_replicas, rows.batch_size,
                                               strict=True)):
            if a not in SATURN_MODEL or a not in apps:
                dropped["application:unprofiled"] += 1
                continue
            if r > cluster_gpus:
                dropped[f"num_replicas>{cluster_gpus}(cluster)"] += 1
                continue
            key = (a, int(b), int(r))
            if key not in cache:
                cache[key] = saturn_duration_s(apps[a], int(b), int(r))
            arr.append(t)
            work.append(cache[key])
            gpus.append(r)
            model.append(profiles.index(SATURN_MODEL[a]))
            src.append(base + row)
        arr = np.asarray(arr, np.float64)
        o = np.argsort(arr, kind="stable")
        wins.append(Window(f"{source_set}/{w}", (arr[o] - arr[o][0]) / rate_scale, np.asarray(work)[o],
                           np.asarray(gpus, np.int32)[o], np.asarray(model, np.int32)[o],
                           np.asarray(src, np.int64)[o]))
    return WorkloadSet(wins, dropped, f"{source_set}: {len(wins)} workloads")


def _workload_id(source_set: str, name: str) -> int:
    """A stable int64 base id per workload file (rows are base + row index)."""
    import zlib

    return (zlib.crc32(f"{source_set}/{name}".encode()) & 0x7FFFFFFF) << 20


def contended(ws: Sequence[Window], *, load: float, cluster_gpus: int, cap_duration_h: float | None = None,
              parts: int = 1) -> tuple[list[Window], dict[str, int]]:
    """Split each window into ``parts``, cap durations and scale every piece to an offered ``load``."""
    out, capped = [], 0
    for w in ws:
        for piece in split(w, parts):
            piece, c = cap_durations(piece, cap_duration_h)
            capped += c
            out.append(at_load(piece, load, cluster_gpus))
    return out, ({f"capped[duration>{cap_duration_h:g}h]": capped} if cap_duration_h is not None else {})


# ---------------------------------------------------------------------------------------------- batching


def stack(windows: Sequence[Window], pad_to: int | None = None) -> JobTable:
    """Stack windows into one batched :class:`JobTable` (leading axis = window), padded to a common length."""
    n = pad_to or max(len(w) for w in windows)
    tables = [make_jobs(w.arrival, w.work, w.gpus, w.model, pad_to=n) for w in windows]
    return jax.tree.map(lambda *xs: jnp.stack(xs), *tables)


__all__ = ["PENALTY_SOURCE", "Profiles", "SATURN_MODEL", "TASKS", "Window", "WorkloadSet", "at_load",
           "cap_durations", "check_disjoint", "contended", "load_profiles", "offered_load", "philly_filter",
           "philly_windows", "placement_penalty", "saturn_duration_s", "saturn_windows", "sia_step_time", "split",
           "stack"]
