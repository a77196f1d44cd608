"""MAIFS experiments: headline tables on two traces, the load sweep (claim-boundary map), ablations with learning
curves.

Workloads (issue #23) are contended: windows of real trace jobs with fair-share durations capped at
``cap_duration_h`` and arrivals scaled to an offered load (fraction of the cluster's GPU capacity); Philly has
``eval_windows`` windows of its later slice, Saturn its held-out files cut into ``saturn_parts`` windows each.
Every seed of every policy is evaluated on all windows (a seed's metric is the mean over windows). Heuristics are
deterministic given the windows, so their rows repeat over seeds; a learned policy's seed ``s`` is its training
seed. Learned policies are trained once per trace (on that trace's training windows, disjoint from the evaluation
windows, cycling through ``train_loads``) and evaluated greedily (MAIFS and its warm start also with the stochastic
policy, rows ``*_sampled``); each also gets the 0/1 gates ``converged`` and ``beats_prior`` per seed, which the
learned-policy claims require. ``maifs_prior`` is the MAIFS network before PPO, i.e. its warm start (the behaviour
clone of Synergy-tune SRTF in MAIFS's action space), a baseline row that shows what training adds; ``maifs_cold`` is
MAIFS trained by the same recipe from its random initialisation. Every scheduler pays ``restore_s`` of work per
preemption.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pandas as pd

from mlsys_repro.common.repro import RunContext, metric_rows
from mlsys_repro.common.repro.plots import bars_with_ci, cdf, figure, lines_with_ci
from mlsys_repro.common.sim.cluster import SimResult
from mlsys_repro.papers.maifs import data, pipeline
from mlsys_repro.papers.maifs.schemas import HeuristicPolicy, MaifsParams, RLPolicy

SOTA = ("synergy_tune_fifo", "tiresias")


def _metrics(rs: list[SimResult]) -> dict[str, tuple[Any, str]]:
    """Metrics of one policy (one training seed) over every evaluation window: per-window means averaged over
    windows (each window counts once), pooled JCT percentiles, summed conflicts."""
    jct = [r.jct / 3600.0 for r in rs]
    span = np.array([r.makespan for r in rs]) / 3600.0
    pooled = np.concatenate(jct)
    m = {
        "avg_jct_h": (float(np.mean([j.mean() for j in jct])), "h"),
        "p50_jct_h": (float(np.percentile(pooled, 50)), "h"),
        "p99_jct_h": (float(np.percentile(pooled, 99)), "h"),
        "makespan_h": (float(span.mean()), "h"),
        "queueing_h": (float(np.mean([np.mean(r.queueing) for r in rs]) / 3600.0), "h"),
        "gpu_util": (float(np.mean([r.util["gpu"] for r in rs])), "fraction"),
        "cpu_util": (float(np.mean([r.util["cpu"] for r in rs])), "fraction"),
        "mem_util": (float(np.mean([r.util["mem"] for r in rs])), "fraction"),
        "preemptions": (float(np.mean([r.counters["preemptions"] for r in rs])), "count/window"),
        "finished": (float(all(r.finished for r in rs)), "bool"),
        "windows": (float(len(rs)), "count"),
    }
    if "conflicts" in rs[0].counters:
        conf = sum(r.counters["conflicts"] for r in rs)
        tried = conf + sum(r.counters["decisions"] for r in rs)
        m["conflict_rate"] = (conf / max(tried, 1), "fraction")
    if "steps" in rs[0].counters:  # what a learned policy's episodes cost to simulate (decision sub-steps)
        m["steps_per_window"] = (float(np.mean([r.counters["steps"] for r in rs])), "count/window")
    return m


def _single_job_share(windows) -> float:
    """Mean over windows of the single-job makespan bound (latest arrival + fair-share run time of any job, from
    the first arrival), to set beside the measured makespans: where they are close, one job sets the makespan."""
    return float(np.mean([(w.arrival + w.work).max() - w.arrival[0] for w in windows]) / 3600.0)


def _setup(ctx: RunContext):
    hw = ctx.hardware
    spec = hw.spec(ctx.data_dir)
    d = data.load_data(ctx.trace.files, ctx.data_dir, ctx.cache)
    return spec, spec.arrays(), d


def _trace(ctx: RunContext) -> str:
    if ctx.trace.loader == "philly_jobs":
        return "philly"
    if ctx.trace.loader == "sia_workloads":
        return "saturn"
    raise ValueError(f"maifs experiments need a philly_jobs or sia_workloads trace, got {ctx.trace.loader!r}")


def _train(ctx: RunContext, d, p: MaifsParams, cl, names: list[str]) -> dict[str, pipeline.Trained]:
    """The training run of every learned policy among ``names`` (memoised: experiments on one trace share it)."""
    trace = _trace(ctx)
    trained = {}
    for family in ("maifs", "flat"):
        group = [n for n in names if isinstance(ctx.policies[n], RLPolicy) and ctx.policies[n].network == family]
        if group:
            allv = _all_variants(ctx, family, trace)
            tr = pipeline.train_policies(allv, d, p, cl, ctx.hardware.lease_s, ctx.seeds(), ctx.cache, ctx.progress,
                                        checkpoints=ctx.checkpointer, trace=trace)
            trained.update({n: tr for n in group})
    return trained


SAMPLED = ("maifs", "maifs_prior")  # learned rows also evaluated with the stochastic policy in the headline experiments


def _run_policies(ctx: RunContext, names: list[str], windows, d, spec, cl, params: MaifsParams,
                  extra: dict | None = None, tag: str = "",
                  sampled: tuple[str, ...] = ()) -> tuple[list[dict], dict[str, list[SimResult]]]:
    """Rows (one per seed and metric) and pooled raw results of every named policy on all the windows.

    A heuristic is deterministic given the windows: its window-averaged metrics repeat for every seed. A learned
    policy's seed ``s`` is its training seed ``s``, evaluated greedily on every window; it also gets the 0/1
    gates ``converged`` and ``beats_prior`` per seed. Policies in ``sampled`` are also evaluated with their
    stochastic policy (one sampled episode per window and seed, a fixed key): rows ``avg_jct_sampled_h``,
    ``makespan_sampled_h``."""
    seeds = ctx.seeds()
    rows: list[dict] = []
    results: dict[str, list[SimResult]] = {}
    trained = _train(ctx, d, params, cl, names)
    n = max(len(w) for w in windows)
    ctx.progress.start(len(names), f"policies{tag}")
    for name in names:
        pol = ctx.policies[name]
        if isinstance(pol, HeuristicPolicy):
            res = pipeline.run_heuristic(pol, cl, d.profiles, windows, n, ctx.hardware.lease_s,
                                       params.lookahead, params.restore_s)
            per_seed = [res] * len(seeds)
        else:
            src = pol.untrained_of if pol.untrained else name
            per_seed = pipeline.run_trained(trained[name], src, d, cl, windows, n, ctx.cache,
                                             untrained=pol.untrained)
            if not pol.untrained:
                g = pipeline.gates(trained[name], name, params)
                rows += metric_rows(name, {k: (v, "0/1") for k, v in g.items()}, seeds=seeds.tolist(),
                                    **(extra or {}))
            if name in sampled:
                smp = pipeline.run_trained(trained[name], src, d, cl, windows, n, ctx.cache,
                                           untrained=pol.untrained, sampled=True)
                for s, rs in zip(seeds, smp, strict=True):
                    m = _metrics(rs)
                    rows += metric_rows(name, {"avg_jct_sampled_h": m["avg_jct_h"],
                                               "makespan_sampled_h": m["makespan_h"]}, seeds=[int(s)], **(extra or {}))
        results[name] = [r for rs in per_seed for r in rs]
        for s, rs in zip(seeds, per_seed, strict=True):
            rows += metric_rows(name, _metrics(rs), seeds=[int(s)], **(extra or {}))
        ctx.progress.update(1, name)
    return rows, results


def _all_variants(ctx: RunContext, family: str, trace: str) -> dict[str, RLPolicy]:
    """The learned policies of this family trained together. On Philly every MAIFS variant (the headline,
    load-sweep and ablation experiments share one training run); on Saturn only the experiment's own."""
    from omegaconf import OmegaConf

    from mlsys_repro.common.repro.config import policy_node

    wanted = ("maifs", "maifs_cold", "maifs_no_attention", "maifs_no_cg", "maifs_fixed_alloc", "dl2")
    if trace != "philly":
        mine = {(q.untrained_of if q.untrained else n) for n, q in ctx.policies.items() if isinstance(q, RLPolicy)}
        wanted = tuple(n for n in wanted if n in mine)
    out = {}
    for name in wanted:
        pol = ctx.policies.get(name)
        if pol is None:
            pol = OmegaConf.to_object(policy_node("maifs", name, ctx.cfg.paths.conf_dir))
        if pol.network == family:
            out[name] = pol
    return out


