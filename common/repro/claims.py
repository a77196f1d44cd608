"""Claims checker: paper claims (``papers/<key>/claims.yaml``) against measured result CSVs.

Each claim compares the rows of ``ours`` with those of ``baseline`` (policy names, or column filters) for one
``metric`` of one ``experiment``, seed by seed, and reduces the per-seed effect to a mean and a 95 % Student-t
confidence interval. Kinds (``better`` says which direction of the raw metric is good):

``ratio``          baseline/ours when lower is better, ours/baseline when higher is better; no effect = 1.
``pct_reduction``  100 * (1 - ours/baseline), for lower-is-better metrics; no effect = 0.
``pct_gain``       100 * (ours/baseline - 1), for higher-is-better metrics; no effect = 0.
``diff``           ours - baseline (higher better) or baseline - ours (lower better), in the metric's unit.
``ordering``       ours better than every baseline in a list (paired differences); no paper value.
``bound``          the metric of ``ours`` stays at or below (``better: lower``) or above ``paper_value``.

Optional ``margin: m`` (``diff``/``ratio``/``pct_*`` without a paper value) turns a superiority claim into a
non-inferiority one ("at least as well as"): the effect must stay above ``no effect - m``, in the effect's unit.

Optional ``over: <column>`` with ``aggregate: mean|max|min`` handles "on average" and "up to" claims across a
swept condition; ``where`` filters rows (e.g. ``{trace: fb2010}``).

Verdicts:

* ``REPRODUCED``: the effect is in the claimed direction, its CI excludes no effect, and the mean is within
  ``tolerance`` of ``paper_value`` (relative unless ``{abs: x}``; ``match: at_least`` accepts anything above
  ``paper_value * (1 - tol)``). Claims without a paper value need only the first two.
* ``DIRECTION_ONLY``: direction holds with the CI excluding no effect, but the magnitude is outside tolerance.
* ``NOT_REPRODUCED``: wrong direction, or an effect the CI cannot tell from none.
* With ``margin``: REPRODUCED when the CI's lower end is above ``no effect - margin``, DIRECTION_ONLY when only
  the mean is, NOT_REPRODUCED otherwise.
* ``SKIPPED``: the claim says why (``skip:``), or its experiment has no result file or no matching rows.

A single run (deterministic experiment) gets a zero-width interval and says so in the note.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml
from scipy import stats

from common.repro.errors import ClaimsSchemaError
from common.repro.results import atomic_write_bytes

KINDS = ("ratio", "pct_reduction", "pct_gain", "diff", "ordering", "bound")
VERDICTS = ("REPRODUCED", "DIRECTION_ONLY", "NOT_REPRODUCED", "SKIPPED")
SOURCES = ("abstract", "table", "figure", "text", "notes")
_FIELDS = {
    "id", "source", "text", "experiment", "metric", "ours", "baseline", "kind", "better", "paper_value",
    "tolerance", "match", "where", "over", "aggregate", "skip", "note", "reached", "margin",
}


@dataclass(frozen=True)
class Claim:
    id: str
    source: str
    text: str
    experiment: str
    metric: str
    ours: dict[str, Any]
    baseline: Any  # dict filter, or list of dict filters for ordering
    kind: str
    better: str
    paper_value: float | None = None
    tolerance: float = 0.10
    tolerance_abs: bool = False
    match: str = "point"
    where: dict[str, Any] = field(default_factory=dict)
    over: str | None = None
    aggregate: str = "mean"
    skip: str | None = None
    note: str = ""
    reached: str | None = None  # a 0/1 metric that must be 1 in every run of ours (e.g. reached_target)
    margin: float | None = None  # non-inferiority margin in the effect's unit


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

    def measured(self) -> str:
        if self.verdict == "SKIPPED" or math.isnan(self.mean):
            return "n/a"
        u = {"ratio": "x", "pct_reduction": "%", "pct_gain": "%"}.get(self.claim.kind, f" {self.unit}".rstrip())
        if self.claim.kind == "ordering":
            u = ""
        return f"{_fmt(self.mean)}{u} [{_fmt(self.lo)}, {_fmt(self.hi)}] (n={self.n})"


def _fmt(x: float) -> str:
    if math.isnan(x):
        return "nan"
    a = abs(x)
    if a != 0 and (a >= 1e5 or a < 1e-3):
        return f"{x:.3g}"
    return f"{x:.3f}" if a < 10 else f"{x:.2f}"


# ---------------------------------------------------------------------------------------------- parsing


def _filter(v: Any, where: str) -> dict[str, Any]:
    if isinstance(v, str):
        return {"policy": v}
    if isinstance(v, Mapping) and v:
        return dict(v)
    raise ClaimsSchemaError(f"{where}: expected a policy name or a mapping of column filters, got {v!r}")


def parse_claims(doc: Any, source: str = "claims.yaml") -> list[Claim]:
    """Parse and validate a claims document (``{paper: key, claims: [...]}`` or a bare list)."""
    items = doc.get("claims") if isinstance(doc, Mapping) else doc
    if not isinstance(items, list) or not items:
        raise ClaimsSchemaError(f"{source}: expected a non-empty list under 'claims'")
    out: list[Claim] = []
    seen: set[str] = set()
    for i, c in enumerate(items):
        where = f"{source}: claim #{i + 1}"
        if not isinstance(c, Mapping):
            raise ClaimsSchemaError(f"{where}: expected a mapping, got {type(c).__name__}")
        unknown = set(c) - _FIELDS
        if unknown:
            raise ClaimsSchemaError(f"{where}: unknown fields {sorted(unknown)}")
        for req in ("id", "source", "experiment", "metric", "ours", "kind"):
            if req not in c:
                raise ClaimsSchemaError(f"{where}: missing field {req!r}")
        cid = str(c["id"])
        where = f"{source}: claim {cid!r}"
        if cid in seen:
            raise ClaimsSchemaError(f"{where}: duplicate id")
        seen.add(cid)
        kind = c["kind"]
        if kind not in KINDS:
            raise ClaimsSchemaError(f"{where}: kind must be one of {KINDS}, got {kind!r}")
        if str(c["source"]).split()[0].lower().rstrip(":,") not in SOURCES:
            raise ClaimsSchemaError(f"{where}: source must start with one of {SOURCES}, got {c['source']!r}")
        better = c.get("better", "higher" if kind == "pct_gain" else "lower")
        if better not in ("lower", "higher"):
            raise ClaimsSchemaError(f"{where}: better must be 'lower' or 'higher', got {better!r}")
        if kind == "pct_reduction" and better != "lower":
            raise ClaimsSchemaError(f"{where}: pct_reduction needs a lower-is-better metric")
        if kind == "pct_gain" and better != "higher":
            raise ClaimsSchemaError(f"{where}: pct_gain needs a higher-is-better metric")
        pv = c.get("paper_value")
        if pv is not None and not isinstance(pv, (int, float)):
            raise ClaimsSchemaError(f"{where}: paper_value must be a number or null, got {pv!r}")
        if kind == "bound" and pv is None:
            raise ClaimsSchemaError(f"{where}: a bound claim needs paper_value (the bound)")
        if kind == "ordering" and pv is not None:
            raise ClaimsSchemaError(f"{where}: an ordering claim has no paper_value")
        baseline: Any = None
        if kind == "ordering":
            bl = c.get("baseline")
            if not isinstance(bl, list) or not bl:
                raise ClaimsSchemaError(f"{where}: ordering needs a non-empty list of baselines")
            baseline = [_filter(b, where) for b in bl]
        elif kind != "bound":
            if "baseline" not in c:
                raise ClaimsSchemaError(f"{where}: missing field 'baseline'")
            baseline = _filter(c["baseline"], where)
        tol = c.get("tolerance", 0.10)
        tol_abs = False
        if isinstance(tol, Mapping):
            if set(tol) == {"abs"}:
                tol, tol_abs = tol["abs"], True
            elif set(tol) == {"rel"}:
                tol = tol["rel"]
            else:
                raise ClaimsSchemaError(f"{where}: tolerance must be a number, {{rel: x}} or {{abs: x}}")
        if not isinstance(tol, (int, float)) or tol < 0:
            raise ClaimsSchemaError(f"{where}: tolerance must be a non-negative number, got {tol!r}")
        match = c.get("match", "point")
        if match not in ("point", "at_least", "at_most"):
            raise ClaimsSchemaError(f"{where}: match must be point, at_least or at_most")
        agg = c.get("aggregate", "mean")
        if agg not in ("mean", "max", "min"):
            raise ClaimsSchemaError(f"{where}: aggregate must be mean, max or min")
        if agg != "mean" and not c.get("over"):
            raise ClaimsSchemaError(f"{where}: aggregate {agg!r} needs an 'over' column")
        w = c.get("where") or {}
        if not isinstance(w, Mapping):
            raise ClaimsSchemaError(f"{where}: where must be a mapping")
        margin = c.get("margin")
        if margin is not None:
            if kind in ("ordering", "bound") or pv is not None:
                raise ClaimsSchemaError(f"{where}: margin (non-inferiority) needs a diff/ratio/pct kind and no "
                                        "paper_value")
            if not isinstance(margin, (int, float)) or not margin > 0:
                raise ClaimsSchemaError(f"{where}: margin must be a positive number, got {margin!r}")
        out.append(Claim(
            id=cid, source=str(c["source"]), text=str(c.get("text", "")), experiment=str(c["experiment"]),
            metric=str(c["metric"]), ours=_filter(c["ours"], where), baseline=baseline, kind=kind, better=better,
            paper_value=None if pv is None else float(pv), tolerance=float(tol), tolerance_abs=tol_abs,
            match=match, where=dict(w), over=c.get("over"), aggregate=agg, skip=c.get("skip"),
            reached=str(c["reached"]) if c.get("reached") else None,
            margin=None if margin is None else float(margin),
            note=str(c.get("note", "")),
        ))
    return out


def load_claims(path: Path) -> tuple[str, list[Claim]]:
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise ClaimsSchemaError(f"{path}: not valid YAML: {e}") from None
    paper = doc.get("paper", path.parent.name) if isinstance(doc, Mapping) else path.parent.name
    return str(paper), parse_claims(doc, str(path))


# ---------------------------------------------------------------------------------------------- maths


def mean_ci(x: Sequence[float], level: float = 0.95) -> tuple[float, float, float, int]:
    """Mean and two-sided Student-t confidence interval; a single value gives a zero-width interval."""
    a = np.asarray(x, dtype=np.float64)
    a = a[np.isfinite(a)]
    n = a.size
    if n == 0:
        return math.nan, math.nan, math.nan, 0
    m = float(a.mean())
    if n == 1:
        return m, m, m, 1
    se = float(a.std(ddof=1)) / math.sqrt(n)
    h = float(stats.t.ppf(0.5 + level / 2, df=n - 1)) * se
    return m, m - h, m + h, n


def _select(df: pd.DataFrame, flt: Mapping[str, Any], metric: str, where: Mapping[str, Any]) -> pd.DataFrame:
    sel = df[df["metric"] == metric]
    for col, v in {**where, **flt}.items():
        if col not in sel.columns:
            raise ClaimsSchemaError(f"filter column {col!r} not in results (columns: {list(df.columns)})")
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


def _keyed(sel: pd.DataFrame, over: str | None, label: str) -> pd.Series:
    keys = ["seed"] + ([over] if over else [])
    dup = sel.duplicated(keys)
    if dup.any():
        varying = [c for c in sel.columns if c not in (*keys, "value", "value_raw") and sel[c].nunique() > 1]
        raise ClaimsSchemaError(
            f"{label}: several rows per {keys} (columns that vary: {varying}); add them to 'where' or 'over'"
        )
    return sel.set_index(keys)["value"]


def _pair(o: pd.Series, b: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Align by seed (and over); a single-seed baseline (deterministic) is broadcast over seeds."""
    if b.index.get_level_values("seed").nunique() == 1 and o.index.get_level_values("seed").nunique() > 1:
        if isinstance(b.index, pd.MultiIndex):
            b = b.droplevel("seed")
            o2 = o.copy()
            b2 = b.reindex(o.index.droplevel("seed"))
            b2.index = o.index
            return o2, b2
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


