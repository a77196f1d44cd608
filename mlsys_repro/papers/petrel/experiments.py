"""Petrel experiments: time-to-accuracy and PS traffic of CASP vs BSP/ASP/SSP/DSSP on simulated heterogeneous
PS clusters with real MNIST training; sweeps over heterogeneity and worker count; community ablation; A3C training.

Every experiment returns long-format rows (``mlsys_repro.common.repro.results``). Per run: ``time_to_target_s``
(simulated wall-clock seconds until the test accuracy reaches ``params.target_accuracy``; the horizon if never),
``ps_traffic_mb`` (the PS tier: push + pull bytes through the PS NIC until then), ``leader_traffic_mb`` (the leader
tier: member <-> community-leader bytes), ``wire_traffic_mb`` (every message once = PS + leader tier),
``worker_nic_traffic_mb`` (bytes through worker NICs),
``gradients_to_target``, ``reached_target``, ``final_accuracy``, ``mean_staleness``, ``idle_fraction``.
Two derived pseudo-policies per seed and condition summarise the non-community mechanisms (every policy whose
kind is not ``casp``): ``best_noncommunity`` (the fastest one; its time, traffic and whether it reached the
target) and ``mean_noncommunity`` (their mean time and mean traffic; reached only if every one of them did), so a
time-to-target claim against them can be checked for censoring.

With ``params.fixed_k``, every condition first runs CASP with k-means communities for each fixed k on disjoint
tuning seeds (``tuning_casp_k<k>``); the reported seeds then run CASP at the k with the least mean time on that
condition's tuning seeds (``casp_k<k>``, repeated as ``casp_best_k``; ``best_k`` says which) and, on a sweep of
several conditions, at the one k with the least mean time over every condition's tuning seeds (``casp_const_k``;
``const_k`` says which). The other fixed k never run on the reported seeds: nothing reads them.
A3C policies carry two 0/1 gate metrics per run, judged per agent (the run's seed's, with per-seed agents):
``arms_differ`` (the agent's greedy decisions over all runs of the experiment at that worker count take >= 2 values
of k) and ``converged`` (:func:`mlsys_repro.papers.petrel.a3c.greedy_summary` of its training's
greedy evaluation curve).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from mlsys_repro.common.repro import RunContext, metric_rows
from mlsys_repro.common.repro.plots import bars_with_ci, figure, lines_with_ci
from mlsys_repro.papers.petrel.a3c import arms_differ, greedy_summary, learning_summary
from mlsys_repro.papers.petrel.data import task_for
from mlsys_repro.papers.petrel.pipeline import RunResult, agents_for, condition_hardware, run_jobs
from mlsys_repro.papers.petrel.schemas import PetrelParams, SyncPolicy

MB = 1e6
BASE_METRICS = {
    "time_to_target_s": ("time_to_target_s", 1.0, "s"),
    "ps_traffic_mb": ("ps_bytes_to_target", 1 / MB, "MB"),
    "wire_traffic_mb": ("wire_bytes_to_target", 1 / MB, "MB"),
    "leader_traffic_mb": ("leader_bytes_to_target", 1 / MB, "MB"),
    "worker_nic_traffic_mb": ("worker_nic_bytes_to_target", 1 / MB, "MB"),
    "gradients_to_target": ("gradients_to_target", 1.0, "count"),
    "reached_target": ("reached_target", 1.0, "fraction"),
    "final_accuracy": ("final_accuracy", 1.0, "fraction"),
    "mean_staleness": ("mean_staleness", 1.0, "updates"),
    "idle_fraction": ("idle_fraction", 1.0, "fraction"),
}
DERIVED = {"best_noncommunity", "mean_noncommunity"}


def _agents(ctx: RunContext, task) -> dict[str, Any]:
    """The trained agents (an :class:`~mlsys_repro.papers.petrel.a3c.AgentSet`) of every A3C policy, for the
    experiment's seeds."""
    out = {}
    for name, pol in ctx.policies.items():
        if pol.kind == "casp" and pol.grouping == "a3c":
            out[name] = agents_for(ctx, pol, task, [int(s) for s in ctx.seeds()])
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


def _fixed_k_policies(ctx: RunContext, n: int) -> dict[str, SyncPolicy]:
    """CASP with k-means communities for each candidate k <= n (decision interval as the A3C policy's)."""
    every = next((p.decision_every_steps for p in ctx.policies.values() if p.kind == "casp" and p.grouping == "a3c"),
                 100.0)
    return {f"casp_k{k}": SyncPolicy(name=f"casp_k{k}", kind="casp", grouping="kmeans", num_communities=int(k),
                                     decision_every_steps=every)
            for k in sorted(set(ctx.params.fixed_k)) if k <= n}