def _trace_windows(ctx: RunContext, d, spec, p: MaifsParams, load: float | None = None):
    return data.eval_windows(d, p, spec.total_gpus, _trace(ctx), load)


def _filter_rows(dropped: dict[str, int]) -> list[dict]:
    """Counted filters as rows (policy '-') so every dropped job is reported next to the results."""
    return [{"policy": "-", "seed": 0, "metric": f"dropped[{k}]", "value": float(v), "unit": "jobs"}
            for k, v in sorted(dropped.items())]


def _workload_rows(windows, spec, load: float, extra: dict | None = None) -> list[dict]:
    """Per-experiment description of the workload (policy '-'): windows, jobs, offered load, longest job."""
    from mlsys_repro.papers.maifs.windows import offered_load

    return [{"policy": "-", "seed": 0, "metric": k, "value": float(v), "unit": u, **(extra or {})} for k, v, u in (
        ("workload_windows", len(windows), "count"),
        ("workload_jobs_per_window", np.mean([len(w) for w in windows]), "jobs"),
        ("workload_offered_load", np.mean([offered_load(w, spec.total_gpus) for w in windows]), "fraction"),
        ("workload_target_load", load, "fraction"),
        ("workload_single_job_bound_h", _single_job_share(windows), "h"))]


def _headline(ctx: RunContext) -> pd.DataFrame:
    p: MaifsParams = ctx.params
    spec, cl, d = _setup(ctx)
    windows, dropped = _trace_windows(ctx, d, spec, p)
    names = list(ctx.policies)
    rows, results = _run_policies(ctx, names, windows, d, spec, cl, p, sampled=SAMPLED)
    curves, train_rows = _training_rows(ctx, _train(ctx, d, p, cl, names), p)
    df = pd.concat([pd.DataFrame(rows + train_rows + _filter_rows({**d.dropped, **dropped})
                                 + _workload_rows(windows, spec, p.load)), pd.DataFrame(curves)],
                   ignore_index=True)
    _curve_figure(ctx, curves)
    fig, ax = figure(1, 1, w=6.5)
    shown = [n for n in ("fifo", "srtf", "tiresias", "synergy_tune_fifo", "synergy_tune_srtf", "dl2",
                         "maifs_prior", "maifs_cold", "maifs")
             if n in results]
    cdf(ax[0, 0], {n: np.concatenate([r.jct for r in results[n]]) / 3600.0 for n in shown}, "JCT (h)")
    ax[0, 0].set_title(f"JCT CDF, {ctx.trace.name} ({len(windows)} windows)")
    ctx.save_figure(fig, "jct_cdf")
    fig, ax = figure(2, 1, w=6.0)
    pol_rows = df[(df["policy"] != "-")]
    bars_with_ci(ax[0, 0], pol_rows, "makespan_h", ylabel="makespan (h)")
    bars_with_ci(ax[0, 1], pol_rows, "avg_jct_h", ylabel="average JCT (h)")
    ctx.save_figure(fig, "bars")
    return df


