"""The committed reports are what the checker makes of the committed CSVs, under the current claims and code."""

from __future__ import annotations

import shutil

from mlsys_repro.common.repro.claims import check
from tests.conftest import ROOT


def test_committed_reports_match_the_checker(tmp_path):
    res = tmp_path / "results"
    shutil.copytree(ROOT / "results", res)
    verdicts = check(results_dir=res, quiet=True)
    assert verdicts, "no paper has claims"
    stale = []
    reports = ["SUMMARY.md", "index.html", *(f"{p}/claims.{x}" for p in verdicts for x in ("md", "csv"))]
    for rel in reports:
        # the copy's regenerate commands name its folder (--results-dir); the committed ones need no flag
        made = (res / rel).read_bytes().replace(f" --results-dir {res}".encode(), b"")
        if made != (ROOT / "results" / rel).read_bytes():
            stale.append(rel)
    assert not stale, f"regenerate with `python -m mlsys_repro.common.repro.claims` and commit: {stale}"


def test_paper_readmes_show_the_committed_verdicts():
    """Each paper README carries the verdict table generated from its committed claims.csv, unedited."""
    import pandas as pd

    from mlsys_repro.common.repro.claims.report import README_BEGIN, README_END, readme_block

    out_of_sync = []
    for readme in sorted((ROOT / "mlsys_repro" / "papers").glob("*/README.md")):
        csv = ROOT / "results" / readme.parent.name / "claims.csv"
        if not csv.exists():
            continue
        text = readme.read_text()
        block = readme_block(pd.read_csv(csv))
        assert block.startswith(README_BEGIN) and block.endswith(README_END)
        if block not in text:
            out_of_sync.append(readme.parent.name)
    assert not out_of_sync, f"run `python -m mlsys_repro.common.repro.claims --sync-readmes`: {out_of_sync}"