def pick_best_k(tuning: Sequence[RunResult]) -> int:
    """The k whose mean time to target over the tuning runs is least (ties: the smaller k)."""
    times: dict[int, list[float]] = {}
    for r in tuning:
        times.setdefault(int(r.policy.rsplit("_k", 1)[1]), []).append(r.metrics["time_to_target_s"])
    return min(times, key=lambda k: (float(np.mean(times[k])), k))


def _tuning_runs(ctx: RunContext, task, hw, agents, note: str) -> list[RunResult]:
    """CASP with k-means communities at every fixed k <= N on the tuning seeds of one hardware condition."""
    p: PetrelParams = ctx.params
    fixed = _fixed_k_policies(ctx, hw.num_workers) if p.fixed_k else {}
    tune_seeds = [p.tuning_seed_offset + i for i in range(p.tuning_seeds)]
    jobs = [(f"tuning_{name}", pol, s) for name, pol in fixed.items() for s in tune_seeds]
    if not jobs:
        return []
    return run_jobs(task, hw, jobs, p, agents, progress=lambda sim: ctx.progress.update(note=f"{note} {sim.label}"))


def _reported_ks(ctx: RunContext, hw, tuning: Sequence[RunResult], const_k: int | None) -> list[int]:
    """The fixed k the reported seeds run on one condition: the condition's best on its tuning runs, and
    ``const_k`` (when given and <= N)."""
    if not tuning:
        return []
    ks = {pick_best_k(tuning)}
    if const_k is not None and f"casp_k{const_k}" in _fixed_k_policies(ctx, hw.num_workers):
        ks.add(int(const_k))
    return sorted(ks)


def _condition(ctx: RunContext, task, hw, agents, note: str, tuning: Sequence[RunResult] = (),
               const_k: int | None = None, **cond: Any):
    """Rows of every policy on one hardware condition and of CASP at the fixed k picked on ``tuning`` (that
    condition's tuning runs, whose rows are included) and at ``const_k``; the runs; and the A3C decisions."""
    p: PetrelParams = ctx.params
    seeds = [int(s) for s in ctx.seeds()]
    jobs = [(name, pol, s) for name, pol in ctx.policies.items() for s in seeds]
    fixed = _fixed_k_policies(ctx, hw.num_workers) if p.fixed_k else {}
    jobs += [(f"casp_k{k}", fixed[f"casp_k{k}"], s) for k in _reported_ks(ctx, hw, tuning, const_k) for s in seeds]
    res = run_jobs(task, hw, jobs, p, agents, progress=lambda sim: ctx.progress.update(note=f"{note} {sim.label}"))
    rows = _rows([*res, *tuning], **cond)
    if tuning:
        best = pick_best_k(tuning)
        for r in res:
            if r.policy == f"casp_k{best}":
                rows += _rows([RunResult("casp_best_k", r.seed, r.metrics, r.curve, r.decisions)], **cond)
                rows += metric_rows("casp_best_k", {"best_k": (float(best), "count")}, seeds=[r.seed], **cond)
    decisions = [(r.policy, r.seed, cond, [k for _, k in r.decisions]) for r in res if r.policy in agents]
    return rows, [*res, *tuning], decisions


def _gate_rows(agents, decisions) -> list[dict[str, Any]]:
    """``arms_differ`` and ``converged`` rows for each A3C policy and run, both judged per agent: with per-seed
    agents, the run's seed's agent; with one shared agent, that agent for every seed. ``arms_differ``: the agent's
    greedy decisions over every run of the experiment at the run's worker count take >= 2 values of k (one action
    level means different k at different N); ``converged``: the gate of that agent's training
    (:func:`~mlsys_repro.papers.petrel.a3c.greedy_summary`). A claim's cell then counts the share of its runs (seeds)
    whose agent passes (``gates.cell_valid``)."""
    rows: list[dict[str, Any]] = []
    for name, aset in agents.items():
        mine = [d for d in decisions if d[0] == name]
        per_seed = aset.shared is None

        def key(seed: int, cond: dict[str, Any]) -> tuple:
            return (seed if per_seed else None, cond.get("num_workers"))

        chosen: dict[tuple, list[list[int]]] = {}
        for _, seed, cond, ks in mine:
            chosen.setdefault(key(seed, cond), []).append(ks)
        conv: dict[int, float] = {}
        for _, seed, cond, _ in mine:
            if seed not in conv:
                agent = aset.for_seed(seed)
                conv[seed] = greedy_summary(agent.log, len(agent.conditions))["converged"]
            differ = arms_differ(chosen[key(seed, cond)])
            rows += metric_rows(name, {"arms_differ": (differ, "flag"), "converged": (conv[seed], "flag")},
                                seeds=[seed], **cond)
    return rows


