"""Experiments: test accuracy and traffic of every method (``accuracy``), and L-Attack against each (``attack``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import optax

from mlsys_repro.common.fl.clients import Federation, init_opt, init_params, local_train, make_federation
from mlsys_repro.common.fl.partition import dirichlet_partition, pad_partitions, split_public
from mlsys_repro.common.models.data import STATS, load_image_data
from mlsys_repro.common.repro import RunContext, metric_rows
from mlsys_repro.common.traces.images import fashion_mnist_dir
from mlsys_repro.papers.labelavg import plots
from mlsys_repro.papers.labelavg.attack import AttackSetup, make_attacks
from mlsys_repro.papers.labelavg.fd import make_train, traffic
from mlsys_repro.papers.labelavg.metrics import closest_match
from mlsys_repro.papers.labelavg.models import REGISTRY
from mlsys_repro.papers.labelavg.schemas import FDSchedule

# the trace column of every row; the CIFAR-10 copy is lossy JPEG (quality ~75), and says so
TRACE = {"mnist": "mnist", "fashion_mnist": "fashion_mnist", "cifar10_jpeg": "cifar10_jpeg_q75"}

# The `plateaued` gate, fixed (2026-12-05) before any run of this schedule: over the last quarter of the rounds
# the seed-mean accuracy curve of a (method, alpha) condition gained less than 2 percentage points.
PLATEAU_TOL = 0.02


def last_quarter_gain(curve: np.ndarray) -> np.ndarray:
    """``curve [..., R]`` -> accuracy gained over the last ``max(1, R // 4)`` rounds (``[...]``; 0 if R = 1)."""
    r = curve.shape[-1]
    q = min(max(1, r // 4), r - 1)
    return curve[..., -1] - curve[..., -1 - q]


def plateaued(curves: np.ndarray, tol: float = PLATEAU_TOL) -> bool:
    """The gate: ``curves [S, R]`` (one per seed) -> did the seed-mean curve gain less than ``tol`` at the end?"""
    if curves.ndim != 2 or curves.shape[1] < 2:
        raise ValueError(f"need curves [seeds, rounds >= 2], got shape {curves.shape}")
    return bool(last_quarter_gain(curves.mean(0)) < tol)


@dataclass(frozen=True)
class FDData:
    """One dataset split for federated distillation (device arrays in ``arrays``; host labels for splitting)."""

    name: str
    arrays: dict[str, jax.Array]
    y_private: np.ndarray
    in_shape: tuple[int, int, int]
    num_classes: int


def load_fd_data(name: str, data_dir, sched: FDSchedule, seed: int = 0) -> FDData:
    """Class-stratified ``n_train``/``n_test`` subsets; the public set is carved from the train subset."""
    d = load_image_data(name, data_dir, n_train=sched.n_train, n_test=sched.n_test, seed=seed)
    priv, pub = split_public(d.y_train, sched.n_public, seed=seed)
    arrays = {
        "x_train": jnp.asarray(d.x_train[priv]), "y_train": jnp.asarray(d.y_train[priv]),
        "x_pub": jnp.asarray(d.x_train[pub]), "y_pub": jnp.asarray(d.y_train[pub]),
        "x_test": jnp.asarray(d.x_test), "y_test": jnp.asarray(d.y_test),
    }
    return FDData(name, arrays, d.y_train[priv], d.in_shape, d.num_classes)


def available(name: str, data_dir) -> bool:
    return name != "fashion_mnist" or fashion_mnist_dir(data_dir) is not None


def client_splits(y: np.ndarray, num_clients: int, alpha: float, seeds, min_per_client: int
                  ) -> tuple[list[list[np.ndarray]], jax.Array, jax.Array]:
    """Per-seed Dirichlet splits, padded to one shape (``[S, K, N]`` indices, ``[S, K]`` counts)."""
    parts = [dirichlet_partition(y, num_clients, alpha, seed=int(s), min_per_client=min_per_client) for s in seeds]
    padded = [pad_partitions(p, size=y.size) for p in parts]
    return parts, jnp.asarray(np.stack([p[0] for p in padded])), jnp.asarray(np.stack([p[1] for p in padded]))


def run_federation(fed: Federation, policy, sched: FDSchedule, data: FDData, keys, idx, counts) -> dict:
    train = jax.jit(jax.vmap(make_train(fed, policy, sched, data.num_classes), in_axes=(0, 0, 0, None)))
    return train(keys, idx, counts, data.arrays)


def _shapes(arrays):
    return {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in arrays.items()}


def accuracy(ctx: RunContext):
    """Test accuracy (mean and worst client) and exact bytes per client per round, per method, dataset, alpha."""
    p, hw, sched = ctx.params, ctx.hardware, ctx.params.fd
    seeds = ctx.seeds()
    keys = jnp.stack([jax.random.key(int(s)) for s in seeds])
    rows = []
    todo = [d for d in p.datasets if available(d, ctx.data_dir)]
    for d in sorted(set(p.datasets) - set(todo)):
        ctx.progress.log(f"{d} not installed (Debian package dataset-fashion-mnist); skipped")
    ctx.progress.start(len(todo) * len(ctx.policies))
    for ds in todo:
        data = load_fd_data(ds, ctx.data_dir, sched)
        for name, pol in ctx.policies.items():
            fed = make_federation(hw.client_archs(pol.method, pol.homogeneous), data.in_shape, data.num_classes,
                                  REGISTRY)
            led = traffic(fed, pol, sched, data.num_classes, _shapes(data.arrays), data.y_private.size)
            # every (alpha, seed) pair is one row of a single vmapped run: one compile per dataset and method
            splits = [client_splits(data.y_private, hw.num_clients, a, seeds, sched.min_per_client) for a in p.alphas]
            out = run_federation(fed, pol, sched, data, jnp.concatenate([keys] * len(p.alphas)),
                                 jnp.concatenate([s[1] for s in splits]), jnp.concatenate([s[2] for s in splits]))
            acc_all, curve_all = np.asarray(out["acc"]), np.asarray(out["curve"])
            for a_i, alpha in enumerate(p.alphas):
                acc, curve = (v[a_i * len(seeds):(a_i + 1) * len(seeds)] for v in (acc_all, curve_all))
                cond = {"trace": TRACE[ds], "alpha": float(alpha), "clients": hw.num_clients}
                rows += metric_rows(name, {
                    "test_acc": (acc.mean(1), "fraction"),
                    "test_acc_worst_client": (acc.min(1), "fraction"),
                    "upload_bytes_per_client_round": (np.full(len(seeds), led.per_client_round("up")), "B"),
                    "download_bytes_per_client_round": (np.full(len(seeds), led.per_client_round("down")), "B"),
                    "last_quarter_gain": (last_quarter_gain(curve), "fraction"),
                    "plateaued": (np.full(len(seeds), float(plateaued(curve))), "0/1"),
                }, seeds=seeds, **cond)
                for r in range(curve.shape[1]):
                    rows += metric_rows(name, {"curve_test_acc": (curve[:, r], "fraction")}, seeds=seeds, **cond,
                                        round=r + 1)
            ctx.progress.update()
    if rows:  # none when every dataset was skipped (not installed): the runner then says "returned no rows"
        plots.accuracy_figures(ctx, rows)
    return rows


# conf/experiment/labelavg/accuracy_{fashion_mnist,cifar10_jpeg}.yaml name this same function (one dataset per
# config file, so that the datasets can run as separate processes); attack_adaptive.yaml names attack().



def train_evaluator(data: FDData, arch: str, steps: int, key: jax.Array) -> tuple[Callable, object]:
    """An independent classifier trained on the *test* split only (it never sees any client's private data)."""
    fed = make_federation([arch], data.in_shape, data.num_classes, REGISTRY)
    (params,) = init_params(fed, key)
    g = fed.groups[0]
    tx = optax.adam(1e-3)
    n = data.arrays["x_test"].shape[0]
    params, _, _ = jax.jit(lambda p, o, k: local_train(
        g.apply, tx, p, o, k, data.arrays["x_test"], data.arrays["y_test"], jnp.arange(n, dtype=jnp.int32)[None],
        jnp.full((1,), n, jnp.int32), steps=steps, batch_size=64))(params, init_opt(tx, params), key)
    return g.apply, jax.tree.map(lambda a: a[0], params)


def _candidates(x_priv: np.ndarray, y_priv: np.ndarray, part: np.ndarray, classes: np.ndarray, nmax: int):
    """For each slot's class: the target's private images of that class (padded to ``nmax``) and a mask."""
    out = np.zeros((classes.size, nmax, *x_priv.shape[1:]), np.float32)
    mask = np.zeros((classes.size, nmax), bool)
    for b, c in enumerate(classes):
        sel = part[y_priv[part] == c][:nmax]
        out[b, : sel.size] = x_priv[sel]
        mask[b, : sel.size] = True
    return out, mask


def attack(ctx: RunContext):
    """L-Attack (zo), the adaptive label-only attacker (sign), white-box and no-information references against
    one client of a trained federation, per method: PSNR / SSIM to the closest private image, attack accuracy."""
    p, hw, sched, acfg = ctx.params, ctx.hardware, ctx.params.fd, ctx.params.attack
    seeds = ctx.seeds()
    keys = jnp.stack([jax.random.key(int(s)) for s in seeds])
    data = load_fd_data(p.dataset, ctx.data_dir, sched)
    mean, std = (np.asarray(s, np.float32) for s in STATS[p.dataset])
    x_priv = np.asarray(data.arrays["x_train"]) * std + mean  # pixel units for PSNR / SSIM
    parts, idx, counts = client_splits(data.y_private, hw.num_clients, p.alpha, seeds, sched.min_per_client)
    tgt = acfg.target_client
    if not 0 <= tgt < hw.num_clients:
        raise ValueError(f"target_client {tgt} not in [0, {hw.num_clients})")
    ev_apply, ev_params = train_evaluator(data, acfg.evaluator_arch, acfg.evaluator_steps, jax.random.key(10_000))
    ev_acc = np.full(len(seeds), float((ev_apply(ev_params, data.arrays["x_pub"]).argmax(-1) ==
                                        data.arrays["y_pub"]).mean()))
    classes = np.repeat(np.arange(data.num_classes), acfg.images_per_class)
    held = np.stack([np.bincount(data.y_private[pt[tgt]], minlength=data.num_classes)[classes] >= acfg.min_class_count
                     for pt in parts])  # [S, B]
    nmax = max(int(np.bincount(data.y_private[pt[tgt]]).max()) for pt in parts)
    cands = [_candidates(x_priv, data.y_private, pt[tgt], classes, nmax) for pt in parts]
    match = jax.jit(closest_match)
    rows, figure = [], {}
    ctx.progress.start(len(ctx.policies) * len(acfg.attackers))
    for name, pol in ctx.policies.items():
        fed = make_federation(hw.client_archs(pol.method, pol.homogeneous), data.in_shape, data.num_classes,
                              REGISTRY)
        out = run_federation(fed, pol, sched, data, keys, idx, counts)
        curve = np.asarray(out["curve"])
        gi = next(i for i, g in enumerate(fed.groups) if tgt in g.client_ids)
        pos = fed.groups[gi].client_ids.index(tgt)
        target_params = jax.tree.map(lambda a, pos=pos: a[:, pos], out["params"][gi])
        base = {"trace": TRACE[p.dataset], "alpha": float(p.alpha), "target_arch": fed.archs[tgt]}
        rows += metric_rows(name, {"target_test_acc": (np.asarray(out["acc"])[:, tgt], "fraction"),
                                   "federation_test_acc": (np.asarray(out["acc"]).mean(1), "fraction"),
                                   "last_quarter_gain": (last_quarter_gain(curve), "fraction"),
                                   "plateaued": (np.full(len(seeds), float(plateaued(curve))), "0/1"),
                                   "evaluator_acc": (ev_acc, "fraction")}, seeds=seeds, **base, attacker="none")
        for attacker in acfg.attackers:
            setup = AttackSetup(pol.method, attacker, data.in_shape, data.num_classes, tuple(mean.tolist()),
                                tuple(std.tolist()), acfg)
            run = make_attacks(setup, fed.groups[gi].apply)
            x_pix, _, rate = run(jax.random.split(jax.random.key(777), (len(seeds), acfg.repeats)), target_params)
            x_pix, rate = np.clip(np.asarray(x_pix), 0.0, 1.0), np.asarray(rate)  # [S, R, B, ...], [S, R, B]
            x_norm = jnp.asarray((x_pix - mean) / std)
            pred = np.asarray(jax.vmap(jax.vmap(ev_apply, in_axes=(None, 0)), in_axes=(None, 0))(
                ev_params, x_norm).argmax(-1))  # [S, R, B]
            m = {"psnr_db": [], "ssim": [], "attack_acc": [], "target_label_rate": []}
            for s in range(len(seeds)):
                h = held[s]
                cand_x, cand_m = jnp.asarray(cands[s][0]), jnp.asarray(cands[s][1])
                res = [match(jnp.asarray(x_pix[s, r]), cand_x, cand_m) for r in range(acfg.repeats)]
                ps, ss, best = (np.stack([np.asarray(v[i]) for v in res]) for i in range(3))  # [R, B] each
                # a seed's value pools the held slots of all its repeats
                m["psnr_db"].append(ps[:, h].mean())
                m["ssim"].append(ss[:, h].mean())
                m["attack_acc"].append((pred[s] == classes)[:, h].mean())
                m["target_label_rate"].append(rate[s][:, h].mean())
                if int(seeds[s]) == p.figure_seed or (s == 0 and p.figure_seed not in seeds):
                    figure[(name, attacker)] = (x_pix[s, 0], cands[s][0][np.arange(classes.size), best[0]],
                                                h, classes)
            rows += metric_rows(name, {
                "psnr_db": (m["psnr_db"], "dB"), "ssim": (m["ssim"], "1"), "attack_acc": (m["attack_acc"], "fraction"),
                "target_label_rate": (m["target_label_rate"], "fraction"),
                "queries": (np.full(len(seeds), setup.queries_per_step * acfg.steps), "1"),  # per attack (repeat)
                "rounds_needed": (np.full(len(seeds), setup.rounds_needed(sched.public_batch)), "rounds"),
            }, seeds=seeds, **base, attacker=attacker)
            ctx.progress.update()
    plots.attack_figures(ctx, rows, figure)
    return rows


# The same experiment for the adaptive / white-box attackers, so that it can run as a separate process.
