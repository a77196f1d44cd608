"""Swallow experiments: coflowsim parity, the headline comparison, bandwidth and CPU sweeps, ablations, predictor.

Times are in the simulator's clock: a simulated second is ``hardware.clock.second_ms`` ms (1024 ms under the
coflowsim conventions); ``*_s`` metrics are simulated seconds. Every experiment builds its configurations and runs
them through :func:`mlsys_repro.papers.swallow.sim.simulate_many` (one configuration per core on the full trace).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mlsys_repro.common.repro import RunContext, metric_rows
from mlsys_repro.common.repro.plots import cdf, figure, lines_with_ci
from mlsys_repro.common.traces import load_trace
from mlsys_repro.papers.swallow import codecs, cpuload, jobs, sim
from mlsys_repro.papers.swallow.flows import BIN_NAMES, Conventions, FlowTable, build_flow_table
from mlsys_repro.papers.swallow.predictor import (
    CANDIDATES,
    GruConfig,
    Trained,
    evaluate,
    predict,
    select_on_validation,
    split_errors,
    train_predictors,
)
from mlsys_repro.papers.swallow.schemas import (
    RANDOM_PAYLOADS,
    ClockConfig,
    CoflowFabric,
    SwallowPolicy,
)

# ----------------------------------------------------------------------------------------------- setup


def flow_table(ctx: RunContext, max_coflows: int | None) -> FlowTable:
    """The trace's flow table under the hardware's clock conventions (built once per run, see ``ctx.cache``)."""
    hw: CoflowFabric = ctx.hardware
    if ctx.trace.loader != "coflow_benchmark":
        load_trace(ctx.trace, ctx.data_dir)  # fails with the loader's message
        raise ValueError(f"swallow needs a coflow_benchmark trace, got loader {ctx.trace.loader!r}")
    path = Path(ctx.data_dir) / ctx.trace.files["trace"]
    conv = Conventions(mb_bytes=hw.clock.mb_bytes, mb_round=hw.clock.mb_round)

    def build() -> FlowTable:
        from mlsys_repro.common.traces import load_coflow_trace

        return build_flow_table(load_coflow_trace(path), conv, max_coflows)

    return ctx.cache.get("swallow.flow_table", (path, conv, max_coflows), build)


def static_for(hw: CoflowFabric, pol: SwallowPolicy) -> sim.Static:
    c = hw.clock
    return sim.Static(kind=pol.kind, second_ms=c.second_ms, quantum_ms=c.quantum_ms, epoch_ms=c.epoch_ms,
                      cct_from=c.cct_from, zero=c.zero_bytes)


@dataclass(frozen=True)
class Setting:
    """One simulated configuration: policy, seed and the hardware knobs a sweep changes."""

    policy: str
    seed: int
    port_gbps: float
    cores: float
    codec: str  # lz4 | snappy | zstd | lz4_readme
    payload: str = ""  # payload model of the codec numbers ("": the hardware's codec_payload)


def cpu_trace(ctx: RunContext, source: str) -> cpuload.CpuTrace:
    """The hosts' CPU-load trace ``source`` (loaded once per run)."""
    return ctx.cache.get("swallow.cpu_trace", (ctx.data_dir, source),
                         lambda: cpuload.load_cpu_trace(str(ctx.data_dir), source))


def predictors(ctx: RunContext, source: str, cfg: GruConfig, seeds: tuple[int, ...]) -> tuple[Trained, ...]:
    """One trained CPU-load predictor per seed (trained once per run and configuration)."""
    return ctx.cache.get("swallow.predictors", (ctx.data_dir, source, cfg, seeds),
                         lambda: train_predictors(cpu_trace(ctx, source), cfg, seeds))


def _cpu_window(ctx: RunContext, source: str, num_ports: int, length: int, history: int, seed: int):
    return ctx.cache.get("swallow.cpu_window", (ctx.data_dir, source, num_ports, length, history, seed),
                         lambda: cpuload.port_window(cpu_trace(ctx, source), num_ports, length, history, seed))


