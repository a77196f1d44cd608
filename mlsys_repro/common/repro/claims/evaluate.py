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
without a paper value (every directional claim states its smallest meaningful effect in advance), or absent.

Verdict rules (the same for every kind; :func:`classify`):

* ``REPRODUCED``: the CI excludes no effect, on the claimed side, and the **mean lies in the band** (for a
  ``min_effect`` claim: the mean clears it).
* ``DIRECTION_ONLY``: the CI excludes no effect on the claimed side but the mean lies outside the band: "size
  differs" when the 95 % CI excludes the band, "size not pinned down" when it overlaps it.
* ``NOT_REPRODUCED``: the CI excludes no effect on the wrong side; or it contains no effect but the 95 % CI excludes
  the band (the study could have seen the claimed effect and did not: with a ``min_effect`` a precise null reads
  NOT_REPRODUCED); or a significant effect whose 95 % CI lies wholly below ``min_effect`` (smaller than the
  smallest effect that counts).
* ``INCONCLUSIVE``: the CI cannot tell (it contains no effect and overlaps the band); or a single stochastic run; or
  time-to-target censoring that does not decide it; or a gate not recorded; or a damaged result file (NaN values,
  seeds on one side only: the command-line checkers then exit non-zero).
* ``NOT_TESTED``: every cell the claim compares failed its validity gates: our implementation did not do what the
  comparison presumes (it did not train, or did not learn); counted apart from INCONCLUSIVE, with the ungated
  verdict beside it.
