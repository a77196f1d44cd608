"""Claims checker: CI maths, every verdict rule, "up to", gates per cell, NOT_TESTED, censoring, non-inferiority,
damaged results, schema, classes and revisions, reports, CLI."""

from __future__ import annotations

import math
import re

import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats

from mlsys_repro.common.repro.claims import classify, evaluate, main, paper_markdown, parse_claims, summary_markdown
from mlsys_repro.common.repro.errors import ClaimsSchemaError
from mlsys_repro.common.repro.stats import bonferroni_level, mean_ci
from tests.conftest import ROOT


def frame(values: dict[str, list[float]], metric="m", **cols) -> pd.DataFrame:
    rows = []
    for pol, vals in values.items():
        for s, v in enumerate(vals):
            rows.append({"policy": pol, "seed": s, "metric": metric, "value": v, "unit": "s",
                         "profile": "smoke", **cols})
    return pd.DataFrame(rows)


def claim(**kw):
    base = {"id": "c", "class": "headline", "source": "abstract", "experiment": "e", "metric": "m", "ours": "a",
            "baseline": "b", "kind": "ratio", "better": "lower", "paper_value": 2.0, "regime": "toy"}
    if kw.get("paper_value", 2.0) is None and "min_effect" not in kw and "margin" not in kw:
        kw = {"min_effect": 1.0001 if kw.get("kind", "ratio") == "ratio" else 1e-4, "min_effect_why": "toy", **kw}
    elif "min_effect" in kw and "min_effect_why" not in kw and kw["min_effect"] is not None:
        kw = {"min_effect_why": "toy", **kw}
    base.update(kw)
    base = {k: v for k, v in base.items() if v is not None}
    return parse_claims([base])[0]


# ---------------------------------------------------------------------------------------------- statistics


def test_mean_ci_matches_student_t():
    x = [1.0, 2.0, 4.0, 7.0]
    m, lo, hi, n = mean_ci(x)
    h = stats.t.ppf(0.975, 3) * np.std(x, ddof=1) / 2
    assert (m, n) == (3.5, 4) and lo == pytest.approx(3.5 - h) and hi == pytest.approx(3.5 + h)
    assert mean_ci([5.0]) == (5.0, 5.0, 5.0, 1)
    assert mean_ci([3.0, 3.0, 3.0])[1:3] == (3.0, 3.0)
    assert math.isnan(mean_ci([])[0])
    h99 = stats.t.ppf(0.995, 3) * np.std(x, ddof=1) / 2
    assert mean_ci(x, level=0.99)[2] == pytest.approx(3.5 + h99)
    with pytest.raises(ValueError):
        mean_ci(x, level=1.0)
    assert bonferroni_level(5) == pytest.approx(0.99) and bonferroni_level(1) == pytest.approx(0.95)


@given(st.lists(st.floats(-1e6, 1e6), min_size=2, max_size=30))
@settings(max_examples=50, deadline=None)
def test_mean_ci_contains_mean(xs):
    m, lo, hi, n = mean_ci(xs)
    assert lo <= m + 1e-6 * (1 + abs(m)) and m <= hi + 1e-6 * (1 + abs(m)) and n == len(xs)


# ---------------------------------------------------------------------------------------------- the rules


@pytest.mark.parametrize("mean, lo, hi, band, verdict, why", [
    (2.0, 1.9, 2.1, (1.8, 2.2), "REPRODUCED", ""),           # excludes no effect, mean inside the band
    (1.9, 1.1, 2.7, (1.8, 2.2), "REPRODUCED", ""),           # wide CI, mean inside: REPRODUCED
    (1.5, 1.1, 1.85, (1.8, 2.2), "DIRECTION_ONLY", "size not pinned down"),  # CI overlaps, mean outside
    (2.26, 1.44, 3.08, (1.32, 1.62), "DIRECTION_ONLY", "size not pinned down"),  # the swallow case (T1, SD 0.6)
    (1.05, 1.02, 1.08, (2.844, 3.476), "DIRECTION_ONLY", "size differs"),  # 1.05x against a claimed 3.16x
    (4.5, 4.0, 5.0, (1.8, 2.2), "DIRECTION_ONLY", "wholly above"),
    (0.8, 0.7, 0.9, (1.8, 2.2), "NOT_REPRODUCED", "wrong direction"),
    (1.05, 0.95, 1.2, (1.8, 2.2), "NOT_REPRODUCED", "excludes the claimed band"),  # absence shown
    (1.9, 0.9, 2.0, (1.8, 2.2), "INCONCLUSIVE", "both"),      # contains both: cannot tell
    (1.2, 0.9, 1.5, None, "INCONCLUSIVE", "no min_effect"),
    (1.2, 1.01, 1.5, None, "REPRODUCED", ""),
])
def test_classify_rules(mean, lo, hi, band, verdict, why):
    got, note = classify(mean, lo, hi, 1.0, band)
    assert got == verdict and why in note


def test_min_effect_floor_rules():
    floor = (1.05, math.inf)
    assert classify(1.10, 1.07, 1.13, 1.0, floor, floor=True)[0] == "REPRODUCED"
    # significant but trivial: the whole CI sits between no effect and the smallest effect that counts
    v, why = classify(1.01, 1.005, 1.015, 1.0, floor, floor=True)
    assert v == "NOT_REPRODUCED" and "smallest effect" in why
    # significant, mean below min_effect, CI reaching it: direction shown, size not
    assert classify(1.04, 1.01, 1.07, 1.0, floor, floor=True) == (
        "DIRECTION_ONLY", "size not pinned down: the mean lies below the band, the 95 % CI overlaps it")
    # a precise null (the fedfoa case: +0.21 pp [-0.17, 0.58] against 1 pp) reads NOT_REPRODUCED
    assert classify(0.21, -0.17, 0.58, 0.0, (1.0, math.inf), floor=True)[0] == "NOT_REPRODUCED"