def _predicted(ctx: RunContext, source: str, num_ports: int, length: int, seed: int, method: str,
               cfg: GruConfig) -> np.ndarray:
    """The scheduler's CPU-load forecast over a seed's window: ``method`` none | gru | ewma | last | oracle |
    validated (the candidate picked on the validation split, see predictor.select_on_validation)."""

    def build() -> np.ndarray:
        hist, win = _cpu_window(ctx, source, num_ports, length, cfg.window, seed)
        if method == "none":
            return np.zeros_like(win)
        (tr,) = predictors(ctx, source, cfg, (cfg.seed,))
        m = select_on_validation(tr, cpu_trace(ctx, source)) if method == "validated" else method
        return predict(m, tr, hist, win)

    return ctx.cache.get("swallow.predicted", (ctx.data_dir, source, num_ports, length, seed, method, cfg), build)


def _mapper_bytes(ft: FlowTable) -> np.ndarray:
    """Raw bytes each (coflow, mapper port) entry of ``ft.map_cof``/``ft.map_port`` sends (float64 [Mtot])."""
    key = ft.flow_cof.astype(np.int64) * ft.num_ports + ft.flow_src
    uniq, inv = np.unique(key, return_inverse=True)
    per_key = np.bincount(inv, weights=ft.flow_bytes, minlength=uniq.size)
    mk = ft.map_cof.astype(np.int64) * ft.num_ports + ft.map_port
    at = np.searchsorted(uniq, mk)
    hit = (at < uniq.size) & (uniq[np.minimum(at, uniq.size - 1)] == mk)
    return np.where(hit, per_key[np.minimum(at, uniq.size - 1)], 0.0)


def codec_numbers(data_dir: Path, hw: CoflowFabric, codec: str, ft: FlowTable | None = None, seed: int = 0,
                  payload: str | None = None) -> tuple[np.ndarray, np.ndarray]:
    """``(ratio, compression bytes/s per core)``, each ``[1]`` (one payload for every coflow) or ``[num_coflows]``.

    ``payload`` (default ``hw.codec_payload``) is a payload class of the measured table, ``mix``, or a random model
    [ours], drawn from ``seed`` uniformly over the table's classes (text, CSV, float32, image bytes, JPEG):

    * ``per_mapper``: each mapper's output is one class, drawn independently per (coflow, mapper port); a coflow's
      ratio is the byte-weighted mean of its mappers' ratios and its speed the byte-weighted harmonic mean (exact
      for its wire bytes and its total compression time). Large coflows mix many classes, so no single draw decides
      a seed's traffic.
    * ``per_coflow``: one class for the whole coflow (a sensitivity row: a few giant coflows decide a seed)."""
    payload = payload or hw.codec_payload
    if codec == "lz4_readme":
        r, s, _ = codecs.load_codec(data_dir, "lz4", "lz4_readme")
        return np.array([0.48]), np.array([s])  # the constant in the authors' simulator
    if payload in RANDOM_PAYLOADS:
        if ft is None:
            raise ValueError(f"payload model {payload!r} needs the flow table")
        table = [codecs.load_codec(data_dir, codec, hw.codec_source, pl) for pl in codecs.PAYLOADS]
        r_cls = np.minimum(np.array([t[0] for t in table]), 1.0)
        s_cls = np.array([t[1] for t in table])
        rng = np.random.default_rng(np.random.SeedSequence([0x5A110, int(seed)]))
        if payload == "per_coflow":
            cls = rng.integers(0, len(table), ft.num_coflows)
            return r_cls[cls], s_cls[cls]
        cls = rng.integers(0, len(table), ft.map_cof.size)
        w = _mapper_bytes(ft)
        tot = np.bincount(ft.map_cof, weights=w, minlength=ft.num_coflows)
        ratio = np.bincount(ft.map_cof, weights=w * r_cls[cls], minlength=ft.num_coflows)
        secs = np.bincount(ft.map_cof, weights=w / s_cls[cls], minlength=ft.num_coflows)
        empty = tot <= 0
        tot = np.where(empty, 1.0, tot)
        return (np.where(empty, r_cls.mean(), ratio / tot),
                np.where(empty, 1.0 / np.mean(1.0 / s_cls), tot / np.where(empty, 1.0, secs)))
    r, s, _ = codecs.load_codec(data_dir, codec, hw.codec_source, payload)
    return np.array([min(r, 1.0)]), np.array([s])


