"""Verdicts: one claim against the long-format result rows of its experiment.

Effects. Each claim reduces the per-seed comparison of ``ours`` with ``baseline`` to an effect oriented so that
larger means the claim (``better`` says which direction of the raw metric is good):

``ratio``          baseline/ours (lower better) or ours/baseline (higher better); no effect = 1.
``pct_reduction``  100 * (1 - ours/baseline), lower-is-better metrics; no effect = 0.
``pct_gain``       100 * (ours/baseline - 1), higher-is-better metrics; no effect = 0.
``diff``           baseline - ours (lower better) or ours - baseline (higher better), in the metric's unit.
``ordering``       ``diff`` against every baseline of a list; the claim holds only if it holds against each.
``bound``          the metric of ``ours`` itself stays at or below (``better: lower``) or above ``paper_value``.

The mean effect gets a two-sided Student-t CI over seeds at 95 %. The claim's band is ``[pv (1 - tol), pv (1 +
tol)]`` around the paper's value (``match: at_least``: from the lower edge up), or ``[min_effect, inf)`` for claims
without a paper value that state a smallest effect, or absent (any effect in the claimed direction counts).

Verdict rules (the same for every kind; :func:`classify`):

* ``REPRODUCED``: the CI excludes no effect, on the claimed side, and overlaps the band.
* ``DIRECTION_ONLY``: the CI excludes no effect on the claimed side but lies wholly outside the band (above or below).
* ``NOT_REPRODUCED``: the CI excludes no effect on the wrong side, or it contains no effect but excludes the band
  (the study could have seen the claimed effect and did not).
* ``INCONCLUSIVE``: the CI contains both no effect and (part of) the band, so the study cannot tell; or a validity
  gate failed (``requires``); or a single stochastic run; or time-to-target censoring that does not decide it.
* ``SKIPPED``: not measurable here (the claim's ``skip`` says why), or no result rows.

Special cases:

* "Up to" (``over`` + ``aggregate: max``): every condition's CI is at level 1 - 0.05/k (Bonferroni over the k
  conditions) before the best condition's mean is picked; the verdict is read from that condition's corrected CI.
  "On average" (``aggregate: mean``): the per-seed mean over conditions, then the CI. "In every condition"
  (``aggregate: min``): each condition is classified and the worst verdict stands.
* ``ordering``: each baseline is classified as above; the worst verdict stands (NOT_REPRODUCED < INCONCLUSIVE <
  DIRECTION_ONLY < REPRODUCED) and its effect is shown.
* ``bound``: REPRODUCED when the CI lies within the bound, NOT_REPRODUCED when it lies wholly beyond it, INCONCLUSIVE
  otherwise.
* Non-inferiority (``margin: m``): REPRODUCED when the CI's lower end clears ``no effect - m``, NOT_REPRODUCED when
  its upper end is below it, INCONCLUSIVE otherwise; never on the mean alone.
* Time-to-target (``reached: <0/1 metric>``): censored runs on either side make the claim INCONCLUSIVE unless the
  censoring decides it: ours reached in every run and the baseline in none gives a lower bound on the effect
  (REPRODUCED when it clears no effect and reaches the band, DIRECTION_ONLY when it is above the band, with a note);
  ours in none and the baseline in every run gives NOT_REPRODUCED.
* ``deterministic: true``: the numbers are computed, not sampled. Values repeated over seeds count once (n = 1) and
  a single run is compared as a point; a deterministic claim whose values vary by seed is INCONCLUSIVE. Without the
  flag a single run has no CI and is INCONCLUSIVE.
* Gates (``requires: [metric, ...]``): 0/1 metrics the experiment writes for the compared policies (or for the
  whole experiment); any 0, or a gate with no rows, makes the verdict INCONCLUSIVE and the note names it.

Checks (``class: check``) use the same rules; reports show them as PASS (REPRODUCED) / FAIL (DIRECTION_ONLY,
NOT_REPRODUCED) in their own table, never in the reproduction counts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from mlsys_repro.common.repro.claims.schema import Claim
from mlsys_repro.common.repro.errors import ClaimsSchemaError
from mlsys_repro.common.repro.stats import ALPHA, bonferroni_level, mean_ci

VERDICTS = ("REPRODUCED", "DIRECTION_ONLY", "NOT_REPRODUCED", "INCONCLUSIVE", "SKIPPED")
CHECK_VERDICTS = {"REPRODUCED": "PASS", "DIRECTION_ONLY": "FAIL", "NOT_REPRODUCED": "FAIL"}
_WORST_FIRST = ("NOT_REPRODUCED", "INCONCLUSIVE", "DIRECTION_ONLY", "REPRODUCED")


@dataclass
class Verdict:
    paper: str
    claim: Claim
    verdict: str
    mean: float = math.nan
    lo: float = math.nan
    hi: float = math.nan
    n: int = 0
    unit: str = ""
    note: str = ""
    profiles: str = ""
    level: float = 1 - ALPHA
    point: bool = False  # a deterministic value compared as a point (n = 1)

    @property
    def shown(self) -> str:
        """The verdict as reports show it: checks read PASS / FAIL."""
        if self.claim.cls == "check":
            return CHECK_VERDICTS.get(self.verdict, self.verdict)
        return self.verdict

    def measured(self) -> str:
        if math.isnan(self.mean):
            return "n/a"
        u = {"ratio": "x", "pct_reduction": "%", "pct_gain": "%"}.get(self.claim.kind, f" {self.unit}".rstrip())
        if self.point:
            return f"{_fmt(self.mean)}{u} (deterministic)"
        lvl = "" if abs(self.level - (1 - ALPHA)) < 1e-12 else f" {100 * self.level:.4g} % CI"
        return f"{_fmt(self.mean)}{u} [{_fmt(self.lo)}, {_fmt(self.hi)}]{lvl} (n={self.n})"


@dataclass(frozen=True)
class _Summary:
    mean: float
    lo: float
    hi: float
    n: int
    level: float
    how: str
    condition: Any = None  # the ``over`` value this summary is about; None = all rows


def _fmt(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    a = abs(x)
    if a != 0 and (a >= 1e5 or a < 1e-3):
        return f"{x:.3g}"
    return f"{x:.3f}" if a < 10 else f"{x:.2f}"


def classify(lo: float, hi: float, null: float, band: tuple[float, float] | None) -> tuple[str, str]:
    """The verdict of an effect whose CI is ``[lo, hi]`` (larger = the claim), and why (see the module doc)."""
    overlaps = band is None or (hi >= band[0] and lo <= band[1])
    if lo > null:
        if overlaps:
            return "REPRODUCED", ""
        side = "above" if lo > band[1] else "below"  # type: ignore[index]
        return "DIRECTION_ONLY", f"CI wholly {side} the claimed band"
    if hi < null:
        return "NOT_REPRODUCED", "wrong direction (CI excludes no effect on the other side)"
    if band is None:
        return "INCONCLUSIVE", "CI includes no effect (no min_effect stated, so absence cannot be shown)"
    if overlaps:
        return "INCONCLUSIVE", "CI includes both no effect and the claimed band"
    return "NOT_REPRODUCED", "CI includes no effect and excludes the claimed band"


def _worst(items: Sequence[tuple[str, Any]]) -> tuple[str, Any]:
    return min(items, key=lambda it: _WORST_FIRST.index(it[0]))


# ---------------------------------------------------------------------------------------------- row selection


class MissingColumn(ClaimsSchemaError):
    """A claim selects on a column its experiment's CSV does not have: results older than the claim (or a wrong
    column name; ``tests/test_configs.py`` rules that out for ``over`` columns on every experiment's smoke rows)."""


