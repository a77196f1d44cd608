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
from mlsys_repro.common.traces.images import fashion_mnist_dir, load_images
from mlsys_repro.papers.labelavg import plots
from mlsys_repro.papers.labelavg.attack import AttackSetup, make_attacks, make_view, view_labels
from mlsys_repro.papers.labelavg.fd import make_train, traffic
from mlsys_repro.papers.labelavg.metrics import closest_match, public_references
from mlsys_repro.papers.labelavg.models import REGISTRY
from mlsys_repro.papers.labelavg.schemas import FDSchedule
from mlsys_repro.papers.labelavg.surrogate import agreement, make_surrogate, transcript_targets

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


def policy_seed_count(params, name: str, num_seeds: int) -> int:
    """How many of the experiment's seeds policy ``name`` runs (``params.policy_seeds``, at most all of them)."""
    return min(int(params.policy_seeds.get(name, num_seeds)), num_seeds)


def accuracy(ctx: RunContext):
    """Test accuracy (mean and worst client) and exact bytes per client per round, per method, dataset, alpha.

    A policy listed in ``params.policy_seeds`` runs on the first ``n`` seeds only. ``central`` does not depend on
    alpha (every client trains on the pooled private data, with the same key per seed), so it runs once per seed
    and its rows are repeated for every alpha.
    """
    p, hw, sched = ctx.params, ctx.hardware, ctx.params.fd
    all_seeds = ctx.seeds()
    rows = []
    todo = [d for d in p.datasets if available(d, ctx.data_dir)]
    for d in sorted(set(p.datasets) - set(todo)):
        ctx.progress.log(f"{d} not installed (Debian package dataset-fashion-mnist); skipped")
    ctx.progress.start(len(todo) * len(ctx.policies))
    for ds in todo:
        data = load_fd_data(ds, ctx.data_dir, sched)
        for name, pol in ctx.policies.items():
            seeds = all_seeds[: policy_seed_count(p, name, len(all_seeds))]
            keys = jnp.stack([jax.random.key(int(s)) for s in seeds])
            fed = make_federation(hw.client_archs(pol.method, pol.homogeneous), data.in_shape, data.num_classes,
                                  REGISTRY)
            led = traffic(fed, pol, sched, data.num_classes, _shapes(data.arrays), data.y_private.size)
            # every (alpha, seed) pair is one row of a single vmapped run: one compile per dataset and method
            run_alphas = p.alphas[:1] if pol.method == "central" else p.alphas
            splits = [client_splits(data.y_private, hw.num_clients, a, seeds, sched.min_per_client)
                      for a in run_alphas]
            out = run_federation(fed, pol, sched, data, jnp.concatenate([keys] * len(run_alphas)),
                                 jnp.concatenate([s[1] for s in splits]), jnp.concatenate([s[2] for s in splits]))
            acc_all, curve_all = np.asarray(out["acc"]), np.asarray(out["curve"])
            for a_i, alpha in enumerate(p.alphas):
                j = 0 if pol.method == "central" else a_i
                acc, curve = (v[j * len(seeds):(j + 1) * len(seeds)] for v in (acc_all, curve_all))
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
# config file, so that the datasets can run as separate processes).



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


def to_uint8(x_norm: np.ndarray, name: str) -> np.ndarray:
    """Normalised images back to their uint8 pixels (exact: ``normalise`` is an affine map of integers)."""
    mean, std = (np.asarray(v, np.float32) for v in STATS[name])
    return np.clip(np.rint((np.asarray(x_norm) * std + mean) * 255.0), 0, 255).astype(np.uint8)


