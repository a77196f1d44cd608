"""The jitted training loop: it learns, keeps the best validation parameters, is deterministic per seed and
vmaps over seeds; and the statistical baselines fall back (counted) on degenerate series."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from mlsys_repro.papers.evogwp.arrays import build_arrays, gather
from mlsys_repro.papers.evogwp.baselines import stats_forecast
from mlsys_repro.papers.evogwp.data import Scaler, origins, prepare
from mlsys_repro.papers.evogwp.forecasters import builder
from mlsys_repro.papers.evogwp.schemas import StatsHP, TrainParams, parse_hparams
from mlsys_repro.papers.evogwp.train import init_params, make_predict, make_train

P = Q = 12


@pytest.fixture(scope="module")
def setup():
    t = np.arange(3 * 288)
    v = (40 + 25 * np.sin(2 * np.pi * t / 48))[:, None] * np.array([1.0, 0.6, 0.3])[None]
    s = prepare(name="sine", values=v.astype(np.float32), entities=["a", "b", "c"])
    sc = Scaler.fit(s.raw[:600])
    arrays = {k: jnp.asarray(a) for k, a in build_arrays(s, sc).items()}
    tr = origins(0, 600, P, Q)
    va = origins(600, 700, P, Q, 8)
    build = builder("dlinear", parse_hparams("dlinear", {"kernel": 5}), num_nodes=3, input_len=P, horizon=Q)
    cfg = TrainParams(steps=60, batch_size=8, lr=0.02, eval_every=20, val_windows=len(va))
    train = jax.jit(jax.vmap(make_train(build, P, Q, cfg), in_axes=(0, None, None, None, None)))
    keys = jax.vmap(jax.random.key)(jnp.asarray([0, 1, 0]))
    params, curves = train(keys, arrays, jnp.asarray(tr), jnp.int32(tr.size), jnp.asarray(va))
    return build, arrays, tr, va, params, curves


def test_training_reduces_the_validation_error_and_keeps_the_best(setup):
    build, arrays, tr, va, params, curves = setup
    val = np.asarray(curves["val_mae_masked"])  # [seeds, chunks]
    predict = jax.vmap(make_predict(build, P, Q), in_axes=(0, None, None))
    init = jax.tree.map(lambda a: jnp.stack([a] * 3), init_params(build, jax.random.key(0)))
    y = np.asarray(gather(arrays, jnp.asarray(va), P, Q)["y"])
    err0 = np.abs(np.asarray(predict(init, arrays, jnp.asarray(va))) - y).mean()
    err = np.abs(np.asarray(predict(params, arrays, jnp.asarray(va))) - y).mean(axis=(1, 2, 3))
    assert np.all(err < 0.5 * err0)
    np.testing.assert_allclose(np.asarray(curves["best_val"]), val.min(1), rtol=1e-6)
    np.testing.assert_allclose(err, val.min(1), rtol=1e-4)  # the kept parameters are the best ones


def test_seeds_are_deterministic_and_distinct(setup):
    *_, params, _ = setup
    leaves = jax.tree.leaves(params)
    assert all(np.array_equal(a[0], a[2]) for a in leaves)  # seed 0 twice
    assert any(not np.array_equal(a[0], a[1]) for a in leaves)


def test_training_only_samples_the_first_n_origins(setup):
    build, arrays, tr, va, *_ = setup
    cfg = TrainParams(steps=2, batch_size=4, eval_every=1, val_windows=len(va))
    train = jax.jit(make_train(build, P, Q, cfg))
    # a padded origin list draws exactly what the unpadded one does (the padding is never sampled)
    padded = jnp.concatenate([jnp.asarray(tr), jnp.full(10_000, tr[0], jnp.int32)])
    p1, _ = train(jax.random.key(3), arrays, padded, jnp.int32(tr.size), jnp.asarray(va))
    p2, _ = train(jax.random.key(3), arrays, jnp.asarray(tr), jnp.int32(tr.size), jnp.asarray(va))
    for a, b in zip(jax.tree.leaves(p1), jax.tree.leaves(p2), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_stats_baseline_forecasts_and_falls_back_on_a_broken_series_counted():
    x = np.stack([np.full(400, 5.0), 50 + 10 * np.sin(np.arange(400) / 7.0)], 1)
    x[100:150, 0] = np.nan  # inside the fit window only: the fit of series 0 fails
    o = np.array([300, 312])
    pr, fallbacks = stats_forecast("ets", x, o, 12, 280, StatsHP(fit_steps=200, context_steps=48))
    assert pr.shape == (2, 12, 2) and np.all(np.isfinite(pr)) and fallbacks == 1
    np.testing.assert_allclose(pr[:, :, 0], 5.0)  # last value
    assert np.abs(pr[:, :, 1] - x[o[:, None] + np.arange(12), 1]).mean() < 10.0
    with pytest.raises(ValueError, match="context"):
        stats_forecast("ets", x, np.array([20]), 12, 280, StatsHP(fit_steps=200, context_steps=48))


def test_training_in_checkpointed_chunks_equals_one_scan_and_resumes_bit_identically(setup, tmp_path):
    from mlsys_repro.common.repro.checkpoint import Checkpointer, run_chunked

    build, arrays, tr, va, *_ = setup
    cfg = TrainParams(steps=6, batch_size=4, lr=0.02, eval_every=2, val_windows=len(va))
    train = make_train(build, P, Q, cfg)
    args = (arrays, jnp.asarray(tr), jnp.int32(tr.size), jnp.asarray(va))
    assert train.rounds == 3
    one, curves1 = jax.jit(train)(jax.random.key(5), *args)
    advance = jax.jit(lambda s: train.advance(s, *args, rounds=1))
    state0 = jax.jit(train.start)(jax.random.key(5), *args)

    def run(ck, die_after=None):
        def chunk(s):
            if die_after is not None and int(s[-1]) == die_after:
                raise KeyboardInterrupt  # a kill after the checkpoint of round ``die_after``
            return advance(s)

        state, hist = run_chunked(chunk, state0, train.rounds, ck)
        return train.finish(state, jax.tree.map(lambda *h: jnp.concatenate(h), *hist))

    chunked, curves2 = run(None)
    with pytest.raises(KeyboardInterrupt):
        run(Checkpointer(tmp_path / "ck"), die_after=2)
    assert Checkpointer(tmp_path / "ck").latest_step() == 2
    resumed, curves3 = run(Checkpointer(tmp_path / "ck"))
    for a, b, c in zip(jax.tree.leaves(one), jax.tree.leaves(chunked), jax.tree.leaves(resumed), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6)
        np.testing.assert_array_equal(b, c)
    np.testing.assert_allclose(curves1["val_mae_masked"], curves2["val_mae_masked"], rtol=1e-6)
    np.testing.assert_array_equal(curves2["val_mae_masked"], curves3["val_mae_masked"])


# ------------------------------------------------------------------------------------------ early stopping


def test_early_stopping_keeps_the_best_and_ignores_evaluations_after_the_stop():
    from mlsys_repro.papers.evogwp.train import early_stopping_update

    # a hand-made validation curve; the "parameters" of round r are r itself
    curve = [5.0, 4.0, 3.0, 3.1, 3.05, 2.999, 3.2, 3.3, 1.0]
    es = ({"w": jnp.float32(-1)}, jnp.float32(jnp.inf), jnp.int32(0), jnp.asarray(False))
    stops = []
    for r, v in enumerate(curve):
        es = early_stopping_update(es, {"w": jnp.float32(r)}, jnp.float32(v), patience=3, min_delta=0.01)
        stops.append(bool(es[3]))
    # 3.1, 3.05, 2.999 do not improve 3.0 by > 1 %: stopped after round 5; 2.999 is still the best kept
    assert stops == [False] * 5 + [True] * 4
    assert float(es[0]["w"]) == 5.0 and float(es[1]) == pytest.approx(2.999)
    # the 1.0 after the stop is never seen; with a larger patience it would have been kept
    es2 = ({"w": jnp.float32(-1)}, jnp.float32(jnp.inf), jnp.int32(0), jnp.asarray(False))
    for r, v in enumerate(curve):
        es2 = early_stopping_update(es2, {"w": jnp.float32(r)}, jnp.float32(v), patience=10, min_delta=0.01)
    assert float(es2[0]["w"]) == 8.0 and not bool(es2[3])


def test_plateau_rule_of_the_converged_gate():
    from mlsys_repro.papers.evogwp.train import plateaued

    assert plateaued([3.0, 2.0, 1.5, 1.5, 1.499, 1.51], 6, patience=3, tol=0.01)  # flat for the last 3 rounds
    assert not plateaued([3.0, 2.0, 1.5, 1.4, 1.3, 1.2], 6, patience=3, tol=0.01)  # still falling
    assert not plateaued([3.0, 2.0], 2, patience=3, tol=0.01)  # too short to tell
    # only the rounds actually run count (a frozen tail after early stopping is ignored)
    assert plateaued([3.0, 1.0, 1.0, 1.0, 1.0, 9.0, 0.1], 5, patience=3, tol=0.01)


def test_training_gates_on_hand_made_curves():
    from mlsys_repro.papers.evogwp.evaluate import training_gates

    curves = {
        "best_val": np.array([1.0, 1.3, 0.899]),
        "stopped": np.array([True, False, False]),
        "val_mae_masked": np.array([[2.0, 1.0, 1.0, 1.0], [2.0, 1.8, 1.5, 1.3], [1.0, 0.9, 0.9, 0.899]]),
        "rounds_run": np.array([4, 4, 4]),
    }
    g = training_gates(curves, val_last_value=1.2, tcfg=TrainParams(patience=2, min_delta=0.01))
    np.testing.assert_array_equal(g["converged"], [1.0, 0.0, 1.0])  # stopped / still falling / plateau
    np.testing.assert_array_equal(g["beats_trivial"], [1.0, 0.0, 1.0])  # 1.3 is worse than last value's 1.2
    # beats_untrained: the kept score must beat the initial parameters' by init_margin (2 % here): seed 0 learned
    # (1.0 vs 2.0), seed 1 kept a worse score than its start, seed 2 is 0.899 vs 0.91 (1.2 % better: not enough)
    curves["val_init"] = np.array([2.0, 1.2, 0.91])
    g = training_gates(curves, val_last_value=1.2, tcfg=TrainParams(patience=2, min_delta=0.01, init_margin=0.02))
    np.testing.assert_array_equal(g["beats_untrained"], [1.0, 0.0, 0.0])
    # a converged run whose plateau is only the schedule's (it never left its start) passes converged, not this
    flat = {"best_val": np.array([1.0]), "stopped": np.array([True]), "val_mae_masked": np.array([[1.0] * 4]),
            "rounds_run": np.array([4]), "val_init": np.array([1.0])}
    g = training_gates(flat, val_last_value=2.0, tcfg=TrainParams(patience=2, min_delta=0.01))
    assert g["converged"][0] == 1.0 and g["beats_untrained"][0] == 0.0


def test_early_stopping_in_the_loop_freezes_and_returns_the_best(setup):
    build, arrays, tr, va, *_ = setup
    # min_delta 0.9: no round can improve by 90 %, so the run stops after patience = 1 round past the first
    cfg = TrainParams(steps=80, batch_size=8, lr=0.02, eval_every=10, val_windows=len(va), patience=1,
                      min_delta=0.9, lr_milestones=[])
    train = make_train(build, P, Q, cfg)
    args = (arrays, jnp.asarray(tr), jnp.int32(tr.size), jnp.asarray(va))
    keys = jax.vmap(jax.random.key)(jnp.asarray([0, 1]))
    params, curves = jax.jit(jax.vmap(train, in_axes=(0, None, None, None, None)))(keys, *args)
    np.testing.assert_array_equal(np.asarray(curves["rounds_run"]), [2, 2])
    assert np.all(np.asarray(curves["stopped"]))
    val = np.asarray(curves["val_mae_masked"])
    np.testing.assert_array_equal(val[:, 2:], val[:, 1:2].repeat(6, 1))  # frozen after the stop
    np.testing.assert_allclose(np.asarray(curves["best_val"]), val[:, :2].min(1), rtol=1e-6)
    predict = jax.vmap(make_predict(build, P, Q), in_axes=(0, None, None))
    y = np.asarray(gather(arrays, jnp.asarray(va), P, Q)["y"])
    err = np.abs(np.asarray(predict(params, arrays, jnp.asarray(va))) - y).mean(axis=(1, 2, 3))
    np.testing.assert_allclose(err, val[:, :2].min(1), rtol=1e-4)  # the returned parameters are the best ones
    # the seed-batched advance (which skips rounds once every seed has stopped) computes the same thing
    state = jax.vmap(train.start, in_axes=(0, None, None, None, None))(keys, *args)
    adv = jax.jit(lambda s: train.advance_seeds(s, *args, rounds=train.rounds))
    state, hist = adv(state)
    best, c2 = train.finish(state, hist)
    np.testing.assert_allclose(np.asarray(c2["val_mae_masked"]), val, rtol=1e-5)
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(best), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_early_stopping_waits_for_the_first_learning_rate_decay(setup):
    build, arrays, tr, va, *_ = setup
    # same hopeless min_delta, but the LR decays at step 40: the first stop allowed is at the evaluation of step 50
    cfg = TrainParams(steps=80, batch_size=8, lr=0.02, eval_every=10, val_windows=len(va), patience=1,
                      min_delta=0.9, lr_milestones=[0.5])
    train = jax.jit(make_train(build, P, Q, cfg))
    _, curves = train(jax.random.key(0), arrays, jnp.asarray(tr), jnp.int32(tr.size), jnp.asarray(va))
    assert int(curves["rounds_run"]) == 5 and bool(curves["stopped"])
    # two decays (steps 20 and 60): patience 2 is counted from the first, so the run stops at the evaluation of
    # step 40 (bad rounds at 30 and 40), before the second decay
    cfg = TrainParams(steps=80, batch_size=8, lr=0.02, eval_every=10, val_windows=len(va), patience=2,
                      min_delta=0.9, lr_milestones=[0.25, 0.75])
    train = jax.jit(make_train(build, P, Q, cfg))
    _, curves = train(jax.random.key(0), arrays, jnp.asarray(tr), jnp.int32(tr.size), jnp.asarray(va))
    assert int(curves["rounds_run"]) == 4 and bool(curves["stopped"])


def test_patience_is_counted_only_after_the_first_decay_on_a_hand_made_curve():
    from mlsys_repro.papers.evogwp.train import early_stopping_update

    # an early dip (round 0, the "step-50" score), a spike, then a slow descent; the first decay is after round 3
    curve = [1.00, 1.60, 1.50, 1.40, 1.20, 1.05, 0.98, 0.979, 0.978, 0.977, 0.5]
    counting = [r >= 4 for r in range(len(curve))]

    def run(count_all):
        es = ({"w": jnp.float32(-1)}, jnp.float32(jnp.inf), jnp.int32(0), jnp.asarray(False))
        stop = None
        for r, v in enumerate(curve):
            es = early_stopping_update(es, {"w": jnp.float32(r)}, jnp.float32(v), patience=3, min_delta=0.005,
                                       counting=True if count_all else counting[r])
            if stop is None and bool(es[3]):
                stop = r
        return stop, float(es[0]["w"])

    # counted from the start, rounds 1-3 use up the patience during the spike: stopped at round 3, keeping round 0
    assert run(count_all=True) == (3, 0.0)
    # counted after the decay only: rounds 4 and 5 are bad (not 0.5 % better than 1.00), round 6 improves by 2 %
    # and resets the count, rounds 7-9 improve by < 0.5 % each: stopped at round 9, keeping its parameters (the
    # lowest score); round 10 is never seen
    assert run(count_all=False) == (9, 9.0)


def test_warm_up_schedule_on_known_values():
    from mlsys_repro.papers.evogwp.train import lr_factor

    # 4 warm-up updates, decays x0.1 at updates 6 and 8
    got = np.asarray(lr_factor(jnp.arange(10), 4, [6, 8], 0.1))
    np.testing.assert_allclose(got, [0.25, 0.5, 0.75, 1.0, 1.0, 1.0, 0.1, 0.1, 0.01, 0.01], rtol=1e-6)
    np.testing.assert_allclose(np.asarray(lr_factor(jnp.arange(3), 0, [], 0.1)), [1.0, 1.0, 1.0])
    # a decay inside the warm-up multiplies the ramp
    np.testing.assert_allclose(np.asarray(lr_factor(jnp.arange(4), 4, [2], 0.5)), [0.25, 0.5, 0.375, 0.5])


def test_the_optimiser_applies_the_schedule_times_the_peak_rate():
    from mlsys_repro.papers.evogwp.train import make_step

    # a one-parameter "model" whose Adam direction is -sign(grad) at every step (constant gradient): the update of
    # step t is exactly -lr * lr_factor(t)
    cfg = TrainParams(steps=8, batch_size=1, lr=0.5, warmup_steps=2, lr_milestones=[0.5], eval_every=8)
    build = builder("dlinear", parse_hparams("dlinear", {"kernel": 3}), num_nodes=1, input_len=P, horizon=Q)
    tx, _, _ = make_step(build, P, Q, cfg)
    p = {"w": jnp.float32(0.0)}
    st = tx.init(p)
    moves = []
    for _ in range(6):
        upd, st = tx.update({"w": jnp.float32(2.0)}, st, p)
        moves.append(float(0.5 * upd["w"]))
    np.testing.assert_allclose(moves, [-0.25, -0.5, -0.5, -0.5, -0.05, -0.05], rtol=1e-4)


def test_a_grid_of_learning_rates_vmaps_like_seeds(setup):
    build, arrays, tr, va, *_ = setup
    cfg = TrainParams(steps=20, batch_size=8, lr=0.02, eval_every=10, val_windows=len(va), warmup_steps=5)
    train = make_train(build, P, Q, cfg)
    args = (arrays, jnp.asarray(tr), jnp.int32(tr.size), jnp.asarray(va))
    keys = jax.vmap(jax.random.key)(jnp.asarray([7, 7]))
    both = jax.jit(jax.vmap(train, in_axes=(0, None, None, None, None, 0)))(keys, *args, jnp.asarray([0.001, 0.05]))
    for i, lr in enumerate((0.001, 0.05)):
        p1, c1 = jax.jit(train)(jax.random.key(7), *args, lr)
        np.testing.assert_allclose(np.asarray(both[1]["val_mae_masked"][i]), np.asarray(c1["val_mae_masked"]),
                                   rtol=1e-5)
        assert float(both[1]["lr"][i]) == pytest.approx(lr)
    assert not np.allclose(np.asarray(both[1]["val_mae_masked"][0]), np.asarray(both[1]["val_mae_masked"][1]))
    # the initial parameters' score is recorded (same seed: same initial parameters), and the kept round
    np.testing.assert_allclose(np.asarray(both[1]["val_init"][0]), np.asarray(both[1]["val_init"][1]))
    assert set(np.asarray(both[1]["best_round"]).tolist()) <= {1, 2}


def test_slope_before_the_first_decay_on_a_known_curve():
    from mlsys_repro.papers.evogwp.train import slope_before_decay

    # evaluations every 50 steps; decay at step 200: the last 4 at or before it are steps 50..200, values falling
    # 0.02 per 50 steps around a mean of 1.0 -> -0.04 per 100 steps = -4 % per 100 steps
    curve = [1.03, 1.01, 0.99, 0.97, 0.5, 0.5]
    assert slope_before_decay(curve, 6, 50, 200) == pytest.approx(-4.0)
    assert slope_before_decay([2.0, 2.0, 2.0], 3, 50, 150) == pytest.approx(0.0)
    assert np.isnan(slope_before_decay([1.0, 0.5], 2, 50, 50))  # one evaluation before the decay
