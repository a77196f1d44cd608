"""GPU-cluster job traces and DL resource-sensitivity profiles (``data/gpu_traces/``).

Loaders (all fail with :class:`TraceFormatError` naming file, line and field on malformed input):

* :func:`load_philly_jobs`: Microsoft Philly jobs as processed by the Sia artefact
  (``timestamp,duration,num_gpus,gpu_time,cluster``), sorted by submit time.
* :func:`load_sia_workloads`: Pollux/Sia workload lists (``source_set,workload,name,time_s,application,
  num_replicas,batch_size``), e.g. the Helios-Saturn and Philly samples.
* :func:`load_alibaba_pods` / :func:`load_alibaba_nodes`: Alibaba GPU cluster trace v2023 ("openb") pods with
  CPU/memory/GPU requests and node specs.
* :func:`load_synergy_profiles`: Synergy's measured normalised throughput of 12 models on a CPU-per-GPU x
  memory-per-GPU grid, plus per-model best demand and speedup.
* :func:`load_sia_app_profiles`: Sia/Pollux per-application step times (placements, scalability) and
  validation curves, from a tar.gz of their CSVs.

Error discipline. A row that cannot be parsed (missing field, non-number, bad timestamp, ragged line) is always
an error. Rows that parse but cannot be a runnable job (duration <= 0, zero GPUs, unknown application) are an
error with ``strict=True``; otherwise they are dropped and *counted* in the returned object's ``dropped``
mapping (reason -> rows), so a caller can report exactly what was filtered. Nothing is dropped silently.
"""

from __future__ import annotations

import io
import tarfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from mlsys_repro.common.traces import register_loader
from mlsys_repro.common.traces._io import read_bytes, read_text, resolve
from mlsys_repro.common.traces.errors import TraceFormatError

PHILLY_COLUMNS = ("timestamp", "duration", "num_gpus", "gpu_time", "cluster")
SIA_COLUMNS = ("source_set", "workload", "name", "time_s", "application", "num_replicas", "batch_size")
ALIBABA_POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos", "pod_phase",
                       "creation_time", "deletion_time", "scheduled_time")
ALIBABA_NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
SYNERGY_TPUT_COLUMNS = ("profile_set", "cpus_per_server", "model", "gpus", "cpu_idx", "cpu_per_gpu", "mem_idx",
                        "mem_per_gpu_gb", "norm_tput")
SYNERGY_STATS_COLUMNS = ("profile_set", "cpus_per_server", "model", "gpus", "task", "best_cpu_per_gpu",
                         "mem_per_gpu_gb", "sspeed_per_gpu", "batch_size", "speedup_vs_fair", "iter_time_s",
                         "iter_time_base_s", "placement_penalty", "tput_shape")
SIA_APPLICATIONS = ("bert", "cifar10", "deepspeech2", "imagenet", "ncf", "yolov3", "gpt_pmp")


# ---------------------------------------------------------------------------------------------- CSV helpers


def _read_csv(path: str | Path, columns: Sequence[str], text: str | None = None) -> pd.DataFrame:
    """All-string frame with exactly ``columns``; ragged rows and a wrong header are errors with a line."""
    text = read_text(path) if text is None else text
    lines = text.split("\n")
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines:
        raise TraceFormatError(path, "empty file", 1)
    header = [h.strip() for h in lines[0].split(",")]
    if header != list(columns):
        raise TraceFormatError(path, f"header {header} != expected {list(columns)}", 1)
    for i, ln in enumerate(lines[1:], start=2):
        if not ln.strip():
            raise TraceFormatError(path, "blank line inside the data (truncated or concatenated file?)", i)
        if ln.count(",") + 1 != len(columns):
            raise TraceFormatError(path, f"row has {ln.count(',') + 1} fields, header has {len(columns)}", i)
    return pd.read_csv(io.StringIO("\n".join(lines)), dtype=str, keep_default_na=False)


