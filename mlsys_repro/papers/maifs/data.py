"""MAIFS's data: the traces and profiles a run loads (once, through the run cache, keyed by file), and the job
windows cut from them -- Philly's earlier slice and Saturn's training files for training, Philly's later slice and
Saturn's held-out files for evaluation, checked disjoint. Window cutting and load scaling are in ``windows.py``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mlsys_repro.common.repro.cache import RunCache
from mlsys_repro.common.traces._io import resolve
from mlsys_repro.common.traces.gpu import (
    PhillyJobs,
    SiaWorkloads,
    load_philly_jobs,
    load_sia_app_profiles,
    load_sia_workloads,
    load_synergy_profiles,
)
from mlsys_repro.papers.maifs.schemas import MaifsParams
from mlsys_repro.papers.maifs.windows import (
    Profiles,
    Window,
    at_load,
    check_disjoint,
    contended,
    load_profiles,
    philly_windows,
    saturn_windows,
)


@dataclass
class Data:
    profiles: Profiles
    philly: PhillyJobs
    saturn: SiaWorkloads
    apps: dict
    dropped: dict[str, int]


def load_data(files: dict[str, str], data_dir: Path, cache: RunCache) -> Data:
    """The traces and profiles named by the trace config's ``files`` (each file loaded once per run)."""
    f = {k: str(resolve(data_dir, v)) for k, v in files.items()}
    prof = cache.get("maifs.profiles", (f["synergy_tput"], f["synergy_stats"], f["sia_profiles"]),
                     lambda: load_profiles(load_synergy_profiles(f["synergy_tput"], f["synergy_stats"]),
                                           load_sia_app_profiles(f["sia_profiles"])))
    ph = cache.get("maifs.philly", f["jobs"], lambda: load_philly_jobs(f["jobs"]))
    sa = cache.get("maifs.saturn", f["saturn"], lambda: load_sia_workloads(f["saturn"]))
    apps = cache.get("maifs.apps", f["sia_profiles"], lambda: load_sia_app_profiles(f["sia_profiles"]))
    return Data(prof, ph, sa, apps, {**ph.dropped, **sa.dropped})


def philly_eval(d: Data, p: MaifsParams, cluster_gpus: int, load: float | None = None):
    """``eval_windows`` disjoint windows of the later, unseen Philly slice at offered ``load`` (default
    ``p.load``); every seed of every policy is evaluated on all of them."""
    ws = philly_windows(d.philly, d.profiles, cluster_gpus=cluster_gpus, start=p.eval_start, end=p.eval_end,
                        jobs_per_window=p.jobs_per_window, num_windows=p.eval_windows, rate_jobs_per_h=None,
                        class_split=p.class_split, seed=1, load=load or p.load, cap_duration_h=_cap(p))
    return ws.windows, ws.dropped


def saturn_eval(d: Data, p: MaifsParams, cluster_gpus: int, load: float | None = None):
    """The held-out Saturn workload files, each cut into ``saturn_parts`` windows, at offered ``load``."""
    ws = saturn_windows(d.saturn, d.apps, d.profiles, workloads=p.saturn_eval, cluster_gpus=cluster_gpus)
    out, capped = contended(ws.windows, load=load or p.load, cluster_gpus=cluster_gpus,
                            cap_duration_h=_cap(p), parts=p.saturn_parts)
    return [_truncate(w, p.jobs_per_window) for w in out], {**ws.dropped, **capped}


def training_windows(d: Data, p: MaifsParams, cluster_gpus: int, trace: str) -> list[Window]:
    """Training windows of one trace [ours: one policy per trace, trained at the evaluation loads]: Philly's
    earlier slice (``train_windows`` windows), or the training Saturn files cut like the evaluation ones; window
    ``k`` is scaled to offered load ``train_loads[k % len(train_loads)]``."""
    if trace == "philly":
        base = philly_windows(d.philly, d.profiles, cluster_gpus=cluster_gpus, start=p.train_start,
                              end=p.train_end, jobs_per_window=p.jobs_per_window, num_windows=p.train_windows,
                              rate_jobs_per_h=None, class_split=p.class_split, seed=0, load=1.0,
                              cap_duration_h=_cap(p)).windows
    elif trace == "saturn":
        sa = saturn_windows(d.saturn, d.apps, d.profiles, workloads=p.saturn_train, cluster_gpus=cluster_gpus)
        base, _ = contended(sa.windows, load=1.0, cluster_gpus=cluster_gpus, cap_duration_h=_cap(p),
                            parts=p.saturn_parts)
        base = [_truncate(w, p.jobs_per_window) for w in base]
    else:
        raise ValueError(f"unknown training trace {trace!r}")
    return [at_load(w, p.train_loads[k % len(p.train_loads)], cluster_gpus) for k, w in enumerate(base)]


def eval_windows(d: Data, p: MaifsParams, cluster_gpus: int, trace: str, load: float | None = None):
    """Evaluation windows of ``trace`` at ``load``, checked disjoint from that trace's training windows."""
    ws, dropped = (philly_eval if trace == "philly" else saturn_eval)(d, p, cluster_gpus, load)
    check_disjoint(training_windows(d, p, cluster_gpus, trace), ws)
    return ws, dropped


def _cap(p: MaifsParams) -> float | None:
    """The duration cap in hours, None when uncapped (``cap_duration_h`` 0)."""
    return p.cap_duration_h or None


def _truncate(w: Window, n: int) -> Window:
    if len(w) <= n:
        return w
    src = None if w.source is None else w.source[:n]
    return Window(w.name, w.arrival[:n], w.work[:n], w.gpus[:n], w.model[:n], src)


__all__ = ["Data", "eval_windows", "load_data", "philly_eval", "saturn_eval", "training_windows"]