def _sweep(ctx: RunContext, column: str, values: Sequence[Any], hw_for) -> list[dict[str, Any]]:
    return _sweep_conds(ctx, [{column: v} for v in values], lambda c: hw_for(c[column]))


def _sweep_conds(ctx: RunContext, conds: Sequence[dict[str, Any]], hw_for) -> list[dict[str, Any]]:
    """Every policy (and the fixed-k baseline) on each condition (a dict of column -> value; ``hw_for(cond)`` gives
    its hardware); a ``link_gbps`` condition also records its ``comm_ratio``."""
    task = task_for(ctx)
    agents = _agents(ctx, task)
    p: PetrelParams = ctx.params
    hws = [hw_for(c) for c in conds]
    notes = [" ".join(f"{k}={v}" for k, v in c.items()) for c in conds]
    ctx.progress.start(sum(len(_fixed_k_policies(ctx, hw.num_workers)) for hw in hws) * p.tuning_seeds
                       if p.fixed_k else 0, "tuning runs")
    tuning = [_tuning_runs(ctx, task, hw, agents, note) for hw, note in zip(hws, notes, strict=True)]
    all_tuning = [r for t in tuning for r in t]
    const_k = pick_constant_k(_rows(all_tuning)) if p.fixed_k and len(conds) > 1 else None
    ctx.progress.start(sum(len(ctx.policies) + len(_reported_ks(ctx, hw, t, const_k))
                           for hw, t in zip(hws, tuning, strict=True)) * ctx.num_seeds, "runs")
    rows: list[dict[str, Any]] = []
    decisions: list = []
    for c, hw, note, t in zip(conds, hws, notes, tuning, strict=True):
        cond = dict(c)
        if "link_gbps" in cond:
            cond["comm_ratio"] = round(comm_compute_ratio(hw, task, p), 4)
        r, _, d = _condition(ctx, task, hw, agents, note, t, const_k, **cond)
        rows += r
        decisions += d
    rows += _derived(rows, ctx, list(conds[0]))
    rows += _gate_rows(agents, decisions)
    if p.fixed_k and len(conds) > 1:
        rows += _constant_k_rows(rows)
    return rows


def pick_constant_k(rows: Sequence[dict[str, Any]]) -> int:
    """The one k, the same in every condition, whose mean time to target over all conditions' tuning runs
    (``tuning_casp_k<k>`` rows) is least (ties: the smaller k)."""
    times: dict[int, list[float]] = {}
    for r in rows:
        if r["policy"].startswith("tuning_casp_k") and r["metric"] == "time_to_target_s":
            times.setdefault(int(r["policy"].rsplit("_k", 1)[1]), []).append(float(r["value"]))
    if not times:
        raise ValueError("no tuning_casp_k<k> time_to_target_s rows to pick a constant k from")
    return min(times, key=lambda k: (float(np.mean(times[k])), k))


def _constant_k_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """``casp_const_k``: the rows of CASP with the one fixed k picked on the tuning seeds over every condition
    (:func:`pick_constant_k`), the control that an online k must beat where conditions differ; ``const_k`` says
    which k."""
    k = pick_constant_k(rows)
    out = [{**r, "policy": "casp_const_k"} for r in rows if r["policy"] == f"casp_k{k}"]
    firsts = {}
    for r in out:
        firsts.setdefault(int(r["seed"]), r)
    out += [{**r, "metric": "const_k", "value": float(k), "unit": "count"} for r in firsts.values()]
    return out


def comm_compute_ratio(hw, task, params: PetrelParams) -> float:
    """One message's transfer time over a worker link / the fastest class's iteration at the per-worker batch."""
    nbytes = (hw.payload_bytes or 4 * task.num_params) + hw.header_bytes
    gbps = min(hw.ps_bandwidth_gbps, hw.worker_bandwidth_gbps)
    step = hw.base_step_s * params.batch_per_worker(hw.num_workers) / hw.base_batch / max(hw.class_speeds)
    return nbytes * 8 / (gbps * 1e9) / step


