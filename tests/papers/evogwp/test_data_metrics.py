"""EvoGWP data preparation, splits, window origins and the exact metric definitions."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mlsys_repro.common.traces.workload import load_workload_matrix
from mlsys_repro.papers.evogwp.baselines import last_value, seasonal_naive
from mlsys_repro.papers.evogwp.data import (
    DataError,
    Scaler,
    aggregate_steps,
    check_time,
    chrono_split,
    fill_gaps,
    origins,
    prepare,
    select_entities,
    tail_split,
)
from mlsys_repro.papers.evogwp.metrics import forecast_metrics, scored_cells
from tests.conftest import DATA

NAN = np.nan


def test_fill_gaps_forward_fills_and_counts():
    v = np.array([[NAN, 1.0], [2.0, NAN], [NAN, NAN], [4.0, 5.0]], np.float32)
    filled, obs, n = fill_gaps(v)
    np.testing.assert_array_equal(
        filled, [[2, 1], [2, 1], [2, 1], [4, 5]]
    )  # leading gap <- first observed value
    assert n == 4 and obs.sum() == 4
    with pytest.raises(DataError, match="no observed value"):
        fill_gaps(np.array([[1.0, NAN], [2.0, NAN]]), ["a", "b"])


def test_aggregate_steps_ignores_gaps_and_drops_remainder():
    v = np.array([[1.0], [3.0], [NAN], [NAN], [5.0], [6.0], [7.0]], np.float32)
    a = aggregate_steps(v, 2)
    assert a.shape == (3, 1)
    np.testing.assert_array_equal(a[:, 0], [2.0, NAN, 5.5])
    with pytest.raises(DataError):
        aggregate_steps(v, 0)


def test_select_entities_is_deterministic_and_spread():
    names = [f"vm_{i}" for i in range(402)]
    idx = select_entities(names, 48)
    assert len(idx) == len(set(idx)) == 48 and idx[0] == 0 and idx[-1] == 401
    assert select_entities(names, 0) == list(range(402)) == select_entities(names, 500)


def test_check_time_errors():
    assert check_time(np.array([0, 300, 600])) == 300
    with pytest.raises(DataError, match="not increasing"):
        check_time(np.array([0, 300, 300]))
    with pytest.raises(DataError, match="not increasing"):
        check_time(np.array([0, 600, 300]))
    with pytest.raises(DataError, match="uneven"):
        check_time(np.array([0, 300, 900]))


def test_splits():
    s = chrono_split(1000)
    assert (s.train_end, s.val_end) == (700, 800)
    t = tail_split(62 * 288, 14 * 288, 31 * 288)
    assert t.train_end == 31 * 288 and t.val_end == 48 * 288
    with pytest.raises(DataError):
        chrono_split(1000, 0.9, 0.2)


@given(
    st.integers(0, 200),
    st.integers(1, 300),
    st.integers(1, 24),
    st.integers(1, 24),
    st.integers(1, 13),
    st.integers(0, 100),
)
@settings(max_examples=60, deadline=None)
def test_origins_respect_history_and_range(start, length, p, q, stride, min_origin):
    end = start + length
    o = origins(start, end, p, q, stride, min_origin)
    assert np.all(o >= start) and np.all(o >= p) and np.all(o >= min_origin) and np.all(o + q <= end)
    if o.size > 1:
        assert np.all(np.diff(o) == stride)


def test_scaler_uses_observed_training_values_only():
    v = np.array([[1.0, 3.0], [NAN, 5.0]], np.float32)
    sc = Scaler.fit(v, ~np.isnan(v))
    assert sc.mean == pytest.approx(3.0) and sc.std == pytest.approx(np.std([1.0, 3.0, 5.0]))
    assert Scaler.fit(np.ones((3, 2))).std == 1.0  # constant data: no division by zero


def test_prepare_counts_constants_and_phase():
    v = np.array([[1.0, 7.0], [NAN, 7.0], [3.0, 7.0], [4.0, 7.0]], np.float32)
    s = prepare(name="t", values=v, entities=["a", "b"], period_5min=4)
    assert s.num_filled == 1 and s.constant_entities == ("b",) and s.period == 4


# -------------------------------------------------------------------------------------------------- metrics


def test_metrics_known_answer_masked_and_unmasked():
    y = np.array([[[0.0, 2.0], [4.0, NAN]]])  # [W=1, Q=2, N=2]; one zero target, one gap
    p = np.array([[[1.0, 1.0], [1.0, 9.0]]])
    m = forecast_metrics(p, y)
    assert m["mae"][0] == pytest.approx((1 + 1 + 3) / 3)
    assert m["mae_masked"][0] == pytest.approx((1 + 3) / 2)
    assert m["rmse"][0] == pytest.approx(np.sqrt((1 + 1 + 9) / 3))
    assert m["mape_masked"][0] == pytest.approx(100 * (0.5 + 0.75) / 2)
    np.testing.assert_allclose(m["mae"][1], [1.0, 3.0])
    np.testing.assert_allclose(m["mae_masked"][1], [1.0, 3.0])
    assert scored_cells(y) == {"cells": 4, "scored": 3, "scored_masked": 2}


def test_metrics_reject_nan_predictions_and_shape_mismatch():
    y = np.ones((1, 2, 2))
    with pytest.raises(ValueError, match="NaN"):
        forecast_metrics(np.full_like(y, NAN), y)
    with pytest.raises(ValueError, match="W, Q, N"):
        forecast_metrics(np.ones((2, 2)), np.ones((2, 2)))


def test_metrics_per_step_accumulation_matches_whole_array_pooling():
    """The step-by-step sums give the pooled definition computed over the whole array at once: random
    predictions, gaps, zero targets, an extra ``observed`` mask, and one step with nothing scored (NaN there,
    ignored in the average)."""
    rng = np.random.default_rng(0)
    y = rng.gamma(2.0, 3.0, (7, 4, 5))
    y[rng.random(y.shape) < 0.2] = 0.0
    y[rng.random(y.shape) < 0.1] = NAN
    y[:, 2] = NAN
    p = y + rng.normal(0.0, 2.0, y.shape)
    p[np.isnan(p)] = 1.0
    observed = rng.random(y.shape) < 0.9
    m = forecast_metrics(p, y, observed)
    obs = observed & np.isfinite(y)
    nz = obs & (np.nan_to_num(y) != 0)
    ae = np.abs(p - np.nan_to_num(y))
    y_nz = np.where(nz, np.abs(np.nan_to_num(y)), 1.0)
    refs = {"mae": (ae, obs), "rmse": (ae**2, obs), "mae_masked": (ae, nz), "rmse_masked": (ae**2, nz),
            "mape_masked": (100 * ae / y_nz, nz)}
    for name, (err, mask) in refs.items():
        avg, per_h = m[name]
        want_avg = err[mask].mean()
        want_h = np.array([err[:, h][mask[:, h]].mean() if mask[:, h].any() else NAN for h in range(4)])
        if name.startswith("rmse"):
            want_avg, want_h = np.sqrt(want_avg), np.sqrt(want_h)
        assert avg == pytest.approx(want_avg, rel=1e-12), name
        np.testing.assert_allclose(per_h, want_h, rtol=1e-12, err_msg=name)
        assert np.isnan(per_h[2]), name


def _reference(path: str):
    """Last value and seasonal naive on the last 20 %, NaN forward-filled, every window, as data/README.md."""
    import pandas as pd

    wm = load_workload_matrix(DATA / path)
    x = pd.DataFrame(wm.values).ffill().to_numpy(np.float32)
    o = origins(int(0.8 * x.shape[0]), x.shape[0], 12, 12)
    y = x[o[:, None] + np.arange(12)]
    lv = forecast_metrics(last_value(x, o, 12), y)
    sn = forecast_metrics(seasonal_naive(x, o, 12, 288), y)
    return lv["mae"][0], lv["rmse"][0], sn["mae"][0], sn["rmse"][0]


@pytest.mark.parametrize(
    "path, expected",
    [
        ("workload_traces/google2011_gcd_97jobs/cpu_pct.csv.gz", (1.423, 2.415, 2.615, 4.251)),
        ("workload_traces/azure_v1_100vm/cpu_avg_pct.csv.gz", (2.334, 7.455, 3.189, 9.700)),
    ],
)
def test_naive_baselines_match_the_published_reference_numbers(path, expected):
    np.testing.assert_allclose(_reference(path), expected, atol=1.5e-3)


def test_seasonal_naive_needs_a_season_of_history():
    with pytest.raises(ValueError, match="season"):
        seasonal_naive(np.ones((10, 1)), np.array([3]), 2, 5)
