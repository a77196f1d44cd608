"""Skeleton experiments (rows and figures only): the headline comparison of the two orders. Settings run through
:mod:`skeleton.pipeline`."""

from __future__ import annotations

import pandas as pd

from mlsys_repro.common.repro import RunContext, metric_rows
from mlsys_repro.common.repro.plots import bars_with_ci, figure
from skeleton.pipeline import Setting, run_setting


def headline(ctx: RunContext):
    """Mean and 95th-percentile wait of each policy at ``params.load`` (registered in
    conf/experiment/skeleton/headline.yaml)."""
    p = ctx.params
    rows = []
    ctx.progress.start(len(ctx.policies), "policies")
    for name in ctx.policies:
        m = run_setting(ctx, Setting(name, p.num_jobs, p.load))
        rows += metric_rows(name, m.as_metrics(), seeds=m.seeds, load=p.load)
        ctx.progress.update(1, name)
    df = pd.DataFrame(rows)
    fig, ax = figure(ncols=2)
    bars_with_ci(ax[0, 0], df, "mean_wait_s", ylabel="mean wait (simulated s)")
    bars_with_ci(ax[0, 1], df, "p95_wait_s", ylabel="95th-percentile wait (simulated s)")
    ctx.save_figure(fig, "wait")
    return rows