def sim_params(ctx: RunContext, ft: FlowTable, pol: SwallowPolicy, x: Setting) -> sim.Params:
    """The simulator's inputs for one setting: link rate, the hosts' CPU series and forecast, codec numbers."""
    hw: CoflowFabric = ctx.hardware
    gru = GruConfig(steps=getattr(ctx.params, "gru_steps", GruConfig.steps))
    P = ft.num_ports
    hist, win = _cpu_window(ctx, hw.cpu_trace, P, hw.cpu_window, gru.window, x.seed)
    free = 1.0 - win / 100.0
    C = ft.num_coflows
    kw = dict(ratio=np.ones(C), speed_Bps=np.zeros(C))  # one shape for every policy, so they batch together
    if pol.compress != "none":
        ratio, speed = codec_numbers(ctx.data_dir, hw, x.codec, ft, x.seed, x.payload or None)
        pred = _predicted(ctx, hw.cpu_trace, P, hw.cpu_window, x.seed, pol.predictor, gru)
        kw = dict(compress=pol.compress, ratio=np.broadcast_to(ratio, C), speed_Bps=np.broadcast_to(speed, C),
                  cores=x.cores, cpu_pred=1.0 - pred / 100.0, pipelined=pol.pipelined)
    starve = math.inf if pol.starvation_s is None else pol.starvation_s * hw.clock.second_ms
    return sim.params(x.port_gbps * hw.clock.gbit, policy=pol.order, cpu_free=free, num_ports=P,
                      cpu_step_ms=hw.cpu_sample_s * hw.clock.second_ms, starvation_ms=starve, **kw)


def run_settings(ctx: RunContext, ft: FlowTable, settings: Sequence[Setting],
                 policies: dict[str, SwallowPolicy] | None = None) -> list[sim.Result]:
    """Simulate every setting (see :func:`sim.simulate_many`: one core per configuration on large traces)."""
    policies = policies or ctx.policies
    jobs = [(static_for(ctx.hardware, policies[x.policy]), sim_params(ctx, ft, policies[x.policy], x))
            for x in settings]
    ctx.progress.start(len(jobs), "simulations")
    return sim.simulate_many(ft, jobs, log=ctx.progress.log, on_result=lambda i: ctx.progress.update(
        1, f"{settings[i].policy} {settings[i].port_gbps:g} Gbps seed {settings[i].seed}"))


# ----------------------------------------------------------------------------------------------- metrics


def cct_metrics(ft: FlowTable, r: sim.Result) -> dict[str, tuple[float, str]]:
    cct = r.cct_s
    done = np.isfinite(cct)
    if not done.all():
        raise RuntimeError(f"{int((~done).sum())} coflows did not finish (simulation end reached)")
    m = {"avg_cct_s": (float(cct.mean()), "s"), "p95_cct_s": (float(np.percentile(cct, 95)), "s"),
         "p99_cct_s": (float(np.percentile(cct, 99)), "s"), "num_coflows": (float(done.sum()), "coflows"),
         "makespan_s": (float(np.nanmax(r.finish_ms)) / r.second_ms, "s")}
    for b, name in enumerate(BIN_NAMES):
        sel = ft.cof_bin == b
        if sel.any():
            m[f"avg_cct_s_{name}"] = (float(cct[sel].mean()), "s")
    return m


def traffic_metrics(r: sim.Result) -> dict[str, tuple[float, str]]:
    wire, raw = float(np.nansum(r.wire_bytes)), float(np.nansum(r.raw_bytes))
    return {"wire_TB": (wire / 1e12, "TB"), "raw_TB": (raw / 1e12, "TB"),
            "traffic_reduction_pct": (100.0 * (1.0 - wire / raw), "%")}


def speedup_metrics(ours: sim.Result, base: sim.Result, prefix: str = "cct") -> dict[str, tuple[float, str]]:
    """Ratio of averages and average of per-coflow ratios of the baseline's CCT over ours."""
    a, b = ours.cct_s, base.cct_s
    return {f"{prefix}_speedup_ratio_of_avgs": (float(b.mean() / a.mean()), "x"),
            f"{prefix}_speedup_avg_of_ratios": (float(np.mean(b / a)), "x")}