* ``SKIPPED``: not measurable here (the claim's ``skip`` says why), or no result rows for it.
* ``NOT_RUN``: its experiment has no result file in the folder checked (not a property of the claim).

Special cases:

* "Up to" (``over`` + ``aggregate: max``): "excludes no effect" is read from Bonferroni CIs (level 1 - 0.05/k over
  the k conditions) and the best condition is picked by its mean; the band is tested with that condition's plain
  95 % CI, so the multiplicity correction never loosens the size test. "On average" (``aggregate: mean``): the
  per-seed mean over conditions, then the CI. "In every condition" (``aggregate: min``): each condition is
  classified and the worst verdict stands.
* ``ordering``: each baseline is classified as above; the worst verdict stands (NOT_REPRODUCED < INCONCLUSIVE <
  DIRECTION_ONLY < REPRODUCED) and its effect is shown.
* ``bound``: REPRODUCED when the CI lies within the bound, NOT_REPRODUCED when it lies wholly beyond it, INCONCLUSIVE
  otherwise.
* Non-inferiority (``margin: m``): REPRODUCED when the CI's lower end clears ``no effect - m``, NOT_REPRODUCED when
  its upper end is below it, INCONCLUSIVE otherwise; never on the mean alone.
* Time-to-target (``reached: <0/1 metric>``): censored runs on either side make the claim INCONCLUSIVE unless the
  censoring decides it: ours reached in every run and the baseline in none gives a lower bound on the effect (it
  can show the direction and clear a ``min_effect`` or an ``at_least`` band, but never pin a point band's size:
  DIRECTION_ONLY "size not pinned down"); ours in none and the baseline in every run gives NOT_REPRODUCED.
* ``deterministic: true``: the numbers are computed, not sampled. Values repeated over seeds count once (n = 1) and
  a single run is compared as a point; a deterministic claim whose values vary by seed is INCONCLUSIVE. Without the
  flag a single run has no CI and is INCONCLUSIVE.
* Gates (``requires``; vocabulary and definitions in :mod:`mlsys_repro.common.repro.gates`): judged per cell, a
  compared policy at one condition of ``over`` (the whole policy when the gate rows or the claim have no
  condition). A cell is valid when, for each required gate, at least ``gate_fraction`` (0.8) of its runs pass.
  The verdict is computed over the valid cells with all their seeds; the note lists dropped cells and the ungated
  verdict (over every cell) is kept beside it. An ordering drops a baseline whose every cell is invalid. An "up to"
  whose dropped cells show a larger effect than the best valid cell has no known maximum: unless the valid maximum
  already lies above the band, it reads DIRECTION_ONLY, "size not pinned down".

Checks (``class: check``) use the same rules; reports show them as PASS (REPRODUCED) / FAIL (DIRECTION_ONLY,
NOT_REPRODUCED) in their own table. ``sensitivity`` and ``extension`` claims get ordinary verdicts and are shown,
but only ``headline`` and ``secondary`` claims are counted.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from mlsys_repro.common.repro.claims.schema import Claim
from mlsys_repro.common.repro.errors import ClaimsSchemaError
from mlsys_repro.common.repro.gates import cell_valid
from mlsys_repro.common.repro.stats import ALPHA, bonferroni_level, mean_ci

VERDICTS = ("REPRODUCED", "DIRECTION_ONLY", "NOT_REPRODUCED", "INCONCLUSIVE", "NOT_TESTED", "SKIPPED", "NOT_RUN")
CHECK_VERDICTS = {"REPRODUCED": "PASS", "DIRECTION_ONLY": "FAIL", "NOT_REPRODUCED": "FAIL"}
_WORST_FIRST = ("NOT_REPRODUCED", "INCONCLUSIVE", "DIRECTION_ONLY", "REPRODUCED")
REQUIRED_COLUMNS = ("seed", "metric", "value")
_ALL = None  # a gate cell that covers every condition of a policy


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
    ungated: str = ""  # the verdict over every cell, where gates dropped some (shown beside the verdict)
    dropped: list[str] = field(default_factory=list)  # cells whose gates failed
    damaged: str = ""  # why the result file cannot be trusted (NaN, missing column, one-sided seeds)
    per_condition: dict[Any, float] = field(default_factory=dict)  # "up to": each condition's mean

    @property
    def shown(self) -> str:
        """The verdict as reports show it: checks read PASS / FAIL."""
        return _shown(self.claim, self.verdict)

    @property
    def ungated_shown(self) -> str:
        return _shown(self.claim, self.ungated) if self.ungated else ""

    def measured(self) -> str:
        if math.isnan(self.mean):
            return "n/a"
        u = {"ratio": "x", "pct_reduction": "%", "pct_gain": "%"}.get(self.claim.kind, f" {self.unit}".rstrip())
        if self.point:
            return f"{_fmt(self.mean)}{u} (deterministic)"
        lvl = "" if abs(self.level - (1 - ALPHA)) < 1e-12 else f" {100 * self.level:.4g} % CI"
        return f"{_fmt(self.mean)}{u} [{_fmt(self.lo)}, {_fmt(self.hi)}]{lvl} (n={self.n})"


def _shown(claim: Claim, verdict: str) -> str:
    return CHECK_VERDICTS.get(verdict, verdict) if claim.cls == "check" else verdict


@dataclass(frozen=True)
class _Summary:
    mean: float
    lo: float  # the CI that decides "excludes no effect" (Bonferroni for "up to")
    hi: float
    n: int
    level: float
    how: str
    condition: Any = None  # the ``over`` value this summary is about; None = all rows
    lo95: float = math.nan  # the plain 95 % CI, for the band test
    hi95: float = math.nan
    per: tuple[tuple[Any, float], ...] = ()  # "up to": the mean of every condition

    @property
    def ci95(self) -> tuple[float, float]:
        return (self.lo, self.hi) if math.isnan(self.lo95) else (self.lo95, self.hi95)


def _fmt(x: float) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    a = abs(x)
    if a != 0 and (a >= 1e5 or a < 1e-3):
        return f"{x:.3g}"
    return f"{x:.3f}" if a < 10 else f"{x:.2f}"


def classify(mean: float, lo: float, hi: float, null: float, band: tuple[float, float] | None,
             ci95: tuple[float, float] | None = None, floor: bool = False) -> tuple[str, str]:
    """The verdict of an effect with mean ``mean`` whose CI is ``[lo, hi]`` (larger = the claim), and why.

    ``[lo, hi]`` decides "excludes no effect"; ``ci95`` (default: the same interval) is the plain 95 % CI used for
    the band test. ``floor``: the band is ``[min_effect, inf)``, the smallest effect that counts (see the module
    doc)."""
    b_lo, b_hi = ci95 if ci95 is not None else (lo, hi)
    if lo > null:
        if band is None or band[0] <= mean <= band[1]:
            return "REPRODUCED", ""
        if floor and b_hi < band[0]:
            return "NOT_REPRODUCED", "smaller than the smallest effect that counts (95 % CI wholly below min_effect)"
        side = "above" if mean > band[1] else "below"
        if b_hi < band[0] or b_lo > band[1]:
            return "DIRECTION_ONLY", f"size differs: the 95 % CI lies wholly {side} the band"
        return "DIRECTION_ONLY", f"size not pinned down: the mean lies {side} the band, the 95 % CI overlaps it"
    if hi < null:
        return "NOT_REPRODUCED", "wrong direction (CI excludes no effect on the other side)"
    if band is None:
        return "INCONCLUSIVE", "CI includes no effect (no min_effect stated, so absence cannot be shown)"
    if b_hi < band[0] or b_lo > band[1]:
        return "NOT_REPRODUCED", "CI includes no effect and excludes the claimed band"
    return "INCONCLUSIVE", "CI includes both no effect and the claimed band"


# ---------------------------------------------------------------------------------------------- row selection


class MissingColumn(ClaimsSchemaError):
    """A claim selects on a column its experiment's CSV does not have: results older than the claim (or a wrong
    column name; ``tests/test_configs.py`` rules that out for ``over`` columns on every experiment's smoke rows)."""


class DamagedResult(ValueError):
    """The result rows cannot be trusted: NaN values, a missing core column, or seeds on one side only."""


class _NoValidCell(Exception):
    """Every compared cell failed its gates."""


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
    s = pd.to_numeric(sel.set_index(keys)["value"], errors="coerce").astype(np.float64)
    if s.isna().any():
        raise DamagedResult(f"{label}: {int(s.isna().sum())} of {len(s)} values are NaN or not numbers")
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


def _pair(o: pd.Series, b: pd.Series, label: str) -> tuple[pd.Series, pd.Series]:
    """Align by seed (and over); a single-seed baseline (deterministic) is broadcast over our seeds. Keys on one side
    only are damage, never silently dropped."""
    if b.index.get_level_values("seed").nunique() == 1 and o.index.get_level_values("seed").nunique() > 1:
        if isinstance(b.index, pd.MultiIndex):
            b2 = b.droplevel("seed").reindex(o.index.droplevel("seed"))
            b2.index = o.index
            b = b2
        else:
            b = pd.Series(float(b.iloc[0]), index=o.index)
    j = pd.concat([o.rename("o"), b.rename("b")], axis=1, join="outer")
    lonely = j[j.isna().any(axis=1)]
    if len(lonely):
        side = "ours" if lonely["b"].isna().all() else "the baseline" if lonely["o"].isna().all() else "either side"
        raise DamagedResult(f"{label}: {len(lonely)} (seed, condition) keys only on {side}'s side "
                            f"(e.g. {lonely.index[0]})")
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
        groups = {k: g.to_numpy() for k, g in eff.groupby(level=over)}
        per = {k: mean_ci(g, level) for k, g in groups.items()}
        pick = max(per, key=lambda k: per[k][0])
        m, lo, hi, n = per[pick]
        _, lo95, hi95, _ = mean_ci(groups[pick])
        ranges = ", ".join(f"{k}: {_fmt(per[k][0])}" for k in conds)
        how = (f"up to: best of {len(conds)} {over} values at {over}={pick} (Bonferroni CI at {100 * level:.4g} % "
               f"for significance; band tested with its 95 % CI [{_fmt(lo95)}, {_fmt(hi95)}]); per condition "
               f"{ranges}")
        return [_Summary(m, lo, hi, n, level, how, pick, lo95, hi95, tuple((k, per[k][0]) for k in conds))]
    out = []
    for k, g in eff.groupby(level=over):
        m, lo, hi, n = mean_ci(g.to_numpy())
        out.append(_Summary(m, lo, hi, n, 1 - ALPHA, f"every {over}: worst at {over}={k}", k))
    return out


# ---------------------------------------------------------------------------------------------- gates per cell


@dataclass
class _Cells:
    """Per compared filter (0 = ours, then the baselines): the conditions whose gates failed (``{_ALL}`` = every
    condition), why, and gates that no compared policy records."""

    invalid: dict[int, set[Any]] = field(default_factory=dict)
    why: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)