def headline_philly(ctx: RunContext) -> pd.DataFrame:
    """Makespan and JCT of every scheduler on unseen windows of the later Philly slice (Nov-Dec 2017)."""
    return _headline(ctx)


def headline_saturn(ctx: RunContext) -> pd.DataFrame:
    """Makespan and JCT of every scheduler on held-out Helios-Saturn workloads."""
    return _headline(ctx)


def load_sweep(ctx: RunContext) -> pd.DataFrame:
    """The claim-boundary map: every policy on the Philly evaluation windows scaled to each offered load (fraction
    of the cluster's GPU capacity); learned policies are trained once (at the training loads) and evaluated at
    every load."""
    p: MaifsParams = ctx.params
    spec, cl, d = _setup(ctx)
    rows: list[dict] = []
    dropped: dict[str, int] = {}
    for load in p.loads:
        windows, dr = _trace_windows(ctx, d, spec, p, load)
        dropped.update(dr)
        r, _ = _run_policies(ctx, list(ctx.policies), windows, d, spec, cl, p, extra={"load": float(load)},
                             tag=f" @ load {load:g}")
        heur = [n for n, q in ctx.policies.items() if isinstance(q, HeuristicPolicy)]
        rows += r + best_baseline_rows(r, heur) + _workload_rows(windows, spec, load, {"load": float(load)})
    df = pd.DataFrame(rows)
    fig, ax = figure(3, 1, w=5.0)
    pol = df[df["policy"] != "-"]
    xl = "offered load (fraction of GPU capacity)"
    lines_with_ci(ax[0, 0], pol, "avg_jct_h", "load", xlabel=xl, ylabel="average JCT (h)")
    lines_with_ci(ax[0, 1], pol, "makespan_h", "load", xlabel=xl, ylabel="makespan (h)")
    gain = boundary_rows(df, "maifs")
    if gain:
        lines_with_ci(ax[0, 2], pd.DataFrame(gain), "jct_reduction_vs_best_pct", "load", xlabel=xl,
                      ylabel="JCT reduction vs best baseline (%)")
        ax[0, 2].axhline(0.0, color="k", lw=0.8)
    ctx.save_figure(fig, "load")
    return pd.concat([df, pd.DataFrame(gain), pd.DataFrame(_filter_rows({**d.dropped, **dropped}))],
                     ignore_index=True)