def _num(df: pd.DataFrame, col: str, path, *, integer: bool = False, allow_empty: bool = False) -> np.ndarray:
    """Column as float64 (or int64); non-numbers (and empty cells unless allowed) are errors naming the line."""
    raw = df[col]
    vals = pd.to_numeric(raw, errors="coerce").to_numpy(np.float64)
    empty = (raw.str.strip() == "").to_numpy()
    bad = np.isnan(vals) & ~(empty & allow_empty)
    bad |= np.isinf(vals)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise TraceFormatError(path, f"not a finite number: {raw.iat[i]!r}", i + 2, col)
    if integer:
        ok = np.isnan(vals) | (vals == np.round(vals))
        if not ok.all():
            i = int(np.flatnonzero(~ok)[0])
            raise TraceFormatError(path, f"expected an integer, got {raw.iat[i]!r}", i + 2, col)
    return vals


def _drop(reasons: Mapping[str, np.ndarray], strict: bool, path, what: str = "row") -> tuple[np.ndarray, dict]:
    """Combine boolean 'invalid' masks; strict -> error on the first, else keep-mask and per-reason counts."""
    n = len(next(iter(reasons.values())))
    keep = np.ones(n, bool)
    counts: dict[str, int] = {}
    for reason, mask in reasons.items():
        if mask.any() and strict:
            i = int(np.flatnonzero(mask)[0])
            raise TraceFormatError(path, f"invalid {what}: {reason} (strict=True)", i + 2, reason.split(":")[0])
        counts[reason] = int((mask & keep).sum())
        keep &= ~mask
    return keep, counts


# ---------------------------------------------------------------------------------------------- Philly


@dataclass(frozen=True)
class PhillyJobs:
    """Philly jobs sorted by submit time (stable).

    Attributes:
      submit_s: float64 seconds since the Unix epoch (the trace's timestamps are naive; read as UTC).
      duration_s: float64 run time in seconds; num_gpus: int32; vc: virtual-cluster hash per job.
      dropped: reason -> rows removed (``duration<=0``, ``num_gpus<=0``), see the module docstring.
    """

    submit_s: np.ndarray
    duration_s: np.ndarray
    num_gpus: np.ndarray
    vc: np.ndarray
    path: str
    dropped: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.submit_s.size)

    @property
    def gpu_time_s(self) -> np.ndarray:
        return self.duration_s * self.num_gpus


def parse_philly_csv(text: str, path: str | Path = "<string>", strict: bool = False) -> PhillyJobs:
    df = _read_csv(path, PHILLY_COLUMNS, text)
    ts = pd.to_datetime(df["timestamp"], format="%Y-%m-%d %H:%M:%S", errors="coerce")
    if ts.isna().any():
        i = int(np.flatnonzero(ts.isna().to_numpy())[0])
        raise TraceFormatError(path, f"expected 'YYYY-MM-DD HH:MM:SS', got {df['timestamp'].iat[i]!r}", i + 2,
                               "timestamp")
    submit = (ts - pd.Timestamp("1970-01-01")).dt.total_seconds().to_numpy(np.float64)
    dur = _num(df, "duration", path)
    gpus = _num(df, "num_gpus", path, integer=True)
    gtime = _num(df, "gpu_time", path)
    mismatch = np.abs(gtime - dur * gpus) > 1e-6 * np.maximum(1.0, np.abs(gtime))
    if mismatch.any():
        i = int(np.flatnonzero(mismatch)[0])
        raise TraceFormatError(path, f"gpu_time {gtime[i]} != duration*num_gpus {dur[i] * gpus[i]}", i + 2,
                               "gpu_time")
    if (df["cluster"].str.strip() == "").any():
        i = int(np.flatnonzero((df["cluster"].str.strip() == "").to_numpy())[0])
        raise TraceFormatError(path, "empty virtual-cluster id", i + 2, "cluster")
    keep, counts = _drop({"duration<=0": dur <= 0, "num_gpus<=0": gpus <= 0}, strict, path, "job")
    order = np.argsort(submit[keep], kind="stable")
    return PhillyJobs(submit[keep][order], dur[keep][order], gpus[keep][order].astype(np.int32),
                      df["cluster"].to_numpy(str)[keep][order], str(path), counts)


def load_philly_jobs(path: str | Path, strict: bool = False) -> PhillyJobs:
    """Load the Sia-processed Philly job list (``.csv`` or ``.csv.gz``)."""
    return parse_philly_csv(read_text(path), path, strict)


# ---------------------------------------------------------------------------------------------- Sia workloads


