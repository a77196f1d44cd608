"""Forest plots of a paper's counted claims for ``results/index.html``: inline SVG written here, no script, no image.

One row per counted claim (``headline``, ``secondary``) with a measured effect: the mean as a marker filled with its
verdict's colour (the page's badge colours, :data:`VERDICT_COLOURS`), hollow for NOT_TESTED (the estimate over cells
that failed their gates, not a test); its CI as a horizontal bar (none for a deterministic point, drawn as a
diamond); the paper's band as a grey box (value +- tolerance, a thin line at the value; "at least": from the lower
edge up; a ``bound`` claim: the side of the bound that satisfies it); the smallest effect that counts
(``min_effect``) or a non-inferiority floor as a dashed line; and the reference line: no effect (1 for ratios, 0 for
differences and percentages) or, for a bound claim, the bound.

Effects of different kinds and units share no scale, so each row has its own axis (logarithmic for a ratio, linear
otherwise), its ends labelled in the row's unit, with its reference value at the same x in every row (a third of the
way along): the reference lines make one vertical line down the plot, and an effect for the claim lies to its right
(for a bound claim: in the grey box).
SKIPPED and NOT_RUN claims, and any without a finite mean (a damaged result file), are listed under the plot, not
drawn.

The output is deterministic (the committed page is compared byte for byte with a rebuild): coordinates are written
with one decimal, labels with fixed formats.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from dataclasses import dataclass

from mlsys_repro.common.repro.claims.evaluate import Verdict, _fmt
from mlsys_repro.common.repro.claims.schema import COUNTED

# The verdict badge colours of the page (site.py builds its CSS from these) and of the plot's markers and badges.
VERDICT_COLOURS = {
    "REPRODUCED": "#c8f0c8", "PASS": "#c8f0c8", "DIRECTION_ONLY": "#fde9b0", "NOT_REPRODUCED": "#f6c6c6",
    "FAIL": "#f6c6c6", "INCONCLUSIVE": "#dcdcf4", "NOT_TESTED": "#e8d4f0", "SKIPPED": "#e6e6e6",
}
NOT_PLOTTED = ("SKIPPED", "NOT_RUN")  # no measurement: listed under the plot

WIDTH = 1150  # viewBox units; the SVG scales to the page's width
HEAD = 24  # header height
ROW = 30  # row height
MID = 15  # the row's bar, from its top
LEFT, RIGHT = 350.0, 740.0  # the plot area of every row
X0 = LEFT + (RIGHT - LEFT) / 3  # where every row puts its reference value (no effect, or the bound)
BADGE_X, BADGE_W = 790, 104
TEXT_X = 902
_HOLLOW = "#7b4f93"  # NOT_TESTED's outline: a darker shade of its badge colour
_BAND = "#d4d4d4"
_MAX_ID = 40  # longer claim ids are cut (the full id is in the row's tooltip)


def _e(x: object) -> str:
    return html.escape(str(x), quote=True)


def _c(x: float) -> str:
    """A coordinate: one decimal, never "-0.0"."""
    s = f"{x:.1f}"
    return "0.0" if s == "-0.0" else s


def _tick(x: float) -> str:
    """An axis end's label: three significant digits."""
    s = f"{x:.3g}"
    return "0" if s in ("-0", "0") or float(s) == 0 else s


