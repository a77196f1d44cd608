"""Checkpoints, ``mlsys_repro.papers.evogwp.predict`` and the scoring CLI on data the model never saw, including bad
input."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.papers.evogwp import predict as package_predict
from mlsys_repro.papers.evogwp.arrays import build_arrays
from mlsys_repro.papers.evogwp.baselines import last_value
from mlsys_repro.papers.evogwp.data import DataError, prepare
from mlsys_repro.papers.evogwp.evaluate import PolicyResult, graph_arrays, prepare_dataset, save_checkpoint
from mlsys_repro.papers.evogwp.inference import load
from mlsys_repro.papers.evogwp.schemas import ForecasterPolicy, ForecastParams, TrainParams
from mlsys_repro.papers.evogwp.score import main
from mlsys_repro.papers.evogwp.train import init_params, make_predict, make_segment_predict, segment_grid

PERIOD = 288
DAYS = 4
N = 5
T0 = 1_372_629_600  # Unix seconds of step 0 (a day start on the training clock)
HP = {
    "evogwp": {
        "hidden": 4,
        "evo_hidden": 4,
        "emb_dim": 2,
        "context_segments": 2,
        "segments_per_day": 12,
        "num_shapelets": 4,
        "candidates_per_shapelet": 2,
        "shapelet_steps": 3,
        "shapelet_samples": 16,
        "top_shapelets": 2,
        "min_class_size": 1,
    },
    "dcrnn": {"hidden": 4},
    "dlinear": {"kernel": 5},
}


def _values(days: int, n: int = N, seed: int = 0) -> np.ndarray:
    t = np.arange(days * PERIOD)
    rng = np.random.default_rng(seed)
    base = 30 + 20 * np.sin(2 * np.pi * t / PERIOD)[:, None] * rng.uniform(0.5, 1.5, n)
    return np.clip(base + rng.normal(0, 2, (t.size, n)), 0, 100).astype(np.float32)


def _write_csv(path: Path, values: np.ndarray, names, start_step: int = 0, time=None) -> Path:
    ts = T0 + 300 * (start_step + np.arange(values.shape[0])) if time is None else np.asarray(time)
    df = pd.DataFrame(values, columns=list(names))
    df.insert(0, "ts", ts)
    with gzip.open(path, "wt") as f:
        df.to_csv(f, index=False, float_format="%.2f", na_rep="")
    return path


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """Untrained (initialised) small models of three kinds, saved as checkpoints from a synthetic training
    set."""
    d = tmp_path_factory.mktemp("ckpt")
    names = [f"vm_{i}" for i in range(N)]
    s = prepare(
        name="synthetic", values=_values(DAYS), entities=names, time=T0 + 300 * np.arange(DAYS * PERIOD)
    )
    p = ForecastParams(datasets=["synthetic"], train=TrainParams(val_windows=4))
    ds = prepare_dataset(s, p, min_origin=(2 + 1) * 24)
    out = {}
    for kind, hp in HP.items():
        pol = ForecasterPolicy(name=kind, kind=kind, hparams=hp)
        extra, evo = graph_arrays(kind, pol.hp, ds)
        from mlsys_repro.papers.evogwp.forecasters import builder

        build = builder(
            kind,
            pol.hp,
            num_nodes=N,
            input_len=12,
            horizon=12,
            num_shapelets=evo.shapelets.v.shape[0] if evo else 0,
        )
        params = jax.tree.map(lambda a: a[None], init_params(build, jax.random.key(0)))
        res = PolicyResult(
            np.zeros((1, 1, 12, N)), [0], 0.0, params=params, build=build, evo=evo, extra=extra
        )
        out[kind] = (save_checkpoint(d / f"{kind}.npz", pol, ds, p, res), ds, build, evo, extra)
    return out


def test_checkpoint_roundtrip_reproduces_the_forecasts(ckpts):
    path, ds, build, evo, extra = ckpts["evogwp"]
    f = load(path)
    assert f.kind == "evogwp" and not f.fixed_entities and f.entities == ds.series.entities
    o = ds.test_o[:3]
    got = f.forecast(ds.series, o)
    arrays = build_arrays(ds.series, ds.scaler, pad=12, **evo.arrays(ds.x_std))
    params = init_params(build, jax.random.key(0))
    want = make_predict(build, 12, 12, evo.context)(
        params, {k: jnp.asarray(v) for k, v in arrays.items()}, jnp.asarray(o)
    )
    np.testing.assert_allclose(got, np.asarray(want), rtol=1e-5, atol=1e-5)
    # the residual models start at the last value, so an untrained checkpoint forecasts it
    np.testing.assert_allclose(got, last_value(ds.series.filled, o, 12), rtol=1e-4, atol=1e-3)


def test_predict_forecasts_the_next_horizon(ckpts):
    path, ds, *_ = ckpts["dlinear"]
    hist = pd.DataFrame(ds.series.filled, columns=list(ds.series.entities))
    hist.insert(0, "ts", ds.series.time)
    fc = package_predict(str(path), hist)
    assert fc.shape == (12, N) and np.all(np.isfinite(fc))
    np.testing.assert_allclose(
        fc, load(path).forecast(ds.series, np.array([ds.series.num_steps]))[0], rtol=1e-5
    )


def _run(capsys, *argv):
    rc = main([str(a) for a in argv])
    cap = capsys.readouterr()
    return rc, (json.loads(cap.out) if rc == 0 else None), cap.err


def test_score_cli_scores_every_window_of_new(ckpts, tmp_path, capsys):
    names = [f"vm_{i}" for i in range(N)]
    old = _write_csv(tmp_path / "old.csv.gz", _values(2, seed=1), names)
    newv = _values(1, seed=2)
    new = _write_csv(tmp_path / "new.csv.gz", newv, names, start_step=2 * PERIOD)
    rc, rep, err = _run(
        capsys,
        "--checkpoint",
        ckpts["dcrnn"][0],
        "--csv",
        new,
        "--history",
        old,
        "--input",
        12,
        "--horizon",
        12,
    )
    assert rc == 0, err
    assert rep["windows"] == PERIOD - 12 + 1 and rep["windows_skipped"] == 0
    assert set(rep["metrics"]) == {"dcrnn", "last_value", "seasonal_naive"}
    # the last-value numbers are computed on exactly these windows
    hist = np.concatenate([_values(2, seed=1), newv])
    o = 2 * PERIOD + np.arange(rep["windows"])
    y = hist[o[:, None] + np.arange(12)]
    want = np.abs(np.round(hist, 2)[o - 1][:, None] - np.round(y, 2)).mean()
    assert rep["metrics"]["last_value"]["mae"] == pytest.approx(want, rel=1e-4)
    assert len(rep["metrics"]["dcrnn"]["mae_per_horizon"]) == 12
    # without OLD, the windows of NEW's first day lack the history seasonal naive needs: skipped and counted
    new2 = _write_csv(tmp_path / "new2.csv.gz", _values(2, seed=2), names)
    rc, rep2, err = _run(capsys, "--checkpoint", ckpts["dlinear"][0], "--csv", new2)
    assert rc == 0, err
    assert rep2["windows"] == PERIOD - 12 + 1 and rep2["windows_skipped"] == PERIOD
    rc, _, err = _run(capsys, "--checkpoint", ckpts["dlinear"][0], "--csv", new)
    assert rc == 2 and "--history" in err
    # --stride 12 scores exactly every 12th of the same windows
    rc, rep3, err = _run(capsys, "--checkpoint", ckpts["dlinear"][0], "--csv", new2, "--stride", 12)
    assert rc == 0, err
    assert rep3["windows"] == len(range(PERIOD, 2 * PERIOD - 12 + 1, 12)) and rep3["stride"] == 12
    o12 = PERIOD + 12 * np.arange(rep3["windows"])
    v2 = _values(2, seed=2)
    want12 = np.abs(np.round(v2, 2)[o12 - 1][:, None] - np.round(v2, 2)[o12[:, None] + np.arange(12)]).mean()
    assert rep3["metrics"]["last_value"]["mae"] == pytest.approx(want12, rel=1e-4)


def test_graph_free_models_score_unseen_entities_fixed_graph_models_refuse(ckpts, tmp_path, capsys):
    other = [f"job_{i}" for i in range(3)]
    new = _write_csv(tmp_path / "new.csv.gz", _values(2, n=3, seed=3), other)
    rc, rep, err = _run(capsys, "--checkpoint", ckpts["evogwp"][0], "--csv", new)
    assert rc == 0, err
    assert rep["entities_scored"] == 3 and rep["entities_unseen"] == 3 and rep["windows"] > 0
    rc, _, err = _run(capsys, "--checkpoint", ckpts["dcrnn"][0], "--csv", new)
    assert rc == 2 and "fixed graph" in err and "vm_0" in err
    # extra columns are ignored (and listed) by a fixed-graph model
    names = [f"vm_{i}" for i in range(N)] + ["extra_vm"]
    new2 = _write_csv(tmp_path / "new2.csv.gz", _values(2, n=N + 1, seed=4), names)
    rc, rep, err = _run(capsys, "--checkpoint", ckpts["dcrnn"][0], "--csv", new2)
    assert rc == 0, err
    assert rep["entities_ignored"] == ["extra_vm"] and rep["entities_scored"] == N


def test_gaps_and_constant_series_are_counted(ckpts, tmp_path, capsys):
    names = [f"vm_{i}" for i in range(N)]
    v = _values(2, seed=5)
    v[300:310, 1] = np.nan
    v[:, 2] = 12.5
    new = _write_csv(tmp_path / "gaps.csv.gz", v, names)
    rc, rep, err = _run(capsys, "--checkpoint", ckpts["dlinear"][0], "--csv", new)
    assert rc == 0, err
    assert rep["filled_input_cells"] == 10
    assert rep["target_scored"] < rep["target_cells"]  # gap targets are never scored
    assert rep["constant_entities"] == ["vm_2"]
    assert all(
        v is None or np.isfinite(v) for v in rep["metrics"]["dlinear"].values() if not isinstance(v, list)
    )


@pytest.mark.parametrize(
    "case, message",
    [
        ("short", "too few steps"),
        ("non_monotonic", "does not increase"),
        ("horizon", "trained for 12 -> 12"),
        ("overlap", "not after the end"),
        ("bad_checkpoint", "checkpoint"),
        ("stride", "--stride must be a positive integer"),
    ],
)
def test_bad_input_is_a_clear_error(ckpts, tmp_path, capsys, case, message):
    names = [f"vm_{i}" for i in range(N)]
    ck = ckpts["dlinear"][0]
    args = []
    if case == "short":
        new = _write_csv(tmp_path / "n.csv.gz", _values(1)[:5], names)
    elif case == "non_monotonic":
        t = T0 + 300 * np.arange(40)
        t[20] = t[5]
        new = _write_csv(tmp_path / "n.csv.gz", _values(1)[:40], names, time=t)
    elif case == "horizon":
        new = _write_csv(tmp_path / "n.csv.gz", _values(2), names)
        args = ["--horizon", 6]
    elif case == "stride":
        new = _write_csv(tmp_path / "n.csv.gz", _values(2), names)
        args = ["--stride", 0]
    elif case == "overlap":
        new = _write_csv(tmp_path / "n.csv.gz", _values(1), names)
        args = ["--history", _write_csv(tmp_path / "o.csv.gz", _values(1), names, start_step=10)]
    else:
        new = _write_csv(tmp_path / "n.csv.gz", _values(2), names)
        ck = tmp_path / "broken.npz"
        ck.write_bytes(b"not a checkpoint")
    rc, _, err = _run(capsys, "--checkpoint", ck, "--csv", new, *args)
    assert rc == 2 and message in err, err


# ------------------------------------------------------------------ windows of one segment share their supports


def test_segment_grid_groups_origins_by_segment_known_answer():
    o = np.array([5, 30, 7, 50, 31, 6])
    grid, pos = segment_grid(o, 24)
    # segments 0 (three origins), 1 (two), 2 (one): rows of M = 3, 16 // 3 = 5 rows per batch -> 5 rows
    np.testing.assert_array_equal(
        grid, [[5, 7, 6], [30, 31, 30], [50, 50, 50], [50, 50, 50], [50, 50, 50]]
    )
    np.testing.assert_array_equal(pos, [0, 3, 1, 6, 4, 2])


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 500), min_size=1, max_size=80),
    st.integers(1, 30),
    st.integers(1, 32),
)
def test_segment_grid_properties(origins, seg_len, batch_windows):
    o = np.asarray(origins)
    grid, pos = segment_grid(o, seg_len, batch_windows)
    u, m = grid.shape
    assert m == np.bincount(np.unique(o // seg_len, return_inverse=True)[1]).max()
    assert u % max(1, batch_windows // m) == 0
    np.testing.assert_array_equal(grid.reshape(-1)[pos], o)  # every origin once, order restorable
    assert len(set(pos.tolist())) == o.size
    assert all(np.unique(row // seg_len).size == 1 for row in grid)  # a row never mixes segments
    assert set(grid.reshape(-1).tolist()) <= set(o.tolist())  # padding repeats real origins


@pytest.mark.parametrize("origins, seg_len", [(np.array([], int), 24), (np.zeros((2, 2), int), 24), ([1], 0)])
def test_segment_grid_bad_input(origins, seg_len):
    with pytest.raises(ValueError):
        segment_grid(np.asarray(origins), seg_len)


@pytest.mark.parametrize(
    "switches",
    [{}, {"graph": "static"}, {"learned": "embedding"}, {"learned": "none"}, {"graph": "none"}],
    ids=["evogwp", "static-graph", "free-embeddings", "no-learned", "no-graph"],
)
def test_shared_supports_give_the_per_window_forecasts(ckpts, switches):
    """The per-segment path (supports once per segment, one product for all its windows) forecasts what the
    per-window path forecasts, for EvoGWP and its ablations, on a model whose output depends on the supports
    (random, not zero, weights)."""
    from mlsys_repro.papers.evogwp.forecasters import builder

    _, ds, *_ = ckpts["evogwp"]
    pol = ForecasterPolicy(name="evogwp", kind="evogwp", hparams={**HP["evogwp"], **switches})
    extra, evo = graph_arrays("evogwp", pol.hp, ds)
    build = builder(
        "evogwp", pol.hp, num_nodes=N, input_len=12, horizon=12, num_shapelets=evo.shapelets.v.shape[0]
    )
    host = build_arrays(ds.series, ds.scaler, pad=12, **extra)
    arrays = {k: jnp.asarray(v) for k, v in host.items()}
    params = init_params(build, jax.random.key(0))
    leaves, tree = jax.tree.flatten(params)
    keys = jax.random.split(jax.random.key(1), len(leaves))
    noisy = [a + 0.3 * jax.random.normal(k, a.shape) for a, k in zip(leaves, keys, strict=True)]
    params = jax.tree.unflatten(tree, noisy)
    seg = evo.context.seg_len
    lo = evo.context.min_origin()
    # adjacent segments too, so that a grid mixing two segments in one row would fail
    o = np.array([lo + 3, lo + 2 * seg + 1, lo, lo + seg + 2, lo + 2 * seg + 5, lo + 1, lo + 3 * seg + 1, lo + 2 * seg])
    want = np.asarray(make_predict(build, 12, 12, evo.context)(params, arrays, jnp.asarray(o)))
    grid, pos = segment_grid(o, seg)
    got = np.asarray(make_segment_predict(build, 12, 12, evo.context)(params, arrays, jnp.asarray(grid)))
    got = got.reshape(-1, *got.shape[2:])[pos]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # the comparison can fail: these weights move the forecast away from the last value
    assert np.abs(want - last_value(ds.series.filled, o, 12)).max() > 0.1
    # bfloat16 diffusion products: the same forecasts up to bfloat16 rounding, and really rounded
    low = make_segment_predict(build, 12, 12, evo.context, product_dtype=jnp.bfloat16)
    low = np.asarray(low(params, arrays, jnp.asarray(grid)))
    low = low.reshape(-1, *low.shape[2:])[pos]
    gap = np.abs(low - got).max()
    assert 0 < gap < 0.02 * np.abs(want - last_value(ds.series.filled, o, 12)).max(), gap


def test_score_precision_flag(ckpts, tmp_path, capsys):
    """``--precision bfloat16`` runs EvoGWP's diffusion products in bfloat16 (the report says so; metrics
    within rounding of float32's); models without them report float32; an unknown precision is an error."""
    names = [f"vm_{i}" for i in range(N)]
    new = _write_csv(tmp_path / "new.csv.gz", _values(2, seed=6), names)
    reps = {}
    for precision in ("float32", "bfloat16"):
        rc, reps[precision], err = _run(
            capsys, "--checkpoint", ckpts["evogwp"][0], "--csv", new, "--precision", precision
        )
        assert rc == 0, err
        assert reps[precision]["precision"] == precision
    assert reps["bfloat16"]["windows"] == reps["float32"]["windows"]
    assert reps["bfloat16"]["metrics"]["last_value"] == reps["float32"]["metrics"]["last_value"]
    # with weights whose forecasts depend on the supports, the bfloat16 path is really taken: the metrics
    # move, by rounding only
    from mlsys_repro.common.traces.workload import load_workload_matrix
    from mlsys_repro.papers.evogwp.score import score

    f = load(ckpts["evogwp"][0])
    leaves, tree = jax.tree.flatten(f.params)
    keys = jax.random.split(jax.random.key(2), len(leaves))
    noisy = [a + 0.3 * jax.random.normal(k, a.shape) for a, k in zip(leaves, keys, strict=True)]
    f.params = jax.tree.unflatten(tree, noisy)
    wm = load_workload_matrix(new)
    m32, m16 = (score(f, wm, precision=p)["metrics"]["evogwp"]["mae"] for p in ("float32", "bfloat16"))
    assert m16 != m32 and m16 == pytest.approx(m32, rel=1e-2)
    rc, rep, err = _run(capsys, "--checkpoint", ckpts["dlinear"][0], "--csv", new, "--precision", "bfloat16")
    assert rc == 0 and rep["precision"] == "float32", err
    with pytest.raises(SystemExit) as e:
        main(["--checkpoint", str(ckpts["dlinear"][0]), "--csv", str(new), "--precision", "float16"])
    assert e.value.code == 2 and "invalid choice" in capsys.readouterr().err
    f = load(ckpts["evogwp"][0])
    with pytest.raises(DataError, match="precision must be one of"):
        f.products_precision("fp8")