def _filters(claim: Claim) -> list[dict[str, Any]]:
    if claim.kind == "bound":
        return [claim.ours]
    return [claim.ours, *(claim.baseline if claim.kind == "ordering" else [claim.baseline])]


def _policy_gate(df: pd.DataFrame, flt: Mapping[str, Any], gate: str, where: Mapping[str, Any]) -> pd.DataFrame:
    """The ``gate`` rows of the compared filter ``flt``. A gate is a property of a policy's training, so when the
    filter also names columns its gate rows do not carry, the gate rows of every policy the filter names: its
    ``policy`` and any other value that is itself a gated policy (``reference: bml``: a paired quantity is valid
    when both runs are; ``attacker: zo`` names none)."""
    rows = _select(df, flt, gate, where)
    if rows.empty and "policy" in flt and len(flt) > 1:
        gated = set(df.loc[df["metric"] == gate, "policy"].astype(str))
        names = [str(flt["policy"])] + [str(v) for k, v in flt.items()
                                        if k != "policy" and not isinstance(v, list) and str(v) in gated]
        rows = _select(df, {"policy": names}, gate, where)
    return rows


def _gate_cells(claim: Claim, df: pd.DataFrame) -> _Cells:
    cells = _Cells()
    filters = _filters(claim)
    over = claim.over
    for gate in claim.requires:
        per = [_policy_gate(df, f, gate, claim.where) for f in filters]
        if all(r.empty for r in per):
            # a gate recorded once for the whole experiment (policy "-") applies to every filter; another
            # policy's gate rows never stand in for the compared ones
            wide = _select(df, {"policy": "-"}, gate, claim.where)
            if wide.empty:
                if not _select(df, claim.ours, claim.metric, claim.where).empty:
                    cells.missing.append(gate)
                continue  # no rows of ours at all: the evaluation says so
            per = [wide] * len(filters)
        for i, rows in enumerate(per):
            if rows.empty:  # a policy that does not learn records no such gate (a heuristic)
                continue
            by_cond = bool(over) and over in rows.columns and rows[over].notna().all()
            groups = rows.groupby(over) if by_cond else [(_ALL, rows)]
            for cond, g in groups:
                vals = pd.to_numeric(g["value"], errors="coerce").to_numpy(np.float64)
                if not np.isfinite(vals).all():
                    raise DamagedResult(f"gate {gate!r} has NaN values")
                if not cell_valid(vals, claim.gate_fraction):
                    cells.invalid.setdefault(i, set()).add(cond)
                    where = "" if cond is _ALL else f" at {over}={cond}"
                    cells.why.append(f"{_name(filters[i])}{where}: {gate} passed {int((vals >= 0.5).sum())}/"
                                     f"{len(vals)}")
    return cells


