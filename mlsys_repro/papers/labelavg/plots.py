"""Figures of the labelavg experiments (accuracy vs alpha, accuracy vs round, traffic, attack quality, images)."""

from __future__ import annotations

import pandas as pd

from mlsys_repro.common.repro.plots import bars_with_ci, figure, lines_with_ci


def accuracy_figures(ctx, rows) -> None:
    df = pd.DataFrame(rows)
    traces = list(dict.fromkeys(df["trace"]))
    fig, axes = figure(ncols=len(traces), w=4.2, h=3.4)
    for ax, tr in zip(axes[0], traces, strict=True):
        lines_with_ci(ax, df[df["trace"] == tr], "test_acc", x="alpha", xlabel="Dirichlet alpha",
                      ylabel="mean client test accuracy", logx=True)
        ax.set_title(tr)
    ctx.save_figure(fig, "vs_alpha")

    alphas = sorted(df["alpha"].unique())
    mid = alphas[len(alphas) // 2]
    cur = df[(df["metric"] == "curve_test_acc") & (df["alpha"] == mid)]
    fig, axes = figure(ncols=len(traces), w=4.2, h=3.4)
    for ax, tr in zip(axes[0], traces, strict=True):
        lines_with_ci(ax, cur[cur["trace"] == tr], "curve_test_acc", x="round", xlabel="round",
                      ylabel=f"test accuracy (alpha={mid:g})")
        ax.set_title(tr)
    ctx.save_figure(fig, "vs_round")

    up = df[(df["metric"] == "upload_bytes_per_client_round") & (df["trace"] == traces[0]) & (df["alpha"] == mid)]
    names = list(dict.fromkeys(up["policy"]))
    vals = [float(up[up["policy"] == n]["value"].iloc[0]) for n in names]
    fig, axes = figure(w=5.0, h=3.4)
    ax = axes[0][0]
    ax.bar(range(len(names)), vals, color="tab:orange")
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_ylabel("upload bytes per client per round")
    for i, v in enumerate(vals):
        ax.text(i, v, f"{v:,.0f}", ha="center", va="bottom", fontsize=7)
    ax.set_title(traces[0])
    ctx.save_figure(fig, "upload_bytes")


def attack_figures(ctx, rows, images: dict) -> None:
    """Quality panels per (method, attacker): PSNR to the closest private image, membership advantage (private -
    non-member, dB), attack accuracy; then the reconstructions."""
    df = pd.DataFrame(rows)
    attacks = df[df["attacker"] != "none"]
    if "reference" in attacks:
        attacks = attacks[attacks["reference"].isna() | (attacks["reference"] == "private")]
    metrics = [("psnr_db", "PSNR to closest private image (dB)"),
               ("membership_adv_db", "membership advantage (dB):\nprivate - non-member"),
               ("attack_acc", "attack accuracy (evaluator)")]
    fig, axes = figure(ncols=3, w=4.6, h=3.6)
    for ax, (m, label) in zip(axes[0], metrics, strict=True):
        # attack accuracy and PSNR (pixels in [0, 1]) cannot be negative; the advantage can
        bars_with_ci(ax, attacks, m, by="policy", hue="attacker", ylabel=label, nonneg=m != "membership_adv_db")
    ctx.save_figure(fig, "quality")
    if images:
        reconstruction_grid(ctx, {k: v for k, v in images.items() if k[1] in ("zo", "sign", "whitebox", "surrogate")}
                            or images)


def reconstruction_grid(ctx, images: dict) -> None:
    """Rows: each (method, attacker)'s reconstruction of every class the target holds, then the target's private
    image closest (PSNR) to that method's L-Attack (zo) reconstruction."""
    rows_spec = []
    methods = list(dict.fromkeys(m for m, _ in images))
    for m in methods:
        for (mm, a), v in images.items():
            if mm == m:
                rows_spec.append((f"{m} / {a}", v[0], v[2], v[3]))
        key = (m, "zo") if (m, "zo") in images else next(k for k in images if k[0] == m)
        v = images[key]
        rows_spec.append((f"{m}: closest private", v[1], v[2], v[3]))
    first = images[next(iter(images))]
    held, classes = first[2], first[3]
    cols = [b for b in range(classes.size) if held[b] and (b == 0 or classes[b] != classes[b - 1])]
    if not cols:
        return
    fig, axes = figure(ncols=len(cols), nrows=len(rows_spec), w=0.75, h=0.75)
    for r, (label, imgs, _, cl) in enumerate(rows_spec):
        for c, b in enumerate(cols):
            ax = axes[r][c]
            im = imgs[b]
            ax.imshow(im[..., 0] if im.shape[-1] == 1 else im, cmap="gray" if im.shape[-1] == 1 else None,
                      vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            if r == 0:
                ax.set_title(str(int(cl[b])), fontsize=7)
        axes[r][0].set_ylabel(label, rotation=0, ha="right", va="center", fontsize=6)
    ctx.save_figure(fig, "reconstructions")
