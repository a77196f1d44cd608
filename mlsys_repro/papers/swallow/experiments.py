"""Swallow experiments (rows and figures): coflowsim parity, the headline comparison, the JCT model, the bandwidth
sweep, the bandwidth x cores regime map, ablations, the CPU-load predictor. Settings run through
:mod:`mlsys_repro.papers.swallow.pipeline` (one configuration per core on the full trace)."""

from __future__ import annotations

import numpy as np

from mlsys_repro.common.repro import RunContext, metric_rows
from mlsys_repro.common.repro.plots import cdf, figure, lines_with_ci
from mlsys_repro.papers.swallow import sim
from mlsys_repro.papers.swallow.data import coflowsim_reference, cpu_trace, flow_table
from mlsys_repro.papers.swallow.flows import FlowTable
from mlsys_repro.papers.swallow.pipeline import (
    Setting,
    _deterministic,
    cct_metrics,
    jct_metrics,
    parity_metrics,
    predictors,
    run_settings,
    sim_params,
    speedup_metrics,
    traffic_metrics,
)
from mlsys_repro.papers.swallow.predictor import (
    CANDIDATES,
    GruConfig,
    evaluate,
    select_on_validation,
    split_errors,
)
from mlsys_repro.papers.swallow.schemas import (
    ClockConfig,
)


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


def _payload_policies(ctx: RunContext) -> dict[str, list[str]]:
    """The policies run under each payload model: all under the first (the headline's), ``sensitivity_policies``
    (default: all) under the others."""
    p = ctx.params
    later = list(ctx.policies) if p.sensitivity_policies is None else p.sensitivity_policies
    unknown = [n for n in later if n not in ctx.policies]
    if unknown:
        raise ValueError(f"sensitivity_policies {unknown} are not among the experiment's policies {list(ctx.policies)}")
    return {pl: list(ctx.policies) if i == 0 else [n for n in ctx.policies if n in later]
            for i, pl in enumerate(p.payloads)}


def headline(ctx: RunContext):
    """FVDF vs SEBF (and always-on compression, Aalo, Sincronia) at the hardware's port rate and cores: CCT, JCT,
    traffic, under each payload model of ``params.payloads`` (column ``payload``; policies that do not compress
    run once and are repeated under each)."""
    ft = flow_table(ctx, ctx.params.max_coflows)
    hw = ctx.hardware
    seeds = [int(s) for s in ctx.seeds()]
    settings, key = [], {}
    runs = _payload_policies(ctx)
    for pl in ctx.params.payloads:
        for name, pol in ctx.policies.items():
            if (_deterministic(pol) and pl != ctx.params.payloads[0]) or name not in runs[pl]:
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
        for name in runs[pl]:
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
