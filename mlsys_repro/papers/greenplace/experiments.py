"""greenplace experiments: train on 2022 traces, evaluate on 2023 (unseen), several regions.

* ``headline`` (also the ``uncontended`` experiment, the same function in another regime): every policy (BDQ, flat
  DQN, the action-scoring agents, the baselines, the model-based references) in every scenario of the experiment's
  regime at one reward weight; energy cost, mean / p95 JCT, energy, CO2, renewable utilisation; learning curves and
  training gates of the agents; bars and the per-hour placement plot.
* ``pareto``: BDQ trained for each reward weight w_energy in one scenario (the cost / JCT trade-off front), with
  the baselines' points.
* ``headroom``: the model-based references against DADS as one scenario knob at a time varies.
* ``latency_calibration``: held-out error of the per-layer latency regressors and each model's profile.

What the experiments share (training, greedy evaluation, learning curves and gates, result rows) is in
``pipeline.py``.
"""

from __future__ import annotations

import numpy as np

from mlsys_repro.common.repro import RunContext, metric_rows
from mlsys_repro.common.repro.plots import figure
from mlsys_repro.papers.greenplace.data import world
from mlsys_repro.papers.greenplace.evaluate import METRICS, hourly_profile
from mlsys_repro.papers.greenplace.latency import DEVICES, TABLE_TYPES, layer_latency_s
from mlsys_repro.papers.greenplace.models import profile
from mlsys_repro.papers.greenplace.pipeline import (
    RL_KINDS,
    evaluate_heuristic,
    learning_rows,
    policy_rows,
    train_and_evaluate,
)
from mlsys_repro.papers.greenplace.scenario import REGIME_KNOBS, knob_regime, vary


def _runs_in(ctx: RunContext, name: str, scenario) -> bool:
    """Whether policy ``name`` runs in ``scenario`` (``params.policy_scenarios``; unlisted policies run in all)."""
    only = ctx.params.policy_scenarios.get(name)
    return only is None or scenario.name in only


def headline(ctx: RunContext):
    """All policies, all scenarios, in the experiment's regime (rows carry ``regime``), w_energy =
    params.w_energy[0]; train 2022, evaluate 2023. A policy listed in ``params.policy_scenarios`` runs only in the
    scenarios named there."""
    w = world(ctx)
    wt = float(ctx.params.w_energy[0])
    seeds = ctx.seeds()
    rows = []
    hourly = {}
    cells = [(sc, name, pol) for sc in ctx.params.scenarios for name, pol in ctx.policies.items()
             if _runs_in(ctx, name, sc)]
    ctx.progress.start(len(cells), "policy x scenario")
    for sc, name, pol in cells:
        cond = {"scenario": sc.name, "regime": w.regime.name}
        if pol.kind in RL_KINDS:
            res = train_and_evaluate(w, sc, pol, seeds, [wt], ctx)[wt]
            metrics, info = res[0], res[1]
            rows += metric_rows(name, {"train_final_objective": (res[2]["objective"][:, -50:].mean(1),
                                                                 "normalised")}, seeds=seeds, **cond)
            rows += learning_rows(name, res[3], seeds, **cond)
            if pol.kind == "bdq":
                hourly[sc.name] = hourly_profile(info, w.eval_params(sc, wt)[0])
        else:
            metrics, _ = evaluate_heuristic(ctx, w, sc, name, pol, seeds, wt)
        rows += policy_rows(name, metrics, seeds, **cond)
        ctx.progress.update(note=f"{sc.name}/{name}: cost {metrics['energy_cost_usd_per_1k_jobs'].mean():.4f} "
                                 f"USD/1k, JCT {metrics['mean_jct_s'].mean():.1f} s")
    _plot_headline(ctx, rows)
    if hourly:
        _plot_hourly(ctx, hourly)
    return rows


def pareto(ctx: RunContext):
    """Reward-weight sweep of the RL policies in the first scenario: the energy-cost / JCT trade-off front."""
    w = world(ctx)
    sc = ctx.params.scenarios[0]
    seeds = ctx.seeds()
    weights = [float(x) for x in ctx.params.w_energy]
    rows = []
    cond = {"scenario": sc.name, "regime": w.regime.name}
    ctx.progress.start(len(ctx.policies), "policies")
    for name, pol in ctx.policies.items():
        if pol.kind in RL_KINDS:
            for wt, (metrics, _, _, learn) in train_and_evaluate(w, sc, pol, seeds, weights, ctx).items():
                rows += policy_rows(name, metrics, seeds, **cond, w_energy=wt)
                rows += learning_rows(name, learn, seeds, **cond, w_energy=wt)
        else:
            for wt in weights:
                metrics, _ = evaluate_heuristic(ctx, w, sc, name, pol, seeds, wt)
                rows += policy_rows(name, metrics, seeds, **cond, w_energy=wt)
        ctx.progress.update(note=name)
    _plot_pareto(ctx, rows, sc.name)
    return rows