def _drop(s: pd.Series, claim: Claim, cells: _Cells | None, i: int) -> pd.Series:
    """``s`` without the conditions whose cells failed their gates (all of it if the whole policy failed)."""
    if cells is None or i not in cells.invalid:
        return s
    if _ALL in cells.invalid[i] or not claim.over:
        return s.iloc[0:0]
    conds = s.index.get_level_values(claim.over)
    return s[~conds.isin(list(cells.invalid[i]))]


# ---------------------------------------------------------------------------------------------- evaluation


def evaluate(claim: Claim, df: pd.DataFrame | None, paper: str = "") -> Verdict:
    """Verdict for one claim given the result rows of its experiment (``None`` if the file is missing)."""
    v = Verdict(paper=paper, claim=claim, verdict="SKIPPED")
    if claim.skip:
        v.note = str(claim.skip)
        return v
    if df is None:
        v.verdict = "NOT_RUN"
        v.note = f"no result file for experiment {claim.experiment!r} in this folder (run ./reproduce.sh {paper})"
        return v
    v.profiles = ",".join(sorted(df["profile"].astype(str).unique())) if "profile" in df else ""
    try:
        lacking = [c for c in REQUIRED_COLUMNS if c not in df.columns]
        if lacking:
            raise DamagedResult(f"columns {lacking} missing (columns: {list(df.columns)})")
        cells = _gate_cells(claim, df) if claim.requires else None
        if cells is not None and cells.missing:
            _evaluate(claim, df, v)
            v.ungated = v.verdict
            v.verdict = "INCONCLUSIVE"
            v.note = "; ".join([f"gate {g!r} not recorded" for g in cells.missing] + [v.note])
        elif cells is not None and cells.invalid:
            ungated = Verdict(paper=paper, claim=claim, verdict="SKIPPED")
            _evaluate(claim, df, ungated)
            v.dropped = list(cells.why)
            try:
                _evaluate(claim, df, v, cells)
                v.note = "; ".join([f"gates failed, cells dropped: {', '.join(cells.why)}", v.note])
                _max_over_dropped(v, ungated)
            except _NoValidCell:
                v.verdict = "NOT_TESTED"
                v.mean, v.lo, v.hi, v.n, v.level = ungated.mean, ungated.lo, ungated.hi, ungated.n, ungated.level
                v.point, v.unit = ungated.point, ungated.unit
                v.note = (f"no cell passed its gates ({', '.join(cells.why)}); ungated: {ungated.shown}"
                          + (f" ({ungated.note})" if ungated.note else ""))
            v.ungated = ungated.verdict
        else:
            _evaluate(claim, df, v)
    except _NotDeterministic as e:
        v.verdict, v.note = "INCONCLUSIVE", str(e)
        return v
    except MissingColumn as e:  # one paper's old CSV must not stop the other papers' verdicts
        v.verdict, v.note = "SKIPPED", f"{e}: the results predate this claim; regenerate them (./reproduce.sh {paper})"
        return v
    except DamagedResult as e:
        v.verdict, v.damaged = "INCONCLUSIVE", str(e)
        v.mean = v.lo = v.hi = math.nan
        v.n = 0
        v.note = f"result file damaged: {e}"
        return v
    if claim.note:
        v.note = "; ".join(x for x in (v.note, claim.note) if x)
    return v