BEST_OF = ("avg_jct_h", "makespan_h", "p99_jct_h", "queueing_h")


def best_baseline_rows(rows: list[dict], heuristics: list[str]) -> list[dict]:
    """Rows of the pseudo-policy ``best_baseline``: for each metric of :data:`BEST_OF` (lower is better), the
    heuristic with the lowest seed-mean value in ``rows`` (one condition), its per-seed rows copied with the pick
    named in column ``picked``. Heuristics are deterministic given the windows, so picking by the mean is not a
    selection on seed noise; the comparison it feeds is MAIFS against the strongest baseline at each load."""
    df = pd.DataFrame(rows)
    out = []
    for metric in BEST_OF:
        sel = df[(df["metric"] == metric) & df["policy"].isin(heuristics)]
        if sel.empty:
            continue
        best = sel.groupby("policy")["value"].mean().idxmin()
        for r in sel[sel["policy"] == best].to_dict("records"):
            out.append({**r, "policy": "best_baseline", "picked": best})
    return out


def boundary_rows(df: pd.DataFrame, ours: str, by: str = "load") -> list[dict]:
    """Per condition ``by`` (a column: load, cap_h) and seed: 100 (1 - ours / best_baseline) of average JCT and
    makespan (the claim-boundary map; positive where ``ours`` pays). For the figure; the claims read the raw
    rows."""
    out = []
    for metric, name in (("avg_jct_h", "jct_reduction_vs_best_pct"), ("makespan_h", "makespan_reduction_vs_best_pct")):
        a = df[(df["policy"] == ours) & (df["metric"] == metric)].set_index([by, "seed"])["value"]
        b = df[(df["policy"] == "best_baseline") & (df["metric"] == metric)].set_index([by, "seed"])["value"]
        for (cond, seed), v in (100.0 * (1.0 - a / b)).dropna().items():
            out.append({"policy": ours, "seed": int(seed), "metric": name, "value": float(v), "unit": "%",
                        by: float(cond)})
    return out