@dataclass(frozen=True)
class SiaWorkloads:
    """Pollux/Sia workload rows (file order). ``time_s`` is the submit offset within its workload file."""

    source_set: np.ndarray
    workload: np.ndarray
    name: np.ndarray
    time_s: np.ndarray
    application: np.ndarray
    num_replicas: np.ndarray
    batch_size: np.ndarray
    path: str
    dropped: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.time_s.size)

    def select(self, source_set: str, workload: str | None = None) -> SiaWorkloads:
        """Rows of one set (and workload file), sorted by submit offset; an unknown name is an error."""
        if source_set not in set(self.source_set.tolist()):
            raise KeyError(f"{self.path}: no source_set {source_set!r}; have {sorted(set(self.source_set))}")
        m = self.source_set == source_set
        if workload is not None:
            if workload not in set(self.workload[m].tolist()):
                raise KeyError(f"{self.path}: {source_set} has no workload {workload!r}; "
                               f"have {sorted(set(self.workload[m]))}")
            m &= self.workload == workload
        idx = np.flatnonzero(m)
        idx = idx[np.argsort(self.time_s[idx], kind="stable")]
        return SiaWorkloads(*(getattr(self, f)[idx] for f in (
            "source_set", "workload", "name", "time_s", "application", "num_replicas", "batch_size")),
            path=self.path, dropped=dict(self.dropped))

    def workloads(self, source_set: str) -> list[str]:
        """Workload file names of a set, in natural order (workload-1, workload-2, ..., workload-10)."""
        names = set(self.workload[self.source_set == source_set].tolist())
        return sorted(names, key=lambda s: (len(s), s))


def parse_sia_workloads_csv(text: str, path: str | Path = "<string>", strict: bool = False,
                            applications: Sequence[str] = SIA_APPLICATIONS) -> SiaWorkloads:
    df = _read_csv(path, SIA_COLUMNS, text)
    t = _num(df, "time_s", path)
    reps = _num(df, "num_replicas", path, integer=True)
    bsz = _num(df, "batch_size", path, integer=True)
    if (t < 0).any():
        i = int(np.flatnonzero(t < 0)[0])
        raise TraceFormatError(path, f"negative submit offset {t[i]}", i + 2, "time_s")
    app = df["application"].to_numpy(str)
    keep, counts = _drop({
        "num_replicas<=0": reps <= 0,
        "batch_size<=0": bsz <= 0,
        "application:unknown": ~np.isin(app, list(applications)),
    }, strict, path, "job")
    cols = {c: df[c].to_numpy(str)[keep] for c in ("source_set", "workload", "name")}
    return SiaWorkloads(cols["source_set"], cols["workload"], cols["name"], t[keep], app[keep],
                        reps[keep].astype(np.int32), bsz[keep].astype(np.int32), str(path), counts)


def load_sia_workloads(path: str | Path, strict: bool = False) -> SiaWorkloads:
    """Load the concatenated Pollux/Sia workload CSV(.gz)."""
    return parse_sia_workloads_csv(read_text(path), path, strict)


# ---------------------------------------------------------------------------------------------- Alibaba openb


@dataclass(frozen=True)
class AlibabaPods:
    """GPU pods of the Alibaba 2023 trace, sorted by creation time.

    ``num_gpu`` is whole GPUs after the fractional-GPU rule (see :func:`parse_alibaba_pods_csv`);
    ``gpu_milli`` keeps the original share per GPU; durations are ``deletion_time - creation_time`` (s).
    """

    name: np.ndarray
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    num_gpu: np.ndarray
    gpu_milli: np.ndarray
    creation_s: np.ndarray
    duration_s: np.ndarray
    pod_phase: np.ndarray
    path: str
    dropped: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.creation_s.size)


