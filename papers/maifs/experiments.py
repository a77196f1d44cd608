"""MAIFS experiments: headline tables on two traces, load sweep, ablations with learning curves.

Seeds pair everything: seed ``s`` is evaluation window ``s`` (the ``s``-th window of the later Philly slice, or
the ``s``-th held-out Saturn file) for every policy, and the training seed of every learned policy evaluated on
it. Heuristics are deterministic given the window. Learned policies are trained once per process on the earlier
Philly slice plus the training Saturn files and evaluated greedily.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from common.repro import RunContext, experiment, metric_rows
from common.repro.plots import bars_with_ci, cdf, figure, lines_with_ci
from common.sim.cluster import SimResult
from papers.maifs import runner
from papers.maifs.schemas import HeuristicPolicy, MaifsParams, RLPolicy

SOTA = ("synergy_tune_fifo", "tiresias")


def _metrics(r: SimResult) -> dict[str, tuple[Any, str]]:
    jct = r.jct / 3600.0
    m = {
        "avg_jct_h": (float(jct.mean()), "h"),
        "p50_jct_h": (float(np.percentile(jct, 50)), "h"),
        "p99_jct_h": (float(np.percentile(jct, 99)), "h"),
        "makespan_h": (r.makespan / 3600.0, "h"),
        "queueing_h": (float(np.mean(r.queueing) / 3600.0), "h"),
        "gpu_util": (r.util["gpu"], "fraction"),
        "cpu_util": (r.util["cpu"], "fraction"),
        "mem_util": (r.util["mem"], "fraction"),
        "preemptions": (float(r.counters["preemptions"]), "count"),
        "finished": (float(r.finished), "bool"),
    }
    if "conflicts" in r.counters:
        tried = r.counters["conflicts"] + r.counters["decisions"]
        m["conflict_rate"] = (r.counters["conflicts"] / max(tried, 1), "fraction")
    return m


def _setup(ctx: RunContext):
    hw = ctx.hardware
    spec = hw.spec(ctx.data_dir)
    d = runner.load_data(ctx.trace.files, ctx.data_dir)
    return spec, spec.arrays(), d


def _run_policies(ctx: RunContext, names: list[str], windows, d, spec, cl, params: MaifsParams,
                  extra: dict | None = None, tag: str = "") -> tuple[list[dict], dict[str, list[SimResult]]]:
    """Rows and raw results of every named policy on the windows (one per seed)."""
    seeds = ctx.seeds()
    rows: list[dict] = []
    results: dict[str, list[SimResult]] = {}
    rl = {n: ctx.policies[n] for n in names if isinstance(ctx.policies[n], RLPolicy)}
    trained = {}
    for family in ("maifs", "flat"):
        group = {n: p for n, p in rl.items() if p.network == family}
        if group:
            allv = _all_variants(ctx, family)
            tr = runner.train_policies(allv, d, params, cl, ctx.hardware.lease_s, seeds, ctx.progress,
                                        checkpoints=ctx.checkpointer)
            trained.update({n: tr for n in group})
    ctx.progress.start(len(names), f"policies{tag}")
    for n in names:
        pol = ctx.policies[n]
        if isinstance(pol, HeuristicPolicy):
            res = runner.run_heuristic(pol.heuristic(), cl, d.profiles, windows, params.jobs_per_window,
                                       ctx.hardware.lease_s, params.lookahead)
        else:
            res = runner.run_trained(trained[n], n, d, cl, windows, params.jobs_per_window)
        results[n] = res
        for s, r in zip(seeds, res, strict=True):
            rows += metric_rows(n, _metrics(r), seeds=[int(s)], **(extra or {}))
        ctx.progress.update(1, n)
    return rows, results


def _all_variants(ctx: RunContext, family: str) -> dict[str, RLPolicy]:
    """Every RL policy of this family known to the experiment (all MAIFS variants train together, so the
    headline, load-sweep and ablation experiments share one training run)."""
    from omegaconf import OmegaConf

    from common.repro.config import policy_node

    out = {}
    for name in ("maifs", "maifs_no_attention", "maifs_no_cg", "maifs_fixed_alloc", "dl2"):
        pol = ctx.policies.get(name)
        if pol is None:
            pol = OmegaConf.to_object(policy_node("maifs", name, ctx.cfg.paths.conf_dir))
        if pol.network == family:
            out[name] = pol
    return out


def _trace_windows(ctx: RunContext, d, spec, p: MaifsParams, rate: float | None = None):
    if ctx.trace.loader == "philly_jobs":
        return runner.philly_eval(d, p, spec.total_gpus, ctx.seeds(), rate)
    if ctx.trace.loader == "sia_workloads":
        return runner.saturn_eval(d, p, spec.total_gpus, ctx.seeds())
    raise ValueError(f"maifs experiments need a philly_jobs or sia_workloads trace, got {ctx.trace.loader!r}")


def _filter_rows(dropped: dict[str, int]) -> list[dict]:
    """Counted filters as rows (policy '-') so every dropped job is reported next to the results."""
    return [{"policy": "-", "seed": 0, "metric": f"dropped[{k}]", "value": float(v), "unit": "jobs"}
            for k, v in sorted(dropped.items())]


def _headline(ctx: RunContext) -> pd.DataFrame:
    p: MaifsParams = ctx.params
    spec, cl, d = _setup(ctx)
    windows, dropped = _trace_windows(ctx, d, spec, p)
    names = list(ctx.policies)
    rows, results = _run_policies(ctx, names, windows, d, spec, cl, p)
    df = pd.DataFrame(rows + _filter_rows({**d.dropped, **dropped}))
    fig, ax = figure(1, 1, w=6.5)
    shown = [n for n in ("fifo", "tiresias", "synergy_tune_fifo", "synergy_tune_srtf", "dl2", "maifs")
             if n in results]
    cdf(ax[0, 0], {n: np.concatenate([r.jct for r in results[n]]) / 3600.0 for n in shown}, "JCT (h)")
    ax[0, 0].set_title(f"JCT CDF, {ctx.trace.name} ({len(windows)} windows)")
    ctx.save_figure(fig, "jct_cdf")
    fig, ax = figure(2, 1, w=6.0)
    pol_rows = df[df["policy"] != "-"]
    bars_with_ci(ax[0, 0], pol_rows, "makespan_h", ylabel="makespan (h)")
    bars_with_ci(ax[0, 1], pol_rows, "avg_jct_h", ylabel="average JCT (h)")
    ctx.save_figure(fig, "bars")
    return df


@experiment("maifs", "headline_philly", params=MaifsParams)
def headline_philly(ctx: RunContext) -> pd.DataFrame:
    """Makespan and JCT of every scheduler on unseen windows of the later Philly slice (Nov-Dec 2017)."""
    return _headline(ctx)


@experiment("maifs", "headline_saturn", params=MaifsParams)
def headline_saturn(ctx: RunContext) -> pd.DataFrame:
    """Makespan and JCT of every scheduler on held-out Helios-Saturn workloads."""
    return _headline(ctx)


@experiment("maifs", "load_sweep", params=MaifsParams)
def load_sweep(ctx: RunContext) -> pd.DataFrame:
    """Arrival-rate scaling of the Philly evaluation windows (jobs/h); the learned policy is trained once at the
    base rate and evaluated at every rate."""
    p: MaifsParams = ctx.params
    spec, cl, d = _setup(ctx)
    rows: list[dict] = []
    dropped: dict[str, int] = {}
    for rate in p.rates:
        windows, dr = runner.philly_eval(d, p, spec.total_gpus, ctx.seeds(), rate)
        dropped.update(dr)
        r, _ = _run_policies(ctx, list(ctx.policies), windows, d, spec, cl, p,
                             extra={"rate_jobs_per_h": float(rate)}, tag=f" @ {rate:g} jobs/h")
        rows += r
    df = pd.DataFrame(rows)
    fig, ax = figure(2, 1, w=5.5)
    lines_with_ci(ax[0, 0], df, "avg_jct_h", "rate_jobs_per_h", xlabel="arrival rate (jobs/h)",
                  ylabel="average JCT (h)")
    lines_with_ci(ax[0, 1], df, "makespan_h", "rate_jobs_per_h", xlabel="arrival rate (jobs/h)",
                  ylabel="makespan (h)")
    ctx.save_figure(fig, "load")
    return pd.concat([df, pd.DataFrame(_filter_rows({**d.dropped, **dropped}))], ignore_index=True)


@experiment("maifs", "ablation", params=MaifsParams)
def ablation(ctx: RunContext) -> pd.DataFrame:
    """MAIFS vs itself without attention, without the coordination graph, with fixed allocation; the decoupled
    (Tiresias + Synergy-tune) and single-agent (DL2-style) baselines; learning curves of every learned policy."""
    p: MaifsParams = ctx.params
    spec, cl, d = _setup(ctx)
    windows, dropped = _trace_windows(ctx, d, spec, p)
    rows, _ = _run_policies(ctx, list(ctx.policies), windows, d, spec, cl, p)
    curves = []
    for family in ("maifs", "flat"):
        pols = {n: q for n, q in ctx.policies.items() if isinstance(q, RLPolicy) and q.network == family}
        if not pols:
            continue
        tr = runner.train_policies(_all_variants(ctx, family), d, p, cl, ctx.hardware.lease_s, ctx.seeds(),
                                    checkpoints=ctx.checkpointer)
        steps = p.num_envs * p.rollout_len
        for n in pols:
            v = tr.names.index(n)
            for i, s in enumerate(tr.seeds):
                k = v * len(tr.seeds) + i
                for u in range(tr.curves["jct_h"].shape[1]):
                    for metric, unit in (("train_jct_h", "h"), ("train_reward", "reward/step")):
                        val = tr.curves["jct_h" if metric == "train_jct_h" else "reward"][k, u]
                        if np.isfinite(val):
                            curves.append({"policy": n, "seed": int(s), "metric": metric, "value": float(val),
                                           "unit": unit, "update": u + 1, "env_steps": (u + 1) * steps})
            rows += metric_rows(n, {"train_wall_s": (tr.seconds, "s")}, seeds=[int(tr.seeds[0])])
    df = pd.concat([pd.DataFrame(rows), pd.DataFrame(curves)], ignore_index=True)
    if curves:
        fig, ax = figure(2, 1, w=5.5)
        cv = pd.DataFrame(curves)
        lines_with_ci(ax[0, 0], cv, "train_jct_h", "env_steps", xlabel="environment steps per seed",
                      ylabel="training-episode JCT (h)")
        lines_with_ci(ax[0, 1], cv, "train_reward", "env_steps", xlabel="environment steps per seed",
                      ylabel="mean reward per step")
        ctx.save_figure(fig, "learning_curves")
    return pd.concat([df, pd.DataFrame(_filter_rows({**d.dropped, **dropped}))], ignore_index=True)


__all__ = ["ablation", "headline_philly", "headline_saturn", "load_sweep"]