def headroom(ctx: RunContext):
    """Where can looking ahead pay? The model-based references (myopic, the look-ahead planner) against DADS and
    Neurosurgeon in the first scenario, one knob of the scenario varied at a time (price spread, renewable
    capacity, WAN bandwidth, load, the contended regime's load), evaluated on the evaluation year. The knobs that
    change the hardware are built as regimes (:func:`mlsys_repro.papers.greenplace.scenario.knob_regime`: model
    tables and DADS's min-cut at their bandwidth; the reward normalisers of the scenario's own regime). Rows carry
    ``knob`` and ``knob_value``; ``beats_dads_on_both`` is 1 where a policy's energy cost and mean JCT are both below
    DADS's, with no more rejected jobs (same seed); ``objective_gain_vs_dads`` is DADS's objective minus the
    policy's (a difference: with a wide price spread objectives reach zero and go negative)."""
    w = world(ctx)
    sc = ctx.params.scenarios[0]
    seeds = ctx.seeds()
    wt = float(ctx.params.w_energy[0])
    base, _ = w.eval_params(sc, wt)
    conds = [(k, float(v)) for k, vals in ctx.params.headroom.items() for v in vals]
    ctx.progress.start(len(conds), "knob x value")
    rows = []
    for knob, value in conds:
        if knob in REGIME_KNOBS:
            params = world(ctx, knob_regime(knob, value)).eval_params(sc, wt)[0]
        else:
            params = vary(base, knob, value)
        res = {name: evaluate_heuristic(ctx, w, sc, name, pol, seeds, wt, params=params)[0]
               for name, pol in ctx.policies.items()}
        ref = res.get("dads")
        for name, m in res.items():
            extra = {}
            if ref is not None:
                both = (m["energy_cost_usd_per_1k_jobs"] < ref["energy_cost_usd_per_1k_jobs"]) & \
                    (m["mean_jct_s"] < ref["mean_jct_s"]) & (m["rejected_frac"] <= ref["rejected_frac"])
                # a difference, not a ratio: with a wide price spread objectives reach zero and go negative
                extra = {"beats_dads_on_both": (both.astype(float), "0/1"),
                         "objective_gain_vs_dads": (ref["objective"] - m["objective"], "normalised")}
            rows += metric_rows(name, {**{k: (m[k], METRICS[k]) for k in METRICS}, **extra}, seeds=seeds,
                                scenario=sc.name, regime=w.regime.name, knob=knob, knob_value=value)
        ctx.progress.update(note=f"{knob}={value:g}: " + ", ".join(
            f"{n} {res[n]['objective'].mean():.3f}" for n in res))
    _plot_headroom(ctx, rows, sc.name)
    return rows


def latency_calibration(ctx: RunContext):
    """Held-out error of the per-layer latency regressors; per-model FLOPs, weights and predicted latency."""
    w = world(ctx)
    rows = []
    for dev in DEVICES:
        for kind in TABLE_TYPES:
            m = w.latency[(dev, kind)]
            rows += metric_rows(f"{dev}/{kind}", {
                "holdout_median_ape": (m.holdout_median_ape, "fraction"),
                "holdout_mean_ape": (m.holdout_mean_ape, "fraction"),
                "rows_fit": (m.n_train, "rows"), "rows_holdout": (m.n_test, "rows")}, seeds=[0])
    for name in ctx.params.models:
        prof = profile(name)
        lat = layer_latency_s(prof, w.latency).sum(0)
        rows += metric_rows(name, {
            "gflops": (prof.flops.sum() / 1e9, "GFLOP"), "weights_mb": (prof.param_bytes.sum() / 1e6, "MB"),
            "layers": (prof.num_layers, "layers"), "partition_points": (int(prof.block_end.sum()), "cuts"),
            "edge_latency_ms": (lat[0] * 1000, "ms"), "cloud_latency_ms": (lat[1] * 1000, "ms")}, seeds=[0])
    return rows


# ---------------------------------------------------------------------------------------------- figures


def _mean(rows, **flt):
    vals = [r["value"] for r in rows if all(r.get(k) == v for k, v in flt.items())]
    return float(np.mean(vals)) if vals else np.nan


def _plot_headline(ctx: RunContext, rows):
    import pandas as pd

    from mlsys_repro.common.repro.plots import bars_with_ci

    df = pd.DataFrame(rows)
    scen = list(dict.fromkeys(df["scenario"]))
    fig, axes = figure(ncols=3, nrows=len(scen), w=4.6, h=3.2)
    for i, sc in enumerate(scen):
        d = df[df["scenario"] == sc]
        for j, (metric, label) in enumerate((("energy_cost_usd_per_1k_jobs", "energy cost (USD / 1k jobs)"),
                                             ("mean_jct_s", "mean JCT (s)"), ("objective", "weighted objective"))):
            bars_with_ci(axes[i][j], d, metric, ylabel=label)
            axes[i][j].set_title(sc, fontsize=9)
    ctx.save_figure(fig, "bars")