def counted(verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The counted claims, headline before secondary, each class in the claims file's order."""
    return sorted((v for v in verdicts if v.claim.cls in COUNTED), key=lambda v: COUNTED.index(v.claim.cls))


def plotted(v: Verdict) -> bool:
    """Whether a claim gets a row: a measured (finite) mean and a verdict other than SKIPPED / NOT_RUN."""
    return v.verdict not in NOT_PLOTTED and math.isfinite(v.mean)


def reference(v: Verdict) -> tuple[float, str]:
    """The row's reference value and what it is: the bound of a bound claim, else no effect (1 or 0)."""
    c = v.claim
    if c.kind == "bound" and c.paper_value is not None:
        return float(c.paper_value), "bound"
    return c.null, "no effect"


def band(v: Verdict) -> tuple[float, float] | None:
    """The grey box: the paper's band (a bound claim: the side of the bound that satisfies it); ``None`` without a
    paper value (a ``min_effect`` is drawn as a dashed line instead)."""
    c = v.claim
    if c.paper_value is None:
        return None
    if c.kind == "bound":
        return (-math.inf, c.paper_value) if c.better == "lower" else (c.paper_value, math.inf)
    pv = c.paper_value
    w = c.tolerance if c.tolerance_abs else c.tolerance * abs(pv)
    return pv - w, math.inf if c.match == "at_least" else pv + w


def thresholds(v: Verdict) -> list[tuple[float, str]]:
    """Dashed lines: the smallest effect that counts, or the non-inferiority floor."""
    c = v.claim
    out = []
    if c.paper_value is None and c.min_effect is not None:
        out.append((c.min_effect, "min_effect"))
    if c.margin is not None:
        out.append((c.null - c.margin, "non-inferiority floor"))
    return out


def _has_ci(v: Verdict) -> bool:
    return not v.point and math.isfinite(v.lo) and math.isfinite(v.hi) and v.hi > v.lo


@dataclass(frozen=True)
class Axis:
    """A row's scale: ``value`` goes to ``X0 + (t(value) - t(ref)) * scale``, ``t`` the natural log for a ratio
    (no effect at 1, halving and doubling equally far from it) and the identity otherwise."""

    ref: float
    scale: float
    log: bool = False

    def t(self, value: float) -> float:
        return math.log(value) if self.log else value

    def x(self, value: float) -> float:
        """The x of ``value`` (infinities and values beyond the ends at the ends)."""
        if math.isinf(value):
            return RIGHT if value > 0 else LEFT
        if self.log and value <= 0:
            return LEFT
        return min(RIGHT, max(LEFT, X0 + (self.t(value) - self.t(self.ref)) * self.scale))

    def value(self, x: float) -> float:
        """The value at ``x`` (the labels of the row's ends)."""
        u = self.t(self.ref) + (x - X0) / self.scale
        return math.exp(u) if self.log else u


def axis(v: Verdict) -> Axis:
    """The row's scale: wide enough for the mean, its CI, the finite band edges, the paper's value and the thresholds,
    with 8 % to spare on each side of the reference; logarithmic for a ratio whose values are all positive."""
    ref = reference(v)[0]
    vals = [v.mean] + ([v.lo, v.hi] if _has_ci(v) else [])
    b = band(v)
    if b is not None:
        vals += [x for x in b if math.isfinite(x)]
        if v.claim.kind != "bound" and v.claim.paper_value is not None:
            vals.append(v.claim.paper_value)
    vals += [t for t, _ in thresholds(v)]
    log = v.claim.kind == "ratio" and ref > 0 and min(vals) > 0
    a = Axis(ref, 1.0, log)
    tv, tr = [a.t(x) for x in vals], a.t(ref)
    pos = max(0.0, max(tv) - tr) * 1.08
    neg = max(0.0, tr - min(tv)) * 1.08
    if pos == 0 and neg == 0:  # everything at the reference: a symmetric window of 10 % (or 1)
        pos = neg = 0.1 if log else abs(ref) * 0.1 or 1.0
    scale = min((RIGHT - X0) / pos if pos else math.inf, (X0 - LEFT) / neg if neg else math.inf)
    return Axis(ref, scale, log)


def _kind_label(v: Verdict, log: bool = False) -> str:
    c = v.claim
    unit = f" ({v.unit})" if v.unit else ""
    if c.kind == "ratio":
        return "ratio (×, log scale)" if log else "ratio (×)"
    if c.kind in ("pct_reduction", "pct_gain"):
        return f"{'reduction' if c.kind == 'pct_reduction' else 'gain'} (%)"
    if c.kind == "diff":
        return f"difference{unit}"
    if c.kind == "ordering":
        return f"ordering: worst difference{unit}"
    rel = "≤" if c.better == "lower" else "≥"
    return f"bound {rel} {_fmt(c.paper_value)}{unit}" if c.paper_value is not None else f"bound{unit}"


def _tooltip(v: Verdict) -> str:
    c = v.claim
    parts = [f"{c.id}: {c.text}" if c.text else c.id, f"{c.cls}, {_kind_label(v)}; measured {v.measured()}"]
    b = band(v)
    if c.paper_value is not None and b is not None:
        lo = "-inf" if math.isinf(b[0]) else _fmt(b[0])
        hi = "inf" if math.isinf(b[1]) else _fmt(b[1])
        parts.append(f"paper {_fmt(c.paper_value)}, {'satisfied in' if c.kind == 'bound' else 'band'} [{lo}, {hi}]")
    parts += [f"{label} {_fmt(t)}" for t, label in thresholds(v)]
    ref, what = reference(v)
    parts.append(f"vertical line: {what} ({_fmt(ref)})")
    ungated = f" (ungated: {v.ungated_shown})" if v.ungated and v.ungated != v.verdict else ""
    parts.append(f"verdict {v.shown}{ungated}")
    return "\n".join(parts)


def _row(v: Verdict, i: int, paper: str) -> list[str]:
    c = v.claim
    ax = axis(v)
    ref = ax.ref
    y = HEAD + i * ROW
    colour = VERDICT_COLOURS.get(v.shown, "#ffffff")
    hollow = v.verdict == "NOT_TESTED"
    out = [f'<g class="fp-row" data-claim="{_e(c.id)}" data-verdict="{_e(v.shown)}" data-kind="{_e(c.kind)}" '
           f'data-ref="{_e(_tick(ref))}" data-scale="{"log" if ax.log else "linear"}" transform="translate(0,{y})">'
           f"<title>{_e(_tooltip(v))}</title>"]
    if i % 2:
        out.append(f'<rect x="0" y="0" width="{WIDTH}" height="{ROW}" fill="#f7f7f7"/>')
    ident = c.id if len(c.id) <= _MAX_ID else c.id[:_MAX_ID - 1] + "…"
    sub = f"{c.cls} · {_kind_label(v, ax.log)}"
    ungated = f"ungated: {v.ungated_shown}" if v.ungated and v.ungated != v.verdict else ""
    out.append(f'<a href="#{_e(paper)}-{_e(c.experiment)}"><text x="4" y="13" font-size="11.5" fill="#124">'
               f"{_e(ident)}</text></a>"
               f'<text x="4" y="25" font-size="9" fill="#666">{_e(sub)}</text>'
               f'<text x="{_c(LEFT - 6)}" y="{MID + 3}" font-size="9" fill="#888" text-anchor="end">'
               f"{_e(_tick(ax.value(LEFT)))}</text>"
               f'<text x="{_c(RIGHT + 6)}" y="{MID + 3}" font-size="9" fill="#888">'
               f"{_e(_tick(ax.value(RIGHT)))}</text>"
               f'<line x1="{_c(LEFT)}" y1="{MID}" x2="{_c(RIGHT)}" y2="{MID}" stroke="#e2e2e2"/>')
    b = band(v)
    if b is not None:
        x1, x2 = ax.x(b[0]), ax.x(b[1])
        out.append(f'<rect class="fp-band" x="{_c(x1)}" y="5" width="{_c(max(x2 - x1, 1.0))}" height="20" '
                   f'fill="{_BAND}" stroke="#aaa" stroke-width="0.8"/>')
        if c.kind != "bound":
            xp = ax.x(float(c.paper_value))  # type: ignore[arg-type]
            out.append(f'<line class="fp-paper" x1="{_c(xp)}" y1="5" x2="{_c(xp)}" y2="25" stroke="#888"/>')
    for t, label in thresholds(v):
        xt = ax.x(t)
        out.append(f'<line class="fp-min" data-what="{_e(label)}" x1="{_c(xt)}" y1="4" x2="{_c(xt)}" y2="26" '
                   'stroke="#666" stroke-dasharray="3 2"/>')
    out.append(f'<line class="fp-null" data-value="{_e(_tick(ref))}" x1="{_c(X0)}" y1="0" x2="{_c(X0)}" '
               f'y2="{ROW}" stroke="#444" stroke-width="1.2"/>')
    xm = ax.x(v.mean)
    if _has_ci(v):
        xl, xh = ax.x(v.lo), ax.x(v.hi)
        out.append(f'<line class="fp-ci" x1="{_c(xl)}" y1="{MID}" x2="{_c(xh)}" y2="{MID}" stroke="#222" '
                   f'stroke-width="2"/><path d="M{_c(xl)} {MID - 4}V{MID + 4}M{_c(xh)} {MID - 4}V{MID + 4}" '
                   'stroke="#222" stroke-width="1.5"/>')
    fill, stroke, sw = ("#fff", _HOLLOW, "2") if hollow else (colour, "#222", "1.2")
    cls = "fp-mean fp-hollow" if hollow else "fp-mean"
    if v.point:  # a deterministic value: a diamond, no CI
        out.append(f'<path class="{cls} fp-point" data-x="{_c(xm)}" d="M{_c(xm)} {MID - 6}L{_c(xm + 6)} {MID}'
                   f'L{_c(xm)} {MID + 6}L{_c(xm - 6)} {MID}Z" fill="{fill}" stroke="{stroke}" stroke-width="{sw}"/>')
    else:
        out.append(f'<circle class="{cls}" data-x="{_c(xm)}" cx="{_c(xm)}" cy="{MID}" r="5.5" fill="{fill}" '
                   f'stroke="{stroke}" stroke-width="{sw}"/>')
    dash = f' stroke="{_HOLLOW}" stroke-dasharray="3 2"' if hollow else ""
    out.append(f'<rect class="fp-badge" x="{BADGE_X}" y="6" width="{BADGE_W}" height="18" rx="3" fill="{colour}"'
               f'{dash}/><text x="{BADGE_X + BADGE_W // 2}" y="{MID + 4}" font-size="9.5" font-weight="600" '
               f'text-anchor="middle">{_e(v.shown)}</text>')
    if ungated:  # the measured line, and under it the verdict over every cell
        out.append(f'<text x="{TEXT_X}" y="13" font-size="10">{_e(v.measured())}</text>'
                   f'<text x="{TEXT_X}" y="25" font-size="9" fill="#666">{_e(ungated)}</text>')
    else:
        out.append(f'<text x="{TEXT_X}" y="{MID + 4}" font-size="10">{_e(v.measured())}</text>')
    out.append("</g>")
    return out


def forest_svg(verdicts: Sequence[Verdict], paper: str) -> str:
    """The forest plot of the plotted counted claims of ``verdicts`` (``""`` when none has a measured effect)."""
    rows = [v for v in counted(verdicts) if plotted(v)]
    if not rows:
        return ""
    height = HEAD + ROW * len(rows) + 4
    out = [f'<svg class="fp" viewBox="0 0 {WIDTH} {height}" role="img" '
           f'aria-label="Forest plot of the counted claims of {_e(paper)}">',
           f'<text x="4" y="15" font-size="10" fill="#444" font-weight="600">claim</text>'
           f'<text x="{_c(X0)}" y="15" font-size="10" fill="#444" text-anchor="middle">no effect (or bound)</text>'
           f'<text x="{_c(RIGHT)}" y="15" font-size="10" fill="#444" text-anchor="end">effect for the claim →</text>'
           f'<text x="{BADGE_X}" y="15" font-size="10" fill="#444" font-weight="600">verdict</text>'
           f'<text x="{TEXT_X}" y="15" font-size="10" fill="#444" font-weight="600">measured: mean [CI] (n)</text>']
    for i, v in enumerate(rows):
        out += _row(v, i, paper)
    out.append("</svg>")
    return "".join(out)


LEGEND = (
    "One row per counted claim, each on its own scale (logarithmic for ratios; its ends labelled in the claim's "
    "unit), with no effect (1 for ratios, 0 for differences and percentages) or, for a bound claim, the bound on the "
    "solid vertical line. "
    "Marker: the measured mean, in its verdict's colour (diamond: a deterministic value, no CI); bar: its CI (the "
    "level under “measured”); grey box: the paper's band (its value ± tolerance, the thin line at its value; “at "
    "least”: from the lower edge up; a bound: the side that satisfies it); dashed line: the smallest effect that "
    "counts (min_effect) or a non-inferiority floor; hollow marker: NOT_TESTED (every compared cell failed its "
    "validity gates: the ungated estimate, not a test). Hover a row for its numbers; its name links to its experiment."
)


def forest_html(verdicts: Sequence[Verdict], paper: str) -> str:
    """The paper section's forest plot: an open ``<details id="<paper>-forest">`` with the SVG, its legend and the
    counted claims that have no measured effect (SKIPPED, NOT_RUN, a damaged result file) listed by name."""
    mine = counted(verdicts)
    rest = [v for v in mine if not plotted(v)]
    summary = (f"Forest plot of the {len(mine)} counted claim{'' if len(mine) == 1 else 's'} (headline, secondary)"
               if mine else "Forest plot: no counted claims")
    out = [f'<details class="forest" id="{_e(paper)}-forest" open><summary>{_e(summary)}</summary>']
    svg = forest_svg(verdicts, paper)
    if svg:
        out += [svg, f'<p class="muted">{_e(LEGEND)}</p>']
    if rest:
        items = "; ".join(
            f'<span class="fp-unplotted" data-claim="{_e(v.claim.id)}" title="{_e(v.note)}">'
            f'<a href="#{_e(paper)}-{_e(v.claim.experiment)}"><code>{_e(v.claim.id)}</code></a> '
            f'<span class="badge {_e(v.shown)}">{_e(v.shown)}</span></span>' for v in rest)
        out.append(f"<p>Not plotted (no measured effect): {items}</p>")
    out.append("</details>")
    return "".join(out)