def test_noise_cannot_buy_reproduced():
    """T1 of the honesty review: the same mean 2.26 against a paper value of 1.47 is never REPRODUCED, however wide
    the CI; the narrow CI says the size differs, the wide one that it is not pinned down."""
    rng = np.random.default_rng(0)
    for sd, why in ((0.05, "size differs"), (0.6, "size not pinned down")):
        z = rng.normal(0, 1, 5)
        eff = 2.26 + sd * (z - z.mean()) / z.std(ddof=1)
        v = evaluate(claim(paper_value=1.47), frame({"a": list(10 / eff), "b": [10.0] * 5}))
        assert v.verdict == "DIRECTION_ONLY" and why in v.note, (sd, v.note)


def test_reproduced_ratio():
    df = frame({"a": [5.0, 5.1, 4.9], "b": [10.0, 10.0, 10.0]})
    v = evaluate(claim(), df)
    assert v.verdict == "REPRODUCED" and v.mean == pytest.approx(np.mean([10 / 5, 10 / 5.1, 10 / 4.9]))


def test_small_effect_against_large_paper_value_is_direction_only():
    df = frame({"a": [9.5, 9.52, 9.48], "b": [10.0, 10.0, 10.0]})  # ~1.05x against 3.16x
    v = evaluate(claim(paper_value=3.16), df)
    assert v.verdict == "DIRECTION_ONLY" and "size differs" in v.note and "below" in v.note


def test_ci_overlapping_the_band_with_the_mean_outside_is_direction_only():
    df = frame({"a": [10 / 1.6, 10 / 1.75, 10 / 1.9], "b": [10.0] * 3})  # mean ~1.75, CI reaches 1.8
    v = evaluate(claim(), df)
    assert v.mean < 1.8 <= v.hi and v.verdict == "DIRECTION_ONLY" and "size not pinned down" in v.note


def test_not_reproduced_wrong_direction():
    df = frame({"a": [12.0, 12.1, 11.9], "b": [10.0, 10.0, 10.0]})
    v = evaluate(claim(), df)
    assert v.verdict == "NOT_REPRODUCED" and "wrong direction" in v.note


def test_noise_that_could_hold_the_paper_value_is_inconclusive():
    df = frame({"a": [5.0, 15.0, 9.0], "b": [10.0, 10.0, 10.0]})  # CI spans 1 and 2
    v = evaluate(claim(), df)
    assert v.lo < 1 < 2 < v.hi and v.verdict == "INCONCLUSIVE"
    assert evaluate(claim(paper_value=None, min_effect=1.05), df).verdict == "INCONCLUSIVE"


def test_precise_null_result_is_not_reproduced():
    df = frame({"a": [10.0, 10.05, 9.95, 10.02, 9.98], "b": [10.0] * 5})  # ratio ~1 +- 0.005
    assert evaluate(claim(), df).verdict == "NOT_REPRODUCED"
    v = evaluate(claim(paper_value=None, min_effect=1.05), df)
    assert v.verdict == "NOT_REPRODUCED" and "min_effect 1.050" in v.note


def test_trivial_effect_is_not_reproduced_against_min_effect():
    """T6: 1.001x measured precisely is significant, but smaller than the stated smallest effect."""
    df = frame({"a": [10 / 1.001, 10 / 1.0011, 10 / 1.0009], "b": [10.0] * 3})
    v = evaluate(claim(paper_value=None, min_effect=1.05), df)
    assert v.lo > 1 and v.verdict == "NOT_REPRODUCED" and "smallest effect" in v.note


@pytest.mark.parametrize("ours, verdict", [(10 / 2.2, "REPRODUCED"), (10 / 2.2001, "DIRECTION_ONLY"),
                                           (10 / 1.8, "REPRODUCED"), (10 / 1.7999, "DIRECTION_ONLY")])
def test_tolerance_edges_on_deterministic_points(ours, verdict):
    df = frame({"a": [ours], "b": [10.0]})
    v = evaluate(claim(deterministic=True), df)
    assert v.verdict == verdict and v.n == 1 and v.point and "(deterministic)" in v.measured()


def test_single_stochastic_run_is_inconclusive():
    df = frame({"a": [5.0], "b": [10.0]})
    v = evaluate(claim(), df)
    assert v.verdict == "INCONCLUSIVE" and "single stochastic run" in v.note


def test_deterministic_constants_count_once_and_must_not_vary():
    df = frame({"a": [1.0] * 5, "b": [80.0] * 5})
    v = evaluate(claim(deterministic=True, paper_value=80.0), df)
    assert v.verdict == "REPRODUCED" and v.n == 1 and "n=5" not in v.measured()
    noisy = frame({"a": [1.0, 1.1, 1.0], "b": [80.0] * 3})
    v = evaluate(claim(deterministic=True, paper_value=80.0), noisy)
    assert v.verdict == "INCONCLUSIVE" and "vary by seed" in v.note


def test_absolute_tolerance_and_at_least():
    df = frame({"a": [60.0, 61.0, 59.0], "b": [100.0, 100.0, 100.0]})  # 40 % reduction
    why = {"tolerance_why": "test"}
    assert evaluate(claim(kind="pct_reduction", paper_value=48.41, tolerance={"abs": 10}, **why), df).verdict == \
        "REPRODUCED"
    assert evaluate(claim(kind="pct_reduction", paper_value=48.41, tolerance={"abs": 5}, **why), df).verdict == \
        "DIRECTION_ONLY"
    assert evaluate(claim(kind="pct_reduction", paper_value=30, match="at_least"), df).verdict == "REPRODUCED"


