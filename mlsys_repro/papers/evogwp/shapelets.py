"""Shapelets with two-level importance (Time2Graph, Cheng et al., AAAI 2020, as used by EvoGWP), in JAX.

A *sample* is one entity-day of the standardised series, cut into ``S = period // L`` segments of length ``L``
(segment ``s`` covers the same time of day in every sample). A shapelet is a length-``L`` pattern ``v`` with

* a **local** importance ``w in R^L`` (one weight per position inside the segment), and
* a **global** importance ``u in R^S`` (one weight per segment position, i.e. per time-of-day slot).

Distance of a sample ``x`` to a shapelet: ``D(v, x) = softmin_s |u_s| d_w(v, x_s)`` with
``d_w(v, x_s) = sqrt(mean_l (w_l (v_l - x_{s,l}))^2)`` and ``softmin_s a_s = -tau log sum_s exp(-a_s / tau)``.
This replaces the authors' greedy w-weighted DTW (warp 2) by a weighted Euclidean distance: it is exact, needs
no alignment search, and vectorises to three matrix products, so candidates are scored with jit/vmap.

Candidates: for each segment position, ``C / S`` segments chosen by greedy farthest-point selection among the
training segments at that position (``C = 10 K``). Each candidate's ``(w, u)`` is learned with Adam to
maximise a separation score between the class-conditional Gaussian fits of its standardised distances (one
class against the rest, averaged over classes), with penalties ``0.1 ||w|| / L + 0.05 ||u|| / S``; the ``K``
best are kept.

Separation score: the authors maximise the KL divergence. With a variance floor of ``1e-3`` and classes of one
or two entities, a candidate close to a single entity's days gets a tiny class variance and a KL in the hundreds
(310-414 on Azure): the selection then fingerprints individual VMs. [ours] The default ``score = "hellinger"``
is the squared Hellinger distance between the two Gaussians, bounded in [0, 1], with a variance floor of
``var_floor`` (relative: the distances are standardised, so the overall variance is 1); ``score = "kl"`` keeps
the authors' KL (same floor).

The class labels are **pseudo-labels** (our design; the authors' CSV carries a label we do not have): k-means
on the entities' mean daily profiles over the training days (each profile z-normalised, so the clusters are
daily *shapes*), and every sample inherits its entity's cluster. [ours] Classes smaller than
``min_class_size`` entities are dissolved (their members join the nearest remaining centre, and the centres are
refitted) until every class has at least that many entities, so no class is one VM's fingerprint.
"""

from __future__ import annotations

from dataclasses import dataclass

import jax
import jax.numpy as jnp
import numpy as np
import optax


@dataclass(frozen=True)
class ShapeletConfig:
    num_shapelets: int = 32  # K
    seg_len: int = 24  # L (steps); must divide the daily period
    candidates_per_shapelet: int = 10  # C = 10 K
    num_classes: int = 4  # k of the k-means pseudo-labels
    min_class_size: int = 3  # entities per pseudo-label class (smaller classes are dissolved)
    score: str = "hellinger"  # hellinger (bounded, ours) | kl (the authors')
    var_floor: float = 0.05  # class-variance floor, relative to the overall (standardised) variance
    max_samples: int = 768  # entity-days used to score candidates
    steps: int = 150  # Adam steps on (w, u); 0 keeps w = u = 1 (no importance learning)
    lr: float = 0.01
    penalty_w: float = 0.1
    penalty_u: float = 0.05
    tau: float = 0.1  # soft-min temperature (in standardised units)

    def __post_init__(self) -> None:
        for f in ("num_shapelets", "seg_len", "candidates_per_shapelet", "num_classes", "max_samples"):
            if getattr(self, f) < 1:
                raise ValueError(f"shapelets.{f} must be >= 1, got {getattr(self, f)}")
        if self.steps < 0:
            raise ValueError(f"shapelets.steps must be >= 0 (0 = keep w = u = 1), got {self.steps}")
        if self.lr <= 0 or self.tau <= 0 or self.penalty_w < 0 or self.penalty_u < 0:
            raise ValueError("shapelets: lr and tau must be > 0 and penalties >= 0")
        if self.score not in ("hellinger", "kl"):
            raise ValueError(f"shapelets.score must be hellinger or kl, got {self.score!r}")
        if self.var_floor <= 0:
            raise ValueError(f"shapelets.var_floor must be > 0, got {self.var_floor}")


