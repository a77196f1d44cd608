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
        if (res / rel).read_bytes() != (ROOT / "results" / rel).read_bytes():
            stale.append(rel)
    assert not stale, f"regenerate with `python -m mlsys_repro.common.repro.claims` and commit: {stale}"