def test_pct_gain_and_diff():
    df = frame({"a": [0.9, 0.91, 0.89], "b": [0.8, 0.8, 0.8]})
    v = evaluate(claim(kind="pct_gain", better="higher", paper_value=12.5), df)
    assert v.verdict == "REPRODUCED" and v.mean == pytest.approx(12.5, abs=0.7)
    df = frame({"a": [0.9, 0.92, 0.91], "b": [0.8, 0.81, 0.8]})
    v = evaluate(claim(kind="diff", better="higher", paper_value=None, min_effect=0.01), df)
    assert v.verdict == "REPRODUCED" and v.mean == pytest.approx(0.1067, abs=1e-3)


@pytest.mark.parametrize("ours, verdict", [
    ([0.80, 0.80, 0.80], "REPRODUCED"),        # equal: CI (zero width) above -0.01
    ([0.795, 0.796, 0.794], "REPRODUCED"),     # 0.5 pp worse, tight CI: within the 1 pp margin
    ([0.81, 0.78, 0.80], "INCONCLUSIVE"),      # CI straddles -1 pp: cannot tell (never on the mean alone)
    ([0.8082, 0.7918, 0.7900], "INCONCLUSIVE"),  # mean below no effect but above the floor: still undecided
    ([0.785, 0.787, 0.786], "NOT_REPRODUCED"),  # 1.4 pp worse, CI wholly below the floor
])
def test_non_inferiority_margin(ours, verdict):
    df = frame({"a": ours, "b": [0.8, 0.8, 0.8]})
    v = evaluate(claim(kind="diff", better="higher", paper_value=None, margin=0.01), df)
    assert v.verdict == verdict and "non-inferiority" in v.note


def test_up_to_uses_bonferroni_for_significance_and_the_plain_ci_for_the_band():
    rng = np.random.default_rng(0)
    a = 10 / (1.3 + rng.normal(0, 0.05, 5))
    parts = [frame({"a": list(a), "b": [10.0] * 5}, bw=1.0), frame({"a": [10.0] * 5, "b": [10.0] * 5}, bw=10.0)]
    df = pd.concat(parts)
    v = evaluate(claim(over="bw", aggregate="max", paper_value=1.3), df)
    eff = 10 / a
    m, lo, hi, n = mean_ci(eff, level=1 - 0.05 / 2)
    assert (v.mean, v.lo, v.hi, v.n) == pytest.approx((m, lo, hi, n)) and v.level == pytest.approx(0.975)
    assert v.verdict == "REPRODUCED" and "bw=1.0" in v.note and "97.5 % CI" in v.measured()


def test_bonferroni_does_not_loosen_the_band_test():
    """An "up to" effect whose Bonferroni CI overlaps the band but whose plain 95 % CI does not: size differs."""
    z = np.array([-1.2, -0.4, 0.0, 0.5, 1.1])
    eff = 2.26 + 0.35 * (z - z.mean()) / z.std(ddof=1)  # 95 % CI ~[1.83, 2.69]; 99 % ~[1.54, 2.98]
    parts = [frame({"a": list(10 / eff), "b": [10.0] * 5}, bw=float(k)) for k in range(1)]
    parts += [frame({"a": [10.0] * 5, "b": [10.0] * 5}, bw=float(k)) for k in range(1, 5)]
    band_hi = 1.47 * 1.1
    m, lo99, hi99, _ = mean_ci(eff, level=1 - 0.05 / 5)
    _, lo95, hi95, _ = mean_ci(eff)
    assert lo99 < band_hi < lo95  # the corrected CI would overlap the band, the plain one does not
    v = evaluate(claim(over="bw", aggregate="max", paper_value=1.47), pd.concat(parts))
    assert v.verdict == "DIRECTION_ONLY" and "size differs" in v.note


def test_up_to_false_positive_rate_on_pure_noise_stays_near_nominal():
    """5 conditions, no true effect: picking the best with uncorrected CIs says REPRODUCED ~11 % of the time; the
    Bonferroni-corrected reading stays at or below the nominal 2.5 % one-sided rate (within sampling error)."""
    rng = np.random.default_rng(1)
    hits = 0
    trials = 400
    for _ in range(trials):
        parts = []
        for bw in range(5):
            parts.append(frame({"a": list(10 + rng.normal(0, 1, 5)), "b": [10.0] * 5}, bw=float(bw)))
        v = evaluate(claim(kind="diff", paper_value=None, over="bw", aggregate="max"), pd.concat(parts))
        hits += v.verdict == "REPRODUCED"
    assert hits / trials <= 0.05


def test_on_average_is_the_per_seed_mean_and_every_condition_takes_the_worst():
    parts = [frame({"a": [10 / 1.2] * 3, "b": [10.0] * 3}, bw=1.0),
             frame({"a": [10 / 1.5, 10 / 1.52, 10 / 1.48], "b": [10.0] * 3}, bw=10.0)]
    df = pd.concat(parts)
    vmean = evaluate(claim(over="bw", aggregate="mean", paper_value=1.35), df)
    assert vmean.mean == pytest.approx(np.mean([(1.2 + 1.5) / 2, (1.2 + 1.52) / 2, (1.2 + 1.48) / 2]))
    assert vmean.verdict == "REPRODUCED"
    vmin = evaluate(claim(kind="ratio", over="bw", aggregate="min", paper_value=1.5), df)
    assert vmin.verdict == "DIRECTION_ONLY" and vmin.mean == pytest.approx(1.2) and "bw=1.0" in vmin.note


def test_ordering_takes_the_worst_baseline():
    c = claim(kind="ordering", baseline=["b", "c"], paper_value=None, min_effect=0.05)
    df = frame({"a": [1.0, 1.1, 0.9], "b": [2.0, 2.1, 1.9], "c": [3.0, 3.0, 3.1]})
    v = evaluate(c, df)
    assert v.verdict == "REPRODUCED" and v.mean == pytest.approx(1.0) and "against: none" in v.note
    df2 = frame({"a": [1.0, 1.1, 0.9], "b": [1.0, 1.2, 0.95], "c": [3.0, 3.0, 3.1]})  # b: CI includes 0
    v2 = evaluate(c, df2)
    assert v2.verdict == "INCONCLUSIVE" and "against: b" in v2.note
    df3 = frame({"a": [2.0, 2.1, 1.9], "b": [1.0, 1.0, 1.0], "c": [3.0, 3.0, 3.1]})
    assert evaluate(c, df3).verdict == "NOT_REPRODUCED"


