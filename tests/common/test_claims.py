"""Claims checker: CI maths, every verdict, tolerance edges and schema errors, on hand-made result frames."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from common.repro.claims import evaluate, mean_ci, paper_markdown, parse_claims
from common.repro.errors import ClaimsSchemaError


def frame(values: dict[str, list[float]], metric="m", **cols) -> pd.DataFrame:
    rows = []
    for pol, vals in values.items():
        for s, v in enumerate(vals):
            rows.append({"policy": pol, "seed": s, "metric": metric, "value": v, "unit": "s",
                         "profile": "smoke", **cols})
    return pd.DataFrame(rows)


def claim(**kw):
    base = dict(id="c", source="abstract", experiment="e", metric="m", ours="a", baseline="b", kind="ratio",
                better="lower", paper_value=2.0, tolerance=0.1)
    base.update(kw)
    base = {k: v for k, v in base.items() if v is not None or k == "paper_value"}
    return parse_claims([base])[0]


def test_mean_ci_matches_student_t():
    x = [1.0, 2.0, 4.0, 7.0]
    m, lo, hi, n = mean_ci(x)
    h = stats.t.ppf(0.975, 3) * np.std(x, ddof=1) / 2
    assert (m, n) == (3.5, 4) and lo == pytest.approx(3.5 - h) and hi == pytest.approx(3.5 + h)
    assert mean_ci([5.0]) == (5.0, 5.0, 5.0, 1)
    assert mean_ci([3.0, 3.0, 3.0])[1:3] == (3.0, 3.0)
    assert math.isnan(mean_ci([])[0])


@given(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=30))
@settings(max_examples=50, deadline=None)
def test_mean_ci_contains_mean(xs):
    m, lo, hi, n = mean_ci(xs)
    assert lo <= m + 1e-6 * (1 + abs(m)) and m <= hi + 1e-6 * (1 + abs(m)) and n == len(xs)


def test_reproduced_ratio():
    df = frame({"a": [5.0, 5.1, 4.9], "b": [10.0, 10.0, 10.0]})
    v = evaluate(claim(), df)
    assert v.verdict == "REPRODUCED" and v.mean == pytest.approx(np.mean([10 / 5, 10 / 5.1, 10 / 4.9]))


def test_censored_own_runs_cannot_reproduce():
    times = frame({"a": [5.0, 5.1, 4.9], "b": [10.0, 10.0, 10.0]})
    reached = frame({"a": [1.0, 0.0, 1.0], "b": [1.0, 1.0, 1.0]}, metric="reached_target")
    df = pd.concat([times, reached])
    assert evaluate(claim(), df).verdict == "REPRODUCED"  # without the guard the censored time counts
    v = evaluate(claim(reached="reached_target"), df)
    assert v.verdict == "NOT_REPRODUCED" and "1/3 runs" in v.note and v.mean == pytest.approx(2.0, rel=0.02)
    all_reached = pd.concat([times, frame({"a": [1.0] * 3, "b": [0.0] * 3}, metric="reached_target")])
    assert evaluate(claim(reached="reached_target"), all_reached).verdict == "REPRODUCED"  # baseline censored: ok
    assert evaluate(claim(reached="reached_target"), times).verdict == "SKIPPED"


def test_direction_only_when_magnitude_off():
    df = frame({"a": [8.0, 8.1, 7.9], "b": [10.0, 10.0, 10.0]})  # 1.25x vs claimed 2x
    assert evaluate(claim(), df).verdict == "DIRECTION_ONLY"


def test_not_reproduced_wrong_direction():
    df = frame({"a": [12.0, 12.1, 11.9], "b": [10.0, 10.0, 10.0]})
    v = evaluate(claim(), df)
    assert v.verdict == "NOT_REPRODUCED" and "wrong direction" in v.note


def test_not_reproduced_when_ci_includes_no_effect():
    df = frame({"a": [5.0, 15.0, 9.0], "b": [10.0, 10.0, 10.0]})  # mean ratio > 1 but noisy
    v = evaluate(claim(paper_value=None), df)
    assert v.verdict == "NOT_REPRODUCED" and "CI includes no effect" in v.note


@pytest.mark.parametrize("ours, verdict", [(10 / 2.2, "REPRODUCED"), (10 / 2.2001, "DIRECTION_ONLY"),
                                           (10 / 1.8, "REPRODUCED"), (10 / 1.7999, "DIRECTION_ONLY")])
def test_tolerance_edges(ours, verdict):
    df = frame({"a": [ours], "b": [10.0]})  # single deterministic run
    v = evaluate(claim(), df)
    assert v.verdict == verdict and v.n == 1 and "single run" in v.note


def test_absolute_tolerance_and_at_least():
    df = frame({"a": [60.0, 61.0, 59.0], "b": [100.0, 100.0, 100.0]})  # 40 % reduction
    assert evaluate(claim(kind="pct_reduction", paper_value=48.41, tolerance={"abs": 10}), df).verdict == "REPRODUCED"
    assert evaluate(claim(kind="pct_reduction", paper_value=48.41, tolerance={"abs": 5}), df).verdict == \
        "DIRECTION_ONLY"
    assert evaluate(claim(kind="pct_reduction", paper_value=30, match="at_least"), df).verdict == "REPRODUCED"


def test_pct_gain_higher_is_better():
    df = frame({"a": [0.9, 0.91, 0.89], "b": [0.8, 0.8, 0.8]})
    v = evaluate(claim(kind="pct_gain", better="higher", paper_value=12.5), df)
    assert v.verdict == "REPRODUCED" and v.mean == pytest.approx(12.5, abs=0.7)


def test_diff_kind():
    df = frame({"a": [0.9, 0.92, 0.91], "b": [0.8, 0.81, 0.8]})
    v = evaluate(claim(kind="diff", better="higher", paper_value=None), df)
    assert v.verdict == "REPRODUCED" and v.mean == pytest.approx(0.1067, abs=1e-3)


@pytest.mark.parametrize("ours, verdict", [
    ([0.80, 0.80, 0.80], "REPRODUCED"),  # equal: CI (zero width) above -0.01
    ([0.795, 0.796, 0.794], "REPRODUCED"),  # 0.5 pp worse, tight CI: still within the 1 pp margin
    ([0.81, 0.78, 0.80], "DIRECTION_ONLY"),  # mean -0.33 pp, CI reaches below -1 pp
    ([0.785, 0.787, 0.786], "NOT_REPRODUCED"),  # 1.4 pp worse
])
def test_non_inferiority_margin(ours, verdict):
    df = frame({"a": ours, "b": [0.8, 0.8, 0.8]})
    v = evaluate(claim(kind="diff", better="higher", paper_value=None, margin=0.01), df)
    assert v.verdict == verdict and "non-inferiority" in v.note
    # without the margin the same claim is a superiority claim, which none of these frames supports
    assert evaluate(claim(kind="diff", better="higher", paper_value=None), df).verdict == "NOT_REPRODUCED"


def test_over_max_and_mean():
    parts = []
    for bw, speed in ((1.0, 1.2), (10.0, 1.5)):
        df = frame({"a": [10 / speed] * 3, "b": [10.0] * 3}, bw=bw)
        parts.append(df)
    df = pd.concat(parts)
    vmax = evaluate(claim(over="bw", aggregate="max", paper_value=1.5), df)
    assert vmax.mean == pytest.approx(1.5) and "bw=10.0" in vmax.note and vmax.verdict == "REPRODUCED"
    vmean = evaluate(claim(over="bw", aggregate="mean", paper_value=1.35), df)
    assert vmean.mean == pytest.approx(1.35) and vmean.verdict == "REPRODUCED"


def test_ambiguous_rows_are_a_schema_error():
    df = pd.concat([frame({"a": [1.0], "b": [2.0]}, bw=1.0), frame({"a": [1.0], "b": [2.0]}, bw=2.0)])
    with pytest.raises(ClaimsSchemaError, match="several rows"):
        evaluate(claim(), df)
    assert evaluate(claim(where={"bw": 1.0}), df).verdict == "REPRODUCED"


def test_deterministic_baseline_is_broadcast():
    df = pd.concat([frame({"a": [5.0, 5.0, 5.0]}), frame({"b": [10.0]})])
    v = evaluate(claim(), df)
    assert v.n == 3 and v.verdict == "REPRODUCED"


def test_ordering():
    df = frame({"a": [1.0, 1.1, 0.9], "b": [2.0, 2.1, 1.9], "c": [3.0, 3.0, 3.1]})
    c = claim(kind="ordering", baseline=["b", "c"], paper_value=None)
    v = evaluate(c, df)
    assert v.verdict == "REPRODUCED" and "2/2" in v.note and v.mean == pytest.approx(1.0)
    df2 = frame({"a": [1.0, 1.1, 0.9], "b": [1.0, 1.2, 0.95], "c": [3.0, 3.0, 3.1]})
    assert evaluate(c, df2).verdict in ("DIRECTION_ONLY", "NOT_REPRODUCED")
    df3 = frame({"a": [2.0, 2.1, 1.9], "b": [1.0, 1.0, 1.0], "c": [3.0, 3.0, 3.1]})
    assert evaluate(c, df3).verdict == "NOT_REPRODUCED"


def test_bound():
    df = frame({"a": [0.4, 0.45, 0.42]})
    assert evaluate(claim(kind="bound", paper_value=0.5, baseline=None), df).verdict == "REPRODUCED"
    assert evaluate(claim(kind="bound", paper_value=0.44, baseline=None), df).verdict == "DIRECTION_ONLY"
    assert evaluate(claim(kind="bound", paper_value=0.3, baseline=None), df).verdict == "NOT_REPRODUCED"


def test_skipped_cases():
    df = frame({"a": [1.0], "b": [2.0]})
    assert evaluate(claim(skip="needs a Spark testbed"), df).verdict == "SKIPPED"
    v = evaluate(claim(), None, paper="p")
    assert v.verdict == "SKIPPED" and "./reproduce.sh p" in v.note
    assert evaluate(claim(ours="zzz"), df).verdict == "SKIPPED"
    assert evaluate(claim(metric="other"), df).verdict == "SKIPPED"


@pytest.mark.parametrize("bad, needle", [
    ({"kind": "speedup"}, "kind must be"),
    ({"better": "up"}, "better must be"),
    ({"kind": "pct_reduction", "better": "higher"}, "lower-is-better"),
    ({"extra_field": 1}, "unknown fields"),
    ({"kind": "ordering", "baseline": "b", "paper_value": None}, "non-empty list"),
    ({"kind": "bound", "paper_value": None, "baseline": None}, "needs paper_value"),
    ({"tolerance": -1}, "non-negative"),
    ({"source": "blog"}, "source must start"),
    ({"aggregate": "max"}, "needs an 'over'"),
    ({"paper_value": "1.47x"}, "paper_value must be a number"),
    ({"margin": 0.01}, "no paper_value"),
    ({"margin": -1, "paper_value": None}, "positive number"),
    ({"kind": "bound", "baseline": None, "margin": 0.1}, "needs a diff"),
])
def test_schema_errors(bad, needle):
    base = dict(id="c", source="abstract", experiment="e", metric="m", ours="a", baseline="b", kind="ratio",
                paper_value=2.0)
    base.update(bad)
    base = {k: v for k, v in base.items() if v is not None or k == "paper_value"}
    with pytest.raises(ClaimsSchemaError, match=needle):
        parse_claims([base])


def test_duplicate_ids_and_missing_fields():
    c = dict(id="c", source="abstract", experiment="e", metric="m", ours="a", baseline="b", kind="ratio")
    with pytest.raises(ClaimsSchemaError, match="duplicate"):
        parse_claims([c, c])
    with pytest.raises(ClaimsSchemaError, match="missing field 'metric'"):
        parse_claims([{k: v for k, v in c.items() if k != "metric"}])
    with pytest.raises(ClaimsSchemaError, match="non-empty list"):
        parse_claims({"claims": []})


def test_markdown_has_every_claim_and_command():
    df = frame({"a": [5.0, 5.1, 4.9], "b": [10.0, 10.0, 10.0]})
    vs = [evaluate(claim(id="x1"), df, "p"), evaluate(claim(id="x2", skip="testbed"), df, "p")]
    md = paper_markdown("p", "Title", vs)
    assert "`x1`" in md and "`x2`" in md and "./reproduce.sh p" in md and "REPRODUCED" in md and "SKIPPED" in md
