"""Petrel experiments: time-to-accuracy and PS traffic of CASP vs BSP/ASP/SSP/DSSP on simulated heterogeneous
PS clusters with real MNIST training; sweeps over heterogeneity and worker count; community ablation; A3C training.

Every experiment returns long-format rows (``common.repro.results``). Per run: ``time_to_target_s`` (simulated
wall-clock seconds until the test accuracy reaches ``params.target_accuracy``; the horizon if never),
``ps_traffic_mb`` (push + pull bytes through the PS NIC until then), ``wire_traffic_mb`` (every link),
``gradients_to_target``, ``reached_target``, ``final_accuracy``, ``mean_staleness``, ``idle_fraction``.
Two derived pseudo-policies per seed and condition summarise the non-community mechanisms (every policy whose
kind is not ``casp``): ``best_noncommunity`` (the fastest one; its time, traffic and whether it reached the
target) and ``mean_noncommunity`` (their mean time and mean traffic; reached only if every one of them did), so a
time-to-target claim against them can be checked for censoring.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from common.repro import RunContext, experiment, metric_rows
from common.repro.plots import bars_with_ci, figure, lines_with_ci
from papers.petrel.runner import RunResult, agent_for, condition_hardware, run_policies, task_for
from papers.petrel.schemas import PetrelParams

MB = 1e6
BASE_METRICS = {
    "time_to_target_s": ("time_to_target_s", 1.0, "s"),
    "ps_traffic_mb": ("ps_bytes_to_target", 1 / MB, "MB"),
    "wire_traffic_mb": ("wire_bytes_to_target", 1 / MB, "MB"),
    "gradients_to_target": ("gradients_to_target", 1.0, "count"),
    "reached_target": ("reached_target", 1.0, "fraction"),
    "final_accuracy": ("final_accuracy", 1.0, "fraction"),
    "mean_staleness": ("mean_staleness", 1.0, "updates"),
    "idle_fraction": ("idle_fraction", 1.0, "fraction"),
}
DERIVED = {"best_noncommunity", "mean_noncommunity"}


def _agents(ctx: RunContext, task) -> dict[str, Any]:
    out = {}
    for name, pol in ctx.policies.items():
        if pol.kind == "casp" and pol.grouping == "a3c":
            out[name] = agent_for(pol, ctx.hardware, ctx.params, task, log=ctx.progress.log)
    return out


def _rows(results: Sequence[RunResult], **cond: Any) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    for r in results:
        metrics = {m: (r.metrics[src] * scale, unit) for m, (src, scale, unit) in BASE_METRICS.items()}
        if r.decisions:
            metrics["mean_communities"] = (float(np.mean([k for _, k in r.decisions])), "count")
        rows += metric_rows(r.policy, metrics, seeds=[r.seed], **cond)
    return rows


def _derived(rows: list[dict[str, Any]], ctx: RunContext, cond_cols: Sequence[str]) -> list[dict[str, Any]]:
    """best_noncommunity / mean_noncommunity rows per seed and condition."""
    base = [n for n, p in ctx.policies.items() if p.kind != "casp"]
    if not base:
        return []
    df = pd.DataFrame(rows)
    df = df[df["policy"].isin(base) & df["metric"].isin(["time_to_target_s", "ps_traffic_mb", "wire_traffic_mb",
                                                         "reached_target"])]
    keys = ["seed", *cond_cols]
    wide = df.pivot_table(index=[*keys, "policy"], columns="metric", values="value").reset_index()
    out: list[dict[str, Any]] = []
    for k, g in wide.groupby(keys):
        cond = dict(zip(keys, k if isinstance(k, tuple) else (k,), strict=True))
        seed = int(cond.pop("seed"))
        best = g.loc[g["time_to_target_s"].idxmin()]
        mean = g.mean(numeric_only=True)
        mean["reached_target"] = g["reached_target"].min()
        for name, vals in (("best_noncommunity", best), ("mean_noncommunity", mean)):
            out += metric_rows(name, {"time_to_target_s": (vals["time_to_target_s"], "s"),
                                      "ps_traffic_mb": (vals["ps_traffic_mb"], "MB"),
                                      "wire_traffic_mb": (vals["wire_traffic_mb"], "MB"),
                                      "reached_target": (vals["reached_target"], "fraction")}, seeds=[seed],
                               **cond)
    return out


def _curve_rows(results: Sequence[RunResult]) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        for t, acc, loss, _ in r.curve:
            rows.append({"policy": r.policy, "seed": r.seed, "metric": "curve_test_accuracy", "value": acc,
                         "unit": "fraction", "sim_time_s": t})
            rows.append({"policy": r.policy, "seed": r.seed, "metric": "curve_test_loss", "value": loss,
                         "unit": "nats", "sim_time_s": t})
    return rows


def _sweep(ctx: RunContext, column: str, values: Sequence[Any], hw_for) -> list[dict[str, Any]]:
    task = task_for(ctx.params, ctx.data_dir)
    agents = _agents(ctx, task)
    seeds = ctx.seeds()
    ctx.progress.start(len(values) * len(ctx.policies) * len(seeds), "runs")
    rows: list[dict[str, Any]] = []
    for v in values:
        res = run_policies(task, hw_for(v), ctx.policies, seeds, ctx.params, agents,
                           progress=lambda s, v=v: ctx.progress.update(note=f"{column}={v} {s.label}"))
        rows += _rows(res, **{column: v})
    rows += _derived(rows, ctx, [column])
    return rows


def _sweep_figure(ctx: RunContext, rows: list[dict[str, Any]], column: str, xlabel: str, logx: bool) -> None:
    df = pd.DataFrame(rows)
    df = df[~df["policy"].isin(DERIVED)]
    fig, axes = figure(ncols=2)
    lines_with_ci(axes[0, 0], df, "time_to_target_s", column, xlabel=xlabel,
                  ylabel="time to target accuracy (simulated wall-clock s)", logx=logx)
    lines_with_ci(axes[0, 1], df, "ps_traffic_mb", column, xlabel=xlabel, ylabel="PS traffic to target (MB)",
                  logx=logx)
    ctx.save_figure(fig, "time_and_traffic")


@experiment("petrel", "heterogeneity", params=PetrelParams)
def heterogeneity(ctx: RunContext):
    """Time to target accuracy and PS traffic vs heterogeneity (slowest/fastest speed class ratio)."""
    ratios = ctx.params.speed_ratios or [ctx.hardware.class_speeds[0] / ctx.hardware.class_speeds[-1]]
    rows = _sweep(ctx, "speed_ratio", [float(r) for r in ratios],
                  lambda r: condition_hardware(ctx.hardware, ratio=r))
    _sweep_figure(ctx, rows, "speed_ratio", "speed ratio fastest/slowest class", logx=True)
    return rows


@experiment("petrel", "scalability", params=PetrelParams)
def scalability(ctx: RunContext):
    """Time to target accuracy and PS traffic vs number of simulated workers."""
    counts = ctx.params.worker_counts or [ctx.hardware.num_workers]
    ratio = ctx.params.speed_ratios[0] if ctx.params.speed_ratios else None
    rows = _sweep(ctx, "num_workers", [int(n) for n in counts],
                  lambda n: condition_hardware(ctx.hardware, ratio=ratio, workers=n))
    _sweep_figure(ctx, rows, "num_workers", "simulated workers", logx=True)
    return rows


def _single(ctx: RunContext, curves: bool) -> tuple[list[dict[str, Any]], list[RunResult]]:
    p: PetrelParams = ctx.params
    task = task_for(p, ctx.data_dir)
    agents = _agents(ctx, task)
    hw = condition_hardware(ctx.hardware, ratio=p.speed_ratios[0] if p.speed_ratios else None,
                            workers=p.worker_counts[0] if p.worker_counts else None)
    ctx.progress.start(len(ctx.policies) * ctx.num_seeds, "runs")
    res = run_policies(task, hw, ctx.policies, ctx.seeds(), p, agents,
                       progress=lambda s: ctx.progress.update(note=s.label))
    rows = _rows(res)
    rows += _derived(rows, ctx, [])
    if curves:
        rows += _curve_rows(res)
    return rows, res


@experiment("petrel", "headline", params=PetrelParams)
def headline(ctx: RunContext):
    """All mechanisms on the Gavel-profiled V100/P100/K80 cluster: time, traffic and accuracy-vs-time curves."""
    rows, res = _single(ctx, curves=True)
    df = pd.DataFrame(rows)
    df = df[~df["policy"].isin(DERIVED)]
    fig, axes = figure(ncols=2)
    bars_with_ci(axes[0, 0], df, "time_to_target_s", ylabel="time to target (simulated wall-clock s)")
    bars_with_ci(axes[0, 1], df, "ps_traffic_mb", ylabel="PS traffic to target (MB)")
    ctx.save_figure(fig, "bars")
    fig, axes = figure(ncols=2)
    colors = {n: f"C{i}" for i, n in enumerate(ctx.policies)}
    for r in res:
        t = [c[0] for c in r.curve]
        lab = r.policy if r.seed == int(ctx.seeds()[0]) else None
        axes[0, 0].plot(t, [c[1] for c in r.curve], color=colors[r.policy], alpha=0.6, lw=1, label=lab)
        axes[0, 1].plot(t, [c[2] for c in r.curve], color=colors[r.policy], alpha=0.6, lw=1, label=lab)
    axes[0, 0].axhline(ctx.params.target_accuracy, color="k", ls=":", lw=1)
    for ax, yl in ((axes[0, 0], "test accuracy"), (axes[0, 1], "test loss")):
        ax.set_xlabel("simulated wall-clock (s)")
        ax.set_ylabel(yl)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    axes[0, 1].set_yscale("log")
    ctx.save_figure(fig, "curves")
    return rows


@experiment("petrel", "ablation", params=PetrelParams)
def ablation(ctx: RunContext):
    """CASP with A3C-chosen communities vs fixed (non-learned) communities: k-means with fixed k, prior
    (speed classes, never re-formed) and random assignment."""
    rows, _ = _single(ctx, curves=False)
    df = pd.DataFrame(rows)
    df = df[~df["policy"].isin(DERIVED)]
    fig, axes = figure(ncols=2)
    bars_with_ci(axes[0, 0], df, "time_to_target_s", ylabel="time to target (simulated wall-clock s)")
    bars_with_ci(axes[0, 1], df, "ps_traffic_mb", ylabel="PS traffic to target (MB)")
    ctx.save_figure(fig, "bars")
    return rows


@experiment("petrel", "a3c_training", params=PetrelParams)
def a3c_training(ctx: RunContext):
    """Training curve of the A3C community agent (asynchronous actor-learner threads)."""
    task = task_for(ctx.params, ctx.data_dir)
    agents = _agents(ctx, task)
    if not agents:
        raise ValueError("a3c_training needs a casp policy with grouping 'a3c'")
    rows: list[dict[str, Any]] = []
    fig, axes = figure(ncols=2)
    for name, agent in agents.items():
        log = agent.log
        order = np.argsort(log.episode)
        eps = np.asarray(log.episode)[order]
        ret = np.asarray(log.ret)[order]
        mk = np.asarray(log.mean_k)[order]
        for e, r, k, a in zip(eps, ret, mk, np.asarray(log.actor)[order], strict=True):
            rows += metric_rows(name, {"episode_return": (r, "reward"), "episode_mean_k": (k, "count")},
                                seeds=[int(ctx.seed)], episode=int(e), actor=int(a))
        rows += metric_rows(name, {"shared_updates": (log.updates, "count")}, seeds=[int(ctx.seed)], episode=-1,
                            actor=-1)
        w = max(1, len(ret) // 8)
        smooth = np.convolve(ret, np.ones(w) / w, mode="valid")
        axes[0, 0].plot(eps, ret, ".", alpha=0.4, label=f"{name} episodes")
        axes[0, 0].plot(eps[w - 1:], smooth, "-", label=f"{name} running mean ({w})")
        axes[0, 1].plot(eps, mk, ".", alpha=0.6, label=name)
    axes[0, 0].set_xlabel("episode")
    axes[0, 0].set_ylabel("episode return")
    axes[0, 1].set_xlabel("episode")
    axes[0, 1].set_ylabel("mean communities chosen (k)")
    for ax in axes[0]:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ctx.save_figure(fig, "curve")
    return rows
