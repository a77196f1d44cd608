"""Canary experiments: time-to-accuracy, throughput and bytes on the wire; accuracy impact of the sketch; sweeps.

Every training experiment runs the same pipeline (:func:`train_and_time`): for each NIC rate, sketch arithmetic
rate (``params.sketch_gbps``) and policy, the discrete-event model (:mod:`mlsys_repro.papers.canary.protocols`) gives
the schedule, the policy's aggregation numerics (:mod:`mlsys_repro.papers.canary.train`) train the real model on real
data for every seed (``vmap``), and the schedule maps iterations to simulated wall-clock. Policies whose numerics
coincide (the fp32 mean of PS, BML with or without overlap and ring all-reduce; identical visibility schedules) share
one training run; a policy may train longer than the others (``params.iterations_factor``).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

import numpy as np

from mlsys_repro.common.repro import RunContext, metric_rows
from mlsys_repro.common.repro.plots import figure, lines_with_ci
from mlsys_repro.common.sim.netsim import gbps_to_bytes_per_s
from mlsys_repro.common.timing import MODELS as TIMING_MODELS
from mlsys_repro.common.timing import comm_compute_ratio, effective_flops_per_s
from mlsys_repro.papers.canary.compute_model import ComputeModel, Layout, timing_layout
from mlsys_repro.papers.canary.data import SHAPES, layout_for_shape, load_images_trace, model_layout
from mlsys_repro.papers.canary.protocols import NetSpec, ProtocolSpec, Schedule, simulate
from mlsys_repro.papers.canary.schemas import (
    AccuracyCostParams,
    BCubeCluster,
    CommRatioParams,
    ExchangePolicy,
    OptimiserSweepParams,
    PieceSweepParams,
    TrafficParams,
    TrainParams,
)
from mlsys_repro.papers.canary.train import Exchange, Setup, make_train


def compute_model(hw: BCubeCluster, sketch_gbps: float = 0.0) -> ComputeModel:
    """The worker's compute model: the proxy on ``worker_tflops`` with overheads, or, with ``hardware.workload``,
    the Gavel-calibrated training rate of ``hardware.gpu`` (which already includes every overhead); its sketch
    arithmetic at ``sketch_gbps`` GB/s of fp32 input per round trip (0 = free)."""
    rate = float(sketch_gbps) * 1e9
    if hw.workload:
        return ComputeModel(effective_flops_per_s(hw.gpu), 0.0, 0.0, 2.0, sketch_bytes_per_s=rate)
    return ComputeModel(hw.worker_tflops * 1e12, hw.kernel_overhead_us * 1e-6, hw.iteration_overhead_ms * 1e-3,
                        hw.backward_factor, sketch_bytes_per_s=rate)


def des_layout(hw: BCubeCluster, proxy: Layout) -> Layout:
    """The layout the discrete-event model sees: the proxy's, or its pieces on ``hardware.workload``'s gradient."""
    return timing_layout(proxy, TIMING_MODELS[hw.workload]()) if hw.workload else proxy


def net_spec(hw: BCubeCluster, gbps: float, k: int | None = None) -> NetSpec:
    return NetSpec(hw.bcube_n, hw.bcube_k if k is None else k, gbps_to_bytes_per_s(gbps), hw.link_latency_us * 1e-6,
                   hw.header_bytes)


def protocol_spec(pol: ExchangePolicy) -> ProtocolSpec:
    return ProtocolSpec(pol.protocol, sketch=pol.sketch, staleness=pol.staleness, multi_nic=pol.multi_nic,
                        pipeline=pol.pipeline, ako_partitions=pol.ako_partitions, overlap=pol.overlap)


def exchange_for(pol: ExchangePolicy, sched: Schedule, ns: NetSpec) -> Exchange:
    """The numerics a policy's schedule implies."""
    if pol.protocol == "canary":
        tree = (ns.n, ns.k) if pol.multi_nic else (ns.num_servers, 0)
        vis = sched.visible
        if pol.staleness == 0:
            if not np.all(vis == np.arange(sched.iterations)[:, None, None] + 1):
                raise AssertionError("staleness 0 must make every piece visible at the next iteration")
            vis = None
        return Exchange("tree", sketch=pol.sketch, bcube=tree, visible=vis, local_first=pol.local_first)
    if pol.protocol == "ako":
        return Exchange("ako", visible=sched.visible, ako_partitions=sched.ako_partitions)
    if pol.sketch:
        return Exchange("ps8" if pol.protocol == "ps" else "ring8", sketch=True)
    return Exchange("exact")