def parse_alibaba_pods_csv(text: str, path: str | Path = "<string>", strict: bool = False,
                           fractional: str = "round_up") -> AlibabaPods:
    """Parse the openb pod list. CPU-only pods (``num_gpu == 0``) and pods that never ran long enough to have
    a positive lifetime are dropped and counted (errors with ``strict``). ``fractional``: ``round_up`` runs a
    GPU-sharing pod (``gpu_milli < 1000``) on one whole GPU; ``drop`` removes it (counted)."""
    if fractional not in ("round_up", "drop"):
        raise ValueError(f"fractional must be 'round_up' or 'drop', got {fractional!r}")
    df = _read_csv(path, ALIBABA_POD_COLUMNS, text)
    cpu = _num(df, "cpu_milli", path)
    mem = _num(df, "memory_mib", path)
    ngpu = _num(df, "num_gpu", path, integer=True)
    gm = _num(df, "gpu_milli", path, allow_empty=True)
    c = _num(df, "creation_time", path)
    d = _num(df, "deletion_time", path)
    for col, v in (("cpu_milli", cpu), ("memory_mib", mem), ("num_gpu", ngpu), ("gpu_milli", gm)):
        if (v < 0).any():
            i = int(np.flatnonzero(v < 0)[0])
            raise TraceFormatError(path, f"negative request {v[i]}", i + 2, col)
    gm = np.where(np.isnan(gm), 1000.0, gm)
    frac = (ngpu > 0) & (gm < 1000)
    reasons = {"num_gpu==0": ngpu == 0, "duration<=0": d - c <= 0}
    if fractional == "drop":
        reasons["gpu_milli<1000:fractional"] = frac
    keep, counts = _drop(reasons, strict, path, "pod")
    order = np.argsort(c[keep], kind="stable")

    def k(a):
        return a[keep][order]

    return AlibabaPods(k(df["name"].to_numpy(str)), k(cpu), k(mem), k(ngpu).astype(np.int32), k(gm), k(c),
                       k(d - c), k(df["pod_phase"].to_numpy(str)), str(path), counts)


def load_alibaba_pods(path: str | Path, strict: bool = False, fractional: str = "round_up") -> AlibabaPods:
    return parse_alibaba_pods_csv(read_text(path), path, strict, fractional)


@dataclass(frozen=True)
class AlibabaNodes:
    sn: np.ndarray
    cpu_milli: np.ndarray
    memory_mib: np.ndarray
    gpus: np.ndarray
    model: np.ndarray
    path: str


def load_alibaba_nodes(path: str | Path) -> AlibabaNodes:
    """Node specs (``sn,cpu_milli,memory_mib,gpu,model``); every value must be a non-negative number."""
    df = _read_csv(path, ALIBABA_NODE_COLUMNS)
    vals = {c: _num(df, c, path, integer=(c == "gpu")) for c in ("cpu_milli", "memory_mib", "gpu")}
    for c, v in vals.items():
        if (v < 0).any():
            i = int(np.flatnonzero(v < 0)[0])
            raise TraceFormatError(path, f"negative capacity {v[i]}", i + 2, c)
    return AlibabaNodes(df["sn"].to_numpy(str), vals["cpu_milli"], vals["memory_mib"],
                        vals["gpu"].astype(np.int32), df["model"].to_numpy(str), str(path))


# ---------------------------------------------------------------------------------------------- Synergy


@dataclass(frozen=True)
class SynergyProfiles:
    """Per-model normalised throughput on Synergy's CPU x memory grid (one profile set, one GPU count).

    Attributes:
      models: model names (sorted); task: image | language | speech per model.
      cpu_levels: CPUs per GPU of the grid rows (9); mem_levels: GB of DRAM per GPU of the columns (5).
      tput: ``[models, cpu, mem]`` throughput normalised to fair share (3 CPUs + 62.5 GB per GPU = 1.0).
      best_cpu, best_mem, speedup: Synergy's profiled best demand per GPU and its speedup over fair share.
    """

    models: tuple[str, ...]
    task: tuple[str, ...]
    cpu_levels: np.ndarray
    mem_levels: np.ndarray
    tput: np.ndarray
    best_cpu: np.ndarray
    best_mem: np.ndarray
    speedup: np.ndarray
    path: str

    def index(self, model: str) -> int:
        try:
            return self.models.index(model)
        except ValueError:
            raise KeyError(f"unknown model {model!r}; profiled models: {list(self.models)}") from None


