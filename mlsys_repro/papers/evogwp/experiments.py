"""EvoGWP experiments: each is one forecasting table (:func:`mlsys_repro.papers.evogwp.evaluate.run_table`) plus
figures.

* ``table_short``: 12 -> 12 steps (1 h -> 1 h at 5 minutes) on Bitbrains, Azure and Google, every method;
* ``long_term``: 288 -> 72 five-minute steps (1 day -> 6 h, read at 30-minute resolution) on Bitbrains,
  trained on July and tested on the last two weeks of August (pattern evolution);
* ``ablation``: EvoGWP without shapelets, without the evolution graph, without EvoLSTM, without importance;
* ``alibaba_univariate``: the univariate Alibaba 2018 cluster series (no graph), a sanity set;
* ``tuning``: each learned model's peak learning rate from a small grid, on tuning seeds and validation windows
  only (:func:`pick_lr`); the choices are frozen into ``train.lr_by_model`` of the experiments above.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from mlsys_repro.common.repro.plots import figure, lines_with_ci
from mlsys_repro.common.repro.registry import RunContext
from mlsys_repro.papers.evogwp.evaluate import prepare_all, run_policy, run_table, setting_name
from mlsys_repro.papers.evogwp.schemas import NEURAL, ForecastParams, TuningParams


def _table(ctx: RunContext) -> pd.DataFrame:
    rows, extra = run_table(ctx)
    df = pd.DataFrame(rows)
    _horizon_figure(ctx, df)
    _boundary_figure(ctx, df)
    if ctx.params.figure_policies:
        _prediction_figure(ctx, extra)
    return df


def _horizon_figure(ctx: RunContext, df: pd.DataFrame) -> None:
    sel = df[(df["metric"] == "mae_masked") & (df["horizon"] != "avg") & (df["policy"] != "best_sota")].copy()
    if sel.empty:
        return
    sel["step"] = sel["horizon"].astype(int)
    settings = list(dict.fromkeys(sel["setting"]))
    fig, axes = figure(ncols=len(settings), w=5.0, h=3.8)
    for ax, st in zip(axes[0], settings, strict=True):
        lines_with_ci(
            ax,
            sel[sel["setting"] == st],
            "mae_masked",
            x="step",
            xlabel="horizon step",
            ylabel="masked MAE (%)",
        )
        ax.set_title(st, fontsize=9)
    ctx.save_figure(fig, "mae_by_horizon")


def boundary_gains(df: pd.DataFrame, ours: str = "evogwp") -> pd.DataFrame:
    """Per seed of ``ours``: the % reduction of masked MAE against the seed-mean of last value and of
    ``best_sota``, per setting, periodicity group and horizon step (rows of ``mae_masked_by_group``)."""
    sel = df[(df["metric"] == "mae_masked_by_group") & (df["horizon"] != "avg")].copy()
    if sel.empty or ours not in set(sel["policy"]):
        return pd.DataFrame()
    sel["step"] = sel["horizon"].astype(int)
    keys = ["setting", "group", "step"]
    out = []
    mine = sel[sel["policy"] == ours]
    for base in ("last_value", "best_sota"):
        b = sel[sel["policy"] == base].groupby(keys)["value"].mean().rename("base")
        if b.empty:
            continue
        m = mine.join(b, on=keys).dropna(subset=["base"])
        m = m.assign(metric="gain_pct", value=100.0 * (m["base"] - m["value"]) / m["base"],
                     label=f"vs {base}, " + m["group"])
        out.append(m)
    return pd.concat(out) if out else pd.DataFrame()


def _boundary_figure(ctx: RunContext, df: pd.DataFrame) -> None:
    """Claim boundary: EvoGWP's gain over last value and over the best state-of-the-art baseline against the
    horizon step, on daily-periodic vs aperiodic entities (mean and 95 % CI over EvoGWP's seeds)."""
    g = boundary_gains(df)
    if g.empty:
        return
    settings = list(dict.fromkeys(g["setting"]))
    fig, axes = figure(ncols=len(settings), w=5.0, h=3.8)
    for ax, st in zip(axes[0], settings, strict=True):
        lines_with_ci(ax, g[g["setting"] == st], "gain_pct", x="step", by="label", xlabel="horizon step",
                      ylabel="masked-MAE reduction by EvoGWP (%)")
        ax.axhline(0.0, color="black", lw=0.6)
        ax.set_title(st, fontsize=9)
    ctx.save_figure(fig, "boundary")


def _prediction_figure(ctx: RunContext, extra: dict[str, Any]) -> None:
    """Rolling forecasts (seed 0, consecutive test windows) on the test series whose level changes most."""
    p: ForecastParams = ctx.params
    ds = extra["prepared"][0]
    name = ds.series.name
    preds = {pol: pr for (pol, d), pr in extra["preds"].items() if d == name}
    if not preds or p.eval_stride != p.horizon:
        return
    w = min(ds.test_o.size, max(1, (3 * ds.series.period) // p.horizon))  # about three days
    truth = ds.target[:w]  # [w, Q, N]
    flat = truth.reshape(-1, truth.shape[-1])
    half = flat.shape[0] // 2
    change = np.abs(np.nanmean(flat[half:], 0) - np.nanmean(flat[:half], 0))
    j = int(np.nanargmax(np.where(np.isfinite(change), change, -1)))
    steps = np.arange(flat.shape[0]) * ds.series.step_minutes / 60.0
    fig, axes = figure(ncols=1, w=10.0, h=3.8)
    ax = axes[0][0]
    ax.plot(steps, flat[:, j], color="black", lw=1.2, label="observed")
    for pol, pr in preds.items():
        ax.plot(steps, pr[:w, :, j].reshape(-1), lw=0.9, label=pol)
    ax.set_xlabel(f"hours into the test period ({p.horizon}-step forecasts, one per window)")
    ax.set_ylabel("CPU utilisation (%)")
    ax.set_title(
        f"{name} {ds.series.entities[j]}: forecasts on the series whose level changes most", fontsize=9
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=3)
    ctx.save_figure(fig, "predictions")


def table_short(ctx: RunContext) -> pd.DataFrame:
    """12 -> 12 on Bitbrains / Azure / Google: EvoGWP vs every baseline."""
    return _table(ctx)


def long_term(ctx: RunContext) -> pd.DataFrame:
    """288 -> 72 five-minute steps on Bitbrains, July -> late August."""
    return _table(ctx)


def ablation(ctx: RunContext) -> pd.DataFrame:
    """EvoGWP without each of its components."""
    return _table(ctx)


def alibaba_univariate(ctx: RunContext) -> pd.DataFrame:
    """Univariate sanity set: Alibaba 2018 cluster CPU."""
    return _table(ctx)


def pick_lr(val: pd.DataFrame) -> dict[str, float]:
    """Per policy, the peak learning rate whose runs have the lowest mean best-validation masked MAE.

    ``val``: one row per tuning run with columns ``policy``, ``lr`` and ``value`` (the run's ``val_mae_masked``;
    several seeds or datasets per rate are averaged). Ties go to the smaller rate."""
    if val.empty:
        return {}
    mean = val.groupby(["policy", "lr"])["value"].mean().reset_index()
    out = {}
    for pol, g in mean.groupby("policy", sort=False):
        g = g.sort_values(["value", "lr"], kind="stable")
        out[str(pol)] = float(g["lr"].iloc[0])
    return out


TUNED_METRICS = ("val_mae_masked", "peak_lr", "val_mae_masked_init", "val_mae_masked_last_value", "converged",
                 "beats_trivial", "beats_untrained", "train_steps", "best_step", "val_slope_before_decay")


def tuning(ctx: RunContext) -> pd.DataFrame:
    """Each learned model at every rate of ``lrs`` on tuning seeds; validation windows only (no test forecast).

    Rows per run (``lr`` column): the training record's metrics (:data:`TUNED_METRICS`) and learning curves;
    per policy: ``val_mae_masked_mean`` per rate and ``chosen_lr`` (:func:`pick_lr`)."""
    from mlsys_repro.papers.evogwp.evaluate import training_rows

    p: TuningParams = ctx.params
    policies, prepared, pads = prepare_all(ctx)
    bad = [n for n, pol in policies.items() if pol.kind not in NEURAL or n != pol.kind]
    if bad:
        raise ValueError(f"tuning: policies must be learned models named after their kind, got {bad}")
    lrs = np.asarray(p.lrs, np.float64)
    tseeds = ctx.seeds() + p.tuning_seed_offset
    run_seeds = np.repeat(tseeds, lrs.size)  # runs (seed, lr), seed-major
    run_lrs = np.tile(lrs, tseeds.size)
    rows: list[dict[str, Any]] = []
    ctx.progress.start(len(policies) * len(prepared), "policy x dataset")
    for name, pol in policies.items():
        for ds in prepared:
            res = run_policy(pol, ds, p, run_seeds, pads, ctx.checkpointer(f"{name}-{ds.series.name}"), ctx.cache,
                             lrs=run_lrs, test=False)
            setting = setting_name(ds.series.name, p)
            per_run = []
            for i in range(run_seeds.size):
                one = _one_run(res, i)
                for r in training_rows(name, one, ds, setting, p.train):
                    if r["metric"] in TUNED_METRICS or r["metric"].startswith("curve_"):
                        per_run.append({**r, "lr": float(run_lrs[i])})
            rows += per_run
            ctx.progress.update(1, f"{name} on {ds.series.name}: {res.seconds:.0f}s")
    df = pd.DataFrame(rows)
    val = df[df["metric"] == "val_mae_masked"]
    chosen = pick_lr(val)
    means = val.groupby(["policy", "lr"])["value"].mean()
    out = []
    for (pol, lr), v in means.items():
        out.append({"policy": pol, "seed": int(tseeds[0]), "metric": "val_mae_masked_mean", "value": float(v),
                    "unit": "%", "lr": float(lr), "horizon": "avg"})
    for pol, lr in chosen.items():
        out.append({"policy": pol, "seed": int(tseeds[0]), "metric": "chosen_lr", "value": lr, "unit": "1",
                    "horizon": "avg"})
    return pd.concat([df, pd.DataFrame(out)], ignore_index=True)


def _one_run(res, i: int):
    """The :class:`~mlsys_repro.papers.evogwp.evaluate.PolicyResult` of run ``i`` alone (its training record)."""
    import dataclasses

    tr = res.training
    one = {}
    for k, v in tr.items():
        if k == "gates":
            one[k] = {g: np.asarray(a)[i : i + 1] for g, a in v.items()}
        elif k == "val_last_value":
            one[k] = v
        else:
            one[k] = np.asarray(v)[i : i + 1]
    return dataclasses.replace(res, seeds=[res.seeds[i]], training=one)


for _fn in (table_short, long_term, ablation, alibaba_univariate):
    _fn.extra_policies_ok = True  # rows of "best_sota" (derived) and "-" (dataset facts)
