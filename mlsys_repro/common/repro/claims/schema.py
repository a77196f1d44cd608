"""The claims file format (``mlsys_repro/papers/<key>/claims.yaml``): parsing and validation into :class:`Claim`.

A claims file is ``{paper: key, claims: [...]}``. Each claim names one ``metric`` of one ``experiment`` and compares
the rows of ``ours`` with those of ``baseline`` (a policy name, or a mapping of column filters). Fields:

required   ``id``, ``class`` (see :data:`CLASSES`), ``source``, ``experiment``, ``metric``, ``ours``, ``kind``
           (see :mod:`mlsys_repro.common.repro.claims.evaluate`), and ``baseline`` (a list for ``ordering``, none
           for ``bound``); ``regime`` (the setting the number holds in) for every counted claim that is measured
magnitude  ``paper_value`` (the paper's number, in the effect's unit), ``tolerance`` (relative, or ``{abs: x}``;
           default :data:`DEFAULT_TOLERANCE`; a claim that overrides it says why in ``tolerance_why``), ``match``
           (``point``, or ``at_least`` for "at least X"), ``min_effect`` + ``min_effect_why`` (the smallest effect
           that counts as the claim holding, and why: required of every directional claim without a paper value or
           a margin, except deterministic checks; it lets a precise null read NOT_REPRODUCED and keeps a trivial
           effect from reading REPRODUCED)
design     ``better`` (lower | higher: which direction of the raw metric is good), ``where`` (row filters),
           ``over`` + ``aggregate`` (mean: "on average" over a swept column, per-seed mean; max: "up to", the best
           condition with Bonferroni-corrected CIs; min: "in every condition", the worst), ``margin``
           (non-inferiority), ``deterministic`` (the compared numbers are computed, not sampled: one run is a
           point, and constants repeated over seeds count once)
validity   ``requires`` (0/1 gate metrics from the closed vocabulary :data:`mlsys_repro.common.repro.gates.GATES`,
           judged per cell), ``gate_fraction`` (share of a cell's runs that must pass each gate; default 0.8),
           ``reached`` (a 0/1 metric such as ``reached_target``: time-to-target censoring, checked on both sides)
history    ``revised``: one entry per change of encoding, metric, regime, baseline, gate or min_effect made after
           the claim's first committed result, ``{date, change, before[, commit]}`` with ``before`` the verdict it
           had then (or ``none``); reports show them beside the verdict
other      ``text``, ``note``, ``skip`` (why it cannot be measured here: SKIPPED)

Classes: ``headline`` (the abstract's numbers) and ``secondary`` (the paper's other statements) are counted, one
claim per number of the paper (:func:`parse_claims` refuses two counted claims with the same paper value);
``sensitivity`` (another reading of a counted number, or the comparison against a weaker configuration of a
baseline), ``extension`` (our own variants, stress tests and premises) and ``check`` (accounting, analytic and
sanity items) are shown but never counted. ``source`` starts with one of :data:`SOURCES`; ``reconstruction`` marks
our reading where the paper itself is not known.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from mlsys_repro.common.repro.errors import ClaimsSchemaError, did_you_mean
from mlsys_repro.common.repro.gates import DEFAULT_FRACTION, GATES

KINDS = ("ratio", "pct_reduction", "pct_gain", "diff", "ordering", "bound")
CLASSES = ("headline", "secondary", "sensitivity", "extension", "check")
COUNTED = ("headline", "secondary")  # the classes that count as reproductions of the paper
REVISION_BEFORE = ("REPRODUCED", "DIRECTION_ONLY", "NOT_REPRODUCED", "INCONCLUSIVE", "NOT_TESTED", "SKIPPED", "PASS",
                   "FAIL", "none")
SOURCES = ("abstract", "table", "figure", "text", "notes", "reconstruction")
DEFAULT_TOLERANCE = 0.10  # relative half-width of the paper's band, for every claim that does not say otherwise
_FIELDS = {
    "id", "class", "source", "text", "experiment", "metric", "ours", "baseline", "kind", "better", "paper_value",
    "tolerance", "tolerance_why", "match", "min_effect", "where", "over", "aggregate", "skip", "note", "reached",
    "margin", "requires", "deterministic", "min_effect_why", "regime", "revised", "gate_fraction",
}


@dataclass(frozen=True)
class Revision:
    """A change to a claim made after its first committed result, and the verdict it had before."""

    date: str
    change: str
    before: str
    commit: str = ""

    def short(self) -> str:
        return f"{self.date}: {self.change} (before: {self.before})"


@dataclass(frozen=True)
class Claim:
    id: str
    cls: str
    source: str
    text: str
    experiment: str
    metric: str
    ours: dict[str, Any]
    baseline: Any  # dict filter; list of dict filters for ordering; None for bound
    kind: str
    better: str
    paper_value: float | None = None
    tolerance: float = DEFAULT_TOLERANCE
    tolerance_abs: bool = False
    match: str = "point"
    min_effect: float | None = None
    where: dict[str, Any] = field(default_factory=dict)
    over: str | None = None
    aggregate: str = "mean"
    skip: str | None = None
    note: str = ""
    reached: str | None = None
    margin: float | None = None
    requires: tuple[str, ...] = ()
    deterministic: bool = False
    min_effect_why: str = ""
    regime: str = ""
    revised: tuple[Revision, ...] = ()
    gate_fraction: float = DEFAULT_FRACTION

    @property
    def counted(self) -> bool:
        return self.cls in COUNTED

    @property
    def null(self) -> float:
        """The effect value that means "no effect"."""
        return 1.0 if self.kind == "ratio" else 0.0

    def band(self) -> tuple[float, float] | None:
        """The interval of effects that count as the claimed size: the paper's value +- tolerance (``at_least``:
        from its lower edge up), or ``[min_effect, inf)``; ``None`` when the claim states neither."""
        if self.paper_value is not None:
            pv = self.paper_value
            w = (self.tolerance if self.tolerance_abs else self.tolerance * abs(pv)) * (1 + 1e-9)
            return (pv - w, math.inf if self.match == "at_least" else pv + w)
        if self.min_effect is not None:
            return (self.min_effect, math.inf)
        return None


def _filter(v: Any, where: str) -> dict[str, Any]:
    if isinstance(v, str):
        return {"policy": v}
    if isinstance(v, Mapping) and v:
        return dict(v)
    raise ClaimsSchemaError(f"{where}: expected a policy name or a mapping of column filters, got {v!r}")


def _number(v: Any, name: str, where: str) -> float | None:
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ClaimsSchemaError(f"{where}: {name} must be a finite number or null, got {v!r}")
    return float(v)


def _beyond_null(value: float, kind: str, name: str, where: str) -> None:
    null = 1.0 if kind == "ratio" else 0.0
    if not value > null:
        raise ClaimsSchemaError(f"{where}: {name} {value!r} is not an effect in the claimed direction (no effect is "
                                f"{null:g}; effects are oriented so that larger = the claim)")


def parse_claim(c: Any, where: str) -> Claim:
    """Validate one claim mapping (``where`` prefixes every error)."""
    if not isinstance(c, Mapping):
        raise ClaimsSchemaError(f"{where}: expected a mapping, got {type(c).__name__}")
    unknown = set(c) - _FIELDS
    if unknown:
        hint = " ('match: at_most' was removed: an 'up to X' claim is a point claim on the best condition)" \
            if "match" in unknown else ""
        raise ClaimsSchemaError(f"{where}: unknown fields {sorted(unknown)}{hint}")
    for req in ("id", "class", "source", "experiment", "metric", "ours", "kind"):
        if req not in c:
            raise ClaimsSchemaError(f"{where}: missing field {req!r}")
    cid = str(c["id"])
    where = f"{where} ({cid!r})"
    kind = c["kind"]
    if kind not in KINDS:
        raise ClaimsSchemaError(f"{where}: kind must be one of {KINDS}, got {kind!r}")
    cls = c["class"]
    if cls not in CLASSES:
        raise ClaimsSchemaError(f"{where}: class must be one of {CLASSES}, got {cls!r}")
    if str(c["source"]).split()[0].lower().rstrip(":,") not in SOURCES:
        raise ClaimsSchemaError(f"{where}: source must start with one of {SOURCES}, got {c['source']!r}")
    better = c.get("better", "higher" if kind == "pct_gain" else "lower")
    if better not in ("lower", "higher"):
        raise ClaimsSchemaError(f"{where}: better must be 'lower' or 'higher', got {better!r}")
    if kind == "pct_reduction" and better != "lower":
        raise ClaimsSchemaError(f"{where}: pct_reduction needs a lower-is-better metric")
    if kind == "pct_gain" and better != "higher":
        raise ClaimsSchemaError(f"{where}: pct_gain needs a higher-is-better metric")
    pv = _number(c.get("paper_value"), "paper_value", where)
    min_effect = _number(c.get("min_effect"), "min_effect", where)
    margin = _number(c.get("margin"), "margin", where)
    if kind == "bound":
        if pv is None:
            raise ClaimsSchemaError(f"{where}: a bound claim needs paper_value (the bound)")
        if min_effect is not None or margin is not None:
            raise ClaimsSchemaError(f"{where}: a bound claim takes neither min_effect nor margin")
    else:
        if pv is not None and min_effect is not None:
            raise ClaimsSchemaError(f"{where}: give paper_value or min_effect, not both")
        if pv is not None:
            _beyond_null(pv, kind, "paper_value", where)
        if min_effect is not None:
            _beyond_null(min_effect, kind, "min_effect", where)
    if kind == "ordering" and pv is not None:
        raise ClaimsSchemaError(f"{where}: an ordering claim has no paper_value (use min_effect)")
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
    tol = c.get("tolerance", DEFAULT_TOLERANCE)
    tol_abs = False
    if isinstance(tol, Mapping):
        if set(tol) == {"abs"}:
            tol, tol_abs = tol["abs"], True
        elif set(tol) == {"rel"}:
            tol = tol["rel"]
        else:
            raise ClaimsSchemaError(f"{where}: tolerance must be a number, {{rel: x}} or {{abs: x}}")
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or tol < 0:
        raise ClaimsSchemaError(f"{where}: tolerance must be a non-negative number, got {tol!r}")
    if (tol_abs or float(tol) != DEFAULT_TOLERANCE) and not str(c.get("tolerance_why", "")).strip():
        raise ClaimsSchemaError(f"{where}: tolerance differs from the default {DEFAULT_TOLERANCE}: say why in "
                                "'tolerance_why'")
    match = c.get("match", "point")
    if match not in ("point", "at_least"):
        raise ClaimsSchemaError(f"{where}: match must be 'point' or 'at_least', got {match!r} ('at_most' was "
                                "removed: 'up to X' is a point claim on the best condition)")
    if match != "point" and pv is None:
        raise ClaimsSchemaError(f"{where}: match {match!r} needs a paper_value")
    agg = c.get("aggregate", "mean")
    if agg not in ("mean", "max", "min"):
        raise ClaimsSchemaError(f"{where}: aggregate must be mean, max or min")
    if agg != "mean" and not c.get("over"):
        raise ClaimsSchemaError(f"{where}: aggregate {agg!r} needs an 'over' column")
    w = c.get("where") or {}
    if not isinstance(w, Mapping):
        raise ClaimsSchemaError(f"{where}: where must be a mapping")
    if margin is not None:
        if kind in ("ordering", "bound") or pv is not None or min_effect is not None:
            raise ClaimsSchemaError(f"{where}: margin (non-inferiority) needs a diff/ratio/pct kind and neither "
                                    "paper_value nor min_effect")
        if not margin > 0:
            raise ClaimsSchemaError(f"{where}: margin must be a positive number, got {margin!r}")
    req = c.get("requires") or []
    if isinstance(req, str):
        req = [req]
    if not isinstance(req, list) or not all(isinstance(r, str) and r for r in req):
        raise ClaimsSchemaError(f"{where}: requires must be a list of gate metric names, got {req!r}")
    bad_gates = [r for r in req if r not in GATES]
    if bad_gates:
        raise ClaimsSchemaError(f"{where}: requires: {did_you_mean('gate', bad_gates, sorted(GATES))} (the closed "
                                "vocabulary is mlsys_repro/common/repro/gates.py)")
    frac = c.get("gate_fraction", DEFAULT_FRACTION)
    if isinstance(frac, bool) or not isinstance(frac, (int, float)) or not 0 < frac <= 1:
        raise ClaimsSchemaError(f"{where}: gate_fraction must be a number in (0, 1], got {frac!r}")
    if "gate_fraction" in c and not req:
        raise ClaimsSchemaError(f"{where}: gate_fraction without requires")
    det = c.get("deterministic", False)
    if not isinstance(det, bool):
        raise ClaimsSchemaError(f"{where}: deterministic must be true or false, got {det!r}")
    skip = c.get("skip")
    why = str(c.get("min_effect_why") or "").strip()
    if min_effect is not None and not why:
        raise ClaimsSchemaError(f"{where}: min_effect needs a one-line reason in 'min_effect_why'")
    if why and min_effect is None:
        raise ClaimsSchemaError(f"{where}: min_effect_why without min_effect")
    directional = kind != "bound" and pv is None and margin is None
    if directional and min_effect is None and not skip and not (cls == "check" and det):
        raise ClaimsSchemaError(f"{where}: a directional claim (no paper_value, no margin) needs min_effect, the "
                                "smallest effect that counts, with min_effect_why")
    regime = str(c.get("regime") or "").strip()
    if cls in COUNTED and not skip and not regime:
        raise ClaimsSchemaError(f"{where}: a counted claim names its regime (the setting its number holds in)")
    revised = _revisions(c.get("revised"), where)
    return Claim(
        id=cid, cls=cls, source=str(c["source"]), text=str(c.get("text", "")), experiment=str(c["experiment"]),
        metric=str(c["metric"]), ours=_filter(c["ours"], where), baseline=baseline, kind=kind, better=better,
        paper_value=pv, tolerance=float(tol), tolerance_abs=tol_abs, match=match, min_effect=min_effect,
        where=dict(w), over=c.get("over"), aggregate=agg, skip=skip,
        reached=str(c["reached"]) if c.get("reached") else None, margin=margin, requires=tuple(req),
        deterministic=det, note=str(c.get("note", "")), min_effect_why=why, regime=regime, revised=revised,
        gate_fraction=float(frac),
    )


def _revisions(raw: Any, where: str) -> tuple[Revision, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        raise ClaimsSchemaError(f"{where}: revised must be a list of {{date, change, before[, commit]}}")
    out = []
    for i, r in enumerate(raw):
        at = f"{where}: revised[{i}]"
        if not isinstance(r, Mapping) or not {"date", "change", "before"} <= set(r) or set(r) - {
                "date", "change", "before", "commit"}:
            raise ClaimsSchemaError(f"{at}: expected a mapping with date, change, before (and optionally commit)")
        date = str(r["date"])
        if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
            raise ClaimsSchemaError(f"{at}: date must be YYYY-MM-DD, got {date!r}")
        change = str(r["change"] or "").strip()
        if not change:
            raise ClaimsSchemaError(f"{at}: change must say what changed")
        before = str(r["before"])
        if before not in REVISION_BEFORE:
            raise ClaimsSchemaError(f"{at}: before must be one of {REVISION_BEFORE}, got {before!r}")
        out.append(Revision(date, change, before, str(r.get("commit") or "")))
    return tuple(out)


def parse_claims(doc: Any, source: str = "claims.yaml") -> list[Claim]:
    """Parse and validate a claims document (``{paper: key, claims: [...]}`` or a bare list)."""
    items = doc.get("claims") if isinstance(doc, Mapping) else doc
    if not isinstance(items, list) or not items:
        raise ClaimsSchemaError(f"{source}: expected a non-empty list under 'claims'")
    out: list[Claim] = []
    seen: set[str] = set()
    for i, c in enumerate(items):
        cl = parse_claim(c, f"{source}: claim #{i + 1}")
        if cl.id in seen:
            raise ClaimsSchemaError(f"{source}: claim {cl.id!r}: duplicate id")
        seen.add(cl.id)
        out.append(cl)
    numbers: dict[float, str] = {}
    for cl in out:
        if cl.counted and cl.paper_value is not None and not cl.skip:
            if cl.paper_value in numbers:
                raise ClaimsSchemaError(
                    f"{source}: claims {numbers[cl.paper_value]!r} and {cl.id!r} both count the paper's number "
                    f"{cl.paper_value:g}: one counted claim per number; make the other class 'sensitivity'")
            numbers[cl.paper_value] = cl.id
    return out


def load_claims(path: Path) -> tuple[str, list[Claim]]:
    """``(paper key, claims)`` of a claims file; the key defaults to the file's folder name."""
    path = Path(path)
    try:
        doc = yaml.safe_load(path.read_text())
    except OSError as e:
        raise ClaimsSchemaError(f"{path}: cannot read: {e.strerror or e}") from None
    except yaml.YAMLError as e:
        raise ClaimsSchemaError(f"{path}: not valid YAML: {e}") from None
    paper = doc.get("paper", path.parent.name) if isinstance(doc, Mapping) else path.parent.name
    return str(paper), parse_claims(doc, str(path))