def wire_fraction(r: sim.Result) -> np.ndarray:
    """Wire bytes over raw bytes per coflow (1 where nothing was compressed)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.asarray(r.wire_bytes, np.float64) / np.asarray(r.raw_bytes, np.float64)
    return np.clip(np.where(np.isfinite(w), w, 1.0), 1e-12, 1.0)


def jct_metrics(ft: FlowTable, ours: sim.Result, base: sim.Result | None, seed: int, kappa: float,
                sigma: float, disk_MBps: float, chunks: int = 1) -> dict[str, tuple[float, str]]:
    """Average JCT and its speed-up over ``base`` (jobs.py: compute + disk spill/merge + CCT, pipelined in
    ``chunks`` pieces), and how the JCT gain compares with the CCT gain (``jct_over_cct_gain`` > 1: JCT gains more)."""
    mp, rd = jobs.compute_stages_s(ft, seed, kappa, sigma)
    disk = disk_MBps * 1e6

    def jct(r: sim.Result) -> np.ndarray:
        spill, merge = jobs.io_stages_s(ft, wire_fraction(r), disk)
        return jobs.pipelined_jct_s(r.cct_s, mp, rd, spill, merge, chunks=chunks)

    j = jct(ours)
    m = {"avg_jct_s": (float(j.mean()), "s")}
    if base is not None:
        jb = jct(base)
        gain = float(jb.mean() / j.mean())
        m["jct_speedup_ratio_of_avgs"] = (gain, "x")
        m["jct_speedup_avg_of_ratios"] = (float(np.mean(jb / j)), "x")
        m["jct_over_cct_gain"] = (gain / float(base.cct_s.mean() / ours.cct_s.mean()), "x")
    return m


def _deterministic(pol: SwallowPolicy) -> bool:
    """Policies whose schedule does not depend on the seed (no CPU load enters)."""
    return pol.compress == "none"


# ----------------------------------------------------------------------------------------------- experiments


REFERENCE_CSV = "coflow/coflowsim_reference.csv"  # coflowsim's own per-coflow finish times (data/coflow/*.md)


def coflowsim_reference(data_dir: str | Path, ft: FlowTable, bookkeeping: str = "upstream") -> dict[str, np.ndarray]:
    """coflowsim's finish time (ms) per coflow of ``ft`` (arrival order), per policy, from the committed run of the
    Java simulator on the same trace prefix (``bookkeeping``: ``upstream``, or ``consistent``: its one-line
    receiver-bytes change, see data/coflow/coflowsim_reference.md); empty when no such run is on record."""
    import pandas as pd

    df = pd.read_csv(Path(data_dir) / REFERENCE_CSV)
    df = df[(df.trace_prefix == ft.num_coflows) & (df.bookkeeping == bookkeeping)]
    out = {}
    for pol, g in df.groupby("scheduler"):
        fin = g.set_index("coflow_id").finish_ms.reindex(ft.cof_id).to_numpy(np.float64)
        if np.all(np.isfinite(fin)):
            out[str(pol)] = fin
    return out


def parity_metrics(r: sim.Result, ref_finish_ms: np.ndarray, tag: str = "coflowsim") -> dict[str, tuple[float, str]]:
    """How far our run is from coflowsim's on the same trace: relative difference of the average CCT (CCT from our
    admission epoch, which is coflowsim's), and the share of coflows finishing in the same quantum."""
    ref_cct = ref_finish_ms - r.start_ms
    return {f"{tag}_avg_cct_s": (float(np.mean(ref_cct)) / r.second_ms, "s"),
            f"rel_diff_vs_{tag}_pct": (100.0 * (np.mean(r.cct_ms) / np.mean(ref_cct) - 1.0), "%"),
            f"same_finish_as_{tag}_pct": (100.0 * float(np.mean(r.finish_ms == ref_finish_ms)), "%")}


def coflowsim_parity(ctx: RunContext):
    """coflowsim's seven schedulers on the FB trace under its exact conventions (one deterministic run each), each
    compared coflow by coflow with coflowsim's own run: ``*_coflowsim`` against upstream coflowsim, ``*_consistent``
    against coflowsim with consistent receiver bookkeeping (the whole trace only; see the README's parity section)."""
    ft = flow_table(ctx, ctx.params.max_coflows)
    hw = ctx.hardware
    settings = [Setting(p, 0, hw.port_gbps, hw.cores_per_port, hw.codec) for p in ctx.policies]
    res = run_settings(ctx, ft, settings)
    exact = hw.clock == ClockConfig() and hw.port_gbps == 1.0
    refs = {tag: coflowsim_reference(ctx.data_dir, ft, book) if exact else {}
            for tag, book in (("coflowsim", "upstream"), ("consistent", "consistent"))}
    rows = []
    for x, r in zip(settings, res, strict=True):
        m = cct_metrics(ft, r)
        m["avg_cct_ms"] = (float(np.mean(r.cct_ms)), "ms")
        for tag, ref in refs.items():
            if x.policy in ref:
                m.update(parity_metrics(r, ref[x.policy], tag))
        rows += metric_rows(x.policy, m, seeds=[0])
    fig, ax = figure()
    cdf(ax[0, 0], {x.policy: r.cct_s for x, r in zip(settings, res, strict=True)}, "CCT (simulated s, 1024 ms)")
    ctx.save_figure(fig, "cct_cdf")
    return rows


