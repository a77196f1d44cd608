"""greenplace experiments: train on 2022 traces, evaluate on 2023 (unseen), several regions.

* ``headline``: every policy (BDQ, factorised PPO, flat DQN, the baselines) in every scenario at one reward weight;
  energy cost, mean / p95 JCT, energy, CO2, renewable utilisation; bars and the per-hour placement plot.
* ``pareto``: BDQ trained for each reward weight w_energy in one scenario (the cost / JCT trade-off front), with
  the baselines' points.
* ``latency_calibration``: held-out error of the per-layer latency regressors and each model's profile.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from common.repro import RunContext, experiment, metric_rows
from common.repro.checkpoint import run_chunked
from common.repro.plots import figure
from papers.greenplace import dqn_agents
from papers.greenplace.baselines import HEURISTIC_POLICIES
from papers.greenplace.env import PlacementEnv
from papers.greenplace.evaluate import METRICS, hourly_profile, rollouts, summarise
from papers.greenplace.latency import DEVICES, TABLE_TYPES, layer_latency_s
from papers.greenplace.models import profile
from papers.greenplace.schemas import PlacementParams, PlacementPolicy
from papers.greenplace.setup import World, world

ENV = PlacementEnv()
RL_KINDS = ("bdq", "flat_dqn", "ppo")
_TRAINERS: dict = {}  # one compiled trainer per (algorithm, hyper-parameters, budget), shared by scenarios


def _trainer(kind: str):
    if kind in ("bdq", "flat_dqn"):
        return dqn_agents
    from papers.greenplace import ppo_agent  # needs common/rl/ppo.py

    return ppo_agent


def num_chunks(total_steps: int, most: int = 10) -> int:
    """The most equal chunks (<= ``most``) that ``total_steps`` splits into: the checkpoint granularity."""
    return max(c for c in range(1, min(most, max(total_steps, 1)) + 1) if total_steps % c == 0)


def train_and_evaluate(w: World, scenario, pol: PlacementPolicy, seeds: np.ndarray, weights: list[float],
                       ctx: RunContext) -> dict[float, tuple[dict, dict]]:
    """Train one agent per (weight, seed) on the training year (one jit, vmapped), evaluate each greedily on the
    evaluation year. Returns {w: (per-seed metrics, rollout info)}."""
    p: PlacementParams = w.params
    mod = _trainer(pol.kind)
    train_params = w.train_params(scenario, weights[0])
    ck = (pol.kind, repr(pol), p.train_iterations, p.train_envs)
    if ck not in _TRAINERS:
        train = mod.make_train(ENV, train_params, pol, p.train_iterations, p.train_envs)
        n = num_chunks(train.total_steps)
        advance = functools.partial(train.advance, steps=train.total_steps // n)
        _TRAINERS[ck] = (train, n, jax.jit(jax.vmap(train.start, in_axes=(0, 0, None))),
                         jax.jit(jax.vmap(advance, in_axes=(0, 0, None))))
    train, n, start, advance = _TRAINERS[ck]
    keys = jax.vmap(jax.random.key)(jnp.asarray(np.tile(seeds, len(weights)), jnp.uint32))
    ws = jnp.repeat(jnp.asarray(weights, jnp.float32), len(seeds))
    ctx.progress.log(f"{scenario.name}: training {pol.name} x {len(ws)} (seeds x weights), "
                     f"{p.train_iterations} iterations x {p.train_envs} envs, {n} checkpointed chunks")
    ckpt = ctx.checkpointer(f"{scenario.name}-{pol.name}-w{'_'.join(f'{x:g}' for x in weights)}")
    ts, history = run_chunked(lambda s: advance(s, ws, train_params), start(keys, ws, train_params), n, ckpt)
    curves = jax.tree.map(lambda *h: jnp.concatenate(h, axis=1), *history)
    out = {}
    for i, wt in enumerate(weights):
        sl = slice(i * len(seeds), (i + 1) * len(seeds))
        pp = jax.tree.map(lambda x, sl=sl: x[sl], mod.policy_params(ts))
        ep, starts = w.eval_params(scenario, wt)
        eval_keys = jax.vmap(jax.random.key)(jnp.asarray(seeds + 10_000, jnp.uint32))
        info = rollouts(train.act, ep, eval_keys, starts, p.eval_jobs, pp)
        out[wt] = (summarise(info), info, jax.tree.map(lambda x, sl=sl: np.asarray(x[sl]), curves))
    return out


def evaluate_heuristic(w: World, scenario, name: str, pol: PlacementPolicy, seeds: np.ndarray, wt: float):
    act = HEURISTIC_POLICIES[pol.kind]
    ep, starts = w.eval_params(scenario, wt)
    eval_keys = jax.vmap(jax.random.key)(jnp.asarray(seeds + 10_000, jnp.uint32))
    info = rollouts(lambda pp, k, o, s, q: act(k, o, s, q), ep, eval_keys, starts, w.params.eval_jobs)
    return summarise(info), info


def _rows(name: str, metrics: dict, seeds, **cond):
    return metric_rows(name, {k: (metrics[k], METRICS[k]) for k in METRICS}, seeds=seeds, **cond)


@experiment("greenplace", "headline", params=PlacementParams)
def headline(ctx: RunContext):
    """All policies, all scenarios, w_energy = params.w_energy[0]; train 2022, evaluate 2023."""
    w = world(ctx)
    wt = float(ctx.params.w_energy[0])
    seeds = ctx.seeds()
    rows = []
    hourly = {}
    total = len(ctx.params.scenarios) * len(ctx.policies)
    ctx.progress.start(total, "policy x scenario")
    for sc in ctx.params.scenarios:
        for name, pol in ctx.policies.items():
            if pol.kind in RL_KINDS:
                res = train_and_evaluate(w, sc, pol, seeds, [wt], ctx)[wt]
                metrics, info = res[0], res[1]
                rows += metric_rows(name, {"train_final_objective": (res[2]["objective"][:, -50:].mean(1),
                                                                     "normalised")}, seeds=seeds,
                                    scenario=sc.name)
                if pol.kind == "bdq":
                    hourly[sc.name] = hourly_profile(info, w.eval_params(sc, wt)[0])
            else:
                metrics, _ = evaluate_heuristic(w, sc, name, pol, seeds, wt)
            rows += _rows(name, metrics, seeds, scenario=sc.name)
            ctx.progress.update(note=f"{sc.name}/{name}: cost {metrics['energy_cost_usd_per_1k_jobs'].mean():.4f} "
                                     f"USD/1k, JCT {metrics['mean_jct_s'].mean():.1f} s")
    _plot_headline(ctx, rows)
    if hourly:
        _plot_hourly(ctx, hourly)
    return rows


@experiment("greenplace", "pareto", params=PlacementParams)
def pareto(ctx: RunContext):
    """Reward-weight sweep of the RL policies in the first scenario: the energy-cost / JCT trade-off front."""
    w = world(ctx)
    sc = ctx.params.scenarios[0]
    seeds = ctx.seeds()
    weights = [float(x) for x in ctx.params.w_energy]
    rows = []
    ctx.progress.start(len(ctx.policies), "policies")
    for name, pol in ctx.policies.items():
        if pol.kind in RL_KINDS:
            for wt, (metrics, _, _) in train_and_evaluate(w, sc, pol, seeds, weights, ctx).items():
                rows += _rows(name, metrics, seeds, scenario=sc.name, w_energy=wt)
        else:
            for wt in weights:
                metrics, _ = evaluate_heuristic(w, sc, name, pol, seeds, wt)
                rows += _rows(name, metrics, seeds, scenario=sc.name, w_energy=wt)
        ctx.progress.update(note=name)
    _plot_pareto(ctx, rows, sc.name)
    return rows


@experiment("greenplace", "latency_calibration", params=PlacementParams)
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

    from common.repro.plots import bars_with_ci

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