@dataclass(frozen=True)
class Shapelets:
    """``v, w: [K, L]``, ``u: [K, S]``, ``score: [K]`` (separation of the kept candidates), ``labels: [N]``
    pseudo-labels."""

    v: np.ndarray
    w: np.ndarray
    u: np.ndarray
    score: np.ndarray
    labels: np.ndarray
    period: int

    @property
    def seg_len(self) -> int:
        return int(self.v.shape[1])

    @property
    def num_positions(self) -> int:
        return int(self.u.shape[1])

    def arrays(self) -> dict[str, np.ndarray]:
        return {
            "v": self.v,
            "w": self.w,
            "u": self.u,
            "score": self.score,
            "labels": self.labels,
            "period": np.asarray(self.period),
        }

    @staticmethod
    def from_arrays(a: dict[str, np.ndarray]) -> Shapelets:
        return Shapelets(
            np.asarray(a["v"]),
            np.asarray(a["w"]),
            np.asarray(a["u"]),
            np.asarray(a["score"]),
            np.asarray(a["labels"]),
            int(a["period"]),
        )


# --------------------------------------------------------------------------------------------- pseudo-labels


def kmeans(x: np.ndarray, k: int, seed: int = 0, iters: int = 50) -> np.ndarray:
    """Lloyd's k-means with k-means++ seeding (deterministic given ``seed``); returns labels ``[M]``."""
    x = np.asarray(x, dtype=np.float64)
    m = x.shape[0]
    k = max(1, min(k, m))
    rng = np.random.default_rng(seed)
    centers = [x[rng.integers(m)]]
    for _ in range(1, k):
        d2 = np.min(((x[:, None, :] - np.asarray(centers)[None]) ** 2).sum(-1), axis=1)
        if d2.sum() <= 0:
            centers.append(x[rng.integers(m)])
            continue
        centers.append(x[rng.choice(m, p=d2 / d2.sum())])
    c = np.asarray(centers)
    labels = np.zeros(m, dtype=np.int32)
    for _ in range(iters):
        d2 = ((x[:, None, :] - c[None]) ** 2).sum(-1)
        new = d2.argmin(1).astype(np.int32)
        for j in range(k):
            if np.any(new == j):
                c[j] = x[new == j].mean(0)
        if np.array_equal(new, labels):
            break
        labels = new
    return labels


def daily_profiles(values: np.ndarray, period: int, end: int) -> np.ndarray:
    """Mean daily profile ``[N, period]`` over the whole days in ``values[:end]``, z-normalised per entity."""
    days = end // period
    if days < 1:
        raise ValueError(f"need at least one whole day ({period} steps) of training data, got {end}")
    prof = np.asarray(values[: days * period], dtype=np.float64).reshape(days, period, -1).mean(0).T
    sd = prof.std(1, keepdims=True)
    return np.where(sd > 1e-9, (prof - prof.mean(1, keepdims=True)) / np.where(sd > 1e-9, sd, 1.0), 0.0)


def enforce_min_class_size(x: np.ndarray, labels: np.ndarray, min_size: int, iters: int = 20) -> np.ndarray:
    """Dissolve the smallest class while any class has fewer than ``min_size`` members: its members join the
    nearest remaining centre, then a few Lloyd steps refit the centres. Labels are renumbered 0..k'-1; with
    fewer than ``2 min_size`` points everything is one class."""
    x = np.asarray(x, dtype=np.float64)
    lab = np.unique(np.asarray(labels), return_inverse=True)[1].astype(np.int32)
    if x.shape[0] < 2 * min_size:
        return np.zeros(x.shape[0], np.int32)
    while True:
        sizes = np.bincount(lab)
        if sizes.min() >= min_size or sizes.size == 1:
            return lab
        drop = int(sizes.argmin())
        centres = np.stack([x[lab == c].mean(0) for c in range(sizes.size) if c != drop])
        lab = np.unique(_nearest(x, centres), return_inverse=True)[1].astype(np.int32)
        for _ in range(iters):  # Lloyd steps from the remaining centres (stop before a class empties)
            centres = np.stack([x[lab == c].mean(0) for c in range(int(lab.max()) + 1)])
            new = _nearest(x, centres)
            if np.array_equal(new, lab) or np.bincount(new, minlength=centres.shape[0]).min() == 0:
                break
            lab = new
        lab = np.unique(lab, return_inverse=True)[1].astype(np.int32)


def _nearest(x: np.ndarray, centres: np.ndarray) -> np.ndarray:
    return ((x[:, None, :] - centres[None]) ** 2).sum(-1).argmin(1).astype(np.int32)


def pseudo_labels(
    values: np.ndarray, period: int, end: int, k: int, seed: int = 0, min_class_size: int = 1
) -> np.ndarray:
    prof = daily_profiles(values, period, end)
    return enforce_min_class_size(prof, kmeans(prof, k, seed), min_class_size)


# ------------------------------------------------------------------------------------------------ distances