def _jct(ctx: RunContext, ft: FlowTable, r: sim.Result, base: sim.Result | None, seed: int):
    p = ctx.params
    return jct_metrics(ft, r, base, seed, p.jct_median_kappa, p.jct_sigma, p.disk_MBps, p.jct_chunks)


def headline(ctx: RunContext):
    """FVDF vs SEBF (and always-on compression, Aalo, Sincronia) at the hardware's port rate and cores: CCT, JCT,
    traffic, under each payload model of ``params.payloads`` (column ``payload``; policies that do not compress
    run once and are repeated under each)."""
    ft = flow_table(ctx, ctx.params.max_coflows)
    hw = ctx.hardware
    seeds = [int(s) for s in ctx.seeds()]
    settings, key = [], {}
    for pl in ctx.params.payloads:
        for name, pol in ctx.policies.items():
            if _deterministic(pol) and pl != ctx.params.payloads[0]:
                continue
            for s in ([seeds[0]] if _deterministic(pol) else seeds):
                key[(pl, name, s)] = len(settings)
                settings.append(Setting(name, s, hw.port_gbps, hw.cores_per_port, hw.codec, pl))
    res = run_settings(ctx, ft, settings)

    def get(pl: str, name: str, s: int) -> sim.Result:
        if _deterministic(ctx.policies[name]):
            return res[key[(ctx.params.payloads[0], name, seeds[0])]]
        return res[key[(pl, name, s)]]

    rows = []
    for pl in ctx.params.payloads:
        for name in ctx.policies:
            for s in seeds:
                r = get(pl, name, s)
                base = get(pl, "sebf", s) if "sebf" in ctx.policies else None
                m = {**cct_metrics(ft, r), **traffic_metrics(r)}
                if base is not None:
                    m.update(speedup_metrics(r, base))
                m.update(_jct(ctx, ft, r, base, s))
                rows += metric_rows(name, m, seeds=[s], payload=pl)
    fig, ax = figure()
    pl0 = ctx.params.payloads[0]
    cdf(ax[0, 0], {n: get(pl0, n, seeds[0]).cct_s for n in ctx.policies}, f"CCT (simulated s; payload {pl0})")
    ctx.save_figure(fig, "cct_cdf")
    return rows


def jct_model(ctx: RunContext):
    """How the JCT speed-up over SEBF depends on the job model: map/shuffle pipelining in ``jct_chunks`` pieces
    x the hosts' disk rate ``disk_MBps`` (the CCTs are simulated once; only the job model changes)."""
    ft = flow_table(ctx, ctx.params.max_coflows)
    hw, p = ctx.hardware, ctx.params
    seeds = [int(s) for s in ctx.seeds()]
    settings = [Setting("sebf", seeds[0], hw.port_gbps, hw.cores_per_port, hw.codec)]
    settings += [Setting(name, s, hw.port_gbps, hw.cores_per_port, hw.codec) for name in ctx.policies
                 if name != "sebf" for s in seeds]
    res = run_settings(ctx, ft, settings)
    base = res[0]
    rows = []
    for i, x in enumerate(settings[1:], 1):
        for chunks in p.jct_chunks:
            for disk in p.disk_MBps:
                m = jct_metrics(ft, res[i], base, x.seed, p.jct_median_kappa, p.jct_sigma, disk, chunks)
                m.update(speedup_metrics(res[i], base))
                rows += metric_rows(x.policy, m, seeds=[x.seed], jct_chunks=chunks, disk_MBps=disk)
    import pandas as pd

    df = pd.DataFrame(rows)
    fig, ax = figure(ncols=2)
    for k, (col, label) in enumerate((("jct_chunks", "map/shuffle pieces (1 = stage barrier)"),
                                      ("disk_MBps", "disk MB/s per host"))):
        other = "disk_MBps" if col == "jct_chunks" else "jct_chunks"
        fixed = p.headline_disk_MBps if col == "jct_chunks" else p.headline_chunks
        lines_with_ci(ax[0, k], df[df[other] == fixed], "jct_speedup_ratio_of_avgs", col, xlabel=label,
                      ylabel="avg JCT speed-up vs SEBF", logx=True)
    ctx.save_figure(fig, "jct_speedup")
    return rows