def _select(df: pd.DataFrame, flt: Mapping[str, Any], metric: str, where: Mapping[str, Any]) -> pd.DataFrame:
    sel = df[df["metric"] == metric]
    for col, v in {**where, **flt}.items():
        if col not in sel.columns:
            raise MissingColumn(f"filter column {col!r} not in results (columns: {list(df.columns)})")
        vals = v if isinstance(v, list) else [v]
        col_vals = sel[col]
        if pd.api.types.is_numeric_dtype(col_vals):
            try:
                sel = sel[col_vals.isin([float(x) for x in vals])]
                continue
            except (TypeError, ValueError):
                pass
        sel = sel[col_vals.astype(str).isin([str(x) for x in vals])]
    return sel


def _keyed(sel: pd.DataFrame, claim: Claim, label: str) -> pd.Series:
    """The selected rows as a Series indexed by seed (and ``over``); a deterministic claim keeps one seed."""
    over = claim.over
    keys = ["seed"] + ([over] if over else [])
    if over and over not in sel.columns:
        raise MissingColumn(f"{label}: 'over' column {over!r} not in results")
    dup = sel.duplicated(keys)
    if dup.any():
        varying = [c for c in sel.columns if c not in (*keys, "value", "value_raw") and sel[c].nunique() > 1]
        raise ClaimsSchemaError(
            f"{label}: several rows per {keys} (columns that vary: {varying}); add them to 'where' or 'over'"
        )
    s = sel.set_index(keys)["value"].astype(np.float64)
    if claim.deterministic and s.index.get_level_values("seed").nunique() > 1:
        groups = s.groupby(level=over) if over else [(None, s)]
        for _, g in groups:
            if not np.allclose(g.to_numpy(), g.iloc[0], rtol=1e-12, atol=0.0):
                raise _NotDeterministic(f"{label}: marked deterministic but its values vary by seed")
        first = s.index.get_level_values("seed").min()
        s = s[s.index.get_level_values("seed") == first]
    return s


