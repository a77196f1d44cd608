"""SSL budget calibration: where does local self-supervised training beat the untrained encoder?

A federated-SSL comparison means something only if the encoders learn: at the old default budget (12 SGD steps per
client) every method probed at the level of the untrained encoder. This experiment runs local-only SSL at each
point of a small grid (dataset and image size, encoder, clients, local steps per round) and probes every client
after every chunk of rounds, so one run per point gives the whole probe-accuracy-vs-steps curve against the probe
of the same untrained weights. Per point and seed it writes

* ``untrained_gap_round`` / ``probe_acc_round`` / ``cka_round`` per chunk (``local_steps_done`` = SSL steps per
  client so far; the learning rate follows the run's cosine schedule, so an early point is a lower bound on what a
  run of that length would reach);
* ``beats_untrained`` (0/1, final round, gap >= ``params.gate_pp``), ``steps_to_gate`` (the first
  ``local_steps_done`` at which the gap reached ``gate_pp``; the run's total if never, with ``reached_gate`` = 0);
* ``train_seconds`` and ``seconds_per_kstep`` (wall seconds per 1000 local steps of all clients of one seed: the
  cost model used to size the other experiments).

The cheapest point whose gap clears the gate in every seed is the setting the other experiments should use (the
README says which was chosen and why).
"""

from __future__ import annotations

import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd

from mlsys_repro.common.repro.plots import figure
from mlsys_repro.common.repro.results import metric_rows
from mlsys_repro.papers.fedfoa.data import available, load_ssl_data
from mlsys_repro.papers.fedfoa.federation import FedShape, run_train
from mlsys_repro.papers.fedfoa.fedssl_runs import (
    DatasetUnavailable,
    make_monitor,
    partitions,
    policy_knobs,
    policy_rows,
    random_init_rows,
)
from mlsys_repro.papers.fedfoa.models import NetSpec
from mlsys_repro.papers.fedfoa.schemas import CalibPoint, CalibrationParams


def point_label(pt: CalibPoint) -> str:
    return f"{pt.dataset}/{pt.image_size}px/{pt.arch}/{pt.clients}c/{pt.local_steps}st"


def steps_to_gate(gap: np.ndarray, steps: np.ndarray, gate: float) -> tuple[np.ndarray, np.ndarray]:
    """``(first steps at which gap >= gate, reached)`` per seed from per-chunk gaps ``[S, C]`` at ``steps [C]``;
    a seed that never reaches the gate gets the last step count and reached = 0."""
    hit = gap >= gate
    reached = hit.any(axis=1)
    first = np.where(reached, steps[np.argmax(hit, axis=1)], steps[-1])
    return first.astype(float), reached.astype(float)


def run_calibration(ctx) -> list[dict]:
    p: CalibrationParams = ctx.params
    seeds = ctx.seeds()
    hw = ctx.hardware
    proj_dim, hidden = hw.clients[0].proj_dim, hw.hidden
    if len(ctx.policies) != 1:
        raise ValueError("calibration runs exactly one policy, local-only SSL (policy=fedfoa/local)")
    ((name, pol),) = ctx.policies.items()
    if pol.method != "local" or pol.foa:
        raise ValueError("calibration runs exactly one policy, local-only SSL (policy=fedfoa/local)")
    datasets: dict[str, object] = {}
    rows: list[dict] = []
    ctx.progress.start(len(p.grid), "grid points")
    for pt in p.grid:
        if not available(pt.dataset, ctx.data_dir):
            raise DatasetUnavailable(f"calibration point {point_label(pt)}: dataset {pt.dataset} is not installed")
        if pt.dataset not in datasets:
            datasets[pt.dataset] = load_ssl_data(pt.dataset, ctx.data_dir, n_pool=p.n_pool, n_public=0, n_val=p.n_val,
                                              n_test=p.n_test)
        data = datasets[pt.dataset]
        q = dataclasses.replace(p, image_size=pt.image_size, local_steps=pt.local_steps, grid=[pt])
        spec = NetSpec(pt.arch, data.pool_x.shape[-1], proj_dim, hidden)
        shape = FedShape(groups=((spec, pt.clients),), rounds=q.rounds, local_steps=q.local_steps,
                         batch_size=q.batch_size, rank=q.rank, rel_samples=q.rel_samples, kd_path=False,
                         image_size=q.image_size, init=q.init)
        kn = policy_knobs(shape, pol, q)
        idx, counts, _ = partitions(data.pool_y, pt.clients, q.alpha, seeds, q.min_per_client)
        cond = {"split": q.split_name, "backbone": q.backbone, "point": point_label(pt), "dataset": pt.dataset,
                "image_size": pt.image_size, "arch": pt.arch, "clients": pt.clients,
                "local_steps": pt.local_steps}
        rand_rows, rand_acc = random_init_rows(shape, q, data, seeds, cond, ctx.cache)
        rows += rand_rows
        args = (jax.vmap(jax.random.key)(jnp.asarray(seeds)), jnp.asarray(idx), jnp.asarray(counts),
                jnp.asarray(data.pool_x), jnp.asarray(data.public_x[:1]), jnp.asarray(data.mean),
                jnp.asarray(data.std))
        mon = make_monitor(shape, q, data, len(seeds), ctx.cache)
        t0 = time.monotonic()
        out = jax.block_until_ready(run_train(shape, kn, *args, monitor=mon, cache=ctx.cache))
        t_train = time.monotonic() - t0
        rows += policy_rows(name, pol, shape, q, data, out, seeds, rand_acc, t_train, cond, ctx.progress, ctx.cache)
        gaps = np.asarray(out.monitor["probe_acc"]).mean(-1) - rand_acc[:, None]  # [S, C]
        per = shape.rounds // gaps.shape[1]
        steps = (np.arange(1, gaps.shape[1] + 1) * per) * shape.local_steps
        first, reached = steps_to_gate(gaps, steps, q.gate_pp)
        total_ksteps = shape.rounds * shape.local_steps * pt.clients / 1000
        rows += metric_rows(name, {
            "steps_to_gate": (first, "steps"),
            "reached_gate": (reached, "bool"),
            "seconds_per_kstep": (np.full(len(seeds), t_train / len(seeds) / total_ksteps), "s"),
        }, seeds=seeds, **cond)
        ctx.progress.log(f"{point_label(pt)}: untrained {rand_acc.mean():.2f}%, final gap "
                         f"{gaps[:, -1].mean():+.2f} pp, gate reached in {int(reached.sum())}/{len(seeds)} seeds, "
                         f"train {t_train:.0f}s")
    _figure(ctx, rows)
    return rows


def _figure(ctx, rows: list[dict]) -> None:
    df = pd.DataFrame(rows)
    cur = df[df["metric"] == "untrained_gap_round"]
    fig, axes = figure(ncols=1, w=7.0)
    ax = axes[0][0]
    for label, g in cur.groupby("point", sort=False):
        m = g.groupby("local_steps_done")["value"].mean()
        ax.plot(m.index, m.to_numpy(), marker="o", ms=3, label=str(label))
    ax.axhline(ctx.params.gate_pp, color="k", ls="--", lw=0.8, label=f"gate {ctx.params.gate_pp:g} pp")
    ax.axhline(0.0, color="grey", lw=0.5)
    ax.set_xlabel("local SSL steps per client")
    ax.set_ylabel("probe accuracy - untrained encoder (pp)")
    ax.set_title("SSL budget calibration: local-only SSL vs the untrained encoder (mean over seeds)", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ctx.save_figure(fig, "gap_vs_steps")
