"""Reports of verdicts: ``results/<paper>/claims.md`` + ``claims.csv`` and ``results/SUMMARY.md``.

Headline and secondary claims are counted separately; checks (accounting, analytic and sanity items) get their own
table with PASS / FAIL and never enter the reproduction counts. Every row shows its source, profile, n and whether
the result file behind it is fresh (see :mod:`mlsys_repro.common.repro.freshness`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from mlsys_repro.common.repro.claims.evaluate import VERDICTS, Verdict, _fmt
from mlsys_repro.common.repro.claims.schema import CLASSES
from mlsys_repro.common.repro.results import atomic_write_bytes

CLASS_TITLES = {
    "headline": "Headline claims (the abstract's numbers)",
    "secondary": "Secondary claims (our reading of the paper's other statements)",
    "check": "Checks (accounting, analytic and sanity items: true by construction or bookkeeping, not reproductions)",
}
VERDICT_MEANING = (
    "REPRODUCED = the paper's effect at the paper's size (95 % CI excludes no effect and overlaps the claimed "
    "band); DIRECTION_ONLY = same direction, clearly different size; NOT_REPRODUCED = the claimed effect is shown "
    "absent; INCONCLUSIVE = this study cannot tell (CI too wide, a failed validity gate, or censoring); SKIPPED = "
    "not measurable here. Rules: `mlsys_repro/common/repro/claims/evaluate.py`."
)


def _md(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def counts(verdicts: Sequence[Verdict], cls: str) -> dict[str, int]:
    """Number of each shown verdict among the claims of class ``cls``."""
    keys = ("PASS", "FAIL", "INCONCLUSIVE", "SKIPPED") if cls == "check" else VERDICTS
    return {k: sum(v.shown == k for v in verdicts if v.claim.cls == cls) for k in keys}


def _counts_line(verdicts: Sequence[Verdict]) -> list[str]:
    out = []
    for cls in CLASSES:
        c = counts(verdicts, cls)
        if sum(c.values()):
            out.append(f"- {cls}: " + ", ".join(f"{k} {n}" for k, n in c.items()))
    return out


def _row(v: Verdict, freshness: Mapping[str, str], paper_link: bool) -> str:
    c = v.claim
    pv = "—" if c.paper_value is None else _fmt(c.paper_value)
    fr = freshness.get(c.experiment, "?")
    head = f"| [{v.paper}]({v.paper}/claims.md) " if paper_link else ""
    return (f"{head}| `{c.id}` {_md(c.text)} | {_md(c.source)} | {pv} | {v.measured()} | {v.profiles or '—'} "
            f"| {_md(fr)} | **{v.shown}** |")


def paper_markdown(paper: str, title: str, verdicts: list[Verdict], freshness: Mapping[str, str] | None = None) -> str:
    freshness = freshness or {}
    lines = [
        f"# {paper}: paper claims vs measured results",
        "",
        title,
        "",
        f"Regenerate: `./reproduce.sh {paper}`; recheck only: `python -m mlsys_repro.common.repro.claims {paper}`.",
        "Measured values are means over seeds with a 95 % Student-t CI (\"up to\" claims: Bonferroni-corrected, "
        "level shown). " + VERDICT_MEANING,
        "",
        *_counts_line(verdicts),
    ]
    for cls in CLASSES:
        vs = [v for v in verdicts if v.claim.cls == cls]
        if not vs:
            continue
        lines += ["", f"## {CLASS_TITLES[cls]}", "",
                  "| claim | source | paper value | measured | profile | result file | verdict | note |",
                  "|---|---|---|---|---|---|---|---|"]
        for v in vs:
            lines.append(_row(v, freshness, False) + f" {_md(v.note)} |")
    return "\n".join(lines) + "\n"


def verdict_frame(verdicts: list[Verdict]) -> pd.DataFrame:
    """One row per claim: the machine-readable verdict table."""
    return pd.DataFrame([{
        "paper": v.paper, "claim": v.claim.id, "class": v.claim.cls, "source": v.claim.source,
        "experiment": v.claim.experiment, "metric": v.claim.metric, "kind": v.claim.kind,
        "paper_value": v.claim.paper_value, "verdict": v.shown, "mean": v.mean, "lo": v.lo, "hi": v.hi,
        "ci_level": v.level, "n": v.n, "deterministic": v.point, "profile": v.profiles, "note": v.note,
    } for v in verdicts], columns=["paper", "claim", "class", "source", "experiment", "metric", "kind",
                                   "paper_value", "verdict", "mean", "lo", "hi", "ci_level", "n", "deterministic",
                                   "profile", "note"])


def write_paper_report(paper: str, title: str, verdicts: list[Verdict], results_dir: Path,
                       freshness: Mapping[str, str] | None = None) -> None:
    d = Path(results_dir) / paper
    atomic_write_bytes(d / "claims.md", paper_markdown(paper, title, verdicts, freshness).encode())
    atomic_write_bytes(d / "claims.csv", verdict_frame(verdicts).to_csv(index=False).encode())


def summary_markdown(all_verdicts: Mapping[str, list[Verdict]],
                     freshness: Mapping[str, Mapping[str, str]] | None = None) -> str:
    freshness = freshness or {}
    everything = [v for vs in all_verdicts.values() for v in vs]
    stale = sorted({f"{p}/{e}" for p, fr in freshness.items() for e, s in fr.items() if not s.startswith("fresh")})
    lines = [
        "# Summary: every paper claim and its verdict",
        "",
        "Generated by `./reproduce.sh` (`python -m mlsys_repro.common.repro.claims`). Per-paper detail, notes and the "
        "command that regenerates each row are in `results/<paper>/claims.md`.",
        "",
        VERDICT_MEANING,
        "",
        "Counts:",
        *_counts_line(everything),
        "",
        ("Result files not fresh (their verdicts are from older code or config; `./reproduce.sh --status` lists "
         f"why): {', '.join(stale)}" if stale else "Every result file is fresh (`./reproduce.sh --status`)."),
    ]
    for cls in CLASSES:
        rows = [(p, v) for p, vs in sorted(all_verdicts.items()) for v in vs if v.claim.cls == cls]
        if not rows:
            continue
        lines += ["", f"## {CLASS_TITLES[cls]}", "",
                  "| paper | claim | source | paper value | measured | profile | result file | verdict |",
                  "|---|---|---|---|---|---|---|---|"]
        lines += [_row(v, freshness.get(p, {}), True) for p, v in rows]
    return "\n".join(lines) + "\n"


def write_summary(all_verdicts: Mapping[str, list[Verdict]], results_dir: Path,
                  freshness: Mapping[str, Mapping[str, str]] | None = None) -> None:
    atomic_write_bytes(Path(results_dir) / "SUMMARY.md", summary_markdown(all_verdicts, freshness).encode())