class _NotDeterministic(ValueError):
    pass


def _pair(o: pd.Series, b: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Align by seed (and over); a single-seed baseline (deterministic) is broadcast over our seeds."""
    if b.index.get_level_values("seed").nunique() == 1 and o.index.get_level_values("seed").nunique() > 1:
        if isinstance(b.index, pd.MultiIndex):
            b2 = b.droplevel("seed").reindex(o.index.droplevel("seed"))
            b2.index = o.index
            return o, b2.dropna().reindex(o.index)
        b = pd.Series(float(b.iloc[0]), index=o.index)
    j = pd.concat([o.rename("o"), b.rename("b")], axis=1, join="inner").dropna()
    return j["o"], j["b"]


def _effect(kind: str, better: str, o: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        if kind == "ratio":
            return b / o if better == "lower" else o / b
        if kind == "pct_reduction":
            return 100.0 * (1.0 - o / b)
        if kind == "pct_gain":
            return 100.0 * (o / b - 1.0)
        if kind in ("diff", "ordering"):
            return b - o if better == "lower" else o - b
    raise ValueError(kind)


def _summaries(eff: pd.Series, claim: Claim) -> list[_Summary]:
    """The effect summaries the verdict is read from: one (no ``over``, mean, max) or one per condition (min)."""
    over = claim.over
    if not over:
        m, lo, hi, n = mean_ci(eff.to_numpy())
        return [_Summary(m, lo, hi, n, 1 - ALPHA, "")]
    conds = sorted(eff.index.get_level_values(over).unique().tolist())
    if claim.aggregate == "mean":
        per_seed = eff.groupby(level="seed").mean()
        m, lo, hi, n = mean_ci(per_seed.to_numpy())
        return [_Summary(m, lo, hi, n, 1 - ALPHA, f"per-seed mean over {over} in {conds}")]
    if claim.aggregate == "max":
        level = bonferroni_level(len(conds))
        per = {k: mean_ci(g.to_numpy(), level) for k, g in eff.groupby(level=over)}
        pick = max(per, key=lambda k: per[k][0])
        m, lo, hi, n = per[pick]
        ranges = ", ".join(f"{k}: {_fmt(per[k][0])}" for k in conds)
        how = (f"up to: best of {len(conds)} {over} values at {over}={pick} (Bonferroni CI at "
               f"{100 * level:.4g} %); per condition {ranges}")
        return [_Summary(m, lo, hi, n, level, how, pick)]
    out = []
    for k, g in eff.groupby(level=over):
        m, lo, hi, n = mean_ci(g.to_numpy())
        out.append(_Summary(m, lo, hi, n, 1 - ALPHA, f"every {over}: worst at {over}={k}", k))
    return out


# ---------------------------------------------------------------------------------------------- evaluation


def evaluate(claim: Claim, df: pd.DataFrame | None, paper: str = "") -> Verdict:
    """Verdict for one claim given the result rows of its experiment (``None`` if the file is missing)."""
    v = Verdict(paper=paper, claim=claim, verdict="SKIPPED")
    if claim.skip:
        v.note = str(claim.skip)
        return v
    if df is None:
        v.note = f"no results for experiment {claim.experiment!r} (run ./reproduce.sh {paper})"
        return v
    v.profiles = ",".join(sorted(df["profile"].astype(str).unique())) if "profile" in df else ""
    try:
        _evaluate(claim, df, v)
    except _NotDeterministic as e:
        v.verdict, v.note = "INCONCLUSIVE", str(e)
        return v
    except MissingColumn as e:  # one paper's old CSV must not stop the other papers' verdicts
        v.verdict, v.note = "SKIPPED", f"{e}: the results predate this claim; regenerate them (./reproduce.sh {paper})"
        return v
    if v.verdict != "SKIPPED":
        _apply_gates(claim, df, v)
    if claim.note:
        v.note = "; ".join(x for x in (v.note, claim.note) if x)
    return v


def _evaluate(claim: Claim, df: pd.DataFrame, v: Verdict) -> None:
    ours = _select(df, claim.ours, claim.metric, claim.where)
    if ours.empty:
        v.note = f"no rows for ours={claim.ours} metric={claim.metric!r} where={claim.where}"
        return
    v.unit = str(ours["unit"].iloc[0])
    o = _keyed(ours, claim, f"claim {claim.id} ours")

    if claim.kind == "bound":
        picked = [(s, _classify_bound(claim, s)) for s in _summaries(o, claim)]
        _finish(claim, v, [(r[0], (s, r[1])) for s, r in picked], extra=[f"bound {_bound_rel(claim)} "
                                                                         f"{_fmt(claim.paper_value)}"])
        return

    baselines = claim.baseline if claim.kind == "ordering" else [claim.baseline]
    results: list[tuple[str, tuple[_Summary, str]]] = []
    per_baseline: dict[str, list[str]] = {}
    for bf in baselines:
        base = _select(df, bf, claim.metric, claim.where)
        if base.empty:
            v.note = f"no rows for baseline={bf} metric={claim.metric!r} where={claim.where}"
            return
        b = _keyed(base, claim, f"claim {claim.id} baseline {bf}")
        op, bp = _pair(o, b)
        if op.empty:
            v.note = f"no seeds in common between ours={claim.ours} and baseline={bf}"
            return
        eff = pd.Series(_effect(claim.kind, claim.better, op.to_numpy(), bp.to_numpy()), index=op.index)
        if not np.isfinite(eff.to_numpy()).all():
            v.verdict, v.note = "INCONCLUSIVE", f"effect not finite vs {_name(bf)} (zero baseline?)"
            return
        for s in _summaries(eff, claim):
            verdict, why = _classify_effect(claim, s)
            verdict, why = _censoring(claim, df, bf, s, verdict, why)
            results.append((verdict, (s, "; ".join(x for x in (f"vs {_name(bf)}" if len(baselines) > 1 else "",
                                                                   why) if x))))
            per_baseline.setdefault(_name(bf), []).append(verdict)
    extra = []
    if claim.kind == "ordering":
        bad = [nm for nm, vds in per_baseline.items() if any(vd != "REPRODUCED" for vd in vds)]
        extra.append(f"ordering over {len(per_baseline)} baselines; not REPRODUCED against: "
                     f"{', '.join(bad) or 'none'}")
    _finish(claim, v, results, extra=extra)


def _classify_effect(claim: Claim, s: _Summary) -> tuple[str, str]:
    if s.n < 2 and not claim.deterministic:
        return "INCONCLUSIVE", "a single stochastic run has no CI (mark the claim deterministic if it is computed)"
    if claim.margin is not None:
        floor = claim.null - claim.margin
        if s.lo > floor:
            return "REPRODUCED", f"non-inferiority: CI above {_fmt(floor)} (margin {_fmt(claim.margin)})"
        if s.hi < floor:
            return "NOT_REPRODUCED", f"non-inferiority: CI below {_fmt(floor)} (margin {_fmt(claim.margin)})"
        return "INCONCLUSIVE", f"non-inferiority: CI straddles {_fmt(floor)} (margin {_fmt(claim.margin)})"
    return classify(s.lo, s.hi, claim.null, claim.band())


def _bound_rel(claim: Claim) -> str:
    return "<=" if claim.better == "lower" else ">="


def _classify_bound(claim: Claim, s: _Summary) -> tuple[str, str]:
    if s.n < 2 and not claim.deterministic:
        return "INCONCLUSIVE", "a single stochastic run has no CI (mark the claim deterministic if it is computed)"
    bound = float(claim.paper_value)  # type: ignore[arg-type]
    within = (s.hi <= bound) if claim.better == "lower" else (s.lo >= bound)
    beyond = (s.lo > bound) if claim.better == "lower" else (s.hi < bound)
    if within:
        return "REPRODUCED", "CI within the bound"
    if beyond:
        return "NOT_REPRODUCED", "CI wholly beyond the bound"
    return "INCONCLUSIVE", "CI straddles the bound"


def _censoring(claim: Claim, df: pd.DataFrame, bf: Mapping[str, Any], s: _Summary, verdict: str,
               why: str) -> tuple[str, str]:
    """Apply time-to-target censoring on both sides (see the module doc)."""
    if claim.reached is None:
        return verdict, why
    where = dict(claim.where)
    if s.condition is not None and claim.over:
        where[claim.over] = s.condition
    ro = _select(df, claim.ours, claim.reached, where)
    rb = _select(df, bf, claim.reached, where)
    if ro.empty or rb.empty:
        return "INCONCLUSIVE", f"censoring metric {claim.reached!r} not recorded for both sides"
    miss_o = int((ro["value"].to_numpy() < 0.5).sum())
    miss_b = int((rb["value"].to_numpy() < 0.5).sum())
    if miss_o == 0 and miss_b == 0:
        return verdict, why
    counts = f"target missed by ours in {miss_o}/{len(ro)} runs, by {_name(bf)} in {miss_b}/{len(rb)}"
    if miss_o == 0 and miss_b == len(rb):
        band = claim.band()
        lower = f"{counts}: the baseline never reached it, so the effect shown is a lower bound"
        if claim.margin is None and s.lo > claim.null and (band is None or s.lo >= band[0]):
            if band is not None and s.lo > band[1]:
                return "DIRECTION_ONLY", lower + ", above the claimed band"
            return "REPRODUCED", lower
        return "INCONCLUSIVE", lower + " that does not reach the claimed band"
    if miss_o == len(ro) and miss_b == 0:
        return "NOT_REPRODUCED", f"{counts}: ours never reached the target, the baseline always did"
    return "INCONCLUSIVE", f"{counts}: censored times on either side do not decide the claim"


def _finish(claim: Claim, v: Verdict, results: list[tuple[str, tuple[_Summary, str]]],
            extra: Sequence[str] = ()) -> None:
    """Pick the worst (verdict, summary) (ties: smallest mean) and fill ``v``."""
    worst_rank = min(_WORST_FIRST.index(r[0]) for r in results)
    tied = [r for r in results if _WORST_FIRST.index(r[0]) == worst_rank]
    verdict, (s, why) = min(tied, key=lambda r: r[1][0].mean)
    v.verdict = verdict
    v.mean, v.lo, v.hi, v.n, v.level = s.mean, s.lo, s.hi, s.n, s.level
    v.point = claim.deterministic and s.n == 1
    band = claim.band()
    band_s = ""
    if claim.kind != "bound" and band is not None:
        band_s = (f"claimed band [{_fmt(band[0])}, {_fmt(band[1])}]" if claim.paper_value is not None
                  else f"min_effect {_fmt(band[0])}")
    v.note = "; ".join(x for x in (why, band_s, *extra, s.how) if x)


def _apply_gates(claim: Claim, df: pd.DataFrame, v: Verdict) -> None:
    if not claim.requires:
        return
    filters = [claim.ours] + (list(claim.baseline) if isinstance(claim.baseline, list)
                              else [claim.baseline] if claim.baseline else [])
    failed = []
    for gate in claim.requires:
        rows = pd.concat([_select(df, f, gate, claim.where) for f in filters])
        if rows.empty:
            rows = _select(df, {}, gate, claim.where)
        if rows.empty:
            failed.append(f"gate {gate!r} not recorded")
            continue
        bad = rows[rows["value"].to_numpy() < 0.5]
        if len(bad):
            who = sorted(bad["policy"].astype(str).unique()) if "policy" in bad else []
            failed.append(f"gate {gate!r} failed in {len(bad)}/{len(rows)} runs ({', '.join(who)})")
    if failed:
        v.verdict = "INCONCLUSIVE"
        v.note = "; ".join([*failed, v.note])


def _name(flt: Mapping[str, Any] | None) -> str:
    if not flt:
        return "-"
    return str(flt["policy"]) if set(flt) == {"policy"} else ",".join(f"{k}={v}" for k, v in flt.items())


def evaluate_all(claims: Sequence[Claim], frames: Mapping[str, pd.DataFrame | None], paper: str = "") -> list[Verdict]:
    """Verdicts of ``claims``; ``frames`` maps experiment name -> its rows (``None`` or absent: no results)."""
    return [evaluate(c, frames.get(c.experiment), paper) for c in claims]