def load_synergy_profiles(tput_path: str | Path, stats_path: str | Path, profile_set: str = "models",
                          gpus: int = 1) -> SynergyProfiles:
    """Load ``synergy_cpu_mem_tput.csv(.gz)`` and ``synergy_model_stats.csv`` for one profile set.

    Every model of the set must have the full 9 x 5 grid with positive throughput; its stats row must exist.
    """
    df = _read_csv(tput_path, SYNERGY_TPUT_COLUMNS)
    g = _num(df, "gpus", tput_path, integer=True)
    sel = (df["profile_set"] == profile_set).to_numpy() & (g == gpus)
    if not sel.any():
        raise TraceFormatError(tput_path, f"no rows for profile_set={profile_set!r}, gpus={gpus}")
    rows = np.flatnonzero(sel)
    cpu = _num(df, "cpu_per_gpu", tput_path)[rows]
    mem = _num(df, "mem_per_gpu_gb", tput_path, allow_empty=True)[rows]
    tp = _num(df, "norm_tput", tput_path)[rows]
    bad = np.isnan(mem) | (tp <= 0)
    if bad.any():
        i = int(rows[np.flatnonzero(bad)[0]])
        raise TraceFormatError(tput_path, "need a memory level and a positive norm_tput", i + 2,
                               "mem_per_gpu_gb" if np.isnan(mem[np.flatnonzero(bad)[0]]) else "norm_tput")
    model = df["model"].to_numpy(str)[rows]
    cpu_levels, mem_levels = np.unique(cpu), np.unique(mem)
    models = tuple(sorted(set(model.tolist())))
    grid = np.full((len(models), cpu_levels.size, mem_levels.size), np.nan)
    mi = np.searchsorted(np.array(models), model)
    grid[mi, np.searchsorted(cpu_levels, cpu), np.searchsorted(mem_levels, mem)] = tp
    if np.isnan(grid).any():
        m = models[int(np.argwhere(np.isnan(grid))[0][0])]
        raise TraceFormatError(tput_path, f"model {m!r} lacks a full {cpu_levels.size}x{mem_levels.size} grid")

    st = _read_csv(stats_path, SYNERGY_STATS_COLUMNS)
    sg = _num(st, "gpus", stats_path, integer=True)
    ssel = (st["profile_set"] == profile_set).to_numpy() & (sg == gpus)
    smodel = st["model"].to_numpy(str)
    task, best_cpu, best_mem, speedup = [], [], [], []
    bc = _num(st, "best_cpu_per_gpu", stats_path)
    bm = _num(st, "mem_per_gpu_gb", stats_path)
    sp = _num(st, "speedup_vs_fair", stats_path)
    for m in models:
        hit = np.flatnonzero(ssel & (smodel == m))
        if hit.size != 1:
            raise TraceFormatError(stats_path, f"expected one stats row for {profile_set}/{m}/gpus={gpus}, "
                                   f"found {hit.size}")
        i = int(hit[0])
        task.append(str(st["task"].iat[i]))
        best_cpu.append(bc[i])
        best_mem.append(bm[i])
        speedup.append(sp[i])
    unknown = sorted(set(task) - {"image", "language", "speech"})
    if unknown:
        raise TraceFormatError(stats_path, f"unknown task classes {unknown}", field="task")
    return SynergyProfiles(models, tuple(task), cpu_levels, mem_levels, grid, np.asarray(best_cpu),
                           np.asarray(best_mem), np.asarray(speedup), str(tput_path))


# ---------------------------------------------------------------------------------------------- Sia app profiles


@dataclass(frozen=True)
class SiaAppProfile:
    """One application's Sia/Pollux measurements (frames as in the artefact's CSVs)."""

    placements: pd.DataFrame  # placement (str of per-node GPU digits), local_bsz, step_time, sync_time
    scalability: pd.DataFrame  # num_nodes, num_replicas, local_bsz, step_time, sync_time
    validation: dict[int, pd.DataFrame]  # global batch size -> progress, iteration, metric, grad_sqr, grad_var