def _max_over_dropped(v: Verdict, ungated: Verdict) -> None:
    """An "up to" whose dropped cells show a larger effect than the best valid one has no known maximum: unless the
    valid maximum already lies above the band, the size is not pinned down (REPRODUCED or a "below the band"
    DIRECTION_ONLY becomes DIRECTION_ONLY, "size not pinned down")."""
    band = v.claim.band()
    larger = {k: m for k, m in ungated.per_condition.items() if k not in v.per_condition and m > v.mean}
    if v.verdict not in ("REPRODUCED", "DIRECTION_ONLY") or v.claim.paper_value is None or not larger:
        return
    if band is not None and v.mean > band[1]:
        return
    v.verdict = "DIRECTION_ONLY"
    cells = ", ".join(f"{v.claim.over}={k}: {_fmt(m)}" for k, m in larger.items())
    v.note = (f"size not pinned down: dropped cells show a larger effect ({cells}), so the maximum over all "
              f"conditions is unknown; {v.note}")


def _evaluate(claim: Claim, df: pd.DataFrame, v: Verdict, cells: _Cells | None = None) -> None:
    ours = _select(df, claim.ours, claim.metric, claim.where)
    if ours.empty:
        v.note = f"no rows for ours={claim.ours} metric={claim.metric!r} where={claim.where}"
        return
    v.unit = str(ours["unit"].iloc[0]) if "unit" in ours else ""
    o = _drop(_keyed(ours, claim, f"claim {claim.id} ours"), claim, cells, 0)
    if o.empty:
        raise _NoValidCell

    if claim.kind == "bound":
        picked = [(s, _classify_bound(claim, s)) for s in _summaries(o, claim)]
        _finish(claim, v, [(r[0], (s, r[1])) for s, r in picked], extra=[f"bound {_bound_rel(claim)} "
                                                                         f"{_fmt(claim.paper_value)}"])
        return

    baselines = claim.baseline if claim.kind == "ordering" else [claim.baseline]
    results: list[tuple[str, tuple[_Summary, str]]] = []
    per_baseline: dict[str, list[str]] = {}
    untested: list[str] = []
    for i, bf in enumerate(baselines, start=1):
        base = _select(df, bf, claim.metric, claim.where)
        if base.empty:
            v.note = f"no rows for baseline={bf} metric={claim.metric!r} where={claim.where}"
            return
        b = _drop(_keyed(base, claim, f"claim {claim.id} baseline {bf}"), claim, cells, i)
        if b.empty:
            untested.append(_name(bf))
            continue
        op, bp = _pair(o, b, f"claim {claim.id} vs {_name(bf)}") if cells is None else _pair_valid(o, b, claim)
        if op.empty:
            untested.append(_name(bf))
            continue
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
    if not results:
        raise _NoValidCell
    extra = []
    if claim.kind == "ordering":
        bad = [nm for nm, vds in per_baseline.items() if any(vd != "REPRODUCED" for vd in vds)]
        extra.append(f"ordering over {len(per_baseline)} baselines; not REPRODUCED against: "
                     f"{', '.join(bad) or 'none'}")
    if untested:
        extra.append(f"not compared (every cell failed its gates): {', '.join(untested)}")
    _finish(claim, v, results, extra=extra)


