"""Training and batched prediction of any forecaster in :mod:`mlsys_repro.papers.evogwp.models`.

``make_train(build, P, Q, cfg, context)`` returns ``train(key, arrays, train_origins, n_train, val_origins, lr)``
(batches are drawn from the first ``n_train`` origins, so origin lists can be padded to shared shapes): the
whole loop is a ``lax.scan`` over rounds of ``eval_every`` steps (an inner ``lax.scan`` of optimiser steps)
under one ``jit``, and it is ``vmap``-able over seeds; ``train.start`` / ``train.advance`` / ``train.finish``
cut the same loop into equal jitted chunks so that long trainings checkpoint and resume bit-identically.
Each step samples a batch of training windows, computes the masked MAE in the data's units (targets that are
gaps or exactly 0 are dropped, as in the authors' code), clips the gradient norm and applies Adam with a linear
warm-up to the peak learning rate and a multi-step decay (:func:`lr_factor`). The peak learning rate is part of
each run's state, so runs with different rates vmap like seeds (the tuning experiment). The validation masked
MAE (no teacher forcing) is computed at the initial parameters and after every round; the best parameters so
far are kept; rounds without a relative improvement of ``min_delta`` are counted only after the first
learning-rate decay, and after ``patience`` such rounds in a row the run stops (its state is frozen, so the loop
keeps a fixed shape; once every seed has stopped the remaining rounds cost nothing).

``make_predict(build, P, Q, context)`` returns ``predict(params, arrays, origins) -> [W, Q, N]`` forecasts in
the data's units, batched with ``lax.map``. For EvoGWP, whose supports depend only on the context segments of
a window, ``segment_grid`` + ``make_segment_predict`` give the same forecasts with the supports computed once
per segment and shared by the windows whose origins lie in it (scoring every origin: 24 windows per segment at
5 minutes).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from mlsys_repro.common.graph.dcrnn import inverse_sigmoid_decay
from mlsys_repro.papers.evogwp.arrays import Context, gather
from mlsys_repro.papers.evogwp.schemas import TrainParams

Build = Callable[[nnx.Rngs], nnx.Module]


def graphdef_of(build: Build):
    return nnx.split(nnx.eval_shape(lambda: build(nnx.Rngs(0))))[0]


def init_params(build: Build, key: jax.Array):
    return nnx.split(build(nnx.Rngs(key)))[1]


def masked_mae(pred: jax.Array, y: jax.Array, mask: jax.Array) -> jax.Array:
    return jnp.sum(jnp.abs(pred - y) * mask) / jnp.maximum(mask.sum(), 1.0)


def bounds_of(cfg: TrainParams) -> list[int]:
    """The steps at which the learning rate is multiplied by ``lr_gamma``."""
    return sorted({int(round(m * cfg.steps)) for m in cfg.lr_milestones if 0 < m < 1})


def first_decay(cfg: TrainParams) -> int | None:
    """The step of the first learning-rate decay (None without one): patience counts after it (from the start
    without one)."""
    b = bounds_of(cfg)
    return b[0] if b else None


def lr_factor(count, warmup_steps: int, bounds, gamma: float) -> jax.Array:
    """The multiplier of the peak learning rate at optimiser update ``count`` (0-based): a linear warm-up
    ``(count + 1) / warmup_steps`` over the first ``warmup_steps`` updates (the first update already moves, the
    last one of the warm-up is at the peak), times ``gamma`` for every bound in ``bounds`` that ``count`` has
    reached (``count >= bound``, as ``optax.piecewise_constant_schedule``)."""
    c = jnp.asarray(count, jnp.float32)
    warm = jnp.minimum(1.0, (c + 1.0) / warmup_steps) if warmup_steps > 0 else jnp.float32(1.0)
    reached = jnp.sum(jnp.asarray(count)[..., None] >= jnp.asarray(list(bounds) or [jnp.iinfo(jnp.int32).max]),
                      -1)
    return warm * jnp.asarray(gamma, jnp.float32) ** reached.astype(jnp.float32)


def make_step(build: Build, input_len: int, horizon: int, cfg: TrainParams, context: Context | None = None):
    """``(tx, loss_fn, step)``: the optimiser, the masked-MAE loss and one optimiser step on a sampled batch.

    ``step((params, opt_state, key), i, arrays, train_origins, n_train, lr=cfg.lr) -> (carry, loss)`` is exactly
    what the training loop scans over (and what the benchmark times). ``tx`` is Adam's direction times the
    schedule's factor (:func:`lr_factor`); ``step`` multiplies the update by the peak rate ``lr``, which may be a
    traced value (a vmapped grid of learning rates compiles once).
    """
    graphdef = graphdef_of(build)
    bounds = bounds_of(cfg)
    tx = optax.chain(
        optax.clip_by_global_norm(cfg.clip_norm),
        optax.scale_by_adam(eps=1e-8),
        optax.scale_by_schedule(lambda c: -lr_factor(c, cfg.warmup_steps, bounds, cfg.lr_gamma)),
    )

    def loss_fn(params, batch, arrays, tp, key):
        model = nnx.merge(graphdef, params)
        pred = model(batch, teacher_prob=tp, key=key) * arrays["std"] + arrays["mean"]
        return masked_mae(pred, batch["y"], batch["nz"])

    def step(carry, i, arrays, train_origins, n_train, lr=cfg.lr):
        p, st, k = carry
        k, kb, kd = jax.random.split(k, 3)
        idx = jax.random.randint(kb, (cfg.batch_size,), 0, n_train)
        batch = gather(arrays, train_origins[idx], input_len, horizon, context)
        tp = inverse_sigmoid_decay(i, cfg.cl_decay_steps)
        loss, g = jax.value_and_grad(loss_fn)(p, batch, arrays, tp, kd)
        upd, st = tx.update(g, st, p)
        upd = jax.tree.map(lambda u: (lr * u).astype(u.dtype), upd)
        return (optax.apply_updates(p, upd), st, k), loss

    return tx, loss_fn, step


def improved(val: jax.Array, best_val: jax.Array, min_delta: float) -> jax.Array:
    """Whether ``val`` improves on ``best_val`` by more than the relative ``min_delta`` (the patience rule)."""
    return val < best_val * (1.0 - min_delta)


def early_stopping_update(es, params, val, patience: int, min_delta: float, counting=True):
    """One evaluation of early stopping: ``es = (best_params, best_val, bad_rounds, stopped)``.

    Keeps ``params`` as the best when ``val < best_val``; counts a round as bad unless it improves on the best
    by more than the relative ``min_delta``, but only where ``counting`` (the training loop counts from the first
    learning-rate decay on, so a noisy warm-up or high-LR phase neither ends a run nor uses up its patience);
    stops after ``patience`` bad rounds in a row. A stopped ``es`` no longer changes (later evaluations are
    ignored)."""
    best, best_val, bad, stopped = es
    better = val < best_val
    new_best = jax.tree.map(lambda a, b: jnp.where(better, a, b), params, best)
    counting = jnp.asarray(counting)
    new_bad = jnp.where(improved(val, best_val, min_delta), 0, bad + counting.astype(bad.dtype))
    out = (new_best, jnp.minimum(val, best_val), new_bad, (new_bad >= patience) & counting)
    return jax.tree.map(lambda f, o: jnp.where(stopped, f, o), es, out)


def make_train(build: Build, input_len: int, horizon: int, cfg: TrainParams, context: Context | None = None):
    """``train(key, arrays, train_origins, n_train, val_origins) -> (best_params, curves)`` in one ``lax.scan``.

    Early stopping (the same rule for every learned model): the validation masked MAE is computed at the initial
    parameters (``val_init``) and after every round of ``eval_every`` steps; the parameters with the lowest one
    so far are kept (and returned; ``best_round`` records the round, 1-based). From the first learning-rate decay
    on, a round that does not improve the best by more than the relative ``min_delta`` counts against
    ``patience``, and after ``patience`` such rounds in a row training stops: the parameters, optimiser state and
    curves are frozen for the remaining rounds. ``curves`` holds per round the mean training loss, the
    validation masked MAE and whether the run was still training, plus ``best_val``, ``best_round``,
    ``val_init``, ``lr``, ``stopped`` and ``rounds_run``.

    The same loop is exposed in resumable pieces, for the shared driver (:mod:`mlsys_repro.common.repro.trainer`):
    ``train.start(key, ..., lr=cfg.lr) -> state``, ``train.advance(state, ..., rounds) -> (state, (train_loss,
    val_mae, active))`` (``rounds`` evaluation rounds of ``eval_every`` steps each) and ``train.finish(state,
    curves) -> (best, curves)``; ``train.rounds`` is the total number of evaluation rounds. Advancing ``rounds``
    in any number of equal pieces computes exactly what one ``train`` call does. ``train.advance_seeds`` is
    ``advance`` over a leading seed axis that skips a round's computation once every seed has stopped. The peak
    learning rate ``lr`` is an argument of ``start`` and lives in the state, so it may be vmapped (one compiled
    loop for a grid of rates).
    """
    tx, loss_fn, step = make_step(build, input_len, horizon, cfg, context)
    rounds = cfg.steps // cfg.eval_every
    count_from = first_decay(cfg) or 0  # patience is counted only for rounds that end after the first LR decay

    def start(key, arrays, train_origins, n_train, val_origins, lr=None):
        k_init, k_loop = jax.random.split(key)
        params = init_params(build, k_init)
        z = jnp.asarray(0, jnp.int32)
        inf = jnp.asarray(jnp.inf, jnp.float32)
        val_batch = gather(arrays, val_origins, input_len, horizon, context)
        info = {
            "lr": jnp.asarray(cfg.lr if lr is None else lr, jnp.float32),
            "val_init": loss_fn(params, val_batch, arrays, 0.0, None),
            "best_round": z,
        }
        # (train carry, best params, best val, rounds without improvement, stopped, last (loss, val), info, round)
        return ((params, tx.init(params), k_loop), params, inf, z, jnp.asarray(False), (inf, inf), info, z)

    def one_round(state, arrays, train_origins, n_train, val_batch):
        carry, best, best_val, bad, stopped, last, info, c = state
        new_carry, losses = jax.lax.scan(
            lambda cr, i: step(cr, i, arrays, train_origins, n_train, info["lr"]),
            carry,
            c * cfg.eval_every + jnp.arange(cfg.eval_every),
        )
        val = loss_fn(new_carry[0], val_batch, arrays, 0.0, None)
        counting = (c + 1) * cfg.eval_every > count_from
        es = early_stopping_update(
            (best, best_val, bad, stopped), new_carry[0], val, cfg.patience, cfg.min_delta, counting
        )
        new_info = {**info, "best_round": jnp.where(val < best_val, c + 1, info["best_round"])}
        out = (new_carry, *es[:3], es[3], (losses.mean(), val), new_info, c + 1)
        frozen = (carry, best, best_val, bad, stopped, last, info, c + 1)
        nxt = jax.tree.map(lambda f, o: jnp.where(stopped, f, o), frozen, out)
        return nxt, (*nxt[5], ~stopped)

    def advance(state, arrays, train_origins, n_train, val_origins, rounds):
        val_batch = gather(arrays, val_origins, input_len, horizon, context)
        return jax.lax.scan(
            lambda s, _: one_round(s, arrays, train_origins, n_train, val_batch), state, None, length=rounds
        )

    def advance_seeds(states, arrays, train_origins, n_train, val_origins, rounds):
        val_batch = gather(arrays, val_origins, input_len, horizon, context)
        batched = jax.vmap(lambda s: one_round(s, arrays, train_origins, n_train, val_batch))

        def skip(s):  # every seed has stopped: nothing changes but the round counter
            return (*s[:-1], s[-1] + 1), (*s[5], jnp.zeros_like(s[4]))

        def body(s, _):
            return jax.lax.cond(jnp.all(s[4]), skip, batched, s)

        states, m = jax.lax.scan(body, states, None, length=rounds)
        return states, jax.tree.map(lambda a: jnp.swapaxes(a, 0, 1), m)  # [seeds, rounds] like vmap(advance)

    def finish(state, curves):
        _, best, best_val, _, stopped, _, info, _ = state
        train_curve, val_curve, active = curves
        return best, {
            "train_loss": train_curve,
            "val_mae_masked": val_curve,
            "active": active,
            "best_val": best_val,
            "best_round": info["best_round"],
            "val_init": info["val_init"],
            "lr": info["lr"],
            "stopped": stopped,
            "rounds_run": active.sum(-1),
        }

    def train(key, arrays, train_origins, n_train, val_origins, lr=None):
        state = start(key, arrays, train_origins, n_train, val_origins, lr)
        state, curves = advance(state, arrays, train_origins, n_train, val_origins, rounds)
        return finish(state, curves)

    train.start, train.advance, train.finish, train.rounds = start, advance, finish, rounds
    train.advance_seeds = advance_seeds
    return train


def slope_before_decay(val_curve, rounds_run: int, eval_every: int, decay_step: int, window: int = 4) -> float:
    """How fast the validation curve still fell when the learning rate was first cut: the least-squares slope of
    the last ``window`` evaluations at or before ``decay_step`` (evaluation ``r`` is at step ``(r + 1)
    eval_every``; only the ``rounds_run`` evaluated rounds count), in % of their mean per 100 steps (negative =
    still falling). NaN with fewer than two such evaluations. A clearly negative slope means the plateau that
    follows is the schedule's, not the model's."""
    v = np.asarray(val_curve, dtype=np.float64)[: int(rounds_run)]
    steps = (np.arange(v.size) + 1) * eval_every
    keep = steps <= decay_step
    v, steps = v[keep][-window:], steps[keep][-window:]
    if v.size < 2:
        return float("nan")
    slope = np.polyfit(steps.astype(np.float64), v, 1)[0]
    return float(100.0 * 100.0 * slope / v.mean())


def plateaued(val_curve, rounds_run: int, patience: int, tol: float) -> bool:
    """Whether a validation curve stopped improving within its budget: the best of its last ``patience``
    evaluated rounds is not better than the best before them by more than the relative ``tol``. A run that
    early-stopped satisfies this by construction (with ``tol`` = the stopping ``min_delta``)."""
    v = np.asarray(val_curve, dtype=np.float64)[: int(rounds_run)]
    if v.size <= patience:
        return False
    before, last = v[:-patience].min(), v[-patience:].min()
    return bool(last >= before * (1.0 - tol))


def make_predict(
    build: Build, input_len: int, horizon: int, context: Context | None = None, batch_size: int = 16
):
    graphdef = graphdef_of(build)

    def predict(params, arrays, origins):
        w = origins.shape[0]
        nb = -(-w // batch_size)
        padded = jnp.concatenate([origins, jnp.broadcast_to(origins[-1:], (nb * batch_size - w,))])
        model = nnx.merge(graphdef, params)

        def one(o):
            batch = gather(arrays, o, input_len, horizon, context)
            return model(batch) * arrays["std"] + arrays["mean"]

        out = jax.lax.map(one, padded.reshape(nb, batch_size))
        return out.reshape(nb * batch_size, *out.shape[2:])[:w]

    return predict


def segment_grid(origins: np.ndarray, seg_len: int, batch_windows: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """Host-side grouping of ``origins [W]`` by grid segment (``origin // seg_len``): ``(grid [U, M], pos [W])``
    with one row per occupied segment (``U`` rounded up to a multiple of the segments per batch,
    ``max(1, batch_windows // M)``), its origins in order, padded by repeating the row's first origin, and
    ``pos`` the flat index of each origin in ``grid`` (so ``out.reshape(U * M, ...)[pos]`` restores the input
    order)."""
    o = np.asarray(origins, dtype=np.int64)
    if o.ndim != 1 or o.size == 0:
        raise ValueError(f"origins must be a non-empty 1-d array, got shape {o.shape}")
    if seg_len < 1:
        raise ValueError(f"seg_len must be >= 1, got {seg_len}")
    seg = o // seg_len
    uniq, inv = np.unique(seg, return_inverse=True)
    counts = np.bincount(inv)
    m = int(counts.max())
    per = max(1, batch_windows // m)
    rows = -(-uniq.size // per) * per
    order = np.argsort(inv, kind="stable")
    slot = np.empty(o.size, np.int64)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    slot[order] = np.arange(o.size) - np.repeat(starts, counts)
    grid = np.empty((rows, m), np.int64)
    first = o[order[starts]]
    grid[: uniq.size] = first[:, None]
    grid[uniq.size :] = first[-1]
    grid[inv, slot] = o
    return grid.astype(np.int32), (inv * m + slot).astype(np.int64)


def make_segment_predict(
    build: Build,
    input_len: int,
    horizon: int,
    context: Context,
    batch_windows: int = 16,
    product_dtype=None,
):
    """``predict(params, arrays, grid [U, M]) -> [U, M, Q, N]`` for a grid from :func:`segment_grid` (every
    row's origins in one segment): the model is called with ``shared_context=True`` on each row, ``lax.map``
    over batches of ``max(1, batch_windows // M)`` rows (``vmap`` within a batch). ``product_dtype``: the
    diffusion products' input dtype (``None`` = float32; see ``EvoGWP.__call__``)."""
    graphdef = graphdef_of(build)

    def predict(params, arrays, grid):
        u, m = grid.shape
        per = max(1, batch_windows // m)
        model = nnx.merge(graphdef, params)

        def row(o):
            batch = gather(arrays, o, input_len, horizon, context)
            out = model(batch, shared_context=True, product_dtype=product_dtype)
            return out * arrays["std"] + arrays["mean"]

        out = jax.lax.map(jax.vmap(row), grid.reshape(u // per, per, m))
        return out.reshape(u, m, *out.shape[3:])

    return predict