def bandwidth_sweep(ctx: RunContext):
    """CCT/JCT speed-up over SEBF and traffic cut as the port bandwidth goes from 100 Mbps to 10 Gbps."""
    ft = flow_table(ctx, ctx.params.max_coflows)
    hw = ctx.hardware
    seeds = [int(s) for s in ctx.seeds()]
    settings, key = [], {}
    for bw in ctx.params.bandwidth_gbps:
        for name, pol in ctx.policies.items():
            for s in ([seeds[0]] if _deterministic(pol) else seeds):
                key[(bw, name, s)] = len(settings)
                settings.append(Setting(name, s, bw, hw.cores_per_port, hw.codec))
    res = run_settings(ctx, ft, settings)
    get = lambda bw, name, s: res[key.get((bw, name, s), key.get((bw, name, seeds[0])))]
    rows = []
    for bw in ctx.params.bandwidth_gbps:
        for name in ctx.policies:
            for s in seeds:
                r, base = get(bw, name, s), get(bw, "sebf", s)
                m = {**cct_metrics(ft, r), **traffic_metrics(r), **speedup_metrics(r, base),
                     **_jct(ctx, ft, r, base, s)}
                rows += metric_rows(name, m, seeds=[s], bandwidth_gbps=bw)
    _sweep_figure(ctx, rows, "bandwidth_gbps", "port bandwidth (Gbps)", "speedup_vs_bandwidth")
    return rows


def regime_map(ctx: RunContext):
    """FVDF's CCT speed-up over SEBF and traffic cut on a grid of port bandwidth x compression cores per host: where
    CPU binds, where bandwidth does, and where the paper's 1.47x lies (the contour on the figure)."""
    ft = flow_table(ctx, ctx.params.max_coflows)
    hw, p = ctx.hardware, ctx.params
    seeds = [int(s) for s in ctx.seeds()]
    settings, key = [], {}
    for bw in p.bandwidth_gbps:
        key[(bw, "sebf")] = len(settings)
        settings.append(Setting("sebf", seeds[0], bw, 1.0, hw.codec))
        for cores in p.cores_per_port:
            for name in ctx.policies:
                if name == "sebf":
                    continue
                for s in seeds:
                    key[(bw, cores, name, s)] = len(settings)
                    settings.append(Setting(name, s, bw, cores, hw.codec))
    res = run_settings(ctx, ft, settings)
    rows = []
    for bw in p.bandwidth_gbps:
        base = res[key[(bw, "sebf")]]
        for cores in p.cores_per_port:
            for name in ctx.policies:
                for s in seeds:
                    r = base if name == "sebf" else res[key[(bw, cores, name, s)]]
                    m = {**cct_metrics(ft, r), **traffic_metrics(r), **speedup_metrics(r, base)}
                    rows += metric_rows(name, m, seeds=[s], cores_per_port=cores, bandwidth_gbps=bw)
    _map_figure(ctx, rows, p.contour)
    return rows


def _map_figure(ctx: RunContext, rows: list[dict], contour: float) -> None:
    """Heat maps (bandwidth x cores) of FVDF's mean speed-up and traffic cut, with the ``contour`` speed-up line."""
    import pandas as pd

    df = pd.DataFrame(rows)
    name = next(n for n in ctx.policies if n != "sebf")
    df = df[df.policy == name]
    fig, ax = figure(ncols=2, w=5.5)
    for k, (metric, label) in enumerate((("cct_speedup_ratio_of_avgs", "avg CCT speed-up vs SEBF (x)"),
                                         ("traffic_reduction_pct", "traffic cut (%)"))):
        g = df[df.metric == metric].groupby(["cores_per_port", "bandwidth_gbps"]).value.mean().unstack()
        a = ax[0, k]
        im = a.pcolormesh(np.log2(g.columns.to_numpy(float)), np.log2(g.index.to_numpy(float)), g.to_numpy(),
                          shading="nearest", cmap="viridis")
        fig.colorbar(im, ax=a, label=label)
        if k == 0 and g.to_numpy().min() < contour < g.to_numpy().max():
            cs = a.contour(np.log2(g.columns.to_numpy(float)), np.log2(g.index.to_numpy(float)), g.to_numpy(),
                           levels=[contour], colors="white", linewidths=2)
            a.clabel(cs, fmt=lambda v: f"paper {v:g}x")
        a.set_xticks(np.log2(g.columns.to_numpy(float)), [f"{v:g}" for v in g.columns])
        a.set_yticks(np.log2(g.index.to_numpy(float)), [f"{v:g}" for v in g.index])
        a.set_xlabel("port bandwidth (Gbps)")
        a.set_ylabel("compression cores per host")
        a.set_title(f"{name}: {label}")
    ctx.save_figure(fig, "regime_map")