@dataclass
class PolicyRun:
    policy: str
    gbps: float
    schedule: Schedule
    acc: np.ndarray  # [S, T / eval_every + 1]; NaN where a sweep's training diverged
    eval_iters: np.ndarray
    lr: float
    momentum: float
    sketch_gbps: float = 0.0  # the workers' sketch arithmetic rate the schedule was simulated at (0 = free)


def train_and_time(ctx: RunContext, p: TrainParams, grid: list[tuple[float, float]] | None = None,
                   seeds: np.ndarray | None = None, compute_scale: np.ndarray | None = None,
                   sketch_gbps: list[float] | None = None, first_rate_only: Collection[str] = ()) -> list[PolicyRun]:
    """Simulate every (NIC rate, sketch rate, policy), train each distinct (numerics, run length, optimiser) once
    over all seeds.

    A policy trains for ``p.iterations_for(policy)`` iterations with ``p.optimiser_for(policy)``, or with every
    ``(lr, momentum)`` of ``grid`` (one run per grid point, in grid order); ``seeds`` default to the run's seeds;
    ``compute_scale [N]`` makes the workers heterogeneous (each worker's compute time factor, discrete-event model
    only); ``sketch_gbps`` (default ``p.sketch_gbps``) are the sketch arithmetic rates, and a policy without the
    sketch is simulated once for all of them (its schedule does not depend on them); a policy in
    ``first_rate_only`` runs at the first of ``p.bandwidths_gbps`` only.
    """
    hw = ctx.hardware
    data = load_images_trace(ctx.trace, ctx.data_dir, n_train=p.n_train or None, n_test=p.n_test)
    layout = model_layout(p.model, data, p.colayer_bytes, p.piece_elems)
    setup = Setup(p.model, data, layout, hw.num_servers, p.batch, p.iterations, p.eval_every, p.lr, p.momentum)
    dlay = des_layout(hw, layout)
    seeds = ctx.seeds() if seeds is None else seeds
    rates = list(p.sketch_gbps if sketch_gbps is None else sketch_gbps)
    trainers: dict[tuple, object] = {}  # one compilation per (numerics, run length); the optimiser is a jit argument
    cache: dict[tuple, np.ndarray] = {}
    schedules: dict[tuple, Schedule] = {}
    runs = []
    runs_per_rate = [[n for n in ctx.policies if i == 0 or n not in first_rate_only]
                     for i in range(len(p.bandwidths_gbps))]
    ctx.progress.start(sum(map(len, runs_per_rate)) * len(rates) * len(grid or [None]),
                       "policy x bandwidth x sketch rate")
    for gbps, names in zip(p.bandwidths_gbps, runs_per_rate, strict=True):
        ns = net_spec(hw, gbps)
        for sk in rates:
            cm = compute_model(hw, sk)
            for name in names:
                pol = ctx.policies[name]
                its = p.iterations_for(name)
                skey = (name, gbps, sk if pol.sketch else None)
                if skey not in schedules:
                    schedules[skey] = simulate(protocol_spec(pol), ns, dlay, cm, p.batch, its,
                                               max_simulated=p.des_max_simulated, compute_scale=compute_scale)
                sched = schedules[skey]
                ex = exchange_for(pol, sched, ns)
                for lr, mom in grid or [p.optimiser_for(name, gbps)]:
                    tkey = (its, ex.key())
                    key = (tkey, lr, mom)
                    if key not in cache:
                        if tkey not in trainers:
                            trainers[tkey] = make_train(replace(setup, iterations=its), ex)
                        try:
                            cache[key] = trainers[tkey](seeds, lr=lr, momentum=mom)["acc"]
                        except FloatingPointError:
                            if grid is None:
                                raise
                            cache[key] = np.full((len(seeds), its // p.eval_every + 1), np.nan)
                    runs.append(PolicyRun(name, gbps, sched, cache[key], np.arange(0, its + 1, p.eval_every), lr, mom,
                                          sk))
                    ctx.progress.update(note=f"{name}@{gbps:g}G sketch {sk:g} GB/s lr={lr:g} momentum={mom:g} "
                                             f"({len(cache)} trainings)")
    return runs


def tta_metrics(run: PolicyRun, target: float, batch: int) -> dict[str, tuple[np.ndarray, str]]:
    """Per-seed time/iterations/bytes to ``target`` test accuracy (censored at the last iteration if missed)."""
    s = run.schedule
    hit = run.acc >= target
    reached = hit.any(axis=1)
    first = np.where(reached, hit.argmax(axis=1), run.acc.shape[1] - 1)
    iters = run.eval_iters[first]
    tta = s.fwd_start[0, iters]
    it_s = 1.0 / s.steady_iteration_time()
    out = {
        "tta_s": (tta, "s"),
        "iters_to_target": (iters.astype(float), "iterations"),
        "reached_target": (reached.astype(float), "bool"),
        # validity gate of the speed-up claims (`requires: [baseline_reached]`): 1 where this run reached the target;
        # a claim comparing policies is INCONCLUSIVE when any compared run did not (a censored time measures the
        # budget, not the policy)
        "baseline_reached": (reached.astype(float), "bool"),
        "final_acc": (run.acc[:, -1], "fraction"),
        "throughput_its": (np.full(len(tta), it_s), "iterations/s"),
        "images_per_s": (np.full(len(tta), it_s * s.num_workers * batch), "images/s"),
        "bytes_per_iter_MB": (np.full(len(tta), s.bytes_per_iteration / 1e6), "MB"),
        "traffic_to_target_MB": (s.bytes_per_iteration * iters / 1e6, "MB"),
        # simulated seconds of sketch arithmetic per worker and iteration (mean; 0 for fp32 or a free sketch)
        "sketch_s_per_iter": (np.full(len(tta), s.extra.get("sketch_s_per_iteration", 0.0)), "s"),
        "iterations_run": (np.full(len(tta), float(s.iterations)), "iterations"),
    }
    if s.protocol == "ako":
        out["ako_partitions"] = (np.full(len(tta), float(s.ako_partitions)), "partitions")
    return out


def tta_rows(ctx: RunContext, runs: list[PolicyRun], p: TrainParams) -> list[dict]:
    rows = []
    for r in runs:
        rows += metric_rows(r.policy, tta_metrics(r, p.target_acc, p.batch), seeds=ctx.seeds(),
                            bandwidth_gbps=r.gbps, sketch_gbps=r.sketch_gbps, servers=r.schedule.num_workers)
    return rows


def plot_tta(ctx: RunContext, runs: list[PolicyRun], rows: list[dict], p: TrainParams) -> None:
    import pandas as pd

    sk = p.sketch_gbps[0]  # the figures show the first sketch rate (the one the counted claims read)
    runs = [r for r in runs if r.sketch_gbps == sk]
    rows = [r for r in rows if r.get("sketch_gbps") == sk]
    bws = list(dict.fromkeys(r.gbps for r in runs))
    fig, axes = figure(ncols=len(bws), w=4.6, h=3.6)
    for ax, bw in zip(axes[0], bws, strict=True):
        for r in (r for r in runs if r.gbps == bw):
            t = r.schedule.fwd_start[0, r.eval_iters]
            ax.plot(t * 1e3, r.acc.mean(0), label=r.policy, lw=1.2)
        ax.axhline(p.target_acc, color="k", lw=0.6, ls=":")
        ax.set_xscale("log")
        ax.set_ylim(max(0.0, p.target_acc - 0.25), 1.0)
        ax.set_xlabel("simulated wall-clock (ms, log)")
        ax.set_ylabel(f"test accuracy (worker 0, mean of {ctx.num_seeds} seeds)")
        ax.set_title(f"{runs[0].schedule.num_workers} servers, {bw:g} Gbps NICs, sketch {sk:g} GB/s", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    ctx.save_figure(fig, "accuracy_vs_time")
    df = pd.DataFrame(rows)
    fig, axes = figure(ncols=2, w=5.0, h=3.6)
    lines_with_ci(axes[0][0], df, "tta_s", x="bandwidth_gbps", xlabel="NIC Gbps (log)",
                  ylabel=f"simulated time to {100 * p.target_acc:g}% (s)", logx=True)
    axes[0][0].set_yscale("log")
    lines_with_ci(axes[0][1], df, "throughput_its", x="bandwidth_gbps", xlabel="NIC Gbps (log)",
                  ylabel="iterations per simulated second", logx=True)
    ctx.save_figure(fig, "tta_and_throughput")


def accuracy_drop_rows(ctx: RunContext, runs: list[PolicyRun], p: TrainParams) -> list[dict]:
    """Per-seed final-accuracy drop (percentage points) of each ``policy:reference`` pair at equal iterations."""
    rows = []
    for pair in p.accuracy_pairs:
        pol, ref = pair.split(":")
        for bw in p.bandwidths_gbps:
            for sk in p.sketch_gbps:
                a = [r for r in runs if r.policy == pol and r.gbps == bw and r.sketch_gbps == sk]
                b = [r for r in runs if r.policy == ref and r.gbps == bw and r.sketch_gbps == sk]
                if not a or not b:
                    raise ValueError(f"accuracy pair {pair!r}: both policies must be in the experiment")
                drop = 100.0 * (b[0].acc[:, -1] - a[0].acc[:, -1])
                rows += metric_rows(pol, {"acc_drop_pp": (drop, "pp")}, seeds=ctx.seeds(), bandwidth_gbps=bw,
                                    sketch_gbps=sk, servers=a[0].schedule.num_workers, reference=ref)
    return rows


def plot_accuracy(ctx: RunContext, runs: list[PolicyRun], p: TrainParams) -> None:
    fig, axes = figure(ncols=1, w=5.6, h=3.8)
    ax = axes[0][0]
    seen = set()
    for r in runs:
        key = (r.policy, r.acc.tobytes())
        if key in seen:
            continue
        seen.add(key)
        m, sd = r.acc.mean(0), r.acc.std(0)
        ax.plot(r.eval_iters, m, label=f"{r.policy} ({r.gbps:g} Gbps)")
        ax.fill_between(r.eval_iters, m - sd, m + sd, alpha=0.15)
    ax.set_xlabel("iteration")
    ax.set_ylabel(f"test accuracy, mean +- sd of {ctx.num_seeds} seeds")
    ax.set_title(f"{ctx.trace.name}, {p.model}, {runs[0].schedule.num_workers} workers")
    lo = float(np.min([r.acc[:, -1].min() for r in runs]))
    ax.set_ylim(max(0.0, lo - 0.2), 1.0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ctx.save_figure(fig, "accuracy_vs_iteration")


def _tta_experiment(ctx: RunContext) -> list[dict]:
    p: TrainParams = ctx.params
    runs = train_and_time(ctx, p)
    rows = tta_rows(ctx, runs, p)
    plot_tta(ctx, runs, rows, p)
    return rows + accuracy_drop_rows(ctx, runs, p)


def tta_bcube9(ctx: RunContext) -> list[dict]:
    """Time to accuracy, throughput and bytes of Canary and every baseline on BCube(3,1), 1/10/25 Gbps."""
    return _tta_experiment(ctx)


def tta_bcube27(ctx: RunContext) -> list[dict]:
    """The same on BCube(3,2): 27 servers with three NICs each."""
    return _tta_experiment(ctx)


def ablation(ctx: RunContext) -> list[dict]:
    """Canary without the sketch, without asynchrony, with one NIC, without pipelining."""
    return _tta_experiment(ctx)


def plateaued(acc: np.ndarray, plateau_pp: float) -> np.ndarray:
    """Per run (rows of ``acc [S, E]``): 1 when the mean accuracy over the last quarter of the evaluations exceeds
    the mean over the quarter before it by less than ``plateau_pp`` percentage points, else 0."""
    k = max(1, acc.shape[1] // 4)
    if acc.shape[1] < 2 * k + 1:
        raise ValueError("too few evaluations to tell a plateau")
    gain = 100.0 * (acc[:, -k:].mean(axis=1) - acc[:, -2 * k: -k].mean(axis=1))
    return (gain < plateau_pp).astype(float)


def accuracy_cost(ctx: RunContext) -> list[dict]:
    """Final MNIST accuracy of Canary (sketch + staleness) and synchronous Canary (sketch) against BML (fp32), every
    policy at the same optimiser, long enough to plateau (gate ``plateaued`` per run)."""
    p: AccuracyCostParams = ctx.params
    runs = train_and_time(ctx, p)
    rows = tta_rows(ctx, runs, p)
    for r in runs:
        rows += metric_rows(r.policy, {"plateaued": (plateaued(r.acc, p.plateau_pp), "bool")}, seeds=ctx.seeds(),
                            bandwidth_gbps=r.gbps, sketch_gbps=r.sketch_gbps, servers=r.schedule.num_workers)
    plot_accuracy(ctx, runs, p)
    return rows + accuracy_drop_rows(ctx, runs, p)


def sketch_accuracy(ctx: RunContext) -> list[dict]:
    """Accuracy impact of the 8-bit sketch at equal iterations on the CNN variant (CIFAR-10 JPEG copy, LeNet-5)."""
    p: TrainParams = ctx.params
    runs = train_and_time(ctx, p)
    plot_accuracy(ctx, runs, p)
    return tta_rows(ctx, runs, p) + accuracy_drop_rows(ctx, runs, p)


def ratio_gbps(hw: BCubeCluster, batch: int, ratio: float) -> float:
    """NIC Gbps at which ``hardware.workload``'s communication-to-compute ratio (one fp32 gradient over one NIC /
    one iteration's compute, :func:`mlsys_repro.common.timing.comm_compute_ratio`) equals ``ratio``."""
    if not hw.workload:
        raise ValueError("the communication-to-compute ratio needs hardware.workload (a mlsys_repro.common.timing "
                         "model)")
    rate = effective_flops_per_s(hw.gpu)
    return comm_compute_ratio(TIMING_MODELS[hw.workload](), batch, rate, 1.0) / ratio


def comm_ratio(ctx: RunContext) -> list[dict]:
    """Claim boundary: Canary's speed-ups against BML, the PS and Ako as the communication-to-compute ratio grows
    (the NIC rate set per ratio for ``hardware.workload``; the numerics train the proxy)."""
    from dataclasses import replace

    p: CommRatioParams = ctx.params
    gbps = {ratio_gbps(ctx.hardware, p.batch, r): r for r in p.comm_ratios}
    q = replace(p, bandwidths_gbps=list(gbps))
    rows = []
    for sd in p.slowdowns:
        scale = np.ones(ctx.hardware.num_servers)
        scale[-1] = sd  # one straggler (the last worker; accuracy and time are read at worker 0)
        rates = p.sketch_gbps if sd == p.slowdowns[0] else p.sketch_gbps[:1]  # sensitivity rates: homogeneous only
        part = tta_rows(ctx, train_and_time(ctx, q, compute_scale=scale, sketch_gbps=rates), q)
        for row in part:
            row["comm_ratio"] = gbps[row["bandwidth_gbps"]]
            row["slowdown"] = sd
        rows += part
    import pandas as pd

    df = pd.DataFrame(rows)
    df = df[(df.slowdown == p.slowdowns[0]) & (df.sketch_gbps == p.sketch_gbps[0])]  # the figure: the first ones
    fig, axes = figure(ncols=2, w=5.0, h=3.6)
    lines_with_ci(axes[0][0], df, "tta_s", x="comm_ratio", xlabel="communication / compute (log)",
                  ylabel=f"simulated time to {100 * p.target_acc:g}% (s)", logx=True)
    axes[0][0].set_yscale("log")
    lines_with_ci(axes[0][1], df, "throughput_its", x="comm_ratio", xlabel="communication / compute (log)",
                  ylabel="iterations per simulated second", logx=True)
    ctx.save_figure(fig, "tta_vs_comm_ratio")
    return rows


def sweep_score(run: PolicyRun, target: float, iterations: int, eval_every: int) -> tuple[float, float]:
    """Sort key of one grid point (lower is better): mean iterations to ``target`` (a missed seed counts as
    ``iterations + eval_every``, a diverged run as infinity), then minus mean final accuracy."""
    if not np.all(np.isfinite(run.acc)):
        return float("inf"), float("inf")
    hit = run.acc >= target
    its = np.where(hit.any(axis=1), run.eval_iters[hit.argmax(axis=1)], iterations + eval_every)
    return float(its.mean()), -float(run.acc[:, -1].mean())


def optimiser_sweep(ctx: RunContext) -> list[dict]:
    """Each policy's (lr, momentum) from one shared grid, on tuning seeds disjoint from the reported seeds.

    Rows per grid point: ``diverged`` (non-finite loss), else iterations/time to target, ``reached_target`` and
    ``final_acc``; per policy and NIC rate ``chosen_lr`` / ``chosen_momentum``, the :func:`sweep_score` minimum.
    """
    p: OptimiserSweepParams = ctx.params
    seeds = ctx.seeds() + p.tuning_seed_offset
    grid = [(float(lr), float(m)) for m in p.momenta for lr in p.lrs]
    if unknown := set(p.first_rate_only) - set(ctx.policies):
        raise ValueError(f"params.first_rate_only names policies this sweep does not run: {sorted(unknown)}")
    runs = train_and_time(ctx, p, grid=grid, seeds=seeds, first_rate_only=p.first_rate_only)
    rows, best = [], {}
    for r in runs:
        cond = dict(seeds=seeds, bandwidth_gbps=r.gbps, sketch_gbps=r.sketch_gbps, servers=r.schedule.num_workers,
                    lr=r.lr, momentum=r.momentum)
        diverged = not np.all(np.isfinite(r.acc))
        rows += metric_rows(r.policy, {"diverged": (np.full(len(seeds), float(diverged)), "bool")}, **cond)
        if not diverged:
            m = tta_metrics(r, p.target_acc, p.batch)
            rows += metric_rows(r.policy, {k: m[k] for k in ("iters_to_target", "tta_s", "reached_target",
                                                             "final_acc")}, **cond)
        score = sweep_score(r, p.target_acc, p.iterations, p.eval_every)
        k = (r.policy, r.gbps)
        if k not in best or score < best[k][0]:
            best[k] = (score, r)
    for (name, gbps), (_, r) in best.items():
        rows += metric_rows(name, {"chosen_lr": (r.lr, "lr"), "chosen_momentum": (r.momentum, "momentum")},
                            seeds=[int(seeds[0])], bandwidth_gbps=gbps, servers=r.schedule.num_workers)
    plot_sweep(ctx, runs, p)
    return rows


def plot_sweep(ctx: RunContext, runs: list[PolicyRun], p: OptimiserSweepParams) -> None:
    names = list(dict.fromkeys(r.policy for r in runs))
    fig, axes = figure(ncols=len(names), w=2.6, h=3.0)
    for ax, name in zip(axes[0], names, strict=True):
        for mom in p.momenta:
            sel = [r for r in runs if r.policy == name and r.momentum == mom and r.gbps == p.bandwidths_gbps[0]]
            ax.plot([r.lr for r in sel], [r.acc[:, -1].mean() for r in sel], "o-", label=f"momentum {mom:g}")
        ax.axhline(p.target_acc, color="k", lw=0.6, ls=":")
        ax.set_xscale("log")
        ax.set_ylim(0.0, 1.0)
        ax.set_title(name, fontsize=8)
        ax.set_xlabel("lr (log)")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(f"final test accuracy ({p.iterations} it., diverged: gap)")
    axes[0][0].legend(fontsize=6)
    ctx.save_figure(fig, "final_accuracy_vs_optimiser")


def traffic(ctx: RunContext) -> list[dict]:
    """Bytes on the wire per iteration of every policy on BCube(3,1) and BCube(3,2) (deterministic)."""
    p: TrafficParams = ctx.params
    hw = ctx.hardware
    layout = des_layout(hw, layout_for_shape(p.model, SHAPES[ctx.trace.options["dataset"]], p.colayer_bytes,
                                             p.piece_elems))
    cm = compute_model(hw)
    rows = []
    ctx.progress.start(len(p.bcube_k) * len(ctx.policies), "policy x cluster")
    for k in p.bcube_k:
        ns = net_spec(hw, hw.nic_gbps, k)
        for name, pol in ctx.policies.items():
            s = simulate(protocol_spec(pol), ns, layout, cm, p.batch, p.iterations)
            n = ns.num_servers
            rows += metric_rows(name, {
                "bytes_per_iter_MB": (s.bytes_per_iteration / 1e6, "MB"),
                "bytes_per_worker_iter_MB": (s.bytes_per_iteration / n / 1e6, "MB"),
                "messages_per_iter": (s.transfers_per_iteration, "messages"),
            }, seeds=[0], servers=n, bandwidth_gbps=hw.nic_gbps)
            ctx.progress.update(note=f"{name} on {n} servers")
    import pandas as pd

    df = pd.DataFrame(rows)
    fig, axes = figure(ncols=1, w=6.0, h=3.6)
    ax = axes[0][0]
    sel = df[df.metric == "bytes_per_worker_iter_MB"]
    names = list(dict.fromkeys(sel.policy))
    width = 0.8 / len(p.bcube_k)
    for i, (n, g) in enumerate(sel.groupby("servers")):
        vals = [float(g[g.policy == nm].value.iloc[0]) for nm in names]
        ax.bar(np.arange(len(names)) + i * width, vals, width, label=f"{n} servers")
    ax.set_xticks(np.arange(len(names)) + width * (len(p.bcube_k) - 1) / 2, names, rotation=30, ha="right")
    ax.set_ylabel("MB sent per worker per iteration")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    ctx.save_figure(fig, "bytes_per_iteration")
    return rows


def piece_sweep(ctx: RunContext) -> list[dict]:
    """Canary throughput against piece size and NIC rate, with all NICs and with one (deterministic)."""
    p: PieceSweepParams = ctx.params
    hw = ctx.hardware
    cm = compute_model(hw)
    rows = []
    ctx.progress.start(len(p.piece_elems) * len(p.bandwidths_gbps) * len(ctx.policies), "configs")
    for pe in p.piece_elems:
        layout = des_layout(hw, layout_for_shape(p.model, SHAPES[ctx.trace.options["dataset"]], p.colayer_bytes, pe))
        for gbps in p.bandwidths_gbps:
            ns = net_spec(hw, gbps)
            for name, pol in ctx.policies.items():
                s = simulate(protocol_spec(pol), ns, layout, cm, 32, p.iterations)
                rows += metric_rows(name, {
                    "throughput_its": (1.0 / s.steady_iteration_time(), "iterations/s"),
                    "bytes_per_iter_MB": (s.bytes_per_iteration / 1e6, "MB"),
                    "pieces": (float(layout.num_pieces), "pieces"),
                }, seeds=[0], piece_elems=pe, bandwidth_gbps=gbps, servers=ns.num_servers)
                ctx.progress.update()
    import pandas as pd

    df = pd.DataFrame(rows)
    fig, axes = figure(ncols=len(p.bandwidths_gbps), w=4.4, h=3.4)
    for ax, bw in zip(axes[0], p.bandwidths_gbps, strict=True):
        lines_with_ci(ax, df[df.bandwidth_gbps == bw], "throughput_its", x="piece_elems",
                      xlabel="piece size (elements, log)", ylabel="iterations per simulated second", logx=True)
        ax.set_title(f"{bw:g} Gbps NICs")
    ctx.save_figure(fig, "throughput_vs_piece_size")
    return rows


__all__ = ["compute_model", "des_layout", "exchange_for", "net_spec", "plateaued", "protocol_spec", "ratio_gbps",
           "sweep_score", "tta_metrics", "train_and_time"]