def _sweep_figure(ctx: RunContext, rows: list[dict[str, Any]], column: str, xlabel: str, logx: bool) -> None:
    df = _plotted(rows)
    fig, axes = figure(ncols=2)
    lines_with_ci(axes[0, 0], df, "time_to_target_s", column, xlabel=xlabel,
                  ylabel="time to target accuracy (simulated wall-clock s)", logx=logx)
    lines_with_ci(axes[0, 1], df, "ps_traffic_mb", column, xlabel=xlabel, ylabel="PS traffic to target (MB)",
                  logx=logx)
    ctx.save_figure(fig, "time_and_traffic")


def heterogeneity(ctx: RunContext):
    """Time to target accuracy and PS traffic vs heterogeneity (slowest/fastest speed class ratio), for each
    number of parameter servers in ``params.ps_shards`` (a ``ps_shards`` column; none: the hardware's)."""
    p: PetrelParams = ctx.params
    ratios = [float(r) for r in (p.speed_ratios or [ctx.hardware.class_speeds[0] / ctx.hardware.class_speeds[-1]])]
    shards = [int(s) for s in p.ps_shards]
    if not shards:
        rows = _sweep(ctx, "speed_ratio", ratios, lambda r: condition_hardware(ctx.hardware, ratio=r))
        _sweep_figure(ctx, rows, "speed_ratio", "speed ratio fastest/slowest class", logx=True)
        return rows
    conds = [{"ps_shards": s, "speed_ratio": r} for s in shards for r in ratios]
    rows = _sweep_conds(ctx, conds, lambda c: condition_hardware(ctx.hardware, ratio=c["speed_ratio"],
                                                                  ps_shards=c["ps_shards"]))
    df = _plotted(rows)
    fig, axes = figure(nrows=2, ncols=len(shards))
    for j, s in enumerate(shards):
        sub = df[df["ps_shards"] == s]
        lines_with_ci(axes[0, j], sub, "time_to_target_s", "speed_ratio", xlabel="speed ratio fastest/slowest class",
                      ylabel="time to target accuracy (simulated s)", logx=True)
        lines_with_ci(axes[1, j], sub, "wire_traffic_mb", "speed_ratio", xlabel="speed ratio fastest/slowest class",
                      ylabel="traffic on every link to target (MB)", logx=True)
        axes[0, j].set_title(f"{s} parameter server{'s' if s > 1 else ''}")
    ctx.save_figure(fig, "time_and_traffic")
    return rows


def _plotted(rows: Sequence[dict[str, Any]]) -> pd.DataFrame:
    """The rows a sweep figure draws: no derived, tuning or per-k rows."""
    df = pd.DataFrame(rows)
    return df[~df["policy"].isin(DERIVED) & ~df["policy"].str.startswith("tuning_")
              & ~df["policy"].str.startswith("casp_k") & (df["policy"] != "casp_const_k")]


def scalability(ctx: RunContext):
    """Time to target accuracy and PS traffic vs number of simulated workers."""
    counts = ctx.params.worker_counts or [ctx.hardware.num_workers]
    ratio = ctx.params.speed_ratios[0] if ctx.params.speed_ratios else None
    rows = _sweep(ctx, "num_workers", [int(n) for n in counts],
                  lambda n: condition_hardware(ctx.hardware, ratio=ratio, workers=n))
    _sweep_figure(ctx, rows, "num_workers", "simulated workers", logx=True)
    return rows


def comm_ratio(ctx: RunContext):
    """Claim boundary: time to target and traffic vs the communication-to-compute ratio (every NIC's rate swept;
    ``comm_ratio`` = one message's transfer time / the fastest worker's iteration time) and heterogeneity (every
    speed ratio in ``params.speed_ratios`` at every rate)."""
    p: PetrelParams = ctx.params
    rates = [float(g) for g in (p.link_gbps or [ctx.hardware.ps_bandwidth_gbps])]
    ratios = [float(r) for r in p.speed_ratios] or [None]
    workers = p.worker_counts[0] if p.worker_counts else None
    conds = [({"speed_ratio": r} if r is not None else {}) | {"link_gbps": g} for r in ratios for g in rates]
    rows = _sweep_conds(ctx, conds, lambda c: condition_hardware(ctx.hardware, ratio=c.get("speed_ratio"),
                                                                  workers=workers, link_gbps=c["link_gbps"]))
    df = pd.DataFrame(rows)
    df = df[df["policy"].isin(["casp", "casp_best_k", "casp_const_k", "best_noncommunity"])]
    fig, axes = figure(ncols=len(ratios))
    for ax, r in zip(axes[0], ratios, strict=True):
        sub = df if r is None else df[df["speed_ratio"] == r]
        lines_with_ci(ax, sub, "time_to_target_s", "link_gbps", xlabel="link rate of every NIC (Gb/s)",
                      ylabel="time to target accuracy (simulated wall-clock s)", logx=True)
        if r is not None:
            ax.set_title(f"speed ratio {r:g}x")
    ctx.save_figure(fig, "boundary")
    return rows