def _null(kind: str) -> float:
    return 1.0 if kind == "ratio" else 0.0


def _reduce(eff: pd.Series, over: str | None, aggregate: str) -> tuple[float, float, float, int, str]:
    if not over:
        m, lo, hi, n = mean_ci(eff.to_numpy())
        return m, lo, hi, n, ""
    if aggregate == "mean":
        per_seed = eff.groupby(level="seed").mean()
        m, lo, hi, n = mean_ci(per_seed.to_numpy())
        return m, lo, hi, n, f"mean over {over} in {sorted(eff.index.get_level_values(over).unique().tolist())}"
    per = {k: mean_ci(g.to_numpy()) for k, g in eff.groupby(level=over)}
    pick = (max if aggregate == "max" else min)(per, key=lambda k: per[k][0])
    m, lo, hi, n = per[pick]
    return m, lo, hi, n, f"{aggregate} over {over} at {over}={pick}"


def evaluate(claim: Claim, df: pd.DataFrame | None, paper: str = "") -> Verdict:
    """Verdict for one claim given the result rows of its experiment (``None`` if the file is missing).

    With ``reached`` set (a 0/1 metric such as ``reached_target``), a claim whose own runs missed the target in any
    seed cannot be REPRODUCED or DIRECTION_ONLY: their time-to-target is censored at the end of the run, so the
    measured effect is only a bound in the claim's favour. The effect is still shown; the verdict becomes
    NOT_REPRODUCED with a note saying how many runs missed.
    """
    v = _evaluate(claim, df, paper)
    if claim.reached is None or v.verdict == "SKIPPED" or df is None:
        return v
    r = _select(df, claim.ours, claim.reached, claim.where)
    if r.empty:
        v.verdict, v.note = "SKIPPED", f"no rows for ours={claim.ours} metric={claim.reached!r}"
        return v
    missed = int((r["value"].to_numpy() < 0.5).sum())
    if missed:
        v.verdict = "NOT_REPRODUCED"
        v.note = "; ".join(x for x in (f"ours missed the target in {missed}/{len(r)} runs ({claim.reached} = 0): "
                                       "its time is censored, the effect shown is a bound in its favour", v.note) if x)
    return v