def test_bound():
    df = frame({"a": [0.4, 0.45, 0.42]})
    b = {"kind": "bound", "baseline": None}
    assert evaluate(claim(paper_value=0.5, **b), df).verdict == "REPRODUCED"
    assert evaluate(claim(paper_value=0.44, **b), df).verdict == "INCONCLUSIVE"  # mean within, CI straddles
    assert evaluate(claim(paper_value=0.3, **b), df).verdict == "NOT_REPRODUCED"


# ---------------------------------------------------------------------------------------------- censoring and gates


def _tta(a_reached, b_reached, a=(5.0, 5.1, 4.9), b=(10.0, 10.0, 10.0)):
    return pd.concat([frame({"a": list(a), "b": list(b)}),
                      frame({"a": a_reached, "b": b_reached}, metric="reached_target")])


def test_censoring_on_either_side():
    c = claim(reached="reached_target")
    assert evaluate(c, _tta([1.0] * 3, [1.0] * 3)).verdict == "REPRODUCED"
    v = evaluate(c, _tta([1.0, 0.0, 1.0], [1.0] * 3))
    assert v.verdict == "INCONCLUSIVE" and "ours in 1/3" in v.note
    v = evaluate(c, _tta([1.0] * 3, [1.0, 0.0, 1.0]))  # a censored baseline cannot decide the size either
    assert v.verdict == "INCONCLUSIVE" and "by b in 1/3" in v.note
    v = evaluate(c, _tta([0.0] * 3, [1.0] * 3, a=(10.0, 10.0, 10.0), b=(5.0, 5.1, 4.9)))
    assert v.verdict == "NOT_REPRODUCED" and "ours never reached" in v.note
    v = evaluate(c, frame({"a": [5.0, 5.1, 4.9], "b": [10.0] * 3}))
    assert v.verdict == "INCONCLUSIVE" and "not recorded" in v.note


def test_a_censored_lower_bound_shows_direction_but_never_pins_a_point_size():
    """T8: ours always reached the target, the baseline never; the effect (2x) is a lower bound."""
    decided = _tta([1.0] * 3, [0.0] * 3)
    v = evaluate(claim(reached="reached_target", paper_value=2.0), decided)  # lower bound inside the point band
    assert v.verdict == "DIRECTION_ONLY" and "lower bound" in v.note and "not pinned down" in v.note
    v = evaluate(claim(reached="reached_target", paper_value=1.5, match="at_least"), decided)
    assert v.verdict == "REPRODUCED" and "lower bound" in v.note  # "at least 1.5x": a lower bound of 2x shows it
    v = evaluate(claim(reached="reached_target", paper_value=None, min_effect=1.5), decided)
    assert v.verdict == "REPRODUCED"
    v = evaluate(claim(reached="reached_target", paper_value=1.2), decided)
    assert v.verdict == "DIRECTION_ONLY" and "above the claimed band" in v.note


def _gated(conv_a, conv_b=(1.0, 1.0, 1.0), **cols):
    return pd.concat([frame({"a": [5.0, 5.1, 4.9], "b": [10.0] * 3}, **cols),
                      frame({"a": list(conv_a), "b": list(conv_b)}, metric="converged", **cols)])


def test_every_cell_failing_its_gates_is_not_tested_with_the_ungated_verdict_beside_it():
    v = evaluate(claim(requires=["converged"]), _gated([1.0, 1.0, 0.0]))  # 2/3 < 80 %
    assert v.verdict == "NOT_TESTED" and v.ungated == "REPRODUCED"
    assert "a: converged passed 2/3" in v.note and "ungated: REPRODUCED" in v.note
    assert v.mean == pytest.approx(2.0, rel=0.02)  # the effect is still shown
    ok = evaluate(claim(requires=["converged"]), _gated([1.0, 1.0, 1.0]))
    assert ok.verdict == "REPRODUCED" and ok.ungated == "" and not ok.dropped
    # a claim may pre-register another fraction
    assert evaluate(claim(requires=["converged"], gate_fraction=0.6), _gated([1.0, 1.0, 0.0])).verdict == "REPRODUCED"


def test_failing_gates_never_protect_a_negative_result():
    """T3: ours trains fine and loses: a gate cannot turn that into INCONCLUSIVE."""
    df = pd.concat([frame({"a": [12.0, 12.1, 11.9], "b": [10.0] * 3}),
                    frame({"a": [1.0] * 3, "b": [1.0] * 3}, metric="converged")])
    assert evaluate(claim(requires=["converged"]), df).verdict == "NOT_REPRODUCED"


def test_gates_are_judged_per_cell_and_one_bad_cell_drops_only_itself():
    """T4: the gate fails in one of two conditions of an ``aggregate: mean``; the valid condition decides, with all
    its seeds, and the note names the dropped cell."""
    good = pd.concat([frame({"a": [12.0, 12.1, 11.9], "b": [10.0] * 3}, ds="azure"),
                      frame({"a": [1.0] * 3, "b": [1.0] * 3}, metric="converged", ds="azure")])
    bad = pd.concat([frame({"a": [5.0, 5.0, 5.0], "b": [10.0] * 3}, ds="bitbrains"),
                     frame({"a": [0.0, 0.0, 1.0], "b": [1.0] * 3}, metric="converged", ds="bitbrains")])
    c = claim(requires=["converged"], over="ds", aggregate="mean", paper_value=None, min_effect=1.02)
    v = evaluate(c, pd.concat([good, bad]))
    assert v.verdict == "NOT_REPRODUCED" and v.ungated == "REPRODUCED" and v.n == 3  # the bad cell flattered it
    assert "a at ds=bitbrains: converged passed 1/3" in v.note and v.mean == pytest.approx(10 / 12, rel=0.01)