def _single(ctx: RunContext, curves: bool) -> tuple[list[dict[str, Any]], list[RunResult]]:
    p: PetrelParams = ctx.params
    task = task_for(ctx)
    agents = _agents(ctx, task)
    hw = condition_hardware(ctx.hardware, ratio=p.speed_ratios[0] if p.speed_ratios else None,
                            workers=p.worker_counts[0] if p.worker_counts else None,
                            link_gbps=p.link_gbps[0] if p.link_gbps else None)
    ctx.progress.start(len(_fixed_k_policies(ctx, hw.num_workers)) * p.tuning_seeds if p.fixed_k else 0,
                       "tuning runs")
    tuning = _tuning_runs(ctx, task, hw, agents, "")
    ctx.progress.start((len(ctx.policies) + len(_reported_ks(ctx, hw, tuning, None))) * ctx.num_seeds, "runs")
    rows, res, decisions = _condition(ctx, task, hw, agents, "", tuning)
    rows += _derived(rows, ctx, [])
    rows += _gate_rows(agents, decisions)
    res = [r for r in res if r.policy in ctx.policies]
    if curves:
        rows += _curve_rows(res)
    return rows, res


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


def ablation(ctx: RunContext):
    """CASP with A3C-chosen communities vs fixed (non-learned) communities: k-means with fixed k, prior
    (speed classes, never re-formed) and random assignment; with ``params.permute_at_steps``, once per time at
    which the workers' speed classes are permuted (a ``permute_at_steps`` column, 0 = never: a stationary
    cluster), where any partition fixed at the start groups mismatched speeds afterwards."""
    p: PetrelParams = ctx.params
    if not p.permute_at_steps:
        rows, _ = _single(ctx, curves=False)
        times = [None]
    else:
        times = [float(t) for t in p.permute_at_steps]
        rows = _sweep_conds(ctx, [{"permute_at_steps": t} for t in times], lambda c: condition_hardware(
            ctx.hardware, ratio=p.speed_ratios[0] if p.speed_ratios else None,
            workers=p.worker_counts[0] if p.worker_counts else None, permute_at_steps=c["permute_at_steps"]))
    df = pd.DataFrame(rows)
    df = df[~df["policy"].isin(DERIVED) & ~df["policy"].str.startswith("tuning_")]
    fig, axes = figure(nrows=len(times), ncols=2)
    for i, t in enumerate(times):
        sub = df if t is None else df[df["permute_at_steps"] == t]
        bars_with_ci(axes[i, 0], sub, "time_to_target_s", ylabel="time to target (simulated wall-clock s)")
        bars_with_ci(axes[i, 1], sub, "wire_traffic_mb", ylabel="traffic on every link to target (MB)")
        if t is not None:
            axes[i, 0].set_title("stationary speeds" if t == 0 else f"speed classes permuted at step {t:g}")
    ctx.save_figure(fig, "bars")
    return rows


def greedy_rows(name: str, seed: int, agent) -> list[dict[str, Any]]:
    """The greedy evaluation curve of one trained agent (``greedy_return``, ``greedy_mean_k`` per ``chunk`` point and
    condition) and its gate rows (``improved``, ``plateaued``, ``converged`` from that curve; ``sampled_*`` from the
    sampled training returns, informational; ``complete_chunks``, ``shared_updates``)."""
    log = agent.log
    rows: list[dict[str, Any]] = []
    for p, c, r, k in zip(log.greedy_chunk, log.greedy_condition, log.greedy_ret, log.greedy_k, strict=True):
        n, ratio, gbps = agent.conditions[int(c)]
        rows += metric_rows(name, {"greedy_return": (r, "reward"), "greedy_mean_k": (k, "count")}, seeds=[seed],
                            chunk=int(p), num_workers=n, speed_ratio=ratio, link_gbps=gbps)
    summ = greedy_summary(log, len(agent.conditions))
    sampled = learning_summary(log, len(agent.conditions))
    rows += metric_rows(name, {"improved": (summ["improved"], "flag"), "plateaued": (summ["plateaued"], "flag"),
                               "converged": (summ["converged"], "flag"),
                               "sampled_improved": (sampled["improved"], "flag"),
                               "sampled_plateaued": (sampled["plateaued"], "flag"),
                               "sampled_converged": (sampled["converged"], "flag"),
                               "complete_chunks": (summ["chunks"], "count"),
                               "shared_updates": (log.updates, "count")}, seeds=[seed])
    return rows