def load_sia_app_profiles(path: str | Path) -> dict[str, SiaAppProfile]:
    """Read ``sia_profiles/<app>/{placements,scalability,validation-<bsz>}.csv`` members of a tar(.gz)."""
    raw = read_bytes(path)
    try:
        tar = tarfile.open(fileobj=io.BytesIO(raw), mode="r:*")
    except tarfile.TarError as e:
        raise TraceFormatError(path, f"not a readable tar archive ({e})") from None
    found: dict[str, dict] = {}
    with tar:
        for m in tar.getmembers():
            parts = Path(m.name).parts
            if not m.isfile() or len(parts) != 3 or not parts[2].endswith(".csv"):
                continue
            app, fname = parts[1], parts[2]
            text = tar.extractfile(m).read().decode("utf-8")
            where = f"{path}!{m.name}"
            d = found.setdefault(app, {"validation": {}})
            if fname == "placements.csv":
                df = _read_csv(where, ("placement", "local_bsz", "step_time", "sync_time"), text)
                d["placements"] = _typed(df, where, {"local_bsz": True, "step_time": False, "sync_time": False})
            elif fname == "scalability.csv":
                df = _read_csv(where, ("num_nodes", "num_replicas", "local_bsz", "step_time", "sync_time"), text)
                d["scalability"] = _typed(df, where, {"num_nodes": True, "num_replicas": True, "local_bsz": True,
                                                      "step_time": False, "sync_time": False})
            elif fname.startswith("validation-"):
                try:
                    bsz = int(fname[len("validation-"):-4])
                except ValueError:
                    raise TraceFormatError(where, "expected validation-<batch size>.csv") from None
                df = _read_csv(where, ("progress", "iteration", "metric", "grad_sqr", "grad_var"), text)
                d["validation"][bsz] = _typed(df, where, {"progress": False, "iteration": True, "metric": False,
                                                          "grad_sqr": False, "grad_var": False})
    out = {}
    for app, d in sorted(found.items()):
        missing = [k for k in ("placements", "scalability") if k not in d]
        if missing or not d["validation"]:
            raise TraceFormatError(path, f"application {app!r} lacks {missing or ['validation-*.csv']}")
        out[app] = SiaAppProfile(d["placements"], d["scalability"], d["validation"])
    if not out:
        raise TraceFormatError(path, "no sia_profiles/<app>/*.csv members found")
    return out


def _typed(df: pd.DataFrame, where: str, cols: Mapping[str, bool]) -> pd.DataFrame:
    out = df.copy()
    for c, integer in cols.items():
        v = _num(df, c, where, integer=integer)
        if (v < 0).any():
            i = int(np.flatnonzero(v < 0)[0])
            raise TraceFormatError(where, f"negative value {v[i]}", i + 2, c)
        out[c] = v.astype(np.int64) if integer else v
    return out


# ---------------------------------------------------------------------------------------------- registry
# Trace configs (``conf/trace/*.yaml``) name these loaders; ``files`` keys are listed per loader.


@register_loader("philly_jobs")
def _philly(cfg, data_dir: Path) -> PhillyJobs:
    """files: {jobs}; options: {strict}."""
    return load_philly_jobs(resolve(data_dir, cfg.files["jobs"]), bool(cfg.options.get("strict", False)))


@register_loader("sia_workloads")
def _sia(cfg, data_dir: Path) -> SiaWorkloads:
    """files: {workloads}; options: {strict, source_set}. With ``source_set`` only that set is returned."""
    w = load_sia_workloads(resolve(data_dir, cfg.files["workloads"]), bool(cfg.options.get("strict", False)))
    return w.select(cfg.options["source_set"]) if cfg.options.get("source_set") else w


@register_loader("alibaba_openb")
def _alibaba(cfg, data_dir: Path) -> tuple[AlibabaPods, AlibabaNodes]:
    """files: {pods, nodes}; options: {strict, fractional}."""
    pods = load_alibaba_pods(resolve(data_dir, cfg.files["pods"]), bool(cfg.options.get("strict", False)),
                             str(cfg.options.get("fractional", "round_up")))
    return pods, load_alibaba_nodes(resolve(data_dir, cfg.files["nodes"]))


__all__ = [
    "AlibabaNodes", "AlibabaPods", "PhillyJobs", "SiaAppProfile", "SiaWorkloads", "SynergyProfiles",
    "load_alibaba_nodes", "load_alibaba_pods", "load_philly_jobs", "load_sia_app_profiles", "load_sia_workloads",
    "load_synergy_profiles", "parse_alibaba_pods_csv", "parse_philly_csv", "parse_sia_workloads_csv",
]