CURVE_METRICS = {"jct_h": ("curve_train_jct_h", "h"), "reward": ("curve_train_reward", "reward/step"),
                 "value_loss": ("curve_value_loss", "normalised"), "entropy": ("curve_entropy", "nats"),
                 "explained_variance": ("curve_explained_variance", "fraction"),
                 "approx_kl": ("curve_approx_kl", "nats"), "conflict_rate": ("curve_conflict_rate", "fraction"),
                 "release_rate": ("curve_release_rate", "fraction"),
                 "cut_episodes": ("curve_cut_episodes", "fraction"), "q_loss": ("curve_q_loss", "normalised"),
                 "credit_spread": ("curve_credit_spread", "normalised"),
                 "adv_clip_frac": ("curve_adv_clip_frac", "fraction")}
# train.BC_STATS's columns, in order
BC_METRICS = (("bc_loss", "nats"), ("bc_agreement", "fraction"), ("bc_entropy", "nats"),
              ("bc_level_agreement", "fraction"), ("bc_own_agreement", "fraction"))


def _curve_rows(tr: pipeline.Trained, names, p: MaifsParams) -> list[dict]:
    """Learning curves and training diagnostics of each learned policy, per seed: one row per metric and block of
    ``updates_per_chunk`` updates (its mean; blocks without a finished training episode have no JCT row), and
    ``curve_check_jct_h``, the greedy JCT on the curve windows at the warm start (step 0) and at the end of each
    block (what the ``converged`` gate reads, step 0 excluded). ``step`` is the number of PPO updates done at the
    end of the block, ``env_steps`` the environment steps per seed (PPO only). Behaviour cloning, for runs that
    start from the clone: per cloning batch (``bc_round``) the cross-entropy to the teacher, the greedy agreement
    with its picks and with its levels (on the batch trained on) and the policy entropy, each the mean of the batch's
    last epoch, and ``bc_own_agreement``, the clone's pick agreement with the teacher's relabelling on the episodes
    it drove itself (DAgger), measured before it trained on them (held out, on its own state distribution);
    ``clone_agreement`` is the last batch's agreement.
    Diagnostics: ``curve_cut_episodes`` (share of training episodes longer than ``rollout_len``, bootstrapped),
    ``curve_q_loss`` (the counterfactual critic's regression loss), ``curve_credit_spread`` (mean absolute gap
    between the per-agent and the team advantage: what per-agent credit changes), ``curve_adv_clip_frac``."""
    out = []
    steps = p.num_envs * p.rollout_len
    per = p.updates_per_chunk
    for n in names:
        v = tr.names.index(n)
        for i, s in enumerate(tr.seeds):
            k = v * len(tr.seeds) + i
            if "check_jct_h_start" in tr.curves:
                out.append({"policy": n, "seed": int(s), "metric": "curve_check_jct_h",
                            "value": float(tr.curves["check_jct_h_start"][k]), "unit": "h", "step": 0,
                            "env_steps": 0})
            if tr.bc is not None:
                bc = np.asarray(tr.bc[k], float)
                for r, vals in enumerate(bc):
                    for (metric, unit), val in zip(BC_METRICS, vals, strict=True):
                        if np.isfinite(val):
                            out.append({"policy": n, "seed": int(s), "metric": metric, "value": float(val),
                                        "unit": unit, "bc_round": r + 1})
                if np.isfinite(bc[-1, 1]):  # the clone as PPO receives it (claim clone_matches_teacher)
                    out.append({"policy": n, "seed": int(s), "metric": "clone_agreement", "value": float(bc[-1, 1]),
                                "unit": "fraction"})
            for j, val in enumerate(np.asarray(tr.curves["check_jct_h"][k], float)):
                out.append({"policy": n, "seed": int(s), "metric": "curve_check_jct_h", "value": float(val),
                            "unit": "h", "step": (j + 1) * per, "env_steps": (j + 1) * per * steps})
            for key, (metric, unit) in CURVE_METRICS.items():
                if key not in tr.curves:
                    continue
                c = np.asarray(tr.curves[key][k], float)
                for j in range(c.size // per):
                    blk = c[j * per:(j + 1) * per]
                    if not np.isfinite(blk).any():
                        continue
                    out.append({"policy": n, "seed": int(s), "metric": metric, "value": float(np.nanmean(blk)),
                                "unit": unit, "step": (j + 1) * per, "env_steps": (j + 1) * per * steps})
    return out


def _training_rows(ctx: RunContext, trained: dict[str, pipeline.Trained], p: MaifsParams) -> tuple[list, list]:
    """Curve rows of every trained (not untrained) learned policy and one ``train_wall_s`` row per training run."""
    curves, rows, done = [], [], set()
    for n, tr in trained.items():
        if ctx.policies[n].untrained:
            continue
        curves += _curve_rows(tr, [n], p)
        if id(tr) not in done:
            done.add(id(tr))
            rows += metric_rows(n, {"train_wall_s": (tr.seconds, "s")}, seeds=[int(tr.seeds[0])])
    return curves, rows


def _curve_figure(ctx: RunContext, curves: list[dict]) -> None:
    if not curves:
        return
    fig, ax = figure(2, 2, w=5.5)
    cv = pd.DataFrame(curves)
    cv = cv[cv["step"].notna()] if "step" in cv else cv
    for axi, (metric, label) in zip(ax.ravel(), (("curve_check_jct_h", "greedy JCT, curve windows (h)"),
                                                  ("curve_train_jct_h", "training-episode JCT (h)"),
                                                  ("curve_value_loss", "value loss (normalised)"),
                                                  ("curve_entropy", "policy entropy")), strict=True):
        lines_with_ci(axi, cv, metric, "step", xlabel="PPO updates", ylabel=label)
    ctx.save_figure(fig, "learning_curves")


def ablation(ctx: RunContext) -> pd.DataFrame:
    """MAIFS vs itself without attention, without the coordination graph, with fixed allocation, and untrained;
    the decoupled (Tiresias + Synergy-tune) and single-agent (DL2-style) baselines; learning curves and training
    diagnostics (value loss, entropy, explained variance, KL, conflict and release rates) of every learned
    policy, per chunk of updates."""
    p: MaifsParams = ctx.params
    spec, cl, d = _setup(ctx)
    windows, dropped = _trace_windows(ctx, d, spec, p)
    rows, _ = _run_policies(ctx, list(ctx.policies), windows, d, spec, cl, p)
    curves, train_rows = _training_rows(ctx, _train(ctx, d, p, cl, list(ctx.policies)), p)
    df = pd.concat([pd.DataFrame(rows + train_rows), pd.DataFrame(curves)], ignore_index=True)
    _curve_figure(ctx, curves)
    return pd.concat([df, pd.DataFrame(_filter_rows({**d.dropped, **dropped})),
                      pd.DataFrame(_workload_rows(windows, spec, p.load))], ignore_index=True)


def heavy_tail(ctx: RunContext) -> pd.DataFrame:
    """Sensitivity to the duration cap [ours]: the Philly evaluation windows at the headline load with fair-share
    durations capped at each of ``tail_caps_h`` hours (0 = uncapped: the trace's heavy tail, where long jobs block
    and preemption matters most). Learned policies are the ones trained at the headline cap ``cap_duration_h``
    (the training is shared with the other Philly experiments), so the uncapped condition also measures how the
    trained policy transfers. Column ``cap_h``; ``best_baseline`` and the gain over it per cap, as in the load
    sweep."""
    p: MaifsParams = ctx.params
    if not p.tail_caps_h:
        raise ValueError("heavy_tail needs params.tail_caps_h")
    spec, cl, d = _setup(ctx)
    rows: list[dict] = []
    dropped: dict[str, int] = {}
    heur = [n for n, q in ctx.policies.items() if isinstance(q, HeuristicPolicy)]
    for cap in p.tail_caps_h:
        q = dataclasses.replace(p, cap_duration_h=float(cap))
        windows, dr = _trace_windows(ctx, d, spec, q)
        dropped.update(dr)
        cond = {"cap_h": float(cap)}
        r, _ = _run_policies(ctx, list(ctx.policies), windows, d, spec, cl, p, extra=cond,
                             tag=f" @ cap {cap:g} h" if cap else " uncapped")
        rows += r + best_baseline_rows(r, heur) + _workload_rows(windows, spec, p.load, cond)
    df = pd.DataFrame(rows)
    gain = boundary_rows(df, "maifs", by="cap_h")
    fig, ax = figure(2, 1, w=5.0)
    pol = df[df["policy"] != "-"]
    xl = "duration cap (h; 0 = uncapped)"
    lines_with_ci(ax[0, 0], pol, "avg_jct_h", "cap_h", xlabel=xl, ylabel="average JCT (h)")
    if gain:
        lines_with_ci(ax[0, 1], pd.DataFrame(gain), "jct_reduction_vs_best_pct", "cap_h", xlabel=xl,
                      ylabel="JCT reduction vs best baseline (%)")
        ax[0, 1].axhline(0.0, color="k", lw=0.8)
    ctx.save_figure(fig, "cap")
    return pd.concat([df, pd.DataFrame(gain), pd.DataFrame(_filter_rows({**d.dropped, **dropped}))],
                     ignore_index=True)


def pick_grid_point(rows: pd.DataFrame, policy: str) -> tuple[float, float]:
    """The tuning rule, fixed before any tuning result was read: the ``(lr, ent_coef)`` grid point of ``policy``
    with the lowest seed-mean ``check_jct_h`` (greedy JCT of the trained network on the check windows, which are
    training windows: never the evaluation windows); ties go to the first point in grid order (rows' order)."""
    sel = rows[(rows["policy"] == policy) & (rows["metric"] == "check_jct_h")]
    if sel.empty:
        raise ValueError(f"no check_jct_h rows for policy {policy!r}")
    means = sel.groupby(["lr", "ent_coef"], sort=False)["value"].mean()
    lr, ent = means.index[int(np.argmin(means.to_numpy()))]
    return float(lr), float(ent)


def tuning(ctx: RunContext) -> pd.DataFrame:
    """PPO hyper-parameters of every learned family (MAIFS and the DL2-style baseline), the same effort for both:
    each trains at every ``(lr, ent_coef)`` of one shared grid, on Philly's training windows, with the reported
    budget, on tuning seeds disjoint from the reported ones. Rows per grid point and seed: ``check_jct_h`` (greedy
    JCT on the check windows, the selection score), its untrained reference, the gates, the last-fifth training
    JCT, the mean approximate KL per update and the entropy change; per policy ``chosen_lr`` /
    ``chosen_ent_coef`` (:func:`pick_grid_point`), which the policy configs must carry
    (tests/papers/maifs/test_tuning_choices.py)."""
    p: MaifsParams = ctx.params
    _, cl, d = _setup(ctx)
    seeds = ctx.seeds() + p.tuning_seed_offset
    grid = [(float(lr), float(ent)) for lr in p.tune_lr for ent in p.tune_ent_coef]
    if not grid:
        raise ValueError("tuning needs params.tune_lr and params.tune_ent_coef")
    rows: list[dict] = []
    for name, pol in ctx.policies.items():
        if not isinstance(pol, RLPolicy) or pol.untrained:
            raise ValueError(f"tuning trains learned policies only; {name!r} is not one")
        for lr, ent in grid:
            cand = dataclasses.replace(pol, lr=lr, ent_coef=ent)
            tr = pipeline.train_policies({name: cand}, d, p, cl, ctx.hardware.lease_s, seeds, ctx.cache,
                                         ctx.progress, checkpoints=ctx.checkpointer, trace="philly")
            g = pipeline.gates(tr, name, p)
            jct, ent_c = np.asarray(tr.curves["jct_h"], float), np.asarray(tr.curves["entropy"], float)
            kl = np.asarray(tr.curves["approx_kl"], float).mean(axis=1)
            cond = {"lr": lr, "ent_coef": ent}
            rows += metric_rows(name, {
                "check_jct_h": (tr.check["trained"], "h"),
                "check_jct_prior_h": (tr.check["untrained"], "h"),
                "converged": (g["converged"], "bool"),
                "beats_prior": (g["beats_prior"], "bool"),
            }, seeds=seeds, **cond)
            diag = metric_rows(name, {  # training diagnostics: a seed whose curve has no finished episode has none
                "train_jct_last_fifth_h": (pipeline.window_mean(jct, "last"), "h"),
                "mean_approx_kl": (kl, "nats"),
                "entropy_change": (pipeline.window_mean(ent_c, "last") - pipeline.window_mean(ent_c, "first"), "nats"),
            }, seeds=seeds, **cond)
            rows += [r for r in diag if np.isfinite(r["value"])]
            rows += metric_rows(name, {"train_wall_s": (tr.seconds, "s")}, seeds=[int(seeds[0])], **cond)
    df = pd.DataFrame(rows)
    chosen = []
    for name in ctx.policies:
        lr, ent = pick_grid_point(df, name)
        chosen += metric_rows(name, {"chosen_lr": (lr, "lr"), "chosen_ent_coef": (ent, "coef")},
                              seeds=[int(seeds[0])])
    _tuning_figure(ctx, df, p)
    return pd.concat([df, pd.DataFrame(chosen)], ignore_index=True)


def _tuning_figure(ctx: RunContext, df: pd.DataFrame, p: MaifsParams) -> None:
    names = list(dict.fromkeys(df["policy"]))
    fig, axes = figure(ncols=len(names), w=3.2, h=3.0)
    for ax, name in zip(axes[0], names, strict=True):
        sel = df[(df["policy"] == name) & (df["metric"] == "check_jct_h")]
        for ent in p.tune_ent_coef:
            m = sel[sel["ent_coef"] == ent].groupby("lr")["value"].mean()
            ax.plot(m.index, m.to_numpy(), "o-", label=f"ent_coef {ent:g}")
        un = df[(df["policy"] == name) & (df["metric"] == "check_jct_prior_h")]["value"].mean()
        ax.axhline(un, color="k", lw=0.8, ls=":", label="prior (warm start)")
        ax.set_xscale("log")
        ax.set_xlabel("lr (log)")
        ax.set_title(name, fontsize=8)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("greedy JCT on the check windows (h)")
    axes[0][0].legend(fontsize=6)
    ctx.save_figure(fig, "jct_by_hyperparameters")


__all__ = ["ablation", "best_baseline_rows", "boundary_rows", "headline_philly", "headline_saturn", "heavy_tail",
           "load_sweep", "pick_grid_point", "tuning"]