def test_an_up_to_whose_dropped_cell_shows_more_cannot_pin_the_size():
    """The best valid condition lies in the band, but a dropped condition shows a larger effect: the maximum over
    all conditions is unknown, so the size is not pinned down."""
    valid = pd.concat([frame({"a": [5.0, 5.1, 4.9], "b": [10.0] * 3}, bw=10.0),
                       frame({"b": [1.0] * 3}, metric="baseline_reached", bw=10.0)])
    dropped = pd.concat([frame({"a": [3.0, 3.1, 2.9], "b": [10.0] * 3}, bw=1.0),
                         frame({"b": [0.0] * 3}, metric="baseline_reached", bw=1.0)])
    c = claim(requires=["baseline_reached"], over="bw", aggregate="max")
    v = evaluate(c, pd.concat([valid, dropped]))
    assert v.mean == pytest.approx(2.0, rel=0.02) and v.verdict == "DIRECTION_ONLY"
    assert "dropped cells show a larger effect (bw=1.0: 3.3" in v.note
    assert evaluate(c, valid).verdict == "REPRODUCED"


def test_a_baseline_whose_cells_all_fail_leaves_an_ordering():
    df = pd.concat([frame({"a": [1.0, 1.1, 0.9], "b": [2.0, 2.1, 1.9], "c": [0.5, 0.5, 0.5]}),
                    frame({"a": [1.0] * 3, "c": [0.0] * 3}, metric="converged")])
    c = claim(kind="ordering", baseline=["b", "c"], paper_value=None, min_effect=0.5, requires=["converged"])
    v = evaluate(c, df)
    assert v.verdict == "REPRODUCED" and "not compared (every cell failed its gates): c" in v.note
    assert v.ungated == "NOT_REPRODUCED"


def test_a_gate_each_run_passes_with_p_09_no_longer_voids_large_studies():
    """T2: with "any 0" the chance of voiding a claim grew with n (41 / 79 / 99 % at 5 / 15 / 50 seeds); per cell at
    80 % it shrinks as n grows."""
    rng = np.random.default_rng(3)
    rates = {}
    for n in (5, 15, 50):
        void = 0
        for _ in range(100):
            gates = (rng.random(n) < 0.9).astype(float)
            df = pd.concat([frame({"a": list(12 + rng.normal(0, 0.2, n)), "b": [10.0] * n}),
                            frame({"a": list(gates)}, metric="converged")])
            void += evaluate(claim(requires=["converged"]), df).verdict == "NOT_TESTED"
        rates[n] = void / 100
    assert rates[50] < rates[15] < 0.25 and rates[5] < 0.5


def test_experiment_wide_and_missing_gates():
    ok = pd.concat([frame({"a": [5.0, 5.1, 4.9], "b": [10.0] * 3}),
                    frame({"-": [1.0]}, metric="beats_trivial")])  # an experiment-wide gate row
    assert evaluate(claim(requires=["beats_trivial"]), ok).verdict == "REPRODUCED"
    v = evaluate(claim(requires=["arms_differ"]), ok)
    assert v.verdict == "INCONCLUSIVE" and "not recorded" in v.note and v.ungated == "REPRODUCED"


def test_another_policys_gates_never_stand_in_for_the_compared_ones():
    """a and b record no converged rows; c, not compared, fails its gate: the claim is judged on a and b alone
    (the gate is not recorded for them), and a claim whose ours has no rows says so instead of naming c's gate."""
    df = pd.concat([frame({"a": [5.0, 5.1, 4.9], "b": [10.0] * 3, "c": [7.0] * 3}),
                    frame({"c": [0.0, 0.0, 0.0]}, metric="converged")])
    v = evaluate(claim(requires=["converged"]), df)
    assert v.verdict == "INCONCLUSIVE" and "gate 'converged' not recorded" in v.note and "c:" not in v.note
    absent = evaluate(claim(ours="ppo", requires=["converged"]), df)
    assert "c:" not in absent.note and "converged" not in absent.note and "no rows for ours" in absent.note


def test_a_filter_on_other_columns_reads_its_policys_own_gate():
    """ours = {policy: a, attacker: zo}: a's gate rows carry no attacker; they are a's training gate all the same,
    and b's failing gate is b's alone."""
    runs = frame({"a": [5.0, 5.1, 4.9], "b": [10.0] * 3}, attacker="zo")
    gates = frame({"a": [1.0, 1.0, 0.0], "b": [1.0] * 3}, metric="converged", attacker="none")
    c = claim(ours={"policy": "a", "attacker": "zo"}, baseline={"policy": "b", "attacker": "zo"},
              requires=["converged"])
    v = evaluate(c, pd.concat([runs, gates]))
    assert v.verdict == "NOT_TESTED" and "converged passed 2/3" in v.note
    passing = frame({"a": [1.0] * 3, "b": [0.0] * 3}, metric="converged", attacker="none")
    v = evaluate(c, pd.concat([runs, passing]))
    assert v.verdict == "NOT_TESTED" and "converged passed 0/3" in v.note  # the baseline's cells dropped
    # a paired quantity (ours = {policy: a, reference: b}) is valid when both runs are: a's and b's gates pooled
    drop = frame({"a": [0.2, 0.3, 0.25]}, metric="drop", reference="b")
    paired = claim(kind="bound", ours={"policy": "a", "reference": "b"}, baseline=None, metric="drop",
                   paper_value=1.0, requires=["converged"])
    ok = frame({"a": [1.0] * 3, "b": [1.0] * 3}, metric="converged", reference="-")
    assert evaluate(paired, pd.concat([drop, ok])).verdict != "NOT_TESTED"
    bad = frame({"a": [1.0] * 3, "b": [0.0, 0.0, 1.0]}, metric="converged", reference="-")
    v = evaluate(paired, pd.concat([drop, bad]))
    assert v.verdict == "NOT_TESTED" and "converged passed 4/6" in v.note