def _plot_hourly(ctx: RunContext, hourly: dict):
    fig, axes = figure(ncols=len(hourly), w=4.6, h=3.4)
    for ax, (sc, h) in zip(axes[0], hourly.items(), strict=True):
        ax.bar(h["hour"], h["cloud_work"], color="tab:blue", alpha=0.7, label="BDQ: share of work on the cloud")
        ax.set_xlabel("local hour of day")
        ax.set_ylabel("cloud work share")
        ax.set_ylim(0, 1)
        ax2 = ax.twinx()
        ax2.plot(h["hour"], h["price_city"] * 1000, color="tab:red", label="city price")
        ax2.plot(h["hour"], h["price_cloud"] * 1000, color="tab:orange", ls="--", label="cloud price")
        ax2.plot(h["hour"], h["green_city"] * 100, color="tab:green", ls=":", label="city green power (% of p_max)")
        ax2.set_ylabel("USD/MWh, %")
        ax.set_title(sc, fontsize=9)
        lines = ax.get_legend_handles_labels()
        lines2 = ax2.get_legend_handles_labels()
        ax.legend(lines[0] + lines2[0], lines[1] + lines2[1], fontsize=6, loc="upper left")
    ctx.save_figure(fig, "placement_by_hour")


def _plot_headroom(ctx: RunContext, rows, sc: str):
    """Per knob: each policy's objective gain over DADS (DADS's minus its own, mean and 95 % CI over seeds) against
    the knob value."""
    import pandas as pd

    from mlsys_repro.common.repro.stats import mean_ci

    df = pd.DataFrame(rows)
    df = df[(df.metric == "objective_gain_vs_dads") & (df.policy != "dads")]
    # the scenario itself (load 1) is every trace and bandwidth knob's value 1
    base = df[(df.knob == "load") & (df.knob_value == 1.0)]
    has_one = set(df[df.knob_value == 1.0]["knob"])
    extra = [base.assign(knob=k) for k in dict.fromkeys(df["knob"])
             if k in ("price_spread", "green_scale", "wan_scale") and k not in has_one]
    df = pd.concat([df, *extra], ignore_index=True)
    knobs = list(dict.fromkeys(df["knob"]))
    fig, axes = figure(ncols=len(knobs), w=3.6, h=3.2)
    for ax, knob in zip(axes[0], knobs, strict=True):
        for name, g in df[df.knob == knob].groupby("policy", sort=False):
            xs = sorted(g["knob_value"].unique())
            cis = [mean_ci(g[g["knob_value"] == x]["value"].to_numpy()) for x in xs]
            m = np.array([c[0] for c in cis])
            ax.errorbar(xs, m, yerr=[m - np.array([c[1] for c in cis]), np.array([c[2] for c in cis]) - m],
                        marker="o", capsize=3, label=name)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xlabel(f"{knob} (x scenario value)")
        ax.set_ylabel("objective gain over DADS (normalised)")
        ax.set_xscale("symlog", linthresh=0.25)
        ax.set_yscale("symlog", linthresh=0.01)
        ax.set_title(f"{knob}, {sc}, n={df.seed.nunique()} seeds, {ctx.profile}", fontsize=8)
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    ctx.save_figure(fig, "vs_dads")


def _plot_pareto(ctx: RunContext, rows, sc: str):
    import pandas as pd

    df = pd.DataFrame(rows)
    fig, axes = figure(w=6.0, h=4.4)
    ax = axes[0][0]
    for name, g in df.groupby("policy", sort=False):
        pts = []
        for wt, gw in g.groupby("w_energy"):
            c = gw[gw.metric == "energy_cost_usd_per_1k_jobs"]["value"].mean()
            t = gw[gw.metric == "mean_jct_s"]["value"].mean()
            pts.append((wt, c, t))
        pts = np.array(pts)
        if ctx.policies[name].kind in RL_KINDS:
            ax.plot(pts[:, 2], pts[:, 1], marker="o", label=f"{name} (w_E sweep)")
            for wt, c, t in pts:
                ax.annotate(f"{wt:g}", (t, c), fontsize=6)
        else:
            ax.scatter(pts[:, 2].mean(), pts[:, 1].mean(), marker="s", label=name)
    ax.set_xlabel("mean JCT (s)")
    ax.set_ylabel("energy cost (USD / 1k jobs)")
    ax.set_xscale("log")
    ax.set_title(f"trade-off front, {sc} (2023, unseen)", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ctx.save_figure(fig, "front")