def a3c_training(ctx: RunContext):
    """Learning curve of the A3C community agent: ``curve_episode_return`` and ``curve_episode_mean_k`` per episode
    (``episode`` column), ``curve_chunk_return`` per chunk (one pass over every training condition; ``episode`` =
    episodes done at its end), the greedy evaluation curve ``greedy_return`` and ``greedy_mean_k`` per evaluation
    point (``chunk`` column, -1 = before any update) and condition (``num_workers``, ``speed_ratio``, ``link_gbps``),
    the gate metrics ``improved``, ``plateaued`` and ``converged`` read from that greedy curve
    (:func:`~mlsys_repro.papers.petrel.a3c.greedy_summary`), and the same three read from the sampled training returns
    (``sampled_improved``, ``sampled_plateaued``, ``sampled_converged``: informational,
    :func:`~mlsys_repro.papers.petrel.a3c.learning_summary`); with per-seed agents (``a3c.per_seed``) once per
    agent, its ``seed`` column the evaluation seed it serves."""
    task = task_for(ctx)
    agents = _agents(ctx, task)
    if not agents:
        raise ValueError("a3c_training needs a casp policy with grouping 'a3c'")
    rows: list[dict[str, Any]] = []
    fig, axes = figure(ncols=2)
    trained = [(name, ev, agent) for name, aset in agents.items() for ev, agent in aset.items()]
    for name, eval_seed, agent in trained:
        seed = int(ctx.seed) if eval_seed is None else int(eval_seed)
        label = name if eval_seed is None else f"{name} (seed {seed})"
        one = len(trained) == 1 or eval_seed == min(ev for _, ev, _ in trained)  # per-episode dots: one agent's
        log = agent.log
        order = np.argsort(log.episode)
        cols = {k: np.asarray(getattr(log, k))[order] for k in ("episode", "ret", "mean_k", "condition", "chunk",
                                                                "actor")}
        for e, r, k, c, ch, a in zip(*(cols[x] for x in ("episode", "ret", "mean_k", "condition", "chunk", "actor")),
                                     strict=True):
            n, ratio, gbps = agent.conditions[int(c)]
            rows += metric_rows(name, {"curve_episode_return": (r, "reward"), "curve_episode_mean_k": (k, "count")},
                                seeds=[seed], episode=int(e), chunk=int(ch), actor=int(a), num_workers=n,
                                speed_ratio=ratio, link_gbps=gbps)
        chunks = np.unique(cols["chunk"])
        means = [float(cols["ret"][cols["chunk"] == c].mean()) for c in chunks]
        for c, m in zip(chunks, means, strict=True):
            rows += metric_rows(name, {"curve_chunk_return": (m, "reward")}, seeds=[seed], chunk=int(c),
                                episode=int((c + 1) * len(agent.conditions)))
        rows += greedy_rows(name, seed, agent)
        if one:
            axes[0, 0].plot(cols["episode"], cols["ret"], ".", alpha=0.3, label=f"{label} episodes")
        axes[0, 0].plot((chunks + 0.5) * len(agent.conditions), means, "-o", ms=3, lw=1, label=f"{label} chunk mean")
        axes[0, 1].plot(cols["episode"], cols["mean_k"], ".", alpha=0.4 if one else 0.15, label=label)
        if log.greedy_ret:  # the greedy curve (the gate's): mean over evaluation conditions at each point
            pts = sorted(set(log.greedy_chunk))
            g = [float(np.mean([r for p, r in zip(log.greedy_chunk, log.greedy_ret, strict=True) if p == q]))
                 for q in pts]
            axes[0, 0].plot([(q + 1) * len(agent.conditions) for q in pts], g, "--s", ms=3, lw=1,
                            label=f"{label} greedy")
    axes[0, 0].set_xlabel("episode")
    axes[0, 0].set_ylabel("episode return (probe log-loss decrease rate)")
    axes[0, 1].set_xlabel("episode")
    axes[0, 1].set_ylabel("mean communities chosen (k)")
    for ax in axes[0]:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    ctx.save_figure(fig, "curve")
    return rows