# ---------------------------------------------------------------------------------------------- damaged results


def test_nan_values_are_damage_not_fewer_seeds():
    """T7: 2 of 5 NaN used to give REPRODUCED with n = 3 and no warning."""
    df = frame({"a": [5.0, np.nan, 5.1, np.nan, 4.9], "b": [10.0] * 5})
    v = evaluate(claim(), df)
    assert v.verdict == "INCONCLUSIVE" and v.damaged and "result file damaged" in v.note and "2 of 5" in v.note


def test_seeds_on_one_side_only_and_missing_columns_are_damage():
    df = pd.concat([frame({"a": [5.0, 5.1, 4.9]}), frame({"b": [10.0, 10.0]})])
    v = evaluate(claim(), df)
    assert v.verdict == "INCONCLUSIVE" and "only on ours's side" in v.damaged
    v = evaluate(claim(), frame({"a": [5.0, 5.1], "b": [10.0] * 2}).rename(columns={"value": "val"}))
    assert v.verdict == "INCONCLUSIVE" and "'value'" in v.damaged


def test_skipped_cases():
    df = frame({"a": [1.0], "b": [2.0]})
    assert evaluate(claim(skip="needs a Spark testbed"), df).verdict == "SKIPPED"
    v = evaluate(claim(), None, paper="p")  # no result file: not run, which is not a property of the claim
    assert v.verdict == "NOT_RUN" and "./reproduce.sh p" in v.note
    assert evaluate(claim(ours="zzz"), df).verdict == "SKIPPED"
    assert evaluate(claim(metric="other"), df).verdict == "SKIPPED"


def test_column_missing_from_old_results_skips_that_claim_only():
    df = frame({"a": [1.0, 1.1, 0.9], "b": [2.0, 2.1, 1.9]})  # written before the experiment swept "load"
    for c in (claim(over="load"), claim(where={"load": 0.9})):
        v = evaluate(c, df, paper="p")
        assert v.verdict == "SKIPPED" and "'load'" in v.note and "./reproduce.sh p" in v.note
    assert evaluate(claim(), df).verdict == "REPRODUCED"  # the same rows still decide the claims that fit them


def test_ambiguous_rows_are_a_schema_error():
    two = {"a": [1.0, 1.01, 0.99], "b": [2.0, 2.0, 2.0]}
    df = pd.concat([frame(two, bw=1.0), frame(two, bw=2.0)])
    with pytest.raises(ClaimsSchemaError, match="several rows"):
        evaluate(claim(), df)
    assert evaluate(claim(where={"bw": 1.0}), df).verdict == "REPRODUCED"


def test_deterministic_baseline_is_broadcast():
    df = pd.concat([frame({"a": [5.0, 5.1, 4.9]}), frame({"b": [10.0]})])
    v = evaluate(claim(), df)
    assert v.n == 3 and v.verdict == "REPRODUCED"


# ---------------------------------------------------------------------------------------------- schema


@pytest.mark.parametrize("bad, needle", [
    ({"kind": "speedup"}, "kind must be"),
    ({"class": "main"}, "class must be"),
    ({"class": None}, "missing field 'class'"),
    ({"better": "up"}, "better must be"),
    ({"kind": "pct_reduction", "better": "higher"}, "lower-is-better"),
    ({"extra_field": 1}, "unknown fields"),
    ({"match": "at_most"}, "at_most' was removed"),
    ({"kind": "ordering", "baseline": "b", "paper_value": None}, "non-empty list"),
    ({"kind": "bound", "paper_value": None, "baseline": None}, "needs paper_value"),
    ({"tolerance": -1}, "non-negative"),
    ({"tolerance": 0.2}, "tolerance_why"),
    ({"source": "blog"}, "source must start"),
    ({"aggregate": "max"}, "needs an 'over'"),
    ({"paper_value": "1.47x"}, "paper_value must be a finite number"),
    ({"paper_value": 0.8}, "not an effect in the claimed direction"),
    ({"paper_value": None, "min_effect": 1.0}, "not an effect in the claimed direction"),
    ({"min_effect": 1.1}, "not both"),
    ({"margin": 0.01}, "neither paper_value"),
    ({"margin": -1, "paper_value": None}, "positive number"),
    ({"kind": "bound", "baseline": None, "margin": 0.1}, "neither min_effect nor margin"),
    ({"requires": [1]}, "gate metric names"),
    ({"deterministic": "yes"}, "true or false"),
])
def test_schema_errors(bad, needle):
    base = {"id": "c", "class": "headline", "source": "abstract", "experiment": "e", "metric": "m", "ours": "a",
            "baseline": "b", "kind": "ratio", "paper_value": 2.0}
    base.update(bad)
    base = {k: v for k, v in base.items() if v is not None}
    with pytest.raises(ClaimsSchemaError, match=needle):
        parse_claims([base])


def test_duplicate_ids_and_missing_fields():
    c = {"id": "c", "class": "check", "source": "reconstruction", "experiment": "e", "metric": "m", "ours": "a",
         "baseline": "b", "kind": "ratio", "min_effect": 1.05, "min_effect_why": "5 %"}
    with pytest.raises(ClaimsSchemaError, match="duplicate"):
        parse_claims([c, c])
    with pytest.raises(ClaimsSchemaError, match="missing field 'metric'"):
        parse_claims([{k: v for k, v in c.items() if k != "metric"}])
    with pytest.raises(ClaimsSchemaError, match="non-empty list"):
        parse_claims({"claims": []})


# ---------------------------------------------------------------------------------------------- reports and CLI