def nonmember_pool(name: str, data_dir, used: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Training-split images that are in no client's pool and not public: ``(x uint8 [M, ...], y [M])``.

    ``used`` (uint8) are the images the federation draws from (private pools and public set); every training image
    whose pixels equal one of them is excluded, duplicates included. Same split and distribution as the private
    data, so a reconstruction's closeness to these is what closeness to private images is compared with.
    """
    x, y = load_images(name, data_dir, "train")
    seen = {row.tobytes() for row in used}
    keep = np.fromiter((row.tobytes() not in seen for row in x), bool, count=x.shape[0])
    return x[keep], y[keep]


def _candidates(x_u8: np.ndarray, y: np.ndarray, part: np.ndarray, classes: np.ndarray, nmax: int,
                limit: np.ndarray | None = None, rng: np.random.Generator | None = None):
    """For each slot's class: the target's private images of that class (uint8, padded to ``nmax``) and a mask.

    ``limit [B]``: keep a random ``limit[b]`` of them (``rng``) where the target holds more (so that the non-member
    side can match the count)."""
    out = np.zeros((classes.size, nmax, *x_u8.shape[1:]), np.uint8)
    mask = np.zeros((classes.size, nmax), bool)
    for b, c in enumerate(classes):
        sel = part[y[part] == c]
        if limit is not None and sel.size > limit[b]:
            sel = np.sort(rng.choice(sel, int(limit[b]), replace=False))
        sel = sel[:nmax]
        out[b, : sel.size] = x_u8[sel]
        mask[b, : sel.size] = True
    return out, mask


def nonmember_candidates(pool_x: np.ndarray, pool_y: np.ndarray, classes: np.ndarray, counts: np.ndarray,
                         nmax: int, rng: np.random.Generator):
    """As many same-class non-members per slot as the target holds private images of it (``counts [B]``)."""
    out = np.zeros((classes.size, nmax, *pool_x.shape[1:]), np.uint8)
    mask = np.zeros((classes.size, nmax), bool)
    for b, (c, n) in enumerate(zip(classes, counts, strict=True)):
        of_c = np.flatnonzero(pool_y == c)
        if n > of_c.size:
            raise ValueError(f"class {c}: {n} non-members needed, the pool holds {of_c.size}")
        sel = rng.choice(of_c, int(n), replace=False)
        out[b, : sel.size] = pool_x[sel]
        mask[b, : sel.size] = True
    return out, mask


@jax.jit
def score_reconstructions(recon, priv, priv_mask, non, non_mask):
    """Best PSNR / SSIM of ``recon [R, B, H, W, C]`` (pixels) against each slot's private and non-member
    candidates (uint8 ``[B, N, ...]``): ``(psnr_p, ssim_p, best_p, psnr_n, ssim_n)``, each ``[R, B]``."""
    pc, nc = priv.astype(jnp.float32) / 255.0, non.astype(jnp.float32) / 255.0

    def one(r):
        p_p, s_p, b_p = closest_match(r, pc, priv_mask)
        p_n, s_n, _ = closest_match(r, nc, non_mask)
        return p_p, s_p, b_p, p_n, s_n

    return jax.lax.map(one, recon)


def pick_best(attack_acc: np.ndarray, label_rate: np.ndarray) -> np.ndarray:
    """Per seed, the index of the attacker whose reconstructions the evaluator recognises most often
    (``attack_acc [A, S]``), ties broken by the target-label rate, then by order. Neither uses private data."""
    a, lr = np.asarray(attack_acc, np.float64), np.asarray(label_rate, np.float64)
    if a.shape != lr.shape or a.ndim != 2:
        raise ValueError(f"need attack_acc and label_rate [attackers, seeds], got {a.shape} and {lr.shape}")
    return np.asarray([min(range(a.shape[0]), key=lambda i, s=s: (-a[i, s], -lr[i, s], i))
                       for s in range(a.shape[1])], np.int64)


SCORED = ("psnr_db", "ssim", "membership_adv_db", "membership_adv_ssim", "attack_acc", "target_label_rate")


def attack(ctx: RunContext):
    """Reconstruction attacks against one client of a trained federation, per method.

    Attackers (``params.attack.attackers``): L-Attack (``zo``), the label-only ``sign`` attacker, surrogate
    extraction (``surrogate``), the white-box reference in the same subspace (``whitebox``) and the untrained
    generator (``init``); beside them the no-upload references ``public_mean`` / ``public_nearest`` and, per seed,
    the ``best`` of the attacks an FD server can run (``server_attackers``; see :func:`pick_best`). Every
    reconstruction is scored against the target's private images of its class (``reference=private``) and as many
    same-class non-members (``reference=nonmember``): PSNR / SSIM of the best match on each side and their
    difference (``membership_adv_*``); attack accuracy by an independent evaluator; target-label rate.
    """
    p, hw, sched, acfg = ctx.params, ctx.hardware, ctx.params.fd, ctx.params.attack
    seeds = ctx.seeds()
    keys = jnp.stack([jax.random.key(int(s)) for s in seeds])
    data = load_fd_data(p.dataset, ctx.data_dir, sched)
    mean, std = (np.asarray(s, np.float32) for s in STATS[p.dataset])
    x_priv = to_uint8(data.arrays["x_train"], p.dataset)
    x_pub = to_uint8(data.arrays["x_pub"], p.dataset)
    pool_x, pool_y = nonmember_pool(p.dataset, ctx.data_dir, np.concatenate([x_priv, x_pub]))
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
    # equal numbers on both sides: the target's images of the class, or as many as the non-member pool holds
    pool_n = np.bincount(pool_y, minlength=data.num_classes)[classes]
    nmax = max(int(np.minimum(np.bincount(data.y_private[pt[tgt]], minlength=data.num_classes)[classes],
                              pool_n).max()) for pt in parts)
    rngs = [np.random.default_rng([int(s), 47]) for s in seeds]
    cands = [_candidates(x_priv, data.y_private, pt[tgt], classes, nmax, pool_n, rng) for pt, rng in zip(
        parts, rngs, strict=True)]
    nons = [nonmember_candidates(pool_x, pool_y, classes, cands[s][1].sum(1), nmax, rngs[s])
            for s in range(len(seeds))]
    pub_mean, pub_near = (np.asarray(v) for v in public_references(
        jnp.asarray(x_pub, jnp.float32) / 255.0, data.arrays["y_pub"], jnp.asarray(classes)))

    def evaluate_pixels(x_pix):  # [S, R, B, ...] pixels -> evaluator predictions [S, R, B]
        x_norm = jnp.asarray((x_pix - mean) / std)
        return np.asarray(jax.vmap(jax.vmap(ev_apply, in_axes=(None, 0)), in_axes=(None, 0))(
            ev_params, x_norm).argmax(-1))

    def scores(x_pix, rate):
        """Per-seed metrics of reconstructions ``x_pix [S, R, B, ...]`` (pooled over held slots and repeats)."""
        pred = evaluate_pixels(x_pix)
        m = {k: [] for k in ("psnr_priv", "psnr_non", "ssim_priv", "ssim_non", "attack_acc", "target_label_rate")}
        best = []
        for s in range(len(seeds)):
            h = held[s]
            ps, ss, bp, pn, sn = (np.asarray(v) for v in score_reconstructions(
                jnp.asarray(x_pix[s]), jnp.asarray(cands[s][0]), jnp.asarray(cands[s][1]), jnp.asarray(nons[s][0]),
                jnp.asarray(nons[s][1])))  # [R, B] each
            m["psnr_priv"].append(ps[:, h].mean())
            m["psnr_non"].append(pn[:, h].mean())
            m["ssim_priv"].append(ss[:, h].mean())
            m["ssim_non"].append(sn[:, h].mean())
            m["attack_acc"].append((pred[s] == classes)[:, h].mean())
            m["target_label_rate"].append(rate[s][:, h].mean())
            best.append(bp[0])
        m = {k: np.asarray(v, np.float64) for k, v in m.items()}
        return {"psnr_db": m["psnr_priv"], "psnr_nonmember_db": m["psnr_non"], "ssim": m["ssim_priv"],
                "ssim_nonmember": m["ssim_non"], "membership_adv_db": m["psnr_priv"] - m["psnr_non"],
                "membership_adv_ssim": m["ssim_priv"] - m["ssim_non"], "attack_acc": m["attack_acc"],
                "target_label_rate": m["target_label_rate"]}, best

    def attacker_rows(name, base, attacker, v, extra):
        r = metric_rows(name, {"psnr_db": (v["psnr_db"], "dB"), "ssim": (v["ssim"], "1")}, seeds=seeds, **base,
                        attacker=attacker, reference="private")
        r += metric_rows(name, {"psnr_db": (v["psnr_nonmember_db"], "dB"), "ssim": (v["ssim_nonmember"], "1")},
                         seeds=seeds, **base, attacker=attacker, reference="nonmember")
        r += metric_rows(name, {"membership_adv_db": (v["membership_adv_db"], "dB"),
                                "membership_adv_ssim": (v["membership_adv_ssim"], "1"),
                                "attack_acc": (v["attack_acc"], "fraction"),
                                "target_label_rate": (v["target_label_rate"], "fraction"), **extra},
                         seeds=seeds, **base, attacker=attacker)
        return r

    rows, figure, init_cache = [], {}, None
    server = [a for a in acfg.server_attackers if a in acfg.attackers]
    record = tgt if "surrogate" in acfg.attackers else None
    ctx.progress.start(len(ctx.policies) * (len(acfg.attackers) + 1))
    for name, pol in ctx.policies.items():
        fed = make_federation(hw.client_archs(pol.method, pol.homogeneous), data.in_shape, data.num_classes,
                              REGISTRY)
        train = jax.jit(jax.vmap(make_train(fed, pol, sched, data.num_classes, record=record),
                                 in_axes=(0, 0, 0, None)))
        out = train(keys, idx, counts, data.arrays)
        curve = np.asarray(out["curve"])
        gi = next(i for i, g in enumerate(fed.groups) if tgt in g.client_ids)
        pos = fed.groups[gi].client_ids.index(tgt)
        apply_t = fed.groups[gi].apply
        target_params = jax.tree.map(lambda a, pos=pos: a[:, pos], out["params"][gi])
        base = {"trace": TRACE[p.dataset], "alpha": float(p.alpha), "target_arch": fed.archs[tgt]}
        rows += metric_rows(name, {"target_test_acc": (np.asarray(out["acc"])[:, tgt], "fraction"),
                                   "federation_test_acc": (np.asarray(out["acc"]).mean(1), "fraction"),
                                   "last_quarter_gain": (last_quarter_gain(curve), "fraction"),
                                   "plateaued": (np.full(len(seeds), float(plateaued(curve))), "0/1"),
                                   "evaluator_acc": (ev_acc, "fraction")}, seeds=seeds, **base, attacker="none")
        per = {}
        for attacker in acfg.attackers:
            setup = AttackSetup(pol.method, attacker, data.in_shape, data.num_classes, tuple(mean.tolist()),
                                tuple(std.tolist()), acfg)
            extra, sur_params, sur_apply = {}, None, None
            if attacker == "surrogate":
                seen = out["seen"]
                n_pairs = int(np.prod(seen["idx"].shape[1:]))
                sur_apply, sur_train = make_surrogate(fed.archs[tgt], data.in_shape, data.num_classes,
                                                      steps=acfg.surrogate_steps, batch_size=acfg.surrogate_batch,
                                                      lr=acfg.surrogate_lr)
                xs = data.arrays["x_pub"][seen["idx"].reshape(len(seeds), -1)]
                ts = transcript_targets(pol.method, seen["view"].reshape(len(seeds), n_pairs, *seen["view"].shape[3:]),
                                        data.num_classes)
                sur_params = jax.jit(jax.vmap(sur_train))(jax.random.split(jax.random.key(555), len(seeds)), xs, ts)
                agree = jax.jit(jax.vmap(lambda ps, pt, fs=sur_apply, ft=apply_t: agreement(
                    fs, ps, ft, pt, data.arrays["x_test"])))
                extra = {"surrogate_agreement": (np.asarray(agree(sur_params, target_params)), "fraction"),
                         "transcript_pairs": (np.full(len(seeds), n_pairs), "1")}
            run = make_attacks(setup, apply_t, sur_apply)
            x_pix, _, rate = run(jax.random.split(jax.random.key(777), (len(seeds), acfg.repeats)), target_params,
                                 sur_params)
            x_pix, rate = np.clip(np.asarray(x_pix), 0.0, 1.0), np.asarray(rate)  # [S, R, B, ...], [S, R, B]
            if attacker == "init" and init_cache is not None:
                # the untrained generator does not depend on the target: its images (and scores) are the same
                v = dict(init_cache[0])
                v["target_label_rate"] = np.asarray([rate[s][:, held[s]].mean() for s in range(len(seeds))])
                best = init_cache[1]
            else:
                v, best = scores(x_pix, rate)
                if attacker == "init":
                    init_cache = (v, best)
            v["queries"] = np.full(len(seeds), setup.queries_per_step * acfg.steps, np.float64)
            v["rounds_needed"] = np.full(len(seeds), setup.rounds_needed(sched.public_batch), np.float64)
            per[attacker] = v
            fs = next((i for i, sd in enumerate(seeds) if int(sd) == p.figure_seed), 0)
            figure[(name, attacker)] = (x_pix[fs, 0], cands[fs][0][np.arange(classes.size), best[fs]] / 255.0,
                                        held[fs], classes)
            rows += attacker_rows(name, base, attacker, v, {
                "queries": (v["queries"], "1"),  # per attack (repeat)
                "rounds_needed": (v["rounds_needed"], "rounds"), **extra})
            ctx.progress.update()
        if acfg.public_references:
            view = make_view(pol.method, apply_t, data.num_classes)
            for ref, imgs in (("public_mean", pub_mean), ("public_nearest", pub_near)):
                x_ref = np.broadcast_to(imgs[None, None], (len(seeds), 1, *imgs.shape))
                x_norm = jnp.asarray((imgs - mean) / std)
                rate = np.asarray(jax.vmap(lambda pt, xn=x_norm, vw=view, m=pol.method: view_labels(m, vw(pt, xn)) ==
                                           jnp.asarray(classes))(target_params))[:, None].astype(np.float64)
                v, _ = scores(x_ref, rate)
                rows += attacker_rows(name, base, ref, v, {})
        if server:
            chosen = pick_best(np.stack([per[a]["attack_acc"] for a in server]),
                               np.stack([per[a]["target_label_rate"] for a in server]))
            v = {k: np.asarray([per[server[c]][k][s] for s, c in enumerate(chosen)])
                 for k in (*SCORED, "psnr_nonmember_db", "ssim_nonmember", "queries", "rounds_needed")}
            rows += attacker_rows(name, base, "best", v, {"queries": (v["queries"], "1"),
                                                          "rounds_needed": (v["rounds_needed"], "rounds")})
            for i, a in enumerate(server):
                rows += metric_rows(name, {"chosen_as_best": ((chosen == i).astype(np.float64), "0/1")},
                                    seeds=seeds, **base, attacker=a)
        ctx.progress.update()
    plots.attack_figures(ctx, rows, figure)
    return rows