def _evaluate(claim: Claim, df: pd.DataFrame | None, paper: str) -> Verdict:
    v = Verdict(paper=paper, claim=claim, verdict="SKIPPED")
    if claim.skip:
        v.note = str(claim.skip)
        return v
    if df is None:
        v.note = f"no results for experiment {claim.experiment!r} (run ./reproduce.sh {paper})"
        return v
    v.profiles = ",".join(sorted(df["profile"].astype(str).unique())) if "profile" in df else ""
    ours = _select(df, claim.ours, claim.metric, claim.where)
    if ours.empty:
        v.note = f"no rows for ours={claim.ours} metric={claim.metric!r} where={claim.where}"
        return v
    v.unit = str(ours["unit"].iloc[0])
    o = _keyed(ours, claim.over, f"claim {claim.id} ours")
    null = _null(claim.kind)

    if claim.kind == "bound":
        m, lo, hi, n, how = _reduce(o, claim.over, claim.aggregate)
        v.mean, v.lo, v.hi, v.n = m, lo, hi, n
        bound = claim.paper_value
        assert bound is not None
        ok_mean = m <= bound if claim.better == "lower" else m >= bound
        ok_ci = hi <= bound if claim.better == "lower" else lo >= bound
        v.verdict = "REPRODUCED" if ok_ci else ("DIRECTION_ONLY" if ok_mean else "NOT_REPRODUCED")
        rel = "<=" if claim.better == "lower" else ">="
        v.note = "; ".join(x for x in (f"bound {rel} {_fmt(bound)}", how, _single(n)) if x)
        return v

    baselines = claim.baseline if claim.kind == "ordering" else [claim.baseline]
    effects = []
    for bf in baselines:
        base = _select(df, bf, claim.metric, claim.where)
        if base.empty:
            v.note = f"no rows for baseline={bf} metric={claim.metric!r} where={claim.where}"
            return v
        b = _keyed(base, claim.over, f"claim {claim.id} baseline {bf}")
        op, bp = _pair(o, b)
        if op.empty:
            v.note = f"no seeds in common between ours={claim.ours} and baseline={bf}"
            return v
        eff = pd.Series(_effect(claim.kind, claim.better, op.to_numpy(), bp.to_numpy()), index=op.index)
        if not np.isfinite(eff.to_numpy()).all():
            v.verdict, v.note = "NOT_REPRODUCED", f"effect not finite vs {bf} (zero baseline?)"
            return v
        effects.append((bf, _reduce(eff, claim.over, claim.aggregate)))

    if claim.kind == "ordering":
        sig = [lo > 0 for _, (m, lo, hi, n, _) in effects]
        dirn = [m > 0 for _, (m, lo, hi, n, _) in effects]
        worst = min(effects, key=lambda e: e[1][0])
        v.mean, v.lo, v.hi, v.n = worst[1][:4]
        v.verdict = "REPRODUCED" if all(sig) else ("DIRECTION_ONLY" if all(dirn) else "NOT_REPRODUCED")
        names = [_name(bf) for bf, _ in effects]
        beaten = [nm for nm, s in zip(names, sig, strict=True) if s]
        v.note = (f"significantly better than {len(beaten)}/{len(names)} baselines; closest: {_name(worst[0])} "
                  f"(margin shown, in {v.unit})")
        if worst[1][4]:
            v.note += f"; {worst[1][4]}"
        return v

    m, lo, hi, n, how = effects[0][1]
    v.mean, v.lo, v.hi, v.n = m, lo, hi, n
    if claim.margin is not None:
        floor = null - claim.margin
        v.verdict = "REPRODUCED" if lo > floor else ("DIRECTION_ONLY" if m > floor else "NOT_REPRODUCED")
        what = {"REPRODUCED": "CI above", "DIRECTION_ONLY": "mean above, CI not above",
                "NOT_REPRODUCED": "mean not above"}[v.verdict]
        v.note = "; ".join(x for x in (f"non-inferiority: {what} {_fmt(floor)} (margin {_fmt(claim.margin)})", how,
                                       _single(n)) if x)
        return v
    direction = m > null
    significant = lo > null or (n == 1 and direction)
    notes = [how, _single(n)]
    if not direction or not significant:
        v.verdict = "NOT_REPRODUCED"
        notes.insert(0, "wrong direction" if not direction else "CI includes no effect")
    elif claim.paper_value is None:
        v.verdict = "REPRODUCED"
    else:
        pv, tol = claim.paper_value, claim.tolerance
        width = (tol if claim.tolerance_abs else tol * abs(pv)) * (1 + 1e-9)  # inclusive edge, float slack
        within = {
            "point": abs(m - pv) <= width,
            "at_least": m >= pv - width,
            "at_most": m <= pv + width,
        }[claim.match]
        v.verdict = "REPRODUCED" if within else "DIRECTION_ONLY"
        tol_s = f"±{_fmt(tol)}" if claim.tolerance_abs else f"±{100 * tol:.0f}%"
        notes.insert(0, f"paper {_fmt(pv)} {tol_s}" + ("" if claim.match == "point" else f" ({claim.match})"))
    v.note = "; ".join(x for x in notes if x)
    return v