def weighted_sq_dist(v: jax.Array, w: jax.Array, segs: jax.Array) -> jax.Array:
    """``mean_l (w_l (v_l - x_l))^2`` for every shapelet and segment: ``v, w: [K, L]``, ``segs: [..., L]`` ->
    ``[K, ...]``, computed as three matrix products."""
    w2 = w * w
    lead = segs.shape[:-1]
    x = segs.reshape(-1, segs.shape[-1])
    d2 = (w2 * v * v).sum(-1)[:, None] - 2.0 * (w2 * v) @ x.T + w2 @ (x * x).T
    return jnp.maximum(d2, 0.0).reshape(v.shape[0], *lead) / v.shape[-1]


def sample_distance(v, w, u, segs, tau: float) -> jax.Array:
    """``D(v_k, x_m) = softmin_s |u_{k,s}| d_w(v_k, x_{m,s})`` for ``segs: [M, S, L]`` -> ``[K, M]``."""
    d = jnp.sqrt(weighted_sq_dist(v, w, segs) + 1e-8)  # [K, M, S]
    a = jnp.abs(u)[:, None, :] * d
    return -tau * jax.nn.logsumexp(-a / tau, axis=-1)


def _class_fits(dist: jax.Array, onehot: jax.Array, var_floor: float):
    z = (dist - dist.mean()) / (dist.std() + 1e-6)
    n_c = onehot.sum(0)
    n_o = onehot.shape[0] - n_c
    mu_c = (onehot * z[:, None]).sum(0) / jnp.maximum(n_c, 1)
    mu_o = ((1 - onehot) * z[:, None]).sum(0) / jnp.maximum(n_o, 1)
    var_c = (onehot * (z[:, None] - mu_c) ** 2).sum(0) / jnp.maximum(n_c, 1) + var_floor
    var_o = ((1 - onehot) * (z[:, None] - mu_o) ** 2).sum(0) / jnp.maximum(n_o, 1) + var_floor
    valid = (n_c >= 2) & (n_o >= 2)
    return mu_c, mu_o, var_c, var_o, valid


def kl_score(dist: jax.Array, onehot: jax.Array, var_floor: float = 1e-3) -> jax.Array:
    """Mean over classes of |KL(N(class) || N(rest))| of the standardised distances ``[M]``; ``onehot: [M,
    k]`` (the authors' score; unbounded: a near-constant class makes it explode unless ``var_floor`` is
    large)."""
    mu_c, mu_o, var_c, var_o, valid = _class_fits(dist, onehot, var_floor)
    kl = 0.5 * jnp.log(var_o / var_c) + (var_c + (mu_c - mu_o) ** 2) / (2 * var_o) - 0.5
    return jnp.where(valid, jnp.abs(kl), 0.0).sum() / jnp.maximum(valid.sum(), 1)


def hellinger_score(dist: jax.Array, onehot: jax.Array, var_floor: float = 0.05) -> jax.Array:
    """Mean over classes of the squared Hellinger distance between N(class) and N(rest) of the standardised
    distances, in [0, 1] (0: identical fits; 1: disjoint)."""
    mu_c, mu_o, var_c, var_o, valid = _class_fits(dist, onehot, var_floor)
    s2 = var_c + var_o
    h2 = 1.0 - jnp.sqrt(2.0 * jnp.sqrt(var_c * var_o) / s2) * jnp.exp(-((mu_c - mu_o) ** 2) / (4.0 * s2))
    return jnp.where(valid, h2, 0.0).sum() / jnp.maximum(valid.sum(), 1)


def separation_score(dist: jax.Array, onehot: jax.Array, cfg: ShapeletConfig) -> jax.Array:
    if cfg.score == "kl":
        return kl_score(dist, onehot, cfg.var_floor)
    return hellinger_score(dist, onehot, cfg.var_floor)


# ------------------------------------------------------------------------------------------------ candidates


def farthest_points(pool: np.ndarray, m: int) -> np.ndarray:
    """Greedy farthest-point selection of ``m`` rows of ``pool`` ``[P, L]``, starting at the row nearest the
    mean."""
    pool = np.asarray(pool, dtype=np.float64)
    m = min(m, pool.shape[0])
    first = int(((pool - pool.mean(0)) ** 2).sum(1).argmin())
    chosen = [first]
    d = ((pool - pool[first]) ** 2).sum(1)
    for _ in range(1, m):
        nxt = int(d.argmax())
        chosen.append(nxt)
        d = np.minimum(d, ((pool - pool[nxt]) ** 2).sum(1))
    return np.asarray(chosen, dtype=np.int64)


