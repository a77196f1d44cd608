"""Reports of verdicts: ``results/<paper>/claims.md`` + ``claims.csv`` and ``results/SUMMARY.md``.

Headline and secondary claims are the counted ones; sensitivity readings, extensions and checks (accounting,
analytic and sanity items, PASS / FAIL) get tables and counts of their own and never enter the reproduction counts.
NOT_TESTED (every compared cell failed its validity gates) is counted apart from INCONCLUSIVE. Every row shows the
regime its number holds in, the point value against the paper's, the ungated verdict where gates dropped cells, the
revisions made after results were seen (with the verdict before), its source, profile, n and whether the result
file behind it is fresh (see :mod:`mlsys_repro.common.repro.freshness`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from mlsys_repro.common.repro.claims.evaluate import VERDICTS, Verdict, _fmt
from mlsys_repro.common.repro.claims.schema import CLASSES, COUNTED
from mlsys_repro.common.repro.results import atomic_write_bytes

CLASS_TITLES = {
    "headline": "Headline claims (the abstract's numbers; counted)",
    "secondary": "Secondary claims (the paper's other statements, one per number; counted)",
    "sensitivity": "Sensitivity readings (another reading of a counted number, or a weaker baseline configuration; "
                   "not counted)",
    "extension": "Extensions (our own variants, stress tests and premises; not counted)",
    "check": "Checks (accounting, analytic and sanity items: true by construction or bookkeeping, not reproductions)",
}
VERDICT_MEANING = (
    "REPRODUCED = the paper's effect at the paper's size (the CI excludes no effect on the claimed side and the "
    "mean lies in the claimed band, or clears the claim's stated smallest effect); DIRECTION_ONLY = significant, "
    "mean outside the band (\"size differs\": the 95 % CI excludes the band; \"size not pinned down\": it overlaps); "
    "NOT_REPRODUCED = significant the wrong way, a CI that includes no effect and excludes the band, or an effect "
    "smaller than the smallest that counts; INCONCLUSIVE = this study cannot tell (CI too wide, censoring, a gate "
    "not recorded, a damaged result file); NOT_TESTED = our implementation failed its validity gates in every "
    "compared cell (the ungated verdict is shown beside it); SKIPPED = not measurable here; NOT_RUN = no result file "
    "for its experiment in this folder. Gates are judged per "
    "(policy, condition) cell: a cell counts when >= 80 % of its runs pass. Rules: "
    "`mlsys_repro/common/repro/claims/evaluate.py`; gates: `mlsys_repro/common/repro/gates.py`."
)


def _md(s: str) -> str:
    return s.replace("|", "\\|").replace("\n", " ")


def counts(verdicts: Sequence[Verdict], cls: str) -> dict[str, int]:
    """Number of each shown verdict among the claims of class ``cls``."""
    keys = ("PASS", "FAIL", "INCONCLUSIVE", "NOT_TESTED", "SKIPPED", "NOT_RUN") if cls == "check" else VERDICTS
    return {k: sum(v.shown == k for v in verdicts if v.claim.cls == cls) for k in keys}


def _counts_line(verdicts: Sequence[Verdict]) -> list[str]:
    out = []
    for cls in CLASSES:
        c = counts(verdicts, cls)
        if sum(c.values()):
            tag = " (counted)" if cls in COUNTED else " (not counted)"
            out.append(f"- {cls}{tag}: " + ", ".join(f"{k} {n}" for k, n in c.items()))
    return out


def revisions(v: Verdict) -> str:
    """The claim's revisions after results were seen, each with the verdict before it ("" if none)."""
    return "; ".join(r.short() for r in v.claim.revised)


def _row(v: Verdict, freshness: Mapping[str, str], paper_link: bool) -> str:
    c = v.claim
    pv = "—" if c.paper_value is None else _fmt(c.paper_value)
    if c.paper_value is None and c.min_effect is not None:
        pv = f"≥ {_fmt(c.min_effect)} (min_effect)"
    fr = freshness.get(c.experiment, "?")
    head = f"| [{v.paper}]({v.paper}/claims.md) " if paper_link else ""
    ungated = v.ungated_shown if v.ungated and v.ungated != v.verdict else "—"
    before = "; ".join(f"{r.date}: was {r.before}" for r in c.revised) or "—"
    return (f"{head}| `{c.id}` {_md(c.text)} | {_md(c.regime) or '—'} | {pv} | {v.measured()} | **{v.shown}** "
            f"| {ungated} | {_md(before)} | {_md(c.source)} | {v.profiles or '—'} | {_md(fr)} |")