def _single(n: int) -> str:
    return "single run (deterministic), zero-width CI" if n == 1 else ""


def _name(flt: Mapping[str, Any]) -> str:
    return str(flt["policy"]) if set(flt) == {"policy"} else ",".join(f"{k}={v}" for k, v in flt.items())


# ---------------------------------------------------------------------------------------------- reports


def check_paper(paper: str, claims_path: Path, results_dir: Path) -> list[Verdict]:
    _, claims = load_claims(claims_path)
    cache: dict[str, pd.DataFrame | None] = {}
    out = []
    for c in claims:
        if c.experiment not in cache:
            p = Path(results_dir) / paper / f"{c.experiment}.csv"
            cache[c.experiment] = pd.read_csv(p) if p.exists() else None
        out.append(evaluate(c, cache[c.experiment], paper))
    return out


def _md_escape(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def paper_markdown(paper: str, title: str, verdicts: list[Verdict]) -> str:
    counts = {k: sum(v.verdict == k for v in verdicts) for k in VERDICTS}
    profiles = sorted({p for v in verdicts for p in v.profiles.split(",") if p})
    lines = [
        f"# {paper}: paper claims vs measured results",
        "",
        f"{title}" if title else "",
        "",
        f"Regenerate: `./reproduce.sh {paper}` (results profile: {', '.join(profiles) or 'n/a'}); "
        f"recheck only: `python -m common.repro.claims {paper}`.",
        "Measured values are means over seeds with a 95 % Student-t CI; how each kind is computed and what each "
        "verdict means is in `common/repro/claims.py`.",
        "",
        "Verdicts: " + ", ".join(f"{k} {n}" for k, n in counts.items()),
        "",
        "| claim | source | paper says | paper value | measured | verdict | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for v in verdicts:
        c = v.claim
        pv = "—" if c.paper_value is None else _fmt(c.paper_value)
        lines.append(
            f"| `{c.id}` | {_md_escape(c.source)} | {_md_escape(c.text)} | {pv} | {v.measured()} | **{v.verdict}** "
            f"| {_md_escape('; '.join(x for x in (v.note, c.note) if x))} |"
        )
    return "\n".join(lines) + "\n"


def verdict_frame(verdicts: list[Verdict]) -> pd.DataFrame:
    return pd.DataFrame([{
        "paper": v.paper, "claim": v.claim.id, "source": v.claim.source, "experiment": v.claim.experiment,
        "metric": v.claim.metric, "kind": v.claim.kind, "paper_value": v.claim.paper_value, "mean": v.mean,
        "ci_lo": v.lo, "ci_hi": v.hi, "n": v.n, "verdict": v.verdict, "note": v.note,
    } for v in verdicts])


def write_paper_report(paper: str, title: str, verdicts: list[Verdict], results_dir: Path) -> None:
    d = Path(results_dir) / paper
    atomic_write_bytes(d / "claims.md", paper_markdown(paper, title, verdicts).encode())
    atomic_write_bytes(d / "claims.csv", verdict_frame(verdicts).to_csv(index=False).encode())


def write_summary(all_verdicts: dict[str, list[Verdict]], results_dir: Path) -> None:
    lines = [
        "# Summary: every paper claim and its verdict",
        "",
        "Generated by `./reproduce.sh` (`python -m common.repro.claims`). Per-paper detail, CIs and the command "
        "that regenerates each row are in `results/<paper>/claims.md`.",
        "",
        "| paper | claim | paper value | measured | verdict |",
        "|---|---|---|---|---|",
    ]
    for paper, vs in sorted(all_verdicts.items()):
        for v in vs:
            pv = "—" if v.claim.paper_value is None else _fmt(v.claim.paper_value)
            lines.append(f"| [{paper}]({paper}/claims.md) | `{v.claim.id}` {_md_escape(v.claim.text)} | {pv} | "
                         f"{v.measured()} | **{v.verdict}** |")
    atomic_write_bytes(Path(results_dir) / "SUMMARY.md", ("\n".join(lines) + "\n").encode())


def check(papers: Sequence[str] | None = None, results_dir: Path | None = None, conf_dir: Path | None = None,
          quiet: bool = False) -> dict[str, list[Verdict]]:
    """Check the claims of ``papers`` (all by default), write their claims.md/csv and the summary of all."""
    import importlib

    from common.repro.config import compose, papers_in_conf

    cfg = compose([], conf_dir=conf_dir)
    results_dir = Path(results_dir or cfg.paths.results_dir)
    available = papers_in_conf(cfg.paths.conf_dir)
    wanted = list(papers) if papers else available
    everything: dict[str, list[Verdict]] = {}
    for paper in available:
        pcfg = compose([f"paper={paper}"], conf_dir=conf_dir).paper
        mod = importlib.import_module(pcfg.module)
        path = Path(mod.__file__).parent / pcfg.claims
        if not path.exists():
            continue
        verdicts = check_paper(paper, path, results_dir)
        everything[paper] = verdicts
        if paper in wanted:
            write_paper_report(paper, pcfg.title, verdicts, results_dir)
            if not quiet:
                for v in verdicts:
                    print(f"  {paper}/{v.claim.id}: {v.verdict}  {v.measured()}  {v.note}")
    write_summary(everything, results_dir)
    return everything


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("papers", nargs="*", help="paper keys (default: all)")
    ap.add_argument("--results-dir", type=Path, default=None)
    args = ap.parse_args(argv)
    check(args.papers or None, args.results_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