def day_segments(values: np.ndarray, period: int, seg_len: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    """Whole training days as ``[M, S, L]`` segments and the entity of each sample ``[M]``."""
    if period % seg_len:
        raise ValueError(f"segment length {seg_len} must divide the daily period {period}")
    days = end // period
    n = values.shape[1]
    x = np.asarray(values[: days * period], dtype=np.float32).reshape(days, period, n)
    x = np.transpose(x, (2, 0, 1)).reshape(n * days, period // seg_len, seg_len)
    ent = np.repeat(np.arange(n), days)
    return x, ent


def fit_shapelets(
    values_std: np.ndarray, period: int, train_end: int, cfg: ShapeletConfig, seed: int = 0
) -> Shapelets:
    """Learn ``cfg.num_shapelets`` shapelets from the training part of a standardised, gap-filled
    ``[T, N]``."""
    labels = pseudo_labels(values_std, period, train_end, cfg.num_classes, seed, cfg.min_class_size)
    segs, ent = day_segments(values_std, period, cfg.seg_len, train_end)
    rng = np.random.default_rng(seed)
    if segs.shape[0] > cfg.max_samples:
        pick = np.sort(rng.choice(segs.shape[0], cfg.max_samples, replace=False))
        segs, ent = segs[pick], ent[pick]
    s_pos = segs.shape[1]
    n_cand = cfg.num_shapelets * cfg.candidates_per_shapelet
    per_pos = int(np.ceil(n_cand / s_pos))
    cands = np.concatenate([segs[farthest_points(segs[:, p], per_pos), p] for p in range(s_pos)])
    cands = jnp.asarray(cands, jnp.float32)
    k = int(labels.max()) + 1
    onehot = jax.nn.one_hot(jnp.asarray(labels[ent]), k)
    w, u, score = _learn(cands, jnp.asarray(segs), onehot, cfg)
    keep = np.argsort(-np.asarray(score), kind="stable")[: cfg.num_shapelets]
    return Shapelets(
        np.asarray(cands)[keep],
        np.asarray(w)[keep],
        np.asarray(u)[keep],
        np.asarray(score)[keep],
        labels.astype(np.int32),
        period,
    )


def _learn(cands: jax.Array, segs: jax.Array, onehot: jax.Array, cfg: ShapeletConfig):
    """Adam on every candidate's ``(w, u)`` at once (their losses are independent, so summing them is
    exact)."""
    c, seg_len = cands.shape
    s_pos = segs.shape[1]

    def scores(w, u):
        d = sample_distance(cands, w, u, segs, cfg.tau)  # [C, M]
        return jax.vmap(lambda di: separation_score(di, onehot, cfg))(d)

    def loss(p):
        w, u = p
        pen = (
            cfg.penalty_w * jnp.linalg.norm(w, axis=1) / seg_len
            + cfg.penalty_u * jnp.linalg.norm(u, axis=1) / s_pos
        )
        return (-scores(w, u) + pen).sum()

    @jax.jit
    def run(p0):
        opt = optax.adam(cfg.lr)

        def step(carry, _):
            p, st = carry
            g = jax.grad(loss)(p)
            upd, st = opt.update(g, st, p)
            return (optax.apply_updates(p, upd), st), None

        (p, _), _ = jax.lax.scan(step, (p0, opt.init(p0)), None, length=cfg.steps)
        return p[0], p[1], scores(*p)

    return run((jnp.ones((c, seg_len)), jnp.ones((c, s_pos))))


def segment_distances(shp: Shapelets, values_std: np.ndarray, first_slot: int = 0) -> np.ndarray:
    """``sdist[g, n, k] = |u_k[slot(g)]| d_{w_k}(v_k, x_{n, g})`` for the grid segments ``g`` of ``[T, N]``
    values.

    Grid segment ``g`` covers steps ``[g L, (g + 1) L)``; its time-of-day slot is ``(first_slot + g) mod S``
    (``first_slot = 0``: step 0 starts a day). Returns ``[G, N, K]`` float32 with ``G = T // L``.
    """
    seg_len, s_pos = shp.seg_len, shp.num_positions
    g = values_std.shape[0] // seg_len
    x = np.asarray(values_std[: g * seg_len], dtype=np.float32).reshape(g, seg_len, -1).transpose(0, 2, 1)
    d = _seg_dist(jnp.asarray(shp.v), jnp.asarray(shp.w), jnp.asarray(x))  # [K, G, N]
    slot_u = np.abs(shp.u)[:, (first_slot + np.arange(g)) % s_pos]  # [K, G]
    return np.asarray(jnp.transpose(d * slot_u[:, :, None], (1, 2, 0)))


@jax.jit
def _seg_dist(v, w, x):
    return jnp.sqrt(weighted_sq_dist(v, w, x) + 1e-8)