def test_reports_separate_classes_and_show_checks_as_pass_fail():
    df = frame({"a": [5.0, 5.1, 4.9], "b": [10.0, 10.0, 10.0]})
    vs = [evaluate(claim(id="h1"), df, "p"), evaluate(claim(id="s1", **{"class": "secondary"}, skip="testbed"), df,
                                                      "p"),
          evaluate(claim(id="k1", **{"class": "check"}), df, "p")]
    md = paper_markdown("p", "Title", vs, {"e": "fresh"})
    assert "`h1`" in md and "`s1`" in md and "./reproduce.sh p" in md and "SKIPPED" in md
    assert md.index("## Headline") < md.index("`h1`") < md.index("## Secondary") < md.index("## Checks")
    assert "**PASS**" in md and "- check (not counted): PASS 1" in md and "- headline (counted): REPRODUCED 1" in md
    summary = summary_markdown({"p": vs}, {"p": {"e": "stale: code changed"}})
    assert "p/e" in summary and "stale: code changed" in summary and "INCONCLUSIVE 0" in summary


def test_cli_checks_any_claims_file_against_any_folder(tmp_path, capsys):
    d = tmp_path / "csvs"
    d.mkdir()
    frame({"a": [5.0, 5.1, 4.9], "b": [10.0, 10.0, 10.0]}).to_csv(d / "e.csv", index=False)
    doc = {"paper": "p", "claims": [
        {"id": "x", "class": "headline", "source": "abstract", "experiment": "e", "metric": "m", "ours": "a",
         "baseline": "b", "kind": "ratio", "paper_value": 2.0, "regime": "toy"},
        {"id": "y", "class": "secondary", "source": "text", "experiment": "missing", "metric": "m", "ours": "a",
         "baseline": "b", "kind": "ratio", "min_effect": 1.05, "min_effect_why": "5 %", "regime": "toy"}]}
    cf = tmp_path / "claims.yaml"
    cf.write_text(yaml.safe_dump(doc))
    out = tmp_path / "v.csv"
    assert main(["--claims", str(cf), "--csv-dir", str(d), "--out", str(out)]) == 0
    got = pd.read_csv(out)
    assert list(got.columns) == ["claim", "verdict", "ungated", "mean", "lo", "hi", "n", "note"]
    assert got.set_index("claim")["verdict"].to_dict() == {"x": "REPRODUCED", "y": "NOT_RUN"}
    cf.write_text("claims: [{id: z}]")
    assert main(["--claims", str(cf), "--csv-dir", str(d)]) == 2
    assert "missing field" in capsys.readouterr().err


def test_cli_unknown_paper_exits_2(capsys):
    assert main(["swallw"]) == 2
    assert "did you mean 'swallow'" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- classes, revisions


def _doc(**kw):
    base = {"id": "c", "class": "secondary", "source": "text", "experiment": "e", "metric": "m", "ours": "a",
            "baseline": "b", "kind": "ratio", "min_effect": 1.05, "min_effect_why": "5 %", "regime": "toy"}
    base.update(kw)
    return {k: v for k, v in base.items() if v is not None}


@pytest.mark.parametrize("bad, needle", [
    ({"min_effect": None, "min_effect_why": None}, "needs min_effect"),
    ({"min_effect_why": None}, "min_effect_why"),
    ({"min_effect": None, "paper_value": 2.0}, "min_effect_why without min_effect"),
    ({"regime": None}, "names its regime"),
    ({"revised": "today"}, "revised must be a list"),
    ({"revised": [{"date": "yesterday", "change": "x", "before": "REPRODUCED"}]}, "YYYY-MM-DD"),
    ({"revised": [{"date": "2026-12-06", "change": "", "before": "REPRODUCED"}]}, "say what changed"),
    ({"revised": [{"date": "2026-12-06", "change": "x", "before": "GOOD"}]}, "before must be one of"),
    ({"revised": [{"date": "2026-12-06", "change": "x"}]}, "date, change, before"),
])
def test_schema_requires_min_effect_regime_and_well_formed_revisions(bad, needle):
    with pytest.raises(ClaimsSchemaError, match=needle):
        parse_claims([_doc(**bad)])


def test_uncounted_classes_need_no_regime_and_deterministic_checks_no_min_effect():
    ok = parse_claims([_doc(id="s", **{"class": "sensitivity"}, regime=None),
                       _doc(id="k", **{"class": "check"}, deterministic=True, min_effect=None, min_effect_why=None),
                       _doc(id="r", revised=[{"date": "2026-12-06", "change": "min_effect stated", "before": "none",
                                              "commit": "abc1234"}])])
    assert [c.counted for c in ok] == [False, False, True]
    assert ok[2].revised[0].short() == "2026-12-06: min_effect stated (before: none)"


def test_one_counted_claim_per_paper_number():
    two = [_doc(id="x", min_effect=None, min_effect_why=None, paper_value=1.47),
           _doc(id="y", min_effect=None, min_effect_why=None, paper_value=1.47)]
    with pytest.raises(ClaimsSchemaError, match="both count the paper's number 1.47"):
        parse_claims(two)
    two[1]["class"] = "sensitivity"
    assert [c.cls for c in parse_claims(two)] == ["secondary", "sensitivity"]


def test_sensitivity_and_extension_are_shown_but_not_counted():
    df = frame({"a": [5.0, 5.1, 4.9], "b": [10.0] * 3})
    vs = [evaluate(claim(id="h"), df, "p"), evaluate(claim(id="s", **{"class": "sensitivity"}), df, "p"),
          evaluate(claim(id="x", **{"class": "extension"}), df, "p")]
    summary = summary_markdown({"p": vs}, {"p": {"e": "fresh"}})
    assert "- headline (counted): REPRODUCED 1" in summary
    assert "- sensitivity (not counted): REPRODUCED 1" in summary
    assert "- extension (not counted): REPRODUCED 1" in summary
    counted_rows = [ln for ln in summary.splitlines() if ln.startswith("| p | ")]
    assert counted_rows == ["| p | headline | 1 | 0 | 0 | 0 | 0 | 0 | 0 |"]  # the per-paper table: counted classes only
    assert "`s`" in summary and "`x`" in summary  # both still shown