_HEADER = ("| claim | regime | paper | ours [95 % CI] | verdict | ungated | revised after results | source | profile "
           "| result file |")
_RULE = "|---|---|---|---|---|---|---|---|---|---|"


def run_args(profile: str = "default", results_dir: Path | None = None, default_dir: Path | None = None) -> str:
    """The options a regenerate command needs to rerun into this folder with this profile ("" for the defaults)."""
    out = "" if profile == "default" else f" --profile {profile}"
    if results_dir is not None and default_dir is not None \
            and Path(results_dir).resolve() != Path(default_dir).resolve():
        out += f" --results-dir {results_dir}"
    return out


def paper_markdown(paper: str, title: str, verdicts: list[Verdict], freshness: Mapping[str, str] | None = None,
                   args: str = "") -> str:
    freshness = freshness or {}
    lines = [
        f"# {paper}: paper claims vs measured results",
        "",
        title,
        "",
        f"Regenerate: `./reproduce.sh {paper}{args}`; recheck only: "
        f"`python -m mlsys_repro.common.repro.claims {paper}{args}`.",
        "Measured values are means over seeds with a 95 % Student-t CI (\"up to\" claims: the Bonferroni-corrected "
        "CI that decides significance, level shown; the band is tested with the plain 95 % CI). " + VERDICT_MEANING,
        "",
        *_counts_line(verdicts),
    ]
    for cls in CLASSES:
        vs = [v for v in verdicts if v.claim.cls == cls]
        if not vs:
            continue
        lines += ["", f"## {CLASS_TITLES[cls]}", "", _HEADER[:-1] + "| note |", _RULE + "---|"]
        for v in vs:
            note = "; ".join(x for x in (v.note, f"revised: {revisions(v)}" if v.claim.revised else "") if x)
            lines.append(_row(v, freshness, False) + f" {_md(note)} |")
    return "\n".join(lines) + "\n"


def verdict_frame(verdicts: list[Verdict]) -> pd.DataFrame:
    """One row per claim: the machine-readable verdict table."""
    return pd.DataFrame([{
        "paper": v.paper, "claim": v.claim.id, "class": v.claim.cls, "source": v.claim.source,
        "experiment": v.claim.experiment, "metric": v.claim.metric, "kind": v.claim.kind,
        "paper_value": v.claim.paper_value, "min_effect": v.claim.min_effect, "regime": v.claim.regime,
        "verdict": v.shown, "ungated": v.ungated_shown, "mean": v.mean, "lo": v.lo, "hi": v.hi,
        "ci_level": v.level, "n": v.n, "deterministic": v.point, "profile": v.profiles, "revised": revisions(v),
        "note": v.note,
    } for v in verdicts], columns=_FRAME_COLUMNS)


_FRAME_COLUMNS = ["paper", "claim", "class", "source", "experiment", "metric", "kind", "paper_value", "min_effect",
                  "regime", "verdict", "ungated", "mean", "lo", "hi", "ci_level", "n", "deterministic", "profile",
                  "revised", "note"]


def write_paper_report(paper: str, title: str, verdicts: list[Verdict], results_dir: Path,
                       freshness: Mapping[str, str] | None = None, args: str = "") -> None:
    d = Path(results_dir) / paper
    atomic_write_bytes(d / "claims.md", paper_markdown(paper, title, verdicts, freshness, args).encode())
    atomic_write_bytes(d / "claims.csv", verdict_frame(verdicts).to_csv(index=False).encode())