def _pair_valid(o: pd.Series, b: pd.Series, claim: Claim) -> tuple[pd.Series, pd.Series]:
    """Pair the valid cells of both sides: a condition dropped on one side is dropped on the other (the damage check
    ran on the ungated pairing)."""
    if claim.over and isinstance(o.index, pd.MultiIndex) and isinstance(b.index, pd.MultiIndex):
        keep = set(o.index.get_level_values(claim.over)) & set(b.index.get_level_values(claim.over))
        o = o[o.index.get_level_values(claim.over).isin(list(keep))]
        b = b[b.index.get_level_values(claim.over).isin(list(keep))]
    if o.empty or b.empty:
        return o.iloc[0:0], b.iloc[0:0]
    return _pair(o, b, f"claim {claim.id}")


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
    return classify(s.mean, s.lo, s.hi, claim.null, claim.band(), s.ci95,
                    floor=claim.paper_value is None and claim.min_effect is not None)


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
        if claim.margin is None and s.lo > claim.null:
            if band is None or (claim.paper_value is None or claim.match == "at_least") and s.mean >= band[0]:
                return "REPRODUCED", lower
            if band is not None and s.ci95[0] > band[1]:
                return "DIRECTION_ONLY", lower + "; size differs: above the claimed band"
            return "DIRECTION_ONLY", lower + "; size not pinned down (a lower bound cannot place it in the band)"
        return "INCONCLUSIVE", lower + " that does not exclude no effect"
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
    v.per_condition = dict(s.per)
    band = claim.band()
    band_s = ""
    if claim.kind != "bound" and band is not None:
        band_s = (f"claimed band [{_fmt(band[0])}, {_fmt(band[1])}]" if claim.paper_value is not None
                  else f"min_effect {_fmt(band[0])}")
    v.note = "; ".join(x for x in (why, band_s, *extra, s.how) if x)


def _name(flt: Mapping[str, Any] | None) -> str:
    if not flt:
        return "-"
    return str(flt["policy"]) if set(flt) == {"policy"} else ",".join(f"{k}={v}" for k, v in flt.items())


def evaluate_all(claims: Sequence[Claim], frames: Mapping[str, pd.DataFrame | None], paper: str = "") -> list[Verdict]:
    """Verdicts of ``claims``; ``frames`` maps experiment name -> its rows (``None`` or absent: no results)."""
    return [evaluate(c, frames.get(c.experiment), paper) for c in claims]