def test_reports_show_regime_ungated_and_the_verdict_before_each_revision():
    df = pd.concat([frame({"a": [5.0, 5.1, 4.9], "b": [10.0] * 3}),
                    frame({"a": [1.0, 0.0, 0.0]}, metric="converged")])
    c = claim(requires=["converged"], regime="toy at 1 Gbps",
              revised=[{"date": "2026-12-06", "change": "gate added", "before": "REPRODUCED"}])
    v = evaluate(c, df, "p")
    assert v.verdict == "NOT_TESTED" and v.ungated == "REPRODUCED"
    md = paper_markdown("p", "T", [v], {"e": "fresh"})
    row = next(ln for ln in md.splitlines() if ln.startswith("| `c`"))
    assert "toy at 1 Gbps" in row and "**NOT_TESTED** | REPRODUCED |" in row and "2026-12-06: was REPRODUCED" in row
    assert "revised: 2026-12-06: gate added (before: REPRODUCED)" in row


def test_cli_exits_2_on_a_damaged_result_file(tmp_path, capsys):
    d = tmp_path / "csvs"
    d.mkdir()
    frame({"a": [5.0, np.nan, 4.9], "b": [10.0] * 3}).to_csv(d / "e.csv", index=False)
    cf = tmp_path / "claims.yaml"
    cf.write_text(yaml.safe_dump({"paper": "p", "claims": [
        {"id": "x", "class": "headline", "source": "abstract", "experiment": "e", "metric": "m", "ours": "a",
         "baseline": "b", "kind": "ratio", "paper_value": 2.0, "regime": "toy"}]}))
    assert main(["--claims", str(cf), "--csv-dir", str(d), "--out", str(tmp_path / "v.csv")]) == 2
    assert "p/x: result file damaged" in capsys.readouterr().err
    assert pd.read_csv(tmp_path / "v.csv")["verdict"].tolist() == ["INCONCLUSIVE"]


def test_claims_step_refuses_a_truncated_result_file(tmp_path, capsys):
    """A CSV cut mid-line reads INCONCLUSIVE "result file damaged" and the command exits 2; the verdicts of the other
    claims are still written."""
    import shutil

    from tests.conftest import ROOT

    res = tmp_path / "results"
    shutil.copytree(ROOT / "results" / "swallow", res / "swallow")
    csv = res / "swallow" / "headline.csv"
    data = csv.read_bytes()
    csv.write_bytes(data[: len(data) * 2 // 3])  # cut mid-line
    assert main(["swallow", "--results-dir", str(res)]) == 2
    assert "swallow/jct_speedup_avg: result file damaged" in capsys.readouterr().err
    got = pd.read_csv(res / "swallow" / "claims.csv").set_index("claim")
    assert got.loc["jct_speedup_avg", "verdict"] == "INCONCLUSIVE"
    assert "result file damaged" in got.loc["jct_speedup_avg", "note"]
    assert got.loc["cct_speedup_up_to", "verdict"] != "INCONCLUSIVE"  # from bandwidth_sweep.csv, intact


def test_report_commands_carry_the_profile_and_folder(tmp_path):
    from mlsys_repro.common.repro.claims.report import run_args

    assert run_args("default", tmp_path / "r", tmp_path / "r") == ""
    assert run_args("smoke", tmp_path / "x", tmp_path / "r") == f" --profile smoke --results-dir {tmp_path / 'x'}"
    df = frame({"a": [5.0, 5.1, 4.9], "b": [10.0] * 3})
    md = paper_markdown("p", "T", [evaluate(claim(), df, "p")], {"e": "fresh"}, args=" --profile smoke")
    assert "`./reproduce.sh p --profile smoke`" in md


def test_one_malformed_claims_file_does_not_stop_the_other_papers(toy_conf, tmp_path, capsys):
    from tests.conftest import write

    write(toy_conf / "paper/a_toy_bad.yaml", """
        defaults:
          - /schema/paper/default@_here_
          - _self_
        key: a_toy_bad
        title: a paper whose claims file is malformed
        module: tests.fixtures.toy_paper
        claims: malformed_claims.yaml
    """)
    res = tmp_path / "res"
    (res / "toy").mkdir(parents=True)
    frame({"fast": [5.0, 5.1, 4.9], "slow": [10.0] * 3}, metric="cost_s").to_csv(res / "toy" / "costs.csv",
                                                                                  index=False)
    from mlsys_repro.common.repro.claims import check

    with pytest.raises(ClaimsSchemaError, match=r"a_toy_bad: .*unknown gate 'convergd' \(did you mean 'converged'"):
        check(["a_toy_bad", "toy"], res, toy_conf, quiet=True)  # the malformed one is checked first
    assert "REPRODUCED" in (res / "toy" / "claims.md").read_text()  # the other paper was still checked


CUT_BY_HASH = re.compile(r"^\s*(?:-\s*)?(source|text|note|regime|min_effect_why|change):[ \t]*([^ \t\"'>|{].*\s#.*)$")


def cut_fields(yaml_text: str) -> list[str]:
    """Fields of a claims file whose unquoted value contains `` #``: YAML ends the value there (the rest is a
    comment), so the rendered source or note would be cut mid-sentence."""
    return [f"line {i}: {m.group(1)}" for i, ln in enumerate(yaml_text.splitlines(), 1)
            if (m := CUT_BY_HASH.match(ln))]


def test_no_rendered_source_or_note_is_cut_by_an_unquoted_hash():
    assert cut_fields('    source: "notes, issue #23"\n    note: plain text\n') == []
    assert cut_fields("    source: notes, issue #23\n  - note: see #4\n") == ["line 1: source", "line 2: note"]
    files = sorted((ROOT / "mlsys_repro/papers").glob("*/claims.yaml"))
    bad = {p.parent.name: cut_fields(p.read_text()) for p in files}
    assert not {k: v for k, v in bad.items() if v}