def _per_paper_counts(all_verdicts: Mapping[str, list[Verdict]]) -> list[str]:
    """A paper x counted-class table of verdict counts (the first screen of SUMMARY)."""
    lines = ["| paper | class | " + " | ".join(VERDICTS) + " |", "|---|---|" + "---|" * len(VERDICTS)]
    for p, vs in sorted(all_verdicts.items()):
        for cls in COUNTED:
            c = counts(vs, cls)
            if sum(c.values()):
                lines.append(f"| {p} | {cls} | " + " | ".join(str(c[k]) for k in VERDICTS) + " |")
    return lines


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
        *_per_paper_counts(all_verdicts),
        "",
        ("Result files not fresh (their verdicts are from older code or config; `./reproduce.sh --status` lists "
         f"why): {', '.join(stale)}" if stale else "Every result file is fresh (`./reproduce.sh --status`)."),
    ]
    for cls in CLASSES:
        rows = [(p, v) for p, vs in sorted(all_verdicts.items()) for v in vs if v.claim.cls == cls]
        if not rows:
            continue
        lines += ["", f"## {CLASS_TITLES[cls]}", "", "| paper " + _HEADER, "|---" + _RULE]
        lines += [_row(v, freshness.get(p, {}), True) for p, v in rows]
    return "\n".join(lines) + "\n"


def write_summary(all_verdicts: Mapping[str, list[Verdict]], results_dir: Path,
                  freshness: Mapping[str, Mapping[str, str]] | None = None) -> None:
    atomic_write_bytes(Path(results_dir) / "SUMMARY.md", summary_markdown(all_verdicts, freshness).encode())


README_BEGIN = ("<!-- verdicts:begin (generated from results/<paper>/claims.csv by "
                "`python -m mlsys_repro.common.repro.claims --sync-readmes`; do not edit) -->")
README_END = "<!-- verdicts:end -->"


def readme_block(frame: pd.DataFrame) -> str:
    """The paper README's verdict table, from the committed ``claims.csv`` rows (so a test needs no recomputation):
    claim | class | paper | ours [CI] | verdict | ungated, counted classes first."""
    order = {c: i for i, c in enumerate(CLASSES)}
    rows = frame.assign(_o=frame["class"].map(order)).sort_values("_o", kind="stable")
    lines = [README_BEGIN, "", "| claim | class | paper | ours [CI] | verdict | ungated |", "|---|---|---|---|---|---|"]
    for _, r in rows.iterrows():
        pv = "—" if pd.isna(r["paper_value"]) else _fmt(float(r["paper_value"]))
        if pd.isna(r["paper_value"]) and not pd.isna(r.get("min_effect")):
            pv = f"≥ {_fmt(float(r['min_effect']))}"
        if pd.isna(r["mean"]):
            ours = "n/a"
        elif bool(r["deterministic"]):
            ours = f"{_fmt(float(r['mean']))} (deterministic)"
        else:
            ours = f"{_fmt(float(r['mean']))} [{_fmt(float(r['lo']))}, {_fmt(float(r['hi']))}]"
        ungated = "" if pd.isna(r["ungated"]) or r["ungated"] == r["verdict"] else str(r["ungated"])
        cls = f"{r['class']} (counted)" if r["class"] in COUNTED else str(r["class"])
        lines.append(f"| `{r['claim']}` | {cls} | {pv} | {ours} | **{r['verdict']}** | {ungated or '—'} |")
    lines += ["", README_END]
    return "\n".join(lines)


def sync_readme(readme: Path, claims_csv: Path) -> bool:
    """Rewrite the verdict block of ``readme`` from ``claims_csv``; True when the file changed. A README without the
    markers gets the block after its first paragraph."""
    text = Path(readme).read_text()
    block = readme_block(pd.read_csv(claims_csv))
    if README_BEGIN.split(" (")[0] in text:
        a = text.index(README_BEGIN.split(" (")[0])
        b = text.index(README_END, a) + len(README_END)
        new = text[:a] + block + text[b:]
    else:
        head, sep, rest = text.partition("\n\n")
        para, sep2, rest2 = rest.partition("\n\n")
        new = f"{head}{sep}{para}\n\n## Claims and verdicts\n\n{block}\n\n{rest2}"
    if new == text:
        return False
    atomic_write_bytes(Path(readme), new.encode())
    return True

