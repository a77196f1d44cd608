"""FedFoA experiments (``conf/experiment/fedfoa/*.yaml``). Every table on CIFAR-10 uses the vendored JPEG q75 copy.

* ``headline`` -- homogeneous clients, Dirichlet non-IID: FedFoA vs FedBYOL, FedU, FedEMA, local-only and the
  public-set KD baseline, plus FedEMA + FedFoA (compatibility); linear probe and 1 % / 10 % fine-tuning.
* ``iid`` -- the same comparison on an IID split.
* ``hetero`` -- heterogeneous encoders (small and large CNNs): FedFoA vs local-only vs KD (parameter averaging
  cannot run here).
* ``simsiam`` -- SimSiam backbone: FedFoA vs FedSimSiam vs local-only.
* ``ablation`` -- alignment weight lambda and calibration, evaluated on a validation slice of the training split.
* ``calibration`` -- the SSL budget: local-only SSL against the untrained encoder over a small grid (dataset and
  image size, encoder, clients, local steps), probe curves per chunk of rounds
  (:mod:`mlsys_repro.papers.fedfoa.calibration`).
* ``comm`` -- exact bytes per client per round of every method for both encoder sizes (no training).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from mlsys_repro.common.repro import RunContext, metric_rows
from mlsys_repro.common.repro.plots import bars_with_ci, figure, lines_with_ci
from mlsys_repro.papers.fedfoa.calibration import run_calibration
from mlsys_repro.papers.fedfoa.federation import SHARE_CODE, FedShape, bytes_per_round
from mlsys_repro.papers.fedfoa.fedssl_runs import run_fedssl
from mlsys_repro.papers.fedfoa.models import NetSpec
from mlsys_repro.papers.fedfoa.schemas import CommParams

DATA_NOTE = "CIFAR-10 = vendored JPEG q75 copy"


def _figures(ctx: RunContext, rows: list[dict]) -> None:
    df = pd.DataFrame(rows)
    title = f"{ctx.experiment}: {ctx.params.split_name}, {ctx.params.backbone} ({DATA_NOTE})"
    metrics = [m for m in ("probe_acc", "ft_acc_1pct", "ft_acc_10pct") if m in set(df["metric"])]
    fig, axes = figure(ncols=len(metrics), w=4.6)
    for ax, m in zip(axes[0], metrics, strict=True):
        bars_with_ci(ax, df, m, ylabel=f"{m} (%)")
        vals = df[df["metric"] == m]["value"]
        ax.set_ylim(max(0.0, vals.min() - 5), vals.max() + 3)
    axes[0][0].set_title(title, fontsize=8, loc="left")
    ctx.save_figure(fig, "accuracy")
    archs = sorted(m for m in set(df["metric"]) if m.startswith("probe_acc_cnn"))
    if len(archs) > 1:
        fig, axes = figure(ncols=len(archs), w=4.6)
        for ax, m in zip(axes[0], archs, strict=True):
            bars_with_ci(ax, df, m, ylabel=f"{m} (%)")
        ctx.save_figure(fig, "per_arch")
    if "round" in df and df["round"].notna().any():
        cur = df[df["round"].notna()]
        fig, axes = figure(ncols=2, w=5.0)
        lines_with_ci(axes[0][0], cur, "ssl_loss", x="round", ylabel="SSL loss (client mean)")
        lines_with_ci(axes[0][1], cur, "align_loss", x="round", ylabel="||R_k - R_g||^2/d^2 (diagnostic)")
        ctx.save_figure(fig, "rounds")
    if "probe_acc_round" in set(df["metric"]):
        cur = df[df["metric"].isin(["probe_acc_round", "cka_round"])]
        fig, axes = figure(ncols=2, w=5.0)
        lines_with_ci(axes[0][0], cur, "probe_acc_round", x="local_steps_done", ylabel="probe accuracy (%)")
        if "random_init" in set(df["policy"]):
            ref = df[(df["policy"] == "random_init") & (df["metric"] == "probe_acc")]["value"].mean()
            axes[0][0].axhline(ref, color="k", ls="--", lw=0.8, label="untrained encoder")
            axes[0][0].legend(fontsize=7)
        lines_with_ci(axes[0][1], cur, "cka_round", x="local_steps_done", ylabel="cross-client linear CKA")
        ctx.save_figure(fig, "monitor")


def fedssl(ctx: RunContext) -> list[dict]:
    """The FedSSL comparison; conf/experiment/fedfoa/{headline,iid,hetero,simsiam,ablation}.yaml name it."""
    rows = run_fedssl(ctx)
    _figures(ctx, rows)
    return rows


fedssl.extra_policies_ok = True  # the random_init reference rows


def calibration(ctx: RunContext) -> list[dict]:
    return run_calibration(ctx)


calibration.extra_policies_ok = True  # the random_init reference rows


def comm(ctx: RunContext) -> list[dict]:
    """Exact payload bytes per client per round (float32) for each policy and encoder; deterministic."""
    p: CommParams = ctx.params
    rows = []
    for arch in p.archs:
        spec = NetSpec(arch, p.in_channels, p.proj_dim, p.hidden)
        shape = FedShape(groups=((spec, 1),), rank=p.rank, kd_path=True)
        for name, pol in ctx.policies.items():
            b = bytes_per_round(shape, pol.method, pol.foa, p.n_public)
            rows += metric_rows(name, {"bytes_up_per_round": (b["up"], "B"),
                                       "bytes_down_per_round": (b["down"], "B"),
                                       "needs_public_data": (float(pol.method == "kd"), "bool"),
                                       "exchanges_params": (float(SHARE_CODE[pol.method] > 0), "bool")},
                                seeds=[0], arch=arch)
    df = pd.DataFrame(rows)
    fig, axes = figure(ncols=1, w=7.0)
    ax = axes[0][0]
    sel = df[df["metric"] == "bytes_up_per_round"]
    names = list(dict.fromkeys(sel["policy"]))
    width = 0.8 / len(p.archs)
    for i, arch in enumerate(p.archs):
        v = [float(sel[(sel["policy"] == n) & (sel["arch"] == arch)]["value"].iloc[0]) for n in names]
        ax.bar(np.arange(len(names)) + i * width, np.maximum(v, 1.0), width, label=arch)
    ax.set_yscale("log")
    ax.set_xticks(np.arange(len(names)) + width * (len(p.archs) - 1) / 2, names, rotation=30, ha="right")
    ax.set_ylabel("upload bytes / client / round (log; 1 = nothing)")
    ax.legend(fontsize=8)
    ctx.save_figure(fig, "bytes")
    return rows