def ablation(ctx: RunContext):
    """FVDF without pipelining, with other speed predictors, and with other codecs, where CPU is scarce."""
    ft = flow_table(ctx, ctx.params.max_coflows)
    p = ctx.params
    seeds = [int(s) for s in ctx.seeds()]
    settings = [Setting("sebf", seeds[0], p.port_gbps, p.cores_per_port, "lz4")]
    key = {}
    for name in ctx.policies:
        if name == "sebf":
            continue
        for s in seeds:
            key[(name, "lz4", s)] = len(settings)
            settings.append(Setting(name, s, p.port_gbps, p.cores_per_port, ctx.hardware.codec))
    for codec in p.codecs:
        if codec == ctx.hardware.codec:
            continue
        for s in seeds:
            key[("fvdf", codec, s)] = len(settings)
            settings.append(Setting("fvdf", s, p.port_gbps, p.cores_per_port, codec))
    res = run_settings(ctx, ft, settings)
    base = res[0]
    rows = []
    for s in seeds:
        rows += metric_rows("sebf", {**cct_metrics(ft, base), **traffic_metrics(base)}, seeds=[s], codec="none")
    for (name, codec, s), i in key.items():
        r = res[i]
        m = {**cct_metrics(ft, r), **traffic_metrics(r), **speedup_metrics(r, base)}
        rows += metric_rows(name, m, seeds=[s], codec=codec)
    return rows


def predictor_accuracy(ctx: RunContext):
    """Next-sample CPU-load forecast error (test split) of the GRU, EWMA, last value and the oracle."""
    p = ctx.params
    rows = []
    for src in p.sources:
        trace = cpu_trace(ctx, src)
        per_seed: dict[str, dict[str, list[float]]] = {}
        cfg = GruConfig(window=p.window, hidden=p.hidden, steps=p.steps)
        seeds = tuple(int(s) for s in ctx.seeds())
        for model in predictors(ctx, src, cfg, seeds):
            ev = evaluate(model, trace, stride=p.eval_stride)
            val = split_errors(model, trace, "val", stride=p.eval_stride)
            pick = select_on_validation(model, trace, stride=p.eval_stride)
            for meth, d in ev.items():
                for k, v in d.items():
                    per_seed.setdefault(meth, {}).setdefault(k, []).append(v)
                per_seed[meth].setdefault("val_mae", []).append(val[meth]["mae"])
                if meth in CANDIDATES:  # 1 for the forecaster a scheduler running "validated" would use
                    per_seed[meth].setdefault("selected_on_val", []).append(float(meth == pick))
        for meth, d in per_seed.items():
            units = {"selected_on_val": "bool"}
            rows += metric_rows(meth, {(k if k == "selected_on_val" else f"{k}_pct"): (v, units.get(k, "pct-points"))
                                       for k, v in d.items()}, seeds=[int(s) for s in ctx.seeds()], cpu_trace=src)
    return rows


def _sweep_figure(ctx: RunContext, rows: list[dict], x: str, xlabel: str, name: str) -> None:
    import pandas as pd

    df = pd.DataFrame(rows)
    df = df[df["policy"] != "sebf"]
    fig, ax = figure(ncols=2)
    lines_with_ci(ax[0, 0], df, "cct_speedup_ratio_of_avgs", x, xlabel=xlabel, ylabel="avg CCT speed-up vs SEBF",
                  logx=True)
    lines_with_ci(ax[0, 1], df, "traffic_reduction_pct", x, xlabel=xlabel, ylabel="traffic cut (%)", logx=True)
    ctx.save_figure(fig, name)


__all__ = ["Setting", "flow_table", "run_settings", "sim_params"]
